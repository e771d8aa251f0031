#pragma once
// Small tier-program instances for the tier tests (tests/kernels/
// tier_test.cpp, and tier_team_tsan.cpp, which clang builds on its own):
// a cluster, classes, a typical task set and rows, owning every array the
// views point to. Header only, no link-time dependency.
#include <placer/kernels/ops.hpp>
#include <placer/kernels/tier.hpp>

#include <algorithm>
#include <random>
#include <vector>

namespace placer::testing_support {

using namespace placer::kernels;

/// A small cluster and rows, owning every array the views point to.
struct tier_instance {
  std::int32_t nodes = 0, classes = 0;
  std::vector<std::int64_t> cpu_free, cpu_capacity, mem_free;
  std::vector<std::int32_t> model, gpu_begin, gpu_free, gpu_capacity, scarcity;
  std::vector<std::uint8_t> pool, flags, gpu_island;
  std::vector<std::int32_t> c_gpus, c_milli;
  std::vector<std::int64_t> c_cpu, c_mem;
  std::vector<std::uint64_t> c_models;
  std::vector<std::uint8_t> c_pool, c_loan, c_any;
  std::vector<std::int32_t> t_gpus, t_milli, t_freq;
  std::vector<std::int64_t> t_cpu;
  std::vector<std::uint64_t> t_models;
  std::vector<std::int32_t> scores, row_class, demand;

  [[nodiscard]] node_view node_v() const {
    node_view v;
    v.n_nodes = nodes;
    v.n_gpus = static_cast<std::int32_t>(gpu_free.size());
    v.cpu_free = cpu_free.data();
    v.cpu_capacity = cpu_capacity.data();
    v.mem_free = mem_free.data();
    v.model = model.data();
    v.pool = pool.data();
    v.flags = flags.data();
    v.gpu_begin = gpu_begin.data();
    v.gpu_free = gpu_free.data();
    v.gpu_capacity = gpu_capacity.data();
    v.gpu_island = gpu_island.data();
    v.scarcity = scarcity.data();
    return v;
  }
  [[nodiscard]] class_view class_v() const {
    class_view v;
    v.n_classes = classes;
    v.gpus = c_gpus.data();
    v.milli = c_milli.data();
    v.cpu = c_cpu.data();
    v.mem = c_mem.data();
    v.model_mask = c_models.data();
    v.pool_mask = c_pool.data();
    v.loan_ok = c_loan.data();
    v.any_model = c_any.data();
    return v;
  }
  [[nodiscard]] task_view task_v() const {
    task_view v;
    v.n_tasks = static_cast<std::int32_t>(t_gpus.size());
    v.gpus = t_gpus.data();
    v.milli = t_milli.data();
    v.cpu = t_cpu.data();
    v.model_mask = t_models.data();
    v.freq_ppm = t_freq.data();
    v.share_cpu = mean_share_cpu(v);
    return v;
  }
  tier_problem problem(std::int32_t max_iterations, std::int64_t eps) {
    tier_problem p;
    p.nodes = node_v();
    p.classes = class_v();
    p.tasks = task_v();
    p.gpu_free = gpu_free.data();
    p.cpu_free = cpu_free.data();
    p.mem_free = mem_free.data();
    p.scores = scores.data();
    p.n_rows = static_cast<std::int32_t>(row_class.size());
    p.row_class = row_class.data();
    p.demand = demand.data();
    p.max_iterations = max_iterations;
    p.eps = eps;
    return p;
  }
  void score_all() {
    score_cell_op const op{node_v(), class_v(), task_v(), score_params{}};
    scores.assign(static_cast<std::size_t>(classes) * nodes, 0);
    for (std::int32_t n = 0; n < nodes; ++n) op.score_column(n, scores.data());
  }
};

/// Nodes of 4 or 8 GPUs, partly used, two models; classes of whole GPUs,
/// shares and CPU only; a typical task set.
inline tier_instance random_cluster(std::mt19937_64& rng, int max_nodes, int max_classes) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  tier_instance t;
  t.nodes = pick(1, max_nodes);
  t.gpu_begin.push_back(0);
  for (int n = 0; n < t.nodes; ++n) {
    int const g = pick(0, 1) == 0 ? 4 : 8;
    t.cpu_capacity.push_back(g * 16000);
    t.cpu_free.push_back(g * 16000 * pick(3, 10) / 10);
    t.mem_free.push_back(std::int64_t{g} * 65536 * pick(3, 10) / 10);
    t.model.push_back(pick(0, 1));
    t.pool.push_back(pool_bit_shared);
    t.flags.push_back(node_flag_healthy);
    for (int i = 0; i < g; ++i) {
      int const r = pick(0, 9);
      t.gpu_free.push_back(r < 6 ? 1000 : r < 8 ? 0 : pick(1, 9) * 100);
      t.gpu_island.push_back(static_cast<std::uint8_t>(i * 2 / g));
    }
    t.gpu_begin.push_back(static_cast<std::int32_t>(t.gpu_free.size()));
    t.gpu_capacity.push_back(g * 1000);
    t.scarcity.push_back(0);
  }
  t.classes = pick(1, max_classes);
  for (int c = 0; c < t.classes; ++c) {
    int const shape = pick(0, 3);
    t.c_gpus.push_back(shape == 0 ? 0 : shape == 1 ? 1 : pick(1, 4));
    t.c_milli.push_back(shape == 1 ? pick(1, 9) * 100 : 1000);
    t.c_cpu.push_back(std::int64_t{pick(1, 8)} * 1000);
    t.c_mem.push_back(std::int64_t{pick(1, 16)} * 1024);
    t.c_models.push_back(pick(0, 2) == 0 ? 1U << pick(0, 1) : 3U);
    t.c_pool.push_back(pool_bit_training | pool_bit_shared);
    t.c_loan.push_back(0);
    t.c_any.push_back(t.c_models.back() == 3U ? 1 : 0);
  }
  for (int m : {0, 1, 2}) {
    t.t_gpus.push_back(m == 0 ? 1 : m == 1 ? 1 : 2);
    t.t_milli.push_back(m == 0 ? 500 : 1000);
    t.t_cpu.push_back(4000);
    t.t_models.push_back(3U);
    t.t_freq.push_back(m == 0 ? 500000 : 250000);
  }
  return t;
}

/// `templates` random nodes, each repeated `copies` times (node k is a twin
/// of node k % templates).
inline tier_instance twin_cluster(std::mt19937_64& rng, int templates, int copies, int max_classes) {
  tier_instance const base = random_cluster(rng, templates, max_classes);
  tier_instance t = base;
  t.nodes = base.nodes * copies;
  t.cpu_free.clear(), t.cpu_capacity.clear(), t.mem_free.clear(), t.model.clear(), t.pool.clear(), t.flags.clear();
  t.gpu_begin.assign(1, 0), t.gpu_free.clear(), t.gpu_island.clear(), t.gpu_capacity.clear(), t.scarcity.clear();
  for (int k = 0; k < t.nodes; ++k) {
    auto const n = static_cast<std::size_t>(k % base.nodes);
    t.cpu_free.push_back(base.cpu_free[n]);
    t.cpu_capacity.push_back(base.cpu_capacity[n]);
    t.mem_free.push_back(base.mem_free[n]);
    t.model.push_back(base.model[n]);
    t.pool.push_back(base.pool[n]);
    t.flags.push_back(base.flags[n]);
    for (auto g = base.gpu_begin[n]; g < base.gpu_begin[n + 1]; ++g) {
      t.gpu_free.push_back(base.gpu_free[static_cast<std::size_t>(g)]);
      t.gpu_island.push_back(base.gpu_island[static_cast<std::size_t>(g)]);
    }
    t.gpu_begin.push_back(static_cast<std::int32_t>(t.gpu_free.size()));
    t.gpu_capacity.push_back(base.gpu_capacity[n]);
    t.scarcity.push_back(base.scarcity[n]);
  }
  return t;
}

}  // namespace placer::testing_support
