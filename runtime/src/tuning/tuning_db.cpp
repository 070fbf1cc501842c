#include "flashrtc/tuning_db.hpp"

#include "flashrtc/kernel_family.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "flashrtc/compiled_kernel.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"
#include "support/atomic_file.hpp"
#include "support/bounded_read.hpp"
#include "support/file_lock.hpp"
#include "support/json_checked.hpp"
#include "support/log.hpp"
#include "support/settings_generation.hpp"
#include "tuning/tuning_db_file.hpp"

namespace flashrtc {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// A database of every specialization on every GPU is some hundred KB; far larger is not one.
constexpr std::uint64_t kMaxTuningDbBytes = std::uint64_t{64} << 20;
}  // namespace

bool TuningKey::operator==(const TuningKey& o) const {
  return gpu_name == o.gpu_name && arch == o.arch && nvrtc_version == o.nvrtc_version && family == o.family &&
         dtype == o.dtype && head_dim == o.head_dim && mask == o.mask && seqlen_q_bucket == o.seqlen_q_bucket &&
         seqlen_kv_bucket == o.seqlen_kv_bucket;
}

std::string to_string(const TuningKey& k) {
  return k.gpu_name + " " + k.arch + " nvrtc " + k.nvrtc_version + " " + k.family + " " +
         std::string(to_string(k.dtype)) + " d=" + std::to_string(k.head_dim) + " mask=" +
         std::string(to_string(k.mask)) + " Nq<=" + std::to_string(k.seqlen_q_bucket) +
         " Nk<=" + std::to_string(k.seqlen_kv_bucket);
}

TuningKey make_tuning_key(const std::string& gpu_name, const std::string& arch, DType dtype, int head_dim,
                          MaskKind mask, std::int64_t seqlen_q, std::int64_t seqlen_kv, const std::string& family_name) {
  static const std::string nvrtc = nvrtc_version();
  const std::string family =
      family_name.empty() ? select_kernel_family(Operation::kForward, dtype, head_dim, arch).family->name : family_name;
  return {gpu_name, arch, nvrtc, family, dtype, head_dim, mask,
          seqlen_bucket(seqlen_q), seqlen_bucket(seqlen_kv)};
}

namespace {

// Unit separators: GPU names hold spaces, never control characters.
std::string key_id(const TuningKey& k) {
  const char sep = '\x1f';
  return k.gpu_name + sep + k.arch + sep + k.nvrtc_version + sep + k.family + sep +
         std::string(to_string(k.dtype)) + sep + std::to_string(k.head_dim) + sep + std::string(to_string(k.mask)) +
         sep + std::to_string(k.seqlen_q_bucket) + sep + std::to_string(k.seqlen_kv_bucket);
}

// An entry of a family this build does not have is kept (another version wrote it) and never matches a key.
std::string family_from(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("family is empty");
  return name;
}

std::string utc_text(std::int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  tm parts{};
  gmtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

json entry_to_json(const TuningEntry& e) {
  const TuningKey& k = e.key;
  return {{"key",
           {{"gpu", k.gpu_name},
            {"arch", k.arch},
            {"nvrtc", k.nvrtc_version},
            {"family", k.family},
            {"dtype", std::string(to_string(k.dtype))},
            {"head_dim", k.head_dim},
            {"mask", std::string(to_string(k.mask))},
            {"seqlen_q_bucket", k.seqlen_q_bucket},
            {"seqlen_kv_bucket", k.seqlen_kv_bucket}}},
          {"config",
           {{"block_m", e.config.block_m},
            {"block_n", e.config.block_n},
            {"warps", e.config.warps},
            {"stages", e.config.stages}}},
          {"median_ms", e.median_ms},
          {"tflops", e.tflops},
          {"shape", {{"batch", e.batch}, {"heads", e.heads}, {"seqlen_q", e.seqlen_q}, {"seqlen_kv", e.seqlen_kv}}},
          {"space", e.space},
          {"tuned_unix", e.tuned_unix},
          {"tuned_at", utc_text(e.tuned_unix)}};
}

// Throws json::exception or std::invalid_argument on a malformed entry.
TuningEntry entry_from_json(const json& j) {
  TuningEntry e;
  const json& k = j.at("key");
  e.key.gpu_name = k.at("gpu").get<std::string>();
  e.key.arch = k.at("arch").get<std::string>();
  e.key.nvrtc_version = k.at("nvrtc").get<std::string>();
  e.key.family = family_from(k.at("family").get<std::string>());
  const auto dtype = parse_dtype(k.at("dtype").get<std::string>());
  const auto mask = parse_mask(k.at("mask").get<std::string>());
  if (!dtype) throw std::invalid_argument("dtype '" + k.at("dtype").get<std::string>() + "' unknown");
  if (!mask) throw std::invalid_argument("mask '" + k.at("mask").get<std::string>() + "' unknown");
  e.key.dtype = *dtype;
  e.key.mask = *mask;
  // Checked reads: a value that does not fit (block_m = 2^32 + 64) is an error, never truncated to 64.
  e.key.head_dim = detail::json_int(k, "head_dim", 1);
  e.key.seqlen_q_bucket = detail::json_integer(k, "seqlen_q_bucket", 1, kMaxSeqlenBucket);
  e.key.seqlen_kv_bucket = detail::json_integer(k, "seqlen_kv_bucket", 1, kMaxSeqlenBucket);
  const json& c = j.at("config");
  e.config = {detail::json_int(c, "block_m", 1), detail::json_int(c, "block_n", 1),
              detail::json_int(c, "warps", 1), detail::json_int(c, "stages", 1)};
  constexpr double kMaxMeasure = 1e12;
  if (j.contains("median_ms")) e.median_ms = detail::json_number(j, "median_ms", 0, kMaxMeasure);
  if (j.contains("tflops")) e.tflops = detail::json_number(j, "tflops", 0, kMaxMeasure);
  constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
  if (j.contains("shape")) {
    const json& s = j.at("shape");
    for (auto [name, field] : {std::pair{"batch", &e.batch}, std::pair{"heads", &e.heads},
                               std::pair{"seqlen_q", &e.seqlen_q}, std::pair{"seqlen_kv", &e.seqlen_kv}})
      if (s.contains(name)) *field = detail::json_integer(s, name, 0, kMaxCount);
  }
  if (j.contains("space")) e.space = detail::json_string(j, "space");
  if (j.contains("tuned_unix")) e.tuned_unix = detail::json_integer(j, "tuned_unix", 0, kMaxCount);
  return e;
}

// This process's copy of one database file: read once, replaced by record_tuning_entry.
struct LoadedDb {
  std::vector<TuningEntry> entries;
  std::map<std::string, std::size_t> by_key;  // key_id -> index into entries
};

std::shared_ptr<const LoadedDb> make_loaded(std::vector<TuningEntry> entries) {
  auto db = std::make_shared<LoadedDb>();
  db->entries = std::move(entries);
  for (std::size_t i = 0; i < db->entries.size(); ++i) db->by_key[key_id(db->entries[i].key)] = i;
  return db;
}

struct LoadedDbs {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const LoadedDb>> by_path;
};

LoadedDbs& loaded_dbs() {
  static LoadedDbs* dbs = new LoadedDbs;  // leaked: launches may consult it during static destruction
  return *dbs;
}

std::shared_ptr<const LoadedDb> loaded(const fs::path& path) {
  LoadedDbs& dbs = loaded_dbs();
  std::lock_guard<std::mutex> lock(dbs.mutex);
  auto it = dbs.by_path.find(path.string());
  if (it != dbs.by_path.end()) return it->second;
  detail::TuningDbContents contents = detail::read_tuning_db_file(path);
  for (const std::string& problem : contents.problems)
    detail::log().warn("tuning database {}: {}{}", path.string(), problem,
                       contents.ignored ? "; ignored, calls use the default tiles" : "");
  auto db = make_loaded(std::move(contents.entries));
  dbs.by_path.emplace(path.string(), db);
  return db;
}

}  // namespace

namespace detail {

TuningDbContents read_tuning_db_file(const fs::path& path) {
  TuningDbContents contents;
  std::error_code error;
  if (!fs::exists(path, error)) return contents;
  contents.exists = true;
  auto ignore = [&](const std::string& why) {
    contents.ignored = true;
    contents.problems.push_back(why);
    return contents;
  };
  if (!fs::is_regular_file(path, error)) return ignore("not a regular file");
  const detail::BoundedRead text = detail::read_file_bounded(path, kMaxTuningDbBytes);
  if (!text.ok()) return ignore(text.problem);
  json root;
  try {
    root = detail::parse_json_bounded(text.content);
  } catch (const std::exception& e) {
    return ignore("not JSON (" + detail::printable_ascii(e.what()) + ")");
  }
  if (!root.is_object() || !root.contains("format_version") || !root["format_version"].is_number_integer())
    return ignore("no format_version: not a flashrtc tuning database");
  if (root["format_version"].get<int>() != kTuningDbFormatVersion)
    return ignore("stale: format version " + root["format_version"].dump() + ", this flashrtc reads " +
                  std::to_string(kTuningDbFormatVersion));
  if (!root.contains("entries") || !root["entries"].is_array()) return ignore("no entries array");
  std::size_t index = 0;
  for (const json& item : root["entries"]) {
    try {
      contents.entries.push_back(entry_from_json(item));
    } catch (const std::exception& e) {
      contents.problems.push_back("entry " + std::to_string(index) + " ignored (" +
                                  detail::printable_ascii(e.what()) + ")");
    }
    ++index;
  }
  return contents;
}

std::string tuning_db_text(const std::vector<TuningEntry>& entries) {
  json items = json::array();
  for (const TuningEntry& entry : entries) items.push_back(entry_to_json(entry));
  const json root = {{"format", "flashrtc tuning database"},
                     {"format_version", kTuningDbFormatVersion},
                     {"entries", std::move(items)}};
  return root.dump(2) + "\n";
}

void forget_loaded_tuning_dbs() {
  LoadedDbs& dbs = loaded_dbs();
  std::lock_guard<std::mutex> lock(dbs.mutex);
  dbs.by_path.clear();
}

}  // namespace detail

fs::path tuning_db_path() {
  const RuntimeConfig& config = runtime_config();
  return config.tune_db.empty() ? config.cache_dir / "tuning_db.json" : config.tune_db;
}

std::vector<TuningEntry> tuning_db_entries() { return loaded(tuning_db_path())->entries; }

std::optional<TuningEntry> find_tuning_entry(const TuningKey& key) {
  const auto db = loaded(tuning_db_path());
  const auto it = db->by_key.find(key_id(key));
  if (it == db->by_key.end()) return std::nullopt;
  return db->entries[it->second];
}

void record_tuning_entry(const TuningEntry& entry) {
  const fs::path path = tuning_db_path();
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  detail::FileLock lock(path.string() + ".lock");
  detail::TuningDbContents contents = detail::read_tuning_db_file(path);
  if (contents.exists && contents.ignored) {
    const fs::path aside = path.string() + ".unreadable";
    fs::rename(path, aside, error);
    detail::log().warn("tuning database {} was unusable ({}); set aside as {}", path.string(),
                       contents.problems.empty() ? "" : contents.problems.front(), aside.string());
  }
  std::vector<TuningEntry> entries = std::move(contents.entries);
  const std::string id = key_id(entry.key);
  const auto same = std::find_if(entries.begin(), entries.end(), [&](const TuningEntry& e) { return key_id(e.key) == id; });
  if (same != entries.end())
    *same = entry;
  else
    entries.push_back(entry);
  std::sort(entries.begin(), entries.end(),
            [](const TuningEntry& a, const TuningEntry& b) { return key_id(a.key) < key_id(b.key); });
  detail::write_file_atomically(path, detail::tuning_db_text(entries));
  LoadedDbs& dbs = loaded_dbs();
  {
    std::lock_guard<std::mutex> guard(dbs.mutex);
    dbs.by_path[path.string()] = make_loaded(std::move(entries));
  }
  detail::bump_settings_generation();  // resolved calls of this process pick up the new winner
}

}  // namespace flashrtc
