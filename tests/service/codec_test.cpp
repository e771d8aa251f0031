// Tests for the wire codec (service/src/codec.cpp), the JSON/CSV file I/O
// (service/src/json_io.cpp), cluster deltas (topology/src/delta.cpp) and job
// deltas (service/src/job_delta.cpp): round trips field by field, hostile
// bytes, and deltas against a reference.
#include <placer/service/codec.hpp>
#include <placer/service/job_delta.hpp>
#include <placer/service/json_io.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "../support/random_round.hpp"

namespace {

using namespace placer;
namespace svc = placer::service;
namespace wire = placer::wire;
using bytes = std::vector<std::uint8_t>;

// ------------------------------------------------------------------ fixtures

node make_node(std::string name, int gpus, std::int32_t domain) {
  node n;
  n.name = std::move(name);
  n.gpu_model = gpus > 0 ? "H100" : "";
  n.gpu_free_milli.assign(gpus, milli_per_gpu);
  n.cpu_milli_capacity = 128000;
  n.cpu_milli_free = 96000;
  n.memory_mib_capacity = 1 << 20;
  n.memory_mib_free = 1 << 19;
  n.domain = domain;
  return n;
}

/// A round that exercises every field of the request.
round_input rich_input() {
  round_input in;
  auto& c = in.state;
  c.epoch = 42;
  c.topo.level_names = {"cluster", "spine", "leaf", "nvl"};
  c.topo.domains = {{"cluster", 0, -1}, {"spine-0", 1, 0}, {"leaf-0", 2, 1}, {"leaf-1", 2, 1}, {"nvl-0", 3, 2}};

  node a = make_node("gpu-a", 8, 4);
  a.gpu_free_milli = {0, 0, 250, 0, 999, 1, 1000, 500};  // GPUs 0 and 3: the running gang below
  a.gpu_healthy = {1, 1, 0, 1, 1, 1, 0, 1};  // two unhealthy GPUs
  a.gpu_nvlink = {0, 0, 0, 0, 1, 1, 1, 1};
  a.pool = pool_kind::training;
  a.labels = {"zone=a", "rdma", "gen=3"};
  a.taints = {{"team", "research", taint_effect::no_schedule}, {"spot", "", taint_effect::prefer_no_schedule}};
  node b = make_node("gpu-b", 4, 3);
  b.gpu_model = "A100-80G";
  b.pool = pool_kind::inference;
  b.loanable = true;
  b.gpu_nvlink = {3, 3, 7, 7};
  b.gpu_free_milli = {0, 0, 1000, 1000};  // GPUs 0 and 1: the running gang
  node cpu = make_node("cpu-only", 0, 3);
  cpu.labels = {"cpu"};
  node sick = make_node("sick", 2, -1);
  sick.healthy = false;
  sick.gpu_free_milli = {0, 0};
  c.nodes = {a, b, cpu, sick};

  job t;
  t.name = "train-gang";
  t.kind = job_kind::training;
  t.priority = 10;
  t.queue = "research";
  t.replicas = 4;
  t.per_replica = {8, 1000, 32000, 262144};
  t.allowed_gpu_models = {"H100", "A100-80G"};
  t.gang = true;
  t.topology_level = 2;
  t.topo_mode = topology_mode::required;
  t.network_sensitivity = 0.75F;
  t.preemptible = false;
  t.submit_time = 1700000000;
  t.estimated_duration = 7200;
  t.constraints.node_selector = {"zone=a"};
  t.constraints.required = {{{{"gen", selector_op::gt, {"2"}}, {"rdma", selector_op::exists, {}}}},
                            {{{"zone", selector_op::not_in, {"b", "c"}}}}};
  t.constraints.preferred = {{40, {{{"gen", selector_op::lt, {"9"}}}}}};
  t.constraints.tolerations = {{"team", toleration_op::equal, "research", 0}, {"", toleration_op::exists, "", -1}};
  job inf;
  inf.name = "serve-frac";
  inf.kind = job_kind::inference;
  inf.priority = -3;
  inf.per_replica = {1, 250, 2000, 4096};
  inf.topology_level = 3;
  inf.topo_mode = topology_mode::preferred;
  inf.network_sensitivity = 0.3F;
  inf.preemptible = true;
  job batch;
  batch.name = "elastic-batch";
  batch.kind = job_kind::batch;
  batch.replicas = 3;
  batch.per_replica = {2, 1000, 500, 1024};
  batch.min_replicas = 1;
  batch.max_replicas = 6;
  batch.submit_time = -5;  // copied as is; the validator decides
  in.pending = {t, inf, batch};

  running_job r;
  r.name = "running-gang";
  r.kind = job_kind::training;
  r.priority = 7;
  r.per_replica = {2, 1000, 8000, 65536};
  r.replicas = {{0, {0, 3}, 1000}, {1, {0, 1}, 1000}};
  r.gang = true;
  r.preemptible = true;
  r.loaned = true;
  r.min_replicas = 1;
  r.max_replicas = 4;
  r.network_sensitivity = 0.75F;
  r.start_time = 1699990000;
  r.estimated_end = 1700090000;
  r.last_checkpoint = 1699999000;
  r.constraints.tolerations = {{"team", toleration_op::exists, "", 2}};
  r.queue = "research";
  running_job s;
  s.name = "running-share";
  s.kind = job_kind::inference;
  s.per_replica = {1, 500, 1000, 2048};
  s.replicas = {{0, {7}, 500}};
  in.running = {r, s};
  in.queues = {{"org", "", 64000, -1}, {"research", "org", 32000, 400000, 8000, 100000, 3}};

  in.pol.algo = algorithm::kube_most_allocated;
  in.pol.w = {70, 30, 0, 5, 90, 33};
  in.pol.stacking = true;
  in.pol.order = queue_order::strict;
  in.pol.age = {1440, 86400, true};
  in.pol.queue.backfill = backfill_mode::conservative;
  in.pol.queue.max_reservations = 3;
  in.pol.queue.preemption = true;
  in.pol.queue.loaning = false;
  in.pol.queue.reclaim_nodes = 2;
  in.pol.queue.elastic = true;
  in.pol.queue.delay_scheduling = true;
  in.pol.queue.sensitivity_threshold = 0.25F;
  in.pol.queue.delay_timer_max = 900;
  in.pol.queue.preempt_max_lost_s = 300;
  in.pol.queue.network_preemption = true;
  in.pol.queue.auto_reclaim = false;
  in.now = 1700000100;
  in.deadline_us = 250000;
  return in;
}

round_result rich_result() {
  round_result r;
  r.epoch = 42;
  r.placements = {{0, {{0, {0, 1, 3, 4}, 1000}, {1, {2}, 1000}}}, {1, {{0, {5}, 250}}}};
  r.preemptions = {{"running-share", "priority", 0, 123456789}, {"old", "reclaim", -1, 0}};
  r.scale_outs = {{"elastic-a", {{3, {1, 2}, 1000}}, "elastic"}};
  r.scale_ins = {{"elastic-b", {{5, {0}, 1000}, {6, {7}, 1000}}, "reclaim"}, {"elastic-c", {}, ""}};
  r.reclaimed_nodes = {5, 6};
  r.delay_timers = {{"gpus:<=16/sens:high", 600, 420, 7}};
  r.reservations = {{2, {0, 1, 3}, 1700003600}};
  r.unplaced_jobs = {{2, unplaced_reason::gang_incomplete, "needs 3 replicas"},
                     {1, unplaced_reason::deferred, ""}};
  r.unplaced_jobs[0].why = {4, {{node_exclusion::taint, 2, "team=infer:NoSchedule"}, {node_exclusion::gpus, 1, ""}},
                            2, 3, "leaf-0", 2, true, 7};
  r.metrics = {0.25, 0.5, 0.125, 0.0625, 0.3, 0.2, 2, 3, 9250};
  r.timing = {{"validate", 12.5}, {"score", 1234.25}};
  r.backend = "cpu (OpenMP, 2 threads)";
  return r;
}

bytes to_bytes(flatbuffers::FlatBufferBuilder const& fbb) {
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

bytes encoded_request(round_input const& in, cluster_delta const* d = nullptr, svc::request_header const& h = {},
                      job_delta const* jobs = nullptr) {
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_request(fbb, h, in, d, jobs);
  return to_bytes(fbb);
}

svc::decoded_request decode_ok(bytes const& b) {
  auto const chk = svc::check_envelope(b.data(), b.size());
  EXPECT_EQ(chk.code, wire::ErrorCode::Ok) << chk.message;
  if (chk.envelope == nullptr) throw std::runtime_error("envelope rejected: " + chk.message);
  return svc::decode_request(*chk.envelope);
}

// ------------------------------------------------------------------ equality

auto key(node const& n) {
  return std::tie(n.name, n.gpu_model, n.gpu_free_milli, n.gpu_healthy, n.gpu_nvlink, n.cpu_milli_capacity,
                  n.cpu_milli_free, n.memory_mib_capacity, n.memory_mib_free, n.pool, n.loanable, n.healthy, n.domain,
                  n.labels);
}
bool same(node const& a, node const& b) { return key(a) == key(b); }
bool same(std::vector<node> const& a, std::vector<node> const& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](node const& x, node const& y) { return same(x, y); });
}

void expect_eq(node const& a, node const& b) {
  SCOPED_TRACE("node " + a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.gpu_model, b.gpu_model);
  EXPECT_EQ(a.gpu_free_milli, b.gpu_free_milli);
  EXPECT_EQ(a.gpu_healthy, b.gpu_healthy);
  EXPECT_EQ(a.gpu_nvlink, b.gpu_nvlink);
  EXPECT_EQ(a.cpu_milli_capacity, b.cpu_milli_capacity);
  EXPECT_EQ(a.cpu_milli_free, b.cpu_milli_free);
  EXPECT_EQ(a.memory_mib_capacity, b.memory_mib_capacity);
  EXPECT_EQ(a.memory_mib_free, b.memory_mib_free);
  EXPECT_EQ(a.pool, b.pool);
  EXPECT_EQ(a.loanable, b.loanable);
  EXPECT_EQ(a.healthy, b.healthy);
  EXPECT_EQ(a.domain, b.domain);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.taints, b.taints);
}

void expect_eq(cluster const& a, cluster const& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (std::size_t i = 0; i < a.nodes.size(); ++i) expect_eq(a.nodes[i], b.nodes[i]);
  EXPECT_EQ(a.topo.level_names, b.topo.level_names);
  ASSERT_EQ(a.topo.domains.size(), b.topo.domains.size());
  for (std::size_t d = 0; d < a.topo.domains.size(); ++d) {
    EXPECT_EQ(a.topo.domains[d].name, b.topo.domains[d].name);
    EXPECT_EQ(a.topo.domains[d].level, b.topo.domains[d].level);
    EXPECT_EQ(a.topo.domains[d].parent, b.topo.domains[d].parent);
  }
}

void expect_eq(job const& a, job const& b) {
  SCOPED_TRACE("job " + a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.queue, b.queue);
  EXPECT_EQ(a.replicas, b.replicas);
  EXPECT_EQ(a.per_replica, b.per_replica);
  EXPECT_EQ(a.allowed_gpu_models, b.allowed_gpu_models);
  EXPECT_EQ(a.gang, b.gang);
  EXPECT_EQ(a.topology_level, b.topology_level);
  EXPECT_EQ(a.topo_mode, b.topo_mode);
  EXPECT_EQ(a.network_sensitivity, b.network_sensitivity);  // exact: float on both sides
  EXPECT_EQ(a.min_replicas, b.min_replicas);
  EXPECT_EQ(a.max_replicas, b.max_replicas);
  EXPECT_EQ(a.preemptible, b.preemptible);
  EXPECT_EQ(a.submit_time, b.submit_time);
  EXPECT_EQ(a.estimated_duration, b.estimated_duration);
  EXPECT_TRUE(a.constraints == b.constraints);
}

void expect_eq(running_job const& a, running_job const& b) {
  SCOPED_TRACE("running job " + a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.per_replica, b.per_replica);
  EXPECT_EQ(a.replicas, b.replicas);
  EXPECT_EQ(a.gang, b.gang);
  EXPECT_EQ(a.preemptible, b.preemptible);
  EXPECT_EQ(a.loaned, b.loaned);
  EXPECT_EQ(a.min_replicas, b.min_replicas);
  EXPECT_EQ(a.max_replicas, b.max_replicas);
  EXPECT_EQ(a.network_sensitivity, b.network_sensitivity);
  EXPECT_EQ(a.start_time, b.start_time);
  EXPECT_EQ(a.estimated_end, b.estimated_end);
  EXPECT_EQ(a.last_checkpoint, b.last_checkpoint);
  EXPECT_TRUE(a.constraints == b.constraints);
  EXPECT_EQ(a.queue, b.queue);
}

void expect_eq(policy const& a, policy const& b) {
  EXPECT_EQ(a.algo, b.algo);
  EXPECT_EQ(a.stacking, b.stacking);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.age, b.age);
  EXPECT_EQ(a.w.binpack, b.w.binpack);
  EXPECT_EQ(a.w.fragmentation, b.w.fragmentation);
  EXPECT_EQ(a.w.topology, b.w.topology);
  EXPECT_EQ(a.w.pool_affinity, b.w.pool_affinity);
  EXPECT_EQ(a.w.scarcity, b.w.scarcity);
  EXPECT_EQ(a.w.affinity, b.w.affinity);
  auto const &x = a.queue, &y = b.queue;
  EXPECT_EQ(x.backfill, y.backfill);
  EXPECT_EQ(x.max_reservations, y.max_reservations);
  EXPECT_EQ(x.preemption, y.preemption);
  EXPECT_EQ(x.loaning, y.loaning);
  EXPECT_EQ(x.reclaim_nodes, y.reclaim_nodes);
  EXPECT_EQ(x.elastic, y.elastic);
  EXPECT_EQ(x.delay_scheduling, y.delay_scheduling);
  EXPECT_EQ(x.sensitivity_threshold, y.sensitivity_threshold);
  EXPECT_EQ(x.delay_timer_max, y.delay_timer_max);
  EXPECT_EQ(x.preempt_max_lost_s, y.preempt_max_lost_s);
  EXPECT_EQ(x.network_preemption, y.network_preemption);
  EXPECT_EQ(x.auto_reclaim, y.auto_reclaim);
}

template <class T>
void expect_all_eq(std::vector<T> const& a, std::vector<T> const& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) expect_eq(a[i], b[i]);
}

void expect_eq(round_input const& a, round_input const& b) {
  expect_eq(a.state, b.state);
  expect_all_eq(a.pending, b.pending);
  expect_all_eq(a.running, b.running);
  expect_eq(a.pol, b.pol);
  EXPECT_EQ(a.now, b.now);
  EXPECT_EQ(a.deadline_us, b.deadline_us);
  EXPECT_EQ(a.queues, b.queues);
}

void expect_eq(cluster_delta const& a, cluster_delta const& b) {
  EXPECT_EQ(a.base_epoch, b.base_epoch);
  EXPECT_EQ(a.new_epoch, b.new_epoch);
  expect_all_eq(a.added, b.added);
  EXPECT_EQ(a.removed, b.removed);
  ASSERT_EQ(a.changed.size(), b.changed.size());
  for (std::size_t k = 0; k < a.changed.size(); ++k) {
    EXPECT_EQ(a.changed[k].index, b.changed[k].index);
    expect_eq(a.changed[k].value, b.changed[k].value);
  }
}

void expect_eq(job_delta const& a, job_delta const& b) {
  expect_all_eq(a.added, b.added);
  EXPECT_EQ(a.removed, b.removed);
  expect_all_eq(a.started, b.started);
  EXPECT_EQ(a.finished, b.finished);
}

void expect_eq(round_result const& a, round_result const& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  ASSERT_EQ(a.placements.size(), b.placements.size());
  for (std::size_t k = 0; k < a.placements.size(); ++k) {
    EXPECT_EQ(a.placements[k].job, b.placements[k].job);
    EXPECT_EQ(a.placements[k].replicas, b.placements[k].replicas);
  }
  ASSERT_EQ(a.preemptions.size(), b.preemptions.size());
  for (std::size_t k = 0; k < a.preemptions.size(); ++k) {
    EXPECT_EQ(a.preemptions[k].job, b.preemptions[k].job);
    EXPECT_EQ(a.preemptions[k].reason, b.preemptions[k].reason);
    EXPECT_EQ(a.preemptions[k].for_job, b.preemptions[k].for_job);
    EXPECT_EQ(a.preemptions[k].lost_work, b.preemptions[k].lost_work);
  }
  for (auto which : {&round_result::scale_outs, &round_result::scale_ins}) {
    ASSERT_EQ((a.*which).size(), (b.*which).size());
    for (std::size_t k = 0; k < (a.*which).size(); ++k) {
      EXPECT_EQ((a.*which)[k].job, (b.*which)[k].job);
      EXPECT_EQ((a.*which)[k].replicas, (b.*which)[k].replicas);
      EXPECT_EQ((a.*which)[k].reason, (b.*which)[k].reason);
    }
  }
  EXPECT_EQ(a.reclaimed_nodes, b.reclaimed_nodes);
  ASSERT_EQ(a.delay_timers.size(), b.delay_timers.size());
  for (std::size_t k = 0; k < a.delay_timers.size(); ++k) {
    EXPECT_EQ(a.delay_timers[k].job_class, b.delay_timers[k].job_class);
    EXPECT_EQ(a.delay_timers[k].timer, b.delay_timers[k].timer);
    EXPECT_EQ(a.delay_timers[k].observed_wait, b.delay_timers[k].observed_wait);
    EXPECT_EQ(a.delay_timers[k].samples, b.delay_timers[k].samples);
  }
  ASSERT_EQ(a.reservations.size(), b.reservations.size());
  for (std::size_t k = 0; k < a.reservations.size(); ++k) {
    EXPECT_EQ(a.reservations[k].job, b.reservations[k].job);
    EXPECT_EQ(a.reservations[k].nodes, b.reservations[k].nodes);
    EXPECT_EQ(a.reservations[k].start_time, b.reservations[k].start_time);
  }
  ASSERT_EQ(a.unplaced_jobs.size(), b.unplaced_jobs.size());
  for (std::size_t k = 0; k < a.unplaced_jobs.size(); ++k) {
    EXPECT_EQ(a.unplaced_jobs[k].job, b.unplaced_jobs[k].job);
    EXPECT_EQ(a.unplaced_jobs[k].reason, b.unplaced_jobs[k].reason);
    EXPECT_EQ(a.unplaced_jobs[k].detail, b.unplaced_jobs[k].detail);
    EXPECT_TRUE(a.unplaced_jobs[k].why == b.unplaced_jobs[k].why) << "explanation of unplaced " << k;
  }
  auto const& m = a.metrics;
  auto const& n = b.metrics;
  EXPECT_EQ(m.gar_before, n.gar_before);
  EXPECT_EQ(m.gar_after, n.gar_after);
  EXPECT_EQ(m.gfr_before, n.gfr_before);
  EXPECT_EQ(m.gfr_after, n.gfr_after);
  EXPECT_EQ(m.frag_ratio_before, n.frag_ratio_before);
  EXPECT_EQ(m.frag_ratio_after, n.frag_ratio_after);
  EXPECT_EQ(m.jobs_placed, n.jobs_placed);
  EXPECT_EQ(m.replicas_placed, n.replicas_placed);
  EXPECT_EQ(m.gpu_milli_placed, n.gpu_milli_placed);
  ASSERT_EQ(a.timing.size(), b.timing.size());
  for (std::size_t k = 0; k < a.timing.size(); ++k) {
    EXPECT_EQ(a.timing[k].stage, b.timing[k].stage);
    EXPECT_EQ(a.timing[k].micros, b.timing[k].micros);
  }
  EXPECT_EQ(a.backend, b.backend);
}

template <class F>
void expect_logic_error(F&& f, error_code code, std::vector<std::string> const& needles) {
  try {
    f();
    ADD_FAILURE() << "expected placer::logic_error";
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (auto const& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

/// `base` moved by `d` (apply_delta works in place).
cluster applied(cluster base, cluster_delta const& d) {
  apply_delta(base, d);
  return base;
}

// ------------------------------------------------------------------ request / reply round trips

TEST(CodecRoundTrip, RequestEveryField) {
  auto const in = rich_input();
  svc::request_header h{77, "session-x", 123456789};
  auto const b = encoded_request(in, nullptr, h);
  auto const dec = decode_ok(b);
  EXPECT_EQ(dec.header.request_id, 77u);
  EXPECT_EQ(dec.header.session, "session-x");
  EXPECT_EQ(dec.header.sent_at_us, 123456789u);
  EXPECT_FALSE(dec.delta.has_value());
  expect_eq(in, dec.input);
  // The fixture is a valid round, and decoding kept it so.
  EXPECT_NO_THROW(placer::validate(dec.input));
}

TEST(CodecRoundTrip, DefaultsAndEmptyVectors) {
  round_input in;
  in.state.nodes = {make_node("bare", 0, -1)};
  job j;
  j.name = "defaults";
  in.pending = {j};
  auto const dec = decode_ok(encoded_request(in));
  expect_eq(in, dec.input);
}

TEST(CodecRoundTrip, DeltaRequest) {
  auto in = rich_input();
  cluster_delta d;
  d.base_epoch = 42;
  d.new_epoch = 43;
  d.added = {make_node("new-1", 8, 2), make_node("new-2", 0, -1)};
  d.removed = {3, 1};
  node changed = in.state.nodes[0];
  changed.gpu_free_milli[0] = 0;
  d.changed = {{0, changed}};
  auto const dec = decode_ok(encoded_request(in, &d, {5, "s", 0}));
  ASSERT_TRUE(dec.delta.has_value());
  expect_eq(d, *dec.delta);
  EXPECT_TRUE(dec.input.state.nodes.empty());  // a delta request carries no cluster
  expect_all_eq(in.pending, dec.input.pending);
  expect_all_eq(in.running, dec.input.running);
  // Applied on the server side it gives the expected cluster.
  auto const next = applied(in.state, *dec.delta);
  ASSERT_EQ(next.nodes.size(), 4u);
  EXPECT_EQ(next.nodes[0].gpu_free_milli[0], 0);
  EXPECT_EQ(next.nodes[1].name, "cpu-only");
  EXPECT_EQ(next.nodes[2].name, "new-1");
  EXPECT_EQ(next.epoch, 43u);
}

/// A job delta on rich_input(): a new job, one removed, one replaced (in
/// removed and added), a running job started and one finished.
job_delta rich_job_delta(round_input const& in) {
  job_delta jd;
  job fresh = in.pending[1];
  fresh.name = "fresh";
  job replaced = in.pending[0];
  replaced.priority = 99;
  jd.added = {fresh, replaced};
  jd.removed = {in.pending[2].name, in.pending[0].name};
  running_job started = in.running[0];
  started.name = "started";
  jd.started = {started};
  jd.finished = {in.running[1].name};
  return jd;
}

TEST(CodecRoundTrip, JobDeltaRequest) {
  auto const in = rich_input();
  auto const jd = rich_job_delta(in);
  cluster_delta d{42, 43, {}, {}, {{0, in.state.nodes[1]}}};
  auto const dec = decode_ok(encoded_request(in, &d, {5, "s", 0}, &jd));
  ASSERT_TRUE(dec.delta.has_value());
  ASSERT_TRUE(dec.jobs.has_value());
  expect_eq(d, *dec.delta);
  expect_eq(jd, *dec.jobs);
  // The job lists travel as the delta only.
  EXPECT_TRUE(dec.input.pending.empty());
  EXPECT_TRUE(dec.input.running.empty());
  expect_eq(in.pol, dec.input.pol);
  EXPECT_EQ(dec.input.now, in.now);

  // With no node changes the ClusterDelta stays off the wire; the JobDelta
  // carries the epochs, and the decoded delta has them with nothing else.
  cluster_delta const epochs{42, 45, {}, {}, {}};
  auto const b = encoded_request(in, &epochs, {6, "s", 0}, &jd);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_NE(chk.envelope, nullptr) << chk.message;
  auto const* req = chk.envelope->body_as_ScheduleRequest();
  EXPECT_EQ(req->delta(), nullptr);
  EXPECT_EQ(req->pending(), nullptr);
  EXPECT_EQ(req->running(), nullptr);
  ASSERT_NE(req->job_delta(), nullptr);
  EXPECT_EQ(req->job_delta()->new_epoch(), 45u);
  auto const alone = svc::decode_request(*chk.envelope);
  ASSERT_TRUE(alone.delta.has_value());
  expect_eq(epochs, *alone.delta);
  expect_eq(jd, *alone.jobs);

  // Applied on the server side it gives the expected lists.
  std::vector<job> pending;
  std::vector<running_job> running;
  apply_job_delta(in.pending, in.running, *alone.jobs, pending, running);
  ASSERT_EQ(pending.size(), 3u);
  EXPECT_EQ(pending[0].name, "serve-frac");
  EXPECT_EQ(pending[1].name, "fresh");
  EXPECT_EQ(pending[2].name, "train-gang");
  EXPECT_EQ(pending[2].priority, 99);
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].name, "running-gang");
  expect_eq(jd.started[0], running[1]);
}

TEST(CodecRoundTrip, Reply) {
  auto const in = rich_input();
  auto const r = rich_result();
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_reply(fbb, {9, "sess", 11}, r, in);
  auto const b = to_bytes(fbb);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_EQ(chk.code, wire::ErrorCode::Ok) << chk.message;
  auto const dec = svc::decode_reply(*chk.envelope);
  EXPECT_EQ(dec.code, wire::ErrorCode::Ok);
  EXPECT_EQ(dec.header.request_id, 9u);
  EXPECT_EQ(dec.header.session, "sess");
  EXPECT_EQ(dec.header.sent_at_us, 11u);
  expect_eq(r, dec.result);
  // Job names ride along for readers of the reply.
  auto const* rep = chk.envelope->body_as_ScheduleReply();
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->placements()->Get(0)->name()->str(), "train-gang");
  EXPECT_EQ(rep->unplaced()->Get(0)->name()->str(), "elastic-batch");
  EXPECT_EQ(rep->status()->code(), wire::ErrorCode::Ok);
}

TEST(CodecRoundTrip, EmptyReply) {
  round_result r;
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_reply(fbb, {}, r, round_input{});
  auto const b = to_bytes(fbb);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_EQ(chk.code, wire::ErrorCode::Ok) << chk.message;
  expect_eq(r, svc::decode_reply(*chk.envelope).result);
}

TEST(CodecRoundTrip, ErrorReply) {
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_error(fbb, {3, "s", 4}, wire::ErrorCode::StaleEpoch, "delta against epoch 4 but the session holds 5");
  auto const b = to_bytes(fbb);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_EQ(chk.code, wire::ErrorCode::Ok) << chk.message;
  auto const dec = svc::decode_reply(*chk.envelope);
  EXPECT_EQ(dec.code, wire::ErrorCode::StaleEpoch);
  EXPECT_EQ(dec.message, "delta against epoch 4 but the session holds 5");
  EXPECT_EQ(dec.header.request_id, 3u);
}

TEST(CodecRoundTrip, BuilderIsReusable) {
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_error(fbb, {}, wire::ErrorCode::Internal, "first");
  svc::encode_request(fbb, {1, "s", 2}, rich_input());  // clears and re-finishes
  expect_eq(rich_input(), decode_ok(to_bytes(fbb)).input);
}

TEST(CodecRoundTrip, DecodingIntoAReusedRequestMatchesAFreshDecode) {
  // One object decoded into again and again, as a server worker does:
  // nothing of an earlier request (larger, richer, a delta) may survive
  // into a later one.
  std::mt19937_64 rng(7);
  auto const rich = rich_input();
  round_input defaults;
  job j;
  j.name = "defaults";
  defaults.pending = {j};
  cluster_delta d{42, 43, {make_node("new-1", 8, 2)}, {3}, {{0, rich.state.nodes[1]}}};
  cluster_delta const epochs_only{42, 43, {}, {}, {}};
  auto const jd = rich_job_delta(rich);
  std::vector<bytes> msgs{encoded_request(rich, nullptr, {1, "a-long-session-name-beyond-sso", 2}),
                          encoded_request(defaults), encoded_request(rich, &d, {3, "s", 4}),
                          encoded_request(rich, &d, {}, &jd), encoded_request(defaults, &d),
                          encoded_request(rich, &epochs_only, {}, &jd), encoded_request(rich)};
  for (int k = 0; k < 20; ++k) {
    auto in = testing_support::random_round(rng);
    in.running = rich.running;
    msgs.push_back(encoded_request(in, k % 3 == 0 ? &d : nullptr, {static_cast<std::uint64_t>(k), "", 0}));
  }
  svc::decoded_request reused;
  for (std::size_t k = 0; k < msgs.size(); ++k) {
    SCOPED_TRACE("message " + std::to_string(k));
    auto const chk = svc::check_envelope(msgs[k].data(), msgs[k].size());
    ASSERT_NE(chk.envelope, nullptr) << chk.message;
    svc::decode_request(*chk.envelope, reused);
    auto const fresh = svc::decode_request(*chk.envelope);
    EXPECT_EQ(reused.header.request_id, fresh.header.request_id);
    EXPECT_EQ(reused.header.session, fresh.header.session);
    EXPECT_EQ(reused.header.sent_at_us, fresh.header.sent_at_us);
    ASSERT_EQ(reused.delta.has_value(), fresh.delta.has_value());
    if (fresh.delta) {
      expect_eq(*reused.delta, *fresh.delta);
    } else {
      expect_eq(reused.input.state, fresh.input.state);  // with a delta, the state is the caller's
    }
    ASSERT_EQ(reused.jobs.has_value(), fresh.jobs.has_value());
    if (fresh.jobs) {
      expect_eq(*reused.jobs, *fresh.jobs);
    } else {  // with a job delta, the lists are the caller's
      expect_all_eq(reused.input.pending, fresh.input.pending);
      expect_all_eq(reused.input.running, fresh.input.running);
    }
    expect_eq(reused.input.pol, fresh.input.pol);
    EXPECT_EQ(reused.input.now, fresh.input.now);
    EXPECT_EQ(reused.input.deadline_us, fresh.input.deadline_us);
  }
}

TEST(CodecRoundTrip, LargeRound) {
  // 100k GPUs and 5k jobs: within the verifier's table budget.
  round_input in;
  in.state = make_cluster().spines(4).leaves_per_spine(8).nodes_per_leaf(400).gpus(8).build();
  for (int j = 0; j < 5000; ++j) {
    job x;
    x.name = "job-" + std::to_string(j);
    x.per_replica = {1 + j % 8, 1000, 1000, 1024};
    x.allowed_gpu_models = {"H100"};
    in.pending.push_back(x);
  }
  auto const b = encoded_request(in);
  auto const dec = decode_ok(b);
  ASSERT_EQ(dec.input.state.nodes.size(), 12800u);
  EXPECT_TRUE(same(in.state.nodes, dec.input.state.nodes));
  expect_all_eq(in.pending, dec.input.pending);
}

// Labels and taints repeat across nodes, in the same places or not: each
// distinct text is in the message once, and every node decodes as it was.
TEST(CodecRoundTrip, RepeatedLabelsAreStoredOnce) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(20).gpus(8).build();
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    auto& n = in.state.nodes[i];
    n.labels = {"kubernetes.io/hostname=" + n.name, "feature.node.kubernetes.io/cpu-cpuid.AVX512F=true",
                "rack=r" + std::to_string(i / 20), "nvidia.com/cuda.driver.major=550"};
    if (i % 3 == 0) std::swap(n.labels[1], n.labels[3]);  // the same texts, elsewhere
    if (i % 5 == 0) n.taints = {{"team", "inference", taint_effect::no_schedule}};
    if (i % 7 == 0) n.taints.push_back({"rack", "r1", taint_effect::prefer_no_schedule});  // a label's words as a taint's
  }
  auto const b = encoded_request(in);
  std::string_view const text(reinterpret_cast<char const*>(b.data()), b.size());
  auto count = [&](std::string_view s) {
    std::size_t k = 0;
    for (auto at = text.find(s); at != std::string_view::npos; at = text.find(s, at + 1)) ++k;
    return k;
  };
  EXPECT_EQ(count("feature.node.kubernetes.io/cpu-cpuid.AVX512F=true"), 1U);
  EXPECT_EQ(count("nvidia.com/cuda.driver.major=550"), 1U);
  EXPECT_EQ(count("rack=r1"), 1U);
  EXPECT_EQ(count("inference"), 1U);
  EXPECT_EQ(count("kubernetes.io/hostname="), in.state.nodes.size());
  auto const dec = decode_ok(b);
  EXPECT_TRUE(same(in.state.nodes, dec.input.state.nodes));
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    auto const& want = in.state.nodes[i].taints;
    auto const& got = dec.input.state.nodes[i].taints;
    ASSERT_EQ(got.size(), want.size()) << i;
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got[k].key, want[k].key);
      EXPECT_EQ(got[k].value, want[k].value);
      EXPECT_EQ(got[k].effect, want[k].effect);
    }
  }
}

// ------------------------------------------------------------------ envelope checks

TEST(Envelope, RandomBytesNeverOk) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> size_dist(0, 4096);
  std::uniform_int_distribution<int> byte_dist(0, 255);
  for (int k = 0; k < 200; ++k) {
    bytes b(size_dist(rng));
    for (auto& x : b) x = static_cast<std::uint8_t>(byte_dist(rng));
    // Half of them carry the right identifier so the verifier is exercised.
    if (k % 2 == 1 && b.size() >= 8) std::memcpy(b.data() + 4, "PLCR", 4);
    auto const chk = svc::check_envelope(b.data(), b.size());
    EXPECT_NE(chk.code, wire::ErrorCode::Ok) << "buffer " << k;
    EXPECT_EQ(chk.envelope, nullptr);
    EXPECT_FALSE(chk.message.empty());
  }
}

TEST(Envelope, TruncatedPrefixesRejected) {
  round_input in;
  in.state.nodes = {make_node("n0", 2, -1)};
  job j;
  j.name = "j";
  in.pending = {j};
  auto const full = encoded_request(in, nullptr, {1, "s", 2});
  ASSERT_EQ(svc::check_envelope(full.data(), full.size()).code, wire::ErrorCode::Ok);
  auto const whole = decode_ok(full).input;
  std::size_t shortest_ok = full.size();
  for (std::size_t len = 0; len < full.size(); ++len) {
    bytes const prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    auto const chk = svc::check_envelope(prefix.data(), prefix.size());
    if (chk.code == wire::ErrorCode::Ok) {
      // The builder leaves alignment padding after the first object it
      // wrote (the end of the buffer); cutting only that loses nothing.
      // Anything accepted must therefore decode to the very same round.
      shortest_ok = std::min(shortest_ok, len);
      expect_eq(whole, svc::decode_request(*chk.envelope).input);
      continue;
    }
    EXPECT_TRUE(chk.code == wire::ErrorCode::Malformed || chk.code == wire::ErrorCode::UnknownSchema)
        << "prefix of " << len << " bytes: " << svc::error_code_name(chk.code) << ": " << chk.message;
    EXPECT_EQ(chk.envelope, nullptr);
  }
  EXPECT_GE(shortest_ok + 8, full.size()) << "only trailing padding may be cut";
}

TEST(Envelope, MutatedBuffersNeverCrash) {
  // Flipped bytes either fail the check or decode into something the
  // domain model can hold (or a logic_error): never a crash.
  auto const base = encoded_request(rich_input(), nullptr, {1, "s", 2});
  std::mt19937 rng(777);
  std::uniform_int_distribution<std::size_t> pos(0, base.size() - 1);
  std::uniform_int_distribution<int> byte_dist(0, 255);
  int accepted = 0;
  for (int k = 0; k < 3000; ++k) {
    bytes b = base;
    int const flips = 1 + k % 4;
    for (int f = 0; f < flips; ++f) b[pos(rng)] = static_cast<std::uint8_t>(byte_dist(rng));
    auto const chk = svc::check_envelope(b.data(), b.size());
    if (chk.envelope == nullptr) {
      EXPECT_NE(chk.code, wire::ErrorCode::Ok);
      continue;
    }
    ++accepted;
    try {
      (void)svc::decode_request(*chk.envelope);
    } catch (logic_error const& e) {
      EXPECT_EQ(e.code(), error_code::invalid_argument) << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations hit plain data and stay valid
}

TEST(Envelope, TooShortOrNull) {
  std::uint8_t const tiny[4] = {1, 2, 3, 4};
  EXPECT_EQ(svc::check_envelope(tiny, 0).code, wire::ErrorCode::Malformed);
  EXPECT_EQ(svc::check_envelope(tiny, 4).code, wire::ErrorCode::Malformed);
  EXPECT_EQ(svc::check_envelope(nullptr, 0).code, wire::ErrorCode::Malformed);
}

TEST(Envelope, OversizedIsResourceExhausted) {
  auto const b = encoded_request(rich_input());
  auto const chk = svc::check_envelope(b.data(), b.size(), b.size() - 1);
  EXPECT_EQ(chk.code, wire::ErrorCode::ResourceExhausted);
  EXPECT_NE(chk.message.find(std::to_string(b.size())), std::string::npos) << chk.message;
  EXPECT_NE(chk.message.find(std::to_string(b.size() - 1)), std::string::npos) << chk.message;
  // The size limit comes before the identifier: garbage that is too big is
  // reported as too big.
  bytes junk(64, 0xAB);
  EXPECT_EQ(svc::check_envelope(junk.data(), junk.size(), 32).code, wire::ErrorCode::ResourceExhausted);
  EXPECT_EQ(svc::check_envelope(b.data(), b.size(), b.size()).code, wire::ErrorCode::Ok);
}

TEST(Envelope, WrongIdentifierIsUnknownSchema) {
  auto b = encoded_request(rich_input());
  std::memcpy(b.data() + 4, "XXXX", 4);
  auto const chk = svc::check_envelope(b.data(), b.size());
  EXPECT_EQ(chk.code, wire::ErrorCode::UnknownSchema) << chk.message;
  EXPECT_EQ(chk.envelope, nullptr);
}

bytes envelope_with(flatbuffers::Offset<wire::Header> (*make_header)(flatbuffers::FlatBufferBuilder&),
                    bool with_body) {
  flatbuffers::FlatBufferBuilder fbb;
  auto const err = wire::CreateErrorDirect(fbb, wire::ErrorCode::Internal, "x");
  auto const hdr = make_header(fbb);
  auto const env = with_body ? wire::CreateEnvelope(fbb, hdr, wire::Body::Error, err.Union())
                             : wire::CreateEnvelope(fbb, hdr);
  wire::FinishEnvelopeBuffer(fbb, env);
  return to_bytes(fbb);
}

TEST(Envelope, HeaderVersionAndPresence) {
  auto const v2 = envelope_with([](flatbuffers::FlatBufferBuilder& f) { return wire::CreateHeader(f, 2, 7); }, true);
  auto chk = svc::check_envelope(v2.data(), v2.size());
  EXPECT_EQ(chk.code, wire::ErrorCode::UnknownSchema);
  EXPECT_NE(chk.message.find('2'), std::string::npos) << chk.message;

  auto const none = envelope_with([](flatbuffers::FlatBufferBuilder&) { return flatbuffers::Offset<wire::Header>(); },
                                  true);
  EXPECT_EQ(svc::check_envelope(none.data(), none.size()).code, wire::ErrorCode::UnknownSchema);

  auto const v1 = envelope_with([](flatbuffers::FlatBufferBuilder& f) { return wire::CreateHeader(f, 1, 7); }, true);
  EXPECT_EQ(svc::check_envelope(v1.data(), v1.size()).code, wire::ErrorCode::Ok);
}

TEST(Envelope, NoBodyIsInvalidArgument) {
  auto const b = envelope_with([](flatbuffers::FlatBufferBuilder& f) { return wire::CreateHeader(f, 1, 7); }, false);
  EXPECT_EQ(svc::check_envelope(b.data(), b.size()).code, wire::ErrorCode::InvalidArgument);
}

// ------------------------------------------------------------------ decode errors

struct wire_values {
  std::uint8_t pool = 2, kind = 0, mode = 0, algo = 0, running_kind = 0;
  std::uint32_t replicas = 1;
  bool cluster = true, delta = false;
  bool lists = true;            ///< pending and running present
  bool job_delta = false;
  std::uint64_t job_base = 1;   ///< the job delta's base epoch (the cluster delta's is 1)
};

/// A request written directly with the generated API, so values the domain
/// encoder would never produce can be put on the wire.
bytes raw_request(wire_values const& v) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint16_t> gpus{1000, 1000};
  auto const n = wire::CreateNodeDirect(fbb, "n0", "H100", &gpus, nullptr, nullptr, 1000, 1000, 1024, 1024,
                                        static_cast<wire::Pool>(v.pool));
  std::vector<flatbuffers::Offset<wire::Node>> nodes{n};
  auto const c = v.cluster ? wire::CreateClusterDirect(fbb, 1, &nodes) : 0;
  auto const d = v.delta ? wire::CreateClusterDeltaDirect(fbb, 1, 2) : 0;
  auto const dem = wire::CreateDemand(fbb, 1, 1000, 100, 100);
  std::vector<flatbuffers::Offset<wire::Job>> pending{wire::CreateJobDirect(
      fbb, "j", static_cast<wire::JobKind>(v.kind), 0, nullptr, v.replicas, dem, nullptr, false, 0,
      static_cast<wire::TopologyMode>(v.mode))};
  auto const rdem = wire::CreateDemand(fbb, 1, 1000, 100, 100);
  std::vector<flatbuffers::Offset<wire::RunningJob>> running{
      wire::CreateRunningJobDirect(fbb, "r", static_cast<wire::JobKind>(v.running_kind), 0, rdem)};
  auto const pol = wire::CreatePolicy(fbb, static_cast<wire::Algorithm>(v.algo));
  auto const jd = v.job_delta ? wire::CreateJobDeltaDirect(fbb, v.job_base, v.job_base + 1) : 0;
  auto const req = wire::CreateScheduleRequestDirect(fbb, c, d, v.lists ? &pending : nullptr,
                                                     v.lists ? &running : nullptr, pol, 0, 0, jd);
  auto const hdr = wire::CreateHeader(fbb, 1, 1);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::ScheduleRequest, req.Union()));
  return to_bytes(fbb);
}

void expect_decode_error(wire_values const& v, std::vector<std::string> const& needles) {
  auto const b = raw_request(v);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_EQ(chk.code, wire::ErrorCode::Ok) << chk.message;  // verifiable: the enum range is ours to check
  expect_logic_error([&] { (void)svc::decode_request(*chk.envelope); }, error_code::invalid_argument, needles);
}

TEST(DecodeErrors, RawRequestBaselineDecodes) {
  auto const dec = decode_ok(raw_request({}));
  ASSERT_EQ(dec.input.state.nodes.size(), 1u);
  EXPECT_EQ(dec.input.state.nodes[0].pool, pool_kind::shared);
  EXPECT_EQ(dec.input.pending.at(0).name, "j");
}

TEST(DecodeErrors, OutOfRangeEnums) {
  expect_decode_error({.pool = 7}, {"pool", "7", "n0"});
  expect_decode_error({.kind = 9}, {"kind", "9", "pending job 0"});
  expect_decode_error({.mode = 5}, {"topology_mode", "5"});
  expect_decode_error({.algo = 9}, {"algorithm", "9"});
  expect_decode_error({.running_kind = 3}, {"kind", "running job 0"});
}

TEST(DecodeErrors, CountBeyondInt32) {
  expect_decode_error({.replicas = 3'000'000'000u}, {"replicas", "3000000000"});
}

TEST(DecodeErrors, ClusterAndDeltaExclusive) {
  expect_decode_error({.cluster = true, .delta = true}, {"both"});
  expect_decode_error({.cluster = false, .delta = false}, {"neither cluster nor delta"});
  auto const dec = decode_ok(raw_request({.cluster = false, .delta = true}));
  ASSERT_TRUE(dec.delta.has_value());
  EXPECT_EQ(dec.delta->new_epoch, 2u);
}

TEST(DecodeErrors, JobDeltaOnlyWhereItIsUnambiguous) {
  // Alone (the cluster moves to its epoch unchanged), or with a cluster
  // delta at the same epochs.
  auto const alone = decode_ok(raw_request({.cluster = false, .lists = false, .job_delta = true, .job_base = 7}));
  ASSERT_TRUE(alone.delta.has_value());
  ASSERT_TRUE(alone.jobs.has_value());
  expect_eq(cluster_delta{7, 8, {}, {}, {}}, *alone.delta);
  auto const both = decode_ok(raw_request({.cluster = false, .delta = true, .lists = false, .job_delta = true}));
  ASSERT_TRUE(both.delta.has_value());
  ASSERT_TRUE(both.jobs.has_value());
  // Which jobs, which state, which epoch? Refused rather than guessed.
  expect_decode_error({.cluster = true, .lists = false, .job_delta = true}, {"both cluster and job_delta"});
  expect_decode_error({.cluster = false, .delta = true, .job_delta = true}, {"both job_delta and pending/running"});
  expect_decode_error({.cluster = false, .lists = true, .job_delta = true}, {"pending/running"});
  expect_decode_error({.cluster = false, .delta = true, .lists = false, .job_delta = true, .job_base = 5},
                      {"job_delta moves epoch 5 to 6 but delta 1 to 2"});
}

TEST(DecodeErrors, WrongBodyKind) {
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_error(fbb, {}, wire::ErrorCode::Internal, "boom");
  auto const b = to_bytes(fbb);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_NE(chk.envelope, nullptr);
  expect_logic_error([&] { (void)svc::decode_request(*chk.envelope); }, error_code::invalid_argument,
                     {"ScheduleRequest"});
  auto const req = encoded_request(rich_input());
  auto const chk2 = svc::check_envelope(req.data(), req.size());
  ASSERT_NE(chk2.envelope, nullptr);
  expect_logic_error([&] { (void)svc::decode_reply(*chk2.envelope); }, error_code::invalid_argument,
                     {"ScheduleReply"});
}

TEST(DecodeErrors, UnknownUnplacedReason) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::Unplaced>> un{
      wire::CreateUnplacedDirect(fbb, 0, "j", static_cast<wire::UnplacedReason>(42))};
  auto const rep = wire::CreateScheduleReplyDirect(fbb, 0, 1, nullptr, nullptr, nullptr, &un);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, wire::CreateHeader(fbb), wire::Body::ScheduleReply,
                                                       rep.Union()));
  auto const b = to_bytes(fbb);
  auto const chk = svc::check_envelope(b.data(), b.size());
  ASSERT_NE(chk.envelope, nullptr) << chk.message;
  expect_logic_error([&] { (void)svc::decode_reply(*chk.envelope); }, error_code::invalid_argument, {"reason", "42"});
}

TEST(DecodeErrors, NegativeValuesReachTheValidator) {
  // Signed wire fields are copied as they are; rejecting them is validate()'s job.
  auto in = rich_input();
  in.pending[0].per_replica.cpu_milli = -5;
  in.pending[1].estimated_duration = -1;
  auto const dec = decode_ok(encoded_request(in));
  EXPECT_EQ(dec.input.pending[0].per_replica.cpu_milli, -5);
  EXPECT_EQ(dec.input.pending[1].estimated_duration, -1);
  expect_logic_error([&] { placer::validate(dec.input); }, error_code::invalid_argument, {"cpu_milli"});
}

TEST(EncodeErrors, ValuesThatDoNotFitTheWire) {
  auto in = rich_input();
  in.pending[2].replicas = -1;
  flatbuffers::FlatBufferBuilder fbb;
  expect_logic_error([&] { svc::encode_request(fbb, {}, in); }, error_code::invalid_argument,
                     {"replicas", "elastic-batch"});
  in = rich_input();
  in.state.nodes[0].gpu_free_milli[1] = -1;
  expect_logic_error([&] { svc::encode_request(fbb, {}, in); }, error_code::invalid_argument,
                     {"gpu_free_milli", "gpu-a"});
  in = rich_input();
  in.running[0].replicas[0].gpus = {300};
  expect_logic_error([&] { svc::encode_request(fbb, {}, in); }, error_code::invalid_argument, {"gpus"});
  in = rich_input();
  auto jd = rich_job_delta(in);
  expect_logic_error([&] { svc::encode_request(fbb, {}, in, nullptr, &jd); }, error_code::invalid_argument,
                     {"job delta without a cluster delta"});
  jd.started[0].replicas[0].gpus = {300};
  cluster_delta const d{42, 43, {}, {}, {}};
  expect_logic_error([&] { svc::encode_request(fbb, {}, in, &d, &jd); }, error_code::invalid_argument,
                     {"job delta started 0 ('started')", "gpus"});
}

TEST(ErrorCodes, MappingAndNames) {
  EXPECT_EQ(svc::error_code_to_wire(error_code::invalid_argument), wire::ErrorCode::InvalidArgument);
  EXPECT_EQ(svc::error_code_to_wire(error_code::failed_precondition), wire::ErrorCode::FailedPrecondition);
  EXPECT_EQ(svc::error_code_to_wire(error_code::stale_epoch), wire::ErrorCode::StaleEpoch);
  EXPECT_EQ(svc::error_code_to_wire(error_code::resource_exhausted), wire::ErrorCode::ResourceExhausted);
  EXPECT_EQ(svc::error_code_to_wire(error_code::deadline_exceeded), wire::ErrorCode::DeadlineExceeded);
  EXPECT_EQ(svc::error_code_to_wire(error_code::unavailable), wire::ErrorCode::Unavailable);
  EXPECT_EQ(svc::error_code_to_wire(error_code::internal), wire::ErrorCode::Internal);
  EXPECT_STREQ(svc::error_code_name(wire::ErrorCode::Ok), "Ok");
  EXPECT_STREQ(svc::error_code_name(wire::ErrorCode::StaleEpoch), "StaleEpoch");
  EXPECT_STREQ(svc::error_code_name(wire::ErrorCode::Malformed), "Malformed");
  EXPECT_STREQ(svc::error_code_name(static_cast<wire::ErrorCode>(999)), "Unknown");
}

TEST(DecodeParts, PolicyDefaults) {
  auto const p = svc::decode_policy(nullptr);
  expect_eq(policy{}, p);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreatePolicy(fbb, wire::Algorithm::Greedy));  // no weights table
  auto const q = svc::decode_policy(flatbuffers::GetRoot<wire::Policy>(fbb.GetBufferPointer()));
  EXPECT_EQ(q.algo, algorithm::greedy);
  EXPECT_EQ(q.w.binpack, weights{}.binpack);
  EXPECT_EQ(q.w.pool_affinity, weights{}.pool_affinity);
  // No queue table: every cross-round policy off, loaning on.
  EXPECT_FALSE(q.queue.any_cross_round());
  EXPECT_TRUE(q.queue.loaning);
}

TEST(DecodeParts, QueuePolicyOutOfRangeRejected) {
  auto decode = [](auto make) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreatePolicy(fbb, wire::Algorithm::Placer, 0, 0, make(fbb)));
    return svc::decode_policy(flatbuffers::GetRoot<wire::Policy>(fbb.GetBufferPointer()));
  };
  auto const ok = decode([](auto& fbb) { return wire::CreateQueuePolicy(fbb, wire::BackfillMode::Easy); });
  EXPECT_EQ(ok.queue.backfill, backfill_mode::easy);
  EXPECT_EQ(ok.queue.max_reservations, 8);
  EXPECT_THROW(decode([](auto& fbb) { return wire::CreateQueuePolicy(fbb, static_cast<wire::BackfillMode>(9)); }),
               logic_error);
  EXPECT_THROW(decode([](auto& fbb) { return wire::CreateQueuePolicy(fbb, wire::BackfillMode::Easy, 0); }),
               logic_error);
  EXPECT_THROW(decode([](auto& fbb) {
                 return wire::CreateQueuePolicy(fbb, wire::BackfillMode::Off, 8, false, true, -1);
               }),
               logic_error);
  EXPECT_THROW(decode([](auto& fbb) {
                 return wire::CreateQueuePolicy(fbb, wire::BackfillMode::Off, 8, false, true, 0, false, true, 1.5F);
               }),
               logic_error);
}

TEST(DecodeParts, QueueOrderAndAging) {
  // Absent: submission order, no aging; an unknown order or an aging that
  // cannot be computed is refused, naming the field.
  auto decode = [](wire::QueueOrder order, std::int32_t weight, std::int64_t max_age) {
    flatbuffers::FlatBufferBuilder fbb;
    auto const age = wire::CreateAging(fbb, weight, max_age, false);
    fbb.Finish(wire::CreatePolicy(fbb, wire::Algorithm::Placer, 0, 0, 0, false, order, age));
    return svc::decode_policy(flatbuffers::GetRoot<wire::Policy>(fbb.GetBufferPointer()));
  };
  EXPECT_EQ(svc::decode_policy(nullptr).order, queue_order::fifo);
  auto const p = decode(wire::QueueOrder::Pack, 60, 3600);
  EXPECT_EQ(p.order, queue_order::pack);
  EXPECT_EQ(p.age, (aging{60, 3600, false}));
  try {
    (void)decode(static_cast<wire::QueueOrder>(7), 0, 1);
    ADD_FAILURE() << "an unknown order was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string(e.what()).find("order"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)decode(wire::QueueOrder::Fifo, -1, 3600), logic_error);
  EXPECT_THROW((void)decode(wire::QueueOrder::Fifo, 10, 0), logic_error);
}

// ------------------------------------------------------------------ apply_delta

cluster small_cluster() { return make_cluster().spines(1).leaves_per_spine(2).nodes_per_leaf(3).gpus(4).build(); }

/// A rejected delta names the problem and leaves the cluster exactly as it was.
void expect_rejected(cluster const& base, cluster_delta const& d, error_code code,
                     std::vector<std::string> const& needles) {
  cluster c = base;
  expect_logic_error([&] { apply_delta(c, d); }, code, needles);
  expect_eq(c, base);
}

std::vector<std::string> names(cluster const& c) {
  std::vector<std::string> out;
  for (auto const& n : c.nodes) out.push_back(n.name);
  return out;
}

TEST(ApplyDelta, Changes) {
  auto const base = small_cluster();
  cluster_delta d{base.epoch, base.epoch + 1, {}, {}, {}};
  node x = base.nodes[2];
  x.gpu_free_milli = {0, 0, 500, 1000};
  x.healthy = false;
  d.changed = {{2, x}};
  auto const out = applied(base, d);
  EXPECT_EQ(out.epoch, base.epoch + 1);
  ASSERT_EQ(out.nodes.size(), base.nodes.size());
  expect_eq(out.nodes[2], x);
  expect_eq(out.nodes[1], base.nodes[1]);
  EXPECT_EQ(out.topo.domains.size(), base.topo.domains.size());
}

TEST(ApplyDelta, RemovalsKeepOrder) {
  auto const base = small_cluster();
  cluster_delta d{base.epoch, base.epoch + 5, {}, {4, 0, 2}, {}};  // any order in the list
  auto const out = applied(base, d);
  EXPECT_EQ(names(out), (std::vector<std::string>{base.nodes[1].name, base.nodes[3].name, base.nodes[5].name}));
  EXPECT_EQ(out.epoch, base.epoch + 5);
}

TEST(ApplyDelta, AdditionsAppendAfterSurvivors) {
  auto const base = small_cluster();
  cluster_delta d{base.epoch, base.epoch + 1, {make_node("add-a", 2, 1), make_node("add-b", 0, -1)}, {5}, {}};
  node x = base.nodes[0];
  x.cpu_milli_free = 0;
  d.changed = {{0, x}};
  auto const out = applied(base, d);
  ASSERT_EQ(out.nodes.size(), 7u);
  EXPECT_EQ(out.nodes[0].cpu_milli_free, 0);
  EXPECT_EQ(out.nodes[4].name, base.nodes[4].name);
  EXPECT_EQ(out.nodes[5].name, "add-a");
  EXPECT_EQ(out.nodes[6].name, "add-b");
}

TEST(ApplyDelta, StaleEpoch) {
  auto base = small_cluster();
  base.epoch = 17;
  cluster_delta d{16, 18, {}, {}, {}};
  expect_rejected(base, d, error_code::stale_epoch, {"16", "17"});
}

TEST(ApplyDelta, NewEpochMustAdvance) {
  auto const base = small_cluster();
  cluster_delta d{base.epoch, base.epoch, {}, {}, {}};
  expect_rejected(base, d, error_code::invalid_argument, {"new_epoch"});
}

TEST(ApplyDelta, BadIndices) {
  auto const base = small_cluster();
  auto const e = base.epoch;
  expect_rejected(base, {e, e + 1, {}, {6}, {}}, error_code::invalid_argument, {"removed", "6", "out of range"});
  expect_rejected(base, {e, e + 1, {}, {-1}, {}}, error_code::invalid_argument, {"out of range"});
  expect_rejected(base, {e, e + 1, {}, {}, {{9, base.nodes[0]}}}, error_code::invalid_argument,
                  {"changed", "9", "out of range"});
  expect_rejected(base, {e, e + 1, {}, {1}, {{1, base.nodes[1]}}}, error_code::invalid_argument, {"also changed"});
  expect_rejected(base, {e, e + 1, {}, {2, 2}, {}}, error_code::invalid_argument, {"more than once"});
  expect_rejected(base, {e, e + 1, {}, {}, {{3, base.nodes[0]}, {3, base.nodes[1]}}}, error_code::invalid_argument,
                  {"changed more than once"});
}

TEST(ApplyDelta, ResultIsValidated) {
  auto const base = small_cluster();
  auto const e = base.epoch;
  node bad = base.nodes[0];
  bad.cpu_milli_free = bad.cpu_milli_capacity + 1;
  expect_rejected(base, {e, e + 1, {}, {}, {{0, bad}}}, error_code::invalid_argument,
                  {"changed[0]", base.nodes[0].name, "cpu_milli_free"});
  node far = make_node("far", 1, 99);  // domain index beyond the topology
  expect_rejected(base, {e, e + 1, {far}, {}, {}}, error_code::invalid_argument, {"added[0]", "far", "domain 99"});
  // A bad node late in a delta whose other parts are fine: nothing of it lands.
  node fine = base.nodes[1];
  fine.cpu_milli_free = 0;
  node unnamed = make_node("", 2, -1);
  expect_rejected(base, {e, e + 1, {make_node("ok", 2, -1), unnamed}, {4}, {{1, fine}, {2, bad}}},
                  error_code::invalid_argument, {"changed[1]"});
  expect_rejected(base, {e, e + 1, {make_node("ok", 2, -1), unnamed}, {4}, {{1, fine}}}, error_code::invalid_argument,
                  {"added[1]", "has no name"});
}

node random_node(std::mt19937& rng, int serial, std::int32_t domains) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  node n = make_node("rnd-" + std::to_string(serial), pick(0, 8), pick(-1, domains - 1));
  for (auto& f : n.gpu_free_milli) f = pick(0, 1000);
  if (pick(0, 2) == 0) {
    n.gpu_healthy.resize(n.gpu_free_milli.size());
    for (auto& h : n.gpu_healthy) h = static_cast<std::uint8_t>(pick(0, 1));
  }
  if (pick(0, 2) == 0) {
    n.gpu_nvlink.resize(n.gpu_free_milli.size());
    for (auto& l : n.gpu_nvlink) l = static_cast<std::uint8_t>(pick(0, 3));
  }
  n.cpu_milli_capacity = pick(0, 256) * 1000;
  n.cpu_milli_free = pick(0, static_cast<int>(n.cpu_milli_capacity));
  n.memory_mib_free = pick(0, static_cast<int>(n.memory_mib_capacity));
  n.pool = static_cast<pool_kind>(pick(0, 2));
  n.loanable = pick(0, 1) == 1;
  n.healthy = pick(0, 5) != 0;
  if (pick(0, 3) == 0) n.labels = {"l" + std::to_string(pick(0, 9))};
  return n;
}

/// Breaks a valid delta in one of the ways apply_delta must reject, late in
/// its lists where possible, so that everything before the fault is fine.
void break_delta(cluster_delta& d, std::size_t n_nodes, std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  switch (pick(0, 5)) {
    case 0: d.base_epoch -= 1; break;                                         // stale
    case 1: d.changed.push_back({static_cast<std::int32_t>(n_nodes), {}}); break;  // out of range
    case 2:  // a node both changed and removed, or removed twice
      if (!d.changed.empty()) {
        d.removed.push_back(d.changed.back().index);
      } else if (!d.removed.empty()) {
        d.removed.push_back(d.removed.front());
      } else {
        d.new_epoch = d.base_epoch;
      }
      break;
    case 3: d.added.push_back(make_node("", 1, -1)); break;  // no name
    case 4:
      if (!d.changed.empty()) {
        d.changed.back().value.memory_mib_free = d.changed.back().value.memory_mib_capacity + 1;
      } else {
        d.added.push_back(make_node("far", 1, 1000));  // no such domain
      }
      break;
    default: d.new_epoch = d.base_epoch; break;  // must advance
  }
}

TEST(ApplyDelta, RandomSequenceMatchesReference) {
  // 1,000 random deltas, each sent through the wire and applied in place,
  // against a reference node list edited directly. One in four is broken
  // on purpose after it was built: it must be rejected and leave the
  // cluster exactly as it was. The undoable form (apply_delta with a
  // delta_undo, as the server and the client use it) gives the same, and
  // reverts to the base.
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  cluster cur = small_cluster();
  auto const domains = static_cast<std::int32_t>(cur.topo.domains.size());
  std::vector<node> ref = cur.nodes;
  int serial = 0;
  int rejected = 0;
  flatbuffers::FlatBufferBuilder fbb;
  round_input jobs_only;
  delta_undo undo;
  for (int step = 0; step < 1000; ++step) {
    cluster_delta d;
    d.base_epoch = cur.epoch;
    d.new_epoch = cur.epoch + 1 + pick(0, 3);
    auto const n = static_cast<int>(ref.size());
    std::vector<int> idx(n);
    for (int i = 0; i < n; ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    int const n_changed = n == 0 ? 0 : pick(0, std::min(n, 3));
    // Keep the cluster between roughly 0 and 40 nodes.
    int const n_removed = n - n_changed == 0 ? 0 : pick(0, std::min(n - n_changed, n > 30 ? 5 : 2));
    int const n_added = pick(0, n < 10 ? 4 : 2);
    for (int k = 0; k < n_changed; ++k) d.changed.push_back({idx[k], random_node(rng, serial++, domains)});
    for (int k = 0; k < n_removed; ++k) d.removed.push_back(idx[n_changed + k]);
    for (int k = 0; k < n_added; ++k) d.added.push_back(random_node(rng, serial++, domains));
    bool const broken = pick(0, 3) == 0;
    if (broken) break_delta(d, ref.size(), rng);

    svc::encode_request(fbb, {static_cast<std::uint64_t>(step), "s", 0}, jobs_only, &d);
    auto const chk = svc::check_envelope(fbb.GetBufferPointer(), fbb.GetSize());
    ASSERT_NE(chk.envelope, nullptr) << "step " << step << ": " << chk.message;
    auto const dec = svc::decode_request(*chk.envelope);
    ASSERT_TRUE(dec.delta.has_value());
    // The undoable form on a copy: the same result, and revert_delta gives
    // the base back exactly (its buffers reused from step to step).
    cluster undone = cur;
    if (broken) {
      EXPECT_THROW(apply_delta(undone, *dec.delta, undo), logic_error) << "step " << step;
      EXPECT_FALSE(undo.armed);
      EXPECT_FALSE(undo.lost);
      revert_delta(undone, undo);  // nothing to revert
      expect_eq(undone, cur);
    } else {
      apply_delta(undone, *dec.delta, undo);
      ASSERT_TRUE(undo.armed);
      ASSERT_EQ(undone.epoch, d.new_epoch) << "step " << step;
      cluster const moved = undone;
      revert_delta(undone, undo);
      EXPECT_FALSE(undo.armed);
      expect_eq(undone, cur);
      apply_delta(undone, *dec.delta, undo);  // and again, to compare with apply_delta below
      ASSERT_TRUE(same(undone.nodes, moved.nodes)) << "step " << step;
    }
    if (broken) {
      auto const before = cur.epoch;
      EXPECT_THROW(apply_delta(cur, *dec.delta), logic_error) << "step " << step;
      ++rejected;
      ASSERT_EQ(cur.epoch, before) << "step " << step;
      ASSERT_TRUE(same(cur.nodes, ref)) << "step " << step << ": a rejected delta changed the cluster";
      continue;
    }

    // Reference: change in place, erase removals from the back, append.
    for (auto const& u : d.changed) ref[u.index] = u.value;
    auto rem = d.removed;
    std::sort(rem.rbegin(), rem.rend());
    for (auto i : rem) ref.erase(ref.begin() + i);
    ref.insert(ref.end(), d.added.begin(), d.added.end());

    apply_delta(cur, *dec.delta);
    ASSERT_EQ(cur.epoch, d.new_epoch) << "step " << step;
    ASSERT_TRUE(same(cur.nodes, ref)) << "step " << step;
    ASSERT_TRUE(same(undone.nodes, ref)) << "step " << step << ": the undoable form differs";
  }
  // From scratch: the reference nodes as a full snapshot at the same epoch.
  cluster rebuilt = small_cluster();
  rebuilt.nodes = ref;
  rebuilt.epoch = cur.epoch;
  expect_eq(rebuilt, cur);
  EXPECT_GT(serial, 1000);
  EXPECT_GT(rejected, 150);
}

// ------------------------------------------------------------------ apply_job_delta

job named_job(std::string name, int gpus) {
  job j;
  j.name = std::move(name);
  j.per_replica = {gpus, 1000, 1000, 1024};
  return j;
}

running_job named_running(std::string name, std::int32_t node) {
  running_job r;
  r.name = std::move(name);
  r.per_replica = {1, 1000, 1000, 1024};
  r.replicas = {{node, {0}, 1000}};
  return r;
}

/// Lists to apply job deltas to: pending a..e, running r0..r2.
struct job_lists {
  std::vector<job> pending{named_job("a", 1), named_job("b", 2), named_job("c", 0), named_job("d", 8),
                           named_job("e", 1)};
  std::vector<running_job> running{named_running("r0", 0), named_running("r1", 1), named_running("r2", 2)};
};

template <class Job>
std::vector<std::string> names(std::vector<Job> const& v) {
  std::vector<std::string> out;
  for (auto const& j : v) out.push_back(j.name);
  return out;
}

/// A rejected job delta names the problem and writes nothing.
void expect_rejected(job_lists const& base, job_delta const& d, std::vector<std::string> const& needles) {
  job_lists to;  // what the caller's buffers held
  to.pending = {named_job("held before", 1)};
  expect_logic_error([&] { apply_job_delta(base.pending, base.running, d, to.pending, to.running); },
                     error_code::invalid_argument, needles);
  EXPECT_EQ(names(to.pending), (std::vector<std::string>{"held before"}));
  EXPECT_EQ(names(to.running), names(job_lists{}.running));
}

TEST(ApplyJobDelta, LeaveKeepsOrderThenArrivalsAppend) {
  job_lists const base;
  job_delta d;
  d.removed = {"d", "a"};  // any order in the list
  d.added = {named_job("x", 1), named_job("y", 4)};
  d.finished = {"r1"};
  d.started = {named_running("r3", 3)};
  job_lists to;  // written over, whatever it held
  to.pending.resize(9);
  apply_job_delta(base.pending, base.running, d, to.pending, to.running);
  EXPECT_EQ(names(to.pending), (std::vector<std::string>{"b", "c", "e", "x", "y"}));
  EXPECT_EQ(to.pending[4].per_replica.gpus, 4);
  EXPECT_EQ(names(to.running), (std::vector<std::string>{"r0", "r2", "r3"}));
  EXPECT_EQ(to.running[2].replicas, d.started[0].replicas);
}

TEST(ApplyJobDelta, ANameThatLeavesAndArrivesIsReplaced) {
  job_lists const base;
  job_delta d;
  d.removed = {"b"};
  d.added = {named_job("b", 8)};
  d.finished = {"r0"};
  d.started = {named_running("r0", 5)};
  job_lists to;
  apply_job_delta(base.pending, base.running, d, to.pending, to.running);
  EXPECT_EQ(names(to.pending), (std::vector<std::string>{"a", "c", "d", "e", "b"}));
  EXPECT_EQ(to.pending[4].per_replica.gpus, 8);
  EXPECT_EQ(names(to.running), (std::vector<std::string>{"r1", "r2", "r0"}));
  EXPECT_EQ(to.running[2].replicas[0].node, 5);
}

TEST(ApplyJobDelta, EmptyDeltaCopiesTheLists) {
  job_lists const base;
  job_lists to;
  to.pending.clear();
  apply_job_delta(base.pending, base.running, {}, to.pending, to.running);
  expect_all_eq(base.pending, to.pending);
  expect_all_eq(base.running, to.running);
}

TEST(ApplyJobDelta, BadNamesAreRejectedBeforeAnythingIsWritten) {
  job_lists const base;
  auto delta = [](std::vector<std::string> removed, std::vector<job> added, std::vector<std::string> finished = {},
                  std::vector<running_job> started = {}) {
    return job_delta{std::move(added), std::move(removed), std::move(started), std::move(finished)};
  };
  expect_rejected(base, delta({"a", "zz"}, {}), {"removed[1] ('zz') is not a pending job"});
  expect_rejected(base, delta({"c", "c"}, {}), {"removed[1] ('c') is named twice in removed"});
  expect_rejected(base, delta({}, {named_job("x", 1), named_job("x", 2)}), {"added[1] ('x') is named twice in added"});
  expect_rejected(base, delta({"a"}, {named_job("e", 1)}), {"added[0] ('e') is already a pending job"});
  expect_rejected(base, delta({}, {}, {"r9"}), {"finished[0] ('r9') is not a running job"});
  expect_rejected(base, delta({}, {}, {}, {named_running("r2", 0)}), {"started[0] ('r2') is already a running job"});
  // A pending name is not a running one, nor the other way round.
  expect_rejected(base, delta({"r0"}, {}), {"removed[0] ('r0') is not a pending job"});
  expect_rejected(base, delta({}, {}, {"a"}), {"finished[0] ('a') is not a running job"});
  // A fine pending part does not land when the running part is wrong.
  expect_rejected(base, delta({"a"}, {named_job("x", 1)}, {"r0", "r0"}), {"finished[1] ('r0') is named twice"});
  // A full list may repeat a name; removing it by name is then ambiguous.
  job_lists dup;
  dup.pending.push_back(named_job("b", 4));
  expect_rejected(dup, delta({"b"}, {}), {"removed[0] ('b') names more than one pending job"});
  job_lists to;
  apply_job_delta(dup.pending, dup.running, delta({"a"}, {}), to.pending, to.running);  // the rest still moves
  EXPECT_EQ(names(to.pending), (std::vector<std::string>{"b", "c", "d", "e", "b"}));
}

// ------------------------------------------------------------------ JSON / files

struct temp_file {
  std::filesystem::path path;
  explicit temp_file(std::string const& name, std::string const& text = {}) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("placer_codec_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + name);
    std::ofstream(path, std::ios::binary) << text;
  }
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  [[nodiscard]] std::string str() const { return path.string(); }
};

TEST(Json, ClusterRoundTrip) {
  auto const c = rich_input().state;
  auto const text = svc::cluster_to_json(c);
  EXPECT_NE(text.find("\"gpu_free_milli\""), std::string::npos) << text;  // strict JSON: quoted names
  temp_file f("cluster.json", text);
  expect_eq(c, svc::read_cluster_file(f.str()));
}

TEST(Json, JobsRoundTrip) {
  auto const in = rich_input();
  svc::job_batch b;
  b.pending = in.pending;
  b.running = in.running;
  b.pol = in.pol;
  b.has_policy = true;
  b.now = in.now;
  temp_file f("jobs.json", svc::jobs_to_json(b));
  auto const back = svc::read_jobs_file(f.str());
  expect_all_eq(b.pending, back.pending);
  expect_all_eq(b.running, back.running);
  EXPECT_TRUE(back.has_policy);
  expect_eq(b.pol, back.pol);
  EXPECT_EQ(back.now, b.now);
}

TEST(Json, JobsWithoutPolicy) {
  svc::job_batch b;
  job j;
  j.name = "solo";
  b.pending = {j};
  temp_file f("jobs.json", svc::jobs_to_json(b));
  auto const back = svc::read_jobs_file(f.str());
  EXPECT_FALSE(back.has_policy);
  expect_all_eq(b.pending, back.pending);
  expect_eq(policy{}, back.pol);
}

TEST(Json, HandWrittenCluster) {
  temp_file f("hand.json",
              "// comments are fine\n{\n  epoch: 3,\n  nodes: [\n    { name: \"n0\", gpu_model: \"H100\", "
              "gpu_free_milli: [1000, 500], cpu_milli_capacity: 8000, cpu_milli_free: 8000, pool: \"Training\" }\n  ]\n}\n");
  auto const c = svc::read_cluster_file(f.str());
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.epoch, 3u);
  EXPECT_EQ(c.nodes[0].gpu_free_milli, (std::vector<std::int32_t>{1000, 500}));
  EXPECT_EQ(c.nodes[0].pool, pool_kind::training);
  EXPECT_TRUE(c.nodes[0].healthy);  // schema default
}

TEST(Json, SyntaxErrorNamesFileAndLine) {
  temp_file f("broken.json", "{\n  \"epoch\": 1,\n  \"nodes\": [ { \"name\": \"a\" } \n  oops\n}\n");
  expect_logic_error([&] { (void)svc::read_cluster_file(f.str()); }, error_code::invalid_argument,
                     {f.str(), "line 4"});
  temp_file g("broken_jobs.json", "{ \"pending\": [ { \"name\": \"x\" } ] }");  // demand is required
  expect_logic_error([&] { (void)svc::read_jobs_file(g.str()); }, error_code::invalid_argument,
                     {g.str(), "line 1", "demand"});
}

TEST(Json, InvalidClusterNamesFile) {
  temp_file f("invalid.json", R"({"nodes": [{"name": "a", "cpu_milli_capacity": 1, "cpu_milli_free": 2}]})");
  expect_logic_error([&] { (void)svc::read_cluster_file(f.str()); }, error_code::invalid_argument,
                     {f.str(), "cpu_milli_free"});
}

TEST(Json, MissingFile) {
  std::string const path = "/nonexistent/placer/cluster.json";
  expect_logic_error([&] { (void)svc::read_cluster_file(path); }, error_code::invalid_argument,
                     {path + ": cannot open file"});
  expect_logic_error([&] { (void)svc::read_jobs_file(path); }, error_code::invalid_argument,
                     {path + ": cannot open file"});
}

TEST(Json, EnvelopeToJson) {
  auto const in = rich_input();
  flatbuffers::FlatBufferBuilder fbb;
  svc::encode_reply(fbb, {1, "s", 2}, rich_result(), in);
  auto const text = svc::envelope_to_json(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_NE(text.find("train-gang"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ScheduleReply\""), std::string::npos) << text;
  EXPECT_NE(text.find("GangIncomplete"), std::string::npos) << text;
  bytes junk(100, 0x5A);
  expect_logic_error([&] { (void)svc::envelope_to_json(junk.data(), junk.size()); }, error_code::invalid_argument,
                     {"UnknownSchema"});
}

TEST(Json, CsvFilesGoToTraceLoaders) {
  temp_file nodes("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,64000,262144,8,V100M32\n"
                               "openb-node-0002,32000,131072,0,\n");
  auto const c = svc::read_cluster_file(nodes.str());
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].name, "openb-node-0001");
  EXPECT_EQ(c.nodes[0].gpu_count(), 8);
  EXPECT_EQ(c.nodes[1].gpu_count(), 0);
  temp_file pods("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,4000,8192,1,500\n");
  auto const b = svc::read_jobs_file(pods.str());
  ASSERT_EQ(b.pending.size(), 1u);
  EXPECT_EQ(b.pending[0].name, "pod-a");
  EXPECT_EQ(b.pending[0].per_replica.gpu_milli, 500);
  EXPECT_FALSE(b.has_policy);
}

}  // namespace

// The JSON examples shipped in data/examples stay valid as the schema grows,
// and solve with every job placed.
namespace {
TEST(JsonExamples, ParseAndSolve) {
  std::string const dir = std::string(PLACER_SOURCE_DIR) + "/data/examples/";
  placer::round_input in;
  in.state = placer::service::read_cluster_file(dir + "cluster.json");
  auto batch = placer::service::read_jobs_file(dir + "jobs.json");
  in.pending = batch.pending;
  in.pol = batch.pol;
  EXPECT_EQ(in.state.nodes.size(), 4U);
  EXPECT_EQ(in.state.topo.levels(), 3);
  ASSERT_EQ(in.pending.size(), 4U);
  EXPECT_TRUE(in.pending[0].gang);
  EXPECT_EQ(in.pending[0].topo_mode, placer::topology_mode::required);
  EXPECT_TRUE(in.pending[1].distinct_nodes);
  placer::solver s(placer::kernels::make_backend(placer::kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  EXPECT_EQ(r.placements.size(), 4U);
  EXPECT_TRUE(r.unplaced_jobs.empty());
}
}  // namespace
