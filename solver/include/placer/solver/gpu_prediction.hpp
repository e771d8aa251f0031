#pragma once
// A round's time on one GPU, predicted on a CPU (kernels/include/placer/
// kernels/gpu_model.hpp): the tier kernel from the GPU model's counts and
// the fitted cost, the launches, waits and copies at fixed costs, and the
// round's other stages at what they took on this machine's CPU backend in
// the same run. round_bench and `placer bench` print it beside the CPU time.
#include <placer/kernels/gpu_model.hpp>
#include <placer/solver/model.hpp>

namespace placer {

/// The stage program's grid on an H100 or H200, priced by the model: a CTA
/// of 256 a multiprocessor, 132 (assumed: the occupancy the CUDA backend
/// asks for at start, never recorded).
inline constexpr double stage_grid_ctas = 132;

struct gpu_prediction {
  kernels::gpu_counts counts;
  double phase_us[kernels::tier_phase_count] = {};  ///< the tier kernel's phases, predicted
  double tier_us = 0;                               ///< their sum
  double outside_us = 0;  ///< the tier launches' steps outside the phases (kernels::predict_outside_us)
  /// Launches, waits and copies at the fixed costs of fitted_gpu_cost()
  /// (gpu_cost::fixed_source: a calibration kit's, or assumed at 5 µs, 10 µs
  /// and 20 GB/s), and the stage calls' grid barriers at the fitted grid
  /// barrier of stage_grid_ctas CTAs.
  double fixed_us = 0;
  double host_us = 0;  ///< the caller's: the CPU round less its tier phases
  std::int64_t calls = 0, waits = 0, bytes = 0, grid_syncs = 0;
  [[nodiscard]] double round_us() const { return tier_us + outside_us + fixed_us + host_us; }
};

/// The CPU backend's round on this machine: the median of `reps` rounds
/// after a warm-up, and the mean of its tier programs' phases.
struct cpu_round_time {
  double round_us = 0;
  double tier_us = 0;
  double phase_us[kernels::tier_phase_count] = {};
  [[nodiscard]] double host_us() const { return round_us > tier_us ? round_us - tier_us : 0.0; }
};
cpu_round_time time_cpu_round(round_input const& in, int reps);

/// Runs `in` twice through the GPU model (the second round counted, as a
/// benchmark's steady state on a resident backend) and predicts its time.
/// `host_us`: the round's stages other than the tier programs, measured by
/// the caller on the CPU backend.
gpu_prediction predict_gpu_round(round_input const& in, kernels::gpu_model_config const& config, double host_us);

}  // namespace placer
