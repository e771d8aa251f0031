#pragma once
// The across-round policies (docs/policies.md): backfill with reservations,
// minimum-cost preemption, capacity loaning and reclaim, elastic scaling,
// delay scheduling. Each works on a work_state (the round as the decisions
// so far leave it) and calls the one-round assignment (`core_fn`: the
// solver's pipeline with every cross-round policy off) on sub-problems.
//
// queue_round.cpp runs them in this order:
//   delay plan (rewrites sensitive gangs) -> core assignment -> reclaim ->
//   elastic scale-in for blocked jobs -> preemption -> network preemption ->
//   backfill -> elastic scale-out (held back while equal or higher priority
//   work is blocked for capacity) -> delay settle (timers) -> metrics.
//
// Every function keeps these invariants: nothing over-commits a node; a
// placement in `out` is applied to `ws` (and removed from it if dropped);
// a preempted gang is stopped whole; indices are into ws.in.pending.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace placer::detail {

/// One-round assignment of a round_input (no cross-round policy).
using core_fn = std::function<round_result(round_input const&)>;

/// The round as the decisions so far leave it.
class work_state {
 public:
  explicit work_state(round_input const& in);

  round_input const& in;             ///< the request as received
  cluster state;                     ///< free resources after the decisions so far
  std::vector<running_job> running;  ///< given running jobs, then jobs started this round
  std::vector<char> alive;           ///< running[r] still runs (0 once stopped)
  std::vector<std::int32_t> started_from;  ///< running[r] -> pending index if started this round, else -1

  /// Starts pending job j on `reps` (resources taken from `state`; a
  /// running entry appended with estimated_end = now + estimated_duration).
  /// Throws logic_error(internal) if that would over-commit. Returns its running index.
  std::size_t start(std::int32_t j, std::vector<replica_placement> const& reps);
  /// Stops running[r] whole, giving its resources back.
  void stop(std::size_t r);
  /// Removes replicas (indices into running[r].replicas) of an elastic job.
  /// Returns the removed placements.
  std::vector<replica_placement> shrink(std::size_t r, std::vector<std::size_t> const& replica_indices);
  /// Adds replicas to running[r] (resources taken from `state`).
  void grow(std::size_t r, std::vector<replica_placement> const& reps);

  /// Running index of the job started this round from pending j, or -1.
  [[nodiscard]] std::int64_t running_of(std::int32_t j) const;

  /// Lost work if running[r] were preempted now: milli-GPU x seconds since
  /// its last checkpoint (start_time when never checkpointed).
  [[nodiscard]] std::int64_t lost_work(std::size_t r) const;
  /// Seconds of running[r]'s work a preemption now would lose.
  [[nodiscard]] std::int64_t lost_seconds(std::size_t r) const;

  /// The round's time budget (empty = none): once it says so, the policies
  /// stop trying more and the round answers with what it has.
  std::function<bool()> late;
  [[nodiscard]] bool out_of_time() const { return late && late(); }

 private:
  void take(demand const& d, replica_placement const& rp, char const* what);
  /// take() for every replica, all or none: on a throw the ones taken are given back.
  void take_all(demand const& d, std::vector<replica_placement> const& reps, char const* what);
  void give(demand const& d, replica_placement const& rp);
};

/// Gives a running job's resources back to c, capped at capacity so an
/// inconsistent snapshot cannot create capacity out of nothing (indices out
/// of range are skipped). work_state::stop and the backfill's future states
/// both release through it.
void release_replica(cluster& c, demand const& d, replica_placement const& rp);
void release_job(cluster& c, running_job const& rj);

/// Options for one call of the core on a sub-problem.
struct sub_round {
  std::vector<std::int32_t> jobs;            ///< indices into ws.in.pending
  std::vector<job> const* overrides = nullptr;  ///< if set: replaces ws.in.pending[j] by (*overrides)[j]
  std::vector<char> const* hidden = nullptr;    ///< per node: 1 = not offered to these jobs
};

/// Runs the core on `sub` against ws.state; placements and unplaced refer
/// to ws.in.pending indices. Does not apply anything to ws.
round_result assign_jobs(core_fn const& core, work_state const& ws, sub_round const& sub);

/// The job as the core places it: with the elastic policy on, an elastic
/// job starts as a gang of job::start_replicas() (queue_round's rewrite).
job as_placed(job j, round_input const& in);

/// Queue order: priority (high first), then submit time, then index.
std::vector<std::int32_t> queue_order(round_input const& in, std::vector<std::int32_t> const& jobs);

// ----------------------------------------------------------------- policies

/// Reclaim (loaning.cpp): takes loaned nodes back for inference. Nodes are
/// chosen one at a time by lowest server preemption cost (jobs that would
/// be preempted; an elastic job that can shrink and stay >= min costs 0),
/// recomputed after each choice, until the unplaced inference jobs in
/// `inference_jobs` fit (then they are placed) or, when
/// ws.in.pol.queue.reclaim_nodes > 0, exactly that many nodes are free of
/// training. Appends to out.reclaimed_nodes, out.preemptions (reason
/// "reclaim"), out.scale_ins, out.placements; removes the placed jobs from
/// out.unplaced_jobs.
/// `overrides` (may be null) gives the jobs' shapes as the core placed them.
/// A partly placed job with a required topology is left alone (its missing
/// replicas could not join the domain it holds).
void reclaim_loaned(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& inference_jobs,
                    std::vector<job> const* overrides, round_result& out);

/// Minimum-cost preemption (preemption.cpp) for the unplaced jobs `jobs`
/// (in queue order): victims are alive, preemptible running jobs of
/// strictly lower priority (network scope: also insensitive, i.e.
/// network_sensitivity < threshold); cost = lost_work; a gang victim is
/// stopped whole. Gangs and topology jobs look per domain of their level
/// (network scope: the consolidation level). Places the job when a victim
/// set is found; appends preemptions (reason "priority" or "network").
enum class preempt_scope { priority, network };
void preempt_for(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& jobs, preempt_scope scope,
                 std::vector<job> const* overrides, round_result& out);

/// Backfill (backfill.cpp), EASY or conservative: walks the queue; the first
/// blocked job(s) get reservations (earliest start and node set from running
/// jobs' estimated ends; a job past its estimate is assumed to end at
/// now + 1); placements this round that would delay a reservation are
/// undone and re-solved so they cannot. Appends out.reservations; blocked
/// jobs' unplaced reason becomes Reserved.
/// `pinned` (per pending job, may be null): placements backfill must keep
/// because resources were freed for them this round (reclaim, scale-in,
/// preemption); undoing them would waste what was freed.
void backfill(core_fn const& core, work_state& ws, std::vector<job> const* overrides, std::vector<char> const* pinned,
              round_result& out);

/// Elastic scale-out (elastic.cpp): spare GPUs to elastic jobs (placed this
/// round at their start size, or running below their maximum) by a
/// multiple-choice knapsack on estimated JCT reduction; extra replicas go
/// into the job's placement (pending) or out.scale_outs (running). Never
/// uses nodes held by out.reservations.
void elastic_scale_out(core_fn const& core, work_state& ws, round_result& out);

/// Elastic scale-in (elastic.cpp): extra workers are opportunistic. For each
/// blocked job in `jobs` (queue order; shape (*overrides)[j] when given),
/// finds extra replicas (above min_replicas, never below it nor below 1) of
/// alive given running elastic jobs of equal or lower priority whose
/// removal lets the whole job fit: fewest replicas first, then least JCT
/// loss (the scale-out's linear model), then node / domain index; per
/// domain of its required topology level, else the whole cluster. The set
/// is confirmed by the core; then the extras are removed (ws.shrink, the
/// donors' estimated_end moves later), out.scale_ins gets one entry per job
/// (reason "make-room", merged within this step) and the job starts with
/// the core's placement (a partial placement of it is replaced). Nothing
/// changes for a job that would not be placed whole. No lost work.
void elastic_scale_in_for(core_fn const& core, work_state& ws, std::vector<std::int32_t> const& jobs,
                          std::vector<job> const* overrides, round_result& out);

/// One group of the multiple-choice knapsack: items[k] = (weight, value)
/// for taking k+1 units of the group; at most one item per group.
struct knapsack_group {
  std::vector<std::int64_t> weight;
  std::vector<std::int64_t> value;
};
/// Optimal choice (dynamic programming): per group the item index taken,
/// or -1. Ties broken toward lower weight, then lower group index.
std::vector<std::int32_t> solve_mck(std::vector<knapsack_group> const& groups, std::int64_t capacity);

/// Delay scheduling (delay.cpp). plan: for every communication-heavy gang
/// whose wait (now - submit_time) is below its class timer, an override
/// requiring a consolidated placement (topology_mode required at the
/// lowest level whose domains can hold it). settle: jobs still unplaced
/// under such an override are reported Deferred; memory records waits of
/// jobs placed consolidated after waiting and re-tunes the timers;
/// out.delay_timers lists them.
struct delay_plan {
  std::vector<job> overrides;            ///< a copy of ws.in.pending with the rewrites
  std::vector<char> deferred_candidate;  ///< per pending job: 1 = rewritten to wait
  /// Filled by queue_round after the assignment (before settle_delays
  /// reads it), per pending job: 1 = a
  /// candidate left unplaced that could start now spread, so it waits for
  /// consolidation by choice (Deferred, spared by priority preemption,
  /// helped by network preemption). A candidate that has no room even
  /// spread waits for capacity like any blocked job, with the reason the
  /// core gives it without the rewrite (`spread_reasons`).
  std::vector<char> by_choice;
  std::vector<unplaced> spread_reasons;
};
// plan_delays must fill overrides with all of ws.in.pending (rewritten or
// not) and deferred_candidate with one entry per pending job.
delay_plan plan_delays(work_state const& ws, queue_memory& memory);
void settle_delays(work_state const& ws, delay_plan const& plan, queue_memory& memory, round_result& out);

/// The delay-scheduling job class of a job ("" when it is not a
/// communication-heavy multi-node gang under the policy's threshold).
std::string delay_class(job const& j, round_input const& in);

/// Runs the whole round with the cross-round policies (queue_round.cpp);
/// the cluster as the round leaves it goes to *final_state (for metrics).
/// Elastic jobs are placed at their start size by the core (a gang), then
/// grown.
/// `out_of_time`: the round's budget; past it, the steps after the core
/// assignment are skipped or cut short (each keeps what it has done).
round_result queue_round(core_fn const& core, round_input const& in, queue_memory* memory, cluster* final_state,
                         std::function<bool()> out_of_time = {});

}  // namespace placer::detail
