// Queues with limits (model.hpp queue_spec): the tree's checks and the
// admission that keeps every queue within its limits.
#include "quotas.hpp"

#include "policies/policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace placer::detail {

namespace {

struct tree {
  std::unordered_map<std::string_view, std::int32_t> index;
  std::vector<std::int32_t> parent;  ///< -1: a root
};

tree make_tree(std::vector<queue_spec> const& qs) {
  tree t;
  t.parent.assign(qs.size(), -1);
  for (std::size_t i = 0; i < qs.size(); ++i) {
    PLACER_EXPECTS(!qs[i].name.empty(), "queue " + std::to_string(i) + " has no name");
    PLACER_EXPECTS(t.index.emplace(qs[i].name, static_cast<std::int32_t>(i)).second,
                   "two queues are named '" + qs[i].name + "'");
    PLACER_EXPECTS(qs[i].gpu_milli_limit >= -1 && qs[i].cpu_milli_limit >= -1,
                   "queue '" + qs[i].name + "': a limit must be -1 (none) or at least 0");
  }
  for (std::size_t i = 0; i < qs.size(); ++i) {
    if (qs[i].parent.empty()) continue;
    auto it = t.index.find(qs[i].parent);
    PLACER_EXPECTS(it != t.index.end(), "queue '" + qs[i].name + "' has parent '" + qs[i].parent + "', which is not a queue");
    t.parent[i] = it->second;
  }
  for (std::size_t i = 0; i < qs.size(); ++i) {  // no cycles: every chain reaches a root within n steps
    std::int32_t q = static_cast<std::int32_t>(i);
    for (std::size_t steps = 0; q >= 0; ++steps) {
      PLACER_EXPECTS(steps <= qs.size(), "queue '" + qs[i].name + "' is its own ancestor");
      q = t.parent[static_cast<std::size_t>(q)];
    }
  }
  return t;
}

std::int32_t queue_of(tree const& t, std::string const& name, std::string const& who) {
  if (name.empty()) return -1;
  auto it = t.index.find(name);
  PLACER_EXPECTS(it != t.index.end(), who + " names queue '" + name + "', which the round does not define");
  return it->second;
}

}  // namespace

void validate_queues(round_input const& in) {
  if (in.queues.empty()) return;
  tree const t = make_tree(in.queues);
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    (void)queue_of(t, in.pending[j].queue, "pending job " + std::to_string(j) + " ('" + in.pending[j].name + "')");
  }
  for (std::size_t j = 0; j < in.running.size(); ++j) {
    (void)queue_of(t, in.running[j].queue, "running job " + std::to_string(j) + " ('" + in.running[j].name + "')");
  }
}

quota_plan plan_quotas(round_input const& in) {
  quota_plan plan;
  auto const& qs = in.queues;
  tree const t = make_tree(qs);
  std::vector<std::int64_t> gpu(qs.size(), 0), cpu(qs.size(), 0);
  auto charge = [&](std::int32_t q, std::int64_t g, std::int64_t c) {
    for (; q >= 0; q = t.parent[static_cast<std::size_t>(q)]) {
      gpu[static_cast<std::size_t>(q)] += g;
      cpu[static_cast<std::size_t>(q)] += c;
    }
  };
  auto limited = [&](std::int32_t q) {
    for (; q >= 0; q = t.parent[static_cast<std::size_t>(q)]) {
      if (qs[static_cast<std::size_t>(q)].gpu_milli_limit >= 0 || qs[static_cast<std::size_t>(q)].cpu_milli_limit >= 0) {
        return true;
      }
    }
    return false;
  };
  for (std::size_t r = 0; r < in.running.size(); ++r) {
    auto const& rj = in.running[r];
    auto const q = queue_of(t, rj.queue, "running job '" + rj.name + "'");
    auto const n = static_cast<std::int64_t>(rj.replicas.size());
    charge(q, rj.per_replica.gpu_milli_total() * n, rj.per_replica.cpu_milli * n);
    // Growth would bypass the admission below: elastic jobs under a limit
    // keep their size.
    if (in.pol.queue.elastic && rj.max_replicas > static_cast<std::int32_t>(n) && limited(q)) {
      plan.frozen.push_back(static_cast<std::int32_t>(r));
    }
  }
  // Queue order: priority, then submission, then the request's order.
  std::vector<std::int32_t> all(in.pending.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<char> admitted(in.pending.size(), 1);
  for (auto j : queue_order(in, all)) {
    auto const& jb = in.pending[static_cast<std::size_t>(j)];
    auto const q = queue_of(t, jb.queue, "pending job '" + jb.name + "'");
    if (q < 0) continue;
    // At its largest: an elastic job may be placed at up to max replicas.
    std::int64_t const n = in.pol.queue.elastic && jb.min_replicas > 0 ? std::max(jb.min_replicas, jb.max_replicas)
                                                                        : jb.replicas;
    std::int64_t const g = jb.per_replica.gpu_milli_total() * n, c = jb.per_replica.cpu_milli * n;
    std::string why;
    for (auto k = q; k >= 0 && why.empty(); k = t.parent[static_cast<std::size_t>(k)]) {
      auto const& spec = qs[static_cast<std::size_t>(k)];
      auto const ku = static_cast<std::size_t>(k);
      if (spec.gpu_milli_limit >= 0 && gpu[ku] + g > spec.gpu_milli_limit) {
        why = "queue '" + spec.name + "' holds " + std::to_string(gpu[ku]) + " of its " +
              std::to_string(spec.gpu_milli_limit) + " milli-GPU limit; this job needs " + std::to_string(g);
      } else if (spec.cpu_milli_limit >= 0 && cpu[ku] + c > spec.cpu_milli_limit) {
        why = "queue '" + spec.name + "' holds " + std::to_string(cpu[ku]) + " of its " +
              std::to_string(spec.cpu_milli_limit) + " milli-CPU limit; this job needs " + std::to_string(c);
      }
    }
    if (why.empty()) {
      charge(q, g, c);
    } else {
      admitted[static_cast<std::size_t>(j)] = 0;
      plan.refused.push_back({j, unplaced_reason::quota_exceeded, std::move(why)});
    }
  }
  for (std::size_t j = 0; j < admitted.size(); ++j) {
    if (admitted[j] != 0) plan.admitted.push_back(static_cast<std::int32_t>(j));
  }
  return plan;
}

}  // namespace placer::detail
