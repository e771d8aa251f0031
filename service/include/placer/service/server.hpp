#pragma once
// The Placer service: a ZeroMQ ROUTER socket serving scheduling rounds.
//
//   placer::service::server s({.endpoint = "tcp://127.0.0.1:5555"});
//   s.run(&stop_flag);   // until stop() or *stop_flag; SIGINT/SIGTERM set it in the CLI
//
// Threads: one I/O thread owns the ROUTER socket, checks each message
// (size, identifier, verifier), answers health probes itself and queues
// rounds (round_queue.hpp: per worker, per peer, peers served in turn,
// bounded per peer and in all); it hands a worker one round at a time over
// an inproc socket, and drops a queued round whose peer has disconnected
// or whose deadline passed while it waited. It never solves, so it answers
// probes and refuses excess rounds while every worker is busy. Each worker
// owns a solver (its own backend, so its own CUDA stream) and the state
// (cluster and jobs) of the sessions routed to it. A session is keyed by
// (peer, session id), the peer being the client's CURVE key or else its
// connection's routing identity, so it belongs to whoever made it, and
// always goes to the same worker (hash of that key): its rounds and deltas
// stay in order while different clients run in parallel. Per request, in
// the worker: decode -> (apply deltas to the session's cluster and jobs)
// -> validate -> solve -> encode, each stage timed in the reply; with
// --capture, the round solved is queued for the capture writer's thread.
// Every failure becomes an Error reply with a specific wire::ErrorCode; the
// server never dies on bad input and answers the next request normally.
// Peers may be DEALER (frames: payload) or REQ (frames: empty, payload).

#include <placer/service/capture.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/round_queue.hpp>
#include <placer/solver/limits.hpp>
#include <placer/solver/solver.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace placer::service {

/// The stages the service adds to a reply's timing list beside the
/// solver's (whose "total" is the solve alone): the FlatBuffers verifier
/// (on the I/O thread), the request's decoding, the deltas applied to the
/// session's cluster and jobs (delta rounds only), the round's limits
/// (--max-nodes and the rest, names and their lengths) and the reply's
/// encoding.
inline constexpr char const* stage_verify = "verify";
inline constexpr char const* stage_decode = "decode";
inline constexpr char const* stage_apply_delta = "apply_delta";
inline constexpr char const* stage_limits = "limits";
inline constexpr char const* stage_encode = "encode";
/// How long the round waited in the I/O thread's queue for its worker.
inline constexpr char const* stage_queue = "queue";
inline constexpr std::array<char const*, 6> service_stages{stage_verify,      stage_queue,  stage_decode,
                                                           stage_apply_delta, stage_limits, stage_encode};

struct service_config {
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string backend = "auto";  ///< auto | cpu | cuda
  /// --backend auto's trial round (a synthetic scenario: 1k, 10k, 100k, each
  /// also -k8s, -nfd and -split): the size of the rounds the service will see, since
  /// the faster backend changes with it (an H200's GPU lost at 10k and won at
  /// 100k, bench/results/2026-11-26-h200-tier-threads.md).
  std::string auto_trial = "10k";
  /// GPUs for the workers: worker i solves on devices[i % size] (CUDA, or
  /// the server fails to start); empty = GPU 0 when the backend is CUDA.
  std::vector<int> devices;
  std::size_t max_message_bytes = default_max_message_bytes;
  int poll_ms = 100;             ///< how often the loop checks for shutdown
  // The transport's bounds (zmtp.hpp; docs/deployment.md, "What a peer can
  // hold"). Its memory budget is queue.total_bytes (at least twice
  // max_message_bytes): every byte peers make the server hold counts in it.
  int handshake_ms = 10000;      ///< a connection that has not finished its ZMTP handshake by then is closed
  int message_ms = 30000;        ///< one that sends part of a message (or frame) and not the rest by then, too
  int heartbeat_ms = 10000;      ///< a quiet ZMTP 3.1 peer is PINGed after this long (0 = never)
  int idle_ms = 30000;           ///< one that sends nothing at all for this long is closed (0 = never)
  std::size_t max_connections = 4096;              ///< the idle longest go first when full
  std::size_t max_connections_per_address = 1024;  ///< from one IP address
  /// Per worker, sessions beyond either bound go, least recently used
  /// first (session_bytes); an evicted client resyncs through StaleEpoch.
  std::size_t max_sessions = 4096;
  std::size_t max_session_bytes = std::size_t{4} << 30;
  /// Per worker, one peer's share (a peer: its CURVE key, else its
  /// connection): past it the peer's own sessions go first, least recently
  /// used first; past the totals, the sessions of the peer holding the most.
  std::size_t max_sessions_per_peer = 1024;
  std::size_t max_session_bytes_per_peer = std::size_t{1} << 30;
  int workers = 1;                   ///< solver threads (each with its own backend)
  bool log_rounds = true;        ///< one log line per round with its latency
  /// What one round may cost (solver/limits.hpp); a request past a limit is
  /// answered ResourceExhausted before anything is solved.
  round_limits limits;
  /// The server's time budget per round: a round stops placing after this
  /// long, or after the request's deadline_us when that is sooner, and
  /// answers with what it placed (the rest DeadlineExceeded). 0 = no cap.
  std::int64_t max_round_ms = 5000;
  /// CurveZMQ (curve.hpp): with the server's secret certificate, the socket
  /// encrypts and authenticates, and only clients whose public certificate
  /// is in `allow_keys_dir` get in (checked in every handshake, zmtp.hpp).
  /// Sessions then belong to the client's key rather than to a secret the
  /// server issues.
  std::string curve_secret_file;
  std::string allow_keys_dir;
  /// Without CURVE the server binds loopback and ipc:// endpoints only;
  /// this lets it bind any (a network the operator trusts).
  bool insecure = false;
  /// Rounds waiting for a worker: per peer and in all (round_queue.hpp).
  queue_limits queue;
  /// Readiness: the server is not ready while a worker has been on one
  /// round, or a round has waited for its worker, longer than this.
  double stuck_after_ms = 10000;
  /// "HOST:PORT" (port 0: any free one) to serve /metrics, /livez and
  /// /readyz over HTTP (service/src/http.hpp); empty = off.
  std::string http;
  /// After a device fault a worker runs on a CPU backend; it tries its
  /// configured backend again after this long (0 = never: restart it).
  double device_retry_s = 300;
  /// The operator's way to ask sooner (`placer serve` bumps it on SIGHUP):
  /// a degraded worker tries its configured backend at its next round
  /// after the count changes. Null = no such signal.
  std::atomic<std::uint64_t> const* device_retry_signal = nullptr;
  /// --capture DIR: the rounds solved, as request files that replay on
  /// their own (capture.hpp); dir empty = off.
  capture_config capture;
  /// Makes worker i's backend (tests: a fault-injecting one); empty =
  /// select_backend(backend).
  std::function<std::unique_ptr<kernels::backend>(int)> make_backend;
  /// Called by a worker just before it solves a round (with the request
  /// id): a seam for tests that need a worker held busy, and for tracing.
  std::function<void(std::uint64_t)> on_solve;
};

/// Counters exposed for tests and the shutdown summary.
struct server_stats {
  std::uint64_t requests = 0;
  std::uint64_t rounds_ok = 0;
  std::uint64_t errors = 0;
  std::uint64_t handshakes_denied = 0;  ///< CURVE clients whose key is not allowed
  std::uint64_t oversized = 0;          ///< messages past max_message_bytes, dropped and answered
  std::uint64_t protocol_errors = 0;    ///< connections closed for what their peer sent
  std::uint64_t connections = 0;        ///< open now (handshaking or not)
  std::uint64_t sessions_evicted = 0;   ///< over max_sessions or max_session_bytes
  std::uint64_t session_bytes = 0;      ///< what the sessions hold now (session_bytes), all workers
  std::uint64_t refused_busy = 0;          ///< rounds refused by the queue limits
  std::uint64_t dropped_expired = 0;       ///< deadline passed while queued (answered DeadlineExceeded)
  std::uint64_t dropped_disconnected = 0;  ///< peer gone while queued (not solved, not answered)
  capture_stats capture;                   ///< --capture: files written, dropped, failed
  std::uint64_t held_bytes = 0;            ///< the transport's memory account now (zmtp.hpp)
  std::uint64_t memory_budget = 0;         ///< its bound
  std::uint64_t heartbeats = 0;            ///< PINGs sent to quiet peers
  /// Connections the server closed, by cause (zmtp::close_cause_name), and
  /// messages refused before a worker, by cause (refusal_name).
  std::vector<std::pair<std::string, std::uint64_t>> connections_closed, requests_refused;
  [[nodiscard]] std::uint64_t closed(std::string_view cause) const;
  [[nodiscard]] std::uint64_t refused(std::string_view cause) const;
};

/// What a session holds in memory, estimated from its containers' sizes
/// (the cluster, pending and running jobs it keeps for deltas), as the heap
/// would allocate them: node_bytes per node, jobs_bytes for the jobs. Sizes,
/// not capacities, so that the figure a server keeps up to date delta by
/// delta equals this of the whole.
std::size_t session_bytes(cluster const& c, std::vector<job> const& pending, std::vector<running_job> const& running);
std::size_t node_bytes(node const& n);
std::size_t jobs_bytes(std::vector<job> const& pending, std::vector<running_job> const& running);

class server {
 public:
  /// Binds the socket (throws zmq::error_t if the endpoint is taken) and
  /// starts the backends, one per worker. Throws logic_error
  /// (failed_precondition) for a non-loopback endpoint without CURVE or
  /// --insecure, and std::runtime_error for unreadable keys.
  explicit server(service_config cfg);
  ~server();
  server(server const&) = delete;
  server& operator=(server const&) = delete;

  /// The bound endpoint (resolves "tcp://127.0.0.1:*" to the real port).
  [[nodiscard]] std::string endpoint() const { return endpoint_; }
  [[nodiscard]] std::string backend_description() const;
  /// The HTTP endpoint as bound ("host:port"), empty without --http.
  [[nodiscard]] std::string http_address() const;
  [[nodiscard]] server_stats stats() const;
  /// Blocks until the captures queued so far are written (tests; the
  /// server's destructor writes what is queued too). No-op without capture.
  void flush_captures();

  /// Serves until stop() is called or *external_stop becomes true.
  void run(std::atomic<bool> const* external_stop = nullptr);
  /// Thread-safe; run() returns within poll_ms.
  void stop() { stop_.store(true); }

  /// One request's bytes -> the reply's bytes, on worker 0, in the calling
  /// thread (in-process use; not while run() is serving).
  std::vector<std::uint8_t> handle(void const* data, std::size_t size);

 private:
  /// The probe's answer: counters, each worker's state, readiness. Reads
  /// what the I/O thread owns, so only run() calls it.
  [[nodiscard]] health_status health() const;
  struct impl;
  service_config cfg_;
  std::unique_ptr<impl> impl_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
};

}  // namespace placer::service
