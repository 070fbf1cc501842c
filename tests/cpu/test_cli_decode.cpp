// `flashrtc config --op decode` and `flashrtc bench --op decode` run as a user runs them (a process each,
// without a GPU): the decode call described on the command line resolves to the family, tile and split count
// that attention_with_kvcache's own functions give it, and the options of another mode are refused.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#ifndef FLASHRTC_CLI
TEST_CASE("the flashrtc command is not built (FLASHRTC_BUILD_HOST=OFF)" * doctest::skip()) {}
#else

#include "cpu/helpers/cli_process.hpp"
#include "flashrtc/attention_kvcache.hpp"
#include "flashrtc/device.hpp"

using namespace flashrtc;
using namespace flashrtc::test::cli;
using nlohmann::json;

namespace {

alignas(16) const unsigned char kPlaceholder[16] = {};

TensorRef bnhd(std::int64_t seqlen, std::int64_t heads, std::int64_t d) {
  return TensorRef::bnhd(kPlaceholder, seqlen, heads, d);
}

// The call the command describes for B=8, 32/8 heads, d=128 bf16 and 8192 cached tokens per sequence.
KvCacheParams described_call(std::int64_t page_size) {
  KvCacheParams p;
  p.dtype = DType::kBFloat16;
  p.batch = 8;
  p.seqlen_q = 1;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.q = p.o = bnhd(1, 32, 128);
  p.page_size = page_size ? page_size : 8192;
  const std::int64_t pages = page_size ? 8192 / page_size : 1;
  p.num_pages = 8 * pages;
  p.k_cache = p.v_cache = bnhd(p.page_size, 8, 128);
  if (page_size) {
    p.block_table = reinterpret_cast<const std::int32_t*>(kPlaceholder);
    p.max_pages_per_seq = p.block_table_stride = pages;
  }
  p.cache_seqlens = reinterpret_cast<const std::int32_t*>(kPlaceholder);
  return p;
}

const std::vector<std::string> kCall = {"config",     "--op",       "decode",  "--dtype",     "bf16",
                                        "--head-dim", "128",        "--batch", "8",           "--heads",
                                        "32",         "--heads-kv", "8",       "--seqlen-kv", "8192"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("flashrtc config --op decode: the decode family, tile, source and kvcache_num_splits' count") {
  Sandbox box("flashrtc-cli-decode-config");
  for (const std::int64_t page_size : {0, 16}) {
    INFO("page size " << page_size);
    KvCacheParams call = described_call(page_size);
    const ConfigResolution expected = resolve_config(call);
    const int splits = kvcache_num_splits(call);
    Result r = box.run(with(kCall, {"--page-size", std::to_string(page_size)}));
    REQUIRE(r.exit_code == 0);
    CHECK(line_of(r.out, "config:") == "config:     " + to_string(expected.config));
    CHECK(line_of(r.out, "source:").rfind(std::string("source:     ") + to_string(expected.source), 0) == 0);
    CHECK(line_of(r.out, "call:") ==
          "call:       decode bf16 mask=none B=8 Hq=32 Hkv=8 Nq=1 Nk=8192 d=128, " +
              std::string(page_size ? "pages of 16" : "contiguous cache") + ", " + expected.family->name +
              " kernels");
    CHECK(line_of(r.out, "rows:").rfind("rows:       4 packed query rows per KV head", 0) == 0);
    CHECK(line_of(r.out, "splits:").rfind("splits:     " + std::to_string(splits) + " (", 0) == 0);
    CHECK(line_of(r.out, "kernel:").find("attention_decode_mma<") != std::string::npos);

    r = box.run(with(kCall, {"--page-size", std::to_string(page_size), "--json"}));
    REQUIRE(r.exit_code == 0);
    const json doc = json::parse(r.out);
    CHECK(doc.at("op") == "decode");
    CHECK(doc.at("family") == expected.family->name);
    CHECK(doc.at("config").at("block_n") == expected.config.block_n);
    CHECK(doc.at("num_splits") == splits);
    CHECK(doc.at("call").at("seqlen_q") == 4);  // the packed rows: Hq / Hkv * Nq
    CHECK(doc.at("decode").at("num_pages") == call.num_pages);
    CHECK(doc.at("decode").at("capacity") == 8192);
  }

  // The tile options replace the resolved tile's fields, and the split count follows that tile.
  KvCacheParams call = described_call(0);
  TileConfig tile = resolve_config(call).config;
  tile.block_n = 128;
  tile.warps = 8;
  call.config = tile;
  Result r = box.run(with(kCall, {"--block-n", "128", "--warps", "8"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "config:") == "config:     " + to_string(tile));
  CHECK(
      line_of(r.out, "splits:").rfind("splits:     " + std::to_string(kvcache_num_splits(call)) + " (", 0) ==
      0);
  r = box.run(with(kCall, {"--splits", "5"}));
  REQUIRE(r.exit_code == 0);
  CHECK(line_of(r.out, "splits:") == "splits:     5 (--splits)");
}

TEST_CASE("flashrtc config and bench: the decode options go with --op decode, and a decode call's limits") {
  Sandbox box("flashrtc-cli-decode-usage");
  const auto usage = [&](const std::vector<std::string>& args, const std::string& says) {
    const Result r = box.run(args);
    CHECK(r.exit_code == 2);
    INFO("stderr: " << r.err);
    CHECK(r.err.find(says) != std::string::npos);
  };
  usage({"config", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "64", "--batch", "2"},
        "--batch goes with --op decode");
  usage({"config", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "64", "--page-size", "16"},
        "--page-size goes with --op decode");
  usage({"config", "--dtype", "bf16", "--head-dim", "128"}, "--seqlen is required");
  usage({"config", "--op", "decode", "--dtype", "bf16", "--head-dim", "128"},
        "--op decode needs --seqlen-kv");
  usage(with(kCall, {"--seqlen", "4"}), "--seqlen-q and --seqlen-kv");
  usage(with(kCall, {"--mask", "causal"}), "bottom-right (causal-br)");
  usage(with(kCall, {"--page-size", "12"}), "page_size=12");
  usage(with(kCall, {"--splits", "257"}), "--splits");
  usage({"config", "--op", "decode", "--dtype", "bf16", "--head-dim", "128", "--heads", "32", "--heads-kv",
         "5", "--seqlen-kv", "64"},
        "not a multiple of heads_kv=5");
  usage({"compile", "--op", "decode", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "1"}, "--op");
  const std::vector<std::string> bench = {"bench", "--op", "decode", "--seqlen-kv", "4096", "--dry-run"};
  usage(with(bench, {"--shape", "1,32,1,128"}), "--shape does not go with --op decode");
  usage(with(bench, {"--seqlen", "512"}), "--seqlen does not go with --op decode");
  usage(with(bench, {"--layout", "bhnd"}), "--layout does not go with --op decode");
  usage(with(bench, {"--mask", "causal"}), "causal-br");
  usage({"bench", "--dry-run", "--batch", "4"}, "--batch goes with --op decode");
  CHECK(box.run(with(kCall, {"--mask", "causal-br"})).exit_code == 0);
}

TEST_CASE(
    "flashrtc bench --op decode --dry-run: every dtype x head dim x mask x batch x length x page size") {
  Sandbox box("flashrtc-cli-decode-bench");
  const Result r = box.run({"bench", "--op", "decode", "--dry-run", "--json", "--dtype", "bf16,fp16",
                            "--head-dim", "128", "--heads", "32", "--heads-kv", "8", "--batch", "1,8",
                            "--seqlen-kv", "8192", "--page-size", "0,16"});
  REQUIRE(r.exit_code == 0);
  std::vector<json> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  REQUIRE(rows.size() == 8);
  std::size_t i = 0;
  for (const char* dtype : {"bfloat16", "float16"})
    for (const std::int64_t batch : {1, 8})
      for (const std::int64_t page_size : {0, 16}) {
        const json& row = rows[i++];
        INFO(row.dump());
        CHECK(row.at("provider") == "flashrtc");
        CHECK(row.at("mode") == "decode");
        CHECK(row.at("dtype") == dtype);
        CHECK(row.at("B") == batch);
        CHECK(row.at("H") == 32);
        CHECK(row.at("Hkv") == 8);
        CHECK(row.at("N") == 1);
        CHECK(row.at("Nk") == 8192);
        CHECK(row.at("page_size") == page_size);
        CHECK(row.at("family") == "decode-mma");
        // K and V read once, plus q and o: 2 bytes an element.
        CHECK(row.at("bytes").get<double>() == 2.0 * (2.0 * batch * 8 * 8192 * 128 + 2.0 * batch * 32 * 128));
        CHECK_FALSE(row.contains("us"));
        KvCacheParams call = described_call(page_size);
        call.batch = batch;
        call.num_pages = batch * (page_size ? 8192 / page_size : 1);
        CHECK(row.at("splits") == kvcache_num_splits(call));
      }
  if (!device_available()) {
    const Result timed = box.run({"bench", "--op", "decode", "--seqlen-kv", "4096", "--dtype", "bf16"});
    CHECK(timed.exit_code == 3);
    CHECK(timed.err.find("--dry-run") != std::string::npos);
  }
}

#endif
