#pragma once
// The team of the GPU model (kernels/include/placer/kernels/gpu_model.hpp):
// a CTA's workers as fibers on one host thread (fibers.hpp), counting each
// worker's steps (Team::work) between barriers, and rank 0's clock laps
// (tier_clock_observer) booking them to the tier phases. Host only.

#include "../portable/residency.hpp"
#include "../portable/tier_program.hpp"
#include "fibers.hpp"

#include <placer/kernels/gpu_model.hpp>

#include <cstdint>
#include <type_traits>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// A CTA of fibers. The same steps as cuda_team<true> (team_wide, never
/// solo); the atomics are plain, as the workers never run at once.
struct model_team {
  model::fibers* f;
  bool team_wide = true;
  [[nodiscard]] std::int32_t rank() const { return f->rank(); }
  [[nodiscard]] std::int32_t size() const { return f->size(); }
  [[nodiscard]] static constexpr std::int32_t solo_below() { return 0; }
  void sync() const { f->barrier(); }
  void work(std::int64_t steps) const { f->work(steps); }
  void chain(std::int64_t steps) const { f->chain(steps); }
  template <class T>
  static T fetch_add(T* p, std::type_identity_t<T> v) {
    return seq_team::fetch_add(p, v);
  }
  template <class T>
  static T fetch_max(T* p, T v) {
    return seq_team::fetch_max(p, v);
  }
  template <class T>
  static T fetch_min(T* p, T v) {
    return seq_team::fetch_min(p, v);
  }
};

/// Books the barrier intervals the fibers close to the phase of rank 0's
/// next lap; what comes before a tier's clock starts (the records'
/// unpacking) or after its last lap is no phase's.
class model_counter final : public tier_clock_observer {
 public:
  explicit model_counter(gpu_counts& out) : out_(out) {}
  void interval(model::fibers::counts const& c, bool at_barrier) {
    pending_.barriers += at_barrier ? 1 : 0;
    pending_.span += c.span;
    pending_.chain += c.chain;
    pending_.work += c.work;
  }
  void start() override { pending_ = {}; }
  void lap(tier_phase p) override {
    gpu_phase_counts& c = out_.phase[p];
    c.barriers += pending_.barriers;
    c.span += pending_.span;
    c.chain += pending_.chain;
    c.work += pending_.work;
    pending_ = {};
  }

 private:
  gpu_counts& out_;
  gpu_phase_counts pending_;
};

/// One launch of resident_chain_program on config.threads fibers, counted
/// into `out`.
inline void run_chain_model(gpu_model_config const& config, tier_chain const& chain, node_records const& in,
                            std::int32_t n_in, node_records const& records_out, gpu_counts& out) {
  tier_chain c = chain;
  if (config.offer_least >= 0) c.work.offer_team_least = config.offer_least;
  if (config.refresh_below >= 0) c.work.refresh_cells_below = config.refresh_below;
  if (config.offer_bits >= 0) c.work.offer_bits = config.offer_bits;
  c.work.offer_iterate = config.offer_iterate ? 1 : 0;
  model::fibers f(config.threads);
  model_counter counter(out);
  tier_clock_observer* const outer = tier_clock_observed();
  tier_clock_observed() = &counter;
  try {
    f.run([&](int) {
      model_team t{&f};
      resident_chain_program(t, c, in, n_in, records_out);
    },
          [&](model::fibers::counts const& k, bool at_barrier) { counter.interval(k, at_barrier); });
  } catch (...) {
    tier_clock_observed() = outer;
    throw;
  }
  tier_clock_observed() = outer;
  out.launches += 1;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
