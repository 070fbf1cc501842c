#include "support/atomic_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;

std::string unique_temp_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  std::ostringstream s;
  s << ::getpid() << "-" << std::hex << rng();
  return s.str();
}

void write_whole_file(const fs::path& path, std::string_view content) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out)
    throw Error(ErrorCode::kCacheIo,
                "cannot write " + path.string() + ": " + (errno ? std::strerror(errno) : "write failed"));
}

void write_file_atomically(const fs::path& path, std::string_view content) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + unique_temp_suffix());
  std::error_code error;
  try {
    write_whole_file(tmp, content);
  } catch (...) {
    fs::remove(tmp, error);
    throw;
  }
  fs::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(ErrorCode::kCacheIo,
                "cannot rename " + tmp.string() + " to " + path.string() + ": " + error.message());
  }
}

}  // namespace flashrtc::detail
