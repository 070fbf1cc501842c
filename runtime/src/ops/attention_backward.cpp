// attention_backward: FlashAttention-2's backward as up to four kernels on the call's stream, each resolved
// through the family table like a forward call:
//   bwd-prep                      D = rowsum(dO * O) and, unless deterministic, the fp32 dQ workspace zeroed;
//   bwd-wgmma / bwd-mma (main)    dK and dV (sm_90a: TMA and wgmma; elsewhere mma.sync, which in the atomic
//                                 mode also adds dQ into the workspace);
//   bwd-dq-convert                the workspace into d_q                                  (atomic mode);
//   bwd-dq-wgmma / bwd-dq-mma     dQ in a separate atomic-free pass over query blocks     (default).
// The separate pass is the default: measured faster on an H200 (bf16 d=128, N=4096: 168 TFLOP/s against the
// atomic mode's 127; d=64 169 against 131; docs/performance-history.md), so every call is deterministic. The atomic
// mode stays for GPUs where it may win; kAtomicDq turns it on for non-deterministic calls (the Hopper main
// kernel adds no dQ: that mode would first have to route those calls to bwd-mma).
#include "flashrtc/attention_backward.hpp"

#include "driver/launch.hpp"
#include "driver/stream_scratch.hpp"
#include "families/backward_launch.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "ops/backward_validation.hpp"
#include "ops/call_plan.hpp"

namespace flashrtc {

namespace {

constexpr bool kAtomicDq = false;

std::size_t round_up(std::size_t bytes) {
  return (bytes + detail::kScratchAlignBytes - 1) / detail::kScratchAlignBytes * detail::kScratchAlignBytes;
}

void launch(const detail::PreparedCall& call, const detail::BackwardLaunch& backward, CUstream stream) {
  LaunchShape shape;
  KernelArgs args;
  call.plan.family->build_launch(call.plan, &backward, shape, args);
  detail::launch_family_kernel(call.function, shape, stream, args);
}

}  // namespace

std::array<Operation, 3> backward_operations(bool deterministic) {
  const bool separate_dq = deterministic || !kAtomicDq;
  return {Operation::kBackwardPrep, Operation::kBackward,
          separate_dq ? Operation::kBackwardDq : Operation::kBackwardDqConvert};
}

const std::optional<TileConfig>* explicit_tile(const BackwardParams& p, Operation op) {
  switch (op) {
    case Operation::kBackward:
      return &p.config;
    case Operation::kBackwardDq:
      return &p.dq_config;
    default:
      return nullptr;
  }
}

void validate_backward(const BackwardParams& p) {
  detail::validate_backward_arguments(p);
  for (Operation op : {Operation::kBackward, Operation::kBackwardDq}) {
    const std::optional<TileConfig>& tile = *explicit_tile(p, op);
    if (!tile) continue;
    const std::string reason =
        check_config_any_family(op, p.dtype, static_cast<int>(p.head_dim), *tile, kSmemBytesSm90);
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
  const std::array<Operation, 3> ops = backward_operations(p.deterministic);
  const bool separate_dq = ops[2] == Operation::kBackwardDq;
  // Every kernel is resolved (and compiled) before anything is allocated or launched.
  const detail::PreparedCall& prep = detail::prepare_call(config_query(p, ops[0]));
  const detail::PreparedCall& main = detail::prepare_call(config_query(p, ops[1]));
  const detail::PreparedCall& dq = detail::prepare_call(config_query(p, ops[2]));

  const std::size_t rows = static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q);
  const std::size_t d_rows_bytes = round_up(rows * sizeof(float));
  const std::size_t dq_bytes =
      separate_dq ? 0 : rows * static_cast<std::size_t>(p.head_dim) * sizeof(float);
  const CUstream stream = static_cast<CUstream>(p.stream);
  // Freed (stream-ordered) after the kernels below, when this owner goes out of scope.
  const detail::Scratch scratch = detail::Scratch::on_stream(d_rows_bytes + dq_bytes, stream);
  detail::BackwardLaunch backward;
  backward.params = &p;
  backward.d_rows = reinterpret_cast<float*>(scratch.data());
  backward.dq_accum = separate_dq ? nullptr : reinterpret_cast<float*>(scratch.data() + d_rows_bytes);

  launch(prep, backward, stream);
  launch(main, backward, stream);
  launch(dq, backward, stream);
}

}  // namespace flashrtc
