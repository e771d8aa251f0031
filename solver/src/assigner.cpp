// The assign stage (see assigner.hpp).
#include "assigner.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace placer::detail {

using namespace placer::kernels;

namespace {

bool wants_locality(job const& j) {
  return j.replicas > 1 && (j.gang || j.topo_mode != topology_mode::none || j.network_sensitivity > 0.0F);
}

/// Stably sorts `key` ascending and applies the same permutation to `other`.
void stable_sort_by(std::vector<std::int32_t>& key, std::vector<std::int32_t>& other) {
  std::vector<std::pair<std::int32_t, std::int32_t>> both(key.size());
  for (std::size_t k = 0; k < key.size(); ++k) both[k] = {key[k], other[k]};
  std::stable_sort(both.begin(), both.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
  for (std::size_t k = 0; k < both.size(); ++k) std::tie(key[k], other[k]) = both[k];
}

/// Shape tiers for the auction, largest first: whole GPUs by count, then
/// fractional shares, then CPU-only.
std::int32_t tier_of(demand const& d) {
  if (d.gpus == 0) return 0;
  if (d.fractional()) return 1;
  return 1 + d.gpus;
}

}  // namespace

std::vector<std::int32_t> job_order(round_input const& in, bool largest_first) {
  std::vector<std::int32_t> order(in.pending.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    auto const& x = in.pending[a];
    auto const& y = in.pending[b];
    if (x.priority != y.priority) return x.priority > y.priority;
    if (largest_first) {
      auto const dx = x.per_replica.gpu_milli_total() * x.replicas;
      auto const dy = y.per_replica.gpu_milli_total() * y.replicas;
      if (dx != dy) return dx > dy;
      // Most constrained first: a job limited to few GPU models has fewer
      // places to go than one that takes any (0 = any model).
      auto const mx = x.per_replica.gpus > 0 && !x.allowed_gpu_models.empty() ? x.allowed_gpu_models.size() : 1000;
      auto const my = y.per_replica.gpus > 0 && !y.allowed_gpu_models.empty() ? y.allowed_gpu_models.size() : 1000;
      if (mx != my) return mx < my;
    }
    return x.submit_time < y.submit_time;
  });
  return order;
}

assigner::assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, score_params p,
                   backend& b, assign_mode mode)
    : in_(in), m_(m), scores_(scores), op_{m.nodes(), m.classes(), m.tasks(), p}, backend_(b), mode_(mode) {
  levels_ = std::max(in.state.topo.levels(), 1);
  paths_ = node_domain_paths(in.state);
  // (node, domain) entries sorted by domain, the keys of domain_capacity.
  for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
    for (std::int32_t l = 0; l < levels_; ++l) {
      if (auto const d = domain_of(n, l); d >= 0) {
        entry_node_.push_back(n);
        entry_domain_.push_back(d);
      }
    }
  }
  stable_sort_by(entry_domain_, entry_node_);
}

void assigner::run(round_result& out, std::function<bool()> const& out_of_time) {
  auto const order = job_order(in_, mode_ == assign_mode::placer);
  auto expire = [&](std::int32_t j) {
    out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
  };
  if (mode_ != assign_mode::placer) {
    for (auto j : order) {
      if (out_of_time()) { expire(j); continue; }
      place_greedy(j, out);
    }
    return;
  }
  // Placer: one priority level at a time; inside it, shape tiers from the
  // largest replica down. In each tier the locality jobs (gangs, topology
  // needs) go first, largest first, then the rest through the auction. A
  // gang of small replicas thus waits for the big single-node shapes, so it
  // does not break the free nodes they need (E-Binpack).
  std::size_t begin = 0;
  while (begin < order.size()) {
    std::size_t end = begin;
    auto const prio = in_.pending[order[begin]].priority;
    while (end < order.size() && in_.pending[order[end]].priority == prio) ++end;
    std::map<std::int32_t, std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>, std::greater<>> tiers;
    for (std::size_t k = begin; k < end; ++k) {
      std::int32_t const j = order[k];
      auto& tier = tiers[tier_of(in_.pending[j].per_replica)];
      (wants_locality(in_.pending[j]) ? tier.first : tier.second).push_back(j);
    }
    for (auto& [shape, jobs] : tiers) {
      for (auto j : jobs.first) {
        if (out_of_time()) { expire(j); continue; }
        place_locality(j, out);
      }
      if (out_of_time()) {
        for (auto j : jobs.second) expire(j);
        continue;
      }
      place_tier(jobs.second, out);
    }
    begin = end;
  }
}

// ------------------------------------------------------------------ greedy

void assigner::place_greedy(std::int32_t j, round_result& out) {
  auto const& job = in_.pending[j];
  if (wants_locality(job) || job.topo_mode == topology_mode::required) {
    place_locality(j, out);
    return;
  }
  if (never_feasible(j, out)) return;
  std::vector<replica_placement> placed;
  place_replicas(job, m_.job_class[j], -1, -1, job.replicas, placed);
  if (job.gang && static_cast<std::int32_t>(placed.size()) < job.replicas) {
    release_all(m_.job_class[j], placed);
  }
  finish_job(j, std::move(placed), out);
}

// ---------------------------------------------------------------- locality

void assigner::place_locality(std::int32_t j, round_result& out) {
  auto const& job = in_.pending[j];
  if (never_feasible(j, out)) return;
  std::int32_t const c = m_.job_class[j];
  std::int32_t const want = job.replicas;
  bool const required = job.topo_mode == topology_mode::required && job.topology_level >= 0;
  std::vector<replica_placement> placed;

  // Replicas of this class each domain can hold: a segmented sum of the
  // per-node fit counts by domain, on the backend.
  auto const& domains = in_.state.topo.domains;
  std::vector<std::int64_t> cap(domains.size(), 0);
  if (!domains.empty()) {
    domain_index_view idx;
    idx.n_entries = static_cast<std::int32_t>(entry_node_.size());
    idx.n_domains = static_cast<std::int32_t>(domains.size());
    idx.node = entry_node_.data();
    idx.domain = entry_domain_.data();
    backend_.domain_capacity(m_.nodes(), m_.classes(), c, idx, cap);
  }
  // The lowest (deepest) domain that holds the whole job, best fit first.
  std::int32_t const top = required ? job.topology_level : 0;
  if (!domains.empty() && mode_ != assign_mode::kube) {
    for (std::int32_t level = levels_ - 1; level >= top && placed.empty(); --level) {
      std::vector<std::int32_t> fits;
      for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()); ++d) {
        if (domains[d].level == level && cap[d] >= want) fits.push_back(d);
      }
      std::stable_sort(fits.begin(), fits.end(), [&](auto a, auto b) { return cap[a] < cap[b]; });
      for (auto d : fits) {
        place_replicas(job, c, level, d, want, placed);
        if (static_cast<std::int32_t>(placed.size()) == want) break;
        release_all(c, placed);  // cannot happen with exact fit counts; kept as a guard
      }
    }
  } else if (required) {
    // kube-style baseline: the first domain of the level that holds it.
    for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()) && placed.empty(); ++d) {
      if (domains[d].level != job.topology_level || cap[d] < want) continue;
      place_replicas(job, c, job.topology_level, d, want, placed);
      if (static_cast<std::int32_t>(placed.size()) < want) release_all(c, placed);
    }
  }
  if (placed.empty() && !job.gang) {
    // No domain holds all of it: a non-gang job takes what fits, inside
    // the roomiest domain of its required level, or anywhere.
    std::int32_t level = -1, domain = -1;
    if (required) {
      level = job.topology_level;
      for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()); ++d) {
        if (domains[d].level == level && cap[d] > 0 && (domain < 0 || cap[d] > cap[domain])) domain = d;
      }
    }
    if (!required || domain >= 0) place_replicas(job, c, level, domain, want, placed);
  } else if (placed.empty() && !required && mode_ == assign_mode::kube) {
    place_replicas(job, c, -1, -1, want, placed);  // kube: no topology awareness
    if (static_cast<std::int32_t>(placed.size()) < want) release_all(c, placed);
  }
  if (placed.empty()) {
    if (required) {
      out.unplaced_jobs.push_back({j, unplaced_reason::topology_unsatisfiable,
                                   "no domain at level " + level_name(job.topology_level) + " holds the job"});
    } else {
      out.unplaced_jobs.push_back({j, job.gang ? unplaced_reason::gang_incomplete : unplaced_reason::insufficient_capacity,
                                   "the cluster cannot hold all " + std::to_string(want) + " replicas now" +
                                       (job.gang ? "; gang takes nothing" : "")});
    }
    return;
  }
  finish_job(j, std::move(placed), out);
}

// ----------------------------------------------------------------- auction

void assigner::place_tier(std::vector<std::int32_t> const& jobs, round_result& out) {
  // Bidders: one per replica. Rows: the classes present, compacted.
  std::vector<std::int32_t> live;
  for (auto j : jobs) {
    if (!never_feasible(j, out)) live.push_back(j);
  }
  if (live.empty()) return;
  std::int32_t const n_nodes = m_.n_nodes();
  std::vector<std::int32_t> bidder_job, row_of, row_class;
  std::map<std::int32_t, std::int32_t> class_row;
  for (auto j : live) {
    std::int32_t const c = m_.job_class[j];
    auto [it, fresh] = class_row.emplace(c, static_cast<std::int32_t>(row_class.size()));
    if (fresh) row_class.push_back(c);
    for (std::int32_t r = 0; r < in_.pending[j].replicas; ++r) {
      bidder_job.push_back(j);
      row_of.push_back(it->second);
    }
  }
  // Bidders grouped by row (stable), which spares the auction a sort per round.
  stable_sort_by(row_of, bidder_job);
  // Iterated unit-capacity auctions. A node's score is the value of its
  // next replica only: once a replica lands, the node's marginal value
  // changes (fuller for E-Binpack, different fragmentation), so slots of one
  // node are not the identical objects the similar-object auction assumes.
  // Each iteration therefore solves the exact assignment of at most one
  // replica per node on current scores, commits it (it always fits: one
  // replica per node, on a feasible cell) and re-scores the touched nodes.
  auto const n_rows = static_cast<std::int32_t>(row_class.size());
  std::vector<std::int32_t> values(static_cast<std::size_t>(n_rows) * n_nodes);
  std::vector<std::int32_t> capacity(static_cast<std::size_t>(n_nodes));
  std::map<std::int32_t, std::vector<replica_placement>> placed;
  std::vector<std::int32_t> remaining(bidder_job.size());
  std::iota(remaining.begin(), remaining.end(), 0);
  std::vector<std::int32_t> sub_row, object_of;
  while (!remaining.empty()) {
    for (std::int32_t r = 0; r < n_rows; ++r) {
      std::copy_n(scores_.begin() + static_cast<std::ptrdiff_t>(row_class[r]) * n_nodes, n_nodes,
                  values.begin() + static_cast<std::ptrdiff_t>(r) * n_nodes);
    }
    for (std::int32_t n = 0; n < n_nodes; ++n) {
      capacity[n] = 0;
      for (std::int32_t r = 0; r < n_rows && capacity[n] == 0; ++r) {
        capacity[n] = values[static_cast<std::size_t>(r) * n_nodes + n] >= 0 ? 1 : 0;
      }
    }
    sub_row.resize(remaining.size());
    for (std::size_t k = 0; k < remaining.size(); ++k) sub_row[k] = row_of[remaining[k]];
    object_of.assign(remaining.size(), -1);
    if (n_rows == 1) {
      // Identical bidders: the optimal assignment is the best nodes by
      // value (lowest index on ties), one per bidder; no auction needed.
      std::vector<std::int32_t> nodes;
      for (std::int32_t n = 0; n < n_nodes; ++n) {
        if (values[n] >= 0) nodes.push_back(n);
      }
      auto const take = std::min(nodes.size(), remaining.size());
      std::partial_sort(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(take), nodes.end(),
                        [&](std::int32_t a, std::int32_t b) { return values[a] != values[b] ? values[a] > values[b] : a < b; });
      for (std::size_t k = 0; k < take; ++k) object_of[k] = nodes[k];
    } else {
      auction_problem p;
    p.n_bidders = static_cast<std::int32_t>(remaining.size());
    p.n_objects = n_nodes;
    p.n_rows = n_rows;
    p.values = values.data();
    p.row_of = sub_row.data();
    p.capacity = capacity.data();
    // Within one score unit per replica of the exact optimum: scores are
    // heuristic values, and exactness would cost ~3 more epsilon phases.
    auction_params prm;
    prm.exact = false;
    backend_.auction(p, prm, object_of);
    }
    std::vector<std::int32_t> next;
    for (std::size_t k = 0; k < remaining.size(); ++k) {
      std::int32_t const b = remaining[k];
      if (object_of[k] >= 0) {
        placed[bidder_job[b]].push_back(commit(object_of[k], row_class[row_of[b]]));
      } else {
        next.push_back(b);
      }
    }
    if (next.size() == remaining.size()) break;  // nobody could be placed: done
    remaining = std::move(next);
  }
  for (auto j : live) {
    auto it = placed.find(j);
    finish_job(j, it == placed.end() ? std::vector<replica_placement>{} : std::move(it->second), out);
  }
}

// ------------------------------------------------------------ shared parts

bool assigner::never_feasible(std::int32_t j, round_result& out) {
  std::int32_t const c = m_.job_class[j];
  for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
    if (initially_feasible(c, n)) return false;
  }
  out.unplaced_jobs.push_back({j, unplaced_reason::no_feasible_node,
                               "no node can host one replica (model, pool, size or health)"});
  return true;
}

void assigner::finish_job(std::int32_t j, std::vector<replica_placement>&& placed, round_result& out) {
  auto const& job = in_.pending[j];
  auto const got = static_cast<std::int32_t>(placed.size());
  if (got == 0) {
    out.unplaced_jobs.push_back({j, job.gang ? unplaced_reason::gang_incomplete : unplaced_reason::insufficient_capacity,
                                 "no capacity for a replica this round"});
    return;
  }
  if (got < job.replicas) {
    out.unplaced_jobs.push_back({j, unplaced_reason::insufficient_capacity,
                                 std::to_string(got) + " of " + std::to_string(job.replicas) + " replicas placed"});
  }
  out.metrics.jobs_placed += 1;
  out.metrics.replicas_placed += got;
  out.metrics.gpu_milli_placed += job.per_replica.gpu_milli_total() * got;
  out.placements.push_back({j, std::move(placed)});
}

bool assigner::initially_feasible(std::int32_t c, std::int32_t n) const {
  // Feasible now, or at least on the node's capacity (so a full node
  // counts as "insufficient capacity", not "no feasible node").
  if (scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n] >= 0) return true;
  if (!node_admits(op_.nv, op_.cv, c, n)) return false;
  auto const& nd = in_.state.nodes[n];
  auto const& cv = op_.cv;
  if (cv.cpu[c] > nd.cpu_milli_capacity || cv.mem[c] > nd.memory_mib_capacity) return false;
  return cv.gpus[c] == 0 || m_.gpu_capacity[n] / milli_per_gpu >= cv.gpus[c];
}

std::int32_t assigner::score(std::int32_t c, std::int32_t n) const {
  if (mode_ != assign_mode::kube) return scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n];
  return op_.score(c, n);  // kube-style: every node scored anew per replica
}

std::int64_t assigner::topo_bonus(job const& job, std::int32_t anchor, std::int32_t n) const {
  // Replicas of one multi-replica job that cares about the network prefer
  // nodes sharing deeper domains with its first replica.
  if (anchor < 0 || mode_ == assign_mode::kube) return 0;
  if (n == anchor) return static_cast<std::int64_t>(in_.pol.w.topology) * 1000;
  std::int32_t shared = 0;
  for (std::int32_t l = levels_ - 1; l >= 0; --l) {
    auto const d = domain_of(n, l);
    if (d >= 0 && d == domain_of(anchor, l)) { shared = l + 1; break; }
  }
  return static_cast<std::int64_t>(in_.pol.w.topology) * 1000 * shared / (levels_ + 1);
}

std::int32_t assigner::best_node(job const& job, std::int32_t c, std::int32_t level, std::int32_t domain,
                                 std::int32_t anchor) const {
  std::int32_t best = -1;
  std::int64_t best_s = -1;
  for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
    if (domain >= 0 && domain_of(n, level) != domain) continue;
    std::int32_t const s0 = score(c, n);
    if (s0 < 0) continue;
    std::int64_t const s = s0 + topo_bonus(job, anchor, n);
    if (s > best_s) { best_s = s; best = n; }  // strict: lowest index wins ties
  }
  return best;
}

void assigner::place_replicas(job const& job, std::int32_t c, std::int32_t level, std::int32_t domain,
                              std::int32_t count, std::vector<replica_placement>& placed) {
  bool const local = wants_locality(job);
  for (std::int32_t r = 0; r < count; ++r) {
    std::int32_t const anchor = local && !placed.empty() ? placed.front().node : -1;
    std::int32_t const n = best_node(job, c, level, domain, anchor);
    if (n < 0) return;
    placed.push_back(commit(n, c));
  }
}

std::int32_t assigner::fit_count(std::int32_t c, std::int32_t n) const {
  if (mode_ != assign_mode::kube && score(c, n) < 0) return 0;  // the matrix knows; skip the re-check
  return kernels::fit_count(op_.nv, op_.cv, c, n);
}

replica_placement assigner::commit(std::int32_t n, std::int32_t c) {
  auto const& cv = op_.cv;
  replica_placement rp;
  rp.node = n;
  rp.gpu_milli = cv.gpus[c] > 0 ? cv.milli[c] : milli_per_gpu;
  std::int32_t* f = m_.gpu_free.data() + m_.gpu_begin[n];
  std::int32_t const g = m_.gpu_begin[n + 1] - m_.gpu_begin[n];
  // The same rule as kernels::take_gpus, recording which GPUs were taken.
  std::vector<std::int32_t> before(f, f + g);
  if (!take_gpus(f, g, cv.gpus[c], cv.milli[c], m_.gpu_island.data() + m_.gpu_begin[n])) {
    throw logic_error(error_code::internal, "assignment chose a node whose GPUs do not fit");
  }
  for (std::int32_t i = 0; i < g; ++i) {
    if (f[i] != before[i]) rp.gpus.push_back(i);
  }
  m_.cpu_free[n] -= cv.cpu[c];
  m_.mem_free[n] -= cv.mem[c];
  if (m_.cpu_free[n] < 0 || m_.mem_free[n] < 0) {
    throw logic_error(error_code::internal, "assignment over-committed CPU or memory");
  }
  refresh(n);
  return rp;
}

void assigner::release_all(std::int32_t c, std::vector<replica_placement>& placed) {
  auto const& cv = op_.cv;
  for (auto const& rp : placed) {
    std::int32_t* f = m_.gpu_free.data() + m_.gpu_begin[rp.node];
    for (auto i : rp.gpus) f[i] += rp.gpu_milli;
    m_.cpu_free[rp.node] += cv.cpu[c];
    m_.mem_free[rp.node] += cv.mem[c];
    refresh(rp.node);
  }
  placed.clear();
}

void assigner::refresh(std::int32_t n) {
  if (mode_ == assign_mode::kube) return;  // kube scores on the fly
  std::int32_t const n_nodes = m_.n_nodes();
  std::int64_t const before = op_.fragmentation_before(n);
  for (std::int32_t c = 0; c < m_.n_classes(); ++c) {
    scores_[static_cast<std::size_t>(c) * n_nodes + n] = op_.score(c, n, before);
  }
}

std::string assigner::level_name(std::int32_t l) const {
  auto const& names = in_.state.topo.level_names;
  return l >= 0 && l < static_cast<std::int32_t>(names.size()) ? "'" + names[l] + "'" : std::to_string(l);
}

}  // namespace placer::detail
