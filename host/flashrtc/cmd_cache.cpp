// `flashrtc cache`: what the disk cache holds (ls, show, ptx, sass) and keeping it sound (verify, prune,
// clear). Needs no GPU; KEY is a key or a unique prefix of one.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "flashrtc_tools/cache_inspect.hpp"
#include "flashrtc_tools/cache_size_units.hpp"
#include "json_output.hpp"

namespace flashrtc::cli {

namespace {

using nlohmann::json;

struct CacheOptions {
  bool spills = false, serialized = false, json_output = false;
  std::string key, older_than, max_size;
};

// The kernel column fits the longest family name (bwd-dq-convert).
constexpr const char* kLsFormat =
    "%-16s %-14s %-5s %4s %-9s %-8s %2s %2s %-7s %4s %11s %5s %9s %8s %9s  %s%s\n";

// What sets an entry apart beyond its columns: a persistent grid (the kernel field "persistent"; an entry
// without one is the same tile on one block per work tile), attention variants compiled in (the field
// "variants", docs/variants.md) and serialized wgmma.
std::string notes(const CacheEntry& e) {
  std::string text;
  for (const auto& [name, value] : e.kernel_fields) {
    if (name == "persistent" && value == "true") text += "  persistent";
    if (name == "variants" && value != "none") text += "  variants: " + value;
  }
  if (e.resources.wgmma_serialized) text += "  wgmma serialized";
  return text;
}

int execute_ls(const CacheOptions& o) {
  const std::vector<CacheEntry> entries =
      tools::sorted_cache_entries(o.spills       ? tools::CacheEntryFilter::kSpilling
                                  : o.serialized ? tools::CacheEntryFilter::kWgmmaSerialized
                                                 : tools::CacheEntryFilter::kAll);
  if (o.json_output) {
    print_json_document(Json(entries));
    return kExitOk;
  }
  std::printf(kLsFormat, "key", "kernel", "dtype", "d", "mask", "tile", "w", "s", "arch", "regs",
              "spill st/ld", "stack", "smem", "compile", "size", "last used", "");
  std::uint64_t total = 0;
  int spilling = 0, serialized = 0, bad = 0;
  for (const CacheEntry& e : entries) {
    total += e.size_bytes;
    if (!e.problem.empty()) {
      ++bad;
      std::printf("%-16.16s bad: %s (`flashrtc cache verify` removes it)\n", e.key.c_str(),
                  e.problem.c_str());
      continue;
    }
    spilling += e.resources.spills() ? 1 : 0;
    serialized += e.resources.wgmma_serialized ? 1 : 0;
    const auto n = [](auto value) { return std::to_string(value); };
    // A row kernel (the backward's pre-pass and dQ conversion) takes no block_n, stages or mask: "-".
    const auto given = [&](int value) { return value > 0 ? n(value) : std::string("-"); };
    char compile[32];
    std::snprintf(compile, sizeof(compile), "%.0f ms", e.compile_ms);
    std::printf(
        kLsFormat, e.key.substr(0, 16).c_str(), tools::short_kernel_name(e.kernel).c_str(), e.dtype.c_str(),
        n(e.head_dim).c_str(), e.mask.empty() ? "-" : e.mask.c_str(),
        (n(e.tile.block_m) + (e.tile.block_n > 0 ? "x" + n(e.tile.block_n) : std::string())).c_str(),
        n(e.tile.warps).c_str(), given(e.tile.stages).c_str(), e.arch.c_str(), n(e.resources.registers).c_str(),
        (n(e.resources.spill_store_bytes) + "/" + n(e.resources.spill_load_bytes)).c_str(),
        n(e.resources.stack_frame_bytes).c_str(), format_bytes(double(e.smem_bytes)).c_str(), compile,
        format_bytes(double(e.size_bytes)).c_str(), format_time(e.last_used_unix).c_str(), notes(e).c_str());
  }
  if (o.spills || o.serialized)
    std::printf("%zu %s entries, %s, in %s\n", entries.size(), o.spills ? "spilling" : "wgmma serialized",
                format_bytes(double(total)).c_str(), cache_root().string().c_str());
  else
    std::printf("%zu entries (%d spilling%s%s), %s, in %s\n", entries.size(), spilling,
                serialized ? (", " + std::to_string(serialized) + " wgmma serialized").c_str() : "",
                bad ? (", " + std::to_string(bad) + " bad").c_str() : "", format_bytes(double(total)).c_str(),
                cache_root().string().c_str());
  return kExitOk;
}

// "resources.registers: 168": every leaf of meta.json, named by its path.
void print_flat(const json& j, const std::string& prefix) {
  if (j.is_object()) {
    for (const auto& [name, value] : j.items())
      print_flat(value, prefix.empty() ? name : prefix + "." + name);
    return;
  }
  std::printf("%-28s %s\n", (prefix + ":").c_str(),
              j.is_string() ? j.get<std::string>().c_str() : flashrtc::json_text(j).c_str());
}

// What `cache show` prints of an entry's compile log: real logs are a few KB; a damaged or planted one may be
// hundreds of MB, of which the head says enough (`cache ptx` and the file itself have the rest).
constexpr std::size_t kShownLogBytes = 64 << 10;

struct ShownLog {
  std::string text;
  std::uint64_t not_shown_bytes = 0;
};

// A bad entry's log may be missing or oversized: say so and still show the rest.
ShownLog entry_log(const CacheEntry& e) {
  try {
    const CacheFileHead head = read_cache_entry_file_head(e.log_path, kShownLogBytes);
    return {head.text, head.not_shown_bytes()};
  } catch (const Error& error) {
    return {"(cannot be read: " + error.message() + ")", 0};
  }
}

// {"entry": the `ls --json` row, "meta": meta.json as stored (null when it does not parse), "log" (its first
// kShownLogBytes), "log_truncated_bytes" (how many more the file holds)}.
int execute_show_json(const CacheEntry& e) {
  Json meta = nullptr;
  try {
    meta = Json::parse(e.meta_json);
  } catch (const json::exception&) {
  }
  const ShownLog log = entry_log(e);
  print_json_document(
      Json{{"entry", e}, {"meta", meta}, {"log", log.text}, {"log_truncated_bytes", log.not_shown_bytes}});
  return kExitOk;
}

int execute_show(const CacheOptions& o) {
  const CacheEntry e = find_cache_entry(o.key);
  if (o.json_output) return execute_show_json(e);
  std::printf("%-28s %s\n", "entry:", e.dir.string().c_str());
  if (!e.problem.empty()) std::printf("%-28s %s\n", "problem:", e.problem.c_str());
  try {
    print_flat(json::parse(e.meta_json), "");
  } catch (const json::exception&) {
    std::printf("meta.json (does not parse):\n%s\n", e.meta_json.c_str());
  }
  std::printf("%-28s %s\n", "size:", format_bytes(double(e.size_bytes)).c_str());
  std::printf("%-28s %s\n", "last used:", format_time(e.last_used_unix).c_str());
  const ShownLog log = entry_log(e);
  std::printf("compile log (%s):\n%s\n", e.log_path.string().c_str(), log.text.c_str());
  if (log.not_shown_bytes)
    std::printf("... %llu bytes not shown\n", static_cast<unsigned long long>(log.not_shown_bytes));
  return kExitOk;
}

int execute_ptx(const CacheOptions& o) {
  const CacheEntry e = find_cache_entry(o.key);
  std::fputs(read_cache_entry_file(e.ptx_path).c_str(), stdout);
  return kExitOk;
}

int execute_sass(const CacheOptions& o) {
  const CacheEntry e = find_cache_entry(o.key);
  return tools::print_entry_sass(e) == 0 ? kExitOk : kExitDevice;
}

void print_removed(const CacheCleanup& result) {
  for (const RemovedEntry& r : result.removed)
    std::printf("removed %s/%s (%s): %s\n", r.arch.c_str(), r.key.c_str(),
                format_bytes(double(r.bytes)).c_str(), r.reason.c_str());
}

// What a cleanup could not remove, one line each and one summary (a read-only cache): kExitDevice, since the
// cache is not what the command was asked to make it. ok_exit otherwise.
int finish_cleanup(const CacheCleanup& result, int ok_exit) {
  if (result.not_removed.empty()) return ok_exit;
  for (const RemovedEntry& r : result.not_removed)
    std::fprintf(stderr, "%s\n", tools::not_removed_line(r).c_str());
  std::fprintf(stderr, "error: %s\n", tools::cache_cleanup_failure(result, cache_root()).c_str());
  return kExitDevice;
}

int execute_verify() {
  const CacheCleanup result = verify_cache();
  print_removed(result);
  const auto entries_in = [](const std::vector<RemovedEntry>& list) {
    return std::size_t(std::count_if(
        list.begin(), list.end(), [](const RemovedEntry& r) { return !r.key.empty() && r.key[0] != '.'; }));
  };
  const std::size_t removed = entries_in(result.removed), kept_bad = entries_in(result.not_removed);
  std::printf(
      "verified %zu entries in %s: %zu bad (%s), %s kept\n", result.entries_checked,
      cache_root().string().c_str(), removed + kept_bad,
      kept_bad ? (std::to_string(removed) + " removed, " + std::to_string(kept_bad) + " not removed").c_str()
               : "removed",
      format_bytes(double(result.bytes_kept)).c_str());
  return finish_cleanup(result, removed ? kExitCheckFailed : kExitOk);
}

int execute_prune(const CacheOptions& o) {
  if (o.older_than.empty() && o.max_size.empty())
    throw UsageError("prune needs --older-than, --max-size or both");
  std::optional<std::int64_t> older_than;
  std::optional<std::uint64_t> max_size;
  if (!o.older_than.empty()) older_than = tools::parse_duration_seconds(o.older_than, "--older-than");
  if (!o.max_size.empty()) max_size = tools::parse_size_bytes(o.max_size, "--max-size");
  const CacheCleanup result = prune_cache(older_than, max_size);
  print_removed(result);
  std::printf("pruned %zu of %zu entries in %s; %s kept\n", result.removed.size(), result.entries_checked,
              cache_root().string().c_str(), format_bytes(double(result.bytes_kept)).c_str());
  return finish_cleanup(result, kExitOk);
}

int execute_clear() {
  const CacheCleanup result = clear_cache();
  std::uint64_t bytes = 0;
  for (const RemovedEntry& r : result.removed) bytes += r.bytes;
  std::printf("removed %zu entries (%s) from %s; the tuning database %s is kept\n", result.removed.size(),
              format_bytes(double(bytes)).c_str(), cache_root().string().c_str(),
              tuning_db_path().string().c_str());
  return finish_cleanup(result, kExitOk);
}

}  // namespace

Command add_cache_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("cache", "inspect and maintain the disk cache of compiled kernels");
  app->require_subcommand(1);
  auto o = std::make_shared<CacheOptions>();
  CLI::App* ls = app->add_subcommand("ls",
                                     "one row per entry: specialization, registers, spills, shared memory, "
                                     "compile time, size, last use");
  CLI::Option* spills = ls->add_flag("--spills", o->spills, "only entries whose kernel spills registers");
  ls->add_flag("--serialized", o->serialized,
               "only entries whose wgmma.mma_async instructions ptxas serialized (a wait after each: about "
               "half the tensor-core rate; marked `wgmma serialized` in the table)")
      ->excludes(spills);
  ls->add_flag("--json", o->json_output,
               "one JSON document: an array of the entries, every field (key, arch, kernel, specialization, "
               "registers, spills, wgmma_serialized, dynamic_smem_bytes, compile_ms, entry_dir, size_bytes, "
               "last_used, bad, problem, ...)");
  CLI::App* show =
      app->add_subcommand("show", "every meta.json field of an entry, and its compile log (the first " +
                                      std::to_string(kShownLogBytes >> 10) + " KiB)");
  show->add_flag("--json", o->json_output,
                 "one JSON document {entry (as in ls --json), meta (meta.json as stored), log (its first " +
                     std::to_string(kShownLogBytes >> 10) + " KiB), log_truncated_bytes}");
  CLI::App* ptx = app->add_subcommand("ptx", "the PTX of an entry");
  CLI::App* sass = app->add_subcommand("sass", "the SASS of an entry (through cuobjdump or nvdisasm)");
  for (CLI::App* keyed : {show, ptx, sass})
    keyed->add_option("KEY", o->key, "a key or a unique prefix of one (`flashrtc cache ls`)")->required();
  CLI::App* verify = app->add_subcommand(
      "verify",
      "re-hash every entry; remove bad ones (exit 1 when there were any, 3 when some could not be removed)");
  CLI::App* prune =
      app->add_subcommand("prune", "remove entries unused for a while, or the least recently used");
  prune->add_option("--older-than", o->older_than, "unused for longer than this, e.g. 30d, 12h");
  prune->add_option("--max-size", o->max_size,
                    "remove least recently used entries until the cache is this small, e.g. 2G");
  CLI::App* clear = app->add_subcommand("clear", "remove every entry (the tuning database stays)");
  return {app, [=] {
            if (ls->parsed()) return execute_ls(*o);
            if (show->parsed()) return execute_show(*o);
            if (ptx->parsed()) return execute_ptx(*o);
            if (sass->parsed()) return execute_sass(*o);
            if (verify->parsed()) return execute_verify();
            if (prune->parsed()) return execute_prune(*o);
            if (clear->parsed()) return execute_clear();
            throw UsageError("cache needs a subcommand: ls, show, ptx, sass, verify, prune, clear");
          }};
}

}  // namespace flashrtc::cli
