#pragma once
// Inspecting the disk cache beyond what the runtime lists: entries sorted for a table (their JSON form is
// in json_fields.hpp), their files, and their SASS through the toolkit's disassemblers.
#include <filesystem>
#include <string>
#include <vector>

#include "flashrtc/cache_entries.hpp"
#include "flashrtc_tools/external_tool.hpp"

namespace flashrtc::tools {

/// Which entries sorted_cache_entries keeps: all, those whose kernel spills registers, or those whose
/// wgmma.mma_async instructions ptxas serialized (ResourceReport::wgmma_serialized).
enum class CacheEntryFilter { kAll, kSpilling, kWgmmaSerialized };

/// The cache's entries in table order (arch, kernel, dtype, head dim, mask, tile, key) that filter keeps.
std::vector<CacheEntry> sorted_cache_entries(CacheEntryFilter filter = CacheEntryFilter::kAll);

/// "attention_forward_simt" -> "simt": the family is what tells entries apart in a table.
std::string short_kernel_name(const std::string& kernel);

/// "cannot remove sm_80/<key> (<reason>): <error>": one entry a cleanup left in not_removed.
std::string not_removed_line(const RemovedEntry& entry);

/// The one summary line of a cleanup that left entries behind ("2 entries could not be removed: the cache
/// at X is not writable"), or "" when it removed all it meant to.
std::string cache_cleanup_failure(const CacheCleanup& result, const std::filesystem::path& root);

/// Prints the SASS of an entry's cubin to stdout through cuobjdump, else nvdisasm, the first found in
/// search_dirs. The tool's exit status; throws MissingTool, saying how to install them, when neither is
/// found.
int print_entry_sass(const CacheEntry& entry,
                     const std::vector<std::string>& search_dirs = tool_search_dirs());

}  // namespace flashrtc::tools
