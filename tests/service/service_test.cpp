// The service end to end over a real TCP loopback socket: placer::client
// against placer::service::server in a thread. Bad input of every kind gets
// a specific error code, and the server answers the next good request.
#include <placer/service/backend_choice.hpp>
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/curve.hpp>
#include <placer/service/json_io.hpp>
#include <placer/service/log.hpp>
#include <placer/service/server.hpp>
#include <placer/traces/synthetic.hpp>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "../support/run_placer.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

using service::decoded_reply;
using wire::ErrorCode;
using testing_support::running_server;

round_input demo_round() {
  std::mt19937_64 rng(5);
  round_input in = testing_support::random_round(rng, 6, 30);
  while (in.pending.empty()) in = testing_support::random_round(rng, 6, 30);
  return in;
}

std::vector<std::uint8_t> encode(round_input const& in, std::uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {id, "raw", 0}, in);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

decoded_reply decode(std::vector<std::uint8_t> const& bytes) {
  auto const chk = service::check_envelope(bytes.data(), bytes.size());
  EXPECT_NE(chk.envelope, nullptr) << "the server's reply must itself verify: " << chk.message;
  if (chk.envelope == nullptr) return {};
  return service::decode_reply(*chk.envelope);
}

/// Where a reply differs from the same round solved in process ("" when it
/// does not).
std::string difference(decoded_reply const& rep, round_result const& want) {
  return testing_support::difference(rep.result, want);
}

/// The reply over the wire equals the in-process solve of the same round.
void expect_good_round(client& c, round_input const& in) {
  decoded_reply const rep = c.solve(in);
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  EXPECT_EQ(difference(rep, local.solve(in)), "");
  expect_round_invariants(in, rep.result);
}

/// The stage names of a reply's timing list, in order.
std::vector<std::string> stages(decoded_reply const& rep) {
  std::vector<std::string> out;
  for (auto const& t : rep.result.timing) out.push_back(t.stage);
  return out;
}

bool has_stage(decoded_reply const& rep, std::string const& name) {
  auto const s = stages(rep);
  return std::find(s.begin(), s.end(), name) != s.end();
}

TEST(Service, RoundTripOverTcpLoopback) {
  running_server s;
  client c({s.endpoint(), 5000, ""});
  round_input const in = demo_round();
  expect_good_round(c, in);
  auto const& t = c.last_timing();
  EXPECT_GT(t.total_us, 0.0);
  EXPECT_GT(t.encode_us, 0.0);
  EXPECT_GT(t.decode_us, 0.0);
  EXPECT_LT(t.encode_us + t.decode_us, t.total_us);
  EXPECT_EQ(s.get().stats().rounds_ok, 1U);
}

// The constraints example through the real client: placed only where
// Kubernetes would allow it and within its queues' limits, and the unplaced
// jobs' explanations arrive.
TEST(Service, ConstrainedRoundIsPlacedWhereKubernetesWouldAndExplained) {
  running_server s;
  client c({s.endpoint(), 5000, ""});
  round_input in;
  in.state = service::read_cluster_file(std::string(PLACER_SOURCE_DIR) + "/data/examples/constraints-cluster.json");
  auto jobs = service::read_jobs_file(std::string(PLACER_SOURCE_DIR) + "/data/examples/constraints-jobs.json");
  in.pending = std::move(jobs.pending);
  in.queues = std::move(jobs.queues);
  ASSERT_EQ(in.queues.size(), 2U);
  expect_good_round(c, in);  // invariants: every replica on a node its constraints admit
  decoded_reply const rep = c.solve(in);
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  ASSERT_EQ(rep.result.unplaced_jobs.size(), 3U);
  std::int64_t interactive = 0;
  for (auto const& p : rep.result.placements) {
    auto const& j = in.pending[static_cast<std::size_t>(p.job)];
    if (j.queue == "interactive") interactive += j.per_replica.gpu_milli_total() * static_cast<std::int64_t>(p.replicas.size());
  }
  EXPECT_EQ(interactive, 500);  // its limit, not more
  for (auto const& u : rep.result.unplaced_jobs) {
    if (u.reason == unplaced_reason::quota_exceeded) {
      EXPECT_EQ(in.pending[static_cast<std::size_t>(u.job)].name, "notebook-3");
      EXPECT_NE(u.detail.find("queue 'interactive'"), std::string::npos) << u.detail;
      continue;
    }
    EXPECT_EQ(u.why.nodes, 6);
    EXPECT_FALSE(u.why.excluded.empty());
    EXPECT_NE(u.detail.find("nodes are available"), std::string::npos) << u.detail;
  }
  auto const& gang = rep.result.unplaced_jobs[0];
  EXPECT_EQ(in.pending[static_cast<std::size_t>(gang.job)].name, "train-h100");
  EXPECT_EQ(gang.why.replicas_required, 2);
  // llm-serve's two replicas share h100-b0 (the packing repair, as one at a
  // time): h100-b1, the one node train-h100 may use, is not taken.
  EXPECT_FALSE(gang.why.outbid);
}

TEST(Service, ReplyTimesTheServicesOwnStages) {
  running_server s;
  client c({s.endpoint(), 5000, "timed"});
  round_input in = demo_round();
  auto const full = c.solve(in);
  ASSERT_EQ(full.code, ErrorCode::Ok) << full.message;
  // The solver's stages, then the service's; the encoder's own comes last.
  auto const names = stages(full);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), service::stage_encode);
  for (char const* st : {"validate", "total", service::stage_verify, service::stage_decode, service::stage_limits}) {
    EXPECT_TRUE(has_stage(full, st)) << st;
  }
  EXPECT_FALSE(has_stage(full, service::stage_apply_delta)) << "a full snapshot applies no delta";
  for (auto const& t : full.result.timing) EXPECT_GE(t.micros, 0.0) << t.stage;

  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto const delta = c.solve_delta({in.state.epoch, in.state.epoch + 1, {}, {}, {{0, in.state.nodes[0]}}}, jobs_only);
  ASSERT_EQ(delta.code, ErrorCode::Ok) << delta.message;
  EXPECT_TRUE(has_stage(delta, service::stage_apply_delta));
  EXPECT_EQ(stages(delta).back(), service::stage_encode);
}

TEST(Service, ClientFailsClearlyAndAtOnceWhenNoServer) {
  // Bind and release a port so nothing listens there: the refused
  // connection ends the wait (issue 39), not the timeout.
  std::string endpoint;
  {
    zmq::context_t ctx;
    zmq::socket_t sock(ctx, zmq::socket_type::router);
    sock.bind("tcp://127.0.0.1:*");
    endpoint = sock.get(zmq::sockopt::last_endpoint);
  }
  client c({endpoint, 2000, ""});
  auto const t0 = std::chrono::steady_clock::now();
  try {
    c.solve(demo_round());
    FAIL() << "expected client_error";
  } catch (client_error const& e) {
    std::string const msg = e.what();
    EXPECT_NE(msg.find("no reply from " + endpoint), std::string::npos) << msg;
    EXPECT_NE(msg.find("connection was refused or dropped"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is the Placer service running there?"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
}

struct bad_case {
  std::string name;
  std::vector<std::uint8_t> bytes;
  ErrorCode want;
  std::uint64_t id = 0;  ///< request id inside the bytes, when they carry one
};

TEST(Service, BadInputGetsSpecificErrorsAndServerStaysUp) {
  running_server s(1 << 20);  // 1 MiB limit, so "oversized" is cheap to build
  client c({s.endpoint(), 5000, ""});
  round_input const good = demo_round();
  std::vector<std::uint8_t> const valid = encode(good, 42);

  std::vector<bad_case> cases;
  std::mt19937_64 rng(3);
  for (int k = 0; k < 20; ++k) {
    std::vector<std::uint8_t> junk(std::uniform_int_distribution<int>(1, 4000)(rng));
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    // Random bytes almost never carry "PLCR" at offset 4; when they do the
    // verifier rejects them. Either way: not Ok.
    cases.push_back({"random bytes #" + std::to_string(k), junk, ErrorCode::UnknownSchema});
  }
  cases.push_back({"empty message", {}, ErrorCode::Malformed});
  for (std::size_t cut : {valid.size() / 4, valid.size() / 2, valid.size() - 8}) {
    cases.push_back({"truncated to " + std::to_string(cut), {valid.begin(), valid.begin() + static_cast<long>(cut)},
                     ErrorCode::Malformed});
  }
  cases.push_back({"oversized", std::vector<std::uint8_t>((1 << 20) + 1, 0), ErrorCode::ResourceExhausted});
  auto wrong_id = valid;
  std::copy_n("XXXX", 4, wrong_id.begin() + 4);
  cases.push_back({"unknown schema identifier", wrong_id, ErrorCode::UnknownSchema});

  round_input neg = good;
  neg.pending[0].per_replica.memory_mib = -1;
  cases.push_back({"negative demand", encode(neg, 7), ErrorCode::InvalidArgument, 7});
  round_input bad_index = good;
  running_job rj;
  rj.name = "ghost";
  rj.replicas.push_back({static_cast<std::int32_t>(good.state.nodes.size()) + 5, {0}, 1000});
  bad_index.running.push_back(rj);
  cases.push_back({"out-of-range node index", encode(bad_index, 8), ErrorCode::InvalidArgument, 8});
  round_input bad_domain = good;
  bad_domain.state.nodes[0].domain = 100000;
  cases.push_back({"out-of-range topology domain", encode(bad_domain, 9), ErrorCode::InvalidArgument, 9});

  for (auto const& bc : cases) {
    SCOPED_TRACE(bc.name);
    decoded_reply const rep = decode(c.roundtrip(bc.bytes.data(), bc.bytes.size(), bc.id));
    EXPECT_EQ(rep.header.request_id, bc.id);  // errors echo the id when the header was readable
    if (bc.name.rfind("random", 0) == 0) {
      EXPECT_TRUE(rep.code == ErrorCode::UnknownSchema || rep.code == ErrorCode::Malformed)
          << service::error_code_name(rep.code);
    } else {
      EXPECT_EQ(rep.code, bc.want) << service::error_code_name(rep.code) << ": " << rep.message;
    }
    EXPECT_FALSE(rep.message.empty());
    // ...and the very next good request is served correctly.
    expect_good_round(c, good);
  }
  EXPECT_EQ(s.get().stats().errors, cases.size());
}

TEST(Service, DeltaAgainstUnknownOrStaleEpochIsRejected) {
  running_server s;
  client c({s.endpoint(), 5000, "session-a"});
  round_input in = demo_round();
  in.state.epoch = 10;
  round_input jobs_only;
  jobs_only.pending = in.pending;
  cluster_delta d;
  d.base_epoch = 10;
  d.new_epoch = 11;
  job_delta const no_jobs;
  auto send_raw_delta = [&](std::uint64_t id, job_delta const* jobs = nullptr) {
    flatbuffers::FlatBufferBuilder fbb;
    service::encode_request(fbb, {id, "session-a", 0}, jobs_only, &d, jobs);
    return decode(c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), id));
  };
  // The server holds no state for this session yet, for a cluster delta or
  // a job delta.
  EXPECT_EQ(send_raw_delta(101).code, ErrorCode::StaleEpoch);
  EXPECT_EQ(send_raw_delta(103, &no_jobs).code, ErrorCode::StaleEpoch);
  // The client refuses a delta before any snapshot, without sending it.
  EXPECT_THROW(c.solve_delta(d, jobs_only), client_error);
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  // Against the held epoch: accepted, and solved on the updated cluster.
  node changed = in.state.nodes[0];
  changed.cpu_milli_free = 0;
  d.changed.push_back({0, changed});
  auto const ok = c.solve_delta(d, jobs_only);
  EXPECT_EQ(ok.code, ErrorCode::Ok) << ok.message;
  EXPECT_EQ(ok.result.epoch, 11U);
  EXPECT_EQ(c.resyncs(), 0U);
  // The same delta again is stale on the server (it holds epoch 11)...
  EXPECT_EQ(send_raw_delta(102).code, ErrorCode::StaleEpoch);
  EXPECT_EQ(send_raw_delta(104, &no_jobs).code, ErrorCode::StaleEpoch);
  // ...and the client catches it locally before sending.
  EXPECT_THROW(c.solve_delta(d, jobs_only), logic_error);
}

/// The round a delta replacing node 0 of `in` by `node0` gives: `in`'s
/// cluster at `epoch`, with jobs_only's jobs.
round_input after_node0_delta(round_input const& in, round_input const& jobs_only, node const& node0,
                              std::uint64_t epoch) {
  round_input r = jobs_only;
  r.state = in.state;
  r.state.nodes[0] = node0;
  r.state.epoch = epoch;
  return r;
}

TEST(Service, RejectedRoundLeavesTheSessionAsItWas) {
  running_server s;
  client c({s.endpoint(), 5000, "session-kept"});
  round_input in = demo_round();
  ASSERT_GE(in.state.nodes.size(), 3U);
  in.state.epoch = 5;
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto send_raw = [&](cluster_delta const& d, round_input const& jobs, std::uint64_t id) {
    flatbuffers::FlatBufferBuilder fbb;
    service::encode_request(fbb, {id, "session-kept", 0, c.session_secret()}, jobs, &d);
    return decode(c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), id));
  };
  node fine = in.state.nodes[0];
  fine.cpu_milli_free = 0;
  node bad = in.state.nodes[1];
  bad.cpu_milli_free = bad.cpu_milli_capacity + 1;
  // A delta that goes wrong at its last change...
  EXPECT_EQ(send_raw({5, 6, {}, {2}, {{0, fine}, {1, bad}}}, jobs_only, 201).code, ErrorCode::InvalidArgument);
  // ...and a good delta in a round the validator rejects for a job.
  round_input bad_jobs = jobs_only;
  bad_jobs.pending[0].per_replica.cpu_milli = -5;
  EXPECT_EQ(send_raw({5, 6, {}, {2}, {{0, fine}}}, bad_jobs, 202).code, ErrorCode::InvalidArgument);
  // The same through the client, which moves its own copy of the session's
  // cluster in place: rejected, and the client's copy is back at epoch 5,
  // node for node.
  EXPECT_EQ(c.solve_delta({5, 6, {}, {2}, {{0, fine}}}, bad_jobs).code, ErrorCode::InvalidArgument);
  ASSERT_NE(c.last_round(), nullptr);
  EXPECT_EQ(c.last_round()->state.epoch, 5U);
  EXPECT_TRUE(c.last_round()->state.nodes == in.state.nodes);
  // The session still holds what the snapshot sent, at epoch 5: a delta
  // against it gives the round a local solve of that cluster gives.
  auto const rep = c.solve_delta({5, 6, {}, {}, {{0, fine}}}, jobs_only);
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  EXPECT_EQ(rep.result.epoch, 6U);
  EXPECT_EQ(c.resyncs(), 0U);
  round_input const want_in = after_node0_delta(in, jobs_only, fine, 6);
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  auto const want = local.solve(want_in);
  EXPECT_EQ(difference(rep, want), "");
  EXPECT_EQ(rep.result.metrics.gar_before, want.metrics.gar_before);
}

TEST(Service, SessionBytesFollowDeltasNodeByNode) {
  // A delta round moves its session's bytes by the nodes it changes, removes
  // and adds instead of reading every node and label again; the figure
  // stays what session_bytes gives for the whole, round after round, and a
  // rejected delta leaves it as it was.
  running_server s;
  client c({s.endpoint(), 5000, "bytes"});
  round_input in = demo_round();
  ASSERT_GE(in.state.nodes.size(), 4U);
  in.state.epoch = 1;
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    in.state.nodes[i].labels = {"kubernetes.io/hostname=" + in.state.nodes[i].name, "zone=z" + std::to_string(i % 3)};
  }
  round_input jobs_only;
  jobs_only.pending = in.pending;
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  auto held = [&] { return c.health().session_bytes; };
  auto whole = [&] {
    auto const* r = c.last_round();
    return service::session_bytes(r->state, r->pending, r->running);
  };
  EXPECT_EQ(held(), whole());
  std::uint64_t epoch = 1;
  for (int step = 0; step < 6; ++step) {
    auto const& cur = c.last_round()->state.nodes;
    cluster_delta d{epoch, epoch + 1, {}, {}, {}};
    node longer = cur[0];
    longer.labels.push_back("feature.node.kubernetes.io/step-" + std::to_string(step) + "=" + std::string(40, 'x'));
    longer.taints.push_back({"team-with-a-long-taint-key", "inference", taint_effect::no_schedule});
    d.changed.push_back({0, longer});
    if (step % 2 == 1) d.removed.push_back(static_cast<std::int32_t>(cur.size() - 1));
    node added = cur[1];
    added.name = "added-node-with-a-long-name-" + std::to_string(step);
    if (step % 3 != 2) d.added.push_back(added);
    auto const rep = c.solve_delta(d, jobs_only);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
    ++epoch;
    EXPECT_EQ(held(), whole()) << "step " << step;
    // A round the server rejects (for a job) after its delta (a node
    // removed, one changed, one added) was applied moves nothing.
    round_input bad_jobs = jobs_only;
    bad_jobs.pending[0].per_replica.cpu_milli = -5;
    auto const before = held();
    EXPECT_EQ(c.solve_delta({epoch, epoch + 1, {added}, {2}, {{0, longer}}}, bad_jobs).code,
              ErrorCode::InvalidArgument);
    EXPECT_EQ(held(), before) << "step " << step;
    EXPECT_EQ(held(), whole()) << "step " << step;
  }
}

TEST(Service, SessionsBelongToThePeerThatMadeThem) {
  // The hijack a hostile peer could do before sessions had owners: with
  // only A's session id, B read A's round (an empty delta at A's epoch) and
  // then wrote its own cluster at that epoch, and A's next delta was solved
  // on B's cluster, over-committing A's nodes. Now B reaches a session of
  // its own under the same id, on one worker and on several.
  for (int workers : {1, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " worker(s)");
    running_server s(service::default_max_message_bytes, "tcp://127.0.0.1:*", workers);
    client a({s.endpoint(), 5000, "shared"});
    client b({s.endpoint(), 5000, "shared"});
    round_input in = demo_round();
    in.state.epoch = 10;
    ASSERT_EQ(a.solve(in).code, ErrorCode::Ok);
    round_input jobs_only;
    jobs_only.pending = in.pending;
    // B, with an empty delta at A's epoch: nothing held for B, and the
    // reply names no epoch of A's.
    cluster_delta const empty{10, 10, {}, {}, {}};
    job_delta const no_jobs;
    flatbuffers::FlatBufferBuilder fbb;
    service::encode_request(fbb, {7, "shared", 0}, jobs_only, &empty, &no_jobs);
    auto const peek = decode(b.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), 7));
    EXPECT_EQ(peek.code, ErrorCode::StaleEpoch);
    EXPECT_EQ(peek.message.find("10"), std::string::npos) << peek.message;
    EXPECT_TRUE(peek.result.placements.empty());
    // B writes a cluster with every GPU, CPU and byte free at A's epoch.
    round_input roomy = in;
    for (auto& nd : roomy.state.nodes) {
      std::fill(nd.gpu_free_milli.begin(), nd.gpu_free_milli.end(), milli_per_gpu);
      nd.cpu_milli_free = nd.cpu_milli_capacity;
      nd.memory_mib_free = nd.memory_mib_capacity;
    }
    roomy.running.clear();
    ASSERT_EQ(b.solve(roomy).code, ErrorCode::Ok);
    // A's next delta is solved on A's own cluster, as a local solve of it is.
    node fine = in.state.nodes[0];
    fine.cpu_milli_free = 0;
    auto const rep = a.solve_delta({10, 11, {}, {}, {{0, fine}}}, jobs_only);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
    EXPECT_EQ(a.resyncs(), 0U);
    round_input const want_in = after_node0_delta(in, jobs_only, fine, 11);
    solver local(kernels::make_backend(kernels::backend_kind::cpu));
    EXPECT_EQ(difference(rep, local.solve(want_in)), "");
    expect_round_invariants(want_in, rep.result);
  }
}

TEST(Service, RoundsPastTheLimitsAreRefusedBeforeSolving) {
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.limits.nodes = 8;
  cfg.limits.replicas = 50;
  running_server s(cfg);
  client c({s.endpoint(), 5000, "limits"});
  round_input in = demo_round();
  in.state.epoch = 3;
  ASSERT_LE(in.state.nodes.size(), 8U);
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  auto const good = in;
  auto expect_refused = [&](round_input const& bad, ErrorCode code, std::string const& says) {
    auto const rep = c.solve(bad);
    EXPECT_EQ(rep.code, code) << says;
    EXPECT_NE(rep.message.find(says), std::string::npos) << rep.message;
    EXPECT_TRUE(rep.result.placements.empty());
  };
  // Nine nodes.
  round_input big = good;
  while (big.state.nodes.size() < 9) {
    big.state.nodes.push_back(big.state.nodes.back());
    big.state.nodes.back().name = "extra-" + std::to_string(big.state.nodes.size());
  }
  expect_refused(big, ErrorCode::ResourceExhausted, "above the limit of 8 (--max-nodes)");
  // An elastic job counts at its largest size.
  round_input elastic = good;
  elastic.pending.front().min_replicas = 1;
  elastic.pending.front().max_replicas = 51;
  expect_refused(elastic, ErrorCode::ResourceExhausted, "above the limit of 50 (--max-replicas)");
  // Two nodes of one name, two pending jobs of one name, a name too long.
  round_input twins = good;
  twins.state.nodes[1].name = twins.state.nodes[0].name;
  expect_refused(twins, ErrorCode::InvalidArgument, "two nodes are named '" + good.state.nodes[0].name + "'");
  round_input same = good;
  same.pending.push_back(same.pending.front());
  expect_refused(same, ErrorCode::InvalidArgument, "two pending jobs are named");
  round_input longname = good;
  longname.pending.front().name = std::string(300, 'x');
  expect_refused(longname, ErrorCode::InvalidArgument, "pending job name of 300 bytes, above the limit of 256");
  // None of it reached the session: a delta against the last good round
  // is solved on it, without a resync.
  node fine = good.state.nodes[0];
  fine.cpu_milli_free = 0;
  round_input jobs_only;
  jobs_only.pending = good.pending;
  // A delta round's nodes are not checked again as a whole (they were when
  // they came), but the nodes a delta brings are: too many labels on a
  // changed node, a label too long on an added one.
  node labelled = good.state.nodes[0];
  for (int k = 0; k < 257; ++k) labelled.labels.push_back("l" + std::to_string(k) + "=v");
  auto refused = c.solve_delta({3, 4, {}, {}, {{0, labelled}}}, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::ResourceExhausted);
  EXPECT_NE(refused.message.find("labels and taints on one node, above the limit of 256"), std::string::npos)
      << refused.message;
  node added = good.state.nodes[1];
  added.name = "added";
  added.labels = {"zone=" + std::string(300, 'z')};
  refused = c.solve_delta({3, 4, {added}, {}, {}}, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find("node label name of 305 bytes, above the limit of 256"), std::string::npos)
      << refused.message;
  // Likewise a job delta's jobs: only those it brings are checked (the
  // session's were), and one of them past a limit is refused.
  job_delta long_job;
  long_job.added.push_back(good.pending.front());
  long_job.added.back().name = std::string(300, 'j');
  refused = c.solve_delta({3, 4, {}, {}, {}}, long_job, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find("pending job name of 300 bytes, above the limit of 256"), std::string::npos)
      << refused.message;
  // Names: a delta round looks for the names its delta brings alone (the
  // session's were unique), and refuses one a node already holds, added or
  // renamed to.
  node clash = good.state.nodes[1];
  clash.name = good.state.nodes[0].name;
  std::string const twice = "two nodes are named '" + good.state.nodes[0].name + "'";
  refused = c.solve_delta({3, 4, {clash}, {}, {}}, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find(twice), std::string::npos) << refused.message;
  refused = c.solve_delta({3, 4, {}, {}, {{1, clash}}}, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find(twice), std::string::npos) << refused.message;
  node other = good.state.nodes[2];
  other.name = "brought-twice";
  refused = c.solve_delta({3, 4, {other, other}, {}, {}}, jobs_only);
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find("two nodes are named 'brought-twice'"), std::string::npos) << refused.message;
  auto const rep = c.solve_delta({3, 4, {}, {}, {{0, fine}}}, jobs_only);
  EXPECT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  // A name a delta frees (node 0 renamed) may come back on an added node.
  node renamed = fine;
  renamed.name = "renamed";
  node back = good.state.nodes[1];
  back.name = good.state.nodes[0].name;
  auto const moved = c.solve_delta({4, 5, {back}, {}, {{0, renamed}}}, jobs_only);
  EXPECT_EQ(moved.code, ErrorCode::Ok) << moved.message;
  EXPECT_EQ(c.resyncs(), 0U);
}

TEST(Service, TheServersTimeBudgetCutsALongRound) {
  // The 10k scenario (1,250 nodes, 1,000 pending jobs) takes milliseconds
  // on any machine: under a 1 ms budget the round answers Ok with what it
  // placed and DeadlineExceeded for the rest; the same round without a
  // budget places them. Judged by the outcome, not by a clock.
  round_input const in = traces::make_scenario(traces::scenario_preset("10k"));
  auto deadline_exceeded = [](decoded_reply const& rep) {
    return std::count_if(rep.result.unplaced_jobs.begin(), rep.result.unplaced_jobs.end(),
                         [](unplaced const& u) { return u.reason == unplaced_reason::deadline_exceeded; });
  };
  // With the cross-round policies on, the budget covers the whole round,
  // every sub-problem they solve included (before, those ran without one).
  round_input const with_policies = [&] {
    round_input r = in;
    r.pol.queue.preemption = true;
    r.pol.queue.backfill = backfill_mode::easy;
    r.pol.queue.elastic = true;
    return r;
  }();
  for (auto const* round : {&in, &with_policies}) {
  for (std::int64_t budget_ms : {1, 0}) {
    SCOPED_TRACE(std::string(round == &in ? "one round" : "cross-round policies") + ", budget " +
                 std::to_string(budget_ms) + " ms");
    service::service_config cfg;
    cfg.endpoint = "tcp://127.0.0.1:*";
    cfg.max_round_ms = budget_ms;
    running_server s(cfg);
    client c({s.endpoint(), 30000, "budget"});
    auto const rep = c.solve(*round);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
    expect_round_invariants(in, rep.result);
    if (budget_ms > 0) {
      EXPECT_GT(deadline_exceeded(rep), 0);
    } else {
      EXPECT_EQ(deadline_exceeded(rep), 0);
      EXPECT_GT(rep.result.placements.size(), 500U);
    }
  }
  }
}

TEST(Service, SessionsBeyondTheByteBudgetGoLeastRecentlyUsedFirst) {
  round_input in = demo_round();
  in.state.epoch = 1;
  // What one session of this round holds on a server (the cluster and
  // jobs as decoded), then a server with room for three and a half.
  std::size_t one = 0;
  {
    running_server probe;
    client c({probe.endpoint(), 5000, "probe"});
    ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
    one = probe.get().stats().session_bytes;
  }
  ASSERT_GT(one, 1000U);
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.max_session_bytes = 3 * one + one / 2;
  running_server s(cfg);
  std::vector<std::unique_ptr<client>> clients;
  for (int k = 0; k < 4; ++k) {
    clients.push_back(std::make_unique<client>(client_options{s.endpoint(), 5000, "lru-" + std::to_string(k)}));
  }
  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto delta = [&](int k) {
    auto& c = *clients[static_cast<std::size_t>(k)];
    auto const epoch = c.last_round()->state.epoch;
    auto const rep = c.solve_delta({epoch, epoch + 1, {}, {}, {}}, jobs_only);
    EXPECT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  };
  // Sessions 0, 1, 2; then 0 is used again, so 1 is the least recently
  // used when session 3 arrives.
  for (int k = 0; k < 3; ++k) ASSERT_EQ(clients[static_cast<std::size_t>(k)]->solve(in).code, ErrorCode::Ok);
  delta(0);
  ASSERT_EQ(clients[3]->solve(in).code, ErrorCode::Ok);
  EXPECT_EQ(s.get().stats().sessions_evicted, 1U);
  // Session 1 was evicted: its delta comes back StaleEpoch and the client
  // resyncs (evicting the least recently used again, session 2); 0 and 3
  // are still held.
  for (int k : {0, 3, 1}) delta(k);
  EXPECT_EQ(clients[0]->resyncs(), 0U);
  EXPECT_EQ(clients[3]->resyncs(), 0U);
  EXPECT_EQ(clients[1]->resyncs(), 1U);
  EXPECT_EQ(s.get().stats().sessions_evicted, 2U);
  delta(2);
  EXPECT_EQ(clients[2]->resyncs(), 1U);
}

TEST(Log, PeersTextCannotSplitOrForgeALine) {
  // A job name that would end the log line and start a forged one.
  EXPECT_EQ(service::printable("job\n2026-11-25T00:00:00.000Z placer INFO all good\x1b[0m\\", 100),
            "job\\x0a2026-11-25T00:00:00.000Z placer INFO all good\\x1b[0m\\x5c");
  EXPECT_EQ(service::printable(std::string(10, 'a'), 4), "aaaa... (6 bytes more)");
  EXPECT_EQ(service::printable("plain text", 100), "plain text");
  EXPECT_EQ(service::json_escaped("a\"b\\c\nd\xff", 100), "a\\\"b\\\\c\\u000ad\\u00ff");
}

TEST(Log, AnEventIsOneLineWithItsFieldsInTextAndJson) {
  // A session id that would close the field, end the line and forge one.
  std::string const hostile = "s\" x=1\n{\"msg\":\"forged\"}";
  for (auto format : {service::log_format::text, service::log_format::json}) {
    service::set_log_format(format);
    ::testing::internal::CaptureStderr();
    service::log_info("round", {{"request_id", "7"}, {"session", hostile}});
    std::string const out = ::testing::internal::GetCapturedStderr();
    service::set_log_format(service::log_format::text);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    if (format == service::log_format::text) {
      EXPECT_NE(out.find(" placer info round request_id=7 session=\"s\\x22 x=1\\x0a{\\x22msg"), std::string::npos)
          << out;
    } else {
      EXPECT_EQ(out.front(), '{') << out;
      EXPECT_NE(out.find(R"("msg":"round","request_id":"7","session":"s\" x=1\u000a{\"msg\":\"forged\"}"})"),
                std::string::npos)
          << out;
    }
  }
}

TEST(Service, NanAndOutOfRangeFloatsAreRefused) {
  running_server s;
  client c({s.endpoint(), 5000, "floats"});
  round_input in = demo_round();
  in.pol.queue.sensitivity_threshold = std::numeric_limits<float>::quiet_NaN();
  auto rep = c.solve(in);
  EXPECT_EQ(rep.code, ErrorCode::InvalidArgument);
  EXPECT_NE(rep.message.find("sensitivity_threshold"), std::string::npos) << rep.message;
  in = demo_round();
  in.pending.front().network_sensitivity = std::numeric_limits<float>::infinity();
  rep = c.solve(in);
  EXPECT_EQ(rep.code, ErrorCode::InvalidArgument);
  EXPECT_NE(rep.message.find("network_sensitivity"), std::string::npos) << rep.message;
  EXPECT_EQ(c.solve(demo_round()).code, ErrorCode::Ok);
}

/// A directory under the test's temporary directory, emptied first.
std::string fresh_dir(std::string const& name) {
  auto const dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(Curve, CertificatesRoundTripInZeroMQsFormat) {
  auto const dir = fresh_dir("placer-certs");
  auto const k = service::curve_generate();
  service::write_certificates(dir + "/a.key", k);
  auto const secret = service::read_certificate(dir + "/a.key_secret");
  EXPECT_EQ(secret.public_key, k.public_key);
  EXPECT_EQ(secret.secret_key, k.secret_key);
  auto const pub = service::read_certificate(dir + "/a.key");
  EXPECT_EQ(pub.public_key, k.public_key);
  EXPECT_TRUE(pub.secret_key.empty());
  EXPECT_EQ(std::filesystem::status(dir + "/a.key_secret").permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::none);
  EXPECT_EQ(service::read_allowed_keys(dir), std::vector<std::string>{k.public_key});
  std::ofstream(dir + "/b.key") << "curve\n    public-key = \"too short\"\n";
  EXPECT_THROW(service::read_allowed_keys(dir), std::runtime_error);
  EXPECT_THROW(service::read_certificate(dir + "/missing.key"), std::runtime_error);
  EXPECT_TRUE(service::loopback_endpoint("tcp://127.0.0.1:5555"));
  EXPECT_TRUE(service::loopback_endpoint("tcp://localhost:*"));
  EXPECT_TRUE(service::loopback_endpoint("tcp://[::1]:5555"));
  EXPECT_TRUE(service::loopback_endpoint("ipc:///tmp/placer.sock"));
  EXPECT_FALSE(service::loopback_endpoint("tcp://0.0.0.0:5555"));
  EXPECT_FALSE(service::loopback_endpoint("tcp://*:5555"));
  EXPECT_FALSE(service::loopback_endpoint("tcp://10.0.0.7:5555"));
}

TEST(Curve, AnOpenEndpointNeedsKeysOrInsecure) {
  service::service_config cfg;
  cfg.endpoint = "tcp://0.0.0.0:*";
  cfg.backend = "cpu";
  try {
    service::server refused(cfg);
    ADD_FAILURE() << "bound " << cfg.endpoint << " without authentication";
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), error_code::failed_precondition);
    EXPECT_NE(std::string(e.what()).find("--curve-secret"), std::string::npos) << e.what();
  }
  cfg.insecure = true;
  EXPECT_NO_THROW(service::server{cfg});
}

TEST(Curve, OnlyListedKeysGetInAndSessionsFollowTheKey) {
  auto const keys = fresh_dir("placer-curve-server");
  auto const allowed = fresh_dir("placer-curve-allowed");
  auto const others = fresh_dir("placer-curve-others");
  auto const server_keys = service::curve_generate();
  service::write_certificates(keys + "/server.key", server_keys);
  auto const alice = service::curve_generate();
  service::write_certificates(allowed + "/alice.key", alice);
  service::write_certificates(others + "/mallory.key", service::curve_generate());
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.curve_secret_file = keys + "/server.key_secret";
  cfg.allow_keys_dir = allowed;
  running_server s(cfg);
  auto options = [&](service::curve_keypair const& own, int timeout_ms) {
    client_options o;
    o.endpoint = s.endpoint();
    o.timeout_ms = timeout_ms;
    o.session = "curved";
    o.server_key = server_keys.public_key;
    o.keys = own;
    return o;
  };
  round_input in = demo_round();
  in.state.epoch = 20;
  {
    client a(options(alice, 5000));
    expect_good_round(a, in);
  }
  // Alice again on a new connection: her session is her key's, so a delta
  // against it is solved without a resync (a new connection without keys
  // would start afresh).
  {
    client again(options(alice, 5000));
    round_input jobs_only;
    jobs_only.pending = in.pending;
    cluster_delta const d{20, 21, {}, {}, {}};
    flatbuffers::FlatBufferBuilder fbb;
    service::encode_request(fbb, {9, "curved", 0}, jobs_only, &d);
    auto const rep = decode(again.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), 9));
    EXPECT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  }
  // A key the server does not list, and no key at all: never answered.
  client mallory(options(service::read_certificate(others + "/mallory.key_secret"), 300));
  EXPECT_THROW(mallory.solve(in), client_error);
  client plain({s.endpoint(), 300, "curved"});
  EXPECT_THROW(plain.solve(in), client_error);
  EXPECT_GE(s.get().stats().handshakes_denied, 1U);
  EXPECT_EQ(s.get().stats().rounds_ok, 2U);
}

template <class Job>
std::vector<std::string> names(std::vector<Job> const& v) {
  std::vector<std::string> out;
  for (auto const& j : v) out.push_back(j.name);
  return out;
}

job random_job(std::mt19937_64& rng, std::string name) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  job j;
  j.name = std::move(name);
  j.priority = pick(0, 3);
  j.per_replica = {pick(0, 4), 1000, pick(0, 8) * 1000, pick(0, 16) * 1024};
  if (j.per_replica.gpus == 1 && pick(0, 1) == 0) j.per_replica.gpu_milli = pick(1, 9) * 100;
  j.replicas = pick(1, 3);
  j.gang = j.replicas > 1 && pick(0, 1) == 0;
  return j;
}

/// A running job's resources taken from (sign -1) or given back to (+1)
/// the node `nd`, its replica's node.
void hold(node& nd, running_job const& r, int sign) {
  for (auto g : r.replicas.front().gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] += sign * 1000;
  nd.cpu_milli_free += sign * r.per_replica.cpu_milli;
  nd.memory_mib_free += sign * r.per_replica.memory_mib;
}

/// One replica on node `n`: a whole free GPU of it, or none on a node
/// without one; its resources taken from `nd` (the node as the step leaves
/// it). Preemptible or not, checkpointed a while ago: the preemption policy
/// weighs it against the pending jobs. Nothing when the node has no room.
std::optional<running_job> random_running(std::mt19937_64& rng, std::string name, std::int32_t n, node& nd,
                                          std::int64_t now) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto const free_gpu = std::find(nd.gpu_free_milli.begin(), nd.gpu_free_milli.end(), 1000);
  if ((nd.gpu_count() > 0 && free_gpu == nd.gpu_free_milli.end()) || nd.cpu_milli_free < 1000 ||
      nd.memory_mib_free < 1024) {
    return std::nullopt;
  }
  running_job r;
  r.name = std::move(name);
  r.priority = pick(0, 2);
  r.preemptible = pick(0, 2) != 0;
  r.per_replica = {nd.gpu_count() > 0 ? 1 : 0, 1000, 1000, 1024};
  std::vector<std::int32_t> gpus;
  if (nd.gpu_count() > 0) gpus.push_back(static_cast<std::int32_t>(free_gpu - nd.gpu_free_milli.begin()));
  r.replicas = {{n, gpus, 1000}};
  r.start_time = now - pick(100, 5000);
  r.last_checkpoint = now - pick(0, 100);
  r.estimated_end = now + pick(0, 3000);
  hold(nd, r, -1);
  return r;
}

/// A random step of a session, as a cluster manager sees one: pending jobs
/// leave and arrive (now and then one that leaves comes back changed);
/// running jobs finish, giving their nodes' resources back, and start,
/// taking them; GPUs that none of them holds change hands outside. The
/// lists stay between a few and a few dozen jobs; `serial` names new jobs.
std::pair<cluster_delta, job_delta> random_step(std::mt19937_64& rng, round_input const& ref, int& serial) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::map<std::int32_t, node> touched;  // the nodes this step changes
  auto at = [&](std::int32_t n) -> node& {
    return touched.try_emplace(n, ref.state.nodes[static_cast<std::size_t>(n)]).first->second;
  };
  auto some_node = [&] { return pick(0, static_cast<int>(ref.state.nodes.size()) - 1); };
  job_delta jd;
  auto leave = [&](auto const& list, int most, std::vector<std::string>& gone) {
    std::vector<std::size_t> order(list.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    int const n = list.size() < 4 ? 0 : pick(0, most);
    for (int k = 0; k < n; ++k) gone.push_back(list[order[static_cast<std::size_t>(k)]].name);
  };
  leave(ref.pending, 3, jd.removed);
  for (int k = ref.pending.size() > 40 ? 0 : pick(0, 3); k > 0; --k) {
    jd.added.push_back(random_job(rng, "new-" + std::to_string(serial++)));
  }
  if (!jd.removed.empty() && pick(0, 4) == 0) jd.added.push_back(random_job(rng, jd.removed.front()));
  leave(ref.running, 2, jd.finished);
  for (auto const& r : ref.running) {
    if (std::find(jd.finished.begin(), jd.finished.end(), r.name) != jd.finished.end()) {
      hold(at(r.replicas.front().node), r, +1);
    }
  }
  for (int k = ref.running.size() > 15 ? 0 : pick(0, 2); k > 0; --k) {
    auto const n = some_node();
    if (auto r = random_running(rng, "run-" + std::to_string(serial++), n, at(n), ref.now)) jd.started.push_back(*r);
  }
  for (int k = pick(0, 2); k > 0; --k) {
    auto const n = some_node();
    node& nd = at(n);
    if (nd.gpu_count() == 0) continue;
    auto const g = pick(0, nd.gpu_count() - 1);
    auto holds = [&](running_job const& r) {
      return r.replicas.front().node == n && r.replicas.front().gpus == std::vector<std::int32_t>{g};
    };
    if (std::any_of(ref.running.begin(), ref.running.end(), holds) ||
        std::any_of(jd.started.begin(), jd.started.end(), holds)) {
      continue;  // ours (even if it finishes now: its GPU is free again)
    }
    nd.gpu_free_milli[static_cast<std::size_t>(g)] = pick(0, 10) * 100;
  }
  cluster_delta d{ref.state.epoch, ref.state.epoch + 1, {}, {}, {}};
  for (auto& [n, nd] : touched) d.changed.push_back({n, std::move(nd)});
  return {std::move(d), std::move(jd)};
}

/// `ref` moved by a step by hand, from scratch: nodes overwritten, jobs
/// erased by name and appended.
void apply_by_hand(round_input& ref, cluster_delta const& d, job_delta const& jd) {
  for (auto const& u : d.changed) ref.state.nodes[static_cast<std::size_t>(u.index)] = u.value;
  ref.state.epoch = d.new_epoch;
  auto erase = [](auto& list, std::string const& name) {
    auto const it = std::find_if(list.begin(), list.end(), [&](auto const& j) { return j.name == name; });
    ASSERT_NE(it, list.end()) << name;
    list.erase(it);
  };
  for (auto const& n : jd.removed) erase(ref.pending, n);
  ref.pending.insert(ref.pending.end(), jd.added.begin(), jd.added.end());
  for (auto const& n : jd.finished) erase(ref.running, n);
  ref.running.insert(ref.running.end(), jd.started.begin(), jd.started.end());
}

/// A restart on the same endpoint, then a health check until the client
/// reaches the new server. Without it the next round raced libzmq: sent
/// before its I/O thread saw the old connection close, it was lost with
/// that connection (loaded `make test` runs: "connection was refused or
/// dropped with the request in flight"), and a lost round is the caller's
/// to send again (client_options::retries, 0 in these tests). The I/O
/// thread answers a health check without a worker or a session, so the next
/// round still meets a server that does not know the session.
void restart_reached(std::unique_ptr<running_server>& s, std::string const& endpoint, client& c) {
  s.reset();
  s = std::make_unique<running_server>(service::default_max_message_bytes, endpoint);
  for (int attempt = 0;; ++attempt) {
    try {
      (void)c.health();
      return;
    } catch (client_error const&) {
      ASSERT_LT(attempt, 50) << "the restarted server never answered";
    }
  }
}

TEST(Service, ClientResyncsAfterServerRestartAndSurvivesThousandsOfDeltas) {
  // 2,000 random steps of cluster and jobs, most as cluster + job deltas,
  // one in eight as a cluster delta with the jobs in full. Every reply is
  // the round a from-scratch reference (the same steps done by hand) gives
  // when solved in process, with preemption on so that the running jobs
  // count too. Half-way the server restarts and loses the session: the
  // client resends the whole updated state, jobs included, by itself.
  auto s = std::make_unique<running_server>();
  std::string const endpoint = s->endpoint();
  client c({endpoint, 5000, "session-r"});
  std::mt19937_64 rng(17);
  round_input ref = demo_round();  // moved by hand, step by step
  ref.state.epoch = 1;
  ref.now = 10000;
  ref.pol.queue.preemption = true;
  int serial = 0;
  for (std::int32_t n = 0; n < 8 && n < static_cast<std::int32_t>(ref.state.nodes.size()); ++n) {
    auto r = random_running(rng, "run-" + std::to_string(serial++), n, ref.state.nodes[static_cast<std::size_t>(n)],
                            ref.now);
    if (r) ref.running.push_back(*r);
  }
  ASSERT_EQ(c.solve(ref).code, ErrorCode::Ok);
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  int full_lists = 0;
  std::size_t preempted = 0, replaced = 0;
  for (int step = 0; step < 2000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    auto const [d, jd] = random_step(rng, ref, serial);
    auto const& removed = jd.removed;  // (clang: a lambda may not capture a structured binding)
    replaced += std::count_if(jd.added.begin(), jd.added.end(), [&](job const& j) {
      return std::find(removed.begin(), removed.end(), j.name) != removed.end();
    });
    apply_by_hand(ref, d, jd);
    if (step == 1000) restart_reached(s, endpoint, c);
    bool const in_full = step % 8 == 3;
    full_lists += in_full ? 1 : 0;
    auto const rep = in_full ? c.solve_delta(d, ref) : c.solve_delta(d, jd, ref);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
    ASSERT_EQ(rep.result.epoch, ref.state.epoch);
    ASSERT_EQ(c.resyncs(), step < 1000 ? 0U : 1U);
    ASSERT_NE(c.last_round(), nullptr);
    ASSERT_EQ(names(c.last_round()->pending), names(ref.pending));
    ASSERT_EQ(names(c.last_round()->running), names(ref.running));
    ASSERT_EQ(difference(rep, local.solve(ref)), "");
    preempted += rep.result.preemptions.size();
  }
  EXPECT_EQ(full_lists, 250);
  EXPECT_GT(serial, 2000);
  EXPECT_GT(replaced, 100U);
  EXPECT_GT(preempted, 100U) << "the running jobs must weigh in the rounds";
}

TEST(Service, HealthProbeReportsBackendAndCounters) {
  // Two workers: the probe is the I/O thread's to answer.
  running_server s(service::default_max_message_bytes, "tcp://127.0.0.1:*", 2);
  client c({s.endpoint(), 5000, "session-health"});
  auto const before = c.health();
  EXPECT_EQ(before.backend, s.get().backend_description());
  EXPECT_EQ(before.workers, 2U);
  EXPECT_EQ(before.requests, 0U) << "probes are not counted as requests";
  round_input in = demo_round();
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  in.pending[0].per_replica.cpu_milli = -5;
  EXPECT_EQ(c.solve(in).code, ErrorCode::InvalidArgument);
  auto const after = c.health();
  EXPECT_EQ(after.requests, 2U);
  EXPECT_EQ(after.rounds_ok, 1U);
  EXPECT_EQ(after.errors, 1U);
  EXPECT_GE(after.uptime_s, before.uptime_s);
}

/// Holds a worker on every round until opened (service_config::on_solve),
/// and records the request ids in the order the worker took them.
class gate {
 public:
  void operator()(std::uint64_t id) {
    std::unique_lock lock(m_);
    taken_.push_back(id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  /// Waits (10 s at most) until the worker has taken `n` rounds.
  bool taken(std::size_t n) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return taken_.size() >= n; });
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  std::vector<std::uint64_t> order() {
    std::lock_guard lock(m_);
    return taken_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::uint64_t> taken_;
};

/// A loopback server's configuration whose worker waits at `g` before
/// every round.
service::service_config held_at(gate& g) {
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.on_solve = [&g](std::uint64_t id) { g(id); };
  return cfg;
}

/// A peer of its own (a DEALER, so its own routing identity) that sends
/// rounds without waiting for their answers.
class raw_peer {
 public:
  raw_peer(zmq::context_t& ctx, std::string const& endpoint) : sock_(ctx, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::rcvtimeo, 10000);
    sock_.connect(endpoint);
  }
  void send(std::uint64_t id, std::uint64_t deadline_us = 0) {
    round_input in = demo_round();
    in.deadline_us = deadline_us;
    auto const bytes = encode(in, id);
    sock_.send(zmq::buffer(bytes));
  }
  decoded_reply receive() {
    zmq::message_t m;
    if (!sock_.recv(m)) return {};
    auto const* p = static_cast<std::uint8_t const*>(m.data());
    return decode(std::vector<std::uint8_t>(p, p + m.size()));
  }
  void close() { sock_.close(); }

 private:
  zmq::socket_t sock_;
};

/// Probes until `done(health)` holds (10 s at most).
template <class Done>
service::health_status probe_until(client& c, Done done) {
  auto h = c.health();
  for (int k = 0; k < 500 && !done(h); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    h = c.health();
  }
  return h;
}

TEST(Service, ProbesAnswerWhileTheWorkerIsBusyAndSayWhenItIsStuck) {
  // Before, one worker solved on the I/O thread: a probe during a long
  // round went unanswered (25 of 25 failed). Now the I/O thread answers,
  // says the worker is busy, and flips to not ready past the threshold.
  gate g;
  service::service_config cfg = held_at(g);
  cfg.stuck_after_ms = 50;
  running_server s(cfg);
  client probe({s.endpoint(), 5000, ""});
  zmq::context_t ctx;
  raw_peer a(ctx, s.endpoint());
  a.send(1);
  ASSERT_TRUE(g.taken(1));
  auto const busy = probe.health();
  ASSERT_EQ(busy.worker_states.size(), 1U);
  EXPECT_TRUE(busy.worker_states[0].busy);
  EXPECT_EQ(busy.worker_states[0].rounds, 0U);
  auto const stuck = probe_until(probe, [](auto const& h) { return !h.ready; });
  EXPECT_FALSE(stuck.ready);
  EXPECT_NE(stuck.not_ready.find("worker 0 has been on one round"), std::string::npos) << stuck.not_ready;
  EXPECT_GT(stuck.worker_states[0].busy_ms, 50.0);
  g.open();
  EXPECT_EQ(a.receive().code, ErrorCode::Ok);
  auto const after = probe_until(probe, [](auto const& h) { return h.ready; });
  EXPECT_TRUE(after.ready) << after.not_ready;
  EXPECT_FALSE(after.worker_states[0].busy);
  EXPECT_EQ(after.worker_states[0].rounds, 1U);
}

TEST(Service, PeersTakeTurnsAndEachHasABoundedQueue) {
  gate g;
  service::service_config cfg = held_at(g);
  cfg.queue.peer_rounds = 3;
  running_server s(cfg);
  client probe({s.endpoint(), 5000, ""});
  zmq::context_t ctx;
  raw_peer p(ctx, s.endpoint()), x(ctx, s.endpoint()), y(ctx, s.endpoint());
  p.send(100);
  ASSERT_TRUE(g.taken(1));  // the worker is held on p's round
  for (std::uint64_t id : {1, 2, 3, 4}) x.send(id);
  // x's fourth is one past its three waiting rounds: refused at once, with
  // a hint, while the worker is still held.
  auto const refused = x.receive();
  EXPECT_EQ(refused.header.request_id, 4U);
  EXPECT_EQ(refused.code, ErrorCode::ResourceExhausted);
  EXPECT_GT(refused.retry_after_ms, 0U);
  EXPECT_NE(refused.message.find("3 rounds waiting"), std::string::npos) << refused.message;
  y.send(11);
  auto const queued = probe_until(probe, [](auto const& h) { return h.queued_rounds == 4; });
  ASSERT_EQ(queued.queued_rounds, 4U);
  EXPECT_EQ(queued.worker_states[0].queued, 4U);
  EXPECT_GT(queued.queued_bytes, 0U);
  EXPECT_EQ(queued.refused_busy, 1U);
  g.open();
  for (std::uint64_t id : {1, 2, 3}) {
    auto const rep = x.receive();
    EXPECT_EQ(rep.header.request_id, id);
    EXPECT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  }
  EXPECT_EQ(y.receive().code, ErrorCode::Ok);
  EXPECT_EQ(p.receive().code, ErrorCode::Ok);
  // y's one round waited one turn of x's, not three.
  EXPECT_EQ(g.order(), (std::vector<std::uint64_t>{100, 1, 11, 2, 3}));
}

TEST(Service, RoundsWhosePeerLeftOrWhoseDeadlinePassedAreNotSolved) {
  // Before, 50 rounds from disconnected clients were all solved, for nobody.
  gate g;
  running_server s(held_at(g));
  client probe({s.endpoint(), 5000, ""});
  zmq::context_t ctx;
  raw_peer p(ctx, s.endpoint()), gone(ctx, s.endpoint()), late(ctx, s.endpoint());
  p.send(100);
  ASSERT_TRUE(g.taken(1));
  for (std::uint64_t id : {7, 8, 9}) gone.send(id);
  late.send(20, 1000);  // 1 ms to answer in
  ASSERT_EQ(probe_until(probe, [](auto const& h) { return h.queued_rounds == 4; }).queued_rounds, 4U);
  gone.close();
  auto const dropped = probe_until(probe, [](auto const& h) { return h.dropped_disconnected == 3; });
  EXPECT_EQ(dropped.dropped_disconnected, 3U);
  EXPECT_EQ(dropped.queued_rounds, 1U) << "the gone peer's rounds leave the queue when it goes";
  // late's round arrived before the probe saw it queued, so after this sleep
  // it has waited past its 1 ms whatever the machine's speed (without it, a
  // fast machine dispatched it within the millisecond and solved it).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  g.open();
  EXPECT_EQ(p.receive().code, ErrorCode::Ok);
  auto const expired = late.receive();
  EXPECT_EQ(expired.header.request_id, 20U);
  EXPECT_EQ(expired.code, ErrorCode::DeadlineExceeded);
  EXPECT_NE(expired.message.find("not solved"), std::string::npos) << expired.message;
  EXPECT_EQ(g.order(), std::vector<std::uint64_t>{100}) << "only the round with someone to answer was solved";
  auto const h = probe.health();
  EXPECT_EQ(h.dropped_expired, 1U);
  EXPECT_EQ(h.queued_rounds, 0U);
}

/// A sample's value in a Prometheus text scrape (-1 when absent).
double sample(std::string const& text, std::string const& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(Service, MetricsAndProbesOverHttpFollowTheRounds) {
  // A real HTTP client against `--http`: the counters move with the rounds
  // sent, and /readyz turns 503 while the one worker is stuck, /livez stays
  // 200 (the I/O thread answers), both from the probe `placer health` uses.
  gate g;
  std::atomic<bool> hold{false};
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.http = "127.0.0.1:0";
  cfg.stuck_after_ms = 50;
  cfg.on_solve = [&](std::uint64_t id) {
    if (hold.load()) g(id);
  };
  running_server s(cfg);
  ASSERT_FALSE(s.get().http_address().empty());
  httplib::Client web("http://" + s.get().http_address());
  web.set_read_timeout(10, 0);
  auto get = [&](char const* path) {
    auto res = web.Get(path);
    EXPECT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
  };
  auto const before = get("/metrics");
  ASSERT_EQ(before.first, 200);
  EXPECT_EQ(sample(before.second, "placer_up"), 1);
  EXPECT_EQ(sample(before.second, "placer_ready"), 1);
  EXPECT_EQ(sample(before.second, "placer_rounds_total{code=\"Ok\"}"), -1) << "no round yet";

  client c({s.endpoint(), 5000, "metrics"});
  round_input in = demo_round();
  auto const ok = c.solve(in);
  ASSERT_EQ(ok.code, ErrorCode::Ok);
  in.pending[0].per_replica.cpu_milli = -5;
  ASSERT_EQ(c.solve(in).code, ErrorCode::InvalidArgument);
  std::size_t replicas = 0;
  for (auto const& p : ok.result.placements) replicas += p.replicas.size();

  auto const after = get("/metrics");
  EXPECT_EQ(sample(after.second, "placer_rounds_total{code=\"Ok\"}"), 1);
  EXPECT_EQ(sample(after.second, "placer_rounds_total{code=\"InvalidArgument\"}"), 1);
  EXPECT_EQ(sample(after.second, "placer_round_duration_seconds_count"), 1);
  EXPECT_EQ(sample(after.second, "placer_stage_duration_seconds_count{stage=\"assign\"}"), 1);
  EXPECT_EQ(sample(after.second, "placer_replicas_placed_total"), static_cast<double>(replicas));
  EXPECT_EQ(sample(after.second, "placer_requests_total"), 2);
  EXPECT_EQ(sample(after.second, "placer_sessions"), 1);
  EXPECT_GT(sample(after.second, "placer_session_bytes"), 0);
  EXPECT_NEAR(sample(after.second, "placer_cluster_gpu_allocation_ratio{session=\"metrics\"}"),
              ok.result.metrics.gar_after, 1e-9);
  EXPECT_EQ(sample(after.second, "placer_worker_state{state=\"idle\",worker=\"0\"}"), 1);
  EXPECT_EQ(get("/livez").first, 200);
  EXPECT_EQ(get("/readyz").first, 200);

  hold = true;
  zmq::context_t ctx;
  raw_peer a(ctx, s.endpoint());
  a.send(9);
  ASSERT_TRUE(g.taken(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the 50 ms threshold
  auto const stuck = get("/readyz");
  EXPECT_EQ(stuck.first, 503);
  EXPECT_NE(stuck.second.find("worker 0 has been on one round"), std::string::npos) << stuck.second;
  EXPECT_EQ(get("/livez").first, 200) << "the I/O thread still answers";
  EXPECT_EQ(sample(get("/metrics").second, "placer_worker_state{state=\"stuck\",worker=\"0\"}"), 1);
  g.open();
  EXPECT_EQ(a.receive().code, ErrorCode::Ok);
  EXPECT_EQ(get("/readyz").first, 200);
  EXPECT_EQ(get("/nothing-here").first, 404);
}

/// A TCP connection to "host:port", blocking; -1 when refused.
int tcp_connect(std::string const& address) {
  auto const colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int const fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

/// What the peer of fd sends until it closes, or until `within` passes
/// (then `closed` is false).
std::string read_until_closed(int fd, std::chrono::milliseconds within, bool& closed) {
  std::string got;
  auto const end = std::chrono::steady_clock::now() + within;
  closed = false;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    auto const n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

TEST(Service, HttpProbesAnswerPastIdleAndSlowPeers) {
  // The kubelet's probes come over the pod's network, where any peer may
  // be: idle connections, and slow ones that send a header line at a time,
  // more of them than the endpoint keeps (64), must not keep a probe out;
  // a slow head is cut at its deadline (2 s); a head past 4 KB is refused.
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.http = "127.0.0.1:0";
  running_server s(cfg);
  std::string const at = s.get().http_address();
  std::vector<int> idle, slow;
  for (int i = 0; i < 75; ++i) {
    idle.push_back(tcp_connect(at));
    slow.push_back(tcp_connect(at));
    ASSERT_GE(idle.back(), 0);
    ASSERT_GE(slow.back(), 0);
    ASSERT_GT(::send(slow.back(), "GET /livez HTTP/1.1\r\n", 21, MSG_NOSIGNAL), 0);
  }
  std::atomic<bool> done{false};
  std::thread feeder([&] {  // a header line from every slow peer every 100 ms
    while (!done) {
      for (int fd : slow) (void)::send(fd, "X-a: b\r\n", 8, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  httplib::Client web("http://" + at);
  web.set_connection_timeout(10, 0);
  web.set_read_timeout(10, 0);
  for (int k = 0; k < 5; ++k) {
    auto res = web.Get("/livez");
    ASSERT_TRUE(res) << "probe " << k << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "ok\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  done = true;
  feeder.join();
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);

  // One slow peer alone: cut at its head's deadline, answered nothing.
  int const late = tcp_connect(at);
  ASSERT_GE(late, 0);
  ASSERT_GT(::send(late, "GET /livez HTTP/1.1\r\n", 21, MSG_NOSIGNAL), 0);
  bool closed = false;
  EXPECT_EQ(read_until_closed(late, std::chrono::seconds(20), closed), "");
  EXPECT_TRUE(closed) << "a head that never ends keeps its connection";
  ::close(late);

  // A head past 4 KB: 431, then closed.
  int const big = tcp_connect(at);
  ASSERT_GE(big, 0);
  std::string const head = "GET /livez HTTP/1.1\r\nX-pad: " + std::string(5000, 'a');
  (void)::send(big, head.data(), head.size(), MSG_NOSIGNAL);
  auto const refused = read_until_closed(big, std::chrono::seconds(20), closed);
  EXPECT_EQ(refused.rfind("HTTP/1.1 431 ", 0), 0u) << refused;
  EXPECT_TRUE(closed);
  ::close(big);

  // HEAD answers without a body; other methods and paths are refused.
  auto const head_res = web.Head("/readyz");
  ASSERT_TRUE(head_res);
  EXPECT_EQ(head_res->status, 200);
  EXPECT_EQ(head_res->body, "");
  auto const post = web.Post("/livez", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  int const junk = tcp_connect(at);
  ASSERT_GE(junk, 0);
  (void)::send(junk, "hello\r\n\r\n", 9, MSG_NOSIGNAL);
  EXPECT_EQ(read_until_closed(junk, std::chrono::seconds(20), closed).rfind("HTTP/1.1 400 ", 0), 0u);
  ::close(junk);
  auto const live = web.Get("/livez?verbose=1");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200) << "the query string is not the path";
}

/// A CUDA backend's stand-in that fails like a device: the CPU backend's
/// stages, but the stage call that brings the shared countdown `fail_in`
/// from 1 to 0 throws device_fault, as an illegal address or an Xid
/// would (at 0 or below nothing fails; the test arms it when it wants).
/// With `slow`, every stage call first waits that long.
class faulty_backend final : public kernels::backend {
 public:
  explicit faulty_backend(std::atomic<int>& fail_in, std::chrono::milliseconds slow = {})
      : cpu_(kernels::make_backend(kernels::backend_kind::cpu)), fail_in_(fail_in), slow_(slow) {}
  [[nodiscard]] kernels::backend_kind kind() const override { return kernels::backend_kind::cuda; }
  [[nodiscard]] std::string const& description() const override { return description_; }
  void score(kernels::node_view const& n, kernels::class_view const& c, kernels::task_view const& t,
             kernels::score_params const& p, std::span<std::int32_t> out) override {
    call();
    cpu_->score(n, c, t, p, out);
  }
  kernels::cluster_stats stats(kernels::node_view const& n, kernels::task_view const& t) override {
    call();
    return cpu_->stats(n, t);
  }
  void domain_capacity(kernels::node_view const& n, kernels::class_view const& c, std::span<std::int32_t const> of,
                       kernels::domain_index_view const& idx, std::span<std::int64_t> cap) override {
    call();
    cpu_->domain_capacity(n, c, of, idx, cap);
  }
  void place_tiers(std::span<kernels::tier_problem const> tiers, kernels::tier_results& out) override {
    call();
    cpu_->place_tiers(tiers, out);
  }

 private:
  void call() {
    std::this_thread::sleep_for(slow_);
    if (fail_in_.load() > 0 && fail_in_.fetch_sub(1) == 1) throw kernels::device_fault("injected: illegal address");
  }
  std::unique_ptr<kernels::backend> cpu_;
  std::atomic<int>& fail_in_;
  std::chrono::milliseconds slow_;
  std::string description_ = "cuda (fault-injecting test double)";
};

TEST(BackendChoice, AutoTakesTheFasterBackendWhicheverComesFirst) {
  // --backend auto with a usable GPU serves with the faster of CUDA and the
  // CPU on a trial round (on the H100 the CPU's 16 cores were faster).
  // Here a stand-in 5 ms slower a stage call against the CPU backend.
  std::atomic<int> never{0};
  service::backend_maker const slow = [&] {
    return std::make_unique<faulty_backend>(never, std::chrono::milliseconds(5));
  };
  service::backend_maker const cpu = [] { return kernels::make_backend(kernels::backend_kind::cpu); };
  round_input const round = demo_round();
  std::vector<service::backend_trial> trials;
  EXPECT_EQ(service::fastest_backend(std::vector{slow, cpu}, round, 3, trials), 1U);
  ASSERT_EQ(trials.size(), 2U);
  EXPECT_EQ(trials[0].backend, "cuda (fault-injecting test double)");
  EXPECT_GE(trials[0].median_ms, 5.0);
  EXPECT_EQ(trials[1].backend.rfind("cpu", 0), 0U) << trials[1].backend;
  EXPECT_LT(trials[1].median_ms, trials[0].median_ms);
  EXPECT_EQ(service::fastest_backend(std::vector{cpu, slow}, round, 3, trials), 0U);
  EXPECT_EQ(trials[1].backend, "cuda (fault-injecting test double)");
  // A candidate that fails its trial says so.
  std::atomic<int> fail_first{1};
  service::backend_maker const broken = [&] { return std::make_unique<faulty_backend>(fail_first); };
  EXPECT_THROW(service::fastest_backend(std::vector{broken, cpu}, round, 3, trials), kernels::device_fault);
}

TEST(Service, ADeviceFaultIsAnsweredOnTheCpuAndHealthSaysDegraded) {
  // Before, a CUDA error became an Internal reply for this round and every
  // later one, while the probe said ok. Now the round is solved again on a
  // CPU backend and answered; the probe says degraded, with the fault; and
  // after the back-off the worker takes its configured backend back.
  std::atomic<int> made{0}, fail_in{0};
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.device_retry_s = 0.2;
  cfg.make_backend = [&](int) {
    made.fetch_add(1);
    return std::make_unique<faulty_backend>(fail_in);
  };
  running_server s(cfg);
  fail_in = 2;  // warmed up; the round's second stage call fails, mid-round
  client c({s.endpoint(), 5000, "fault"});
  EXPECT_EQ(c.health().worker_states.at(0).backend, "cuda (fault-injecting test double)");
  round_input in = demo_round();
  in.state.epoch = 3;
  auto const rep = c.solve(in);
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  EXPECT_EQ(rep.result.backend.rfind("cpu", 0), 0U) << rep.result.backend;
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  EXPECT_EQ(difference(rep, local.solve(in)), "") << "the round is answered as the CPU solves it, once";
  auto const h = c.health();
  EXPECT_TRUE(h.ready) << "it still serves";
  EXPECT_TRUE(h.degraded);
  EXPECT_EQ(h.device_faults, 1U);
  EXPECT_TRUE(h.worker_states.at(0).degraded);
  EXPECT_NE(h.worker_states[0].degraded_reason.find("injected: illegal address"), std::string::npos)
      << h.worker_states[0].degraded_reason;
  EXPECT_EQ(h.errors, 0U);
  EXPECT_EQ(h.rounds_ok, 1U);
  // The session survived: a delta on it is answered.
  node fine = in.state.nodes[0];
  fine.cpu_milli_free = 0;
  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto const next = c.solve_delta({3, 4, {}, {}, {{0, fine}}}, jobs_only);
  ASSERT_EQ(next.code, ErrorCode::Ok) << next.message;
  EXPECT_EQ(c.resyncs(), 0U);
  // After the back-off, the configured backend again.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  auto const back = c.solve_delta({4, 5, {}, {}, {}}, jobs_only);
  ASSERT_EQ(back.code, ErrorCode::Ok) << back.message;
  EXPECT_EQ(back.result.backend, "cuda (fault-injecting test double)");
  EXPECT_FALSE(c.health().degraded);
  EXPECT_EQ(made.load(), 2);
}

TEST(Service, TheOperatorCanSendADegradedWorkerBackToItsDevice) {
  std::atomic<int> fail_in{1};  // the warm-up's first stage call
  std::atomic<std::uint64_t> retry{0};
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.device_retry_s = 0;  // no back-off: only the operator
  cfg.device_retry_signal = &retry;
  cfg.make_backend = [&](int) { return std::make_unique<faulty_backend>(fail_in); };
  running_server s(cfg);
  client c({s.endpoint(), 5000, ""});
  round_input const in = demo_round();
  ASSERT_EQ(c.solve(in).result.backend.rfind("cpu", 0), 0U);
  EXPECT_TRUE(c.health().degraded);
  retry.fetch_add(1);  // SIGHUP in placer serve
  auto const back = c.solve(in);
  ASSERT_EQ(back.code, ErrorCode::Ok) << back.message;
  EXPECT_EQ(back.result.backend, "cuda (fault-injecting test double)");
  EXPECT_FALSE(c.health().degraded);
}

TEST(Service, ADeviceThatFailsItsWarmUpStartsTheWorkerOnTheCpu) {
  std::atomic<int> fail_in{1};  // the very first stage call, in the warm-up round
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.device_retry_s = 0;  // never back
  cfg.make_backend = [&](int) { return std::make_unique<faulty_backend>(fail_in); };
  running_server s(cfg);
  client c({s.endpoint(), 5000, ""});
  auto const h = c.health();
  EXPECT_TRUE(h.degraded);
  EXPECT_EQ(h.device_faults, 1U);
  EXPECT_EQ(h.worker_states.at(0).backend.rfind("cpu", 0), 0U) << h.worker_states[0].backend;
  auto const rep = c.solve(demo_round());
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  EXPECT_EQ(rep.result.backend.rfind("cpu", 0), 0U);
}

TEST(Service, DevicesNameGpusOnPurposeOrTheServerSaysWhyNot) {
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.devices = {0, 1};
  cfg.backend = "cpu";
  EXPECT_THROW(service::server{cfg}, logic_error) << "GPUs named with the CPU backend";
  cfg.backend = "auto";
  auto const why = kernels::cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a usable GPU is here: the error case needs a machine without one";
  try {
    service::server srv(cfg);
    ADD_FAILURE() << "a server with --devices started without a usable GPU";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string(e.what()).find("--devices: no usable GPU here: " + why), std::string::npos) << e.what();
  }
}

TEST(Service, AutoTrialNamesAScenarioOrTheServerSaysWhich) {
  // --auto-trial picks --backend auto's trial round by the size of the
  // rounds to come; a name that is no scenario fails at start, with or
  // without a GPU, listing the names it takes.
  service::service_config cfg;
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.backend = "auto";
  cfg.auto_trial = "10000k";
  try {
    service::server srv(cfg);
    ADD_FAILURE() << "a server started with an unknown trial scenario";
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("unknown scenario '10000k' (1k, 10k, 100k"), std::string::npos) << e.what();
  }
  cfg.backend = "cpu";  // not auto: the trial is not used, nor checked
  EXPECT_NO_THROW(service::server{cfg});
}

TEST(Service, ClientRetriesARoundLostWithAServerThatDied) {
  // A stand-in takes the round and goes away without answering, as a server
  // that dies mid-round; the real one comes back on the same endpoint. The
  // client's retry reaches it, the delta it resends is unknown there and
  // becomes a resync: one reply, to one round, as a local solve gives it.
  auto s = std::make_unique<running_server>();
  std::string const endpoint = s->endpoint();
  client_options opt{endpoint, 300, "session-retry"};
  opt.retries = 3;
  client c(opt);
  round_input in = demo_round();
  in.state.epoch = 1;
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  s.reset();
  bool swallowed = false;
  std::thread stand_in([&] {
    {
      zmq::context_t ctx;
      zmq::socket_t router(ctx, zmq::socket_type::router);
      router.set(zmq::sockopt::linger, 0);
      router.bind(endpoint);
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5000));
      zmq::message_t f;
      while ((item.revents & ZMQ_POLLIN) != 0 && router.recv(f, zmq::recv_flags::dontwait)) swallowed = true;
    }  // the context's end closes the listener before the real server binds
    s = std::make_unique<running_server>(service::default_max_message_bytes, endpoint);
  });
  round_input jobs_only;
  jobs_only.pending = in.pending;
  auto const rep = c.solve_delta({1, 2, {}, {}, {}}, jobs_only);
  stand_in.join();
  EXPECT_TRUE(swallowed) << "the stand-in should have taken the first attempt";
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  EXPECT_GE(c.retries(), 1U);
  EXPECT_EQ(c.resyncs(), 1U);
  EXPECT_EQ(rep.result.epoch, 2U);
  round_input want = in;
  want.state.epoch = 2;
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  EXPECT_EQ(difference(rep, local.solve(want)), "");
  // Without retries the same loss is the caller's: a client_error.
  client_options once{endpoint, 300, "session-once"};
  client plain(once);
  ASSERT_EQ(plain.solve(in).code, ErrorCode::Ok);
  s.reset();
  std::thread silent([&] {
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind(endpoint);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  });
  EXPECT_THROW(plain.solve(in), client_error);
  silent.join();
}

TEST(Service, SolveIncrementalWorksOutTheDeltasItself) {
  auto s = std::make_unique<running_server>();
  std::string const endpoint = s->endpoint();
  client c({endpoint, 5000, "session-incremental"});
  std::mt19937_64 rng(23);
  round_input in = testing_support::random_round(rng, 6, 40);
  in.state.epoch = 1;
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  auto expect_solved = [&](std::string const& what) {
    auto const rep = c.solve_incremental(in);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << what << ": " << rep.message;
    EXPECT_EQ(difference(rep, local.solve(in)), "") << what;
    ASSERT_NE(c.last_round(), nullptr);
    EXPECT_TRUE(c.last_round()->state.nodes == in.state.nodes) << what;
    EXPECT_TRUE(c.last_round()->pending == in.pending) << what;
  };
  expect_solved("first round (a full snapshot)");
  auto restart = [&] { restart_reached(s, endpoint, c); };
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  int fresh = 0;
  for (int k = 0; k < 300; ++k) {
    ++in.state.epoch;
    auto& nd = in.state.nodes[pick(in.state.nodes.size())];
    nd.cpu_milli_free = static_cast<std::int64_t>(pick(static_cast<std::size_t>(nd.cpu_milli_capacity) + 1));
    auto& p = in.pending;
    switch (k % 4) {
      case 0:  // the head of the queue was placed
        if (!p.empty()) p.erase(p.begin());
        break;
      case 1:  // a job moves to the back of the queue
        if (p.size() > 2) std::rotate(p.begin() + 1, p.begin() + 2, p.end());
        break;
      case 2:  // a job's fields change in place
        if (!p.empty()) p[pick(p.size())].priority += 1;
        break;
      default:  // new jobs arrive: copies of queued ones under new names
        for (int n = 0; n < 2; ++n) {
          job j = p.empty() ? job{} : p[pick(p.size())];
          j.name = "fresh-" + std::to_string(fresh++);
          p.push_back(j);
        }
    }
    if (k == 150) restart();  // the next delta is answered StaleEpoch
    expect_solved("round " + std::to_string(k));
  }
  // Exactly one resync, after the restart: the 300 rounds went out as deltas.
  EXPECT_EQ(c.resyncs(), 1U);
  // A repeated name goes out with the jobs in full, and the server refuses
  // it (job deltas and logs address jobs by name); the session keeps the
  // last round. A node fewer sends the whole cluster.
  if (!in.pending.empty()) {
    ++in.state.epoch;
    in.pending.push_back(in.pending.front());
    auto const rep = c.solve_incremental(in);
    EXPECT_EQ(rep.code, ErrorCode::InvalidArgument);
    EXPECT_NE(rep.message.find("two pending jobs are named '" + in.pending.front().name + "'"), std::string::npos)
        << rep.message;
    in.pending.pop_back();
  }
  ++in.state.epoch;
  in.state.nodes.pop_back();
  restart();
  expect_solved("a node fewer");
  EXPECT_EQ(c.resyncs(), 1U) << "a changed node count goes out as a full snapshot, not a delta";
}

TEST(Service, RejectedJobDeltaLeavesTheSessionAsItWas) {
  running_server s;
  client c({s.endpoint(), 5000, "session-jobs"});
  round_input in = demo_round();
  ASSERT_GE(in.pending.size(), 2U);
  in.state.epoch = 5;
  in.pol.queue.preemption = true;
  running_job r0;
  r0.name = "r0";
  r0.preemptible = true;
  r0.per_replica = {0, 1000, 1000, 1024};
  r0.replicas = {{0, {}, 1000}};
  running_job r1 = r0;
  r1.name = "r1";
  in.running = {r0, r1};
  in.state.nodes[0].cpu_milli_free -= 2 * r0.per_replica.cpu_milli;  // both run on node 0
  in.state.nodes[0].memory_mib_free -= 2 * r0.per_replica.memory_mib;
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  auto send_raw = [&](cluster_delta const& d, job_delta const& jd, std::uint64_t id) {
    flatbuffers::FlatBufferBuilder fbb;
    service::encode_request(fbb, {id, "session-jobs", 0, c.session_secret()}, in, &d, &jd);
    return decode(c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), id));
  };
  cluster_delta const step{5, 6, {}, {}, {}};
  node fine = in.state.nodes[0];
  fine.cpu_milli_free = 0;
  job fresh = in.pending[0];
  fresh.name = "fresh";
  auto expect_rejected = [&](cluster_delta const& d, job_delta const& jd, std::uint64_t id, std::string const& needle) {
    auto const rep = send_raw(d, jd, id);
    EXPECT_EQ(rep.code, ErrorCode::InvalidArgument) << rep.message;
    EXPECT_NE(rep.message.find(needle), std::string::npos) << rep.message;
  };
  // An unknown name, after a good node change and good job changes...
  expect_rejected({5, 6, {}, {}, {{0, fine}}}, {{fresh}, {in.pending[0].name, "no-such-job"}, {}, {"r0"}}, 301,
                  "removed[1] ('no-such-job') is not a pending job");
  // ...a name the session already holds, one named twice...
  expect_rejected(step, {{in.pending[1]}, {}, {}, {}}, 302, "('" + in.pending[1].name + "') is already a pending job");
  expect_rejected(step, {{}, {}, {}, {"r1", "r1"}}, 303, "finished[1] ('r1') is named twice");
  // ...and a good job delta in a round the validator rejects for the job it adds.
  job bad = fresh;
  bad.per_replica.cpu_milli = -5;
  expect_rejected(step, {{bad}, {in.pending[0].name}, {}, {"r1"}}, 304, "cpu_milli");
  // The client catches a bad one itself, without sending it.
  auto const requests = s.get().stats().requests;
  EXPECT_THROW(c.solve_delta(step, {{}, {"no-such-job"}, {}, {}}, in), logic_error);
  EXPECT_EQ(s.get().stats().requests, requests);

  // The session still holds what the snapshot sent, at epoch 5: a job delta
  // against it (that would fail had any of the above landed) gives the
  // round a local solve of the expected state gives, every job answered.
  auto const rep = c.solve_delta(step, {{fresh}, {in.pending[0].name}, {}, {"r0"}}, in);
  ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
  EXPECT_EQ(rep.result.epoch, 6U);
  EXPECT_EQ(c.resyncs(), 0U);
  round_input want = in;
  want.state.epoch = 6;
  want.pending.erase(want.pending.begin());
  want.pending.push_back(fresh);
  want.running = {r1};
  ASSERT_NE(c.last_round(), nullptr);
  EXPECT_EQ(names(c.last_round()->pending), names(want.pending));
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  EXPECT_EQ(difference(rep, local.solve(want)), "");
  EXPECT_EQ(rep.result.placements.size() + rep.result.unplaced_jobs.size(), want.pending.size());
}

TEST(Service, ConcurrentClientsOnSeveralWorkersGetConsistentRounds) {
  running_server s(service::default_max_message_bytes, "tcp://127.0.0.1:*", 3);
  constexpr int clients = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(clients);
  for (int k = 0; k < clients; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937_64 rng(100 + k);
      client c({s.endpoint(), 10000, "session-" + std::to_string(k)});
      round_input in = testing_support::random_round(rng);
      in.state.epoch = 1;
      solver local(kernels::make_backend(kernels::backend_kind::cpu));
      for (int r = 0; r < 30 && failures[k].empty(); ++r) {
        // Each client moves its own cluster along with deltas; the worker
        // that owns its session must apply them in order.
        cluster_delta d;
        d.base_epoch = in.state.epoch;
        d.new_epoch = in.state.epoch + 1;
        if (!in.state.nodes.empty()) {
          auto const n = static_cast<std::int32_t>(rng() % in.state.nodes.size());
          node changed = in.state.nodes[n];
          changed.memory_mib_free = static_cast<std::int64_t>(rng() % (changed.memory_mib_capacity + 1));
          d.changed.push_back({n, changed});
          in.state.nodes[n] = changed;
        }
        in.state.epoch = d.new_epoch;
        round_input jobs_only;
        jobs_only.pending = in.pending;
        auto const rep = r == 0 ? c.solve(in) : c.solve_delta(d, jobs_only);
        auto const want = local.solve(in);
        if (rep.code != ErrorCode::Ok) {
          failures[k] = "round " + std::to_string(r) + ": " + rep.message;
        } else if (rep.result.placements.size() != want.placements.size()) {
          failures[k] = "round " + std::to_string(r) + ": placements differ from a local solve";
        } else {
          for (std::size_t p = 0; p < want.placements.size(); ++p) {
            if (!(rep.result.placements[p].replicas == want.placements[p].replicas)) {
              failures[k] = "round " + std::to_string(r) + ": placement " + std::to_string(p) + " differs";
            }
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < clients; ++k) EXPECT_EQ(failures[k], "") << "client " << k;
  EXPECT_EQ(s.get().stats().rounds_ok, static_cast<std::uint64_t>(clients * 30));
}

TEST(Service, ManyRandomRoundsKeepInvariants) {
  running_server s;
  client c({s.endpoint(), 5000, ""});
  std::mt19937_64 rng(11);
  for (int k = 0; k < 100; ++k) {
    round_input const in = testing_support::random_round(rng);
    decoded_reply const rep = c.solve(in);
    ASSERT_EQ(rep.code, ErrorCode::Ok) << rep.message;
    expect_round_invariants(in, rep.result);
  }
}

}  // namespace
}  // namespace placer

namespace placer {
namespace {

/// The cross-round policies travel in the request and the session keeps
/// their memory: a deferred sensitive gang, then (a leaf freed) placed
/// consolidated, gives a timer sample only if the server remembered when it
/// was first deferred; preemption and backfill decisions come back in the
/// reply exactly as the in-process solver makes them.
TEST(Service, CrossRoundPoliciesThroughTheRequestAndSessionMemory) {
  running_server srv;
  client c({srv.endpoint(), 5000, "policies-session"});
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[0].gpu_free_milli.assign(8, 0);
  in.state.nodes[2].gpu_free_milli.assign(8, 0);
  in.pol.queue.delay_scheduling = true;
  in.now = 100;
  job g;
  g.name = "sensitive-gang";
  g.per_replica = {8, 1000, 1000, 1024};
  g.replicas = 2;
  g.gang = true;
  g.network_sensitivity = 1.0F;
  g.estimated_duration = 3600;
  in.pending.push_back(g);

  decoded_reply const r1 = c.solve(in);
  ASSERT_EQ(r1.code, ErrorCode::Ok) << r1.message;
  ASSERT_EQ(r1.result.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r1.result.unplaced_jobs[0].reason, unplaced_reason::deferred);

  in.now = 300;
  in.state.nodes[2].gpu_free_milli.assign(8, 1000);
  decoded_reply const r2 = c.solve(in);
  ASSERT_EQ(r2.code, ErrorCode::Ok) << r2.message;
  ASSERT_EQ(r2.result.placements.size(), 1U);
  ASSERT_EQ(r2.result.delay_timers.size(), 1U);
  EXPECT_EQ(r2.result.delay_timers[0].samples, 1) << "the session forgot the deferral";
  EXPECT_EQ(r2.result.delay_timers[0].observed_wait, 300);

  // Preemption and backfill: a high-priority job preempts the cheapest
  // preemptible victim; a blocked gang behind it gets a reservation.
  round_input p;
  p.state = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(3).gpus(8).build();
  p.now = 1000;
  auto run = [&](std::string name, std::int32_t node, std::int64_t checkpoint) {
    running_job rj;
    rj.name = std::move(name);
    rj.per_replica = {8, 1000, 0, 0};
    rj.replicas = {{node, {0, 1, 2, 3, 4, 5, 6, 7}, 1000}};
    rj.preemptible = true;
    rj.start_time = 0;
    rj.last_checkpoint = checkpoint;
    rj.estimated_end = 1500;
    p.state.nodes[static_cast<std::size_t>(node)].gpu_free_milli.assign(8, 0);
    p.running.push_back(rj);
  };
  run("recently-checkpointed", 0, 990);
  run("long-unsaved", 1, 0);
  run("mid", 2, 500);
  job urgent;
  urgent.name = "urgent";
  urgent.priority = 10;
  urgent.per_replica = {8, 1000, 0, 0};
  urgent.estimated_duration = 600;
  p.pending.push_back(urgent);
  job big = urgent;
  big.name = "big-gang";
  big.priority = 0;
  big.replicas = 2;
  big.gang = true;
  p.pending.push_back(big);
  p.pol.queue.preemption = true;
  p.pol.queue.backfill = backfill_mode::easy;
  decoded_reply const rp = c.solve(p);
  ASSERT_EQ(rp.code, ErrorCode::Ok) << rp.message;
  ASSERT_EQ(rp.result.preemptions.size(), 1U);
  EXPECT_EQ(rp.result.preemptions[0].job, "recently-checkpointed");
  EXPECT_EQ(rp.result.preemptions[0].for_job, 0);
  EXPECT_EQ(rp.result.preemptions[0].lost_work, 8 * 1000 * 10);
  ASSERT_EQ(rp.result.reservations.size(), 1U);
  EXPECT_EQ(rp.result.reservations[0].job, 1);
  EXPECT_EQ(rp.result.reservations[0].start_time, 1500);
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  round_result const want = local.solve(p);
  EXPECT_EQ(want.reservations[0].nodes, rp.result.reservations[0].nodes);
  expect_round_invariants(p, rp.result);
}

}  // namespace
}  // namespace placer

namespace placer {
namespace {

TEST(Service, BenchDrivesConcurrentSessionsOnSeveralWorkers) {
  // `placer bench --clients N --workers W` (issue 53, item 8): N sessions at
  // once against its own server of W workers, every round answered.
  auto const json = std::filesystem::path(::testing::TempDir()) / "placer-bench-workers.json";
  std::string out;
  int const rc = testing_support::run_placer(
      "bench --scenario 1k --configs cpu --clients 4 --workers 2 --rounds 3 --json " + json.string(), out);
  if (rc == -1) GTEST_SKIP() << "no placer binary beside this test";
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("4 clients, 2 workers"), std::string::npos) << out;
  std::ifstream in(json);
  std::string const text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"clients\":4,\"workers\":2"), std::string::npos) << text;
  EXPECT_NE(text.find("\"errors\":0"), std::string::npos) << text;
  std::string bad;
  EXPECT_EQ(testing_support::run_placer("bench --workers 2 --endpoint tcp://127.0.0.1:1 --rounds 1", bad), 2) << bad;
  EXPECT_NE(bad.find("--workers sizes the bench's own server"), std::string::npos) << bad;
}

}  // namespace
}  // namespace placer
