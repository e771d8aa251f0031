#include "metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <iterator>

namespace placer::service {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

/// Seconds, from 100 us (a small round) to the 5 s default budget and past it.
prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

/// A family of one sample (or one per label set) for the scrape-time state;
/// a deque, so that a family's reference stays good while others are added.
struct family_builder {
  std::deque<MetricFamily> out;
  MetricFamily& add(char const* name, char const* help, MetricType type) {
    out.push_back({name, help, type, {}});
    return out.back();
  }
  static void sample(MetricFamily& f, double v, std::vector<ClientMetric::Label> labels = {}) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f.metric.push_back(std::move(m));
  }
  void one(char const* name, char const* help, MetricType type, double v) { sample(add(name, help, type), v); }
};

}  // namespace

service_metrics::service_metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  rounds_ = &prometheus::BuildCounter()
                 .Name("placer_rounds_total")
                 .Help("Rounds answered, by reply code (Ok, or the error's code)")
                 .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("placer_round_duration_seconds")
                  .Help("How long the server held a round it solved: queue, decode, solve, encode")
                  .Register(*registry_)
                  .Add({}, latency_buckets());
  stages_ = &prometheus::BuildHistogram()
                 .Name("placer_stage_duration_seconds")
                 .Help("Each stage of a solved round (the reply's timing list; total is the solve)")
                 .Register(*registry_);
  placed_ = &prometheus::BuildCounter()
                 .Name("placer_replicas_placed_total")
                 .Help("Replicas placed by solved rounds")
                 .Register(*registry_)
                 .Add({});
  unplaced_ = &prometheus::BuildCounter()
                   .Name("placer_jobs_unplaced_total")
                   .Help("Pending jobs a solved round left unplaced, by reason")
                   .Register(*registry_);
  gar_ = &prometheus::BuildGauge()
              .Name("placer_cluster_gpu_allocation_ratio")
              .Help("GPU allocation ratio after the session's last round (GAR, 0..1)")
              .Register(*registry_);
  gfr_ = &prometheus::BuildGauge()
              .Name("placer_cluster_gpu_fragmentation_ratio")
              .Help("Share of GPU nodes partly allocated after the session's last round (GFR, 0..1)")
              .Register(*registry_);
  frag_ = &prometheus::BuildGauge()
               .Name("placer_cluster_fgd_fragmentation_ratio")
               .Help("FGD fragmentation ratio after the session's last round (0..1)")
               .Register(*registry_);
  captures_ = &prometheus::BuildCounter()
                   .Name("placer_captures_total")
                   .Help("Rounds taken by --capture, by outcome (written, dropped, failed)")
                   .Register(*registry_);
}

service_metrics::~service_metrics() = default;

void service_metrics::round(wire::ErrorCode code, double seconds, round_result const* r, std::string_view session) {
  rounds_->Add({{"code", error_code_name(code)}}).Increment();
  if (r == nullptr) return;
  latency_->Observe(seconds);
  for (auto const& t : r->timing) stages_->Add({{"stage", t.stage}}, latency_buckets()).Observe(t.micros / 1e6);
  std::size_t replicas = 0;
  for (auto const& p : r->placements) replicas += p.replicas.size();
  placed_->Increment(static_cast<double>(replicas));
  for (auto const& u : r->unplaced_jobs) unplaced_->Add({{"reason", to_string(u.reason)}}).Increment();
  if (session.empty()) return;
  std::lock_guard lock(sessions_m_);
  std::string const label(session);
  auto const held = std::find(sessions_.begin(), sessions_.end(), label);
  if (held != sessions_.end()) {
    sessions_.erase(held);
  } else if (sessions_.size() >= max_session_labels) {
    // Bounded cardinality: the least recently solved session's gauges go.
    prometheus::Labels const old{{"session", sessions_.front()}};
    for (auto* f : {gar_, gfr_, frag_}) f->Remove(&f->Add(old));
    sessions_.pop_front();
  }
  sessions_.push_back(label);
  prometheus::Labels const labels{{"session", label}};
  gar_->Add(labels).Set(r->metrics.gar_after);
  gfr_->Add(labels).Set(r->metrics.gfr_after);
  frag_->Add(labels).Set(r->metrics.frag_ratio_after);
}

void service_metrics::capture(char const* outcome) { captures_->Add({{"outcome", outcome}}).Increment(); }

std::string service_metrics::render(health_status const* h) const {
  auto families = registry_->Collect();
  family_builder b;
  b.one("placer_up", "1 when the service's I/O thread answered the scrape's probe", MetricType::Gauge,
        h != nullptr ? 1 : 0);
  if (h != nullptr) {
    b.sample(b.add("placer_info", "The service's backend (worker 0's)", MetricType::Gauge), 1,
             {{"backend", h->backend}});
    b.one("placer_ready", "1 when every worker is served in time (placer health --ready)", MetricType::Gauge,
          h->ready ? 1 : 0);
    b.one("placer_uptime_seconds", "Since the server started", MetricType::Gauge, h->uptime_s);
    b.one("placer_requests_total", "Rounds received (probes not counted)", MetricType::Counter,
          static_cast<double>(h->requests));
    b.one("placer_queue_rounds", "Rounds waiting for a worker", MetricType::Gauge, h->queued_rounds);
    b.one("placer_queue_bytes", "Their bytes", MetricType::Gauge, static_cast<double>(h->queued_bytes));
    b.one("placer_queue_refused_total", "Rounds refused by the per-peer and total queue limits",
          MetricType::Counter, static_cast<double>(h->refused_busy));
    auto& dropped = b.add("placer_queue_dropped_total", "Queued rounds not solved, by why", MetricType::Counter);
    b.sample(dropped, static_cast<double>(h->dropped_expired), {{"reason", "deadline"}});
    b.sample(dropped, static_cast<double>(h->dropped_disconnected), {{"reason", "disconnected"}});
    b.one("placer_curve_handshakes_refused_total", "CURVE clients whose key is not allowed", MetricType::Counter,
          static_cast<double>(h->handshakes_denied));
    b.one("placer_sessions_evicted_total", "Sessions evicted, least recently used first", MetricType::Counter,
          static_cast<double>(h->sessions_evicted));
    b.one("placer_device_faults_total", "Device faults (each round answered on the CPU fallback)",
          MetricType::Counter, static_cast<double>(h->device_faults));
    b.one("placer_connections", "Connections open now", MetricType::Gauge, static_cast<double>(h->connections));
    b.one("placer_transport_held_bytes",
          "What peers make the server hold now: messages being read, rounds waiting, replies not yet read",
          MetricType::Gauge, static_cast<double>(h->held_bytes));
    b.one("placer_transport_memory_budget_bytes", "The bound on placer_transport_held_bytes (--max-queue-mib)",
          MetricType::Gauge, static_cast<double>(h->memory_budget));
    b.one("placer_heartbeats_total", "ZMTP PINGs sent to quiet peers", MetricType::Counter,
          static_cast<double>(h->heartbeats));
    auto& closed = b.add("placer_connections_closed_total",
                         "Connections the server closed, by cause (protocol, denied, handshake_timeout, "
                         "message_timeout, idle, slow_reader, evicted, full)",
                         MetricType::Counter);
    for (auto const& [cause, n] : h->connections_closed) b.sample(closed, static_cast<double>(n), {{"cause", cause}});
    auto& refused = b.add("placer_requests_refused_total",
                          "Messages refused before any worker, by cause (malformed, oversized, memory, queue_rounds, "
                          "queue_bytes, queue_total, deadline)",
                          MetricType::Counter);
    for (auto const& [cause, n] : h->requests_refused) b.sample(refused, static_cast<double>(n), {{"cause", cause}});
    b.one("placer_sessions", "Sessions held, all workers", MetricType::Gauge, static_cast<double>(h->sessions));
    b.one("placer_session_bytes", "What the sessions hold, all workers", MetricType::Gauge,
          static_cast<double>(h->session_bytes));
    auto& state = b.add("placer_worker_state", "1 for each worker's state: idle, busy, or stuck (past --stuck-ms)",
                        MetricType::Gauge);
    auto& busy = b.add("placer_worker_busy_seconds", "How long each worker has been on its round", MetricType::Gauge);
    auto& queued = b.add("placer_worker_queue_rounds", "Rounds waiting for each worker", MetricType::Gauge);
    auto& oldest = b.add("placer_worker_oldest_queued_seconds", "How long each worker's first waiting round has waited",
                         MetricType::Gauge);
    auto& rounds = b.add("placer_worker_rounds_total", "Rounds each worker has answered", MetricType::Counter);
    auto& degraded = b.add("placer_worker_degraded", "1 while a worker runs on its CPU fallback after a device fault",
                           MetricType::Gauge);
    for (std::size_t k = 0; k < h->worker_states.size(); ++k) {
      auto const& w = h->worker_states[k];
      std::string const id = std::to_string(k);
      char const* const now = !w.busy ? "idle" : w.busy_ms > h->stuck_after_ms ? "stuck" : "busy";
      for (char const* s : {"idle", "busy", "stuck"}) {
        b.sample(state, std::string_view(s) == now ? 1 : 0, {{"state", s}, {"worker", id}});
      }
      b.sample(busy, w.busy_ms / 1000, {{"worker", id}});
      b.sample(queued, w.queued, {{"worker", id}});
      b.sample(oldest, w.oldest_queued_ms / 1000, {{"worker", id}});
      b.sample(rounds, static_cast<double>(w.rounds), {{"worker", id}});
      b.sample(degraded, w.degraded ? 1 : 0, {{"worker", id}, {"backend", w.backend}});
    }
  }
  std::move(b.out.begin(), b.out.end(), std::back_inserter(families));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace placer::service
