// run_command (bridge.hpp): Slurm's tools without a shell, bounded in time.
#include <placer/slurm/bridge.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace placer::slurm {

std::string run_command(std::vector<std::string> const& argv, int timeout_ms) {
  if (argv.empty()) throw slurm_error("run_command: no command");
  std::string const what = argv[0] + (argv.size() > 1 ? " " + argv[1] : "");
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw slurm_error(what + ": pipe: " + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw slurm_error(what + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  // Every pipe end is close-on-exec (pipe2), so only the dup2'ed 1 and 2
  // reach the command: daemons it starts cannot keep the pipes open.
  std::vector<char*> args;
  for (auto const& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int const rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    throw slurm_error(what + ": cannot start: " + std::strerror(rc));
  }
  std::string o, e;
  auto const until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  char buf[65536];
  while (open_fds > 0) {
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left)) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t const n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        (k == 0 ? o : e).append(buf, static_cast<std::size_t>(n));
        if (o.size() > (256U << 20)) timed_out = true;  // bounded memory: 256 MiB of output at most
      } else {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
    if (timed_out) break;
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
  if (e.size() > 4096) e = "..." + e.substr(e.size() - 4096);
  if (timed_out) {
    throw slurm_error(what + ": no answer within " + std::to_string(timeout_ms) + " ms (killed)" + (e.empty() ? "" : ": " + e));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw slurm_error(what + ": exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                      (e.empty() ? "" : ": " + e));
  }
  return o;
}

}  // namespace placer::slurm
