#include "flashrtc/device_memory.hpp"

#include <utility>

#include "driver/context.hpp"
#include "driver/driver_api.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc {

using detail::log_release_failure;

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  detail::current_context();
  CUdeviceptr ptr = 0;
  if (bytes > 0) FLASHRTC_CU_CHECK(cuMemAlloc, &ptr, bytes);
  ptr_ = static_cast<std::uintptr_t>(ptr);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) log_release_failure(detail::driver().cuMemFree(static_cast<CUdeviceptr>(ptr_)), "cuMemFree");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes) {
  if (bytes > bytes_) throw Error(ErrorCode::kInvalidArgument, "copy_from_host: more bytes than the buffer holds");
  if (bytes) FLASHRTC_CU_CHECK(cuMemcpyHtoD, static_cast<CUdeviceptr>(ptr_), src, bytes);
}

void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes) const {
  if (bytes > bytes_) throw Error(ErrorCode::kInvalidArgument, "copy_to_host: more bytes than the buffer holds");
  if (bytes) FLASHRTC_CU_CHECK(cuMemcpyDtoH, dst, static_cast<CUdeviceptr>(ptr_), bytes);
}

void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (bytes_) FLASHRTC_CU_CHECK(cuMemsetD8, static_cast<CUdeviceptr>(ptr_), value, bytes_);
  FLASHRTC_CU_CHECK(cuCtxSynchronize);
}

void DeviceBuffer::fill_bytes_async(std::uint8_t value, void* stream) {
  if (bytes_)
    FLASHRTC_CU_CHECK(cuMemsetD8Async, static_cast<CUdeviceptr>(ptr_), value, bytes_, static_cast<CUstream>(stream));
}

Stream::Stream() {
  detail::current_context();
  CUstream stream = nullptr;
  FLASHRTC_CU_CHECK(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  stream_ = stream;
}

Stream::~Stream() {
  if (stream_) log_release_failure(detail::driver().cuStreamDestroy(static_cast<CUstream>(stream_)), "cuStreamDestroy");
}

void Stream::synchronize() const { FLASHRTC_CU_CHECK(cuStreamSynchronize, static_cast<CUstream>(stream_)); }

EventTimer::EventTimer() {
  detail::current_context();
  CUevent start = nullptr, stop = nullptr;
  FLASHRTC_CU_CHECK(cuEventCreate, &start, CU_EVENT_DEFAULT);
  start_ = start;
  FLASHRTC_CU_CHECK(cuEventCreate, &stop, CU_EVENT_DEFAULT);
  stop_ = stop;
}

EventTimer::~EventTimer() {
  if (start_) log_release_failure(detail::driver().cuEventDestroy(static_cast<CUevent>(start_)), "cuEventDestroy");
  if (stop_) log_release_failure(detail::driver().cuEventDestroy(static_cast<CUevent>(stop_)), "cuEventDestroy");
}

void EventTimer::start(void* stream) {
  FLASHRTC_CU_CHECK(cuEventRecord, static_cast<CUevent>(start_), static_cast<CUstream>(stream));
}

void EventTimer::stop(void* stream) {
  FLASHRTC_CU_CHECK(cuEventRecord, static_cast<CUevent>(stop_), static_cast<CUstream>(stream));
}

float EventTimer::elapsed_ms() const {
  FLASHRTC_CU_CHECK(cuEventSynchronize, static_cast<CUevent>(stop_));
  float ms = 0;
  FLASHRTC_CU_CHECK(cuEventElapsedTime, &ms, static_cast<CUevent>(start_), static_cast<CUevent>(stop_));
  return ms;
}

void device_synchronize() {
  detail::current_context();
  FLASHRTC_CU_CHECK(cuCtxSynchronize);
}

}  // namespace flashrtc
