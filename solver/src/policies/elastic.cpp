// Elastic scale-out (Aryl): after the core has placed every pending job (an
// elastic one at the size it asks for, within its range, as a gang), the
// spare GPUs go to elastic jobs by a multiple-choice knapsack; and
// scale-in, which gives extra workers back to blocked jobs (see the
// scale-in section below). Owns solve_mck, elastic_scale_out and
// elastic_scale_in_for (policies.hpp has the contract).
//
// Units. Knapsack weights and the capacity are whole GPUs: a worker weighs
// ceil(gpu_milli_total / 1000) GPUs (a fractional share weighs 1, a
// CPU-only worker 0). Values are seconds of estimated JCT reduction under
// linear scaling: a job with R seconds of work left at n workers finishes
// in R*n/(n+k) with k more, so item k is worth R - R*n/(n+k). R is the
// estimated_duration of a job started this round (at its start size)
// and max(estimated_end - now, 0) of a running one; a job without an
// estimate, or past it, gains nothing and is not grown.
//
// The capacity is an upper bound (see spare_capacity): the chosen extras go
// through the core, a job keeps the extras that fit, and a job that got
// fewer than chosen drops out while the knapsack re-runs on what is left
// (a few passes at most).
#include "host_fit.hpp"
#include "policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <bit>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
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
    heaviest_total = heaviest > capacity - heaviest_total ? capacity : heaviest_total + heaviest;  // saturating
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

/// Workers of demand d that fit on node nd as it is now; a worker that
/// needs nothing gives no capacity to share out.
std::int64_t fit_now(node const& nd, demand const& d) {
  bool const needs = d.cpu_milli > 0 || d.memory_mib > 0 || d.gpus > 0;
  return needs ? fit_free(nd, d) : 0;
}

/// Spare capacity (whole GPUs) for the active candidates: per usable node,
/// the most GPUs any one of them could take there (fit x weight). An upper
/// bound when candidates compete for one node; the placement decides.
std::int64_t spare_capacity(work_state const& ws, std::vector<candidate> const& cands,
                            std::vector<char> const& hidden) {
  // Candidates of one shape see a node alike: evaluate each shape once.
  // (A candidate with node constraints is a shape of its own.)
  using shape_key = std::tuple<std::int32_t, std::int32_t, std::int64_t, std::int64_t, job_kind,
                               std::vector<std::string>, std::int32_t, std::size_t>;
  std::map<shape_key, candidate const*> shapes;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    auto const& c = cands[i];
    if (c.saturated || c.room <= 0 || c.unit == 0) continue;
    auto const& d = c.shape.per_replica;
    shapes.emplace(shape_key{d.gpus, d.gpu_milli, d.cpu_milli, d.memory_mib, c.shape.kind, c.shape.allowed_gpu_models,
                             c.domain, c.shape.constraints.empty() ? 0 : i + 1},
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
      most = std::max(most, fit_now(nd, c->shape.per_replica) * c->unit);
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
    c.shape.constraints = rj.constraints;
    if (rj.per_replica.gpus > 0) c.shape.allowed_gpu_models = models_of(rj);
    cands.push_back(std::move(c));
  }
  // Elastic jobs the core started this round (at their start size).
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
    c.remaining = jb.estimated_duration;  // at its start size, starting now
    c.unit = worker_unit(jb.per_replica);
    c.shape = jb;
    c.shape.min_replicas = c.shape.max_replicas = 0;
    if (jb.per_replica.gpus > 0) c.shape.allowed_gpu_models = models_of(rj);
    if (jb.topo_mode == topology_mode::required && jb.topology_level >= 0) {
      c.domain = domain_at(cl, rj.replicas.front().node, jb.topology_level);
    }
    cands.push_back(std::move(c));
  }
  // Growth is opportunistic and yields to blocked work, the rule the
  // scale-in serves: no candidate grows while a pending job of equal or
  // higher priority is still blocked for capacity (InsufficientCapacity,
  // GangIncomplete or Reserved; Deferred jobs wait by choice) and could use
  // what the candidate would take (a node both admit where the candidate
  // could add a worker). Otherwise the extras would hold GPUs the blocked
  // job needs until they end, or be scaled in again next round.
  if (!cands.empty()) {
    struct blocked_kind {
      job const* shape = nullptr;  ///< kind, models, constraints and GPU demand decide admission
      std::int32_t priority = 0;   ///< the highest blocked priority of this kind
    };
    std::vector<blocked_kind> blocked;
    for (auto const& u : out.unplaced_jobs) {
      if (u.reason != unplaced_reason::insufficient_capacity && u.reason != unplaced_reason::gang_incomplete &&
          u.reason != unplaced_reason::reserved) {
        continue;
      }
      if (u.job < 0 || static_cast<std::size_t>(u.job) >= ws.in.pending.size()) continue;
      auto const& b = ws.in.pending[static_cast<std::size_t>(u.job)];
      auto it = std::find_if(blocked.begin(), blocked.end(), [&](blocked_kind const& k) {
        return k.shape->kind == b.kind && (k.shape->per_replica.gpus > 0) == (b.per_replica.gpus > 0) &&
               k.shape->allowed_gpu_models == b.allowed_gpu_models && k.shape->constraints == b.constraints;
      });
      if (it == blocked.end()) {
        blocked.push_back({&b, b.priority});
      } else {
        it->priority = std::max(it->priority, b.priority);
      }
    }
    if (!blocked.empty()) {
      bool const loaning = ws.in.pol.queue.loaning;
      auto yields = [&](candidate const& c) {
        for (auto const& k : blocked) {
          if (k.priority < c.shape.priority) continue;
          for (std::size_t n = 0; n < cl.nodes.size(); ++n) {
            auto const& nd = cl.nodes[n];
            if (hidden[n] != 0 || !admits(nd, *k.shape, loaning) || !admits(nd, c.shape, loaning)) continue;
            if (fit_now(nd, c.shape.per_replica) > 0) return true;
          }
        }
        return false;
      };
      cands.erase(std::remove_if(cands.begin(), cands.end(), yields), cands.end());
    }
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
    std::vector<std::int64_t> group_k0;  // group -> the workers its first item adds
    for (std::size_t i = 0; i < cands.size(); ++i) {
      auto const& c = cands[i];
      if (c.saturated || c.room <= 0 || c.remaining <= 0) continue;
      // More workers than the capacity can weigh are never feasible.
      std::int64_t const room = c.unit > 0 ? std::min<std::int64_t>(c.room, capacity / c.unit) : c.room;
      if (room <= 0) continue;
      // Item k = k more workers. Workers that weigh nothing (CPU-only) all
      // fit, and more of them is always worth more: one item, k = room,
      // rather than one per possible size.
      knapsack_group grp;
      std::int64_t const k0 = c.unit > 0 ? 1 : room;
      for (std::int64_t k = k0; k <= room; ++k) {
        grp.weight.push_back(k * c.unit);
        grp.value.push_back(c.remaining - remaining_after(c.remaining, c.workers, static_cast<std::int32_t>(k)));
      }
      groups.push_back(std::move(grp));
      group_of.push_back(i);
      group_k0.push_back(k0);
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
      auto const k = static_cast<std::int32_t>(choice[g] + group_k0[g]);
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
    if (!progress || ws.out_of_time()) break;
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

// ------------------------------------------------------------------ scale-in
//
// Extra workers (above min_replicas) are opportunistic: a blocked job of
// equal or higher priority may take their GPUs back. Per blocked job (queue
// order) and per node set it must fit in (the domains of its required
// topology level, else the whole cluster), a greedy search on a host view
// of the nodes (host_fit.hpp, exact for one job class) picks the extras:
// one more replica of the job at a time, on the node where that costs the
// fewest removals (a node's extras enumerated exactly, up to exact_units),
// ties to the least JCT loss, then the lowest node index; then every
// removal that is not needed is dropped (latest first). The cheapest node
// set (fewest removals, then least loss, then index) is confirmed by the
// core on a scratch state with the extras removed; the core's placement is
// the one applied. Nothing changes unless the whole job is placed.

namespace {

/// Removable replicas per node enumerated exactly (2^12 subsets); above
/// that, greedy in replica order.
constexpr std::size_t exact_units = 12;

/// Seconds of JCT an elastic job loses when k of its n workers go (the
/// scale-out model backwards: R seconds at n workers become R*n/(n-k)).
std::int64_t shrink_loss(std::int64_t remaining, std::int32_t n, std::int32_t k) {
  if (k <= 0 || remaining <= 0 || n - k <= 0) return 0;
  return remaining * n / (n - k) - remaining;
}

/// A running elastic job whose extras may make room.
struct donor {
  std::size_t r = 0;           ///< ws.running index
  std::int32_t workers = 0;    ///< replicas it has now
  std::int32_t cap = 0;        ///< replicas it may lose (down to max(min_replicas, 1))
  std::int64_t remaining = 0;  ///< seconds of work left at `workers`
};

/// One removable replica: donor position and index into its replicas.
struct extra {
  std::size_t d = 0;
  std::size_t rep = 0;
  std::int32_t node = -1;
};

/// The replicas to remove so that the job fits in one node set.
struct shrink_plan {
  std::vector<extra> removed;
  std::int64_t loss = 0;  ///< total JCT loss (seconds)
  std::size_t where = 0;  ///< node set position (tie-break)
};

bool better_plan(shrink_plan const& a, shrink_plan const& b) {
  if (a.removed.size() != b.removed.size()) return a.removed.size() < b.removed.size();
  if (a.loss != b.loss) return a.loss < b.loss;
  return a.where < b.where;
}

/// Subset masks of m <= exact_units elements by (popcount, value), per m.
std::vector<std::uint32_t> const& masks_by_size(std::size_t m) {
  static std::vector<std::vector<std::uint32_t>> const tables = [] {
    std::vector<std::vector<std::uint32_t>> t(exact_units + 1);
    for (std::size_t k = 0; k <= exact_units; ++k) {
      for (std::uint32_t mask = 1; mask < (1U << k); ++mask) t[k].push_back(mask);
      std::stable_sort(t[k].begin(), t[k].end(),
                       [](std::uint32_t a, std::uint32_t b) { return std::popcount(a) < std::popcount(b); });
    }
    return t;
  }();
  return tables[m];
}

/// Node sets a job must fit in: the domains of its required topology level
/// (domain index order), else the whole cluster.
std::vector<std::vector<std::int32_t>> node_sets_for(cluster const& c, job const& shape) {
  auto const n_nodes = static_cast<std::int32_t>(c.nodes.size());
  std::vector<std::vector<std::int32_t>> sets;
  bool const required = shape.topo_mode == topology_mode::required && shape.topology_level > 0 && !c.topo.empty() &&
                        shape.topology_level < c.topo.levels();
  if (!required) {
    sets.emplace_back(static_cast<std::size_t>(n_nodes));
    std::iota(sets.back().begin(), sets.back().end(), 0);
    return sets;
  }
  auto const paths = node_domain_paths(c);
  auto const levels = std::max(c.topo.levels(), 1);
  std::map<std::int32_t, std::vector<std::int32_t>> by_domain;
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    auto const d = paths[static_cast<std::size_t>(n) * static_cast<std::size_t>(levels) +
                         static_cast<std::size_t>(shape.topology_level)];
    if (d >= 0) by_domain[d].push_back(n);
  }
  for (auto& [d, ns] : by_domain) sets.push_back(std::move(ns));
  return sets;
}

/// The greedy search of one blocked job over node sets of one state.
class shrink_search {
 public:
  shrink_search(work_state const& ws, job const& shape, std::int64_t need, std::vector<donor> const& donors)
      : ws_(ws), shape_(shape), need_(need), donors_(donors), loaning_(ws.in.pol.queue.loaning),
        slot_(ws.state.nodes.size(), -1) {}

  /// The fewest extras (then least loss) whose removal lets the job fit on
  /// `dom` (host screen); nullopt if even all of them would not.
  std::optional<shrink_plan> plan(std::vector<std::int32_t> const& dom);

 private:
  struct view {
    std::int32_t node = -1;
    node_free now;              ///< free with the removals so far
    std::int64_t fit = 0;       ///< replicas of the job it holds now
    std::vector<extra> avail;   ///< extras not removed yet (donor, replica order)
    bool stale = true;
    bool has = false;           ///< an option that adds a replica exists
    std::vector<std::size_t> pick;  ///< the option: positions in avail
    std::int64_t loss = 0;
  };

  void best_option(view& v) const;
  [[nodiscard]] std::int64_t loss_of(std::vector<std::int32_t> const& extra_count) const;

  work_state const& ws_;
  job const& shape_;
  std::int64_t need_;
  std::vector<donor> const& donors_;
  bool loaning_;
  std::vector<std::int32_t> slot_;  ///< node -> position in views_ (-1 elsewhere; reset after each plan)
  std::vector<view> views_;
  std::vector<std::int32_t> taken_;  ///< per donor: extras removed so far
};

std::int64_t shrink_search::loss_of(std::vector<std::int32_t> const& extra_count) const {
  std::int64_t loss = 0;
  for (std::size_t d = 0; d < donors_.size(); ++d) {
    auto const k0 = taken_[d], k1 = taken_[d] + extra_count[d];
    loss += shrink_loss(donors_[d].remaining, donors_[d].workers, k1) -
            shrink_loss(donors_[d].remaining, donors_[d].workers, k0);
  }
  return loss;
}

void shrink_search::best_option(view& v) const {
  v.stale = false;
  v.has = false;
  v.pick.clear();
  v.loss = 0;
  auto const& nd = ws_.state.nodes[static_cast<std::size_t>(v.node)];
  auto const& d = shape_.per_replica;
  // The donors with extras on this node, and each extra's local donor.
  std::vector<std::size_t> local;
  std::vector<std::size_t> of(v.avail.size());
  for (std::size_t k = 0; k < v.avail.size(); ++k) {
    auto it = std::find(local.begin(), local.end(), v.avail[k].d);
    if (it == local.end()) it = local.insert(local.end(), v.avail[k].d);
    of[k] = static_cast<std::size_t>(it - local.begin());
  }
  std::vector<std::int32_t> count(local.size(), 0);
  auto within_caps = [&] {
    for (std::size_t l = 0; l < local.size(); ++l) {
      if (taken_[local[l]] + count[l] > donors_[local[l]].cap) return false;
    }
    return true;
  };
  auto loss = [&] {
    std::int64_t x = 0;
    for (std::size_t l = 0; l < local.size(); ++l) {
      auto const& dn = donors_[local[l]];
      auto const k0 = taken_[local[l]];
      x += shrink_loss(dn.remaining, dn.workers, k0 + count[l]) - shrink_loss(dn.remaining, dn.workers, k0);
    }
    return x;
  };
  if (v.avail.size() <= exact_units) {
    // Every subset by size: the smallest that adds a replica, least loss.
    std::int32_t size = 0;
    for (auto mask : masks_by_size(v.avail.size())) {
      auto const pc = std::popcount(mask);
      if (v.has && pc > size) break;
      std::fill(count.begin(), count.end(), 0);
      for (std::size_t k = 0; k < v.avail.size(); ++k) count[of[k]] += static_cast<std::int32_t>((mask >> k) & 1U);
      if (!within_caps()) continue;
      node_free f = v.now;
      for (std::size_t k = 0; k < v.avail.size(); ++k) {
        if (((mask >> k) & 1U) == 0) continue;
        auto const& rj = ws_.running[donors_[v.avail[k].d].r];
        give_back(nd, f, rj.per_replica, rj.replicas[v.avail[k].rep]);
      }
      if (fit_count(f, d) <= v.fit) continue;
      auto const x = loss();
      if (!v.has || x < v.loss) {
        v.has = true;
        v.loss = x;
        size = pc;
        v.pick.clear();
        for (std::size_t k = 0; k < v.avail.size(); ++k) {
          if (((mask >> k) & 1U) != 0) v.pick.push_back(k);
        }
      }
    }
    return;
  }
  // Many extras on one node: add them in order (within the caps) until the
  // node holds one more replica.
  node_free f = v.now;
  for (std::size_t k = 0; k < v.avail.size(); ++k) {
    auto const& u = v.avail[k];
    if (taken_[u.d] + count[of[k]] >= donors_[u.d].cap) continue;
    ++count[of[k]];
    auto const& rj = ws_.running[donors_[u.d].r];
    give_back(nd, f, rj.per_replica, rj.replicas[u.rep]);
    v.pick.push_back(k);
    if (fit_count(f, d) > v.fit) {
      v.has = true;
      v.loss = loss();
      return;
    }
  }
  v.pick.clear();
}

std::optional<shrink_plan> shrink_search::plan(std::vector<std::int32_t> const& dom) {
  auto const& nodes = ws_.state.nodes;
  auto const& d = shape_.per_replica;
  views_.clear();
  taken_.assign(donors_.size(), 0);
  struct reset_slots {  // leaves slot_ all -1 on every return path
    shrink_search& s;
    ~reset_slots() {
      for (auto const& v : s.views_) s.slot_[static_cast<std::size_t>(v.node)] = -1;
    }
  } const reset{*this};

  // What the node set holds now; a view per admitting node with extras.
  std::int64_t total = 0;
  bool any_admits = false;
  std::vector<char> admitting;  // per position in dom
  admitting.reserve(dom.size());
  for (auto n : dom) {
    auto const& nd = nodes[static_cast<std::size_t>(n)];
    bool const ok = admits(nd, shape_, loaning_);
    admitting.push_back(ok ? 1 : 0);
    if (!ok) continue;
    any_admits = true;
    total += fit_free(nd, d);
  }
  if (!any_admits) return std::nullopt;
  if (total >= need_) return shrink_plan{};  // fits with nothing removed
  // Node -> view, for the admitting nodes of the set that hold extras.
  for (std::size_t k = 0; k < dom.size(); ++k) {
    if (admitting[k] != 0) slot_[static_cast<std::size_t>(dom[k])] = -2;
  }
  for (std::size_t di = 0; di < donors_.size(); ++di) {
    auto const& rj = ws_.running[donors_[di].r];
    for (std::size_t i = 0; i < rj.replicas.size(); ++i) {
      auto const n = rj.replicas[i].node;
      if (n < 0 || static_cast<std::size_t>(n) >= nodes.size()) continue;
      auto& s = slot_[static_cast<std::size_t>(n)];
      if (s == -1) continue;  // outside the set or not admitting
      if (s == -2) {
        s = static_cast<std::int32_t>(views_.size());
        view v;
        v.node = n;
        v.now = free_of(nodes[static_cast<std::size_t>(n)]);
        v.fit = fit_count(v.now, d);
        views_.push_back(std::move(v));
      }
      views_[static_cast<std::size_t>(s)].avail.push_back({di, i, n});
    }
  }
  for (std::size_t k = 0; k < dom.size(); ++k) {
    auto& s = slot_[static_cast<std::size_t>(dom[k])];
    if (s == -2) s = -1;
  }
  // Upper bound: every extra on the set removed (caps ignored).
  std::int64_t bound = total;
  for (auto const& v : views_) {
    node_free f = v.now;
    for (auto const& u : v.avail) {
      auto const& rj = ws_.running[donors_[u.d].r];
      give_back(nodes[static_cast<std::size_t>(v.node)], f, rj.per_replica, rj.replicas[u.rep]);
    }
    bound += fit_count(f, d) - v.fit;
  }
  if (bound < need_) return std::nullopt;

  // Greedy: one more replica at a time where it costs the fewest removals.
  std::vector<extra> chosen;
  while (total < need_) {
    std::size_t best = views_.size();
    for (std::size_t k = 0; k < views_.size(); ++k) {
      auto& v = views_[k];
      if (v.stale) best_option(v);
      if (!v.has) continue;
      if (best == views_.size()) {
        best = k;
        continue;
      }
      auto const& b = views_[best];
      bool const better = v.pick.size() != b.pick.size() ? v.pick.size() < b.pick.size()
                          : v.loss != b.loss          ? v.loss < b.loss
                                                      : v.node < b.node;
      if (better) best = k;
    }
    if (best == views_.size()) return std::nullopt;
    auto& v = views_[best];
    auto const& nd = nodes[static_cast<std::size_t>(v.node)];
    std::vector<char> touched(donors_.size(), 0);
    for (auto k : v.pick) {
      auto const& u = v.avail[k];
      auto const& rj = ws_.running[donors_[u.d].r];
      give_back(nd, v.now, rj.per_replica, rj.replicas[u.rep]);
      ++taken_[u.d];
      touched[u.d] = 1;
      chosen.push_back(u);
    }
    for (auto k = v.pick.size(); k-- > 0;) v.avail.erase(v.avail.begin() + static_cast<std::ptrdiff_t>(v.pick[k]));
    auto const fit = fit_count(v.now, d);
    total += fit - v.fit;
    v.fit = fit;
    // The node changed; other nodes' options change where a donor's
    // remaining cap did.
    for (auto& w : views_) {
      w.stale = w.stale || &w == &v ||
                std::any_of(w.avail.begin(), w.avail.end(), [&](extra const& u) { return touched[u.d] != 0; });
    }
  }

  // Drop every removal the job does not need (latest first).
  auto holds = [&](std::vector<extra> const& set) {
    std::vector<std::pair<std::int32_t, node_free>> frees;
    for (auto const& u : set) {
      auto it = std::find_if(frees.begin(), frees.end(), [&](auto const& t) { return t.first == u.node; });
      if (it == frees.end()) {
        frees.emplace_back(u.node, free_of(nodes[static_cast<std::size_t>(u.node)]));
        it = frees.end() - 1;
      }
      auto const& rj = ws_.running[donors_[u.d].r];
      give_back(nodes[static_cast<std::size_t>(u.node)], it->second, rj.per_replica, rj.replicas[u.rep]);
    }
    std::int64_t t = 0;
    for (std::size_t k = 0; k < dom.size(); ++k) {
      if (admitting[k] == 0) continue;
      auto const n = dom[k];
      auto it = std::find_if(frees.begin(), frees.end(), [&](auto const& f) { return f.first == n; });
      t += it != frees.end() ? fit_count(it->second, d) : fit_free(nodes[static_cast<std::size_t>(n)], d);
    }
    return t >= need_;
  };
  for (std::size_t k = chosen.size(); k-- > 0;) {
    auto trial = chosen;
    trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(k));
    if (holds(trial)) chosen = std::move(trial);
  }

  shrink_plan p;
  std::vector<std::int32_t> count(donors_.size(), 0);
  for (auto const& u : chosen) ++count[u.d];
  std::fill(taken_.begin(), taken_.end(), 0);
  p.loss = loss_of(count);
  p.removed = std::move(chosen);
  return p;
}

/// Replica indices to remove per donor (donor order; indices ascending).
std::vector<std::pair<std::size_t, std::vector<std::size_t>>> by_donor(std::vector<extra> const& removed,
                                                                       std::size_t n_donors) {
  std::vector<std::vector<std::size_t>> idx(n_donors);
  for (auto const& u : removed) idx[u.d].push_back(u.rep);
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> out;
  for (std::size_t d = 0; d < n_donors; ++d) {
    if (idx[d].empty()) continue;
    std::sort(idx[d].begin(), idx[d].end());
    out.emplace_back(d, std::move(idx[d]));
  }
  return out;
}

}  // namespace

void elastic_scale_in_for(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& blocked,
                          std::vector<job> const* overrides, round_result& out) {
  PLACER_EXPECTS(overrides == nullptr || overrides->size() == ws.in.pending.size(),
                 "elastic_scale_in_for: overrides must cover every pending job");
  auto const now = ws.in.now;
  // Long queues repeat shapes: a job shaped like one that found no room
  // since the last change, at no higher priority (the same or fewer
  // donors), finds none either.
  struct miss {
    job const* shape = nullptr;
    std::int32_t priority = 0;
  };
  std::vector<miss> misses;
  auto same_shape = [](job const& a, job const& b) {
    return a.kind == b.kind && a.replicas == b.replicas && a.gang == b.gang &&
           a.per_replica.gpus == b.per_replica.gpus && a.per_replica.gpu_milli == b.per_replica.gpu_milli &&
           a.per_replica.cpu_milli == b.per_replica.cpu_milli && a.per_replica.memory_mib == b.per_replica.memory_mib &&
           a.topo_mode == b.topo_mode && a.topology_level == b.topology_level &&
           a.allowed_gpu_models == b.allowed_gpu_models;
  };
  for (auto j : blocked) {
    PLACER_EXPECTS(j >= 0 && static_cast<std::size_t>(j) < ws.in.pending.size(),
                   "elastic_scale_in_for: job index out of range");
    if (ws.out_of_time()) break;
    job const& shape = overrides != nullptr ? (*overrides)[static_cast<std::size_t>(j)]
                                            : ws.in.pending[static_cast<std::size_t>(j)];
    if (shape.replicas <= 0) continue;
    std::int64_t const prev = ws.running_of(j);
    if (prev >= 0 &&
        static_cast<std::int32_t>(ws.running[static_cast<std::size_t>(prev)].replicas.size()) >= shape.replicas) {
      continue;  // already placed in full
    }
    if (prev < 0 && std::any_of(misses.begin(), misses.end(), [&](miss const& m) {
          return shape.priority <= m.priority && same_shape(shape, *m.shape);
        })) {
      continue;
    }
    auto const record_miss = [&] {
      if (prev >= 0) return;  // its partial placement made the search differ
      auto it = std::find_if(misses.begin(), misses.end(), [&](miss const& m) { return same_shape(shape, *m.shape); });
      if (it == misses.end()) {
        misses.push_back({&shape, shape.priority});
      } else {
        it->priority = std::max(it->priority, shape.priority);
      }
    };

    // Donors: given running elastic jobs above their minimum, not of
    // strictly higher priority (this round's starts are not donors).
    std::vector<donor> donors;
    for (std::size_t r = 0; r < ws.in.running.size(); ++r) {
      auto const& rj = ws.running[r];
      if (ws.alive[r] == 0 || rj.min_replicas <= 0 || rj.priority > shape.priority) continue;
      auto const n = static_cast<std::int32_t>(rj.replicas.size());
      auto const cap = n - std::max(rj.min_replicas, 1);
      if (cap <= 0) continue;
      donors.push_back({r, n, cap, std::max<std::int64_t>(rj.estimated_end - now, 0)});
    }
    if (donors.empty()) {
      record_miss();
      continue;
    }

    // A partial placement (non-gang job) is released in the search and
    // replaced only if the whole job then fits.
    std::optional<work_state> released;
    work_state const* base = &ws;
    if (prev >= 0) {
      released.emplace(ws);
      released->stop(static_cast<std::size_t>(prev));
      base = &*released;
    }
    auto const sets = node_sets_for(base->state, shape);
    shrink_search search(*base, shape, shape.replicas, donors);
    std::vector<shrink_plan> plans;
    for (std::size_t s = 0; s < sets.size(); ++s) {
      if (auto p = search.plan(sets[s])) {
        p->where = s;
        plans.push_back(std::move(*p));
      }
    }
    std::stable_sort(plans.begin(), plans.end(), better_plan);

    bool placed = false;
    for (auto const& p : plans) {
      auto const removals = by_donor(p.removed, donors.size());
      // Confirm with the core on a scratch state with the extras removed.
      work_state trial(*base);
      for (auto const& [d, idx] : removals) trial.shrink(donors[d].r, idx);
      std::vector<char> hidden;
      sub_round sub;
      sub.jobs = {j};
      sub.overrides = overrides;
      if (sets.size() > 1) {
        hidden.assign(trial.state.nodes.size(), 1);
        for (auto n : sets[p.where]) hidden[static_cast<std::size_t>(n)] = 0;
        sub.hidden = &hidden;
      }
      round_result const got = assign_jobs(core, trial, sub);
      if (got.placements.size() != 1 ||
          static_cast<std::int32_t>(got.placements[0].replicas.size()) < shape.replicas) {
        continue;
      }
      auto const& reps = got.placements[0].replicas;

      // Apply: shrink the donors (their runs get longer), then start the job.
      for (auto const& [d, idx] : removals) {
        auto const& dn = donors[d];
        auto const k = static_cast<std::int32_t>(idx.size());
        std::string const name = ws.running[dn.r].name;
        auto removed = ws.shrink(dn.r, idx);
        if (dn.remaining > 0) {
          ws.running[dn.r].estimated_end = now + dn.remaining + shrink_loss(dn.remaining, dn.workers, k);
        }
        auto it = std::find_if(out.scale_ins.begin(), out.scale_ins.end(), [&](scale_change const& sc) {
          return sc.job == name && sc.reason == "make-room";
        });
        if (it == out.scale_ins.end()) {
          out.scale_ins.push_back({name, std::move(removed), "make-room"});
        } else {
          it->replicas.insert(it->replicas.end(), removed.begin(), removed.end());
        }
      }
      if (prev >= 0) {
        ws.stop(static_cast<std::size_t>(prev));
        out.placements.erase(std::remove_if(out.placements.begin(), out.placements.end(),
                                            [&](placement const& pl) { return pl.job == j; }),
                             out.placements.end());
      }
      ws.start(j, reps);
      out.placements.push_back({j, reps});
      out.unplaced_jobs.erase(std::remove_if(out.unplaced_jobs.begin(), out.unplaced_jobs.end(),
                                             [&](unplaced const& u) { return u.job == j; }),
                              out.unplaced_jobs.end());
      placed = true;
      break;
    }
    if (placed) {
      misses.clear();  // the state changed
    } else {
      record_miss();
    }
  }
}

}  // namespace placer::detail
