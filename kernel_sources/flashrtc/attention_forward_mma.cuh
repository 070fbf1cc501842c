#pragma once
// Forward attention on tensor cores (fp16 / bf16 inputs, fp32 accumulation): FlashAttention-2's loop order
// with mma.sync m16n8k16.
//
// One thread block owns block_m query rows of one (batch, head); each warp owns m_tiles 16-row slices of
// them, so softmax never leaves the warp. Per key tile of block_n rows:
//   S = Q K^T    Q fragments from registers (or shared memory when they do not fit), K by ldmatrix;
//   softmax      running max and sum per row in registers, exp2 with the scale folded in;
//   O += P V     P is S's accumulator registers repacked to 16-bit A fragments (m16n8 accumulators of two
//                adjacent key tiles are exactly one m16k16 A fragment), V by ldmatrix.trans.
// K and V stream through swizzled shared-memory buffers by cp.async, one or two tiles of each (`stages`);
// the schedule of each is described at the prologue below.
// Causal blocks past the diagonal (and a window's blocks outside it) are never visited; masks apply only to
// tiles that cross its edges or the end.
#include "flashrtc/cp_async.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/mma_forward_shape.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/score_mods.cuh"
#include "flashrtc/varlen_sequence.cuh"

namespace flashrtc {

// The plain kernel, and (kVarlen) the variable-length one.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_forward_mma(const typename kernel::ForwardParamsOf<kVarlen>::type args) {
  constexpr unsigned kVariants = 0u;
#include "flashrtc/attention_forward_mma_body.cuh"
}

// The parameters of the kernel with variants, as a type dependent on them: the body's code for the other
// kernels (varlen) is then checked only where instantiated.
template <kernel::Variants>
struct VariantForwardParamsOf {
  using type = kernel::VariantForwardParams;
};

// The kernel with attention variants (kVariantSet non-zero): an overload of its own, so that the plain
// kernel's specializations keep their names and code. A Variants argument picks it; the plain one takes a
// bool there.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          kernel::Variants kVariantSet>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_forward_mma(const typename VariantForwardParamsOf<kVariantSet>::type args) {
  constexpr bool kVarlen = false;
  constexpr unsigned kVariants = static_cast<unsigned>(kVariantSet);
#include "flashrtc/attention_forward_mma_body.cuh"
}

}  // namespace flashrtc
