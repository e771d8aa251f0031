// The GPU model's cost (gpu_model.hpp): counts to microseconds, with the
// coefficients bench/gpu_model/fit.py fitted to the recorded GPU rounds.
#include <placer/kernels/gpu_model.hpp>

namespace placer::kernels {

gpu_phase_counts gpu_counts::total() const {
  gpu_phase_counts t = offer_group;
  for (gpu_phase_counts const& p : phase) t += p;
  return t;
}

gpu_cost const& fitted_gpu_cost() {
#include "gpu_cost_fit.inc"
  return fitted;
}

namespace {

/// Counts at the cost's prices on c's grid: their steps at one CTA's costs
/// (a span step at step_us) scaled by `factor` and the grid's scale, their
/// grid barriers at the grid barrier's.
double counted_us(gpu_phase_counts const& k, double step_us, double factor, gpu_counts const& c, gpu_cost const& cost) {
  double const blocks = static_cast<double>(c.blocks);
  double const scale = c.blocks > 1 ? cost.grid_scale + cost.grid_scale_per_cta * blocks : 1.0;
  return factor * scale *
             (cost.barrier_us * static_cast<double>(k.barriers) + step_us * static_cast<double>(k.span) +
              cost.chain_us * static_cast<double>(k.chain) + cost.work_us * static_cast<double>(k.work)) +
         (cost.grid_sync_us + cost.grid_sync_per_cta_us * blocks) * static_cast<double>(k.grid_syncs);
}

}  // namespace

double predict_outside_us(gpu_counts const& c, gpu_cost const& cost) {
  return counted_us(c.outside, 0.0, 1.0, c, cost);  // no span cost: a few dozen steps of wide loops
}

double predict_tier_us(gpu_counts const& c, gpu_cost const& cost, double* per_phase) {
  double sum = 0;
  for (int p = 0; p < tier_phase_count; ++p) {
    // No record has run a locality job's tier (tier_phase_local, since
    // 2026-12-04: the host placed them before): its span steps are priced
    // as the commit's, the work it is most like (a commit, a cell
    // re-scored, the domains' sums), an assumption until a GPU records it.
    int const priced = p == tier_phase_local ? tier_phase_commit : p;
    double us = counted_us(c.phase[p], cost.step_us[priced], 1.0, c, cost);
    if (p == tier_phase_offer) us += counted_us(c.offer_group, cost.step_us[p], cost.offer_group_scale, c, cost);
    if (per_phase != nullptr) per_phase[p] = us;
    sum += us;
  }
  return sum;
}

}  // namespace placer::kernels
