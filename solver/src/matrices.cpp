// Flattening a round into kernel views (see matrices.hpp).
#include <placer/solver/matrices.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <tuple>

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

/// The value of `key` in a vector kept sorted by key (a flat map), inserting
/// `fresh` when absent; second = whether it was inserted.
template <class Key, class Value>
std::pair<Value, bool> find_or_insert(std::vector<std::pair<Key, Value>>& v, Key const& key, Value fresh) {
  auto it = std::lower_bound(v.begin(), v.end(), key, [](auto const& e, Key const& k) { return e.first < k; });
  if (it != v.end() && it->first == key) return {it->second, false};
  v.insert(it, {key, fresh});
  return {fresh, true};
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
  m.gpu_free.clear();
  m.gpu_island.clear();
  std::size_t n_models = 0;
  m.gpu_begin[0] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto const& nd = nodes[i];
    m.cpu_free[i] = nd.cpu_milli_free;
    m.cpu_capacity[i] = nd.cpu_milli_capacity;
    m.mem_free[i] = nd.memory_mib_free;
    m.model[i] = nd.gpu_count() > 0 ? model_id(m.models, n_models, nd.gpu_model) : -1;
    m.pool[i] = pool_bit(nd.pool);
    m.flags[i] = static_cast<std::uint8_t>((nd.healthy ? node_flag_healthy : 0) | (nd.loanable ? node_flag_loanable : 0));
    std::int32_t cap = 0;
    for (std::int32_t g = 0; g < nd.gpu_count(); ++g) {
      bool const ok = nd.gpu_is_healthy(static_cast<std::size_t>(g));
      m.gpu_free.push_back(ok ? nd.gpu_free_milli[g] : 0);
      m.gpu_island.push_back(nd.gpu_nvlink.empty() ? 0 : nd.gpu_nvlink[g]);
      cap += ok ? milli_per_gpu : 0;
    }
    m.gpu_capacity[i] = cap;
    m.gpu_begin[i + 1] = static_cast<std::int32_t>(m.gpu_free.size());
  }
  m.models.resize(n_models);
  m.constraints.build(in, m);
  bool const constrained = m.constraints.active;

  // Classes: identical (demand, models, pool rule) share a row, numbered in
  // order of first appearance.
  for (auto* v : {&m.class_gpus, &m.class_milli, &m.job_class, &m.class_constraint}) v->clear();
  for (auto* v : {&m.class_cpu, &m.class_mem}) v->clear();
  for (auto* v : {&m.class_pool_mask, &m.class_loan_ok, &m.class_any_model}) v->clear();
  m.class_model_mask.clear();
  scratch.classes.clear();
  m.job_class.reserve(in.pending.size());
  for (std::size_t jj = 0; jj < in.pending.size(); ++jj) {
    auto const& j = in.pending[jj];
    auto const& d = j.per_replica;
    std::uint64_t const mm = d.gpus > 0 ? model_mask(j.allowed_gpu_models, m.models) : ~std::uint64_t{0};
    std::uint8_t const pm = job_pool_mask(j.kind);
    std::uint8_t const loan = j.kind != job_kind::inference && in.pol.queue.loaning ? 1 : 0;
    std::int32_t const set = constrained ? m.constraints.job_set[jj] : 0;
    flatten_scratch::class_key const k{d.gpus, d.gpus > 0 ? d.gpu_milli : milli_per_gpu, d.cpu_milli, d.memory_mib,
                                       mm, pm, loan, set};
    auto const [row, fresh] = find_or_insert(scratch.classes, k, static_cast<std::int32_t>(m.class_gpus.size()));
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
    }
    m.job_class.push_back(row);
  }

  // Model scarcity: per GPU model, the GPU demand of pending jobs limited
  // to a subset of models (split evenly over their models) against the free
  // GPU of that model, capped at 1 (per mille). Jobs that accept any model
  // are steered away from models under pressure (ops.hpp). At most 64
  // models (model_id), so fixed arrays.
  std::array<std::int64_t, 64> restricted{}, free_by_model{};
  for (std::size_t jj = 0; jj < in.pending.size(); ++jj) {
    auto const& j = in.pending[jj];
    if (j.per_replica.gpus == 0 || j.allowed_gpu_models.empty()) continue;
    std::uint64_t const mm = m.class_model_mask[m.job_class[jj]];
    int const k = std::popcount(mm);
    if (k == 0) continue;
    for (std::size_t id = 0; id < m.models.size(); ++id) {
      if ((mm >> id) & 1U) restricted[id] += j.per_replica.gpu_milli_total() * j.replicas / k;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (m.model[i] < 0) continue;
    for (auto g = m.gpu_begin[i]; g < m.gpu_begin[i + 1]; ++g) free_by_model[m.model[i]] += m.gpu_free[g];
  }
  m.scarcity.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    auto const id = m.model[i];
    if (id < 0 || restricted[id] == 0) continue;
    m.scarcity[i] = static_cast<std::int32_t>(std::min<std::int64_t>(1000, restricted[id] * 1000 / std::max<std::int64_t>(free_by_model[id], 1)));
  }

  // Nodes in identical states score identically: the score stage computes
  // one column per state and copies it (openb's 1,213 GPU nodes are 15
  // states before the round). A hash of every field the score reads,
  // sorted; equal hashes are compared in full, so a collision only costs
  // a column.
  auto const nv = m.nodes();
  auto same_state = [&](std::size_t a, std::size_t b) {
    return kernels::node_state_equal(nv, static_cast<std::int32_t>(a), static_cast<std::int32_t>(b));
  };
  auto& hashed = scratch.node_hash;
  hashed.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the fields' values
    auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
    for (std::int64_t v : {m.cpu_free[i], m.cpu_capacity[i], m.mem_free[i], std::int64_t{m.model[i]},
                           std::int64_t{m.pool[i]}, std::int64_t{m.flags[i]}, std::int64_t{m.gpu_capacity[i]},
                           std::int64_t{m.scarcity[i]}, constrained ? std::int64_t{m.node_group[i]} : 0}) {
      mix(static_cast<std::uint64_t>(v));
    }
    for (auto g = m.gpu_begin[i]; g < m.gpu_begin[i + 1]; ++g) {
      mix(static_cast<std::uint64_t>(m.gpu_free[g]) << 8 | m.gpu_island[g]);
    }
    hashed[i] = {h, static_cast<std::int32_t>(i)};
  }
  std::sort(hashed.begin(), hashed.end());
  m.same_as.resize(n);
  std::size_t first = 0;  // the run of equal hashes; its first node has the lowest index
  for (std::size_t k = 0; k < n; ++k) {
    if (hashed[k].first != hashed[first].first) first = k;
    auto const i = static_cast<std::size_t>(hashed[k].second);
    auto const rep = static_cast<std::size_t>(hashed[first].second);
    m.same_as[i] = first != k && same_state(rep, i) ? static_cast<std::int32_t>(rep) : static_cast<std::int32_t>(i);
  }

  // Typical task set M (FGD): replica shapes of pending and running work,
  // most frequent first (ties by key, descending), until 95% is covered.
  using tkey = flatten_scratch::task_key;  // cpu, milli, gpus, models
  auto& counts = scratch.counts;
  counts.clear();
  std::int64_t total = 0;
  auto add_shape = [&](demand const& d, std::uint64_t mm, std::int64_t count) {
    tkey const k{d.cpu_milli, d.gpus > 0 ? d.gpu_milli : 0, d.gpus, mm};
    auto it = std::lower_bound(counts.begin(), counts.end(), k, [](auto const& e, tkey const& x) { return e.first < x; });
    if (it != counts.end() && it->first == k) {
      it->second += count;
    } else {
      counts.insert(it, {k, count});
    }
    total += count;
  };
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    add_shape(in.pending[j].per_replica, m.class_model_mask[m.job_class[j]], in.pending[j].replicas);
  }
  for (auto const& r : in.running) {
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
