#pragma once
// The backend's step counter: what a round asks of the device, counted in
// the portable code (kernels/portable), which both compilations share.
//
//   calls  backend stage calls: kernel launches on CUDA and the same calls
//          on its twin (device_backend.hpp); the CPU backend's Thrust
//          algorithm calls and tier programs.
//   waits  device-to-host waits: a synchronisation whose result the host
//          reads (a returned count or sum, a result copied back).
//   grid_syncs
//          grid-wide barriers inside a device's calls outside the tier
//          program (the stage program's phases, stage_program.hpp; the
//          tier program's are in the GPU model's counts); 0 on the CPU.
//   bytes_up, bytes_down
//          bytes copied host to device and back. A backend with memory
//          of its own counts them (the CUDA backend and its host twin,
//          device_backend.hpp, the same code); the CPU backend shares the
//          host's memory and moves nothing.
//
// Together they predict a GPU round from a CPU run: on a GPU each call
// costs a launch (a few microseconds) and each wait a round trip (about
// ten), whatever the work inside them.

#include <cstdint>

namespace placer::kernels {

struct step_counts {
  std::int64_t calls = 0;
  std::int64_t waits = 0;
  std::int64_t grid_syncs = 0;
  std::int64_t bytes_up = 0;
  std::int64_t bytes_down = 0;

  step_counts& operator+=(step_counts const& o) {
    calls += o.calls;
    waits += o.waits;
    grid_syncs += o.grid_syncs;
    bytes_up += o.bytes_up;
    bytes_down += o.bytes_down;
    return *this;
  }
  friend step_counts operator-(step_counts a, step_counts const& b) {
    a.calls -= b.calls;
    a.waits -= b.waits;
    a.grid_syncs -= b.grid_syncs;
    a.bytes_up -= b.bytes_up;
    a.bytes_down -= b.bytes_down;
    return a;
  }
};

}  // namespace placer::kernels
