#pragma once
// Memory cache over the disk cache over NVRTC, plus loaded modules per context. Thread-safe: concurrent
// requests for one key compile it once (threads share a future; processes share the disk cache's lock).
#include <cuda.h>

#include <memory>

#include "kernel_artifact.hpp"

namespace flashrtc::detail {

// The compiled kernel for request: from memory, else disk, else NVRTC (then written to disk).
// Throws Error(kCompileDisallowed) under FLASHRTC_REQUIRE_CACHED when it would compile, kNvrtc, kCacheIo.
// *how (optional) says where this call found it: kMemory, kDisk or kCompiled.
std::shared_ptr<const KernelArtifact> get_artifact(const CompileRequest& request, CacheSource* how = nullptr);

// A kernel function loaded into a context. Modules stay loaded for the life of the process.
struct LoadedKernel {
  CUfunction function = nullptr;
  std::shared_ptr<const KernelArtifact> artifact;
};

// Loads request's kernel into context (once per context and key) and raises its dynamic shared memory
// limit to dynamic_smem_bytes.
const LoadedKernel& get_loaded_kernel(CUcontext context, const CompileRequest& request, int dynamic_smem_bytes);

CacheStats kernel_cache_stats();

}  // namespace flashrtc::detail
