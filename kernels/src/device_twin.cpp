// The CUDA backend's twin: device_backend (portable/device_backend.hpp),
// the code the CUDA backend runs, over a host_device whose "device memory"
// is host allocations of its own, whose copies are memcpy and whose tier
// launch is the program on one worker. Compiled by g++, so CI runs the
// CUDA backend's arenas, staging, residency and node records on every
// random round the tests throw at it: a round it gets wrong differs from
// the CPU backend's, a transfer it forgets shows in its verify mode, and a
// stage that would read host memory on the GPU (an array never sent)
// fails its pointer check. With a GPU model (gpu_model.hpp) its tier
// launches run on a CTA's worth of fibers, counted.
#include "../model/team_model.hpp"
#include "../portable/device_backend.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/topology/error.hpp>

#include <thrust/system/cpp/execution_policy.h>

#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace placer::kernels {

namespace {

class host_device {
 public:
  static constexpr backend_kind kind = backend_kind::cpu;
  static constexpr bool checks_pointers = true;

  host_device() = default;
  host_device(gpu_model_config const& config, gpu_counts* counts) : model_(config), counts_(counts) {
    description_ = "gpu model (the CUDA backend's code over host memory, its tier launches on " +
                   std::to_string(config.threads) + " emulated workers)";
  }
  host_device(host_device const&) = delete;
  host_device& operator=(host_device const&) = delete;

  [[nodiscard]] std::string const& description() const { return description_; }
  template <class F>
  auto guard(F&& f) -> decltype(f()) {
    return f();
  }

  void* device_alloc(std::size_t bytes) {
    void* p = ::operator new(bytes, std::align_val_t{256});
    blocks_.emplace_back(p, bytes);
    return p;
  }
  void device_free(void* p) noexcept {
    std::erase_if(blocks_, [&](auto const& b) { return b.first == p; });
    ::operator delete(p, std::align_val_t{256});
  }
  void* host_alloc(std::size_t bytes) { return ::operator new(bytes, std::align_val_t{256}); }
  void host_free(void* p) noexcept { ::operator delete(p, std::align_val_t{256}); }

  void up(void* d, void const* h, std::size_t bytes) {
    expect_device(d, bytes);
    std::memcpy(d, h, bytes);
  }
  void down(void* h, void const* d, std::size_t bytes) {
    expect_device(d, bytes);
    std::memcpy(h, d, bytes);
  }
  void sync() {}
  void check_launch() {}
  // No GPU: the call timeline has host times only.
  static int mark() { return -1; }
  static std::int64_t mark_ns(int) { return -1; }
  static void marks_done() {}
  auto exec() { return thrust::cpp::par; }
  auto exec_nosync() { return thrust::cpp::par; }

  void run_tiers(tier_chain const& c, node_records const& in, std::int32_t n_in, node_records const& out) {
    expect_device(c.tiers, sizeof(tier_problem) * static_cast<std::size_t>(c.n_tiers));
    for (std::int32_t k = 0; k < c.n_tiers; ++k) {
      tier_problem const& p = c.tiers[k];
      for (void const* q : {static_cast<void const*>(p.scores), static_cast<void const*>(p.stamp),
                            static_cast<void const*>(p.fresh), static_cast<void const*>(p.row_class),
                            static_cast<void const*>(p.demand), static_cast<void const*>(p.gpu_free)}) {
        if (q != nullptr) expect_device(q, 1);
      }
    }
    if (counts_ != nullptr) {
      run_chain_model(model_, c, in, n_in, out, *counts_);
      return;
    }
    seq_team team{true};  // the CUDA backend's team steps (cuda_team::team_wide)
    resident_chain_program(team, c, in, n_in, out);
  }

  /// [p, p + bytes) lies in one device allocation, or logic_error: on a
  /// GPU the stage would read host memory.
  void expect_device(void const* p, std::size_t bytes) const {
    auto const* c = static_cast<char const*>(p);
    for (auto const& [base, size] : blocks_) {
      auto const* b = static_cast<char const*>(base);
      if (c >= b && c + bytes <= b + size) return;
    }
    throw logic_error(error_code::internal,
                      "device twin: a stage reads " + std::to_string(bytes) + " bytes outside device memory");
  }

 private:
  std::string description_ = "twin (the CUDA backend's code over host memory)";
  std::vector<std::pair<void const*, std::size_t>> blocks_;
  gpu_model_config model_;
  gpu_counts* counts_ = nullptr;  ///< a GPU model's counts, or none (the plain twin)
};

}  // namespace

std::unique_ptr<backend> make_device_twin(bool resident, bool verify) {
  return std::make_unique<device_backend<host_device>>(resident, verify);
}

std::unique_ptr<backend> make_gpu_model(gpu_model_config const& config, gpu_counts* counts) {
  if (counts == nullptr) throw logic_error(error_code::invalid_argument, "a GPU model needs its counts");
  return std::make_unique<device_backend<host_device>>(true, false, config, counts);
}

}  // namespace placer::kernels
