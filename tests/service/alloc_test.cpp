// The wire path does not allocate per node, job or placement: a server
// worker decodes every request into the same objects, copies the session's
// cluster over the last round's before applying a delta, and encodes its
// replies in one builder; a client encodes its requests in one builder.
// These are the worker's and the client's steps, counted with the counting
// operator new of tests/support/alloc_count.hpp over a steady stream of the
// 10k-GPU round that `placer bench --scenario 10k` sends (1,280 nodes,
// 1,000 pending jobs): a snapshot, deltas of 128 nodes, snapshots again.
//
// What remains per message is a handful of allocations: the encoders' offset
// vectors (one per list: nodes, jobs, placements...) and the builder's pool
// entries for shared strings; apply_delta's one mark per base node, in one
// buffer. Each bound below is far below the number of nodes or jobs. The
// first round of each kind sizes what it decodes into (a snapshot drops the
// last delta's nodes), so the bounds hold from the second.
#include <placer/service/codec.hpp>
#include <placer/solver/solver.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "../support/alloc_count.hpp"

namespace placer {
namespace {

namespace svc = service;
using testing_support::count_allocs;

constexpr std::int64_t per_message_bound = 12;

TEST(WirePath, SteadyRoundsAllocateNothingPerNodeJobOrPlacement) {
  round_input const in = traces::make_scenario(traces::scenario_preset("10k"));
  round_input jobs_only = in;
  jobs_only.state = {};
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  round_result const result = s.solve(in);
  ASSERT_GT(result.placements.size(), 500U);

  flatbuffers::FlatBufferBuilder client_fbb;
  flatbuffers::FlatBufferBuilder server_fbb;
  svc::decoded_request req;  // the worker's
  cluster session = in.state;
  svc::request_header const h{1, "a-session-id-longer-than-sso", 0};

  bool last_full = false;
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    bool const full = round == 0 || round >= 6;
    bool const steady = round > 0 && full == last_full;
    last_full = full;
    cluster_delta d{session.epoch, session.epoch + 1, {}, {}, {}};
    for (std::size_t k = 0; k < 128; ++k) {
      auto const i = (static_cast<std::size_t>(round) * 128 + k) % session.nodes.size();
      d.changed.push_back({static_cast<std::int32_t>(i), session.nodes[i]});
    }
    round_input snapshot;
    if (full) {
      snapshot = jobs_only;
      snapshot.state = session;
      snapshot.state.epoch = d.new_epoch;
    }

    auto const enc_req = count_allocs([&] {
      svc::encode_request(client_fbb, h, full ? snapshot : jobs_only, full ? nullptr : &d);
    });
    auto const chk = svc::check_envelope(client_fbb.GetBufferPointer(), client_fbb.GetSize());
    ASSERT_NE(chk.envelope, nullptr) << chk.message;
    auto const dec = count_allocs([&] { svc::decode_request(*chk.envelope, req); });
    auto const apply = count_allocs([&] {
      if (req.delta) {
        req.input.state = session;
        apply_delta(req.input.state, *req.delta);
      }
    });
    auto const enc_rep = count_allocs([&] { svc::encode_reply(server_fbb, h, result, req.input, "encode"); });
    std::swap(session, req.input.state);
    ASSERT_EQ(session.epoch, d.new_epoch);
    ASSERT_EQ(session.nodes.size(), in.state.nodes.size());

    std::printf("round %d (%s): encode request %lld, decode %lld, apply delta %lld, encode reply %lld allocations\n",
                round, full ? "snapshot" : "delta", static_cast<long long>(enc_req.count),
                static_cast<long long>(dec.count), static_cast<long long>(apply.count),
                static_cast<long long>(enc_rep.count));
    if (!steady) continue;
    EXPECT_LE(enc_req.count, per_message_bound);
    EXPECT_LE(enc_rep.count, per_message_bound);
    EXPECT_LE(apply.count, 1);  // the marks
    EXPECT_EQ(dec.count, 0);
  }
}

}  // namespace
}  // namespace placer
