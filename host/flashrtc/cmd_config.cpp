// `flashrtc config`: the tile a call would use and where it came from (explicit / environment / tuned /
// default), resolved exactly as attention_forward resolves it. Works without a GPU.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli_support.hpp"

namespace flashrtc::cli {

namespace {

struct ConfigOptions {
  std::string dtype, mask = "none", gpu_name, arch;
  int head_dim = 0;
  std::int64_t seqlen = 0;
  std::optional<std::int64_t> kv_seqlen;
  TileOptions tile;
};

// The device the call would run on: the one named on the command line, else the GPU in hand, else none.
DeviceTarget target_for(const ConfigOptions& o, std::string& described) {
  if (!o.gpu_name.empty()) {
    const DeviceTarget target = assumed_device_target(o.gpu_name, o.arch);
    described = o.gpu_name + " (" + o.arch + ", assumed " + format_bytes(double(target.smem_limit_bytes)) +
                " shared memory per block; named on the command line)";
    return target;
  }
  if (const auto target = current_device_target()) {
    described = target->gpu_name + " (" + target->arch + ", " + format_bytes(double(target->smem_limit_bytes)) +
                " shared memory per block)";
    return *target;
  }
  described = "none (" + device_unavailable_reason() + "); resolved for sm_80's " +
              format_bytes(double(kSmemBytesSm80)) +
              " of shared memory, and no tuned entry can apply without a GPU name (--gpu-name and --arch "
              "name one)";
  return no_device_target();
}

int execute_config(const ConfigOptions& o) {
  ConfigQuery query;
  query.dtype = dtype_from(o.dtype);
  query.head_dim = o.head_dim;
  query.mask = mask_from(o.mask);
  query.seqlen_q = o.seqlen;
  query.seqlen_kv = o.kv_seqlen.value_or(o.seqlen);
  if (query.seqlen_q < 1 || query.seqlen_kv < 1)
    throw UsageError("--seqlen and --kv-seqlen: must be >= 1");
  std::string device;
  const DeviceTarget target = target_for(o, device);
  if (o.tile.any()) {
    // Like `flashrtc run`: the fields given replace those of the tile the call would use otherwise.
    ConfigQuery implicit = query;
    query.explicit_config = o.tile.apply(resolve_forward_config(implicit, target).config);
  }
  const ConfigResolution r = resolve_forward_config(query, target);

  std::printf("config:     %s\n", to_string(r.config).c_str());
  std::printf("source:     %s (%s)\n", to_string(r.source), r.why.c_str());
  std::printf("call:       %s d=%d mask=%s Nq=%lld Nk=%lld, %s kernels\n", std::string(to_string(query.dtype)).c_str(),
              query.head_dim, std::string(to_string(query.mask)).c_str(), static_cast<long long>(query.seqlen_q),
              static_cast<long long>(query.seqlen_kv), r.family->name.c_str());
  for (const std::string& reason : r.family_passed_over) std::printf("passed over: %s\n", reason.c_str());
  std::printf("device:     %s\n", device.c_str());
  if (r.tuning_key) std::printf("tuning key: %s\n", to_string(*r.tuning_key).c_str());
  if (r.tuned && r.source != ConfigSource::kTuned)
    std::printf("tuned:      %s, passed over for the %s config\n", to_string(r.tuned->config).c_str(),
                to_string(r.source));
  std::printf("tuning db:  %s (%zu entries)\n", r.tuning_db.string().c_str(), tuning_db_entries().size());
  const std::string& env = runtime_config().config_override;
  std::printf("FLASHRTC_CONFIG: %s\n", env.empty() ? "(unset)" : env.c_str());
  return kExitOk;
}

}  // namespace

Command add_config_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "config", "print the tile a call would use and where it came from (explicit, environment, tuned, default)");
  auto o = std::make_shared<ConfigOptions>();
  app->add_option("--dtype", o->dtype, "element type")->required()->check(dtype_validator());
  app->add_option("--head-dim", o->head_dim, "head dimension")->required()->check(head_dim_validator());
  app->add_option("--seqlen", o->seqlen, "query sequence length")->required();
  app->add_option("--kv-seqlen", o->kv_seqlen, "key/value sequence length (default: --seqlen)");
  app->add_option("--mask", o->mask, "mask")->capture_default_str()->check(mask_validator());
  CLI::Option* gpu = app->add_option("--gpu-name", o->gpu_name,
                                     "resolve for this GPU (as `flashrtc info` names it) instead of the one in hand");
  CLI::Option* arch = app->add_option("--arch", o->arch, "the arch of --gpu-name, e.g. sm_90a");
  gpu->needs(arch);
  arch->needs(gpu);
  o->tile.add_to(*app);
  return {app, [o] { return execute_config(*o); }};
}

}  // namespace flashrtc::cli
