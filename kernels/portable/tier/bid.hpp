#pragma once
// Bids: a node's margins on the rows, its bid, a holder's re-bid, and the
// nodes that bid in a pass's first round.

#include "buffers.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Row r's value on node n (-1 = infeasible).
PLACER_HD inline std::int32_t tier_value(tier_buffers const& b, std::int32_t r, std::int32_t n) {
  return b.p.scores[static_cast<std::int64_t>(b.p.row_class[r]) * b.p.nodes.n_nodes + n];
}

/// A margin below any cell's, closed rows' included (their price is
/// tier_closed), and below 0: an infeasible cell's.
inline constexpr std::int64_t tier_no_margin = -(std::int64_t{1} << 62) - 1;

/// Node n's margin on row r at `prices`: value + 1 - price, or
/// tier_no_margin where the cell is infeasible.
PLACER_HD inline std::int64_t tier_margin(tier_buffers const& b, std::int32_t r, std::int32_t n,
                                          std::int64_t const* prices) {
  std::int32_t const v = tier_value(b, r, n);
  return v >= 0 ? static_cast<std::int64_t>(v) + 1 - prices[r] : tier_no_margin;
}

/// Folds row r's margin m into the best row r1 (margin m1; an equal margin
/// keeps the row folded first) and the second-best margin m2, which starts
/// at 0 (sitting out).
PLACER_HD inline void tier_fold_margin(std::int32_t r, std::int64_t m, std::int32_t& r1, std::int64_t& m1,
                                       std::int64_t& m2) {
  if (r1 < 0 || m > m1) {
    if (r1 >= 0 && m1 > m2) m2 = m1;
    m1 = m;
    r1 = r;
  } else if (m > m2) {
    m2 = m;
  }
}

/// Node n's margins at `prices` (tier_margin; infeasible rows left out, a
/// closed row's below any other's and below 0): the best row (ties to the
/// lower) with its margin, and the best margin of the rows other than
/// `skip`, floored at 0 (sitting out). With skip = -1 the second is the
/// best of the rows other than the best one. The hot loop of every bid,
/// so it reads the cell itself rather than through tier_margin's sentinel.
PLACER_HD inline void tier_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, std::int32_t skip,
                                   std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  auto const& p = b.p;
  m1 = 0;
  m2 = 0;
  r1 = -1;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    if (r == skip) continue;
    std::int32_t const v = tier_value(b, r, n);
    if (v < 0) continue;
    std::int64_t const m = static_cast<std::int64_t>(v) + 1 - prices[r];  // tier_margin of a feasible cell
    tier_fold_margin(r, m, r1, m1, m2);
  }
}

/// Node n's margins at `prices` as tier_margins gives them (skip = -1),
/// by a scan of every row that also remembers the node's tier_bid_top best
/// rows and the margin after them (bid_top, bid_bound) for this pass. Ties
/// go to the lower row, as in tier_margins (the rows are scanned in order;
/// an equal margin does not pass an earlier row's).
PLACER_HD inline void tier_scan_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices,
                                        std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  constexpr std::int32_t k = tier_bid_top;
  std::int64_t tm[k + 1];
  std::int32_t tr[k + 1];
  std::int32_t count = 0;
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    std::int32_t const v = tier_value(b, r, n);
    if (v < 0) continue;
    std::int64_t const m = static_cast<std::int64_t>(v) + 1 - prices[r];  // tier_margin of a feasible cell
    if (count == k + 1 && m <= tm[k]) continue;
    std::int32_t i = count < k + 1 ? count++ : k;
    for (; i > 0 && tm[i - 1] < m; --i) {
      tm[i] = tm[i - 1];
      tr[i] = tr[i - 1];
    }
    tm[i] = m;
    tr[i] = r;
  }
  r1 = count > 0 ? tr[0] : -1;
  m1 = count > 0 ? tm[0] : 0;
  m2 = count > 1 ? max_of<std::int64_t>(tm[1], 0) : 0;
  std::int32_t* top = b.bid_top + static_cast<std::int64_t>(n) * k;
  std::int32_t const kept = min_of(count, k);
  for (std::int32_t i = 0; i < kept; ++i) {  // ascending, for tier_remembered_margins' ties
    std::int32_t j = i;
    for (; j > 0 && top[j - 1] > tr[i]; --j) top[j] = top[j - 1];
    top[j] = tr[i];
  }
  for (std::int32_t i = kept; i < k; ++i) top[i] = -1;
  b.bid_bound[n] = count == k + 1 ? tm[k] : tier_no_margin;
  b.bid_pass[n] = b.ctl->passes;
}

/// Node n's margins at `prices` from the rows it remembers of this pass
/// (tier_scan_margins), when they decide them: prices only rise within a
/// pass and the cells do not change, so every other row's margin is still
/// at most bid_bound. When the best remembered margin is above it and the
/// second at or above it (or it is at most 0, sitting out), they are
/// tier_margins' answer; returns false otherwise (scan every row).
PLACER_HD inline bool tier_remembered_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices,
                                              std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  if (b.bid_pass[n] != b.ctl->passes) return false;
  std::int32_t const* top = b.bid_top + static_cast<std::int64_t>(n) * tier_bid_top;
  r1 = -1;
  m1 = 0;
  m2 = 0;
  for (std::int32_t i = 0; i < tier_bid_top && top[i] >= 0; ++i) {
    std::int32_t const r = top[i];
    std::int64_t const m = static_cast<std::int64_t>(tier_value(b, r, n)) + 1 - prices[r];  // feasible when scanned
    tier_fold_margin(r, m, r1, m1, m2);
  }
  std::int64_t const bound = b.bid_bound[n];
  return r1 >= 0 && m1 > bound && m2 >= bound;
}

/// Node n's bid this round: its best row by margin at the round's prices,
/// at price + (best - max(second, 0)) + eps, i.e. value + 1 - second + eps:
/// the most it pays while that row stays its best within eps. Returns false
/// when no row has a positive margin (the node sits this iteration out:
/// prices only rise within one). In a tier of many rows, most bids after
/// a pass's first round are decided by the rows the node remembers
/// (tier_remembered_margins: two thirds of the bids at 10k-k8s, 60% at
/// 100k-k8s).
PLACER_HD inline bool tier_bid(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, std::int32_t& row,
                               std::int64_t& bid) {
  std::int32_t r1 = -1;
  std::int64_t m1 = 0, m2 = 0;
  if (b.p.n_rows <= b.remember_rows_above) {
    tier_margins(b, n, prices, -1, r1, m1, m2);
  } else if (!tier_remembered_margins(b, n, prices, r1, m1, m2)) {
    tier_scan_margins(b, n, prices, r1, m1, m2);
  }
  if (r1 < 0 || m1 <= 0) return false;
  row = r1;
  bid = prices[r1] + (m1 - m2) + b.p.eps;
  return true;
}

/// Node n's best margin on the rows other than r at `prices`, floored at 0
/// (sitting out), from the rows it remembers of this pass
/// (tier_scan_margins), when they decide it: every row it does not
/// remember is still at most bid_bound (prices only rise within a pass),
/// so the best remembered one is the answer when it is at or above the
/// bound, and so is 0 when the bound is at most 0. Returns false otherwise
/// (scan every row). Requires a scan of n's in this pass (bid_pass).
PLACER_HD inline bool tier_remembered_other(tier_buffers const& b, std::int32_t n, std::int32_t r,
                                            std::int64_t const* prices, std::int64_t& other) {
  std::int32_t const* top = b.bid_top + static_cast<std::int64_t>(n) * tier_bid_top;
  std::int64_t best = tier_no_margin;
  for (std::int32_t i = 0; i < tier_bid_top && top[i] >= 0; ++i) {
    std::int32_t const o = top[i];
    if (o == r) continue;
    best = max_of(best, static_cast<std::int64_t>(tier_value(b, o, n)) + 1 - prices[o]);  // feasible when scanned
  }
  std::int64_t const bound = b.bid_bound[n];
  if (best < bound && bound > 0) return false;
  other = max_of<std::int64_t>(best, 0);
  return true;
}

/// What holder n of row r would bid for r now, at the round's prices:
/// value + 1 - (its best margin elsewhere, or 0) + eps. Prices only rise
/// within a pass, so this is never below the bid it holds with. Its best
/// margin elsewhere from the rows it remembers where they decide it
/// (tier_remembered_other), else by a scan of every row; `steps`, when
/// given, gets the rows read (remembered and scanned).
PLACER_HD inline std::int64_t tier_rebid(tier_buffers const& b, std::int32_t n, std::int32_t r, std::int64_t const* prices,
                                         std::int32_t* steps = nullptr) {
  std::int64_t other = 0;
  bool const remembers = b.bid_pass[n] == b.ctl->passes;
  std::int32_t read = remembers ? tier_bid_top : 0;
  if (!remembers || !tier_remembered_other(b, n, r, prices, other)) {
    std::int32_t r1 = -1;
    std::int64_t m1 = 0, m2 = 0;
    tier_margins(b, n, prices, r, r1, m1, m2);
    other = r1 >= 0 && m1 > 0 ? m1 : 0;
    read += b.p.n_rows;
  }
  if (steps != nullptr) *steps = read;
  return static_cast<std::int64_t>(tier_value(b, r, n)) + 1 - other + b.p.eps;
}

/// The least cell value of row r that bids in round 0 of a pass (value + 1
/// - price > 0 on a feasible cell, value >= 0: value >= the first price),
/// or -1 when the row takes no first bids (no quota, or out of reach).
PLACER_HD inline std::int32_t tier_first_least(tier_buffers const& b, std::int32_t r) {
  std::int64_t const least = max_of<std::int64_t>(tier_prices(b, 0)[r], 0);
  return b.quota[r] == 0 || least > INT32_MAX ? -1 : static_cast<std::int32_t>(least);
}

/// Round 0 of a pass bids from the nodes with a positive margin on some
/// row at its floor (tier_bid: value >= price), listed in todo[0]. The
/// others would sit the whole pass out (prices only rise), and most nodes
/// do: at 100k, 2,239 of 12,800 bid in the fractional tier. Finding them
/// is one streaming pass over the open rows' cells (todo[1], free until
/// round 0 lists its losers, holds a mark per node), not a bid's search
/// for the best and second-best row on every node. The nodes of `s` are
/// this worker's (its share of a CTA's, or of a grid's: tier_program.hpp);
/// the caller meets the others at a barrier after it.
template <class Team, class Share>
PLACER_HD void tier_first_bidders(Team& t, tier_buffers const& b, Share const& s) {
  std::int32_t const first = s.first;
  std::int32_t const stride = s.stride;
  std::int32_t const end = s.end;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t* __restrict__ mark = b.todo[1];
  for (std::int32_t n = first; n < end; n += stride) {
    mark[n] = 0;
    t.work(1);
  }
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    std::int32_t const at = tier_first_least(b, r);
    if (at < 0) continue;
    std::int32_t const* __restrict__ cell = b.p.scores + static_cast<std::int64_t>(b.p.row_class[r]) * n_nodes;  // tier_value
    for (std::int32_t n = first; n < end; n += stride) {
      mark[n] |= static_cast<std::int32_t>(cell[n] >= at);
      t.work(1);
    }
  }
  for (std::int32_t n = first; n < end; n += stride) {
    if (mark[n] != 0) b.todo[0][t.fetch_add(&b.ctl->todo_count[0], 1)] = n;
    t.work(1);
  }
}

/// Round 0's bidders found a row at a time, by the grid's CTA that took
/// the row's floor (tier_iterate_grid): the nodes whose cell of row r
/// reaches its first price, each listed once over all rows (its mark set
/// first by this CTA's worker). The same set as tier_first_bidders, in
/// another order (which moves the offers' work, not their results), with
/// no barrier of the grid between the floors and the list. The marks are
/// 0 before (tier_iterate_grid clears them).
template <class Team>
PLACER_HD void tier_first_bidders_of_row(Team& t, tier_buffers const& b, std::int32_t r) {
  std::int32_t const at = tier_first_least(b, r);
  if (at < 0) return;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const* __restrict__ cell = b.p.scores + static_cast<std::int64_t>(b.p.row_class[r]) * n_nodes;
  for (std::int32_t n = t.rank(); n < n_nodes; n += t.size()) {
    if (cell[n] >= at && t.fetch_max(b.first_mark + n, 1) == 0) {
      b.todo[0][t.fetch_add(&b.ctl->todo_count[0], 1)] = n;
    }
    t.work(1);
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
