// Capacity loaning: reclaim (policies.hpp: reclaim_loaned). Inference nodes
// lent to training (Aryl) are taken back one at a time, cheapest first by
// *server preemption cost*: the number of running jobs that clearing the
// node of non-inference work would preempt. An elastic job whose replicas
// there can go while it stays >= min_replicas costs 0 (it is shrunk, a
// scale-in); any other job is stopped whole, gangs included, which also
// frees its replicas on other nodes. Costs are recomputed after each choice
// because a stopped gang or a shrunk elastic job changes its other nodes'
// costs. Ties: less lost work, then the lower node index.
//
// Two reasons to reclaim, in this order:
//   1. unplaced inference jobs: only nodes that could host one of their
//      replicas once cleared are candidates, and only as many nodes as it
//      takes to place what reclaiming every candidate would place (none if
//      that places nothing more): the smallest such prefix of the greedy
//      order (binary search, one core call per probe);
//   2. the cluster manager's explicit request (queue.reclaim_nodes): exactly
//      that many further loaned nodes, or all there are.
//
// Preemptible or not, loaned work is revocable: lending is the inference
// side's choice and it may take nodes back at any time. A job the core
// placed on a reclaimed node this round is not preempted (it never ran): its
// placement is undone and it goes back to the unplaced list; it still
// counts 1 towards the node's cost (it loses its GPUs), with no lost work.
// A reclaimed node is marked not loanable in ws.state so that the later
// policies of the round (backfill, elastic scale-out) do not lend it again.
#include "host_fit.hpp"
#include "policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace placer::detail {

namespace {

/// What clearing a node does to one running job on it.
enum class action : std::uint8_t { shrink, stop, undo };

struct step {
  std::size_t r = 0;
  action act = action::stop;
  std::vector<std::size_t> replicas;  ///< shrink: indices into running[r].replicas on the node
};

/// The server preemption cost of one node and what clearing it takes.
struct node_cost {
  std::int32_t node = -1;
  std::int64_t jobs = 0;  ///< running jobs preempted (or placements undone)
  std::int64_t lost = 0;  ///< their lost work (tie-break)
  std::vector<step> steps;
};

/// Loaned nodes: inference-pool nodes that host alive non-inference work.
std::vector<std::int32_t> loaned_nodes(work_state const& ws) {
  auto const n_nodes = ws.state.nodes.size();
  std::vector<char> hosts(n_nodes, 0);
  for (std::size_t r = 0; r < ws.running.size(); ++r) {
    if (ws.alive[r] == 0 || ws.running[r].kind == job_kind::inference) continue;
    for (auto const& rp : ws.running[r].replicas) {
      if (rp.node >= 0 && static_cast<std::size_t>(rp.node) < n_nodes) hosts[static_cast<std::size_t>(rp.node)] = 1;
    }
  }
  std::vector<std::int32_t> loaned;
  for (std::size_t n = 0; n < n_nodes; ++n) {
    if (hosts[n] != 0 && ws.state.nodes[n].pool == pool_kind::inference) loaned.push_back(static_cast<std::int32_t>(n));
  }
  return loaned;
}

node_cost cost_of(work_state const& ws, std::int32_t n) {
  node_cost c;
  c.node = n;
  for (std::size_t r = 0; r < ws.running.size(); ++r) {
    auto const& rj = ws.running[r];
    if (ws.alive[r] == 0 || rj.kind == job_kind::inference) continue;
    step s;
    s.r = r;
    for (std::size_t k = 0; k < rj.replicas.size(); ++k) {
      if (rj.replicas[k].node == n) s.replicas.push_back(k);
    }
    if (s.replicas.empty()) continue;
    auto const left = static_cast<std::int64_t>(rj.replicas.size() - s.replicas.size());
    if (ws.started_from[r] >= 0) {
      s.act = action::undo;
      c.jobs += 1;
    } else if (ws.in.pol.queue.elastic && rj.min_replicas > 0 && left >= rj.min_replicas) {
      s.act = action::shrink;  // elastic and stays at or above its minimum: free
    } else {
      s.act = action::stop;
      c.jobs += 1;
      c.lost += ws.lost_work(r);
    }
    c.steps.push_back(std::move(s));
  }
  return c;
}

/// Position in `cands` of the node to reclaim next on ws as it is now.
std::size_t cheapest(work_state const& ws, std::vector<std::int32_t> const& cands) {
  std::size_t best = 0;
  node_cost bc = cost_of(ws, cands[0]);
  for (std::size_t k = 1; k < cands.size(); ++k) {
    node_cost c = cost_of(ws, cands[k]);
    bool const better = c.jobs != bc.jobs ? c.jobs < bc.jobs : c.lost != bc.lost ? c.lost < bc.lost : c.node < bc.node;
    if (better) {
      best = k;
      bc = std::move(c);
    }
  }
  return best;
}

void erase_placement(round_result& out, std::int32_t j) {
  out.placements.erase(std::remove_if(out.placements.begin(), out.placements.end(),
                                      [&](placement const& p) { return p.job == j; }),
                       out.placements.end());
}

/// Clears node n of non-inference work on ws; records it in *out when set.
void clear_node(work_state& ws, std::int32_t n, round_result* out) {
  node_cost const c = cost_of(ws, n);
  for (auto const& s : c.steps) {
    auto const& rj = ws.running[s.r];
    switch (s.act) {
      case action::shrink: {
        std::string const name = rj.name;
        auto removed = ws.shrink(s.r, s.replicas);
        if (out == nullptr) break;
        auto it = std::find_if(out->scale_ins.begin(), out->scale_ins.end(),
                               [&](scale_change const& sc) { return sc.job == name && sc.reason == "reclaim"; });
        if (it == out->scale_ins.end()) {
          out->scale_ins.push_back({name, std::move(removed), "reclaim"});
        } else {
          it->replicas.insert(it->replicas.end(), removed.begin(), removed.end());
        }
        break;
      }
      case action::stop:
        if (out != nullptr) out->preemptions.push_back({rj.name, "reclaim", -1, ws.lost_work(s.r)});
        ws.stop(s.r);
        break;
      case action::undo: {
        std::int32_t const j = ws.started_from[s.r];
        ws.stop(s.r);
        if (out == nullptr) break;
        erase_placement(*out, j);
        std::string const why = "placement undone: its loaned node was reclaimed for inference";
        auto it = std::find_if(out->unplaced_jobs.begin(), out->unplaced_jobs.end(),
                               [&](unplaced const& u) { return u.job == j; });
        if (it == out->unplaced_jobs.end()) {
          out->unplaced_jobs.push_back({j, unplaced_reason::insufficient_capacity, why});
        } else {
          it->reason = unplaced_reason::insufficient_capacity;
          it->detail = why;
        }
        break;
      }
    }
  }
  ws.state.nodes[static_cast<std::size_t>(n)].loanable = false;  // not lent again this round
  if (out != nullptr) out->reclaimed_nodes.push_back(n);
}

/// The greedy reclaim order of `cands` on a copy of ws (costs recomputed
/// after each choice).
std::vector<std::int32_t> reclaim_order(work_state const& ws, std::vector<std::int32_t> cands) {
  work_state trial(ws);
  std::vector<std::int32_t> order;
  while (!cands.empty()) {
    auto const k = cheapest(trial, cands);
    order.push_back(cands[k]);
    clear_node(trial, cands[k], nullptr);
    cands.erase(cands.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return order;
}

// ------------------------------------------------------ can a node help?

/// Whether node n could hold one replica of inference job `jb` once every
/// non-inference replica on it is gone (inference jobs never borrow).
bool could_host(work_state const& ws, std::int32_t n, job const& jb) {
  auto const& nd = ws.state.nodes[static_cast<std::size_t>(n)];
  if (!admits(nd, jb, false)) return false;
  node_free f = free_of(nd);
  for (std::size_t r = 0; r < ws.running.size(); ++r) {
    auto const& rj = ws.running[r];
    if (ws.alive[r] == 0 || rj.kind == job_kind::inference) continue;
    for (auto const& rp : rj.replicas) {
      if (rp.node == n) give_back(nd, f, rj.per_replica, rp);
    }
  }
  return fit_count(f, jb.per_replica) >= 1;
}

// ------------------------------------------------------ inference placement

/// How much of the inference jobs a placement result serves: jobs placed in
/// full, then replicas placed (lexicographic).
using score = std::pair<std::int64_t, std::int64_t>;

class inference_fit {
 public:
  inference_fit(core_fn const& core, work_state const& ws, std::vector<std::int32_t> jobs,
                std::vector<job> const* overrides)
      : core_(core), jobs_(std::move(jobs)), shapes_(overrides != nullptr ? *overrides : ws.in.pending) {
    for (auto const& s : shapes_) full_.push_back(s.replicas);
    // A job the core placed in part keeps its replicas; only the rest are
    // sought, except under a required topology, where they could land
    // outside the domain the placed ones hold, or with distinct nodes,
    // where they could land on a node the placed ones hold: such a job is
    // left alone.
    for (auto j : jobs_) {
      auto const r = ws.running_of(j);
      if (r < 0) continue;
      auto& s = shapes_[static_cast<std::size_t>(j)];
      if (s.topo_mode == topology_mode::required || s.distinct_nodes) {
        s.replicas = 0;
        continue;
      }
      s.replicas = std::max<std::int32_t>(
          0, s.replicas - static_cast<std::int32_t>(ws.running[static_cast<std::size_t>(r)].replicas.size()));
    }
    jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(),
                               [&](std::int32_t j) { return shapes_[static_cast<std::size_t>(j)].replicas == 0; }),
                jobs_.end());
  }

  [[nodiscard]] std::vector<std::int32_t> const& jobs() const { return jobs_; }
  [[nodiscard]] job const& shape(std::int32_t j) const { return shapes_[static_cast<std::size_t>(j)]; }

  round_result assign(work_state const& ws) const {
    sub_round sub;
    sub.jobs = jobs_;
    sub.overrides = &shapes_;
    return assign_jobs(core_, ws, sub);
  }

  [[nodiscard]] score served(round_result const& r) const {
    score s{0, 0};
    for (auto const& p : r.placements) {
      auto const n = static_cast<std::int64_t>(p.replicas.size());
      s.first += n >= shapes_[static_cast<std::size_t>(p.job)].replicas ? 1 : 0;
      s.second += n;
    }
    return s;
  }

  /// Applies r's placements to ws and out (merging with partial placements).
  void apply(work_state& ws, round_result const& r, round_result& out) const {
    for (auto const& p : r.placements) {
      std::vector<replica_placement> reps;
      auto const prev = ws.running_of(p.job);
      if (prev >= 0) {
        reps = ws.running[static_cast<std::size_t>(prev)].replicas;
        ws.stop(static_cast<std::size_t>(prev));
        erase_placement(out, p.job);
      }
      reps.insert(reps.end(), p.replicas.begin(), p.replicas.end());
      ws.start(p.job, reps);
      out.placements.push_back({p.job, reps});
      if (static_cast<std::int32_t>(reps.size()) >= full_[static_cast<std::size_t>(p.job)]) {
        out.unplaced_jobs.erase(std::remove_if(out.unplaced_jobs.begin(), out.unplaced_jobs.end(),
                                               [&](unplaced const& u) { return u.job == p.job; }),
                                out.unplaced_jobs.end());
      }
    }
  }

 private:
  core_fn const& core_;
  std::vector<std::int32_t> jobs_;
  std::vector<job> shapes_;  ///< pending jobs, partial ones cut to what is missing
  std::vector<std::int32_t> full_;  ///< replicas each job needs in all
};

}  // namespace

void reclaim_loaned(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& inference_jobs,
                    std::vector<job> const* overrides, round_result& out) {
  auto const loaned = loaned_nodes(ws);
  if (loaned.empty()) return;
  std::vector<char> taken(ws.state.nodes.size(), 0);

  // 1. For the unplaced inference jobs: the shortest prefix of the greedy
  //    order (over nodes that could host one of their replicas) that serves
  //    them as well as reclaiming all those nodes would.
  std::vector<std::int32_t> jobs;
  for (auto j : inference_jobs) {
    PLACER_EXPECTS(j >= 0 && static_cast<std::size_t>(j) < ws.in.pending.size(), "reclaim: job index out of range");
    if (ws.in.pending[static_cast<std::size_t>(j)].kind == job_kind::inference) jobs.push_back(j);
  }
  inference_fit const fit(core, ws, jobs, overrides);
  if (!fit.jobs().empty()) {
    std::vector<std::int32_t> useful;
    for (auto n : loaned) {
      bool const helps = std::any_of(fit.jobs().begin(), fit.jobs().end(),
                                     [&](std::int32_t j) { return could_host(ws, n, fit.shape(j)); });
      if (helps) useful.push_back(n);
    }
    auto const order = reclaim_order(ws, useful);
    auto served_after = [&](std::size_t k) {
      work_state trial(ws);
      for (std::size_t i = 0; i < k; ++i) clear_node(trial, order[i], nullptr);
      return fit.served(fit.assign(trial));
    };
    score const none = served_after(0);
    score const all = order.empty() ? none : served_after(order.size());
    if (none < all) {
      // served(lo) < all <= served(hi): the search ends on a prefix that
      // serves as much as all of them (the smallest one when serving grows
      // with the prefix, as it does but for the core's heuristics).
      std::size_t lo = 0, hi = order.size();
      while (hi - lo > 1) {
        std::size_t const mid = lo + (hi - lo) / 2;
        (served_after(mid) < all ? lo : hi) = mid;
      }
      for (std::size_t i = 0; i < hi; ++i) {
        clear_node(ws, order[i], &out);
        taken[static_cast<std::size_t>(order[i])] = 1;
      }
      fit.apply(ws, fit.assign(ws), out);
    }
  }

  // 2. The cluster manager's request: exactly reclaim_nodes more loaned
  //    nodes (nodes a stopped gang already emptied cost 0 and come first).
  std::int32_t want = ws.in.pol.queue.reclaim_nodes;
  std::vector<std::int32_t> rest;
  for (auto n : loaned) {
    if (taken[static_cast<std::size_t>(n)] == 0) rest.push_back(n);
  }
  while (want > 0 && !rest.empty()) {
    auto const k = cheapest(ws, rest);
    clear_node(ws, rest[k], &out);
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
    --want;
  }
}

}  // namespace placer::detail
