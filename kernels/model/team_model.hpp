#pragma once
// The team of the GPU model (kernels/include/placer/kernels/gpu_model.hpp):
// a CTA's workers as fibers on one host thread (fibers.hpp), counting each
// worker's steps (Team::work) between barriers, and rank 0's clock laps
// (tier_clock_observer) booking them to the tier phases. Host only.

#include "../portable/residency.hpp"
#include "../portable/stage_program.hpp"
#include "../portable/tier_program.hpp"
#include "fibers.hpp"

#include <placer/kernels/gpu_model.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// A CTA of fibers. The same steps as cuda_team<true> (team_wide, never
/// solo); the atomics are plain, as the workers never run at once.
struct model_team {
  model::fibers* f;
  bool team_wide = true;
  std::int64_t* shared = nullptr;  ///< a value per worker: group_fold's exchange
  [[nodiscard]] std::int32_t rank() const { return f->rank(); }
  [[nodiscard]] std::int32_t size() const { return f->size(); }
  [[nodiscard]] static constexpr std::int32_t solo_below() { return 0; }
  void sync() const { f->barrier(); }
  /// A grid of fibers' lanes: the CTA acts for each block in turn, its
  /// steps counted in the block's lane (fibers::lane); a grid's barrier is
  /// a barrier of the CTA, counted as the grid's.
  [[nodiscard]] std::int32_t blocks() const { return f->lanes(); }
  [[nodiscard]] static constexpr std::int32_t block() { return 0; }
  template <class F>
  void each_block(F&& fn) const {
    for (std::int32_t l = 0; l < f->lanes(); ++l) {
      f->lane(l);
      fn(l);
    }
    f->lane(0);
  }
  void grid_sync() const { f->barrier(true); }
  /// A warp (tier_offer_groups): its workers wait for each other in
  /// lockstep (fibers::group_barrier), and the CTA's barrier is not met.
  [[nodiscard]] static constexpr std::int32_t group_size() { return 32; }
  void group_sync() const { f->group_barrier(group_size()); }
  /// The run's values through `shared`, between two barriers of the run
  /// (its lanes in step, as a warp's shuffles are; each barrier a step):
  /// read(first, end) over the run's slots [first, end).
  template <class Read>
  auto exchange(std::int64_t v, std::int32_t width, Read read) const {
    std::int32_t const span = fold_span(width);
    std::int32_t const first = rank() / span * span;
    shared[rank()] = v;
    f->group_barrier(span);
    auto const r = read(first, first + width);
    f->group_barrier(span);
    return r;
  }
  template <class Op>
  std::int64_t group_fold(std::int64_t v, std::int32_t width, Op op) const {
    if (width <= 1) return v;
    return exchange(v, width, [&](std::int32_t first, std::int32_t end) {
      std::int64_t s = shared[first];
      for (std::int32_t i = first + 1; i < end; ++i) s = op(s, shared[i]);
      return s;
    });
  }
  /// The suffix sum over the run, counted as a fold.
  std::int64_t group_sum_from(std::int64_t v, std::int32_t width) const {
    if (width <= 1) return v;
    return exchange(v, width, [&](std::int32_t, std::int32_t end) {
      std::int64_t s = 0;
      for (std::int32_t i = rank(); i < end; ++i) s += shared[i];
      return s;
    });
  }
  /// The run's values above v, counted as a fold (the caller counts a
  /// step a value compared).
  std::int32_t group_count_above(std::int64_t v, std::int32_t width) const {
    if (width <= 1) return 0;
    return exchange(v, width, [&](std::int32_t first, std::int32_t end) {
      std::int32_t above = 0;
      for (std::int32_t i = first; i < end; ++i) above += shared[i] > v ? 1 : 0;
      return above;
    });
  }
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
/// unpacking) or after its last lap (the records' packing, the stages
/// after the chain) to gpu_counts::outside. On a grid (lanes > 1)
/// each lane's counts add up until a grid's barrier or a lap, which takes
/// the most of any lane (the busiest CTA; an upper bound where different
/// CTAs are busiest on different counts).
class model_counter final : public tier_clock_observer {
 public:
  explicit model_counter(gpu_counts& out) : out_(out) {}
  void interval(std::vector<model::fibers::counts> const& lanes, model::fibers::end const& how) {
    lane_.resize(lanes.size());
    for (std::size_t l = 0; l < lanes.size(); ++l) {
      lane_[l].span += lanes[l].span;
      lane_[l].chain += lanes[l].chain;
      lane_[l].work += lanes[l].work;
    }
    bool const grid = how.grid && lanes.size() > 1;
    if (how.at_barrier && !grid) lane_[static_cast<std::size_t>(how.lane)].barriers += 1;
    if (grid || lanes.size() == 1) fold();
    if (how.at_barrier && grid) pending_.grid_syncs += 1;
  }
  void start() override { book(out_.outside); }
  /// The launch's end: what came after the last lap is outside the phases.
  void finish() { book(out_.outside); }
  void lap(tier_phase p, bool group) override { book(group ? out_.offer_group : out_.phase[p]); }

 private:
  void book(gpu_phase_counts& c) {
    fold();
    c += pending_;
    pending_ = {};
  }
  void fold() {
    gpu_phase_counts most;
    for (gpu_phase_counts& l : lane_) {
      most.barriers = std::max(most.barriers, l.barriers);
      most.span = std::max(most.span, l.span);
      most.chain = std::max(most.chain, l.chain);
      most.work = std::max(most.work, l.work);
      l = {};
    }
    pending_.barriers += most.barriers;
    pending_.span += most.span;
    pending_.chain += most.chain;
    pending_.work += most.work;
  }
  gpu_counts& out_;
  gpu_phase_counts pending_;
  std::vector<gpu_phase_counts> lane_;
};

/// program(team) on config.threads fibers acting for config.blocks CTAs'
/// threads (model_team), `interval` told what each barrier interval counted.
template <class Program>
void run_on_fibers(gpu_model_config const& config, Program const& program,
                   std::function<void(std::vector<model::fibers::counts> const&, model::fibers::end const&)> const& interval) {
  model::fibers f(config.threads);
  f.set_lanes(config.blocks);
  std::vector<std::int64_t> shared(static_cast<std::size_t>(config.threads));
  f.run(
      [&](int) {
        model_team t{&f, true, shared.data()};
        program(t);
      },
      interval);
}

/// One launch of chain_launch_program on config.threads fibers, the tier
/// program's steps counted into `out` (the stages after it are no tier
/// phase's).
inline void run_chain_model(gpu_model_config const& config, tier_chain const& chain, node_records const& in,
                            std::int32_t n_in, node_records const& records_out, stage_call const& after,
                            gpu_counts& out) {
  tier_chain c = chain;
  if (config.offer_least >= 0) c.work.offer_team_least = config.offer_least;
  if (config.refresh_below >= 0) c.work.refresh_cells_below = config.refresh_below;
  if (config.offer_bits >= 0) c.work.offer_bits = config.offer_bits;
  c.work.offer_iterate = config.offer_iterate ? 1 : 0;
  if (config.offer_groups >= 0) c.work.offer_groups = config.offer_groups;
  if (config.offer_pairs >= 0) c.work.offer_pairs_upto = config.offer_pairs;
  if (config.grid_cells_from >= 0) c.work.grid_cells_from = config.grid_cells_from;
  if (config.list_upto >= 0) c.work.list_with_floors_upto = config.list_upto;
  c.work.refresh_one_pass = config.refresh_one_pass ? 1 : 0;
  c.work.refresh_lanes = config.refresh_lanes ? 1 : 0;
  c.work.losers_sit_out = config.losers_sit_out ? 1 : 0;
  model_counter counter(out);
  tier_clock_observer* const outer = tier_clock_observed();
  tier_clock_observed() = &counter;
  try {
    run_on_fibers(
        config, [&](model_team& t) { chain_launch_program(t, c, in, n_in, records_out, after); },
        [&](std::vector<model::fibers::counts> const& k, model::fibers::end const& how) { counter.interval(k, how); });
  } catch (...) {
    tier_clock_observed() = outer;
    throw;
  }
  tier_clock_observed() = outer;
  counter.finish();
  out.launches += 1;
  out.blocks = config.blocks;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
