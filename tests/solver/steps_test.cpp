// The backend's step counts (kernels/steps.hpp) of whole rounds, pinned: a
// change that adds launches or device-to-host waits to a round (a stage
// that reads a count back, a loop on the host around device calls) fails
// here, on the CPU backend, because the counting is in the code both
// backends share. On a GPU each call costs a launch and each wait a round
// trip, so these bounds bound the GPU round (docs/architecture.md).
#include <placer/solver/solver.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

namespace placer {
namespace {

stage_timing total_of(round_result const& r) {
  for (auto const& t : r.timing) {
    if (t.stage == "total") return t;
  }
  ADD_FAILURE() << "no total in the timing list";
  return {};
}

struct bound {
  char const* scenario;
  std::int64_t calls, waits;
};

class StepBounds : public ::testing::TestWithParam<bound> {};

TEST_P(StepBounds, RoundStaysWithinItsStepBudget) {
  auto const [name, max_calls, max_waits] = GetParam();
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  round_input const in = traces::make_scenario(traces::scenario_preset(name));
  round_result const r = s.solve(in);
  auto const total = total_of(r);
  std::printf("%s: %lld stage calls, %lld device-to-host waits, %zu jobs placed\n", name,
              static_cast<long long>(total.calls), static_cast<long long>(total.waits), r.placements.size());
  EXPECT_GT(total.calls, 0);
  EXPECT_GT(total.waits, 0);
  EXPECT_LE(total.calls, max_calls);
  EXPECT_LE(total.waits, max_waits);
  // The stages' counts add up to the round's.
  std::int64_t calls = 0, waits = 0;
  for (auto const& t : r.timing) {
    if (t.stage == "total") continue;
    calls += t.calls;
    waits += t.waits;
  }
  EXPECT_EQ(calls, total.calls);
  EXPECT_EQ(waits, total.waits);
  // A second round on the same solver counts the same: nothing carried over.
  auto const again = total_of(s.solve(in));
  EXPECT_EQ(again.calls, total.calls);
  EXPECT_EQ(again.waits, total.waits);
}

// The targets are 300 calls and 64 waits at 10k, 600 and 128 at
// 100k. Both count 36 calls and 31 waits today (one tier program and one
// batched domain_capacity per group); the bounds keep a margin over that,
// well inside the targets, so a stage that starts running per job shows.
INSTANTIATE_TEST_SUITE_P(Scenarios, StepBounds,
                         ::testing::Values(bound{"10k", 64, 48}, bound{"100k", 64, 48}),
                         [](auto const& info) { return std::string("s") + info.param.scenario; });

}  // namespace
}  // namespace placer
