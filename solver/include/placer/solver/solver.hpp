#pragma once
// One scheduling round: validate -> flatten -> score on the backend ->
// assign -> metrics. The shape follows cuOpt's solve(data, settings).
//
//   placer::solver s(placer::kernels::select_backend("auto"));
//   placer::round_result r = s.solve(input);   // throws logic_error on invalid input
//
// A solver is not thread-safe (it owns the backend's stream and buffers);
// give each worker thread its own.

#include <placer/kernels/backend.hpp>
#include <placer/solver/model.hpp>

#include <functional>
#include <memory>

namespace placer::kernels {
struct round_arrays;
}

namespace placer {

/// Throws placer::logic_error(invalid_argument) naming the first problem:
/// negative or out-of-range demands, placements pointing at nodes or GPUs
/// that do not exist, topology levels beyond the tree, and so on.
void validate(round_input const& in);

/// explain_unplaced's buffers, reused across rounds (the solver keeps one):
/// per-node arrays and per-shape counts.
class explain_scratch {
 public:
  explain_scratch();
  ~explain_scratch();
  std::vector<std::int32_t> placed_priority, paths;
  std::vector<std::int64_t> per_domain;  ///< per (shape, domain)
  std::vector<std::int64_t> per_domain_empty;  ///< per (shape, domain), the nodes empty
  /// The round's arrays as flattened before its placements, one node per
  /// node of the round's cluster, when the caller has them: a shape's
  /// constraints are evaluated once a constraint group (node_group), and
  /// every check once a set of score twins (score_as). Null: once a node.
  kernels::round_arrays const* round = nullptr;
  /// node_domain_paths of the round's cluster, when the caller has them.
  /// Null: found here when a shape requires a topology level.
  std::vector<std::int32_t> const* node_paths = nullptr;
  std::vector<std::int32_t> twin_slot;                ///< per twins' first node: its answers' slot, -1 none
  std::vector<std::int32_t> fact_of;                  ///< per unplaced job: its shape, -1 not explained
  std::vector<std::int8_t> group_miss;                 ///< per (shape, group): constraint_miss, -1 not yet
  std::vector<taint const*> group_taint;              ///< per (shape, group): the excluding taint
  std::vector<std::int32_t> group_tainted;            ///< per (shape, group): nodes its taint excluded
  std::vector<std::int32_t> same_room;                ///< per shape: the first shape with its demand
  std::vector<std::int32_t> by_room;                  ///< the shapes sorted by demand (same_room's)
  std::vector<std::pair<std::uint64_t, std::int32_t>> shape_table;  ///< a shape hash -> its newest shape
  std::vector<std::int32_t> older_shape;              ///< per shape: the one before it of its hash, -1 none
  struct shapes;
  std::unique_ptr<shapes> shapes_;
};

/// Fills `why` of every unplaced job whose reason is about room (and
/// appends its words to `detail`): the round's nodes counted by the first
/// check each fails for one replica at the round's start, in the order of
/// node_exclusion, nodes taken by this round's placements and by which
/// priority, and the replicas the cluster (for a required topology: the
/// best domain) could hold against those required. Jobs of one shape share
/// one explanation, and every shape one pass over the nodes; a round with
/// every job placed costs nothing. A round explains at most 2^24 cells (a
/// shape's nodes, and its domains for a required topology level), shapes
/// in job order; the unplaced jobs of shapes past that say "Not explained"
/// in `detail`, with `why.nodes` 0.
void explain_unplaced(round_input const& in, round_result& out, explain_scratch* scratch = nullptr);

/// An explanation in kube-scheduler's words: "0/1,280 nodes are available:
/// 800 node(s) had no allowed GPU model, 390 Insufficient nvidia.com/gpu,
/// 60 node(s) had untolerated taint {team=infer:NoSchedule}." and, for
/// gangs, "Resources were found for 5 replica(s) while 17 are required.";
/// "" when not explained.
std::string describe(explanation const& e);
/// The same, appended to `out`.
void describe(explanation const& e, std::string& out);

class solver {
 public:
  explicit solver(std::unique_ptr<kernels::backend> backend);
  ~solver();
  solver(solver&&) noexcept;
  solver& operator=(solver&&) noexcept;

  /// Solves one round. Never over-commits any node or GPU resource. With a
  /// cross-round policy on (in.pol.queue), `memory` carries what the
  /// policies remember between rounds of one session (delay timers); null
  /// = a fresh memory for this round only.
  round_result solve(round_input const& in, queue_memory* memory = nullptr);

  [[nodiscard]] kernels::backend& backend() { return *backend_; }

 private:
  /// solve() once the queues' admission is done (the round as given).
  round_result solve_admitted(round_input const& in, queue_memory* memory);
  /// Queues: a second admission of the `refused` jobs against what the
  /// first pass placed (`out`), solved on the cluster it leaves; merges
  /// into `out` and leaves in `refused` what stays unplaced. `deadline_us`:
  /// what is left of the round's budget (0 = none).
  void second_pass(round_input const& in, std::uint64_t deadline_us, std::vector<unplaced>& refused,
                   round_result& out);
  /// One round's assignment, no cross-round policy. `round_late`: the
  /// budget of the round it is part of (cross-round), beside its own.
  round_result solve_one(round_input const& in, std::function<bool()> const& round_late = {});
  /// How many re-runs the repair search may take on this round (0: none).
  static std::int32_t repair_tries(round_input const& in);
  /// The repair search (solver.cpp): promotes unplaced jobs while the placed
  /// value grows; leaves the best result in `out` and its state in the workspace.
  void repair(round_input const& in, kernels::score_params const& p, std::int32_t tries,
              std::function<bool()> const& out_of_time, round_result& out);
  /// Queue order (policy::order, fifo or strict) when a placer round's
  /// result `out` may have let a job overtake one that waits for capacity
  /// (detail::overtakes): the round is assigned again one job at a time in
  /// submission order (assign_mode::greedy), each job against exactly the
  /// jobs ahead of it, and `out` and the state become that round's.
  void keep_order(round_input const& in, kernels::score_params const& p, std::function<bool()> const& out_of_time,
                  round_result& out);
  /// Queue order fifo, a small round where a job waits for capacity: the
  /// same order assigned again with Slurm's node choice (assigner::linear):
  /// its jobs and GPUs become the round's floor (the workspace's floor_*),
  /// and `out` and the state become that round's when `out` falls short of
  /// it, or the candidate starts more jobs, or as many with more placed, or
  /// the same with an earlier job (earlier_jobs, solver.cpp).
  void linear_candidate(round_input const& in, kernels::score_params const& p,
                        std::function<bool()> const& out_of_time, round_result& out);
  /// The round's state as the score stage left it (the copies solve_one
  /// keeps when the repair search or queue order may re-run the assignment;
  /// the cells scored again where the backend kept them).
  void restore_scored(kernels::score_params const& p);

  /// solve_one's buffers (round matrices, score matrix, assigner scratch),
  /// reused across rounds: they grow to the high-water mark, so a steady
  /// stream of same-sized rounds allocates only what goes into the result.
  struct workspace;

  std::unique_ptr<kernels::backend> backend_;
  std::unique_ptr<workspace> ws_;
};

}  // namespace placer
