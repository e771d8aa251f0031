#pragma once
// Readers for the public GPU-cluster traces in ../shared/data (see its
// README): inventories become clusters, pod and job lists become jobs.
// A missing or malformed file throws placer::traces::parse_error whose
// message names the file and the 1-based line ("<path>:<line>: <what>").
// Files with a header line are read by column name, not position, so extra
// or reordered columns are fine. Blank lines are skipped; nothing else is.

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

/// Conventions for fields the traces do not carry (documented guesses, kept
/// here so callers and tests use the same numbers):
/// the spot inventory has no memory column, so a node gets 8 GiB per vCPU;
inline constexpr std::int64_t spot_memory_mib_per_vcpu = 8192;
/// ITP jobs carry only a GPU count: 4 vCPU and 32 GiB per GPU, 8-GPU nodes.
inline constexpr std::int64_t itp_cpu_milli_per_gpu = 4000;
inline constexpr std::int64_t itp_memory_mib_per_gpu = 32768;
inline constexpr std::int32_t itp_gpus_per_node = 8;

/// Replaces c.topo with the synthetic cluster/spine/leaf tree described by
/// `opt` and points every node at its leaf. Throws logic_error
/// (invalid_argument) when either option is below 1.
void assign_synthetic_topology(cluster& c, inventory_options const& opt);

/// All inventories come back fully free (free = capacity, every GPU 1000
/// milli), healthy, in the shared pool, at epoch 1, nodes in file order, with
/// the synthetic topology above. Nodes without GPUs have an empty gpu_model.
/// Node names must be unique and a node may have at most 64 GPUs.
///
/// openb_node_list_*.csv (sn,cpu_milli,memory_mib,gpu,model).
cluster load_openb_nodes(std::string const& path, inventory_options const& opt = {});
/// pai_machine_spec.csv (no header: machine,gpu_type,cap_cpu,cap_mem,cap_gpu; GB memory, vCPUs).
/// GB is taken as GiB (x1024 MiB); gpu_type CPU means no GPUs. A first line
/// naming those columns is accepted as a header.
cluster load_pai_machines(std::string const& path, inventory_options const& opt = {});
/// node_info_df.csv (gpu_model,gpu_capacity_num,cpu_num,node_name); no memory column: 8 GiB per vCPU.
cluster load_spot_nodes(std::string const& path, inventory_options const& opt = {});
/// Any of the three, recognised by the header line (or its absence for PAI).
cluster load_inventory(std::string const& path, inventory_options const& opt = {});

/// openb_pod_list_*.csv: one single-replica job per pod; gpu_spec becomes
/// allowed_gpu_models, creation_time the submit time, deletion - scheduled
/// the estimated duration (0 when unknown); qos LS -> inference, else batch
/// for CPU-only and training for GPU pods. CPU-only pods get gpu_milli 1000
/// (the file says 0; 1000 is the model's neutral value for gpus == 0).
/// gpu_milli must be 1..1000 for GPU pods and 1000 for multi-GPU pods (the
/// model only shares single GPUs). In gpu_spec, empty pieces and repeated
/// models (gpuspec files contain "V100M16|V100M32|V100M32") are dropped.
/// Required columns: name,cpu_milli,memory_mib,num_gpu,gpu_milli; the others
/// are optional (the multigpu* lists have only these five). A header-only
/// file gives an empty list.
std::vector<job> load_openb_pods(std::string const& path);

/// One row of a Microsoft ITP trace (raw-traces or elasticflow-traces).
struct itp_job {
  std::string id;
  std::int64_t submit_time = 0;
  std::int64_t duration = 0;
  std::int32_t num_gpu = 0;
};
/// Reads job_id,submission_time,duration,num_gpu by name (the elasticflow
/// files add synthetic columns, ignored here); num_gpu must be >= 1.
std::vector<itp_job> load_itp_jobs(std::string const& path);
/// ITP jobs as Placer jobs: num_gpu <= 8 is one replica with num_gpu GPUs;
/// more is a gang of num_gpu/8 replicas of 8 GPUs (the rest rounds up, so
/// 12 GPUs become 2 x 8; the real traces only have 16, 32 and 64). Kind
/// training, no topology level, name = job_id, estimated_duration =
/// duration, CPU and memory per the itp_* constants above.
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
/// disaggregated_DLRM_trace.csv. cpu_request (vCPU, may be fractional) ->
/// milli, memory_request (GiB) -> MiB, times rounded to whole seconds
/// (the file has values like 475.00000000000006); empty times -> -1.
std::vector<dlrm_instance> load_dlrm_instances(std::string const& path);

}  // namespace placer::traces
