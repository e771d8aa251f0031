// The wire path does not allocate per node, job or placement: a server
// worker decodes every request into the same objects, copies the session's
// cluster and jobs over the last round's while applying deltas, and encodes
// its replies in one builder; a client encodes its requests in one builder.
// These are the worker's and the client's steps, counted with the counting
// operator new of tests/support/alloc_count.hpp over a steady stream of the
// 10k-GPU round that `placer bench --scenario 10k` sends (1,280 nodes,
// 1,000 pending jobs): a snapshot, deltas of 128 nodes with the jobs in
// full, the same with job deltas (50 jobs leaving, 50 arriving), snapshots
// again.
//
// What remains per message is a handful of allocations: the encoders' offset
// vectors (one per list: nodes, jobs, placements...) and the builder's pool
// entries for shared strings; apply_delta's one mark per base node and
// apply_job_delta's table of the names it mentions, each in one buffer.
// Each bound below is far below the number of nodes or jobs. The first round
// of each kind sizes what it decodes into (a snapshot drops the last delta's
// nodes), so the bounds hold from the second.
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
  std::vector<job> session_pending = in.pending;
  std::vector<running_job> session_running;
  svc::request_header const h{1, "a-session-id-longer-than-sso", 0};

  enum kind { snapshot, cluster_delta_only, job_deltas };
  char const* const kind_names[] = {"snapshot", "delta", "delta with job delta"};
  auto kind_of = [](int round) {
    return round == 0 || round >= 9 ? snapshot : round < 5 ? cluster_delta_only : job_deltas;
  };
  job_delta jobs;
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    kind const k = kind_of(round);
    bool const steady = round > 0 && k == kind_of(round - 1);
    cluster_delta d{session.epoch, session.epoch + 1, {}, {}, {}};
    for (std::size_t n = 0; n < 128; ++n) {
      auto const i = (static_cast<std::size_t>(round) * 128 + n) % session.nodes.size();
      d.changed.push_back({static_cast<std::int32_t>(i), session.nodes[i]});
    }
    round_input full;
    if (k == snapshot) {
      full = jobs_only;
      full.state = session;
      full.state.epoch = d.new_epoch;
    }
    // The 50 jobs at the head of the queue leave and come back at its tail
    // under a new name.
    jobs.removed.clear();
    jobs.added.clear();
    for (std::size_t j = 0; j < 50 && k == job_deltas; ++j) {
      jobs.removed.push_back(session_pending[j].name);
      jobs.added.push_back(session_pending[j]);
      jobs.added.back().name = "j" + std::to_string(round) + "-" + std::to_string(j);
    }

    auto const enc_req = count_allocs([&] {
      svc::encode_request(client_fbb, h, k == snapshot ? full : jobs_only, k == snapshot ? nullptr : &d,
                          k == job_deltas ? &jobs : nullptr);
    });
    auto const chk = svc::check_envelope(client_fbb.GetBufferPointer(), client_fbb.GetSize());
    ASSERT_NE(chk.envelope, nullptr) << chk.message;
    auto const dec = count_allocs([&] { svc::decode_request(*chk.envelope, req); });
    ASSERT_EQ(req.jobs.has_value(), k == job_deltas);
    auto const apply = count_allocs([&] {
      if (req.delta) {
        req.input.state = session;
        apply_delta(req.input.state, *req.delta);
      }
      if (req.jobs) apply_job_delta(session_pending, session_running, *req.jobs, req.input.pending, req.input.running);
    });
    auto const enc_rep = count_allocs([&] { svc::encode_reply(server_fbb, h, result, req.input, "encode"); });
    std::swap(session, req.input.state);
    std::swap(session_pending, req.input.pending);
    std::swap(session_running, req.input.running);
    ASSERT_EQ(session.epoch, d.new_epoch);
    ASSERT_EQ(session.nodes.size(), in.state.nodes.size());
    ASSERT_EQ(session_pending.size(), in.pending.size());
    if (k == job_deltas) {
      ASSERT_EQ(session_pending.back().name, jobs.added.back().name);
    }

    std::printf("round %d (%s): encode request %lld, decode %lld, apply deltas %lld, encode reply %lld allocations\n",
                round, kind_names[k], static_cast<long long>(enc_req.count), static_cast<long long>(dec.count),
                static_cast<long long>(apply.count), static_cast<long long>(enc_rep.count));
    if (!steady) continue;
    EXPECT_LE(enc_req.count, per_message_bound);
    EXPECT_LE(enc_rep.count, per_message_bound);
    EXPECT_LE(apply.count, k == job_deltas ? 2 : 1);  // the marks, the table of job names
    EXPECT_EQ(dec.count, 0);
  }
}

}  // namespace
}  // namespace placer
