// dq_accum_layout.cuh, the fp32 dQ workspace's layouts: the fused kernel's tiles hold every (query, column)
// of a tile exactly once inside the tile's own run, the kernel's count (slice, float2, thread) and the
// readers' (query, column) name the same floats, and the workspace covers every head's padded last tile.
#include <doctest/doctest.h>

#include <vector>

#include "flashrtc/dq_accum_layout.cuh"

using namespace flashrtc;

TEST_CASE("a fused dQ tile is a permutation of its queries x columns") {
  for (int head_dim : {64, 96, 128, 256})
    for (int tile_rows : {64, 128}) {
      INFO("d=" << head_dim << " tile=" << tile_rows);
      std::vector<int> seen(static_cast<std::size_t>(tile_rows * head_dim), 0);
      for (int q = 0; q < tile_rows; ++q)
        for (int c = 0; c < head_dim; ++c) {
          const int offset = dq_tile_offset(q, c, head_dim);
          REQUIRE(offset >= 0);
          REQUIRE(offset < tile_rows * head_dim);
          ++seen[static_cast<std::size_t>(offset)];
        }
      for (int count : seen) CHECK(count == 1);
    }
}

TEST_CASE("the fused kernel's stores land where the readers look") {
  // Thread t = 32w + lane of a consumer group holds rows 16w + lane/4 + 8h, columns 8k + 2(lane%4) + e as its
  // float2 number 2k + h (the wgmma accumulator layout); it stores them at dq_tile_fragment_offset.
  const int head_dim = 128;
  for (int slice = 0; slice < 2; ++slice)
    for (int thread = 0; thread < 128; ++thread)
      for (int k = 0; k < head_dim / 8; ++k)
        for (int h = 0; h < 2; ++h)
          for (int e = 0; e < 2; ++e) {
            const int w = thread / 32, lane = thread % 32;
            const int query = 64 * slice + 16 * w + lane / 4 + 8 * h;
            const int column = 8 * k + 2 * (lane % 4) + e;
            CHECK(dq_tile_offset(query, column, head_dim) ==
                  dq_tile_fragment_offset(slice, 2 * k + h, thread, head_dim) + e);
          }
  // A warp's float2 stores of one register pair are 32 consecutive float2: whole shared-memory lines.
  for (int lane = 1; lane < 32; ++lane)
    CHECK(dq_tile_fragment_offset(0, 3, lane, head_dim) ==
          dq_tile_fragment_offset(0, 3, lane - 1, head_dim) + 2);
}

TEST_CASE("the conversion's reading of a slice in order finds each float's query and column") {
  // float4 i of a slice is float2 numbers 2i and 2i + 1: four adjacent columns of one query, as written.
  for (int head_dim : {64, 96, 128, 256})
    for (int i = 0; i < kDqSliceRows * head_dim / 4; ++i) {
      INFO("d=" << head_dim << " float4 " << i);
      const DqSlicePosition at = dq_slice_position(2 * i);
      REQUIRE(at.query >= 0);
      REQUIRE(at.query < kDqSliceRows);
      REQUIRE(at.column % 4 == 0);
      REQUIRE(at.column + 4 <= head_dim);
      for (int e = 0; e < 4; ++e) CHECK(dq_tile_offset(at.query, at.column + e, head_dim) == 4 * i + e);
    }
}

TEST_CASE("the workspace holds each head's tiles back to back, the last one padded") {
  const long long heads = 3, seqlen_q = 130;
  const int head_dim = 64, tile_rows = 64;
  const long long floats = dq_accum_floats(heads, seqlen_q, head_dim, tile_rows);
  CHECK(floats == heads * 192 * head_dim);
  std::vector<int> seen(static_cast<std::size_t>(floats), 0);
  for (long long h = 0; h < heads; ++h)
    for (long long q = 0; q < seqlen_q; ++q)
      for (int c = 0; c < head_dim; ++c) {
        const long long offset = dq_accum_offset(h, q, c, seqlen_q, head_dim, tile_rows);
        REQUIRE(offset >= h * 192 * head_dim);
        REQUIRE(offset < (h + 1) * 192 * head_dim);
        ++seen[static_cast<std::size_t>(offset)];
      }
  long long used = 0;
  for (int count : seen) {
    CHECK(count <= 1);
    used += count;
  }
  CHECK(used == heads * seqlen_q * head_dim);
  // Row-major without tiles.
  CHECK(dq_accum_floats(heads, seqlen_q, head_dim, 0) == heads * seqlen_q * head_dim);
  CHECK(dq_accum_offset(2, 5, 7, seqlen_q, head_dim, 0) == (2 * seqlen_q + 5) * head_dim + 7);
}

TEST_CASE("the varlen workspace gives each sequence its own tiles within the bound, in any order") {
  // Every partition of up to 300 rows into sequences of 0..150 rows (a sample, fixed seed): the tiles of the
  // sequences are disjoint and inside varlen_dq_tiles_per_head.
  for (int tile_rows : {64, 128}) {
    unsigned state = 12345;
    const auto next = [&](unsigned bound) {
      state = state * 1103515245u + 12345u;
      return (state >> 8) % bound;
    };
    for (int trial = 0; trial < 2000; ++trial) {
      const long long sequences = 1 + next(12);
      std::vector<long long> lengths;
      long long total = 0;
      for (long long b = 0; b < sequences; ++b)
        lengths.push_back(next(4) == 0 ? 0 : next(151)), total += lengths.back();
      const long long tiles = varlen_dq_tiles_per_head(total, sequences, tile_rows);
      std::vector<int> owner(static_cast<std::size_t>(tiles), -1);
      long long first_q = 0;
      for (long long b = 0; b < sequences; ++b) {
        const long long first_tile = varlen_dq_first_tile(first_q, b, tile_rows);
        const long long count = (lengths[b] + tile_rows - 1) / tile_rows;
        INFO("tile_rows " << tile_rows << " trial " << trial << " sequence " << b);
        REQUIRE(first_tile + count <= tiles);
        for (long long t = first_tile; t < first_tile + count; ++t) {
          CHECK(owner[static_cast<std::size_t>(t)] == -1);
          owner[static_cast<std::size_t>(t)] = static_cast<int>(b);
        }
        first_q += lengths[b];
      }
    }
    // Hostile prefix sums, bounded into the packed rows: any sequence index, any first row and length with
    // first + length <= total stays inside.
    for (long long total : {0, 1, 63, 64, 65, 1000})
      for (long long sequences : {1, 2, 7})
        for (long long b = 0; b < sequences; ++b)
          for (long long first = 0; first <= total; first += 1 + total / 9)
            for (long long length : {0LL, 1LL, total - first}) {
              if (length < 0 || first + length > total) continue;
              CHECK(varlen_dq_first_tile(first, b, tile_rows) + (length + tile_rows - 1) / tile_rows <=
                    varlen_dq_tiles_per_head(total, sequences, tile_rows));
            }
  }
}
