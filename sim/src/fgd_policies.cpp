// FGD experiment: the six published score policies, the filter, typical
// task set M and node fragmentation (../shared/data/README.md section 2).
#include <placer/sim/fgd.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <tuple>

namespace placer::sim::fgd {

namespace {
constexpr double cpu_norm = 128000.0;
constexpr double gpu_norm = 8000.0;

bool model_ok(node_state const& n, std::uint64_t mask) {
  return n.model >= 0 && ((mask >> n.model) & 1U) != 0;
}

std::int32_t count_fitting(node_state const& n, std::int32_t milli) {
  std::int32_t k = 0;
  for (auto f : n.gpu_free) k += f >= milli ? 1 : 0;
  return k;
}

int clamp_score(double s) {
  auto v = static_cast<int>(std::floor(s));
  return std::clamp(v, 0, 100);
}
}  // namespace

std::string policy_name(policy p) {
  switch (p) {
    case policy::random: return "Random";
    case policy::dot_prod: return "DotProd";
    case policy::gpu_clustering: return "GpuClustering";
    case policy::gpu_packing: return "GpuPacking";
    case policy::best_fit: return "BestFit";
    case policy::fgd: return "FGD";
    case policy::placer: return "Placer";
    case policy::placer_batch: return "PlacerBatch";
  }
  return "?";
}

std::string published_name(policy p) {
  switch (p) {
    case policy::random: return "01-Random";
    case policy::dot_prod: return "02-DotProd";
    case policy::gpu_clustering: return "03-GpuClustering";
    case policy::gpu_packing: return "04-GpuPacking";
    case policy::best_fit: return "05-BestFit";
    case policy::fgd: return "06-FGD";
    default: return "";
  }
}

policy parse_policy(std::string const& s) {
  std::string l;
  for (char c : s) {
    if (c != '-' && c != '_') l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (int i = 0; i <= static_cast<int>(policy::placer_batch); ++i) {
    auto const p = static_cast<policy>(i);
    std::string n;
    for (char c : policy_name(p)) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == n) return p;
  }
  if (l == "batch" || l == "placerbatched") return policy::placer_batch;
  throw std::invalid_argument("unknown policy '" + s +
                              "' (Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD, Placer, PlacerBatch)");
}

std::vector<policy> default_policies() {
  return {policy::random, policy::dot_prod, policy::gpu_clustering, policy::gpu_packing,
          policy::best_fit, policy::fgd, policy::placer};
}

int pod_kind(pod const& p) {
  if (p.gpus == 0) return -1;
  if (p.fractional()) return 0;
  switch (p.gpus) {
    case 1: return 1;
    case 2: return 2;
    case 4: return 3;
    case 8: return 4;
    default: return 5;
  }
}

void count_task(task_counts& counts, pod const& p, std::int64_t copies) {
  auto& e = counts[task_key{p.cpu, p.milli, p.gpus, p.spec}];
  e.count += copies;
  e.model_mask = p.model_mask;
}

std::vector<typical_task> typical_tasks(std::vector<pod> const& trace, double coverage) {
  task_counts counts;
  for (auto const& p : trace) count_task(counts, p);
  return typical_tasks(counts, coverage);
}

std::vector<typical_task> typical_tasks(task_counts const& counts, double coverage) {
  using key = task_key;
  std::int64_t n_pods = 0;
  std::vector<std::tuple<std::int64_t, key, std::uint64_t>> ranked;
  for (auto const& [k, e] : counts) {
    ranked.emplace_back(e.count, k, e.model_mask);
    n_pods += e.count;
  }
  std::sort(ranked.begin(), ranked.end(), [](auto const& a, auto const& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::get<1>(a) > std::get<1>(b);
  });
  auto const total = static_cast<double>(n_pods);
  std::int64_t covered = 0;
  std::vector<typical_task> out;
  for (auto const& [c, k, mask] : ranked) {
    if (total > 0 && static_cast<double>(covered) >= coverage * total) break;
    typical_task t;
    t.cpu = std::get<0>(k);
    t.milli = std::get<1>(k);
    t.gpus = std::get<2>(k);
    t.model_mask = mask;
    t.freq = static_cast<double>(c);
    out.push_back(t);
    covered += c;
  }
  for (auto& t : out) t.freq /= static_cast<double>(std::max<std::int64_t>(covered, 1));
  return out;
}

bool fits(node_state const& n, pod const& p) {
  if (p.cpu > n.cpu_free || p.mem > n.mem_free) return false;
  if (p.gpus == 0) return true;
  if (!model_ok(n, p.model_mask)) return false;
  return count_fitting(n, p.milli) >= p.gpus;
}

double node_fragmentation(node_state const& n, std::vector<typical_task> const& m) {
  std::int64_t total = 0;
  for (auto f : n.gpu_free) total += f;
  if (total == 0) return 0;
  double frag = 0;
  for (auto const& t : m) {
    bool const runs = t.gpus > 0 && model_ok(n, t.model_mask) && t.cpu <= n.cpu_free &&
                      count_fitting(n, t.milli) >= t.gpus;
    std::int64_t amount = 0;
    if (!runs) {
      amount = total;
    } else {
      for (auto f : n.gpu_free) amount += f < t.milli ? f : 0;
    }
    frag += t.freq * static_cast<double>(amount);
  }
  return frag;
}

int dot_prod_score(node_state const& n, pod const& p) {
  double const dot = (static_cast<double>(n.cpu_free) / cpu_norm) * (static_cast<double>(p.cpu) / cpu_norm) +
                     (static_cast<double>(n.gpu_free_total) / gpu_norm) *
                         (static_cast<double>(p.gpu_milli_total()) / gpu_norm);
  return clamp_score(100.0 * (1.0 - dot / 2.0));
}

int gpu_clustering_score(node_state const& n, pod const& p) {
  int const k = pod_kind(p);
  if (k < 0) return 0;
  std::int32_t kinds_present = 0;
  for (auto c : n.kinds) kinds_present += c > 0 ? 1 : 0;
  int tier = 0;
  if (n.kinds[k] > 0) {
    tier = kinds_present == 1 ? 75 : 50;
  } else if (kinds_present == 0) {
    tier = 25;
  }
  auto const base = static_cast<int>(25 * (8000 - n.gpu_free_total) / 8000);
  return std::clamp(tier + base, 0, 100);
}

int gpu_packing_score(node_state const& n, pod const& p) {
  if (p.gpus == 0) return 0;
  std::int32_t fully_free = 0;
  for (auto f : n.gpu_free) fully_free += f == 1000 ? 1 : 0;
  if (fully_free == n.n_gpus()) return std::max(33 - fully_free, fully_free);
  // Fitting GPUs, least idle first (stable: lowest index on ties).
  std::vector<std::int32_t> order(n.gpu_free.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return n.gpu_free[a] < n.gpu_free[b]; });
  std::int32_t need = p.gpus;
  std::int32_t used_full = 0;
  std::int64_t ratio_sum = 0;
  for (auto i : order) {
    if (need == 0) break;
    auto const left = n.gpu_free[i];
    if (p.milli <= left) {
      --need;
      used_full += left == 1000 ? 1 : 0;
      ratio_sum += left * 100 / 1000;
    }
  }
  if (need != 0) return 0;
  if (used_full > 0) return std::max(50 - used_full, 33);
  return std::max(static_cast<int>(100 - ratio_sum / 10), 50);
}

int best_fit_raw_score(node_state const& n, pod const& p) {
  double const s = 100.0 * (1.0 - 0.5 * static_cast<double>(n.cpu_free - p.cpu) / cpu_norm -
                            0.5 * static_cast<double>(n.gpu_free_total - p.gpu_milli_total()) / gpu_norm);
  return clamp_score(s);
}

int best_fit_normalise(int raw, int min_raw, int max_raw) {
  if (max_raw == min_raw) return 0;
  return (raw - min_raw) * 100 / (max_raw - min_raw);
}

int fgd_score(node_state const& n, pod const& p, std::vector<typical_task> const& m, double f_before,
              std::int32_t* gpu) {
  auto score_of = [&](double after) {
    double const x = (f_before - after) / 1000.0;
    return clamp_score(100.0 / (1.0 + std::exp(-x)));
  };
  node_state t = n;
  t.cpu_free -= p.cpu;
  if (p.fractional()) {
    int best = -1;
    std::int32_t best_gpu = -1;
    std::vector<std::pair<std::int32_t, int>> seen;  // idle value -> score (same idle, same F_after)
    for (std::int32_t i = 0; i < n.n_gpus(); ++i) {
      auto const left = n.gpu_free[i];
      if (left < p.milli) continue;
      int s = -1;
      for (auto const& [v, sc] : seen) {
        if (v == left) s = sc;
      }
      if (s < 0) {
        t.gpu_free[i] = left - p.milli;
        s = score_of(node_fragmentation(t, m));
        t.gpu_free[i] = left;
        seen.emplace_back(left, s);
      }
      if (s > best) {
        best = s;
        best_gpu = i;
      }
    }
    if (gpu != nullptr) *gpu = best_gpu;
    return std::max(best, 0);
  }
  std::int32_t need = p.gpus;
  for (std::int32_t i = 0; i < t.n_gpus() && need > 0; ++i) {
    if (t.gpu_free[i] == 1000) {
      t.gpu_free[i] = 0;
      --need;
    }
  }
  if (gpu != nullptr) *gpu = -1;
  return score_of(node_fragmentation(t, m));
}

std::int32_t tightest_gpu(node_state const& n, std::int32_t milli) {
  std::int32_t best = -1;
  for (std::int32_t i = 0; i < n.n_gpus(); ++i) {
    if (n.gpu_free[i] >= milli && (best < 0 || n.gpu_free[i] < n.gpu_free[best])) best = i;
  }
  return best;
}

std::vector<std::int32_t> commit(node_state& n, pod const& p, std::int32_t gpu) {
  std::vector<std::int32_t> used;
  n.cpu_free -= p.cpu;
  n.mem_free -= p.mem;
  if (p.gpus == 0) return used;
  if (p.fractional()) {
    if (gpu < 0) gpu = tightest_gpu(n, p.milli);
    if (gpu < 0 || n.gpu_free[gpu] < p.milli) throw std::logic_error("fgd::commit: share does not fit");
    n.gpu_free[gpu] -= p.milli;
    used.push_back(gpu);
  } else {
    for (std::int32_t i = 0; i < n.n_gpus() && static_cast<std::int32_t>(used.size()) < p.gpus; ++i) {
      if (n.gpu_free[i] == 1000) {
        n.gpu_free[i] = 0;
        used.push_back(i);
      }
    }
    if (static_cast<std::int32_t>(used.size()) != p.gpus) throw std::logic_error("fgd::commit: GPUs do not fit");
  }
  n.gpu_free_total -= p.gpu_milli_total();
  ++n.kinds[pod_kind(p)];
  return used;
}

}  // namespace placer::sim::fgd
