// Failover (issue 39): placer::client given several endpoints, against real
// servers on loopback TCP. A replica that goes away, one that hangs on a
// round, one whose queue is full: the round is answered once, by the next
// replica, as a full snapshot of the session, and the deltas after it go
// there; retries stop at their count and their time.
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/server.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

using service::decoded_reply;
using testing_support::running_server;
using wire::ErrorCode;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

round_input demo_round() {
  std::mt19937_64 rng(7);
  round_input in = testing_support::random_round(rng, 6, 30);
  while (in.pending.empty()) in = testing_support::random_round(rng, 6, 30);
  in.state.epoch = 1;
  return in;
}

/// A loopback endpoint nothing listens on (bound, then released).
std::string dead_endpoint() {
  zmq::context_t ctx;
  zmq::socket_t sock(ctx, zmq::socket_type::router);
  sock.bind("tcp://127.0.0.1:*");
  return sock.get(zmq::sockopt::last_endpoint);
}

/// The reply is the in-process solve of `in`.
void expect_solved_as(decoded_reply const& rep, round_input const& in) {
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  EXPECT_EQ(testing_support::difference(rep.result, local.solve(in)), "");
  EXPECT_EQ(rep.result.epoch, in.state.epoch);
}

bool applied_a_delta(decoded_reply const& rep) {
  for (auto const& t : rep.result.timing) {
    if (t.stage == service::stage_apply_delta) return true;
  }
  return false;
}

/// The cluster delta that rewrites node `k` with a node of fewer free CPUs,
/// and the same move on `ref`.
cluster_delta step(round_input& ref, std::size_t k) {
  node n = ref.state.nodes[k];
  n.cpu_milli_free = std::max<std::int64_t>(0, n.cpu_milli_free - 1000);
  cluster_delta d{ref.state.epoch, ref.state.epoch + 1, {}, {}, {{static_cast<std::int32_t>(k), n}}};
  ref.state.nodes[k] = n;
  ref.state.epoch += 1;
  return d;
}

TEST(Failover, ARoundGoesToTheNextReplicaAsASnapshotAndTheDeltasFollowIt) {
  std::optional<running_server> a(std::in_place), b(std::in_place);
  std::string const ea = a->endpoint(), eb = b->endpoint();
  client_options opt{ea + ", " + eb, 2000, "session-failover"};
  client c(opt);
  ASSERT_EQ(c.endpoints(), (std::vector<std::string>{ea, eb}));
  round_input ref = demo_round();
  round_input jobs = ref;
  jobs.state = {};
  expect_solved_as(c.solve(ref), ref);
  auto rep = c.solve_delta(step(ref, 0), jobs);
  expect_solved_as(rep, ref);
  EXPECT_TRUE(applied_a_delta(rep));
  EXPECT_EQ(a->get().stats().rounds_ok, 2U);

  // A goes away between rounds: the next round goes to B in full, at once
  // (the refused connection is seen, not waited out), and is solved once.
  a.reset();
  auto t0 = clock_type::now();
  rep = c.solve_delta(step(ref, 1), jobs);
  double const took = ms_since(t0);
  expect_solved_as(rep, ref);
  EXPECT_FALSE(applied_a_delta(rep)) << "B did not hold the session: a full snapshot";
  EXPECT_LT(took, 1000) << "a refused connection fails over without waiting for the 2000 ms timeout";
  EXPECT_EQ(c.current_endpoint(), eb);
  EXPECT_EQ(c.failovers(), 1U);
  EXPECT_EQ(c.resyncs(), 1U);
  EXPECT_EQ(b->get().stats().rounds_ok, 1U);
  EXPECT_EQ(b->get().stats().errors, 0U) << "no StaleEpoch round trip: the snapshot went first";

  // The deltas after it go to B, as deltas.
  for (std::size_t k = 2; k < 5; ++k) {
    rep = c.solve_delta(step(ref, k % ref.state.nodes.size()), jobs);
    expect_solved_as(rep, ref);
    EXPECT_TRUE(applied_a_delta(rep));
  }
  EXPECT_EQ(c.failovers(), 1U);
  EXPECT_EQ(b->get().stats().rounds_ok, 4U);

  // A back on its endpoint: the client stays with B, which holds the
  // session; B gone, the round goes back to A in full.
  a.emplace(service::default_max_message_bytes, ea);
  rep = c.solve_delta(step(ref, 0), jobs);
  expect_solved_as(rep, ref);
  EXPECT_EQ(a->get().stats().rounds_ok, 0U);
  b.reset();
  t0 = clock_type::now();
  rep = c.solve_delta(step(ref, 1), jobs);
  expect_solved_as(rep, ref);
  EXPECT_LT(ms_since(t0), 1000);
  EXPECT_FALSE(applied_a_delta(rep));
  EXPECT_EQ(c.current_endpoint(), ea);
  EXPECT_EQ(c.failovers(), 2U);
  EXPECT_EQ(a->get().stats().rounds_ok, 1U);
}

TEST(Failover, ARoundAHungReplicaHoldsIsAnsweredOnceByTheOther) {
  // A takes the round and sits on it past the client's timeout: the round
  // goes to B; A's late answer is dropped, never taken for a later round.
  std::atomic<int> held{0};
  service::service_config slow;
  slow.endpoint = "tcp://127.0.0.1:*";
  slow.on_solve = [&](std::uint64_t) {
    if (held.fetch_add(1) == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
  };
  running_server a(slow), b;
  client_options opt{a.endpoint() + "," + b.endpoint(), 300, "session-hung"};
  client c(opt);
  round_input ref = demo_round();
  round_input jobs = ref;
  jobs.state = {};
  expect_solved_as(c.solve(ref), ref);
  auto const t0 = clock_type::now();
  auto rep = c.solve_delta(step(ref, 0), jobs);  // A's second round: held
  double const took = ms_since(t0);
  expect_solved_as(rep, ref);
  EXPECT_GE(took, 300) << "the hung round is waited for its timeout";
  EXPECT_LT(took, 900) << "and not for A's answer";
  EXPECT_EQ(c.current_endpoint(), b.endpoint());
  EXPECT_EQ(c.failovers(), 1U);
  EXPECT_EQ(c.retries(), 1U);
  // Later rounds, while A's late answer arrives: each reply is its own round's.
  for (std::size_t k = 1; k < 8; ++k) {
    rep = c.solve_delta(step(ref, k % ref.state.nodes.size()), jobs);
    expect_solved_as(rep, ref);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(c.failovers(), 1U);
}

/// A stand-in replica whose queue is always full: it answers every round
/// ResourceExhausted with a retry hint, and notes when each came.
class full_queue {
 public:
  explicit full_queue(std::uint32_t retry_after_ms) : retry_after_ms_(retry_after_ms) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { serve(); });
  }
  ~full_queue() {
    stop_ = true;
    thread_.join();
  }
  [[nodiscard]] std::string const& endpoint() const { return endpoint_; }
  std::vector<clock_type::time_point> arrivals() {
    std::lock_guard<std::mutex> lock(mu_);
    return arrivals_;
  }

 private:
  void serve() {
    flatbuffers::FlatBufferBuilder fbb;
    while (!stop_) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> frames;
      do {
        zmq::message_t f;
        if (!router_.recv(f, zmq::recv_flags::dontwait)) break;
        frames.push_back(std::move(f));
      } while (router_.get(zmq::sockopt::rcvmore));
      if (frames.size() < 2) continue;
      auto const chk = service::check_envelope(frames.back().data(), frames.back().size());
      if (chk.envelope == nullptr || chk.envelope->header() == nullptr) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        arrivals_.push_back(clock_type::now());
      }
      service::encode_error(fbb, {chk.envelope->header()->request_id(), "", 0}, ErrorCode::ResourceExhausted,
                            "queue full (stand-in)", retry_after_ms_);
      frames.back() = zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
      for (std::size_t k = 0; k < frames.size(); ++k) {
        router_.send(frames[k], k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
  }

  std::uint32_t retry_after_ms_;
  zmq::context_t ctx_;
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<clock_type::time_point> arrivals_;
};

TEST(Failover, AFullQueueIsAskedAgainAfterItsHintThenTheNextReplica) {
  full_queue busy(150);
  running_server b;
  client_options opt{busy.endpoint() + "," + b.endpoint(), 2000, "session-busy"};
  opt.busy_retries = 2;
  client c(opt);
  round_input const in = demo_round();
  auto const rep = c.solve(in);
  expect_solved_as(rep, in);
  auto const at = busy.arrivals();
  ASSERT_EQ(at.size(), 3U) << "the first try and two retries";
  for (std::size_t k = 1; k < at.size(); ++k) {
    double const gap_ms = std::chrono::duration<double, std::milli>(at[k] - at[k - 1]).count();
    EXPECT_GE(gap_ms, 150.0) << "retry_after_ms honoured";
  }
  EXPECT_EQ(c.busy_retries(), 2U);
  EXPECT_EQ(c.current_endpoint(), b.endpoint());

  // Alone, the refusal comes back as the server's word once the retries are spent.
  full_queue alone(50);
  client_options one{alone.endpoint(), 2000, "session-busy-alone"};
  one.busy_retries = 1;
  client lone(one);
  auto const refused = lone.solve(in);
  EXPECT_EQ(refused.code, ErrorCode::ResourceExhausted);
  EXPECT_EQ(refused.retry_after_ms, 50U);
  EXPECT_EQ(alone.arrivals().size(), 2U);
  EXPECT_EQ(lone.last_round(), nullptr) << "a refused round is not the session's";
}

TEST(Failover, RetriesStopAtTheirCountAndTheirTime) {
  std::string const e1 = dead_endpoint(), e2 = dead_endpoint();
  round_input const in = demo_round();
  {
    // By count: 3 retries over two dead replicas, backing off once each
    // has failed (at least half of 100 + 200 ms between them).
    client_options opt{e1 + "," + e2, 2000, "session-count"};
    opt.retries = 3;
    opt.backoff_ms = 100;
    opt.retry_budget_ms = 0;
    client c(opt);
    auto const t0 = clock_type::now();
    try {
      (void)c.solve(in);
      FAIL() << "expected client_error";
    } catch (client_error const& e) {
      std::string const msg = e.what();
      EXPECT_NE(msg.find("4 rounds lost over 2 endpoints"), std::string::npos) << msg;
      EXPECT_NE(msg.find("refused or dropped"), std::string::npos) << msg;
    }
    double const took = ms_since(t0);
    EXPECT_EQ(c.retries(), 3U);
    EXPECT_GE(took, 150);
    EXPECT_LT(took, 1500) << "refused connections are not waited out";
  }
  {
    // By time: many retries allowed, 600 ms of budget.
    client_options opt{e1 + "," + e2, 2000, "session-time"};
    opt.retries = 1000;
    opt.backoff_ms = 20;
    opt.backoff_max_ms = 200;
    opt.retry_budget_ms = 600;
    client c(opt);
    auto const t0 = clock_type::now();
    EXPECT_THROW((void)c.solve(in), client_error);
    double const took = ms_since(t0);
    EXPECT_LT(took, 600 + 300);
    EXPECT_GE(took, 300) << "the budget, not the count, ended it";
    EXPECT_LT(c.retries(), 100U);
  }
}

TEST(Failover, ARequestSentAsBytesGoesToTheNextReplicaToo) {
  // `placer client` sends its request as encoded bytes (roundtrip): lost at
  // a dead endpoint, the same bytes go to the next one.
  running_server b;
  std::string const dead = dead_endpoint();
  client c(client_options{dead + "," + b.endpoint(), 2000, "session-raw"});
  round_input const in = demo_round();
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {7, "session-raw", 0}, in);
  auto const bytes = c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), 7);
  auto const chk = service::check_envelope(bytes.data(), bytes.size());
  ASSERT_NE(chk.envelope, nullptr) << chk.message;
  expect_solved_as(service::decode_reply(*chk.envelope), in);
  EXPECT_EQ(c.current_endpoint(), b.endpoint());
  EXPECT_EQ(c.retries(), 1U);
}

TEST(Failover, AnEndpointListWithAnEmptyEntryIsRefusedSayingSo) {
  for (std::string const bad : {"", "tcp://127.0.0.1:1,,tcp://127.0.0.1:2", "tcp://127.0.0.1:1, "}) {
    try {
      client c(client_options{bad, 100, ""});
      FAIL() << "'" << bad << "' should be refused";
    } catch (client_error const& e) {
      EXPECT_NE(std::string(e.what()).find("empty entry"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace placer
