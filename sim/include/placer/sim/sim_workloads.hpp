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
//   synthetic                  seeded mix of 1-GPU, fractional, multi-GPU, gangs
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

/// Applies limit, horizon and estimate noise (used by load_workload; exposed
/// for tests that build workloads by hand).
void finish_workload(workload& w, workload_options const& opt);

}  // namespace placer::sim
