// `placer slurm-bridge`: Placer as the placement engine of a live Slurm
// cluster (adapters/slurm/include/placer/slurm/bridge.hpp, docs/slurm.md).
#include "cli.hpp"
#include "commands.hpp"

#include <placer/service/client.hpp>
#include <placer/slurm/bridge.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace placer::tools {

namespace {

char const* const bridge_usage =
    "usage: placer slurm-bridge [--endpoint tcp://127.0.0.1:5555[,tcp://...]] [--partition P] [--interval S] [--once]\n"
    "                           [--tag placer] [--timeout-ms N] [--retries N] [--fallback-after S]\n"
    "                           [--dry-run] [--no-stacking] [--preempt]\n"
    "                           [--slurm-api auto|libslurm|scontrol] [--order fifo|pack|strict]\n"
    "                           [--priority slurm|nice] [--age-weight N] [--age-max S]\n"
    "                           [--server-key F --client-cert F]\n"
    "Each cycle: the held jobs whose comment starts with the tag (sbatch -H --comment=placer ...) and the\n"
    "nodes are read from squeue/sinfo --json (the nodes from scontrol show nodes --json from Slurm 23.11),\n"
    "solved as one round by the Placer service at --endpoint, and each placed job gets ReqNodeList and is\n"
    "released; the others stay held with the reason in their\n"
    "AdminComment. --once: one cycle, exit 0 if it ran (1 if Slurm or the service failed). --dry-run:\n"
    "print the decisions, change nothing. --no-stacking: jobs of one shape may take one equal node each\n"
    "(by default a round fills a node before it starts an empty one). --preempt: the bridge's running jobs\n"
    "are in the round too (ranked as pending jobs are, with the age they have now; preemptible when Slurm\n"
    "may requeue them) and a job Placer evicts is requeued and held (scontrol requeuehold) before the\n"
    "others are released. --slurm-api: how the jobs are changed: libslurm's RPCs from this process\n"
    "(about 6x faster a job than a scontrol process), scontrol, or auto (the default: libslurm when it\n"
    "loads and slurmctld answers its ping, else scontrol, saying why once).\n"
    "--order: equal priorities in submission order (fifo, the default: a later job never\n"
    "takes what an earlier one needed to start), largest first (pack), or the queue stopped at its first job\n"
    "that cannot start (strict: the bridge's round is one queue); docs/policies.md, \"Queue order\".\n"
    "--priority: how jobs rank. slurm (the default): as Slurm's priority/multifactor would rank them (its\n"
    "weights, the partitions' PriorityJobFactor and PriorityTier, job size, TRES, and with slurmdbd QOS and\n"
    "fair share; nice), read again every PriorityCalcPeriod, and aged by PriorityWeightAge over\n"
    "PriorityMaxAge from the submit time; with another PriorityType, -nice. nice: -nice, Slurm not asked.\n"
    "--age-weight N (Slurm's priority points, 0: none) and --age-max S (seconds) override Slurm's aging;\n"
    "docs/slurm.md, \"Priorities\".\n"
    "--endpoint A,B: Placer replicas; a round lost at one (no reply within --timeout-ms, default 5000, or\n"
    "its connection refused or dropped) goes to the next as a full snapshot, --retries times at most (default:\n"
    "each other endpoint once). --fallback-after S: fail open: once every round sent for S seconds went\n"
    "unanswered, the held jobs the bridge owns are released to Slurm's own scheduler, each AdminComment saying\n"
    "so; when a Placer answers again the bridge places the jobs still held. Without it the jobs wait (closed).\n"
    "One line per job and a cycle summary on stdout.\n";

std::atomic<bool> stop{false};

/// Slurm's command-line tools, each run without a shell (run_command's limits).
std::string slurm_cli(std::vector<std::string> const& argv) { return slurm::run_command(argv); }

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// Slurm's ranking (slurm::read_priorities), read again every
/// PriorityCalcPeriod: Slurm recomputes its own priorities at that pace.
struct priority_reader {
  bool enabled = true;  ///< --priority slurm
  std::chrono::steady_clock::time_point next{};
  bool read = false;  ///< Slurm's configuration was read once
  std::string said;   ///< what was last said of it on stderr
};

/// One line of what the round's priorities are made of.
std::string describe(slurm::slurm_priorities const& p, aging const& age) {
  auto pts = [](double w) { return std::to_string(static_cast<long long>(w)); };
  std::string out;
  if (!p.multifactor) {
    out = "priority -nice";
  } else {
    std::set<std::int64_t> tiers;
    for (auto const& [name, part] : p.partitions) tiers.insert(part.tier);
    out = "Slurm's multifactor priority without its age: job size " + pts(p.weight_job_size) + ", partition " +
          pts(p.weight_partition) + " (" + std::to_string(p.partitions.size()) + " partitions, " +
          std::to_string(std::max<std::size_t>(1, tiers.size())) + (tiers.size() > 1 ? " tiers), QOS " : " tier), QOS ") +
          pts(p.weight_qos) + " (" + std::to_string(p.qos.size()) + " QOS), fair share " +
          pts(p.slurmdbd ? p.weight_fairshare : 0) + " (" + std::to_string(p.fairshare.size()) + " users), TRES " +
          std::to_string(p.weight_tres.size()) + ", nice";
  }
  out += age.weight > 0 ? "; aged " + std::to_string(age.weight) + " over " + std::to_string(age.max_age_s) + " s"
                        : "; no aging";
  for (auto const& n : p.notes) out += "; " + n;
  return out;
}

/// Whether a Placer answers the bridge's rounds, and --fallback-after.
struct placer_contact {
  long long fallback_after_s = -1;  ///< -1: closed (jobs wait); else fail open after this long unanswered
  std::optional<std::chrono::steady_clock::time_point> failing_since;  ///< the first unanswered round since an answer
  bool fallen_open = false;  ///< said once on stderr per outage
};

/// One cycle; false when Slurm or the service failed (said on stderr).
/// Rounds after the first go as deltas against the service's session
/// (Client::solve_incremental: the nodes that changed, the jobs that left
/// and arrived), each at the next epoch; the client resends in full by
/// itself when the service lost the session.
bool cycle(slurm::bridge_options& opt, priority_reader& prio, client& svc, slurm::job_changes& changes, bool dry_run,
           std::uint64_t& epoch, placer_contact& contact) {
  auto const t0 = std::chrono::steady_clock::now();
  std::string squeue, sinfo;
  bool const read_prio = prio.enabled && t0 >= prio.next;
  try {
    // The jobs, the nodes (and when due the priorities) at once: processes
    // mostly waiting on slurmctld. read_priorities never throws.
    auto jobs = std::async(std::launch::async, [] { return slurm_cli({"squeue", "--json"}); });
    std::future<slurm::slurm_priorities> ranking;
    if (read_prio) ranking = std::async(std::launch::async, [] { return slurm::read_priorities(slurm_cli); });
    static bool grouped = false;  // sinfo --json groups the nodes (23.11 on): ask scontrol from then on
    sinfo = slurm::read_nodes(slurm_cli, &grouped);
    squeue = jobs.get();
    if (read_prio) {
      auto fresh = ranking.get();
      // Unread (Slurm did not answer): asked again next cycle, and the ranking read before stands.
      prio.next = fresh.unread ? t0 : t0 + std::chrono::seconds(std::clamp<std::int64_t>(fresh.calc_period_s, 10, 3600));
      if (fresh.unread && prio.read) {
        for (auto const& n : fresh.notes) std::fprintf(stderr, "slurm-bridge: priorities kept: %s\n", n.c_str());
      } else {
        prio.read = prio.read || !fresh.unread;
        opt.priorities = std::move(fresh);
      }
    }
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
  if (auto const said = describe(opt.priorities, snap.round.pol.age); said != prio.said) {
    std::fprintf(stderr, "slurm-bridge: priorities: %s\n", said.c_str());
    prio.said = said;
  }
  round_result r;
  double solve_ms = 0;
  std::string fell_over;  // the endpoint a lost round went to, for the summary
  std::vector<slurm::action> actions;
  bool answered = true;
  if (!snap.round.pending.empty()) {
    auto const t2 = std::chrono::steady_clock::now();
    auto const failovers = svc.failovers();
    try {
      snap.round.state.epoch = ++epoch;
      auto reply = svc.solve_incremental(snap.round);
      // A round refused for one job's sake goes again without it (it stays
      // held, saying why), at most five times a cycle, as the Kubernetes
      // scheduler does: one job never holds up the rest.
      for (int dropped = 0; reply.code == wire::ErrorCode::InvalidArgument && dropped < 5 &&
                            slurm::drop_refused(snap, reply.message);
           ++dropped) {
        std::fprintf(stderr, "slurm-bridge: the service refused job %s: %s\n",
                     snap.skipped.back().job.str().c_str(), reply.message.c_str());
        if (snap.round.pending.empty()) {
          reply = {};
          break;
        }
        snap.round.state.epoch = ++epoch;
        reply = svc.solve_incremental(snap.round);
      }
      // A round past Placer's constraint bound goes again with its first
      // half of jobs; the rest wait held for a later cycle.
      while (reply.code == wire::ErrorCode::ResourceExhausted &&
             reply.message.find("distinct constraint sets") != std::string::npos && slurm::halve(snap)) {
        std::fprintf(stderr, "slurm-bridge: %s: the first %zu jobs this cycle, the rest later\n", reply.message.c_str(),
                     snap.round.pending.size());
        snap.round.state.epoch = ++epoch;
        reply = svc.solve_incremental(snap.round);
      }
      solve_ms = ms_since(t2);
      if (svc.failovers() != failovers) fell_over = svc.current_endpoint();
      if (contact.failing_since) {
        std::fprintf(stderr, "slurm-bridge: %s answers again: placing the jobs still held\n",
                     svc.current_endpoint().c_str());
      }
      contact.failing_since.reset();
      contact.fallen_open = false;
      if (reply.code != wire::ErrorCode::Ok) {
        std::fprintf(stderr, "slurm-bridge: the service refused the round: %s\n", reply.message.c_str());
        return false;
      }
      r = std::move(reply.result);  // its job indices are the snapshot's: the deltas keep the caller's order
    } catch (std::exception const& e) {
      solve_ms = ms_since(t2);
      answered = false;
      if (!contact.failing_since) contact.failing_since = t2;
      auto const silent_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *contact.failing_since).count();
      bool const open = contact.fallback_after_s >= 0 && silent_s >= static_cast<double>(contact.fallback_after_s);
      std::fprintf(stderr, "slurm-bridge: the service: %s (%s)\n", e.what(),
                   open ? "failing open: the held jobs go to Slurm's scheduler"
                        : contact.fallback_after_s >= 0 ? "nothing changed; next cycle, failing open after --fallback-after"
                                                        : "nothing changed; next cycle");
      if (!open) return false;
      if (!contact.fallen_open) {
        std::fprintf(stderr, "slurm-bridge: no Placer answered for %.0f s: releasing held jobs to Slurm's scheduler until one does\n",
                     silent_s);
        contact.fallen_open = true;
      }
      char why[160];
      std::snprintf(why, sizeof why, "no Placer answered for %.0f s (--fallback-after %lld)", silent_s,
                    contact.fallback_after_s);
      actions = slurm::release_to_slurm(snap, why);
    }
  }
  if (answered) actions = slurm::decide(snap, r);
  double const build_ms = ms_since(t1) - solve_ms;
  auto const t3 = std::chrono::steady_clock::now();
  std::vector<slurm::skipped_job> failed;
  if (!dry_run) failed = slurm::apply(actions, changes);
  double const apply_ms = ms_since(t3);
  int placed = 0, evicted = 0, released = 0;
  for (auto const& a : actions) {
    std::string nodes;
    for (auto const& n : a.nodes) nodes += (nodes.empty() ? "" : ",") + n;
    placed += a.nodes.empty() ? 0 : 1;
    evicted += a.requeue ? 1 : 0;
    released += a.to_slurm ? 1 : 0;
    char const* what = a.requeue ? "requeued: " : a.to_slurm ? "to Slurm: " : a.nodes.empty() ? "held: " : "placed on ";
    std::printf("job %s: %s%s\n", a.job.str().c_str(), what, a.nodes.empty() ? a.comment.c_str() : nodes.c_str());
  }
  for (auto const& f : failed) std::printf("job %s: FAILED: %s\n", f.job.str().c_str(), f.why.c_str());
  std::printf("cycle: %zu nodes, %zu held jobs, %d placed, %d requeued, %d to Slurm, %zu failed, %d released awaiting "
              "start; slurm read %.1f ms, bridge %.1f ms, placer %.1f ms, %s %.1f ms%s%s%s\n",
              snap.round.state.nodes.size(), snap.job_ids.size() + snap.skipped.size(), placed, evicted, released,
              failed.size(), snap.reserved_jobs, read_ms, build_ms, solve_ms, changes.name(), apply_ms,
              fell_over.empty() ? "" : "; failed over to ", fell_over.c_str(), dry_run ? " (dry run)" : "");
  std::fflush(stdout);
  return answered;
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
                             {"endpoint", "partition", "interval", "tag", "timeout-ms", "server-key", "client-cert", "slurm-api",
                              "order", "priority", "age-weight", "age-max", "retries", "fallback-after"},
                             {"once", "dry-run", "no-stacking", "preempt", "help"}, "slurm-bridge");
    if (a.flags.count("help") != 0) {
      std::fputs(bridge_usage, stdout);
      return 0;
    }
    slurm::bridge_options opt;
    opt.partition = a.get("partition");
    opt.tag = a.get("tag", "placer");
    opt.stacking = a.flags.count("no-stacking") == 0;
    try {
      opt.order = parse_queue_order(a.get("order", "fifo"));
    } catch (logic_error const& e) {
      throw usage_error(e.what());
    }
    opt.preempt = a.flags.count("preempt") != 0;
    priority_reader prio;
    std::string const ranking = a.get("priority", "slurm");
    if (ranking != "slurm" && ranking != "nice") throw usage_error("--priority must be slurm or nice, not '" + ranking + "'");
    prio.enabled = ranking == "slurm";
    opt.age_weight = integer_option(a.opts, "age-weight", -1);
    opt.age_max_s = integer_option(a.opts, "age-max", -1);
    if (a.has("age-weight") && (opt.age_weight < 0 || opt.age_weight > 4294967295LL)) {
      throw usage_error("--age-weight must be 0 to 4294967295 (Slurm's priority points)");
    }
    if (a.has("age-max") && opt.age_max_s < 1) throw usage_error("--age-max must be at least 1 (seconds)");
    if (opt.tag.empty()) throw usage_error("--tag must not be empty (every held job would be the bridge's)");
    long long const interval = integer_option(a.opts, "interval", 10);
    if (interval < 1) throw usage_error("--interval must be at least 1 (seconds)");
    placer_contact contact;
    if (a.has("fallback-after")) contact.fallback_after_s = a.integer("fallback-after", 0);
    auto const changes = job_changes_for(a.get("slurm-api", "auto"));
    // A round is lost at once when its connection is refused or drops (a
    // replica killed), or after --timeout-ms without an answer (one that
    // hangs), then goes to the next replica.
    client_options co = client_connection(a, 5000);
    co.retries = static_cast<int>(a.integer("retries", 0));
    co.retry_budget_ms = std::max(co.timeout_ms * 4, 5000);
    client svc(co);
    std::uint64_t epoch = 0;
    bool const dry_run = a.flags.count("dry-run") != 0;
    if (a.flags.count("once") != 0) return cycle(opt, prio, svc, *changes, dry_run, epoch, contact) ? 0 : 1;
    std::signal(SIGINT, [](int) { stop = true; });
    std::signal(SIGTERM, [](int) { stop = true; });
    while (!stop) {
      (void)cycle(opt, prio, svc, *changes, dry_run, epoch, contact);
      for (long long k = 0; k < interval * 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  } catch (...) {
    return verb_failed("slurm-bridge", bridge_usage);
  }
}

}  // namespace placer::tools
