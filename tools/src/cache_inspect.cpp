#include "flashrtc_tools/cache_inspect.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "flashrtc/error.hpp"
#include "flashrtc_tools/external_tool.hpp"
#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

std::vector<CacheEntry> sorted_cache_entries(CacheEntryFilter filter) {
  std::vector<CacheEntry> entries = list_cache_entries();
  const auto dropped = [filter](const CacheEntry& e) {
    if (filter == CacheEntryFilter::kSpilling) return !e.resources.spills();
    return filter == CacheEntryFilter::kWgmmaSerialized && !e.resources.wgmma_serialized;
  };
  entries.erase(std::remove_if(entries.begin(), entries.end(), dropped), entries.end());
  std::sort(entries.begin(), entries.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return std::tie(a.arch, a.kernel, a.dtype, a.head_dim, a.mask, a.tile.block_m, a.tile.block_n,
                    a.tile.warps, a.tile.stages, a.key) < std::tie(b.arch, b.kernel, b.dtype, b.head_dim,
                                                                   b.mask, b.tile.block_m, b.tile.block_n,
                                                                   b.tile.warps, b.tile.stages, b.key);
  });
  return entries;
}

std::string short_kernel_name(const std::string& kernel) {
  const std::string prefix = "attention_forward_";
  return kernel.rfind(prefix, 0) == 0 ? kernel.substr(prefix.size()) : kernel;
}

std::string cache_cleanup_failure(const CacheCleanup& result, const std::filesystem::path& root) {
  if (result.not_removed.empty()) return {};
  bool not_writable = false;
  for (const RemovedEntry& r : result.not_removed)
    for (const int code : {EACCES, EPERM, EROFS})
      not_writable |= r.error.find(std::strerror(code)) != std::string::npos;
  const std::size_t n = result.not_removed.size();
  return std::to_string(n) + (n == 1 ? " entry" : " entries") + " could not be removed: " +
         (not_writable ? "the cache at " + root.string() + " is not writable"
                       : "see the errors above (cache at " + root.string() + ")");
}

std::string not_removed_line(const RemovedEntry& r) {
  const std::string name = r.arch.empty() ? r.key : r.arch + "/" + r.key;
  return "cannot remove " + name + " (" + r.reason + "): " + r.error;
}

int print_entry_sass(const CacheEntry& e, const std::vector<std::string>& search_dirs) {
  std::fflush(stdout);
  if (const auto cuobjdump = find_tool("cuobjdump", search_dirs))
    return run_tool(*cuobjdump, {"-sass", e.cubin_path.string()});
  if (const auto nvdisasm = find_tool("nvdisasm", search_dirs))
    return run_tool(*nvdisasm, {"-c", e.cubin_path.string()});
  throw MissingTool(
      "SASS needs cuobjdump or nvdisasm, the CUDA toolkit's binary utilities; neither is on PATH, in "
      "$CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin or " +
      pip_tools_bin_dir() +
      ". Get them from PyPI (NVIDIA's wheels, about 5 MB): `make deps` in the flashrtc "
      "checkout, or `pip install --target " +
      pip_tools_dir() +
      " nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`; or from NVIDIA's CUDA repository, `apt-get install "
      "cuda-cuobjdump-13-0 cuda-nvdisasm-13-0`. The cubin is " +
      e.cubin_path.string());
}

}  // namespace flashrtc::tools
