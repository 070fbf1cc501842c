#pragma once
// What the compile and cache layers trade in. Generic: nothing here knows about attention.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "compile/nvrtc_compiler.hpp"
#include "flashrtc/compiled_kernel.hpp"

namespace flashrtc::detail {

// Bumped whenever the on-disk layout or the meta.json schema changes: old entries are then ignored.
// 2: the NVRTC build in the key, the entry digest over every file and field, bounded reads.
// 3: resources.wgmma_serialized and wgmma_serialized_reason (ptxas's advisory that it serialized wgmma).
inline constexpr int kCacheFormatVersion = 3;

// Everything that changes the generated code. The key is its digest.
struct KeyInputs {
  std::string source_hash;
  std::string name_expression;
  std::string options;  // joined NVRTC options
  std::string arch;
  std::string nvrtc_version;
  // Set here, not by each kernel family, so that no request can leave it out: a patch release of NVRTC
  // (another ptxas) must never be served this build's cubin.
  std::string nvrtc_build = nvrtc_build_identity();
  int format_version = kCacheFormatVersion;

  nlohmann::json to_json() const;
  std::string key() const;
};

struct CompileRequest {
  KeyInputs inputs;
  NvrtcInput nvrtc;
  nlohmann::json description;  // what the kernel is (dtype, head dim, tile...), stored in meta.json for tools
};

struct KernelArtifact {
  std::string key;
  KeyInputs inputs;
  std::string lowered_name;
  std::string cubin;
  std::string ptx;
  std::string log;
  ResourceReport resources;
  double compile_ms = 0;
  CacheSource source = CacheSource::kCompiled;
  std::filesystem::path entry_dir;
  nlohmann::json description;
};

// The artifact of request compiled under key: NVRTC's output with ptxas's report parsed.
KernelArtifact artifact_from_compile(const CompileRequest& request, const std::string& key,
                                     NvrtcOutput output);

}  // namespace flashrtc::detail
