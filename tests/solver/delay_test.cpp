// Delay scheduling (solver/src/policies/delay.cpp) through the solver over
// several rounds sharing one queue_memory: a sensitive gang waits for a
// consolidated placement up to its class timer, then takes a spread one;
// timers follow observed waits within their bounds; memory stays bounded.
//
// The cluster: 1 spine, 2 leaves of 2 nodes x 8 GPUs (nodes 0-1 on leaf 0,
// 2-3 on leaf 1). Nodes 0 and 2 are busy, so no leaf has room for a
// 2 x 8-GPU gang while the cluster has.
#include <placer/kernels/backend.hpp>
#include <placer/solver/network_model.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include "../support/running.hpp"
#include "policies/policies.hpp"

namespace placer {
namespace {

solver cpu_solver() { return solver(kernels::select_backend("cpu")); }

constexpr char const* kClass = "gpus:<=16/sens:0.75-1.00";

job gang(std::string name, float sensitivity, std::int64_t submit, std::int64_t duration = 3600) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = 8;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = 2;
  j.gang = true;
  j.network_sensitivity = sensitivity;
  j.submit_time = submit;
  j.estimated_duration = duration;
  return j;
}

round_input split_round(std::int64_t now) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[0].gpu_free_milli.assign(8, 0);
  in.state.nodes[2].gpu_free_milli.assign(8, 0);
  in.pol.queue.delay_scheduling = true;
  in.now = now;
  return in;
}

unplaced const* reason_of(round_result const& r, std::int32_t j) {
  for (auto const& u : r.unplaced_jobs) {
    if (u.job == j) return &u;
  }
  return nullptr;
}

delay_timer const* timer_of(round_result const& r, std::string const& cls) {
  for (auto const& t : r.delay_timers) {
    if (t.job_class == cls) return &t;
  }
  return nullptr;
}

TEST(DelayClass, KeyFormatAndWhoIsClassified) {
  round_input in;  // threshold 0.5
  EXPECT_EQ(detail::delay_class(gang("g", 0.9F, 0), in), "gpus:<=16/sens:0.75-1.00");
  auto big = gang("g", 0.6F, 0);
  big.replicas = 3;  // 24 GPUs
  EXPECT_EQ(detail::delay_class(big, in), "gpus:<=32/sens:0.50-0.75");
  EXPECT_EQ(detail::delay_class(gang("g", 0.4F, 0), in), "");  // below the threshold
  auto loose = gang("g", 0.9F, 0);
  loose.gang = false;
  EXPECT_EQ(detail::delay_class(loose, in), "");  // not a gang
  auto single = gang("g", 0.9F, 0);
  single.replicas = 1;
  EXPECT_EQ(detail::delay_class(single, in), "");  // one replica never spreads
}

TEST(DelayScheduling, SensitiveGangWaitsThenTakesSpreadPlacement) {
  auto s = cpu_solver();
  queue_memory mem;
  // Worth of waiting: a spread over the two leaves of one spine crosses one
  // level, slowdown 1 + 0.5 x 1.0 = 1.5, so 0.5 x 3600 s = 1800 s; the first
  // timer of the class is a quarter of that: 450 s.
  auto in = split_round(100);
  in.pending.push_back(gang("g", 1.0F, 0));
  auto const r1 = s.solve(in, &mem);
  EXPECT_TRUE(r1.placements.empty());
  auto const* u = reason_of(r1, 0);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->reason, unplaced_reason::deferred);
  EXPECT_EQ(u->detail, "waiting for a consolidated placement on one leaf (waited 100s of 450s)");
  ASSERT_EQ(mem.deferred_since.count("g"), 1U);
  EXPECT_EQ(mem.deferred_since["g"], 100);
  auto const* t1 = timer_of(r1, kClass);
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->timer, 450);
  EXPECT_EQ(t1->samples, 0);

  // Still below the timer: still waiting.
  in.now = 449;
  auto const r2 = s.solve(in, &mem);
  EXPECT_TRUE(r2.placements.empty());
  ASSERT_NE(reason_of(r2, 0), nullptr);
  EXPECT_EQ(reason_of(r2, 0)->reason, unplaced_reason::deferred);
  EXPECT_EQ(mem.deferred_since["g"], 100);  // the first deferral is kept

  // Past the timer: the spread placement is taken.
  in.now = 500;
  auto const r3 = s.solve(in, &mem);
  ASSERT_EQ(r3.placements.size(), 1U);
  EXPECT_TRUE(r3.unplaced_jobs.empty());
  auto const sp = placement_spread(in.state, r3.placements[0].replicas);
  EXPECT_EQ(sp.nodes, 2);
  EXPECT_EQ(sp.levels_crossed, 1);  // nodes 1 and 3: two leaves
  EXPECT_TRUE(mem.deferred_since.empty());
  // The wait (500 s, censored: at least the timer) is a sample; the timer
  // follows it with headroom: 1.5 x 500 = 750 <= 1800.
  auto const* t3 = timer_of(r3, kClass);
  ASSERT_NE(t3, nullptr);
  EXPECT_EQ(t3->samples, 1);
  EXPECT_EQ(t3->observed_wait, 500);
  EXPECT_EQ(t3->timer, 750);
}

TEST(DelayScheduling, InsensitiveGangIsNeverDeferred) {
  auto s = cpu_solver();
  queue_memory mem;
  auto in = split_round(0);
  in.pending.push_back(gang("g", 0.2F, 0));
  auto const r = s.solve(in, &mem);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_TRUE(r.unplaced_jobs.empty());
  EXPECT_TRUE(mem.deferred_since.empty());
  EXPECT_TRUE(r.delay_timers.empty());
}

TEST(DelayScheduling, DeferredGangTakesTheLeafThatFrees) {
  auto s = cpu_solver();
  queue_memory mem;
  auto in = split_round(100);
  in.pending.push_back(gang("g", 1.0F, 0));
  auto const r1 = s.solve(in, &mem);
  ASSERT_NE(reason_of(r1, 0), nullptr);
  EXPECT_EQ(reason_of(r1, 0)->reason, unplaced_reason::deferred);

  // Node 2 frees: leaf 1 now holds the whole gang.
  in.now = 300;
  in.state.nodes[2].gpu_free_milli.assign(8, 1000);
  auto const r2 = s.solve(in, &mem);
  ASSERT_EQ(r2.placements.size(), 1U);
  for (auto const& rp : r2.placements[0].replicas) EXPECT_GE(rp.node, 2) << "not on leaf 1";
  EXPECT_EQ(placement_spread(in.state, r2.placements[0].replicas).levels_crossed, 0);
  EXPECT_TRUE(mem.deferred_since.empty());
  auto const* t = timer_of(r2, kClass);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->samples, 1);
  EXPECT_EQ(t->observed_wait, 300);
  EXPECT_EQ(t->timer, 450);  // 1.5 x 300
}

// Network preemption consolidates a deferred gang that could start now
// spread. One that has no room even spread waits for capacity like any
// blocked job: preempting for it would be priority preemption without the
// checkpoint window, and on a cluster of one leaf every blocked sensitive
// gang was such a case (ITP cluster01 on 8 nodes: 57-82 jobs preempted a
// run, p90 wait 5x; docs/policies.md).
TEST(DelayScheduling, NetworkPreemptionOnlyForGangsThatCouldStartSpread) {
  auto s = cpu_solver();
  std::vector<int> const all{0, 1, 2, 3, 4, 5, 6, 7};
  for (bool const room : {true, false}) {
    SCOPED_TRACE(room ? "room spread" : "no room");
    round_input in;
    in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
    in.now = 100;
    in.pol.queue.delay_scheduling = true;
    in.pol.queue.network_preemption = true;
    testing_support::run_on(in, "busy-0", {{0, all}}, 0).preemptible = true;  // insensitive, priority 0
    testing_support::run_on(in, "busy-2", {{2, all}}, 0).preemptible = true;
    if (!room) testing_support::run_on(in, "busy-3", {{3, all}}, 0).preemptible = true;
    auto g = gang("g", 1.0F, 0);
    g.priority = 1;
    in.pending.push_back(g);
    queue_memory mem;
    auto const r = s.solve(in, &mem);
    if (room) {
      ASSERT_EQ(r.placements.size(), 1U);
      EXPECT_EQ(placement_spread(in.state, r.placements[0].replicas).levels_crossed, 0);
      ASSERT_EQ(r.preemptions.size(), 1U);
      EXPECT_EQ(r.preemptions[0].reason, "network");
    } else {
      EXPECT_TRUE(r.placements.empty());
      EXPECT_TRUE(r.preemptions.empty());
      ASSERT_NE(reason_of(r, 0), nullptr);
      EXPECT_NE(reason_of(r, 0)->reason, unplaced_reason::deferred) << "it waits for room, not by choice";
      // With priority preemption on, that gang is a blocked job like any
      // other: it preempts for room (at victims' checkpoints, here any),
      // and still takes a consolidated placement.
      in.pol.queue.preemption = true;
      in.pol.queue.preempt_max_lost_s = -1;
      auto const p = s.solve(in, &mem);
      ASSERT_EQ(p.placements.size(), 1U);
      EXPECT_EQ(placement_spread(in.state, p.placements[0].replicas).levels_crossed, 0);
      ASSERT_EQ(p.preemptions.size(), 1U);
      EXPECT_EQ(p.preemptions[0].reason, "priority");
    }
  }
}

/// One gang of the class deferred at `submit` (with the leaves full) and
/// placed consolidated `wait` seconds later (a leaf freed). Returns the
/// class timer after the placement.
delay_timer defer_then_place(solver& s, queue_memory& mem, std::string const& name, std::int64_t submit,
                             std::int64_t wait, std::int64_t timer_max = 1800, std::int64_t duration = 3600) {
  auto in = split_round(submit);
  in.pol.queue.delay_timer_max = timer_max;
  in.pending.push_back(gang(name, 1.0F, submit, duration));
  auto const r1 = s.solve(in, &mem);
  EXPECT_TRUE(r1.placements.empty()) << name;
  in.now = submit + wait;
  in.state.nodes[2].gpu_free_milli.assign(8, 1000);
  auto const r2 = s.solve(in, &mem);
  EXPECT_EQ(r2.placements.size(), 1U) << name;
  auto const* t = timer_of(r2, kClass);
  return t != nullptr ? *t : delay_timer{};
}

TEST(DelayScheduling, TimersFollowObservedWaits) {
  auto s = cpu_solver();
  queue_memory mem;
  // First sample 300 s: timer 1.5 x 300 = 450.
  auto t = defer_then_place(s, mem, "a", 1000, 300);
  EXPECT_EQ(t.observed_wait, 300);
  EXPECT_EQ(t.timer, 450);
  // Shorter waits pull the smoothed wait (EWMA, 1/4 on the new sample) and
  // the timer down step by step, toward 1.5 x 100 = 150.
  std::int64_t prev = t.timer;
  std::int64_t start = 10000;
  for (std::string name : {"b", "c", "d", "e", "f", "g"}) {
    t = defer_then_place(s, mem, name, start, 100);
    EXPECT_LT(t.timer, prev) << name;
    EXPECT_GE(t.timer, 150) << name;
    prev = t.timer;
    start += 10000;
  }
  EXPECT_EQ(t.samples, 7);
  // 300 then six samples of 100, smoothed: 250, 213, 185, 164, 148, 136;
  // timer 1.5 x 136 = 204.
  EXPECT_EQ(t.observed_wait, 136);
  EXPECT_EQ(t.timer, 204);
  // Longer waits push it back up.
  t = defer_then_place(s, mem, "h", start, 200);
  EXPECT_GT(t.timer, prev);
}

TEST(DelayScheduling, TimersNeverExceedTheMaximumOrTheSlowdownCost) {
  auto s = cpu_solver();
  // A long censored wait: the gang finds no room at all for 5000 s.
  auto run = [&](std::int64_t timer_max, std::int64_t duration) {
    queue_memory mem;
    auto in = split_round(0);
    in.pol.queue.delay_timer_max = timer_max;
    in.state.nodes[1].gpu_free_milli.assign(8, 0);
    in.state.nodes[3].gpu_free_milli.assign(8, 0);
    in.pending.push_back(gang("g", 1.0F, 0, duration));
    for (std::int64_t now = 0; now < 5000; now += 250) {
      in.now = now;
      auto const r = s.solve(in, &mem);
      EXPECT_TRUE(r.placements.empty());
      for (auto const& t : r.delay_timers) {
        EXPECT_LE(t.timer, timer_max);
        EXPECT_LE(t.timer, duration / 2);  // slowdown cost: 0.5 x duration
      }
    }
    in.now = 5000;
    in.state.nodes[1].gpu_free_milli.assign(8, 1000);
    in.state.nodes[3].gpu_free_milli.assign(8, 1000);
    auto const r = s.solve(in, &mem);
    EXPECT_EQ(r.placements.size(), 1U);
    auto const* t = timer_of(r, kClass);
    EXPECT_NE(t, nullptr);
    return t != nullptr ? *t : delay_timer{};
  };
  // 1.5 x 5000 would be 7500: capped by delay_timer_max (600) ...
  auto const capped = run(600, 3600);
  EXPECT_EQ(capped.observed_wait, 5000);
  EXPECT_EQ(capped.timer, 600);
  // ... or by the slowdown a spread placement costs (0.5 x 400 s = 200 s).
  auto const short_job = run(1800, 400);
  EXPECT_EQ(short_job.timer, 200);
  // The defaults obey the same bounds: a quarter of the worth, at most the max.
  queue_memory mem;
  auto in = split_round(0);
  in.pol.queue.delay_timer_max = 100;
  in.pending.push_back(gang("g", 1.0F, 0));
  auto const r = s.solve(in, &mem);
  ASSERT_NE(timer_of(r, kClass), nullptr);
  EXPECT_EQ(timer_of(r, kClass)->timer, 100);
}

TEST(DelayScheduling, MemoryForgetsJobsThatLeftTheQueue) {
  auto s = cpu_solver();
  queue_memory mem;
  auto in = split_round(100);
  in.pending.push_back(gang("gone", 1.0F, 0));
  in.pending.push_back(gang("stays", 1.0F, 50));
  s.solve(in, &mem);
  EXPECT_EQ(mem.deferred_since.size(), 2U);
  // "gone" was cancelled: it is no longer pending.
  in.now = 200;
  in.pending.erase(in.pending.begin());
  s.solve(in, &mem);
  EXPECT_EQ(mem.deferred_since.count("gone"), 0U);
  EXPECT_EQ(mem.deferred_since.count("stays"), 1U);
  // An empty queue empties it; the class timer is kept (bounded by classes).
  in.now = 300;
  in.pending.clear();
  auto const r = s.solve(in, &mem);
  EXPECT_TRUE(mem.deferred_since.empty());
  EXPECT_EQ(r.delay_timers.size(), 1U);
}

TEST(DelayScheduling, NoTopologyNoDelay) {
  // Without a topology there is nothing to consolidate on: no rewrite, no
  // Deferred reason, nothing remembered.
  auto in = split_round(100);
  in.state.topo = topology{};
  for (auto& n : in.state.nodes) n.domain = -1;
  in.pending.push_back(gang("g", 1.0F, 0));
  detail::work_state ws(in);
  queue_memory mem;
  auto const plan = detail::plan_delays(ws, mem);
  EXPECT_EQ(plan.deferred_candidate, (std::vector<char>{0}));
  EXPECT_EQ(plan.overrides[0].topo_mode, topology_mode::none);
  // Through the solver. (The core itself does not place gangs on a cluster
  // without topology today, so only the reason is checked here.)
  auto s = cpu_solver();
  auto const r = s.solve(in, &mem);
  auto const* u = reason_of(r, 0);
  if (u != nullptr) {
    EXPECT_NE(u->reason, unplaced_reason::deferred);
  }
  EXPECT_TRUE(mem.deferred_since.empty());
  EXPECT_TRUE(r.delay_timers.empty());
}

TEST(DelayScheduling, PlanRewritesOnlyWaitingCandidates) {
  // Direct: plan_delays on a round with a waiting gang, an expired one and
  // an insensitive one.
  auto in = split_round(1000);
  in.pending.push_back(gang("fresh", 1.0F, 900));     // waited 100 < 450
  in.pending.push_back(gang("expired", 1.0F, 0));     // waited 1000 >= 450
  in.pending.push_back(gang("insensitive", 0.1F, 900));
  detail::work_state ws(in);
  queue_memory mem;
  auto const plan = detail::plan_delays(ws, mem);
  ASSERT_EQ(plan.overrides.size(), 3U);
  ASSERT_EQ(plan.deferred_candidate.size(), 3U);
  EXPECT_EQ(plan.deferred_candidate, (std::vector<char>{1, 0, 0}));
  EXPECT_EQ(plan.overrides[0].topo_mode, topology_mode::required);
  EXPECT_EQ(plan.overrides[0].topology_level, 2);  // leaf: the lowest level holding 16 GPUs
  EXPECT_EQ(plan.overrides[1].topo_mode, topology_mode::none);
  EXPECT_EQ(plan.overrides[2].topo_mode, topology_mode::none);
}

}  // namespace
}  // namespace placer
