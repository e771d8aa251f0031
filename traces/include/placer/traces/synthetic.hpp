#pragma once
// Synthetic rounds at scale, for benchmarks and the load generator: a
// homogeneous cluster with leaf/spine topology, partly allocated, and a
// pending mix of single-GPU, fractional, multi-GPU, multi-node gang and
// inference jobs. Deterministic for a seed.
//
//   auto in = placer::traces::make_scenario(placer::traces::scenario_preset("10k"));

#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>

namespace placer::traces {

struct scenario_options {
  std::string name = "10k";
  std::int32_t nodes = 1280;
  std::int32_t gpus_per_node = 8;
  std::int32_t nodes_per_leaf = 32;
  std::int32_t leaves_per_spine = 8;
  double allocated = 0.70;        ///< share of GPU capacity already in use
  std::int32_t pending = 1000;
  double inference_share = 0.20;  ///< share of pending jobs that are inference
  std::uint64_t seed = 1;
  /// Kubernetes-style labels on every node (hostname, one of three zones
  /// by spine, rack per leaf, GPU product), taints on some (5%
  /// team=inference NoSchedule, 10% spot PreferNoSchedule), and constraints
  /// on jobs (inference tolerates the team taint and prefers those nodes; a
  /// quarter of the other jobs select a zone, a fifth of the rest stay off
  /// two racks in maintenance). The same nodes' free state and the same
  /// jobs as without.
  bool constraints = false;
  /// With constraints: this many more labels on every node that no job
  /// asks about, as Node Feature Discovery and GPU Feature Discovery put
  /// on a real Kubernetes GPU node (CPU flags, kernel, driver, CUDA, GPU
  /// memory and count; 40 in the "-nfd" presets).
  std::int32_t feature_labels = 0;
  /// Instead of constraints ("-split"): no labels, taints or constraints,
  /// but every job the constraints would set apart asks for 1..5 MiB more
  /// memory, one amount per constraint set it would have had. The classes
  /// split as in the "-k8s" round (24 -> 74 at 10k) with nothing to
  /// evaluate: what a round with that many classes costs, the control for
  /// what the constraints themselves cost (docs/results.md).
  bool split_classes = false;
};

/// "10k": 1,280 nodes x 8 GPUs, 1,000 pending; "100k": 12,800 nodes, 5,000
/// pending; "1k": 128 nodes, 200 pending (smoke tests); each with "-k8s"
/// (e.g. "10k-k8s"): the same round with constraints, "-nfd" (e.g.
/// "100k-nfd"): with constraints and 40 feature labels a node, and
/// "-split": the "-k8s" round's classes without its constraints. Throws
/// logic_error(invalid_argument) for other names.
scenario_options scenario_preset(std::string const& name);

/// The round. Running work is represented by the nodes' free state.
round_input make_scenario(scenario_options const& opt);

}  // namespace placer::traces
