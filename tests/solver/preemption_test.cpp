// Minimum-cost preemption (solver/src/policies/preemption.cpp): hand-checked
// victim choices, the never-rules (equal/higher priority, non-preemptible,
// partial gangs, preempting for nothing), per-domain gangs, network scope,
// and a brute force over every victim subset on random small rounds.
#include "policies/policies.hpp"
#include "../support/running.hpp"

#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>

namespace placer {
namespace {

using detail::preempt_for;
using detail::preempt_scope;
using detail::work_state;

constexpr std::int64_t now = 10000;

solver cpu_solver() { return solver(kernels::select_backend("cpu")); }

job gpu_job(std::string name, int gpus, int replicas = 1, int priority = 10) {
  job j;
  j.name = std::move(name);
  j.priority = priority;
  j.replicas = replicas;
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  return j;
}

/// testing_support::run_on with a priority and preemptibility.
running_job& run_on(round_input& in, std::string name, std::vector<std::pair<int, std::vector<int>>> const& reps,
                    std::int64_t secs_since_ckpt, int priority = 0, bool preemptible = true) {
  auto& r = testing_support::run_on(in, std::move(name), reps, secs_since_ckpt);
  r.priority = priority;
  r.preemptible = preemptible;
  return r;
}

round_input base_round(int spines, int leaves, int nodes_per_leaf, int gpus = 8) {
  round_input in;
  in.state = make_cluster().spines(spines).leaves_per_spine(leaves).nodes_per_leaf(nodes_per_leaf).gpus(gpus).build();
  in.now = now;
  in.pol.queue.preemption = true;
  in.pol.queue.preempt_max_lost_s = -1;  // any victim: the window has its own test
  return in;
}

std::set<std::string> victims_of(round_result const& r) {
  std::set<std::string> v;
  for (auto const& p : r.preemptions) v.insert(p.job);
  return v;
}

std::set<int> nodes_of(placement const& p) {
  std::set<int> s;
  for (auto const& rp : p.replicas) s.insert(rp.node);
  return s;
}

/// The pending jobs the core leaves unplaced, as queue_round hands them over.
round_result core_round(detail::core_fn const& core, work_state& ws) {
  detail::sub_round all;
  for (std::size_t j = 0; j < ws.in.pending.size(); ++j) all.jobs.push_back(static_cast<std::int32_t>(j));
  round_result out = detail::assign_jobs(core, ws, all);
  for (auto const& p : out.placements) ws.start(p.job, p.replicas);
  return out;
}

// ------------------------------------------------------------ hand-checked

TEST(Preemption, CheaperPrefixOfVictimsWinsAcrossNodes) {
  auto in = base_round(1, 1, 2);
  // Node 0: victims of 4 GPUs costing 4000 x 10 and 4000 x 100 (total 440k);
  // node 1: 4000 x 30 and 4000 x 40 (280k). An 8-GPU job needs a whole node.
  run_on(in, "n0-cheap", {{0, {0, 1, 2, 3}}}, 10);
  run_on(in, "n0-dear", {{0, {4, 5, 6, 7}}}, 100);
  run_on(in, "n1-a", {{1, {0, 1, 2, 3}}}, 30);
  run_on(in, "n1-b", {{1, {4, 5, 6, 7}}}, 40);
  in.pending.push_back(gpu_job("urgent", 8));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(nodes_of(r.placements[0]), (std::set<int>{1}));
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"n1-a", "n1-b"}));
  std::int64_t lost = 0;
  for (auto const& p : r.preemptions) {
    EXPECT_EQ(p.reason, "priority");
    EXPECT_EQ(p.for_job, 0);
    lost += p.lost_work;
  }
  EXPECT_EQ(lost, 4000 * 30 + 4000 * 40);
  EXPECT_TRUE(r.unplaced_jobs.empty());
}

TEST(Preemption, ExactSetBeatsTheCheapestPrefixOnOneNode) {
  auto in = base_round(1, 1, 1);
  // The cheapest prefix freeing 4 GPUs is {2 GPUs x 5 s, 2 GPUs x 6 s} =
  // 22k; the single 4-GPU victim at 4000 x 4 s = 16k is cheaper.
  run_on(in, "two-a", {{0, {0, 1}}}, 5);
  run_on(in, "two-b", {{0, {2, 3}}}, 6);
  run_on(in, "four", {{0, {4, 5, 6, 7}}}, 4);
  in.pending.push_back(gpu_job("urgent", 4));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"four"}));
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].lost_work, 16000);
  EXPECT_EQ(r.placements[0].replicas[0].gpus, (std::vector<std::int32_t>{4, 5, 6, 7}));
}

// By default a victim must be within 120 s of its last checkpoint: the
// blocked job waits for the next one rather than destroy work. Across the
// ITP clusters and loads that took preemption's worst mean wait from 1.83x
// of no policy to 0.99x (docs/policies.md, "Preemption with minimum cost").
TEST(Preemption, VictimsOnlyNearTheirCheckpoint) {
  auto in = base_round(1, 1, 1);
  in.pol.queue.preempt_max_lost_s = queue_policy{}.preempt_max_lost_s;
  ASSERT_EQ(in.pol.queue.preempt_max_lost_s, 120);
  run_on(in, "cheap-but-late", {{0, {0}}}, 200);     // 1 GPU x 200 s lost
  run_on(in, "just-saved", {{0, {4, 5, 6, 7}}}, 100);  // 4 GPUs x 100 s lost
  in.pending.push_back(gpu_job("urgent", 4));
  auto s = cpu_solver();
  auto r = s.solve(in);
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"just-saved"}));
  ASSERT_EQ(r.placements.size(), 1U);
  // With any victim allowed, the least lost work goes.
  in.pol.queue.preempt_max_lost_s = -1;
  r = s.solve(in);
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"cheap-but-late"}));
  // Neither within 60 s of a checkpoint: nothing is preempted, the job waits.
  in.pol.queue.preempt_max_lost_s = 60;
  r = s.solve(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());
}

TEST(Preemption, NeverEqualOrHigherPriorityOrNonPreemptible) {
  auto in = base_round(1, 1, 1);
  run_on(in, "equal", {{0, {0, 1}}}, 1, /*priority=*/10);
  run_on(in, "higher", {{0, {2, 3}}}, 1, /*priority=*/11);
  run_on(in, "pinned", {{0, {4, 5}}}, 1, /*priority=*/0, /*preemptible=*/false);
  run_on(in, "fair-game", {{0, {6, 7}}}, 1000, /*priority=*/9);
  in.pending.push_back(gpu_job("urgent", 4, 1, 10));
  auto s = cpu_solver();
  auto r = s.solve(in);
  // Only "fair-game" may go and it frees 2 of the 4 GPUs: nobody is preempted.
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);

  // A 2-GPU job fits by stopping "fair-game", however expensive it is.
  in.pending = {gpu_job("urgent", 2, 1, 10)};
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"fair-game"}));
}

TEST(Preemption, GangVictimIsStoppedWholeOnEveryNode) {
  auto in = base_round(1, 1, 3);
  // A gang holds 8 GPUs on nodes 0 and 1 (cost 2 x 8000 x 10 = 160k); node 2
  // holds a single job costing 8000 x 25 = 200k. Per node the gang is
  // cheaper, and stopping it frees node 1 as well.
  run_on(in, "gang", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "single", {{2, {0, 1, 2, 3, 4, 5, 6, 7}}}, 25);
  in.pending.push_back(gpu_job("urgent", 8));
  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  work_state ws(in);
  round_result out = core_round(core, ws);
  ASSERT_EQ(out.unplaced_jobs.size(), 1U);
  preempt_for(core, ws, {0}, preempt_scope::priority, nullptr, out);
  ASSERT_EQ(out.preemptions.size(), 1U);
  EXPECT_EQ(out.preemptions[0].job, "gang");
  EXPECT_EQ(out.preemptions[0].lost_work, 2 * 8000 * 10);
  EXPECT_EQ(ws.alive[0], 0);
  EXPECT_EQ(ws.alive[1], 1);
  // Both of the gang's nodes were given back; the job took one of them.
  ASSERT_EQ(out.placements.size(), 1U);
  auto const used = out.placements[0].replicas[0].node;
  EXPECT_TRUE(used == 0 || used == 1);
  auto const other = used == 0 ? 1 : 0;
  for (auto f : ws.state.nodes[static_cast<std::size_t>(other)].gpu_free_milli) EXPECT_EQ(f, 1000);
  EXPECT_TRUE(out.unplaced_jobs.empty());
}

TEST(Preemption, GangVictimFreesRoomForLaterReplicasAtNoExtraCost) {
  auto in = base_round(1, 1, 3);
  // A non-gang job of two 8-GPU replicas: the first replica stops the gang
  // (cheaper than "single" on node 2), the second lands on the gang's other
  // node for nothing; "single" survives.
  run_on(in, "gang", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "single", {{2, {0, 1, 2, 3, 4, 5, 6, 7}}}, 25);
  in.pending.push_back(gpu_job("pair", 8, 2));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(nodes_of(r.placements[0]), (std::set<int>{0, 1}));
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"gang"}));
  EXPECT_TRUE(r.unplaced_jobs.empty());
}

TEST(Preemption, PendingGangPreemptsInsideOneDomain) {
  // Two leaves of two 8-GPU nodes, all full. Leaf 0 costs 8000 x (10 + 10),
  // leaf 1 costs 8000 x (5 + 30); across leaves 5 + 10 would be cheapest.
  auto in = base_round(1, 2, 2);
  run_on(in, "l0-a", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "l0-b", {{1, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "l1-a", {{2, {0, 1, 2, 3, 4, 5, 6, 7}}}, 5);
  run_on(in, "l1-b", {{3, {0, 1, 2, 3, 4, 5, 6, 7}}}, 30);
  auto g = gpu_job("gang", 8, 2);
  g.gang = true;
  g.topology_level = 2;  // leaf
  g.topo_mode = topology_mode::required;
  in.pending.push_back(g);
  auto s = cpu_solver();
  auto r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(nodes_of(r.placements[0]), (std::set<int>{0, 1}));
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"l0-a", "l0-b"}));

  // Without the topology need the cheapest two nodes anywhere win.
  in.pending[0].topo_mode = topology_mode::none;
  in.pending[0].topology_level = -1;
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas.size(), 2U);
  EXPECT_EQ(victims_of(r), (std::set<std::string>{"l1-a", "l0-a"}));
}

TEST(Preemption, NothingIsPreemptedWhenTheJobStillWouldNotFit) {
  auto in = base_round(1, 1, 2);
  run_on(in, "low-0", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}}, 1);
  run_on(in, "low-1", {{1, {0, 1, 2, 3}}}, 1);
  run_on(in, "high-1", {{1, {4, 5, 6, 7}}}, 1, /*priority=*/50);
  // A gang of three 8-GPU replicas cannot fit on two nodes whatever goes.
  auto g = gpu_job("big-gang", 8, 3);
  g.gang = true;
  in.pending.push_back(g);
  auto s = cpu_solver();
  auto r = s.solve(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::gang_incomplete);

  // A 2 x 8-GPU gang: node 1 keeps "high-1", so freeing node 0 is not enough.
  in.pending[0].replicas = 2;
  r = s.solve(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());
}

TEST(Preemption, JobsAreServedInQueueOrderOnWhatEarlierOnesLeft) {
  auto in = base_round(1, 1, 1);
  run_on(in, "victim", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10, /*priority=*/0);
  in.pending.push_back(gpu_job("first", 4, 1, 20));
  in.pending.push_back(gpu_job("second", 4, 1, 10));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  // "first" stops the victim; "second" then fits without another preemption.
  EXPECT_EQ(r.placements.size(), 2U);
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].for_job, 0);
}

TEST(Preemption, NetworkScopeSparesSensitiveWorkAndConsolidates) {
  auto in = base_round(1, 2, 2);
  // Leaf 0: insensitive victims 8000 x (50 + 50); leaf 1: cheap, but one of
  // them is network-sensitive, so it cannot be preempted by this scope.
  run_on(in, "l0-a", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}}, 50);
  run_on(in, "l0-b", {{1, {0, 1, 2, 3, 4, 5, 6, 7}}}, 50);
  run_on(in, "l1-a", {{2, {0, 1, 2, 3, 4, 5, 6, 7}}}, 1);
  run_on(in, "l1-sensitive", {{3, {0, 1, 2, 3, 4, 5, 6, 7}}}, 1).network_sensitivity = 0.9F;
  auto g = gpu_job("sensitive-gang", 8, 2);
  g.gang = true;
  g.network_sensitivity = 0.9F;
  in.pending.push_back(g);
  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  work_state ws(in);
  round_result out = core_round(core, ws);
  preempt_for(core, ws, {0}, preempt_scope::network, nullptr, out);
  ASSERT_EQ(out.placements.size(), 1U);
  EXPECT_EQ(nodes_of(out.placements[0]), (std::set<int>{0, 1}));
  EXPECT_EQ(victims_of(out), (std::set<std::string>{"l0-a", "l0-b"}));
  for (auto const& p : out.preemptions) EXPECT_EQ(p.reason, "network");
}

TEST(Preemption, OverridesGiveTheShapeSearched) {
  auto in = base_round(1, 2, 2);
  run_on(in, "l0-a", {{0, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "l0-b", {{1, {0, 1, 2, 3, 4, 5, 6, 7}}}, 10);
  run_on(in, "l1-a", {{2, {0, 1, 2, 3, 4, 5, 6, 7}}}, 5);
  run_on(in, "l1-b", {{3, {0, 1, 2, 3, 4, 5, 6, 7}}}, 30);
  auto g = gpu_job("gang", 8, 2);
  g.gang = true;
  in.pending.push_back(g);
  // The override (as delay scheduling writes it) requires one leaf.
  std::vector<job> overrides = in.pending;
  overrides[0].topology_level = 2;
  overrides[0].topo_mode = topology_mode::required;
  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  work_state ws(in);
  round_result out = core_round(core, ws);
  preempt_for(core, ws, {0}, preempt_scope::priority, &overrides, out);
  ASSERT_EQ(out.placements.size(), 1U);
  EXPECT_EQ(victims_of(out), (std::set<std::string>{"l0-a", "l0-b"}));
}

// --------------------------------------------------------------- brute force

/// Random round: a small cluster of 4-GPU nodes full of running jobs (whole
/// GPUs, fractional shares, gangs across nodes) of mixed priority and
/// preemptibility, and one pending job (single replica or gang, maybe
/// required in one leaf).
round_input random_preemption_round(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  round_input in = base_round(1, pick(1, 2), pick(1, 3), 8);
  in.state.nodes[0].cpu_milli_free = in.state.nodes[0].cpu_milli_capacity = 6000;  // a CPU-bound node too
  auto const n_nodes = static_cast<int>(in.state.nodes.size());
  int const n_jobs = pick(4, 24);
  int candidates = 0;  // at most 10 victim candidates (brute force: 2^10 subsets)
  for (int k = 0; k < n_jobs; ++k) {
    running_job r;
    r.name = "r" + std::to_string(k);
    r.priority = pick(0, 9) < 8 ? pick(0, 4) : pick(5, 7);
    r.preemptible = pick(0, 5) != 0;
    r.start_time = 0;
    r.last_checkpoint = now - pick(0, 60);
    int const reps = pick(0, 3) == 0 ? 2 : 1;
    bool const share = reps == 1 && pick(0, 3) == 0;
    r.per_replica.gpus = share ? 1 : pick(1, 4);
    r.per_replica.gpu_milli = share ? pick(1, 9) * 100 : 1000;
    r.per_replica.cpu_milli = 1000;
    r.per_replica.memory_mib = 1024;
    r.gang = reps > 1;
    int const first = pick(0, n_nodes - 1);
    for (int i = 0; i < reps; ++i) {
      int const n = (first + i) % n_nodes;
      auto& nd = in.state.nodes[static_cast<std::size_t>(n)];
      if (nd.cpu_milli_free < 1000) break;
      replica_placement rp;
      rp.node = n;
      rp.gpu_milli = r.per_replica.gpu_milli;
      for (int g = 0; g < nd.gpu_count() && static_cast<int>(rp.gpus.size()) < r.per_replica.gpus; ++g) {
        if (nd.gpu_free_milli[static_cast<std::size_t>(g)] >= rp.gpu_milli) rp.gpus.push_back(g);
      }
      if (static_cast<int>(rp.gpus.size()) < r.per_replica.gpus) break;
      for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
      nd.cpu_milli_free -= 1000;
      nd.memory_mib_free -= 1024;
      r.replicas.push_back(rp);
    }
    if (static_cast<int>(r.replicas.size()) < reps) {  // did not fit: give back, skip
      for (auto const& rp : r.replicas) {
        auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
        for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] += rp.gpu_milli;
        nd.cpu_milli_free += 1000;
        nd.memory_mib_free += 1024;
      }
      continue;
    }
    if (r.preemptible && r.priority < 5 && ++candidates > 10) r.preemptible = false;
    in.running.push_back(std::move(r));
  }
  job j;
  j.name = "pending";
  j.priority = 5;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  if (pick(0, 3) == 0) {
    j.per_replica.gpus = 1;
    j.per_replica.gpu_milli = pick(2, 9) * 100;
  } else {
    j.per_replica.gpus = pick(2, 8);
  }
  if (pick(0, 2) == 0) {
    j.replicas = 2;
    j.gang = true;
    if (pick(0, 1) == 0) {
      j.topology_level = 2;
      j.topo_mode = topology_mode::required;
    }
  }
  in.pending.push_back(j);
  return in;
}

TEST(Preemption, BruteForceChosenSetHasMinimumCost) {
  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  int checked = 0, preempted = 0, impossible = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    auto const in = random_preemption_round(rng);
    SCOPED_TRACE("seed " + std::to_string(seed));
    // Candidates by the rules, independently of the implementation.
    std::vector<std::size_t> cands;
    for (std::size_t r = 0; r < in.running.size(); ++r) {
      if (in.running[r].preemptible && in.running[r].priority < in.pending[0].priority) cands.push_back(r);
    }
    ASSERT_LE(cands.size(), 10U);
    // Brute force: every subset, fit checked by the core on the whole
    // cluster with the subset stopped (subsets no cheaper than the best
    // so far are skipped: they cannot improve it).
    work_state const clean(in);
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for (std::uint32_t m = 0; m < (1U << cands.size()); ++m) {
      std::int64_t cost = 0;
      for (std::size_t k = 0; k < cands.size(); ++k) {
        if ((m >> k) & 1U) cost += clean.lost_work(cands[k]);
      }
      if (cost >= best) continue;
      work_state trial(in);
      for (std::size_t k = 0; k < cands.size(); ++k) {
        if ((m >> k) & 1U) trial.stop(cands[k]);
      }
      detail::sub_round sub;
      sub.jobs = {0};
      auto const r = detail::assign_jobs(core, trial, sub);
      if (r.placements.size() == 1 && static_cast<int>(r.placements[0].replicas.size()) == in.pending[0].replicas) {
        best = cost;
      }
    }

    work_state ws(in);
    round_result out = core_round(core, ws);
    if (!out.placements.empty()) continue;  // fits without preemption: nothing to check
    ++checked;
    preempt_for(core, ws, {0}, preempt_scope::priority, nullptr, out);
    std::int64_t chosen = 0;
    for (auto const& p : out.preemptions) chosen += p.lost_work;
    if (best == std::numeric_limits<std::int64_t>::max()) {
      ++impossible;
      EXPECT_TRUE(out.preemptions.empty()) << "preempted for a job that cannot fit";
      EXPECT_TRUE(out.placements.empty());
      continue;
    }
    ++preempted;
    ASSERT_EQ(out.placements.size(), 1U);
    EXPECT_EQ(static_cast<int>(out.placements[0].replicas.size()), in.pending[0].replicas);
    EXPECT_EQ(chosen, best);
    // Every victim was a legal candidate, stopped whole; nothing over-committed.
    for (auto const& p : out.preemptions) {
      auto it = std::find_if(cands.begin(), cands.end(), [&](std::size_t r) { return in.running[r].name == p.job; });
      ASSERT_NE(it, cands.end()) << p.job << " was not a candidate";
      EXPECT_EQ(ws.alive[*it], 0);
    }
    for (auto const& nd : ws.state.nodes) {
      for (auto f : nd.gpu_free_milli) EXPECT_GE(f, 0);
      EXPECT_GE(nd.cpu_milli_free, 0);
    }
  }
  // The random rounds exercise both outcomes.
  EXPECT_GT(preempted, 50);
  EXPECT_GT(impossible, 5);
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace placer
