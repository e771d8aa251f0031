#include "http.hpp"

#include "metrics.hpp"

#include <placer/service/log.hpp>

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <zmq.hpp>

namespace placer::service {

struct http_endpoint::impl {
  impl(zmq::context_t& ctx, service_metrics const& m, int timeout_ms)
      : probe_socket(ctx, zmq::socket_type::dealer), metrics(m), timeout(timeout_ms) {}

  /// The server's HealthReply, or nothing when its I/O thread did not
  /// answer in time. One probe at a time (one socket); a late answer to an
  /// earlier probe is told apart by its request id and dropped.
  std::optional<health_status> probe() {
    std::lock_guard lock(m);
    request_header h{next_id++, "", 0};
    flatbuffers::FlatBufferBuilder fbb(256);
    encode_health_request(fbb, h);
    if (!probe_socket.send(zmq::const_buffer(fbb.GetBufferPointer(), fbb.GetSize()), zmq::send_flags::dontwait)) {
      return std::nullopt;
    }
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
    for (;;) {
      auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      zmq::pollitem_t item{probe_socket.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      zmq::message_t reply;
      if ((item.revents & ZMQ_POLLIN) == 0 || !probe_socket.recv(reply, zmq::recv_flags::dontwait)) continue;
      auto const chk = check_envelope(reply.data(), reply.size());
      if (chk.envelope == nullptr || chk.envelope->header() == nullptr ||
          chk.envelope->header()->request_id() != h.request_id) {
        continue;  // an earlier probe's answer, come late
      }
      try {
        return decode_health_reply(*chk.envelope);
      } catch (std::exception const&) {
        return std::nullopt;
      }
    }
  }

  httplib::Server http;
  std::thread thread;
  std::string address;
  std::mutex m;
  zmq::socket_t probe_socket;
  std::uint64_t next_id = 1;
  service_metrics const& metrics;
  int timeout;
};

http_endpoint::http_endpoint(std::string const& address, zmq::context_t& ctx, std::string const& probe_endpoint,
                             service_metrics const& metrics, int probe_timeout_ms)
    : impl_(std::make_unique<impl>(ctx, metrics, probe_timeout_ms)) {
  auto const colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw std::runtime_error("--http wants HOST:PORT, got '" + address + "'");
  }
  std::string const host = address.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (std::exception const&) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw std::runtime_error("--http: bad port in '" + address + "'");
  impl_->probe_socket.set(zmq::sockopt::linger, 0);
  impl_->probe_socket.connect(probe_endpoint);

  auto& http = impl_->http;
  // Two handler threads; GETs only, small, and slow clients cut off.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.set_payload_max_length(4096);
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  auto* p = impl_.get();
  http.Get("/metrics", [p](httplib::Request const&, httplib::Response& res) {
    auto const h = p->probe();
    res.set_content(p->metrics.render(h ? &*h : nullptr), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/livez", [p](httplib::Request const&, httplib::Response& res) {
    bool const up = p->probe().has_value();
    res.status = up ? 200 : 503;
    res.set_content(up ? "ok\n" : "the I/O thread did not answer\n", "text/plain");
  });
  http.Get("/readyz", [p](httplib::Request const&, httplib::Response& res) {
    auto const h = p->probe();
    bool const ready = h && h->ready;
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ok\n" : !h ? "the I/O thread did not answer\n" : "not ready: " + h->not_ready + "\n",
                    "text/plain");
  });
  if (port == 0) {
    port = http.bind_to_any_port(host);
    if (port < 0) throw std::runtime_error("--http: cannot bind " + address);
  } else if (!http.bind_to_port(host, port)) {
    throw std::runtime_error("--http: cannot bind " + address);
  }
  impl_->address = host + ":" + std::to_string(port);
  impl_->thread = std::thread([p] { p->http.listen_after_bind(); });
  // Serving before the constructor returns, so a stop() cannot come first
  // (it would be lost, and the destructor's join would wait forever).
  for (int k = 0; k < 2000 && !http.is_running(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  log_info("HTTP on " + impl_->address + ": /metrics, /livez, /readyz");
}

http_endpoint::~http_endpoint() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string http_endpoint::address() const { return impl_->address; }

}  // namespace placer::service
