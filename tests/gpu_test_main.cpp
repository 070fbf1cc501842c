// Main of the gpu-labelled suites: without a device they say so loudly and exit 77 (ctest: skipped). Test
// cases that need a newer GPU (gpu_requirements.hpp) are left out on others and reported as skipped; when
// nothing is left to run the suite exits 77 too.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "flashrtc/device.hpp"

namespace {

std::atomic<int> g_cases_started{0};

// Counts the test cases that ran, so that a suite whose every case was left out is not reported as passed.
struct CaseCounter : doctest::IReporter {
  explicit CaseCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases_started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("flashrtc_case_counter", 1, CaseCounter);

int main(int argc, char** argv) {
  if (!flashrtc::device_available()) {
    std::fprintf(stderr, "\n*** GPU TESTS SKIPPED: %s ***\n\n", flashrtc::device_unavailable_reason().c_str());
    return 77;
  }
  const flashrtc::DeviceInfo device = flashrtc::current_device();
  std::fprintf(stderr, "GPU tests on %s (%s, %d SMs)\n", device.name.c_str(), device.arch.c_str(), device.multiprocessors);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  std::string left_out;
  if (device.arch != "sm_90a") {
    context.addFilter("test-suite-exclude", "needs-sm_90a");
    left_out = "the cases that need sm_90a";
  }
  if (device.cc_major < 9) {
    context.addFilter("test-suite-exclude", "needs-sm_90");
    left_out = "the cases that need sm_90a or sm_90";
  }
  if (!left_out.empty())
    std::fprintf(stderr, "\n*** SKIPPED on %s: %s (doctest counts them as skipped below) ***\n\n",
                 device.arch.c_str(), left_out.c_str());
  const int result = context.run();
  if (result == 0 && g_cases_started == 0 && !left_out.empty() && !context.shouldExit()) {
    std::fprintf(stderr, "\n*** GPU TESTS SKIPPED: every case of this suite needs a newer GPU than %s ***\n\n",
                 device.arch.c_str());
    return 77;
  }
  return result;
}
