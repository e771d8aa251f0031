#pragma once
// The similar-object auction with epsilon-scaling (see
// include/placer/kernels/auction.hpp for the algorithm), written once as
// Thrust calls over PLACER_HD functors. The backend provides the buffers in
// its own memory (auction_buffers); the control loop runs on the host and
// reads one count per round.

#include <placer/kernels/auction.hpp>
#include <placer/kernels/hd.hpp>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/sort.h>
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
  std::int32_t* bid_obj = nullptr;     ///< n_bidders
  std::int64_t* bid_val = nullptr;     ///< n_bidders
  std::int32_t* bid_bidder = nullptr;  ///< n_bidders
  std::int32_t* seg_begin = nullptr;   ///< n_bidders
};

struct is_unassigned_op {
  std::int32_t const* assigned;
  PLACER_HD bool operator()(std::int32_t i) const { return assigned[i] == auction_unassigned; }
};

/// One bid per active bidder: best object against its cheapest copy, second
/// best among other objects, j1's second-cheapest copy and staying pending.
struct bid_op {
  auction_buffers b;
  std::int64_t scale;
  std::int64_t eps;

  PLACER_HD void operator()(std::int32_t k) const {
    auto const& p = b.problem;
    std::int32_t const i = b.active[k];
    std::int32_t const* row = p.values + static_cast<std::int64_t>(p.row_of[i]) * p.n_objects;
    std::int64_t const off = p.offset != nullptr ? p.offset[i] : 0;
    std::int64_t v1 = LLONG_MIN;
    std::int64_t v2 = 0;  // staying pending is always an alternative
    std::int64_t j1_second = LLONG_MIN;
    std::int32_t j1 = -1;
    for (std::int32_t j = 0; j < p.n_objects; ++j) {
      if (row[j] < 0) continue;
      std::int32_t const cb = b.copy_begin[j];
      std::int32_t const ce = b.copy_begin[j + 1];
      if (cb == ce) continue;
      std::int64_t const a = (static_cast<std::int64_t>(row[j]) + 1 + off) * scale;
      std::int64_t const net = a - b.price[cb];
      if (net > v1) {  // strict: the lowest object index wins ties
        if (j1 >= 0 && v1 > v2) v2 = v1;
        v1 = net;
        j1 = j;
        j1_second = ce - cb >= 2 ? a - b.price[cb + 1] : LLONG_MIN;
      } else if (net > v2) {
        v2 = net;
      }
    }
    b.bid_bidder[k] = i;
    if (j1 < 0 || v1 <= 0) {
      b.bid_obj[k] = auction_no_object;
      b.bid_val[k] = 0;
      b.assigned[i] = auction_pending;
      return;
    }
    if (j1_second > v2) v2 = j1_second;
    b.bid_obj[k] = j1;
    b.bid_val[k] = b.price[b.copy_begin[j1]] + (v1 - v2) + eps;
  }
};

/// (object asc, bid desc, bidder asc): unique keys, so any correct sort on
/// any backend yields the same order.
struct bid_order_op {
  template <class A, class B>
  PLACER_HD bool operator()(A const& x, B const& y) const {
    if (thrust::get<0>(x) != thrust::get<0>(y)) return thrust::get<0>(x) < thrust::get<0>(y);
    if (thrust::get<1>(x) != thrust::get<1>(y)) return thrust::get<1>(x) > thrust::get<1>(y);
    return thrust::get<2>(x) < thrust::get<2>(y);
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

/// Resolves the bids for one object: the k-th highest bid takes the k-th
/// cheapest copy while it beats that copy's price; then the copies are
/// merged back into ascending price order.
struct resolve_op {
  auction_buffers b;
  std::int32_t n_segments;
  std::int32_t n_valid;

  PLACER_HD void operator()(std::int32_t s) const {
    std::int32_t const b0 = b.seg_begin[s];
    std::int32_t const b1 = s + 1 < n_segments ? b.seg_begin[s + 1] : n_valid;
    std::int32_t const j = b.bid_obj[b0];
    std::int32_t const cb = b.copy_begin[j];
    std::int32_t const cap = b.copy_begin[j + 1] - cb;
    std::int32_t won = 0;
    while (won < b1 - b0 && won < cap && b.bid_val[b0 + won] > b.price[cb + won]) ++won;
    for (std::int32_t k = 0; k < won; ++k) {
      std::int32_t const old = b.holder[cb + k];
      if (old >= 0) b.assigned[old] = auction_unassigned;
      b.assigned[b.bid_bidder[b0 + k]] = j;
    }
    // New copies (prices descending in bid order) merged with the untouched
    // ones (ascending): ascending output, new copies first on equal prices.
    std::int32_t x = won - 1;
    std::int32_t y = won;
    for (std::int32_t out = 0; out < cap; ++out) {
      bool const take_new = x >= 0 && (y >= cap || b.bid_val[b0 + x] <= b.price[cb + y]);
      if (take_new) {
        b.price_tmp[cb + out] = b.bid_val[b0 + x];
        b.holder_tmp[cb + out] = b.bid_bidder[b0 + x];
        --x;
      } else {
        b.price_tmp[cb + out] = b.price[cb + y];
        b.holder_tmp[cb + out] = b.holder[cb + y];
        ++y;
      }
    }
    for (std::int32_t out = 0; out < cap; ++out) {
      b.price[cb + out] = b.price_tmp[cb + out];
      b.holder[cb + out] = b.holder_tmp[cb + out];
    }
  }
};

/// Runs all epsilon phases. On return b.assigned holds an object or
/// auction_pending for every bidder. `max_value` is the largest unscaled
/// allowed value + 1 + offset (the host computes it). `reverse(scale, eps)`
/// runs auction_reverse_step on the state at the end of each phase.
template <class ExecPolicy, class ReverseStep>
auction_stats run_auction(ExecPolicy&& exec, auction_buffers const& b, std::int64_t max_value,
                          auction_params const& prm, ReverseStep&& reverse) {
  auction_stats st;
  std::int32_t const n = b.problem.n_bidders;
  if (n == 0) return st;
  std::int64_t const scale = static_cast<std::int64_t>(n) + 1;
  std::int64_t const theta = prm.theta < 2 ? 2 : prm.theta;
  std::int64_t eps = max_value * scale / theta;
  if (eps < 1) eps = 1;
  thrust::fill(exec, b.price, b.price + b.n_copies, std::int64_t{0});
  thrust::counting_iterator<std::int32_t> first(0);
  while (true) {
    ++st.phases;
    // A new phase keeps the prices and restarts the assignment.
    thrust::fill(exec, b.holder, b.holder + b.n_copies, -1);
    thrust::fill(exec, b.assigned, b.assigned + n, auction_unassigned);
    while (true) {
      auto const active_end = thrust::copy_if(exec, first, first + n, b.active, is_unassigned_op{b.assigned});
      auto const n_active = static_cast<std::int32_t>(active_end - b.active);
      if (n_active == 0) break;
      if (++st.rounds > prm.max_rounds) return st;
      thrust::for_each(exec, first, first + n_active, bid_op{b, scale, eps});
      auto zip = thrust::make_zip_iterator(thrust::make_tuple(b.bid_obj, b.bid_val, b.bid_bidder));
      thrust::sort(exec, zip, zip + n_active, bid_order_op{});
      auto const n_valid =
          static_cast<std::int32_t>(thrust::count_if(exec, b.bid_obj, b.bid_obj + n_active, is_real_bid_op{}));
      auto const seg_end =
          thrust::copy_if(exec, first, first + n_valid, b.seg_begin, is_segment_start_op{b.bid_obj});
      auto const n_segments = static_cast<std::int32_t>(seg_end - b.seg_begin);
      thrust::for_each(exec, first, first + n_segments, resolve_op{b, n_segments, n_valid});
    }
    reverse(scale, eps);
    if (eps == 1) break;
    eps = eps / theta < 1 ? 1 : eps / theta;
  }
  return st;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
