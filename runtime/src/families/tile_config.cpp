// The dtype-only tile functions: each asks the portable family of the dtype (kernel_family.hpp).
#include "flashrtc/tile_config.hpp"

#include "flashrtc/kernel_family.hpp"

namespace flashrtc {

namespace {

const KernelFamily& portable(DType dtype, int head_dim) {
  return portable_family(Operation::kForward, dtype, is_supported_head_dim(head_dim) ? head_dim : 64);
}

}  // namespace

std::size_t forward_smem_bytes(DType dtype, int head_dim, const TileConfig& config) {
  const KernelFamily& family = portable(dtype, head_dim);
  return family.smem_bytes({dtype, head_dim, MaskKind::kNone, config, &family});
}

std::string check_forward_config(DType dtype, int head_dim, const TileConfig& config, std::size_t smem_limit_bytes) {
  return portable(dtype, head_dim).check_config(dtype, head_dim, config, smem_limit_bytes);
}

std::vector<TileConfig> forward_config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes) {
  return portable(dtype, head_dim).config_space(dtype, head_dim, smem_limit_bytes);
}

TileConfig default_forward_config(DType dtype, int head_dim, MaskKind mask, std::size_t smem_limit_bytes,
                                  std::int64_t seqlen_kv, std::string_view arch) {
  return portable(dtype, head_dim).default_config(dtype, head_dim, mask, smem_limit_bytes, seqlen_kv, arch);
}

}  // namespace flashrtc
