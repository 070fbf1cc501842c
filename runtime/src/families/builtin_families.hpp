#pragma once
// The families built into the library, each described in its own file of this folder.
#include <vector>

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

const KernelFamily& forward_wgmma_family();
const KernelFamily& forward_mma_family();
const KernelFamily& forward_simt_family();

// In table order (the order of equal priorities). A new built-in family is one line here.
inline std::vector<const KernelFamily*> builtin_families() {
  return {&forward_wgmma_family(), &forward_mma_family(), &forward_simt_family()};
}

}  // namespace flashrtc::detail
