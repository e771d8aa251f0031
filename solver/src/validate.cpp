// Input validation for a round: everything a caller can get wrong is caught
// here, before any stage runs, with a message naming the job and field.
#include <placer/kernels/team.hpp>
#include <placer/solver/constraints.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include "quotas.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

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
  PLACER_EXPECTS(d.cpu_milli >= 0 && d.cpu_milli <= max_resource, who() + ": demand.cpu_milli must be in 0..2^40");
  PLACER_EXPECTS(d.memory_mib >= 0 && d.memory_mib <= max_resource, who() + ": demand.memory_mib must be in 0..2^40");
}

/// The running jobs sit inside what their nodes report as used: per node
/// their CPU and memory, and per GPU their shares, are at most capacity
/// minus free (other work the caller does not list may use the rest).
/// Otherwise stopping one (preemption, elastic scale-in) would hand back
/// resources the node never had. Indices are checked before this runs.
/// Work and memory scale with the running replicas, not the cluster.
void check_running_fit(round_input const& in) {
  struct use {
    std::int32_t node, gpu;  ///< gpu -1: the replica's CPU and memory
    std::size_t job;
    std::int64_t cpu, mem, milli;
  };
  std::vector<use> uses;
  for (std::size_t j = 0; j < in.running.size(); ++j) {
    auto const& r = in.running[j];
    for (auto const& rp : r.replicas) {
      uses.push_back({rp.node, -1, j, r.per_replica.cpu_milli, r.per_replica.memory_mib, 0});
      for (auto g : rp.gpus) uses.push_back({rp.node, g, j, 0, 0, rp.gpu_milli});
    }
  }
  std::sort(uses.begin(), uses.end(), [](use const& a, use const& b) {
    return std::tie(a.node, a.gpu, a.job) < std::tie(b.node, b.gpu, b.job);
  });
  std::int64_t cpu = 0, mem = 0, milli = 0;
  for (std::size_t k = 0; k < uses.size(); ++k) {
    auto const& u = uses[k];
    if (k == 0 || u.node != uses[k - 1].node || u.gpu != uses[k - 1].gpu) cpu = mem = milli = 0;
    cpu += u.cpu;
    mem += u.mem;
    milli += u.milli;
    auto const& nd = in.state.nodes[static_cast<std::size_t>(u.node)];
    char const* what = cpu > nd.cpu_milli_capacity - nd.cpu_milli_free      ? "its CPU"
                       : mem > nd.memory_mib_capacity - nd.memory_mib_free ? "its memory"
                       : u.gpu >= 0 && milli > milli_per_gpu - nd.gpu_free_milli[static_cast<std::size_t>(u.gpu)]
                           ? "a GPU's share"
                           : nullptr;
    PLACER_EXPECTS(what == nullptr, "running job " + std::to_string(u.job) + " ('" + in.running[u.job].name +
                                        "') and the running jobs before it on node " + std::to_string(u.node) +
                                        " ('" + nd.name + "')" + (u.gpu >= 0 ? " GPU " + std::to_string(u.gpu) : "") +
                                        " hold more than the node reports as used (capacity - free): " + what);
  }
}

/// Pending job j's checks (throws naming the first problem).
void check_pending(round_input const& in, std::size_t j) {
  auto const levels = in.state.topo.levels();
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
  PLACER_EXPECTS(job.min_replicas <= 100000 && job.max_replicas <= 100000,
                 who() + ": min_replicas and max_replicas must be at most 100000");
  // A running job carries no distinct_nodes, so elastic scale-out could
  // not keep it.
  PLACER_EXPECTS(!job.distinct_nodes || job.min_replicas == 0,
                 who() + ": distinct_nodes with an elastic range (min_replicas) is not supported");
  PLACER_EXPECTS(job.estimated_duration >= 0, who() + ": estimated_duration must not be negative");
  if (!job.constraints.empty()) {
    auto const problem = constraints_problem(job.constraints);
    PLACER_EXPECTS(problem.empty(), who() + ": constraints: " + problem);
  }
}

/// Items from which the nodes' and the pending jobs' checks run on the
/// OpenMP team: a pass over 100k's 12,800 node records is memory-bound
/// (171 us on one thread), its 5,000 jobs 70 us. Where the team sleeps, the
/// bound for a team of two (kernels::team_from): round_bench 100k under
/// OMP_WAIT_POLICY=PASSIVE, 2 vCPUs, validate 288-298 us on a team of two,
/// 239-242 on one thread.
constexpr std::int64_t parallel_from = 4096;
constexpr std::int64_t parallel_from_pair = 1 << 15;

/// Whether ok(i) fails (false, or throws) for some i in 0..n): on the
/// team where the items are many (a throw is caught there, inside the
/// region; the caller's own pass in order words the first problem).
template <class Ok>
bool any_problem(std::ptrdiff_t n, Ok&& ok) {
  bool bad = false;
  bool const team = n >= kernels::team_from(parallel_from, parallel_from_pair);
#pragma omp parallel for schedule(static) reduction(|| : bad) if (team)
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    try {
      bad = bad || !ok(static_cast<std::size_t>(i));
    } catch (...) {
      bad = true;
    }
  }
  return bad;
}

}  // namespace

void validate(round_input const& in) {
  // Every node's and pending job's checks on the team, then, only where
  // one fails, again in order for the first problem's words.
  auto const n_domains = static_cast<std::int32_t>(in.state.topo.domains.size());
  bool const nodes_bad =
      !in.nodes_validated && any_problem(static_cast<std::ptrdiff_t>(in.state.nodes.size()), [&](std::size_t i) {
        return node_problem(in.state.nodes[i], n_domains).empty();
      });
  validate(in.state, nodes_bad);
  // Comparisons are false for NaN, so these refuse it too.
  PLACER_EXPECTS(in.pol.queue.sensitivity_threshold >= 0.0F && in.pol.queue.sensitivity_threshold <= 1.0F,
                 "policy.queue.sensitivity_threshold must be in 0..1");
  auto const n_nodes = static_cast<std::int32_t>(in.state.nodes.size());
  if (any_problem(static_cast<std::ptrdiff_t>(in.pending.size()), [&](std::size_t j) {
        check_pending(in, j);
        return true;
      })) {
    for (std::size_t j = 0; j < in.pending.size(); ++j) check_pending(in, j);
  }
  for (std::size_t j = 0; j < in.running.size(); ++j) {
    auto const& r = in.running[j];
    auto const who = [&] { return "running job " + std::to_string(j) + " ('" + r.name + "')"; };
    check_demand(r.per_replica, who);
    PLACER_EXPECTS(r.network_sensitivity >= 0.0F && r.network_sensitivity <= 1.0F,
                   who() + ": network_sensitivity must be in 0..1");
    if (!r.constraints.empty()) {
      auto const problem = constraints_problem(r.constraints);
      PLACER_EXPECTS(problem.empty(), who() + ": constraints: " + problem);
    }
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
  check_running_fit(in);
  detail::validate_queues(in);
}

}  // namespace placer
