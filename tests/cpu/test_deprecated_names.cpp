// The names renamed to say what they serve (every operation, not the forward alone) stay for one release as
// deprecated aliases: code written against them still compiles, with a deprecation warning, and calls the
// functions of the new names.
#include <doctest/doctest.h>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/flashrtc.hpp"
#include "flashrtc/launch_shape.hpp"

using namespace flashrtc;

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

TEST_CASE("the deprecated names are the renamed functions") {
  const ForwardSpec spec{DType::kFloat32, 64, MaskKind::kCausalTopLeft, TileConfig{64, 64, 4, 1}};
  const KernelSpec& same = spec;
  CHECK(forward_name_expression(spec) == kernel_name_expression(same));

  const ConfigQuery query{DType::kBFloat16, 128, MaskKind::kNone, 4096, 4096, std::nullopt};
  const DeviceTarget target{"Test GPU", "sm_90a", kSmemBytesSm90};
  const ConfigResolution old_name = resolve_forward_config(query, target);
  const ConfigResolution new_name = resolve_config(query, target);
  CHECK(old_name.family == new_name.family);
  CHECK(old_name.config == new_name.config);
  CHECK(old_name.why == new_name.why);

  const std::vector<KernelSpec> warmed = warm_forward_specs("sm_80", false);
  CHECK(warmed.size() == warm_specs("sm_80", false).size());

  test::TempDir dir;
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const CompiledKernelInfo compiled = compile_forward(spec, "sm_80");
  CHECK(compiled.name_expression == kernel_name_expression(spec));
  CHECK(compile_kernel(spec, "sm_80").source == CacheSource::kMemory);

  // The old header still declares LaunchShape (with KernelArgs, from kernel_launch.hpp).
  LaunchShape shape;
  CHECK(shape.work_buffer_arg == -1);
}
