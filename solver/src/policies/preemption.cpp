// Minimum-cost preemption (policies.hpp: preempt_for). For each blocked job
// in queue order it looks for the set of lower-priority, preemptible running
// jobs whose stopping lets the job in at the least lost work (milli-GPU x
// seconds since their last checkpoint), then stops exactly that set and
// starts the job. Nothing is stopped unless the job is placed.
//
// Search space. A victim is always stopped whole (a gang or multi-replica
// job gives back every replica on every node), so its cost is its whole
// lost work whichever node we look at.
//   - Per-replica mode (single replicas, non-gang jobs without a topology
//     need): a replica lands on one node, so only victims on that node can
//     help it; the cheapest set per node, then the cheapest node. Replicas of
//     a multi-replica job are found one after another on the state the
//     earlier ones leave (a gang victim stopped for replica 1 may make
//     replica 2 free).
//   - Domain mode (gangs, required topology, network consolidation): per
//     domain of the level (or the whole cluster), the cheapest set that makes
//     the whole job fit there, then the cheapest domain.
// Per node or domain, up to exact_limit candidates are enumerated exactly
// (every subset, by increasing cost); above that, greedy: add the cheapest
// victim until it fits, then drop the ones not needed.
//
// Fit. Subsets are screened on the host with the same per-node replica count
// the kernels use for gangs (ops.hpp fit_count: pool, model, health, CPU,
// memory, whole or shared GPUs), which is exact for one job class: a domain
// holds the job iff the sum of its nodes' counts reaches the replicas. The
// chosen set is then confirmed by the core itself (assign_jobs with only the
// domain's nodes offered, on a state with the victims stopped), and its
// placement is the one applied; if the core disagrees, the next-best node or
// domain is tried.
//
// Queues (quotas.hpp queue_guarantees). Running work is a candidate only
// if its queues keep their guarantees without it (the job's start
// counted), and a set only if they keep them without the whole set: no
// preemption leaves a queue below its guarantee. A job whose queue stays
// within its guarantee with it may also stop such work at its own priority
// or above: the reclaim of borrowed capacity (reason "quota").
#include "host_fit.hpp"
#include "policies.hpp"
#include "../quotas.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace placer::detail {

namespace {

/// Candidate victims per node or domain enumerated exactly (2^12 subsets,
/// each screened in O(touched nodes x GPUs) on the host).
constexpr std::size_t exact_limit = 12;

// ------------------------------------------------------------------ planner

/// A victim set for one node or domain.
struct victim_set {
  std::vector<std::size_t> victims;  ///< running indices, cheapest first
  std::int64_t cost = 0;
  std::size_t where = 0;  ///< node or domain position (tie-break)
};

bool cheaper(victim_set const& a, victim_set const& b) {
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.victims.size() != b.victims.size()) return a.victims.size() < b.victims.size();
  return a.where < b.where;
}

class planner {
 public:
  planner(core_fn const& core, work_state& ws, preempt_scope scope, std::vector<job> const* overrides,
          round_result& out)
      : core_(core), ws_(ws), scope_(scope), out_(out),
        shapes_(overrides != nullptr ? *overrides : ws.in.pending),
        loaning_(ws.in.pol.queue.loaning), guarantees_(ws.in) {}

  void place(std::int32_t j);

 private:
  /// Cheapest victim set (host screen only) that lets `need` replicas of
  /// `shape` fit on the nodes `dom` of state `ws`; nullopt if none does.
  std::optional<victim_set> cheapest_in(work_state const& ws, std::vector<std::int32_t> const& dom,
                                        job const& shape, std::int64_t need, std::vector<std::size_t> const& cands);
  /// The core's placement of shape (set as shapes_[j]) on `dom` of `ws`
  /// with `victims` stopped; empty unless all `need` replicas are placed.
  std::vector<replica_placement> confirm(work_state const& ws, std::int32_t j, std::vector<std::int32_t> const& dom,
                                         std::vector<std::size_t> const& victims, std::int64_t need);
  /// Victim candidates, alive in `ws`, for `replicas` more replicas of
  /// `shape`, cheapest first; measures the queues' usage in `ws` for
  /// cheapest_in's calls on the same state.
  [[nodiscard]] std::vector<std::size_t> candidates(work_state const& ws, job const& shape, std::int64_t replicas);
  /// Node sets of the domains the job must fit in (one set: the cluster).
  [[nodiscard]] std::vector<std::vector<std::int32_t>> domains_for(job const& shape) const;
  void apply(std::int32_t j, std::int64_t prev, std::vector<std::size_t> const& victims,
             std::vector<replica_placement> const& reps, std::int32_t wanted);

  core_fn const& core_;
  work_state& ws_;
  preempt_scope scope_;
  round_result& out_;
  std::vector<job> shapes_;  ///< per pending job: the shape searched (overrides applied)
  bool loaning_;
  queue_guarantees guarantees_;
  std::int32_t queue_ = -1;  ///< the queue of the job being placed ...
  std::int64_t take_gpu_ = 0, take_cpu_ = 0;  ///< ... and what one victim set makes room for
  // Per-node scratch for cheapest_in, all zero between calls (a call sets
  // and clears only its domain's entries: per-node searches stay O(node)).
  std::vector<char> in_dom_;
  std::vector<std::int64_t> base_fit_;
};

std::vector<std::size_t> planner::candidates(work_state const& ws, job const& shape, std::int64_t replicas) {
  float const threshold = ws.in.pol.queue.sensitivity_threshold;
  std::int64_t const max_lost = ws.in.pol.queue.preempt_max_lost_s;
  guarantees_.measure(ws.running, ws.alive);
  std::vector<std::size_t> c;
  std::vector<std::size_t> one(1);
  for (std::size_t r = 0; r < ws.running.size(); ++r) {
    auto const& rj = ws.running[r];
    if (ws.alive[r] == 0 || ws.started_from[r] >= 0) continue;  // stopped, or placed this round
    if (!rj.preemptible || rj.replicas.empty()) continue;
    // Preemption for a higher priority waits for a victim's checkpoint
    // (max_lost < 0: any); a queue reclaiming its guarantee does not.
    if (scope_ == preempt_scope::priority && rj.priority < shape.priority && max_lost >= 0 &&
        ws.lost_seconds(r) > max_lost) {
      continue;
    }
    if (scope_ == preempt_scope::network && rj.network_sensitivity >= threshold) continue;
    // Never equal or higher priority, but for a queue's guarantee.
    if (rj.priority >= shape.priority &&
        (scope_ != preempt_scope::priority ||
         !guarantees_.within_guarantee(queue_, guarantees_.index(rj.queue),
                                       shape.per_replica.gpu_milli_total() * replicas,
                                       shape.per_replica.cpu_milli * replicas))) {
      continue;
    }
    one[0] = r;
    if (!guarantees_.keeps_guarantees(queue_, take_gpu_, take_cpu_, ws.running, one)) continue;
    c.push_back(r);
  }
  std::vector<std::int64_t> cost(ws.running.size(), 0);
  for (auto r : c) cost[r] = ws.lost_work(r);
  std::stable_sort(c.begin(), c.end(), [&](std::size_t a, std::size_t b) {
    return cost[a] != cost[b] ? cost[a] < cost[b] : a < b;
  });
  return c;
}

std::vector<std::vector<std::int32_t>> planner::domains_for(job const& shape) const {
  auto const& c = ws_.state;
  auto const n_nodes = static_cast<std::int32_t>(c.nodes.size());
  std::int32_t level = -1;
  if (shape.topo_mode == topology_mode::required && shape.topology_level >= 0) {
    level = shape.topology_level;
  } else if (scope_ == preempt_scope::network && !c.topo.empty()) {
    // Consolidation: the lowest (deepest) level with a domain whose empty
    // capacity holds every replica.
    auto const paths = node_domain_paths(c);
    auto const levels = std::max(c.topo.levels(), 1);
    for (std::int32_t l = c.topo.levels() - 1; l >= 1 && level < 0; --l) {
      std::vector<std::int64_t> cap(c.topo.domains.size(), 0);
      for (std::int32_t n = 0; n < n_nodes; ++n) {
        auto const d = paths[static_cast<std::size_t>(n) * levels + l];
        auto const& nd = c.nodes[static_cast<std::size_t>(n)];
        if (d >= 0 && admits(nd, shape, loaning_)) cap[d] += fit_empty(nd, shape.per_replica);
      }
      if (std::any_of(cap.begin(), cap.end(), [&](std::int64_t x) { return x >= shape.replicas; })) level = l;
    }
  }
  std::vector<std::vector<std::int32_t>> doms;
  if (level <= 0 || c.topo.empty()) {
    doms.emplace_back(static_cast<std::size_t>(n_nodes));
    std::iota(doms.back().begin(), doms.back().end(), 0);
    return doms;
  }
  auto const paths = node_domain_paths(c);
  auto const levels = std::max(c.topo.levels(), 1);
  std::vector<std::int32_t> slot(c.topo.domains.size(), -1);
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    auto const d = paths[static_cast<std::size_t>(n) * levels + level];
    if (d < 0) continue;
    if (slot[d] < 0) {
      slot[d] = static_cast<std::int32_t>(doms.size());
      doms.emplace_back();
    }
    doms[static_cast<std::size_t>(slot[d])].push_back(n);
  }
  // Domain index order, for deterministic tie-breaks.
  std::vector<std::pair<std::int32_t, std::int32_t>> by_domain;
  for (std::size_t d = 0; d < slot.size(); ++d) {
    if (slot[d] >= 0) by_domain.emplace_back(static_cast<std::int32_t>(d), slot[d]);
  }
  std::vector<std::vector<std::int32_t>> sorted;
  for (auto const& [d, s] : by_domain) sorted.push_back(std::move(doms[static_cast<std::size_t>(s)]));
  return sorted;
}

std::optional<victim_set> planner::cheapest_in(work_state const& ws, std::vector<std::int32_t> const& dom,
                                               job const& shape, std::int64_t need,
                                               std::vector<std::size_t> const& cands) {
  auto const& nodes = ws.state.nodes;
  in_dom_.resize(nodes.size(), 0);
  base_fit_.resize(nodes.size(), 0);
  struct reset_scratch {  // leaves the scratch all zero on every return path
    planner& p;
    std::vector<std::int32_t> const& dom;
    ~reset_scratch() {
      for (auto n : dom) {
        p.in_dom_[static_cast<std::size_t>(n)] = 0;
        p.base_fit_[static_cast<std::size_t>(n)] = 0;
      }
    }
  } const reset{*this, dom};
  auto& in_dom = in_dom_;
  auto& base_fit = base_fit_;
  std::int64_t base_total = 0;
  bool any_admits = false;
  // Replicas a node holds for this job: one at most when it wants distinct nodes.
  auto per_node = [&](std::int64_t k) { return shape.distinct_nodes ? std::min<std::int64_t>(k, 1) : k; };
  for (auto n : dom) {
    auto const& nd = nodes[static_cast<std::size_t>(n)];
    if (!admits(nd, shape, loaning_)) continue;
    in_dom[static_cast<std::size_t>(n)] = 1;
    any_admits = true;
    base_fit[static_cast<std::size_t>(n)] = per_node(fit_free(nd, shape.per_replica));
    base_total += base_fit[static_cast<std::size_t>(n)];
  }
  if (!any_admits) return std::nullopt;
  if (base_total >= need) return victim_set{};  // fits with nobody stopped

  // Only victims with a replica on an admitting node of the domain can help.
  std::vector<std::size_t> local;
  for (auto r : cands) {
    auto const& reps = ws.running[r].replicas;
    if (std::any_of(reps.begin(), reps.end(), [&](replica_placement const& rp) {
          return rp.node >= 0 && static_cast<std::size_t>(rp.node) < nodes.size() && in_dom[static_cast<std::size_t>(rp.node)] != 0;
        })) {
      local.push_back(r);
    }
  }
  if (local.empty()) return std::nullopt;

  // Replicas the domain holds with `set` stopped: the base total, corrected
  // on the nodes the set touches.
  std::vector<std::pair<std::int32_t, node_free>> touched;
  auto holds = [&](std::vector<std::size_t> const& set) {
    touched.clear();
    for (auto r : set) {
      auto const& rj = ws.running[r];
      for (auto const& rp : rj.replicas) {
        if (rp.node < 0 || static_cast<std::size_t>(rp.node) >= nodes.size() || in_dom[static_cast<std::size_t>(rp.node)] == 0) continue;
        auto const& nd = nodes[static_cast<std::size_t>(rp.node)];
        auto it = std::find_if(touched.begin(), touched.end(), [&](auto const& t) { return t.first == rp.node; });
        if (it == touched.end()) {
          touched.emplace_back(rp.node, free_of(nd));
          it = touched.end() - 1;
        }
        give_back(nd, it->second, rj.per_replica, rp);
      }
    }
    std::int64_t total = base_total;
    for (auto const& [n, f] : touched) total += per_node(fit_count(f, shape.per_replica)) - base_fit[static_cast<std::size_t>(n)];
    return total >= need;
  };
  std::vector<std::int64_t> cost(local.size());
  for (std::size_t k = 0; k < local.size(); ++k) cost[k] = ws.lost_work(local[k]);

  victim_set best;
  if (local.size() <= exact_limit) {
    // Every subset, by increasing (cost, size, mask): the first that fits
    // is the minimum-cost set (and the smallest among equal costs).
    std::uint32_t const n_sets = 1U << local.size();
    std::vector<std::uint32_t> masks(n_sets - 1);
    std::iota(masks.begin(), masks.end(), 1U);
    std::vector<std::int64_t> mcost(n_sets, 0);
    for (std::uint32_t m = 1; m < n_sets; ++m) {
      auto const low = static_cast<std::size_t>(std::countr_zero(m));
      mcost[m] = mcost[m & (m - 1)] + cost[low];
    }
    std::sort(masks.begin(), masks.end(), [&](std::uint32_t a, std::uint32_t b) {
      if (mcost[a] != mcost[b]) return mcost[a] < mcost[b];
      int const pa = std::popcount(a), pb = std::popcount(b);
      return pa != pb ? pa < pb : a < b;
    });
    std::vector<std::size_t> set;
    for (auto m : masks) {
      set.clear();
      for (std::size_t k = 0; k < local.size(); ++k) {
        if ((m >> k) & 1U) set.push_back(local[k]);
      }
      if (guarantees_.keeps_guarantees(queue_, take_gpu_, take_cpu_, ws.running, set) && holds(set)) {
        best.victims = set;
        best.cost = mcost[m];
        return best;
      }
    }
    return std::nullopt;
  }

  // Greedy: the cheapest prefix that fits ...
  std::vector<std::size_t> set;
  std::vector<std::int64_t> set_cost;
  bool fits = false;
  for (std::size_t k = 0; k < local.size() && !fits; ++k) {
    set.push_back(local[k]);
    // Together they would take a guarantee: go on without this one.
    if (!guarantees_.keeps_guarantees(queue_, take_gpu_, take_cpu_, ws.running, set)) {
      set.pop_back();
      continue;
    }
    set_cost.push_back(cost[k]);
    fits = holds(set);
  }
  if (!fits) return std::nullopt;
  // ... then, most expensive first, drop every victim it does not need.
  for (std::size_t k = set.size(); k-- > 0;) {
    auto trial = set;
    trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(k));
    if (holds(trial)) {
      set = std::move(trial);
      set_cost.erase(set_cost.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  best.victims = std::move(set);
  best.cost = std::accumulate(set_cost.begin(), set_cost.end(), std::int64_t{0});
  return best;
}

std::vector<replica_placement> planner::confirm(work_state const& ws, std::int32_t j,
                                                std::vector<std::int32_t> const& dom,
                                                std::vector<std::size_t> const& victims, std::int64_t need) {
  work_state trial(ws);
  for (auto r : victims) trial.stop(r);
  std::vector<char> hidden(trial.state.nodes.size(), 1);
  for (auto n : dom) hidden[static_cast<std::size_t>(n)] = 0;
  sub_round sub;
  sub.jobs = {j};
  sub.overrides = &shapes_;
  sub.hidden = &hidden;
  round_result const r = assign_jobs(core_, trial, sub);
  if (r.placements.size() != 1 || static_cast<std::int64_t>(r.placements[0].replicas.size()) < need) return {};
  return r.placements[0].replicas;
}

void planner::apply(std::int32_t j, std::int64_t prev, std::vector<std::size_t> const& victims,
                    std::vector<replica_placement> const& reps, std::int32_t wanted) {
  auto const reason = [&](std::size_t r) {
    if (scope_ == preempt_scope::network) return "network";
    return ws_.running[r].priority < shapes_[static_cast<std::size_t>(j)].priority ? "priority" : "quota";
  };
  if (prev >= 0) {
    // The partial placement an earlier step made is replaced by the new one.
    ws_.stop(static_cast<std::size_t>(prev));
    out_.placements.erase(std::remove_if(out_.placements.begin(), out_.placements.end(),
                                         [&](placement const& p) { return p.job == j; }),
                          out_.placements.end());
  }
  for (auto r : victims) {
    out_.preemptions.push_back({ws_.running[r].name, reason(r), j, ws_.lost_work(r)});
    ws_.stop(r);
  }
  ws_.start(j, reps);
  out_.placements.push_back({j, reps});
  if (static_cast<std::int32_t>(reps.size()) >= wanted) {
    out_.unplaced_jobs.erase(std::remove_if(out_.unplaced_jobs.begin(), out_.unplaced_jobs.end(),
                                            [&](unplaced const& u) { return u.job == j; }),
                             out_.unplaced_jobs.end());
  }
}

void planner::place(std::int32_t j) {
  job const shape = shapes_[static_cast<std::size_t>(j)];
  if (shape.replicas <= 0) return;
  queue_ = guarantees_.index(shape.queue);
  std::int64_t const prev = ws_.running_of(j);
  std::vector<replica_placement> const old =
      prev >= 0 ? ws_.running[static_cast<std::size_t>(prev)].replicas : std::vector<replica_placement>{};
  if (static_cast<std::int32_t>(old.size()) >= shape.replicas) return;  // already placed in full

  bool const required = shape.topo_mode == topology_mode::required && shape.topology_level >= 0;
  // A job that wants distinct nodes goes whole too: one replica at a time
  // could land beside one it already holds.
  bool const domain_mode =
      shape.replicas > 1 && (shape.gang || required || shape.distinct_nodes || scope_ == preempt_scope::network);

  std::int64_t const per_set = domain_mode ? shape.replicas : 1;
  take_gpu_ = shape.per_replica.gpu_milli_total() * per_set;
  take_cpu_ = shape.per_replica.cpu_milli * per_set;
  if (domain_mode) {
    // The whole job in one domain. A partial placement (non-gang topology
    // job) is released in the trial and replaced only if the job then fits.
    work_state base(ws_);
    if (prev >= 0) base.stop(static_cast<std::size_t>(prev));
    auto const cands = candidates(base, shape, shape.replicas);
    auto const doms = domains_for(shape);
    std::vector<victim_set> options;
    for (std::size_t d = 0; d < doms.size(); ++d) {
      if (auto v = cheapest_in(base, doms[d], shape, shape.replicas, cands)) {
        v->where = d;
        options.push_back(std::move(*v));
      }
    }
    std::stable_sort(options.begin(), options.end(), cheaper);
    for (auto const& o : options) {
      auto reps = confirm(base, j, doms[o.where], o.victims, shape.replicas);
      if (reps.empty()) continue;
      apply(j, prev, o.victims, reps, shape.replicas);
      return;
    }
    return;
  }

  // Per-replica mode: one replica at a time on the cheapest node, on a trial
  // state that keeps what the earlier replicas stopped and took.
  job one = shape;
  one.replicas = 1;
  one.gang = false;
  shapes_[static_cast<std::size_t>(j)] = one;
  work_state trial(ws_);
  std::vector<std::size_t> victims;
  std::vector<replica_placement> got = old;
  auto const n_nodes = static_cast<std::int32_t>(trial.state.nodes.size());
  while (static_cast<std::int32_t>(got.size()) < shape.replicas) {
    // Victims per node (cheapest first), so each node's search sees only its own.
    std::vector<std::vector<std::size_t>> on_node(static_cast<std::size_t>(n_nodes));
    for (auto r : candidates(trial, shape, shape.replicas - static_cast<std::int64_t>(got.size()))) {
      for (auto const& rp : trial.running[r].replicas) {
        if (rp.node < 0 || rp.node >= n_nodes) continue;
        auto& l = on_node[static_cast<std::size_t>(rp.node)];
        if (l.empty() || l.back() != r) l.push_back(r);
      }
    }
    std::vector<victim_set> options;
    std::vector<std::int32_t> dom(1);
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      dom[0] = n;
      if (auto v = cheapest_in(trial, dom, one, 1, on_node[static_cast<std::size_t>(n)])) {
        v->where = static_cast<std::size_t>(n);
        options.push_back(std::move(*v));
      }
    }
    std::stable_sort(options.begin(), options.end(), cheaper);
    bool placed = false;
    for (auto const& o : options) {
      auto reps = confirm(trial, j, {static_cast<std::int32_t>(o.where)}, o.victims, 1);
      if (reps.empty()) continue;
      for (auto r : o.victims) {
        trial.stop(r);
        victims.push_back(r);
      }
      trial.start(j, reps);  // scratch entry: holds the replica's resources in the trial
      got.push_back(reps[0]);
      placed = true;
      break;
    }
    if (!placed) break;
  }
  shapes_[static_cast<std::size_t>(j)] = shape;
  // Never preempt for nothing: victims are stopped only together with the
  // replicas they made room for (a replica that needed none is taken too:
  // an earlier stop may have freed room the core did not have).
  if (got.size() == old.size()) return;
  std::vector<std::int64_t> cost(ws_.running.size(), 0);
  for (auto r : victims) cost[r] = ws_.lost_work(r);
  std::stable_sort(victims.begin(), victims.end(), [&](std::size_t a, std::size_t b) {
    return cost[a] != cost[b] ? cost[a] < cost[b] : a < b;
  });
  apply(j, prev, victims, got, shape.replicas);
}

}  // namespace

void preempt_for(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& jobs, preempt_scope scope,
                 std::vector<job> const* overrides, round_result& out) {
  PLACER_EXPECTS(overrides == nullptr || overrides->size() == ws.in.pending.size(),
                 "preempt_for: overrides must cover every pending job");
  planner p(core, ws, scope, overrides, out);
  for (auto j : jobs) {
    PLACER_EXPECTS(j >= 0 && static_cast<std::size_t>(j) < ws.in.pending.size(), "preempt_for: job index out of range");
    if (ws.out_of_time()) break;
    p.place(j);
  }
}

}  // namespace placer::detail
