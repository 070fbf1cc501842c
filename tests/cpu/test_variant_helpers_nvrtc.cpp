// The sliding window's KeyMask and block ranges (mask.cuh, block_ranges.cuh) and the softcap (score_mods.cuh)
// compile under NVRTC as the kernels include them, for every mask and both the fast and the library tanh; the
// fast one is tanh.approx.f32. (test_block_ranges.cpp and test_score_mods.cpp check their values on the
// host.)
#include <doctest/doctest.h>

#include <string>

#include "compile/kernel_sources.hpp"
#include "compile/nvrtc_compiler.hpp"

using flashrtc::detail::NvrtcInput;
using flashrtc::detail::NvrtcOutput;

namespace {

constexpr const char* kProgram = R"(
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/score_mods.cuh"

template <flashrtc::kernel::Mask kMask, bool kApprox>
__global__ void window_softcap_probe(const float* qk, float* out, int* ranges, int seqlen_q, int seqlen_kv,
                                     int window_left, int window_right, flashrtc::Softcap cap) {
  using namespace flashrtc;
  const KeyMask<kMask, true> mask(seqlen_kv, mask_diag<kMask>(seqlen_q, seqlen_kv), window_left, window_right);
  const int row = blockIdx.x, col = threadIdx.x;
  const auto local = mask.local(row & ~63, col & ~63);
  float s = softcap_log2<kApprox>(cap, qk[row * blockDim.x + col]);
  if (mask.tile_needs_mask(row & ~63, 64, col & ~63, 64) && (mask.hides(row, col) || local.hides(row & 63, col & 63)))
    s = -__int_as_float(0x7f800000);
  out[row * blockDim.x + col] = s * softcap_derivative(s / cap.post);
  const BlockRange queries = query_blocks_seeing<64, 64>(mask, col, seqlen_q);
  const BlockRange keys = key_blocks_seen<64>(mask, row, row + 64LL);
  ranges[row * blockDim.x + col] = queries.begin + queries.end + keys.begin + keys.end +
                                   static_cast<int>(mask.first_visible(row) + mask.last_visible(row));
}
)";

NvrtcOutput compile_probe(const std::string& arch, const std::string& mask, bool approx) {
  NvrtcInput input;
  input.program_name = "window_softcap_probe.cu";
  input.source = kProgram;
  input.headers = flashrtc::detail::kernel_sources().files;
  input.name_expression =
      "window_softcap_probe<flashrtc::kernel::Mask::" + mask + ", " + (approx ? "true" : "false") + ">";
  // The kernels' own options (family_compile.cpp) but -lineinfo.
  input.options = {"--gpu-architecture=" + arch, "--std=c++17", "-default-device"};
  return flashrtc::detail::nvrtc_compile(input, "test-window-softcap-probe");
}

}  // namespace

TEST_CASE("the window and softcap helpers compile under NVRTC; the fast tanh is tanh.approx.f32") {
  for (const char* arch : {"sm_80", "sm_90a"})
    for (const char* mask : {"kNone", "kCausalTopLeft", "kCausalBottomRight"})
      for (bool approx : {true, false}) {
        INFO(arch << ", " << mask << (approx ? ", fast tanh" : ", library tanh"));
        const NvrtcOutput out = compile_probe(arch, mask, approx);
        CHECK_FALSE(out.lowered_name.empty());
        CHECK((out.ptx.find("tanh.approx.f32") != std::string::npos) == approx);
      }
}
