#pragma once
// The families built into the library, each described in its own file of this folder.
#include <vector>

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

const KernelFamily& forward_wgmma_family();
const KernelFamily& forward_mma_family();
const KernelFamily& forward_varlen_mma_family();
const KernelFamily& forward_varlen_wgmma_family();
const KernelFamily& forward_simt_family();
const KernelFamily& forward_varlen_simt_family();
const KernelFamily& backward_wgmma_family();
const KernelFamily& backward_wgmma_fused_family();
const KernelFamily& backward_wgmma_split_family();
const KernelFamily& backward_mma_family();
const KernelFamily& backward_dq_mma_family();
const KernelFamily& backward_varlen_mma_family();
const KernelFamily& backward_dq_varlen_mma_family();
const KernelFamily& backward_varlen_wgmma_family();
const KernelFamily& backward_dq_varlen_wgmma_family();
const KernelFamily& backward_varlen_wgmma_fused_family();
const KernelFamily& backward_varlen_dq_convert_family();
const KernelFamily& backward_dq_wgmma_family();
const KernelFamily& backward_simt_family();
const KernelFamily& backward_dq_simt_family();
const KernelFamily& backward_prep_family();
const KernelFamily& backward_dq_convert_family();
const KernelFamily& decode_mma_family();
const KernelFamily& kv_append_family();
const KernelFamily& decode_combine_family();
const KernelFamily& merge_states_family();
const KernelFamily& decode_simt_family();

// In table order (the order of equal priorities). A new built-in family is one line here.
inline std::vector<const KernelFamily*> builtin_families() {
  return {&forward_wgmma_family(),      &forward_mma_family(),       &forward_simt_family(),
          &backward_wgmma_family(),     &backward_mma_family(),      &backward_dq_wgmma_family(),
          &backward_dq_mma_family(),    &backward_simt_family(),     &backward_dq_simt_family(),
          &backward_prep_family(),
          &backward_dq_convert_family(), &decode_mma_family(),         &kv_append_family(),
          &decode_combine_family(),      &merge_states_family(),
          &decode_simt_family(),         &backward_wgmma_fused_family(), &backward_wgmma_split_family(),
          &forward_varlen_mma_family(),  &forward_varlen_simt_family(), &forward_varlen_wgmma_family(),
          &backward_varlen_mma_family(), &backward_dq_varlen_mma_family(), &backward_varlen_wgmma_family(),
          &backward_dq_varlen_wgmma_family(), &backward_varlen_wgmma_fused_family(),
          &backward_varlen_dq_convert_family()};
}

}  // namespace flashrtc::detail
