#pragma once
// The device backend's per-call timeline (issue 53, item 5): opt-in
// (PLACER_CALL_TIMELINE=1, or timeline_record(true)), off by default.
// device_backend (kernels/portable/device_backend.hpp) records every place
// where it counts a call, a wait or a copy (steps.hpp): each Thrust stage
// (its calls together), each flush of staged copies up, each copy down,
// each tier-kernel launch and each wait. For each: its host begin and end
// (steady_clock), and on the GPU the begin and end of what it queued
// (cudaEvents recorded around it on the backend's stream, put on the host
// clock through a reference event the host waited for: a few microseconds'
// error), the steps it counted, and for a tier kernel the sum of its
// chain's phase times (tier.hpp), to set against its event time. The twin
// (device_twin.cpp) records the same calls with no GPU times: the same host
// code, so CI runs the recorder and its JSON writer.
//
// The events cost host time (a record before and after each call, outside
// its host interval): a round with the timeline on takes longer than one
// without, by that and the reference event's wait.
// bench/gpu_kit/round_timeline.cpp writes rounds of them to JSON.
#include <placer/kernels/steps.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <ostream>
#include <string_view>
#include <utility>
#include <vector>

namespace placer::kernels {

struct timeline_call {
  char const* what = "";            ///< a static name: "score", "up", "down", "tier_kernel", "wait", ...
  void const* owner = nullptr;      ///< the backend that made it
  std::int64_t host_begin_ns = 0;   ///< steady_clock
  std::int64_t host_end_ns = 0;
  std::int64_t gpu_begin_ns = -1;   ///< on the host's clock; -1: nothing queued on a GPU (a wait; the twin)
  std::int64_t gpu_end_ns = -1;
  step_counts steps;                ///< what it counted (calls, waits, bytes)
  std::int32_t copies = 0;          ///< cudaMemcpyAsync calls in it
  std::int64_t phase_sum_ns = -1;   ///< a tier kernel: its chain's phases summed (tier_stats::phase_ns)
};

inline std::int64_t timeline_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The process's recorded calls (every device backend's, in the order their
/// waits resolved them), at most `most` until taken (a process that records
/// and never takes keeps the first ones, and counts the rest as dropped).
struct timeline_sink {
  static constexpr std::size_t most = std::size_t{1} << 20;
  std::atomic<bool> on{false};
  std::mutex m;
  std::vector<timeline_call> calls;
  std::int64_t dropped = 0;
};
inline timeline_sink& timeline() {
  static timeline_sink* s = [] {
    auto* t = new timeline_sink;  // never destroyed: a backend may record during exit
    char const* e = std::getenv("PLACER_CALL_TIMELINE");
    t->on = e != nullptr && *e != '\0' && std::string_view(e) != "0";
    return t;
  }();
  return *s;
}
inline bool timeline_on() { return timeline().on.load(std::memory_order_relaxed); }
inline void timeline_record(bool on) { timeline().on = on; }
inline void timeline_add(std::vector<timeline_call>& done) {
  timeline_sink& s = timeline();
  std::lock_guard<std::mutex> lock(s.m);
  std::size_t const room = timeline_sink::most - std::min(s.calls.size(), timeline_sink::most);
  std::size_t const kept = std::min(room, done.size());
  s.calls.insert(s.calls.end(), done.begin(), done.begin() + static_cast<std::ptrdiff_t>(kept));
  s.dropped += static_cast<std::int64_t>(done.size() - kept);
  done.clear();
}
/// The calls recorded since the last take.
inline std::vector<timeline_call> timeline_take() {
  timeline_sink& s = timeline();
  std::lock_guard<std::mutex> lock(s.m);
  return std::exchange(s.calls, {});
}
/// Puts a tier chain's phase sum on `owner`'s last tier kernel that has none.
inline void timeline_phase_sum(void const* owner, std::int64_t ns) {
  timeline_sink& s = timeline();
  std::lock_guard<std::mutex> lock(s.m);
  for (auto c = s.calls.rbegin(); c != s.calls.rend(); ++c) {
    if (c->owner == owner && std::string_view(c->what) == "tier_kernel") {
      if (c->phase_sum_ns < 0) c->phase_sum_ns = ns;
      return;
    }
  }
}

/// Writes calls as a JSON array, times in microseconds from `origin_ns`
/// (a round's start): what, host begin and duration, GPU begin and
/// duration (null without), the steps, and a tier kernel's phase sum.
inline void timeline_json(std::ostream& out, std::vector<timeline_call> const& calls, std::int64_t origin_ns) {
  auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1e3; };
  out << "[";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    timeline_call const& c = calls[i];
    out << (i > 0 ? ",\n  " : "\n  ") << "{\"what\":\"" << c.what << "\",\"host_begin_us\":" << us(c.host_begin_ns - origin_ns)
        << ",\"host_us\":" << us(c.host_end_ns - c.host_begin_ns);
    if (c.gpu_begin_ns >= 0 && c.gpu_end_ns >= 0) {
      out << ",\"gpu_begin_us\":" << us(c.gpu_begin_ns - origin_ns) << ",\"gpu_us\":" << us(c.gpu_end_ns - c.gpu_begin_ns);
    } else {
      out << ",\"gpu_begin_us\":null,\"gpu_us\":null";
    }
    out << ",\"calls\":" << c.steps.calls << ",\"waits\":" << c.steps.waits << ",\"bytes_up\":" << c.steps.bytes_up
        << ",\"bytes_down\":" << c.steps.bytes_down << ",\"copies\":" << c.copies;
    if (c.phase_sum_ns >= 0) out << ",\"phase_sum_us\":" << us(c.phase_sum_ns);
    out << "}";
  }
  out << (calls.empty() ? "]" : "\n]");
}

}  // namespace placer::kernels
