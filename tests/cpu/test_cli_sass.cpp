// `flashrtc cache sass` out of the box: `make deps` (which `make test` runs) installs cuobjdump and nvdisasm
// from PyPI where the command looks for them, so the SASS of a kernel compiled on a machine without the
// CUDA binary utilities or a GPU is printed. Fails, saying to run `make deps`, where they are not installed.
#include <doctest/doctest.h>

#include <string>

#include "cpu/helpers/cli_process.hpp"

#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

using namespace flashrtc::test::cli;

TEST_CASE("flashrtc cache sass disassembles an sm_80 kernel compiled without a GPU") {
  Sandbox box("flashrtc-cli-sass");
  Result r = box.run({"compile", "--dtype", "fp16", "--head-dim", "64", "--arch", "sm_80"});
  REQUIRE(r.exit_code == 0);
  const std::string key = line_of(r.out, "key:").substr(std::string("key:").size());
  const std::string lowered = line_of(r.out, "lowered name:").substr(std::string("lowered name:").size());
  const auto trimmed = [](const std::string& s) { return s.substr(s.find_first_not_of(' ')); };
  REQUIRE(trimmed(key).size() == 32);

  // Only the system's own directories on PATH: what is found is what the build looks for by itself.
  r = box.run({"cache", "sass", trimmed(key).substr(0, 12)}, {{"PATH", "/usr/bin:/bin"}});
  INFO("where the tools are missing, `make deps` installs them; stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(trimmed(lowered)) != std::string::npos);
  CHECK(r.out.find("HMMA.16816.F32") != std::string::npos);  // sm_80's fp16 tensor-core instruction
}

#endif
