#pragma once
// The tier assignment (include/placer/kernels/tier.hpp) as a team program:
// written once, run by a team of `size()` workers that share the buffers
// and meet at `sync()` barriers. Every loop splits its range over the team
// (i = rank, rank + size, ...); the few serial steps run on rank 0; the
// loop control lives in tier_buffers::ctl, written by rank 0 between
// barriers and read by all after one.
//
//   seq_team (below)          g++: one worker, barriers are no-ops (the CPU backend's default)
//   omp_team (tier_host.hpp)  g++: the threads of an OpenMP region (PLACER_TIER_THREADS)
//   cuda_team (cuda_backend)  one CTA, __syncthreads(), atomicAdd: one launch per tier
//
// A Team provides rank(), size(), sync(), fetch_add(int*, int) (an atomic
// add returning the old value), fetch_max(int*, int), fetch_min (int and
// int64), solo_below() (a bidding round with fewer bidders runs on rank 0
// alone) and team_wide: a team of many slow workers (a CTA) does together
// what a worker per row or rank 0 would do alone (the floors,
// tier_floors_radix for tier_floor; the price jumps, tier_jump_team for
// tier_jump; the winners' list and groups, the next tier's candidates;
// a round's offers, tier_offer_team), with the same
// results. Results never depend on the order
// in which the team's workers do things: a row keeps the best bids of
// everything it was offered (a strict order: bid, then the lower node), and
// the placements are sorted by (iteration, node) on the host.

#include <placer/kernels/hd.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/kernels/steps.hpp>
#include <placer/kernels/tier.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Loop control shared by the team (backend memory).
struct tier_control {
  /// Nodes in todo[0] / todo[1]. Round k of a pass bids from list k % 2
  /// (every worker knows k) and fills the other (fetch_add); a count is
  /// reset only after a barrier since it was last read.
  std::int32_t todo_count[2] = {0, 0};
  std::int32_t placed = 0;       ///< placements so far (fetch_add)
  std::int32_t touched = 0;      ///< nodes won this iteration (fetch_add)
  std::int32_t placed_before = 0;  ///< copies at the iteration's start
  std::int32_t iterations = 0;
  std::int32_t round_cap_hit = 0;
  std::int32_t done = 0;         ///< 1: stop iterating
  std::int32_t again = 0;        ///< 1: a row ended unfilled above a zero floor; bid again
  std::int32_t jump_raised = 0;  ///< 1: the last tier_jump raised prices (read after its barrier)
  std::int32_t floor_passes = 0;  ///< tier_floors_radix: the most digit passes a row needs (fetch_max)
  /// tier_jump_team: rows joined G in a sweep (two, alternating), G has a
  /// row, G has a row with an unheld copy; the least slack of G's holders.
  std::int32_t jump_changed[2] = {0, 0};
  std::int32_t jump_any = 0;
  std::int32_t jump_stop = 0;
  std::int64_t jump_rise = 0;
  std::int32_t offer_passes = 0;  ///< tier_offer_team: the most digit passes a row needs (fetch_max)
  std::int32_t offer_moved[2] = {0, 0};  ///< tier_offer_team: a row's M moved in a step (two, alternating)
  /// tier_offer_team: the rows listed in offer_rows (high 32 bits) and
  /// their items (low 32 bits), one fetch_add a row; 0 again at its end.
  std::int64_t offer_slots = 0;
  std::int32_t offer_most_held = 0;  ///< tier_offer_team: the most copies a listed row keeps (fetch_max)
  std::int64_t rounds = 0;
  std::int32_t passes = 0;  ///< passes so far (tier_first_bidders), the stamp of bid_pass
  /// Rank 0's clock per tier_phase, and the tier's span in clock ticks and
  /// in nanoseconds (they scale the ticks: SM cycles on the GPU).
  std::int64_t phase[tier_phase_count] = {};
  std::int64_t ticks = 0;
  std::int64_t ns = 0;
};

/// Rank 0's stopwatch over a tier's phases (tier_control::phase): lap(P)
/// adds the time since the last lap to phase P. Others' laps do nothing.
struct tier_clock {
  PLACER_HD static std::int64_t ticks() {
#if defined(__CUDA_ARCH__)
    return static_cast<std::int64_t>(clock64());
#else
    return tier_clock::ns();
#endif
  }
  PLACER_HD static std::int64_t ns() {
#if defined(__CUDA_ARCH__)
    std::uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return static_cast<std::int64_t>(t);
#else
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
#endif
  }
  PLACER_HD tier_clock(tier_control* c, bool on) : ctl(on ? c : nullptr) {
    if (ctl != nullptr) {
      start_ns = ns();
      start = last = ticks();
    }
  }
  PLACER_HD void lap(tier_phase p) {
    if (ctl == nullptr) return;
    std::int64_t const now = ticks();
    ctl->phase[p] += now - last;
    last = now;
  }
  /// The tier's span, once at its end.
  PLACER_HD void stop() {
    if (ctl == nullptr) return;
    ctl->ticks += ticks() - start;
    ctl->ns += ns() - start_ns;
  }
  tier_control* ctl;
  std::int64_t start = 0, last = 0, start_ns = 0;
};

/// The serial offers run every row at once, a heap step a bid on each row's
/// thread, while the team's cost some tens of barriers a bidding round
/// whatever the rows' bids: the team takes a row from this many bids in a
/// round. Chosen on an H100 (bench/results/2026-11-26-h100-offer-least-*):
/// taking every row with bids cost the 10k round's offers 5.8 -> 12.6 ms;
/// from 16 bids the offers of 10k, 100k and openb sum to 27.1 ms, from 64
/// to 29.9 and from 1 to 36.1.
inline constexpr std::int32_t tier_offer_team_least = 16;

/// A team_wide team refreshes a tier's stale cells a worker per cell, not
/// per node, when the tier has at most this many candidate nodes: half the
/// CUDA backend's CTA when it had 256 threads (it has 512 now;
/// PLACER_CUDA_REFRESH_CELLS_BELOW sets tier_buffers::refresh_cells_below
/// there, to measure).
inline constexpr std::int32_t tier_refresh_cells_below = 128;

/// Rows a node remembers from its last full scan of a pass (tier_bid):
/// most of its later bids are decided by these alone.
inline constexpr std::int32_t tier_bid_top = 4;
/// Bids remember rows only in tiers of more rows than this: a remembered
/// bid is a chain of dependent loads (the pass, the rows, their cells)
/// where a scan's loads are independent, so on 18 rows (the 100k round's
/// largest tier) remembering cost 2-5% of the bid phase on the CPU, on
/// 37 (10k-k8s) it was even, on 50 (100k-k8s) it saved 20% and on 248
/// (gpuspec25 in one round) a fifth of the round.
inline constexpr std::int32_t tier_remember_rows_above = 32;

/// The program's buffers, in the backend's memory. Sizes: N = nodes, R =
/// rows, D = sum of the rows' demands.
struct tier_buffers {
  tier_problem p;                    ///< pointers into backend memory
  std::int32_t const* heap_begin;    ///< R + 1: exclusive scan of demand (host)
  std::int32_t* remaining;           ///< R
  std::int32_t* quota;               ///< R: copies a row may place this iteration (remaining, or less under row_cap)
  std::int64_t* floor;               ///< R: the price of a row's unheld copies
  /// 2R: a row's price (tier_price; tier_closed when met), in two halves:
  /// round k reads half k % 2 (tier_prices) and writes the other, so an
  /// offer may re-price holders against the round's prices while other
  /// rows' workers move theirs.
  std::int64_t* price;
  std::int32_t* select;              ///< R x N: scratch for the floors, then the winners' groups
  std::int32_t* held;                ///< R: copies held this iteration
  std::int32_t* bid_count;           ///< R
  std::int32_t* bid_cursor;          ///< R
  std::int64_t* heap_bid;            ///< D: per row a min-heap of held bids
  std::int32_t* heap_node;           ///< D
  std::int32_t* bid_row;             ///< N: row a node bids for this round, -1 none
  std::int64_t* bid_value;           ///< N
  std::int32_t* bid_round;           ///< N: the round a held bid was made in (ctl->rounds)
  /// tier_bid_top x N, node-major: the rows of a node's best margins at
  /// its last full scan (tier_scan_margins), ascending, -1 past the last.
  std::int32_t* bid_top;
  std::int64_t* bid_bound;           ///< N: the next best margin at that scan (tier_no_margin: none)
  std::int32_t* bid_pass;            ///< N: the pass of that scan (ctl->passes), -1 none in this tier
  std::int32_t* todo[2];             ///< N each: nodes bidding this round / next
  std::int32_t* bucket;              ///< N: this round's bids grouped by row
  std::int32_t* won;                 ///< N: nodes that won a copy this iteration
  std::int32_t* won_row;             ///< N: the row a node won, -1 none
  std::int32_t* jump_rows;           ///< 2R: tier_jump's row marks and worklist
  std::int32_t* floor_hist;          ///< 256R: tier_floors_radix's digit counts per row
  std::int32_t* floor_row;           ///< tier_floor_fields x R: tier_floors_radix's state per row
  std::int64_t* offer_row;           ///< tier_offer_fields x R: tier_offer_team's state per row
  std::int32_t* offer_rows;          ///< R: the rows tier_offer_team takes in a round, in any order
  std::int32_t* offer_begin;         ///< R: where a listed row's items begin among all of them (ascending)
  tier_placement* out;               ///< D
  tier_control* ctl;
  /// tier_offer_team takes the rows with at least this many bids in a
  /// round; the others keep the serial offers (the same results).
  std::int32_t offer_team_least = tier_offer_team_least;
  /// A team_wide team refreshes a tier a worker per cell up to this many
  /// candidate nodes (tier_refresh_cells_below).
  std::int32_t refresh_cells_below = tier_refresh_cells_below;
  /// Bids remember rows in tiers of more rows than this
  /// (tier_remember_rows_above; 0: always, in the tests).
  std::int32_t remember_rows_above = tier_remember_rows_above;
};

/// A chain of tiers run in one launch (tier_chain_program; the backend's
/// place_tiers): tier k + 1 starts from the node state, matrix and clock
/// tier k left, and its refresh candidates are the nodes tier k committed,
/// each once (tiers after the first do not read their `changed`). Per tier
/// k: its problem, its heap_begin at heap_at[k], its control ctl[k] and
/// its placements at out + out_at[k] (its copies reserved). `work` holds
/// the program's other buffers, laid out for the chain's largest tier
/// (tier_layout with the most nodes x rows and copies of any tier).
struct tier_chain {
  std::int32_t n_tiers = 0;
  tier_problem const* tiers = nullptr;
  std::int32_t const* heap_begin = nullptr;  ///< sum of (R_k + 1)
  std::int32_t const* heap_at = nullptr;     ///< n_tiers
  std::int32_t const* out_at = nullptr;      ///< n_tiers + 1
  tier_control* ctl = nullptr;               ///< n_tiers, zeroed
  tier_placement* out = nullptr;             ///< out_at[n_tiers]
  std::int32_t* listed = nullptr;            ///< N: the last tier that listed a node as a candidate
  std::int32_t* candidates = nullptr;        ///< the most copies of a tier: tier k - 1's committed nodes
  std::int32_t* n_candidates = nullptr;      ///< 1
  tier_buffers work;
};

/// Host: heap_begin[0..R] = exclusive scan of the demands; returns their sum
/// (the copies, and the most placements a tier can make).
inline std::int32_t tier_heap_begin(tier_problem const& p, std::int32_t* heap_begin) {
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    heap_begin[r] = static_cast<std::int32_t>(at);
    at += p.demand[r];
  }
  heap_begin[p.n_rows] = static_cast<std::int32_t>(at);
  return static_cast<std::int32_t>(at);
}

/// tier_floors_radix's state of a row (tier_buffers::floor_row): its
/// feasible cells and their largest value, then the rank wanted among the
/// cells that match the value's bits found so far (pre, the bits above
/// `at`); at <= 0 once the floor is known.
enum tier_floor_field : int { tier_floor_count, tier_floor_hi, tier_floor_want, tier_floor_pre, tier_floor_at, tier_floor_fields };

/// tier_offer_team's state of a row (tier_buffers::offer_row): the round
/// the team took its offers in (else older), its items' least and largest
/// value, the key shift, the threshold M, then the radix search for f(M)
/// as in tier_floor_field.
enum tier_offer_field : int {
  tier_offer_round,
  tier_offer_lo,
  tier_offer_hi,
  tier_offer_shift,
  tier_offer_pre_m,  ///< M, the threshold key so far (-1: nobody re-bid)
  tier_offer_want,
  tier_offer_pre,
  tier_offer_at,
  tier_offer_searching,  ///< 1: M may still move
  tier_offer_fields
};

/// Host: lays the program's work buffers out through take(T* tag, count),
/// which returns backend memory for `count` elements of T. `p`, heap_begin
/// and ctl are the caller's.
template <class Take>
void tier_layout(tier_buffers& b, std::int32_t n_nodes, std::int32_t n_rows, std::int32_t copies, Take&& take) {
  auto const n = static_cast<std::size_t>(n_nodes);
  auto const r = static_cast<std::size_t>(n_rows);
  auto const d = static_cast<std::size_t>(copies);
  b.remaining = take(b.remaining, r);
  b.quota = take(b.quota, r);
  b.floor = take(b.floor, r);
  b.price = take(b.price, 2 * r);
  b.select = take(b.select, r * n);
  b.held = take(b.held, r);
  b.bid_count = take(b.bid_count, r);
  b.bid_cursor = take(b.bid_cursor, r);
  b.heap_bid = take(b.heap_bid, d);
  b.heap_node = take(b.heap_node, d);
  b.bid_row = take(b.bid_row, n);
  b.bid_value = take(b.bid_value, n);
  b.bid_round = take(b.bid_round, n);
  b.bid_top = take(b.bid_top, tier_bid_top * n);
  b.bid_bound = take(b.bid_bound, n);
  b.bid_pass = take(b.bid_pass, n);
  b.todo[0] = take(b.todo[0], n);
  b.todo[1] = take(b.todo[1], n);
  b.bucket = take(b.bucket, n);
  b.won = take(b.won, n);
  b.won_row = take(b.won_row, n);
  b.jump_rows = take(b.jump_rows, 2 * r);
  b.floor_hist = take(b.floor_hist, 256 * r);
  b.floor_row = take(b.floor_row, tier_floor_fields * r);
  b.offer_row = take(b.offer_row, tier_offer_fields * r);
  b.offer_rows = take(b.offer_rows, r);
  b.offer_begin = take(b.offer_begin, r);
}

/// Host: the chain's sizes and offsets from its problems: heap_begin
/// (concatenated) and heap_at, out_at (n_tiers + 1), and the largest tier's
/// rows and copies for tier_layout. Returns the chain's copies.
inline std::int32_t tier_chain_offsets(tier_problem const* tiers, std::int32_t n_tiers, std::int32_t* heap_begin,
                                       std::int32_t* heap_at, std::int32_t* out_at, std::int32_t& most_rows,
                                       std::int32_t& most_copies) {
  std::int32_t h = 0;
  most_rows = most_copies = 0;
  out_at[0] = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    heap_at[k] = h;
    std::int32_t const copies = tier_heap_begin(tiers[k], heap_begin + h);
    h += tiers[k].n_rows + 1;
    out_at[k + 1] = out_at[k] + copies;
    most_rows = most_rows > tiers[k].n_rows ? most_rows : tiers[k].n_rows;
    most_copies = most_copies > copies ? most_copies : copies;
  }
  return out_at[n_tiers];
}
/// Host: a chain's results from its controls and placements (out + out_at[k]
/// for tier k, as tier_chain_offsets laid them out); returns the
/// placements in all. No tiers: empty results.
inline std::int32_t tier_chain_results(tier_control const* ctl, tier_placement const* out, std::int32_t const* out_at,
                                       std::int32_t n_tiers, tier_results& r) {
  r.placed.clear();
  r.begin.assign(1, 0);
  r.stats.clear();
  std::int32_t placed = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    tier_placement const* from = out + out_at[k];
    r.placed.insert(r.placed.end(), from, from + ctl[k].placed);
    r.begin.push_back(static_cast<std::int32_t>(r.placed.size()));
    tier_stats st{ctl[k].iterations, ctl[k].rounds, ctl[k].round_cap_hit != 0};
    double const scale = ctl[k].ticks > 0 ? static_cast<double>(ctl[k].ns) / static_cast<double>(ctl[k].ticks) : 0.0;
    for (int ph = 0; ph < tier_phase_count; ++ph) {
      st.phase_ns[ph] = static_cast<std::int64_t>(static_cast<double>(ctl[k].phase[ph]) * scale);
    }
    tier_profile_add(st);
    r.stats.push_back(st);
    placed += ctl[k].placed;
  }
  return placed;
}
/// Entries of the chain's concatenated heap_begin.
inline std::size_t tier_chain_heap_entries(tier_problem const* tiers, std::int32_t n_tiers) {
  std::size_t e = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) e += static_cast<std::size_t>(tiers[k].n_rows) + 1;
  return e;
}

/// A chain of tiers is one launch of the program, and one wait: the
/// placements and what the tiers changed read back.
inline void count_tier(step_counts& st) {
  st.calls += 1;
  st.waits += 1;
}

/// A team of one: the CPU backend's worker.
struct seq_team {
  [[nodiscard]] static constexpr std::int32_t rank() { return 0; }
  [[nodiscard]] static constexpr std::int32_t size() { return 1; }
  /// A bidding round with fewer bidders than this runs on rank 0 alone
  /// (one barrier instead of four); every Team says where its barriers
  /// cost more than the work they split.
  [[nodiscard]] static constexpr std::int32_t solo_below() { return 0; }
  PLACER_HD static void sync() {}
  template <class T>
  PLACER_HD static T fetch_add(T* p, std::type_identity_t<T> v) {
    T const old = *p;
    *p += v;
    return old;
  }
  template <class T>
  PLACER_HD static T fetch_max(T* p, T v) {
    T const old = *p;
    if (v > old) *p = v;
    return old;
  }
  template <class T>
  PLACER_HD static T fetch_min(T* p, T v) {
    T const old = *p;
    if (v < old) *p = v;
    return old;
  }
  /// The CPU backend selects each row's floor on one worker (tier_floor),
  /// jumps on rank 0 (tier_jump) and offers a row's bids on its worker;
  /// the device twin runs the CUDA backend's way (team_wide).
  bool team_wide = false;
};

/// (bid, node) order of held copies: a is worse than b (lower bid, or the
/// same bid from a higher node index). The heap keeps the worst on top.
PLACER_HD inline bool tier_worse(std::int64_t bid_a, std::int32_t node_a, std::int64_t bid_b, std::int32_t node_b) {
  return bid_a != bid_b ? bid_a < bid_b : node_a > node_b;
}

/// The price of a row with no copy left to place: above any margin.
inline constexpr std::int64_t tier_closed = std::int64_t{1} << 62;

/// The price a bidder sees for row r: the worst held bid when every copy
/// of the iteration is held, else the floor (an unheld copy); tier_closed
/// when the row places nothing more this iteration.
PLACER_HD inline std::int64_t tier_price(tier_buffers const& b, std::int32_t r) {
  if (b.quota[r] == 0) return tier_closed;
  return b.held[r] < b.quota[r] ? b.floor[r] : b.heap_bid[b.heap_begin[r]];
}

/// The prices round k reads (list = k % 2); the round writes the other half.
PLACER_HD inline std::int64_t* tier_prices(tier_buffers const& b, std::int32_t list) {
  return b.price + static_cast<std::int64_t>(list) * b.p.n_rows;
}

/// The k-th largest (1-based) of v[0..n) by quickselect, reordering v;
/// requires 1 <= k <= n.
PLACER_HD inline std::int32_t tier_kth_largest(std::int32_t* v, std::int32_t n, std::int32_t k) {
  std::int32_t lo = 0, hi = n - 1;
  std::int32_t const want = k - 1;  // index in descending order
  while (lo < hi) {
    std::int32_t const pivot = v[lo + (hi - lo) / 2];
    std::int32_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] > pivot) ++i;
      while (v[j] < pivot) --j;
      if (i <= j) {
        std::int32_t const t = v[i];
        v[i] = v[j];
        v[j] = t;
        ++i;
        --j;
      }
    }
    if (want <= j) {
      hi = j;
    } else if (want >= i) {
      lo = i;
    } else {
      return v[want];
    }
  }
  return v[want];
}

/// Feasible values from which tier_floor takes a radix step before its
/// quickselect; shorter lists are selected directly.
inline constexpr std::int32_t tier_floor_radix_from = 512;

/// Row r's floor for an iteration with `copies` copies in all: its
/// (copies+1)-th best value (a node of the row's top `copies` is always
/// at least as good for it, so no optimal assignment needs another), or 0
/// when no more nodes than that can take it. Bidders below the floor sit
/// out, so the prices start near where they end instead of climbing to it
/// one increment per round when nodes far outnumber copies.
///
/// The selection: one branch-free pass copies the row's feasible values
/// (their count and largest too); a short list goes to a quickselect as it
/// is; a long one takes a radix step first, a histogram of the values' top
/// eight bits (on the host four interleaved copies, so that runs of one
/// bucket do not wait on each other's increments) finding the bucket that holds the
/// (copies+1)-th, and only that bucket's values, compacted in place, go to
/// the quickselect.
PLACER_HD inline std::int64_t tier_floor(tier_buffers const& b, std::int32_t r, std::int32_t copies) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const* row = p.scores + static_cast<std::int64_t>(p.row_class[r]) * n_nodes;
  std::int32_t* v = b.select + static_cast<std::int64_t>(r) * n_nodes;
  std::int32_t k = 0;
  std::int32_t hi = 0;
  for (std::int32_t n = 0; n < n_nodes; ++n) {
    v[k] = row[n];
    k += row[n] >= 0 ? 1 : 0;
    hi = max_of(hi, row[n]);
  }
  if (k <= copies) return 0;
  std::int32_t want = copies + 1;  // the want-th largest; at most k
  if (k > tier_floor_radix_from) {
    std::int32_t shift = 0;
    while ((hi >> shift) >= 256) ++shift;
    // Four interleaved histograms on the host; one on the device, where a
    // thread's stack is local memory reserved for every thread the GPU can
    // hold (4 KB more a thread would be about 1 GB on an H100). The counts,
    // and so the floors, are the same either way.
#ifdef __CUDA_ARCH__
    constexpr std::int32_t lanes = 1;
#else
    constexpr std::int32_t lanes = 4;
#endif
    std::int32_t hist[lanes][256] = {};
    for (std::int32_t i = 0; i < k; ++i) ++hist[i % lanes][v[i] >> shift];
    std::int32_t bucket = 255;
    while (true) {
      std::int32_t in = 0;
      for (std::int32_t l = 0; l < lanes; ++l) in += hist[l][bucket];
      if (in >= want) break;
      want -= in;
      --bucket;
    }
    std::int32_t m = 0;
    for (std::int32_t i = 0; i < k; ++i) {  // in place: m <= i
      v[m] = v[i];
      m += (v[i] >> shift) == bucket ? 1 : 0;
    }
    k = m;
  }
  return tier_kth_largest(v, k, want);
}

/// The radix search both team selections run (tier_floors_radix over a
/// row's values, tier_offer_team over its items' keys): the bits found so
/// far are `pre`, those above bit `at`; a pass counts the next digit (at
/// most eight bits) of the values that match them, and a worker per row
/// walks the counts down to the digit that holds the wanted rank.
///
/// The next digit of v, or -1 when v does not match the bits found.
template <class T>
PLACER_HD std::int32_t tier_digit(T v, T pre, T at) {
  if ((v >> at) != pre) return -1;
  T const width = min_of<T>(8, at);
  return static_cast<std::int32_t>((v >> (at - width)) & ((T{1} << width) - 1));
}
/// A worker's digit counts, a run of one digit added at once (identical
/// nodes score alike, so equal values do not queue on one counter).
template <class Team>
struct tier_digit_runs {
  Team& t;
  std::int32_t* hist;  ///< the row's 256 counts
  std::int32_t digit = -1;
  std::int32_t run = 0;
  PLACER_HD void add(std::int32_t d) {
    if (d != digit) {
      flush();
      digit = d;
    }
    ++run;
  }
  /// The same into another row's counts.
  PLACER_HD void add(std::int32_t* h, std::int32_t d) {
    if (h != hist) {
      flush();
      hist = h;
      digit = -1;
    }
    add(d);
  }
  PLACER_HD void flush() {
    if (run > 0) t.fetch_add(hist + digit, run);
    run = 0;
  }
};
/// After a pass: the digit that holds the wanted rank joins `pre`, the rank
/// is taken within it, and the counts are cleared for the next pass.
template <class T>
PLACER_HD void tier_radix_step(std::int32_t* hist, T& want, T& pre, T& at) {
  T const width = min_of<T>(8, at);
  std::int32_t d = (1 << width) - 1;
  while (d > 0 && hist[d] < want) want -= hist[d--];
  for (std::int32_t i = 0; i < 256; ++i) hist[i] = 0;
  pre = (pre << width) | d;
  at -= width;
}

/// Every row's floor (tier_floor's values; 0 for a row without quota) by
/// the whole team, for a team of many slow workers (a CTA): tier_floor's
/// scan of a row on one GPU thread is serial global-memory work, 40 of the
/// 100k round's 78 ms on an H100, with all but R of the CTA's threads
/// idle. Here the team reads each row's cells together: a pass counts the
/// feasible ones and finds their largest value, then radix passes of eight
/// bits, most significant first (as many as the largest value needs), count
/// the digits of the cells that match the bits found so far, and one worker
/// per row walks its 256 counts down to the digit that holds the wanted
/// rank. A worker adds runs of one digit at once (identical nodes score
/// alike), so equal values do not queue on one counter. Ends at a barrier.
template <class Team>
PLACER_HD void tier_floors_radix(Team& t, tier_buffers const& b, std::int32_t copies) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  for (std::int32_t i = me; i < 256 * n_rows; i += team) b.floor_hist[i] = 0;
  for (std::int32_t i = me; i < tier_floor_fields * n_rows; i += team) b.floor_row[i] = 0;
  if (me == 0) b.ctl->floor_passes = 0;
  t.sync();
  auto row_of = [&](std::int32_t r) { return p.scores + static_cast<std::int64_t>(p.row_class[r]) * n_nodes; };
  for (std::int32_t r = 0; r < n_rows; ++r) {
    if (b.quota[r] == 0) continue;
    std::int32_t const* row = row_of(r);
    std::int32_t count = 0;
    std::int32_t hi = 0;
    for (std::int32_t n = me; n < n_nodes; n += team) {
      count += row[n] >= 0 ? 1 : 0;
      hi = max_of(hi, row[n]);
    }
    std::int32_t* f = b.floor_row + tier_floor_fields * r;
    if (count > 0) t.fetch_add(f + tier_floor_count, count);
    if (hi > 0) t.fetch_max(f + tier_floor_hi, hi);
  }
  t.sync();
  for (std::int32_t r = me; r < n_rows; r += team) {
    std::int32_t* f = b.floor_row + tier_floor_fields * r;
    b.floor[r] = 0;
    if (b.quota[r] == 0 || f[tier_floor_count] <= copies) continue;  // at 0: nothing to find
    std::int32_t shift = 0;
    while ((f[tier_floor_hi] >> shift) >= 256) ++shift;
    f[tier_floor_want] = copies + 1;
    f[tier_floor_at] = shift + 8;  // every feasible value has no bits at or above shift + 8
    t.fetch_max(&b.ctl->floor_passes, (shift + 15) / 8);
  }
  t.sync();
  std::int32_t const passes = b.ctl->floor_passes;
  for (std::int32_t pass = 0; pass < passes; ++pass) {
    for (std::int32_t r = 0; r < n_rows; ++r) {
      std::int32_t const* f = b.floor_row + tier_floor_fields * r;
      if (f[tier_floor_at] <= 0) continue;
      std::int32_t const* row = row_of(r);
      tier_digit_runs<Team> runs{t, b.floor_hist + 256 * r};
      for (std::int32_t n = me; n < n_nodes; n += team) {
        std::int32_t const d = row[n] < 0 ? -1 : tier_digit(row[n], f[tier_floor_pre], f[tier_floor_at]);
        if (d >= 0) runs.add(d);
      }
      runs.flush();
    }
    t.sync();
    for (std::int32_t r = me; r < n_rows; r += team) {
      std::int32_t* f = b.floor_row + tier_floor_fields * r;
      if (f[tier_floor_at] <= 0) continue;
      tier_radix_step(b.floor_hist + 256 * r, f[tier_floor_want], f[tier_floor_pre], f[tier_floor_at]);
      if (f[tier_floor_at] == 0) b.floor[r] = f[tier_floor_pre];
    }
    t.sync();
  }
}

/// Row r's value on node n (-1 = infeasible).
PLACER_HD inline std::int32_t tier_value(tier_buffers const& b, std::int32_t r, std::int32_t n) {
  return b.p.scores[static_cast<std::int64_t>(b.p.row_class[r]) * b.p.nodes.n_nodes + n];
}

/// A margin below any cell's, closed rows' included (their price is
/// tier_closed), and below 0: an infeasible cell's.
inline constexpr std::int64_t tier_no_margin = -(std::int64_t{1} << 62) - 1;

/// Node n's margin on row r at `prices`: value + 1 - price, or
/// tier_no_margin where the cell is infeasible.
PLACER_HD inline std::int64_t tier_margin(tier_buffers const& b, std::int32_t r, std::int32_t n,
                                          std::int64_t const* prices) {
  std::int32_t const v = tier_value(b, r, n);
  return v >= 0 ? static_cast<std::int64_t>(v) + 1 - prices[r] : tier_no_margin;
}

/// Folds row r's margin m into the best row r1 (margin m1; an equal margin
/// keeps the row folded first) and the second-best margin m2, which starts
/// at 0 (sitting out).
PLACER_HD inline void tier_fold_margin(std::int32_t r, std::int64_t m, std::int32_t& r1, std::int64_t& m1,
                                       std::int64_t& m2) {
  if (r1 < 0 || m > m1) {
    if (r1 >= 0 && m1 > m2) m2 = m1;
    m1 = m;
    r1 = r;
  } else if (m > m2) {
    m2 = m;
  }
}

/// Node n's margins at `prices` (tier_margin; infeasible rows left out, a
/// closed row's below any other's and below 0): the best row (ties to the
/// lower) with its margin, and the best margin of the rows other than
/// `skip`, floored at 0 (sitting out). With skip = -1 the second is the
/// best of the rows other than the best one. The hot loop of every bid,
/// so it reads the cell itself rather than through tier_margin's sentinel.
PLACER_HD inline void tier_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, std::int32_t skip,
                                   std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  auto const& p = b.p;
  m1 = 0;
  m2 = 0;
  r1 = -1;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    if (r == skip) continue;
    std::int32_t const v = tier_value(b, r, n);
    if (v < 0) continue;
    std::int64_t const m = static_cast<std::int64_t>(v) + 1 - prices[r];  // tier_margin of a feasible cell
    tier_fold_margin(r, m, r1, m1, m2);
  }
}

/// Node n's margins at `prices` as tier_margins gives them (skip = -1),
/// by a scan of every row that also remembers the node's tier_bid_top best
/// rows and the margin after them (bid_top, bid_bound) for this pass. Ties
/// go to the lower row, as in tier_margins (the rows are scanned in order;
/// an equal margin does not pass an earlier row's).
PLACER_HD inline void tier_scan_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices,
                                        std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  constexpr std::int32_t k = tier_bid_top;
  std::int64_t tm[k + 1];
  std::int32_t tr[k + 1];
  std::int32_t count = 0;
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    std::int32_t const v = tier_value(b, r, n);
    if (v < 0) continue;
    std::int64_t const m = static_cast<std::int64_t>(v) + 1 - prices[r];  // tier_margin of a feasible cell
    if (count == k + 1 && m <= tm[k]) continue;
    std::int32_t i = count < k + 1 ? count++ : k;
    for (; i > 0 && tm[i - 1] < m; --i) {
      tm[i] = tm[i - 1];
      tr[i] = tr[i - 1];
    }
    tm[i] = m;
    tr[i] = r;
  }
  r1 = count > 0 ? tr[0] : -1;
  m1 = count > 0 ? tm[0] : 0;
  m2 = count > 1 ? max_of<std::int64_t>(tm[1], 0) : 0;
  std::int32_t* top = b.bid_top + static_cast<std::int64_t>(n) * k;
  std::int32_t const kept = min_of(count, k);
  for (std::int32_t i = 0; i < kept; ++i) {  // ascending, for tier_remembered_margins' ties
    std::int32_t j = i;
    for (; j > 0 && top[j - 1] > tr[i]; --j) top[j] = top[j - 1];
    top[j] = tr[i];
  }
  for (std::int32_t i = kept; i < k; ++i) top[i] = -1;
  b.bid_bound[n] = count == k + 1 ? tm[k] : tier_no_margin;
  b.bid_pass[n] = b.ctl->passes;
}

/// Node n's margins at `prices` from the rows it remembers of this pass
/// (tier_scan_margins), when they decide them: prices only rise within a
/// pass and the cells do not change, so every other row's margin is still
/// at most bid_bound. When the best remembered margin is above it and the
/// second at or above it (or it is at most 0, sitting out), they are
/// tier_margins' answer; returns false otherwise (scan every row).
PLACER_HD inline bool tier_remembered_margins(tier_buffers const& b, std::int32_t n, std::int64_t const* prices,
                                              std::int32_t& r1, std::int64_t& m1, std::int64_t& m2) {
  if (b.bid_pass[n] != b.ctl->passes) return false;
  std::int32_t const* top = b.bid_top + static_cast<std::int64_t>(n) * tier_bid_top;
  r1 = -1;
  m1 = 0;
  m2 = 0;
  for (std::int32_t i = 0; i < tier_bid_top && top[i] >= 0; ++i) {
    std::int32_t const r = top[i];
    std::int64_t const m = static_cast<std::int64_t>(tier_value(b, r, n)) + 1 - prices[r];  // feasible when scanned
    tier_fold_margin(r, m, r1, m1, m2);
  }
  std::int64_t const bound = b.bid_bound[n];
  return r1 >= 0 && m1 > bound && m2 >= bound;
}

/// Node n's bid this round: its best row by margin at the round's prices,
/// at price + (best - max(second, 0)) + eps, i.e. value + 1 - second + eps:
/// the most it pays while that row stays its best within eps. Returns false
/// when no row has a positive margin (the node sits this iteration out:
/// prices only rise within one). In a tier of many rows, most bids after
/// a pass's first round are decided by the rows the node remembers
/// (tier_remembered_margins: two thirds of the bids at 10k-k8s, 60% at
/// 100k-k8s).
PLACER_HD inline bool tier_bid(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, std::int32_t& row,
                               std::int64_t& bid) {
  std::int32_t r1 = -1;
  std::int64_t m1 = 0, m2 = 0;
  if (b.p.n_rows <= b.remember_rows_above) {
    tier_margins(b, n, prices, -1, r1, m1, m2);
  } else if (!tier_remembered_margins(b, n, prices, r1, m1, m2)) {
    tier_scan_margins(b, n, prices, r1, m1, m2);
  }
  if (r1 < 0 || m1 <= 0) return false;
  row = r1;
  bid = prices[r1] + (m1 - m2) + b.p.eps;
  return true;
}

/// What holder n of row r would bid for r now, at the round's prices:
/// value + 1 - (its best margin elsewhere, or 0) + eps. Prices only rise
/// within a pass, so this is never below the bid it holds with.
PLACER_HD inline std::int64_t tier_rebid(tier_buffers const& b, std::int32_t n, std::int32_t r, std::int64_t const* prices) {
  std::int32_t r1 = -1;
  std::int64_t m1 = 0, m2 = 0;
  tier_margins(b, n, prices, r, r1, m1, m2);
  std::int64_t const other = r1 >= 0 && m1 > 0 ? m1 : 0;
  return static_cast<std::int64_t>(tier_value(b, r, n)) + 1 - other + b.p.eps;
}

/// Puts (bid, n) at entry i of a held-bids heap of `size` entries (the
/// worst on top) and sifts it down to its place.
PLACER_HD inline void tier_sift_down(std::int64_t* hb, std::int32_t* hn, std::int32_t size, std::int32_t i,
                                     std::int64_t bid, std::int32_t n) {
  while (true) {
    std::int32_t worst = i;
    std::int64_t wb = bid;
    std::int32_t wn = n;
    for (std::int32_t c = 2 * i + 1; c <= 2 * i + 2 && c < size; ++c) {
      if (tier_worse(hb[c], hn[c], wb, wn)) {
        worst = c;
        wb = hb[c];
        wn = hn[c];
      }
    }
    if (worst == i) break;
    hb[i] = hb[worst];
    hn[i] = hn[worst];
    i = worst;
  }
  hb[i] = bid;
  hn[i] = n;
}

/// Offers node n's bid to row r's heap (one worker per row). Returns the
/// node that lost (the evicted holder, or n itself when its bid is not
/// better than the worst held one), or -1 when nobody lost.
///
/// Before the worst holder is evicted it bids again in place, at the
/// round's prices (tier_rebid): a held bid was made against the prices of
/// its round, and the other rows have risen since. Without this, a full row
/// of q copies rises by about one increment per q evictions (each lifts
/// its price only to the next stale bid), and a few surplus nodes bounce
/// between near-equal rows for thousands of rounds; with it, the holder
/// keeps the copy whenever it would win it back next round anyway.
PLACER_HD inline std::int32_t tier_offer(tier_buffers const& b, std::int32_t r, std::int32_t n, std::int64_t bid,
                                         std::int64_t const* prices) {
  std::int64_t* hb = b.heap_bid + b.heap_begin[r];
  std::int32_t* hn = b.heap_node + b.heap_begin[r];
  std::int32_t size = b.held[r];
  std::int32_t const cap = b.quota[r];
  std::int32_t lost = -1;
  std::int32_t const now = static_cast<std::int32_t>(b.ctl->rounds);
  b.bid_round[n] = now;
  if (size < cap) {
    std::int32_t i = size++;
    b.held[r] = size;
    // Sift up: the worst on top.
    while (i > 0) {
      std::int32_t const parent = (i - 1) / 2;
      if (!tier_worse(bid, n, hb[parent], hn[parent])) break;
      hb[i] = hb[parent];
      hn[i] = hn[parent];
      i = parent;
    }
    hb[i] = bid;
    hn[i] = n;
    return -1;
  }
  if (cap == 0) return n;
  while (tier_worse(hb[0], hn[0], bid, n)) {
    // A bid of this round is current: no need to make it again.
    std::int64_t const again = b.bid_round[hn[0]] == now ? hb[0] : tier_rebid(b, hn[0], r, prices);
    b.bid_round[hn[0]] = now;
    if (again <= hb[0]) {  // its bid is current: it loses the copy
      lost = hn[0];
      tier_sift_down(hb, hn, size, 0, bid, n);
      return lost;
    }
    tier_sift_down(hb, hn, size, 0, again, hn[0]);
  }
  return n;  // not better than the worst held
}

/// Bidding rounds of a pass before tier_jump is tried (then after a round
/// that left as many bidders as it had: a price war), and the most rounds
/// between tries after tries that raised nothing.
inline constexpr std::int32_t tier_jump_after = 8;
inline constexpr std::int32_t tier_jump_most_wait = 64;

/// The rows bidder n wants at `prices`, each passed to join(r): its best
/// and those within eps of it; none when it would sit out (G's first rows).
template <class Join>
PLACER_HD void tier_wanted(tier_buffers const& b, std::int32_t n, std::int64_t const* prices, Join&& join) {
  std::int32_t r1 = -1;
  std::int64_t m1 = 0, m2 = 0;
  tier_margins(b, n, prices, -1, r1, m1, m2);
  if (r1 < 0 || m1 <= 0) return;
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    if (tier_margin(b, r, n, prices) >= m1 - b.p.eps) join(r);
  }
}

/// A jump's step on row g: held bids below the row's new price (`rise`
/// above its price) rise to it, never above (a held bid must stay at or
/// below what its holder would bid now, or the price could later climb
/// past a holder's value); equal bids may reorder the heap by node, so it
/// is rebuilt; the price follows.
PLACER_HD inline void tier_lift(tier_buffers const& b, std::int32_t g, std::int64_t rise, std::int64_t* prices) {
  std::int64_t* hb = b.heap_bid + b.heap_begin[g];
  std::int32_t* hn = b.heap_node + b.heap_begin[g];
  std::int32_t const held = b.held[g];
  std::int64_t const to = prices[g] + rise;
  for (std::int32_t i = 0; i < held; ++i) hb[i] = max_of(hb[i], to);
  for (std::int32_t i = held / 2 - 1; i >= 0; --i) tier_sift_down(hb, hn, held, i, hb[i], hn[i]);
  prices[g] = tier_price(b, g);
}

/// A price jump over a set of full rows (rank 0, between rounds; the
/// bidders of the next round are todo[list], its prices half `list`).
///
/// When a few nodes are left bidding for near-equal full rows, forward
/// bidding raises those rows one increment a round, each bid displacing a
/// holder that bids on the next row: thousands of rounds when the rows
/// must climb far (rows whose preference doubles their values on a few
/// nodes). The jump does that climb in a few steps, as the Hungarian
/// method's dual step does. G starts as the rows the bidders want (within
/// eps of their best). A step closes G over its holders (a row within eps
/// of a holder's margin joins); if every row of G is full, all of G's
/// prices rise by the largest amount that keeps every holder of G within
/// eps of its best margin outside G (or of sitting out, 0). After a step
/// the holder that bound it is within eps of a row outside G, which joins
/// at the next; the steps end when G reaches a row with an unheld copy
/// (the bidders' path ends there), a holder bound by sitting out, or after
/// rows + 1 steps. G only grows: two rows that bind each other rise
/// together instead of taking turns.
///
/// Rows of G rise together, so a holder's preferences within G do not
/// change; rows outside G do not move, so their holders only gain; nodes
/// that sit out only lose margin. Every assignment condition the program's
/// optimality rests on holds after a step as before it, so the jump changes
/// how fast the prices get there, not what they certify. Returns whether
/// the prices rose.
PLACER_HD inline bool tier_jump(tier_buffers const& b, std::int32_t list) {
  auto const& p = b.p;
  std::int32_t const n_rows = p.n_rows;
  std::int64_t* prices = tier_prices(b, list);
  std::int32_t* in = b.jump_rows;             // 1 = row in G
  std::int32_t* queue = b.jump_rows + n_rows;  // G's rows, in the order they joined
  std::int32_t size = 0;
  for (std::int32_t r = 0; r < n_rows; ++r) in[r] = 0;
  auto join = [&](std::int32_t r) {
    if (in[r] == 0) {
      in[r] = 1;
      queue[size++] = r;
    }
  };
  // The rows each bidder wants: its best and those within eps of it.
  std::int32_t const* todo = b.todo[list];
  std::int32_t const k = b.ctl->todo_count[list];
  for (std::int32_t i = 0; i < k; ++i) tier_wanted(b, todo[i], prices, join);
  bool raised = false;
  for (std::int32_t step = 0; step <= n_rows && size > 0; ++step) {
    // G closed over its holders, at this step's prices.
    for (std::int32_t at = 0; at < size; ++at) {
      std::int32_t const g = queue[at];
      if (b.quota[g] == 0 || b.held[g] < b.quota[g]) return raised;
      std::int32_t const* hn = b.heap_node + b.heap_begin[g];
      for (std::int32_t i = 0; i < b.held[g]; ++i) {
        std::int64_t const own = tier_margin(b, g, hn[i], prices);
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0 && tier_margin(b, r, hn[i], prices) >= own - p.eps) join(r);
        }
      }
    }
    // The rise: the least slack of G's holders against the rows outside G.
    std::int64_t rise = tier_closed;
    for (std::int32_t at = 0; at < size; ++at) {
      std::int32_t const g = queue[at];
      std::int32_t const* hn = b.heap_node + b.heap_begin[g];
      for (std::int32_t i = 0; i < b.held[g]; ++i) {
        std::int64_t alt = 0;
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0) alt = max_of(alt, tier_margin(b, r, hn[i], prices));
        }
        rise = min_of(rise, tier_margin(b, g, hn[i], prices) - alt + p.eps);
      }
    }
    if (rise <= p.eps) return raised;  // no more than a round would do
    for (std::int32_t at = 0; at < size; ++at) tier_lift(b, queue[at], rise, prices);
    raised = true;
  }
  return raised;
}

/// tier_jump by the whole team (Team::team_wide): on one GPU thread its
/// loops over G's holders and the rows took 2.4 ms of the 10k round and
/// 9.2 ms of openb's on an H100. The same steps and the same prices: G is
/// a set (the order in which tier_jump's worklist met its rows changes
/// nothing), closed over its holders by sweeps until one adds no row (a
/// sweep reads G and marks joiners apart, `jump_rows`' second half; they
/// join after a barrier); the step stops where G has a row with an unheld
/// copy; the rise is the least slack over G's holders (fetch_min); each
/// row of G lifts and rebuilds its own heap. Sets ctl->jump_raised; ends
/// at a barrier.
template <class Team>
PLACER_HD void tier_jump_team(Team& t, tier_buffers const& b, std::int32_t list) {
  auto const& p = b.p;
  std::int32_t const n_rows = p.n_rows;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  tier_control* const ctl = b.ctl;
  std::int64_t* prices = tier_prices(b, list);
  std::int32_t* in = b.jump_rows;            // 1 = row in G
  std::int32_t* add = b.jump_rows + n_rows;  // 1 = row joins G after this sweep
  for (std::int32_t r = me; r < n_rows; r += team) {
    in[r] = 0;
    add[r] = 0;
  }
  if (me == 0) {
    ctl->jump_raised = 0;
    ctl->jump_changed[0] = ctl->jump_changed[1] = 0;
  }
  t.sync();
  // The rows each bidder wants: its best and those within eps of it.
  std::int32_t const* todo = b.todo[list];
  std::int32_t const k = ctl->todo_count[list];
  for (std::int32_t i = me; i < k; i += team) {
    tier_wanted(b, todo[i], prices, [&](std::int32_t r) { t.fetch_max(in + r, 1); });
  }
  t.sync();
  std::int32_t sweep = 0;  // every worker counts the same sweeps
  for (std::int32_t step = 0; step <= n_rows; ++step) {
    // G closed over its holders, at this step's prices.
    while (true) {
      std::int32_t* changed = ctl->jump_changed + sweep % 2;
      for (std::int32_t g = 0; g < n_rows; ++g) {
        if (in[g] == 0) continue;
        std::int32_t const* hn = b.heap_node + b.heap_begin[g];
        for (std::int32_t i = me; i < b.held[g]; i += team) {
          std::int64_t const own = tier_margin(b, g, hn[i], prices);
          for (std::int32_t r = 0; r < n_rows; ++r) {
            if (in[r] == 0 && tier_margin(b, r, hn[i], prices) >= own - p.eps) t.fetch_max(add + r, 1);
          }
        }
      }
      t.sync();
      // Every worker has read the other flag (after the last sweep's
      // barrier), so rank 0 may clear it for the next sweep.
      if (me == 0) ctl->jump_changed[1 - sweep % 2] = 0;
      for (std::int32_t r = me; r < n_rows; r += team) {
        if (add[r] != 0) {
          in[r] = 1;
          add[r] = 0;
          t.fetch_max(changed, 1);
        }
      }
      t.sync();
      ++sweep;
      if (*changed == 0) break;
    }
    if (me == 0) {
      ctl->jump_any = 0;
      ctl->jump_stop = 0;
      ctl->jump_rise = tier_closed;
    }
    t.sync();
    // A row of G with an unheld copy ends the bidders' path: no step. Else
    // the rise: the least slack of G's holders against the rows outside G.
    for (std::int32_t r = me; r < n_rows; r += team) {
      if (in[r] == 0) continue;
      t.fetch_max(&ctl->jump_any, 1);
      if (b.quota[r] == 0 || b.held[r] < b.quota[r]) t.fetch_max(&ctl->jump_stop, 1);
    }
    std::int64_t rise = tier_closed;
    for (std::int32_t g = 0; g < n_rows; ++g) {
      if (in[g] == 0) continue;
      std::int32_t const* hn = b.heap_node + b.heap_begin[g];
      for (std::int32_t i = me; i < b.held[g]; i += team) {
        std::int64_t alt = 0;
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (in[r] == 0) alt = max_of(alt, tier_margin(b, r, hn[i], prices));
        }
        rise = min_of(rise, tier_margin(b, g, hn[i], prices) - alt + p.eps);
      }
    }
    if (rise < tier_closed) t.fetch_min(&ctl->jump_rise, rise);
    t.sync();
    if (ctl->jump_any == 0 || ctl->jump_stop != 0 || ctl->jump_rise <= p.eps) break;
    rise = ctl->jump_rise;
    for (std::int32_t g = me; g < n_rows; g += team) {
      if (in[g] != 0) tier_lift(b, g, rise, prices);
    }
    if (me == 0) ctl->jump_raised = 1;
    t.sync();
  }
}

/// Commits one replica of class c on node n (it fits: the cell was
/// feasible and the node takes one replica this iteration) and returns the
/// GPUs it took as a bit mask.
PLACER_HD inline std::uint64_t tier_commit(tier_buffers const& b, std::int32_t c, std::int32_t n) {
  auto const& p = b.p;
  std::uint64_t taken = 0;
  take_replica(p.nodes, p.classes, c, n, p.gpu_free, p.cpu_free, p.mem_free, taken);
  return taken;
}

/// The cells of live classes that are stale on a node (stamp >= fresh).
struct tier_stale {
  std::uint8_t const* live;
  std::int32_t const* fresh;
  std::int32_t stamp;
  PLACER_HD bool operator()(std::int32_t, std::int32_t c) const {
    return (live == nullptr || live[c] != 0) && stamp >= fresh[c];
  }
};

/// The cells of rows that still have copies to place after this
/// iteration's held ones (the rows the next iteration reads).
struct tier_open {
  std::int32_t const* remaining;
  std::int32_t const* held;
  PLACER_HD bool operator()(std::int32_t r, std::int32_t) const { return remaining[r] > held[r]; }
};

/// The twin node n copies its refreshed cells from, or -1 (it re-scores its
/// own): its label's node when that is the root of its label (labelled
/// itself, so it re-scores its own) and in the same state.
PLACER_HD inline std::int32_t tier_twin(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  if (p.state == nullptr) return -1;
  std::int32_t const l = p.state[n];
  return l != n && p.state[l] == l && node_state_equal(p.nodes, n, l) ? l : -1;
}

/// The refresh of node n's stale cells of the live classes
/// (tier_problem::stamp), in two passes over the nodes with a barrier
/// between: pass 0 re-scores the nodes that have no twin to copy from (the
/// roots of labels among them), pass 1 copies the twins'. `oldest` is the
/// least fresh of the live classes: a node stamped before it has nothing
/// stale.
PLACER_HD inline void tier_refresh(tier_buffers const& b, std::int32_t n, std::int32_t pass, std::int32_t oldest) {
  auto const& p = b.p;
  if (p.stamp[n] < oldest) return;
  std::int32_t const twin = tier_twin(b, n);
  tier_stale const stale{p.live_class, p.fresh, p.stamp[n]};
  if (pass == 0 && twin < 0) {
    score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_column(n, p.scores, nullptr, p.classes.n_classes, stale);
  } else if (pass == 1 && twin >= 0) {
    for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
      if (!stale(c, c)) continue;
      std::int64_t const row = static_cast<std::int64_t>(c) * p.nodes.n_nodes;
      p.scores[row + n] = p.scores[row + twin];
    }
  }
}

/// The refresh of one stale cell, class c on node n, for a team that
/// splits a refresh by cell (tier_program): pass 0 scores it where n has
/// no twin to copy from, pass 1 copies the twin's. The same values as
/// tier_refresh (op.score of a cell equals the column's).
PLACER_HD inline void tier_refresh_cell(tier_buffers const& b, std::int32_t n, std::int32_t c, std::int32_t pass,
                                        std::int32_t oldest) {
  auto const& p = b.p;
  if (p.stamp[n] < oldest || !tier_stale{p.live_class, p.fresh, p.stamp[n]}(c, c)) return;
  std::int32_t const twin = tier_twin(b, n);
  std::int64_t const row = static_cast<std::int64_t>(c) * p.nodes.n_nodes;
  if (pass == 0 && twin < 0) {
    p.scores[row + n] = score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score(c, n);
  } else if (pass == 1 && twin >= 0) {
    p.scores[row + n] = p.scores[row + twin];
  }
}

/// Re-scores node n's cells of the open rows after a commit.
PLACER_HD inline void tier_rescore(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  score_cell_op{p.nodes, p.classes, p.tasks, p.params}.score_column(n, p.scores, p.row_class, p.n_rows,
                                                                    tier_open{b.remaining, b.held});
}

/// Row r's winners grouped by state label (one worker per row): sets
/// bid_row[n] of each to the first (lowest) winner with its label, its
/// group's leader. The row's stretch of `select` (N entries, labels are
/// node indices) is the map from label to leader; only the entries of the
/// winners' labels are written and read.
PLACER_HD inline void tier_group(tier_buffers const& b, std::int32_t r) {
  std::int32_t const* hn = b.heap_node + b.heap_begin[r];
  std::int32_t* leader = b.select + static_cast<std::int64_t>(r) * b.p.nodes.n_nodes;
  std::int32_t const held = b.held[r];
  for (std::int32_t i = 0; i < held; ++i) leader[b.p.state[hn[i]]] = hn[i];
  for (std::int32_t i = 0; i < held; ++i) {
    std::int32_t& l = leader[b.p.state[hn[i]]];
    l = min_of(l, hn[i]);
  }
  for (std::int32_t i = 0; i < held; ++i) b.bid_row[hn[i]] = leader[b.p.state[hn[i]]];
}

/// tier_group for every row by the whole team (Team::team_wide): each
/// winner's label entry set high, then lowered to the least winner with
/// the label (fetch_max, fetch_min), then read. Ends at a barrier.
template <class Team>
PLACER_HD void tier_group_team(Team& t, tier_buffers const& b) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  for (std::int32_t step = 0; step < 3; ++step) {
    for (std::int32_t r = 0; r < n_rows; ++r) {
      std::int32_t const* hn = b.heap_node + b.heap_begin[r];
      std::int32_t* leader = b.select + static_cast<std::int64_t>(r) * n_nodes;
      for (std::int32_t i = t.rank(); i < b.held[r]; i += t.size()) {
        std::int32_t* l = leader + b.p.state[hn[i]];
        if (step == 0) t.fetch_max(l, n_nodes);
        if (step == 1) t.fetch_min(l, hn[i]);
        if (step == 2) b.bid_row[hn[i]] = *l;
      }
    }
    t.sync();
  }
}

/// After the leaders have re-scored: winner n copies its leader's cells of
/// the open rows when their states are equal (else re-scores its own) and
/// takes the label of the state it is in now.
PLACER_HD inline void tier_follow(tier_buffers const& b, std::int32_t n) {
  auto const& p = b.p;
  std::int32_t const from = b.bid_row[n];
  if (from == n || !node_state_equal(p.nodes, n, from)) {
    if (from != n) tier_rescore(b, n);
    p.state[n] = n;
    return;
  }
  tier_open const open{b.remaining, b.held};
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    if (!open(r, p.row_class[r])) continue;
    std::int64_t const row = static_cast<std::int64_t>(p.row_class[r]) * p.nodes.n_nodes;
    p.scores[row + n] = p.scores[row + from];
  }
  p.state[n] = from;
}

/// A round's offers by the whole team (Team::team_wide): on the GPU a
/// row's offers are a chain of heap steps on one thread (about 1 µs each
/// on an H100). What tier_offer leaves, whatever the order of the bids, is
/// known in closed form. A row's items are its new bids (value x, current)
/// and its holders (stored bid s, and v, the re-bid tier_rebid would make
/// at the round's prices, v >= s). Under a threshold key M, a holder whose
/// s lies below M has been challenged and re-bid (value v), the others keep
/// s; the row ends holding the items at or above M, its quota of them, where
/// M is the least M = f(M), f(M) being the quota-th best of the items so
/// valued: the heap's least held bid only rises, a holder can leave or fall
/// below it only after its re-bid, and none re-bids that need not. Each
/// item's key orders it strictly ((value - least) above the bits of
/// N - 1 - node); from M = -1 (nobody re-bid) the team finds f(M) with the
/// floors' radix search, again until M stays; the items at or above M fill
/// the heap (built a level at a time, one level's sift-downs in parallel),
/// the others go to the next list. A row with no more items than copies
/// keeps them all; one whose keys would not fit 62 bits, or whose M moves
/// more than tier_offer_most_steps times, keeps the serial offers. Marks
/// the rows it did (offer_row round = this round); ends at a barrier.
inline constexpr std::int32_t tier_offer_most_steps = 16;
template <class Team>
PLACER_HD void tier_offer_team(Team& t, tier_buffers const& b, std::int32_t list, std::int64_t const* prices) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  tier_control* const ctl = b.ctl;
  std::int32_t* next = b.todo[1 - list];
  std::int32_t const now = static_cast<std::int32_t>(ctl->rounds);
  std::int32_t const least = max_of(b.offer_team_least, 1);
  std::int32_t node_bits = 0;
  while ((std::int64_t{1} << node_bits) < n_nodes) ++node_bits;
  auto field = [&](std::int32_t r, tier_offer_field f) -> std::int64_t& { return b.offer_row[tier_offer_fields * r + f]; };
  auto mine = [&](std::int32_t r) { return field(r, tier_offer_round) == now; };
  auto key = [&](std::int32_t r, std::int64_t value, std::int32_t n) {
    return ((value - field(r, tier_offer_lo)) << node_bits) | static_cast<std::int64_t>(n_nodes - 1 - n);
  };
  std::int32_t* kept = b.floor_row;  // per row, the items kept (tier_floor_fields apart; free while bidding)
  // Item i of row r: its bucket's bids, then its holders (heap entries)
  // with their stored bids.
  auto raw = [&](std::int32_t r, std::int32_t i, std::int32_t& n, std::int64_t& value) {
    std::int32_t const bids = b.bid_count[r];
    if (i < bids) {
      n = b.bucket[b.bid_cursor[r] - bids + i];
      value = b.bid_value[n];
      return false;
    }
    std::int32_t const at = b.heap_begin[r] + i - bids;
    n = b.heap_node[at];
    value = b.heap_bid[at];
    return true;
  };
  // The same with a holder's value under the threshold key M: its re-bid
  // (in bid_value while it holds) when its stored bid lies below M.
  auto item = [&](std::int32_t r, std::int32_t i, std::int32_t& n, std::int64_t& value, bool& holder, bool& rebid) {
    holder = raw(r, i, n, value);
    rebid = holder && key(r, value, n) < field(r, tier_offer_pre_m);
    if (rebid) value = b.bid_value[n];
  };
  // The rows the team takes, listed in any order (each row's worker, the
  // one tier_round's serial offers give it, lists its own) with where its
  // items begin among all the listed rows' items (one fetch_add: the list
  // and the items' ranges in the same order). Every step below spreads
  // all the listed rows' items over the whole team at once (item_at), so a
  // step costs the sum of their items over the team, not a pass per row.
  // A row that leaves for the serial offers on the way is no longer mine().
  for (std::int32_t r = me; r < n_rows; r += team) {
    if (b.quota[r] <= 0 || b.bid_count[r] < least) continue;
    field(r, tier_offer_round) = now;
    field(r, tier_offer_lo) = tier_closed;
    field(r, tier_offer_hi) = -tier_closed;
    field(r, tier_offer_pre_m) = -1;  // nobody re-bid yet
    kept[tier_floor_fields * r] = 0;
    std::int32_t const items = b.bid_count[r] + b.held[r];
    std::int64_t const slot = t.fetch_add(&ctl->offer_slots, (std::int64_t{1} << 32) + items);
    b.offer_rows[slot >> 32] = r;
    b.offer_begin[slot >> 32] = static_cast<std::int32_t>(slot & 0xffffffff);
  }
  if (me == 0) {
    ctl->offer_passes = 0;
    ctl->offer_moved[0] = ctl->offer_moved[1] = 0;
    ctl->offer_most_held = 0;
  }
  t.sync();
  auto const taken = static_cast<std::int32_t>(ctl->offer_slots >> 32);
  auto const total = static_cast<std::int32_t>(ctl->offer_slots & 0xffffffff);
  if (taken == 0) return;
  std::int32_t const* rows = b.offer_rows;
  std::int32_t const* begin = b.offer_begin;
  // Item g of all: j, the listed row holding it (the last whose items begin
  // at or before g; a worker's g only grows, so the search starts at its
  // last j), and its index i in that row.
  auto item_at = [&](std::int32_t g, std::int32_t& j) {
    std::int32_t hi = taken - 1;
    while (j < hi) {
      std::int32_t const mid = (j + hi + 1) / 2;
      if (begin[mid] <= g) {
        j = mid;
      } else {
        hi = mid - 1;
      }
    }
    return g - begin[j];
  };
  // f(r, i) for every listed row r's item i, a worker's share of them all.
  auto each_item = [&](auto const& f) {
    std::int32_t j = 0;
    for (std::int32_t g = me; g < total; g += team) {
      std::int32_t const i = item_at(g, j);
      f(rows[j], i);
    }
  };
  // The holders' re-bids (in bid_value: a holder does not bid), and each
  // row's least and largest value (a worker's run of one row's items at once).
  {
    std::int32_t run_row = -1;
    std::int64_t least_value = tier_closed, most = -tier_closed;
    auto flush = [&] {
      if (run_row < 0) return;
      if (least_value < tier_closed) t.fetch_min(&field(run_row, tier_offer_lo), least_value);
      if (most > -tier_closed) t.fetch_max(&field(run_row, tier_offer_hi), most);
      least_value = tier_closed;
      most = -tier_closed;
    };
    each_item([&](std::int32_t r, std::int32_t i) {
      if (r != run_row) {
        flush();
        run_row = r;
      }
      std::int32_t n;
      std::int64_t value;
      if (raw(r, i, n, value)) {
        std::int64_t const v = tier_rebid(b, n, r, prices);
        b.bid_value[n] = v;
        most = max_of(most, v);
      }
      least_value = min_of(least_value, value);
      most = max_of(most, value);
    });
    flush();
  }
  t.sync();
  for (std::int32_t j = me; j < taken; j += team) {
    std::int32_t const r = rows[j];
    std::int64_t const spread = field(r, tier_offer_hi) - field(r, tier_offer_lo);
    if (spread >= (std::int64_t{1} << (62 - node_bits))) {
      field(r, tier_offer_round) = -1;  // keys would not fit: the serial offers
      continue;
    }
    field(r, tier_offer_searching) = 0;  // M stays -1: every item kept ...
    if (b.bid_count[r] + b.held[r] <= b.quota[r]) continue;  // ... when they all fit
    std::int64_t const top = (spread << node_bits) | ((std::int64_t{1} << node_bits) - 1);
    std::int32_t shift = 0;
    while ((top >> shift) >= 256) ++shift;
    field(r, tier_offer_shift) = shift;
    field(r, tier_offer_searching) = 1;
    t.fetch_max(&ctl->offer_passes, (shift + 15) / 8);
  }
  t.sync();
  std::int32_t const passes = ctl->offer_passes;
  // M = f(M) from M = -1: a search of the quota-th best key per step.
  for (std::int32_t step = 0; passes > 0; ++step) {
    std::int32_t* moved = ctl->offer_moved + step % 2;
    for (std::int32_t j = me; j < taken; j += team) {
      std::int32_t const r = rows[j];
      field(r, tier_offer_at) = 0;
      if (!mine(r) || field(r, tier_offer_searching) == 0) continue;
      field(r, tier_offer_want) = b.quota[r];
      field(r, tier_offer_pre) = 0;
      field(r, tier_offer_at) = field(r, tier_offer_shift) + 8;
    }
    t.sync();
    for (std::int32_t pass = 0; pass < passes; ++pass) {
      tier_digit_runs<Team> runs{t, nullptr};
      each_item([&](std::int32_t r, std::int32_t i) {
        if (field(r, tier_offer_at) <= 0) return;
        std::int32_t n;
        std::int64_t value;
        bool holder, rebid;
        item(r, i, n, value, holder, rebid);
        std::int32_t const d = tier_digit(key(r, value, n), field(r, tier_offer_pre), field(r, tier_offer_at));
        if (d >= 0) runs.add(b.floor_hist + 256 * r, d);
      });
      runs.flush();
      t.sync();
      for (std::int32_t j = me; j < taken; j += team) {
        std::int32_t const r = rows[j];
        if (field(r, tier_offer_at) <= 0) continue;
        tier_radix_step(b.floor_hist + 256 * r, field(r, tier_offer_want), field(r, tier_offer_pre),
                        field(r, tier_offer_at));
      }
      t.sync();
    }
    // Every worker has read the other flag (before the last barrier).
    if (me == 0) ctl->offer_moved[1 - step % 2] = 0;
    for (std::int32_t j = me; j < taken; j += team) {
      std::int32_t const r = rows[j];
      if (!mine(r) || field(r, tier_offer_searching) == 0) continue;
      std::int64_t const m = field(r, tier_offer_pre);  // f(M): the search's key
      if (m == field(r, tier_offer_pre_m)) {
        field(r, tier_offer_searching) = 0;  // M = f(M)
      } else if (step + 1 >= tier_offer_most_steps) {
        field(r, tier_offer_round) = -1;  // the serial offers
        field(r, tier_offer_searching) = 0;
      } else {
        field(r, tier_offer_pre_m) = m;
        t.fetch_max(moved, 1);
      }
    }
    t.sync();
    if (*moved == 0) break;
  }
  // The items at or above M are held, in any order (their nodes in the
  // row's stretch of `select`, their values in bid_value); the others lose.
  each_item([&](std::int32_t r, std::int32_t i) {
    if (!mine(r)) return;
    std::int32_t n;
    std::int64_t value;
    bool holder, rebid;
    item(r, i, n, value, holder, rebid);
    if (!holder || rebid) b.bid_round[n] = now;
    if (key(r, value, n) >= field(r, tier_offer_pre_m)) {
      b.bid_value[n] = value;
      b.select[static_cast<std::int64_t>(r) * n_nodes + t.fetch_add(kept + tier_floor_fields * r, 1)] = n;
    } else {
      next[t.fetch_add(&ctl->todo_count[1 - list], 1)] = n;
    }
  });
  t.sync();
  for (std::int32_t j = me; j < taken; j += team) {
    std::int32_t const r = rows[j];
    if (!mine(r)) continue;
    b.held[r] = kept[tier_floor_fields * r];
    t.fetch_max(&ctl->offer_most_held, b.held[r]);
  }
  t.sync();
  // A row keeps no more items than it has: its kept ones go to its heap.
  each_item([&](std::int32_t r, std::int32_t i) {
    if (!mine(r) || i >= b.held[r]) return;
    std::int32_t const n = b.select[static_cast<std::int64_t>(r) * n_nodes + i];
    b.heap_node[b.heap_begin[r] + i] = n;
    b.heap_bid[b.heap_begin[r] + i] = b.bid_value[n];
  });
  t.sync();
  // The heaps, a level at a time from the deepest parents up, a row after
  // another (a level's parents are fewer than the items: spreading them
  // all would cost more where the levels are narrow).
  std::int32_t const most_held = ctl->offer_most_held;
  std::int32_t level = 0;
  while ((2 << level) - 1 < most_held / 2) ++level;  // the deepest level with a parent
  for (; level >= 0; --level) {
    for (std::int32_t j = 0; j < taken; ++j) {
      std::int32_t const r = rows[j];
      if (!mine(r)) continue;
      std::int32_t const held = b.held[r];
      std::int64_t* hb = b.heap_bid + b.heap_begin[r];
      std::int32_t* hn = b.heap_node + b.heap_begin[r];
      std::int32_t const end = min_of((2 << level) - 1, held / 2);
      for (std::int32_t i = (1 << level) - 1 + me; i < end; i += team) tier_sift_down(hb, hn, held, i, hb[i], hn[i]);
    }
    t.sync();
  }
  if (me == 0) ctl->offer_slots = 0;  // every worker read it before the last barrier
}

/// Round 0 of a pass bids from the nodes with a positive margin on some
/// row at its floor (tier_bid: value >= price), listed in todo[0]. The
/// others would sit the whole pass out (prices only rise), and most nodes
/// do: at 100k, 2,239 of 12,800 bid in the fractional tier. Finding them
/// is one streaming pass over the open rows' cells (todo[1], free until
/// round 0 lists its losers, holds a mark per node), not a bid's search
/// for the best and second-best row on every node. Ends at a barrier.
template <class Team>
PLACER_HD void tier_first_bidders(Team& t, tier_buffers const& b) {
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  std::int64_t const* prices = tier_prices(b, 0);
  if (me == 0) b.ctl->passes += 1;  // read after the barrier below
  std::int32_t* __restrict__ mark = b.todo[1];
  for (std::int32_t n = me; n < n_nodes; n += team) mark[n] = 0;
  for (std::int32_t r = 0; r < b.p.n_rows; ++r) {
    // value + 1 - price > 0 on a feasible cell (value >= 0): value >= least.
    std::int64_t const least = max_of<std::int64_t>(prices[r], 0);
    if (b.quota[r] == 0 || least > INT32_MAX) continue;
    std::int32_t const at = static_cast<std::int32_t>(least);
    std::int32_t const* __restrict__ cell = b.p.scores + static_cast<std::int64_t>(b.p.row_class[r]) * n_nodes;  // tier_value
    for (std::int32_t n = me; n < n_nodes; n += team) mark[n] |= static_cast<std::int32_t>(cell[n] >= at);
  }
  for (std::int32_t n = me; n < n_nodes; n += team) {
    if (mark[n] != 0) b.todo[0][t.fetch_add(&b.ctl->todo_count[0], 1)] = n;
  }
  t.sync();
}

/// One bidding round over the nodes in todo[list] (four barriers): each
/// bids for its best row; the bids are bucketed by row; each row keeps its
/// best and sends the losers to the other list; the prices follow.
template <class Team>
PLACER_HD void tier_round(Team& t, tier_buffers const& b, std::int32_t list, tier_clock& clk) {
  std::int32_t const n_rows = b.p.n_rows;
  tier_control* const ctl = b.ctl;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  std::int32_t const* todo = b.todo[list];
  std::int32_t* next = b.todo[1 - list];
  std::int64_t const* prices = tier_prices(b, list);
  std::int64_t* next_prices = tier_prices(b, 1 - list);
  std::int32_t const k = ctl->todo_count[list];
  for (std::int32_t i = me; i < k; i += team) {
    std::int32_t const n = todo[i];
    std::int32_t row = -1;
    std::int64_t bid = 0;
    b.bid_row[n] = tier_bid(b, n, prices, row, bid) ? row : -1;
    b.bid_value[n] = bid;
    if (row >= 0) t.fetch_add(&b.bid_count[row], 1);
  }
  t.sync();
  clk.lap(tier_phase_bid);
  if (me == 0) {
    std::int32_t at = 0;  // buckets: exclusive scan of the counts
    for (std::int32_t r = 0; r < n_rows; ++r) {
      b.bid_cursor[r] = at;
      at += b.bid_count[r];
    }
    ctl->todo_count[1 - list] = 0;
    ctl->rounds += 1;
  }
  t.sync();
  clk.lap(tier_phase_scan);
  for (std::int32_t i = me; i < k; i += team) {
    std::int32_t const n = todo[i];
    if (b.bid_row[n] >= 0) b.bucket[t.fetch_add(&b.bid_cursor[b.bid_row[n]], 1)] = n;
  }
  t.sync();
  clk.lap(tier_phase_bucket);
  if (t.team_wide) tier_offer_team(t, b, list, prices);
  // Each row takes its bids (the bucket ends at its cursor); the losers
  // bid again next round.
  for (std::int32_t r = me; r < n_rows; r += team) {
    std::int32_t const end = b.bid_cursor[r];
    bool const done = t.team_wide && b.offer_row[tier_offer_fields * r + tier_offer_round] == ctl->rounds;
    for (std::int32_t i = done ? end : end - b.bid_count[r]; i < end; ++i) {
      std::int32_t const n = b.bucket[i];
      std::int32_t const lost = tier_offer(b, r, n, b.bid_value[n], prices);
      if (lost >= 0) next[t.fetch_add(&ctl->todo_count[1 - list], 1)] = lost;
    }
    next_prices[r] = b.bid_count[r] > 0 ? tier_price(b, r) : prices[r];
    b.bid_count[r] = 0;
  }
  t.sync();
  clk.lap(tier_phase_offer);
}

template <class Team>
PLACER_HD void tier_program(Team& t, tier_buffers const& b) {
  auto const& p = b.p;
  std::int32_t const n_nodes = p.nodes.n_nodes;
  std::int32_t const n_rows = p.n_rows;
  tier_control* const ctl = b.ctl;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  tier_clock clk(ctl, me == 0);
  for (std::int32_t r = me; r < n_rows; r += team) {
    b.remaining[r] = p.demand[r];
    b.offer_row[tier_offer_fields * r + tier_offer_round] = -1;  // fresh in no round yet
  }
  for (std::int32_t n = me; n < n_nodes; n += team) {
    b.won_row[n] = -1;
    b.bid_round[n] = -1;
    b.bid_pass[n] = -1;
  }
  // --- the live classes' stale cells, before anything reads them: a node
  // changed since is re-scored once, however often it changed.
  std::int32_t oldest = p.now + 1;
  for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
    if (p.live_class == nullptr || p.live_class[c] != 0) oldest = min_of(oldest, p.fresh[c]);
  }
  std::int32_t const candidates = p.changed != nullptr ? p.n_changed : n_nodes;
  auto const candidate = [&](std::int32_t i) { return p.changed != nullptr ? p.changed[i] : i; };
  if (t.team_wide && candidates <= b.refresh_cells_below) {
    // Few nodes (most tiers after a chain's first: 51 a tier at 10k): a
    // worker per cell, not per column, so the CTA's idle workers share the
    // columns (a cell recomputes what a column shares, its node's F before
    // and a shape's F after). The device twin takes the same path.
    std::int32_t const n_classes = p.classes.n_classes;
    for (std::int32_t pass = 0; pass < 2; ++pass) {
      for (std::int32_t i = me; i < candidates * n_classes; i += team) {
        tier_refresh_cell(b, candidate(i / n_classes), i % n_classes, pass, oldest);
      }
      t.sync();
    }
  } else {
    for (std::int32_t pass = 0; pass < 2; ++pass) {
      for (std::int32_t i = me; i < candidates; i += team) tier_refresh(b, candidate(i), pass, oldest);
      t.sync();
    }
  }
  if (me == 0) {
    for (std::int32_t c = 0; c < p.classes.n_classes; ++c) {
      if (p.live_class == nullptr || p.live_class[c] != 0) p.fresh[c] = p.now + 1;
    }
  }
  clk.lap(tier_phase_refresh);  // read after the next barrier
  while (true) {
    // --- a new iteration: floors from the current scores.
    if (me == 0) {
      std::int32_t copies = 0;
      for (std::int32_t r = 0; r < n_rows; ++r) {
        b.quota[r] = p.row_cap != nullptr ? min_of(b.remaining[r], p.row_cap[r]) : b.remaining[r];
        copies += b.quota[r];
      }
      ctl->placed_before = copies;  // the iteration's copies, for the floors
      ctl->iterations += 1;
    }
    t.sync();
    if (t.team_wide) {
      tier_floors_radix(t, b, ctl->placed_before);
    } else {
      for (std::int32_t r = me; r < n_rows; r += team) {
        b.floor[r] = b.quota[r] > 0 ? tier_floor(b, r, ctl->placed_before) : 0;
      }
    }
    std::int32_t rounds = 0;  // this iteration's bidding rounds
    bool again = false;
    do {
      // --- rows empty; every node that has a row to bid for bids.
      for (std::int32_t r = me; r < n_rows; r += team) {
        b.held[r] = 0;
        b.bid_count[r] = 0;
        tier_prices(b, 0)[r] = tier_price(b, r);  // round 0 reads half 0
      }
      if (me == 0) {
        ctl->todo_count[0] = 0;
        ctl->touched = 0;
      }
      t.sync();
      tier_first_bidders(t, b);
      clk.lap(tier_phase_floor);
      // The next round after which tier_jump is tried; the wait doubles
      // after a try that raised nothing (every worker keeps the same).
      std::int32_t jump_at = rounds + tier_jump_after;  // rounds: the iteration's, over its passes
      std::int32_t jump_wait = 1;
      // --- bidding rounds until no node bids (or the cap: max_rounds an
      // iteration; the assignment held then is feasible).
      for (std::int32_t list = 0;; list = 1 - list) {
        std::int32_t const bidders = ctl->todo_count[list];
        if (bidders < t.solo_below()) {
          if (me == 0) {
            seq_team one;
            tier_round(one, b, list, clk);
          }
          t.sync();
        } else {
          tier_round(t, b, list, clk);
        }
        ++rounds;
        std::int32_t const next = ctl->todo_count[1 - list];
        if (next == 0 || rounds >= p.max_rounds) {
          if (me == 0 && next != 0) ctl->round_cap_hit = 1;
          break;
        }
        if (rounds >= jump_at && next >= bidders) {
          if (t.team_wide) {
            tier_jump_team(t, b, 1 - list);
          } else {
            if (me == 0) ctl->jump_raised = tier_jump(b, 1 - list) ? 1 : 0;
            t.sync();
          }
          clk.lap(tier_phase_jump);
          jump_wait = ctl->jump_raised != 0 ? 1 : min_of(2 * jump_wait, tier_jump_most_wait);
          jump_at = rounds + jump_wait;
        }
      }
      // --- a row left unfilled above a zero floor breaks the complementary
      // slackness the optimum needs (an unheld copy must cost nothing): its
      // floor goes to 0 and the iteration bids again (at most once per row).
      if (me == 0) {
        ctl->again = 0;
        for (std::int32_t r = 0; r < n_rows; ++r) {
          if (b.held[r] < b.quota[r] && b.floor[r] > 0) {
            b.floor[r] = 0;
            ctl->again = 1;
          }
        }
      }
      t.sync();
      again = ctl->again != 0;
      t.sync();  // everyone has read it before rank 0 moves the control again
      clk.lap(tier_phase_again);
    } while (again);
    // --- commit every held copy (each on its own node) and re-score. The
    // winners listed a row per worker, or on a team_wide team by all
    // workers row after row.
    for (std::int32_t r = t.team_wide ? 0 : me; r < n_rows; r += t.team_wide ? 1 : team) {
      std::int32_t const* hn = b.heap_node + b.heap_begin[r];
      for (std::int32_t i = t.team_wide ? me : 0; i < b.held[r]; i += t.team_wide ? team : 1) {
        b.won[t.fetch_add(&ctl->touched, 1)] = hn[i];
        b.won_row[hn[i]] = r;
      }
    }
    t.sync();
    std::int32_t const touched = ctl->touched;
    std::int32_t const base = ctl->placed;
    std::int32_t const iteration = ctl->iterations - 1;
    for (std::int32_t i = me; i < touched; i += team) {
      std::int32_t const n = b.won[i];
      std::int32_t const r = b.won_row[n];
      tier_placement& o = b.out[base + i];
      o.node = n;
      o.row = r;
      o.iteration = iteration;
      o.gpus = tier_commit(b, p.row_class[r], n);
      p.stamp[n] = p.now + 1;
      b.won_row[n] = -1;
    }
    // Re-scoring the open rows' cells: with state labels, one column per
    // (label, row) group and copies (the first bidding wave puts whole
    // groups of twins on one row).
    bool const grouped = p.state != nullptr;
    if (grouped && t.team_wide) {
      tier_group_team(t, b);
    } else if (grouped) {
      for (std::int32_t r = me; r < n_rows; r += team) tier_group(b, r);
    }
    t.sync();
    clk.lap(tier_phase_commit);
    for (std::int32_t i = me; i < touched; i += team) {
      if (!grouped || b.bid_row[b.won[i]] == b.won[i]) tier_rescore(b, b.won[i]);
    }
    t.sync();
    if (grouped) {
      for (std::int32_t i = me; i < touched; i += team) tier_follow(b, b.won[i]);
      t.sync();
    }
    clk.lap(tier_phase_rescore);
    if (me == 0) {
      std::int32_t left = 0;
      for (std::int32_t r = 0; r < n_rows; ++r) {
        b.remaining[r] -= b.held[r];
        left += b.remaining[r];
      }
      ctl->placed += touched;
      ctl->done = touched == 0 || left == 0 || ctl->iterations >= p.max_iterations ? 1 : 0;
    }
    t.sync();
    clk.lap(tier_phase_close);
    if (ctl->done != 0) break;
  }
  clk.stop();
}

/// The tiers of a chain one after another (tier_chain): tier k + 1 starts
/// from what tier k left, its refresh candidates the nodes tier k
/// committed, listed once each by rank 0 (at most the tier's copies).
template <class Team>
PLACER_HD void tier_chain_program(Team& t, tier_chain const& c) {
  if (c.n_tiers > 1) {
    for (std::int32_t n = t.rank(); n < c.tiers[0].nodes.n_nodes; n += t.size()) c.listed[n] = -1;
  }
  for (std::int32_t k = 0; k < c.n_tiers; ++k) {
    tier_buffers b = c.work;
    b.p = c.tiers[k];
    b.heap_begin = c.heap_begin + c.heap_at[k];
    b.ctl = c.ctl + k;
    b.out = c.out + c.out_at[k];
    if (k > 0 && t.team_wide) {
      // Every worker lists its share: a node's first claim (fetch_max of
      // its listed tier) adds it. The candidates' order is free: each
      // re-scores its own column.
      tier_clock clk(b.ctl, t.rank() == 0);
      if (t.rank() == 0) *c.n_candidates = 0;
      t.sync();
      tier_placement const* prev = c.out + c.out_at[k - 1];
      for (std::int32_t i = t.rank(); i < c.ctl[k - 1].placed; i += t.size()) {
        std::int32_t const n = prev[i].node;
        if (t.fetch_max(c.listed + n, k) < k) c.candidates[t.fetch_add(c.n_candidates, 1)] = n;
      }
      t.sync();
      clk.lap(tier_phase_list);
      clk.stop();
      b.p.changed = c.candidates;
      b.p.n_changed = *c.n_candidates;
    } else if (k > 0) {
      tier_clock clk(b.ctl, t.rank() == 0);
      if (t.rank() == 0) {
        tier_placement const* prev = c.out + c.out_at[k - 1];
        std::int32_t listed = 0;
        for (std::int32_t i = 0; i < c.ctl[k - 1].placed; ++i) {
          std::int32_t const n = prev[i].node;
          if (c.listed[n] == k) continue;
          c.listed[n] = k;
          c.candidates[listed++] = n;
        }
        *c.n_candidates = listed;
      }
      t.sync();
      clk.lap(tier_phase_list);
      clk.stop();
      b.p.changed = c.candidates;
      b.p.n_changed = *c.n_candidates;
    }
    tier_program(t, b);  // ends at a barrier
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
