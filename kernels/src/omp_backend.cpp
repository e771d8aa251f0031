// CPU backend: the portable stages run through Thrust's OpenMP system on the
// caller's host memory. Compiled by g++ with THRUST_DEVICE_SYSTEM=OMP.
#include "omp_backend.hpp"

#include "../portable/stages.hpp"
#include "../portable/tier_program.hpp"
#include <placer/topology/error.hpp>

#include <algorithm>
#include <omp.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

namespace placer::kernels {

namespace {
/// Below this much work a stage runs inline on the calling thread: an
/// OpenMP parallel region costs microseconds, and far more when the cores
/// are oversubscribed. The algorithms are deterministic, so the choice never
/// changes a result.
constexpr std::int64_t parallel_threshold = 1 << 16;
}  // namespace

omp_backend::omp_backend()
    : description_("cpu (OpenMP, " + std::to_string(omp_get_max_threads()) + " threads)") {
  // Start the OpenMP thread pool now, not inside the first round (it costs
  // milliseconds, which would land in that round's timing).
#pragma omp parallel
  { [[maybe_unused]] int const t = omp_get_thread_num(); }
}

void omp_backend::score(node_view const& nodes, class_view const& classes, task_view const& tasks,
                        score_params const& params, std::span<std::int32_t> out) {
  if (static_cast<std::int64_t>(nodes.n_nodes) * classes.n_classes < parallel_threshold / 16) {
    score_matrix(thrust::cpp::par, nodes, classes, tasks, params, out.data(), steps_);
  } else {
    score_matrix(thrust::omp::par, nodes, classes, tasks, params, out.data(), steps_);
  }
}

cluster_stats omp_backend::stats(node_view const& nodes, task_view const& tasks) {
  if (nodes.n_nodes < parallel_threshold / 64) return reduce_cluster_stats(thrust::cpp::par, nodes, tasks, steps_);
  return reduce_cluster_stats(thrust::omp::par, nodes, tasks, steps_);
}

void omp_backend::domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                                  domain_index_view const& idx, std::span<std::int64_t> cap) {
  auto const k = static_cast<std::int32_t>(of.size());
  domain_fit_.resize(of.size() * static_cast<std::size_t>(nodes.n_nodes));
  if (static_cast<std::int64_t>(k) * idx.n_entries < parallel_threshold) {
    kernels::domain_capacity(thrust::cpp::par, nodes, classes, of.data(), k, idx, domain_fit_.data(), cap.data(), steps_);
  } else {
    kernels::domain_capacity(thrust::omp::par, nodes, classes, of.data(), k, idx, domain_fit_.data(), cap.data(), steps_);
  }
}

tier_stats omp_backend::place_tier(tier_problem const& problem, std::vector<tier_placement>& out) {
  tier_heap_begin_.resize(static_cast<std::size_t>(problem.n_rows) + 1);
  std::int32_t const copies = tier_heap_begin(problem, tier_heap_begin_.data());
  // One pass sizes the arena, the second lays the buffers out in it.
  std::size_t bytes = 0;
  auto measure = [&](auto* tag, std::size_t n) -> decltype(tag) {
    bytes += (n * sizeof(*tag) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    return nullptr;
  };
  tier_buffers b{};
  tier_layout(b, problem.nodes.n_nodes, problem.n_rows, copies, measure);
  tier_arena_.resize(bytes / sizeof(std::max_align_t) + 1);
  auto* at = reinterpret_cast<unsigned char*>(tier_arena_.data());
  auto take = [&](auto* tag, std::size_t n) -> decltype(tag) {
    auto* p = reinterpret_cast<decltype(tag)>(at);
    at += (n * sizeof(*tag) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    return p;
  };
  tier_layout(b, problem.nodes.n_nodes, problem.n_rows, copies, take);
  tier_control ctl{};
  b.p = problem;
  b.heap_begin = tier_heap_begin_.data();
  b.ctl = &ctl;
  seq_team team;
  tier_program(team, b);
  count_tier(steps_);
  out.assign(b.out, b.out + ctl.placed);
  return {ctl.iterations, ctl.rounds, ctl.round_cap_hit != 0};
}

}  // namespace placer::kernels
