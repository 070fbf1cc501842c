#pragma once
/// Small RAII owners over the Driver API for host tools and tests: device buffers, streams, event timing.
/// All work in the current device's primary context (see attention_forward) and throw Error on failure.
#include <cstddef>
#include <cstdint>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// Owns one device allocation (cuMemAlloc); freed in the destructor, which logs instead of throwing.
class FLASHRTC_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t size() const { return bytes_; }
  /// Synchronous copies; bytes <= size().
  void copy_from_host(const void* src, std::size_t bytes);
  void copy_to_host(void* dst, std::size_t bytes) const;
  /// Fills every byte with value (synchronous), e.g. 0xFF to poison an output with NaNs.
  void fill_bytes(std::uint8_t value);
  /// Fills every byte with value in stream order, without waiting: keeps the GPU busy while the host
  /// queues what follows (a benchmark evicting the L2 cache between timed launches).
  void fill_bytes_async(std::uint8_t value, void* stream);

 private:
  std::uintptr_t ptr_ = 0;
  std::size_t bytes_ = 0;
};

/// Owns a non-blocking stream (cuStreamCreate).
class FLASHRTC_API Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return stream_; }
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

/// Times work on a stream with a pair of CUDA events.
class FLASHRTC_API EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(void* stream);
  void stop(void* stream);
  /// Waits for the stop event; milliseconds between start and stop.
  float elapsed_ms() const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

/// Waits for all work of the current context (cuCtxSynchronize); throws Error(kDriver) with the failure of
/// any earlier asynchronous launch.
FLASHRTC_API void device_synchronize();

}  // namespace flashrtc
