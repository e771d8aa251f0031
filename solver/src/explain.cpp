// Explanations for unplaced jobs (solver.hpp explain_unplaced, describe).
#include <placer/solver/constraints.hpp>
#include <placer/solver/solver.hpp>

#include "policies/host_fit.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>

namespace placer {

namespace {

constexpr std::size_t n_exclusions = 10;

bool about_room(unplaced_reason r) {
  switch (r) {
    case unplaced_reason::no_feasible_node:
    case unplaced_reason::insufficient_capacity:
    case unplaced_reason::gang_incomplete:
    case unplaced_reason::topology_unsatisfiable:
    case unplaced_reason::reserved: return true;
    default: return false;
  }
}

/// The first check node nd fails for one replica of jb at the round's
/// start; when it passes all, `fits` is set and `taken` returned (the
/// caller tells taken from still available). *which gets an excluding
/// taint. `exclude()` is constraints.hpp exclusion(nd, jb.constraints,
/// which), or the same read from a memo.
template <class Exclude>
node_exclusion first_failure(node const& nd, job const& jb, bool loaning, bool& fits, Exclude&& exclude) {
  fits = false;
  if (!nd.healthy) return node_exclusion::unhealthy;
  if (!detail::pool_admits(nd, jb, loaning)) return node_exclusion::pool;
  if (!detail::model_admits(nd, jb)) return node_exclusion::gpu_model;
  auto const& d = jb.per_replica;
  switch (exclude()) {
    case constraint_miss::selector:
    case constraint_miss::affinity: return node_exclusion::affinity;
    case constraint_miss::taint: return node_exclusion::taint;
    case constraint_miss::none: break;
  }
  if (d.cpu_milli > nd.cpu_milli_free) return node_exclusion::cpu;
  if (d.memory_mib > nd.memory_mib_free) return node_exclusion::memory;
  if (d.gpus > 0 && detail::fit_free(nd, d) < 1) return d.fractional() ? node_exclusion::gpu_share : node_exclusion::gpus;
  fits = true;
  return node_exclusion::taken;
}

/// One shape's explanation, shared by the unplaced jobs of that shape.
struct shape_facts {
  job const* shape = nullptr;
  std::array<std::int32_t, n_exclusions> count{};
  std::map<std::string, std::int32_t> taints;  ///< excluding taints, "key=value:Effect"
  std::int64_t fit = 0;                         ///< replicas over all nodes at the round's start
  std::int32_t best_domain = -1;
  std::int64_t best_fit = 0;
  std::int32_t outbid_priority = INT_MIN;
};

bool same_shape(job const& a, job const& b) {
  return a.per_replica == b.per_replica && a.kind == b.kind && a.allowed_gpu_models == b.allowed_gpu_models &&
         a.constraints == b.constraints && a.distinct_nodes == b.distinct_nodes &&
         (a.topo_mode == topology_mode::required) == (b.topo_mode == topology_mode::required) &&
         (a.topo_mode != topology_mode::required || a.topology_level == b.topology_level);
}

char const* effect_name(taint_effect e) {
  switch (e) {
    case taint_effect::no_schedule: return "NoSchedule";
    case taint_effect::prefer_no_schedule: return "PreferNoSchedule";
    case taint_effect::no_execute: return "NoExecute";
  }
  return "?";
}

/// Counts `nodes` more nodes excluded by taint t, by its kube-scheduler name.
void add_taint(shape_facts& f, taint const& t, std::int32_t nodes) {
  f.taints[t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + effect_name(t.effect)] += nodes;
}

std::string thousands(std::int64_t v) {
  std::string s = std::to_string(v);
  for (auto i = static_cast<std::ptrdiff_t>(s.size()) - 3; i > (v < 0 ? 1 : 0); i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

}  // namespace

char const* to_string(node_exclusion e) {
  switch (e) {
    case node_exclusion::unhealthy: return "Unhealthy";
    case node_exclusion::pool: return "Pool";
    case node_exclusion::gpu_model: return "GpuModel";
    case node_exclusion::affinity: return "Affinity";
    case node_exclusion::taint: return "Taint";
    case node_exclusion::cpu: return "Cpu";
    case node_exclusion::memory: return "Memory";
    case node_exclusion::gpus: return "Gpus";
    case node_exclusion::gpu_share: return "GpuShare";
    case node_exclusion::taken: return "Taken";
  }
  return "Unknown";
}

void describe(explanation const& e, std::string& s) {
  if (e.nodes == 0) return;
  std::int32_t excluded = 0;
  for (auto const& x : e.excluded) excluded += x.nodes;
  s.reserve(s.size() + 160 + 64 * e.excluded.size());
  s += thousands(e.nodes - excluded);
  s += '/';
  s += thousands(e.nodes);
  s += " nodes are available";
  char sep = ':';
  for (auto const& x : e.excluded) {
    s += sep;
    s += ' ';
    sep = ',';
    s += thousands(x.nodes);
    s += ' ';
    switch (x.reason) {
      case node_exclusion::unhealthy: s += "node(s) were unhealthy"; break;
      case node_exclusion::pool: s += "node(s) were in another pool"; break;
      case node_exclusion::gpu_model: s += "node(s) had no allowed GPU model"; break;
      case node_exclusion::affinity: s += "node(s) didn't match Pod's node affinity/selector"; break;
      case node_exclusion::taint:
        s += "node(s) had untolerated taint {";
        s += x.detail;
        s += '}';
        break;
      case node_exclusion::cpu: s += "Insufficient cpu"; break;
      case node_exclusion::memory: s += "Insufficient memory"; break;
      case node_exclusion::gpus: s += "Insufficient nvidia.com/gpu"; break;
      case node_exclusion::gpu_share: s += "node(s) had no GPU with a large enough free share"; break;
      case node_exclusion::taken:
        s += "node(s) were taken by this round's placements";
        if (e.outbid) {
          s += " (outbid by priority ";
          s += std::to_string(e.outbid_priority);
          s += ')';
        }
        break;
    }
  }
  s += '.';
  if (e.replicas_required > 1) {
    s += " Resources were found for ";
    s += thousands(e.replicas_fit);
    s += " replica(s) while ";
    s += thousands(e.replicas_required);
    s += " are required";
    if (!e.best_domain.empty()) {
      s += "; the best domain, '";
      s += e.best_domain;
      s += "', holds ";
      s += thousands(e.best_domain_fit);
    }
    s += '.';
  }
}

std::string describe(explanation const& e) {
  std::string s;
  describe(e, s);
  return s;
}

struct explain_scratch::shapes {
  std::vector<shape_facts> facts;
};

explain_scratch::explain_scratch() : shapes_(std::make_unique<shapes>()) {}
explain_scratch::~explain_scratch() = default;

void explain_unplaced(round_input const& in, round_result& out, explain_scratch* scratch) {
  explain_scratch own;
  explain_scratch& x = scratch != nullptr ? *scratch : own;
  auto const& nodes = in.state.nodes;
  auto const n_nodes = static_cast<std::int32_t>(nodes.size());
  auto& placed_priority = x.placed_priority;  // per node: the highest priority placed there this round
  auto& paths = x.paths;                      // node_domain_paths, when a required topology needs it
  auto& facts = x.shapes_->facts;
  placed_priority.clear();
  paths.clear();
  facts.clear();
  bool const loaning = in.pol.queue.loaning;
  auto const levels = std::max(in.state.topo.levels(), 1);
  for (auto& u : out.unplaced_jobs) {
    if (!about_room(u.reason) || u.job < 0 || static_cast<std::size_t>(u.job) >= in.pending.size()) continue;
    job const& jb = in.pending[static_cast<std::size_t>(u.job)];
    auto it = std::find_if(facts.begin(), facts.end(), [&](shape_facts const& f) { return same_shape(*f.shape, jb); });
    if (it == facts.end()) {
      if (placed_priority.empty()) {
        placed_priority.assign(static_cast<std::size_t>(n_nodes), INT_MIN);
        for (auto const& p : out.placements) {
          auto const prio = in.pending[static_cast<std::size_t>(p.job)].priority;
          for (auto const& rp : p.replicas) {
            auto& x = placed_priority[static_cast<std::size_t>(rp.node)];
            x = std::max(x, prio);
          }
        }
      }
      bool const required = jb.topo_mode == topology_mode::required && jb.topology_level >= 0;
      if (required && paths.empty()) paths = node_domain_paths(in.state);
      auto& per_domain = x.per_domain;
      per_domain.assign(required ? in.state.topo.domains.size() : 0, 0);
      shape_facts f;
      f.shape = &jb;
      // Nodes of one constraint group (same labels on the round's keys, same
      // taints) answer the shape's constraints alike: one evaluation a group.
      bool const memo = x.node_group != nullptr && !jb.constraints.empty() &&
                        x.node_group->size() == static_cast<std::size_t>(n_nodes);
      if (memo) {
        x.group_miss.assign(static_cast<std::size_t>(x.n_groups), -1);
        x.group_taint.assign(static_cast<std::size_t>(x.n_groups), nullptr);
        x.group_tainted.assign(static_cast<std::size_t>(x.n_groups), 0);
      }
      for (std::int32_t n = 0; n < n_nodes; ++n) {
        auto const& nd = nodes[static_cast<std::size_t>(n)];
        taint const* which = nullptr;
        bool fits = false;
        auto const why = first_failure(nd, jb, loaning, fits, [&] {
          if (!memo) return exclusion(nd, jb.constraints, &which);
          auto const g = static_cast<std::size_t>((*x.node_group)[static_cast<std::size_t>(n)]);
          if (x.group_miss[g] < 0) {
            x.group_miss[g] = static_cast<std::int8_t>(exclusion(nd, jb.constraints, &x.group_taint[g]));
          }
          which = x.group_taint[g];
          return static_cast<constraint_miss>(x.group_miss[g]);
        });
        if (fits) {
          auto const k = jb.distinct_nodes ? std::min<std::int64_t>(detail::fit_free(nd, jb.per_replica), 1)
                                           : detail::fit_free(nd, jb.per_replica);
          f.fit += k;
          if (required) {
            auto const d = paths[static_cast<std::size_t>(n) * static_cast<std::size_t>(levels) +
                                 static_cast<std::size_t>(jb.topology_level)];
            if (d >= 0) per_domain[static_cast<std::size_t>(d)] += k;
          }
          auto const prio = placed_priority[static_cast<std::size_t>(n)];
          if (prio == INT_MIN) continue;  // still available
          f.outbid_priority = std::max(f.outbid_priority, prio);
        }
        f.count[static_cast<std::size_t>(why)] += 1;
        if (why == node_exclusion::taint && which != nullptr) {
          if (memo) {
            x.group_tainted[static_cast<std::size_t>((*x.node_group)[static_cast<std::size_t>(n)])] += 1;
          } else {
            add_taint(f, *which, 1);
          }
        }
      }
      if (memo) {  // a group's excluding taint named once
        for (std::size_t g = 0; g < x.group_tainted.size(); ++g) {
          if (x.group_tainted[g] > 0) add_taint(f, *x.group_taint[g], x.group_tainted[g]);
        }
      }
      for (std::size_t d = 0; d < per_domain.size(); ++d) {
        if (per_domain[d] > f.best_fit) {
          f.best_fit = per_domain[d];
          f.best_domain = static_cast<std::int32_t>(d);
        }
      }
      facts.push_back(std::move(f));
      it = facts.end() - 1;
    }
    auto& e = u.why;
    e = {};
    e.nodes = n_nodes;
    for (std::size_t k = 0; k < n_exclusions; ++k) {
      auto const reason = static_cast<node_exclusion>(k);
      if (reason == node_exclusion::taint) {
        for (auto const& [t, c] : it->taints) e.excluded.push_back({reason, c, t});
      } else if (it->count[k] > 0) {
        e.excluded.push_back({reason, it->count[k], {}});
      }
    }
    std::stable_sort(e.excluded.begin(), e.excluded.end(), [](auto const& a, auto const& b) { return a.nodes > b.nodes; });
    e.replicas_fit = static_cast<std::int32_t>(std::min<std::int64_t>(it->fit, INT32_MAX));
    e.replicas_required = in.pol.queue.elastic ? jb.start_replicas() : jb.replicas;
    if (it->best_domain >= 0) {
      e.best_domain = in.state.topo.domains[static_cast<std::size_t>(it->best_domain)].name;
      e.best_domain_fit = static_cast<std::int32_t>(std::min<std::int64_t>(it->best_fit, INT32_MAX));
    }
    e.outbid = it->outbid_priority != INT_MIN;
    e.outbid_priority = e.outbid ? it->outbid_priority : 0;
    if (!u.detail.empty()) u.detail += ". ";
    describe(e, u.detail);
  }
}

}  // namespace placer
