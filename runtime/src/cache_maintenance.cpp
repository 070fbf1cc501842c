// `flashrtc cache verify / prune / clear`: removing entries without disturbing processes that use the cache.
#include <algorithm>
#include <chrono>

#include "cache_scan.hpp"
#include "disk_cache.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/kernel.hpp"
#include "log.hpp"

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
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Under the key's lock, so that a process compiling this key waits for the removal and then stores its own.
RemovedEntry remove_entry(const fs::path& dir, std::string reason) {
  RemovedEntry removed{dir.filename().string(), dir.parent_path().filename().string(), std::move(reason),
                       detail::directory_bytes(dir)};
  detail::FileLock lock(detail::entry_lock_path(dir));
  std::error_code error;
  fs::remove_all(dir, error);
  if (error) detail::log().warn("cannot remove cache entry {}: {}", dir.string(), error.message());
  return removed;
}

}  // namespace

CacheCleanup verify_cache() {
  CacheCleanup result;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root())) {
    ++result.entries_checked;
    std::string problem = detail::cache_entry_problem(dir);
    if (problem.empty()) {
      result.bytes_kept += detail::directory_bytes(dir);
      continue;
    }
    result.removed.push_back(remove_entry(dir, std::move(problem)));
  }
  const std::int64_t now = now_unix();
  for (const fs::path& dir : detail::cache_temporaries(cache_root()))
    if (now - detail::modified_unix(dir) > kTemporaryMaxAgeSeconds) {
      RemovedEntry removed{dir.filename().string(), dir.parent_path().filename().string(),
                           "temporary left by an interrupted write", detail::directory_bytes(dir)};
      std::error_code error;
      fs::remove_all(dir, error);
      result.removed.push_back(std::move(removed));
    }
  return result;
}

CacheCleanup prune_cache(std::optional<std::int64_t> older_than_seconds, std::optional<std::uint64_t> max_bytes) {
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
    result.removed.push_back(remove_entry(e.dir, std::move(reason)));
    total -= e.size_bytes;
  }
  result.bytes_kept = total;
  return result;
}

CacheCleanup clear_cache() {
  CacheCleanup result;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root())) {
    ++result.entries_checked;
    result.removed.push_back(remove_entry(dir, "clear"));
  }
  // Lock files and temporaries too: the format-version directory goes as a whole.
  std::error_code error;
  fs::remove_all(cache_root(), error);
  if (error) detail::log().warn("cannot remove {}: {}", cache_root().string(), error.message());
  return result;
}

}  // namespace flashrtc
