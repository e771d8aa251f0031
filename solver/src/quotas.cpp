// Queues with limits, guarantees and weights (quotas.hpp): the tree's
// checks, deserved shares, admission, and the guarantees preemption keeps.
#include "quotas.hpp"

#include "policies/policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <limits>
#include <numeric>

namespace placer::detail {

namespace {

constexpr std::int32_t max_weight = 1000;
constexpr std::int64_t unbounded = std::numeric_limits<std::int64_t>::max() / 4;

struct tree {
  std::unordered_map<std::string_view, std::int32_t> index;
  std::vector<std::int32_t> parent;  ///< -1: a root
};

tree make_tree(std::vector<queue_spec> const& qs) {
  tree t;
  t.parent.assign(qs.size(), -1);
  for (std::size_t i = 0; i < qs.size(); ++i) {
    auto const& q = qs[i];
    PLACER_EXPECTS(!q.name.empty(), "queue " + std::to_string(i) + " has no name");
    PLACER_EXPECTS(t.index.emplace(q.name, static_cast<std::int32_t>(i)).second,
                   "two queues are named '" + q.name + "'");
    PLACER_EXPECTS(q.gpu_milli_limit >= -1 && q.cpu_milli_limit >= -1,
                   "queue '" + q.name + "': a limit must be -1 (none) or at least 0");
    PLACER_EXPECTS(q.gpu_milli_guarantee >= 0 && q.cpu_milli_guarantee >= 0,
                   "queue '" + q.name + "': a guarantee must be at least 0");
    PLACER_EXPECTS((q.gpu_milli_limit < 0 || q.gpu_milli_guarantee <= q.gpu_milli_limit) &&
                       (q.cpu_milli_limit < 0 || q.cpu_milli_guarantee <= q.cpu_milli_limit),
                   "queue '" + q.name + "': a guarantee above its limit");
    PLACER_EXPECTS(q.weight >= 1 && q.weight <= max_weight,
                   "queue '" + q.name + "': weight " + std::to_string(q.weight) + " is not in 1.." +
                       std::to_string(max_weight));
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

/// Adds (g, c) to queue q and every ancestor.
void charge(tree const& t, queue_amounts& a, std::int32_t q, std::int64_t g, std::int64_t c) {
  for (; q >= 0; q = t.parent[static_cast<std::size_t>(q)]) {
    a.gpu[static_cast<std::size_t>(q)] += g;
    a.cpu[static_cast<std::size_t>(q)] += c;
  }
}

/// Replicas a pending job may be placed with: an elastic one at its largest.
std::int64_t largest(round_input const& in, job const& jb) {
  return in.pol.queue.elastic && jb.min_replicas > 0 ? std::max(jb.min_replicas, jb.max_replicas) : jb.replicas;
}

/// Usage of every queue (its subtree) by the round's running jobs.
queue_amounts running_usage(round_input const& in, tree const& t) {
  queue_amounts u{std::vector<std::int64_t>(in.queues.size(), 0), std::vector<std::int64_t>(in.queues.size(), 0)};
  for (auto const& rj : in.running) {
    auto const n = static_cast<std::int64_t>(rj.replicas.size());
    charge(t, u, queue_of(t, rj.queue, "running job '" + rj.name + "'"), rj.per_replica.gpu_milli_total() * n,
           rj.per_replica.cpu_milli * n);
  }
  return u;
}

/// Water-filling of `capacity` among `members`: each first min(guarantee,
/// cap), then the rest in proportion to weight, none above its cap.
void water_fill(std::int64_t capacity, std::vector<std::int32_t> const& members,
                std::vector<std::int64_t> const& guarantee, std::vector<std::int64_t> const& cap,
                std::vector<std::int32_t> const& weight, std::vector<std::int64_t>& share) {
  std::int64_t left = capacity;
  for (auto q : members) {
    auto const u = static_cast<std::size_t>(q);
    share[u] = std::min(guarantee[u], cap[u]);
    left -= share[u];
  }
  std::vector<std::int32_t> open;
  while (left > 0) {
    open.clear();
    std::int64_t w = 0;
    for (auto q : members) {
      if (share[static_cast<std::size_t>(q)] < cap[static_cast<std::size_t>(q)]) {
        open.push_back(q);
        w += weight[static_cast<std::size_t>(q)];
      }
    }
    if (open.empty()) break;
    std::int64_t given = 0;
    for (auto q : open) {
      auto const u = static_cast<std::size_t>(q);
      // left * weight / w without overflow: left < 2^62, weight <= 1000.
      std::int64_t const add = std::min(left / w * weight[u] + left % w * weight[u] / w, cap[u] - share[u]);
      share[u] += add;
      given += add;
    }
    if (given == 0) {  // less left than the weights: one milli at a time, in order
      for (auto q : open) {
        if (left - given == 0) break;
        share[static_cast<std::size_t>(q)] += 1;
        ++given;
      }
    }
    left -= given;
  }
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

namespace {

/// deserved_shares on the round's tree `t` and its running usage `used`.
queue_amounts shares(round_input const& in, tree const& t, queue_amounts demand) {
  auto const& qs = in.queues;
  auto const n = qs.size();
  // Demand: running work (`demand` on entry) plus pending jobs, per queue and its ancestors.
  for (auto const& jb : in.pending) {
    auto const r = largest(in, jb);
    charge(t, demand, queue_of(t, jb.queue, "pending job '" + jb.name + "'"), jb.per_replica.gpu_milli_total() * r,
           jb.per_replica.cpu_milli * r);
  }
  std::int64_t cap_gpu = 0, cap_cpu = 0;
  for (auto const& nd : in.state.nodes) {
    if (!nd.healthy) continue;
    for (std::size_t g = 0; g < nd.gpu_free_milli.size(); ++g) cap_gpu += nd.gpu_is_healthy(g) ? milli_per_gpu : 0;
    cap_cpu += nd.cpu_milli_capacity;
  }
  std::vector<std::vector<std::int32_t>> children(n + 1);  // [n]: the roots
  for (std::size_t q = 0; q < n; ++q) {
    auto const p = t.parent[q];
    children[p < 0 ? n : static_cast<std::size_t>(p)].push_back(static_cast<std::int32_t>(q));
  }
  std::vector<std::int32_t> weight(n);
  std::vector<std::int64_t> guarantee(n), cap(n);
  for (std::size_t q = 0; q < n; ++q) weight[q] = qs[q].weight;
  queue_amounts share{std::vector<std::int64_t>(n, 0), std::vector<std::int64_t>(n, 0)};
  auto fill = [&](std::int64_t capacity, std::vector<std::int64_t> const& dem, bool gpu_dim,
                  std::vector<std::int64_t>& out) {
    for (std::size_t q = 0; q < n; ++q) {
      auto const limit = gpu_dim ? qs[q].gpu_milli_limit : qs[q].cpu_milli_limit;
      guarantee[q] = gpu_dim ? qs[q].gpu_milli_guarantee : qs[q].cpu_milli_guarantee;
      cap[q] = std::min(dem[q], limit >= 0 ? limit : unbounded);
    }
    // Breadth first from the roots: a queue's share is divided among its children.
    std::vector<std::size_t> level{n};
    while (!level.empty()) {
      std::vector<std::size_t> next;
      for (auto p : level) {
        auto const& kids = children[p];
        if (kids.empty()) continue;
        water_fill(p == n ? capacity : out[p], kids, guarantee, cap, weight, out);
        for (auto k : kids) next.push_back(static_cast<std::size_t>(k));
      }
      level = std::move(next);
    }
  };
  fill(cap_gpu, demand.gpu, true, share.gpu);
  fill(cap_cpu, demand.cpu, false, share.cpu);
  return share;
}

}  // namespace

queue_amounts deserved_shares(round_input const& in) {
  tree const t = make_tree(in.queues);
  return shares(in, t, running_usage(in, t));
}

quota_plan plan_quotas(round_input const& in, admission mode) {
  quota_plan plan;
  auto const& qs = in.queues;
  tree const t = make_tree(qs);
  queue_amounts used = running_usage(in, t);
  // The bound of every queue: its limit, or the smaller of it and its share.
  queue_amounts bound{std::vector<std::int64_t>(qs.size()), std::vector<std::int64_t>(qs.size())};
  queue_amounts const share = mode == admission::by_share ? shares(in, t, used) : queue_amounts{};
  for (std::size_t q = 0; q < qs.size(); ++q) {
    bound.gpu[q] = qs[q].gpu_milli_limit >= 0 ? qs[q].gpu_milli_limit : unbounded;
    bound.cpu[q] = qs[q].cpu_milli_limit >= 0 ? qs[q].cpu_milli_limit : unbounded;
    if (mode == admission::by_share) {
      bound.gpu[q] = std::min(bound.gpu[q], share.gpu[q]);
      bound.cpu[q] = std::min(bound.cpu[q], share.cpu[q]);
    }
  }
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
    // Growth would bypass the admission below: elastic jobs under a limit
    // keep their size.
    if (in.pol.queue.elastic && rj.max_replicas > static_cast<std::int32_t>(rj.replicas.size()) &&
        limited(queue_of(t, rj.queue, "running job '" + rj.name + "'"))) {
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
    std::int64_t const n = largest(in, jb);
    std::int64_t const g = jb.per_replica.gpu_milli_total() * n, c = jb.per_replica.cpu_milli * n;
    std::string why;
    for (auto k = q; k >= 0 && why.empty(); k = t.parent[static_cast<std::size_t>(k)]) {
      auto const& spec = qs[static_cast<std::size_t>(k)];
      auto const ku = static_cast<std::size_t>(k);
      auto const says = [&](char const* what, std::int64_t held, std::int64_t to, std::int64_t limit,
                            std::int64_t need) {
        return "queue '" + spec.name + "' holds " + std::to_string(held) + " of its " + std::to_string(to) +
               " milli-" + what + (to == limit ? " limit" : " deserved share") + "; this job needs " +
               std::to_string(need);
      };
      if (g > 0 && used.gpu[ku] + g > bound.gpu[ku]) {
        why = says("GPU", used.gpu[ku], bound.gpu[ku], spec.gpu_milli_limit, g);
      } else if (c > 0 && used.cpu[ku] + c > bound.cpu[ku]) {
        why = says("CPU", used.cpu[ku], bound.cpu[ku], spec.cpu_milli_limit, c);
      }
    }
    if (why.empty()) {
      charge(t, used, q, g, c);
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

// ------------------------------------------------------------- guarantees

queue_guarantees::queue_guarantees(round_input const& in) {
  for (auto const& q : in.queues) active_ = active_ || q.gpu_milli_guarantee > 0 || q.cpu_milli_guarantee > 0;
  if (!active_) return;
  tree t = make_tree(in.queues);
  specs_ = &in.queues;
  parent_ = std::move(t.parent);
  index_ = std::move(t.index);
  used_ = {std::vector<std::int64_t>(parent_.size(), 0), std::vector<std::int64_t>(parent_.size(), 0)};
  delta_ = used_;
  touched_.assign(parent_.size(), 0);
}

std::int32_t queue_guarantees::index(std::string const& name) const {
  if (!active_ || name.empty()) return -1;
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

void queue_guarantees::measure(std::vector<running_job> const& running, std::vector<char> const& alive) {
  if (!active_) return;
  std::fill(used_.gpu.begin(), used_.gpu.end(), 0);
  std::fill(used_.cpu.begin(), used_.cpu.end(), 0);
  for (std::size_t r = 0; r < running.size(); ++r) {
    if (alive[r] == 0) continue;
    auto const& rj = running[r];
    auto const n = static_cast<std::int64_t>(rj.replicas.size());
    for (auto q = index(rj.queue); q >= 0; q = parent_[static_cast<std::size_t>(q)]) {
      used_.gpu[static_cast<std::size_t>(q)] += rj.per_replica.gpu_milli_total() * n;
      used_.cpu[static_cast<std::size_t>(q)] += rj.per_replica.cpu_milli * n;
    }
  }
}

bool queue_guarantees::contains(std::int32_t ancestor, std::int32_t q) const {
  for (; q >= 0; q = parent_[static_cast<std::size_t>(q)]) {
    if (q == ancestor) return true;
  }
  return false;
}

bool queue_guarantees::within_guarantee(std::int32_t q, std::int32_t v, std::int64_t gpu, std::int64_t cpu) const {
  if (!active_ || q < 0 || v < 0 || contains(q, v) || contains(v, q)) return false;
  // Checked on the resources a queue guarantees; the leaf must guarantee
  // one the job needs.
  auto const& leaf = (*specs_)[static_cast<std::size_t>(q)];
  if (!(gpu > 0 && leaf.gpu_milli_guarantee > 0) && !(cpu > 0 && leaf.cpu_milli_guarantee > 0)) return false;
  for (auto k = q; k >= 0 && !contains(k, v); k = parent_[static_cast<std::size_t>(k)]) {
    auto const u = static_cast<std::size_t>(k);
    auto const& spec = (*specs_)[u];
    if (spec.gpu_milli_guarantee > 0 && used_.gpu[u] + gpu > spec.gpu_milli_guarantee) return false;
    if (spec.cpu_milli_guarantee > 0 && used_.cpu[u] + cpu > spec.cpu_milli_guarantee) return false;
    if (spec.gpu_milli_guarantee == 0 && spec.cpu_milli_guarantee == 0) return false;  // an ancestor guarantees nothing
  }
  return true;
}

bool queue_guarantees::keeps_guarantees(std::int32_t q, std::int64_t gpu, std::int64_t cpu,
                                        std::vector<running_job> const& running,
                                        std::vector<std::size_t> const& victims) const {
  if (!active_) return true;
  // The change of every queue on the victims' paths: what they give back,
  // and (on the job's path) what the job takes.
  std::vector<std::int32_t> touched;
  auto add = [&](std::int32_t k, std::int64_t g, std::int64_t c) {
    for (; k >= 0; k = parent_[static_cast<std::size_t>(k)]) {
      auto const u = static_cast<std::size_t>(k);
      if (touched_[u] == 0) touched.push_back(k);
      touched_[u] = 1;
      delta_.gpu[u] += g;
      delta_.cpu[u] += c;
    }
  };
  for (auto r : victims) {
    auto const& rj = running[r];
    auto const n = static_cast<std::int64_t>(rj.replicas.size());
    add(index(rj.queue), -rj.per_replica.gpu_milli_total() * n, -rj.per_replica.cpu_milli * n);
  }
  bool ok = true;
  if (!touched.empty()) {
    add(q, gpu, cpu);
    for (auto k : touched) {
      auto const u = static_cast<std::size_t>(k);
      auto const& spec = (*specs_)[u];
      ok = ok && used_.gpu[u] + delta_.gpu[u] >= std::min(spec.gpu_milli_guarantee, used_.gpu[u]) &&
           used_.cpu[u] + delta_.cpu[u] >= std::min(spec.cpu_milli_guarantee, used_.cpu[u]);
      delta_.gpu[u] = 0;
      delta_.cpu[u] = 0;
      touched_[u] = 0;
    }
  }
  return ok;
}

}  // namespace placer::detail
