// attention_varlen_forward: one kernel (varlen-wgmma on sm_90a, else varlen-mma), resolved through the family
// table like a forward call from the host's length bounds, launched over (sequence, head, query block of
// max_seqlen_q).
#include <algorithm>

#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "ops/call_plan.hpp"
#include "ops/call_traits.hpp"
#include "ops/varlen_validation.hpp"

namespace flashrtc {

ConfigQuery config_query(const VarlenForwardParams& p) {
  // The packed tensors' strides are those of one token and one head, as a dense call's: the same traits rule.
  return {p.dtype,
          static_cast<int>(p.head_dim),
          p.mask,
          p.max_seqlen_q,
          std::max<std::int64_t>(p.max_seqlen_k, 1),
          p.config,
          Operation::kForwardVarlen,
          detail::varlen_forward_call_traits(p)};
}

void validate_varlen_forward(const VarlenForwardParams& p) {
  detail::validate_varlen_arguments(p);
  const int head_dim = static_cast<int>(p.head_dim);
  // Any arch: the call's own is checked when it is resolved on its device.
  if (serving_kernel_families(Operation::kForwardVarlen, p.dtype, head_dim, "sm_90a").empty())
    throw Error(ErrorCode::kUnsupported,
                "dtype=" + std::string(to_string(p.dtype)) + ", head_dim=" + std::to_string(p.head_dim) +
                    ": no variable-length forward family serves it (fp16 and bf16 do)");
  if (p.config) {
    const std::string reason =
        check_config_any_family(Operation::kForwardVarlen, p.dtype, head_dim, *p.config, kSmemBytesSm90);
    if (!reason.empty()) throw Error(ErrorCode::kInvalidArgument, "config: " + reason);
  }
}

ConfigResolution resolve_config(const VarlenForwardParams& params) {
  validate_varlen_forward(params);
  return resolve_config(config_query(params), current_device_target().value_or(no_device_target()));
}

void attention_varlen_forward(const VarlenForwardParams& p) {
  detail::validate_varlen_arguments(p);
  detail::launch_prepared(detail::prepare_call(config_query(p)), &p, static_cast<CUstream>(p.stream));
}

}  // namespace flashrtc
