#pragma once
// The assign stage: turns the score matrix into placements. Three modes:
//   - placer: per priority level, locality jobs (gangs, topology needs) go
//     first, largest first, under the lowest topology domain that holds them;
//     then the other replicas, by shape tier (largest first), through the
//     auction on the backend, followed by commit-or-release and a greedy
//     repair for what did not fit;
//   - greedy: every job in queue order takes its best cells one replica at a
//     time (the reference the auction is measured against);
//   - kube: one job at a time, every node filtered and scored anew per
//     replica on the host (the kube-scheduler-style baseline).
// All modes commit through the same checks, so none can over-commit.

#include <placer/kernels/backend.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/model.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace placer::detail {

enum class assign_mode { placer, greedy, kube };

class assigner {
 public:
  assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, kernels::score_params p,
           kernels::backend& backend, assign_mode mode);

  /// Places every pending job (or records why not). `out_of_time` is asked
  /// between jobs; once it says yes, the rest are reported DeadlineExceeded.
  void run(round_result& out, std::function<bool()> const& out_of_time);

 private:
  // --- the three strategies
  void place_greedy(std::int32_t j, round_result& out);
  void place_locality(std::int32_t j, round_result& out);
  void place_tier(std::vector<std::int32_t> const& jobs, round_result& out);

  // --- shared pieces
  bool never_feasible(std::int32_t j, round_result& out);
  void finish_job(std::int32_t j, std::vector<replica_placement>&& placed, round_result& out);
  [[nodiscard]] bool initially_feasible(std::int32_t c, std::int32_t n) const;
  [[nodiscard]] std::int32_t score(std::int32_t c, std::int32_t n) const;
  [[nodiscard]] std::int64_t topo_bonus(job const& job, std::int32_t anchor, std::int32_t n) const;
  [[nodiscard]] std::int32_t domain_of(std::int32_t n, std::int32_t level) const {
    return paths_[static_cast<std::size_t>(n) * levels_ + level];
  }
  /// Best node for one replica of job (class c), optionally inside a domain.
  [[nodiscard]] std::int32_t best_node(job const& job, std::int32_t c, std::int32_t level, std::int32_t domain,
                                       std::int32_t anchor) const;
  void place_replicas(job const& job, std::int32_t c, std::int32_t level, std::int32_t domain, std::int32_t count,
                      std::vector<replica_placement>& placed);
  /// Replicas of class c that fit on node n as it is now.
  [[nodiscard]] std::int32_t fit_count(std::int32_t c, std::int32_t n) const;
  replica_placement commit(std::int32_t n, std::int32_t c);
  void release_all(std::int32_t c, std::vector<replica_placement>& placed);
  void refresh(std::int32_t n);
  [[nodiscard]] std::string level_name(std::int32_t l) const;

  round_input const& in_;
  round_matrices& m_;
  std::vector<std::int32_t>& scores_;
  kernels::score_cell_op op_;
  kernels::backend& backend_;
  assign_mode mode_;
  std::int32_t levels_ = 1;
  std::vector<std::int32_t> paths_;
  std::vector<std::int32_t> entry_node_, entry_domain_;  ///< (node, domain) pairs sorted by domain
};

/// Queue order: priority, then (placer) largest total GPU demand first, then
/// submit time, then index.
std::vector<std::int32_t> job_order(round_input const& in, bool largest_first);

}  // namespace placer::detail
