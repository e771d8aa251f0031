// The FGD paper's policies as `placer simulate` algorithms (see
// baseline_policies.hpp). The scores, the filter, M, node fragmentation and
// the GPU commit are the FGD experiment's own (fgd_policies.cpp); this file
// adds what a scheduling round needs around them:
//
// - A node view kept between rounds. Every round re-reads each node of the
//   round_input into an fgd::node_state (healthy GPUs only, in index order,
//   with a map back to the GPU index; GpuClustering's pod kinds counted from
//   the running jobs' replicas) and bumps the node's version only if
//   something changed, so cached fragmentation and FGD scores of untouched
//   nodes survive from round to round. Versions come from one counter and
//   are never reused, so a cache entry is valid exactly when its stamp
//   equals the node's version.
// - Feasibility as kernels/ops.hpp decides it: node_admits (healthy node;
//   own or shared pool, or a loanable inference node for training/batch
//   jobs with loaning on; GPU model allowed) and cell_feasible (CPU,
//   memory, GPUs: fgd::fits on the healthy GPUs). A job that no node could
//   ever hold (admission plus capacity) is NoFeasibleNode, as the solver's
//   assigner reports it.
// - Queue order: priority high first, then submit time, then index. Each
//   replica goes to the best-scoring feasible node (ties: the node earlier
//   in one seeded permutation per solve_fn, drawn on the first round as the
//   experiment draws it once per run); a multi-replica job is all or
//   nothing (rolled back, GangIncomplete).
// - M (FGD's typical task set, which FGD scores with): the running M of
//   every pod seen so far, or a fixed one (baseline_options). The reported
//   fragmentation ratio is the solver's (the round's pending and running
//   work as M), so that simulations compare algorithms on one measure.
#include <placer/sim/baseline_policies.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

namespace placer::sim {

namespace {

using fgd::node_state;
using fgd::pod;
using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

/// The FGD experiment's draw (fgd_experiment.cpp): 0..n-1.
std::size_t uniform(std::mt19937_64& rng, std::size_t n) {
  return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
}

struct named_policy {
  char const* name;
  fgd::policy pol;
};
constexpr std::array<named_policy, 6> policies{{{"random", fgd::policy::random},
                                                {"dot-prod", fgd::policy::dot_prod},
                                                {"gpu-packing", fgd::policy::gpu_packing},
                                                {"gpu-clustering", fgd::policy::gpu_clustering},
                                                {"best-fit", fgd::policy::best_fit},
                                                {"fgd", fgd::policy::fgd}}};

std::uint8_t pool_bit(pool_kind p) {  // kernels::pool_bit_*, as build_matrices sets them
  switch (p) {
    case pool_kind::training: return kernels::pool_bit_training;
    case pool_kind::inference: return kernels::pool_bit_inference;
    case pool_kind::shared: return kernels::pool_bit_shared;
  }
  return kernels::pool_bit_shared;
}

/// What a job's replicas may use besides capacity (ops.hpp node_admits).
struct admission {
  std::uint8_t pool_mask = 0;  ///< pools usable outright
  bool loan = false;           ///< may borrow loanable inference nodes
  node_constraints const* constraints = nullptr;  ///< selector, affinity, tolerations (against nodes)
  std::vector<node> const* nodes = nullptr;
};

/// Per-node facts the fgd::node_state does not hold.
struct node_extra {
  std::vector<std::int32_t> phys;  ///< view GPU -> GPU index in the cluster
  std::int64_t cpu_cap = 0, mem_cap = 0;
  std::uint8_t pool = kernels::pool_bit_shared;
  bool healthy = true, loanable = false;
};

struct fgd_cell {
  std::uint64_t stamp = 0;  ///< node version the score was computed for; 0 = none
  std::int32_t score = 0;
  std::int32_t gpu = -1;
};

std::vector<std::string> split_spec(std::string const& spec) {
  std::vector<std::string> out;
  if (spec.empty()) return out;
  std::string cur;
  for (char c : spec) {
    if (c == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool same_tasks(std::vector<fgd::typical_task> const& a, std::vector<fgd::typical_task> const& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].cpu != b[i].cpu || a[i].milli != b[i].milli || a[i].gpus != b[i].gpus ||
        a[i].model_mask != b[i].model_mask || a[i].freq != b[i].freq) {
      return false;
    }
  }
  return true;
}

/// Why a job is not valid input (validate.cpp's demand rules); "" if it is.
std::string invalid_reason(job const& j) {
  auto const& d = j.per_replica;
  if (j.replicas < 1) return "replicas must be at least 1";
  if (d.gpus < 0 || d.gpus > 64) return "demand.gpus must be in 0..64";
  if (d.gpus > 0 && (d.gpu_milli < 1 || d.gpu_milli > milli_per_gpu)) return "demand.gpu_milli must be in 1..1000";
  if (d.gpus > 1 && d.gpu_milli != milli_per_gpu) return "a fractional gpu_milli is only allowed with gpus == 1";
  if (d.cpu_milli < 0 || d.memory_mib < 0) return "negative CPU or memory demand";
  return "";
}

class engine {
 public:
  engine(std::string name, fgd::policy pol, baseline_options const& o)
      : name_(std::move(name)), pol_(pol), rng_(o.rng ? *o.rng : std::mt19937_64(o.seed)), fixed_m_(o.tasks) {}

  round_result solve(round_input const& in) {
    auto const t_round = clock_type::now();
    round_result out;
    out.epoch = in.state.epoch;
    out.backend = "baseline:" + name_;

    auto t = clock_type::now();
    sync(in);
    update_m(in);
    out.timing.push_back({"sync", micros_since(t)});
    fill_stats(out.metrics.gar_before, out.metrics.gfr_before, out.metrics.frag_ratio_before);

    t = clock_type::now();
    std::vector<std::int32_t> order(in.pending.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      auto const& x = in.pending[static_cast<std::size_t>(a)];
      auto const& y = in.pending[static_cast<std::size_t>(b)];
      if (x.priority != y.priority) return x.priority > y.priority;
      return x.submit_time < y.submit_time;
    });
    failed_.clear();
    for (auto j : order) {
      if (in.deadline_us > 0 && micros_since(t_round) > static_cast<double>(in.deadline_us)) {
        out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
        continue;
      }
      place_job(in, j, out);
    }
    out.timing.push_back({"assign", micros_since(t)});

    fill_stats(out.metrics.gar_after, out.metrics.gfr_after, out.metrics.frag_ratio_after);
    solver_fragmentation(in, out);
    std::sort(out.placements.begin(), out.placements.end(), [](auto const& a, auto const& b) { return a.job < b.job; });
    std::sort(out.unplaced_jobs.begin(), out.unplaced_jobs.end(),
              [](auto const& a, auto const& b) { return a.job < b.job; });
    out.timing.push_back({"total", micros_since(t_round)});
    return out;
  }

 private:
  // ------------------------------------------------------------ node view

  void sync(round_input const& in) {
    auto const& nodes = in.state.nodes;
    auto const n = nodes.size();
    // GPU model ids: node order of first appearance, as fgd::make_workload
    // and build_matrices number them (a fixed M's masks use these ids).
    models_tmp_.clear();
    for (auto const& nd : nodes) {
      if (nd.gpu_count() == 0 || std::find(models_tmp_.begin(), models_tmp_.end(), nd.gpu_model) != models_tmp_.end())
        continue;
      if (models_tmp_.size() >= 64) throw std::invalid_argument("baseline: more than 64 distinct GPU models");
      models_tmp_.push_back(nd.gpu_model);
    }
    bool all_stale = false;
    if (models_tmp_ != models_) {
      models_ = models_tmp_;
      models_changed_ = true;
      all_stale = true;
    }
    if (n != view_.size() || rank_.size() != n) {
      view_.assign(n, node_state{});
      extra_.assign(n, node_extra{});
      version_.assign(n, 0);
      frag_.assign(n, 0.0);
      frag_stamp_.assign(n, 0);
      for (auto& c : cells_) c.assign(n, fgd_cell{});
      draw_rank(n);
      all_stale = true;
    }
    // GpuClustering's kinds: the GPU pods each node holds, by pod_kind.
    kinds_.assign(n, {});
    for (auto const& r : in.running) {
      pod q;
      q.gpus = r.per_replica.gpus;
      q.milli = q.gpus > 0 ? r.per_replica.gpu_milli : 0;
      int const k = fgd::pod_kind(q);
      if (k < 0) continue;
      for (auto const& rp : r.replicas) {
        if (rp.node >= 0 && static_cast<std::size_t>(rp.node) < n) ++kinds_[static_cast<std::size_t>(rp.node)][k];
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      bool const changed = read_node(i, nodes[i]);
      if (changed || all_stale) version_[i] = ++clock_;
    }
  }

  /// Fisher-Yates over 0..n-1 with the experiment's draws; rank = position.
  void draw_rank(std::size_t n) {
    std::vector<std::int32_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[uniform(rng_, i)]);
    rank_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) rank_[static_cast<std::size_t>(perm[i])] = static_cast<std::int32_t>(i);
  }

  /// Reads node i into the view; true if anything a score depends on changed.
  bool read_node(std::size_t i, node const& nd) {
    auto& v = view_[i];
    auto& x = extra_[i];
    bool ch = false;
    auto set = [&ch](auto& dst, auto const& src) {
      if (dst != src) {
        dst = src;
        ch = true;
      }
    };
    set(v.cpu_cap, nd.cpu_milli_capacity);
    set(v.cpu_free, nd.cpu_milli_free);
    set(v.mem_free, nd.memory_mib_free);
    std::int32_t model = -1;
    if (nd.gpu_count() > 0) {
      model = static_cast<std::int32_t>(std::find(models_.begin(), models_.end(), nd.gpu_model) - models_.begin());
    }
    set(v.model, model);
    set(v.kinds, kinds_[i]);
    // Unhealthy GPUs are left out of the view: they are neither free nor
    // in use (the solver gives them free = 0 and no capacity). Only
    // GpuPacking's "fully idle node" test can tell the two apart.
    std::size_t k = 0;
    std::int64_t total = 0;
    for (std::int32_t g = 0; g < nd.gpu_count(); ++g) {
      if (!nd.gpu_is_healthy(static_cast<std::size_t>(g))) continue;
      auto const f = nd.gpu_free_milli[static_cast<std::size_t>(g)];
      if (k < v.gpu_free.size()) {
        if (v.gpu_free[k] != f || x.phys[k] != g) {
          v.gpu_free[k] = f;
          x.phys[k] = g;
          ch = true;
        }
      } else {
        v.gpu_free.push_back(f);
        x.phys.push_back(g);
        ch = true;
      }
      ++k;
      total += f;
    }
    if (k != v.gpu_free.size()) {
      v.gpu_free.resize(k);
      x.phys.resize(k);
      ch = true;
    }
    set(v.gpu_free_total, total);
    // Admission facts are checked live, never cached: no version bump needed.
    x.cpu_cap = nd.cpu_milli_capacity;
    x.mem_cap = nd.memory_mib_capacity;
    x.pool = pool_bit(nd.pool);
    x.healthy = nd.healthy;
    x.loanable = nd.loanable;
    return ch;
  }

  void stale_all() {
    for (auto& ver : version_) ver = ++clock_;
  }

  // -------------------------------------------------------------------- M

  pod pod_of(job const& j) const {
    pod p;
    p.cpu = j.per_replica.cpu_milli;
    p.mem = j.per_replica.memory_mib;
    p.gpus = j.per_replica.gpus;
    p.milli = p.gpus > 0 ? j.per_replica.gpu_milli : 0;
    if (p.gpus > 0) p.model_mask = model_mask(j.allowed_gpu_models, models_);
    for (auto const& m : j.allowed_gpu_models) p.spec += (p.spec.empty() ? "" : "|") + m;
    return p;
  }

  void update_m(round_input const& in) {
    if (fixed_m_) {
      if (first_round_) tasks_ = *fixed_m_;
      first_round_ = false;
      models_changed_ = false;
      return;
    }
    bool grew = false;
    if (models_changed_) {
      // Masks are model-id bitmasks: re-derive them from the specs.
      for (auto& [k, e] : counts_) {
        if (std::get<2>(k) > 0) e.model_mask = model_mask(split_spec(std::get<3>(k)), models_);
      }
      models_changed_ = false;
      grew = true;
    }
    if (first_round_) {
      // Work already running when the solver starts counts as seen (no
      // allowed models on a running_job: any model, as build_matrices does).
      for (auto const& r : in.running) {
        if (!seen_.insert(r.name).second) continue;
        pod p;
        p.cpu = r.per_replica.cpu_milli;
        p.gpus = r.per_replica.gpus;
        p.milli = p.gpus > 0 ? r.per_replica.gpu_milli : 0;
        fgd::count_task(counts_, p, static_cast<std::int64_t>(r.replicas.size()));
        grew = true;
      }
      first_round_ = false;
    }
    for (auto const& j : in.pending) {
      if (!seen_.insert(j.name).second) continue;
      fgd::count_task(counts_, pod_of(j), std::max<std::int64_t>(j.replicas, 0));
      grew = true;
    }
    if (!grew) return;
    auto m = fgd::typical_tasks(counts_);
    if (same_tasks(m, tasks_)) return;
    tasks_ = std::move(m);
    stale_all();  // every fragmentation and FGD score depends on M
  }

  // -------------------------------------------------------------- metrics

  double frag_of(std::size_t i) {
    if (frag_stamp_[i] != version_[i]) {
      frag_[i] = fgd::node_fragmentation(view_[i], tasks_);
      frag_stamp_[i] = version_[i];
    }
    return frag_[i];
  }

  /// The reported FGD fragmentation ratios, before and after the round, as
  /// the solver reports its own (metrics_before and metrics_after): against
  /// the round's typical task set (build_matrices: pending and running
  /// work), not this engine's M, so that a simulation compares every
  /// algorithm on one measure.
  void solver_fragmentation(round_input const& in, round_result& out) {
    round_matrices m = build_matrices(in);
    auto ratio = [&] {
      kernels::node_stats_op const op{m.nodes(), m.tasks()};
      std::int64_t free = 0, frag = 0;
      for (std::int32_t n = 0; n < m.n_nodes(); ++n) {
        auto const s = op(n);
        free += s.gpu_free_milli;
        frag += s.frag_milli_ppm;
      }
      return free > 0 ? static_cast<double>(frag) / 1e6 / static_cast<double>(free) : 0.0;
    };
    out.metrics.frag_ratio_before = ratio();
    for (auto const& p : out.placements) {
      auto const& d = in.pending[static_cast<std::size_t>(p.job)].per_replica;
      for (auto const& rp : p.replicas) {
        auto const n = static_cast<std::size_t>(rp.node);
        for (auto g : rp.gpus) m.gpu_free[static_cast<std::size_t>(m.gpu_begin[n] + g)] -= rp.gpu_milli;
        m.cpu_free[n] -= d.cpu_milli;
        m.mem_free[n] -= d.memory_mib;
      }
    }
    out.metrics.frag_ratio_after = ratio();
  }

  /// The solver's cluster statistics (node_stats_op): healthy nodes with
  /// healthy GPUs; fragmentation against this engine's M (the reported
  /// ratio is solver_fragmentation's).
  void fill_stats(double& gar, double& gfr, double& frag_ratio) {
    std::int64_t cap = 0, free = 0;
    std::int32_t gpu_nodes = 0, partly = 0;
    double frag = 0;
    for (std::size_t i = 0; i < view_.size(); ++i) {
      auto const& v = view_[i];
      if (!extra_[i].healthy || v.n_gpus() == 0) continue;
      std::int64_t const c = static_cast<std::int64_t>(v.n_gpus()) * milli_per_gpu;
      cap += c;
      free += v.gpu_free_total;
      ++gpu_nodes;
      partly += (v.gpu_free_total > 0 && v.gpu_free_total < c) ? 1 : 0;
      frag += frag_of(i);
    }
    gar = cap > 0 ? static_cast<double>(cap - free) / static_cast<double>(cap) : 0.0;
    gfr = gpu_nodes > 0 ? static_cast<double>(partly) / gpu_nodes : 0.0;
    frag_ratio = free > 0 ? frag / static_cast<double>(free) : 0.0;
  }

  // ----------------------------------------------------------- placement

  [[nodiscard]] bool admits(std::size_t i, admission const& a) const {
    auto const& x = extra_[i];
    if (!x.healthy) return false;
    if (a.constraints != nullptr && !placer::admits((*a.nodes)[i], *a.constraints)) return false;
    return (a.pool_mask & x.pool) != 0 || (x.pool == kernels::pool_bit_inference && a.loan && x.loanable);
  }

  /// ops.hpp cell_feasible: admission, then CPU, memory, model and GPUs.
  [[nodiscard]] bool feasible(std::size_t i, pod const& p, admission const& a) const {
    return admits(i, a) && fgd::fits(view_[i], p);
  }

  /// Could one replica ever run somewhere (admission and capacity)? The
  /// assigner's initially_feasible.
  [[nodiscard]] bool ever_feasible(pod const& p, admission const& a) const {
    for (std::size_t i = 0; i < view_.size(); ++i) {
      if (!admits(i, a)) continue;
      auto const& x = extra_[i];
      if (p.cpu > x.cpu_cap || p.mem > x.mem_cap) continue;
      if (p.gpus == 0) return true;
      auto const& v = view_[i];
      if (v.model >= 0 && ((p.model_mask >> v.model) & 1U) != 0 && v.n_gpus() >= p.gpus) return true;
    }
    return false;
  }

  [[nodiscard]] bool better(int s, std::int32_t n, int best, std::int32_t best_n) const {
    return best_n < 0 || s > best || (s == best && rank_[static_cast<std::size_t>(n)] < rank_[static_cast<std::size_t>(best_n)]);
  }

  /// The node (and for a share, the GPU in view indices; -1 = tightest)
  /// the policy picks for one replica, or -1.
  std::int32_t pick(pod const& p, admission const& a, std::int32_t& gpu) {
    gpu = -1;
    auto const n = static_cast<std::int32_t>(view_.size());
    std::int32_t node = -1;
    int best = -1;
    switch (pol_) {
      case fgd::policy::random: {
        feasible_.clear();
        for (std::int32_t i = 0; i < n; ++i) {
          if (feasible(static_cast<std::size_t>(i), p, a)) feasible_.push_back(i);
        }
        if (feasible_.empty()) return -1;
        node = feasible_[uniform(rng_, feasible_.size())];
        if (p.fractional()) {
          auto const& v = view_[static_cast<std::size_t>(node)];
          std::vector<std::int32_t> ok;
          for (std::int32_t g = 0; g < v.n_gpus(); ++g) {
            if (v.gpu_free[static_cast<std::size_t>(g)] >= p.milli) ok.push_back(g);
          }
          gpu = ok[uniform(rng_, ok.size())];
        }
        return node;
      }
      case fgd::policy::best_fit: {
        feasible_.clear();
        raw_.clear();
        int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
        for (std::int32_t i = 0; i < n; ++i) {
          if (!feasible(static_cast<std::size_t>(i), p, a)) continue;
          int const s = fgd::best_fit_raw_score(view_[static_cast<std::size_t>(i)], p);
          feasible_.push_back(i);
          raw_.push_back(s);
          lo = std::min(lo, s);
          hi = std::max(hi, s);
        }
        for (std::size_t k = 0; k < feasible_.size(); ++k) {
          int const s = fgd::best_fit_normalise(raw_[k], lo, hi);
          if (better(s, feasible_[k], best, node)) {
            best = s;
            node = feasible_[k];
          }
        }
        return node;
      }
      case fgd::policy::fgd: {
        auto& cells = cells_for(p);
        for (std::int32_t i = 0; i < n; ++i) {
          auto const ui = static_cast<std::size_t>(i);
          if (!feasible(ui, p, a)) continue;
          auto& c = cells[ui];
          if (c.stamp != version_[ui]) {
            std::int32_t g = -1;
            c.score = fgd::fgd_score(view_[ui], p, tasks_, frag_of(ui), &g);
            c.gpu = g;
            c.stamp = version_[ui];
          }
          if (better(c.score, i, best, node)) {
            best = c.score;
            node = i;
            gpu = c.gpu;
          }
        }
        return node;
      }
      default: {
        for (std::int32_t i = 0; i < n; ++i) {
          auto const ui = static_cast<std::size_t>(i);
          if (!feasible(ui, p, a)) continue;
          auto const& v = view_[ui];
          int s = 0;
          switch (pol_) {
            case fgd::policy::dot_prod: s = fgd::dot_prod_score(v, p); break;
            case fgd::policy::gpu_clustering: s = fgd::gpu_clustering_score(v, p); break;
            case fgd::policy::gpu_packing: s = fgd::gpu_packing_score(v, p); break;
            default: break;
          }
          if (better(s, i, best, node)) {
            best = s;
            node = i;
          }
        }
        return node;
      }
    }
  }

  /// FGD score cache of one replica shape: (CPU, #GPUs, per-GPU milli) is
  /// all F_after depends on (the experiment's key). Bounded: past 1024
  /// shapes the cache starts over.
  std::vector<fgd_cell>& cells_for(pod const& p) {
    auto const key = std::tuple{p.cpu, p.gpus, p.milli};
    auto it = cell_ids_.find(key);
    if (it == cell_ids_.end()) {
      if (cell_ids_.size() >= 1024) {
        cell_ids_.clear();
        cells_.clear();
      }
      it = cell_ids_.emplace(key, static_cast<std::int32_t>(cells_.size())).first;
      cells_.emplace_back(view_.size());
    }
    return cells_[static_cast<std::size_t>(it->second)];
  }

  void place_job(round_input const& in, std::int32_t j, round_result& out) {
    auto const& job = in.pending[static_cast<std::size_t>(j)];
    if (auto why = invalid_reason(job); !why.empty()) {
      out.unplaced_jobs.push_back({j, unplaced_reason::invalid_job, why});
      return;
    }
    pod const p = pod_of(job);
    admission const a{static_cast<std::uint8_t>(job.kind == job_kind::inference
                                                    ? (kernels::pool_bit_inference | kernels::pool_bit_shared)
                                                    : (kernels::pool_bit_training | kernels::pool_bit_shared)),
                      job.kind != job_kind::inference && in.pol.queue.loaning, &job.constraints, &in.state.nodes};
    bool const all_or_nothing = job.gang || job.replicas > 1;
    // Capacity only shrinks inside a round (until a rollback), so a class
    // whose first replica found no node fails at once for later jobs.
    // (A job with node constraints is a class of its own.)
    auto const cls = std::tuple{p.cpu, p.mem, p.gpus, p.milli, p.model_mask, a.pool_mask, a.loan,
                                job.constraints.empty() ? -1 : j};
    auto fail = [&](bool never) {
      if (never) {
        out.unplaced_jobs.push_back({j, unplaced_reason::no_feasible_node,
                                     "no node can host one replica (model, pool, size or health)"});
      } else if (all_or_nothing) {
        out.unplaced_jobs.push_back({j, unplaced_reason::gang_incomplete,
                                     "the cluster cannot hold all " + std::to_string(job.replicas) +
                                         " replicas now; gang takes nothing"});
      } else {
        out.unplaced_jobs.push_back({j, unplaced_reason::insufficient_capacity, "no capacity for a replica this round"});
      }
    };
    if (auto it = failed_.find(cls); it != failed_.end()) {
      fail(it->second);
      return;
    }

    saved_.clear();
    placement pl;
    pl.job = j;
    for (std::int32_t r = 0; r < job.replicas; ++r) {
      std::int32_t gpu = -1;
      std::int32_t const node = pick(p, a, gpu);
      if (node < 0) {
        if (r == 0) {
          bool const never = !ever_feasible(p, a);
          failed_.emplace(cls, never);
          fail(never);
        } else {
          rollback();
          fail(false);
        }
        return;
      }
      auto const un = static_cast<std::size_t>(node);
      if (std::none_of(saved_.begin(), saved_.end(), [&](auto const& s) { return std::get<0>(s) == node; })) {
        saved_.emplace_back(node, view_[un], version_[un]);
      }
      // The experiment's commit: a share on the policy's GPU (tightest when
      // the policy has no say), whole GPUs the lowest-indexed idle ones.
      auto const used = fgd::commit(view_[un], p, p.fractional() ? gpu : -1);
      version_[un] = ++clock_;
      replica_placement rp;
      rp.node = node;
      rp.gpu_milli = p.gpus > 0 ? p.milli : milli_per_gpu;
      for (auto g : used) rp.gpus.push_back(extra_[un].phys[static_cast<std::size_t>(g)]);
      pl.replicas.push_back(std::move(rp));
    }
    out.metrics.jobs_placed += 1;
    out.metrics.replicas_placed += job.replicas;
    out.metrics.gpu_milli_placed += job.per_replica.gpu_milli_total() * job.replicas;
    out.placements.push_back(std::move(pl));
  }

  /// Undoes the current job's commits. The restored state is the one its
  /// old version described, so the old version (and its caches) comes back.
  void rollback() {
    for (auto& [node, state, ver] : saved_) {
      view_[static_cast<std::size_t>(node)] = std::move(state);
      version_[static_cast<std::size_t>(node)] = ver;
    }
    saved_.clear();
    failed_.clear();  // capacity came back
  }

  std::string name_;
  fgd::policy pol_;
  std::mt19937_64 rng_;
  std::optional<std::vector<fgd::typical_task>> fixed_m_;

  // Node view.
  std::vector<std::string> models_, models_tmp_;
  bool models_changed_ = false;
  std::vector<node_state> view_;
  std::vector<node_extra> extra_;
  std::vector<std::array<std::int32_t, fgd::n_pod_kinds>> kinds_;
  std::vector<std::uint64_t> version_;
  std::uint64_t clock_ = 0;
  std::vector<std::int32_t> rank_;

  // M and the caches that depend on it.
  bool first_round_ = true;
  std::unordered_set<std::string> seen_;
  fgd::task_counts counts_;
  std::vector<fgd::typical_task> tasks_;
  std::vector<double> frag_;
  std::vector<std::uint64_t> frag_stamp_;
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::int32_t> cell_ids_;
  std::vector<std::vector<fgd_cell>> cells_;

  // One round's scratch.
  std::vector<std::int32_t> feasible_, raw_;
  std::vector<std::tuple<std::int32_t, node_state, std::uint64_t>> saved_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int32_t, std::int32_t, std::uint64_t, std::uint8_t, bool,
                      std::int32_t>,
           bool>
      failed_;  ///< class -> never feasible
};

}  // namespace

std::vector<std::string> baseline_policy_names() {
  std::vector<std::string> out;
  for (auto const& p : policies) out.emplace_back(p.name);
  return out;
}

bool is_baseline_policy(std::string const& name) {
  return std::any_of(policies.begin(), policies.end(), [&](auto const& p) { return name == p.name; });
}

solve_fn baseline_solver(std::string const& name, baseline_options const& opts) {
  for (auto const& p : policies) {
    if (name != p.name) continue;
    auto e = std::make_shared<engine>(name, p.pol, opts);
    return [e](round_input const& in) { return e->solve(in); };
  }
  std::string list;
  for (auto const& p : policies) list += (list.empty() ? "" : ", ") + std::string(p.name);
  throw std::invalid_argument("unknown baseline policy '" + name + "' (" + list + ")");
}

solve_fn baseline_solver(std::string const& name, std::uint64_t seed) {
  baseline_options o;
  o.seed = seed;
  return baseline_solver(name, o);
}

}  // namespace placer::sim
