#pragma once
// Caps on one round's size, so that no request, however small on the wire,
// buys unbounded work or memory: a 700-byte request once asked for 10^8
// elastic replicas. The service checks them on every request before it
// solves (placer serve --max-nodes/--max-jobs/--max-replicas), with the
// other checks of untrusted text: names of bounded length, no two nodes and
// no two pending or running jobs of one name (job deltas and logs address
// them by name). validate() (solver.hpp) checks what a round means; these
// check what it costs.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

namespace placer {

struct round_limits {
  std::int64_t nodes = 100'000;
  std::int64_t gpus_per_node = 64;
  std::int64_t topology_levels = 16;
  std::int64_t topology_domains = 200'000;
  std::int64_t pending_jobs = 100'000;
  std::int64_t running_jobs = 200'000;
  /// Pending replicas of the whole round, an elastic job counted at its
  /// largest size (max(max_replicas, min_replicas, replicas)).
  std::int64_t replicas = 1'000'000;
  /// Running replicas of the whole round.
  std::int64_t running_replicas = 2'000'000;
  /// Bytes of any one name (node, job, domain, level, GPU model, label, queue).
  std::int64_t name_bytes = 256;
  /// Labels and taints of one node; strings (keys, values) of one job's
  /// constraints.
  std::int64_t labels = 256;
  /// Queues of the round's queue tree.
  std::int64_t queues = 10'000;
};

/// Throws logic_error naming the first limit the round passes
/// (resource_exhausted: "round has 120000 nodes, above the limit of 100000
/// (--max-nodes)") or the first name that is too long or repeated
/// (invalid_argument; of names held twice, the first held twice in the
/// round's order). `scratch` is the caller's reused buffer (its capacity is
/// kept), as is the table of positions each thread looks names up in, so
/// checking a steady stream of rounds allocates nothing once they have grown.
/// With in.nodes_validated, a node's own bounds (GPUs, name, labels and
/// taints) are not checked again: the service checks a delta's nodes with
/// check_node_limits as they come.
///
/// `arrived`, for a round whose jobs a job delta moved on from a session's
/// (checked before, their names unique, and the delta refused any name
/// twice or already held): the jobs before these indices were checked in an
/// earlier round, so only those appended from there are, and no name is
/// looked for twice.
struct arrived_jobs {
  std::size_t pending_from = 0;
  std::size_t running_from = 0;
};
///
/// `delta_names`, for a round on a session's cluster moved on by a delta
/// (its node names were unique when it came): the names of the nodes the
/// delta added or renamed. Those alone are looked for among the nodes, each
/// to be held by one node; with none, no name is (sorting 12,800 node names
/// was 1.3 ms of every delta round at 100k).
void check_limits(round_input const& in, round_limits const& lim, std::vector<std::string_view>& scratch,
                  arrived_jobs const* arrived = nullptr, std::vector<std::string_view> const* delta_names = nullptr);

/// One node's bounds: its GPUs, its name and GPU model, its labels and
/// taints (count and lengths).
void check_node_limits(node const& n, round_limits const& lim);

}  // namespace placer
