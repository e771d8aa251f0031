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
#include <vector>

namespace placer {

struct round_matrices {
  // Nodes (mutable: the assignment commits into these).
  std::vector<std::int64_t> cpu_free, cpu_capacity, mem_free;
  std::vector<std::int32_t> model;
  std::vector<std::uint8_t> pool, flags;
  std::vector<std::int32_t> gpu_begin, gpu_free, gpu_capacity;
  std::vector<std::uint8_t> gpu_island;
  std::vector<std::int32_t> scarcity;  ///< per node, 0..1000
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
  // Model names; the index is the model id.
  std::vector<std::string> models;

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

}  // namespace placer
