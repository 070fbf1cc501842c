// libFuzzer target: the FLASHRTC_CONFIG parser (parse_tile_override). It either returns the fields (any int:
// ranges are check_forward_config's job) or throws flashrtc::Error(kInvalidArgument) naming FLASHRTC_CONFIG;
// nothing else, and never crashes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)flashrtc::parse_tile_override(text);
  } catch (const flashrtc::Error& e) {
    if (e.code() != flashrtc::ErrorCode::kInvalidArgument || e.message().rfind("FLASHRTC_CONFIG", 0) != 0)
      std::abort();
  }
  return 0;
}
