#pragma once
// Queue order and aging (policy::order, policy::age; docs/policies.md,
// "Queue order"). The solver (solver.cpp, solver::keep_order) uses these to
// check a largest-first round against submission order and to build the
// order it then keeps.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <vector>

namespace placer::detail {

/// Whether a job left out for this reason would have started had it found
/// the capacity: the jobs queue order protects, and strict order blocks on.
[[nodiscard]] constexpr bool waits_for_capacity(unplaced_reason r) {
  return r == unplaced_reason::insufficient_capacity || r == unplaced_reason::gang_incomplete ||
         r == unplaced_reason::topology_unsatisfiable;
}

/// The round with each job's priority raised by its wait (policy::age), and
/// aging off: the effective priorities the order works on.
[[nodiscard]] round_input aged(round_input const& in);

/// Whether result r may have let a job overtake one that waits for
/// capacity. fifo: a job later in `fifo` (job_order without largest_first;
/// `fifo_priority` is its order_scratch::priority) of the same priority is
/// placed in a group that ran no later than the waiting job's (`group_of`,
/// assigner_scratch; empty: every group at once); a job that waits after
/// only earlier jobs took capacity was not overtaken, as at its turn it
/// would have had no more. strict: any later job of the same queue is
/// placed.
[[nodiscard]] bool overtakes(round_input const& in, round_result const& r, std::vector<std::int32_t> const& fifo,
                             std::vector<std::int32_t> const& fifo_priority, std::vector<std::int32_t> const& group_of);

}  // namespace placer::detail
