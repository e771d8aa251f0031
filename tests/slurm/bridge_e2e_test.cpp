// The Slurm bridge against a live local Slurm (scripts/slurm-cluster.sh):
// 16 nodes of 8 GPUs, two GPU models, two racks; a job mix with single-GPU
// jobs, whole-node jobs, gangs, constraints and one job that fits nowhere.
// Every job runs on exactly the nodes Placer chose, Slurm never shows a
// node over its GPUs, the unplaceable job stays held with its reason, and
// neither a dead service nor a crash between update and release loses or
// doubles a job. Skipped, saying so, where Slurm is not installed or the
// test is not root (slurmd runs jobs as their users).
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

#include "../support/run_placer.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

namespace fs = std::filesystem;
using slurm::run_command;

fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

bool have(char const* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }

/// A block of `count` TCP ports, each free to bind now, below the kernel's
/// ephemeral range: other tests' sockets (ZeroMQ's wildcard binds, every
/// client connection) take ports from that range, and a slurmd whose port
/// is taken dies, leaving its node down. `salt` picks another block.
int free_port_block(int count, int salt) {
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
bool live_slurm_missing(std::string& why) {
  if (!have("slurmctld") || !have("munged") || !have("sbatch")) {
    why = "Slurm is not installed (scripts/install-deps.sh installs it)";
  } else if (getuid() != 0) {
    why = "needs root: slurmd starts jobs as their users";
  } else {
    std::string out;
    if (testing_support::run_placer("slurm-bridge --help", out) < 0) why = "placer binary not built beside the test";
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
                            "--dir", dir_.string(), "--port", std::to_string(port_)},
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

  /// sbatch -H --comment=placer; the job prints its nodes' names. `held`
  /// false: instead --begin in an hour, not the bridge's (--comment=twin),
  /// a job Slurm gives its priority without starting it.
  std::int64_t submit(std::string const& spec, int seconds = 3, bool held = true) {
    std::vector<std::string> argv{"sbatch", "--parsable", held ? "-H" : "--begin=now+3600",
                                  held ? "--comment=placer" : "--comment=twin", "-o", (dir_ / "job-%j.out").string()};
    std::istringstream is(spec);
    for (std::string w; is >> w;) argv.push_back(w);
    argv.push_back("--wrap=srun bash -c 'echo $SLURMD_NODENAME'; sleep " + std::to_string(seconds));
    return std::stoll(run_command(argv));
  }
  /// The distinct node names job `id` printed.
  std::set<std::string> ran_on(std::int64_t id) const {
    std::ifstream f(dir_ / ("job-" + std::to_string(id) + ".out"));
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

/// "job N: placed on a,b" lines of the bridge's output.
std::map<std::int64_t, std::set<std::string>> placed_lines(std::string const& out) {
  std::map<std::int64_t, std::set<std::string>> m;
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) {
    auto const at = line.find(": placed on ");
    if (line.rfind("job ", 0) != 0 || at == std::string::npos) continue;
    std::set<std::string> nodes;
    std::istringstream ns(line.substr(at + 12));
    for (std::string n; std::getline(ns, n, ',');) nodes.insert(n);
    m[std::stoll(line.substr(4, at - 4))] = nodes;
  }
  return m;
}

// (--states=all: from 23.11 squeue --json leaves ended jobs out by default.)
nlohmann::json squeue() { return nlohmann::json::parse(run_command({"squeue", "--json", "--states=all"})); }

/// A job's state: a string up to Slurm 23.02, a list (state, then flags) after.
std::string job_state(nlohmann::json const& j) {
  auto const it = j.find("job_state");
  if (it == j.end()) return {};
  if (it->is_array()) return it->empty() ? std::string() : (*it)[0].get<std::string>();
  return it->get<std::string>();
}

// (A json kept in a local: a range-for over squeue()["jobs"] would read
// a destroyed temporary.)
nlohmann::json job_of(std::int64_t id) {
  auto const q = squeue();
  for (auto const& j : q["jobs"]) {
    if (j.value("job_id", -1) == id) return j;
  }
  return {};
}

/// Waits until no job but the held ones is pending or running, checking
/// every node's GPUs in use against its GPUs all the while.
void drain(int timeout_s) {
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

TEST(SlurmBridgeLive, JobsRunWherePlacerPutsThem) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(16);
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();

  std::vector<std::int64_t> jobs;
  for (int k = 0; k < 6; ++k) jobs.push_back(cluster.submit("-N1 --gres=gpu:1"));
  for (int k = 0; k < 3; ++k) jobs.push_back(cluster.submit("-N1 --gres=gpu:8"));
  jobs.push_back(cluster.submit("-N2 --gres=gpu:8"));                          // a gang, one rack if it can
  jobs.push_back(cluster.submit("-N2 --gres=gpu:8 --constraint=h100"));
  jobs.push_back(cluster.submit("-N1 --gres=gpu:2 --constraint=rack2&a100"));  // no such node: waits
  jobs.push_back(cluster.submit("-N1 --gres=gpu:4 --constraint=rack1"));
  jobs.push_back(cluster.submit("-p infer -N1 --gres=gpu:1"));                // n15 and n16 are the infer partition
  std::int64_t const pair = cluster.submit("-N2 --gres=gpu:2");  // two nodes, though one could hold both
  std::int64_t const never = cluster.submit("-N1 --gres=gpu:16");

  // The default changes jobs through libslurm where it loads (with
  // libslurm-dev at build time); the crash below goes through scontrol.
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  std::string why;
  bool const libslurm = slurm::libslurm_usable(&why);
  EXPECT_NE(out.find(libslurm ? ", libslurm " : ", scontrol "), std::string::npos) << why << "\n" << out;
  auto const placed = placed_lines(out);
  EXPECT_GE(placed.size(), 13U) << out;
  ASSERT_EQ(placed.count(pair), 1U) << out;
  EXPECT_EQ(std::set<std::string>(placed.at(pair).begin(), placed.at(pair).end()).size(), 2U) << out;
  EXPECT_EQ(placed.count(never), 0U) << out;
  drain(60);
  for (auto const& [id, nodes] : placed) EXPECT_EQ(cluster.ran_on(id), nodes) << "job " << id;
  // The gangs ran within one rack (n1-n8 rack1, n9-n16 rack2).
  for (auto id : {jobs[9], jobs[10]}) {
    auto const& nodes = placed.at(id);
    std::set<bool> racks;
    for (auto const& n : nodes) racks.insert(std::stoi(n.substr(1)) <= 8);
    EXPECT_EQ(racks.size(), 1U) << "job " << id;
  }
  // h100 nodes are n9-n16; the rack1 job ran on n1-n8.
  for (auto const& n : placed.at(jobs[10])) EXPECT_GE(std::stoi(n.substr(1)), 9) << n;
  for (auto const& n : placed.at(jobs[12])) EXPECT_LE(std::stoi(n.substr(1)), 8) << n;
  // Every job stayed in its partition: infer is n15-n16, train the rest.
  for (auto const& [id, nodes] : placed) {
    for (auto const& n : nodes) EXPECT_EQ(std::stoi(n.substr(1)) >= 15, id == jobs[13]) << "job " << id << " on " << n;
  }
  // The job that fits nowhere is held, saying why.
  auto const held = job_of(never);
  EXPECT_EQ(held.value("state_reason", ""), "JobHeldUser");
  EXPECT_NE(held.value("admin_comment", "").find("Insufficient nvidia.com/gpu"), std::string::npos) << held.dump();
  // 16 GPUs on nodes of 8: not now, not ever (as Slurm's PartitionNodeLimit says of -N65).
  EXPECT_NE(held.value("admin_comment", "").find("It can never run on this cluster"), std::string::npos) << held.dump();
  EXPECT_NE(job_of(jobs[11]).value("admin_comment", "").find("placer:"), std::string::npos);

  // The service down: the cycle fails, and nothing changes.
  std::int64_t const late = cluster.submit("-N1 --gres=gpu:1", 1);
  EXPECT_EQ(testing_support::run_placer("slurm-bridge --once --timeout-ms 300 --endpoint tcp://127.0.0.1:1", out), 1) << out;
  EXPECT_EQ(job_of(late).value("state_reason", ""), "JobHeldUser");
  EXPECT_EQ(job_of(late).value("admin_comment", ""), "");
  // A crash between update and release: the job has its nodes but is
  // still held; the next cycle places it once.
  run_command({"scontrol", "update", "JobId=" + std::to_string(late), "ReqNodeList=n14"});
  ASSERT_EQ(testing_support::run_placer(bridge + " --slurm-api scontrol", out), 0) << out;
  EXPECT_NE(out.find(", scontrol "), std::string::npos) << out;
  auto const again = placed_lines(out);
  ASSERT_EQ(again.count(late), 1U) << out;
  drain(30);
  EXPECT_EQ(cluster.ran_on(late), again.at(late));
  EXPECT_EQ(job_state(job_of(late)), "COMPLETED");
}

/// Waits until job `id` is in `state` (or the timeout); returns whether it got there.
bool wait_for(std::int64_t id, std::string const& state, int timeout_s) {
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (job_state(job_of(id)) == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

// --preempt: two nice-100 jobs fill the train partition's two nodes; an
// 8-GPU job at nice 0 waits without the flag, and with it one of them is
// requeued and held (the bridge's again, saying why) and the new job runs
// on the node it freed.
TEST(SlurmBridgeLive, EvictionsAreRequeuesUnderAFlag) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(4);  // n1, n2 train (a100); n3, n4 infer
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  std::int64_t const low1 = cluster.submit("-N1 --gres=gpu:8 --nice=100", 120);
  std::int64_t const low2 = cluster.submit("-N1 --gres=gpu:8 --nice=100", 120);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  ASSERT_EQ(placed_lines(out).size(), 2U) << out;
  ASSERT_TRUE(wait_for(low1, "RUNNING", 30) && wait_for(low2, "RUNNING", 30));
  std::int64_t const high = cluster.submit("-N1 --gres=gpu:8", 2);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  EXPECT_EQ(placed_lines(out).count(high), 0U) << out;
  EXPECT_EQ(out.find(": requeued"), std::string::npos) << out;
  ASSERT_EQ(testing_support::run_placer(bridge + " --preempt", out), 0) << out;
  auto const placed = placed_lines(out);
  ASSERT_EQ(placed.count(high), 1U) << out;
  std::int64_t const evicted =
      out.find("job " + std::to_string(low1) + ": requeued") != std::string::npos ? low1 : low2;
  EXPECT_NE(out.find("job " + std::to_string(evicted) + ": requeued"), std::string::npos) << out;
  ASSERT_TRUE(wait_for(high, "COMPLETED", 60)) << job_of(high).dump();
  EXPECT_EQ(cluster.ran_on(high), placed.at(high));
  EXPECT_EQ(cluster.ran_on(evicted).count(*placed.at(high).begin()), 1U) << "it ran where the new job went";
  auto const again = job_of(evicted);
  EXPECT_EQ(job_state(again), "PENDING");
  EXPECT_EQ(again.value("state_reason", ""), "JobHeldUser");
  EXPECT_NE(again.value("admin_comment", "").find("evicted"), std::string::npos) << again.dump();
  EXPECT_EQ(job_state(job_of(low1 == evicted ? low2 : low1)), "RUNNING");
}

// The bridge ranks its held jobs as Slurm would (docs/slurm.md,
// "Priorities"): on a cluster with priority/multifactor, each held job's
// priority in the bridge's round is the one Slurm gives the same job
// submitted with --begin in an hour (not held: Slurm computes it, with no
// age yet). And it decides: of two 8-GPU jobs for the train partition's
// one node, the later one, larger in CPUs (Slurm's job-size factor), goes
// first; ranked by nice alone (--priority nice) the earlier one would.
TEST(SlurmBridgeLive, RoundsCarrySlurmsRanking) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  // n1 train; n2, n3 infer.
  local_slurm cluster(3, {"PriorityType=priority/multifactor", "PriorityWeightJobSize=500",
                          "PriorityWeightPartition=2000", "PriorityWeightAge=1000", "PriorityMaxAge=1-0"});
  run_command({"scontrol", "update", "PartitionName=infer", "PriorityJobFactor=10"});
  auto const slurm_cli = [](std::vector<std::string> const& argv) { return run_command(argv); };
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;  // held, twin
  for (std::string const spec : {"-N1 --gres=gpu:1", "-p infer -N2 --gres=gpu:2 -c 4", "-p infer --gres=gpu:1 --nice=30",
                                 "-p infer,train --gres=gpu:1 --nice=7", "--gres=gpu:1 --nice=-50 -c 16"}) {
    pairs.emplace_back(cluster.submit(spec), cluster.submit(spec, 3, false));
  }
  slurm::bridge_options opt;
  opt.priorities = slurm::read_priorities(slurm_cli);
  std::string notes;
  for (auto const& n : opt.priorities.notes) notes += n + "; ";
  ASSERT_TRUE(opt.priorities.multifactor) << notes;
  EXPECT_EQ(opt.priorities.partitions.at("infer").job_factor, 10) << notes;
  auto const snap = slurm::build_round(run_command({"squeue", "--json"}), slurm::read_nodes(slurm_cli), opt);
  std::map<std::int64_t, std::int32_t> ours;
  for (std::size_t k = 0; k < snap.job_ids.size(); ++k) ours[snap.job_ids[k]] = snap.round.pending[k].priority;
  std::set<std::int64_t> ranks;
  for (auto const& [held, twin] : pairs) {
    auto const slurms = job_of(twin).value("priority", -1);
    ASSERT_EQ(ours.count(held), 1U) << held;
    EXPECT_EQ(ours.at(held), slurms) << "job " << held << " (twin " << twin << ")";
    EXPECT_EQ(job_of(held).value("priority", -1), 0) << "a held job's Slurm priority";
    ranks.insert(slurms);
  }
  EXPECT_EQ(ranks.size(), pairs.size()) << "the jobs rank apart";
  // Without slurmdbd Slurm leaves out the age, and so does the round.
  EXPECT_EQ(snap.round.pol.age.weight, 0) << notes;
  std::vector<std::string> cancel{"scancel"};
  for (auto const& [held, twin] : pairs) {
    cancel.push_back(std::to_string(held));
    cancel.push_back(std::to_string(twin));
  }
  run_command(cancel);

  std::int64_t const first = cluster.submit("-N1 --gres=gpu:8 -c 1");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a later submit time (seconds), not a tie
  std::int64_t const larger = cluster.submit("-N1 --gres=gpu:8 -c 32");
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  std::string out;
  ASSERT_EQ(testing_support::run_placer(bridge + " --dry-run --priority nice", out), 0) << out;
  EXPECT_EQ(placed_lines(out).count(first), 1U) << out;
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  auto const placed = placed_lines(out);
  EXPECT_EQ(placed.count(larger), 1U) << out;
  EXPECT_EQ(placed.count(first), 0U) << out;
  EXPECT_NE(out.find("priorities: Slurm's multifactor"), std::string::npos) << out;
  ASSERT_TRUE(wait_for(larger, "COMPLETED", 60)) << job_of(larger).dump();
  EXPECT_EQ(cluster.ran_on(larger), (std::set<std::string>{"n1"}));
}

}  // namespace
}  // namespace placer
