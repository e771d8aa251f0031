// The round pipeline: validate -> flatten -> score (backend) -> assign ->
// metrics (backend). Assignment here is host code over the score matrix; it
// commits replica by replica into the flattened node arrays and refreshes
// only the touched node's column, so no resource is ever over-committed.
#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <chrono>
#include <numeric>

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

namespace {

using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

/// Greedy assignment over the score matrix (also the kube-style baseline,
/// which scores every node on the host for each replica instead).
class assigner {
 public:
  assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, score_params p,
           bool matrix_mode)
      : in_(in), m_(m), scores_(scores), op_{m.nodes(), m.classes(), m.tasks(), p}, matrix_mode_(matrix_mode) {
    levels_ = std::max(in.state.topo.levels(), 1);
    paths_ = node_domain_paths(in.state);
  }

  /// Places job j (all replicas, or what fits; gangs all or nothing).
  void place(std::int32_t j, round_result& out) {
    auto const& job = in_.pending[j];
    std::int32_t const c = m_.job_class[j];
    std::int32_t const n_nodes = m_.n_nodes();
    bool any_feasible_ever = false;
    for (std::int32_t n = 0; n < n_nodes && !any_feasible_ever; ++n) any_feasible_ever = initially_feasible(c, n);
    if (!any_feasible_ever) {
      out.unplaced_jobs.push_back({j, unplaced_reason::no_feasible_node,
                                   "no node can host one replica (model, pool, size or health)"});
      return;
    }

    std::vector<replica_placement> placed;
    if (job.topo_mode == topology_mode::required && job.topology_level >= 0) {
      place_in_domain(job, c, placed);
      if (placed.empty() || (job.gang && static_cast<std::int32_t>(placed.size()) < job.replicas)) {
        release_all(c, placed);
        out.unplaced_jobs.push_back({j, unplaced_reason::topology_unsatisfiable,
                                     "no domain at level " + level_name(job.topology_level) + " holds the job"});
        return;
      }
    } else {
      place_replicas(job, c, -1, -1, job.replicas, placed);
    }

    auto const got = static_cast<std::int32_t>(placed.size());
    if (job.gang && got < job.replicas) {
      release_all(c, placed);
      out.unplaced_jobs.push_back({j, unplaced_reason::gang_incomplete,
                                   std::to_string(got) + " of " + std::to_string(job.replicas) +
                                       " replicas fit; gang takes nothing"});
      return;
    }
    if (got < job.replicas) {
      out.unplaced_jobs.push_back({j, unplaced_reason::insufficient_capacity,
                                   std::to_string(got) + " of " + std::to_string(job.replicas) + " replicas placed"});
    }
    if (got > 0) {
      out.metrics.jobs_placed += 1;
      out.metrics.replicas_placed += got;
      out.metrics.gpu_milli_placed += job.per_replica.gpu_milli_total() * got;
      out.placements.push_back({j, std::move(placed)});
    }
  }

 private:
  [[nodiscard]] bool initially_feasible(std::int32_t c, std::int32_t n) const {
    // Feasible now, or at least on the node's capacity (so a full node
    // counts as "insufficient capacity", not "no feasible node").
    if (scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n] >= 0) return true;
    if ((m_.flags[n] & node_flag_healthy) == 0) return false;
    auto const& nd = in_.state.nodes[n];
    auto const& cv = op_.cv;
    std::uint8_t const pool = m_.pool[n];
    bool const pool_ok = (cv.pool_mask[c] & pool) != 0 ||
                         (pool == pool_bit_inference && cv.loan_ok[c] != 0 && (m_.flags[n] & node_flag_loanable) != 0);
    if (!pool_ok || cv.cpu[c] > nd.cpu_milli_capacity || cv.mem[c] > nd.memory_mib_capacity) return false;
    if (cv.gpus[c] == 0) return true;
    if (m_.model[n] < 0 || ((cv.model_mask[c] >> m_.model[n]) & 1U) == 0) return false;
    return m_.gpu_capacity[n] / milli_per_gpu >= cv.gpus[c];
  }

  std::int32_t score(std::int32_t c, std::int32_t n) const {
    if (matrix_mode_) return scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n];
    return op_.score(c, n);  // kube-style: every node scored anew per replica
  }

  /// Topology bonus: replicas of one multi-replica job that cares about the
  /// network prefer nodes sharing deeper domains with its first replica.
  std::int64_t topo_bonus(job const& job, std::int32_t anchor, std::int32_t n) const {
    if (anchor < 0 || matrix_mode_ == false) return 0;
    if (n == anchor) return static_cast<std::int64_t>(in_.pol.w.topology) * 1000;
    std::int32_t shared = 0;
    for (std::int32_t l = levels_ - 1; l >= 0; --l) {
      auto const d = paths_[static_cast<std::size_t>(n) * levels_ + l];
      if (d >= 0 && d == paths_[static_cast<std::size_t>(anchor) * levels_ + l]) { shared = l + 1; break; }
    }
    return static_cast<std::int64_t>(in_.pol.w.topology) * 1000 * shared / (levels_ + 1);
  }

  void place_replicas(job const& job, std::int32_t c, std::int32_t level, std::int32_t domain, std::int32_t count,
                      std::vector<replica_placement>& placed) {
    bool const wants_locality =
        job.replicas > 1 && (job.gang || job.topo_mode != topology_mode::none || job.network_sensitivity > 0.0F);
    std::int32_t const n_nodes = m_.n_nodes();
    for (std::int32_t r = 0; r < count; ++r) {
      std::int32_t const anchor = wants_locality && !placed.empty() ? placed.front().node : -1;
      std::int32_t best = -1;
      std::int64_t best_s = -1;
      for (std::int32_t n = 0; n < n_nodes; ++n) {
        if (domain >= 0 && paths_[static_cast<std::size_t>(n) * levels_ + level] != domain) continue;
        std::int32_t const s0 = score(c, n);
        if (s0 < 0) continue;
        std::int64_t const s = s0 + topo_bonus(job, anchor, n);
        if (s > best_s) { best_s = s; best = n; }  // strict: lowest index wins ties
      }
      if (best < 0) return;
      placed.push_back(commit(best, c));
    }
  }

  /// Required topology: try domains of the level, best fit first (least
  /// free GPU that still covers the job), until one holds every replica.
  void place_in_domain(job const& job, std::int32_t c, std::vector<replica_placement>& placed) {
    std::int32_t const level = job.topology_level;
    std::vector<std::int64_t> free(in_.state.topo.domains.size(), 0);
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
      auto const d = paths_[static_cast<std::size_t>(n) * levels_ + level];
      if (d < 0) continue;
      for (auto g = m_.gpu_begin[n]; g < m_.gpu_begin[n + 1]; ++g) free[d] += m_.gpu_free[g];
    }
    std::int64_t const need = job.per_replica.gpu_milli_total() * job.replicas;
    std::vector<std::int32_t> order;
    for (std::int32_t d = 0; d < static_cast<std::int32_t>(free.size()); ++d) {
      if (in_.state.topo.domains[d].level == level && free[d] >= need) order.push_back(d);
    }
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return free[a] < free[b]; });
    for (auto d : order) {
      place_replicas(job, c, level, d, job.replicas, placed);
      if (static_cast<std::int32_t>(placed.size()) == job.replicas) return;
      release_all(c, placed);
    }
  }

  replica_placement commit(std::int32_t n, std::int32_t c) {
    auto const& cv = op_.cv;
    replica_placement rp;
    rp.node = n;
    rp.gpu_milli = cv.gpus[c] > 0 ? cv.milli[c] : milli_per_gpu;
    std::int32_t* f = m_.gpu_free.data() + m_.gpu_begin[n];
    std::int32_t const g = m_.gpu_begin[n + 1] - m_.gpu_begin[n];
    // The same rule as kernels::take_gpus, recording which GPUs were taken.
    std::vector<std::int32_t> before(f, f + g);
    if (!take_gpus(f, g, cv.gpus[c], cv.milli[c])) {
      throw logic_error(error_code::internal, "assignment chose a node whose GPUs do not fit");
    }
    for (std::int32_t i = 0; i < g; ++i) {
      if (f[i] != before[i]) rp.gpus.push_back(i);
    }
    m_.cpu_free[n] -= cv.cpu[c];
    m_.mem_free[n] -= cv.mem[c];
    if (m_.cpu_free[n] < 0 || m_.mem_free[n] < 0) {
      throw logic_error(error_code::internal, "assignment over-committed CPU or memory");
    }
    refresh(n);
    return rp;
  }

  void release_all(std::int32_t c, std::vector<replica_placement>& placed) {
    auto const& cv = op_.cv;
    for (auto const& rp : placed) {
      std::int32_t* f = m_.gpu_free.data() + m_.gpu_begin[rp.node];
      for (auto i : rp.gpus) f[i] += rp.gpu_milli;
      m_.cpu_free[rp.node] += cv.cpu[c];
      m_.mem_free[rp.node] += cv.mem[c];
      refresh(rp.node);
    }
    placed.clear();
  }

  /// Re-scores node n for every class after its free resources changed.
  void refresh(std::int32_t n) {
    if (!matrix_mode_) return;
    std::int32_t const n_nodes = m_.n_nodes();
    for (std::int32_t c = 0; c < m_.n_classes(); ++c) {
      scores_[static_cast<std::size_t>(c) * n_nodes + n] = op_.score(c, n);
    }
  }

  std::string level_name(std::int32_t l) const {
    auto const& names = in_.state.topo.level_names;
    return l >= 0 && l < static_cast<std::int32_t>(names.size()) ? "'" + names[l] + "'" : std::to_string(l);
  }

  round_input const& in_;
  round_matrices& m_;
  std::vector<std::int32_t>& scores_;
  score_cell_op op_;
  bool matrix_mode_;
  std::int32_t levels_ = 1;
  std::vector<std::int32_t> paths_;
};

/// Queue order. Placer: priority, then largest total GPU demand first (big
/// gangs are hardest to fit later), then submit time. Greedy and kube-style:
/// priority, then submit time (kube's PrioritySort), i.e. FIFO in a class.
std::vector<std::int32_t> job_order(round_input const& in) {
  std::vector<std::int32_t> order(in.pending.size());
  std::iota(order.begin(), order.end(), 0);
  bool const largest_first = in.pol.algo == algorithm::placer;
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    auto const& x = in.pending[a];
    auto const& y = in.pending[b];
    if (x.priority != y.priority) return x.priority > y.priority;
    if (largest_first) {
      auto const dx = x.per_replica.gpu_milli_total() * x.replicas;
      auto const dy = y.per_replica.gpu_milli_total() * y.replicas;
      if (dx != dy) return dx > dy;
    }
    return x.submit_time < y.submit_time;
  });
  return order;
}

void fill_stats(cluster_stats const& s, double& gar, double& gfr, double& frag) {
  gar = s.gpu_schedulable_milli > 0 ? static_cast<double>(s.gpu_allocated_milli) / s.gpu_schedulable_milli : 0.0;
  gfr = s.gpu_nodes > 0 ? static_cast<double>(s.partly_allocated_nodes) / s.gpu_nodes : 0.0;
  frag = s.gpu_free_milli > 0 ? static_cast<double>(s.frag_milli_ppm) / 1e6 / s.gpu_free_milli : 0.0;
}

}  // namespace

solver::solver(std::unique_ptr<kernels::backend> backend) : backend_(std::move(backend)) {
  PLACER_EXPECTS(backend_ != nullptr, "solver needs a backend");
}
solver::~solver() = default;
solver::solver(solver&&) noexcept = default;
solver& solver::operator=(solver&&) noexcept = default;

round_result solver::solve(round_input const& in) {
  auto const t_round = clock_type::now();
  round_result out;
  out.epoch = in.state.epoch;
  out.backend = backend_->description();

  auto t = clock_type::now();
  validate(in);
  out.timing.push_back({"validate", micros_since(t)});

  t = clock_type::now();
  round_matrices m = build_matrices(in);
  out.timing.push_back({"flatten", micros_since(t)});

  t = clock_type::now();
  cluster_stats const before = backend_->stats(m.nodes(), m.tasks());
  fill_stats(before, out.metrics.gar_before, out.metrics.gfr_before, out.metrics.frag_ratio_before);
  out.timing.push_back({"metrics_before", micros_since(t)});

  score_params p;
  p.w_binpack = in.pol.w.binpack;
  p.w_fragmentation = in.pol.w.fragmentation;
  p.w_pool_affinity = in.pol.w.pool_affinity;
  bool const kube = in.pol.algo == algorithm::kube_least_allocated || in.pol.algo == algorithm::kube_most_allocated;
  p.kube_mode = in.pol.algo == algorithm::kube_least_allocated ? 1 : in.pol.algo == algorithm::kube_most_allocated ? 2 : 0;

  std::vector<std::int32_t> scores(static_cast<std::size_t>(m.n_nodes()) * m.n_classes());
  t = clock_type::now();
  if (!kube) backend_->score(m.nodes(), m.classes(), m.tasks(), p, scores);
  out.timing.push_back({"score", micros_since(t)});

  t = clock_type::now();
  if (kube) {
    // The baseline filters and scores every node per replica; it still
    // needs the feasibility answer for "never feasible", so fill the matrix
    // on the host once (cheap relative to its per-replica scans).
    score_params q = p;
    score_cell_op const op{m.nodes(), m.classes(), m.tasks(), q};
    for (std::int32_t c = 0; c < m.n_classes(); ++c) {
      for (std::int32_t n = 0; n < m.n_nodes(); ++n) scores[static_cast<std::size_t>(c) * m.n_nodes() + n] = op.score(c, n);
    }
  }
  assigner a(in, m, scores, p, !kube);
  for (auto j : job_order(in)) {
    if (in.deadline_us > 0 && micros_since(t_round) > static_cast<double>(in.deadline_us)) {
      out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
      continue;
    }
    a.place(j, out);
  }
  out.timing.push_back({"assign", micros_since(t)});

  t = clock_type::now();
  cluster_stats const after = backend_->stats(m.nodes(), m.tasks());
  fill_stats(after, out.metrics.gar_after, out.metrics.gfr_after, out.metrics.frag_ratio_after);
  out.timing.push_back({"metrics_after", micros_since(t)});

  std::sort(out.placements.begin(), out.placements.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  std::sort(out.unplaced_jobs.begin(), out.unplaced_jobs.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
  out.timing.push_back({"total", micros_since(t_round)});
  return out;
}

}  // namespace placer
