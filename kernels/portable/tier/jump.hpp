#pragma once
// Price jumps: a price war's climb in a few dual steps. tier_jump on rank 0
// (the CPU backend), tier_jump_team by the whole team, the same prices.

#include "bid.hpp"
#include "buffers.hpp"
#include "offer.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Bidding rounds of a pass before tier_jump is tried (then after a round
/// that left as many bidders as it had: a price war), and the most rounds
/// between tries after tries that raised nothing.
inline constexpr std::int32_t tier_jump_after = 8;
inline constexpr std::int32_t tier_jump_most_wait = 64;

/// The rows bidder n wants at `prices`, each passed to join(r): its best
/// and those within eps of it; none when it would sit out (G's first rows).
template <class Join>
PLACER_HD void tier_wanted(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, Join&& join) {
  std::int32_t r1 = -1;
  std::int64_t m1 = 0, m2 = 0;
  tier_margins(b, n, prices, -1, r1, m1, m2);
  if (r1 < 0 || m1 <= 0) return;
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    if (tier_margin(b, r, n, prices) >= m1 - b.p.eps) join(r);
  }
}

/// A jump's step on row g: held bids below the row's new price (`rise`
/// above its price) rise to it, never above (a held bid must stay at or
/// below what its holder would bid now, or the price could later climb
/// past a holder's value); equal bids may reorder the heap by node, so it
/// is rebuilt; the price follows. Returns its steps (Team::work).
PLACER_HD inline std::int64_t tier_lift(tier_buffers const& b, std::int32_t g, std::int64_t rise,
                                        std::int64_t* prices) {
  std::int64_t* hb = b.heap_bid + b.heap_begin[g];
  std::int32_t* hn = b.heap_node + b.heap_begin[g];
  std::int32_t const held = b.held[g];
  std::int64_t const to = prices[g] + rise;
  std::int64_t steps = 1 + held;
  for (std::int32_t i = 0; i < held; ++i) hb[i] = max_of(hb[i], to);
  for (std::int32_t i = tier_heap_parents(held) - 1; i >= 0; --i) steps += tier_sift_down(hb, hn, held, i, hb[i], hn[i]);
  prices[g] = tier_price(b, g);
  return steps;
}

/// A price jump over a set of full rows (rank 0, between rounds; the
/// bidders of the next round are todo[list], its prices half `list`).
///
/// When a few nodes are left bidding for near-equal full rows, forward
/// bidding raises those rows one increment a round, each bid displacing a
/// holder that bids on the next row: thousands of rounds when the rows
/// must climb far (rows whose preference doubles their values on a few
/// nodes). The jump does that climb in a few steps, as the Hungarian
/// method's dual step does. G starts as the rows the bidders want (within
/// eps of their best). A step closes G over its holders (a row within eps
/// of a holder's margin joins); if every row of G is full, all of G's
/// prices rise by the largest amount that keeps every holder of G within
/// eps of its best margin outside G (or of sitting out, 0). After a step
/// the holder that bound it is within eps of a row outside G, which joins
/// at the next; the steps end when G reaches a row with an unheld copy
/// (the bidders' path ends there), a holder bound by sitting out, or after
/// rows + 1 steps. G only grows: two rows that bind each other rise
/// together instead of taking turns.
///
/// Rows of G rise together, so a holder's preferences within G do not
/// change; rows outside G do not move, so their holders only gain; nodes
/// that sit out only lose margin. Every assignment condition the program's
/// optimality rests on holds after a step as before it, so the jump changes
/// how fast the prices get there, not what they certify. Returns whether
/// the prices rose.
PLACER_HD inline bool tier_jump(tier_buffers const& b, std::int32_t list) {
  auto const& p = b.p;
  std::int32_t const n_rows = p.n_rows;
  std::int64_t* prices = tier_prices(b, list);
  std::int32_t* in = b.jump_rows;             // 1 = row in G
  std::int32_t* queue = b.jump_rows + n_rows;  // G's rows, in the order they joined
  std::int32_t size = 0;
  for (std::int32_t r = 0; r < n_rows; ++r) in[r] = 0;
  auto join = [&](std::int32_t r) {
    if (in[r] == 0) {
      in[r] = 1;
      queue[size++] = r;
    }
  };
  // The rows each bidder wants: its best and those within eps of it.
  std::int32_t const* todo = b.todo[list];
  std::int32_t const k = b.ctl->todo_count[list];
  for (std::int32_t i = 0; i < k; ++i) tier_wanted(b, todo[i], prices, join);
  bool raised = false;
  for (std::int32_t step = 0; step <= n_rows && size > 0; ++step) {
    // G closed over its holders, at this step's prices.
    for (std::int32_t at = 0; at < size; ++at) {
      std::int32_t const g = queue[at];
      if (b.quota[g] == 0 || b.held[g] < b.quota[g]) return raised;
      std::int32_t const* hn = b.heap_node + b.heap_begin[g];
      for (std::int32_t i = 0; i < b.held[g]; ++i) {
        std::int64_t const own = tier_margin(b, g, hn[i], prices);
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0 && tier_margin(b, r, hn[i], prices) >= own - p.eps) join(r);
        }
      }
    }
    // The rise: the least slack of G's holders against the rows outside G.
    std::int64_t rise = tier_closed;
    for (std::int32_t at = 0; at < size; ++at) {
      std::int32_t const g = queue[at];
      std::int32_t const* hn = b.heap_node + b.heap_begin[g];
      for (std::int32_t i = 0; i < b.held[g]; ++i) {
        std::int64_t alt = 0;
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0) alt = max_of(alt, tier_margin(b, r, hn[i], prices));
        }
        rise = min_of(rise, tier_margin(b, g, hn[i], prices) - alt + p.eps);
      }
    }
    if (rise <= p.eps) return raised;  // no more than a round would do
    for (std::int32_t at = 0; at < size; ++at) tier_lift(b, queue[at], rise, prices);
    raised = true;
  }
  return raised;
}

/// tier_jump by the whole team (Team::team_wide): on one GPU thread its
/// loops over G's holders and the rows took 2.4 ms of the 10k round and
/// 9.2 ms of openb's on an H100. The same steps and the same prices: G is
/// a set (the order in which tier_jump's worklist met its rows changes
/// nothing), closed over its holders by sweeps until one adds no row (a
/// sweep reads G and marks joiners apart, `jump_rows`' second half; they
/// join after a barrier); the step stops where G has a row with an unheld
/// copy; the rise is the least slack over G's holders (fetch_min), all
/// of G's holders spread over the team at once (not row by row: GPU model,
/// openb's jumps 1.45 -> 0.51 ms); each row of G lifts and rebuilds its
/// own heap. Sets ctl->jump_raised; ends at a barrier.
template <class Team>
PLACER_HD void tier_jump_team(Team& t, tier_buffers const& b, std::int32_t list) {
  auto const& p = b.p;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  tier_control* const ctl = b.ctl;
  std::int64_t* prices = tier_prices(b, list);
  std::int32_t* in = b.jump_rows;            // 1 = row in G
  std::int32_t* add = b.jump_rows + n_rows;  // 1 = row joins G after this sweep
  for (std::int32_t r = me; r < n_rows; r += team) {
    in[r] = 0;
    add[r] = 0;
  }
  if (me == 0) {
    ctl->jump_raised = 0;
    ctl->jump_changed[0] = ctl->jump_changed[1] = 0;
  }
  t.sync();
  // The rows each bidder wants: its best and those within eps of it.
  std::int32_t const* todo = b.todo[list];
  std::int32_t const k = ctl->todo_count[list];
  for (std::int32_t i = me; i < k; i += team) {
    tier_wanted(b, todo[i], prices, [&](std::int32_t r) { t.fetch_max(in + r, 1); });
    t.work(2 * n_rows);  // the margins, then the rows within eps
  }
  t.sync();
  // f(g, i) for holder i of every row g of G, all G's holders spread over
  // the team at once (a row's holders are often fewer than the team: a
  // worker per holder row by row would leave rank 0 one of each row's).
  auto each_holder = [&](auto const& f) {
    std::int32_t base = 0;  // G's holders before row g
    for (std::int32_t g = 0; g < n_rows; ++g) {
      t.work(1);  // every worker reads every row
      if (in[g] == 0) continue;
      std::int32_t const held = b.held[g];
      for (std::int32_t i = ((me - base) % team + team) % team; i < held; i += team) f(g, i);
      base += held;
    }
  };
  std::int32_t sweep = 0;  // every worker counts the same sweeps
  for (std::int32_t step = 0; step <= n_rows; ++step) {
    // G closed over its holders, at this step's prices.
    while (true) {
      std::int32_t* changed = ctl->jump_changed + sweep % 2;
      each_holder([&](std::int32_t g, std::int32_t i) {
        std::int32_t const n = b.heap_node[b.heap_begin[g] + i];
        std::int64_t const own = tier_margin(b, g, n, prices);
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0 && tier_margin(b, r, n, prices) >= own - p.eps) t.fetch_max(add + r, 1);
        }
        t.work(1 + n_rows);
      });
      t.sync();
      // Every worker has read the other flag (after the last sweep's
      // barrier), so rank 0 may clear it for the next sweep.
      if (me == 0) ctl->jump_changed[1 - sweep % 2] = 0;
      for (std::int32_t r = me; r < n_rows; r += team) {
        if (add[r] != 0) {
          in[r] = 1;
          add[r] = 0;
          t.fetch_max(changed, 1);
        }
      }
      t.sync();
      ++sweep;
      if (*changed == 0) break;
    }
    if (me == 0) {
      ctl->jump_any = 0;
      ctl->jump_stop = 0;
      ctl->jump_rise = tier_closed;
    }
    t.sync();
    // A row of G with an unheld copy ends the bidders' path: no step. Else
    // the rise: the least slack of G's holders against the rows outside G.
    for (std::int32_t r = me; r < n_rows; r += team) {
      if (in[r] == 0) continue;
      t.fetch_max(&ctl->jump_any, 1);
      if (b.quota[r] == 0 || b.held[r] < b.quota[r]) t.fetch_max(&ctl->jump_stop, 1);
    }
    std::int64_t rise = tier_closed;
    each_holder([&](std::int32_t g, std::int32_t i) {
      std::int32_t const n = b.heap_node[b.heap_begin[g] + i];
      std::int64_t alt = 0;
      for (std::int32_t r = 0; r < n_rows; ++r) {
        if (in[r] == 0) alt = max_of(alt, tier_margin(b, r, n, prices));
      }
      rise = min_of(rise, tier_margin(b, g, n, prices) - alt + p.eps);
      t.work(1 + n_rows);
    });
    if (rise < tier_closed) t.fetch_min(&ctl->jump_rise, rise);
    t.sync();
    if (ctl->jump_any == 0 || ctl->jump_stop != 0 || ctl->jump_rise <= p.eps) break;
    rise = ctl->jump_rise;
    for (std::int32_t g = me; g < n_rows; g += team) {
      if (in[g] != 0) t.chain(tier_lift(b, g, rise, prices));
    }
    if (me == 0) ctl->jump_raised = 1;
    t.sync();
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
