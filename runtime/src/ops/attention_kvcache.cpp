// attention_with_kvcache: up to three kernels on the call's stream, each resolved through the family table
// like a forward call:
//   kv-append        k_new and v_new written into the cache at each sequence's length (when given);
//   decode-mma       the attention of the packed query rows over each split of the keys;
//   decode-combine   the splits' fp32 partial results merged into o and lse (when there are several).
// merge_states is one row kernel (merge-states).
#include "flashrtc/attention_kvcache.hpp"

#include "driver/stream_scratch.hpp"
#include "families/decode_launch.hpp"
#include "flashrtc/error.hpp"
#include "ops/call_plan.hpp"
#include "ops/kvcache_validation.hpp"
#include "tuning/resolution_internal.hpp"

namespace flashrtc {

namespace {

// Without a device, splits are chosen for an H100/H200-sized machine.
constexpr int kAssumedMultiprocessors = 132;

// The query of a row kernel of the call (the append, the combine, merge_states): no mask, no key tile.
ConfigQuery row_query(DType dtype, std::int64_t head_dim, std::int64_t rows, Operation op) {
  return {dtype, static_cast<int>(head_dim), MaskKind::kNone, std::max<std::int64_t>(rows, 1), 1, std::nullopt, op,
          kAllCallTraits};
}

}  // namespace

void validate_kvcache(const KvCacheParams& p) {
  detail::validate_kvcache_arguments(p);
  if (p.config) {
    const std::string reason =
        check_config_any_family(Operation::kDecode, p.dtype, static_cast<int>(p.head_dim), *p.config, kSmemBytesSm90);
    if (!reason.empty()) throw Error(ErrorCode::kInvalidArgument, "config: " + reason);
  }
}

void validate_merge_states(const MergeStatesParams& p) { detail::validate_merge_states_arguments(p); }

ConfigQuery config_query(const KvCacheParams& p) {
  return {p.dtype,        static_cast<int>(p.head_dim), p.mask, p.heads_q / std::max<std::int64_t>(p.heads_kv, 1) * p.seqlen_q,
          p.capacity(),   p.config,                     Operation::kDecode, kAllCallTraits};
}

ConfigResolution resolve_config(const KvCacheParams& params) {
  validate_kvcache(params);
  return resolve_config(config_query(params), current_device_target().value_or(no_device_target()));
}

int kvcache_num_splits(const KvCacheParams& params, int multiprocessors) {
  validate_kvcache(params);
  if (params.num_splits > 0) return params.num_splits;
  const std::optional<DeviceTarget> device = current_device_target();
  if (device) {
    // The plan a call would use, with the driver's occupancy of the loaded kernel.
    const CallPlan& plan = detail::prepare_call(config_query(params)).plan;
    return detail::decode_split_count(params, plan, multiprocessors > 0 ? multiprocessors : plan.multiprocessors);
  }
  const DeviceTarget target = no_device_target();
  const ConfigQuery query = config_query(params).bucketed();
  const CallPlan plan = detail::make_plan(query, detail::resolve_call(query, target), target);
  return detail::decode_split_count(params, plan, multiprocessors > 0 ? multiprocessors : kAssumedMultiprocessors);
}

double kvcache_flops(const KvCacheParams& p) {
  return 4.0 * p.batch * p.heads_q * p.seqlen_q * static_cast<double>(p.capacity()) * p.head_dim;
}

void attention_with_kvcache(const KvCacheParams& p) {
  detail::validate_kvcache_arguments(p);
  const bool append = p.k_new.data != nullptr;
  // Every kernel is resolved (and compiled) before anything is allocated or launched.
  const detail::PreparedCall& decode = detail::prepare_call(config_query(p));
  const detail::PreparedCall* append_call =
      append ? &detail::prepare_call(row_query(p.dtype, p.head_dim, p.batch * p.seqlen_new * p.heads_kv, Operation::kKvAppend))
             : nullptr;
  detail::DecodeLaunch call;
  call.params = &p;
  call.num_splits = detail::decode_split_count(p, decode.plan, decode.plan.multiprocessors);
  const std::int64_t rows = p.batch * p.heads_q * p.seqlen_q;
  const detail::PreparedCall* combine =
      call.num_splits > 1 ? &detail::prepare_call(row_query(p.dtype, p.head_dim, rows, Operation::kDecodeCombine))
                          : nullptr;

  const CUstream stream = static_cast<CUstream>(p.stream);
  const std::size_t splits = static_cast<std::size_t>(call.num_splits);
  const std::size_t lse_bytes = combine ? detail::scratch_aligned(splits * static_cast<std::size_t>(rows) * sizeof(float)) : 0;
  const std::size_t o_bytes =
      combine ? splits * static_cast<std::size_t>(rows) * static_cast<std::size_t>(p.head_dim) * sizeof(float) : 0;
  // Freed (stream-ordered) after the kernels below, when this owner goes out of scope.
  const detail::Scratch scratch = detail::Scratch::on_stream(lse_bytes + o_bytes, stream);
  if (combine) {
    call.lse_partial = reinterpret_cast<float*>(scratch.data());
    call.o_partial = reinterpret_cast<float*>(scratch.data() + lse_bytes);
  }

  if (append_call) detail::launch_prepared(*append_call, &call, stream);
  detail::launch_prepared(decode, &call, stream);
  if (combine) detail::launch_prepared(*combine, &call, stream);
}

void merge_states(const MergeStatesParams& p) {
  detail::validate_merge_states_arguments(p);
  const detail::PreparedCall& call =
      detail::prepare_call(row_query(p.dtype, p.head_dim, p.batch * p.heads * p.seqlen, Operation::kMergeStates));
  detail::launch_prepared(call, &p, static_cast<CUstream>(p.stream));
}

}  // namespace flashrtc
