#pragma once
// What `flashrtc tune` knows about its sweep and each candidate, shared by its stages (compile, check and
// time, report).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::tools {

enum class RowStatus { kPending, kOk, kCompileFailed, kDoesNotFit, kWrong, kLaunchFailed, kNotRun };
/// "ok", "compile failed", "does not fit", "wrong results", "launch failed", "not run".
const char* to_string(RowStatus status);

/// One candidate tile and what became of it.
struct TuneRow {
  TileConfig tile;
  int threads = 0;
  std::size_t smem_bytes = 0;  ///< dynamic shared memory per block
  RowStatus status = RowStatus::kPending;
  std::string message;  ///< why it failed, or empty
  std::optional<CompiledKernelInfo> kernel;
  int resident_blocks = 0;  ///< per SM; from the compiled registers once known
  double occupancy = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0, tflops = 0;
};

/// The sweep: the call it tunes and the device it runs on.
struct TuneSetup {
  ForwardParams
      shape;  ///< the tuned call (pointers are placeholders); for kBackward, the forward it differentiates
  /// kForward; or kBackwardFused or kBackward (kBackwardDq): the backward of shape is checked and timed, the
  /// tiles of its main kernel (its dQ pass) swept.
  Operation operation = Operation::kForward;
  std::string gpu_name, arch;
  const KernelFamily* family = nullptr;  ///< the family the call runs on for arch: its tiles are swept
  SmLimits limits;
  TuneSpace space = TuneSpace::kQuick;
  std::size_t family_configs = 0;  ///< configurations of the family that fit (the full space)
  std::optional<TuningKey> key;    ///< absent without a GPU name (dry run without a GPU)
  double flops = 0;                ///< per call of the operation (the backward's: attention_backward_flops)
};

}  // namespace flashrtc::tools
