#pragma once
// The GPU model (kernels/model): what a round's tier programs cost on one
// CTA, predicted on a CPU. The device twin runs the CUDA backend's code with
// its tier launches on `threads` emulated workers (fibers that meet at the
// program's barriers), and counts, for every phase of every tier: the
// barriers, the span (per barrier interval the most steps one worker took,
// summed: the critical path) and the work (every worker's steps). A cost
// model fitted to the recorded GPU phase times (bench/gpu_model/fit.py;
// bench/results/2026-11-26-h100*, -h200*) turns the counts into time.
// docs/architecture.md, "Predicting a GPU round", has the model and its fit.
#include <placer/kernels/backend.hpp>
#include <placer/kernels/tier.hpp>

#include <cstdint>
#include <memory>

namespace placer::kernels {

struct gpu_model_config {
  int threads = 512;       ///< the tier kernel's CTA (tier_threads in cuda_backend.cu)
  int offer_least = -1;    ///< tier_buffers::offer_team_least (PLACER_CUDA_TEAM_OFFER_LEAST); -1: the default
  int refresh_below = -1;  ///< tier_buffers::refresh_cells_below; -1: the default
  int offer_bits = -1;     ///< tier_buffers::offer_bits (PLACER_CUDA_OFFER_BITS); -1: the default
  bool offer_iterate = false;  ///< tier_buffers::offer_iterate (PLACER_CUDA_OFFER_ITERATE): the recorded rounds' offers
  int offer_pairs = -1;  ///< tier_buffers::offer_pairs_upto (PLACER_CUDA_OFFER_PAIRS); -1: the default
  /// tier_buffers::offer_groups (PLACER_CUDA_OFFER_GROUPS): the most bids a
  /// row may get in a round for its offers to go a row a warp; -1: the default; 0:
  /// by the whole CTA, as every round recorded up to 2026-11-28 ran;
  /// 0x7fffffff (tier_offer_groups_always): on warps always, as the
  /// 2026-12-04 rounds ran.
  int offer_groups = -1;
  /// CTAs of the tier kernel's grid (PLACER_CUDA_TIER_BLOCKS): 1, one CTA as
  /// the rounds recorded before 2026-11-28 ran; more, the wide phases spread
  /// over that many (tier_program.hpp, "The grid"), counted per CTA. 33: the
  /// CUDA backend's grid on an H100's or H200's 132 multiprocessors.
  int blocks = 33;
  long long grid_cells_from = -1;  ///< tier_buffers::grid_cells_from (PLACER_CUDA_GRID_CELLS_FROM); -1: the default
  /// tier_buffers::list_with_floors_upto (PLACER_CUDA_LIST_WITH_FLOORS_UPTO); -1: the default; 0: never, as
  /// the rounds recorded up to 2026-11-28 ran.
  int list_upto = -1;
  /// tier_buffers::refresh_one_pass (PLACER_CUDA_REFRESH_ONE_PASS); false: two passes, as the rounds
  /// recorded up to 2026-11-28 ran.
  bool refresh_one_pass = true;
  /// tier_buffers::refresh_lanes (PLACER_CUDA_REFRESH_LANES): a cell of a
  /// small refresh on a run of a warp's lanes; false: a worker a cell, as
  /// the rounds recorded up to 2026-12-02 ran.
  bool refresh_lanes = true;
  /// tier_buffers::losers_sit_out: a loser that would sit the next round
  /// out counted, not listed, and a round with none listed not run; false:
  /// every loser listed and every round run, as every recorded round ran.
  bool losers_sit_out = true;
};

struct gpu_phase_counts {
  std::int64_t barriers = 0;
  std::int64_t span = 0;   ///< steps on the critical path: per barrier interval the most of one worker
  std::int64_t chain = 0;  ///< chained steps on it (each waits on the one before: a heap level, a re-bid)
  std::int64_t work = 0;   ///< steps of all workers
  /// Barriers of the whole grid (config.blocks > 1). Between two, the
  /// counts above are the busiest CTA's: each is the most any CTA had.
  std::int64_t grid_syncs = 0;
  gpu_phase_counts& operator+=(gpu_phase_counts const& o) {
    barriers += o.barriers;
    span += o.span;
    chain += o.chain;
    work += o.work;
    grid_syncs += o.grid_syncs;
    return *this;
  }
};

struct gpu_counts {
  gpu_phase_counts phase[tier_phase_count];
  /// A launch's steps outside its tiers' phases: the records unpacked
  /// before the first tier's clock and packed after the last, and the
  /// stages after the chain (stage_call: capacities, statistics). The
  /// H200's call timeline put the tier kernel's event time 2-23% above its
  /// phases' sum (2026-12-04).
  gpu_phase_counts outside;
  std::int64_t launches = 0;  ///< tier chains run
  int blocks = 1;             ///< the grid they ran on (gpu_model_config::blocks)
  /// The offers of the rounds that took them a row a warp (tier_offer_groups;
  /// gpu_model_config::offer_groups), apart from phase[tier_phase_offer],
  /// the whole CTA's.
  gpu_phase_counts offer_group;
  [[nodiscard]] gpu_phase_counts total() const;
};

/// The device twin whose tier launches run on config.threads emulated
/// workers, adding what they count to *counts. Its results are the twin's
/// (and so the CPU backend's): only the time is modelled.
std::unique_ptr<backend> make_gpu_model(gpu_model_config const& config, gpu_counts* counts);

/// A phase's predicted time: barrier_us a barrier, step_us[phase] a step of
/// its span, chain_us a chained step, work_us a step of its work (a CTA's:
/// its multiprocessor's throughput). On a grid of B CTAs (B > 1), that sum
/// is scaled by grid_scale + grid_scale_per_cta * B (the leading CTA reads
/// what other multiprocessors wrote, from L2: its own phases were 10-50%
/// slower on the H200's grids than on one CTA), and a grid barrier costs
/// grid_sync_us + grid_sync_per_cta_us * B.
struct gpu_cost {
  double barrier_us = 0;
  double step_us[tier_phase_count] = {};
  double chain_us = 0;
  double work_us = 0;
  double grid_scale = 1;
  double grid_scale_per_cta = 0;
  double grid_sync_us = 0;
  double grid_sync_per_cta_us = 0;
  /// The offers on warps (gpu_counts::offer_group) against the same
  /// counts at the whole CTA's costs: a warp's steps are __syncwarp and a
  /// dependent L2 load each, not the CTA's averaged step (fitted on the
  /// rounds recorded with the group offers; 1 before any).
  double offer_group_scale = 1;
  /// A round's fixed costs (solver/src/gpu_prediction.cpp): a backend call's
  /// launch, a wait's round trip, the copies' bandwidth; from a calibration
  /// kit's record (bench/gpu_kit/calibrate.cu, fit.py --kit) or assumed,
  /// fixed_source says which and where from.
  double launch_us = 5;
  double wait_us = 10;
  double copy_gbps = 20;
  char const* fixed_source = "";
};
/// The coefficients fitted to the recorded GPU rounds (kernels/model/gpu_cost_fit.inc).
gpu_cost const& fitted_gpu_cost();
/// Predicted microseconds of each phase (into per_phase when given) and
/// their sum: the tier kernel's time.
double predict_tier_us(gpu_counts const& c, gpu_cost const& cost, double* per_phase = nullptr);
/// The launches' steps outside the phases (gpu_counts::outside): their
/// barriers, chained steps and work at the phases' costs and their grid
/// barriers at the grid barrier's, no span cost (a few dozen steps of the
/// stages' wide loops). Predicted 0.19 / 0.04 / 0.20 ms at 10k / openb /
/// 100k on 33 CTAs, where the H200's timeline put the tier kernel's events
/// 0.62 / 0.09 / 1.45 ms above its phases (2026-12-04): the rest is not
/// counted.
double predict_outside_us(gpu_counts const& c, gpu_cost const& cost);

}  // namespace placer::kernels
