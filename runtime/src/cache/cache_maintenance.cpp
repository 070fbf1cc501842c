// `flashrtc cache verify / prune / clear`: removing entries without disturbing processes that use the cache,
// and saying what could not be removed (a read-only cache) instead of failing half-way.
#include <algorithm>
#include <chrono>

#include "cache/cache_entry_layout.hpp"
#include "cache/cache_scan.hpp"
#include "cache/disk_cache.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/error.hpp"
#include "support/beneath.hpp"
#include "support/json_checked.hpp"

namespace flashrtc {

namespace fs = std::filesystem;

namespace {

// A temporary this old belongs to no running store (which renames it within milliseconds).
constexpr std::int64_t kTemporaryMaxAgeSeconds = 3600;

std::string age_text(std::int64_t seconds) {
  if (seconds >= 2 * 86400) return std::to_string(seconds / 86400) + " days";
  if (seconds >= 2 * 3600) return std::to_string(seconds / 3600) + " hours";
  return std::to_string(seconds / 60) + " minutes";
}

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

RemovedEntry describe(const fs::path& dir, std::string reason) {
  return {detail::printable_ascii(dir.filename().string()),
          detail::printable_ascii(dir.parent_path().filename().string()),
          std::move(reason),
          detail::directory_bytes(dir),
          {}};
}

void file_under(CacheCleanup& result, RemovedEntry entry, const std::string& error) {
  entry.error = detail::printable_ascii(error);
  (error.empty() ? result.removed : result.not_removed).push_back(std::move(entry));
}

// Removes path, found under root, without following a link on the way or at its end (a link goes, not what
// it names): a writable cache is no licence to remove anything outside it. Returns why not, or "".
std::string remove_below(const fs::path& root, const fs::path& path) {
  const fs::path base = root.parent_path();
  try {
    detail::remove_beneath(base, path.lexically_relative(base));
  } catch (const Error& e) {
    return e.message();
  }
  return {};
}

// Under the key's lock, so that a process compiling this key waits for the removal and then stores its own;
// the lock file goes too. Returns why it could not be removed, or "".
std::string remove_entry(const fs::path& root, const fs::path& dir) {
  try {
    detail::FileLock lock = detail::lock_entry_file(dir);
    const std::string error = remove_below(root, dir);
    if (!error.empty()) return error;
    lock.remove_file();
  } catch (const Error& e) {
    return e.message();
  }
  return {};
}

bool is_link(const fs::path& path) {
  std::error_code error;
  return fs::symlink_status(path, error).type() == fs::file_type::symlink;
}

// Links where the cache has a directory or a lock file: each goes as a link, reported as bad.
void remove_links(CacheCleanup& result, const fs::path& root) {
  for (const fs::path& link : detail::cache_linked_directories(root))
    file_under(
        result,
        describe(link, "a symbolic link where the cache has a directory (what it names is left alone)"),
        remove_below(root, link));
  for (const fs::path& lock_path : detail::cache_lock_files(root))
    if (is_link(lock_path))
      file_under(
          result,
          describe(lock_path, "a symbolic link where a lock file should be (what it names is left alone)"),
          remove_below(root, lock_path));
}

}  // namespace

CacheCleanup verify_cache() {
  CacheCleanup result;
  const fs::path root = cache_root();
  remove_links(result, root);
  for (const fs::path& dir : detail::cache_entry_dirs(root)) {
    ++result.entries_checked;
    std::string problem = detail::cache_entry_problem(dir);
    if (problem.empty()) {
      result.bytes_kept += detail::directory_bytes(dir);
      continue;
    }
    RemovedEntry entry = describe(dir, std::move(problem));
    const std::string error = remove_entry(root, dir);
    if (!error.empty()) result.bytes_kept += entry.bytes;
    file_under(result, std::move(entry), error);
  }
  const std::int64_t now = now_unix();
  for (const fs::path& dir : detail::cache_temporaries(root))
    if (now - detail::modified_unix(dir) > kTemporaryMaxAgeSeconds) {
      RemovedEntry entry = describe(dir, "temporary left by an interrupted write");
      file_under(result, std::move(entry), remove_below(root, dir));
    }
  // A lock file whose entry is absent guards nothing once we hold it (a compile in progress holds it until
  // its entry is in place). Lock files are no entries: one that cannot be removed is not reported.
  for (const fs::path& lock_path : detail::cache_lock_files(root)) {
    const fs::path entry_dir = lock_path.parent_path() / lock_path.stem();
    std::error_code error;
    const auto exists = [&] { return fs::exists(fs::symlink_status(entry_dir, error)); };
    if (exists()) continue;
    try {
      detail::FileLock lock = detail::lock_entry_file(entry_dir);
      if (!exists()) lock.remove_file();
    } catch (const Error&) {
    }
  }
  return result;
}

CacheCleanup prune_cache(std::optional<std::int64_t> older_than_seconds,
                         std::optional<std::uint64_t> max_bytes) {
  CacheCleanup result;
  const fs::path root = cache_root();
  std::vector<CacheEntry> entries = list_cache_entries();
  result.entries_checked = entries.size();
  // Least recently used first.
  std::sort(entries.begin(), entries.end(),
            [](const CacheEntry& a, const CacheEntry& b) { return a.last_used_unix < b.last_used_unix; });
  std::uint64_t total = 0;
  for (const CacheEntry& e : entries) total += e.size_bytes;
  const std::int64_t now = now_unix();
  for (const CacheEntry& e : entries) {
    std::string reason;
    if (older_than_seconds && now - e.last_used_unix > *older_than_seconds)
      reason = "unused for " + age_text(now - e.last_used_unix);
    else if (max_bytes && total > *max_bytes)
      reason = "least recently used while the cache exceeds " + std::to_string(*max_bytes) + " bytes";
    if (reason.empty()) continue;
    const std::string error = remove_entry(root, e.dir);
    if (error.empty()) total -= e.size_bytes;
    file_under(result, {e.key, e.arch, std::move(reason), e.size_bytes, {}}, error);
  }
  result.bytes_kept = total;
  return result;
}

CacheCleanup clear_cache() {
  CacheCleanup result;
  const fs::path root = cache_root();
  remove_links(result, root);
  for (const fs::path& dir : detail::cache_entry_dirs(root)) {
    ++result.entries_checked;
    RemovedEntry entry = describe(dir, "clear");
    const std::string error = remove_entry(root, dir);
    if (!error.empty()) result.bytes_kept += entry.bytes;
    file_under(result, std::move(entry), error);
  }
  // Lock files and temporaries too: the format-version directory goes as a whole.
  if (result.not_removed.empty()) {
    const std::uint64_t bytes = detail::directory_bytes(root);
    const std::string error = remove_below(root, root);
    if (!error.empty()) result.not_removed.push_back({root.filename().string(), "", "clear", bytes, error});
  }
  return result;
}

}  // namespace flashrtc
