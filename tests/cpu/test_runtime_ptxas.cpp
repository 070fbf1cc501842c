// parse_ptxas_report against real NVRTC logs (ptxas -v through NVRTC needs no GPU) and synthetic ones.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "compile/nvrtc_compiler.hpp"
#include "compile/ptxas_report.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"

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

namespace {

// gemm<kTouch>: two wgmma.mma_async into one accumulator. With kTouch an ordinary add writes an accumulator
// between them, so ptxas cannot keep the pair in flight and serializes them (advisory C7511 with 13.0).
constexpr const char* kWgmmaProgram = R"(
#define ACC32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),       \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),     \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
__device__ __forceinline__ void mma(float (&d)[32], unsigned long long desc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
               "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %32, p,"
               " 1, 1, 0, 0;\n}\n"
               : ACC32(d) : "l"(desc));
}
template <bool kTouch>
__global__ void __launch_bounds__(128) gemm(float* out) {
  __shared__ alignas(128) char smem[8192];
  float acc[32];
  for (int j = 0; j < 32; ++j) acc[j] = out[j];
  const unsigned long long desc = (reinterpret_cast<unsigned long long>(smem) >> 4) & 0x3FFF;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma(acc, desc);
  if (kTouch) acc[0] += 1.f;
  mma(acc, desc + 2);
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int j = 0; j < 32; ++j) out[threadIdx.x * 32 + j] = acc[j];
}
template __global__ void gemm<false>(float*);
)";

NvrtcOutput compile_wgmma(const std::string& name_expression) {
  NvrtcInput input;
  input.program_name = "wgmma_probe.cu";
  input.source = kWgmmaProgram;
  input.name_expression = name_expression;
  input.options = {"--gpu-architecture=sm_90a", "--std=c++17", "-Xptxas=-v"};
  return flashrtc::detail::nvrtc_compile(input, "test-" + name_expression);
}

}  // namespace

TEST_CASE("ptxas report: a real wgmma pipeline broken by an ordinary write is reported serialized") {
  // One program holds both instantiations, so the log has both entries and the one advisory.
  const NvrtcOutput out = compile_wgmma("gemm<true>");
  INFO("log:\n" << out.log);
  const ResourceReport touched = parse_ptxas_report(out.log, out.lowered_name);
  CHECK(touched.wgmma_serialized);
  CHECK(touched.wgmma_serialized_reason.find("(C75") != std::string::npos);
  // gemm<false>, Itanium-mangled: same log, no advisory of its own.
  const ResourceReport clean_beside = parse_ptxas_report(out.log, "_Z4gemmILb0EEvPf");
  CHECK_FALSE(clean_beside.wgmma_serialized);
  CHECK(clean_beside.wgmma_serialized_reason.empty());

  const NvrtcOutput alone = compile_wgmma("gemm<false>");
  INFO("log:\n" << alone.log);
  CHECK_FALSE(parse_ptxas_report(alone.log, alone.lowered_name).wgmma_serialized);
}

TEST_CASE("ptxas report: the wgmma advisory counts for the kernel it names, wherever it stands") {
  const std::string entries =
      "ptxas info    : Compiling entry function 'attn' for 'sm_90a'\n"
      "ptxas info    : Function properties for attn\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 16 bytes smem, 512 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'attn_causal' for 'sm_90a'\n"
      "ptxas info    : Function properties for attn_causal\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 240 registers, used 1 barriers, 16 bytes smem, 512 bytes cmem[0]\n";
  // The advisory as ptxas 13.0 writes it; reason_and_place ends "for the function" or "in the function".
  const auto advisory_line = [](const std::string& code, const std::string& reason_and_place,
                                const std::string& function) {
    return "ptxas info    : (" + code +
           ") Potential Performance Loss: wgmma.mma_async instructions are serialized due to " +
           reason_and_place + " '" + function + "'\n";
  };
  const std::string advisory =
      advisory_line("C7512", "insufficient register resources for the function", "attn_causal");

  SUBCASE("before the entries (where ptxas writes it), after them, or inside the entry's lines") {
    const std::string inside =
        entries.substr(0, entries.find("ptxas info    : Compiling entry function 'attn_"));
    for (const std::string& log : {"ptxas info    : 0 bytes gmem\n" + advisory + entries, entries + advisory,
                                   inside + advisory + entries.substr(inside.size())}) {
      INFO("log:\n" << log);
      const ResourceReport causal = parse_ptxas_report(log, "attn_causal");
      CHECK(causal.wgmma_serialized);
      CHECK(causal.wgmma_serialized_reason == "insufficient register resources (C7512)");
      CHECK(causal.registers == 240);
      // "attn" is a prefix of the name the advisory gives: not its kernel.
      const ResourceReport plain = parse_ptxas_report(log, "attn");
      CHECK_FALSE(plain.wgmma_serialized);
      CHECK(plain.registers == 168);
    }
  }
  SUBCASE("an advisory for another kernel only") {
    const std::string log = entries + advisory;
    CHECK_FALSE(parse_ptxas_report(log, "attn").wgmma_serialized);
  }
  SUBCASE("a name the advisory's name ends with is not that name") {
    const std::string log =
        entries + advisory_line("C7511",
                                "insufficient register resources for the wgmma pipeline in the function",
                                "xattn");
    CHECK_FALSE(parse_ptxas_report(log, "attn").wgmma_serialized);
  }
  SUBCASE("the 'in the function' wording, with its reason") {
    const std::string log =
        entries + advisory_line("C7515",
                                "non wgmma instructions defining accumulator registers of a "
                                "wgmma between start and end of the pipeline stage in the "
                                "function",
                                "attn");
    const ResourceReport plain = parse_ptxas_report(log, "attn");
    CHECK(plain.wgmma_serialized);
    CHECK(plain.wgmma_serialized_reason ==
          "non wgmma instructions defining accumulator registers of a wgmma between start and end of the "
          "pipeline stage (C7515)");
  }
  SUBCASE("other C75xx advisories (injected waits) are no serialization") {
    const std::string log =
        "ptxas info    : (C7517) warpgroup.wait is injected in around line 197 by compiler to allow use of "
        "registers defined by GMMA in function 'attn'\n" +
        entries;
    CHECK_FALSE(parse_ptxas_report(log, "attn").wgmma_serialized);
  }
}
