// block_ranges.cuh, the kernels' block ranges under a mask, against a brute-force loop over mask_allows: for
// every mask, block size, query and key length (odd ones, Nq != Nk both ways, lengths below one block) the
// ranges hold exactly the blocks with a visible (query, key) pair.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "flashrtc/block_ranges.cuh"
#include "flashrtc/types.hpp"

using namespace flashrtc;

namespace {

constexpr int kMaxLength = 70;

// Whether query rows [m0, m0 + rows) and keys [n0, n0 + keys) hold a pair the mask lets through; keys stop at
// seqlen_kv, rows do not (the callers bound them).
bool any_visible(MaskKind mask, std::int64_t m0, std::int64_t rows, std::int64_t n0, std::int64_t keys,
                 std::int64_t seqlen_q, std::int64_t seqlen_kv) {
  for (std::int64_t i = m0; i < m0 + rows; ++i)
    for (std::int64_t j = n0; j < n0 + keys && j < seqlen_kv; ++j)
      if (mask_allows(mask, i, j, seqlen_q, seqlen_kv)) return true;
  return false;
}

std::string describe(MaskKind mask, int block_m, int block_n, int seqlen_q, int seqlen_kv) {
  const char* const names[] = {"none", "causal", "causal-br"};
  return std::string(names[static_cast<int>(mask)]) + ", blocks " + std::to_string(block_m) + "x" +
         std::to_string(block_n) + ", Nq " + std::to_string(seqlen_q) + ", Nk " + std::to_string(seqlen_kv);
}

// The key-block kernels (dK, dV): the key block from n0 visits query blocks [begin, end); rows past seqlen_q
// do not count (no query block is visited for them alone).
template <int kBlockM, int kBlockN, kernel::Mask kMask>
void check_query_blocks(MaskKind mask) {
  for (int seqlen_q = 0; seqlen_q <= kMaxLength; ++seqlen_q)
    for (int seqlen_kv = 1; seqlen_kv <= kMaxLength; ++seqlen_kv) {
      const long long diag = mask_diag<kMask>(seqlen_q, seqlen_kv);
      const int num_m_blocks = (seqlen_q + kBlockM - 1) / kBlockM;
      for (int n_block = 0; n_block * kBlockN < seqlen_kv; ++n_block) {
        const long long n0 = static_cast<long long>(n_block) * kBlockN;
        const BlockRange range = query_blocks_seeing<kBlockM, kMask>(n0, diag, seqlen_q);
        INFO(describe(mask, kBlockM, kBlockN, seqlen_q, seqlen_kv) << ", key block " << n_block);
        REQUIRE(range.end == num_m_blocks);
        REQUIRE(range.begin <= range.end);
        for (int m_block = 0; m_block < num_m_blocks; ++m_block) {
          const long long m0 = static_cast<long long>(m_block) * kBlockM;
          const long long rows = m0 + kBlockM <= seqlen_q ? kBlockM : seqlen_q - m0;
          INFO("query block " << m_block);
          REQUIRE((m_block >= range.begin) == any_visible(mask, m0, rows, n0, kBlockN, seqlen_q, seqlen_kv));
        }
      }
    }
}

// The query-block kernels (dQ, and the forward): the query block from m0 visits key blocks [0, count), its
// rows past seqlen_q included (row_end = m0 + block_m).
template <int kBlockM, int kBlockN, kernel::Mask kMask>
void check_key_blocks(MaskKind mask) {
  for (int seqlen_q = 1; seqlen_q <= kMaxLength; ++seqlen_q)
    for (int seqlen_kv = 0; seqlen_kv <= kMaxLength; ++seqlen_kv) {
      const long long diag = mask_diag<kMask>(seqlen_q, seqlen_kv);
      const int num_n_blocks = (seqlen_kv + kBlockN - 1) / kBlockN;
      for (int m_block = 0; m_block * kBlockM < seqlen_q; ++m_block) {
        const long long m0 = static_cast<long long>(m_block) * kBlockM;
        const int count = key_blocks_seen<kBlockN, kMask>(m0 + kBlockM, diag, seqlen_kv);
        INFO(describe(mask, kBlockM, kBlockN, seqlen_q, seqlen_kv) << ", query block " << m_block);
        REQUIRE(count >= 0);
        REQUIRE(count <= num_n_blocks);
        for (int n_block = 0; n_block < num_n_blocks; ++n_block) {
          INFO("key block " << n_block);
          REQUIRE((n_block < count) == any_visible(mask, m0, kBlockM,
                                                   static_cast<long long>(n_block) * kBlockN, kBlockN,
                                                   seqlen_q, seqlen_kv));
        }
      }
    }
}

template <int kBlockM, int kBlockN>
void check_every_mask() {
  check_query_blocks<kBlockM, kBlockN, kernel::Mask::kNone>(MaskKind::kNone);
  check_query_blocks<kBlockM, kBlockN, kernel::Mask::kCausalTopLeft>(MaskKind::kCausalTopLeft);
  check_query_blocks<kBlockM, kBlockN, kernel::Mask::kCausalBottomRight>(MaskKind::kCausalBottomRight);
  check_key_blocks<kBlockM, kBlockN, kernel::Mask::kNone>(MaskKind::kNone);
  check_key_blocks<kBlockM, kBlockN, kernel::Mask::kCausalTopLeft>(MaskKind::kCausalTopLeft);
  check_key_blocks<kBlockM, kBlockN, kernel::Mask::kCausalBottomRight>(MaskKind::kCausalBottomRight);
}

}  // namespace

TEST_CASE("mask_diag is the offset of the causal diagonal") {
  CHECK(mask_diag<kernel::Mask::kNone>(5, 9) == 0);
  CHECK(mask_diag<kernel::Mask::kCausalTopLeft>(5, 9) == 0);
  CHECK(mask_diag<kernel::Mask::kCausalBottomRight>(5, 9) == 4);
  CHECK(mask_diag<kernel::Mask::kCausalBottomRight>(9, 5) == -4);
}

TEST_CASE("block ranges hold exactly the blocks with a visible pair") {
  check_every_mask<16, 16>();  // square blocks
  check_every_mask<16, 48>();  // wider key blocks
  check_every_mask<64, 16>();  // taller query blocks: several key blocks per diagonal step
  check_every_mask<7, 5>();    // odd sizes: the arithmetic assumes no power of two
}

TEST_CASE("block ranges at the int limit: the arithmetic past 2^31 is 64-bit") {
  // One query row before INT_MAX keys, bottom-right: diag = INT_MAX - 1, and row_end + diag passes 2^31.
  constexpr int kKeys = 2147483647;
  const long long diag = mask_diag<kernel::Mask::kCausalBottomRight>(1, kKeys);
  CHECK(diag == kKeys - 1LL);
  // The row sees every key: query block 0 sees the last key block, and the row every key block.
  const BlockRange range = query_blocks_seeing<128, kernel::Mask::kCausalBottomRight>(kKeys - 127LL, diag, 1);
  CHECK(range.begin == 0);
  CHECK(range.end == 1);
  CHECK(key_blocks_seen<128, kernel::Mask::kCausalBottomRight>(128, diag, kKeys) == (kKeys + 127LL) / 128);
  // Top-left: the key block at n0 is first seen by the query block holding row n0.
  constexpr int kRows = 2147483000;
  const long long n0 = 1024LL * 1024 * 1024;
  const BlockRange tl = query_blocks_seeing<128, kernel::Mask::kCausalTopLeft>(n0, 0, kRows);
  CHECK(tl.begin == n0 / 128);
  CHECK(tl.end == (kRows + 127LL) / 128);
}
