// ZMTP 3 over a ZMQ_STREAM socket, NULL and CURVE (zmtp.hpp).
#include <placer/service/zmtp.hpp>

#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

namespace placer::service::zmtp {

namespace {

using clock = std::chrono::steady_clock;

constexpr std::size_t greeting_bytes = 64;
constexpr std::size_t max_command_bytes = 4096;  // READY, HELLO (200), INITIATE (~400), PING
constexpr std::uint8_t flag_more = 1, flag_long = 2, flag_command = 4;
constexpr std::uint8_t box_more = 1, box_command = 2;  // a MESSAGE box's own flags
constexpr std::size_t curve_header = 16;               // "\x07MESSAGE" + 8-byte nonce
constexpr std::size_t box_mac = crypto_box_MACBYTES;
constexpr std::size_t box_head = curve_header + box_mac;  // what a dropped box keeps: header and MAC
constexpr std::size_t keep_cbody_bytes = 8192;            // a receive buffer past this is freed after its frame

void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int k = 7; k >= 0; --k, v >>= 8) p[k] = static_cast<std::uint8_t>(v);
}
std::uint64_t get_u64(std::uint8_t const* p) {
  std::uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v = (v << 8) | p[k];
  return v;
}
void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int k = 3; k >= 0; --k, v >>= 8) p[k] = static_cast<std::uint8_t>(v);
}
std::uint32_t get_u32(std::uint8_t const* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

/// A frame's header for `size` bytes with `flags` (MORE, COMMAND).
std::size_t header_bytes(std::size_t size) { return size <= 255 ? 2 : 9; }
std::size_t frame_header(std::uint8_t* out, std::size_t size, std::uint8_t flags) {
  if (size <= 255) {
    out[0] = flags;
    out[1] = static_cast<std::uint8_t>(size);
    return 2;
  }
  out[0] = static_cast<std::uint8_t>(flags | flag_long);
  put_u64(out + 1, size);
  return 9;
}

/// Metadata as the READY command and CURVE's INITIATE carry it.
std::string property(std::string_view name, std::string_view value) {
  std::string p;
  p.push_back(static_cast<char>(name.size()));
  p.append(name);
  std::uint8_t len[4];
  put_u32(len, static_cast<std::uint32_t>(value.size()));
  p.append(reinterpret_cast<char const*>(len), 4);
  p.append(value);
  return p;
}

/// The peer's Socket-Type from its metadata; "" when malformed. Every other
/// property (Identity among them) is read past and ignored.
std::string socket_type(std::uint8_t const* p, std::size_t n) {
  std::string type;
  std::size_t k = 0;
  while (k < n) {
    std::size_t const name_len = p[k++];
    if (name_len == 0 || k + name_len + 4 > n) return {};
    std::string_view const name(reinterpret_cast<char const*>(p + k), name_len);
    k += name_len;
    std::size_t const value_len = get_u32(p + k);
    k += 4;
    if (value_len > n - k) return {};
    if (name == "Socket-Type") type.assign(reinterpret_cast<char const*>(p + k), value_len);
    k += value_len;
  }
  return type;
}

bool compatible(std::string const& type) { return type == "DEALER" || type == "REQ"; }

std::string const& ready_metadata() {
  static std::string const m = property("Socket-Type", "ROUTER");
  return m;
}

/// A MESSAGE box checked as its bytes pass, never held whole: the Poly1305
/// tag over the ciphertext (XSalsa20's first 32 bytes of keystream are its
/// key, as crypto_box_afternm makes it), and the box's flags byte (the
/// plaintext's first, under keystream byte 32). For a frame too large to
/// keep: its nonce counts only if the tag holds.
struct passing_box {
  crypto_onetimeauth_poly1305_state state{};
  std::uint8_t tag[box_mac]{};
  std::uint8_t flags_pad = 0;
  std::uint8_t flags = 0;
  bool first = true;

  void start(std::uint8_t const* nonce24, std::uint8_t const* key, std::uint8_t const* tag16) {
    std::uint8_t block0[64] = {};
    crypto_stream_xsalsa20(block0, sizeof block0, nonce24, key);
    crypto_onetimeauth_poly1305_init(&state, block0);
    flags_pad = block0[32];
    sodium_memzero(block0, sizeof block0);
    std::memcpy(tag, tag16, box_mac);
    first = true;
  }
  void update(std::uint8_t const* p, std::size_t n) {
    if (n == 0) return;
    if (first) {
      flags = static_cast<std::uint8_t>(p[0] ^ flags_pad);
      first = false;
    }
    crypto_onetimeauth_poly1305_update(&state, p, n);
  }
  bool holds() {
    std::uint8_t got[box_mac];
    crypto_onetimeauth_poly1305_final(&state, got);
    return crypto_verify_16(got, tag) == 0;
  }
};

}  // namespace

char const* close_cause_name(close_cause c) {
  switch (c) {
    case close_cause::protocol: return "protocol";
    case close_cause::denied: return "denied";
    case close_cause::handshake_timeout: return "handshake_timeout";
    case close_cause::message_timeout: return "message_timeout";
    case close_cause::idle: return "idle";
    case close_cause::slow_reader: return "slow_reader";
    case close_cause::evicted: return "evicted";
    case close_cause::full: return "full";
    case close_cause::count: break;
  }
  return "unknown";
}

key32 curve_public(key32 const& secret) {
  key32 pub{};
  if (sodium_init() < 0 || crypto_scalarmult_base(pub.data(), secret.data()) != 0) {
    throw std::runtime_error("libsodium: cannot derive the CURVE public key");
  }
  return pub;
}

std::optional<key32> z85_key(std::string const& z85) {
  key32 k{};
  if (z85.size() != 40 || zmq_z85_decode(k.data(), z85.c_str()) == nullptr) return std::nullopt;
  return k;
}

namespace {

/// What one connection's replies hold until libzmq has written them:
/// counted up as they are handed over, down by libzmq's free callback (on
/// its own I/O thread), so it outlives the connection's record.
struct out_account {
  std::shared_ptr<std::atomic<std::size_t>> total;
  std::atomic<std::size_t> unread{0};
  std::atomic<std::uint64_t> written{0};  ///< bytes libzmq has let go, ever: the peer's progress
};

/// A message handed to libzmq, kept until libzmq lets it go: made on the
/// I/O thread, gone on libzmq's. libzmq's pipes order the two, but a race
/// detector does not see inside libzmq, so the hand-over is also published
/// through `handed` (release, then acquire), which costs nothing here.
struct out_frame {
  std::shared_ptr<out_account> account;
  std::size_t bytes;
  zmq::message_t kept;
  std::atomic<bool> handed{false};
  ~out_frame() {
    (void)handed.load(std::memory_order_acquire);
    account->unread.fetch_sub(bytes);
    account->written.fetch_add(bytes);
    account->total->fetch_sub(bytes);
  }
};

void release_out(void* /*data*/, void* hint) { delete static_cast<out_frame*>(hint); }

/// The TCP socket libzmq holds for a connection (its "__fd" property), and
/// the peer it was connected to then.
struct tcp_socket {
  int fd = -1;
  sockaddr_storage peer{};
  socklen_t peer_len = 0;

  void learn(zmq::message_t const& notice) {
    char const* text = zmq_msg_gets(notice.handle(), "__fd");
    if (text == nullptr) return;
    fd = std::atoi(text);
    peer_len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) peer_len = 0;
  }

  /// Resets the connection; false when it cannot. The empty message that
  /// closes a STREAM connection waits in libzmq's pipe behind what the peer
  /// has not read (the session drains its pipe before it ends, and stops
  /// reading the peer meanwhile), so for a peer that does not read it would
  /// never take effect: the socket is shut down under libzmq instead, which
  /// reads the end of the connection, closes it and drops its pipe (what it
  /// held is let go, and a notice of the close comes back), and SO_LINGER 0
  /// makes that close a reset that drops what the kernel holds too. The
  /// socket is libzmq's: touched only while it is still the one connected
  /// to the same peer (a descriptor is reused once libzmq closes it).
  [[nodiscard]] bool reset() const {
    if (fd < 0 || peer_len == 0) return false;
    sockaddr_storage now{};
    socklen_t len = sizeof now;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&now), &len) != 0 || len != peer_len ||
        std::memcmp(&now, &peer, len) != 0) {
      return false;
    }
    linger const abortive{1, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
    return ::shutdown(fd, SHUT_RDWR) == 0;
  }
};

}  // namespace

struct listener::impl {
  struct connection {
    std::string rid;  ///< the STREAM socket's name for it
    std::uint64_t serial = 0;
    enum class phase { greeting, handshake, ready } ph = phase::greeting;
    clock::time_point since;        ///< connected
    clock::time_point last_heard;   ///< any byte from the peer
    clock::time_point last_active;  ///< a message from it, or a reply to it: the eviction order
    clock::time_point last_ping;
    std::string address;
    std::uint8_t minor = 0;  ///< the peer's ZMTP minor version (1: it answers PING)
    std::string pending;     ///< greeting and frame header bytes not yet whole
    // The frame being read.
    bool in_frame = false;
    clock::time_point frame_since;  ///< its first byte (the header's)
    std::size_t reserved = 0;       ///< its bytes held, in the account
    std::uint8_t flags = 0;
    std::size_t size = 0, got = 0;
    zmq::message_t body;              ///< NULL data frames: read in place
    std::vector<std::uint8_t> cbody;  ///< commands, CURVE boxes (a dropped box: its head)
    // The message being read.
    bool in_message = false;
    clock::time_point message_since;  ///< its first byte
    enum class drop { none, oversized, memory } dropping = drop::none;  ///< read to its end, not kept
    std::size_t msg_bytes = 0, msg_frames = 0;
    std::size_t msg_held = 0;  ///< its finished frames' bytes, in the account
    bool first_empty = false;  ///< the message's first frame was empty (a REQ-style delimiter)
    std::vector<zmq::message_t> frames;  ///< the message so far
    std::uint32_t outstanding = 0;       ///< messages handed over and not yet answered
    std::shared_ptr<out_account> out;
    std::uint64_t written_seen = 0;                      ///< out->written at the last sweep
    std::optional<clock::time_point> stalled_since;      ///< replies held and none written since
    tcp_socket tcp;  ///< to reset it, when its peer does not read
    // CURVE.
    enum class curve_step { hello, initiate, done } step = curve_step::hello;
    key32 cn_public{}, cn_secret{}, cn_client{}, precom{};
    std::array<std::uint8_t, crypto_secretbox_KEYBYTES> cookie_key{};
    std::uint64_t nonce = 1, peer_nonce = 0;
    std::string user_id;
    passing_box passing;  ///< a dropped box's tag, checked as it passes

    /// Sending: a frame or message of the peer's under way.
    [[nodiscard]] bool sending() const { return ph == phase::ready && (in_frame || !pending.empty() || in_message); }
    /// Since when it has been sending.
    [[nodiscard]] clock::time_point sending_since() const { return in_message ? message_since : frame_since; }
  };

  impl(zmq::context_t& ctx, listener_config c)
      : cfg(std::move(c)), sock(ctx, zmq::socket_type::stream), held(std::make_shared<std::atomic<std::size_t>>(0)) {
    if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
    if (cfg.curve_secret) server_public = curve_public(*cfg.curve_secret);
    if (cfg.max_unread_bytes == 0) cfg.max_unread_bytes = cfg.max_message_bytes;
    sock.set(zmq::sockopt::linger, 0);
    // Nothing queues in libzmq past what the account counts: its pipes
    // take every reply (so a close always gets through, whatever a peer
    // left unread) and hold few chunks the I/O thread has not read.
    sock.set(zmq::sockopt::sndhwm, 0);
    sock.set(zmq::sockopt::rcvhwm, std::max(cfg.receive_hwm, 1));
    st.memory_budget = cfg.memory_budget;
  }

  listener_config cfg;
  zmq::socket_t sock;
  key32 server_public{};
  std::unordered_map<std::string, connection> by_rid;
  std::unordered_map<std::uint64_t, std::string> rid_of;
  std::unordered_map<std::string, std::size_t> by_address;
  std::uint64_t next_serial = 1;
  std::shared_ptr<std::atomic<std::size_t>> held;  ///< the memory account (zmtp.hpp)
  std::vector<std::uint64_t> closed_by_send;       ///< connections send() closed: reported at the next read
  /// Connections reset under libzmq (tcp_socket::reset), until libzmq's
  /// notice that they are gone, which is not a new connection (STREAM never
  /// reuses a name; was_closed); forgotten after a minute should the notice
  /// never come.
  std::unordered_map<std::string, clock::time_point> resetting;
  /// Connections closed while libzmq still held what they were sent (an
  /// ERROR, a reply): the close waits until it is written, and becomes a
  /// reset when nothing is written for a second, or after message_timeout.
  struct draining_close {
    std::string rid;
    std::shared_ptr<out_account> out;
    tcp_socket tcp;
    clock::time_point first, progress;
    std::uint64_t written = 0;
  };
  std::vector<draining_close> draining;
  listener_stats st;
  clock::time_point last_sweep = clock::now();

  bool curve() const { return cfg.curve_secret.has_value(); }
  bool curve_up(connection const& c) const { return curve() && c.step == connection::curve_step::done; }
  bool fits(std::size_t bytes) const { return held->load() + bytes <= cfg.memory_budget; }

  // ---- what a connection holds ------------------------------------------------------------------------------------

  void charge(std::size_t& slot, std::size_t bytes) {
    slot += bytes;
    held->fetch_add(bytes);
  }
  void uncharge(std::size_t& slot) {
    held->fetch_sub(slot);
    slot = 0;
  }
  /// The message read so far is let go (its end is read and dropped).
  void drop_message(connection& c) {
    c.frames.clear();
    uncharge(c.msg_held);
  }
  /// A receive buffer past a small one goes once its frame is done.
  static void shrink(connection& c) {
    if (c.cbody.capacity() > keep_cbody_bytes) std::vector<std::uint8_t>().swap(c.cbody);
  }

  // ---- sending ------------------------------------------------------------------------------------------------------

  /// Bytes to a connection, counted until libzmq has written them; false
  /// when the peer leaves more than its share unread (one message may pass
  /// it alone) or the socket would not take them. Unread replies count in
  /// the budget, so while they fill it no new message is taken in, and no
  /// new reply made.
  bool emit(connection& c, zmq::message_t&& m) {
    std::size_t const n = m.size();
    auto& acct = *c.out;
    std::size_t const unread = acct.unread.load();
    if (unread > 0 && unread + n > cfg.max_unread_bytes) return false;
    acct.unread.fetch_add(n);
    held->fetch_add(n);
    auto* kept = new out_frame{c.out, n, std::move(m)};
    zmq::message_t counted(kept->kept.data(), n, release_out, kept);  // freed (and uncounted) by libzmq
    kept->handed.store(true, std::memory_order_release);
    try {
      if (!sock.send(zmq::buffer(c.rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
      return sock.send(counted, zmq::send_flags::dontwait).has_value();
    } catch (zmq::error_t const&) {
      return false;
    }
  }
  /// Closes the TCP connection: libzmq's pipe takes an empty message as a
  /// close whatever it still holds (its high-water mark is off), and drops
  /// what the peer has not read.
  void hang_up(std::string const& rid) {
    try {
      if (sock.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)sock.send(zmq::message_t{}, zmq::send_flags::dontwait);
      }
    } catch (zmq::error_t const&) {
    }
  }

  zmq::message_t command_frame(std::string_view name, std::string_view data) {
    std::size_t const size = 1 + name.size() + data.size();
    zmq::message_t m(header_bytes(size) + size);
    auto* p = static_cast<std::uint8_t*>(m.data());
    std::size_t const h = frame_header(p, size, flag_command);
    p[h] = static_cast<std::uint8_t>(name.size());
    std::memcpy(p + h + 1, name.data(), name.size());
    if (!data.empty()) std::memcpy(p + h + 1 + name.size(), data.data(), data.size());
    return m;
  }

  /// A command: in the clear, or once a CURVE handshake is done, in a
  /// MESSAGE box flagged as a command (ZMTP 3.1).
  bool send_command(connection& c, std::string_view name, std::string_view data) {
    if (curve_up(c)) {
      std::string plain(1, static_cast<char>(name.size()));
      plain.append(name).append(data);
      return emit(c, seal(c, box_command, plain.data(), plain.size()));
    }
    return emit(c, command_frame(name, data));
  }

  void greet(connection& c) {
    zmq::message_t g(greeting_bytes);
    auto* p = static_cast<std::uint8_t*>(g.data());
    std::memset(p, 0, greeting_bytes);
    p[0] = 0xff;
    p[8] = 1;  // ZMTP 1.0's identity length + 1, as libzmq sends
    p[9] = 0x7f;
    p[10] = 3;  // ZMTP 3.1
    p[11] = 1;
    std::string_view const mech = curve() ? "CURVE" : "NULL";
    std::memcpy(p + 12, mech.data(), mech.size());
    p[32] = curve() ? 1 : 0;  // as-server: CURVE's server; NULL has no roles
    (void)emit(c, std::move(g));
  }

  // ---- closing ------------------------------------------------------------------------------------------------------

  void count(close_cause cause) {
    ++st.closed[static_cast<std::size_t>(cause)];
    if (cause == close_cause::protocol || cause == close_cause::handshake_timeout ||
        cause == close_cause::message_timeout) {
      ++st.protocol_errors;
    } else if (cause == close_cause::denied) {
      ++st.handshakes_denied;
    }
  }

  /// The connection's record goes, what it held is released and its
  /// secrets wiped; `out` hears of it when the server knew it.
  void forget(connection& c, std::vector<incoming>* out) {
    uncharge(c.reserved);
    drop_message(c);
    if (c.ph == connection::phase::ready) {
      if (out != nullptr) {
        incoming e;
        e.what = incoming::kind::closed;
        e.conn = c.serial;
        out->push_back(std::move(e));
      } else {
        closed_by_send.push_back(c.serial);
      }
    }
    sodium_memzero(c.cn_secret.data(), c.cn_secret.size());
    sodium_memzero(c.precom.data(), c.precom.size());
    sodium_memzero(c.cookie_key.data(), c.cookie_key.size());
    if (!c.address.empty()) {
      auto a = by_address.find(c.address);
      if (a != by_address.end() && --a->second == 0) by_address.erase(a);
    }
    rid_of.erase(c.serial);
    std::string const rid = c.rid;  // c goes with the erase
    by_rid.erase(rid);
    st.connections = by_rid.size();
  }

  /// Closes a connection for `cause`; with `error`, the peer is told why
  /// in a ZMTP ERROR first (for what it sent: a timeout, an eviction or a
  /// full table is a plain close, which ZMTP peers take as temporary).
  void close(connection& c, close_cause cause, std::vector<incoming>* out, std::string_view error = {}) {
    count(cause);
    if (cause != close_cause::slow_reader && !error.empty()) {
      std::string reason(1, static_cast<char>(std::min<std::size_t>(error.size(), 255)));
      reason.append(error.substr(0, 255));
      (void)send_command(c, "ERROR", reason);
    }
    end(c, cause == close_cause::slow_reader || c.stalled_since.has_value());
    forget(c, out);
  }

  /// The connection's end in libzmq: at once when nothing it was sent is
  /// held any more, a reset when its peer does not read (`abortive`), else
  /// once what is held has been written (`draining`).
  void end(connection const& c, bool abortive) {
    auto const now = clock::now();
    if (abortive && c.tcp.reset()) {
      resetting.emplace(c.rid, now);
    } else if (abortive || c.out->unread.load() == 0) {
      hang_up(c.rid);
    } else {
      draining.push_back({c.rid, c.out, c.tcp, now, now, c.out->written.load()});
    }
  }

  /// Whether libzmq's notice of a connection gone is for one the server
  /// closed (reset, or waiting for its last bytes); its record goes.
  bool was_closed(std::string const& rid) {
    if (resetting.erase(rid) > 0) return true;
    return std::erase_if(draining, [&](draining_close const& d) { return d.rid == rid; }) > 0;
  }

  /// The closes waiting for their connection's last bytes to be written.
  void drain(clock::time_point now) {
    std::erase_if(draining, [&](draining_close& d) {
      if (d.out->unread.load() == 0) {
        hang_up(d.rid);
        return true;
      }
      if (std::uint64_t const w = d.out->written.load(); w != d.written) {
        d.written = w;
        d.progress = now;
      }
      if (now - d.progress < std::chrono::seconds(1) && now - d.first < cfg.message_timeout) return false;
      if (d.tcp.reset()) {
        resetting.emplace(d.rid, now);
      } else {
        hang_up(d.rid);
      }
      return true;
    });
    std::erase_if(resetting, [&](auto const& r) { return now - r.second > std::chrono::minutes(1); });
  }

  void fail(connection& c, std::string_view reason, std::vector<incoming>& out) {
    close(c, close_cause::protocol, &out, reason);
  }

  // ---- CURVE --------------------------------------------------------------------------------------------------------

  bool curve_hello(connection& c, std::uint8_t const* cmd, std::size_t n) {
    // "\x05HELLO", version 1.0, 72 bytes of padding, C', short nonce, Box[64 zeros](C'->S)
    if (n != 200 || std::memcmp(cmd, "\x05HELLO", 6) != 0 || cmd[6] != 1 || cmd[7] != 0) return false;
    std::memcpy(c.cn_client.data(), cmd + 80, 32);
    std::uint8_t nonce[crypto_box_NONCEBYTES];
    std::memcpy(nonce, "CurveZMQHELLO---", 16);
    std::memcpy(nonce + 16, cmd + 112, 8);
    std::uint8_t plain[64];
    if (crypto_box_open_easy(plain, cmd + 120, 80, nonce, c.cn_client.data(), cfg.curve_secret->data()) != 0) {
      return false;
    }
    // WELCOME: a 16-byte nonce, Box[S' + cookie](S->C'); cookie = nonce + Box[C' + s'](K).
    crypto_box_keypair(c.cn_public.data(), c.cn_secret.data());
    randombytes_buf(c.cookie_key.data(), c.cookie_key.size());
    std::uint8_t cookie_nonce[crypto_secretbox_NONCEBYTES];
    std::memcpy(cookie_nonce, "COOKIE--", 8);
    randombytes_buf(cookie_nonce + 8, 16);
    std::uint8_t cookie_plain[64];
    std::memcpy(cookie_plain, c.cn_client.data(), 32);
    std::memcpy(cookie_plain + 32, c.cn_secret.data(), 32);
    std::uint8_t welcome_plain[128];
    std::memcpy(welcome_plain, c.cn_public.data(), 32);
    std::memcpy(welcome_plain + 32, cookie_nonce + 8, 16);
    crypto_secretbox_easy(welcome_plain + 48, cookie_plain, 64, cookie_nonce, c.cookie_key.data());
    std::uint8_t welcome_nonce[crypto_box_NONCEBYTES];
    std::memcpy(welcome_nonce, "WELCOME-", 8);
    randombytes_buf(welcome_nonce + 8, 16);
    std::string data(16 + 144, '\0');
    auto* d = reinterpret_cast<std::uint8_t*>(data.data());
    std::memcpy(d, welcome_nonce + 8, 16);
    sodium_memzero(cookie_plain, sizeof cookie_plain);
    // Fails for a weak (low-order) C': such a client is refused.
    if (crypto_box_easy(d + 16, welcome_plain, 128, welcome_nonce, c.cn_client.data(), cfg.curve_secret->data()) != 0) {
      return false;
    }
    c.step = connection::curve_step::initiate;
    return send_command(c, "WELCOME", data);
  }

  /// INITIATE: the cookie, a short nonce, Box[C + vouch + metadata](C'->S').
  /// 1 = in, 0 = malformed, -1 = a key not allowed.
  int curve_initiate(connection& c, std::uint8_t const* cmd, std::size_t n) {
    if (n < 9 + 96 + 8 + box_mac + 128 || std::memcmp(cmd, "\x08INITIATE", 9) != 0) return 0;
    std::uint8_t cookie_nonce[crypto_secretbox_NONCEBYTES];
    std::memcpy(cookie_nonce, "COOKIE--", 8);
    std::memcpy(cookie_nonce + 8, cmd + 9, 16);
    std::uint8_t cookie_plain[64];
    if (crypto_secretbox_open_easy(cookie_plain, cmd + 25, 80, cookie_nonce, c.cookie_key.data()) != 0 ||
        sodium_memcmp(cookie_plain, c.cn_client.data(), 32) != 0 ||
        sodium_memcmp(cookie_plain + 32, c.cn_secret.data(), 32) != 0) {
      sodium_memzero(cookie_plain, sizeof cookie_plain);
      return 0;
    }
    sodium_memzero(cookie_plain, sizeof cookie_plain);
    std::uint8_t nonce[crypto_box_NONCEBYTES];
    std::memcpy(nonce, "CurveZMQINITIATE", 16);
    std::memcpy(nonce + 16, cmd + 105, 8);
    std::size_t const clen = n - 113;
    std::vector<std::uint8_t> plain(clen - box_mac);
    if (crypto_box_open_easy(plain.data(), cmd + 113, clen, nonce, c.cn_client.data(), c.cn_secret.data()) != 0) {
      return 0;
    }
    std::uint8_t const* const client_key = plain.data();
    std::uint8_t vouch_nonce[crypto_box_NONCEBYTES];
    std::memcpy(vouch_nonce, "VOUCH---", 8);
    std::memcpy(vouch_nonce + 8, plain.data() + 32, 16);
    std::uint8_t vouch[64];
    if (crypto_box_open_easy(vouch, plain.data() + 48, 80, vouch_nonce, client_key, c.cn_secret.data()) != 0 ||
        sodium_memcmp(vouch, c.cn_client.data(), 32) != 0 || sodium_memcmp(vouch + 32, server_public.data(), 32) != 0) {
      return 0;
    }
    c.peer_nonce = get_u64(cmd + 105);
    if (!compatible(socket_type(plain.data() + 128, plain.size() - 128))) return 0;
    char z85[41];
    if (zmq_z85_encode(z85, client_key, 32) == nullptr) return 0;
    if (!cfg.allow || !cfg.allow(z85, c.address)) return -1;
    c.user_id = z85;
    if (crypto_box_beforenm(c.precom.data(), c.cn_client.data(), c.cn_secret.data()) != 0) return 0;
    sodium_memzero(c.cn_secret.data(), c.cn_secret.size());
    sodium_memzero(c.cookie_key.data(), c.cookie_key.size());
    // READY: a short nonce, Box[metadata](S'->C').
    std::string const& meta = ready_metadata();
    std::uint8_t ready_nonce[crypto_box_NONCEBYTES];
    std::memcpy(ready_nonce, "CurveZMQREADY---", 16);
    put_u64(ready_nonce + 16, c.nonce++);
    std::string data(8 + box_mac + meta.size(), '\0');
    auto* d = reinterpret_cast<std::uint8_t*>(data.data());
    std::memcpy(d, ready_nonce + 16, 8);
    crypto_box_easy_afternm(d + 8, reinterpret_cast<std::uint8_t const*>(meta.data()), meta.size(), ready_nonce,
                            c.precom.data());
    if (!send_command(c, "READY", data)) return 0;
    c.step = connection::curve_step::done;
    return 1;
  }

  /// One frame of `flags` and `n` payload bytes, boxed: "\x07MESSAGE",
  /// nonce, Box[flags + payload](S'->C'), as a ZMTP frame.
  zmq::message_t seal(connection& c, std::uint8_t flags, void const* payload, std::size_t n) {
    std::size_t const body = curve_header + box_mac + 1 + n;
    zmq::message_t m(header_bytes(body) + body);
    auto* p = static_cast<std::uint8_t*>(m.data());
    std::size_t const h = frame_header(p, body, 0);
    std::uint8_t* const b = p + h;
    std::memcpy(b, "\x07MESSAGE", 8);
    std::uint8_t nonce[crypto_box_NONCEBYTES];
    std::memcpy(nonce, "CurveZMQMESSAGES", 16);
    put_u64(nonce + 16, c.nonce++);
    std::memcpy(b + 8, nonce + 16, 8);
    std::uint8_t* const text = b + curve_header + box_mac;  // encrypted in place
    text[0] = flags;
    if (n > 0) std::memcpy(text + 1, payload, n);
    crypto_box_detached_afternm(text, b + curve_header, text, 1 + n, nonce, c.precom.data());
    return m;
  }

  /// A box's head (type, nonce), before its contents count: false when
  /// the connection was closed for it.
  bool box_head_ok(connection& c, std::uint8_t const* b, std::vector<incoming>& out) {
    if (std::memcmp(b, "\x07MESSAGE", 8) != 0) {
      fail(c, "expected MESSAGE", out);
      return false;
    }
    if (get_u64(b + 8) <= c.peer_nonce) {
      fail(c, "nonce out of sequence", out);
      return false;
    }
    return true;
  }

  // ---- frames -------------------------------------------------------------------------------------------------------

  /// A whole command frame (c.cbody), in the handshake or after.
  bool on_command(connection& c, std::vector<incoming>& out) {
    auto const* cmd = c.cbody.data();
    std::size_t const n = c.cbody.size();
    if (n == 0 || cmd[0] == 0 || std::size_t{cmd[0]} + 1 > n) {
      fail(c, "malformed command", out);
      return false;
    }
    std::string_view const name(reinterpret_cast<char const*>(cmd + 1), cmd[0]);
    if (c.ph == connection::phase::handshake) {
      if (!curve()) {
        if (name != "READY" || !compatible(socket_type(cmd + 6, n - 6))) {
          fail(c, "expected READY from a DEALER or REQ socket", out);
          return false;
        }
        return ready(c, out);
      }
      if (c.step == connection::curve_step::hello) {
        if (!curve_hello(c, cmd, n)) {
          fail(c, "bad HELLO", out);
          return false;
        }
        return true;
      }
      int const verdict = curve_initiate(c, cmd, n);
      if (verdict == 1) return ready(c, out);
      if (verdict < 0) {
        close(c, close_cause::denied, &out, "key not allowed");
      } else {
        fail(c, "bad INITIATE", out);
      }
      return false;
    }
    return traffic_command(c, cmd, n, out);
  }

  /// A command after the handshake (a frame's, or a box's): PING is
  /// answered, PONG taken as a sign of life, ERROR closes; a server of
  /// requests has no use for any other (SUBSCRIBE, CANCEL...), and says so.
  bool traffic_command(connection& c, std::uint8_t const* cmd, std::size_t n, std::vector<incoming>& out) {
    if (n == 0 || cmd[0] == 0 || std::size_t{cmd[0]} + 1 > n) {
      fail(c, "malformed command", out);
      return false;
    }
    std::string_view const name(reinterpret_cast<char const*>(cmd + 1), cmd[0]);
    std::uint8_t const* const data = cmd + 1 + cmd[0];
    std::size_t const len = n - 1 - cmd[0];
    if (name == "PING" && len >= 2) {  // TTL (2 bytes) and up to 16 bytes of context, echoed
      std::string_view const context(reinterpret_cast<char const*>(data + 2), std::min<std::size_t>(len - 2, 16));
      if (!send_command(c, "PONG", context)) {
        close(c, close_cause::slow_reader, &out);
        return false;
      }
      return true;
    }
    if (name == "PONG") return true;
    if (name == "ERROR") {  // the peer's own close
      end(c, false);
      forget(c, &out);
      return false;
    }
    fail(c, "unexpected command " + std::string(name.substr(0, 32)), out);
    return false;
  }

  bool ready(connection& c, std::vector<incoming>& out) {
    if (!curve() && !send_command(c, "READY", ready_metadata())) {
      close(c, close_cause::slow_reader, &out);
      return false;
    }
    c.ph = connection::phase::ready;
    c.last_active = clock::now();
    return true;
  }

  /// A data frame's payload (NULL: c.body; CURVE: opened from c.cbody)
  /// joins the message; the message goes out when it ends.
  bool on_data(connection& c, std::vector<incoming>& out) {
    std::uint8_t flags = c.flags;
    zmq::message_t payload;
    if (curve()) {
      auto* b = c.cbody.data();
      std::size_t const n = c.cbody.size();
      if (!box_head_ok(c, b, out)) return false;
      std::uint8_t nonce[crypto_box_NONCEBYTES];
      std::memcpy(nonce, "CurveZMQMESSAGEC", 16);
      std::memcpy(nonce + 16, b + 8, 8);
      std::uint8_t* const text = b + curve_header + box_mac;
      if (crypto_box_open_detached_afternm(text, text, b + curve_header, n - curve_header - box_mac, nonce,
                                           c.precom.data()) != 0) {
        fail(c, "MESSAGE does not open", out);
        return false;
      }
      c.peer_nonce = get_u64(b + 8);  // it opened: its nonce counts
      flags = text[0];
      std::size_t const len = n - curve_header - box_mac - 1;
      if ((flags & ~(box_more | box_command)) != 0) {
        fail(c, "bad MESSAGE flags", out);
        return false;
      }
      if ((flags & box_command) != 0) {
        if ((flags & box_more) != 0) {
          fail(c, "a command with MORE", out);
          return false;
        }
        bool const ok = traffic_command(c, text + 1, len, out);
        if (ok) {
          uncharge(c.reserved);
          shrink(c);
        }
        return ok;
      }
      flags = static_cast<std::uint8_t>(flags & box_more);
      payload = zmq::message_t(text + 1, len);
      charge(c.msg_held, len);
      uncharge(c.reserved);
      shrink(c);
    } else {
      payload = std::move(c.body);
      c.msg_held += std::exchange(c.reserved, 0);  // the frame's charge stays with the message
    }
    if (c.msg_frames == 0) c.first_empty = payload.size() == 0;
    c.msg_bytes += payload.size();
    ++c.msg_frames;
    c.frames.push_back(std::move(payload));
    if ((flags & flag_more) == 0) {
      incoming e;
      e.conn = c.serial;
      e.user_id = c.user_id;
      e.frames = std::move(c.frames);
      e.charge = memory_charge(held, std::exchange(c.msg_held, 0));
      out.push_back(std::move(e));
      end_message(c);
    }
    return true;
  }

  void end_message(connection& c) {
    c.frames.clear();
    c.dropping = connection::drop::none;
    c.msg_bytes = c.msg_frames = 0;
    c.in_message = false;
    ++c.outstanding;
    c.last_active = clock::now();
  }

  /// A frame read past the limits or the budget has ended; the message is
  /// reported when its last frame has (a box's MORE is read from its own
  /// flags, as its tag is checked).
  bool on_dropped(connection& c, std::vector<incoming>& out) {
    c.msg_bytes += c.size;
    ++c.msg_frames;
    bool more = (c.flags & flag_more) != 0;
    if (curve()) {
      if (!c.passing.holds()) {
        fail(c, "MESSAGE does not open", out);
        return false;
      }
      c.peer_nonce = get_u64(c.cbody.data() + 8);  // authentic: its nonce counts
      std::uint8_t const flags = c.passing.flags;
      uncharge(c.reserved);
      if ((flags & ~(box_more | box_command)) != 0 || (flags & box_command) != 0) {
        fail(c, (flags & box_command) != 0 ? "command too long" : "bad MESSAGE flags", out);
        return false;
      }
      more = (flags & box_more) != 0;
    }
    if (more) return true;
    incoming e;
    e.what = c.dropping == connection::drop::memory ? incoming::kind::refused : incoming::kind::oversized;
    e.conn = c.serial;
    e.user_id = c.user_id;
    e.bytes = c.msg_bytes;
    e.frame_count = c.msg_frames;
    e.delimited = c.first_empty && c.msg_frames >= 2;
    e.too_many_frames = c.msg_frames > cfg.max_frames;
    if (e.what == incoming::kind::refused) ++st.refused_memory;
    out.push_back(std::move(e));
    end_message(c);
    return true;
  }

  /// A frame's header is whole (c.pending): its flags and size checked, its
  /// bytes reserved; false when the connection was closed for it.
  bool on_header(connection& c, std::vector<incoming>& out) {
    auto const* h = reinterpret_cast<std::uint8_t const*>(c.pending.data());
    c.flags = h[0];
    std::uint64_t const size = (h[0] & flag_long) ? get_u64(h + 1) : h[1];
    c.pending.clear();
    bool const command = (c.flags & flag_command) != 0;
    if ((c.flags & ~(flag_more | flag_long | flag_command)) != 0) {
      fail(c, "bad frame flags", out);
      return false;
    }
    if (command && (c.flags & flag_more) != 0) {
      fail(c, "a command with MORE", out);
      return false;
    }
    if (command && curve_up(c)) {  // every frame is a MESSAGE box now, commands inside theirs
      fail(c, "expected MESSAGE", out);
      return false;
    }
    if (command && size > max_command_bytes) {
      fail(c, "command too long", out);
      return false;
    }
    if (!command && c.ph != connection::phase::ready) {
      fail(c, "a message before the handshake ended", out);
      return false;
    }
    std::size_t const overhead = curve() ? curve_header + box_mac + 1 : 0;
    if (!command && (size < overhead || size > (std::uint64_t{1} << 62))) {
      fail(c, "malformed MESSAGE", out);
      return false;
    }
    c.in_frame = true;
    c.size = static_cast<std::size_t>(size);
    c.got = 0;
    if (command) {
      c.cbody.resize(c.size);  // at most 4 KiB: not counted
      return true;
    }
    if (!c.in_message) {
      c.in_message = true;
      c.message_since = c.frame_since;
      if (c.msg_frames == 0) c.first_empty = false;
    }
    // A data frame past the message's limits, or one the budget cannot
    // take, is read and dropped, not kept, and so is the rest of its message.
    if (c.dropping == connection::drop::none) {
      if (size - overhead > cfg.max_message_bytes - std::min(c.msg_bytes, cfg.max_message_bytes) ||
          c.msg_frames + 1 > cfg.max_frames) {
        c.dropping = connection::drop::oversized;
      } else if (!fits(c.size)) {
        c.dropping = connection::drop::memory;
      }
      if (c.dropping != connection::drop::none) drop_message(c);
    }
    if (c.dropping != connection::drop::none) {
      if (curve()) {
        charge(c.reserved, box_head);
        c.cbody.resize(box_head);
      }
      return true;
    }
    charge(c.reserved, c.size);
    if (curve()) {
      c.cbody.resize(c.size);
    } else {
      c.body.rebuild(c.size);
    }
    return true;
  }

  /// A frame's body bytes, `take` of them at `p`; false when the connection
  /// was closed for them.
  bool on_body(connection& c, std::uint8_t const* p, std::size_t take, std::vector<incoming>& out) {
    if (take == 0) return true;  // an empty frame, or its header alone so far
    bool const command = (c.flags & flag_command) != 0;
    if (command || (curve() && c.dropping == connection::drop::none)) {
      std::memcpy(c.cbody.data() + c.got, p, take);
    } else if (curve()) {  // a dropped box: its head kept, the rest checked as it passes
      std::size_t k = 0;
      if (c.got < box_head) {
        k = std::min(take, box_head - c.got);
        std::memcpy(c.cbody.data() + c.got, p, k);
        if (c.got + k == box_head) {
          if (!box_head_ok(c, c.cbody.data(), out)) return false;
          std::uint8_t nonce[crypto_box_NONCEBYTES];
          std::memcpy(nonce, "CurveZMQMESSAGEC", 16);
          std::memcpy(nonce + 16, c.cbody.data() + 8, 8);
          c.passing.start(nonce, c.precom.data(), c.cbody.data() + curve_header);
        }
      }
      c.passing.update(p + k, take - k);
    } else if (c.dropping == connection::drop::none) {
      std::memcpy(static_cast<std::uint8_t*>(c.body.data()) + c.got, p, take);
    }
    c.got += take;
    return true;
  }

  /// Bytes from the peer, in order.
  void on_bytes(connection& c, std::uint8_t const* p, std::size_t n, std::vector<incoming>& out) {
    c.last_heard = clock::now();
    while (n > 0) {
      if (c.ph == connection::phase::greeting) {
        std::size_t const take = std::min(n, greeting_bytes - c.pending.size());
        c.pending.append(reinterpret_cast<char const*>(p), take);
        p += take;
        n -= take;
        // An early refusal: a signature that is not ZMTP 3's (such a peer
        // reads no ZMTP 3 command: closed, as RFC 23 says).
        auto const* g = reinterpret_cast<std::uint8_t const*>(c.pending.data());
        if ((c.pending.size() >= 1 && g[0] != 0xff) || (c.pending.size() >= 10 && (g[9] & 1) == 0) ||
            (c.pending.size() >= 11 && g[10] < 3)) {
          close(c, close_cause::protocol, &out);
          return;
        }
        if (c.pending.size() < greeting_bytes) continue;
        // A ZMTP 3 peer of another mechanism or role hears why.
        std::string_view const mech(c.pending.data() + 12, ::strnlen(c.pending.data() + 12, 20));
        if (mech != (curve() ? "CURVE" : "NULL")) {
          fail(c, "the server's mechanism is " + std::string(curve() ? "CURVE" : "NULL"), out);
          return;
        }
        if (curve() && g[32] != 0) {
          fail(c, "the server is the CURVE server", out);
          return;
        }
        c.minor = g[10] > 3 ? 1 : g[11];
        c.pending.clear();
        c.ph = connection::phase::handshake;
        continue;
      }
      if (!c.in_frame) {
        // The header: flags, then 1 or 8 size bytes.
        if (c.pending.empty()) c.frame_since = c.last_heard;
        while (n > 0 && (c.pending.empty() || c.pending.size() < ((c.pending[0] & flag_long) ? 9u : 2u))) {
          c.pending.push_back(static_cast<char>(*p++));
          --n;
        }
        if (c.pending.empty() || c.pending.size() < ((c.pending[0] & flag_long) ? 9u : 2u)) return;
        if (!on_header(c, out)) return;
      }
      std::size_t const take = std::min(n, c.size - c.got);
      if (!on_body(c, p, take, out)) return;
      p += take;
      n -= take;
      if (c.got < c.size) return;
      c.in_frame = false;
      bool ok = true;
      if ((c.flags & flag_command) != 0) {
        ok = on_command(c, out);
        if (ok) shrink(c);
      } else if (c.dropping != connection::drop::none) {
        ok = on_dropped(c, out);
      } else {
        ok = on_data(c, out);
      }
      if (!ok) return;  // the connection is gone
    }
  }

  /// Room for a connection from `address`: when the table, or the
  /// address's share of it, is full, one goes (of that address, when its
  /// share is what is full): of those the server owes no answer, the one
  /// idle the longest, else the one sending the longest; false when the
  /// server owes every candidate an answer.
  bool make_room(std::string const& address, std::vector<incoming>& out) {
    auto const mine = by_address.find(address);
    bool const address_full =
        !address.empty() && mine != by_address.end() && mine->second >= cfg.max_connections_per_address;
    if (!address_full && by_rid.size() < cfg.max_connections) return true;
    auto sooner = [](connection const& a, connection const& b) {
      if (a.sending() != b.sending()) return !a.sending();
      return a.sending() ? a.sending_since() < b.sending_since() : a.last_active < b.last_active;
    };
    connection* victim = nullptr;
    for (auto& [rid, c] : by_rid) {
      if ((address_full && c.address != address) || c.outstanding > 0) continue;
      if (victim == nullptr || sooner(c, *victim)) victim = &c;
    }
    if (victim == nullptr) return false;
    close(*victim, close_cause::evicted, &out);
    return true;
  }

  void accept(std::string const& rid, zmq::message_t const& notice, std::vector<incoming>& out) {
    std::string address;
    if (char const* a = zmq_msg_gets(notice.handle(), "Peer-Address"); a != nullptr) address = a;
    if (!make_room(address, out)) {
      count(close_cause::full);
      hang_up(rid);
      return;
    }
    connection c;
    c.tcp.learn(notice);
    c.rid = rid;
    c.serial = next_serial++;
    c.since = c.last_heard = c.last_active = c.last_ping = clock::now();
    c.address = std::move(address);
    c.out = std::make_shared<out_account>();
    c.out->total = held;
    auto& added = by_rid.emplace(rid, std::move(c)).first->second;
    rid_of.emplace(added.serial, rid);
    if (!added.address.empty()) ++by_address[added.address];
    st.connections = by_rid.size();
    greet(added);
  }

  /// What is past its time closes; a quiet ZMTP 3.1 peer is PINGed.
  void sweep(std::vector<incoming>& out) {
    auto const now = clock::now();
    if (now - last_sweep < std::chrono::milliseconds(100)) return;
    last_sweep = now;
    std::vector<std::pair<std::string, close_cause>> late;
    for (auto& [rid, c] : by_rid) {
      // Replies held for it, and none written since the last look: the
      // peer has stopped reading (its kernel buffers are full).
      std::uint64_t const written = c.out->written.load();
      if (c.out->unread.load() == 0 || written != c.written_seen) {
        c.stalled_since.reset();
      } else if (!c.stalled_since) {
        c.stalled_since = now;
      }
      c.written_seen = written;
      if (c.stalled_since && now - *c.stalled_since > cfg.message_timeout) {
        late.emplace_back(rid, close_cause::slow_reader);
      } else if (c.ph != connection::phase::ready && now - c.since > cfg.handshake_timeout) {
        late.emplace_back(rid, close_cause::handshake_timeout);
      } else if (c.ph != connection::phase::greeting &&
                 (((c.in_frame || !c.pending.empty()) && now - c.frame_since > cfg.message_timeout) ||
                  (c.in_message && now - c.message_since > cfg.message_timeout))) {
        late.emplace_back(rid, close_cause::message_timeout);
      } else if (c.ph == connection::phase::ready && cfg.idle_timeout.count() > 0 &&
                 now - c.last_heard > cfg.idle_timeout) {
        late.emplace_back(rid, close_cause::idle);
      } else if (c.ph == connection::phase::ready && c.minor >= 1 && cfg.heartbeat_interval.count() > 0 &&
                 now - c.last_heard >= cfg.heartbeat_interval && now - c.last_ping >= cfg.heartbeat_interval) {
        // PING: a TTL (deciseconds: how long the peer may wait to hear
        // from us before it gives up on the connection) and no context.
        auto const ttl = std::min<std::int64_t>(
            65535, std::max<std::int64_t>(cfg.idle_timeout.count(), 2 * cfg.heartbeat_interval.count()) / 100);
        std::uint8_t const t[2] = {static_cast<std::uint8_t>(ttl >> 8), static_cast<std::uint8_t>(ttl & 0xff)};
        c.last_ping = now;
        ++st.pings;
        if (!send_command(c, "PING", std::string_view(reinterpret_cast<char const*>(t), 2))) {
          late.emplace_back(rid, close_cause::slow_reader);
        }
      }
    }
    for (auto const& [rid, cause] : late) {
      auto it = by_rid.find(rid);
      if (it != by_rid.end()) close(it->second, cause, &out);
    }
    drain(now);
  }
};

listener::listener(zmq::context_t& ctx, listener_config cfg) : impl_(std::make_unique<impl>(ctx, std::move(cfg))) {}
listener::~listener() = default;

void listener::bind(std::string const& endpoint) { impl_->sock.bind(endpoint); }
std::string listener::last_endpoint() const { return impl_->sock.get(zmq::sockopt::last_endpoint); }
void* listener::handle() const { return impl_->sock.handle(); }
listener_stats listener::stats() const {
  auto s = impl_->st;
  s.held_bytes = impl_->held->load();
  s.closing = impl_->draining.size() + impl_->resetting.size();
  return s;
}

void listener::read(std::vector<incoming>& out, int budget) {
  auto& s = *impl_;
  for (auto const serial : s.closed_by_send) {
    incoming e;
    e.what = incoming::kind::closed;
    e.conn = serial;
    out.push_back(std::move(e));
  }
  s.closed_by_send.clear();
  zmq::message_t rid, data;
  for (int k = 0; k < budget; ++k) {
    if (!s.sock.recv(rid, zmq::recv_flags::dontwait)) break;
    if (!rid.more() || !s.sock.recv(data, zmq::recv_flags::dontwait)) continue;
    std::string key = rid.to_string();
    auto it = s.by_rid.find(key);
    if (data.size() == 0) {  // a connection opened, or closed
      if (it != s.by_rid.end()) {
        s.forget(it->second, &out);
      } else if (!s.was_closed(key)) {
        s.accept(key, data, out);
      }
      continue;
    }
    if (it == s.by_rid.end()) continue;  // bytes of a connection already closed here
    s.on_bytes(it->second, static_cast<std::uint8_t const*>(data.data()), data.size(), out);
  }
  s.sweep(out);
}

bool listener::send(std::uint64_t conn, std::vector<zmq::message_t>& frames) {
  auto& s = *impl_;
  auto const r = s.rid_of.find(conn);
  if (r == s.rid_of.end()) return false;
  auto& c = s.by_rid.at(r->second);
  for (std::size_t k = 0; k < frames.size(); ++k) {
    std::uint8_t const more = k + 1 < frames.size() ? flag_more : 0;
    bool ok = false;
    if (s.curve()) {
      ok = s.emit(c, s.seal(c, more, frames[k].data(), frames[k].size()));
    } else {
      std::uint8_t h[9];
      std::size_t const hn = frame_header(h, frames[k].size(), more);
      // Header and payload as two writes: the payload is not copied.
      ok = s.emit(c, zmq::message_t(h, hn)) && (frames[k].size() == 0 || s.emit(c, std::move(frames[k])));
    }
    if (!ok) {
      // The peer leaves its replies unread: what it was sent may stop
      // mid-frame, so the connection goes, for real.
      s.close(c, close_cause::slow_reader, nullptr);
      return false;
    }
  }
  if (c.outstanding > 0) --c.outstanding;
  c.last_active = clock::now();
  return true;
}

}  // namespace placer::service::zmtp
