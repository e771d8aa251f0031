#pragma once
// `placer serve --http HOST:PORT`: an HTTP endpoint beside the ZeroMQ
// socket for what a platform's monitoring expects:
//   GET /metrics  the Prometheus text format (metrics.hpp)
//   GET /livez    200 when the service's I/O thread answers a probe, else 503
//   GET /readyz   200 when it says ready (no worker stuck past --stuck-ms,
//                 no queue that stopped draining), else 503 with the reason
// Every answer comes from a HealthRequest sent to the server's own ROUTER
// over inproc, the probe `placer health` sends: the HTTP probes and the
// ZeroMQ one cannot disagree, and /livez fails exactly when the I/O thread
// stops answering.
//
// Its peers are untrusted (the chart binds it on the pod's network for the
// kubelet's probes), so it is bounded like the ZeroMQ transport: one thread
// polls at most http_connections connections; a request's head must come
// whole, at most http_head_bytes, within http_head_time of the accept; one
// answer, "Connection: close", written within http_write_time; and a new
// connection past the bound closes the oldest, so idle or slow peers cannot
// keep a probe out. (cpp-httplib's server, used before 2026-12-07, times
// each read, not the request: two peers sending a header line a second held
// its two handler threads, and every /livez failed while they did.)

#include <placer/service/codec.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace zmq {
class context_t;
}

namespace placer::service {

class service_metrics;

inline constexpr std::size_t http_connections = 64;
inline constexpr std::size_t http_head_bytes = 4096;
inline constexpr std::chrono::milliseconds http_head_time{2000};
inline constexpr std::chrono::milliseconds http_write_time{2000};

class http_endpoint {
 public:
  /// Binds `address` ("host:port", "[v6]:port"; port 0 = any free one) and
  /// serves from a thread of its own until destroyed. `probe_endpoint`: an inproc
  /// endpoint the server's ROUTER is bound to. Throws std::runtime_error
  /// when the address cannot be bound.
  http_endpoint(std::string const& address, zmq::context_t& ctx, std::string const& probe_endpoint,
                service_metrics const& metrics, int probe_timeout_ms);
  ~http_endpoint();
  http_endpoint(http_endpoint const&) = delete;
  http_endpoint& operator=(http_endpoint const&) = delete;

  /// "host:port" as bound.
  [[nodiscard]] std::string address() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace placer::service
