// parse_ptxas_report against real NVRTC logs (ptxas -v through NVRTC needs no GPU) and synthetic ones.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "nvrtc_compiler.hpp"
#include "ptxas_report.hpp"

using flashrtc::ErrorCode;
using flashrtc::ResourceReport;
using flashrtc::detail::NvrtcInput;
using flashrtc::detail::NvrtcOutput;
using flashrtc::detail::parse_ptxas_report;

namespace {

// Three small templates:
// - accumulate<N>: N independent accumulators kept live across a loop. At N=128 and -maxrregcount=32 they
//   cannot fit in registers, so ptxas spills; at N=8 they fit easily.
// - local_table: a 64-float array written and read at run-time indices, which ptxas must place in local
//   memory (a stack frame) although nothing spills.
constexpr const char* kProgram = R"(
template <int N>
__global__ void accumulate(const float* in, float* out, int iterations) {
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = in[threadIdx.x + i * 32];
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i + 1) % N] + in[it + i];
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) sum += acc[i] * float(i + 1);
  out[threadIdx.x] = sum;
}

template <int N>
__global__ void local_table(const float* in, const int* index, float* out) {
  float table[N];
#pragma unroll 1
  for (int i = 0; i < N; ++i) table[(i * index[0]) & (N - 1)] = in[i * 7 + threadIdx.x];
  out[threadIdx.x] = table[index[threadIdx.x] & (N - 1)];
}
)";

NvrtcOutput compile_tiny(const std::string& name_expression, std::vector<std::string> extra_options,
                         bool verbose = true) {
  NvrtcInput input;
  input.program_name = "ptxas_probe.cu";
  input.source = kProgram;
  input.name_expression = name_expression;
  input.options = {"--gpu-architecture=sm_80", "--std=c++17"};
  if (verbose) input.options.push_back("-Xptxas=-v");
  for (auto& option : extra_options) input.options.push_back(std::move(option));
  return flashrtc::detail::nvrtc_compile(input, "test-" + name_expression);
}

}  // namespace

TEST_CASE("ptxas report: a kernel forced under 32 registers spills, the same kernel with room does not") {
  const NvrtcOutput spilling = compile_tiny("accumulate<128>", {"-maxrregcount=32"});
  INFO("log:\n" << spilling.log);
  REQUIRE_FALSE(spilling.lowered_name.empty());
  const ResourceReport tight = parse_ptxas_report(spilling.log, spilling.lowered_name);
  CHECK(tight.spills());
  CHECK(tight.spill_store_bytes > 0);
  CHECK(tight.spill_load_bytes > 0);
  CHECK(tight.registers > 0);
  CHECK(tight.registers <= 32);
  // Spilled values live in the stack frame.
  CHECK(tight.stack_frame_bytes > 0);

  const NvrtcOutput roomy_out = compile_tiny("accumulate<8>", {});
  INFO("log:\n" << roomy_out.log);
  const ResourceReport roomy = parse_ptxas_report(roomy_out.log, roomy_out.lowered_name);
  CHECK_FALSE(roomy.spills());
  CHECK(roomy.spill_store_bytes == 0);
  CHECK(roomy.spill_load_bytes == 0);
  CHECK(roomy.stack_frame_bytes == 0);
  CHECK(roomy.registers > 0);
  CHECK(roomy.registers <= 255);
}

TEST_CASE("ptxas report: a dynamically indexed local array has a stack frame but no spills") {
  const NvrtcOutput out = compile_tiny("local_table<64>", {});
  INFO("log:\n" << out.log);
  const ResourceReport report = parse_ptxas_report(out.log, out.lowered_name);
  CHECK(report.registers > 0);
  CHECK_FALSE(report.spills());
  // 64 floats = 256 bytes, placed in local memory because the index is only known at run time.
  CHECK(report.stack_frame_bytes >= 256);
}

TEST_CASE("ptxas report: a real log of two kernels yields each kernel's own numbers") {
  // Two instantiations in one program: NVRTC compiles both name expressions into one log.
  NvrtcInput input;
  input.program_name = "ptxas_probe.cu";
  input.source =
      std::string(kProgram) + "template __global__ void accumulate<8>(const float*, float*, int);\n";
  input.name_expression = "local_table<64>";
  input.options = {"--gpu-architecture=sm_80", "--std=c++17", "-Xptxas=-v"};
  const NvrtcOutput out = flashrtc::detail::nvrtc_compile(input, "test-two-kernels");
  INFO("log:\n" << out.log);
  const ResourceReport table = parse_ptxas_report(out.log, out.lowered_name);
  CHECK(table.stack_frame_bytes >= 256);
  // accumulate<int=8>(const float*, float*, int), Itanium-mangled.
  const ResourceReport acc = parse_ptxas_report(out.log, "_Z10accumulateILi8EEvPKfPfi");
  CHECK(acc.stack_frame_bytes == 0);
  CHECK(acc.registers > 0);
}

TEST_CASE("ptxas report: a synthetic multi-kernel log picks the requested entry") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z5firstPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z5firstPf\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function '_Z6secondPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z6secondPf\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 2 barriers, 16 bytes smem, 512 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function '_Z5thirdPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z5thirdPf\n"
      "    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, 360 bytes cmem[0]\n";

  const ResourceReport first = parse_ptxas_report(log, "_Z5firstPf");
  CHECK(first.registers == 40);
  CHECK(first.stack_frame_bytes == 8);
  CHECK(first.spill_store_bytes == 4);
  CHECK(first.spill_load_bytes == 12);
  CHECK(first.barriers == 1);
  CHECK(first.static_smem_bytes == 128);
  CHECK(first.spills());

  const ResourceReport second = parse_ptxas_report(log, "_Z6secondPf");
  CHECK(second.registers == 168);
  CHECK(second.stack_frame_bytes == 0);
  CHECK(second.spill_store_bytes == 0);
  CHECK(second.spill_load_bytes == 0);
  CHECK(second.barriers == 2);
  CHECK(second.static_smem_bytes == 16);
  CHECK_FALSE(second.spills());

  const ResourceReport third = parse_ptxas_report(log, "_Z5thirdPf");
  CHECK(third.registers == 255);
  CHECK(third.stack_frame_bytes == 32);
  CHECK_FALSE(third.spills());
  CHECK(third.barriers == 0);
  CHECK(third.static_smem_bytes == 0);
}

TEST_CASE("ptxas report: a kernel whose name contains another kernel's name does not borrow its report") {
  // extern "C" kernels are not mangled, so one name can be a prefix of another ("attn" and "attn_causal").
  const std::string log =
      "ptxas info    : Compiling entry function 'attn' for 'sm_80'\n"
      "ptxas info    : Function properties for attn\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 64 registers, 380 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'attn_causal' for 'sm_80'\n"
      "ptxas info    : Function properties for attn_causal\n"
      "    24 bytes stack frame, 24 bytes spill stores, 24 bytes spill loads\n"
      "ptxas info    : Used 255 registers, 380 bytes cmem[0]\n";
  const ResourceReport plain = parse_ptxas_report(log, "attn");
  CHECK(plain.registers == 64);
  CHECK_FALSE(plain.spills());
  const ResourceReport causal = parse_ptxas_report(log, "attn_causal");
  CHECK(causal.registers == 255);
  CHECK(causal.spills());
  // A suffix of a name is not that name either.
  CHECK_THROWS_AS(parse_ptxas_report(log, "causal"), flashrtc::Error);
}

TEST_CASE("ptxas report: a log without a report for the kernel throws") {
  SUBCASE("empty log") {
    try {
      parse_ptxas_report("", "_Z5firstPf");
      FAIL("no exception");
    } catch (const flashrtc::Error& e) {
      CHECK(e.code() == ErrorCode::kInternal);
      CHECK(std::string(e.what()).find("_Z5firstPf") != std::string::npos);
    }
  }
  SUBCASE("a log that reports only other kernels") {
    const std::string log =
        "ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z5otherPf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 12 registers, 380 bytes cmem[0]\n";
    CHECK_THROWS_AS(parse_ptxas_report(log, "_Z5firstPf"), flashrtc::Error);
  }
  SUBCASE("a report cut off before the register line") {
    const std::string log =
        "ptxas info    : Compiling entry function '_Z5firstPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z5firstPf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    CHECK_THROWS_AS(parse_ptxas_report(log, "_Z5firstPf"), flashrtc::Error);
  }
  SUBCASE("a real compile without -Xptxas=-v") {
    const NvrtcOutput out = compile_tiny("accumulate<8>", {}, /*verbose=*/false);
    try {
      parse_ptxas_report(out.log, out.lowered_name);
      FAIL("no exception for log:\n" << out.log);
    } catch (const flashrtc::Error& e) {
      CHECK(e.code() == ErrorCode::kInternal);
    }
  }
}
