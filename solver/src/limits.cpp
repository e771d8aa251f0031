// check_limits (limits.hpp).
#include <placer/solver/limits.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <string>

namespace placer {

namespace {

void cap(std::int64_t have, std::int64_t limit, char const* what, char const* flag) {
  if (have <= limit) return;
  throw logic_error(error_code::resource_exhausted, std::string("round has ") + std::to_string(have) + " " + what +
                                                        ", above the limit of " + std::to_string(limit) + flag);
}

void name_fits(std::string_view name, std::int64_t limit, char const* what) {
  PLACER_EXPECTS(static_cast<std::int64_t>(name.size()) <= limit,
                 std::string(what) + " name of " + std::to_string(name.size()) + " bytes, above the limit of " +
                     std::to_string(limit));
}

/// The first name `names` holds twice (in their order), or "": each name
/// looked up in an open-addressing table of the positions before it. Sorting
/// them instead was most of the `limits` stage of a full snapshot (100k:
/// 12,800 node names and 5,000 job names, 2.4 ms on an H200's host).
std::string_view repeated(std::vector<std::string_view> const& names) {
  if (names.size() < 2) return {};
  thread_local std::vector<std::uint32_t> slots;  // position + 1; 0: free
  std::size_t const mask = std::bit_ceil(names.size() * 2) - 1;
  slots.assign(mask + 1, 0);
  std::hash<std::string_view> const hash;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::size_t s = hash(names[i]) & mask;
    for (; slots[s] != 0; s = (s + 1) & mask) {
      if (names[slots[s] - 1] == names[i]) return names[i];
    }
    slots[s] = static_cast<std::uint32_t>(i + 1);
  }
  return {};
}

/// Names are printed bounded (they may be long, and they are the caller's text).
std::string shown(std::string_view name) {
  return "'" + std::string(name.substr(0, 64)) + (name.size() > 64 ? "...'" : "'");
}

/// A job's constraints: at most lim.labels strings in all, each a bounded name.
void constraints_fit(node_constraints const& c, round_limits const& lim) {
  if (c.empty()) return;
  std::int64_t strings = 0;
  auto name = [&](std::string const& s, char const* what) {
    ++strings;
    name_fits(s, lim.name_bytes, what);
  };
  auto term = [&](selector_term const& t) {
    for (auto const& e : t.match) {
      name(e.key, "a selector key");
      for (auto const& v : e.values) name(v, "a selector value");
    }
  };
  for (auto const& s : c.node_selector) name(s, "a node selector");
  for (auto const& t : c.required) term(t);
  for (auto const& p : c.preferred) term(p.term);
  for (auto const& t : c.tolerations) {
    name(t.key, "a toleration key");
    name(t.value, "a toleration value");
  }
  cap(strings, lim.labels, "strings in one job's constraints", "");
}

}  // namespace

void check_limits(round_input const& in, round_limits const& lim, std::vector<std::string_view>& scratch,
                  arrived_jobs const* arrived, std::vector<std::string_view> const* delta_names) {
  auto const& c = in.state;
  cap(static_cast<std::int64_t>(c.nodes.size()), lim.nodes, "nodes", " (--max-nodes)");
  cap(c.topo.levels(), lim.topology_levels, "topology levels", "");
  cap(static_cast<std::int64_t>(c.topo.domains.size()), lim.topology_domains, "topology domains", "");
  cap(static_cast<std::int64_t>(in.pending.size()), lim.pending_jobs, "pending jobs", " (--max-jobs)");
  cap(static_cast<std::int64_t>(in.running.size()), lim.running_jobs, "running jobs", " (--max-jobs)");
  std::int64_t replicas = 0, running_replicas = 0;
  for (auto const& j : in.pending) {
    replicas += std::max({std::int64_t{j.replicas}, std::int64_t{j.min_replicas}, std::int64_t{j.max_replicas}});
  }
  for (auto const& r : in.running) running_replicas += static_cast<std::int64_t>(r.replicas.size());
  cap(replicas, lim.replicas, "pending replicas (elastic jobs at their largest)", " (--max-replicas)");
  cap(running_replicas, lim.running_replicas, "running replicas", " (--max-replicas)");

  cap(static_cast<std::int64_t>(in.queues.size()), lim.queues, "queues", "");
  for (auto const& q : in.queues) {
    name_fits(q.name, lim.name_bytes, "a queue");
    name_fits(q.parent, lim.name_bytes, "a queue");
  }
  for (auto const& n : c.topo.level_names) name_fits(n, lim.name_bytes, "a topology level");
  for (auto const& d : c.topo.domains) name_fits(d.name, lim.name_bytes, "a topology domain");
  if (!in.nodes_validated) {
    for (auto const& n : c.nodes) check_node_limits(n, lim);
  }
  scratch.clear();
  if (delta_names == nullptr) {
    for (auto const& n : c.nodes) scratch.push_back(n.name);
  } else if (!delta_names->empty()) {
    // The names the delta brought, each held by one node alone: the others
    // were unique, and kept their names.
    scratch = *delta_names;
    auto const brought_twice = repeated(scratch);
    PLACER_EXPECTS(brought_twice.empty(), "two nodes are named " + shown(brought_twice));
    std::sort(scratch.begin(), scratch.end());
    std::vector<std::uint8_t> held(scratch.size(), 0);
    for (auto const& n : c.nodes) {
      auto const it = std::lower_bound(scratch.begin(), scratch.end(), std::string_view(n.name));
      if (it == scratch.end() || *it != n.name) continue;
      auto& h = held[static_cast<std::size_t>(it - scratch.begin())];
      PLACER_EXPECTS(h == 0, "two nodes are named " + shown(n.name));
      h = 1;
    }
    scratch.clear();
  }
  auto twice = repeated(scratch);
  PLACER_EXPECTS(twice.empty(), "two nodes are named " + shown(twice));
  // A job delta's round: the jobs it appended alone, and their names are
  // unique already (sorting 5,000 names was most of 1 ms a round at 100k).
  std::size_t const pending_from = arrived != nullptr ? std::min(arrived->pending_from, in.pending.size()) : 0;
  std::size_t const running_from = arrived != nullptr ? std::min(arrived->running_from, in.running.size()) : 0;
  scratch.clear();
  for (std::size_t k = pending_from; k < in.pending.size(); ++k) {
    auto const& j = in.pending[k];
    name_fits(j.name, lim.name_bytes, "a pending job");
    name_fits(j.queue, lim.name_bytes, "a queue");
    for (auto const& m : j.allowed_gpu_models) name_fits(m, lim.name_bytes, "a GPU model");
    constraints_fit(j.constraints, lim);
    if (arrived == nullptr) scratch.push_back(j.name);
  }
  twice = repeated(scratch);
  PLACER_EXPECTS(twice.empty(), "two pending jobs are named " + shown(twice));
  scratch.clear();
  for (std::size_t k = running_from; k < in.running.size(); ++k) {
    auto const& r = in.running[k];
    name_fits(r.name, lim.name_bytes, "a running job");
    name_fits(r.queue, lim.name_bytes, "a queue");
    constraints_fit(r.constraints, lim);
    if (arrived == nullptr) scratch.push_back(r.name);
  }
  twice = repeated(scratch);
  PLACER_EXPECTS(twice.empty(), "two running jobs are named " + shown(twice));
}

void check_node_limits(node const& n, round_limits const& lim) {
  cap(n.gpu_count(), lim.gpus_per_node, "GPUs on one node", "");
  name_fits(n.name, lim.name_bytes, "a node");
  name_fits(n.gpu_model, lim.name_bytes, "a GPU model");
  cap(static_cast<std::int64_t>(n.labels.size() + n.taints.size()), lim.labels, "labels and taints on one node", "");
  for (auto const& l : n.labels) name_fits(l, lim.name_bytes, "a node label");
  for (auto const& t : n.taints) {
    name_fits(t.key, lim.name_bytes, "a taint key");
    name_fits(t.value, lim.name_bytes, "a taint value");
  }
}

}  // namespace placer
