#!/usr/bin/env bash
# The Python wheel as a user gets it: `pip wheel ./python` (scikit-build-core, from PyPI, compiles
# libflashrtc.so in its own temporary build folder, nothing reused from the checkout's), installed into a
# fresh venv, imported from outside the checkout with no checkout on sys.path; the library must load from
# inside site-packages, and the binding's cpu tests then run against the installed package.
# Usage: test_wheel.sh <source dir> <python3>
set -euo pipefail
source_dir=$(cd "$1" && pwd)
python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The venv's own pip (python3-venv provides it; the system python3 may have none) builds the wheel, in
# pip's isolated build environment, with two compile jobs (CI has two cores), then installs it.
"$python" -m venv "$work/venv"
venv_python=$work/venv/bin/python
CMAKE_BUILD_PARALLEL_LEVEL=2 "$venv_python" -m pip wheel --no-deps --quiet -w "$work/dist" "$source_dir/python"
wheel=$(ls "$work"/dist/flashrtc-*.whl)
"$venv_python" -c 'import sys, zipfile; sys.exit("flashrtc/libflashrtc.so" not in zipfile.ZipFile(sys.argv[1]).namelist())' \
  "$wheel" || { echo "no flashrtc/libflashrtc.so in $wheel"; exit 1; }
"$venv_python" -m pip install --no-deps --no-index --quiet "$wheel"

mkdir "$work/elsewhere" && cd "$work/elsewhere"
env -u FLASHRTC_LIBRARY -u PYTHONPATH FLASHRTC_CACHE_DIR="$work/cache" "$venv_python" - "$source_dir" <<'PY'
import os, sys, sysconfig
source = os.path.realpath(sys.argv[1])
inside = lambda p: p == source or p.startswith(source + os.sep)
assert not any(inside(os.path.realpath(p or ".")) for p in sys.path), sys.path
import flashrtc
site = os.path.realpath(sysconfig.get_paths()["platlib"])
package = os.path.realpath(os.path.dirname(flashrtc.__file__))
assert package == os.path.join(site, "flashrtc"), (package, site)
path = os.path.realpath(flashrtc.loaded_path())
assert path == os.path.join(package, "libflashrtc.so"), path
assert flashrtc.library_version() == flashrtc.__version__, (flashrtc.library_version(), flashrtc.__version__)
print("flashrtc", flashrtc.library_version(), "loaded from", path)
PY

# The binding's cpu tests, importing the installed package (FLASHRTC_TEST_INSTALLED: no checkout path).
env -u PYTHONPATH FLASHRTC_TEST_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 FLASHRTC_CACHE_DIR="$work/cache" \
  FLASHRTC_LIBRARY="$("$venv_python" -c 'import flashrtc; print(flashrtc.loaded_path())')" \
  "$venv_python" "$source_dir/python/tests/test_binding_cpu.py"
