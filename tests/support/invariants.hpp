#pragma once
// The round invariants every solver result must satisfy, checked from the
// input alone (independently of the solver's own bookkeeping):
//   - every replica's node and GPU indices exist; GPUs distinct and healthy;
//     the node is healthy; GPU count and share match the demand;
//   - no GPU goes below 0 free milli, no node below 0 CPU or memory;
//   - GPU model in the job's allowed list; pool rules (inference only on
//     inference/shared nodes; training on inference nodes only if loanable);
//   - gangs are whole; required topology: all replicas under one domain;
//     distinct_nodes: no two replicas of the job on one node;
//   - every job is placed in full, or reported unplaced (partial non-gang
//     placements are reported in both lists);
//   - cross-round decisions: a preempted job is a running job, preemptible
//     (loaned work is always revocable by a reclaim), of strictly lower
//     priority than the job it makes room for, named once and released
//     whole; scale-ins remove replicas the job has and keep it at or above
//     its minimum; scale-outs are charged like placements; elastic jobs
//     are placed within min..max.
#include <placer/solver/constraints.hpp>
#include <placer/solver/model.hpp>
#include <placer/topology/cluster.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace placer {

inline void give_back(node& n, demand const& d, replica_placement const& rp) {
  for (auto g : rp.gpus) {
    if (g >= 0 && g < n.gpu_count()) {
      n.gpu_free_milli[g] = std::min<std::int32_t>(milli_per_gpu, n.gpu_free_milli[g] + rp.gpu_milli);
    }
  }
  n.cpu_milli_free = std::min(n.cpu_milli_capacity, n.cpu_milli_free + d.cpu_milli);
  n.memory_mib_free = std::min(n.memory_mib_capacity, n.memory_mib_free + d.memory_mib);
}

inline void charge(node& n, demand const& d, replica_placement const& rp, std::string const& who) {
  for (auto g : rp.gpus) {
    ASSERT_GE(g, 0);
    ASSERT_LT(g, n.gpu_count());
    n.gpu_free_milli[g] -= rp.gpu_milli;
    EXPECT_GE(n.gpu_free_milli[g], 0) << "GPU " << g << " of " << n.name << " over-committed by " << who;
  }
  n.cpu_milli_free -= d.cpu_milli;
  n.memory_mib_free -= d.memory_mib;
  EXPECT_GE(n.cpu_milli_free, 0) << n.name << " CPU over-committed by " << who;
  EXPECT_GE(n.memory_mib_free, 0) << n.name << " memory over-committed by " << who;
}

/// Releases what the round's preemptions and scale-ins free, checking their rules.
inline void release_cross_round(round_input const& in, round_result const& r, std::vector<node>& nodes) {
  auto find_running = [&](std::string const& name) -> running_job const* {
    for (auto const& rj : in.running) {
      if (rj.name == name) return &rj;
    }
    return nullptr;
  };
  std::set<std::string> victims;
  for (auto const& p : r.preemptions) {
    running_job const* rj = find_running(p.job);
    ASSERT_NE(rj, nullptr) << "preempted '" << p.job << "' is not a running job";
    EXPECT_TRUE(victims.insert(p.job).second) << p.job << " preempted twice";
    if (p.reason != "reclaim") {
      EXPECT_TRUE(rj->preemptible) << p.job << " is not preemptible";
      ASSERT_GE(p.for_job, 0);
      ASSERT_LT(p.for_job, static_cast<std::int32_t>(in.pending.size()));
      auto const& for_job = in.pending[static_cast<std::size_t>(p.for_job)];
      if (p.reason == "quota") {  // a reclaim for a guarantee: across queues, the job's own has one
        EXPECT_NE(rj->queue, for_job.queue) << p.job << " reclaimed for its own queue";
        EXPECT_TRUE(std::any_of(in.queues.begin(), in.queues.end(), [&](queue_spec const& q) {
          return q.name == for_job.queue && (q.gpu_milli_guarantee > 0 || q.cpu_milli_guarantee > 0);
        })) << p.job << " reclaimed for a queue without a guarantee";
      } else {
        EXPECT_LT(rj->priority, for_job.priority) << p.job << " preempted for a job of equal or lower priority";
      }
    }
    for (auto const& rp : rj->replicas) give_back(nodes[rp.node], rj->per_replica, rp);  // whole job
  }
  for (auto const& sc : r.scale_ins) {
    running_job const* rj = find_running(sc.job);
    ASSERT_NE(rj, nullptr) << "scale-in of '" << sc.job << "' which is not running";
    EXPECT_EQ(victims.count(sc.job), 0U) << sc.job << " both preempted and shrunk";
    for (auto const& rp : sc.replicas) {
      EXPECT_NE(std::find(rj->replicas.begin(), rj->replicas.end(), rp), rj->replicas.end())
          << sc.job << ": scale-in removes a replica it does not have";
      give_back(nodes[rp.node], rj->per_replica, rp);
    }
    EXPECT_GE(static_cast<std::int32_t>(rj->replicas.size() - sc.replicas.size()), std::max(rj->min_replicas, 1))
        << sc.job << " shrunk below its minimum";
  }
}

namespace testing_support {

/// Where one result differs from another of the same round ("" when it
/// does not): placements (job, nodes, GPUs), preemptions (victims),
/// unplaced jobs (job, reason).
inline std::string difference(round_result const& got, round_result const& want) {
  if (got.placements.size() != want.placements.size()) return "number of placements";
  for (std::size_t k = 0; k < want.placements.size(); ++k) {
    auto const& g = got.placements[k];
    if (g.job != want.placements[k].job || !(g.replicas == want.placements[k].replicas)) {
      return "placement " + std::to_string(k);
    }
  }
  if (got.preemptions.size() != want.preemptions.size()) return "number of preemptions";
  for (std::size_t k = 0; k < want.preemptions.size(); ++k) {
    if (got.preemptions[k].job != want.preemptions[k].job) return "preemption " + std::to_string(k);
  }
  if (got.unplaced_jobs.size() != want.unplaced_jobs.size()) return "number of unplaced jobs";
  for (std::size_t k = 0; k < want.unplaced_jobs.size(); ++k) {
    if (got.unplaced_jobs[k].job != want.unplaced_jobs[k].job ||
        got.unplaced_jobs[k].reason != want.unplaced_jobs[k].reason) {
      return "unplaced " + std::to_string(k);
    }
  }
  return "";
}

}  // namespace testing_support

inline void expect_round_invariants(round_input const& in, round_result const& r) {
  auto nodes = in.state.nodes;  // residual state
  release_cross_round(in, r, nodes);
  auto const paths = node_domain_paths(in.state);
  auto const levels = std::max(in.state.topo.levels(), 1);
  std::set<std::int32_t> placed_jobs, unplaced_jobs;
  for (auto const& u : r.unplaced_jobs) {
    EXPECT_TRUE(unplaced_jobs.insert(u.job).second) << "job " << u.job << " reported unplaced twice";
    EXPECT_NE(u.reason, unplaced_reason::none);
  }
  for (auto const& p : r.placements) {
    ASSERT_GE(p.job, 0);
    ASSERT_LT(p.job, static_cast<std::int32_t>(in.pending.size()));
    EXPECT_TRUE(placed_jobs.insert(p.job).second) << "job " << p.job << " placed twice";
    auto const& j = in.pending[p.job];
    auto const& d = j.per_replica;
    EXPECT_FALSE(p.replicas.empty());
    auto const got = static_cast<std::int32_t>(p.replicas.size());
    if (in.pol.queue.elastic && j.min_replicas > 0) {
      // Elastic: at least the minimum (placed as a gang), at most the maximum.
      EXPECT_GE(got, j.min_replicas) << j.name << ": elastic job below its minimum";
      EXPECT_LE(got, std::max(j.min_replicas, j.max_replicas)) << j.name << ": elastic job above its maximum";
    } else {
      EXPECT_LE(got, j.replicas);
      if (j.gang) {
        EXPECT_EQ(got, j.replicas) << j.name << ": partial gang";
      }
      if (got < j.replicas) {
        EXPECT_TRUE(unplaced_jobs.count(p.job)) << j.name << ": partial placement without a reason";
      }
    }
    std::set<std::int32_t> domains;
    for (auto const& rp : p.replicas) {
      ASSERT_GE(rp.node, 0);
      ASSERT_LT(rp.node, static_cast<std::int32_t>(nodes.size()));
      auto& n = nodes[rp.node];
      EXPECT_TRUE(n.healthy) << j.name << " on unhealthy node " << n.name;
      EXPECT_TRUE(admits(in.state.nodes[rp.node], j.constraints))
          << j.name << " on node " << n.name << ", which its selector, affinity or tolerations refuse";
      EXPECT_EQ(static_cast<std::int32_t>(rp.gpus.size()), d.gpus) << j.name;
      std::set<std::int32_t> distinct(rp.gpus.begin(), rp.gpus.end());
      EXPECT_EQ(distinct.size(), rp.gpus.size()) << j.name << ": GPU listed twice";
      if (d.gpus > 0) {
        EXPECT_EQ(rp.gpu_milli, d.gpu_milli) << j.name;
        if (!j.allowed_gpu_models.empty()) {
          EXPECT_NE(std::find(j.allowed_gpu_models.begin(), j.allowed_gpu_models.end(), n.gpu_model),
                    j.allowed_gpu_models.end())
              << j.name << " on model " << n.gpu_model;
        }
      }
      charge(n, d, rp, j.name);
      if (::testing::Test::HasFatalFailure()) return;  // a GPU index out of range
      for (auto g : rp.gpus) {
        EXPECT_TRUE(n.gpu_is_healthy(static_cast<std::size_t>(g))) << j.name << " on an unhealthy GPU";
      }
      if (j.kind == job_kind::inference) {
        EXPECT_NE(n.pool, pool_kind::training) << j.name << ": inference job on a training node";
      } else if (n.pool == pool_kind::inference) {
        EXPECT_TRUE(n.loanable) << j.name << ": training job on a non-loanable inference node";
      }
      if (j.topo_mode == topology_mode::required) {
        domains.insert(paths[static_cast<std::size_t>(rp.node) * levels + j.topology_level]);
      }
    }
    if (j.topo_mode == topology_mode::required) {
      EXPECT_EQ(domains.size(), 1U) << j.name << ": required topology spans " << domains.size() << " domains";
      EXPECT_GE(*domains.begin(), 0);
    }
    if (j.distinct_nodes) {
      std::set<std::int32_t> on;
      for (auto const& rp : p.replicas) on.insert(rp.node);
      EXPECT_EQ(on.size(), p.replicas.size()) << j.name << ": two replicas on one node despite distinct_nodes";
    }
  }
  for (std::int32_t k = 0; k < static_cast<std::int32_t>(in.pending.size()); ++k) {
    EXPECT_TRUE(placed_jobs.count(k) || unplaced_jobs.count(k)) << "job " << k << " neither placed nor unplaced";
  }
  for (auto const& sc : r.scale_outs) {
    auto it = std::find_if(in.running.begin(), in.running.end(), [&](running_job const& rj) { return rj.name == sc.job; });
    ASSERT_NE(it, in.running.end()) << "scale-out of '" << sc.job << "' which is not running";
    // A reclaim may shrink a job on one node and the elastic step grow it
    // elsewhere in the same round: the net size must stay within the maximum.
    std::size_t shrunk = 0;
    for (auto const& in_sc : r.scale_ins) shrunk += in_sc.job == sc.job ? in_sc.replicas.size() : 0;
    EXPECT_LE(static_cast<std::int32_t>(it->replicas.size() - shrunk + sc.replicas.size()), it->max_replicas)
        << sc.job << " grown above its maximum";
    for (auto const& rp : sc.replicas) {
      ASSERT_GE(rp.node, 0);
      ASSERT_LT(rp.node, static_cast<std::int32_t>(nodes.size()));
      EXPECT_TRUE(admits(in.state.nodes[rp.node], it->constraints))
          << "scale-out of " << sc.job << " on node " << nodes[rp.node].name << ", which its constraints refuse";
      charge(nodes[rp.node], it->per_replica, rp, "scale-out of " + sc.job);
    }
  }
}

}  // namespace placer
