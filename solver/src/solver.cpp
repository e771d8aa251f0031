// The round pipeline: validate -> flatten -> score (backend) -> assign
// (assigner.cpp: tiers, locality, one tier program per tier on the backend) ->
// metrics (backend), each stage timed into the result.
#include "assigner.hpp"
#include "policies/policies.hpp"

#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <chrono>

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

}  // namespace

struct solver::workspace {
  round_matrices m;
  std::vector<std::int32_t> scores;  ///< classes x nodes
  detail::assigner_scratch assign;
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

round_result solver::solve(round_input const& in, queue_memory* memory) {
  if (!in.pol.queue.any_cross_round() && !reclaim_possible(in)) return solve_one(in);
  // The cross-round policies call the one-round pipeline on sub-problems;
  // the metrics compare the request's cluster with the one the round leaves.
  auto const t_round = clock_type::now();
  step_counts const steps_round = backend_->steps();
  auto t = clock_type::now();
  validate(in);
  double const validate_us = micros_since(t);
  t = clock_type::now();
  cluster after_state;
  round_result out = detail::queue_round([this](round_input const& sub) { return solve_one(sub); }, in, memory,
                                         &after_state);
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
  std::sort(out.placements.begin(), out.placements.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  std::sort(out.unplaced_jobs.begin(), out.unplaced_jobs.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  step_counts const total = backend_->steps() - steps_round;
  out.timing.push_back({"total", micros_since(t_round), total.calls, total.waits});
  return out;
}

round_result solver::solve_one(round_input const& in) {
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
    out.timing.push_back({name, micros_since(t), d.calls, d.waits});
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
  stage_done("flatten");

  cluster_stats const before = backend_->stats(m.nodes(), m.tasks());
  fill_stats(before, out.metrics.gar_before, out.metrics.gfr_before, out.metrics.frag_ratio_before);
  stage_done("metrics_before");

  score_params p;
  p.w_binpack = in.pol.w.binpack;
  p.w_fragmentation = in.pol.w.fragmentation;
  p.w_pool_affinity = in.pol.w.pool_affinity;
  p.w_scarcity = in.pol.w.scarcity;
  // The one-job-at-a-time baselines score on the host per replica.
  bool const kube = in.pol.algo == algorithm::kube_least_allocated || in.pol.algo == algorithm::kube_most_allocated ||
                    in.pol.algo == algorithm::first_fit;
  p.kube_mode = in.pol.algo == algorithm::kube_least_allocated  ? 1
                : in.pol.algo == algorithm::kube_most_allocated ? 2
                : in.pol.algo == algorithm::first_fit           ? 3
                                                                : 0;

  // Every cell is written below (backend or host loop), so no zeroing.
  scores.resize(static_cast<std::size_t>(m.n_nodes()) * m.n_classes());
  if (!kube) backend_->score(m.nodes(), m.classes(), m.tasks(), p, scores);
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
  detail::assign_mode const mode = kube                               ? detail::assign_mode::kube
                                   : in.pol.algo == algorithm::greedy ? detail::assign_mode::greedy
                                                                      : detail::assign_mode::placer;
  detail::assigner a(in, m, scores, p, *backend_, mode, ws_->assign);
  a.run(out, [&] { return in.deadline_us > 0 && micros_since(t_round) > static_cast<double>(in.deadline_us); });
  stage_done("assign");

  cluster_stats const after = backend_->stats(m.nodes(), m.tasks());
  fill_stats(after, out.metrics.gar_after, out.metrics.gfr_after, out.metrics.frag_ratio_after);
  stage_done("metrics_after");

  std::sort(out.placements.begin(), out.placements.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  std::sort(out.unplaced_jobs.begin(), out.unplaced_jobs.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  step_counts const total = backend_->steps() - steps_round;
  out.timing.push_back({"total", micros_since(t_round), total.calls, total.waits});
  return out;
}

}  // namespace placer
