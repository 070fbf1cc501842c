#pragma once
// Staging a cache nobody may write: root writes regardless of permissions, so a test also runs the code
// under test as nobody.
#include <filesystem>

namespace flashrtc::test {

/// nobody's user and group id, which a root test process switches to in a child.
inline constexpr unsigned kNobodyId = 65534;

/// Every file and directory under dir without write permission for anyone (writable false), or with it.
inline void set_writable(const std::filesystem::path& dir, bool writable) {
  namespace fs = std::filesystem;
  const auto perms = fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write;
  const auto how = writable ? fs::perm_options::add : fs::perm_options::remove;
  for (fs::recursive_directory_iterator it(dir), end; it != end; ++it)
    if (!it->is_symlink()) fs::permissions(it->path(), perms, how);
  fs::permissions(dir, perms, how);
}

}  // namespace flashrtc::test
