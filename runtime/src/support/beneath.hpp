#pragma once
// Files below a trusted directory whose lower parts anyone with write access may have replaced with
// symbolic links (a shared cache directory). Every component below the trusted base is opened relative to
// its parent's descriptor without following links, so nothing here reads, creates or removes anything
// outside base.
#include <filesystem>
#include <string>

namespace flashrtc::detail {

// An open descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

struct OpenedDir {
  Fd fd;                 // valid when every component is a directory
  bool missing = false;  // a component does not exist or is a plain file: nothing is there
  std::string problem;   // else why not, naming the component: "<path> is a symbolic link", errno's text
  bool ok() const { return fd.valid(); }
};

// Opens base/relative as a directory. base is followed as given (the user chose it); each component of
// relative must be a directory, not a link to one. create: missing components are made (mode 0755).
// Never throws.
OpenedDir open_directory_beneath(const std::filesystem::path& base, const std::filesystem::path& relative,
                                 bool create);

// Removes base/relative: a directory with everything in it, or a file, or a symbolic link itself (never
// what a link names). A missing one is no error. Throws Error(kCacheIo) naming what could not be removed.
void remove_beneath(const std::filesystem::path& base, const std::filesystem::path& relative);

}  // namespace flashrtc::detail
