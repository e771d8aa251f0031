#pragma once
// Twin entries: the one-worker program's floors and first bidders read a
// set of nodes whose cells are equal once (tier_problem::twins), the
// nodes the round changed one by one. The same floors and bidders as
// tier_floor and tier_first_bidders; the CPU backend's only (seq_team).

#include "bid.hpp"
#include "buffers.hpp"
#include "floor.hpp"

#include <cstdint>
#include <type_traits>

#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
#include <omp.h>
#endif

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The twin entries of a chain (host memory, tier_host_arena). A set is
/// the nodes of one twin (tier_problem::twins); its entry reads one
/// member's cells for all the members not yet single. A node is single
/// once stamped (stamp >= 0) and then has an entry of its own for the rest
/// of the chain (a node a locality job gave back keeps it: reading a
/// node's own cells is always right). Sizes in nodes where not said.
struct tier_twin_rows {
  std::int32_t const* twins = nullptr;  ///< tier_problem::twins of the chain's nodes
  std::int32_t n_sets = 0;
  std::int32_t* member_begin = nullptr;  ///< n_sets + 1: each set's members, in `members`
  std::int32_t* members = nullptr;       ///< the nodes, set after set, each set's in node order
  std::int32_t* cursor = nullptr;        ///< per set: where in `members` its entry's node is
  std::int32_t* single = nullptr;        ///< per node: 1 once it has an entry of its own
  std::int32_t* entry = nullptr;         ///< per node: the entry that reads its cells
  /// 2 x n_nodes: the entries, the sets' first (n_sets), then the single
  /// nodes': the node whose cells an entry reads, and the nodes that have
  /// those cells (a set's members not single; 1 for a single node).
  std::int32_t* node = nullptr;
  std::int32_t* weight = nullptr;
  std::int32_t n_entries = 0;
  std::int32_t* hit = nullptr;   ///< 2 x n_nodes: per entry, whether its nodes bid in round 0
  /// Per row of the widest tier, 2 x n_nodes: the entries' cells of the
  /// row (in entry order), for its first bidders.
  std::int32_t* cells = nullptr;
  /// Per worker of the OpenMP team that may select the floors
  /// (tier_apart), 2 x n_nodes: the items (value << 32 | weight) of the
  /// row it selects.
  std::int64_t* items = nullptr;
};

/// The calling worker's index in the team tier_apart forks (0 outside one).
PLACER_HD inline std::int32_t tier_twin_worker() {
#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// The twin entries a team's floors and first bidders read: a one-worker
/// program's where its chain laid them out for the tier's twins, else null.
template <class Team>
PLACER_HD tier_twin_rows* tier_twins_of([[maybe_unused]] Team const& t, [[maybe_unused]] tier_buffers const& b) {
  if constexpr (std::is_same_v<Team, seq_team>) {
    if (!t.team_wide && t.twins != nullptr && b.p.twins != nullptr && t.twins->twins == b.p.twins) return t.twins;
  }
  return nullptr;
}

/// Node n has an entry of its own from now on: it leaves its set (whose
/// entry moves to a member still in it, when any is).
PLACER_HD inline void tier_twin_single(tier_twin_rows& w, std::int32_t n) {
  std::int32_t const s = w.entry[n];
  w.single[n] = 1;
  w.weight[s] -= 1;
  std::int32_t const e = w.n_entries++;
  w.node[e] = n;
  w.weight[e] = 1;
  w.entry[n] = e;
  if (w.node[s] != n || w.weight[s] == 0) return;
  std::int32_t at = w.cursor[s];
  while (w.single[w.members[at]] != 0) ++at;  // weight > 0: a member is not single
  w.cursor[s] = at;
  w.node[s] = w.members[at];
}

/// The nodes stamped since the last update made single (one pass over the
/// stamps; few are new, so the one branch is taken rarely, where a branch
/// on the stamp alone would follow which nodes changed). Returns its steps.
PLACER_HD inline std::int64_t tier_twin_update(tier_twin_rows& w, std::int32_t const* stamp, std::int32_t n_nodes) {
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    if ((static_cast<std::uint32_t>(~stamp[n]) >> 31 & static_cast<std::uint32_t>(w.single[n] ^ 1)) != 0) {
      tier_twin_single(w, n);
    }
  }
  return n_nodes;
}

/// A chain's sets (host, at its start): every node in its twin's set,
/// each set's entry reading its first member; then the stamped nodes
/// single (tier_twin_update).
inline void tier_twin_setup(tier_twin_rows& w, std::int32_t const* twins, std::int32_t n_nodes,
                            std::int32_t const* stamp) {
  w.twins = twins;
  w.n_sets = 0;
  for (std::int32_t n = 0; n < n_nodes; ++n) {  // a root's set, in `entry` for now
    w.entry[n] = w.n_sets;
    w.n_sets += twins[n] == n ? 1 : 0;
  }
  for (std::int32_t s = 0; s <= w.n_sets; ++s) w.member_begin[s] = 0;
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    std::int32_t const s = w.entry[twins[n]];
    w.entry[n] = s;
    w.member_begin[s + 1] += 1;
  }
  for (std::int32_t s = 0; s < w.n_sets; ++s) {
    w.member_begin[s + 1] += w.member_begin[s];
    w.cursor[s] = w.member_begin[s];
    w.weight[s] = w.member_begin[s + 1] - w.member_begin[s];
  }
  for (std::int32_t n = 0; n < n_nodes; ++n) {  // in node order: the first member is the root
    std::int32_t const s = w.entry[n];
    w.members[w.cursor[s]++] = n;
    w.single[n] = 0;
  }
  for (std::int32_t s = 0; s < w.n_sets; ++s) {
    w.cursor[s] = w.member_begin[s];
    w.node[s] = w.members[w.cursor[s]];
  }
  w.n_entries = w.n_sets;
  tier_twin_update(w, stamp, n_nodes);
}

/// The want-th largest value (1-based, each counted its weight) of
/// items[0..n) (value << 32 | weight, values at least 0), reordering them;
/// requires 1 <= want <= their weight. A three-way quickselect.
PLACER_HD inline std::int32_t tier_kth_weighted(std::int64_t* items, std::int32_t n, std::int64_t want) {
  std::int32_t lo = 0, hi = n;
  while (true) {
    auto const pivot = static_cast<std::int32_t>(items[lo + (hi - lo) / 2] >> 32);
    std::int32_t above_end = lo, i = lo, below_begin = hi;
    std::int64_t above = 0, at = 0;
    while (i < below_begin) {
      std::int64_t const x = items[i];
      auto const v = static_cast<std::int32_t>(x >> 32);
      std::int64_t const weight = x & 0xffffffff;
      if (v > pivot) {
        above += weight;
        items[i++] = items[above_end];
        items[above_end++] = x;
      } else if (v < pivot) {
        items[i] = items[--below_begin];
        items[below_begin] = x;
      } else {
        at += weight;
        ++i;
      }
    }
    if (want <= above) {
      hi = above_end;
    } else if (want <= above + at) {
      return pivot;
    } else {
      want -= above + at;
      lo = below_begin;
    }
  }
}

/// What an entry of a floor costs in cells of a row read in order (its
/// cell is a load from anywhere in the row, which a pass over the row's
/// cells prefetches): the floors' steps for tier_apart.
inline constexpr std::int64_t tier_twin_gather = 4;

/// Entries from which tier_floor_twins takes a radix step.
inline constexpr std::int32_t tier_twin_radix_from = 64;

/// Row r's floor (tier_floor's value) from the entries: each entry's
/// cell counted its weight (kept in the row's `cells` for the first
/// bidders). More than tier_twin_radix_from feasible entries take the
/// radix step tier_floor takes (a histogram of the values' top eight bits,
/// here weighted) before the quickselect.
PLACER_HD inline std::int64_t tier_floor_twins(tier_buffers const& b, tier_twin_rows const& w, std::int32_t r,
                                               std::int32_t copies) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const* row = p.scores + static_cast<std::int64_t>(p.row_class[r]) * n_nodes;
  std::int32_t* cells = w.cells + static_cast<std::int64_t>(r) * 2 * n_nodes;
  std::int64_t* items = w.items + static_cast<std::int64_t>(tier_twin_worker()) * 2 * n_nodes;
  std::int32_t k = 0;
  std::int64_t total = 0;
  std::int32_t hi = 0;
  for (std::int32_t e = 0; e < w.n_entries; ++e) {
    std::int32_t const v = row[w.node[e]];
    bool const feasible = v >= 0 && w.weight[e] > 0;
    cells[e] = v;
    items[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<std::uint32_t>(v)) << 32) | w.weight[e];
    k += feasible ? 1 : 0;
    total += feasible ? w.weight[e] : 0;
    hi = max_of(hi, v);
  }
  if (total <= copies) return 0;
  std::int64_t want = static_cast<std::int64_t>(copies) + 1;
  if (k > tier_twin_radix_from) {
    std::int32_t shift = 0;
    while ((hi >> shift) >= 256) ++shift;
    std::int64_t hist[256] = {};
    for (std::int32_t i = 0; i < k; ++i) hist[(items[i] >> 32) >> shift] += items[i] & 0xffffffff;
    std::int32_t bucket = 255;
    while (want > hist[bucket]) want -= hist[bucket--];
    std::int32_t m = 0;
    for (std::int32_t i = 0; i < k; ++i) {  // in place: m <= i
      std::int64_t const x = items[i];
      items[m] = x;
      m += ((x >> 32) >> shift) == bucket ? 1 : 0;
    }
    k = m;
  }
  return tier_kth_weighted(items, k, want);
}

/// Round 0's bidders (tier_first_bidders' set, in node order) from the
/// entries' cells the floors kept: an entry bids where its cell reaches a
/// row's first price, and a node where its entry does.
PLACER_HD inline void tier_first_bidders_twins(tier_buffers const& b, tier_twin_rows const& w) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  for (std::int32_t e = 0; e < w.n_entries; ++e) w.hit[e] = 0;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    std::int32_t const at = tier_first_least(b, r);  // -1 where the row has no quota, and no floor was taken
    if (at < 0) continue;
    std::int32_t const* cells = w.cells + static_cast<std::int64_t>(r) * 2 * n_nodes;
    for (std::int32_t e = 0; e < w.n_entries; ++e) w.hit[e] |= static_cast<std::int32_t>(cells[e] >= at);
  }
  std::int32_t listed = 0;
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    b.todo[0][listed] = n;
    listed += w.hit[w.entry[n]];
  }
  b.ctl->todo_count[0] = listed;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
