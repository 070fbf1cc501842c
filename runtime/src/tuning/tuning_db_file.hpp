#pragma once
// The tuning database's file format and its per-process copy (flashrtc/tuning_db.hpp is the API).
#include <filesystem>
#include <string>
#include <vector>

#include "flashrtc/tuning_db.hpp"

namespace flashrtc::detail {

// Bumped when the file's schema changes; a file of another version is stale and ignored.
inline constexpr int kTuningDbFormatVersion = 1;

struct TuningDbContents {
  bool exists = false;
  bool ignored = false;               // the whole file was unusable (unreadable, corrupt, stale)
  std::vector<TuningEntry> entries;   // the usable ones
  std::vector<std::string> problems;  // why the file or single entries were ignored
};

// Reads path without caching and without logging. Never throws.
TuningDbContents read_tuning_db_file(const std::filesystem::path& path);

// The file's text for entries.
std::string tuning_db_text(const std::vector<TuningEntry>& entries);

// Drops this process's copies, so that the next lookup reads the file again (tests).
void forget_loaded_tuning_dbs();

}  // namespace flashrtc::detail
