#pragma once
// The one definition of a disk cache entry: <root>/<arch>/<key>/ holding
//   kernel.cubin  the machine code         kernel.ptx   the PTX
//   compile.log   NVRTC's log (ptxas -v)   meta.json    inputs, lowered name, kernel fields, resources,
//                                                       file sizes, and the entry digest over all of it
// written into a dot-prefixed temporary directory and renamed into place, meta.json last. Reading checks
// everything the entry claims (sizes, the digest, the key against its inputs, the directory it sits in), with
// bounded reads and bounded JSON nesting, so that load (DiskCache), `cache ls` and `cache verify` call the
// same entries bad for the same reason.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compile/kernel_artifact.hpp"

namespace flashrtc::detail {

inline constexpr const char* kCubinFile = "kernel.cubin";
inline constexpr const char* kPtxFile = "kernel.ptx";
inline constexpr const char* kLogFile = "compile.log";
inline constexpr const char* kMetaFile = "meta.json";

// Far above real entries (cubins and PTX of a few MB, meta.json of 2 KB): a larger file is damage.
inline constexpr std::uint64_t kMaxEntryFileBytes = std::uint64_t{256} << 20;
inline constexpr std::uint64_t kMaxMetaBytes = std::uint64_t{1} << 20;

struct EntryRead {
  std::optional<KernelArtifact> artifact;  // set when the entry is sound (source kDisk, entry_dir set)
  std::string problem;                     // why it is not: printable ASCII, "" when sound
  bool absent = false;                     // no meta.json at all: no entry (a miss, not damage)
  std::string meta_text;  // meta.json's text, when it was read within the size and depth limits
  std::int64_t created_unix = 0;
};

// An entry's path split where trust ends: the configured cache directory (followed as given: a user may
// link it anywhere) and "v<format>/<arch>/<key>" below it, which anyone who can write the cache may have
// replaced with links, so its components are opened without following any (support/beneath.hpp).
struct EntryPath {
  std::filesystem::path cache_dir, below;
};
EntryPath split_entry_path(const std::filesystem::path& entry_dir);

// Reads and checks the entry at dir (<root>/<arch>/<key>), never through a link: a linked entry, arch or
// version directory is a bad entry. A file whose size is not the recorded one is refused unread. Never
// throws.
EntryRead read_entry(const std::filesystem::path& dir);

// Writes artifact as the entry at dir, atomically: readers see the old entry, none, or the new one complete.
// Replaces whatever is at dir (a link itself, not what it names); creates no directory through a link.
// Throws Error(kCacheIo) naming the file and errno's text.
void write_entry(const std::filesystem::path& dir, const KernelArtifact& artifact);

}  // namespace flashrtc::detail
