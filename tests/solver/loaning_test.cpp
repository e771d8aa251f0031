// Capacity loaning: reclaim (solver/src/policies/loaning.cpp). Explicit
// requests return exactly the nodes asked for; nodes go cheapest first by
// server preemption cost (recomputed after each choice); elastic jobs are
// shrunk rather than preempted; gangs go whole; unplaced inference jobs take
// back only as many nodes as they need, and none when it would not help.
//
// End-to-end cases go through solver::solve with only the default loaning
// on: the solver takes the policy path by itself when inference work is
// pending while training runs on inference nodes, or reclaim_nodes > 0.
#include "policies/policies.hpp"
#include "../support/running.hpp"

#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace placer {
namespace {

using detail::reclaim_loaned;
using detail::work_state;

constexpr std::int64_t now = 10000;

solver cpu_solver() { return solver(kernels::select_backend("cpu")); }

/// n 8-GPU nodes in one leaf: the first `inference` are loanable inference
/// nodes, the rest training nodes.
round_input loan_round(int inference, int training) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(inference + training).gpus(8).build();
  for (int n = 0; n < inference + training; ++n) {
    auto& nd = in.state.nodes[static_cast<std::size_t>(n)];
    nd.pool = n < inference ? pool_kind::inference : pool_kind::training;
    nd.loanable = n < inference;
  }
  in.now = now;
  in.pol.queue.loaning = true;
  return in;
}

using testing_support::run_on;

std::vector<int> const all8 = {0, 1, 2, 3, 4, 5, 6, 7};

job inference_job(std::string name, int gpus, int replicas = 1) {
  job j;
  j.name = std::move(name);
  j.kind = job_kind::inference;
  j.replicas = replicas;
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  return j;
}

std::set<std::string> preempted(round_result const& r) {
  std::set<std::string> v;
  for (auto const& p : r.preemptions) v.insert(p.job);
  return v;
}

detail::core_fn core_of(solver& s) {
  return [&s](round_input const& sub) { return s.solve(sub); };
}

TEST(Loaning, ExplicitRequestReturnsExactlyThatManyNodes) {
  auto in = loan_round(4, 1);
  for (int n = 0; n < 4; ++n) run_on(in, "train-" + std::to_string(n), {{n, all8}}, 10 + n);
  auto s = cpu_solver();
  for (int want : {1, 2, 3}) {
    in.pol.queue.reclaim_nodes = want;
    auto const r = s.solve(in);
    EXPECT_EQ(static_cast<int>(r.reclaimed_nodes.size()), want);
    EXPECT_EQ(static_cast<int>(r.preemptions.size()), want);
    std::set<int> distinct(r.reclaimed_nodes.begin(), r.reclaimed_nodes.end());
    EXPECT_EQ(distinct.size(), r.reclaimed_nodes.size());
    for (auto const& p : r.preemptions) {
      EXPECT_EQ(p.reason, "reclaim");
      EXPECT_EQ(p.for_job, -1);
    }
  }
  // More than there are: every loaned node, and nothing else (node 4 is a
  // training node).
  in.pol.queue.reclaim_nodes = 10;
  auto const r = s.solve(in);
  EXPECT_EQ(std::set<int>(r.reclaimed_nodes.begin(), r.reclaimed_nodes.end()), (std::set<int>{0, 1, 2, 3}));
}

TEST(Loaning, LowestServerPreemptionCostFirst) {
  auto in = loan_round(5, 2);
  // Node 0: one job just checkpointed (cost 1, no lost work). Node 1: two
  // jobs (cost 2). Node 2: one job, much lost work. Node 3: one job, little
  // lost work. Node 4: an elastic job that can shrink (cost 0), so it goes
  // before node 0 although both lose nothing. Nodes 5-6: training.
  run_on(in, "fresh", {{0, all8}}, 0);
  run_on(in, "n1-a", {{1, {0, 1, 2, 3}}}, 1);
  run_on(in, "n1-b", {{1, {4, 5, 6, 7}}}, 1);
  run_on(in, "dear", {{2, all8}}, 500);
  run_on(in, "cheap", {{3, all8}}, 20);
  auto& e = run_on(in, "elastic", {{4, all8}, {5, all8}, {6, all8}}, 900);
  e.min_replicas = 2;
  e.max_replicas = 3;
  auto s = cpu_solver();
  in.pol.queue.reclaim_nodes = 4;
  in.pol.queue.elastic = true;
  auto const r = s.solve(in);
  EXPECT_EQ(r.reclaimed_nodes, (std::vector<std::int32_t>{4, 0, 3, 2}));
  EXPECT_EQ(preempted(r), (std::set<std::string>{"fresh", "cheap", "dear"}));
  ASSERT_EQ(r.scale_ins.size(), 1U);
  EXPECT_EQ(r.scale_ins[0].job, "elastic");
}

TEST(Loaning, ElasticJobIsShrunkWhenItCanStayAtItsMinimum) {
  auto in = loan_round(1, 2);
  auto& e = run_on(in, "elastic", {{0, all8}, {1, all8}, {2, all8}}, 100);
  e.min_replicas = 2;
  e.max_replicas = 4;
  in.pol.queue.reclaim_nodes = 1;
  auto s = cpu_solver();
  auto core = core_of(s);
  {
    // Elastic policy off: the range is not the solver's to use, so a
    // reclaim preempts the job whole.
    work_state ws(in);
    round_result out;
    reclaim_loaned(core, ws, {}, nullptr, out);
    EXPECT_TRUE(out.scale_ins.empty());
    EXPECT_EQ(preempted(out), (std::set<std::string>{"elastic"}));
  }
  in.pol.queue.elastic = true;
  {
    work_state ws(in);
    round_result out;
    reclaim_loaned(core, ws, {}, nullptr, out);
    EXPECT_EQ(out.reclaimed_nodes, (std::vector<std::int32_t>{0}));
    EXPECT_TRUE(out.preemptions.empty());
    ASSERT_EQ(out.scale_ins.size(), 1U);
    EXPECT_EQ(out.scale_ins[0].reason, "reclaim");
    ASSERT_EQ(out.scale_ins[0].replicas.size(), 1U);
    EXPECT_EQ(out.scale_ins[0].replicas[0].node, 0);
    EXPECT_EQ(ws.alive[0], 1);
    EXPECT_EQ(ws.running[0].replicas.size(), 2U);
    for (auto f : ws.state.nodes[0].gpu_free_milli) EXPECT_EQ(f, 1000);
    // The node is back with inference: not lent again this round.
    EXPECT_FALSE(ws.state.nodes[0].loanable);
  }
  // At its minimum already: preempted whole, replicas on training nodes too.
  in.running[0].min_replicas = 3;
  work_state ws(in);
  round_result out;
  reclaim_loaned(core, ws, {}, nullptr, out);
  EXPECT_TRUE(out.scale_ins.empty());
  EXPECT_EQ(preempted(out), (std::set<std::string>{"elastic"}));
  EXPECT_EQ(ws.alive[0], 0);
  for (auto f : ws.state.nodes[2].gpu_free_milli) EXPECT_EQ(f, 1000);
}

TEST(Loaning, CostsAreRecomputedAfterEachChoice) {
  auto in = loan_round(3, 0);
  // The elastic job (2 replicas, min 1) can lose one of its two: node 0
  // (lowest index among the cost-0 nodes) goes first by a shrink. Then its
  // last replica, on node 1, would be a preemption with more lost work than
  // "small" on node 2, so node 2 goes next, not node 1.
  auto& e = run_on(in, "elastic", {{0, all8}, {1, all8}}, 100);
  e.min_replicas = 1;
  e.max_replicas = 2;
  run_on(in, "small", {{2, all8}}, 10);
  in.pol.queue.reclaim_nodes = 2;
  in.pol.queue.elastic = true;
  auto s = cpu_solver();
  auto core = core_of(s);
  work_state ws(in);
  round_result out;
  reclaim_loaned(core, ws, {}, nullptr, out);
  EXPECT_EQ(out.reclaimed_nodes, (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(preempted(out), (std::set<std::string>{"small"}));
  ASSERT_EQ(out.scale_ins.size(), 1U);
  EXPECT_EQ(ws.running[0].replicas.size(), 1U);
  EXPECT_EQ(ws.running[0].replicas[0].node, 1);
}

TEST(Loaning, GangIsPreemptedWholeAndItsOtherNodeCostsNothing) {
  auto in = loan_round(3, 0);
  run_on(in, "gang", {{0, all8}, {1, all8}}, 10);
  run_on(in, "single", {{2, all8}}, 1);
  in.pol.queue.reclaim_nodes = 2;
  auto s = cpu_solver();
  auto core = core_of(s);
  work_state ws(in);
  round_result out;
  reclaim_loaned(core, ws, {}, nullptr, out);
  // "single" is cheaper (less lost work) and goes first; then the gang's two
  // nodes cost the same and node 0 wins on index, stopping the gang whole.
  EXPECT_EQ(out.reclaimed_nodes, (std::vector<std::int32_t>{2, 0}));
  EXPECT_EQ(preempted(out), (std::set<std::string>{"single", "gang"}));
  for (auto f : ws.state.nodes[1].gpu_free_milli) EXPECT_EQ(f, 1000);  // never partly

  // Asking for three: the gang's other node comes at no further preemption.
  in.pol.queue.reclaim_nodes = 3;
  work_state ws3(in);
  round_result out3;
  reclaim_loaned(core, ws3, {}, nullptr, out3);
  EXPECT_EQ(out3.reclaimed_nodes, (std::vector<std::int32_t>{2, 0, 1}));
  EXPECT_EQ(out3.preemptions.size(), 2U);
}

TEST(Loaning, InferenceJobIsPlacedOnTheCheapestReclaimedNode) {
  auto in = loan_round(3, 1);
  run_on(in, "dear", {{0, all8}}, 300);
  run_on(in, "cheap", {{1, all8}}, 5);
  run_on(in, "middle", {{2, all8}}, 50);
  in.pending.push_back(inference_job("serve", 8));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_EQ(r.reclaimed_nodes, (std::vector<std::int32_t>{1}));  // only as many as needed
  EXPECT_EQ(preempted(r), (std::set<std::string>{"cheap"}));
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  EXPECT_TRUE(r.unplaced_jobs.empty());

  // Two replicas need two nodes: the two cheapest.
  in.pending = {inference_job("serve", 8, 2)};
  auto const r2 = s.solve(in);
  EXPECT_EQ(r2.reclaimed_nodes, (std::vector<std::int32_t>{1, 2}));
  ASSERT_EQ(r2.placements.size(), 1U);
  EXPECT_EQ(r2.placements[0].replicas.size(), 2U);
}

TEST(Loaning, ExplicitRequestComesOnTopOfWhatInferenceNeeds) {
  auto in = loan_round(4, 0);
  for (int n = 0; n < 4; ++n) run_on(in, "train-" + std::to_string(n), {{n, all8}}, 10 * (n + 1));
  in.pending.push_back(inference_job("serve", 4));
  in.pol.queue.reclaim_nodes = 1;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_EQ(r.reclaimed_nodes, (std::vector<std::int32_t>{0, 1}));
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 0);
}

TEST(Loaning, NothingIsReclaimedWhenItWouldNotHelp) {
  auto s = cpu_solver();
  {
    // The inference job wants another GPU model than the loaned nodes have.
    auto in = loan_round(2, 0);
    run_on(in, "t0", {{0, all8}}, 1);
    run_on(in, "t1", {{1, all8}}, 1);
    auto j = inference_job("serve", 8);
    j.allowed_gpu_models = {"A100"};
    in.pending.push_back(j);
    auto const r = s.solve(in);
    EXPECT_TRUE(r.reclaimed_nodes.empty());
    EXPECT_TRUE(r.preemptions.empty());
    EXPECT_EQ(r.unplaced_jobs.size(), 1U);
  }
  {
    // A gang of three 8-GPU replicas and two loaned nodes: reclaiming both
    // would still not place it, so neither is taken.
    auto in = loan_round(2, 0);
    run_on(in, "t0", {{0, all8}}, 1);
    run_on(in, "t1", {{1, all8}}, 1);
    auto j = inference_job("serve", 8, 3);
    j.gang = true;
    in.pending.push_back(j);
    auto const r = s.solve(in);
    EXPECT_TRUE(r.reclaimed_nodes.empty());
    EXPECT_TRUE(r.preemptions.empty());
    EXPECT_TRUE(r.placements.empty());
  }
  {
    // A free inference node already holds it: the loaned one stays lent.
    auto in = loan_round(2, 0);
    run_on(in, "t0", {{0, all8}}, 1);
    in.pending.push_back(inference_job("serve", 8));
    auto const r = s.solve(in);
    EXPECT_TRUE(r.reclaimed_nodes.empty());
    ASSERT_EQ(r.placements.size(), 1U);
    EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  }
}

TEST(Loaning, PlacementOnALoanedNodeThisRoundIsUndoneNotPreempted) {
  // No training nodes: the core lends the only (free, loanable) inference
  // node to the higher-priority training job, and the inference job is
  // left out. Reclaim undoes that placement (it never ran: no preemption)
  // and serves the inference job.
  auto in = loan_round(1, 0);
  job t;
  t.name = "train";
  t.priority = 5;
  t.per_replica.gpus = 8;
  t.per_replica.cpu_milli = 1000;
  t.per_replica.memory_mib = 1024;
  in.pending.push_back(t);
  in.pending.push_back(inference_job("serve", 8));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 1);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_EQ(r.reclaimed_nodes, (std::vector<std::int32_t>{0}));
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].job, 0);
}

TEST(Loaning, NoLoanedNodesNoReclaim) {
  auto in = loan_round(2, 1);
  run_on(in, "serving", {{0, all8}}, 100, job_kind::inference);  // inference work is not loaned
  run_on(in, "train", {{2, all8}}, 100);                          // training on its own pool
  in.pol.queue.reclaim_nodes = 2;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_TRUE(r.reclaimed_nodes.empty());
  EXPECT_TRUE(r.preemptions.empty());
}

}  // namespace
}  // namespace placer
