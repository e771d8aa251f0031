#pragma once
// The FGD paper's scheduling policies (Weng et al., ATC'23) as `placer
// simulate` algorithms: each is a solve_fn that places the round's pending
// jobs one at a time in queue order (priority, submit time, index), every
// replica on the node the policy scores best, a multi-replica job all or
// nothing. Same definitions as the FGD experiment (sim/src/fgd_policies.cpp).
//
//   auto solve = placer::sim::baseline_solver("fgd", 42);
//   auto res = placer::sim::run_simulation(w, cfg, solve);

#include <placer/sim/fgd.hpp>
#include <placer/sim/simulator.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace placer::sim {

/// "random", "dot-prod", "gpu-packing", "gpu-clustering", "best-fit", "fgd".
std::vector<std::string> baseline_policy_names();
bool is_baseline_policy(std::string const& name);

/// Throws std::invalid_argument for an unknown name. `seed` drives Random
/// and the tie-breaking node permutation.
solve_fn baseline_solver(std::string const& name, std::uint64_t seed);

/// Conventions of the solve_fn (docs: the top of baseline_policies.cpp):
/// - Node view: each node as an fgd::node_state (healthy GPUs only, in
///   index order; kinds from the running jobs' replicas), kept between
///   rounds and re-read from every round_input, so a node whose state did
///   not change keeps its cached FGD scores.
/// - Feasibility: kernels/ops.hpp's node_admits + cell_feasible (healthy
///   node, own/shared pool or a loanable inference node for training/batch
///   with loaning on, GPU model allowed, CPU, memory, healthy GPUs).
/// - Ties: one random permutation of the nodes per solve_fn, drawn from the
///   stream on the first round (redrawn if the node count changes); Random
///   then draws its picks from the same stream, as the FGD experiment does.
/// - The reported FGD fragmentation ratio (round metrics): the solver's
///   measure, against the round's typical task set of pending and running
///   work, so that a simulation compares every algorithm on one measure.
/// - M (FGD's score): by default the running M,
///   every pod seen so far (each pending job counted `replicas` times the
///   first round its name appears, plus the jobs already running on the
///   first call), ranked as in the experiment; the experiment builds M from
///   the whole untuned trace, which an online scheduler cannot see.
/// - Not modelled (the FGD policies have no such notions): topology,
///   elastic ranges, backfill, preemption, reclaiming loaned nodes.
/// Not thread-safe; copies of the returned function share one state.
struct baseline_options {
  std::uint64_t seed = 42;
  /// Continue this random stream instead of seeding one from `seed` (the
  /// experiment draws its tie permutation after shuffling the pod order).
  std::optional<std::mt19937_64> rng;
  /// A fixed typical task set M (model ids: the cluster's GPU models in node
  /// order of first appearance, as fgd::make_workload numbers them); unset
  /// = the running M.
  std::optional<std::vector<fgd::typical_task>> tasks;
};
solve_fn baseline_solver(std::string const& name, baseline_options const& opts);

}  // namespace placer::sim
