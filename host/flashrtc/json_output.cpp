#include "json_output.hpp"

#include <cstdio>

namespace flashrtc::cli {

void print_json_document(const Json& document) {
  std::printf("%s\n", json_text(document, 2).c_str());
  std::fflush(stdout);
}

void print_json_line(const Json& row) {
  std::printf("%s\n", json_text(row).c_str());
  std::fflush(stdout);
}

Json error_json(const std::string& kind, const std::string& message, int exit_code) {
  return Json{{"error", {{"kind", kind}, {"message", message}, {"exit_code", exit_code}}}};
}

}  // namespace flashrtc::cli
