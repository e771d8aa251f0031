#pragma once
// A child process for a test: started without a shell, its stdout and
// stderr into a file, signalled and reaped by the test; killed (SIGKILL)
// with the object if still running, and by the kernel when the test's
// process ends. For `placer serve` replicas killed mid-round and the Slurm
// bridge run as a loop.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace placer::testing_support {

/// The `placer` binary built beside this test (build/tests/X -> build/placer).
inline std::filesystem::path placer_binary() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "placer";
}

class child_process {
 public:
  child_process(std::vector<std::string> const& argv, std::string log) : log_(std::move(log)) {
    std::vector<char*> args;
    for (auto const& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t const parent = getpid();
    // fork, not posix_spawn: the child asks for SIGKILL when this process
    // ends (prctl), however it ends (a crash, ctest's timeout), so that no
    // replica or bridge outlives its test. The signal follows the thread
    // that forks: the tests start these from their main thread. Between
    // fork and exec, only async-signal-safe calls.
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("cannot start " + argv[0] + ": fork failed");
    if (pid_ == 0) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
      int const out = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int const in = open("/dev/null", O_RDONLY);
      if (out < 0 || in < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 || dup2(in, 0) < 0) _exit(127);
      execve(args[0], args.data(), environ);
      _exit(127);
    }
  }
  ~child_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      (void)wait();
    }
  }
  child_process(child_process const&) = delete;
  child_process& operator=(child_process const&) = delete;

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  /// Reaps it; its exit status (128 + signal when killed).
  int wait() {
    if (pid_ <= 0) return status_;
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  /// What it has written so far.
  [[nodiscard]] std::string output() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int status_ = -1;
};

/// `placer serve` on `endpoint` (CPU backend, one worker, quiet), waited
/// for until `placer health` says it is ready (up to 30 s).
inline std::unique_ptr<child_process> start_replica(std::string const& endpoint, std::string const& log) {
  auto p = std::make_unique<child_process>(
      std::vector<std::string>{placer_binary().string(), "serve", "--endpoint", endpoint, "--backend", "cpu", "--workers",
                               "1", "--log-level", "warn"},
      log);
  for (int k = 0; k < 300; ++k) {
    child_process probe({placer_binary().string(), "health", "--endpoint", endpoint, "--timeout-ms", "300", "--quiet"},
                        log + ".health");
    if (probe.wait() == 0) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("placer serve on " + endpoint + " did not become ready: " + p->output());
}

}  // namespace placer::testing_support
