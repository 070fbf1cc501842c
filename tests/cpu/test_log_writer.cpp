// set_log_writer: while a writer is set it receives every log line, formatted and whole; once reset, it
// receives nothing more (a progress line's owner relies on both).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/log_writer.hpp"

using namespace flashrtc;

namespace {

// A corrupt tuning database is read once per process and path, with one warning.
void warn_once(const std::string& tag) {
  test::TuningSandbox sandbox(tag);
  std::filesystem::create_directories(sandbox.db().parent_path());
  test::write_text(sandbox.db(), "{ not json");
  CHECK(tuning_db_entries().empty());
}

}  // namespace

TEST_CASE("set_log_writer takes the log lines while set, and stops taking them once reset") {
  std::mutex mutex;
  std::vector<std::string> lines;
  set_log_writer([&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  });
  warn_once("flashrtc-log-writer-set");
  set_log_writer({});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("[flashrtc] [warning] tuning database ") != std::string::npos);
  CHECK(lines[0].find("ignored, calls use the default tiles") != std::string::npos);
  CHECK(lines[0].back() == '\n');
  CHECK(std::count(lines[0].begin(), lines[0].end(), '\n') == 1);

  warn_once("flashrtc-log-writer-reset");  // to stderr again
  CHECK(lines.size() == 1);
}
