#include "compile/ptxas_report.hpp"

#include <cctype>
#include <regex>
#include <sstream>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

// The report for one entry looks like:
//   ptxas info    : Compiling entry function '_Z...' for 'sm_90a'
//   ptxas info    : Function properties for _Z...
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 168 registers, used 1 barriers, 16 bytes smem, 512 bytes cmem[0]
// An advisory that ptxas serialized the kernel's wgmma pipeline stands on its own line, before all entries'
// reports (where ptxas 13.0 writes it; it is looked for anywhere):
//   ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to
//   insufficient register resources for the wgmma pipeline in the function '_Z...'
ResourceReport parse_ptxas_report(const std::string& log, const std::string& lowered_name) {
  static const std::regex kFrame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex kUsed(R"(Used (\d+) registers)");
  static const std::regex kBarriers(R"(used (\d+) barriers)");
  static const std::regex kSmem(R"((\d+) bytes smem)");
  static const std::regex kSerialized(
      R"(wgmma\.mma_async instructions are serialized(?: due to)? ?(.*?)(?: (?:in|for) the function)? '([^']+)'\s*$)");
  static const std::regex kAdvisoryCode(R"(\((C\d+)\))");

  ResourceReport report;
  bool in_entry = false, saw_frame = false, saw_used = false;
  std::istringstream lines(log);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line)) {
    // The advisory names its function between quotes, whole, so "attn" never takes "attn_causal"'s.
    if (std::regex_search(line, match, kSerialized) && match[2] == lowered_name) {
      if (!report.wgmma_serialized) {  // the first reason, should ptxas give several
        std::string reason = match[1];
        if (std::regex_search(line, match, kAdvisoryCode)) reason += " (" + match[1].str() + ")";
        report.wgmma_serialized_reason = reason;
      }
      report.wgmma_serialized = true;
      continue;
    }
    if (line.find("Compiling entry function") != std::string::npos ||
        line.find("Function properties for") != std::string::npos) {
      // The name must stand whole ('name' or "for name"): a bare find lets "attn" match "attn_causal".
      const std::size_t at = line.find(lowered_name), end = at + lowered_name.size();
      in_entry =
          at != std::string::npos && at > 0 && (line[at - 1] == '\'' || line[at - 1] == ' ') &&
          (end == line.size() || line[end] == '\'' || std::isspace(static_cast<unsigned char>(line[end])));
      continue;
    }
    if (!in_entry) continue;
    if (std::regex_search(line, match, kFrame)) {
      report.stack_frame_bytes = std::stoi(match[1]);
      report.spill_store_bytes = std::stoi(match[2]);
      report.spill_load_bytes = std::stoi(match[3]);
      saw_frame = true;
    }
    if (std::regex_search(line, match, kUsed)) {
      report.registers = std::stoi(match[1]);
      saw_used = true;
      if (std::regex_search(line, match, kBarriers)) report.barriers = std::stoi(match[1]);
      if (std::regex_search(line, match, kSmem)) report.static_smem_bytes = std::stoi(match[1]);
      in_entry = false;  // "Used" closes the entry's report
    }
  }
  if (!saw_frame || !saw_used)
    throw Error(ErrorCode::kInternal, "no ptxas resource report for " + lowered_name + " in the compile log",
                "", "", log);
  return report;
}

}  // namespace flashrtc::detail
