// The assign stage (see assigner.hpp).
#include "assigner.hpp"

#include "queue_order.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>
#include <utility>

namespace placer::detail {

using namespace placer::kernels;

namespace {

/// A set of nodes as a bit a node: marked, then read back ascending (each
/// once) and cleared, in O(items + span / 64); all clear between uses.
struct node_bitset {
  std::vector<std::uint64_t>& bits;
  std::int32_t lo = std::numeric_limits<std::int32_t>::max(), hi = -1;
  node_bitset(std::vector<std::uint64_t>& b, std::int32_t n_nodes) : bits(b) {
    bits.resize(static_cast<std::size_t>(n_nodes) / 64 + 1);
  }
  void mark(std::int32_t n) {
    bits[static_cast<std::size_t>(n) / 64] |= std::uint64_t{1} << (n % 64);
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  template <class F>
  void drain(F&& f) {
    for (std::int32_t w = lo / 64; hi >= 0 && w <= hi / 64; ++w) {
      for (auto word = bits[static_cast<std::size_t>(w)]; word != 0; word &= word - 1) f(64 * w + std::countr_zero(word));
      bits[static_cast<std::size_t>(w)] = 0;
    }
    lo = std::numeric_limits<std::int32_t>::max();
    hi = -1;
  }
};

bool wants_locality(job const& j) {
  return j.replicas > 1 &&
         (j.gang || j.distinct_nodes || j.topo_mode != topology_mode::none || j.network_sensitivity > 0.0F);
}

/// Shape tiers, largest first: whole GPUs by count, then
/// fractional shares, then CPU-only.
std::int32_t tier_of(demand const& d) {
  if (d.gpus == 0) return 0;
  if (d.fractional()) return 1;
  return 1 + d.gpus;
}

/// The tier of a whole locality job, as if its replicas were one (reorder::
/// whole_jobs). Other jobs keep tier_of.
std::int64_t job_tier_of(job const& j) {
  if (!wants_locality(j) || j.per_replica.gpus == 0) return tier_of(j.per_replica);
  return 1 + (j.per_replica.gpu_milli_total() * j.replicas + milli_per_gpu - 1) / milli_per_gpu;
}

// A placer round's group keys (assigner::run): level x level_span plus an
// offset, groups in key order. The offsets: -level_span / 2 + k for the
// k-th job of reorder::first; minus the tier for the largest-first groups;
// past_at and up for the jobs past their level's queue window, in regions
// of window_span (the lower half: jobs waiting for a window, in order; the
// upper half: a window's jobs, minus the tier); last_at + k for the k-th of
// reorder::last.
constexpr std::int64_t level_span = std::int64_t{1} << 32;
constexpr std::int64_t past_at = level_span / 8;
constexpr std::int64_t last_at = level_span / 4;
constexpr std::int64_t window_span = std::int64_t{1} << 22;
/// The most waiting jobs a window drawn by the program reads (chain_window):
/// a block's slots and sorts are over them, and a level's later windows
/// are drawn over the jobs left, so more would make a round's host work
/// grow with its windows times its waiting jobs.
constexpr std::size_t window_cut = 512;

/// What a job asks for in all: GPU milli and CPU milli.
std::pair<std::int64_t, std::int64_t> job_demand(job const& j) {
  return {j.per_replica.gpu_milli_total() * j.replicas, j.per_replica.cpu_milli * j.replicas};
}

/// The level of a key at or past past_at.
constexpr std::int64_t level_of_key(std::int64_t key) { return (key - past_at) >> 32; }

/// Whether the key is a job's past its level's window still waiting for one.
constexpr bool waits_in_order(std::int64_t key) {
  auto const offset = key - past_at - (level_of_key(key) << 32);
  return offset >= 0 && offset < last_at - past_at && (offset & (window_span - 1)) < window_span / 2;
}

/// The region of a waiting job's key: its next window is drawn in the
/// region's upper half, the jobs past it wait in the next one's lower
/// half. -1 where the level has no region left (the rest go one at a time).
constexpr std::int64_t window_region(std::int64_t key) {
  std::int64_t const w = (key - level_of_key(key) * level_span - past_at) / window_span;
  return w + 1 < (last_at - past_at) / window_span ? w : -1;
}

/// The job must sit whole under one domain of its topology level.
bool level_required(job const& j) { return j.topo_mode == topology_mode::required && j.topology_level >= 0; }

/// Gives back replica rp of class c (give_replica: the GPUs it lists).
void give_back(node_view const& nv, class_view const& cv, std::int32_t c, replica_placement const& rp,
               round_matrices& m) {
  std::uint64_t taken = 0;
  for (auto const i : rp.gpus) taken |= std::uint64_t{1} << i;
  give_replica(nv, cv, c, rp.node, taken, m.gpu_free.data(), m.cpu_free.data(), m.mem_free.data());
}

}  // namespace

bool verify_scores() { return std::getenv("PLACER_VERIFY_SCORES") != nullptr; }

bool assigner::goes_local(job const& j) const {
  // Placer sends single-replica jobs with a topology need to the tier
  // program (one node is always inside one domain); greedy and kube send
  // every required-topology job here.
  return wants_locality(j) || (mode_ != assign_mode::placer && j.topo_mode == topology_mode::required);
}

void job_order(round_input const& in, bool largest_first, std::vector<std::int32_t>& order, order_scratch& s) {
  // The jobs by group (priority, then size and models: group_order), each
  // group's in (submit time, index) order, which is the queue's own where
  // submit times do not go back. One std::sort of the five fields was 5%
  // of the 10k, openb and 100k rounds (10k: 57 us a call, twice a round).
  auto const n = in.pending.size();
  auto& keys = s.keys;
  keys.resize(n);
  bool in_submit_order = true;
  for (std::size_t k = 0; k < n; ++k) {
    auto const& x = in.pending[k];
    auto& key = keys[k];
    key.priority = -static_cast<std::int64_t>(x.priority);
    key.size = 0;
    key.models = 0;
    if (largest_first) {
      key.size = -x.per_replica.gpu_milli_total() * x.replicas;
      // Most constrained first: a job limited to few GPU models has fewer
      // places to go than one that takes any (0 = any model).
      key.models = x.per_replica.gpus > 0 && !x.allowed_gpu_models.empty()
                       ? static_cast<std::int64_t>(x.allowed_gpu_models.size())
                       : 1000;
    }
    key.submit_time = x.submit_time;
    key.index = static_cast<std::int32_t>(k);
    in_submit_order = in_submit_order && (k == 0 || keys[k - 1].submit_time <= key.submit_time);
  }
  auto& base = s.base;
  base.resize(n);
  for (std::size_t k = 0; k < n; ++k) base[k] = static_cast<std::int32_t>(k);
  if (!in_submit_order) {
    std::sort(base.begin(), base.end(), [&](std::int32_t a, std::int32_t b) {
      auto const ta = keys[static_cast<std::size_t>(a)].submit_time, tb = keys[static_cast<std::size_t>(b)].submit_time;
      return ta != tb ? ta < tb : a < b;
    });
  }
  group_order(
      base,
      [&](std::int32_t k) {
        auto const& key = keys[static_cast<std::size_t>(k)];
        return order_key{key.priority, key.size, key.models, 0, 0};
      },
      [](order_key const& key) {
        std::uint64_t h = static_cast<std::uint64_t>(key.priority) * 0x9E3779B97F4A7C15ULL;
        h = (h ^ static_cast<std::uint64_t>(key.size)) * 0xBF58476D1CE4E5B9ULL;
        h = (h ^ static_cast<std::uint64_t>(key.models)) * 0x94D049BB133111EBULL;
        return h ^ (h >> 29);
      },
      s.groups, order);
  // group_order left each group's end in its start, the keys sorted.
  s.priority.resize(n);
  std::size_t at = 0;
  for (auto const& [key, g] : s.groups.keys) {
    auto const end = static_cast<std::size_t>(s.groups.starts[static_cast<std::size_t>(g)]);
    auto const first = s.priority.begin();
    std::fill(first + static_cast<std::ptrdiff_t>(at), first + static_cast<std::ptrdiff_t>(end),
              static_cast<std::int32_t>(-key.priority));
    at = end;
  }
}

assigner::assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, score_params p,
                   backend& b, assign_mode mode, assigner_scratch& scratch)
    : in_(in), m_(m), scores_(scores), op_{m.nodes(), m.classes(), m.tasks(), p}, backend_(b), mode_(mode),
      s_(scratch) {
  levels_ = std::max(in.state.topo.levels(), 1);
  auto const& c = in.state;
  node_domain_paths(c, s_.paths);
  // (node, domain) entries grouped by domain, in node order within one (a
  // counting sort), and each domain's entries as a CSR over them: the keys
  // of domain_capacity. A level at a time, by runs of nodes in one domain
  // (a domain's nodes are mostly consecutive): a count or cursor in memory
  // bumped a node at a time waited on its own store, the root's at every
  // node (100k: 0.13 ms of each assignment).
  auto const n_domains = c.topo.domains.size();
  auto const levels = static_cast<std::size_t>(levels_);
  auto const n_nodes = c.nodes.size();
  auto each_run = [&](auto&& run) {  // run(domain, first node, end node) over every level's runs
    for (std::size_t l = 0; l < levels; ++l) {
      for (std::size_t n = 0; n < n_nodes;) {
        auto const d = s_.paths[n * levels + l];
        std::size_t e = n + 1;
        while (e < n_nodes && s_.paths[e * levels + l] == d) ++e;
        if (d >= 0) run(static_cast<std::size_t>(d), n, e);
        n = e;
      }
    }
  };
  s_.domain_begin.assign(n_domains + 1, 0);
  each_run([&](std::size_t d, std::size_t n, std::size_t e) { s_.domain_begin[d + 1] += static_cast<std::int32_t>(e - n); });
  for (std::size_t d = 0; d < n_domains; ++d) s_.domain_begin[d + 1] += s_.domain_begin[d];
  s_.domain_level.resize(n_domains);
  for (std::size_t d = 0; d < n_domains; ++d) s_.domain_level[d] = c.topo.domains[d].level;
  s_.entry_node.resize(static_cast<std::size_t>(s_.domain_begin[n_domains]));
  auto& cursor = s_.domain_cursor;
  cursor.assign(s_.domain_begin.begin(), s_.domain_begin.end() - 1);
  each_run([&](std::size_t d, std::size_t n, std::size_t e) {
    auto at = static_cast<std::size_t>(cursor[d]);
    for (; n < e; ++n) s_.entry_node[at++] = static_cast<std::int32_t>(n);
    cursor[d] = static_cast<std::int32_t>(at);
  });
  s_.class_feasible.assign(static_cast<std::size_t>(m_.n_classes()), -1);
  s_.class_full.assign(static_cast<std::size_t>(m_.n_classes()), 0);
  s_.stamp.assign(static_cast<std::size_t>(m_.n_nodes()), -1);  // the scored matrix is current
  s_.fresh.assign(static_cast<std::size_t>(m_.n_classes()), 0);
  s_.changes.clear();
  s_.fresh_at.assign(static_cast<std::size_t>(m_.n_classes()), 0);
  verify_ = verify_scores();
}

void assigner::run(round_result& out, std::function<bool()> const& out_of_time, reorder const& r) {
  s_.recorded.clear();
  whole_jobs_ = r.whole_jobs;
  job_order(in_, mode_ == assign_mode::placer, s_.order, s_.order_keys);
  auto const& order = s_.order;
  // Locality jobs per class: a class's domain capacities are kept current
  // through the host's commits while any of its jobs is still to come.
  s_.locality_left.assign(static_cast<std::size_t>(m_.n_classes()), 0);
  for (auto j : order) {
    if (goes_local(in_.pending[j])) ++s_.locality_left[static_cast<std::size_t>(m_.job_class[j])];
  }
  drop_caps();
  auto expire = [&](std::int32_t j) {
    out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
  };
  if (mode_ != assign_mode::placer) {
    // Strict order: the queues (by name) whose head could not start, and that head.
    bool const strict = mode_ == assign_mode::greedy && in_.pol.order == queue_order::strict;
    std::vector<std::pair<std::string_view, std::int32_t>> blocked;
    for (auto j : order) {
      auto const& q = in_.pending[j].queue;
      if (strict) {
        auto const b = std::find_if(blocked.begin(), blocked.end(), [&](auto const& x) { return x.first == q; });
        if (b != blocked.end()) {
          out.unplaced_jobs.push_back({j, unplaced_reason::queue_blocked,
                                       "waits behind " + in_.pending[b->second].name + ", the first job of " +
                                           (q.empty() ? std::string("the default queue") : "queue '" + q + "'") +
                                           " that cannot start (strict order)"});
          continue;
        }
      }
      if (out_of_time()) { expire(j); continue; }
      auto const before = out.placements.size();
      place_greedy(j, out);
      if (strict && out.placements.size() == before && waits_for_capacity(out.unplaced_jobs.back().reason)) {
        blocked.emplace_back(q, j);
      }
    }
    return;
  }
  // Placer: one priority level at a time; inside it, shape tiers from the
  // largest replica down. In each tier the locality jobs (gangs, topology
  // needs) go first, largest first, then the rest through the tier program. A
  // gang of small replicas thus waits for the big single-node shapes, so it
  // does not break the free nodes they need (E-Binpack).
  // Groups: (priority level, -tier, position in order), sorted; a group is
  // a run of equal (level, tier). A job in r.first or r.last is a group of
  // its own, ahead of or after its level's tiers.
  auto& tiers = s_.tiers;
  tiers.clear();
  std::int32_t level = 0;
  // Per job: its offset inside its level for the jobs r moves, -1 for the
  // others, -2 for those it skips, -3 - k for the k-th past its level's
  // queue window (queue_window).
  auto& moved = s_.moved;
  moved.assign(in_.pending.size(), -1);
  auto const first_at = -level_span / 2;
  for (std::size_t f = 0; f < r.first.size(); ++f) moved[static_cast<std::size_t>(r.first[f])] = static_cast<std::int32_t>(f);
  for (std::size_t l = 0; l < r.last.size(); ++l) {
    moved[static_cast<std::size_t>(r.last[l])] = static_cast<std::int32_t>(r.first.size() + l);
  }
  for (auto j : r.skip) moved[static_cast<std::size_t>(j)] = -2;
  if (in_.pol.order != queue_order::pack) queue_window(moved);
  for (std::size_t k = 0; k < order.size(); ++k) {
    auto const j = order[k];
    if (k > 0 && in_.pending[j].priority != in_.pending[order[k - 1]].priority) ++level;
    auto const& jb = in_.pending[j];
    auto const mv = moved[static_cast<std::size_t>(j)];
    if (mv == -2) continue;
    std::int64_t key = level * level_span - (r.whole_jobs ? job_tier_of(jb) : tier_of(jb.per_replica));
    if (mv <= -3) key = level * level_span + past_at + (-3 - mv);  // past the window, in order
    if (mv >= 0) {
      auto const f = static_cast<std::int64_t>(mv), n_first = static_cast<std::int64_t>(r.first.size());
      key = level * level_span + (f < n_first ? first_at + f : last_at + f - n_first);
    }
    tiers.emplace_back(key, static_cast<std::int32_t>(k));
  }
  // Sorted by (key, position): positions were pushed ascending, so by key
  // stably (group_order: a round's tiers are a few dozen keys).
  auto& tier_base = s_.tier_base;
  tier_base.resize(tiers.size());
  for (std::size_t t = 0; t < tiers.size(); ++t) tier_base[t] = static_cast<std::int32_t>(t);
  group_order(
      tier_base, [&](std::int32_t t) { return tiers[static_cast<std::size_t>(t)].first; },
      [](std::int64_t key) {
        auto const h = static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ULL;
        return h ^ (h >> 29);
      },
      s_.tier_groups, s_.tier_order);
  s_.tiers_sorted.resize(tiers.size());
  for (std::size_t t = 0; t < tiers.size(); ++t) s_.tiers_sorted[t] = tiers[static_cast<std::size_t>(s_.tier_order[t])];
  tiers.swap(s_.tiers_sorted);
  number_groups();
  s_.live_class.resize(static_cast<std::size_t>(m_.n_classes()));
  // State labels start as the score stage's twins; the tier programs keep
  // them (the host's own commits leave them: the program compares states
  // before it copies a column).
  s_.state.resize(static_cast<std::size_t>(m_.n_nodes()));
  if (m_.same_as.empty()) {
    std::iota(s_.state.begin(), s_.state.end(), 0);
  } else {
    std::copy(m_.same_as.begin(), m_.same_as.end(), s_.state.begin());
  }
  s_.recorded.assign(in_.pending.size(), 0);
  // One chain for the round; where a window left jobs past it, the chain
  // stopped there and the rest is chained again from them.
  for (std::size_t t0 = 0; t0 < tiers.size();) {
    chain_groups(t0, out, out_of_time);
    t0 = run_chain(out, true);
  }
}

void assigner::number_groups() {
  // A class is live while a group still ahead uses it: the tier programs
  // keep only live classes' cells current (the others are never read again).
  auto const& tiers = s_.tiers;
  auto& last_group = s_.class_last_group;
  last_group.assign(static_cast<std::size_t>(m_.n_classes()), -1);
  s_.group_of.assign(in_.pending.size(), -1);
  std::int32_t group = 0;
  for (std::size_t t = 0; t < tiers.size(); ++t) {
    if (t > 0 && tiers[t].first != tiers[t - 1].first) ++group;
    auto const j = s_.order[static_cast<std::size_t>(tiers[t].second)];
    last_group[static_cast<std::size_t>(m_.job_class[j])] = group;
    s_.group_of[static_cast<std::size_t>(j)] = group;
  }
}

void assigner::chain_groups(std::size_t t0, round_result& out, std::function<bool()> const& out_of_time) {
  auto const& tiers = s_.tiers;
  auto job_at = [&](std::size_t t) { return s_.order[static_cast<std::size_t>(tiers[t].second)]; };
  auto expire = [&](std::int32_t j) {
    if (record_once(j)) out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
  };
  auto const& last_group = s_.class_last_group;
  while (t0 < tiers.size()) {
    auto const group = s_.group_of[static_cast<std::size_t>(job_at(t0))];
    for (std::size_t c = 0; c < last_group.size(); ++c) s_.live_class[c] = last_group[c] >= group ? 1 : 0;
    if (waits_in_order(tiers[t0].first)) {
      // Jobs past their level's window: each a group of its own until their
      // next window is drawn, here where no tier is pending (what is free
      // is known), else by the program where the chain gets here.
      if (s_.chain_len == 0) {
        if (draw_here(t0)) continue;
      } else if (auto const t_end = chain_window(t0, out); t_end > t0) {
        t0 = t_end;
        continue;
      }
    }
    std::size_t t1 = t0;
    while (t1 < tiers.size() && tiers[t1].first == tiers[t0].first) ++t1;
    auto& rest = s_.tier_jobs;
    rest.clear();
    // The group's locality jobs, each a tier of the chain that the program
    // places whole (tier_locality), then its other jobs' tier.
    for (std::size_t t = t0; t < t1; ++t) {
      std::int32_t const j = job_at(t);
      if (!wants_locality(in_.pending[j])) {
        rest.push_back(j);
        continue;
      }
      if (out_of_time()) { expire(j); continue; }
      chain_local(j, out);
    }
    t0 = t1;
    if (out_of_time()) {
      for (auto j : rest) expire(j);
      continue;
    }
    chain_tier(rest, out);
  }
}

std::size_t assigner::chain_window(std::size_t t0, round_result& out) {
  // The jobs past the window of a level, from t0 on, are in submission
  // order. The program draws the next window where the chain gets here
  // (kernels::tier_window): the prefix that the capacity free then holds,
  // closed at the first job that does not fit what the jobs before it in
  // the window leave, as queue_window's (a job larger than all of it
  // cannot start: it goes first, alone, and does not close the window);
  // the window packed largest first, the rest waiting for the window
  // after. So the draw's slots are the groups it may make: the jobs that
  // cannot start, then each tier of the window, largest first; in each,
  // the locality jobs one by one, then the others' tier.
  std::int64_t const w = window_region(s_.tiers[t0].first);
  if (w < 0) return t0;
  auto const& tiers = s_.tiers;
  auto job_at = [&](std::size_t t) { return s_.order[static_cast<std::size_t>(tiers[t].second)]; };
  if (s_.blocks.size() <= s_.n_blocks) s_.blocks.resize(s_.n_blocks + 1);
  auto const block = static_cast<std::int32_t>(s_.n_blocks++);
  auto& b = s_.blocks[static_cast<std::size_t>(block)];
  b.t0 = t0;
  auto const t_end = b.t_end = window_jobs(t0, b);
  b.w = w;
  // The jobs drawn: the prefix whose jobs that may start ask for no more
  // than is free now (the draw's free capacity is no more: the tiers before
  // it only take), and the one past it, window_cut at most. A window
  // reaching past them is drawn again on the host (tier_window::beyond_gpu).
  std::size_t n_jobs = 0;
  {
    auto const [gpu, cpu] = free_capacity();
    std::int64_t g = 0, c = 0;
    while (n_jobs < std::min(t_end - t0, window_cut) && g <= gpu && c <= cpu) {
      if (b.demand[2 * n_jobs] <= gpu && b.demand[2 * n_jobs + 1] <= cpu) {
        g += b.demand[2 * n_jobs];
        c += b.demand[2 * n_jobs + 1];
      }
      ++n_jobs;
    }
  }
  b.n_cut = n_jobs;
  b.slot.assign(2 * n_jobs, -1);
  // The waiting jobs by (tier, position), as the window's groups order them
  // (a group's jobs by position in the queue order).
  auto& by = s_.tier_base;
  by.resize(n_jobs);
  std::iota(by.begin(), by.end(), 0);
  auto tier_at = [&](std::size_t i) { return b.tier[i]; };
  auto const position = [&](std::int32_t i) { return tiers[t0 + static_cast<std::size_t>(i)].second; };
  std::sort(by.begin(), by.end(), [&](std::int32_t x, std::int32_t y) {
    auto const tx = tier_at(static_cast<std::size_t>(x)), ty = tier_at(static_cast<std::size_t>(y));
    return tx != ty ? tx > ty : position(x) < position(y);
  });
  auto& draw = next_chained();
  draw.jobs.clear();
  draw.row_class.clear();
  draw.demand.clear();
  draw.row_cap.clear();
  draw.block = block;
  draw.window.draw = true;
  b.draw = s_.chain_len;
  chain_add(draw);
  // One group's slots: its locality jobs', then its other jobs' tier;
  // its jobs are by[from, to), `code` what the draw gives them.
  std::int32_t n_slots = 0;
  auto& rest = s_.tier_jobs;
  auto group_slots = [&](std::vector<std::int32_t> const& by, std::size_t from, std::size_t to, std::int32_t code) {
    auto const side = static_cast<std::size_t>(code == 2 ? 1 : 0);
    rest.clear();
    auto& codes = s_.cursor;  // rest's code indices
    codes.clear();
    for (std::size_t k = from; k < to; ++k) {
      auto const i = static_cast<std::size_t>(by[k]);
      std::int32_t const j = job_at(t0 + i);
      if (!wants_locality(in_.pending[static_cast<std::size_t>(j)])) {
        rest.push_back(j);
        codes.push_back(static_cast<std::int32_t>(i));
        continue;
      }
      if (never_feasible(j, out)) continue;
      auto const before = s_.chain_len;
      chain_local(j, out);
      auto& t = s_.chain[before];
      t.block = block;
      t.job_code.assign(1, static_cast<std::int32_t>(i));
      t.window.want = code;
      t.window.live = n_slots;  // made an index into code once n_jobs is known (below)
      b.slot[2 * i + side] = n_slots++;
    }
    auto const before = s_.chain_len;
    chain_tier(rest, out);
    if (s_.chain_len == before) return;
    auto& t = s_.chain[before];
    t.block = block;
    t.window.want = code;
    t.window.live = n_slots;
    // Its jobs by row (row_jobs), each with its replicas.
    t.job_code.clear();
    auto& row_of = s_.class_row;
    std::vector<std::int32_t> count(t.row_class.size() + 1, 0);
    for (std::size_t k = 0, q = 0; k < rest.size(); ++k) {
      if (q < t.jobs.size() && t.jobs[q] == rest[k]) {
        t.job_code.push_back(codes[k]);
        ++count[static_cast<std::size_t>(row_of[static_cast<std::size_t>(m_.job_class[rest[k]])]) + 1];
        b.slot[2 * static_cast<std::size_t>(codes[k]) + side] = n_slots;
        ++q;
      }
    }
    auto const n_rows = t.row_class.size();
    t.row_jobs.assign(n_rows + 1 + 2 * t.jobs.size(), 0);
    for (std::size_t r = 0; r < n_rows; ++r) t.row_jobs[r + 1] = t.row_jobs[r] + count[r + 1];
    std::vector<std::int32_t> at(t.row_jobs.begin(), t.row_jobs.begin() + static_cast<std::ptrdiff_t>(n_rows));
    for (std::size_t q = 0; q < t.jobs.size(); ++q) {
      auto const r = static_cast<std::size_t>(row_of[static_cast<std::size_t>(m_.job_class[t.jobs[q]])]);
      auto const pair = n_rows + 1 + 2 * static_cast<std::size_t>(at[r]++);
      t.row_jobs[pair] = t.job_code[q];
      t.row_jobs[pair + 1] = in_.pending[static_cast<std::size_t>(t.jobs[q])].replicas;
    }
    t.masked.assign(2 * n_rows, 0);
    ++n_slots;
  };
  // The jobs that cannot start (every waiting job may be one), by position.
  auto& by_position = s_.tier_order;
  by_position.resize(n_jobs);
  std::iota(by_position.begin(), by_position.end(), 0);
  std::sort(by_position.begin(), by_position.end(), [&](std::int32_t x, std::int32_t y) { return position(x) < position(y); });
  group_slots(by_position, 0, n_jobs, 2);
  for (std::size_t k = 0; k < n_jobs;) {
    std::size_t k1 = k;
    while (k1 < n_jobs && tier_at(static_cast<std::size_t>(by[k1])) == tier_at(static_cast<std::size_t>(by[k]))) ++k1;
    group_slots(by, k, k1, 1);
    k = k1;
  }
  b.code.assign(n_jobs + static_cast<std::size_t>(n_slots) + 1, 0);
  for (std::size_t i = b.draw + 1; i < s_.chain_len; ++i) s_.chain[i].window.live += static_cast<std::int32_t>(n_jobs);
  // A slot's live classes: those of the jobs that may join it or a slot
  // after it, and those of the groups after the waiting jobs (a job left
  // past the window is chained again, from the log: run_chain). Fewer
  // slot after slot, as the tier program's refresh needs (a tier re-scores
  // the nodes the one before it committed).
  auto const after = s_.group_of[static_cast<std::size_t>(job_at(t_end - 1))];
  auto& live = s_.live_class;
  for (std::size_t c = 0; c < live.size(); ++c) live[c] = s_.class_last_group[c] > after ? 1 : 0;
  auto& last_slot = s_.tier_order;  // the jobs by the last slot they may join, latest first
  last_slot.resize(n_jobs);
  std::iota(last_slot.begin(), last_slot.end(), 0);
  auto const latest = [&](std::int32_t q) { return std::max(b.slot[2 * static_cast<std::size_t>(q)], b.slot[2 * static_cast<std::size_t>(q) + 1]); };
  std::sort(last_slot.begin(), last_slot.end(), [&](std::int32_t x, std::int32_t y) { return latest(x) > latest(y); });
  std::size_t q = 0;
  for (auto i = s_.chain_len; i-- > b.draw + 1;) {
    auto& t = s_.chain[i];
    auto const at = t.window.live - static_cast<std::int32_t>(n_jobs);
    for (; q < n_jobs && latest(last_slot[q]) >= at; ++q) {
      live[static_cast<std::size_t>(m_.job_class[job_at(t0 + static_cast<std::size_t>(last_slot[q]))])] = 1;
    }
    t.live_class = live;
  }
  auto& drawn = s_.chain[b.draw].window;
  drawn.n_slots = n_slots;
  for (std::size_t i = n_jobs; i < t_end - t0; ++i) {
    drawn.beyond_gpu = std::max(drawn.beyond_gpu, b.demand[2 * i]);
    drawn.beyond_cpu = std::max(drawn.beyond_cpu, b.demand[2 * i + 1]);
  }
  // A job is in one slot of a draw: the slots' placements share a region.
  drawn.copies = 0;
  for (std::size_t i = 0; i < n_jobs; ++i) {
    if (b.slot[2 * i] >= 0 || b.slot[2 * i + 1] >= 0) drawn.copies += in_.pending[static_cast<std::size_t>(job_at(t0 + i))].replicas;
  }
  return t_end;
}

bool assigner::draw_here(std::size_t t0) {
  std::int64_t const w = window_region(s_.tiers[t0].first);
  if (w < 0) return false;
  auto& b = s_.here;
  b.t0 = t0;
  b.t_end = window_jobs(t0, b);
  b.n_cut = b.t_end - t0;
  b.w = w;
  auto const [gpu, cpu] = free_capacity();
  b.code.resize(b.t_end - t0);
  kernels::draw_window(static_cast<std::int32_t>(b.t_end - t0), b.demand.data(), nullptr, 0, gpu, cpu, b.code.data());
  window_keys(b);
  number_groups();
  return true;
}

std::size_t assigner::window_jobs(std::size_t t0, assigner_scratch::window_block& b) const {
  auto const& tiers = s_.tiers;
  auto const end = level_of_key(tiers[t0].first) * level_span + last_at;
  std::size_t t_end = t0;
  while (t_end < tiers.size() && tiers[t_end].first < end) ++t_end;
  b.demand.resize(2 * (t_end - t0));
  b.tier.resize(t_end - t0);
  for (std::size_t i = 0; i < t_end - t0; ++i) {
    auto const& jb = in_.pending[static_cast<std::size_t>(s_.order[static_cast<std::size_t>(tiers[t0 + i].second)])];
    auto const [g, c] = job_demand(jb);
    b.demand[2 * i] = g;
    b.demand[2 * i + 1] = c;
    b.tier[i] = whole_jobs_ ? job_tier_of(jb) : tier_of(jb.per_replica);
  }
  return t_end;
}

void assigner::window_keys(assigner_scratch::window_block const& b) {
  auto& tiers = s_.tiers;
  auto const level = level_of_key(tiers[b.t0].first);
  auto const base = level * level_span + past_at;
  std::int64_t rank = 0;
  for (std::size_t t = b.t0; t < b.t_end; ++t) {
    auto const code = t - b.t0 < b.n_cut ? b.code[t - b.t0] : 0;  // past the jobs drawn: waiting
    if (code == 2) {
      tiers[t].first = base + b.w * window_span + window_span / 2;  // cannot start: alone, first
    } else if (code == 1) {
      tiers[t].first = base + b.w * window_span + window_span - 1 - b.tier[t - b.t0];
    } else {
      tiers[t].first = base + (b.w + 1) * window_span + rank++;
    }
  }
  std::sort(tiers.begin() + static_cast<std::ptrdiff_t>(b.t0), tiers.begin() + static_cast<std::ptrdiff_t>(b.t_end));
}

std::pair<std::int64_t, std::int64_t> assigner::free_capacity() const {
  std::int64_t gpu = 0, cpu = 0;
  for (auto g : m_.gpu_free) gpu += g;
  for (auto c : m_.cpu_free) cpu += c;
  return {gpu, cpu};
}

void assigner::queue_window(std::vector<std::int32_t>& moved) {
  // Each level's first window: the longest prefix of its jobs in submission
  // order whose GPUs and CPUs the free capacity holds, less what the levels
  // above ask for. Inside it largest-first packing cannot make a job wait
  // behind a later one unless the shapes do not fit the way the sums do
  // (the solver checks, detail::overtakes); the jobs past it wait, in
  // order, for the next window (chain_window).
  auto [gpu, cpu] = free_capacity();
  auto const gpu_all = gpu, cpu_all = cpu;
  job_order(in_, false, s_.fifo, s_.fifo_keys);
  std::int32_t past = 0;
  bool open = true;
  for (std::size_t k = 0; k < s_.fifo.size(); ++k) {
    auto const j = static_cast<std::size_t>(s_.fifo[k]);
    auto const& jb = in_.pending[j];
    if (k > 0 && s_.fifo_keys.priority[k] != s_.fifo_keys.priority[k - 1]) {
      open = true;
      past = 0;
    }
    auto const [g, c] = job_demand(jb);
    if (g > gpu_all || c > cpu_all) continue;  // never starts here: it waits for no capacity
    open = open && g <= gpu && c <= cpu;
    gpu = std::max<std::int64_t>(0, gpu - g);
    cpu = std::max<std::int64_t>(0, cpu - c);
    if (!open && moved[j] == -1) moved[j] = -3 - past++;
  }
}

// ------------------------------------------------------------------ greedy

void assigner::place_greedy(std::int32_t j, round_result& out) {
  auto const& job = in_.pending[j];
  if (goes_local(job)) {
    place_locality(j, out);
    return;
  }
  if (never_feasible(j, out)) return;
  std::int32_t const c = m_.job_class[j];
  refresh_class(c);
  std::vector<replica_placement> placed;
  // A job that places nothing found no node to take a replica of its
  // class (best_node and linear_nodes take any there is), and a class no
  // node takes stays so: the round only takes, and a release (a gang that
  // fell short) gives back what its job took after the class was found
  // full. Its later jobs place nothing without a scan of every node each
  // (a long queue the cluster cannot hold, 32,000 jobs on 500 nodes: fifo's
  // second assignment 59.7 -> 10.4 ms). Not the kube-style baseline's: it
  // filters every node for every pod, as kube-scheduler does.
  auto& full = s_.class_full[static_cast<std::size_t>(c)];
  if (full == 0) {
    place_replicas(job, c, -1, job.replicas, placed);
    full = placed.empty() && mode_ != assign_mode::kube ? 1 : 0;
  } else if (verify_ && !takes_none(c)) {
    throw logic_error(error_code::internal, "class " + std::to_string(c) +
                                                " was called full and a node takes it (PLACER_VERIFY_SCORES)");
  }
  if (job.gang && static_cast<std::int32_t>(placed.size()) < job.replicas) release_all(c, placed);
  finish_job(j, std::move(placed), out);
}

bool assigner::takes_none(std::int32_t c) const {
  for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
    if (score(c, n) >= 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------- locality

void assigner::place_locality(std::int32_t j, round_result& out) {
  place_local(j, out);
  --s_.locality_left[static_cast<std::size_t>(m_.job_class[j])];
}

void assigner::place_local(std::int32_t j, round_result& out) {
  auto const& job = in_.pending[j];
  if (never_feasible(j, out)) return;
  std::int32_t const c = m_.job_class[j];
  std::int32_t const want = job.replicas;
  bool const required = level_required(job);
  std::vector<replica_placement> placed;
  refresh_class(c);

  // Replicas of this class each domain can hold (a segmented sum of the
  // per-node fit counts by domain, on the backend; kept current since).
  auto const& domains = in_.state.topo.domains;
  std::int64_t const* cap = domains.empty() ? nullptr : caps_of(c);
  // The lowest (deepest) domain that holds the whole job, best fit first.
  std::int32_t const top = required ? job.topology_level : 0;
  // Slurm's node choice (linear()): a job that asks for no topology level
  // takes its nodes from the whole cluster; one that asks for a level,
  // required or preferred, goes under the deepest domain that holds it
  // (best fit first), as the other modes place it and as Slurm's tree
  // topology picks a leaf switch, and takes Slurm's nodes inside it.
  bool const flat = linear_ && mode_ == assign_mode::greedy && job.topo_mode == topology_mode::none;
  if (flat) {
    place_replicas(job, c, -1, want, placed);
    if (job.gang && static_cast<std::int32_t>(placed.size()) < want) release_all(c, placed);
  } else if (!domains.empty() && mode_ != assign_mode::kube) {
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
        place_replicas(job, c, d, want, placed);
        if (static_cast<std::int32_t>(placed.size()) == want) break;
        release_all(c, placed);  // cannot happen with exact fit counts; kept as a guard
      }
    }
  } else if (required) {
    // kube-style baseline: the first domain of the level that holds it.
    for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()) && placed.empty(); ++d) {
      if (domains[d].level != job.topology_level || cap[d] < want) continue;
      place_replicas(job, c, d, want, placed);
      if (static_cast<std::int32_t>(placed.size()) < want) release_all(c, placed);
    }
  }
  if (flat) {
    // placed above
  } else if (placed.empty() && !job.gang) {
    // No domain holds all of it: a non-gang job takes what fits, inside
    // the roomiest domain of its required level, or anywhere.
    std::int32_t level = -1, domain = -1;
    if (required) {
      level = job.topology_level;
      for (std::int32_t d = 0; d < static_cast<std::int32_t>(domains.size()); ++d) {
        if (domains[d].level == level && cap[d] > 0 && (domain < 0 || cap[d] > cap[domain])) domain = d;
      }
    }
    if (!required || domain >= 0) place_replicas(job, c, domain, want, placed);
  } else if (placed.empty() && !required && (mode_ == assign_mode::kube || domains.empty())) {
    // kube: no topology awareness; no topology at all: the cluster is the domain.
    place_replicas(job, c, -1, want, placed);
    if (static_cast<std::int32_t>(placed.size()) < want) release_all(c, placed);
  }
  if (placed.empty()) {
    local_unplaced(j, out);
    return;
  }
  finish_job(j, std::move(placed), out);
}

void assigner::local_unplaced(std::int32_t j, round_result& out) const {
  auto const& job = in_.pending[j];
  if (level_required(job)) {
    out.unplaced_jobs.push_back({j, unplaced_reason::topology_unsatisfiable,
                                 "no domain at level " + level_name(job.topology_level) + " holds the job"});
  } else {
    out.unplaced_jobs.push_back({j, job.gang ? unplaced_reason::gang_incomplete : unplaced_reason::insufficient_capacity,
                                 "the cluster cannot hold all " + std::to_string(job.replicas) + " replicas now" +
                                     (job.gang ? "; gang takes nothing" : "")});
  }
}

// -------------------------------------------------------------------- tier

void assigner::chain_tier(std::vector<std::int32_t> const& jobs, round_result& out) {
  // Rows: the classes present, compacted in order of first appearance; a
  // row's demand is its jobs' replicas. Every buffer is the reused scratch.
  auto& t = next_chained();
  auto& live = t.jobs;
  live.clear();
  for (auto j : jobs) {
    if (!never_feasible(j, out)) live.push_back(j);
  }
  if (live.empty()) return;
  auto& row_class = t.row_class;
  auto& class_row = s_.class_row;  // class -> row, -1 = none yet
  auto& demand = t.demand;
  row_class.clear();
  demand.clear();
  class_row.assign(static_cast<std::size_t>(m_.n_classes()), -1);
  for (auto j : live) {
    std::int32_t const c = m_.job_class[j];
    if (class_row[c] < 0) {
      class_row[c] = static_cast<std::int32_t>(row_class.size());
      row_class.push_back(c);
      demand.push_back(0);
    }
    demand[static_cast<std::size_t>(class_row[c])] += in_.pending[j].replicas;
  }
  t.row_cap.clear();
  if (in_.pol.stacking) {
    // A row of whole GPUs places at most ceil(copies / replicas one node
    // holds) per iteration (tier_problem::row_cap).
    std::int32_t most = 0;  // GPUs of the largest node
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) most = std::max(most, m_.gpu_capacity[n] / milli_per_gpu);
    t.row_cap.resize(row_class.size());
    t.per_node.resize(row_class.size());
    for (std::size_t r = 0; r < row_class.size(); ++r) {
      std::int32_t const c = row_class[r];
      std::int32_t const per_node =
          op_.cv.gpus[c] > 0 && op_.cv.milli[c] >= milli_per_gpu ? std::min(8, most / op_.cv.gpus[c]) : 1;
      t.per_node[r] = per_node;
      t.row_cap[r] = per_node > 1 ? (demand[r] + per_node - 1) / per_node : demand[r];
    }
  }
  chain_add(t);
}

assigner_scratch::chained_tier& assigner::next_chained() {
  if (s_.chain.size() <= s_.chain_len) s_.chain.resize(s_.chain_len + 1);
  auto& t = s_.chain[s_.chain_len];
  t.local = {};
  t.block = -1;
  t.window = {};
  t.job_code.clear();
  t.row_jobs.clear();
  t.per_node.clear();
  t.masked.clear();
  return t;
}

void assigner::chain_local(std::int32_t j, round_result& out) {
  if (never_feasible(j, out)) return;
  auto const& job = in_.pending[j];
  auto& t = next_chained();
  t.jobs.assign(1, j);
  t.row_class.assign(1, m_.job_class[j]);
  t.demand.assign(1, job.replicas);
  t.row_cap.clear();
  bool const required = level_required(job);
  t.local.want = job.replicas;
  t.local.top = required ? job.topology_level : 0;
  t.local.gang = job.gang;
  t.local.required = required;
  t.local.distinct = job.distinct_nodes;
  t.local.topo_unit = topo_unit();
  chain_add(t);
}

void assigner::chain_add(assigner_scratch::chained_tier& t) {
  t.live_class = s_.live_class;
  if (s_.chain_len == 0) {
    // The first tier's refresh candidates: the log since the least fresh
    // live class, each node once (a later tier's are the nodes the tier
    // before it committed, tier.hpp).
    std::size_t from = s_.changes.size();
    for (std::size_t c = 0; c < s_.live_class.size(); ++c) {
      if (s_.live_class[c] != 0) from = std::min(from, static_cast<std::size_t>(s_.fresh_at[c]));
    }
    auto& changed = s_.refresh_nodes;
    changed.reserve(1);  // an empty log is an empty list, not none (null: every node)
    changed.assign(s_.changes.begin() + static_cast<std::ptrdiff_t>(from), s_.changes.end());
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
  }
  t.now = now_;
  now_ += 1;  // past the program's stamps
  ++s_.chain_len;
}

std::size_t assigner::run_chain(round_result& out, bool last) {
  std::size_t const k = s_.chain_len;
  std::size_t const n_blocks = s_.n_blocks;
  s_.n_blocks = 0;
  if (k == 0) return s_.tiers.size();
  s_.chain_len = 0;
  // One problem per tier (kernels/include/placer/kernels/tier.hpp): nodes
  // bid for rows, one replica per node per iteration, winners committed
  // and re-scored in one step, until nothing more fits; tier after tier in
  // one launch of the program.
  auto& problems = s_.chain_problems;
  problems.resize(k);
  for (std::size_t i = 0; i < k; ++i) {
    auto& t = s_.chain[i];
    tier_problem& p = problems[i];
    p = tier_problem{};
    p.nodes = m_.nodes();
    p.classes = m_.classes();
    p.tasks = m_.tasks();
    p.params = op_.p;
    p.gpu_free = m_.gpu_free.data();
    p.cpu_free = m_.cpu_free.data();
    p.mem_free = m_.mem_free.data();
    p.scores = scores_.data();
    p.n_rows = static_cast<std::int32_t>(t.row_class.size());
    p.row_class = t.row_class.data();
    p.demand = t.demand.data();
    p.row_cap = t.row_cap.empty() ? nullptr : t.row_cap.data();
    p.stamp = s_.stamp.data();
    p.fresh = s_.fresh.data();
    p.now = t.now;
    p.live_class = t.live_class.data();
    if (i == 0) {
      p.changed = s_.refresh_nodes.data();
      p.n_changed = static_cast<std::int32_t>(s_.refresh_nodes.size());
    }
    p.state = s_.state.data();
    p.twins = op_.twins();  // stamps start at -1: the scored matrix is current
    p.local = t.local;
    p.window = t.window;
    if (t.block >= 0) {
      auto& b = s_.blocks[static_cast<std::size_t>(t.block)];
      p.window.code = b.code.data();
      if (i == b.draw) {
        p.window.n_jobs = static_cast<std::int32_t>(b.n_cut);
        p.window.job_demand = b.demand.data();
        p.window.job_slot = b.slot.data();
        p.window.free = b.free;
      } else if (!t.row_jobs.empty()) {
        p.window.row_jobs = t.row_jobs.data();
        p.window.per_node = t.per_node.empty() ? nullptr : t.per_node.data();
        p.window.masked = t.masked.data();
      }
    }
    if (t.local.want > 0 && !in_.state.topo.domains.empty()) {
      p.topo.n_domains = static_cast<std::int32_t>(in_.state.topo.domains.size());
      p.topo.levels = levels_;
      p.topo.begin = s_.domain_begin.data();
      p.topo.node = s_.entry_node.data();
      p.topo.level = s_.domain_level.data();
      p.topo.node_domain = s_.paths.data();
    }
    // Bids rise by at least 1/1024 of the largest score: the assignment is
    // within that per replica of each iteration's optimum (scores are
    // heuristic values; the MIP gap is the same at eps = 1, 64 and 256), and
    // price wars between near-equal nodes end in tens of rounds, not
    // thousands (docs/architecture.md).
    p.eps = std::max<std::int64_t>(1, 1000LL * (std::int64_t{op_.p.w_binpack} + op_.p.w_fragmentation) / 1024);
  }
  // The locality jobs are the chain's too (tier_locality): nothing here
  // reads its cells again, so a backend with memory of its own keeps them.
  problems[0].cells_wanted = false;
  auto& result = s_.chain_out;
  drop_caps();  // the programs commit on the backend: every capacity held is stale
  if (deadline_) {
    auto const left = std::chrono::duration_cast<std::chrono::nanoseconds>(*deadline_ - std::chrono::steady_clock::now());
    problems[0].budget_ns = std::max<std::int64_t>(1, left.count());
  }
  kernels::backend::follow_up then;
  then.stats = last && stats_after_;
  backend_.place_tiers_then({problems.data(), k}, result, then);
  // A window's draw places nothing; its slots ran where it gave them a job,
  // and where it left jobs past it the chain stopped after them. Where the
  // budget ran out, no tier from `stop` on ran.
  std::size_t stop = 0;
  while (stop < k && !result.stats[stop].not_run) ++stop;
  std::size_t ran = stop;
  auto& live = s_.tier_jobs;
  for (std::size_t i = 0; i < ran; ++i) {
    auto const& t = s_.chain[i];
    live.clear();
    if (t.block >= 0) {
      auto const& b = s_.blocks[static_cast<std::size_t>(t.block)];
      if (i == b.draw) {
        ran = static_cast<std::size_t>(kernels::draw_end(static_cast<std::int32_t>(i), t.window.n_slots, b.code.back(),
                                                         static_cast<std::int32_t>(ran)));
        continue;
      }
      if (b.code[static_cast<std::size_t>(t.window.live)] == 0) continue;
      for (std::size_t q = 0; q < t.jobs.size(); ++q) {
        if (b.code[static_cast<std::size_t>(t.job_code[q])] == t.window.want) live.push_back(t.jobs[q]);
      }
    } else {
      live.assign(t.jobs.begin(), t.jobs.end());
    }
    // The program refreshed the tier's live classes before its commits; the
    // nodes it changed join the log once each.
    for (std::size_t c = 0; c < t.live_class.size(); ++c) {
      if (t.live_class[c] != 0) s_.fresh_at[c] = static_cast<std::int32_t>(s_.changes.size());
    }
    auto& got = s_.tier_out;
    got.assign(result.placed.begin() + result.begin[i], result.placed.begin() + result.begin[i + 1]);
    // The tier's nodes join the log once each, ascending (sorting them was
    // 1.3% of the 100k round).
    node_bitset nodes(s_.node_bits, m_.n_nodes());
    for (auto const& tp : got) nodes.mark(tp.node);
    nodes.drain([&](std::int32_t n) { s_.changes.push_back(n); });
    // Placements in (iteration, node) order; a row's replicas go to its jobs
    // in queue order, so the earlier jobs fill first. Most tiers' come so;
    // an auction tier's come by iteration, and a node takes one copy an
    // iteration, so each iteration's are put in order by the bitset (they
    // were 161 us of std::sort a 100k round).
    auto const before = [](tier_placement const& a, tier_placement const& b) {
      return a.iteration != b.iteration ? a.iteration < b.iteration : a.node < b.node;
    };
    auto const by_iteration = [](tier_placement const& a, tier_placement const& b) { return a.iteration < b.iteration; };
    if (std::is_sorted(got.begin(), got.end(), before)) {
      // as they are
    } else if (t.local.want == 0 && std::is_sorted(got.begin(), got.end(), by_iteration)) {
      auto& at = s_.node_at;  // per node: its placement in the iteration at hand
      at.resize(static_cast<std::size_t>(m_.n_nodes()));
      auto& sorted = s_.tier_sorted;
      sorted.clear();
      for (std::size_t a = 0, e = 0; a < got.size(); a = e) {
        for (e = a; e < got.size() && got[e].iteration == got[a].iteration; ++e) {
          nodes.mark(got[e].node);
          at[static_cast<std::size_t>(got[e].node)] = static_cast<std::int32_t>(e);
        }
        nodes.drain([&](std::int32_t n) { sorted.push_back(got[static_cast<std::size_t>(at[static_cast<std::size_t>(n)])]); });
      }
      got.swap(sorted);
    } else {
      std::sort(got.begin(), got.end(), before);
    }
    auto& placed = s_.placed;  // per live job
    placed.clear();
    placed.resize(live.size());
    // The live jobs' classes and replicas, read together: after the chain
    // their jobs' records are cold, and read where a row's cursor reached
    // them they were a dependent miss each.
    auto& cls = s_.live_job_class;
    auto& want = s_.live_job_want;
    cls.resize(live.size());
    want.resize(live.size());
    for (std::size_t q = 0; q < live.size(); ++q) {
      cls[q] = m_.job_class[live[q]];
      want[q] = in_.pending[live[q]].replicas;
    }
    auto& cursor = s_.cursor;  // per row: the live job taking its next replica
    cursor.assign(t.row_class.size(), 0);
    for (auto const& tp : got) {
      std::int32_t const c = t.row_class[static_cast<std::size_t>(tp.row)];
      auto& j = cursor[static_cast<std::size_t>(tp.row)];
      while (cls[static_cast<std::size_t>(j)] != c ||
             static_cast<std::int32_t>(placed[static_cast<std::size_t>(j)].size()) ==
                 want[static_cast<std::size_t>(j)]) {
        ++j;
      }
      if (m_.cpu_free[tp.node] < 0 || m_.mem_free[tp.node] < 0) {
        throw logic_error(error_code::internal, "tier assignment over-committed CPU or memory");
      }
      auto& to = placed[static_cast<std::size_t>(j)];
      if (to.empty()) to.reserve(static_cast<std::size_t>(want[static_cast<std::size_t>(j)]));
      to.push_back(placement_of(tp.node, c, tp.gpus));
    }
    for (std::size_t j = 0; j < live.size(); ++j) {
      if (t.local.want > 0 && placed[j].empty()) {
        local_unplaced(live[j], out);
      } else {
        finish_job(live[j], std::move(placed[j]), out);
      }
    }
  }
  if (!result.cells_back) {
    // The cells stayed on the device: here every node the chain may have
    // changed is stale for every class, and logged after every class's
    // freshness, so whatever reads them re-scores them first.
    std::int32_t const mark = ++now_;
    auto stale = [&](std::int32_t n) {
      auto& stamp = s_.stamp[static_cast<std::size_t>(n)];
      if (stamp == mark) return;
      stamp = mark;
      s_.changes.push_back(n);
    };
    for (auto n : s_.refresh_nodes) stale(n);
    for (auto const& tp : result.placed) stale(tp.node);
  }
  if (stop < k) expire_not_run(stop, k, out);
  if (verify_) verify_current();
  // The drawn windows' jobs keyed as their draws gave them; the chain
  // goes on from the first job past the window where it stopped (past the
  // budget, chain_groups finds the round out of time).
  std::size_t resume = s_.tiers.size();
  for (std::size_t w = 0; w < n_blocks; ++w) {
    auto const& b = s_.blocks[w];
    if (b.draw >= ran) break;
    if (b.code.back() == 2) {  // incomplete: drawn again, on the host
      resume = b.t0;
      break;
    }
    window_keys(b);
    if (b.code.back() != 0) {
      // Keyed past the window, at the level's end: the drawn jobs it left,
      // then the jobs the draw did not read.
      auto const past = static_cast<std::size_t>(
          std::count(b.code.begin(), b.code.begin() + static_cast<std::ptrdiff_t>(b.n_cut), 0));
      auto const not_drawn = b.t_end - b.t0 - b.n_cut;
      resume = b.t_end - past - not_drawn;
    }
  }
  if (n_blocks > 0) number_groups();
  return resume;
}

// ------------------------------------------------------------ shared parts

bool assigner::never_feasible(std::int32_t j, round_result& out) {
  std::int32_t const c = m_.job_class[j];
  // Whether a class fits some node's capacity does not change as the round
  // commits, so one scan per class serves all of its jobs.
  auto& known = s_.class_feasible;
  if (known[static_cast<std::size_t>(c)] < 0) {
    known[static_cast<std::size_t>(c)] = 0;
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
      if (initially_feasible(c, n)) {
        known[static_cast<std::size_t>(c)] = 1;
        break;
      }
    }
  }
  if (known[static_cast<std::size_t>(c)] != 0) return false;
  if (record_once(j)) {
    out.unplaced_jobs.push_back({j, unplaced_reason::no_feasible_node,
                                 "no node can host one replica (model, pool, size or health)"});
  }
  return true;
}

void assigner::expire_not_run(std::size_t stop, std::size_t k, round_result& out) {
  auto expire = [&](std::int32_t j) {
    if (record_once(j)) out.unplaced_jobs.push_back({j, unplaced_reason::deadline_exceeded, "round deadline reached"});
  };
  for (std::size_t i = stop; i < k; ++i) {
    auto const& t = s_.chain[i];
    if (t.block < 0) {
      for (auto j : t.jobs) expire(j);
      continue;
    }
    auto const& b = s_.blocks[static_cast<std::size_t>(t.block)];
    if (b.draw >= stop) {  // never drawn: every job of the window, drawn or not (once each)
      if (i != b.draw) continue;
      for (std::size_t x = b.t0; x < b.t_end; ++x) expire(s_.order[static_cast<std::size_t>(s_.tiers[x].second)]);
    } else if (i != b.draw && b.code[static_cast<std::size_t>(t.window.live)] != 0) {
      for (std::size_t q = 0; q < t.jobs.size(); ++q) {  // the slot's jobs as the draw gave them
        if (b.code[static_cast<std::size_t>(t.job_code[q])] == t.window.want) expire(t.jobs[q]);
      }
    }
  }
}

bool assigner::record_once(std::int32_t j) {
  if (s_.recorded.empty()) return true;
  auto& r = s_.recorded[static_cast<std::size_t>(j)];
  if (r != 0) return false;
  r = 1;
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
  // Feasible on the node's capacity (so a full node counts as "insufficient
  // capacity", not "no feasible node"); a cell feasible now is (free never
  // exceeds capacity), so no cell is read.
  if (!node_admits(op_.nv, op_.cv, c, n)) return false;
  auto const& nd = in_.state.nodes[n];
  auto const& cv = op_.cv;
  if (cv.cpu[c] > nd.cpu_milli_capacity || cv.mem[c] > nd.memory_mib_capacity) return false;
  return cv.gpus[c] == 0 || m_.gpu_capacity[n] / milli_per_gpu >= cv.gpus[c];
}

std::int32_t assigner::score(std::int32_t c, std::int32_t n) const {
  if (mode_ == assign_mode::kube) return op_.score(c, n);  // kube-style: every node scored anew per replica
  std::int32_t const s = scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n];
  if (verify_ && s != op_.score(c, n)) {
    throw logic_error(error_code::internal, "stale score read: class " + std::to_string(c) + " on node " +
                                                std::to_string(n) + " (PLACER_VERIFY_SCORES)");
  }
  return s;
}

void assigner::verify_current() const {
  for (std::int32_t c = 0; c < m_.n_classes(); ++c) {
    if (s_.live_class[static_cast<std::size_t>(c)] == 0) continue;
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) {
      if (s_.stamp[static_cast<std::size_t>(n)] < s_.fresh[static_cast<std::size_t>(c)] &&
          scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n] != op_.score(c, n)) {
        throw logic_error(error_code::internal, "a tier left a stale cell it calls current: class " +
                                                    std::to_string(c) + " on node " + std::to_string(n) +
                                                    " (PLACER_VERIFY_SCORES)");
      }
    }
  }
}

std::int64_t assigner::topo_bonus(job const& job, std::int32_t anchor, std::int32_t n) const {
  // Replicas of one multi-replica job that cares about the network prefer
  // nodes sharing deeper domains with its first replica.
  if (anchor < 0 || mode_ == assign_mode::kube) return 0;
  if (n == anchor) return topo_unit();
  std::int32_t shared = 0;
  for (std::int32_t l = levels_ - 1; l >= 0; --l) {
    auto const d = domain_of(n, l);
    if (d >= 0 && d == domain_of(anchor, l)) { shared = l + 1; break; }
  }
  return topo_unit() * shared / (levels_ + 1);
}

std::int32_t assigner::best_node(job const& job, std::int32_t c, std::int32_t domain,
                                 std::int32_t anchor, std::int32_t need) const {
  if (linear_ && mode_ == assign_mode::greedy) return linear_node(job, c, domain, need);
  std::int32_t best = -1;
  std::int64_t best_s = -1;
  bool const distinct = job.distinct_nodes;
  auto consider = [&](std::int32_t n) {
    if (distinct && s_.job_holds[static_cast<std::size_t>(n)] != 0) return;  // a node of its own per replica
    std::int32_t const s0 = score(c, n);
    if (s0 < 0) return;
    std::int64_t const s = s0 + topo_bonus(job, anchor, n);
    if (s > best_s) { best_s = s; best = n; }  // strict, in node order: lowest index wins ties
  };
  if (domain >= 0) {
    // The domain's own nodes (its CSR entries, in node order), not a scan
    // of the cluster: a rack's gang looks at its tens of nodes.
    for (auto k = s_.domain_begin[domain]; k < s_.domain_begin[domain + 1]; ++k) consider(s_.entry_node[k]);
  } else {
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) consider(n);
  }
  return best;
}

std::int32_t assigner::linear_node(job const& job, std::int32_t c, std::int32_t domain, std::int32_t need) const {
  // Slurm 22.05's choice, checked against its placements on a live cluster
  // (bench/slurm/side_by_side.py, every job on the same nodes): the runs of
  // consecutive node indices that can take a replica now; the first run
  // that holds `need` replicas with the fewest CPUs free in all, else the
  // run with the most; in it, the node with the fewest CPUs free (then the
  // lowest index). The nodes this job already holds continue a run without
  // counting: a job's replicas come from one run, as Slurm picks them at once.
  bool const distinct = job.distinct_nodes;
  std::int32_t best = -1, best_len = 0;
  std::int64_t best_cpu = 0;
  std::int32_t pick = -1, len = 0, prev = -2;
  std::int64_t cpu = 0, pick_cpu = 0;
  auto close = [&] {
    if (len > 0) {
      bool const enough = len >= need, best_enough = best >= 0 && best_len >= need;
      if (best < 0 || (enough && !best_enough) || (enough && cpu < best_cpu) ||
          (!enough && !best_enough && cpu > best_cpu)) {
        best = pick;
        best_len = len;
        best_cpu = cpu;
      }
    }
    len = 0;
    cpu = 0;
    pick = -1;
  };
  auto visit = [&](std::int32_t n) {
    if (n != prev + 1) close();
    prev = n;
    if (distinct && s_.job_holds[static_cast<std::size_t>(n)] != 0) return;  // held: the run goes on
    if (score(c, n) < 0) {
      close();
      return;
    }
    std::int64_t const free_cpu = m_.cpu_free[static_cast<std::size_t>(n)];
    ++len;
    cpu += free_cpu;
    if (pick < 0 || free_cpu < pick_cpu) {
      pick = n;
      pick_cpu = free_cpu;
    }
  };
  if (domain >= 0) {
    for (auto k = s_.domain_begin[domain]; k < s_.domain_begin[domain + 1]; ++k) visit(s_.entry_node[k]);
  } else {
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) visit(n);
  }
  close();
  return best;
}

void assigner::linear_nodes(std::int32_t c, std::int32_t domain, std::int32_t count) {
  // bench/slurm/offline_mix.py's slurm(), for one job: the nodes that can
  // take a replica form runs of consecutive indices (a node the job holds
  // continues a run without counting); the first run that holds `count`
  // with the fewest CPUs free in all, else the one with the most; if it
  // holds them, its `count` nodes with the fewest CPUs free (then the lowest
  // index), else the first `count` nodes that can take one, by index.
  auto& ok = s_.linear_ok;
  auto& pick = s_.linear_pick;
  ok.clear();
  pick.clear();
  std::size_t best_begin = 0, best_end = 0;
  std::int64_t best_cpu = 0;
  bool found = false, best_enough = false;
  std::size_t run_begin = 0;
  std::int64_t cpu = 0;
  std::int32_t prev = -2;
  auto close = [&] {
    auto const len = ok.size() - run_begin;
    if (len > 0) {
      bool const enough = static_cast<std::int64_t>(len) >= count;
      if (!found || (enough && !best_enough) || (enough && cpu < best_cpu) || (!enough && !best_enough && cpu > best_cpu)) {
        found = true;
        best_enough = enough;
        best_cpu = cpu;
        best_begin = run_begin;
        best_end = ok.size();
      }
    }
    run_begin = ok.size();
    cpu = 0;
  };
  auto visit = [&](std::int32_t n) {
    if (n != prev + 1) close();
    prev = n;
    if (!s_.job_holds.empty() && s_.job_holds[static_cast<std::size_t>(n)] != 0) return;  // held: the run goes on
    if (score(c, n) < 0) {
      close();
      return;
    }
    ok.push_back(n);
    cpu += m_.cpu_free[static_cast<std::size_t>(n)];
  };
  if (domain >= 0) {
    for (auto k = s_.domain_begin[domain]; k < s_.domain_begin[domain + 1]; ++k) visit(s_.entry_node[k]);
  } else {
    for (std::int32_t n = 0; n < m_.n_nodes(); ++n) visit(n);
  }
  close();
  if (!found) return;
  auto const take = static_cast<std::size_t>(count);
  if (best_enough) {
    pick.assign(ok.begin() + static_cast<std::ptrdiff_t>(best_begin), ok.begin() + static_cast<std::ptrdiff_t>(best_end));
    auto const by_cpu = [&](std::int32_t a, std::int32_t b) {
      auto const ca = m_.cpu_free[static_cast<std::size_t>(a)], cb = m_.cpu_free[static_cast<std::size_t>(b)];
      return ca != cb ? ca < cb : a < b;
    };
    std::partial_sort(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(take), pick.end(), by_cpu);
    pick.resize(take);
  } else {
    pick.assign(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(std::min(take, ok.size())));
  }
}

void assigner::place_replicas(job const& job, std::int32_t c, std::int32_t domain,
                              std::int32_t count, std::vector<replica_placement>& placed) {
  bool const local = wants_locality(job);
  // distinct_nodes: the nodes the job holds, marked for best_node, and
  // unmarked however this ends (the scratch outlives the round).
  struct marks {
    std::vector<std::uint8_t>& holds;
    std::vector<replica_placement> const& placed;
    bool const on;
    ~marks() {
      if (on) {
        for (auto const& rp : placed) holds[static_cast<std::size_t>(rp.node)] = 0;
      }
    }
  } const held{s_.job_holds, placed, job.distinct_nodes};
  if (held.on) {
    held.holds.resize(static_cast<std::size_t>(m_.n_nodes()), 0);
    for (auto const& rp : placed) held.holds[static_cast<std::size_t>(rp.node)] = 1;
  }
  if (linear_ && mode_ == assign_mode::greedy && job.distinct_nodes && count > 1) {
    // Slurm picks a job's nodes at once (linear_nodes); each takes one replica.
    linear_nodes(c, domain, count);
    if (placed.empty()) placed.reserve(static_cast<std::size_t>(job.replicas));
    for (auto const n : s_.linear_pick) {
      placed.push_back(commit(n, c));
      held.holds[static_cast<std::size_t>(n)] = 1;
    }
    return;
  }
  for (std::int32_t r = 0; r < count; ++r) {
    std::int32_t const anchor = local && !placed.empty() ? placed.front().node : -1;
    std::int32_t const n = best_node(job, c, domain, anchor, count - r);
    if (n < 0) return;
    if (placed.empty()) placed.reserve(static_cast<std::size_t>(job.replicas));  // one allocation per job
    placed.push_back(commit(n, c));
    if (held.on) held.holds[static_cast<std::size_t>(n)] = 1;
  }
}

replica_placement assigner::placement_of(std::int32_t n, std::int32_t c, std::uint64_t taken) const {
  replica_placement rp;
  rp.node = n;
  rp.gpu_milli = op_.cv.gpus[c] > 0 ? op_.cv.milli[c] : milli_per_gpu;
  rp.gpus.reserve(static_cast<std::size_t>(std::popcount(taken)));  // one allocation for the result
  for (std::uint64_t g = taken; g != 0; g &= g - 1) rp.gpus.push_back(std::countr_zero(g));
  return rp;
}

replica_placement assigner::commit(std::int32_t n, std::int32_t c) {
  std::uint64_t taken = 0;
  caps_before(n);
  if (!take_replica(op_.nv, op_.cv, c, n, m_.gpu_free.data(), m_.cpu_free.data(), m_.mem_free.data(), taken)) {
    throw logic_error(error_code::internal, "assignment chose a node whose GPUs do not fit");
  }
  caps_after(n);
  replica_placement rp = placement_of(n, c, taken);
  if (m_.cpu_free[n] < 0 || m_.mem_free[n] < 0) {
    throw logic_error(error_code::internal, "assignment over-committed CPU or memory");
  }
  changed(n, c);
  return rp;
}

void assigner::release_all(std::int32_t c, std::vector<replica_placement>& placed) {
  for (auto const& rp : placed) {
    caps_before(rp.node);
    give_back(op_.nv, op_.cv, c, rp, m_);
    caps_after(rp.node);
    changed(rp.node, c);
  }
  placed.clear();
}

// ------------------------------------------------- locality capacities

void assigner::load_caps(std::vector<std::int32_t> const& classes) {
  auto const n_domains = in_.state.topo.domains.size();
  if (n_domains == 0) return;
  auto& fresh = s_.cap_fresh;
  fresh.clear();
  for (auto c : classes) {
    if (s_.cap_slot[static_cast<std::size_t>(c)] >= 0) continue;
    s_.cap_slot[static_cast<std::size_t>(c)] = static_cast<std::int32_t>(s_.cap_class.size());
    s_.cap_class.push_back(c);
    fresh.push_back(c);
  }
  if (fresh.empty()) return;
  std::size_t const at = s_.cap.size();
  s_.cap.resize(s_.cap_class.size() * n_domains);
  domain_index_view idx;
  idx.n_entries = static_cast<std::int32_t>(s_.entry_node.size());
  idx.n_domains = static_cast<std::int32_t>(n_domains);
  idx.node = s_.entry_node.data();
  idx.begin = s_.domain_begin.data();
  backend_.domain_capacity(m_.nodes(), m_.classes(), fresh, idx, std::span<std::int64_t>(s_.cap).subspan(at));
}

std::int64_t const* assigner::caps_of(std::int32_t c) {
  if (s_.cap_slot[static_cast<std::size_t>(c)] < 0) load_caps({c});
  return s_.cap.data() + static_cast<std::size_t>(s_.cap_slot[static_cast<std::size_t>(c)]) *
                             in_.state.topo.domains.size();
}

void assigner::drop_caps() {
  s_.cap_slot.assign(static_cast<std::size_t>(m_.n_classes()), -1);
  s_.cap_class.clear();
  s_.cap.clear();
}

void assigner::caps_before(std::int32_t n) {
  auto& before = s_.fit_before;
  before.resize(s_.cap_class.size());
  for (std::size_t s = 0; s < s_.cap_class.size(); ++s) {
    std::int32_t const c = s_.cap_class[s];
    before[s] = s_.locality_left[static_cast<std::size_t>(c)] > 0 ? kernels::fit_count(op_.nv, op_.cv, c, n) : 0;
  }
}

void assigner::caps_after(std::int32_t n) {
  auto const n_domains = in_.state.topo.domains.size();
  for (std::size_t s = 0; s < s_.cap_class.size(); ++s) {
    std::int32_t const c = s_.cap_class[s];
    if (s_.locality_left[static_cast<std::size_t>(c)] == 0) continue;  // never read again
    std::int64_t const delta = kernels::fit_count(op_.nv, op_.cv, c, n) - s_.fit_before[s];
    if (delta == 0) continue;
    for (std::int32_t l = 0; l < levels_; ++l) {
      if (auto const d = domain_of(n, l); d >= 0) s_.cap[s * n_domains + static_cast<std::size_t>(d)] += delta;
    }
  }
}

void assigner::changed(std::int32_t n, std::int32_t c) {
  backend_.host_wrote(n);
  if (mode_ == assign_mode::kube) return;  // kube scores on the fly
  auto& stamp = s_.stamp[static_cast<std::size_t>(n)];
  if (stamp != now_) s_.changes.push_back(n);  // logged once between refreshes
  stamp = now_;
  scores_[static_cast<std::size_t>(c) * m_.n_nodes() + n] = op_.score(c, n);
}

void assigner::refresh_class(std::int32_t c) {
  if (mode_ == assign_mode::kube) return;
  auto const k = static_cast<std::size_t>(c);
  for (auto i = static_cast<std::size_t>(s_.fresh_at[k]); i < s_.changes.size(); ++i) {
    std::int32_t const n = s_.changes[i];
    if (s_.stamp[static_cast<std::size_t>(n)] >= s_.fresh[k]) {
      scores_[k * static_cast<std::size_t>(m_.n_nodes()) + static_cast<std::size_t>(n)] = op_.score(c, n);
      backend_.host_wrote(n);
    }
  }
  s_.fresh[k] = ++now_;
  s_.fresh_at[k] = static_cast<std::int32_t>(s_.changes.size());
}

std::string assigner::level_name(std::int32_t l) const {
  auto const& names = in_.state.topo.level_names;
  return l >= 0 && l < static_cast<std::int32_t>(names.size()) ? "'" + names[l] + "'" : std::to_string(l);
}

// ------------------------------------------------------------ repack

namespace {

/// detail::repack's passes over one round.
class repacker {
 public:
  repacker(round_input const& in, round_matrices& m, score_params const& p, round_result& out, repack_scratch& s,
           scored_round const& scored)
      : in_(in), m_(m), out_(out), s_(s), scored_(scored), nv_(m.nodes()), cv_(m.classes()),
        op_{nv_, cv_, m.tasks(), p}, stats_{nv_, m.tasks()}, n_nodes_(static_cast<std::size_t>(m.n_nodes())),
        verify_(verify_scores()) {
    auto const n_jobs = in.pending.size();
    job_order(in, false, s.fifo, s.keys);
    s.pos.resize(n_jobs);
    for (std::size_t k = 0; k < n_jobs; ++k) s.pos[static_cast<std::size_t>(s.fifo[k])] = static_cast<std::int32_t>(k);
    s.state.assign(n_jobs, 0);
    for (auto const& pl : out.placements) s.state[static_cast<std::size_t>(pl.job)] = pl.replicas.empty() ? 0 : 1;
    for (auto const& u : out.unplaced_jobs) {
      auto& st = s.state[static_cast<std::size_t>(u.job)];
      if (waits_for_capacity(u.reason) && st == 0) st = 2;
    }
    // Queue order: the jobs that wait for capacity while a later one of
    // their level started (strict: every one that waits) were promised
    // (detail::overtakes' walk, backwards); promised_ is past the last.
    s.promised.assign(n_jobs, 0);
    if (in.pol.order != queue_order::pack) {
      bool later_placed = false;
      for (std::size_t k = n_jobs; k-- > 0;) {
        auto const j = static_cast<std::size_t>(s.fifo[k]);
        if (k + 1 < n_jobs && s.keys.priority[k] != s.keys.priority[k + 1]) {
          later_placed = false;
        }
        if (s.state[j] == 2 && (later_placed || in.pol.order == queue_order::strict)) {
          s.promised[k] = 1;
          promised_ = std::max(promised_, k + 1);
        }
        later_placed = later_placed || s.state[j] == 1;
      }
    }
  }

  /// Past the queue position of the last promised job (0: none).
  [[nodiscard]] std::size_t promised() const { return promised_; }

  /// Places again the movable jobs at queue positions from `first` on;
  /// keeps the result unless it fragments more (returns the replicas that
  /// moved; undo() takes a kept pass back). 0: nothing moved.
  std::int64_t pass(std::size_t first, std::int64_t budget) {
    auto& s = s_;
    s.movable.clear();
    s.touched.clear();
    s.gpu_before.clear();
    s.before.clear();
    s.was.clear();
    std::int64_t replicas = 0;
    for (std::size_t k = 0; k < out_.placements.size(); ++k) {
      auto const& pl = out_.placements[k];
      auto const j = static_cast<std::size_t>(pl.job);
      if (pl.replicas.empty() || wants_locality(in_.pending[j]) || static_cast<std::size_t>(s.pos[j]) < first) continue;
      s.movable.push_back(static_cast<std::int32_t>(k));
      replicas += static_cast<std::int64_t>(pl.replicas.size());
    }
    if (replicas < 2 || replicas * static_cast<std::int64_t>(n_nodes_) > budget) return 0;
    // The largest replica first; among equals a class's jobs together (its
    // cells are read again right after the one commit since), in queue
    // order by their first.
    s.first_pos.assign(static_cast<std::size_t>(m_.n_classes()), std::numeric_limits<std::int32_t>::max());
    for (auto k : s.movable) {
      auto& f = s.first_pos[static_cast<std::size_t>(m_.job_class[job_of(k)])];
      f = std::min(f, s.pos[job_of(k)]);
    }
    std::sort(s.movable.begin(), s.movable.end(), [&](std::int32_t a, std::int32_t c) {
      auto const ma = in_.pending[job_of(a)].per_replica.gpu_milli_total();
      auto const mc = in_.pending[job_of(c)].per_replica.gpu_milli_total();
      if (ma != mc) return ma > mc;
      auto const fa = s.first_pos[static_cast<std::size_t>(m_.job_class[job_of(a)])];
      auto const fc = s.first_pos[static_cast<std::size_t>(m_.job_class[job_of(c)])];
      return fa != fc ? fa < fc : s.pos[job_of(a)] < s.pos[job_of(c)];
    });
    s.classes.clear();
    s.slot.assign(static_cast<std::size_t>(m_.n_classes()), -1);
    for (auto k : s.movable) {
      auto const c = m_.job_class[job_of(k)];
      if (s.slot[static_cast<std::size_t>(c)] < 0) {
        s.slot[static_cast<std::size_t>(c)] = static_cast<std::int32_t>(s.classes.size());
        s.classes.push_back(c);
      }
    }
    s.is_touched.assign(n_nodes_, 0);
    // Off their nodes...
    for (auto k : s.movable) {
      auto const& pl = out_.placements[static_cast<std::size_t>(k)];
      std::int32_t const c = m_.job_class[static_cast<std::size_t>(pl.job)];
      for (auto const& rp : pl.replicas) {
        auto const u = static_cast<std::size_t>(rp.node);
        touch(rp.node);
        std::uint64_t bits = 0;
        for (auto const g : rp.gpus) {
          m_.gpu_free[static_cast<std::size_t>(m_.gpu_begin[u] + g)] += rp.gpu_milli;
          bits |= std::uint64_t{1} << g;
        }
        m_.cpu_free[u] += cv_.cpu[c];
        m_.mem_free[u] += cv_.mem[c];
        s.was.emplace_back(rp.node, bits);
      }
    }
    // ...and on again, each on the best cell as the state is then. A cell
    // is scored when read and kept until its node changes; a node back in
    // its state of the round's score stage (nothing of the round left on
    // it) reads that stage's cell.
    s.version.assign(n_nodes_, 0);
    s.pristine.assign(n_nodes_, 0);
    if (scored_.m != nullptr) {
      for (std::size_t n = 0; n < n_nodes_; ++n) s.pristine[n] = same_as_scored(n) ? 1 : 0;
    }
    s.cells.resize(s.classes.size() * n_nodes_);
    s.cell_version.assign(s.classes.size() * n_nodes_, -1);
    s.frag_version.assign(n_nodes_, -1);
    s.frag_before.resize(n_nodes_);
    bool fits = true;
    for (auto k : s.movable) {
      auto& pl = out_.placements[static_cast<std::size_t>(k)];
      std::int32_t const c = m_.job_class[static_cast<std::size_t>(pl.job)];
      auto const row = static_cast<std::size_t>(s.slot[static_cast<std::size_t>(c)]) * n_nodes_;
      for (auto& rp : pl.replicas) {
        std::int32_t best = -1;
        std::int32_t best_s = -1;
        for (std::size_t n = 0; n < n_nodes_; ++n) {
          std::int32_t const v = cell(c, row, n);
          if (v > best_s) {  // strict: the lowest index of equals
            best_s = v;
            best = static_cast<std::int32_t>(n);
          }
        }
        std::uint64_t taken = 0;
        if (best >= 0) {
          touch(best);
          if (!take_replica(nv_, cv_, c, best, m_.gpu_free.data(), m_.cpu_free.data(), m_.mem_free.data(), taken)) {
            throw logic_error(error_code::internal, "the packing repair chose a node whose GPUs do not fit");
          }
          ++s.version[static_cast<std::size_t>(best)];
        }
        rp.node = best;
        rp.gpus.clear();
        for (std::uint64_t g = taken; g != 0; g &= g - 1) rp.gpus.push_back(std::countr_zero(g));
        if (best < 0) {
          fits = false;
          break;
        }
      }
      if (!fits) break;
    }
    // Kept unless more nodes are left partly used, or as many with more
    // fragmentation (over the nodes touched: no other node changed).
    std::int64_t partly_before = 0, partly_after = 0, frag_before = 0, frag_after = 0;
    for (std::size_t t = 0; t < s.touched.size() && fits; ++t) {
      auto const now = stats_(s.touched[t]);
      partly_before += s.before[4 * t + 2];
      frag_before += s.before[4 * t + 3];
      partly_after += now.partly_allocated_nodes;
      frag_after += now.frag_milli_ppm;
    }
    if (!fits || std::pair{partly_after, frag_after} > std::pair{partly_before, frag_before}) {
      undo();
      return 0;
    }
    // The same cluster as before (the jobs swapped between equal places,
    // or none moved): the round as the assignment left it.
    bool same = true;
    std::size_t g = 0;
    for (std::size_t t = 0; t < s.touched.size() && same; ++t) {
      auto const u = static_cast<std::size_t>(s.touched[t]);
      for (auto i = m_.gpu_begin[u]; i < m_.gpu_begin[u + 1]; ++i) same = same && m_.gpu_free[static_cast<std::size_t>(i)] == s.gpu_before[g++];
      same = same && m_.cpu_free[u] == s.before[4 * t] && m_.mem_free[u] == s.before[4 * t + 1];
    }
    if (same) {
      undo();
      return 0;
    }
    // The replicas now elsewhere (a node or GPUs of their own).
    std::int64_t moved = 0;
    std::size_t r = 0;
    for (auto k : s.movable) {
      for (auto const& rp : out_.placements[static_cast<std::size_t>(k)].replicas) {
        std::uint64_t bits = 0;
        for (auto const gpu : rp.gpus) bits |= std::uint64_t{1} << gpu;
        moved += rp.node != s.was[r].first || bits != s.was[r].second ? 1 : 0;
        ++r;
      }
    }
    return moved;
  }

  /// The last pass's nodes and replicas as they were.
  void undo() {
    auto& s = s_;
    std::size_t g = 0;
    for (std::size_t t = 0; t < s.touched.size(); ++t) {
      auto const u = static_cast<std::size_t>(s.touched[t]);
      for (auto i = m_.gpu_begin[u]; i < m_.gpu_begin[u + 1]; ++i) m_.gpu_free[static_cast<std::size_t>(i)] = s.gpu_before[g++];
      m_.cpu_free[u] = s.before[4 * t];
      m_.mem_free[u] = s.before[4 * t + 1];
    }
    std::size_t r = 0;
    for (auto k : s.movable) {
      for (auto& rp : out_.placements[static_cast<std::size_t>(k)].replicas) {
        rp.node = s.was[r].first;
        rp.gpus.clear();
        for (std::uint64_t bits = s.was[r].second; bits != 0; bits &= bits - 1) rp.gpus.push_back(std::countr_zero(bits));
        ++r;
      }
    }
    s.touched.clear();
  }

  /// The nodes the last pass changed.
  [[nodiscard]] std::vector<std::int32_t> const& touched() const { return s_.touched; }

  /// The promise, checked as tests/solver/queue_order_test.cpp checks it
  /// from outside: every promised job that waits for capacity while a
  /// later job of its level started does not fit, alone, on the round's
  /// cluster with the placements of the jobs ahead of it (queue order)
  /// charged. The cluster at the round's start is the state now with
  /// every placement given back; the jobs ahead are charged walking the
  /// order. A class whose one replica did not fit does not fit further on
  /// (the cluster only fills): such jobs are tried until one fails.
  [[nodiscard]] bool keeps_promise() {
    auto& s = s_;
    s.view_gpu = m_.gpu_free;
    s.view_cpu = m_.cpu_free;
    s.view_mem = m_.mem_free;
    auto charge = [&](placement const& pl, std::int64_t sign) {
      std::int32_t const c = m_.job_class[static_cast<std::size_t>(pl.job)];
      for (auto const& rp : pl.replicas) {
        auto const u = static_cast<std::size_t>(rp.node);
        for (auto const g : rp.gpus) s.view_gpu[static_cast<std::size_t>(m_.gpu_begin[u] + g)] -= static_cast<std::int32_t>(sign) * rp.gpu_milli;
        s.view_cpu[u] -= sign * cv_.cpu[c];
        s.view_mem[u] -= sign * cv_.mem[c];
      }
    };
    for (auto const& pl : out_.placements) charge(pl, -1);
    s.placement_of.assign(in_.pending.size(), -1);
    for (std::size_t k = 0; k < out_.placements.size(); ++k) {
      s.placement_of[static_cast<std::size_t>(out_.placements[k].job)] = static_cast<std::int32_t>(k);
    }
    node_view view = nv_;
    view.gpu_free = s.view_gpu.data();
    view.cpu_free = s.view_cpu.data();
    view.mem_free = s.view_mem.data();
    s.no_fit.assign(static_cast<std::size_t>(m_.n_classes()), 0);
    // Walking the order: the jobs ahead charged, each promised job tried.
    for (std::size_t k = 0; k < promised_; ++k) {
      auto const j = static_cast<std::size_t>(s.fifo[k]);
      if (s.state[j] == 1) {
        charge(out_.placements[static_cast<std::size_t>(s.placement_of[j])], 1);
        continue;
      }
      if (s.promised[k] == 0) continue;
      auto const& jb = in_.pending[j];
      auto const c = static_cast<std::size_t>(m_.job_class[j]);
      bool const one = !wants_locality(jb) || !jb.gang;  // one replica anywhere starts it
      if (one && s.no_fit[c] != 0) continue;
      if (fits_alone(view, jb, m_.job_class[j])) return false;
      if (one) s.no_fit[c] = 1;
    }
    return true;
  }

 private:
  [[nodiscard]] std::size_t job_of(std::int32_t k) const {
    return static_cast<std::size_t>(out_.placements[static_cast<std::size_t>(k)].job);
  }

  void touch(std::int32_t n) {
    auto& s = s_;
    auto const u = static_cast<std::size_t>(n);
    if (s.is_touched[u] != 0) return;
    s.is_touched[u] = 1;
    s.touched.push_back(n);
    s.gpu_before.insert(s.gpu_before.end(), m_.gpu_free.begin() + m_.gpu_begin[u], m_.gpu_free.begin() + m_.gpu_begin[u + 1]);
    auto const st = stats_(n);
    s.before.insert(s.before.end(), {m_.cpu_free[u], m_.mem_free[u], std::int64_t{st.partly_allocated_nodes}, st.frag_milli_ppm});
  }

  /// Class c's score on node n as the state is now (row: its slot's
  /// offset in the cells).
  std::int32_t cell(std::int32_t c, std::size_t row, std::size_t n) {
    auto& s = s_;
    if (s.cell_version[row + n] == s.version[n]) return s.cells[row + n];
    std::int32_t v = 0;
    if (s.version[n] == 0 && s.pristine[n] != 0) {
      v = (*scored_.scores)[static_cast<std::size_t>(c) * n_nodes_ + n];
    } else {
      if (s.frag_version[n] != s.version[n]) {
        s.frag_before[n] = op_.fragmentation_before(static_cast<std::int32_t>(n));
        s.frag_version[n] = s.version[n];
      }
      v = op_.score(c, static_cast<std::int32_t>(n), s.frag_before[n]);
    }
    if (verify_ && v != op_.score(c, static_cast<std::int32_t>(n))) {
      throw logic_error(error_code::internal, "the packing repair read a stale score: class " + std::to_string(c) +
                                                  " on node " + std::to_string(n) + " (PLACER_VERIFY_SCORES)");
    }
    s.cells[row + n] = v;
    s.cell_version[row + n] = s.version[n];
    return v;
  }

  /// Whether node n is as the round's score stage saw it.
  [[nodiscard]] bool same_as_scored(std::size_t n) const {
    auto const& sm = *scored_.m;
    auto const g0 = static_cast<std::size_t>(m_.gpu_begin[n]), g1 = static_cast<std::size_t>(m_.gpu_begin[n + 1]);
    return m_.cpu_free[n] == sm.cpu_free[n] && m_.mem_free[n] == sm.mem_free[n] &&
           std::equal(m_.gpu_free.begin() + static_cast<std::ptrdiff_t>(g0), m_.gpu_free.begin() + static_cast<std::ptrdiff_t>(g1),
                      sm.gpu_free.begin() + static_cast<std::ptrdiff_t>(g0));
  }

  /// Whether job jb (class c) alone would start on `view`: a replica
  /// anywhere, or a gang whole under one domain of its required level (the
  /// whole cluster when none), as place_local would find it.
  [[nodiscard]] bool fits_alone(node_view const& view, job const& jb, std::int32_t c) {
    if (!wants_locality(jb) || !jb.gang) {
      for (std::int32_t n = 0; n < view.n_nodes; ++n) {
        if (fit_count(view, cv_, c, n) > 0) return true;
      }
      return false;
    }
    auto const& topo = in_.state.topo;
    std::int32_t const level = level_required(jb) ? jb.topology_level : -1;
    auto& cap = s_.domain_cap;
    cap.assign(topo.domains.size() + 1, 0);  // the last: the whole cluster
    for (std::int32_t n = 0; n < view.n_nodes; ++n) {
      std::int64_t const f = fit_count(view, cv_, c, n);
      if (f == 0) continue;
      if (level < 0) {
        cap.back() += f;
        continue;
      }
      for (std::int32_t d = in_.state.nodes[static_cast<std::size_t>(n)].domain; d >= 0; d = topo.domains[static_cast<std::size_t>(d)].parent) {
        if (topo.domains[static_cast<std::size_t>(d)].level == level) cap[static_cast<std::size_t>(d)] += f;
      }
    }
    return std::any_of(cap.begin(), cap.end(), [&](std::int64_t x) { return x >= jb.replicas; });
  }

  round_input const& in_;
  round_matrices& m_;
  round_result& out_;
  repack_scratch& s_;
  scored_round const scored_;
  node_view const nv_;
  class_view const cv_;
  score_cell_op const op_;
  node_stats_op const stats_;
  std::size_t const n_nodes_;
  bool const verify_;  ///< PLACER_VERIFY_SCORES: every cell read checked against a fresh scoring
  std::size_t promised_ = 0;
};

}  // namespace

std::int32_t repack(round_input const& in, round_matrices& m, score_params const& p, round_result& out, backend& b,
                    std::int64_t budget, repack_scratch& s, scored_round const& scored) {
  // Over the budget (or nothing to move) before the repacker's set-up,
  // which orders the whole queue: the 10k and 100k rounds pay one scan.
  std::int64_t replicas = 0;
  for (auto const& pl : out.placements) {
    if (!wants_locality(in.pending[static_cast<std::size_t>(pl.job)])) replicas += static_cast<std::int64_t>(pl.replicas.size());
  }
  if (replicas < 2 || replicas * static_cast<std::int64_t>(m.n_nodes()) > budget) return 0;
  repacker r(in, m, p, out, s, scored);
  // Every movable job first; where that moves a promised job's
  // predecessors so that it would fit, the jobs up to the last promised
  // one stay and the others are placed again.
  std::int64_t moved = r.pass(0, budget);
  if (moved > 0 && r.promised() > 0 && !r.keeps_promise()) {
    r.undo();
    moved = r.pass(r.promised(), budget);
  }
  for (auto n : r.touched()) b.host_wrote(n);
  return static_cast<std::int32_t>(moved);
}

// ------------------------------------------------------------ stacking

std::int32_t consolidate(round_input const& in, round_matrices& m, score_params const& p, round_result& out,
                         backend& b, std::int64_t budget) {
  node_view const nv = m.nodes();
  class_view const cv = m.classes();
  task_view const tv = m.tasks();
  score_cell_op const op{nv, cv, tv, p};
  auto const n_nodes = static_cast<std::size_t>(m.n_nodes());
  // The movable replicas, by node: (placement, replica) of jobs with no
  // locality need; and every node's GPU milli in use.
  struct ref {
    std::int32_t k, r;
  };
  std::vector<std::vector<ref>> on(n_nodes);
  std::vector<std::int64_t> movable(n_nodes, 0), used(n_nodes, 0);
  for (std::size_t k = 0; k < out.placements.size(); ++k) {
    auto const& pl = out.placements[k];
    if (wants_locality(in.pending[static_cast<std::size_t>(pl.job)])) continue;
    for (std::size_t r = 0; r < pl.replicas.size(); ++r) {
      auto const& rp = pl.replicas[r];
      on[static_cast<std::size_t>(rp.node)].push_back({static_cast<std::int32_t>(k), static_cast<std::int32_t>(r)});
      movable[static_cast<std::size_t>(rp.node)] +=
          static_cast<std::int64_t>(rp.gpu_milli) * static_cast<std::int64_t>(rp.gpus.size());
    }
  }
  auto used_now = [&](std::size_t n) {
    std::int64_t free = 0;
    for (auto g = m.gpu_begin[n]; g < m.gpu_begin[n + 1]; ++g) free += m.gpu_free[static_cast<std::size_t>(g)];
    return static_cast<std::int64_t>(m.gpu_capacity[n]) - free;
  };
  for (std::size_t n = 0; n < n_nodes; ++n) used[n] = used_now(n);
  auto frag = [&](std::size_t n) { return node_stats_op{nv, tv}(static_cast<std::int32_t>(n)).frag_milli_ppm; };
  auto partly = [&](std::size_t n) { return used[n] > 0 && used[n] < m.gpu_capacity[n] ? 1 : 0; };
  // Sources: the nodes this round's movable replicas alone put GPUs to use
  // on (emptying one frees a whole node), the least used first.
  std::vector<std::int32_t> sources;
  for (std::size_t n = 0; n < n_nodes; ++n) {
    if (movable[n] > 0 && movable[n] == used[n] && used[n] < m.gpu_capacity[n]) {
      sources.push_back(static_cast<std::int32_t>(n));
    }
  }
  std::sort(sources.begin(), sources.end(), [&](std::int32_t a, std::int32_t c) {
    auto const ua = used[static_cast<std::size_t>(a)], uc = used[static_cast<std::size_t>(c)];
    return ua != uc ? ua < uc : a < c;
  });
  // One source at a time: all its movable replicas onto the fullest other
  // nodes in use where they fit, kept only if the nodes involved fragment
  // less (or as much, with fewer of them partly used); else undone.
  struct saved {
    std::int32_t node;
    std::vector<std::int32_t> gpu;
    std::int64_t cpu, mem, used, frag, partly;
  };
  std::vector<saved> touched;
  std::vector<std::pair<ref, replica_placement>> was;
  auto touch = [&](std::int32_t n) {
    auto const u = static_cast<std::size_t>(n);
    for (auto const& t : touched) {
      if (t.node == n) return;
    }
    auto const g0 = m.gpu_free.begin() + m.gpu_begin[u];
    touched.push_back({n, std::vector<std::int32_t>(g0, m.gpu_free.begin() + m.gpu_begin[u + 1]), m.cpu_free[u],
                       m.mem_free[u], used[u], frag(u), partly(u)});
  };
  std::int32_t moved = 0;
  for (auto const s : sources) {
    auto const su = static_cast<std::size_t>(s);
    auto& here = on[su];
    if (here.empty() || used[su] == 0) continue;
    touched.clear();
    was.clear();
    touch(s);
    bool ok = true;
    for (auto const& x : here) {
      auto& rp = out.placements[static_cast<std::size_t>(x.k)].replicas[static_cast<std::size_t>(x.r)];
      std::int32_t const c = m.job_class[static_cast<std::size_t>(out.placements[static_cast<std::size_t>(x.k)].job)];
      std::int64_t const need = static_cast<std::int64_t>(rp.gpu_milli) * static_cast<std::int64_t>(rp.gpus.size());
      was.push_back({x, rp});
      // Off the source...
      give_back(nv, cv, c, rp, m);
      used[su] -= need;
      // ...onto the fullest other node in use where it fits (a cell is
      // scored only for a node fuller than the best so far with room).
      std::int32_t best = -1;
      std::int64_t best_used = 0;
      for (std::size_t t = 0; t < n_nodes && budget > 0; ++t) {
        if (t == su || used[t] <= best_used || m.gpu_capacity[t] - used[t] < need) continue;
        --budget;
        if (op.score(c, static_cast<std::int32_t>(t)) >= 0) {
          best = static_cast<std::int32_t>(t);
          best_used = used[t];
        }
      }
      if (best < 0) {
        ok = false;
        break;
      }
      auto const bu = static_cast<std::size_t>(best);
      touch(best);
      std::uint64_t taken = 0;
      if (!take_replica(nv, cv, c, best, m.gpu_free.data(), m.cpu_free.data(), m.mem_free.data(), taken)) {
        throw logic_error(error_code::internal, "stacking moved a replica to a node whose GPUs do not fit");
      }
      used[bu] += need;
      rp.node = best;
      rp.gpus.clear();
      for (std::uint64_t g = taken; g != 0; g &= g - 1) rp.gpus.push_back(std::countr_zero(g));
    }
    std::int64_t before = 0, after = 0, partly_before = 0, partly_after = 0;
    for (auto const& t : touched) {
      before += t.frag;
      after += frag(static_cast<std::size_t>(t.node));
      partly_before += t.partly;
      partly_after += partly(static_cast<std::size_t>(t.node));
    }
    if (ok && (after < before || (after == before && partly_after < partly_before))) {
      for (auto const& [x, old] : was) {
        auto const& rp = out.placements[static_cast<std::size_t>(x.k)].replicas[static_cast<std::size_t>(x.r)];
        on[static_cast<std::size_t>(rp.node)].push_back(x);
        ++moved;
      }
      here.clear();
      for (auto const& t : touched) b.host_wrote(t.node);
      continue;
    }
    // Undone: the nodes and the replicas as they were.
    for (auto const& t : touched) {
      auto const u = static_cast<std::size_t>(t.node);
      std::copy(t.gpu.begin(), t.gpu.end(), m.gpu_free.begin() + m.gpu_begin[u]);
      m.cpu_free[u] = t.cpu;
      m.mem_free[u] = t.mem;
      used[u] = t.used;
    }
    for (auto const& [x, old] : was) out.placements[static_cast<std::size_t>(x.k)].replicas[static_cast<std::size_t>(x.r)] = old;
    if (budget <= 0) break;
  }
  return moved;
}

}  // namespace placer::detail
