// Solver tests: hand-checked cases, invariants on thousands of random
// rounds, and CPU/CUDA parity (skipped without a GPU).
#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "../support/parity.hpp"
#include "../support/random_round.hpp"
#include "../support/invariants.hpp"
#include "../support/scoped_env.hpp"

namespace placer {
namespace {

using testing_support::entries_of;
using testing_support::expect_parity;

solver cpu_solver() { return solver(kernels::make_backend(kernels::backend_kind::cpu)); }

job gpu_job(std::string name, int gpus, int milli = 1000, int replicas = 1) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = gpus;
  j.per_replica.gpu_milli = milli;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  return j;
}

TEST(Solver, EmptyRoundIsFine) {
  round_input in;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_TRUE(r.placements.empty());
  EXPECT_TRUE(r.unplaced_jobs.empty());
}

TEST(Solver, BestFitPrefersPartlyUsedNode) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(3).gpus(8).build();
  in.state.nodes[1].gpu_free_milli = {0, 0, 0, 0, 1000, 1000, 1000, 1000};  // half used
  in.pending.push_back(gpu_job("small", 2));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  EXPECT_EQ(r.placements[0].replicas[0].gpus, (std::vector<std::int32_t>{4, 5}));
  expect_round_invariants(in, r);
}

TEST(Solver, FractionalShareTakesTightestGpu) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(4).build();
  in.state.nodes[0].gpu_free_milli = {1000, 600, 300, 450};
  in.pending.push_back(gpu_job("share", 1, 400));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].gpus, (std::vector<std::int32_t>{3}));  // 450 is the tightest >= 400
  EXPECT_EQ(r.placements[0].replicas[0].gpu_milli, 400);
}

TEST(Solver, MultiGpuReplicasStayInsideOneNvlinkIsland) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).nvlink_islands(2).build();
  // Island 0 = GPUs 0-3 (two free), island 1 = GPUs 4-7 (three free).
  in.state.nodes[0].gpu_free_milli = {0, 1000, 0, 1000, 1000, 0, 1000, 1000};
  in.pending.push_back(gpu_job("three", 3));
  in.pending.push_back(gpu_job("two", 2));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);
  EXPECT_EQ(r.placements[0].replicas[0].gpus, (std::vector<std::int32_t>{4, 6, 7}));  // only island 1 holds 3
  EXPECT_EQ(r.placements[1].replicas[0].gpus, (std::vector<std::int32_t>{1, 3}));     // best-fit island 0
  // Spanning islands only when no island can hold the replica.
  in.pending = {gpu_job("five", 5)};
  auto const r2 = s.solve(in);
  ASSERT_EQ(r2.placements.size(), 1U);
  EXPECT_EQ(r2.placements[0].replicas[0].gpus, (std::vector<std::int32_t>{1, 3, 4, 6, 7}));
}

TEST(Solver, GangTakesNothingWhenItCannotFitWhole) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  auto g = gpu_job("gang", 8, 1000, 3);  // 24 GPUs on 16
  g.gang = true;
  in.pending.push_back(g);
  in.pending.push_back(gpu_job("after", 8));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].job, 0);
  EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::gang_incomplete);
  ASSERT_EQ(r.placements.size(), 1U);  // the gang's rollback left room for the next job
  EXPECT_EQ(r.placements[0].job, 1);
  expect_round_invariants(in, r);
}

TEST(Solver, GangIsPlacedOnAClusterWithoutTopology) {
  // A flat node list (no topology tree): the cluster itself is the domain.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(3).gpus(8).build();
  in.state.topo = {};
  for (auto& n : in.state.nodes) n.domain = -1;
  auto g = gpu_job("gang", 8, 1000, 2);
  g.gang = true;
  in.pending.push_back(g);
  for (auto algo : {algorithm::placer, algorithm::greedy, algorithm::kube_least_allocated, algorithm::first_fit}) {
    in.pol.algo = algo;
    auto s = cpu_solver();
    auto const r = s.solve(in);
    ASSERT_EQ(r.placements.size(), 1U) << algorithm_name(algo);
    EXPECT_EQ(r.placements[0].replicas.size(), 2U) << algorithm_name(algo);
    EXPECT_TRUE(r.unplaced_jobs.empty()) << algorithm_name(algo);
    expect_round_invariants(in, r);
  }
}

TEST(Solver, RequiredTopologyKeepsGangUnderOneLeaf) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
  // Leaf 0 has 8 free GPUs in total, leaf 1 has 16: a 16-GPU gang fits only leaf 1.
  in.state.nodes[0].gpu_free_milli.assign(8, 0);
  auto g = gpu_job("gang", 8, 1000, 2);
  g.gang = true;
  g.topology_level = 2;  // leaf
  g.topo_mode = topology_mode::required;
  in.pending.push_back(g);
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  for (auto const& rp : r.placements[0].replicas) EXPECT_GE(rp.node, 2);
  expect_round_invariants(in, r);

  // Now no leaf can hold it.
  in.state.nodes[2].gpu_free_milli[0] = 0;
  auto const r2 = s.solve(in);
  ASSERT_EQ(r2.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r2.unplaced_jobs[0].reason, unplaced_reason::topology_unsatisfiable);
}

TEST(Solver, RepairSearchSeatsTheGangALargerJobWouldBlock) {
  // One leaf per node. Only node 0 (L40S, 8 GPUs) holds the 5-replica gang
  // under one leaf, and the 4-GPU job may run on L40S alone: 5 + 4 > 8.
  // Largest-first tiers seat the 4-GPU job first; the repair search
  // promotes the gang, which is worth more (5,005 against 4,001). That is
  // pack order: in submission order (fifo, the default; checked at the
  // end) the 4-GPU job came first and keeps its place.
  round_input in;
  in.pol.order = queue_order::pack;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(1).gpus(8).gpu_model("L40S").build();
  in.state.nodes[1].gpu_model = "T4";
  in.state.nodes[1].gpu_free_milli.assign(4, 1000);
  auto big = gpu_job("big", 4);
  big.allowed_gpu_models = {"L40S"};
  auto gang = gpu_job("gang", 1, 1000, 5);
  gang.gang = true;
  gang.topology_level = 2;  // leaf
  gang.topo_mode = topology_mode::required;
  in.pending = {big, gang};
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 1);
  for (auto const& rp : r.placements[0].replicas) EXPECT_EQ(rp.node, 0);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].job, 0);
  EXPECT_EQ(r.metrics.replicas_placed, 5);
  EXPECT_EQ(r.metrics.gpu_milli_placed, 5000);
  EXPECT_TRUE(std::any_of(r.timing.begin(), r.timing.end(), [](auto const& t) { return t.stage == "repair"; }));
  // The GAR after the round is the gang's: 5 of the 12 GPUs.
  EXPECT_NEAR(r.metrics.gar_after, 5.0 / 12.0, 1e-9);
  in.pol.order = queue_order::fifo;
  auto const fifo = s.solve(in);
  ASSERT_EQ(fifo.placements.size(), 1U);
  EXPECT_EQ(fifo.placements[0].job, 0);
}

TEST(Solver, ModelAndPoolConstraintsGiveNoFeasibleNode) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).gpu_model("A100").build();
  auto j = gpu_job("wants-h100", 1);
  j.allowed_gpu_models = {"H100"};
  in.pending.push_back(j);
  auto inf = gpu_job("inference", 1);
  inf.kind = job_kind::inference;
  for (auto& n : in.state.nodes) n.pool = pool_kind::training;
  in.pending.push_back(inf);
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_TRUE(r.placements.empty());
  ASSERT_EQ(r.unplaced_jobs.size(), 2U);
  EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::no_feasible_node);
  EXPECT_EQ(r.unplaced_jobs[1].reason, unplaced_reason::no_feasible_node);
}

TEST(Solver, TrainingBorrowsLoanableInferenceNodesOnlyWhenNeeded) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[0].pool = pool_kind::inference;
  in.state.nodes[0].loanable = true;
  in.state.nodes[1].pool = pool_kind::training;
  in.pending.push_back(gpu_job("t1", 8));
  auto s = cpu_solver();
  auto const one = s.solve(in);
  ASSERT_EQ(one.placements.size(), 1U);
  EXPECT_EQ(one.placements[0].replicas[0].node, 1);  // own pool first
  in.pending.push_back(gpu_job("t2", 8));
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);  // then the loaned node too
  EXPECT_NE(r.placements[0].replicas[0].node, r.placements[1].replicas[0].node);
  in.state.nodes[0].loanable = false;
  auto const r2 = s.solve(in);
  EXPECT_EQ(r2.placements.size(), 1U);
}

TEST(Solver, InvalidInputThrowsInvalidArgument) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).build();
  auto j = gpu_job("neg", 1);
  j.per_replica.cpu_milli = -5;
  in.pending.push_back(j);
  auto s = cpu_solver();
  try {
    s.solve(in);
    FAIL() << "expected logic_error";
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("cpu_milli"), std::string::npos);
  }
  in.pending[0].per_replica.cpu_milli = 0;
  running_job rj;
  rj.name = "ghost";
  rj.replicas.push_back({7, {0}, 1000});  // node 7 does not exist
  in.running.push_back(rj);
  EXPECT_THROW(s.solve(in), logic_error);
}

// Rounds of many nodes and jobs are checked on the OpenMP team (even where
// it sleeps, as the tests run it: kernels::team_from, a team of two from
// 32,768 items); the error still names the first problem in order,
// whichever worker saw it.
TEST(Solver, ManyNodesAndJobsNameTheFirstProblem) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(64).nodes_per_leaf(520).build();  // 33,280 nodes
  for (int k = 0; k < 33000; ++k) in.pending.push_back(gpu_job("j" + std::to_string(k), 1));
  auto const message = [&] {
    try {
      validate(in);
    } catch (logic_error const& e) {
      EXPECT_EQ(e.code(), error_code::invalid_argument);
      return std::string(e.what());
    }
    return std::string("valid");
  };
  EXPECT_EQ(message(), "valid");
  in.pending[4900].replicas = 0;
  in.pending[4321].per_replica.gpu_milli = 1001;
  EXPECT_NE(message().find("pending job 4321 ('j4321'): demand.gpu_milli"), std::string::npos) << message();
  in.state.nodes[5000].cpu_milli_free = -1;
  in.state.nodes[4100].gpu_free_milli[3] = 1200;
  EXPECT_NE(message().find(in.state.nodes[4100].name), std::string::npos) << message();
  EXPECT_NE(message().find("gpu_free_milli must be in 0..1000"), std::string::npos) << message();
  in.nodes_validated = true;  // a session's nodes, checked as they came
  EXPECT_NE(message().find("pending job 4321"), std::string::npos) << message();
}

TEST(Solver, RunningJobsMustFitWhatTheirNodesReportAsUsed) {
  // Two running jobs on node 1 (8 GPUs): a share of GPU 2 each, 4 cores each.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  auto& nd = in.state.nodes[1];
  nd.gpu_free_milli[2] = 400;  // 600 used: room for the two shares (300 + 300)
  nd.cpu_milli_free = nd.cpu_milli_capacity - 8000;
  nd.memory_mib_free = nd.memory_mib_capacity - 2048;
  for (char const* name : {"share-a", "share-b"}) {
    running_job rj;
    rj.name = name;
    rj.per_replica = {1, 300, 4000, 1024};
    rj.replicas.push_back({1, {2}, 300});
    in.running.push_back(rj);
  }
  in.pending.push_back(gpu_job("p", 1));
  auto s = cpu_solver();
  EXPECT_NO_THROW(s.solve(in));
  auto expect_rejected = [&](char const* what) {
    try {
      s.solve(in);
      ADD_FAILURE() << "expected invalid_argument for " << what;
    } catch (logic_error const& e) {
      EXPECT_EQ(e.code(), error_code::invalid_argument);
      std::string const msg = e.what();
      EXPECT_NE(msg.find("running job 1 ('share-b')"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  nd.gpu_free_milli[2] = 500;  // 500 used: the second share does not fit
  expect_rejected("GPU 2");
  nd.gpu_free_milli[2] = 400;
  nd.cpu_milli_free += 1;  // one milli-core short
  expect_rejected("its CPU");
  nd.cpu_milli_free -= 1;
  nd.memory_mib_free += 1;
  expect_rejected("its memory");
}

TEST(Solver, KubeBaselinesSpreadOrPack) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  for (int i = 0; i < 4; ++i) in.pending.push_back(gpu_job("j" + std::to_string(i), 1));
  auto s = cpu_solver();
  in.pol.algo = algorithm::kube_least_allocated;
  auto const least = s.solve(in);
  std::set<std::int32_t> nodes;
  for (auto const& p : least.placements) nodes.insert(p.replicas[0].node);
  EXPECT_EQ(nodes.size(), 4U);  // spread: one per node
  in.pol.algo = algorithm::kube_most_allocated;
  auto const most = s.solve(in);
  nodes.clear();
  for (auto const& p : most.placements) nodes.insert(p.replicas[0].node);
  EXPECT_EQ(nodes.size(), 1U);  // packed
}

TEST(Solver, FirstFitTakesTheLowestFeasibleNodeInQueueOrder) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(3).gpus(4).build();
  in.state.nodes[0].gpu_free_milli = {0, 0, 0, 1000};  // one GPU left on node 0
  in.pending = {gpu_job("two", 2), gpu_job("one", 1), gpu_job("also-two", 2)};
  in.pending[0].submit_time = 1;
  in.pending[1].submit_time = 2;
  in.pending[2].submit_time = 3;
  in.pol.algo = parse_algorithm("first-fit");
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 3U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);  // node 0 has one GPU: too few
  EXPECT_EQ(r.placements[1].replicas[0].node, 0);  // the 1-GPU job fits node 0
  EXPECT_EQ(r.placements[2].replicas[0].node, 1);  // node 1 still has two
  EXPECT_STREQ(algorithm_name(algorithm::first_fit), "first-fit");
  EXPECT_THROW(parse_algorithm("best-guess"), logic_error);
}

TEST(Solver, MetricsBeforeAndAfter) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build();
  in.state.nodes[0].gpu_free_milli = {0, 1000, 1000, 1000};
  in.pending.push_back(gpu_job("j", 2));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  EXPECT_DOUBLE_EQ(r.metrics.gar_before, 1.0 / 8.0);
  EXPECT_DOUBLE_EQ(r.metrics.gar_after, 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(r.metrics.gfr_before, 0.5);  // node 0 partly allocated
  EXPECT_EQ(r.metrics.gpu_milli_placed, 2000);
  // With the default weights FGD leads: on node 0 the job would strand one
  // GPU that the round's typical task (2 GPUs) cannot use, so it takes node 1
  // and both nodes end partly allocated, with no fragmentation.
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  EXPECT_DOUBLE_EQ(r.metrics.gfr_after, 1.0);
  EXPECT_DOUBLE_EQ(r.metrics.frag_ratio_after, 0.0);
  // Binpack alone packs it onto node 0 (best fit), stranding that GPU.
  in.pol.w.fragmentation = 0;
  auto const packed = s.solve(in);
  EXPECT_EQ(packed.placements[0].replicas[0].node, 0);
  EXPECT_DOUBLE_EQ(packed.metrics.gfr_after, 0.5);
  EXPECT_GT(packed.metrics.frag_ratio_after, 0.0);
}

TEST(Solver, FragmentationLeadsBinpackForShares) {
  // A 600-milli share. Node 0's 500-milli GPU is too small for it; node 1's
  // 700 fits with 100 to spare. Best fit packs node 0 (fuller) and opens a
  // full GPU there (400 left over); FGD takes node 1's 700 (100 left over).
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(4).build();
  in.state.nodes[0].gpu_free_milli = {500, 1000, 1000, 1000};
  in.state.nodes[1].gpu_free_milli = {700, 1000, 1000, 1000};
  in.pending.push_back(gpu_job("share", 1, 600));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 1);
  EXPECT_EQ(r.placements[0].replicas[0].gpus, std::vector<std::int32_t>{0});
  // FGD metric after: node 0's 500 and node 1's 100 are below 600.
  EXPECT_DOUBLE_EQ(r.metrics.frag_ratio_after, 600.0 / 6600.0);
  in.pol.w.fragmentation = 0;
  auto const packed = s.solve(in);
  ASSERT_EQ(packed.placements.size(), 1U);
  EXPECT_EQ(packed.placements[0].replicas[0].node, 0);
  EXPECT_DOUBLE_EQ(packed.metrics.frag_ratio_after, 900.0 / 6600.0);
}

// Thousands of random rounds, every algorithm: nothing over-committed,
// Stacking: four 4-GPU jobs on four empty 8-GPU nodes. One tier iteration
// gives equal nodes one copy each (four half-used nodes); with the policy's
// stacking a row places ceil(4 / 2) copies an iteration, and the next
// iteration puts the other two on the now half-used nodes (two full ones).
// Four 4-GPU jobs on four empty 8-GPU nodes: an iteration of the tier
// program gives each node one, and the packing repair after it moves them
// onto two (the "repack" stage); with stacking the program itself places
// two a node, and the repair finds nothing to move.
TEST(Solver, StackingFillsANodeBeforeTheNextEmptyOne) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  for (int k = 0; k < 4; ++k) in.pending.push_back(gpu_job("four-" + std::to_string(k), 4));
  auto nodes_used = [&](bool stacking, bool repaired) {
    in.pol.stacking = stacking;
    auto s = cpu_solver();
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    EXPECT_EQ(r.placements.size(), 4U);
    EXPECT_EQ(std::any_of(r.timing.begin(), r.timing.end(), [](auto const& t) { return t.stage == "repack"; }), repaired);
    std::set<std::int32_t> used;
    for (auto const& p : r.placements) used.insert(p.replicas[0].node);
    return used.size();
  };
  EXPECT_EQ(nodes_used(false, true), 2U);
  EXPECT_EQ(nodes_used(true, false), 2U);
}

// Rows of one shape fill in parallel, one node each per iteration: four
// one-GPU jobs anywhere and four that select a feature every node has end
// half a node each on two nodes. Stacking's last step moves one row's
// replicas onto the other's node (detail::consolidate): one node full,
// three whole nodes free, and the selectors still hold (the invariants).
TEST(Solver, StackingConsolidatesOneShapesRowsOntoFewNodes) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  for (auto& n : in.state.nodes) n.labels = {"feature=a100"};
  in.state.nodes[3].labels.clear();  // one node without the feature
  for (int k = 0; k < 4; ++k) in.pending.push_back(gpu_job("any-" + std::to_string(k), 1));
  for (int k = 0; k < 4; ++k) {
    in.pending.push_back(gpu_job("a100-" + std::to_string(k), 1));
    in.pending.back().constraints.node_selector = {"feature=a100"};
  }
  in.pol.stacking = true;
  // The device twin too, checking its copies: the moves are host writes
  // the backend must be told of before the statistics after the round.
  for (auto* make : {+[] { return kernels::make_backend(kernels::backend_kind::cpu); },
                     +[] { return kernels::make_device_twin(true, true); }}) {
    solver s(make());
    SCOPED_TRACE(s.backend().description());
    round_result r;
    ASSERT_NO_THROW(r = s.solve(in));
    expect_round_invariants(in, r);
    ASSERT_EQ(r.placements.size(), 8U);
    std::set<std::int32_t> used;
    for (auto const& p : r.placements) used.insert(p.replicas[0].node);
    EXPECT_EQ(used.size(), 1U);
    EXPECT_FALSE(used.contains(3));
    bool staged = false;
    for (auto const& t : r.timing) staged = staged || t.stage == "stack";
    EXPECT_TRUE(staged);
    EXPECT_DOUBLE_EQ(r.metrics.gar_after, 8.0 / 32.0);  // the statistics see the moved state
  }
}

// Slurm's -N (job::distinct_nodes): a gang of two 4-GPU replicas with a
// preferred leaf goes on two nodes of one leaf, where without it both
// replicas share the best node; and a leaf's capacity counts one replica a
// node, so three 1-GPU replicas that must share a leaf of two nodes are
// not placed (without distinct_nodes one node holds them all). Every
// algorithm, and the service's validation of an elastic range.
TEST(Solver, DistinctNodesGetANodeEach) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
  job pair = gpu_job("pair", 4, 1000, 2);
  pair.gang = true;
  pair.topology_level = 2;  // levels: cluster, spine, leaf
  pair.topo_mode = topology_mode::preferred;
  job three = gpu_job("three", 1, 1000, 3);
  three.gang = true;
  three.topology_level = 2;
  three.topo_mode = topology_mode::required;
  auto nodes_of = [](round_result const& r, std::int32_t job) {
    std::vector<std::int32_t> on;
    for (auto const& p : r.placements) {
      if (p.job != job) continue;
      for (auto const& rp : p.replicas) on.push_back(rp.node);
    }
    return on;
  };
  auto leaf = [&](std::int32_t n) { return in.state.nodes[static_cast<std::size_t>(n)].domain; };
  for (int a = 0; a <= static_cast<int>(algorithm::first_fit); ++a) {
    SCOPED_TRACE(std::string("algorithm ") + algorithm_name(static_cast<algorithm>(a)));
    in.pol.algo = static_cast<algorithm>(a);
    auto s = cpu_solver();
    in.pending = {pair};
    auto const shared = nodes_of(s.solve(in), 0);
    ASSERT_EQ(shared.size(), 2U);
    bool const packs = in.pol.algo == algorithm::placer;  // kube-least spreads anyway
    if (packs) {
      EXPECT_EQ(shared[0], shared[1]) << "without distinct_nodes both replicas fit on one node";
    }
    in.pending[0].distinct_nodes = true;
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    auto const own = nodes_of(r, 0);
    ASSERT_EQ(own.size(), 2U);
    EXPECT_NE(own[0], own[1]);
    if (packs) {
      EXPECT_EQ(leaf(own[0]), leaf(own[1])) << "the preferred leaf";
    }
    in.pending = {three};
    EXPECT_EQ(nodes_of(s.solve(in), 0).size(), 3U);
    in.pending[0].distinct_nodes = true;
    auto const none = s.solve(in);
    expect_round_invariants(in, none);
    EXPECT_TRUE(nodes_of(none, 0).empty()) << "a leaf of two nodes cannot hold three replicas on nodes of their own";
    ASSERT_EQ(none.unplaced_jobs.size(), 1U);
  }
  in.pending = {pair};
  in.pending[0].distinct_nodes = true;
  in.pending[0].min_replicas = 1;
  EXPECT_THROW(validate(in), logic_error);
}

// constraints respected, every job placed or given a reason; a third of
// the rounds with their nodes shuffled.
TEST(SolverRandom, InvariantsHoldOnRandomRounds) {
  auto s = cpu_solver();
  std::mt19937_64 rng(20261121);
  int placed = 0, unplaced = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    round_input in = testing_support::random_round(rng);
    in.pol.algo = static_cast<algorithm>(iter % 4);
    in.pol.stacking = (iter / 4) % 2 == 1;
    // Every third round lists its nodes out of their domains' order (the
    // assignment groups them by domain in runs of consecutive nodes).
    if (iter % 3 == 2) std::shuffle(in.state.nodes.begin(), in.state.nodes.end(), rng);
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    // The solver's result is in job order (sort_by_job).
    auto const by_job = [](auto const& a, auto const& b) { return a.job < b.job; };
    EXPECT_TRUE(std::is_sorted(r.placements.begin(), r.placements.end(), by_job));
    EXPECT_TRUE(std::is_sorted(r.unplaced_jobs.begin(), r.unplaced_jobs.end(), by_job));
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failure at iteration " << iter;
      return;
    }
    placed += static_cast<int>(r.placements.size());
    unplaced += static_cast<int>(r.unplaced_jobs.size());
  }
  // The generator must exercise both outcomes, or the test proves little.
  EXPECT_GT(placed, 5000);
  EXPECT_GT(unplaced, 500);
}

// The matrix's cells are re-scored lazily (a clock of node stamps and
// class freshness): every cell the host reads, and every live cell a tier
// program calls current, equals a fresh scoring. PLACER_VERIFY_SCORES makes
// the assigner check both and throw on a stale one.
TEST(SolverRandom, EveryScoreReadIsCurrent) {
  testing_support::scoped_env const verify("PLACER_VERIFY_SCORES", "1");
  auto s = cpu_solver();
  std::mt19937_64 rng(20261125);
  int placed = 0;
  for (int iter = 0; iter < 400; ++iter) {
    round_input in = testing_support::random_round(rng);
    in.pol.algo = iter % 4 == 3 ? algorithm::greedy : algorithm::placer;
    in.pol.stacking = iter % 2 == 1;
    round_result r;
    ASSERT_NO_THROW(r = s.solve(in)) << "iteration " << iter;
    placed += static_cast<int>(r.placements.size());
  }
  EXPECT_GT(placed, 1000);
}

TEST(SolverRandom, DeterministicAcrossRuns) {
  auto s = cpu_solver();
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 50; ++iter) {
    round_input const in = testing_support::random_round(rng);
    auto const a = s.solve(in);
    auto const b = s.solve(in);
    ASSERT_EQ(a.placements.size(), b.placements.size());
    for (std::size_t k = 0; k < a.placements.size(); ++k) {
      EXPECT_EQ(a.placements[k].job, b.placements[k].job);
      EXPECT_EQ(a.placements[k].replicas, b.placements[k].replicas);
    }
  }
}

// Flatten's classes and typical task set, checked against their
// definitions on rounds of up to 300 shapes: far past the first size of the
// hash tables that find them (64 slots), so the tables grow mid-round. A
// class is a distinct (demand, models, pool rule) numbered in order of first
// appearance; the task set is the replica shapes of pending and running
// work, most replicas first (ties by shape, the larger first), until 95% are
// covered or 64 are taken.
TEST(Flatten, ClassesAndTaskShapesFollowTheirDefinitionsPastTheTablesFirstSize) {
  std::mt19937_64 rng(41);
  for (int iter = 0; iter < 6; ++iter) {
    round_input in;
    in.state = make_cluster().leaves_per_spine(2).nodes_per_leaf(4).gpus(8).build();
    int const shapes = 20 + 56 * iter;  // 20 .. 300
    for (int k = 0; k < 2000; ++k) {
      int const s = static_cast<int>(rng() % static_cast<std::uint64_t>(shapes));
      job j = gpu_job("j" + std::to_string(k), 1 + s % 4, 1000, 1 + static_cast<int>(rng() % 3));
      j.per_replica.cpu_milli = 1000 + 250 * (s / 4);
      if (s % 7 == 3) j.kind = job_kind::inference;
      in.pending.push_back(std::move(j));
    }
    round_matrices const m = build_matrices(in);
    using key = std::tuple<std::int32_t, std::int64_t, int>;  // gpus, cpu, inference
    std::map<key, std::int32_t> rows;
    for (std::size_t j = 0; j < in.pending.size(); ++j) {
      auto const& jb = in.pending[j];
      key const k{jb.per_replica.gpus, jb.per_replica.cpu_milli, jb.kind == job_kind::inference ? 1 : 0};
      auto const [it, fresh] = rows.emplace(k, static_cast<std::int32_t>(rows.size()));
      ASSERT_EQ(m.job_class[j], it->second) << "iteration " << iter << " job " << j;
      if (fresh) {
        ASSERT_EQ(m.class_gpus[static_cast<std::size_t>(it->second)], jb.per_replica.gpus);
        ASSERT_EQ(m.class_cpu[static_cast<std::size_t>(it->second)], jb.per_replica.cpu_milli);
      }
    }
    ASSERT_EQ(m.n_classes(), static_cast<std::int32_t>(rows.size()));
    EXPECT_GT(m.n_classes(), 32 * (iter > 0 ? 1 : 0));
    // The task set: (cpu, milli, gpus) -> replicas (every model allowed here).
    std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::int64_t> count;
    std::int64_t total = 0;
    for (auto const& jb : in.pending) {
      count[{jb.per_replica.cpu_milli, jb.per_replica.gpu_milli, jb.per_replica.gpus}] += jb.replicas;
      total += jb.replicas;
    }
    std::vector<std::pair<std::int64_t, std::tuple<std::int64_t, std::int32_t, std::int32_t>>> ranked;
    for (auto const& [k, c] : count) ranked.emplace_back(c, k);
    std::sort(ranked.begin(), ranked.end(), [](auto const& a, auto const& b) { return a > b; });
    std::int64_t covered = 0;
    std::size_t taken = 0;
    while (taken < ranked.size() && taken < 64 && covered * 100 < total * 95) covered += ranked[taken++].first;
    ASSERT_EQ(m.task_cpu.size(), taken) << "iteration " << iter;
    for (std::size_t t = 0; t < taken; ++t) {
      auto const& [c, k] = ranked[t];
      EXPECT_EQ(m.task_cpu[t], std::get<0>(k)) << "iteration " << iter << " task " << t;
      EXPECT_EQ(m.task_milli[t], std::get<1>(k));
      EXPECT_EQ(m.task_gpus[t], std::get<2>(k));
      EXPECT_EQ(m.task_freq_ppm[t], static_cast<std::int32_t>(c * 1000000 / covered));
    }
  }
}

// Flatten's node states, score twins and fragmentation states on clusters
// of 33,000 nodes and more, where it hashes, copies and compares on the
// OpenMP team even where the team sleeps, as the tests run it
// (kernels::team_from: a team of two from 32,768 nodes; each worker the
// states whose hash falls in its part): a
// node's state (same_as) is the first node identical to it, its score twin
// (score_as) the first node alike in all but its GPUs' order and islands,
// a fragmentation state (frag_slot) holds the nodes with the same free GPU
// values in any order, free CPU and model, numbered by its first node, as
// maps of their fields find them; and every array is the same on one, two
// and three workers. The clusters' nodes copy others' states, some with
// their GPUs permuted.
TEST(Flatten, NodeStatesOnTheTeamAreEachNodesFirstEqual) {
  std::mt19937_64 rng(5000);
  int const threads = omp_get_max_threads();
  int twins = 0, permuted = 0, score_twins = 0;
  for (int iter = 0; iter < 4; ++iter) {
    auto opt = traces::scenario_preset(iter % 2 == 0 ? "10k" : "10k-k8s");
    opt.nodes = 33000 + 400 * iter;
    opt.seed = static_cast<std::uint64_t>(iter + 1);
    round_input in = traces::make_scenario(opt);
    auto& nodes = in.state.nodes;
    for (std::size_t i = 1; i < nodes.size(); ++i) {
      if (rng() % 3 != 0) continue;
      auto const& from = nodes[rng() % i];
      auto& to = nodes[i];
      to.cpu_milli_free = from.cpu_milli_free;
      to.memory_mib_free = from.memory_mib_free;
      to.gpu_free_milli = from.gpu_free_milli;
      if (rng() % 2 == 0) {
        std::shuffle(to.gpu_free_milli.begin(), to.gpu_free_milli.end(), rng);
        ++permuted;
      }
    }
    std::vector<round_matrices> built;
    for (int workers : {1, 2, 3}) {
      omp_set_num_threads(workers);
      built.push_back(build_matrices(in));
    }
    omp_set_num_threads(threads);
    round_matrices const& m = built[0];
    for (std::size_t w = 1; w < built.size(); ++w) {
      auto const& o = built[w];
      EXPECT_EQ(o.same_as, m.same_as) << "iteration " << iter << ", " << w + 1 << " workers";
      EXPECT_EQ(o.score_as, m.score_as) << "iteration " << iter;
      EXPECT_EQ(o.frag_slot, m.frag_slot) << "iteration " << iter;
      EXPECT_EQ(o.frag_node, m.frag_node) << "iteration " << iter;
      EXPECT_EQ(o.gpu_begin, m.gpu_begin) << "iteration " << iter;
      EXPECT_EQ(o.gpu_free, m.gpu_free) << "iteration " << iter;
      EXPECT_EQ(o.gpu_island, m.gpu_island) << "iteration " << iter;
      EXPECT_EQ(o.gpu_capacity, m.gpu_capacity) << "iteration " << iter;
      EXPECT_EQ(o.cpu_free, m.cpu_free) << "iteration " << iter;
      EXPECT_EQ(o.cpu_capacity, m.cpu_capacity) << "iteration " << iter;
      EXPECT_EQ(o.mem_free, m.mem_free) << "iteration " << iter;
      EXPECT_EQ(o.model, m.model) << "iteration " << iter;
      EXPECT_EQ(o.pool, m.pool) << "iteration " << iter;
      EXPECT_EQ(o.flags, m.flags) << "iteration " << iter;
      EXPECT_EQ(o.scarcity, m.scarcity) << "iteration " << iter;
    }
    // The definitions, by maps of each node's fields.
    std::map<std::vector<std::int64_t>, std::int32_t> state_first, score_first, frag_first;
    std::int32_t slots = 0;
    for (std::int32_t i = 0; i < m.n_nodes(); ++i) {
      auto const at = static_cast<std::size_t>(i);
      std::vector<std::int64_t> state{m.cpu_free[at], m.cpu_capacity[at], m.mem_free[at], m.model[at], m.pool[at],
                                      m.flags[at], m.gpu_capacity[at], m.scarcity[at],
                                      m.node_group.empty() ? 0 : m.node_group[at]};
      std::vector<std::int64_t> frag{m.cpu_free[at], m.model[at]};
      std::vector<std::int64_t> free;
      for (auto g = m.gpu_begin[at]; g < m.gpu_begin[at + 1]; ++g) {
        state.push_back(std::int64_t{m.gpu_free[static_cast<std::size_t>(g)]} << 8 | m.gpu_island[static_cast<std::size_t>(g)]);
        free.push_back(m.gpu_free[static_cast<std::size_t>(g)]);
      }
      std::sort(free.begin(), free.end());
      frag.insert(frag.end(), free.begin(), free.end());
      auto const [s, new_state] = state_first.emplace(state, i);
      ASSERT_EQ(m.same_as[at], s->second) << "iteration " << iter << " node " << i;
      twins += new_state ? 0 : 1;
      std::vector<std::int64_t> score(state.begin(), state.begin() + 9);  // the state's fields but its GPUs
      score.insert(score.end(), free.begin(), free.end());
      auto const [t, new_score] = score_first.emplace(score, i);
      ASSERT_EQ(m.score_as[at], t->second) << "iteration " << iter << " node " << i;
      score_twins += new_score == new_state ? 0 : 1;
      auto const [f, new_frag] = frag_first.emplace(frag, slots);
      if (new_frag) {
        ASSERT_EQ(m.frag_node[static_cast<std::size_t>(slots)], i) << "iteration " << iter << " node " << i;
        ++slots;
      }
      ASSERT_EQ(m.frag_slot[at], f->second) << "iteration " << iter << " node " << i;
    }
    EXPECT_EQ(static_cast<std::int32_t>(m.frag_node.size()), slots);
  }
  EXPECT_GT(twins, 4000);        // nodes that share a state
  EXPECT_GT(permuted, 2000);     // and fragmentation states past their GPUs' order
  EXPECT_GT(score_twins, 2000);  // score twins of other states
}

// One call gives every class of a set its capacity per domain: the sum of
// the domain's nodes' fit counts (kernels::fit_count, one node at a time).
// Random rounds, and two benchmark clusters whose domains hold up to 1,280
// and 12,800 nodes (on the device twin a sum in 64 parts of up to 200 nodes
// each), on the CPU backend and on the device twin.
TEST(Backend, DomainCapacityOfAClassSetSumsFitCounts) {
  std::mt19937_64 rng(17);
  int checked = 0, large = 0;
  for (int iter = 0; iter < 204; ++iter) {
    auto b = iter % 2 == 0 ? kernels::make_backend(kernels::backend_kind::cpu) : kernels::make_device_twin();
    round_input const in = iter < 200 ? testing_support::random_round(rng)
                                      : traces::make_scenario(traces::scenario_preset(iter < 202 ? "10k" : "100k"));
    round_matrices const m = build_matrices(in);
    if (m.n_classes() == 0 || in.state.topo.domains.empty()) continue;
    auto const e = entries_of(in.state);
    std::vector<std::int32_t> of;  // every class, the last twice, in reverse
    for (std::int32_t c = m.n_classes() - 1; c >= 0; --c) of.push_back(c);
    of.push_back(0);
    auto const nd = in.state.topo.domains.size();
    std::vector<std::int64_t> cap(of.size() * nd, -7);
    b->domain_capacity(m.nodes(), m.classes(), of, e.view(), cap);
    for (std::size_t s = 0; s < of.size(); ++s) {
      for (std::size_t d = 0; d < nd; ++d) {
        std::int64_t want = 0;
        for (auto k = e.begin[d]; k < e.begin[d + 1]; ++k) want += kernels::fit_count(m.nodes(), m.classes(), of[s], e.node[k]);
        ASSERT_EQ(cap[s * nd + d], want) << "iteration " << iter << " class " << of[s] << " domain " << d;
        checked += want > 0 ? 1 : 0;
        large += e.begin[d + 1] - e.begin[d] > 256 && want > 0 ? 1 : 0;
      }
    }
  }
  EXPECT_GT(checked, 100);  // the rounds do fit replicas somewhere
  EXPECT_GT(large, 10);     // and in domains of many nodes a part
}

/// The CPU backend, the forced-parallel one, and the device twin in the
/// device backends' way (a fragmentation table's entries split over lanes,
/// a cell a thread).
std::vector<std::unique_ptr<kernels::backend>> cpu_backends_and_twin() {
  std::vector<std::unique_ptr<kernels::backend>> backends;
  backends.push_back(kernels::make_backend(kernels::backend_kind::cpu));
  backends.push_back(kernels::make_parallel_cpu_backend());
  backends.push_back(kernels::make_device_twin(false));
  return backends;
}

/// Every node's statistics summed, a node at a time.
kernels::cluster_stats every_nodes_stats(round_matrices const& m) {
  kernels::cluster_stats s{};
  for (std::int32_t n = 0; n < m.n_nodes(); ++n) s = kernels::stats_sum_op{}(s, kernels::node_stats_op{m.nodes(), m.tasks()}(n));
  return s;
}

void expect_same_stats(kernels::cluster_stats const& got, kernels::cluster_stats const& want, int iter) {
  EXPECT_EQ(got.frag_milli_ppm, want.frag_milli_ppm) << "iteration " << iter;
  EXPECT_EQ(got.gpu_free_milli, want.gpu_free_milli) << "iteration " << iter;
  EXPECT_EQ(got.gpu_allocated_milli, want.gpu_allocated_milli) << "iteration " << iter;
  EXPECT_EQ(got.gpu_schedulable_milli, want.gpu_schedulable_milli) << "iteration " << iter;
  EXPECT_EQ(got.gpu_nodes, want.gpu_nodes) << "iteration " << iter;
  EXPECT_EQ(got.partly_allocated_nodes, want.partly_allocated_nodes) << "iteration " << iter;
}

// Nodes that hold the same free GPU values in another order, with the same
// free CPU and model but other memory or pools, are one fragmentation
// state: the score stage computes F once for them (a table row); those
// alike in everything else too are score twins (one column scored, copied
// to the others, node_view::score_as). Every cell still equals the cell
// scored on its own, on the default and the forced-parallel CPU backends,
// and on the device twin (the table's entries split over 32 lanes each at
// these sizes, a cell a thread). The statistics before a round
// (stats_begin, F a state on the CPU backends) are each node's summed.
TEST(Backend, ScoreStageSharesFragmentationAcrossPermutedGpus) {
  auto const backends = cpu_backends_and_twin();
  std::mt19937_64 rng(2026);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int shared = 0, twinned = 0, cells = 0;
  for (int iter = 0; iter < 150; ++iter) {
    round_input in = testing_support::random_round(rng);
    auto& nodes = in.state.nodes;
    for (auto& nd : nodes) {  // two NVLink islands on some
      if (nd.gpu_count() < 2 || pick(0, 1) == 0) continue;
      for (std::int32_t g = 0; g < nd.gpu_count(); ++g) nd.gpu_nvlink.push_back(g < nd.gpu_count() / 2 ? 0 : 1);
    }
    for (std::size_t i = 1; i < nodes.size(); ++i) {
      if (pick(0, 1) == 0) continue;
      auto const& from = nodes[static_cast<std::size_t>(pick(0, static_cast<int>(i) - 1))];
      auto& to = nodes[i];
      if (pick(0, 1) == 0) {  // alike in all but the GPUs' order and islands
        std::string name = std::move(to.name);
        auto const domain = to.domain;
        to = from;
        to.name = std::move(name);
        to.domain = domain;
      }
      to.gpu_model = from.gpu_model;
      to.cpu_milli_free = from.cpu_milli_free;
      std::vector<std::size_t> perm(from.gpu_free_milli.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (std::size_t g = 0; g < perm.size(); ++g) to.gpu_free_milli[g] = from.gpu_free_milli[perm[g]];
      to.gpu_healthy.clear();
      if (!from.gpu_healthy.empty()) {
        for (std::size_t g = 0; g < perm.size(); ++g) to.gpu_healthy.push_back(from.gpu_healthy[perm[g]]);
      }
      if (!to.gpu_nvlink.empty()) std::shuffle(to.gpu_nvlink.begin(), to.gpu_nvlink.end(), rng);
    }
    in.pol.w.fragmentation = iter % 5 == 4 ? 0 : 200;
    round_matrices const m = build_matrices(in);
    if (m.n_classes() == 0) continue;
    auto const states = std::count_if(m.same_as.begin(), m.same_as.end(), [i = 0](std::int32_t s) mutable { return s == i++; });
    shared += static_cast<int>(m.frag_node.size()) < states ? 1 : 0;
    twinned += std::count_if(m.score_as.begin(), m.score_as.end(), [i = 0](std::int32_t s) mutable { return s == i++; }) < states ? 1 : 0;
    kernels::score_params p;
    p.w_fragmentation = in.pol.w.fragmentation;
    kernels::score_cell_op const op{m.nodes(), m.classes(), m.tasks(), p};
    auto const want = every_nodes_stats(m);
    for (auto& b : backends) {
      b->stats_begin(m.nodes(), m.tasks());
      expect_same_stats(b->stats_end(), want, iter);
      std::vector<std::int32_t> got(static_cast<std::size_t>(m.n_nodes()) * m.n_classes(), -7);
      b->score(m.nodes(), m.classes(), m.tasks(), p, got);
      for (std::int32_t c = 0; c < m.n_classes(); ++c) {
        for (std::int32_t n = 0; n < m.n_nodes(); ++n) {
          ASSERT_EQ(got[static_cast<std::size_t>(c) * m.n_nodes() + n], op.score(c, n))
              << "iteration " << iter << " class " << c << " node " << n;
          ++cells;
        }
      }
    }
  }
  EXPECT_GT(shared, 60);   // rounds where some states did share a fragmentation row
  EXPECT_GT(twinned, 60);  // and a scored column
  EXPECT_GT(cells, 10000);
}

// The statistics after a round (stats_after) on the nodes the statistics
// before took (stats_begin), moved since in their free values alone: the
// sums of every node's own, on the default and forced-parallel CPU
// backends (which compute F again only where a node's free CPU or GPU
// values moved, a state at a time from 16 task shapes) and on the device
// twin; with nothing moved, the sums before.
TEST(Backend, StatsAfterARoundAreEveryNodesSummed) {
  auto const backends = cpu_backends_and_twin();
  std::mt19937_64 rng(4512);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int moved_frag = 0, many_shapes = 0;
  for (int iter = 0; iter < 150; ++iter) {
    round_matrices const m0 = build_matrices(testing_support::random_round(rng, 6, iter % 3 == 0 ? 80 : 30));
    if (m0.n_nodes() == 0) continue;
    many_shapes += m0.task_gpus.size() >= 16 ? 1 : 0;
    // An assignment's moves: some nodes' free GPU milli and CPU taken.
    round_matrices moved = m0;
    for (std::int32_t n = 0; n < moved.n_nodes(); ++n) {
      if (pick(0, 2) != 0) continue;
      for (auto g = moved.gpu_begin[n]; g < moved.gpu_begin[n + 1]; ++g) {
        if (pick(0, 1) == 0) moved.gpu_free[g] = pick(0, moved.gpu_free[g]);
      }
      if (pick(0, 3) == 0) moved.cpu_free[n] = pick(0, static_cast<int>(std::min<std::int64_t>(moved.cpu_free[n], 1 << 20)));
    }
    auto const before = every_nodes_stats(m0);
    auto const after = every_nodes_stats(moved);
    moved_frag += after.frag_milli_ppm != before.frag_milli_ppm ? 1 : 0;
    for (auto& b : backends) {
      round_matrices m = m0;
      b->stats_begin(m.nodes(), m.tasks());
      expect_same_stats(b->stats_after(m.nodes(), m.tasks()), before, iter);
      m.gpu_free = moved.gpu_free;
      m.cpu_free = moved.cpu_free;
      expect_same_stats(b->stats_after(m.nodes(), m.tasks()), after, iter);
    }
  }
  EXPECT_GT(moved_frag, 60);  // rounds whose moves changed F
  EXPECT_GT(many_shapes, 20);  // and rounds of many task shapes
}

// A cell's score spread over lanes (score_cell_op::score_lanes, the tier
// refresh's on a warp: issue 53, item 3): each lane sums its slice of the
// task set, and every lane's score from the lanes' total is the cell's
// score on one thread, on random rounds with 1 to 32 lanes (more lanes
// than tasks: empty slices).
TEST(Backend, ACellScoredOnLanesIsTheCellScoredOnOneThread) {
  std::mt19937_64 rng(53);
  std::int64_t cells = 0, feasible = 0, split = 0;
  for (int iter = 0; iter < 120; ++iter) {
    round_input const in = testing_support::random_round(rng);
    round_matrices const m = build_matrices(in);
    if (m.n_classes() == 0) continue;
    kernels::score_params p;
    p.w_fragmentation = iter % 6 == 5 ? 0 : 200;
    kernels::score_cell_op const op{m.nodes(), m.classes(), m.tasks(), p};
    std::int32_t const lanes = std::int32_t{1} << (iter % 6);
    std::vector<std::int64_t> part(static_cast<std::size_t>(lanes));
    for (std::int32_t c = 0; c < m.n_classes(); ++c) {
      for (std::int32_t n = 0; n < m.n_nodes(); ++n) {
        std::int32_t const want = op.score(c, n);
        // Each lane's part first (its sum returns what it was given), then
        // every lane's score from the parts' total.
        for (std::int32_t l = 0; l < lanes; ++l) {
          part[static_cast<std::size_t>(l)] = 0;
          op.score_lanes(c, n, l, lanes, [&](std::int64_t v) {
            part[static_cast<std::size_t>(l)] = v;
            return v;
          });
        }
        std::int64_t total = 0;
        for (std::int64_t const v : part) total += v;
        for (std::int32_t l = 0; l < lanes; ++l) {
          ASSERT_EQ(op.score_lanes(c, n, l, lanes, [&](std::int64_t) { return total; }), want)
              << "iteration " << iter << " class " << c << " node " << n << " lane " << l << " of " << lanes;
        }
        ++cells;
        feasible += want >= 0 ? 1 : 0;
        split += lanes > 1 && want >= 0 && p.w_fragmentation != 0 && m.tasks().n_tasks > 1 ? 1 : 0;
      }
    }
  }
  EXPECT_GT(cells, 20000);
  EXPECT_GT(feasible, 5000);
  EXPECT_GT(split, 3000);  // feasible cells whose FGD sums were split over lanes
}

// Workers solving on one GPU at once (placer serve --workers N) each take
// their part of its multiprocessors for the tier kernel's grid, a CTA per
// four of them as one round alone takes (issue 53, item 8): together they
// never ask for more multiprocessors than there are, so each round stays
// on its own.
TEST(Backend, WorkersOnOneGpuShareItsMultiprocessors) {
  EXPECT_EQ(kernels::tier_grid_blocks(132, 1, 4, 264), 33);  // an H200 alone
  EXPECT_EQ(kernels::tier_grid_blocks(132, 8, 4, 33), 4);
  EXPECT_EQ(kernels::tier_grid_blocks(132, 64, 4, 4), 1);   // at least one CTA
  EXPECT_EQ(kernels::tier_grid_blocks(132, 1, 4, 20), 20);  // at most what the device holds
  EXPECT_EQ(kernels::tier_grid_blocks(132, 0, 4, 264), 33);
  for (int workers = 1; workers <= 33; ++workers) {
    int const blocks = kernels::tier_grid_blocks(132, workers, 4, 264 / workers);
    EXPECT_GE(blocks, 1);
    EXPECT_LE(workers * blocks * 4, 132) << workers << " workers";
  }
}

// The CUDA backend must produce the same score matrix and placements as the
// CPU backend. Runs wherever a GPU is present; skipped (saying why) elsewhere.
TEST(BackendParity, CudaMatchesCpuOnRandomRounds) {
  auto const why = kernels::cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  solver cpu = cpu_solver();
  solver gpu(kernels::make_backend(kernels::backend_kind::cuda));
  expect_parity(cpu, gpu, 300, 99);
}

TEST(BackendParity, ParallelCpuPathsMatchTheSequentialOnes) {
  // Rounds this small take the sequential paths on the default CPU backend;
  // the forced one runs every stage on the OpenMP team and the tier program
  // on two workers or more (make tsan runs this under ThreadSanitizer).
  solver sequential = cpu_solver();
  solver parallel(kernels::make_parallel_cpu_backend());
  expect_parity(sequential, parallel, 300, 7);
}

// The CUDA backend's code over host memory (kernels/portable/device_backend.hpp):
// its arenas, staging and the bound round kept on its "device" between calls,
// with node records both ways. Verify mode reads its copies back at every call
// of a bound round and compares them with the host's arrays, and every view a
// stage reads must lie in its device memory.
TEST(BackendParity, DeviceTwinMatchesCpuOnRandomRounds) {
  solver cpu = cpu_solver();
  solver twin(kernels::make_device_twin(/*resident=*/true, /*verify=*/true));
  expect_parity(cpu, twin, 300, 11);
}

// The benchmark scenarios at full scale: thousands of bids a row, several
// radix passes, price wars (-k8s), many tiers. The device twin (on one
// worker, and on a grid of 2 CTAs of 4 threads each: the other CTA's
// paths, the warps' offers on groups, run concurrently) and, where a GPU
// is usable, the CUDA backend run their CTA's way (team_wide: floors,
// jumps, lists and offers by the whole team) and must place
// what the CPU backend places, two rounds in a row on one solver.
TEST(BackendParity, BenchmarkScenariosPlaceTheSame) {
  bool const gpu = kernels::cuda_unavailable_reason().empty();
  for (char const* name : {"10k", "10k-k8s", "100k", "100k-k8s"}) {
    SCOPED_TRACE(name);
    round_input const in = traces::make_scenario(traces::scenario_preset(name));
    solver cpu = cpu_solver();
    round_result const want = cpu.solve(in);
    EXPECT_GT(want.placements.size(), 500u);
    for (int which = 0; which < (gpu ? 3 : 2); ++which) {
      solver other(which == 0   ? kernels::make_device_twin(/*resident=*/true)
                   : which == 1 ? kernels::make_device_twin_grid(2, 4)
                                : kernels::make_backend(kernels::backend_kind::cuda));
      SCOPED_TRACE(other.backend().description());
      for (int again = 0; again < 2; ++again) {
        round_result const got = other.solve(in);
        ASSERT_EQ(got.placements.size(), want.placements.size());
        for (std::size_t k = 0; k < want.placements.size(); ++k) {
          ASSERT_EQ(got.placements[k].job, want.placements[k].job);
          ASSERT_EQ(got.placements[k].replicas, want.placements[k].replicas) << "job " << want.placements[k].job;
        }
        ASSERT_EQ(got.unplaced_jobs.size(), want.unplaced_jobs.size());
      }
    }
  }
}

TEST(BackendParity, DeviceTwinSendingEverythingMatchesCpu) {
  solver cpu = cpu_solver();
  solver twin(kernels::make_device_twin(/*resident=*/false));
  expect_parity(cpu, twin, 100, 13);
}

// Every algorithm that runs on the backend (the tier program, greedy's host
// commits, the repair search's restored states, stacking, constraints) gives
// the CPU backend's round on the twin, whose copies must equal the host's at
// every call.
TEST(BackendParity, DeviceTwinKeepsEveryAlgorithmsRound) {
  solver cpu = cpu_solver();
  solver twin(kernels::make_device_twin(/*resident=*/true, /*verify=*/true));
  // Without verify mode's reads (each a wait), the calls the host does not
  // wait for stay in flight: a pinned buffer written under one fails.
  solver flying(kernels::make_device_twin(/*resident=*/true, /*verify=*/false));
  std::mt19937_64 rng(20261126);
  std::int64_t up = 0, down = 0;
  int placed = 0;
  for (int iter = 0; iter < 400; ++iter) {
    round_input in = testing_support::random_round(rng);
    in.pol.algo = static_cast<algorithm>(iter % 4);
    in.pol.stacking = (iter / 4) % 2 == 1;
    if (iter % 3 == 2) testing_support::add_random_constraints(rng, in);
    auto const before = twin.backend().steps();
    round_result const a = cpu.solve(in);
    round_result b, c;
    ASSERT_NO_THROW(b = twin.solve(in)) << "iteration " << iter;
    ASSERT_NO_THROW(c = flying.solve(in)) << "iteration " << iter;
    ASSERT_EQ(a.placements.size(), c.placements.size()) << "iteration " << iter;
    EXPECT_EQ(a.metrics.gfr_before, c.metrics.gfr_before) << "iteration " << iter;
    EXPECT_EQ(a.metrics.gfr_after, c.metrics.gfr_after) << "iteration " << iter;
    up += twin.backend().steps().bytes_up - before.bytes_up;
    down += twin.backend().steps().bytes_down - before.bytes_down;
    ASSERT_EQ(a.placements.size(), b.placements.size()) << "iteration " << iter;
    for (std::size_t k = 0; k < a.placements.size(); ++k) {
      ASSERT_EQ(a.placements[k].job, b.placements[k].job) << "iteration " << iter;
      ASSERT_EQ(a.placements[k].replicas, b.placements[k].replicas) << "iteration " << iter;
    }
    ASSERT_EQ(a.unplaced_jobs.size(), b.unplaced_jobs.size()) << "iteration " << iter;
    // The statistics before (brought down by a later wait) and after (with
    // the last chain where nothing wrote since, or a call of their own).
    EXPECT_EQ(a.metrics.gar_before, b.metrics.gar_before) << "iteration " << iter;
    EXPECT_EQ(a.metrics.gfr_before, b.metrics.gfr_before) << "iteration " << iter;
    EXPECT_EQ(a.metrics.frag_ratio_before, b.metrics.frag_ratio_before) << "iteration " << iter;
    EXPECT_EQ(a.metrics.gar_after, b.metrics.gar_after) << "iteration " << iter;
    EXPECT_EQ(a.metrics.gfr_after, b.metrics.gfr_after) << "iteration " << iter;
    EXPECT_EQ(a.metrics.frag_ratio_after, b.metrics.frag_ratio_after) << "iteration " << iter;
    placed += static_cast<int>(a.placements.size());
  }
  EXPECT_GT(placed, 1000);
  EXPECT_GT(up, 0);  // it does move data, and counts it
  EXPECT_GT(down, 0);
  EXPECT_EQ(cpu.backend().steps().bytes_up, 0);  // the CPU backend works in the host's arrays
}

// Verify mode is what makes the twin's silence mean something: a host write
// the backend was not told of shows at its next call.
TEST(Backend, DeviceTwinCatchesAnUndeclaredHostWrite) {
  std::mt19937_64 rng(5);
  round_input in;
  do {
    in = testing_support::random_round(rng);
  } while (in.state.nodes.empty() || in.pending.empty());
  round_matrices m = build_matrices(in);
  std::vector<std::int32_t> scores(static_cast<std::size_t>(m.n_nodes()) * m.n_classes());
  auto b = kernels::make_device_twin(true, true);
  kernels::round_binding const bind{m.nodes(),        m.classes(),        m.tasks(),       scores.data(),
                                    m.gpu_free.data(), m.cpu_free.data(), m.mem_free.data()};
  b->bind_round(bind);
  b->score(m.nodes(), m.classes(), m.tasks(), {}, scores);
  m.cpu_free[0] -= 1;
  b->host_wrote(0);  // declared: sent as a node record
  EXPECT_NO_THROW(b->stats(m.nodes(), m.tasks()));
  EXPECT_GT(b->steps().bytes_up, 0);
  m.cpu_free[0] -= 1;  // not declared
  EXPECT_THROW(b->stats(m.nodes(), m.tasks()), logic_error);
  b->bind_round(bind);  // bound afresh: everything sent again
  b->score(m.nodes(), m.classes(), m.tasks(), {}, scores);
  if (m.n_classes() > 0) {
    scores[0] += 1;  // a score cell, not declared
    EXPECT_THROW(b->stats(m.nodes(), m.tasks()), logic_error);
  }
  b->unbind_round();
  EXPECT_NO_THROW(b->stats(m.nodes(), m.tasks()));  // unbound: sent whole
}

TEST(Backend, AutoFallsBackToCpuWithAReason) {
  std::string said;
  auto b = kernels::select_backend("auto", [&](std::string const& m) { said = m; });
  if (kernels::cuda_unavailable_reason().empty()) {
    EXPECT_EQ(b->kind(), kernels::backend_kind::cuda);
  } else {
    EXPECT_EQ(b->kind(), kernels::backend_kind::cpu);
    EXPECT_NE(said.find("using the CPU backend"), std::string::npos) << said;
    EXPECT_THROW(kernels::make_backend(kernels::backend_kind::cuda), logic_error);
  }
  EXPECT_THROW(kernels::select_backend("tpu"), logic_error);
}

}  // namespace
}  // namespace placer

#include <gtest/gtest-spi.h>

namespace placer {
namespace {

// The invariant checker itself must catch a broken result.
std::string failures_of(round_input const& in, round_result const& r) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    expect_round_invariants(in, r);
  }
  std::string all;
  for (int i = 0; i < results.size(); ++i) all += results.GetTestPartResult(i).message();
  return all;
}

TEST(Invariants, CatchOverCommitAndPartialGang) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(2).build();
  job j = gpu_job("two", 2, 1000, 2);
  j.gang = true;
  in.pending.push_back(j);
  round_result r;
  r.placements.push_back({0, {{0, {0, 1}, 1000}, {0, {0, 1}, 1000}}});  // 4 GPUs on a 2-GPU node
  EXPECT_NE(failures_of(in, r).find("over-committed"), std::string::npos);
  r.placements[0].replicas.pop_back();  // now a partial gang
  EXPECT_NE(failures_of(in, r).find("partial gang"), std::string::npos);
  EXPECT_NE(failures_of(in, round_result{}).find("neither placed nor unplaced"), std::string::npos);
  r.unplaced_jobs.push_back({0, unplaced_reason::gang_incomplete, ""});
  r.placements[0].replicas.push_back({0, {0, 1}, 1000});
  r.placements[0].replicas.pop_back();
  in.pending[0].gang = false;
  EXPECT_EQ(failures_of(in, r), "");  // a valid partial non-gang placement passes
}

}  // namespace
}  // namespace placer
