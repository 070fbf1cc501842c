// Host cost per call of flashrtc::attention_forward at the floor: back-to-back calls on a tiny problem with
// the kernel already loaded, beside an empty kernel launched through the Driver API on the same stream.
// Wall time on the host per call, the median over batches; the stream is synchronized only between batches.
// Beside them, flashrtc::attention_with_kvcache on the decode call of the same size (one query token, a cache
// of N tokens, contiguous and then paged: one page of 16 through a block table), whose ratio to the forward
// is the decode's host cost over the prefill's.
//
//   flashrtc_host_bench [--calls N] [--batches R] [--json]
//
// Exit codes: 0 measured, 1 a failure, 2 a usage error, 3 no GPU (the reason is printed).
// Uses only flashrtc's public headers, cuda.h (types) and NVRTC; libcuda is opened at run time, so the
// binary links on a machine without a driver.
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrtc/attention.hpp"
#include "flashrtc/attention_kvcache.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"

namespace {

constexpr int kExitFailure = 1, kExitUsage = 2, kExitNoDevice = 3;
// bf16 B=1 H=1 N=2 d=64: the smallest call the library serves, so the GPU side stays out of the way.
constexpr std::int64_t kSeqlen = 2, kHeads = 1, kHeadDim = 64;
constexpr std::size_t kTensorBytes = kSeqlen * kHeads * kHeadDim * 2;
constexpr std::int64_t kPageSize = 16;  // the paged decode call's one page
constexpr std::size_t kPageBytes = kPageSize * kHeads * kHeadDim * 2;

struct Options {
  int calls = 2000;
  int batches = 9;
  bool json = false;
};

// The Driver API entry points this program needs, from libcuda.so.1.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, std::size_t);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, std::size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuGetErrorName)(CUresult, const char**);

  void check(CUresult status, const char* call) const {
    if (status == CUDA_SUCCESS) return;
    const char* name = "unknown CUresult";
    cuGetErrorName(status, &name);
    throw std::runtime_error(std::string(call) + ": " + name);
  }
};

template <typename F>
void bind(void* library, F& function, const char* name) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (!function) throw std::runtime_error(std::string("libcuda.so.1 lacks ") + name);
}

Driver load_driver() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) throw std::runtime_error("cannot open libcuda.so.1");
  Driver d{};
  bind(library, d.cuInit, "cuInit");
  bind(library, d.cuDeviceGet, "cuDeviceGet");
  bind(library, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(library, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  bind(library, d.cuCtxSetCurrent, "cuCtxSetCurrent");
  bind(library, d.cuMemAlloc, "cuMemAlloc_v2");
  bind(library, d.cuMemFree, "cuMemFree_v2");
  bind(library, d.cuMemsetD8, "cuMemsetD8_v2");
  bind(library, d.cuMemsetD32, "cuMemsetD32_v2");
  bind(library, d.cuModuleLoadData, "cuModuleLoadData");
  bind(library, d.cuModuleUnload, "cuModuleUnload");
  bind(library, d.cuModuleGetFunction, "cuModuleGetFunction");
  bind(library, d.cuLaunchKernel, "cuLaunchKernel");
  bind(library, d.cuStreamCreate, "cuStreamCreate");
  bind(library, d.cuStreamDestroy, "cuStreamDestroy_v2");
  bind(library, d.cuStreamSynchronize, "cuStreamSynchronize");
  bind(library, d.cuGetErrorName, "cuGetErrorName");
  return d;
}

// `extern "C" __global__ void empty_kernel() {}` compiled by NVRTC for the device's arch.
std::vector<char> compile_empty_kernel(const std::string& arch) {
  const char* source = "extern \"C\" __global__ void empty_kernel() {}\n";
  nvrtcProgram program = nullptr;
  auto check = [&](nvrtcResult status, const char* call) {
    if (status != NVRTC_SUCCESS)
      throw std::runtime_error(std::string(call) + ": " + nvrtcGetErrorString(status));
  };
  check(nvrtcCreateProgram(&program, source, "empty_kernel.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str()};
  const nvrtcResult compiled = nvrtcCompileProgram(program, 1, options);
  std::vector<char> cubin;
  if (compiled == NVRTC_SUCCESS) {
    std::size_t size = 0;
    nvrtcGetCUBINSize(program, &size);
    cubin.resize(size);
    nvrtcGetCUBIN(program, cubin.data());
  }
  nvrtcDestroyProgram(&program);
  check(compiled, "nvrtcCompileProgram (empty_kernel)");
  return cubin;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Host microseconds per call of `call`, for each batch of `calls` back-to-back calls.
template <typename F>
double time_batch(int calls, F&& call) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(stop - start).count() / calls;
}

int parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (!*text || *end || value <= 0 || value > 10'000'000) {
    std::fprintf(stderr, "error: %s=%s: expected an integer in [1, 10000000]\n", flag, text);
    std::exit(kExitUsage);
  }
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      options.json = true;
    } else if ((arg == "--calls" || arg == "--batches") && i + 1 < argc) {
      (arg == "--calls" ? options.calls : options.batches) = parse_positive(argv[i], argv[i + 1]);
      ++i;
    } else {
      std::fprintf(stderr, "usage: flashrtc_host_bench [--calls N] [--batches R] [--json]\n");
      std::exit(arg == "--help" || arg == "-h" ? 0 : kExitUsage);
    }
  }
  return options;
}

int run(const Options& options) {
  const Driver driver = load_driver();
  driver.check(driver.cuInit(0), "cuInit");
  CUdevice device = 0;
  driver.check(driver.cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext context = nullptr;  // the primary context, which flashrtc launches in
  driver.check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  driver.check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  const flashrtc::DeviceInfo info = flashrtc::current_device();

  CUstream stream = nullptr;
  driver.check(driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::vector<char> cubin = compile_empty_kernel(info.arch);
  CUmodule module = nullptr;
  driver.check(driver.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
  CUfunction empty_kernel = nullptr;
  driver.check(driver.cuModuleGetFunction(&empty_kernel, module, "empty_kernel"), "cuModuleGetFunction");
  auto launch_empty = [&] {
    driver.check(driver.cuLaunchKernel(empty_kernel, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr),
                 "cuLaunchKernel");
  };

  CUdeviceptr buffers[4] = {};
  for (CUdeviceptr& buffer : buffers) {
    driver.check(driver.cuMemAlloc(&buffer, kTensorBytes), "cuMemAlloc");
    driver.check(driver.cuMemsetD8(buffer, 0, kTensorBytes), "cuMemsetD8");
  }
  flashrtc::ForwardParams params;
  params.dtype = flashrtc::DType::kBFloat16;
  params.batch = 1;
  params.seqlen_q = params.seqlen_kv = kSeqlen;
  params.heads_q = params.heads_kv = kHeads;
  params.head_dim = kHeadDim;
  const auto pointer = [](CUdeviceptr p) {
    return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(p));
  };
  params.q = flashrtc::TensorRef::bnhd(pointer(buffers[0]), kSeqlen, kHeads, kHeadDim);
  params.k = flashrtc::TensorRef::bnhd(pointer(buffers[1]), kSeqlen, kHeads, kHeadDim);
  params.v = flashrtc::TensorRef::bnhd(pointer(buffers[2]), kSeqlen, kHeads, kHeadDim);
  params.o = flashrtc::TensorRef::bnhd(pointer(buffers[3]), kSeqlen, kHeads, kHeadDim);
  params.stream = stream;
  auto launch_flashrtc = [&] { flashrtc::attention_forward(params); };

  // The decode calls: q and o of one token, the forward's k and v as a contiguous cache of kSeqlen tokens,
  // and a page of kPageSize zeroed tokens behind a block table; every cache_seqlens kSeqlen.
  CUdeviceptr pages[2] = {}, ints = 0;
  for (CUdeviceptr& page : pages) {
    driver.check(driver.cuMemAlloc(&page, kPageBytes), "cuMemAlloc");
    driver.check(driver.cuMemsetD8(page, 0, kPageBytes), "cuMemsetD8");
  }
  driver.check(driver.cuMemAlloc(&ints, 2 * sizeof(std::int32_t)), "cuMemAlloc");  // [seqlen, page id 0]
  driver.check(driver.cuMemsetD32(ints, static_cast<unsigned>(kSeqlen), 1), "cuMemsetD32");
  driver.check(driver.cuMemsetD32(ints + sizeof(std::int32_t), 0, 1), "cuMemsetD32");
  flashrtc::KvCacheParams decode;
  decode.dtype = flashrtc::DType::kBFloat16;
  decode.batch = decode.seqlen_q = 1;
  decode.heads_q = decode.heads_kv = kHeads;
  decode.head_dim = kHeadDim;
  decode.q = flashrtc::TensorRef::bnhd(pointer(buffers[0]), 1, kHeads, kHeadDim);
  decode.o = flashrtc::TensorRef::bnhd(pointer(buffers[3]), 1, kHeads, kHeadDim);
  decode.k_cache = flashrtc::TensorRef::bnhd(pointer(buffers[1]), kSeqlen, kHeads, kHeadDim);
  decode.v_cache = flashrtc::TensorRef::bnhd(pointer(buffers[2]), kSeqlen, kHeads, kHeadDim);
  decode.num_pages = 1;
  decode.page_size = kSeqlen;
  decode.cache_seqlens = static_cast<const std::int32_t*>(pointer(ints));
  decode.stream = stream;
  flashrtc::KvCacheParams paged = decode;
  paged.k_cache = flashrtc::TensorRef::bnhd(pointer(pages[0]), kPageSize, kHeads, kHeadDim);
  paged.v_cache = flashrtc::TensorRef::bnhd(pointer(pages[1]), kPageSize, kHeads, kHeadDim);
  paged.page_size = kPageSize;
  paged.block_table = static_cast<const std::int32_t*>(pointer(ints + sizeof(std::int32_t)));
  paged.block_table_stride = paged.max_pages_per_seq = 1;
  auto launch_decode = [&] { flashrtc::attention_with_kvcache(decode); };
  auto launch_paged = [&] { flashrtc::attention_with_kvcache(paged); };

  // Warm: the kernels compiled or loaded, every launch path run once.
  launch_flashrtc();
  launch_decode();
  launch_paged();
  launch_empty();
  driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize");

  std::vector<double> flashrtc_us, decode_us, paged_us, empty_us;
  for (int batch = 0; batch < options.batches; ++batch) {  // interleaved, so drift hits all alike
    flashrtc_us.push_back(time_batch(options.calls, launch_flashrtc));
    driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
    decode_us.push_back(time_batch(options.calls, launch_decode));
    driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
    paged_us.push_back(time_batch(options.calls, launch_paged));
    driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
    empty_us.push_back(time_batch(options.calls, launch_empty));
    driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  const double flashrtc_median = median(flashrtc_us), empty_median = median(empty_us);
  const double decode_median = median(decode_us), paged_median = median(paged_us);
  const double ratio = flashrtc_median / empty_median;

  for (CUdeviceptr buffer : buffers) driver.cuMemFree(buffer);
  for (CUdeviceptr page : pages) driver.cuMemFree(page);
  driver.cuMemFree(ints);
  driver.cuModuleUnload(module);
  driver.cuStreamDestroy(stream);
  driver.cuDevicePrimaryCtxRelease(device);

  if (options.json) {
    std::printf(
        "{\"device\": \"%s\", \"arch\": \"%s\", \"problem\": \"bf16 B=1 H=1 N=%lld d=%lld\", \"calls\": %d, "
        "\"batches\": %d, \"flashrtc_us\": %.3f, \"empty_kernel_us\": %.3f, \"ratio\": %.3f, \"decode_us\": "
        "%.3f, "
        "\"decode_paged_us\": %.3f, \"decode_ratio\": %.3f, \"decode_paged_ratio\": %.3f}\n",
        info.name.c_str(), info.arch.c_str(), static_cast<long long>(kSeqlen),
        static_cast<long long>(kHeadDim), options.calls, options.batches, flashrtc_median, empty_median,
        ratio, decode_median, paged_median, decode_median / flashrtc_median, paged_median / flashrtc_median);
  } else {
    std::printf("%s (%s), bf16 B=1 H=1 N=%lld d=%lld, median of %d batches of %d back-to-back calls\n",
                info.name.c_str(), info.arch.c_str(), static_cast<long long>(kSeqlen),
                static_cast<long long>(kHeadDim), options.batches, options.calls);
    std::printf("  %-40s %8.3f us/call\n", "flashrtc::attention_forward", flashrtc_median);
    std::printf("  %-40s %8.3f us/call\n", "empty kernel (cuLaunchKernel)", empty_median);
    std::printf("  %-40s %8.3f x\n", "ratio", ratio);
    std::printf("  %-40s %8.3f us/call\n", "attention_with_kvcache (contiguous)", decode_median);
    std::printf("  %-40s %8.3f us/call\n", "attention_with_kvcache (paged)", paged_median);
    std::printf("  %-40s %8.3f x, paged %.3f x\n", "decode / attention_forward",
                decode_median / flashrtc_median, paged_median / flashrtc_median);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (!flashrtc::device_available()) {
    std::fprintf(stderr, "flashrtc_host_bench: no GPU: %s\n", flashrtc::device_unavailable_reason().c_str());
    return kExitNoDevice;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashrtc_host_bench: %s\n", e.what());
    return kExitFailure;
  }
}
