#include "driver/stream_scratch.hpp"

#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

#include "driver/context.hpp"
#include "driver/driver_api.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

// What the scratch pool keeps reserved across synchronizations. The device's default pool keeps nothing, so
// after every synchronization the next call's allocation mapped memory again: about 50 us on an H200 for
// each causal call of a caller that synchronizes after every call (the 4-byte tile counter).
constexpr cuuint64_t kPoolKeptBytes = cuuint64_t{64} << 20;

// flashrtc's own stream-ordered pool for the current context's device, made once per context: the
// device's default pool, which the application may rely on or tune, is left as it is.
CUmemoryPool scratch_pool() {
  const ContextInfo& context = current_context();
  std::call_once(context.scratch_pool_made, [&context] {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = context.device;
    CUmemoryPool pool = nullptr;
    if (const CUresult status = driver().cuMemPoolCreate(&pool, &props); status != CUDA_SUCCESS)
      throw Error(ErrorCode::kDriver, "cannot create the scratch memory pool on " + context.name,
                  "cuMemPoolCreate", driver_status_name(status));
    cuuint64_t kept = kPoolKeptBytes;
    if (const CUresult status = driver().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &kept);
        status != CUDA_SUCCESS)
      throw Error(ErrorCode::kDriver, "cannot set the scratch memory pool's release threshold",
                  "cuMemPoolSetAttribute", driver_status_name(status));
    // Never destroyed: allocations from it may be in flight until the process ends, as with the contexts.
    context.scratch_pool = pool;
  });
  return context.scratch_pool;
}

}  // namespace

Scratch Scratch::on_stream(std::size_t bytes, CUstream stream) {
  Scratch scratch;
  if (bytes == 0) return scratch;
  CUdeviceptr ptr = 0;
  const CUresult status = driver().cuMemAllocFromPoolAsync(&ptr, bytes, scratch_pool(), stream);
  if (status != CUDA_SUCCESS)
    throw Error(ErrorCode::kDriver,
                "cannot allocate " + std::to_string(bytes) + " bytes of scratch memory on the stream",
                "cuMemAllocFromPoolAsync", driver_status_name(status));
  scratch.ptr_ = ptr;
  scratch.bytes_ = bytes;
  scratch.stream_ = stream;
  scratch.owned_ = true;
  return scratch;
}

Scratch Scratch::borrowed(void* ptr, std::size_t given_bytes, std::size_t required_bytes) {
  if (given_bytes < required_bytes)
    throw Error(ErrorCode::kInvalidArgument, "workspace too small: the call needs " +
                                                 std::to_string(required_bytes) + " bytes, " +
                                                 std::to_string(given_bytes) + " bytes were given");
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!ptr && required_bytes > 0)
    throw Error(ErrorCode::kInvalidArgument,
                "workspace is null: the call needs " + std::to_string(required_bytes) + " bytes");
  if (address % kScratchAlignBytes) {
    std::ostringstream text;
    text << "workspace=" << ptr << ": must be " << kScratchAlignBytes << "-byte aligned";
    throw Error(ErrorCode::kInvalidArgument, text.str());
  }
  Scratch scratch;
  scratch.ptr_ = static_cast<CUdeviceptr>(address);
  scratch.bytes_ = given_bytes;
  return scratch;
}

void Scratch::release() noexcept {
  if (owned_ && ptr_) {
    // driver() served the allocation; it throws only if a test has since installed a table without a
    // device, which is then logged like any failed free.
    CUresult status = CUDA_ERROR_DEINITIALIZED;
    try {
      status = driver().cuMemFreeAsync(ptr_, stream_);
    } catch (...) {
    }
    log_release_failure(status, "cuMemFreeAsync");
  }
  ptr_ = 0;
  bytes_ = 0;
  stream_ = nullptr;
  owned_ = false;
}

Scratch::~Scratch() {
  release();
}

Scratch::Scratch(Scratch&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      stream_(std::exchange(other.stream_, nullptr)),
      owned_(std::exchange(other.owned_, false)) {}

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ = std::exchange(other.stream_, nullptr);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

}  // namespace flashrtc::detail
