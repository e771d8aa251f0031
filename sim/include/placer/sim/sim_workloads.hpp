#pragma once
// Workloads for the discrete-event simulator (`placer simulate`): a cluster
// plus a list of jobs with submit times, estimated and actual durations.
//
//   placer::sim::workload_options o;  o.trace = "itp:cluster02";  o.limit = 2000;
//   placer::sim::workload w = placer::sim::load_workload(o);
//
// Traces (paths under the data directory, ../shared/data by default):
//   itp:clusterNN | itp:PATH   Microsoft ITP raw trace on homogeneous 8-GPU nodes
//   openb:NAME    | openb:PATH openb pod list on the openb GPU-node inventory
//   dlrm[:PATH]                DLRM GPU (HN) inference instances, long running
//   mixed:clusterNN | mixed:PATH  ITP training + diurnal DLRM-shaped inference on a
//                              cluster with a training pool and a loanable inference pool
//   synthetic                  seeded mix of 1-GPU, fractional, multi-GPU, gangs
// ITP training jobs (itp: and mixed:) carry priority, preemptible, network
// sensitivity and an elastic range from annotate_training_job.
// Deterministic for a seed. docs/simulator.md documents every convention.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace placer::sim {

struct workload {
  std::string name;         ///< e.g. "itp:cluster02"
  std::string description;  ///< cluster and job summary, one line
  cluster nodes;            ///< fully free at the start
  std::vector<job> jobs;    ///< sorted by submit_time (stable); estimated_duration = the estimate
  std::vector<std::int64_t> durations;  ///< actual run time of jobs[i], seconds (>= 1)
};

struct workload_options {
  std::string trace = "synthetic";
  std::string data_dir;         ///< "" = $PLACER_DATA_DIR, else ../shared/data
  std::int32_t nodes = 0;       ///< 0 = sized from the trace (ITP, DLRM) or 32 (synthetic)
  std::string inventory;        ///< openb pods: inventory CSV (openb, PAI or spot); "" = openb GPU nodes
  std::int32_t limit = 0;       ///< keep the first N jobs by submit time; 0 = all
  std::int64_t horizon = 0;     ///< drop jobs submitted later than first submit + horizon; 0 = none
  double estimate_noise = 0.0;  ///< sigma of a log-normal factor on estimates; 0 = exact
  std::uint64_t seed = 1;
  std::int32_t synthetic_jobs = 200;
  double arrival_rate = 1.0;    ///< synthetic arrivals, jobs per minute (Poisson)
  /// mixed: inference-pool nodes; 0 = half the training pool (`nodes` or
  /// the ITP default size), rounded up to a leaf of sim_nodes_per_leaf.
  std::int32_t inference_nodes = 0;
};

/// Nodes per leaf switch of the synthetic topologies used here.
inline constexpr std::int32_t sim_nodes_per_leaf = 8;

/// Throws std::runtime_error (unknown trace) or traces::parse_error (files).
workload load_workload(workload_options const& opt);

/// The data directory: opt.data_dir, else $PLACER_DATA_DIR, else ../shared/data.
std::string data_dir(workload_options const& opt);

/// Peak concurrent GPU demand if every job started at its submission.
std::int64_t peak_gpu_demand(std::vector<job> const& jobs, std::vector<std::int64_t> const& durations);

/// The "peak" column of ../shared/data/README.md section 6 (0 if unknown).
std::int64_t itp_readme_peak(std::string const& cluster_name);

/// Homogeneous 8-GPU nodes in leaves of sim_nodes_per_leaf (one spine per 8
/// leaves); `nodes` is rounded up to a multiple of the leaf size.
cluster homogeneous_cluster(std::int32_t nodes, std::int64_t cpu_milli, std::int64_t memory_mib,
                            std::string const& model = "GPU");

// ---------------------------------------------------------------- conventions
// Training jobs (ITP), annotate_training_job: every number below is drawn
// from a generator seeded by (seed, job name), so a job's attributes do not
// depend on --limit or on the other jobs.

/// Share of training jobs with priority training_high_priority (not
/// preemptible); the rest get training_low_priority and are preemptible.
inline constexpr double training_high_share = 0.2;
inline constexpr std::int32_t training_low_priority = 0;
inline constexpr std::int32_t training_high_priority = 1;
/// Inference (mixed workload) ranks above all training and is never preempted.
inline constexpr std::int32_t inference_priority = 2;
/// Share of multi-node gangs that are communication-heavy (sensitivity in
/// [0.6, 1.0)); the others, like single-node multi-GPU jobs, get [0.1, 0.4).
/// 1-GPU jobs have sensitivity 0.
inline constexpr double gang_sensitive_share = 0.75;
/// Share of multi-node gangs (r replicas of 8 GPUs) that are elastic, with
/// min = ceil(r/2), max = r + ceil(r/2) replicas.
inline constexpr double gang_elastic_share = 0.5;

/// Sets priority, preemptible, network_sensitivity, min/max_replicas of an
/// ITP training job by the rules above.
void annotate_training_job(job& j, std::uint64_t seed);

// Mixed workload: inference demand of the day (GPUs, 1 per instance) is
//   base + amplitude * (1 - cos(2 pi (t - trough) / day)) / 2
// with t in seconds of trace time (t mod 86400 = 0 is midnight), the trough
// at 04:00 and the peak at 16:00.
inline constexpr double inference_base_share = 0.25;  ///< of the inference pool's GPUs, all day
inline constexpr double inference_peak_share = 0.90;  ///< of the inference pool's GPUs, at 16:00
inline constexpr std::int64_t inference_trough_s = 4 * 3600;
inline constexpr std::int64_t inference_jitter_s = 900;  ///< +- on every diurnal arrival and departure

/// A cluster of `training` training-pool nodes (ITP shape: 8 GPUs, 32 vCPU,
/// 256 GiB) and `inference` loanable inference-pool nodes (DLRM shape: 8
/// GPUs, 128 vCPU, 1 TiB), each pool in leaves of sim_nodes_per_leaf under
/// its own spines (at most 4 leaves per spine); levels cluster/spine/leaf.
/// Node counts round up to whole leaves.
cluster pooled_cluster(std::int32_t training, std::int32_t inference);

/// Applies limit, horizon and estimate noise (used by load_workload; exposed
/// for tests that build workloads by hand).
void finish_workload(workload& w, workload_options const& opt);

}  // namespace placer::sim
