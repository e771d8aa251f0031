#pragma once
// The device twin's device (device_twin.cpp): "device memory" that is host
// allocations of its own, copies that are memcpy (held until the host's
// wait, and checked there as a GPU's in flight would be), the stage
// program on one worker, the tier launch as the program on one worker, on
// a grid of CTAs in threads (tier_grid_twin.hpp), or on a GPU model's
// fibers.
#include "../model/team_model.hpp"
#include "../portable/device_backend.hpp"
#include "../portable/tier_grid_twin.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace placer::kernels {

class host_device {
 public:
  static constexpr backend_kind kind = backend_kind::cpu;
  static constexpr bool checks_pointers = true;

  /// PLACER_TWIN_BLOCKS=B and PLACER_TWIN_THREADS=W (1 or even): a
  /// chain's launch on a grid of B CTAs of W workers, a thread each
  /// (grid_twin_team), where B x W is 2 or more.
  host_device() {
    auto const env = [](char const* name) {
      char const* v = std::getenv(name);
      return v != nullptr ? std::max(std::atoi(v), 1) : 1;
    };
    set_grid(env("PLACER_TWIN_BLOCKS"), env("PLACER_TWIN_THREADS"));
  }
  host_device(std::int32_t blocks, std::int32_t threads) { set_grid(blocks, threads); }
  host_device(gpu_model_config const& config, gpu_counts* counts) : model_(config), counts_(counts) {
    description_ = "gpu model (the CUDA backend's code over host memory, its tier launches on " +
                   std::to_string(config.threads) + " emulated workers)";
  }
  ~host_device() {
    if (scratch_ != nullptr) device_free(scratch_);
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
  void* host_alloc(std::size_t bytes) {
    void* p = ::operator new(bytes, std::align_val_t{256});
    pinned_.emplace_back(p, bytes);
    return p;
  }
  // cudaFreeHost waits for the device: the copies of the buffer end.
  void host_free(void* p) noexcept {
    std::erase_if(flight_, [&](copy_in_flight const& c) { return within(c.h, p); });
    std::erase_if(pinned_, [&](auto const& b) { return b.first == p; });
    ::operator delete(p, std::align_val_t{256});
  }

  // Copies are done at once, and held until the host's wait as a GPU's
  // would be in flight: the bytes each sent or brought, checked there. A
  // pinned buffer the host wrote before the wait while a copy read it (on
  // a GPU the copy may send the new bytes), or a landing it wrote over
  // (the copy may land after), fails.
  void up(void* d, void const* h, std::size_t bytes) {
    expect_device(d, bytes);
    std::memcpy(d, h, bytes);
    fly(h, bytes, true);
  }
  void down(void* h, void const* d, std::size_t bytes) {
    expect_device(d, bytes);
    // A copy down into a buffer a copy up still reads comes after it in
    // stream order: that one is checked now.
    auto const* at = static_cast<char const*>(h);
    for (auto c = flight_.begin(); c != flight_.end();) {
      if (c->h < at + bytes && at < c->h + c->bytes.size()) {
        copy_in_flight const read = std::move(*c);
        c = flight_.erase(c);
        landed(read);
      } else {
        ++c;
      }
    }
    std::memcpy(h, d, bytes);
    fly(h, bytes, false);
  }
  void sync() {
    std::vector<copy_in_flight> const done = std::move(flight_);
    flight_.clear();
    for (auto const& c : done) landed(c);
  }
  void check_launch() {}
  // No GPU: the call timeline has host times only.
  static int mark() { return -1; }
  static std::int64_t mark_ns(int) { return -1; }
  static void marks_done() {}
  /// A call's stages (stage_program.hpp) on one worker, its phases in
  /// order; for a GPU model on its CTA's fibers acting for each of its
  /// blocks, as a GPU's grid would run it (not counted: the model prices a
  /// stage call as a launch and its grid barriers, gpu_prediction.hpp).
  void run_stages(stage_call const& s) {
    if (counts_ == nullptr) {
      seq_team team{true};
      stage_program(team, s);
      return;
    }
    run_on_fibers(model_, [&](model_team& t) { stage_program(t, s); },
                  [](std::vector<model::fibers::counts> const&, model::fibers::end const&) {});
  }

  void run_tiers(tier_chain const& c, node_records const& in, std::int32_t n_in, node_records const& out,
                 stage_call const& after) {
    expect_device(c.tiers, sizeof(tier_problem) * static_cast<std::size_t>(c.n_tiers));
    for (std::int32_t k = 0; k < c.n_tiers; ++k) {
      tier_problem const& p = c.tiers[k];
      for (void const* q : {static_cast<void const*>(p.scores), static_cast<void const*>(p.stamp),
                            static_cast<void const*>(p.fresh), static_cast<void const*>(p.row_class),
                            static_cast<void const*>(p.demand), static_cast<void const*>(p.gpu_free)}) {
        if (q != nullptr) expect_device(q, 1);
      }
    }
    // The chain's scratch laid out again in memory of the launch's own,
    // poisoned, as CTAs' shared memory would hold it (cuda_backend's
    // tier_shared_kernel and tier_cluster_kernel), and spread over as many
    // pieces as a cluster has CTAs, each as small as the arrays allow
    // (tier_layout_smallest_parts): a program that read scratch before
    // writing it, kept it across launches, or reached one array from
    // another's address, would place differently.
    tier_chain k = c;
    std::int32_t parts = 0;
    std::size_t const per = tier_layout_smallest_parts(c.work_nodes, c.work_rows, c.work_copies, parts);
    std::size_t const bytes = per * static_cast<std::size_t>(parts);
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) device_free(scratch_);
      scratch_ = static_cast<unsigned char*>(device_alloc(bytes));
      scratch_bytes_ = bytes;
    }
    std::memset(scratch_, 0xa5, bytes);
    tier_layout_parts(k.work, c.work_nodes, c.work_rows, c.work_copies, parts, per,
                      [&](std::int32_t part) { return scratch_ + per * static_cast<std::size_t>(part); });
    if (counts_ != nullptr) {
      run_chain_model(model_, k, in, n_in, out, after, *counts_);
      return;
    }
    if (grid_blocks_ * grid_threads_ > 1) {
      run_on_grid_twin(grid_blocks_, grid_threads_,
                       [&](grid_twin_team& t) { chain_launch_program(t, k, in, n_in, out, after); });
      return;
    }
    seq_team team{true};  // the CUDA backend's team steps (cuda_team::team_wide)
    chain_launch_program(team, k, in, n_in, out, after);
  }

  struct copy_in_flight {
    char const* h;
    bool up;
    std::vector<char> bytes;
  };
  void fly(void const* h, std::size_t bytes, bool up) {
    auto const* c = static_cast<char const*>(h);
    bool const pinned = std::any_of(pinned_.begin(), pinned_.end(), [&](auto const& b) {
      return c >= static_cast<char const*>(b.first) && c + bytes <= static_cast<char const*>(b.first) + b.second;
    });
    if (!pinned) return;  // pageable memory: CUDA copies it before the call returns
    flight_.push_back({c, up, std::vector<char>(c, c + bytes)});
  }
  static void landed(copy_in_flight const& c) {
    if (std::memcmp(c.h, c.bytes.data(), c.bytes.size()) != 0) {
      throw logic_error(error_code::internal,
                        c.up ? "device twin: the host wrote a pinned buffer before the wait while a copy up read it"
                             : "device twin: the host wrote a landing before the wait while a copy down filled it");
    }
  }
  [[nodiscard]] bool within(char const* c, void const* base) const {
    for (auto const& b : pinned_) {
      if (b.first == base) return c >= static_cast<char const*>(base) && c < static_cast<char const*>(base) + b.second;
    }
    return false;
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
  void set_grid(std::int32_t blocks, std::int32_t threads) {
    if (blocks < 1 || threads < 1 || (threads > 1 && threads % 2 != 0)) {
      throw logic_error(error_code::invalid_argument,
                        "the twin's grid takes 1 or more CTAs of 1 or an even number of threads (PLACER_TWIN_BLOCKS, "
                        "PLACER_TWIN_THREADS)");
    }
    grid_blocks_ = blocks;
    grid_threads_ = threads;
    if (blocks * threads > 1) {
      description_ += ", its tier launches on a grid of " + std::to_string(blocks) + " CTAs of " +
                      std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    }
  }

  std::string description_ = "twin (the CUDA backend's code over host memory)";
  std::vector<std::pair<void const*, std::size_t>> blocks_;
  std::vector<std::pair<void const*, std::size_t>> pinned_;  ///< host_alloc's
  std::vector<copy_in_flight> flight_;                       ///< since the last wait
  gpu_model_config model_;
  gpu_counts* counts_ = nullptr;  ///< a GPU model's counts, or none (the plain twin)
  unsigned char* scratch_ = nullptr;  ///< a tier launch's scratch (run_tiers), in device memory
  std::size_t scratch_bytes_ = 0;
  std::int32_t grid_blocks_ = 1;   ///< PLACER_TWIN_BLOCKS
  std::int32_t grid_threads_ = 1;  ///< PLACER_TWIN_THREADS
};

}  // namespace placer::kernels
