#pragma once
// The points `flashrtc bench` measures: the standard grid or explicit shapes, crossed with
// dtypes and masks. Pure arithmetic on shapes, so the plan can be printed and tested without a GPU.
#include <cstdint>
#include <string>
#include <vector>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::cli {

struct BenchShape {
  std::int64_t batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_kv = 0, head_dim = 0;
};

struct BenchPoint {
  DType dtype = DType::kBFloat16;
  MaskKind mask = MaskKind::kNone;
  BenchShape shape;
};

/// The standard grid (docs/PERFORMANCE.md): 16k tokens per batch (B = 16384 / N) and model dim 2048 (H = 2048 / d), both
/// rounded down and at least 1 (d = 96 gives H = 21, the FlashAttention benchmarks' choice). Ordered by
/// head dim, then seqlen, as the peers' script orders them.
inline constexpr std::int64_t kGridTokens = 16384;
inline constexpr std::int64_t kGridModelDim = 2048;
inline const std::vector<std::int64_t> kGridSeqlens = {512, 1024, 2048, 4096, 8192, 16384};
inline const std::vector<std::int64_t> kGridHeadDims = {64, 128};
std::vector<BenchShape> standard_shapes(const std::vector<std::int64_t>& head_dims,
                                        const std::vector<std::int64_t>& seqlens);

/// "B,H,N,d[,Nk[,Hkv]]": batch, query heads, query length, head dim, optionally the key/value length
/// (default N) and key/value heads (default H). Throws UsageError naming what is wrong.
BenchShape parse_bench_shape(const std::string& text);

/// Every dtype x shape x mask. Order: dtype; then each run of consecutive shapes with one head dim; then
/// mask; then the shapes of the run. For the standard grid that is the peers' order (d, causal, N), so a
/// block of the table is one curve over N.
std::vector<BenchPoint> bench_plan(const std::vector<BenchShape>& shapes, const std::vector<DType>& dtypes,
                                   const std::vector<MaskKind>& masks);

/// "B=32 H=16 N=512 d=128" plus "Hkv=" and "Nk=" when they differ from H and N.
std::string describe(const BenchShape& shape);

}  // namespace flashrtc::cli
