#include "config_backward.hpp"

#include <array>
#include <cstdio>
#include <optional>
#include <vector>

namespace flashrtc::cli {

const char* backward_role(Operation op) {
  switch (op) {
    case Operation::kBackwardPrep:
      return "prep";
    case Operation::kBackward:
    case Operation::kBackwardFused:
    case Operation::kBackwardVarlen:
    case Operation::kBackwardFusedVarlen:
      return "main";
    case Operation::kBackwardDq:
    case Operation::kBackwardDqVarlen:
      return "dq";
    case Operation::kBackwardDqConvert:
    case Operation::kBackwardDqConvertVarlen:
      return "dq_convert";
    default:
      break;
  }
  return "forward";
}

const char* backward_label(Operation op) {
  switch (op) {
    case Operation::kBackwardPrep:
      return "prep:";
    case Operation::kBackward:
    case Operation::kBackwardFused:
    case Operation::kBackwardVarlen:
    case Operation::kBackwardFusedVarlen:
      return "main:";
    case Operation::kBackwardDq:
    case Operation::kBackwardDqVarlen:
      return "dQ pass:";
    case Operation::kBackwardDqConvert:
    case Operation::kBackwardDqConvertVarlen:
      return "dQ convert:";
    default:
      break;
  }
  return "forward:";
}

std::vector<BackwardKernel> resolve_backward(const ConfigQuery& query, bool deterministic,
                                             const TileOptions& tile, const DeviceTarget& target) {
  BackwardParams call;
  call.dtype = query.dtype;
  call.head_dim = query.head_dim;
  call.mask = query.mask;
  call.seqlen_q = query.seqlen_q;
  call.seqlen_kv = query.seqlen_kv;
  call.deterministic = deterministic;
  const auto query_of = [&](Operation op) {
    ConfigQuery q = config_query(call, op);
    q.traits = query.traits;  // the call has no tensors here: the traits are the query's
    return q;
  };
  std::array<Operation, 3> ops = backward_operations(call, target.arch, query.traits);
  // The tile options make the call's explicit config: the main kernel's resolved tile with the fields given.
  // As in attention_backward, a config the fused family does not take (block_m=112) runs the separate pass,
  // whose main kernel's tile the fields then go over.
  std::optional<ConfigResolution> base;
  for (int round = 0; round < 2 && tile.any(); ++round) {
    const Operation main = ops[1];
    call.config.reset();
    base = resolve_config(query_of(main), target);
    call.config = tile.applied_to(base->config);
    ops = backward_operations(call, target.arch, query.traits);
    if (ops[1] == main) break;
  }
  std::vector<BackwardKernel> kernels;
  for (Operation op : ops) {
    const ConfigQuery q = query_of(op);
    kernels.push_back(
        {op, q, op == ops[1] && base ? tile.resolve_over(q, *base, target) : resolve_config(q, target)});
  }
  return kernels;
}

void print_backward_config(const ConfigQuery& query, bool deterministic, const TileOptions& tile,
                           const DeviceTarget& target, const std::string& device, bool json) {
  const std::vector<BackwardKernel> kernels = resolve_backward(query, deterministic, tile, target);
  const std::string& env = runtime_config().config_override;
  const std::size_t entries = tuning_db_entries().size();
  if (json) {
    Json items = Json::array();
    for (const BackwardKernel& k : kernels) {
      Json item{{"role", backward_role(k.operation)}, {"operation", to_string(k.operation)}};
      item.update(Json(k.resolution));
      items.push_back(std::move(item));
    }
    Json document{{"op", "bwd"},
                  {"call", query},
                  {"deterministic", deterministic},
                  {"device", device},
                  {"kernels", std::move(items)},
                  {"tuning_db", kernels.front().resolution.tuning_db.string()},
                  {"tuning_db_entries", entries},
                  {"flashrtc_config", env.empty() ? Json(nullptr) : Json(env)}};
    print_json_document(document);
    return;
  }
  std::printf("call:       backward of %s d=%d mask=%s Nq=%lld Nk=%lld%s\n",
              std::string(to_string(query.dtype)).c_str(), query.head_dim,
              std::string(to_string(query.mask)).c_str(), static_cast<long long>(query.seqlen_q),
              static_cast<long long>(query.seqlen_kv), deterministic ? ", deterministic" : "");
  std::printf("device:     %s\n", device.c_str());
  for (const BackwardKernel& k : kernels) {
    const ConfigResolution& r = k.resolution;
    std::printf("%-11s %s %s\n", backward_label(k.operation), r.family->name.c_str(),
                to_string(r.config).c_str());
    std::printf("  source:     %s (%s)\n", to_string(r.source), r.why.c_str());
    if (r.tuning_key) std::printf("  tuning key: %s\n", to_string(*r.tuning_key).c_str());
    if (r.tuned && r.source != ConfigSource::kTuned)
      std::printf("  tuned:      %s, passed over for the %s config\n", to_string(r.tuned->config).c_str(),
                  to_string(r.source));
    for (const std::string& reason : r.family_passed_over) std::printf("  passed over: %s\n", reason.c_str());
  }
  std::printf("tuning db:  %s (%zu entries)\n", kernels.front().resolution.tuning_db.string().c_str(),
              entries);
  std::printf(
      "FLASHRTC_CONFIG: %s\n",
      env.empty() ? "(unset)" : (env + " (forward kernels only; the backward's are left alone)").c_str());
}

}  // namespace flashrtc::cli
