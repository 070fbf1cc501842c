#pragma once
// `flashrtc config --op bwd`: the families and tiles of a backward call's kernels (pre-pass, main kernel, dQ
// pass or conversion: backward_operations), each resolved as attention_backward resolves it.
#include <string>
#include <vector>

#include "json_output.hpp"
#include "shared_options.hpp"

namespace flashrtc::cli {

/// One kernel of a backward call, resolved as attention_backward resolves it.
struct BackwardKernel {
  Operation operation;
  ConfigQuery query;
  ConfigResolution resolution;
};

/// The kernels of the backward of query's call (query.operation is ignored) on target, in launch order
/// (backward_operations: the main kernel second); tile (the command's tile options) applies to the main
/// kernel as BackwardParams::config does, so a tile the fused family does not take selects the separate pass.
std::vector<BackwardKernel> resolve_backward(const ConfigQuery& query, bool deterministic,
                                             const TileOptions& tile, const DeviceTarget& target);

/// What a backward kernel does in the call: "prep", "main" (kBackward or kBackwardFused), "dq", "dq_convert"
/// (JSON), and its text label.
const char* backward_role(Operation op);
const char* backward_label(Operation op);

/// The backward of query's call (query.operation is ignored) on target. tile: the command's tile options,
/// applied to the main kernel as BackwardParams::config is. Prints the text (or with json, one document:
/// op, call, device, kernels [{role, operation, ...the resolution's fields}], tuning_db_entries,
/// flashrtc_config). Throws Error as config resolution does.
void print_backward_config(const ConfigQuery& query, bool deterministic, const TileOptions& tile,
                           const DeviceTarget& target, const std::string& device, bool json);

}  // namespace flashrtc::cli
