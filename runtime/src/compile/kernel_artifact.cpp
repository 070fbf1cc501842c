#include "compile/kernel_artifact.hpp"

#include "compile/ptxas_report.hpp"
#include "support/hashing.hpp"

namespace flashrtc::detail {

nlohmann::json KeyInputs::to_json() const {
  return {{"format_version", format_version}, {"source_hash", source_hash}, {"name_expression", name_expression},
          {"options", options},               {"arch", arch},               {"nvrtc_version", nvrtc_version},
          {"nvrtc_build", nvrtc_build}};
}

std::string KeyInputs::key() const { return digest_hex(to_json().dump()); }

KernelArtifact artifact_from_compile(const CompileRequest& request, const std::string& key, NvrtcOutput output) {
  KernelArtifact artifact;
  artifact.key = key;
  artifact.inputs = request.inputs;
  artifact.lowered_name = std::move(output.lowered_name);
  artifact.resources = parse_ptxas_report(output.log, artifact.lowered_name);
  artifact.cubin = std::move(output.cubin);
  artifact.ptx = std::move(output.ptx);
  artifact.log = std::move(output.log);
  artifact.compile_ms = output.compile_ms;
  artifact.description = request.description;
  artifact.source = CacheSource::kCompiled;
  return artifact;
}

}  // namespace flashrtc::detail
