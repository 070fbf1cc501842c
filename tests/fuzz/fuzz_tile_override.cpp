// libFuzzer target: the FLASHRTC_CONFIG parser (parse_tile_override). It either returns fields that are
// positive or throws flashrtc::Error(kInvalidArgument) naming FLASHRTC_CONFIG; nothing else.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const flashrtc::TileOverride o = flashrtc::parse_tile_override(text);
    for (const auto& field : {o.block_m, o.block_n, o.warps, o.stages})
      if (field && *field < 1) std::abort();
  } catch (const flashrtc::Error& e) {
    if (e.code() != flashrtc::ErrorCode::kInvalidArgument || e.message().rfind("FLASHRTC_CONFIG", 0) != 0)
      std::abort();
  }
  return 0;
}
