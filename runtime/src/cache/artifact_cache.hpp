#pragma once
// Memory cache over the disk cache over NVRTC: the compiled artifact of a request, found or made once per
// process. Thread-safe: concurrent requests for one key compile it once (threads share a future; processes
// share the disk cache's lock). Loading an artifact into a context is the driver layer's (loaded_kernels.hpp).
#include <memory>

#include "compile/kernel_artifact.hpp"

namespace flashrtc::detail {

// The compiled kernel for request: from memory, else disk, else NVRTC (then written to disk).
// Throws Error(kCompileDisallowed) under FLASHRTC_REQUIRE_CACHED when it would compile, kNvrtc, kCacheIo.
// *how (optional) says where this call found it: kMemory, kDisk or kCompiled.
std::shared_ptr<const KernelArtifact> get_artifact(const CompileRequest& request, CacheSource* how = nullptr);

CacheStats artifact_cache_stats();

}  // namespace flashrtc::detail
