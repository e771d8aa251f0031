// Backfill (EASY and conservative): hand-checked reservations and backfills,
// then a property test on random rounds checking, independently of the
// policy's own bookkeeping, that nothing over-commits and that no job
// started this round delays a reservation.
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <set>

#include "../support/invariants.hpp"
#include "policies/policies.hpp"

namespace placer {
namespace {

solver cpu_solver() { return solver(kernels::select_backend("cpu")); }

job gpu_job(std::string name, int gpus, std::int64_t duration, std::int64_t submit, int replicas = 1) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  j.gang = replicas > 1;
  j.estimated_duration = duration;
  j.submit_time = submit;
  return j;
}

/// A running job holding the first `gpus` GPUs of `node` until `end`.
void occupy(round_input& in, std::string name, std::int32_t node, int gpus, std::int64_t end) {
  running_job r;
  r.name = std::move(name);
  r.per_replica.gpus = gpus;
  r.per_replica.cpu_milli = 1000;
  r.per_replica.memory_mib = 1024;
  replica_placement rp;
  rp.node = node;
  auto& n = in.state.nodes[static_cast<std::size_t>(node)];
  for (std::int32_t g = 0; g < n.gpu_count() && static_cast<int>(rp.gpus.size()) < gpus; ++g) {
    if (n.gpu_free_milli[static_cast<std::size_t>(g)] == milli_per_gpu) {
      n.gpu_free_milli[static_cast<std::size_t>(g)] = 0;
      rp.gpus.push_back(g);
    }
  }
  ASSERT_EQ(static_cast<int>(rp.gpus.size()), gpus) << "test setup: node " << node << " has no room";
  n.cpu_milli_free -= r.per_replica.cpu_milli;
  n.memory_mib_free -= r.per_replica.memory_mib;
  r.replicas.push_back(rp);
  r.start_time = 0;
  r.estimated_end = end;
  in.running.push_back(std::move(r));
}

round_input flat_cluster(int nodes) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(nodes).gpus(8).build();
  return in;
}

placement const* placement_of(round_result const& r, std::int32_t j) {
  for (auto const& p : r.placements) {
    if (p.job == j) return &p;
  }
  return nullptr;
}

unplaced const* unplaced_of(round_result const& r, std::int32_t j) {
  for (auto const& u : r.unplaced_jobs) {
    if (u.job == j) return &u;
  }
  return nullptr;
}

std::set<std::int32_t> nodes_of(placement const& p) {
  std::set<std::int32_t> s;
  for (auto const& rp : p.replicas) s.insert(rp.node);
  return s;
}

// Nodes 0 and 1 are half busy until t=100, nodes 2 and 3 full until t=1000,
// so a gang of two whole nodes can start at t=100 on {0, 1} and no earlier.
// Jobs: 0 = that gang (head), 1 = short (ends at 50), 2 = long (ends at 500).
round_input head_blocked_until_100(int nodes) {
  round_input in = flat_cluster(nodes);
  occupy(in, "r0", 0, 4, 100);
  occupy(in, "r1", 1, 4, 100);
  occupy(in, "r2", 2, 8, 1000);
  occupy(in, "r3", 3, 8, 1000);
  if (nodes > 4) occupy(in, "r4", 4, 4, 1000);  // node 4: four GPUs free, never whole before t=1000
  in.pending.push_back(gpu_job("head", 8, 500, 0, 2));
  in.pending.push_back(gpu_job("short", 4, 50, 1));
  in.pending.push_back(gpu_job("long", 4, 500, 2));
  return in;
}

TEST(BackfillEasy, HeadGetsReservationShortJobBackfillsOntoItsNodes) {
  round_input in = head_blocked_until_100(5);
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);

  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
  auto const* u = unplaced_of(r, 0);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->reason, unplaced_reason::reserved);
  EXPECT_NE(u->detail.find("t=100"), std::string::npos) << u->detail;

  // The long job would still run at t=100: only node 4 is outside the
  // reservation. The short one ends by then, so the reserved nodes are open
  // to it (and are the only room left).
  auto const* lp = placement_of(r, 2);
  ASSERT_NE(lp, nullptr);
  EXPECT_EQ(nodes_of(*lp), (std::set<std::int32_t>{4}));
  auto const* sp = placement_of(r, 1);
  ASSERT_NE(sp, nullptr);
  auto const sn = nodes_of(*sp);
  EXPECT_TRUE(sn == std::set<std::int32_t>{0} || sn == std::set<std::int32_t>{1});
}

TEST(BackfillEasy, LongJobThatFitsOnlyOnReservedNodesWaits) {
  round_input in = head_blocked_until_100(4);
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);

  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
  EXPECT_NE(placement_of(r, 1), nullptr);  // the short job still starts
  EXPECT_EQ(placement_of(r, 2), nullptr);  // the long one would hold node 0 or 1 past t=100
  auto const* u = unplaced_of(r, 2);
  ASSERT_NE(u, nullptr);
  EXPECT_NE(u->reason, unplaced_reason::reserved);
}

TEST(BackfillEasy, JobWithoutEstimateIsTreatedAsNeverEnding) {
  round_input in = head_blocked_until_100(5);
  in.pending[1].estimated_duration = 0;  // "short" has no estimate now
  in.pending[2].estimated_duration = 50;  // and "long" became short
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.reservations.size(), 1U);
  auto const* p1 = placement_of(r, 1);
  ASSERT_NE(p1, nullptr);
  EXPECT_EQ(nodes_of(*p1), (std::set<std::int32_t>{4}));
  ASSERT_NE(placement_of(r, 2), nullptr);
}

TEST(BackfillEasy, OverrunJobMovesReservationToNowPlusOne) {
  round_input in = flat_cluster(3);
  in.now = 200;
  occupy(in, "late0", 0, 4, 150);  // past its estimate
  occupy(in, "late1", 1, 4, 150);
  occupy(in, "busy", 2, 8, 300);
  in.pending.push_back(gpu_job("head", 8, 500, 0, 2));
  in.pending.push_back(gpu_job("ends-at-201", 2, 1, 1));
  in.pending.push_back(gpu_job("ends-at-202", 2, 2, 2));
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);

  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_EQ(r.reservations[0].start_time, 201);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
  // Ending exactly at the reservation's start does not delay it; one second
  // later does, and nothing is free off the reserved nodes.
  EXPECT_NE(placement_of(r, 1), nullptr);
  EXPECT_EQ(placement_of(r, 2), nullptr);
}

TEST(BackfillOff, NoReservationsAndLongJobsTakeAnyRoom) {
  round_input in = head_blocked_until_100(4);
  ASSERT_EQ(in.pol.queue.backfill, backfill_mode::off);
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  EXPECT_TRUE(r.reservations.empty());
  EXPECT_NE(placement_of(r, 1), nullptr);
  EXPECT_NE(placement_of(r, 2), nullptr);  // lands on node 0 or 1, delaying the head
  auto const* u = unplaced_of(r, 0);
  ASSERT_NE(u, nullptr);
  EXPECT_NE(u->reason, unplaced_reason::reserved);
}

TEST(BackfillEasy, NothingBlockedChangesNothing) {
  round_input in = flat_cluster(2);
  occupy(in, "r0", 0, 4, 100);
  in.pending.push_back(gpu_job("a", 4, 500, 0));
  in.pending.push_back(gpu_job("b", 8, 500, 1));
  auto s = cpu_solver();
  auto const off = s.solve(in);
  in.pol.queue.backfill = backfill_mode::easy;
  auto const on = s.solve(in);
  EXPECT_TRUE(on.reservations.empty());
  ASSERT_EQ(on.placements.size(), 2U);
  ASSERT_EQ(off.placements.size(), 2U);
  for (std::int32_t j : {0, 1}) {
    auto const* a = placement_of(on, j);
    auto const* b = placement_of(off, j);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->replicas, b->replicas);
  }
  EXPECT_TRUE(on.unplaced_jobs.empty());
}

TEST(BackfillEasy, JobThatNeverFitsGetsNoReservationTheNextOneDoes) {
  round_input in = head_blocked_until_100(4);
  // Ahead of everything: a gang bigger than the cluster can ever hold.
  job huge = gpu_job("huge", 8, 500, -1, 5);
  in.pending.push_back(huge);  // index 3
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  auto const* u = unplaced_of(r, 3);
  ASSERT_NE(u, nullptr);
  EXPECT_NE(u->reason, unplaced_reason::reserved);
  EXPECT_EQ(placement_of(r, 2), nullptr);  // the one reservation is still protected
}

TEST(BackfillEasy, ReservationFollowsAJobStartedThisRound) {
  // One whole node free, two whole-node jobs: the first starts now (ends at
  // 100, before node 1's job at 300), so the second is reserved on node 0
  // from t=100. A long one-GPU job may only take node 1's last GPU.
  round_input in = flat_cluster(2);
  occupy(in, "r1", 1, 7, 300);
  in.pending.push_back(gpu_job("first", 8, 100, 0));
  in.pending.push_back(gpu_job("second", 8, 100, 1));
  in.pending.push_back(gpu_job("tiny-long", 1, 1000, 2));
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  auto const* p0 = placement_of(r, 0);
  ASSERT_NE(p0, nullptr);
  EXPECT_EQ(nodes_of(*p0), (std::set<std::int32_t>{0}));
  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 1);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0}));
  auto const* p2 = placement_of(r, 2);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(nodes_of(*p2), (std::set<std::int32_t>{1}));
}

TEST(BackfillEasy, HeadStartsWhenABiggerJobBehindItIsUndone) {
  // Within one priority level pack order places the biggest gang first, so
  // a later 2x8 gang takes both nodes and the earlier 2x4 gang is left out.
  // Backfill gives the head the room back; the big gang then waits for it.
  // (In submission order, the default, the head starts without backfill.)
  round_input in = flat_cluster(2);
  in.pol.order = queue_order::pack;
  in.pending.push_back(gpu_job("head", 4, 100, 0, 2));
  in.pending.push_back(gpu_job("big", 8, 100, 1, 2));
  auto s = cpu_solver();
  auto const off = s.solve(in);
  ASSERT_NE(placement_of(off, 1), nullptr) << "premise: the core prefers the bigger gang";
  ASSERT_EQ(placement_of(off, 0), nullptr);

  in.pol.queue.backfill = backfill_mode::easy;
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  auto const* hp = placement_of(r, 0);
  ASSERT_NE(hp, nullptr);
  EXPECT_EQ(hp->replicas.size(), 2U);
  // Best fit packs both replicas onto one node; the big gang needs both
  // nodes whole, so it waits for the head's end.
  EXPECT_EQ(placement_of(r, 1), nullptr);
  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 1);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
}

// Nodes 0, 1 half busy until 100; nodes 2, 3 half busy until 200. Two
// whole-node gangs: the first can start at 100 on {0, 1}; with those held,
// the second at 200 on {2, 3}. Then "mid" (ends at 150) and "long" (300).
round_input two_heads() {
  round_input in = flat_cluster(4);
  occupy(in, "r0", 0, 4, 100);
  occupy(in, "r1", 1, 4, 100);
  occupy(in, "r2", 2, 4, 200);
  occupy(in, "r3", 3, 4, 200);
  in.pending.push_back(gpu_job("head1", 8, 500, 0, 2));
  in.pending.push_back(gpu_job("head2", 8, 500, 1, 2));
  in.pending.push_back(gpu_job("mid", 4, 150, 2));
  in.pending.push_back(gpu_job("long", 4, 300, 3));
  return in;
}

TEST(BackfillConservative, TwoReservationsOnDisjointNodes) {
  round_input in = two_heads();
  in.pol.queue.backfill = backfill_mode::conservative;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);

  ASSERT_EQ(r.reservations.size(), 2U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_EQ(r.reservations[0].start_time, 100);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(r.reservations[1].job, 1);
  EXPECT_EQ(r.reservations[1].start_time, 200);
  EXPECT_EQ(r.reservations[1].nodes, (std::vector<std::int32_t>{2, 3}));
  for (std::int32_t j : {0, 1}) {
    auto const* u = unplaced_of(r, j);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->reason, unplaced_reason::reserved);
  }
  // "mid" outlasts t=100 but not t=200: it may only use {2, 3}. "long"
  // outlasts both and every free GPU is reserved.
  auto const* mp = placement_of(r, 2);
  ASSERT_NE(mp, nullptr);
  auto const mn = nodes_of(*mp);
  EXPECT_TRUE(mn == std::set<std::int32_t>{2} || mn == std::set<std::int32_t>{3});
  EXPECT_EQ(placement_of(r, 3), nullptr);
}

TEST(BackfillConservative, MaxReservationsCapsTheCount) {
  round_input in = two_heads();
  in.pol.queue.backfill = backfill_mode::conservative;
  in.pol.queue.max_reservations = 1;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_NE(placement_of(r, 3), nullptr);  // only {0, 1} is protected now
}

TEST(BackfillEasy, OneReservationSecondHeadUnprotected) {
  round_input in = two_heads();
  in.pol.queue.backfill = backfill_mode::easy;
  auto s = cpu_solver();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.reservations.size(), 1U);
  EXPECT_EQ(r.reservations[0].job, 0);
  EXPECT_EQ(r.reservations[0].nodes, (std::vector<std::int32_t>{0, 1}));
  auto const* u = unplaced_of(r, 1);
  ASSERT_NE(u, nullptr);
  EXPECT_NE(u->reason, unplaced_reason::reserved);
  // Both backfill onto {2, 3}, which only the first reservation leaves open.
  auto const* mp = placement_of(r, 2);
  auto const* lp = placement_of(r, 3);
  ASSERT_NE(mp, nullptr);
  ASSERT_NE(lp, nullptr);
  std::set<std::int32_t> both = nodes_of(*mp);
  for (auto n : nodes_of(*lp)) both.insert(n);
  EXPECT_EQ(both, (std::set<std::int32_t>{2, 3}));
}

// ------------------------------------------------------------ property test

/// When a running job gives its resources back, as the policy's contract says:
/// its estimate, or now + 1 once past it.
std::int64_t release_at(std::int64_t end, std::int64_t now) { return end > now ? end : now + 1; }

void give_back(cluster& c, demand const& d, std::vector<replica_placement> const& reps) {
  for (auto const& rp : reps) {
    auto& n = c.nodes[static_cast<std::size_t>(rp.node)];
    for (auto g : rp.gpus) {
      auto& f = n.gpu_free_milli[static_cast<std::size_t>(g)];
      f = std::min(milli_per_gpu, f + rp.gpu_milli);
    }
    n.cpu_milli_free = std::min(n.cpu_milli_capacity, n.cpu_milli_free + d.cpu_milli);
    n.memory_mib_free = std::min(n.memory_mib_capacity, n.memory_mib_free + d.memory_mib);
  }
}

void take(cluster& c, demand const& d, std::vector<replica_placement> const& reps) {
  for (auto const& rp : reps) {
    auto& n = c.nodes[static_cast<std::size_t>(rp.node)];
    for (auto g : rp.gpus) n.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
    n.cpu_milli_free -= d.cpu_milli;
    n.memory_mib_free -= d.memory_mib;
  }
}

/// Small rounds with running jobs ending before and after now. With
/// `gangs_only`, every multi-replica job is a gang (no partial placements).
round_input random_backfill_round(std::mt19937_64& rng, bool gangs_only) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  round_input in;
  in.now = 1000;
  in.state = make_cluster()
                 .spines(1)
                 .leaves_per_spine(pick(1, 2))
                 .nodes_per_leaf(pick(1, 4))
                 .gpus(pick(0, 1) == 0 ? 4 : 8)
                 .cpu_milli(32000)
                 .memory_mib(256 * 1024)
                 .build();
  // Running jobs: single-replica jobs on random free GPUs (some fractional),
  // and the odd two-node job, with ends before and after now.
  int const n_nodes = static_cast<int>(in.state.nodes.size());
  int const n_running = pick(0, 3 * n_nodes);
  for (int k = 0; k < n_running; ++k) {
    running_job rj;
    rj.name = "run-" + std::to_string(k);
    bool const frac = pick(0, 4) == 0;
    rj.per_replica.gpus = frac ? 1 : pick(1, 4);
    rj.per_replica.gpu_milli = frac ? pick(1, 9) * 100 : milli_per_gpu;
    rj.per_replica.cpu_milli = pick(0, 8) * 1000;
    rj.per_replica.memory_mib = pick(0, 32) * 1024;
    int const reps = n_nodes > 1 && pick(0, 5) == 0 ? 2 : 1;
    int const first = pick(0, n_nodes - 1);
    bool ok = true;
    cluster trial = in.state;
    for (int r = 0; r < reps && ok; ++r) {
      auto& n = trial.nodes[static_cast<std::size_t>((first + r) % n_nodes)];
      replica_placement rp;
      rp.node = (first + r) % n_nodes;
      rp.gpu_milli = rj.per_replica.gpu_milli;
      for (std::int32_t g = 0; g < n.gpu_count() && static_cast<int>(rp.gpus.size()) < rj.per_replica.gpus; ++g) {
        if (n.gpu_free_milli[static_cast<std::size_t>(g)] >= rp.gpu_milli) rp.gpus.push_back(g);
      }
      ok = static_cast<int>(rp.gpus.size()) == rj.per_replica.gpus && n.cpu_milli_free >= rj.per_replica.cpu_milli &&
           n.memory_mib_free >= rj.per_replica.memory_mib;
      if (ok) {
        take(trial, rj.per_replica, {rp});
        rj.replicas.push_back(rp);
      }
    }
    if (!ok) continue;
    in.state = std::move(trial);
    rj.gang = reps > 1;
    rj.start_time = in.now - pick(0, 500);
    rj.estimated_end = in.now + pick(-100, 400);
    in.running.push_back(std::move(rj));
  }
  int const n_jobs = pick(1, 10);
  for (int k = 0; k < n_jobs; ++k) {
    job j;
    j.name = "job-" + std::to_string(k);
    j.priority = pick(0, 2);
    j.submit_time = pick(0, 100);
    bool const frac = pick(0, 5) == 0;
    j.per_replica.gpus = frac ? 1 : std::min(8, 1 << pick(0, 3));
    j.per_replica.gpu_milli = frac ? pick(1, 9) * 100 : milli_per_gpu;
    j.per_replica.cpu_milli = pick(0, 8) * 1000;
    j.per_replica.memory_mib = pick(0, 32) * 1024;
    j.replicas = pick(0, 2) == 0 ? pick(2, 4) : 1;
    j.gang = j.replicas > 1 && (gangs_only || pick(0, 3) != 0);
    if (j.replicas > 1 && pick(0, 4) == 0) {
      j.topology_level = 2;  // one leaf
      j.topo_mode = topology_mode::required;
    }
    j.estimated_duration = pick(0, 9) == 0 ? 0 : pick(1, 500);
    in.pending.push_back(std::move(j));
  }
  return in;
}

/// Whether job j fits whole on `c` (hidden nodes marked unhealthy), with the
/// one-round solver.
bool fits_alone(solver& s, round_input const& in, cluster c, std::int32_t j, std::set<std::int32_t> const& hidden) {
  for (auto n : hidden) c.nodes[static_cast<std::size_t>(n)].healthy = false;
  round_input probe;
  probe.state = std::move(c);
  probe.pending = {in.pending[static_cast<std::size_t>(j)]};
  probe.pol.algo = in.pol.algo;
  probe.pol.w = in.pol.w;
  probe.now = in.now;
  auto const r = s.solve(probe);
  return r.placements.size() == 1 &&
         static_cast<std::int32_t>(r.placements[0].replicas.size()) == probe.pending[0].replicas;
}

TEST(BackfillProperty, NoOvercommitAndNoReservationDelayed) {
  std::mt19937_64 rng(20240611);
  auto s = cpu_solver();
  int rounds_with_reservations = 0, backfilled_behind = 0;
  for (int round = 0; round < 300; ++round) {
    // Multi-replica jobs are gangs here: queue_round drops the unplaced entry
    // of every placed job, partial ones included, which the invariants
    // reject (BackfillDirect covers partial placements).
    round_input in = random_backfill_round(rng, true);
    bool const conservative = round % 2 == 1;
    in.pol.queue.backfill = conservative ? backfill_mode::conservative : backfill_mode::easy;
    in.pol.queue.max_reservations = 1 + round % 3;
    SCOPED_TRACE("round " + std::to_string(round) + (conservative ? " conservative" : " easy"));
    round_result r;
    ASSERT_NO_THROW(r = s.solve(in));
    // Re-applies every placement to the input cluster: no GPU, CPU or memory
    // goes below zero (and the usual shape/gang/topology rules hold).
    expect_round_invariants(in, r);

    std::size_t const cap = conservative ? static_cast<std::size_t>(in.pol.queue.max_reservations) : 1U;
    EXPECT_LE(r.reservations.size(), cap);
    if (!r.reservations.empty()) ++rounds_with_reservations;

    // The cluster as the round leaves it, and when everything running
    // (given or started now) gives its resources back.
    cluster after = in.state;
    struct rel {
      std::int64_t t;
      demand d;
      std::vector<replica_placement> reps;
    };
    std::vector<rel> releases;
    for (auto const& rj : in.running) {
      releases.push_back({release_at(rj.estimated_end, in.now), rj.per_replica, rj.replicas});
    }
    for (auto const& p : r.placements) {
      auto const& j = in.pending[static_cast<std::size_t>(p.job)];
      take(after, j.per_replica, p.replicas);
      releases.push_back({release_at(in.now + j.estimated_duration, in.now), j.per_replica, p.replicas});
    }
    std::sort(releases.begin(), releases.end(), [](rel const& a, rel const& b) { return a.t < b.t; });

    // Queue position, to know which placements came after a reserved job.
    auto before = [&](std::int32_t a, std::int32_t b) {
      auto const& x = in.pending[static_cast<std::size_t>(a)];
      auto const& y = in.pending[static_cast<std::size_t>(b)];
      if (x.priority != y.priority) return x.priority > y.priority;
      if (x.submit_time != y.submit_time) return x.submit_time < y.submit_time;
      return a < b;
    };

    std::set<std::int32_t> held;  // earlier reservations' nodes (conservative)
    std::set<std::int32_t> reserved_jobs;
    for (auto const& rv : r.reservations) {
      EXPECT_TRUE(reserved_jobs.insert(rv.job).second) << "job " << rv.job << " reserved twice";
      EXPECT_EQ(placement_of(r, rv.job), nullptr);
      auto const* u = unplaced_of(r, rv.job);
      ASSERT_NE(u, nullptr);
      EXPECT_EQ(u->reason, unplaced_reason::reserved);
      EXPECT_GT(rv.start_time, in.now);
      ASSERT_FALSE(rv.nodes.empty());
      EXPECT_TRUE(std::is_sorted(rv.nodes.begin(), rv.nodes.end()));
      std::set<std::int32_t> const rn(rv.nodes.begin(), rv.nodes.end());
      EXPECT_EQ(rn.size(), rv.nodes.size());
      for (auto n : rn) EXPECT_EQ(held.count(n), 0U) << "node " << n << " in two reservations";

      // No job behind the reserved one runs on its nodes past its start.
      auto const& res_job = in.pending[static_cast<std::size_t>(rv.job)];
      for (auto const& p : r.placements) {
        if (!before(rv.job, p.job)) continue;
        auto const& j = in.pending[static_cast<std::size_t>(p.job)];
        bool const outlasts = j.estimated_duration == 0 || in.now + j.estimated_duration > rv.start_time;
        if (!outlasts) continue;
        ++backfilled_behind;
        for (auto const& rp : p.replicas) {
          EXPECT_EQ(rn.count(rp.node), 0U) << j.name << " (ends " << in.now + j.estimated_duration << ") on node "
                                          << rp.node << " reserved for " << res_job.name << " from "
                                          << rv.start_time;
        }
      }

      // The reserved job still fits by its start on the cluster this round
      // leaves (earlier reservations' nodes held).
      cluster c = after;
      bool fits = false;
      std::size_t k = 0;
      while (!fits && k < releases.size() && releases[k].t <= rv.start_time) {
        std::int64_t const t = releases[k].t;
        for (; k < releases.size() && releases[k].t == t; ++k) give_back(c, releases[k].d, releases[k].reps);
        fits = fits_alone(s, in, c, rv.job, held);
      }
      EXPECT_TRUE(fits) << res_job.name << " no longer fits by t=" << rv.start_time;
      held.insert(rn.begin(), rn.end());
    }
  }
  // The generator must exercise the policy, or the checks above are empty.
  EXPECT_GT(rounds_with_reservations, 60);
  EXPECT_GT(backfilled_behind, 0);
  std::cout << "[ stats    ] " << rounds_with_reservations << " rounds with reservations, " << backfilled_behind
            << " long placements behind a reservation checked\n";
}

TEST(BackfillDirect, WorkStateAndResultStayConsistent) {
  // Called as queue_round calls it: the core's batch applied to ws first.
  // Afterwards ws.state must be the input cluster minus exactly the
  // placements in out, and every job placed or reported, partial ones both.
  std::mt19937_64 rng(77);
  auto s = cpu_solver();
  detail::core_fn const core = [&](round_input const& sub) { return s.solve(sub); };
  int rounds_with_reservations = 0;
  for (int round = 0; round < 200; ++round) {
    round_input in = random_backfill_round(rng, false);
    in.pol.queue.backfill = round % 2 == 0 ? backfill_mode::easy : backfill_mode::conservative;
    in.pol.queue.max_reservations = 3;
    SCOPED_TRACE("round " + std::to_string(round));
    detail::work_state ws(in);
    detail::sub_round all;
    for (std::size_t j = 0; j < in.pending.size(); ++j) all.jobs.push_back(static_cast<std::int32_t>(j));
    round_result out = detail::assign_jobs(core, ws, all);
    for (auto const& p : out.placements) ws.start(p.job, p.replicas);
    ASSERT_NO_THROW(detail::backfill(core, ws, nullptr, nullptr, out));
    expect_round_invariants(in, out);
    if (!out.reservations.empty()) ++rounds_with_reservations;

    cluster expect = in.state;
    for (auto const& p : out.placements) {
      take(expect, in.pending[static_cast<std::size_t>(p.job)].per_replica, p.replicas);
    }
    ASSERT_EQ(expect.nodes.size(), ws.state.nodes.size());
    for (std::size_t n = 0; n < expect.nodes.size(); ++n) {
      EXPECT_EQ(expect.nodes[n].gpu_free_milli, ws.state.nodes[n].gpu_free_milli) << "node " << n;
      EXPECT_EQ(expect.nodes[n].cpu_milli_free, ws.state.nodes[n].cpu_milli_free) << "node " << n;
      EXPECT_EQ(expect.nodes[n].memory_mib_free, ws.state.nodes[n].memory_mib_free) << "node " << n;
    }
    // Alive entries started this round are exactly the placements.
    std::set<std::int32_t> started, placed;
    for (std::size_t r = in.running.size(); r < ws.running.size(); ++r) {
      if (ws.alive[r] == 0) continue;
      EXPECT_TRUE(started.insert(ws.started_from[r]).second) << "job " << ws.started_from[r] << " started twice";
    }
    for (auto const& p : out.placements) placed.insert(p.job);
    EXPECT_EQ(started, placed);
  }
  EXPECT_GT(rounds_with_reservations, 40);
}

}  // namespace
}  // namespace placer
