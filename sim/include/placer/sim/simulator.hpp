#pragma once
// Trace-driven discrete-event cluster simulator: job arrivals, completions
// and scheduling rounds in simulated time, each round solved by the real
// solver (in process, or through the service with a custom solve function).
//
//   placer::solver s(placer::kernels::select_backend("cpu"));
//   placer::sim::sim_config cfg;  cfg.algo = placer::algorithm::placer;
//   cfg.queue.preemption = true;  cfg.checkpoint_interval = 1800;
//   auto res = placer::sim::run_simulation(w, cfg, placer::sim::in_process(s));
//   auto sum = placer::sim::summarize(res);          // sim_metrics.hpp
//
// The engine applies everything a round returns: placements (elastic ones
// with min..max replicas), preemptions (the job goes back to the queue and
// redoes the work since its last checkpoint), scale-outs and scale-ins of
// running elastic jobs (the remaining run time rescales with the worker
// count), reclaimed loaned nodes and reservations (counted). Run times
// stretch by the network model's slowdown for spread, communication-heavy
// placements (placer/solver/network_model.hpp). docs/simulator.md has every
// convention.
//
// Results depend only on the workload and the configuration (and the
// solver's deterministic output), never on wall-clock time; wall-clock
// figures are reported separately (sim_result::wall_*).

#include <placer/sim/sim_workloads.hpp>
#include <placer/solver/model.hpp>
#include <placer/solver/solver.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace placer::sim {

struct sim_config {
  algorithm algo = algorithm::placer;
  /// Name of the run in tables and file names; "" = algorithm_name(algo).
  std::string label;
  /// The cross-round policies, sent in every round as in.pol.queue. The
  /// default (all off but loaning) matches placer::queue_policy.
  queue_policy queue;
  /// How each round orders a priority level's jobs, and their aging
  /// (in.pol.order, in.pol.age).
  queue_order order = queue_order::fifo;
  aging age;
  /// Running jobs checkpoint every this many seconds of a run (counted from
  /// each (re)start); a preempted job redoes the work since its last
  /// checkpoint. 0 = never (a preemption loses the whole run since the
  /// (re)start). A resize (scale-in/out) always checkpoints.
  std::int64_t checkpoint_interval = 1800;
  /// Stretch run times of spread, network-sensitive placements by
  /// slowdown_factor(network_sensitivity, placement_spread(...)).
  bool network_slowdown = true;
  /// The solver's packing repair (in.pol.repack); false only to measure
  /// what it does (--no-repack).
  bool repack = true;
  std::int64_t interval = 60;   ///< seconds of simulated time between rounds
  bool on_event = false;        ///< also run a round right after arrivals/completions
  std::int64_t horizon = 0;     ///< stop at first submit + horizon; 0 = run to the end
  bool progress = false;        ///< progress bar on stderr
  /// The queue tree sent in every round (round_input::queues); the jobs'
  /// job::queue name their queues. Empty: job::queue is not read. Each
  /// sample records every queue's usage (sample::queue_milli).
  std::vector<queue_spec> queues;
  /// false: the queues are only sampled, the rounds go without them (a
  /// baseline that does not know the tenants, measured the same way).
  bool queues_in_rounds = true;
};

/// One round: the solver call. Must return a result for `in` (placements
/// index into in.pending, preemptions and scale changes name jobs of
/// in.running) or throw.
using solve_fn = std::function<round_result(round_input const&)>;

/// A solve_fn around an in-process solver (kept by reference). The function
/// owns one queue_memory (delay-scheduling timers and deferral times) that
/// every call passes to solver::solve, so make one solve_fn per run.
solve_fn in_process(solver& s);

struct job_record {
  std::string name;
  job_kind kind = job_kind::training;
  std::int32_t priority = 0;
  std::int64_t submit = 0;
  std::int64_t start = -1;  ///< first start; -1: never started
  std::int64_t end = -1;    ///< -1: not finished (still running or pending at the end)
  std::int64_t estimated = 0;
  std::int64_t duration = 0;   ///< work: run time at the nominal replica count, no slowdown (trace value)
  std::int64_t gpu_milli = 0;  ///< nominal total over replicas (job.replicas)
  std::int32_t replicas = 1;   ///< nominal
  std::int32_t completions = 0;  ///< times the engine completed it (must be 0 or 1)
  std::int32_t starts = 0;       ///< 1 + restarts after preemptions
  std::int32_t preemptions = 0;
  std::int32_t scale_outs = 0, scale_ins = 0;
  std::int64_t run_seconds = 0;          ///< wall time spent running (all runs), up to the end of the window
  std::int64_t lost_seconds = 0;         ///< run time thrown away by preemptions (since the last checkpoint)
  std::int64_t lost_gpu_milli_seconds = 0;
  std::int64_t gpu_milli_seconds = 0;    ///< GPU time held (all runs), up to the end of the window
  double slowdown = 1.0;      ///< run-time-weighted mean slowdown factor of its placements (1 if it never ran)
  double slowdown_max = 1.0;  ///< largest factor of any of its placements
  std::int32_t max_nodes = 0; ///< most distinct nodes it ever spanned
};

/// State after all events and the round at `time`; holds until the next sample.
struct sample {
  std::int64_t time = 0;
  std::int64_t allocated_milli = 0;
  std::int64_t demand_milli = 0;   ///< GPU milli of running (as placed) + pending (nominal) jobs
  std::int64_t inference_milli = 0;  ///< allocated to inference jobs
  std::int64_t loaned_milli = 0;     ///< allocated to training/batch jobs on inference-pool nodes
  double gar = 0, gfr = 0, frag = 0;
  std::int32_t queue = 0, running = 0;
  /// Per sim_config::queues entry (empty without queues): GPU milli held by
  /// the jobs that name it, and their demand (held + pending nominal).
  std::vector<std::int64_t> queue_milli, queue_demand_milli;
};

struct sim_result {
  std::string workload;
  std::string description;
  sim_config config;
  std::int64_t capacity_milli = 0;  ///< schedulable GPU milli
  std::int32_t gpu_nodes = 0;
  std::vector<job_record> jobs;
  std::vector<sample> series;
  std::int64_t t_begin = 0, t_end = 0;
  std::int64_t rounds = 0;          ///< solver calls
  std::int64_t placements = 0;      ///< job starts (restarts after a preemption included)
  std::int64_t rejected_partial = 0;  ///< placements dropped: replica count outside what the job allows
  std::map<std::string, std::int64_t> unplaced;  ///< reason -> job-rounds
  std::int64_t preemptions = 0;               ///< running jobs stopped by the solver
  std::map<std::string, std::int64_t> preemptions_by_reason;  ///< "priority", "reclaim", "network"
  std::int64_t lost_gpu_milli_seconds = 0;    ///< sum over preemptions of GPUs x time since the last checkpoint
  std::int64_t reclaimed_nodes = 0;           ///< loaned nodes taken back (sum over rounds)
  std::int64_t scale_outs = 0, scale_ins = 0; ///< resize events applied
  std::int64_t reservations = 0;              ///< sum over rounds of reservations held
  std::vector<double> frag_after;   ///< per round, the solver's metrics.frag_ratio_after
  double wall_seconds = 0;          ///< whole run
  double wall_solver_seconds = 0;   ///< inside solve calls

  /// Until when series[k] holds: the next sample's time, the last one's
  /// the window's end.
  [[nodiscard]] std::int64_t sample_end(std::size_t k) const {
    return k + 1 < series.size() ? series[k + 1].time : t_end;
  }
};

/// Throws std::runtime_error when the solver breaks its contract (a
/// placement over capacity, for a job that is not pending or with a replica
/// count the job does not allow; a preemption or scale change naming a job
/// that is not running, or removing replicas it does not hold) or on solver
/// errors.
sim_result run_simulation(workload const& w, sim_config const& cfg, solve_fn const& solve);

/// Algorithm names, shared with the solver library.
using placer::algorithm_name;   // from placer/solver/model.hpp
using placer::parse_algorithm;

/// "off", "easy", "conservative"; throws std::invalid_argument listing them.
backfill_mode parse_backfill(std::string const& name);
char const* backfill_name(backfill_mode m);

/// The policy options shared by `placer simulate` and `placer experiment
/// policies`, by their command-line names: valued "backfill" (off|easy|
/// conservative), "checkpoint-interval" (seconds, >= 0), "order" (fifo|
/// pack|strict), "age-weight" (>= 0) and "age-max" (seconds, >= 1); flags
/// "age-cross-priority",
/// "preemption", "no-loaning", "elastic", "delay-scheduling",
/// "network-preemption", "no-slowdown", "no-repack". Sets cfg.queue / cfg fields for the
/// ones present; throws std::invalid_argument for a bad value or for
/// network-preemption without delay-scheduling (it acts on deferred gangs).
void apply_policy_options(std::map<std::string, std::string> const& opts, std::set<std::string> const& flags,
                          sim_config& cfg);
inline std::set<std::string> const& policy_valued_options() {
  static std::set<std::string> const s = {"backfill", "checkpoint-interval", "preempt-max-lost", "order", "age-weight",
                                          "age-max"};
  return s;
}
inline std::set<std::string> const& policy_flag_options() {
  static std::set<std::string> const s = {"preemption",       "no-loaning",         "elastic",
                                          "delay-scheduling", "network-preemption", "no-slowdown",
                                          "age-cross-priority", "no-repack"};
  return s;
}

/// Short description of the cross-round policies on, e.g.
/// "backfill=easy+preemption+loaning" ("none" when all are off).
std::string policy_label(queue_policy const& q);

}  // namespace placer::sim
