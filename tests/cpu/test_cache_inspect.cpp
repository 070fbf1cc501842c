// `flashrtc cache` on real NVRTC outputs: entry fields from meta.json and ptxas's own report (a spilling
// specialization reported as such, with one warning when it is compiled), key prefixes, verify, prune,
// clear, and the last-used time a disk hit records.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>

#include "cache/artifact_cache.hpp"
#include "cache/cache_scan.hpp"
#include "cache/disk_cache.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "cpu/helpers/log_capture.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tile_config.hpp"

using namespace flashrtc;
namespace fs = std::filesystem;

namespace {

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// fp32 runs the SIMT family. 16 warps cap a thread at 128 registers (the kernel's launch bounds), and a
// 128 x 64 tile at d=128 keeps more values live than that: ptxas spills. The default tile does not.
const KernelSpec kSpilling{DType::kFloat32, 128, MaskKind::kNone, {128, 64, 16, 1}};
const KernelSpec kNormal{DType::kFloat32, 128, MaskKind::kCausalTopLeft,
                          default_forward_config(DType::kFloat32, 128, MaskKind::kCausalTopLeft)};

// A small forward request no other call in this process has made: the memory cache misses, so it is
// compiled into (or read from) the current cache directory.
detail::CompileRequest unique_request(const std::string& arch = "sm_80") {
  static std::atomic<int> counter{0};
  // fp32: the SIMT family, whose small tiles compile in a fraction of a second.
  const KernelSpec spec{DType::kFloat32, 32, MaskKind::kNone, {16, 16, 2, 1}};
  detail::CompileRequest request = detail::family_compile_request(spec, arch);
  std::ostringstream nonce;
  nonce << "-DFLASHRTC_TEST_NONCE=" << ::getpid() << "_" << counter++ << "_" << std::random_device{}();
  request.nvrtc.options.push_back(nonce.str());
  request.inputs.options = detail::join_options(request.nvrtc.options);
  return request;
}

void set_mtime(const fs::path& path, std::int64_t unix_seconds) {
  const timespec times[2] = {{static_cast<time_t>(unix_seconds), 0}, {static_cast<time_t>(unix_seconds), 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("cache entries: every field of a real entry, spills from ptxas's report, one warning at compile") {
  test::TempDir dir("flashrtc-inspect-fields");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  REQUIRE(check_forward_config(kSpilling.dtype, kSpilling.head_dim, kSpilling.tile, kSmemBytesSm90) == "");

  test::LogCapture log;
  const std::int64_t before = now_unix();
  const CompiledKernelInfo spilling = compile_kernel(kSpilling, "sm_80");
  const CompiledKernelInfo normal = compile_kernel(kNormal, "sm_80");
  INFO("spilling: " << spilling.resources.registers << " registers, spill " << spilling.resources.spill_store_bytes
                    << "/" << spilling.resources.spill_load_bytes);
  REQUIRE(spilling.source == CacheSource::kCompiled);
  REQUIRE(spilling.resources.spills());
  REQUIRE_FALSE(normal.resources.spills());

  // One warning, for the spilling kernel, naming its key and spill bytes; a second request stays quiet.
  compile_kernel(kSpilling, "sm_80");
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find(spilling.key) != std::string::npos);
  CHECK(warnings[0].find(std::to_string(spilling.resources.spill_store_bytes) + " bytes stored") != std::string::npos);
  CHECK(warnings[0].find(std::to_string(spilling.resources.spill_load_bytes) + " bytes loaded") != std::string::npos);

  const std::vector<CacheEntry> entries = list_cache_entries();
  REQUIRE(entries.size() == 2);
  for (const CacheEntry& e : entries) {
    const bool is_spilling = e.key == spilling.key;
    const CompiledKernelInfo& info = is_spilling ? spilling : normal;
    const KernelSpec& spec = is_spilling ? kSpilling : kNormal;
    INFO(e.key);
    CHECK(e.problem == "");
    CHECK(e.key == info.key);
    CHECK(e.arch == "sm_80");
    CHECK(e.dir == info.entry_dir);
    CHECK(e.kernel == portable_family(Operation::kForward, DType::kFloat32).name);
    CHECK(e.name_expression == info.name_expression);
    CHECK(e.lowered_name == info.lowered_name);
    CHECK(e.dtype == "fp32");
    CHECK(e.head_dim == 128);
    CHECK(e.mask == std::string(to_string(spec.mask)));
    CHECK(TileConfig{e.tile.block_m, e.tile.block_n, e.tile.warps, e.tile.stages} == spec.tile);
    CHECK(e.smem_bytes == forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile));
    CHECK(e.resources.registers == info.resources.registers);
    CHECK(e.resources.registers > 0);
    CHECK(e.resources.spill_store_bytes == info.resources.spill_store_bytes);
    CHECK(e.resources.spill_load_bytes == info.resources.spill_load_bytes);
    CHECK(e.resources.stack_frame_bytes == info.resources.stack_frame_bytes);
    CHECK(e.resources.spills() == is_spilling);
    CHECK(e.compile_ms == doctest::Approx(info.compile_ms));
    CHECK(e.compile_ms > 0);
    CHECK(e.size_bytes > fs::file_size(e.cubin_path));
    CHECK(e.created_unix >= before);
    CHECK(e.last_used_unix >= before);
    CHECK(e.last_used_unix <= now_unix());
    CHECK(fs::exists(e.ptx_path));
    CHECK(test::read_text(e.ptx_path).find(".entry") != std::string::npos);
    CHECK(test::read_text(e.log_path).find("bytes spill stores") != std::string::npos);
    CHECK(e.meta_json.find("\"entry_digest\"") != std::string::npos);
    CHECK(e.nvrtc_build == nvrtc_build());
  }
}

TEST_CASE("cache entries: a key is found by a unique prefix; none or several matches are errors naming it") {
  test::TempDir dir("flashrtc-inspect-prefix");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto a = detail::get_artifact(unique_request());
  const auto b = detail::get_artifact(unique_request());
  CHECK(find_cache_entry(a->key).key == a->key);
  // Two entries whose keys share no first character are found by one character each.
  if (a->key[0] != b->key[0]) CHECK(find_cache_entry(a->key.substr(0, 1)).key == a->key);
  std::size_t common = 0;
  while (a->key[common] == b->key[common]) ++common;
  CHECK(find_cache_entry(b->key.substr(0, common + 1)).key == b->key);

  // A copy under a key sharing a's first 6 characters makes that prefix ambiguous.
  const fs::path twin = a->entry_dir.parent_path() / (a->key.substr(0, 6) + std::string(26, 'f'));
  fs::copy(a->entry_dir, twin, fs::copy_options::recursive);
  const Error ambiguous = test::expect_error([&] { find_cache_entry(a->key.substr(0, 6)); });
  CHECK(ambiguous.code() == ErrorCode::kInvalidArgument);
  CHECK(ambiguous.message().find("matches 2 entries") != std::string::npos);
  CHECK(ambiguous.message().find(a->key.substr(0, 6)) != std::string::npos);
  if (a->key[6] != 'f') CHECK(find_cache_entry(a->key.substr(0, 7)).key == a->key);

  const Error none = test::expect_error([&] { find_cache_entry("zz"); });
  CHECK(none.code() == ErrorCode::kInvalidArgument);
  CHECK(none.message().find("key=zz") != std::string::npos);
  CHECK(test::expect_error([&] { find_cache_entry(""); }).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("cache verify: re-hashes every entry and drops only the bad ones") {
  test::TempDir dir("flashrtc-inspect-verify");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto good = detail::get_artifact(unique_request());
  const auto truncated = detail::get_artifact(unique_request());
  const auto altered = detail::get_artifact(unique_request());
  const auto garbled = detail::get_artifact(unique_request());
  const auto renamed = detail::get_artifact(unique_request());
  {
    const std::string cubin = test::read_text(truncated->entry_dir / "kernel.cubin");
    test::write_text(truncated->entry_dir / "kernel.cubin", cubin.substr(0, cubin.size() / 2));
    std::string flipped = test::read_text(altered->entry_dir / "kernel.cubin");
    flipped[flipped.size() / 2] ^= 0x5a;
    test::write_text(altered->entry_dir / "kernel.cubin", flipped);
    test::write_text(garbled->entry_dir / "meta.json", "{\"key\": ");
    fs::rename(renamed->entry_dir, renamed->entry_dir.parent_path() / std::string(32, '0'));
  }
  const fs::path arch_dir = good->entry_dir.parent_path();
  const fs::path old_tmp = arch_dir / ".tmp-crashed-123", new_tmp = arch_dir / ".tmp-writing-456";
  fs::create_directory(old_tmp);
  fs::create_directory(new_tmp);
  set_mtime(old_tmp, now_unix() - 2 * 3600);

  const CacheCleanup result = verify_cache();
  CHECK(result.entries_checked == 5);
  REQUIRE(result.removed.size() == 5);  // four entries and the old temporary
  std::string reasons;
  for (const RemovedEntry& r : result.removed) reasons += r.key + ": " + r.reason + "\n";
  INFO(reasons);
  CHECK(reasons.find(truncated->key + ": kernel.cubin has the wrong size") != std::string::npos);
  CHECK(reasons.find(altered->key + ": the entry digest does not match") != std::string::npos);
  CHECK(reasons.find(garbled->key + ": meta.json does not parse") != std::string::npos);
  CHECK(reasons.find(std::string(32, '0') + ": meta.json names key") != std::string::npos);
  CHECK(reasons.find(".tmp-crashed-123: temporary") != std::string::npos);
  CHECK(result.bytes_kept > 0);

  CHECK(fs::exists(good->entry_dir));
  CHECK(fs::exists(new_tmp));  // may belong to a running write
  CHECK_FALSE(fs::exists(old_tmp));
  CHECK(cache_entry_count() == 1);
  CHECK(detail::DiskCache(cache_root()).load(good->inputs).has_value());
  CHECK(verify_cache().removed.empty());
}

TEST_CASE("cache prune: by last use, then least recently used first down to a size") {
  test::TempDir dir("flashrtc-inspect-prune");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto oldest = detail::get_artifact(unique_request());
  const auto old = detail::get_artifact(unique_request());
  const auto recent = detail::get_artifact(unique_request());
  const auto newest = detail::get_artifact(unique_request());
  const std::int64_t now = now_unix();
  set_mtime(oldest->entry_dir / "meta.json", now - 30 * 86400);
  set_mtime(old->entry_dir / "meta.json", now - 10 * 86400);
  set_mtime(recent->entry_dir / "meta.json", now - 3600);

  CHECK(prune_cache(std::nullopt, std::nullopt).removed.empty());
  const CacheCleanup by_age = prune_cache(std::int64_t{7 * 86400}, std::nullopt);
  REQUIRE(by_age.removed.size() == 2);
  CHECK(by_age.removed[0].key == oldest->key);
  CHECK(by_age.removed[1].key == old->key);
  CHECK(by_age.removed[0].bytes > 0);
  CHECK(cache_entry_count() == 2);

  const std::uint64_t newest_bytes = detail::directory_bytes(newest->entry_dir);
  const CacheCleanup by_size = prune_cache(std::nullopt, newest_bytes);
  REQUIRE(by_size.removed.size() == 1);
  CHECK(by_size.removed[0].key == recent->key);
  CHECK(by_size.bytes_kept == newest_bytes);
  CHECK(fs::exists(newest->entry_dir));
  CHECK(prune_cache(std::nullopt, std::uint64_t{0}).removed.size() == 1);
  CHECK(cache_entry_count() == 0);
}

TEST_CASE("cache entries: a disk hit marks the entry as used") {
  test::TempDir dir("flashrtc-inspect-touch");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto artifact = detail::get_artifact(unique_request());
  const fs::path meta = artifact->entry_dir / "meta.json";
  set_mtime(meta, now_unix() - 5 * 86400);
  CHECK(find_cache_entry(artifact->key).last_used_unix < now_unix() - 4 * 86400);
  REQUIRE(detail::DiskCache(cache_root()).load(artifact->inputs).has_value());
  CHECK(find_cache_entry(artifact->key).last_used_unix >= now_unix() - 60);
}

TEST_CASE("cache clear: every entry of every arch goes, the tuning database stays") {
  test::TempDir dir("flashrtc-inspect-clear");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  detail::get_artifact(unique_request());
  detail::get_artifact(unique_request("sm_90a"));
  test::write_text(dir.path() / "tuning_db.json", "{}");
  REQUIRE(cache_entry_count() == 2);
  const CacheCleanup result = clear_cache();
  CHECK(result.removed.size() == 2);
  CHECK(cache_entry_count() == 0);
  CHECK_FALSE(fs::exists(cache_root()));
  CHECK(fs::exists(dir.path() / "tuning_db.json"));
  CHECK(list_cache_entries().empty());
  CHECK(clear_cache().removed.empty());
}
