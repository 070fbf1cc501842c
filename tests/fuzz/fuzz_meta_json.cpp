// libFuzzer target: the cache entry reader (read_entry) on an arbitrary meta.json beside small companion
// files. It must never crash, hang or throw, and a problem it reports must be printable ASCII.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/cache_entry_layout.hpp"

namespace fs = std::filesystem;

namespace {

// The seed corpus's entry: its key and arch name the directory, as in a real cache.
constexpr const char* kSeedArch = "sm_80";
constexpr const char* kSeedKey = "7394437faaad020d0635e2850cbc1203";

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

const fs::path& entry_dir() {
  static const fs::path dir = [] {
    const fs::path root = fs::temp_directory_path() / ("flashrtc-fuzz-meta-" + std::to_string(::getpid()));
    const fs::path entry = root / kSeedArch / kSeedKey;
    fs::create_directories(entry);
    // Sizes as the seed's meta.json records them (5, 3, 3 bytes).
    write_file(entry / flashrtc::detail::kCubinFile, "CUBIN");
    write_file(entry / flashrtc::detail::kPtxFile, "PTX");
    write_file(entry / flashrtc::detail::kLogFile, "LOG");
    std::atexit([] {
      fs::remove_all(fs::temp_directory_path() / ("flashrtc-fuzz-meta-" + std::to_string(::getpid())));
    });
    return entry;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = entry_dir();
  write_file(dir / flashrtc::detail::kMetaFile, std::string(reinterpret_cast<const char*>(data), size));
  const flashrtc::detail::EntryRead read = flashrtc::detail::read_entry(dir);
  for (const char c : read.problem)
    if (c < 0x20 || c > 0x7e) std::abort();  // the reader promises printable ASCII
  if (read.artifact.has_value() == !read.problem.empty()) std::abort();
  return 0;
}
