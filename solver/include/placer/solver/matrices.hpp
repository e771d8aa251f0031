#pragma once
// A round flattened into the struct-of-arrays the kernels read: nodes (with
// a CSR of per-GPU free milli), classes of identical replicas (one score-
// matrix row each) and the typical task set for FGD fragmentation.
//
// Classes: pending jobs whose replicas have the same demand, allowed models
// and pool rule share one row, which keeps the matrix small at 100k GPUs
// (most jobs in real traces share a handful of shapes).

#include <placer/kernels/round_arrays.hpp>
#include <placer/kernels/views.hpp>
#include <placer/solver/constraints.hpp>
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
  /// (gpus, milli, cpu, mem, model mask, pool mask, loan, constraint set) of a class row.
  using class_key = std::tuple<std::int32_t, std::int32_t, std::int64_t, std::int64_t, std::uint64_t, std::uint8_t,
                               std::uint8_t, std::int32_t, std::uint8_t>;
  /// (cpu, milli, gpus, model mask) of a typical-task shape.
  using task_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::uint64_t>;
  flatten_scratch() = default;
  /// Working space, not part of the round: a copy of the matrices (the
  /// round kept for a repair, and restored) copies none of it, and one
  /// assigned keeps its own (round_bench, the kept copy at 100k: 250-330
  /// -> 194-205 us; 10k 18-20 -> 14 us).
  flatten_scratch(flatten_scratch const&) {}
  flatten_scratch& operator=(flatten_scratch const&) { return *this; }
  flatten_scratch(flatten_scratch&&) noexcept = default;
  flatten_scratch& operator=(flatten_scratch&&) noexcept = default;
  ~flatten_scratch() = default;
  std::vector<std::pair<class_key, std::int32_t>> classes;  ///< key -> class row, in order of first appearance
  std::vector<std::int32_t> class_slots;                    ///< classes' hash table (find_or_insert)
  std::vector<std::pair<task_key, std::int64_t>> counts;    ///< shape -> replicas, in order of first appearance
  std::vector<std::int32_t> count_slots;                    ///< counts' hash table
  std::vector<std::pair<std::int64_t, task_key>> ranked;    ///< (count, shape), most frequent first
  std::vector<std::uint64_t> hashes;  ///< per node: its state's hash, then (state roots) its score twins'
  std::vector<std::uint64_t> frag_hashes;  ///< per state root: its fragmentation state's hash
  /// (hash's high half, node), a table a worker of the team
  /// (first_of_equals): node states, score twins and fragmentation states
  std::vector<std::vector<std::pair<std::uint32_t, std::int32_t>>> state_tables, score_tables, frag_tables;
  std::vector<std::int32_t> frag_rep;  ///< per score twins' first node: the first of its fragmentation state
  std::vector<std::int32_t> roots, score_roots;  ///< the node states' first nodes, and the score twins'
  std::vector<std::int32_t> sorted_free;  ///< as gpu_free, each state root's values sorted
};

/// The round's arrays (kernels::round_arrays: nodes, classes, the typical
/// task set, and their views) and what only the solver needs beside them.
struct round_matrices : kernels::round_arrays {
  std::vector<std::int32_t> job_class;  ///< pending job -> class row
  // Model names; the index is the model id.
  std::vector<std::string> models;
  /// Node selectors, affinity and taints: the sets and groups behind the
  /// arrays' constraint tables (inactive when the round has none).
  constraint_tables constraints;
  /// build_matrices' working space (not part of the round).
  flatten_scratch scratch;
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
