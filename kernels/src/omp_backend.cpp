// CPU backend: the portable stages run through Thrust's OpenMP system on the
// caller's host memory. Compiled by g++ with THRUST_DEVICE_SYSTEM=OMP.
#include "omp_backend.hpp"

#include "../portable/stages.hpp"
#include "../portable/tier_host.hpp"
#include <placer/kernels/team.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <omp.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

namespace placer::kernels {

namespace {
/// Below this much work a stage runs inline on the calling thread: an
/// OpenMP parallel region costs microseconds, and far more when the cores
/// are oversubscribed. The algorithms are deterministic, so the choice never
/// changes a result.
constexpr std::int64_t parallel_threshold = 1 << 16;
/// Nodes from which the cluster statistics run on the team; where it
/// sleeps, the bound for a team of two (team_from). A sleeping team costs a
/// wake-up per parallel region: placer bench 10k, 2 vCPUs, metrics before
/// + after 0.22 ms on the team, 0.08 ms on the calling thread; round_bench
/// 100k (12,800 nodes) under OMP_WAIT_POLICY=PASSIVE, metrics before 296-340
/// us on a team of two, 126-132 on one thread.
constexpr std::int32_t stats_parallel_from = parallel_threshold / 64;
constexpr std::int32_t stats_parallel_from_pair = parallel_threshold;
/// Cells from which the score stage runs on the team, and where it sleeps
/// for a team of two: its three parallel regions wake the team, about 0.25
/// ms in all on 2 vCPUs. round_bench under OMP_WAIT_POLICY=PASSIVE, 2
/// vCPUs, the stage on one thread against a team of two: 10k (30,720 cells)
/// 291 against 397-400 us, openb (112,809) 195-200 against 298-317, 100k
/// (307,200) 1,110-1,160 against 917-927.
constexpr std::int64_t score_parallel_from = parallel_threshold / 16;
constexpr std::int64_t score_parallel_from_pair = std::int64_t{1} << 18;

/// Whether a one-worker tier program hands work to its team (apart_from
/// below): a team of two or more that spins.
bool team_takes_apart() { return !openmp_team_sleeps() && omp_get_max_threads() >= 2; }

/// Cells (rows x nodes) from which a one-worker tier program selects an
/// iteration's floors on the team (seq_team::apart_from, tier_apart),
/// where the team spins: round_bench, 2 vCPUs, 100k's floors 3.1 -> 2.3 ms
/// (docs/results.md). The same bound in the score's steps (16 a cell and
/// 16 a column) for a refresh's re-scored columns: 100k's refresh 2.1 ->
/// 1.8 ms, each worker reading its own memo (frag_memos). A sleeping team
/// would pay a wake-up an iteration, more than the split saves, so there
/// they stay on the calling thread.
/// At 8,192 cells 10k's floors gained 0.05 ms more; this bound keeps a
/// region per iteration to work of 60 us or more, where cores shared with
/// other processes (ctest -j2, experiments' --jobs) make a fork cost more.
constexpr std::int64_t apart_from = 1 << 15;

/// Task shapes from which the statistics after a round sum the moved
/// nodes' F a state at a time (frag_by_state), where F (a pass over the
/// shapes) costs more than finding the state: round_bench, 2 vCPUs,
/// metrics after, openb (29 shapes) 106-127 -> 47-49 us; at 10k and 100k
/// (12 shapes) 31 -> 38-41 us and 201-208 -> 202-216, so not there.
constexpr std::int32_t frag_by_state_from_tasks = 16;

/// Nodes x rows from which a tier program runs on PLACER_TIER_THREADS workers.
constexpr std::int64_t tier_team_threshold = 1 << 14;
/// PLACER_TIER_THREADS: workers of a big tier's program (default 1). A
/// team splits the bidding and re-scoring but meets at four barriers a
/// round, and a barrier waits for the slowest core: on the 2-vCPU machine
/// two workers took round_bench's 100k from 28-34 to 25 ms, but the
/// service's 10k round (client and ZeroMQ threads on the same two cores)
/// from 5.9 to 8.9 ms p50 (docs/results.md). Opt in where cores are free.
int tier_threads_from_env() {
  char const* v = std::getenv("PLACER_TIER_THREADS");
  if (v == nullptr || *v == '\0') return 1;
  int const n = std::atoi(v);
  if (n < 1) throw logic_error(error_code::invalid_argument, std::string("PLACER_TIER_THREADS must be a positive count, got '") + v + "'");
  return std::min(n, 64);
}

}  // namespace

omp_backend::omp_backend(bool always_parallel)
    : description_("cpu (OpenMP, " + std::to_string(omp_get_max_threads()) + " threads)"),
      frag_memos_(team_takes_apart() ? static_cast<std::size_t>(omp_get_max_threads()) : 1),
      tier_threads_(always_parallel ? std::max(2, tier_threads_from_env()) : tier_threads_from_env()),
      always_parallel_(always_parallel),
      stats_parallel_from_(static_cast<std::int32_t>(team_from(stats_parallel_from, stats_parallel_from_pair))),
      score_parallel_from_(team_from(score_parallel_from, score_parallel_from_pair)) {
  tier_arena_.apart_from = team_takes_apart() ? apart_from : 0;
  // Start the OpenMP thread pool now, not inside the first round (it costs
  // milliseconds, which would land in that round's timing).
#pragma omp parallel
  { [[maybe_unused]] int const t = omp_get_thread_num(); }
}

void omp_backend::score(node_view const& nodes, class_view const& classes, task_view const& tasks,
                        score_params const& params, std::span<std::int32_t> out) {
  score_cells(nodes, classes, tasks, params, out);
  steps_.waits += 1;
}

// A device waits for the cells it reads, and not at all for cells that
// stay on it.
bool omp_backend::score_then(node_view const& nodes, class_view const& classes, task_view const& tasks,
                             score_params const& params, std::span<std::int32_t> out, bool read) {
  score_cells(nodes, classes, tasks, params, out);
  if (read) steps_.waits += 1;
  return true;
}

void omp_backend::score_cells(node_view const& nodes, class_view const& classes, task_view const& tasks,
                              score_params const& params, std::span<std::int32_t> out) {
  frag_table_.resize(frag_table_cells(nodes, classes, tasks, params));
  if (!always_parallel_ && static_cast<std::int64_t>(nodes.n_nodes) * classes.n_classes < score_parallel_from_) {
    score_matrix(thrust::cpp::par, nodes, classes, tasks, params, out.data(), frag_table_.data(), score_columns_, steps_);
  } else {
    score_matrix(thrust::omp::par, nodes, classes, tasks, params, out.data(), frag_table_.data(), score_columns_, steps_);
  }
  // A round starts: the memo keeps its states' rows, each state's first
  // node as it is now.
  frag_memos_.clear();
  if (!frag_table_.empty() && frag_memos_.bind(score_cell_op{nodes, classes, tasks, params})) {
    frag_memos_.seed(frag_table_.data());
  }
}

cluster_stats omp_backend::stats(node_view const& nodes, task_view const& tasks) {
  steps_.waits += 1;
  return reduce(nodes, tasks);
}

void omp_backend::stats_begin(node_view const& nodes, task_view const& tasks) {
  // The round's nodes as flattened: their fragmentation states are current,
  // so F is computed a state, not a node (metrics_before at 100k: 0.31 ms).
  cpu_was_.clear();
  gpu_was_.clear();
  if (nodes.frag_slot == nullptr) {
    begun_ = reduce(nodes, tasks);
    return;
  }
  state_frag_.resize(static_cast<std::size_t>(nodes.n_frag));
  begun_ = !always_parallel_ && nodes.n_nodes < stats_parallel_from_
               ? reduce_cluster_stats_by_state(thrust::cpp::par, nodes, tasks, state_frag_.data(), steps_)
               : reduce_cluster_stats_by_state(thrust::omp::par, nodes, tasks, state_frag_.data(), steps_);
  // The free values they were taken at: the statistics after the round
  // compute F again only where the assignment moved them (stats_after).
  cpu_was_.assign(nodes.cpu_free, nodes.cpu_free + nodes.n_nodes);
  gpu_was_.assign(nodes.gpu_free, nodes.gpu_free + nodes.gpu_begin[nodes.n_nodes]);
}

cluster_stats omp_backend::stats_after(node_view const& nodes, task_view const& tasks) {
  if (nodes.n_nodes == 0 || cpu_was_.size() != static_cast<std::size_t>(nodes.n_nodes) ||
      gpu_was_.size() != static_cast<std::size_t>(nodes.gpu_begin[nodes.n_nodes]) ||
      state_frag_.size() != static_cast<std::size_t>(nodes.n_frag)) {
    return stats(nodes, tasks);
  }
  steps_.waits += 1;
  bool const team = always_parallel_ || nodes.n_nodes >= stats_parallel_from_;
  if (tasks.n_tasks < frag_by_state_from_tasks) {
    return team ? reduce_cluster_stats_since(thrust::omp::par, nodes, tasks, state_frag_.data(), cpu_was_.data(),
                                             gpu_was_.data(), steps_)
                : reduce_cluster_stats_since(thrust::cpp::par, nodes, tasks, state_frag_.data(), cpu_was_.data(),
                                             gpu_was_.data(), steps_);
  }
  // reduce_cluster_stats_since's sums, each worker's share of the nodes
  // summing its moved nodes' F a state at a time (frag_by_state).
  steps_.calls += 1;  // one call, as reduce_cluster_stats_since
  std::int32_t const n_nodes = nodes.n_nodes;
  moved_.resize(static_cast<std::size_t>(n_nodes));
  int const workers = team ? omp_get_max_threads() : 1;
  if (moved_frag_.size() < static_cast<std::size_t>(workers)) moved_frag_.resize(static_cast<std::size_t>(workers));
  moved_part_.assign(static_cast<std::size_t>(workers), cluster_stats{});
  node_stats_since_op const op{nodes, tasks, state_frag_.data(), cpu_was_.data(), gpu_was_.data(), moved_.data()};
#pragma omp parallel num_threads(workers) if (workers > 1)
  {
    auto const w = static_cast<std::int64_t>(omp_get_thread_num());
    auto const k = static_cast<std::int64_t>(omp_get_num_threads());
    auto const lo = static_cast<std::int32_t>(n_nodes * w / k);
    auto const hi = static_cast<std::int32_t>(n_nodes * (w + 1) / k);
    frag_by_state& memo = moved_frag_[static_cast<std::size_t>(w)];
    memo.clear();
    cluster_stats sum{};
    for (std::int32_t n = lo; n < hi; ++n) {
      sum = stats_sum_op{}(sum, op(n));
      if (moved_[static_cast<std::size_t>(n)] != 0) sum.frag_milli_ppm += memo.of(nodes, tasks, n);
    }
    moved_part_[static_cast<std::size_t>(w)] = sum;
  }
  cluster_stats total{};
  for (cluster_stats const& p : moved_part_) total = stats_sum_op{}(total, p);
  return total;
}

cluster_stats omp_backend::reduce(node_view const& nodes, task_view const& tasks) {
  if (!always_parallel_ && nodes.n_nodes < stats_parallel_from_) {
    return reduce_cluster_stats(thrust::cpp::par, nodes, tasks, steps_);
  }
  return reduce_cluster_stats(thrust::omp::par, nodes, tasks, steps_);
}

void omp_backend::domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                                  domain_index_view const& idx, std::span<std::int64_t> cap) {
  steps_.waits += 1;
  auto const k = static_cast<std::int32_t>(of.size());
  domain_fit_.resize(of.size() * static_cast<std::size_t>(nodes.n_nodes));
  // A domain's sum in one part: a few fast threads split the domains well
  // enough (4 parts measured the same at 10k and 100k, 64 cost 2%).
  std::int32_t const parts = 1;
  domain_part_.resize(of.size() * static_cast<std::size_t>(idx.n_domains) * parts);
  if (!always_parallel_ && static_cast<std::int64_t>(k) * idx.n_entries < parallel_threshold) {
    kernels::domain_capacity(thrust::cpp::par, nodes, classes, of.data(), k, idx, parts, domain_fit_.data(),
                             domain_part_.data(), cap.data(), steps_);
  } else {
    kernels::domain_capacity(thrust::omp::par, nodes, classes, of.data(), k, idx, parts, domain_fit_.data(),
                             domain_part_.data(), cap.data(), steps_);
  }
}

void omp_backend::place_tiers(std::span<tier_problem const> tiers, tier_results& out) {
  chain(tiers, out);
  steps_.waits += 1;
}

// One wait on a device for the chain and what follows it.
void omp_backend::place_tiers_then(std::span<tier_problem const> tiers, tier_results& out, follow_up const&) {
  chain(tiers, out);
  steps_.waits += 1;
}

void omp_backend::chain(std::span<tier_problem const> tiers, tier_results& out) {
  // A team only for a chain with enough bidding to split (nodes x rows).
  std::int64_t most = 0;
  for (auto const& t : tiers) most = std::max(most, static_cast<std::int64_t>(t.nodes.n_nodes) * t.n_rows);
  bool const big = always_parallel_ || most >= tier_team_threshold;
  int const threads = big ? tier_threads_ : 1;
  // On one worker the refresh reads F from the memo, where the chain's
  // tiers share one round's classes and tasks.
  if (threads == 1 && !tiers.empty() &&
      std::all_of(tiers.begin(), tiers.end(), [&](tier_problem const& t) {
        return t.classes.gpus == tiers[0].classes.gpus && t.classes.n_classes == tiers[0].classes.n_classes &&
               t.tasks.freq_ppm == tiers[0].tasks.freq_ppm && t.tasks.n_tasks == tiers[0].tasks.n_tasks &&
               t.nodes.gpu_free == tiers[0].nodes.gpu_free;
      })) {
    memo_tiers_.assign(tiers.begin(), tiers.end());
    if (frag_memos_.attach(memo_tiers_)) tiers = memo_tiers_;
  }
  run_chain_host(tiers, out, tier_arena_, threads);
  count_tier(steps_);
}

}  // namespace placer::kernels
