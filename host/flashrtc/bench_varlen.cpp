// One packed batch per point: random normal q, k, v of [total, H, d], the sequences' prefix sums on the
// device, queries and keys of the same lengths (so top-left and bottom-right causal masks agree). The timing
// is bench's: warm-up launches, then each timed launch between its own pair of events after an asynchronous
// L2 eviction, the median reported. TFLOP/s and tokens/s count the real tokens: the sum over sequences of
// 4 H L^2 d, halved when causal.
#include "bench_varlen.hpp"

#include <cmath>
#include <cstdio>
#include <numeric>

#include "bench_plan.hpp"
#include "bench_protocol.hpp"
#include "cli_support.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "flashrtc_tools/tune_bench.hpp"
#include "json_output.hpp"
#include "varlen_lengths.hpp"

namespace flashrtc::cli {

namespace {

struct Point {
  DType dtype;
  MaskKind mask;
  std::int64_t head_dim, heads_q, heads_kv;
};

struct Planned {
  Point point;
  KernelSpec spec;
  std::optional<TileConfig> explicit_tile;
};

std::int64_t total_of(const std::vector<std::int64_t>& lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

double varlen_flops(const Point& p, const std::vector<std::int64_t>& lengths) {
  double sum = 0;
  for (std::int64_t n : lengths) sum += 4.0 * double(p.heads_q) * double(n) * double(n) * double(p.head_dim);
  return p.mask == MaskKind::kNone ? sum : 0.5 * sum;
}

// The call over the given device pointers (placeholders for the checks and the tile without a device).
VarlenForwardParams varlen_params(const Point& p, const std::vector<std::int64_t>& lengths, const void* q,
                                  const void* k, const void* v, const void* o, const std::int32_t* cu_seqlens,
                                  float* lse, const std::optional<TileConfig>& tile) {
  VarlenForwardParams params;
  params.dtype = p.dtype;
  params.batch = static_cast<std::int64_t>(lengths.size());
  params.total_q = params.total_k = total_of(lengths);
  params.max_seqlen_q = params.max_seqlen_k = *std::max_element(lengths.begin(), lengths.end());
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = TensorRef::bnhd(q, params.total_q, p.heads_q, p.head_dim);
  params.k = TensorRef::bnhd(k, params.total_k, p.heads_kv, p.head_dim);
  params.v = TensorRef::bnhd(v, params.total_k, p.heads_kv, p.head_dim);
  params.o = TensorRef::bnhd(o, params.total_q, p.heads_q, p.head_dim);
  params.cu_seqlens_q = params.cu_seqlens_k = cu_seqlens;
  params.lse = lse;
  params.mask = p.mask;
  params.config = tile;
  return params;
}

const void* placeholder() {
  alignas(256) static const unsigned char bytes[256] = {};
  return bytes;
}

class Report {
 public:
  Report(bool json, std::string gpu, const std::vector<std::int64_t>& lengths)
      : json_(json), gpu_(std::move(gpu)), lengths_(lengths) {}
  void header() const {
    if (!json_)
      std::printf(kFormat, "dtype", "mask", "Hq", "Hkv", "d", "family", "tile (m,n,warps,stages)", "GFLOP",
                  "median ms", "min ms", "TFLOP/s", "Mtok/s");
  }
  void row(const Planned& p, const std::optional<tools::Timing>& m, const std::string& error) const {
    const Point& s = p.point;
    const double flops = varlen_flops(s, lengths_);
    const double tokens = double(total_of(lengths_));
    const bool ok = m && error.empty();
    const char* family = p.spec.family ? p.spec.family->name.c_str() : "";
    if (json_) {
      Json j;
      j["provider"] = "flashrtc";
      j["mode"] = "fwd";
      j["op"] = "varlen";
      j["dtype"] = torch_dtype_name(s.dtype);
      j["B"] = lengths_.size();
      j["H"] = s.heads_q;
      j["Hkv"] = s.heads_kv;
      j["d"] = s.head_dim;
      j["tokens"] = total_of(lengths_);
      j["lengths"] = lengths_;
      j["mask"] = std::string(to_string(s.mask));
      j["causal"] = s.mask != MaskKind::kNone;
      j["tile"] = p.spec.tile;
      j["family"] = family;
      j["flops"] = flops;
      if (ok) {
        j["ms"] = std::round(m->median_ms * 1e4) / 1e4;
        j["min_ms"] = std::round(m->min_ms * 1e4) / 1e4;
        j["tflops"] = std::round(flops / (m->median_ms * 1e-3) / 1e12 * 10) / 10;
        j["mtok_s"] = std::round(tokens / (m->median_ms * 1e-3) / 1e6 * 10) / 10;
      } else if (!error.empty()) {
        j["error"] = error;
      }
      if (!gpu_.empty()) j["gpu"] = gpu_;
      print_json_line(j);
      return;
    }
    const TileConfig& t = p.spec.tile;
    const std::string tile = std::to_string(t.block_m) + "," + std::to_string(t.block_n) + "," +
                             std::to_string(t.warps) + "," + std::to_string(t.stages);
    std::string median = "-", min = "-", tflops = "-", rate = "-";
    if (ok) {
      median = fixed(m->median_ms, "%.4f");
      min = fixed(m->min_ms, "%.4f");
      tflops = fixed(flops / (m->median_ms * 1e-3) / 1e12, "%.1f");
      rate = fixed(tokens / (m->median_ms * 1e-3) / 1e6, "%.1f");
    } else if (!error.empty()) {
      rate = "error: " + error;
    }
    std::printf(kFormat, std::string(to_string(s.dtype)).c_str(), std::string(to_string(s.mask)).c_str(),
                std::to_string(s.heads_q).c_str(), std::to_string(s.heads_kv).c_str(),
                std::to_string(s.head_dim).c_str(), family, tile.c_str(), fixed(flops / 1e9, "%.1f").c_str(),
                median.c_str(), min.c_str(), tflops.c_str(), rate.c_str());
  }

 private:
  static constexpr const char* kFormat = "%-5s %-9s %4s %4s %4s %-12s %-24s %9s %10s %10s %8s %8s\n";
  bool json_;
  std::string gpu_;
  const std::vector<std::int64_t>& lengths_;
};

tools::Timing measure(const Planned& plan, const VarlenBenchOptions& o, std::uint64_t seed,
                      DeviceBuffer* l2_flush) {
  const Point& s = plan.point;
  const std::int64_t total = total_of(o.lengths);
  const std::size_t elem = dtype_size(s.dtype);
  const std::int64_t q_count = total * s.heads_q * s.head_dim, kv_count = total * s.heads_kv * s.head_dim;
  std::vector<unsigned char> staging;
  DeviceBuffer q(static_cast<std::size_t>(q_count) * elem), out(static_cast<std::size_t>(q_count) * elem);
  DeviceBuffer k(static_cast<std::size_t>(kv_count) * elem), v(static_cast<std::size_t>(kv_count) * elem);
  tools::fill_random_normal(s.dtype, staging, q_count, seed, 0);
  q.copy_from_host(staging.data(), staging.size());
  tools::fill_random_normal(s.dtype, staging, kv_count, seed, 1);
  k.copy_from_host(staging.data(), staging.size());
  tools::fill_random_normal(s.dtype, staging, kv_count, seed, 2);
  v.copy_from_host(staging.data(), staging.size());
  staging = {};
  std::vector<std::int32_t> prefix(o.lengths.size() + 1, 0);
  for (std::size_t i = 0; i < o.lengths.size(); ++i)
    prefix[i + 1] = prefix[i] + static_cast<std::int32_t>(o.lengths[i]);
  DeviceBuffer cu_seqlens(prefix.size() * sizeof(std::int32_t));
  cu_seqlens.copy_from_host(prefix.data(), cu_seqlens.size());
  DeviceBuffer lse(o.lse ? static_cast<std::size_t>(s.heads_q * total) * sizeof(float) : 0);
  device_synchronize();  // the copies from pageable memory, on the legacy stream

  VarlenForwardParams params =
      varlen_params(s, o.lengths, q.data(), k.data(), v.data(), out.data(),
                    static_cast<const std::int32_t*>(cu_seqlens.data()),
                    o.lse ? static_cast<float*>(lse.data()) : nullptr, plan.explicit_tile);
  Stream stream;
  params.stream = stream.handle();
  const auto flush = [&](std::size_t) {
    if (l2_flush) l2_flush->fill_bytes_async(0, stream.handle());
  };
  return tools::time_calls(
      flush, [&] { attention_varlen_forward(params); }, std::max(1, o.warmup), o.iters, stream.handle());
}

}  // namespace

int run_varlen_bench(const VarlenBenchOptions& o) {
  std::string target_text;
  const DeviceTarget target = o.target->target(&target_text);
  std::vector<Planned> plan;
  for (DType dtype : o.dtypes)
    for (std::int64_t d : o.head_dims)
      for (MaskKind mask : o.masks) {
        const std::int64_t heads = o.heads.value_or(std::max<std::int64_t>(1, kGridModelDim / d));
        const Point point{dtype, mask, d, heads, o.heads_kv.value_or(heads)};
        try {
          const auto cu = static_cast<const std::int32_t*>(placeholder());
          const VarlenForwardParams params =
              varlen_params(point, o.lengths, placeholder(), placeholder(), placeholder(), placeholder(), cu,
                            nullptr, std::nullopt);
          validate_varlen_forward(params);
          const ConfigQuery query = config_query(params);
          const KernelSpec spec = call_kernel_spec(query, o.tile->resolve(query, target));
          plan.push_back({point, spec, o.tile->any() ? std::optional<TileConfig>(spec.tile) : std::nullopt});
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported) throw;
          throw UsageError("varlen " + std::string(to_string(dtype)) + " " + std::string(to_string(mask)) +
                           " d=" + std::to_string(d) + ": " + e.message());
        }
      }

  if (o.dry_run) {
    const Report report(o.json, "", o.lengths);
    if (!o.json)
      std::printf("%zu points over %s; tiles as chosen for %s\n", plan.size(),
                  describe_lengths(o.lengths).c_str(), target_text.c_str());
    report.header();
    for (const Planned& p : plan) report.row(p, std::nullopt, "");
    return kExitOk;
  }
  if (!device_available())
    throw Error(ErrorCode::kNoDevice,
                "no GPU: " + device_unavailable_reason() +
                    " (`flashrtc bench --op varlen --dry-run` lists the points without one)");
  const DeviceInfo device = current_device();
  o.target->require_device(device.name, device.arch);
  if (!o.json)
    std::printf("gpu: %s (%s, %d SMs); varlen over %s; %d warm-up and %d timed launches per point, L2 %s\n",
                device.name.c_str(), device.arch.c_str(), device.multiprocessors,
                describe_lengths(o.lengths).c_str(), o.warmup, o.iters,
                o.no_l2_flush ? "kept warm" : "evicted before each");
  std::optional<DeviceBuffer> l2_flush;
  if (!o.no_l2_flush) l2_flush.emplace(kL2FlushBytes);
  const Report report(o.json, device.name, o.lengths);
  report.header();
  int failed = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    std::optional<tools::Timing> m;
    std::string error;
    try {
      m = measure(plan[i], o, o.seed + i, l2_flush ? &*l2_flush : nullptr);
    } catch (const Error& e) {
      error = std::string(to_string(e.code())) + ": " + e.message();
      ++failed;
    }
    report.row(plan[i], m, error);
  }
  if (failed) std::fprintf(stderr, "flashrtc: error: %d of %zu points failed\n", failed, plan.size());
  return failed ? kExitDevice : kExitOk;
}

}  // namespace flashrtc::cli
