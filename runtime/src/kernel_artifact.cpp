#include "kernel_artifact.hpp"

#include "hashing.hpp"

namespace flashrtc::detail {

nlohmann::json KeyInputs::to_json() const {
  return {{"format_version", format_version}, {"source_hash", source_hash}, {"name_expression", name_expression},
          {"options", options},               {"arch", arch},               {"nvrtc_version", nvrtc_version},
          {"nvrtc_build", nvrtc_build}};
}

std::string KeyInputs::key() const { return digest_hex(to_json().dump()); }

}  // namespace flashrtc::detail
