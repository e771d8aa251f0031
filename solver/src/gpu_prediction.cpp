#include <placer/solver/gpu_prediction.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

namespace placer {

cpu_round_time time_cpu_round(round_input const& in, int reps) {
  reps = std::max(reps, 1);
  solver s(kernels::select_backend("cpu"));
  (void)s.solve(in);
  std::int64_t before[kernels::tier_phase_count];
  kernels::tier_profile(before);
  std::vector<double> rounds;
  for (int i = 0; i < reps; ++i) {
    auto const t0 = std::chrono::steady_clock::now();
    (void)s.solve(in);
    rounds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::int64_t after[kernels::tier_phase_count];
  kernels::tier_profile(after);
  cpu_round_time c;
  std::nth_element(rounds.begin(), rounds.begin() + reps / 2, rounds.end());
  c.round_us = rounds[static_cast<std::size_t>(reps / 2)];
  for (int p = 0; p < kernels::tier_phase_count; ++p) {
    c.phase_us[p] = static_cast<double>(after[p] - before[p]) / 1e3 / reps;
    c.tier_us += c.phase_us[p];
  }
  return c;
}

gpu_prediction predict_gpu_round(round_input const& in, kernels::gpu_model_config const& config, double host_us) {
  gpu_prediction p;
  kernels::gpu_counts warm;
  {
    solver s(kernels::make_gpu_model(config, &warm));
    (void)s.solve(in);
    warm = {};  // the steady state: the second round's counts only
    round_result const r = s.solve(in);
    for (stage_timing const& t : r.timing) {
      if (t.stage != "total") continue;
      p.calls = t.calls;
      p.waits = t.waits;
      p.bytes = t.bytes_up + t.bytes_down;
      p.grid_syncs = t.grid_syncs;
    }
  }
  p.counts = warm;
  p.tier_us = kernels::predict_tier_us(p.counts, kernels::fitted_gpu_cost(), p.phase_us);
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  p.outside_us = kernels::predict_outside_us(p.counts, cost);
  p.fixed_us = cost.launch_us * static_cast<double>(p.calls) + cost.wait_us * static_cast<double>(p.waits) +
               static_cast<double>(p.bytes) / (cost.copy_gbps * 1e3) +
               (cost.grid_sync_us + cost.grid_sync_per_cta_us * stage_grid_ctas) * static_cast<double>(p.grid_syncs);
  p.host_us = host_us;
  return p;
}

}  // namespace placer
