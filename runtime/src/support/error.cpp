#include "flashrtc/error.hpp"

#include <utility>

namespace flashrtc {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kNvrtc: return "NvrtcError";
    case ErrorCode::kDriver: return "DriverError";
    case ErrorCode::kCacheIo: return "CacheIoError";
    case ErrorCode::kNoDevice: return "NoDevice";
    case ErrorCode::kCompileDisallowed: return "CompileDisallowed";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

namespace {
std::string summarize(ErrorCode code, const std::string& message, const std::string& call,
                      const std::string& status, const std::string& log) {
  std::string text = std::string("flashrtc: ") + to_string(code) + ": " + message;
  if (!call.empty()) text += " [" + call + (status.empty() ? "" : " -> " + status) + "]";
  if (!log.empty()) text += "\n" + log;
  return text;
}
}  // namespace

Error::Error(ErrorCode code, std::string message, std::string call, std::string status, std::string log,
             std::string options, std::string key)
    : std::runtime_error(summarize(code, message, call, status, log)),
      code_(code),
      message_(std::move(message)),
      call_(std::move(call)),
      status_(std::move(status)),
      log_(std::move(log)),
      options_(std::move(options)),
      key_(std::move(key)) {}

}  // namespace flashrtc
