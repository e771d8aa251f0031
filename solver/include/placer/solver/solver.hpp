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

namespace placer {

/// Throws placer::logic_error(invalid_argument) naming the first problem:
/// negative or out-of-range demands, placements pointing at nodes or GPUs
/// that do not exist, topology levels beyond the tree, and so on.
void validate(round_input const& in);

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
  /// One round's assignment, no cross-round policy. `round_late`: the
  /// budget of the round it is part of (cross-round), beside its own.
  round_result solve_one(round_input const& in, std::function<bool()> const& round_late = {});
  /// How many re-runs the repair search may take on this round (0: none).
  static std::int32_t repair_tries(round_input const& in);
  /// The repair search (solver.cpp): promotes unplaced jobs while the placed
  /// value grows; leaves the best result in `out` and its state in the workspace.
  void repair(round_input const& in, kernels::score_params const& p, std::int32_t tries,
              std::function<bool()> const& out_of_time, round_result& out);

  /// solve_one's buffers (round matrices, score matrix, assigner scratch),
  /// reused across rounds: they grow to the high-water mark, so a steady
  /// stream of same-sized rounds allocates only what goes into the result.
  struct workspace;

  std::unique_ptr<kernels::backend> backend_;
  std::unique_ptr<workspace> ws_;
};

}  // namespace placer
