#include "flashrtc/arch.hpp"

#include <nvrtc.h>

#include <algorithm>

namespace flashrtc {

std::optional<int> parse_arch_cc(std::string_view arch) {
  constexpr std::string_view kPrefix = "sm_";
  if (arch.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view rest = arch.substr(kPrefix.size());
  char suffix = 0;
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    suffix = rest.back();
    rest.remove_suffix(1);
  }
  // Two or three digits, no leading zero: every arch NVRTC has named (sm_20 .. sm_121), and no overflow.
  if (rest.size() < 2 || rest.size() > 3 || rest.front() == '0') return std::nullopt;
  int cc = 0;
  for (const char c : rest) {
    if (c < '0' || c > '9') return std::nullopt;
    cc = cc * 10 + (c - '0');
  }
  // Arch-specific targets begin with sm_90a, family targets with sm_100f; NVRTC rejects the others.
  if ((suffix == 'a' && cc < 90) || (suffix == 'f' && cc < 100)) return std::nullopt;
  return cc;
}

std::vector<int> supported_arch_ccs() {
  static const std::vector<int> ccs = [] {
    std::vector<int> nvrtc;
    int count = 0;
    if (nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      nvrtc.resize(static_cast<std::size_t>(count));
      if (nvrtcGetSupportedArchs(nvrtc.data()) != NVRTC_SUCCESS) nvrtc.clear();
    }
    std::vector<int> accepted;
    for (const int cc : nvrtc)
      if (cc >= kMinArchCc && cc <= kMaxArchCc) accepted.push_back(cc);
    std::sort(accepted.begin(), accepted.end());
    return accepted;
  }();
  return ccs;
}

bool is_supported_arch(std::string_view arch) {
  const std::optional<int> cc = parse_arch_cc(arch);
  if (!cc) return false;
  const std::vector<int> ccs = supported_arch_ccs();
  return std::find(ccs.begin(), ccs.end(), *cc) != ccs.end();
}

std::string supported_archs_text() {
  std::string text;
  for (const int cc : supported_arch_ccs()) text += (text.empty() ? "sm_" : ", sm_") + std::to_string(cc);
  if (text.empty()) text = "none (this NVRTC reports no arch from sm_" + std::to_string(kMinArchCc) + " up)";
  return text + " (sm_90 and newer also with an a suffix, e.g. sm_90a; sm_100 and newer with an f suffix)";
}

}  // namespace flashrtc
