#pragma once
// Trace-driven discrete-event cluster simulator: job arrivals, completions
// and scheduling rounds in simulated time, each round solved by the real
// solver (in process, or through the service with a custom solve function).
//
//   placer::solver s(placer::kernels::select_backend("cpu"));
//   placer::sim::sim_config cfg;  cfg.algo = placer::algorithm::placer;
//   auto res = placer::sim::run_simulation(w, cfg, placer::sim::in_process(s));
//   auto sum = placer::sim::summarize(res);          // sim_metrics.hpp
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
#include <string>
#include <vector>

namespace placer::sim {

struct sim_config {
  algorithm algo = algorithm::placer;
  std::int64_t interval = 60;   ///< seconds of simulated time between rounds
  bool on_event = false;        ///< also run a round right after arrivals/completions
  std::int64_t horizon = 0;     ///< stop at first submit + horizon; 0 = run to the end
  bool progress = false;        ///< progress bar on stderr
};

/// One round: the solver call. Must return a result for `in` (placements
/// index into in.pending) or throw.
using solve_fn = std::function<round_result(round_input const&)>;

/// A solve_fn around an in-process solver (kept by reference).
solve_fn in_process(solver& s);

struct job_record {
  std::string name;
  std::int64_t submit = 0;
  std::int64_t start = -1;  ///< -1: never started
  std::int64_t end = -1;    ///< -1: not finished (still running at the end)
  std::int64_t estimated = 0;
  std::int64_t duration = 0;   ///< actual run time
  std::int64_t gpu_milli = 0;  ///< total over replicas
  std::int32_t replicas = 1;
  std::int32_t completions = 0;  ///< times the engine completed it (must be 0 or 1)
};

/// State after all events and the round at `time`; holds until the next sample.
struct sample {
  std::int64_t time = 0;
  std::int64_t allocated_milli = 0;
  std::int64_t demand_milli = 0;   ///< GPU milli of running + pending jobs
  double gar = 0, gfr = 0, frag = 0;
  std::int32_t queue = 0, running = 0;
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
  std::int64_t placements = 0;      ///< jobs started
  std::int64_t rejected_partial = 0;  ///< placements dropped: fewer replicas than asked
  std::map<std::string, std::int64_t> unplaced;  ///< reason -> job-rounds
  std::vector<double> frag_after;   ///< per round, the solver's metrics.frag_ratio_after
  double wall_seconds = 0;          ///< whole run
  double wall_solver_seconds = 0;   ///< inside solve calls
};

/// Throws std::runtime_error when the solver breaks its contract (a
/// placement over capacity or for a job that is not pending) or on solver errors.
sim_result run_simulation(workload const& w, sim_config const& cfg, solve_fn const& solve);

/// Algorithm names, shared with the solver library.
using placer::algorithm_name;   // from placer/solver/model.hpp
using placer::parse_algorithm;

}  // namespace placer::sim
