# Sourced by run_install_test.sh and run_build_tree_test.sh (after they set $work and $source_dir): the steps of
# an outside project that uses flashrtc through find_package.
step() { echo "== $*"; }
quiet() {  # runs a command, showing its output only when it fails
  local log=$work/step.log
  if ! "$@" >"$log" 2>&1; then cat "$log"; echo "FAILED: $*"; exit 1; fi
}
expect() {  # expect <text> <file>: the file holds a line with text
  grep -qF -- "$1" "$2" || { cat "$2"; echo "FAILED: no line with '$1' above"; exit 1; }
}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# build_example <-D option naming the package>: host/example configured and built in $work/example.
build_example() {
  quiet cmake -S "$source_dir/host/example" -B "$work/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$1"
  quiet cmake --build "$work/example"
}
# expect_library_under <dir>: the example resolves libflashrtc from dir, not from another copy.
expect_library_under() {
  local library
  library=$(ldd "$work/example/app" | awk '/libflashrtc\.so/ {print $3}')
  case $library in
    "$1"/*) echo "app links $library" ;;
    *) echo "FAILED: app resolves libflashrtc to '$library', outside $1"; exit 1 ;;
  esac
}
# build_external_family <-D option naming the package>: tests/install/external_family built in $work.
build_external_family() {
  quiet cmake -S "$source_dir/tests/install/external_family" -B "$work/external_family" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release "$1"
  quiet cmake --build "$work/external_family"
}
