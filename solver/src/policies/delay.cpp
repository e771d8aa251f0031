// Delay scheduling with auto-tuned timers (network-sensitive DDL
// scheduling): a communication-heavy gang that cannot get a consolidated
// placement may wait, up to a per-class timer, for one before it accepts a
// spread placement. Owns delay_class, plan_delays and settle_delays
// (policies.hpp has the contract).
//
// Job class key: "gpus:<=G/sens:A-B", G the total GPU demand rounded up to
// a power of two (1, 2, 4, ...), A-B the network-sensitivity quarter
// ("0.00-0.25" ... "0.75-1.00"), e.g. "gpus:<=16/sens:0.75-1.00". Bounded:
// at most ~4 x log2(cluster GPUs) classes, so memory.timers cannot grow
// without bound.
//
// Timers. Worth of waiting for a job = what a spread placement would cost
// it: (slowdown_factor(sensitivity, spread across the domains of its
// consolidation level) - 1) x estimated_duration (network_model.hpp); a
// class's worth is the mean over this round's pending jobs of the class.
//   - first seen (or no sample yet): timer = min(delay_timer_max, worth / 4);
//   - samples: the wait (now - submit_time) of a job of the class when it is
//     placed after having been deferred, or placed once its timer ran out
//     (censored: the wait was at least the timer); smoothed by an EWMA
//     (weight 1/4 on the new sample, integer-rounded);
//   - timer = clamp(round(1.5 x observed_wait), 0, min(delay_timer_max,
//     worth)): it follows the waits with headroom, and never waits longer
//     than the slowdown it avoids would cost.
#include "host_fit.hpp"
#include "policies.hpp"

#include <placer/solver/network_model.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace placer::detail {

namespace {

/// Per topology level, the most replicas of one shape a single domain of
/// that level could hold on an empty cluster. Cached per shape: a round
/// has many jobs but few shapes, and this walks every node.
class domain_room {
 public:
  explicit domain_room(round_input const& in) : in_(in) {}

  /// The deepest level (> 0) with a domain that could hold all of j; 0 when
  /// only the root could (or none); -1 without topology.
  std::int32_t consolidation_level(job const& j) {
    auto const& c = in_.state;
    if (c.topo.empty() || c.topo.levels() < 2) return -1;
    auto const& d = j.per_replica;
    // A job with node constraints is a shape of its own (not cached).
    std::vector<std::int64_t> own;
    std::vector<std::int64_t> const* best = &own;
    if (j.constraints.empty()) {
      key const k{d.gpus, d.gpu_milli, d.cpu_milli, d.memory_mib, j.kind, j.allowed_gpu_models};
      auto it = cache_.find(k);
      if (it == cache_.end()) it = cache_.emplace(k, compute(j)).first;
      best = &it->second;
    } else {
      own = compute(j);
    }
    for (std::int32_t lv = c.topo.levels() - 1; lv >= 1; --lv) {
      if ((*best)[static_cast<std::size_t>(lv)] >= j.replicas) return lv;
    }
    return 0;
  }

 private:
  using key = std::tuple<std::int32_t, std::int32_t, std::int64_t, std::int64_t, job_kind, std::vector<std::string>>;

  std::vector<std::int64_t> compute(job const& j) const {
    auto const& c = in_.state;
    std::vector<std::int64_t> cap(c.topo.domains.size(), 0);
    for (auto const& nd : c.nodes) {
      if (nd.domain < 0 || !admits(nd, j, in_.pol.queue.loaning)) continue;
      auto const fit = fit_empty(nd, j.per_replica);
      for (auto dm = nd.domain; dm >= 0; dm = c.topo.domains[static_cast<std::size_t>(dm)].parent) {
        cap[static_cast<std::size_t>(dm)] += fit;
      }
    }
    std::vector<std::int64_t> best(static_cast<std::size_t>(c.topo.levels()), 0);
    for (std::size_t dm = 0; dm < cap.size(); ++dm) {
      auto const lv = c.topo.domains[dm].level;
      if (lv >= 0 && lv < c.topo.levels()) best[static_cast<std::size_t>(lv)] = std::max(best[static_cast<std::size_t>(lv)], cap[dm]);
    }
    return best;
  }

  round_input const& in_;
  std::map<key, std::vector<std::int64_t>> cache_;
};

/// What the policy knows about one pending job this round.
struct job_view {
  std::string cls;          ///< "" = not delay-scheduled
  std::int32_t level = -1;  ///< consolidation level; the policy acts only when > 0
  std::int64_t worth = 0;   ///< seconds a spread placement would cost it
  std::int64_t wait = 0;    ///< now - submit_time
  bool eligible = false;    ///< the policy may make it wait (class, level > 0, not already that strict)
};

std::vector<job_view> view_jobs(round_input const& in) {
  std::vector<job_view> views(in.pending.size());
  domain_room room(in);
  auto const levels = in.state.topo.levels();
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    job const jb = as_placed(in.pending[j], in);
    auto& v = views[j];
    v.wait = std::max<std::int64_t>(in.now - jb.submit_time, 0);
    v.cls = delay_class(jb, in);
    if (v.cls.empty()) continue;
    v.level = room.consolidation_level(jb);
    if (v.level <= 0) continue;
    // Spread over domains of the consolidation level crosses it and every
    // level below it (at best within one domain of the level above).
    spread s;
    s.nodes = std::max(jb.replicas, 2);
    s.levels_crossed = levels - v.level;
    double const extra = slowdown_factor(jb.network_sensitivity, s) - 1.0;
    v.worth = std::llround(extra * static_cast<double>(jb.estimated_duration));
    // A job that already requires this level (or a deeper one) waits by its
    // own constraint, not by this policy.
    v.eligible = !(jb.topo_mode == topology_mode::required && jb.topology_level >= v.level);
  }
  return views;
}

/// Per class, the mean worth over this round's eligible jobs.
std::map<std::string, std::int64_t> class_worth(std::vector<job_view> const& views) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> sum;
  for (auto const& v : views) {
    if (!v.eligible) continue;
    auto& s = sum[v.cls];
    s.first += v.worth;
    s.second += 1;
  }
  std::map<std::string, std::int64_t> worth;
  for (auto const& [cls, s] : sum) worth[cls] = s.first / s.second;
  return worth;
}

std::int64_t default_timer(std::int64_t worth, std::int64_t timer_max) {
  return std::clamp<std::int64_t>(worth / 4, 0, std::max<std::int64_t>(timer_max, 0));
}

/// The timer in force for a class this round (memory, capped by the bounds).
std::int64_t timer_in_force(delay_timer const& t, std::int64_t worth, std::int64_t timer_max) {
  return std::clamp<std::int64_t>(t.timer, 0, std::max<std::int64_t>(std::min(timer_max, worth), 0));
}

}  // namespace

std::string delay_class(job const& j, round_input const& in) {
  if (!j.gang || j.replicas <= 1) return "";
  if (j.network_sensitivity < in.pol.queue.sensitivity_threshold) return "";
  std::int64_t const gpus = (static_cast<std::int64_t>(j.replicas) * j.per_replica.gpu_milli_total() + milli_per_gpu - 1) /
                            milli_per_gpu;
  std::int64_t bucket = 1;
  while (bucket < gpus) bucket *= 2;
  static char const* const quarters[] = {"0.00-0.25", "0.25-0.50", "0.50-0.75", "0.75-1.00"};
  auto const q = std::clamp(static_cast<int>(std::floor(static_cast<double>(j.network_sensitivity) * 4.0)), 0, 3);
  return "gpus:<=" + std::to_string(bucket) + "/sens:" + quarters[q];
}

delay_plan plan_delays(work_state const& ws, queue_memory& memory) {
  auto const& in = ws.in;
  delay_plan plan;
  plan.overrides = in.pending;
  plan.deferred_candidate.assign(in.pending.size(), 0);
  auto const views = view_jobs(in);
  auto const worth = class_worth(views);
  auto const timer_max = in.pol.queue.delay_timer_max;
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    auto const& v = views[j];
    if (!v.eligible) continue;
    auto const w = worth.at(v.cls);
    auto [it, fresh] = memory.timers.try_emplace(v.cls);
    if (fresh) {
      it->second.job_class = v.cls;
      it->second.timer = default_timer(w, timer_max);
    }
    if (v.wait >= timer_in_force(it->second, w, timer_max)) continue;  // waited enough: spread is fine now
    auto& o = plan.overrides[j];
    o.topology_level = v.level;
    o.topo_mode = topology_mode::required;
    plan.deferred_candidate[j] = 1;
  }
  return plan;
}

void settle_delays(work_state const& ws, delay_plan const& plan, queue_memory& memory, round_result& out) {
  auto const& in = ws.in;
  auto const now = in.now;
  auto const timer_max = in.pol.queue.delay_timer_max;
  auto const views = view_jobs(in);
  auto const worth = class_worth(views);
  std::vector<char> placed(in.pending.size(), 0);
  for (auto const& p : out.placements) {
    if (p.job >= 0 && static_cast<std::size_t>(p.job) < placed.size()) placed[static_cast<std::size_t>(p.job)] = 1;
  }

  // 1. Candidates still unplaced that could start spread wait by choice:
  //    Deferred. A reason that is not about room (no feasible node,
  //    invalid, out of time) stays, and so does a backfill reservation (it
  //    says more).
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    if (j >= plan.deferred_candidate.size() || plan.deferred_candidate[j] == 0 || placed[j] != 0) continue;
    auto const jj = static_cast<std::int32_t>(j);
    auto it = std::find_if(out.unplaced_jobs.begin(), out.unplaced_jobs.end(), [&](unplaced const& u) { return u.job == jj; });
    if (it == out.unplaced_jobs.end()) it = out.unplaced_jobs.insert(out.unplaced_jobs.end(), unplaced{jj, unplaced_reason::none, ""});
    auto const r = it->reason;
    bool const waits = r == unplaced_reason::none || r == unplaced_reason::topology_unsatisfiable ||
                       r == unplaced_reason::gang_incomplete || r == unplaced_reason::insufficient_capacity;
    if (waits && plan.by_choice[j] == 0) {
      // No room even spread: it waits for capacity, and says so as the core
      // does without the rewrite.
      auto const s = std::find_if(plan.spread_reasons.begin(), plan.spread_reasons.end(),
                                  [&](unplaced const& u) { return u.job == jj; });
      if (s != plan.spread_reasons.end()) *it = *s;
    } else if (waits) {
      auto const& v = views[j];
      auto const t = memory.timers.count(v.cls) != 0
                         ? timer_in_force(memory.timers.at(v.cls), worth.count(v.cls) != 0 ? worth.at(v.cls) : 0, timer_max)
                         : 0;
      auto const level = plan.overrides[j].topology_level;
      std::string const where = level >= 0 && level < in.state.topo.levels() ? in.state.topo.level_names[static_cast<std::size_t>(level)]
                                                                            : "domain";
      it->reason = unplaced_reason::deferred;
      it->detail = "waiting for a consolidated placement on one " + where + " (waited " + std::to_string(v.wait) +
                   "s of " + std::to_string(t) + "s)";
    }
    if (waits || r == unplaced_reason::reserved) memory.deferred_since.try_emplace(in.pending[j].name, now);
  }

  // 2. Samples, in pending order: waits of jobs placed after a deferral, and
  //    of jobs placed once their timer ran out (censored: at least the timer).
  //    Computed against the timers in force this round, before re-tuning.
  std::map<std::string, std::vector<std::int64_t>> samples;
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    if (placed[j] == 0) continue;
    auto const& v = views[j];
    auto const ds = memory.deferred_since.find(in.pending[j].name);
    bool sample = ds != memory.deferred_since.end();
    if (!sample && v.eligible && plan.deferred_candidate[j] == 0) {
      auto const t = memory.timers.find(v.cls);
      sample = t != memory.timers.end() && v.wait >= timer_in_force(t->second, worth.at(v.cls), timer_max);
    }
    if (ds != memory.deferred_since.end()) memory.deferred_since.erase(ds);
    if (sample && !v.cls.empty()) samples[v.cls].push_back(v.wait);
  }
  for (auto const& [cls, waits] : samples) {
    auto [it, fresh] = memory.timers.try_emplace(cls);
    auto& t = it->second;
    t.job_class = cls;
    for (auto w : waits) {
      t.observed_wait = t.samples == 0 ? w : (3 * t.observed_wait + w + 2) / 4;
      t.samples += 1;
    }
  }

  // 3. Re-tune. Classes with jobs this round get the bound of this round's
  //    worth; the others keep their timer (capped by the current maximum).
  for (auto& [cls, t] : memory.timers) {
    auto const w = worth.find(cls);
    if (w == worth.end()) {
      t.timer = std::clamp<std::int64_t>(t.timer, 0, std::max<std::int64_t>(timer_max, 0));
    } else if (t.samples == 0) {
      t.timer = default_timer(w->second, timer_max);
    } else {
      auto const bound = std::max<std::int64_t>(std::min(timer_max, w->second), 0);
      t.timer = std::clamp<std::int64_t>((3 * t.observed_wait + 1) / 2, 0, bound);
    }
  }

  // 4. Forget jobs that left the queue (placed ones are gone already), so
  //    memory stays bounded by the queue.
  std::set<std::string> pending_names;
  for (auto const& jb : in.pending) pending_names.insert(jb.name);
  for (auto it = memory.deferred_since.begin(); it != memory.deferred_since.end();) {
    it = pending_names.count(it->first) != 0 ? std::next(it) : memory.deferred_since.erase(it);
  }

  out.delay_timers.clear();
  for (auto const& [cls, t] : memory.timers) out.delay_timers.push_back(t);
}

}  // namespace placer::detail
