// Elastic scale-out (Aryl): after the core has placed every pending job (an
// elastic one at its minimum, as a gang), the spare GPUs go to elastic jobs
// by a multiple-choice knapsack. Owns solve_mck and elastic_scale_out
// (policies.hpp has the contract).
//
// Units. Knapsack weights and the capacity are whole GPUs: a worker weighs
// ceil(gpu_milli_total / 1000) GPUs (a fractional share weighs 1, a
// CPU-only worker 0). Values are seconds of estimated JCT reduction under
// linear scaling: a job with R seconds of work left at n workers finishes
// in R*n/(n+k) with k more, so item k is worth R - R*n/(n+k).
#include "policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace placer::detail {

namespace {

constexpr std::int64_t unreachable = std::numeric_limits<std::int64_t>::min() / 4;
/// The DP table is (groups + 1) x (capacity + 1) int64 (32 MiB at this
/// bound) and costs items x (capacity + 1) relaxations. Above either bound
/// the weights are coarsened (see solve_mck), so a huge cluster cannot make
/// a round run out of memory or time.
constexpr std::int64_t max_dp_cells = std::int64_t{1} << 22;
constexpr std::int64_t max_dp_steps = std::int64_t{1} << 27;
/// Knapsack + placement passes per round: a pass whose chosen extras do not
/// all fit (the capacity is an upper bound, fragmentation decides) retries
/// the others on what is left.
constexpr int max_passes = 4;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<std::int32_t> solve_mck(std::vector<knapsack_group> const& groups, std::int64_t capacity) {
  std::vector<std::int32_t> choice(groups.size(), -1);
  if (groups.empty()) return choice;
  capacity = std::max<std::int64_t>(capacity, 0);

  // Exact reductions first: every weight is a multiple of their gcd, and no
  // choice can weigh more than the heaviest item of every group together.
  std::int64_t g = 0, heaviest_total = 0, n_items = 0;
  for (auto const& grp : groups) {
    PLACER_EXPECTS(grp.weight.size() == grp.value.size(), "knapsack: a group has unequal weight and value lists");
    std::int64_t heaviest = 0;
    for (auto w : grp.weight) {
      PLACER_EXPECTS(w >= 0, "knapsack: negative weight");
      g = std::gcd(g, w);
      if (w <= capacity) heaviest = std::max(heaviest, w);
    }
    heaviest_total = std::min(heaviest_total + heaviest, capacity);
    n_items += static_cast<std::int64_t>(grp.weight.size());
  }
  if (g == 0) g = 1;  // all weights zero
  std::int64_t cap = std::min(capacity, heaviest_total) / g;

  // Guard: above the budget, weights are counted in units of q (rounded
  // up) and the capacity in whole units (rounded down). Any choice within
  // the coarse capacity is within the true one (sum ceil(w/q) <= C/q
  // implies sum w <= C); optimality is then only approximate.
  auto const rows = static_cast<std::int64_t>(groups.size()) + 1;
  std::int64_t const target = std::max<std::int64_t>(
      1, std::min(max_dp_cells / rows, max_dp_steps / std::max<std::int64_t>(n_items, 1)));
  std::int64_t const q = cap + 1 > target ? ceil_div(cap + 1, target) : 1;
  cap /= q;
  auto unit = [&](std::int64_t w) { return ceil_div(w / g, q); };

  // best[(k) * (cap+1) + w]: best value of groups 0..k-1 at total weight
  // exactly w (in units), or `unreachable`.
  auto const width = static_cast<std::size_t>(cap + 1);
  std::vector<std::int64_t> best(static_cast<std::size_t>(rows) * width, unreachable);
  best[0] = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    auto const* prev = &best[k * width];
    auto* cur = &best[(k + 1) * width];
    std::copy_n(prev, width, cur);  // item -1: take nothing from group k
    auto const& grp = groups[k];
    for (std::size_t i = 0; i < grp.weight.size(); ++i) {
      auto const w = unit(grp.weight[i]);
      if (w > cap) continue;
      auto const v = grp.value[i];
      for (auto t = static_cast<std::size_t>(w); t < width; ++t) {
        if (prev[t - w] == unreachable) continue;
        cur[t] = std::max(cur[t], prev[t - w] + v);
      }
    }
  }

  // The optimum at the lowest total weight.
  auto const* last = &best[groups.size() * width];
  std::size_t at = 0;
  for (std::size_t t = 1; t < width; ++t) {
    if (last[t] > last[at]) at = t;
  }
  // Walk back from the last group. A later group takes nothing when it can,
  // else its lightest item that is consistent with the optimum: so among
  // optimal choices of this total weight the lower group indices are served
  // first (lexicographically), and the result is deterministic.
  for (std::size_t k = groups.size(); k-- > 0;) {
    auto const* prev = &best[k * width];
    auto const target_value = best[(k + 1) * width + at];
    if (prev[at] == target_value) continue;
    auto const& grp = groups[k];
    std::vector<std::int32_t> order(grp.weight.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return grp.weight[a] < grp.weight[b]; });
    bool found = false;
    for (auto i : order) {
      auto const w = unit(grp.weight[static_cast<std::size_t>(i)]);
      if (w > static_cast<std::int64_t>(at) || prev[at - static_cast<std::size_t>(w)] == unreachable) continue;
      if (prev[at - static_cast<std::size_t>(w)] + grp.value[static_cast<std::size_t>(i)] != target_value) continue;
      choice[k] = i;
      at -= static_cast<std::size_t>(w);
      found = true;
      break;
    }
    PLACER_EXPECTS(found, "knapsack: backtracking lost the optimum");
  }
  return choice;
}

namespace {

/// One elastic job that may grow this round.
struct candidate {
  std::size_t r = 0;          ///< ws.running index
  std::int32_t pending = -1;  ///< ws.in.pending index if it started this round
  std::int32_t room = 0;      ///< workers it may still add
  std::int32_t workers = 0;   ///< workers it has now
  std::int64_t remaining = 0; ///< seconds of work left at `workers`
  std::int64_t unit = 0;      ///< knapsack weight of one worker (whole GPUs)
  job shape;                  ///< what an extra worker is placed as
  std::int32_t domain = -1;   ///< required topology: extras stay in this domain
  bool saturated = false;     ///< got fewer than chosen once: no more tries
  std::vector<replica_placement> added;
};

/// Pool and model admission of a node for a job (as the core's node_admits).
bool admits(node const& nd, job const& j, bool loaning) {
  if (!nd.healthy) return false;
  bool const pool_ok = j.kind == job_kind::inference
                           ? nd.pool != pool_kind::training
                           : nd.pool != pool_kind::inference || (loaning && nd.loanable);
  if (!pool_ok) return false;
  if (j.per_replica.gpus == 0) return true;
  if (nd.gpu_model.empty()) return false;
  return j.allowed_gpu_models.empty() || std::find(j.allowed_gpu_models.begin(), j.allowed_gpu_models.end(),
                                                   nd.gpu_model) != j.allowed_gpu_models.end();
}

/// Workers of demand d that fit on node nd as it is now.
std::int64_t fit_count(node const& nd, demand const& d) {
  std::int64_t fit = std::numeric_limits<std::int64_t>::max();
  if (d.cpu_milli > 0) fit = std::min(fit, nd.cpu_milli_free / d.cpu_milli);
  if (d.memory_mib > 0) fit = std::min(fit, nd.memory_mib_free / d.memory_mib);
  if (d.gpus > 0) {
    std::int64_t slots = 0;
    for (std::size_t g = 0; g < nd.gpu_free_milli.size(); ++g) {
      if (!nd.gpu_is_healthy(g)) continue;
      auto const f = nd.gpu_free_milli[g];
      slots += d.fractional() ? f / d.gpu_milli : (f >= milli_per_gpu ? 1 : 0);
    }
    fit = std::min(fit, d.fractional() ? slots : slots / d.gpus);
  }
  return fit == std::numeric_limits<std::int64_t>::max() ? 0 : fit;
}

/// Spare capacity (whole GPUs) for the active candidates: per usable node,
/// the most GPUs any one of them could take there (fit x weight). An upper
/// bound when candidates compete for one node; the placement decides.
std::int64_t spare_capacity(work_state const& ws, std::vector<candidate> const& cands,
                            std::vector<char> const& hidden) {
  // Candidates of one shape see a node alike: evaluate each shape once.
  using shape_key = std::tuple<std::int32_t, std::int32_t, std::int64_t, std::int64_t, job_kind,
                               std::vector<std::string>, std::int32_t>;
  std::map<shape_key, candidate const*> shapes;
  for (auto const& c : cands) {
    if (c.saturated || c.room <= 0 || c.unit == 0) continue;
    auto const& d = c.shape.per_replica;
    shapes.emplace(shape_key{d.gpus, d.gpu_milli, d.cpu_milli, d.memory_mib, c.shape.kind, c.shape.allowed_gpu_models,
                             c.domain},
                   &c);
  }
  std::int64_t total = 0;
  bool const loaning = ws.in.pol.queue.loaning;
  for (std::size_t n = 0; n < ws.state.nodes.size(); ++n) {
    if (hidden[n] != 0) continue;
    auto const& nd = ws.state.nodes[n];
    std::int64_t most = 0;
    for (auto const& [key, c] : shapes) {
      if (!admits(nd, c->shape, loaning)) continue;
      most = std::max(most, fit_count(nd, c->shape.per_replica) * c->unit);
    }
    total += most;
  }
  return total;
}

/// Nodes outside `domain` (at `level`) as a hidden mask on top of `base`.
std::vector<char> confine(cluster const& c, std::vector<char> base, std::int32_t level, std::int32_t domain) {
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    bool inside = false;
    for (auto d = c.nodes[n].domain; d >= 0; d = c.topo.domains[static_cast<std::size_t>(d)].parent) {
      if (c.topo.domains[static_cast<std::size_t>(d)].level == level) {
        inside = d == domain;
        break;
      }
    }
    if (!inside) base[n] = 1;
  }
  return base;
}

std::int32_t domain_at(cluster const& c, std::int32_t node_index, std::int32_t level) {
  for (auto d = c.nodes[static_cast<std::size_t>(node_index)].domain; d >= 0;
       d = c.topo.domains[static_cast<std::size_t>(d)].parent) {
    if (c.topo.domains[static_cast<std::size_t>(d)].level == level) return d;
  }
  return -1;
}

/// Places extra workers (shape with replicas = k, not a gang) through the
/// core on the current state with `hidden` nodes withheld. Running jobs
/// have no pending index, so the sub-problem gets its own round_input and
/// work_state view of ws.state; assign_jobs applies the mask and policy.
std::vector<std::vector<replica_placement>> place_extras(core_fn const& core, work_state const& ws,
                                                         std::vector<job> jobs, std::vector<char> const& hidden) {
  round_input sub_in;
  sub_in.state = ws.state;
  sub_in.pending = std::move(jobs);
  sub_in.pol = ws.in.pol;
  sub_in.now = ws.in.now;
  work_state view(sub_in);
  sub_round sub;
  sub.jobs.resize(sub_in.pending.size());
  std::iota(sub.jobs.begin(), sub.jobs.end(), 0);
  sub.hidden = &hidden;
  round_result const r = assign_jobs(core, view, sub);
  std::vector<std::vector<replica_placement>> got(sub_in.pending.size());
  for (auto const& p : r.placements) got[static_cast<std::size_t>(p.job)] = p.replicas;
  return got;
}

/// Remaining seconds after adding k workers to n (linear scaling).
std::int64_t remaining_after(std::int64_t remaining, std::int32_t n, std::int32_t k) {
  if (n + k <= 0) return remaining;
  return remaining * n / (n + k);
}

}  // namespace

void elastic_scale_out(core_fn const& core, work_state& ws, round_result& out) {
  auto const now = ws.in.now;
  auto const& cl = ws.state;

  // Nodes held by reservations are never offered (backfill promised them).
  std::vector<char> hidden(cl.nodes.size(), 0);
  for (auto const& res : out.reservations) {
    for (auto n : res.nodes) {
      if (n >= 0 && static_cast<std::size_t>(n) < hidden.size()) hidden[static_cast<std::size_t>(n)] = 1;
    }
  }

  // Extra workers keep the GPU model(s) the job already runs on: data-parallel
  // workers on a slower model would hold the others back.
  auto models_of = [&](running_job const& rj) {
    std::set<std::string> ms;
    for (auto const& rp : rj.replicas) ms.insert(cl.nodes[static_cast<std::size_t>(rp.node)].gpu_model);
    return std::vector<std::string>(ms.begin(), ms.end());
  };
  auto worker_unit = [](demand const& d) {
    if (d.gpus == 0) return std::int64_t{0};
    return d.fractional() ? std::int64_t{1} : ceil_div(d.gpu_milli_total(), milli_per_gpu);
  };

  std::vector<candidate> cands;
  // Running elastic jobs below their maximum.
  for (std::size_t r = 0; r < ws.in.running.size(); ++r) {
    auto const& rj = ws.running[r];
    if (ws.alive[r] == 0 || rj.min_replicas <= 0 || rj.replicas.empty()) continue;
    auto const size = static_cast<std::int32_t>(rj.replicas.size());
    if (size >= rj.max_replicas) continue;
    candidate c;
    c.r = r;
    c.room = rj.max_replicas - size;
    c.workers = size;
    c.remaining = std::max<std::int64_t>(rj.estimated_end - now, 0);
    c.unit = worker_unit(rj.per_replica);
    c.shape.name = rj.name;
    c.shape.kind = rj.kind;
    c.shape.priority = rj.priority;
    c.shape.per_replica = rj.per_replica;
    c.shape.network_sensitivity = rj.network_sensitivity;
    c.shape.preemptible = rj.preemptible;
    if (rj.per_replica.gpus > 0) c.shape.allowed_gpu_models = models_of(rj);
    cands.push_back(std::move(c));
  }
  // Elastic jobs the core started this round at their minimum.
  for (std::size_t j = 0; j < ws.in.pending.size(); ++j) {
    auto const& jb = ws.in.pending[j];
    if (jb.min_replicas <= 0) continue;
    auto const r = ws.running_of(static_cast<std::int32_t>(j));
    if (r < 0) continue;
    auto const& rj = ws.running[static_cast<std::size_t>(r)];
    auto const size = static_cast<std::int32_t>(rj.replicas.size());
    auto const most = std::max(jb.max_replicas, jb.min_replicas);
    if (size >= most) continue;
    candidate c;
    c.r = static_cast<std::size_t>(r);
    c.pending = static_cast<std::int32_t>(j);
    c.room = most - size;
    c.workers = size;
    c.remaining = jb.estimated_duration;  // at its minimum, starting now
    c.unit = worker_unit(jb.per_replica);
    c.shape = jb;
    c.shape.min_replicas = c.shape.max_replicas = 0;
    if (jb.per_replica.gpus > 0) c.shape.allowed_gpu_models = models_of(rj);
    if (jb.topo_mode == topology_mode::required && jb.topology_level >= 0) {
      c.domain = domain_at(cl, rj.replicas.front().node, jb.topology_level);
    }
    cands.push_back(std::move(c));
  }
  if (cands.empty()) return;
  // Group order decides knapsack ties: higher priority first, then the
  // running order (given running jobs, then this round's starts).
  std::stable_sort(cands.begin(), cands.end(), [&](candidate const& a, candidate const& b) {
    if (a.shape.priority != b.shape.priority) return a.shape.priority > b.shape.priority;
    return a.r < b.r;
  });

  for (int pass = 0; pass < max_passes; ++pass) {
    std::int64_t const capacity = spare_capacity(ws, cands, hidden);
    std::vector<knapsack_group> groups;
    std::vector<std::size_t> group_of;  // group -> candidate
    for (std::size_t i = 0; i < cands.size(); ++i) {
      auto const& c = cands[i];
      if (c.saturated || c.room <= 0 || c.remaining <= 0) continue;
      // More workers than the capacity can weigh are never feasible.
      std::int64_t const room = c.unit > 0 ? std::min<std::int64_t>(c.room, capacity / c.unit) : c.room;
      if (room <= 0) continue;
      knapsack_group grp;
      for (std::int64_t k = 1; k <= room; ++k) {
        grp.weight.push_back(k * c.unit);
        grp.value.push_back(c.remaining - remaining_after(c.remaining, c.workers, static_cast<std::int32_t>(k)));
      }
      groups.push_back(std::move(grp));
      group_of.push_back(i);
    }
    if (groups.empty()) break;
    auto const choice = solve_mck(groups, capacity);

    // Unconfined extras go to the core together; a job whose topology is
    // required gets its own call, confined to the domain it runs in.
    std::vector<std::size_t> shared_idx;
    std::vector<job> shared_jobs;
    std::vector<std::pair<std::size_t, std::int32_t>> confined;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (choice[g] < 0) continue;
      auto const i = group_of[g];
      auto const k = choice[g] + 1;
      if (cands[i].domain >= 0) {
        confined.emplace_back(i, k);
      } else {
        job extra = cands[i].shape;
        extra.replicas = k;
        extra.gang = false;
        shared_idx.push_back(i);
        shared_jobs.push_back(std::move(extra));
      }
    }
    if (shared_idx.empty() && confined.empty()) break;

    bool progress = false;
    auto apply = [&](std::size_t i, std::int32_t wanted, std::vector<replica_placement> const& reps) {
      auto& c = cands[i];
      if (reps.empty()) {
        c.saturated = true;
        return;
      }
      ws.grow(c.r, reps);
      auto const k = static_cast<std::int32_t>(reps.size());
      c.remaining = remaining_after(c.remaining, c.workers, k);
      c.workers += k;
      c.room -= k;
      c.added.insert(c.added.end(), reps.begin(), reps.end());
      auto& rj = ws.running[c.r];
      rj.estimated_end = now + c.remaining;  // later policies see the shorter run
      for (auto const& rp : reps) {
        rj.loaned = rj.loaned ||
                    (rj.kind != job_kind::inference && cl.nodes[static_cast<std::size_t>(rp.node)].pool == pool_kind::inference);
      }
      if (k < wanted) c.saturated = true;
      progress = true;
    };
    if (!shared_jobs.empty()) {
      auto const got = place_extras(core, ws, shared_jobs, hidden);
      for (std::size_t s = 0; s < shared_idx.size(); ++s) apply(shared_idx[s], shared_jobs[s].replicas, got[s]);
    }
    for (auto const& [i, k] : confined) {
      job extra = cands[i].shape;
      extra.replicas = k;
      extra.gang = false;
      auto const mask = confine(cl, hidden, extra.topology_level, cands[i].domain);
      auto const got = place_extras(core, ws, {extra}, mask);
      apply(i, k, got[0]);
    }
    if (!progress) break;
  }

  // Report: pending jobs' placements grow; running jobs get one scale-out.
  for (auto const& c : cands) {
    if (c.added.empty()) continue;
    if (c.pending >= 0) {
      auto it = std::find_if(out.placements.begin(), out.placements.end(),
                             [&](placement const& p) { return p.job == c.pending; });
      PLACER_EXPECTS(it != out.placements.end(), "elastic: a job started this round has no placement");
      it->replicas.insert(it->replicas.end(), c.added.begin(), c.added.end());
    } else {
      out.scale_outs.push_back({ws.running[c.r].name, c.added, "elastic"});
    }
  }
}

}  // namespace placer::detail
