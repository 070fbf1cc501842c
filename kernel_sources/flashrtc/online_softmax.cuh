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
__device__ __forceinline__ float row_lanes_min(float x) {
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, offset));
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

// As online_softmax_step, for scores not yet multiplied by the softmax scale (log2 domain): the scale goes
// into the exponent, one FFMA per score instead of a multiply and a subtract, and m stays scaled. The row's
// largest scaled score is scale * max for scale >= 0, scale * min below. Raw scores must be finite (masked
// tiles are scaled and masked by the caller, which then passes scale = 1).
template <int kLanes, int kCols, typename Score>
__device__ __forceinline__ SoftmaxStep online_softmax_step_unscaled(float& m, float& l, float scale, Score&& score) {
  float row_max;
  if (scale >= 0.f) {
    float x = negative_infinity();
#pragma unroll
    for (int j = 0; j < kCols; ++j) x = fmaxf(x, score(j));
    row_max = row_lanes_max<kLanes>(x) * scale;
  } else {
    float x = -negative_infinity();
#pragma unroll
    for (int j = 0; j < kCols; ++j) x = fminf(x, score(j));
    row_max = row_lanes_min<kLanes>(x) * scale;
  }
  const float m_new = fmaxf(m, row_max);
  const float m_use = m_new == negative_infinity() ? 0.f : m_new;
  const SoftmaxStep step{fast_exp2(m - m_use), m_new != m};
  m = m_new;
  float row_sum = 0.f;
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const float p = fast_exp2(fmaf(score(j), scale, -m_use));
    score(j) = p;
    row_sum += p;
  }
  l = l * step.alpha + row_sum;
  return step;
}

}  // namespace flashrtc
