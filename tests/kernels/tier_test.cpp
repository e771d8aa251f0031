// The tier program (kernels/portable/tier_program.hpp) against brute force:
// one iteration is the assignment of at most one replica per node, rows
// bounded by their demand, maximising the total value. With values scaled
// by (nodes + 1), epsilon = 1 is below the values' resolution, so the
// program must find the exact optimum. Then whole tiers: every placement
// fits, no node takes two replicas in one iteration, rows never exceed
// their demand, the score matrix stays current. And the CPU/CUDA parity
// (GPU only).
#include <placer/kernels/backend.hpp>
#include <placer/kernels/ops.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace placer::kernels {
namespace {

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
tier_instance random_cluster(std::mt19937_64& rng, int max_nodes, int max_classes) {
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

/// Brute force over one iteration: each node takes nothing or one replica
/// of a row with demand left; maximises the sum of the values.
std::int64_t best_value(tier_instance const& t, std::vector<std::int64_t> const& value, std::int32_t node,
                        std::vector<std::int32_t>& left) {
  if (node == t.nodes) return 0;
  std::int64_t best = best_value(t, value, node + 1, left);
  for (std::size_t r = 0; r < t.row_class.size(); ++r) {
    std::int64_t const v = value[r * static_cast<std::size_t>(t.nodes) + static_cast<std::size_t>(node)];
    if (left[r] == 0 || v < 0) continue;
    --left[r];
    best = std::max(best, v + best_value(t, value, node + 1, left));
    ++left[r];
  }
  return best;
}

TEST(TierProgram, OneIterationIsOptimalOnSmallInstances) {
  auto b = make_backend(backend_kind::cpu);
  std::mt19937_64 rng(11);
  int contested = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    SCOPED_TRACE("instance " + std::to_string(iter));
    tier_instance t = random_cluster(rng, 7, 4);
    t.score_all();
    // Rows: distinct classes with a demand each; values scaled so that the
    // program's epsilon (1) cannot change the optimum.
    std::uniform_int_distribution<int> d(1, 3);
    for (std::int32_t c = 0; c < t.classes; ++c) {
      if (d(rng) == 3 && c > 0) continue;
      t.row_class.push_back(c);
      t.demand.push_back(d(rng));
    }
    std::int64_t const scale = t.nodes + 1;
    for (auto& s : t.scores) s = s < 0 ? -1 : static_cast<std::int32_t>(s / 64 * scale);
    std::vector<std::int64_t> value;  // row x node, the brute force's value: the score (scaled) + 1
    for (auto c : t.row_class) {
      for (std::int32_t n = 0; n < t.nodes; ++n) {
        std::int32_t const s = t.scores[static_cast<std::size_t>(c) * t.nodes + n];
        value.push_back(s < 0 ? -1 : s + 1);
      }
    }
    std::vector<std::int32_t> left = t.demand;
    std::int64_t const best = best_value(t, value, 0, left);
    std::vector<tier_placement> got;
    auto const st = b->place_tier(t.problem(1, 1), got);
    ASSERT_EQ(st.iterations, 1);
    ASSERT_FALSE(st.round_cap_hit);
    std::int64_t total = 0;
    std::vector<int> per_node(static_cast<std::size_t>(t.nodes), 0);
    std::vector<int> per_row(t.row_class.size(), 0);
    for (auto const& p : got) {
      ASSERT_GE(p.row, 0);
      ASSERT_LT(p.row, static_cast<int>(t.row_class.size()));
      std::int64_t const v = value[static_cast<std::size_t>(p.row) * t.nodes + p.node];
      ASSERT_GE(v, 0) << "placed on an infeasible cell";
      total += v;
      ++per_node[static_cast<std::size_t>(p.node)];
      ++per_row[static_cast<std::size_t>(p.row)];
    }
    for (auto k : per_node) EXPECT_LE(k, 1);
    for (std::size_t r = 0; r < per_row.size(); ++r) EXPECT_LE(per_row[r], t.demand[r]);
    // Within one epsilon (1) per placed replica, and values are multiples
    // of (nodes + 1) plus 1: equal in the scaled part.
    EXPECT_EQ(total / scale, best / scale) << "program " << total << ", optimum " << best;
    EXPECT_LE(total, best);
    contested += t.row_class.size() > 1 && got.size() < static_cast<std::size_t>(t.nodes) ? 1 : 0;
  }
  EXPECT_GT(contested, 200) << "too few instances where rows compete";
}

TEST(TierProgram, WholeTiersFitAndKeepTheMatrixCurrent) {
  auto b = make_backend(backend_kind::cpu);
  std::mt19937_64 rng(12);
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE("instance " + std::to_string(iter));
    tier_instance t = random_cluster(rng, 40, 6);
    t.score_all();
    for (std::int32_t c = 0; c < t.classes; ++c) {
      t.row_class.push_back(c);
      t.demand.push_back(std::uniform_int_distribution<int>(1, 30)(rng));
    }
    tier_instance const before = t;
    std::vector<tier_placement> got;
    std::int64_t const eps = iter % 2 == 0 ? 50 : 200;  // the solver uses ~200 (1/1024 of the largest score)
    auto const st = b->place_tier(t.problem(1 << 30, eps), got);
    ASSERT_FALSE(st.round_cap_hit);
    // Replay the placements in (iteration, node) order on the state before:
    // each fits, takes exactly the GPUs the program reported, and no node
    // takes two in one iteration.
    std::sort(got.begin(), got.end(), [](auto const& x, auto const& y) {
      return x.iteration != y.iteration ? x.iteration < y.iteration : x.node < y.node;
    });
    tier_instance replay = before;
    std::vector<int> per_row(t.row_class.size(), 0);
    for (std::size_t k = 0; k < got.size(); ++k) {
      auto const& p = got[k];
      if (k > 0) {
        ASSERT_FALSE(got[k - 1].iteration == p.iteration && got[k - 1].node == p.node);
      }
      std::int32_t const c = t.row_class[static_cast<std::size_t>(p.row)];
      ASSERT_TRUE(cell_feasible(replay.node_v(), replay.class_v(), c, p.node)) << "placement " << k;
      std::int32_t const g0 = replay.gpu_begin[static_cast<std::size_t>(p.node)];
      std::int32_t const g = replay.gpu_begin[static_cast<std::size_t>(p.node) + 1] - g0;
      std::vector<std::int32_t> f(replay.gpu_free.begin() + g0, replay.gpu_free.begin() + g0 + g);
      ASSERT_TRUE(take_gpus(replay.gpu_free.data() + g0, g, replay.c_gpus[static_cast<std::size_t>(c)],
                            replay.c_milli[static_cast<std::size_t>(c)], replay.gpu_island.data() + g0));
      std::uint64_t mask = 0;
      for (std::int32_t i = 0; i < g; ++i) mask |= replay.gpu_free[g0 + i] != f[i] ? (std::uint64_t{1} << i) : 0;
      EXPECT_EQ(mask, p.gpus) << "placement " << k;
      replay.cpu_free[static_cast<std::size_t>(p.node)] -= replay.c_cpu[static_cast<std::size_t>(c)];
      replay.mem_free[static_cast<std::size_t>(p.node)] -= replay.c_mem[static_cast<std::size_t>(c)];
      ++per_row[static_cast<std::size_t>(p.row)];
    }
    for (std::size_t r = 0; r < per_row.size(); ++r) EXPECT_LE(per_row[r], t.demand[r]);
    EXPECT_EQ(replay.gpu_free, t.gpu_free);
    EXPECT_EQ(replay.cpu_free, t.cpu_free);
    EXPECT_EQ(replay.mem_free, t.mem_free);
    // The program stops only when no row with demand left has a feasible cell.
    for (std::size_t r = 0; r < per_row.size(); ++r) {
      if (per_row[r] == t.demand[r]) continue;
      for (std::int32_t n = 0; n < t.nodes; ++n) {
        EXPECT_FALSE(cell_feasible(t.node_v(), t.class_v(), t.row_class[r], n)) << "row " << r << " could take node " << n;
      }
    }
    // And the matrix it leaves is the matrix of the state it leaves.
    std::vector<std::int32_t> const kept = t.scores;
    t.score_all();
    EXPECT_EQ(kept, t.scores);
  }
}

/// `templates` random nodes, each repeated `copies` times (node k is a twin
/// of node k % templates).
tier_instance twin_cluster(std::mt19937_64& rng, int templates, int copies, int max_classes) {
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

// Twins share re-scored columns: with state labels (right ones, and wrong
// ones that the program must catch by comparing states) a tier places the
// same replicas and leaves the same matrix and node state as without.
TEST(TierProgram, StateLabelsShareColumnsExactly) {
  auto b = make_backend(backend_kind::cpu);
  std::mt19937_64 rng(14);
  std::int64_t shared = 0;
  for (int iter = 0; iter < 200; ++iter) {
    SCOPED_TRACE("instance " + std::to_string(iter));
    tier_instance t = twin_cluster(rng, 6, 8, 6);
    t.score_all();
    for (std::int32_t c = 0; c < t.classes; ++c) {
      t.row_class.push_back(c);
      t.demand.push_back(std::uniform_int_distribution<int>(1, 40)(rng));
    }
    std::vector<std::int32_t> label(static_cast<std::size_t>(t.nodes));
    int const kind = iter % 3;  // 0: twins (the first of each; 8 copies), 1: all one label, 2: random labels
    for (std::int32_t n = 0; n < t.nodes; ++n) {
      label[static_cast<std::size_t>(n)] =
          kind == 0   ? n % (t.nodes / 8)
          : kind == 1 ? 0
                      : std::uniform_int_distribution<std::int32_t>(0, t.nodes - 1)(rng);
    }
    tier_instance u = t;
    std::vector<tier_placement> a, c;
    std::vector<std::int32_t> kept = label;
    b->place_tier(t.problem(1 << 30, 200), a);
    auto pu = u.problem(1 << 30, 200);
    pu.state = label.data();
    b->place_tier(pu, c);
    auto order = [](auto const& x, auto const& y) {
      return x.iteration != y.iteration ? x.iteration < y.iteration : x.node < y.node;
    };
    std::sort(a.begin(), a.end(), order);
    std::sort(c.begin(), c.end(), order);
    ASSERT_EQ(a.size(), c.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].node, c[k].node);
      ASSERT_EQ(a[k].row, c[k].row);
      ASSERT_EQ(a[k].gpus, c[k].gpus);
    }
    ASSERT_EQ(t.scores, u.scores);
    ASSERT_EQ(t.gpu_free, u.gpu_free);
    ASSERT_EQ(t.cpu_free, u.cpu_free);
    // Winners that took a twin's label copied its column (a label is a
    // hint: the twin may have changed again in a later iteration).
    for (std::int32_t n = 0; n < t.nodes; ++n) {
      auto const l = label[static_cast<std::size_t>(n)];
      shared += l != kept[static_cast<std::size_t>(n)] && l != n ? 1 : 0;
    }
  }
  EXPECT_GT(shared, 500) << "too few columns copied from a twin";
}

TEST(TierParity, CudaMatchesCpu) {
  auto const why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  auto cpu = make_backend(backend_kind::cpu);
  auto gpu = make_backend(backend_kind::cuda);
  std::mt19937_64 rng(13);
  for (int iter = 0; iter < 300; ++iter) {
    tier_instance t = random_cluster(rng, iter < 150 ? 12 : 600, 8);
    t.score_all();
    for (std::int32_t c = 0; c < t.classes; ++c) {
      t.row_class.push_back(c);
      t.demand.push_back(std::uniform_int_distribution<int>(1, iter < 150 ? 6 : 200)(rng));
    }
    tier_instance u = t;
    std::vector<tier_placement> a, b;
    // Every other instance with state labels (partly wrong: n % 7).
    std::vector<std::int32_t> la(static_cast<std::size_t>(t.nodes));
    for (std::int32_t n = 0; n < t.nodes; ++n) la[static_cast<std::size_t>(n)] = n % 7;
    std::vector<std::int32_t> lb = la;
    auto pa = t.problem(1 << 30, 200);
    auto pb = u.problem(1 << 30, 200);
    if (iter % 2 == 1) {
      pa.state = la.data();
      pb.state = lb.data();
    }
    auto const sa = cpu->place_tier(pa, a);
    auto const sb = gpu->place_tier(pb, b);
    ASSERT_EQ(la, lb) << "instance " << iter;
    auto order = [](auto const& x, auto const& y) {
      return x.iteration != y.iteration ? x.iteration < y.iteration : x.node < y.node;
    };
    std::sort(a.begin(), a.end(), order);
    std::sort(b.begin(), b.end(), order);
    ASSERT_EQ(sa.iterations, sb.iterations) << "instance " << iter;
    ASSERT_EQ(sa.rounds, sb.rounds) << "instance " << iter;
    ASSERT_EQ(a.size(), b.size()) << "instance " << iter;
    for (std::size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].node, b[k].node) << "instance " << iter << " placement " << k;
      ASSERT_EQ(a[k].row, b[k].row) << "instance " << iter << " placement " << k;
      ASSERT_EQ(a[k].gpus, b[k].gpus) << "instance " << iter << " placement " << k;
    }
    ASSERT_EQ(t.scores, u.scores) << "instance " << iter;
    ASSERT_EQ(t.gpu_free, u.gpu_free) << "instance " << iter;
  }
}

}  // namespace
}  // namespace placer::kernels
