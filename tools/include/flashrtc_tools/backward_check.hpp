#pragma once
// A backward call checked against the reference gradients: fresh random q, k, v and dO, the forward's o and
// lse from the double reference (o rounded to the dtype, lse to fp32: the inputs a training step hands the
// kernels), gradients poisoned with NaN, and the tolerance rule (flashrtc_reference::Comparison) on dQ, dK
// and dV (reference::compare_gradients against reference::backward and its input-precision model).
#include <cstdint>
#include <optional>
#include <string>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::tools {

struct GradientCheck {
  bool pass = false;
  std::string report;  ///< one line per gradient (reference::GradientComparison::summary)
};

/// The backward of problem (a forward call's shape, dtype, mask and scale; its pointers and tile are
/// ignored), with tile as the explicit tile of kernel's kernel (Operation::kBackwardFused or kBackward: the
/// main kernel, kBackwardDq: the dQ pass; explicit_tile) when given, in a call that runs it
/// (deterministic_for), on stream, checked whole: every (batch, head), so
/// keep problem small. Throws Error when a launch fails, Error(kInvalidArgument) for a kernel that takes no
/// tile.
GradientCheck check_backward(const ForwardParams& problem, Operation kernel,
                             const std::optional<TileConfig>& tile, std::uint64_t seed, void* stream);

}  // namespace flashrtc::tools
