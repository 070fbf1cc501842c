#include "flashrtc/tuning_space.hpp"

#include <algorithm>
#include <regex>
#include <tuple>

#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tuning_db.hpp"

namespace flashrtc {

SmLimits sm_limits(const DeviceInfo& d) {
  SmLimits limits;
  limits.max_threads_per_block = d.max_threads_per_block;
  limits.max_threads_per_sm = d.max_threads_per_sm;
  limits.max_blocks_per_sm = d.max_blocks_per_sm;
  limits.registers_per_sm = d.registers_per_sm;
  limits.smem_per_block_bytes = d.smem_per_block_optin_bytes;
  limits.smem_per_sm_bytes = d.smem_per_sm_bytes;
  limits.reserved_smem_per_block_bytes = d.reserved_smem_per_block_bytes;
  return limits;
}

SmLimits assumed_sm_limits(const std::string& arch) {
  // CUDA C++ Programming Guide, "Technical Specifications per Compute Capability".
  static const std::regex kArch(R"(sm_(\d+)(\d)[af]?)");
  std::smatch match;
  SmLimits limits;  // sm_80's, also for an arch that does not parse
  if (!std::regex_match(arch, match, kArch)) return limits;
  const int major = std::stoi(match[1]), minor = std::stoi(match[2]);
  if (major == 8 && (minor == 0 || minor == 7)) return limits;
  if (major >= 9 && major <= 11) {
    limits.smem_per_block_bytes = kSmemBytesSm90;
    limits.smem_per_sm_bytes = 228 * 1024;
    return limits;
  }
  // sm_86, sm_89, sm_120: the smaller SM of the desktop parts.
  limits.max_threads_per_sm = 1536;
  limits.max_blocks_per_sm = 16;
  limits.smem_per_block_bytes = 99 * 1024;
  limits.smem_per_sm_bytes = 100 * 1024;
  return limits;
}

int resident_blocks_per_sm(const SmLimits& limits, int threads, int registers_per_thread,
                           std::size_t smem_bytes) {
  if (threads < 1 || threads > limits.max_threads_per_block) return 0;
  if (smem_bytes > limits.smem_per_block_bytes) return 0;
  if (registers_per_thread > limits.max_registers_per_thread) return 0;
  const int warps = (threads + 31) / 32;
  int blocks = std::min(limits.max_blocks_per_sm, limits.max_threads_per_sm / (warps * 32));
  if (registers_per_thread > 0) {
    const int registers_per_warp = (registers_per_thread * 32 + 255) / 256 * 256;
    blocks = std::min(blocks, limits.registers_per_sm / registers_per_warp / warps);
  }
  const std::size_t smem_per_block = smem_bytes + limits.reserved_smem_per_block_bytes;
  blocks = std::min<std::size_t>(blocks, limits.smem_per_sm_bytes / smem_per_block);
  return std::max(blocks, 0);
}

double occupancy(const SmLimits& limits, int threads, int resident_blocks) {
  const int warps = (threads + 31) / 32;
  return limits.max_threads_per_sm > 0 ? double(resident_blocks * warps) / (limits.max_threads_per_sm / 32)
                                       : 0.0;
}

const char* to_string(TuneSpace space) {
  return space == TuneSpace::kQuick ? "quick" : "full";
}

std::optional<TuneSpace> parse_tune_space(std::string_view name) {
  if (name == "quick") return TuneSpace::kQuick;
  if (name == "full") return TuneSpace::kFull;
  return std::nullopt;
}

namespace {

bool config_less(const TileConfig& a, const TileConfig& b) {
  return std::tie(a.block_m, a.block_n, a.warps, a.stages) <
         std::tie(b.block_m, b.block_n, b.warps, b.stages);
}

bool contains(const std::vector<TileConfig>& configs, const TileConfig& c) {
  return std::find(configs.begin(), configs.end(), c) != configs.end();
}

}  // namespace

std::vector<TileConfig> tuning_candidates(DType dtype, int head_dim, std::int64_t seqlen_q,
                                          std::int64_t seqlen_kv, TuneSpace space, const SmLimits& limits) {
  return tuning_candidates(
      portable_family(Operation::kForward, dtype, is_supported_head_dim(head_dim) ? head_dim : 64), dtype,
      head_dim, seqlen_q, seqlen_kv, space, limits);
}

std::vector<TileConfig> tuning_candidates(const KernelFamily& family, DType dtype, int head_dim,
                                          std::int64_t seqlen_q, std::int64_t seqlen_kv, TuneSpace space,
                                          const SmLimits& limits, std::string_view arch) {
  const auto fits_sm = [&](const TileConfig& c) {
    const KernelSpec spec{dtype, head_dim, MaskKind::kNone, c, &family};
    return resident_blocks_per_sm(limits, family.threads(spec), 0, family.smem_bytes(spec)) >= 1;
  };
  std::vector<TileConfig> fits;
  for (const TileConfig& c : family.config_space(dtype, head_dim, limits.smem_per_block_bytes))
    if (fits_sm(c)) fits.push_back(c);
  // The default is always a candidate, so a tune never ends slower than the call without it; the family's
  // table may hold a default its enumeration does not list (e.g. a block_n of 96). The defaults of every
  // mask: the candidates do not depend on the call's mask.
  std::vector<TileConfig> fallbacks;  // each mask's default for long key sequences
  for (MaskKind mask : kMaskKinds) {
    if (!family.serves_mask(mask)) continue;
    const std::vector<TileConfig> defaults =
        family.default_configs(dtype, head_dim, mask, limits.smem_per_block_bytes, arch);
    if (!contains(fallbacks, defaults.front())) fallbacks.push_back(defaults.front());
    for (const TileConfig& c : defaults)
      if (!contains(fits, c) && fits_sm(c) &&
          family.check_config(dtype, head_dim, c, limits.smem_per_block_bytes).empty())
        fits.push_back(c);
  }
  std::sort(fits.begin(), fits.end(), config_less);
  if (space == TuneSpace::kFull || fits.empty()) return fits;

  // A tile past the bucket of its sequence length only computes padding; the smallest tile stays allowed.
  int min_m = fits.front().block_m, min_n = fits.front().block_n;
  for (const TileConfig& c : fits) min_n = std::min(min_n, c.block_n);
  const std::int64_t max_m = std::max<std::int64_t>(seqlen_bucket(seqlen_q), min_m);
  const std::int64_t max_n = std::max<std::int64_t>(seqlen_bucket(seqlen_kv), min_n);
  // Large, roughly square tiles: area reuses K/V (per query row) and Q (per key row); a side more than twice
  // the other spends that reuse on one operand only.
  const auto squarish = [](const TileConfig& c) {
    return c.block_m <= 2 * c.block_n && c.block_n <= 2 * c.block_m;
  };
  long largest_area = 0;
  for (const TileConfig& c : fits)
    if (c.block_m <= max_m && c.block_n <= max_n)
      largest_area = std::max(largest_area, long(c.block_m) * c.block_n);
  std::vector<TileConfig> quick;
  for (const TileConfig& c : fits)
    if (c.block_m <= max_m && c.block_n <= max_n && squarish(c) && 4L * c.block_m * c.block_n >= largest_area)
      quick.push_back(c);
  for (const TileConfig& fallback : fallbacks)
    if (contains(fits, fallback) && !contains(quick, fallback)) quick.push_back(fallback);
  std::sort(quick.begin(), quick.end(), config_less);
  return quick;
}

std::vector<int> warm_head_dims(const KernelFamily& family) {
  std::vector<int> dims = {32, 64, 96, 128, 256};
  for (const KernelFamily::DefaultRow& row : family.defaults) dims.push_back(row.max_head_dim);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  dims.erase(std::remove_if(dims.begin(), dims.end(), [&](int d) { return !family.serves_head_dim(d); }),
             dims.end());
  return dims;
}

std::vector<KernelSpec> warm_specs(const std::string& arch, bool with_tuned) {
  const std::size_t smem = assumed_sm_limits(arch).smem_per_block_bytes;
  std::vector<KernelSpec> specs;
  const auto add = [&specs](const KernelSpec& spec) {
    const bool known = std::any_of(specs.begin(), specs.end(), [&](const KernelSpec& s) {
      return s.family == spec.family && s.dtype == spec.dtype && s.head_dim == spec.head_dim &&
             s.mask == spec.mask && s.tile == spec.tile && s.persistent == spec.persistent;
    });
    if (!known) specs.push_back(spec);
  };
  // Every family that can run on arch, not only the preferred one: a call that a family's checks turn away
  // falls back to the next.
  // Every operation's families (the backward's kernels included); a kernel without a mask argument once.
  for (const KernelFamily* family : kernel_families()) {
    if (!family->arch_mismatch(arch).empty()) continue;
    const bool masked = family->takes(TemplateArg::kMask);
    for (DType dtype : family->dtypes)
      for (int head_dim : warm_head_dims(*family)) {
        for (MaskKind mask : kMaskKinds) {
          if ((!masked && mask != MaskKind::kNone) || !family->serves_mask(mask)) continue;
          for (const KernelSpec& spec : family->default_specs(dtype, head_dim, mask, smem, arch)) add(spec);
        }
      }
  }
  if (!with_tuned) return specs;
  const std::string nvrtc = nvrtc_version();
  for (const TuningEntry& entry : tuning_db_entries()) {
    if (entry.key.arch != arch || entry.key.nvrtc_version != nvrtc) continue;
    const KernelFamily* family = find_kernel_family(entry.key.family);
    if (!family || !family->serves_dtype(entry.key.dtype) || !family->serves_head_dim(entry.key.head_dim))
      continue;
    if (!family->check_config(entry.key.dtype, entry.key.head_dim, entry.config, smem).empty()) continue;
    KernelSpec spec{entry.key.dtype, entry.key.head_dim, entry.key.mask, entry.config, family};
    spec.persistent = family->runs_persistent(entry.key.mask, entry.key.seqlen_kv_bucket);
    add(spec);
  }
  return specs;
}

}  // namespace flashrtc
