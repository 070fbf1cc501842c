// Where a cold compile's time goes: the front end and NVVM (C++ to PTX) against ptxas (PTX to cubin), for
// programs dumped by FLASHRTC_DUMP_SOURCES=DIR (one DIR/<key>/ per compile: the .cu, its headers and
// nvrtc_options.txt). Each round compiles every program twice in this process, once to PTX only (the
// compute_ arch of its sm_ arch) and once to a cubin; the CPU time of this thread is the figure (a loaded
// machine inflates it far less than wall time), the minimum over rounds is reported, and rounds interleave
// the programs so that edited copies of one dump compare under the same load. NVRTC's own --time table of the
// last cubin compile splits the front end from NVVM. No GPU needed.
//
//   flashrtc_nvrtc_phases [--rounds N] DUMP_KEY_DIR... [-- EXTRA_NVRTC_OPTION...]
#include <nvrtc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Program {
  fs::path dir;
  std::string name, source, name_expression;
  std::vector<std::string> header_names, header_sources, options;
};

struct Compiled {
  double cpu_ms = 0, wall_ms = 0;
  std::string log;
  std::size_t cubin_bytes = 0;
};

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path.string());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

double thread_cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
}

// nvrtc_options.txt: the options joined by spaces on the first line, then "name expression: ...".
Program load_program(const fs::path& dir, const std::vector<std::string>& extra_options) {
  Program program;
  program.dir = dir;
  const std::string options_text = read_text(dir / "nvrtc_options.txt");
  std::istringstream lines(options_text);
  std::string first, line;
  std::getline(lines, first);
  std::istringstream words(first);
  for (std::string option; words >> option;) program.options.push_back(option);
  const std::string kPrefix = "name expression: ";
  while (std::getline(lines, line))
    if (line.rfind(kPrefix, 0) == 0) program.name_expression = line.substr(kPrefix.size());
  if (program.name_expression.empty()) throw std::runtime_error(dir.string() + ": no name expression");
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string relative = fs::relative(entry.path(), dir).generic_string();
    if (relative == "nvrtc_options.txt") continue;
    if (relative.find('/') == std::string::npos) {
      program.name = relative;
      program.source = read_text(entry.path());
    } else {
      program.header_names.push_back(relative);
      program.header_sources.push_back(read_text(entry.path()));
    }
  }
  if (program.name.empty()) throw std::runtime_error(dir.string() + ": no program file");
  program.options.insert(program.options.end(), extra_options.begin(), extra_options.end());
  return program;
}

// The options with the sm_ arch replaced by its compute_ arch (PTX only), or as they are.
std::vector<std::string> with_arch(std::vector<std::string> options, bool ptx_only) {
  if (!ptx_only) return options;
  const std::string kArch = "--gpu-architecture=sm_";
  for (std::string& option : options)
    if (option.rfind(kArch, 0) == 0) option = "--gpu-architecture=compute_" + option.substr(kArch.size());
  return options;
}

Compiled compile(const Program& program, const std::vector<std::string>& options) {
  std::vector<const char*> names, sources, option_ptrs;
  for (std::size_t i = 0; i < program.header_names.size(); ++i) {
    names.push_back(program.header_names[i].c_str());
    sources.push_back(program.header_sources[i].c_str());
  }
  for (const std::string& option : options) option_ptrs.push_back(option.c_str());
  Compiled out;
  const double cpu_start = thread_cpu_ms();
  const auto wall_start = std::chrono::steady_clock::now();
  nvrtcProgram handle = nullptr;
  if (nvrtcCreateProgram(&handle, program.source.c_str(), program.name.c_str(),
                         static_cast<int>(names.size()), sources.data(), names.data()) != NVRTC_SUCCESS)
    throw std::runtime_error(program.dir.string() + ": nvrtcCreateProgram failed");
  nvrtcAddNameExpression(handle, program.name_expression.c_str());
  const nvrtcResult result =
      nvrtcCompileProgram(handle, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  nvrtcGetCUBINSize(handle, &out.cubin_bytes);
  out.cpu_ms = thread_cpu_ms() - cpu_start;
  out.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(handle, &log_size);
  out.log.assign(log_size, '\0');
  nvrtcGetProgramLog(handle, out.log.data());
  nvrtcDestroyProgram(&handle);
  if (result != NVRTC_SUCCESS)
    throw std::runtime_error(program.dir.string() + ": " + nvrtcGetErrorString(result) + "\n" + out.log);
  return out;
}

// "CUDA C++ Frontend=34 NVVM Optimizer=258 PTX Translation=391" from NVRTC's --time table.
std::string phase_table(const fs::path& csv) {
  std::ifstream file(csv);
  std::string line, out;
  std::getline(file, line);  // column headings
  while (std::getline(file, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');)
      cells.push_back(cell.substr(cell.find_first_not_of(' ')));
    if (cells.size() >= 3) out += (out.empty() ? "" : ", ") + cells[1] + " " + cells[2];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::vector<fs::path> dirs;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--") {
      extra.assign(argv + i + 1, argv + argc);
      break;
    } else if (arg == "-h" || arg == "--help" || arg.rfind("-", 0) == 0) {
      std::fprintf(stderr, "usage: %s [--rounds N] DUMP_KEY_DIR... [-- EXTRA_NVRTC_OPTION...]\n", argv[0]);
      return 2;
    } else {
      dirs.emplace_back(arg);
    }
  }
  if (dirs.empty()) {
    std::fprintf(stderr, "usage: %s [--rounds N] DUMP_KEY_DIR... [-- EXTRA_NVRTC_OPTION...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<Program> programs;
    for (const fs::path& dir : dirs) programs.push_back(load_program(dir, extra));
    std::vector<double> full_ms(programs.size(), 1e30), ptx_ms(programs.size(), 1e30);
    std::vector<Compiled> last(programs.size());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t p = 0; p < programs.size(); ++p) {
        ptx_ms[p] = std::min(ptx_ms[p], compile(programs[p], with_arch(programs[p].options, true)).cpu_ms);
        last[p] = compile(programs[p], programs[p].options);
        full_ms[p] = std::min(full_ms[p], last[p].cpu_ms);
      }
    const fs::path csv =
        fs::temp_directory_path() / ("flashrtc_nvrtc_phases_" + std::to_string(::getpid()) + ".csv");
    static const std::regex kRegisters(R"(Used (\d+) registers)"), kWarning(R"(\((C7\d\d\d)\))");
    std::printf("CPU ms of this thread, min of %d rounds; ptxas = cubin - PTX only\n", rounds);
    for (std::size_t p = 0; p < programs.size(); ++p) {
      std::vector<std::string> timed = programs[p].options;
      timed.push_back("--time=" + csv.string());
      fs::remove(csv);
      compile(programs[p], timed);
      std::smatch match;
      const std::string registers =
          std::regex_search(last[p].log, match, kRegisters) ? match[1].str() : std::string("?");
      std::string warnings;
      for (std::sregex_iterator it(last[p].log.begin(), last[p].log.end(), kWarning), end; it != end; ++it)
        if (warnings.find((*it)[1].str()) == std::string::npos) warnings += " " + (*it)[1].str();
      std::printf(
          "%s: total %.0f, front end + NVVM %.0f, ptxas %.0f; %s registers, cubin %zu bytes%s%s\n  --time: "
          "%s\n",
          programs[p].dir.filename().c_str(), full_ms[p], ptx_ms[p], full_ms[p] - ptx_ms[p],
          registers.c_str(), last[p].cubin_bytes,
          warnings.empty() ? "" : ", ptxas advisories:", warnings.c_str(), phase_table(csv).c_str());
    }
    fs::remove(csv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashrtc_nvrtc_phases: %s\n", e.what());
    return 1;
  }
  return 0;
}
