#pragma once
// Test-only exact placement: a MIP of one round solved with GLPK, and the
// objective it maximises, so tests can measure the optimality gap of the
// solver's heuristics. Not linked into any product target.
//
// The objective (used by the MIP, placement_value and the tests alike):
//
//   value(result) = sum over placed replicas of (demand.gpu_milli_total() + 1)
//
// i.e. GPU milli placed, plus 1 per replica so CPU-only work counts too, where
//   - a gang counts only if whole (all-or-nothing),
//   - a non-gang multi-replica job may be partly placed,
//   - a job with topo_mode == required must have all its placed replicas
//     under one domain of its topology_level.
// Priorities, preferences and scores are ignored: the tests that compare
// against it give every job priority 0.
//
// Feasibility follows kernels/ops.hpp exactly: healthy node; pool (inference
// jobs on inference/shared nodes; training/batch on training/shared, and on
// inference nodes only when loanable); GPU model in allowed_gpu_models
// (empty = any, a GPU job needs a node with a model); CPU milli and memory
// MiB per node; per GPU free milli, where a whole-GPU replica needs `gpus`
// GPUs with free == 1000 and takes them whole, and a fractional replica
// (gpus == 1, gpu_milli < 1000) takes gpu_milli from one GPU with enough free
// (several may share a GPU). Unhealthy GPUs have no capacity. Running jobs
// are already reflected in the free state and are never moved.
#include <cstdint>
#include <placer/solver/model.hpp>

namespace placer::testing_support {

struct exact_result {
  bool optimal = false;     ///< GLPK proved optimality (else it stopped at a limit)
  double value = 0;         ///< objective of the best integer solution found
  double bound = 0;         ///< upper bound on the optimum (== value when optimal)
  round_result placement;   ///< the MIP solution as placements with node and GPU indices
  std::int64_t nodes = 0;   ///< branch-and-bound nodes made
  bool stopped_at_nodes = false;  ///< stopped at node_limit (not proved)
};

/// Solves the round exactly, within time_limit_s and, when node_limit > 0,
/// within that many branch-and-bound nodes: a limit of work, not of time,
/// so that which rounds are proved does not depend on the machine's load.
/// Throws placer::logic_error if GLPK fails for any reason other than a limit.
exact_result solve_exact(round_input const& in, double time_limit_s = 10.0, std::int64_t node_limit = 0);

/// The objective above for any result. Gangs that are not whole and
/// required-topology jobs spread over several domains count 0; resource
/// over-commitment is not checked here (expect_round_invariants does that).
double placement_value(round_input const& in, round_result const& r);

}  // namespace placer::testing_support
