#pragma once
// The round invariants every solver result must satisfy, checked from the
// input alone (independently of the solver's own bookkeeping):
//   - every replica's node and GPU indices exist; GPUs distinct and healthy;
//     the node is healthy; GPU count and share match the demand;
//   - no GPU goes below 0 free milli, no node below 0 CPU or memory;
//   - GPU model in the job's allowed list; pool rules (inference only on
//     inference/shared nodes; training on inference nodes only if loanable);
//   - gangs are whole; required topology: all replicas under one domain;
//   - every job is placed in full, or reported unplaced (partial non-gang
//     placements are reported in both lists).
#include <placer/solver/model.hpp>
#include <placer/topology/cluster.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace placer {

inline void expect_round_invariants(round_input const& in, round_result const& r) {
  auto nodes = in.state.nodes;  // residual state
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
    EXPECT_LE(static_cast<std::int32_t>(p.replicas.size()), j.replicas);
    if (j.gang) {
      EXPECT_EQ(static_cast<std::int32_t>(p.replicas.size()), j.replicas) << j.name << ": partial gang";
    }
    if (static_cast<std::int32_t>(p.replicas.size()) < j.replicas) {
      EXPECT_TRUE(unplaced_jobs.count(p.job)) << j.name << ": partial placement without a reason";
    }
    std::set<std::int32_t> domains;
    for (auto const& rp : p.replicas) {
      ASSERT_GE(rp.node, 0);
      ASSERT_LT(rp.node, static_cast<std::int32_t>(nodes.size()));
      auto& n = nodes[rp.node];
      EXPECT_TRUE(n.healthy) << j.name << " on unhealthy node " << n.name;
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
      for (auto g : rp.gpus) {
        ASSERT_GE(g, 0);
        ASSERT_LT(g, n.gpu_count());
        EXPECT_TRUE(n.gpu_is_healthy(static_cast<std::size_t>(g))) << j.name << " on an unhealthy GPU";
        n.gpu_free_milli[g] -= rp.gpu_milli;
        EXPECT_GE(n.gpu_free_milli[g], 0) << "GPU " << g << " of " << n.name << " over-committed";
      }
      n.cpu_milli_free -= d.cpu_milli;
      n.memory_mib_free -= d.memory_mib;
      EXPECT_GE(n.cpu_milli_free, 0) << n.name << " CPU over-committed";
      EXPECT_GE(n.memory_mib_free, 0) << n.name << " memory over-committed";
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
  }
  for (std::int32_t k = 0; k < static_cast<std::int32_t>(in.pending.size()); ++k) {
    EXPECT_TRUE(placed_jobs.count(k) || unplaced_jobs.count(k)) << "job " << k << " neither placed nor unplaced";
  }
}

}  // namespace placer
