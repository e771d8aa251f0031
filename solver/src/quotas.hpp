#pragma once
// Queues with limits (model.hpp queue_spec; docs/architecture.md, "Queues").
// Admission in queue order (priority, then submission): a job is admitted
// when its queue and every ancestor stay within their limits with the
// job's whole demand (an elastic job at its largest) added to what their
// running work and the jobs admitted before it hold. A job admitted but not
// placed holds its share for that pass; solver::second_pass admits the
// refused jobs again against what was placed (rounds without cross-round
// policies).

#include <placer/solver/model.hpp>

#include <cstdint>
#include <vector>

namespace placer::detail {

/// Throws logic_error(invalid_argument) naming the first problem: a queue
/// without a name or named twice, a parent that is not a queue, a cycle, a
/// limit below -1, a pending or running job naming a queue the round does
/// not define. Nothing when the round has no queues.
void validate_queues(round_input const& in);

struct quota_plan {
  std::vector<std::int32_t> admitted;  ///< pending indices, ascending
  std::vector<unplaced> refused;       ///< QuotaExceeded, naming the queue and its usage
  std::vector<std::int32_t> frozen;    ///< running elastic jobs under a limit: they do not grow
};

/// The admission of a validated round with queues.
quota_plan plan_quotas(round_input const& in);

}  // namespace placer::detail
