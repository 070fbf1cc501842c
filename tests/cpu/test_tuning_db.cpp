// The tuning database: round trip, merging of concurrent tunes (threads and processes), read once per
// process, and unreadable, corrupt, stale or partly malformed files ignored with a warning.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "cpu/helpers/log_capture.hpp"
#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tuning_db.hpp"
#include "support/log.hpp"
#include "tuning/tuning_db_file.hpp"

using namespace flashrtc;
namespace fs = std::filesystem;

namespace {

TuningKey key(int head_dim, std::int64_t seqlen = 4096, const std::string& gpu = "Test GPU") {
  return make_tuning_key(gpu, "sm_90a", DType::kBFloat16, head_dim, MaskKind::kCausalTopLeft, seqlen, seqlen);
}

}  // namespace

TEST_CASE("tuning db: keys, buckets and the file's location") {
  CHECK(seqlen_bucket(1) == 1);
  CHECK(seqlen_bucket(2) == 2);
  CHECK(seqlen_bucket(3) == 4);
  CHECK(seqlen_bucket(3000) == 4096);
  CHECK(seqlen_bucket(4096) == 4096);
  CHECK(seqlen_bucket(4097) == 8192);
  const TuningKey k = key(128, 3000);
  CHECK(k.seqlen_q_bucket == 4096);
  CHECK(k.nvrtc_version == nvrtc_version());
  CHECK(k.family == "wgmma");  // the family bf16 d=128 runs on in an sm_90a key
  CHECK(to_string(k) == "Test GPU sm_90a nvrtc " + nvrtc_version() + " " + k.family +
                            " bf16 d=128 mask=causal Nq<=4096 Nk<=4096");
  CHECK_FALSE(k == key(128, 5000));

  test::TuningSandbox sandbox("flashrtc-tunedb-path");
  CHECK(tuning_db_path() == sandbox.db());
  RuntimeConfig config = runtime_config();
  config.tune_db.clear();
  test::ConfigOverride no_override(config);
  CHECK(tuning_db_path() == config.cache_dir / "tuning_db.json");
}

TEST_CASE("tuning db: an entry written is read back whole, by this process and after a fresh read") {
  test::TuningSandbox sandbox("flashrtc-tunedb-roundtrip");
  CHECK(tuning_db_entries().empty());
  CHECK_FALSE(fs::exists(sandbox.db()));
  TuningEntry e = test::make_entry(key(128), {64, 32, 4, 2}, 37.25);
  e.median_ms = 7.125;
  e.batch = 3;
  e.heads = 12;
  e.seqlen_q = 4000;
  e.seqlen_kv = 3999;
  e.space = "full";
  e.tuned_unix = 1712345678;
  record_tuning_entry(e);
  REQUIRE(fs::exists(sandbox.db()));

  const auto check_same = [&](const TuningEntry& got) {
    CHECK(got.key == e.key);
    CHECK(got.config == e.config);
    CHECK(got.median_ms == e.median_ms);
    CHECK(got.tflops == e.tflops);
    CHECK(got.batch == 3);
    CHECK(got.heads == 12);
    CHECK(got.seqlen_q == 4000);
    CHECK(got.seqlen_kv == 3999);
    CHECK(got.space == "full");
    CHECK(got.tuned_unix == 1712345678);
  };
  REQUIRE(find_tuning_entry(e.key).has_value());
  check_same(*find_tuning_entry(e.key));
  detail::forget_loaded_tuning_dbs();
  REQUIRE(tuning_db_entries().size() == 1);
  check_same(tuning_db_entries()[0]);
  CHECK_FALSE(find_tuning_entry(key(64)).has_value());
  // Human-readable, with a timestamp beside the number.
  CHECK(test::read_text(sandbox.db()).find("\"tuned_at\": \"2024-04-05T19:34:38Z\"") != std::string::npos);
  // No temporaries left beside it.
  for (const auto& item : fs::directory_iterator(sandbox.db().parent_path()))
    CHECK(item.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("tuning db: tunes of other keys are merged, a tune of the same key replaces its entry") {
  test::TuningSandbox sandbox("flashrtc-tunedb-merge");
  record_tuning_entry(test::make_entry(key(64), {64, 64, 4, 1}));
  record_tuning_entry(test::make_entry(key(128), {64, 32, 4, 1}));
  // Another process's copy: it read the file before the second write... and merges anyway, because a
  // write re-reads the file under the lock.
  test::write_text(sandbox.db(), detail::tuning_db_text({test::make_entry(key(256), {32, 32, 4, 1})}) );
  record_tuning_entry(test::make_entry(key(128), {32, 64, 2, 2}, 20.0));
  detail::forget_loaded_tuning_dbs();
  const auto entries = tuning_db_entries();
  CHECK(entries.size() == 2);  // 256 from "the other process", 128 replaced; 64 was overwritten by that process
  REQUIRE(find_tuning_entry(key(128)).has_value());
  CHECK(find_tuning_entry(key(128))->config == TileConfig{32, 64, 2, 2});
  CHECK(find_tuning_entry(key(256)).has_value());
}

TEST_CASE("tuning db: 8 threads and 4 processes recording at once lose no entry") {
  test::TuningSandbox sandbox("flashrtc-tunedb-concurrent");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t] { record_tuning_entry(test::make_entry(key(8 + 8 * t), {64, 64, 4, 1})); });
  for (std::thread& thread : threads) thread.join();

  // Processes: each forked child records 5 keys of its own GPU name and exits.
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        for (int i = 0; i < 5; ++i)
          record_tuning_entry(test::make_entry(key(64, 1 << (i + 8), "GPU " + std::to_string(p)), {64, 64, 4, 1}));
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  detail::forget_loaded_tuning_dbs();
  CHECK(tuning_db_entries().size() == 8 + 4 * 5);
}

TEST_CASE("tuning db: read once per process; a write by this process is seen at once") {
  test::TuningSandbox sandbox("flashrtc-tunedb-once");
  record_tuning_entry(test::make_entry(key(64), {64, 64, 4, 1}));
  CHECK(tuning_db_entries().size() == 1);
  // Another process writes: this one keeps the copy it read.
  test::write_text(sandbox.db(), detail::tuning_db_text({test::make_entry(key(64), {64, 64, 4, 1}),
                                                         test::make_entry(key(128), {64, 64, 4, 1})}));
  CHECK(tuning_db_entries().size() == 1);
  detail::forget_loaded_tuning_dbs();
  CHECK(tuning_db_entries().size() == 2);
}

TEST_CASE("tuning db: corrupt, stale, foreign and unreadable files are ignored with a warning") {
  const struct {
    const char* what;
    std::string text;
    const char* says;
  } cases[] = {
      {"not JSON", "{\"format_version\": 1, \"entries\": [", "not JSON"},
      {"binary garbage", std::string("\x00\xff\x13garbage", 10), "not JSON"},
      {"another format version", "{\"format_version\": 99, \"entries\": []}", "stale: format version 99"},
      {"a JSON array", "[1, 2, 3]", "no format_version"},
      {"no entries", "{\"format_version\": 1}", "no entries array"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    test::TuningSandbox sandbox("flashrtc-tunedb-corrupt");
    fs::create_directories(sandbox.db().parent_path());
    test::write_text(sandbox.db(), c.text);
    test::LogCapture log;
    std::vector<TuningEntry> entries;
    REQUIRE_NOTHROW(entries = tuning_db_entries());
    CHECK(entries.empty());
    const auto warnings = log.warnings();
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(sandbox.db().string()) != std::string::npos);
    CHECK(warnings[0].find(c.says) != std::string::npos);
    CHECK(warnings[0].find("ignored") != std::string::npos);

    // A tune then starts a fresh file and keeps the unusable one aside.
    record_tuning_entry(test::make_entry(key(64), {64, 64, 4, 1}));
    CHECK(fs::exists(sandbox.db().string() + ".unreadable"));
    CHECK(test::read_text(sandbox.db().string() + ".unreadable") == c.text);
    detail::forget_loaded_tuning_dbs();
    CHECK(tuning_db_entries().size() == 1);
  }
  SUBCASE("a directory where the file should be") {
    test::TuningSandbox sandbox("flashrtc-tunedb-dir");
    fs::create_directories(sandbox.db());
    test::LogCapture log;
    CHECK(tuning_db_entries().empty());
    REQUIRE(log.warnings().size() == 1);
    CHECK(log.warnings()[0].find("not a regular file") != std::string::npos);
  }
}

TEST_CASE("tuning db: a malformed entry is skipped, the others are used") {
  test::TuningSandbox sandbox("flashrtc-tunedb-entry");
  fs::create_directories(sandbox.db().parent_path());
  std::string text = detail::tuning_db_text({test::make_entry(key(64), {64, 64, 4, 1}),
                                             test::make_entry(key(128), {64, 32, 4, 1})});
  // Damage the first entry's dtype.
  const auto at = text.find("\"bf16\"");
  REQUIRE(at != std::string::npos);
  text.replace(at, 6, "\"int4\"");
  test::write_text(sandbox.db(), text);
  test::LogCapture log;
  const auto entries = tuning_db_entries();
  REQUIRE(entries.size() == 1);
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("entry 0 ignored") != std::string::npos);
  CHECK(warnings[0].find("int4") != std::string::npos);
}

TEST_CASE("tuning db: an integer that does not fit its field skips the entry, never truncated") {
  test::TuningSandbox sandbox("flashrtc-tunedb-range");
  fs::create_directories(sandbox.db().parent_path());
  struct Damage {
    const char* what;
    const char* field;
    std::string value;  // the JSON text put in place of the field's value
  };
  // 2^32 + 64 read as an int is 64; 2^64 - 1 read as an int64 is -1.
  const Damage damages[] = {{"block_m 2^32 + 64", "\"block_m\": 64", "\"block_m\": 4294967360"},
                            {"block_m a float", "\"block_m\": 64", "\"block_m\": 64.5"},
                            {"block_m 1e30", "\"block_m\": 64", "\"block_m\": 1e30"},
                            {"warps negative", "\"warps\": 4", "\"warps\": -4"},
                            {"head_dim as a string", "\"head_dim\": 64", "\"head_dim\": \"big\""},
                            {"seqlen bucket 2^64 - 1", "\"seqlen_q_bucket\": 4096",
                             "\"seqlen_q_bucket\": 18446744073709551615"},
                            {"batch over int64", "\"batch\": 2", "\"batch\": 9223372036854775808"}};
  for (const Damage& d : damages) {
    INFO(d.what);
    // Entry 0 (d=64) is damaged at the field's first occurrence; entry 1 (d=128) stays sound.
    std::string text = detail::tuning_db_text({test::make_entry(key(64), {64, 64, 4, 1}),
                                               test::make_entry(key(128), {64, 32, 4, 1})});
    const auto at = text.find(d.field);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string(d.field).size(), d.value);
    test::write_text(sandbox.db(), text);
    const detail::TuningDbContents contents = detail::read_tuning_db_file(sandbox.db());
    CHECK_FALSE(contents.ignored);
    REQUIRE(contents.entries.size() == 1);
    CHECK(contents.entries[0].key.head_dim == 128);
    REQUIRE(contents.problems.size() == 1);
    CHECK(contents.problems[0].find("entry 0 ignored") != std::string::npos);
  }
  // The warning names the field and the range in plain numbers.
  std::string text = detail::tuning_db_text({test::make_entry(key(64), {64, 64, 4, 1})});
  text.replace(text.find("\"block_m\": 64"), 13, "\"block_m\": 4294967360");
  test::write_text(sandbox.db(), text);
  test::LogCapture log;
  CHECK(tuning_db_entries().empty());
  REQUIRE(log.warnings().size() == 1);
  CHECK(log.warnings()[0].find("block_m=4294967360: must be an integer from 1 to 2147483647") != std::string::npos);
}

TEST_CASE("tuning db: a file nested 10,000 deep, or larger than its limit, is ignored without a crash") {
  test::TuningSandbox sandbox("flashrtc-tunedb-deep");
  fs::create_directories(sandbox.db().parent_path());
  test::write_text(sandbox.db(), std::string(10000, '[') + std::string(10000, ']'));
  detail::TuningDbContents contents = detail::read_tuning_db_file(sandbox.db());
  CHECK(contents.ignored);
  REQUIRE(contents.problems.size() == 1);
  CHECK(contents.problems[0].find("nests deeper than") != std::string::npos);
  test::write_text(sandbox.db(), "");
  fs::resize_file(sandbox.db(), std::uint64_t{65} << 20);  // sparse: no disk space used
  contents = detail::read_tuning_db_file(sandbox.db());
  CHECK(contents.ignored);
  REQUIRE(contents.problems.size() == 1);
  CHECK(contents.problems[0].find("larger than its limit") != std::string::npos);
}

TEST_CASE("tuning db: seqlen_bucket covers 1 to 2^62 and names that range beyond it, without looping") {
  constexpr std::int64_t kTop = std::int64_t{1} << 62;
  CHECK(seqlen_bucket(0) == 1);
  CHECK(seqlen_bucket(kTop - 1) == kTop);
  CHECK(seqlen_bucket(kTop) == kTop);
  CHECK(kMaxSeqlenBucket == kTop);
  for (const std::int64_t seqlen : {kTop + 1, std::int64_t{4611686018427387905}, std::numeric_limits<std::int64_t>::max()}) {
    INFO(seqlen);
    const Error e = test::expect_error([&] { seqlen_bucket(seqlen); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().find("seqlen=" + std::to_string(seqlen)) != std::string::npos);
    CHECK(e.message().find("from 1 to 4611686018427387904") != std::string::npos);
  }
  CHECK(test::expect_error([&] { key(128, kTop + 1); }).code() == ErrorCode::kInvalidArgument);
}
