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

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Scores the column of each node that is the first of its state
/// (node_view::same_as; every node when null).
struct score_column_op {
  score_cell_op op;
  std::int32_t* out;
  PLACER_HD void operator()(std::int32_t n) const {
    if (op.nv.same_as == nullptr || op.nv.same_as[n] == n) op.score_column(n, out);
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
/// one column per node state, then the copies. Two calls (one without
/// same_as); the host reads the matrix (one wait).
template <class ExecPolicy>
void score_matrix(ExecPolicy&& exec, node_view const& nv, class_view const& cv, task_view const& tv,
                  score_params const& p, std::int32_t* out, step_counts& st) {
  if (static_cast<std::int64_t>(nv.n_nodes) * cv.n_classes == 0) return;
  thrust::counting_iterator<std::int32_t> first(0);
  thrust::for_each(exec, first, first + nv.n_nodes, score_column_op{score_cell_op{nv, cv, tv, p}, out});
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
/// (class, domain) the sum over the domain's nodes (idx.begin). Two calls
/// for the whole set; the host reads the sums (one wait).
template <class ExecPolicy>
void domain_capacity(ExecPolicy&& exec, node_view const& nv, class_view const& cv, std::int32_t const* of,
                     std::int32_t k, domain_index_view const& idx, std::int32_t* fit, std::int64_t* cap,
                     step_counts& st) {
  if (idx.n_domains == 0 || k == 0) return;
  thrust::counting_iterator<std::int32_t> first(0);
  thrust::transform(exec, first, first + k * nv.n_nodes, fit, fit_count_op{nv, cv, of});
  thrust::for_each(exec, first, first + k * idx.n_domains, domain_sum_op{idx, nv.n_nodes, fit, cap});
  st.calls += 2;
  st.waits += 1;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
