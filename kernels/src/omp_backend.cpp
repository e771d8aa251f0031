// CPU backend: the portable stages run through Thrust's OpenMP system on the
// caller's host memory. Compiled by g++ with THRUST_DEVICE_SYSTEM=OMP.
#include "omp_backend.hpp"

#include "../portable/stages.hpp"

#include <omp.h>
#include <thrust/system/omp/execution_policy.h>

namespace placer::kernels {

omp_backend::omp_backend()
    : description_("cpu (OpenMP, " + std::to_string(omp_get_max_threads()) + " threads)") {
  // Start the OpenMP thread pool now, not inside the first round (it costs
  // milliseconds, which would land in that round's timing).
#pragma omp parallel
  { [[maybe_unused]] int const t = omp_get_thread_num(); }
}

void omp_backend::score(node_view const& nodes, class_view const& classes, task_view const& tasks,
                        score_params const& params, std::span<std::int32_t> out) {
  score_matrix(thrust::omp::par, nodes, classes, tasks, params, out.data());
}

cluster_stats omp_backend::stats(node_view const& nodes, task_view const& tasks) {
  return reduce_cluster_stats(thrust::omp::par, nodes, tasks);
}

}  // namespace placer::kernels
