#pragma once
// A locality job placed inside the chain (tier_problem::local, tier_locality;
// issue 53, item 1): the host's assigner::place_local in the placer mode,
// step for step, on the state the tier before it left.
//
// The leading CTA chooses together and rank 0 commits: a domain is the
// least (capacity, index) of the level's candidates (the CTA's reduction),
// a replica's node the best (score plus bonus, then the lowest node) of
// the domain's nodes (the first group's, a warp's, in a small domain), each
// a reduction of the workers' shares (tier_local_team::least: one barrier
// each); rank 0 takes the replica, updates the domains' capacities and
// stamps the node as the tiers' commits do, so the next tier re-scores the
// node's other live cells (its refresh candidates are the placements), and
// the group's lanes re-score the class's cell on it (as the host's commit
// did). A domain
// that gives back what it took leaves those nodes as they were, stamps
// included: their cells' values stand (the class's re-scored again), and
// no state label is touched (the host's path touched none).
//
// The class's capacity per domain is summed afresh (tier_local_caps: by the
// grid where the tier before is not a locality job's) unless the job just
// before it in the chain was of the same class: its commits kept them
// current, as the host's caps_after did.

#include "buffers.hpp"
#include "commit.hpp"

#include <placer/kernels/ops.hpp>

#include <cstdint>
#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
#include <omp.h>
#endif

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// No value in a reduction (tier_local_team::least).
inline constexpr std::int64_t tier_local_none = 0x7fffffffffffffffLL;

/// A domain of at most this many nodes is the first group's (a warp's:
/// its scan a step or two a lane, its reductions at the warp's barrier);
/// a larger one's replicas are the CTA's.
inline constexpr std::int32_t tier_local_group_nodes = 128;

/// The most levels whose runs tier_local_caps sums before adding them up;
/// deeper ones add node by node.
inline constexpr std::int32_t tier_local_run_levels = 8;

/// Class c's capacity per domain (its replicas each node holds, summed;
/// assigner::load_caps) into b.local_cap, by the leading CTA or, `wide`,
/// by the grid: each worker a run of consecutive nodes, a domain's share
/// added once per run of its nodes (a rack's nodes are consecutive, the
/// root's are all). Ends at a barrier (the grid's where wide).
template <class Team>
PLACER_HD void tier_local_caps(Team& t, tier_buffers const& b, std::int32_t c, bool wide) {
  auto const& p = b.p;
  auto const& g = p.topo;
  std::int32_t const workers = (wide ? t.blocks() : 1) * t.size();
  // f(worker) for each worker this thread acts for: its own, or on a grid
  // every block's it acts for (each_block: the GPU model's CTA acts for all).
  auto each = [&](auto&& f) {
    if (wide) {
      t.each_block([&](std::int32_t block) { f(block * t.size() + t.rank()); });
    } else {
      f(t.rank());
    }
  };
  auto meet = [&] {
    if (wide) {
      t.grid_sync();
    } else {
      t.sync();
    }
  };
  each([&](std::int32_t me) {
    for (std::int32_t d = me; d < g.n_domains; d += workers) {
      b.local_cap[d] = 0;
      t.work(1);
    }
  });
  meet();
  std::int32_t const n_nodes = p.nodes.n_nodes;
  // Nodes [from, to): each one's fit count added to its domains through
  // add(d, v), once per run of a domain's nodes.
  auto sum_run = [&](std::int32_t from, std::int32_t to, auto&& add) {
    std::int32_t run_d[tier_local_run_levels];
    std::int64_t run[tier_local_run_levels];
    for (std::int32_t l = 0; l < tier_local_run_levels; ++l) {
      run_d[l] = -1;
      run[l] = 0;
    }
    for (std::int32_t n = from; n < to; ++n) {
      std::int32_t const f = fit_count(p.nodes, p.classes, c, n);
      t.work(4 + g.levels);
      if (f == 0) continue;
      for (std::int32_t l = 0; l < g.levels; ++l) {
        std::int32_t const d = g.node_domain[static_cast<std::int64_t>(n) * g.levels + l];
        if (d < 0) continue;
        if (l >= tier_local_run_levels) {
          add(d, std::int64_t{f});
          continue;
        }
        if (d != run_d[l]) {
          if (run_d[l] >= 0) add(run_d[l], run[l]);
          run_d[l] = d;
          run[l] = 0;
        }
        run[l] += f;
      }
    }
    for (std::int32_t l = 0; l < tier_local_run_levels; ++l) {
      if (run_d[l] >= 0) add(run_d[l], run[l]);
    }
  };
  if (!wide && tier_forks(t, n_nodes, 4 + g.levels)) {
#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
    // The one worker's sums on its OpenMP team (tier_forks), a run of
    // nodes a thread, added atomically: at 100k a round's five sums of
    // 12,800 nodes took 0.78 ms on one core.
#pragma omp parallel
    {
      std::int32_t const w = omp_get_num_threads();
      std::int32_t const per = (n_nodes + w - 1) / w;
      std::int32_t const from = min_of(n_nodes, omp_get_thread_num() * per);
      sum_run(from, min_of(n_nodes, from + per), [&](std::int32_t d, std::int64_t v) {
#pragma omp atomic
        b.local_cap[d] += v;
      });
    }
#endif
  } else {
    std::int32_t const per = (n_nodes + workers - 1) / workers;
    each([&](std::int32_t me) {
      std::int32_t const from = min_of(n_nodes, me * per);
      sum_run(from, min_of(n_nodes, from + per), [&](std::int32_t d, std::int64_t v) { t.fetch_add(b.local_cap + d, v); });
    });
  }
  meet();
}

/// The job on the leading CTA: every worker runs the same steps, with the
/// same values after each barrier. The choices over many items (a level's
/// domains, a large domain's nodes) are the CTA's; a small domain's
/// replicas are the first group's (a warp's), the rest of the CTA waiting
/// at the barrier after them.
template <class Team>
struct tier_local_team {
  Team& t;
  tier_buffers const& b;
  std::int32_t c;           ///< the job's class
  std::int32_t lanes;       ///< the first group's workers (ranks 0 to lanes - 1)
  std::int32_t placed = 0;  ///< replicas held so far, at b.out (rank 0's count: ctl->local_placed)
  std::int32_t step[2] = {0, 0};  ///< reductions so far, by the group and by the CTA

  /// The least value (tier_local_none: none) of the group's workers, or
  /// the CTA's (`all`), through a ring of three slots each: slot k % 3
  /// reduced in step k, slot (k + 2) % 3 reset by rank 0 after its barrier
  /// (read in step k - 1, before it; reduced in step k + 2, after the
  /// next). One barrier.
  PLACER_HD std::int64_t least(std::int64_t v, bool all) {
    std::int64_t* const ring = b.ctl->local_ring[all ? 1 : 0];
    std::int32_t& k = step[all ? 1 : 0];
    if (v != tier_local_none) t.fetch_min(ring + k % 3, v);
    meet(all);
    std::int64_t const r = ring[k % 3];
    if (t.rank() == 0) ring[(k + 2) % 3] = tier_local_none;
    ++k;
    return r;
  }
  PLACER_HD void meet(bool all) {
    if (all) {
      t.sync();
    } else {
      t.group_sync();
    }
  }

  [[nodiscard]] PLACER_HD std::int32_t node_domain(std::int32_t n, std::int32_t l) const {
    return b.p.topo.node_domain[static_cast<std::int64_t>(n) * b.p.topo.levels + l];
  }
  [[nodiscard]] PLACER_HD std::int32_t& cell(std::int32_t n) const {
    return b.p.scores[static_cast<std::int64_t>(c) * b.p.nodes.n_nodes + n];
  }

  /// The first replica's node's bonus on node n (assigner::topo_bonus):
  /// the deepest level at which they share a domain.
  [[nodiscard]] PLACER_HD std::int64_t bonus(std::int32_t anchor, std::int32_t n) const {
    auto const& p = b.p;
    if (anchor < 0) return 0;
    if (n == anchor) return p.local.topo_unit;
    std::int32_t shared = 0;
    if (p.topo.node_domain != nullptr) {
      for (std::int32_t l = p.topo.levels - 1; l >= 0; --l) {
        std::int32_t const d = node_domain(n, l);
        if (d >= 0 && d == node_domain(anchor, l)) {
          shared = l + 1;
          break;
        }
      }
    }
    return p.local.topo_unit * shared / (p.topo.levels + 1);
  }

  /// The next replica's node among the nodes [from, to) of `domain` (-1:
  /// every node), or -1 (assigner::best_node): the highest score plus
  /// bonus, at least 0, and the lowest node of those. Two barriers.
  PLACER_HD std::int32_t best(std::int32_t domain, std::int32_t from, std::int32_t to, bool all) {
    auto const& p = b.p;
    std::int32_t const anchor = placed > 0 ? b.out[0].node : -1;
    std::int64_t best_s = -1;
    std::int32_t best_n = -1;
    for (std::int32_t k = from + t.rank(); k < to; k += all ? t.size() : lanes) {  // ascending nodes
      std::int32_t const n = domain >= 0 ? p.topo.node[k] : k;
      t.work(2);
      if (p.local.distinct && b.local_held[n] != 0) continue;
      std::int32_t const s0 = cell(n);
      if (s0 < 0) continue;
      std::int64_t const s = s0 + bonus(anchor, n);
      if (s > best_s) {
        best_s = s;
        best_n = n;
      }
    }
    std::int64_t const top = least(best_n >= 0 ? -best_s : tier_local_none, all);
    if (top == tier_local_none) return -1;
    return static_cast<std::int32_t>(least(best_n >= 0 && -best_s == top ? best_n : tier_local_none, all));
  }

  /// Rank 0: one replica on node n, as assigner::commit took it (its cell
  /// re-scored by place).
  PLACER_HD void commit(std::int32_t n) {
    auto const& p = b.p;
    tier_placement& o = b.out[placed];
    o.node = n;
    o.row = p.stamp[n];    // until the job ends (finish): what release gives back
    o.iteration = placed;  // sorted by (iteration, node), the replicas' order
    std::int32_t const before = fit(n);
    o.gpus = tier_commit(b, c, n);
    fit_changed(n, before);
    p.stamp[n] = p.now + 1;
    if (p.local.distinct) b.local_held[n] = 1;
    b.ctl->local_placed = placed + 1;
    t.work(p.nodes.gpu_begin[n + 1] - p.nodes.gpu_begin[n] + 4);
  }

  /// Up to `count` replicas inside `domain` (assigner::place_replicas), by
  /// the CTA (every worker calls it): rank 0 commits each, and the first
  /// group's lanes re-score the class's cell on the node over the task
  /// set. A domain of at most tier_local_group_nodes nodes is the first
  /// group's alone. Ends at the CTA's barrier.
  PLACER_HD void place(std::int32_t domain, std::int32_t count) {
    auto const& p = b.p;
    std::int32_t const from = domain >= 0 ? p.topo.begin[domain] : 0;
    std::int32_t const to = domain >= 0 ? p.topo.begin[domain + 1] : p.nodes.n_nodes;
    bool const all = to - from > tier_local_group_nodes;
    if (all || t.rank() < lanes) {
      for (std::int32_t r = 0; r < count; ++r) {
        std::int32_t const n = best(domain, from, to, all);
        if (n < 0) break;
        if (t.rank() == 0) commit(n);
        meet(all);  // the commit before the lanes read the node
        if (t.rank() < lanes) {
          std::int32_t const s = score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_lanes(
              c, n, t.rank(), lanes, [&](std::int64_t v) { return t.group_fold(v, lanes, fold_sum{}); });
          if (t.rank() == 0) cell(n) = s;
          t.work(2 * tier_score_steps_on(lanes));
        }
        ++placed;
        meet(all);  // the cell before the next replica's choice
      }
    }
    t.sync();
    placed = b.ctl->local_placed;
  }

  /// Gives back every replica held (assigner::release_all), the last first:
  /// each node as it was, its stamp too (a node the job left is not among
  /// the next tier's refresh candidates, and its cells stand). Rank 0's;
  /// ends at the CTA's barrier.
  PLACER_HD void release() {
    auto const& p = b.p;
    if (t.rank() == 0) {
      for (std::int32_t i = placed - 1; i >= 0; --i) {
        tier_placement const& o = b.out[i];
        std::int32_t const before = fit(o.node);
        give_replica(p.nodes, p.classes, c, o.node, o.gpus, p.gpu_free, p.cpu_free, p.mem_free);
        fit_changed(o.node, before);
        p.stamp[o.node] = o.row;
        b.local_held[o.node] = 0;
        rescore(o.node);
        t.work(p.nodes.gpu_begin[o.node + 1] - p.nodes.gpu_begin[o.node] + 4);
      }
    }
    placed = 0;
    t.sync();
  }

  /// Rank 0, the job done: its placements' row (0), its nodes unmarked.
  PLACER_HD void finish() {
    for (std::int32_t i = 0; i < placed; ++i) {
      b.out[i].row = 0;
      b.local_held[b.out[i].node] = 0;
    }
    t.work(placed);
  }

  /// Replicas of the class node n holds now (0 without domains).
  [[nodiscard]] PLACER_HD std::int32_t fit(std::int32_t n) {
    if (b.p.topo.n_domains == 0) return 0;
    t.work(4);
    return fit_count(b.p.nodes, b.p.classes, c, n);
  }
  /// Node n's domains' capacities follow its change (assigner::caps_after).
  PLACER_HD void fit_changed(std::int32_t n, std::int32_t before) {
    auto const& g = b.p.topo;
    if (g.n_domains == 0) return;
    std::int32_t const delta = fit(n) - before;
    if (delta == 0) return;
    for (std::int32_t l = 0; l < g.levels; ++l) {
      if (std::int32_t const d = node_domain(n, l); d >= 0) b.local_cap[d] += delta;
    }
    t.work(g.levels);
  }
  PLACER_HD void rescore(std::int32_t n) {
    auto const& p = b.p;
    cell(n) = score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score(c, n);
    t.work(tier_score_steps);
  }

  /// The domain of the least key(d) (tier_local_none: not a candidate),
  /// the lowest of those, or -1 where none is: the CTA's. Two barriers.
  template <class Key>
  PLACER_HD std::int32_t least_domain(Key&& key) {
    std::int32_t const domains = b.p.topo.n_domains;
    std::int64_t mine = tier_local_none;
    for (std::int32_t d = t.rank(); d < domains; d += t.size()) {
      mine = min_of(mine, key(d));
      t.work(2);
    }
    std::int64_t const top = least(mine, true);
    if (top == tier_local_none) return -1;
    mine = tier_local_none;
    for (std::int32_t d = t.rank(); d < domains; d += t.size()) {
      if (key(d) == top) mine = min_of(mine, std::int64_t{d});
      t.work(2);
    }
    return static_cast<std::int32_t>(least(mine, true));
  }

  /// The level's next domain that holds `want` replicas after (last_cap,
  /// last_d) in (capacity, index) order, or -1.
  PLACER_HD std::int32_t next_domain(std::int32_t level, std::int64_t last_cap, std::int32_t last_d) {
    auto const& g = b.p.topo;
    std::int32_t const want = b.p.local.want;
    std::int64_t const* const cap = b.local_cap;
    return least_domain([&](std::int32_t d) {
      bool const after = cap[d] > last_cap || (cap[d] == last_cap && d > last_d);
      return g.level[d] == level && cap[d] >= want && after ? cap[d] : tier_local_none;
    });
  }

  /// The roomiest domain of the level (the first of the most), or -1
  /// where none holds a replica.
  PLACER_HD std::int32_t roomiest(std::int32_t level) {
    auto const& g = b.p.topo;
    std::int64_t const* const cap = b.local_cap;
    return least_domain([&](std::int32_t d) { return g.level[d] == level && cap[d] > 0 ? -cap[d] : tier_local_none; });
  }
};

/// The tier's locality job (tier_locality) on the leading CTA, its class's
/// capacities current (tier_local_caps, or the job before it of the same
/// class left them); rank 0 sets the tier's placements (b.out,
/// ctl->placed). Ends at the CTA's barrier.
template <class Team>
PLACER_HD void tier_local(Team& t, tier_buffers const& b) {
  auto const& p = b.p;
  auto const& job = p.local;
  auto const& g = p.topo;
  if (t.rank() == 0) {
    for (auto& ring : b.ctl->local_ring) {
      for (std::int64_t& slot : ring) slot = tier_local_none;
    }
    b.ctl->local_placed = 0;
  }
  t.sync();
  tier_local_team<Team> j{t, b, p.row_class[0], min_of(t.group_size(), t.size())};
  std::int32_t const want = job.want;
  if (g.n_domains > 0) {
    // The deepest level first; at a level, least capacity first (ties to
    // the lower domain), each domain tried once.
    for (std::int32_t level = g.levels - 1; level >= job.top && j.placed == 0; --level) {
      std::int64_t last_cap = -1;
      std::int32_t last_d = -1;
      for (;;) {
        std::int32_t const d = j.next_domain(level, last_cap, last_d);
        if (d < 0) break;
        j.place(d, want);
        if (j.placed == want) break;
        j.release();  // only a distinct job's domain can fall short
        last_cap = b.local_cap[d];  // as it was when chosen (after release's barrier)
        last_d = d;
      }
    }
  }
  if (j.placed == 0 && !job.gang) {
    // No domain holds all of it: what fits, in the roomiest domain of its
    // required level, or anywhere.
    std::int32_t const domain = job.required ? j.roomiest(job.top) : -1;
    if (!job.required || domain >= 0) j.place(domain, want);
  } else if (j.placed == 0 && !job.required && g.n_domains == 0) {
    // No topology: the cluster is the domain.
    j.place(-1, want);
    if (j.placed < want) j.release();
  }
  if (t.rank() == 0) {
    j.finish();
    b.ctl->placed = j.placed;
    b.ctl->iterations = 1;
    b.ctl->done = 1;
  }
  t.sync();
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
