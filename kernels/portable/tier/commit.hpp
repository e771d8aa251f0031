#pragma once
// The commit: every held copy taken on its node, the winners grouped by
// state label (a worker per row, or tier_group_team), and their open rows'
// cells re-scored once per group and copied by the rest.

#include "buffers.hpp"

#include <placer/kernels/ops.hpp>

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Commits one replica of class c on node n (it fits: the cell was
/// feasible and the node takes one replica this iteration) and returns the
/// GPUs it took as a bit mask.
PLACER_HD inline std::uint64_t tier_commit(tier_buffers const& b, std::int32_t c, std::int32_t n) {
  auto const& p = b.p;
  std::uint64_t taken = 0;
  take_replica(p.nodes, p.classes, c, n, p.gpu_free, p.cpu_free, p.mem_free, taken);
  return taken;
}

/// The cells of rows that still have copies to place after this
/// iteration's held ones (the rows the next iteration reads).
struct tier_open {
  std::int32_t const* remaining;
  std::int32_t const* held;
  PLACER_HD bool operator()(std::int32_t r, std::int32_t) const { return remaining[r] > held[r]; }
};

/// Re-scores node n's cells of the open rows after a commit; returns its
/// steps (Team::work).
PLACER_HD inline std::int64_t tier_rescore(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  tier_open const open{b.remaining, b.held};
  score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_column(n, p.scores, p.row_class, p.n_rows, open);
  std::int64_t steps = tier_score_steps + p.n_rows;
  for (std::int32_t r = 0; r < p.n_rows; ++r) steps += open(r, p.row_class[r]) ? tier_score_steps : 0;
  return steps;
}

/// Row r's winners grouped by state label (one worker per row): sets
/// bid_row[n] of each to the first (lowest) winner with its label, its
/// group's leader. The row's stretch of `select` (N entries, labels are
/// node indices) is the map from label to leader; only the entries of the
/// winners' labels are written and read. Returns its steps (Team::work).
PLACER_HD inline std::int64_t tier_group(tier_buffers const& b, std::int32_t r) {
  std::int32_t const* hn = b.heap_node + b.heap_begin[r];
  std::int32_t* leader = b.select + static_cast<std::int64_t>(r) * b.p.nodes.n_nodes;
  std::int32_t const held = b.held[r];
  for (std::int32_t i = 0; i < held; ++i) leader[b.p.state[hn[i]]] = hn[i];
  for (std::int32_t i = 0; i < held; ++i) {
    std::int32_t& l = leader[b.p.state[hn[i]]];
    l = min_of(l, hn[i]);
  }
  for (std::int32_t i = 0; i < held; ++i) b.bid_row[hn[i]] = leader[b.p.state[hn[i]]];
  return 1 + 3 * static_cast<std::int64_t>(held);
}

/// tier_group for every row by the whole team (Team::team_wide): each
/// winner's label entry set high, then lowered to the least winner with
/// the label (fetch_max, fetch_min), then read. Ends at a barrier.
template <class Team>
PLACER_HD void tier_group_team(Team& t, tier_buffers const& b) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  for (std::int32_t step = 0; step < 3; ++step) {
    for (std::int32_t r = 0; r < n_rows; ++r) {
      std::int32_t const* hn = b.heap_node + b.heap_begin[r];
      std::int32_t* leader = b.select + static_cast<std::int64_t>(r) * n_nodes;
      for (std::int32_t i = t.rank(); i < b.held[r]; i += t.size()) {
        std::int32_t* l = leader + b.p.state[hn[i]];
        if (step == 0) t.fetch_max(l, n_nodes);
        if (step == 1) t.fetch_min(l, hn[i]);
        if (step == 2) b.bid_row[hn[i]] = *l;
        t.work(1);
      }
    }
    t.sync();
  }
}

/// After the leaders have re-scored: winner n copies its leader's cells of
/// the open rows when their states are equal (else re-scores its own) and
/// takes the label of the state it is in now. Returns its steps (Team::work).
PLACER_HD inline std::int64_t tier_follow(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  std::int32_t const from = b.bid_row[n];
  if (from == n) {
    p.state[n] = n;
    return 1;
  }
  std::int64_t const compare = 8;  // node_state_equal: the two nodes' records
  if (!node_state_equal(p.nodes, n, from)) {
    std::int64_t const steps = compare + tier_rescore(b, n);
    p.state[n] = n;
    return steps;
  }
  tier_open const open{b.remaining, b.held};
  std::int64_t steps = compare + p.n_rows;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    if (!open(r, p.row_class[r])) continue;
    std::int64_t const row = static_cast<std::int64_t>(p.row_class[r]) * p.nodes.n_nodes;
    p.scores[row + n] = p.scores[row + from];
    ++steps;
  }
  p.state[n] = from;
  return steps;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
