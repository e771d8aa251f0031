#pragma once
// The FGD paper's scheduling policies (Weng et al., ATC'23) as `placer
// simulate` algorithms: each is a solve_fn that places the round's pending
// jobs one at a time in queue order (priority, submit time, index), every
// replica on the node the policy scores best, a multi-replica job all or
// nothing. Same definitions as the FGD experiment (sim/src/fgd_policies.cpp).
//
//   auto solve = placer::sim::baseline_solver("fgd", 42);
//   auto res = placer::sim::run_simulation(w, cfg, solve);

#include <placer/sim/simulator.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace placer::sim {

/// "random", "dot-prod", "gpu-packing", "gpu-clustering", "best-fit", "fgd".
std::vector<std::string> baseline_policy_names();
bool is_baseline_policy(std::string const& name);

/// Throws std::invalid_argument for an unknown name. `seed` drives Random
/// and the tie-breaking node permutation.
solve_fn baseline_solver(std::string const& name, std::uint64_t seed);

}  // namespace placer::sim
