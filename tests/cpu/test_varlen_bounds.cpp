// varlen_bounds.cuh, the bounds a varlen kernel takes from the device's prefix sums and seqused_k: for every
// value in a range around the tensors' extents (negative, decreasing, past the end) the sequence's rows lie
// within the packed tensors, its queries within max_seqlen_q and its keys within seqused_k; for well-formed
// values they are the sequence's own.
#include <doctest/doctest.h>

#include <initializer_list>

#include "flashrtc/varlen_bounds.cuh"

using namespace flashrtc;

TEST_CASE(
    "varlen bounds: hostile values stay within the packed tensors, well-formed ones are the sequence's") {
  constexpr int kTotalQ = 7, kTotalK = 5;
  long long checked = 0;
  for (int max_q = 1; max_q <= kTotalQ; max_q += 3)
    for (int q0 = -3; q0 <= kTotalQ + 3; ++q0)
      for (int q1 = -3; q1 <= kTotalQ + 3; ++q1)
        for (int k0 = -3; k0 <= kTotalK + 3; ++k0)
          for (int k1 = -3; k1 <= kTotalK + 3; ++k1)
            for (int used = -2; used <= kTotalK + 2; ++used)
              for (bool has_used : {false, true}) {
                const VarlenSequence s =
                    varlen_bounds(q0, q1, k0, k1, has_used, used, kTotalQ, kTotalK, max_q);
                ++checked;
                const bool inside = s.first_q >= 0 && s.seqlen_q >= 0 && s.first_q + s.seqlen_q <= kTotalQ &&
                                    s.seqlen_q <= max_q && s.first_k >= 0 && s.seqlen_kv >= 0 &&
                                    s.first_k + s.seqlen_kv <= kTotalK && s.seqlen_kv <= s.key_rows &&
                                    s.first_k + s.key_rows <= kTotalK &&
                                    (!has_used || s.seqlen_kv <= (used < 0 ? 0 : used));
                if (!inside) {
                  INFO("q [" << q0 << ", " << q1 << ") k [" << k0 << ", " << k1 << ") used " << used << " ("
                             << has_used << ") max_q " << max_q << " -> first_q " << s.first_q << " seqlen_q "
                             << s.seqlen_q << " first_k " << s.first_k << " seqlen_kv " << s.seqlen_kv);
                  REQUIRE(inside);
                }
                const bool well_formed = 0 <= q0 && q0 <= q1 && q1 <= kTotalQ && q1 - q0 <= max_q &&
                                         0 <= k0 && k0 <= k1 && k1 <= kTotalK &&
                                         (!has_used || (0 <= used && used <= k1 - k0));
                if (well_formed) {
                  REQUIRE(s.first_q == q0);
                  REQUIRE(s.seqlen_q == q1 - q0);
                  REQUIRE(s.first_k == k0);
                  REQUIRE(s.seqlen_kv == (has_used ? used : k1 - k0));
                  REQUIRE(s.key_rows == k1 - k0);
                }
              }
  CHECK(checked > 100000);
  // A sequence longer than max_seqlen_q keeps its first max_seqlen_q queries (the grid has no block past
  // them).
  constexpr VarlenSequence longer = varlen_bounds(2, 7, 0, 5, false, 0, kTotalQ, kTotalK, 3);
  static_assert(longer.first_q == 2 && longer.seqlen_q == 3 && longer.seqlen_kv == 5);
}
