#pragma once
// The refresh: the live classes' stale cells re-scored before a tier reads
// them, a column per node (tier_refresh) or a cell per worker
// (tier_refresh_cell), twins copied.

#include "buffers.hpp"

#include <placer/kernels/ops.hpp>

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The cells of live classes that are stale on a node (stamp >= fresh).
struct tier_stale {
  std::uint8_t const* live;
  std::int32_t const* fresh;
  std::int32_t stamp;
  PLACER_HD bool operator()(std::int32_t, std::int32_t c) const {
    return (live == nullptr || live[c] != 0) && stamp >= fresh[c];
  }
};

/// The twin node n copies its refreshed cells from, or -1 (it re-scores its
/// own): its label's node when that is the root of its label (labelled
/// itself, so it re-scores its own) and in the same state.
PLACER_HD inline std::int32_t tier_twin(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  if (p.state == nullptr) return -1;
  std::int32_t const l = p.state[n];
  return l != n && p.state[l] == l && node_state_equal(p.nodes, n, l) ? l : -1;
}

/// Node n's stale cells copied from node `from`'s (whose cells of those
/// classes hold n's values); returns its steps.
PLACER_HD inline std::int64_t tier_copy_column(tier_problem const& p, std::int32_t n, std::int32_t from,
                                               tier_stale const& stale) {
  std::int64_t steps = 0;
  for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
    if (!stale(c, c)) continue;
    std::int64_t const row = static_cast<std::int64_t>(c) * p.nodes.n_nodes;
    p.scores[row + n] = p.scores[row + from];
    steps += 1;
  }
  return steps;
}

/// The refresh of node n's stale cells of the live classes
/// (tier_problem::stamp), in two passes over the nodes with a barrier
/// between: pass 0 re-scores the nodes that have no twin to copy from (the
/// roots of labels among them; on the host, where its worker scored a
/// score twin of the node earlier in the refresh, it copies that one's),
/// pass 1 copies the twins'. `oldest` is the
/// least fresh of the live classes: a node stamped before it has nothing
/// stale. Returns its steps (Team::work).
PLACER_HD inline std::int64_t tier_refresh(tier_buffers const& b, std::int32_t n, std::int32_t pass,
                                           std::int32_t oldest) {
  auto const& p = b.p;
  if (p.stamp[n] < oldest) return 1;
  std::int32_t const twin = tier_twin(b, n);
  tier_stale const stale{p.live_class, p.fresh, p.stamp[n]};
  std::int64_t steps = 2 + p.classes.n_classes;
  if (pass == 0 && twin < 0) {
    std::int32_t scored = 0;
    for (std::int32_t c = 0; c < p.classes.n_classes; ++c) scored += stale(c, c) ? 1 : 0;
    std::int32_t same = -1;  // a score twin this worker scored in this refresh (the host's memo)
    std::int64_t const* known = scored > 0 ? tier_known_row(p, n, &same) : nullptr;
    if (same >= 0) return steps + tier_copy_column(p, n, same, stale);
    score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_column(n, p.scores, nullptr, p.classes.n_classes, stale,
                                                                     known);
    steps += tier_score_steps * (1 + static_cast<std::int64_t>(scored));  // the column's setup, its cells
  } else if (pass == 1 && twin >= 0) {
    steps += tier_copy_column(p, n, twin, stale);
  }
  return steps;
}

/// The refresh of one stale cell, class c on node n, for a team that
/// splits a refresh by cell (tier_program): pass 0 scores it where n has
/// no twin to copy from, pass 1 copies the twin's. The same values as
/// tier_refresh (op.score of a cell equals the column's). The cell is on
/// `lanes` workers of t (an aligned run of ranks, Team::group_fold; 1: this
/// one alone), this one `lane` of them, each a slice of the task set
/// (score_cell_op::score_lanes), lane 0 writing. Returns its steps
/// (Team::work): a cell alone also sets up what a column shares. Without
/// `twins`, every stale cell is scored in pass 0.
template <class Team>
PLACER_HD std::int64_t tier_refresh_cell(Team& t, tier_buffers const& b, std::int32_t n, std::int32_t c,
                                         std::int32_t pass, std::int32_t oldest, bool twins, std::int32_t lane,
                                         std::int32_t lanes) {
  auto const& p = b.p;
  if (p.stamp[n] < oldest || !tier_stale{p.live_class, p.fresh, p.stamp[n]}(c, c)) return 2;
  std::int32_t const twin = twins ? tier_twin(b, n) : -1;
  std::int64_t const row = static_cast<std::int64_t>(c) * p.nodes.n_nodes;
  if (pass == 0 && twin < 0) {
    std::int32_t const s = score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_lanes(
        c, n, lane, lanes, [&](std::int64_t v) { return t.group_fold(v, lanes, fold_sum{}); });
    if (lane == 0) p.scores[row + n] = s;
    return 3 + 2 * tier_score_steps_on(lanes);
  }
  if (pass == 1 && twin >= 0 && lane == 0) p.scores[row + n] = p.scores[row + twin];
  return 3;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
