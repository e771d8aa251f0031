#pragma once
// The radix search both team selections run: the floors (floor.hpp) and the
// team's offers (offer.hpp).

#include "buffers.hpp"

#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The radix search both team selections run (tier_floors_radix over a
/// row's values, tier_offer_team over its items' keys): the bits found so
/// far are `pre`, those above bit `at`; a pass counts the next digit (at
/// most eight bits) of the values that match them, and a worker per row
/// walks the counts down to the digit that holds the wanted rank.
///
/// Passes that find `width` bits in digits of `bits`.
PLACER_HD inline std::int32_t tier_radix_passes(std::int32_t width, std::int32_t bits) {
  return (width + bits - 1) / bits;
}

/// The next digit of v, or -1 when v does not match the bits found.
template <class T>
PLACER_HD std::int32_t tier_digit(T v, T pre, T at, std::int32_t bits) {
  if ((v >> at) != pre) return -1;
  T const width = min_of<T>(bits, at);
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
/// After a pass: the digit that holds the wanted rank joins `pre` and the
/// rank is taken within it. Returns its steps (Team::work): the counts
/// walked.
template <class T>
PLACER_HD std::int32_t tier_radix_walk(std::int32_t const* hist, T& want, T& pre, T& at, std::int32_t bits) {
  T const width = min_of<T>(bits, at);
  std::int32_t d = (1 << width) - 1;
  std::int32_t const top = d;
  while (d > 0 && hist[d] < want) want -= hist[d--];
  pre = (pre << width) | d;
  at -= width;
  return top - d + 1;
}
/// tier_radix_walk by a group of at least 2^bits workers (Team::group_size;
/// this worker `lane` of its run of `width`), a worker a digit: each sums
/// the counts from its digit up over the group (Team::group_sum_from); the
/// digit that holds the wanted rank is the one whose sum reaches `want`
/// where the next one's does not (digit 0 where none does: the walk stops
/// there), and one fold hands it, and the rank within it, to every worker.
/// The same digit and rank as the walk, in two of the group's exchanges
/// where the walk reads the counts one after another. Returns its steps.
template <class Team, class T>
PLACER_HD std::int32_t tier_radix_walk_group(Team& t, std::int32_t const* hist, T& want, T& pre, T& at,
                                             std::int32_t bits, std::int32_t lane, std::int32_t width) {
  T const w = min_of<T>(bits, at);
  std::int32_t const top = (1 << w) - 1;
  std::int64_t const count = lane <= top ? hist[lane] : 0;
  std::int64_t const from = t.group_sum_from(count, width);
  std::int64_t const above = from - count;
  bool const here = lane <= top && above < want && (lane == 0 || from >= want);
  std::int64_t const pick = t.group_fold(
      here ? (std::int64_t{lane} << 32) | static_cast<std::int64_t>(want - above) : std::int64_t{-1}, width,
      fold_max{});
  want = static_cast<T>(pick & 0xffffffff);
  pre = (pre << w) | static_cast<T>(pick >> 32);
  at -= w;
  return 2;
}
/// The walk, then the counts cleared for the next pass. Returns its steps:
/// the counts walked, then cleared.
template <class T>
PLACER_HD std::int32_t tier_radix_step(std::int32_t* hist, T& want, T& pre, T& at, std::int32_t bits) {
  std::int32_t const walked = tier_radix_walk(hist, want, pre, at, bits);
  for (std::int32_t i = 0; i < (1 << bits); ++i) hist[i] = 0;
  return walked + (1 << bits);
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
