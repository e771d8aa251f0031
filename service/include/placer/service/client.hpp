#pragma once
// placer::client: send a round to a Placer service and wait for the reply.
//
//   placer::client c({.endpoint = "tcp://127.0.0.1:5555", .timeout_ms = 2000});
//   placer::service::decoded_reply r = c.solve(input);   // throws client_error on timeout
//   if (r.code != placer::wire::ErrorCode::Ok) ... r.message ...
//
// A DEALER socket: replies are matched by request id, so a late reply to a
// timed-out request is discarded rather than mistaken for the next one.
// After a timeout the socket is rebuilt (a restarted server is reached anew).
//
// Failover (docs/architecture.md, "Failover"): `endpoint` may name several
// replicas, "tcp://a:5555,tcp://b:5555". A round that is lost (no reply in
// time, or the connection refused or dropped while it was in flight) goes
// to the next endpoint at once, as a full snapshot of the session, and the
// deltas after it go there; a ResourceExhausted with a retry hint is sent
// again to the same endpoint after the hint, `busy_retries` times, and then
// to the next. Every call returns the reply to exactly one round: a late
// reply to an attempt given up on is dropped. Retries are bounded in count
// (`retries`) and time (`retry_budget_ms`), with jittered back-off once
// every endpoint has failed in the call.

#include <placer/service/codec.hpp>
#include <placer/service/curve.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace placer {

/// The service did not answer in time, or the endpoint is malformed.
class client_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where the client's side of one round trip went, µs.
struct round_trip_timing {
  double encode_us = 0;  ///< the request built (a delta applied to the mirror, encoded)
  double decode_us = 0;  ///< the reply verified and decoded
  double total_us = 0;   ///< the whole call: encode, send, wait, decode
};

struct client_options {
  /// One endpoint, or several replicas separated by commas (failover, above).
  std::string endpoint = "tcp://127.0.0.1:5555";
  int timeout_ms = 5000;
  std::string session;  ///< keys the server's cluster state for deltas; "" = random
  /// Times a round is sent again after it was lost, on a rebuilt socket,
  /// to the next endpoint (the same one when there is one: a server that
  /// died with the round in flight, then restarted). With several
  /// endpoints, at least once to each of the others. A resent delta the
  /// server already applied, or one a restarted server does not know, is
  /// answered StaleEpoch and resynced as usual, so each call still returns
  /// the reply to exactly one round.
  int retries = 0;
  /// CurveZMQ (curve.hpp): the server's public key (Z85) and this client's
  /// key pair, which the server must list; empty = a plain connection. A
  /// server that refuses the key never answers: calls time out.
  std::string server_key{};
  service::curve_keypair keys{};
  /// No attempt starts, and no back-off ends, once this long has passed
  /// since the call began (ms; 0 = no bound but `retries`): a call takes at
  /// most this and one more timeout.
  int retry_budget_ms = 30000;
  /// Back-off before a call tries again an endpoint that already failed in
  /// it: this, doubled each time up to `backoff_max_ms`, times a random
  /// factor in [0.5, 1) (ms). Moving to an endpoint not yet tried is at once.
  int backoff_ms = 50;
  int backoff_max_ms = 2000;
  /// A ResourceExhausted with a retry hint (a full queue) is sent again to
  /// the same endpoint, not before the hint (times a random factor in
  /// [1, 1.5)), this many times; then it counts as lost there. One without
  /// a hint (a round over the server's limits) is returned as it is.
  int busy_retries = 2;
};

class client {
 public:
  explicit client(client_options opt);
  ~client();
  client(client const&) = delete;
  client& operator=(client const&) = delete;

  /// Sends one full round (cluster snapshot + jobs) and waits for the reply.
  /// The client keeps the round as its mirror of the session's state.
  service::decoded_reply solve(round_input const& in);
  /// Sends a round as a delta against the session's cluster, with the jobs
  /// in full (jobs_only's state is ignored). The delta is applied to the
  /// client's mirror first (so a bad delta fails here); if the server
  /// answers StaleEpoch (it was restarted, or lost the session), the client
  /// resends the full, updated snapshot by itself and returns that reply.
  /// Needs a prior solve().
  service::decoded_reply solve_delta(cluster_delta const& delta, round_input const& jobs_only);
  /// The same with the jobs as a delta too: `delta` moves the cluster (its
  /// node lists may be empty) and carries the epochs, `jobs` moves the
  /// pending and running jobs of the session's last round; the policy, now
  /// and deadline are `rest`'s (its state and jobs are ignored). A bad job
  /// delta fails here too, and a resync sends the updated jobs in full.
  service::decoded_reply solve_delta(cluster_delta const& delta, job_delta const& jobs, round_input const& rest);
  /// Sends the caller's whole round as the smallest request the session
  /// allows, working out the deltas itself against the last accepted round:
  /// the nodes that differ, and the jobs that left and arrived by name (a
  /// job whose fields changed, or that moved in the queue, leaves and
  /// arrives again at the end, as a job delta orders them). Needs
  /// in.state.epoch above the session's, the same number of nodes and the
  /// same topology; otherwise, and for the first round, a full snapshot.
  /// Names repeated within a list send that list in full (and the server
  /// refuses a round with two pending or two running jobs of one name).
  service::decoded_reply solve_incremental(round_input const& in);
  /// The last round the server accepted, as it was solved: the session's
  /// cluster and jobs (after the deltas), with that round's policy, now and
  /// deadline. Its reply's job indices refer to this pending list. Null
  /// before the first.
  [[nodiscard]] round_input const* last_round() const { return mirror_ ? &*mirror_ : nullptr; }
  /// Asks the service how it is (a HealthRequest, which its I/O thread
  /// answers without queueing behind rounds). Throws client_error when it
  /// does not answer within the timeout (no retries).
  service::health_status health();
  /// Full snapshots sent because the server did not hold the session.
  [[nodiscard]] std::uint64_t resyncs() const { return resyncs_; }
  /// Requests sent again after a timeout (client_options::retries).
  [[nodiscard]] std::uint64_t retries() const { return retries_; }
  /// Rounds sent to another endpoint than the one holding the session
  /// (each as a full snapshot, also counted in resyncs()).
  [[nodiscard]] std::uint64_t failovers() const { return failovers_; }
  /// Rounds sent again after a ResourceExhausted with a retry hint.
  [[nodiscard]] std::uint64_t busy_retries() const { return busy_retries_; }
  /// The endpoints (client_options::endpoint split at its commas) and the
  /// one the next request goes to.
  [[nodiscard]] std::vector<std::string> const& endpoints() const;
  [[nodiscard]] std::string const& current_endpoint() const;
  /// Sends raw bytes (tests: malformed requests) and returns the raw reply.
  std::vector<std::uint8_t> roundtrip(void const* data, std::size_t size, std::uint64_t request_id);

  /// The last round trip's wall time and the client's part of it.
  [[nodiscard]] round_trip_timing const& last_timing() const { return last_timing_; }
  [[nodiscard]] std::string const& session() const { return opt_.session; }
  /// What the server issued for the session (without CURVE; "" before its
  /// first round): sent with every request, so the session stays this
  /// client's alone, across reconnects.
  [[nodiscard]] std::string const& session_secret() const { return secret_; }
  /// Drops the connection and opens a new one (to the same endpoint), as
  /// the client does itself after a timeout; the session stays this client's.
  void reconnect();

 private:
  /// Encodes, sends, waits, decodes; the round trip started at `t0`.
  /// `while_waiting` runs once the request is on its way (each attempt's).
  service::decoded_reply send(round_input const& in, cluster_delta const* delta, job_delta const* jobs,
                              std::chrono::steady_clock::time_point t0,
                              std::function<void()> const& while_waiting = {});
  /// next_ becomes the mirror's cluster moved by `delta`, with `rest`'s
  /// policy, now and deadline: the mirror's cluster itself, moved into
  /// next_ and on in place (no copy of every node), until keep() keeps it or
  /// undo_cluster() moves it back.
  void move_cluster(cluster_delta const& delta, round_input const& rest);
  /// The mirror's cluster back where move_cluster found it.
  void undo_cluster() noexcept;
  /// Sends next_ as deltas, or in full when the server lost the session.
  service::decoded_reply send_delta(cluster_delta const& delta, job_delta const* jobs,
                                    std::chrono::steady_clock::time_point t0);
  /// next_ becomes the mirror when the server accepted the round; else the
  /// mirror's cluster goes back (undo_cluster).
  service::decoded_reply keep(service::decoded_reply reply);

  struct impl;
  client_options opt_;
  std::unique_ptr<impl> impl_;
  std::uint64_t next_id_ = 1;
  round_trip_timing last_timing_;
  std::optional<round_input> mirror_;  ///< the last round accepted: what the session holds
  round_input next_;                   ///< the round in flight (the mirror moved by its deltas)
  bool moved_ = false;                 ///< next_.state is the mirror's cluster, moved
  delta_undo undo_;                    ///< what the delta in flight replaced
  std::uint64_t resyncs_ = 0;
  std::uint64_t retries_ = 0;
  std::uint64_t failovers_ = 0;
  std::uint64_t busy_retries_ = 0;
  /// The endpoint (index) that accepted the session's last round, which
  /// holds it; -1: none yet. A round for another goes as a full snapshot.
  int holder_ = -1;
  std::string secret_;  ///< the session's, as the server issued it (without CURVE)
};

/// The name the design card uses.
using Client = client;

}  // namespace placer
