#pragma once
// The data-parallel functors of a round, written once and compiled by g++
// (OpenMP backend, host_ns) and nvcc (CUDA backend, cuda_ns). They only read
// the views in views.hpp; everything is integer arithmetic with fixed tie
// rules, so both backends produce identical matrices.
//
// Feasibility and scoring of one (class, node) cell:
//   feasible  = node healthy, pool allowed, GPU model allowed, CPU and memory
//               fit, and GPUs fit: a fractional share needs one GPU with
//               free >= share; whole GPUs need `gpus` fully free GPUs.
//   score     = w_binpack * binpack + w_fragmentation * fgd + pool penalty,
//               each term normalised to 0..1000; -1 marks infeasible.

#include <placer/kernels/hd.hpp>
#include <placer/kernels/views.hpp>

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

inline constexpr std::int32_t max_gpus_per_node = 64;
inline constexpr std::int32_t max_tasks = 64;  ///< typical task set size (build_matrices caps it)
inline constexpr std::int32_t infeasible = -1;

template <class T>
PLACER_HD constexpr T min_of(T a, T b) { return a < b ? a : b; }
template <class T>
PLACER_HD constexpr T max_of(T a, T b) { return a < b ? b : a; }

/// The least power of two at least w (w >= 1): where Team::group_fold's
/// runs of w workers are aligned.
PLACER_HD constexpr std::int32_t fold_span(std::int32_t w) {
  std::int32_t p = 1;
  while (p < w) p *= 2;
  return p;
}

/// What Team::group_fold folds a group's values with.
struct fold_sum {
  PLACER_HD constexpr std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a + b; }
};
struct fold_min {
  PLACER_HD constexpr std::int64_t operator()(std::int64_t a, std::int64_t b) const { return min_of(a, b); }
};
struct fold_max {
  PLACER_HD constexpr std::int64_t operator()(std::int64_t a, std::int64_t b) const { return max_of(a, b); }
};

/// Does a replica of (gpus, milli) fit the GPU free vector f[0..g)?
PLACER_HD inline bool gpus_fit(std::int32_t const* f, std::int32_t g, std::int32_t gpus, std::int32_t milli) {
  if (gpus == 0) return true;
  std::int32_t ok = 0;
  for (std::int32_t i = 0; i < g; ++i) ok += f[i] >= milli ? 1 : 0;
  return ok >= gpus;
}

/// Takes a replica's GPUs from f in place, by the deterministic rule the
/// assignment also uses: a fractional share goes to the best-fit GPU (least
/// free that still fits, lowest index on ties); whole GPUs come from one
/// NVLink island when one can hold them all (the island with the fewest
/// free GPUs that does, lowest island id on ties; keeps big islands whole),
/// lowest-indexed first; otherwise the lowest-indexed fully free GPUs.
/// `island` may be null (one island). Returns false (f untouched) if no fit.
/// `taken`, where given (g at most 64), gets the GPUs taken as a bit mask.
PLACER_HD inline bool take_gpus(std::int32_t* f, std::int32_t g, std::int32_t gpus, std::int32_t milli,
                                std::uint8_t const* island, std::uint64_t* taken = nullptr) {
  if (taken != nullptr) *taken = 0;
  if (gpus == 0) return true;
  if (!gpus_fit(f, g, gpus, milli)) return false;
  if (milli < 1000) {
    std::int32_t best = -1;
    for (std::int32_t i = 0; i < g; ++i) {
      if (f[i] >= milli && (best < 0 || f[i] < f[best])) best = i;
    }
    f[best] -= milli;
    if (taken != nullptr) *taken = std::uint64_t{1} << best;
    return true;
  }
  std::int32_t chosen = -1;
  std::int32_t chosen_free = 0;
  if (island != nullptr) {
    for (std::int32_t i = 0; i < g; ++i) {
      if (f[i] != 1000) continue;
      std::int32_t const k = island[i];
      bool seen = false;  // count each island once, at its first free GPU
      for (std::int32_t j = 0; j < i && !seen; ++j) seen = f[j] == 1000 && island[j] == k;
      if (seen) continue;
      std::int32_t free_in_k = 0;
      for (std::int32_t j = i; j < g; ++j) free_in_k += (f[j] == 1000 && island[j] == k) ? 1 : 0;
      if (free_in_k >= gpus && (chosen < 0 || free_in_k < chosen_free || (free_in_k == chosen_free && k < chosen))) {
        chosen = k;
        chosen_free = free_in_k;
      }
    }
  }
  std::int32_t left = gpus;
  std::uint64_t mask = 0;
  for (std::int32_t i = 0; i < g && left > 0; ++i) {
    if (f[i] == 1000 && (chosen < 0 || island[i] == chosen)) {
      f[i] = 0;
      --left;
      mask |= std::uint64_t{1} << (i % 64);
    }
  }
  if (taken != nullptr) *taken = mask;
  return true;
}

/// Commits one replica of class c on node n: its GPUs by take_gpus' rule
/// (`gpu_free`, the node view's CSR, writable), its CPU and memory. Sets
/// `taken` to the GPUs it took (bit i = GPU i of the node). Returns false,
/// with nothing changed, when the GPUs do not fit; CPU and memory are the
/// caller's to check.
PLACER_HD inline bool take_replica(node_view const& nv, class_view const& cv, std::int32_t c, std::int32_t n,
                                   std::int32_t* gpu_free, std::int64_t* cpu_free, std::int64_t* mem_free,
                                   std::uint64_t& taken) {
  std::int32_t const g0 = nv.gpu_begin[n];
  std::int32_t const g = min_of(nv.gpu_begin[n + 1] - g0, max_gpus_per_node);
  std::uint64_t mask = 0;
  if (!take_gpus(gpu_free + g0, g, cv.gpus[c], cv.milli[c], nv.gpu_island != nullptr ? nv.gpu_island + g0 : nullptr,
                 &mask)) {
    return false;
  }
  taken = mask;
  cpu_free[n] -= cv.cpu[c];
  mem_free[n] -= cv.mem[c];
  return true;
}

/// Gives back one replica of class c that take_replica put on node n and
/// whose GPUs were `taken`.
PLACER_HD inline void give_replica(node_view const& nv, class_view const& cv, std::int32_t c, std::int32_t n,
                                   std::uint64_t taken, std::int32_t* gpu_free, std::int64_t* cpu_free,
                                   std::int64_t* mem_free) {
  std::int32_t* f = gpu_free + nv.gpu_begin[n];
  for (std::int32_t i = 0; taken != 0; ++i, taken >>= 1) {
    if ((taken & 1U) != 0) f[i] += cv.milli[c];
  }
  cpu_free[n] += cv.cpu[c];
  mem_free[n] += cv.mem[c];
}

/// Whether nodes a and b are equal in every field of the node view that a
/// score reads but their GPUs' free values and islands.
PLACER_HD inline bool node_fields_equal(node_view const& nv, std::int32_t a, std::int32_t b) {
  return nv.cpu_free[a] == nv.cpu_free[b] && nv.cpu_capacity[a] == nv.cpu_capacity[b] &&
         nv.mem_free[a] == nv.mem_free[b] && nv.model[a] == nv.model[b] && nv.pool[a] == nv.pool[b] &&
         nv.flags[a] == nv.flags[b] && nv.gpu_capacity[a] == nv.gpu_capacity[b] &&
         (nv.scarcity == nullptr || nv.scarcity[a] == nv.scarcity[b]) &&
         (nv.group == nullptr || nv.group[a] == nv.group[b]);
}

/// Whether nodes a and b are in one state: every field of the node view
/// that a score reads is equal, so their columns are equal.
PLACER_HD inline bool node_state_equal(node_view const& nv, std::int32_t a, std::int32_t b) {
  if (!node_fields_equal(nv, a, b)) return false;
  std::int32_t const ga = nv.gpu_begin[a], gb = nv.gpu_begin[b];
  std::int32_t const g = nv.gpu_begin[a + 1] - ga;
  if (nv.gpu_begin[b + 1] - gb != g) return false;
  for (std::int32_t i = 0; i < g; ++i) {
    if (nv.gpu_free[ga + i] != nv.gpu_free[gb + i]) return false;
    if (nv.gpu_island != nullptr && nv.gpu_island[ga + i] != nv.gpu_island[gb + i]) return false;
  }
  return true;
}

/// A node's g free GPU values sorted ascending into `out`: a fragmentation
/// state's values, which GPU holds which not mattering (column_frag). Up to
/// 8 GPUs (most nodes) by Batcher's odd-even merge network of 19
/// compare-exchanges, the values padded with INT32_MAX: no branch on the
/// values, where insertion sort's mispredicted (the 100k round's 5,504
/// state roots: 15% of flatten); more by insertion sort.
PLACER_HD inline void sort_free_gpus(std::int32_t const* free, std::int32_t g, std::int32_t* out) {
  if (g <= 8) {
    std::int32_t v[8];
    for (std::int32_t k = 0; k < 8; ++k) v[k] = k < g ? free[k] : INT32_MAX;
    auto const ce = [&v](int a, int b) {
      std::int32_t const lo = v[a] < v[b] ? v[a] : v[b];
      std::int32_t const hi = v[a] < v[b] ? v[b] : v[a];
      v[a] = lo;
      v[b] = hi;
    };
    // The network's six layers, a line each (a layer's pairs are apart).
    ce(0, 1); ce(2, 3); ce(4, 5); ce(6, 7);
    ce(0, 2); ce(1, 3); ce(4, 6); ce(5, 7);
    ce(1, 2); ce(5, 6);
    ce(0, 4); ce(1, 5); ce(2, 6); ce(3, 7);
    ce(2, 4); ce(3, 5);
    ce(1, 2); ce(3, 4); ce(5, 6);
    // Each value by its constant index, so v stays in registers: a loop
    // over k copied v through the stack in 8-byte loads of two 4-byte
    // stores, which the store buffer cannot forward.
    for (std::int32_t k = 0; k < 8; ++k) {
      if (k < g) out[k] = v[k];
    }
    return;
  }
  for (std::int32_t k = 0; k < g; ++k) {
    std::int32_t const v = free[k];
    std::int32_t at = k;
    for (; at > 0 && out[at - 1] > v; --at) out[at] = out[at - 1];
    out[at] = v;
  }
}

/// The hash of a fragmentation state (its free GPU values sorted, free CPU
/// and model; build_matrices' states, the CPU backend's frag_memo): each
/// sorted value times its own odd constant, summed (products that do not
/// wait on each other), then mixed.
PLACER_HD inline std::uint64_t frag_state_hash(std::int32_t const* sorted, std::int32_t g, std::int64_t cpu_free,
                                               std::int32_t model) {
  std::uint64_t h = static_cast<std::uint64_t>(cpu_free) * 0x9E3779B97F4A7C15ULL +
                    static_cast<std::uint64_t>(model + 1) * 0xD6E8FEB86659FD93ULL + static_cast<std::uint64_t>(g);
  std::uint64_t k = 0xA0761D6478BD642FULL;
  for (std::int32_t i = 0; i < g; ++i) {
    h += static_cast<std::uint64_t>(sorted[i]) * k;
    k += 0x3C6EF372FE94F82AULL;
  }
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

/// task_view::share_cpu of a task set: its fractional shares' mean CPU
/// (milli) weighted by frequency, 0 when it has none.
inline std::int64_t mean_share_cpu(task_view const& t) {
  std::int64_t weight = 0, sum = 0;
  for (std::int32_t m = 0; m < t.n_tasks; ++m) {
    if (t.gpus[m] == 1 && t.milli[m] < 1000) {
      weight += t.freq_ppm[m];
      sum += t.freq_ppm[m] * t.cpu[m];
    }
  }
  return weight > 0 ? sum / weight : 0;
}

/// CPU (milli) that the packable measure budgets per copy of a fractional
/// share needing `cpu`: two parts its own demand, one part the mean of M's
/// shares (t.share_cpu), since the node's other GPUs will be fed by the
/// mixture of shares that arrives, not by copies of this one alone.
PLACER_HD inline std::int64_t share_copy_cpu(std::int64_t cpu, task_view const& t) {
  return t.share_cpu > 0 ? (2 * cpu + t.share_cpu) / 3 : cpu;
}

/// Lane `lane` of `lanes`' slice of the task set: an equal run of the
/// tasks each (the last lanes' shorter or empty), share_cpu the whole set's.
/// node_fragmentation is a sum over the tasks, so the slices' sum is the set's.
PLACER_HD inline task_view task_slice(task_view t, std::int32_t lane, std::int32_t lanes) {
  std::int32_t const per = (t.n_tasks + lanes - 1) / lanes;
  std::int32_t const from = min_of(lane * per, t.n_tasks);
  t.n_tasks = min_of(per, t.n_tasks - from);
  t.gpus += from;
  t.milli += from;
  t.cpu += from;
  t.model_mask += from;
  t.freq_ppm += from;
  return t;
}

/// FGD fragmentation of one node against the task set, in milli x ppm.
/// F_n(m) = all free GPU milli if m cannot run on the node (CPU-only task,
/// model not allowed, too few fitting GPUs, too little CPU); otherwise the
/// free milli on GPUs whose free share is below m's per-GPU demand. With
/// `packable` (Placer's score; FGD's definition is the reported metric), a
/// fractional m can use no more GPUs than the node's free CPU can feed
/// copies at share_copy_cpu each: the rest of the GPUs it fits on count as
/// fragmented too (docs/fgd-experiment.md has the measurements, and the
/// variants left out).
PLACER_HD inline std::int64_t node_fragmentation(std::int32_t const* f, std::int32_t g, std::int64_t cpu_free,
                                                 std::int32_t model, task_view const& t, bool packable = false) {
  std::int64_t total_free = 0;
  for (std::int32_t i = 0; i < g; ++i) total_free += f[i];
  if (total_free == 0) return 0;
  std::int64_t frag = 0;
  for (std::int32_t m = 0; m < t.n_tasks; ++m) {
    bool const model_ok = model >= 0 && ((t.model_mask[m] >> model) & 1U) != 0;
    bool const runs = t.gpus[m] > 0 && model_ok && t.cpu[m] <= cpu_free && gpus_fit(f, g, t.gpus[m], t.milli[m]);
    std::int64_t usable = 0;
    if (runs) {
      for (std::int32_t i = 0; i < g; ++i) usable += f[i] >= t.milli[m] ? f[i] : 0;
      if (packable && t.milli[m] < 1000 && t.cpu[m] > 0) {
        usable = min_of<std::int64_t>(usable, cpu_free / share_copy_cpu(t.cpu[m], t) * 1000);
      }
    }
    frag += (total_free - usable) * t.freq_ppm[m];
  }
  return frag;
}

/// One node's fragmentation before and after a replica, for a whole
/// column of classes: the per-task fit counts and usable sums of the node's
/// GPUs are taken once (O(tasks x GPUs)); a replica changes only the GPUs it
/// takes, so its after-state updates them in O(tasks x GPUs taken). Equal
/// to node_fragmentation(..., packable = true) on either state, integer for
/// integer.
struct column_frag {
  std::int32_t g = 0;
  std::int32_t model = -1;
  std::int64_t cpu_free = 0;
  std::int64_t total = 0;
  std::int32_t whole = 0;     ///< GPUs fully free (1000 milli)
  std::int32_t max_free = 0;  ///< the most free milli on one GPU
  std::int32_t f[max_gpus_per_node];
  std::int32_t count[max_tasks];   ///< per task: GPUs with free >= its share
  std::int64_t usable[max_tasks];  ///< per task: free milli on those GPUs

  PLACER_HD void init(std::int32_t const* free, std::int32_t gpus, std::int64_t cpu, std::int32_t node_model,
                      task_view const& t) {
    init_gpus(free, gpus, cpu, node_model);
    for (std::int32_t m = 0; m < t.n_tasks; ++m) {
      std::int32_t c = 0;
      std::int64_t u = 0;
      for (std::int32_t i = 0; i < g; ++i) {
        c += f[i] >= t.milli[m] ? 1 : 0;
        u += f[i] >= t.milli[m] ? f[i] : 0;
      }
      count[m] = c;
      usable[m] = u;
    }
  }

  /// The GPU counts alone (fits and total; not the per-task counts that
  /// fragmentation and after_replica read).
  PLACER_HD void init_gpus(std::int32_t const* free, std::int32_t gpus, std::int64_t cpu, std::int32_t node_model) {
    g = gpus;
    model = node_model;
    cpu_free = cpu;
    total = 0;
    whole = 0;
    max_free = 0;
    for (std::int32_t i = 0; i < g; ++i) {
      f[i] = free[i];
      total += f[i];
      whole += f[i] >= 1000 ? 1 : 0;  // gpus_fit's count for a whole GPU
      max_free = max_of(max_free, f[i]);
    }
  }

  /// gpus_fit on the node's GPUs (whole GPUs and single shares from the
  /// counts taken once, other shapes by the scan).
  PLACER_HD bool fits(std::int32_t gpus, std::int32_t milli) const {
    if (gpus == 0) return true;
    if (milli == 1000) return whole >= gpus;
    if (gpus == 1 && milli > 0) return max_free >= milli;
    return gpus_fit(f, g, gpus, milli);
  }

  /// F after one replica of (gpus, milli, cpu) that fits, taken by
  /// take_gpus' rule. F depends on the free values, not on which GPU holds
  /// them: whole GPUs are `gpus` fully free ones (take_gpus' island choice
  /// only picks among equal values), a share comes off the best-fit GPU
  /// (least free that fits), one GPU whatever `gpus` says, as take_gpus
  /// takes it.
  PLACER_HD std::int64_t after_replica(task_view const& t, std::int32_t gpus, std::int32_t milli,
                                       std::int64_t cpu) const {
    if (gpus == 0) return fragmentation(t, 0, 0, 0, cpu);
    if (milli >= 1000) return fragmentation(t, gpus, 0, 0, cpu);
    // Only the best-fit GPU's free value matters: the least that fits, as
    // a branch-free minimum (which GPUs fit is data the predictor cannot learn).
    constexpr std::int32_t none = std::int32_t{1} << 30;
    std::int32_t from = none;
    for (std::int32_t i = 0; i < g; ++i) from = min_of(from, f[i] >= milli ? f[i] : none);
    return fragmentation(t, 0, from, milli, cpu);
  }

  /// F with `whole` fully free GPUs taken, `share` milli taken from a GPU
  /// with `from` free (share 0: none) and `cpu` taken; all zero give the
  /// state as it is. O(tasks): a task's fit count and usable sum change by
  /// closed forms.
  PLACER_HD std::int64_t fragmentation(task_view const& t, std::int32_t whole, std::int32_t from, std::int32_t share,
                                       std::int64_t cpu) const {
    std::int64_t const tot = total - std::int64_t{1000} * whole - share;
    if (tot == 0) return 0;
    std::int64_t const cpu_left = cpu_free - cpu;
    std::int32_t const to = from - share;
    std::int64_t frag = 0;
    for (std::int32_t m = 0; m < t.n_tasks; ++m) {
      std::int32_t const milli = t.milli[m];
      // A whole GPU goes from 1000 free to 0; the share's GPU from `from` to `to`.
      std::int32_t const c = count[m] + whole * ((0 >= milli ? 1 : 0) - (1000 >= milli ? 1 : 0)) +
                             (to >= milli ? 1 : 0) - (from >= milli ? 1 : 0);
      std::int64_t const u = usable[m] - std::int64_t{1000} * whole * (1000 >= milli ? 1 : 0) +
                             (to >= milli ? to : 0) - (from >= milli ? from : 0);
      bool const model_ok = model >= 0 && ((t.model_mask[m] >> model) & 1U) != 0;
      bool const runs = t.gpus[m] > 0 && model_ok && t.cpu[m] <= cpu_left && c >= t.gpus[m];
      std::int64_t use = 0;
      if (runs) {
        use = u;
        if (milli < 1000 && t.cpu[m] > 0) use = min_of<std::int64_t>(use, cpu_left / share_copy_cpu(t.cpu[m], t) * 1000);
      }
      frag += (tot - use) * t.freq_ppm[m];
    }
    return frag;
  }
};

/// The (constraint set, node group) cell of class c on node n, or -1 when
/// the round has no constraints.
PLACER_HD inline std::int64_t constraint_cell(node_view const& nv, class_view const& cv, std::int32_t c,
                                              std::int32_t n) {
  if (cv.admit == nullptr) return -1;
  return static_cast<std::int64_t>(cv.constraint[c]) * cv.n_groups + nv.group[n];
}

/// The part of feasibility that does not depend on free capacity: node
/// health, the job's node selector, affinity and tolerations, the pool rule
/// (own or shared pool; training and batch may borrow loanable inference
/// nodes) and, for GPU replicas, the GPU model.
PLACER_HD inline bool node_admits(node_view const& nv, class_view const& cv, std::int32_t c, std::int32_t n) {
  if ((nv.flags[n] & node_flag_healthy) == 0) return false;
  if (cv.admit != nullptr && cv.admit[constraint_cell(nv, cv, c, n)] == 0) return false;
  std::uint8_t const pool = nv.pool[n];
  bool const pool_ok = (cv.pool_mask[c] & pool) != 0 ||
                       (pool == pool_bit_inference && cv.loan_ok[c] != 0 && (nv.flags[n] & node_flag_loanable) != 0);
  if (!pool_ok) return false;
  if (cv.gpus[c] == 0) return true;
  std::int32_t const model = nv.model[n];
  return model >= 0 && ((cv.model_mask[c] >> model) & 1U) != 0;
}

/// Feasibility of class c on node n as it is now (ignoring the score).
PLACER_HD inline bool cell_feasible(node_view const& nv, class_view const& cv, std::int32_t c, std::int32_t n) {
  if (!node_admits(nv, cv, c, n)) return false;
  if (cv.cpu[c] > nv.cpu_free[n] || cv.mem[c] > nv.mem_free[n]) return false;
  if (cv.gpus[c] == 0) return true;
  std::int32_t const b = nv.gpu_begin[n];
  return gpus_fit(nv.gpu_free + b, nv.gpu_begin[n + 1] - b, cv.gpus[c], cv.milli[c]);
}

/// How many replicas of class c fit on node n as it is now (0 if none):
/// the minimum over CPU, memory and GPUs (whole GPUs: fully free ones /
/// gpus; shares: sum over GPUs of free / share). Exact for one class, which
/// is what gang placement needs.
PLACER_HD inline std::int32_t fit_count(node_view const& nv, class_view const& cv, std::int32_t c, std::int32_t n) {
  if (!cell_feasible(nv, cv, c, n)) return 0;
  std::int64_t fit = 1 << 20;
  if (cv.cpu[c] > 0) fit = min_of<std::int64_t>(fit, nv.cpu_free[n] / cv.cpu[c]);
  if (cv.mem[c] > 0) fit = min_of<std::int64_t>(fit, nv.mem_free[n] / cv.mem[c]);
  if (cv.gpus[c] > 0) {
    std::int64_t g = 0;
    for (std::int32_t k = nv.gpu_begin[n]; k < nv.gpu_begin[n + 1]; ++k) {
      g += cv.milli[c] < 1000 ? nv.gpu_free[k] / cv.milli[c] : (nv.gpu_free[k] == 1000 ? 1 : 0);
    }
    fit = min_of<std::int64_t>(fit, cv.milli[c] < 1000 ? g : g / cv.gpus[c]);
  }
  if (cv.one_per_node != nullptr && cv.one_per_node[c] != 0) fit = min_of<std::int64_t>(fit, 1);
  return static_cast<std::int32_t>(fit);
}

/// Fit counts of a set of classes on every node: i = s * n_nodes + n is
/// class of[s] on node n.
struct fit_count_op {
  node_view nv;
  class_view cv;
  std::int32_t const* of;
  PLACER_HD std::int32_t operator()(std::int32_t i) const {
    return fit_count(nv, cv, of[i / nv.n_nodes], i % nv.n_nodes);
  }
};

/// Part j of domain d's sum of f(n): its nodes n whose place in the domain
/// is j modulo `parts` (domain_part_op, stage_caps_add).
template <class F>
PLACER_HD std::int64_t domain_part_sum(domain_index_view const& idx, std::int32_t d, std::int32_t j, std::int32_t parts,
                                       F const& f) {
  std::int64_t sum = 0;
  for (std::int32_t k = idx.begin[d] + j; k < idx.begin[d + 1]; k += parts) sum += f(idx.node[k]);
  return sum;
}

/// Part j of a domain's sum, per class of the set: i = (s * n_domains + d)
/// * parts + j is the sum of fit[s * n_nodes + n] over domain d's nodes n
/// whose place in the domain is j modulo `parts`. In parts because the root
/// domain holds every node: on the GPU one thread summing 1,280 nodes took
/// 52 µs a call (an H100, the 10k round's largest domain), and 100k's root
/// holds 12,800.
struct domain_part_op {
  domain_index_view idx;
  std::int32_t n_nodes;
  std::int32_t parts;
  std::int32_t const* fit;  ///< per (class of the set, node)
  std::int64_t* part;       ///< per (class of the set, domain, part)
  PLACER_HD void operator()(std::int32_t i) const {
    std::int32_t const sd = i / parts;
    std::int32_t const* f = fit + static_cast<std::int64_t>(sd / idx.n_domains) * n_nodes;
    part[i] = domain_part_sum(idx, sd % idx.n_domains, i % parts, parts, [&](std::int32_t n) { return f[n]; });
  }
};

/// Replicas a domain holds, per class of the set: i = s * n_domains + d is
/// the sum of its parts (domain_part_op).
struct domain_sum_op {
  std::int32_t parts;
  std::int64_t const* part;
  std::int64_t* cap;  ///< per (class of the set, domain)
  PLACER_HD void operator()(std::int32_t i) const {
    std::int64_t sum = 0;
    for (std::int32_t j = 0; j < parts; ++j) sum += part[static_cast<std::int64_t>(i) * parts + j];
    cap[i] = sum;
  }
};

/// A node's fragmentation after one replica, by replica shape (GPUs, share,
/// CPU): the only inputs of the score's fragmentation term, so the classes
/// of one shape (they differ in models, pools, memory) share it. One per
/// column being scored; holds the first `capacity` shapes seen.
struct frag_cache {
  static constexpr std::int32_t capacity = 16;
  std::int32_t size = 0;
  std::int32_t gpus[capacity];
  std::int32_t milli[capacity];
  std::int64_t cpu[capacity];
  std::int64_t after[capacity];

  PLACER_HD bool find(std::int32_t g, std::int32_t m, std::int64_t c, std::int64_t& out) const {
    for (std::int32_t i = 0; i < size; ++i) {
      if (gpus[i] == g && milli[i] == m && cpu[i] == c) {
        out = after[i];
        return true;
      }
    }
    return false;
  }
  PLACER_HD void add(std::int32_t g, std::int32_t m, std::int64_t c, std::int64_t a) {
    if (size == capacity) return;
    gpus[size] = g;
    milli[size] = m;
    cpu[size] = c;
    after[size] = a;
    ++size;
  }
};

/// score_cell_op::score_column's filter that wants every cell.
struct every_cell {
  PLACER_HD bool operator()(std::int32_t, std::int32_t) const { return true; }
};

/// Score of one (class, node) cell; cell = c * n_nodes + n (row-major).
struct score_cell_op {
  node_view nv;
  class_view cv;
  task_view tv;
  score_params p;

  PLACER_HD std::int32_t operator()(std::int64_t cell) const {
    auto const c = static_cast<std::int32_t>(cell / nv.n_nodes);
    auto const n = static_cast<std::int32_t>(cell % nv.n_nodes);
    return score(c, n);
  }

  /// The node's FGD fragmentation before any placement: class-independent,
  /// so a caller scoring one node for many classes computes it once.
  PLACER_HD std::int64_t fragmentation_before(std::int32_t n) const {
    if (p.w_fragmentation == 0 || tv.n_tasks == 0 || p.kube_mode != 0) return 0;
    std::int32_t const b = nv.gpu_begin[n];
    std::int32_t const g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
    return node_fragmentation(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n], tv, true);
  }

  PLACER_HD std::int32_t score(std::int32_t c, std::int32_t n) const { return score(c, n, fragmentation_before(n)); }

  /// Scores node n's column into out (row-major, n_nodes wide): every class.
  PLACER_HD void score_column(std::int32_t n, std::int32_t* out) const {
    score_column(n, out, nullptr, cv.n_classes, every_cell{});
  }

  /// Whether the score's fragmentation term goes through column_frag (and
  /// a fragmentation table): the Placer score with a task set that fits.
  [[nodiscard]] PLACER_HD bool column_fragmentation() const {
    return p.w_fragmentation != 0 && tv.n_tasks > 0 && p.kube_mode == 0 && tv.n_tasks <= max_tasks;
  }

  /// Per node, a node whose cells score alike (twins[n] <= n; n itself for
  /// the first): node_view::score_as where the fragmentation term reads a
  /// node's GPUs as the multiset of their free values
  /// (column_fragmentation), else same_as. Null: none known.
  [[nodiscard]] PLACER_HD std::int32_t const* twins() const {
    return column_fragmentation() && nv.score_as != nullptr ? nv.score_as : nv.same_as;
  }

  /// Scores node n's cells of the classes c = of[i], i < k (of null: c =
  /// i) for which want(i, c) holds, into out; the node's fragmentation
  /// state and the shape cache are taken once, and only if a cell is wanted.
  /// `known`, when given (column_fragmentation() only), is the node's row
  /// of a fragmentation table (frag_row): F before and after each class's
  /// replica are read from it instead of computed.
  template <class Want>
  PLACER_HD void score_column(std::int32_t n, std::int32_t* out, std::int32_t const* of, std::int32_t k,
                              Want const& want, std::int64_t const* known = nullptr) const {
    frag_cache cache;
    column_frag col;
    std::int64_t before = 0;
    bool const frag = column_fragmentation();
    bool ready = false;
    for (std::int32_t i = 0; i < k; ++i) {
      std::int32_t const c = of != nullptr ? of[i] : i;
      if (!want(i, c)) continue;
      if (!ready) {
        ready = true;
        if (frag) {
          std::int32_t const b = nv.gpu_begin[n];
          std::int32_t const g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
          if (known != nullptr) {
            col.init_gpus(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n]);
            before = known[cv.n_classes];
          } else {
            col.init(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n], tv);
            before = col.fragmentation(tv, 0, 0, 0, 0);
          }
        } else {
          before = fragmentation_before(n);
        }
      }
      out[static_cast<std::int64_t>(c) * nv.n_nodes + n] =
          score(c, n, before, &cache, frag ? &col : nullptr, frag ? known : nullptr);
    }
  }

  /// Node n's row of a fragmentation table (n_classes + 1 values): its F
  /// after one replica of each class, as the score computes it (0 where the
  /// replica's GPUs or CPU do not fit: such a cell is infeasible and never
  /// reads it), then its F before, at [n_classes]. Nodes of one
  /// fragmentation state (node_view::frag_slot) share the row.
  PLACER_HD void frag_row(std::int32_t n, std::int64_t* row) const {
    column_frag const col = frag_state(n, tv);
    row[cv.n_classes] = col.fragmentation(tv, 0, 0, 0, 0);
    frag_cache cache;
    for (std::int32_t c = 0; c < cv.n_classes; ++c) {
      std::int64_t after = 0;
      if (frag_fits(col, c) && !cache.find(cv.gpus[c], cv.milli[c], cv.cpu[c], after)) {
        after = col.after_replica(tv, cv.gpus[c], cv.milli[c], cv.cpu[c]);
        cache.add(cv.gpus[c], cv.milli[c], cv.cpu[c], after);
      }
      row[c] = after;
    }
  }

  /// Entry c of node n's row (frag_row's value; c = n_classes: F before),
  /// alone, over the tasks t (the task set, or a lane's slice of it,
  /// task_slice: the slices' entries sum to the set's): for a backend of
  /// many slow threads, a thread per entry and lane.
  PLACER_HD std::int64_t frag_entry(std::int32_t n, std::int32_t c, task_view const& t) const {
    column_frag const col = frag_state(n, t);
    if (c == cv.n_classes) return col.fragmentation(t, 0, 0, 0, 0);
    return frag_fits(col, c) ? col.after_replica(t, cv.gpus[c], cv.milli[c], cv.cpu[c]) : 0;
  }

  /// Node n's GPUs, CPU and model as frag_row reads them, with the counts
  /// of the tasks t.
  PLACER_HD column_frag frag_state(std::int32_t n, task_view const& t) const {
    std::int32_t const b = nv.gpu_begin[n];
    column_frag col;
    col.init(nv.gpu_free + b, min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node), nv.cpu_free[n], nv.model[n], t);
    return col;
  }
  /// A replica of class c fits the node's GPUs and CPU (else its entry is 0).
  PLACER_HD bool frag_fits(column_frag const& col, std::int32_t c) const {
    return col.g > 0 && col.fits(cv.gpus[c], cv.milli[c]) && cv.cpu[c] <= col.cpu_free;
  }

  /// Scores class c on node n, given the node's fragmentation before; a
  /// caller scoring a whole column passes one frag_cache for it and the
  /// node's column_frag, and with a fragmentation table the node's row.
  PLACER_HD std::int32_t score(std::int32_t c, std::int32_t n, std::int64_t before, frag_cache* cache = nullptr,
                               column_frag const* col = nullptr, std::int64_t const* known = nullptr) const {
    return score_by(c, n, col, [&](std::int32_t b, std::int32_t g) __attribute__((always_inline)) {
      std::int64_t after = 0;
      if (known != nullptr) {
        after = known[c];
      } else if (cache == nullptr || !cache->find(cv.gpus[c], cv.milli[c], cv.cpu[c], after)) {
        if (col != nullptr) {
          after = col->after_replica(tv, cv.gpus[c], cv.milli[c], cv.cpu[c]);
        } else {
          after = fragmentation_after(c, n, b, g, tv);
        }
        if (cache != nullptr) cache->add(cv.gpus[c], cv.milli[c], cv.cpu[c], after);
      }
      return after - before;
    });
  }

  /// score(c, n) given the node's F before and after a replica of class c
  /// (a fragmentation table's entries; read only where the replica fits).
  PLACER_HD std::int32_t score_known(std::int32_t c, std::int32_t n, std::int64_t before, std::int64_t after) const {
    return score_by(c, n, nullptr, [&](std::int32_t, std::int32_t) __attribute__((always_inline)) { return after - before; });
  }

  /// score(c, n) with its FGD sums split over `lanes` workers (a cell's
  /// score spread over a warp, its lanes over the task set): this worker,
  /// `lane`, sums F before and after the replica over its slice of the
  /// tasks (task_slice), and sum(v) returns the lanes' total of v, called
  /// by every lane at the same point (or by none: the cell is infeasible).
  /// F is a sum over the tasks of integers, so every lane returns score(c,
  /// n) exactly.
  template <class Sum>
  PLACER_HD std::int32_t score_lanes(std::int32_t c, std::int32_t n, std::int32_t lane, std::int32_t lanes,
                                     Sum&& sum) const {
    return score_by(c, n, nullptr, [&](std::int32_t b, std::int32_t g) __attribute__((always_inline)) {
      task_view const t = task_slice(tv, lane, lanes);
      std::int64_t const before = node_fragmentation(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n], t, true);
      return sum(fragmentation_after(c, n, b, g, t) - before);
    });
  }

 private:
  /// F (packable) of node n's GPUs [b, b + g) after a replica of class c
  /// that fits, taken by take_gpus' rule, over the tasks t.
  PLACER_HD std::int64_t fragmentation_after(std::int32_t c, std::int32_t n, std::int32_t b, std::int32_t g,
                                             task_view const& t) const {
    std::int32_t f[max_gpus_per_node];
    for (std::int32_t i = 0; i < g; ++i) f[i] = nv.gpu_free[b + i];
    take_gpus(f, g, cv.gpus[c], cv.milli[c], nv.gpu_island != nullptr ? nv.gpu_island + b : nullptr);
    return node_fragmentation(f, g, nv.cpu_free[n] - cv.cpu[c], nv.model[n], t, true);
  }

  /// The score of class c on node n, frag_change(b, g) giving the FGD
  /// change F after - F before (called only where the score reads it).
  template <class FragChange>
  PLACER_HD PLACER_INLINE std::int32_t score_by(std::int32_t c, std::int32_t n, column_frag const* col,
                                  FragChange&& frag_change) const {
    // cell_feasible, with the GPU fit from the column's counts when it has them.
    if (col != nullptr ? !node_admits(nv, cv, c, n) || cv.cpu[c] > nv.cpu_free[n] || cv.mem[c] > nv.mem_free[n] ||
                             !col->fits(cv.gpus[c], cv.milli[c])
                       : !cell_feasible(nv, cv, c, n)) {
      return infeasible;
    }
    std::int32_t const b = nv.gpu_begin[n];
    std::int32_t const g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
    std::int64_t const gpu_cap = nv.gpu_capacity[n];
    std::int64_t gpu_free = 0;
    if (col != nullptr) {
      gpu_free = col->total;
    } else {
      for (std::int32_t i = 0; i < g; ++i) gpu_free += nv.gpu_free[b + i];
    }
    std::int64_t const gpu_req = static_cast<std::int64_t>(cv.gpus[c]) * cv.milli[c];
    std::int64_t const cpu_cap = max_of<std::int64_t>(nv.cpu_capacity[n], 1);

    // Utilisation after placing one replica, per mille, GPU and CPU.
    std::int64_t const gpu_used = gpu_cap > 0 ? (gpu_cap - gpu_free + gpu_req) * 1000 / gpu_cap : 0;
    std::int64_t const cpu_used = (cpu_cap - nv.cpu_free[n] + cv.cpu[c]) * 1000 / cpu_cap;

    if (p.kube_mode == 3) return 0;  // first fit: every feasible node ties; the lowest index wins
    // Preferred node affinity and PreferNoSchedule taints, -1000..1000.
    std::int64_t const cell = constraint_cell(nv, cv, c, n);
    std::int64_t const prefer = cell >= 0 ? cv.prefer[cell] : 0;
    if (p.kube_mode != 0) {
      // kube-scheduler NodeResourcesFit: mean of per-resource utilisation
      // (GPU only where the node has GPUs). LeastAllocated prefers low use.
      // NodeAffinity and TaintToleration add theirs at twice the weight,
      // as kube-scheduler's default plugin weights do (shifted to >= 0).
      std::int64_t const used = gpu_cap > 0 ? (gpu_used + cpu_used) / 2 : cpu_used;
      std::int64_t const affinity = cell >= 0 ? 2 * (prefer + 1000) : 0;
      return static_cast<std::int32_t>((p.kube_mode == 1 ? 1000 - used : used) + affinity);
    }

    // E-Binpack (best fit): most-allocated first. GPU jobs weigh GPU use 3:1
    // over CPU. A CPU-only replica is steered away from free GPUs, so that it
    // does not strand them (it scores by how few free GPUs the node has).
    std::int64_t binpack;
    if (gpu_req > 0) {
      binpack = (3 * gpu_used + cpu_used) / 4;
    } else {
      std::int64_t const free_gpu_permille = gpu_cap > 0 ? gpu_free * 1000 / gpu_cap : 0;
      binpack = (cpu_used + (1000 - free_gpu_permille) * 3) / 4;
    }
    std::int64_t s = p.w_binpack * binpack;

    if (p.w_fragmentation != 0 && tv.n_tasks > 0 && g > 0) {
      std::int64_t const change = frag_change(b, g);
      // delta in milli (divide out ppm); +-8000 milli maps onto 0..1000.
      std::int64_t const delta = change / 1000000;
      std::int64_t const fgd = min_of<std::int64_t>(1000, max_of<std::int64_t>(0, 500 - delta * 500 / 8000));
      s += p.w_fragmentation * fgd;
    }

    if (p.w_scarcity != 0 && nv.scarcity != nullptr && cv.any_model[c] != 0) {
      // A job that runs anywhere leaves alone the GPU models that
      // model-constrained jobs of this round are short of.
      s -= static_cast<std::int64_t>(p.w_scarcity) * nv.scarcity[n];
    }
    if ((cv.pool_mask[c] & nv.pool[n]) == 0) {
      // Borrowed inference node: reclaim risk.
      s -= static_cast<std::int64_t>(p.w_pool_affinity) * 1000;
    }
    s += static_cast<std::int64_t>(p.w_affinity) * prefer;
    s = max_of<std::int64_t>(s, 0);
    return static_cast<std::int32_t>(min_of<std::int64_t>(s, 2000000000));
  }
};

/// Per-node contribution to the cluster statistics.
struct node_stats_op {
  node_view nv;
  task_view tv;
  /// Per fragmentation state (node_view::frag_slot, current), its F against
  /// tv, read instead of computed; null: each node's computed.
  std::int64_t const* state_frag = nullptr;
  /// False: F left out (0), its caller adds it.
  bool frag = true;

  PLACER_HD cluster_stats operator()(std::int32_t n) const {
    cluster_stats s{};
    if ((nv.flags[n] & node_flag_healthy) == 0) return s;
    std::int32_t const b = nv.gpu_begin[n];
    std::int32_t const g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
    if (g == 0 || nv.gpu_capacity[n] == 0) return s;
    std::int64_t free = 0;
    for (std::int32_t i = 0; i < g; ++i) free += nv.gpu_free[b + i];
    std::int64_t const cap = nv.gpu_capacity[n];
    s.gpu_schedulable_milli = cap;
    s.gpu_free_milli = free;
    s.gpu_allocated_milli = cap - free;
    s.gpu_nodes = 1;
    s.partly_allocated_nodes = (free > 0 && free < cap) ? 1 : 0;
    if (!frag) return s;
    s.frag_milli_ppm = state_frag != nullptr ? state_frag[nv.frag_slot[n]]
                                             : node_fragmentation(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n], tv);
    return s;
  }
};

/// node_stats_op of a node of the view whose fragmentation states
/// (frag_slot) were taken, with F computed (state_frag, against tv), when
/// its free values were cpu_was and gpu_was (the view's then, a CSR like
/// gpu_free): F read where its free CPU and GPU values are as they were,
/// computed again where they moved (a round's statistics after its
/// assignment, which moves a node's free values and nothing else). The
/// sums are node_stats_op's on every node.
struct node_stats_since_op {
  node_view nv;
  task_view tv;
  std::int64_t const* state_frag = nullptr;
  std::int64_t const* cpu_was = nullptr;
  std::int32_t const* gpu_was = nullptr;
  /// When given, a moved node's F is left out and moved[n] says whether it
  /// would have been computed (1) or not (0: unmoved, or F counts nothing),
  /// for the caller to add (the CPU backend, a state at a time:
  /// frag_by_state).
  std::uint8_t* moved = nullptr;

  PLACER_HD cluster_stats operator()(std::int32_t n) const {
    bool same = nv.cpu_free[n] == cpu_was[n];
    for (std::int32_t g = nv.gpu_begin[n]; same && g < nv.gpu_begin[n + 1]; ++g) same = nv.gpu_free[g] == gpu_was[g];
    if (moved == nullptr) return node_stats_op{nv, tv, same ? state_frag : nullptr}(n);
    cluster_stats const s = node_stats_op{nv, tv, state_frag, same}(n);
    moved[n] = static_cast<std::uint8_t>(!same && s.gpu_nodes != 0);  // gpu_nodes: F counted
    return s;
  }
};

/// F (FGD's, the reported metric) of fragmentation state s against tv, from
/// its first node (node_view::frag_node): every node of the state has the
/// same free GPU values in some order, free CPU and model, and F depends on
/// nothing else.
struct state_frag_op {
  node_view nv;
  task_view tv;
  PLACER_HD std::int64_t operator()(std::int32_t s) const {
    std::int32_t const n = nv.frag_node[s];
    std::int32_t const b = nv.gpu_begin[n];
    std::int32_t const g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
    return node_fragmentation(nv.gpu_free + b, g, nv.cpu_free[n], nv.model[n], tv);
  }
};

struct stats_sum_op {
  PLACER_HD cluster_stats operator()(cluster_stats a, cluster_stats const& b) const {
    a.gpu_allocated_milli += b.gpu_allocated_milli;
    a.gpu_schedulable_milli += b.gpu_schedulable_milli;
    a.gpu_free_milli += b.gpu_free_milli;
    a.frag_milli_ppm += b.frag_milli_ppm;
    a.gpu_nodes += b.gpu_nodes;
    a.partly_allocated_nodes += b.partly_allocated_nodes;
    return a;
  }
};

/// A queue window drawn (tier_window; the assigner's queue_window rule):
/// n_jobs waiting jobs in submission order, each asking demand[2j] GPU
/// milli and demand[2j + 1] CPU milli, against gpu_all and cpu_all free.
/// code[j]: 2 where the job asks for more than all that is free (it cannot
/// start; the window stays open), else 1 while the jobs in the window so
/// far leave it room, 0 from the first one they do not (past the window).
/// Where `slot` is given, code[n_jobs + s] is 1 for each slot s a job joins
/// (slot[2j] in the window, slot[2j + 1] where it cannot start; -1 none),
/// else 0 (n_slots of them). Returns whether some job is past the window.
PLACER_HD inline bool draw_window(std::int32_t n_jobs, std::int64_t const* demand, std::int32_t const* slot,
                                  std::int32_t n_slots, std::int64_t gpu_all, std::int64_t cpu_all, std::int32_t* code) {
  for (std::int32_t s = 0; s < n_slots; ++s) code[n_jobs + s] = 0;
  std::int64_t gpu = gpu_all, cpu = cpu_all;
  bool open = true, past = false;
  for (std::int32_t j = 0; j < n_jobs; ++j) {
    std::int64_t const g = demand[2 * j], c = demand[2 * j + 1];
    std::int32_t joins = -1;
    if (g > gpu_all || c > cpu_all) {
      code[j] = 2;
      joins = slot != nullptr ? slot[2 * j + 1] : -1;
    } else {
      open = open && g <= gpu && c <= cpu;
      code[j] = open ? 1 : 0;
      past = past || !open;
      if (open) {
        gpu -= g;
        cpu -= c;
        joins = slot != nullptr ? slot[2 * j] : -1;
      }
    }
    if (joins >= 0) code[n_jobs + joins] = 1;
  }
  return past;
}

/// Past the last tier a chain runs after a draw at tier k whose last code
/// is `stop` (tier_window::code): its n_slots where some job is past the
/// window (1), none of them where the draw is incomplete (2), `end` as it
/// was where the window closes (0).
PLACER_HD inline std::int32_t draw_end(std::int32_t k, std::int32_t n_slots, std::int32_t stop, std::int32_t end) {
  return stop == 0 ? end : min_of(end, k + 1 + (stop == 1 ? n_slots : 0));
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
