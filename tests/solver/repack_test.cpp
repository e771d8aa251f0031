// The packing repair (detail::repack, the round's "repack" stage): a round's
// single-node jobs placed again one at a time on the same scores, largest
// first. An iteration of the tier program gives a node one copy at most, so
// without it a round's jobs of one shape land one a node (docs/results.md,
// "Rounds that fragment more than greedy").
#include "assigner.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <random>
#include <set>
#include <string>

#include "../support/assign_only.hpp"
#include "../support/invariants.hpp"
#include "../support/random_round.hpp"

namespace placer {
namespace {

job gpu_job(std::string name, int gpus, std::int64_t submit = 0) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 4000 * gpus;
  j.per_replica.memory_mib = 32 * 1024 * gpus;
  j.submit_time = submit;
  return j;
}

/// ITP's shape (docs/simulator.md): 8-GPU nodes with 4 vCPU and 32 GiB a GPU, leaves of 8.
cluster itp_nodes(int leaves) {
  return make_cluster().leaves_per_spine(leaves).nodes_per_leaf(8).gpus(8).cpu_milli(32000).memory_mib(256 * 1024).build();
}

bool staged(round_result const& r, char const* stage) {
  return std::any_of(r.timing.begin(), r.timing.end(), [&](auto const& t) { return t.stage == stage; });
}

std::set<std::int32_t> nodes_of(round_result const& r) {
  std::set<std::int32_t> on;
  for (auto const& p : r.placements) {
    for (auto const& rp : p.replicas) on.insert(rp.node);
  }
  return on;
}

// ITP cluster01 at 24 nodes, the round where the placer run and greedy's
// first part (t = 2,014,260): one node has two GPUs in use, two one-GPU
// jobs arrive. One copy a node, the assignment put the second on an empty
// node; greedy, and the repaired round, put both on the node in use. And
// sixteen one-GPU jobs on the empty cluster fill two nodes, not sixteen.
// On the CPU and on the device twin, which must see the moves before the
// statistics after the round.
TEST(Repack, ARoundsJobsFillTheNodeInUseBeforeAnEmptyOne) {
  round_input in;
  in.state = itp_nodes(3);
  running_job r;
  r.name = "running";
  r.per_replica = gpu_job("", 1).per_replica;
  for (int g = 0; g < 2; ++g) {
    r.replicas.push_back({0, {g}, 1000});
    in.state.nodes[0].gpu_free_milli[static_cast<std::size_t>(g)] = 0;
    in.state.nodes[0].cpu_milli_free -= 4000;
    in.state.nodes[0].memory_mib_free -= 32 * 1024;
  }
  in.running.push_back(r);
  in.pending = {gpu_job("a", 1, 1), gpu_job("b", 1, 2)};
  for (auto* make : {+[] { return kernels::make_backend(kernels::backend_kind::cpu); },
                     +[] { return kernels::make_device_twin(true, true); }}) {
    solver s(make());
    SCOPED_TRACE(s.backend().description());
    round_result got;
    ASSERT_NO_THROW(got = s.solve(in));
    expect_round_invariants(in, got);
    ASSERT_EQ(got.placements.size(), 2U);
    EXPECT_EQ(nodes_of(got), (std::set<std::int32_t>{0}));
    EXPECT_TRUE(staged(got, "repack")) << "the assignment itself put them on two nodes";
    EXPECT_DOUBLE_EQ(got.metrics.gfr_after, 1.0 / 24.0);
    auto greedy = in;
    greedy.pol.algo = algorithm::greedy;
    EXPECT_EQ(nodes_of(s.solve(greedy)), nodes_of(got)) << "greedy, one job at a time, does the same";

    round_input empty;
    empty.state = itp_nodes(3);
    for (int k = 0; k < 16; ++k) empty.pending.push_back(gpu_job("one-" + std::to_string(k), 1, k));
    auto const sixteen = s.solve(empty);
    expect_round_invariants(empty, sixteen);
    EXPECT_EQ(sixteen.placements.size(), 16U);
    EXPECT_EQ(nodes_of(sixteen).size(), 2U);
    EXPECT_DOUBLE_EQ(sixteen.metrics.gfr_after, 0.0);
  }
}

// The budget: the repair runs while the round's movable replicas x nodes
// is within it, and over it leaves the assignment's round as it was (the
// 10k and 100k rounds find that with one scan of their placements).
// Sixteen one-GPU jobs on 24 empty nodes: 384 cells.
TEST(Repack, OverItsBudgetTheRoundIsLeftAsAssigned) {
  round_input in;
  in.state = itp_nodes(3);
  for (int k = 0; k < 16; ++k) in.pending.push_back(gpu_job("one-" + std::to_string(k), 1, k));
  auto b = kernels::make_backend(kernels::backend_kind::cpu);
  detail::repack_scratch scratch;
  auto [m, out, p] = testing_support::assign_only(in, detail::assign_mode::placer);
  auto const assigned = out;
  ASSERT_EQ(assigned.placements.size(), 16U);
  ASSERT_GT(nodes_of(assigned).size(), 2U) << "premise: one copy a node an iteration spreads them";
  EXPECT_EQ(detail::repack(in, m, p, out, *b, 16 * 24 - 1, scratch), 0);
  for (std::size_t k = 0; k < out.placements.size(); ++k) EXPECT_EQ(out.placements[k].replicas, assigned.placements[k].replicas);
  EXPECT_GT(detail::repack(in, m, p, out, *b, 16 * 24, scratch), 0);
  expect_round_invariants(in, out);
  EXPECT_EQ(nodes_of(out).size(), 2U);
}

// The repair on its own, on a round built by hand (queue order fifo):
// three 8-GPU nodes, node 0 with one GPU free; two earlier one-GPU jobs e1
// and e2 spread over the empty nodes 1 and 2, an 8-GPU job w that waits for
// capacity, two later one-GPU jobs l1 (node 0) and l2 (node 2). w was
// promised it does not fit on what e1 and e2 left. Placed again, e1 would
// fill node 0 and e2 join node 1, and node 2 would be free for w: so the
// jobs up to w stay, and only the later ones are placed again (l2 joins e1,
// the first of equals). With w out for another reason, or largest first
// (no promise), everything moves.
TEST(Repack, TheJobsAheadOfOneThatWaitsStayWhereTheyAre) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(3).gpus(8).cpu_milli(32000).memory_mib(256 * 1024).build();
  for (std::size_t g = 0; g < 7; ++g) in.state.nodes[0].gpu_free_milli[g] = 0;
  in.state.nodes[0].cpu_milli_free = 4000;
  in.state.nodes[0].memory_mib_free = 32 * 1024;
  in.pending = {gpu_job("e1", 1, 0), gpu_job("e2", 1, 1), gpu_job("w", 8, 2), gpu_job("l1", 1, 3), gpu_job("l2", 1, 4)};
  kernels::score_params params;
  params.w_binpack = in.pol.w.binpack;
  params.w_fragmentation = in.pol.w.fragmentation;
  auto repaired = [&](bool w_waits) {
    round_matrices m = build_matrices(in);
    round_result out;
    auto put = [&](std::int32_t job, std::int32_t node) {
      std::uint64_t taken = 0;
      auto const c = m.job_class[static_cast<std::size_t>(job)];
      EXPECT_TRUE(kernels::take_replica(m.nodes(), m.classes(), c, node, m.gpu_free.data(), m.cpu_free.data(),
                                        m.mem_free.data(), taken));
      replica_placement rp{node, {std::countr_zero(taken)}, 1000};
      out.placements.push_back({job, {rp}});
    };
    put(0, 1);
    put(1, 2);
    put(3, 0);
    put(4, 2);
    out.unplaced_jobs.push_back({2, w_waits ? unplaced_reason::insufficient_capacity : unplaced_reason::no_feasible_node, ""});
    auto b = kernels::make_backend(kernels::backend_kind::cpu);
    detail::repack_scratch scratch;
    EXPECT_GT(detail::repack(in, m, params, out, *b, std::int64_t{1} << 18, scratch), 0);
    expect_round_invariants(in, out);
    std::vector<std::int32_t> node(in.pending.size(), -1);
    for (auto const& p : out.placements) node[static_cast<std::size_t>(p.job)] = p.replicas.front().node;
    return node;
  };
  EXPECT_EQ(repaired(true), (std::vector<std::int32_t>{1, 2, -1, 0, 1}));
  EXPECT_EQ(repaired(false), (std::vector<std::int32_t>{0, 1, -1, 1, 1}));
  in.pol.order = queue_order::pack;
  EXPECT_EQ(repaired(true), (std::vector<std::int32_t>{0, 1, -1, 1, 1}));
}

/// Nodes partly used and their FGD fragmentation (the round's task set).
std::pair<std::int64_t, std::int64_t> partly_and_fragmentation(round_matrices const& m) {
  kernels::node_stats_op const op{m.nodes(), m.tasks()};
  std::int64_t partly = 0, frag = 0;
  for (std::int32_t n = 0; n < m.n_nodes(); ++n) {
    auto const s = op(n);
    partly += s.partly_allocated_nodes;
    frag += s.frag_milli_ppm;
  }
  return {partly, frag};
}

// On random rounds of every shape, constraints on half of them, after the
// tier assignment: the repair keeps every job with its replica count and
// every rule of a placement (the invariants), leaves no more nodes partly
// used (as many: no more fragmentation), and its node arrays are the
// cluster its placements make; when it moves nothing, nothing changed.
TEST(Repack, KeepsEveryJobAndNeverFragmentsMore) {
  std::mt19937_64 rng(0x5eed54);
  int moved = 0, rounds = 0;
  for (int t = 0; t < 600; ++t) {
    SCOPED_TRACE("round " + std::to_string(t));
    auto in = testing_support::random_round(rng, 6, 40);
    if (t % 2 == 1) testing_support::add_random_constraints(rng, in);
    in.pol.order = t % 3 == 0 ? queue_order::pack : queue_order::fifo;
    auto [m, out, p] = testing_support::assign_only(in, detail::assign_mode::placer);
    auto const before = out;
    auto const stats_before = partly_and_fragmentation(m);
    auto b = kernels::make_backend(kernels::backend_kind::cpu);
    detail::repack_scratch scratch;
    auto const n = detail::repack(in, m, p, out, *b, std::int64_t{1} << 18, scratch);
    ++rounds;
    expect_round_invariants(in, out);
    ASSERT_EQ(out.placements.size(), before.placements.size());
    for (std::size_t k = 0; k < out.placements.size(); ++k) {
      EXPECT_EQ(out.placements[k].job, before.placements[k].job);
      EXPECT_EQ(out.placements[k].replicas.size(), before.placements[k].replicas.size());
    }
    EXPECT_LE(partly_and_fragmentation(m), stats_before);
    if (n == 0) {
      for (std::size_t k = 0; k < out.placements.size(); ++k) EXPECT_EQ(out.placements[k].replicas, before.placements[k].replicas);
    } else {
      ++moved;
    }
    // The arrays are the request's cluster with the placements charged.
    auto nodes = in.state.nodes;
    for (auto const& pl : out.placements) {
      for (auto const& rp : pl.replicas) charge(nodes[static_cast<std::size_t>(rp.node)], in.pending[static_cast<std::size_t>(pl.job)].per_replica, rp, "");
    }
    round_input after = in;
    after.state.nodes = nodes;
    round_matrices const m2 = build_matrices(after);
    EXPECT_EQ(m.gpu_free, m2.gpu_free);
    EXPECT_EQ(m.cpu_free, m2.cpu_free);
    EXPECT_EQ(m.mem_free, m2.mem_free);
  }
  std::printf("%d of %d rounds repaired\n", moved, rounds);
  EXPECT_GT(moved, rounds / 10) << "the rounds should give the repair something to do";
}

}  // namespace
}  // namespace placer
