// The solver's hot path does not allocate per round: a steady stream of
// same-shaped rounds reuses the solver's workspace (round matrices, score
// matrix, assigner scratch) and the backend's buffers. A counting global
// operator new (tests/support/alloc_count.hpp) measures every heap
// allocation made through new/delete while one round is solved, split into
// the solver's own (flatten, assign, result) and the backend's (calls
// through a delegating backend).
//
// What remains per round on the solver's side is the result itself
// (placement and replica vectors, unplaced-job messages, the backend name,
// the timing list) and validate()'s per-job context strings. The bounds
// below allow for exactly that and would fail if any per-node or per-cell
// buffer (matrices, score matrix, domain paths, tier rows) were allocated
// per round again. On the backend's side nothing remains: the tier
// program's arena and its results grow to the high-water mark.
#include <placer/kernels/backend.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../support/alloc_count.hpp"

namespace placer {
namespace {

using testing_support::alloc_count;
using testing_support::count_allocs;

/// The CPU backend, with allocations inside its calls counted apart and the
/// tier program's launches counted.
class delegating_backend final : public kernels::backend {
 public:
  explicit delegating_backend(std::unique_ptr<kernels::backend> b) : b_(std::move(b)) {}
  [[nodiscard]] kernels::backend_kind kind() const override { return b_->kind(); }
  [[nodiscard]] std::string const& description() const override { return b_->description(); }
  void score(kernels::node_view const& nodes, kernels::class_view const& classes, kernels::task_view const& tasks,
             kernels::score_params const& params, std::span<std::int32_t> out) override {
    testing_support::aside_scope s;
    b_->score(nodes, classes, tasks, params, out);
  }
  kernels::cluster_stats stats(kernels::node_view const& nodes, kernels::task_view const& tasks) override {
    testing_support::aside_scope s;
    return b_->stats(nodes, tasks);
  }
  void domain_capacity(kernels::node_view const& nodes, kernels::class_view const& classes,
                       std::span<std::int32_t const> of, kernels::domain_index_view const& idx,
                       std::span<std::int64_t> cap) override {
    testing_support::aside_scope s;
    b_->domain_capacity(nodes, classes, of, idx, cap);
  }
  void place_tiers(std::span<kernels::tier_problem const> chain, kernels::tier_results& out) override {
    testing_support::aside_scope s;
    tiers += static_cast<std::int64_t>(chain.size());
    b_->place_tiers(chain, out);
  }
  std::int64_t tiers = 0;

 private:
  std::unique_ptr<kernels::backend> b_;
};

/// 2,048 nodes (2 spines x 4 leaves x 256) of 8 GPUs in two NVLink islands,
/// two GPU models with names longer than the small-string buffer, part
/// used; 24 pending jobs of every kind the placer handles (whole-GPU and
/// fractional tiers with several classes, CPU-only, model-limited,
/// a gang with a required topology level, a preferred-topology job) and a
/// few running jobs for the typical task set.
round_input steady_round() {
  round_input in;
  in.state = make_cluster().spines(2).leaves_per_spine(4).nodes_per_leaf(256).gpus(8).nvlink_islands(2).build();
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    auto& n = in.state.nodes[i];
    n.gpu_model = i % 3 == 0 ? "NVIDIA-A100-SXM4-80GB" : "NVIDIA-H100-80GB-HBM3";
    for (std::size_t g = 0; g < n.gpu_free_milli.size(); ++g) {
      auto const k = (i * 7 + g * 3) % 10;
      n.gpu_free_milli[g] = k < 5 ? 1000 : k < 7 ? 0 : static_cast<std::int32_t>(k) * 100;
    }
    n.cpu_milli_free = n.cpu_milli_capacity * static_cast<std::int64_t>(3 + i % 7) / 10;
    n.memory_mib_free = n.memory_mib_capacity * static_cast<std::int64_t>(3 + i % 5) / 10;
  }
  for (int k = 0; k < 24; ++k) {
    job j;
    j.name = "j" + std::to_string(k);
    j.priority = k % 2;
    j.submit_time = k;
    j.per_replica.cpu_milli = 1000 * (1 + k % 4);
    j.per_replica.memory_mib = 1024 * (1 + k % 3);
    switch (k % 6) {
      case 0: j.per_replica.gpus = 8; break;
      case 1: j.per_replica.gpus = 2; j.replicas = 3; break;
      case 2: j.per_replica.gpus = 1; j.per_replica.gpu_milli = 300 + 100 * (k % 3); break;
      case 3: j.per_replica.gpus = 0; j.replicas = 2; break;
      case 4: j.per_replica.gpus = 4; j.allowed_gpu_models = {"NVIDIA-A100-SXM4-80GB"}; break;
      default: j.per_replica.gpus = 1; j.replicas = 2; break;
    }
    if (k == 7) {
      j.replicas = 4;
      j.gang = true;
      j.topology_level = 2;
      j.topo_mode = topology_mode::required;
    }
    if (k == 13) {
      j.replicas = 3;
      j.topology_level = 1;
      j.topo_mode = topology_mode::preferred;
    }
    in.pending.push_back(std::move(j));
  }
  for (int k = 0; k < 4; ++k) {
    running_job r;
    r.name = "r" + std::to_string(k);
    r.per_replica.gpus = 1;
    r.per_replica.cpu_milli = 2000;
    replica_placement rp;
    rp.node = k;
    rp.gpus = {1};
    r.replicas.push_back(rp);
    in.state.nodes[static_cast<std::size_t>(k)].gpu_free_milli[1] = 0;  // held by r (its CPU is within the used part)
    in.running.push_back(std::move(r));
  }
  return in;
}

TEST(HotPath, SteadyRoundsAllocateOnlyTheResult) {
  round_input const in = steady_round();
  auto backend = std::make_unique<delegating_backend>(kernels::make_backend(kernels::backend_kind::cpu));
  delegating_backend* const b = backend.get();
  solver s(std::move(backend));

  std::vector<round_result> results(6);
  std::vector<alloc_count> per_round;
  std::vector<std::int64_t> tiers;
  per_round.reserve(results.size());
  tiers.reserve(results.size());
  for (auto& r : results) {
    b->tiers = 0;
    per_round.push_back(count_allocs([&] { r = s.solve(in); }));
    tiers.push_back(b->tiers);
  }
  // What the result alone costs: one copy allocates each of its non-empty
  // vectors and long strings once.
  round_result copy;
  alloc_count const result = count_allocs([&] { copy = results.back(); });

  ASSERT_GT(results.front().placements.size(), 10U) << "the round should place most of its jobs";
  for (std::size_t k = 1; k < results.size(); ++k) {
    ASSERT_EQ(results[k].placements.size(), results[0].placements.size());
    for (std::size_t p = 0; p < results[k].placements.size(); ++p) {
      EXPECT_EQ(results[k].placements[p].job, results[0].placements[p].job);
      EXPECT_EQ(results[k].placements[p].replicas, results[0].placements[p].replicas);
    }
  }

  std::int64_t const n_nodes = static_cast<std::int64_t>(in.state.nodes.size());
  for (std::size_t k = 0; k < per_round.size(); ++k) {
    std::printf("round %zu: solver %lld allocations (%lld bytes); backend %lld allocations (%lld bytes), %lld tier "
                "launches\n",
                k, static_cast<long long>(per_round[k].count), static_cast<long long>(per_round[k].bytes),
                static_cast<long long>(per_round[k].aside_count), static_cast<long long>(per_round[k].aside_bytes),
                static_cast<long long>(tiers[k]));
  }
  std::printf("copy of the result: %lld allocations, %lld bytes; %zu pending jobs, %zu running\n",
              static_cast<long long>(result.count), static_cast<long long>(result.bytes), in.pending.size(),
              in.running.size());

  for (std::size_t k = 2; k < per_round.size(); ++k) {
    auto const& a = per_round[k];
    // Count: the result's own allocations plus validate()'s context string
    // per job (pending and running), plus a little slack (the placements
    // vector reserved up front, the timing list). A per-round matrix would
    // add dozens (one per field, more with push_back growth).
    std::int64_t const bound =
        result.count + static_cast<std::int64_t>(in.pending.size() + in.running.size()) + 8;
    EXPECT_LE(a.count, bound) << "round " << k;
    // Far below the first round, which sized the workspace: in count (the
    // result's allocations are most of what is left) and far more in bytes.
    EXPECT_LT(a.count * 3, per_round[0].count) << "round " << k;
    EXPECT_LT(a.bytes * 20, per_round[0].bytes) << "round " << k;
    // Bytes: less than one int32 per node, so no per-node buffer (matrices,
    // score matrix, domain paths, tier rows) is allocated anew.
    EXPECT_LT(a.bytes, n_nodes * static_cast<std::int64_t>(sizeof(std::int32_t))) << "round " << k;
    // And the same every round: nothing creeps.
    EXPECT_EQ(a.count, per_round[2].count) << "round " << k;
    // The backend: its workspace (the tier program's arena, the results'
    // vector) is sized by the first rounds and reused: nothing per call.
    EXPECT_GT(tiers[k], 0) << "the round should run the tier program";
    EXPECT_EQ(a.aside_count, 0) << "round " << k;
  }
}

}  // namespace
}  // namespace placer
