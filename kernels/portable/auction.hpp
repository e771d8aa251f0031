#pragma once
// The similar-object auction with epsilon-scaling (see
// include/placer/kernels/auction.hpp for the algorithm), written once as
// Thrust calls over PLACER_HD functors. The backend provides the buffers in
// its own memory (auction_buffers); the control loop runs on the host and
// reads one count per round.

#include <placer/kernels/auction.hpp>
#include <placer/kernels/hd.hpp>
#include <placer/kernels/steps.hpp>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/tuple.h>

#include <climits>
#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

inline constexpr std::int32_t auction_unassigned = -1;
inline constexpr std::int32_t auction_pending = -2;
inline constexpr std::int32_t auction_no_object = INT32_MAX;  // sorts after every object

/// Buffers in the backend's memory. `problem` points there too.
struct auction_buffers {
  auction_problem problem;
  std::int32_t const* copy_begin = nullptr;  ///< n_objects + 1 (exclusive scan of capacity)
  std::int64_t n_copies = 0;
  std::int64_t* price = nullptr;       ///< n_copies, ascending within an object
  std::int32_t* holder = nullptr;      ///< n_copies, bidder or -1
  std::int64_t* price_tmp = nullptr;   ///< n_copies
  std::int32_t* holder_tmp = nullptr;  ///< n_copies
  std::int32_t* assigned = nullptr;    ///< n_bidders: object, -1 unassigned, -2 pending
  std::int32_t* active = nullptr;      ///< n_bidders
  std::int32_t* active_row = nullptr;  ///< n_bidders: row of active[k] (sort key)
  std::int32_t* row_seg = nullptr;     ///< n_bidders: starts of rows in the active list
  std::int32_t* bid_obj = nullptr;     ///< n_bidders
  std::int32_t* bid_copy = nullptr;    ///< n_bidders: copy position within the object
  std::int64_t* bid_val = nullptr;     ///< n_bidders
  std::int32_t* bid_bidder = nullptr;  ///< n_bidders
  std::int32_t* seg_begin = nullptr;   ///< n_bidders
  std::int32_t* heap_obj = nullptr;    ///< n_rows x n_objects scratch (per-row heap)
  std::int32_t* heap_taken = nullptr;  ///< n_rows x n_objects scratch
};

struct is_unassigned_op {
  std::int32_t const* assigned;
  PLACER_HD bool operator()(std::int32_t i) const { return assigned[i] == auction_unassigned; }
};

struct active_row_op {
  std::int32_t const* row_of;
  std::int32_t const* active;
  PLACER_HD std::int32_t operator()(std::int32_t k) const { return row_of[active[k]]; }
};

struct is_row_start_op {
  std::int32_t const* active_row;
  PLACER_HD bool operator()(std::int32_t k) const { return k == 0 || active_row[k] != active_row[k - 1]; }
};

/// Bids of one row (a class of identical bidders) with u unassigned members
/// (Bertsekas and Castanon's auction for similar persons): the members take
/// the row's u best options, copy by copy, and all use the (u+1)-th best
/// option (or staying pending, 0) as their second best. Identical bidders
/// thus spread over the best copies in one round instead of all bidding for
/// the same one. Options are found with a heap over objects, each object
/// offering its copies cheapest first.
struct bid_row_op {
  auction_buffers b;
  std::int32_t n_row_segments;
  std::int32_t n_active;
  std::int64_t scale;
  std::int64_t eps;

  PLACER_HD bool before(std::int64_t na, std::int32_t ja, std::int64_t nb, std::int32_t jb) const {
    return na != nb ? na > nb : ja < jb;  // higher net first, then lower object index
  }
  /// Rows with fewer unassigned members than this select their options
  /// with a small sorted array instead of a heap over every object.
  static constexpr std::int32_t small_row = 8;

  /// Members of one row share their offset (auction_prepare checks).
  PLACER_HD std::int64_t off_of(std::int32_t k0) const {
    return b.problem.offset != nullptr ? b.problem.offset[b.active[k0]] : 0;
  }

  /// Writes the bids of members k0..k0+u given their options best first
  /// (obj/copy/net for `got` of them) and the common second best.
  PLACER_HD void write_bids(std::int32_t k0, std::int32_t u, std::int32_t got, std::int64_t second) const {
    for (std::int32_t k = 0; k < u; ++k) {
      std::int32_t const i = b.active[k0 + k];
      b.bid_bidder[k0 + k] = i;
      if (k >= got) {
        b.bid_obj[k0 + k] = auction_no_object;
        b.bid_copy[k0 + k] = 0;
        b.bid_val[k0 + k] = 0;
        b.assigned[i] = auction_pending;
        continue;
      }
      std::int32_t const j = b.bid_obj[k0 + k];
      std::int64_t const price = b.price[b.copy_begin[j] + b.bid_copy[k0 + k]];
      b.bid_val[k0 + k] = price + (b.bid_val[k0 + k] - second) + eps;
    }
  }

  /// Few members: one pass over the objects keeping the u+1 best options in
  /// a small sorted array. An object's copies are cheapest first, so its
  /// scan stops at the first copy that does not make the list.
  PLACER_HD void bid_small(std::int32_t k0, std::int32_t u, std::int32_t const* values, std::int64_t off) const {
    auto const& p = b.problem;
    std::int64_t top_net[small_row + 1];
    std::int32_t top_obj[small_row + 1];
    std::int32_t top_copy[small_row + 1];
    std::int32_t const want = u + 1;
    std::int32_t size = 0;
    for (std::int32_t j = 0; j < p.n_objects; ++j) {
      if (values[j] < 0) continue;
      std::int64_t const a = (static_cast<std::int64_t>(values[j]) + 1 + off) * scale;
      std::int32_t const cb = b.copy_begin[j];
      std::int32_t const cap = b.copy_begin[j + 1] - cb;
      for (std::int32_t t = 0; t < cap && t < want; ++t) {
        std::int64_t const n = a - b.price[cb + t];
        // Strictly better than the last kept entry (earlier objects win ties).
        if (size == want && n <= top_net[size - 1]) break;
        std::int32_t pos = size < want ? size++ : size - 1;
        while (pos > 0 && top_net[pos - 1] < n) {
          top_net[pos] = top_net[pos - 1];
          top_obj[pos] = top_obj[pos - 1];
          top_copy[pos] = top_copy[pos - 1];
          --pos;
        }
        top_net[pos] = n;
        top_obj[pos] = j;
        top_copy[pos] = t;
      }
    }
    std::int32_t got = 0;
    while (got < u && got < size && top_net[got] > 0) {
      b.bid_obj[k0 + got] = top_obj[got];
      b.bid_copy[k0 + got] = top_copy[got];
      b.bid_val[k0 + got] = top_net[got];
      ++got;
    }
    std::int64_t const second = got == u && size > u && top_net[u] > 0 ? top_net[u] : 0;
    write_bids(k0, u, got, second);
  }

  PLACER_HD void operator()(std::int32_t s) const {
    auto const& p = b.problem;
    std::int32_t const k0 = b.row_seg[s];
    std::int32_t const k1 = s + 1 < n_row_segments ? b.row_seg[s + 1] : n_active;
    std::int32_t const u = k1 - k0;
    std::int32_t const row = b.active_row[k0];
    std::int32_t const* values = p.values + static_cast<std::int64_t>(row) * p.n_objects;
    std::int32_t* ho = b.heap_obj + static_cast<std::int64_t>(row) * p.n_objects;
    std::int32_t* ht = b.heap_taken + static_cast<std::int64_t>(row) * p.n_objects;
    if (u < small_row) {
      bid_small(k0, u, values, off_of(k0));
      return;
    }
    std::int32_t size = 0;
    std::int64_t const off = off_of(k0);
    auto net_at = [&](std::int32_t i) {
      return (static_cast<std::int64_t>(values[ho[i]]) + 1 + off) * scale - b.price[b.copy_begin[ho[i]] + ht[i]];
    };
    // Only the u+1 best objects by their cheapest copy can supply the u best
    // options and the (u+1)-th: every copy of any other object is beaten by
    // those u+1 cheapest copies. One pass keeps them in ho[0..size), with
    // the worst on top once there are u+1; the ranking below then sifts
    // u+1 objects instead of every object (the same order, so the same bids).
    std::int32_t const want = u + 1;
    // Sifts entry i down the heap ho/ht[0..size): the best option on top, or
    // the worst with worst_on_top (entries are distinct objects, so of two
    // entries exactly one comes before the other).
    auto sift = [&](std::int32_t i, bool worst_on_top) {
      while (true) {
        std::int32_t top = i;
        for (std::int32_t c = 2 * i + 1; c <= 2 * i + 2 && c < size; ++c) {
          if (before(net_at(c), ho[c], net_at(top), ho[top]) != worst_on_top) top = c;
        }
        if (top == i) return;
        std::int32_t const o = ho[i], t = ht[i];
        ho[i] = ho[top];
        ht[i] = ht[top];
        ho[top] = o;
        ht[top] = t;
        i = top;
      }
    };
    for (std::int32_t j = 0; j < p.n_objects; ++j) {
      if (values[j] < 0 || b.copy_begin[j] == b.copy_begin[j + 1]) continue;
      if (size < want) {
        ho[size] = j;
        ht[size] = 0;
        if (++size == want) {
          for (std::int32_t i = size / 2 - 1; i >= 0; --i) sift(i, true);
        }
        continue;
      }
      std::int64_t const n = (static_cast<std::int64_t>(values[j]) + 1 + off) * scale - b.price[b.copy_begin[j]];
      if (!before(n, j, net_at(0), ho[0])) continue;
      ho[0] = j;
      sift(0, true);
    }
    for (std::int32_t i = size / 2 - 1; i >= 0; --i) sift(i, false);
    // Pop the u best options into the members' bid slots (k0..k1), then
    // peek the (u+1)-th as the common second best.
    std::int32_t got = 0;
    while (got < u && size > 0) {
      std::int32_t const j = ho[0];
      std::int32_t const t = ht[0];
      std::int64_t const n = net_at(0);
      if (n <= 0) break;  // staying pending is at least as good
      b.bid_obj[k0 + got] = j;
      b.bid_copy[k0 + got] = t;
      b.bid_val[k0 + got] = n;  // the net for now; turned into a bid below
      ++got;
      if (t + 1 < b.copy_begin[j + 1] - b.copy_begin[j]) {
        ht[0] = t + 1;
      } else {
        ho[0] = ho[size - 1];
        ht[0] = ht[size - 1];
        --size;
      }
      sift(0, false);
    }
    std::int64_t second = 0;
    if (got == u && size > 0 && net_at(0) > 0) second = net_at(0);
    write_bids(k0, u, got, second);
  }
};

/// (object asc, copy asc, bid desc, bidder asc): unique keys, so any
/// correct sort on any backend yields the same order.
struct bid_order_op {
  template <class A, class B>
  PLACER_HD bool operator()(A const& x, B const& y) const {
    if (thrust::get<0>(x) != thrust::get<0>(y)) return thrust::get<0>(x) < thrust::get<0>(y);
    if (thrust::get<1>(x) != thrust::get<1>(y)) return thrust::get<1>(x) < thrust::get<1>(y);
    if (thrust::get<2>(x) != thrust::get<2>(y)) return thrust::get<2>(x) > thrust::get<2>(y);
    return thrust::get<3>(x) < thrust::get<3>(y);
  }
};

struct is_segment_start_op {
  std::int32_t const* obj;
  PLACER_HD bool operator()(std::int32_t k) const {
    return obj[k] != auction_no_object && (k == 0 || obj[k] != obj[k - 1]);
  }
};

struct is_real_bid_op {
  PLACER_HD bool operator()(std::int32_t o) const { return o != auction_no_object; }
};

/// Resolves the bids for one object: for each targeted copy the highest bid
/// wins if it beats the copy's price (evicting the holder); then the
/// object's copies are put back into ascending price order.
struct resolve_op {
  auction_buffers b;
  std::int32_t n_segments;
  std::int32_t n_valid;

  PLACER_HD void operator()(std::int32_t s) const {
    std::int32_t const b0 = b.seg_begin[s];
    std::int32_t const b1 = s + 1 < n_segments ? b.seg_begin[s + 1] : n_valid;
    std::int32_t const j = b.bid_obj[b0];
    std::int32_t const cb = b.copy_begin[j];
    std::int32_t const ce = b.copy_begin[j + 1];
    for (std::int32_t k = b0; k < b1; ++k) {
      if (k > b0 && b.bid_copy[k] == b.bid_copy[k - 1]) continue;  // not the highest bid for its copy
      std::int32_t const c = cb + b.bid_copy[k];
      if (b.bid_val[k] <= b.price[c]) continue;
      std::int32_t const old = b.holder[c];
      if (old >= 0) b.assigned[old] = auction_unassigned;
      b.holder[c] = b.bid_bidder[k];
      b.price[c] = b.bid_val[k];
      b.assigned[b.bid_bidder[k]] = j;
    }
    for (std::int32_t c = cb + 1; c < ce; ++c) {  // insertion sort by price
      for (std::int32_t d = c; d > cb && b.price[d] < b.price[d - 1]; --d) {
        std::int64_t const tp = b.price[d];
        b.price[d] = b.price[d - 1];
        b.price[d - 1] = tp;
        std::int32_t const th = b.holder[d];
        b.holder[d] = b.holder[d - 1];
        b.holder[d - 1] = th;
      }
    }
  }
};

/// Runs all epsilon phases. On return b.assigned holds an object or
/// auction_pending for every bidder. `max_value` is the largest unscaled
/// allowed value + 1 + offset (the host computes it). `reverse(scale, eps)`
/// runs auction_reverse_step on the state at the end of each phase. Counts
/// every Thrust call, and a wait for each count the host reads and for each
/// reverse step (its state goes to the host and back).
template <class ExecPolicy, class ReverseStep>
auction_stats run_auction(ExecPolicy&& exec, auction_buffers const& b, std::int64_t max_value,
                          auction_params const& prm, ReverseStep&& reverse, step_counts& steps) {
  auction_stats st;
  std::int32_t const n = b.problem.n_bidders;
  if (n == 0) return st;
  std::int64_t const scale = prm.exact ? static_cast<std::int64_t>(n) + 1 : 1;
  std::int64_t const theta = prm.theta < 2 ? 2 : prm.theta;
  std::int64_t eps = max_value * scale / theta;
  if (eps < 1) eps = 1;
  thrust::fill(exec, b.price, b.price + b.n_copies, std::int64_t{0});
  thrust::counting_iterator<std::int32_t> first(0);
  bool const rows_grouped = thrust::is_sorted(exec, b.problem.row_of, b.problem.row_of + n);
  steps.calls += 2;
  steps.waits += 1;
  while (true) {
    ++st.phases;
    steps.calls += 2;
    // A new phase keeps the prices and restarts the assignment.
    thrust::fill(exec, b.holder, b.holder + b.n_copies, -1);
    thrust::fill(exec, b.assigned, b.assigned + n, auction_unassigned);
    while (true) {
      auto const active_end = thrust::copy_if(exec, first, first + n, b.active, is_unassigned_op{b.assigned});
      auto const n_active = static_cast<std::int32_t>(active_end - b.active);
      steps.calls += 1;
      steps.waits += 1;
      if (n_active == 0) break;
      if (++st.rounds > prm.max_rounds) return st;
      // transform, (sort), copy_if, for_each, sort, count_if, copy_if, for_each; three counts read.
      steps.calls += rows_grouped ? 7 : 8;
      steps.waits += 3;
      // Group the active bidders by row (stable: by id within a row). When
      // rows are already non-decreasing in bidder id (the scheduler builds
      // them so), the active list is grouped as it stands.
      thrust::transform(exec, first, first + n_active, b.active_row, active_row_op{b.problem.row_of, b.active});
      if (!rows_grouped) thrust::stable_sort_by_key(exec, b.active_row, b.active_row + n_active, b.active);
      auto const rows_end = thrust::copy_if(exec, first, first + n_active, b.row_seg, is_row_start_op{b.active_row});
      auto const n_rows = static_cast<std::int32_t>(rows_end - b.row_seg);
      thrust::for_each(exec, first, first + n_rows, bid_row_op{b, n_rows, n_active, scale, eps});
      auto zip = thrust::make_zip_iterator(thrust::make_tuple(b.bid_obj, b.bid_copy, b.bid_val, b.bid_bidder));
      thrust::sort(exec, zip, zip + n_active, bid_order_op{});
      auto const n_valid =
          static_cast<std::int32_t>(thrust::count_if(exec, b.bid_obj, b.bid_obj + n_active, is_real_bid_op{}));
      auto const seg_end =
          thrust::copy_if(exec, first, first + n_valid, b.seg_begin, is_segment_start_op{b.bid_obj});
      auto const n_segments = static_cast<std::int32_t>(seg_end - b.seg_begin);
      thrust::for_each(exec, first, first + n_segments, resolve_op{b, n_segments, n_valid});
    }
    reverse(scale, eps);
    steps.waits += 1;
    if (eps == 1) break;
    eps = eps / theta < 1 ? 1 : eps / theta;
  }
  return st;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
