// ZMTP 3 over a ZMQ_STREAM socket, NULL and CURVE (zmtp.hpp).
#include <placer/service/zmtp.hpp>

#include <sodium.h>

#include <algorithm>
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
constexpr std::size_t curve_header = 16;  // "\x07MESSAGE" + 8-byte nonce
constexpr std::size_t box_mac = crypto_box_MACBYTES;

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

}  // namespace

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

struct listener::impl {
  struct connection {
    std::string rid;  ///< the STREAM socket's name for it
    std::uint64_t serial = 0;
    enum class phase { greeting, handshake, ready } ph = phase::greeting;
    clock::time_point since;
    std::string address;
    std::string pending;  ///< greeting and frame header bytes not yet whole
    // The frame being read.
    bool in_frame = false;
    clock::time_point frame_since;  ///< when the frame being read began
    std::size_t reserved = 0;       ///< its bytes, counted in `buffered`
    std::uint8_t flags = 0;
    std::size_t size = 0, got = 0;
    zmq::message_t body;              ///< NULL data frames: read in place
    std::vector<std::uint8_t> cbody;  ///< commands, CURVE boxes
    bool dropping = false;            ///< the message is past the limits: read to its end, not kept
    std::size_t msg_bytes = 0, msg_frames = 0;
    bool first_empty = false;  ///< the message's first frame was empty (a REQ-style delimiter)
    std::vector<zmq::message_t> frames;  ///< the message so far
    // CURVE.
    enum class curve_step { hello, initiate, done } step = curve_step::hello;
    key32 cn_public{}, cn_secret{}, cn_client{}, precom{};
    std::array<std::uint8_t, crypto_secretbox_KEYBYTES> cookie_key{};
    std::uint64_t nonce = 1, peer_nonce = 0;
    std::string user_id;
  };

  impl(zmq::context_t& ctx, listener_config c) : cfg(std::move(c)), sock(ctx, zmq::socket_type::stream) {
    if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
    if (cfg.curve_secret) server_public = curve_public(*cfg.curve_secret);
    sock.set(zmq::sockopt::linger, 0);
  }

  listener_config cfg;
  zmq::socket_t sock;
  key32 server_public{};
  std::unordered_map<std::string, connection> by_rid;
  std::unordered_map<std::uint64_t, std::string> rid_of;
  std::uint64_t next_serial = 1;
  std::size_t buffered = 0;  ///< partly read frames' bytes, all connections
  listener_stats st;
  clock::time_point last_sweep = clock::now();

  bool curve() const { return cfg.curve_secret.has_value(); }

  /// Raw bytes to a connection; false if the socket could not take them.
  bool raw(std::string const& rid, zmq::message_t&& bytes) {
    try {
      if (!sock.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
      return sock.send(bytes, zmq::send_flags::dontwait).has_value();
    } catch (zmq::error_t const&) {
      return false;
    }
  }
  void hang_up(std::string const& rid) { (void)raw(rid, zmq::message_t{}); }

  void release(connection& c) {
    buffered -= c.reserved;
    c.reserved = 0;
  }

  void forget(connection& c, std::vector<incoming>* out) {
    release(c);
    if (out != nullptr && c.ph == connection::phase::ready) {
      incoming e;
      e.what = incoming::kind::closed;
      e.conn = c.serial;
      out->push_back(std::move(e));
    }
    rid_of.erase(c.serial);
    std::string const rid = c.rid;  // c goes with the erase
    by_rid.erase(rid);
    st.connections = by_rid.size();
  }

  /// Closes a connection for what its peer did, saying why in ZMTP's ERROR;
  /// counted in `counter` (a denied key), else as a protocol error.
  void fail(connection& c, std::string_view reason, std::vector<incoming>& out, std::uint64_t* counter = nullptr) {
    ++*(counter != nullptr ? counter : &st.protocol_errors);
    if (c.ph != connection::phase::greeting && !(curve() && c.step == connection::curve_step::done)) {
      send_command(c, "ERROR", std::string(1, static_cast<char>(std::min<std::size_t>(reason.size(), 255))) +
                                   std::string(reason.substr(0, 255)));
    }
    hang_up(c.rid);
    forget(c, &out);
  }

  bool send_command(connection& c, std::string_view name, std::string_view data) {
    std::size_t const size = 1 + name.size() + data.size();
    zmq::message_t m(header_bytes(size) + size);
    auto* p = static_cast<std::uint8_t*>(m.data());
    std::size_t const h = frame_header(p, size, flag_command);
    p[h] = static_cast<std::uint8_t>(name.size());
    std::memcpy(p + h + 1, name.data(), name.size());
    if (!data.empty()) std::memcpy(p + h + 1 + name.size(), data.data(), data.size());
    return raw(c.rid, std::move(m));
  }

  void greet(connection& c) {
    zmq::message_t g(greeting_bytes);
    auto* p = static_cast<std::uint8_t*>(g.data());
    std::memset(p, 0, greeting_bytes);
    p[0] = 0xff;
    p[8] = 1;  // ZMTP 1.0's identity length + 1, as libzmq sends
    p[9] = 0x7f;
    p[10] = 3;  // ZMTP 3.0
    p[11] = 0;
    std::string_view const mech = curve() ? "CURVE" : "NULL";
    std::memcpy(p + 12, mech.data(), mech.size());
    p[32] = 1;  // as-server
    (void)raw(c.rid, std::move(g));
  }

  // ---- CURVE ---------------------------------------------------------------------------------------------------

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
      return 0;
    }
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
    c.step = connection::curve_step::done;
    return send_command(c, "READY", data) ? 1 : 0;
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

  // ---- frames ----------------------------------------------------------------------------------------------------

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
        ready(c);
        return true;
      }
      if (c.step == connection::curve_step::hello) {
        if (!curve_hello(c, cmd, n)) {
          fail(c, "bad HELLO", out);
          return false;
        }
        return true;
      }
      int const verdict = curve_initiate(c, cmd, n);
      if (verdict == 1) {
        ready(c);
        return true;
      }
      if (verdict < 0) {
        fail(c, "key not allowed", out, &st.handshakes_denied);
      } else {
        fail(c, "bad INITIATE", out);
      }
      return false;
    }
    return after_handshake_command(c, name, cmd + 1 + cmd[0], n - 1 - cmd[0], out);
  }

  bool after_handshake_command(connection& c, std::string_view name, std::uint8_t const* data, std::size_t n,
                               std::vector<incoming>& out) {
    if (name == "PING" && n >= 2) {  // TTL (2 bytes) and up to 16 bytes of context, echoed
      std::string pong(reinterpret_cast<char const*>(data + 2), std::min<std::size_t>(n - 2, 16));
      if (curve()) {
        std::string plain = std::string(1, 4) + "PONG" + pong;
        auto m = seal(c, 2 /* command */, plain.data(), plain.size());
        return raw(c.rid, std::move(m));
      }
      return send_command(c, "PONG", pong);
    }
    if (name == "ERROR") {
      hang_up(c.rid);
      forget(c, &out);
      return false;
    }
    return true;  // PONG, SUBSCRIBE, CANCEL...: nothing for a server of requests
  }

  void ready(connection& c) {
    if (!curve()) send_command(c, "READY", ready_metadata());
    c.ph = connection::phase::ready;
  }

  /// A data frame's payload (NULL: c.body; CURVE: opened from c.cbody) joins
  /// the message; the message goes out when it ends.
  bool on_data(connection& c, std::vector<incoming>& out) {
    std::uint8_t flags = c.flags;
    zmq::message_t payload;
    if (c.ph != connection::phase::ready) {
      fail(c, "a message before the handshake ended", out);
      return false;
    }
    if (curve()) {
      auto* b = c.cbody.data();
      std::size_t const n = c.cbody.size();
      if (n < curve_header + box_mac + 1 || std::memcmp(b, "\x07MESSAGE", 8) != 0) {
        fail(c, "expected MESSAGE", out);
        return false;
      }
      std::uint64_t const nonce_n = get_u64(b + 8);
      if (nonce_n <= c.peer_nonce) {
        fail(c, "nonce out of sequence", out);
        return false;
      }
      c.peer_nonce = nonce_n;
      std::uint8_t nonce[crypto_box_NONCEBYTES];
      std::memcpy(nonce, "CurveZMQMESSAGEC", 16);
      std::memcpy(nonce + 16, b + 8, 8);
      std::uint8_t* const text = b + curve_header + box_mac;
      if (crypto_box_open_detached_afternm(text, text, b + curve_header, n - curve_header - box_mac, nonce,
                                           c.precom.data()) != 0) {
        fail(c, "MESSAGE does not open", out);
        return false;
      }
      flags = text[0];
      std::size_t const len = n - curve_header - box_mac - 1;
      if (flags & 2) {  // a command inside the box (PING)
        if (len == 0 || text[1] == 0 || std::size_t{text[1]} + 1 > len) return true;
        std::string_view const name(reinterpret_cast<char const*>(text + 2), text[1]);
        return after_handshake_command(c, name, text + 2 + text[1], len - 1 - text[1], out);
      }
      flags = static_cast<std::uint8_t>(flags & flag_more);
      payload = zmq::message_t(text + 1, len);
    } else {
      payload = std::move(c.body);
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
      out.push_back(std::move(e));
      c.frames.clear();
      c.msg_bytes = c.msg_frames = 0;
    }
    return true;
  }

  /// A frame read past the limits has ended: the message is dropped and
  /// reported when it ends (CURVE hides MORE inside the box, so a dropped
  /// boxed frame ends it; later frames of the peer's are new messages).
  bool on_dropped(connection& c, std::vector<incoming>& out) {
    if (c.msg_frames == 0) c.first_empty = false;
    c.msg_bytes += c.size;
    ++c.msg_frames;
    if (curve()) {
      std::uint64_t const nonce_n = get_u64(c.cbody.data() + 8);
      if (std::memcmp(c.cbody.data(), "\x07MESSAGE", 8) != 0 || nonce_n <= c.peer_nonce) {
        fail(c, "expected MESSAGE", out);
        return false;
      }
      c.peer_nonce = nonce_n;  // spent, though the box was not opened
    } else if ((c.flags & flag_more) != 0) {
      return true;
    }
    incoming e;
    e.what = incoming::kind::oversized;
    e.conn = c.serial;
    e.user_id = c.user_id;
    e.bytes = c.msg_bytes;
    e.frame_count = c.msg_frames;
    e.delimited = c.first_empty && c.msg_frames >= 2;
    e.too_many_frames = c.msg_frames > cfg.max_frames;
    out.push_back(std::move(e));
    c.frames.clear();
    c.dropping = false;
    c.msg_bytes = c.msg_frames = 0;
    return true;
  }

  /// Bytes from the peer, in order.
  void on_bytes(connection& c, std::uint8_t const* p, std::size_t n, std::vector<incoming>& out) {
    while (n > 0) {
      if (c.ph == connection::phase::greeting) {
        std::size_t const take = std::min(n, greeting_bytes - c.pending.size());
        c.pending.append(reinterpret_cast<char const*>(p), take);
        p += take;
        n -= take;
        // An early refusal: a signature that is not ZMTP 3's.
        auto const* g = reinterpret_cast<std::uint8_t const*>(c.pending.data());
        if ((c.pending.size() >= 1 && g[0] != 0xff) || (c.pending.size() >= 10 && (g[9] & 1) == 0) ||
            (c.pending.size() >= 11 && g[10] < 3)) {
          fail(c, "not ZMTP 3", out);
          return;
        }
        if (c.pending.size() < greeting_bytes) continue;
        std::string_view const mech(c.pending.data() + 12, ::strnlen(c.pending.data() + 12, 20));
        if (mech != (curve() ? "CURVE" : "NULL")) {
          fail(c, "the server's mechanism is " + std::string(curve() ? "CURVE" : "NULL"), out);
          return;
        }
        c.pending.clear();
        c.ph = connection::phase::handshake;
        continue;
      }
      if (!c.in_frame) {
        // The header: flags, then 1 or 8 size bytes.
        while (n > 0 && (c.pending.empty() || c.pending.size() < ((c.pending[0] & flag_long) ? 9u : 2u))) {
          c.pending.push_back(static_cast<char>(*p++));
          --n;
        }
        if (c.pending.empty() || c.pending.size() < ((c.pending[0] & flag_long) ? 9u : 2u)) return;
        auto const* h = reinterpret_cast<std::uint8_t const*>(c.pending.data());
        c.flags = h[0];
        std::uint64_t const size = (h[0] & flag_long) ? get_u64(h + 1) : h[1];
        c.pending.clear();
        if ((c.flags & ~(flag_more | flag_long | flag_command)) != 0) {
          fail(c, "bad frame flags", out);
          return;
        }
        bool const command = (c.flags & flag_command) != 0;
        if (command && size > max_command_bytes) {
          fail(c, "command too long", out);
          return;
        }
        if (!command && c.ph != connection::phase::ready) {
          fail(c, "a message before the handshake ended", out);
          return;
        }
        std::size_t const overhead = curve() ? curve_header + box_mac + 1 : 0;
        if (!command && (size < overhead || size > (std::uint64_t{1} << 62))) {
          fail(c, "malformed MESSAGE", out);
          return;
        }
        // A data frame past the message's limits is read and dropped, not kept.
        if (!command && !c.dropping &&
            (size - overhead > cfg.max_message_bytes - std::min(c.msg_bytes, cfg.max_message_bytes) ||
             c.msg_frames + 1 > cfg.max_frames)) {
          c.dropping = true;
          c.frames.clear();
        }
        c.in_frame = true;
        c.size = static_cast<std::size_t>(size);
        c.got = 0;
        c.frame_since = clock::now();
        std::size_t const keep = command || !c.dropping ? c.size : (curve() ? curve_header : 0);
        if (keep > cfg.max_buffered_bytes - std::min(buffered, cfg.max_buffered_bytes)) {
          fail(c, "the server holds too many partly sent messages", out);
          return;
        }
        buffered += keep;
        c.reserved = keep;
        if (command || curve()) {
          c.cbody.resize(c.dropping && !command ? curve_header : c.size);  // dropped: its nonce alone
        } else if (!c.dropping) {
          c.body.rebuild(c.size);
        }
      }
      std::size_t const take = std::min(n, c.size - c.got);
      bool const command = (c.flags & flag_command) != 0;
      if (command || curve()) {
        if (c.got < c.cbody.size()) std::memcpy(c.cbody.data() + c.got, p, std::min(take, c.cbody.size() - c.got));
      } else if (!c.dropping) {
        std::memcpy(static_cast<std::uint8_t*>(c.body.data()) + c.got, p, take);
      }
      c.got += take;
      p += take;
      n -= take;
      if (c.got < c.size) return;
      c.in_frame = false;
      release(c);
      bool ok = true;
      if (command) {
        ok = on_command(c, out);
      } else if (c.dropping) {
        ok = on_dropped(c, out);
      } else {
        ok = on_data(c, out);
      }
      if (!ok) return;  // the connection is gone
    }
  }

  void sweep(std::vector<incoming>& out) {
    auto const now = clock::now();
    if (now - last_sweep < std::chrono::milliseconds(100)) return;
    last_sweep = now;
    std::vector<std::string> late;
    std::vector<std::string> slow;
    for (auto const& [rid, c] : by_rid) {
      if (c.ph != connection::phase::ready && now - c.since > cfg.handshake_timeout) {
        late.push_back(rid);
      } else if (c.in_frame && now - c.frame_since > cfg.frame_timeout) {
        slow.push_back(rid);
      }
    }
    for (auto const& rid : late) {
      auto it = by_rid.find(rid);
      if (it != by_rid.end()) fail(it->second, "handshake timed out", out);
    }
    for (auto const& rid : slow) {
      auto it = by_rid.find(rid);
      if (it != by_rid.end()) fail(it->second, "a frame not sent in time", out);
    }
  }
};

listener::listener(zmq::context_t& ctx, listener_config cfg) : impl_(std::make_unique<impl>(ctx, std::move(cfg))) {}
listener::~listener() = default;

void listener::bind(std::string const& endpoint) { impl_->sock.bind(endpoint); }
std::string listener::last_endpoint() const { return impl_->sock.get(zmq::sockopt::last_endpoint); }
void* listener::handle() const { return impl_->sock.handle(); }
listener_stats listener::stats() const { return impl_->st; }

void listener::read(std::vector<incoming>& out, int budget) {
  auto& s = *impl_;
  zmq::message_t rid, data;
  for (int k = 0; k < budget; ++k) {
    if (!s.sock.recv(rid, zmq::recv_flags::dontwait)) break;
    if (!rid.more() || !s.sock.recv(data, zmq::recv_flags::dontwait)) continue;
    std::string key = rid.to_string();
    auto it = s.by_rid.find(key);
    if (data.size() == 0) {  // a connection opened, or closed
      if (it != s.by_rid.end()) {
        s.forget(it->second, &out);
        continue;
      }
      if (s.by_rid.size() >= s.cfg.max_connections) {
        ++s.st.protocol_errors;
        s.hang_up(key);
        continue;
      }
      impl::connection c;
      c.rid = key;
      c.serial = s.next_serial++;
      c.since = clock::now();
      if (char const* a = zmq_msg_gets(data.handle(), "Peer-Address"); a != nullptr) c.address = a;
      auto& added = s.by_rid.emplace(key, std::move(c)).first->second;
      s.rid_of.emplace(added.serial, key);
      s.st.connections = s.by_rid.size();
      s.greet(added);
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
      ok = s.raw(c.rid, s.seal(c, more, frames[k].data(), frames[k].size()));
    } else {
      std::uint8_t h[9];
      std::size_t const hn = frame_header(h, frames[k].size(), more);
      // Header and payload as two writes: the payload is not copied.
      ok = s.raw(c.rid, zmq::message_t(h, hn)) && (frames[k].size() == 0 || s.raw(c.rid, std::move(frames[k])));
    }
    if (!ok) {
      // The peer does not read its replies: what it was sent may stop
      // mid-frame, so the connection goes.
      s.hang_up(c.rid);
      s.forget(c, nullptr);
      return false;
    }
  }
  return true;
}

}  // namespace placer::service::zmtp
