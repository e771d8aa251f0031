#pragma once
// Plain struct-of-arrays views the data-parallel stages read. They hold raw
// pointers (host memory for the CPU backend, device memory for CUDA) and
// their sizes; no ownership. All arrays are row-major where 2-D.
//
// Integers everywhere: scores, shares and frequencies are fixed-point so the
// CPU and CUDA backends give bit-identical results (the parity test).

#include <cstdint>

namespace placer::kernels {

/// Pool bits used in class_view::pool_mask.
enum : std::uint8_t { pool_bit_training = 1, pool_bit_inference = 2, pool_bit_shared = 4 };
/// Node flag bits.
enum : std::uint8_t { node_flag_healthy = 1, node_flag_loanable = 2 };

/// Nodes as SoA. GPUs are a CSR: node i owns gpu_free[gpu_begin[i] .. gpu_begin[i+1]).
/// An unhealthy GPU is given free = 0 and is excluded from gpu_capacity.
struct node_view {
  std::int32_t n_nodes = 0;
  std::int32_t n_gpus = 0;             ///< total GPUs (size of gpu_free)
  std::int64_t const* cpu_free = nullptr;
  std::int64_t const* cpu_capacity = nullptr;
  std::int64_t const* mem_free = nullptr;
  std::int32_t const* model = nullptr;  ///< model id, -1 = no GPUs
  std::uint8_t const* pool = nullptr;   ///< pool bit (pool_bit_*)
  std::uint8_t const* flags = nullptr;  ///< node_flag_*
  std::int32_t const* gpu_begin = nullptr;     ///< n_nodes + 1 offsets
  std::int32_t const* gpu_free = nullptr;      ///< milli free per GPU
  std::int32_t const* gpu_capacity = nullptr;  ///< per node: healthy GPUs x 1000
  std::uint8_t const* gpu_island = nullptr;    ///< per GPU (CSR like gpu_free): NVLink island
  std::int32_t const* scarcity = nullptr;      ///< per node 0..1000: pressure on its GPU model
  /// Per node: a node in the identical state (same_as[n] <= n; n itself for
  /// the first of its state), so a stage may compute one column per state.
  /// Null: every node its own. Read only by the score stage.
  std::int32_t const* same_as = nullptr;
  /// Per node: a node whose cells score alike where the score's
  /// fragmentation term is column_frag's (score_cell_op::
  /// column_fragmentation: it reads a node's GPUs as the multiset of their
  /// free values): the same fragmentation state (frag_slot) and every other
  /// field the score reads, GPUs in any order and islands aside
  /// (score_as[n] <= same_as[n]; n itself for the first). Null: same_as.
  /// Read only by the score stage of a CPU backend.
  std::int32_t const* score_as = nullptr;
  /// Nodes whose GPUs hold the same free values (in any order), with the
  /// same free CPU and GPU model, fragment alike: FGD's F and a replica's
  /// effect on it depend on nothing else. n_frag such states; frag_node[s]
  /// is the lowest-indexed node of state s, frag_slot[n] node n's state.
  /// Null: none (the score stage then computes F per column). Read by the
  /// score stage, and by the CPU backend's statistics before a round
  /// (stats_begin), both on the round's nodes as flattened.
  std::int32_t n_frag = 0;
  std::int32_t const* frag_node = nullptr;
  std::int32_t const* frag_slot = nullptr;
  /// Per node: its group of identical labels (on the keys the round's jobs
  /// ask about) and taints; null when the round has no constraints.
  std::int32_t const* group = nullptr;
};

/// Classes of identical replicas (same demand, models, pool rule). One row of
/// the score matrix per class.
struct class_view {
  std::int32_t n_classes = 0;
  std::int32_t const* gpus = nullptr;      ///< GPUs per replica
  std::int32_t const* milli = nullptr;     ///< per-GPU milli (1000 = whole)
  std::int64_t const* cpu = nullptr;
  std::int64_t const* mem = nullptr;
  std::uint64_t const* model_mask = nullptr;  ///< bit m = model m allowed
  std::uint8_t const* pool_mask = nullptr;    ///< pools usable outright
  std::uint8_t const* loan_ok = nullptr;      ///< 1 = may use loanable inference nodes
  std::uint8_t const* any_model = nullptr;    ///< 1 = GPU replicas that accept every model
  /// 1 = a node takes one replica of the class at most (its jobs want
  /// distinct nodes, solver job::distinct_nodes): fit_count counts 1. Null
  /// when no class of the round is.
  std::uint8_t const* one_per_node = nullptr;
  /// Node selector, affinity and taints (solver/constraints.hpp), null when
  /// the round has none: class c on node n is admitted when
  /// admit[constraint[c] * n_groups + group[n]] != 0, and scores
  /// prefer[...] (-1000..1000) times the affinity weight.
  std::int32_t const* constraint = nullptr;
  std::int32_t n_sets = 0;
  std::int32_t n_groups = 0;
  std::uint8_t const* admit = nullptr;
  std::int32_t const* prefer = nullptr;
};

/// The typical task set M for FGD fragmentation (shapes with frequencies in
/// parts per million, summing to about 1e6).
struct task_view {
  std::int32_t n_tasks = 0;
  std::int32_t const* gpus = nullptr;
  std::int32_t const* milli = nullptr;
  std::int64_t const* cpu = nullptr;
  std::uint64_t const* model_mask = nullptr;
  std::int32_t const* freq_ppm = nullptr;
  /// Frequency-weighted mean CPU (milli) of M's fractional shares; 0 when M
  /// has none. The CPU that the other shares on a node will ask for, which
  /// the packable measure blends into each share's own (node_fragmentation).
  std::int64_t share_cpu = 0;
};

/// The nodes under each domain (every level of every node's path), as a
/// CSR by domain: the per-domain sums read it.
struct domain_index_view {
  std::int32_t n_entries = 0;
  std::int32_t n_domains = 0;
  std::int32_t const* node = nullptr;   ///< n_entries, grouped by domain
  std::int32_t const* begin = nullptr;  ///< n_domains + 1: domain d's nodes are node[begin[d] .. begin[d+1])
};

/// Integer weights of the score terms; each term is normalised to 0..1000.
struct score_params {
  std::int32_t w_binpack = 5;
  std::int32_t w_fragmentation = 200;
  std::int32_t w_pool_affinity = 20;
  std::int32_t w_scarcity = 100;
  std::int32_t w_affinity = 100;
  std::int32_t kube_mode = 0;  ///< 0 = Placer score, 1 = LeastAllocated, 2 = MostAllocated, 3 = first fit
};

/// Per-cluster sums from one reduction over nodes.
struct cluster_stats {
  std::int64_t gpu_allocated_milli = 0;  ///< on healthy GPUs of healthy nodes
  std::int64_t gpu_schedulable_milli = 0;
  std::int64_t gpu_free_milli = 0;
  std::int64_t frag_milli_ppm = 0;       ///< sum_n F_n(M), milli x ppm
  std::int64_t gpu_nodes = 0;            ///< healthy nodes with GPUs
  std::int64_t partly_allocated_nodes = 0;
};

}  // namespace placer::kernels
