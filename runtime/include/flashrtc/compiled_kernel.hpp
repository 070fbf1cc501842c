#pragma once
/// What the compile and cache layers report about a compiled kernel, whatever kernel it is: ptxas's
/// resource report, where the kernel came from, the cache's counters and location. Generic: kernel.hpp
/// (the attention forward) and any later kernel family build on it.
#include <cstdint>
#include <filesystem>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// What ptxas reported for one kernel (its -v output, parsed).
struct ResourceReport {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;  ///< local memory per thread; not a spill by itself
  int static_smem_bytes = 0;
  int barriers = 0;
  /// ptxas could not keep the kernel's wgmma.mma_async instructions pipelined and waits after each one
  /// (about half the tensor-core rate); it says so only in its -v log (advisory C75xx).
  bool wgmma_serialized = false;
  /// When serialized: ptxas's reason and advisory code, e.g. "insufficient register resources for the wgmma
  /// pipeline (C7511)"; else empty.
  std::string wgmma_serialized_reason;
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

/// Where a compiled kernel came from, and what it is.
enum class CacheSource : int { kMemory = 0, kDisk = 1, kCompiled = 2 };
FLASHRTC_API const char* to_string(CacheSource source);

struct CompiledKernelInfo {
  std::string key;  ///< hex digest of everything that changes the generated code
  std::string name_expression;
  std::string lowered_name;
  std::string arch;  ///< e.g. "sm_90a"
  ResourceReport resources;
  double compile_ms = 0;  ///< NVRTC time when it was compiled (also for cache hits)
  CacheSource source = CacheSource::kCompiled;
  std::filesystem::path entry_dir;  ///< empty when the disk cache is off
};

/// "major.minor" of the NVRTC library in use.
FLASHRTC_API std::string nvrtc_version();
/// The NVRTC build in use, e.g. "13.0 V13.0.88 CL-36424714" (from the PTX header it writes): part of every
/// cache key, so that another build of NVRTC never gets this one's cubins. Computed once per process.
FLASHRTC_API std::string nvrtc_build();

/// Counters since process start.
struct CacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;
};
FLASHRTC_API CacheStats cache_stats();

/// Directory of the disk cache entries for the current format version (may not exist yet).
FLASHRTC_API std::filesystem::path cache_root();
/// Number of complete entries (meta.json present) under cache_root(), all archs.
FLASHRTC_API std::size_t cache_entry_count();

}  // namespace flashrtc
