#include "flashrtc_tools/host_tensors.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::tools {

namespace {

// Chunks are the unit of determinism, so their size is fixed, not derived from the thread count.
constexpr std::int64_t kChunkElements = 1 << 20;

void encode_element(DType dtype, float value, unsigned char* out) {
  if (dtype == DType::kFloat32) {
    std::memcpy(out, &value, 4);
    return;
  }
  const std::uint16_t bits =
      dtype == DType::kFloat16 ? reference::float_to_half_bits(value) : reference::float_to_bf16_bits(value);
  std::memcpy(out, &bits, 2);
}

}  // namespace

const char* to_string(Layout layout) {
  return layout == Layout::kBhnd ? "bhnd" : "bnhd";
}

std::optional<Layout> parse_layout(const std::string& name) {
  for (const Layout layout : {Layout::kBnhd, Layout::kBhnd})
    if (name == to_string(layout)) return layout;
  return std::nullopt;
}

TensorRef make_tensor_ref(Layout layout, const void* data, std::int64_t seqlen, std::int64_t heads,
                          std::int64_t head_dim) {
  // The batch stride is seqlen * heads * head_dim: refuse lengths whose product a 64-bit stride cannot hold,
  // before the strides are computed.
  std::int64_t per_head = 0, per_batch = 0;
  if (__builtin_mul_overflow(seqlen, head_dim, &per_head) ||
      __builtin_mul_overflow(per_head, heads, &per_batch))
    throw Error(ErrorCode::kInvalidArgument, "seqlen * heads * head_dim = " + std::to_string(seqlen) + " * " +
                                                 std::to_string(heads) + " * " + std::to_string(head_dim) +
                                                 " elements: over the 64-bit index range of one tensor");
  return layout == Layout::kBnhd ? TensorRef::bnhd(data, seqlen, heads, head_dim)
                                 : TensorRef::bhnd(data, seqlen, heads, head_dim);
}

void fill_random_normal(DType dtype, std::vector<unsigned char>& bytes, std::int64_t count,
                        std::uint64_t seed, std::uint64_t stream) {
  const std::size_t elem = dtype_size(dtype);
  bytes.resize(static_cast<std::size_t>(count) * elem);
  const std::int64_t chunks = (count + kChunkElements - 1) / kChunkElements;
  const auto fill_chunk = [&](std::int64_t chunk) {
    std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                      static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(chunk)};
    std::mt19937_64 rng(seq);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::int64_t end = std::min(count, (chunk + 1) * kChunkElements);
    for (std::int64_t i = chunk * kChunkElements; i < end; ++i)
      encode_element(dtype, normal(rng), &bytes[i * elem]);
  };
  const std::int64_t threads =
      std::min<std::int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (std::int64_t t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (std::int64_t chunk = t; chunk < chunks; chunk += threads) fill_chunk(chunk);
    });
  for (std::thread& worker : workers) worker.join();
}

std::vector<unsigned char> encode_values(DType dtype, const std::vector<double>& values) {
  const std::size_t elem = dtype_size(dtype);
  std::vector<unsigned char> bytes(values.size() * elem);
  for (std::size_t i = 0; i < values.size(); ++i)
    encode_element(dtype, static_cast<float>(values[i]), &bytes[i * elem]);
  return bytes;
}

double decode_element(DType dtype, const unsigned char* bytes, std::int64_t index) {
  if (dtype == DType::kFloat32) {
    float value;
    std::memcpy(&value, bytes + index * 4, 4);
    return value;
  }
  std::uint16_t bits;
  std::memcpy(&bits, bytes + index * 2, 2);
  return dtype == DType::kFloat16 ? reference::half_bits_to_float(bits) : reference::bf16_bits_to_float(bits);
}

std::vector<double> extract_head(DType dtype, const unsigned char* bytes, const TensorRef& layout,
                                 std::int64_t batch, std::int64_t head, std::int64_t seqlen,
                                 std::int64_t head_dim) {
  std::vector<double> rows(static_cast<std::size_t>(seqlen * head_dim));
  for (std::int64_t n = 0; n < seqlen; ++n) {
    const std::int64_t base = batch * layout.stride_batch + n * layout.stride_seq + head * layout.stride_head;
    for (std::int64_t d = 0; d < head_dim; ++d)
      rows[n * head_dim + d] = decode_element(dtype, bytes, base + d);
  }
  return rows;
}

}  // namespace flashrtc::tools
