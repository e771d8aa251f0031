#pragma once
// Wire <-> domain conversion. The only place that includes the generated
// FlatBuffers header; solver/ and kernels/ never see wire types.
//
//   flatbuffers::FlatBufferBuilder fbb;
//   placer::service::encode_request(fbb, header, input);     // client side
//   auto msg = placer::service::parse_envelope(data, size);  // server side: verify first
//
// Every inbound buffer goes through the FlatBuffers verifier before any
// field is read; decode errors throw placer::logic_error with a code that
// maps onto wire::ErrorCode (error_code_to_wire).

#include <placer/schemas/placement_generated.h>
#include <placer/service/job_delta.hpp>
#include <placer/solver/model.hpp>
#include <placer/topology/error.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace placer::service {

/// Largest message the service accepts (bytes); larger gets ResourceExhausted.
inline constexpr std::size_t default_max_message_bytes = 256u << 20;

struct request_header {
  request_header(std::uint64_t id = 0, std::string sess = {}, std::uint64_t sent = 0, std::string secret = {})
      : request_id(id), session(std::move(sess)), sent_at_us(sent), session_secret(std::move(secret)) {}
  std::uint64_t request_id = 0;
  std::string session;
  std::uint64_t sent_at_us = 0;
  std::string session_secret;  ///< without CURVE: the session's owner's secret (server-issued)
};

/// A decoded ScheduleRequest: the round, plus deltas when the request moves
/// the session's state instead of sending it. `delta` moves the cluster
/// (input.state is then the caller's to fill from the session) and carries
/// the epochs; `jobs` moves the pending and running jobs (input.pending and
/// input.running are then the caller's to fill), and comes with a `delta`,
/// one without node changes when the request carries only a JobDelta.
struct decoded_request {
  request_header header;
  round_input input;
  std::optional<cluster_delta> delta;
  std::optional<job_delta> jobs;
};

/// Outcome of checking raw bytes: the verified envelope or an error.
struct envelope_check {
  wire::Envelope const* envelope = nullptr;  ///< non-null when ok
  wire::ErrorCode code = wire::ErrorCode::Ok;
  std::string message;
};

/// Identifier check, size check, verifier. Never reads an unverified field.
envelope_check check_envelope(void const* data, std::size_t size,
                              std::size_t max_bytes = default_max_message_bytes);

/// Converts a verified ScheduleRequest; throws logic_error(invalid_argument)
/// on content the domain model cannot hold: a body that is not a
/// ScheduleRequest, both or neither of cluster/delta, a job_delta with a
/// cluster or with pending/running lists or at other epochs than the
/// delta's, an unknown enum value, an unsigned count or index above
/// INT32_MAX. Everything else (negative demands, bad indices...) is copied
/// as is for placer::validate to reject.
decoded_request decode_request(wire::Envelope const& env);
/// The same into `out`, reusing its strings and vectors: decoding a steady
/// stream of similar requests into one object allocates nothing. With a
/// delta, out.input.state is left as it was (the caller fills it from the
/// session), and with a job delta so are the job lists; after a throw, `out`
/// holds a partly decoded request.
void decode_request(wire::Envelope const& env, decoded_request& out);

/// Domain -> wire. Each encoder clears `fbb` first and finishes it as a
/// "PLCR" Envelope. Throws logic_error(invalid_argument) when a domain value
/// does not fit its wire type (a negative count or index, a GPU index > 255).
/// encode_reply with an `encode_stage` name appends one stage of that name
/// to the reply's timing list: this call's own time up to the timing list
/// (what follows it is a few dozen bytes).
/// encode_request sends `delta` instead of in.state, and `jobs` instead of
/// in.pending and in.running; `jobs` needs a `delta` (its epochs), which is
/// left out of the message when it changes no node.
void encode_request(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, round_input const& in,
                    cluster_delta const* delta = nullptr, job_delta const* jobs = nullptr);
void encode_reply(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, round_result const& r,
                  round_input const& in, char const* encode_stage = nullptr);
/// `retry_after_ms`: a hint for ResourceExhausted from a full queue (0 = none).
void encode_error(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, wire::ErrorCode code,
                  std::string const& message, std::uint32_t retry_after_ms = 0);

/// A decoded reply as the client sees it (error replies become status != Ok).
struct decoded_reply {
  request_header header;
  wire::ErrorCode code = wire::ErrorCode::Ok;
  std::string message;
  std::uint32_t retry_after_ms = 0;  ///< the server's hint with a full-queue ResourceExhausted
  round_result result;
};
decoded_reply decode_reply(wire::Envelope const& env);

/// What a HealthReply carries (schemas/placement.fbs).
struct worker_health {
  bool busy = false;
  double busy_ms = 0;           ///< how long its current round has run
  std::uint32_t queued = 0;     ///< rounds waiting for it
  double oldest_queued_ms = 0;  ///< how long the first of them has waited
  std::uint64_t rounds = 0;     ///< rounds it has answered
  std::string backend;          ///< what it solves with now
  bool degraded = false;        ///< on its CPU fallback since a device fault
  std::string degraded_reason;  ///< the fault
};
struct health_status {
  std::string backend;
  std::uint32_t workers = 0;
  double uptime_s = 0;
  std::uint64_t requests = 0, rounds_ok = 0, errors = 0;
  bool ready = false;          ///< every worker has a backend and none is stuck
  std::string not_ready;       ///< why, when not ready
  double stuck_after_ms = 0;   ///< the server's threshold
  std::vector<worker_health> worker_states;
  std::uint32_t queued_rounds = 0;
  std::uint64_t queued_bytes = 0, refused_busy = 0, dropped_expired = 0, dropped_disconnected = 0;
  std::uint64_t handshakes_denied = 0, sessions_evicted = 0, session_bytes = 0, sessions = 0;
  bool degraded = false;  ///< a worker runs on its CPU fallback
  std::uint64_t device_faults = 0;
  std::uint64_t connections = 0, held_bytes = 0, memory_budget = 0, heartbeats = 0;
  std::vector<std::pair<std::string, std::uint64_t>> connections_closed;  ///< by cause
  std::vector<std::pair<std::string, std::uint64_t>> requests_refused;    ///< by cause
};
void encode_health_request(flatbuffers::FlatBufferBuilder& fbb, request_header const& h);
void encode_health_reply(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, health_status const& s);
/// Throws logic_error(invalid_argument) when the body is not a HealthReply
/// (an Error body included: its message is in the exception's).
health_status decode_health_reply(wire::Envelope const& env);

wire::ErrorCode error_code_to_wire(error_code c);
char const* error_code_name(wire::ErrorCode c);

// Conversions of the parts, shared with the JSON I/O.
cluster decode_cluster(wire::Cluster const& c);
flatbuffers::Offset<wire::Cluster> encode_cluster(flatbuffers::FlatBufferBuilder& fbb, cluster const& c);
job decode_job(wire::Job const& j);
running_job decode_running(wire::RunningJob const& r);
policy decode_policy(wire::Policy const* p);
void decode_queues(flatbuffers::Vector<flatbuffers::Offset<wire::Queue>> const* v, std::vector<queue_spec>& out);
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Queue>>> encode_queues(
    flatbuffers::FlatBufferBuilder& fbb, std::vector<queue_spec> const& v);
flatbuffers::Offset<wire::Job> encode_job(flatbuffers::FlatBufferBuilder& fbb, job const& j);
flatbuffers::Offset<wire::RunningJob> encode_running(flatbuffers::FlatBufferBuilder& fbb, running_job const& r);
flatbuffers::Offset<wire::Policy> encode_policy(flatbuffers::FlatBufferBuilder& fbb, policy const& p);

}  // namespace placer::service
