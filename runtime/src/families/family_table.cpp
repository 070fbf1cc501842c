// The family table: the built-in families, the registered ones, selection by operation, dtype, head dim and
// arch, and the rules every family shares (KernelFamily's member functions).
#include <algorithm>
#include <iterator>
#include <mutex>

#include "families/builtin_families.hpp"
#include "flashrtc/arch.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile.hpp"
#include "support/settings_generation.hpp"

namespace flashrtc {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<const KernelFamily>> registered;
  // Unregistered descriptors, kept so that modules and plans resolved against them never dangle (held here
  // rather than leaked outright, so that a leak checker sees them as reachable).
  std::vector<std::shared_ptr<const KernelFamily>> retired;
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked: plans may point into it until process exit
  return *r;
}

const char* dtype_name_in_kernel(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kFloat16: return "flashrtc::half_t";
    case DType::kBFloat16: return "flashrtc::bfloat16_t";
  }
  throw Error(ErrorCode::kInvalidArgument, "dtype=" + std::to_string(static_cast<int>(dtype)) + ": unknown element type");
}

const char* mask_name_in_kernel(MaskKind mask) {
  switch (mask) {
    case MaskKind::kNone: return "flashrtc::kernel::Mask::kNone";
    case MaskKind::kCausalTopLeft: return "flashrtc::kernel::Mask::kCausalTopLeft";
    case MaskKind::kCausalBottomRight: return "flashrtc::kernel::Mask::kCausalBottomRight";
  }
  throw Error(ErrorCode::kInvalidArgument, "mask=" + std::to_string(static_cast<int>(mask)) + ": unknown mask kind");
}

// A rule's masks: empty for every mask.
bool lists_mask(const std::vector<MaskKind>& masks, MaskKind mask) {
  return masks.empty() || std::find(masks.begin(), masks.end(), mask) != masks.end();
}

// A call's key-length bucket, 0 for a length not known (<= 0), which the rules judge as long.
std::int64_t key_bucket(std::int64_t seqlen_kv) { return seqlen_kv > 0 ? seqlen_bucket(seqlen_kv) : 0; }

}  // namespace

const char* to_string(Operation op) {
  switch (op) {
    case Operation::kForward: return "forward";
    case Operation::kBackward: return "backward";
    case Operation::kBackwardPrep: return "backward-prep";
    case Operation::kBackwardDq: return "backward-dq";
    case Operation::kBackwardDqConvert: return "backward-dq-convert";
    case Operation::kDecode: return "decode";
    case Operation::kDecodeCombine: return "decode-combine";
    case Operation::kKvAppend: return "kv-append";
    case Operation::kMergeStates: return "merge-states";
    case Operation::kBackwardFused: return "backward-fused";
    case Operation::kForwardVarlen: return "forward-varlen";
    case Operation::kBackwardVarlen: return "backward-varlen";
    case Operation::kBackwardDqVarlen: return "backward-dq-varlen";
    case Operation::kBackwardFusedVarlen: return "backward-fused-varlen";
    case Operation::kBackwardDqConvertVarlen: return "backward-dq-convert-varlen";
  }
  return "unknown";
}

bool KernelFamily::serves_dtype(DType dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

bool KernelFamily::serves_mask(MaskKind mask) const {
  return std::any_of(defaults.begin(), defaults.end(), [&](const DefaultRow& row) { return row.serves_mask(mask); });
}

bool KernelFamily::serves_head_dim(int head_dim) const {
  return head_dim >= min_head_dim && head_dim <= max_head_dim && head_dim % head_dim_multiple == 0;
}

std::string KernelFamily::arch_mismatch(std::string_view arch) const {
  const std::string shown = arch.empty() ? "sm_80 (no GPU known)" : std::string(arch);
  const int cc = arch.empty() ? 80 : parse_arch_cc(arch).value_or(-1);
  if (cc < 0) return "arch " + shown + " is not of the form sm_XY";
  if (cc < min_cc) return "needs sm_" + std::to_string(min_cc) + " or newer, not " + shown;
  if (max_cc > 0 && cc > max_cc) return "runs on sm_" + std::to_string(max_cc) + " at most, not " + shown;
  if (needs_arch_specific && (arch.empty() || arch.back() != 'a'))
    return "needs the arch-specific target sm_" + std::to_string(cc) + "a, not " + shown;
  return {};
}

std::string KernelFamily::check_config(DType dtype, int head_dim, const TileConfig& config,
                                       std::size_t smem_limit_bytes) const {
  if (config.block_m < 1 || config.block_m > 256) return "block_m=" + std::to_string(config.block_m) + ": must be in [1, 256]";
  if (config.block_n < 1 || config.block_n > 256) return "block_n=" + std::to_string(config.block_n) + ": must be in [1, 256]";
  const KernelSpec spec{dtype, head_dim, MaskKind::kNone, config, this};
  if (const char* reason = invalid_reason(spec)) return std::string(reason) + " (" + to_string(config) + ")";
  const std::size_t smem = smem_bytes(spec);
  if (smem > smem_limit_bytes)
    return "shared memory: " + to_string(config) + " needs " + std::to_string(smem) + " bytes at d=" +
           std::to_string(head_dim) + ", over the " + std::to_string(smem_limit_bytes) + " available";
  return {};
}

std::vector<TileConfig> KernelFamily::config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes) const {
  std::vector<TileConfig> space;
  for (int block_m : tile_axes.block_m)
    for (int block_n : tile_axes.block_n)
      for (int warps : tile_axes.warps)
        for (int stages : tile_axes.stages) {
          const TileConfig config{block_m, block_n, warps, stages};
          if (check_config(dtype, head_dim, config, smem_limit_bytes).empty()) space.push_back(config);
        }
  return space;
}

bool KernelFamily::DefaultRow::serves_mask(MaskKind mask) const { return lists_mask(masks, mask); }

std::string KernelFamily::DefaultRow::text() const {
  std::string text = "d<=" + std::to_string(max_head_dim);
  for (std::size_t i = 0; i < masks.size(); ++i)
    text += (i ? ", " : masks.size() == 1 ? " for mask " : " for masks ") + std::string(to_string(masks[i]));
  return text;
}

const KernelFamily::DefaultRow& KernelFamily::default_row(int head_dim, MaskKind mask) const {
  const DefaultRow* last = nullptr;
  for (const DefaultRow& row : defaults) {
    if (!row.serves_mask(mask)) continue;
    if (head_dim <= row.max_head_dim) return row;
    last = &row;
  }
  if (!last)
    throw Error(ErrorCode::kInternal,
                "kernel family " + name + " has no default tiles for mask " + std::string(to_string(mask)));
  return *last;
}

std::string KernelFamily::default_row_note(int head_dim, MaskKind mask) const {
  const DefaultRow& chosen = default_row(head_dim, mask);
  std::string note;
  const auto add = [&note](const std::string& text) { note += (note.empty() ? "row " : "; row ") + text; };
  for (const DefaultRow& row : defaults) {
    if (&row == &chosen) break;
    if (head_dim <= row.max_head_dim) add(row.text() + " passed over");
  }
  if (!chosen.masks.empty()) add(chosen.text());
  return note;
}

TileConfig KernelFamily::default_config(DType dtype, int head_dim, MaskKind mask,
                                        std::size_t smem_limit_bytes, std::int64_t seqlen_kv,
                                        std::string_view arch) const {
  const DefaultRow& row = default_row(head_dim, mask);
  const std::int64_t bucket = key_bucket(seqlen_kv);
  const int cc = arch.empty() ? 80 : parse_arch_cc(arch).value_or(80);
  for (const DefaultCandidate& candidate : row.candidates)
    if (cc >= candidate.min_cc && (candidate.max_cc == 0 || cc <= candidate.max_cc) &&
        smem_limit_bytes >= candidate.min_smem_limit &&
        (bucket == 0 || bucket >= candidate.min_seqlen_kv_bucket) &&
        smem_bytes({dtype, head_dim, mask, candidate.tile, this}) <= smem_limit_bytes)
      return candidate.tile;
  // Nothing fits: the last candidate, whose shared-memory error the launch will report.
  return row.candidates.back().tile;
}

std::vector<TileConfig> KernelFamily::default_configs(DType dtype, int head_dim, MaskKind mask,
                                                      std::size_t smem_limit_bytes,
                                                      std::string_view arch) const {
  // Key lengths where the choice can change: unknown (or long), and the bucket just below each minimum.
  std::vector<std::int64_t> lengths = {0};
  for (const DefaultCandidate& candidate : default_row(head_dim, mask).candidates)
    if (candidate.min_seqlen_kv_bucket > 1) lengths.push_back(candidate.min_seqlen_kv_bucket / 2);
  std::vector<TileConfig> tiles;
  for (std::int64_t seqlen_kv : lengths) {
    const TileConfig tile = default_config(dtype, head_dim, mask, smem_limit_bytes, seqlen_kv, arch);
    if (std::find(tiles.begin(), tiles.end(), tile) == tiles.end()) tiles.push_back(tile);
  }
  return tiles;
}

std::vector<KernelSpec> KernelFamily::default_specs(DType dtype, int head_dim, MaskKind mask,
                                                    std::size_t smem_limit_bytes, std::string_view arch) const {
  std::vector<KernelSpec> specs;
  const auto add = [&](std::int64_t seqlen_kv) {
    KernelSpec spec{dtype, head_dim, mask, default_config(dtype, head_dim, mask, smem_limit_bytes, seqlen_kv, arch),
                    this};
    spec.persistent = runs_persistent(mask, seqlen_kv);
    if (std::none_of(specs.begin(), specs.end(), [&](const KernelSpec& s) {
          return s.tile == spec.tile && s.persistent == spec.persistent;
        }))
      specs.push_back(spec);
  };
  add(0);
  // Every bucket: the tile and the grid each change at a bucket boundary.
  for (std::int64_t bucket = 1; bucket <= kMaxSeqlenBucket / 2; bucket *= 2) add(bucket);
  return specs;
}

bool KernelFamily::runs_persistent(MaskKind mask, std::int64_t seqlen_kv) const {
  if (!takes(TemplateArg::kPersistent)) return false;
  const std::int64_t bucket = key_bucket(seqlen_kv);
  return std::any_of(persistent.begin(), persistent.end(), [&](const PersistentRule& rule) {
    return lists_mask(rule.masks, mask) &&
           (rule.max_seqlen_kv_bucket == 0 || (bucket > 0 && bucket <= rule.max_seqlen_kv_bucket));
  });
}

int KernelFamily::template_arg_values(const KernelSpec& spec, int (&values)[kMaxTemplateArgs]) const {
  int n = 0;
  for (TemplateArg arg : template_args) {
    switch (arg) {
      case TemplateArg::kElementType: values[n] = static_cast<int>(spec.dtype); break;
      case TemplateArg::kHeadDim: values[n] = spec.head_dim; break;
      case TemplateArg::kBlockM: values[n] = spec.tile.block_m; break;
      case TemplateArg::kBlockN: values[n] = spec.tile.block_n; break;
      case TemplateArg::kWarps: values[n] = spec.tile.warps; break;
      case TemplateArg::kStages: values[n] = spec.tile.stages; break;
      case TemplateArg::kMask: values[n] = static_cast<int>(spec.mask); break;
      case TemplateArg::kPersistent: values[n] = spec.persistent ? 1 : 0; break;
      case TemplateArg::kVarlen: values[n] = 1; break;
      case TemplateArg::kVariants: values[n] = static_cast<int>(spec.variants); break;
    }
    ++n;
  }
  return n;
}

std::string KernelFamily::name_expression(const KernelSpec& spec) const {
  std::string text = kernel_template + "<";
  for (std::size_t i = 0; i < template_args.size(); ++i) {
    if (template_args[i] == TemplateArg::kVariants && spec.variants == 0) continue;  // the plain kernel
    if (i) text += ", ";
    switch (template_args[i]) {
      case TemplateArg::kElementType: text += dtype_name_in_kernel(spec.dtype); break;
      case TemplateArg::kHeadDim: text += std::to_string(spec.head_dim); break;
      case TemplateArg::kBlockM: text += std::to_string(spec.tile.block_m); break;
      case TemplateArg::kBlockN: text += std::to_string(spec.tile.block_n); break;
      case TemplateArg::kWarps: text += std::to_string(spec.tile.warps); break;
      case TemplateArg::kStages: text += std::to_string(spec.tile.stages); break;
      case TemplateArg::kMask: text += mask_name_in_kernel(spec.mask); break;
      case TemplateArg::kPersistent: text += spec.persistent ? "true" : "false"; break;
      case TemplateArg::kVarlen: text += "true"; break;
      case TemplateArg::kVariants: text += "flashrtc::kernel::Variants(" + std::to_string(spec.variants) + "u)"; break;
    }
  }
  return text + ">";
}

std::vector<const KernelFamily*> kernel_families() {
  std::vector<const KernelFamily*> families = detail::builtin_families();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& family : r.registered) families.push_back(family.get());
  return families;
}

const KernelFamily* find_kernel_family(std::string_view name) {
  for (const KernelFamily* family : kernel_families())
    if (family->name == name) return family;
  return nullptr;
}

std::string check_config_any_family(Operation op, DType dtype, int head_dim, const TileConfig& config,
                                    std::size_t smem_limit_bytes) {
  std::string first_reason;
  for (const KernelFamily* family : kernel_families()) {
    if (family->operation != op || !family->serves_dtype(dtype) || !family->serves_head_dim(head_dim)) continue;
    const std::string reason = family->check_config(dtype, head_dim, config, smem_limit_bytes);
    if (reason.empty()) return {};
    if (first_reason.empty()) first_reason = reason;
  }
  return first_reason;
}

std::string variants_text(unsigned variants) {
  std::string text;
  const auto add = [&](unsigned bit, const char* name) {
    if (variants & bit) text += (text.empty() ? "" : ", ") + std::string(name);
  };
  add(kVariantWindow, "sliding window");
  add(kVariantSoftcap, "softcap");
  add(kVariantAlibi, "ALiBi");
  add(kVariantSinks, "attention sinks");
  return text;
}

std::string call_traits_text(unsigned missing) {
  std::string text;
  if (missing & kCallTmaStrides)
    text += "tensors a TMA map can describe (a zero stride over more than one row, head or batch, or one of "
            "2^40 bytes or more, is not)";
  return text;
}

namespace {

// Why family cannot take the call, or empty.
std::string family_mismatch(const KernelFamily& family, DType dtype, int head_dim, std::string_view arch,
                            unsigned traits, unsigned variants) {
  if (!family.serves_dtype(dtype)) return "does not take " + std::string(to_string(dtype));
  if (!family.serves_head_dim(head_dim))
    return "head_dim=" + std::to_string(head_dim) + " is outside its range (multiples of " +
           std::to_string(family.head_dim_multiple) + " from " + std::to_string(family.min_head_dim) + " to " +
           std::to_string(family.max_head_dim) + ")";
  std::string why = family.arch_mismatch(arch);
  if (why.empty() && (family.needs_traits & ~traits)) why = "needs " + call_traits_text(family.needs_traits & ~traits);
  if (why.empty() && (variants & ~family.serves_variants))
    why = "does not compute " + variants_text(variants & ~family.serves_variants);
  return why;
}

// The families of op, highest priority first (equal priorities keep table order).
std::vector<const KernelFamily*> families_by_priority(Operation op) {
  std::vector<const KernelFamily*> candidates;
  for (const KernelFamily* family : kernel_families())
    if (family->operation == op) candidates.push_back(family);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const KernelFamily* a, const KernelFamily* b) { return a->priority > b->priority; });
  return candidates;
}

}  // namespace

FamilyChoice select_kernel_family(Operation op, DType dtype, int head_dim, std::string_view arch, unsigned traits,
                                  unsigned variants) {
  FamilyChoice choice;
  for (const KernelFamily* family : families_by_priority(op)) {
    const std::string why = family_mismatch(*family, dtype, head_dim, arch, traits, variants);
    if (why.empty()) {
      choice.family = family;
      return choice;
    }
    choice.passed_over.push_back(family->name + ": " + why);
  }
  std::string reasons;
  for (const std::string& r : choice.passed_over) reasons += (reasons.empty() ? "" : "; ") + r;
  throw Error(ErrorCode::kUnsupported, std::string("no ") + to_string(op) + " kernel family serves " +
                                           std::string(to_string(dtype)) + " d=" + std::to_string(head_dim) + " on " +
                                           (arch.empty() ? std::string("sm_80") : std::string(arch)) + " (" +
                                           (reasons.empty() ? "no family of this operation" : reasons) + ")");
}

std::vector<const KernelFamily*> serving_kernel_families(Operation op, DType dtype, int head_dim,
                                                         std::string_view arch, unsigned traits,
                                                         unsigned variants) {
  std::vector<const KernelFamily*> serving;
  for (const KernelFamily* family : families_by_priority(op))
    if (family_mismatch(*family, dtype, head_dim, arch, traits, variants).empty()) serving.push_back(family);
  return serving;
}

const KernelFamily& portable_family(Operation op, DType dtype, int head_dim) {
  return *select_kernel_family(op, dtype, head_dim, "").family;
}

const KernelFamily& family_of(const KernelSpec& spec, Operation op) {
  return spec.family ? *spec.family : portable_family(op, spec.dtype, spec.head_dim);
}

FamilyRegistration::FamilyRegistration(KernelFamily family) {
  const auto missing = [&](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "kernel family '" + family.name + "': " + what + " missing");
  };
  if (family.name.empty()) missing("name");
  if (family.kernel_template.empty()) missing("kernel_template");
  if (family.header.empty()) missing("header");
  if (family.dtypes.empty()) missing("dtypes");
  for (MaskKind mask : kMaskKinds)
    if (std::none_of(family.defaults.begin(), family.defaults.end(),
                     [&](const KernelFamily::DefaultRow& row) { return row.serves_mask(mask); }))
      missing("default tiles for mask " + std::string(to_string(mask)));
  for (const KernelFamily::DefaultRow& row : family.defaults)
    if (row.candidates.empty()) missing("default tiles for " + row.text());
  if (!family.invalid_reason || !family.smem_bytes || !family.threads || !family.build_launch) missing("functions");
  if (static_cast<int>(family.template_args.size()) > kMaxTemplateArgs) missing("room for its template arguments");
  if (find_kernel_family(family.name))
    throw Error(ErrorCode::kInvalidArgument, "kernel family '" + family.name + "' is already in the table");
  family_ = std::make_shared<const KernelFamily>(std::move(family));
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.registered.push_back(family_);
  }
  detail::bump_settings_generation();  // calls resolved before may now pick this family
}

FamilyRegistration::~FamilyRegistration() {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.registered.erase(std::remove(r.registered.begin(), r.registered.end(), family_), r.registered.end());
    r.retired.push_back(std::move(family_));
  }
  detail::bump_settings_generation();
}

}  // namespace flashrtc
