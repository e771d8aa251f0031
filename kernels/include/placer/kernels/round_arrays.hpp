#pragma once
// The host arrays a round's views point into (views.hpp), owned, with the
// views built from them in one place: the solver's round_matrices and the
// tier tests' instances (header only, so clang's TSan build of the tier
// team needs nothing linked) both derive from it, so a field added to a
// view is filled for both.

#include <placer/kernels/views.hpp>

#include <cstdint>
#include <vector>

namespace placer::kernels {

struct round_arrays {
  // Nodes (mutable: the assignment commits into these).
  std::vector<std::int64_t> cpu_free, cpu_capacity, mem_free;
  std::vector<std::int32_t> model;
  std::vector<std::uint8_t> pool, flags;
  std::vector<std::int32_t> gpu_begin, gpu_free, gpu_capacity;
  std::vector<std::uint8_t> gpu_island;
  std::vector<std::int32_t> scarcity;  ///< per node, 0..1000
  std::vector<std::int32_t> same_as;   ///< per node: the lowest-indexed node in the identical state; empty = none
  std::vector<std::int32_t> score_as;  ///< per node: node_view::score_as; empty = none
  std::vector<std::int32_t> frag_node, frag_slot;  ///< node_view's fragmentation states; empty = none
  // Constraints (solver/constraints.hpp); all empty when the round has none.
  std::vector<std::int32_t> node_group;        ///< per node: its label-and-taint group
  std::int32_t n_constraint_sets = 0, n_constraint_groups = 0;
  std::vector<std::uint8_t> constraint_admit;  ///< (set, group), set-major: 1 = admitted
  std::vector<std::int32_t> constraint_prefer; ///< (set, group): preference, -1000..1000
  std::vector<std::int32_t> class_constraint;  ///< per class: its constraint set
  // Classes of identical replicas.
  std::vector<std::int32_t> class_gpus, class_milli;
  std::vector<std::int64_t> class_cpu, class_mem;
  std::vector<std::uint64_t> class_model_mask;
  std::vector<std::uint8_t> class_pool_mask, class_loan_ok, class_any_model;
  std::vector<std::uint8_t> class_one_per_node;  ///< 1 = one replica a node; empty when no class is
  // Typical task set M (FGD).
  std::vector<std::int32_t> task_gpus, task_milli, task_freq_ppm;
  std::vector<std::int64_t> task_cpu;
  std::vector<std::uint64_t> task_model_mask;
  std::int64_t task_share_cpu = 0;  ///< task_view::share_cpu (mean_share_cpu of the tasks)

  [[nodiscard]] std::int32_t n_nodes() const { return static_cast<std::int32_t>(cpu_free.size()); }
  [[nodiscard]] std::int32_t n_classes() const { return static_cast<std::int32_t>(class_gpus.size()); }

  [[nodiscard]] node_view nodes() const {
    node_view v;
    v.n_nodes = n_nodes();
    v.n_gpus = static_cast<std::int32_t>(gpu_free.size());
    v.cpu_free = cpu_free.data();
    v.cpu_capacity = cpu_capacity.data();
    v.mem_free = mem_free.data();
    v.model = model.data();
    v.pool = pool.data();
    v.flags = flags.data();
    v.gpu_begin = gpu_begin.data();
    v.gpu_free = gpu_free.data();
    v.gpu_capacity = gpu_capacity.data();
    v.gpu_island = gpu_island.data();
    v.scarcity = scarcity.data();
    v.same_as = same_as.empty() ? nullptr : same_as.data();
    v.score_as = score_as.empty() ? nullptr : score_as.data();
    if (!frag_slot.empty()) {
      v.n_frag = static_cast<std::int32_t>(frag_node.size());
      v.frag_node = frag_node.data();
      v.frag_slot = frag_slot.data();
    }
    v.group = node_group.empty() ? nullptr : node_group.data();
    return v;
  }
  [[nodiscard]] class_view classes() const {
    class_view v;
    v.n_classes = n_classes();
    v.gpus = class_gpus.data();
    v.milli = class_milli.data();
    v.cpu = class_cpu.data();
    v.mem = class_mem.data();
    v.model_mask = class_model_mask.data();
    v.pool_mask = class_pool_mask.data();
    v.loan_ok = class_loan_ok.data();
    v.any_model = class_any_model.data();
    v.one_per_node = class_one_per_node.empty() ? nullptr : class_one_per_node.data();
    if (!constraint_admit.empty()) {
      v.constraint = class_constraint.data();
      v.n_sets = n_constraint_sets;
      v.n_groups = n_constraint_groups;
      v.admit = constraint_admit.data();
      v.prefer = constraint_prefer.data();
    }
    return v;
  }
  [[nodiscard]] task_view tasks() const {
    task_view v;
    v.n_tasks = static_cast<std::int32_t>(task_gpus.size());
    v.gpus = task_gpus.data();
    v.milli = task_milli.data();
    v.cpu = task_cpu.data();
    v.model_mask = task_model_mask.data();
    v.freq_ppm = task_freq_ppm.data();
    v.share_cpu = task_share_cpu;
    return v;
  }
};

}  // namespace placer::kernels
