// The round as the decisions so far leave it, and the core on sub-problems
// (policies.hpp).
#include "policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <numeric>

namespace placer::detail {

work_state::work_state(round_input const& in_)
    : in(in_), state(in_.state), running(in_.running), alive(in_.running.size(), 1),
      started_from(in_.running.size(), -1) {}

void work_state::take(demand const& d, replica_placement const& rp, char const* what) {
  if (rp.node < 0 || static_cast<std::size_t>(rp.node) >= state.nodes.size()) {
    throw logic_error(error_code::internal, std::string(what) + ": node " + std::to_string(rp.node) + " does not exist");
  }
  auto& nd = state.nodes[static_cast<std::size_t>(rp.node)];
  bool ok = nd.cpu_milli_free >= d.cpu_milli && nd.memory_mib_free >= d.memory_mib;
  for (auto g : rp.gpus) {
    ok = ok && g >= 0 && g < nd.gpu_count() && nd.gpu_free_milli[static_cast<std::size_t>(g)] >= rp.gpu_milli;
  }
  if (!ok) throw logic_error(error_code::internal, std::string(what) + ": would over-commit node " + nd.name);
  for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
  nd.cpu_milli_free -= d.cpu_milli;
  nd.memory_mib_free -= d.memory_mib;
}

void release_replica(cluster& c, demand const& d, replica_placement const& rp) {
  if (rp.node < 0 || static_cast<std::size_t>(rp.node) >= c.nodes.size()) return;
  auto& nd = c.nodes[static_cast<std::size_t>(rp.node)];
  for (auto g : rp.gpus) {
    if (g < 0 || g >= nd.gpu_count()) continue;
    auto& f = nd.gpu_free_milli[static_cast<std::size_t>(g)];
    f = std::min(milli_per_gpu, f + rp.gpu_milli);
  }
  nd.cpu_milli_free = std::min(nd.cpu_milli_capacity, nd.cpu_milli_free + d.cpu_milli);
  nd.memory_mib_free = std::min(nd.memory_mib_capacity, nd.memory_mib_free + d.memory_mib);
}

void release_job(cluster& c, running_job const& rj) {
  for (auto const& rp : rj.replicas) release_replica(c, rj.per_replica, rp);
}

void work_state::give(demand const& d, replica_placement const& rp) { release_replica(state, d, rp); }

void work_state::take_all(demand const& d, std::vector<replica_placement> const& reps, char const* what) {
  std::size_t done = 0;
  try {
    for (; done < reps.size(); ++done) take(d, reps[done], what);
  } catch (...) {
    for (std::size_t k = 0; k < done; ++k) give(d, reps[k]);
    throw;
  }
}

std::size_t work_state::start(std::int32_t j, std::vector<replica_placement> const& reps) {
  auto const& jb = in.pending[static_cast<std::size_t>(j)];
  take_all(jb.per_replica, reps, "start");
  running_job rj;
  rj.name = jb.name;
  rj.kind = jb.kind;
  rj.priority = jb.priority;
  rj.per_replica = jb.per_replica;
  rj.replicas = reps;
  rj.gang = jb.gang || reps.size() > 1;
  rj.preemptible = jb.preemptible;
  rj.min_replicas = jb.min_replicas;
  rj.max_replicas = jb.max_replicas;
  rj.network_sensitivity = jb.network_sensitivity;
  rj.start_time = in.now;
  rj.estimated_end = in.now + jb.estimated_duration;
  rj.last_checkpoint = in.now;
  rj.constraints = jb.constraints;
  rj.queue = jb.queue;
  for (auto const& rp : reps) {
    auto const& nd = state.nodes[static_cast<std::size_t>(rp.node)];
    rj.loaned = rj.loaned || (jb.kind != job_kind::inference && nd.pool == pool_kind::inference);
  }
  running.push_back(std::move(rj));
  alive.push_back(1);
  started_from.push_back(j);
  return running.size() - 1;
}

void work_state::stop(std::size_t r) {
  PLACER_EXPECTS(r < running.size() && alive[r] != 0, "stop: running job is not alive");
  for (auto const& rp : running[r].replicas) give(running[r].per_replica, rp);
  alive[r] = 0;
}

std::vector<replica_placement> work_state::shrink(std::size_t r, std::vector<std::size_t> const& replica_indices) {
  PLACER_EXPECTS(r < running.size() && alive[r] != 0, "shrink: running job is not alive");
  auto& rj = running[r];
  std::vector<char> drop(rj.replicas.size(), 0);
  for (auto i : replica_indices) {
    PLACER_EXPECTS(i < rj.replicas.size(), "shrink: replica index out of range");
    drop[i] = 1;
  }
  std::vector<replica_placement> removed, kept;
  for (std::size_t i = 0; i < rj.replicas.size(); ++i) {
    if (drop[i] != 0) {
      give(rj.per_replica, rj.replicas[i]);
      removed.push_back(rj.replicas[i]);
    } else {
      kept.push_back(rj.replicas[i]);
    }
  }
  rj.replicas = std::move(kept);
  return removed;
}

void work_state::grow(std::size_t r, std::vector<replica_placement> const& reps) {
  PLACER_EXPECTS(r < running.size() && alive[r] != 0, "grow: running job is not alive");
  auto& rj = running[r];
  take_all(rj.per_replica, reps, "grow");
  rj.replicas.insert(rj.replicas.end(), reps.begin(), reps.end());
}

std::int64_t work_state::running_of(std::int32_t j) const {
  for (std::size_t r = in.running.size(); r < running.size(); ++r) {
    if (started_from[r] == j && alive[r] != 0) return static_cast<std::int64_t>(r);
  }
  return -1;
}

std::int64_t work_state::lost_seconds(std::size_t r) const {
  auto const& rj = running[r];
  return std::max<std::int64_t>(0, in.now - std::max(rj.last_checkpoint, rj.start_time));
}

std::int64_t work_state::lost_work(std::size_t r) const {
  auto const& rj = running[r];
  std::int64_t const secs = lost_seconds(r);
  std::int64_t milli = 0;
  for (auto const& rp : rj.replicas) milli += static_cast<std::int64_t>(rp.gpus.size()) * rp.gpu_milli;
  return milli * secs;
}

round_result assign_jobs(core_fn const& core, work_state const& ws, sub_round const& sub) {
  round_input in;
  in.state = ws.state;
  if (sub.hidden != nullptr) {
    for (std::size_t n = 0; n < in.state.nodes.size() && n < sub.hidden->size(); ++n) {
      if ((*sub.hidden)[n] != 0) in.state.nodes[n].healthy = false;
    }
  }
  in.pending.reserve(sub.jobs.size());
  for (auto j : sub.jobs) {
    in.pending.push_back(sub.overrides != nullptr ? (*sub.overrides)[static_cast<std::size_t>(j)]
                                                  : ws.in.pending[static_cast<std::size_t>(j)]);
  }
  in.pol = ws.in.pol;
  in.pol.queue = queue_policy{};
  in.pol.queue.loaning = ws.in.pol.queue.loaning;
  in.now = ws.in.now;
  in.context = ws.in.context != nullptr ? ws.in.context : &ws.in;
  round_result r = core(in);
  for (auto& p : r.placements) p.job = sub.jobs[static_cast<std::size_t>(p.job)];
  for (auto& u : r.unplaced_jobs) u.job = sub.jobs[static_cast<std::size_t>(u.job)];
  return r;
}

job as_placed(job j, round_input const& in) {
  if (in.pol.queue.elastic && j.min_replicas > 0) {
    j.replicas = j.start_replicas();
    j.gang = j.gang || j.replicas > 1;
  }
  return j;
}

std::vector<std::int32_t> queue_order(round_input const& in, std::vector<std::int32_t> const& jobs) {
  std::vector<std::int32_t> order = jobs;
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    auto const& x = in.pending[static_cast<std::size_t>(a)];
    auto const& y = in.pending[static_cast<std::size_t>(b)];
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.submit_time != y.submit_time) return x.submit_time < y.submit_time;
    return a < b;
  });
  return order;
}

}  // namespace placer::detail
