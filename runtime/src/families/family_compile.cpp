#include "families/family_compile.hpp"

#include "cache/artifact_cache.hpp"
#include "compile/kernel_sources.hpp"
#include "flashrtc/arch.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "support/hashing.hpp"

namespace flashrtc {

namespace {

// The name of a template argument in meta.json's kernel fields (what `flashrtc cache ls` reads).
const char* field_name(TemplateArg arg) {
  switch (arg) {
    case TemplateArg::kElementType: return "dtype";
    case TemplateArg::kHeadDim: return "head_dim";
    case TemplateArg::kBlockM: return "block_m";
    case TemplateArg::kBlockN: return "block_n";
    case TemplateArg::kWarps: return "warps";
    case TemplateArg::kStages: return "stages";
    case TemplateArg::kMask: return "mask";
    case TemplateArg::kPersistent: return "persistent";
    case TemplateArg::kVarlen: return "varlen";
    case TemplateArg::kVariants: return "variants";
  }
  return "unknown";
}

nlohmann::json field_value(TemplateArg arg, const KernelSpec& spec, int value) {
  if (arg == TemplateArg::kElementType) return std::string(to_string(spec.dtype));
  if (arg == TemplateArg::kMask) return std::string(to_string(spec.mask));
  if (arg == TemplateArg::kPersistent) return spec.persistent;
  if (arg == TemplateArg::kVarlen) return true;
  if (arg == TemplateArg::kVariants) return spec.variants ? variants_text(spec.variants) : std::string("none");
  return value;
}

}  // namespace

namespace detail {

void check_arch(const std::string& arch) {
  if (!is_supported_arch(arch)) {
    // Quoted in full only when short: the value may be any text a user typed.
    const std::string shown = arch.size() <= 16 ? arch : arch.substr(0, 16) + "...";
    throw Error(ErrorCode::kInvalidArgument, "arch=" + shown + ": must be one of " + supported_archs_text());
  }
}

CompileRequest family_compile_request(const KernelSpec& spec, const std::string& arch) {
  check_arch(arch);
  const KernelFamily& family = family_of(spec);
  if (!family.serves_head_dim(spec.head_dim))
    throw Error(ErrorCode::kInvalidArgument, "head_dim=" + std::to_string(spec.head_dim) + ": the " + family.name +
                                                 " family takes multiples of " + std::to_string(family.head_dim_multiple) +
                                                 " from " + std::to_string(family.min_head_dim) + " to " +
                                                 std::to_string(family.max_head_dim));
  if (!family.serves_dtype(spec.dtype))
    throw Error(ErrorCode::kInvalidArgument,
                "dtype=" + std::string(to_string(spec.dtype)) + ": the " + family.name + " family does not take it");
  if (spec.variants & ~family.serves_variants)
    throw Error(ErrorCode::kInvalidArgument, "variants: the " + family.name + " family does not compute " +
                                                 variants_text(spec.variants & ~family.serves_variants));
  // Every GPU's limit is checked at launch; here only whether any GPU could hold the tile.
  const std::string reason = family.check_config(spec.dtype, spec.head_dim, spec.tile, kSmemBytesSm90);
  if (!reason.empty()) throw Error(ErrorCode::kInvalidArgument, "tile config: " + reason);

  KernelSpec bound = spec;
  bound.family = &family;
  // The translation unit includes only its family's header: fewer bytes to parse per compile. Its bytes
  // never change; specializations are name expressions.
  const std::string program = "#include \"" + family.header + "\"\n";
  const KernelSourceSet& sources = kernel_sources();
  CompileRequest request;
  request.nvrtc.program_name = "flashrtc_" + family.name + ".cu";
  request.nvrtc.source = program;
  request.nvrtc.headers = sources.files;
  if (!family.header_source.empty()) request.nvrtc.headers.emplace_back(family.header, family.header_source);
  request.nvrtc.name_expression = family.name_expression(bound);
  // -Xptxas -v puts the resource report into the log; -lineinfo lets profilers map SASS to the .cuh lines.
  request.nvrtc.options = {"--gpu-architecture=" + arch, "--std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo"};
  request.inputs.source_hash = sources.hash + digest_hex(program) + digest_hex(family.header_source);
  request.inputs.name_expression = request.nvrtc.name_expression;
  request.inputs.options = join_options(request.nvrtc.options);
  request.inputs.arch = arch;
  request.inputs.nvrtc_version = nvrtc_version_string();

  int values[kMaxTemplateArgs];
  family.template_arg_values(bound, values);
  request.description = {{"family", family.name}, {"operation", to_string(family.operation)}};
  for (std::size_t i = 0; i < family.template_args.size(); ++i)
    request.description[field_name(family.template_args[i])] = field_value(family.template_args[i], bound, values[i]);
  request.description["smem_bytes"] = family.smem_bytes(bound);
  return request;
}

}  // namespace detail

std::string kernel_name_expression(const KernelSpec& spec) { return family_of(spec).name_expression(spec); }

CompiledKernelInfo compile_kernel(const KernelSpec& spec, const std::string& arch) {
  detail::check_arch(arch);
  KernelSpec bound = spec;
  if (!bound.family) {
    if (!is_supported_head_dim(spec.head_dim))
      throw Error(ErrorCode::kInvalidArgument,
                  "head_dim=" + std::to_string(spec.head_dim) + ": must be a multiple of 8 from 8 to 256");
    // The best family for arch that can build the tile (as for a call with an explicit tile); none: the
    // best family, whose check names what is wrong.
    bound.family =
        select_kernel_family(Operation::kForward, spec.dtype, spec.head_dim, arch, kAllCallTraits, spec.variants)
            .family;
    for (const KernelFamily* family :
         serving_kernel_families(Operation::kForward, spec.dtype, spec.head_dim, arch, kAllCallTraits, spec.variants))
      if (family->check_config(spec.dtype, spec.head_dim, spec.tile, kSmemBytesSm90).empty()) {
        bound.family = family;
        break;
      }
  }
  const auto request = detail::family_compile_request(bound, arch);
  CacheSource source = CacheSource::kCompiled;
  const auto artifact = detail::get_artifact(request, &source);
  CompiledKernelInfo info;
  info.key = artifact->key;
  info.name_expression = request.inputs.name_expression;
  info.lowered_name = artifact->lowered_name;
  info.arch = arch;
  info.resources = artifact->resources;
  info.compile_ms = artifact->compile_ms;
  info.source = source;
  info.entry_dir = artifact->entry_dir;
  return info;
}

}  // namespace flashrtc
