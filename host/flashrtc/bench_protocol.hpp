#pragma once
// What every `flashrtc bench` mode shares: the peers' L2 eviction and the names and number formats of its
// rows.
#include <cstddef>
#include <cstdio>
#include <string>

#include "flashrtc/types.hpp"

namespace flashrtc::cli {

// triton.testing.do_bench (the peers' timer) zeroes 256 MB before every timed call; so does bench.
inline constexpr std::size_t kL2FlushBytes = 256u << 20;

// The peers' rows name dtypes as torch does; the same names let the two streams of JSON lines be joined.
inline const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

// value by a printf format of one double ("%.2f").
inline std::string fixed(double value, const char* format) {
  char out[32];
  std::snprintf(out, sizeof(out), format, value);
  return out;
}

}  // namespace flashrtc::cli
