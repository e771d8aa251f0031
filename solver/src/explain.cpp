// Explanations for unplaced jobs (solver.hpp explain_unplaced, describe).
#include <placer/kernels/round_arrays.hpp>
#include <placer/solver/constraints.hpp>
#include <placer/solver/solver.hpp>

#include "policies/host_fit.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

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

/// What node nd has room for: the first capacity check one replica of d
/// fails (`taken` when it passes all) and the replicas it holds (at most 1
/// for a job on distinct nodes).
struct room {
  node_exclusion why = node_exclusion::taken;
  std::int64_t fit = 0;
};
room room_for(node const& nd, demand const& d, bool distinct_nodes) {
  if (d.cpu_milli > nd.cpu_milli_free) return {node_exclusion::cpu, 0};
  if (d.memory_mib > nd.memory_mib_free) return {node_exclusion::memory, 0};
  std::int64_t const fit = detail::fit_free(nd, d);
  if (d.gpus > 0 && fit < 1) return {d.fractional() ? node_exclusion::gpu_share : node_exclusion::gpus, 0};
  return {node_exclusion::taken, distinct_nodes ? std::min<std::int64_t>(fit, 1) : fit};
}

/// The first check node nd fails for one replica of jb at the round's
/// start, `taken` when it passes all (the caller tells taken from still
/// available). *which gets an excluding taint. `exclude()` is
/// constraints.hpp exclusion(nd, jb.constraints, which), or the same read
/// from a memo; `capacity()` is room_for(nd, ...), or the same read from a
/// memo.
template <class Exclude, class Capacity>
node_exclusion first_failure(node const& nd, job const& jb, bool loaning, Exclude&& exclude, Capacity&& capacity) {
  if (!nd.healthy) return node_exclusion::unhealthy;
  if (!detail::pool_admits(nd, jb, loaning)) return node_exclusion::pool;
  if (!detail::model_admits(nd, jb)) return node_exclusion::gpu_model;
  switch (exclude()) {
    case constraint_miss::selector:
    case constraint_miss::affinity: return node_exclusion::affinity;
    case constraint_miss::taint: return node_exclusion::taint;
    case constraint_miss::none: break;
  }
  return capacity().why;
}

/// A round explains at most this many cells: a shape's nodes, and its
/// domains where it requires a topology level. Unbounded, a round of
/// 100,000 unplaced jobs of as many shapes on 100,000 nodes would buy 10^10
/// checks after its deadline, and its per-domain sums as many bytes. The
/// benchmark rounds are far below it (100k: 3 shapes on 12,800 nodes, 38,400
/// cells; 100k-k8s: 10 shapes).
constexpr std::int64_t max_explain_cells = std::int64_t{1} << 24;

/// One shape's explanation, shared by the unplaced jobs of that shape.
struct shape_facts {
  job const* shape = nullptr;
  std::array<std::int32_t, n_exclusions> count{};
  std::map<std::string, std::int32_t> taints;  ///< excluding taints, "key=value:Effect"
  std::int64_t fit = 0;                         ///< replicas over all nodes at the round's start
  std::int32_t best_domain = -1;
  std::int64_t best_fit = 0;
  std::int64_t need = 0;         ///< the most replicas a job of this shape needs at once
  /// Replicas the nodes that admit it could hold empty, and the most one
  /// required domain could, counted until they reach `need` (`enough`):
  /// exact for a shape that can never run.
  std::int64_t fit_empty = 0;
  std::int64_t best_fit_empty = 0;
  bool enough = false;
  std::int32_t outbid_priority = INT_MIN;
  std::int32_t domain_row = -1;  ///< its row of the per-domain sums (a required topology), -1 none
};

/// The replicas a job needs at once.
std::int32_t need_of(round_input const& in, job const& jb) {
  return in.pol.queue.elastic ? jb.start_replicas() : jb.replicas;
}

bool same_shape(job const& a, job const& b) {
  return a.per_replica == b.per_replica && a.kind == b.kind && a.allowed_gpu_models == b.allowed_gpu_models &&
         a.constraints == b.constraints && a.distinct_nodes == b.distinct_nodes &&
         (a.topo_mode == topology_mode::required) == (b.topo_mode == topology_mode::required) &&
         (a.topo_mode != topology_mode::required || a.topology_level == b.topology_level);
}

/// A hash of what same_shape compares: equal shapes hash alike.
std::uint64_t shape_hash(job const& jb) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  auto text = [&](std::string const& t) { mix(std::hash<std::string>{}(t)); };
  auto term = [&](selector_term const& t) {
    mix(t.match.size());
    for (auto const& e : t.match) {
      text(e.key);
      mix(static_cast<std::uint64_t>(e.op));
      for (auto const& v : e.values) text(v);
    }
  };
  auto const& d = jb.per_replica;
  for (std::int64_t v : {std::int64_t{d.gpus}, std::int64_t{d.gpu_milli}, d.cpu_milli, d.memory_mib,
                         std::int64_t{static_cast<std::int8_t>(jb.kind)}, std::int64_t{jb.distinct_nodes}}) {
    mix(static_cast<std::uint64_t>(v));
  }
  bool const required = jb.topo_mode == topology_mode::required;
  mix(required ? static_cast<std::uint64_t>(jb.topology_level) + 2 : 0);
  mix(jb.allowed_gpu_models.size());
  for (auto const& m : jb.allowed_gpu_models) text(m);
  auto const& c = jb.constraints;
  mix(c.node_selector.size());
  for (auto const& t : c.node_selector) text(t);
  mix(c.required.size());
  for (auto const& t : c.required) term(t);
  mix(c.preferred.size());
  for (auto const& p : c.preferred) {
    mix(static_cast<std::uint64_t>(p.weight));
    term(p.term);
  }
  mix(c.tolerations.size());
  for (auto const& t : c.tolerations) {
    text(t.key);
    text(t.value);
    mix(static_cast<std::uint64_t>(t.op) << 8 | static_cast<std::uint8_t>(t.effect));
  }
  return h;
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
  if (e.never && e.replicas_fit_empty == 0) {
    s += "It can never run on this cluster as it is: no node could hold one replica even empty. ";
  } else if (e.never) {
    s += "It can never run on this cluster as it is: it needs ";
    s += thousands(e.replicas_required);
    s += " replicas at once, and ";
    if (e.replicas_fit_empty < e.replicas_required) {
      s += "the nodes that admit it could hold at most ";
      s += thousands(e.replicas_fit_empty);
    } else {
      s += "no domain of its required level could hold more than ";
      s += thousands(e.best_domain_fit_empty);
    }
    s += " even empty. ";
  }
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

/// A shape's answer on the first node of a set of score twins, for the
/// others (round_arrays::score_as): the first check it fails, the replicas
/// it holds when it passes them all, and those it would hold empty (-1:
/// not counted there; fit_with caps both at 2^20).
struct twin_answer {
  std::int32_t fit = 0;
  std::int32_t empty = -1;
  node_exclusion why = node_exclusion::taken;
};

/// The most twin answers a round keeps (12 bytes each): past it every
/// node is evaluated on its own, as without twins.
constexpr std::size_t max_twin_answers = std::size_t{1} << 21;

struct explain_scratch::shapes {
  std::vector<shape_facts> facts;
  std::vector<room> rooms;  ///< per shape, on the node at hand
  std::vector<twin_answer> answers;  ///< per (set of twins, shape)
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
  // The shapes to explain, each unplaced job's among them (fact_of), in
  // job order within max_explain_cells (-2: past it).
  auto const n_domains = in.state.topo.domains.size();
  std::int64_t cells = 0;
  std::int32_t required_shapes = 0;
  auto& fact_of = x.fact_of;
  fact_of.assign(out.unplaced_jobs.size(), -1);
  // Shapes found by their hash (open addressing to the newest shape of a
  // hash, then the older ones of it): a job is compared with the shapes
  // of its own hash alone, not every shape (100,000 jobs of as many shapes
  // would be 5 x 10^9 comparisons).
  std::size_t table_size = 16;
  while (table_size < 2 * out.unplaced_jobs.size()) table_size *= 2;
  auto& by_hash = x.shape_table;
  by_hash.assign(table_size, {0, -1});
  auto& older = x.older_shape;
  older.clear();
  for (std::size_t k = 0; k < out.unplaced_jobs.size(); ++k) {
    auto const& u = out.unplaced_jobs[k];
    if (!about_room(u.reason) || u.job < 0 || static_cast<std::size_t>(u.job) >= in.pending.size()) continue;
    job const& jb = in.pending[static_cast<std::size_t>(u.job)];
    std::uint64_t const h = shape_hash(jb);
    auto slot = static_cast<std::size_t>(h ^ (h >> 31)) & (table_size - 1);
    while (by_hash[slot].second >= 0 && by_hash[slot].first != h) slot = (slot + 1) & (table_size - 1);
    auto it = facts.end();
    for (auto i = by_hash[slot].second; i >= 0; i = older[static_cast<std::size_t>(i)]) {
      if (same_shape(*facts[static_cast<std::size_t>(i)].shape, jb)) {
        it = facts.begin() + i;
        break;
      }
    }
    if (it == facts.end()) {
      bool const required = jb.topo_mode == topology_mode::required && jb.topology_level >= 0;
      std::int64_t const more = n_nodes + (required ? static_cast<std::int64_t>(n_domains) : 0);
      if (cells + more > max_explain_cells) {
        fact_of[k] = -2;
        continue;
      }
      cells += more;
      older.push_back(by_hash[slot].second);
      by_hash[slot] = {h, static_cast<std::int32_t>(facts.size())};
      facts.push_back({});
      facts.back().shape = &jb;
      if (required) facts.back().domain_row = required_shapes++;
      it = facts.end() - 1;
    }
    it->need = std::max<std::int64_t>(it->need, need_of(in, jb));
    fact_of[k] = static_cast<std::int32_t>(it - facts.begin());
  }
  if (facts.empty()) return;
  placed_priority.assign(static_cast<std::size_t>(n_nodes), INT_MIN);
  for (auto const& p : out.placements) {
    auto const prio = in.pending[static_cast<std::size_t>(p.job)].priority;
    for (auto const& rp : p.replicas) {
      auto& top = placed_priority[static_cast<std::size_t>(rp.node)];
      top = std::max(top, prio);
    }
  }
  // One pass over the nodes for every shape: a node's fields are read
  // once, not once a shape (ten shapes at 100k-k8s). Nodes of one
  // constraint group (same labels on the round's keys, same taints) answer
  // a shape's constraints alike: one evaluation a (shape, group).
  auto const n_facts = facts.size();
  // The round's arrays, when the caller has them for this cluster.
  kernels::round_arrays const* const a = x.round != nullptr && x.round->n_nodes() == n_nodes ? x.round : nullptr;
  bool const grouped = a != nullptr && a->node_group.size() == static_cast<std::size_t>(n_nodes);
  auto const n_groups = grouped ? static_cast<std::size_t>(a->n_constraint_groups) : 0;
  x.group_miss.assign(n_facts * n_groups, -1);
  x.group_taint.assign(n_facts * n_groups, nullptr);
  x.group_tainted.assign(n_facts * n_groups, 0);
  auto& per_domain = x.per_domain;  // per (shape with a required topology, domain)
  per_domain.assign(static_cast<std::size_t>(required_shapes) * n_domains, 0);
  auto& per_domain_empty = x.per_domain_empty;  // the same, the nodes empty
  per_domain_empty.assign(static_cast<std::size_t>(required_shapes) * n_domains, 0);
  bool any_required = false;
  for (auto const& f : facts) any_required |= f.shape->topo_mode == topology_mode::required && f.shape->topology_level >= 0;
  // The paths the caller has (the assignment's, of the same cluster), else
  // found here.
  std::int32_t const* path = nullptr;
  if (any_required) {
    if (x.node_paths != nullptr && x.node_paths->size() == static_cast<std::size_t>(n_nodes) * static_cast<std::size_t>(levels)) {
      path = x.node_paths->data();
    } else {
      node_domain_paths(in.state, paths);
      path = paths.data();
    }
  }
  // Shapes that differ only in what they admit share their room on a node
  // (same_room: the first shape with the same demand), found by sorting
  // the shapes by demand (not each against every one before it).
  auto& same_room = x.same_room;
  same_room.resize(n_facts);
  for (std::size_t i = 0; i < n_facts; ++i) same_room[i] = static_cast<std::int32_t>(i);
  auto const room_key = [&](std::int32_t i) {
    auto const& jb = *facts[static_cast<std::size_t>(i)].shape;
    auto const& d = jb.per_replica;
    return std::tuple(d.gpus, d.gpu_milli, d.cpu_milli, d.memory_mib, jb.distinct_nodes, i);
  };
  auto& by_room = x.by_room;
  by_room = same_room;
  std::sort(by_room.begin(), by_room.end(), [&](std::int32_t a, std::int32_t b) { return room_key(a) < room_key(b); });
  for (std::size_t k = 1; k < n_facts; ++k) {
    auto const a = room_key(by_room[k - 1]), b = room_key(by_room[k]);
    if (std::get<0>(a) == std::get<0>(b) && std::get<1>(a) == std::get<1>(b) && std::get<2>(a) == std::get<2>(b) &&
        std::get<3>(a) == std::get<3>(b) && std::get<4>(a) == std::get<4>(b)) {
      same_room[static_cast<std::size_t>(by_room[k])] = same_room[static_cast<std::size_t>(by_room[k - 1])];
    }
  }
  auto& rooms = x.shapes_->rooms;  // fit < 0: not yet on this node
  rooms.resize(n_facts);
  // Nodes that are score twins (round_arrays::score_as: equal in every
  // field of the node a check here reads, the multiset of their GPUs'
  // free values and their constraint group included, but their memory
  // capacity) answer every shape alike: the twins' first node keeps its
  // answers (a slot of `answers` where it has twins) and the others read
  // them, in node order as before (fit_empty's count stops at the node
  // where it reaches the need), from arrays read in order rather than
  // each node's record. 100k: 12,800 nodes, 732 sets of twins.
  auto& answers = x.shapes_->answers;
  auto& slot_of = x.twin_slot;  // per node: its answers' slot, -1 none
  std::int32_t const* twin =
      a != nullptr && a->score_as.size() == static_cast<std::size_t>(n_nodes) ? a->score_as.data() : nullptr;
  if (twin != nullptr) {
    slot_of.assign(static_cast<std::size_t>(n_nodes), -1);
    std::size_t slots = 0;
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      auto& s = slot_of[static_cast<std::size_t>(twin[n])];
      if (twin[n] != n && s < 0) s = static_cast<std::int32_t>(slots++);
    }
    if (slots * n_facts <= max_twin_answers) {
      answers.assign(slots * n_facts, {});
    } else {
      twin = nullptr;
    }
  }
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    auto const& nd = nodes[static_cast<std::size_t>(n)];
    auto const prio = placed_priority[static_cast<std::size_t>(n)];
    std::size_t const g = grouped ? static_cast<std::size_t>(a->node_group[static_cast<std::size_t>(n)]) : 0;
    // This node's twins' answers: read (a later twin), written (the
    // first one), or neither (no twins).
    twin_answer* kept = nullptr;
    bool read = false;
    if (twin != nullptr) {
      auto const slot = slot_of[static_cast<std::size_t>(twin[n])];
      if (slot >= 0) {
        kept = answers.data() + static_cast<std::size_t>(slot) * n_facts;
        read = twin[n] != n;
      }
    }
    if (!read) {
      for (auto& r : rooms) r.fit = -1;
    }
    for (std::size_t i = 0; i < n_facts; ++i) {
      auto& f = facts[i];
      job const& jb = *f.shape;
      bool const memo = grouped && !jb.constraints.empty();
      std::size_t const at = i * n_groups + g;
      taint const* which = nullptr;
      auto& r = rooms[static_cast<std::size_t>(same_room[i])];
      node_exclusion why{};
      std::int64_t fit = 0;
      if (read) {
        why = kept[i].why;
        fit = kept[i].fit;
        // The excluding taint: its group's, or the node's own (the first
        // twin has one alike, in the same group).
        if (why == node_exclusion::taint) {
          if (memo) {
            which = x.group_taint[at];
          } else {
            exclusion(nd, jb.constraints, &which);
          }
        }
      } else {
        why = first_failure(
            nd, jb, loaning,
            [&] {
              if (!memo) return exclusion(nd, jb.constraints, &which);
              if (x.group_miss[at] < 0) {
                x.group_miss[at] = static_cast<std::int8_t>(exclusion(nd, jb.constraints, &x.group_taint[at]));
              }
              which = x.group_taint[at];
              return static_cast<constraint_miss>(x.group_miss[at]);
            },
            [&]() -> room const& {
              if (r.fit < 0) r = room_for(nd, jb.per_replica, jb.distinct_nodes);
              return r;
            });
        fit = why == node_exclusion::taken ? r.fit : 0;
        if (kept != nullptr) kept[i] = {static_cast<std::int32_t>(fit), -1, why};
      }
      // The node's domain at the shape's required level (-1: none required).
      bool const required = jb.topo_mode == topology_mode::required && jb.topology_level >= 0;
      std::int32_t const d = required ? path[static_cast<std::size_t>(n) * static_cast<std::size_t>(levels) +
                                             static_cast<std::size_t>(jb.topology_level)]
                                      : -1;
      // What the node could ever give the job: its room were it empty, when
      // only its state (health, what is free) stands in the way (an
      // unhealthy node counts: it may come back).
      bool const admits = why != node_exclusion::pool && why != node_exclusion::gpu_model &&
                          why != node_exclusion::affinity && why != node_exclusion::taint;
      if (admits && !f.enough) {
        // Memory capacity is the twins' one difference that counts here.
        bool const alike = read && kept[i].empty >= 0 &&
                           nodes[static_cast<std::size_t>(twin[n])].memory_mib_capacity == nd.memory_mib_capacity;
        std::int64_t empty = alike ? kept[i].empty : detail::fit_empty(nd, jb.per_replica);
        if (jb.distinct_nodes) empty = std::min<std::int64_t>(empty, 1);
        if (kept != nullptr && !read) kept[i].empty = static_cast<std::int32_t>(empty);
        f.fit_empty += empty;
        if (d >= 0) {
          auto& sum = per_domain_empty[static_cast<std::size_t>(f.domain_row) * n_domains + static_cast<std::size_t>(d)];
          sum += empty;
          f.best_fit_empty = std::max(f.best_fit_empty, sum);
        }
        f.enough = f.fit_empty >= f.need && (!required || f.best_fit_empty >= f.need);
      }
      if (why == node_exclusion::taken) {
        f.fit += fit;
        if (d >= 0) per_domain[static_cast<std::size_t>(f.domain_row) * n_domains + static_cast<std::size_t>(d)] += fit;
        if (prio == INT_MIN) continue;  // still available
        f.outbid_priority = std::max(f.outbid_priority, prio);
      }
      f.count[static_cast<std::size_t>(why)] += 1;
      if (why == node_exclusion::taint && which != nullptr) {
        if (memo) {
          x.group_tainted[at] += 1;
        } else {
          add_taint(f, *which, 1);
        }
      }
    }
  }
  for (std::size_t i = 0; i < n_facts; ++i) {
    auto& f = facts[i];
    for (std::size_t at = i * n_groups; at < (i + 1) * n_groups; ++at) {  // a group's excluding taint named once
      if (x.group_tainted[at] > 0) add_taint(f, *x.group_taint[at], x.group_tainted[at]);
    }
    if (f.domain_row < 0) continue;
    auto const* sums = per_domain.data() + static_cast<std::size_t>(f.domain_row) * n_domains;
    for (std::size_t d = 0; d < n_domains; ++d) {
      if (sums[d] > f.best_fit) {
        f.best_fit = sums[d];
        f.best_domain = static_cast<std::int32_t>(d);
      }
    }
  }
  for (std::size_t j = 0; j < out.unplaced_jobs.size(); ++j) {
    auto& u = out.unplaced_jobs[j];
    if (fact_of[j] == -2) {
      if (!u.detail.empty()) u.detail += ". ";
      u.detail += "Not explained: this round's unplaced jobs come in more shapes than one round explains";
      continue;
    }
    if (fact_of[j] < 0) continue;
    job const& jb = in.pending[static_cast<std::size_t>(u.job)];
    auto const it = facts.begin() + fact_of[j];
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
    e.replicas_required = need_of(in, jb);
    if (it->best_domain >= 0) {
      e.best_domain = in.state.topo.domains[static_cast<std::size_t>(it->best_domain)].name;
      e.best_domain_fit = static_cast<std::int32_t>(std::min<std::int64_t>(it->best_fit, INT32_MAX));
    }
    e.outbid = it->outbid_priority != INT_MIN;
    e.outbid_priority = e.outbid ? it->outbid_priority : 0;
    if (e.replicas_required >= 1) {
      bool const required = jb.topo_mode == topology_mode::required && jb.topology_level >= 0 && n_domains > 0;
      e.replicas_fit_empty = static_cast<std::int32_t>(std::min<std::int64_t>(it->fit_empty, INT32_MAX));
      e.best_domain_fit_empty = required ? static_cast<std::int32_t>(std::min<std::int64_t>(it->best_fit_empty, INT32_MAX)) : 0;
      // A job no node that admits it could hold one replica of even empty
      // (more GPUs a node than any node has) can never run; one that may
      // start with fewer replicas (not a gang) otherwise takes what fits.
      e.never = e.replicas_fit_empty == 0 ||
                (jb.gang && (e.replicas_fit_empty < e.replicas_required ||
                             (required && e.best_domain_fit_empty < e.replicas_required)));
    }
    if (!u.detail.empty()) u.detail += ". ";
    describe(e, u.detail);
  }
}

}  // namespace placer
