// What one peer of the service can do to it and to the others (issue 41):
// the probes found outside the project, replayed against a real server over
// real sockets. A peer that chooses its routing id (the next one libzmq's
// ROUTER would have generated among them) never stops the server; a session
// is read only with its key or secret; an oversized message gets a clear,
// permanent error; one peer's flood of sessions evicts its own.
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/server.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "../support/random_round.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

using testing_support::running_server;
using wire::ErrorCode;

round_input small_round(std::uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  round_input in = testing_support::random_round(rng, 6, 30);
  while (in.pending.empty()) in = testing_support::random_round(rng, 6, 30);
  return in;
}

std::vector<std::uint8_t> health_request(std::uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_health_request(fbb, {id, "", 0});
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

service::decoded_reply decode(void const* data, std::size_t size) {
  auto const chk = service::check_envelope(data, size);
  EXPECT_NE(chk.envelope, nullptr) << chk.message;
  if (chk.envelope == nullptr) return {};
  return service::decode_reply(*chk.envelope);
}

/// A DEALER that names itself: the probe's peer.
class chosen_peer {
 public:
  chosen_peer(zmq::context_t& ctx, std::string const& endpoint, std::string const& id)
      : sock_(ctx, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::rcvtimeo, 5000);
    if (!id.empty()) sock_.set(zmq::sockopt::routing_id, zmq::buffer(id));
    sock_.connect(endpoint);
  }
  /// A health probe; whether it was answered, and answered with its id.
  bool probe(std::uint64_t id) {
    auto const req = health_request(id);
    sock_.send(zmq::message_t{}, zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(req));
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t m;
      if (!sock_.recv(m)) return false;
      bool const more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
    auto const chk = service::check_envelope(frames.back().data(), frames.back().size());
    return chk.envelope != nullptr && chk.envelope->header() != nullptr && chk.envelope->header()->request_id() == id;
  }
  zmq::socket_t& socket() { return sock_; }

 private:
  zmq::socket_t sock_;
};

/// The ids libzmq 4.3's ROUTER generates: a zero byte, then a counter that
/// starts at glibc's first rand() (0x6b8b4567) in every process that did
/// not seed it.
std::string generated_id(std::uint32_t counter) {
  std::string id(5, '\0');
  for (int k = 0; k < 4; ++k) id[static_cast<std::size_t>(4 - k)] = static_cast<char>((counter >> (8 * k)) & 0xff);
  return id;
}

TEST(Peers, ChosenRoutingIdsNeverStopTheServer) {
  running_server s;
  zmq::context_t ctx;
  // The crash found outside: a peer takes the id the server's ROUTER would
  // generate next, then an ordinary client connects. Here both, for the
  // first generated ids, for ids a peer may not claim elsewhere, and for
  // every peer twice under one id (a duplicate).
  std::vector<std::string> ids;
  for (std::uint32_t k = 0; k < 8; ++k) ids.push_back(generated_id(0x6b8b4567U + k));
  ids.push_back(generated_id(0xeb8b4567U));  // with the high bit libzmq's generate_random may set
  ids.push_back(std::string("\0\0\0\0\1", 5));
  ids.push_back(std::string(255, 'x'));
  ids.push_back("same");
  ids.push_back("same");
  std::vector<std::unique_ptr<chosen_peer>> squatters;
  std::uint64_t id = 1;
  for (auto const& chosen : ids) {
    squatters.push_back(std::make_unique<chosen_peer>(ctx, s.endpoint(), chosen));
    ASSERT_TRUE(squatters.back()->probe(id++)) << "a peer with a chosen id is answered like any other";
    // An ordinary client (no id: libzmq's ROUTER would have generated one).
    chosen_peer plain(ctx, s.endpoint(), "");
    ASSERT_TRUE(plain.probe(id++)) << "the server answers after a peer chose its id";
  }
  // Every squatter is still answered, on its own connection.
  for (auto& p : squatters) EXPECT_TRUE(p->probe(id++));
  client c({s.endpoint(), 5000, ""});
  EXPECT_EQ(c.solve(small_round()).code, ErrorCode::Ok);
}

/// The session `c` made at `epoch` (from round `in`) is still its own: a
/// delta on it is solved, with nothing to resync.
void expect_session_kept(client& c, round_input const& in, std::uint64_t epoch) {
  node fine = in.state.nodes[0];
  fine.cpu_milli_free = 0;
  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto const next = c.solve_delta({epoch, epoch + 1, {}, {}, {{0, fine}}}, jobs_only);
  EXPECT_EQ(next.code, ErrorCode::Ok) << next.message;
  EXPECT_EQ(c.resyncs(), 0U);
}

/// The probe's read: a job delta that changes nothing, at the epoch the
/// session is thought to hold. Answered with the session's jobs when it
/// reaches it.
service::decoded_reply empty_delta(client& via, std::string const& session, std::uint64_t epoch,
                                   std::string const& secret, std::uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  cluster_delta const d{epoch, epoch + 1, {}, {}, {}};
  job_delta const none;
  round_input const nothing;
  service::encode_request(fbb, {id, session, 0, secret}, nothing, &d, &none);
  auto const bytes = via.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), id);
  return decode(bytes.data(), bytes.size());
}

TEST(Peers, ASessionIsReadOnlyWithItsSecretAcrossReconnects) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " worker(s)");
    running_server s(service::default_max_message_bytes, "tcp://127.0.0.1:*", workers);
    client victim({s.endpoint(), 5000, "ctl-plane-prod"});
    round_input in = small_round();
    in.state.epoch = 41;
    auto const made = victim.solve(in);
    ASSERT_EQ(made.code, ErrorCode::Ok) << made.message;
    ASSERT_EQ(victim.session_secret().size(), 32U) << "the reply that makes a session issues its secret";
    // The victim rebuilds its socket, as after a timeout.
    victim.reconnect();
    // The attacker, on many connections, with no secret and with guessed
    // ones: never the victim's epoch, nor a job name, nor a sign the
    // session exists (the same answer as for a name never used).
    std::string guessed = victim.session_secret();
    guessed[0] = guessed[0] == 'a' ? 'b' : 'a';
    std::uint64_t id = 100;
    for (std::string const& secret : {std::string(), guessed, std::string("00"), std::string(64, 'f')}) {
      for (int k = 0; k < 4; ++k) {
        client attacker({s.endpoint(), 5000, "attacker-" + std::to_string(k)});
        auto const got = empty_delta(attacker, "ctl-plane-prod", 41, secret, id++);
        auto const never = empty_delta(attacker, "never-made", 41, secret, id++);
        EXPECT_EQ(got.code, ErrorCode::StaleEpoch);
        EXPECT_EQ(got.message.find("41"), std::string::npos) << got.message;
        EXPECT_TRUE(got.result.placements.empty() && got.result.unplaced_jobs.empty());
        for (auto const& j : in.pending) EXPECT_EQ(got.message.find(j.name), std::string::npos);
        EXPECT_EQ(never.code, got.code);
        std::string const generic = "no cluster held for session '";
        EXPECT_EQ(got.message.substr(0, generic.size()), never.message.substr(0, generic.size()));
      }
    }
    // The victim's own delta after its reconnect: its session, no resync.
    expect_session_kept(victim, in, 41);
    // With the victim's secret (as only the victim holds it) the same read
    // reaches it: the test above could have passed for the wrong reason.
    client holder({s.endpoint(), 5000, "other"});
    auto const own = empty_delta(holder, "ctl-plane-prod", 42, victim.session_secret(), 999);
    EXPECT_EQ(own.code, ErrorCode::Ok) << own.message;
  }
}

TEST(Peers, AnOversizedMessageGetsAPermanentErrorNamingTheLimit) {
  constexpr std::size_t limit = 64 << 10;
  running_server s(limit);
  zmq::context_t ctx;
  chosen_peer p(ctx, s.endpoint(), "");
  std::string const big(limit + 1, 'x');
  p.socket().send(zmq::message_t{}, zmq::send_flags::sndmore);
  p.socket().send(zmq::buffer(big));
  zmq::message_t delimiter, reply;
  ASSERT_TRUE(p.socket().recv(delimiter));
  ASSERT_TRUE(delimiter.more());
  ASSERT_TRUE(p.socket().recv(reply));
  auto const r = decode(reply.data(), reply.size());
  EXPECT_EQ(r.code, ErrorCode::ResourceExhausted);
  EXPECT_EQ(r.retry_after_ms, 0U) << "retrying cannot help";
  EXPECT_NE(r.message.find("limit of " + std::to_string(limit) + " bytes"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("never accepted"), std::string::npos) << r.message;
  auto const st = s.get().stats();
  EXPECT_EQ(st.oversized, 1U);
  EXPECT_EQ(st.refused_busy, 0U) << "not a queue refusal";
  // The peer's next round is served as usual.
  EXPECT_TRUE(p.probe(7));
  client c({s.endpoint(), 5000, ""});
  EXPECT_EQ(c.solve(small_round()).code, ErrorCode::Ok);
}

/// A server with these session bounds, and one peer's session at epoch 3
/// made on it (the bystander whose session must stay).
struct sessions_rig {
  sessions_rig(std::size_t total, std::size_t per_peer)
      : s([&] {
          service::service_config cfg;
          cfg.endpoint = "tcp://127.0.0.1:*";
          cfg.max_sessions = total;
          cfg.max_sessions_per_peer = per_peer;
          return cfg;
        }()),
        bystander({s.endpoint(), 5000, "bystander"}) {
    in.state.epoch = 3;
    EXPECT_EQ(bystander.solve(in).code, ErrorCode::Ok);
  }
  /// `count` sessions made by one new peer (one connection), each a round
  /// of the bystander's nodes.
  void flood(std::string const& prefix, std::uint64_t count) {
    client c({s.endpoint(), 5000, ""});
    round_input tiny;
    tiny.state = in.state;
    flatbuffers::FlatBufferBuilder fbb;
    for (std::uint64_t k = 0; k < count; ++k) {
      service::encode_request(fbb, {k + 1, prefix + std::to_string(k), 0}, tiny);
      auto const bytes = c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), k + 1);
      ASSERT_EQ(decode(bytes.data(), bytes.size()).code, ErrorCode::Ok);
    }
  }
  running_server s;
  round_input in = small_round(9);
  client bystander;
};

TEST(Peers, OnePeersSessionFloodEvictsOnlyItsOwn) {
  sessions_rig r(256, 64);
  r.flood("flood-", 10000);
  EXPECT_GE(r.s.get().stats().sessions_evicted, 10000U - 64U) << "the flood evicted its own";
  expect_session_kept(r.bystander, r.in, 3);
}

TEST(Peers, ManyPeersOverTheTotalEvictTheLargestHolderFirst) {
  // Two peers within their share, together past the total: the one
  // holding the most gives way, never the peer with one session.
  sessions_rig r(40, 32);
  r.flood("p0-", 30);
  r.flood("p1-", 30);
  EXPECT_EQ(r.s.get().stats().sessions_evicted, 1U + 60U - 40U);
  expect_session_kept(r.bystander, r.in, 3);
}

/// A raw TCP connection to the server's port, for bytes no ZeroMQ peer sends.
int raw_connect(std::string const& endpoint) {
  auto const colon = endpoint.rfind(':');
  int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(Peers, GarbageSilenceAndHalfHandshakesAreClosedAndForgotten) {
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.handshake_ms = 300;
  cfg.frame_ms = 300;
  running_server s(cfg);
  std::vector<int> fds;
  std::string const junk[] = {
      std::string("GET / HTTP/1.1\r\n\r\n"),
      std::string("\xff\0\0\0\0\0\0\0\1\x7f\3\0NULL", 16) + std::string(48, '\0') + std::string("\x04\xff", 2),
      std::string("\xff\0\0\0\0\0\0\0\1\x7f\3\0CURVE", 17) + std::string(47, '\0'),
      std::string("\xff\0\0\0\0\0\0\0\1\x7f\2", 11),
      std::string("\xff\0\0\0\0\0\0\0\1\x7f\3\0NULL", 16),  // then silence: past the handshake's time
      // A whole handshake, then a frame of 1 MB announced, 3 bytes of it
      // sent, and silence: past the frame's time.
      std::string("\xff\0\0\0\0\0\0\0\1\x7f\3\0NULL", 16) + std::string(48, '\0') +
          std::string("\x04\x1c\x05READY\x0bSocket-Type\0\0\0\x06" "DEALER", 30) +
          std::string("\x02\0\0\0\0\0\x0f\x42\x40" "abc", 12),
  };
  for (auto const& bytes : junk) {
    int const fd = raw_connect(s.endpoint());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    fds.push_back(fd);
  }
  // Each is closed by the server for what it sent, and nothing of it stays.
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.get().stats().protocol_errors < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.get().stats().protocol_errors, 6U);
  for (int fd : fds) {
    char buf[256];
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "the server closed it";
    ::close(fd);
  }
  while (s.get().stats().connections > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.get().stats().connections, 0U);
  // A connection the server closed is not taken for a new one when the
  // socket reports it gone (it would linger until its handshake's time).
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * cfg.handshake_ms));
  EXPECT_EQ(s.get().stats().protocol_errors, 6U);
  client c({s.endpoint(), 5000, ""});
  EXPECT_EQ(c.solve(small_round()).code, ErrorCode::Ok);
}

}  // namespace
}  // namespace placer
