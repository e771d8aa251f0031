// Input validation for a round: everything a caller can get wrong is caught
// here, before any stage runs, with a message naming the job and field.
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <string>

namespace placer {

namespace {

/// `who()` names the job; it is called only to word an error, so a valid
/// round builds no strings.
template <class Who>
void check_demand(demand const& d, Who const& who) {
  PLACER_EXPECTS(d.gpus >= 0 && d.gpus <= 64, who() + ": demand.gpus must be in 0..64");
  PLACER_EXPECTS(d.gpu_milli >= 1 && d.gpu_milli <= milli_per_gpu, who() + ": demand.gpu_milli must be in 1..1000");
  PLACER_EXPECTS(d.gpus <= 1 || d.gpu_milli == milli_per_gpu,
                 who() + ": a fractional gpu_milli is only allowed with gpus == 1");
  PLACER_EXPECTS(d.cpu_milli >= 0, who() + ": demand.cpu_milli must not be negative");
  PLACER_EXPECTS(d.memory_mib >= 0, who() + ": demand.memory_mib must not be negative");
}

}  // namespace

void validate(round_input const& in) {
  validate(in.state);
  auto const levels = in.state.topo.levels();
  auto const n_nodes = static_cast<std::int32_t>(in.state.nodes.size());
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    auto const& job = in.pending[j];
    auto const who = [&] { return "pending job " + std::to_string(j) + " ('" + job.name + "')"; };
    PLACER_EXPECTS(!job.name.empty(), who() + " has no name");
    PLACER_EXPECTS(job.replicas >= 1 && job.replicas <= 100000, who() + ": replicas must be in 1..100000");
    check_demand(job.per_replica, who);
    PLACER_EXPECTS(job.topology_level >= -1 && job.topology_level < std::max(levels, 0),
                   who() + ": topology_level " + std::to_string(job.topology_level) + " is not a level of the topology (" +
                       std::to_string(levels) + " levels)");
    PLACER_EXPECTS(job.topo_mode == topology_mode::none || job.topology_level >= 0,
                   who() + ": a topology requirement needs topology_level");
    PLACER_EXPECTS(job.network_sensitivity >= 0.0F && job.network_sensitivity <= 1.0F,
                   who() + ": network_sensitivity must be in 0..1");
    PLACER_EXPECTS(job.min_replicas >= 0 && job.max_replicas >= 0 &&
                       (job.max_replicas == 0 || job.min_replicas <= job.max_replicas),
                   who() + ": elastic range must satisfy 0 <= min_replicas <= max_replicas");
    PLACER_EXPECTS(job.estimated_duration >= 0, who() + ": estimated_duration must not be negative");
  }
  for (std::size_t j = 0; j < in.running.size(); ++j) {
    auto const& r = in.running[j];
    auto const who = [&] { return "running job " + std::to_string(j) + " ('" + r.name + "')"; };
    check_demand(r.per_replica, who);
    for (auto const& rp : r.replicas) {
      PLACER_EXPECTS(rp.node >= 0 && rp.node < n_nodes,
                     who() + ": node index " + std::to_string(rp.node) + " out of range (cluster has " +
                         std::to_string(n_nodes) + " nodes)");
      auto const g = in.state.nodes[rp.node].gpu_count();
      for (auto gi : rp.gpus) {
        PLACER_EXPECTS(gi >= 0 && gi < g, who() + ": GPU index " + std::to_string(gi) + " out of range on node " +
                                              std::to_string(rp.node) + " (" + std::to_string(g) + " GPUs)");
      }
      PLACER_EXPECTS(rp.gpu_milli >= 1 && rp.gpu_milli <= milli_per_gpu, who() + ": gpu_milli must be in 1..1000");
    }
  }
}

}  // namespace placer
