#pragma once
// Offers a row a group: a round's offers with one barrier of the team. A
// row's offers are its own (its bids, its holders, its heap), so each row
// goes to one group of Team::group_size() workers (a warp on the GPU, one
// worker on a CPU team), which takes it alone with the group's barriers
// (__syncwarp: no CTA barrier), and the team meets once, at the end.

#include "bid.hpp"
#include "buffers.hpp"
#include "offer.hpp"
#include "radix.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The group offers' radix digit in bits: a warp walks a digit's counts
/// a lane a digit (tier_radix_walk_group; a smaller group, each worker all
/// of them), and counts the passes in three sets of them in turn
/// (floor_hist: 3 x 2^bits of a row's 256), so that a pass needs one
/// barrier of the group. GPU model, 33 CTAs, offers at 10k / 100k / openb
/// (ranked up to 32 items): 1.98 / 2.26 / 1.89 ms at 5 bits, 2.03 / 2.28 /
/// 1.92 at 4, 2.23 / 2.38 / 2.01 at 3; before a lane walked a digit (every
/// worker walked every count), 2.16 / 2.34 / 1.96 at 4.
inline constexpr std::int32_t tier_offer_group_bits = 5;

/// A round's offers, a row a group (tier_buffers::offer_groups; the team
/// meets only at the end, with the prices of the next round written).
/// Each group takes rows group, group + groups, ..., whose bids the bid
/// phase left at the front of each row's stretch of `select`, and, a row
/// at a time, finds what tier_offer_team finds, in the same closed
/// form (offer.hpp): the holders re-bid at the round's prices; F', the
/// (quota + 1)-th best key with every holder at its re-bid, by ranking the
/// items against each other (up to tier_buffers::offer_pairs_upto items)
/// or by the radix search (a barrier of the group a digit); M, the least
/// key above F' (re-bids and stored bids alike). The items at or above M
/// are held: a kept holder stays where it is in the heap (its re-bid
/// written there), a lost one leaves a hole, and the kept bids fill the
/// holes, then the free entries; the heap is rebuilt a level at a time.
/// Everything below M goes to the next list. A row whose keys would not
/// fit 62 bits gets the serial offers (tier_offer) from the group's first
/// worker. The round's count, and the next list's, are rank 0's before
/// the team's last barrier (tier_round). Ends at a barrier.
template <class Team>
PLACER_HD void tier_offer_groups(Team& t, tier_buffers const& b, std::int32_t list, std::int64_t const* prices,
                                 std::int64_t* next_prices) {
  std::int32_t const n_rows = b.p.n_rows;
  std::int32_t const n_nodes = b.p.nodes.n_nodes;
  tier_control* const ctl = b.ctl;
  std::int32_t const most = t.group_size();
  std::int32_t const group = t.rank() / most;
  std::int32_t const groups = (t.size() + most - 1) / most;
  std::int32_t const lane = t.rank() - group * most;
  std::int32_t const width = min_of(most, t.size() - group * most);
  std::int32_t const now = static_cast<std::int32_t>(ctl->rounds);
  std::int32_t node_bits = 0;
  while ((std::int64_t{1} << node_bits) < n_nodes) ++node_bits;
  auto field = [&](std::int32_t r, tier_offer_field f) -> std::int64_t& { return b.offer_row[tier_offer_fields * r + f]; };
  // The group's rows, their counts cleared.
  for (std::int32_t r = group + lane * groups; r < n_rows; r += groups * width) {
    field(r, tier_offer_holes) = 0;
    field(r, tier_offer_placed) = 0;
    t.work(1);
  }
  t.group_sync();
  for (std::int32_t r = group; r < n_rows; r += groups) {
    std::int32_t const bids = b.bid_count[r];
    if (bids == 0) {
      if (lane == 0) next_prices[r] = prices[r];
      t.work(1);
      continue;
    }
    std::int32_t const quota = b.quota[r];
    std::int32_t const held = b.held[r];
    std::int32_t const items = bids + held;
    std::int32_t* const row = b.select + static_cast<std::int64_t>(r) * n_nodes;  // bids first, holes from the back
    std::int64_t* const hb = b.heap_bid + b.heap_begin[r];
    std::int32_t* const hn = b.heap_node + b.heap_begin[r];
    // Item i: a bid (i < bids), else holder i - bids with its stored bid.
    auto raw = [&](std::int32_t i, std::int32_t& n, std::int64_t& value) {
      if (i < bids) {
        n = row[i];
        value = b.bid_value[n];
        return false;
      }
      n = hn[i - bids];
      value = hb[i - bids];
      return true;
    };
    bool const search = items > quota;
    std::int64_t m = -1;  // M: every item kept when they all fit
    std::int64_t lo = 0;
    auto key = [&](std::int64_t value, std::int32_t n) {
      return ((value - lo) << node_bits) | static_cast<std::int64_t>(n_nodes - 1 - n);
    };
    if (search) {
      // The holders' re-bids (in bid_value: a holder does not bid), and
      // the least and largest value.
      std::int64_t least = tier_closed, largest = -tier_closed;
      for (std::int32_t i = lane; i < items; i += width) {
        std::int32_t n;
        std::int64_t value;
        if (raw(i, n, value)) {
          std::int32_t read = 0;
          std::int64_t const v = tier_rebid(b, n, r, prices, &read);
          b.bid_value[n] = v;
          largest = max_of(largest, v);
          t.work(read);
        }
        least = min_of(least, value);
        largest = max_of(largest, value);
        t.work(2);
      }
      lo = t.group_fold(least, width, fold_min{});
      std::int64_t const spread = t.group_fold(largest, width, fold_max{}) - lo;
      t.group_sync();  // the re-bids written before any worker reads them
      if (spread >= (std::int64_t{1} << (62 - node_bits))) {
        // Keys would not fit: the serial offers, on the group's first worker.
        if (lane == 0) {
          for (std::int32_t i = 0; i < bids; ++i) {
            std::int32_t const n = row[i];
            std::int64_t steps = 0, lost_bid = 0;
            std::int32_t const lost = tier_offer(b, r, n, b.bid_value[n], prices, lost_bid, &steps);
            if (lost >= 0) tier_lose(t, b, list, r, lost, lost_bid);
            t.chain(steps);
          }
          next_prices[r] = tier_price(b, r);
          b.bid_count[r] = 0;
        }
        t.group_sync();
        continue;
      }
      auto at_rebid = [&](std::int32_t i) {
        std::int32_t n;
        std::int64_t value;
        if (raw(i, n, value)) value = b.bid_value[n];
        return key(value, n);
      };
      // F', the (quota + 1)-th best key at the re-bids (keys are distinct).
      std::int64_t f = 0;
      if (items <= b.offer_pairs_upto) {
        std::int64_t found = -1;  // keys are at least 0, one is F'
        if (items <= width) {
          // A lane an item: the others' keys by shuffles, not loads.
          std::int64_t const k = lane < items ? at_rebid(lane) : -1;
          std::int32_t const above = t.group_count_above(k, width);
          if (lane < items && above == quota) found = k;
          t.work(2 + static_cast<std::int64_t>(items));
        } else {
          for (std::int32_t i = lane; i < items; i += width) {
            std::int64_t const k = at_rebid(i);
            std::int32_t above = 0;
            for (std::int32_t o = 0; o < items; ++o) above += at_rebid(o) > k ? 1 : 0;
            if (above == quota) found = k;
            t.work(2 * static_cast<std::int64_t>(items));
          }
        }
        f = t.group_fold(found, width, fold_max{});
      } else {
        // The radix search, a worker a digit where the group has as many
        // (tier_radix_walk_group), else each walking the counts. Pass p
        // counts into set p % 3 and clears set (p + 1) % 3, last walked in
        // pass p - 2, before this pass's barrier: the next pass counts
        // into it only after that barrier.
        constexpr std::int32_t bits = tier_offer_group_bits;
        std::int64_t const top = (spread << node_bits) | ((std::int64_t{1} << node_bits) - 1);
        std::int64_t at = 8;
        while ((top >> (at - 8)) >= 256) ++at;
        std::int64_t want = quota + 1;
        std::int32_t* const hist = b.floor_hist + 256 * r;
        for (std::int32_t pass = 0; at > 0; ++pass) {
          std::int32_t* const counts = hist + ((pass % 3) << bits);
          std::int32_t* const clear = hist + (((pass + 1) % 3) << bits);
          for (std::int32_t d = lane; d < (1 << bits); d += width) clear[d] = 0;
          tier_digit_runs<Team> runs{t, counts};
          for (std::int32_t i = lane; i < items; i += width) {
            std::int32_t const d = tier_digit(at_rebid(i), f, at, bits);
            if (d >= 0) runs.add(d);
            t.work(2);
          }
          runs.flush();
          t.group_sync();
          std::int32_t const walked = width >= (1 << bits)
                                          ? tier_radix_walk_group(t, counts, want, f, at, bits, lane, width)
                                          : tier_radix_walk(counts, want, f, at, bits);
          t.work(walked + (1 << bits) / width);
          // One item left with the bits found (its digit's count; every
          // worker reads the same): it is F' (keys are distinct), found
          // in one more loop instead of the passes over the bits below.
          if (at > 0 && counts[f & ((1 << bits) - 1)] == 1) {
            std::int64_t found = -1;
            for (std::int32_t i = lane; i < items; i += width) {
              std::int64_t const k = at_rebid(i);
              if ((k >> at) == f) found = k;
              t.work(2);
            }
            f = t.group_fold(found, width, fold_max{});
            at = 0;
          }
        }
        // The sets are cleared below, once every worker has walked the
        // last counts.
      }
      // M, the least key above F': a re-bid's or a stored bid's.
      std::int64_t least_key = tier_closed;
      for (std::int32_t i = lane; i < items; i += width) {
        std::int32_t n;
        std::int64_t value;
        if (raw(i, n, value)) {
          std::int64_t const stored = key(value, n);
          if (stored > f) least_key = min_of(least_key, stored);
          value = b.bid_value[n];
        }
        std::int64_t const k = key(value, n);
        if (k > f) least_key = min_of(least_key, k);
        t.work(2);
      }
      m = t.group_fold(least_key, width, fold_min{});
      if (items > b.offer_pairs_upto) {
        t.group_sync();  // every worker has walked the last counts
        for (std::int32_t d = lane; d < 3 << tier_offer_group_bits; d += width) b.floor_hist[256 * r + d] = 0;
      }
    }
    // Who keeps a copy: a holder whose stored key lies below M re-bids
    // (its re-bid in bid_value), and an item is held when its key is at or
    // above M. Lost holders leave holes (listed from the back of the row's
    // stretch), kept holders stay, every loser goes to the next list
    // (tier_lose).
    for (std::int32_t i = lane; i < items; i += width) {
      std::int32_t n;
      std::int64_t value;
      bool const holder = raw(i, n, value);
      bool const rebid = search && holder && key(value, n) < m;
      if (rebid) value = b.bid_value[n];
      bool const kept = !search || key(value, n) >= m;
      if (!holder || rebid) b.bid_round[n] = now;
      if (kept) {
        if (holder) hb[i - bids] = value;
      } else {
        if (holder) row[n_nodes - 1 - t.fetch_add(&field(r, tier_offer_holes), std::int64_t{1})] = i - bids;
        tier_lose(t, b, list, r, n, value);
      }
      t.work(2);
    }
    t.group_sync();
    auto const holes = static_cast<std::int32_t>(field(r, tier_offer_holes));
    // The kept bids: into the holes first, then after the held entries.
    for (std::int32_t i = lane; i < bids; i += width) {
      std::int32_t const n = row[i];
      std::int64_t const value = b.bid_value[n];
      if (search && key(value, n) < m) continue;
      auto const s = static_cast<std::int32_t>(t.fetch_add(&field(r, tier_offer_placed), std::int64_t{1}));
      std::int32_t const at = s < holes ? row[n_nodes - 1 - s] : held + s - holes;
      hb[at] = value;
      hn[at] = n;
      t.work(2);
    }
    t.group_sync();
    std::int32_t const now_held = held - holes + static_cast<std::int32_t>(field(r, tier_offer_placed));
    // The heap, a level at a time from the deepest parents up.
    std::int32_t const parents = tier_heap_parents(now_held);
    if (parents > 0) {
      tier_heap_levels(
          parents,
          [&](std::int32_t first, std::int32_t level_end) {
            std::int32_t const end = min_of(level_end, parents);
            for (std::int32_t i = first + lane; i < end; i += width) {
              t.chain(tier_sift_down(hb, hn, now_held, i, hb[i], hn[i]));
            }
          },
          [&] { t.group_sync(); });
    }
    if (lane == 0) {
      b.held[r] = now_held;
      next_prices[r] = tier_price(b, r);
      b.bid_count[r] = 0;
    }
    t.work(1);
  }
  t.sync();
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
