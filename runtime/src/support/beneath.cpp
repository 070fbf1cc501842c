#include "support/beneath.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;

namespace {

// Far deeper than anything the cache writes (<version>/<arch>/<key>/<file>); a deeper tree is not ours to
// walk with a descriptor per level.
constexpr int kMaxRemoveDepth = 16;

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

Error remove_error(const fs::path& path, const std::string& why) {
  return Error(ErrorCode::kCacheIo, "cannot remove " + path.string() + ": " + why);
}

// Empties the directory open as dir (named path, for messages): links and files are unlinked, directories
// emptied the same way through their own descriptors, then removed.
void remove_contents(int dir, const fs::path& path, int depth) {
  if (depth > kMaxRemoveDepth)
    throw remove_error(path, "nests deeper than " + std::to_string(kMaxRemoveDepth) + " levels");
  const int listing = ::dup(dir);
  DIR* stream = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (!stream) {
    const int saved = errno;
    if (listing >= 0) ::close(listing);
    throw remove_error(path, std::strerror(saved));
  }
  struct Closer {
    DIR* stream;
    ~Closer() { ::closedir(stream); }
  } closer{stream};
  for (errno = 0; const dirent* item = ::readdir(stream); errno = 0) {
    const std::string name = item->d_name;
    if (name == "." || name == "..") continue;
    struct stat info {};
    if (::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      throw remove_error(path / name, std::strerror(errno));
    }
    if (S_ISDIR(info.st_mode)) {
      const Fd child(::openat(dir, name.c_str(), kDirFlags));
      if (!child.valid()) throw remove_error(path / name, std::strerror(errno));
      remove_contents(child.get(), path / name, depth + 1);
    }
    if (::unlinkat(dir, name.c_str(), S_ISDIR(info.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
      throw remove_error(path / name, std::strerror(errno));
  }
  if (errno != 0) throw remove_error(path, std::strerror(errno));
}

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

OpenedDir open_directory_beneath(const fs::path& base, const fs::path& relative, bool create) {
  OpenedDir result;
  const fs::path start = base.empty() ? fs::path(".") : base;
  Fd dir(::open(start.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    const int error = errno;
    if (create && error == ENOENT) {
      std::error_code made;
      fs::create_directories(start, made);
      if (!made && fs::is_directory(start, made)) return open_directory_beneath(base, relative, true);
      result.problem = "cannot create directory " + start.string() + ": " + made.message();
      return result;
    }
    // ENOTDIR: a part of base is no directory, so nothing below it is there either.
    result.missing = error == ENOENT || error == ENOTDIR;
    result.problem = start.string() + ": " + std::strerror(error);
    return result;
  }
  fs::path shown = start;
  for (const fs::path& part : relative) {
    const std::string name = part.string();
    if (name.empty() || name == ".") continue;
    shown /= part;
    if (name == "..") {
      result.problem = shown.string() + ": leads out of " + start.string();
      return result;
    }
    Fd next(::openat(dir.get(), name.c_str(), kDirFlags));
    if (!next.valid() && errno == ENOENT && create) {
      if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        result.problem = "cannot create directory " + shown.string() + ": " + std::strerror(errno);
        return result;
      }
      next = Fd(::openat(dir.get(), name.c_str(), kDirFlags));
    }
    if (!next.valid()) {
      const int error = errno;
      struct stat info {};
      // O_NOFOLLOW reports a link as ELOOP, O_DIRECTORY a link or file as ENOTDIR: lstat tells which.
      const bool link =
          ::fstatat(dir.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(info.st_mode);
      // A file where a directory should be holds nothing either; a link may name anything.
      result.missing = error == ENOENT || (error == ENOTDIR && !link);
      result.problem = shown.string() + (link               ? " is a symbolic link"
                                         : error == ENOTDIR ? " is not a directory"
                                         : result.missing   ? ": missing"
                                                            : ": " + std::string(std::strerror(error)));
      return result;
    }
    dir = std::move(next);
  }
  result.fd = std::move(dir);
  return result;
}

void remove_beneath(const fs::path& base, const fs::path& relative) {
  const fs::path full = base / relative;
  const std::string name = relative.filename().string();
  if (name.empty() || name == "." || name == "..") throw remove_error(full, "not a removable name");
  OpenedDir parent = open_directory_beneath(base, relative.parent_path(), false);
  if (!parent.ok()) {
    if (parent.missing) return;
    throw remove_error(full, parent.problem);
  }
  struct stat info {};
  if (::fstatat(parent.fd.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw remove_error(full, std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) {
    const Fd dir(::openat(parent.fd.get(), name.c_str(), kDirFlags));
    if (!dir.valid()) throw remove_error(full, std::strerror(errno));
    remove_contents(dir.get(), full, 1);
  }
  if (::unlinkat(parent.fd.get(), name.c_str(), S_ISDIR(info.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
      errno != ENOENT)
    throw remove_error(full, std::strerror(errno));
}

}  // namespace flashrtc::detail
