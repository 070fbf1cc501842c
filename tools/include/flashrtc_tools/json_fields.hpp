#pragma once
/// The JSON form of flashrtc's data types: one serializer per type, shared by every `--json` output of the
/// `flashrtc` command and by the tuner's report, so a field is named once. nlohmann's `to_json`, found by
/// argument-dependent lookup: `json j = tile;` works for json and ordered_json alike.
///
/// Header-only: what includes it links nlohmann_json (the tools library and the command do). tools.hpp does
/// not include it, so an app using the tools needs no JSON library.
///
/// Resource fields (registers, spill bytes, ...) sit flat beside the key of the kernel they describe, and a
/// specialization's tile fields flat beside its dtype, head dim and mask: the shape `cache ls --json` has
/// always had.
#include <nlohmann/json.hpp>
#include <string>

#include "flashrtc/flashrtc.hpp"
#include "flashrtc_tools/format.hpp"

namespace flashrtc {

namespace json_detail {
template <class Json>
using IfJson = nlohmann::detail::enable_if_t<nlohmann::detail::is_basic_json<Json>::value, int>;

/// A specialization: {"dtype", "head_dim"} and those of "block_m", "block_n", "warps", "stages", "mask",
/// "persistent" that family's kernel takes as template arguments (all but "persistent" when family is
/// unknown, e.g. a bad cache entry's): what selects the kernel, never a value it ignores.
template <class Json>
Json specialization(const KernelFamily* family, const std::string& dtype, int head_dim,
                    const std::string& mask, const TileConfig& tile, bool persistent) {
  const auto takes = [&](TemplateArg arg) {
    return family ? family->takes(arg) : arg != TemplateArg::kPersistent;
  };
  Json j{{"dtype", dtype}, {"head_dim", head_dim}};
  if (takes(TemplateArg::kBlockM)) j["block_m"] = tile.block_m;
  if (takes(TemplateArg::kBlockN)) j["block_n"] = tile.block_n;
  if (takes(TemplateArg::kWarps)) j["warps"] = tile.warps;
  if (takes(TemplateArg::kStages)) j["stages"] = tile.stages;
  if (takes(TemplateArg::kMask)) j["mask"] = mask;
  if (takes(TemplateArg::kPersistent)) j["persistent"] = persistent;
  return j;
}

/// One compiled kernel as every command shows it (compile --json's "kernel", cache ls --json's rows,
/// cache show --json's "entry"): the CompiledKernelInfo fields but "from", "kernel" (the family's name),
/// "specialization" and "dynamic_smem_bytes" (what its launch asks for).
template <class Json>
Json kernel_entry(const CompiledKernelInfo& k, const std::string& family, Json specialization,
                  std::size_t dynamic_smem_bytes) {
  Json j = k;
  j.erase("from");  // how this process got it, not what it is
  j["kernel"] = family;
  j["specialization"] = std::move(specialization);
  j["dynamic_smem_bytes"] = dynamic_smem_bytes;
  return j;
}
}  // namespace json_detail

/// JSON as text, the one way flashrtc writes it (the command's --json output, the tuner's report): a string
/// holding invalid UTF-8 (a path, an environment value, a compile log) has U+FFFD for each bad byte, where
/// nlohmann's default dump would throw. indent -1: one line.
template <class Json, json_detail::IfJson<Json> = 0>
std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const TileConfig& c) {
  j = Json{{"block_m", c.block_m}, {"block_n", c.block_n}, {"warps", c.warps}, {"stages", c.stages}};
}

template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const ResourceReport& r) {
  j = Json{{"registers", r.registers},
           {"spill_store_bytes", r.spill_store_bytes},
           {"spill_load_bytes", r.spill_load_bytes},
           {"spills", r.spills()},
           {"stack_frame_bytes", r.stack_frame_bytes},
           {"static_smem_bytes", r.static_smem_bytes},
           {"wgmma_serialized", r.wgmma_serialized},
           {"wgmma_serialized_reason", r.wgmma_serialized_reason}};
}

/// A kernel's specialization (json_detail::specialization) with its "family".
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const KernelSpec& s) {
  const KernelFamily& family =
      s.family ? *s.family : portable_family(Operation::kForward, s.dtype, s.head_dim);
  j = json_detail::specialization<Json>(&family, std::string(to_string(s.dtype)), s.head_dim,
                                        std::string(to_string(s.mask)), s.tile, s.persistent);
  j["family"] = family.name;
}

/// {"key", "name_expression", "lowered_name", "arch", resource fields, "compile_ms", "from", "entry_dir"}:
/// from is "memory", "disk" or "compiled"; entry_dir is null when the disk cache is off.
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const CompiledKernelInfo& k) {
  j = Json{{"key", k.key},
           {"name_expression", k.name_expression},
           {"lowered_name", k.lowered_name},
           {"arch", k.arch}};
  j.update(Json(k.resources));
  j["compile_ms"] = k.compile_ms;
  j["from"] = to_string(k.source);
  j["entry_dir"] = k.entry_dir.empty() ? Json(nullptr) : Json(k.entry_dir.string());
}

/// One cache entry: `cache ls --json`'s row, json_detail::kernel_entry's fields and "nvrtc_build", "bad",
/// "size_bytes", "created_unix", "last_used_unix", "last_used", and "problem" for an entry a load would
/// reject.
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const CacheEntry& e) {
  bool persistent = false;
  for (const auto& [name, value] : e.kernel_fields)
    if (name == "persistent") persistent = value == "true";
  const CompiledKernelInfo info{e.key,       e.name_expression, e.lowered_name,     e.arch,
                                e.resources, e.compile_ms,      CacheSource::kDisk, e.dir};
  j = json_detail::kernel_entry<Json>(
      info, e.kernel,
      json_detail::specialization<Json>(find_kernel_family(e.kernel), e.dtype, e.head_dim, e.mask,
                                        {e.tile.block_m, e.tile.block_n, e.tile.warps, e.tile.stages},
                                        persistent),
      e.smem_bytes);
  j["nvrtc_build"] = e.nvrtc_build;
  j["bad"] = !e.problem.empty();
  j["size_bytes"] = e.size_bytes;
  j["created_unix"] = e.created_unix;
  j["last_used_unix"] = e.last_used_unix;
  j["last_used"] = tools::format_time(e.last_used_unix);
  if (!e.problem.empty()) j["problem"] = e.problem;
}

/// A tuning database entry: "key" as text, "config", and the shape and timing it was tuned with.
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const TuningEntry& e) {
  j = Json{{"key", to_string(e.key)},   {"config", e.config},       {"median_ms", e.median_ms},
           {"tflops", e.tflops},        {"batch", e.batch},         {"heads", e.heads},
           {"seqlen_q", e.seqlen_q},    {"seqlen_kv", e.seqlen_kv}, {"space", e.space},
           {"tuned_unix", e.tuned_unix}};
}

/// The call a tile is resolved for: {"dtype", "head_dim", "mask", "seqlen_q", "seqlen_kv"}; "explicit_config"
/// only when the query carries one.
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const ConfigQuery& q) {
  j = Json{{"dtype", std::string(to_string(q.dtype))},
           {"head_dim", q.head_dim},
           {"mask", std::string(to_string(q.mask))},
           {"seqlen_q", q.seqlen_q},
           {"seqlen_kv", q.seqlen_kv}};
  if (q.explicit_config) j["explicit_config"] = *q.explicit_config;
}

/// Where a call's tile came from: "config", "source" (explicit, environment, tuned, default), "why",
/// "family", "family_passed_over", "tuning_key" (null without a GPU name), "tuned" (null when none applies),
/// "tuning_db".
template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const ConfigResolution& r) {
  j = Json{{"config", r.config},
           {"source", to_string(r.source)},
           {"why", r.why},
           {"family", r.family ? Json(r.family->name) : Json(nullptr)},
           {"family_passed_over", r.family_passed_over},
           {"tuning_key", r.tuning_key ? Json(to_string(*r.tuning_key)) : Json(nullptr)},
           {"tuned", r.tuned ? Json(*r.tuned) : Json(nullptr)},
           {"tuning_db", r.tuning_db.string()}};
}

template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const DeviceInfo& d) {
  j = Json{{"ordinal", d.ordinal},
           {"name", d.name},
           {"cc_major", d.cc_major},
           {"cc_minor", d.cc_minor},
           {"arch", d.arch},
           {"multiprocessors", d.multiprocessors},
           {"global_memory_bytes", d.global_memory_bytes},
           {"smem_per_block_optin_bytes", d.smem_per_block_optin_bytes},
           {"smem_per_sm_bytes", d.smem_per_sm_bytes},
           {"l2_cache_bytes", d.l2_cache_bytes},
           {"driver_version", d.driver_version}};
}

template <class Json, json_detail::IfJson<Json> = 0>
void to_json(Json& j, const CacheStats& s) {
  j = Json{{"compiled", s.compiles}, {"disk_hits", s.disk_hits}, {"memory_hits", s.memory_hits}};
}

}  // namespace flashrtc
