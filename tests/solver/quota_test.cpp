// Queues with limits: the tree's checks, admission by hand, and random
// rounds and multi-round runs in which no queue ever passes its limits.
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"

namespace placer {
namespace {

job gpu_job(std::string name, std::string queue, int gpus, int replicas = 1, int priority = 0) {
  job j;
  j.name = std::move(name);
  j.queue = std::move(queue);
  j.per_replica.gpus = gpus;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  j.priority = priority;
  return j;
}

solver cpu() { return solver(kernels::make_backend(kernels::backend_kind::cpu)); }

TEST(Quotas, JobsThatWouldPassALimitWaitAndSayWhichQueue) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(8).gpus(8).build();  // 64 GPUs
  in.queues = {{"org", "", 16000, -1}, {"team-a", "org", 8000, -1}, {"team-b", "org", -1, -1}, {"free", "", -1, -1}};
  running_job r;
  r.name = "a-running";
  r.queue = "team-a";
  r.per_replica = {4, 1000, 1000, 1024};
  r.replicas = {{0, {0, 1, 2, 3}, 1000}};
  in.state.nodes[0].gpu_free_milli = {0, 0, 0, 0, 1000, 1000, 1000, 1000};
  in.state.nodes[0].cpu_milli_free -= 1000;
  in.state.nodes[0].memory_mib_free -= 1024;
  in.running = {r};
  in.pending = {gpu_job("a-4", "team-a", 4, 1, 5),   // team-a: 4 + 4 = 8: fits
                gpu_job("a-1", "team-a", 1, 1, 4),   // 9 > 8: refused
                gpu_job("b-8", "team-b", 8, 1, 3),   // org: 8 + 8 = 16: fits
                gpu_job("b-1", "team-b", 1, 1, 2),   // org 17 > 16: refused
                gpu_job("free-16", "free", 8, 2, 1), // no limit
                gpu_job("none", "", 8, 1, 0)};       // in no queue
  auto s = cpu();
  auto const r1 = s.solve(in);
  expect_round_invariants(in, r1);
  std::map<std::string, std::string> refused;
  for (auto const& u : r1.unplaced_jobs) {
    EXPECT_EQ(u.reason, unplaced_reason::quota_exceeded) << u.detail;
    refused[in.pending[static_cast<std::size_t>(u.job)].name] = u.detail;
  }
  ASSERT_EQ(refused.size(), 2U);
  EXPECT_NE(refused["a-1"].find("queue 'team-a' holds 8000 of its 8000 milli-GPU limit"), std::string::npos)
      << refused["a-1"];
  EXPECT_NE(refused["b-1"].find("queue 'org' holds 16000 of its 16000"), std::string::npos) << refused["b-1"];
  EXPECT_EQ(r1.placements.size(), 4U);
  // Indices are the request's: the placed jobs are 0, 2, 4, 5.
  std::vector<std::int32_t> placed;
  for (auto const& p : r1.placements) placed.push_back(p.job);
  EXPECT_EQ(placed, (std::vector<std::int32_t>{0, 2, 4, 5}));
}

// A job admitted first but not placed (a gang too large for the free
// nodes) holds its queue's limit only until the second admission: the job
// refused behind it is placed then, within the limit.
TEST(Quotas, WhatAnUnplacedJobHeldIsAdmittedAgain) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(2).gpus(8).build();  // 16 GPUs
  in.queues = {{"team", "", 16000, -1}};
  job gang = gpu_job("too-big", "team", 8, 2, 9);  // 16 GPUs: admitted first, but node 1 is half used
  gang.gang = true;
  in.pending = {gang, gpu_job("small", "team", 4, 1, 1)};
  in.state.nodes[1].gpu_free_milli = {0, 0, 0, 0, 1000, 1000, 1000, 1000};
  auto s = cpu();
  auto const r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 1);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].job, 0);
  EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::gang_incomplete);
  EXPECT_EQ(r.metrics.jobs_placed, 1);
  // With a cross-round policy on, admission stays conservative (one pass).
  in.pol.queue.preemption = true;
  auto const p = s.solve(in);
  ASSERT_EQ(p.unplaced_jobs.size(), 2U);
  EXPECT_EQ(p.unplaced_jobs[1].reason, unplaced_reason::quota_exceeded);
}

TEST(Quotas, TheTreeAndTheNamesAreChecked) {
  auto refuse = [](round_input const& in, std::string const& needle) {
    try {
      validate(in);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (logic_error const& e) {
      EXPECT_EQ(e.code(), error_code::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build();
  in.queues = {{"a", "", 1000, -1}};
  in.pending = {gpu_job("lost", "b", 1)};
  refuse(in, "pending job 0 ('lost') names queue 'b'");
  in.pending = {gpu_job("ok", "a", 1)};
  in.queues = {{"a", "b", -1, -1}, {"b", "a", -1, -1}};
  refuse(in, "its own ancestor");
  in.queues = {{"a", "", -1, -1}, {"a", "", -1, -1}};
  refuse(in, "two queues are named 'a'");
  in.queues = {{"a", "x", -1, -1}};
  refuse(in, "not a queue");
  in.queues = {{"a", "", -5, -1}};
  refuse(in, "a limit must be");
  // Without queues, Job.queue is not read.
  in.queues.clear();
  in.pending = {gpu_job("anywhere", "no-such-queue", 1)};
  EXPECT_NO_THROW(validate(in));
}

/// Per queue (with its children): milli-GPU held by running work after
/// the round (preempted and shrunk released, placed and grown charged).
std::map<std::string, std::int64_t> usage(round_input const& in, round_result const* r) {
  std::map<std::string, std::string> parent;
  for (auto const& q : in.queues) parent[q.name] = q.parent;
  std::map<std::string, std::int64_t> use;
  auto add = [&](std::string q, std::int64_t g) {
    for (; !q.empty(); q = parent[q]) use[q] += g;
  };
  for (auto const& rj : in.running) {
    std::int64_t n = static_cast<std::int64_t>(rj.replicas.size());
    if (r != nullptr) {
      for (auto const& p : r->preemptions) n = p.job == rj.name ? 0 : n;
      for (auto const& sc : r->scale_ins) n -= sc.job == rj.name ? static_cast<std::int64_t>(sc.replicas.size()) : 0;
      for (auto const& sc : r->scale_outs) n += sc.job == rj.name ? static_cast<std::int64_t>(sc.replicas.size()) : 0;
    }
    add(rj.queue, rj.per_replica.gpu_milli_total() * n);
  }
  if (r != nullptr) {
    for (auto const& p : r->placements) {
      auto const& j = in.pending[static_cast<std::size_t>(p.job)];
      add(j.queue, j.per_replica.gpu_milli_total() * static_cast<std::int64_t>(p.replicas.size()));
    }
  }
  return use;
}

/// One of add_queues' leaves, or no queue.
char const* random_leaf(std::mt19937_64& rng) {
  static char const* const leaves[] = {"a", "b", "c", ""};
  return leaves[std::uniform_int_distribution<int>(0, 3)(rng)];
}

/// A random tree (two roots, three leaves) with limits around the cluster's
/// size; the jobs in random leaves.
void add_queues(std::mt19937_64& rng, round_input& in) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::int64_t gpus = 0;
  for (auto const& n : in.state.nodes) gpus += n.gpu_count();
  auto limit = [&] { return pick(0, 3) == 0 ? -1 : gpus * 1000 * pick(5, 60) / 100; };
  in.queues = {{"org", "", limit(), -1}, {"a", "org", limit(), -1}, {"b", "org", limit(), -1},
               {"c", "", limit(), -1}};
  for (auto& j : in.pending) j.queue = random_leaf(rng);
  for (auto& r : in.running) r.queue = random_leaf(rng);
}

void expect_within_limits(round_input const& in, round_result const& r, std::string const& where) {
  auto const before = usage(in, nullptr);
  auto after = usage(in, &r);
  for (auto const& q : in.queues) {
    if (q.gpu_milli_limit < 0) continue;
    auto const b = before.count(q.name) ? before.at(q.name) : 0;
    EXPECT_LE(after[q.name], std::max(b, q.gpu_milli_limit)) << where << ": queue " << q.name << " past its limit";
  }
}

// Random rounds, every policy mix: no queue passes its limit (or, already
// past it, grows), and every job is placed or has a reason.
TEST(Quotas, RandomRoundsStayWithinLimits) {
  auto s = cpu();
  std::mt19937_64 rng(20261125);
  int refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    round_input first = testing_support::random_round(rng, 6, 30);
    round_result const placed = s.solve(first);
    round_input in = testing_support::with_running(rng, first, placed, 30);
    in.pending = testing_support::random_round(rng, 6, 30).pending;
    auto& q = in.pol.queue;
    q.preemption = iter % 2 == 0;
    q.elastic = iter % 3 == 0;
    q.backfill = iter % 4 == 0 ? backfill_mode::easy : backfill_mode::off;
    for (auto& j : in.pending) {
      if (j.replicas > 1 && iter % 3 == 0) {
        j.min_replicas = 1;
        j.max_replicas = j.replicas + 2;
      }
    }
    add_queues(rng, in);
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    expect_within_limits(in, r, "iteration " + std::to_string(iter));
    for (auto const& u : r.unplaced_jobs) refused += u.reason == unplaced_reason::quota_exceeded ? 1 : 0;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(refused, 200);
}

// A run of rounds, each round's placements running in the next (nothing
// ends or is preempted): usage never passes a limit.
TEST(Quotas, MultiRoundRunsStayWithinLimits) {
  auto s = cpu();
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int run = 0; run < 40; ++run) {
    round_input in = testing_support::random_round(rng, 4, 20);
    in.pending.clear();
    add_queues(rng, in);
    for (int round = 0; round < 5; ++round) {
      in.pending = testing_support::random_round(rng, 4, 20).pending;
      for (auto& j : in.pending) {
        j.queue = random_leaf(rng);
        j.name += "-r" + std::to_string(round);
      }
      SCOPED_TRACE("run " + std::to_string(run) + " round " + std::to_string(round));
      in.pol.queue.loaning = false;  // no reclaim: the running work only grows
      auto const r = s.solve(in);
      ASSERT_TRUE(r.preemptions.empty() && r.scale_ins.empty());
      for (auto const& u : r.unplaced_jobs) refused += u.reason == unplaced_reason::quota_exceeded ? 1 : 0;
      expect_round_invariants(in, r);
      expect_within_limits(in, r, "run " + std::to_string(run) + " round " + std::to_string(round));
      if (::testing::Test::HasFailure()) return;
      // The placements run from now on, in their queues.
      round_input next = testing_support::with_running(rng, in, r, 0);
      for (auto& rj : next.running) {
        auto it = std::find_if(in.pending.begin(), in.pending.end(), [&](job const& j) { return "run-" + j.name == rj.name; });
        if (it != in.pending.end()) rj.queue = it->queue;
      }
      next.running.insert(next.running.begin(), in.running.begin(), in.running.end());
      next.queues = in.queues;
      in = std::move(next);
      for (auto const& [name, used] : usage(in, nullptr)) {
        for (auto const& q : in.queues) {
          if (q.name == name && q.gpu_milli_limit >= 0) EXPECT_LE(used, q.gpu_milli_limit) << name;
        }
      }
    }
  }
  EXPECT_GT(refused, 100);  // the limits bind
}

}  // namespace
}  // namespace placer
