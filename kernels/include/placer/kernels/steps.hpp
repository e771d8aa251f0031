#pragma once
// The backend's step counter: what a round asks of the device, counted the
// same way on every backend because the counting is in the portable code
// (kernels/portable), which both compilations share.
//
//   calls  backend stage calls: Thrust algorithm calls and kernel launches
//          on CUDA; the same calls on the CPU twin.
//   waits  device-to-host waits: a synchronisation whose result the host
//          reads (a returned count or sum, a result copied back).
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
  std::int64_t bytes_up = 0;
  std::int64_t bytes_down = 0;

  step_counts& operator+=(step_counts const& o) {
    calls += o.calls;
    waits += o.waits;
    bytes_up += o.bytes_up;
    bytes_down += o.bytes_down;
    return *this;
  }
  friend step_counts operator-(step_counts a, step_counts const& b) {
    a.calls -= b.calls;
    a.waits -= b.waits;
    a.bytes_up -= b.bytes_up;
    a.bytes_down -= b.bytes_down;
    return a;
  }
};

}  // namespace placer::kernels
