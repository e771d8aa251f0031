// Flattening a round into kernel views (see matrices.hpp).
#include <placer/solver/matrices.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/kernels/team.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <tuple>
#include <utility>
#include <omp.h>

namespace placer {

using namespace placer::kernels;

namespace {

std::uint8_t pool_bit(pool_kind p) {
  switch (p) {
    case pool_kind::training: return pool_bit_training;
    case pool_kind::inference: return pool_bit_inference;
    case pool_kind::shared: return pool_bit_shared;
  }
  return pool_bit_shared;
}

/// Pools a job may use outright: its own and the shared pool. Training and
/// batch jobs may also borrow loanable inference nodes (Aryl), at a score
/// penalty (see ops.hpp).
std::uint8_t job_pool_mask(job_kind k) {
  return k == job_kind::inference ? (pool_bit_inference | pool_bit_shared) : (pool_bit_training | pool_bit_shared);
}

/// Model id of `name` among the first `used` entries of `models`, added
/// (reusing a string left from an earlier round where there is one) if new.
std::int32_t model_id(std::vector<std::string>& models, std::size_t& used, std::string const& name) {
  if (name.empty()) return -1;
  auto const first = models.begin();
  auto const last = first + static_cast<std::ptrdiff_t>(used);
  auto it = std::find(first, last, name);
  if (it != last) return static_cast<std::int32_t>(it - first);
  PLACER_EXPECTS(used < 64, "more than 64 distinct GPU models in one cluster");
  if (used < models.size()) {
    models[used].assign(name);
  } else {
    models.push_back(name);
  }
  return static_cast<std::int32_t>(used++);
}

/// One step of FNV-1a over a whole value (the node hashes' fields).
inline std::uint64_t fnv_step(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ULL; }

/// A hash of a tuple of integers, field by field.
template <class Tuple>
std::uint64_t tuple_hash(Tuple const& t) {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL;
  std::apply([&](auto const&... f) { ((h = (h ^ static_cast<std::uint64_t>(f)) * 0xBF58476D1CE4E5B9ULL), ...); }, t);
  return h ^ (h >> 31);
}

/// The entry of `key` among `entries` (in order of first appearance),
/// appended with `fresh` when absent, found through `slots` (open
/// addressing, entries' indices, -1 = empty; at most half full). Both are
/// reused across rounds and emptied by the caller (entries.clear(),
/// slots.clear()). Where a sorted vector's binary search compared tuples
/// (openb's 2,000 jobs of 93 classes and its task shapes: half of its
/// flatten). second = whether it was appended.
template <class Key, class Value>
std::pair<Value&, bool> find_or_insert(std::vector<std::pair<Key, Value>>& entries, std::vector<std::int32_t>& slots,
                                       Key const& key, Value fresh) {
  if (2 * (entries.size() + 1) > slots.size()) {
    slots.assign(std::bit_ceil(std::max<std::size_t>(64, 4 * (entries.size() + 1))), -1);
    std::size_t const mask = slots.size() - 1;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      auto slot = static_cast<std::size_t>(tuple_hash(entries[e].first)) & mask;
      while (slots[slot] >= 0) slot = (slot + 1) & mask;
      slots[slot] = static_cast<std::int32_t>(e);
    }
  }
  std::size_t const mask = slots.size() - 1;
  auto slot = static_cast<std::size_t>(tuple_hash(key)) & mask;
  for (; slots[slot] >= 0; slot = (slot + 1) & mask) {
    auto& e = entries[static_cast<std::size_t>(slots[slot])];
    if (e.first == key) return {e.second, false};
  }
  slots[slot] = static_cast<std::int32_t>(entries.size());
  entries.emplace_back(key, fresh);
  return {entries.back().second, true};
}

/// Nodes from which flatten's passes over the nodes run on the OpenMP team
/// (their hashes, copies and comparisons), and where it sleeps, for a team
/// of two (kernels::team_from): its six parallel regions each wake it.
/// round_bench 100k (12,800 nodes) under OMP_WAIT_POLICY=PASSIVE, 2 vCPUs:
/// flatten 1,267-1,333 us on a team of two, 1,116-1,143 on one thread.
constexpr std::int64_t flatten_parallel_from = 4096;
constexpr std::int64_t flatten_parallel_from_pair = 1 << 15;

/// The items 0..n), as first_of_equals and first_of take a list.
struct all_items {
  std::size_t n;
  [[nodiscard]] std::size_t size() const { return n; }
  std::int32_t operator[](std::size_t k) const { return static_cast<std::int32_t>(k); }
};

/// For the items i of `items` (ascending): rep[i] = the first item equal
/// to i (eq), i itself for the first of its kind, through a hash table
/// (open addressing, hash[i] as the key, eq to tell equal hashes apart):
/// O(n) where sorting the hashes was O(n log n). A hash collision costs
/// one comparison; the entries of rep that are not items keep their
/// value. The table is at most half full, grown by rehashing the firsts
/// it holds and kept for the next round, so its size follows the kinds,
/// not the items (emptying 256 KB for the 100k round's 12,800 nodes took
/// 35 us). Equal items hash alike, so on a team (`par`) each worker
/// takes the items whose hash's high half falls in its part, in order,
/// with a table of its own (`tables`, one a worker): the same reps, the
/// comparisons split.
template <class Items, class Eq>
void first_of_equals(Items const& items, std::uint64_t const* hash, Eq&& eq, std::vector<std::int32_t>& rep,
                     std::vector<std::vector<std::pair<std::uint32_t, std::int32_t>>>& tables, bool par) {
  auto const parts = static_cast<std::size_t>(par ? std::max(1, omp_get_max_threads()) : 1);
  if (tables.size() < parts) tables.resize(parts);
#pragma omp parallel num_threads(static_cast<int>(parts)) if (parts > 1)
  {
    auto const me = static_cast<std::uint64_t>(omp_get_thread_num());
    auto const team = static_cast<std::uint64_t>(omp_get_num_threads());
    auto& table = tables[me];  // as large as the last round's grew it, emptied
    if (table.empty()) table.resize(64);
    std::fill(table.begin(), table.end(), std::pair<std::uint32_t, std::int32_t>{0, -1});  // 8 bytes an entry
    std::size_t mask = table.size() - 1;
    std::size_t used = 0;
    auto const free_slot = [&](std::uint64_t h64) {
      auto slot = static_cast<std::size_t>(h64) & mask;  // the slot from the low bits, the check from the high
      while (table[slot].second >= 0) slot = (slot + 1) & mask;
      return slot;
    };
    for (std::size_t k = 0; k < items.size(); ++k) {
      auto const i = static_cast<std::size_t>(items[k]);
      // The part by a multiply, not a division: every worker reads every item.
      if (((hash[i] >> 32) * team) >> 32 != me) continue;
      std::uint64_t const h64 = hash[i];
      auto const h = static_cast<std::uint32_t>(h64 >> 32);
      rep[i] = static_cast<std::int32_t>(i);
      auto slot = static_cast<std::size_t>(h64) & mask;
      for (; table[slot].second >= 0; slot = (slot + 1) & mask) {
        if (table[slot].first == h && eq(static_cast<std::size_t>(table[slot].second), i)) {
          rep[i] = table[slot].second;
          break;
        }
      }
      if (table[slot].second >= 0) continue;
      if (2 * (used + 1) > table.size()) {  // grown: its firsts again, in a table twice the size
        std::vector<std::pair<std::uint32_t, std::int32_t>> held;
        held.swap(table);
        table.assign(2 * held.size(), {0, -1});
        mask = table.size() - 1;
        for (auto const& e : held) {
          if (e.second >= 0) table[free_slot(hash[e.second])] = e;
        }
        slot = free_slot(h64);
      }
      table[slot] = {h, static_cast<std::int32_t>(i)};
      ++used;
    }
  }
}

}  // namespace

std::uint64_t model_mask(std::vector<std::string> const& allowed, std::vector<std::string> const& models) {
  if (allowed.empty()) return ~std::uint64_t{0};
  std::uint64_t m = 0;
  for (auto const& a : allowed) {
    auto it = std::find(models.begin(), models.end(), a);
    if (it != models.end()) m |= std::uint64_t{1} << (it - models.begin());
  }
  return m;
}

round_matrices build_matrices(round_input const& in) {
  round_matrices m;
  build_matrices(in, m);
  return m;
}

void build_matrices(round_input const& in, round_matrices& m) {
  auto& scratch = m.scratch;
  auto const& nodes = in.state.nodes;
  auto const n = nodes.size();
  // Every per-node field is written below; resize() keeps the capacity.
  m.cpu_free.resize(n);
  m.cpu_capacity.resize(n);
  m.mem_free.resize(n);
  m.model.resize(n);
  m.pool.resize(n);
  m.flags.resize(n);
  m.gpu_begin.resize(n + 1);
  m.gpu_capacity.resize(n);
  std::int64_t const parallel_from = kernels::team_from(flatten_parallel_from, flatten_parallel_from_pair);
  bool const par = static_cast<std::int64_t>(n) >= parallel_from;
  // Model ids (in order of first appearance) and the GPUs' offsets here;
  // the rest a node at a time, on the team where the nodes are many.
  std::size_t n_models = 0;
  m.gpu_begin[0] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto const& nd = nodes[i];
    m.model[i] = nd.gpu_count() > 0 ? model_id(m.models, n_models, nd.gpu_model) : -1;
    m.gpu_begin[i + 1] = m.gpu_begin[i] + nd.gpu_count();
  }
  m.models.resize(n_models);
  m.gpu_free.resize(static_cast<std::size_t>(m.gpu_begin[n]));
  m.gpu_island.resize(static_cast<std::size_t>(m.gpu_begin[n]));
  auto const ns = static_cast<std::ptrdiff_t>(n);
  // Read with the nodes' fields, here on the team: whether a node has a
  // taint (constraint_tables::build) and each model's free GPU (the
  // scarcity below); on the calling thread alone, 100k: 36 and 87 us.
  bool any_taint = false;
  std::array<std::int64_t, 64> free_by_model{};
  std::int64_t* const free_of = free_by_model.data();
#pragma omp parallel for schedule(static) if (par) reduction(|| : any_taint) reduction(+ : free_of[:64])
  for (std::ptrdiff_t ii = 0; ii < ns; ++ii) {
    auto const i = static_cast<std::size_t>(ii);
    auto const& nd = nodes[i];
    any_taint = any_taint || !nd.taints.empty();
    m.cpu_free[i] = nd.cpu_milli_free;
    m.cpu_capacity[i] = nd.cpu_milli_capacity;
    m.mem_free[i] = nd.memory_mib_free;
    m.pool[i] = pool_bit(nd.pool);
    m.flags[i] = static_cast<std::uint8_t>((nd.healthy ? node_flag_healthy : 0) | (nd.loanable ? node_flag_loanable : 0));
    std::int32_t cap = 0;
    std::int64_t free = 0;
    auto const at = static_cast<std::size_t>(m.gpu_begin[i]);
    for (std::int32_t g = 0; g < nd.gpu_count(); ++g) {
      bool const ok = nd.gpu_is_healthy(static_cast<std::size_t>(g));
      std::int32_t const f = ok ? nd.gpu_free_milli[g] : 0;
      m.gpu_free[at + static_cast<std::size_t>(g)] = f;
      m.gpu_island[at + static_cast<std::size_t>(g)] = nd.gpu_nvlink.empty() ? 0 : nd.gpu_nvlink[g];
      cap += ok ? milli_per_gpu : 0;
      free += f;
    }
    m.gpu_capacity[i] = cap;
    if (m.model[i] >= 0) free_of[m.model[i]] += free;
  }
  m.constraints.build(in, m, any_taint);
  bool const constrained = m.constraints.active;

  // Classes: identical (demand, models, pool rule) share a row, numbered in
  // order of first appearance.
  for (auto* v : {&m.class_gpus, &m.class_milli, &m.job_class, &m.class_constraint}) v->clear();
  for (auto* v : {&m.class_cpu, &m.class_mem}) v->clear();
  for (auto* v : {&m.class_pool_mask, &m.class_loan_ok, &m.class_any_model, &m.class_one_per_node}) v->clear();
  bool const any_distinct =
      std::any_of(in.pending.begin(), in.pending.end(), [](job const& j) { return j.distinct_nodes; });
  m.class_model_mask.clear();
  scratch.classes.clear();
  scratch.class_slots.clear();
  m.job_class.reserve(in.pending.size());
  for (std::size_t jj = 0; jj < in.pending.size(); ++jj) {
    auto const& j = in.pending[jj];
    auto const& d = j.per_replica;
    std::uint64_t const mm = d.gpus > 0 ? model_mask(j.allowed_gpu_models, m.models) : ~std::uint64_t{0};
    std::uint8_t const pm = job_pool_mask(j.kind);
    std::uint8_t const loan = j.kind != job_kind::inference && in.pol.queue.loaning ? 1 : 0;
    std::int32_t const set = constrained ? m.constraints.job_set[jj] : 0;
    std::uint8_t const one = j.distinct_nodes ? 1 : 0;
    flatten_scratch::class_key const k{d.gpus, d.gpus > 0 ? d.gpu_milli : milli_per_gpu, d.cpu_milli, d.memory_mib,
                                       mm, pm, loan, set, one};
    auto const [row, fresh] =
        find_or_insert(scratch.classes, scratch.class_slots, k, static_cast<std::int32_t>(m.class_gpus.size()));
    if (fresh) {
      m.class_gpus.push_back(std::get<0>(k));
      m.class_milli.push_back(std::get<1>(k));
      m.class_cpu.push_back(d.cpu_milli);
      m.class_mem.push_back(d.memory_mib);
      m.class_model_mask.push_back(mm);
      m.class_pool_mask.push_back(pm);
      m.class_loan_ok.push_back(loan);
      m.class_any_model.push_back(d.gpus > 0 && j.allowed_gpu_models.empty() ? 1 : 0);
      if (constrained) m.class_constraint.push_back(set);
      if (any_distinct) m.class_one_per_node.push_back(one);
    }
    m.job_class.push_back(row);
  }

  // Model scarcity: per GPU model, the GPU demand of pending jobs limited
  // to a subset of models (split evenly over their models) against the free
  // GPU of that model, capped at 1 (per mille). Jobs that accept any model
  // are steered away from models under pressure (ops.hpp). At most 64
  // models (model_id), so fixed arrays.
  //    The demand is the round's (round_input::context): a policy's
  //    sub-problem sees the scarcity its whole round sees.
  round_input const& ctx = in.context != nullptr ? *in.context : in;
  auto const ctx_model_mask = [&](std::size_t jj) {
    auto const& j = ctx.pending[jj];
    if (j.per_replica.gpus == 0) return ~std::uint64_t{0};
    return &ctx == &in ? m.class_model_mask[m.job_class[jj]] : model_mask(j.allowed_gpu_models, m.models);
  };
  std::array<std::int64_t, 64> restricted{};
  for (std::size_t jj = 0; jj < ctx.pending.size(); ++jj) {
    auto const& j = ctx.pending[jj];
    if (j.per_replica.gpus == 0 || j.allowed_gpu_models.empty()) continue;
    std::uint64_t const mm = ctx_model_mask(jj);
    int const k = std::popcount(mm);
    if (k == 0) continue;
    for (std::size_t id = 0; id < m.models.size(); ++id) {
      if ((mm >> id) & 1U) restricted[id] += j.per_replica.gpu_milli_total() * j.replicas / k;
    }
  }
  m.scarcity.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    auto const id = m.model[i];
    if (id < 0 || restricted[id] == 0) continue;
    m.scarcity[i] = static_cast<std::int32_t>(std::min<std::int64_t>(1000, restricted[id] * 1000 / std::max<std::int64_t>(free_by_model[id], 1)));
  }

  // Nodes in identical states score identically: the score stage computes
  // one column per state and copies it (openb's 1,213 GPU nodes are 15
  // states before the round). A hash of every field the score reads
  // (first_of_equals); equal hashes are compared in full, so a collision
  // costs nothing but a comparison.
  auto const nv = m.nodes();
  auto same_state = [&](std::size_t a, std::size_t b) {
    return kernels::node_state_equal(nv, static_cast<std::int32_t>(a), static_cast<std::int32_t>(b));
  };
  auto state_hash = [&](std::size_t i) {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the fields' values
    auto mix = [&](std::uint64_t v) { h = fnv_step(h, v); };
    for (std::int64_t v : {m.cpu_free[i], m.cpu_capacity[i], m.mem_free[i], std::int64_t{m.model[i]},
                           std::int64_t{m.pool[i]}, std::int64_t{m.flags[i]}, std::int64_t{m.gpu_capacity[i]},
                           std::int64_t{m.scarcity[i]}, constrained ? std::int64_t{m.node_group[i]} : 0}) {
      mix(static_cast<std::uint64_t>(v));
    }
    for (auto g = m.gpu_begin[i]; g < m.gpu_begin[i + 1]; ++g) {
      mix(static_cast<std::uint64_t>(m.gpu_free[g]) << 8 | m.gpu_island[g]);
    }
    return h ^ (h >> 32);  // FNV's low bits alone spread poorly: first_of_equals takes its slot from them
  };
  auto& hashes = scratch.hashes;
  hashes.resize(n);
#pragma omp parallel for schedule(static) if (par)
  for (std::ptrdiff_t i = 0; i < ns; ++i) hashes[static_cast<std::size_t>(i)] = state_hash(static_cast<std::size_t>(i));
  m.same_as.resize(n);
  first_of_equals(all_items{n}, hashes.data(), same_state, m.same_as, scratch.state_tables, par);

  // Fragmentation states (node_view::frag_slot): F and a replica's effect
  // on it depend only on the multiset of a node's free GPU values, its
  // free CPU and its model, so states that differ in which GPUs are taken,
  // in memory or in pool share one row of the score stage's fragmentation
  // table (the 10k scenario's 788 states are 234 fragmentation states,
  // 100k's 5,504 are 731). Score twins (node_view::score_as): states of
  // one fragmentation state and alike in every other field the score
  // reads, which the score stage scores once where it reads the GPUs as
  // their free values (10k: 235 columns instead of 788, 100k: 732 instead
  // of 5,504). Both keyed among the states' first nodes, by a hash of
  // their free GPU values sorted (so not of the GPUs' order): score twins
  // first, then fragmentation states among the twins' first nodes; the
  // other nodes take their state's.
  auto gpus_of = [&](std::size_t i) {
    return std::min<std::int32_t>(m.gpu_begin[i + 1] - m.gpu_begin[i], kernels::max_gpus_per_node);
  };
  // The states' first nodes, listed without a branch (which node is a
  // first is data: a filter on it mispredicted about every other node).
  auto const first_of = [](std::vector<std::int32_t>& list, auto const& from, auto&& first) {
    list.resize(from.size());
    std::size_t k = 0;
    for (std::size_t j = 0; j < from.size(); ++j) {
      list[k] = from[j];
      k += first(from[j]) ? 1 : 0;
    }
    list.resize(k);
  };
  auto& roots = scratch.roots;
  first_of(roots, all_items{n}, [&](std::int32_t i) { return m.same_as[static_cast<std::size_t>(i)] == i; });
  auto const n_roots = static_cast<std::ptrdiff_t>(roots.size());
  // Each state root's free GPU values sorted once (at gpu_begin, as
  // gpu_free), not both nodes' at every comparison: 4,773 comparisons of
  // the 100k round sorted two arrays each.
  auto& sorted = scratch.sorted_free;
  sorted.resize(m.gpu_free.size());
  auto& frag_hashes = scratch.frag_hashes;
  frag_hashes.resize(n);
#pragma omp parallel for schedule(static) if (par)
  for (std::ptrdiff_t r = 0; r < n_roots; ++r) {
    auto const i = static_cast<std::size_t>(roots[static_cast<std::size_t>(r)]);
    kernels::sort_free_gpus(m.gpu_free.data() + m.gpu_begin[i], gpus_of(i), sorted.data() + m.gpu_begin[i]);
    std::uint64_t h = kernels::frag_state_hash(sorted.data() + m.gpu_begin[i], gpus_of(i), m.cpu_free[i], m.model[i]);
    frag_hashes[i] = h;
    for (std::int64_t v : {m.cpu_capacity[i], m.mem_free[i], std::int64_t{m.pool[i]}, std::int64_t{m.flags[i]},
                           std::int64_t{m.gpu_capacity[i]}, std::int64_t{m.scarcity[i]},
                           constrained ? std::int64_t{m.node_group[i]} : 0}) {
      h = fnv_step(h, static_cast<std::uint64_t>(v));
    }
    hashes[i] = h ^ (h >> 32);
  }
  auto same_frag = [&](std::size_t a, std::size_t b) {
    if (m.cpu_free[a] != m.cpu_free[b] || m.model[a] != m.model[b] || gpus_of(a) != gpus_of(b)) return false;
    return std::equal(sorted.begin() + m.gpu_begin[a], sorted.begin() + m.gpu_begin[a] + gpus_of(a),
                      sorted.begin() + m.gpu_begin[b]);
  };
  auto same_score = [&](std::size_t a, std::size_t b) {
    return kernels::node_fields_equal(nv, static_cast<std::int32_t>(a), static_cast<std::int32_t>(b)) && same_frag(a, b);
  };
  m.score_as.resize(n);  // per state root here: the first root of its twins
  first_of_equals(roots, hashes.data(), same_score, m.score_as, scratch.score_tables, par);
  auto& score_roots = scratch.score_roots;
  first_of(score_roots, roots, [&](std::int32_t i) { return m.score_as[static_cast<std::size_t>(i)] == i; });
  auto& frag_rep = scratch.frag_rep;  // per score root: the first score root of its fragmentation state
  frag_rep.resize(n);
  first_of_equals(score_roots, frag_hashes.data(), same_frag, frag_rep, scratch.frag_tables,
                  par && static_cast<std::int64_t>(score_roots.size()) >= parallel_from);
  m.frag_slot.resize(n);
  m.frag_node.clear();
  for (std::size_t i = 0; i < n; ++i) {
    auto const root = static_cast<std::size_t>(m.same_as[i]);  // <= i
    m.score_as[i] = m.score_as[root];                          // <= root: a score root
    auto const frag_root = static_cast<std::size_t>(frag_rep[static_cast<std::size_t>(m.score_as[i])]);
    if (i == frag_root) {  // the first node of its fragmentation state: every earlier one's slot is set
      m.frag_slot[i] = static_cast<std::int32_t>(m.frag_node.size());
      m.frag_node.push_back(static_cast<std::int32_t>(i));
    } else {
      m.frag_slot[i] = m.frag_slot[frag_root];
    }
  }

  // Typical task set M (FGD): replica shapes of the round's (ctx) pending
  // and running work, most frequent first (ties by key, descending),
  // until 95% is covered.
  using tkey = flatten_scratch::task_key;  // cpu, milli, gpus, models
  auto& counts = scratch.counts;
  counts.clear();
  scratch.count_slots.clear();
  std::int64_t total = 0;
  auto add_shape = [&](demand const& d, std::uint64_t mm, std::int64_t count) {
    tkey const k{d.cpu_milli, d.gpus > 0 ? d.gpu_milli : 0, d.gpus, mm};
    find_or_insert(counts, scratch.count_slots, k, std::int64_t{0}).first += count;
    total += count;
  };
  for (std::size_t j = 0; j < ctx.pending.size(); ++j) {
    add_shape(ctx.pending[j].per_replica, ctx_model_mask(j), ctx.pending[j].replicas);
  }
  for (auto const& r : ctx.running) {
    add_shape(r.per_replica, ~std::uint64_t{0}, static_cast<std::int64_t>(r.replicas.size()));
  }
  auto& ranked = scratch.ranked;
  ranked.clear();
  for (auto const& [k, c] : counts) ranked.emplace_back(c, k);
  std::sort(ranked.begin(), ranked.end(), [](auto const& a, auto const& b) { return a > b; });
  std::int64_t covered = 0;
  std::size_t chosen = 0;
  for (auto const& r : ranked) {
    if (total > 0 && covered * 100 >= total * 95) break;
    if (chosen >= 64) break;
    ++chosen;
    covered += r.first;
  }
  for (auto* v : {&m.task_gpus, &m.task_milli, &m.task_freq_ppm}) v->clear();
  m.task_cpu.clear();
  m.task_model_mask.clear();
  for (std::size_t t = 0; t < chosen; ++t) {
    auto const& [c, k] = ranked[t];
    m.task_cpu.push_back(std::get<0>(k));
    m.task_milli.push_back(std::get<1>(k));
    m.task_gpus.push_back(std::get<2>(k));
    m.task_model_mask.push_back(std::get<3>(k));
    m.task_freq_ppm.push_back(static_cast<std::int32_t>(c * 1000000 / std::max<std::int64_t>(covered, 1)));
  }
  m.task_share_cpu = kernels::mean_share_cpu(m.tasks());
}

}  // namespace placer
