// What the disk cache promises under hostile conditions (docs/RELIABILITY.md): a read-only or uncreatable
// cache directory runs from memory with one warning; entries cannot lie (one digest over every file and
// field); reads are bounded (a link to /dev/zero, a FIFO, a 10,000-deep meta.json, invalid UTF-8); the
// NVRTC build is part of the key; maintenance leaves no lock files and reports what it cannot remove; links
// planted below the cache directory are never followed, and sizes are compared before files are read.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/artifact_cache.hpp"
#include "cache/cache_entry_layout.hpp"
#include "cache/cache_scan.hpp"
#include "cache/disk_cache.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "compile/ptxas_report.hpp"
#include "cpu/helpers/compile_artifact.hpp"
#include "cpu/helpers/file_permissions.hpp"
#include "cpu/helpers/log_capture.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "support/file_lock.hpp"

using namespace flashrtc;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A small forward request no other call in this process has made (a -D option is part of the key).
detail::CompileRequest unique_request() {
  static std::atomic<int> counter{0};
  const KernelSpec spec{DType::kFloat32, 32, MaskKind::kNone, {16, 16, 2, 1}};
  detail::CompileRequest request = detail::family_compile_request(spec, "sm_80");
  std::ostringstream nonce;
  nonce << "-DFLASHRTC_TEST_NONCE=" << ::getpid() << "_" << counter++ << "_" << std::random_device{}();
  request.nvrtc.options.push_back(nonce.str());
  request.inputs.options = detail::join_options(request.nvrtc.options);
  return request;
}

using test::compile_artifact;

std::vector<std::string> lock_files(const fs::path& root) {
  std::vector<std::string> found;
  for (const fs::path& path : detail::cache_lock_files(root)) found.push_back(path.filename().string());
  return found;
}

// A root without CAP_SETUID (some containers) writes everywhere and cannot become another user: then the
// read-only cases cannot be staged, and say so instead of failing.
constexpr const char* kCannotDropRoot = "cannot become nobody";

// Runs body in a child process that cannot write dir: the directory tree is made read-only, and root (who
// writes regardless of permissions) becomes nobody. Returns what body returned, "crash" if it did not.
// after_lockdown runs in this process once the tree is read-only.
std::string run_without_write_access(const fs::path& dir, const std::function<std::string()>& body,
                                     const std::function<void()>& after_lockdown = {}) {
  test::set_writable(dir, false);
  if (after_lockdown) after_lockdown();
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(out[0]);
    std::string result;
    if (::geteuid() == 0 && (::setgid(test::kNobodyId) != 0 || ::setuid(test::kNobodyId) != 0))
      result = kCannotDropRoot;
    if (result.empty()) {
      try {
        result = body();
      } catch (const Error& e) {
        result = std::string("error:") + to_string(e.code()) + ": " + e.message();
      } catch (const std::exception& e) {
        result = std::string("exception: ") + e.what();
      }
    }
    const ssize_t ignored = ::write(out[1], result.data(), result.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(out[1]);
  std::string result;
  char buffer[4096];
  for (ssize_t got; (got = ::read(out[0], buffer, sizeof(buffer))) > 0;) result.append(buffer, got);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  test::set_writable(dir, true);
  return WIFEXITED(status) ? result : "crash";
}

// Every way to see an entry agrees: the load, the listing and verify's check give the same problem.
void expect_bad_everywhere(const detail::CompileRequest& request, const fs::path& entry,
                           const std::string& why) {
  INFO(why);
  std::string load_problem;
  CHECK_FALSE(detail::DiskCache(cache_root()).load(request.inputs, &load_problem).has_value());
  CHECK(load_problem.find(why) != std::string::npos);
  CHECK(detail::cache_entry_problem(entry) == load_problem);
  bool listed = false;
  for (const CacheEntry& e : list_cache_entries())
    if (e.dir == entry) {
      listed = true;
      CHECK(e.problem == load_problem);
    }
  CHECK(listed);
}

}  // namespace

// ---- read-only cache --------------------------------------------------------------------------------------

TEST_CASE("read-only cache: a cache directory that cannot be created means memory only, with one warning") {
  test::TempDir dir("flashrtc-ro-uncreatable");
  test::write_text(dir.path() / "a-file", "not a directory");
  // Below a regular file nothing can be created, whoever runs the test (root included).
  test::ConfigOverride config(test::config_with_cache_dir(dir.path() / "a-file" / "cache"));
  test::LogCapture log;
  CacheSource how = CacheSource::kMemory;
  const auto first = detail::get_artifact(unique_request(), &how);
  CHECK(how == CacheSource::kCompiled);
  CHECK(first->entry_dir.empty());
  const auto second = detail::get_artifact(unique_request(), &how);
  CHECK(how == CacheSource::kCompiled);
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("Not a directory") != std::string::npos);
  CHECK(warnings[0].find("stay in memory") != std::string::npos);
  // Maintenance of a cache that does not exist has nothing to do.
  CHECK(verify_cache().removed.empty());
  CHECK(list_cache_entries().empty());
}

TEST_CASE(
    "read-only cache: a warmed cache serves its kernels, refuses a missing one under REQUIRE_CACHED, "
    "and compiles in memory otherwise") {
  test::TempDir dir("flashrtc-ro-warm");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest cached = unique_request(), missing = unique_request(),
                               other = unique_request();
  // Warmed as a deployment ships it (no lock files), and never in this process's memory cache.
  detail::DiskCache(cache_root()).store(compile_artifact(cached));

  const std::string result = run_without_write_access(dir.path(), [&] {
    std::string out;
    RuntimeConfig strict = test::config_with_cache_dir(dir.path());
    strict.require_cached = true;
    {
      test::ConfigOverride guard(strict);
      CacheSource how = CacheSource::kMemory;
      detail::get_artifact(cached, &how);
      out += std::string("cached:") + to_string(how) + ";";
      try {
        detail::get_artifact(missing);
        out += "missing:served;";
      } catch (const Error& e) {
        out += std::string("missing:") + to_string(e.code()) + ";";
      }
    }
    test::LogCapture log;
    CacheSource how = CacheSource::kMemory;
    const auto compiled = detail::get_artifact(missing, &how);
    detail::get_artifact(other);
    out += std::string("unrestricted:") + to_string(how) +
           (compiled->entry_dir.empty() ? ":memory" : ":disk") + ";";
    out += "warnings:" + std::to_string(log.warnings().size()) + ";";
    for (const std::string& w : log.warnings()) out += w + ";";
    return out;
  });
  INFO(result);
  if (result == kCannotDropRoot) {
    MESSAGE("skipped: running as root without the right to become nobody, nothing here is read-only");
    return;
  }
  CHECK(result.find("cached:disk;") != std::string::npos);
  CHECK(result.find("missing:CompileDisallowed;") != std::string::npos);
  CHECK(result.find("unrestricted:compiled:memory;") != std::string::npos);
  CHECK(result.find("warnings:1;") != std::string::npos);
  CHECK(
      std::regex_search(result, std::regex("cannot be written .*(Permission denied|Read-only file system)")));
  CHECK(cache_entry_count() == 1);
}

TEST_CASE(
    "read-only cache: a lock that can be taken but an entry that cannot be stored (a full disk) costs "
    "one warning, not the call") {
  test::TempDir dir("flashrtc-ro-store");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest first = unique_request(), second = unique_request();
  const detail::DiskCache disk(cache_root());
  for (const auto* request : {&first, &second}) {
    fs::create_directories(disk.entry_dir(request->inputs).parent_path());
    test::write_text(detail::entry_lock_path(disk.entry_dir(request->inputs)), "");
  }
  const std::string result = run_without_write_access(
      dir.path(),
      [&] {
        test::LogCapture log;
        CacheSource how = CacheSource::kMemory;
        const auto artifact = detail::get_artifact(first, &how);
        detail::get_artifact(second);
        std::string out = std::string(to_string(how)) + (artifact->entry_dir.empty() ? ":memory;" : ":disk;");
        out += "warnings:" + std::to_string(log.warnings().size()) + ";";
        for (const std::string& w : log.warnings()) out += w + ";";
        return out;
      },
      [&] {
        // Lock files anyone may open for writing, in directories nobody may write: the lock is taken, the
        // entry's temporary directory cannot be made.
        for (const auto* request : {&first, &second})
          fs::permissions(detail::entry_lock_path(disk.entry_dir(request->inputs)), fs::perms::all);
      });
  INFO(result);
  if (result == kCannotDropRoot) {
    MESSAGE("skipped: running as root without the right to become nobody, nothing here is read-only");
    return;
  }
  CHECK(result.find("compiled:memory;") != std::string::npos);
  CHECK(result.find("warnings:1;") != std::string::npos);
  CHECK(std::regex_search(result, std::regex("cannot be written \\(cannot create directory .*\\.tmp-.*"
                                             "(Permission denied|Read-only file system)")));
  CHECK(cache_entry_count() == 0);
}

TEST_CASE("read-only cache: verify, prune and clear report what they cannot remove instead of throwing") {
  test::TempDir dir("flashrtc-ro-maintenance");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto good = detail::get_artifact(unique_request());
  const auto bad = detail::get_artifact(unique_request());
  std::string cubin = test::read_text(bad->entry_dir / "kernel.cubin");
  cubin[cubin.size() / 2] ^= 0x5a;
  test::write_text(bad->entry_dir / "kernel.cubin", cubin);

  const std::string result = run_without_write_access(dir.path(), [&] {
    std::ostringstream out;
    const CacheCleanup verified = verify_cache();
    out << "verify removed " << verified.removed.size() << " not_removed " << verified.not_removed.size();
    if (!verified.not_removed.empty())
      out << " [" << verified.not_removed[0].key << ": " << verified.not_removed[0].reason << " / "
          << verified.not_removed[0].error << "]";
    const CacheCleanup pruned = prune_cache(std::nullopt, std::uint64_t{0});
    out << "; prune removed " << pruned.removed.size() << " not_removed " << pruned.not_removed.size();
    const CacheCleanup cleared = clear_cache();
    out << "; clear removed " << cleared.removed.size() << " not_removed " << cleared.not_removed.size();
    return out.str();
  });
  INFO(result);
  if (result == kCannotDropRoot) {
    MESSAGE("skipped: running as root without the right to become nobody, nothing here is read-only");
    return;
  }
  CHECK(result.find("verify removed 0 not_removed 1 [" + bad->key + ": the entry digest does not match") !=
        std::string::npos);
  CHECK(std::regex_search(result, std::regex("(Permission denied|Read-only file system)\\]")));
  CHECK(result.find("prune removed 0 not_removed 2") != std::string::npos);
  CHECK(result.find("clear removed 0 not_removed 2") != std::string::npos);
  CHECK(cache_entry_count() == 2);
  // Writable again, the same calls do it all.
  const CacheCleanup verified = verify_cache();
  CHECK(verified.removed.size() == 1);
  CHECK(verified.not_removed.empty());
}

// ---- entries that cannot lie ------------------------------------------------------------------------------

TEST_CASE("entries: an edited field, file or name is a bad entry for load, ls and verify alike") {
  test::TempDir dir("flashrtc-lie");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest request = unique_request();
  const auto artifact = detail::get_artifact(request);
  const fs::path entry = artifact->entry_dir;
  const fs::path meta_path = entry / "meta.json";
  const std::string meta_text = test::read_text(meta_path);
  const std::string ptx = test::read_text(entry / "kernel.ptx"), log = test::read_text(entry / "compile.log");
  REQUIRE(detail::DiskCache(cache_root()).load(request.inputs).has_value());
  REQUIRE(detail::cache_entry_problem(entry) == "");

  const auto edit_meta = [&](const std::function<void(json&)>& edit) {
    json meta = json::parse(meta_text);
    edit(meta);
    test::write_text(meta_path, meta.dump(2));
  };
  SUBCASE("lowered name") {
    edit_meta([](json& m) { m["lowered_name"] = m["lowered_name"].get<std::string>() + "x"; });
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("registers 1e30") {
    edit_meta([](json& m) { m["resources"]["registers"] = 1e30; });
    expect_bad_everywhere(request, entry, "registers=1e+30: must be an integer");
  }
  SUBCASE("registers 40 (a plausible lie)") {
    edit_meta([](json& m) { m["resources"]["registers"] = 40; });
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("wgmma_serialized 1 (not a boolean)") {
    edit_meta([](json& m) { m["resources"]["wgmma_serialized"] = 1; });
    expect_bad_everywhere(request, entry, "wgmma_serialized=1: must be true or false");
  }
  SUBCASE("wgmma_serialized true (a plausible lie)") {
    edit_meta([](json& m) { m["resources"]["wgmma_serialized"] = true; });
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("smem_bytes -1") {
    edit_meta([](json& m) { m["kernel"]["smem_bytes"] = -1; });
    expect_bad_everywhere(request, entry, "smem_bytes=-1");
  }
  SUBCASE("head_dim \"big\"") {
    edit_meta([](json& m) { m["kernel"]["head_dim"] = "big"; });
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("compile_ms") {
    edit_meta([](json& m) { m["compile_ms"] = 1.0; });
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("a changed byte of the PTX, same size") {
    std::string changed = ptx;
    changed[changed.size() / 2] ^= 0x01;
    test::write_text(entry / "kernel.ptx", changed);
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("a truncated PTX") {
    test::write_text(entry / "kernel.ptx", ptx.substr(0, ptx.size() / 2));
    expect_bad_everywhere(request, entry, "kernel.ptx has the wrong size");
  }
  SUBCASE("a missing PTX") {
    fs::remove(entry / "kernel.ptx");
    expect_bad_everywhere(request, entry, "kernel.ptx missing");
  }
  SUBCASE("a changed compile log") {
    std::string changed = log;
    changed[0] = changed[0] == 'x' ? 'y' : 'x';
    test::write_text(entry / "compile.log", changed);
    expect_bad_everywhere(request, entry, "entry digest does not match");
  }
  SUBCASE("an extra field in the inputs") {
    edit_meta([](json& m) { m["inputs"]["extra"] = "1"; });
    expect_bad_everywhere(request, entry, "no part of a key");
  }
  SUBCASE("another NVRTC build recorded") {
    edit_meta([](json& m) { m["inputs"]["nvrtc_build"] = "13.0 V13.0.1"; });
    expect_bad_everywhere(request, entry, "the key is not the digest of the recorded inputs");
  }
  // Storing it again makes it sound.
  detail::DiskCache(cache_root()).store(*artifact);
  CHECK(detail::cache_entry_problem(entry) == "");
}

TEST_CASE("entries: the unusable-entry warning is logged once per load, not once per look") {
  test::TempDir dir("flashrtc-warn-once");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest request = unique_request();
  const detail::DiskCache disk(cache_root());
  detail::KernelArtifact artifact = *detail::get_artifact(request);
  // Store it under a second request's key, then damage it: get_artifact of that key finds it bad.
  const detail::CompileRequest twin = unique_request();
  artifact.inputs = twin.inputs;
  artifact.key = twin.inputs.key();
  const fs::path entry = disk.store(artifact);
  test::write_text(entry / "compile.log", "damaged");
  test::LogCapture log;
  CacheSource how = CacheSource::kMemory;
  detail::get_artifact(twin, &how);
  CHECK(how == CacheSource::kCompiled);
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("unusable") != std::string::npos);
  CHECK(detail::cache_entry_problem(entry) == "");  // rewritten
}

// ---- bounded reads ----------------------------------------------------------------------------------------

TEST_CASE("entries: links to endless files, FIFOs and oversized files are bad entries, read boundedly") {
  test::TempDir dir("flashrtc-bounded");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest request = unique_request();
  const fs::path entry = detail::get_artifact(request)->entry_dir;
  const std::string meta = test::read_text(entry / "meta.json"), ptx = test::read_text(entry / "kernel.ptx");
  const auto restore = [&] {
    for (const char* name : {"meta.json", "kernel.ptx", "kernel.cubin"}) fs::remove(entry / name);
    detail::DiskCache(cache_root()).store(*detail::get_artifact(request));
    REQUIRE(detail::cache_entry_problem(entry) == "");
  };
  const auto started = std::chrono::steady_clock::now();
  for (const char* name : {"meta.json", "kernel.ptx", "kernel.cubin"}) {
    INFO(name);
    fs::remove(entry / name);
    fs::create_symlink("/dev/zero", entry / name);
    expect_bad_everywhere(request, entry, std::string(name) + " is a symbolic link");
    restore();
    fs::remove(entry / name);
    REQUIRE(::mkfifo((entry / name).c_str(), 0644) == 0);  // opening it must not wait for a writer
    expect_bad_everywhere(request, entry, std::string(name) + " is not a regular file");
    restore();
  }
  // What `cache ptx` and `cache show` print is read the same way.
  CHECK(read_cache_entry_file(entry / "kernel.ptx") == ptx);
  fs::remove(entry / "kernel.ptx");
  fs::create_symlink("/dev/zero", entry / "kernel.ptx");
  const Error refused = test::expect_error([&] { read_cache_entry_file(entry / "kernel.ptx"); });
  CHECK(refused.code() == ErrorCode::kCacheIo);
  CHECK(refused.message().find("is a symbolic link") != std::string::npos);
  fs::remove(entry / "kernel.ptx");
  test::write_text(entry / "kernel.ptx", ptx);
  // Sparse files over the limits: no disk space, no reading of gigabytes.
  fs::resize_file(entry / "kernel.ptx", detail::kMaxEntryFileBytes + 1);
  expect_bad_everywhere(request, entry, "kernel.ptx is larger than its limit");
  test::write_text(entry / "kernel.ptx", ptx);
  test::write_text(entry / "meta.json", meta);
  fs::resize_file(entry / "meta.json", detail::kMaxMetaBytes + 1);
  expect_bad_everywhere(request, entry, "meta.json is larger than its limit");
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
}

TEST_CASE("entries: a 10,000-deep meta.json and invalid UTF-8 are bad entries; the listing goes on") {
  test::TempDir dir("flashrtc-deep");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const detail::CompileRequest deep_request = unique_request(), utf8_request = unique_request();
  const fs::path deep = detail::get_artifact(deep_request)->entry_dir;
  const fs::path utf8 = detail::get_artifact(utf8_request)->entry_dir;
  const fs::path sound = detail::get_artifact(unique_request())->entry_dir;
  test::write_text(deep / "meta.json", std::string(10000, '[') + std::string(10000, ']'));
  std::string meta = test::read_text(utf8 / "meta.json");
  const auto at = meta.find("\"lowered_name\": \"") + std::string("\"lowered_name\": \"").size();
  meta.insert(at, "\xff\xfe");
  test::write_text(utf8 / "meta.json", meta);

  expect_bad_everywhere(deep_request, deep, "meta.json nests deeper than 32 levels");
  expect_bad_everywhere(utf8_request, utf8, "meta.json does not parse");
  const std::vector<CacheEntry> entries = list_cache_entries();
  REQUIRE(entries.size() == 3);
  for (const CacheEntry& e : entries) {
    INFO(e.dir);
    // Every listed field can be written as JSON (`cache ls --json`): no invalid UTF-8 leaks out.
    CHECK_NOTHROW(json({e.key, e.arch, e.problem, e.name_expression, e.lowered_name}).dump());
    if (e.dir == sound) CHECK(e.problem == "");
    if (e.dir == deep) CHECK(e.meta_json.empty());  // a reader that recurses gets nothing to recurse on
  }
  CacheCleanup verified = verify_cache();
  CHECK(verified.removed.size() == 2);
  CHECK(fs::exists(sound));
}

// ---- key identity -----------------------------------------------------------------------------------------

TEST_CASE("key: the NVRTC build (from its PTX header) is in every key and in meta.json") {
  const std::string build = nvrtc_build();
  INFO(build);
  CHECK(build.rfind(nvrtc_version() + " ", 0) == 0);
  // The toolkit build, e.g. "V13.0.88", which "13.0" alone does not tell apart.
  CHECK(std::regex_search(build, std::regex(R"(V\d+\.\d+\.\d+)")));
  CHECK(&detail::nvrtc_build_identity() == &detail::nvrtc_build_identity());  // computed once

  const detail::CompileRequest request = unique_request();
  CHECK(request.inputs.nvrtc_build == build);  // no kernel family has to set it
  detail::KeyInputs other = request.inputs;
  other.nvrtc_build = nvrtc_version() + " V0.0.1";
  CHECK(other.key() != request.inputs.key());

  test::TempDir dir("flashrtc-build-key");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto artifact = detail::get_artifact(request);
  const json meta = json::parse(test::read_text(artifact->entry_dir / "meta.json"));
  CHECK(meta.at("inputs").at("nvrtc_build") == build);
  CHECK(find_cache_entry(artifact->key).nvrtc_build == build);
  // What another build compiled is filed under its own key: this build never loads it.
  detail::KernelArtifact foreign = *artifact;
  foreign.inputs = other;
  foreign.key = other.key();
  const detail::DiskCache disk(cache_root());
  disk.store(foreign);
  CHECK(disk.load(other).has_value());
  CHECK(disk.load(request.inputs)->inputs.nvrtc_build == build);
}

// ---- lock files -------------------------------------------------------------------------------------------

TEST_CASE("maintenance: verify and prune leave no lock files behind") {
  test::TempDir dir("flashrtc-locks");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const auto kept = detail::get_artifact(unique_request());
  const auto bad = detail::get_artifact(unique_request());
  test::write_text(bad->entry_dir / "kernel.ptx", "damaged");
  // A lock file of an entry that is gone (an older flashrtc, or a compile that failed).
  test::write_text(kept->entry_dir.parent_path() / (std::string(32, 'a') + ".lock"), "");
  REQUIRE(lock_files(cache_root()).size() == 3);

  CHECK(verify_cache().removed.size() == 1);
  const std::vector<std::string> after_verify = lock_files(cache_root());
  CHECK(after_verify == std::vector<std::string>{kept->key + ".lock"});  // the kept entry's own lock stays
  CHECK(prune_cache(std::nullopt, std::uint64_t{0}).removed.size() == 1);
  CHECK(lock_files(cache_root()).empty());
  CHECK(cache_entry_count() == 0);
}

TEST_CASE("file lock: a lock file removed by its holder is never locked twice") {
  test::TempDir dir("flashrtc-lock-remove");
  const fs::path path = dir.path() / "k.lock";
  std::atomic<int> inside{0}, most_inside{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        detail::FileLock lock(path);
        const int now = ++inside;
        int seen = most_inside.load();
        while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --inside;
        lock.remove_file();  // every holder removes it: waiters must lock the next file, one at a time
      }
    });
  for (auto& t : threads) t.join();
  CHECK(most_inside.load() == 1);
  CHECK_FALSE(fs::exists(path));
}

// ---- links and sizes from a hostile cache directory -------------------------------------------------------

namespace {

// A directory outside the cache, with files at two depths: what a link planted in the cache names.
struct Victim {
  fs::path dir;
  explicit Victim(const fs::path& at) : dir(at) {
    fs::create_directories(dir / "important" / "inner");
    for (const fs::path& file : files()) test::write_text(file, "keep");
  }
  std::vector<fs::path> files() const {
    return {dir / "file", dir / "important" / "file", dir / "important" / "inner" / "file"};
  }
  bool intact() const {
    for (const fs::path& file : files())
      if (!fs::exists(file) || test::read_text(file) != "keep") return false;
    return true;
  }
};

bool link_exists(const fs::path& path) {
  std::error_code error;
  return fs::symlink_status(path, error).type() == fs::file_type::symlink;
}

// Bytes this process has read through read() and the like (Linux's /proc/self/io), if it says.
std::optional<std::uint64_t> bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string name;
  std::uint64_t value = 0;
  while (io >> name >> value)
    if (name == "rchar:") return value;
  return std::nullopt;
}

}  // namespace

TEST_CASE(
    "links: verify, prune and clear remove a link where the cache has a directory, never what it names") {
  const std::string version = cache_root().filename().string();
  const std::string key(32, 'c');
  for (const std::string place : {version, version + "/sm_80", version + "/sm_80/" + key})
    for (const std::string operation : {"verify", "prune", "clear"}) {
      INFO(place << " " << operation);
      test::TempDir dir("flashrtc-links");
      const fs::path cache = dir.path() / "cache";
      const Victim victim(dir.path() / "victim");
      fs::create_directories((cache / place).parent_path());
      fs::create_directory_symlink(victim.dir, cache / place);
      test::ConfigOverride config(test::config_with_cache_dir(cache));
      // Listing walks no link: a link in an entry's place is a bad entry, one above it shows nothing.
      const std::vector<CacheEntry> listed = list_cache_entries();
      if (place.size() > version.size() + 6) {
        REQUIRE(listed.size() == 1);
        CHECK(listed[0].problem.find("is a symbolic link") != std::string::npos);
      } else {
        CHECK(listed.empty());
      }
      CacheCleanup result;
      if (operation == "verify") result = verify_cache();
      if (operation == "prune") result = prune_cache(std::nullopt, std::uint64_t{0});
      if (operation == "clear") result = clear_cache();
      CHECK(victim.intact());
      CHECK(result.not_removed.empty());
      if (operation != "prune") {
        CHECK_FALSE(link_exists(cache / place));  // the link goes, as a link
        REQUIRE(result.removed.size() == 1);
        CHECK(result.removed[0].key == fs::path(place).filename().string());
      }
      if (operation == "verify") CHECK(result.removed[0].reason.find("symbolic link") != std::string::npos);
    }
}

TEST_CASE("links: a load reads no entry through a linked entry or arch directory, a store writes none") {
  test::TempDir dir("flashrtc-linked-load");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path() / "cache"));
  const detail::CompileRequest request = unique_request();
  const fs::path entry = detail::get_artifact(request)->entry_dir;
  const detail::DiskCache disk(cache_root());
  REQUIRE(disk.load(request.inputs).has_value());

  // A sound entry moved out and linked back in is not the cache's own: refused, and verify drops the link.
  const fs::path moved = dir.path() / "moved-entry";
  fs::rename(entry, moved);
  fs::create_directory_symlink(moved, entry);
  std::string problem;
  CHECK_FALSE(disk.load(request.inputs, &problem).has_value());
  CHECK(problem.find("is a symbolic link") != std::string::npos);
  CHECK(detail::cache_entry_problem(entry) == problem);
  CHECK(verify_cache().removed.size() == 1);
  CHECK_FALSE(link_exists(entry));
  CHECK(fs::exists(moved / "meta.json"));

  // The same for the arch directory: no load through it, and a store there is an error, not a write.
  const fs::path arch_dir = entry.parent_path(), moved_arch = dir.path() / "moved-arch";
  fs::rename(arch_dir, moved_arch);
  fs::rename(moved, moved_arch / entry.filename());
  fs::create_directory_symlink(moved_arch, arch_dir);
  CHECK_FALSE(disk.load(request.inputs, &problem).has_value());
  CHECK(problem.find("is a symbolic link") != std::string::npos);
  detail::KernelArtifact other = *detail::get_artifact(request);
  other.inputs = unique_request().inputs;
  other.key = other.inputs.key();
  const Error refused = test::expect_error([&] { disk.store(other); });
  CHECK(refused.code() == ErrorCode::kCacheIo);
  CHECK(refused.message().find("is a symbolic link") != std::string::npos);
  const Error lock_refused = test::expect_error([&] { detail::DiskCache::KeyLock lock(disk, other.inputs); });
  CHECK(lock_refused.code() == ErrorCode::kCacheIo);
  CHECK_FALSE(fs::exists(moved_arch / other.key));
  CHECK_FALSE(fs::exists(moved_arch / (other.key + ".lock")));
  std::size_t in_moved_arch = 0;
  for (const auto& item : fs::directory_iterator(moved_arch))
    in_moved_arch += item.path().filename() != entry.filename();
  CHECK(in_moved_arch == 0);  // no temporary either
}

TEST_CASE("lock files: a link where a lock file should be is an error for a compile and removed by verify") {
  test::TempDir dir("flashrtc-lock-link");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path() / "cache"));
  const fs::path target = dir.path() / "outside" / "target";
  fs::create_directories(target.parent_path());
  const detail::CompileRequest request = unique_request();
  const fs::path entry = detail::DiskCache(cache_root()).entry_dir(request.inputs);
  const fs::path lock_path = detail::entry_lock_path(entry);
  fs::create_directories(entry.parent_path());
  fs::create_symlink(target, lock_path);

  const Error refused = test::expect_error([&] { detail::FileLock lock(lock_path); });
  CHECK(refused.code() == ErrorCode::kCacheIo);
  CHECK(refused.message().find("symbolic link") != std::string::npos);
  CHECK_FALSE(fs::exists(target));

  // As a cache that cannot be written: the kernel is compiled into memory, with one warning saying why.
  test::LogCapture log;
  CacheSource how = CacheSource::kMemory;
  const auto artifact = detail::get_artifact(request, &how);
  CHECK(how == CacheSource::kCompiled);
  CHECK(artifact->entry_dir.empty());
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("symbolic link") != std::string::npos);
  CHECK_FALSE(fs::exists(target));

  const CacheCleanup verified = verify_cache();
  REQUIRE(verified.removed.size() == 1);
  CHECK(verified.removed[0].key == lock_path.filename().string());
  CHECK(verified.removed[0].reason.find("lock file") != std::string::npos);
  CHECK_FALSE(link_exists(lock_path));
  CHECK_FALSE(fs::exists(target));
}

TEST_CASE("entries: a file of another size than meta.json records is refused before it is read") {
  test::TempDir dir("flashrtc-size-first");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const fs::path entry = detail::get_artifact(unique_request())->entry_dir;
  // Sparse, under the file limit: reading it costs 200 MB of read(), comparing its size nothing.
  fs::resize_file(entry / "kernel.ptx", std::uint64_t{200} << 20);
  const auto before = bytes_read_so_far();
  if (!before) {
    MESSAGE("skipped: /proc/self/io does not say how much this process read");
    return;
  }
  CHECK(detail::cache_entry_problem(entry).find("kernel.ptx has the wrong size") != std::string::npos);
  const std::vector<CacheEntry> listed = list_cache_entries();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].problem.find("kernel.ptx has the wrong size") != std::string::npos);
  const std::uint64_t read = *bytes_read_so_far() - *before;
  CHECK(read < (std::uint64_t{16} << 20));
  CHECK(verify_cache().removed.size() == 1);
}
