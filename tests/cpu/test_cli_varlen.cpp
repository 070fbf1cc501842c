// `flashrtc bench --op varlen` run as a user runs it (a process each, without a GPU): the batch its --lengths
// describe, the family and tile attention_varlen_forward's own resolution gives each point, the FLOPs of
// the real tokens, and the options of another mode refused.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

#include "cpu/helpers/cli_process.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"

using namespace flashrtc;
using namespace flashrtc::test::cli;
using nlohmann::json;

namespace {

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  return rows;
}

}  // namespace

TEST_CASE(
    "flashrtc bench --op varlen --dry-run: one row per dtype x head dim x mask over the listed lengths") {
  Sandbox box("flashrtc-cli-varlen-bench");
  const Result r = box.run({"bench", "--op", "varlen", "--dry-run", "--json", "--dtype", "bf16,fp16",
                            "--head-dim", "64,128", "--mask", "none,causal", "--lengths", "100,3000,17",
                            "--heads", "16", "--heads-kv", "4", "--arch", "sm_80"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<json> rows = json_lines(r.out);
  REQUIRE(rows.size() == 8);
  std::size_t i = 0;
  for (const char* dtype : {"bfloat16", "float16"})
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true}) {
        const json& row = rows[i++];
        INFO(row.dump());
        CHECK(row.at("provider") == "flashrtc");
        CHECK(row.at("op") == "varlen");
        CHECK(row.at("dtype") == dtype);
        CHECK(row.at("d") == d);
        CHECK(row.at("causal") == causal);
        CHECK(row.at("B") == 3);
        CHECK(row.at("H") == 16);
        CHECK(row.at("Hkv") == 4);
        CHECK(row.at("tokens") == 3117);
        CHECK(row.at("lengths") == std::vector<std::int64_t>{100, 3000, 17});
        const double flops = 4.0 * 16 * d * (100.0 * 100 + 3000.0 * 3000 + 17.0 * 17) * (causal ? 0.5 : 1.0);
        CHECK(row.at("flops").get<double>() == doctest::Approx(flops));
        CHECK(row.at("family") == "varlen-mma");
        CHECK_FALSE(row.contains("ms"));
      }
  if (!device_available()) {
    const Result timed =
        box.run({"bench", "--op", "varlen", "--lengths", "equal:64", "--total-tokens", "128"});
    CHECK(timed.exit_code == 3);
    CHECK(timed.err.find("--dry-run") != std::string::npos);
  }
}

TEST_CASE(
    "flashrtc bench --op varlen: uniform and equal lengths fill --total-tokens, the heads default to the "
    "grid's") {
  Sandbox box("flashrtc-cli-varlen-lengths");
  const Result uniform =
      box.run({"bench", "--op", "varlen", "--dry-run", "--json", "--dtype", "bf16", "--head-dim", "128",
               "--mask", "none", "--lengths", "uniform:128:8192", "--arch", "sm_90a"});
  INFO("stderr: " << uniform.err);
  REQUIRE(uniform.exit_code == 0);
  const json row = json_lines(uniform.out).at(0);
  CHECK(row.at("tokens") == 65536);
  CHECK(row.at("H") == 16);
  CHECK(row.at("Hkv") == 16);
  std::int64_t sum = 0;
  const std::vector<std::int64_t> lengths = row.at("lengths");
  for (std::size_t j = 0; j < lengths.size(); ++j) {
    CHECK(lengths[j] >= (j + 1 == lengths.size() ? 1 : 128));
    CHECK(lengths[j] <= 8192);
    sum += lengths[j];
  }
  CHECK(sum == 65536);
  // The draw follows --seed.
  const Result again = box.run({"bench", "--op", "varlen", "--dry-run", "--json", "--dtype", "bf16",
                                "--head-dim", "128", "--mask", "none", "--arch", "sm_90a"});
  CHECK(json_lines(again.out).at(0).at("lengths") == row.at("lengths"));
  const Result other = box.run({"bench", "--op", "varlen", "--dry-run", "--json", "--dtype", "bf16",
                                "--head-dim", "128", "--mask", "none", "--arch", "sm_90a", "--seed", "2"});
  CHECK(json_lines(other.out).at(0).at("lengths") != row.at("lengths"));

  const Result equal =
      box.run({"bench", "--op", "varlen", "--dry-run", "--json", "--dtype", "fp16", "--head-dim", "64",
               "--mask", "causal", "--lengths", "equal:5000", "--total-tokens", "12000", "--arch", "sm_90a"});
  REQUIRE(equal.exit_code == 0);
  const json e = json_lines(equal.out).at(0);
  CHECK(e.at("lengths") == std::vector<std::int64_t>{5000, 5000});
  CHECK(e.at("H") == 32);
  const Result table =
      box.run({"bench", "--op", "varlen", "--dry-run", "--lengths", "1,2,3", "--arch", "sm_90a"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("8 points over 3 sequences of 1..3, 6 tokens") != std::string::npos);
}

TEST_CASE("flashrtc bench --op varlen: usage errors") {
  Sandbox box("flashrtc-cli-varlen-usage");
  const auto usage = [&](const std::vector<std::string>& more, const std::string& says) {
    std::vector<std::string> args = {"bench", "--op", "varlen", "--dry-run"};
    args.insert(args.end(), more.begin(), more.end());
    const Result r = box.run(args);
    INFO("args: " << more.at(0) << " stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(says) != std::string::npos);
  };
  usage({"--lengths", "uniform:9:5"}, "LO is above HI");
  usage({"--lengths", "uniform:0:5"}, "'0' is not a length");
  usage({"--lengths", "equal:x"}, "'x' is not a length");
  usage({"--lengths", "equal:70000"}, "above --total-tokens");
  usage({"--lengths", "1,-2"}, "'-2' is not a length");
  usage({"--lengths", "uniform:5"}, "expected uniform:LO:HI");
  usage({"--lengths", "normal:5"}, "expected uniform:LO:HI, equal:L or N1,N2,...");
  usage({"--lengths", "4,,5"}, "'' is not a length");
  usage({"--shape", "1,16,128,64"}, "--shape does not go with --op varlen");
  usage({"--layout", "bhnd"}, "--layout does not go with --op varlen");
  usage({"--deterministic"}, "--deterministic goes with --op bwd");
  usage({"--heads-kv", "4"}, "--heads-kv needs --heads");
  usage({"--heads", "16", "--heads-kv", "5"}, "heads_kv");
  usage({"--batch", "4"}, "--batch goes with --op decode");
  const Result r = box.run({"bench", "--dry-run", "--lengths", "1,2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--lengths goes with --op varlen") != std::string::npos);
}

#endif
