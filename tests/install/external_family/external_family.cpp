// Registers a toy family (its kernel source given as argv[1]) and goes through what the table does with a
// family: selection, config resolution, the tile space and defaults, name expressions and compiling for
// sm_90a (NVRTC needs no GPU). Every KernelFamily member function an extension may call is called once, so a
// missing export fails the link. Prints "external family: ok" and exits 0, or names the failed check.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "flashrtc/flashrtc.hpp"

using namespace flashrtc;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

std::string read_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

KernelFamily toy_family(const std::string& source) {
  KernelFamily f;
  f.name = "external-copy-v";
  f.operation = Operation::kForward;
  f.dtypes = {DType::kFloat32};
  f.min_cc = 90;
  f.needs_arch_specific = true;
  f.priority = 100;
  f.max_head_dim = 64;
  f.header = "flashrtc_test/toy_copy_v.cuh";
  f.header_source = source;
  f.kernel_template = "flashrtc_test::copy_v";
  f.template_args = {TemplateArg::kElementType, TemplateArg::kHeadDim, TemplateArg::kBlockM, TemplateArg::kWarps};
  f.tile_axes = {{16, 32, 64}, {16}, {1, 2, 4}, {1}};
  f.defaults = {{64, {{{32, 16, 2, 1}}}, "toy"}};
  f.invalid_reason = [](const KernelSpec& s) -> const char* {
    if (s.tile.warps != 1 && s.tile.warps != 2 && s.tile.warps != 4) return "warps: must be 1, 2 or 4";
    if (s.tile.block_m % s.tile.warps != 0) return "block_m: must be a multiple of warps";
    if (s.tile.stages != 1) return "stages: must be 1";
    return nullptr;
  };
  f.smem_bytes = [](const KernelSpec&) { return std::size_t{0}; };
  f.threads = [](const KernelSpec& s) { return s.tile.warps * 32; };
  f.build_launch = [](const CallPlan& plan, const void*, LaunchShape& shape, KernelArgs& args) {
    shape.block[0] = static_cast<unsigned>(plan.threads);
    args.push(0);
  };
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: external_family <toy_copy_v.cuh>\n");
    return 2;
  }
  FamilyRegistration registration(toy_family(read_text(argv[1])));
  const KernelFamily& toy = registration.family();
  check(find_kernel_family("external-copy-v") == &toy, "find_kernel_family");
  check(select_kernel_family(Operation::kForward, DType::kFloat32, 64, "sm_90a").family == &toy,
        "select_kernel_family picks it on sm_90a");
  check(!toy.arch_mismatch("sm_80").empty() && toy.arch_mismatch("sm_90a").empty(), "arch_mismatch");
  check(toy.serves_dtype(DType::kFloat32) && toy.serves_head_dim(64) && toy.takes(TemplateArg::kWarps),
        "serves_dtype, serves_head_dim, takes");
  check(toy.check_config(DType::kFloat32, 64, {32, 16, 3, 1}, kSmemBytesSm90).find("warps") != std::string::npos,
        "check_config names the field");
  check(toy.config_space(DType::kFloat32, 64, kSmemBytesSm90).size() == 9, "config_space");
  check(toy.default_row(64, MaskKind::kNone).serves_mask(MaskKind::kNone) &&
            !toy.default_row(64, MaskKind::kNone).text().empty() && toy.default_row_note(64, MaskKind::kNone).empty(),
        "default_row, serves_mask, text, default_row_note");
  check(toy.default_config(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90, 0, "sm_90a") == TileConfig{32, 16, 2, 1},
        "default_config");
  check(toy.default_configs(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90, "sm_90a").size() == 1,
        "default_configs");
  const std::vector<KernelSpec> specs = toy.default_specs(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90, "sm_90a");
  check(specs.size() == 1 && !toy.runs_persistent(MaskKind::kNone, 4096), "default_specs, runs_persistent");
  int values[kMaxTemplateArgs];
  check(toy.template_arg_values(specs.at(0), values) == 4 && values[1] == 64, "template_arg_values");
  check(toy.name_expression(specs.at(0)) == "flashrtc_test::copy_v<float, 64, 32, 2>", "name_expression");
  check(kernel_name_expression(specs.at(0)) == toy.name_expression(specs.at(0)), "kernel_name_expression");

  const ConfigResolution resolution =
      resolve_config({DType::kFloat32, 64, MaskKind::kNone, 4096, 4096, std::nullopt}, {"Some GPU", "sm_90a", kSmemBytesSm90});
  check(resolution.family == &toy && resolution.config == TileConfig{32, 16, 2, 1}, "resolve_config");

  const CompiledKernelInfo compiled = compile_kernel(specs.at(0), "sm_90a");
  check(compiled.arch == "sm_90a" && compiled.resources.registers > 0 && !compiled.resources.spills(),
        "compile_kernel for sm_90a");
  if (failures) return 1;
  std::printf("external family: ok (compiled %s: %d registers)\n", compiled.name_expression.c_str(),
              compiled.resources.registers);
  return 0;
}
