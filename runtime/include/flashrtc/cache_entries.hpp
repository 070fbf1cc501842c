#pragma once
/// Inspecting and maintaining the disk cache (`flashrtc cache`): its entries with the resources ptxas
/// reported, and verify / prune / clear. Needs no GPU.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashrtc/compiled_kernel.hpp"
#include "flashrtc/export.hpp"

namespace flashrtc {

/// One entry directory under cache_root(), as its meta.json describes it.
struct CacheEntry {
  std::string key;
  std::string arch;
  std::filesystem::path dir;
  /// Empty for a sound entry; else why it is bad (printable ASCII), the same reason a load and
  /// verify_cache give: then only key, arch, dir, sizes, times and meta_json are set.
  std::string problem;
  std::string kernel;  ///< the kernel's "family" field, e.g. "attention_forward_simt"
  std::string name_expression, lowered_name;
  std::string nvrtc_build;  ///< the NVRTC build that compiled it, e.g. "13.0 V13.0.88 CL-36424714"
  /// Every field the kernel layer recorded, in meta.json's order, values as text ("bf16", "128", "true").
  std::vector<std::pair<std::string, std::string>> kernel_fields;
  /// The forward families' fields, read by name from kernel_fields: empty or zero when not recorded.
  std::string dtype, mask;
  int head_dim = 0;
  struct Tile {
    int block_m = 0, block_n = 0, warps = 0, stages = 0;
  } tile;
  std::size_t smem_bytes = 0;  ///< dynamic shared memory per block ("smem_bytes")
  ResourceReport resources;    ///< from ptxas's own -v report
  double compile_ms = 0;
  std::uint64_t size_bytes = 0;  ///< all files of the entry
  std::int64_t created_unix = 0;
  std::int64_t last_used_unix = 0;  ///< the last load from disk (or the compile)
  std::string meta_json;            ///< meta.json's text; empty when over its size or nesting limit
  std::filesystem::path cubin_path, ptx_path, log_path;
};

/// Every entry directory of every arch, sorted by arch and key, each checked as a load checks it (every
/// file re-hashed): a bad entry is listed with its problem, the others as usual. Never throws; a missing
/// cache is empty.
FLASHRTC_API std::vector<CacheEntry> list_cache_entries();

/// The entry whose key starts with key_prefix. Throws Error(kInvalidArgument) when none or several match
/// (naming them).
FLASHRTC_API CacheEntry find_cache_entry(std::string_view key_prefix);

/// The whole of one file of an entry (e.g. CacheEntry::ptx_path, log_path), read as a load reads it: only a
/// regular file, not through a symbolic link, at most the cache's size limit. Throws Error(kCacheIo) naming
/// the file and what is wrong with it.
FLASHRTC_API std::string read_cache_entry_file(const std::filesystem::path& file);

/// The first bytes of one file of an entry, for showing a log or PTX of any size.
struct CacheFileHead {
  std::string text;               ///< at most the bytes asked for, cut where a UTF-8 character starts
  std::uint64_t total_bytes = 0;  ///< the whole file's size
  std::uint64_t not_shown_bytes() const { return total_bytes - text.size(); }
};

/// Reads the first max_bytes of file as read_cache_entry_file reads it (only a regular file, not through a
/// symbolic link), whatever its size, never more. Throws Error(kCacheIo) naming the file and what is wrong.
FLASHRTC_API CacheFileHead read_cache_entry_file_head(const std::filesystem::path& file,
                                                      std::size_t max_bytes);

struct RemovedEntry {
  std::string key, arch;
  std::string reason;  ///< why it goes
  std::uint64_t bytes = 0;
  std::string error;  ///< in CacheCleanup::not_removed: why it could not go (errno's text); else empty
};

struct CacheCleanup {
  std::size_t entries_checked = 0;
  std::vector<RemovedEntry> removed;
  /// What should have gone but is still there, e.g. every bad entry of a read-only cache. Not empty means
  /// the cleanup is incomplete: a caller reports it and fails.
  std::vector<RemovedEntry> not_removed;
  std::uint64_t bytes_kept = 0;
};

/// Re-reads every entry as a load would (list_cache_entries' problem), and removes the entries that fail
/// (and temporaries older than an hour, which a crash left behind, and lock files of absent entries).
/// Entries are removed under their key's lock, so a concurrent compile of the same key is not disturbed;
/// the lock file goes with the entry. A symbolic link where the cache has a directory or a lock file is bad
/// too and goes as a link: nothing outside the cache directory is ever followed, removed or created. Never
/// throws for I/O: what it cannot remove is in not_removed.
FLASHRTC_API CacheCleanup verify_cache();

/// Removes entries unused for longer than older_than_seconds, then the least recently used ones until the
/// cache holds at most max_bytes. Either may be absent. As verify_cache, what it cannot remove is in
/// not_removed (and still counted in bytes_kept).
FLASHRTC_API CacheCleanup prune_cache(std::optional<std::int64_t> older_than_seconds,
                                      std::optional<std::uint64_t> max_bytes);

/// Removes every entry of every arch, then the format-version directory with its lock files and
/// temporaries (the tuning database, beside it, stays). What it cannot remove is in not_removed.
FLASHRTC_API CacheCleanup clear_cache();

}  // namespace flashrtc
