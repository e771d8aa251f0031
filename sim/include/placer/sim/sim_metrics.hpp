#pragma once
// Metrics of a simulation run (definitions: docs/metrics.md, "Simulation
// metrics") and the output files of `placer simulate --out DIR`.

#include <placer/sim/simulator.hpp>
#include <placer/sim/svg_plot.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace placer::sim {

struct distribution {
  std::int64_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, max = 0;
};

/// Nearest-rank percentile (p in 0..100) of unsorted samples; 0 when empty.
double percentile(std::vector<double> v, double p);
distribution describe(std::vector<double> const& v);

/// A JSON string literal for s (quotes, backslashes and control characters escaped).
std::string json_quote(std::string const& s);

struct sim_summary {
  std::string algorithm;  ///< the run's label (sim_config::label, else the algorithm name)
  std::string workload, description;
  std::string policy;     ///< policy_label(cfg.queue), e.g. "backfill=easy+preemption"
  std::int64_t checkpoint_interval = 0;
  std::int64_t jobs = 0, finished = 0, running_at_end = 0, never_started = 0;
  double capacity_gpus = 0;
  std::int64_t t_begin = 0, t_end = 0, makespan = 0;
  double gar_time = 0, gar_event = 0;  ///< time-weighted / mean over event samples
  double gfr_time = 0;
  double frag_time = 0, frag_round_mean = 0;  ///< FGD ratio (solver's frag_ratio_after)
  double sor = 0;            ///< allocated / min(demanded, available), whole window
  double sor_pointwise = 0;  ///< allocated / integral of min(demand(t), capacity)
  double gpu_time_allocated = 0, gpu_time_demanded = 0, gpu_time_available = 0;  ///< GPU-seconds
  double gpu_time_jobs = 0;  ///< sum over jobs of GPUs x run time inside the window
  distribution wait, jct, jtted;
  /// Mean wait weighted by the job's GPUs (nominal): what a GPU asked for
  /// waits on average, beside the per-job mean that small jobs dominate.
  double wait_gpu_weighted = 0;
  distribution wait_training, wait_inference, jct_training;  ///< by job kind (batch counts as training)
  double queue_mean = 0;
  std::int32_t queue_max = 0;
  std::int64_t rounds = 0, placements = 0, rejected_partial = 0;
  std::map<std::string, std::int64_t> unplaced;
  // Cross-round policies (docs/simulator.md, "Policies in the simulator").
  std::int64_t preemptions = 0;      ///< running jobs stopped
  std::map<std::string, std::int64_t> preemptions_by_reason;
  std::int64_t jobs_preempted = 0;   ///< distinct jobs preempted at least once
  double lost_gpu_hours = 0;         ///< GPU time redone after preemptions
  std::int64_t reclaimed_nodes = 0, scale_outs = 0, scale_ins = 0, reservations = 0;
  std::int64_t deferred_job_rounds = 0, reserved_job_rounds = 0;
  double slowdown_gpu_weighted = 1;  ///< GPU-time-weighted mean slowdown factor over all run time
  double slowdown_multi_node = 1;    ///< mean per-job factor over jobs that ran on more than one node
  std::int64_t multi_node_jobs = 0;  ///< jobs that ran on more than one node
  std::int64_t slowed_jobs = 0;      ///< jobs with any placement slower than 1x
  double inference_gpus_mean = 0;    ///< time-weighted GPUs held by inference jobs
  double loaned_gpus_mean = 0;       ///< time-weighted GPUs of inference-pool nodes held by training
  double wall_seconds = 0, wall_solver_seconds = 0, placements_per_wall_second = 0;
};

sim_summary summarize(sim_result const& r);

/// summary.json: {"config": <config_json>, "runs": [...]}. Wall-clock
/// figures only when include_wall (so identical inputs give identical text).
std::string summary_json(std::vector<sim_summary> const& runs, std::string const& config_json, bool include_wall);

/// The human table (one column per run).
std::string summary_table(std::vector<sim_summary> const& runs);

/// timeseries.csv and jobs.csv of one run.
std::string timeseries_csv(sim_result const& r);
std::string jobs_csv(sim_result const& r);

/// A field of a run's samples (gar, gfr, frag) as time-weighted means over
/// at most 400 equal buckets of the run, in percent; x is hours from the
/// run's start. The series of gar.svg and of `placer experiment rounds`'
/// GFR plot.
plot_series bucket_means(sim_result const& r, std::string label, double sample::*field);

/// Writes summary.json, timeseries[_LABEL].csv, jobs[_LABEL].csv (suffix,
/// the run's label with characters outside [A-Za-z0-9._+=-] as '_', when
/// more than one run), gar.svg, jwtd_cdf.svg, jct_cdf.svg into dir (created).
/// Throws std::runtime_error naming a path that cannot be written.
void write_outputs(std::string const& dir, std::vector<sim_result> const& results,
                   std::vector<sim_summary> const& sums, std::string const& config_json);

}  // namespace placer::sim
