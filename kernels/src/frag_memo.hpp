#pragma once
// The CPU backend's fragmentation rows by state (tier_problem::frag_row).
//
// A node's row of the fragmentation table (score_cell_op::frag_row: F after
// one replica of each class, then F before) depends on the multiset of its
// free GPU values, its free CPU and its model alone (build_matrices keys
// the score stage's table the same way), given the round's classes and
// task set. Commits move nodes into states that other nodes were in, or
// that earlier commits made, so the tier programs' refresh sums a state's
// row once a round, each entry when a column first asks for it, instead of
// summing F over the task set for each column. Exact: a row is frag_row's values, and a column scored
// from a row is the column scored from the node (score_column's `known`).
//
// Host only: one worker reads and fills a memo. The CPU backend attaches
// frag_memos, a memo for each worker of its OpenMP team, to a chain that
// runs on one worker, whose refresh may run its columns on the team
// (tier_apart).

#include "../portable/tier/refresh.hpp"

#include <placer/kernels/ops.hpp>
#include <placer/kernels/tier.hpp>
#include <placer/kernels/views.hpp>

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Fragmentation states by their key (a node's GPUs, model, free CPU and
/// free GPU values sorted), numbered in the order added: open addressing by
/// frag_state_hash, keys compared whole. frag_memo's rows and
/// frag_by_state's F are kept by these numbers.
class frag_states {
 public:
  /// A state's key.
  struct key {
    std::int32_t g = 0;
    std::int32_t model = -1;
    std::int64_t cpu = 0;
    std::int32_t f[max_gpus_per_node];
    std::uint64_t hash = 0;
  };
  /// Node n's key as it is now.
  static key of(node_view const& nv, std::int32_t n) {
    key k;
    std::int32_t const b = nv.gpu_begin[n];
    k.g = min_of(nv.gpu_begin[n + 1] - b, max_gpus_per_node);
    k.model = nv.model[n];
    k.cpu = nv.cpu_free[n];
    sort_free_gpus(nv.gpu_free + b, k.g, k.f);
    k.hash = frag_state_hash(k.f, k.g, k.cpu, k.model);
    return k;
  }
  /// A stored key's ints before its GPUs' values.
  static constexpr std::size_t key_ints = 4;

  void clear() {
    keys_.clear();
    key_at_.clear();
    slots_.assign(slots_.size(), empty);
    hashes_.clear();
  }
  [[nodiscard]] std::size_t size() const { return hashes_.size(); }
  /// What the keys and their hashes hold, in bytes.
  [[nodiscard]] std::size_t bytes() const {
    return keys_.size() * sizeof(std::int32_t) + hashes_.size() * sizeof(std::uint64_t);
  }
  /// The number of the state of key k, or -1.
  [[nodiscard]] std::int32_t find(key const& k) const {
    if (slots_.empty()) return -1;
    std::size_t const mask = slots_.size() - 1;
    for (std::size_t i = k.hash & mask;; i = (i + 1) & mask) {
      std::int32_t const r = slots_[i];
      if (r == empty || holds(r, k)) return r;
    }
  }
  /// Adds key k (not held); returns its number.
  std::int32_t add(key const& k) {
    if ((size() + 1) * 2 > slots_.size()) grow();
    auto const r = static_cast<std::int32_t>(size());
    key_at_.push_back(keys_.size());
    keys_.push_back(k.g);
    keys_.push_back(k.model);
    std::int32_t cpu[2];
    std::memcpy(cpu, &k.cpu, sizeof cpu);
    keys_.insert(keys_.end(), cpu, cpu + 2);
    keys_.insert(keys_.end(), k.f, k.f + k.g);
    hashes_.push_back(k.hash);
    place(r, k.hash);
    return r;
  }

 private:
  static constexpr std::int32_t empty = -1;

  /// State r's key is keys_[key_at_[r] ...]: g, model, the CPU's two
  /// halves, then the g sorted values.
  [[nodiscard]] bool holds(std::int32_t r, key const& k) const {
    std::int32_t const* e = keys_.data() + key_at_[static_cast<std::size_t>(r)];
    if (e[0] != k.g || e[1] != k.model) return false;
    std::int64_t cpu = 0;
    std::memcpy(&cpu, e + 2, sizeof cpu);
    return cpu == k.cpu && std::memcmp(e + key_ints, k.f, sizeof(std::int32_t) * static_cast<std::size_t>(k.g)) == 0;
  }

  void place(std::int32_t r, std::uint64_t hash) {
    std::size_t const mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (slots_[i] != empty) i = (i + 1) & mask;
    slots_[i] = r;
  }

  void grow() {
    slots_.assign(slots_.empty() ? 1024 : slots_.size() * 2, empty);
    for (std::size_t r = 0; r < hashes_.size(); ++r) place(static_cast<std::int32_t>(r), hashes_[r]);
  }

  std::vector<std::int32_t> keys_;
  std::vector<std::size_t> key_at_;
  std::vector<std::uint64_t> hashes_;  ///< per state: its key's hash
  std::vector<std::int32_t> slots_;
};

class frag_memo {
 public:
  /// `most_bytes`: the most its rows and their keys hold (by default 8
  /// MiB); past it a state not held is summed by its caller (row returns
  /// null).
  static constexpr std::size_t default_bytes = std::size_t{8} << 20;
  explicit frag_memo(std::size_t most_bytes = default_bytes) : most_bytes_(most_bytes) {}

  /// Empties the memo: a round's classes and task set start anew.
  void clear() {
    rows_.clear();
    states_.clear();
    scorers_.clear();
    op_ = {};
    inputs_.clear();
  }

  /// Takes the rows of op's classes and tasks, over op's nodes (whose
  /// current values row() reads). Kept rows stay when the classes' shapes
  /// and the task set are those they were computed for; else it empties.
  /// False: the score reads no fragmentation table, so there is nothing
  /// to keep.
  bool bind(score_cell_op const& op) {
    if (!op.column_fragmentation()) return false;
    inputs_of(op, scratch_);
    if (scratch_ != inputs_) {
      clear();
      inputs_.swap(scratch_);
    }
    op_ = op;
    width_ = op.cv.n_classes + 1;
    return true;
  }

  /// Keeps the score stage's table (frag_table_cells values: a row per
  /// fragmentation state, of its first node) for the states of nodes as
  /// they are now. After bind.
  void seed(std::int64_t const* table) {
    for (std::int32_t s = 0; s < op_.nv.n_frag; ++s) {
      std::int32_t const n = op_.nv.frag_node[s];
      key const k = frag_states::of(op_.nv, n);
      if (states_.find(k) < 0) insert(k, table + static_cast<std::int64_t>(s) * width_);
    }
  }

  /// Node n's row as its state is now, its entries of the classes c for
  /// which want(c) holds and F before known: held, or summed (over the node
  /// once, each replica shape once) and kept. Entries no caller has wanted
  /// yet are unknown (negative: F never is). Null where the state is not
  /// held and the memo is full.
  template <class Want>
  std::int64_t const* row(std::int32_t n, Want const& want) {
    return row(n, want, 0, nullptr);
  }

  /// row(n, want) for a refresh, `refresh` naming it (nonzero; unique to
  /// one tier's refresh: frag_memos::refresh_row):
  /// where this memo's worker asked for a node of n's fragmentation state
  /// and score twin of n (every other field the score reads equal:
  /// node_fields_equal) earlier in the same refresh, whose column it then
  /// scored, that node in *same (its cells of n's stale classes are n's:
  /// a refresh changes no node), and the row as it is; else -1, the row
  /// with the wanted entries known, and n kept as its state's scorer.
  template <class Want>
  std::int64_t const* row(std::int32_t n, Want const& want, std::uint64_t refresh, std::int32_t* same) {
    key const k = frag_states::of(op_.nv, n);
    std::int32_t at_row = states_.find(k);
    if (at_row < 0) {
      if (!room_for(k)) return nullptr;
      rows_.resize(rows_.size() + static_cast<std::size_t>(width_), unknown);
      at_row = add(k);
    }
    std::int64_t* const r = rows_.data() + static_cast<std::size_t>(at_row) * static_cast<std::size_t>(width_);
    if (same != nullptr) {
      scorer& s = scorers_[static_cast<std::size_t>(at_row)];
      if (s.refresh == refresh && node_fields_equal(op_.nv, n, s.node)) {
        *same = s.node;
        return r;
      }
      *same = -1;
      s = {refresh, n};
    }
    // As frag_row sums them, for the entries not known.
    column_frag col;
    bool summed = false;
    auto state = [&]() -> column_frag const& {
      if (!summed) col = op_.frag_state(n, op_.tv);
      summed = true;
      return col;
    };
    std::int32_t const classes = op_.cv.n_classes;
    if (r[classes] == unknown) r[classes] = state().fragmentation(op_.tv, 0, 0, 0, 0);
    frag_cache cache;
    for (std::int32_t c = 0; c < classes; ++c) {
      if (r[c] != unknown || !want(c)) continue;
      std::int64_t after = 0;
      if (op_.frag_fits(state(), c) && !cache.find(op_.cv.gpus[c], op_.cv.milli[c], op_.cv.cpu[c], after)) {
        after = col.after_replica(op_.tv, op_.cv.gpus[c], op_.cv.milli[c], op_.cv.cpu[c]);
        cache.add(op_.cv.gpus[c], op_.cv.milli[c], op_.cv.cpu[c], after);
      }
      r[c] = after;
    }
    return r;
  }
  /// Node n's row with every entry known.
  std::int64_t const* row(std::int32_t n) {
    return row(n, [](std::int32_t) { return true; });
  }
  /// Node n's row if its state is held (entries as they are), else null.
  [[nodiscard]] std::int64_t const* held(std::int32_t n) {
    std::int32_t const r = states_.find(frag_states::of(op_.nv, n));
    return r < 0 ? nullptr : rows_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(width_);
  }

  /// tier_problem::frag_row: the row of node n with the entries of the
  /// classes the tier's refresh scores on it (tier_stale), or a twin
  /// scored in the same refresh in *same (row's).
  std::int64_t const* refresh_row(tier_problem const& p, std::int32_t n, std::uint64_t refresh, std::int32_t* same) {
    tier_stale const stale{p.live_class, p.fresh, p.stamp[n]};
    return row(n, [&](std::int32_t c) { return stale(c, c); }, refresh, same);
  }

  [[nodiscard]] std::size_t states() const { return states_.size(); }
  /// What the rows and their keys hold, in bytes (at most the bound).
  [[nodiscard]] std::size_t bytes() const {
    return rows_.size() * sizeof(std::int64_t) + states_.bytes() + scorers_.size() * sizeof(scorer);
  }

 private:
  static constexpr std::int64_t unknown = -1;
  using key = frag_states::key;

  /// Whether a row of key k fits the bound.
  [[nodiscard]] bool room_for(key const& k) const {
    return bytes() + static_cast<std::size_t>(width_) * sizeof(std::int64_t) +
               (frag_states::key_ints + static_cast<std::size_t>(k.g)) * sizeof(std::int32_t) + sizeof(std::uint64_t) +
               sizeof(scorer) <=
           most_bytes_;
  }

  void insert(key const& k, std::int64_t const* values) {
    if (!room_for(k)) return;
    rows_.insert(rows_.end(), values, values + width_);
    add(k);
  }

  /// Keys the row last written (rows_' end) as k; returns its index.
  std::int32_t add(key const& k) {
    scorers_.push_back({});
    return states_.add(k);
  }

  /// What a row depends on besides the node, by value: the classes'
  /// replica shapes and the task set, into `out`.
  static void inputs_of(score_cell_op const& op, std::vector<unsigned char>& out) {
    out.clear();
    auto add = [&](auto const* a, std::size_t n) {
      auto const* b = reinterpret_cast<unsigned char const*>(a);
      out.insert(out.end(), b, b + n * sizeof(*a));
    };
    auto const c = static_cast<std::size_t>(op.cv.n_classes);
    auto const t = static_cast<std::size_t>(op.tv.n_tasks);
    add(&op.cv.n_classes, 1);
    add(op.cv.gpus, c);
    add(op.cv.milli, c);
    add(op.cv.cpu, c);
    add(&op.tv.n_tasks, 1);
    add(op.tv.gpus, t);
    add(op.tv.milli, t);
    add(op.tv.cpu, t);
    add(op.tv.model_mask, t);
    add(op.tv.freq_ppm, t);
    add(&op.tv.share_cpu, 1);
  }

  std::size_t most_bytes_;
  score_cell_op op_{};
  std::int32_t width_ = 0;
  std::vector<std::int64_t> rows_;
  frag_states states_;  ///< the rows' states, a row a state in its number
  /// Per row: the node of its state whose column this memo's worker last
  /// scored in a refresh, and which refresh (0: none).
  struct scorer {
    std::uint64_t refresh = 0;
    std::int32_t node = -1;
  };
  std::vector<scorer> scorers_;
  std::vector<unsigned char> inputs_;   ///< inputs_of the rows held (empty: none bound)
  std::vector<unsigned char> scratch_;  ///< inputs_of the op being bound
};

/// F (the reported metric's: node_fragmentation) of the nodes a round's
/// assignment moved, a state at a time (omp_backend::stats_after): F
/// depends on a node's free GPU values as a multiset, its free CPU and its
/// model alone (state_frag_op), and the moved nodes fall into few states.
/// Counted on the digest rounds: openb's 1,023 moved nodes are 93 states,
/// 10k's 640 are 95, 100k's 3,429 are 226. Host only, one a worker.
class frag_by_state {
 public:
  /// Forgets every state: a call's nodes start anew.
  void clear() {
    states_.clear();
    frag_.clear();
  }

  /// Node n's F, summed once for its state since clear.
  std::int64_t of(node_view const& nv, task_view const& tv, std::int32_t n) {
    frag_states::key const k = frag_states::of(nv, n);
    std::int32_t const s = states_.find(k);
    if (s >= 0) return frag_[static_cast<std::size_t>(s)];
    frag_.push_back(node_fragmentation(k.f, k.g, k.cpu, k.model, tv));
    states_.add(k);
    return frag_.back();
  }

  /// States summed since clear.
  [[nodiscard]] std::size_t states() const { return states_.size(); }

 private:
  frag_states states_;
  std::vector<std::int64_t> frag_;  ///< per state, by its number
};

/// A frag_memo for each worker of the OpenMP team: a chain's refresh on
/// the team (tier_apart) has each worker read and fill its own, with no
/// lock. Each starts a round from the score stage's rows (seed) and keeps
/// what it sums for the rest of the round.
class frag_memos {
 public:
  explicit frag_memos(std::size_t workers, std::size_t most_bytes = frag_memo::default_bytes)
      : each_(workers == 0 ? 1 : workers, frag_memo(most_bytes)) {}

  void clear() {
    for (auto& m : each_) m.clear();
  }
  /// frag_memo::bind, for every worker's.
  bool bind(score_cell_op const& op) {
    bool bound = false;
    for (auto& m : each_) bound = m.bind(op);
    return bound;
  }
  /// frag_memo::seed, once: the other workers' memos copy the first's,
  /// each its own on a team of more than two.
  void seed(std::int64_t const* table) {
    each_[0].seed(table);
    auto const workers = static_cast<std::int32_t>(each_.size());
#pragma omp parallel for schedule(static, 1) if (workers > 2)
    for (std::int32_t k = 1; k < workers; ++k) each_[static_cast<std::size_t>(k)] = each_[0];
  }
  /// The calling worker's memo (omp_get_thread_num), or null for a worker
  /// beyond those it was made for.
  [[nodiscard]] frag_memo* mine() {
    auto const k = static_cast<std::size_t>(omp_get_thread_num());
    return k < each_.size() ? &each_[k] : nullptr;
  }
  [[nodiscard]] frag_memo& at(std::size_t k) { return each_[k]; }

  /// tier_problem::frag_row: frag_memo::refresh_row on the calling
  /// worker's memo (null beyond them: the caller sums the row), the
  /// refresh named by the chain and its tier's clock (tier_problem::now).
  static std::int64_t const* refresh_row(void* memos, tier_problem const& p, std::int32_t n, std::int32_t* same) {
    auto* const self = static_cast<frag_memos*>(memos);
    frag_memo* const m = self->mine();
    std::uint64_t const refresh = self->chain_ << 32 | static_cast<std::uint32_t>(p.now);
    return m != nullptr ? m->refresh_row(p, n, refresh, same) : nullptr;
  }
  /// Binds to the first tier's classes and tasks, which every tier of
  /// the chain shares, and gives each tier's refresh the memos. False,
  /// nothing given: the score reads no fragmentation table.
  bool attach(std::span<tier_problem> tiers) {
    if (tiers.empty() || !bind(score_cell_op{tiers[0].nodes, tiers[0].classes, tiers[0].tasks, tiers[0].params})) {
      return false;
    }
    chain_ += 1;  // a new chain: no refresh of it yet
    for (auto& t : tiers) {
      t.frag_row = &refresh_row;
      t.frag_memo = this;
    }
    return true;
  }

 private:
  std::vector<frag_memo> each_;
  std::uint64_t chain_ = 0;  ///< chains attached: with a tier's clock, names its refresh
};

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
