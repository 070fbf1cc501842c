#include "flashrtc/attention.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "context.hpp"
#include "driver_api.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/forward_params.cuh"
#include "forward_kernel.hpp"
#include "kernel_cache.hpp"
#include "kernel_sources.hpp"
#include "resolution_internal.hpp"

namespace flashrtc {

TensorRef TensorRef::bnhd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {data, seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
}

TensorRef TensorRef::bhnd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {data, heads * seqlen * head_dim, head_dim, seqlen * head_dim, 1};
}

double attention_flops(const ForwardParams& p) {
  const double flops = 4.0 * p.batch * p.heads_q * p.seqlen_q * p.seqlen_kv * p.head_dim;
  return p.mask == MaskKind::kNone ? flops : flops / 2;
}

namespace {

// The tile comes from config resolution (explicit, FLASHRTC_CONFIG, tuning database, default table).
ForwardSpec spec_for(const ForwardParams& p, const DeviceTarget& target) {
  ForwardSpec spec;
  spec.dtype = p.dtype;
  spec.head_dim = static_cast<int>(p.head_dim);
  spec.mask = p.mask;
  spec.tile = detail::resolve_tile(config_query(p), target);
  return spec;
}

// The launch path's own map: (context, spec, arch, sources) -> loaded kernel, so that a call that finds its
// kernel costs one lookup instead of building and hashing a compile request.
struct LaunchKey {
  CUcontext context;
  int dtype, head_dim, mask, block_m, block_n, warps, stages;
  const void* sources;  // the KernelSourceSet in use: FLASHRTC_KERNEL_DIR may change with set_runtime_config
  bool operator<(const LaunchKey& o) const {
    return std::tie(context, dtype, head_dim, mask, block_m, block_n, warps, stages, sources) <
           std::tie(o.context, o.dtype, o.head_dim, o.mask, o.block_m, o.block_n, o.warps, o.stages, o.sources);
  }
};

const detail::LoadedKernel& kernel_for(const detail::ContextInfo& context, const ForwardSpec& spec) {
  static std::mutex mutex;
  static auto* launchable = new std::map<LaunchKey, const detail::LoadedKernel*>;  // leaked, like the modules
  const LaunchKey key{context.context,  static_cast<int>(spec.dtype), spec.head_dim,     static_cast<int>(spec.mask),
                      spec.tile.block_m, spec.tile.block_n,          spec.tile.warps,    spec.tile.stages,
                      &detail::kernel_sources()};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = launchable->find(key);
    if (it != launchable->end()) return *it->second;
  }
  const std::string arch = runtime_config().arch_override.empty()
                               ? detail::arch_for(context.cc_major, context.cc_minor)
                               : runtime_config().arch_override;
  const std::size_t smem = forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile);
  if (smem > static_cast<std::size_t>(context.smem_per_block_optin_bytes))
    throw Error(ErrorCode::kUnsupported, "tile " + to_string(spec.tile) + " needs " + std::to_string(smem) +
                                             " bytes of shared memory at d=" + std::to_string(spec.head_dim) +
                                             "; this GPU allows " + std::to_string(context.smem_per_block_optin_bytes));
  const auto request = detail::forward_compile_request(spec, arch);
  const detail::LoadedKernel& loaded = detail::get_loaded_kernel(context.context, request, static_cast<int>(smem));
  std::lock_guard<std::mutex> lock(mutex);
  launchable->emplace(key, &loaded);
  return loaded;
}

// gridDim.x holds every (batch, head, query block): at most 2^31 - 1 blocks.
std::int64_t grid_blocks(const ForwardParams& p, const ForwardSpec& spec) {
  const std::int64_t num_m_blocks = (p.seqlen_q + spec.tile.block_m - 1) / spec.tile.block_m;
  const __int128 blocks = static_cast<__int128>(num_m_blocks) * p.batch * p.heads_q;
  if (blocks > std::numeric_limits<std::int32_t>::max())
    throw Error(ErrorCode::kInvalidArgument,
                "batch * heads_q * ceil(seqlen_q / block_m) = " + std::to_string(static_cast<long double>(blocks)) +
                    " thread blocks: index overflow (the grid allows 2^31 - 1)");
  return static_cast<std::int64_t>(blocks);
}

}  // namespace

ForwardSpec select_forward_spec(const ForwardParams& params) {
  validate_forward(params);
  const ForwardSpec spec = spec_for(params, current_device_target().value_or(no_device_target()));
  grid_blocks(params, spec);
  return spec;
}

void attention_forward(const ForwardParams& p) {
  validate_forward(p);
  const detail::ContextInfo& context = detail::current_context();
  const ForwardSpec spec = spec_for(p, detail::device_target_for(context));
  const std::int64_t blocks = grid_blocks(p, spec);
  if (context.cc_major < 8)
    throw Error(ErrorCode::kUnsupported, "compute capability " + std::to_string(context.cc_major) + "." +
                                             std::to_string(context.cc_minor) + ": flashrtc kernels need sm_80 or newer");
  const detail::LoadedKernel& kernel = kernel_for(context, spec);

  kernel::ForwardParams args{};
  args.q = p.q.data;
  args.k = p.k.data;
  args.v = p.v.data;
  args.o = const_cast<void*>(p.o.data);
  args.lse = p.lse;
  args.q_stride_batch = p.q.stride_batch, args.q_stride_seq = p.q.stride_seq, args.q_stride_head = p.q.stride_head;
  args.k_stride_batch = p.k.stride_batch, args.k_stride_seq = p.k.stride_seq, args.k_stride_head = p.k.stride_head;
  args.v_stride_batch = p.v.stride_batch, args.v_stride_seq = p.v.stride_seq, args.v_stride_head = p.v.stride_head;
  args.o_stride_batch = p.o.stride_batch, args.o_stride_seq = p.o.stride_seq, args.o_stride_head = p.o.stride_head;
  args.seqlen_q = static_cast<int>(p.seqlen_q);
  args.seqlen_kv = static_cast<int>(p.seqlen_kv);
  args.heads_q = static_cast<int>(p.heads_q);
  args.kv_group = static_cast<int>(p.heads_q / p.heads_kv);
  args.num_m_blocks = static_cast<int>(blocks / (p.batch * p.heads_q));
  const double scale = p.softmax_scale ? *p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  args.scale_log2 = static_cast<float>(scale * 1.4426950408889634);

  void* kernel_args[] = {&args};
  const unsigned smem = static_cast<unsigned>(forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile));
  FLASHRTC_CU_CHECK(cuLaunchKernel, kernel.function, static_cast<unsigned>(blocks), 1, 1,
                    static_cast<unsigned>(detail::forward_block_threads(spec)), 1, 1, smem,
                    static_cast<CUstream>(p.stream), kernel_args, nullptr);
}

}  // namespace flashrtc
