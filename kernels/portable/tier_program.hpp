#pragma once
// The tier assignment (include/placer/kernels/tier.hpp) as a team program:
// written once, run by a team of `size()` workers that share the buffers
// and meet at `sync()` barriers. Every loop splits its range over the team
// (i = rank, rank + size, ...); the few serial steps run on rank 0; the
// loop control lives in tier_buffers::ctl, written by rank 0 between
// barriers and read by all after one.
//
//   seq_team (below)          g++: one worker, barriers are no-ops (the CPU backend's default)
//   omp_team (tier_host.hpp)  g++: the threads of an OpenMP region (PLACER_TIER_THREADS)
//   cuda_team (cuda_backend)  one CTA, __syncthreads(), atomicAdd: one launch per chain;
//                             or a cooperative grid of them (below, "The grid")
//   model_team (kernels/model) g++: a CTA's threads as fibers, counted (the GPU model)
//
// A Team provides rank(), size(), sync(), work(steps) and chain(steps) (what
// a worker did, for the GPU model; empty on the other teams), fetch_add(int*, int) (an atomic
// add returning the old value), fetch_max(int*, int), fetch_min (int and
// int64), solo_below() (a bidding round with fewer bidders runs on rank 0
// alone), group_size() and group_sync() (ranks [g * group_size(), (g + 1)
// * group_size()) and their own barrier: a warp and __syncwarp on the GPU,
// a worker on the CPU; a round's offers a row a group, tier_offer_groups),
// the group's exchanges group_fold, group_sum_from and group_count_above
// (shuffles on a warp; see seq_team), and team_wide: a team of many slow
// workers (a CTA) does together what a worker per row or rank 0 would do
// alone (the floors,
// tier_floors_radix for tier_floor; the price jumps, tier_jump_team for
// tier_jump; the winners' list and groups, the next tier's candidates;
// a round's offers, tier_offer_team), with the same
// results. Results never depend on the order
// in which the team's workers do things: a row keeps the best bids of
// everything it was offered (a strict order: bid, then the lower node), and
// the placements are sorted by (iteration, node) on the host.
//
// The grid. A Team is also a CTA of a grid of blocks() CTAs (one, except
// the CUDA backend's cooperative launch, PLACER_CUDA_TIER_BLOCKS, the GPU
// model's lanes and the twin's grid of threads, tier_grid_twin.hpp):
// block() is its index, each_block(f) runs f(b) for
// every block b it acts for (its own on a GPU; every lane in turn in the
// GPU model, which counts each lane's steps as that CTA's), grid_sync() is
// the grid's barrier. The leading CTA (block 0) runs the program; the
// others join its wide phases, where a tier has the width
// (tier_grid_cells_from): the refresh (tier_shares: an equal run of the
// cells or columns a CTA; one pass and one grid barrier when there is at
// most a cell a worker, tier_buffers::refresh_one_pass), the floors (a row
// a CTA, its radix passes at the CTA's barriers: tier_floor_cta) and round
// 0's bidders (listed by each row's CTA with its floor, up to
// tier_list_with_floors_upto nodes, else a share a CTA after the floors),
// with the grid's barriers around them (tier_iterate_grid), and the
// records unpacked and packed. The bidding rounds, the commit and the re-scoring
// stay on the leading CTA.
// A team of one block runs the program as before, barrier for barrier.
//
// The phases, each in tier/: buffers.hpp (state, clock, layout), floor.hpp,
// bid.hpp, offer.hpp, offer_group.hpp, jump.hpp (with radix.hpp), refresh.hpp and commit.hpp;
// this file has the round, the program and the chain.

#include "tier/bid.hpp"
#include "tier/buffers.hpp"
#include "tier/commit.hpp"
#include "tier/floor.hpp"
#include "tier/jump.hpp"
#include "tier/local.hpp"
#include "tier/offer.hpp"
#include "tier/offer_group.hpp"
#include "tier/refresh.hpp"
#include "tier/twins.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// One bidding round over the nodes in todo[list]: each bids for its best
/// row; each row keeps its best and sends the losers to the other list;
/// the prices follow. Two barriers with the group offers (a team_wide
/// team's round whose rows got at most tier_buffers::offer_groups bids
/// each, tier_offer_groups); else four: the bids are bucketed by row first
/// (a run of `bucket` a row).
template <class Team>
PLACER_HD void tier_round(Team& t, tier_buffers const& b, std::int32_t list, tier_clock& clk) {
  std::int32_t const n_rows = b.p.n_rows;
  tier_control* const ctl = b.ctl;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  std::int32_t const* todo = b.todo[list];
  std::int64_t const* prices = tier_prices(b, list);
  std::int64_t* next_prices = tier_prices(b, 1 - list);
  std::int32_t const k = ctl->todo_count[list];
  // Where the group offers may take the round (a team_wide team's), a bid
  // goes straight to its row's stretch of `select` (free while bidding), in
  // the order of the count's adds, and the bid that finds
  // b.offer_groups bids in its row before it marks the round as one for the
  // whole team (offer_big; one bid a row, an atomic max: several rows' may
  // mark it at once).
  bool const may_group = t.team_wide && b.offer_groups > 0;
  for (std::int32_t i = me; i < k; i += team) {
    std::int32_t const n = todo[i];
    std::int32_t row = -1;
    std::int64_t bid = 0;
    b.bid_row[n] = tier_bid(b, n, prices, row, bid) ? row : -1;
    b.bid_value[n] = bid;
    if (row >= 0) {
      std::int32_t const at = t.fetch_add(&b.bid_count[row], 1);
      if (may_group) {
        b.select[static_cast<std::int64_t>(row) * b.p.nodes.n_nodes + at] = n;
        if (at == b.offer_groups) t.fetch_max(&ctl->offer_big[list], 1);
      }
    }
    t.work(n_rows);  // a margin a row
  }
  if (me == 0) {
    ctl->bucket_at = 0;
    if (may_group) {  // (the other list's counts and mark were last read before this round; no bid reads rounds)
      ctl->todo_count[1 - list] = 0;
      ctl->sitting[1 - list] = 0;
      ctl->offer_big[1 - list] = 0;
      ctl->rounds += 1;
    }
  }
  t.sync();
  clk.lap(tier_phase_bid);
  // Every thread reads the mark after the barrier; none writes it again this round.
  if (may_group && ctl->offer_big[list] == 0) {
    tier_offer_groups(t, b, list, prices, next_prices);
    clk.lap(tier_phase_offer, true);
    return;
  }
  // Buckets: each row with bids claims a run of them (in row order on one
  // worker, as an exclusive scan of the counts would; in any order on a
  // team, whose rows take their runs at once instead of rank 0 walking the
  // tier's rows a round).
  for (std::int32_t r = me; r < n_rows; r += team) {
    b.bid_cursor[r] = b.bid_count[r] > 0 ? t.fetch_add(&ctl->bucket_at, b.bid_count[r]) : 0;
    t.work(1);
  }
  if (me == 0 && !may_group) {
    ctl->todo_count[1 - list] = 0;
    ctl->sitting[1 - list] = 0;
    ctl->rounds += 1;
  }
  t.sync();
  clk.lap(tier_phase_scan);
  for (std::int32_t i = me; i < k; i += team) {
    std::int32_t const n = todo[i];
    if (b.bid_row[n] >= 0) b.bucket[t.fetch_add(&b.bid_cursor[b.bid_row[n]], 1)] = n;
    t.work(1);
  }
  t.sync();
  clk.lap(tier_phase_bucket);
  if (t.team_wide) tier_offer_team(t, b, list, prices);
  // Each row takes its bids (the bucket ends at its cursor); the losers
  // bid again next round.
  for (std::int32_t r = me; r < n_rows; r += team) {
    std::int32_t const end = b.bid_cursor[r];
    bool const done = t.team_wide && b.offer_row[tier_offer_fields * r + tier_offer_round] == ctl->rounds;
    for (std::int32_t i = done ? end : end - b.bid_count[r]; i < end; ++i) {
      std::int32_t const n = b.bucket[i];
      std::int64_t steps = 0, lost_bid = 0;
      std::int32_t const lost = tier_offer(b, r, n, b.bid_value[n], prices, lost_bid, &steps);
      if (lost >= 0) tier_lose(t, b, list, r, lost, lost_bid);
      t.chain(steps);
    }
    next_prices[r] = b.bid_count[r] > 0 ? tier_price(b, r) : prices[r];
    b.bid_count[r] = 0;
    t.work(1);
  }
  t.sync();
  clk.lap(tier_phase_offer);
}

/// A worker's share of a flat loop over items [0, n): first, first +
/// stride, ... below end. On a grid's wide phase (tier_shares) each CTA
/// takes an equal run of the items and its workers stride through it (the
/// CTAs all busy, a warp's loads adjacent).
struct tier_share {
  std::int32_t first;
  std::int32_t stride;
  std::int32_t end;
};
/// Runs f(share) for this worker over n items: over the grid when `wide`
/// (for each block it acts for, each_block), else over its CTA. With
/// `lanes` (a power of two), the workers take the items in aligned runs of
/// that many, a run an item at a time (every worker of a run the same
/// items; rank % lanes is its lane); the workers past the CTA's last whole
/// run take none.
template <class Team, class F>
PLACER_HD void tier_shares(Team& t, bool wide, std::int32_t n, F&& f, std::int32_t lanes = 1) {
  std::int32_t const at = t.rank() / lanes;
  std::int32_t const runs = t.size() / lanes;
  if (at >= runs) return;
  if (wide) {
    std::int64_t const blocks = t.blocks();
    t.each_block([&](std::int32_t block) {
      auto const lo = static_cast<std::int32_t>(n * block / blocks);
      auto const hi = static_cast<std::int32_t>(n * (block + 1) / blocks);
      f(tier_share{lo + at, runs, hi});
    });
  } else {
    f(tier_share{at, runs, n});
  }
}

/// The workers a refresh by cell gives each cell (tier_refresh_cell): of
/// the powers of two up to `most` (Team::group_size(): a warp), the one
/// whose span is least for `cells` cells on a CTA of `workers`, a run of
/// that many lanes a cell at a time (tier_score_steps_on a cell), the
/// fewest on ties. Few cells (a grid CTA's share of a tier's: 38 at 10k
/// on 33 CTAs; a tier of a few candidates) take part of a warp each; a
/// CTA's worth or more (a 10k tier's 1,224 on one CTA), a worker each.
PLACER_HD inline std::int32_t tier_refresh_lanes(std::int32_t most, std::int32_t workers, std::int64_t cells) {
  std::int32_t best = 1;
  std::int64_t best_span = -1;
  for (std::int32_t w = 1; w <= most && w <= workers; w *= 2) {
    std::int64_t const runs = workers / w;
    std::int64_t const span = (cells + runs - 1) / runs * tier_score_steps_on(w);
    if (best_span < 0 || span < best_span) {
      best = w;
      best_span = span;
    }
  }
  return best;
}

/// The marks of tier_first_bidders_of_row cleared, a share a CTA of the
/// grid (seen after its next barrier).
template <class Team>
PLACER_HD void tier_clear_marks(Team& t, std::int32_t* mark, std::int32_t n_nodes) {
  tier_shares(t, true, n_nodes, [&](tier_share s) {
    for (std::int32_t n = s.first; n < s.end; n += s.stride) {
      mark[n] = 0;
      t.work(1);
    }
  });
}

/// A window slot's row r (tier_window): the replicas of its jobs that the
/// draw gave the slot's code, and the row's cap from them; one worker.
template <class Team>
PLACER_HD std::int32_t tier_window_demand(Team& t, tier_problem const& p, std::int32_t r) {
  tier_window const& w = p.window;
  std::int32_t const* const pair = w.row_jobs + p.n_rows + 1;
  std::int32_t demand = 0;
  for (std::int32_t i = w.row_jobs[r]; i < w.row_jobs[r + 1]; ++i) {
    if (w.code[pair[2 * i]] == w.want) demand += pair[2 * i + 1];
  }
  std::int32_t const per_node = w.per_node != nullptr ? w.per_node[r] : 1;
  w.masked[r] = demand;
  w.masked[p.n_rows + r] = per_node > 1 ? (demand + per_node - 1) / per_node : demand;
  t.work(w.row_jobs[r + 1] - w.row_jobs[r] + 1);
  return demand;
}

/// A queue window's draw (tier_window) on one CTA, ending at its barrier:
/// what is free summed by every worker, then the jobs classed in order by
/// rank 0 (draw_window: each fits what the ones before it in the window
/// leave), and whether the chain goes on.
template <class Team>
PLACER_HD void tier_draw(Team& t, tier_problem const& p) {
  tier_window const& w = p.window;
  if (t.rank() == 0) {
    w.free[0] = 0;
    w.free[1] = 0;
  }
  t.sync();
  std::int64_t gpu = 0, cpu = 0;
  for (std::int32_t g = t.rank(); g < p.nodes.n_gpus; g += t.size()) gpu += p.gpu_free[g];
  for (std::int32_t n = t.rank(); n < p.nodes.n_nodes; n += t.size()) cpu += p.cpu_free[n];
  t.work((p.nodes.n_gpus + p.nodes.n_nodes) / t.size() + 2);
  t.fetch_add(w.free, gpu);
  t.fetch_add(w.free + 1, cpu);
  t.sync();
  if (t.rank() == 0) {
    bool const past = draw_window(w.n_jobs, w.job_demand, w.job_slot, w.n_slots, w.free[0], w.free[1], w.code);
    bool const incomplete =
        w.beyond_gpu >= 0 && (!past || w.beyond_gpu > w.free[0] || w.beyond_cpu > w.free[1]);
    w.code[w.n_jobs + w.n_slots] = incomplete ? 2 : past ? 1 : 0;
    t.work(w.n_jobs + w.n_slots);
  }
  t.sync();
}

/// The iteration's quotas and copies (rank 0).
template <class Team>
PLACER_HD void tier_quota(Team& t, tier_buffers const& b) {
  auto const& p = b.p;
  tier_control* const ctl = b.ctl;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t copies = 0;
  for (std::int32_t r = 0; r < n_rows; ++r) {
    std::int32_t const* const cap = p.window.masked != nullptr ? p.window.masked + n_rows : p.row_cap;
    b.quota[r] = cap != nullptr ? min_of(b.remaining[r], cap[r]) : b.remaining[r];
    copies += b.quota[r];
  }
  ctl->placed_before = copies;  // the iteration's copies, for the floors
  ctl->iterations += 1;
  t.work(n_rows);
}

/// A bidding pass's control cleared (rank 0; read after a barrier).
PLACER_HD inline void tier_open_pass(tier_control* ctl) {
  ctl->todo_count[0] = 0;
  ctl->sitting[0] = 0;
  ctl->offer_big[0] = 0;  // the pass's first round bids from list 0
  ctl->touched = 0;
  ctl->passes += 1;
}

/// A bidding pass's start: rows empty, their prices the floors (the
/// team's rows), the control cleared (rank 0). Read after a barrier.
template <class Team>
PLACER_HD void tier_reset_rows(Team& t, tier_buffers const& b) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  for (std::int32_t r = me; r < n_rows; r += team) {
    b.held[r] = 0;
    b.bid_count[r] = 0;
    tier_prices(b, 0)[r] = tier_price(b, r);  // round 0 reads half 0
    t.work(1);
  }
  if (me == 0) tier_open_pass(b.ctl);
}

/// A pass's bidding rounds until no node bids (or the cap: max_rounds an
/// iteration; the assignment held then is feasible), with the price jumps;
/// `rounds` counts the iteration's, over its passes. A round's losers are
/// the ones listed and those counted as sitting the next round out
/// (tier_lose): the cap and the jumps go by both, and a round with no node
/// listed (all would sit it out, or round 0 found no bidder) is counted, not
/// run: it would change nothing. So every price, jump and placement is what
/// bidding from every loser gives.
template <class Team>
PLACER_HD void tier_bidding(Team& t, tier_buffers const& b, std::int32_t& rounds, tier_clock& clk) {
  auto const& p = b.p;
  tier_control* const ctl = b.ctl;
  std::int32_t const me = t.rank();
  // The next round after which tier_jump is tried; the wait doubles
  // after a try that raised nothing (every worker keeps the same).
  std::int32_t jump_at = rounds + tier_jump_after;  // rounds: the iteration's, over its passes
  std::int32_t jump_wait = 1;
  for (std::int32_t list = 0;; list = 1 - list) {
    std::int32_t const bidders = ctl->todo_count[list];
    if (bidders == 0 && b.losers_sit_out != 0) {
      ++rounds;
      break;
    }
    std::int32_t const listed = bidders + ctl->sitting[list];  // (the next round clears it)
    if (bidders < t.solo_below()) {
      if (me == 0) {
        seq_team one;
        tier_round(one, b, list, clk);
      }
      t.sync();
    } else {
      tier_round(t, b, list, clk);
    }
    ++rounds;
    std::int32_t const next = ctl->todo_count[1 - list];
    std::int32_t const lost = next + ctl->sitting[1 - list];
    if (lost == 0 || rounds >= p.max_rounds) {
      if (me == 0 && lost != 0) ctl->round_cap_hit = 1;
      break;
    }
    if (next > 0 && rounds >= jump_at && lost >= listed) {  // (a jump for none would raise nothing)
      if (t.team_wide) {
        tier_jump_team(t, b, 1 - list);
      } else {
        if (me == 0) ctl->jump_raised = tier_jump(b, 1 - list) ? 1 : 0;
        t.sync();
      }
      clk.lap(tier_phase_jump);
      jump_wait = ctl->jump_raised != 0 ? 1 : min_of(2 * jump_wait, tier_jump_most_wait);
      jump_at = rounds + jump_wait;
    }
  }
}

/// A row left unfilled above a zero floor breaks the complementary
/// slackness the optimum needs (an unheld copy must cost nothing): its
/// floor goes to 0 and the iteration bids again (at most once per row).
/// Rank 0; ctl->again says whether, after a barrier.
template <class Team>
PLACER_HD void tier_again(Team& t, tier_buffers const& b) {
  tier_control* const ctl = b.ctl;
  std::int32_t const n_rows = b.p.n_rows;
  ctl->again = 0;
  for (std::int32_t r = 0; r < n_rows; ++r) {
    if (b.held[r] < b.quota[r] && b.floor[r] > 0) {
      b.floor[r] = 0;
      ctl->again = 1;
    }
  }
  t.work(n_rows);
}

/// Commits every held copy (each on its own node) and re-scores. The
/// winners listed a row per worker, or on a team_wide team by all workers
/// row after row. Ends at a barrier.
template <class Team>
PLACER_HD void tier_commit_all(Team& t, tier_buffers const& b, tier_clock& clk) {
  auto const& p = b.p;
  tier_control* const ctl = b.ctl;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  for (std::int32_t r = t.team_wide ? 0 : me; r < n_rows; r += t.team_wide ? 1 : team) {
    std::int32_t const* hn = b.heap_node + b.heap_begin[r];
    for (std::int32_t i = t.team_wide ? me : 0; i < b.held[r]; i += t.team_wide ? team : 1) {
      b.won[t.fetch_add(&ctl->touched, 1)] = hn[i];
      b.won_row[hn[i]] = r;
      t.work(1);
    }
  }
  t.sync();
  std::int32_t const touched = ctl->touched;
  std::int32_t const base = ctl->placed;
  std::int32_t const iteration = ctl->iterations - 1;
  for (std::int32_t i = me; i < touched; i += team) {
    std::int32_t const n = b.won[i];
    std::int32_t const r = b.won_row[n];
    tier_placement& o = b.out[base + i];
    o.node = n;
    o.row = r;
    o.iteration = iteration;
    o.gpus = tier_commit(b, p.row_class[r], n);
    p.stamp[n] = p.now + 1;
    b.won_row[n] = -1;
    t.work(p.nodes.gpu_begin[n + 1] - p.nodes.gpu_begin[n] + 4);  // the node's GPUs, then its record
  }
  // Re-scoring the open rows' cells: with state labels, one column per
  // (label, row) group and copies (the first bidding wave puts whole
  // groups of twins on one row).
  bool const grouped = p.state != nullptr;
  if (grouped && t.team_wide) {
    tier_group_team(t, b);
  } else if (grouped) {
    for (std::int32_t r = me; r < n_rows; r += team) t.work(tier_group(b, r));
  }
  t.sync();
  clk.lap(tier_phase_commit);
  for (std::int32_t i = me; i < touched; i += team) {
    t.work(!grouped || b.bid_row[b.won[i]] == b.won[i] ? tier_rescore(b, b.won[i]) : 1);
  }
  t.sync();
  if (grouped) {
    for (std::int32_t i = me; i < touched; i += team) t.work(tier_follow(b, b.won[i]));
    t.sync();
  }
  clk.lap(tier_phase_rescore);
}

/// The iteration's end (rank 0): what is left, and whether to stop.
template <class Team>
PLACER_HD void tier_close(Team& t, tier_buffers const& b) {
  auto const& p = b.p;
  tier_control* const ctl = b.ctl;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const touched = ctl->touched;
  std::int32_t left = 0;
  for (std::int32_t r = 0; r < n_rows; ++r) {
    b.remaining[r] -= b.held[r];
    left += b.remaining[r];
  }
  t.work(n_rows);
  ctl->placed += touched;
  ctl->done = touched == 0 || left == 0 || ctl->iterations >= p.max_iterations ? 1 : 0;
}

/// An iteration on a grid opens with its quotas and the first pass's
/// control (rank 0 of the leading CTA), read after a grid barrier.
template <class Team>
PLACER_HD void tier_open_iteration(Team& t, tier_buffers const& b) {
  tier_quota(t, b);
  tier_open_pass(b.ctl);
}

/// The iterations on one CTA: floors, bidding passes until no row is left
/// unfilled above a zero floor, commit, close.
template <class Team>
PLACER_HD void tier_iterate(Team& t, tier_buffers const& b, tier_clock& clk) {
  auto const& p = b.p;
  tier_control* const ctl = b.ctl;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  while (true) {
    // --- a new iteration: floors from the current scores.
    if (me == 0) tier_quota(t, b);
    t.sync();
    tier_twin_rows* const twins = tier_twins_of(t, b);
    if (t.team_wide) {
      tier_floors_radix(t, b, ctl->placed_before);
    } else if (twins != nullptr) {
      t.work(tier_twin_update(*twins, p.stamp, n_nodes));
      tier_apart(t, n_rows, tier_twin_gather * twins->n_entries, [&](std::int32_t r) {
        b.floor[r] = b.quota[r] > 0 ? tier_floor_twins(b, *twins, r, ctl->placed_before) : 0;
      });
    } else {
      tier_apart(t, n_rows, n_nodes, [&](std::int32_t r) {
        b.floor[r] = b.quota[r] > 0 ? tier_floor(b, r, ctl->placed_before) : 0;
        t.work(2 * n_nodes);  // a pass over the row's cells, then the selection
      });
    }
    std::int32_t rounds = 0;  // this iteration's bidding rounds
    bool again = false;
    do {
      // --- rows empty; every node that has a row to bid for bids.
      tier_reset_rows(t, b);
      t.sync();
      if (twins != nullptr) {
        tier_first_bidders_twins(b, *twins);
      } else {
        tier_first_bidders(t, b, tier_share{me, team, n_nodes});
      }
      t.sync();
      clk.lap(tier_phase_floor);
      tier_bidding(t, b, rounds, clk);
      if (me == 0) tier_again(t, b);
      t.sync();
      again = ctl->again != 0;
      t.sync();  // everyone has read it before rank 0 moves the control again
      clk.lap(tier_phase_again);
    } while (again);
    tier_commit_all(t, b, clk);
    if (me == 0) tier_close(t, b);
    t.sync();
    clk.lap(tier_phase_close);
    if (ctl->done != 0) break;
  }
}

/// The iterations on a grid (tier_program.hpp, "The grid"): the same
/// steps, the leading CTA's between two or three grid barriers an
/// iteration (and two more a pass bid again): every CTA selects its rows'
/// floors, empties them and, up to tier_list_with_floors_upto nodes, lists
/// the nodes that reach a row's first price (B; the marks that list each
/// once cleared after it), else lists its share of round 0's bidders (C);
/// the leading CTA bids, and then either empties the rows for another pass
/// or commits, closes and sets the next iteration's quotas (D). `primed`:
/// the first iteration's were set before a grid barrier already (by the
/// leading CTA's rank 0, tier_open_iteration).
template <class Team>
PLACER_HD void tier_iterate_grid(Team& t, tier_buffers const& b, tier_clock& clk, bool primed) {
  tier_control* const ctl = b.ctl;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const blocks = t.blocks();
  bool const leads = t.block() == 0;
  bool const listed = n_nodes <= b.list_with_floors_upto;  // round 0's bidders, with the floors
  if (!primed) {
    if (leads && me == 0) tier_open_iteration(t, b);
    t.grid_sync();
  }
  while (true) {
    // --- floors from the current scores, a row a CTA, and the rows emptied.
    std::int32_t const copies = ctl->placed_before;
    t.each_block([&](std::int32_t block) {
      for (std::int32_t r = block; r < n_rows; r += blocks) {
        tier_floor_cta(t, b, r, copies);
        if (me == 0) {  // it wrote the floor
          b.held[r] = 0;
          b.bid_count[r] = 0;
          tier_prices(b, 0)[r] = tier_price(b, r);  // round 0 reads half 0
          t.work(1);
        }
        if (listed) {
          t.sync();  // the row's first price, read by the CTA
          tier_first_bidders_of_row(t, b, r);
        }
      }
    });
    t.grid_sync();  // B
    if (listed) tier_clear_marks(t, b.first_mark, n_nodes);  // read no more this iteration
    std::int32_t rounds = 0;  // this iteration's bidding rounds
    for (bool first = listed;; first = false) {  // the first pass's bidders listed with the floors, or here
      if (!first) {
        tier_shares(t, true, n_nodes, [&](tier_share s) { tier_first_bidders(t, b, s); });
        t.grid_sync();  // C
      }
      clk.lap(tier_phase_floor);
      if (leads) {
        tier_bidding(t, b, rounds, clk);
        if (me == 0) tier_again(t, b);
        t.sync();
        bool const again = ctl->again != 0;  // rank 0 moves it only after the grid's barriers below
        if (again) {
          tier_reset_rows(t, b);
          clk.lap(tier_phase_again);
        } else {
          clk.lap(tier_phase_again);
          tier_commit_all(t, b, clk);
          if (me == 0) {
            tier_close(t, b);
            if (ctl->done == 0) tier_open_iteration(t, b);
          }
        }
      }
      t.grid_sync();  // D
      if (ctl->again == 0) break;
    }
    clk.lap(tier_phase_close);
    if (ctl->done != 0) break;
  }
}

template <class Team>
PLACER_HD void tier_program(Team& t, tier_buffers const& b) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const n_rows = p.n_rows;
  tier_control* const ctl = b.ctl;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  // On a grid, the leading CTA runs the program and the others join its
  // wide phases only (see "The grid" above); the chain has met the grid
  // at a barrier before this tier.
  bool const grid = t.blocks() > 1;
  bool const leads = t.block() == 0;
  tier_clock clk(ctl, leads && me == 0);
  if (leads && p.local.want == 0) {  // a locality job's tier reads none of these
    for (std::int32_t r = me; r < n_rows; r += team) {
      b.remaining[r] = p.window.row_jobs != nullptr ? tier_window_demand(t, p, r) : p.demand[r];
      b.offer_row[tier_offer_fields * r + tier_offer_round] = -1;  // fresh in no round yet
      t.work(1);
    }
    for (std::int32_t n = me; n < n_nodes; n += team) {
      b.won_row[n] = -1;
      b.bid_round[n] = -1;
      b.bid_pass[n] = -1;
      t.work(1);
    }
  }
  // --- the live classes' stale cells, before anything reads them: a node
  // changed since is re-scored once, however often it changed.
  std::int32_t oldest = p.now + 1;
  std::int32_t n_live = 0;
  for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
    if (p.live_class == nullptr || p.live_class[c] != 0) {
      oldest = min_of(oldest, p.fresh[c]);
      n_live += 1;
    }
  }
  std::int32_t const candidates = p.changed != nullptr ? p.n_changed : n_nodes;
  auto const candidate = [&](std::int32_t i) { return p.changed != nullptr ? p.changed[i] : i; };
  std::int32_t const n_classes = p.classes.n_classes;
  // A locality job's tier after another's runs on the leading CTA alone,
  // its refresh too (the few nodes that job committed).
  bool const wide_refresh =
      grid && !b.local_after_local && static_cast<std::int64_t>(candidates) * n_classes >= b.grid_cells_from;
  // Floors and first bidders over the grid: every CTA iterates with the
  // leading one, meeting it at the grid's barriers; else the leading CTA
  // iterates alone.
  // A locality job is the leading CTA's (tier_local): no wide phase.
  bool const wide = grid && p.local.want == 0 && static_cast<std::int64_t>(n_rows) * n_nodes >= b.grid_cells_from;
  if (leads || wide_refresh) {
    // Few nodes (most tiers after a chain's first: 51 a tier at 10k): a
    // worker per cell, not per column, so the CTA's idle workers share the
    // columns (a cell recomputes what a column shares, its node's F before
    // and a shape's F after). The device twin takes the same path.
    // On a grid, a cell a worker while the columns are fewer than the
    // grid's workers.
    bool const by_cell = t.team_wide && (candidates <= b.refresh_cells_below ||
                                         (wide_refresh && candidates < t.blocks() * team));
    // A cell a worker at most on a grid: every stale cell scored in one
    // pass, a twin's too (the same value its copy would have), so the
    // refresh needs one barrier of the grid, not two.
    bool const one_pass = b.refresh_one_pass != 0 && by_cell && wide_refresh &&
                          static_cast<std::int64_t>(candidates) * n_classes <= static_cast<std::int64_t>(t.blocks()) * team;
    std::int32_t const passes = one_pass ? 1 : 2;
    // A cell on a run of lanes (a warp's part) where the cells of live
    // classes are fewer than the CTA's workers: its score's task loops split
    // among them (item 3 of issue 53).
    std::int64_t const live_cells = static_cast<std::int64_t>(candidates) * n_live;
    std::int64_t const cta_cells = wide_refresh ? (live_cells + t.blocks() - 1) / t.blocks() : live_cells;
    std::int32_t const lanes =
        by_cell && b.refresh_lanes != 0 ? tier_refresh_lanes(t.group_size(), team, cta_cells) : 1;
    std::int32_t const lane = me % lanes;
    if (one_pass && wide) t.sync();  // the init's rows, read where the iteration opens (below)
    for (std::int32_t pass = 0; pass < passes; ++pass) {
      auto const one = [&](std::int32_t i) {
        t.work(by_cell ? tier_refresh_cell(t, b, candidate(i / n_classes), i % n_classes, pass, oldest, !one_pass,
                                           lane, lanes)
                       : tier_refresh(b, candidate(i), pass, oldest));
      };
      if (!by_cell && !wide_refresh) {
        // A column a worker in turn; the one worker's re-scoring (pass 0)
        // on its OpenMP team where the columns are many (tier_apart). A
        // worker takes 32 columns at a time: with one, both write the
        // same cache lines.
        tier_apart(t, candidates, pass == 0 ? tier_score_steps * (1 + static_cast<std::int64_t>(n_live)) : 0, one, 32);
      } else {
        tier_shares(
            t, wide_refresh, by_cell ? candidates * n_classes : candidates,
            [&](tier_share s) {
              for (std::int32_t i = s.first; i < s.end; i += s.stride) one(i);
            },
            lanes);
      }
      // The first iteration opens beside the last pass, the init's rows
      // read after the first pass's barrier (in one pass, the CTA's before
      // it): the grid's barrier after the refresh is its.
      if (pass == passes - 1 && wide && wide_refresh && leads && me == 0) tier_open_iteration(t, b);
      if (wide_refresh) {
        t.grid_sync();
      } else {
        t.sync();
      }
    }
  }
  if (leads && me == 0) {
    for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
      if (p.live_class == nullptr || p.live_class[c] != 0) p.fresh[c] = p.now + 1;
    }
    t.work(p.classes.n_classes);
  }
  clk.lap(p.local.want > 0 ? tier_phase_local : tier_phase_refresh);  // read after the next barrier
  if (p.local.want > 0) {
    // Its class's capacities, on the grid where the tier before it was
    // not a locality job's; then the job, on the leading CTA.
    if (!b.local_caps_kept && p.topo.n_domains > 0 && (leads || !b.local_after_local)) {
      tier_local_caps(t, b, p.row_class[0], grid && !b.local_after_local);
    }
    if (leads) tier_local(t, b);
    clk.lap(tier_phase_local);
    clk.stop();
    return;
  }
  if (!leads && !wide) {
    clk.stop();
    return;
  }
  if (wide) {
    tier_iterate_grid(t, b, clk, wide_refresh);
  } else {
    tier_iterate(t, b, clk);
  }
  clk.stop();
}

/// The tiers of a chain one after another (tier_chain): tier k + 1 starts
/// from what tier k left, its refresh candidates the nodes tier k
/// committed, listed once each by rank 0 (at most the tier's copies).
template <class Team>
PLACER_HD void tier_chain_program(Team& t, tier_chain const& c) {
  bool const leads = t.block() == 0;
  if (c.n_tiers > 1 && leads) {
    for (std::int32_t n = t.rank(); n < c.tiers[0].nodes.n_nodes; n += t.size()) {
      c.listed[n] = -1;
      t.work(1);
    }
  }
  if (c.local_held != nullptr && leads) {
    for (std::int32_t n = t.rank(); n < c.tiers[0].nodes.n_nodes; n += t.size()) {
      c.local_held[n] = 0;
      t.work(1);
    }
  }
  if (t.blocks() > 1 && c.tiers[0].nodes.n_nodes <= c.work.list_with_floors_upto) {
    tier_clear_marks(t, c.work.first_mark, c.tiers[0].nodes.n_nodes);  // 0 from here on (tier_iterate_grid)
  }
  // prev: the last tier that ran (a window's slot the draw gave no job
  // is skipped, a draw places nothing); end: past the last tier to run.
  std::int32_t prev = -1, end = c.n_tiers;
  std::int64_t const budget = c.tiers[0].budget_ns;
  std::int64_t const began = budget > 0 ? tier_clock::ns() : 0;  // rank 0 of the leading CTA's decides
  for (std::int32_t k = 0; k < end; ++k) {
    tier_window const& w = c.tiers[k].window;
    if (w.live >= 0 && w.code[w.live] == 0) continue;  // every CTA read it after the draw's grid barrier
    if (budget > 0 && prev >= 0) {
      // Past the budget, this tier and every one after it are not run:
      // rank 0 of the leading CTA says so, every worker reads it after the
      // grid's barrier (the tiers before ended at one of their own).
      if (leads && t.rank() == 0 && tier_clock::ns() - began > budget) {
        for (std::int32_t i = k; i < c.n_tiers; ++i) c.ctl[i].not_run = 1;
      }
      t.grid_sync();
      if (c.ctl[k].not_run != 0) break;
    }
    if (w.draw) {
      // A queue window's draw: on what the tiers before it left (the
      // grid's barrier), its codes for every CTA (the grid's again).
      if (t.blocks() > 1) t.grid_sync();
      if (leads) tier_draw(t, c.tiers[k]);
      if (t.blocks() > 1) t.grid_sync();
      end = draw_end(k, w.n_slots, w.code[w.n_jobs + w.n_slots], end);
      continue;
    }
    tier_buffers b = c.work;
    b.p = c.tiers[k];
    b.heap_begin = c.heap_begin + c.heap_at[k];
    b.ctl = c.ctl + k;
    b.out = nullptr;  // where the tier before it ended, for a window's slot (below)
    b.local_cap = c.local_cap;
    b.local_held = c.local_held;
    if (prev >= 0 && c.tiers[k].local.want > 0 && c.tiers[prev].local.want > 0) {
      b.local_after_local = true;
      b.local_caps_kept = c.tiers[k].row_class[0] == c.tiers[prev].row_class[0];
    }
    if (prev >= 0 && leads) {
      tier_clock clk(b.ctl, t.rank() == 0);
      if (t.team_wide) {
        // Every worker lists its share: a node's first claim (fetch_max of
        // its listed tier) adds it. The candidates' order is free: each
        // re-scores its own column.
        if (t.rank() == 0) *c.n_candidates = 0;
        t.sync();
        tier_placement const* before = c.out + tier_out_begin(c.tiers, c.ctl, c.out_at, prev);
        for (std::int32_t i = t.rank(); i < c.ctl[prev].placed; i += t.size()) {
          std::int32_t const n = before[i].node;
          if (t.fetch_max(c.listed + n, k) < k) c.candidates[t.fetch_add(c.n_candidates, 1)] = n;
          t.work(1);
        }
      } else if (t.rank() == 0) {
        tier_placement const* before = c.out + tier_out_begin(c.tiers, c.ctl, c.out_at, prev);
        std::int32_t listed = 0;
        for (std::int32_t i = 0; i < c.ctl[prev].placed; ++i) {
          std::int32_t const n = before[i].node;
          if (c.listed[n] == k) continue;
          c.listed[n] = k;
          c.candidates[listed++] = n;
        }
        *c.n_candidates = listed;
        t.work(c.ctl[prev].placed);
      }
      t.sync();
      clk.lap(tier_phase_list);
      clk.stop();
    }
    // On a grid, every CTA sees what the leading one (and the records'
    // unpacking) wrote before the tier starts; a locality job's tier after
    // another's is the leading CTA's alone (tier_program), so the grid
    // meets before the next tier that is not.
    if (t.blocks() > 1 && !b.local_after_local) t.grid_sync();
    if (leads || !b.local_after_local) {
      b.out = c.out + tier_out_begin(c.tiers, c.ctl, c.out_at, k);  // the tiers before it ended at a barrier
    }
    if (prev >= 0) {
      b.p.changed = c.candidates;
      b.p.n_changed = *c.n_candidates;
    } else {
      b.p.changed = c.tiers[0].changed;  // the chain's first to run: the caller's log
      b.p.n_changed = c.tiers[0].n_changed;
    }
    prev = k;
    tier_program(t, b);  // ends at a barrier (the leading CTA's, or the grid's)
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
