#pragma once
// Inspecting the disk cache beyond what the runtime lists: entries sorted for a table, as JSON, their
// files, and their SASS through the toolkit's disassemblers.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashrtc/cache_entries.hpp"

namespace flashrtc::tools {

/// The cache's entries in table order (arch, kernel, dtype, head dim, mask, tile, key); with spilling_only,
/// only those whose kernel spills registers.
std::vector<CacheEntry> sorted_cache_entries(bool spilling_only);

/// "attention_forward_simt" -> "simt": the family is what tells entries apart in a table.
std::string short_kernel_name(const std::string& kernel);

/// Every field of an entry (the specialization nested), as `flashrtc cache ls --json` prints it.
nlohmann::json cache_entry_json(const CacheEntry& entry);

/// The whole file (an entry's PTX or compile log). Throws Error(kCacheIo) when it cannot be read.
std::string read_entry_file(const std::filesystem::path& path);

/// Prints the SASS of an entry's cubin to stdout through cuobjdump, else nvdisasm. The tool's exit status;
/// throws MissingTool when neither is installed.
int print_entry_sass(const CacheEntry& entry);

}  // namespace flashrtc::tools
