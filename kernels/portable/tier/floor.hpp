#pragma once
// Floors: each row's (copies+1)-th best value at an iteration's start.
// tier_floor is a worker per row (the CPU backend); tier_floors_radix the
// whole team at once (the CUDA CTA and the device twin); tier_floor_cta a
// row a CTA of a grid; the same values.

#include "buffers.hpp"
#include "radix.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

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

/// A worker's share of a row's cells (rank, rank + size, ...): the feasible
/// ones counted and their largest value, added to the row's floor_row.
template <class Team>
PLACER_HD void tier_floor_count_pass(Team& t, std::int32_t const* row, std::int32_t n_nodes, std::int32_t* f) {
  std::int32_t count = 0;
  std::int32_t hi = 0;
  for (std::int32_t n = t.rank(); n < n_nodes; n += t.size()) {
    count += row[n] >= 0 ? 1 : 0;
    hi = max_of(hi, row[n]);
    t.work(1);
  }
  if (count > 0) t.fetch_add(f + tier_floor_count, count);
  if (hi > 0) t.fetch_max(f + tier_floor_hi, hi);
}

/// A row's radix search set up (floor_row fields): the wanted rank and the
/// bits to find, from the largest feasible value. Returns its steps.
PLACER_HD inline std::int32_t tier_floor_search(std::int32_t* f, std::int32_t copies) {
  std::int32_t shift = 0;
  while ((f[tier_floor_hi] >> shift) >= 256) ++shift;
  f[tier_floor_want] = copies + 1;
  f[tier_floor_at] = shift + 8;  // every feasible value has no bits at or above shift + 8
  return 4;
}

/// One radix pass over a worker's share of a row's cells (me, me + team,
/// ...): the next digit of those that match the bits found, counted.
template <class Team>
PLACER_HD void tier_floor_digits(Team& t, std::int32_t const* row, std::int32_t n_nodes, std::int32_t const* f,
                                 std::int32_t* hist) {
  tier_digit_runs<Team> runs{t, hist};
  for (std::int32_t n = t.rank(); n < n_nodes; n += t.size()) {
    std::int32_t const d = row[n] < 0 ? -1 : tier_digit(row[n], f[tier_floor_pre], f[tier_floor_at], tier_floor_bits);
    if (d >= 0) runs.add(d);
    t.work(1);
  }
  runs.flush();
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
  for (std::int32_t i = me; i < 256 * n_rows; i += team) {
    b.floor_hist[i] = 0;
    t.work(1);
  }
  for (std::int32_t i = me; i < tier_floor_fields * n_rows; i += team) {
    b.floor_row[i] = 0;
    t.work(1);
  }
  if (me == 0) b.ctl->floor_passes = 0;
  t.sync();
  auto row_of = [&](std::int32_t r) { return p.scores + static_cast<std::int64_t>(p.row_class[r]) * n_nodes; };
  for (std::int32_t r = 0; r < n_rows; ++r) {
    if (b.quota[r] == 0) continue;
    tier_floor_count_pass(t, row_of(r), n_nodes, b.floor_row + tier_floor_fields * r);
  }
  t.sync();
  for (std::int32_t r = me; r < n_rows; r += team) {
    std::int32_t* f = b.floor_row + tier_floor_fields * r;
    b.floor[r] = 0;
    if (b.quota[r] == 0 || f[tier_floor_count] <= copies) continue;  // at 0: nothing to find
    t.work(tier_floor_search(f, copies));
    t.fetch_max(&b.ctl->floor_passes, tier_radix_passes(f[tier_floor_at], tier_floor_bits));
  }
  t.sync();
  std::int32_t const passes = b.ctl->floor_passes;
  for (std::int32_t pass = 0; pass < passes; ++pass) {
    for (std::int32_t r = 0; r < n_rows; ++r) {
      std::int32_t const* f = b.floor_row + tier_floor_fields * r;
      if (f[tier_floor_at] <= 0) continue;
      tier_floor_digits(t, row_of(r), n_nodes, f, b.floor_hist + 256 * r);
    }
    t.sync();
    for (std::int32_t r = me; r < n_rows; r += team) {
      std::int32_t* f = b.floor_row + tier_floor_fields * r;
      if (f[tier_floor_at] <= 0) continue;
      t.work(tier_radix_step(b.floor_hist + 256 * r, f[tier_floor_want], f[tier_floor_pre], f[tier_floor_at],
                             tier_floor_bits));
      if (f[tier_floor_at] == 0) b.floor[r] = f[tier_floor_pre];
    }
    t.sync();
  }
}

/// Row r's floor (tier_floor's value) by one CTA of a grid: its workers
/// read the row's cells together as tier_floors_radix does, and meet at
/// the CTA's barriers only, so the rows go to the grid's CTAs at once
/// (tier_iterate_grid). Every worker of the CTA calls it for the same row;
/// rank 0 writes the floor.
template <class Team>
PLACER_HD void tier_floor_cta(Team& t, tier_buffers const& b, std::int32_t r, std::int32_t copies) {
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  if (b.quota[r] == 0) {
    if (me == 0) b.floor[r] = 0;
    return;
  }
  std::int32_t* f = b.floor_row + tier_floor_fields * r;
  std::int32_t* hist = b.floor_hist + 256 * r;
  for (std::int32_t i = me; i < 256 + tier_floor_fields; i += team) {
    if (i < 256) {
      hist[i] = 0;
    } else {
      f[i - 256] = 0;
    }
    t.work(1);
  }
  t.sync();
  std::int32_t const* row = b.p.scores + static_cast<std::int64_t>(b.p.row_class[r]) * n_nodes;
  tier_floor_count_pass(t, row, n_nodes, f);
  t.sync();
  if (f[tier_floor_count] <= copies) {  // read by all; nobody writes the row's state again
    if (me == 0) b.floor[r] = 0;
    return;
  }
  if (me == 0) t.work(tier_floor_search(f, copies));
  t.sync();
  while (f[tier_floor_at] > 0) {
    tier_floor_digits(t, row, n_nodes, f, hist);
    t.sync();
    if (me == 0) {
      t.work(tier_radix_step(hist, f[tier_floor_want], f[tier_floor_pre], f[tier_floor_at], tier_floor_bits));
      if (f[tier_floor_at] == 0) b.floor[r] = f[tier_floor_pre];
    }
    t.sync();
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
