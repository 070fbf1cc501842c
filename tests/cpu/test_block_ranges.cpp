// block_ranges.cuh, the kernels' block ranges under a mask, against a brute-force loop over mask_allows: for
// every mask, block size, query and key length (odd ones, Nq != Nk both ways, lengths below one block) the
// ranges hold exactly the blocks with a visible (query, key) pair.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

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

TEST_CASE("mask_diag is the offset of the diagonal, the host's mask_diagonal") {
  CHECK(mask_diag<kernel::Mask::kNone>(5, 9) == 4);  // bottom-right without a causal mask (windows, ALiBi)
  CHECK(mask_diag<kernel::Mask::kNone>(9, 5) == -4);
  CHECK(mask_diag<kernel::Mask::kCausalTopLeft>(5, 9) == 0);
  CHECK(mask_diag<kernel::Mask::kCausalBottomRight>(5, 9) == 4);
  CHECK(mask_diag<kernel::Mask::kCausalBottomRight>(9, 5) == -4);
  for (MaskKind mask : kMaskKinds)
    for (int seqlen_q : {0, 1, 5, 9})
      for (int seqlen_kv : {0, 1, 5, 9}) {
        const long long device = mask == MaskKind::kNone ? mask_diag<kernel::Mask::kNone>(seqlen_q, seqlen_kv)
                                 : mask == MaskKind::kCausalTopLeft
                                     ? mask_diag<kernel::Mask::kCausalTopLeft>(seqlen_q, seqlen_kv)
                                     : mask_diag<kernel::Mask::kCausalBottomRight>(seqlen_q, seqlen_kv);
        CHECK(device == mask_diagonal(mask, seqlen_q, seqlen_kv));
      }
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

// Sliding windows (KeyMask<kMask, true>) and KeyMask itself, against mask_allows with window bounds: every
// mask and window, lengths both ways round, block sizes 1-4 exhaustively and 16 / 64 over fewer lengths.
namespace {

// Which (row, key) pairs of rows [0, rows) x keys [0, keys) mask_allows lets through (keys past seqlen_kv
// hidden; rows are not bounded by seqlen_q), and the number of them in any rectangle (2-D prefix sums).
class Visibility {
 public:
  Visibility(MaskKind mask, int seqlen_q, int seqlen_kv, int window_left, int window_right, int rows,
             int keys)
      : rows_(rows), keys_(keys), sums_(static_cast<std::size_t>(rows + 1) * (keys + 1), 0) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < keys; ++j) {
        const bool visible =
            j < seqlen_kv && mask_allows(mask, i, j, seqlen_q, seqlen_kv, window_left, window_right);
        at(i + 1, j + 1) = at(i, j + 1) + at(i + 1, j) - at(i, j) + (visible ? 1 : 0);
      }
  }
  bool visible(long long i, long long j) const { return count(i, i + 1, j, j + 1) == 1; }
  // Visible pairs of rows [r0, r1) and keys [c0, c1), both clipped to the table.
  long long count(long long r0, long long r1, long long c0, long long c1) const {
    r1 = r1 < rows_ ? r1 : rows_;
    c1 = c1 < keys_ ? c1 : keys_;
    if (r0 >= r1 || c0 >= c1) return 0;
    return at(r1, c1) - at(r0, c1) - at(r1, c0) + at(r0, c0);
  }

 private:
  long long& at(long long i, long long j) { return sums_[static_cast<std::size_t>(i * (keys_ + 1) + j)]; }
  long long at(long long i, long long j) const {
    return sums_[static_cast<std::size_t>(i * (keys_ + 1) + j)];
  }
  long long rows_, keys_;
  std::vector<long long> sums_;
};

struct Case {
  MaskKind mask;
  int window_left, window_right, seqlen_q, seqlen_kv;
  std::string describe() const {
    return std::string(to_string(mask)) + ", window (" + std::to_string(window_left) + ", " +
           std::to_string(window_right) + "), Nq " + std::to_string(seqlen_q) + ", Nk " +
           std::to_string(seqlen_kv);
  }
};

// KeyMask's per-element answers for every row and key of the table (rows past seqlen_q too).
template <typename Mask>
void check_key_mask(const Mask& key_mask, const Case& c, const Visibility& v, int rows) {
  for (int i = 0; i < rows; ++i) {
    const long long first = key_mask.first_visible(i);
    const long long last = key_mask.last_visible(i);
    bool any = false;
    for (int j = 0; j < c.seqlen_kv + 3; ++j) {
      const bool visible = v.visible(i, j);
      any = any || visible;
      if (key_mask.hides(i, j) == visible || (j >= first && j <= last) != visible) {
        INFO(c.describe() << ", row " << i << ", key " << j << ", run [" << first << ", " << last << "]");
        REQUIRE(key_mask.hides(i, j) == !visible);
        REQUIRE((j >= first && j <= last) == visible);
      }
    }
    if (!any && !(first > last)) {  // a row that sees none has an empty run
      INFO(c.describe() << ", row " << i);
      REQUIRE(first > last);
    }
  }
}

// For blocks of kBlockM x kBlockN: tile_needs_mask and Local per tile, and the key blocks each query block
// visits, against the table. Key tiles from 0 while n0 < seqlen_kv, query tiles while m0 < seqlen_q; rows
// past seqlen_q belong to their tile (the kernels compute the whole tile).
template <int kBlockM, int kBlockN, typename Mask>
void check_tiles(const Mask& key_mask, const Case& c, const Visibility& v) {
  for (long long m0 = 0; m0 < c.seqlen_q; m0 += kBlockM)
    for (long long n0 = 0; n0 < c.seqlen_kv; n0 += kBlockN) {
      const long long visible = v.count(m0, m0 + kBlockM, n0, n0 + kBlockN);
      const bool needs_mask = key_mask.tile_needs_mask(m0, kBlockM, n0, kBlockN);
      if (needs_mask != (visible < static_cast<long long>(kBlockM) * kBlockN)) {
        INFO(c.describe() << ", blocks " << kBlockM << "x" << kBlockN << ", tile (" << m0 << ", " << n0
                          << "), visible pairs " << visible);
        REQUIRE(needs_mask == (visible < static_cast<long long>(kBlockM) * kBlockN));
      }
      const auto local = key_mask.local(m0, n0);
      for (int r = 0; r < kBlockM; ++r)
        for (int col = 0; col < kBlockN; ++col)
          if (local.hides(r, col) != key_mask.hides(m0 + r, n0 + col)) {
            INFO(c.describe() << ", tile (" << m0 << ", " << n0 << "), local (" << r << ", " << col << ")");
            REQUIRE(local.hides(r, col) == key_mask.hides(m0 + r, n0 + col));
          }
    }
}

// The window's block ranges: exactly the blocks holding a visible pair, begin = end when none.
template <int kBlockM, int kBlockN, kernel::Mask kMask>
void check_window_ranges(const KeyMask<kMask, true>& key_mask, const Case& c, const Visibility& v) {
  const int num_m_blocks = (c.seqlen_q + kBlockM - 1) / kBlockM;
  const int num_n_blocks = (c.seqlen_kv + kBlockN - 1) / kBlockN;
  // Key-block kernels: rows before seqlen_q only.
  for (int n_block = 0; n_block < num_n_blocks; ++n_block) {
    const long long n0 = static_cast<long long>(n_block) * kBlockN;
    const BlockRange range = query_blocks_seeing<kBlockM, kBlockN>(key_mask, n0, c.seqlen_q);
    INFO(c.describe() << ", blocks " << kBlockM << "x" << kBlockN << ", key block " << n_block << ": ["
                      << range.begin << ", " << range.end << ")");
    REQUIRE(range.begin >= 0);
    REQUIRE(range.begin <= range.end);
    REQUIRE(range.end <= num_m_blocks);
    for (int m_block = 0; m_block < num_m_blocks; ++m_block) {
      const long long m0 = static_cast<long long>(m_block) * kBlockM;
      const long long row_end = m0 + kBlockM < c.seqlen_q ? m0 + kBlockM : c.seqlen_q;
      const bool seen = v.count(m0, row_end, n0, n0 + kBlockN) > 0;
      if ((m_block >= range.begin && m_block < range.end) != seen) {
        INFO("query block " << m_block);
        REQUIRE((m_block >= range.begin && m_block < range.end) == seen);
      }
    }
  }
  // Query-block kernels: the whole tile of rows.
  for (int m_block = 0; m_block < num_m_blocks; ++m_block) {
    const long long m0 = static_cast<long long>(m_block) * kBlockM;
    const BlockRange range = key_blocks_seen<kBlockN>(key_mask, m0, m0 + kBlockM);
    INFO(c.describe() << ", blocks " << kBlockM << "x" << kBlockN << ", query block " << m_block << ": ["
                      << range.begin << ", " << range.end << ")");
    REQUIRE(range.begin >= 0);
    REQUIRE(range.begin <= range.end);
    REQUIRE(range.end <= num_n_blocks);
    for (int n_block = 0; n_block < num_n_blocks; ++n_block) {
      const long long n0 = static_cast<long long>(n_block) * kBlockN;
      const bool seen = v.count(m0, m0 + kBlockM, n0, n0 + kBlockN) > 0;
      if ((n_block >= range.begin && n_block < range.end) != seen) {
        INFO("key block " << n_block);
        REQUIRE((n_block >= range.begin && n_block < range.end) == seen);
      }
    }
  }
}

template <int kBlockM, int kBlockN, kernel::Mask kMask>
void check_blocks(const KeyMask<kMask, true>& key_mask, const Case& c, const Visibility& v) {
  check_tiles<kBlockM, kBlockN>(key_mask, c, v);
  check_window_ranges<kBlockM, kBlockN>(key_mask, c, v);
}

// Every window and length pair: the per-element answers, then every block size of Blocks (a list of
// check_blocks instantiations).
template <kernel::Mask kMask, typename Blocks>
void check_windows(const std::vector<int>& lengths, const std::vector<int>& windows, Blocks&& blocks) {
  const MaskKind mask = static_cast<MaskKind>(kMask);
  for (int seqlen_q : lengths)
    for (int seqlen_kv : lengths) {
      const long long diag = mask_diag<kMask>(seqlen_q, seqlen_kv);
      const int rows = seqlen_q + 64, keys = seqlen_kv + 64;  // whole tiles of the largest block
      for (int window_left : windows)
        for (int window_right : windows) {
          const Case c{mask, window_left, window_right, seqlen_q, seqlen_kv};
          const Visibility v(mask, seqlen_q, seqlen_kv, window_left, window_right, rows, keys);
          const KeyMask<kMask, true> key_mask(seqlen_kv, diag, window_left, window_right);
          check_key_mask(key_mask, c, v, rows);
          blocks(key_mask, c, v);
          if (window_left < 0 && window_right < 0) {  // the dense mask: the same answers
            const KeyMask<kMask> dense{seqlen_kv, diag};
            check_key_mask(dense, c, v, rows);
            check_tiles<3, 2>(dense, c, v);
            check_tiles<16, 16>(dense, c, v);
          }
        }
    }
}

struct SmallBlocks {
  template <kernel::Mask kMask>
  void operator()(const KeyMask<kMask, true>& m, const Case& c, const Visibility& v) const {
    check_blocks<1, 1>(m, c, v), check_blocks<1, 2>(m, c, v), check_blocks<1, 3>(m, c, v);
    check_blocks<1, 4>(m, c, v), check_blocks<2, 1>(m, c, v), check_blocks<2, 2>(m, c, v);
    check_blocks<2, 3>(m, c, v), check_blocks<2, 4>(m, c, v), check_blocks<3, 1>(m, c, v);
    check_blocks<3, 2>(m, c, v), check_blocks<3, 3>(m, c, v), check_blocks<3, 4>(m, c, v);
    check_blocks<4, 1>(m, c, v), check_blocks<4, 2>(m, c, v), check_blocks<4, 3>(m, c, v);
    check_blocks<4, 4>(m, c, v);
  }
};
struct LargeBlocks {
  template <kernel::Mask kMask>
  void operator()(const KeyMask<kMask, true>& m, const Case& c, const Visibility& v) const {
    check_blocks<16, 16>(m, c, v), check_blocks<16, 64>(m, c, v), check_blocks<64, 16>(m, c, v);
    check_blocks<64, 64>(m, c, v), check_blocks<7, 5>(m, c, v);
  }
};

template <kernel::Mask kMask>
void check_every_window() {
  check_windows<kMask>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                       {-1, 0, 1, 3, 7, 1000}, SmallBlocks{});
  // 40: a window wider than a 16-key block and narrower than a 64-key one.
  check_windows<kMask>({0, 1, 5, 16, 17, 33, 64, 65, 100, 129}, {-1, 0, 1, 3, 7, 40, 1000}, LargeBlocks{});
}

// Evaluated by the host compiler at compile time, as NVRTC may: the window's arithmetic is constexpr.
constexpr KeyMask<kernel::Mask::kNone, true> kBand(100, 0, 3, 3);
static_assert(kBand.first_visible(40) == 37 && kBand.last_visible(40) == 43, "the run of a row");
static_assert(key_blocks_seen<16>(kBand, 32, 48).begin == 1 && key_blocks_seen<16>(kBand, 32, 48).end == 4,
              "keys 29..50");
static_assert(query_blocks_seeing<16, 16>(kBand, 64, 100).begin == 3 &&
                  query_blocks_seeing<16, 16>(kBand, 64, 100).end == 6,
              "rows 61..82");

}  // namespace

TEST_CASE("a window's KeyMask, tiles and block ranges hold exactly the visible pairs: causal top-left") {
  check_every_window<kernel::Mask::kCausalTopLeft>();
}
TEST_CASE("a window's KeyMask, tiles and block ranges hold exactly the visible pairs: causal bottom-right") {
  check_every_window<kernel::Mask::kCausalBottomRight>();
}
TEST_CASE("a window's KeyMask, tiles and block ranges hold exactly the visible pairs: no causal mask") {
  check_every_window<kernel::Mask::kNone>();
}

TEST_CASE("mask_allows with a window follows the spec's bounds") {
  // Nq 4, Nk 10, no causal mask: diag 6, row 0's diagonal key is 6.
  CHECK(mask_allows(MaskKind::kNone, 0, 4, 4, 10, 2, 1));
  CHECK_FALSE(mask_allows(MaskKind::kNone, 0, 3, 4, 10, 2, 1));
  CHECK(mask_allows(MaskKind::kNone, 0, 7, 4, 10, 2, 1));
  CHECK_FALSE(mask_allows(MaskKind::kNone, 0, 8, 4, 10, 2, 1));
  CHECK(mask_allows(MaskKind::kNone, 0, 0, 4, 10, -1, 1));
  CHECK(mask_allows(MaskKind::kNone, 0, 9, 4, 10, 2, -1));
  // Top-left: diag 0; a causal mask keeps keys after the diagonal hidden whatever window_right says.
  CHECK(mask_allows(MaskKind::kCausalTopLeft, 3, 1, 4, 10, 2, 5));
  CHECK_FALSE(mask_allows(MaskKind::kCausalTopLeft, 3, 0, 4, 10, 2, 5));
  CHECK_FALSE(mask_allows(MaskKind::kCausalTopLeft, 3, 4, 4, 10, 2, 5));
  // The windowless form is the window (-1, -1).
  for (MaskKind mask : kMaskKinds)
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j)
        CHECK(mask_allows(mask, i, j, 4, 6) == mask_allows(mask, i, j, 4, 6, -1, -1));
}

TEST_CASE("window ranges at the int limit: the arithmetic past 2^31 is 64-bit") {
  // One query row before INT_MAX keys, bottom-right, window left 1024: diag = INT_MAX - 1.
  constexpr int kKeys = 2147483647;
  const long long diag = mask_diag<kernel::Mask::kCausalBottomRight>(1, kKeys);
  const KeyMask<kernel::Mask::kCausalBottomRight, true> band(kKeys, diag, 1024, -1);
  const BlockRange keys = key_blocks_seen<128>(band, 0, 128);
  CHECK(keys.begin == (kKeys - 1LL - 1024) / 128);
  CHECK(keys.end == (kKeys + 127LL) / 128);
  const BlockRange rows = query_blocks_seeing<128, 128>(band, kKeys - 127LL, 1);
  CHECK(rows.begin == 0);
  CHECK(rows.end == 1);
  CHECK(query_blocks_seeing<128, 128>(band, kKeys - 1LL - 1024 - 128, 1).end == 0);  // before the window
  // Both sides unbounded, no causal mask: every key block, whatever the lengths.
  const KeyMask<kernel::Mask::kNone, true> open(kKeys, mask_diag<kernel::Mask::kNone>(kKeys, kKeys), -1, -1);
  const BlockRange all = key_blocks_seen<128>(open, kKeys - 1LL, kKeys + 127LL);
  CHECK(all.begin == 0);
  CHECK(all.end == (kKeys + 127LL) / 128);
  CHECK_FALSE(open.tile_needs_mask(0, 128, 0, 128));
  CHECK(open.tile_needs_mask(0, 128, kKeys - 127LL, 128));
}
