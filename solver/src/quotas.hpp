#pragma once
// Queues with limits, guarantees and weights (model.hpp queue_spec;
// docs/architecture.md, "Queues").
//
// Deserved shares. Per resource (milli-GPU, milli-CPU), the cluster's
// healthy capacity is divided among the roots, and each queue's share
// among its children, by water-filling: every queue first gets its
// guarantee, then what is left goes by weight, no queue getting more than
// its demand (its subtree's running work plus its pending jobs, elastic
// ones at their largest) or its limit.
//
// Admission, in queue order (priority, then submission): a job is admitted
// when its queue and every ancestor stay within their bounds with the
// job's whole demand added to what their running work and the jobs
// admitted before it hold. The bound is the limit (by_limit), or the
// smaller of the limit and the deserved share (by_share). A job admitted
// but not placed holds its share for that pass only.
//
// solver::solve runs, on rounds without cross-round policies other than
// preemption, a by_share pass and then (solver::second_pass, a plain round
// that preempts nothing) a by_limit pass for the refused jobs on what the
// first left: queues within their share go first, and the capacity they
// leave is borrowed by the others, up to their limits. With backfill,
// elastic scaling or delay scheduling on, one by_limit pass. Preemption
// keeps every guarantee and reclaims for queues below theirs
// (queue_guarantees).

#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace placer::detail {

/// Throws logic_error(invalid_argument) naming the first problem: a queue
/// without a name or named twice, a parent that is not a queue, a cycle, a
/// limit below -1, a guarantee below 0 or above the queue's limit, a weight
/// outside 1..1000, a pending or running job naming a queue the round does
/// not define. Nothing when the round has no queues.
void validate_queues(round_input const& in);

/// Milli-GPU and milli-CPU per queue of round_input::queues.
struct queue_amounts {
  std::vector<std::int64_t> gpu, cpu;
};

/// The deserved shares of a validated round's queues (see above).
queue_amounts deserved_shares(round_input const& in);

enum class admission { by_limit, by_share };

struct quota_plan {
  std::vector<std::int32_t> admitted;  ///< pending indices, ascending
  std::vector<unplaced> refused;       ///< QuotaExceeded, naming the queue and its usage
  std::vector<std::int32_t> frozen;    ///< running elastic jobs under a limit: they do not grow
};

/// The admission of a validated round with queues.
quota_plan plan_quotas(round_input const& in, admission mode);

/// The queues' guarantees as the preemption policy sees them: running work
/// may be stopped for a job only if every queue it is in (its own and its
/// ancestors) keeps at least its guarantee, the job's start counted; and a
/// job whose queues (below their lowest common one with the victim's) stay
/// within their guarantees with it reclaims such work whatever its priority. Inactive (every check passes, nobody reclaims)
/// when no queue has a guarantee.
class queue_guarantees {
 public:
  explicit queue_guarantees(round_input const& in);
  [[nodiscard]] bool active() const { return active_; }

  /// Usage of every queue (its subtree) by the running jobs with alive[r] != 0.
  void measure(std::vector<running_job> const& running, std::vector<char> const& alive);
  /// The queue of a job (-1: none, or the round has no guarantees).
  [[nodiscard]] std::int32_t index(std::string const& name) const;
  /// Whether a job of queue q needing (gpu, cpu) fits within the guarantees
  /// of its queues below their common ancestor with queue v (false when
  /// either queue contains the other).
  [[nodiscard]] bool within_guarantee(std::int32_t q, std::int32_t v, std::int64_t gpu, std::int64_t cpu) const;
  /// Whether stopping `victims` (running indices) and starting a job of
  /// queue q that takes (gpu, cpu) leaves every queue the victims are in
  /// (their queues and ancestors) at or above its guarantee, or at what it
  /// holds now if that is less.
  [[nodiscard]] bool keeps_guarantees(std::int32_t q, std::int64_t gpu, std::int64_t cpu,
                                      std::vector<running_job> const& running,
                                      std::vector<std::size_t> const& victims) const;

 private:
  [[nodiscard]] bool contains(std::int32_t ancestor, std::int32_t q) const;

  bool active_ = false;
  std::vector<queue_spec> const* specs_ = nullptr;
  std::vector<std::int32_t> parent_;
  std::unordered_map<std::string_view, std::int32_t> index_;
  queue_amounts used_;
  mutable queue_amounts delta_;          ///< keeps_guarantees' scratch, zero between calls
  mutable std::vector<char> touched_;    ///< likewise
};

}  // namespace placer::detail
