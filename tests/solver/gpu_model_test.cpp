// The GPU model (kernels/include/placer/kernels/gpu_model.hpp): the tier
// program on a CTA's worth of fibers places what the CPU backend places
// (so its counts are of the program the GPU runs), and its counts behave as
// a team's must. Its fit to the recorded GPU rounds is checked by
// GpuModel.PredictsTheRecordedRounds (bench/gpu_model/fit.py --check).
#include <placer/kernels/gpu_model.hpp>
#include <placer/solver/gpu_prediction.hpp>
#include <placer/solver/solver.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include "../support/parity.hpp"

namespace placer {
namespace {

// Teams of 1, 37 (not a power of two: a loop that assumes one fails) and
// 512 workers, each meeting at the program's barriers as a CTA's threads do.
TEST(GpuModel, PlacesWhatTheCpuPlaces) {
  for (int threads : {1, 37, 512}) {
    SCOPED_TRACE(threads);
    solver cpu(kernels::select_backend("cpu"));
    kernels::gpu_counts counts;
    solver model(kernels::make_gpu_model({threads}, &counts));
    testing_support::expect_parity(cpu, model, threads == 512 ? 20 : 60, 5 + static_cast<std::uint64_t>(threads));
    EXPECT_GT(counts.launches, 0);
    EXPECT_GT(counts.total().barriers, 0);
  }
}

// One worker's span and chained steps are its work; more workers share the wide phases' work
// (the span falls) but meet at the same barriers; a span is never more
// than the work; and the cost grows with the counts.
TEST(GpuModel, CountsBehaveAsATeamsMust) {
  round_input in = traces::make_scenario(traces::scenario_preset("10k"));
  in.pol.order = queue_order::pack;
  kernels::gpu_counts by[3];
  int const threads[3] = {1, 64, 512};
  std::size_t placed[3] = {};
  for (int k = 0; k < 3; ++k) {
    solver s(kernels::make_gpu_model({threads[k]}, &by[k]));
    placed[k] = s.solve(in).placements.size();
  }
  EXPECT_EQ(placed[0], placed[1]);
  EXPECT_EQ(placed[0], placed[2]);
  for (int p = 0; p < kernels::tier_phase_count; ++p) {
    SCOPED_TRACE(kernels::tier_phase_names[p]);
    EXPECT_EQ(by[0].phase[p].span + by[0].phase[p].chain, by[0].phase[p].work);
    EXPECT_EQ(by[1].phase[p].barriers, by[0].phase[p].barriers);
    EXPECT_EQ(by[2].phase[p].barriers, by[0].phase[p].barriers);
    for (auto const& c : by) EXPECT_LE(c.phase[p].span + c.phase[p].chain, c.phase[p].work);
  }
  for (int p : {kernels::tier_phase_refresh, kernels::tier_phase_floor, kernels::tier_phase_bid}) {
    SCOPED_TRACE(kernels::tier_phase_names[p]);
    EXPECT_LT(by[1].phase[p].span * 8, by[0].phase[p].span);  // 64 workers: most of the work shared
    EXPECT_LT(by[2].phase[p].span, by[1].phase[p].span);
  }
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  EXPECT_GT(cost.barrier_us, 0.0);
  EXPECT_GT(kernels::predict_tier_us(by[0], cost), kernels::predict_tier_us(by[2], cost));
}

// The prediction adds what the caller measured of the host's stages.
TEST(GpuModel, PredictionAddsTheHostsStages) {
  round_input const in = traces::make_scenario(traces::scenario_preset("1k"));
  gpu_prediction const a = predict_gpu_round(in, {}, 0);
  gpu_prediction const b = predict_gpu_round(in, {}, 1000);
  EXPECT_GT(a.tier_us, 0);
  EXPECT_GT(a.calls, 0);
  EXPECT_GT(a.fixed_us, 5.0 * static_cast<double>(a.calls));
  EXPECT_DOUBLE_EQ(b.round_us() - a.round_us(), 1000.0);
}

}  // namespace
}  // namespace placer
