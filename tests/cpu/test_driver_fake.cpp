// The driver layer against a fake driver table (helpers/fake_driver.hpp), on every machine: the no-device
// paths, driver failures (launch error, out of memory, lost context), launches with and without thread
// block clusters, tensor maps and their memo, scratch memory on a stream, and attention_forward and the
// Hopper varlen forward and backward end to end (NVRTC really compiles; the fake loads the cubin and records
// the launch).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/artifact_cache.hpp"
#include "cpu/helpers/fake_driver.hpp"
#include "cpu/helpers/log_capture.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "driver/context.hpp"
#include "driver/driver_api.hpp"
#include "driver/launch.hpp"
#include "driver/stream_scratch.hpp"
#include "driver/tensor_map.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/kernel_family.hpp"

using namespace flashrtc;
using test::expect_error;
using test::FakeDeviceSpec;
using test::FakeDriver;
using test::LogCapture;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& line : lines)
    if (contains(line, part)) return true;
  return false;
}

// What the process sees with no fake installed: libcuda.so.1 as it is on this machine. Taken by the first
// fixture, before any test installs a fake.
struct DriverState {
  bool available;
  std::string reason;
};
const DriverState& real_driver_state() {
  static const DriverState state{device_available(), device_unavailable_reason()};
  return state;
}

// Every test that installs a fake checks afterwards that the real table is back, untouched.
struct RestoresRealDriver {
  RestoresRealDriver() { real_driver_state(); }
  ~RestoresRealDriver() {
    CHECK(device_available() == real_driver_state().available);
    CHECK(device_unavailable_reason() == real_driver_state().reason);
  }
};

// A kernel function in the fake's current context.
CUfunction load_function(const std::string& name) {
  detail::current_context();
  const std::string image = test::tiny_cubin(name);
  CUmodule module = nullptr;
  FLASHRTC_CU_CHECK(cuModuleLoadData, &module, image.data());
  CUfunction function = nullptr;
  FLASHRTC_CU_CHECK(cuModuleGetFunction, &function, module, name.c_str());
  return function;
}

LaunchShape dims(unsigned gx, unsigned gy, unsigned bx, unsigned smem_bytes) {
  LaunchShape d;
  d.grid[0] = gx, d.grid[1] = gy;
  d.block[0] = bx;
  d.dynamic_smem_bytes = smem_bytes;
  return d;
}

// fp16 [seq=1000, heads=8, d=64] read in 128 x 64 boxes, 128-byte swizzle: a valid spec.
detail::TensorMapSpec valid_map_spec() {
  detail::TensorMapSpec s;
  s.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  s.rank = 3;
  s.global_address = reinterpret_cast<const void*>(0x10000);
  s.global_dims[0] = 64, s.global_dims[1] = 1000, s.global_dims[2] = 8;
  s.global_strides_bytes[0] = 8 * 64 * 2, s.global_strides_bytes[1] = 64 * 2;
  s.box_dims[0] = 64, s.box_dims[1] = 128, s.box_dims[2] = 1;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return s;
}

std::uint64_t encode_ordinal(const CUtensorMap& map) {
  return map.opaque[0];
}

ForwardParams forward_params(void* stream, DType dtype = DType::kFloat16, std::int64_t seqlen_q = 200,
                             std::int64_t seqlen_kv = 300, std::int64_t head_dim = 64) {
  ForwardParams p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen_q = seqlen_q;
  p.seqlen_kv = seqlen_kv;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = head_dim;
  // Never dereferenced: the fake runs nothing.
  p.q = TensorRef::bnhd(reinterpret_cast<const void*>(0x100000), p.seqlen_q, p.heads_q, p.head_dim);
  p.k = TensorRef::bnhd(reinterpret_cast<const void*>(0x200000), p.seqlen_kv, p.heads_kv, p.head_dim);
  p.v = TensorRef::bnhd(reinterpret_cast<const void*>(0x300000), p.seqlen_kv, p.heads_kv, p.head_dim);
  p.o = TensorRef::bnhd(reinterpret_cast<const void*>(0x400000), p.seqlen_q, p.heads_q, p.head_dim);
  p.stream = stream;
  return p;
}

}  // namespace

TEST_CASE_FIXTURE(RestoresRealDriver, "a fake replaces the real table only while it lives") {
  const std::uint64_t generation = detail::driver_generation();
  {
    FakeDriver fake;
    CHECK(device_available());
    CHECK(device_unavailable_reason().empty());
    CHECK(current_device().name == FakeDeviceSpec{}.name);
    CHECK(detail::driver_generation() != generation);
  }
  CHECK(detail::driver_generation() != generation);
  if (real_driver_state().available) {
    CHECK(current_device().name != FakeDeviceSpec{}.name);
  } else {
    const Error e = expect_error([] { current_device(); });
    CHECK(e.code() == ErrorCode::kNoDevice);
    CHECK(e.message() == real_driver_state().reason);
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "cuInit failing: no device, with the reason, at every entry point") {
  FakeDeviceSpec spec;
  spec.init_status = CUDA_ERROR_NO_DEVICE;
  FakeDriver fake(spec);
  CHECK_FALSE(device_available());
  const std::string reason = device_unavailable_reason();
  CHECK(contains(reason, "cuInit failed: CUDA_ERROR_NO_DEVICE"));

  const std::vector<std::pair<const char*, std::function<void()>>> entry_points = {
      {"current_device", [] { current_device(); }},
      {"DeviceBuffer", [] { DeviceBuffer buffer(256); }},
      {"Stream", [] { Stream stream; }},
      {"launch_kernel", [] { detail::launch_kernel(nullptr, LaunchShape{}, nullptr, nullptr); }},
      {"Scratch::on_stream", [] { detail::Scratch::on_stream(256, nullptr); }},
      {"encode_tensor_map", [] { detail::encode_tensor_map(valid_map_spec()); }},
      {"attention_forward", [] { attention_forward(forward_params(nullptr)); }},
  };
  for (const auto& [name, call] : entry_points) {
    CAPTURE(name);
    const Error e = expect_error(call);
    CHECK(e.code() == ErrorCode::kNoDevice);
    CHECK(e.message() == reason);
  }
  CHECK(fake.calls("cuInit") == 1);  // once, at installation: the failure is remembered
  CHECK(fake.calls("cuDeviceGetCount") == 0);
}

TEST_CASE_FIXTURE(RestoresRealDriver, "a driver without devices, and one lacking an entry, are no device") {
  SUBCASE("no device") {
    FakeDeviceSpec spec;
    spec.device_count = 0;
    FakeDriver fake(spec);
    CHECK_FALSE(device_available());
    CHECK(contains(device_unavailable_reason(), "reports no device"));
  }
  SUBCASE("a driver too old for cuLaunchKernelEx") {
    detail::DriverApi api = FakeDriver::table();
    api.cuLaunchKernelEx = nullptr;
    detail::ScopedDriverForTesting installed(api);
    CHECK_FALSE(device_available());
    CHECK(contains(device_unavailable_reason(), "lacks cuLaunchKernelEx: driver too old"));
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "the fake device is described like a real one") {
  FakeDriver fake;
  const DeviceInfo info = current_device();
  CHECK(info.name == FakeDeviceSpec{}.name);
  CHECK(info.arch == "sm_90a");
  CHECK(info.multiprocessors == 132);
  CHECK(info.smem_per_block_optin_bytes == 232448);
  CHECK(info.driver_version == 13000);
  // No context was current: the runtime retained the primary context and made it current, once.
  CHECK(detail::current_context().context == fake.primary_context());
  current_device();
  CHECK(fake.calls("cuDevicePrimaryCtxRetain") == 1);
}

TEST_CASE_FIXTURE(RestoresRealDriver, "launch_kernel passes a cluster attribute only with a cluster") {
  FakeDriver fake;
  const CUfunction function = load_function("toy_kernel");
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  int argument = 41;
  void* args[] = {&argument};
  int seen = 0;
  fake.on_launch = [&](const test::RecordedLaunch&, void** launch_args) {
    seen = *static_cast<int*>(launch_args[0]);
  };

  SUBCASE("without a cluster") {
    detail::launch_kernel(function, dims(7, 3, 128, 1024), cu_stream, args);
    const auto launches = fake.launches();
    REQUIRE(launches.size() == 1);
    const test::RecordedLaunch& l = launches[0];
    CHECK(l.api == "cuLaunchKernelEx");
    CHECK(l.kernel == "toy_kernel");
    CHECK((l.grid[0] == 7 && l.grid[1] == 3 && l.grid[2] == 1));
    CHECK((l.block[0] == 128 && l.block[1] == 1 && l.block[2] == 1));
    CHECK(l.dynamic_smem_bytes == 1024);
    CHECK(l.stream == cu_stream);
    CHECK(l.attributes.empty());
    CHECK(seen == 41);
  }
  SUBCASE("with a 2 x 1 x 1 cluster") {
    LaunchShape d = dims(8, 2, 256, 0);
    d.cluster[0] = 2;
    detail::launch_kernel(function, d, cu_stream, args);
    const auto launches = fake.launches();
    REQUIRE(launches.size() == 1);
    CHECK(launches[0].attributes == std::vector<CUlaunchAttributeID>{CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION});
    CHECK((launches[0].cluster[0] == 2 && launches[0].cluster[1] == 1 && launches[0].cluster[2] == 1));
    CHECK(seen == 41);
  }
  SUBCASE("a grid that is not a multiple of the cluster is the driver's to refuse") {
    LaunchShape d = dims(7, 2, 256, 0);
    d.cluster[0] = 2;
    const Error e = expect_error([&] { detail::launch_kernel(function, d, cu_stream, args); });
    CHECK(e.code() == ErrorCode::kDriver);
    CHECK(contains(e.status(), "CUDA_ERROR_INVALID_CLUSTER_SIZE"));
    CHECK(contains(e.message(), "cluster 2x1x1"));
    CHECK(fake.launches().empty());
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "a launch with a work buffer gets a zeroed one of its own") {
  FakeDriver fake;
  const CUfunction function = load_function("toy_kernel");
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  KernelArgs args;
  args.push(41);
  args.push(static_cast<unsigned*>(nullptr));
  LaunchShape shape = dims(4, 1, 128, 0);
  shape.work_buffer_arg = 1;
  CUdeviceptr seen = 0;  // the callback runs under the fake's lock: it reads the arguments only
  fake.on_launch = [&](const test::RecordedLaunch&, void** launch_args) {
    std::memcpy(&seen, launch_args[1], sizeof seen);
  };

  SUBCASE("allocated and zeroed on the stream, freed there after the launch") {
    detail::launch_family_kernel(function, shape, cu_stream, args);
    REQUIRE(fake.launches().size() == 1);
    CHECK(seen != 0);
    const auto events = fake.memory_events();
    REQUIRE(events.size() == 3);
    CHECK(events[0].api == "cuMemAllocFromPoolAsync");
    CHECK(events[1].api == "cuMemsetD8Async");
    CHECK(events[1].bytes == sizeof(unsigned));
    CHECK(events[2].api == "cuMemFreeAsync");
    for (const test::MemoryEvent& event : events) {
      CHECK(event.ptr == seen);
      CHECK(event.stream == cu_stream);
    }
    CHECK(fake.live_allocation_bytes() == 0);
  }
  SUBCASE("a larger buffer is zeroed only as far as the shape asks") {
    shape.work_bytes = 4096;
    shape.work_zeroed_bytes = 64;
    detail::launch_family_kernel(function, shape, cu_stream, args);
    const auto events = fake.memory_events();
    REQUIRE(events.size() == 3);
    CHECK(events[0].bytes == 4096);
    CHECK(events[1].api == "cuMemsetD8Async");
    CHECK(events[1].bytes == 64);
    CHECK(events[1].ptr == seen);
  }
  SUBCASE("a buffer that zeroes more than it holds is the family's bug") {
    shape.work_bytes = 16;
    shape.work_zeroed_bytes = 32;
    const Error e = expect_error([&] { detail::launch_family_kernel(function, shape, cu_stream, args); });
    CHECK(e.code() == ErrorCode::kInternal);
    CHECK(contains(e.message(), "16 bytes with 32 zeroed"));
    CHECK(fake.launches().empty());
    CHECK(fake.memory_events().empty());
  }
  SUBCASE("without one, nothing is allocated") {
    shape.work_buffer_arg = -1;
    detail::launch_family_kernel(function, shape, cu_stream, args);
    CHECK(fake.launches().size() == 1);
    CHECK(seen == 0);
    CHECK(fake.memory_events().empty());
  }
  SUBCASE("an index past the parameters is the family's bug") {
    shape.work_buffer_arg = 2;
    const Error e = expect_error([&] { detail::launch_family_kernel(function, shape, cu_stream, args); });
    CHECK(e.code() == ErrorCode::kInternal);
    CHECK(contains(e.message(), "work_buffer_arg 2"));
    CHECK(fake.launches().empty());
    CHECK(fake.memory_events().empty());
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver,
                  "a refused launch is a driver error naming the call, status and dimensions") {
  FakeDriver fake;
  const CUfunction function = load_function("toy_kernel");
  int argument = 0;
  void* args[] = {&argument};
  SUBCASE("launch failed") {
    fake.launch_status = CUDA_ERROR_LAUNCH_FAILED;
    const Error e = expect_error([&] { detail::launch_kernel(function, dims(7, 3, 128, 0), nullptr, args); });
    CHECK(e.code() == ErrorCode::kDriver);
    CHECK(e.call() == "cuLaunchKernelEx");
    CHECK(contains(e.status(), "CUDA_ERROR_LAUNCH_FAILED"));
    CHECK(contains(e.what(), "grid 7x3x1, block 128x1x1"));
  }
  SUBCASE("more dynamic shared memory than the function was allowed") {
    const Error e =
        expect_error([&] { detail::launch_kernel(function, dims(1, 1, 128, 64 * 1024), nullptr, args); });
    CHECK(e.code() == ErrorCode::kDriver);
    CHECK(contains(e.status(), "CUDA_ERROR_INVALID_VALUE"));
    CHECK(contains(e.message(), "65536 bytes of dynamic shared memory"));
  }
  CHECK(fake.launches().empty());
}

TEST_CASE_FIXTURE(RestoresRealDriver, "scratch memory lives on the call's stream") {
  FakeDriver fake;
  detail::current_context();
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  CUdeviceptr ptr = 0;
  {
    detail::Scratch scratch = detail::Scratch::on_stream(4096, cu_stream);
    CHECK(scratch.owned());
    CHECK(scratch.size() == 4096);
    CHECK(scratch.data() % detail::kScratchAlignBytes == 0);
    ptr = scratch.data();
    detail::Scratch moved = std::move(scratch);  // one owner: freed once
    CHECK(fake.live_allocation_bytes() == 4096);
  }
  const auto events = fake.memory_events();
  REQUIRE(events.size() == 2);
  CHECK(events[0].api == "cuMemAllocFromPoolAsync");
  CHECK(events[1].api == "cuMemFreeAsync");
  for (const test::MemoryEvent& event : events) {
    CHECK(event.ptr == ptr);
    CHECK(event.stream == cu_stream);
  }
  CHECK(fake.live_allocation_bytes() == 0);

  const detail::Scratch empty = detail::Scratch::on_stream(0, cu_stream);
  CHECK(empty.data() == 0);
  CHECK(fake.calls("cuMemAllocFromPoolAsync") == 1);
}

TEST_CASE_FIXTURE(RestoresRealDriver, "the scratch pool is made once per context, again after a failed attempt") {
  FakeDriver fake;
  detail::current_context();
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  fake.context_status = CUDA_ERROR_CONTEXT_IS_DESTROYED;
  const Error e = expect_error([&] { detail::Scratch::on_stream(4096, cu_stream); });
  CHECK(e.code() == ErrorCode::kDriver);
  CHECK(e.call() == "cuMemPoolCreate");
  fake.context_status = CUDA_SUCCESS;
  for (int i = 0; i < 3; ++i) CHECK(detail::Scratch::on_stream(4096, cu_stream).owned());
  CHECK(fake.calls("cuMemPoolCreate") == 2);
  CHECK(fake.calls("cuMemPoolSetAttribute") == 1);
  CHECK(fake.calls("cuMemAllocFromPoolAsync") == 3);
}

TEST_CASE_FIXTURE(RestoresRealDriver, "a caller's workspace is checked and never freed") {
  FakeDriver fake;
  alignas(64) static unsigned char workspace[4096];
  {
    const detail::Scratch lent = detail::Scratch::borrowed(workspace, sizeof(workspace), 1024);
    CHECK_FALSE(lent.owned());
    CHECK(lent.size() == sizeof(workspace));
    CHECK(lent.data() == reinterpret_cast<CUdeviceptr>(workspace));
  }
  const Error small = expect_error([] { detail::Scratch::borrowed(workspace, 1024, 4096); });
  CHECK(small.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(small.message(), "needs 4096 bytes, 1024 bytes were given"));
  const Error null = expect_error([] { detail::Scratch::borrowed(nullptr, 0, 16); });
  CHECK(null.code() == ErrorCode::kInvalidArgument);
  const Error misaligned = expect_error([] { detail::Scratch::borrowed(workspace + 4, 1024, 512); });
  CHECK(misaligned.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(misaligned.message(), "16-byte aligned"));
  CHECK(detail::Scratch::borrowed(nullptr, 0, 0).size() == 0);  // an operation that needs none
  CHECK(fake.memory_events().empty());
}

TEST_CASE_FIXTURE(RestoresRealDriver, "out of memory in the scratch allocator is a driver error") {
  FakeDeviceSpec spec;
  spec.global_memory_bytes = 1 << 20;
  FakeDriver fake(spec);
  detail::current_context();
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  const detail::Scratch held = detail::Scratch::on_stream(768 * 1024, cu_stream);
  const Error e = expect_error([&] { detail::Scratch::on_stream(512 * 1024, cu_stream); });
  CHECK(e.code() == ErrorCode::kDriver);
  CHECK(e.call() == "cuMemAllocFromPoolAsync");
  CHECK(contains(e.what(), "CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK(contains(e.message(), "524288 bytes"));
  CHECK(fake.live_allocation_bytes() == 768 * 1024);
}

TEST_CASE_FIXTURE(RestoresRealDriver,
                  "a lost context fails calls with its status; destructors log instead of throwing") {
  FakeDriver fake;
  const CUfunction function = load_function("toy_kernel");
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  detail::Scratch scratch = detail::Scratch::on_stream(4096, cu_stream);
  fake.context_status = CUDA_ERROR_CONTEXT_IS_DESTROYED;

  int argument = 0;
  void* args[] = {&argument};
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"cuLaunchKernelEx", [&] { detail::launch_kernel(function, dims(1, 1, 32, 0), cu_stream, args); }},
      {"cuMemAllocFromPoolAsync", [&] { detail::Scratch::on_stream(256, cu_stream); }},
      {"cuMemAlloc", [] { DeviceBuffer buffer(256); }},
      {"cuCtxSynchronize", [] { device_synchronize(); }},
      {"cuStreamSynchronize", [&] { stream.synchronize(); }},
  };
  for (const auto& [call, run] : calls) {
    CAPTURE(call);
    const Error e = expect_error(run);
    CHECK(e.code() == ErrorCode::kDriver);
    CHECK(e.call() == call);
    CHECK(contains(e.status(), "CUDA_ERROR_CONTEXT_IS_DESTROYED"));
  }
  LogCapture log;
  CHECK_NOTHROW(scratch = detail::Scratch());
  CHECK(any_contains(log.errors(), "cuMemFreeAsync failed in a destructor: CUDA_ERROR_CONTEXT_IS_DESTROYED"));
}

TEST_CASE("tensor map specs are validated field by field") {
  const detail::TensorMapSpec valid = valid_map_spec();
  CHECK_NOTHROW(detail::validate_tensor_map(valid));
  struct Case {
    const char* what;
    std::function<void(detail::TensorMapSpec&)> mutate;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"rank 0", [](auto& s) { s.rank = 0; }, {"rank=0", "1..5"}},
      {"rank 6", [](auto& s) { s.rank = 6; }, {"rank=6", "1..5"}},
      {"interleaved rank 2",
       [](auto& s) {
         s.rank = 2;
         s.interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
       },
       {"rank=2", ">= 3 when interleaved"}},
      {"null address", [](auto& s) { s.global_address = nullptr; }, {"global_address=null"}},
      {"8-byte aligned address",
       [](auto& s) { s.global_address = reinterpret_cast<const void*>(0x10008); },
       {"global_address=0x10008", "16-byte aligned"}},
      {"interleave 32B on a 16-byte aligned address",
       [](auto& s) {
         s.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
         s.global_address = reinterpret_cast<const void*>(0x10010);
       },
       {"global_address=0x10010", "32-byte aligned"}},
      {"interleave 32B without swizzle 32B",
       [](auto& s) {
         s.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
       },
       {"swizzle=2", "CU_TENSOR_MAP_SWIZZLE_32B"}},
      {"zero dim", [](auto& s) { s.global_dims[1] = 0; }, {"global_dims[1]=0", "1..2^32"}},
      {"dim above 2^32",
       [](auto& s) { s.global_dims[2] = (std::uint64_t{1} << 32) + 1; },
       {"global_dims[2]=4294967297"}},
      {"stride not a multiple of 16",
       [](auto& s) { s.global_strides_bytes[0] = 1032 + 4; },
       {"global_strides_bytes[0]=1036", "multiple of 16"}},
      {"stride of 2^40",
       [](auto& s) { s.global_strides_bytes[1] = std::uint64_t{1} << 40; },
       {"global_strides_bytes[1]=1099511627776", "< 2^40"}},
      {"interleaved stride not a multiple of 32",
       [](auto& s) {
         s.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
         s.global_strides_bytes[1] = 48;
       },
       {"global_strides_bytes[1]=48", "multiple of 32"}},
      {"box of 257", [](auto& s) { s.box_dims[1] = 257; }, {"box_dims[1]=257", "1..256"}},
      {"empty box", [](auto& s) { s.box_dims[2] = 0; }, {"box_dims[2]=0"}},
      {"inner box of 8 bytes",
       [](auto& s) {
         s.box_dims[0] = 4;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
       },
       {"box_dims[0]=4", "8 bytes, must be a multiple of 16"}},
      {"inner box wider than the swizzle",
       [](auto& s) { s.swizzle = CU_TENSOR_MAP_SWIZZLE_64B; },
       {"box_dims[0]=64", "128 bytes, more than the 64-byte swizzle span"}},
      {"element stride 9", [](auto& s) { s.element_strides[2] = 9; }, {"element_strides[2]=9", "1..8"}},
      {"element stride 0", [](auto& s) { s.element_strides[1] = 0; }, {"element_strides[1]=0"}},
      {"NaN fill of integers",
       [](auto& s) {
         s.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT16;
         s.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
       },
       {"oob_fill=CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA", "floating-point"}},
      {"packed 4-bit type",
       [](auto& s) { s.dtype = CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B; },
       {"dtype=13", "packed types are not supported"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    detail::TensorMapSpec spec = valid;
    c.mutate(spec);
    const Error e = expect_error([&] { detail::validate_tensor_map(spec); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    for (const std::string& part : c.message) CHECK_MESSAGE(contains(e.message(), part), e.message());
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "tensor maps are encoded once per spec") {
  detail::TensorMapSpec spec = valid_map_spec();
  SUBCASE("a repeated spec is served from the memo") {
    FakeDriver fake;
    const CUtensorMap first = detail::encode_tensor_map(spec);
    detail::TensorMapSpec same = spec;
    same.global_dims[4] = 77;  // beyond rank: not part of the spec
    const CUtensorMap second = detail::encode_tensor_map(same);
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 1);
    CHECK(encode_ordinal(first) == 1);
    CHECK(std::memcmp(&first, &second, sizeof(CUtensorMap)) == 0);

    detail::TensorMapSpec other = spec;
    other.global_address = reinterpret_cast<const void*>(0x20000);
    CHECK(encode_ordinal(detail::encode_tensor_map(other)) == 2);
    CHECK(encode_ordinal(detail::encode_tensor_map(spec)) == 1);
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 2);
  }
  SUBCASE("an invalid spec never reaches the driver; a refused one is not memoized") {
    FakeDriver fake;
    detail::TensorMapSpec invalid = spec;
    invalid.box_dims[1] = 0;
    CHECK(expect_error([&] { detail::encode_tensor_map(invalid); }).code() == ErrorCode::kInvalidArgument);
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 0);
    fake.encode_status = CUDA_ERROR_INVALID_VALUE;
    const Error e = expect_error([&] { detail::encode_tensor_map(spec); });
    CHECK(e.code() == ErrorCode::kDriver);
    CHECK(e.call() == "cuTensorMapEncodeTiled");
    fake.encode_status = CUDA_SUCCESS;
    detail::encode_tensor_map(spec);
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 2);
  }
  SUBCASE("threads asking for one new spec encode it once") {
    FakeDriver fake;
    spec.global_address = reinterpret_cast<const void*>(0x30000);
    std::vector<CUtensorMap> maps(8);
    std::vector<std::thread> threads;
    for (CUtensorMap& map : maps) threads.emplace_back([&] { map = detail::encode_tensor_map(spec); });
    for (std::thread& t : threads) t.join();
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 1);
    for (const CUtensorMap& map : maps) CHECK(encode_ordinal(map) == 1);
  }
  SUBCASE("what one driver table encoded is not served under another") {
    {
      FakeDriver earlier;
      detail::encode_tensor_map(spec);
    }
    FakeDriver fake;
    detail::encode_tensor_map(spec);
    CHECK(fake.calls("cuTensorMapEncodeTiled") == 1);
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "attention_forward runs end to end against the fake device") {
  FakeDriver fake;
  Stream stream;
  const ForwardParams p = forward_params(stream.handle());
  const KernelSpec spec = select_forward_spec(p);  // resolved for the fake sm_90 device
  kernel::ForwardParams seen{};
  fake.on_launch = [&](const test::RecordedLaunch&, void** args) {
    std::memcpy(&seen, args[0], sizeof(seen));
  };

  attention_forward(p);
  const KernelFamily& family = family_of(spec);
  const auto artifact = detail::get_artifact(detail::family_compile_request(spec, "sm_90a"));
  auto launches = fake.launches();
  REQUIRE(launches.size() == 1);
  const test::RecordedLaunch& l = launches[0];
  CHECK(l.kernel == artifact->lowered_name);
  const unsigned m_blocks = static_cast<unsigned>((p.seqlen_q + spec.tile.block_m - 1) / spec.tile.block_m);
  CHECK((l.grid[0] == m_blocks * static_cast<unsigned>(p.batch * p.heads_q) && l.grid[1] == 1 &&
         l.grid[2] == 1));
  CHECK((l.block[0] == static_cast<unsigned>(family.threads(spec)) && l.block[1] == 1));
  const std::size_t smem = family.smem_bytes(spec);
  CHECK(l.dynamic_smem_bytes == smem);
  CHECK(fake.max_dynamic_smem_bytes(l.kernel) == static_cast<int>(smem));
  CHECK(l.stream == static_cast<CUstream>(stream.handle()));
  CHECK((l.cluster[0] == 1 && l.cluster[1] == 1 && l.cluster[2] == 1));
  CHECK(seen.q == p.q.data);
  CHECK(seen.o == p.o.data);
  CHECK(seen.seqlen_q == 200);
  CHECK(seen.seqlen_kv == 300);
  CHECK(seen.kv_group == 2);
  CHECK(seen.num_m_blocks == static_cast<int>(m_blocks));
  CHECK(seen.causal_chunk == 1);

  attention_forward(p);  // the loaded kernel is reused
  CHECK(fake.launches().size() == 2);
  CHECK(fake.calls("cuModuleLoadData") == 1);

  fake.launch_status = CUDA_ERROR_LAUNCH_FAILED;
  const Error e = expect_error([&] { attention_forward(p); });
  CHECK(e.code() == ErrorCode::kDriver);
  CHECK(e.call() == "cuLaunchKernelEx");
  CHECK(contains(e.status(), "CUDA_ERROR_LAUNCH_FAILED"));

  fake.launch_status = CUDA_SUCCESS;
  fake.context_status = CUDA_ERROR_CONTEXT_IS_DESTROYED;
  const Error lost = expect_error([&] { attention_forward(p); });
  CHECK(lost.code() == ErrorCode::kDriver);
  CHECK(contains(lost.status(), "CUDA_ERROR_CONTEXT_IS_DESTROYED"));
  CHECK(fake.launches().size() == 2);
}

TEST_CASE_FIXTURE(RestoresRealDriver, "causal wgmma launches take their tiles in chunks of about one round") {
  // The fake sm_90 device has 132 SMs. From 8 to 66 query blocks per (batch, head) pair at d > 64, a chunk
  // holds 132 / blocks pairs; otherwise (and in every other launch) one pair at a time.
  FakeDriver fake;
  Stream stream;
  kernel::ForwardParams seen{};
  fake.on_launch = [&](const test::RecordedLaunch&, void** args) {
    std::memcpy(&seen, args[0], sizeof(seen));
  };
  struct Case {
    std::int64_t head_dim, seqlen;
    MaskKind mask;
    int blocks, chunk;
  };
  for (const Case& c : {Case{128, 2048, MaskKind::kCausalTopLeft, 16, 8},  // 128x128: 132 / 16
                        Case{128, 2048, MaskKind::kCausalBottomRight, 16, 8},
                        Case{128, 8192, MaskKind::kCausalTopLeft, 64, 2},  // 128x160
                        Case{128, 512, MaskKind::kCausalTopLeft, 4, 1},    // under 8 blocks
                        Case{64, 2048, MaskKind::kCausalTopLeft, 11, 1},   // d = 64 (192x128)
                        Case{128, 2048, MaskKind::kNone, 16, 1}}) {        // no mask: strided tiles
    CAPTURE(c.head_dim);
    CAPTURE(c.seqlen);
    ForwardParams p = forward_params(stream.handle(), DType::kBFloat16, c.seqlen, c.seqlen, c.head_dim);
    p.mask = c.mask;
    attention_forward(p);
    CHECK(seen.num_m_blocks == c.blocks);
    CHECK(seen.causal_chunk == c.chunk);
    CHECK(fake.launches().back().grid[0] == static_cast<unsigned>(std::min(seen.num_blocks, 132)));
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "unmasked wgmma launches split a partial last round by key tiles") {
  // The fake sm_90 device has 132 SMs. Tiles past the last full round (all of them, in a call of fewer tiles
  // than SMs) are shared out by key tiles over one block per SM, and the launch gets a work buffer of flags
  // (zeroed) and partial results, where the kernel has three consumer groups and the split, with its cost,
  // cuts the busiest block's key tiles by 1% or more.
  FakeDriver fake;
  Stream stream;
  kernel::ForwardParams seen{};
  void* work = nullptr;
  fake.on_launch = [&](const test::RecordedLaunch&, void** args) {
    std::memcpy(&seen, args[0], sizeof(seen));
    std::memcpy(&work, args[5], sizeof(work));
  };
  struct Case {
    std::int64_t head_dim, seqlen, batch;
    int tiles, whole, key_tiles, groups;
  };
  // Comments: the busiest block's key tiles whole against split, plus the split's cost of an eighth of a
  // tile.
  for (const Case& c :
       {Case{128, 8192, 2, 344, 264, 103, 3},  // 192x80: 2 x 4 x 43 tiles; 309 against 269 + 13
        Case{96, 2048, 4, 176, 132, 22, 3},    // 192x96: 4 x 4 x 11; 44 against 30 + 3
        Case{128, 8192, 3, 516, 516, 0, 3},    // 412 against 403 + 13
        Case{96, 2048, 65, 2860, 2860, 0, 3},  // 484 against 477 + 3 (0.8%)
        Case{96, 2048, 2, 88, 0, 22, 3},       // under one round: 22 against 15 + 3
        Case{128, 4096, 1, 88, 0, 52, 3},      // 192x80, 4 x 22 tiles: 52 against 35 + 7
        Case{128, 6144, 1, 128, 128, 0, 3},    // 4 x 32 tiles: 77 against 75 + 10
        Case{96, 2048, 6, 264, 264, 0, 3},     // two whole rounds
        Case{128, 2048, 5, 320, 320, 0, 2},    // 128x128, two consumer groups: never
        Case{64, 1000, 9, 144, 144, 0, 4}}) {  // 256x64, four: never
    CAPTURE(c.head_dim);
    CAPTURE(c.seqlen);
    ForwardParams p = forward_params(stream.handle(), DType::kBFloat16, c.seqlen, c.seqlen, c.head_dim);
    p.batch = c.batch;
    const std::size_t earlier_events = fake.memory_events().size();
    attention_forward(p);
    REQUIRE(seen.num_blocks == c.tiles);
    const bool split = c.key_tiles > 0;
    CHECK(seen.whole_tiles == (split ? c.whole : c.tiles));
    CHECK(seen.split_key_tiles == c.key_tiles);
    const int units = (c.tiles - c.whole) * c.key_tiles;
    CHECK(seen.split_run == (split ? units / 132 : 0));
    CHECK(seen.split_longer_runs == (split ? units % 132 : 0));
    CHECK(fake.launches().back().grid[0] == static_cast<unsigned>(split ? 132 : std::min(c.tiles, 132)));
    const auto all_events = fake.memory_events();
    const std::vector<test::MemoryEvent> events(
        all_events.begin() + static_cast<std::ptrdiff_t>(earlier_events), all_events.end());
    if (!split) {
      CHECK(work == nullptr);
      CHECK(events.empty());
      continue;
    }
    REQUIRE(events.size() == 3);
    CHECK(events[0].api == "cuMemAllocFromPoolAsync");
    // Per block and consumer group: a 4-byte flag, and a slot of (d / 8 + 1) x 128 float4.
    const std::size_t flags = 4u * 132 * c.groups;
    CHECK(events[0].bytes == (flags + 127) / 128 * 128 + 16u * 128 * (c.head_dim / 8 + 1) * 132 * c.groups);
    CHECK(events[1].api == "cuMemsetD8Async");
    CHECK(events[1].bytes == flags);
    CHECK(reinterpret_cast<CUdeviceptr>(work) == events[0].ptr);
  }
}

TEST_CASE_FIXTURE(RestoresRealDriver, "a first attention_forward captured into a graph replays its launch") {
  FakeDriver fake;
  Stream stream;
  const auto cu_stream = static_cast<CUstream>(stream.handle());
  const ForwardParams p = forward_params(stream.handle());
  FLASHRTC_CU_CHECK(cuStreamBeginCapture, cu_stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  attention_forward(p);  // resolved, loaded and launched while capturing
  const detail::Scratch scratch = detail::Scratch::on_stream(1024, cu_stream);  // stream-ordered: allowed
  const Error sync = expect_error([] { device_synchronize(); });
  CHECK(contains(sync.status(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  const Error alloc = expect_error([] { DeviceBuffer buffer(1024); });
  CHECK(contains(alloc.status(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  CUgraph graph = nullptr;
  FLASHRTC_CU_CHECK(cuStreamEndCapture, cu_stream, &graph);
  CHECK(fake.launches().empty());

  CUgraphExec exec = nullptr;
  FLASHRTC_CU_CHECK(cuGraphInstantiate, &exec, graph, 0);
  FLASHRTC_CU_CHECK(cuGraphLaunch, exec, cu_stream);
  FLASHRTC_CU_CHECK(cuGraphLaunch, exec, cu_stream);
  const auto launches = fake.launches();
  REQUIRE(launches.size() == 2);
  const unsigned m_blocks = static_cast<unsigned>((p.seqlen_q + select_forward_spec(p).tile.block_m - 1) /
                                                  select_forward_spec(p).tile.block_m);
  for (const test::RecordedLaunch& l : launches) {
    CHECK(l.replayed);
    CHECK(l.stream == cu_stream);
    CHECK(l.grid[0] == m_blocks * static_cast<unsigned>(p.batch * p.heads_q));
  }
  FLASHRTC_CU_CHECK(cuGraphExecDestroy, exec);
  FLASHRTC_CU_CHECK(cuGraphDestroy, graph);
}

TEST_CASE_FIXTURE(RestoresRealDriver,
                  "a varlen call on sm_90 launches the Hopper varlen kernel, one block per tile") {
  // 3 sequences, 40 packed queries (max 20), 50 keys (max 30): varlen-wgmma's kernel on B * Hq * ceil(20 /
  // block_m) blocks, whatever the SM count, with the packed call's parameters and maps over q, k, v and o.
  FakeDriver fake;
  Stream stream;
  VarlenForwardParams p;
  p.dtype = DType::kBFloat16;
  p.batch = 3;
  p.total_q = 40;
  p.total_k = 50;
  p.max_seqlen_q = 20;
  p.max_seqlen_k = 30;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 128;
  p.mask = MaskKind::kCausalBottomRight;
  p.q = TensorRef::bnhd(reinterpret_cast<const void*>(0x100000), p.total_q, p.heads_q, p.head_dim);
  p.k = TensorRef::bnhd(reinterpret_cast<const void*>(0x200000), p.total_k, p.heads_kv, p.head_dim);
  p.v = TensorRef::bnhd(reinterpret_cast<const void*>(0x300000), p.total_k, p.heads_kv, p.head_dim);
  p.o = TensorRef::bnhd(reinterpret_cast<const void*>(0x400000), p.total_q, p.heads_q, p.head_dim);
  p.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(0x500000);
  p.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(0x500100);
  p.lse = reinterpret_cast<float*>(0x600000);
  p.stream = stream.handle();
  const ConfigResolution r = resolve_config(p);
  REQUIRE(r.family != nullptr);
  CHECK(r.family->name == "varlen-wgmma");
  kernel::VarlenForwardParams seen{};
  const void* map_addresses[4] = {};
  unsigned* work = reinterpret_cast<unsigned*>(0x1);
  fake.on_launch = [&](const test::RecordedLaunch&, void** args) {
    std::memcpy(&seen, args[0], sizeof(seen));
    for (int i = 0; i < 4; ++i) {
      CUtensorMap map;
      std::memcpy(&map, args[1 + i], sizeof(map));
      std::memcpy(&map_addresses[i], map.opaque + 1, sizeof(void*));
    }
    std::memcpy(&work, args[5], sizeof(work));
  };
  attention_varlen_forward(p);
  auto launches = fake.launches();
  REQUIRE(launches.size() == 1);
  const unsigned blocks = 3u * 4u * static_cast<unsigned>((20 + r.config.block_m - 1) / r.config.block_m);
  CHECK(launches[0].grid[0] == blocks);
  CHECK(launches[0].block[0] == static_cast<unsigned>(r.config.warps * 32));
  CHECK(contains(launches[0].kernel, "attention_forward_wgmma"));
  CHECK(seen.dense.num_blocks == static_cast<int>(blocks));
  CHECK(seen.dense.seqlen_q == 20);
  CHECK(seen.dense.seqlen_kv == 30);
  CHECK(seen.dense.q_stride_batch == 0);
  CHECK(seen.total_q == 40);
  CHECK(seen.total_k == 50);
  CHECK(seen.cu_seqlens_q == p.cu_seqlens_q);
  CHECK(seen.cu_seqlens_k == p.cu_seqlens_k);
  CHECK(seen.dense.lse == p.lse);
  CHECK(map_addresses[0] == p.q.data);
  CHECK(map_addresses[1] == p.k.data);
  CHECK(map_addresses[2] == p.v.data);
  CHECK(map_addresses[3] == p.o.data);
  CHECK(work == nullptr);  // no tile counter, no split

  // No key in any sequence: K and V maps of one row (a map has no empty dimension), still launched.
  p.total_k = p.max_seqlen_k = 0;
  attention_varlen_forward(p);
  CHECK(fake.launches().size() == 2);
  CHECK(seen.total_k == 0);
}

TEST_CASE_FIXTURE(
    RestoresRealDriver,
    "a varlen backward on sm_90 launches the pre-pass and the Hopper varlen pair over packed maps") {
  // 3 sequences, 40 packed queries (max 20), 50 keys (max 30), GQA: the pre-pass over the 40 rows, then
  // varlen-bwd-wgmma on B * Hkv * ceil(30 / block_n) blocks and varlen-bwd-dq-wgmma on B * Hq * ceil(20 /
  // block_m), each with the packed call's parameters and maps over q, k, v and d_o.
  FakeDriver fake;
  Stream stream;
  VarlenBackwardParams p;
  p.dtype = DType::kBFloat16;
  p.batch = 3;
  p.total_q = 40;
  p.total_k = 50;
  p.max_seqlen_q = 20;
  p.max_seqlen_k = 30;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 128;
  p.mask = MaskKind::kCausalBottomRight;
  const auto packed = [&](std::uintptr_t address, std::int64_t rows, std::int64_t heads) {
    return TensorRef::bnhd(reinterpret_cast<const void*>(address), rows, heads, p.head_dim);
  };
  p.q = packed(0x100000, p.total_q, p.heads_q);
  p.k = packed(0x200000, p.total_k, p.heads_kv);
  p.v = packed(0x300000, p.total_k, p.heads_kv);
  p.o = packed(0x400000, p.total_q, p.heads_q);
  p.d_o = packed(0x700000, p.total_q, p.heads_q);
  p.d_q = packed(0x800000, p.total_q, p.heads_q);
  p.d_k = packed(0x900000, p.total_k, p.heads_kv);
  p.d_v = packed(0xA00000, p.total_k, p.heads_kv);
  p.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(0x500000);
  p.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(0x500100);
  p.lse = reinterpret_cast<const float*>(0x600000);
  p.stream = stream.handle();
  const std::optional<DeviceTarget> device = current_device_target();  // the fake sm_90 device
  REQUIRE(device.has_value());
  const DeviceTarget& target = *device;
  const ConfigResolution main = resolve_config(config_query(p, Operation::kBackwardVarlen), target);
  const ConfigResolution dq = resolve_config(config_query(p, Operation::kBackwardDqVarlen), target);
  REQUIRE(main.family != nullptr);
  REQUIRE(dq.family != nullptr);
  CHECK(main.family->name == "varlen-bwd-wgmma");
  CHECK(dq.family->name == "varlen-bwd-dq-wgmma");
  std::vector<kernel::VarlenBackwardParams> seen;
  std::vector<std::vector<const void*>> maps;
  fake.on_launch = [&](const test::RecordedLaunch& l, void** args) {
    if (contains(l.kernel, "prep")) return;
    seen.emplace_back();
    std::memcpy(&seen.back(), args[0], sizeof(seen.back()));
    maps.emplace_back();
    for (int i = 0; i < 4; ++i) {
      CUtensorMap map;
      std::memcpy(&map, args[1 + i], sizeof(map));
      const void* address = nullptr;
      std::memcpy(&address, map.opaque + 1, sizeof(void*));
      maps.back().push_back(address);
    }
  };
  attention_varlen_backward(p);
  auto launches = fake.launches();
  REQUIRE(launches.size() == 3);
  REQUIRE(seen.size() == 2);
  CHECK(contains(launches[0].kernel, "attention_backward_prep"));
  CHECK(contains(launches[1].kernel, "attention_backward_wgmma"));
  CHECK(contains(launches[2].kernel, "attention_backward_dq_wgmma"));
  const unsigned key_blocks = static_cast<unsigned>((30 + main.config.block_n - 1) / main.config.block_n);
  const unsigned query_blocks = static_cast<unsigned>((20 + dq.config.block_m - 1) / dq.config.block_m);
  CHECK(launches[1].grid[0] == 3u * 2u * key_blocks);
  CHECK(launches[2].grid[0] == 3u * 4u * query_blocks);
  CHECK(seen[0].dense.num_blocks == static_cast<int>(key_blocks));
  CHECK(seen[1].dense.num_blocks == static_cast<int>(query_blocks));
  for (int i = 0; i < 2; ++i) {
    INFO("launch " << i + 1);
    CHECK(seen[i].dense.seqlen_q == 20);
    CHECK(seen[i].dense.seqlen_kv == 30);
    CHECK(seen[i].dense.q_stride_batch == 0);
    CHECK(seen[i].dense.dq_accum == nullptr);
    CHECK(seen[i].total_q == 40);
    CHECK(seen[i].total_k == 50);
    CHECK(seen[i].cu_seqlens_q == p.cu_seqlens_q);
    CHECK(seen[i].dense.lse == p.lse);
    CHECK(maps[i] == std::vector<const void*>{p.q.data, p.k.data, p.v.data, p.d_o.data});
  }

  // No key in any sequence: K and V maps of one row (a map has no empty dimension), still launched.
  p.total_k = p.max_seqlen_k = 0;
  attention_varlen_backward(p);
  CHECK(fake.launches().size() == 6);
  CHECK(seen.back().total_k == 0);
}
