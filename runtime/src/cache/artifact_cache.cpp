#include "cache/artifact_cache.hpp"

#include <atomic>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "cache/disk_cache.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"
#include "support/log.hpp"

namespace flashrtc::detail {

namespace {

std::atomic<std::uint64_t> g_memory_hits{0}, g_disk_hits{0}, g_compiles{0};

void dump_sources(const CompileRequest& request, const std::string& key) {
  const auto& dir = runtime_config().dump_sources_dir;
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  const fs::path out = dir / key;
  std::error_code error;
  fs::create_directories(out, error);
  auto write = [&](const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path(), error);
    std::ofstream(path, std::ios::binary) << text;
  };
  write(out / request.nvrtc.program_name, request.nvrtc.source);
  for (const auto& [name, content] : request.nvrtc.headers) write(out / name, content);
  write(out / "nvrtc_options.txt",
        join_options(request.nvrtc.options) + "\nname expression: " + request.nvrtc.name_expression + "\n");
  log().info("sources of {} dumped to {}", key, out.string());
}

Error compile_disallowed(const CompileRequest& request, const std::string& key, const std::string& problem) {
  return Error(ErrorCode::kCompileDisallowed,
               "FLASHRTC_REQUIRE_CACHED is set and " + request.inputs.name_expression + " for " +
                   request.inputs.arch + " is not in the cache at " + runtime_config().cache_dir.string() +
                   (problem.empty() ? "" : " (its entry is unusable: " + problem + ")"),
               "", "", "", request.inputs.options, key);
}

KernelArtifact compile(const CompileRequest& request, const std::string& key) {
  if (runtime_config().require_cached) throw compile_disallowed(request, key, "");
  dump_sources(request, key);
  KernelArtifact artifact = artifact_from_compile(request, key, nvrtc_compile(request.nvrtc, key));
  ++g_compiles;
  log().info("compiled {} for {} in {:.0f} ms ({} registers, key {})", request.inputs.name_expression,
             request.inputs.arch, artifact.compile_ms, artifact.resources.registers, key);
  // Once, when it is compiled: later loads of the entry stay quiet (`flashrtc cache ls --spills` and
  // `--serialized` list them).
  if (artifact.resources.spills())
    log().warn("{} for {} spills: {} bytes stored, {} bytes loaded (key {})", request.inputs.name_expression,
               request.inputs.arch, artifact.resources.spill_store_bytes, artifact.resources.spill_load_bytes,
               key);
  if (artifact.resources.wgmma_serialized)
    log().warn("{} for {}: ptxas serialized its wgmma.mma_async instructions: {} (key {})",
               request.inputs.name_expression, request.inputs.arch,
               artifact.resources.wgmma_serialized_reason, key);
  return artifact;
}

// Cache roots this process cannot write (read-only, missing and uncreatable, full): entries are still read
// from them, compiled kernels stay in memory, and the cause is logged once per root, not once per kernel.
class UnwritableRoots {
 public:
  bool contains(const std::filesystem::path& root) {
    std::lock_guard<std::mutex> lock(mutex_);
    return roots_.count(root.string()) > 0;
  }
  void add(const std::filesystem::path& root, const std::string& cause) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (roots_.insert(root.string()).second)
      log().warn("disk cache {} cannot be written ({}): compiled kernels stay in memory for this process",
                 root.string(), cause);
  }

 private:
  std::mutex mutex_;
  std::set<std::string> roots_;
};

UnwritableRoots& unwritable_roots() {
  static UnwritableRoots* roots = new UnwritableRoots;  // leaked, as artifact_cache()
  return *roots;
}

// Disk first (unless told to always compile), then NVRTC under the key's lock, looking again once the lock
// is held: another process may have compiled it meanwhile. FLASHRTC_REQUIRE_CACHED is settled before any
// lock, so a read-only warmed cache answers kCompileDisallowed for a missing kernel.
KernelArtifact fetch_or_compile(const CompileRequest& request, const std::string& key) {
  const RuntimeConfig& config = runtime_config();
  if (!config.disk_cache) return compile(request, key);
  DiskCache disk(disk_cache_root(config.cache_dir));
  std::string problem;
  if (!config.always_compile) {
    if (auto hit = disk.load(request.inputs, &problem)) return std::move(*hit);
  }
  if (config.require_cached) throw compile_disallowed(request, key, problem);
  if (!problem.empty()) warn_unusable_entry(disk.entry_dir(request.inputs), problem);

  UnwritableRoots& unwritable = unwritable_roots();
  std::optional<DiskCache::KeyLock> lock;
  if (!unwritable.contains(disk.root())) {
    try {
      lock.emplace(disk, request.inputs);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kCacheIo) throw;
      unwritable.add(disk.root(), e.message());
    }
  }
  if (lock && !config.always_compile) {
    std::string again;
    if (auto hit = disk.load(request.inputs, &again)) return std::move(*hit);
    if (!again.empty() && again != problem)
      warn_unusable_entry(disk.entry_dir(request.inputs), again);  // another process damaged it meanwhile
  }
  KernelArtifact artifact = compile(request, key);
  if (lock) {
    try {
      artifact.entry_dir = disk.store(artifact);
    } catch (const Error& e) {
      // A read-only or full cache directory costs a recompile next process, not this call.
      if (e.code() != ErrorCode::kCacheIo) throw;
      unwritable.add(disk.root(), e.message());
    }
  }
  return artifact;
}

struct ArtifactCache {
  std::mutex mutex;
  std::map<std::string, std::shared_future<std::shared_ptr<const KernelArtifact>>> entries;
};

ArtifactCache& artifact_cache() {
  static ArtifactCache* cache =
      new ArtifactCache;  // leaked: outlives every static destructor that may use it
  return *cache;
}

}  // namespace

std::shared_ptr<const KernelArtifact> get_artifact(const CompileRequest& request, CacheSource* how) {
  const std::string key = request.inputs.key();
  ArtifactCache& cache = artifact_cache();
  std::promise<std::shared_ptr<const KernelArtifact>> promise;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) {
      ++g_memory_hits;
      log().debug("memory cache hit {}", key);
      auto future = it->second;
      if (how) *how = CacheSource::kMemory;
      return future.get();  // waits while another thread compiles it; rethrows its failure
    }
    cache.entries.emplace(key, promise.get_future().share());
  }
  try {
    auto artifact = std::make_shared<KernelArtifact>(fetch_or_compile(request, key));
    if (artifact->source == CacheSource::kDisk) {
      ++g_disk_hits;
      log().debug("disk cache hit {}", key);
    }
    promise.set_value(artifact);
    if (how) *how = artifact->source;
    return artifact;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.erase(key);  // a later call tries again
    throw;
  }
}

CacheStats artifact_cache_stats() {
  return {g_memory_hits.load(), g_disk_hits.load(), g_compiles.load()};
}

}  // namespace flashrtc::detail
