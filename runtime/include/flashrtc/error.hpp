#pragma once
/// The one exception type the runtime throws.
#include <stdexcept>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

enum class ErrorCode : int {
  kInvalidArgument = 1,      ///< a caller's value is wrong; nothing was launched
  kUnsupported = 2,          ///< a valid request no kernel specialization serves (e.g. a tile that does not fit)
  kNvrtc = 3,                ///< NVRTC failed; log() holds the compile log, options() and key() what was compiled
  kDriver = 4,               ///< a CUDA Driver API call failed; status() names the CUresult
  kCacheIo = 5,              ///< the disk cache could not be read or written where it had to be
  kNoDevice = 6,             ///< no CUDA driver library or no device
  kCompileDisallowed = 7,    ///< FLASHRTC_REQUIRE_CACHED is set and the kernel is not in the cache
  kInternal = 8,             ///< a broken invariant inside flashrtc
};

/// Name of a code, e.g. "InvalidArgument".
FLASHRTC_API const char* to_string(ErrorCode code);

/// Carries what failed: the call (e.g. "cuLaunchKernel"), its status name, and for compile errors the
/// NVRTC log, the options and the cache key. what() is a one-line summary followed by the log, if any.
class FLASHRTC_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, std::string call = {}, std::string status = {},
        std::string log = {}, std::string options = {}, std::string key = {});

  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& status() const noexcept { return status_; }
  const std::string& log() const noexcept { return log_; }
  const std::string& options() const noexcept { return options_; }
  const std::string& key() const noexcept { return key_; }

 private:
  ErrorCode code_;
  std::string message_, call_, status_, log_, options_, key_;
};

}  // namespace flashrtc
