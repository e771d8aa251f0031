// Queues with limits: the tree's checks, admission by hand, and random
// rounds and multi-round runs in which no queue ever passes its limits.
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "quotas.hpp"

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
  // With a cross-round policy other than preemption on (backfill would
  // reserve again), admission stays conservative (one pass).
  in.pol.queue.backfill = backfill_mode::easy;
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
/// size, guarantees up to them (or up to 40% without one) and weights 1..4;
/// the jobs in random leaves.
void add_queues(std::mt19937_64& rng, round_input& in) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::int64_t gpus = 0;
  for (auto const& n : in.state.nodes) gpus += n.gpu_count();
  auto queue = [&](std::string name, std::string parent) {
    queue_spec q{std::move(name), std::move(parent), pick(0, 3) == 0 ? -1 : gpus * 1000 * pick(5, 60) / 100, -1};
    q.gpu_milli_guarantee = (q.gpu_milli_limit >= 0 ? q.gpu_milli_limit : gpus * 400) * pick(0, 100) / 100;
    q.weight = pick(1, 4);
    return q;
  };
  in.queues = {queue("org", ""), queue("a", "org"), queue("b", "org"), queue("c", "")};
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

/// A random round on a cluster busy with another random round's placements
/// (elastic_pct of them elastic), with fresh pending jobs.
round_input busy_round(solver& s, std::mt19937_64& rng, int elastic_pct) {
  round_input const first = testing_support::random_round(rng, 6, 30);
  round_input in = testing_support::with_running(rng, first, s.solve(first), elastic_pct);
  in.pending = testing_support::random_round(rng, 6, 30).pending;
  return in;
}

// Random rounds, every policy mix: no queue passes its limit (or, already
// past it, grows), and every job is placed or has a reason.
TEST(Quotas, RandomRoundsStayWithinLimits) {
  auto s = cpu();
  std::mt19937_64 rng(20261125);
  int refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    round_input in = busy_round(s, rng, 30);
    auto& q = in.pol.queue;
    q.preemption = iter % 2 == 0;
    q.elastic = iter % 3 == 0;
    q.backfill = iter % 4 == 0 ? backfill_mode::easy : backfill_mode::off;
    for (auto& j : in.pending) {
      if (j.replicas > 1 && iter % 3 == 0) {
        j.min_replicas = 1;
        j.max_replicas = j.replicas + 2;
        j.distinct_nodes = false;  // not with an elastic range (validate)
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
          if (q.name == name && q.gpu_milli_limit >= 0) {
            EXPECT_LE(used, q.gpu_milli_limit) << name;
          }
        }
      }
    }
  }
  EXPECT_GT(refused, 100);  // the limits bind
}


queue_spec guaranteed(std::string name, std::int64_t gpu_milli, std::int32_t weight = 1, std::string parent = "") {
  queue_spec q{std::move(name), std::move(parent), -1, -1};
  q.gpu_milli_guarantee = gpu_milli;
  q.weight = weight;
  return q;
}

/// n jobs of `gpus` GPUs in `queue`, named queue-0, queue-1, ...
void add_jobs(round_input& in, std::string const& queue, int n, int gpus, int priority = 0) {
  for (int k = 0; k < n; ++k) in.pending.push_back(gpu_job(queue + "-" + std::to_string(k), queue, gpus, 1, priority));
}

/// Replicas placed per queue.
std::map<std::string, int> placed_by_queue(round_input const& in, round_result const& r) {
  std::map<std::string, int> n;
  for (auto const& p : r.placements) n[in.pending[static_cast<std::size_t>(p.job)].queue] += static_cast<int>(p.replicas.size());
  return n;
}

// Water-filling by hand: 64 GPUs; a (guarantee 8, weight 1) with children
// a1 (guarantee 16, wants 10) and a2 (wants 30), b (weight 3, wants 40),
// c (limit 4, wants 10). First the guarantees: a 8. Then 56 by weight
// 1:3:1 (11.2, 33.6, 11.2), c capped at its limit 4; the 7.2 left goes
// 1:3 to a and b: a 21, b 39, c 4. a's 21: a1 its 10, a2 the other 11.
TEST(Quotas, DeservedSharesFillGuaranteesThenWeights) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(8).gpus(8).build();
  in.queues = {guaranteed("a", 8000), guaranteed("a1", 16000, 1, "a"), guaranteed("a2", 0, 1, "a"),
               guaranteed("b", 0, 3), {"c", "", 4000, -1}};
  add_jobs(in, "a1", 2, 5);
  add_jobs(in, "a2", 3, 8);
  add_jobs(in, "a2", 1, 6);
  add_jobs(in, "b", 5, 8);
  add_jobs(in, "c", 2, 5);
  auto const share = detail::deserved_shares(in);
  EXPECT_EQ(share.gpu, (std::vector<std::int64_t>{21000, 10000, 11000, 39000, 4000}));
  // CPU is not contended (8 GPU jobs of 1 CPU each): every queue its demand.
  EXPECT_EQ(share.cpu, (std::vector<std::int64_t>{6000, 2000, 4000, 5000, 2000}));
  // Guarantees past the capacity: each queue its guarantee up to its
  // demand, even if together they pass the capacity.
  in.queues = {guaranteed("a", 64000), guaranteed("a1", 64000, 1, "a"), guaranteed("a2", 64000, 1, "a"),
               guaranteed("b", 64000, 3), {"c", "", 4000, -1}};
  EXPECT_EQ(detail::deserved_shares(in).gpu, (std::vector<std::int64_t>{40000, 10000, 30000, 40000, 0}));
}

// Queues within their shares go first, whatever the priorities; what a
// queue does not use (it asks for less, or its jobs fit nowhere) is
// borrowed by the others.
TEST(Quotas, SharesGoFirstAndTheRestIsBorrowed) {
  auto s = cpu();
  auto round = [&](std::vector<queue_spec> queues, int a_jobs, int b_jobs, bool b_fits = true) {
    round_input in;
    in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(8).gpus(8).build();  // 64 GPUs
    in.queues = std::move(queues);
    add_jobs(in, "a", a_jobs, 8, 5);  // a's jobs outrank b's
    add_jobs(in, "b", b_jobs, 8, 0);
    if (!b_fits) {
      for (auto& j : in.pending) {
        if (j.queue == "b") j.allowed_gpu_models = {"no-such-model"};
      }
    }
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    for (auto const& u : r.unplaced_jobs) EXPECT_NE(u.reason, unplaced_reason::quota_exceeded) << u.detail;
    return placed_by_queue(in, r);
  };
  using counts = std::map<std::string, int>;
  // Without queues, priority takes all: a 8.
  EXPECT_EQ(round({}, 8, 4), (counts{{"a", 8}}));
  // Two queues, no guarantees: equal weights, 4 each.
  EXPECT_EQ(round({{"a", "", -1, -1}, {"b", "", -1, -1}}, 8, 4), (counts{{"a", 4}, {"b", 4}}));
  // Guarantees 32 + 32: 4 each.
  EXPECT_EQ(round({guaranteed("a", 32000), guaranteed("b", 32000)}, 8, 4), (counts{{"a", 4}, {"b", 4}}));
  // b asks for 2: a borrows the rest of b's guarantee.
  EXPECT_EQ(round({guaranteed("a", 32000), guaranteed("b", 32000)}, 8, 2), (counts{{"a", 6}, {"b", 2}}));
  // No guarantees, weights 1:3.
  EXPECT_EQ(round({guaranteed("a", 0, 1), guaranteed("b", 0, 3)}, 8, 8), (counts{{"a", 2}, {"b", 6}}));
  // b's jobs fit nowhere: a borrows all of it in the second pass.
  EXPECT_EQ(round({guaranteed("a", 32000), guaranteed("b", 32000)}, 8, 4, false), (counts{{"a", 8}}));
}

/// Running job `name` of `queue` holding all 8 GPUs of node n, preemptible,
/// at priority 0, with `secs` of work since its checkpoint.
void occupy(round_input& in, std::string name, std::string queue, std::int32_t n, std::int64_t secs) {
  running_job r;
  r.name = std::move(name);
  r.queue = std::move(queue);
  r.per_replica = {8, 1000, 1000, 1024};
  r.replicas = {{n, {0, 1, 2, 3, 4, 5, 6, 7}, 1000}};
  r.preemptible = true;
  r.start_time = in.now - secs;
  r.last_checkpoint = r.start_time;
  auto& nd = in.state.nodes[static_cast<std::size_t>(n)];
  std::fill(nd.gpu_free_milli.begin(), nd.gpu_free_milli.end(), 0);
  nd.cpu_milli_free -= 1000;
  nd.memory_mib_free -= 1024;
  in.running.push_back(std::move(r));
}

// With preemption on, a queue below its guarantee reclaims what another
// borrowed (cheapest first, at equal priority: reason "quota"); work within
// a guarantee is never preempted by another queue, even for a higher
// priority.
TEST(Quotas, PreemptionReclaimsBorrowedCapacityButNeverAGuarantee) {
  auto s = cpu();
  auto base = [] {
    round_input in;
    in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(8).gpus(8).build();  // 64 GPUs
    in.now = 100000;
    in.pol.queue.preemption = true;
    in.pol.queue.preempt_max_lost_s = -1;  // preemption for priority takes any victim here
    in.pol.queue.loaning = false;
    in.queues = {guaranteed("a", 32000), guaranteed("b", 32000), {"c", "", -1, -1}};
    return in;
  };
  // a borrowed all 64 GPUs; b asks for 8 of its guarantee.
  round_input in = base();
  for (int n = 0; n < 8; ++n) occupy(in, "a-run-" + std::to_string(n), "a", n, 1000 + (n == 5 ? 0 : 500));
  add_jobs(in, "b", 1, 8);
  auto r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].job, "a-run-5");  // the least work lost
  EXPECT_EQ(r.preemptions[0].reason, "quota");
  ASSERT_EQ(r.placements.size(), 1U);
  // A guarantee's reclaim does not wait for a victim's checkpoint (the
  // victims are 1,000-1,500 s past theirs; preemption_test has the window).
  in.pol.queue.preempt_max_lost_s = 120;
  r = s.solve(in);
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].job, "a-run-5");
  in.pol.queue.preempt_max_lost_s = -1;
  // Without a guarantee behind it, the same job preempts nothing.
  in.queues[1].gpu_milli_guarantee = 0;
  r = s.solve(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());

  // a and b at their guarantees: b's next job reclaims nothing, and a job
  // in no queue (admitted whatever the shares), outranking everyone, finds
  // no work beyond a guarantee.
  in = base();
  for (int n = 0; n < 8; ++n) occupy(in, "run-" + std::to_string(n), n < 4 ? "a" : "b", n, 1000);
  add_jobs(in, "b", 1, 8);
  in.pending.push_back(gpu_job("urgent", "", 8, 1, 9));
  r = s.solve(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.placements.empty());
  // a at 40 (8 beyond its guarantee), b at 24: the urgent job takes a's
  // cheapest for its priority, never b's (below its guarantee); b's job
  // then reclaims nothing, since a is back at its guarantee.
  in = base();
  for (int n = 0; n < 8; ++n) occupy(in, "run-" + std::to_string(n), n < 5 ? "a" : "b", n, n == 6 ? 10 : 1000 + n);
  in.pending.push_back(gpu_job("urgent", "", 8, 1, 9));
  add_jobs(in, "b", 1, 8, 0);
  r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].job, "run-0");
  EXPECT_EQ(r.preemptions[0].reason, "priority");
  EXPECT_EQ(in.pending[static_cast<std::size_t>(r.preemptions[0].for_job)].name, "urgent");
  // The same high-priority job in queue c (no guarantee; a's and b's fill
  // the cluster) is past its deserved share: b's job, below its guarantee,
  // goes first and reclaims a's cheapest; c's is lent nothing, since lending
  // preempts nothing.
  in.pending[0].queue = "c";
  r = s.solve(in);
  expect_round_invariants(in, r);
  ASSERT_EQ(r.preemptions.size(), 1U);
  EXPECT_EQ(r.preemptions[0].job, "run-0");
  EXPECT_EQ(r.preemptions[0].reason, "quota");
  EXPECT_EQ(in.pending[static_cast<std::size_t>(r.preemptions[0].for_job)].queue, "b");
  ASSERT_EQ(r.placements.size(), 1U);
  EXPECT_EQ(r.placements[0].job, 1);
}

// Random rounds at one priority with preemption on: every preemption is a
// reclaim, and no queue ends below its guarantee (or below what it held,
// if that was less). Its usage only falls through those checked stops, so
// the bound holds at the round's end.
TEST(Quotas, RandomReclaimKeepsEveryGuarantee) {
  auto s = cpu();
  std::mt19937_64 rng(424242);
  int reclaims = 0;
  for (int iter = 0; iter < 300; ++iter) {
    round_input in = busy_round(s, rng, 0);
    for (auto& j : in.pending) j.priority = 0;
    for (auto& r : in.running) {
      r.priority = 0;
      r.preemptible = true;
    }
    in.pol.queue.preemption = true;
    in.pol.queue.loaning = false;
    add_queues(rng, in);
    auto const r = s.solve(in);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    expect_round_invariants(in, r);
    expect_within_limits(in, r, "iteration " + std::to_string(iter));
    auto const before = usage(in, nullptr);
    auto after = usage(in, &r);
    for (auto const& q : in.queues) {
      auto const b = before.count(q.name) ? before.at(q.name) : 0;
      EXPECT_GE(after[q.name], std::min(b, q.gpu_milli_guarantee)) << "queue " << q.name << " held " << b;
    }
    for (auto const& p : r.preemptions) {
      EXPECT_EQ(p.reason, "quota");
      ++reclaims;
    }
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(reclaims, 20);
}

}  // namespace
}  // namespace placer
