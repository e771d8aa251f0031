// The service's side of ZMTP 3 (ZeroMQ's wire protocol, RFC 23) over a
// ZMQ_STREAM socket: the server speaks the protocol itself, so that what a
// connection is called is the server's choice alone.
//
// Why not a ROUTER: libzmq's ROUTER takes the routing id a peer announces
// in its handshake, and generates one (a zero byte and a counter) for peers
// that announce none, without checking that a peer has not already taken
// it: a peer that announces the next generated id aborts the process at the
// next ordinary connection (libzmq 4.3.4, socket_base.cpp:2130). A STREAM
// socket names every connection itself (raw TCP: nothing of the peer's
// handshake reaches it), and this file reads the peer's handshake, its
// identity included, as data: the identity is parsed and ignored.
//
// What it speaks: ZMTP 3.0/3.1 with the NULL mechanism, or with CURVE
// (CurveZMQ, RFC 26, libsodium) when the listener has a secret key; peers
// of the REQ and DEALER types (placer's clients are DEALERs); PING answered
// with PONG, and PINGed when quiet (ZMTP 3.1 heartbeats).
//
// What it bounds (docs/deployment.md, "What a peer can hold"):
//   - memory: one account (`listener_stats::held_bytes`, at most
//     `memory_budget`) for every byte a peer makes the server hold: the
//     frame being read, the finished frames of an unfinished message, whole
//     messages until the server lets them go (`incoming::charge`: a queued
//     round keeps it), and replies handed to the socket until they are
//     written to the kernel (counted by libzmq's free callback). A message
//     that would pass the budget is read to its end without being kept and
//     refused (`incoming::kind::refused`, retry later); one past the
//     message's limits likewise (`oversized`, permanent). So while unread
//     replies fill the budget nothing new is taken in, and no new reply is
//     made but for the rounds already waiting. A connection that leaves
//     more than `max_unread_bytes` unread (one reply may pass it alone),
//     or of which nothing held has been written for `message_timeout`, is
//     disconnected for real: libzmq's pipe takes the close whatever it
//     holds, and the TCP connection is reset rather than left to the
//     kernel to deliver what the peer will not read;
//   - time: the handshake (`handshake_timeout`), a message from its first
//     byte to its last frame and any one frame (`message_timeout`), and
//     silence (`idle_timeout`: no byte from the peer, though a ZMTP 3.1 peer
//     is PINGed after `heartbeat_interval` of it and answers);
//   - connections: `max_connections` in all and `max_connections_per_address`
//     from one address; when either is full, the connection idle the
//     longest (nothing in flight) goes before a new one is refused;
//   - what libzmq buffers for a connection the I/O thread has not read yet:
//     `receive_hwm` chunks of 8 KiB.
// A connection closed for what its peer did is told why in a ZMTP ERROR
// (sealed in a box once a CURVE handshake is done) where the protocol has
// one, and counted by cause (`listener_stats::closed`).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

namespace placer::service::zmtp {

/// A CURVE key as 32 raw bytes.
using key32 = std::array<std::uint8_t, 32>;

/// A share of a memory account, released when this goes (move-only): a
/// message's bytes while the server holds it.
class memory_charge {
 public:
  memory_charge() = default;
  memory_charge(std::shared_ptr<std::atomic<std::size_t>> account, std::size_t bytes)
      : account_(std::move(account)), bytes_(bytes) {}
  memory_charge(memory_charge&& o) noexcept : account_(std::move(o.account_)), bytes_(std::exchange(o.bytes_, 0)) {}
  memory_charge& operator=(memory_charge&& o) noexcept {
    if (this != &o) {
      release();
      account_ = std::move(o.account_);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  memory_charge(memory_charge const&) = delete;
  memory_charge& operator=(memory_charge const&) = delete;
  ~memory_charge() { release(); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  void release() {
    if (account_ && bytes_ > 0) account_->fetch_sub(bytes_);
    bytes_ = 0;
  }

 private:
  std::shared_ptr<std::atomic<std::size_t>> account_;
  std::size_t bytes_ = 0;
};

struct listener_config {
  std::size_t max_message_bytes = std::size_t{64} << 20;  ///< a message's frames, summed
  std::size_t max_frames = 16;                            ///< frames in one message
  std::size_t max_connections = 4096;                     ///< open at once (the idle go first when full)
  std::size_t max_connections_per_address = 1024;         ///< from one IP address (ipc://: not limited)
  std::chrono::milliseconds handshake_timeout{10000};     ///< greeting to READY
  /// A message from its first byte to its last frame, and any one frame
  /// (a command too), within this long.
  std::chrono::milliseconds message_timeout{30000};
  /// A ZMTP 3.1 peer quiet this long is sent a PING (0: never); one that
  /// sends nothing at all for `idle_timeout` is closed (0: never).
  std::chrono::milliseconds heartbeat_interval{10000};
  std::chrono::milliseconds idle_timeout{30000};
  /// Every byte the listener and the messages it handed over hold for
  /// peers (above).
  std::size_t memory_budget = std::size_t{1} << 30;
  /// Replies one connection may leave unread; 0 = max_message_bytes.
  std::size_t max_unread_bytes = 0;
  /// libzmq's inbound queue per connection, in chunks of up to 8 KiB.
  int receive_hwm = 16;
  /// CURVE: the server's long-term secret key. With it the listener takes
  /// CURVE peers only; without, NULL peers only.
  std::optional<key32> curve_secret;
  /// CURVE: whether a client's long-term public key (Z85) may in, and
  /// where it came from (its IP address); false closes the handshake.
  std::function<bool(std::string const& z85_key, std::string const& address)> allow;
};

/// What the listener hands the server.
struct incoming {
  enum class kind {
    message,    ///< a whole message: `frames`
    oversized,  ///< a message past max_message_bytes or max_frames, dropped: `bytes` read of it
    refused,    ///< a message that would have passed the memory budget, dropped: retry later
    closed      ///< the connection is gone (answers to it are dropped)
  };
  kind what = kind::message;
  std::uint64_t conn = 0;  ///< the connection's serial: never reused
  std::vector<zmq::message_t> frames;
  std::string user_id;    ///< CURVE: the client's public key (Z85); NULL: empty
  std::size_t bytes = 0;  ///< oversized: the bytes it had when dropped
  std::size_t frame_count = 0;  ///< oversized: its frames when dropped
  bool delimited = false;       ///< oversized: it began with an empty frame (answers do too)
  bool too_many_frames = false;  ///< oversized: past max_frames (else past max_message_bytes)
  memory_charge charge;          ///< message: its bytes in the listener's account, until this goes
};

/// Why the listener closed a connection (listener_stats::closed).
enum class close_cause : std::uint8_t {
  protocol,           ///< what the peer sent broke ZMTP or the mechanism
  denied,             ///< CURVE: a key not allowed
  handshake_timeout,  ///< no READY within handshake_timeout
  message_timeout,    ///< a message or frame not finished within message_timeout
  idle,               ///< nothing from the peer within idle_timeout
  slow_reader,        ///< replies left unread past max_unread_bytes or the budget
  evicted,            ///< idle the longest when a new connection needed the room
  full,               ///< refused at connect: every connection (of its address) busy
  count
};
char const* close_cause_name(close_cause c);

struct listener_stats {
  std::uint64_t connections = 0;        ///< open now
  std::uint64_t handshakes_denied = 0;  ///< CURVE keys not allowed
  std::uint64_t protocol_errors = 0;    ///< peers closed for what they sent (or did not send in time)
  std::uint64_t held_bytes = 0;         ///< the memory account now
  std::uint64_t memory_budget = 0;
  std::array<std::uint64_t, static_cast<std::size_t>(close_cause::count)> closed{};  ///< by cause
  std::uint64_t refused_memory = 0;     ///< messages refused for the budget (kind::refused)
  std::uint64_t pings = 0;              ///< heartbeats sent
  std::uint64_t closing = 0;            ///< closed, libzmq still ending them (last bytes, or a reset)
};

class listener {
 public:
  listener(zmq::context_t& ctx, listener_config cfg);
  ~listener();
  listener(listener const&) = delete;
  listener& operator=(listener const&) = delete;

  /// tcp:// or ipc:// (throws zmq::error_t as bind does).
  void bind(std::string const& endpoint);
  [[nodiscard]] std::string last_endpoint() const;
  /// For zmq::poll (ZMQ_POLLIN).
  [[nodiscard]] void* handle() const;

  /// Reads what has arrived (at most `budget` transport reads), appending
  /// what completes to `out`; also closes what is past its time and
  /// PINGs the quiet (at most every 100 ms).
  void read(std::vector<incoming>& out, int budget = 256);
  /// Sends one message (its frames in order) to a connection; false when
  /// the connection is gone, or closed because it leaves its replies
  /// unread (close_cause::slow_reader). The frames' memory goes when
  /// libzmq has written them.
  bool send(std::uint64_t conn, std::vector<zmq::message_t>& frames);
  [[nodiscard]] listener_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The public key of a CURVE secret key.
key32 curve_public(key32 const& secret);
/// Z85 (40 characters) to 32 bytes; nullopt when it is not a key.
std::optional<key32> z85_key(std::string const& z85);

}  // namespace placer::service::zmtp
