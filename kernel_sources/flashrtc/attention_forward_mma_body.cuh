// The body of the tensor-core forward kernels (attention_forward_mma.cuh), included into each kernel's
// function body: an inlined device function holding it compiled the plain kernel into other code (measured
// with scripts/compare_kernel_builds.py), while text in the kernel keeps it what it was. No include guard: it
// is included once per kernel template. The including kernel defines T, kHeadDim, kBlockM, kBlockN, kWarps,
// kStages, kMask (template parameters), kVarlen and kVariants (constants or template parameters) and `args`,
// its parameter struct (of a type dependent on a template parameter).
//
// kVarlen: the variable-length forward over the sequences of a packed call (docs/varlen.md): each block runs
// its sequence's slice as a dense problem of the sequence's lengths (varlen_sequence.cuh). kVariants
// (kernel::kVariant* bits, args a VariantForwardParams): a sliding window (key tiles outside it are never
// visited, tiles it crosses are masked) and a softcap (applied to the scores before the mask: tanh would take
// a masked -inf to -1). Without them none of that is compiled: the plain kernel's code is the same as without
// the variants.
static_assert(!kVarlen || kVariants == 0, "the varlen forward takes no variants");
static_assert((kVariants & ~(kernel::kVariantWindow | kernel::kVariantSoftcap)) == 0,
              "the tensor-core forward computes windows and softcaps only");
constexpr bool kWindow = (kVariants & kernel::kVariantWindow) != 0;
constexpr bool kSoftcap = (kVariants & kernel::kVariantSoftcap) != 0;
static_assert(sizeof(T) == 2, "the tensor-core kernel takes 16-bit inputs");
constexpr MmaForwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the tensor-core forward kernel");
constexpr int kThreads = kShape.threads();
constexpr int kChunks = kShape.chunks();
constexpr int kLoadSlots = kChunks <= 4 ? 4 : kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
constexpr int kPitch = kShape.pitch_chunks();
constexpr bool kSwizzle = kShape.swizzled();
constexpr int kMT = kShape.m_tiles();
constexpr int kNT = kBlockN / 8;                    // 8-column tiles of S
constexpr int kDT = kShape.head_dim_padded() / 8;   // 8-column tiles of O
constexpr int kKS = kShape.head_dim_padded() / 16;  // k-steps of Q K^T
constexpr int kPS = kBlockN / 16;                   // k-steps of P V
constexpr bool kQInRegs = kShape.q_in_registers();
constexpr bool kSkipRescale = kShape.o_floats() >= 128;

extern __shared__ __align__(128) unsigned char smem_raw[];
const unsigned q_base = smem_address(smem_raw);
const unsigned k_base = q_base + kShape.q_smem_bytes();
const unsigned v_base = k_base + kStages * kShape.kv_stage_bytes();
// Byte offset of 16-byte chunk `chunk` of row `row` in a tile.
auto offset = [](int row, int chunk) -> unsigned {
  return unsigned(row * kPitch + (kSwizzle ? (chunk ^ (row & 7)) : chunk)) * 16u;
};

const int tid = threadIdx.x;
const int warp = tid / 32;
const int lane = tid % 32;

const kernel::ForwardParams& p = kernel::dense_params(args);
ForwardBlock<T, kBlockM, kBlockN, kMask> block(p);
VarlenSequence seq;  // the block's sequence (varlen only)
if constexpr (kVarlen) {
  if (!bind_varlen_sequence(args, block, seq)) return;
}
// The lengths that bound the block's rows and keys: the call's, or its sequence's. Read where used, as
// the parameters are: a copy of p with the sequence's lengths held its fields in registers (the defaults
// on sm_100 and sm_120 went past the register margin).
const auto seqlen_q = [&] {
  if constexpr (kVarlen)
    return seq.seqlen_q;
  else
    return p.seqlen_q;
};
const auto seqlen_kv = [&] {
  if constexpr (kVarlen)
    return seq.seqlen_kv;
  else
    return p.seqlen_kv;
};
const long long m0 = block.m0;
// The mask of a key tile, built where used (see below).
const auto key_mask = [&] {
  if constexpr (kWindow)
    return KeyMask<kMask, true>{seqlen_kv(), block.diag, args.window_left, args.window_right};
  else
    return KeyMask<kMask>{seqlen_kv(), block.diag};
};
// The key blocks the block visits: [first_n_block, first_n_block + num_n_blocks), from the first without a
// window.
int first_n_block = 0, num_n_blocks = block.num_n_blocks;
if constexpr (kWindow) {
  const BlockRange range = key_blocks_seen<kBlockN>(key_mask(), m0, m0 + kBlockM);
  first_n_block = range.begin;
  num_n_blocks = range.end - range.begin;
}
const long long first_key = static_cast<long long>(first_n_block) * kBlockN;
const T* q_ptr = block.q;
const T* k_ptr = block.k;
const T* v_ptr = block.v;
T* o_ptr = block.o;
float* lse_ptr = block.lse;

// Copies rows [row0, row0 + rows) of a [seq, head_dim] matrix into a tile; rows past rows_end and columns
// past head_dim read as zeros. Each row is given kLoadSlots threads (chunks rounded up to a power of two;
// the extra slots idle), so when they divide the block each thread copies one column chunk every kRowStep
// rows and its addresses advance by constants, without a division per chunk (12-chunk rows at d = 96).
auto load_tile = [&](unsigned dst, const T* src, long long stride_seq, long long row0, long long rows_end,
                     int rows) {
  const long long left = rows_end - row0;  // rows of the matrix from row0 on
  const int rows_left = left < rows ? static_cast<int>(left) : rows;
  const T* tile_src = src + row0 * stride_seq;
  if constexpr (kThreads % kLoadSlots == 0) {
    constexpr int kRowStep = kThreads / kLoadSlots;
    const int r = tid / kLoadSlots;
    const int chunk = tid % kLoadSlots;
    if (kLoadSlots != kChunks && chunk >= kChunks) return;
    const bool chunk_valid = chunk * 8 < kHeadDim;
    const T* row_src = tile_src + r * stride_seq + chunk * 8;
    const long long step = kRowStep * stride_seq;
#pragma unroll
    for (int i = 0; i < (rows + kRowStep - 1) / kRowStep; ++i) {
      const int rr = r + i * kRowStep;
      if (rows % kRowStep != 0 && rr >= rows) break;
      const bool valid = chunk_valid && rr < rows_left;
      const unsigned d = (kSwizzle && kRowStep % 8 != 0)
                             ? dst + offset(rr, chunk)
                             : dst + offset(r, chunk) + unsigned(i * kRowStep * kPitch * 16);
      cp_async_16(d, valid ? row_src : src, valid);
      row_src += step;
    }
  } else {
#pragma unroll
    for (int c = tid; c < rows * kChunks; c += kThreads) {
      const int r = c / kChunks;
      const int chunk = c % kChunks;
      const bool valid = r < rows_left && chunk * 8 < kHeadDim;
      cp_async_16(dst + offset(r, chunk), valid ? tile_src + r * stride_seq + chunk * 8 : src, valid);
    }
  }
};
auto store_rows = [&](const unsigned char* tile) {  // the block's O rows from a tile in shared memory
  for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int chunk = c % kChunks;
    const long long row = m0 + r;
    if (row < seqlen_q() && chunk * 8 < kHeadDim)
      *reinterpret_cast<uint4*>(o_ptr + row * p.o_stride_seq + chunk * 8) =
          *reinterpret_cast<const uint4*>(tile + offset(r, chunk));
  }
};

if (num_n_blocks == 0) {
  if constexpr (kVarlen)
    store_rows_without_keys<kHeadDim>(block, sequence_params(p, seq), ChunksRoundRobin<kThreads>{});
  else
    store_rows_without_keys<kHeadDim>(block, p, ChunksRoundRobin<kThreads>{});
  return;
}

// Pipeline. One stage (FlashAttention-2's schedule): commit groups K0 (with Q), V0, K1, V1, ...; V(n) loads
// during S(n), K(n + 1) during softmax and P V(n); two barriers per tile. Two stages: each group is
// {K(n), V(n)}, issued a whole tile ahead into the buffers the previous tile freed; one barrier per tile.
load_tile(q_base, q_ptr, p.q_stride_seq, m0, seqlen_q(), kBlockM);
load_tile(k_base, k_ptr, p.k_stride_seq, first_key, seqlen_kv(), kBlockN);
if constexpr (kStages == 2) load_tile(v_base, v_ptr, p.v_stride_seq, first_key, seqlen_kv(), kBlockN);
cp_async_commit();

const int warp_row0 = warp * 16 * kMT;  // first row of this warp's slices, relative to m0
// ldmatrix reads row row0 + lane_row, chunk 2 * step + lane_chunk of a tile, with row0 a multiple of 8:
//   Q (A operand):        lane_row = lane % 16,                       lane_chunk = lane / 16;
//   K (B of Q K^T):       lane_row = lane % 8 + 8 * (lane / 16),      lane_chunk = (lane / 8) % 2;
//   V (B of P V, .trans): lane_row = lane % 8 + 8 * ((lane / 8) % 2), lane_chunk = lane / 16.
// Each lane keeps one base address per operand, its (lane_row, lane_chunk) in the tile. Swizzled rows hold
// 8k chunks and tiles start 128-byte aligned, so moving to chunk 2 * step only flips bits 5-6 of the
// address for step % 4 and adds 128-byte groups for step / 4: one XOR with an immediate, the rest folds
// into the instruction's offset.
auto ld_address = [](unsigned lane_base, int row0, int step) -> unsigned {
  if constexpr (kSwizzle)
    return (lane_base ^ unsigned((step % 4) * 32)) + unsigned(row0 * kPitch * 16 + (step / 4) * 128);
  else
    return lane_base + unsigned(row0 * kPitch * 16 + step * 32);
};
const unsigned q_lane = q_base + offset(lane % 16, lane / 16);
const unsigned k_lane = k_base + offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
const unsigned v_lane = v_base + offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);

float acc_o[kMT][kDT][4];
float m_run[kMT][2];
float l_run[kMT][2];  // this lane's part of the row sum; the quad's parts are added at the end
#pragma unroll
for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
  for (int h = 0; h < 2; ++h) m_run[mt][h] = negative_infinity(), l_run[mt][h] = 0.f;
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.f;
}
unsigned q_frag[kQInRegs ? kMT : 1][kQInRegs ? kKS : 1][4];

for (int n = 0; n < num_n_blocks; ++n) {
  const int stage = kStages == 1 ? 0 : n % kStages;
  const unsigned k_lane_stage = k_lane + stage * kShape.kv_stage_bytes();
  const unsigned v_lane_stage = v_lane + stage * kShape.kv_stage_bytes();
  const long long n0 = first_key + static_cast<long long>(n) * kBlockN;

  cp_async_wait<0>();
  // K(n) (two stages: and V(n)) is visible, and every warp is done with tile n - 1: its buffers can refill.
  __syncthreads();
  if constexpr (kStages == 1) {
    load_tile(v_base, v_ptr, p.v_stride_seq, n0, seqlen_kv(), kBlockN);
    cp_async_commit();
  } else if (n + 1 < num_n_blocks) {
    const unsigned next_stage = ((n + 1) % 2) * kShape.kv_stage_bytes();
    const long long next0 = n0 + kBlockN;
    load_tile(k_base + next_stage, k_ptr, p.k_stride_seq, next0, seqlen_kv(), kBlockN);
    load_tile(v_base + next_stage, v_ptr, p.v_stride_seq, next0, seqlen_kv(), kBlockN);
    cp_async_commit();
  }
  if constexpr (kQInRegs) {
    if (n == 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks)
          ldmatrix_x4(q_frag[mt][ks], ld_address(q_lane, warp_row0 + mt * 16, ks));
    }
  }

  float acc_s[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
    unsigned a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][ks][e];
      } else {
        ldmatrix_x4(a[mt], ld_address(q_lane, warp_row0 + mt * 16, ks));
      }
    }
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      unsigned b[4];
      ldmatrix_x4(b, ld_address(k_lane_stage, 16 * np, ks));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_16816<T>(acc_s[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<T>(acc_s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }

  if constexpr (kStages == 1) {
    cp_async_wait<0>();
    __syncthreads();  // V(n) is visible, and every warp is done with K(n): its buffer can refill
    if (n + 1 < num_n_blocks) {
      load_tile(k_base, k_ptr, p.k_stride_seq, n0 + kBlockN, seqlen_kv(), kBlockN);
      cp_async_commit();
    }
  }

  // Scale first (or cap: the softcap's factors take q.k to the capped score in the log2 domain), then
  // mask: a negative scale must not turn a masked -inf into +inf, nor tanh take it to -1.
  // The mask is built per tile, not once at the top: hoisted, it moved ptxas's allocation (28 predicates
  // saved to registers in the mask at d = 64, measured).
  const auto mask = key_mask();
  const bool needs_mask = mask.tile_needs_mask(m0, kBlockM, n0, kBlockN);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kSoftcap)
          acc_s[mt][nt][e] = softcap_log2<false>({args.softcap_pre, args.softcap_post}, acc_s[mt][nt][e]);
        else
          acc_s[mt][nt][e] *= p.scale_log2;
      }
  if (needs_mask) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long row = m0 + warp_row0 + mt * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const long long col = n0 + nt * 8 + 2 * (lane % 4) + i;
            if (mask.hides(row, col)) acc_s[mt][nt][2 * h + i] = negative_infinity();
          }
      }
  }

  // Online softmax; each row lives in the 4 lanes of a quad.
  float alpha[kMT][2];
  bool rescale = false;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The lane's scores of row h: columns 2 * (lane % 4) + {0, 1} of each 8-column tile.
      const SoftmaxStep step = online_softmax_step<4, 2 * kNT>(
          m_run[mt][h], l_run[mt][h], [&](int j) -> float& { return acc_s[mt][j / 2][2 * h + j % 2]; });
      alpha[mt][h] = step.alpha;
      rescale |= step.max_moved;
    }
  // Once the running maxima settle, most tiles change none of them: skip the O rescale (a multiply per
  // accumulator) for the whole warp unless some row's maximum moved. Small O tiles rescale every time: the
  // vote costs more than it saves there (measured at d = 64).
  if (!kSkipRescale || __any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] *= alpha[mt][e / 2];
  }

#pragma unroll
  for (int ps = 0; ps < kPS; ++ps) {
    unsigned a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      a[mt][0] = pack2<T>(acc_s[mt][2 * ps][0], acc_s[mt][2 * ps][1]);
      a[mt][1] = pack2<T>(acc_s[mt][2 * ps][2], acc_s[mt][2 * ps][3]);
      a[mt][2] = pack2<T>(acc_s[mt][2 * ps + 1][0], acc_s[mt][2 * ps + 1][1]);
      a[mt][3] = pack2<T>(acc_s[mt][2 * ps + 1][2], acc_s[mt][2 * ps + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDT / 2; ++dp) {
      unsigned b[4];
      ldmatrix_x4_trans(b, ld_address(v_lane_stage, 16 * ps, dp));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_16816<T>(acc_o[mt][2 * dp], a[mt], b[0], b[1]);
        mma_16816<T>(acc_o[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}
cp_async_wait<0>();
__syncthreads();  // every warp is done with Q and the K/V buffers: the Q tile takes O for coalesced stores

unsigned char* o_tile = smem_raw;
#pragma unroll
for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = row_lanes_sum<4>(l_run[mt][h]);
    const float inv_l = inverse_row_sum(l);
    const int r = warp_row0 + mt * 16 + lane / 4 + 8 * h;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const unsigned packed = pack2<T>(acc_o[mt][dt][2 * h] * inv_l, acc_o[mt][dt][2 * h + 1] * inv_l);
      *reinterpret_cast<unsigned*>(o_tile + offset(r, dt) + 4 * (lane % 4)) = packed;
    }
    if (lse_ptr && lane % 4 == 0 && m0 + r < seqlen_q()) lse_ptr[m0 + r] = row_lse(m_run[mt][h], l);
  }
__syncthreads();
store_rows(o_tile);
