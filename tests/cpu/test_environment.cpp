// The environment as the runtime reads it: one parser for the flags and one for the log level, each taking
// its documented values in any case and refusing the rest with the variable's name and what it accepts.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <string>

#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"

using namespace flashrtc;

namespace {

// Sets one variable for the life of a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The message of the Error that from_environment throws, or "" when it throws none.
std::string refusal() {
  try {
    RuntimeConfig::from_environment();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.message();
  }
  return {};
}

}  // namespace

TEST_CASE("FLASHRTC_ flags: False is off, any case, and a value it does not know is refused by name") {
  struct Spelling {
    const char* text;
    bool on;
  };
  for (const Spelling& flag : {Spelling{"False", false}, {"FALSE", false}, {"false", false}, {"0", false},
                               {"no", false}, {"No", false}, {"off", false}, {"OFF", false}, {"True", true},
                               {"TRUE", true}, {"1", true}, {"yes", true}, {"Yes", true}, {"on", true},
                               {"ON", true}}) {
    INFO(flag.text);
    const ScopedEnv required("FLASHRTC_REQUIRE_CACHED", flag.text);
    const ScopedEnv disabled("FLASHRTC_DISABLE_DISK_CACHE", flag.text);
    const ScopedEnv always("FLASHRTC_ALWAYS_COMPILE", flag.text);
    const RuntimeConfig config = RuntimeConfig::from_environment();
    CHECK(config.require_cached == flag.on);
    CHECK(config.disk_cache == !flag.on);
    CHECK(config.always_compile == flag.on);
  }
  {
    const ScopedEnv empty("FLASHRTC_REQUIRE_CACHED", "");  // empty is unset: the default
    CHECK_FALSE(RuntimeConfig::from_environment().require_cached);
  }
  for (const char* name :
       {"FLASHRTC_REQUIRE_CACHED", "FLASHRTC_DISABLE_DISK_CACHE", "FLASHRTC_ALWAYS_COMPILE"})
    for (const char* bad : {"maybe", "2", "-1", " 1", "truee", "enabled"}) {
      INFO(name << "=" << bad);
      const ScopedEnv set(name, bad);
      const std::string message = refusal();
      CHECK(message.find(std::string(name) + "='" + bad + "'") == 0);
      CHECK(message.find(kEnvFlagValues) != std::string::npos);
    }
  const ScopedEnv long_value("FLASHRTC_REQUIRE_CACHED", std::string(5000, 'x').c_str());
  CHECK(refusal().size() < 300);
}

TEST_CASE("FLASHRTC_LOG_LEVEL: a known level in any case, an unknown one refused rather than silenced") {
  {
    const ScopedEnv level("FLASHRTC_LOG_LEVEL", "DEBUG");
    CHECK(RuntimeConfig::from_environment().log_level == "debug");
  }
  for (const char* bad : {"verbose", "warning ", "loud", "5"}) {
    INFO(bad);
    const ScopedEnv level("FLASHRTC_LOG_LEVEL", bad);
    const std::string message = refusal();
    CHECK(message.find("FLASHRTC_LOG_LEVEL='" + std::string(bad) + "'") == 0);
    CHECK(message.find(kLogLevels) != std::string::npos);
  }
  // In code too: set_runtime_config refuses it and keeps the settings it had.
  RuntimeConfig config = runtime_config();
  const std::string before = config.log_level;
  config.log_level = "verbose";
  CHECK_THROWS_AS(set_runtime_config(config), Error);
  CHECK(runtime_config().log_level == before);
  config.log_level = "Error";
  set_runtime_config(config);
  CHECK(runtime_config().log_level == "error");
}
