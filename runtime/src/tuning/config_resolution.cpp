#include "flashrtc/config_resolution.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "flashrtc/config.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/tuning_space.hpp"
#include "support/log.hpp"
#include "tuning/resolution_internal.hpp"

namespace flashrtc {

const char* to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::kExplicit: return "explicit";
    case ConfigSource::kEnvironment: return "environment";
    case ConfigSource::kTuned: return "tuned";
    case ConfigSource::kDefault: return "default";
  }
  return "unknown";
}

std::optional<DeviceTarget> current_device_target() {
  if (!device_available()) return std::nullopt;
  return detail::device_target_for(detail::current_context());
}

DeviceTarget no_device_target() { return {"", runtime_config().arch_override, kSmemBytesSm80}; }

DeviceTarget assumed_device_target(const std::string& gpu_name, const std::string& arch) {
  return {gpu_name, arch, assumed_sm_limits(arch).smem_per_block_bytes};
}

namespace {

std::string target_text(const DeviceTarget& t) {
  const std::string smem = std::to_string(t.smem_limit_bytes) + " bytes of shared memory per block";
  if (t.gpu_name.empty()) return "a GPU of " + smem + " (assumed without a GPU)";
  return t.gpu_name + " " + t.arch + " (" + smem + ")";
}

// An override is used as given or refused: kInvalidArgument when no GPU could build it, kUnsupported when
// it only exceeds this target's shared memory.
void check_override(const std::string& origin, const TileConfig& config, const ConfigQuery& q, const DeviceTarget& t,
                    const KernelFamily& family) {
  std::string reason = family.check_config(q.dtype, q.head_dim, config, kSmemBytesSm90);
  if (!reason.empty())
    throw Error(ErrorCode::kInvalidArgument, origin + ": " + reason + " (" + std::string(to_string(q.dtype)) +
                                                 " d=" + std::to_string(q.head_dim) + ")");
  reason = family.check_config(q.dtype, q.head_dim, config, t.smem_limit_bytes);
  if (!reason.empty()) throw Error(ErrorCode::kUnsupported, origin + ": " + reason + " on " + target_text(t));
}

// A tuned entry that no longer passes the family's checks (its limits changed since the tune) is skipped;
// saying so once per key keeps a stale database from flooding the log at every launch.
void warn_stale_once(const TuningKey& key, const TileConfig& config, const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::string text = to_string(key);
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(text).second)
    detail::log().warn("tuned entry for {} ({}) is ignored: {}; using the default tile", text, to_string(config),
                       reason);
}

// A tile given by the caller or FLASHRTC_CONFIG picks the best family that can build it, so a tile of the
// portable family keeps working on a GPU where a faster family ranks first. None: the best family, whose
// check then reports why the tile cannot run. tile_of(family) is the tile the call would run there.
template <typename TileOf>
FamilyChoice family_for_tile(const ConfigQuery& q, const DeviceTarget& target, FamilyChoice best, TileOf tile_of) {
  for (const KernelFamily* family :
       serving_kernel_families(q.operation, q.dtype, q.head_dim, target.arch, q.traits, q.variants))
    if (family->check_config(q.dtype, q.head_dim, tile_of(*family), kSmemBytesSm90).empty()) {
      if (family != best.family) best.passed_over.push_back(best.family->name + ": cannot build the requested tile");
      best.family = family;
      break;
    }
  return best;
}

ConfigResolution resolve(const ConfigQuery& q, const DeviceTarget& target, bool explain) {
  ConfigResolution r;
  FamilyChoice choice = select_kernel_family(q.operation, q.dtype, q.head_dim, target.arch, q.traits, q.variants);
  // FLASHRTC_CONFIG names a forward tile; the other operations' kernels have tiles of their own.
  const TileOverride override_fields =
      q.explicit_config || q.operation != Operation::kForward
          ? TileOverride{}
          : parse_tile_override(runtime_config().config_override, "FLASHRTC_CONFIG");
  if (q.explicit_config)
    choice = family_for_tile(q, target, std::move(choice), [&](const KernelFamily&) { return *q.explicit_config; });
  else if (!override_fields.empty())
    choice = family_for_tile(q, target, std::move(choice), [&](const KernelFamily& f) {
      return override_fields.apply(
          f.default_config(q.dtype, q.head_dim, q.mask, target.smem_limit_bytes, q.seqlen_kv, target.arch));
    });
  const KernelFamily& family = *choice.family;
  r.family = &family;
  r.family_passed_over = std::move(choice.passed_over);
  for (const std::string& reason : r.family_passed_over)
    detail::log().debug("{} d={} on {}: family {} passed over ({})", to_string(q.dtype), q.head_dim,
                        target.arch.empty() ? "sm_80" : target.arch, family.name, reason);
  std::string stale_reason;
  // A launch with an explicit tile needs no lookup; `flashrtc config` shows the entry it passes over.
  if (!target.gpu_name.empty() && (explain || !q.explicit_config)) {
    r.tuning_key = make_tuning_key(target.gpu_name, target.arch, q.dtype, q.head_dim, q.mask, q.seqlen_q, q.seqlen_kv,
                                   family.name);
    if (auto entry = find_tuning_entry(*r.tuning_key)) {
      stale_reason = family.check_config(q.dtype, q.head_dim, entry->config, target.smem_limit_bytes);
      if (stale_reason.empty())
        r.tuned = std::move(entry);
      else
        warn_stale_once(*r.tuning_key, entry->config, stale_reason);
    }
  }
  if (explain) r.tuning_db = tuning_db_path();

  if (q.explicit_config) {
    check_override("config", *q.explicit_config, q, target, family);
    r.config = *q.explicit_config;
    r.source = ConfigSource::kExplicit;
    if (explain) r.why = "passed with the call";
    return r;
  }

  const ConfigSource below = r.tuned ? ConfigSource::kTuned : ConfigSource::kDefault;
  const TileConfig below_config =
      r.tuned ? r.tuned->config
              : family.default_config(q.dtype, q.head_dim, q.mask, target.smem_limit_bytes, q.seqlen_kv,
                                      target.arch);
  const std::string& text = runtime_config().config_override;
  if (!override_fields.empty()) {
    r.config = override_fields.apply(below_config);
    check_override("FLASHRTC_CONFIG='" + text + "'", r.config, q, target, family);
    r.source = ConfigSource::kEnvironment;
    if (explain)
      r.why = "FLASHRTC_CONFIG='" + text + "' over the " + to_string(below) + " tile " + to_string(below_config);
    return r;
  }

  r.config = below_config;
  r.source = below;
  if (!explain) return r;
  if (r.tuned) {
    const TuningEntry& e = *r.tuned;
    char figures[160];
    std::snprintf(figures, sizeof(figures), "%.4f ms, %.2f TFLOP/s on B=%lld H=%lld Nq=%lld Nk=%lld, %s space",
                  e.median_ms, e.tflops, static_cast<long long>(e.batch), static_cast<long long>(e.heads),
                  static_cast<long long>(e.seqlen_q), static_cast<long long>(e.seqlen_kv), e.space.c_str());
    r.why = "tuning database entry for " + to_string(e.key) + " (" + figures + ")";
    return r;
  }
  // Names the default row where a mask restriction chose it.
  const std::string note = family.default_row_note(q.head_dim, q.mask);
  r.why = note.empty() ? "built-in table" : "built-in table (" + note + ")";
  if (!r.tuning_key)
    r.why += "; no GPU is known, so no tuned entry can apply";
  else if (!stale_reason.empty())
    r.why += "; the tuned entry for " + to_string(*r.tuning_key) + " is ignored: " + stale_reason;
  else
    r.why += "; no tuned entry for " + to_string(*r.tuning_key);
  return r;
}

}  // namespace

KernelSpec call_kernel_spec(const ConfigQuery& query, const ConfigResolution& resolution) {
  KernelSpec spec{query.dtype, query.head_dim, query.mask, resolution.config, resolution.family};
  spec.persistent = resolution.family && resolution.family->runs_persistent(query.mask, query.seqlen_kv);
  // The family serves the call's variants (resolution picked it for them); one that takes none compiles none.
  if (resolution.family && resolution.family->takes(TemplateArg::kVariants)) spec.variants = query.variants;
  return spec;
}

ConfigQuery ConfigQuery::bucketed() const {
  ConfigQuery q = *this;
  q.seqlen_q = seqlen_bucket(seqlen_q);
  q.seqlen_kv = seqlen_bucket(seqlen_kv);
  return q;
}

ConfigResolution resolve_config(const ConfigQuery& query, const DeviceTarget& target) {
  return resolve(query, target, true);
}

namespace detail {

DeviceTarget device_target_for(const ContextInfo& context) {
  const std::string& arch_override = runtime_config().arch_override;
  return {context.name, arch_override.empty() ? arch_for(context.cc_major, context.cc_minor) : arch_override,
          static_cast<std::size_t>(context.smem_per_block_optin_bytes)};
}

ConfigResolution resolve_call(const ConfigQuery& query, const DeviceTarget& target) {
  return resolve(query, target, false);
}

}  // namespace detail

}  // namespace flashrtc
