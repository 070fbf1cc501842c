// The per-call path on the GPU: calls captured into CUDA graphs replay to the eager result, and a settings
// change between calls (set_runtime_config) reaches the next call although the first one was memoized.
#include <doctest/doctest.h>

#include "flashrtc/config.hpp"
#include "support/forward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::ForwardCase;

namespace {

ForwardCase graph_case(DType dtype, int head_dim, MaskKind mask) {
  ForwardCase c;
  c.dtype = dtype, c.head_dim = head_dim, c.mask = mask;
  c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 333, c.seqlen_kv = 517;
  return c;
}

}  // namespace

TEST_CASE("a call captured into a CUDA graph replays to the eager result") {
  Stream stream;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight}) {
      ForwardCase c = graph_case(dtype, 128, mask);
      c.stream = stream.handle();
      flashrtc::testing::check_graph_replays_eager(c);
    }
}

TEST_CASE("the first call of a specialization can be captured (compile and load happen outside the stream)") {
  Stream stream;
  ForwardCase c = graph_case(DType::kFloat16, 72, MaskKind::kCausalTopLeft);  // no other suite case uses d=72
  c.stream = stream.handle();
  c.via_graph = true;
  const auto result = flashrtc::testing::run_forward_case(c);
  INFO(result.report);
  CHECK(result.pass);
}

TEST_CASE("a settings change reaches the next call of a memoized shape") {
  ForwardCase c = graph_case(DType::kBFloat16, 64, MaskKind::kNone);
  const auto before = flashrtc::testing::run_forward_case(c);
  CHECK(before.pass);
  const RuntimeConfig saved = runtime_config();
  RuntimeConfig changed = saved;
  changed.config_override = "block_m=64,block_n=32,warps=4,stages=1";
  set_runtime_config(changed);
  const auto stats_before = cache_stats();
  const auto after = flashrtc::testing::run_forward_case(c);
  const auto stats_after = cache_stats();
  set_runtime_config(saved);
  INFO(after.report);
  CHECK(after.pass);
  // The new tile is another kernel: it had to be fetched (compiled or read from disk), not the memoized one.
  CHECK(stats_after.compiles + stats_after.disk_hits > stats_before.compiles + stats_before.disk_hits);
}
