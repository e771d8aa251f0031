// Optimality of the solver against an exact MIP (tests/support/exact_solver):
// first the MIP itself is checked against brute force on tiny rounds, then
// the heuristics' gap to the MIP optimum is measured on small capacitated
// rounds with gangs, and the placer algorithm must stay within 2% on average.
// The objective is placement_value (exact_solver.hpp): GPU milli placed plus
// one per replica, gangs whole, required topology within one domain.
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/exact_solver.hpp"
#include "../support/invariants.hpp"

namespace placer {
namespace {

using testing_support::placement_value;
using testing_support::solve_exact;

// ---------------------------------------------------------------------------
// Brute force: every replica goes to some (node, GPU set) or nowhere. Written
// independently of the MIP (no shared helpers) so that the two check each
// other. Replicas of one job are interchangeable, so a job's replicas take
// options in non-decreasing index order (multisets, not sequences).

class brute_force {
 public:
  explicit brute_force(round_input const& in)
      : in_(in), nodes_(in.state.nodes), paths_(node_domain_paths(in.state)),
        levels_(std::max(in.state.topo.levels(), 1)) {
    auto const n_jobs = in.pending.size();
    options_.resize(n_jobs);
    suffix_.assign(n_jobs + 1, 0);
    for (std::size_t j = 0; j < n_jobs; ++j) build_options(j);
    for (std::size_t j = n_jobs; j-- > 0;) {
      suffix_[j] = suffix_[j + 1] + value_of(in.pending[j]) * in.pending[j].replicas;
    }
  }

  double solve() {
    best_ = 0;
    job_step(0, 0);
    return best_;
  }

 private:
  struct option {
    std::int32_t node;
    std::vector<std::int32_t> gpus;
  };

  static double value_of(job const& j) { return static_cast<double>(j.per_replica.gpu_milli_total() + 1); }

  bool requires_domain(job const& j) const { return j.topo_mode == topology_mode::required && j.topology_level >= 0; }
  std::int32_t domain_of(job const& j, std::int32_t n) const {
    return paths_[static_cast<std::size_t>(n) * levels_ + j.topology_level];
  }

  void build_options(std::size_t j) {
    auto const& jb = in_.pending[j];
    auto const& d = jb.per_replica;
    for (std::int32_t n = 0; n < static_cast<std::int32_t>(nodes_.size()); ++n) {
      auto const& nd = nodes_[static_cast<std::size_t>(n)];
      if (!nd.healthy) continue;
      bool const pool_ok = jb.kind == job_kind::inference ? nd.pool != pool_kind::training
                                                          : nd.pool != pool_kind::inference || nd.loanable;
      if (!pool_ok) continue;
      if (requires_domain(jb) && domain_of(jb, n) < 0) continue;
      if (d.gpus == 0) {
        options_[j].push_back({n, {}});
        continue;
      }
      if (nd.gpu_model.empty()) continue;
      if (!jb.allowed_gpu_models.empty() &&
          std::find(jb.allowed_gpu_models.begin(), jb.allowed_gpu_models.end(), nd.gpu_model) ==
              jb.allowed_gpu_models.end()) {
        continue;
      }
      // Every subset of `gpus` healthy GPUs; free capacity is checked when
      // the option is taken.
      auto const g = nd.gpu_count();
      for (std::uint32_t mask = 0; mask < (1U << g); ++mask) {
        if (std::popcount(mask) != d.gpus) continue;
        option o{n, {}};
        bool healthy = true;
        for (std::int32_t i = 0; i < g; ++i) {
          if ((mask >> i) & 1U) {
            healthy = healthy && nd.gpu_is_healthy(static_cast<std::size_t>(i));
            o.gpus.push_back(i);
          }
        }
        if (healthy) options_[j].push_back(std::move(o));
      }
    }
  }

  bool fits(job const& jb, option const& o) const {
    auto const& nd = nodes_[static_cast<std::size_t>(o.node)];
    auto const& d = jb.per_replica;
    if (nd.cpu_milli_free < d.cpu_milli || nd.memory_mib_free < d.memory_mib) return false;
    for (auto g : o.gpus) {
      if (nd.gpu_free_milli[static_cast<std::size_t>(g)] < d.gpu_milli) return false;
    }
    return true;
  }

  void apply(job const& jb, option const& o, int sign) {
    auto& nd = nodes_[static_cast<std::size_t>(o.node)];
    auto const& d = jb.per_replica;
    nd.cpu_milli_free -= sign * d.cpu_milli;
    nd.memory_mib_free -= sign * d.memory_mib;
    for (auto g : o.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= sign * d.gpu_milli;
  }

  void job_step(std::size_t j, double value) {
    if (value + suffix_[j] <= best_) return;  // cannot beat the incumbent
    if (j == in_.pending.size()) {
      best_ = value;
      return;
    }
    replica_step(j, 0, 0, value, -1);
  }

  void replica_step(std::size_t j, std::size_t from, std::int32_t count, double value, std::int32_t domain) {
    auto const& jb = in_.pending[j];
    // Stop here: a non-gang job may keep any count, a gang none or all.
    if (!jb.gang || count == 0 || count == jb.replicas) job_step(j + 1, value);
    if (count == jb.replicas) return;
    for (std::size_t i = from; i < options_[j].size(); ++i) {
      auto const& o = options_[j][i];
      std::int32_t const dom = requires_domain(jb) ? domain_of(jb, o.node) : -1;
      if (domain >= 0 && dom != domain) continue;
      if (!fits(jb, o)) continue;
      apply(jb, o, +1);
      replica_step(j, i, count + 1, value + value_of(jb), domain >= 0 ? domain : dom);
      apply(jb, o, -1);
    }
  }

  round_input const& in_;
  std::vector<node> nodes_;  // residual state
  std::vector<std::int32_t> paths_;
  std::int32_t levels_;
  std::vector<std::vector<option>> options_;
  std::vector<double> suffix_;  // most value jobs j.. could add
  double best_ = 0;
};

/// 1-3 nodes of up to 4 GPUs, up to 5 jobs of every shape.
round_input tiny_round(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static char const* const models[] = {"A100", "H100"};
  round_input in;
  // The exact models value every GPU alike; the automatic reclaim gives
  // inference precedence on loaned nodes, a different objective.
  in.pol.queue.auto_reclaim = false;
  in.state = make_cluster()
                 .spines(pick(1, 2))
                 .leaves_per_spine(2)
                 .nodes_per_leaf(pick(0, 3) == 0 ? 2 : 1)  // mostly one node per leaf: topology binds
                 .gpus(pick(1, 4))
                 .cpu_milli(pick(4, 16) * 1000)
                 .memory_mib(pick(8, 64) * 1024)
                 .build();
  in.state.nodes.resize(std::min<std::size_t>(in.state.nodes.size(), static_cast<std::size_t>(pick(0, 4) == 0 ? 1 : pick(2, 3))));
  for (auto& n : in.state.nodes) {
    n.gpu_model = models[pick(0, 1)];
    n.pool = pick(0, 3) == 0 ? static_cast<pool_kind>(pick(0, 1)) : pool_kind::shared;
    n.loanable = pick(0, 1) == 1;
    n.healthy = pick(0, 14) != 0;
    for (auto& f : n.gpu_free_milli) {
      int const r = pick(0, 9);
      f = r < 5 ? 1000 : r < 6 ? 0 : pick(1, 9) * 100;
    }
    if (pick(0, 5) == 0) {
      n.gpu_healthy.assign(n.gpu_free_milli.size(), 1);
      n.gpu_healthy[static_cast<std::size_t>(pick(0, n.gpu_count() - 1))] = 0;
    }
    n.cpu_milli_free = n.cpu_milli_capacity * pick(3, 10) / 10;
    n.memory_mib_free = n.memory_mib_capacity * pick(3, 10) / 10;
  }
  int const jobs = pick(1, 5);
  for (int k = 0; k < jobs; ++k) {
    job j;
    j.name = "tiny-" + std::to_string(k);
    j.kind = static_cast<job_kind>(pick(0, 2));
    int const shape = pick(0, 9);
    if (shape == 0) {
      j.per_replica.gpus = 0;
    } else if (shape < 5) {
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = pick(1, 9) * 100 + pick(0, 1) * 50;
    } else {
      j.per_replica.gpus = pick(1, 3);
    }
    j.per_replica.cpu_milli = pick(0, 4) * 1000;
    j.per_replica.memory_mib = pick(0, 8) * 1024;
    j.replicas = pick(0, 1) == 0 ? pick(2, 3) : 1;
    j.gang = j.replicas > 1 && pick(0, 1) == 1;
    if (pick(0, 4) == 0) j.allowed_gpu_models = {models[pick(0, 1)]};
    if (j.replicas > 1 && pick(0, 1) == 0) {
      j.topology_level = pick(1, 2);
      j.topo_mode = topology_mode::required;
    }
    if (k == 0 && pick(0, 1) == 0) {
      // A job that one node rarely holds, so the required domain binds.
      j.per_replica.gpus = pick(1, 2);
      j.per_replica.gpu_milli = milli_per_gpu;
      j.replicas = 3;
      j.topology_level = pick(1, 2);
      j.topo_mode = topology_mode::required;
    }
    in.pending.push_back(std::move(j));
  }
  return in;
}

TEST(ExactSolver, MatchesBruteForceOnTinyInstances) {
  // 300 rather than 100: a required topology changes the optimum in only
  // about 4% of these rounds, and each takes well under a millisecond.
  std::mt19937_64 rng(20240611);
  int nonzero = 0;
  for (int t = 0; t < 300; ++t) {
    auto const in = tiny_round(rng);
    SCOPED_TRACE("tiny instance " + std::to_string(t));
    ASSERT_NO_THROW(validate(in));
    auto const exact = solve_exact(in, 10.0);
    ASSERT_TRUE(exact.optimal);
    double const brute = brute_force(in).solve();
    EXPECT_EQ(exact.value, brute);
    EXPECT_EQ(placement_value(in, exact.placement), exact.value) << "MIP placement disagrees with its objective";
    expect_round_invariants(in, exact.placement);
    nonzero += brute > 0 ? 1 : 0;
  }
  EXPECT_GT(nonzero, 50) << "generator too tight: most instances place nothing";
}

// ---------------------------------------------------------------------------
// Gap on capacitated rounds: demand is 110-150% of the free GPU capacity, so
// the order and the packing decide how much gets placed.

round_input capacitated_round(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static char const* const models[] = {"A100", "H100"};
  int const spines = pick(1, 2);
  int const max_per_leaf = 16 / (spines * 2);  // at most 16 nodes
  int const gpus = pick(0, 1) == 0 ? 4 : 8;
  round_input in;
  // The exact models value every GPU alike; the automatic reclaim gives
  // inference precedence on loaned nodes, a different objective.
  in.pol.queue.auto_reclaim = false;
  in.state = make_cluster()
                 .spines(spines)
                 .leaves_per_spine(2)
                 .nodes_per_leaf(pick(max_per_leaf / 2, max_per_leaf))
                 .gpus(gpus)
                 .cpu_milli(gpus * 12000)
                 .memory_mib(static_cast<std::int64_t>(gpus) * 96 * 1024)
                 .build();
  std::int64_t free_gpu = 0;
  for (auto& n : in.state.nodes) {
    n.gpu_model = models[pick(0, 1)];
    int const p = pick(0, 9);
    n.pool = p == 0 ? pool_kind::training : p == 1 ? pool_kind::inference : pool_kind::shared;
    n.loanable = pick(0, 1) == 1;
    for (auto& f : n.gpu_free_milli) {
      int const r = pick(0, 9);
      f = r < 6 ? 1000 : r < 8 ? 0 : pick(1, 9) * 100;
    }
    if (pick(0, 9) == 0) {
      n.gpu_healthy.assign(n.gpu_free_milli.size(), 1);
      n.gpu_healthy[static_cast<std::size_t>(pick(0, n.gpu_count() - 1))] = 0;
    }
    n.cpu_milli_free = n.cpu_milli_capacity * pick(5, 10) / 10;
    n.memory_mib_free = n.memory_mib_capacity * pick(5, 10) / 10;
    for (std::int32_t g = 0; g < n.gpu_count(); ++g) {
      if (n.gpu_is_healthy(static_cast<std::size_t>(g))) free_gpu += n.gpu_free_milli[static_cast<std::size_t>(g)];
    }
  }
  std::int64_t const target = free_gpu * pick(110, 150) / 100;
  std::int64_t demand = 0;
  for (int k = 0; k < 40 && demand < target; ++k) {
    job j;
    j.name = "job-" + std::to_string(k);
    int const kind = pick(0, 19);
    j.kind = kind < 3 ? job_kind::inference : kind < 5 ? job_kind::batch : job_kind::training;
    j.priority = 0;
    j.submit_time = k;
    int const shape = pick(0, 99);
    if (shape < 8) {
      j.per_replica.gpus = 0;
    } else if (shape < 30) {
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = pick(1, 9) * 100;
    } else if (shape < 55) {
      j.per_replica.gpus = 1;
    } else if (shape < 75) {
      j.per_replica.gpus = 2;
    } else if (shape < 92) {
      j.per_replica.gpus = 4;
    } else {
      j.per_replica.gpus = gpus;
    }
    j.per_replica.cpu_milli = std::max(1, j.per_replica.gpus) * pick(2, 10) * 1000;
    j.per_replica.memory_mib = std::max(1, j.per_replica.gpus) * pick(8, 64) * 1024;
    if (pick(0, 99) < 40) {
      j.replicas = pick(2, 4);
      j.gang = pick(0, 99) < 65;
      if (pick(0, 1) == 0) {
        j.topology_level = pick(1, 2);  // spine or leaf
        j.topo_mode = topology_mode::required;
      }
    }
    if (pick(0, 3) == 0) j.allowed_gpu_models = {models[pick(0, 1)]};
    demand += j.per_replica.gpu_milli_total() * j.replicas;
    in.pending.push_back(std::move(j));
  }
  return in;
}

struct algo_entry {
  algorithm algo;
  char const* name;
  queue_order order = queue_order::fifo;
};
// The optimum here is the most value placed, in any order: placer is judged
// in pack order, which seeks it. placer_fifo, the default order, is shown
// beside it: what keeping submission order costs (docs/policies.md).
constexpr algo_entry algos[] = {
    {algorithm::placer, "placer", queue_order::pack},
    {algorithm::greedy, "greedy"},
    {algorithm::kube_least_allocated, "kube_least"},
    {algorithm::kube_most_allocated, "kube_most"},
    {algorithm::placer, "placer_fifo"},
};
constexpr std::size_t n_algos = std::size(algos);

std::int64_t free_gpu_milli(cluster const& c) {
  std::int64_t total = 0;
  for (auto const& n : c.nodes) {
    for (std::int32_t g = 0; g < n.gpu_count(); ++g) {
      if (n.gpu_is_healthy(static_cast<std::size_t>(g))) total += n.gpu_free_milli[static_cast<std::size_t>(g)];
    }
  }
  return total;
}

std::int32_t replicas_placed(round_result const& r, std::int32_t j) {
  for (auto const& p : r.placements) {
    if (p.job == j) return static_cast<std::int32_t>(p.replicas.size());
  }
  return 0;
}

/// Where a heuristic loses against the optimum: the value of the replicas the
/// MIP places and the heuristic does not, by the first matching trait of the
/// job (a hint for the solver work, not an exact decomposition: the
/// heuristic usually places other work in their stead).
struct loss_split {
  static constexpr char const* names[] = {"model-restricted", "required-topology", "gang", "other"};
  double value[4] = {0, 0, 0, 0};

  void add(round_input const& in, round_result const& opt, round_result const& ours) {
    for (std::int32_t j = 0; j < static_cast<std::int32_t>(in.pending.size()); ++j) {
      auto const& jb = in.pending[static_cast<std::size_t>(j)];
      auto const missing = replicas_placed(opt, j) - replicas_placed(ours, j);
      if (missing <= 0) continue;
      int const k = !jb.allowed_gpu_models.empty()                  ? 0
                    : jb.topo_mode == topology_mode::required ? 1
                    : jb.gang                                       ? 2
                                                                    : 3;
      value[k] += static_cast<double>(jb.per_replica.gpu_milli_total() + 1) * missing;
    }
  }
};

/// The broader instances an independent check used: a training and an
/// inference pool under the kind rule (loanable inference nodes), four GPU
/// models, nodes of 4 or 8 GPUs with partly and fully used GPUs, CPU-tight
/// nodes, and jobs that must sit on one node, one leaf or one spine, gangs
/// of small (one-GPU and fractional) replicas beside larger single jobs.
/// Every job has priority 0 and the same value per GPU milli.
round_input broad_round(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static char const* const models[] = {"A100", "H100", "L40S", "T4"};
  int const spines = pick(1, 2);
  round_input in;
  in.pol.queue.auto_reclaim = false;  // as above: the exact model values every GPU alike
  in.state = make_cluster().spines(spines).leaves_per_spine(2).nodes_per_leaf(pick(2, 8 / spines)).gpus(8).build();
  // A fourth level: every node its own domain, so a job can require one node.
  in.state.topo.level_names.push_back("node");
  for (auto& n : in.state.nodes) {
    auto const d = static_cast<std::int32_t>(in.state.topo.domains.size());
    in.state.topo.domains.push_back({n.name, 3, n.domain});
    n.domain = d;
  }
  std::int64_t free_gpu = 0;
  for (auto& n : in.state.nodes) {
    int const gpus = pick(0, 2) == 0 ? 4 : 8;
    n.gpu_free_milli.assign(static_cast<std::size_t>(gpus), milli_per_gpu);
    n.gpu_model = models[pick(0, 3)];
    n.pool = pick(0, 2) == 0 ? pool_kind::inference : pool_kind::training;
    n.loanable = n.pool == pool_kind::inference && pick(0, 1) == 1;
    n.cpu_milli_capacity = gpus * 12000;
    n.memory_mib_capacity = static_cast<std::int64_t>(gpus) * 96 * 1024;
    for (auto& f : n.gpu_free_milli) {
      int const r = pick(0, 9);
      f = r < 6 ? milli_per_gpu : r < 8 ? 0 : pick(1, 9) * 100;
    }
    bool const cpu_tight = pick(0, 3) == 0;
    n.cpu_milli_free = n.cpu_milli_capacity * (cpu_tight ? pick(1, 3) : pick(6, 10)) / 10;
    n.memory_mib_free = n.memory_mib_capacity * pick(5, 10) / 10;
    for (auto f : n.gpu_free_milli) free_gpu += f;
  }
  std::int64_t const target = free_gpu * pick(110, 160) / 100;
  std::int64_t demand = 0;
  for (int k = 0; k < 40 && demand < target; ++k) {
    job j;
    j.name = "job-" + std::to_string(k);
    j.kind = pick(0, 3) == 0 ? job_kind::inference : job_kind::training;
    j.submit_time = k;
    int const shape = pick(0, 99);
    if (shape < 30) {
      // A gang of small replicas, often kept on one node, leaf or spine.
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = pick(0, 2) == 0 ? pick(1, 9) * 100 : milli_per_gpu;
      j.replicas = pick(2, 6);
      j.gang = true;
      if (pick(0, 3) != 0) {
        j.topology_level = pick(1, 3);
        j.topo_mode = topology_mode::required;
      }
    } else if (shape < 45) {
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = pick(1, 9) * 100;  // a fractional service
    } else if (shape < 55) {
      j.per_replica.gpus = 0;
    } else if (shape < 85) {
      j.per_replica.gpus = pick(0, 1) == 0 ? 2 : 4;
    } else {
      j.per_replica.gpus = 8;
    }
    if (shape >= 45 && pick(0, 4) == 0) {
      j.replicas = pick(2, 3);
      j.gang = true;
      j.topology_level = pick(1, 2);
      j.topo_mode = topology_mode::required;
    }
    j.per_replica.cpu_milli = std::max(1, j.per_replica.gpus) * pick(2, 12) * 1000;
    j.per_replica.memory_mib = std::max(1, j.per_replica.gpus) * pick(8, 64) * 1024;
    if (pick(0, 2) == 0) {
      j.allowed_gpu_models = {models[pick(0, 3)]};
      if (pick(0, 1) == 0) j.allowed_gpu_models.push_back(models[pick(0, 3)]);
    }
    demand += j.per_replica.gpu_milli_total() * j.replicas;
    in.pending.push_back(std::move(j));
  }
  return in;
}

/// Solves `instances` rounds of `make` exactly and with every algorithm,
/// prints the per-instance table and the summary, writes `csv_name` to the
/// test's temporary directory, and returns placer's average gap over the
/// instances proven optimal.
double placer_gap(round_input (*make)(std::uint64_t), std::uint64_t seed_step, int instances, char const* csv_name) {
  // Per instance, a limit of work: which instances are proven (and so
  // which enter the averages) must not depend on the machine's load. Those
  // proven need at most 6,291 branch-and-bound nodes (2026-12-02); the four
  // that are not were not proven in 20 s either (14,577-22,365 nodes by
  // then). With the 3 s limit this replaced, the 6,291-node instance of the
  // broad set fell out on a loaded machine and moved its average. The clock
  // is a guard only.
  constexpr std::int64_t mip_node_limit = 10000;
  constexpr double mip_time_limit_s = 120.0;
  auto const t0 = std::chrono::steady_clock::now();
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  std::ostringstream table, csv;
  table << std::fixed << std::setprecision(2);
  csv << "instance,nodes,jobs,demand_pct,opt,bound,proved";
  table << std::setw(4) << "inst" << std::setw(6) << "nodes" << std::setw(5) << "jobs" << std::setw(6) << "dem%"
        << std::setw(8) << "opt" << std::setw(7) << "proved";
  for (auto const& a : algos) {
    csv << ',' << a.name << ',' << a.name << "_gap";
    table << std::setw(11) << a.name << std::setw(7) << "gap%";
  }
  csv << '\n';
  table << '\n';

  std::vector<double> gap_sum(n_algos, 0.0), gap_worst(n_algos, 0.0);
  std::vector<int> worst_instance(n_algos, -1);
  int proved = 0;
  std::vector<int> unproved;
  loss_split placer_losses;
  double placer_us = 0, repair_us = 0;  // placer's round time, and its repair search's share
  for (int t = 0; t < instances; ++t) {
    auto const in = make(seed_step * static_cast<std::uint64_t>(t + 1));
    SCOPED_TRACE("instance " + std::to_string(t));
    std::int64_t demand = 0;
    for (auto const& j : in.pending) demand += j.per_replica.gpu_milli_total() * j.replicas;
    auto const free = free_gpu_milli(in.state);

    auto const exact = solve_exact(in, mip_time_limit_s, mip_node_limit);
    EXPECT_TRUE(exact.optimal || exact.stopped_at_nodes) << "the MIP stopped on the clock, not at its node limit: the "
                                                            "proved set would depend on the machine's load";
    expect_round_invariants(in, exact.placement);
    EXPECT_EQ(placement_value(in, exact.placement), exact.value) << "MIP placement disagrees with its objective";
    double const opt = exact.value;
    std::vector<double> values(n_algos), gaps(n_algos);
    for (std::size_t a = 0; a < n_algos; ++a) {
      auto run = in;
      run.pol.algo = algos[a].algo;
      run.pol.order = algos[a].order;
      auto const r = s.solve(run);
      expect_round_invariants(run, r);
      values[a] = placement_value(run, r);
      EXPECT_LE(values[a], exact.bound) << algos[a].name << " beats the MIP's upper bound: the MIP model is wrong";
      gaps[a] = opt > 0 ? (opt - values[a]) / opt : 0.0;
      if (a == 0 && exact.optimal) placer_losses.add(in, exact.placement, r);
      if (a == 0) {
        for (auto const& st : r.timing) {
          if (st.stage == "total") placer_us += st.micros;
          if (st.stage == "repair") repair_us += st.micros;
        }
      }
    }
    if (exact.optimal) {
      ++proved;
      for (std::size_t a = 0; a < n_algos; ++a) {
        gap_sum[a] += gaps[a];
        if (gaps[a] > gap_worst[a]) {
          gap_worst[a] = gaps[a];
          worst_instance[a] = t;
        }
      }
    } else {
      unproved.push_back(t);
    }

    auto const pct = free > 0 ? demand * 100 / free : 0;
    csv << t << ',' << in.state.nodes.size() << ',' << in.pending.size() << ',' << pct << ',' << opt << ','
        << exact.bound << ',' << (exact.optimal ? 1 : 0);
    table << std::setw(4) << t << std::setw(6) << in.state.nodes.size() << std::setw(5) << in.pending.size()
          << std::setw(6) << pct << std::setw(8) << static_cast<std::int64_t>(opt) << std::setw(7)
          << (exact.optimal ? "yes" : "NO");
    for (std::size_t a = 0; a < n_algos; ++a) {
      csv << ',' << values[a] << ',' << gaps[a];
      table << std::setw(11) << static_cast<std::int64_t>(values[a]) << std::setw(7) << gaps[a] * 100;
    }
    csv << '\n';
    table << '\n';
  }

  double const secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  table << "average gap over the " << proved << " of " << instances << " instances proven optimal:";
  for (std::size_t a = 0; a < n_algos; ++a) {
    double const avg = proved > 0 ? gap_sum[a] / proved : 0.0;
    table << "  " << algos[a].name << " " << std::setprecision(3) << avg * 100 << "%";
    csv << "# average_gap," << algos[a].name << ',' << avg << '\n';
  }
  table << "\nworst gap:" << std::setprecision(2);
  for (std::size_t a = 0; a < n_algos; ++a) {
    table << "  " << algos[a].name << " " << gap_worst[a] * 100 << "% (instance " << worst_instance[a] << ")";
  }
  table << "\nplacer's missing replicas vs the optimum, by job trait (milli+1):";
  for (std::size_t k = 0; k < 4; ++k) {
    table << "  " << loss_split::names[k] << " " << static_cast<std::int64_t>(placer_losses.value[k]);
  }
  table << "\nplacer's round: mean " << std::setprecision(0) << placer_us / instances << " us, of which the repair search "
        << repair_us / instances << " us";
  table << "\nnot proven optimal within " << mip_node_limit << " branch-and-bound nodes (left out of the averages):";
  for (auto t : unproved) table << ' ' << t;
  if (unproved.empty()) table << " none";
  table << "\ntotal time " << std::setprecision(1) << secs << " s\n";
  std::cout << table.str();
  std::ofstream(::testing::TempDir() + "/" + csv_name) << csv.str();

  EXPECT_GT(proved, instances / 2) << "too few instances proven optimal for a meaningful average";
  return proved > 0 ? gap_sum[0] / proved : 1.0;
}

TEST(Optimality, PlacerGapUnderTwoPercentOnCapacitatedInstancesWithGangs) {
  double const gap = placer_gap(capacitated_round, 0x9e3779b97f4a7c15ULL, 40, "optimality_gap.csv");
  EXPECT_LT(gap, 0.02) << "placer's average optimality gap is " << gap * 100 << "%";
}

TEST(Optimality, PlacerGapOnBroadInstances) {
  // PLACER_BROAD_SEED and PLACER_BROAD_INSTANCES draw another set (docs/results.md).
  char const* seed = std::getenv("PLACER_BROAD_SEED");
  char const* count = std::getenv("PLACER_BROAD_INSTANCES");
  double const gap = placer_gap(broad_round, seed ? std::strtoull(seed, nullptr, 10) : 0xbf58476d1ce4e5b9ULL,
                                count ? std::atoi(count) : 30, "optimality_gap_broad.csv");
  EXPECT_LT(gap, 0.01) << "placer's average optimality gap is " << gap * 100 << "%";
}


}  // namespace
}  // namespace placer
