// A call's query: the part of its parameters that decides its family and tile (config_resolution.hpp).
#include "flashrtc/attention.hpp"
#include "flashrtc/attention_backward.hpp"
#include "ops/call_traits.hpp"

namespace flashrtc {

ConfigQuery config_query(const ForwardParams& p) {
  ConfigQuery q{p.dtype,  static_cast<int>(p.head_dim), p.mask, p.seqlen_q, p.seqlen_kv, p.config, Operation::kForward,
                detail::forward_call_traits(p)};
  q.variants = variant_bits(p.variants);
  return q;
}

ConfigQuery config_query(const BackwardParams& p, Operation op) {
  ConfigQuery q{p.dtype, static_cast<int>(p.head_dim), p.mask, p.seqlen_q, p.seqlen_kv, std::nullopt, op,
                detail::backward_call_traits(p)};
  if (const std::optional<TileConfig>* tile = explicit_tile(p, op)) q.explicit_config = *tile;
  return q;
}

ConfigResolution resolve_config(const ForwardParams& params) {
  validate_forward(params);
  return resolve_config(config_query(params), current_device_target().value_or(no_device_target()));
}

}  // namespace flashrtc
