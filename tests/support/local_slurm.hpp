#pragma once
// A live local Slurm for a test (scripts/slurm-cluster.sh): up with the
// object, down after it, on ports found free; and what the live tests read
// of it (squeue, the nodes' GPUs in use, the bridge's output). Tests that
// use it hold the ctest lock local_slurm, one cluster at a time.
#include <placer/slurm/bridge.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "run_placer.hpp"

namespace placer::testing_support {

namespace fs = std::filesystem;
using slurm::run_command;

inline fs::path repo_root() { return PLACER_SOURCE_DIR; }  // (placer_add_test defines it)

inline bool have(char const* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }

/// A block of `count` TCP ports, each free to bind now, below the kernel's
/// ephemeral range: other tests' sockets (ZeroMQ's wildcard binds, every
/// client connection) take ports from that range, and a slurmd whose port
/// is taken dies, leaving its node down. `salt` picks another block.
inline int free_port_block(int count, int salt) {
  int lo = 32768;
  if (std::ifstream r("/proc/sys/net/ipv4/ip_local_port_range"); r) r >> lo;
  int const first = 10000, blocks = std::max(1, (std::min(lo, 65536) - first - count) / count);
  auto const is_free = [](int port) {
    int const fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    int const one = 1;  // as Slurm's daemons bind: a port in TIME_WAIT is free
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    bool const ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  };
  for (int k = 0; k < blocks; ++k) {
    int const base = first + static_cast<int>((getpid() + salt * 7919 + k) % blocks) * count;
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = is_free(p);
    if (all) return base;
  }
  throw std::runtime_error("no block of " + std::to_string(count) + " free ports below " + std::to_string(lo));
}

/// Skips, saying why, where the live cluster cannot run.
inline bool live_slurm_missing(std::string& why) {
  if (!have("slurmctld") || !have("munged") || !have("sbatch")) {
    why = "Slurm is not installed (scripts/install-deps.sh installs it)";
  } else if (getuid() != 0) {
    why = "needs root: slurmd starts jobs as their users";
  } else {
    std::string out;
    if (run_placer("slurm-bridge --help", out) < 0) why = "placer binary not built beside the test";
  }
  return !why.empty();
}

/// The local cluster, up for the test and down after it. A cluster that
/// does not come up is tried once more on other ports (what failed goes
/// to stderr): the test is of the bridge, not of this host's ports.
class local_slurm {
 public:
  /// `conf`: lines added to its slurm.conf, and slurmctld restarted to
  /// read them (22.05's `scontrol reconfigure` shows a new PriorityType
  /// but keeps the plugin it started with).
  explicit local_slurm(int nodes, std::vector<std::string> const& conf = {}) {
    dir_ = fs::temp_directory_path() / ("placer-slurm-e2e-" + std::to_string(getpid()));
    for (int attempt = 0;; ++attempt) {
      port_ = free_port_block(nodes + 1, attempt);  // slurmctld's, then a slurmd's each
      try {
        // (Beyond the script's own 90 s wait for the nodes, so that its
        // account of what did not come up reaches us.)
        out_ = run_command({"bash", (repo_root() / "scripts/slurm-cluster.sh").string(), "up", "--nodes",
                            std::to_string(nodes), "--gpus", "8", "--models", "a100,h100", "--racks", "2", "--infer", "2",
                            "--dir", dir_.string(), "--port", std::to_string(port_),
                            // stopped with this process, however it ends (a crash, ctest's timeout)
                            "--owner", std::to_string(getpid())},
                           150000);
        break;
      } catch (std::exception const& e) {
        down();  // what came up before the failure
        if (attempt == 1) throw;
        std::fprintf(stderr, "slurm up on ports %d..%d failed, trying others: %s\n", port_, port_ + nodes, e.what());
      }
    }
    setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);
    if (conf.empty()) return;
    try {
      restart_with(conf, nodes);
    } catch (...) {
      down();  // (no destructor for a constructor that throws)
      throw;
    }
  }
  ~local_slurm() { down(); }
  local_slurm(local_slurm const&) = delete;
  local_slurm& operator=(local_slurm const&) = delete;
  /// Stops the daemons; keeps the directory (their pid files) when that
  /// failed, so that `scripts/slurm-cluster.sh down --dir` can still stop them.
  void down() {
    try {
      // (Its own limits add up to about a minute with jobs to cancel.)
      run_command({"bash", (repo_root() / "scripts/slurm-cluster.sh").string(), "down", "--dir", dir_.string()}, 120000);
    } catch (std::exception const& e) {
      std::fprintf(stderr, "slurm down: %s (daemons may be left: scripts/slurm-cluster.sh down --dir %s)\n", e.what(),
                   dir_.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  [[nodiscard]] fs::path const& dir() const { return dir_; }

  void restart_with(std::vector<std::string> const& conf, int nodes) {
    {
      std::ofstream f(dir_ / "slurm.conf", std::ios::app);
      for (auto const& line : conf) f << line << "\n";
    }
    auto const alive = [&] {
      std::ifstream pid(dir_ / "run" / "slurmctld.pid");
      int p = 0;
      return (pid >> p) && p > 0 && kill(p, 0) == 0;
    };
    run_command({"scontrol", "shutdown", "slurmctld"});
    for (int k = 0; k < 300 && alive(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (alive()) throw std::runtime_error("slurmctld did not stop");
    auto const conf_file = (dir_ / "slurm.conf").string(), log = (dir_ / "log" / "slurmctld.log").string();
    run_command({"bash", "-c", "slurmctld -f '" + conf_file + "' -i </dev/null >>'" + log + "' 2>&1"});
    for (int k = 0; k < 600; ++k) {
      try {
        auto const idle = run_command({"sinfo", "-h", "-N", "-t", "idle", "-o", "%N"});
        if (std::count(idle.begin(), idle.end(), '\n') == nodes) return;
      } catch (std::exception const&) {  // not up yet
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("the nodes did not come back idle after slurmctld's restart");
  }

  /// sbatch -H --comment=placer; the job prints its nodes' names (an
  /// array's tasks each theirs). `held` false: instead --begin in an hour,
  /// not the bridge's (--comment=twin), a job Slurm gives its priority
  /// without starting it.
  std::int64_t submit(std::string const& spec, int seconds = 3, bool held = true) {
    bool const array = spec.find("--array") != std::string::npos;
    std::vector<std::string> argv{"sbatch", "--parsable", held ? "-H" : "--begin=now+3600",
                                  held ? "--comment=placer" : "--comment=twin", "-o",
                                  (dir_ / (array ? "job-%A_%a.out" : "job-%j.out")).string()};
    std::istringstream is(spec);
    for (std::string w; is >> w;) argv.push_back(w);
    argv.push_back("--wrap=srun bash -c 'echo $SLURMD_NODENAME'; sleep " + std::to_string(seconds));
    return std::stoll(run_command(argv));
  }
  /// The distinct node names job (or array task) `id` printed.
  std::set<std::string> ran_on(slurm::job_ref const& id) const {
    std::ifstream f(dir_ / ("job-" + id.str() + ".out"));
    std::set<std::string> s;
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) s.insert(line);
    }
    return s;
  }

 private:
  fs::path dir_;
  int port_ = 0;
  std::string out_;
};

/// "job N: placed on a,b" lines of the bridge's output ("job A_T" for an array's task).
inline std::map<slurm::job_ref, std::set<std::string>> placed_lines(std::string const& out) {
  std::map<slurm::job_ref, std::set<std::string>> m;
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) {
    auto const at = line.find(": placed on ");
    if (line.rfind("job ", 0) != 0 || at == std::string::npos) continue;
    std::set<std::string> nodes;
    std::istringstream ns(line.substr(at + 12));
    for (std::string n; std::getline(ns, n, ',');) nodes.insert(n);
    std::string const id = line.substr(4, at - 4);
    auto const under = id.find('_');
    m[{std::stoll(id.substr(0, under)), under == std::string::npos ? -1 : std::stoll(id.substr(under + 1))}] = nodes;
  }
  return m;
}

// (--states=all: from 23.11 squeue --json leaves ended jobs out by default.)
inline nlohmann::json squeue() { return nlohmann::json::parse(run_command({"squeue", "--json", "--states=all"})); }

/// A job's state: a string up to Slurm 23.02, a list (state, then flags) after.
inline std::string job_state(nlohmann::json const& j) {
  auto const it = j.find("job_state");
  if (it == j.end()) return {};
  if (it->is_array()) return it->empty() ? std::string() : (*it)[0].get<std::string>();
  return it->get<std::string>();
}

/// A number field: a number up to Slurm 23.02, {"set", "infinite",
/// "number"} after; `def` where it is absent or unset.
inline std::int64_t number_of(nlohmann::json const& j, char const* key, std::int64_t def = -1) {
  auto const it = j.find(key);
  if (it == j.end()) return def;
  if (it->is_number()) return it->get<std::int64_t>();
  if (it->is_object() && it->value("set", false) && it->contains("number")) return (*it)["number"].get<std::int64_t>();
  return def;
}

// (A json kept in a local: a range-for over squeue()["jobs"] would read
// a destroyed temporary.)
inline nlohmann::json job_of(std::int64_t id) {
  auto const q = squeue();
  for (auto const& j : q["jobs"]) {
    if (number_of(j, "job_id") == id) return j;
  }
  return {};
}

/// Waits until no job but the held ones is pending or running, checking
/// every node's GPUs in use against its GPUs all the while.
inline void drain(int timeout_s) {
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    auto const info = nlohmann::json::parse(slurm::read_nodes([](auto const& argv) { return run_command(argv); }));
    for (auto const& n : info["nodes"]) {
      std::string const used = n.value("gres_used", "");  // gpu:a100:N(IDX:...)
      auto const colon = used.rfind(':', used.find('('));
      int const in_use = std::atoi(used.c_str() + colon + 1);
      EXPECT_LE(in_use, 8) << n.value("name", "") << ": " << used;
    }
    bool busy = false;
    auto const q = squeue();
    for (auto const& j : q["jobs"]) {
      std::string const state = job_state(j);
      if ((state == "PENDING" && j.value("state_reason", "") != "JobHeldUser") || state == "RUNNING" ||
          state == "CONFIGURING" || state == "COMPLETING") {
        busy = true;
      }
    }
    if (!busy) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ADD_FAILURE() << "jobs still running after " << timeout_s << " s";
}

/// Waits until job `id` is in `state` (or the timeout); returns whether it got there.
inline bool wait_for(std::int64_t id, std::string const& state, int timeout_s) {
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (job_state(job_of(id)) == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

}  // namespace placer::testing_support
