// attention_backward: FlashAttention-2's backward as three kernels on the call's stream, each resolved
// through the family table like a forward call:
//   bwd-prep                           D = rowsum(dO * O) (for the fused kernel, after the fp32 dQ
//                                      workspace is zeroed on the stream);
// then by default, where a fused family serves the call (sm_90a):
//   bwd-wgmma-fused                    dK, dV, and dQ added into the workspace (five products in one kernel);
//   bwd-dq-convert                     the workspace into d_q;
// or for deterministic calls and elsewhere:
//   bwd-wgmma / bwd-mma (main)         dK and dV;
//   bwd-dq-wgmma / bwd-dq-mma          dQ in a separate atomic-free pass over query blocks (two
//                                      more products).
// The mma.sync main kernel can add dQ itself too (when given a workspace), but on an H200 that ran slower
// than its separate pass (bf16 d=128, N=4096: 127 TFLOP/s against 168), so no operation routes there.
#include "flashrtc/attention_backward.hpp"

#include "families/backward_launch.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/error.hpp"
#include "ops/backward_routing.hpp"
#include "ops/backward_validation.hpp"
#include "ops/call_plan.hpp"
#include "ops/call_traits.hpp"

namespace flashrtc {

namespace {

detail::FusedBackwardQuery fused_query(const BackwardParams& p) {
  return {p.deterministic, p.dtype,   static_cast<int>(p.head_dim), p.mask,
          p.seqlen_kv,     &p.config, Operation::kBackward,         Operation::kBackwardFused};
}

}  // namespace

std::array<Operation, 3> backward_operations(const BackwardParams& p, std::string_view arch,
                                             unsigned traits) {
  if (detail::takes_fused_backward(fused_query(p), arch, traits))
    return {Operation::kBackwardPrep, Operation::kBackwardFused, Operation::kBackwardDqConvert};
  return {Operation::kBackwardPrep, Operation::kBackward, Operation::kBackwardDq};
}

const std::optional<TileConfig>* explicit_tile(const BackwardParams& p, Operation op) {
  switch (op) {
    case Operation::kBackward:
    case Operation::kBackwardFused:
      return &p.config;
    case Operation::kBackwardDq:
      return &p.dq_config;
    default:
      return nullptr;
  }
}

void validate_backward(const BackwardParams& p) {
  detail::validate_backward_arguments(p);
  const int head_dim = static_cast<int>(p.head_dim);
  for (Operation op : {Operation::kBackward, Operation::kBackwardDq}) {
    const std::optional<TileConfig>& tile = *explicit_tile(p, op);
    if (!tile) continue;
    const std::string reason = op == Operation::kBackward
                                   ? detail::main_tile_problem(fused_query(p), *tile)
                                   : check_config_any_family(op, p.dtype, head_dim, *tile, kSmemBytesSm90);
    if (!reason.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(op == Operation::kBackward ? "config: " : "dq_config: ") + reason);
  }
}

double attention_backward_flops(const BackwardParams& p) {
  return 2.5 * attention_flops(detail::forward_of(p));
}

void attention_backward(const BackwardParams& p) {
  detail::validate_backward_arguments(p);
  const std::string arch = current_device_target().value_or(no_device_target()).arch;
  const std::array<Operation, 3> ops = backward_operations(p, arch, detail::backward_call_traits(p));
  const bool separate_dq = ops[2] == Operation::kBackwardDq;
  // Every kernel is resolved (and compiled) before anything is allocated or launched.
  const detail::PreparedCall& prep = detail::prepare_call(config_query(p, ops[0]));
  const detail::PreparedCall& main = detail::prepare_call(config_query(p, ops[1]));
  const detail::PreparedCall& dq = detail::prepare_call(config_query(p, ops[2]));

  // The fused kernel's workspace is in its tiles of block_m queries (dq_accum_layout.cuh).
  const int dq_tile_rows = separate_dq ? 0 : main.plan.spec.tile.block_m;
  const std::size_t dq_floats =
      separate_dq ? 0
                  : static_cast<std::size_t>(dq_accum_floats(p.batch * p.heads_q, p.seqlen_q,
                                                             static_cast<int>(p.head_dim), dq_tile_rows));
  const CUstream stream = static_cast<CUstream>(p.stream);
  const detail::BackwardScratch scratch =
      detail::backward_scratch(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), dq_floats, stream);
  detail::BackwardLaunch backward;
  backward.params = &p;
  backward.d_rows = scratch.d_rows;
  backward.dq_accum = scratch.dq_accum;
  backward.dq_tile_rows = dq_tile_rows;

  detail::launch_prepared(prep, &backward, stream);
  detail::launch_prepared(main, &backward, stream);
  detail::launch_prepared(dq, &backward, stream);
}

}  // namespace flashrtc
