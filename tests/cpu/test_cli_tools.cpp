// The `flashrtc` command's tuning and inspection tools, run as a user runs them (a separate process each,
// configured by its environment): config's resolution order, tune --dry-run, cache ls/show/ptx/verify on
// real NVRTC outputs, compile --all with tuned tiles, FLASHRTC_REQUIRE_CACHED.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cache/cache_entry_layout.hpp"
#include "cpu/helpers/cli_process.hpp"
#include "cpu/helpers/file_permissions.hpp"
#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/arch.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"

TEST_CASE("parse_arch_cc and is_supported_arch: the one arch parser") {
  using flashrtc::parse_arch_cc;
  CHECK(parse_arch_cc("sm_80") == 80);
  CHECK(parse_arch_cc("sm_90a") == 90);
  CHECK(parse_arch_cc("sm_100f") == 100);
  CHECK(parse_arch_cc("sm_121a") == 121);
  for (const std::string bad : {"", "sm_", "sm_xx", "sm_1", "sm_08", "sm_80a", "sm_90f", "sm_90b", "sm_9a0",
                                "SM_80", "compute_80", "sm_1000", " sm_80", "sm_80 "})
    CHECK_MESSAGE(!parse_arch_cc(bad), bad);
  CHECK(!parse_arch_cc("sm_" + std::string(5000, '9')));
  CHECK(flashrtc::is_supported_arch("sm_80"));
  CHECK(flashrtc::is_supported_arch("sm_90a"));
  CHECK_FALSE(flashrtc::is_supported_arch("sm_75"));   // NVRTC targets it; the kernels need sm_80
  CHECK_FALSE(flashrtc::is_supported_arch("sm_999"));  // parses; no NVRTC targets it
  CHECK_FALSE(flashrtc::is_supported_arch("sm_85"));
  const std::vector<int> ccs = flashrtc::supported_arch_ccs();
  REQUIRE_FALSE(ccs.empty());
  CHECK(ccs.front() == flashrtc::kMinArchCc);
  CHECK(ccs.back() <= flashrtc::kMaxArchCc);
  CHECK(flashrtc::supported_archs_text().rfind("sm_80, ", 0) == 0);
}

#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

using namespace flashrtc;
namespace fs = std::filesystem;
using nlohmann::json;

using namespace flashrtc::test::cli;

TEST_CASE("flashrtc config: default, tuned (written by another process), environment, explicit, errors") {
  Sandbox box("flashrtc-cli-config");
  const std::vector<std::string> call = {"config", "--dtype", "fp16", "--head-dim", "64", "--seqlen", "3000"};
  std::vector<std::string> on_h200 = call;
  for (const char* arg : {"--gpu-name", "Test GPU 141GB", "--arch", "sm_90"}) on_h200.push_back(arg);

  const TileConfig fallback = default_forward_config(DType::kFloat16, 64, MaskKind::kNone, kSmemBytesSm90);
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
  std::optional<std::pair<TileConfig, TileConfig> > pair;
  for (const TileConfig& a : space)
    if (!pair && !(a == fallback))
      if (const auto b = test::one_field_variant(space, a)) pair.emplace(a, *b);
  REQUIRE(pair.has_value());
  const TileConfig tuned = pair->first, with_env = pair->second;
  const std::string env_text = test::single_field_override(tuned, with_env);
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU 141GB", "sm_90", DType::kFloat16, 64, MaskKind::kNone, 4096, 4096), tuned));
  r = box.run(on_h200);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(tuned));
  CHECK(line_of(r.out, "source:")
            .rfind("source:     tuned (tuning database entry for Test GPU 141GB sm_90", 0) == 0);
  CHECK(line_of(r.out, "tuning db:").find("(1 entries)") != std::string::npos);

  r = box.run(on_h200, {{"FLASHRTC_CONFIG", env_text}});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(with_env));
  CHECK(line_of(r.out, "source:").rfind("source:     environment (FLASHRTC_CONFIG='" + env_text + "'", 0) ==
        0);
  CHECK(line_of(r.out, "source:").find("over the tuned tile") != std::string::npos);
  CHECK(line_of(r.out, "tuned:").rfind("tuned:      " + to_string(tuned), 0) == 0);

  const TileConfig given = space.front();
  std::vector<std::string> explicit_call = on_h200;
  for (const std::string& arg :
       {std::string("--block-m"), std::to_string(given.block_m), std::string("--block-n"),
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
  const Result r = box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4096", "--dry-run",
                            "--arch", "sm_90", "--output", json_path.string()});
  REQUIRE(r.exit_code == 0);
  const auto expected =
      tuning_candidates(DType::kBFloat16, 128, 4096, 4096, TuneSpace::kQuick, assumed_sm_limits("sm_90"));
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
  CHECK(rows.at("arch") == "sm_90");
  CHECK_FALSE(fs::exists(box.tuning.db()));
  CHECK(cache_entry_count() == 0);

  // Mistakes are usage errors; a real sweep needs a GPU.
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4096", "--space", "fast"})
            .exit_code == 2);
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "0", "--dry-run"}).exit_code ==
        2);
  CHECK(box.run({"tune", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "64", "--dry-run", "--plot",
                 "a.png"})
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
  Result r =
      box.run({"compile", "--dtype", "fp16", "--head-dim", "64", "--mask", "causal", "--arch", "sm_80"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("warning: this specialization spills") == std::string::npos);
  // 16 warps cap a thread at 128 registers: this fp32 (SIMT) register tile spills. It needs sm_90's shared
  // memory: for sm_80 it is refused as a call would refuse it.
  const std::vector<std::string> spilling_tile = {
      "compile",   "--dtype", "fp32",    "--head-dim", "128",      "--block-m", "128",
      "--block-n", "64",      "--warps", "16",         "--stages", "1",         "--arch"};
  std::vector<std::string> for_sm80 = spilling_tile, for_sm90 = spilling_tile;
  for_sm80.push_back("sm_80");
  for_sm90.push_back("sm_90a");
  r = box.run(for_sm80);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shared memory") != std::string::npos);
  r = box.run(for_sm90);
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
    CHECK(row.at("arch") == (spilling ? "sm_90a" : "sm_80"));
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
    CHECK(row.at("dynamic_smem_bytes").get<std::size_t>() ==
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

TEST_CASE("flashrtc config names the default row a mask restriction chose") {
  Sandbox box("flashrtc-cli-config-mask-rows");
  const std::vector<std::string> call = {"config",   "--dtype", "bf16",       "--head-dim",     "256",
                                         "--seqlen", "4096",    "--gpu-name", "Test GPU 141GB", "--arch",
                                         "sm_90a"};
  Result r = box.run(call);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(TileConfig{128, 80, 12, 2}));
  CHECK(line_of(r.out, "source:")
            .rfind("source:     default (built-in table (row d<=256 for mask none); no tuned", 0) == 0);
  std::vector<std::string> causal = call;
  causal.insert(causal.end(), {"--mask", "causal"});
  r = box.run(causal);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(TileConfig{128, 64, 12, 2}));
  CHECK(line_of(r.out, "source:")
            .rfind("source:     default (built-in table (row d<=256 for mask none passed over); no tuned",
                   0) == 0);
}

TEST_CASE(
    "the Hopper forward's grid is part of the kernel: config names it, compile and cache ls tell them "
    "apart") {
  Sandbox box("flashrtc-cli-persistent");
  const auto kernel_line = [&](const std::string& seqlen) {
    const Result r = box.run({"config", "--dtype", "bf16", "--head-dim", "96", "--mask", "causal", "--seqlen",
                              seqlen, "--arch", "sm_90a"});
    REQUIRE(r.exit_code == 0);
    return line_of(r.out, "kernel:");
  };
  const std::string prefix = "kernel:     flashrtc::attention_forward_wgmma<flashrtc::bfloat16_t, 96, ";
  const std::string mask = "flashrtc::kernel::Mask::kCausalTopLeft, ";
  CHECK(kernel_line("1024") == prefix + "128, 128, 12, 2, " + mask + "true>");
  CHECK(kernel_line("8192") == prefix + "192, 96, 16, 3, " + mask + "true>");
  Result r = box.run({"config", "--json", "--dtype", "bf16", "--head-dim", "96", "--mask", "causal",
                      "--seqlen", "1024", "--arch", "sm_90a"});
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out).at("specialization").at("persistent") == true);

  for (const char* seqlen : {"1024", "8192"}) {
    r = box.run({"compile", "--json", "--dtype", "bf16", "--head-dim", "96", "--mask", "causal", "--seqlen",
                 seqlen, "--arch", "sm_90a"});
    REQUIRE(r.exit_code == 0);
    const json doc = json::parse(r.out);
    CHECK(doc.at("specialization").at("persistent") == true);
    CHECK(doc.at("kernel").at("spills") == false);
  }
  // The two lengths run two tiles: two entries, each marked persistent.
  r = box.run({"cache", "ls"});
  REQUIRE(r.exit_code == 0);
  std::size_t persistent = 0, pos = 0;
  while ((pos = r.out.find("  persistent\n", pos)) != std::string::npos) ++persistent, ++pos;
  CHECK(persistent == 2);
  CHECK(r.out.find("2 entries") != std::string::npos);
}

TEST_CASE("flashrtc compile --all warms the tuned tiles too; FLASHRTC_REQUIRE_CACHED refuses to compile") {
  Sandbox box("flashrtc-cli-warm");
  const std::map<std::string, std::string> strict = {{"FLASHRTC_REQUIRE_CACHED", "1"}};
  // d=80 is no default head dim: only the tuned entry asks for it.
  const auto space = forward_config_space(DType::kFloat32, 80, kSmemBytesSm90);
  REQUIRE_FALSE(space.empty());
  const TileConfig tuned = space.front();
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU", "sm_90a", DType::kFloat32, 80, MaskKind::kCausalBottomRight, 512, 512),
      tuned));
  // Under FLASHRTC_REQUIRE_CACHED every compile of an empty cache is refused, fast: the list shows without
  // compiling anything.
  Result r = box.run({"compile", "--all", "--arch", "sm_90a", "-j", "2"}, strict);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find(std::to_string(warm_specs("sm_90a", false).size()) + " defaults, 1 tuned") !=
        std::string::npos);
  CHECK(r.out.find("fp32    80 causal-br  FAILED") != std::string::npos);
  // Every row counts itself against the total, and one summary line closes the table.
  const std::string total = std::to_string(warm_specs("sm_90a").size());
  CHECK(r.out.find("\n" + std::string(9 - 2 - total.size(), ' ') + "1/" + total + " ") != std::string::npos);
  CHECK(r.out.find(" " + total + "/" + total + " fp32    80 causal-br  FAILED") != std::string::npos);
  CHECK(r.out.find("done: 0 of " + total + " ready, " + total + " failed (compiled 0,") != std::string::npos);
  CHECK(r.err.find("CompileDisallowed") != std::string::npos);
  CHECK(cache_entry_count() == 0);

  const std::vector<std::string> one = {"compile",
                                        "--dtype",
                                        "fp32",
                                        "--head-dim",
                                        "80",
                                        "--mask",
                                        "causal-br",
                                        "--block-m",
                                        std::to_string(tuned.block_m),
                                        "--block-n",
                                        std::to_string(tuned.block_n),
                                        "--warps",
                                        std::to_string(tuned.warps),
                                        "--stages",
                                        std::to_string(tuned.stages),
                                        "--arch",
                                        "sm_90a"};
  r = box.run(one, strict);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("FLASHRTC_REQUIRE_CACHED") != std::string::npos);
  CHECK(box.run(one).exit_code == 0);  // warm it
  r = box.run(one, strict);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("from:           disk") != std::string::npos);
}

namespace {

// "--warps" for the one field in which a and b differ; empty unless exactly one does.
std::string differing_option(const TileConfig& a, const TileConfig& b) {
  const std::string field = test::single_field_override(a, b);
  if (field.empty()) return {};
  std::string name = "--" + field.substr(0, field.find('='));
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

namespace {

// The rows of `tune --dry-run`'s candidate table: "128x64 w12 s2" and the shared memory column as printed.
std::vector<std::pair<TileConfig, std::string> > dry_run_rows(const std::string& out) {
  std::vector<std::pair<TileConfig, std::string> > rows;
  std::istringstream lines(out.substr(out.find("\nconfig ") + 1));
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line) && line.rfind("dry run:", 0) != 0) {
    TileConfig tile;
    int threads = 0;
    double smem = 0;
    char unit[8] = {};
    REQUIRE_MESSAGE(std::sscanf(line.c_str(), "%dx%d w%d s%d %d %lf %7s", &tile.block_m, &tile.block_n,
                                &tile.warps, &tile.stages, &threads, &smem, unit) == 7,
                    line);
    char shown[32];
    std::snprintf(shown, sizeof(shown), "%.1f %s", smem, unit);
    rows.emplace_back(tile, shown);
  }
  return rows;
}

// "129.2 KiB", as the command shows bytes.
std::string kib_text(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  return text;
}

}  // namespace

TEST_CASE("tune --dry-run lists the shared memory each tile's kernel launches with, as compile reports it") {
  Sandbox box("flashrtc-cli-dry-run-smem");
  for (const char* arch : {"sm_90a", "sm_80"})
    for (const char* dtype : {"bf16", "fp32"})
      for (const char* head_dim : {"64", "128"})
        for (const char* op : {"fwd", "bwd"}) {
          INFO(arch << " " << dtype << " d=" << head_dim << " --op " << op);
          const Result r = box.run({"tune", "--dry-run", "--space", "full", "--arch", arch, "--op", op,
                                    "--dtype", dtype, "--head-dim", head_dim, "--seqlen", "4096"});
          REQUIRE(r.exit_code == 0);
          const auto rows = dry_run_rows(r.out);
          CHECK_FALSE(rows.empty());
          for (const auto& [tile, smem] : rows) {
            // What `compile --arch ARCH --seqlen 4096` with this tile builds (its resolution and spec); the
            // backward's main kernel as backward_operations picks it (sm_90a bf16: the fused one).
            ConfigQuery query;
            query.dtype = *parse_dtype(dtype);
            query.head_dim = std::stoi(head_dim);
            query.seqlen_q = query.seqlen_kv = 4096;
            BackwardParams call;
            call.dtype = query.dtype, call.head_dim = query.head_dim;
            query.operation =
                std::string(op) == "bwd" ? backward_operations(call, arch)[1] : Operation::kForward;
            query.explicit_config = tile;
            const KernelSpec spec =
                call_kernel_spec(query, resolve_config(query, assumed_device_target("", arch)));
            INFO(to_string(tile));
            CHECK(smem == kib_text(spec.family->smem_bytes(spec)));
          }
        }
  // And as the command itself says, for the Hopper default and a small tile of the same family.
  for (const std::vector<std::string> tile :
       {std::vector<std::string>{"192", "80", "16", "3"}, std::vector<std::string>{"128", "64", "12", "2"}}) {
    const std::vector<std::string> call = {"--arch",   "sm_90a", "--dtype",   "bf16",  "--head-dim", "128",
                                           "--seqlen", "4096",   "--block-m", tile[0], "--block-n",  tile[1],
                                           "--warps",  tile[2],  "--stages",  tile[3]};
    const Result dry = box.run(with({"tune", "--dry-run", "--space", "full"}, call));
    const Result compiled = box.run(with({"compile"}, call));
    REQUIRE(dry.exit_code == 0);
    REQUIRE(compiled.exit_code == 0);
    const std::string row = line_of(dry.out, tile[0] + "x" + tile[1] + " w" + tile[2] + " s" + tile[3] + " ");
    const std::string dynamic = line_of(compiled.out, "dynamic smem:");
    const std::string shown =
        dynamic.substr(dynamic.find('(') + 1, dynamic.find(')') - dynamic.find('(') - 1);
    CHECK(row.find(" " + shown + " ") != std::string::npos);
  }
}

TEST_CASE(
    "--block-m/--block-n/--warps/--stages override the resolved tile alike in config, bench, tune, compile") {
  Sandbox box("flashrtc-cli-tile-options");
  // A tuned entry, FLASHRTC_CONFIG changing one of its fields, and a command-line option changing another:
  // every command must land on the same tile (given), built on the same base (with_env).
  const auto space = forward_config_space(DType::kFloat16, 64, kSmemBytesSm90);
  const TileConfig fallback =
      default_forward_config(DType::kFloat16, 64, MaskKind::kNone, kSmemBytesSm90, 3000);
  std::optional<std::array<TileConfig, 3> > tiles;
  for (const TileConfig& tuned : space)
    for (const TileConfig& with_env : space)
      for (const TileConfig& given : space) {
        const std::string env_field = test::single_field_override(tuned, with_env);
        const std::string cli_option = differing_option(with_env, given);
        if (tiles || tuned == fallback || env_field.empty() || cli_option.empty()) continue;
        if (test::single_field_override(tuned, given).empty() && !(tuned == given))
          tiles = std::array<TileConfig, 3>{tuned, with_env, given};
      }
  REQUIRE(tiles.has_value());
  const auto [tuned, with_env, given] = *tiles;
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU 141GB", "sm_90", DType::kFloat16, 64, MaskKind::kNone, 4096, 4096), tuned));
  const std::map<std::string, std::string> env = {
      {"FLASHRTC_CONFIG", test::single_field_override(tuned, with_env)}};
  const std::string option = differing_option(with_env, given);
  const std::string value = test::single_field_override(with_env, given).substr(option.size() - 1);
  INFO("tuned " << to_string(tuned) << ", FLASHRTC_CONFIG " << env.at("FLASHRTC_CONFIG") << ", " << option
                << " " << value);
  const std::vector<std::string> gpu = {"--gpu-name", "Test GPU 141GB", "--arch", "sm_90"};
  const std::vector<std::string> call = {"--dtype", "fp16", "--head-dim", "64", "--mask", "none"};

  for (const bool with_option : {false, true}) {
    const TileConfig expected = with_option ? given : with_env;
    std::vector<std::string> tile_args = gpu;
    if (with_option) tile_args = with(tile_args, {option, value});

    Result r = box.run(with(with(with({"config"}, call), {"--seqlen", "3000"}), tile_args), env);
    REQUIRE(r.exit_code == 0);
    CHECK(line_of(r.out, "config:") == "config:     " + to_string(expected));
    CHECK(line_of(r.out, "source:").find(with_option ? "over the environment tile" : "over the tuned tile") !=
          std::string::npos);

    r = box.run(with(with({"bench", "--dry-run", "--json", "--shape", "1,8,3000,64", "--dtype", "fp16",
                           "--mask", "none"},
                          {}),
                     tile_args),
                env);
    REQUIRE(r.exit_code == 0);
    const json row = json::parse(r.out);
    CHECK(row.at("tile") == json({{"block_m", expected.block_m},
                                  {"block_n", expected.block_n},
                                  {"warps", expected.warps},
                                  {"stages", expected.stages}}));

    r = box.run(with(with(with({"tune", "--dry-run"}, call), {"--seqlen", "3000"}), tile_args), env);
    REQUIRE(r.exit_code == 0);
    CHECK(line_of(r.out, "base:").rfind("base:      " + to_string(expected), 0) == 0);

    r = box.run(with(with(with({"compile"}, call), {"--seqlen", "3000"}), tile_args), env);
    REQUIRE(r.exit_code == 0);
    CHECK(line_of(r.out, "tile:") == "tile:           " + to_string(expected));
  }
}

TEST_CASE(
    "every command refuses a flag, log level or FLASHRTC_CONFIG it does not know, naming the variable") {
  Sandbox box("flashrtc-cli-bad-env");
  const std::vector<std::vector<std::string> > commands = {
      {"info"},
      {"info", "--json"},
      {"info", "--has-gpu"},
      {"cache", "ls"},
      {"cache", "verify"},
      {"cache", "prune", "--max-size", "1G"},
      {"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
      {"compile", "--dtype", "bf16", "--head-dim", "64", "--arch", "sm_80"},
      {"compile", "--all", "--arch", "sm_80"},
      {"bench", "--dry-run", "--shape", "1,8,64,64", "--dtype", "bf16"},
      {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
      {"run", "--batch", "1", "--heads", "1", "--seqlen", "64", "--head-dim", "64", "--dtype", "bf16"}};
  const std::vector<std::pair<std::string, std::string> > bad = {{"FLASHRTC_REQUIRE_CACHED", "maybe"},
                                                                 {"FLASHRTC_DISABLE_DISK_CACHE", "2"},
                                                                 {"FLASHRTC_ALWAYS_COMPILE", "enabled"},
                                                                 {"FLASHRTC_LOG_LEVEL", "verbose"},
                                                                 {"FLASHRTC_CONFIG", "blockm=64"}};
  for (const auto& command : commands)
    for (const auto& [name, value] : bad) {
      INFO(command[0] << (command.size() > 1 ? " " + command[1] : "") << " with " << name << "=" << value);
      const Result r = box.run(command, {{name, value}});
      CHECK(r.exit_code == 2);
      CHECK(r.err.find("flashrtc: error: InvalidArgument: " + name + "='" + value + "'") == 0);
    }
  // The documented spellings in any case, and empty as unset.
  for (const char* value : {"False", "OFF", "no", ""})
    CHECK(box.run({"cache", "ls"}, {{"FLASHRTC_REQUIRE_CACHED", value}}).exit_code == 0);
  CHECK(box.run({"cache", "ls"}, {{"FLASHRTC_LOG_LEVEL", "Debug"}}).exit_code == 0);
}

TEST_CASE("--iters, --warmup and --op mean the same in every command; --repeats is a deprecated --iters") {
  Sandbox box("flashrtc-cli-names");
  for (const char* command : {"run", "bench", "tune"}) {
    const Result help = box.run({command, "--help"});
    INFO(command);
    CHECK(help.out.find("--iters INT:INT in [1 - 1000000]") != std::string::npos);
    CHECK(help.out.find("--warmup INT:INT in [0 - 1000000]") != std::string::npos);
    CHECK(help.out.find("--repeats") == std::string::npos);
  }
  for (const char* command : {"compile", "tune"})
    CHECK_MESSAGE(box.run({command, "--help"}).out.find("--op TEXT:{fwd,bwd}=fwd     fwd, or bwd: ") !=
                      std::string::npos,
                  command);
  const std::string config = box.run({"config", "--help"}).out;  // config also takes decode
  CHECK(config.find("--op TEXT:{fwd,bwd,decode}=fwd\n") != std::string::npos);
  CHECK(config.find(" fwd; bwd: ") != std::string::npos);
  CHECK(config.find("; or decode: ") != std::string::npos);
  const std::string bench = box.run({"bench", "--help"}).out;  // bench decode and varlen
  CHECK(bench.find("--op TEXT:{fwd,bwd,decode,varlen}=fwd\n") != std::string::npos);
  CHECK(bench.find(" fwd; bwd: ") != std::string::npos);
  CHECK(bench.find("; decode: ") != std::string::npos);
  CHECK(bench.find("; or varlen: ") != std::string::npos);
  const std::vector<std::string> dry = {"tune", "--dry-run",  "--arch", "sm_80",    "--dtype",
                                        "bf16", "--head-dim", "64",     "--seqlen", "512"};
  Result r = box.run(with(dry, {"--repeats", "5"}));
  CHECK(r.exit_code == 0);
  const std::string warning = "flashrtc: warning: --repeats is deprecated, use --iters\n";
  CHECK(r.err == warning);
  r = box.run(with(dry, {"--iters", "5"}));
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(box.run(with(dry, {"--iters", "5", "--repeats", "5"})).exit_code == 2);
  for (const char* bad : {"0", "x", "1000001"}) {
    r = box.run(with(dry, {"--repeats", bad}));
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--repeats: " + std::string(bad) + ": must be an integer from 1 to 1000000") !=
          std::string::npos);
  }
}

TEST_CASE("compile --op bwd compiles the backward's kernels as config --op bwd resolves them") {
  Sandbox box("flashrtc-cli-compile-bwd");
  const std::vector<std::string> call = {"--op", "bwd",        "--arch", "sm_80",    "--dtype",
                                         "bf16", "--head-dim", "64",     "--seqlen", "1024"};
  const Result compiled = box.run(with({"compile", "--json"}, call));
  REQUIRE(compiled.exit_code == 0);
  const Result config = box.run(with({"config", "--json"}, call));
  REQUIRE(config.exit_code == 0);
  const json kernels = json::parse(compiled.out).at("kernels");
  const json resolved = json::parse(config.out).at("kernels");
  REQUIRE(kernels.size() == resolved.size());
  REQUIRE(kernels.size() >= 2);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    CHECK(kernels[i].at("role") == resolved[i].at("role"));
    CHECK(kernels[i].at("resolution").at("config") == resolved[i].at("config"));
    CHECK(kernels[i].at("resolution").at("family") == resolved[i].at("family"));
    CHECK(kernels[i].at("kernel").at("arch") == "sm_80");
  }
  // The text names each kernel before its details.
  const Result text = box.run(with({"compile"}, call));
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("main: ") != std::string::npos);
  CHECK(text.out.find("from:           disk") != std::string::npos);  // warmed by the first one
  // sm_80 has no fused kernel: the deterministic mode compiles the same kernels (from the disk cache now).
  const Result deterministic = box.run(with({"compile", "--json", "--deterministic"}, call));
  REQUIRE(deterministic.exit_code == 0);
  const json same = json::parse(deterministic.out).at("kernels");
  REQUIRE(same.size() == kernels.size());
  for (std::size_t i = 0; i < same.size(); ++i)
    CHECK(same[i].at("resolution").at("family") == kernels[i].at("resolution").at("family"));
  CHECK(same[2].at("role") == "dq");
  CHECK(box.run({"compile", "--deterministic", "--arch", "sm_80", "--dtype", "bf16", "--head-dim", "64"})
            .exit_code == 2);  // --deterministic goes with --op bwd
  CHECK(box.run({"compile", "--all", "--op", "bwd", "--deterministic", "--arch", "sm_80"}).exit_code == 2);
}

TEST_CASE("compile --all narrowed by --op, --dtype and --head-dim compiles only those kernels") {
  Sandbox box("flashrtc-cli-compile-narrow");
  // Under FLASHRTC_REQUIRE_CACHED nothing compiles: the list shows, fast.
  const std::map<std::string, std::string> strict = {{"FLASHRTC_REQUIRE_CACHED", "1"}};
  const auto count = [](bool backward, std::optional<DType> dtype, int head_dim) {
    std::size_t n = 0;
    for (const KernelSpec& spec : warm_specs("sm_90a"))
      n += (spec.family->operation != Operation::kForward && spec.family->operation != Operation::kForwardVarlen) ==
               backward &&
           (!dtype || spec.dtype == *dtype) &&
           (!head_dim || spec.head_dim == head_dim);
    return n;
  };
  const std::vector<std::string> all = {"compile", "--all", "--arch", "sm_90a", "-j", "2"};
  Result r = box.run(with(all, {"--op", "fwd", "--dtype", "bf16", "--head-dim", "128"}), strict);
  const std::string n = std::to_string(count(false, DType::kBFloat16, 128));
  CHECK(r.out.find("specializations for sm_90a (--op fwd --dtype bf16 --head-dim 128): " + n + " defaults") !=
        std::string::npos);
  CHECK(r.out.find("done: 0 of " + n + " ready, " + n + " failed") != std::string::npos);
  CHECK(r.out.find(" fp32 ") == std::string::npos);
  r = box.run(with(all, {"--op", "bwd"}), strict);
  const std::string backward = std::to_string(count(true, std::nullopt, 0));
  CHECK(r.out.find("done: 0 of " + backward + " ready") != std::string::npos);
  r = box.run(with(all, {"--dtype", "fp16"}), strict);
  const std::string fp16 = std::to_string(count(false, DType::kFloat16, 0) + count(true, DType::kFloat16, 0));
  CHECK(r.out.find("done: 0 of " + fp16 + " ready") != std::string::npos);
  // Nothing to warm is a usage error, not an empty success.
  r = box.run(with(all, {"--head-dim", "80"}));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("compile --all --head-dim 80: no default or tuned kernel for sm_90a") !=
        std::string::npos);
}

TEST_CASE("bad arch and length forms are usage errors naming what is accepted, in every command") {
  Sandbox box("flashrtc-cli-bad-input");
  const std::vector<std::vector<std::string> > with_arch = {
      {"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
      {"bench", "--dry-run", "--shape", "1,8,64,64", "--dtype", "bf16"},
      {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
      {"compile", "--dtype", "bf16", "--head-dim", "64"}};
  const std::string digits(5000, '9');
  for (const auto& command : with_arch) {
    for (const std::string& arch : {std::string("sm_xx"), std::string("sm_1"), std::string("sm_999"),
                                    std::string("sm_80a"), std::string("90"), "sm_" + digits}) {
      const Result r = box.run(with(command, {"--arch", arch}));
      INFO(command[0] << " --arch " << arch.substr(0, 12));
      CHECK(r.exit_code == 2);
      CHECK(r.err.find("must be one of sm_80") != std::string::npos);
      CHECK(r.err.find("stoi") == std::string::npos);
      CHECK(r.err.size() < 1000);
    }
    CHECK(box.run(with(command, {"--arch", ""})).exit_code == 2);
    const Result from_env = box.run(command, {{"FLASHRTC_ARCH", "sm_999"}});
    CHECK(from_env.exit_code == 2);
    CHECK(from_env.err.find("FLASHRTC_ARCH='sm_999': must be one of sm_80") != std::string::npos);
    CHECK(box.run(with(command, {"--gpu-name", "Test GPU"})).exit_code == 2);  // --gpu-name needs --arch
  }
  // A length that would overflow the tuning key's length buckets (and hung `config`) is refused at once.
  const std::string range = "must be an integer from 1 to 2147483647";
  for (const std::string& length : {std::string("4611686018427387905"), std::string("0"), std::string("-3"),
                                    std::string("2147483648"), std::string("1e3"), "9" + digits}) {
    INFO("length " << length.substr(0, 20));
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string> >{
             {"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", length},
             {"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64", "--kv-seqlen", length},
             {"run", "--batch", length, "--heads", "8", "--seqlen", "64", "--head-dim", "64", "--dtype",
              "bf16"},
             {"run", "--batch", "1", "--heads", length, "--seqlen", "64", "--head-dim", "64", "--dtype",
              "bf16"},
             {"run", "--batch", "1", "--heads", "8", "--kv-heads", length, "--seqlen", "64", "--head-dim",
              "64", "--dtype", "bf16"},
             {"run", "--batch", "1", "--heads", "8", "--seqlen", length, "--head-dim", "64", "--dtype",
              "bf16"},
             {"bench", "--dry-run", "--seqlen", length},
             {"bench", "--dry-run", "--shape", "1,8," + length + ",64"},
             {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", length},
             {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64", "--batch",
              length},
             {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64", "--heads",
              length},
             {"compile", "--dtype", "bf16", "--head-dim", "64", "--arch", "sm_80", "--seqlen", length}}) {
      const Result r = box.run(args);
      INFO(args[0] << " " << args[1] << " " << args[2]);
      CHECK(r.exit_code == 2);
      CHECK(r.err.find("from 1 to 2147483647") != std::string::npos);
    }
  }
  // A malformed FLASHRTC_CONFIG is refused by compile and tune --dry-run exactly as by config.
  const std::map<std::string, std::string> bad = {{"FLASHRTC_CONFIG", "block_m=64,wraps=4"}};
  const std::string message = "FLASHRTC_CONFIG='block_m=64,wraps=4': unknown field 'wraps'";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string> >{
           {"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
           {"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"},
           {"bench", "--dry-run", "--shape", "1,8,64,64", "--dtype", "bf16"},
           {"compile", "--dtype", "bf16", "--head-dim", "64", "--arch", "sm_80"},
           {"compile", "--all", "--arch", "sm_80"}}) {
    const Result r = box.run(args, bad);
    INFO(args[0] << " " << args[1]);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
  CHECK(cache_entry_count() == 0);
}

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "flashrtc cache on a damaged and a read-only cache: bad entries shown as bad, bounded reads, "
    "cleanups that say what they could not remove and exit 3") {
  Sandbox box("flashrtc-cli-cache-ro");
  REQUIRE(box.run({"compile", "--dtype", "fp32", "--head-dim", "32", "--arch", "sm_80"}).exit_code == 0);
  Result r = box.run({"cache", "ls", "--json"});
  REQUIRE(r.exit_code == 0);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 1);
  test::ConfigOverride same_cache(test::config_with_cache_dir(box.tuning.dir() / "cache"));
  const CacheEntry entry = find_cache_entry(rows[0].at("key").get<std::string>());
  CHECK(rows[0].at("bad") == false);
  CHECK(rows[0].at("nvrtc_build") == entry.nvrtc_build);
  CHECK(entry.nvrtc_build.find(" V") != std::string::npos);

  // The PTX becomes a link to an endless file: a bad entry everywhere, and no read follows it.
  fs::remove(entry.ptx_path);
  fs::create_symlink("/dev/zero", entry.ptx_path);
  r = box.run({"cache", "ptx", entry.key});
  CHECK(r.exit_code == 3);
  CHECK(r.err.find(entry.ptx_path.string()) != std::string::npos);
  r = box.run({"cache", "show", entry.key});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("problem:") != std::string::npos);
  r = box.run({"cache", "ls"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find(entry.key.substr(0, 16) + " bad: ") != std::string::npos);
  CHECK(r.out.find("1 entries (0 spilling, 1 bad)") != std::string::npos);
  r = box.run({"cache", "ls", "--json"});
  REQUIRE(r.exit_code == 0);
  rows = json::parse(r.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("bad") == true);
  CHECK_FALSE(rows[0].at("problem").get<std::string>().empty());

  // Read-only: each cleanup names what it could not remove, says why once, and exits 3.
  const fs::path cache = box.tuning.dir() / "cache";
  test::set_writable(cache, false);
  r = box.run({"cache", "verify"}, {}, true);
  if (r.exit_code == kCannotDropRoot) {
    test::set_writable(cache, true);
    MESSAGE("skipped: running as root without the right to become nobody, nothing here is read-only");
    return;
  }
  const std::string not_writable =
      "error: 1 entry could not be removed: the cache at " + (cache / "v3").string() + " is not writable";
  const std::string cannot_remove = "cannot remove " + entry.arch + "/" + entry.key + " (";
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("1 bad (0 removed, 1 not removed)") != std::string::npos);
  CHECK(count_of(r.err, cannot_remove) == 1);
  CHECK(count_of(r.err, "error") == 1);
  CHECK(r.err.find(not_writable) != std::string::npos);
  r = box.run({"cache", "prune", "--max-size", "0"}, {}, true);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("pruned 0 of 1 entries") != std::string::npos);
  CHECK(count_of(r.err, cannot_remove) == 1);
  CHECK(r.err.find(not_writable) != std::string::npos);
  r = box.run({"cache", "clear"}, {}, true);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("removed 0 entries") != std::string::npos);
  CHECK(count_of(r.err, cannot_remove + "clear)") == 1);
  CHECK(r.err.find(not_writable) != std::string::npos);
  test::set_writable(cache, true);
  CHECK(cache_entry_count() == 1);

  // Writable again, verify removes it: exit 1, as for any bad entry removed.
  r = box.run({"cache", "verify"});
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("1 bad (removed)") != std::string::npos);
  CHECK(r.err.find("cannot remove") == std::string::npos);
  CHECK(cache_entry_count() == 0);
}

namespace {

// Every line of a --json stream parsed; a line that is not JSON fails the test.
std::vector<json> json_lines(const std::string& text) {
  std::vector<json> rows;
  std::size_t start = 0;
  for (std::size_t end = text.find('\n'); end != std::string::npos;
       start = end + 1, end = text.find('\n', start))
    rows.push_back(json::parse(text.substr(start, end - start)));
  CHECK(start == text.size());  // every line ends with a newline
  return rows;
}

json tile_json(const TileConfig& c) {
  return {{"block_m", c.block_m}, {"block_n", c.block_n}, {"warps", c.warps}, {"stages", c.stages}};
}

}  // namespace

TEST_CASE("--json: info, config, compile, cache show print one document with the documented fields") {
  Sandbox box("flashrtc-cli-json");
  Result r = box.run({"info", "--json"});
  REQUIRE(r.exit_code == 0);
  json doc = json::parse(r.out);
  CHECK(doc.at("flashrtc").is_string());
  CHECK(doc.at("nvrtc").get<std::string>() == nvrtc_version());
  const bool usable = doc.at("gpu").at("usable").get<bool>();
  CHECK(doc.at("gpu").at("problem").is_null() == usable);
  if (!device_available()) {
    CHECK_FALSE(usable);
    CHECK(doc.at("gpu").at("device").is_null());
    CHECK(doc.at("gpu").at("problem").get<std::string>() == device_unavailable_reason());
  } else if (usable) {
    CHECK(doc.at("gpu").at("device").at("arch").get<std::string>().rfind("sm_", 0) == 0);
    CHECK(doc.at("gpu").at("device").at("multiprocessors").get<int>() > 0);
  }
  CHECK(doc.at("cache").at("dir") == (box.tuning.dir() / "cache" / "v3").string());
  CHECK(doc.at("cache").at("entries") == 0);
  CHECK(doc.at("tuning_db").at("path") == box.tuning.db().string());
  CHECK(doc.at("tuning_db").at("entries") == 0);
  CHECK(doc.at("environment").at("FLASHRTC_TUNE_DB") == box.tuning.db().string());
  CHECK(doc.at("environment").at("FLASHRTC_ARCH").is_null());
  r = box.run({"info", "--has-gpu", "--json"});
  CHECK(r.exit_code == (usable ? 0 : 3));
  doc = json::parse(r.out);
  CHECK(doc.size() == 1);
  CHECK(doc.at("gpu").at("usable") == usable);

  // config: the resolution, and the same tile the text output names, tuned or not.
  const std::vector<std::string> config = {"config",     "--json", "--dtype",    "fp16",
                                           "--head-dim", "64",     "--seqlen",   "3000",
                                           "--arch",     "sm_90",  "--gpu-name", "Test GPU"};
  r = box.run(config);
  REQUIRE(r.exit_code == 0);
  doc = json::parse(r.out);
  const TileConfig fallback =
      default_forward_config(DType::kFloat16, 64, MaskKind::kNone, kSmemBytesSm90, 3000);
  CHECK(doc.at("config") == tile_json(fallback));
  CHECK(doc.at("source") == "default");
  CHECK(doc.at("tuned").is_null());
  CHECK(doc.at("family").get<std::string>() ==
        select_kernel_family(Operation::kForward, DType::kFloat16, 64, "sm_90").family->name);
  CHECK(doc.at("tuning_key").get<std::string>().rfind("Test GPU sm_90", 0) == 0);
  CHECK(
      doc.at("call") ==
      json({{"dtype", "fp16"}, {"head_dim", 64}, {"mask", "none"}, {"seqlen_q", 3000}, {"seqlen_kv", 3000}}));
  CHECK(doc.at("tuning_db") == box.tuning.db().string());
  CHECK(doc.at("flashrtc_config").is_null());
  const auto space = forward_config_space(DType::kFloat16, 64, kSmemBytesSm90);
  const auto other =
      std::find_if(space.begin(), space.end(), [&](const TileConfig& c) { return !(c == fallback); });
  REQUIRE(other != space.end());
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU", "sm_90", DType::kFloat16, 64, MaskKind::kNone, 4096, 4096), *other));
  doc = json::parse(box.run(config).out);
  CHECK(doc.at("config") == tile_json(*other));
  CHECK(doc.at("source") == "tuned");
  CHECK(doc.at("tuned").at("config") == tile_json(*other));
  CHECK(doc.at("tuned").at("key") == doc.at("tuning_key"));
  std::vector<std::string> text_config = config;
  text_config.erase(text_config.begin() + 1);
  CHECK(line_of(box.run(text_config).out, "config:") == "config:     " + to_string(*other));

  // compile: the specialization, where its tile came from, and the kernel as the cache lists it.
  const std::vector<std::string> compile = {"compile",    "--json", "--dtype", "fp32",
                                            "--head-dim", "32",     "--arch",  "sm_80"};
  r = box.run(compile);
  REQUIRE(r.exit_code == 0);
  doc = json::parse(r.out);
  const TileConfig tile = default_forward_config(DType::kFloat32, 32, MaskKind::kNone, kSmemBytesSm80);
  json specialization = tile_json(tile);
  specialization.update({{"dtype", "fp32"}, {"head_dim", 32}, {"mask", "none"}, {"family", "simt"}});
  CHECK(doc.at("specialization") == specialization);
  CHECK(doc.at("resolution").at("config") == tile_json(tile));
  CHECK(doc.at("resolution").at("source") == "default");
  const json kernel = doc.at("kernel");
  CHECK(kernel.at("from") == "compiled");
  CHECK(kernel.at("arch") == "sm_80");
  CHECK(kernel.at("registers").get<int>() > 0);
  CHECK(kernel.at("spills") == false);
  CHECK(kernel.at("dynamic_smem_bytes") == forward_smem_bytes(DType::kFloat32, 32, tile));
  CHECK(kernel.at("compile_ms").get<double>() > 0);
  CHECK(json::parse(box.run(compile).out).at("kernel").at("from") == "disk");

  // cache show: the entry exactly as ls --json gives it, meta.json as stored and the compile log.
  const json listed = json::parse(box.run({"cache", "ls", "--json"}).out);
  REQUIRE(listed.size() == 1);
  const std::string key = kernel.at("key");
  CHECK(listed[0].at("key") == key);
  CHECK(listed[0].at("registers") == kernel.at("registers"));
  json without_family = specialization;
  without_family.erase("family");
  CHECK(listed[0].at("specialization") == without_family);
  CHECK(listed[0].at("kernel") == "simt");
  r = box.run({"cache", "show", "--json", key.substr(0, 8)});
  REQUIRE(r.exit_code == 0);
  doc = json::parse(r.out);
  CHECK(doc.at("entry") == listed[0]);
  CHECK(doc.at("meta").at("resources").at("registers") == kernel.at("registers"));
  CHECK(doc.at("meta").at("key") == key);
  CHECK(doc.at("log").get<std::string>().find("ptxas") != std::string::npos);
}

TEST_CASE("--json: compile, compile --all, cache ls and cache show give one entry the same fields") {
  Sandbox box("flashrtc-cli-one-schema");
  Result r = box.run({"compile", "--json", "--dtype", "fp16", "--head-dim", "64", "--arch", "sm_80"});
  REQUIRE(r.exit_code == 0);
  const json compiled = json::parse(r.out);
  json kernel = compiled.at("kernel");
  CHECK(kernel.at("from") == "compiled");
  kernel.erase("from");  // how this process got it: no field of the entry
  json specialization = compiled.at("specialization");
  CHECK(kernel.at("kernel") == specialization.at("family"));
  specialization.erase("family");
  CHECK(kernel.at("specialization") == specialization);

  // A backward kernel whose template takes no block_n, stages or mask, warmed here; compile --all finds it
  // on disk and may compile nothing else.
  const std::vector<KernelSpec> specs = warm_specs("sm_80");
  const auto rows_spec = std::find_if(specs.begin(), specs.end(), [](const KernelSpec& s) {
    return s.family && !s.family->takes(TemplateArg::kBlockN) && !s.family->takes(TemplateArg::kMask);
  });
  REQUIRE(rows_spec != specs.end());
  {
    test::ConfigOverride same_cache(test::config_with_cache_dir(box.tuning.dir() / "cache"));
    compile_kernel(*rows_spec, "sm_80");
  }
  r = box.run({"compile", "--all", "--json", "--arch", "sm_80", "-j", "2"},
              {{"FLASHRTC_REQUIRE_CACHED", "1"}});
  json backward;
  for (const json& line : json_lines(r.out))
    if (line.contains("kernel") && line.at("specialization").at("family") == rows_spec->family->name)
      backward = line;
  REQUIRE(backward.is_object());
  INFO(backward.dump());
  for (const char* ignored : {"block_n", "stages", "mask"})
    CHECK_FALSE(backward.at("specialization").contains(ignored));
  json backward_kernel = backward.at("kernel");
  CHECK(backward_kernel.at("from") == "disk");
  backward_kernel.erase("from");
  json backward_specialization = backward.at("specialization");
  backward_specialization.erase("family");
  CHECK(backward_kernel.at("specialization") == backward_specialization);

  const json listed = json::parse(box.run({"cache", "ls", "--json"}).out);
  REQUIRE(listed.size() == 2);
  for (const json& printed : {kernel, backward_kernel}) {
    const std::string key = printed.at("key");
    INFO(key);
    const auto row =
        std::find_if(listed.begin(), listed.end(), [&](const json& e) { return e.at("key") == key; });
    REQUIRE(row != listed.end());
    // Every field compile prints, the listing prints alike; cache show prints the listing's row.
    for (const auto& [name, value] : printed.items()) {
      INFO(name);
      REQUIRE(row->contains(name));
      CHECK(row->at(name) == value);
    }
    r = box.run({"cache", "show", "--json", key});
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out).at("entry") == *row);
  }
}

TEST_CASE("cache show: of a compile log of megabytes, the head and how many bytes were left out") {
  Sandbox box("flashrtc-cli-show-log");
  REQUIRE(box.run({"compile", "--dtype", "fp32", "--head-dim", "32", "--arch", "sm_80"}).exit_code == 0);
  test::ConfigOverride same_cache(test::config_with_cache_dir(box.tuning.dir() / "cache"));
  const std::vector<CacheEntry> entries = list_cache_entries();
  REQUIRE(entries.size() == 1);
  const std::size_t log_bytes = std::size_t{8} << 20;
  std::string log;
  while (log.size() < log_bytes) log += "ptxas info    : a line of a planted log\n";
  log.resize(log_bytes);
  test::write_text(entries[0].log_path, log);
  const std::size_t bounded = std::size_t{512} << 10;

  Result r = box.run({"cache", "show", entries[0].key});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.size() < bounded);
  const std::string note = line_of(r.out, "... ");
  REQUIRE_FALSE(note.empty());
  const std::size_t not_shown = std::stoull(note.substr(4));
  CHECK(note == "... " + std::to_string(not_shown) + " bytes not shown");
  const std::size_t at = r.out.find("compile log (");
  REQUIRE(at != std::string::npos);
  const std::size_t shown_from = r.out.find('\n', at) + 1, shown_to = r.out.rfind("\n... ");
  CHECK(shown_to - shown_from + not_shown == log_bytes);

  r = box.run({"cache", "show", "--json", entries[0].key});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.size() < bounded);
  const json doc = json::parse(r.out);
  CHECK(doc.at("log_truncated_bytes").get<std::size_t>() == not_shown);
  CHECK(doc.at("log").get<std::string>().size() + not_shown == log_bytes);
  CHECK(log.rfind(doc.at("log").get<std::string>(), 0) == 0);
}

TEST_CASE("--json: compile --all gives JSON lines and a summary; a failing command a JSON error document") {
  Sandbox box("flashrtc-cli-json-lines");
  // Under FLASHRTC_REQUIRE_CACHED every compile of an empty cache is refused: one row each, fast.
  const Result r = box.run({"compile", "--all", "--json", "--arch", "sm_80", "-j", "2"},
                           {{"FLASHRTC_REQUIRE_CACHED", "1"}});
  CHECK(r.exit_code == 3);
  const std::vector<json> lines = json_lines(r.out);
  const std::vector<KernelSpec> specs = warm_specs("sm_80");
  REQUIRE(lines.size() == specs.size() + 2);  // a row each, the summary, the error
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(lines[i].dump());
    CHECK(lines[i].at("n") == i + 1);
    CHECK(lines[i].at("total") == specs.size());
    CHECK(lines[i].at("specialization").at("dtype") == std::string(to_string(specs[i].dtype)));
    CHECK(lines[i].at("specialization").at("head_dim") == specs[i].head_dim);
    if (family_of(specs[i]).takes(TemplateArg::kMask))
      CHECK(lines[i].at("specialization").at("mask") == std::string(to_string(specs[i].mask)));
    else
      CHECK_FALSE(lines[i].at("specialization").contains("mask"));  // a value the kernel ignores
    CHECK(lines[i].at("specialization").at("block_m") == specs[i].tile.block_m);
    CHECK(lines[i].at("error").at("kind") == "CompileDisallowed");
    CHECK_FALSE(lines[i].contains("kernel"));
  }
  const json& summary = lines[specs.size()].at("summary");
  CHECK(summary.at("total") == specs.size());
  CHECK(summary.at("ready") == 0);
  CHECK(summary.at("failed") == specs.size());
  CHECK(summary.at("compiled") == 0);
  CHECK(summary.at("spilling") == 0);
  CHECK(summary.at("tuned") == 0);
  CHECK(lines.back().at("error").at("kind") == "CompileDisallowed");
  CHECK(lines.back().at("error").at("exit_code") == 3);
  CHECK(r.err.find("flashrtc: error: CompileDisallowed") != std::string::npos);

  // A usage error and a missing GPU are JSON documents on stdout too, with the exit code they give.
  Result bad = box.run({"cache", "show", "--json", "not-a-key"});
  CHECK(bad.exit_code == 2);
  json error = json::parse(bad.out).at("error");
  CHECK(error.at("kind") == "InvalidArgument");
  CHECK(error.at("exit_code") == 2);
  CHECK(error.at("message").get<std::string>().find("not-a-key") != std::string::npos);
  if (!device_available()) {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string> >{{"compile", "--json", "--dtype", "fp16", "--head-dim", "64"},
                                                {"run", "--json", "--batch", "1", "--heads", "2", "--seqlen",
                                                 "64", "--head-dim", "64", "--dtype", "bf16"},
                                                {"bench", "--json", "--shape", "1,2,64,64"}}) {
      bad = box.run(args);
      INFO(args[0]);
      CHECK(bad.exit_code == 3);
      error = json::parse(bad.out).at("error");
      CHECK(error.at("kind") == "NoDevice");
      CHECK(error.at("exit_code") == 3);
    }
  }
  // Without --json a failure prints nothing on stdout.
  CHECK(box.run({"cache", "show", "not-a-key"}).out.empty());
}

namespace {

// Runs `flashrtc args...` on a pseudo-terminal (stdout and stderr both), as a user at a terminal sees it:
// what the terminal received, \r and escape sequences included.
std::string flashrtc_on_terminal(const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& env) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave_name = ::ptsname(master);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setsid();
    const int slave = ::open(slave_name.c_str(), O_RDWR);
    if (slave < 0) ::_exit(126);
    ::dup2(slave, 0);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    ::close(master);
    exec_flashrtc(args, env);
  }
  std::string seen;
  char buffer[4096];
  for (;;) {  // until the child closes the terminal (EIO)
    const ssize_t n = ::read(master, buffer, sizeof(buffer));
    if (n > 0)
      seen.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(master);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return seen;
}

}  // namespace

TEST_CASE("a kernel whose wgmma ptxas serialized is flagged by compile, compile --all, cache ls and tune") {
  Sandbox box("flashrtc-cli-serialized");
  // No built-in kernel is serialized (default_margin holds the defaults to it), so the entries are rewritten
  // as ptxas's advisory would have made them, with a valid digest: every reader of the cache sees them.
  const std::vector<std::string> one = {"compile", "--dtype", "fp16", "--head-dim", "64", "--arch", "sm_80"};
  Result r = box.run(one);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("wgmma") == std::string::npos);
  // The first quick tuning candidate of the same shape, for tune's table.
  const TileConfig candidate =
      tuning_candidates(DType::kFloat16, 64, 4096, 4096, TuneSpace::kQuick, assumed_sm_limits("sm_80")).at(0);
  std::vector<std::string> with_tile = one;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, int> >{{"--block-m", candidate.block_m},
                                                 {"--block-n", candidate.block_n},
                                                 {"--warps", candidate.warps},
                                                 {"--stages", candidate.stages}}) {
    with_tile.push_back(flag);
    with_tile.push_back(std::to_string(value));
  }
  REQUIRE(box.run(with_tile).exit_code == 0);
  const std::string reason = "insufficient register resources for the function (C7512)";
  {
    test::ConfigOverride same_cache(test::config_with_cache_dir(box.tuning.dir() / "cache"));
    for (const CacheEntry& e : list_cache_entries()) {
      detail::EntryRead read = detail::read_entry(e.dir);
      REQUIRE(read.artifact.has_value());
      read.artifact->resources.wgmma_serialized = true;
      read.artifact->resources.wgmma_serialized_reason = reason;
      detail::write_entry(e.dir, *read.artifact);
    }
  }
  const std::size_t entries = cache_entry_count();
  REQUIRE(entries >= 1);

  r = box.run(one);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "from:") == "from:           disk");
  CHECK(line_of(r.out, "warning: ptxas serialized") ==
        "warning: ptxas serialized this kernel's wgmma.mma_async instructions (" + reason +
            "): a wait after each, about half the tensor-core rate");

  r = box.run({"cache", "ls"});
  REQUIRE(r.exit_code == 0);
  INFO("cache ls:\n" << r.out);
  // The candidate tile may spill on sm_80: --spills keeps its own meaning beside --serialized.
  const json spilling = json::parse(box.run({"cache", "ls", "--spills", "--json"}).out);
  for (const json& row : spilling) CHECK(row.at("spills") == true);
  const std::string counts = std::to_string(entries) + " entries (" + std::to_string(spilling.size()) +
                             " spilling, " + std::to_string(entries) + " wgmma serialized)";
  CHECK(r.out.find(counts) != std::string::npos);
  CHECK(r.out.find("  wgmma serialized\n") != std::string::npos);
  r = box.run({"cache", "ls", "--serialized"});
  CHECK(r.out.find(std::to_string(entries) + " wgmma serialized entries") != std::string::npos);
  const json listed = json::parse(box.run({"cache", "ls", "--serialized", "--json"}).out);
  REQUIRE(listed.size() == entries);
  CHECK(listed[0].at("wgmma_serialized") == true);
  CHECK(listed[0].at("wgmma_serialized_reason") == reason);
  CHECK(box.run({"cache", "ls", "--spills", "--serialized"}).exit_code == 2);

  // compile --all under FLASHRTC_REQUIRE_CACHED: the cached default is ready, from disk, and counted.
  const std::map<std::string, std::string> strict = {{"FLASHRTC_REQUIRE_CACHED", "1"}};
  r = box.run({"compile", "--all", "--arch", "sm_80", "-j", "2"}, strict);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("  wgmma serialized\n") != std::string::npos);
  CHECK(r.out.find("; 0 spilling; 1 wgmma serialized; ") != std::string::npos);
  r = box.run({"compile", "--all", "--json", "--arch", "sm_80", "-j", "2"}, strict);
  const std::vector<json> lines = json_lines(r.out);
  REQUIRE(lines.size() >= 2);
  const json& summary = lines[lines.size() - 2].at("summary");
  CHECK(summary.at("ready") == 1);
  CHECK(summary.at("wgmma_serialized") == 1);
  const auto ready =
      std::find_if(lines.begin(), lines.end(), [](const json& l) { return l.contains("kernel"); });
  REQUIRE(ready != lines.end());
  CHECK(ready->at("kernel").at("wgmma_serialized") == true);

  // tune --dry-run --compile: the cached candidate's row says so, in the table and in the JSON.
  const fs::path rows_path = box.tuning.dir() / "rows.json";
  r = box.run({"tune", "--dtype", "fp16", "--head-dim", "64", "--seqlen", "4096", "--dry-run", "--compile",
               "--arch", "sm_80", "--output", rows_path.string()},
              strict);
  CHECK(r.out.find(" wgmma serialized\n") != std::string::npos);
  const json rows = json::parse(test::read_text(rows_path)).at("rows");
  const auto compiled =
      std::find_if(rows.begin(), rows.end(), [](const json& row) { return row.contains("registers"); });
  REQUIRE(compiled != rows.end());
  CHECK(compiled->at("wgmma_serialized") == true);
  CHECK(compiled->at("wgmma_serialized_reason") == reason);
}

TEST_CASE("compile --all on a terminal: a progress line with N/total, log lines on lines of their own") {
  Sandbox box("flashrtc-cli-progress");
  // Refused compiles are quick; reading the kernel sources from FLASHRTC_KERNEL_DIR logs one info line
  // while the progress line is drawn.
  std::map<std::string, std::string> env = box.env();
  env["FLASHRTC_REQUIRE_CACHED"] = "1";
  env["FLASHRTC_LOG_LEVEL"] = "info";
  env["FLASHRTC_KERNEL_DIR"] = (fs::path(FLASHRTC_SOURCE_DIR) / "kernel_sources").string();
  const std::string seen = flashrtc_on_terminal({"compile", "--all", "--arch", "sm_80", "-j", "2"}, env);
  INFO(seen);
  const std::string total = std::to_string(warm_specs("sm_80").size());
  const std::string erase = "\r\033[K";
  CHECK(seen.find("compile [0/" + total + "]") != std::string::npos);
  CHECK(seen.find("compile [" + total + "/" + total + "] ") != std::string::npos);
  const std::string log_marker = "[flashrtc] [info] kernel sources read from";
  const auto log_at = seen.find(log_marker);
  REQUIRE(log_at != std::string::npos);
  // The log line starts where the erased progress line was ("[hh:mm:ss.mmm] " before the marker), ends its
  // own line, and the progress line is drawn again right after it.
  const auto line_start = seen.rfind(erase, log_at);
  REQUIRE(line_start != std::string::npos);
  CHECK(seen.substr(line_start + erase.size(), log_at - line_start - erase.size()).size() == 15);
  const auto progress_start = seen.rfind('\n', line_start) + 1;  // the line the log line erased
  CHECK(seen.compare(progress_start, 9, "compile [") == 0);
  const auto line_end = seen.find("\r\n", log_at);
  REQUIRE(line_end != std::string::npos);
  CHECK(seen.compare(line_end + 2, 9, "compile [") == 0);
  // Rows are notes above the progress line; the summary closes it.
  const std::string counter = "1/" + total;  // right-aligned in 9 columns
  CHECK(seen.find(erase + std::string(9 - counter.size(), ' ') + counter +
                  " fp16    32 none       FAILED (see below)\r\n") != std::string::npos);
  CHECK(seen.find("\r\ndone: 0 of " + total + " ready, " + total + " failed") != std::string::npos);
}

namespace {

// A directory to be the whole PATH of a command: holds only the programs written or linked into it.
struct BinDir {
  explicit BinDir(const fs::path& dir) : path(dir) { fs::create_directories(dir); }
  void script(const std::string& name, const std::string& text) const {
    test::write_text(path / name, text);
    fs::permissions(path / name, fs::perms::owner_all);
  }
  fs::path path;
};

// Draws the image named on its command line (`gnuplot -c SCRIPT DATA IMAGE`), as gnuplot would.
constexpr const char* kFakeGnuplot =
    "#!/bin/sh\n[ \"$1\" = -c ] && [ -s \"$2\" ] && [ -s \"$3\" ] && echo drawn > \"$4\"\n";

bool starts_with_png_magic(const fs::path& file) {
  return test::read_text(file).rfind("\x89PNG", 0) == 0;
}

}  // namespace

TEST_CASE("bench --plot --from draws with gnuplot, else matplotlib, else leaves the script and data") {
  Sandbox box("flashrtc-cli-plot");
  const fs::path dir = box.tuning.dir();
  const fs::path rows = dir / "rows.jsonl";
  test::write_text(
      rows,
      R"({"provider":"flashrtc","dtype":"bfloat16","N":512,"d":128,"causal":false,"mask":"none","tflops":300.5}
{"provider":"flashrtc","dtype":"bfloat16","N":1024,"d":128,"causal":false,"mask":"none","tflops":420.1}
{"provider":"flashrtc","dtype":"bfloat16","N":1024,"d":128,"causal":true,"mask":"causal","error":"failed"}
{"provider":"sdpa","dtype":"bfloat16","N":1024,"d":128,"causal":true,"ms":0.2,"tflops":380}
)");
  const auto plot = [&](const fs::path& image, const BinDir& bin) {
    return box.run({"bench", "--from", rows.string(), "--plot", image.string()},
                   {{"PATH", bin.path.string()}});
  };

  // Neither plotter: the script and the data, one line saying how to draw them, exit 0.
  const BinDir empty(dir / "empty-bin");
  fs::path image = dir / "none.png";
  Result r = plot(image, empty);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(fs::exists(image));
  CHECK(count_of(r.out, "\n") == 1);
  CHECK(r.out.find("not drawn") != std::string::npos);
  CHECK(r.out.find("`gnuplot -c " + image.string() + ".gp " + image.string() + ".dat " + image.string() +
                   "`") != std::string::npos);
  const std::string data = test::read_text(image.string() + ".dat");
  CHECK(data.rfind("figure\tflashrtc bench: " + rows.string() + "\t2\n", 0) == 0);
  CHECK(data.find("\n\n\nN\tbfloat16 d=128 none\n512\t300.5\n1024\t420.1\n") != std::string::npos);
  CHECK(data.find("\n\n\nN\tsdpa: bfloat16 d=128 causal\n1024\t380\n") != std::string::npos);
  CHECK(data.find("N\tbfloat16 d=128 causal") == std::string::npos);  // its one row failed
  // The script is fixed text: the paths reach gnuplot as arguments, titles through the data.
  const std::string script = test::read_text(image.string() + ".gp");
  CHECK(script.find(image.string()) == std::string::npos);
  CHECK(script.find("bfloat16") == std::string::npos);

  // A gnuplot that fails is no error either; one that works draws the figure from the script.
  BinDir broken(dir / "broken-bin");
  broken.script("gnuplot", "#!/bin/sh\nexit 1\n");
  r = plot(image, broken);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("not drawn") != std::string::npos);
  BinDir fake(dir / "fake-bin");
  fake.script("gnuplot", kFakeGnuplot);
  image = dir / "fake.svg";
  r = plot(image, fake);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("plot:      " + image.string() + " (gnuplot; ") != std::string::npos);
  CHECK(test::read_text(image) == "drawn\n");

  // python3 without gnuplot: matplotlib draws when it imports, else the script and data stay.
  if (fs::exists("/usr/bin/python3")) {
    BinDir python(dir / "python-bin");
    fs::create_symlink("/usr/bin/python3", python.path / "python3");
    const bool has_matplotlib = std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") == 0;
    image = dir / "python.png";
    r = plot(image, python);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("Traceback") == std::string::npos);
    if (has_matplotlib) {
      CHECK(r.out.find("(matplotlib; ") != std::string::npos);
      CHECK(starts_with_png_magic(image));
    } else {
      MESSAGE("/usr/bin/python3 has no matplotlib: its fallback is checked to step aside quietly only");
      CHECK(r.out.find("not drawn") != std::string::npos);
    }
  }
  // The real gnuplot, where installed, draws a PNG.
  if (const char* real_path = std::getenv("PATH")) {
    image = dir / "real.png";
    r = box.run({"bench", "--from", rows.string(), "--plot", image.string()}, {{"PATH", real_path}});
    CHECK(r.exit_code == 0);
    if (r.out.find("(gnuplot; ") != std::string::npos) CHECK(starts_with_png_magic(image));
  }

  // FILE.gp: the script and the data alone.
  r = plot(dir / "only.gp", fake);
  CHECK(r.exit_code == 0);
  CHECK(fs::exists(dir / "only.gp"));
  CHECK(fs::exists(dir / "only.dat"));
  CHECK_FALSE(fs::exists(dir / "only.png"));
  // Mistakes are usage errors: a bad extension, a missing or malformed file, --from without --plot.
  CHECK(plot(dir / "x.txt", fake).exit_code == 2);
  CHECK(box.run({"bench", "--from", (dir / "missing.jsonl").string(), "--plot", "x.png"}).exit_code == 2);
  test::write_text(dir / "bad.jsonl", "{\"dtype\": \"bfloat16\", \"tflops\": 1}\n");
  r = box.run({"bench", "--from", (dir / "bad.jsonl").string(), "--plot", (dir / "y.png").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("line 1") != std::string::npos);
  CHECK(box.run({"bench", "--from", rows.string()}).exit_code == 2);
  CHECK(box.run({"bench", "--dry-run", "--plot", "x.png"}).exit_code == 2);
  // tune --plot no longer needs gnuplot before the sweep: without a GPU it fails for the GPU alone.
  if (!device_available()) {
    r = box.run({"tune", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "256", "--plot", "t.png"},
                {{"PATH", empty.path.string()}});
    CHECK(r.exit_code == 3);
    CHECK(r.err.find("NoDevice") != std::string::npos);
  }
}

namespace {

// matplotlib as the plot programs use it, without drawing: savefig writes the file, and every title and
// label the program passes is logged to $STUB_LOG, one per line (repr), to show what reached the figure.
constexpr const char* kStubMatplotlib = "def use(*args, **kwargs):\n    pass\n";
constexpr const char* kStubPyplot = R"py(import os
def _log(text):
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(repr(text) + "\n")
class _Any:
    def __init__(self, *args, **kwargs):
        for key in ("label", "title"):
            if key in kwargs:
                _log(kwargs[key])
    def __call__(self, *args, **kwargs):
        return _Any(*args, **kwargs)
    def __getattr__(self, name):
        return _Any()
class _Axes(_Any):
    def set_title(self, title, *args, **kwargs):
        _log(title)
class _Figure(_Any):
    def savefig(self, path, *args, **kwargs):
        with open(path, "w") as f:
            f.write("drawn by the stub\n")
def subplots(*args, **kwargs):
    return _Figure(), _Axes()
def __getattr__(name):
    return _Any()
)py";

}  // namespace

TEST_CASE("bench --plot: no provider name, --from or --plot path runs as code; the figure is still drawn") {
  Sandbox box("flashrtc-cli-plot-hostile");
  const fs::path dir = box.tuning.dir();
  // The children run in this process's folder: a command that ran would leave the marker here.
  const fs::path marker = fs::current_path() / "PWNED-flashrtc-plot";
  fs::remove(marker);
  const std::string touch = "touch PWNED-flashrtc-plot";
  const std::string gnuplot_code = "x'\nsystem(\"" + touch + "\")\n#";
  const std::string python_code = "x'\n__import__('os').system('" + touch + "')\n#";
  const fs::path rows = dir / ("r'\nsystem(\"" + touch + "\")\n.jsonl");
  std::string text;
  for (const std::string& provider : {gnuplot_code, python_code, std::string("flashrtc")})
    text += json({{"provider", provider}, {"dtype", "bfloat16"}, {"N", 512}, {"d", 128}, {"mask", "none"},
                  {"tflops", 300.5}})
                .dump() +
            "\n";
  test::write_text(rows, text);
  const fs::path image = dir / ("o'u\"t\nsystem(\"" + touch + "\")\n#.png");
  const auto plot = [&](const fs::path& target, std::map<std::string, std::string> env) {
    return box.run({"bench", "--from", rows.string(), "--plot", target.string()}, env);
  };

  // gnuplot (a fake that draws what its command line names): the script is the one any data gets, the
  // hostile text is one field of one row of the data.
  BinDir fake(dir / "fake-bin");
  fake.script("gnuplot", kFakeGnuplot);
  Result r = plot(image, {{"PATH", fake.path.string()}});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("(gnuplot; ") != std::string::npos);
  CHECK(test::read_text(image) == "drawn\n");
  REQUIRE(plot(dir / "plain.png", {{"PATH", fake.path.string()}}).exit_code == 0);
  CHECK(test::read_text(image.string() + ".gp") == test::read_text(dir / "plain.png.gp"));
  const std::string data = test::read_text(image.string() + ".dat");
  CHECK(data.find("\nN\tx'?system('" + touch + "')?#: bfloat16 d=128 none\n512\t300.5\n") !=
        std::string::npos);
  CHECK(data.find("\nN\tx'?__import__('os').system('" + touch + "')?#: bfloat16 d=128 none\n") !=
        std::string::npos);
  CHECK(data.find("\tflashrtc bench: " + dir.string() + "/r'?system('" + touch + "')?.jsonl\t3\n") !=
        std::string::npos);
  CHECK(count_of(data, "\n") == 1 + 3 * 4);  // the figure's row; three lines of a header and one point each

  // python3 with matplotlib (a stub that logs the titles it gets): the program reads the paths from its
  // arguments and the titles from the data, as they are.
  if (fs::exists("/usr/bin/python3")) {
    BinDir python(dir / "python-bin");
    fs::create_symlink("/usr/bin/python3", python.path / "python3");
    const fs::path modules = dir / "stub-modules" / "matplotlib";
    fs::create_directories(modules);
    test::write_text(modules / "__init__.py", kStubMatplotlib);
    test::write_text(modules / "pyplot.py", kStubPyplot);
    const fs::path log = dir / "stub.log";
    r = plot(image, {{"PATH", python.path.string()},
                     {"PYTHONPATH", modules.parent_path().string()},
                     {"PYTHONDONTWRITEBYTECODE", "1"},
                     {"STUB_LOG", log.string()}});
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("Traceback") == std::string::npos);
    CHECK(r.out.find("(matplotlib; ") != std::string::npos);
    CHECK(test::read_text(image) == "drawn by the stub\n");
    const std::string titles = test::read_text(log);
    CHECK(titles.find("\"x'?system('" + touch + "')?#: bfloat16 d=128 none\"\n") != std::string::npos);
    CHECK(titles.find("\"flashrtc bench: " + dir.string() + "/r'?system('" + touch + "')?.jsonl\"\n") !=
          std::string::npos);
  }
  // The real gnuplot, where installed, draws the figure.
  const char* real_path = std::getenv("PATH");
  if (real_path && std::system("command -v gnuplot >/dev/null") == 0) {
    r = plot(image, {{"PATH", real_path}});
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("(gnuplot; ") != std::string::npos);
    CHECK(starts_with_png_magic(image));
  } else {
    MESSAGE("no gnuplot installed: the real renderer is not tried");
  }
  CHECK_FALSE(fs::exists(marker));
  fs::remove(marker);
}

TEST_CASE("flashrtc --help lists the exit codes; every command with data says what its --json prints") {
  Sandbox box("flashrtc-cli-help");
  Result r = box.run({"--help"});
  REQUIRE(r.exit_code == 0);
  for (const char* code : {"Exit codes: 0 ok;", "1 a check failed", "2 bad usage or argument", "3 no GPU"})
    CHECK_MESSAGE(r.out.find(code) != std::string::npos, code);
  const std::vector<std::pair<std::vector<std::string>, std::string> > commands = {
      {{"info"}, "one JSON document"},
      {{"config"}, "one JSON document"},
      {{"compile"}, "one JSON document"},
      {{"compile"}, "with --all JSON lines"},
      {{"bench"}, "JSON lines"},
      {{"cache", "ls"}, "one JSON document"},
      {{"cache", "show"}, "one JSON document"}};
  for (const auto& [command, says] : commands) {
    r = box.run(with(command, {"--help"}));
    INFO(command[0] << (command.size() > 1 ? " " + command[1] : ""));
    CHECK(r.exit_code == 0);
    const auto json_option = r.out.find("--json");
    REQUIRE(json_option != std::string::npos);
    CHECK(r.out.find(says, json_option) != std::string::npos);
    CHECK(r.out.find("--json TEXT") == std::string::npos);  // a flag, never an option with a value
  }
  // tune writes its JSON document to a file, named by --output; no tune option is called --json.
  r = box.run({"tune", "--help"});
  CHECK(r.out.substr(0, r.out.find("Exit codes:")).find("--json") == std::string::npos);
  const auto output_option = r.out.find("--output TEXT");
  REQUIRE(output_option != std::string::npos);
  CHECK(r.out.find("write one JSON document to FILE", output_option) != std::string::npos);
}

#endif  // FLASHRTC_CLI

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("--window and --softcap: config and compile resolve the forward that computes them; bad values and "
          "other operations are usage errors") {
  Sandbox box("flashrtc-cli-variants");
  const std::vector<std::string> call = {"config", "--dtype", "bf16",   "--head-dim", "128", "--seqlen",
                                         "4096",   "--mask",  "causal", "--arch",     "sm_90a"};
  Result r = box.run(call);
  REQUIRE(r.exit_code == 0);
  CHECK(has(line_of(r.out, "call:"), ", wgmma kernels"));
  std::vector<std::string> windowed = call;
  windowed.insert(windowed.end(), {"--window", "256,0", "--softcap", "30"});
  r = box.run(windowed);
  REQUIRE(r.exit_code == 0);
  CHECK(has(line_of(r.out, "call:"), "Nk=4096 window=(256,0) softcap=30, mma kernels"));
  CHECK(has(line_of(r.out, "kernel:"), "flashrtc::kernel::Variants(3u)"));
  CHECK(has(r.out, "passed over: "));

  std::vector<std::string> compile = windowed;
  compile[0] = "compile";
  r = box.run(compile);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "Variants(3u)"));

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--window", "3"}, {"--window", "-2,0"}, {"--window", "1,2,3"},
        {"--window", "99999999999,0"}, {"--softcap", "-1"}, {"--softcap", "nan"}, {"--softcap", "inf"}}) {
    std::vector<std::string> args = call;
    args.insert(args.end(), bad.begin(), bad.end());
    INFO(bad[0] << " " << bad[1]);
    r = box.run(args);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, bad[0]));
  }
  std::vector<std::string> backward = windowed;
  backward.insert(backward.end(), {"--op", "bwd"});
  r = box.run(backward);
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "--window and --softcap go with the forward: --op bwd takes no variants"));
}
