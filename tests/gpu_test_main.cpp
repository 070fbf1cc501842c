// Main of the gpu-labelled suites: without a device they say so loudly and exit 77 (ctest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "flashrtc/device.hpp"

int main(int argc, char** argv) {
  if (!flashrtc::device_available()) {
    std::fprintf(stderr, "\n*** GPU TESTS SKIPPED: %s ***\n\n", flashrtc::device_unavailable_reason().c_str());
    return 77;
  }
  const flashrtc::DeviceInfo device = flashrtc::current_device();
  std::fprintf(stderr, "GPU tests on %s (%s, %d SMs)\n", device.name.c_str(), device.arch.c_str(), device.multiprocessors);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
