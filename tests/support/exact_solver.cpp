// The test-only exact solver: builds one round as a MIP for GLPK's
// branch-and-cut, solves it, and turns the solution back into a round_result
// (see exact_solver.hpp for the objective and the feasibility rules).
//
// Variables (only where the pair or triple can ever be feasible):
//   y[j][n]    integer 0..ub  replicas of job j on node n
//   x[j]       binary         gang j placed (sum_n y[j][n] = R_j * x[j])
//   u[n][g]    binary         GPU g of node n held whole (only GPUs that are
//                             healthy and fully free); the per-job w[j][n][g]
//                             summed over j, see the comment at its rows
//   f[j][n][g] integer        fractional replicas of job j on GPU g
//   d[j][D]    binary         domain D of the job's required level chosen
// Rows: replicas per job (gang equality or <= R_j); sum_j gpus_j * y[j][n] =
// sum_g u[n][g] per node; sum_g f = y per (job, node); per GPU
// 1000 * u + sum milli * f <= free; per node CPU and memory; sum_D d <= 1 and
// y[j][n] <= ub * d[j][dom(n)]; loads of identical GPUs non-increasing.
// Objective: maximise sum (gpu_milli_total + 1) * y[j][n].
#include "exact_solver.hpp"

#include <placer/topology/error.hpp>

#include <glpk.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace placer::testing_support {

namespace {

/// Pool rule of solver/src/matrices.cpp + kernels::cell_feasible.
bool pool_allows(job const& j, node const& n) {
  if (j.kind == job_kind::inference) return n.pool != pool_kind::training;
  return n.pool != pool_kind::inference || n.loanable;
}

/// GPU model rule: a GPU job needs a node with a model the job allows.
bool model_allows(job const& j, node const& n) {
  if (j.per_replica.gpus == 0) return true;
  if (n.gpu_count() == 0 || n.gpu_model.empty()) return false;
  auto const& a = j.allowed_gpu_models;
  return a.empty() || std::find(a.begin(), a.end(), n.gpu_model) != a.end();
}

/// Can GPU g of node n ever host (part of) one replica of j?
bool gpu_usable(job const& j, node const& n, std::int32_t g) {
  if (!n.gpu_is_healthy(static_cast<std::size_t>(g))) return false;
  auto const free = n.gpu_free_milli[static_cast<std::size_t>(g)];
  return j.per_replica.fractional() ? free >= j.per_replica.gpu_milli : free == milli_per_gpu;
}

/// Domain of node n at the job's required level, -1 if none or no requirement.
std::int32_t required_domain(job const& j, std::vector<std::int32_t> const& paths, std::int32_t levels,
                             std::int32_t n) {
  if (j.topo_mode != topology_mode::required || j.topology_level < 0) return -1;
  return paths[static_cast<std::size_t>(n) * levels + j.topology_level];
}

bool requires_domain(job const& j) { return j.topo_mode == topology_mode::required && j.topology_level >= 0; }

double replica_value(job const& j) { return static_cast<double>(j.per_replica.gpu_milli_total() + 1); }

/// Owns the GLPK problem; rows are collected as sparse lists and loaded once.
class mip_builder {
 public:
  mip_builder() : lp_(glp_create_prob()) { glp_set_obj_dir(lp_, GLP_MAX); }
  ~mip_builder() { glp_delete_prob(lp_); }
  mip_builder(mip_builder const&) = delete;
  mip_builder& operator=(mip_builder const&) = delete;

  int add_col(int kind, double ub, double obj) {
    int const c = glp_add_cols(lp_, 1);
    glp_set_col_kind(lp_, c, kind);
    if (ub <= 0) {
      glp_set_col_bnds(lp_, c, GLP_FX, 0, 0);
    } else {
      glp_set_col_bnds(lp_, c, GLP_DB, 0, ub);
    }
    glp_set_obj_coef(lp_, c, obj);
    return c;
  }

  /// A row lo <= sum coef * col <= hi with GLPK's row type `type`.
  void add_row(std::vector<std::pair<int, double>> const& terms, int type, double lo, double hi) {
    if (terms.empty()) return;
    int const r = glp_add_rows(lp_, 1);
    glp_set_row_bnds(lp_, r, type, lo, hi);
    for (auto const& [c, v] : terms) {
      ia_.push_back(r);
      ja_.push_back(c);
      ar_.push_back(v);
    }
  }

  void load() {
    // GLPK's arrays are 1-based: element 0 is ignored.
    ia_.insert(ia_.begin(), 0);
    ja_.insert(ja_.begin(), 0);
    ar_.insert(ar_.begin(), 0.0);
    glp_load_matrix(lp_, static_cast<int>(ia_.size()) - 1, ia_.data(), ja_.data(), ar_.data());
  }

  [[nodiscard]] glp_prob* get() const { return lp_; }

 private:
  glp_prob* lp_;
  std::vector<int> ia_, ja_;
  std::vector<double> ar_;
};

/// The best bound seen in the branch-and-bound tree (for early stops), and
/// the search's size: the nodes it has made, against a limit.
struct search_state {
  bool have_bound = false;
  double bound = 0;
  std::int64_t node_limit = 0;  ///< 0: none
  std::int64_t nodes = 0;
  bool stopped = false;
};

void on_tree_event(glp_tree* t, void* info) {
  // At node selection the active list is complete, so the best active node's
  // bound is a global upper bound for the (maximisation) problem.
  if (glp_ios_reason(t) != GLP_ISELECT) return;
  auto* s = static_cast<search_state*>(info);
  int active = 0, current = 0, total = 0;
  glp_ios_tree_size(t, &active, &current, &total);
  s->nodes = total;
  int const p = glp_ios_best_node(t);
  if (p != 0) {
    s->bound = glp_ios_node_bound(t, p);
    s->have_bound = true;
  }
  if (s->node_limit > 0 && total > s->node_limit) {
    s->stopped = true;
    glp_ios_terminate(t);
  }
}

/// GLPK reports on stdout unless told otherwise; keep test output clean.
int silent_hook(void*, char const*) { return 1; }

}  // namespace

double placement_value(round_input const& in, round_result const& r) {
  auto const paths = node_domain_paths(in.state);
  auto const levels = std::max(in.state.topo.levels(), 1);
  double total = 0;
  for (auto const& p : r.placements) {
    if (p.job < 0 || p.job >= static_cast<std::int32_t>(in.pending.size())) continue;
    auto const& j = in.pending[static_cast<std::size_t>(p.job)];
    auto const got = static_cast<std::int32_t>(p.replicas.size());
    if (j.gang && got != j.replicas) continue;
    if (got > j.replicas) continue;
    if (requires_domain(j)) {
      std::set<std::int32_t> domains;
      for (auto const& rp : p.replicas) domains.insert(required_domain(j, paths, levels, rp.node));
      if (domains.size() != 1 || *domains.begin() < 0) continue;
    }
    total += replica_value(j) * got;
  }
  return total;
}

exact_result solve_exact(round_input const& in, double time_limit_s, std::int64_t node_limit) {
  auto const& nodes = in.state.nodes;
  auto const& jobs = in.pending;
  auto const n_nodes = static_cast<std::int32_t>(nodes.size());
  auto const n_jobs = static_cast<std::int32_t>(jobs.size());
  auto const paths = node_domain_paths(in.state);
  auto const levels = std::max(in.state.topo.levels(), 1);

  mip_builder mip;
  glp_term_hook(silent_hook, nullptr);

  struct gpu_var {
    std::int32_t g;
    int col;
  };
  struct cell {  // one (job, node) pair that can hold at least one replica
    std::int32_t j, n;
    int y;
    double ub;
    std::vector<gpu_var> shares;  // f columns (fractional jobs only)
  };
  std::vector<cell> cells;
  double trivial_bound = 0;

  for (std::int32_t j = 0; j < n_jobs; ++j) {
    auto const& jb = jobs[static_cast<std::size_t>(j)];
    auto const& d = jb.per_replica;
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      auto const& nd = nodes[static_cast<std::size_t>(n)];
      if (!nd.healthy || !pool_allows(jb, nd) || !model_allows(jb, nd)) continue;
      if (requires_domain(jb) && required_domain(jb, paths, levels, n) < 0) continue;
      // The tightest per-node bound on replicas keeps the LP relaxation close.
      std::int64_t ub = jb.replicas;
      if (d.cpu_milli > 0) ub = std::min(ub, nd.cpu_milli_free / d.cpu_milli);
      if (d.memory_mib > 0) ub = std::min(ub, nd.memory_mib_free / d.memory_mib);
      std::vector<std::int32_t> usable;
      if (d.gpus > 0) {
        std::int64_t gpu_ub = 0;
        for (std::int32_t g = 0; g < nd.gpu_count(); ++g) {
          if (!gpu_usable(jb, nd, g)) continue;
          usable.push_back(g);
          gpu_ub += d.fractional() ? nd.gpu_free_milli[static_cast<std::size_t>(g)] / d.gpu_milli : 1;
        }
        ub = std::min(ub, d.fractional() ? gpu_ub : gpu_ub / d.gpus);
      }
      if (ub <= 0) continue;
      cell c{j, n, 0, static_cast<double>(ub), {}};
      c.y = mip.add_col(GLP_IV, c.ub, replica_value(jb));
      if (d.fractional()) {
        for (auto g : usable) {
          double const f_ub = std::min<double>(c.ub, nd.gpu_free_milli[static_cast<std::size_t>(g)] / d.gpu_milli);
          c.shares.push_back({g, mip.add_col(GLP_IV, f_ub, 0.0)});
        }
      }
      trivial_bound += c.ub * replica_value(jb);
      cells.push_back(std::move(c));
    }
  }

  // Whole GPUs: w[j][n][g] aggregated over jobs into u[n][g] (GPU g of node n
  // held whole by some replica). Whole GPUs on one node are interchangeable
  // between jobs, so sum_j gpus_j * y[j][n] = sum_g u[n][g] is exact, and
  // afterwards the used GPUs are handed out to the replicas in index order.
  // Per-job w columns gave the same LP bound with J times more binaries and
  // symmetry GLPK could not prove optimal on 16-node rounds in time.
  std::vector<std::vector<gpu_var>> whole(static_cast<std::size_t>(n_nodes));
  {
    std::vector<std::vector<std::pair<int, double>>> per_node(static_cast<std::size_t>(n_nodes));
    for (auto const& c : cells) {
      auto const& d = jobs[static_cast<std::size_t>(c.j)].per_replica;
      if (d.gpus > 0 && !d.fractional()) per_node[static_cast<std::size_t>(c.n)].push_back({c.y, d.gpus});
    }
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      auto& terms = per_node[static_cast<std::size_t>(n)];
      if (terms.empty()) continue;
      auto const& nd = nodes[static_cast<std::size_t>(n)];
      for (std::int32_t g = 0; g < nd.gpu_count(); ++g) {
        if (!nd.gpu_is_healthy(static_cast<std::size_t>(g)) ||
            nd.gpu_free_milli[static_cast<std::size_t>(g)] != milli_per_gpu) {
          continue;
        }
        int const u = mip.add_col(GLP_BV, 1.0, 0.0);
        whole[static_cast<std::size_t>(n)].push_back({g, u});
        terms.push_back({u, -1.0});
      }
      mip.add_row(terms, GLP_FX, 0, 0);
    }
  }

  // Replicas per job; gangs all or nothing.
  {
    std::vector<std::vector<std::pair<int, double>>> per_job(static_cast<std::size_t>(n_jobs));
    std::vector<double> ub_sum(static_cast<std::size_t>(n_jobs), 0);
    for (auto const& c : cells) {
      per_job[static_cast<std::size_t>(c.j)].push_back({c.y, 1.0});
      ub_sum[static_cast<std::size_t>(c.j)] += c.ub;
    }
    for (std::int32_t j = 0; j < n_jobs; ++j) {
      auto& terms = per_job[static_cast<std::size_t>(j)];
      auto const& jb = jobs[static_cast<std::size_t>(j)];
      auto const r = static_cast<double>(jb.replicas);
      if (terms.empty()) continue;
      if (jb.gang && jb.replicas > 1) {
        int const x = mip.add_col(GLP_BV, ub_sum[static_cast<std::size_t>(j)] >= r ? 1.0 : 0.0, 0.0);
        terms.push_back({x, -r});
        mip.add_row(terms, GLP_FX, 0, 0);
      } else if (ub_sum[static_cast<std::size_t>(j)] > r) {
        mip.add_row(terms, GLP_UP, 0, r);
      }
    }
  }

  // Fractional replicas: sum_g f = y.
  for (auto const& c : cells) {
    if (c.shares.empty()) continue;
    std::vector<std::pair<int, double>> terms{{c.y, -1.0}};
    for (auto const& gv : c.shares) terms.push_back({gv.col, 1.0});
    mip.add_row(terms, GLP_FX, 0, 0);
  }

  // Per GPU capacity (load = 1000 * u + sum milli * f <= free), and per node
  // CPU and memory.
  {
    std::map<std::pair<std::int32_t, std::int32_t>, std::vector<std::pair<int, double>>> load;
    std::vector<std::vector<std::pair<int, double>>> cpu(static_cast<std::size_t>(n_nodes)),
        mem(static_cast<std::size_t>(n_nodes));
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      for (auto const& gv : whole[static_cast<std::size_t>(n)]) load[{n, gv.g}].push_back({gv.col, milli_per_gpu});
    }
    for (auto const& c : cells) {
      auto const& d = jobs[static_cast<std::size_t>(c.j)].per_replica;
      for (auto const& gv : c.shares) load[{c.n, gv.g}].push_back({gv.col, static_cast<double>(d.gpu_milli)});
      if (d.cpu_milli > 0) cpu[static_cast<std::size_t>(c.n)].push_back({c.y, static_cast<double>(d.cpu_milli)});
      if (d.memory_mib > 0) mem[static_cast<std::size_t>(c.n)].push_back({c.y, static_cast<double>(d.memory_mib)});
    }
    for (auto const& [key, terms] : load) {
      auto const free = nodes[static_cast<std::size_t>(key.first)].gpu_free_milli[static_cast<std::size_t>(key.second)];
      // A lone column is already bounded by its own upper bound.
      if (terms.size() > 1) mip.add_row(terms, GLP_UP, 0, free);
    }
    // Symmetry: GPUs of one node with the same free milli are
    // interchangeable, so their loads may be required to be non-increasing
    // in index order. Without this GLPK re-explores every permutation.
    for (auto it = load.begin(); it != load.end(); ++it) {
      auto const [n, g] = it->first;
      auto const& nd = nodes[static_cast<std::size_t>(n)];
      for (auto next = std::next(it); next != load.end() && next->first.first == n; ++next) {
        if (nd.gpu_free_milli[static_cast<std::size_t>(next->first.second)] !=
            nd.gpu_free_milli[static_cast<std::size_t>(g)]) {
          continue;
        }
        // Health needs no check: unhealthy GPUs have no columns.
        std::vector<std::pair<int, double>> terms = it->second;
        for (auto const& [col, coef] : next->second) terms.push_back({col, -coef});
        mip.add_row(terms, GLP_LO, 0, 0);
        break;  // the next identical GPU chains on from there
      }
    }
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      auto const& nd = nodes[static_cast<std::size_t>(n)];
      mip.add_row(cpu[static_cast<std::size_t>(n)], GLP_UP, 0, static_cast<double>(nd.cpu_milli_free));
      mip.add_row(mem[static_cast<std::size_t>(n)], GLP_UP, 0, static_cast<double>(nd.memory_mib_free));
    }
  }

  // Required topology: one domain of the level per job.
  for (std::int32_t j = 0; j < n_jobs; ++j) {
    auto const& jb = jobs[static_cast<std::size_t>(j)];
    if (!requires_domain(jb)) continue;
    std::map<std::int32_t, int> dom_col;
    for (auto const& c : cells) {
      if (c.j != j) continue;
      auto const dom = required_domain(jb, paths, levels, c.n);
      auto it = dom_col.find(dom);
      if (it == dom_col.end()) it = dom_col.emplace(dom, mip.add_col(GLP_BV, 1.0, 0.0)).first;
      mip.add_row({{c.y, 1.0}, {it->second, -c.ub}}, GLP_UP, 0, 0);
    }
    if (dom_col.size() > 1) {
      std::vector<std::pair<int, double>> terms;
      for (auto const& [dom, col] : dom_col) terms.push_back({col, 1.0});
      mip.add_row(terms, GLP_UP, 0, 1);
    }
  }

  mip.load();

  exact_result out;
  search_state state;
  state.node_limit = node_limit;
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_ON;
  parm.tm_lim = static_cast<int>(std::clamp(time_limit_s * 1000.0, 1.0, static_cast<double>(INT_MAX)));
  parm.cb_func = on_tree_event;
  parm.cb_info = &state;
  // Tuned on the 16-node rounds of optimality_test: with MIR cuts and
  // pseudocost branching GLPK proves 37 of the 40 optimal within a second,
  // against 31 with its defaults; Gomory, cover and clique cuts, the
  // feasibility pump and proximity search did not help there.
  parm.mir_cuts = GLP_ON;
  parm.br_tech = GLP_BR_PCH;
  // GLPK rejects an empty problem; with no columns nothing can be placed.
  bool const empty = glp_get_num_cols(mip.get()) == 0;
  int const ret = empty ? 0 : glp_intopt(mip.get(), &parm);
  glp_term_hook(nullptr, nullptr);

  int const status = empty ? GLP_OPT : glp_mip_status(mip.get());
  if (ret != 0 && ret != GLP_ETMLIM && ret != GLP_ESTOP) {
    throw logic_error(error_code::internal, "glp_intopt failed with code " + std::to_string(ret));
  }
  bool const have_solution = !empty && (status == GLP_OPT || status == GLP_FEAS);
  out.optimal = ret == 0 && status == GLP_OPT;
  out.nodes = state.nodes;
  out.stopped_at_nodes = ret == GLP_ESTOP;
  out.value = have_solution ? glp_mip_obj_val(mip.get()) : 0.0;
  if (out.optimal) {
    out.bound = out.value;
  } else {
    // The objective is integral, so any bound rounds down.
    double const b = state.have_bound ? state.bound : trivial_bound;
    out.bound = std::max(out.value, std::floor(std::min(b, trivial_bound) + 1e-6));
  }

  // The solution as a round_result: whole GPUs are handed out to the
  // replicas in index order, fractional ones per GPU as the MIP chose.
  auto val = [&](int col) { return have_solution ? std::llround(glp_mip_col_val(mip.get(), col)) : 0LL; };
  std::vector<std::vector<replica_placement>> placed(static_cast<std::size_t>(n_jobs));
  std::vector<std::vector<std::int32_t>> held(static_cast<std::size_t>(n_nodes));
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    for (auto const& gv : whole[static_cast<std::size_t>(n)]) {
      if (val(gv.col) > 0) held[static_cast<std::size_t>(n)].push_back(gv.g);
    }
  }
  for (auto const& c : cells) {
    auto const& d = jobs[static_cast<std::size_t>(c.j)].per_replica;
    auto const y = val(c.y);
    if (y <= 0) continue;
    auto& reps = placed[static_cast<std::size_t>(c.j)];
    if (d.gpus == 0) {
      for (long long k = 0; k < y; ++k) reps.push_back({c.n, {}, milli_per_gpu});
    } else if (d.fractional()) {
      for (auto const& gv : c.shares) {
        for (long long k = val(gv.col); k > 0; --k) reps.push_back({c.n, {gv.g}, d.gpu_milli});
      }
    } else {
      auto& free_whole = held[static_cast<std::size_t>(c.n)];
      for (long long k = 0; k < y; ++k) {
        replica_placement rp{c.n, {}, milli_per_gpu};
        for (std::int32_t i = 0; i < d.gpus && !free_whole.empty(); ++i) {
          rp.gpus.push_back(free_whole.front());
          free_whole.erase(free_whole.begin());
        }
        reps.push_back(std::move(rp));
      }
    }
  }
  for (std::int32_t j = 0; j < n_jobs; ++j) {
    auto& reps = placed[static_cast<std::size_t>(j)];
    auto const& jb = jobs[static_cast<std::size_t>(j)];
    auto const got = static_cast<std::int32_t>(reps.size());
    if (got < jb.replicas) {
      bool const any_cell = std::any_of(cells.begin(), cells.end(), [&](cell const& c) { return c.j == j; });
      auto const reason = !any_cell                  ? unplaced_reason::no_feasible_node
                          : jb.gang && got == 0      ? unplaced_reason::gang_incomplete
                          : requires_domain(jb)      ? unplaced_reason::topology_unsatisfiable
                                                     : unplaced_reason::insufficient_capacity;
      out.placement.unplaced_jobs.push_back(
          {j, reason, "exact: " + std::to_string(got) + " of " + std::to_string(jb.replicas) + " replicas"});
    }
    if (got > 0) {
      out.placement.metrics.jobs_placed += 1;
      out.placement.metrics.replicas_placed += got;
      out.placement.metrics.gpu_milli_placed += jb.per_replica.gpu_milli_total() * got;
      out.placement.placements.push_back({j, std::move(reps)});
    }
  }
  out.placement.epoch = in.state.epoch;
  out.placement.backend = "exact (GLPK " + std::string(glp_version()) + ")";
  return out;
}

}  // namespace placer::testing_support
