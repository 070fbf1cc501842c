#pragma once
/// Kernel families as data. A family is one kernel template (a `.cuh` under kernel_sources/) and everything
/// the runtime needs to know about it; the family table is the only place that knows which families exist.
/// Selection, compile, cache, config resolution, tuning, `compile --all` and the tests iterate it.
///
/// Adding a family:
///   1. write its kernel template in kernel_sources/flashrtc/<name>.cuh, with its limits as constexpr code the
///      kernel static_asserts and the host can call (see mma_forward_shape.cuh);
///   2. describe it in one KernelFamily (runtime/src/families/<name>_family.cpp): operation, dtypes, archs and
///      priority, header, kernel template, template-argument list, tile axes, default table, limits and
///      launch builder;
///   3. list it in builtin_families() (runtime/src/families/builtin_families.hpp). A family that serves an
///      arch outranks the others there by priority; where its checks fail, selection falls back to the next
///      and says why.
/// Outside the library, a program registers its own family at run time with FamilyRegistration (the kernel's
/// text in header_source), linking libflashrtc.so alone (tests/install/external_family).
/// Nothing else changes: the name expression, the cache key, meta.json's kernel fields and the launch memo
/// derive from the family's template-argument list.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/attention_variants.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_launch.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// What a family computes. Each operation has its own parameter struct (ForwardParams for kForward). The
/// backward pass is three kernels, each an operation of its own families: the pre-pass (D = rowsum(dO * O)),
/// then either the fused main kernel (dK, dV, and dQ added into an fp32 workspace) and the conversion of that
/// workspace, or (deterministic) the main kernel for dK and dV and a separate atomic-free dQ pass. Attention over a KV cache (attention_kvcache.hpp) is up to three: the append of new
/// keys into the cache, the decode attention, and the combine of its key splits; merge_states is one more.
enum class Operation : int {
  kForward = 0,
  kBackward = 1,
  kBackwardPrep = 2,
  kBackwardDq = 3,
  kBackwardDqConvert = 4,
  kDecode = 5,
  kDecodeCombine = 6,
  kKvAppend = 7,
  kMergeStates = 8,
  kBackwardFused = 9,
  kForwardVarlen = 10,     ///< the forward over packed sequences of their own lengths (varlen_params.hpp)
  kBackwardVarlen = 11,    ///< the varlen backward's main kernel (dK, dV); its pre-pass is kBackwardPrep's
  kBackwardDqVarlen = 12,  ///< the varlen backward's dQ pass
  kBackwardFusedVarlen = 13,      ///< the varlen backward's fused main kernel (dK, dV, dQ into the workspace)
  kBackwardDqConvertVarlen = 14,  ///< the conversion of its workspace into the packed d_q
};
/// "forward", "backward", "backward-prep", "backward-dq", "backward-dq-convert", "decode", "decode-combine",
/// "kv-append", "merge-states", "backward-fused", "forward-varlen", "backward-varlen", "backward-dq-varlen",
/// "backward-fused-varlen", "backward-dq-convert-varlen".
FLASHRTC_API const char* to_string(Operation op);

/// Properties of one call's tensors that some families need (a bit set, part of the call's query): a family
/// lists those it needs in KernelFamily::needs_traits, and a call without them runs on the next family.
enum CallTrait : unsigned {
  /// Every stride of q, k, v and o that indexes more than one row, head or batch is non-zero and below 2^40
  /// bytes: a TMA tensor map can describe the tensors.
  kCallTmaStrides = 1u << 0,
};
inline constexpr unsigned kAllCallTraits = kCallTmaStrides;
/// "strides a TMA tensor map can describe", for the traits in `missing`.
FLASHRTC_API std::string call_traits_text(unsigned missing);

/// One template parameter of a family's kernel; a family lists them in the kernel's order. kPersistent is a
/// bool: whether the grid is persistent (KernelFamily::persistent decides it per call). kVarlen is a bool,
/// always true: the kernel's variable-length variant (a family of a varlen Operation sharing a dense
/// family's kernel template lists it; the dense family leaves it at its default, false). kVariants is the
/// spec's VariantBit set as a flashrtc::kernel::Variants value, given only when non-zero (last in the list:
/// the kernel's plain specializations keep their name expressions, docs/variants.md).
enum class TemplateArg : int {
  kElementType,
  kHeadDim,
  kBlockM,
  kBlockN,
  kWarps,
  kStages,
  kMask,
  kPersistent,
  kVarlen,
  kVariants
};
inline constexpr int kMaxTemplateArgs = 12;

struct KernelFamily;

/// Everything that selects one kernel instantiation: the family, and the values of its template arguments.
struct KernelSpec {
  DType dtype = DType::kFloat32;
  int head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  TileConfig tile;
  /// The family whose kernel this is; null means the portable family for dtype (portable_family()).
  const KernelFamily* family = nullptr;
  /// A persistent grid (one block per SM taking tiles in turn) rather than one block per work tile: for a
  /// kernel that takes TemplateArg::kPersistent, as KernelFamily::runs_persistent decides for a call.
  bool persistent = false;
  /// The attention variants compiled in (VariantBit bits): for a kernel that takes TemplateArg::kVariants,
  /// the call's, which its family serves (KernelFamily::serves_variants); 0 elsewhere.
  unsigned variants = 0;
};

/// A resolved call, immutable: the family, its spec (tile from config resolution), the arch it is compiled
/// for, and what the family derives from them once.
struct CallPlan {
  const KernelFamily* family = nullptr;
  KernelSpec spec;  ///< spec.family == family
  std::string arch;
  std::size_t smem_bytes = 0;  ///< dynamic shared memory per block
  int threads = 0;             ///< per block
  /// The device's SM count where the plan was made for one (0: unknown). Persistent kernels size their grid
  /// by it; with 0 they launch one block per work tile.
  int multiprocessors = 0;
  /// Blocks of this kernel resident on one SM at once, from the driver's occupancy calculator where the plan
  /// was made for a device (0: unknown). The decode kernels size their key splits by it.
  int blocks_per_multiprocessor = 0;
};

/// A kernel family. Plain data plus a few functions; the runtime reads it, never copies its rules.
struct KernelFamily {
  std::string name;  ///< short and unique: "mma", "simt"; in tuning keys, cache listings and logs
  Operation operation = Operation::kForward;
  std::vector<DType> dtypes;  ///< element types it serves
  int min_cc = 80;            ///< lowest compute capability (major * 10 + minor) it runs on
  int max_cc = 0;             ///< highest one, 0 for no bound
  bool needs_arch_specific = false;  ///< compiled for the "a" target (sm_90a): wgmma, setmaxnreg
  int priority = 0;                  ///< where several families serve a call, the highest wins
  int min_head_dim = 8, max_head_dim = kMaxHeadDim, head_dim_multiple = 8;
  unsigned needs_traits = 0;  ///< CallTrait bits a call must have
  /// The VariantBit bits it computes (its kernel takes TemplateArg::kVariants); a call with others runs on
  /// the next family.
  unsigned serves_variants = 0;

  std::string header;           ///< include path under kernel_sources/, e.g. "flashrtc/attention_forward_mma.cuh"
  std::string header_source;    ///< the header's text for families registered from outside kernel_sources/
  std::string kernel_template;  ///< e.g. "flashrtc::attention_forward_mma"
  std::vector<TemplateArg> template_args;  ///< the kernel template's parameters, in order

  /// The tile space is the product of these axes, filtered by invalid_reason (what the tuner sweeps).
  struct TileAxes {
    std::vector<int> block_m, block_n, warps, stages;
  } tile_axes;

  /// Default tiles per head dim and mask: the first row that serves the call's mask and whose max_head_dim
  /// covers the call (past every row: the last that serves the mask), in it the first candidate
  /// whose arch range holds the call's arch, that fits the device's shared memory and whose key-length bucket
  /// is long enough. Every default compiles within kDefaultMaxRegisters registers and without spills for each
  /// arch it applies to; where a tile has that margin on some generations only, it is their candidate and a
  /// smaller tile follows for the others. The last candidate of a row serves where no earlier one applies.
  struct DefaultCandidate {
    TileConfig tile;
    std::size_t min_smem_limit = 0;
    /// Only for calls whose key-length bucket (seqlen_bucket(Nk)) is at least this (0: any).
    std::int64_t min_seqlen_kv_bucket = 0;
    /// Only for archs whose compute capability lies in [min_cc, max_cc] (0: no bound); no arch is judged as
    /// sm_80, as arch_mismatch does.
    int min_cc = 0, max_cc = 0;
  };
  struct DefaultRow {
    int max_head_dim = 0;
    std::vector<DefaultCandidate> candidates;
    std::string why;  ///< the measurement behind the choice
    /// The masks the row serves, empty for every mask. A row for some masks goes before the row of the same
    /// head dims that serves the others (a tile that spills only under a causal mask, say).
    std::vector<MaskKind> masks = {};

    FLASHRTC_API bool serves_mask(MaskKind mask) const;
    /// "d<=256", or "d<=256 for mask none" where the row serves some masks only.
    FLASHRTC_API std::string text() const;
  };
  std::vector<DefaultRow> defaults;

  /// For a kernel that takes TemplateArg::kPersistent: the calls that run on a persistent grid. A call does
  /// where a rule serves its mask and its key-length bucket (seqlen_bucket(Nk)) is at most the rule's bound;
  /// every other call, one block per work tile.
  struct PersistentRule {
    std::vector<MaskKind> masks;             ///< the masks it serves, empty for every mask
    std::int64_t max_seqlen_kv_bucket = 0;  ///< 0: any key length
    std::string why;                         ///< the measurement behind it
  };
  std::vector<PersistentRule> persistent;

  /// The kernel's own rule for a spec (the same constexpr code its static_assert uses): nullptr when it can be
  /// built, else which field is wrong and why.
  const char* (*invalid_reason)(const KernelSpec& spec) = nullptr;
  std::size_t (*smem_bytes)(const KernelSpec& spec) = nullptr;
  int (*threads)(const KernelSpec& spec) = nullptr;
  /// Fills the launch of one call: grid, block, cluster, shared memory and kernel parameters. op_params is the
  /// operation's parameter struct (a ForwardParams for Operation::kForward; for the backward operations the
  /// runtime's detail::BackwardLaunch, which adds the workspaces), already validated. Throws
  /// Error(kInvalidArgument) for a problem the grid cannot index.
  void (*build_launch)(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) = nullptr;

  FLASHRTC_API bool serves_dtype(DType dtype) const;
  /// Whether the kernel template has this parameter.
  bool takes(TemplateArg arg) const {
    for (TemplateArg a : template_args)
      if (a == arg) return true;
    return false;
  }
  FLASHRTC_API bool serves_head_dim(int head_dim) const;
  /// Whether some default row serves mask: the masks a family's table covers are the ones it runs (a decode
  /// family's calls never have a top-left causal mask, so its kernels refuse one).
  FLASHRTC_API bool serves_mask(MaskKind mask) const;
  /// Empty when the family can run on arch ("sm_90a"; empty means any GPU flashrtc targets, judged as sm_80),
  /// else why not.
  FLASHRTC_API std::string arch_mismatch(std::string_view arch) const;

  /// Empty when config can be built for head_dim and fits smem_limit_bytes, else the reason naming the field.
  FLASHRTC_API std::string check_config(DType dtype, int head_dim, const TileConfig& config, std::size_t smem_limit_bytes) const;
  /// Every tile of the axes that check_config accepts.
  FLASHRTC_API std::vector<TileConfig> config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes) const;
  /// The row default_config reads for head_dim and mask (see defaults). Throws Error(kInternal) when no row
  /// serves mask.
  FLASHRTC_API const DefaultRow& default_row(int head_dim, MaskKind mask) const;
  /// Where a mask restriction decides default_row, what it decided: "row d<=256 for mask none", or "row
  /// d<=256 for mask none passed over" for another mask; empty where no restriction played a part.
  FLASHRTC_API std::string default_row_note(int head_dim, MaskKind mask) const;
  /// The default tile for a call on arch ("sm_90a"; empty: judged as sm_80), see DefaultCandidate;
  /// seqlen_kv <= 0 means long or unknown.
  FLASHRTC_API TileConfig default_config(DType dtype, int head_dim, MaskKind mask, std::size_t smem_limit_bytes,
                            std::int64_t seqlen_kv = 0, std::string_view arch = {}) const;
  /// Every tile default_config can return for these arguments, whatever the key length; the long one first.
  FLASHRTC_API std::vector<TileConfig> default_configs(DType dtype, int head_dim, MaskKind mask,
                                          std::size_t smem_limit_bytes, std::string_view arch = {}) const;
  /// Every kernel a call with the default tile may run for these arguments, whatever the key length: the
  /// tiles of default_configs, each with the grids runs_persistent gives the lengths it serves; the one for
  /// long (or unknown) sequences first. What a warmed cache holds and the register margin covers.
  FLASHRTC_API std::vector<KernelSpec> default_specs(DType dtype, int head_dim, MaskKind mask,
                                                     std::size_t smem_limit_bytes, std::string_view arch = {}) const;
  /// Whether a call of mask and seqlen_kv keys runs on a persistent grid (see persistent); seqlen_kv <= 0
  /// means long or unknown. False for a kernel without TemplateArg::kPersistent.
  FLASHRTC_API bool runs_persistent(MaskKind mask, std::int64_t seqlen_kv) const;
  /// The values of template_args for spec, in order (element type and mask as their enum values).
  FLASHRTC_API int template_arg_values(const KernelSpec& spec, int (&values)[kMaxTemplateArgs]) const;
  /// "flashrtc::attention_forward_mma<flashrtc::bfloat16_t, 128, 128, 64, 4, 2, flashrtc::kernel::Mask::kNone>".
  FLASHRTC_API std::string name_expression(const KernelSpec& spec) const;
};

/// Registers per thread a default tile may use with the NVRTC flashrtc is built against: 7 below ptxas's 255.
/// Two builds of one NVRTC version allocate a few registers differently (the GPU machine's spilled 36 bytes
/// of a default this build fit in 254 registers), so a default at 254 is one compiler patch from spilling.
/// tests/cpu/test_default_margin.cpp holds every default of every family to it on sm_80, sm_90a, sm_100 and
/// sm_120; `flashrtc compile --all` marks the defaults over it.
inline constexpr int kDefaultMaxRegisters = 248;

/// Every family in the table (built-in first, then registered ones), in table order.
FLASHRTC_API std::vector<const KernelFamily*> kernel_families();
/// The family named name, or null.
FLASHRTC_API const KernelFamily* find_kernel_family(std::string_view name);
/// Empty when some family of op that serves dtype and head_dim (on any arch) can build config within
/// smem_limit_bytes: an explicit tile runs on the best family that builds it. Else the first such family's
/// reason, naming the field.
FLASHRTC_API std::string check_config_any_family(Operation op, DType dtype, int head_dim, const TileConfig& config,
                                                 std::size_t smem_limit_bytes);

/// "sliding window, softcap" for the VariantBit bits in variants.
FLASHRTC_API std::string variants_text(unsigned variants);

/// The family a call runs on, and why each better-ranked family was passed over.
struct FamilyChoice {
  const KernelFamily* family = nullptr;
  std::vector<std::string> passed_over;  ///< "mma-hopper: needs sm_90a, not sm_80"
};
/// The highest-priority family of op that serves dtype and head_dim on arch (empty: judged as sm_80) for a
/// call with these CallTrait bits (all of them: a query without tensors) and these VariantBit bits (all of
/// them served). Throws Error(kUnsupported) listing every family's reason when none does.
FLASHRTC_API FamilyChoice select_kernel_family(Operation op, DType dtype, int head_dim, std::string_view arch,
                                               unsigned traits = kAllCallTraits, unsigned variants = 0);
/// Every family select_kernel_family could return for these arguments, best first (empty when none serves).
FLASHRTC_API std::vector<const KernelFamily*> serving_kernel_families(Operation op, DType dtype, int head_dim,
                                                                       std::string_view arch,
                                                                       unsigned traits = kAllCallTraits,
                                                                       unsigned variants = 0);
/// The family select_kernel_family picks on sm_80: what every GPU flashrtc targets runs.
FLASHRTC_API const KernelFamily& portable_family(Operation op, DType dtype, int head_dim = 64);
/// spec.family, or the portable family for spec.dtype when it is null.
FLASHRTC_API const KernelFamily& family_of(const KernelSpec& spec, Operation op = Operation::kForward);

/// Adds a family to the table for as long as the returned handle lives (extensions, tests). Throws
/// Error(kInvalidArgument) for a family without a name, template, header or functions, or a name in use.
/// Call it while no other thread is inside flashrtc; calls resolved earlier keep their plans.
class FamilyRegistration {
 public:
  FLASHRTC_API explicit FamilyRegistration(KernelFamily family);
  FLASHRTC_API ~FamilyRegistration();
  FamilyRegistration(const FamilyRegistration&) = delete;
  FamilyRegistration& operator=(const FamilyRegistration&) = delete;
  const KernelFamily& family() const { return *family_; }

 private:
  std::shared_ptr<const KernelFamily> family_;
};

}  // namespace flashrtc
