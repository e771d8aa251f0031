#pragma once
// A ZMTP 3.1 peer written out by hand over a raw TCP socket, NULL or CURVE
// (RFC 23, 37, 26), for the tests and the transport fuzzer: it sends what a
// libzmq DEALER would, or anything else (plaintext commands after a CURVE
// handshake, forged boxes, frames left unfinished), and reads what the
// server sends back, boxes opened. Header only; libsodium for CURVE.
#include <sodium.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace placer::testing_support {

/// A CURVE key pair, raw.
struct curve_pair {
  std::array<std::uint8_t, 32> pub{}, sec{};
  static curve_pair make() {
    curve_pair p;
    if (sodium_init() < 0) return p;
    crypto_box_keypair(p.pub.data(), p.sec.data());
    return p;
  }
  [[nodiscard]] std::string z85_public() const {
    char z[41];
    zmq_z85_encode(z, pub.data(), 32);
    return z;
  }
  [[nodiscard]] std::string z85_secret() const {
    char z[41];
    zmq_z85_encode(z, sec.data(), 32);
    return z;
  }
};

/// The TCP port of a "tcp://127.0.0.1:PORT" endpoint.
inline int endpoint_port(std::string const& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

class zmtp_peer {
 public:
  struct frame {
    std::uint8_t flags = 0;  ///< as sent (MORE 1, LONG 2, COMMAND 4); for an opened box, its inner flags
    std::string body;
  };

  /// Connects to 127.0.0.1:port; `rcvbuf` > 0 shrinks the socket's receive buffer first.
  explicit zmtp_peer(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~zmtp_peer() {
    if (fd_ >= 0) ::close(fd_);
  }
  zmtp_peer(zmtp_peer const&) = delete;
  zmtp_peer& operator=(zmtp_peer const&) = delete;

  [[nodiscard]] bool connected() const { return fd_ >= 0; }
  [[nodiscard]] int fd() const { return fd_; }

  /// All of `bytes`, blocking; false once the connection is gone.
  bool send_raw(std::string_view bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t const n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return false;
      }
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  /// As much of `bytes` as the socket takes now; -1 once the connection is gone.
  ssize_t send_some(std::string_view bytes) {
    ssize_t const n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    return n;
  }

  /// The 64-byte greeting of a ZMTP 3.1 client for `mechanism`.
  static std::string greeting(std::string_view mechanism, std::uint8_t minor = 1) {
    std::string g(64, '\0');
    g[0] = '\xff';
    g[8] = 1;
    g[9] = '\x7f';
    g[10] = 3;
    g[11] = static_cast<char>(minor);
    g.replace(12, mechanism.size(), mechanism);
    return g;
  }
  /// A frame's bytes: header (short or long) and body.
  static std::string encode(std::uint8_t flags, std::string_view body) {
    std::string f;
    if (body.size() <= 255 && (flags & 2) == 0) {
      f.push_back(static_cast<char>(flags));
      f.push_back(static_cast<char>(body.size()));
    } else {
      f.push_back(static_cast<char>(flags | 2));
      for (int k = 7; k >= 0; --k) f.push_back(static_cast<char>((std::uint64_t{body.size()} >> (8 * k)) & 0xff));
    }
    f.append(body);
    return f;
  }
  /// A command's body: its name and data.
  static std::string command(std::string_view name, std::string_view data = {}) {
    return std::string(1, static_cast<char>(name.size())) + std::string(name) + std::string(data);
  }
  static std::string property(std::string_view name, std::string_view value) {
    std::string p(1, static_cast<char>(name.size()));
    p.append(name);
    for (int k = 3; k >= 0; --k) p.push_back(static_cast<char>((value.size() >> (8 * k)) & 0xff));
    p.append(value);
    return p;
  }

  /// The NULL handshake as a DEALER: greeting and READY, the server's read.
  bool null_handshake() {
    if (!send_raw(greeting("NULL")) || !send_raw(encode(4, command("READY", property("Socket-Type", "DEALER"))))) {
      return false;
    }
    return read_greeting() && [&] {
      auto f = read_frame();
      return f && (f->flags & 4) != 0 && f->body.rfind("\x05READY", 0) == 0;
    }();
  }

  /// The CURVE handshake as a DEALER of key `client` to the server `server_public`.
  bool curve_handshake(std::array<std::uint8_t, 32> const& server_public, curve_pair const& client) {
    if (sodium_init() < 0) return false;
    curve_ = true;
    crypto_box_keypair(cn_public_.data(), cn_secret_.data());
    if (!send_raw(greeting("CURVE")) || !read_greeting()) return false;
    // HELLO: version, 72 bytes of padding, C', short nonce, Box[64 zeros](C'->S).
    std::string hello = "\x05HELLO";
    hello.push_back(1);
    hello.push_back(0);
    hello.append(72, '\0');
    hello.append(reinterpret_cast<char const*>(cn_public_.data()), 32);
    std::uint8_t nonce[24];
    std::memcpy(nonce, "CurveZMQHELLO---", 16);
    put_u64(nonce + 16, nonce_);
    hello.append(reinterpret_cast<char const*>(nonce + 16), 8);
    ++nonce_;
    std::uint8_t zeros[64] = {};
    std::uint8_t box[80];
    if (crypto_box_easy(box, zeros, 64, nonce, server_public.data(), cn_secret_.data()) != 0) return false;
    hello.append(reinterpret_cast<char const*>(box), 80);
    if (!send_raw(encode(4, hello))) return false;
    // WELCOME: a 16-byte nonce, Box[S' + cookie](S->C').
    auto welcome = read_frame();
    if (!welcome || welcome->body.size() != 8 + 16 + 144 || welcome->body.rfind("\x07WELCOME", 0) != 0) return false;
    std::uint8_t wnonce[24];
    std::memcpy(wnonce, "WELCOME-", 8);
    std::memcpy(wnonce + 8, welcome->body.data() + 8, 16);
    std::uint8_t wplain[128];
    if (crypto_box_open_easy(wplain, reinterpret_cast<std::uint8_t const*>(welcome->body.data()) + 24, 144, wnonce,
                             server_public.data(), cn_secret_.data()) != 0) {
      return false;
    }
    std::array<std::uint8_t, 32> server_short{};
    std::memcpy(server_short.data(), wplain, 32);
    // INITIATE: the cookie, a short nonce, Box[C + vouch + metadata](C'->S').
    std::uint8_t vnonce[24];
    std::memcpy(vnonce, "VOUCH---", 8);
    randombytes_buf(vnonce + 8, 16);
    std::uint8_t vplain[64];
    std::memcpy(vplain, cn_public_.data(), 32);
    std::memcpy(vplain + 32, server_public.data(), 32);
    std::uint8_t vouch[80];
    if (crypto_box_easy(vouch, vplain, 64, vnonce, server_short.data(), client.sec.data()) != 0) return false;
    std::string plain(reinterpret_cast<char const*>(client.pub.data()), 32);
    plain.append(reinterpret_cast<char const*>(vnonce + 8), 16);
    plain.append(reinterpret_cast<char const*>(vouch), 80);
    plain += property("Socket-Type", "DEALER");
    std::string init = "\x08INITIATE";
    init.append(reinterpret_cast<char const*>(wplain + 32), 96);
    std::uint8_t inonce[24];
    std::memcpy(inonce, "CurveZMQINITIATE", 16);
    put_u64(inonce + 16, nonce_);
    init.append(reinterpret_cast<char const*>(inonce + 16), 8);
    ++nonce_;
    std::vector<std::uint8_t> ibox(plain.size() + crypto_box_MACBYTES);
    if (crypto_box_easy(ibox.data(), reinterpret_cast<std::uint8_t const*>(plain.data()), plain.size(), inonce,
                        server_short.data(), cn_secret_.data()) != 0) {
      return false;
    }
    init.append(reinterpret_cast<char const*>(ibox.data()), ibox.size());
    if (!send_raw(encode(4, init))) return false;
    if (crypto_box_beforenm(precom_.data(), server_short.data(), cn_secret_.data()) != 0) return false;
    // READY: a short nonce, Box[metadata](S'->C').
    auto ready = read_frame();
    if (!ready || ready->body.rfind("\x05READY", 0) != 0 || ready->body.size() < 6 + 8 + crypto_box_MACBYTES) {
      return false;
    }
    std::uint8_t rnonce[24];
    std::memcpy(rnonce, "CurveZMQREADY---", 16);
    std::memcpy(rnonce + 16, ready->body.data() + 6, 8);
    std::vector<std::uint8_t> rplain(ready->body.size() - 14 - crypto_box_MACBYTES);
    return crypto_box_open_easy_afternm(rplain.data(), reinterpret_cast<std::uint8_t const*>(ready->body.data()) + 14,
                                        ready->body.size() - 14, rnonce, precom_.data()) == 0;
  }

  /// A MESSAGE box's frame body: "\x07MESSAGE", `nonce`, Box[flags + payload](C'->S').
  [[nodiscard]] std::string box(std::uint8_t inner_flags, std::string_view payload, std::uint64_t nonce) const {
    std::string plain(1, static_cast<char>(inner_flags));
    plain.append(payload);
    std::uint8_t n[24];
    std::memcpy(n, "CurveZMQMESSAGEC", 16);
    put_u64(n + 16, nonce);
    std::string b = "\x07MESSAGE";
    b.append(reinterpret_cast<char const*>(n + 16), 8);
    std::vector<std::uint8_t> sealed(plain.size() + crypto_box_MACBYTES);
    if (crypto_box_easy_afternm(sealed.data(), reinterpret_cast<std::uint8_t const*>(plain.data()), plain.size(), n,
                                precom_.data()) != 0) {
      return {};
    }
    b.append(reinterpret_cast<char const*>(sealed.data()), sealed.size());
    return b;
  }
  /// The next nonce a box takes (and spends it).
  std::uint64_t next_nonce() { return nonce_++; }

  /// One message: its frames in order (NULL: frames; CURVE: a box each).
  bool send_message(std::vector<std::string> const& frames) {
    std::string wire;
    for (std::size_t k = 0; k < frames.size(); ++k) {
      std::uint8_t const more = k + 1 < frames.size() ? 1 : 0;
      wire += curve_ ? encode(0, box(more, frames[k], next_nonce())) : encode(more, frames[k]);
    }
    return send_raw(wire);
  }
  /// A request as placer's clients send it: an empty delimiter, then the payload.
  bool send_request(std::string_view payload) { return send_message({std::string(), std::string(payload)}); }
  /// A command after the handshake (CURVE: inside a box, as ZMTP 3.1 says).
  bool send_command(std::string_view name, std::string_view data = {}) {
    std::string const body = command(name, data);
    return send_raw(curve_ ? encode(0, box(2, body, next_nonce())) : encode(4, body));
  }

  /// The next frame, within `timeout`; CURVE data frames are opened (the
  /// inner flags in `flags`, COMMAND there as 4). nullopt: closed or late.
  std::optional<frame> read_frame(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    auto const until = std::chrono::steady_clock::now() + timeout;
    std::string header;
    if (!read_exact(header, 2, until)) return std::nullopt;
    frame f;
    f.flags = static_cast<std::uint8_t>(header[0]);
    std::uint64_t size = static_cast<std::uint8_t>(header[1]);
    if ((f.flags & 2) != 0) {
      std::string rest;
      if (!read_exact(rest, 7, until)) return std::nullopt;
      size = 0;
      for (char c : header.substr(1) + rest) size = (size << 8) | static_cast<std::uint8_t>(c);
    }
    if (!read_exact(f.body, static_cast<std::size_t>(size), until)) return std::nullopt;
    if (curve_ && (f.flags & 4) == 0 && precom_set()) return open(f);
    return f;
  }
  /// Frames until one without MORE (PINGs answered with PONG on the way,
  /// unless `pong` is false, when they are returned like any frame).
  std::optional<std::vector<frame>> read_message(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                                                 bool pong = true) {
    std::vector<frame> out;
    while (true) {
      auto f = read_frame(timeout);
      if (!f) return std::nullopt;
      if ((f->flags & 4) != 0) {
        if (pong && f->body.rfind("\x04PING", 0) == 0) {
          send_command("PONG", f->body.size() > 7 ? std::string_view(f->body).substr(7) : std::string_view());
          continue;
        }
        out.push_back(std::move(*f));
        return out;
      }
      bool const more = (f->flags & 1) != 0;
      out.push_back(std::move(*f));
      if (!more) return out;
    }
  }

  /// Reads and drops what has arrived, without waiting; false once the
  /// connection is closed.
  bool drain() {
    char buf[65536];
    while (true) {
      ssize_t const n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0) return false;
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

  /// Whether the server closes the connection within `timeout`, reading
  /// (and dropping) what it sent before.
  bool closed_within(std::chrono::milliseconds timeout) {
    auto const until = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      int const ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
      if (::poll(&p, 1, std::max(ms, 0)) <= 0) continue;
      ssize_t const n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0 && errno != EINTR && errno != EAGAIN) return true;  // ECONNRESET
    }
    return false;
  }

 private:
  static void put_u64(std::uint8_t* p, std::uint64_t v) {
    for (int k = 7; k >= 0; --k, v >>= 8) p[k] = static_cast<std::uint8_t>(v);
  }
  [[nodiscard]] bool precom_set() const {
    for (auto b : precom_) {
      if (b != 0) return true;
    }
    return false;
  }
  bool read_exact(std::string& out, std::size_t n, std::chrono::steady_clock::time_point until) {
    out.clear();
    while (out.size() < n) {
      if (!buffered_.empty()) {
        std::size_t const take = std::min(n - out.size(), buffered_.size());
        out.append(buffered_, 0, take);
        buffered_.erase(0, take);
        continue;
      }
      auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[65536];
      ssize_t const got = ::recv(fd_, buf, sizeof buf, 0);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        return false;
      }
      buffered_.append(buf, static_cast<std::size_t>(got));
    }
    return true;
  }
  bool read_greeting() {
    std::string g;
    return read_exact(g, 64, std::chrono::steady_clock::now() + std::chrono::seconds(5)) &&
           static_cast<std::uint8_t>(g[0]) == 0xff;
  }
  /// A server's MESSAGE box opened; nullopt when it does not open.
  std::optional<frame> open(frame const& f) const {
    auto const& b = f.body;
    if (b.size() < 8 + 8 + crypto_box_MACBYTES + 1 || b.rfind("\x07MESSAGE", 0) != 0) return std::nullopt;
    std::uint8_t n[24];
    std::memcpy(n, "CurveZMQMESSAGES", 16);
    std::memcpy(n + 16, b.data() + 8, 8);
    std::vector<std::uint8_t> plain(b.size() - 16 - crypto_box_MACBYTES);
    if (crypto_box_open_easy_afternm(plain.data(), reinterpret_cast<std::uint8_t const*>(b.data()) + 16, b.size() - 16,
                                     n, precom_.data()) != 0) {
      return std::nullopt;
    }
    frame out;
    out.flags = static_cast<std::uint8_t>((plain[0] & 1) | ((plain[0] & 2) != 0 ? 4 : 0));
    out.body.assign(reinterpret_cast<char const*>(plain.data()) + 1, plain.size() - 1);
    return out;
  }

  int fd_ = -1;
  bool curve_ = false;
  std::uint64_t nonce_ = 1;
  std::array<std::uint8_t, 32> cn_public_{}, cn_secret_{}, precom_{};
  std::string buffered_;
};

}  // namespace placer::testing_support
