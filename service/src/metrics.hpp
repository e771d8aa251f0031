#pragma once
// What `placer serve --http` exposes at /metrics, in the Prometheus text
// format (prometheus-cpp's registry and serializer). Two sources:
//   - the rounds, counted and timed by the workers as they answer them
//     (rounds by code, end-to-end and per-stage latency histograms, placed
//     replicas, unplaced jobs by reason, each session's cluster gauges),
//     and the capture writer's files (written, dropped, failed);
//   - the server's state, read at scrape time from the same HealthReply
//     `placer health` gets (workers, queue, refusals, drops, sessions), so
//     the probe and the scrape cannot disagree.
// Names follow the Prometheus conventions: `placer_` prefix, base units in
// the name (`_seconds`, `_bytes`), `_total` for counters.

#include <placer/service/codec.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace placer::service {

class service_metrics {
 public:
  service_metrics();
  ~service_metrics();
  service_metrics(service_metrics const&) = delete;
  service_metrics& operator=(service_metrics const&) = delete;

  /// A round answered, by a worker or the I/O thread: its code, how long
  /// the server held it (queue and solve), and its result when solved.
  /// Thread-safe (workers call it concurrently).
  void round(wire::ErrorCode code, double seconds, round_result const* r = nullptr, std::string_view session = {});

  /// A round taken by --capture: "written", "dropped" or "failed".
  /// Thread-safe (the capture writer's thread and the workers call it).
  void capture(char const* outcome);

  /// The scrape's text: the rounds' families, then the server's state from
  /// a probe (null when the I/O thread did not answer: placer_up 0).
  [[nodiscard]] std::string render(health_status const* h) const;

  /// Sessions whose cluster gauges are kept (least recently used go).
  static constexpr std::size_t max_session_labels = 64;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* rounds_;
  prometheus::Histogram* latency_;
  prometheus::Family<prometheus::Histogram>* stages_;
  prometheus::Counter* placed_;
  prometheus::Family<prometheus::Counter>* unplaced_;
  prometheus::Family<prometheus::Gauge>* gar_;
  prometheus::Family<prometheus::Gauge>* gfr_;
  prometheus::Family<prometheus::Gauge>* frag_;
  prometheus::Family<prometheus::Counter>* captures_;
  std::mutex sessions_m_;
  std::deque<std::string> sessions_;  ///< labelled sessions, least recently used first
};

}  // namespace placer::service
