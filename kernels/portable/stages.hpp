#pragma once
// The round's data-parallel stages as Thrust calls templated on the
// execution policy. omp_backend.cpp instantiates them with thrust::omp::par,
// cuda_backend.cu with thrust::cuda::par.on(stream); the views must point to
// memory that policy can read.

#include <placer/kernels/ops.hpp>
#include <placer/kernels/steps.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cstddef>

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

/// The same table an entry at a time (frag_entry): a thread per entry
/// instead of per row, for a backend of many slow threads (a row's F after
/// each class is a chain of FGD sums; the H100 took 0.2 ms a call for the
/// 10k round's 234 rows on one CTA).
struct frag_entry_op {
  score_cell_op op;
  std::int64_t* table;
  PLACER_HD void operator()(std::int32_t i) const {
    std::int32_t const w = op.cv.n_classes + 1;
    table[i] = op.frag_entry(op.nv.frag_node[i / w], i % w);
  }
};

/// Scores the column of each node that is the first of its state
/// (node_view::same_as; every node when null), reading F from the
/// fragmentation table when there is one.
struct score_column_op {
  score_cell_op op;
  std::int32_t* out;
  std::int64_t const* table;  ///< null: none
  PLACER_HD void operator()(std::int32_t n) const {
    if (op.nv.same_as != nullptr && op.nv.same_as[n] != n) return;
    std::int64_t const* known =
        table != nullptr ? table + static_cast<std::int64_t>(op.nv.frag_slot[n]) * (op.cv.n_classes + 1) : nullptr;
    op.score_column(n, out, nullptr, op.cv.n_classes, every_cell{}, known);
  }
};

/// Copies the column of a node's state to the node, for the others.
struct copy_column_op {
  node_view nv;
  std::int32_t n_classes;
  std::int32_t* out;
  PLACER_HD void operator()(std::int32_t n) const {
    std::int32_t const from = nv.same_as[n];
    if (from == n) return;
    for (std::int32_t c = 0; c < n_classes; ++c) {
      out[static_cast<std::int64_t>(c) * nv.n_nodes + n] = out[static_cast<std::int64_t>(c) * nv.n_nodes + from];
    }
  }
};

/// out[c * n_nodes + n] = score of class c on node n, or -1 if infeasible:
/// the fragmentation table (F before and after each class's replica, once
/// per fragmentation state, into `table`, frag_table_cells entries; a
/// thread per row, or with `by_entry` per entry), one column per node
/// state, then the copies. Three calls (one fewer without a table, one
/// fewer without same_as); the host reads the matrix (one wait).
template <class ExecPolicy>
void score_matrix(ExecPolicy&& exec, node_view const& nv, class_view const& cv, task_view const& tv,
                  score_params const& p, std::int32_t* out, std::int64_t* table, bool by_entry, step_counts& st) {
  if (static_cast<std::int64_t>(nv.n_nodes) * cv.n_classes == 0) return;
  thrust::counting_iterator<std::int32_t> first(0);
  score_cell_op const op{nv, cv, tv, p};
  std::size_t const cells = frag_table_cells(nv, cv, tv, p);
  if (cells == 0) table = nullptr;
  if (table != nullptr && by_entry) {
    thrust::for_each(exec, first, first + static_cast<std::int64_t>(cells), frag_entry_op{op, table});
    st.calls += 1;
  } else if (table != nullptr) {
    thrust::for_each(exec, first, first + nv.n_frag, frag_row_op{op, table});
    st.calls += 1;
  }
  thrust::for_each(exec, first, first + nv.n_nodes, score_column_op{op, out, table});
  st.calls += 1;
  if (nv.same_as != nullptr) {
    thrust::for_each(exec, first, first + nv.n_nodes, copy_column_op{nv, cv.n_classes, out});
    st.calls += 1;
  }
  st.waits += 1;
}

/// GAR, GFR and FGD fragmentation sums over all nodes in one reduction.
/// One call, and the host reads the sums (one wait).
template <class ExecPolicy>
cluster_stats reduce_cluster_stats(ExecPolicy&& exec, node_view const& nv, task_view const& tv, step_counts& st) {
  if (nv.n_nodes == 0) return cluster_stats{};
  thrust::counting_iterator<std::int32_t> first(0);
  st.calls += 1;
  st.waits += 1;
  return thrust::transform_reduce(exec, first, first + nv.n_nodes, node_stats_op{nv, tv}, cluster_stats{},
                                  stats_sum_op{});
}

/// Replicas of each class of[0..k) every domain can hold: the fit count of
/// each (class, node) once (fit, k x n_nodes entries of scratch), then per
/// (class, domain) the sum over the domain's nodes (idx.begin) in `parts`
/// parts (part, k x n_domains x parts entries of scratch; many for a
/// backend of many slow threads) and the parts' sum. Three calls for the
/// whole set; the host reads the sums (one wait).
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
  st.waits += 1;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
