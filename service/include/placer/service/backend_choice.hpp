// placer serve --backend auto: the faster of the usable backends, measured.
//
// A usable GPU is not always the faster backend: on the H100 of
// 2026-11-26 the CUDA round at 10k took 13.9 ms against 3.5 ms for the
// CPU backend on the same machine's 16 cores (bench/results/2026-11-26-h100.md).
// So the server, when --backend auto finds a usable GPU and no --devices
// names one on purpose, solves one representative round on each and
// serves with the faster; --backend cuda keeps the GPU whatever the times.
#pragma once

#include <placer/kernels/backend.hpp>
#include <placer/solver/model.hpp>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace placer::service {

/// One backend's showing: its description and its median solve time.
struct backend_trial {
  std::string backend;
  double median_ms = 0;
};

using backend_maker = std::function<std::unique_ptr<kernels::backend>()>;

/// Makes each candidate and solves `round` on it, once to warm it up
/// (kernels loaded, buffers grown) and then `reps` times; returns the index
/// of the one with the least median time (the first on a tie), the trials
/// in `trials` in the candidates' order. A candidate that fails to start
/// or to solve throws.
std::size_t fastest_backend(std::span<backend_maker const> candidates, round_input const& round, int reps,
                            std::vector<backend_trial>& trials);

}  // namespace placer::service
