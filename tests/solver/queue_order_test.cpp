// Queue order (policy::order) and aging (policy::age): docs/policies.md,
// "Queue order". The promise is checked from outside the solver: for every
// job left waiting for capacity while a later job of its priority started,
// a round of that job alone on the cluster its predecessors left (the
// placements of every job of a higher priority, and of every earlier job of
// its own) must not place it.
#include <placer/kernels/backend.hpp>
#include <placer/sim/sim_workloads.hpp>
#include <placer/sim/simulator.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "../support/assign_only.hpp"
#include "assigner.hpp"
#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "../support/scoped_env.hpp"

namespace placer {
namespace {

solver cpu_solver() { return solver(kernels::make_backend(kernels::backend_kind::cpu)); }

job gpu_job(std::string name, int gpus, std::int64_t submit, int replicas = 1, int priority = 0) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  j.gang = replicas > 1;
  j.distinct_nodes = replicas > 1;
  j.submit_time = submit;
  j.priority = priority;
  return j;
}

bool waits_for_capacity(unplaced_reason r) {
  return r == unplaced_reason::insufficient_capacity || r == unplaced_reason::gang_incomplete ||
         r == unplaced_reason::topology_unsatisfiable;
}

placement const* placement_of(round_result const& r, std::int32_t j) {
  for (auto const& p : r.placements) {
    if (p.job == j) return &p;
  }
  return nullptr;
}

/// Ahead of job b in the queue: a higher priority, or the same and submitted
/// earlier (then the lower index).
bool ahead(round_input const& in, std::size_t a, std::size_t b) {
  auto const& x = in.pending[a];
  auto const& y = in.pending[b];
  return std::tuple(-x.priority, x.submit_time, a) < std::tuple(-y.priority, y.submit_time, b);
}

/// The first job that waits for capacity although it fits on what the jobs
/// ahead of it left, while a later job of its priority was placed; "" if none.
std::string first_overtaken(round_input const& in, round_result const& r) {
  for (auto const& u : r.unplaced_jobs) {
    auto const ju = static_cast<std::size_t>(u.job);
    if (!waits_for_capacity(u.reason) || placement_of(r, u.job) != nullptr) continue;
    bool later_placed = false;
    for (auto const& p : r.placements) {
      auto const jp = static_cast<std::size_t>(p.job);
      later_placed = later_placed || (in.pending[jp].priority == in.pending[ju].priority && ahead(in, ju, jp));
    }
    if (!later_placed) continue;
    round_input alone;
    alone.state = in.state;
    alone.running = in.running;
    alone.pol = in.pol;
    alone.now = in.now;
    for (auto const& p : r.placements) {
      auto const jp = static_cast<std::size_t>(p.job);
      if (!ahead(in, jp, ju)) continue;
      for (auto const& rp : p.replicas) {
        charge(alone.state.nodes[static_cast<std::size_t>(rp.node)], in.pending[jp].per_replica, rp, "test");
      }
    }
    alone.pending = {in.pending[ju]};
    auto const again = cpu_solver().solve(alone);
    if (!again.placements.empty()) {
      return in.pending[ju].name + " waits (" + u.detail + ") but fits on what the jobs ahead of it left";
    }
  }
  return "";
}

// The queue orders (detail::job_order, a counting sort over groups of
// priority, size and models) are std::sort's of the keys by priority, then
// (largest first) total GPU demand and models allowed, then submit time,
// then index: on random queues in submission order (the counting sort's
// own order) and out of it, with few groups and with as many as jobs (the
// groups' table growing mid-call), both orders, one scratch reused.
TEST(QueueOrder, JobOrderIsTheSortOfItsKeys) {
  std::mt19937_64 rng(40);
  detail::order_scratch scratch;
  std::vector<std::int32_t> order;
  int out_of_order = 0;
  for (int iter = 0; iter < 300; ++iter) {
    round_input in;
    auto const n = static_cast<int>(rng() % (iter % 10 == 0 ? 3000 : 200));
    bool const many = iter % 3 == 0;  // about as many groups as jobs
    std::int64_t t = 0;
    for (int k = 0; k < n; ++k) {
      t += static_cast<std::int64_t>(rng() % 3);  // ties too
      job j = gpu_job("j" + std::to_string(k), static_cast<int>(rng() % 3),
                      iter % 2 == 0 ? t : static_cast<std::int64_t>(rng() % 50), 1 + static_cast<int>(rng() % 4),
                      static_cast<int>(rng() % 3) - 1);
      if (many) j.per_replica.gpu_milli = 1 + static_cast<std::int32_t>(rng() % 1000);
      if (rng() % 4 == 0) j.allowed_gpu_models.assign(1 + rng() % 3, "H100");
      in.pending.push_back(std::move(j));
    }
    for (bool const largest : {false, true}) {
      detail::job_order(in, largest, order, scratch);
      std::vector<detail::order_key> want;
      for (int k = 0; k < n; ++k) {
        auto const& x = in.pending[static_cast<std::size_t>(k)];
        std::int64_t const models =
            x.per_replica.gpus > 0 && !x.allowed_gpu_models.empty() ? static_cast<std::int64_t>(x.allowed_gpu_models.size()) : 1000;
        want.push_back({-static_cast<std::int64_t>(x.priority), largest ? -x.per_replica.gpu_milli_total() * x.replicas : 0,
                        largest ? models : 0, x.submit_time, k});
      }
      std::sort(want.begin(), want.end());
      ASSERT_EQ(order.size(), want.size()) << "iteration " << iter;
      for (std::size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(order[k], want[k].index) << "iteration " << iter << " largest first " << largest << " place " << k;
        ASSERT_EQ(scratch.priority[k], in.pending[static_cast<std::size_t>(order[k])].priority)
            << "iteration " << iter << " largest first " << largest << " place " << k;
      }
    }
    out_of_order += iter % 2 == 1 && n > 1 ? 1 : 0;
  }
  EXPECT_GT(out_of_order, 100);
}

// The tiers of a round (assigner::run) are (key, position) pairs sorted,
// laid out by group_order stably by key: std::sort's order, on keys of a
// few values to as many as items, negative ones too.
TEST(QueueOrder, GroupOrderIsAStableSortByKey) {
  std::mt19937_64 rng(9);
  detail::group_scratch<std::int64_t> scratch;
  std::vector<std::int32_t> base, got;
  for (int iter = 0; iter < 200; ++iter) {
    auto const n = static_cast<std::size_t>(rng() % 2000);
    auto const values = static_cast<std::int64_t>(iter % 4 == 0 ? 100000 : 1 + rng() % 40);
    std::vector<std::pair<std::int64_t, std::int32_t>> items;
    for (std::size_t t = 0; t < n; ++t) {
      items.emplace_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(values)) - values / 2 -
                             (std::int64_t{1} << 40),
                         static_cast<std::int32_t>(t));
    }
    base.resize(n);
    for (std::size_t t = 0; t < n; ++t) base[t] = static_cast<std::int32_t>(t);
    detail::group_order(
        base, [&](std::int32_t t) { return items[static_cast<std::size_t>(t)].first; },
        [](std::int64_t k) { return static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ULL; }, scratch, got);
    auto want = items;
    std::sort(want.begin(), want.end());
    ASSERT_EQ(got.size(), n);
    for (std::size_t t = 0; t < n; ++t) ASSERT_EQ(got[t], want[t].second) << "iteration " << iter << " place " << t;
  }
}

TEST(QueueOrder, ALaterLargerJobDoesNotTakeWhatAnEarlierSmallJobNeeded) {
  // Two 8-GPU nodes. Submitted in this order: a 1-GPU job, then two 8-GPU
  // jobs. Largest first (pack) seats both 8-GPU jobs and the 1-GPU job,
  // submitted first, waits; in submission order it starts, the first 8-GPU
  // job too, and the second waits.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  in.pending = {gpu_job("small", 1, 0), gpu_job("big-a", 8, 1), gpu_job("big-b", 8, 2)};
  auto s = cpu_solver();
  in.pol.order = queue_order::pack;
  auto const packed = s.solve(in);
  expect_round_invariants(in, packed);
  ASSERT_EQ(placement_of(packed, 0), nullptr) << "premise: largest first leaves the small job out";
  EXPECT_NE(first_overtaken(in, packed), "");

  in.pol.order = queue_order::fifo;
  auto const fifo = s.solve(in);
  expect_round_invariants(in, fifo);
  EXPECT_NE(placement_of(fifo, 0), nullptr);
  EXPECT_NE(placement_of(fifo, 1), nullptr);
  EXPECT_EQ(placement_of(fifo, 2), nullptr);
  EXPECT_EQ(first_overtaken(in, fifo), "");
  EXPECT_EQ(policy{}.order, queue_order::fifo) << "fifo is the default";
}

TEST(QueueOrder, ALaterJobThatFitsInWhatIsLeftStillStarts) {
  // Backfill, as Slurm's and Kueue's BestEffortFIFO: an earlier 2-node gang
  // cannot start (one node is busy), so the later 1-GPU jobs take what is
  // free; they take nothing the gang could have used this round.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[1].gpu_free_milli.assign(8, 0);
  in.state.nodes[1].gpu_free_milli[0] = 1000;
  in.pending = {gpu_job("gang", 8, 0, 2), gpu_job("one", 1, 1), gpu_job("two", 1, 2)};
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  EXPECT_EQ(placement_of(r, 0), nullptr);
  EXPECT_NE(placement_of(r, 1), nullptr);
  EXPECT_NE(placement_of(r, 2), nullptr);
  EXPECT_EQ(first_overtaken(in, r), "");
}

// A long queue the cluster cannot hold: 600 jobs of 8 GPUs, each of which
// fits an empty node but none now (every node half busy), among 1-GPU jobs.
// The 1-GPU jobs take the 16 free GPUs in submission order, the rest wait,
// and nothing is overtaken; under the fifo order's second assignment a
// class no node takes is not scanned again for each of its jobs
// (assigner::place_greedy), which PLACER_VERIFY_SCORES checks at each skip,
// on the greedy algorithm too.
TEST(QueueOrder, ALongQueueTheClusterCannotHoldWaitsAndTheSmallJobsStart) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  for (auto& nd : in.state.nodes) {
    for (std::size_t g = 0; g < 4; ++g) nd.gpu_free_milli[g] = 0;
  }
  for (int k = 0; k < 900; ++k) in.pending.push_back(gpu_job("j" + std::to_string(k), k % 3 == 2 ? 1 : 8, k));
  testing_support::scoped_env const verify("PLACER_VERIFY_SCORES", "1");
  for (auto const algo : {algorithm::placer, algorithm::greedy}) {
    in.pol.algo = algo;
    auto s = cpu_solver();
    round_result r;
    ASSERT_NO_THROW(r = s.solve(in));
    expect_round_invariants(in, r);
    ASSERT_EQ(r.placements.size(), 16U);
    for (auto const& p : r.placements) {
      EXPECT_EQ(p.job % 3, 2) << "a 1-GPU job";
      EXPECT_LT(p.job, 48) << "the first 16 of them";
    }
    ASSERT_EQ(r.unplaced_jobs.size(), 884U);
    for (auto const& u : r.unplaced_jobs) EXPECT_TRUE(waits_for_capacity(u.reason)) << "job " << u.job;
    EXPECT_EQ(first_overtaken(in, r), "");
  }
}

TEST(QueueOrder, TheNextWindowClosesAtTheFirstJobThatDoesNotFit) {
  // Two 8-GPU nodes, the second with 5 GPUs free. The first window is a
  // 2 x 6 gang, which the free sum holds (12 of 13) and the nodes do not;
  // the 8-, 4- and 2-GPU jobs behind it wait for the next window, drawn
  // from the 13 GPUs still free. It holds the 8 and the 4 (1 GPU left);
  // the 2-GPU job, which fits the cluster's free sum but not what the
  // window leaves, waits for the window after, as the first window's rule
  // has it (assigner::queue_window). Tried before the window instead, it
  // took GPUs the 4-GPU job needed, and the round was assigned again in
  // order to undo it.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[1].gpu_free_milli = {1000, 1000, 1000, 1000, 1000, 0, 0, 0};
  in.pending = {gpu_job("gang", 6, 0, 2), gpu_job("eight", 8, 1), gpu_job("four", 4, 2), gpu_job("two", 2, 3)};
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  EXPECT_EQ(placement_of(r, 0), nullptr) << "premise: the gang fits the sums, not the nodes";
  EXPECT_NE(placement_of(r, 1), nullptr);
  EXPECT_NE(placement_of(r, 2), nullptr);
  EXPECT_EQ(placement_of(r, 3), nullptr);
  EXPECT_EQ(first_overtaken(in, r), "");
  for (auto const& st : r.timing) EXPECT_NE(st.stage, "order") << "the window overtook a job";
}

/// An A100 node and an H100 node of 8 GPUs, labelled with their model as
/// the Slurm bridge labels a node's features.
cluster a100_and_h100_nodes() {
  cluster c = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  for (std::size_t i = 0; i < 2; ++i) {
    auto& nd = c.nodes[i];
    nd.gpu_model = i == 0 ? "a100" : "h100";
    nd.labels.push_back("slurm.feature/" + nd.gpu_model + "=true");
  }
  return c;
}

TEST(QueueOrder, WhereTheEarlierJobsGoDecidesWhichLaterOnesFit) {
  // An A100 node and an H100 node, 8 GPUs each; jobs in submission order:
  // 2 GPUs, 8 GPUs, 2 and 4 GPUs on the A100 node (a node selector, as the
  // Slurm bridge sends --constraint=a100), 8 GPUs. Assigned in order by
  // score, the first job went to the H100 node and the 8-GPU job then only
  // fit the A100 node: the two A100 jobs waited, in order (nothing later
  // started), with 6 GPUs left on the H100 node. Slurm's node choice (the
  // first job on the first node) leaves the A100 node for them; the round
  // keeps the assignment that starts the earlier jobs: all four.
  round_input in;
  in.state = a100_and_h100_nodes();
  in.pending = {gpu_job("two", 2, 0), gpu_job("eight", 8, 1), gpu_job("a100-two", 2, 2), gpu_job("a100-four", 4, 3),
                gpu_job("eight-b", 8, 4)};
  in.pending[2].constraints.node_selector = {"slurm.feature/a100=true"};
  in.pending[3].constraints.node_selector = {"slurm.feature/a100=true"};
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  for (std::int32_t j = 0; j < 4; ++j) EXPECT_NE(placement_of(r, j), nullptr) << in.pending[static_cast<std::size_t>(j)].name;
  EXPECT_EQ(placement_of(r, 4), nullptr);
  ASSERT_NE(placement_of(r, 1), nullptr);
  EXPECT_EQ(placement_of(r, 1)->replicas.front().node, 1) << "the 8-GPU job on the H100 node";
  EXPECT_EQ(first_overtaken(in, r), "");
  bool linear = false;
  for (auto const& st : r.timing) linear = linear || st.stage == "linear";
  EXPECT_TRUE(linear) << "a job waits in a small fifo round: the linear candidate ran";

  // pack is what it was: largest first, no second candidate.
  in.pol.order = queue_order::pack;
  auto const packed = s.solve(in);
  expect_round_invariants(in, packed);
  for (auto const& st : packed.timing) EXPECT_NE(st.stage, "linear");
}

TEST(QueueOrder, AmongRoundsThatOvertakeNoOneTheOneThatStartsMoreJobs) {
  // An A100 node and an H100 node, 8 GPUs each; submitted in this order: a
  // 2-GPU job (any model), an 8-GPU job pinned to A100, then fourteen 1-GPU
  // jobs. Two rounds keep the promise: the 2-GPU job on the H100 node, the
  // A100 job on the A100 node and six 1-GPU jobs (8 jobs, 16 GPUs; the
  // rule before preferred it, as it starts the earlier job), or Slurm's: the
  // 2-GPU job on the first node, the A100 node, where the 8-GPU job then
  // does not fit at its turn, and all fourteen 1-GPU jobs (15 jobs, 16
  // GPUs). Queue order keeps the one that starts more jobs.
  round_input in;
  in.state = a100_and_h100_nodes();
  in.pending = {gpu_job("two", 2, 0), gpu_job("a100-eight", 8, 1)};
  in.pending[1].constraints.node_selector = {"slurm.feature/a100=true"};
  for (int k = 0; k < 14; ++k) in.pending.push_back(gpu_job("one-" + std::to_string(k), 1, 2 + k));
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  EXPECT_EQ(r.placements.size(), 15u);
  EXPECT_EQ(r.metrics.gpu_milli_placed, 16000);
  EXPECT_EQ(placement_of(r, 1), nullptr) << "the A100 job waits";
  ASSERT_NE(placement_of(r, 0), nullptr);
  EXPECT_EQ(placement_of(r, 0)->replicas.front().node, 0) << "the 2-GPU job on the A100 node, as Slurm puts it";
  // Every job that waits (the A100 job) does not fit on what the jobs
  // ahead of it left: the 2-GPU job took 2 of the A100 node's 8 GPUs.
  EXPECT_EQ(first_overtaken(in, r), "");

  // Take the 2-GPU job away and the A100 job fits at its turn: it starts.
  in.pending.erase(in.pending.begin());
  auto const r2 = s.solve(in);
  expect_round_invariants(in, r2);
  EXPECT_NE(placement_of(r2, 0), nullptr);
  EXPECT_EQ(first_overtaken(in, r2), "");
}

TEST(QueueOrder, RandomRoundsOvertakeNoOne) {
  // Random clusters and jobs of every shape (gangs, topology, fractions,
  // models, pools, constraints), 1,500 rounds, plus the 10k scenario.
  std::mt19937_64 rng(0x51f0);
  auto s = cpu_solver();
  int waited = 0, reassigned = 0;
  for (int t = 0; t < 1500; ++t) {
    SCOPED_TRACE("round " + std::to_string(t));
    auto in = testing_support::random_round(rng, 6, 40);
    if (t % 2 == 1) testing_support::add_random_constraints(rng, in);
    in.pol.queue.loaning = false;  // reclaims move capacity between rounds' parts
    in.pol.stacking = t % 3 == 2;  // its last step moves the round's replicas
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    for (auto const& u : r.unplaced_jobs) waited += waits_for_capacity(u.reason) ? 1 : 0;
    for (auto const& st : r.timing) reassigned += st.stage == "order" ? 1 : 0;
    auto const why = first_overtaken(in, r);
    ASSERT_EQ(why, "");
  }
  EXPECT_GT(waited, 1000) << "the rounds must be full enough for the order to matter";
  std::printf("%d jobs waited for capacity; %d of 1500 rounds were assigned again in order\n", waited, reassigned);
  auto in = traces::make_scenario(traces::scenario_preset("10k"));
  auto const r = s.solve(in);
  EXPECT_EQ(first_overtaken(in, r), "");
}

// A level's later windows are drawn by the tier program where the chain
// gets to them (kernels::tier_window: a draw, then its slots, the chain
// stopping after them where jobs are left past the window). The program is
// one source: the CPU backend, the device twin (resident, its copies
// checked against the host's at every call) and a grid twin of 2 CTAs of
// 4 workers place the same, on full random rounds in submission order.
TEST(QueueOrder, WindowsDrawnByTheProgramPlaceTheSameOnEveryBackend) {
  std::mt19937_64 rng(0x3d1a);
  auto cpu = cpu_solver();
  solver twin(kernels::make_device_twin(/*resident=*/true, /*verify=*/true));
  solver grid(kernels::make_device_twin_grid(2, 4));
  int drawn_twice = 0, waited = 0;
  for (int t = 0; t < 200; ++t) {
    SCOPED_TRACE("round " + std::to_string(t));
    auto in = testing_support::random_round(rng, 6, 40);
    if (t % 2 == 1) testing_support::add_random_constraints(rng, in);
    in.pol.queue.loaning = false;
    in.pol.stacking = t % 3 == 2;
    auto const want = cpu.solve(in);
    for (auto const& u : want.unplaced_jobs) waited += waits_for_capacity(u.reason) ? 1 : 0;
    for (solver* other : {&twin, &grid}) {
      if (other == &grid && t % 4 != 0) continue;  // the grid's 8 threads on 2 cores: a round in 4 (50)
      auto const got = other->solve(in);
      ASSERT_EQ(got.placements.size(), want.placements.size()) << other->backend().description();
      for (std::size_t k = 0; k < want.placements.size(); ++k) {
        ASSERT_EQ(got.placements[k].job, want.placements[k].job);
        ASSERT_EQ(got.placements[k].replicas, want.placements[k].replicas) << "job " << want.placements[k].job;
      }
      ASSERT_EQ(got.unplaced_jobs.size(), want.unplaced_jobs.size());
      if (other != &twin) continue;
      // A chain that stopped after a window: the assignment waited again.
      for (auto const& st : got.timing) drawn_twice += st.stage == "assign" && st.waits > 1 ? 1 : 0;
    }
    EXPECT_EQ(first_overtaken(in, want), "");
  }
  EXPECT_GT(waited, 200) << "the rounds must be full enough for windows";
  EXPECT_GT(drawn_twice, 10) << "some rounds must leave jobs past a drawn window";
  std::printf("%d jobs waited for capacity; %d of 200 rounds drew a window past a drawn one\n", waited, drawn_twice);
}

TEST(QueueOrder, StrictBlocksTheQueueBehindAJobThatCannotStart) {
  // Two queues on two 8-GPU nodes, one node busy. In queue "a" a 2-node gang
  // cannot start: strict order holds every later job of "a"; queue "b" goes on.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[1].gpu_free_milli.assign(8, 0);
  auto gang = gpu_job("a-gang", 8, 0, 2);
  auto a1 = gpu_job("a-one", 1, 1);
  auto b1 = gpu_job("b-one", 1, 2);
  gang.queue = a1.queue = "a";
  b1.queue = "b";
  in.pending = {gang, a1, b1};
  in.pol.order = queue_order::strict;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  EXPECT_EQ(placement_of(r, 0), nullptr);
  EXPECT_EQ(placement_of(r, 1), nullptr);
  EXPECT_NE(placement_of(r, 2), nullptr);
  auto const u = std::find_if(r.unplaced_jobs.begin(), r.unplaced_jobs.end(), [](auto const& x) { return x.job == 1; });
  ASSERT_NE(u, r.unplaced_jobs.end());
  EXPECT_EQ(u->reason, unplaced_reason::queue_blocked);
  EXPECT_NE(u->detail.find("a-gang"), std::string::npos) << u->detail;
  // fifo lets a-one backfill.
  in.pol.order = queue_order::fifo;
  EXPECT_NE(placement_of(s.solve(in), 1), nullptr);
}

TEST(QueueOrder, AgingRaisesAWaitingJobButNotPastAHigherClass) {
  // One 8-GPU node. Pack order: a 4-GPU job submitted long ago, an 8-GPU
  // job just now, both priority 0; and a priority-10 8-GPU job. Priority 10
  // goes first either way, so nothing else fits; without it, the old job
  // ages into a level of its own above the new 8-GPU job.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build();
  in.now = 10'000;
  in.pending = {gpu_job("old", 4, 0), gpu_job("new", 8, 9'990), gpu_job("vip", 8, 9'995, 1, 10)};
  in.pol.order = queue_order::pack;
  in.pol.age.weight = 1000;
  in.pol.age.max_age_s = 10'000;
  auto s = cpu_solver();
  auto r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 2) << "aging never jumps a higher class unless told to";
  in.pol.age.cross_priority = true;  // old: 0 + 1000 > 10
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 0);
  in.pending.pop_back();
  in.pol.age.cross_priority = false;
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 0) << "aged above the later, larger job of its class";
  in.pol.age.weight = 0;
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 1) << "premise: pack order without aging seats the larger job";
  in.pol.age = {.weight = 1, .max_age_s = 0};
  EXPECT_THROW((void)s.solve(in), logic_error);
  EXPECT_EQ(parse_queue_order("strict"), queue_order::strict);
  EXPECT_STREQ(queue_order_name(queue_order::pack), "pack");
  EXPECT_THROW((void)parse_queue_order("lifo"), logic_error);
}

/// A stream of 2-node gangs of whole nodes, one every 15 minutes for an
/// hour each (the 8 nodes' whole capacity), and a 1-GPU job with every
/// fourth gang; the 1-GPU jobs' waits.
std::vector<std::int64_t> small_job_waits(queue_order order, aging age) {
  sim::workload w;
  w.name = "gangs-and-singles";
  w.nodes = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(8).gpus(8).build();
  std::int64_t const gap = 900;
  for (int k = 0; k < 240; ++k) {
    auto g = gpu_job("gang-" + std::to_string(k), 8, k * gap, 2);
    g.estimated_duration = 3600;
    w.jobs.push_back(g);
    w.durations.push_back(3600);
    if (k % 4 == 0) {
      auto one = gpu_job("one-" + std::to_string(k), 1, k * gap + 1);
      one.estimated_duration = 600;
      w.jobs.push_back(one);
      w.durations.push_back(600);
    }
  }
  sim::sim_config cfg;
  cfg.order = order;
  cfg.age = age;
  cfg.interval = 60;
  cfg.horizon = 240 * gap;
  auto s = cpu_solver();
  auto const res = sim::run_simulation(w, cfg, sim::in_process(s));
  std::vector<std::int64_t> waits;
  for (auto const& j : res.jobs) {
    if (j.name.rfind("one-", 0) != 0) continue;
    waits.push_back(j.start < 0 ? res.t_end - j.submit : j.start - j.submit);
  }
  return waits;
}

TEST(QueueOrder, SmallJobsAmongAStreamOfGangsWaitBoundedTimes) {
  // Largest first, a 1-GPU job waits behind every gang that comes after it
  // while one is waiting: at full load, always. In submission order it
  // waits for the gangs ahead of it; in pack order with aging (a point a
  // minute, Slurm's default PriorityMaxAge of 7 days), for about as long.
  auto const fifo = small_job_waits(queue_order::fifo, {});
  auto const pack = small_job_waits(queue_order::pack, {});
  auto const aged = small_job_waits(queue_order::pack, {.weight = 7 * 24 * 60, .max_age_s = 7 * 24 * 3600});
  ASSERT_EQ(fifo.size(), 60U);
  auto const worst = [](std::vector<std::int64_t> const& v) { return *std::max_element(v.begin(), v.end()); };
  std::printf("worst 1-GPU wait: fifo %lld s, pack %lld s, pack with aging %lld s\n",
              static_cast<long long>(worst(fifo)), static_cast<long long>(worst(pack)),
              static_cast<long long>(worst(aged)));
  EXPECT_LE(worst(fifo), 3 * 3600) << "about the gangs ahead of it";
  EXPECT_LE(worst(aged), 3 * 3600);
  EXPECT_GT(worst(pack), 4 * worst(fifo)) << "premise: largest first starves them";
}

// The queue-order candidate modelled on Slurm's cons_tres (assigner::linear,
// the solver's linear candidate) honours the round's topology. Two leaves of
// four 8-GPU nodes; the last node of the first leaf and the first of the
// second have a GPU and some CPU in use. A gang of two 4-GPU replicas on
// distinct nodes: Slurm's choice on the whole cluster takes the two nodes
// with the fewest CPUs free, one in each leaf. With a leaf preferred or
// required, it goes into one leaf (the first of equals) and takes Slurm's
// nodes there; without a level, Slurm's spread as before.
TEST(QueueOrder, TheSlurmCandidateKeepsAGangThatFitsOneRackInOneRack) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(4).gpus(8).build();
  for (std::size_t n : {3U, 4U}) {
    in.state.nodes[n].gpu_free_milli[0] = 0;
    in.state.nodes[n].cpu_milli_free -= 8000;
  }
  job gang = gpu_job("gang", 4, 0, 2);  // gang, distinct nodes
  auto leaves = [&](topology_mode mode) {
    gang.topo_mode = mode;
    gang.topology_level = mode == topology_mode::none ? -1 : 2;  // levels: cluster, spine, leaf
    in.pending = {gang};
    auto const out = testing_support::assign_only(in, detail::assign_mode::greedy, true).out;
    expect_round_invariants(in, out);
    std::set<std::int32_t> nodes, domains;
    for (auto const& pl : out.placements) {
      for (auto const& rp : pl.replicas) {
        nodes.insert(rp.node);
        domains.insert(in.state.nodes[static_cast<std::size_t>(rp.node)].domain);
      }
    }
    EXPECT_EQ(nodes.size(), 2U);
    return std::pair{nodes, domains.size()};
  };
  EXPECT_EQ(leaves(topology_mode::none), (std::pair{std::set<std::int32_t>{3, 4}, std::size_t{2}}))
      << "premise: Slurm's choice without a topology spans the two leaves";
  EXPECT_EQ(leaves(topology_mode::preferred), (std::pair{std::set<std::int32_t>{0, 3}, std::size_t{1}}));
  EXPECT_EQ(leaves(topology_mode::required), (std::pair{std::set<std::int32_t>{0, 3}, std::size_t{1}}));
}

}  // namespace
}  // namespace placer
