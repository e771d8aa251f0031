#pragma once
// Offers: each row keeps its best bids. tier_offer is a row's heap fed a bid
// at a time (the CPU backend, and the rows with few bids on the GPU);
// tier_offer_team the same result in closed form by the whole team.

#include "bid.hpp"
#include "buffers.hpp"
#include "radix.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// A row's held bids are a heap of this many children a node (the worst on
/// top): a team builds a heap a level at a time, a barrier a level, so
/// fewer levels are fewer barriers. GPU model, tier kernel of 10k / 100k /
/// openb: 5.27 / 11.88 / 6.14 ms with 2, 5.03 / 11.43 / 5.89 with 4, 4.92 /
/// 11.24 / 5.80 with 8; the CPU rounds the same within noise (round_bench,
/// alternating 2 and 8, 2026-11-28).
inline constexpr std::int32_t tier_heap_arity = 8;

/// The entries of a heap of `size` that have a child: 0 .. this - 1.
PLACER_HD inline std::int32_t tier_heap_parents(std::int32_t size) {
  return size > 1 ? (size + tier_heap_arity - 2) / tier_heap_arity : 0;
}

/// A heap rebuilt a level at a time (a barrier a level: a level's
/// sift-downs touch disjoint subtrees): for each level from the deepest
/// with a parent among `parents` up to the root, level(first, end), its
/// entries being [first, end) less those past the parents, then sync().
/// At least the root's level, whatever `parents`.
template <class Level, class Sync>
PLACER_HD void tier_heap_levels(std::int32_t parents, Level&& level, Sync&& sync) {
  std::int32_t first = 0;  // the deepest level with a parent begins there
  while (first * tier_heap_arity + 1 < parents) first = first * tier_heap_arity + 1;
  for (;; first = (first - 1) / tier_heap_arity) {
    level(first, first * tier_heap_arity + 1);
    sync();
    if (first == 0) break;
  }
}

/// Whether node n, having lost row r with `bid`, bids nothing for the rest
/// of the pass. A bid is value + 1 - other + eps, `other` being the node's
/// best margin on the other rows at its round's prices, floored at 0 (a
/// held bid is never above what its holder would bid now: tier_rebid), so
/// bid >= value + 1 + eps says that no other row had a positive margin,
/// and prices only rise within a pass. Row r is full (quota > 0 of better
/// keys kept), its price their least bid, at least `bid`: a margin of at
/// most -eps there.
PLACER_HD inline bool tier_sits_out(tier_buffers const& b, std::int32_t r, std::int32_t n, std::int64_t bid) {
  return b.quota[r] > 0 && bid >= static_cast<std::int64_t>(tier_value(b, r, n)) + 1 + b.p.eps;
}

/// A loser of row r, at `bid`, of the round that bids from list `list`:
/// listed for the next round, or only counted (tier_control::sitting) where
/// it would sit the rest of the pass out (tier_sits_out;
/// tier_buffers::losers_sit_out). Its search of the rows, which would find
/// no bid, is saved; the rounds go by both counts (tier_bidding), so the
/// prices, jumps and placements are the same.
template <class Team>
PLACER_HD void tier_lose(Team& t, tier_buffers const& b, std::int32_t list, std::int32_t r, std::int32_t n,
                         std::int64_t bid) {
  if (b.losers_sit_out != 0) {
    t.work(1);  // the cell tier_sits_out reads
    if (tier_sits_out(b, r, n, bid)) {
      t.fetch_add(&b.ctl->sitting[1 - list], 1);
      return;
    }
  }
  b.todo[1 - list][t.fetch_add(&b.ctl->todo_count[1 - list], 1)] = n;
}

/// Puts (bid, n) at entry i of a held-bids heap of `size` entries (the
/// worst on top) and sifts it down to its place. Returns the levels it
/// went down, plus one (Team::work's steps).
PLACER_HD inline std::int32_t tier_sift_down(std::int64_t* hb, std::int32_t* hn, std::int32_t size, std::int32_t i,
                                             std::int64_t bid, std::int32_t n) {
  std::int32_t levels = 1;
  while (true) {
    std::int32_t worst = i;
    std::int64_t wb = bid;
    std::int32_t wn = n;
    std::int32_t const first = tier_heap_arity * i + 1;
    for (std::int32_t c = first; c < first + tier_heap_arity && c < size; ++c) {
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
    ++levels;
  }
  hb[i] = bid;
  hn[i] = n;
  return levels;
}

/// Offers node n's bid to row r's heap (one worker per row). Returns the
/// node that lost (the evicted holder, or n itself when its bid is not
/// better than the worst held one), its bid in lost_bid, or -1 when nobody
/// lost.
///
/// Before the worst holder is evicted it bids again in place, at the
/// round's prices (tier_rebid): a held bid was made against the prices of
/// its round, and the other rows have risen since. Without this, a full row
/// of q copies rises by about one increment per q evictions (each lifts
/// its price only to the next stale bid), and a few surplus nodes bounce
/// between near-equal rows for thousands of rounds; with it, the holder
/// keeps the copy whenever it would win it back next round anyway.
PLACER_HD inline std::int32_t tier_offer(tier_buffers const& b, std::int32_t r, std::int32_t n, std::int64_t bid,
                                         std::int64_t const* prices, std::int64_t& lost_bid,
                                         std::int64_t* steps = nullptr) {
  std::int64_t* hb = b.heap_bid + b.heap_begin[r];
  std::int32_t* hn = b.heap_node + b.heap_begin[r];
  std::int32_t size = b.held[r];
  std::int32_t const cap = b.quota[r];
  std::int32_t lost = -1;
  std::int32_t const now = static_cast<std::int32_t>(b.ctl->rounds);
  auto count = [steps](std::int64_t s) {  // Team::work's steps, when asked
    if (steps != nullptr) *steps += s;
  };
  count(3);
  b.bid_round[n] = now;
  if (size < cap) {
    std::int32_t i = size++;
    b.held[r] = size;
    // Sift up: the worst on top.
    while (i > 0) {
      std::int32_t const parent = (i - 1) / tier_heap_arity;
      if (!tier_worse(bid, n, hb[parent], hn[parent])) break;
      hb[i] = hb[parent];
      hn[i] = hn[parent];
      i = parent;
      count(1);
    }
    hb[i] = bid;
    hn[i] = n;
    return -1;
  }
  lost_bid = bid;
  if (cap == 0) return n;
  while (tier_worse(hb[0], hn[0], bid, n)) {
    // A bid of this round is current: no need to make it again.
    bool const current = b.bid_round[hn[0]] == now;
    std::int32_t read = 0;
    std::int64_t const again = current ? hb[0] : tier_rebid(b, hn[0], r, prices, &read);
    count(1 + read);
    b.bid_round[hn[0]] = now;
    if (again <= hb[0]) {  // its bid is current: it loses the copy
      lost = hn[0];
      lost_bid = hb[0];
      count(tier_sift_down(hb, hn, size, 0, bid, n));
      return lost;
    }
    count(tier_sift_down(hb, hn, size, 0, again, hn[0]));
  }
  return n;  // not better than the worst held
}

/// tier_buffers::offer_iterate: the most steps of M = f(M) before a row
/// keeps the serial offers.
inline constexpr std::int32_t tier_offer_most_steps = 16;

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
/// N - 1 - node).
///
/// That M takes one search, not a search per step of M = f(M): f only
/// rises with M (a holder's value goes from s to v >= s), so M is the least
/// fixed point. Whatever M, the items at or above it number g(M), the count
/// of keys at or above M with every holder at v. So a fixed point lies in
/// (F', F], F and F' the quota-th and (quota + 1)-th best keys so valued,
/// and is a key under its own valuation: a new bid's, a holder's v, or a
/// holder's s. In (F', F] the only new bid or v is F itself, so M is the
/// least of F and the stored keys s above F'. The team finds F' with the
/// floors' radix search and then M in one pass; the items at or above M
/// fill the heap (built a level at a time, one level's sift-downs in
/// parallel), the others go to the next list. A row with no more items
/// than copies keeps them all; one whose keys would not fit 62 bits keeps
/// the serial offers. In a round whose listed rows have at most
/// tier_offer_pairs_upto items each, F' is found by ranking instead: an
/// item is F' when exactly quota of its row's keys lie above its own (one
/// barrier; the search costs two a digit). Marks the rows it did (offer_row round = this round);
/// ends at a barrier.
template <class Team>
PLACER_HD void tier_offer_team(Team& t, tier_buffers const& b, std::int32_t list, std::int64_t const* prices) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  std::int32_t const me = t.rank();
  std::int32_t const team = t.size();
  tier_control* const ctl = b.ctl;
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
    t.fetch_max(&ctl->offer_most_items, items);
    std::int64_t const slot = t.fetch_add(&ctl->offer_slots, (std::int64_t{1} << 32) + items);
    b.offer_rows[slot >> 32] = r;
    b.offer_begin[slot >> 32] = static_cast<std::int32_t>(slot & 0xffffffff);
    t.work(1);
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
      t.work(2);  // the item's row, then the item
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
        std::int32_t read = 0;
        std::int64_t const v = tier_rebid(b, n, r, prices, &read);
        b.bid_value[n] = v;
        t.work(read);
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
    if (b.offer_iterate == 0) field(r, tier_offer_pre_m) = tier_closed;  // the least key above F, found below
    t.fetch_max(&ctl->offer_passes, tier_radix_passes(shift + 8, b.offer_bits));
  }
  t.sync();
  std::int32_t const passes = ctl->offer_passes;
  // The (quota + extra)-th best key of every searched row's items, each
  // valued by valued(r, i, n, value), into the row's tier_offer_pre: the
  // floors' radix search over all the rows' items at once.
  auto search = [&](std::int32_t extra, auto const& valued) {
    for (std::int32_t j = me; j < taken; j += team) {
      std::int32_t const r = rows[j];
      field(r, tier_offer_at) = 0;
      if (!mine(r) || field(r, tier_offer_searching) == 0) continue;
      field(r, tier_offer_want) = b.quota[r] + extra;
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
        valued(r, i, n, value);
        std::int32_t const d =
            tier_digit(key(r, value, n), field(r, tier_offer_pre), field(r, tier_offer_at), b.offer_bits);
        if (d >= 0) runs.add(b.floor_hist + 256 * r, d);
      });
      runs.flush();
      t.sync();
      for (std::int32_t j = me; j < taken; j += team) {
        std::int32_t const r = rows[j];
        if (field(r, tier_offer_at) <= 0) continue;
        t.work(tier_radix_step(b.floor_hist + 256 * r, field(r, tier_offer_want), field(r, tier_offer_pre),
                               field(r, tier_offer_at), b.offer_bits));
      }
      t.sync();
    }
  };
  if (passes > 0 && b.offer_iterate == 0) {
    // M in one search: F', the (quota + 1)-th best key with every holder
    // at its re-bid, then M, the least of the keys above F', re-bids and
    // stored bids alike (the closed form above).
    auto const at_rebid = [&](std::int32_t r, std::int32_t i, std::int32_t& n, std::int64_t& value) {
      if (raw(r, i, n, value)) value = b.bid_value[n];  // a holder at its re-bid
    };
    if (ctl->offer_most_items <= b.offer_pairs_upto) {
      // Few items a row: each ranks itself against its row's others; the
      // one with quota keys above it is F' (keys are distinct).
      each_item([&](std::int32_t r, std::int32_t i) {
        if (!mine(r) || field(r, tier_offer_searching) == 0) return;
        std::int32_t n;
        std::int64_t value;
        at_rebid(r, i, n, value);
        std::int64_t const k = key(r, value, n);
        std::int32_t const items = b.bid_count[r] + b.held[r];
        std::int32_t above = 0;
        for (std::int32_t o = 0; o < items; ++o) {
          std::int32_t n2;
          std::int64_t value2;
          at_rebid(r, o, n2, value2);
          above += key(r, value2, n2) > k ? 1 : 0;
        }
        t.work(2 * static_cast<std::int64_t>(items));
        if (above == b.quota[r]) field(r, tier_offer_pre) = k;
      });
      t.sync();
    } else {
      search(1, at_rebid);
    }
    each_item([&](std::int32_t r, std::int32_t i) {
      if (!mine(r) || field(r, tier_offer_searching) == 0) return;
      std::int64_t const f = field(r, tier_offer_pre);
      std::int32_t n;
      std::int64_t value;
      std::int64_t least = tier_closed;
      if (raw(r, i, n, value)) {
        std::int64_t const stored = key(r, value, n);
        if (stored > f) least = stored;
        value = b.bid_value[n];
      }
      std::int64_t const k = key(r, value, n);
      if (k > f) least = min_of(least, k);
      if (least < tier_closed) t.fetch_min(&field(r, tier_offer_pre_m), least);
    });
    t.sync();
  }
  // The recorded GPU rounds' way (tier_buffers::offer_iterate): M = f(M)
  // stepped from M = -1, a search a step; a row whose M moves more than
  // tier_offer_most_steps times keeps the serial offers.
  for (std::int32_t step = 0; passes > 0 && b.offer_iterate != 0; ++step) {
    std::int32_t* moved = ctl->offer_moved + step % 2;
    search(0, [&](std::int32_t r, std::int32_t i, std::int32_t& n, std::int64_t& value) {
      bool holder, rebid;
      item(r, i, n, value, holder, rebid);
    });
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
      tier_lose(t, b, list, r, n, value);
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
  tier_heap_levels(
      tier_heap_parents(ctl->offer_most_held),
      [&](std::int32_t first, std::int32_t level_end) {
        for (std::int32_t j = 0; j < taken; ++j) {
          std::int32_t const r = rows[j];
          if (!mine(r)) continue;
          std::int32_t const held = b.held[r];
          std::int64_t* hb = b.heap_bid + b.heap_begin[r];
          std::int32_t* hn = b.heap_node + b.heap_begin[r];
          std::int32_t const end = min_of(level_end, tier_heap_parents(held));
          t.work(1);
          for (std::int32_t i = first + me; i < end; i += team) t.chain(tier_sift_down(hb, hn, held, i, hb[i], hn[i]));
        }
      },
      [&] { t.sync(); });
  if (me == 0) {  // every worker read them before the last barrier
    ctl->offer_slots = 0;
    ctl->offer_most_items = 0;
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
