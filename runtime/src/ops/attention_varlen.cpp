// attention_varlen_forward: one kernel (varlen-wgmma on sm_90a for fp16 and bf16, else varlen-mma; varlen-simt
// for fp32), resolved through the family table like a forward call from the host's length bounds, launched over
// (sequence, head, query block of max_seqlen_q).
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
  // Which dtypes run is the family table's to say (validate_varlen_arguments checks only that the dtype is
  // one): kUnsupported naming each family passed over. Any arch: the call's own is checked when it is
  // resolved on its device.
  select_kernel_family(Operation::kForwardVarlen, p.dtype, head_dim, "sm_90a");
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
