// libFuzzer harness over the service's own ZMTP (service/src/zmtp.cpp), the
// code every peer's bytes reach first. Each input is sent three ways to a
// listener on a loopback port, which echoes every message it reads:
//   1. as raw bytes on a TCP connection, in two writes (split where the
//      input's first byte says), then closed;
//   2. as the routing id (its first 1-5 bytes: the shape of the ids libzmq's
//      ROUTER generates) of a libzmq DEALER, which sends a message and must
//      get it back;
//   3. by that DEALER again after a reconnect, under the same id.
// Small limits (4 KiB messages, 4 frames, 200 ms handshakes), so that the
// paths past them run too. A finding is a crash, a sanitizer report, or a
// DEALER not answered within 2 s (a peer's bytes stopped the listener).
// Built by `make fuzz` beside the request fuzzer; `make test` runs it for
// 30 s.
#include <placer/service/zmtp.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace placer::service;
using clock_type = std::chrono::steady_clock;

struct rig {
  zmq::context_t ctx{1};
  zmtp::listener net{ctx, config()};
  std::string endpoint;
  int port = 0;
  std::vector<zmtp::incoming> events;

  rig() {
    net.bind("tcp://127.0.0.1:*");
    endpoint = net.last_endpoint();
    port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  }
  static zmtp::listener_config config() {
    zmtp::listener_config c;
    c.max_message_bytes = 4096;
    c.max_frames = 4;
    c.handshake_timeout = std::chrono::milliseconds(200);
    return c;
  }
  /// Reads and echoes for `ms` milliseconds, or until `done()`.
  template <class Done>
  void pump(int ms, Done done) {
    auto const until = clock_type::now() + std::chrono::milliseconds(ms);
    while (!done() && clock_type::now() < until) {
      zmq::pollitem_t item{net.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(1));
      } catch (zmq::error_t const& e) {
        if (e.num() != EINTR) throw;  // libFuzzer's timer signal
      }
      events.clear();
      net.read(events, 64);
      for (auto& e : events) {
        if (e.what == zmtp::incoming::kind::message) (void)net.send(e.conn, e.frames);
      }
    }
  }
};

int raw_connect(int port) {
  int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  static rig r;
  // 1. The input as a peer's bytes.
  if (int const fd = raw_connect(r.port); fd >= 0) {
    std::size_t const split = size == 0 ? 0 : data[0] % (size + 1);
    (void)::send(fd, data, split, MSG_NOSIGNAL);
    r.pump(2, [] { return false; });
    (void)::send(fd, data + split, size - split, MSG_NOSIGNAL);
    r.pump(2, [] { return false; });
    ::close(fd);
  }
  // 2 and 3. A DEALER named after the input, answered, twice.
  std::string const id(reinterpret_cast<char const*>(data), std::min<std::size_t>(size, 5));
  for (int k = 0; k < 2; ++k) {
    zmq::socket_t d(r.ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    if (!id.empty()) d.set(zmq::sockopt::routing_id, zmq::buffer(id));
    d.connect(r.endpoint);
    std::string const text = "echo " + std::to_string(k);
    d.send(zmq::message_t{}, zmq::send_flags::sndmore);
    d.send(zmq::buffer(text));
    bool answered = false;
    r.pump(2000, [&] {
      zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(0));
      } catch (zmq::error_t const& e) {
        if (e.num() != EINTR) throw;
      }
      answered = (item.revents & ZMQ_POLLIN) != 0;
      return answered;
    });
    if (!answered) {
      std::fprintf(stderr, "a DEALER was not answered after the input's bytes (round %d)\n", k);
      std::abort();
    }
    zmq::message_t delimiter, echo;
    (void)d.recv(delimiter);
    (void)d.recv(echo);
    if (delimiter.size() != 0 || echo.to_string() != text) {
      std::fprintf(stderr, "a DEALER got back something else than it sent\n");
      std::abort();
    }
  }
  return 0;
}
