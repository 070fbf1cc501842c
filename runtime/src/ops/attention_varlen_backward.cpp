// attention_varlen_backward: the dense backward's three kernels over the sequences of a packed call
// (docs/varlen.md), each resolved through the family table from the host's length bounds:
//   bwd-prep               D = rowsum(dO * O) over every packed row: the dense pre-pass over one batch of
//                          total_q queries, whose [1, Hq, total_q] rows are lse's [Hq, total_q] layout;
// then, for a call that is not deterministic where the fused family serves it (the dense rule:
// backward_routing.hpp; sm_90a, fp16 and bf16 at d = 64, 96 and 128, where TMA maps describe the tensors):
//   varlen-bwd-wgmma-fused dK, dV, and dQ added into the workspace, per (sequence, kv head, key block);
//   varlen-bwd-dq-convert  each sequence's tiles of the workspace into d_q;
// otherwise:
//   varlen-bwd-mma         dK and dV, per (sequence, kv head, key block of max_seqlen_k);
//   varlen-bwd-dq-mma      dQ, per (sequence, query head, query block of max_seqlen_q);
// on sm_90a varlen-bwd-wgmma and varlen-bwd-dq-wgmma in their place: both Hopper families share the rules
// that pick them (hopper_rules.hpp), so a call takes both or neither unless an explicit tile fits only one
// (each pass is correct alone).
#include <algorithm>

#include "families/backward_launch.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/error.hpp"
#include "ops/backward_routing.hpp"
#include "ops/call_plan.hpp"
#include "ops/call_traits.hpp"
#include "ops/varlen_validation.hpp"

namespace flashrtc {

namespace {

constexpr Operation kVarlenBackwardOperations[] = {Operation::kBackwardPrep, Operation::kBackwardVarlen,
                                                   Operation::kBackwardDqVarlen};

// The dense call the kernels see: `batch` batches of seqlen_q queries and seqlen_kv keys over the packed
// tensors, batch strides 0 (the varlen kernels move each block onto its sequence).
BackwardParams dense_view(const VarlenBackwardParams& p, std::int64_t batch, std::int64_t seqlen_q,
                          std::int64_t seqlen_kv) {
  const auto packed = [](TensorRef t) {
    t.stride_batch = 0;
    return t;
  };
  BackwardParams d;
  d.dtype = p.dtype;
  d.batch = batch;
  d.seqlen_q = seqlen_q;
  d.seqlen_kv = seqlen_kv;
  d.heads_q = p.heads_q;
  d.heads_kv = p.heads_kv;
  d.head_dim = p.head_dim;
  d.q = packed(p.q);
  d.k = packed(p.k);
  d.v = packed(p.v);
  d.o = packed(p.o);
  d.d_o = packed(p.d_o);
  d.lse = p.lse;
  d.d_q = packed(p.d_q);
  d.d_k = packed(p.d_k);
  d.d_v = packed(p.d_v);
  d.softmax_scale = p.softmax_scale;
  d.mask = p.mask;
  d.deterministic = p.deterministic;
  d.stream = p.stream;
  return d;
}

detail::FusedBackwardQuery fused_query(const VarlenBackwardParams& p) {
  return {p.deterministic, p.dtype, static_cast<int>(p.head_dim), p.mask,
          // max_seqlen_k = 0 is no key (not an unknown length): a short call.
          std::max<std::int64_t>(p.max_seqlen_k, 1), &p.config, Operation::kBackwardVarlen,
          Operation::kBackwardFusedVarlen};
}

}  // namespace

std::array<Operation, 3> varlen_backward_operations(const VarlenBackwardParams& p, std::string_view arch,
                                                    unsigned traits) {
  if (detail::takes_fused_backward(fused_query(p), arch, traits))
    return {Operation::kBackwardPrep, Operation::kBackwardFusedVarlen, Operation::kBackwardDqConvertVarlen};
  return {Operation::kBackwardPrep, Operation::kBackwardVarlen, Operation::kBackwardDqVarlen};
}

ConfigQuery config_query(const VarlenBackwardParams& p, Operation op) {
  const std::optional<TileConfig>* tile = nullptr;
  switch (op) {
    case Operation::kBackwardPrep:
    case Operation::kBackwardDqConvertVarlen:
      break;
    case Operation::kBackwardVarlen:
    case Operation::kBackwardFusedVarlen:
      tile = &p.config;
      break;
    case Operation::kBackwardDqVarlen:
      tile = &p.dq_config;
      break;
    default:
      throw Error(ErrorCode::kInvalidArgument, "operation " + std::string(to_string(op)) +
                                                   ": not a kernel of the varlen backward (backward-prep, "
                                                   "backward-varlen, backward-dq-varlen, "
                                                   "backward-fused-varlen, backward-dq-convert-varlen)");
  }
  // The packed tensors' strides are those of one token and one head, as a dense call's: the same traits rule.
  return {p.dtype,
          static_cast<int>(p.head_dim),
          p.mask,
          p.max_seqlen_q,
          std::max<std::int64_t>(p.max_seqlen_k, 1),
          tile ? *tile : std::optional<TileConfig>{},
          op,
          detail::varlen_backward_call_traits(p)};
}

void validate_varlen_backward(const VarlenBackwardParams& p) {
  detail::validate_varlen_backward_arguments(p);
  const int head_dim = static_cast<int>(p.head_dim);
  for (Operation op : kVarlenBackwardOperations) {
    // Any arch: the call's own is checked when it is resolved on its device.
    if (serving_kernel_families(op, p.dtype, head_dim, "sm_90a").empty())
      throw Error(ErrorCode::kUnsupported, "dtype=" + std::string(to_string(p.dtype)) +
                                               ", head_dim=" + std::to_string(p.head_dim) + ": no " +
                                               to_string(op) + " family serves it (fp16 and bf16 do)");
    const std::optional<TileConfig>& tile = config_query(p, op).explicit_config;
    if (!tile) continue;
    const std::string reason = op == Operation::kBackwardVarlen
                                   ? detail::main_tile_problem(fused_query(p), *tile)
                                   : check_config_any_family(op, p.dtype, head_dim, *tile, kSmemBytesSm90);
    if (!reason.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(op == Operation::kBackwardVarlen ? "config: " : "dq_config: ") + reason);
  }
}

void attention_varlen_backward(const VarlenBackwardParams& p) {
  detail::validate_varlen_backward_arguments(p);
  const std::string arch = current_device_target().value_or(no_device_target()).arch;
  const std::array<Operation, 3> ops =
      varlen_backward_operations(p, arch, detail::varlen_backward_call_traits(p));
  const bool fused = ops[1] == Operation::kBackwardFusedVarlen;
  // Every kernel is resolved (and compiled) before anything is allocated or launched.
  const detail::PreparedCall& prep = detail::prepare_call(config_query(p, ops[0]));
  const detail::PreparedCall& main = detail::prepare_call(config_query(p, ops[1]));
  const detail::PreparedCall& dq = detail::prepare_call(config_query(p, ops[2]));

  const CUstream stream = static_cast<CUstream>(p.stream);
  // D, [Hq, total_q] like lse, and the fused kernel's workspace in its tiles of block_m queries, each
  // sequence's run of its own (dq_accum_layout.cuh).
  const int dq_tile_rows = fused ? main.plan.spec.tile.block_m : 0;
  const std::size_t dq_floats =
      fused
          ? static_cast<std::size_t>(p.heads_q * varlen_dq_tiles_per_head(p.total_q, p.batch, dq_tile_rows) *
                                     dq_tile_rows * p.head_dim)
          : 0;
  const detail::BackwardScratch scratch =
      detail::backward_scratch(static_cast<std::size_t>(p.heads_q * p.total_q), dq_floats, stream);

  const BackwardParams all_rows = dense_view(p, 1, p.total_q, p.total_k);
  detail::BackwardLaunch prep_launch;
  prep_launch.params = &all_rows;
  prep_launch.d_rows = scratch.d_rows;
  detail::launch_prepared(prep, &prep_launch, stream);

  const BackwardParams sequences = dense_view(p, p.batch, p.max_seqlen_q, p.max_seqlen_k);
  detail::VarlenBackwardLaunch launch;
  launch.params = &p;
  launch.dense.params = &sequences;
  launch.dense.d_rows = scratch.d_rows;
  launch.dense.dq_accum = scratch.dq_accum;
  launch.dense.dq_tile_rows = dq_tile_rows;
  detail::launch_prepared(main, &launch, stream);
  detail::launch_prepared(dq, &launch, stream);
}

}  // namespace flashrtc
