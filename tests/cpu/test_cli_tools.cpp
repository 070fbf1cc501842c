// The `flashrtc` command's tuning and inspection tools, run as a user runs them (a separate process each,
// configured by its environment): config's resolution order, tune --dry-run, cache ls/show/ptx/verify on
// real NVRTC outputs, compile --all with tuned tiles, FLASHRTC_REQUIRE_CACHED.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"


#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

using namespace flashrtc;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// Runs `flashrtc args...` with only the FLASHRTC_ variables given (others unset), stdout and stderr kept.
Result flashrtc_cli(const fs::path& work, const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env) {
  static int counter = 0;
  const fs::path out = work / ("cli-" + std::to_string(counter) + ".out");
  const fs::path err = work / ("cli-" + std::to_string(counter++) + ".err");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0) ::_exit(126);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    for (const char* name : {"FLASHRTC_CACHE_DIR", "FLASHRTC_DISABLE_DISK_CACHE", "FLASHRTC_ALWAYS_COMPILE",
                             "FLASHRTC_REQUIRE_CACHED", "FLASHRTC_DUMP_SOURCES", "FLASHRTC_KERNEL_DIR", "FLASHRTC_ARCH",
                             "FLASHRTC_CONFIG", "FLASHRTC_TUNE_DB", "FLASHRTC_LOG_LEVEL"})
      ::unsetenv(name);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(FLASHRTC_CLI)};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(FLASHRTC_CLI, argv.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = test::read_text(out);
  r.err = test::read_text(err);
  return r;
}

// One sandbox per test: the child's cache and tuning database, and the same ones for this process.
struct Sandbox {
  explicit Sandbox(const std::string& tag) : tuning(tag) {}
  test::TuningSandbox tuning;
  std::map<std::string, std::string> env() const {
    return {{"FLASHRTC_CACHE_DIR", (tuning.dir() / "cache").string()}, {"FLASHRTC_TUNE_DB", tuning.db().string()}};
  }
  Result run(const std::vector<std::string>& args, std::map<std::string, std::string> extra = {}) const {
    std::map<std::string, std::string> all = env();
    for (auto& [name, value] : extra) all[name] = value;
    Result r = flashrtc_cli(tuning.dir(), args, all);
    INFO("flashrtc exit " << r.exit_code << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    return r;
  }
};

std::string line_of(const std::string& text, const std::string& prefix) {
  const auto at = text.find("\n" + prefix);
  const auto start = text.rfind(prefix, 0) == 0 ? 0 : at == std::string::npos ? std::string::npos : at + 1;
  if (start == std::string::npos) return {};
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace

TEST_CASE("flashrtc config: default, tuned (written by another process), environment, explicit, errors") {
  Sandbox box("flashrtc-cli-config");
  const std::vector<std::string> call = {"config", "--dtype", "fp16", "--head-dim", "64", "--seqlen", "3000"};
  std::vector<std::string> on_h200 = call;
  for (const char* arg : {"--gpu-name", "Test GPU 141GB", "--arch", "sm_90a"}) on_h200.push_back(arg);

  const TileConfig fallback = default_forward_config(DType::kFloat16, 64, kSmemBytesSm90);
  Result r = box.run(on_h200);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(fallback));
  CHECK(line_of(r.out, "source:").rfind("source:     default (built-in table; no tuned entry", 0) == 0);
  CHECK(line_of(r.out, "tuning db:").find(box.tuning.db().string()) != std::string::npos);

  // Without a GPU and without --gpu-name, no tuned entry can apply, and the command says so.
  r = box.run(call);
  REQUIRE(r.exit_code == 0);
  if (!device_available()) CHECK(r.out.find("no tuned entry can apply") != std::string::npos);

  // A tune elsewhere wrote an entry for Nq, Nk <= 4096: this process sees it. The tuned tile and the one
  // FLASHRTC_CONFIG makes of it differ from the default and from each other in warps only.
  const auto space = forward_config_space(DType::kFloat16, 64, kSmemBytesSm90);
  std::optional<std::pair<TileConfig, TileConfig>> pair;
  for (const TileConfig& a : space)
    if (!pair && !(a == fallback))
      if (const auto b = test::one_field_variant(space, a)) pair.emplace(a, *b);
  REQUIRE(pair.has_value());
  const TileConfig tuned = pair->first, with_env = pair->second;
  const std::string env_text = test::single_field_override(tuned, with_env);
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU 141GB", "sm_90a", DType::kFloat16, 64, MaskKind::kNone, 4096, 4096), tuned));
  r = box.run(on_h200);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(tuned));
  CHECK(line_of(r.out, "source:").rfind("source:     tuned (tuning database entry for Test GPU 141GB sm_90a", 0) == 0);
  CHECK(line_of(r.out, "tuning db:").find("(1 entries)") != std::string::npos);

  r = box.run(on_h200, {{"FLASHRTC_CONFIG", env_text}});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(with_env));
  CHECK(line_of(r.out, "source:").rfind("source:     environment (FLASHRTC_CONFIG='" + env_text + "'", 0) == 0);
  CHECK(line_of(r.out, "source:").find("over the tuned tile") != std::string::npos);
  CHECK(line_of(r.out, "tuned:").rfind("tuned:      " + to_string(tuned), 0) == 0);

  const TileConfig given = space.front();
  std::vector<std::string> explicit_call = on_h200;
  for (const std::string& arg : {std::string("--block-m"), std::to_string(given.block_m), std::string("--block-n"),
                                 std::to_string(given.block_n), std::string("--warps"), std::to_string(given.warps),
                                 std::string("--stages"), std::to_string(given.stages)})
    explicit_call.push_back(arg);
  r = box.run(explicit_call, {{"FLASHRTC_CONFIG", env_text}});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(given));
  CHECK(line_of(r.out, "source:").rfind("source:     explicit", 0) == 0);

  r = box.run(on_h200, {{"FLASHRTC_CONFIG", "block_m=64,wraps=4"}});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("FLASHRTC_CONFIG='block_m=64,wraps=4': unknown field 'wraps'") != std::string::npos);
  r = box.run(on_h200, {{"FLASHRTC_CONFIG", "warps=3"}});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("warps") != std::string::npos);
  // A corrupt database is a warning, not an error.
  test::write_text(box.tuning.db(), "{ not json");
  r = box.run(on_h200);
  CHECK(r.exit_code == 0);
  CHECK(line_of(r.out, "source:").rfind("source:     default", 0) == 0);
  CHECK(r.err.find("ignored, calls use the default tiles") != std::string::npos);
}

TEST_CASE("flashrtc tune --dry-run lists the candidates without a GPU and writes nothing") {
  Sandbox box("flashrtc-cli-dry-run");
  const fs::path json_path = box.tuning.dir() / "rows.json";
  const Result r = box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4096", "--dry-run", "--arch",
                            "sm_90a", "--json", json_path.string()});
  REQUIRE(r.exit_code == 0);
  const auto expected =
      tuning_candidates(DType::kBFloat16, 128, 4096, 4096, TuneSpace::kQuick, assumed_sm_limits("sm_90a"));
  CHECK(r.out.find("space:     quick: " + std::to_string(expected.size()) + " of the") != std::string::npos);
  CHECK(r.out.find("dry run: nothing compiled, timed or written") != std::string::npos);
  const json rows = json::parse(test::read_text(json_path));
  REQUIRE(rows.at("rows").size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const json& row = rows["rows"][i];
    CHECK(row.at("block_m") == expected[i].block_m);
    CHECK(row.at("block_n") == expected[i].block_n);
    CHECK(row.at("warps") == expected[i].warps);
    CHECK(row.at("stages") == expected[i].stages);
    CHECK(row.at("status") == "not run");
    CHECK(row.at("smem_bytes") == forward_smem_bytes(DType::kBFloat16, 128, expected[i]));
  }
  CHECK(rows.at("arch") == "sm_90a");
  CHECK_FALSE(fs::exists(box.tuning.db()));
  CHECK(cache_entry_count() == 0);

  // Mistakes are usage errors; a real sweep needs a GPU.
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4096", "--space", "fast"}).exit_code == 2);
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "0", "--dry-run"}).exit_code == 2);
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "64", "--dry-run", "--plot", "a.png"})
            .exit_code == 2);
  if (!device_available()) {
    const Result no_gpu = box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4096"});
    CHECK(no_gpu.exit_code == 3);
    CHECK(no_gpu.err.find("NoDevice") != std::string::npos);
    CHECK(no_gpu.err.find("--dry-run") != std::string::npos);
  }
}

TEST_CASE("flashrtc cache ls --json, show, ptx, verify on real NVRTC outputs, a spilling entry among them") {
  Sandbox box("flashrtc-cli-cache");
  Result r = box.run({"compile", "--dtype", "fp16", "--head-dim", "64", "--mask", "causal", "--arch", "sm_80"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("warning: this specialization spills") == std::string::npos);
  // 16 warps cap a thread at 128 registers: this fp32 (SIMT) register tile spills.
  r = box.run({"compile", "--dtype", "fp32", "--head-dim", "128", "--block-m", "128", "--block-n", "64", "--warps",
               "16", "--stages", "1", "--arch", "sm_80"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("warning: this specialization spills") != std::string::npos);
  CHECK(r.err.find("spills:") != std::string::npos);  // the runtime's one warning, with key and bytes

  r = box.run({"cache", "ls", "--json"});
  REQUIRE(r.exit_code == 0);
  const json rows = json::parse(r.out);
  REQUIRE(rows.size() == 2);
  test::ConfigOverride same_cache(test::config_with_cache_dir(box.tuning.dir() / "cache"));
  for (const json& row : rows) {
    INFO(row.dump(2));
    const CacheEntry e = find_cache_entry(row.at("key").get<std::string>());
    const bool spilling = row.at("specialization").at("dtype") == "fp32";
    CHECK(row.at("arch") == "sm_80");
    CHECK(find_kernel_family(row.at("kernel").get<std::string>()) != nullptr);
    CHECK(row.at("specialization").at("head_dim") == (spilling ? 128 : 64));
    CHECK(row.at("specialization").at("mask") == (spilling ? "none" : "causal"));
    CHECK(row.at("specialization").at("block_m") == e.tile.block_m);
    CHECK(row.at("specialization").at("block_n") == e.tile.block_n);
    CHECK(row.at("specialization").at("warps") == e.tile.warps);
    CHECK(row.at("specialization").at("stages") == e.tile.stages);
    CHECK(row.at("registers") == e.resources.registers);
    CHECK(row.at("registers").get<int>() > 0);
    CHECK(row.at("spill_store_bytes") == e.resources.spill_store_bytes);
    CHECK(row.at("spill_load_bytes") == e.resources.spill_load_bytes);
    CHECK(row.at("spills") == spilling);
    CHECK((row.at("spill_store_bytes").get<int>() > 0) == spilling);
    CHECK(row.at("stack_frame_bytes") == e.resources.stack_frame_bytes);
    CHECK(row.at("smem_bytes").get<std::size_t>() ==
          forward_smem_bytes(spilling ? DType::kFloat32 : DType::kFloat16, spilling ? 128 : 64,
                             {e.tile.block_m, e.tile.block_n, e.tile.warps, e.tile.stages}));
    CHECK(row.at("compile_ms").get<double>() > 0);
    CHECK(row.at("size_bytes").get<std::uint64_t>() == e.size_bytes);
    CHECK(row.at("last_used_unix").get<std::int64_t>() == e.last_used_unix);
    CHECK(row.at("last_used").get<std::string>().size() == 16);
    CHECK(row.at("name_expression") == e.name_expression);
  }
  const json spills = json::parse(box.run({"cache", "ls", "--spills", "--json"}).out);
  REQUIRE(spills.size() == 1);
  CHECK(spills[0].at("specialization").at("dtype") == "fp32");
  const std::string table = box.run({"cache", "ls"}).out;
  CHECK(table.find("2 entries (1 spilling)") != std::string::npos);

  const std::string key = spills[0].at("key");
  r = box.run({"cache", "show", key.substr(0, 10)});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("resources.spill_store_bytes:") != std::string::npos);
  CHECK(r.out.find("inputs.name_expression:") != std::string::npos);
  CHECK(r.out.find("compile log") != std::string::npos);
  CHECK(r.out.find("bytes spill stores") != std::string::npos);
  r = box.run({"cache", "ptx", key});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(".entry") != std::string::npos);
  CHECK(box.run({"cache", "show", "not-a-key"}).exit_code == 2);
  CHECK(box.run({"cache", "verify"}).exit_code == 0);
  // A damaged entry is reported, dropped, and verify says so with exit 1.
  fs::resize_file(find_cache_entry(key).cubin_path, 64);
  r = box.run({"cache", "verify"});
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("1 bad (removed)") != std::string::npos);
  CHECK(cache_entry_count() == 1);
  r = box.run({"cache", "clear"});
  CHECK(r.exit_code == 0);
  CHECK(cache_entry_count() == 0);
}

TEST_CASE("flashrtc compile --all warms the tuned tiles too; FLASHRTC_REQUIRE_CACHED refuses to compile") {
  Sandbox box("flashrtc-cli-warm");
  const std::map<std::string, std::string> strict = {{"FLASHRTC_REQUIRE_CACHED", "1"}};
  // d=80 is no default head dim: only the tuned entry asks for it.
  const auto space = forward_config_space(DType::kFloat32, 80, kSmemBytesSm90);
  REQUIRE_FALSE(space.empty());
  const TileConfig tuned = space.front();
  record_tuning_entry(
      test::make_entry(make_tuning_key("Test GPU", "sm_90a", DType::kFloat32, 80, MaskKind::kCausalBottomRight, 512, 512),
                       tuned));
  // Under FLASHRTC_REQUIRE_CACHED every compile of an empty cache is refused, fast: the list shows without
  // compiling anything.
  Result r = box.run({"compile", "--all", "--arch", "sm_90a", "-j", "2"}, strict);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find(std::to_string(warm_forward_specs("sm_90a", false).size()) + " defaults, 1 tuned") != std::string::npos);
  CHECK(r.out.find("fp32    80 causal-br  FAILED") != std::string::npos);
  CHECK(r.err.find("CompileDisallowed") != std::string::npos);
  CHECK(cache_entry_count() == 0);

  const std::vector<std::string> one = {"compile", "--dtype", "fp32", "--head-dim", "80", "--mask", "causal-br",
                                        "--block-m", std::to_string(tuned.block_m), "--block-n",
                                        std::to_string(tuned.block_n), "--warps", std::to_string(tuned.warps),
                                        "--stages", std::to_string(tuned.stages), "--arch", "sm_90a"};
  r = box.run(one, strict);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("FLASHRTC_REQUIRE_CACHED") != std::string::npos);
  CHECK(box.run(one).exit_code == 0);  // warm it
  r = box.run(one, strict);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("from:           disk") != std::string::npos);
}

#endif  // FLASHRTC_CLI
