// The GPU model (kernels/include/placer/kernels/gpu_model.hpp): the tier
// program on a CTA's worth of fibers places what the CPU backend places
// (so its counts are of the program the GPU runs), and its counts behave as
// a team's must. Its fit to the recorded GPU rounds is checked by
// GpuModel.PredictsTheRecordedRounds (bench/gpu_model/fit.py --check).
#include <placer/kernels/gpu_model.hpp>
#include <placer/solver/gpu_prediction.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include <string_view>
#include <utility>

#include "../../kernels/model/fibers.hpp"
#include "../support/parity.hpp"

namespace placer {
namespace {

// Teams of 1, 37 (not a power of two: a loop that assumes one fails) and
// 512 workers, each meeting at the program's barriers as a CTA's threads do;
// a round's offers on warps of 32 (the last of 37's a warp of 5), ranked
// or by the radix search (offer_pairs 0: every row searched, its passes'
// counts shared by a warp's workers), or by the whole team.
TEST(GpuModel, PlacesWhatTheCpuPlaces) {
  struct way {
    int threads;
    int offer_pairs = -1;
    int groups = kernels::tier_offer_groups_always;
  };
  for (way const w : {way{1}, way{37}, way{512}, way{64, 0}, way{37, 0}, way{37, -1, 0}, way{37, -1, 8}}) {
    SCOPED_TRACE(testing::Message() << w.threads << " workers, pairs " << w.offer_pairs << ", groups " << w.groups);
    solver cpu(kernels::select_backend("cpu"));
    kernels::gpu_counts counts;
    kernels::gpu_model_config config{w.threads};
    config.offer_pairs = w.offer_pairs;
    config.offer_groups = w.groups;
    solver model(kernels::make_gpu_model(config, &counts));
    int const rounds = w.threads == 512 ? 20 : w.offer_pairs >= 0 || w.groups != kernels::tier_offer_groups_always ? 30 : 60;
    testing_support::expect_parity(cpu, model, rounds, 5 + static_cast<std::uint64_t>(w.threads));
    EXPECT_GT(counts.launches, 0);
    EXPECT_GT(counts.total().barriers, 0);
  }
}

// The program on a grid (tier_program.hpp, "The grid"): CTAs of 37 and
// 64 workers, 3 and 7 of them (a CTA per row of the floors, the leading
// one bidding, every one's share of the wide phases), and the GPU's 132
// CTAs of 512 on a 10k round, place what the CPU places.
TEST(GpuModel, AGridPlacesWhatTheCpuPlaces) {
  for (auto [threads, blocks] : {std::pair{37, 3}, std::pair{64, 7}}) {
    SCOPED_TRACE(testing::Message() << threads << " x " << blocks);
    solver cpu(kernels::select_backend("cpu"));
    kernels::gpu_model_config config{threads};
    config.blocks = blocks;
    config.grid_cells_from = 0;
    kernels::gpu_counts counts;
    solver model(kernels::make_gpu_model(config, &counts));
    testing_support::expect_parity(cpu, model, 40, 11 + static_cast<std::uint64_t>(blocks));
    EXPECT_GT(counts.total().grid_syncs, 0);
  }
  round_input const in = traces::make_scenario(traces::scenario_preset("10k"));
  kernels::gpu_model_config config;
  config.blocks = 132;
  solver cpu(kernels::select_backend("cpu"));
  kernels::gpu_counts counts;
  solver model(kernels::make_gpu_model(config, &counts));
  auto const a = cpu.solve(in);
  auto const b = model.solve(in);
  ASSERT_EQ(a.placements.size(), b.placements.size());
  for (std::size_t i = 0; i < a.placements.size(); ++i) {
    ASSERT_EQ(a.placements[i].job, b.placements[i].job);
    ASSERT_EQ(a.placements[i].replicas, b.placements[i].replicas);
  }
}

// A grid meets at its barriers where a CTA met at its own, and spreads the
// wide phases: the busiest CTA's refresh and floors work falls by more
// than half; the bidding rounds, on the leading CTA, meet at the same
// barriers, and their work differs by the order the grid lists the first
// bidders in (a row at a time with its floor, tier_first_bidders_of_row;
// a row's heap steps and a node's remembered rows depend on the order)
// only: 1.4% more in the bids at 10k.
TEST(GpuModel, AGridSpreadsTheWidePhases) {
  round_input in = traces::make_scenario(traces::scenario_preset("10k"));
  kernels::gpu_counts by[2];
  int const blocks[2] = {1, 16};
  for (int k = 0; k < 2; ++k) {
    kernels::gpu_model_config config;
    config.blocks = blocks[k];
    config.grid_cells_from = 0;
    solver s(kernels::make_gpu_model(config, &by[k]));
    (void)s.solve(in);
  }
  EXPECT_EQ(by[0].total().grid_syncs, 0);
  EXPECT_GT(by[1].total().grid_syncs, 0);
  for (int p : {kernels::tier_phase_refresh, kernels::tier_phase_floor}) {
    SCOPED_TRACE(kernels::tier_phase_names[p]);
    EXPECT_LT(by[1].phase[p].work * 2, by[0].phase[p].work);
  }
  for (int p : {kernels::tier_phase_bid, kernels::tier_phase_offer}) {
    SCOPED_TRACE(kernels::tier_phase_names[p]);
    EXPECT_EQ(by[1].phase[p].barriers, by[0].phase[p].barriers);
    EXPECT_NEAR(static_cast<double>(by[1].phase[p].work), static_cast<double>(by[0].phase[p].work),
                0.02 * static_cast<double>(by[0].phase[p].work));
  }
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  EXPECT_GT(cost.grid_sync_us, 0.0);
  EXPECT_LT(kernels::predict_tier_us(by[1], cost), kernels::predict_tier_us(by[0], cost));
  // Outside the phases: the records and the stages after each chain, which
  // on a grid meet at its barriers (the timeline's untimed grid barriers).
  EXPECT_EQ(by[0].outside.grid_syncs, 0);
  EXPECT_GT(by[0].outside.barriers, 0);
  EXPECT_GT(by[1].outside.grid_syncs, 0);
  EXPECT_GT(by[1].outside.work, 0);
  EXPECT_GT(kernels::predict_outside_us(by[1], cost),
            (cost.grid_sync_us + cost.grid_sync_per_cta_us * 16) * static_cast<double>(by[1].outside.grid_syncs) - 1e-9);
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
    solver s(kernels::make_gpu_model({.threads = threads[k], .blocks = 1}, &by[k]));
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
  // The offers of the rounds of few bids a row on warps, the others' by the
  // whole team (tier_offer_groups_upto): a 10k round has both.
  EXPECT_GT(by[0].offer_group.work, 0);
  EXPECT_GT(by[0].phase[kernels::tier_phase_offer].work, 0);
  EXPECT_EQ(by[0].offer_group.span + by[0].offer_group.chain, by[0].offer_group.work);
  EXPECT_EQ(by[2].offer_group.barriers, by[0].offer_group.barriers);
  for (int p : {kernels::tier_phase_refresh, kernels::tier_phase_floor, kernels::tier_phase_bid}) {
    SCOPED_TRACE(kernels::tier_phase_names[p]);
    EXPECT_LT(by[1].phase[p].span * 8, by[0].phase[p].span);  // 64 workers: most of the work shared
    EXPECT_LT(by[2].phase[p].span, by[1].phase[p].span);
  }
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  EXPECT_GT(cost.barrier_us, 0.0);
  EXPECT_GT(kernels::predict_tier_us(by[0], cost), kernels::predict_tier_us(by[2], cost));
}

// A group barrier (a warp's, tier_offer_groups) keeps its workers in step:
// each leaves it with its group's busiest steps, the wait in the span and
// not in the work, and closes no interval; a group whose worker waits at
// the team's barrier instead is a program that would hang on a GPU.
TEST(GpuModel, GroupBarriersKeepAWarpInStep) {
  kernels::model::fibers f(8);
  std::vector<kernels::model::fibers::counts> seen;
  f.run(
      [&](int rank) {
        f.work(rank + 1);
        f.group_barrier(4);  // groups 0-3 and 4-7: 4 and 8 steps, then the barrier's
        f.work(1);
        f.barrier();
        f.work(rank == 5 ? 3 : 0);
        f.group_barrier(3);  // groups 0-2, 3-5, 6-7
      },
      [&](std::vector<kernels::model::fibers::counts> const& lanes, kernels::model::fibers::end const&) {
        seen.push_back(lanes.at(0));
      });
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].span, 8 + 1 + 1);
  EXPECT_EQ(seen[0].work, 36 + 8 + 8);  // each worker's own steps, its barrier step and the step after
  EXPECT_EQ(seen[1].span, 3 + 1);
  EXPECT_EQ(seen[1].work, 3 + 8);
  kernels::model::fibers g(4);
  EXPECT_THROW(g.run(
                   [&](int rank) {
                     if (rank == 1) {
                       g.barrier();
                     } else {
                       g.group_barrier(2);
                     }
                   },
                   [](auto const&, auto const&) {}),
               logic_error);
}

// The prediction adds what the caller measured of the host's stages.
TEST(GpuModel, PredictionAddsTheHostsStages) {
  round_input const in = traces::make_scenario(traces::scenario_preset("1k"));
  gpu_prediction const a = predict_gpu_round(in, {}, 0);
  gpu_prediction const b = predict_gpu_round(in, {}, 1000);
  EXPECT_GT(a.tier_us, 0);
  EXPECT_GT(a.calls, 0);
  EXPECT_GT(a.fixed_us, 0);
  EXPECT_DOUBLE_EQ(b.round_us() - a.round_us(), 1000.0);
}

// The launches, waits and copies are priced at the fixed costs the fit
// wrote (a calibration kit's, or assumed), each named with its source.
TEST(GpuModel, FixedCostsAreTheFittedOnes) {
  round_input const in = traces::make_scenario(traces::scenario_preset("1k"));
  gpu_prediction const a = predict_gpu_round(in, {}, 0);
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  EXPECT_GT(a.waits, 0);
  EXPECT_GT(a.bytes, 0);
  EXPECT_GT(a.grid_syncs, 0);  // the stage calls' phases
  EXPECT_DOUBLE_EQ(a.fixed_us, cost.launch_us * static_cast<double>(a.calls) +
                                   cost.wait_us * static_cast<double>(a.waits) +
                                   static_cast<double>(a.bytes) / (cost.copy_gbps * 1e3) +
                                   (cost.grid_sync_us + cost.grid_sync_per_cta_us * stage_grid_ctas) *
                                       static_cast<double>(a.grid_syncs));
  for (char const* name : {"launch_us: ", "wait_us: ", "copy_gbps: "}) {
    EXPECT_NE(std::string_view(cost.fixed_source).find(name), std::string_view::npos) << name;
  }
}

}  // namespace
}  // namespace placer
