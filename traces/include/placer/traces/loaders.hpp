#pragma once
// Readers for the public GPU-cluster traces in ../shared/data (see its
// README): inventories become clusters, pod and job lists become jobs.
// A missing or malformed file throws placer::traces::parse_error whose
// message names the file and the 1-based line.

#include <placer/solver/model.hpp>
#include <placer/topology/error.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace placer::traces {

class parse_error : public logic_error {
 public:
  explicit parse_error(std::string const& what) : logic_error(error_code::invalid_argument, what) {}
};

/// Options for inventories that carry no topology: nodes are grouped in
/// file order into leaf switches of `nodes_per_leaf` under spines of
/// `leaves_per_spine` leaves (levels: cluster, spine, leaf).
struct inventory_options {
  std::int32_t nodes_per_leaf = 32;
  std::int32_t leaves_per_spine = 8;
};

/// openb_node_list_*.csv (sn,cpu_milli,memory_mib,gpu,model).
cluster load_openb_nodes(std::string const& path, inventory_options const& opt = {});
/// pai_machine_spec.csv (no header: machine,gpu_type,cap_cpu,cap_mem,cap_gpu; GB memory, vCPUs).
cluster load_pai_machines(std::string const& path, inventory_options const& opt = {});
/// node_info_df.csv (gpu_model,gpu_capacity_num,cpu_num,node_name); no memory column: 8 GiB per vCPU.
cluster load_spot_nodes(std::string const& path, inventory_options const& opt = {});
/// Any of the three, recognised by the header line (or its absence for PAI).
cluster load_inventory(std::string const& path, inventory_options const& opt = {});

/// openb_pod_list_*.csv: one single-replica job per pod; gpu_spec becomes
/// allowed_gpu_models, creation_time the submit time, deletion - scheduled
/// the estimated duration (0 when unknown); qos LS -> inference, else batch
/// for CPU-only and training for GPU pods.
std::vector<job> load_openb_pods(std::string const& path);

/// One row of a Microsoft ITP trace (raw-traces or elasticflow-traces).
struct itp_job {
  std::string id;
  std::int64_t submit_time = 0;
  std::int64_t duration = 0;
  std::int32_t num_gpu = 0;
};
std::vector<itp_job> load_itp_jobs(std::string const& path);
/// ITP jobs as Placer jobs: num_gpu <= 8 is one replica with num_gpu GPUs;
/// more is a gang of num_gpu/8 replicas of 8 GPUs (the rest rounds up).
std::vector<job> itp_to_jobs(std::vector<itp_job> const& rows);

/// One DLRM inference instance (alibaba-dlrm-v2025).
struct dlrm_instance {
  std::string app;
  std::string role;  ///< HN (GPU node) or CN (CPU node)
  std::int64_t cpu_milli = 0;
  std::int32_t gpus = 0;
  std::int64_t memory_mib = 0;
  std::int64_t creation_time = -1;  ///< -1 = before the trace
  std::int64_t deletion_time = -1;  ///< -1 = after the trace
  std::int32_t max_instance_per_node = -1;
};
std::vector<dlrm_instance> load_dlrm_instances(std::string const& path);

}  // namespace placer::traces
