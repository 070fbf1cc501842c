#pragma once
/// The tuning database: the tile `flashrtc tune` measured fastest, per GPU and kernel specialization, in a
/// JSON file that every later process consults (config_resolution.hpp) with no rebuild.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc/export.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// What a tuned tile is valid for. Sequence lengths are bucketed (seqlen_bucket) so that one tune serves
/// nearby lengths.
struct TuningKey {
  std::string gpu_name;       ///< cuDeviceGetName, e.g. "NVIDIA H200"
  std::string arch;           ///< the arch kernels are compiled for, e.g. "sm_90a"
  std::string nvrtc_version;  ///< "13.0": another compiler makes other code
  std::string family;         ///< the kernel family's name (kernel_family.hpp), e.g. "mma"
  DType dtype = DType::kFloat32;
  int head_dim = 0;
  MaskKind mask = MaskKind::kNone;
  std::int64_t seqlen_q_bucket = 0, seqlen_kv_bucket = 0;

  bool operator==(const TuningKey& o) const;
};

/// "NVIDIA H200 sm_90a nvrtc 13.0 simt bf16 d=128 mask=none Nq<=4096 Nk<=4096".
FLASHRTC_API std::string to_string(const TuningKey& key);

/// The key of a call on the named GPU and arch, with this process's NVRTC version and family (by name), or when
/// family is empty the family the call runs on there (select_kernel_family: throws Error(kUnsupported) when
/// none serves it), Error(kInvalidArgument) for a length over kMaxSeqlenBucket.
FLASHRTC_API TuningKey make_tuning_key(const std::string& gpu_name, const std::string& arch, DType dtype,
                                       int head_dim, MaskKind mask, std::int64_t seqlen_q, std::int64_t seqlen_kv,
                                       const std::string& family = {});

/// One tuned tile and how it was measured.
struct TuningEntry {
  TuningKey key;
  TileConfig config;
  double median_ms = 0;  ///< of the winner, on the shape below
  double tflops = 0;
  std::int64_t batch = 0, heads = 0, seqlen_q = 0, seqlen_kv = 0;  ///< the shape it was tuned on
  std::string space;  ///< the candidate space swept: "quick" or "full"
  std::int64_t tuned_unix = 0;
};

/// RuntimeConfig::tune_db (FLASHRTC_TUNE_DB), else <cache_dir>/tuning_db.json.
FLASHRTC_API std::filesystem::path tuning_db_path();

/// Every entry of the database at tuning_db_path(). The file is read once per process (and path); a missing
/// file is an empty database; an unreadable, corrupt or stale one (another format version) is ignored with
/// a warning, as is each malformed entry on its own. Never throws.
FLASHRTC_API std::vector<TuningEntry> tuning_db_entries();

/// The entry for key, if the database has one.
FLASHRTC_API std::optional<TuningEntry> find_tuning_entry(const TuningKey& key);

/// Merges entry into the database file: under a lock, re-reads the file (so concurrent tunes of other
/// keys are kept), replaces any entry with the same key, writes a temporary file and renames it into place.
/// An unreadable file is set aside as "<path>.unreadable" with a warning. This process sees the merged
/// database afterwards. Throws Error(kCacheIo) when the file cannot be written.
FLASHRTC_API void record_tuning_entry(const TuningEntry& entry);

}  // namespace flashrtc
