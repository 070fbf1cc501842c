#include "forward_kernel.hpp"

#include <regex>

#include "flashrtc/error.hpp"
#include "flashrtc/forward_params.cuh"
#include "kernel_cache.hpp"
#include "hashing.hpp"
#include "kernel_sources.hpp"

namespace flashrtc {

static_assert(static_cast<int>(kernel::Mask::kNone) == static_cast<int>(MaskKind::kNone));
static_assert(static_cast<int>(kernel::Mask::kCausalTopLeft) == static_cast<int>(MaskKind::kCausalTopLeft));
static_assert(static_cast<int>(kernel::Mask::kCausalBottomRight) == static_cast<int>(MaskKind::kCausalBottomRight));

namespace {

const char* element_type_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kFloat16: return "flashrtc::half_t";
    case DType::kBFloat16: return "flashrtc::bfloat16_t";
  }
  throw Error(ErrorCode::kInvalidArgument, "dtype=" + std::to_string(static_cast<int>(dtype)) + ": unknown element type");
}

const char* mask_name(MaskKind mask) {
  switch (mask) {
    case MaskKind::kNone: return "flashrtc::kernel::Mask::kNone";
    case MaskKind::kCausalTopLeft: return "flashrtc::kernel::Mask::kCausalTopLeft";
    case MaskKind::kCausalBottomRight: return "flashrtc::kernel::Mask::kCausalBottomRight";
  }
  throw Error(ErrorCode::kInvalidArgument, "mask=" + std::to_string(static_cast<int>(mask)) + ": unknown mask kind");
}

// The translation unit NVRTC compiles for a family; its bytes never change, specializations are name
// expressions. Each includes only its own family's header: fewer bytes to parse per compile.
const char* forward_program(KernelFamily family) {
  return family == KernelFamily::kMma ? "#include \"flashrtc/attention_forward_mma.cuh\"\n"
                                      : "#include \"flashrtc/attention_forward_simt.cuh\"\n";
}

std::string kernel_template_name(KernelFamily family) {
  return std::string("attention_forward_") + to_string(family);
}

}  // namespace

std::string forward_name_expression(const ForwardSpec& spec) {
  return "flashrtc::" + kernel_template_name(forward_kernel_family(spec.dtype)) + "<" + element_type_name(spec.dtype) + ", " +
         std::to_string(spec.head_dim) + ", " + std::to_string(spec.tile.block_m) + ", " +
         std::to_string(spec.tile.block_n) + ", " + std::to_string(spec.tile.warps) + ", " +
         std::to_string(spec.tile.stages) + ", " + mask_name(spec.mask) + ">";
}

namespace detail {

int forward_block_threads(const ForwardSpec& spec) { return spec.tile.warps * 32; }

CompileRequest forward_compile_request(const ForwardSpec& spec, const std::string& arch) {
  static const std::regex kArch(R"(sm_(\d+)[af]?)");
  std::smatch match;
  if (!std::regex_match(arch, match, kArch) || std::stoi(match[1]) < 80)
    throw Error(ErrorCode::kInvalidArgument, "arch=" + arch + ": must be sm_80 or newer, e.g. sm_80, sm_90a");
  if (!is_supported_head_dim(spec.head_dim))
    throw Error(ErrorCode::kInvalidArgument,
                "head_dim=" + std::to_string(spec.head_dim) + ": must be a multiple of 8 from 8 to 256");
  const std::string reason = check_forward_config(spec.dtype, spec.head_dim, spec.tile, kSmemBytesSm90);
  if (!reason.empty()) throw Error(ErrorCode::kInvalidArgument, "tile config: " + reason);

  const KernelFamily family = forward_kernel_family(spec.dtype);
  const char* program = forward_program(family);
  const KernelSourceSet& sources = kernel_sources();
  CompileRequest request;
  request.nvrtc.program_name = "flashrtc_attention_forward.cu";
  request.nvrtc.source = program;
  request.nvrtc.headers = sources.files;
  request.nvrtc.name_expression = forward_name_expression(spec);
  // -Xptxas -v puts the resource report into the log; -lineinfo lets profilers map SASS to the .cuh lines.
  request.nvrtc.options = {"--gpu-architecture=" + arch, "--std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo"};
  request.inputs.source_hash = sources.hash + digest_hex(program);
  request.inputs.name_expression = request.nvrtc.name_expression;
  request.inputs.options = join_options(request.nvrtc.options);
  request.inputs.arch = arch;
  request.inputs.nvrtc_version = nvrtc_version_string();
  request.description = {{"family", kernel_template_name(family)},
                         {"dtype", std::string(to_string(spec.dtype))},
                         {"head_dim", spec.head_dim},
                         {"mask", std::string(to_string(spec.mask))},
                         {"block_m", spec.tile.block_m},
                         {"block_n", spec.tile.block_n},
                         {"warps", spec.tile.warps},
                         {"stages", spec.tile.stages},
                         {"smem_bytes", forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile)}};
  return request;
}

}  // namespace detail

CompiledKernelInfo compile_forward(const ForwardSpec& spec, const std::string& arch) {
  const auto request = detail::forward_compile_request(spec, arch);
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
