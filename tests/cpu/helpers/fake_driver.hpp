#pragma once
// A fake CUDA driver for cpu tests: one simulated sm_90 device and its primary context, module loading (a
// real cubin from NVRTC is accepted and its kernels are looked up by name in it), function attributes,
// allocations (plain and stream-ordered, without contents), tensor-map encoding, stream capture into graphs
// and their replay, and a record of every launch. While a FakeDriver lives, the runtime calls it instead of
// libcuda.so.1 (detail::ScopedDriverForTesting); its destructor puts the previous table back. Failures are
// injected by setting its public fields. One FakeDriver at a time.
#include <cuda.h>
#include <elf.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver/driver_api.hpp"

namespace flashrtc::test {

// What the fake device is; read once, when the FakeDriver is constructed (cuInit runs then).
struct FakeDeviceSpec {
  CUresult init_status = CUDA_SUCCESS;  // what cuInit returns
  int device_count = 1;
  std::string name = "flashrtc fake sm_90 device";  // not a real GPU name: no tuning database entry matches
  int cc_major = 9, cc_minor = 0;
  int multiprocessors = 132;
  int smem_per_block_optin_bytes = 232448;  // H100: 227 KiB
  int smem_per_sm_bytes = 233472;
  int reserved_smem_per_block_bytes = 1024;
  int l2_cache_bytes = 50 * 1024 * 1024;
  int max_threads_per_block = 1024, max_threads_per_sm = 2048, max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  std::size_t global_memory_bytes = std::size_t{80} << 30;  // the allocation limit: beyond it, out of memory
};

struct RecordedLaunch {
  std::string api;     // "cuLaunchKernel" or "cuLaunchKernelEx"
  std::string kernel;  // the name the function was looked up by (cuModuleGetFunction)
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned cluster[3] = {1, 1, 1};  // 1 x 1 x 1 unless a cluster attribute was passed
  unsigned dynamic_smem_bytes = 0;
  CUstream stream = nullptr;
  std::vector<CUlaunchAttributeID> attributes;  // cuLaunchKernelEx's, in order
  bool replayed = false;  // run by cuGraphLaunch from a captured graph (stream: the replay's)
};

struct MemoryEvent {
  std::string api;  // cuMemAlloc, cuMemFree, cuMemAllocFromPoolAsync, cuMemFreeAsync, cuMemsetD8Async, cuMemsetD32Async
  CUdeviceptr ptr = 0;
  std::size_t bytes = 0;
  CUstream stream = nullptr;
};

class FakeDriver {
 public:
  explicit FakeDriver(FakeDeviceSpec spec = {}) : spec_(std::move(spec)) {
    if (active_) throw std::logic_error("FakeDriver: one at a time");
    primary_ = reinterpret_cast<CUcontext>(new_handle());
    active_ = this;
    guard_.emplace(table());
  }
  ~FakeDriver() {
    guard_.reset();
    active_ = nullptr;
  }
  FakeDriver(const FakeDriver&) = delete;
  FakeDriver& operator=(const FakeDriver&) = delete;

  // Injected failures, read at each call.
  CUresult launch_status = CUDA_SUCCESS;  // returned by launches that pass every check
  CUresult encode_status = CUDA_SUCCESS;  // returned by cuTensorMapEncodeTiled
  // When set (CUDA_ERROR_CONTEXT_IS_DESTROYED: the context is lost), returned by every call that needs the
  // context: launches, allocations and frees, module loads, synchronization, stream and event calls.
  CUresult context_status = CUDA_SUCCESS;

  // The table the fake installs: for a test that installs a variant of it itself. Every entry of the
  // runtime's table must have its fake_ function below (a new entry fails to compile here until it has).
  static detail::DriverApi table() {
    detail::DriverApi api;
#define FLASHRTC_FAKE_ENTRY(name) api.name = &fake_##name;
    FLASHRTC_DRIVER_FUNCTIONS(FLASHRTC_FAKE_ENTRY)
#undef FLASHRTC_FAKE_ENTRY
    return api;
  }

  // Observations.
  int calls(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(std::count(calls_.begin(), calls_.end(), name));
  }
  std::vector<RecordedLaunch> launches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return launches_;
  }
  std::vector<MemoryEvent> memory_events() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return memory_events_;
  }
  std::size_t live_allocation_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_bytes_;
  }
  CUcontext primary_context() const {
    return primary_;
  }
  // The dynamic shared memory limit set on a function (cuFuncSetAttribute), by the name it was looked up by.
  std::optional<int> max_dynamic_smem_bytes(const std::string& kernel) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [handle, function] : functions_)
      if (function.name == kernel) return function.max_dynamic_smem_bytes;
    return std::nullopt;
  }
  // Called inside each accepted launch with its kernel parameters (valid only during the call), under the
  // fake's lock: it must not call the driver.
  std::function<void(const RecordedLaunch&, void** args)> on_launch;

 private:
  struct Function {
    std::string name;
    int max_dynamic_smem_bytes = 48 * 1024;  // the default limit without cuFuncSetAttribute
    bool non_portable_cluster = false;
  };
  struct Allocation {
    std::size_t bytes = 0;
  };

  // Handles are addresses inside a never-freed arena: unique for the process, so no cache keyed by a
  // context or function of an earlier FakeDriver (or of the real driver) can answer for this one.
  static void* new_handle() {
    static char arena[1 << 16];
    static std::atomic<std::size_t> next{0};
    const std::size_t i = next++;
    if (i >= sizeof(arena)) throw std::logic_error("FakeDriver: out of fake handles");
    return &arena[i];
  }

  // The active fake, its lock held, and the call counted; null (the entry returns
  // CUDA_ERROR_DEINITIALIZED) when the FakeDriver whose table this was is gone.
  struct Entered {
    FakeDriver* self;
    std::unique_lock<std::mutex> lock;
    FakeDriver* operator->() const { return self; }
    explicit operator bool() const { return self != nullptr; }
  };
  static Entered enter(const char* call) {
    FakeDriver* self = active_;
    if (!self) return {nullptr, {}};
    std::unique_lock<std::mutex> lock(self->mutex_);
    self->calls_.emplace_back(call);
    return {self, std::move(lock)};
  }

  CUresult context_check() const {
    if (context_status != CUDA_SUCCESS) return context_status;
    return current_ ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  bool known_stream(CUstream stream) const {
    return !stream || streams_.count(stream);
  }

  // The end of an ELF64 image (a cubin): its section or program headers, whichever lie last.
  static std::size_t elf_image_bytes(const void* image) {
    Elf64_Ehdr header;
    std::memcpy(&header, image, sizeof(header));
    if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) return 0;
    return std::max<std::size_t>({sizeof(header),
                                  header.e_shoff + std::size_t{header.e_shnum} * header.e_shentsize,
                                  header.e_phoff + std::size_t{header.e_phnum} * header.e_phentsize});
  }

  CUresult record_launch(RecordedLaunch launch, CUfunction f, void** args) {
    if (const CUresult status = context_check(); status != CUDA_SUCCESS) return status;
    auto function = functions_.find(f);
    if (function == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (!known_stream(launch.stream)) return CUDA_ERROR_INVALID_HANDLE;
    launch.kernel = function->second.name;
    const unsigned threads = launch.block[0] * launch.block[1] * launch.block[2];
    if (threads == 0 || threads > static_cast<unsigned>(spec_.max_threads_per_block))
      return CUDA_ERROR_INVALID_VALUE;
    if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0 || launch.grid[1] > 65535 ||
        launch.grid[2] > 65535 || launch.grid[0] > 0x7fffffffu)
      return CUDA_ERROR_INVALID_VALUE;
    if (launch.dynamic_smem_bytes > static_cast<unsigned>(function->second.max_dynamic_smem_bytes))
      return CUDA_ERROR_INVALID_VALUE;
    const unsigned cluster_blocks = launch.cluster[0] * launch.cluster[1] * launch.cluster[2];
    if (cluster_blocks != 1) {
      if (spec_.cc_major < 9) return CUDA_ERROR_NOT_SUPPORTED;
      if (cluster_blocks == 0 || (cluster_blocks > 8 && !function->second.non_portable_cluster))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
      for (int i = 0; i < 3; ++i)
        if (launch.grid[i] % launch.cluster[i]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
    if (launch_status != CUDA_SUCCESS) return launch_status;
    if (on_launch) on_launch(launch, args);
    auto capture = capturing_.find(launch.stream);
    if (capture != capturing_.end())
      graphs_[capture->second].push_back(std::move(launch));  // runs only when the graph is launched
    else
      launches_.push_back(std::move(launch));
    return CUDA_SUCCESS;
  }

  // What a stream capture in CU_STREAM_CAPTURE_MODE_GLOBAL refuses (the real driver also invalidates the
  // capture): synchronous allocation, copies and synchronization while any capture is under way.
  CUresult capture_check() const {
    return capturing_.empty() ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }

  CUresult allocate(const char* api, CUdeviceptr* ptr, std::size_t bytes, CUstream stream) {
    if (const CUresult status = context_check(); status != CUDA_SUCCESS) return status;
    if (!ptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!known_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    if (bytes > spec_.global_memory_bytes - live_bytes_) return CUDA_ERROR_OUT_OF_MEMORY;
    static std::atomic<CUdeviceptr> next_address{CUdeviceptr{1} << 40};
    const std::size_t aligned = (bytes + 255) / 256 * 256;  // cuMemAlloc's alignment
    *ptr = next_address.fetch_add(aligned);
    allocations_[*ptr] = {bytes};
    live_bytes_ += bytes;
    memory_events_.push_back({api, *ptr, bytes, stream});
    return CUDA_SUCCESS;
  }

  CUresult release(const char* api, CUdeviceptr ptr, CUstream stream) {
    if (const CUresult status = context_check(); status != CUDA_SUCCESS) return status;
    if (!known_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
    live_bytes_ -= it->second.bytes;
    memory_events_.push_back({api, ptr, it->second.bytes, stream});
    allocations_.erase(it);
    return CUDA_SUCCESS;
  }

  // A fill must lie inside one live allocation; the fake holds no contents, so it is only recorded.
  CUresult fill(const char* api, CUdeviceptr ptr, std::size_t bytes, CUstream stream) {
    if (const CUresult status = context_check(); status != CUDA_SUCCESS) return status;
    if (!known_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    auto it = allocations_.upper_bound(ptr);
    if (it == allocations_.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (ptr + bytes > it->first + it->second.bytes) return CUDA_ERROR_INVALID_VALUE;
    memory_events_.push_back({api, ptr, bytes, stream});
    return CUDA_SUCCESS;
  }

  // The driver entries.
  static CUresult fake_cuInit(unsigned) {
    auto fake = enter("cuInit");
    return fake ? fake->spec_.init_status : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuDriverGetVersion(int* version) {
    auto fake = enter("cuDriverGetVersion");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    *version = 13000;
    return CUDA_SUCCESS;
  }
  // Answered without the active fake, like the real driver's (they work before cuInit).
  static CUresult fake_cuGetErrorName(CUresult status, const char** name) {
    struct Named {
      CUresult status;
      const char* name;
    };
#define FLASHRTC_FAKE_STATUS(code) \
  { code, #code }
    static const Named known[] = {
        FLASHRTC_FAKE_STATUS(CUDA_SUCCESS),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_VALUE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_OUT_OF_MEMORY),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_NOT_INITIALIZED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_DEINITIALIZED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_NO_DEVICE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_DEVICE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_IMAGE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_CONTEXT),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_HANDLE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_NOT_FOUND),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_LAUNCH_FAILED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_CONTEXT_IS_DESTROYED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_NOT_SUPPORTED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_INVALID_CLUSTER_SIZE),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
        FLASHRTC_FAKE_STATUS(CUDA_ERROR_ILLEGAL_STATE),
    };
#undef FLASHRTC_FAKE_STATUS
    for (const Named& entry : known) {
      if (entry.status == status) {
        *name = entry.name;
        return CUDA_SUCCESS;
      }
    }
    *name = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  static CUresult fake_cuGetErrorString(CUresult status, const char** text) {
    const char* name = nullptr;
    const CUresult known = fake_cuGetErrorName(status, &name);
    *text = known == CUDA_SUCCESS ? "reported by the fake driver" : nullptr;
    return known;
  }
  static CUresult fake_cuDeviceGetCount(int* count) {
    auto fake = enter("cuDeviceGetCount");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    *count = fake->spec_.device_count;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuDeviceGet(CUdevice* device, int ordinal) {
    auto fake = enter("cuDeviceGet");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (ordinal < 0 || ordinal >= fake->spec_.device_count) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuDeviceGetName(char* name, int length, CUdevice) {
    auto fake = enter("cuDeviceGetName");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (length <= 0) return CUDA_ERROR_INVALID_VALUE;
    const std::size_t copied = std::min(fake->spec_.name.size(), static_cast<std::size_t>(length) - 1);
    std::memcpy(name, fake->spec_.name.data(), copied);
    name[copied] = '\0';
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
    auto fake = enter("cuDeviceGetAttribute");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    const FakeDeviceSpec& s = fake->spec_;
    switch (attribute) {
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = s.cc_major;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = s.cc_minor;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *value = s.multiprocessors;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *value = s.smem_per_block_optin_bytes;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        *value = s.smem_per_sm_bytes;
        break;
      case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        *value = s.reserved_smem_per_block_bytes;
        break;
      case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        *value = s.l2_cache_bytes;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *value = s.max_threads_per_block;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        *value = s.max_threads_per_sm;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        *value = s.max_blocks_per_sm;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        *value = s.registers_per_sm;
        break;
      default:
        return CUDA_ERROR_NOT_SUPPORTED;  // an attribute the fake does not simulate: extend it here
    }
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuDeviceTotalMem(std::size_t* bytes, CUdevice) {
    auto fake = enter("cuDeviceTotalMem");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    *bytes = fake->spec_.global_memory_bytes;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuCtxGetCurrent(CUcontext* context) {
    auto fake = enter("cuCtxGetCurrent");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    *context = fake->current_;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuCtxSetCurrent(CUcontext context) {
    auto fake = enter("cuCtxSetCurrent");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (context && context != fake->primary_) return CUDA_ERROR_INVALID_CONTEXT;
    fake->current_ = context;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuCtxGetDevice(CUdevice* device) {
    auto fake = enter("cuCtxGetDevice");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    *device = 0;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuCtxSynchronize() {
    auto fake = enter("cuCtxSynchronize");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    return fake->capture_check();
  }
  static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
    auto fake = enter("cuDevicePrimaryCtxRetain");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    *context = fake->primary_;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuModuleLoadData(CUmodule* module, const void* image) {
    auto fake = enter("cuModuleLoadData");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    const std::size_t bytes = image ? elf_image_bytes(image) : 0;
    if (bytes == 0) return CUDA_ERROR_INVALID_IMAGE;  // a cubin is an ELF64 image (PTX is not simulated)
    *module = reinterpret_cast<CUmodule>(new_handle());
    fake->modules_[*module].assign(static_cast<const char*>(image), bytes);
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuModuleUnload(CUmodule module) {
    auto fake = enter("cuModuleUnload");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    return fake->modules_.erase(module) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  // Found when the image holds name as a NUL-terminated string (its symbol table does for every kernel).
  static CUresult fake_cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
    auto fake = enter("cuModuleGetFunction");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    auto it = fake->modules_.find(module);
    if (it == fake->modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (it->second.find(std::string(name) + '\0') == std::string::npos) return CUDA_ERROR_NOT_FOUND;
    *function = reinterpret_cast<CUfunction>(new_handle());
    fake->functions_[*function].name = name;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value) {
    auto fake = enter("cuFuncSetAttribute");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    auto it = fake->functions_.find(f);
    if (it == fake->functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
    switch (attribute) {
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > fake->spec_.smem_per_block_optin_bytes) return CUDA_ERROR_INVALID_VALUE;
        it->second.max_dynamic_smem_bytes = value;
        return CUDA_SUCCESS;
      case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        it->second.non_portable_cluster = value != 0;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  // One block per SM: the fake runs nothing, and split choices only need a positive count.
  static CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int threads,
                                                                   size_t dynamic_smem) {
    auto fake = enter("cuOccupancyMaxActiveBlocksPerMultiprocessor");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (fake->functions_.find(f) == fake->functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (threads <= 0 || dynamic_smem > static_cast<size_t>(fake->spec_.smem_per_block_optin_bytes))
      return CUDA_ERROR_INVALID_VALUE;
    *blocks = 1;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** args,
                                        void** extra) {
    auto fake = enter("cuLaunchKernelEx");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (!config || extra) return CUDA_ERROR_INVALID_VALUE;
    RecordedLaunch launch;
    launch.api = "cuLaunchKernelEx";
    launch.grid[0] = config->gridDimX, launch.grid[1] = config->gridDimY, launch.grid[2] = config->gridDimZ;
    launch.block[0] = config->blockDimX, launch.block[1] = config->blockDimY,
    launch.block[2] = config->blockDimZ;
    launch.dynamic_smem_bytes = config->sharedMemBytes;
    launch.stream = config->hStream;
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      const CUlaunchAttribute& attribute = config->attrs[i];
      launch.attributes.push_back(attribute.id);
      if (attribute.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        launch.cluster[0] = attribute.value.clusterDim.x;
        launch.cluster[1] = attribute.value.clusterDim.y;
        launch.cluster[2] = attribute.value.clusterDim.z;
      }
    }
    return fake->record_launch(std::move(launch), f, args);
  }
  // Writes the call's ordinal (from 1) and the global address into the map, so a test can tell encodings
  // apart.
  static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t,
                                              void* address, const cuuint64_t*, const cuuint64_t*,
                                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                              CUtensorMapSwizzle, CUtensorMapL2promotion,
                                              CUtensorMapFloatOOBfill) {
    auto fake = enter("cuTensorMapEncodeTiled");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (fake->encode_status != CUDA_SUCCESS) return fake->encode_status;
    std::memset(map, 0, sizeof(*map));
    const std::uint64_t ordinal =
        std::count(fake->calls_.begin(), fake->calls_.end(), "cuTensorMapEncodeTiled");
    std::memcpy(map->opaque, &ordinal, sizeof(ordinal));
    std::memcpy(map->opaque + 1, &address, sizeof(address));
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuMemAlloc(CUdeviceptr* ptr, std::size_t bytes) {
    auto fake = enter("cuMemAlloc");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->capture_check(); status != CUDA_SUCCESS) return status;
    return fake->allocate("cuMemAlloc", ptr, bytes, nullptr);
  }
  static CUresult fake_cuMemFree(CUdeviceptr ptr) {
    auto fake = enter("cuMemFree");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->capture_check(); status != CUDA_SUCCESS) return status;
    return fake->release("cuMemFree", ptr, nullptr);
  }
  // Pools are handles only: every allocation comes from the fake's one budget of global memory.
  static CUresult fake_cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
    auto fake = enter("cuMemPoolCreate");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id != 0)
      return CUDA_ERROR_INVALID_VALUE;
    *pool = reinterpret_cast<CUmemoryPool>(new_handle());
    fake->pools_.insert(*pool);
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute, void* value) {
    auto fake = enter("cuMemPoolSetAttribute");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    return fake->pools_.count(pool) && value ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  static CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr* ptr, std::size_t bytes, CUmemoryPool pool,
                                               CUstream stream) {
    auto fake = enter("cuMemAllocFromPoolAsync");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (!fake->pools_.count(pool)) return CUDA_ERROR_INVALID_VALUE;
    return fake->allocate("cuMemAllocFromPoolAsync", ptr, bytes, stream);
  }
  static CUresult fake_cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
    auto fake = enter("cuMemFreeAsync");
    return fake ? fake->release("cuMemFreeAsync", ptr, stream) : CUDA_ERROR_DEINITIALIZED;
  }
  // The fake holds no memory contents: copies and synchronous fills are refused rather than pretended; a
  // stream-ordered fill is recorded (fill()), as a launch is.
  static CUresult fake_cuMemcpyHtoD(CUdeviceptr, const void*, std::size_t) {
    auto fake = enter("cuMemcpyHtoD");
    return fake ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuMemcpyDtoH(void*, CUdeviceptr, std::size_t) {
    auto fake = enter("cuMemcpyDtoH");
    return fake ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuMemsetD8(CUdeviceptr, unsigned char, std::size_t) {
    auto fake = enter("cuMemsetD8");
    return fake ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuMemsetD8Async(CUdeviceptr ptr, unsigned char, std::size_t bytes, CUstream stream) {
    auto fake = enter("cuMemsetD8Async");
    return fake ? fake->fill("cuMemsetD8Async", ptr, bytes, stream) : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuMemsetD32Async(CUdeviceptr ptr, unsigned, std::size_t count, CUstream stream) {
    auto fake = enter("cuMemsetD32Async");
    return fake ? fake->fill("cuMemsetD32Async", ptr, 4 * count, stream) : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuPointerGetAttribute(void*, CUpointer_attribute, CUdeviceptr) {
    auto fake = enter("cuPointerGetAttribute");
    return fake ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuStreamCreate(CUstream* stream, unsigned) {
    auto fake = enter("cuStreamCreate");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    *stream = reinterpret_cast<CUstream>(new_handle());
    fake->streams_.insert(*stream);
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuStreamDestroy(CUstream stream) {
    auto fake = enter("cuStreamDestroy");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    return fake->streams_.erase(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  static CUresult fake_cuStreamSynchronize(CUstream stream) {
    auto fake = enter("cuStreamSynchronize");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    if (const CUresult status = fake->capture_check(); status != CUDA_SUCCESS) return status;
    return fake->known_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  static CUresult fake_cuEventCreate(CUevent* event, unsigned) {
    auto fake = enter("cuEventCreate");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    *event = reinterpret_cast<CUevent>(new_handle());
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuEventDestroy(CUevent) {
    auto fake = enter("cuEventDestroy");
    return fake ? fake->context_check() : CUDA_ERROR_DEINITIALIZED;
  }
  static CUresult fake_cuEventRecord(CUevent, CUstream stream) {
    auto fake = enter("cuEventRecord");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    return fake->known_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  static CUresult fake_cuEventSynchronize(CUevent) {
    auto fake = enter("cuEventSynchronize");
    return fake ? fake->context_check() : CUDA_ERROR_DEINITIALIZED;
  }
  // Nothing runs, so there is no time to report.
  static CUresult fake_cuEventElapsedTime(float*, CUevent, CUevent) {
    auto fake = enter("cuEventElapsedTime");
    return fake ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_DEINITIALIZED;
  }
  // Stream capture: launches on a capturing stream go into its graph; cuGraphLaunch replays them. Stream-
  // ordered allocations made while capturing are kept as plain allocations (graph memory nodes are not
  // simulated).
  static CUresult fake_cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
    auto fake = enter("cuStreamBeginCapture");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    if (!stream)
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy default stream cannot be captured
    if (!fake->known_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    if (fake->capturing_.count(stream)) return CUDA_ERROR_ILLEGAL_STATE;
    const auto graph = reinterpret_cast<CUgraph>(new_handle());
    fake->graphs_[graph];
    fake->capturing_[stream] = graph;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuStreamEndCapture(CUstream stream, CUgraph* graph) {
    auto fake = enter("cuStreamEndCapture");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    auto it = fake->capturing_.find(stream);
    if (it == fake->capturing_.end()) return CUDA_ERROR_ILLEGAL_STATE;
    *graph = it->second;
    fake->capturing_.erase(it);
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, unsigned long long) {
    auto fake = enter("cuGraphInstantiate");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    auto it = fake->graphs_.find(graph);
    if (it == fake->graphs_.end()) return CUDA_ERROR_INVALID_HANDLE;
    *exec = reinterpret_cast<CUgraphExec>(new_handle());
    fake->executables_[*exec] = it->second;
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    auto fake = enter("cuGraphLaunch");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    if (const CUresult status = fake->context_check(); status != CUDA_SUCCESS) return status;
    auto it = fake->executables_.find(exec);
    if (it == fake->executables_.end() || !fake->known_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    for (RecordedLaunch launch : it->second) {
      launch.stream = stream;
      launch.replayed = true;
      fake->launches_.push_back(std::move(launch));
    }
    return CUDA_SUCCESS;
  }
  static CUresult fake_cuGraphDestroy(CUgraph graph) {
    auto fake = enter("cuGraphDestroy");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    return fake->graphs_.erase(graph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  static CUresult fake_cuGraphExecDestroy(CUgraphExec exec) {
    auto fake = enter("cuGraphExecDestroy");
    if (!fake) return CUDA_ERROR_DEINITIALIZED;
    return fake->executables_.erase(exec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }

  inline static FakeDriver* active_ = nullptr;

  FakeDeviceSpec spec_;
  CUcontext primary_ = nullptr;
  CUcontext current_ = nullptr;  // one for the process: the fake does not simulate per-thread contexts
  mutable std::mutex mutex_;
  std::vector<std::string> calls_;
  std::vector<RecordedLaunch> launches_;
  std::vector<MemoryEvent> memory_events_;
  std::map<CUmodule, std::string> modules_;  // image bytes
  std::map<CUfunction, Function> functions_;
  std::map<CUdeviceptr, Allocation> allocations_;
  std::set<CUstream> streams_;
  std::set<CUmemoryPool> pools_;
  std::map<CUstream, CUgraph> capturing_;
  std::map<CUgraph, std::vector<RecordedLaunch>> graphs_;
  std::map<CUgraphExec, std::vector<RecordedLaunch>> executables_;
  std::size_t live_bytes_ = 0;
  std::optional<detail::ScopedDriverForTesting> guard_;
};

// The smallest image the fake's cuModuleLoadData accepts and in which cuModuleGetFunction finds
// kernel_name: an ELF64 header followed by the name (standing in for a cubin's string table).
inline std::string tiny_cubin(const std::string& kernel_name) {
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_shoff = sizeof(header) + kernel_name.size() + 1;  // where the (absent) section headers would start
  std::string image(reinterpret_cast<const char*>(&header), sizeof(header));
  image += kernel_name;
  image += '\0';
  return image;
}

}  // namespace flashrtc::test
