// The assign stage (see assigner.hpp).
#include "assigner.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <numeric>
#include <utility>

namespace placer::detail {

using namespace placer::kernels;

namespace {

bool wants_locality(job const& j) {
  return j.replicas > 1 && (j.gang || j.topo_mode != topology_mode::none || j.network_sensitivity > 0.0F);
}

/// Stably sorts `key` ascending and applies the same permutation to `other`.
/// Sorting (key, position) pairs with std::sort gives the stable order
/// without std::stable_sort's temporary buffer; `keyed` and `permuted` are
/// the caller's reused scratch.
void stable_sort_by(std::vector<std::int32_t>& key, std::vector<std::int32_t>& other,
                    std::vector<std::pair<std::int32_t, std::int32_t>>& keyed, std::vector<std::int32_t>& permuted) {
  auto const n = key.size();
  keyed.resize(n);
  for (std::size_t k = 0; k < n; ++k) keyed[k] = {key[k], static_cast<std::int32_t>(k)};
  std::sort(keyed.begin(), keyed.end());
  permuted.resize(n);
  for (std::size_t k = 0; k < n; ++k) permuted[k] = other[static_cast<std::size_t>(keyed[k].second)];
  for (std::size_t k = 0; k < n; ++k) key[k] = keyed[k].first;
  std::copy(permuted.begin(), permuted.end(), other.begin());
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
  std::vector<std::int32_t> order;
  job_order(in, largest_first, order);
  return order;
}

void job_order(round_input const& in, bool largest_first, std::vector<std::int32_t>& order) {
  order.resize(in.pending.size());
  std::iota(order.begin(), order.end(), 0);
  auto const before = [&](std::int32_t a, std::int32_t b) {
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
  };
  // Stable order (ties by index) through std::sort, which needs no
  // temporary buffer, unlike std::stable_sort.
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    if (before(a, b)) return true;
    if (before(b, a)) return false;
    return a < b;
  });
}

assigner::assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, score_params p,
                   backend& b, assign_mode mode, assigner_scratch& scratch)
    : in_(in), m_(m), scores_(scores), op_{m.nodes(), m.classes(), m.tasks(), p}, backend_(b), mode_(mode),
      s_(scratch) {
  levels_ = std::max(in.state.topo.levels(), 1);
  // node_domain_paths(in.state), into the reused buffer.
  auto const& c = in.state;
  s_.paths.assign(c.nodes.size() * static_cast<std::size_t>(levels_), -1);
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    for (std::int32_t d = c.nodes[i].domain; d >= 0; d = c.topo.domains[d].parent) {
      s_.paths[i * static_cast<std::size_t>(levels_) + static_cast<std::size_t>(c.topo.domains[d].level)] = d;
    }
  }
  // (node, domain) entries sorted by domain, the keys of domain_capacity.
  s_.entry_node.clear();
  s_.entry_domain.clear();
  for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
    for (std::int32_t l = 0; l < levels_; ++l) {
      if (auto const d = domain_of(n, l); d >= 0) {
        s_.entry_node.push_back(n);
        s_.entry_domain.push_back(d);
      }
    }
  }
  stable_sort_by(s_.entry_domain, s_.entry_node, s_.keyed, s_.permuted);
}

void assigner::run(round_result& out, std::function<bool()> const& out_of_time) {
  job_order(in_, mode_ == assign_mode::placer, s_.order);
  auto const& order = s_.order;
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
    // Tiers largest first, queue order inside a tier: (-tier, position).
    auto& tiers = s_.tiers;
    tiers.clear();
    for (std::size_t k = begin; k < end; ++k) {
      tiers.emplace_back(-tier_of(in_.pending[order[k]].per_replica), static_cast<std::int32_t>(k));
    }
    std::sort(tiers.begin(), tiers.end());
    for (std::size_t t0 = 0; t0 < tiers.size();) {
      std::size_t t1 = t0;
      while (t1 < tiers.size() && tiers[t1].first == tiers[t0].first) ++t1;
      auto& rest = s_.tier_jobs;
      rest.clear();
      for (std::size_t t = t0; t < t1; ++t) {
        std::int32_t const j = order[static_cast<std::size_t>(tiers[t].second)];
        if (!wants_locality(in_.pending[j])) {
          rest.push_back(j);
          continue;
        }
        if (out_of_time()) { expire(j); continue; }
        place_locality(j, out);
      }
      t0 = t1;
      if (out_of_time()) {
        for (auto j : rest) expire(j);
        continue;
      }
      place_tier(rest, out);
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
  auto& cap = s_.cap;
  cap.assign(domains.size(), 0);
  if (!domains.empty()) {
    domain_index_view idx;
    idx.n_entries = static_cast<std::int32_t>(s_.entry_node.size());
    idx.n_domains = static_cast<std::int32_t>(domains.size());
    idx.node = s_.entry_node.data();
    idx.domain = s_.entry_domain.data();
    backend_.domain_capacity(m_.nodes(), m_.classes(), c, idx, cap);
  }
  // The lowest (deepest) domain that holds the whole job, best fit first.
  std::int32_t const top = required ? job.topology_level : 0;
  if (!domains.empty() && mode_ != assign_mode::kube) {
    auto& fits = s_.fits;
    for (std::int32_t level = levels_ - 1; level >= top && placed.empty(); --level) {
      fits.clear();
      for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()); ++d) {
        if (domains[d].level == level && cap[d] >= want) fits.push_back(d);
      }
      // Least spare capacity first, ties by domain index (a stable sort of
      // the ascending list, without std::stable_sort's buffer).
      std::sort(fits.begin(), fits.end(), [&](auto a, auto b) { return cap[a] != cap[b] ? cap[a] < cap[b] : a < b; });
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
  } else if (placed.empty() && !required && (mode_ == assign_mode::kube || domains.empty())) {
    // kube: no topology awareness; no topology at all: the cluster is the domain.
    place_replicas(job, c, -1, -1, want, placed);
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
  // Bidders: one per replica. Rows: the classes present, compacted (in
  // order of first appearance). Every buffer is the reused scratch.
  auto& live = s_.live;
  live.clear();
  for (auto j : jobs) {
    if (!never_feasible(j, out)) live.push_back(j);
  }
  if (live.empty()) return;
  std::int32_t const n_nodes = m_.n_nodes();
  auto& bidder_job = s_.bidder_job;
  auto& bidder_live = s_.bidder_live;  // bidder -> index into live
  auto& row_of = s_.row_of;
  auto& row_class = s_.row_class;
  auto& class_row = s_.class_row;  // class -> row, -1 = none yet
  bidder_job.clear();
  bidder_live.clear();
  row_of.clear();
  row_class.clear();
  class_row.assign(static_cast<std::size_t>(m_.n_classes()), -1);
  for (std::size_t k = 0; k < live.size(); ++k) {
    std::int32_t const j = live[k];
    std::int32_t const c = m_.job_class[j];
    if (class_row[c] < 0) {
      class_row[c] = static_cast<std::int32_t>(row_class.size());
      row_class.push_back(c);
    }
    for (std::int32_t r = 0; r < in_.pending[j].replicas; ++r) {
      bidder_live.push_back(static_cast<std::int32_t>(k));
      row_of.push_back(class_row[c]);
    }
  }
  // Bidders grouped by row (stable), which spares the auction a sort per round.
  stable_sort_by(row_of, bidder_live, s_.keyed, s_.permuted);
  bidder_job.resize(bidder_live.size());
  for (std::size_t b = 0; b < bidder_live.size(); ++b) bidder_job[b] = live[static_cast<std::size_t>(bidder_live[b])];
  // Iterated unit-capacity auctions. A node's score is the value of its
  // next replica only: once a replica lands, the node's marginal value
  // changes (fuller for E-Binpack, different fragmentation), so slots of one
  // node are not the identical objects the similar-object auction assumes.
  // Each iteration therefore solves the exact assignment of at most one
  // replica per node on current scores, commits it (it always fits: one
  // replica per node, on a feasible cell) and re-scores the touched nodes.
  auto const n_rows = static_cast<std::int32_t>(row_class.size());
  auto& values = s_.values;
  auto& capacity = s_.capacity;
  values.resize(static_cast<std::size_t>(n_rows) * n_nodes);  // every cell is written below
  capacity.resize(static_cast<std::size_t>(n_nodes));
  auto& placed = s_.placed;  // per live job
  placed.clear();
  placed.resize(live.size());
  auto& remaining = s_.remaining;
  remaining.resize(bidder_job.size());
  std::iota(remaining.begin(), remaining.end(), 0);
  auto& next = s_.next;
  auto& sub_row = s_.sub_row;
  auto& object_of = s_.object_of;
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
      auto& nodes = s_.nodes;
      nodes.clear();
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
    next.clear();
    for (std::size_t k = 0; k < remaining.size(); ++k) {
      std::int32_t const b = remaining[k];
      if (object_of[k] >= 0) {
        auto& got = placed[static_cast<std::size_t>(bidder_live[b])];
        if (got.empty()) got.reserve(static_cast<std::size_t>(in_.pending[bidder_job[b]].replicas));  // one allocation
        got.push_back(commit(object_of[k], row_class[row_of[b]]));
      } else {
        next.push_back(b);
      }
    }
    if (next.size() == remaining.size()) break;  // nobody could be placed: done
    remaining.swap(next);
  }
  for (std::size_t k = 0; k < live.size(); ++k) finish_job(live[k], std::move(placed[k]), out);
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
    if (placed.empty()) placed.reserve(static_cast<std::size_t>(job.replicas));  // one allocation per job
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
  auto& before = s_.gpus_before;
  before.assign(f, f + g);
  if (!take_gpus(f, g, cv.gpus[c], cv.milli[c], m_.gpu_island.data() + m_.gpu_begin[n])) {
    throw logic_error(error_code::internal, "assignment chose a node whose GPUs do not fit");
  }
  std::int32_t taken = 0;
  for (std::int32_t i = 0; i < g; ++i) taken += f[i] != before[i] ? 1 : 0;
  rp.gpus.reserve(static_cast<std::size_t>(taken));  // one allocation for the result, not one per doubling
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
