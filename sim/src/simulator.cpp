// The discrete-event engine of `placer simulate` (docs/simulator.md).
//
// Work model: a job's trace duration is its *work*, in seconds at its
// nominal replica count on a consolidated placement. While it runs with k
// replicas (nominal n) at slowdown factor f its rate is (k / n) / f work
// seconds per second; every start, resize, preemption and completion closes
// the current rate segment. Preemption keeps the work up to the last
// checkpoint; a completion event carries the job's generation, so events
// made stale by a resize or a preemption are skipped when they come up.
#include <placer/sim/simulator.hpp>
#include <placer/solver/network_model.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
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

enum class phase : std::uint8_t { waiting, pending, running, done };

/// Engine state of one job beside its job_record.
struct job_state {
  phase ph = phase::waiting;
  std::uint32_t gen = 0;       ///< completion events with another generation are stale
  std::int64_t run_pos = -1;   ///< index into in.running while running
  double work_done = 0;        ///< work seconds done at t_seg
  std::int64_t t_seg = 0;      ///< start of the current rate segment (start, restart or resize)
  std::int64_t t_run = 0;      ///< start of the current run (checkpoint period anchor)
  double rate = 1;             ///< work seconds per second in this segment
  double factor = 1;           ///< slowdown factor of the current placement
  double factor_time = 0;      ///< sum of factor x seconds run
  std::int64_t cur_milli = 0;  ///< GPU milli held now
};

bool same_replica(replica_placement const& a, replica_placement const& b) {
  return a.node == b.node && a.gpus == b.gpus && a.gpu_milli == b.gpu_milli;
}

}  // namespace

solve_fn in_process(solver& s) {
  // One memory per solve_fn: the delay-scheduling timers and deferral
  // times must survive from round to round of one run (the service keeps
  // the same per session).
  auto memory = std::make_shared<queue_memory>();
  return [&s, memory](round_input const& in) { return s.solve(in, memory.get()); };
}

backfill_mode parse_backfill(std::string const& name) {
  if (name == "off") return backfill_mode::off;
  if (name == "easy") return backfill_mode::easy;
  if (name == "conservative") return backfill_mode::conservative;
  throw std::invalid_argument("unknown backfill mode '" + name + "' (off, easy, conservative)");
}

char const* backfill_name(backfill_mode m) {
  switch (m) {
    case backfill_mode::off: return "off";
    case backfill_mode::easy: return "easy";
    case backfill_mode::conservative: return "conservative";
  }
  return "off";
}

namespace {

std::int64_t seconds_option(std::string const& k, std::string const& v, long long lowest, char const* what) {
  long long x = 0;
  std::size_t pos = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (std::exception const&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size() || x < lowest)
    throw std::invalid_argument("--" + k + " needs " + what + ", got '" + v + "'");
  return x;
}

}  // namespace

void apply_policy_options(std::map<std::string, std::string> const& opts, std::set<std::string> const& flags,
                          sim_config& cfg) {
  for (auto const& [k, v] : opts) {
    if (k == "backfill") {
      cfg.queue.backfill = parse_backfill(v);
    } else if (k == "checkpoint-interval") {
      cfg.checkpoint_interval = seconds_option(k, v, 0, "a non-negative integer (seconds)");
    } else if (k == "preempt-max-lost") {
      cfg.queue.preempt_max_lost_s = seconds_option(k, v, -1, "an integer number of seconds, or -1 for any victim");
    } else if (k == "order") {
      try {
        cfg.order = parse_queue_order(v);
      } catch (std::exception const& e) {
        throw std::invalid_argument(std::string("--order: ") + e.what());
      }
    } else if (k == "age-weight") {
      cfg.age.weight = static_cast<std::int32_t>(
          std::min<std::int64_t>(seconds_option(k, v, 0, "a non-negative integer (priority points)"), 1000000000));
    } else if (k == "age-max") {
      cfg.age.max_age_s = seconds_option(k, v, 1, "a positive integer (seconds)");
    } else if (policy_valued_options().count(k) == 0) {
      throw std::invalid_argument("unknown policy option --" + k);
    }
  }
  for (auto const& f : flags) {
    if (f == "preemption") {
      cfg.queue.preemption = true;
    } else if (f == "no-loaning") {
      cfg.queue.loaning = false;
    } else if (f == "elastic") {
      cfg.queue.elastic = true;
    } else if (f == "delay-scheduling") {
      cfg.queue.delay_scheduling = true;
    } else if (f == "network-preemption") {
      cfg.queue.network_preemption = true;
    } else if (f == "no-slowdown") {
      cfg.network_slowdown = false;
    } else if (f == "no-repack") {
      cfg.repack = false;
    } else if (f == "age-cross-priority") {
      cfg.age.cross_priority = true;
    } else if (policy_flag_options().count(f) == 0) {
      throw std::invalid_argument("unknown policy flag --" + f);
    }
  }
  // The solver runs network preemption only for gangs that delay
  // scheduling deferred; alone it would silently do nothing.
  if (cfg.queue.network_preemption && !cfg.queue.delay_scheduling)
    throw std::invalid_argument("--network-preemption needs --delay-scheduling (it acts on deferred gangs)");
}

std::string policy_label(queue_policy const& q) {
  std::string s;
  auto add = [&](std::string const& x) { s += (s.empty() ? "" : "+") + x; };
  if (q.backfill != backfill_mode::off) add(std::string("backfill=") + backfill_name(q.backfill));
  if (q.preemption) add("preemption");
  if (q.loaning) add("loaning");
  if (q.elastic) add("elastic");
  if (q.delay_scheduling) add("delay");
  if (q.network_preemption) add("network-preemption");
  return s.empty() ? "none" : s;
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
  in.pol.queue = cfg.queue;
  in.pol.order = cfg.order;
  in.pol.age = cfg.age;
  in.pol.repack = cfg.repack;
  if (cfg.queues_in_rounds) in.queues = cfg.queues;
  for (auto const& n : in.state.nodes) {
    if (!n.healthy || n.gpu_count() == 0) continue;
    ++res.gpu_nodes;
    for (std::size_t g = 0; g < n.gpu_free_milli.size(); ++g) {
      if (n.gpu_is_healthy(g)) res.capacity_milli += milli_per_gpu;
    }
  }

  auto const n_jobs = w.jobs.size();
  res.jobs.resize(n_jobs);
  std::vector<job_state> st(n_jobs);
  std::vector<std::size_t> order(n_jobs);
  std::unordered_map<std::string, std::size_t> by_name;  // running jobs are named in preemptions and scale changes
  by_name.reserve(n_jobs);
  std::vector<char> ambiguous(n_jobs, 0);
  for (std::size_t i = 0; i < n_jobs; ++i) {
    order[i] = i;
    auto& r = res.jobs[i];
    auto const& j = w.jobs[i];
    r.name = j.name;
    r.kind = j.kind;
    r.priority = j.priority;
    r.submit = j.submit_time;
    r.estimated = j.estimated_duration;
    r.duration = std::max<std::int64_t>(w.durations[i], 1);
    r.replicas = j.replicas;
    r.gpu_milli = j.per_replica.gpu_milli_total() * j.replicas;
    auto [it, fresh] = by_name.emplace(j.name, i);
    if (!fresh) ambiguous[it->second] = ambiguous[i] = 1;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return w.jobs[a].submit_time < w.jobs[b].submit_time; });
  std::vector<std::int32_t> job_queue;  // per job: its index in cfg.queues (-1: none); empty without queues
  if (!cfg.queues.empty()) {
    job_queue.assign(n_jobs, -1);
    for (std::size_t i = 0; i < n_jobs; ++i) {
      for (std::size_t q = 0; q < cfg.queues.size(); ++q) {
        if (cfg.queues[q].name == w.jobs[i].queue) job_queue[i] = static_cast<std::int32_t>(q);
      }
    }
  }
  std::vector<std::size_t> rank(n_jobs);  // arrival rank: the queue stays in this order
  for (std::size_t k = 0; k < n_jobs; ++k) rank[order[k]] = k;
  if (n_jobs == 0) return res;

  res.t_begin = w.jobs[order.front()].submit_time;
  std::int64_t const horizon_end = cfg.horizon > 0 ? res.t_begin + cfg.horizon : never;

  std::vector<std::size_t> pending;       // job indices, arrival order
  std::vector<std::size_t> running_idx;   // parallel to in.running
  using entry = std::tuple<std::int64_t, std::size_t, std::uint32_t>;  // (time, job, generation)
  std::priority_queue<entry, std::vector<entry>, std::greater<>> completions;
  std::size_t next_arrival = 0;
  std::int64_t next_round_at = never;
  std::int64_t allocated = 0, demand = 0, done = 0, inference_milli = 0, loaned_milli = 0;
  bool time_dependent = false;  // the last round deferred jobs whose timers may still run out
  double last_frag = 0;
  auto last_progress = clock_type::now() - std::chrono::seconds(1);

  auto record = [&](std::int64_t t) {
    sample s;
    s.time = t;
    s.allocated_milli = allocated;
    s.demand_milli = demand;
    s.inference_milli = inference_milli;
    s.loaned_milli = loaned_milli;
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
    if (!job_queue.empty()) {
      s.queue_milli.assign(cfg.queues.size(), 0);
      s.queue_demand_milli.assign(cfg.queues.size(), 0);
      for (auto idx : running_idx) {
        if (job_queue[idx] < 0) continue;
        s.queue_milli[static_cast<std::size_t>(job_queue[idx])] += st[idx].cur_milli;
        s.queue_demand_milli[static_cast<std::size_t>(job_queue[idx])] += st[idx].cur_milli;
      }
      for (auto idx : pending) {
        if (job_queue[idx] >= 0) s.queue_demand_milli[static_cast<std::size_t>(job_queue[idx])] += res.jobs[idx].gpu_milli;
      }
    }
    if (!res.series.empty() && res.series.back().time == t) {
      res.series.back() = s;
    } else {
      res.series.push_back(s);
    }
  };

  // --- resources: one replica of job idx, given back or taken ---
  auto pool_account = [&](std::size_t idx, replica_placement const& rp, std::int64_t sign) {
    std::int64_t const m = static_cast<std::int64_t>(rp.gpus.size()) * rp.gpu_milli * sign;
    allocated += m;
    st[idx].cur_milli += m;
    if (w.jobs[idx].kind == job_kind::inference) {
      inference_milli += m;
    } else if (in.state.nodes[static_cast<std::size_t>(rp.node)].pool == pool_kind::inference) {
      loaned_milli += m;
    }
  };
  auto give = [&](std::size_t idx, replica_placement const& rp) {
    auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
    for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] += rp.gpu_milli;
    nd.cpu_milli_free += w.jobs[idx].per_replica.cpu_milli;
    nd.memory_mib_free += w.jobs[idx].per_replica.memory_mib;
    pool_account(idx, rp, -1);
  };
  // Checks the replicas first, then applies them, so a broken answer stops
  // the run with the state as it was.
  auto take = [&](std::size_t idx, std::vector<replica_placement> const& reps, char const* what) {
    auto const& j = w.jobs[idx];
    for (auto const& rp : reps) {
      if (rp.node < 0 || static_cast<std::size_t>(rp.node) >= in.state.nodes.size())
        throw std::runtime_error(std::string("solver ") + what + " job '" + j.name + "' on node " +
                                 std::to_string(rp.node) + " which does not exist");
      auto const& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) {
        if (g < 0 || g >= nd.gpu_count())
          throw std::runtime_error(std::string("solver ") + what + " job '" + j.name + "' on a missing GPU");
      }
      if (rp.gpu_milli <= 0 || rp.gpu_milli > milli_per_gpu)
        throw std::runtime_error(std::string("solver ") + what + " job '" + j.name + "' with a bad GPU share");
    }
    for (auto const& rp : reps) {
      auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
      nd.cpu_milli_free -= j.per_replica.cpu_milli;
      nd.memory_mib_free -= j.per_replica.memory_mib;
      pool_account(idx, rp, +1);
    }
    for (auto const& rp : reps) {
      auto const& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      bool bad = nd.cpu_milli_free < 0 || nd.memory_mib_free < 0;
      for (auto f : nd.gpu_free_milli) bad = bad || f < 0;
      if (bad)
        throw std::runtime_error("solver over-committed node " + nd.name + " (" + what + " job '" + j.name + "')");
    }
  };

  // Elastic: the job has a range and the policy is on.
  auto is_elastic = [&](std::size_t idx) { return cfg.queue.elastic && w.jobs[idx].min_replicas > 0; };

  // --- work and time accounting ---
  auto close_segment = [&](std::size_t idx, std::int64_t t) {
    auto& s = st[idx];
    auto& r = res.jobs[idx];
    std::int64_t const dt = std::max<std::int64_t>(t - s.t_seg, 0);
    r.run_seconds += dt;
    r.gpu_milli_seconds += s.cur_milli * dt;
    s.factor_time += s.factor * static_cast<double>(dt);
    s.work_done += static_cast<double>(dt) * s.rate;
    s.t_seg = t;
  };
  // Last checkpoint at or before t: every checkpoint_interval seconds since
  // the run started, and at each resize (t_seg, where the segment began).
  auto last_checkpoint = [&](std::size_t idx, std::int64_t t) {
    auto const& s = st[idx];
    std::int64_t c = s.t_seg;
    if (cfg.checkpoint_interval > 0) {
      c = std::max(c, s.t_run + (t - s.t_run) / cfg.checkpoint_interval * cfg.checkpoint_interval);
    }
    return std::min(c, t);
  };
  // A new placement (start, restart or resize) of job idx at t: slowdown
  // and rate from the replicas now held, a fresh completion event.
  auto set_placement = [&](std::size_t idx, std::vector<replica_placement> const& reps, std::int64_t t) {
    auto& s = st[idx];
    auto& r = res.jobs[idx];
    auto const& j = w.jobs[idx];
    spread const sp = placement_spread(in.state, reps);
    s.factor = cfg.network_slowdown ? slowdown_factor(j.network_sensitivity, sp) : 1.0;
    r.slowdown_max = std::max(r.slowdown_max, s.factor);
    r.max_nodes = std::max(r.max_nodes, sp.nodes);
    double const k = static_cast<double>(reps.size());
    double const n = static_cast<double>(std::max(j.replicas, 1));
    s.rate = k / n / s.factor;
    s.t_seg = t;
    double const remaining = std::max(static_cast<double>(r.duration) - s.work_done, 0.0);
    // 1e-6: factors like 1.4 are not exact in binary; a run of 100 s at
    // 1.4x must end after 140 s, not 141.
    auto const dt = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(remaining / s.rate - 1e-6)));
    ++s.gen;
    completions.emplace(t + dt, idx, s.gen);
    auto& rj = in.running[static_cast<std::size_t>(s.run_pos)];
    rj.replicas = reps;
    rj.gang = j.gang || reps.size() > 1;
    rj.loaned = false;
    for (auto const& rp : reps) {
      rj.loaned = rj.loaned ||
                  (j.kind != job_kind::inference && in.state.nodes[static_cast<std::size_t>(rp.node)].pool == pool_kind::inference);
    }
    double const est_left = std::max(static_cast<double>(j.estimated_duration) - s.work_done, 0.0);
    rj.estimated_end = t + static_cast<std::int64_t>(std::ceil(est_left / s.rate - 1e-6));
    rj.last_checkpoint = t;
  };

  auto remove_running = [&](std::size_t idx) {
    auto const pos = static_cast<std::size_t>(st[idx].run_pos);
    auto const last = in.running.size() - 1;
    if (pos != last) {
      in.running[pos] = std::move(in.running[last]);
      running_idx[pos] = running_idx[last];
      st[running_idx[pos]].run_pos = static_cast<std::int64_t>(pos);
    }
    in.running.pop_back();
    running_idx.pop_back();
    st[idx].run_pos = -1;
  };

  auto complete = [&](std::size_t idx, std::int64_t t) {
    close_segment(idx, t);
    auto const& rj = in.running[static_cast<std::size_t>(st[idx].run_pos)];
    demand -= st[idx].cur_milli;
    for (auto const& rp : rj.replicas) give(idx, rp);
    remove_running(idx);
    st[idx].ph = phase::done;
    ++st[idx].gen;
    res.jobs[idx].end = t;
    ++res.jobs[idx].completions;
    ++done;
  };

  auto start = [&](std::size_t idx, std::vector<replica_placement> const& reps, std::int64_t t) {
    auto const& j = w.jobs[idx];
    take(idx, reps, "placed");
    demand += st[idx].cur_milli - res.jobs[idx].gpu_milli;  // pending counted the nominal demand
    running_job rj;
    rj.name = j.name;
    rj.kind = j.kind;
    rj.priority = j.priority;
    rj.per_replica = j.per_replica;
    rj.preemptible = j.preemptible;
    // The elastic range only with the policy on: otherwise the job is
    // inelastic, and a reclaim must preempt it rather than shrink it.
    if (is_elastic(idx)) {
      rj.min_replicas = j.min_replicas;
      rj.max_replicas = std::max(j.max_replicas, j.min_replicas);
    }
    rj.network_sensitivity = j.network_sensitivity;
    if (!in.queues.empty()) rj.queue = j.queue;
    rj.start_time = t;
    st[idx].run_pos = static_cast<std::int64_t>(in.running.size());
    in.running.push_back(std::move(rj));
    running_idx.push_back(idx);
    st[idx].ph = phase::running;
    st[idx].t_run = t;
    set_placement(idx, reps, t);
    auto& r = res.jobs[idx];
    if (r.start < 0) r.start = t;
    ++r.starts;
    ++res.placements;
  };

  // Preemption at t: the run since the last checkpoint is lost; the job
  // keeps the work up to it and goes back to the queue.
  auto preempt = [&](std::size_t idx, std::int64_t t, std::string const& reason) {
    auto& s = st[idx];
    auto& r = res.jobs[idx];
    std::int64_t const ckpt = last_checkpoint(idx, t);
    double const ckpt_work = s.work_done + static_cast<double>(ckpt - s.t_seg) * s.rate;
    close_segment(idx, t);
    std::int64_t const lost = t - ckpt;
    r.lost_seconds += lost;
    r.lost_gpu_milli_seconds += s.cur_milli * lost;
    res.lost_gpu_milli_seconds += s.cur_milli * lost;
    s.work_done = std::min(ckpt_work, static_cast<double>(r.duration));
    auto const& rj = in.running[static_cast<std::size_t>(s.run_pos)];
    demand -= s.cur_milli;
    for (auto const& rp : rj.replicas) give(idx, rp);
    demand += r.gpu_milli;
    remove_running(idx);
    s.ph = phase::pending;
    ++s.gen;
    ++r.preemptions;
    ++res.preemptions;
    ++res.preemptions_by_reason[reason.empty() ? "unspecified" : reason];
  };

  auto find_job = [&](std::string const& name, char const* what) -> std::size_t {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw std::runtime_error(std::string("solver ") + what + " job '" + name + "' which does not exist");
    if (ambiguous[it->second] != 0)
      throw std::runtime_error(std::string("solver ") + what + " job '" + name +
                               "' whose name is not unique in the workload");
    return it->second;
  };

  auto elastic_bounds = [&](std::size_t idx) {
    auto const& j = w.jobs[idx];
    return std::pair<std::int32_t, std::int32_t>{std::max(j.min_replicas, 1), std::max(j.max_replicas, j.min_replicas)};
  };

  // Rounds need running elastic jobs below their maximum too: spare GPUs go
  // to them even with an empty queue.
  auto elastic_can_grow = [&] {
    if (!cfg.queue.elastic) return false;
    for (std::size_t p = 0; p < in.running.size(); ++p) {
      auto const idx = running_idx[p];
      if (is_elastic(idx) && static_cast<std::int32_t>(in.running[p].replicas.size()) < elastic_bounds(idx).second)
        return true;
    }
    return false;
  };

  auto do_round = [&](std::int64_t t) {
    in.pending.clear();
    in.pending.reserve(pending.size());
    for (auto idx : pending) {
      in.pending.push_back(w.jobs[idx]);
      auto& pj = in.pending.back();
      if (pj.replicas > 1) pj.gang = true;
      // A restarted job needs only the work after its checkpoint.
      if (st[idx].work_done > 0) {
        pj.estimated_duration = std::max<std::int64_t>(
            1, static_cast<std::int64_t>(std::llround(static_cast<double>(pj.estimated_duration) - st[idx].work_done)));
      }
    }
    for (std::size_t p = 0; p < in.running.size(); ++p) in.running[p].last_checkpoint = last_checkpoint(running_idx[p], t);
    in.now = t;
    ++in.state.epoch;
    auto const t0 = clock_type::now();
    round_result r = solve(in);
    res.wall_solver_seconds += seconds_since(t0);
    ++res.rounds;
    last_frag = r.metrics.frag_ratio_after;
    res.frag_after.push_back(last_frag);
    time_dependent = false;
    for (auto const& u : r.unplaced_jobs) {
      ++res.unplaced[to_string(u.reason)];
      // A deferred gang may be placed spread once its timer runs out, with
      // nothing else changing: keep ticking while any could still wait.
      if (u.reason == unplaced_reason::deferred && u.job >= 0 && static_cast<std::size_t>(u.job) < pending.size() &&
          t - w.jobs[pending[static_cast<std::size_t>(u.job)]].submit_time <= cfg.queue.delay_timer_max + cfg.interval)
        time_dependent = true;
    }
    res.reclaimed_nodes += static_cast<std::int64_t>(r.reclaimed_nodes.size());
    res.reservations += static_cast<std::int64_t>(r.reservations.size());

    // Validate the placements against the queue before changing anything.
    std::vector<char> placed(pending.size(), 0);
    for (auto const& p : r.placements) {
      if (p.job < 0 || static_cast<std::size_t>(p.job) >= pending.size() || placed[static_cast<std::size_t>(p.job)])
        throw std::runtime_error("solver returned a placement for pending index " + std::to_string(p.job) +
                                 " which is not a pending job of the round (or placed twice)");
      placed[static_cast<std::size_t>(p.job)] = 1;
    }
    bool changed = false;

    // 1. Releases first (preemptions, scale-ins), then takes (placements,
    //    scale-outs): the solver's final state is valid, so every state in
    //    between is too and the over-commit check stays exact.
    std::vector<std::size_t> requeue;
    for (auto const& pr : r.preemptions) {
      std::size_t const idx = find_job(pr.job, "preempted");
      if (st[idx].ph != phase::running) {
        // A job started and stopped inside the same round never ran: the
        // solver may report it; then it simply stays pending.
        auto const it = std::find(pending.begin(), pending.end(), idx);
        if (st[idx].ph == phase::pending && it != pending.end()) {
          placed[static_cast<std::size_t>(it - pending.begin())] = 0;
          continue;
        }
        throw std::runtime_error("solver preempted job '" + pr.job + "' which is not running");
      }
      preempt(idx, t, pr.reason);
      requeue.push_back(idx);
      changed = true;
    }
    for (auto const& sc : r.scale_ins) {
      std::size_t const idx = find_job(sc.job, "scaled in");
      // Shrunk, then preempted in the same round: the preemption is what counts.
      if (std::find(requeue.begin(), requeue.end(), idx) != requeue.end()) continue;
      if (st[idx].ph != phase::running) throw std::runtime_error("solver scaled in job '" + sc.job + "' which is not running");
      if (!is_elastic(idx)) throw std::runtime_error("solver scaled in job '" + sc.job + "' which is not elastic");
      auto reps = in.running[static_cast<std::size_t>(st[idx].run_pos)].replicas;
      for (auto const& rp : sc.replicas) {
        auto it = std::find_if(reps.begin(), reps.end(), [&](replica_placement const& x) { return same_replica(x, rp); });
        if (it == reps.end())
          throw std::runtime_error("solver scaled in job '" + sc.job + "' by a replica it does not hold (node " +
                                   std::to_string(rp.node) + ")");
        reps.erase(it);
      }
      if (static_cast<std::int32_t>(reps.size()) < elastic_bounds(idx).first)
        throw std::runtime_error("solver scaled job '" + sc.job + "' in below its minimum");
      close_segment(idx, t);
      for (auto const& rp : sc.replicas) give(idx, rp);
      demand -= static_cast<std::int64_t>(sc.replicas.size()) * w.jobs[idx].per_replica.gpu_milli_total();
      set_placement(idx, reps, t);
      ++res.jobs[idx].scale_ins;
      ++res.scale_ins;
      changed = true;
    }
    // 2. Placements of pending jobs.
    for (auto const& p : r.placements) {
      auto const k = static_cast<std::size_t>(p.job);
      if (placed[k] == 0) continue;  // dropped above (preempted in its own round)
      auto const idx = pending[k];
      auto const n = static_cast<std::int32_t>(p.replicas.size());
      bool ok = n == w.jobs[idx].replicas;
      if (is_elastic(idx)) {
        auto const [lo, hi] = elastic_bounds(idx);
        ok = n >= lo && n <= hi;
      }
      if (!ok) {
        ++res.rejected_partial;  // all-or-nothing: a placement of another size is not applied
        placed[k] = 0;
        continue;
      }
      start(idx, p.replicas, t);
      changed = true;
    }
    // 3. Scale-outs of running elastic jobs.
    for (auto const& sc : r.scale_outs) {
      std::size_t const idx = find_job(sc.job, "scaled out");
      if (st[idx].ph != phase::running) throw std::runtime_error("solver scaled out job '" + sc.job + "' which is not running");
      if (!is_elastic(idx)) throw std::runtime_error("solver scaled out job '" + sc.job + "' which is not elastic");
      auto reps = in.running[static_cast<std::size_t>(st[idx].run_pos)].replicas;
      if (static_cast<std::int32_t>(reps.size() + sc.replicas.size()) > elastic_bounds(idx).second)
        throw std::runtime_error("solver scaled job '" + sc.job + "' out beyond its maximum");
      close_segment(idx, t);
      take(idx, sc.replicas, "scaled out");
      demand += static_cast<std::int64_t>(sc.replicas.size()) * w.jobs[idx].per_replica.gpu_milli_total();
      reps.insert(reps.end(), sc.replicas.begin(), sc.replicas.end());
      set_placement(idx, reps, t);
      ++res.jobs[idx].scale_outs;
      ++res.scale_outs;
      changed = true;
    }
    // 4. The queue: started jobs leave it, preempted ones return to their
    //    arrival position (original submit time).
    std::size_t k = 0;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (placed[i] == 0) pending[k++] = pending[i];
    }
    pending.resize(k);
    for (auto idx : requeue) {
      auto it = std::lower_bound(pending.begin(), pending.end(), idx,
                                 [&](std::size_t a, std::size_t b) { return rank[a] < rank[b]; });
      pending.insert(it, idx);
    }
    next_round_at = changed || time_dependent ? ceil_to(t + 1, cfg.interval) : never;
  };

  std::int64_t last_t = res.t_begin;
  bool hit_horizon = false;
  for (;;) {
    std::int64_t const ta = next_arrival < n_jobs ? w.jobs[order[next_arrival]].submit_time : never;
    std::int64_t const tc = completions.empty() ? never : std::get<0>(completions.top());
    bool const want_round = !pending.empty() || elastic_can_grow();
    std::int64_t const tr = want_round ? next_round_at : never;
    std::int64_t const t = std::min({ta, tc, tr});
    if (t == never) break;
    if (t > horizon_end) {
      hit_horizon = true;
      break;
    }
    bool events = false;
    while (!completions.empty() && std::get<0>(completions.top()) == t) {
      auto const [when, idx, gen] = completions.top();
      (void)when;
      completions.pop();
      if (st[idx].ph != phase::running || st[idx].gen != gen) continue;  // stale: resized or preempted since
      complete(idx, t);
      events = true;
    }
    while (next_arrival < n_jobs && w.jobs[order[next_arrival]].submit_time == t) {
      auto const idx = order[next_arrival++];
      pending.push_back(idx);
      st[idx].ph = phase::pending;
      demand += res.jobs[idx].gpu_milli;
      events = true;
    }
    if (events) next_round_at = std::min(next_round_at, cfg.on_event ? t : ceil_to(t, cfg.interval));
    if ((!pending.empty() || elastic_can_grow()) && next_round_at <= t) do_round(t);
    // Nothing to place: the next round waits for the next event.
    if (pending.empty() && !elastic_can_grow()) next_round_at = never;
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
  // Jobs still running at the end: their time so far counts (GPU time and
  // run time inside the window).
  for (auto idx : running_idx) close_segment(idx, res.t_end);
  for (std::size_t i = 0; i < n_jobs; ++i) {
    if (res.jobs[i].run_seconds > 0) res.jobs[i].slowdown = st[i].factor_time / static_cast<double>(res.jobs[i].run_seconds);
  }
  if (res.series.empty() || res.series.back().time != res.t_end) record(res.t_end);
  // GPU time is conserved: once every job is done every GPU milli is back.
  if (done == static_cast<std::int64_t>(n_jobs) && (allocated != 0 || demand != 0 || !in.running.empty()))
    throw std::logic_error("simulator: resources not conserved (allocated " + std::to_string(allocated) +
                           " milli, demand " + std::to_string(demand) + " milli after all jobs finished)");
  if (cfg.progress) std::fprintf(stderr, "\r%-90s\r", "");
  res.wall_seconds = seconds_since(wall0);
  return res;
}

}  // namespace placer::sim
