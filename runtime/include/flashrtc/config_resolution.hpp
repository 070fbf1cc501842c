#pragma once
/// Which family and tile a kernel of a call uses, decided in one place for every launch of every operation
/// (the forward, and each kernel of the backward). In order of precedence: the call's explicit tile
/// (ForwardParams::config, BackwardParams::config / dq_config); FLASHRTC_CONFIG for the forward (its fields
/// override the tile below it); the tuning database (tuning_db.hpp); the family's built-in default. The query
/// of a call comes from config_query (attention.hpp, attention_backward.hpp).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

enum class ConfigSource : int { kExplicit = 0, kEnvironment = 1, kTuned = 2, kDefault = 3 };
/// "explicit", "environment", "tuned", "default".
FLASHRTC_API const char* to_string(ConfigSource source);

/// Tile fields given by name; the ones given replace the same fields of the tile they apply to.
struct TileOverride {
  std::optional<int> block_m, block_n, warps, stages;
  bool empty() const { return !block_m && !block_n && !warps && !stages; }
  TileConfig apply(TileConfig base) const;
};

/// Parses "block_m=64,block_n=64,warps=4,stages=2": any subset, any order, spaces around items allowed.
/// Throws Error(kInvalidArgument) whose message starts with origin (e.g. "FLASHRTC_CONFIG") and names the
/// field: an unknown field, a missing or non-integer value, a field given twice, an empty item.
FLASHRTC_API TileOverride parse_tile_override(std::string_view text, std::string_view origin = "FLASHRTC_CONFIG");

/// The device a tile is chosen for. The tuning database is keyed by its name and arch; its opt-in shared
/// memory per block bounds the tile.
struct DeviceTarget {
  std::string gpu_name;  ///< empty when no device is known: then no tuned entry applies
  std::string arch;      ///< what kernels are compiled for (FLASHRTC_ARCH, else the device's), e.g. "sm_90a"
  std::size_t smem_limit_bytes = kSmemBytesSm80;
};

/// The current device (FLASHRTC_ARCH replacing its arch), or nullopt when there is none.
/// Throws Error(kDriver) when a device exists but cannot be queried.
FLASHRTC_API std::optional<DeviceTarget> current_device_target();
/// What a call resolves against without a device: no name (no tuned entry) and sm_80's shared memory, so the
/// tile runs on every GPU flashrtc targets.
FLASHRTC_API DeviceTarget no_device_target();
/// A named device that is not in hand (e.g. preparing an image): shared memory assumed from arch
/// (assumed_sm_limits in tuning_space.hpp).
FLASHRTC_API DeviceTarget assumed_device_target(const std::string& gpu_name, const std::string& arch);

/// The part of a call that decides its family and tile. Resolution reads the lengths only through
/// seqlen_bucket, so calls whose queries are equal after bucketed() resolve alike.
struct ConfigQuery {
  DType dtype = DType::kFloat32;
  int head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  std::int64_t seqlen_q = 1, seqlen_kv = 1;
  std::optional<TileConfig> explicit_config;
  Operation operation = Operation::kForward;
  unsigned traits = kAllCallTraits;  ///< CallTrait bits of the call's tensors (kernel_family.hpp)
  /// VariantBit bits of the call's variants (variant_bits): only a family that serves them all runs the call,
  /// and its kernel is compiled with them. Not part of the tile: tuned and FLASHRTC_CONFIG tiles apply alike.
  unsigned variants = 0;

  /// Every field compared: the memo of resolved calls is keyed by the query itself.
  bool operator==(const ConfigQuery& o) const {
    return operation == o.operation && dtype == o.dtype && head_dim == o.head_dim && mask == o.mask &&
           seqlen_q == o.seqlen_q && seqlen_kv == o.seqlen_kv && explicit_config == o.explicit_config &&
           traits == o.traits && variants == o.variants;
  }
  /// The same query with each length replaced by its bucket.
  FLASHRTC_API ConfigQuery bucketed() const;
};

struct ConfigResolution {
  const KernelFamily* family = nullptr;  ///< the family the call runs on (select_kernel_family)
  std::vector<std::string> family_passed_over;  ///< why higher-ranked families do not serve the call
  TileConfig config;
  ConfigSource source = ConfigSource::kDefault;
  std::string why;                      ///< one line: where the tile came from and what was passed over
  std::optional<TuningKey> tuning_key;  ///< the key looked up; absent when the target has no GPU name
  std::optional<TuningEntry> tuned;     ///< the usable entry under that key, also when a higher source won
  std::filesystem::path tuning_db;      ///< the database consulted
};

/// The family and tile for query on target, and where the tile came from. An override is checked, never dropped silently:
/// throws Error naming the source (the call's "config" or FLASHRTC_CONFIG) and the field: kInvalidArgument
/// for a malformed FLASHRTC_CONFIG or a tile the kernel family cannot be built with, kUnsupported for a
/// tile that exceeds target's shared memory, or when no family serves the call. A tuned entry that no
/// longer fits is skipped with a warning.
FLASHRTC_API ConfigResolution resolve_config(const ConfigQuery& query, const DeviceTarget& target);
[[deprecated("renamed resolve_config: it resolves every operation's kernels")]] inline ConfigResolution
resolve_forward_config(const ConfigQuery& query, const DeviceTarget& target) {
  return resolve_config(query, target);
}

/// The kernel a call of query runs, once resolved: the resolution's family and tile, on the grid the family
/// chooses for the call's mask and key length (KernelFamily::runs_persistent).
FLASHRTC_API KernelSpec call_kernel_spec(const ConfigQuery& query, const ConfigResolution& resolution);

}  // namespace flashrtc
