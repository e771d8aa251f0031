// Queue order and aging (queue_order.hpp).
#include "queue_order.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

namespace placer::detail {

round_input aged(round_input const& in) {
  round_input out = in;
  out.pol.age.weight = 0;
  auto const& a = in.pol.age;
  if (a.weight < 0 || a.max_age_s < 1) {
    throw logic_error(error_code::invalid_argument, "policy: aging needs weight >= 0 and max_age_s >= 1");
  }
  std::vector<std::int32_t> explicit_levels;
  for (auto const& j : in.pending) explicit_levels.push_back(j.priority);
  std::sort(explicit_levels.begin(), explicit_levels.end());
  explicit_levels.erase(std::unique(explicit_levels.begin(), explicit_levels.end()), explicit_levels.end());
  for (auto& j : out.pending) {
    auto effective = static_cast<std::int64_t>(j.priority) + a.points(in.now, j.submit_time);
    if (!a.cross_priority) {
      // One short of the next higher explicit priority: never jumps a class.
      auto const next = std::upper_bound(explicit_levels.begin(), explicit_levels.end(), j.priority);
      if (next != explicit_levels.end()) effective = std::min<std::int64_t>(effective, static_cast<std::int64_t>(*next) - 1);
    }
    j.priority = static_cast<std::int32_t>(std::min<std::int64_t>(effective, std::numeric_limits<std::int32_t>::max()));
  }
  return out;
}

bool overtakes(round_input const& in, round_result const& r, std::vector<std::int32_t> const& fifo,
               std::vector<std::int32_t> const& fifo_priority, std::vector<std::int32_t> const& group_of) {
  // 1 placed, 2 waits for capacity, 0 neither.
  std::vector<std::uint8_t> state(in.pending.size(), 0);
  for (auto const& p : r.placements) state[static_cast<std::size_t>(p.job)] = 1;
  for (auto const& u : r.unplaced_jobs) {
    // A job placed in part has started.
    if (waits_for_capacity(u.reason) && state[static_cast<std::size_t>(u.job)] == 0) state[static_cast<std::size_t>(u.job)] = 2;
  }
  // Backwards through the order: the earliest group in which a later job
  // (of the level; strict: of the queue) was placed. A waiting job whose
  // group ran before it was tried with none of them placed.
  constexpr std::int32_t none = std::numeric_limits<std::int32_t>::max();
  bool const strict = in.pol.order == queue_order::strict;
  std::vector<std::pair<std::string_view, std::int32_t>> queues;  // strict: per queue
  std::int32_t level_min = none;
  for (std::size_t k = fifo.size(); k-- > 0;) {
    auto const j = static_cast<std::size_t>(fifo[k]);
    if (!strict && k + 1 < fifo.size() && fifo_priority[k] != fifo_priority[k + 1]) {
      level_min = none;
    }
    std::int32_t* later = &level_min;
    if (strict) {
      auto const& q = in.pending[j].queue;
      auto it = std::find_if(queues.begin(), queues.end(), [&](auto const& x) { return x.first == q; });
      if (it == queues.end()) it = queues.insert(queues.end(), {q, none});
      later = &it->second;
    }
    auto const g = group_of.empty() ? -1 : group_of[j];
    // Strict: a job that waits blocks its queue, whenever the later one ran.
    if (state[j] == 2 && *later != none && (strict || g < 0 || *later <= g)) return true;
    if (state[j] == 1) *later = std::min(*later, g < 0 ? -1 : g);
  }
  return false;
}

}  // namespace placer::detail
