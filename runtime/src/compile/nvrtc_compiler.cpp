#include "compile/nvrtc_compiler.hpp"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <regex>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

// Owns an nvrtcProgram.
struct ProgramDeleter {
  void operator()(nvrtcProgram* program) const {
    nvrtcDestroyProgram(program);
    delete program;
  }
};
using ProgramHandle = std::unique_ptr<nvrtcProgram, ProgramDeleter>;

void check_nvrtc(nvrtcResult status, const char* call, const std::string& key, const std::string& options,
                 const std::string& log = {}) {
  if (status == NVRTC_SUCCESS) return;
  throw Error(ErrorCode::kNvrtc, std::string(call) + " failed (key " + key + ")", call,
              nvrtcGetErrorString(status), log, options, key);
}

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

}  // namespace

std::string join_options(const std::vector<std::string>& options) {
  std::string joined;
  for (const std::string& option : options) joined += (joined.empty() ? "" : " ") + option;
  return joined;
}

NvrtcOutput nvrtc_compile(const NvrtcInput& input, const std::string& key) {
  const std::string options_text = join_options(input.options);
  std::vector<const char*> header_names, header_sources;
  for (const auto& [name, content] : input.headers) {
    header_names.push_back(name.c_str());
    header_sources.push_back(content.c_str());
  }
  const auto start = std::chrono::steady_clock::now();
  ProgramHandle program(new nvrtcProgram(nullptr));
  check_nvrtc(
      nvrtcCreateProgram(program.get(), input.source.c_str(), input.program_name.c_str(),
                         static_cast<int>(header_names.size()), header_sources.data(), header_names.data()),
      "nvrtcCreateProgram", key, options_text);
  check_nvrtc(nvrtcAddNameExpression(*program, input.name_expression.c_str()), "nvrtcAddNameExpression", key,
              options_text);
  std::vector<const char*> option_ptrs;
  for (const std::string& option : input.options) option_ptrs.push_back(option.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(*program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  NvrtcOutput output;
  output.log = program_log(*program);
  check_nvrtc(compiled, "nvrtcCompileProgram", key, options_text,
              "name expression: " + input.name_expression + "\noptions: " + options_text + "\n" + output.log);

  const char* lowered = nullptr;
  check_nvrtc(nvrtcGetLoweredName(*program, input.name_expression.c_str(), &lowered), "nvrtcGetLoweredName",
              key, options_text);
  output.lowered_name = lowered;

  size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(*program, &size), "nvrtcGetCUBINSize", key, options_text);
  output.cubin.resize(size);
  check_nvrtc(nvrtcGetCUBIN(*program, output.cubin.data()), "nvrtcGetCUBIN", key, options_text);
  check_nvrtc(nvrtcGetPTXSize(*program, &size), "nvrtcGetPTXSize", key, options_text);
  output.ptx.resize(size);
  check_nvrtc(nvrtcGetPTX(*program, output.ptx.data()), "nvrtcGetPTX", key, options_text);
  if (!output.ptx.empty() && output.ptx.back() == '\0') output.ptx.pop_back();
  output.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return output;
}

std::string nvrtc_version_string() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

// The header NVRTC writes atop every PTX, e.g.
//   // Compiler Build ID: CL-36424714
//   // Cuda compilation tools, release 13.0, V13.0.88
std::string build_from_ptx_header() {
  ProgramHandle program(new nvrtcProgram(nullptr));
  // Every process pays this compile once. --minimal (NVRTC 12.4+) skips most of NVRTC's built-in headers:
  // about 22 -> 17 ms of CPU as a process's first compile on NVRTC 13.0, with the same PTX header.
  const char* options[] = {"--minimal"};
  if (nvrtcCreateProgram(program.get(), "extern \"C\" __global__ void flashrtc_identity() {}", "identity.cu",
                         0, nullptr, nullptr) != NVRTC_SUCCESS ||
      nvrtcCompileProgram(*program, 1, options) != NVRTC_SUCCESS)
    return {};
  size_t size = 0;
  if (nvrtcGetPTXSize(*program, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string ptx(size, '\0');
  if (nvrtcGetPTX(*program, ptx.data()) != NVRTC_SUCCESS) return {};
  ptx.resize(std::min<std::size_t>(ptx.size(), 1024));  // the header; the kernel after it is not needed
  static const std::regex kRelease(R"(release [0-9.]+, (V[0-9][0-9.]*))"), kBuildId(R"(Build ID: (\S+))");
  std::smatch release, build_id;
  std::string build;
  if (std::regex_search(ptx, release, kRelease)) build = release[1];
  if (std::regex_search(ptx, build_id, kBuildId)) build += (build.empty() ? "" : " ") + build_id[1].str();
  return build;
}

// The size of the libnvrtc file this process loaded, when NVRTC's PTX names no build.
std::string library_file_identity() {
  Dl_info info{};
  struct stat file {};
  if (::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) == 0 || info.dli_fname == nullptr ||
      ::stat(info.dli_fname, &file) != 0)
    return "library unknown";
  return "library of " + std::to_string(file.st_size) + " bytes";
}

}  // namespace

const std::string& nvrtc_build_identity() {
  static const std::string identity = [] {
    const std::string build = build_from_ptx_header();
    return nvrtc_version_string() + " " +
           (build.empty() ? "build unknown, " + library_file_identity() : build);
  }();
  return identity;
}

}  // namespace flashrtc::detail
