"""The include rule of the runtime's layers (scripts/check_layers.py): it holds on this tree, and it fails,
naming the file and line, on a copy of the tree with an include planted up, sideways, from the host into the
runtime's internals, and from a kernel source into the host; a file outside every layer folder fails too.
docs/architecture.md's include graph is the one the script draws from this tree.

Run: python3 tests/layers/test_layer_rules.py
"""
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"
COPIED = ("runtime", "kernel_sources", "host", "tools", "bench", "reference", "docs")


def check(root, *args):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args], capture_output=True,
                          text=True)


class LayerRules(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="flashrtc-layers-"))
        for top in COPIED:
            shutil.copytree(ROOT / top, self.tmp / top, ignore=shutil.ignore_patterns("build*", "measurements"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def plant(self, path, include):
        """Adds an include after the file's first line; returns the line number it lands on."""
        file = self.tmp / path
        lines = file.read_text().splitlines(keepends=True)
        lines.insert(1, f'#include "{include}"\n')
        file.write_text("".join(lines))
        return 2

    def test_the_tree_keeps_the_rule(self):
        result = check(ROOT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("layer rule holds", result.stdout)

    def test_an_include_up_fails_naming_file_and_line(self):
        line = self.plant("runtime/src/support/hashing.cpp", "ops/call_plan.hpp")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"runtime/src/support/hashing.cpp:{line}: support includes \"ops/call_plan.hpp\" of ops: "
                      "runs up", result.stdout)
        self.assertIn("1 include(s) break the layer rule", result.stdout)

    def test_an_include_sideways_fails(self):
        line = self.plant("runtime/src/cache/disk_cache.cpp", "driver/driver_api.hpp")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"runtime/src/cache/disk_cache.cpp:{line}: cache includes \"driver/driver_api.hpp\" of "
                      "driver: runs sideways", result.stdout)

    def test_a_public_header_of_a_low_layer_including_a_high_one_fails(self):
        line = self.plant("runtime/include/flashrtc/tile.hpp", "flashrtc/attention.hpp")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"runtime/include/flashrtc/tile.hpp:{line}: support includes \"flashrtc/attention.hpp\" "
                      "of ops: runs up", result.stdout)

    def test_the_host_reaching_into_the_runtime_fails(self):
        line = self.plant("host/flashrtc/main.cpp", "cache/disk_cache.hpp")
        self.assertFalse((self.tmp / "host/flashrtc/cache").exists())
        # Resolved as the compiler would through the runtime's include root.
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"host/flashrtc/main.cpp:{line}: includes the runtime's internal \"cache/disk_cache.hpp\"",
                      result.stdout)

    def test_a_kernel_source_including_the_host_fails(self):
        line = self.plant("kernel_sources/flashrtc/mask.cuh", "flashrtc/types.hpp")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"kernel_sources/flashrtc/mask.cuh:{line}: kernel_sources includes \"flashrtc/types.hpp\"",
                      result.stdout)

    def test_a_file_outside_the_layer_folders_fails(self):
        (self.tmp / "runtime/src/stray.cpp").write_text("int stray;\n")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("runtime/src/stray.cpp: outside every layer folder", result.stdout)

    def test_an_unclassified_public_header_fails(self):
        (self.tmp / "runtime/include/flashrtc/new_thing.hpp").write_text("#pragma once\n")
        result = check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("runtime/include/flashrtc/new_thing.hpp: a public header", result.stdout)

    def test_the_architecture_page_shows_the_current_graph(self):
        result = check(ROOT, "--check-docs")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.plant("runtime/src/ops/attention.cpp", "support/hashing.hpp")
        result = check(self.tmp, "--check-docs")
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("include graph is stale", result.stdout)


if __name__ == "__main__":
    unittest.main()
