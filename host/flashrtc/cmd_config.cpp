// `flashrtc config`: the tile a call would use and where it came from (explicit / environment / tuned /
// default), resolved exactly as attention_forward (--op bwd: attention_backward; --op decode:
// attention_with_kvcache) resolves it. Works without a GPU.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli_support.hpp"
#include "config_backward.hpp"
#include "decode_call.hpp"
#include "json_output.hpp"

namespace flashrtc::cli {

namespace {

struct ConfigOptions {
  std::string op = "fwd", dtype, mask = "none";
  int head_dim = 0;
  std::optional<std::int64_t> seqlen, kv_seqlen;
  DecodeOptions decode;
  TileOptions tile;
  TargetOptions target;
  VariantOptions variants;
  bool json = false, deterministic = false;
};

// The decode call's kernel: its family and tile resolved as attention_with_kvcache resolves them, and the
// split count it would use.
int print_decode_config(const ConfigOptions& o, const DeviceTarget& target, const std::string& device) {
  const DecodeShape shape = o.decode.shapes(dtype_from(o.dtype), mask_from(o.mask), o.head_dim).front();
  KvCacheParams params = decode_params(shape, decode_placeholders());
  validate_kvcache(params);
  const ConfigQuery query = config_query(params);
  const ConfigResolution r = o.tile.resolve(query, target);
  if (o.tile.any()) params.config = r.config;
  const DecodeSplits splits = decode_splits(params);
  const KernelSpec spec = call_kernel_spec(query, r);
  if (o.json) {
    Json document = r;
    document["op"] = "decode";
    document["call"] = query;
    document["decode"] = {{"batch", shape.batch},          {"heads_q", shape.heads_q},
                          {"heads_kv", shape.heads_kv},    {"seqlen_q", shape.seqlen_q},
                          {"seqlen_kv", shape.seqlen_kv},  {"page_size", shape.page_size},
                          {"num_pages", params.num_pages}, {"capacity", params.capacity()}};
    document["num_splits"] = splits.splits;
    document["num_splits_why"] = splits.why;
    document["specialization"] = spec;
    document["device"] = device;
    document["tuning_db_entries"] = tuning_db_entries().size();
    print_json_document(document);
    return kExitOk;
  }
  std::printf("config:     %s\n", to_string(r.config).c_str());
  std::printf("source:     %s (%s)\n", to_string(r.source), r.why.c_str());
  std::printf("call:       decode %s mask=%s %s, %s kernels\n", std::string(to_string(shape.dtype)).c_str(),
              std::string(to_string(shape.mask)).c_str(), describe(shape).c_str(), r.family->name.c_str());
  std::printf("rows:       %lld packed query rows per KV head (Hq / Hkv * Nq), capacity %lld tokens\n",
              static_cast<long long>(query.seqlen_q), static_cast<long long>(params.capacity()));
  std::printf("splits:     %d (%s)\n", splits.splits, splits.why.c_str());
  for (const std::string& reason : r.family_passed_over) std::printf("passed over: %s\n", reason.c_str());
  std::printf("kernel:     %s\n", kernel_name_expression(spec).c_str());
  std::printf("device:     %s\n", device.c_str());
  if (r.tuning_key) std::printf("tuning key: %s\n", to_string(*r.tuning_key).c_str());
  if (r.tuned && r.source != ConfigSource::kTuned)
    std::printf("tuned:      %s, passed over for the %s config\n", to_string(r.tuned->config).c_str(),
                to_string(r.source));
  std::printf("tuning db:  %s (%zu entries)\n", r.tuning_db.string().c_str(), tuning_db_entries().size());
  return kExitOk;
}

int execute_config(const ConfigOptions& o) {
  o.decode.check_mode(o.op);
  if (o.op != "fwd") o.variants.refuse_for("--op " + o.op);
  if (o.op == "decode") {
    if (o.seqlen || o.kv_seqlen)
      throw UsageError(
          "--op decode describes its call with --seqlen-q and --seqlen-kv, not --seqlen/--kv-seqlen");
    if (o.deterministic) throw UsageError("--deterministic goes with --op bwd");
    std::string device;
    const DeviceTarget target = o.target.target(&device);
    return print_decode_config(o, target, device);
  }
  if (!o.seqlen) throw UsageError("--seqlen is required (with --op fwd and bwd)");
  ConfigQuery query;
  query.dtype = dtype_from(o.dtype);
  query.head_dim = o.head_dim;
  query.mask = mask_from(o.mask);
  query.seqlen_q = *o.seqlen;
  query.seqlen_kv = o.kv_seqlen.value_or(*o.seqlen);
  query.variants = variant_bits(o.variants.variants());
  std::string device;
  const DeviceTarget target = o.target.target(&device);
  if (o.op == "bwd") {
    print_backward_config(query, o.deterministic, o.tile, target, device, o.json);
    return kExitOk;
  }
  if (o.deterministic) throw UsageError("--deterministic goes with --op bwd");
  const ConfigResolution r = o.tile.resolve(query, target);
  const KernelSpec spec = call_kernel_spec(query, r);
  const std::string& env = runtime_config().config_override;
  if (o.json) {
    Json document = r;
    document["call"] = query;
    document["specialization"] = spec;
    document["device"] = device;
    document["tuning_db_entries"] = tuning_db_entries().size();
    document["flashrtc_config"] = env.empty() ? Json(nullptr) : Json(env);
    print_json_document(document);
    return kExitOk;
  }
  std::printf("config:     %s\n", to_string(r.config).c_str());
  std::printf("source:     %s (%s)\n", to_string(r.source), r.why.c_str());
  std::printf("call:       %s d=%d mask=%s Nq=%lld Nk=%lld%s, %s kernels\n",
              std::string(to_string(query.dtype)).c_str(), query.head_dim,
              std::string(to_string(query.mask)).c_str(), static_cast<long long>(query.seqlen_q),
              static_cast<long long>(query.seqlen_kv), variants_suffix(o.variants.variants()).c_str(),
              r.family->name.c_str());
  for (const std::string& reason : r.family_passed_over) std::printf("passed over: %s\n", reason.c_str());
  std::printf("kernel:     %s\n", kernel_name_expression(spec).c_str());
  std::printf("device:     %s\n", device.c_str());
  if (r.tuning_key) std::printf("tuning key: %s\n", to_string(*r.tuning_key).c_str());
  if (r.tuned && r.source != ConfigSource::kTuned)
    std::printf("tuned:      %s, passed over for the %s config\n", to_string(r.tuned->config).c_str(),
                to_string(r.source));
  std::printf("tuning db:  %s (%zu entries)\n", r.tuning_db.string().c_str(), tuning_db_entries().size());
  std::printf("FLASHRTC_CONFIG: %s\n", env.empty() ? "(unset)" : env.c_str());
  return kExitOk;
}

}  // namespace

Command add_config_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "config",
      "print the tile a call would use and where it came from (explicit, environment, tuned, default); "
      "--op bwd: each kernel of its backward; --op decode: attention_with_kvcache's kernel and split count");
  auto o = std::make_shared<ConfigOptions>();
  add_op_option(
      *app, o->op,
      "the backward's kernels (pre-pass, main kernel, then the fused kernel's dQ conversion or the dQ "
      "pass), each with its family, tile, source and tuning key; the tile options are the main kernel's",
      "attention over a KV cache (the --batch, --heads, --heads-kv, --seqlen-q, --seqlen-kv, "
      "--page-size and --splits options describe it): its kernel's family, tile and source, and the "
      "split count kvcache_num_splits gives it");
  app->add_option("--dtype", o->dtype, "element type")->required()->check(dtype_validator());
  app->add_option("--head-dim", o->head_dim, "head dimension")->required()->check(head_dim_validator());
  app->add_option("--seqlen", o->seqlen, "query sequence length (required, except with --op decode)")
      ->check(count_validator());
  app->add_option("--kv-seqlen", o->kv_seqlen, "key/value sequence length (default: --seqlen)")
      ->check(count_validator());
  app->add_option("--mask", o->mask, "mask (--op decode: none or causal-br)")
      ->capture_default_str()
      ->check(mask_validator());
  o->decode.add_to(*app, false);
  o->target.add_to(
      *app, "resolve for this arch's limits, e.g. sm_90a (with --gpu-name: that GPU's tuned entries apply)");
  o->tile.add_to(*app);
  o->variants.add_to(*app);
  app->add_flag(
      "--deterministic", o->deterministic,
      "with --op bwd: the deterministic mode's kernels (main kernel and atomic-free dQ pass; default: "
      "the fused kernel where a fused family serves the call)");
  app->add_flag(
      "--json", o->json,
      "one JSON document: config, source, why, family, family_passed_over, tuning_key, tuned, "
      "tuning_db, call, device, tuning_db_entries, flashrtc_config; with --op bwd: op, call, "
      "deterministic, device, kernels (role prep, main, dq or dq_convert, operation, and the fields of "
      "one resolution each), tuning_db, tuning_db_entries, flashrtc_config; with --op decode: the "
      "resolution's fields, op, call, decode (batch, heads_q, heads_kv, seqlen_q, seqlen_kv, page_size, "
      "num_pages, capacity), num_splits, num_splits_why, specialization, device, tuning_db_entries");
  return {app, [o] { return execute_config(*o); }};
}

}  // namespace flashrtc::cli
