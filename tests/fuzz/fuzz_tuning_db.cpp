// libFuzzer target: the tuning database reader (read_tuning_db_file) on an arbitrary file. It must never
// crash, hang or throw; every entry it accepts has the ranges its reader promises.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tuning/tuning_db_file.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path =
      fs::temp_directory_path() / ("flashrtc-fuzz-tune-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const flashrtc::detail::TuningDbContents contents = flashrtc::detail::read_tuning_db_file(path);
  if (contents.ignored && !contents.entries.empty()) std::abort();
  for (const flashrtc::TuningEntry& e : contents.entries)
    if (e.key.head_dim < 1 || e.config.block_m < 1 || e.config.block_n < 1 || e.config.warps < 1 ||
        e.config.stages < 1 || e.key.seqlen_q_bucket < 1 || e.key.seqlen_kv_bucket < 1)
      std::abort();
  return 0;
}
