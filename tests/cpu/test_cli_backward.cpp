// `flashrtc tune --op bwd` and `flashrtc config --op bwd` run as a user runs them (a process each, without a
// GPU): the backward main kernel's candidates from its family's table, the dry run's compiles, and each
// backward kernel's family, tile and source, a tuned entry written by another process included.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

#include "cpu/helpers/cli_process.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;
using namespace flashrtc::test::cli;
using nlohmann::json;

namespace {

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The lines of the block that starts with label ("main:") up to the next unindented line.
std::string block_of(const std::string& text, const std::string& label) {
  const std::string first = line_of(text, label);
  if (first.empty()) return {};
  const auto start = text.find(first);
  auto end = start + first.size();
  while (end + 1 < text.size() && text[end + 1] == ' ') end = text.find('\n', end + 1);
  return text.substr(start, end - start);
}

}  // namespace

TEST_CASE("flashrtc tune --op bwd --dry-run lists the backward main kernel's tiles without a GPU") {
  Sandbox box("flashrtc-cli-bwd-dry-run");
  const std::filesystem::path rows_path = box.tuning.dir() / "rows.json";
  Result r = box.run({"tune", "--op", "bwd", "--dtype", "fp16", "--head-dim", "64", "--seqlen", "4096",
                      "--dry-run", "--arch", "sm_90", "--output", rows_path.string()});
  REQUIRE(r.exit_code == 0);
  const KernelFamily& family = *find_kernel_family("bwd-mma");
  const SmLimits limits = assumed_sm_limits("sm_90");
  auto expected = tuning_candidates(family, DType::kFloat16, 64, 4096, 4096, TuneSpace::kQuick, limits);
  const TileConfig base =
      family.default_config(DType::kFloat16, 64, MaskKind::kNone, limits.smem_per_block_bytes, 4096, "sm_90");
  if (std::find(expected.begin(), expected.end(), base) == expected.end()) expected.push_back(base);
  CHECK(line_of(r.out, "tune:").rfind("tune:      backward of fp16 d=64", 0) == 0);
  CHECK(line_of(r.out, "tune:").find("bwd-mma kernels") != std::string::npos);
  CHECK(line_of(r.out, "base:").rfind("base:      " + to_string(base) + " (default", 0) == 0);
  CHECK(r.out.find("space:     quick: " + std::to_string(expected.size()) + " of the") != std::string::npos);
  CHECK(r.out.find("dry run: nothing compiled, timed or written") != std::string::npos);
  json rows = json::parse(test::read_text(rows_path));
  CHECK(rows.at("op") == "bwd");
  CHECK(rows.at("family") == "bwd-mma");
  CHECK(rows.at("tuning_key").is_null());  // no GPU name: no key
  REQUIRE(rows.at("rows").size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const json& row = rows["rows"][i];
    const KernelSpec spec{DType::kFloat16, 64, MaskKind::kNone, expected[i], &family};
    CHECK(row.at("block_m") == expected[i].block_m);
    CHECK(row.at("block_n") == expected[i].block_n);
    CHECK(row.at("warps") == expected[i].warps);
    CHECK(row.at("stages") == expected[i].stages);
    CHECK(row.at("smem_bytes") == family.smem_bytes(spec));
    CHECK(row.at("threads") == family.threads(spec));
    CHECK(row.at("status") == "not run");
  }
  CHECK_FALSE(std::filesystem::exists(box.tuning.db()));
  CHECK(cache_entry_count() == 0);

  // fp32 sweeps the CUDA-core family's tiles; with --gpu-name the key is the backward family's.
  r = box.run({"tune", "--op", "bwd", "--dtype", "fp32", "--head-dim", "64", "--seqlen", "4096", "--dry-run",
               "--arch", "sm_90", "--gpu-name", "Test GPU 141GB"});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "tune:").find("bwd-simt kernels") != std::string::npos);
  CHECK(line_of(r.out, "key:").find(" bwd-simt fp32 d=64 mask=none Nq<=4096 Nk<=4096") != std::string::npos);

  // --kernel dq sweeps the dQ pass's family, from its own table, under its own key.
  const std::filesystem::path dq_path = box.tuning.dir() / "dq.json";
  r = box.run({"tune", "--op", "bwd", "--kernel", "dq", "--dtype", "bf16", "--head-dim", "128", "--seqlen",
               "2048", "--dry-run", "--arch", "sm_90", "--gpu-name", "Test GPU 141GB", "--output",
               dq_path.string()});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "tune:").find("bwd-dq-mma kernels (the dQ pass's tiles") != std::string::npos);
  CHECK(line_of(r.out, "key:").find(" bwd-dq-mma bf16 d=128 ") != std::string::npos);
  const KernelFamily& dq = *find_kernel_family("bwd-dq-mma");
  auto dq_expected = tuning_candidates(dq, DType::kBFloat16, 128, 2048, 2048, TuneSpace::kQuick, limits);
  const TileConfig dq_base =
      dq.default_config(DType::kBFloat16, 128, MaskKind::kNone, limits.smem_per_block_bytes, 2048, "sm_90");
  if (std::find(dq_expected.begin(), dq_expected.end(), dq_base) == dq_expected.end())
    dq_expected.push_back(dq_base);
  rows = json::parse(test::read_text(dq_path));
  CHECK(rows.at("op") == "bwd");
  CHECK(rows.at("kernel") == "backward-dq");
  CHECK(rows.at("family") == "bwd-dq-mma");
  REQUIRE(rows.at("rows").size() == dq_expected.size());
  for (std::size_t i = 0; i < dq_expected.size(); ++i) {
    CHECK(rows["rows"][i].at("block_m") == dq_expected[i].block_m);
    CHECK(rows["rows"][i].at("block_n") == dq_expected[i].block_n);
    CHECK(rows["rows"][i].at("warps") == dq_expected[i].warps);
  }
  CHECK(box.run({"tune", "--kernel", "dq", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64",
                 "--dry-run"})
            .exit_code == 2);  // --kernel goes with --op bwd
  CHECK(box.run({"tune", "--op", "bwd", "--kernel", "prep", "--dtype", "bf16", "--head-dim", "64", "--seqlen",
                 "64", "--dry-run"})
            .exit_code == 2);

  CHECK(box.run({"tune", "--op", "bwd", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64", "--compile"})
            .exit_code == 2);  // --compile needs --dry-run
  CHECK(
      box.run({"tune", "--op", "back", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64", "--dry-run"})
          .exit_code == 2);
  if (!device_available()) {
    r = box.run({"tune", "--op", "bwd", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"});
    CHECK(r.exit_code == 3);
    CHECK(r.err.find("--dry-run") != std::string::npos);
  }
}

TEST_CASE("flashrtc tune --op bwd --dry-run --compile: registers and spills from real NVRTC compiles") {
  Sandbox box("flashrtc-cli-bwd-compile");
  const std::filesystem::path rows_path = box.tuning.dir() / "rows.json";
  const Result r =
      box.run({"tune", "--op", "bwd", "--dtype", "fp16", "--head-dim", "32", "--seqlen", "16", "--dry-run",
               "--compile", "--arch", "sm_80", "-j", "2", "--output", rows_path.string()});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config ").find("regs spill st/ld") != std::string::npos);
  CHECK(r.out.find("dry run: nothing timed or written to the database") != std::string::npos);
  const json rows = json::parse(test::read_text(rows_path));
  REQUIRE(rows.at("rows").size() >= 2);
  for (const json& row : rows["rows"]) {
    INFO(row.dump());
    CHECK(row.at("registers").get<int>() > 0);
    CHECK(row.at("registers").get<int>() <= 255);
    CHECK(row.contains("spill_store_bytes"));
    CHECK(row.at("arch") == "sm_80");
    CHECK(row.at("name_expression").get<std::string>().rfind("flashrtc::attention_backward_mma<", 0) == 0);
    CHECK(row.at("blocks_per_sm").get<int>() >= 1);
    CHECK(row.at("status") == "not run");
  }
  CHECK(cache_entry_count() == rows["rows"].size());
  CHECK_FALSE(std::filesystem::exists(box.tuning.db()));
}

TEST_CASE(
    "flashrtc config --op bwd: each backward kernel's family, tile, source and key; a tuned main kernel") {
  Sandbox box("flashrtc-cli-bwd-config");
  const std::vector<std::string> call = {"config",     "--op", "bwd",      "--dtype", "bf16",
                                         "--head-dim", "64",   "--seqlen", "3000"};
  const std::vector<std::string> on_gpu = with(call, {"--gpu-name", "Test GPU 141GB", "--arch", "sm_90"});
  const auto default_of = [](const char* name) {
    return find_kernel_family(name)->default_config(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90,
                                                    3000, "sm_90");
  };
  Result r = box.run(on_gpu);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "call:") == "call:       backward of bf16 d=64 mask=none Nq=3000 Nk=3000");
  CHECK(line_of(r.out, "prep:") == "prep:       bwd-prep " + to_string(default_of("bwd-prep")));
  CHECK(line_of(r.out, "main:") == "main:       bwd-mma " + to_string(default_of("bwd-mma")));
  CHECK(line_of(r.out, "dQ pass:") == "dQ pass:    bwd-dq-mma " + to_string(default_of("bwd-dq-mma")));
  for (const char* label : {"prep:", "main:", "dQ pass:"}) {
    const std::string block = block_of(r.out, label);
    INFO(block);
    CHECK(block.find("  source:     default (built-in table; no tuned entry for Test GPU 141GB sm_90") !=
          std::string::npos);
    CHECK(block.find("  tuning key: Test GPU 141GB sm_90 nvrtc ") != std::string::npos);
  }
  CHECK(block_of(r.out, "main:").find(" bwd-mma bf16 d=64 mask=none Nq<=4096 Nk<=4096") != std::string::npos);

  // Another process tuned the backward's main kernel: this one shows it, and leaves the others and the
  // forward alone (FLASHRTC_CONFIG too: it is the forward's).
  const auto space = tuning_candidates(*find_kernel_family("bwd-mma"), DType::kBFloat16, 64, 3000, 3000,
                                       TuneSpace::kQuick, assumed_sm_limits("sm_90"));
  const auto other = std::find_if(space.begin(), space.end(),
                                  [&](const TileConfig& t) { return !(t == default_of("bwd-mma")); });
  REQUIRE(other != space.end());
  record_tuning_entry(test::make_entry(make_tuning_key("Test GPU 141GB", "sm_90", DType::kBFloat16, 64,
                                                       MaskKind::kNone, 4096, 4096, "bwd-mma"),
                                       *other));
  r = box.run(on_gpu, {{"FLASHRTC_CONFIG", "warps=8"}});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:") == "main:       bwd-mma " + to_string(*other));
  CHECK(
      block_of(r.out, "main:").find("  source:     tuned (tuning database entry for Test GPU 141GB sm_90") !=
      std::string::npos);
  CHECK(block_of(r.out, "prep:").find("  source:     default") != std::string::npos);
  CHECK(line_of(r.out, "tuning db:").find("(1 entries)") != std::string::npos);
  CHECK(line_of(r.out, "FLASHRTC_CONFIG:").find("forward kernels only") != std::string::npos);
  const Result forward = box.run({"config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "3000",
                                  "--gpu-name", "Test GPU 141GB", "--arch", "sm_90"});
  REQUIRE(forward.exit_code == 0);
  CHECK(line_of(forward.out, "source:").rfind("source:     default", 0) == 0);

  // JSON: one resolution per kernel, in launch order.
  r = box.run(with(on_gpu, {"--json"}));
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("op") == "bwd");
  CHECK(doc.at("call").at("seqlen_q") == 3000);
  CHECK(doc.at("tuning_db_entries") == 1);
  const json& kernels = doc.at("kernels");
  REQUIRE(kernels.size() == 3);
  CHECK(kernels[0].at("role") == "prep");
  CHECK(kernels[0].at("family") == "bwd-prep");
  CHECK(kernels[1].at("role") == "main");
  CHECK(kernels[1].at("operation") == "backward");
  CHECK(kernels[1].at("family") == "bwd-mma");
  CHECK(kernels[1].at("source") == "tuned");
  CHECK(kernels[1].at("config").at("block_m") == other->block_m);
  CHECK(kernels[1].at("config").at("warps") == other->warps);
  CHECK(kernels[1].at("tuning_key").get<std::string>().find(" bwd-mma ") != std::string::npos);
  CHECK(kernels[1].at("tuned").at("config").at("block_n") == other->block_n);
  CHECK(kernels[2].at("role") == "dq");
  CHECK(kernels[2].at("family") == "bwd-dq-mma");
  CHECK(kernels[2].at("source") == "default");

  // The tile options are the main kernel's: explicit over the tuned entry, which is still shown.
  const TileConfig given = default_of("bwd-mma");
  r = box.run(
      with(on_gpu, {"--block-m", std::to_string(given.block_m), "--block-n", std::to_string(given.block_n),
                    "--warps", std::to_string(given.warps), "--stages", std::to_string(given.stages)}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:") == "main:       bwd-mma " + to_string(given));
  CHECK(block_of(r.out, "main:").find("  source:     explicit") != std::string::npos);
  CHECK(block_of(r.out, "main:").find("  tuned:      " + to_string(*other)) != std::string::npos);
  CHECK(line_of(r.out, "prep:") == "prep:       bwd-prep " + to_string(default_of("bwd-prep")));
  CHECK(box.run(with(on_gpu, {"--warps", "3"})).exit_code == 2);

  // fp32: the CUDA-core families, and why the tensor-core ones were passed over.
  r = box.run({"config", "--op", "bwd", "--dtype", "fp32", "--head-dim", "64", "--seqlen", "100"});
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:").rfind("main:       bwd-simt ", 0) == 0);
  CHECK(block_of(r.out, "main:").find("  passed over: bwd-mma: ") != std::string::npos);
  CHECK(block_of(r.out, "dQ pass:").find("  passed over: bwd-dq-mma: ") != std::string::npos);
  CHECK(box.run({"config", "--dtype", "fp32", "--head-dim", "64", "--seqlen", "100", "--deterministic"})
            .exit_code == 2);
}

TEST_CASE(
    "flashrtc config --op bwd for sm_90a: the fused kernel by default, the Hopper separate pass when "
    "deterministic or for a tile the fused family does not take") {
  Sandbox box("flashrtc-cli-bwd-config-hopper");
  const std::vector<std::string> call = {"config",         "--op",   "bwd",      "--dtype", "bf16",
                                         "--head-dim",     "64",     "--seqlen", "4096",    "--gpu-name",
                                         "Test GPU 141GB", "--arch", "sm_90a"};
  Result r = box.run(call);
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:") == "main:       bwd-wgmma-fused " + to_string(TileConfig{64, 128, 12, 2}));
  CHECK(line_of(r.out, "dQ convert:").rfind("dQ convert: bwd-dq-convert ", 0) == 0);
  CHECK(line_of(r.out, "dQ pass:").empty());
  CHECK(block_of(r.out, "main:").find("passed over") == std::string::npos);
  CHECK(block_of(r.out, "main:").find(" bwd-wgmma-fused bf16 d=64 ") != std::string::npos);  // its own key
  json doc = json::parse(box.run(with(call, {"--json"})).out);
  CHECK(doc.at("deterministic") == false);
  CHECK(doc.at("kernels")[1].at("role") == "main");
  CHECK(doc.at("kernels")[1].at("operation") == "backward-fused");
  CHECK(doc.at("kernels")[2].at("role") == "dq_convert");

  // --deterministic: the main kernel and the atomic-free dQ pass, Hopper's both.
  r = box.run(with(call, {"--deterministic"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "call:").find(", deterministic") != std::string::npos);
  CHECK(line_of(r.out, "main:") == "main:       bwd-wgmma " + to_string(TileConfig{112, 128, 12, 2}));
  CHECK(line_of(r.out, "dQ pass:").rfind("dQ pass:    bwd-dq-wgmma ", 0) == 0);
  CHECK(line_of(r.out, "dQ convert:").empty());

  // The tile options: a tile the fused family takes stays fused; block_m=112 runs the separate pass, as a
  // call with that config does.
  r = box.run(with(call, {"--stages", "3"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:") == "main:       bwd-wgmma-fused " + to_string(TileConfig{64, 128, 12, 3}));
  CHECK(block_of(r.out, "main:")
            .find("  source:     explicit (the fields given on the command line over the default tile " +
                  to_string(TileConfig{64, 128, 12, 2})) != std::string::npos);
  r = box.run(with(call, {"--block-m", "112"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "main:") == "main:       bwd-wgmma " + to_string(TileConfig{112, 128, 12, 2}));
  CHECK(block_of(r.out, "main:").find("  source:     explicit") != std::string::npos);
  CHECK(line_of(r.out, "dQ pass:").rfind("dQ pass:    bwd-dq-wgmma ", 0) == 0);
  CHECK(box.run(with(call, {"--block-m", "112", "--warps", "5"})).exit_code == 2);
}

TEST_CASE("flashrtc bench --op bwd shows the tile of the main kernel that runs: fused unless deterministic") {
  Sandbox box("flashrtc-cli-bwd-bench");
  const std::vector<std::string> call = {"bench",  "--op",    "bwd",         "--dry-run", "--json",
                                         "--arch", "sm_90a",  "--dtype",     "bf16",      "--mask",
                                         "none",   "--shape", "2,16,4096,64"};
  const auto tile_of = [](const Result& r) {
    REQUIRE(r.exit_code == 0);
    const json row = json::parse(r.out.substr(0, r.out.find('\n')));
    CHECK(row.at("mode") == "bwd");
    const json& t = row.at("tile");
    return TileConfig{t.at("block_m").get<int>(), t.at("block_n").get<int>(), t.at("warps").get<int>(),
                      t.at("stages").get<int>()};
  };
  CHECK(tile_of(box.run(call)) == TileConfig{64, 128, 12, 2});                              // bwd-wgmma-fused
  CHECK(tile_of(box.run(with(call, {"--deterministic"}))) == TileConfig{112, 128, 12, 2});  // bwd-wgmma
  CHECK(tile_of(box.run(with(call, {"--stages", "3"}))) == TileConfig{64, 128, 12, 3});
  CHECK(tile_of(box.run(with(call, {"--block-m", "112"}))) == TileConfig{112, 128, 12, 2});
  // sm_80 has no fused family: both modes run bwd-mma.
  std::vector<std::string> ampere = call;
  ampere[6] = "sm_80";
  const TileConfig mma = find_kernel_family("bwd-mma")->default_config(DType::kBFloat16, 64, MaskKind::kNone,
                                                                       kSmemBytesSm80, 4096, "sm_80");
  CHECK(tile_of(box.run(ampere)) == mma);
  CHECK(tile_of(box.run(with(ampere, {"--deterministic"}))) == mma);
  CHECK(box.run({"bench", "--dry-run", "--shape", "1,8,64,64", "--dtype", "bf16", "--deterministic"})
            .exit_code == 2);  // --deterministic goes with --op bwd
}

TEST_CASE(
    "flashrtc tune --op bwd on sm_90a sweeps the fused kernel's tiles; --deterministic the separate pass's") {
  Sandbox box("flashrtc-cli-bwd-tune-hopper");
  const std::vector<std::string> call = {"tune",   "--op",       "bwd",        "--dry-run",     "--dtype",
                                         "bf16",   "--head-dim", "128",        "--seqlen",      "4096",
                                         "--arch", "sm_90a",     "--gpu-name", "Test GPU 141GB"};
  const std::filesystem::path rows_path = box.tuning.dir() / "rows.json";
  Result r = box.run(with(call, {"--output", rows_path.string()}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "tune:").find("bwd-wgmma-fused kernels (the main kernel's tiles") !=
        std::string::npos);
  CHECK(line_of(r.out, "key:").find(" bwd-wgmma-fused bf16 d=128 mask=none Nq<=4096 Nk<=4096") !=
        std::string::npos);
  CHECK(
      line_of(r.out, "base:").rfind("base:      " + to_string(TileConfig{64, 128, 12, 2}) + " (default", 0) ==
      0);
  json rows = json::parse(test::read_text(rows_path));
  CHECK(rows.at("kernel") == "backward-fused");
  CHECK(rows.at("family") == "bwd-wgmma-fused");
  const KernelFamily& fused = *find_kernel_family("bwd-wgmma-fused");
  for (const json& row : rows.at("rows")) {
    const TileConfig tile{row.at("block_m").get<int>(), row.at("block_n").get<int>(),
                          row.at("warps").get<int>(), row.at("stages").get<int>()};
    INFO(to_string(tile));
    CHECK(fused.check_config(DType::kBFloat16, 128, tile, kSmemBytesSm90) == "");
  }

  r = box.run(with(call, {"--deterministic", "--output", rows_path.string()}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "tune:").find("bwd-wgmma kernels (the main kernel's tiles") != std::string::npos);
  CHECK(line_of(r.out, "key:").find(" bwd-wgmma bf16 d=128 ") != std::string::npos);
  rows = json::parse(test::read_text(rows_path));
  CHECK(rows.at("kernel") == "backward");

  // The dQ pass runs only in the deterministic mode on sm_90a.
  r = box.run(with(call, {"--kernel", "dq"}));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--deterministic") != std::string::npos);
  r = box.run(with(call, {"--kernel", "dq", "--deterministic"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "key:").find(" bwd-dq-wgmma bf16 d=128 ") != std::string::npos);
  CHECK(box.run({"tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64",
                 "--deterministic"})
            .exit_code == 2);  // --deterministic goes with --op bwd
}

#endif
