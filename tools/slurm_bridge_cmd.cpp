// `placer slurm-bridge`: Placer as the placement engine of a live Slurm
// cluster (adapters/slurm/include/placer/slurm/bridge.hpp, docs/slurm.md).
#include "cli.hpp"
#include "commands.hpp"

#include <placer/service/client.hpp>
#include <placer/slurm/bridge.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace placer::tools {

namespace {

char const* const bridge_usage =
    "usage: placer slurm-bridge [--endpoint tcp://127.0.0.1:5555] [--partition P] [--interval S] [--once]\n"
    "                           [--tag placer] [--timeout-ms N] [--dry-run] [--no-stacking] [--preempt]\n"
    "                           [--slurm-api auto|libslurm|scontrol]\n"
    "                           [--server-key F --client-cert F]\n"
    "Each cycle: the held jobs whose comment starts with the tag (sbatch -H --comment=placer ...) and the\n"
    "nodes are read from squeue/sinfo --json (the nodes from scontrol show nodes --json from Slurm 23.11),\n"
    "solved as one round by the Placer service at --endpoint, and each placed job gets ReqNodeList and is\n"
    "released; the others stay held with the reason in their\n"
    "AdminComment. --once: one cycle, exit 0 if it ran (1 if Slurm or the service failed). --dry-run:\n"
    "print the decisions, change nothing. --no-stacking: jobs of one shape may take one equal node each\n"
    "(by default a round fills a node before it starts an empty one). --preempt: the bridge's running jobs\n"
    "are in the round too (priority -nice; preemptible when Slurm may requeue them) and a job Placer evicts\n"
    "is requeued and held (scontrol requeuehold) before the others are released. --slurm-api: how the jobs\n"
    "are changed: libslurm's RPCs from this process (about 6x faster a job than a scontrol process),\n"
    "scontrol, or auto (the default: libslurm when it loads and slurmctld answers its ping, else scontrol,\n"
    "saying why once).\n"
    "One line per job and a cycle summary on stdout.\n";

std::atomic<bool> stop{false};

/// Slurm's command-line tools, each run without a shell (run_command's limits).
std::string slurm_cli(std::vector<std::string> const& argv) { return slurm::run_command(argv); }

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// One cycle; false when Slurm or the service failed (said on stderr).
/// Rounds after the first go as deltas against the service's session
/// (Client::solve_incremental: the nodes that changed, the jobs that left
/// and arrived), each at the next epoch; the client resends in full by
/// itself when the service lost the session.
bool cycle(slurm::bridge_options const& opt, client& svc, slurm::job_changes& changes, bool dry_run,
           std::uint64_t& epoch) {
  auto const t0 = std::chrono::steady_clock::now();
  std::string squeue, sinfo;
  try {
    // The jobs and the nodes at once: two processes, each mostly waiting on slurmctld.
    auto jobs = std::async(std::launch::async, [] { return slurm_cli({"squeue", "--json"}); });
    static bool grouped = false;  // sinfo --json groups the nodes (23.11 on): ask scontrol from then on
    sinfo = slurm::read_nodes(slurm_cli, &grouped);
    squeue = jobs.get();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "slurm-bridge: reading Slurm: %s\n", e.what());
    return false;
  }
  double const read_ms = ms_since(t0);
  auto const t1 = std::chrono::steady_clock::now();
  slurm::snapshot snap;
  try {
    snap = slurm::build_round(squeue, sinfo, opt);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "slurm-bridge: %s\n", e.what());
    return false;
  }
  for (auto const& w : snap.warnings) std::fprintf(stderr, "slurm-bridge: %s\n", w.c_str());
  round_result r;
  double solve_ms = 0;
  if (!snap.round.pending.empty()) {
    try {
      auto const t2 = std::chrono::steady_clock::now();
      snap.round.state.epoch = ++epoch;
      auto reply = svc.solve_incremental(snap.round);
      solve_ms = ms_since(t2);
      if (reply.code != wire::ErrorCode::Ok) {
        std::fprintf(stderr, "slurm-bridge: the service refused the round: %s\n", reply.message.c_str());
        return false;
      }
      r = std::move(reply.result);  // its job indices are the snapshot's: the deltas keep the caller's order
    } catch (std::exception const& e) {
      std::fprintf(stderr, "slurm-bridge: the service: %s (nothing changed; next cycle)\n", e.what());
      return false;
    }
  }
  auto const actions = slurm::decide(snap, r);
  double const build_ms = ms_since(t1) - solve_ms;
  auto const t3 = std::chrono::steady_clock::now();
  std::vector<slurm::skipped_job> failed;
  if (!dry_run) failed = slurm::apply(actions, changes);
  double const apply_ms = ms_since(t3);
  int placed = 0, evicted = 0;
  for (auto const& a : actions) {
    std::string nodes;
    for (auto const& n : a.nodes) nodes += (nodes.empty() ? "" : ",") + n;
    placed += a.nodes.empty() ? 0 : 1;
    evicted += a.requeue ? 1 : 0;
    char const* what = a.requeue ? "requeued: " : a.nodes.empty() ? "held: " : "placed on ";
    std::printf("job %lld: %s%s\n", static_cast<long long>(a.job), what, a.nodes.empty() ? a.comment.c_str() : nodes.c_str());
  }
  for (auto const& f : failed) std::printf("job %lld: FAILED: %s\n", static_cast<long long>(f.job), f.why.c_str());
  std::printf("cycle: %zu nodes, %zu held jobs, %d placed, %d requeued, %zu failed, %d released awaiting start; "
              "slurm read %.1f ms, bridge %.1f ms, placer %.1f ms, %s %.1f ms%s\n",
              snap.round.state.nodes.size(), snap.job_ids.size() + snap.skipped.size(), placed, evicted, failed.size(),
              snap.reserved_jobs, read_ms, build_ms, solve_ms, changes.name(), apply_ms, dry_run ? " (dry run)" : "");
  std::fflush(stdout);
  return true;
}

/// --slurm-api: libslurm where it loads (auto says once why it does not).
std::unique_ptr<slurm::job_changes> job_changes_for(std::string const& api) {
  auto scontrol = [] { return std::make_unique<slurm::scontrol_changes>(slurm_cli); };
  if (api == "scontrol") return scontrol();
  if (api == "libslurm") return slurm::make_libslurm_changes();
  if (api != "auto") throw usage_error("--slurm-api must be auto, libslurm or scontrol, not '" + api + "'");
  std::string why;
  if (slurm::libslurm_usable(&why)) return slurm::make_libslurm_changes();
  std::fprintf(stderr, "slurm-bridge: changing jobs through scontrol: %s\n", why.c_str());
  return scontrol();
}

}  // namespace

int cmd_slurm_bridge(int argc, char** argv) {
  try {
    auto const a = parse_cli(argc, argv, 2,
                             {"endpoint", "partition", "interval", "tag", "timeout-ms", "server-key", "client-cert", "slurm-api"},
                             {"once", "dry-run", "no-stacking", "preempt", "help"}, "slurm-bridge");
    if (a.flags.count("help") != 0) {
      std::fputs(bridge_usage, stdout);
      return 0;
    }
    slurm::bridge_options opt;
    opt.partition = a.get("partition");
    opt.tag = a.get("tag", "placer");
    opt.stacking = a.flags.count("no-stacking") == 0;
    opt.preempt = a.flags.count("preempt") != 0;
    if (opt.tag.empty()) throw usage_error("--tag must not be empty (every held job would be the bridge's)");
    long long const interval = integer_option(a.opts, "interval", 10);
    if (interval < 1) throw usage_error("--interval must be at least 1 (seconds)");
    auto const changes = job_changes_for(a.get("slurm-api", "auto"));
    client svc(client_connection(a, 5000));
    std::uint64_t epoch = 0;
    bool const dry_run = a.flags.count("dry-run") != 0;
    if (a.flags.count("once") != 0) return cycle(opt, svc, *changes, dry_run, epoch) ? 0 : 1;
    std::signal(SIGINT, [](int) { stop = true; });
    std::signal(SIGTERM, [](int) { stop = true; });
    while (!stop) {
      (void)cycle(opt, svc, *changes, dry_run, epoch);
      for (long long k = 0; k < interval * 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  } catch (...) {
    return verb_failed("slurm-bridge", bridge_usage);
  }
}

}  // namespace placer::tools
