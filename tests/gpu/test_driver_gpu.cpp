// The driver layer on a real GPU: launch_kernel with and without thread block clusters, dynamic shared
// memory above 48 KiB, a refused launch, a tensor map read by TMA inside a kernel (passed as a
// __grid_constant__ parameter), and scratch memory on a stream.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compile/nvrtc_compiler.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "driver/context.hpp"
#include "driver/driver_api.hpp"
#include "driver/launch.hpp"
#include "driver/stream_scratch.hpp"
#include "driver/tensor_map.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc/error.hpp"
#include "gpu_requirements.hpp"

using namespace flashrtc;
using test::expect_error;

namespace {

constexpr const char* kKernels = R"(
struct alignas(64) TensorMapBytes { unsigned long long opaque[16]; };

// Each block writes its rank within its cluster and the cluster's size (1 without a cluster launch).
__global__ void record_cluster(unsigned* out) {
  unsigned rank = 0, size = 1;
#if __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
#endif
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = rank;
    out[2 * blockIdx.x + 1] = size;
  }
}

// Writes words into dynamic shared memory and reads the last one back.
__global__ void use_dynamic_smem(unsigned* out, unsigned words) {
  extern __shared__ unsigned smem[];
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) smem[i] = i * 3u;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = smem[words - 1];
}

// Loads the 32 x 8 box at (x, y) of a 2D fp32 tensor map through TMA and writes it to out row by row.
__global__ void tma_load_box(const __grid_constant__ TensorMapBytes map, int x, int y, float* out) {
#if __CUDA_ARCH__ >= 900
  __shared__ alignas(128) float box[8 * 32];
  __shared__ alignas(8) unsigned long long barrier;
  const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&barrier));
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(box));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}"
                 ::"r"(bar), "r"(static_cast<unsigned>(sizeof(box))) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar) : "memory");
  }
  asm volatile("{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
               "@!done bra WAIT;\n}" ::"r"(bar) : "memory");
  for (int i = threadIdx.x; i < 8 * 32; i += blockDim.x) out[i] = box[i];
#endif
}
)";

// The test kernels compiled for this GPU, loaded once per name.
CUfunction toy_function(const std::string& name) {
  static std::map<std::string, CUfunction> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second;
  const detail::ContextInfo& context = detail::current_context();
  detail::NvrtcInput input;
  input.program_name = "driver_gpu_test.cu";
  input.source = kKernels;
  input.name_expression = name;
  input.options = {"--gpu-architecture=" + detail::arch_for(context.cc_major, context.cc_minor),
                   "--std=c++17"};
  const detail::NvrtcOutput output = detail::nvrtc_compile(input, "driver-gpu-test-" + name);
  CUmodule module = nullptr;
  FLASHRTC_CU_CHECK(cuModuleLoadData, &module, output.cubin.data());
  CUfunction function = nullptr;
  FLASHRTC_CU_CHECK(cuModuleGetFunction, &function, module, output.lowered_name.c_str());
  return loaded[name] = function;
}

template <typename T>
std::vector<T> read_back(const DeviceBuffer& buffer, std::size_t count) {
  device_synchronize();
  std::vector<T> values(count);
  buffer.copy_to_host(values.data(), count * sizeof(T));
  return values;
}

LaunchShape one_dim(unsigned blocks, unsigned threads) {
  LaunchShape dims;
  dims.grid[0] = blocks;
  dims.block[0] = threads;
  return dims;
}

}  // namespace

TEST_CASE("launch_kernel without a cluster: each block is its own cluster of one") {
  constexpr unsigned kBlocks = 8;
  DeviceBuffer out(2 * kBlocks * sizeof(unsigned));
  void* out_ptr = out.data();
  void* args[] = {&out_ptr};
  const CUfunction function = toy_function("record_cluster");

  detail::launch_kernel(function, one_dim(kBlocks, 32), nullptr, args);
  const std::vector<unsigned> got = read_back<unsigned>(out, 2 * kBlocks);
  for (unsigned b = 0; b < kBlocks; ++b) {
    CHECK(got[2 * b] == 0);
    CHECK(got[2 * b + 1] == 1);
  }
}

TEST_CASE("launch_kernel with a thread block cluster of two" * FLASHRTC_NEEDS_SM90) {
  constexpr unsigned kBlocks = 8;
  DeviceBuffer out(2 * kBlocks * sizeof(unsigned));
  void* out_ptr = out.data();
  void* args[] = {&out_ptr};
  const CUfunction function = toy_function("record_cluster");

  LaunchShape clustered = one_dim(kBlocks, 32);
  clustered.cluster[0] = 2;
  detail::launch_kernel(function, clustered, nullptr, args);
  const std::vector<unsigned> got = read_back<unsigned>(out, 2 * kBlocks);
  for (unsigned b = 0; b < kBlocks; ++b) {
    CAPTURE(b);
    CHECK(got[2 * b] == b % 2);
    CHECK(got[2 * b + 1] == 2);
  }
}

TEST_CASE("dynamic shared memory above 48 KiB needs the function's limit raised") {
  constexpr unsigned kSmemBytes = 64 * 1024;
  unsigned words = kSmemBytes / sizeof(unsigned);
  DeviceBuffer out(sizeof(unsigned));
  void* out_ptr = out.data();
  void* args[] = {&out_ptr, &words};
  const CUfunction function = toy_function("use_dynamic_smem");
  LaunchShape dims = one_dim(1, 256);
  dims.dynamic_smem_bytes = kSmemBytes;

  const Error refused = expect_error([&] { detail::launch_kernel(function, dims, nullptr, args); });
  CHECK(refused.code() == ErrorCode::kDriver);
  CHECK(refused.call() == "cuLaunchKernelEx");
  CHECK(refused.message().find("65536 bytes of dynamic shared memory") != std::string::npos);

  FLASHRTC_CU_CHECK(cuFuncSetAttribute, function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    static_cast<int>(kSmemBytes));
  detail::launch_kernel(function, dims, nullptr, args);
  CHECK(read_back<unsigned>(out, 1)[0] == (words - 1) * 3u);
}

TEST_CASE("a tensor map passed as a __grid_constant__ parameter is read by TMA" * FLASHRTC_NEEDS_SM90) {
  // fp32 [40 rows][100 columns], value = row * 1000 + column.
  constexpr int kRows = 40, kCols = 100;
  std::vector<float> host(kRows * kCols);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) host[r * kCols + c] = static_cast<float>(r * 1000 + c);
  DeviceBuffer tensor(host.size() * sizeof(float));
  tensor.copy_from_host(host.data(), host.size() * sizeof(float));

  detail::TensorMapSpec spec;
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  spec.rank = 2;
  spec.global_address = tensor.data();
  spec.global_dims[0] = kCols, spec.global_dims[1] = kRows;
  spec.global_strides_bytes[0] = kCols * sizeof(float);
  spec.box_dims[0] = 32, spec.box_dims[1] = 8;
  CUtensorMap map = detail::encode_tensor_map(spec);
  const CUtensorMap again = detail::encode_tensor_map(spec);
  CHECK(std::memcmp(&map, &again, sizeof(map)) == 0);

  DeviceBuffer out(8 * 32 * sizeof(float));
  void* out_ptr = out.data();
  const CUfunction function = toy_function("tma_load_box");
  // Inside the tensor, and across its corner (the part outside reads as zeros).
  for (const auto& [x, y] : std::vector<std::pair<int, int>>{{32, 8}, {96, 36}}) {
    CAPTURE(x);
    CAPTURE(y);
    int box_x = x, box_y = y;
    void* args[] = {&map, &box_x, &box_y, &out_ptr};
    out.fill_bytes(0xFF);
    detail::launch_kernel(function, one_dim(1, 128), nullptr, args);
    const std::vector<float> got = read_back<float>(out, 8 * 32);
    int wrong = 0;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 32; ++c) {
        const int row = y + r, col = x + c;
        const float expected = row < kRows && col < kCols ? static_cast<float>(row * 1000 + col) : 0.0f;
        wrong += got[r * 32 + c] != expected;
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE(
    "scratch memory on a stream: allocated, used and freed in stream order; too much is out of memory") {
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  {
    const detail::Scratch scratch = detail::Scratch::on_stream(1 << 20, cu_stream);
    CHECK(scratch.data() % detail::kScratchAlignBytes == 0);
    FLASHRTC_CU_CHECK(cuMemsetD8Async, scratch.data(), 0x5a, scratch.size(), cu_stream);
  }
  stream.synchronize();
  const std::size_t too_many_bytes = 2 * current_device().global_memory_bytes;
  const Error e = expect_error([&] { detail::Scratch::on_stream(too_many_bytes, cu_stream); });
  CHECK(e.code() == ErrorCode::kDriver);
  CHECK(e.call() == "cuMemAllocFromPoolAsync");
  CHECK(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
  stream.synchronize();
}
