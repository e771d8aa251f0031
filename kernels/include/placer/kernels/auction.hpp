#pragma once
// The auction assignment problem (Bertsekas' auction for similar objects),
// as the backends solve it.
//
// Bidders (replicas) want objects (nodes) that have a capacity (slots).
// Bidder i's value for object j is values[row_of[i] * n_objects + j] +
// offset[i] (rows are shared by identical bidders: a class of replicas);
// a negative matrix entry means "not allowed". Every bidder may also stay
// pending, with value 0. The auction maximises the total value.
//
// The algorithm (kernels/portable/auction.hpp), identical on both backends:
//   - values are integers scaled by (n_bidders + 1); epsilon-scaling runs
//     phases with epsilon = eps0, eps0/theta, ..., 1; with the final
//     epsilon = 1 the result is optimal for the pure assignment problem;
//   - each object has one price per slot (its copies), kept in ascending
//     order; the bidders of a row are identical, so the u unassigned members
//     of a row bid together (auction for similar persons): they take the
//     row's u best copies, each bidding price + (its net - the (u+1)-th best
//     net, or 0 for staying pending) + eps; members without a copy of
//     positive net stay pending;
//   - all rows bid at once (Jacobi); bids are sorted by (object, copy, bid
//     descending, bidder ascending), and the best bid for a copy takes it if
//     it beats the copy's price, evicting the holder. Unique sort keys make
//     both backends agree exactly;
//   - each phase ends with a reverse step (auction_host.cpp) that gives
//     every unheld copy with a positive price to the bidder that gains most
//     from it, or lowers its price to 0: the complementary slackness that
//     optimality needs when bidders may stay pending.
//
// Public header: host compiler only, no CUDA types.

#include <cstdint>

namespace placer::kernels {

struct auction_problem {
  std::int32_t n_bidders = 0;
  std::int32_t n_objects = 0;
  std::int32_t n_rows = 0;
  std::int32_t const* values = nullptr;    ///< n_rows x n_objects, row-major; < 0 = not allowed
  std::int32_t const* row_of = nullptr;    ///< n_bidders
  std::int64_t const* offset = nullptr;    ///< n_bidders, added to allowed values; may be null;
                                           ///< equal for bidders that share a row
  std::int32_t const* capacity = nullptr;  ///< n_objects slots (0 = closed)
};

struct auction_params {
  std::int32_t theta = 8;               ///< epsilon reduction factor per phase
  /// true: values scaled by n_bidders + 1, so the final epsilon = 1 gives the
  /// exact optimum. false: unscaled, the result is within one value unit per
  /// bidder of the optimum, and ~log_theta(n_bidders) phases cheaper.
  bool exact = true;
  std::int64_t max_rounds = 10'000'000; ///< safety net; exceeding it is an internal error
};

struct auction_stats {
  std::int32_t phases = 0;
  std::int64_t rounds = 0;
};

/// Host-side preparation shared by the backends: the slot CSR (exclusive
/// scan of capacity, n_objects + 1 entries) and the largest value a bidder
/// can see (allowed value + 1 + offset), which sets the first epsilon.
/// Throws std::overflow_error if the slots do not fit 32-bit offsets.
std::int64_t auction_prepare(auction_problem const& p, std::int32_t* copy_begin);

/// The reverse step that closes each epsilon phase (auction_host.cpp): on
/// host copies of the state, gives every unheld copy with a positive price
/// to the bidder that gains most from it (or lowers its price to 0).
/// `assigned` holds an object or -2 (pending) per bidder.
void auction_reverse_step(auction_problem const& p, std::int32_t const* copy_begin, std::int64_t* price,
                          std::int32_t* holder, std::int32_t* assigned, std::int64_t scale, std::int64_t eps);

/// Total value (unscaled) of an assignment; object_of[i] = -1 means pending.
inline std::int64_t auction_value(auction_problem const& p, std::int32_t const* object_of) {
  std::int64_t total = 0;
  for (std::int32_t i = 0; i < p.n_bidders; ++i) {
    std::int32_t const j = object_of[i];
    if (j < 0) continue;
    total += p.values[static_cast<std::int64_t>(p.row_of[i]) * p.n_objects + j] + (p.offset ? p.offset[i] : 0);
  }
  return total;
}

}  // namespace placer::kernels
