#pragma once
// The cluster side of the domain model: nodes, their GPUs and the network
// topology tree they sit in. Host-only C++; the solver flattens this into
// struct-of-arrays views for the kernels (solver/src/matrices.cpp).

#include <cstdint>
#include <string>
#include <vector>

namespace placer {

/// Milli-GPU in one whole GPU.
inline constexpr std::int32_t milli_per_gpu = 1000;
/// The largest CPU milli or memory MiB a node or a demand may state (2^40),
/// so that products with per-mille factors cannot overflow.
inline constexpr std::int64_t max_resource = std::int64_t{1} << 40;

/// Which workloads a node serves (Kant/Aryl: separate training and inference
/// pools; inference nodes may be lent to training when `loanable`).
enum class pool_kind : std::uint8_t { training = 0, inference = 1, shared = 2 };

/// One domain of the topology tree (NVLink domain or rack, leaf switch,
/// spine, cluster...). Depth and fan-out are data, not code.
struct topology_domain {
  std::string name;
  std::int32_t level = 0;    ///< index into topology::level_names; 0 = root
  std::int32_t parent = -1;  ///< index into topology::domains; -1 for the root
  bool operator==(topology_domain const&) const = default;
};

/// A tree of domains. Nodes point at their lowest domain; the path to the
/// root gives the domain at every level above it.
struct topology {
  std::vector<std::string> level_names;
  std::vector<topology_domain> domains;

  [[nodiscard]] bool empty() const { return domains.empty(); }
  [[nodiscard]] std::int32_t levels() const { return static_cast<std::int32_t>(level_names.size()); }
  bool operator==(topology const&) const = default;
};

/// A node taint (Kubernetes): pods that do not tolerate it are kept off the
/// node (NoSchedule, NoExecute) or steered away from it (PreferNoSchedule).
enum class taint_effect : std::uint8_t { no_schedule = 0, prefer_no_schedule = 1, no_execute = 2 };

struct taint {
  std::string key;
  std::string value;
  taint_effect effect = taint_effect::no_schedule;
  bool operator==(taint const&) const = default;
};

/// One machine. Per-GPU state is kept per GPU because fractional shares
/// (milli-GPU) live on individual GPUs.
struct node {
  std::string name;
  std::string gpu_model;                    ///< empty for CPU-only nodes
  std::vector<std::int32_t> gpu_free_milli; ///< per GPU, 0..1000
  std::vector<std::uint8_t> gpu_healthy;    ///< per GPU; empty = all healthy
  std::vector<std::uint8_t> gpu_nvlink;     ///< per GPU NVLink island; empty = one island
  std::int64_t cpu_milli_capacity = 0;
  std::int64_t cpu_milli_free = 0;
  std::int64_t memory_mib_capacity = 0;
  std::int64_t memory_mib_free = 0;
  pool_kind pool = pool_kind::shared;
  bool loanable = false;
  bool healthy = true;
  std::int32_t domain = -1;  ///< lowest topology domain; -1 = none
  std::vector<std::string> labels;  ///< "key=value" ("key" alone: an empty value)
  std::vector<taint> taints;

  [[nodiscard]] std::int32_t gpu_count() const { return static_cast<std::int32_t>(gpu_free_milli.size()); }
  [[nodiscard]] bool gpu_is_healthy(std::size_t g) const { return gpu_healthy.empty() || gpu_healthy[g] != 0; }
  bool operator==(node const&) const = default;
};

/// A cluster snapshot at an epoch.
struct cluster {
  std::uint64_t epoch = 0;
  std::vector<node> nodes;
  topology topo;
};

/// Throws placer::logic_error (invalid_argument) naming the first problem:
/// free above capacity, GPU free outside 0..1000, a domain index out of
/// range, a cycle in the tree, a node whose domain is not a valid index.
/// `nodes` false: the topology alone (the nodes were checked before).
void validate(cluster const& c, bool nodes = true);

/// validate()'s checks of one node in a tree of `n_domains` domains: the
/// first problem ("cpu_milli_free must be in 0..cpu_milli_capacity"), or ""
/// when there is none.
std::string node_problem(node const& n, std::int32_t n_domains);

/// For every node, the domain index at every level (row-major, nodes x
/// levels; -1 where the node's path does not reach that level). The solver
/// sorts by these paths for per-domain segmented reductions.
std::vector<std::int32_t> node_domain_paths(cluster const& c);
/// node_domain_paths into `paths`, reusing its memory (a round's caller
/// that keeps the buffer: at 100k a fresh one was a third of explain).
void node_domain_paths(cluster const& c, std::vector<std::int32_t>& paths);

/// Fluent builder for synthetic clusters with a regular topology, used by the
/// demo, tests and benches:
///   auto c = make_cluster().spines(2).leaves_per_spine(4).nodes_per_leaf(32).gpus(8).build();
class cluster_builder {
 public:
  cluster_builder& spines(int n) { spines_ = n; return *this; }
  cluster_builder& leaves_per_spine(int n) { leaves_ = n; return *this; }
  cluster_builder& nodes_per_leaf(int n) { nodes_per_leaf_ = n; return *this; }
  cluster_builder& gpus(int n) { gpus_ = n; return *this; }
  cluster_builder& nvlink_islands(int n) { islands_ = n; return *this; }
  cluster_builder& gpu_model(std::string m) { model_ = std::move(m); return *this; }
  cluster_builder& cpu_milli(std::int64_t v) { cpu_ = v; return *this; }
  cluster_builder& memory_mib(std::int64_t v) { mem_ = v; return *this; }
  cluster_builder& pool(pool_kind p) { pool_ = p; return *this; }
  [[nodiscard]] cluster build() const;

 private:
  int spines_ = 1, leaves_ = 4, nodes_per_leaf_ = 8, gpus_ = 8, islands_ = 1;
  std::string model_ = "H100";
  std::int64_t cpu_ = 128000, mem_ = 1024 * 1024;
  pool_kind pool_ = pool_kind::shared;
};
inline cluster_builder make_cluster() { return {}; }

}  // namespace placer

namespace placer {

/// A change to a cluster the server already holds (per client session).
struct node_update {
  std::int32_t index = -1;  ///< node index in the base cluster
  node value;
};

struct cluster_delta {
  std::uint64_t base_epoch = 0;
  std::uint64_t new_epoch = 0;
  std::vector<node> added;            ///< appended after the surviving nodes
  std::vector<std::int32_t> removed;  ///< node indices in the base cluster
  std::vector<node_update> changed;
};

/// Moves a valid cluster `c` to the delta's epoch in place: changes first,
/// then removals (surviving nodes keep their relative order), then
/// additions. Everything is checked before anything changes, so a rejected
/// delta leaves `c` as it was: logic_error(stale_epoch) when c.epoch !=
/// d.base_epoch; invalid_argument for an index out of range, a node changed
/// or removed twice or both, or a changed or added node that validate()
/// would reject (the topology does not change, so the result is valid).
/// Changed nodes are copied over the old ones, reusing their storage.
void apply_delta(cluster& c, cluster_delta const& d);

/// What apply_delta(c, d, undo) replaced, for revert_delta. Its buffers are
/// reused from one delta to the next.
struct delta_undo {
  bool armed = false;                  ///< a delta applied and not yet reverted or kept
  bool lost = false;                   ///< memory ran out half-way: `c` is neither base nor result
  std::uint64_t epoch = 0;             ///< the base's
  std::size_t size = 0;                ///< the base's node count
  std::vector<std::int32_t> changed;   ///< indices in the base
  std::vector<node> changed_old;       ///< their values before
  std::vector<std::int32_t> removed;   ///< ascending
  std::vector<node> removed_old;
};

/// apply_delta, keeping in `undo` what it replaced, so that a round that
/// fails after its delta was applied can move `c` back to the base exactly
/// (revert_delta) instead of the round working on a copy of the whole
/// cluster: at 100k GPUs with the labels of real Kubernetes nodes that copy
/// was 10 ms a round. Checks as apply_delta: a rejected delta changes
/// nothing (`undo` not armed). Should memory run out once writing began,
/// `undo.lost` says that `c` is lost and the exception goes on.
void apply_delta(cluster& c, cluster_delta const& d, delta_undo& undo);

/// Moves `c` back to where apply_delta(c, d, undo) found it, if `undo` is
/// armed; disarms it. Throws nothing.
void revert_delta(cluster& c, delta_undo& undo) noexcept;

}  // namespace placer
