#pragma once
// The tier program on a grid of CTAs in threads (host only): every worker of
// every CTA a thread of its own, as a cooperative launch on a GPU runs
// them. The device twin's tier launches under PLACER_TWIN_BLOCKS and
// PLACER_TWIN_THREADS (host_device.hpp), and the ThreadSanitizer test's
// grid (tests/kernels/tier_team_tsan.cpp).

#include "tier/buffers.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// A barrier of a grid_twin's threads that sleeps at once (a mutex and a
/// condition variable). Its threads are more than the cores (8 a grid in
/// the tests, on 2 cores), so most phases wait for threads that are not
/// running. std::barrier's waiters spin and yield first, which is quicker
/// alone but gives a whole time slice away at each yield beside other busy
/// processes: `QueueOrder.WindowsDrawnByTheProgram...` (50 rounds on the
/// grid) took 7.5 s alone and more than 190 s beside two busy loops, and
/// timed out at 600 s in a loaded `make test`; with this barrier 17 s and
/// 36 s. A woken sleeper runs soon.
class grid_twin_barrier {
 public:
  explicit grid_twin_barrier(std::int32_t count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    std::uint64_t const phase = phase_;
    if (arrive()) return;
    woken_.wait(lock, [&] { return phase_ != phase; });
  }
  /// Leaves the barrier for good, ending the phase where the others wait.
  void arrive_and_drop() {
    std::lock_guard<std::mutex> lock(m_);
    --count_;
    if (waiting_ > 0 && waiting_ == count_) release();
  }

 private:
  bool arrive() {  // under m_: whether this arrival ends the phase
    if (++waiting_ < count_) return false;
    release();
    return true;
  }
  void release() {
    waiting_ = 0;
    ++phase_;
    woken_.notify_all();
  }
  std::mutex m_;
  std::condition_variable woken_;
  std::int32_t count_;
  std::int32_t waiting_ = 0;
  std::uint64_t phase_ = 0;
};

/// The barriers and shuffle slots of a grid_twin's threads.
struct grid_twin_sync {
  grid_twin_sync(std::int32_t blocks, std::int32_t threads, std::int32_t group)
      : grid(blocks * threads), slots(static_cast<std::size_t>(blocks * threads)), met(slots.size()) {
    for (std::int32_t k = 0; k < blocks; ++k) cta.emplace_back(threads);
    for (std::int32_t g = 0; g < blocks * threads / group; ++g) groups.emplace_back(group);
  }
  grid_twin_barrier grid;
  std::deque<grid_twin_barrier> cta, groups;
  std::vector<std::int64_t> slots;  ///< a worker's value in a group exchange (grid_twin_team::exchange)
  /// Per worker: where it met the grid (file, line), barrier by barrier.
  std::vector<std::vector<std::pair<std::string_view, int>>> met;
};

/// A host team's shared counts: relaxed atomics (the team's barriers order
/// everything else). omp_team's (tier_host.hpp) and grid_twin_team's.
template <class T>
T host_fetch_add(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <class T>
T host_fetch_max(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v > old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
T host_fetch_min(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}

/// A worker of a CTA of `threads` in a grid of `blocks` (PLACER_TWIN_BLOCKS,
/// PLACER_TWIN_THREADS), a thread each: the tier program as a cooperative
/// grid runs it, block() the CTA's index, sync() its barrier, grid_sync()
/// every thread's, groups of two workers (a warp's part on the GPU:
/// tier_offer_groups) meeting at barriers of their own, the steps shared
/// with other workers atomic (host_fetch_*). The GPU model acts for every
/// CTA from block 0; here the others take the paths only a GPU's other
/// CTAs take (scratch read there before it is written, a race between CTAs
/// or warps), on the CPU.
struct grid_twin_team {
  std::int32_t index = 0, count = 1, lane = 0, width = 1;
  grid_twin_sync* s = nullptr;
  [[nodiscard]] std::int32_t rank() const { return lane; }
  [[nodiscard]] std::int32_t size() const { return width; }
  [[nodiscard]] static constexpr std::int32_t solo_below() { return 0; }
  void sync() const {
    if (width > 1) s->cta[static_cast<std::size_t>(index)].arrive_and_wait();
  }
  static constexpr void work(std::int64_t) {}
  static constexpr void chain(std::int64_t) {}
  template <class T>
  static T fetch_add(T* p, std::type_identity_t<T> v) {
    return host_fetch_add(p, v);
  }
  template <class T>
  static T fetch_max(T* p, T v) {
    return host_fetch_max(p, v);
  }
  template <class T>
  static T fetch_min(T* p, T v) {
    return host_fetch_min(p, v);
  }
  [[nodiscard]] std::int32_t blocks() const { return count; }
  [[nodiscard]] std::int32_t block() const { return index; }
  template <class F>
  void each_block(F&& f) const {
    f(index);
  }
  void grid_sync(char const* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    s->met[static_cast<std::size_t>(index * width + lane)].emplace_back(file, line);
    s->grid.arrive_and_wait();
  }
  [[nodiscard]] std::int32_t group_size() const { return width > 1 ? 2 : 1; }
  void group_sync() const {
    if (width > 1) s->groups[static_cast<std::size_t>((index * width + lane) / 2)].arrive_and_wait();
  }
  /// v through the group's slots, between two of its barriers:
  /// read(me, slots) with this worker's slot (its pair's other is me ^ 1).
  template <class Read>
  [[nodiscard]] auto exchange(std::int64_t v, Read read) const {
    auto const me = static_cast<std::size_t>(index * width + lane);
    s->slots[me] = v;
    group_sync();
    auto const r = read(me, s->slots.data());
    group_sync();
    return r;
  }
  /// v folded over the aligned run of `runs` workers (1 or the group's 2).
  template <class Op>
  [[nodiscard]] std::int64_t group_fold(std::int64_t v, std::int32_t runs, Op op) const {
    if (runs <= 1) return v;
    return exchange(v, [&](std::size_t me, std::int64_t const* slot) {
      return op(slot[me & ~std::size_t{1}], slot[me | 1]);
    });
  }
  /// v summed over this worker and the one after it in its run (1 or 2).
  [[nodiscard]] std::int64_t group_sum_from(std::int64_t v, std::int32_t runs) const {
    if (runs <= 1) return v;
    return exchange(v, [&](std::size_t me, std::int64_t const* slot) {
      return (me & 1) == 0 ? v + slot[me | 1] : v;
    });
  }
  /// Whether the other worker of its run (1 or 2) holds a v above this one's.
  [[nodiscard]] std::int32_t group_count_above(std::int64_t v, std::int32_t runs) const {
    if (runs <= 1) return 0;
    return exchange(v, [&](std::size_t me, std::int64_t const* slot) {
      return slot[me ^ 1] > v ? std::int32_t{1} : std::int32_t{0};
    });
  }
  static constexpr bool team_wide = true;  // the CUDA backend's team steps
};

/// f(team) on blocks x threads threads (threads 1 or even), each a
/// grid_twin_team; the first exception thrown is rethrown once all have
/// ended (a thread that ends leaves the grid's barrier; the program throws
/// nowhere while a CTA or a group waits), then logic_error where two
/// workers met the grid at different barriers, or a different number of
/// times (on a GPU, a wrong pairing of grid.sync() calls or a hang).
template <class F>
void run_on_grid_twin(std::int32_t blocks, std::int32_t threads, F&& f) {
  grid_twin_sync s(blocks, threads, threads > 1 ? 2 : 1);
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(blocks * threads));
  {
    std::vector<std::jthread> workers;
    for (std::int32_t k = 0; k < blocks * threads; ++k) {
      workers.emplace_back([&, k] {
        grid_twin_team t{k / threads, blocks, k % threads, threads, &s};
        try {
          f(t);
        } catch (...) {
          failed[static_cast<std::size_t>(k)] = std::current_exception();
        }
        s.grid.arrive_and_drop();  // one that met the grid fewer times leaves the others going (found below)
      });
    }
  }
  for (auto const& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  for (std::size_t w = 1; w < s.met.size(); ++w) {
    auto const& a = s.met[0];
    auto const& b = s.met[w];
    for (std::size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
      auto const site = [&](auto const& m) {
        return k < m.size() ? std::string(m[k].first) + ":" + std::to_string(m[k].second) : std::string("its end");
      };
      if (k < a.size() && k < b.size() && a[k] == b[k]) continue;
      throw std::logic_error("grid twin: at the grid's barrier " + std::to_string(k) + " CTA 0's worker 0 is at " +
                             site(a) + ", CTA " + std::to_string(w / static_cast<std::size_t>(threads)) +
                             "'s worker " + std::to_string(w % static_cast<std::size_t>(threads)) + " at " + site(b));
    }
  }
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
