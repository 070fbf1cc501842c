#pragma once
/// Inspecting and maintaining the disk cache (`flashrtc cache`): its entries with the resources ptxas
/// reported, and verify / prune / clear. Needs no GPU.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/export.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tile_config.hpp"

namespace flashrtc {

/// One entry directory under cache_root(), as its meta.json describes it.
struct CacheEntry {
  std::string key;
  std::string arch;
  std::filesystem::path dir;
  std::string problem;  ///< empty when meta.json was read; else why not (`flashrtc cache verify` drops it)
  std::string kernel;   ///< the kernel family recorded at compile time, e.g. "attention_forward_simt"
  std::string name_expression, lowered_name;
  std::string dtype, mask;  ///< as recorded ("bf16", "causal"); empty when the kernel recorded none
  int head_dim = 0;
  TileConfig tile{0, 0, 0, 0};  ///< zeros when not recorded
  std::size_t smem_bytes = 0;   ///< dynamic shared memory per block
  ResourceReport resources;     ///< from ptxas's own -v report
  double compile_ms = 0;
  std::uint64_t size_bytes = 0;  ///< all files of the entry
  std::int64_t created_unix = 0;
  std::int64_t last_used_unix = 0;  ///< the last load from disk (or the compile)
  std::string meta_json;            ///< meta.json's text
  std::filesystem::path cubin_path, ptx_path, log_path;
};

/// Every entry directory of every arch, sorted by arch and key. Never throws; a missing cache is empty.
FLASHRTC_API std::vector<CacheEntry> list_cache_entries();

/// The entry whose key starts with key_prefix. Throws Error(kInvalidArgument) when none or several match
/// (naming them).
FLASHRTC_API CacheEntry find_cache_entry(std::string_view key_prefix);

struct RemovedEntry {
  std::string key, arch;
  std::string reason;
  std::uint64_t bytes = 0;
};

struct CacheCleanup {
  std::size_t entries_checked = 0;
  std::vector<RemovedEntry> removed;
  std::uint64_t bytes_kept = 0;
};

/// Re-reads every entry as a load would, re-hashing its cubin and its key, and removes the entries that
/// fail (and temporaries older than an hour, which a crash left behind). Entries are removed under their
/// key's lock, so a concurrent compile of the same key is not disturbed.
FLASHRTC_API CacheCleanup verify_cache();

/// Removes entries unused for longer than older_than_seconds, then the least recently used ones until the
/// cache holds at most max_bytes. Either may be absent.
FLASHRTC_API CacheCleanup prune_cache(std::optional<std::int64_t> older_than_seconds,
                                      std::optional<std::uint64_t> max_bytes);

/// Removes every entry of every arch (the tuning database, beside the entries, stays).
FLASHRTC_API CacheCleanup clear_cache();

}  // namespace flashrtc
