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
// with PONG. What it bounds: the handshake's time and its commands' sizes,
// a message's bytes and frames (a message past them is read to its end,
// dropped, and reported, never buffered), and the number of connections.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace placer::service::zmtp {

/// A CURVE key as 32 raw bytes.
using key32 = std::array<std::uint8_t, 32>;

struct listener_config {
  std::size_t max_message_bytes = std::size_t{64} << 20;  ///< a message's frames, summed
  std::size_t max_frames = 16;                            ///< frames in one message
  std::size_t max_connections = 4096;                     ///< more are closed at once
  std::chrono::milliseconds handshake_timeout{10000};     ///< greeting to READY
  /// A message's frames, from the first byte of one to its last, within
  /// this long; and all connections' partly read frames within this many
  /// bytes (a frame that would pass it closes its connection): a peer that
  /// announces large frames and sends nothing holds no memory for long.
  std::chrono::milliseconds frame_timeout{30000};
  std::size_t max_buffered_bytes = std::size_t{1} << 30;
  /// CURVE: the server's long-term secret key. With it the listener takes
  /// CURVE peers only; without, NULL peers only.
  std::optional<key32> curve_secret;
  /// CURVE: whether a client's long-term public key (Z85) may in, and
  /// where it came from ("IP:port"); false closes the handshake.
  std::function<bool(std::string const& z85_key, std::string const& address)> allow;
};

/// What the listener hands the server.
struct incoming {
  enum class kind {
    message,    ///< a whole message: `frames`
    oversized,  ///< a message past max_message_bytes or max_frames, dropped: `bytes` read of it
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
};

struct listener_stats {
  std::uint64_t connections = 0;        ///< open now
  std::uint64_t handshakes_denied = 0;  ///< CURVE keys not allowed
  std::uint64_t protocol_errors = 0;    ///< peers closed for what they sent (or did not send in time)
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
  /// what completes to `out`; also closes handshakes past their time.
  void read(std::vector<incoming>& out, int budget = 256);
  /// Sends one message (its frames in order) to a connection; false when
  /// the connection is gone, or closed because it could not take it.
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
