#pragma once
// Scratch memory for one operation, ordered on the call's stream: taken from the stream-ordered allocator
// (no device synchronization, and capturable into a CUDA graph) or lent by the caller as a workspace.
#include <cuda.h>

#include <cstddef>

namespace flashrtc::detail {

// What a kernel may assume of any scratch pointer: its 16-byte vector accesses stay aligned.
constexpr std::size_t kScratchAlignBytes = 16;
// bytes rounded up so that what follows them in one scratch allocation stays kScratchAlignBytes-aligned.
constexpr std::size_t scratch_aligned(std::size_t bytes) {
  return (bytes + kScratchAlignBytes - 1) / kScratchAlignBytes * kScratchAlignBytes;
}

// Owns a stream-ordered allocation until it is freed with cuMemFreeAsync on the same stream, or refers to
// a caller's workspace, which it never frees. Move-only.
class Scratch {
 public:
  // bytes of device memory allocated on stream from flashrtc's memory pool for the current context (made on
  // first use; it keeps up to 64 MiB reserved across synchronizations); work queued on
  // stream before this owner dies may use it, since the free is queued after that work. 0 bytes allocates
  // nothing. Needs stream's context current (an operation has called current_context()). Throws
  // Error(kDriver) naming cuMemAllocFromPoolAsync, the bytes and the status (CUDA_ERROR_OUT_OF_MEMORY when the
  // pool cannot grow), or naming cuMemPoolCreate / cuMemPoolSetAttribute when the pool cannot be made.
  static Scratch on_stream(std::size_t bytes, CUstream stream);
  // The caller's workspace of given_bytes at ptr, for an operation that needs required_bytes. Throws
  // Error(kInvalidArgument) naming both sizes when given_bytes < required_bytes, and when ptr is null (while
  // required_bytes > 0) or not kScratchAlignBytes-aligned.
  static Scratch borrowed(void* ptr, std::size_t given_bytes, std::size_t required_bytes);

  Scratch() = default;
  // Queues the free of an owned allocation on its stream; a failure is logged, never thrown.
  ~Scratch();
  Scratch(Scratch&& other) noexcept;
  Scratch& operator=(Scratch&& other) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  CUdeviceptr data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  bool owned() const { return owned_; }

 private:
  void release() noexcept;

  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  CUstream stream_ = nullptr;
  bool owned_ = false;
};

}  // namespace flashrtc::detail
