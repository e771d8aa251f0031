#pragma once
// The tier program on the host (tier_program.hpp): its buffers laid out in
// one reused arena of host memory, run by a team of one (seq_team) or by
// the threads of one OpenMP parallel region (omp_team). The CPU backend's
// place_tier, and the ThreadSanitizer test's (tests/kernels/
// tier_team_tsan.cpp, built by clang against LLVM's OpenMP runtime).
// Host only; the CUDA twin is cuda_team in cuda_backend.cu (one CTA).

#include "tier_grid_twin.hpp"
#include "tier_program.hpp"

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The threads of one OpenMP parallel region as a Team. sync() is an
/// `omp barrier` (orphaned: called from inside the region), the fetches
/// relaxed atomics (the barriers order the rest).
struct omp_team {
  /// Bidding rounds with fewer bidders run on rank 0 alone: below a few
  /// hundred, a round's work is less than its four barriers.
  std::int32_t solo = 256;
  bool team_wide = false;  ///< the team does floors, jumps, lists and offers together (the same results)
  [[nodiscard]] static std::int32_t rank() { return omp_get_thread_num(); }
  [[nodiscard]] static std::int32_t size() { return omp_get_num_threads(); }
  [[nodiscard]] std::int32_t solo_below() const { return solo; }
  static void sync() {
#pragma omp barrier
  }
  /// One block (tier_program.hpp, "The grid").
  [[nodiscard]] static constexpr std::int32_t blocks() { return 1; }
  [[nodiscard]] static constexpr std::int32_t block() { return 0; }
  template <class F>
  static void each_block(F&& f) {
    f(0);
  }
  static void grid_sync() { sync(); }
  /// A thread a group (tier_offer_groups).
  [[nodiscard]] static constexpr std::int32_t group_size() { return 1; }
  static void group_sync() {}
  template <class Op>
  static std::int64_t group_fold(std::int64_t v, std::int32_t, Op) {
    return v;
  }
  static std::int64_t group_sum_from(std::int64_t v, std::int32_t) { return v; }
  static std::int32_t group_count_above(std::int64_t, std::int32_t) { return 0; }
  static constexpr void work(std::int64_t) {}
  static constexpr void chain(std::int64_t) {}
  template <class T>
  static T fetch_add(T* p, std::type_identity_t<T> v) {
    return host_fetch_add(p, v);
  }
  template <class T>
  static T fetch_max(T* p, T v) {
    return host_fetch_max(p, v);
  }
  template <class T>
  static T fetch_min(T* p, T v) {
    return host_fetch_min(p, v);
  }
};

/// The reused host memory of tier programs.
struct tier_host_arena {
  std::vector<std::int32_t> heap_begin, heap_at, out_at;
  std::vector<tier_control> ctl;
  std::vector<std::max_align_t> bytes;
  /// The one-worker programs' seq_team::apart_from (the CPU backend's,
  /// where its OpenMP team spins; 0: the floors on the calling thread).
  std::int64_t apart_from = 0;
  /// tier_buffers::losers_sit_out (0 in the tests' reference way).
  std::int32_t losers_sit_out = 1;
  /// The one-worker programs' twin entries (tier/twins.hpp) and their memory.
  tier_twin_rows twins;
  std::vector<std::int32_t> twin_ints;
  std::vector<std::int64_t> twin_items;
};

/// Lays out the twin entries of a chain on n_nodes nodes whose tiers have
/// `twins` (tier_problem::twins) and `stamp`, rows at most `rows` a tier,
/// for the OpenMP team's threads, and finds its sets.
inline tier_twin_rows* tier_twins_host(tier_host_arena& a, std::int32_t const* twins, std::int32_t const* stamp,
                                       std::int32_t n_nodes, std::int32_t rows) {
  auto const n = static_cast<std::size_t>(n_nodes);
  auto const entries = 2 * n;
  a.twin_ints.resize(5 * n + 1 + 3 * entries + static_cast<std::size_t>(rows) * entries);
  std::int32_t* at = a.twin_ints.data();
  auto take = [&](std::int32_t*& to, std::size_t size) {
    to = at;
    at += size;
  };
  take(a.twins.member_begin, n + 1);
  take(a.twins.members, n);
  take(a.twins.cursor, n);
  take(a.twins.single, n);
  take(a.twins.entry, n);
  take(a.twins.node, entries);
  take(a.twins.weight, entries);
  take(a.twins.hit, entries);
  take(a.twins.cells, static_cast<std::size_t>(rows) * entries);
  a.twin_items.resize(static_cast<std::size_t>(omp_get_max_threads()) * entries);
  a.twins.items = a.twin_items.data();
  tier_twin_setup(a.twins, twins, n_nodes, stamp);
  return &a.twins;
}

/// Runs a chain of tiers (tier_chain_program) in host memory with `threads`
/// workers (1: the calling thread; more: an OpenMP team whose rounds with
/// fewer than `solo` bidders run on its rank 0), the floors by a worker per
/// row and the price jumps on rank 0 or, with `team_wide`, by the whole team
/// (the CUDA backend's way: tier_program.hpp), its offers for the rows with
/// `offer_least` bids or more in digits of `offer_bits` (their M stepped
/// with `offer_iterate`, tier_buffers::offer_iterate; ranked in rounds of
/// at most `offer_pairs` items a row; a row a group in the rounds of at most
/// `offer_groups` bids a row, tier_buffers::offer_groups), its refresh a
/// worker per cell up to `refresh_below` candidate nodes and its bids
/// remembering rows in tiers of more than `remember_above` rows; with
/// `blocks` above 1, on a grid of that many CTAs of `threads` workers, a
/// thread each (run_on_grid_twin, team_wide); on one worker, the floors
/// on the OpenMP team from the arena's apart_from cells. The results do
/// not depend on any of them.
inline void run_chain_host(std::span<tier_problem const> tiers, tier_results& out, tier_host_arena& a,
                           int threads = 1, std::int32_t solo = omp_team{}.solo, bool team_wide = false,
                           std::int32_t offer_least = tier_offer_team_least,
                           std::int32_t refresh_below = tier_refresh_cells_below,
                           std::int32_t remember_above = tier_remember_rows_above,
                           std::int32_t offer_bits = tier_offer_bits, std::int32_t offer_iterate = 0,
                           std::int32_t offer_pairs = tier_offer_pairs_upto,
                           std::int32_t offer_groups = tier_offer_groups_upto, std::int32_t blocks = 1) {
  auto const k = static_cast<std::int32_t>(tiers.size());
  if (k == 0) {
    tier_chain_results(nullptr, nullptr, nullptr, nullptr, 0, out);
    return;
  }
  a.heap_begin.resize(tier_chain_heap_entries(tiers.data(), k));
  a.heap_at.resize(static_cast<std::size_t>(k));
  a.out_at.resize(static_cast<std::size_t>(k) + 1);
  std::int32_t most_rows = 0, most_copies = 0;
  std::int32_t const copies = tier_chain_offsets(tiers.data(), k, a.heap_begin.data(), a.heap_at.data(),
                                                 a.out_at.data(), most_rows, most_copies);
  std::int32_t const n_nodes = tiers[0].nodes.n_nodes;
  std::int32_t most_domains = 0;
  bool const local = tier_chain_locality(tiers.data(), k, most_domains);
  auto const aligned = [](std::size_t n) {
    return (n + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
  };
  // One pass sizes the arena, the second lays the buffers out in it.
  tier_chain c;
  std::size_t bytes = 0;
  auto measure = [&](auto* tag, std::size_t n) -> decltype(tag) {
    bytes += aligned(n * sizeof(*tag));
    return nullptr;
  };
  auto lay_out = [&](auto&& take) {
    tier_layout(c.work, n_nodes, most_rows, most_copies, take);
    c.out = take(c.out, static_cast<std::size_t>(copies));
    c.listed = take(c.listed, k > 1 ? static_cast<std::size_t>(n_nodes) : 0);
    c.candidates = take(c.candidates, static_cast<std::size_t>(most_copies));
    c.n_candidates = take(c.n_candidates, 1);
    c.local_cap = take(c.local_cap, static_cast<std::size_t>(most_domains));
    c.local_held = take(c.local_held, local ? static_cast<std::size_t>(n_nodes) : 0);
  };
  lay_out(measure);
  a.bytes.resize(bytes / sizeof(std::max_align_t) + 1);
  auto* at = reinterpret_cast<unsigned char*>(a.bytes.data());
  lay_out([&](auto* tag, std::size_t n) -> decltype(tag) {
    auto* p = reinterpret_cast<decltype(tag)>(at);
    at += aligned(n * sizeof(*tag));
    return p;
  });
  if (!local) c.local_held = nullptr;
  a.ctl.assign(static_cast<std::size_t>(k), tier_control{});
  c.n_tiers = k;
  c.tiers = tiers.data();
  c.heap_begin = a.heap_begin.data();
  c.heap_at = a.heap_at.data();
  c.out_at = a.out_at.data();
  c.ctl = a.ctl.data();
  c.work.offer_team_least = offer_least;
  c.work.refresh_cells_below = refresh_below;
  c.work.remember_rows_above = remember_above;
  c.work.offer_bits = offer_bits;
  c.work.offer_iterate = offer_iterate;
  c.work.offer_pairs_upto = offer_pairs;
  c.work.offer_groups = offer_groups;
  c.work.losers_sit_out = a.losers_sit_out;
  if (blocks > 1) {
    run_on_grid_twin(blocks, threads, [&](grid_twin_team& team) { tier_chain_program(team, c); });
  } else if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      omp_team team{solo, team_wide};
      tier_chain_program(team, c);
    }
  } else {
    seq_team team{team_wide, a.apart_from};
    if (!team_wide && tiers[0].twins != nullptr) {
      team.twins = tier_twins_host(a, tiers[0].twins, tiers[0].stamp, n_nodes, most_rows);
    }
    tier_chain_program(team, c);
  }
  tier_chain_results(tiers.data(), a.ctl.data(), c.out, a.out_at.data(), k, out);
}

/// One tier (a chain of one), for the tests that run the program alone.
inline tier_stats run_tier_host(tier_problem const& problem, std::vector<tier_placement>& out, tier_host_arena& a,
                                int threads = 1, std::int32_t solo = omp_team{}.solo, bool team_wide = false,
                                std::int32_t offer_least = tier_offer_team_least) {
  tier_results r;
  run_chain_host({&problem, 1}, r, a, threads, solo, team_wide, offer_least);
  out = std::move(r.placed);
  return r.stats.at(0);
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
