// libFuzzer harness over the service's own ZMTP (service/src/zmtp.cpp), the
// code every peer's bytes reach first. A listener on a loopback port, pumped
// by a thread of its own, echoes every message it reads. Two builds:
//
// zmtp_fuzz (NULL): each input is sent three ways:
//   1. as raw bytes on a TCP connection, in two writes (split where the
//      input's first byte says), then closed;
//   2. as the routing id (its first 1-5 bytes: the shape of the ids libzmq's
//      ROUTER generates) of a libzmq DEALER, which sends a message and must
//      get it back;
//   3. by that DEALER again after a reconnect, under the same id.
//
// zmtp_curve_fuzz (PLACER_FUZZ_CURVE): a peer finishes a real CURVE
// handshake (tests/support/zmtp_peer.hpp), then the input is read as a
// list of steps, each a box sealed with the session's keys and mutated as
// the step says (its flags, its nonce, a byte of it, its frame's header, a
// plaintext command instead), or raw bytes; then a libzmq CURVE DEALER
// must be answered.
//
// Small limits (4 KiB messages, 4 frames, a 64 KiB memory budget, 200 ms
// handshakes and messages), so that the paths past them run too. A finding
// is a crash, a sanitizer report, the memory account past its budget, or a
// DEALER not answered within 10 s (a peer's bytes stopped the listener), or
// (CURVE) memory still held once every peer is gone.
// Built by `make fuzz` beside the request fuzzer; `make test` runs each for
// 30 s.
#include <placer/service/zmtp.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../support/zmtp_peer.hpp"

namespace {

using namespace placer::service;
using placer::testing_support::curve_pair;
using placer::testing_support::zmtp_peer;
using clock_type = std::chrono::steady_clock;

curve_pair const& server_keys() {
  static curve_pair const k = curve_pair::make();
  return k;
}
curve_pair const& client_keys() {
  static curve_pair const k = curve_pair::make();
  return k;
}

struct rig {
  zmq::context_t ctx{1};
  zmtp::listener net{ctx, config()};
  std::string endpoint;
  int port = 0;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> held{0}, connections{0}, refused{0}, closing{0};  ///< published by the pump, for a finding's report
  std::thread pump;

  rig() {
    net.bind("tcp://127.0.0.1:*");
    endpoint = net.last_endpoint();
    port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
    pump = std::thread([this] { run(); });
  }
  ~rig() {
    stop = true;
    pump.join();
  }
  static zmtp::listener_config config() {
    zmtp::listener_config c;
    c.max_message_bytes = 4096;
    c.max_frames = 4;
    c.memory_budget = 64 << 10;
    c.handshake_timeout = std::chrono::milliseconds(200);
    c.message_timeout = std::chrono::milliseconds(200);
    c.heartbeat_interval = std::chrono::milliseconds(50);
    c.idle_timeout = std::chrono::milliseconds(1000);
#ifdef PLACER_FUZZ_CURVE
    c.curve_secret = server_keys().sec;
    c.allow = [](std::string const&, std::string const&) { return true; };
#endif
    return c;
  }
  /// Reads and echoes until stopped; the account never passes its budget
  /// by more than what replies in flight may (one per connection).
  void run() {
    std::vector<zmtp::incoming> events;
    while (!stop) {
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
      auto const s = net.stats();
      held = s.held_bytes;
      connections = s.connections;
      refused = s.refused_memory;
      closing = s.closing;
      if (s.held_bytes > s.memory_budget + 64 * 4096) {
        std::fprintf(stderr, "the memory account holds %llu bytes, past its budget\n",
                     static_cast<unsigned long long>(s.held_bytes));
        std::abort();
      }
    }
  }
};

rig& the_rig() {
  static rig r;
  return r;
}

/// A libzmq DEALER (named `id`, or CURVE) sends a message and must get it back.
void expect_answered(rig& r, std::string const& id, int round) {
  zmq::socket_t d(r.ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  if (!id.empty()) d.set(zmq::sockopt::routing_id, zmq::buffer(id));
#ifdef PLACER_FUZZ_CURVE
  d.set(zmq::sockopt::curve_serverkey, zmq::buffer(server_keys().pub));
  d.set(zmq::sockopt::curve_publickey, zmq::buffer(client_keys().pub));
  d.set(zmq::sockopt::curve_secretkey, zmq::buffer(client_keys().sec));
#endif
  d.connect(r.endpoint);
  std::string const text = "echo " + std::to_string(round);
  d.send(zmq::message_t{}, zmq::send_flags::sndmore);
  d.send(zmq::buffer(text));
  zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
  // 10 s: a listener stopped by the input never answers, while one merely
  // starved of the CPU (the fuzzer runs niced beside builds) answers late.
  // 2 s gave a false finding in the 30-minute run on a loaded machine.
  auto const until = clock_type::now() + std::chrono::seconds(10);
  while ((item.revents & ZMQ_POLLIN) == 0 && clock_type::now() < until) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
    } catch (zmq::error_t const& e) {
      if (e.num() != EINTR) throw;
    }
  }
  if ((item.revents & ZMQ_POLLIN) == 0) {
    std::fprintf(stderr,
                 "a DEALER was not answered after the input's bytes (round %d); the listener holds %llu bytes for "
                 "%llu connections, %llu messages refused for the budget so far\n",
                 round, static_cast<unsigned long long>(r.held.load()),
                 static_cast<unsigned long long>(r.connections.load()), static_cast<unsigned long long>(r.refused.load()));
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

#ifdef PLACER_FUZZ_CURVE
/// The input as steps after a real handshake: [kind, length, bytes...]*.
void curve_steps(rig& r, std::uint8_t const* data, std::size_t size) {
  zmtp_peer p(r.port);
  if (!p.connected() || !p.curve_handshake(server_keys().pub, client_keys())) return;
  std::size_t k = 0;
  while (k + 2 <= size) {
    std::uint8_t const kind = data[k];
    std::size_t const len = std::min<std::size_t>(data[k + 1], size - k - 2);
    std::string_view const bytes(reinterpret_cast<char const*>(data + k + 2), len);
    k += 2 + len;
    std::uint8_t const arg = bytes.empty() ? 0 : static_cast<std::uint8_t>(bytes[0]);
    std::string_view const rest = bytes.empty() ? bytes : bytes.substr(1);
    std::string wire;
    switch (kind % 8) {
      case 0:  // a box with any flags
        wire = zmtp_peer::encode(0, p.box(arg, rest, p.next_nonce()));
        break;
      case 1: {  // a box under a nonce moved back or ahead
        std::uint64_t const n = p.next_nonce();
        wire = zmtp_peer::encode(0, p.box(0, rest, arg < 128 ? n - arg : n + (std::uint64_t{arg} << 56)));
        break;
      }
      case 2: {  // a box with one byte changed
        std::string b = p.box(0, rest, p.next_nonce());
        b[arg % b.size()] = static_cast<char>(b[arg % b.size()] ^ 0x5a);
        wire = zmtp_peer::encode(0, b);
        break;
      }
      case 3:  // a box in a frame with other flags (COMMAND, MORE)
        wire = zmtp_peer::encode(static_cast<std::uint8_t>(arg & 7), p.box(0, rest, p.next_nonce()));
        break;
      case 4:  // a command in a box
        wire = zmtp_peer::encode(0, p.box(2, zmtp_peer::command(rest.substr(0, 9), rest.size() > 9 ? rest.substr(9) : ""),
                                           p.next_nonce()));
        break;
      case 5:  // a plaintext command
        wire = zmtp_peer::encode(4, zmtp_peer::command(rest.substr(0, 5), rest.size() > 5 ? rest.substr(5) : ""));
        break;
      case 6: {  // a box larger than a message may be, genuine or not, whole or cut
        std::string b = p.box(arg & 1, std::string(4096 + 64 * arg, 'z'), p.next_nonce());
        if ((arg & 2) != 0) b[40] = static_cast<char>(b[40] ^ 1);
        wire = zmtp_peer::encode(0, b);
        if ((arg & 4) != 0) wire.resize(wire.size() / 2);
        break;
      }
      default:  // raw bytes
        wire.assign(rest);
        break;
    }
    if (!p.send_raw(wire) || !p.drain()) return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  (void)p.drain();
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  rig& r = the_rig();
#ifdef PLACER_FUZZ_CURVE
  curve_steps(r, data, size);
  expect_answered(r, "", 0);
  // Every peer gone: nothing may stay held (a charge that leaked would fill
  // the budget and refuse every message after it).
  auto const until = clock_type::now() + std::chrono::seconds(10);
  while ((r.held > 0 || r.connections > 0) && clock_type::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r.held > 0) {
    std::fprintf(stderr, "the listener still holds %llu bytes with every peer gone (%llu connections, %llu closing)\n",
                 static_cast<unsigned long long>(r.held.load()), static_cast<unsigned long long>(r.connections.load()),
                 static_cast<unsigned long long>(r.closing.load()));
    std::abort();
  }
#else
  // 1. The input as a peer's bytes.
  {
    zmtp_peer p(r.port);
    if (p.connected()) {
      std::size_t const split = size == 0 ? 0 : data[0] % (size + 1);
      (void)p.send_some(std::string_view(reinterpret_cast<char const*>(data), split));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      (void)p.send_some(std::string_view(reinterpret_cast<char const*>(data) + split, size - split));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // 2 and 3. A DEALER named after the input, answered, twice.
  std::string const id(reinterpret_cast<char const*>(data), std::min<std::size_t>(size, 5));
  for (int k = 0; k < 2; ++k) expect_answered(r, id, k);
#endif
  return 0;
}
