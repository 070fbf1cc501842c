#include "flashrtc/attention.hpp"

#include <algorithm>
#include <cstdint>

#include "driver/launch.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "ops/call_plan.hpp"
#include "ops/forward_validation.hpp"
#include "tuning/resolution_internal.hpp"

namespace flashrtc {

double attention_flops(const ForwardParams& p) {
  const AttentionVariants& v = p.variants;
  if (v.window_left == -1 && v.window_right == -1) {
    const double flops = 4.0 * p.batch * p.heads_q * p.seqlen_q * p.seqlen_kv * p.head_dim;
    return p.mask == MaskKind::kNone ? flops : flops / 2;
  }
  // Row i sees the keys [first, last] of mask_allows' rule, clipped to [0, Nk).
  const std::int64_t diag = mask_diagonal(p.mask, p.seqlen_q, p.seqlen_kv);
  double pairs = 0;
  for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
    std::int64_t first = 0, last = p.seqlen_kv - 1;
    if (v.window_left >= 0) first = std::max(first, i + diag - v.window_left);
    if (p.mask != MaskKind::kNone) last = std::min(last, i + diag);
    if (v.window_right >= 0) last = std::min(last, i + diag + v.window_right);
    if (last >= first) pairs += static_cast<double>(last - first + 1);
  }
  return 4.0 * p.batch * p.heads_q * p.head_dim * pairs;
}

KernelSpec select_forward_spec(const ForwardParams& params) {
  validate_forward(params);
  const ConfigQuery query = config_query(params);
  const DeviceTarget target = current_device_target().value_or(no_device_target());
  const ConfigResolution resolution = detail::resolve_call(query, target);
  const CallPlan plan = detail::make_plan(query, resolution, target);
  // The grid check of a launch, without launching.
  LaunchShape shape;
  KernelArgs args;
  plan.family->build_launch(plan, &params, shape, args);
  return plan.spec;
}

void attention_forward(const ForwardParams& p) {
  // The per-call path: argument checks, one memo lookup, the launch. The tile (explicit one included) is
  // checked when the call is first resolved, not on every call.
  detail::validate_forward_arguments(p);
  detail::launch_prepared(detail::prepare_call(config_query(p)), &p, static_cast<CUstream>(p.stream));
}

}  // namespace flashrtc
