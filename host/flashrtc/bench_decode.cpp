// Each point's cache is random normal data (a pattern of at most 16M elements repeated over it: the timing
// does not depend on the values), its block table a shuffled permutation of the pages, every cache_seqlens
// equal to
// --seqlen-kv. The timing is bench's: warm-up launches, then each timed launch between its own pair of events
// after an asynchronous L2 eviction, the median reported; GB/s counts the K and V read plus q and o.
#include "bench_decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "bench_protocol.hpp"
#include "cli_support.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "json_output.hpp"

namespace flashrtc::cli {

namespace {

constexpr std::int64_t kPatternElements = std::int64_t{1} << 24;

struct Measurement {
  double median_us = 0, min_us = 0;
  int splits = 0;
  std::string error;
};

struct Planned {
  DecodeShape shape;
  KernelSpec spec;
  std::optional<TileConfig> explicit_tile;
};

// count random normal elements of dtype, from a pattern of at most kPatternElements repeated.
void fill_cache_bytes(DType dtype, std::vector<unsigned char>& bytes, std::int64_t count, std::uint64_t seed,
                      std::uint64_t stream) {
  std::vector<unsigned char> pattern;
  tools::fill_random_normal(dtype, pattern, std::min(count, kPatternElements), seed, stream);
  bytes.resize(static_cast<std::size_t>(count) * dtype_size(dtype));
  for (std::size_t at = 0; at < bytes.size(); at += pattern.size())
    std::memcpy(bytes.data() + at, pattern.data(), std::min(pattern.size(), bytes.size() - at));
}

class Report {
 public:
  Report(bool json, std::string gpu) : json_(json), gpu_(std::move(gpu)) {}
  void header() const {
    if (!json_)
      std::printf(kFormat, "dtype", "mask", "B", "Hq", "Hkv", "Nq", "Nk", "d", "page",
                  "tile (m,n,warps,stages)", "splits", "MB", "median us", "min us", "GB/s");
  }
  void row(const Planned& p, int splits, const std::optional<Measurement>& m) const {
    const DecodeShape& s = p.shape;
    const double bytes = decode_bytes(s);
    const bool ok = m && m->error.empty();
    if (json_) {
      Json j;
      j["provider"] = "flashrtc";
      j["mode"] = "decode";
      j["dtype"] = torch_dtype_name(s.dtype);
      j["B"] = s.batch;
      j["H"] = s.heads_q;
      j["Hkv"] = s.heads_kv;
      j["N"] = s.seqlen_q;
      j["Nk"] = s.seqlen_kv;
      j["d"] = s.head_dim;
      j["mask"] = std::string(to_string(s.mask));
      j["page_size"] = s.page_size;
      j["tile"] = p.spec.tile;
      j["family"] = p.spec.family ? p.spec.family->name : "";
      j["splits"] = splits;
      j["bytes"] = bytes;
      if (ok) {
        j["us"] = std::round(m->median_us * 100) / 100;
        j["min_us"] = std::round(m->min_us * 100) / 100;
        j["gbps"] = std::round(bytes / (m->median_us * 1e-6) / 1e9 * 10) / 10;
      } else if (m) {
        j["error"] = m->error;
      }
      if (!gpu_.empty()) j["gpu"] = gpu_;
      print_json_line(j);
      return;
    }
    const TileConfig& t = p.spec.tile;
    const std::string tile = std::to_string(t.block_m) + "," + std::to_string(t.block_n) + "," +
                             std::to_string(t.warps) + "," + std::to_string(t.stages);
    std::string median = "-", min = "-", gbps = "-";
    if (ok) {
      median = fixed(m->median_us, "%.2f");
      min = fixed(m->min_us, "%.2f");
      gbps = fixed(bytes / (m->median_us * 1e-6) / 1e9, "%.1f");
    } else if (m) {
      gbps = "error: " + m->error;
    }
    std::printf(kFormat, std::string(to_string(s.dtype)).c_str(), std::string(to_string(s.mask)).c_str(),
                std::to_string(s.batch).c_str(), std::to_string(s.heads_q).c_str(),
                std::to_string(s.heads_kv).c_str(), std::to_string(s.seqlen_q).c_str(),
                std::to_string(s.seqlen_kv).c_str(), std::to_string(s.head_dim).c_str(),
                s.page_size ? std::to_string(s.page_size).c_str() : "-", tile.c_str(),
                std::to_string(splits).c_str(), fixed(bytes / 1e6, "%.1f").c_str(), median.c_str(),
                min.c_str(), gbps.c_str());
  }

 private:
  static constexpr const char* kFormat =
      "%-5s %-9s %4s %4s %4s %4s %7s %4s %5s %-24s %6s %9s %10s %10s %8s\n";
  bool json_;
  std::string gpu_;
};

Measurement measure(const Planned& plan, const DecodeBenchOptions& o, std::uint64_t seed,
                    DeviceBuffer* l2_flush) {
  const DecodeShape& s = plan.shape;
  const std::size_t elem = dtype_size(s.dtype);
  const std::int64_t q_count = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
  const KvCacheParams shape_only = decode_params(s, decode_placeholders());
  const std::int64_t cache_count = shape_only.num_pages * shape_only.page_size * s.heads_kv * s.head_dim;
  std::vector<unsigned char> staging;
  DeviceBuffer q(static_cast<std::size_t>(q_count) * elem),
      o_buffer(static_cast<std::size_t>(q_count) * elem);
  DeviceBuffer k(static_cast<std::size_t>(cache_count) * elem),
      v(static_cast<std::size_t>(cache_count) * elem);
  tools::fill_random_normal(s.dtype, staging, q_count, seed, 0);
  q.copy_from_host(staging.data(), staging.size());
  fill_cache_bytes(s.dtype, staging, cache_count, seed, 1);
  k.copy_from_host(staging.data(), staging.size());
  fill_cache_bytes(s.dtype, staging, cache_count, seed, 2);
  v.copy_from_host(staging.data(), staging.size());
  staging = {};

  std::vector<std::int32_t> table(static_cast<std::size_t>(shape_only.num_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(seed));
  const std::vector<std::int32_t> seqlens(static_cast<std::size_t>(s.batch),
                                          static_cast<std::int32_t>(s.seqlen_kv));
  DeviceBuffer block_table(s.page_size > 0 ? table.size() * sizeof(std::int32_t) : 0);
  if (s.page_size > 0) block_table.copy_from_host(table.data(), block_table.size());
  DeviceBuffer cache_seqlens(seqlens.size() * sizeof(std::int32_t));
  cache_seqlens.copy_from_host(seqlens.data(), cache_seqlens.size());
  DeviceBuffer lse(o.lse ? static_cast<std::size_t>(s.batch * s.heads_q * s.seqlen_q) * sizeof(float) : 0);
  device_synchronize();  // the copies from pageable memory, on the legacy stream

  const DecodeBuffers buffers{q.data(),
                              k.data(),
                              v.data(),
                              o_buffer.data(),
                              static_cast<const std::int32_t*>(block_table.data()),
                              static_cast<const std::int32_t*>(cache_seqlens.data()),
                              o.lse ? static_cast<float*>(lse.data()) : nullptr};
  KvCacheParams params = decode_params(s, buffers, plan.explicit_tile);
  Stream stream;
  params.stream = stream.handle();
  Measurement m;
  for (int i = 0; i < std::max(1, o.warmup); ++i) attention_with_kvcache(params);  // the first compiles
  stream.synchronize();
  m.splits = kvcache_num_splits(params);
  std::vector<EventTimer> timers(static_cast<std::size_t>(o.iters));
  for (EventTimer& timer : timers) {
    if (l2_flush) l2_flush->fill_bytes_async(0, stream.handle());
    timer.start(stream.handle());
    attention_with_kvcache(params);
    timer.stop(stream.handle());
  }
  stream.synchronize();
  std::vector<double> us;
  for (const EventTimer& timer : timers) us.push_back(timer.elapsed_ms() * 1e3);
  std::sort(us.begin(), us.end());
  const std::size_t n = us.size();
  m.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  m.min_us = us.front();
  return m;
}

}  // namespace

std::vector<DecodeShape> decode_bench_points(const DecodeBenchOptions& o) {
  std::vector<DecodeShape> points;
  for (DType dtype : o.dtypes)
    for (std::int64_t d : o.head_dims)
      for (MaskKind mask : o.masks)
        for (const DecodeShape& s : o.decode->shapes(dtype, mask, d)) points.push_back(s);
  return points;
}

int run_decode_bench(const DecodeBenchOptions& o) {
  std::string target_text;
  const DeviceTarget target = o.target->target(&target_text);
  std::vector<Planned> plan;
  for (const DecodeShape& s : decode_bench_points(o)) {
    try {
      const KvCacheParams params = decode_params(s, decode_placeholders());
      validate_kvcache(params);
      const ConfigQuery query = config_query(params);
      const KernelSpec spec = call_kernel_spec(query, o.tile->resolve(query, target));
      plan.push_back({s, spec, o.tile->any() ? std::optional<TileConfig>(spec.tile) : std::nullopt});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported) throw;
      throw UsageError("decode " + std::string(to_string(s.dtype)) + " " + std::string(to_string(s.mask)) +
                       " " + describe(s) + ": " + e.message());
    }
  }

  if (o.dry_run) {
    const Report report(o.json, "");
    if (!o.json)
      std::printf("%zu points; tiles as chosen for %s; %s\n", plan.size(), target_text.c_str(),
                  device_available() ? "splits as kvcache_num_splits gives them on the GPU in hand"
                                     : "splits without a GPU (132 SMs)");
    report.header();
    for (const Planned& p : plan)
      report.row(p, kvcache_num_splits(decode_params(p.shape, decode_placeholders(), p.explicit_tile)),
                 std::nullopt);
    return kExitOk;
  }
  if (!device_available())
    throw Error(ErrorCode::kNoDevice,
                "no GPU: " + device_unavailable_reason() +
                    " (`flashrtc bench --op decode --dry-run` lists the points without one)");
  const DeviceInfo device = current_device();
  o.target->require_device(device.name, device.arch);
  if (!o.json)
    std::printf("gpu: %s (%s, %d SMs); decode; %d warm-up and %d timed launches per point, L2 %s\n",
                device.name.c_str(), device.arch.c_str(), device.multiprocessors, o.warmup, o.iters,
                o.no_l2_flush ? "kept warm" : "evicted before each");
  std::optional<DeviceBuffer> l2_flush;
  if (!o.no_l2_flush) l2_flush.emplace(kL2FlushBytes);
  const Report report(o.json, device.name);
  report.header();
  int failed = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    Measurement m;
    try {
      m = measure(plan[i], o, o.seed + i, l2_flush ? &*l2_flush : nullptr);
    } catch (const Error& e) {
      m.error = std::string(to_string(e.code())) + ": " + e.message();
      ++failed;
    }
    report.row(plan[i], m.splits, m);
  }
  if (failed) std::fprintf(stderr, "flashrtc: error: %d of %zu points failed\n", failed, plan.size());
  return failed ? kExitDevice : kExitOk;
}

}  // namespace flashrtc::cli
