#pragma once
// `flashrtc tune`, stage 3: what the sweep found, as a table sorted by time and as JSON.
#include <optional>
#include <string>
#include <vector>

#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// The sweep's header: the call, the device and the database key.
void print_setup(const TuneSetup& setup, std::size_t candidates);

/// --dry-run: each candidate with its threads, shared memory and the blocks per SM that shared memory and
/// threads allow (registers are known only once compiled).
void print_candidates(const TuneSetup& setup, const std::vector<TuneRow>& rows);

/// Measured rows first, fastest first, then the rest in table order.
void sort_rows(std::vector<TuneRow>& rows);

/// The table of sorted rows: the `top` fastest, then every row that failed (always shown).
void print_table(const std::vector<TuneRow>& rows, std::size_t top);

/// Every row and the setup as JSON; written to path (throws Error(kCacheIo) when it cannot be).
void write_json(const std::string& path, const TuneSetup& setup, const std::vector<TuneRow>& rows,
                const std::optional<TileConfig>& winner, bool written);

}  // namespace flashrtc::tools
