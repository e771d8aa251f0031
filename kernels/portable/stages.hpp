#pragma once
// The round's data-parallel stages as Thrust calls templated on the
// execution policy, and their ops index by index. omp_backend.cpp runs the
// calls with thrust::omp::par (or cpp::par); a device backend runs the ops
// as one program (stage_program.hpp), on the GPU or its twin.

#include <placer/kernels/ops.hpp>
#include <placer/kernels/steps.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cstddef>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Cells of a round's fragmentation table (score_cell_op::frag_row): one
/// row per fragmentation state, or 0 when the score does not use one.
inline std::size_t frag_table_cells(node_view const& nv, class_view const& cv, task_view const& tv,
                                    score_params const& p) {
  if (nv.frag_slot == nullptr || !score_cell_op{nv, cv, tv, p}.column_fragmentation()) return 0;
  return static_cast<std::size_t>(nv.n_frag) * (static_cast<std::size_t>(cv.n_classes) + 1);
}

/// Fills the fragmentation table's row of state s from its first node.
struct frag_row_op {
  score_cell_op op;
  std::int64_t* table;
  PLACER_HD void operator()(std::int32_t s) const {
    op.frag_row(op.nv.frag_node[s], table + static_cast<std::int64_t>(s) * (op.cv.n_classes + 1));
  }
};

/// The same table on a backend of many slow threads (frag_entry): a
/// thread per entry and lane, each over its lane's slice of the task set
/// (task_slice), into part[e * lanes + lane]; an entry is the sum of its
/// lanes' parts. A row's F after each class is a chain of FGD sums over
/// the tasks: the H100 took 0.2 ms a call for the 10k round's 234 rows on
/// one CTA, and the H200 63 us for its entries a thread each (ncu,
/// bench/results/2026-11-28-h200-ncu-10k-820a062.txt).
struct frag_part_op {
  score_cell_op op;
  std::int32_t lanes;
  std::int64_t* part;
  PLACER_HD void operator()(std::int64_t i) const {
    std::int64_t const e = i / lanes;
    std::int32_t const w = op.cv.n_classes + 1;
    part[i] = op.frag_entry(op.nv.frag_node[e / w], static_cast<std::int32_t>(e % w),
                            task_slice(op.tv, static_cast<std::int32_t>(i % lanes), lanes));
  }
};

/// Lanes an item's FGD sums are split over (a fragmentation entry,
/// frag_part_op; a node's statistics, node_stats_lanes_op): the most, up
/// to a warp's 32, that keep the items' threads within `width`, a
/// device's resident threads (an H100's or H200's 132 multiprocessors of
/// 2,048: about 2^18). At least 1.
inline std::int32_t frag_lanes(std::size_t entries, std::size_t width = std::size_t{1} << 18) {
  std::int32_t lanes = 1;
  while (lanes < 32 && entries * static_cast<std::size_t>(lanes) * 2 <= width) lanes *= 2;
  return lanes;
}

/// Scores the column of each node that is its own twin (score_cell_op::twins;
/// every node when null), reading F from the fragmentation table when
/// there is one.
struct score_column_op {
  score_cell_op op;
  std::int32_t* out;
  std::int64_t const* table;  ///< null: none
  std::int32_t const* twin;   ///< score_cell_op::twins
  PLACER_HD void operator()(std::int32_t n) const {
    if (twin != nullptr && twin[n] != n) return;
    std::int64_t const* known =
        table != nullptr ? table + static_cast<std::int64_t>(op.nv.frag_slot[n]) * (op.cv.n_classes + 1) : nullptr;
    op.score_column(n, out, nullptr, op.cv.n_classes, every_cell{}, known);
  }
};

/// The same a thread per cell (class c on node n, i = c * n_nodes + n), F
/// before and after summed from the node's entries' parts (frag_part_op)
/// when there are any: a backend of many slow threads (stage_program.hpp),
/// whose thread per column took the H200 87 us a call at 10k (the same ncu
/// record). Every node's cells, twins of a state too: with F from the
/// table a cell is a few sums, cheaper than a grid barrier before copies.
struct score_cell_parts_op {
  score_cell_op op;
  std::int32_t* out;
  std::int64_t const* part;  ///< null: none
  std::int32_t lanes;
  PLACER_HD void operator()(std::int64_t i) const {
    auto const c = static_cast<std::int32_t>(i / op.nv.n_nodes);
    auto const n = static_cast<std::int32_t>(i % op.nv.n_nodes);
    if (part == nullptr) {
      out[i] = op.score(c, n);
      return;
    }
    std::int64_t const row = static_cast<std::int64_t>(op.nv.frag_slot[n]) * (op.cv.n_classes + 1);
    out[i] = op.score_known(c, n, entry(row + op.cv.n_classes), entry(row + c));
  }
  [[nodiscard]] PLACER_HD std::int64_t entry(std::int64_t e) const {
    std::int64_t sum = 0;
    for (std::int32_t l = 0; l < lanes; ++l) sum += part[e * lanes + l];
    return sum;
  }
};

/// Nodes a copy_cells_op item copies in one row.
inline constexpr std::int32_t copy_cells_run = 2048;

/// Copies the cells of a node's twin to the node, for the others: item i
/// a run of copy_cells_run nodes of one row, a row's runs in turn (the
/// rows' cells in order, where a node's column wrote a cache line of
/// every row).
struct copy_cells_op {
  std::int32_t n_nodes;
  std::int32_t runs;         ///< per row
  std::int32_t const* twin;  ///< score_cell_op::twins
  std::int32_t* out;
  PLACER_HD void operator()(std::int32_t i) const {
    std::int32_t* row = out + static_cast<std::int64_t>(i / runs) * n_nodes;
    std::int32_t const begin = (i % runs) * copy_cells_run;
    std::int32_t const end = min_of(n_nodes, begin + copy_cells_run);
    for (std::int32_t n = begin; n < end; ++n) row[n] = row[twin[n]];
  }
};

/// out[c * n_nodes + n] = score of class c on node n, or -1 if infeasible,
/// on a CPU backend: the fragmentation table (F before and after each
/// class's replica, once per fragmentation state, frag_table_cells entries)
/// into `table` a thread per row (frag_row_op), the column of each node
/// that scores for its twins a thread (score_column_op), then the copies.
/// Three calls (one fewer without a table, one fewer without twins). A device backend
/// runs the same in one launch, a cell a thread and the table's entries on
/// lanes (stage_program.hpp).
/// `columns` is scratch: the nodes whose column is scored, listed (the
/// twins' first nodes lie mostly in the first of the nodes: shared by
/// node, 72% of the 100k round's columns fell to the first of two workers).
template <class ExecPolicy>
void score_matrix(ExecPolicy&& exec, node_view const& nv, class_view const& cv, task_view const& tv,
                  score_params const& p, std::int32_t* out, std::int64_t* table, std::vector<std::int32_t>& columns,
                  step_counts& st) {
  std::int64_t const cells = static_cast<std::int64_t>(nv.n_nodes) * cv.n_classes;
  if (cells == 0) return;
  thrust::counting_iterator<std::int32_t> first(0);
  score_cell_op const op{nv, cv, tv, p};
  if (frag_table_cells(nv, cv, tv, p) == 0) table = nullptr;
  if (table != nullptr) {
    thrust::for_each(exec, first, first + nv.n_frag, frag_row_op{op, table});
    st.calls += 1;
  }
  std::int32_t const* twin = op.twins();
  columns.clear();
  for (std::int32_t n = 0; n < nv.n_nodes; ++n) {
    if (twin == nullptr || twin[n] == n) columns.push_back(n);
  }
  thrust::for_each(exec, columns.data(), columns.data() + columns.size(), score_column_op{op, out, table, twin});
  st.calls += 1;
  if (twin != nullptr) {
    std::int32_t const runs = (nv.n_nodes + copy_cells_run - 1) / copy_cells_run;
    thrust::for_each(exec, first, first + cv.n_classes * runs, copy_cells_op{nv.n_nodes, runs, twin, out});
    st.calls += 1;
  }
}

/// node_stats_op of node i / lanes, its fragmentation over lane i % lanes'
/// slice of the task set (task_slice) and its other sums on lane 0 alone:
/// the lanes' sum is the node's. A node's F is a chain of sums over the
/// tasks; the H200's reduction at 10k ran 1,280 of them a thread each on 5
/// CTAs (ncu, bench/results/2026-11-28-h200-ncu-10k-820a062.txt).
struct node_stats_lanes_op {
  node_view nv;
  task_view tv;
  std::int32_t lanes;
  PLACER_HD cluster_stats operator()(std::int64_t i) const {
    auto const lane = static_cast<std::int32_t>(i % lanes);
    cluster_stats s = node_stats_op{nv, task_slice(tv, lane, lanes)}(static_cast<std::int32_t>(i / lanes));
    if (lane == 0) return s;
    cluster_stats f{};
    f.frag_milli_ppm = s.frag_milli_ppm;
    return f;
  }
};

/// GAR, GFR and FGD fragmentation sums over all nodes in one reduction, a
/// node a thread (the device backends: stage_program.hpp, a node's F on
/// lanes). One call; the host reads the sums (the backend counts that wait).
template <class ExecPolicy>
cluster_stats reduce_cluster_stats(ExecPolicy&& exec, node_view const& nv, task_view const& tv, step_counts& st) {
  if (nv.n_nodes == 0) return cluster_stats{};
  st.calls += 1;
  thrust::counting_iterator<std::int32_t> first(0);
  return thrust::transform_reduce(exec, first, first + nv.n_nodes, node_stats_op{nv, tv}, cluster_stats{},
                                  stats_sum_op{});
}

/// reduce_cluster_stats of nodes whose fragmentation states
/// (node_view::frag_slot) are current, as build_matrices left them: F once
/// a state (state_frag, nv.n_frag entries of scratch), the nodes' sums then
/// reading it (the 100k round's 12,800 nodes are 731 states). The same
/// sums, counted as one call (reduce_cluster_stats': the round's steps are
/// the same on every backend).
template <class ExecPolicy>
cluster_stats reduce_cluster_stats_by_state(ExecPolicy&& exec, node_view const& nv, task_view const& tv,
                                            std::int64_t* state_frag, step_counts& st) {
  if (nv.n_nodes == 0) return cluster_stats{};
  st.calls += 1;
  thrust::counting_iterator<std::int32_t> first(0);
  thrust::transform(exec, first, first + nv.n_frag, state_frag, state_frag_op{nv, tv});
  return thrust::transform_reduce(exec, first, first + nv.n_nodes, node_stats_op{nv, tv, state_frag}, cluster_stats{},
                                  stats_sum_op{});
}

/// reduce_cluster_stats of the nodes reduce_cluster_stats_by_state took
/// (its state_frag, their free values then cpu_was and gpu_was), now: F
/// computed again only for the nodes whose free values moved
/// (node_stats_since_op). One call, as reduce_cluster_stats.
template <class ExecPolicy>
cluster_stats reduce_cluster_stats_since(ExecPolicy&& exec, node_view const& nv, task_view const& tv,
                                         std::int64_t const* state_frag, std::int64_t const* cpu_was,
                                         std::int32_t const* gpu_was, step_counts& st) {
  if (nv.n_nodes == 0) return cluster_stats{};
  st.calls += 1;
  thrust::counting_iterator<std::int32_t> first(0);
  return thrust::transform_reduce(exec, first, first + nv.n_nodes,
                                  node_stats_since_op{nv, tv, state_frag, cpu_was, gpu_was}, cluster_stats{},
                                  stats_sum_op{});
}

/// Replicas of each class of[0..k) every domain can hold: the fit count of
/// each (class, node) once (fit, k x n_nodes entries of scratch), then per
/// (class, domain) the sum over the domain's nodes (idx.begin) in `parts`
/// parts (part, k x n_domains x parts entries of scratch; many for a
/// backend of many slow threads) and the parts' sum. Three calls for the
/// whole set; the host reads the sums (the backend counts that wait).
template <class ExecPolicy>
void domain_capacity(ExecPolicy&& exec, node_view const& nv, class_view const& cv, std::int32_t const* of,
                     std::int32_t k, domain_index_view const& idx, std::int32_t parts, std::int32_t* fit,
                     std::int64_t* part, std::int64_t* cap, step_counts& st) {
  if (idx.n_domains == 0 || k == 0) return;
  thrust::counting_iterator<std::int32_t> first(0);
  thrust::transform(exec, first, first + k * nv.n_nodes, fit, fit_count_op{nv, cv, of});
  thrust::for_each(exec, first, first + k * idx.n_domains * parts, domain_part_op{idx, nv.n_nodes, parts, fit, part});
  thrust::for_each(exec, first, first + k * idx.n_domains, domain_sum_op{parts, part, cap});
  st.calls += 3;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
