// The round pipeline: validate -> flatten -> score (backend) -> assign
// (assigner.cpp: tiers, locality, one tier program per tier on the backend) ->
// metrics (backend), each stage timed into the result.
#include "assigner.hpp"
#include "queue_order.hpp"
#include "policies/policies.hpp"
#include "quotas.hpp"

#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>

namespace placer {

using namespace placer::kernels;

char const* to_string(unplaced_reason r) {
  switch (r) {
    case unplaced_reason::none: return "None";
    case unplaced_reason::no_feasible_node: return "NoFeasibleNode";
    case unplaced_reason::insufficient_capacity: return "InsufficientCapacity";
    case unplaced_reason::gang_incomplete: return "GangIncomplete";
    case unplaced_reason::topology_unsatisfiable: return "TopologyUnsatisfiable";
    case unplaced_reason::invalid_job: return "InvalidJob";
    case unplaced_reason::deadline_exceeded: return "DeadlineExceeded";
    case unplaced_reason::reserved: return "Reserved";
    case unplaced_reason::deferred: return "Deferred";
    case unplaced_reason::quota_exceeded: return "QuotaExceeded";
    case unplaced_reason::queue_blocked: return "QueueBlocked";
  }
  return "Unknown";
}

algorithm parse_algorithm(std::string const& name) {
  if (name == "placer") return algorithm::placer;
  if (name == "greedy") return algorithm::greedy;
  if (name == "kube-least" || name == "kube_least_allocated") return algorithm::kube_least_allocated;
  if (name == "kube-most" || name == "kube_most_allocated") return algorithm::kube_most_allocated;
  if (name == "first-fit" || name == "first_fit") return algorithm::first_fit;
  throw logic_error(error_code::invalid_argument,
                    "unknown algorithm '" + name + "' (placer, greedy, kube-least, kube-most, first-fit)");
}

char const* algorithm_name(algorithm a) {
  switch (a) {
    case algorithm::placer: return "placer";
    case algorithm::greedy: return "greedy";
    case algorithm::kube_least_allocated: return "kube-least";
    case algorithm::kube_most_allocated: return "kube-most";
    case algorithm::first_fit: return "first-fit";
  }
  return "unknown";
}

queue_order parse_queue_order(std::string const& name) {
  if (name == "fifo") return queue_order::fifo;
  if (name == "pack") return queue_order::pack;
  if (name == "strict") return queue_order::strict;
  throw logic_error(error_code::invalid_argument, "unknown queue order '" + name + "' (fifo, pack, strict)");
}

char const* queue_order_name(queue_order o) {
  switch (o) {
    case queue_order::fifo: return "fifo";
    case queue_order::pack: return "pack";
    case queue_order::strict: return "strict";
  }
  return "unknown";
}

namespace {

using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

void fill_stats(cluster_stats const& s, double& gar, double& gfr, double& frag) {
  gar = s.gpu_schedulable_milli > 0 ? static_cast<double>(s.gpu_allocated_milli) / s.gpu_schedulable_milli : 0.0;
  gfr = s.gpu_nodes > 0 ? static_cast<double>(s.partly_allocated_nodes) / s.gpu_nodes : 0.0;
  frag = s.gpu_free_milli > 0 ? static_cast<double>(s.frag_milli_ppm) / 1e6 / s.gpu_free_milli : 0.0;
}

/// Sorts a round's placements or unplaced jobs (jobs 0 .. n_jobs - 1, each
/// at most once; else std::sort) by job: each entry's rank counted over
/// the jobs, then the entries moved along the permutation's cycles, at
/// most one swap an entry, where std::sort's swaps of placements (vectors
/// inside) were 1.9% of the 10k round. `rank` and `to` are reused scratch.
template <class T>
void sort_by_job(std::vector<T>& v, std::size_t n_jobs, std::vector<std::int32_t>& rank, std::vector<std::int32_t>& to) {
  rank.assign(n_jobs + 1, 0);
  for (auto const& e : v) {
    auto const j = static_cast<std::size_t>(e.job);
    if (e.job < 0 || j >= n_jobs || rank[j + 1] != 0) {
      std::sort(v.begin(), v.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
      return;
    }
    rank[j + 1] = 1;
  }
  for (std::size_t j = 0; j < n_jobs; ++j) rank[j + 1] += rank[j];  // rank[j]: the entries of jobs before j
  to.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) to[i] = rank[static_cast<std::size_t>(v[i].job)];
  for (std::size_t i = 0; i < v.size(); ++i) {
    while (to[i] != static_cast<std::int32_t>(i)) {
      auto const t = static_cast<std::size_t>(to[i]);
      std::swap(v[i], v[t]);
      std::swap(to[i], to[t]);
    }
  }
}

}  // namespace

struct solver::workspace {
  round_matrices m;
  std::vector<std::int32_t> scores;  ///< classes x nodes
  detail::assigner_scratch assign;
  // The repair search's copies: the state after scoring, and the best so far.
  round_matrices m_scored, m_best;
  std::vector<std::int32_t> scores_scored;
  /// Whether the host holds the score stage's cells (a resident backend
  /// keeps them when nothing of the assignment reads them on the host).
  bool scored_on_host = true;
  explain_scratch explain;
  // keep_order's: the order it leaves the repair search (the jobs strict
  // order blocks, skipped), and why each of those waits.
  detail::reorder kept;
  std::vector<unplaced> blocked;  ///< why each job in kept.skip waits
  // Slurm's round (the linear candidate) in jobs started and GPU milli
  // placed: queue order prefers rounds with no fewer of either (-1: none).
  std::int64_t floor_jobs = -1, floor_gpu_milli = 0;
  detail::repack_scratch repack;  ///< the packing repair's buffers
  std::vector<std::int32_t> sort_rank, sort_to;  ///< sort_by_job's
  /// A round's placements and unplaced jobs sorted by job (sort_by_job).
  void sort_result(round_result& out, std::size_t n_jobs) {
    sort_by_job(out.placements, n_jobs, sort_rank, sort_to);
    sort_by_job(out.unplaced_jobs, n_jobs, sort_rank, sort_to);
  }
};

solver::solver(std::unique_ptr<kernels::backend> backend)
    : backend_(std::move(backend)), ws_(std::make_unique<workspace>()) {
  PLACER_EXPECTS(backend_ != nullptr, "solver needs a backend");
}
solver::~solver() = default;
solver::solver(solver&&) noexcept = default;
solver& solver::operator=(solver&&) noexcept = default;

namespace {

/// Loaning needs the policy layer only when inference work is pending while
/// training runs on, or could be lent this round, loanable inference nodes
/// (a reclaim may be due).
bool reclaim_possible(round_input const& in) {
  if (!in.pol.queue.loaning || !in.pol.queue.auto_reclaim) return false;
  bool inference_pending = false, other_pending = false;
  for (auto const& j : in.pending) (j.kind == job_kind::inference ? inference_pending : other_pending) = true;
  if (!inference_pending) return false;
  auto on_inference_node = [&](replica_placement const& rp) {
    return rp.node >= 0 && static_cast<std::size_t>(rp.node) < in.state.nodes.size() &&
           in.state.nodes[static_cast<std::size_t>(rp.node)].pool == pool_kind::inference;
  };
  for (auto const& r : in.running) {
    if (r.kind == job_kind::inference) continue;
    if (r.loaned || std::any_of(r.replicas.begin(), r.replicas.end(), on_inference_node)) return true;
  }
  return other_pending && std::any_of(in.state.nodes.begin(), in.state.nodes.end(), [](node const& n) {
           return n.pool == pool_kind::inference && n.loanable;
         });
}

}  // namespace

namespace {

/// A sub-round of `in` on `state` with `running`: its policy and time, no
/// pending jobs and no queues, with the given budget.
round_input without_jobs(round_input const& in, cluster state, std::vector<running_job> running,
                         std::uint64_t deadline_us) {
  round_input sub;
  sub.state = std::move(state);
  sub.running = std::move(running);
  sub.pol = in.pol;
  sub.now = in.now;
  sub.deadline_us = deadline_us;
  return sub;
}

/// explain_unplaced as the round's "explain" stage, before "total".
void explain_stage(round_input const& in, round_result& out, explain_scratch& scratch) {
  if (out.unplaced_jobs.empty()) return;
  auto const t = clock_type::now();
  explain_unplaced(in, out, &scratch);
  double const us = micros_since(t);
  auto total = std::find_if(out.timing.begin(), out.timing.end(), [](auto const& s) { return s.stage == "total"; });
  if (total != out.timing.end()) total->micros += us;
  out.timing.insert(total, {"explain", us});
}

}  // namespace

round_result solver::solve(round_input const& in, queue_memory* memory) {
  if (in.pol.age.weight > 0) return solve(detail::aged(in), memory);
  if (in.queues.empty()) return solve_admitted(in, memory);
  // Queues (quotas.hpp): the jobs that would take a queue past its bound
  // are left out (QuotaExceeded) and the rest solved as a round of their
  // own. Without cross-round policies other than preemption, the bound is
  // first the deserved share, and a second pass lends what that leaves up
  // to the limits; with them, the limit in one pass. Preemption keeps the
  // guarantees and reclaims for them.
  auto const t = clock_type::now();
  validate(in);
  auto const& qp = in.pol.queue;
  bool const at_most_preemption = qp.backfill == backfill_mode::off && !qp.elastic && !qp.delay_scheduling &&
                                  !qp.network_preemption && qp.reclaim_nodes == 0;
  bool const two_passes = at_most_preemption && !reclaim_possible(in);
  auto plan = detail::plan_quotas(in, two_passes ? detail::admission::by_share : detail::admission::by_limit);
  if (plan.refused.empty() && plan.frozen.empty()) return solve_admitted(in, memory);
  round_input sub = without_jobs(in, in.state, in.running, in.deadline_us);
  sub.queues = in.queues;  // the guarantees preemption keeps
  for (auto r : plan.frozen) {
    auto& rj = sub.running[static_cast<std::size_t>(r)];
    rj.max_replicas = static_cast<std::int32_t>(rj.replicas.size());
  }
  sub.pending.reserve(plan.admitted.size());
  for (auto j : plan.admitted) sub.pending.push_back(in.pending[static_cast<std::size_t>(j)]);
  double const admit_us = micros_since(t);
  round_result out = solve_admitted(sub, memory);
  auto const back = [&](std::int32_t& j) {
    if (j >= 0) j = plan.admitted[static_cast<std::size_t>(j)];
  };
  for (auto& p : out.placements) back(p.job);
  for (auto& u : out.unplaced_jobs) back(u.job);
  for (auto& r : out.reservations) back(r.job);
  for (auto& p : out.preemptions) back(p.for_job);
  double second_us = 0;
  auto const spent_us = static_cast<std::uint64_t>(micros_since(t));
  if (two_passes && (in.deadline_us == 0 || spent_us < in.deadline_us)) {
    // What the admitted jobs that did not fit were holding is free again,
    // and what the queues within their shares did not use may be borrowed:
    // the refused ones get a second admission by limit against what was
    // placed, and the admitted among them are solved on the cluster it leaves.
    auto const t2 = clock_type::now();
    second_pass(in, in.deadline_us == 0 ? 0 : in.deadline_us - spent_us, plan.refused, out);
    second_us = micros_since(t2);
  }
  for (auto& u : plan.refused) out.unplaced_jobs.push_back(std::move(u));
  sort_by_job(out.unplaced_jobs, in.pending.size(), ws_->sort_rank, ws_->sort_to);
  out.timing.insert(out.timing.begin(), {"quota", admit_us + second_us});
  for (auto& s : out.timing) {
    if (s.stage == "total") s.micros += admit_us + second_us;
  }
  return out;
}

void solver::second_pass(round_input const& in, std::uint64_t deadline_us, std::vector<unplaced>& refused,
                         round_result& out) {
  if (refused.empty()) return;
  // The first pass's preemptions and placements applied to the cluster.
  detail::work_state ws(in);
  for (auto const& p : out.preemptions) {
    for (std::size_t r = 0; r < in.running.size(); ++r) {
      if (ws.alive[r] != 0 && in.running[r].name == p.job) ws.stop(r);
    }
  }
  for (auto const& p : out.placements) ws.start(p.job, p.replicas);
  std::vector<running_job> running;
  for (std::size_t r = 0; r < ws.running.size(); ++r) {
    if (ws.alive[r] != 0) running.push_back(std::move(ws.running[r]));
  }
  round_input sub = without_jobs(in, std::move(ws.state), std::move(running), deadline_us);
  sub.queues = in.queues;
  std::vector<std::int32_t> from;  // sub's pending -> in's
  for (auto const& u : refused) {
    from.push_back(u.job);
    sub.pending.push_back(in.pending[static_cast<std::size_t>(u.job)]);
  }
  auto plan = detail::plan_quotas(sub, detail::admission::by_limit);
  // Those still refused say why against the limits and what was placed.
  for (auto& u : plan.refused) u.job = from[static_cast<std::size_t>(u.job)];
  refused = std::move(plan.refused);
  if (plan.admitted.empty()) return;
  round_input round2 = std::move(sub);
  std::vector<job> admitted;
  std::vector<std::int32_t> to;
  for (auto j : plan.admitted) {
    admitted.push_back(std::move(round2.pending[static_cast<std::size_t>(j)]));
    to.push_back(from[static_cast<std::size_t>(j)]);
  }
  round2.pending = std::move(admitted);
  round2.queues.clear();
  // Lending preempts nothing: the second pass is a plain round.
  round2.pol.queue.preemption = false;
  round2.pol.queue.auto_reclaim = false;
  round_result r2 = solve_admitted(round2, nullptr);
  auto const back = [&](std::int32_t j) { return to[static_cast<std::size_t>(j)]; };
  for (auto& p : r2.placements) {
    p.job = back(p.job);
    out.placements.push_back(std::move(p));
  }
  for (auto& u : r2.unplaced_jobs) {
    u.job = back(u.job);
    refused.push_back(std::move(u));
  }
  sort_by_job(out.placements, in.pending.size(), ws_->sort_rank, ws_->sort_to);
  auto& m = out.metrics;
  m.gar_after = r2.metrics.gar_after;
  m.gfr_after = r2.metrics.gfr_after;
  m.frag_ratio_after = r2.metrics.frag_ratio_after;
  m.jobs_placed += r2.metrics.jobs_placed;
  m.replicas_placed += r2.metrics.replicas_placed;
  m.gpu_milli_placed += r2.metrics.gpu_milli_placed;
}

round_result solver::solve_admitted(round_input const& in, queue_memory* memory) {
  if (!in.pol.queue.any_cross_round() && !reclaim_possible(in)) {
    round_result out = solve_one(in);
    // The matrices are this round's: their constraint groups and node
    // states spare the explanations an evaluation a node, and the
    // assignment's domain paths a walk of the topology.
    auto& x = ws_->explain;
    x.round = &ws_->m;
    x.node_paths = &ws_->assign.paths;
    explain_stage(in, out, x);
    x.round = nullptr;
    x.node_paths = nullptr;
    return out;
  }
  // The cross-round policies call the one-round pipeline on sub-problems;
  // the metrics compare the request's cluster with the one the round leaves.
  auto const t_round = clock_type::now();
  step_counts const steps_round = backend_->steps();
  auto t = clock_type::now();
  validate(in);
  double const validate_us = micros_since(t);
  t = clock_type::now();
  cluster after_state;
  // One budget for the whole round, every sub-problem included: past it a
  // sub-problem is not solved (its jobs DeadlineExceeded), and the
  // policies stop between steps and jobs.
  std::optional<clock_type::time_point> deadline_at;
  if (in.deadline_us > 0) deadline_at = t_round + std::chrono::microseconds(in.deadline_us);
  auto const late = [&] { return deadline_at && clock_type::now() > *deadline_at; };
  auto const core = [&](round_input const& sub) {
    if (!late()) return solve_one(sub, late);
    round_result none;
    none.epoch = sub.state.epoch;
    for (std::size_t j = 0; j < sub.pending.size(); ++j) {
      none.unplaced_jobs.push_back({static_cast<std::int32_t>(j), unplaced_reason::deadline_exceeded,
                                    "round deadline reached"});
    }
    return none;
  };
  round_result out = detail::queue_round(core, in, memory, &after_state, late);
  double const policies_us = micros_since(t);
  out.epoch = in.state.epoch;
  out.backend = backend_->description();
  t = clock_type::now();
  round_input probe;  // pending jobs define the FGD typical task set
  probe.state = in.state;
  probe.pending = in.pending;
  round_matrices m = build_matrices(probe);
  fill_stats(backend_->stats(m.nodes(), m.tasks()), out.metrics.gar_before, out.metrics.gfr_before,
             out.metrics.frag_ratio_before);
  probe.state = std::move(after_state);
  m = build_matrices(probe);
  fill_stats(backend_->stats(m.nodes(), m.tasks()), out.metrics.gar_after, out.metrics.gfr_after,
             out.metrics.frag_ratio_after);
  out.metrics.jobs_placed = static_cast<std::int32_t>(out.placements.size());
  out.metrics.replicas_placed = 0;
  out.metrics.gpu_milli_placed = 0;
  for (auto const& p : out.placements) {
    auto const& d = in.pending[static_cast<std::size_t>(p.job)].per_replica;
    out.metrics.replicas_placed += static_cast<std::int32_t>(p.replicas.size());
    out.metrics.gpu_milli_placed += d.gpu_milli_total() * static_cast<std::int64_t>(p.replicas.size());
  }
  out.timing.clear();
  out.timing.push_back({"validate", validate_us});
  out.timing.push_back({"policies", policies_us});
  out.timing.push_back({"metrics", micros_since(t)});
  ws_->sort_result(out, in.pending.size());
  step_counts const total = backend_->steps() - steps_round;
  out.timing.push_back({"total", micros_since(t_round), total.calls, total.waits, total.bytes_up, total.bytes_down, total.grid_syncs});
  explain_stage(in, out, ws_->explain);
  return out;
}

namespace {

/// The repair search re-runs the assignment at most max_repair_tries times,
/// and only while tries x nodes x pending jobs stays within repair_cells
/// with at least min_repair_tries left: small rounds, where one early
/// choice decides a large share of the round, get the search (up to 8,192
/// node x job cells); big rounds (the demo's 64 x 300, openb, 10k) skip it.
constexpr std::int32_t max_repair_tries = 48;
constexpr std::int32_t min_repair_tries = 8;
constexpr std::int64_t repair_cells = std::int64_t{1} << 16;
/// Steps of one path of the search that may lose value.
constexpr std::int32_t max_downhill_steps = 2;
/// Cells stacking's consolidation may score in a round (detail::consolidate):
/// about 0.1 s at worst; a 64-node Slurm round scores a few thousand.
constexpr std::int64_t consolidate_budget = std::int64_t{1} << 20;

/// The packing repair (detail::repack) places a round's single-node
/// replicas again while nodes x those replicas stays within this: the
/// rounds of a cluster's life (a few jobs a round on up to thousands of
/// nodes; a 24-node simulated cluster's whole queue), not one-shot batches
/// such as the 10k, 100k and openb rounds (1.2M, 58M and 2.4M).
constexpr std::int64_t repack_cells = std::int64_t{1} << 18;
/// The linear candidate (solver::linear_candidate) runs while nodes x
/// pending jobs stays within this: rounds the size of a Slurm bridge's (64
/// nodes and up to 256 jobs; 0.2 ms there). One greedy pass on the host
/// that builds a second result: in larger rounds it would cost time and
/// allocations a steady stream of rounds does not otherwise pay
/// (HotPath.SteadyRoundsAllocateOnlyTheResult: 2,048 nodes x 24 jobs).
constexpr std::int64_t linear_cells = std::int64_t{1} << 14;
/// What `replicas` replicas of a job are worth: GPU milli plus one per
/// replica (so CPU-only work counts), the objective of the optimality tests.
std::int64_t value_of(job const& j, std::int64_t replicas) { return (j.per_replica.gpu_milli_total() + 1) * replicas; }

/// The round's priority levels, highest first.
std::vector<std::int32_t> priority_levels(round_input const& in) {
  std::vector<std::int32_t> levels;
  for (auto const& j : in.pending) levels.push_back(j.priority);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

/// Per priority level, highest level first: placed value (pack), or jobs
/// started and then placed value (queue order: between rounds that keep
/// the promise, the one that starts more jobs). Results compare
/// lexicographically: more at a higher level wins.
std::vector<std::int64_t> level_values(round_input const& in, std::vector<std::int32_t> const& levels,
                                       round_result const& r) {
  bool const jobs = in.pol.order != queue_order::pack;
  std::size_t const per = jobs ? 2 : 1;
  std::vector<std::int64_t> v(levels.size() * per, 0);
  for (auto const& pl : r.placements) {
    if (pl.replicas.empty()) continue;
    auto const& j = in.pending[static_cast<std::size_t>(pl.job)];
    auto const l = static_cast<std::size_t>(std::lower_bound(levels.begin(), levels.end(), j.priority, std::greater<>()) -
                                            levels.begin());
    if (jobs) v[l * per] += 1;
    v[l * per + per - 1] += value_of(j, static_cast<std::int64_t>(pl.replicas.size()));
  }
  return v;
}

bool contains(std::vector<std::int32_t> const& v, std::int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/// Queue order's preference between two rounds of the same jobs: +1 when a
/// starts the earlier job where their started jobs first differ, walking
/// `fifo` (priority, then submission order), -1 when b does, 0 when they
/// start the same jobs. A job placed in part has started.
int earlier_jobs(std::size_t n_jobs, std::vector<std::int32_t> const& fifo, round_result const& a, round_result const& b) {
  std::vector<std::uint8_t> started(n_jobs, 0);
  for (auto const& pl : a.placements) {
    if (!pl.replicas.empty()) started[static_cast<std::size_t>(pl.job)] |= 1;
  }
  for (auto const& pl : b.placements) {
    if (!pl.replicas.empty()) started[static_cast<std::size_t>(pl.job)] |= 2;
  }
  for (auto j : fifo) {
    auto const s = started[static_cast<std::size_t>(j)];
    if (s == 1) return 1;
    if (s == 2) return -1;
  }
  return 0;
}

/// PLACER_LINEAR_ONLY set (a check, not a setting): a fifo round with the
/// linear candidate is that candidate, nothing after it, so
/// bench/slurm/offline_mix.py --linear-only can compare its placements with
/// its model of Slurm's job by job.
bool linear_only() {
  static bool const only = std::getenv("PLACER_LINEAR_ONLY") != nullptr;
  return only;
}

/// The jobs round r starts (a placement with replicas).
std::int64_t jobs_started(round_result const& r) {
  return std::count_if(r.placements.begin(), r.placements.end(), [](auto const& pl) { return !pl.replicas.empty(); });
}

/// Whether round r starts no fewer jobs and places no fewer GPUs than
/// Slurm's round of the same queue (the linear candidate; none: true).
bool meets_floor(std::int64_t floor_jobs, std::int64_t floor_gpu_milli, round_result const& r) {
  return floor_jobs < 0 || (jobs_started(r) >= floor_jobs && r.metrics.gpu_milli_placed >= floor_gpu_milli);
}

/// `out` takes a trial's decisions (its timing and the rest stay).
void adopt(round_result& out, round_result const& trial) {
  out.placements = trial.placements;
  out.unplaced_jobs = trial.unplaced_jobs;
  out.metrics.jobs_placed = trial.metrics.jobs_placed;
  out.metrics.replicas_placed = trial.metrics.replicas_placed;
  out.metrics.gpu_milli_placed = trial.metrics.gpu_milli_placed;
}

}  // namespace

std::int32_t solver::repair_tries(round_input const& in) {
  auto const cells = static_cast<std::int64_t>(in.state.nodes.size()) * static_cast<std::int64_t>(in.pending.size());
  if (in.pending.size() < 2 || cells == 0) return 0;
  auto const tries = std::min<std::int64_t>(max_repair_tries, repair_cells / cells);
  return tries < min_repair_tries ? 0 : static_cast<std::int32_t>(tries);
}

void solver::repair(round_input const& in, kernels::score_params const& p, std::int32_t tries,
                    std::function<bool()> const& out_of_time, round_result& out) {
  // Largest-first tiers can give a node to a big job that a gang or a
  // constrained job needed more. The search re-runs the assignment with a
  // changed order (detail::reorder) and walks paths of steps:
  //   - promote: an unplaced job goes ahead of its priority level; kept when
  //     it gets placed and the round's placed value (per level, highest
  //     first) does not drop, so a path crosses plateaus where one promotion
  //     displaces a job that the next re-seats. A job that stays unplaced
  //     even when promoted is not tried again on the path;
  //   - demote, when no promotion is kept: a job placed now goes after its
  //     level (least value first), kept only when the value grows;
  //   - otherwise the promotion that lost least, at most max_downhill_steps
  //     times per path.
  // Two paths: from the round as assigned, and from the order where locality
  // jobs rank by their whole job's GPUs. The result is the best round seen.
  // Deterministic: candidates come in a fixed order, and only the deadline
  // depends on the clock.
  auto const levels = priority_levels(in);
  round_matrices& m = ws_->m;
  auto best = level_values(in, levels, out);
  ws_->m_best = m;
  auto job_value = [&](std::int32_t j) {
    auto const& jb = in.pending[static_cast<std::size_t>(j)];
    return value_of(jb, jb.replicas);
  };
  detail::reorder order;
  round_result trial;
  // Under queue order a round is kept only if it overtakes no one.
  auto keeps_order = [&] {
    return in.pol.order == queue_order::pack ||
           !detail::overtakes(in, trial, ws_->assign.fifo, ws_->assign.fifo_keys.priority, ws_->assign.group_of);
  };
  // One assignment in `order` from the scored state; kept if the best yet.
  auto assign = [&] {
    restore_scored(p);
    trial = round_result{};
    detail::assigner(in, m, ws_->scores, p, *backend_, detail::assign_mode::placer, ws_->assign)
        .run(trial, out_of_time, order);
    trial.unplaced_jobs.insert(trial.unplaced_jobs.end(), ws_->blocked.begin(), ws_->blocked.end());
    auto value = level_values(in, levels, trial);
    // Under queue order, among rounds that keep the promise: one with no
    // fewer jobs and GPUs than Slurm's round first, then more jobs started,
    // then more placed (per level, both in `value`), then the one that
    // starts the earlier job where they first differ.
    bool better = value > best;
    if (in.pol.order != queue_order::pack) {
      bool const floor_trial = meets_floor(ws_->floor_jobs, ws_->floor_gpu_milli, trial);
      bool const floor_out = meets_floor(ws_->floor_jobs, ws_->floor_gpu_milli, out);
      better = floor_trial != floor_out ? floor_trial
               : value != best          ? value > best
                                        : earlier_jobs(in.pending.size(), ws_->assign.fifo, trial, out) > 0;
    }
    if (better && keeps_order()) {
      best = value;
      adopt(out, trial);
      ws_->m_best = m;
    }
    return value;
  };
  auto placed = [&](std::int32_t j) {
    return std::any_of(trial.placements.begin(), trial.placements.end(), [&](placement const& pl) { return pl.job == j; });
  };
  std::vector<std::int32_t> candidates;
  std::vector<std::uint8_t> hopeless(in.pending.size());
  std::vector<unplaced> unplaced_now;
  std::vector<placement> placed_now;
  for (bool const whole_jobs : {false, true}) {
    std::int32_t path_tries = whole_jobs ? tries : tries / 2;  // the first path's leftovers go to the second
    tries -= path_tries;
    order = ws_->kept;
    order.whole_jobs = whole_jobs;
    std::fill(hopeless.begin(), hopeless.end(), 0);
    auto current = best;
    unplaced_now = out.unplaced_jobs;
    placed_now = out.placements;
    if (whole_jobs) {
      if (path_tries == 0 || out_of_time()) break;
      --path_tries;
      current = assign();
      unplaced_now = trial.unplaced_jobs;
      placed_now = trial.placements;
    }
    std::int32_t downhills_left = max_downhill_steps;
    // Tries one step; keeps it (and its round as the path's) when `keep` says so.
    auto step = [&](std::vector<std::int32_t>& list, std::int32_t j, auto keep) {
      --path_tries;
      list.push_back(j);
      auto value = assign();
      if (!keep(value)) {
        list.pop_back();
        return false;
      }
      current = std::move(value);
      unplaced_now = std::move(trial.unplaced_jobs);
      placed_now = std::move(trial.placements);
      return true;
    };
    for (bool moved = true; moved && path_tries > 0 && !out_of_time();) {
      moved = false;
      // Promotions: highest priority, then most value first; ties by index.
      candidates.clear();
      for (auto const& u : unplaced_now) {
        if (detail::waits_for_capacity(u.reason) && hopeless[static_cast<std::size_t>(u.job)] == 0) {
          candidates.push_back(u.job);
        }
      }
      std::sort(candidates.begin(), candidates.end(), [&](std::int32_t a, std::int32_t b) {
        auto const pa = in.pending[static_cast<std::size_t>(a)].priority;
        auto const pb = in.pending[static_cast<std::size_t>(b)].priority;
        if (pa != pb) return pa > pb;
        if (job_value(a) != job_value(b)) return job_value(a) > job_value(b);
        return a < b;
      });
      std::int32_t downhill = -1;  // the placed promotion that lost least
      std::vector<std::int64_t> downhill_value;
      for (auto j : candidates) {
        if (path_tries == 0 || out_of_time()) break;
        moved = step(order.first, j, [&](std::vector<std::int64_t> const& value) {
          if (!placed(j)) {
            hopeless[static_cast<std::size_t>(j)] = 1;
            return false;
          }
          if (value >= current) return true;
          if (downhill < 0 || value > downhill_value) {
            downhill = j;
            downhill_value = value;
          }
          return false;
        });
        if (moved) break;
      }
      // Demotions: a job placed now that the path has not moved, least value first.
      candidates.clear();
      for (auto const& pl : placed_now) {
        if (!contains(order.first, pl.job) && !contains(order.last, pl.job)) candidates.push_back(pl.job);
      }
      std::sort(candidates.begin(), candidates.end(), [&](std::int32_t a, std::int32_t b) {
        return job_value(a) != job_value(b) ? job_value(a) < job_value(b) : a < b;
      });
      for (auto j : candidates) {
        if (moved || path_tries == 0 || out_of_time()) break;
        moved = step(order.last, j, [&](std::vector<std::int64_t> const& value) { return value > current; });
      }
      if (!moved && downhill >= 0 && downhills_left > 0 && path_tries > 0 && !out_of_time()) {
        --downhills_left;
        moved = step(order.first, downhill, [](auto const&) { return true; });
      }
    }
    tries += path_tries;
  }
  std::swap(m, ws_->m_best);  // the best round's cluster state, for the metrics
}

void solver::restore_scored(kernels::score_params const& p) {
  ws_->m = ws_->m_scored;
  if (ws_->scored_on_host) ws_->scores = ws_->scores_scored;
  backend_->host_wrote_all();  // the bound arrays, restored
  if (ws_->scored_on_host) return;
  // The cells stayed on the device: scored again, and this time read.
  auto const& m = ws_->m;
  backend_->score(m.nodes(), m.classes(), m.tasks(), p, ws_->scores);
  ws_->scored_on_host = true;
  ws_->scores_scored = ws_->scores;
}

void solver::keep_order(round_input const& in, kernels::score_params const& p,
                        std::function<bool()> const& out_of_time, round_result& out) {
  // Every job in submission order takes the best cells left (strict: a
  // queue stops at its first job that cannot start): each is tried against
  // exactly the jobs ahead of it.
  restore_scored(p);
  round_result fifo;
  detail::assigner(in, ws_->m, ws_->scores, p, *backend_, detail::assign_mode::greedy, ws_->assign).run(fifo, out_of_time);
  adopt(out, fifo);
  for (auto const& u : fifo.unplaced_jobs) {
    if (u.reason != unplaced_reason::queue_blocked) continue;
    ws_->kept.skip.push_back(u.job);  // the repair search leaves them out too
    ws_->blocked.push_back(u);
  }
}

void solver::linear_candidate(round_input const& in, kernels::score_params const& p,
                              std::function<bool()> const& out_of_time, round_result& out) {
  // Every job in submission order, each where Slurm's cons_tres would put
  // it: Slurm's own round of this queue. Which later jobs fit depends on
  // where the earlier ones went: the tier assignment keeps scarce models
  // and whole nodes free for the jobs that need them, the linear choice
  // leaves other holes. Both keep the promise (this one by construction:
  // each job was tried against exactly the jobs ahead of it); the round
  // keeps whichever starts more jobs, then places more, then starts the
  // earlier job, and the repair search after it keeps no round that starts
  // fewer jobs or places fewer GPUs than this one (ws_->floor_*).
  ws_->m_best = ws_->m;
  restore_scored(p);
  round_result lin;
  detail::assigner a(in, ws_->m, ws_->scores, p, *backend_, detail::assign_mode::greedy, ws_->assign);
  a.linear(true);
  a.run(lin, out_of_time);
  bool const whole = std::none_of(lin.unplaced_jobs.begin(), lin.unplaced_jobs.end(), [](unplaced const& u) {
    return u.reason == unplaced_reason::deadline_exceeded;
  });  // cut short by the deadline: not a candidate
  if (whole) {
    ws_->floor_jobs = jobs_started(lin);
    ws_->floor_gpu_milli = lin.metrics.gpu_milli_placed;
    auto const levels = priority_levels(in);
    auto const lv = level_values(in, levels, lin), ov = level_values(in, levels, out);
    bool const floor_out = meets_floor(ws_->floor_jobs, ws_->floor_gpu_milli, out);
    if (linear_only() || !floor_out || lv > ov || (lv == ov && earlier_jobs(in.pending.size(), ws_->assign.fifo, lin, out) > 0)) {
      adopt(out, lin);
      return;
    }
  }
  ws_->m = ws_->m_best;  // the round kept: its state back (into the bound buffers)
  backend_->host_wrote_all();
}

round_result solver::solve_one(round_input const& in, std::function<bool()> const& round_late) {
  auto const t_round = clock_type::now();
  step_counts const steps_round = backend_->steps();
  round_result out;
  out.timing.reserve(8);
  out.placements.reserve(in.pending.size());
  out.epoch = in.state.epoch;
  out.backend = backend_->description();

  // Each stage's wall time and backend steps.
  auto t = clock_type::now();
  step_counts steps_stage = backend_->steps();
  auto stage_done = [&](char const* name) {
    step_counts const d = backend_->steps() - steps_stage;
    out.timing.push_back({name, micros_since(t), d.calls, d.waits, d.bytes_up, d.bytes_down, d.grid_syncs});
    t = clock_type::now();
    steps_stage = backend_->steps();
  };
  validate(in);
  stage_done("validate");

  // The round's buffers are the solver's, reused: after a round of this size
  // flatten, score and assign allocate nothing but the result.
  round_matrices& m = ws_->m;
  std::vector<std::int32_t>& scores = ws_->scores;

  build_matrices(in, m);
  // The one-job-at-a-time baselines score on the host per replica.
  bool const kube = in.pol.algo == algorithm::kube_least_allocated || in.pol.algo == algorithm::kube_most_allocated ||
                    in.pol.algo == algorithm::first_fit;
  // Every cell is written below (backend or host loop), so no zeroing.
  scores.resize(static_cast<std::size_t>(m.n_nodes()) * m.n_classes());
  stage_done("flatten");

  // The round stays on a backend with memory of its own until it ends
  // (residency: backend::bind_round), however it ends.
  struct binding {
    kernels::backend& b;
    ~binding() { b.unbind_round(); }
  } const bound{*backend_};
  if (!kube) {
    backend_->bind_round({m.nodes(), m.classes(), m.tasks(), scores.data(), m.gpu_free.data(), m.cpu_free.data(),
                          m.mem_free.data()});
  }

  // The statistics before: queued, taken with those after (a device
  // backend brings them down at the round's next wait, not one of its own).
  backend_->stats_begin(m.nodes(), m.tasks());
  stage_done("metrics_before");

  score_params p;
  p.w_binpack = in.pol.w.binpack;
  p.w_fragmentation = in.pol.w.fragmentation;
  p.w_pool_affinity = in.pol.w.pool_affinity;
  p.w_scarcity = in.pol.w.scarcity;
  p.w_affinity = in.pol.w.affinity;
  p.kube_mode = in.pol.algo == algorithm::kube_least_allocated  ? 1
                : in.pol.algo == algorithm::kube_most_allocated ? 2
                : in.pol.algo == algorithm::first_fit           ? 3
                                                                : 0;

  std::int32_t tries = !kube && in.pol.algo == algorithm::placer ? repair_tries(in) : 0;
  bool const repack = in.pol.algo == algorithm::placer && in.pol.repack;
  std::int64_t replicas = 0;
  for (auto const& j : in.pending) replicas += j.replicas;
  bool const repack_small = repack && replicas * static_cast<std::int64_t>(in.state.nodes.size()) <= repack_cells;
  // A resident backend keeps the cells where nothing of the round reads
  // them on the host: the tier assignment's own rounds (its locality jobs
  // are the chains' tiers; no repair search, no packing repair from the
  // scored cells). Queue order's second assignment, if it comes, scores
  // again.
  ws_->scored_on_host = true;
  detail::assign_mode const mode = kube                               ? detail::assign_mode::kube
                                   : in.pol.algo == algorithm::greedy ? detail::assign_mode::greedy
                                                                      : detail::assign_mode::placer;
  detail::assigner assign(in, m, scores, p, *backend_, mode, ws_->assign);
  if (!kube) {
    bool const whole = in.pol.algo != algorithm::placer || tries > 0 || repack_small;
    bool const read = whole || detail::verify_scores();
    ws_->scored_on_host = backend_->score_then(m.nodes(), m.classes(), m.tasks(), p, scores, read);
  }
  stage_done("score");

  if (kube) {
    // The baseline filters and scores every node per replica; it still
    // needs the feasibility answer for "never feasible", so fill the matrix
    // on the host once (cheap relative to its per-replica scans).
    score_cell_op const op{m.nodes(), m.classes(), m.tasks(), p};
    for (std::int32_t c = 0; c < m.n_classes(); ++c) {
      for (std::int32_t n = 0; n < m.n_nodes(); ++n) scores[static_cast<std::size_t>(c) * m.n_nodes() + n] = op.score(c, n);
    }
  }
  auto const out_of_time = [&] {
    return (in.deadline_us > 0 && micros_since(t_round) > static_cast<double>(in.deadline_us)) ||
           (round_late && round_late());
  };
  bool linear_ran = false;
  bool const ordered = mode == detail::assign_mode::placer && in.pol.order != queue_order::pack;
  // The packing repair reads the score stage's cells of the nodes it finds
  // as they were: kept for the rounds it surely runs on (whatever the
  // assignment places, within its budget), and kept anyway for the others.
  bool const scored_kept = tries > 0 || ordered || repack_small;
  if (scored_kept) {
    ws_->m_scored = m;
    if (ws_->scored_on_host) ws_->scores_scored = scores;
  }
  assign.stats_after(true);
  if (in.deadline_us > 0) assign.deadline(t_round + std::chrono::microseconds(in.deadline_us));
  assign.run(out, out_of_time);
  stage_done("assign");
  ws_->kept = {};
  ws_->blocked.clear();
  ws_->floor_jobs = -1;
  ws_->floor_gpu_milli = 0;
  if (ordered) {
    if (detail::overtakes(in, out, ws_->assign.fifo, ws_->assign.fifo_keys.priority, ws_->assign.group_of)) {
      keep_order(in, p, out_of_time, out);
      stage_done("order");
    }
  }
  auto const waits = [&] {
    return std::any_of(out.unplaced_jobs.begin(), out.unplaced_jobs.end(),
                       [](unplaced const& u) { return detail::waits_for_capacity(u.reason); });
  };
  // fifo, a small round with a job waiting: Slurm's node choice as a
  // second candidate.
  if (ordered && in.pol.order == queue_order::fifo &&
      static_cast<std::int64_t>(in.state.nodes.size()) * static_cast<std::int64_t>(in.pending.size()) <= linear_cells &&
      waits() && !out_of_time()) {
    linear_candidate(in, p, out_of_time, out);
    stage_done("linear");
    linear_ran = true;
  }
  if (linear_ran && linear_only()) tries = 0;
  if (tries > 0 && !out.unplaced_jobs.empty()) {
    repair(in, p, tries, out_of_time, out);
    stage_done("repair");
  }
  // The packing repair: the round's single-node jobs placed again one at a
  // time on the same scores, largest first (detail::repack).
  if (repack && !(linear_ran && linear_only()) &&
      detail::repack(in, m, p, out, *backend_, repack_cells, ws_->repack,
                     scored_kept && ws_->scored_on_host ? detail::scored_round{&ws_->m_scored, &ws_->scores_scored}
                                                        : detail::scored_round{}) > 0) {
    stage_done("repack");
  }
  // Stacking packs the round's small jobs onto as few nodes as they fit.
  // Under queue order not while a job waits for capacity: the room its
  // moves free could be room that job needed, with later jobs placed.
  if (in.pol.stacking && mode == detail::assign_mode::placer && (in.pol.order == queue_order::pack || !waits()) &&
      !(linear_ran && linear_only())) {
    detail::consolidate(in, m, p, out, *backend_, consolidate_budget);
    stage_done("stack");
  }

  cluster_stats const after = backend_->stats_after(m.nodes(), m.tasks());
  fill_stats(after, out.metrics.gar_after, out.metrics.gfr_after, out.metrics.frag_ratio_after);
  fill_stats(backend_->stats_end(), out.metrics.gar_before, out.metrics.gfr_before, out.metrics.frag_ratio_before);
  stage_done("metrics_after");

  ws_->sort_result(out, in.pending.size());
  step_counts const total = backend_->steps() - steps_round;
  out.timing.push_back({"total", micros_since(t_round), total.calls, total.waits, total.bytes_up, total.bytes_down, total.grid_syncs});
  return out;
}

}  // namespace placer
