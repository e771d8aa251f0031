#pragma once
// When a host pass over many items runs on the OpenMP team (the CPU
// backend's stages, flatten, validate).
#include <cstdint>

namespace placer::kernels {

/// Whether the OpenMP team sleeps between parallel regions
/// (OMP_WAIT_POLICY=PASSIVE, which `placer serve` and `placer bench` set):
/// then every region, and every barrier in one, wakes it.
bool openmp_team_sleeps();

/// The items from which a pass runs on the team: `spinning` where the team
/// spins; where it sleeps, `sleeping_pair` (measured with a team of two on
/// 2 vCPUs, where a region's wake-ups cost about 85 us) over the workers
/// past the first, never below `spinning`. The scaling is assumed, not
/// measured: a team of k saves (k - 1) / k of the pass, and a wake-up
/// costs the same on a larger machine.
std::int64_t team_from(std::int64_t spinning, std::int64_t sleeping_pair);

}  // namespace placer::kernels
