#include "bench_plan.hpp"

#include <algorithm>
#include <charconv>

#include "cli_support.hpp"

namespace flashrtc::cli {

std::vector<BenchShape> standard_shapes(const std::vector<std::int64_t>& head_dims,
                                        const std::vector<std::int64_t>& seqlens) {
  std::vector<BenchShape> shapes;
  for (std::int64_t d : head_dims)
    for (std::int64_t n : seqlens) {
      BenchShape s;
      s.batch = std::max<std::int64_t>(1, kGridTokens / std::max<std::int64_t>(1, n));
      s.heads_q = s.heads_kv = std::max<std::int64_t>(1, kGridModelDim / std::max<std::int64_t>(1, d));
      s.seqlen_q = s.seqlen_kv = n;
      s.head_dim = d;
      shapes.push_back(s);
    }
  return shapes;
}

BenchShape parse_bench_shape(const std::string& text) {
  std::vector<std::int64_t> fields;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::int64_t value = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    const auto [stop, status] = std::from_chars(first, last, value);
    if (first == last || status != std::errc() || stop != last || value < 1 || value > kMaxCount)
      throw UsageError("--shape '" + text + "': '" + std::string(first, last) +
                       "' is not an integer from 1 to " + std::to_string(kMaxCount) +
                       " (B,H,N,d[,Nk[,Hkv]])");
    fields.push_back(value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (fields.size() < 4 || fields.size() > 6)
    throw UsageError("--shape '" + text + "': give 4 to 6 fields, B,H,N,d[,Nk[,Hkv]]");
  BenchShape s;
  s.batch = fields[0];
  s.heads_q = fields[1];
  s.seqlen_q = fields[2];
  s.head_dim = fields[3];
  s.seqlen_kv = fields.size() > 4 ? fields[4] : s.seqlen_q;
  s.heads_kv = fields.size() > 5 ? fields[5] : s.heads_q;
  return s;
}

std::vector<BenchPoint> bench_plan(const std::vector<BenchShape>& shapes, const std::vector<DType>& dtypes,
                                   const std::vector<MaskKind>& masks) {
  std::vector<BenchPoint> points;
  for (DType dtype : dtypes)
    for (std::size_t run = 0; run < shapes.size();) {
      std::size_t run_end = run + 1;
      while (run_end < shapes.size() && shapes[run_end].head_dim == shapes[run].head_dim) ++run_end;
      for (MaskKind mask : masks)
        for (std::size_t i = run; i < run_end; ++i) points.push_back({dtype, mask, shapes[i]});
      run = run_end;
    }
  return points;
}

std::string describe(const BenchShape& s) {
  std::string text = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads_q);
  if (s.heads_kv != s.heads_q) text += " Hkv=" + std::to_string(s.heads_kv);
  text += " N=" + std::to_string(s.seqlen_q);
  if (s.seqlen_kv != s.seqlen_q) text += " Nk=" + std::to_string(s.seqlen_kv);
  return text + " d=" + std::to_string(s.head_dim);
}

}  // namespace flashrtc::cli
