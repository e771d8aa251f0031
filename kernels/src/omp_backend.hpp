#pragma once
// The CPU backend (Thrust on OpenMP).
#include <placer/kernels/backend.hpp>

#include "../portable/tier_host.hpp"
#include "frag_memo.hpp"

#include <cstddef>
#include <vector>

namespace placer::kernels {

class omp_backend final : public backend {
 public:
  /// `always_parallel`: every stage on the OpenMP team whatever its size,
  /// the tier program on at least two workers (make_parallel_cpu_backend).
  explicit omp_backend(bool always_parallel = false);
  [[nodiscard]] backend_kind kind() const override { return backend_kind::cpu; }
  [[nodiscard]] std::string const& description() const override { return description_; }
  void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
             score_params const& params, std::span<std::int32_t> out) override;
  bool score_then(node_view const& nodes, class_view const& classes, task_view const& tasks,
                  score_params const& params, std::span<std::int32_t> out, bool read) override;
  cluster_stats stats(node_view const& nodes, task_view const& tasks) override;
  void stats_begin(node_view const& nodes, task_view const& tasks) override;
  cluster_stats stats_after(node_view const& nodes, task_view const& tasks) override;
  void domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                       domain_index_view const& idx, std::span<std::int64_t> cap) override;
  void place_tiers(std::span<tier_problem const> tiers, tier_results& out) override;
  void place_tiers_then(std::span<tier_problem const> tiers, tier_results& out, follow_up const& then) override;

 private:
  // The stages; the public calls count the waits a device backend would
  // make for them (the CPU's own steps are the same either way).
  void score_cells(node_view const& nodes, class_view const& classes, task_view const& tasks,
                   score_params const& params, std::span<std::int32_t> out);
  cluster_stats reduce(node_view const& nodes, task_view const& tasks);
  void chain(std::span<tier_problem const> tiers, tier_results& out);

  std::string description_;
  std::vector<std::int32_t> domain_fit_;
  std::vector<std::int64_t> domain_part_;  ///< domain_capacity's parts of each sum
  std::vector<std::int64_t> frag_table_;  ///< the score stage's fragmentation table
  std::vector<std::int32_t> score_columns_;  ///< the score stage's columns (score_matrix)
  std::vector<std::int64_t> state_frag_;  ///< stats_begin's F per fragmentation state
  std::vector<std::int64_t> cpu_was_;     ///< stats_begin's nodes' free CPU (empty: it took no states)
  std::vector<std::int32_t> gpu_was_;     ///< and free GPU milli (node_view::gpu_free's CSR)
  std::vector<std::uint8_t> moved_;            ///< stats_after: the nodes whose F is summed by state
  std::vector<frag_by_state> moved_frag_;      ///< those F, a memo a worker
  std::vector<cluster_stats> moved_part_;      ///< and each worker's sums
  frag_memos frag_memos_;                 ///< its rows by state, a memo a thread, for the tier programs on one worker
  std::vector<tier_problem> memo_tiers_;  ///< a chain's tiers with the memo attached
  // Tier program workspace and team size (PLACER_TIER_THREADS).
  tier_host_arena tier_arena_;
  int tier_threads_ = 1;
  bool always_parallel_ = false;
  std::int32_t stats_parallel_from_ = 0;  ///< nodes from which stats() runs on the team
  std::int64_t score_parallel_from_ = 0;  ///< cells from which the score stage does
};

}  // namespace placer::kernels
