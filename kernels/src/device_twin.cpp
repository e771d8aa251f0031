// The CUDA backend's twin: device_backend (portable/device_backend.hpp),
// the code the CUDA backend runs, over a host_device whose "device memory"
// is host allocations of its own, whose copies are memcpy and whose tier
// launch is the program on one worker. Compiled by g++, so CI runs the
// CUDA backend's arenas, staging, residency and node records on every
// random round the tests throw at it: a round it gets wrong differs from
// the CPU backend's, a transfer it forgets shows in its verify mode, a
// stage that would read host memory on the GPU (an array never sent)
// fails its pointer check, and a pinned buffer the host writes while a
// copy of it is in flight (a call it did not wait for) fails at the wait.
// With a GPU model (gpu_model.hpp) its tier launches run on a CTA's worth
// of fibers, counted.
#include "host_device.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/topology/error.hpp>

#include <memory>

namespace placer::kernels {

std::unique_ptr<backend> make_device_twin(bool resident, bool verify) {
  return std::make_unique<device_backend<host_device>>(resident, verify);
}

std::unique_ptr<backend> make_device_twin_grid(std::int32_t blocks, std::int32_t threads) {
  return std::make_unique<device_backend<host_device>>(true, false, blocks, threads);
}

std::unique_ptr<backend> make_gpu_model(gpu_model_config const& config, gpu_counts* counts) {
  if (counts == nullptr) throw logic_error(error_code::invalid_argument, "a GPU model needs its counts");
  return std::make_unique<device_backend<host_device>>(true, false, config, counts);
}

}  // namespace placer::kernels
