// The cubin cache: key completeness, persistence across processes, rejection of damaged entries, leftover
// temporaries, and "many threads / many processes asking for one key compile it once".
//
// The memory cache is process-wide and keyed by the key alone (not by cache directory), so every test that
// needs a miss uses a key no other test in this binary touches: its own KernelSpec (kPersistSpec, ...) or a
// request made unique by a -D option (unique_request).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/artifact_cache.hpp"
#include "cache/disk_cache.hpp"
#include "compile/kernel_artifact.hpp"
#include "compile/kernel_sources.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "compile/ptxas_report.hpp"
#include "cpu/helpers/compile_artifact.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"

using namespace flashrtc;
namespace fs = std::filesystem;
using detail::CompileRequest;
using detail::DiskCache;
using detail::KernelArtifact;
using detail::KeyInputs;

namespace {

// Small tiles (d=32, 2 warps) compile in a fraction of a second.
KernelSpec small_spec(DType dtype, MaskKind mask, TileConfig tile) {
  KernelSpec spec;
  spec.dtype = dtype;
  spec.head_dim = 32;
  spec.mask = mask;
  spec.tile = tile;
  return spec;
}
// One spec per test that needs a memory-cache miss in this process (see the file comment).
const KernelSpec kPersistSpec = small_spec(DType::kFloat16, MaskKind::kCausalTopLeft, {32, 16, 2, 1});
const KernelSpec kRequireCachedSpec = small_spec(DType::kBFloat16, MaskKind::kNone, {32, 16, 2, 1});
const KernelSpec kMultiProcessSpec =
    small_spec(DType::kFloat16, MaskKind::kCausalBottomRight, {32, 32, 2, 1});

std::string unique_token() {
  static std::atomic<int> counter{0};
  std::ostringstream s;
  s << ::getpid() << "_" << counter++ << "_" << std::random_device{}();
  return s.str();
}

// A forward request whose key no other call has used: a -D option is part of the options, hence of the key.
CompileRequest unique_request() {
  CompileRequest request =
      detail::family_compile_request(small_spec(DType::kFloat16, MaskKind::kNone, {32, 16, 2, 1}), "sm_80");
  request.nvrtc.options.push_back("-DFLASHRTC_TEST_NONCE=" + unique_token());
  request.inputs.options = detail::join_options(request.nvrtc.options);
  return request;
}

using test::compile_artifact;

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
    names.push_back(it->path().filename().string());
  return names;
}

std::size_t count_prefixed(const fs::path& dir, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& name : names_in(dir)) n += name.rfind(prefix, 0) == 0;
  return n;
}

// ---- child processes -----------------------------------------------------------------------------------

constexpr const char* kChildCase = "child process: compile one forward kernel";

std::string encode(const KernelSpec& spec, const std::string& arch) {
  std::ostringstream s;
  s << to_string(spec.dtype) << " " << spec.head_dim << " " << to_string(spec.mask) << " "
    << spec.tile.block_m << " " << spec.tile.block_n << " " << spec.tile.warps << " " << spec.tile.stages
    << " " << arch;
  return s.str();
}

// Runs this test binary again (fork + exec: a fresh process that reads its configuration from the
// environment) on kChildCase; returns what the child wrote: "compiled", "disk", "memory" or "error:<code>".
std::string run_child(const fs::path& work_dir, const KernelSpec& spec, const std::string& arch,
                      const std::vector<std::pair<std::string, std::string>>& env) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const std::string tag = unique_token();
  const fs::path out = work_dir / ("child-" + tag + ".out");
  const fs::path log = work_dir / ("child-" + tag + ".log");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (const char* name : {"FLASHRTC_DISABLE_DISK_CACHE", "FLASHRTC_ALWAYS_COMPILE",
                             "FLASHRTC_REQUIRE_CACHED", "FLASHRTC_DUMP_SOURCES", "FLASHRTC_ARCH"})
      ::unsetenv(name);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::setenv("FLASHRTC_TEST_CHILD_SPEC", encode(spec, arch).c_str(), 1);
    ::setenv("FLASHRTC_TEST_CHILD_OUT", out.c_str(), 1);
    const std::string filter = std::string("--test-case=") + kChildCase;
    const char* argv[] = {self.c_str(), filter.c_str(), "--no-skip", nullptr};
    ::execv(self.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child log:\n" << test::read_text(log));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return test::read_text(out);
}

}  // namespace

// Not a test by itself: run_child starts this binary on this case (--no-skip) with the spec in its
// environment.
TEST_CASE(kChildCase* doctest::skip()) {
  const char* spec_text = std::getenv("FLASHRTC_TEST_CHILD_SPEC");
  const char* out = std::getenv("FLASHRTC_TEST_CHILD_OUT");
  REQUIRE(spec_text);
  REQUIRE(out);
  std::istringstream in(spec_text);
  std::string dtype, mask, arch;
  KernelSpec spec;
  in >> dtype >> spec.head_dim >> mask >> spec.tile.block_m >> spec.tile.block_n >> spec.tile.warps >>
      spec.tile.stages >> arch;
  REQUIRE(parse_dtype(dtype));
  REQUIRE(parse_mask(mask));
  spec.dtype = *parse_dtype(dtype);
  spec.mask = *parse_mask(mask);
  std::string result;
  try {
    result = to_string(compile_kernel(spec, arch).source);
  } catch (const Error& e) {
    result = std::string("error:") + to_string(e.code());
  }
  test::write_text(out, result);
}

// ---- key completeness -----------------------------------------------------------------------------------

TEST_CASE("cache key: equal inputs give equal keys, and changing any one input changes the key") {
  KernelSpec base_spec;
  base_spec.dtype = DType::kFloat32;
  base_spec.head_dim = 64;
  base_spec.mask = MaskKind::kNone;
  base_spec.tile = {64, 64, 8, 2};
  const CompileRequest base = detail::family_compile_request(base_spec, "sm_90a");
  const std::string key = base.inputs.key();

  // Deterministic, a 128-bit hex digest, and the request carries every input NVRTC is given.
  CHECK(detail::family_compile_request(base_spec, "sm_90a").inputs.key() == key);
  const KeyInputs copy = base.inputs;
  CHECK(copy.key() == key);
  CHECK(key.size() == 32);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(base.inputs.name_expression == base.nvrtc.name_expression);
  CHECK(base.inputs.options == detail::join_options(base.nvrtc.options));
  CHECK(base.inputs.arch == "sm_90a");
  CHECK(base.inputs.nvrtc_version == nvrtc_version());
  CHECK(base.inputs.format_version == detail::kCacheFormatVersion);
  CHECK(base.inputs.source_hash.find(detail::kernel_sources().hash) != std::string::npos);
  bool arch_in_options = false;
  for (const auto& option : base.nvrtc.options) arch_in_options |= option.find("sm_90a") != std::string::npos;
  CHECK(arch_in_options);

  std::set<std::string> keys{key};
  auto expect_new_key = [&](const std::string& what, const KeyInputs& inputs) {
    INFO(what);
    const std::string changed = inputs.key();
    CHECK(changed != key);
    CHECK(keys.insert(changed).second);  // and different from every other variant
  };

  SUBCASE("source hash") {
    KeyInputs inputs = base.inputs;
    inputs.source_hash += "0";
    expect_new_key("source hash", inputs);
  }
  SUBCASE("each part of the name expression") {
    struct Variant {
      const char* what;
      KernelSpec spec;
    };
    std::vector<Variant> variants;
    auto add = [&](const char* what, auto mutate) {
      KernelSpec spec = base_spec;
      mutate(spec);
      variants.push_back({what, spec});
    };
    // 16-bit types run the tensor-core family: another program (its own header) and a tile of its space.
    add("dtype fp16", [](KernelSpec& s) { s.dtype = DType::kFloat16, s.tile = {128, 64, 8, 2}; });
    add("dtype bf16", [](KernelSpec& s) { s.dtype = DType::kBFloat16, s.tile = {128, 64, 8, 2}; });
    add("head_dim 96", [](KernelSpec& s) { s.head_dim = 96; });
    add("head_dim 128", [](KernelSpec& s) { s.head_dim = 128; });
    add("mask causal", [](KernelSpec& s) { s.mask = MaskKind::kCausalTopLeft; });
    add("mask causal-br", [](KernelSpec& s) { s.mask = MaskKind::kCausalBottomRight; });
    add("block_m 32", [](KernelSpec& s) { s.tile.block_m = 32; });
    add("block_n 32", [](KernelSpec& s) { s.tile.block_n = 32; });
    add("warps 4", [](KernelSpec& s) { s.tile.warps = 4; });
    add("stages 1", [](KernelSpec& s) { s.tile.stages = 1; });
    for (const Variant& v : variants) {
      INFO(v.what);
      CompileRequest request;
      REQUIRE_NOTHROW(request = detail::family_compile_request(v.spec, "sm_90a"));
      // Only the name expression differs: it alone must carry the change into the key.
      CHECK(request.inputs.name_expression != base.inputs.name_expression);
      if (&family_of(v.spec) == &family_of(base_spec))
        CHECK(request.inputs.source_hash == base.inputs.source_hash);
      else
        CHECK(request.inputs.source_hash != base.inputs.source_hash);
      CHECK(request.inputs.options == base.inputs.options);
      CHECK(request.inputs.arch == base.inputs.arch);
      expect_new_key(v.what, request.inputs);
    }
  }
  SUBCASE("each NVRTC option: removed, altered, and one added") {
    const std::vector<std::string>& options = base.nvrtc.options;
    REQUIRE(options.size() >= 3);
    for (std::size_t i = 0; i < options.size(); ++i) {
      std::vector<std::string> removed = options;
      removed.erase(removed.begin() + static_cast<std::ptrdiff_t>(i));
      KeyInputs inputs = base.inputs;
      inputs.options = detail::join_options(removed);
      expect_new_key("without " + options[i], inputs);

      std::vector<std::string> altered = options;
      altered[i] += "0";
      inputs.options = detail::join_options(altered);
      expect_new_key("altered " + options[i], inputs);
    }
    std::vector<std::string> added = options;
    added.push_back("-DFLASHRTC_EXTRA=1");
    KeyInputs inputs = base.inputs;
    inputs.options = detail::join_options(added);
    expect_new_key("extra -D option", inputs);
    added.back() = "--use_fast_math";
    inputs.options = detail::join_options(added);
    expect_new_key("extra --use_fast_math", inputs);
  }
  SUBCASE("arch: sm_90 and sm_90a differ, as do sm_80 and sm_89") {
    expect_new_key("sm_90 request", detail::family_compile_request(base_spec, "sm_90").inputs);
    expect_new_key("sm_80 request", detail::family_compile_request(base_spec, "sm_80").inputs);
    expect_new_key("sm_89 request", detail::family_compile_request(base_spec, "sm_89").inputs);
    KeyInputs inputs = base.inputs;
    inputs.arch = "sm_90";  // the arch field alone, options untouched
    expect_new_key("arch field sm_90", inputs);
  }
  SUBCASE("NVRTC version") {
    KeyInputs inputs = base.inputs;
    inputs.nvrtc_version += ".1";
    expect_new_key("nvrtc version", inputs);
  }
  SUBCASE("NVRTC build (a patch release of the same major.minor)") {
    CHECK(base.inputs.nvrtc_build == detail::nvrtc_build_identity());
    KeyInputs inputs = base.inputs;
    inputs.nvrtc_build += ".1";
    expect_new_key("nvrtc build", inputs);
  }
  SUBCASE("cache format version") {
    KeyInputs inputs = base.inputs;
    inputs.format_version += 1;
    expect_new_key("format version", inputs);
  }
  SUBCASE("kernel sources: an identical copy keeps the key, one changed byte changes it") {
    test::TempDir same("flashrtc-kernels-same"), edited("flashrtc-kernels-edited");
    const fs::path shipped = fs::path(FLASHRTC_SOURCE_DIR) / "kernel_sources";
    fs::copy(shipped, same.path(), fs::copy_options::recursive);
    fs::copy(shipped, edited.path(), fs::copy_options::recursive);
    const fs::path kernel = edited.path() / "flashrtc" / "attention_forward_simt.cuh";
    REQUIRE(fs::exists(kernel));
    test::write_text(kernel, test::read_text(kernel) + "// one more line\n");

    RuntimeConfig config = runtime_config();
    config.kernel_dir.clear();
    std::string embedded_key, same_key, edited_key;
    {
      test::ConfigOverride embedded(config);
      embedded_key = detail::family_compile_request(base_spec, "sm_90a").inputs.key();
    }
    config.kernel_dir = same.path();
    {
      test::ConfigOverride from_same(config);
      same_key = detail::family_compile_request(base_spec, "sm_90a").inputs.key();
    }
    config.kernel_dir = edited.path();
    {
      test::ConfigOverride from_edited(config);
      edited_key = detail::family_compile_request(base_spec, "sm_90a").inputs.key();
    }
    // The embedded copy is kernel_sources/ at build time: the same bytes and paths give the same key.
    INFO("if only this fails, kernel_sources/ changed since the library was built: rebuild");
    CHECK(same_key == embedded_key);
    CHECK(edited_key != embedded_key);
  }
}

// ---- damaged entries ------------------------------------------------------------------------------------

TEST_CASE("disk cache: every resource field, the wgmma advisory included, comes back from meta.json") {
  test::TempDir dir("flashrtc-cache-resources");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const CompileRequest request = unique_request();
  KernelArtifact artifact = compile_artifact(request);
  // What a serialized, spilling Hopper kernel would report (this sm_80 compile has no wgmma).
  artifact.resources.spill_store_bytes = 24;
  artifact.resources.spill_load_bytes = 32;
  artifact.resources.barriers = 3;
  artifact.resources.wgmma_serialized = true;
  artifact.resources.wgmma_serialized_reason = "insufficient register resources for the function (C7512)";

  const DiskCache disk(detail::disk_cache_root(dir.path()));
  const fs::path entry = disk.store(artifact);
  const nlohmann::json meta = nlohmann::json::parse(test::read_text(entry / "meta.json"));
  CHECK(meta.at("resources").at("wgmma_serialized") == true);
  const auto loaded = disk.load(request.inputs);
  REQUIRE(loaded.has_value());
  const ResourceReport& r = loaded->resources;
  CHECK(r.registers == artifact.resources.registers);
  CHECK(r.spill_store_bytes == 24);
  CHECK(r.spill_load_bytes == 32);
  CHECK(r.stack_frame_bytes == artifact.resources.stack_frame_bytes);
  CHECK(r.static_smem_bytes == artifact.resources.static_smem_bytes);
  CHECK(r.barriers == 3);
  CHECK(r.wgmma_serialized);
  CHECK(r.wgmma_serialized_reason == artifact.resources.wgmma_serialized_reason);

  artifact.resources.wgmma_serialized = false;
  artifact.resources.wgmma_serialized_reason.clear();
  disk.store(artifact);
  const auto clean = disk.load(request.inputs);
  REQUIRE(clean.has_value());
  CHECK_FALSE(clean->resources.wgmma_serialized);
  CHECK(clean->resources.wgmma_serialized_reason.empty());
}

TEST_CASE("disk cache: damaged, foreign and half-written entries are ignored, and recompiled") {
  test::TempDir dir("flashrtc-cache-damage");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const CompileRequest request = unique_request();
  const KernelArtifact artifact = compile_artifact(request);
  REQUIRE(artifact.resources.registers > 0);

  const DiskCache disk(detail::disk_cache_root(dir.path()));
  const fs::path entry = disk.store(artifact);
  REQUIRE(entry == disk.entry_dir(request.inputs));
  const fs::path arch_dir = entry.parent_path();
  CHECK(arch_dir.parent_path() == cache_root());
  for (const char* file : {"kernel.cubin", "kernel.ptx", "compile.log", "meta.json"})
    CHECK(fs::exists(entry / file));
  CHECK(count_prefixed(arch_dir, ".tmp-") == 0);  // the temporary was renamed into place
  CHECK(cache_entry_count() == 1);

  auto loads_valid = [&] {
    const auto loaded = disk.load(request.inputs);
    REQUIRE(loaded.has_value());
    CHECK(loaded->cubin == artifact.cubin);
    CHECK(loaded->key == artifact.key);
    CHECK(loaded->lowered_name == artifact.lowered_name);
    CHECK(loaded->resources.registers == artifact.resources.registers);
    CHECK(loaded->resources.stack_frame_bytes == artifact.resources.stack_frame_bytes);
    CHECK(loaded->source == CacheSource::kDisk);
    CHECK(loaded->entry_dir == entry);
  };
  loads_valid();

  SUBCASE("a truncated cubin is rejected; get_artifact recompiles it and rewrites the entry") {
    fs::resize_file(entry / "kernel.cubin", artifact.cubin.size() / 2);
    CHECK_FALSE(disk.load(request.inputs).has_value());
    {
      // A damaged entry is not a cached kernel: under FLASHRTC_REQUIRE_CACHED it is refused.
      RuntimeConfig strict = test::config_with_cache_dir(dir.path());
      strict.require_cached = true;
      test::ConfigOverride guard(strict);
      const Error e = test::expect_error([&] { detail::get_artifact(request); });
      CHECK(e.code() == ErrorCode::kCompileDisallowed);
    }
    const CacheStats before = cache_stats();
    CacheSource how = CacheSource::kMemory;
    const auto fresh = detail::get_artifact(request, &how);
    CHECK(how == CacheSource::kCompiled);
    CHECK(cache_stats().compiles - before.compiles == 1);
    CHECK(fresh->cubin.size() == artifact.cubin.size());
    CHECK(fresh->cubin == artifact.cubin);  // NVRTC is deterministic for identical input
    CHECK(fresh->entry_dir == entry);
    CHECK(fs::file_size(entry / "kernel.cubin") == artifact.cubin.size());
    loads_valid();
  }
  SUBCASE("a cubin altered in place (same size) is rejected") {
    std::string bytes = test::read_text(entry / "kernel.cubin");
    bytes[bytes.size() / 2] ^= 0x5a;
    test::write_text(entry / "kernel.cubin", bytes);
    CHECK_FALSE(disk.load(request.inputs).has_value());
  }
  SUBCASE("a missing cubin is rejected") {
    fs::remove(entry / "kernel.cubin");
    CHECK_FALSE(disk.load(request.inputs).has_value());
  }
  SUBCASE("garbage meta.json is rejected") {
    test::write_text(entry / "meta.json", "{ this is not json");
    CHECK_FALSE(disk.load(request.inputs).has_value());
  }
  SUBCASE("an empty or incomplete meta.json is rejected") {
    test::write_text(entry / "meta.json", "");
    CHECK_FALSE(disk.load(request.inputs).has_value());
    test::write_text(entry / "meta.json", "{}");
    CHECK_FALSE(disk.load(request.inputs).has_value());
    test::write_text(entry / "meta.json", "[1, 2, 3]");
    CHECK_FALSE(disk.load(request.inputs).has_value());
    nlohmann::json meta = nlohmann::json::parse(test::read_text(disk.store(artifact) / "meta.json"));
    meta.erase("resources");
    test::write_text(entry / "meta.json", meta.dump());
    CHECK_FALSE(disk.load(request.inputs).has_value());
  }
  SUBCASE("meta.json of another key is rejected") {
    const CompileRequest other = unique_request();
    KernelArtifact foreign = artifact;  // the same cubin: only the metadata tells them apart
    foreign.inputs = other.inputs;
    foreign.key = other.inputs.key();
    const fs::path other_entry = disk.store(foreign);
    fs::copy_file(other_entry / "meta.json", entry / "meta.json", fs::copy_options::overwrite_existing);
    CHECK_FALSE(disk.load(request.inputs).has_value());
    CHECK(disk.load(other.inputs).has_value());
  }
  SUBCASE("meta.json with this key but other inputs is rejected") {
    nlohmann::json meta = nlohmann::json::parse(test::read_text(entry / "meta.json"));
    REQUIRE(meta.at("key") == artifact.key);
    meta["inputs"]["options"] = meta["inputs"]["options"].get<std::string>() + " -DSOMETHING_ELSE";
    test::write_text(entry / "meta.json", meta.dump(2));
    CHECK_FALSE(disk.load(request.inputs).has_value());
  }
  SUBCASE("a leftover .tmp-* directory is ignored and not counted as an entry") {
    // What a crash between writing meta.json and the rename leaves behind: a complete-looking directory.
    const fs::path leftover = arch_dir / (".tmp-" + artifact.key + "-99999-deadbeef");
    fs::copy(entry, leftover, fs::copy_options::recursive);
    // And a temporary for a key that was never stored.
    const CompileRequest never = unique_request();
    const fs::path orphan = arch_dir / (".tmp-" + never.inputs.key() + "-99999-cafe");
    fs::copy(entry, orphan, fs::copy_options::recursive);
    REQUIRE(fs::exists(leftover / "meta.json"));

    CHECK(cache_entry_count() == 1);
    CHECK_FALSE(disk.load(never.inputs).has_value());
    loads_valid();
    // Storing next to leftovers still works, and leaves them alone.
    CHECK(disk.store(artifact) == entry);
    CHECK(cache_entry_count() == 1);
    CHECK(fs::exists(leftover));
  }
  SUBCASE("a lock file and an entry directory without meta.json are not entries") {
    { DiskCache::KeyLock lock(disk, request.inputs); }
    CHECK(fs::exists(entry.string() + ".lock"));
    fs::create_directories(arch_dir / "0123456789abcdef0123456789abcdef");
    test::write_text(arch_dir / "0123456789abcdef0123456789abcdef" / "kernel.cubin", "partial");
    CHECK(cache_entry_count() == 1);
  }

  // Whatever was damaged, storing again restores a valid entry.
  CHECK(disk.store(artifact) == entry);
  loads_valid();
}

// ---- concurrency ----------------------------------------------------------------------------------------

TEST_CASE("disk cache: 8 threads asking for one key compile it once and share the result") {
  test::TempDir dir("flashrtc-cache-threads");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const CompileRequest request = unique_request();
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<const KernelArtifact>> results(kThreads);
  std::vector<CacheSource> sources(kThreads, CacheSource::kMemory);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> waiting{kThreads};

  const CacheStats before = cache_stats();
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      --waiting;
      while (waiting.load() > 0) std::this_thread::yield();  // all ask at once
      try {
        results[i] = detail::get_artifact(request, &sources[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const CacheStats after = cache_stats();

  CHECK(after.compiles - before.compiles == 1);
  int compiled = 0;
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    CHECK(errors[i] == "");
    REQUIRE(results[i]);
    CHECK(results[i] == results[0]);  // one artifact, shared
    CHECK(results[i]->cubin == results[0]->cubin);
    CHECK(results[i]->cubin.size() > 0);
    compiled += sources[i] == CacheSource::kCompiled;
    CHECK(sources[i] != CacheSource::kDisk);
  }
  CHECK(compiled == 1);
  CHECK(cache_entry_count() == 1);
  const auto on_disk = DiskCache(detail::disk_cache_root(dir.path())).load(request.inputs);
  REQUIRE(on_disk.has_value());
  CHECK(on_disk->cubin == results[0]->cubin);
}

TEST_CASE("disk cache: 3 processes asking for one key at once compile it once") {
  test::TempDir dir("flashrtc-cache-procs");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  constexpr int kChildren = 3;
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child inherits the config above. It waits for the parent to close the pipe, so that all three
      // reach the cache together; then it reports where its kernel came from.
      ::close(go[1]);
      char byte;
      while (::read(go[0], &byte, 1) > 0) {
      }
      std::string result;
      try {
        result = to_string(compile_kernel(kMultiProcessSpec, "sm_80").source);
      } catch (const Error& e) {
        result = std::string("error:") + to_string(e.code()) + ": " + e.what();
      } catch (...) {
        result = "error:unknown";
      }
      test::write_text(dir.path() / ("child-" + std::to_string(i) + ".out"), result);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // go
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  std::multiset<std::string> results;
  for (int i = 0; i < kChildren; ++i)
    results.insert(test::read_text(dir.path() / ("child-" + std::to_string(i) + ".out")));
  INFO("children reported: " << [&] {
    std::string all;
    for (const auto& r : results) all += r + "; ";
    return all;
  }());
  CHECK(results.count("compiled") == 1);
  CHECK(results.count("disk") == kChildren - 1);

  CHECK(cache_entry_count() == 1);
  const fs::path arch_dir = cache_root() / "sm_80";
  std::size_t entries = 0;
  for (const auto& name : names_in(arch_dir))
    if (name.front() != '.' && name.find(".lock") == std::string::npos) ++entries;
  CHECK(entries == 1);
  CHECK(count_prefixed(arch_dir, ".tmp-") == 0);

  // This process never compiled it: it reads the children's entry.
  const CacheStats before = cache_stats();
  const CompiledKernelInfo info = compile_kernel(kMultiProcessSpec, "sm_80");
  CHECK(info.source == CacheSource::kDisk);
  CHECK(cache_stats().compiles == before.compiles);
}

// ---- persistence and deployment switches ----------------------------------------------------------------

TEST_CASE("disk cache: an entry compiled by another process is a disk hit here") {
  test::TempDir dir("flashrtc-cache-persist");
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const std::vector<std::pair<std::string, std::string>> env = {{"FLASHRTC_CACHE_DIR", dir.path().string()}};

  CHECK(run_child(dir.path(), kPersistSpec, "sm_80", env) == "compiled");
  CHECK(cache_entry_count() == 1);

  const CacheStats before = cache_stats();
  const CompiledKernelInfo info = compile_kernel(kPersistSpec, "sm_80");
  const CacheStats after = cache_stats();
  CHECK(info.source == CacheSource::kDisk);
  CHECK(after.compiles == before.compiles);
  CHECK(after.disk_hits - before.disk_hits == 1);
  CHECK(info.resources.registers > 0);
  CHECK(info.compile_ms > 0);  // the child's compile time, kept in meta.json
  CHECK(info.entry_dir.parent_path().parent_path() == cache_root());
  CHECK(fs::exists(info.entry_dir / "meta.json"));

  // A second process finds it on disk too; this one now has it in memory.
  CHECK(run_child(dir.path(), kPersistSpec, "sm_80", env) == "disk");
  CHECK(compile_kernel(kPersistSpec, "sm_80").source == CacheSource::kMemory);
  CHECK(cache_stats().compiles == before.compiles);
  CHECK(cache_entry_count() == 1);
}

TEST_CASE("FLASHRTC_REQUIRE_CACHED: an empty cache refuses to compile; a warmed one serves the kernel") {
  test::TempDir dir("flashrtc-cache-required");
  RuntimeConfig strict = test::config_with_cache_dir(dir.path());
  strict.require_cached = true;
  test::ConfigOverride config(strict);

  const CacheStats before = cache_stats();
  const Error refused = test::expect_error([&] { compile_kernel(kRequireCachedSpec, "sm_90a"); });
  CHECK(refused.code() == ErrorCode::kCompileDisallowed);
  CHECK(refused.message().find("FLASHRTC_REQUIRE_CACHED") != std::string::npos);
  CHECK(cache_stats().compiles == before.compiles);
  CHECK(cache_entry_count() == 0);
  // A failure is not remembered: asking again looks again (and is refused again).
  CHECK(test::expect_error([&] { compile_kernel(kRequireCachedSpec, "sm_90a"); }).code() ==
        ErrorCode::kCompileDisallowed);

  // The environment variable does the same in a fresh process.
  const std::vector<std::pair<std::string, std::string>> env = {{"FLASHRTC_CACHE_DIR", dir.path().string()}};
  auto strict_env = env;
  strict_env.emplace_back("FLASHRTC_REQUIRE_CACHED", "1");
  CHECK(run_child(dir.path(), kRequireCachedSpec, "sm_90a", strict_env) == "error:CompileDisallowed");
  CHECK(cache_entry_count() == 0);

  // Warm the cache in another process, as a deployment would ship it.
  CHECK(run_child(dir.path(), kRequireCachedSpec, "sm_90a", env) == "compiled");
  CHECK(cache_entry_count() == 1);

  const CompiledKernelInfo info = compile_kernel(kRequireCachedSpec, "sm_90a");
  CHECK(info.source == CacheSource::kDisk);
  CHECK(cache_stats().compiles == before.compiles);
  CHECK(run_child(dir.path(), kRequireCachedSpec, "sm_90a", strict_env) == "disk");
  // sm_90 is another kernel: still refused.
  CHECK(test::expect_error([&] { compile_kernel(kRequireCachedSpec, "sm_90"); }).code() ==
        ErrorCode::kCompileDisallowed);
}

TEST_CASE("disabled disk cache: nothing is written") {
  test::TempDir dir("flashrtc-cache-off");
  RuntimeConfig off = test::config_with_cache_dir(dir.path());
  off.disk_cache = false;
  test::ConfigOverride config(off);
  const CompileRequest request = unique_request();
  CacheSource how = CacheSource::kMemory;
  const auto artifact = detail::get_artifact(request, &how);
  CHECK(how == CacheSource::kCompiled);
  CHECK(artifact->entry_dir.empty());
  CHECK(cache_entry_count() == 0);
  CHECK(names_in(dir.path()).empty());
}
