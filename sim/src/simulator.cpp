// The discrete-event engine of `placer simulate` (docs/simulator.md).
#include <placer/sim/simulator.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>
#include <utility>

namespace placer::sim {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

std::int64_t ceil_to(std::int64_t t, std::int64_t iv) {
  if (iv <= 0) return t;
  std::int64_t q = t / iv;
  if (q * iv < t) ++q;
  return q * iv;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

solve_fn in_process(solver& s) {
  return [&s](round_input const& in) { return s.solve(in); };
}

sim_result run_simulation(workload const& w, sim_config const& cfg, solve_fn const& solve) {
  auto const wall0 = clock_type::now();
  if (w.jobs.size() != w.durations.size()) throw std::runtime_error("workload: jobs and durations differ in size");
  sim_result res;
  res.workload = w.name;
  res.description = w.description;
  res.config = cfg;

  round_input in;
  in.state = w.nodes;
  in.pol.algo = cfg.algo;
  for (auto const& n : in.state.nodes) {
    if (!n.healthy || n.gpu_count() == 0) continue;
    ++res.gpu_nodes;
    for (std::size_t g = 0; g < n.gpu_free_milli.size(); ++g) {
      if (n.gpu_is_healthy(g)) res.capacity_milli += milli_per_gpu;
    }
  }

  auto const n_jobs = w.jobs.size();
  res.jobs.resize(n_jobs);
  std::vector<std::size_t> order(n_jobs);
  for (std::size_t i = 0; i < n_jobs; ++i) {
    order[i] = i;
    auto& r = res.jobs[i];
    auto const& j = w.jobs[i];
    r.name = j.name;
    r.submit = j.submit_time;
    r.estimated = j.estimated_duration;
    r.duration = std::max<std::int64_t>(w.durations[i], 1);
    r.replicas = j.replicas;
    r.gpu_milli = j.per_replica.gpu_milli_total() * j.replicas;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return w.jobs[a].submit_time < w.jobs[b].submit_time; });
  if (n_jobs == 0) return res;

  res.t_begin = w.jobs[order.front()].submit_time;
  std::int64_t const horizon_end = cfg.horizon > 0 ? res.t_begin + cfg.horizon : never;

  std::vector<std::size_t> pending;       // job indices, arrival order
  std::vector<std::size_t> running_idx;   // parallel to in.running
  std::vector<std::int64_t> run_pos(n_jobs, -1);
  using entry = std::pair<std::int64_t, std::size_t>;
  std::priority_queue<entry, std::vector<entry>, std::greater<>> completions;
  std::size_t next_arrival = 0;
  std::int64_t next_round_at = never;
  std::int64_t allocated = 0, demand = 0, done = 0;
  double last_frag = 0;
  auto last_progress = clock_type::now() - std::chrono::seconds(1);

  auto record = [&](std::int64_t t) {
    sample s;
    s.time = t;
    s.allocated_milli = allocated;
    s.demand_milli = demand;
    s.gar = res.capacity_milli > 0 ? static_cast<double>(allocated) / static_cast<double>(res.capacity_milli) : 0.0;
    std::int32_t partial = 0;
    for (auto const& n : in.state.nodes) {
      if (!n.healthy || n.gpu_count() == 0) continue;
      std::int64_t free = 0;
      for (auto f : n.gpu_free_milli) free += f;
      std::int64_t const cap = static_cast<std::int64_t>(n.gpu_count()) * milli_per_gpu;
      if (free > 0 && free < cap) ++partial;
    }
    s.gfr = res.gpu_nodes > 0 ? static_cast<double>(partial) / res.gpu_nodes : 0.0;
    s.frag = last_frag;
    s.queue = static_cast<std::int32_t>(pending.size());
    s.running = static_cast<std::int32_t>(in.running.size());
    if (!res.series.empty() && res.series.back().time == t) {
      res.series.back() = s;
    } else {
      res.series.push_back(s);
    }
  };

  auto release = [&](running_job const& rj) {
    for (auto const& rp : rj.replicas) {
      auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) {
        nd.gpu_free_milli[static_cast<std::size_t>(g)] += rp.gpu_milli;
        allocated -= rp.gpu_milli;
      }
      nd.cpu_milli_free += rj.per_replica.cpu_milli;
      nd.memory_mib_free += rj.per_replica.memory_mib;
    }
  };

  auto complete = [&](std::size_t idx, std::int64_t t) {
    auto const pos = static_cast<std::size_t>(run_pos[idx]);
    release(in.running[pos]);
    demand -= res.jobs[idx].gpu_milli;
    res.jobs[idx].end = t;
    ++res.jobs[idx].completions;
    ++done;
    auto const last = in.running.size() - 1;
    if (pos != last) {
      in.running[pos] = std::move(in.running[last]);
      running_idx[pos] = running_idx[last];
      run_pos[running_idx[pos]] = static_cast<std::int64_t>(pos);
    }
    in.running.pop_back();
    running_idx.pop_back();
    run_pos[idx] = -1;
  };

  auto start = [&](std::size_t idx, placement const& p, std::int64_t t) {
    auto const& j = w.jobs[idx];
    // Check everything first, then apply, so a broken placement leaves the state alone.
    for (auto const& rp : p.replicas) {
      if (rp.node < 0 || static_cast<std::size_t>(rp.node) >= in.state.nodes.size())
        throw std::runtime_error("solver placed job '" + j.name + "' on node " + std::to_string(rp.node) +
                                 " which does not exist");
    }
    for (auto const& rp : p.replicas) {
      auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) {
        if (g < 0 || g >= nd.gpu_count()) throw std::runtime_error("solver placed job '" + j.name + "' on a missing GPU");
        nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
        allocated += rp.gpu_milli;
      }
      nd.cpu_milli_free -= j.per_replica.cpu_milli;
      nd.memory_mib_free -= j.per_replica.memory_mib;
    }
    for (auto const& rp : p.replicas) {
      auto const& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      bool bad = nd.cpu_milli_free < 0 || nd.memory_mib_free < 0;
      for (auto f : nd.gpu_free_milli) bad = bad || f < 0;
      if (bad) throw std::runtime_error("solver over-committed node " + nd.name + " placing job '" + j.name + "'");
    }
    running_job rj;
    rj.name = j.name;
    rj.kind = j.kind;
    rj.priority = j.priority;
    rj.per_replica = j.per_replica;
    rj.replicas = p.replicas;
    rj.gang = j.gang || j.replicas > 1;
    rj.preemptible = j.preemptible;
    rj.min_replicas = j.min_replicas;
    rj.start_time = t;
    rj.estimated_end = t + j.estimated_duration;
    rj.last_checkpoint = t;
    run_pos[idx] = static_cast<std::int64_t>(in.running.size());
    in.running.push_back(std::move(rj));
    running_idx.push_back(idx);
    res.jobs[idx].start = t;
    completions.emplace(t + res.jobs[idx].duration, idx);
    ++res.placements;
  };

  auto do_round = [&](std::int64_t t) {
    in.pending.clear();
    in.pending.reserve(pending.size());
    for (auto idx : pending) {
      in.pending.push_back(w.jobs[idx]);
      if (in.pending.back().replicas > 1) in.pending.back().gang = true;
    }
    in.now = t;
    ++in.state.epoch;
    auto const t0 = clock_type::now();
    round_result r = solve(in);
    res.wall_solver_seconds += seconds_since(t0);
    ++res.rounds;
    last_frag = r.metrics.frag_ratio_after;
    res.frag_after.push_back(last_frag);
    for (auto const& u : r.unplaced_jobs) ++res.unplaced[to_string(u.reason)];
    std::vector<char> started(pending.size(), 0);
    bool any = false;
    for (auto const& p : r.placements) {
      if (p.job < 0 || static_cast<std::size_t>(p.job) >= pending.size() || started[static_cast<std::size_t>(p.job)])
        throw std::runtime_error("solver returned a placement for pending index " + std::to_string(p.job) +
                                 " which is not a pending job of the round (or placed twice)");
      auto const idx = pending[static_cast<std::size_t>(p.job)];
      if (static_cast<std::int32_t>(p.replicas.size()) != w.jobs[idx].replicas) {
        ++res.rejected_partial;  // all-or-nothing: a partial placement is not applied
        continue;
      }
      start(idx, p, t);
      started[static_cast<std::size_t>(p.job)] = 1;
      any = true;
    }
    std::size_t k = 0;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (started[i] == 0) pending[k++] = pending[i];
    }
    pending.resize(k);
    next_round_at = any ? ceil_to(t + 1, cfg.interval) : never;
  };

  std::int64_t last_t = res.t_begin;
  bool hit_horizon = false;
  for (;;) {
    std::int64_t const ta = next_arrival < n_jobs ? w.jobs[order[next_arrival]].submit_time : never;
    std::int64_t const tc = completions.empty() ? never : completions.top().first;
    std::int64_t const tr = pending.empty() ? never : next_round_at;
    std::int64_t const t = std::min({ta, tc, tr});
    if (t == never) break;
    if (t > horizon_end) {
      hit_horizon = true;
      break;
    }
    bool events = false;
    while (!completions.empty() && completions.top().first == t) {
      auto const idx = completions.top().second;
      completions.pop();
      complete(idx, t);
      events = true;
    }
    while (next_arrival < n_jobs && w.jobs[order[next_arrival]].submit_time == t) {
      auto const idx = order[next_arrival++];
      pending.push_back(idx);
      demand += res.jobs[idx].gpu_milli;
      events = true;
    }
    if (events) next_round_at = std::min(next_round_at, cfg.on_event ? t : ceil_to(t, cfg.interval));
    if (!pending.empty() && next_round_at <= t) do_round(t);
    if (pending.empty()) next_round_at = never;
    record(t);
    last_t = t;
    if (cfg.progress && seconds_since(last_progress) >= 0.25) {
      last_progress = clock_type::now();
      double const span = horizon_end != never ? static_cast<double>(cfg.horizon)
                                               : static_cast<double>(std::max<std::int64_t>(
                                                     w.jobs[order.back()].submit_time - res.t_begin, 1));
      double const pct = std::min(100.0, 100.0 * static_cast<double>(t - res.t_begin) / span);
      int const bar = static_cast<int>(pct / 5.0);
      std::fprintf(stderr, "\r[%-20.*s] %5.1f%% sim time | done %lld/%zu | pending %zu | running %zu  ", bar,
                   "####################", pct, static_cast<long long>(done), n_jobs, pending.size(),
                   in.running.size());
      std::fflush(stderr);
    }
  }
  res.t_end = hit_horizon ? horizon_end : last_t;
  if (res.series.empty() || res.series.back().time != res.t_end) record(res.t_end);
  if (cfg.progress) std::fprintf(stderr, "\r%-90s\r", "");
  res.wall_seconds = seconds_since(wall0);
  return res;
}

}  // namespace placer::sim
