#pragma once
/// flashrtc's tools as a library (what the `flashrtc` command's tune and cache subcommands are made of):
/// the tuner's stages (compile candidates, check against the Eigen reference, time, report, plot), plots of
/// benchmarks and cache inspection (sorted listing, files, SASS). The JSON form of the data types is
/// flashrtc_tools/json_fields.hpp, not included here: it needs nlohmann_json. Uses the runtime's public
/// headers only.
#include "flashrtc_tools/bench_plot.hpp"
#include "flashrtc_tools/cache_inspect.hpp"
#include "flashrtc_tools/cache_size_units.hpp"
#include "flashrtc_tools/external_tool.hpp"
#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/forward_check.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "flashrtc_tools/plot.hpp"
#include "flashrtc_tools/progress.hpp"
#include "flashrtc_tools/tool_errors.hpp"
#include "flashrtc_tools/tune_bench.hpp"
#include "flashrtc_tools/tune_compile.hpp"
#include "flashrtc_tools/tune_measure.hpp"
#include "flashrtc_tools/tune_plot.hpp"
#include "flashrtc_tools/tune_report.hpp"
#include "flashrtc_tools/tune_types.hpp"
