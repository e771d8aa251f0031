#pragma once
// Small tier-program instances for the tier tests (tests/kernels/
// tier_test.cpp, and tier_team_tsan.cpp, which clang builds on its own):
// a cluster, classes, a typical task set and rows, owning every array the
// views point to. Header only, no link-time dependency.
#include <placer/kernels/ops.hpp>
#include <placer/kernels/round_arrays.hpp>
#include <placer/kernels/tier.hpp>

#include <algorithm>
#include <random>
#include <vector>

namespace placer::testing_support {

using namespace placer::kernels;

/// A small cluster and rows, owning every array the views point to
/// (round_arrays, as the solver's round_matrices).
struct tier_instance : round_arrays {
  std::vector<std::int32_t> scores, row_class, demand;
  /// The clock of current cells (tier_problem::stamp): all current until
  /// a test says otherwise.
  std::vector<std::int32_t> stamp, fresh;
  std::int32_t now = 0;

  tier_problem problem(std::int32_t max_iterations, std::int64_t eps) {
    stamp.resize(static_cast<std::size_t>(n_nodes()), -1);
    fresh.resize(static_cast<std::size_t>(n_classes()), 0);
    tier_problem p;
    p.stamp = stamp.data();
    p.fresh = fresh.data();
    p.now = now;
    p.nodes = nodes();
    p.classes = classes();
    p.tasks = tasks();
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
    score_cell_op const op{nodes(), classes(), tasks(), score_params{}};
    scores.assign(static_cast<std::size_t>(n_classes()) * n_nodes(), 0);
    for (std::int32_t n = 0; n < n_nodes(); ++n) op.score_column(n, scores.data());
  }
};

/// Nodes of 4 or 8 GPUs, partly used, two models; classes of whole GPUs,
/// shares and CPU only; a typical task set.
inline tier_instance random_cluster(std::mt19937_64& rng, int max_nodes, int max_classes) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  tier_instance t;
  int const n_nodes = pick(1, max_nodes);
  t.gpu_begin.push_back(0);
  for (int n = 0; n < n_nodes; ++n) {
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
  int const n_classes = pick(1, max_classes);
  for (int c = 0; c < n_classes; ++c) {
    int const shape = pick(0, 3);
    t.class_gpus.push_back(shape == 0 ? 0 : shape == 1 ? 1 : pick(1, 4));
    t.class_milli.push_back(shape == 1 ? pick(1, 9) * 100 : 1000);
    t.class_cpu.push_back(std::int64_t{pick(1, 8)} * 1000);
    t.class_mem.push_back(std::int64_t{pick(1, 16)} * 1024);
    t.class_model_mask.push_back(pick(0, 2) == 0 ? 1U << pick(0, 1) : 3U);
    t.class_pool_mask.push_back(pool_bit_training | pool_bit_shared);
    t.class_loan_ok.push_back(0);
    t.class_any_model.push_back(t.class_model_mask.back() == 3U ? 1 : 0);
  }
  for (int m : {0, 1, 2}) {
    t.task_gpus.push_back(m == 0 ? 1 : m == 1 ? 1 : 2);
    t.task_milli.push_back(m == 0 ? 500 : 1000);
    t.task_cpu.push_back(4000);
    t.task_model_mask.push_back(3U);
    t.task_freq_ppm.push_back(m == 0 ? 500000 : 250000);
  }
  t.task_share_cpu = mean_share_cpu(t.tasks());
  return t;
}

/// `templates` random nodes, each repeated `copies` times (node k is a twin
/// of node k % templates).
inline tier_instance twin_cluster(std::mt19937_64& rng, int templates, int copies, int max_classes) {
  tier_instance const base = random_cluster(rng, templates, max_classes);
  tier_instance t = base;
  int const n_nodes = base.n_nodes() * copies;
  t.cpu_free.clear(), t.cpu_capacity.clear(), t.mem_free.clear(), t.model.clear(), t.pool.clear(), t.flags.clear();
  t.gpu_begin.assign(1, 0), t.gpu_free.clear(), t.gpu_island.clear(), t.gpu_capacity.clear(), t.scarcity.clear();
  for (int k = 0; k < n_nodes; ++k) {
    auto const n = static_cast<std::size_t>(k % base.n_nodes());
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

/// A node-affinity preference, as the `-k8s` scenarios have: the first
/// ceil(rows / 2) rows value a random 15% of the nodes `bonus` more (their
/// feasible cells), so those rows compete for more of them than they need
/// and their prices must climb far: a price war for plain bidding.
inline void prefer_some_nodes(std::mt19937_64& rng, tier_instance& t, std::int32_t bonus) {
  std::vector<std::uint8_t> preferred(static_cast<std::size_t>(t.n_nodes()));
  for (auto& p : preferred) p = std::uniform_int_distribution<int>(0, 99)(rng) < 15 ? 1 : 0;
  for (std::size_t r = 0; r < (t.row_class.size() + 1) / 2; ++r) {
    auto const row = static_cast<std::size_t>(t.row_class[r]) * static_cast<std::size_t>(t.n_nodes());
    for (std::size_t n = 0; n < preferred.size(); ++n) {
      if (preferred[n] != 0 && t.scores[row + n] >= 0) t.scores[row + n] += bonus;
    }
  }
}

/// A round's tiers as the assigner chains them: the instance's classes
/// split into k tiers of rows; tier j's live classes are its own and every
/// later tier's; each tier one tick of the clock after the one before.
struct chained {
  std::vector<std::vector<std::int32_t>> row_class, demand;
  std::vector<std::vector<std::uint8_t>> live;
};
inline chained split_into_tiers(std::mt19937_64& rng, tier_instance const& t, int k) {
  chained c;
  c.row_class.resize(static_cast<std::size_t>(k));
  c.demand.resize(static_cast<std::size_t>(k));
  std::vector<int> tier_of(static_cast<std::size_t>(t.n_classes()));
  for (auto& x : tier_of) x = std::uniform_int_distribution<int>(0, k - 1)(rng);
  for (std::int32_t cl = 0; cl < t.n_classes(); ++cl) {
    auto const j = static_cast<std::size_t>(tier_of[static_cast<std::size_t>(cl)]);
    c.row_class[j].push_back(cl);
    c.demand[j].push_back(std::uniform_int_distribution<int>(1, 40)(rng));
  }
  for (int j = 0; j < k; ++j) {
    std::vector<std::uint8_t> live(static_cast<std::size_t>(t.n_classes()), 0);
    for (std::size_t cl = 0; cl < live.size(); ++cl) live[cl] = tier_of[cl] >= j ? 1 : 0;
    c.live.push_back(live);
  }
  return c;
}
inline std::vector<tier_problem> chain_problems(tier_instance& t, chained const& c, std::vector<std::int32_t>& first_changed) {
  std::vector<tier_problem> ps;
  for (std::size_t j = 0; j < c.row_class.size(); ++j) {
    t.now = static_cast<std::int32_t>(j);
    tier_problem p = t.problem(1 << 30, 200);
    p.n_rows = static_cast<std::int32_t>(c.row_class[j].size());
    p.row_class = c.row_class[j].data();
    p.demand = c.demand[j].data();
    p.live_class = c.live[j].data();
    if (j == 0) {
      p.changed = first_changed.data();
      p.n_changed = static_cast<std::int32_t>(first_changed.size());
    }
    ps.push_back(p);
  }
  return ps;
}

/// A random topology over n nodes, as node_domain_paths lays one out: level
/// 0 the root, each deeper level's domains runs of consecutive nodes inside
/// their parent's (a node now and then in no domain of the deepest level),
/// numbered level by level; each domain's nodes in node order.
struct random_topology {
  std::int32_t levels = 1;
  std::vector<std::int32_t> begin, node, level, node_domain;
  random_topology(std::mt19937_64& rng, std::int32_t n_nodes) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    levels = pick(1, 3);
    node_domain.assign(static_cast<std::size_t>(n_nodes) * static_cast<std::size_t>(levels), -1);
    std::int32_t domains = 0;
    for (std::int32_t l = 0; l < levels; ++l) {
      std::int32_t run = 0, at = -1;
      for (std::int32_t n = 0; n < n_nodes; ++n) {
        std::int32_t const parent = l > 0 ? node_domain[static_cast<std::size_t>(n * levels + l - 1)] : 0;
        bool const fresh = n == 0 || run == 0 ||
                           (l > 0 && parent != node_domain[static_cast<std::size_t>((n - 1) * levels + l - 1)]);
        if (fresh) {
          at = domains++;
          level.push_back(l);
          run = l == 0 ? n_nodes : pick(1, 12 / l);
        }
        --run;
        if (l == levels - 1 && l > 0 && pick(0, 19) == 0) continue;  // no rack
        node_domain[static_cast<std::size_t>(n * levels + l)] = at;
      }
    }
    begin.assign(static_cast<std::size_t>(domains) + 1, 0);
    for (auto d : node_domain) {
      if (d >= 0) ++begin[static_cast<std::size_t>(d) + 1];
    }
    for (std::int32_t d = 0; d < domains; ++d) begin[static_cast<std::size_t>(d) + 1] += begin[static_cast<std::size_t>(d)];
    node.resize(static_cast<std::size_t>(begin.back()));
    std::vector<std::int32_t> cursor(begin.begin(), begin.end() - 1);
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      for (std::int32_t l = 0; l < levels; ++l) {
        if (auto const d = node_domain[static_cast<std::size_t>(n * levels + l)]; d >= 0) {
          node[static_cast<std::size_t>(cursor[static_cast<std::size_t>(d)]++)] = n;
        }
      }
    }
  }
  [[nodiscard]] tier_topology view() const {
    return {static_cast<std::int32_t>(level.size()), levels, begin.data(), node.data(), level.data(), node_domain.data()};
  }
};

/// A locality job's tier (tier_problem::local) of class c on the topology
/// (null: none): `want` replicas, its kind drawn at random.
inline tier_locality random_locality(std::mt19937_64& rng, random_topology const* topo) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  tier_locality l;
  l.want = pick(1, 6);
  l.gang = pick(0, 2) != 0;
  l.distinct = pick(0, 1) == 0;
  l.required = topo != nullptr && pick(0, 2) == 0;
  l.top = l.required ? pick(0, topo->levels - 1) : 0;
  int const w = pick(0, 2);
  l.topo_unit = (w == 0 ? 0 : w == 1 ? 50 : -20) * 1000LL;
  return l;
}

}  // namespace placer::testing_support
