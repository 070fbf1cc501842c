#include "disk_cache.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/kernel.hpp"
#include "kernel_cache.hpp"
#include "nvrtc_compiler.hpp"

namespace flashrtc {

std::string nvrtc_version() { return detail::nvrtc_version_string(); }

CacheStats cache_stats() { return detail::kernel_cache_stats(); }

std::filesystem::path cache_root() { return detail::disk_cache_root(runtime_config().cache_dir); }

std::size_t cache_entry_count() {
  namespace fs = std::filesystem;
  std::size_t count = 0;
  std::error_code error;
  for (fs::directory_iterator arch(cache_root(), error), end; !error && arch != end; arch.increment(error)) {
    if (!arch->is_directory()) continue;
    std::error_code inner;
    for (fs::directory_iterator entry(arch->path(), inner); !inner && entry != end; entry.increment(inner))
      // Dot-prefixed names are DiskCache::store's temporaries (a crash leaves them, meta.json included).
      if (entry->is_directory() && entry->path().filename().string()[0] != '.' &&
          fs::exists(entry->path() / "meta.json"))
        ++count;
  }
  return count;
}

}  // namespace flashrtc
