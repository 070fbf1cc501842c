#pragma once
// A call resolved once into an immutable plan, and the memo that makes a repeated call cost one lookup.
#include <cuda.h>

#include "driver/context.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

// The plan of a query whose family and tile were resolved on target.
CallPlan make_plan(const ConfigQuery& query, const ConfigResolution& resolution, const DeviceTarget& target);

// A plan and its kernel loaded into a context.
struct PreparedCall {
  CallPlan plan;
  CUfunction function = nullptr;
};

// The prepared call for query in the current context (device 0's primary context when none is current).
// A call whose bucketed query was prepared before in this context, with no settings change since
// (set_runtime_config, a tuning-database entry, a family registration), costs one lookup under one lock;
// otherwise it resolves the family and tile, compiles or loads the kernel, and remembers the result.
// Throws what config resolution, compilation and the driver throw.
const PreparedCall& prepare_call(const ConfigQuery& query);

// Launches call's kernel on stream with the launch its family builds from op_params (the operation's own
// parameter struct).
void launch_prepared(const PreparedCall& call, const void* op_params, CUstream stream);

}  // namespace flashrtc::detail
