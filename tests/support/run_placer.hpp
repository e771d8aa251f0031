#pragma once
// Runs the `placer` binary built beside a test (build/tests/X -> build/placer).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace placer::testing_support {

/// Runs `placer ARGS`, its stdout and stderr into `out`; the exit status, or
/// -1 when the binary is not built beside this test.
inline int run_placer(std::string const& args, std::string& out) {
  std::error_code ec;
  auto const exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return -1;
  auto const placer = exe.parent_path().parent_path() / "placer";
  if (!std::filesystem::exists(placer)) return -1;
  std::string const cmd = placer.string() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  out.clear();
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  int const st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace placer::testing_support
