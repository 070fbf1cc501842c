#pragma once
// FlashAttention's online softmax, one query row at a time, for every forward family. Scores arrive in the
// log2 domain (multiplied by softmax scale * log2(e)), so exponentials are exp2. A row's scores of a key tile
// are spread over kLanes adjacent lanes of a warp (kLanes a power of two up to 32, lane groups aligned to
// it), each holding a slice of kCols of them.

namespace flashrtc {

__device__ __forceinline__ float negative_infinity() {
  return __int_as_float(0xff800000);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Max and sum over the kLanes lanes of a row; every one of them gets the result.
template <int kLanes>
__device__ __forceinline__ float row_lanes_max(float x) {
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
template <int kLanes>
__device__ __forceinline__ float row_lanes_sum(float x) {
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

struct SoftmaxStep {
  float alpha;     // the factor the row's O accumulators must be multiplied by
  bool max_moved;  // the running max changed (alpha may differ from 1)
};

// Folds one key tile into a row's running max m (-inf while no key is visible) and this lane's part l of the
// running sum, and turns the lane's scores into probabilities: score(j) for j in [0, kCols) is a reference to
// the lane's j-th score of the row, and becomes exp2(score - m).
template <int kLanes, int kCols, typename Score>
__device__ __forceinline__ SoftmaxStep online_softmax_step(float& m, float& l, Score&& score) {
  float row_max = negative_infinity();
#pragma unroll
  for (int j = 0; j < kCols; j += 2)
    row_max = fmaxf(row_max, j + 1 < kCols ? fmaxf(score(j), score(j + 1)) : score(j));
  row_max = row_lanes_max<kLanes>(row_max);
  const float m_new = fmaxf(m, row_max);
  // A row with no visible key yet keeps m = -inf; subtracting 0 instead keeps exp2 at 0 rather than NaN.
  const float m_use = m_new == negative_infinity() ? 0.f : m_new;
  const SoftmaxStep step{fast_exp2(m - m_use), m_new != m};
  m = m_new;
  float row_sum = 0.f;
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const float p = fast_exp2(score(j) - m_use);
    score(j) = p;
    row_sum += p;
  }
  l = l * step.alpha + row_sum;
  return step;
}

// As online_softmax_step, for kRows rows (score(r, j) is row r's j-th score) not yet multiplied by the
// softmax scale (log2 domain): the scale goes into the exponent, one FFMA per score instead of a multiply and
// a subtract, and m stays scaled. The row's largest scaled score is scale * max for scale >= 0, scale * min
// below. A masked score is -inf for scale > 0, +inf for scale < 0 (its exponent is then -inf either way);
// scale must not be 0 (a caller zeroes the scores and passes 1). alpha[r] receives row r's O rescale factor;
// returns whether some row's max moved.
// Rows go kTogether at a time, each row's max and sum in kChains independent chains, interleaved: shorter
// dependent FMNMX / FADD chains for the scheduler to wait on, at the cost of keeping every row's exponentials
// behind every row's max. Which pays depends on the kernel (attention_forward_wgmma.cuh measures it).
template <int kTogether, int kChains, int kLanes, int kCols, int kRows, typename Score>
__device__ __forceinline__ bool online_softmax_rows_unscaled(float (&m)[kRows], float (&l)[kRows], float scale,
                                                             Score&& score, float (&alpha)[kRows]) {
  static_assert(kRows % kTogether == 0, "rows go kTogether at a time");
  static_assert(kChains >= 1 && kChains <= kCols && (kChains & (kChains - 1)) == 0, "kChains: a power of two <= kCols");
  bool moved = false;
#pragma unroll
  for (int r0 = 0; r0 < kRows; r0 += kTogether) {
    float part[kTogether][kChains];
    // Each row's chains folded into its first, in a tree.
    const auto combine_chains = [&](auto op) {
#pragma unroll
      for (int w = kChains / 2; w >= 1; w /= 2)
#pragma unroll
        for (int c = 0; c < w; ++c)
#pragma unroll
          for (int r = 0; r < kTogether; ++r) part[r][c] = op(part[r][c], part[r][c + w]);
    };
    const auto reduce = [&](auto op) {
#pragma unroll
      for (int c = 0; c < kChains; ++c)
#pragma unroll
        for (int r = 0; r < kTogether; ++r) part[r][c] = score(r0 + r, c);
#pragma unroll
      for (int j = kChains; j < kCols; ++j)
#pragma unroll
        for (int r = 0; r < kTogether; ++r) part[r][j % kChains] = op(part[r][j % kChains], score(r0 + r, j));
      combine_chains(op);
#pragma unroll
      for (int offset = 1; offset < kLanes; offset *= 2)
#pragma unroll
        for (int r = 0; r < kTogether; ++r)
          part[r][0] = op(part[r][0], __shfl_xor_sync(0xffffffffu, part[r][0], offset));
    };
    if (scale >= 0.f)
      reduce([](float x, float y) { return fmaxf(x, y); });
    else
      reduce([](float x, float y) { return fminf(x, y); });
    float m_use[kTogether];
#pragma unroll
    for (int r = 0; r < kTogether; ++r) {
      float& row_m = m[r0 + r];
      const float m_new = fmaxf(row_m, part[r][0] * scale);
      // A row with no visible key yet keeps m = -inf; subtracting 0 instead keeps exp2 at 0 rather than NaN.
      m_use[r] = m_new == negative_infinity() ? 0.f : m_new;
      alpha[r0 + r] = fast_exp2(row_m - m_use[r]);
      moved |= m_new != row_m;
      row_m = m_new;
    }
#pragma unroll
    for (int j = 0; j < kCols; ++j)
#pragma unroll
      for (int r = 0; r < kTogether; ++r) {
        const float p = fast_exp2(fmaf(score(r0 + r, j), scale, -m_use[r]));
        score(r0 + r, j) = p;
        part[r][j % kChains] = j < kChains ? p : part[r][j % kChains] + p;
      }
    combine_chains([](float x, float y) { return x + y; });
#pragma unroll
    for (int r = 0; r < kTogether; ++r) l[r0 + r] = l[r0 + r] * alpha[r0 + r] + part[r][0];
  }
  return moved;
}

}  // namespace flashrtc
