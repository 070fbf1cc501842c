// `flashrtc cache verify / prune / clear`: removing entries without disturbing processes that use the cache,
// and saying what could not be removed (a read-only cache) instead of failing half-way.
#include <algorithm>
#include <chrono>

#include "cache/cache_scan.hpp"
#include "cache/disk_cache.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/error.hpp"
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

// Under the key's lock, so that a process compiling this key waits for the removal and then stores its own;
// the lock file goes too. Returns why it could not be removed, or "".
std::string remove_entry(const fs::path& dir) {
  try {
    detail::FileLock lock(detail::entry_lock_path(dir));
    std::error_code error;
    fs::remove_all(dir, error);
    if (error) return "cannot remove " + dir.string() + ": " + error.message();
    lock.remove_file();
  } catch (const Error& e) {
    return e.message();
  }
  return {};
}

std::string remove_directory(const fs::path& dir) {
  std::error_code error;
  fs::remove_all(dir, error);
  return error ? "cannot remove " + dir.string() + ": " + error.message() : std::string();
}

}  // namespace

CacheCleanup verify_cache() {
  CacheCleanup result;
  const fs::path root = cache_root();
  for (const fs::path& dir : detail::cache_entry_dirs(root)) {
    ++result.entries_checked;
    std::string problem = detail::cache_entry_problem(dir);
    if (problem.empty()) {
      result.bytes_kept += detail::directory_bytes(dir);
      continue;
    }
    RemovedEntry entry = describe(dir, std::move(problem));
    const std::string error = remove_entry(dir);
    if (!error.empty()) result.bytes_kept += entry.bytes;
    file_under(result, std::move(entry), error);
  }
  const std::int64_t now = now_unix();
  for (const fs::path& dir : detail::cache_temporaries(root))
    if (now - detail::modified_unix(dir) > kTemporaryMaxAgeSeconds) {
      RemovedEntry entry = describe(dir, "temporary left by an interrupted write");
      file_under(result, std::move(entry), remove_directory(dir));
    }
  // A lock file whose entry is absent guards nothing once we hold it (a compile in progress holds it until
  // its entry is in place). Lock files are no entries: one that cannot be removed is not reported.
  for (const fs::path& lock_path : detail::cache_lock_files(root)) {
    const fs::path entry_dir = lock_path.parent_path() / lock_path.stem();
    std::error_code error;
    if (fs::exists(entry_dir, error)) continue;
    try {
      detail::FileLock lock(lock_path);
      if (!fs::exists(entry_dir, error)) lock.remove_file();
    } catch (const Error&) {
    }
  }
  return result;
}

CacheCleanup prune_cache(std::optional<std::int64_t> older_than_seconds,
                         std::optional<std::uint64_t> max_bytes) {
  CacheCleanup result;
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
    const std::string error = remove_entry(e.dir);
    if (error.empty()) total -= e.size_bytes;
    file_under(result, {e.key, e.arch, std::move(reason), e.size_bytes, {}}, error);
  }
  result.bytes_kept = total;
  return result;
}

CacheCleanup clear_cache() {
  CacheCleanup result;
  const fs::path root = cache_root();
  for (const fs::path& dir : detail::cache_entry_dirs(root)) {
    ++result.entries_checked;
    RemovedEntry entry = describe(dir, "clear");
    const std::string error = remove_entry(dir);
    if (!error.empty()) result.bytes_kept += entry.bytes;
    file_under(result, std::move(entry), error);
  }
  // Lock files and temporaries too: the format-version directory goes as a whole.
  if (result.not_removed.empty()) {
    const std::uint64_t bytes = detail::directory_bytes(root);
    const std::string error = remove_directory(root);
    if (!error.empty()) result.not_removed.push_back({root.filename().string(), "", "clear", bytes, error});
  }
  return result;
}

}  // namespace flashrtc
