#include "ops/call_plan.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cache/artifact_cache.hpp"
#include "driver/driver_api.hpp"
#include "driver/launch.hpp"
#include "driver/loaded_kernels.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/error.hpp"
#include "support/settings_generation.hpp"
#include "tuning/resolution_internal.hpp"

namespace flashrtc::detail {

namespace {

struct MemoKey {
  CUcontext context;
  ConfigQuery query;  // bucketed
  bool operator==(const MemoKey& o) const { return context == o.context && query == o.query; }
};

struct MemoKeyHash {
  std::size_t operator()(const MemoKey& k) const {
    const ConfigQuery& q = k.query;
    std::size_t h = std::hash<const void*>()(k.context);
    const auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    mix(static_cast<std::size_t>(q.dtype));
    mix(static_cast<std::size_t>(q.head_dim));
    mix(static_cast<std::size_t>(q.mask));
    mix(static_cast<std::size_t>(q.seqlen_q));
    mix(static_cast<std::size_t>(q.seqlen_kv));
    mix(static_cast<std::size_t>(q.operation));
    mix(static_cast<std::size_t>(q.variants));
    if (q.explicit_config) mix(static_cast<std::size_t>(q.explicit_config->block_m * 131 + q.explicit_config->block_n));
    return h;
  }
};

struct Memo {
  std::mutex mutex;
  std::uint64_t generation = 0;         // settings_generation() of the entries
  std::uint64_t driver_generation = 0;  // a replaced driver table (tests' fakes) may reuse context handles
  // Entries are never erased while the generation holds: references handed out stay valid. A settings change
  // moves the old map aside (leaked, like the modules) rather than freeing what a concurrent call may read.
  std::unordered_map<MemoKey, std::unique_ptr<PreparedCall>, MemoKeyHash>* calls =
      new std::unordered_map<MemoKey, std::unique_ptr<PreparedCall>, MemoKeyHash>;
  // What was moved aside or handed to one call only: never freed, held here so that a leak checker sees it.
  std::vector<std::unique_ptr<std::unordered_map<MemoKey, std::unique_ptr<PreparedCall>, MemoKeyHash>>> retired;
  std::vector<std::unique_ptr<PreparedCall>> one_off;
};

Memo& memo() {
  static Memo* m = new Memo;  // leaked: outlives static destructors that may still launch
  return *m;
}

// The calling thread's current context, or null when there is none or no driver (the slow path then says why).
CUcontext current_context_handle() {
  if (!driver_unavailable_reason().empty()) return nullptr;
  CUcontext context = nullptr;
  FLASHRTC_CU_CHECK(cuCtxGetCurrent, &context);
  return context;
}

}  // namespace

CallPlan make_plan(const ConfigQuery& query, const ConfigResolution& resolution, const DeviceTarget& target) {
  CallPlan plan;
  plan.family = resolution.family;
  plan.spec = call_kernel_spec(query, resolution);
  plan.arch = target.arch.empty() ? "sm_80" : target.arch;
  plan.smem_bytes = plan.family->smem_bytes(plan.spec);
  plan.threads = plan.family->threads(plan.spec);
  return plan;
}

const PreparedCall& prepare_call(const ConfigQuery& query) {
  Memo& m = memo();
  CUcontext context = current_context_handle();
  const ConfigQuery bucketed = query.bucketed();
  const std::uint64_t generation = settings_generation();
  const std::uint64_t driver_gen = driver_generation();
  if (context) {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.generation == generation && m.driver_generation == driver_gen) {
      auto it = m.calls->find({context, bucketed});
      if (it != m.calls->end()) return *it->second;
    }
  }

  // Miss: resolve, then load (compiling if needed) outside the lock.
  // An explicit tile that no family of the call's operation can build is the caller's error whatever the GPU:
  // reported before a device is needed.
  if (query.explicit_config) {
    const std::string reason = check_config_any_family(query.operation, query.dtype, query.head_dim,
                                                       *query.explicit_config, kSmemBytesSm90);
    // The call's field that held the tile (BackwardParams::dq_config for the dQ pass, else config).
    const char* field = query.operation == Operation::kBackwardDq ? "dq_config: " : "config: ";
    if (!reason.empty()) throw Error(ErrorCode::kInvalidArgument, field + reason);
  }
  const ContextInfo& info = current_context();
  const DeviceTarget target = device_target_for(info);
  const ConfigResolution resolution = resolve_call(bucketed, target);
  auto prepared = std::make_unique<PreparedCall>();
  prepared->plan = make_plan(bucketed, resolution, target);
  prepared->plan.multiprocessors = info.multiprocessors;
  const CallPlan& plan = prepared->plan;
  if (plan.smem_bytes > static_cast<std::size_t>(info.smem_per_block_optin_bytes))
    throw Error(ErrorCode::kUnsupported, "tile " + to_string(plan.spec.tile) + " needs " +
                                             std::to_string(plan.smem_bytes) + " bytes of shared memory at d=" +
                                             std::to_string(plan.spec.head_dim) + "; this GPU allows " +
                                             std::to_string(info.smem_per_block_optin_bytes));
  const CompileRequest request = family_compile_request(plan.spec, plan.arch);
  const std::shared_ptr<const KernelArtifact> artifact = get_artifact(request);
  prepared->function = load_kernel_function(info.context, artifact->key, artifact->cubin, artifact->lowered_name,
                                            static_cast<int>(plan.smem_bytes));
  FLASHRTC_CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor, &prepared->plan.blocks_per_multiprocessor,
                    prepared->function, plan.threads, plan.smem_bytes);

  std::lock_guard<std::mutex> lock(m.mutex);
  // Resolved under older settings or another driver table: good for this call only.
  if (generation < m.generation || driver_gen < m.driver_generation) {
    m.one_off.push_back(std::move(prepared));
    return *m.one_off.back();
  }
  if (m.generation != generation || m.driver_generation != driver_gen) {
    if (!m.calls->empty()) {
      m.retired.emplace_back(m.calls);
      m.calls = new std::unordered_map<MemoKey, std::unique_ptr<PreparedCall>, MemoKeyHash>;
    }
    m.generation = generation;
    m.driver_generation = driver_gen;
  }
  auto [it, inserted] = m.calls->emplace(MemoKey{info.context, bucketed}, std::move(prepared));
  return *it->second;
}

void launch_prepared(const PreparedCall& call, const void* op_params, CUstream stream) {
  LaunchShape shape;
  KernelArgs args;
  call.plan.family->build_launch(call.plan, op_params, shape, args);
  launch_family_kernel(call.function, shape, stream, args);
}

}  // namespace flashrtc::detail
