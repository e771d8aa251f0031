#pragma once
// Host-side fit checks shared by preemption and reclaim: a node's free
// resources as the kernels see them, and how many replicas of one demand
// fit (the host twin of kernels/ops.hpp fit_count and node_admits). Used to
// screen victim sets cheaply; the chosen set is confirmed by the real core.

#include <placer/solver/constraints.hpp>
#include <placer/solver/model.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace placer::detail {

/// Free resources of one node as the kernels see them (unhealthy GPUs at 0).
struct node_free {
  std::vector<std::int32_t> gpu;
  std::int64_t cpu = 0;
  std::int64_t mem = 0;
};

inline node_free free_of(node const& nd) {
  node_free f;
  f.gpu.resize(nd.gpu_free_milli.size());
  for (std::size_t g = 0; g < f.gpu.size(); ++g) f.gpu[g] = nd.gpu_is_healthy(g) ? nd.gpu_free_milli[g] : 0;
  f.cpu = nd.cpu_milli_free;
  f.mem = nd.memory_mib_free;
  return f;
}

/// Gives one stopped replica back to a node view (work_state::give's rule).
inline void give_back(node const& nd, node_free& f, demand const& d, replica_placement const& rp) {
  for (auto g : rp.gpus) {
    if (g < 0 || g >= nd.gpu_count() || !nd.gpu_is_healthy(static_cast<std::size_t>(g))) continue;
    auto& x = f.gpu[static_cast<std::size_t>(g)];
    x = std::min(milli_per_gpu, x + rp.gpu_milli);
  }
  f.cpu = std::min(nd.cpu_milli_capacity, f.cpu + d.cpu_milli);
  f.mem = std::min(nd.memory_mib_capacity, f.mem + d.memory_mib);
}

/// The pool rule: the job's own pool or the shared one; training and
/// batch may borrow loanable inference nodes with loaning on.
inline bool pool_admits(node const& nd, job const& jb, bool loaning) {
  bool const inference = jb.kind == job_kind::inference;
  return nd.pool == pool_kind::shared || (inference ? nd.pool == pool_kind::inference : nd.pool == pool_kind::training) ||
         (!inference && loaning && nd.pool == pool_kind::inference && nd.loanable);
}

/// A GPU job needs GPUs of a model it allows.
inline bool model_admits(node const& nd, job const& jb) {
  if (jb.per_replica.gpus == 0) return true;
  if (nd.gpu_count() == 0 || nd.gpu_model.empty()) return false;
  return jb.allowed_gpu_models.empty() ||
         std::find(jb.allowed_gpu_models.begin(), jb.allowed_gpu_models.end(), nd.gpu_model) !=
             jb.allowed_gpu_models.end();
}

/// Node admits the job at all (kernels node_admits: health, node selector,
/// affinity and taints, pool rule with loaning, GPU model).
inline bool admits(node const& nd, job const& jb, bool loaning) {
  return nd.healthy && placer::admits(nd, jb.constraints) && pool_admits(nd, jb, loaning) && model_admits(nd, jb);
}

/// Replicas of demand d that fit given each GPU's free milli (gpu_free(k)
/// for k < gpus), free CPU and memory (kernels fit_count; admission is
/// checked separately).
template <class GpuFree>
std::int64_t fit_with(std::size_t gpus, GpuFree const& gpu_free, std::int64_t cpu, std::int64_t mem, demand const& d) {
  std::int64_t fit = std::int64_t{1} << 20;
  if (d.cpu_milli > 0) fit = std::min(fit, cpu / d.cpu_milli);
  if (d.memory_mib > 0) fit = std::min(fit, mem / d.memory_mib);
  if (d.gpus > 0) {
    std::int64_t g = 0;
    bool const share = d.gpu_milli < milli_per_gpu;
    for (std::size_t k = 0; k < gpus; ++k) {
      std::int64_t const x = gpu_free(k);
      g += share ? x / d.gpu_milli : (x == milli_per_gpu ? 1 : 0);
    }
    fit = std::min(fit, share ? g : g / d.gpus);
  }
  return std::max<std::int64_t>(fit, 0);
}

/// Replicas of d a node view holds.
inline std::int64_t fit_count(node_free const& f, demand const& d) {
  return fit_with(f.gpu.size(), [&](std::size_t k) { return f.gpu[k]; }, f.cpu, f.mem, d);
}

/// Replicas of d node nd holds as it is now (unhealthy GPUs count as full).
inline std::int64_t fit_free(node const& nd, demand const& d) {
  return fit_with(
      nd.gpu_free_milli.size(), [&](std::size_t k) { return nd.gpu_is_healthy(k) ? nd.gpu_free_milli[k] : 0; },
      nd.cpu_milli_free, nd.memory_mib_free, d);
}

/// Replicas of d node nd would hold empty (what its domain could hold at best).
inline std::int64_t fit_empty(node const& nd, demand const& d) {
  return fit_with(
      nd.gpu_free_milli.size(), [&](std::size_t k) { return nd.gpu_is_healthy(k) ? milli_per_gpu : 0; },
      nd.cpu_milli_capacity, nd.memory_mib_capacity, d);
}

}  // namespace placer::detail
