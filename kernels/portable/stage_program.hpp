#pragma once
// The round's data-parallel stages outside the tiers as one team program
// (issue 53, item 1): the host's node records unpacked, the statistics'
// sums, the score stage (the fragmentation table's entries on lanes, then
// a cell a thread) and the domain capacities of a set of classes, each
// asked for or not, in one launch where they were up to eight calls. A
// device backend runs it for its score call, its statistics and its
// capacities, and at the end of a chain's launch for what follows the
// chain (device_backend.hpp); the CPU backend keeps its Thrust stages
// (stages.hpp), whose ops this program calls index by index.
//
// The team is a grid: every loop splits its range over blocks() x size()
// workers (each_block, so the GPU model's CTA acts for every block in
// turn), and the phases meet at grid barriers only where a later one reads
// what an earlier one wrote (stage_grid_syncs):
//   0  the records (n_in)                                   a barrier if any
//   1  statistics, table entries, capacities                a barrier if there is a table
//   2  cells (every node's: twins of a state are scored, not copied)
// The sums (statistics, capacities) need no barrier: a warp adds up its
// workers' statistics by shuffles (Team::group_fold) and its first lane adds
// them into `stats`, and each part of a domain's nodes adds its fit counts
// into the domain's capacity, with atomics into zeroed sums. Integer sums,
// so the order of the adds does not matter: the same on every team.

#include "residency.hpp"
#include "stages.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

struct stage_call {
  // The host's records, unpacked first.
  node_state_view state;
  node_records in;
  std::int32_t n_in = 0;
  node_view nv;
  class_view cv;
  task_view tv;
  score_params p;
  // The statistics into *stats (zero on entry), a node's F on stats_lanes lanes.
  cluster_stats* stats = nullptr;
  std::int32_t stats_lanes = 1;
  // The score stage into out (null: none), its table's entries (frag_table_cells,
  // 0: none) on `lanes` lanes each in `table`.
  std::int32_t* out = nullptr;
  std::int64_t* table = nullptr;
  std::int64_t entries = 0;
  std::int32_t lanes = 1;
  // The capacities of classes of[0..k) (domain_capacity in stages.hpp) added
  // into cap (k x n_domains, zero on entry), a domain's nodes in `parts`
  // parts (domain_part_op's); k = 0 none.
  std::int32_t const* of = nullptr;
  std::int32_t k = 0;
  domain_index_view idx;
  std::int32_t parts = 1;
  std::int64_t* cap = nullptr;
};

/// Whether the call has capacities to sum.
PLACER_HD inline bool stage_caps(stage_call const& s) { return s.k > 0 && s.idx.n_domains > 0; }
/// The grid barriers the call meets (stage_program): the host counts them.
PLACER_HD inline std::int32_t stage_grid_syncs(stage_call const& s) {
  return (s.n_in > 0 ? 1 : 0) + (s.out != nullptr && s.entries > 0 ? 1 : 0);
}

/// f(i) for i in [0, count), split over the grid's workers.
template <class Team, class F>
PLACER_HD void stage_for(Team& t, std::int64_t count, F&& f) {
  std::int64_t const stride = static_cast<std::int64_t>(t.blocks()) * t.size();
  t.each_block([&](std::int32_t b) {
    for (std::int64_t i = static_cast<std::int64_t>(b) * t.size() + t.rank(); i < count; i += stride) {
      f(i);
      t.work(1);
    }
  });
}

/// The statistics: each worker's sums, a group's (a warp's) added up, its
/// first worker's added into *s.stats.
template <class Team>
PLACER_HD void stage_stats(Team& t, stage_call const& s) {
  node_stats_lanes_op const op{s.nv, s.tv, s.stats_lanes};
  cluster_stats mine{};
  stage_for(t, static_cast<std::int64_t>(s.nv.n_nodes) * s.stats_lanes,
            [&](std::int64_t i) { mine = stats_sum_op{}(mine, op(i)); });
  // A group's sum where the team is whole groups (a CTA of whole warps);
  // else every worker adds its own.
  std::int32_t const w = t.size() % t.group_size() == 0 ? t.group_size() : 1;
  std::int64_t* const into[] = {&s.stats->gpu_allocated_milli, &s.stats->gpu_schedulable_milli,
                                &s.stats->gpu_free_milli,      &s.stats->frag_milli_ppm,
                                &s.stats->gpu_nodes,           &s.stats->partly_allocated_nodes};
  std::int64_t const sums[] = {mine.gpu_allocated_milli, mine.gpu_schedulable_milli, mine.gpu_free_milli,
                               mine.frag_milli_ppm,      mine.gpu_nodes,             mine.partly_allocated_nodes};
  for (int f = 0; f < 6; ++f) {
    std::int64_t const v = t.group_fold(sums[f], w, fold_sum{});
    if (t.rank() % w == 0 && v != 0) t.fetch_add(into[f], v);
  }
}

/// Whether the call asks for anything.
PLACER_HD inline bool stage_asks(stage_call const& s) {
  return s.n_in > 0 || s.stats != nullptr || s.out != nullptr || stage_caps(s);
}

/// The capacities: part j of domain d's nodes for class of[c], i = (c *
/// n_domains + d) * parts + j (domain_part_op, its fit counts summed as it
/// goes), added into the domain's.
template <class Team>
PLACER_HD void stage_caps_add(Team& t, stage_call const& s) {
  std::int32_t const domains = s.idx.n_domains;
  stage_for(t, static_cast<std::int64_t>(s.k) * domains * s.parts, [&](std::int64_t i) {
    auto const cd = static_cast<std::int32_t>(i / s.parts);
    std::int32_t const c = s.of[cd / domains];
    std::int64_t const sum = domain_part_sum(s.idx, cd % domains, static_cast<std::int32_t>(i % s.parts), s.parts,
                                             [&](std::int32_t n) { return fit_count(s.nv, s.cv, c, n); });
    if (sum != 0) t.fetch_add(&s.cap[cd], sum);
  });
}

/// One call's stages (stage_call), its phases at grid barriers.
template <class Team>
PLACER_HD void stage_program(Team& t, stage_call const& s) {
  if (s.n_in > 0) {
    stage_for(t, s.n_in, [&](std::int64_t i) { unpack_record(s.state, s.in, static_cast<std::int32_t>(i)); });
    t.grid_sync();
  }
  auto const n = static_cast<std::int64_t>(s.nv.n_nodes);
  score_cell_op const op{s.nv, s.cv, s.tv, s.p};
  // 1: the statistics, the table's entries, the capacities.
  if (s.stats != nullptr && n > 0) stage_stats(t, s);
  bool const table = s.out != nullptr && s.entries > 0;
  if (table) stage_for(t, s.entries * s.lanes, [&](std::int64_t i) { frag_part_op{op, s.lanes, s.table}(i); });
  if (stage_caps(s)) stage_caps_add(t, s);
  if (table) t.grid_sync();
  // 2: the cells.
  if (s.out != nullptr) {
    score_cell_parts_op const cell{op, s.out, table ? s.table : nullptr, s.lanes};
    stage_for(t, n * s.cv.n_classes, [&](std::int64_t i) { cell(i); });
  }
}

/// A chain's launch: resident_chain_program, then in the same launch the
/// stages `after` asks of the state the chain leaves (the capacities of the
/// classes placed after it, the statistics after the round's last chain;
/// never records: the chain's came in with it).
template <class Team>
PLACER_HD void chain_launch_program(Team& t, tier_chain const& c, node_records const& in, std::int32_t n_in,
                                    node_records const& out, stage_call const& after) {
  resident_chain_program(t, c, in, n_in, out);  // ends at a barrier, or at the grid's where it packed records
  if (!stage_asks(after)) return;
  if (t.blocks() > 1 && out.capacity == 0) t.grid_sync();  // the leading CTA's last tier, seen by all
  stage_program(t, after);
}

/// The grid barriers chain_launch_program meets after the chain (counted
/// as a grid's whatever the tier grid; on one CTA they are its barriers).
PLACER_HD inline std::int32_t chain_after_grid_syncs(stage_call const& after) {
  return stage_asks(after) ? stage_grid_syncs(after) + 1 : 0;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
