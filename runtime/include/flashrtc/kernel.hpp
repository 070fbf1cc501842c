#pragma once
/// Compiling kernel specializations, for tools that warm or inspect the cache without a GPU.
#include <cstdint>
#include <filesystem>
#include <string>

#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// Everything that selects one forward kernel instantiation (its family, dtype, head dim, mask and tile).
using ForwardSpec = KernelSpec;

/// The NVRTC name expression of spec's kernel (the portable family's when spec.family is null), e.g.
/// "flashrtc::attention_forward_simt<float, 64, 64, 64, 4, 2, flashrtc::kernel::Mask::kNone>".
FLASHRTC_API std::string forward_name_expression(const ForwardSpec& spec);

/// What ptxas reported for one kernel (its -v output, parsed).
struct ResourceReport {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;  ///< local memory per thread; not a spill by itself
  int static_smem_bytes = 0;
  int barriers = 0;
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

/// Where a compiled kernel came from, and what it is.
enum class CacheSource : int { kMemory = 0, kDisk = 1, kCompiled = 2 };
FLASHRTC_API const char* to_string(CacheSource source);

struct CompiledKernelInfo {
  std::string key;            ///< hex digest of everything that changes the generated code
  std::string name_expression;
  std::string lowered_name;
  std::string arch;           ///< e.g. "sm_90a"
  ResourceReport resources;
  double compile_ms = 0;      ///< NVRTC time when it was compiled (also for cache hits)
  CacheSource source = CacheSource::kCompiled;
  std::filesystem::path entry_dir;  ///< empty when the disk cache is off
};

/// Compiles (or finds in the cache) the forward kernel for spec and arch ("sm_80", "sm_90a", ...): spec.family's,
/// or when it is null the family a call of spec's dtype and head dim runs on for arch. Needs no GPU. Throws Error: kInvalidArgument for a bad spec or arch, kNvrtc on compile failure,
/// kCompileDisallowed under FLASHRTC_REQUIRE_CACHED.
FLASHRTC_API CompiledKernelInfo compile_forward(const ForwardSpec& spec, const std::string& arch);

/// "major.minor" of the NVRTC library in use.
FLASHRTC_API std::string nvrtc_version();

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
