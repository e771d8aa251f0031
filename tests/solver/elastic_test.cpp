// Elastic scaling (solver/src/policies/elastic.cpp): the multiple-choice
// knapsack against brute force, and scale-out end to end through the
// solver (pending jobs grown past their minimum, running jobs scaled out,
// reservations respected, the policy off); scale-in of extra workers for
// blocked jobs (fewest replicas, never below the minimum, never for a
// lower priority, all or nothing) and scale-out held back while such jobs
// are blocked.
#include <placer/kernels/backend.hpp>
#include <placer/solver/solver.hpp>

#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <tuple>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "policies/policies.hpp"

namespace placer {
namespace {

using detail::knapsack_group;
using detail::solve_mck;

solver cpu_solver() { return solver(kernels::select_backend("cpu")); }

job elastic_job(std::string name, int gpus, int min_r, int max_r, std::int64_t duration) {
  job j;
  j.name = std::move(name);
  j.kind = job_kind::training;
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = min_r;
  j.min_replicas = min_r;
  j.max_replicas = max_r;
  j.estimated_duration = duration;
  return j;
}

round_input elastic_round(cluster c) {
  round_input in;
  in.state = std::move(c);
  in.pol.queue.elastic = true;
  in.now = 1000;
  return in;
}

/// No GPU is handed out twice across the placements and scale-outs of a
/// round, and none that was busy before the round.
void expect_no_double_use(round_input const& in, round_result const& r) {
  std::set<std::pair<std::int32_t, std::int32_t>> used;
  auto take = [&](replica_placement const& rp) {
    for (auto g : rp.gpus) {
      EXPECT_EQ(in.state.nodes[rp.node].gpu_free_milli[g], milli_per_gpu) << "GPU was not free";
      EXPECT_TRUE(used.insert({rp.node, g}).second) << "GPU " << g << " of node " << rp.node << " used twice";
    }
  };
  for (auto const& p : r.placements) {
    for (auto const& rp : p.replicas) take(rp);
  }
  for (auto const& s : r.scale_outs) {
    for (auto const& rp : s.replicas) take(rp);
  }
}

// ------------------------------------------------------------- knapsack

struct brute_result {
  std::int64_t value = 0;
  std::int64_t weight = 0;
};

/// Every combination (each group: nothing or one item): the best value, and
/// the lowest total weight reaching it.
brute_result brute_force(std::vector<knapsack_group> const& groups, std::int64_t capacity) {
  brute_result best;
  std::vector<int> pick(groups.size(), -1);
  while (true) {
    std::int64_t w = 0, v = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (pick[g] >= 0) {
        w += groups[g].weight[pick[g]];
        v += groups[g].value[pick[g]];
      }
    }
    if (w <= capacity && (v > best.value || (v == best.value && w < best.weight))) best = {v, w};
    std::size_t g = 0;
    while (g < groups.size() && ++pick[g] == static_cast<int>(groups[g].weight.size())) pick[g++] = -1;
    if (g == groups.size()) break;
  }
  return best;
}

TEST(ElasticKnapsack, MatchesBruteForceOnRandomSmallInstances) {
  std::mt19937_64 rng(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<knapsack_group> groups(static_cast<std::size_t>(pick(0, 5)));
    for (auto& g : groups) {
      int const items = pick(1, 4);
      for (int i = 0; i < items; ++i) {
        g.weight.push_back(pick(0, 9));
        g.value.push_back(pick(-3, 25));
      }
    }
    std::int64_t const capacity = pick(0, 20);
    auto const choice = solve_mck(groups, capacity);
    ASSERT_EQ(choice.size(), groups.size());
    std::int64_t w = 0, v = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      ASSERT_GE(choice[g], -1);
      ASSERT_LT(choice[g], static_cast<std::int32_t>(groups[g].weight.size()));
      if (choice[g] >= 0) {
        w += groups[g].weight[choice[g]];
        v += groups[g].value[choice[g]];
      }
    }
    auto const best = brute_force(groups, capacity);
    EXPECT_LE(w, capacity) << "trial " << trial;
    EXPECT_EQ(v, best.value) << "trial " << trial;
    // Ties go to the lowest total weight.
    EXPECT_EQ(w, best.weight) << "trial " << trial;
  }
}

TEST(ElasticKnapsack, TiesGoToLowerWeightThenLowerGroup) {
  // Same value at weight 2 and 4: the lighter item.
  std::vector<knapsack_group> one{{{2, 4}, {10, 10}}};
  EXPECT_EQ(solve_mck(one, 10), (std::vector<std::int32_t>{0}));
  // Two identical groups, room for one: the lower group index gets it.
  std::vector<knapsack_group> two{{{3}, {7}}, {{3}, {7}}};
  EXPECT_EQ(solve_mck(two, 5), (std::vector<std::int32_t>{0, -1}));
  // Items worth nothing (or less) are not taken, even when they weigh 0.
  std::vector<knapsack_group> useless{{{0, 1}, {0, -5}}};
  EXPECT_EQ(solve_mck(useless, 3), (std::vector<std::int32_t>{-1}));
  // No capacity: only weightless items.
  std::vector<knapsack_group> free_item{{{0, 1}, {1, 9}}};
  EXPECT_EQ(solve_mck(free_item, 0), (std::vector<std::int32_t>{0}));
}

TEST(ElasticKnapsack, HugeInstancesStayWithinCapacity) {
  // 2,000 groups of 50 items on a 1M-unit capacity would be a 600M-cell
  // table; the guard coarsens the weights and the choice must still fit.
  std::vector<knapsack_group> groups(2000);
  std::int64_t i = 0;
  for (auto& g : groups) {
    for (std::int64_t k = 1; k <= 50; ++k) {
      g.weight.push_back(3 * k + 1);
      g.value.push_back(1000 * k / (k + 1 + i % 7));
    }
    ++i;
  }
  std::int64_t const capacity = 100000;
  auto const choice = solve_mck(groups, capacity);
  std::int64_t w = 0, taken = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (choice[g] >= 0) {
      w += groups[g].weight[choice[g]];
      ++taken;
    }
  }
  EXPECT_LE(w, capacity);
  EXPECT_GT(taken, 1000);  // the capacity is far from idle
}

// ----------------------------------------------------------- end to end

TEST(ElasticScaleOut, PendingJobGrowsToWhatFits) {
  // 2 nodes x 4 GPUs, 2-GPU workers: room for 4 workers; min 2, max 6.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build());
  in.pending.push_back(elastic_job("el", 2, 2, 6, 3600));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 4U);
  EXPECT_TRUE(r.unplaced_jobs.empty());
  EXPECT_TRUE(r.scale_outs.empty());  // a pending job grows in its own placement
  expect_no_double_use(in, r);
}

TEST(ElasticScaleOut, PendingJobStartsAtItsRequestedSizeNotItsMinimum) {
  // min 2, requested 4, max 6, 2-GPU workers. The minimum is how far the
  // job may be shrunk for others, not where it starts: starting gangs at
  // their minimum let them run twice as long on half a congested cluster
  // and made small jobs wait 2.7x longer on ITP cluster01 (issue 18).
  job el = elastic_job("el", 2, 2, 6, 3600);
  el.replicas = 4;
  // Room for 3 workers: 4 do not fit, so the job waits (2 would).
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(6).build());
  in.pending.push_back(el);
  auto s = cpu_solver();
  auto r = s.solve(in);
  EXPECT_TRUE(r.placements.empty());
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  // Room for 4: placed at 4, then grown into what is left by the knapsack.
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build();
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 4U);
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 6U);
  // A request below the range starts at the minimum, above it at the maximum.
  in.pending[0].replicas = 1;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(4).build();
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 2U);
  in.pending[0].replicas = 9;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 6U);
}

TEST(ElasticScaleOut, PendingJobStopsAtItsMaximum) {
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build());
  in.pending.push_back(elastic_job("el", 1, 2, 3, 3600));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 3U);
}

TEST(ElasticScaleOut, CpuOnlyWorkersGrowToTheirMaximumBesideAGpuJob) {
  // CPU-only workers weigh no GPU: the knapsack holds one item for them
  // (all the room), not one per possible size, and they still grow to
  // their maximum (or to what CPU allows) beside a GPU job that takes the
  // GPUs. Each node has 16 cores; a CPU-only worker takes 1.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).cpu_milli(16000).build());
  in.pending.push_back(elastic_job("cpu-el", 0, 1, 5, 3600));
  in.pending.push_back(elastic_job("gpu-el", 2, 1, 4, 3600));
  auto s = cpu_solver();
  auto r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);
  EXPECT_EQ(r.placements[0].replicas.size(), 5U);
  EXPECT_EQ(r.placements[1].replicas.size(), 4U);
  expect_no_double_use(in, r);
  // At 100,000 (the largest range validate() takes), CPU bounds it: 32
  // cores less the GPU job's 4 workers' cores.
  in.pending[0].max_replicas = 100000;
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);
  EXPECT_EQ(r.placements[0].replicas.size(), 28U);
  expect_no_double_use(in, r);
  in.pending[0].max_replicas = 100001;
  EXPECT_THROW(s.solve(in), logic_error);
}

TEST(ElasticScaleOut, KnapsackDecidesBetweenCompetingJobs) {
  // 8 GPUs; two 1-GPU-worker jobs start at 1 worker each, 6 GPUs spare.
  // JCT reduction of k extras from 1 worker: R - R*1/(1+k) (integer).
  //   short (R=1000): 500, 667, 750, 800 for k = 1..4
  //   long  (R=4000): 2000, 2667, 3000, 3200
  // Best within 6 GPUs: long +4 and short +2 (3200 + 667 = 3867; long +3 and
  // short +3 gives 3750, long +2 and short +4 3467).
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build());
  in.pending.push_back(elastic_job("short", 1, 1, 5, 1000));
  in.pending.push_back(elastic_job("long", 1, 1, 5, 4000));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);
  std::map<std::string, std::size_t> size;
  for (auto const& p : r.placements) size[in.pending[p.job].name] = p.replicas.size();
  EXPECT_EQ(size["short"], 3U);
  EXPECT_EQ(size["long"], 5U);
  expect_no_double_use(in, r);
  // Deterministic: the same round gives the same answer.
  auto const again = s.solve(in);
  ASSERT_EQ(again.placements.size(), r.placements.size());
  for (std::size_t k = 0; k < r.placements.size(); ++k) EXPECT_EQ(again.placements[k].replicas, r.placements[k].replicas);
}

TEST(ElasticScaleOut, RequiredTopologyKeepsExtrasInTheJobsDomain) {
  // 2 leaves x 2 nodes x 4 GPUs; 2-GPU workers, min 2, max 8, all under one
  // leaf. The other leaf's 8 free GPUs must not be used for extras: the job
  // ends with 4 workers (its leaf's 8 GPUs), not 8.
  auto in = elastic_round(make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(4).build());
  auto j = elastic_job("el", 2, 2, 8, 3600);
  j.topology_level = 2;
  j.topo_mode = topology_mode::required;
  in.pending.push_back(j);
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  auto const& reps = r.placements[0].replicas;
  EXPECT_EQ(reps.size(), 4U);
  std::set<std::int32_t> leaves;
  for (auto const& rp : reps) leaves.insert(in.state.nodes[rp.node].domain);
  EXPECT_EQ(leaves.size(), 1U);
  expect_no_double_use(in, r);
}

TEST(ElasticScaleOut, RunningJobBelowMaximumScalesOut) {
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  // A running elastic job on GPUs 0 and 1 (the snapshot counts them busy).
  running_job rj;
  rj.name = "run";
  rj.per_replica.gpus = 1;
  rj.per_replica.cpu_milli = 1000;
  rj.per_replica.memory_mib = 1024;
  rj.replicas = {{0, {0}, 1000}, {0, {1}, 1000}};
  rj.gang = true;
  rj.min_replicas = 1;
  rj.max_replicas = 5;
  rj.start_time = 0;
  rj.estimated_end = in.now + 1000;
  auto& nd = in.state.nodes[0];
  nd.gpu_free_milli[0] = nd.gpu_free_milli[1] = 0;
  nd.cpu_milli_free -= 2000;
  nd.memory_mib_free -= 2048;
  in.running.push_back(rj);
  // A job past its estimate gains nothing from more workers: not grown.
  running_job late = rj;
  late.name = "late";
  late.replicas = {{0, {2}, 1000}};
  late.estimated_end = in.now - 10;
  nd.gpu_free_milli[2] = 0;
  nd.cpu_milli_free -= 1000;
  nd.memory_mib_free -= 1024;
  in.running.push_back(late);

  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.scale_outs.size(), 1U);
  EXPECT_EQ(r.scale_outs[0].job, "run");
  EXPECT_EQ(r.scale_outs[0].reason, "elastic");
  EXPECT_EQ(r.scale_outs[0].replicas.size(), 3U);  // up to its maximum of 5
  expect_no_double_use(in, r);
}

TEST(ElasticScaleOut, ReservedNodesAreNeverUsed) {
  // Direct call: node 1 is held by a reservation, node 2 is free.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(3).gpus(4).build());
  running_job rj;
  rj.name = "run";
  rj.per_replica.gpus = 4;
  rj.replicas = {{0, {0, 1, 2, 3}, 1000}};
  rj.min_replicas = 1;
  rj.max_replicas = 4;
  rj.estimated_end = in.now + 5000;
  in.state.nodes[0].gpu_free_milli.assign(4, 0);
  in.running.push_back(rj);

  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  detail::work_state ws(in);
  round_result out;
  out.reservations.push_back({7, {1}, in.now + 100});
  detail::elastic_scale_out(core, ws, out);
  ASSERT_EQ(out.scale_outs.size(), 1U);
  ASSERT_EQ(out.scale_outs[0].replicas.size(), 1U);  // only node 2 is offered
  EXPECT_EQ(out.scale_outs[0].replicas[0].node, 2);
  EXPECT_EQ(ws.state.nodes[1].gpu_free_milli, (std::vector<std::int32_t>(4, 1000)));
  EXPECT_EQ(ws.state.nodes[2].gpu_free_milli, (std::vector<std::int32_t>(4, 0)));
  EXPECT_EQ(ws.running[0].replicas.size(), 2U);
  EXPECT_LT(ws.running[0].estimated_end, in.now + 5000);  // two workers: the run is shorter
}

TEST(ElasticScaleOut, PolicyOffPlacesTheGivenReplicas) {
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build());
  in.pol.queue.elastic = false;
  auto j = elastic_job("el", 2, 2, 6, 3600);
  j.replicas = 3;
  in.pending.push_back(j);
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 3U);
}

// ------------------------------------------------------------- scale-in

/// `count` workers of `gpus_per` GPUs each on node n, from GPU `first` on.
std::vector<replica_placement> workers(std::int32_t n, std::int32_t first, std::int32_t count, std::int32_t gpus_per) {
  std::vector<replica_placement> reps;
  for (std::int32_t w = 0; w < count; ++w) {
    replica_placement rp;
    rp.node = n;
    for (std::int32_t g = 0; g < gpus_per; ++g) rp.gpus.push_back(first + w * gpus_per + g);
    reps.push_back(std::move(rp));
  }
  return reps;
}

/// Adds a running job on `reps` (min_r > 0: elastic) and charges the snapshot.
void add_running(round_input& in, std::string name, std::vector<replica_placement> const& reps, std::int32_t min_r,
                 std::int32_t max_r, std::int64_t remaining, std::int32_t priority = 0) {
  running_job rj;
  rj.name = std::move(name);
  rj.priority = priority;
  rj.per_replica.gpus = static_cast<std::int32_t>(reps.front().gpus.size());
  rj.per_replica.cpu_milli = 1000;
  rj.per_replica.memory_mib = 1024;
  rj.replicas = reps;
  rj.gang = reps.size() > 1;
  rj.min_replicas = min_r;
  rj.max_replicas = max_r;
  rj.start_time = 0;
  rj.estimated_end = in.now + remaining;
  for (auto const& rp : reps) {
    auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
    for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
    nd.cpu_milli_free -= rj.per_replica.cpu_milli;
    nd.memory_mib_free -= rj.per_replica.memory_mib;
  }
  in.running.push_back(std::move(rj));
}

job inelastic_job(std::string name, std::int32_t gpus, std::int32_t replicas, std::int32_t priority = 0) {
  job j = elastic_job(std::move(name), gpus, replicas, 0, 1000);
  j.min_replicas = j.max_replicas = 0;
  j.replicas = replicas;
  j.gang = replicas > 1;
  j.priority = priority;
  return j;
}

/// Runs elastic_scale_in_for on every pending job (queue order) after the
/// core placed what it could, as queue_round does.
struct scale_in_run {
  detail::work_state ws;
  round_result out;
};
std::unique_ptr<scale_in_run> run_scale_in(solver& s, round_input const& in) {
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  auto run = std::make_unique<scale_in_run>(scale_in_run{detail::work_state(in), {}});
  detail::sub_round all;
  for (std::size_t j = 0; j < in.pending.size(); ++j) all.jobs.push_back(static_cast<std::int32_t>(j));
  run->out = detail::assign_jobs(core, run->ws, all);
  for (auto const& p : run->out.placements) run->ws.start(p.job, p.replicas);
  std::vector<std::int32_t> blocked;
  for (auto const& u : run->out.unplaced_jobs) blocked.push_back(u.job);
  detail::elastic_scale_in_for(core, run->ws, detail::queue_order(in, blocked), nullptr, run->out);
  return run;
}

TEST(ElasticScaleIn, BlockedInelasticJobShrinksExtrasAndIsPlaced) {
  // One node, 8 GPUs, all held by an elastic job (8 x 1 GPU, min 4). A
  // 3-GPU job of equal priority is blocked: three extras go (the lowest
  // replica indices: every choice of three costs the same) and it starts.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  add_running(in, "el", workers(0, 0, 8, 1), 4, 8, 3600);
  in.pending.push_back(inelastic_job("big", 3, 1));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.scale_ins.size(), 1U);
  EXPECT_EQ(r.scale_ins[0].job, "el");
  EXPECT_EQ(r.scale_ins[0].reason, "make-room");
  EXPECT_EQ(r.scale_ins[0].replicas, workers(0, 0, 3, 1));
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 0);
  EXPECT_EQ(r.placements[0].replicas.size(), 1U);
  EXPECT_TRUE(r.unplaced_jobs.empty());
  EXPECT_TRUE(r.scale_outs.empty());
  expect_round_invariants(in, r);

  // Direct: the donor's run gets longer (5 workers do the work of 8).
  auto const run = run_scale_in(s, in);
  ASSERT_EQ(run->ws.running[0].replicas.size(), 5U);
  EXPECT_EQ(run->ws.running[0].estimated_end, in.now + 3600 * 8 / 5);
  EXPECT_EQ(run->ws.state.nodes[0].gpu_free_milli, (std::vector<std::int32_t>(8, 0)));
}

TEST(ElasticScaleIn, OneEntryPerJobWhenSeveralJobsNeedRoom) {
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  add_running(in, "el", workers(0, 0, 8, 1), 2, 8, 3600);
  in.pending.push_back(inelastic_job("a", 2, 1));
  in.pending.push_back(inelastic_job("b", 2, 1));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.scale_ins.size(), 1U);
  EXPECT_EQ(r.scale_ins[0].replicas.size(), 4U);
  EXPECT_EQ(r.placements.size(), 2U);
  EXPECT_TRUE(r.unplaced_jobs.empty());
  expect_round_invariants(in, r);
}

TEST(ElasticScaleIn, NeverBelowTheMinimum) {
  // 8 workers, min 6: only 2 extras, the job needs 3 GPUs. Nothing changes.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  add_running(in, "el", workers(0, 0, 8, 1), 6, 8, 3600);
  in.pending.push_back(inelastic_job("big", 3, 1));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_TRUE(r.scale_ins.empty());
  EXPECT_TRUE(r.placements.empty());
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  // At min 5 exactly the 3 extras go and the job stays at its minimum.
  in.running[0].min_replicas = 5;
  auto const r5 = s.solve(in);
  ASSERT_EQ(r5.scale_ins.size(), 1U);
  EXPECT_EQ(r5.scale_ins[0].replicas.size(), 3U);
  expect_round_invariants(in, r5);
  // A gang spanning two nodes takes every extra, down to the minimum.
  auto in2 = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build());
  std::vector<replica_placement> reps = workers(0, 0, 4, 1);
  for (auto const& rp : workers(1, 0, 4, 1)) reps.push_back(rp);
  add_running(in2, "el", reps, 2, 8, 3600);
  in2.pending.push_back(inelastic_job("gang", 3, 2));
  auto const g = s.solve(in2);
  ASSERT_EQ(g.scale_ins.size(), 1U);
  EXPECT_EQ(g.scale_ins[0].replicas.size(), 6U);
  ASSERT_EQ(g.placements.size(), 1U);
  EXPECT_EQ(g.placements[0].replicas.size(), 2U);
  expect_round_invariants(in2, g);
}

TEST(ElasticScaleIn, NeverForALowerPriorityJob) {
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  add_running(in, "el", workers(0, 0, 8, 1), 2, 8, 3600, /*priority=*/5);
  in.pending.push_back(inelastic_job("low", 2, 1, /*priority=*/4));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_TRUE(r.scale_ins.empty());
  EXPECT_TRUE(r.placements.empty());
  // Equal and higher priority: the extras yield.
  for (std::int32_t p : {5, 6}) {
    in.pending[0].priority = p;
    auto const r2 = s.solve(in);
    ASSERT_EQ(r2.scale_ins.size(), 1U) << "priority " << p;
    EXPECT_EQ(r2.scale_ins[0].replicas.size(), 2U);
    EXPECT_EQ(r2.placements.size(), 1U);
  }
}

TEST(ElasticScaleIn, FewestReplicasRemoved) {
  // Two full nodes. Node 0: "two" (4 x 2 GPUs, min 1): the 4-GPU job needs
  // 2 of its replicas. Node 1: "one" (2 x 4 GPUs, min 1): 1 replica. "two"
  // comes first and loses less JCT (shorter run), yet one replica wins.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build());
  add_running(in, "two", workers(0, 0, 4, 2), 1, 4, 100);
  add_running(in, "one", workers(1, 0, 2, 4), 1, 2, 10000);
  in.pending.push_back(inelastic_job("j", 4, 1));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.scale_ins.size(), 1U);
  EXPECT_EQ(r.scale_ins[0].job, "one");
  EXPECT_EQ(r.scale_ins[0].replicas, workers(1, 0, 1, 4));
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  expect_round_invariants(in, r);
  // Same count: the least JCT loss wins (two 4-GPU donors on two nodes).
  auto in2 = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build());
  add_running(in2, "long", workers(0, 0, 2, 4), 1, 2, 10000);
  add_running(in2, "short", workers(1, 0, 2, 4), 1, 2, 100);
  in2.pending.push_back(inelastic_job("j", 4, 1));
  auto const r2 = s.solve(in2);
  ASSERT_EQ(r2.scale_ins.size(), 1U);
  EXPECT_EQ(r2.scale_ins[0].job, "short");
}

TEST(ElasticScaleIn, NothingChangesWhenAllExtrasWouldNotSuffice) {
  // 6 elastic workers (min 2: 4 extras) and an inelastic job on the last 2
  // GPUs. A 7-GPU job would not fit even with every extra gone.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build());
  add_running(in, "el", workers(0, 0, 6, 1), 2, 8, 3600);
  add_running(in, "fixed", workers(0, 6, 1, 2), 0, 0, 3600);
  in.pending.push_back(inelastic_job("huge", 7, 1));
  auto s = cpu_solver();
  auto const run = run_scale_in(s, in);
  EXPECT_TRUE(run->out.scale_ins.empty());
  EXPECT_TRUE(run->out.placements.empty());
  ASSERT_EQ(run->out.unplaced_jobs.size(), 1U);
  EXPECT_EQ(run->ws.running[0].replicas, in.running[0].replicas);
  EXPECT_EQ(run->ws.running[0].estimated_end, in.running[0].estimated_end);
  EXPECT_EQ(run->ws.state.nodes[0].gpu_free_milli, in.state.nodes[0].gpu_free_milli);
  auto const r = s.solve(in);
  EXPECT_TRUE(r.scale_ins.empty());
  EXPECT_TRUE(r.placements.empty());
}

TEST(ElasticScaleOut, SkippedWhileAnEqualOrHigherPriorityJobIsBlocked) {
  // Node 0: an elastic job at its minimum (4 x 1 GPU, max 8), 4 GPUs free.
  // Node 1: 5 GPUs held, 3 free. An 8-GPU job is blocked for capacity; the
  // elastic job has no extras to give, and must not take the spare GPUs
  // while the blocked job is of equal or higher priority.
  auto in = elastic_round(make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build());
  add_running(in, "el", workers(0, 0, 4, 1), 4, 8, 3600, /*priority=*/1);
  add_running(in, "fixed", workers(1, 0, 1, 5), 0, 0, 3600, /*priority=*/1);
  in.pending.push_back(inelastic_job("blocked", 8, 1, /*priority=*/1));
  auto s = cpu_solver();
  for (std::int32_t p : {1, 2}) {
    in.pending[0].priority = p;
    auto const r = s.solve(in);
    EXPECT_TRUE(r.scale_outs.empty()) << "priority " << p;
    EXPECT_TRUE(r.scale_ins.empty());
    ASSERT_EQ(r.unplaced_jobs.size(), 1U);
    EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::insufficient_capacity);
  }
  // A lower-priority blocked job does not hold growth back.
  in.pending[0].priority = 0;
  auto const r = s.solve(in);
  ASSERT_EQ(r.scale_outs.size(), 1U);
  EXPECT_EQ(r.scale_outs[0].job, "el");
  EXPECT_EQ(r.scale_outs[0].replicas.size(), 4U);
  expect_round_invariants(in, r);
  // Nor does one the spare GPUs it could grow into are no use to: an
  // inference job blocked on the inference node 1, the elastic job growing
  // on the training node 0.
  in.pending[0].priority = 1;
  in.pending[0].kind = job_kind::inference;
  in.state.nodes[0].pool = pool_kind::training;
  in.state.nodes[1].pool = pool_kind::inference;
  in.running[1].kind = job_kind::inference;  // not loaned work: no reclaim
  auto const ri = s.solve(in);
  ASSERT_EQ(ri.unplaced_jobs.size(), 1U);
  EXPECT_EQ(ri.unplaced_jobs[0].reason, unplaced_reason::insufficient_capacity);
  ASSERT_EQ(ri.scale_outs.size(), 1U);
  EXPECT_EQ(ri.scale_outs[0].replicas.size(), 4U);
  for (auto const& rp : ri.scale_outs[0].replicas) EXPECT_EQ(rp.node, 0);
}

TEST(ElasticScaleIn, RandomRoundsKeepInvariantsAndAreDeterministic) {
  // Random clusters filled by elastic running jobs (extras above their
  // minimum) and random pending work, with the other policies randomly on:
  // the round invariants hold (scale-ins remove replicas the job has and
  // keep it at or above its minimum), every make-room scale-in serves a
  // job of equal or higher priority, and the round is deterministic.
  std::mt19937_64 rng(20261207);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto s = cpu_solver();
  int make_room = 0;
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    round_input first = testing_support::random_round(rng, 4, 20);
    for (auto& j : first.pending) {
      j.replicas = pick(1, 6);
      j.gang = false;
      j.topo_mode = topology_mode::none;
    }
    round_result const placed = s.solve(first);
    round_input in = testing_support::with_running(rng, first, placed, 75);
    in.pending = testing_support::random_round(rng, 4, 20).pending;
    for (auto& j : in.pending) {
      j.estimated_duration = pick(0, 4000);
      j.preemptible = pick(0, 1) == 1;
      if (j.replicas > 1 && pick(0, 2) == 0) {
        j.min_replicas = pick(1, j.replicas);
        j.max_replicas = j.replicas + pick(0, 2);
        j.distinct_nodes = false;  // not with an elastic range (validate)
      }
    }
    auto& q = in.pol.queue;
    q.elastic = true;
    q.preemption = pick(0, 1) == 1;
    q.backfill = static_cast<backfill_mode>(pick(0, 2));
    q.loaning = pick(0, 1) == 1;
    q.delay_scheduling = pick(0, 2) == 0;

    round_result const a = s.solve(in);
    expect_round_invariants(in, a);
    std::int32_t top_placed = std::numeric_limits<std::int32_t>::min();
    for (auto const& p : a.placements) top_placed = std::max(top_placed, in.pending[p.job].priority);
    for (auto const& sc : a.scale_ins) {
      if (sc.reason != "make-room") continue;
      ++make_room;
      auto it = std::find_if(in.running.begin(), in.running.end(), [&](running_job const& rj) { return rj.name == sc.job; });
      ASSERT_NE(it, in.running.end());
      EXPECT_GT(it->min_replicas, 0) << sc.job << " is not elastic";
      EXPECT_LE(it->priority, top_placed) << sc.job << " shrunk for no job of its priority or higher";
    }
    round_result const b = s.solve(in);
    ASSERT_EQ(a.placements.size(), b.placements.size());
    for (std::size_t k = 0; k < a.placements.size(); ++k) EXPECT_EQ(a.placements[k].replicas, b.placements[k].replicas);
    ASSERT_EQ(a.scale_ins.size(), b.scale_ins.size());
    for (std::size_t k = 0; k < a.scale_ins.size(); ++k) EXPECT_EQ(a.scale_ins[k].replicas, b.scale_ins[k].replicas);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(make_room, 20);  // the instances must exercise the scale-in
  std::printf("[ stats    ] %d make-room scale-ins\n", make_room);
}

}  // namespace
}  // namespace placer
