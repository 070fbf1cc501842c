#include "cache/artifact_cache.hpp"
#include "cache/cache_entry_layout.hpp"
#include "cache/cache_scan.hpp"
#include "cache/disk_cache.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "flashrtc/compiled_kernel.hpp"
#include "flashrtc/config.hpp"

namespace flashrtc {

const char* to_string(CacheSource source) {
  switch (source) {
    case CacheSource::kMemory:
      return "memory";
    case CacheSource::kDisk:
      return "disk";
    case CacheSource::kCompiled:
      return "compiled";
  }
  return "unknown";
}

std::string nvrtc_version() {
  return detail::nvrtc_version_string();
}

std::string nvrtc_build() {
  return detail::nvrtc_build_identity();
}

CacheStats cache_stats() {
  return detail::artifact_cache_stats();
}

std::filesystem::path cache_root() {
  return detail::disk_cache_root(runtime_config().cache_dir);
}

std::size_t cache_entry_count() {
  namespace fs = std::filesystem;
  std::size_t count = 0;
  std::error_code error;
  // A linked entry directory is no entry (cache_entry_dirs lists it for maintenance).
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root()))
    count += fs::symlink_status(dir, error).type() == fs::file_type::directory &&
             fs::symlink_status(dir / detail::kMetaFile, error).type() == fs::file_type::regular;
  return count;
}

}  // namespace flashrtc
