#pragma once
// A family's rule functions from its constexpr shape struct (the one its kernel static_asserts): shape_of
// maps a spec to the struct, which answers invalid_reason(), smem_bytes() and threads().
#include <cstddef>

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

template <auto shape_of>
void use_shape_rules(KernelFamily& family) {
  family.invalid_reason = [](const KernelSpec& s) -> const char* { return shape_of(s).invalid_reason(); };
  family.smem_bytes = [](const KernelSpec& s) { return static_cast<std::size_t>(shape_of(s).smem_bytes()); };
  family.threads = [](const KernelSpec& s) { return shape_of(s).threads(); };
}

}  // namespace flashrtc::detail
