#pragma once
// How much a spread placement slows a communication-heavy job down
// (docs/policies.md, "Network model"). Shared by delay scheduling (to tune
// its timers) and the simulator (to stretch run times), so both use the
// same model.
//
//   spread s = placement_spread(cluster, replicas);
//   double f = slowdown_factor(job.network_sensitivity, s);  // >= 1
//
// Model: every topology level below the root at which the replicas sit in
// more than one domain adds `per_level_penalty * sensitivity` to the run
// time factor. With levels cluster/spine/leaf a fully sensitive job spread
// over two spines runs 2x as long as on one leaf; over two leaves of one
// spine 1.5x. Single-node placements and insensitive jobs are never slowed.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <vector>

namespace placer {

inline constexpr double per_level_penalty = 0.5;

struct spread {
  std::int32_t nodes = 0;           ///< distinct nodes
  std::int32_t levels_crossed = 0;  ///< levels (below the root) with > 1 domain
};

spread placement_spread(cluster const& c, std::vector<replica_placement> const& replicas);

/// 1 + per_level_penalty * clamp(sensitivity, 0, 1) * levels_crossed (1 for one node).
double slowdown_factor(float sensitivity, spread const& s);

}  // namespace placer
