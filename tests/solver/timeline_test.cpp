// The call timeline (kernels/include/placer/kernels/timeline.hpp) on the
// device twin, which runs the CUDA backend's host code (device_backend) over
// host memory: off unless asked, the same placements with it on, every step
// a round counts recorded by some call, and its JSON.
#include <placer/kernels/backend.hpp>
#include <placer/kernels/timeline.hpp>
#include <placer/solver/solver.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <string_view>

namespace placer {
namespace {

round_input scenario() {
  return traces::make_scenario(traces::scenario_preset("1k"));
}

kernels::step_counts round_steps(round_result const& r) {
  kernels::step_counts s;
  for (stage_timing const& t : r.timing) {
    if (t.stage == "total") {
      s.calls = t.calls;
      s.waits = t.waits;
      s.bytes_up = t.bytes_up;
      s.bytes_down = t.bytes_down;
    }
  }
  return s;
}

TEST(CallTimeline, RecordsNothingUnlessAsked) {
  kernels::timeline_record(false);
  (void)kernels::timeline_take();
  solver s(kernels::make_device_twin());
  round_input const in = scenario();
  (void)s.solve(in);
  EXPECT_TRUE(kernels::timeline_take().empty());
}

TEST(CallTimeline, TwinRecordsEveryCountedStepAndPlacesTheSame) {
  round_input const in = scenario();
  kernels::timeline_record(false);
  solver plain(kernels::make_device_twin());
  round_result const a = plain.solve(in);

  solver recorded(kernels::make_device_twin());
  kernels::timeline_record(true);
  (void)kernels::timeline_take();
  round_result const b = recorded.solve(in);
  std::vector<kernels::timeline_call> const calls = kernels::timeline_take();
  kernels::timeline_record(false);

  ASSERT_EQ(a.placements.size(), b.placements.size());
  for (std::size_t k = 0; k < a.placements.size(); ++k) {
    EXPECT_EQ(a.placements[k].job, b.placements[k].job);
    EXPECT_EQ(a.placements[k].replicas, b.placements[k].replicas);
  }
  kernels::step_counts sum;
  int tiers = 0, waits = 0;
  for (kernels::timeline_call const& c : calls) {
    sum += c.steps;
    EXPECT_LE(c.host_begin_ns, c.host_end_ns) << c.what;
    EXPECT_EQ(c.gpu_begin_ns, -1) << c.what;  // the twin has no GPU
    if (std::string_view(c.what) == "tier_kernel") {
      ++tiers;
      EXPECT_GT(c.phase_sum_ns, 0);
      EXPECT_EQ(c.steps.calls, 1);
    }
    if (std::string_view(c.what) == "wait") ++waits;
  }
  kernels::step_counts const counted = round_steps(b);
  EXPECT_GT(counted.calls, 0);
  EXPECT_EQ(sum.calls, counted.calls);
  EXPECT_EQ(sum.waits, counted.waits);
  EXPECT_EQ(sum.bytes_up, counted.bytes_up);
  EXPECT_EQ(sum.bytes_down, counted.bytes_down);
  EXPECT_GT(tiers, 0);
  EXPECT_GE(waits, tiers);  // a chain's results come back after a wait
}

TEST(CallTimeline, JsonHasEachCallsTimesFromTheOrigin) {
  kernels::timeline_call up;
  up.what = "up";
  up.host_begin_ns = 11'000;
  up.host_end_ns = 13'500;
  up.gpu_begin_ns = 14'000;
  up.gpu_end_ns = 20'000;
  up.steps.bytes_up = 4096;
  up.copies = 2;
  kernels::timeline_call tier;
  tier.what = "tier_kernel";
  tier.host_begin_ns = 21'000;
  tier.host_end_ns = 22'000;
  tier.steps.calls = 1;
  tier.steps.waits = 1;
  tier.phase_sum_ns = 750'000;
  std::ostringstream out;
  kernels::timeline_json(out, {up, tier}, 10'000);
  EXPECT_EQ(out.str(),
            "[\n  {\"what\":\"up\",\"host_begin_us\":1,\"host_us\":2.5,\"gpu_begin_us\":4,\"gpu_us\":6,\"calls\":0,"
            "\"waits\":0,\"bytes_up\":4096,\"bytes_down\":0,\"copies\":2},\n"
            "  {\"what\":\"tier_kernel\",\"host_begin_us\":11,\"host_us\":1,\"gpu_begin_us\":null,\"gpu_us\":null,"
            "\"calls\":1,\"waits\":1,\"bytes_up\":0,\"bytes_down\":0,\"copies\":0,\"phase_sum_us\":750}\n]");
  std::ostringstream none;
  kernels::timeline_json(none, {}, 0);
  EXPECT_EQ(none.str(), "[]");
}

}  // namespace
}  // namespace placer
