#pragma once
// The round's data-parallel stages as Thrust calls templated on the
// execution policy. omp_backend.cpp instantiates them with thrust::omp::par,
// cuda_backend.cu with thrust::cuda::par.on(stream); the views must point to
// memory that policy can read.

#include <placer/kernels/ops.hpp>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/reduce.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// out[c * n_nodes + n] = score of class c on node n, or -1 if infeasible.
template <class ExecPolicy>
void score_matrix(ExecPolicy&& exec, node_view const& nv, class_view const& cv, task_view const& tv,
                  score_params const& p, std::int32_t* out) {
  auto const cells = static_cast<std::int64_t>(nv.n_nodes) * cv.n_classes;
  if (cells == 0) return;
  thrust::counting_iterator<std::int64_t> first(0);
  thrust::transform(exec, first, first + cells, out, score_cell_op{nv, cv, tv, p});
}

/// GAR, GFR and FGD fragmentation sums over all nodes in one reduction.
template <class ExecPolicy>
cluster_stats reduce_cluster_stats(ExecPolicy&& exec, node_view const& nv, task_view const& tv) {
  if (nv.n_nodes == 0) return cluster_stats{};
  thrust::counting_iterator<std::int32_t> first(0);
  return thrust::transform_reduce(exec, first, first + nv.n_nodes, node_stats_op{nv, tv}, cluster_stats{},
                                  stats_sum_op{});
}

/// Replicas of class c each domain can hold: a segmented sum (reduce by
/// domain key) of per-node fit counts. Writes up to n_domains (key, sum)
/// pairs into out_domain / out_cap and returns how many.
template <class ExecPolicy>
std::int32_t domain_capacity(ExecPolicy&& exec, node_view const& nv, class_view const& cv, std::int32_t c,
                             domain_index_view const& idx, std::int32_t* out_domain, std::int64_t* out_cap) {
  if (idx.n_entries == 0) return 0;
  thrust::counting_iterator<std::int32_t> first(0);
  auto fits = thrust::make_transform_iterator(first, fit_count_op{nv, cv, c, idx.node});
  auto const ends = thrust::reduce_by_key(exec, idx.domain, idx.domain + idx.n_entries, fits, out_domain, out_cap);
  return static_cast<std::int32_t>(ends.first - out_domain);
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
