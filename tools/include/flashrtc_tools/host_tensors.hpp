#pragma once
// Host-side tensors for `flashrtc run`: random inputs encoded in the kernel's dtype, and per-head slices
// decoded to double for the reference.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::tools {

enum class Layout { kBnhd, kBhnd };

/// What `run`, `bench` and the tuner use unless told otherwise: PyTorch's [B, H, N, d] (as the Python
/// binding's tensors usually are).
inline constexpr Layout kDefaultLayout = Layout::kBhnd;

/// "bnhd", "bhnd".
const char* to_string(Layout layout);
/// The names above; nullopt otherwise.
std::optional<Layout> parse_layout(const std::string& name);

/// A contiguous tensor of the layout over data (strides as TensorRef's, in elements). Throws
/// Error(kInvalidArgument) when seqlen * heads * head_dim does not fit a 64-bit stride.
TensorRef make_tensor_ref(Layout layout, const void* data, std::int64_t seqlen, std::int64_t heads,
                          std::int64_t head_dim);

/// Fills `count` elements of dtype with N(0, 1) values rounded to dtype. The same (seed, stream) gives the
/// same bytes whatever the number of threads: each chunk of elements has its own generator.
void fill_random_normal(DType dtype, std::vector<unsigned char>& bytes, std::int64_t count,
                        std::uint64_t seed, std::uint64_t stream);

/// values (each representable in dtype, e.g. rounded by reference::round_to) as dtype's bytes.
std::vector<unsigned char> encode_values(DType dtype, const std::vector<double>& values);

/// Element `index` of a dtype array, as double.
double decode_element(DType dtype, const unsigned char* bytes, std::int64_t index);

/// Rows [0, seqlen) of head `head` in batch `batch`, decoded to a contiguous [seqlen, head_dim] array.
std::vector<double> extract_head(DType dtype, const unsigned char* bytes, const TensorRef& layout,
                                 std::int64_t batch, std::int64_t head, std::int64_t seqlen,
                                 std::int64_t head_dim);

}  // namespace flashrtc::tools
