#include "http.hpp"

#include "metrics.hpp"

#include <placer/service/log.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace placer::service {

namespace {

using steady = std::chrono::steady_clock;

/// An accepted connection: its request head as it arrives, then the answer
/// as it leaves; closed at its deadline whatever it did.
struct connection {
  int fd = -1;
  steady::time_point deadline;
  std::uint64_t order = 0;  ///< accept order: the oldest is evicted first
  std::string in;
  std::string out;
  std::size_t sent = 0;
};

[[nodiscard]] std::string answer(int status, std::string_view reason, std::string_view type, std::string const& body,
                                 bool with_body, std::string_view extra = {}) {
  std::string a = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\nContent-Type: " +
                  std::string(type) + "\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n" + std::string(extra) + "\r\n";
  if (with_body) a += body;
  return a;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// Closes an answered connection: what its peer sent past the head (a
/// body, a second request) read and dropped first, so that the close is not
/// a reset that could discard the answer on the peer's side.
void finish(int& fd) {
  char sink[4096];
  for (int k = 0; k < 4 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++k) {
  }
  close_fd(fd);
}

}  // namespace

struct http_endpoint::impl {
  impl(zmq::context_t& ctx, service_metrics const& m, int timeout_ms)
      : probe_socket(ctx, zmq::socket_type::dealer), metrics(m), timeout(timeout_ms) {}
  ~impl() {
    close_fd(listener);
    close_fd(wake[0]);
    close_fd(wake[1]);
  }

  /// The server's HealthReply, or nothing when its I/O thread did not
  /// answer in time. One probe at a time (the serving thread's); a late
  /// answer to an earlier probe is told apart by its request id and dropped.
  std::optional<health_status> probe() {
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

  /// The answer to a whole request head.
  std::string respond(std::string_view head) {
    auto const line_end = head.find_first_of("\r\n");
    std::string_view const line = head.substr(0, line_end);
    auto const sp1 = line.find(' ');
    auto const sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
      return answer(400, "Bad Request", "text/plain", "not an HTTP/1 request line\n", true);
    }
    std::string_view const method = line.substr(0, sp1);
    std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    bool const body = method == "GET";
    if (!body && method != "HEAD") {
      return answer(405, "Method Not Allowed", "text/plain", "GET or HEAD only\n", true, "Allow: GET, HEAD\r\n");
    }
    if (path == "/metrics") {
      auto const h = probe();
      return answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", metrics.render(h ? &*h : nullptr), body);
    }
    if (path == "/livez") {
      bool const up = probe().has_value();
      return up ? answer(200, "OK", "text/plain", "ok\n", body)
                : answer(503, "Service Unavailable", "text/plain", "the I/O thread did not answer\n", body);
    }
    if (path == "/readyz") {
      auto const h = probe();
      if (h && h->ready) return answer(200, "OK", "text/plain", "ok\n", body);
      return answer(503, "Service Unavailable", "text/plain",
                    !h ? "the I/O thread did not answer\n" : "not ready: " + h->not_ready + "\n", body);
    }
    return answer(404, "Not Found", "text/plain", "/metrics, /livez or /readyz\n", body);
  }

  /// Reads what c's peer sent, or writes what is left of its answer; false
  /// once c is done (answered, closed by its peer, broken, or its head too
  /// large, which is answered 431 first).
  bool serve(connection& c) {
    if (c.out.empty()) {
      char buf[1024];
      for (;;) {
        auto const n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n == 0) return false;
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
          return false;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        if (c.in.find("\r\n\r\n") == std::string::npos && c.in.find("\n\n") == std::string::npos) {
          if (c.in.size() > http_head_bytes) {
            c.out = answer(431, "Request Header Fields Too Large", "text/plain", "a request head is at most 4 KB\n", true);
            break;
          }
          continue;
        }
        c.out = respond(c.in);
        break;
      }
      c.deadline = steady::now() + http_write_time;
    }
    while (c.sent < c.out.size()) {
      auto const n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      c.sent += static_cast<std::size_t>(n);
    }
    return false;  // answered: the connection closes
  }

  /// The serving loop: until the wake pipe says stop.
  void run() {
    std::vector<connection> open;
    std::vector<pollfd> fds;
    std::uint64_t accepted = 0;
    for (;;) {
      fds.assign({{wake[0], POLLIN, 0}, {listener, POLLIN, 0}});
      auto now = steady::now();
      auto wait = std::chrono::milliseconds(1000);
      for (auto const& c : open) {
        fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now) +
                                  std::chrono::milliseconds(1));
      }
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, wait.count()))) < 0 &&
          errno != EINTR) {
        log_error(std::string("HTTP: poll failed: ") + std::strerror(errno));
        break;
      }
      if (fds[0].revents != 0) break;
      // Serve before admitting: a connection that became ready is answered
      // before any new one can evict it.
      std::vector<connection> kept;
      now = steady::now();
      for (std::size_t i = 0; i < open.size(); ++i) {
        connection& c = open[i];
        bool const ready = fds[i + 2].revents != 0;
        if ((ready ? serve(c) : true) && c.deadline > now) {
          kept.push_back(std::move(c));
        } else {
          finish(c.fd);
        }
      }
      open.swap(kept);
      if ((fds[1].revents & POLLIN) == 0) continue;
      for (int k = 0; k < 64; ++k) {
        int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: the pending connection stays in the
          // backlog, and the listener would wake the loop at once again.
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          break;
        }
        if (open.size() >= http_connections) {
          // Full: the oldest goes, so that idle or slow peers cannot keep a
          // new one (a probe) out; the oldest is the nearest its deadline.
          auto const oldest = std::min_element(open.begin(), open.end(),
                                               [](auto const& a, auto const& b) { return a.order < b.order; });
          close_fd(oldest->fd);
          open.erase(oldest);
        }
        connection c{fd, steady::now() + http_head_time, accepted++, {}, {}, 0};
        if (serve(c)) {
          open.push_back(std::move(c));
        } else {
          finish(c.fd);
        }
      }
    }
    for (auto& c : open) close_fd(c.fd);
  }

  int listener = -1;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::string address;
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
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    std::size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1) port = -1;
  } catch (std::exception const&) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw std::runtime_error("--http: bad port in '" + address + "'");
  impl_->probe_socket.set(zmq::sockopt::linger, 0);
  impl_->probe_socket.connect(probe_endpoint);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    throw std::runtime_error("--http: cannot resolve '" + host + "'");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && impl_->listener < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int const on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      impl_->listener = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (impl_->listener < 0) throw std::runtime_error("--http: cannot bind " + address + ": " + why);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(impl_->listener, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("--http: no pipe");
  impl_->address = address.substr(0, colon) + ":" + std::to_string(port);
  auto* p = impl_.get();
  impl_->thread = std::thread([p] { p->run(); });
  log_info("HTTP on " + impl_->address + ": /metrics, /livez, /readyz");
}

http_endpoint::~http_endpoint() {
  char const stop = 1;
  (void)!::write(impl_->wake[1], &stop, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string http_endpoint::address() const { return impl_->address; }

}  // namespace placer::service
