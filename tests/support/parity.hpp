#pragma once
// Two solvers on the same random rounds, stage by stage and round by round
// (the backends' parity tests: solver_test's BackendParity.*, the GPU
// model's GpuModel.PlacesWhatTheCpuPlaces), and the domain entries a
// domain-capacity call reads.
#include <placer/kernels/backend.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "random_round.hpp"

namespace placer::testing_support {

/// The (node, domain) entries of a round grouped by domain, as the
/// assigner builds them: every domain on each node's path to the root.
struct domain_entries {
  std::vector<std::int32_t> node, begin;
  kernels::domain_index_view view() const {
    return {static_cast<std::int32_t>(node.size()), static_cast<std::int32_t>(begin.size()) - 1, node.data(),
            begin.data()};
  }
};
inline domain_entries entries_of(cluster const& c) {
  domain_entries e;
  std::vector<std::vector<std::int32_t>> members(c.topo.domains.size());
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    for (auto d = c.nodes[n].domain; d >= 0; d = c.topo.domains[d].parent) {
      members[d].push_back(static_cast<std::int32_t>(n));
    }
  }
  e.begin.push_back(0);
  for (auto const& m : members) {
    e.node.insert(e.node.end(), m.begin(), m.end());
    e.begin.push_back(static_cast<std::int32_t>(e.node.size()));
  }
  return e;
}

/// Two solvers' stages (score matrix, cluster statistics, domain
/// capacities) and rounds (placements, unplaced jobs) on the same random
/// rounds, bit for bit.
inline void expect_parity(solver& ref, solver& other, int iterations, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < iterations; ++iter) {
    round_input in = random_round(rng);
    in.pol.w.fragmentation = iter % 2 == 0 ? 0 : 50;
    in.pol.stacking = iter % 4 == 3;
    if (iter % 3 == 1) add_random_constraints(rng, in);  // selectors, affinity, taints
    round_matrices const m = build_matrices(in);
    std::vector<std::int32_t> a(static_cast<std::size_t>(m.n_nodes()) * m.n_classes());
    std::vector<std::int32_t> b(a.size());
    kernels::score_params p;
    p.w_fragmentation = in.pol.w.fragmentation;
    ref.backend().score(m.nodes(), m.classes(), m.tasks(), p, a);
    other.backend().score(m.nodes(), m.classes(), m.tasks(), p, b);
    ASSERT_EQ(a, b) << "score matrices differ at iteration " << iter;
    auto const sa = ref.backend().stats(m.nodes(), m.tasks());
    auto const sb = other.backend().stats(m.nodes(), m.tasks());
    ASSERT_EQ(sa.frag_milli_ppm, sb.frag_milli_ppm);
    ASSERT_EQ(sa.gpu_allocated_milli, sb.gpu_allocated_milli);
    ASSERT_EQ(sa.gpu_schedulable_milli, sb.gpu_schedulable_milli);
    ASSERT_EQ(sa.gpu_free_milli, sb.gpu_free_milli);
    ASSERT_EQ(sa.gpu_nodes, sb.gpu_nodes);
    ASSERT_EQ(sa.partly_allocated_nodes, sb.partly_allocated_nodes);
    if (!in.state.topo.domains.empty() && m.n_classes() > 0) {
      auto const e = entries_of(in.state);
      std::vector<std::int32_t> of(static_cast<std::size_t>(m.n_classes()));
      std::iota(of.begin(), of.end(), 0);
      std::vector<std::int64_t> ca(of.size() * in.state.topo.domains.size()), cb(ca.size());
      ref.backend().domain_capacity(m.nodes(), m.classes(), of, e.view(), ca);
      other.backend().domain_capacity(m.nodes(), m.classes(), of, e.view(), cb);
      ASSERT_EQ(ca, cb) << "domain capacities differ at iteration " << iter;
    }
    auto const ra = ref.solve(in);
    auto const rb = other.solve(in);
    ASSERT_EQ(ra.placements.size(), rb.placements.size());
    for (std::size_t k = 0; k < ra.placements.size(); ++k) {
      ASSERT_EQ(ra.placements[k].replicas, rb.placements[k].replicas) << "iteration " << iter;
    }
    ASSERT_EQ(ra.unplaced_jobs.size(), rb.unplaced_jobs.size()) << "iteration " << iter;
    for (std::size_t k = 0; k < ra.unplaced_jobs.size(); ++k) {
      ASSERT_EQ(ra.unplaced_jobs[k].job, rb.unplaced_jobs[k].job) << "iteration " << iter;
      ASSERT_EQ(ra.unplaced_jobs[k].reason, rb.unplaced_jobs[k].reason) << "iteration " << iter;
    }
  }
}

}  // namespace placer::testing_support
