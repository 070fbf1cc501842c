#include "compile/kernel_sources.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "compile/embedded_sources.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"
#include "support/hashing.hpp"
#include "support/log.hpp"

namespace flashrtc::detail {

namespace {

void finish(KernelSourceSet& set) {
  std::sort(set.files.begin(), set.files.end());
  Digest digest;
  for (const auto& [path, content] : set.files) {
    digest.add(path);
    digest.add(content);
  }
  set.hash = digest.hex();
}

KernelSourceSet load_embedded() {
  KernelSourceSet set;
  set.origin = "embedded";
  for (const EmbeddedSource& source : embedded_kernel_sources())
    set.files.emplace_back(std::string(source.path), std::string(source.content));
  finish(set);
  return set;
}

KernelSourceSet load_directory(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(dir, error))
    throw Error(ErrorCode::kCacheIo, "FLASHRTC_KERNEL_DIR=" + dir.string() + " is not a directory");
  KernelSourceSet set;
  set.origin = dir.string();
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (!it->is_regular_file() || it->path().extension() != ".cuh") continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    if (!in) throw Error(ErrorCode::kCacheIo, "cannot read kernel source " + it->path().string());
    set.files.emplace_back(fs::relative(it->path(), dir).generic_string(), content.str());
  }
  if (error) throw Error(ErrorCode::kCacheIo, "cannot list FLASHRTC_KERNEL_DIR=" + dir.string() + ": " + error.message());
  if (set.files.empty()) throw Error(ErrorCode::kCacheIo, "FLASHRTC_KERNEL_DIR=" + dir.string() + " holds no .cuh file");
  finish(set);
  log().info("kernel sources read from {} ({} files)", set.origin, set.files.size());
  return set;
}

}  // namespace

const KernelSourceSet& kernel_sources() {
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::unique_ptr<KernelSourceSet>> loaded;  // "" = embedded
  const std::filesystem::path dir = runtime_config().kernel_dir;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(dir);
  if (it == loaded.end())
    it = loaded.emplace(dir, std::make_unique<KernelSourceSet>(dir.empty() ? load_embedded() : load_directory(dir))).first;
  return *it->second;
}

}  // namespace flashrtc::detail
