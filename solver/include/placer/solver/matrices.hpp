#pragma once
// A round flattened into the struct-of-arrays the kernels read: nodes (with
// a CSR of per-GPU free milli), classes of identical replicas (one score-
// matrix row each) and the typical task set for FGD fragmentation.
//
// Classes: pending jobs whose replicas have the same demand, allowed models
// and pool rule share one row, which keeps the matrix small at 100k GPUs
// (most jobs in real traces share a handful of shapes).

#include <placer/kernels/views.hpp>
#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace placer {

/// What build_matrices needs besides its output, kept with the matrices so a
/// steady stream of same-shaped rounds flattens without allocating (sorted
/// vectors in place of maps; clear() keeps their capacity).
struct flatten_scratch {
  /// (gpus, milli, cpu, mem, model mask, pool mask, loan) of a class row.
  using class_key = std::tuple<std::int32_t, std::int32_t, std::int64_t, std::int64_t, std::uint64_t, std::uint8_t,
                               std::uint8_t>;
  /// (cpu, milli, gpus, model mask) of a typical-task shape.
  using task_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::uint64_t>;
  std::vector<std::pair<class_key, std::int32_t>> classes;  ///< sorted by key: key -> class row
  std::vector<std::pair<task_key, std::int64_t>> counts;    ///< sorted by key: shape -> replicas
  std::vector<std::pair<std::int64_t, task_key>> ranked;    ///< (count, shape), most frequent first
  std::vector<std::pair<std::uint64_t, std::int32_t>> node_hash;  ///< (state hash, node), sorted
};

struct round_matrices {
  // Nodes (mutable: the assignment commits into these).
  std::vector<std::int64_t> cpu_free, cpu_capacity, mem_free;
  std::vector<std::int32_t> model;
  std::vector<std::uint8_t> pool, flags;
  std::vector<std::int32_t> gpu_begin, gpu_free, gpu_capacity;
  std::vector<std::uint8_t> gpu_island;
  std::vector<std::int32_t> scarcity;  ///< per node, 0..1000
  std::vector<std::int32_t> same_as;   ///< per node: the lowest-indexed node in the identical state
  // Classes of identical replicas.
  std::vector<std::int32_t> class_gpus, class_milli;
  std::vector<std::int64_t> class_cpu, class_mem;
  std::vector<std::uint64_t> class_model_mask;
  std::vector<std::uint8_t> class_pool_mask, class_loan_ok, class_any_model;
  std::vector<std::int32_t> job_class;  ///< pending job -> class row
  // Typical task set M (FGD).
  std::vector<std::int32_t> task_gpus, task_milli, task_freq_ppm;
  std::vector<std::int64_t> task_cpu;
  std::vector<std::uint64_t> task_model_mask;
  std::int64_t task_share_cpu = 0;  ///< kernels::task_view::share_cpu
  // Model names; the index is the model id.
  std::vector<std::string> models;
  /// build_matrices' working space (not part of the round).
  flatten_scratch scratch;

  [[nodiscard]] std::int32_t n_nodes() const { return static_cast<std::int32_t>(cpu_free.size()); }
  [[nodiscard]] std::int32_t n_classes() const { return static_cast<std::int32_t>(class_gpus.size()); }
  [[nodiscard]] kernels::node_view nodes() const;
  [[nodiscard]] kernels::class_view classes() const;
  [[nodiscard]] kernels::task_view tasks() const;
};

/// Model-name bitmask (bit i = models[i]); an empty list allows every model.
std::uint64_t model_mask(std::vector<std::string> const& allowed, std::vector<std::string> const& models);

/// Flattens a validated round. Node order and GPU order are kept.
round_matrices build_matrices(round_input const& in);

/// The same, into `m`, reusing its buffers: every field is overwritten, and
/// once `m` has seen a round of this size, flattening another allocates
/// nothing (the solver keeps one round_matrices across rounds).
void build_matrices(round_input const& in, round_matrices& m);

}  // namespace placer
