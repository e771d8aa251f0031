// The service: an I/O thread on the network socket (ZMTP spoken by
// zmtp::listener over a ZMQ_STREAM socket) and solver workers behind inproc
// PAIR sockets (see server.hpp). ZeroMQ sockets are not thread-safe, so the
// listener is touched by the I/O thread only; workers get and return whole
// messages over their own PAIR socket.
#include "http.hpp"
#include "metrics.hpp"

#include <placer/service/backend_choice.hpp>
#include <placer/service/curve.hpp>
#include <placer/service/log.hpp>
#include <placer/service/server.hpp>
#include <placer/service/zmtp.hpp>
#include <placer/traces/synthetic.hpp>

#include <sodium.h>

#include <algorithm>
#include <limits>
#include <chrono>
#include <cstring>
#include <functional>
#include <iomanip>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <zmq.hpp>

namespace placer::service {

namespace {

/// Microseconds as milliseconds, 3 decimals ("1.234").
std::string millis(double us) {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << us / 1000.0;
  return o.str();
}
std::string fmt_ms(double us) { return millis(us) + " ms"; }

double micros_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

/// Why the I/O thread refused a message before any worker saw it.
enum class refusal : std::uint8_t {
  malformed,    ///< not an Envelope (the verifier), or a session secret too long
  oversized,    ///< past --max-message-mib or 16 frames: permanent
  memory,       ///< the transport's memory budget was spent: retry
  queue_rounds, ///< the peer has --max-queued rounds waiting
  queue_bytes,  ///< its waiting rounds would pass --max-queued-mib
  queue_total,  ///< every peer's would pass --max-queue-mib
  deadline,     ///< its deadline passed while it waited for a worker
  count
};
char const* refusal_name(refusal r) {
  static constexpr char const* names[] = {"malformed",   "oversized",   "memory",  "queue_rounds",
                                          "queue_bytes", "queue_total", "deadline"};
  return names[static_cast<std::size_t>(r)];
}

/// "59998" as "59,998".
std::string grouped(std::uint64_t n) {
  std::string d = std::to_string(n), out;
  for (std::size_t k = 0; k < d.size(); ++k) {
    if (k > 0 && (d.size() - k) % 3 == 0) out.push_back(',');
    out.push_back(d[k]);
  }
  return out;
}

/// Rejections logged without flooding the log: the first of a peer's
/// rejections with one code in a window of 10 s is logged whole; the rest
/// are counted, and one line says how many when the window has passed
/// ("peer conn:17: 59,998 more like this in 10 s"), at the next rejection
/// or the I/O thread's next pass. At most 1,024 peers are told apart; past
/// them the rest share one line. Thread-safe (workers reject too).
class rejection_log {
 public:
  void rejected(request_header const& h, std::string_view peer, wire::ErrorCode code, std::string const& msg) {
    auto const now = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(m_);
      std::pair<std::string, wire::ErrorCode> key{std::string(peer), code};
      if (seen_.size() >= max_peers && seen_.count(key) == 0) key.first = "(other peers)";
      auto [it, fresh] = seen_.try_emplace(std::move(key), entry{now, 0});
      if (!fresh) {
        if (now - it->second.start < window) {
          ++it->second.more;
          return;
        }
        summarise(it->first, it->second, now);
        it->second = {now, 0};
      }
    }
    log_warn("rejected", {{"request_id", std::to_string(h.request_id)},
                          {"session", h.session},
                          {"peer", std::string(peer)},
                          {"code", error_code_name(code)},
                          {"error", msg}});
  }
  /// The summaries of the windows that have passed (`all`: of every one).
  void flush(bool all = false) {
    auto const now = std::chrono::steady_clock::now();
    std::lock_guard lock(m_);
    for (auto it = seen_.begin(); it != seen_.end();) {
      if (!all && now - it->second.start < window) {
        ++it;
        continue;
      }
      summarise(it->first, it->second, now);
      it = seen_.erase(it);
    }
  }

 private:
  struct entry {
    std::chrono::steady_clock::time_point start;
    std::uint64_t more = 0;
  };
  static void summarise(std::pair<std::string, wire::ErrorCode> const& key, entry const& e,
                        std::chrono::steady_clock::time_point now) {
    if (e.more == 0) return;
    auto const s = std::chrono::duration_cast<std::chrono::seconds>(now - e.start).count();
    log_warn("peer " + key.first + ": " + grouped(e.more) + " more like this in " + std::to_string(s) + " s",
             {{"peer", key.first}, {"code", error_code_name(key.second)}, {"count", std::to_string(e.more)}});
  }
  static constexpr auto window = std::chrono::seconds(10);
  static constexpr std::size_t max_peers = 1024;
  std::mutex m_;
  std::map<std::pair<std::string, wire::ErrorCode>, entry> seen_;
};

/// Counters shared by the I/O thread and the workers.
struct shared_stats {
  std::atomic<std::uint64_t> requests{0}, rounds_ok{0}, errors{0}, handshakes_denied{0}, sessions_evicted{0};
  std::atomic<std::uint64_t> refused_busy{0}, dropped_expired{0}, dropped_disconnected{0}, device_faults{0};
  std::atomic<std::uint64_t> oversized{0}, protocol_errors{0}, connections{0};
  std::atomic<std::int64_t> session_bytes{0};  ///< every worker's sessions' bytes
  std::atomic<std::int64_t> sessions{0};       ///< every worker's sessions
  // The transport's, copied from the listener after each of its reads.
  std::atomic<std::uint64_t> held_bytes{0}, memory_budget{0}, heartbeats{0};
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(zmtp::close_cause::count)> closed{};
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(refusal::count)> refused{};
  rejection_log rejections;
  void refuse(refusal r) { refused[static_cast<std::size_t>(r)].fetch_add(1); }
  /// Every cause with its count (zeros too: a family's labels stay put).
  std::vector<std::pair<std::string, std::uint64_t>> closed_by_cause() const {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (std::size_t k = 0; k < closed.size(); ++k) {
      out.emplace_back(zmtp::close_cause_name(static_cast<zmtp::close_cause>(k)), closed[k].load());
    }
    return out;
  }
  std::vector<std::pair<std::string, std::uint64_t>> refused_by_cause() const {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (std::size_t k = 0; k < refused.size(); ++k) out.emplace_back(refusal_name(static_cast<refusal>(k)), refused[k].load());
    return out;
  }
};

/// A session belongs to whoever made it: its key is its owner (length-
/// prefixed, so no two (owner, id) pairs share a key) and then the session
/// id the request names. Another owner naming the same id reaches a session
/// of its own, never this one. The owner is the client's CURVE public key on
/// an authenticated socket ("curve:<Z85>"), else the secret the server
/// issued when the session was made ("secret:<hex>", 128 random bits), which
/// the client presents in every later request's header: a peer without it
/// names a fresh session, indistinguishable from one never made.
void session_key(std::string_view peer, std::string_view session, std::string& key) {
  key.clear();
  auto const n = std::min<std::size_t>(peer.size(), 0xffff);  // owners are at most 261 bytes
  key.push_back(static_cast<char>(n >> 8));
  key.push_back(static_cast<char>(n & 0xff));
  key.append(peer.substr(0, n));
  key.append(session);
}

}  // namespace

namespace {
/// What the heap takes for an allocation of `n` bytes: glibc's chunk, the
/// request plus an 8-byte header rounded up to 16, 32 at least. A session
/// is many small vectors (three per node), so this is a tenth of its size.
std::size_t heap(std::size_t n) { return n == 0 ? 0 : std::max<std::size_t>(32, (n + 8 + 15) & ~std::size_t{15}); }

}  // namespace

namespace {
// Sizes, not capacities: the same contents give the same figure however
// their storage grew, so a session's bytes kept up to date delta by delta
// (node_bytes) equal session_bytes of the whole.
std::size_t str_bytes(std::string const& s) { return s.size() > 15 ? heap(s.size() + 1) : 0; }  // beyond SSO
template <class V>
std::size_t vec_bytes(V const& v) {
  return heap(v.size() * sizeof(v[0]));
}
}  // namespace

std::size_t node_bytes(node const& n) {
  std::size_t b = str_bytes(n.name) + str_bytes(n.gpu_model) + vec_bytes(n.gpu_free_milli) + vec_bytes(n.gpu_healthy) +
                  vec_bytes(n.gpu_nvlink) + vec_bytes(n.labels) + vec_bytes(n.taints);
  for (auto const& l : n.labels) b += str_bytes(l);
  for (auto const& t : n.taints) b += str_bytes(t.key) + str_bytes(t.value);
  return b;
}

std::size_t session_bytes(cluster const& c, std::vector<job> const& pending, std::vector<running_job> const& running) {
  std::size_t b = sizeof(cluster) + vec_bytes(c.nodes) + vec_bytes(c.topo.domains);
  for (auto const& d : c.topo.domains) b += str_bytes(d.name);
  b += vec_bytes(c.topo.level_names);
  for (auto const& n : c.topo.level_names) b += str_bytes(n);
  for (auto const& n : c.nodes) b += node_bytes(n);
  return b + jobs_bytes(pending, running);
}

std::size_t jobs_bytes(std::vector<job> const& pending, std::vector<running_job> const& running) {
  std::size_t b = vec_bytes(pending);
  for (auto const& j : pending) {
    b += str_bytes(j.name) + str_bytes(j.queue) + vec_bytes(j.allowed_gpu_models);
    for (auto const& m : j.allowed_gpu_models) b += str_bytes(m);
  }
  b += vec_bytes(running);
  for (auto const& r : running) {
    b += str_bytes(r.name) + vec_bytes(r.replicas);
    for (auto const& rp : r.replicas) b += vec_bytes(rp.gpus);
  }
  return b;
}

namespace {
/// What apply_delta(c, d, undo) changed session_bytes(c, ...) by: the
/// changed nodes' old values out and new in, the removed out, the added
/// in, and the node vector's own size.
std::int64_t cluster_bytes_moved(cluster const& c, delta_undo const& undo) {
  auto sz = [](std::size_t b) { return static_cast<std::int64_t>(b); };
  auto const& removed = undo.removed;  // ascending base indices
  std::int64_t b = sz(vec_bytes(c.nodes)) - sz(heap(undo.size * sizeof(node)));
  for (std::size_t k = 0; k < undo.changed.size(); ++k) {
    auto const i = undo.changed[k];
    auto const before = std::lower_bound(removed.begin(), removed.end(), i) - removed.begin();
    b += sz(node_bytes(c.nodes[static_cast<std::size_t>(i - before)])) - sz(node_bytes(undo.changed_old[k]));
  }
  for (auto const& n : undo.removed_old) b -= sz(node_bytes(n));
  for (std::size_t i = undo.size - removed.size(); i < c.nodes.size(); ++i) b += sz(node_bytes(c.nodes[i]));
  return b;
}
}  // namespace

namespace {

/// The longest message an error reply carries.
constexpr std::size_t max_error_bytes = 1024;

/// What a worker solves with, for the health probe (the I/O thread reads
/// it while the worker writes it).
class worker_status {
 public:
  void set(std::string backend, std::string degraded_reason) {
    std::lock_guard lock(m_);
    backend_ = std::move(backend);
    reason_ = std::move(degraded_reason);
  }
  /// Its backend, and why it runs on its fallback ("" when it does not).
  [[nodiscard]] std::pair<std::string, std::string> get() const {
    std::lock_guard lock(m_);
    return {backend_, reason_};
  }

 private:
  mutable std::mutex m_;
  std::string backend_, reason_;
};

/// A solver worker: its own backend and the sessions routed to it. What a
/// round needs on the wire path is the worker's and reused: the request is
/// decoded into the same objects every time, and the reply is built in the
/// same builder, so steady rounds allocate little beyond the solver's result.
class worker {
 public:
  worker(service_config const& cfg, shared_stats& stats, service_metrics* metrics, worker_status& status, int id,
         capture_writer* capture)
      : cfg_(cfg), stats_(stats), metrics_(metrics), status_(status), capture_(capture), id_(id),
        solver_(configured_backend()) {
    status_.set(backend(), "");
    warm_up();  // after: a fault in it says so in the status
  }

  [[nodiscard]] std::string backend() { return solver_.backend().description(); }

  /// Bytes in, the reply's bytes out (valid until the next call); never
  /// throws for bad input. `verify_us`: set when the I/O thread already ran
  /// check_envelope on these bytes (not run twice), to the time it took.
  /// `owner`: whose sessions the request reaches (session_key); `peer`:
  /// who sent it, for the logs and the per-peer session quota.
  /// `queued_us`: how long the round waited for this worker, taken off the
  /// request's deadline (a reply past it would come too late).
  std::span<std::uint8_t const> handle(void const* data, std::size_t size, std::optional<double> verify_us = {},
                                       std::string_view owner = {}, double queued_us = -1,
                                       std::string_view peer = {}) {
    auto const t0 = std::chrono::steady_clock::now();
    auto t = t0;
    stats_.requests.fetch_add(1);
    request_header& h = req_.header;
    h.request_id = 0;
    h.session.clear();
    h.session_secret.clear();
    auto reply = [&] { return std::span<std::uint8_t const>(fbb_.GetBufferPointer(), fbb_.GetSize()); };
    auto held_s = [&] { return (std::max(queued_us, 0.0) + micros_since(t0)) / 1e6; };
    auto fail = [&](wire::ErrorCode code, std::string const& msg) {
      stats_.errors.fetch_add(1);
      if (metrics_ != nullptr) metrics_->round(code, held_s());
      stats_.rejections.rejected(h, peer, code, msg);  // peer: "curve:<key>" or "conn:<n>", never a secret
      // Bounded: a message may quote the request's own text.
      encode_error(fbb_, h, code, msg.size() <= max_error_bytes ? msg : printable(msg, max_error_bytes));
      return reply();
    };
    envelope_check chk;
    if (verify_us) {
      chk.envelope = wire::GetEnvelope(data);
    } else {
      chk = check_envelope(data, size, cfg_.max_message_bytes);
      if (chk.envelope == nullptr) return fail(chk.code, chk.message);
      verify_us = micros_since(t);
    }
    if (auto const* hdr = chk.envelope->header()) {
      h.request_id = hdr->request_id();
      if (hdr->session() != nullptr) h.session.assign(hdr->session()->string_view());
    }
    try {
      t = std::chrono::steady_clock::now();
      decode_request(*chk.envelope, req_);
      // The reply names the secret the session is owned by (issued now, or
      // the one presented); a CURVE client's sessions are its key's.
      if (owner.rfind("secret:", 0) == 0) {
        h.session_secret.assign(owner.substr(7));
      } else {
        h.session_secret.clear();
      }
      double const decode_us = micros_since(t);
      round_input& in = req_.input;
      // A session's cluster was checked node by node when it came, and a
      // delta's nodes are as they come (check_node_limits, apply_delta).
      in.nodes_validated = req_.delta.has_value();
      in.label_memo = nullptr;
      session_key(owner, h.session, key_);
      auto const found = h.session.empty() ? sessions_.end() : sessions_.find(key_);
      session* const sess = found == sessions_.end() ? nullptr : &found->second;
      double delta_us = 0;
      std::int64_t delta_bytes = 0;  // what the delta changed the session's cluster bytes by
      // A delta round works on the session's own cluster, moved into the
      // round and moved on in place (no copy of every node and label: 10 ms
      // a round at 100k GPUs of real Kubernetes nodes); a round that fails
      // moves it back, so the session keeps its epoch (revert_delta).
      struct session_restore {
        cluster* round = nullptr;
        session* kept = nullptr;
        delta_undo* undo = nullptr;
        session_restore() = default;
        session_restore(session_restore const&) = delete;  // a temporary's destructor would restore
        session_restore& operator=(session_restore const&) = delete;
        ~session_restore() {
          if (kept == nullptr) return;
          revert_delta(*round, *undo);
          std::swap(*round, kept->state);
          kept->labels.clear();  // it followed the delta
          // Out of memory half-way: no epoch a delta can name, so the
          // client's next one is answered StaleEpoch and it resyncs.
          if (undo->lost) kept->state.epoch = std::numeric_limits<std::uint64_t>::max();
        }
      } restore;
      if (req_.delta) {
        if (h.session.empty()) {
          return fail(wire::ErrorCode::FailedPrecondition, "a delta needs a session id in the header");
        }
        if (sess == nullptr) {
          return fail(wire::ErrorCode::StaleEpoch,
                      "no cluster held for session '" + h.session + "': send a full snapshot");
        }
        t = std::chrono::steady_clock::now();
        std::swap(in.state, sess->state);
        undo_.armed = undo_.lost = false;  // until apply_delta says otherwise
        restore.round = &in.state;
        restore.undo = &undo_;
        restore.kept = sess;
        for (auto const& u : req_.delta->changed) check_node_limits(u.value, cfg_.limits);
        for (auto const& a : req_.delta->added) check_node_limits(a, cfg_.limits);
        apply_delta(in.state, *req_.delta, undo_);  // throws stale_epoch, with nothing changed
        // The names the delta brought (added, renamed): the only ones the
        // limits look for among the session's nodes, whose names were unique.
        delta_names_.clear();
        for (auto const& a : req_.delta->added) delta_names_.emplace_back(a.name);
        for (std::size_t k = 0; k < req_.delta->changed.size(); ++k) {
          auto const& now = req_.delta->changed[k].value.name;
          if (now != undo_.changed_old[k].name) delta_names_.emplace_back(now);
        }
        delta_bytes = cluster_bytes_moved(in.state, undo_);
        sess->labels.follow(undo_, in.state.nodes.size());
        in.label_memo = &sess->labels;
        if (req_.jobs) apply_job_delta(sess->pending, sess->running, *req_.jobs, in.pending, in.running);
        delta_us = micros_since(t);
      }
      t = std::chrono::steady_clock::now();
      // A job delta appends its jobs to the session's, which were checked.
      arrived_jobs const arrived{req_.jobs ? in.pending.size() - req_.jobs->added.size() : 0,
                                 req_.jobs ? in.running.size() - req_.jobs->started.size() : 0};
      check_limits(in, cfg_.limits, names_, req_.jobs ? &arrived : nullptr, req_.delta ? &delta_names_ : nullptr);
      double const limits_us = micros_since(t);
      std::uint64_t const sent_deadline = in.deadline_us;  // a capture keeps the request's own
      if (in.deadline_us > 0 && queued_us > 0) {
        auto const waited = static_cast<std::uint64_t>(queued_us);
        in.deadline_us = in.deadline_us > waited ? in.deadline_us - waited : 1;
      }
      if (cfg_.max_round_ms > 0) {
        auto const budget_us = static_cast<std::uint64_t>(cfg_.max_round_ms) * 1000;
        if (in.deadline_us == 0 || in.deadline_us > budget_us) in.deadline_us = budget_us;
      }
      // What the cross-round policies remember (delay timers) lives with
      // the session; a request without a session gets a fresh memory.
      queue_memory scratch;
      queue_memory* const memory = sess != nullptr ? &sess->memory : &scratch;
      if (cfg_.on_solve) cfg_.on_solve(h.request_id);
      auto const t_solve = std::chrono::steady_clock::now();
      round_result r;
      try {
        r = solve_anyway(in, memory);
      } catch (...) {  // a round the solver refused or failed on is one to look at too
        capture(data, size, sent_deadline, micros_since(t_solve));
        throw;
      }
      capture(data, size, sent_deadline, micros_since(t_solve));
      // The service's own stages beside the solver's (whose "total" is the
      // solve alone), so a caller sees the whole server side of a round.
      r.timing.push_back({stage_verify, *verify_us});
      if (queued_us >= 0) r.timing.push_back({stage_queue, queued_us});
      r.timing.push_back({stage_decode, decode_us});
      if (req_.delta) r.timing.push_back({stage_apply_delta, delta_us});
      r.timing.push_back({stage_limits, limits_us});
      encode_reply(fbb_, h, r, in, stage_encode);
      std::size_t const n_nodes = in.state.nodes.size();
      std::size_t const n_pending = in.pending.size();
      if (!h.session.empty()) {
        // The cluster and jobs as sent (the round's placements are the
        // caller's to apply: it reports them back in its next round) become
        // the session's, and the session's old ones the buffers the next
        // round is decoded or copied into.
        session* kept = sess;
        if (kept == nullptr) {
          kept = &sessions_[key_];
          kept->memory = std::move(scratch);
          kept->peer.assign(peer);
          ++peer_use_[kept->peer].count;
          stats_.sessions.fetch_add(1);
        }
        restore.kept = nullptr;  // the round's cluster becomes the session's
        undo_.armed = false;
        if (!req_.delta) kept->labels.clear();  // made for the cluster this one replaces
        std::swap(kept->state, in.state);
        std::swap(kept->pending, in.pending);
        std::swap(kept->running, in.running);
        // A delta round's cluster bytes move by its nodes' alone: reading
        // every node and label again was 3 ms a round at 100k-nfd.
        kept->cluster_bytes = req_.delta ? static_cast<std::size_t>(static_cast<std::int64_t>(kept->cluster_bytes) +
                                                                    delta_bytes)
                                         : session_bytes(kept->state, {}, {});
        auto const bytes = kept->cluster_bytes + jobs_bytes(kept->pending, kept->running);
        hold(*kept, static_cast<std::int64_t>(bytes) - static_cast<std::int64_t>(kept->bytes));
        kept->bytes = bytes;
        kept->last_used = ++tick_;
        evict(kept->peer);
      }
      double const us = micros_since(t0);
      stats_.rounds_ok.fetch_add(1);
      if (metrics_ != nullptr) metrics_->round(wire::ErrorCode::Ok, held_s(), &r, h.session);
      if (cfg_.log_rounds) {
        log_info("round", {{"request_id", std::to_string(h.request_id)},
                           {"session", h.session},
                           {"peer", std::string(peer)},
                           {"nodes", std::to_string(n_nodes)},
                           {"pending", std::to_string(n_pending)},
                           {"placed", std::to_string(r.placements.size())},
                           {"unplaced", std::to_string(r.unplaced_jobs.size())},
                           {"ms", millis(us)},
                           {"worker", std::to_string(id_)},
                           {"backend", r.backend}});
      }
      return reply();
    } catch (logic_error const& e) {
      return fail(error_code_to_wire(e.code()), e.what());
    } catch (std::bad_alloc const&) {
      return fail(wire::ErrorCode::ResourceExhausted, "out of memory while solving the round");
    } catch (std::exception const& e) {
      return fail(wire::ErrorCode::Internal, e.what());
    }
  }

 private:
  /// --capture: the round just solved as a file that replays on its own,
  /// when the writer wants it. A round that came in full is its bytes as
  /// received; a delta round is encoded in full from what was solved (the
  /// session's cluster and jobs after the deltas, the policy and now as
  /// sent, the request's own deadline). The writer's thread does the I/O;
  /// nothing here fails the round.
  void capture(void const* data, std::size_t size, std::uint64_t sent_deadline, double solve_us) noexcept {
    if (capture_ == nullptr || !capture_->wants(solve_us / 1000)) return;
    try {
      std::vector<std::uint8_t> bytes;
      if (!req_.delta) {
        auto const* p = static_cast<std::uint8_t const*>(data);
        bytes.assign(p, p + size);
      } else {
        round_input& in = req_.input;
        std::uint64_t const budget = std::exchange(in.deadline_us, sent_deadline);
        encode_request(capture_fbb_, req_.header, in);
        in.deadline_us = budget;
        bytes.assign(capture_fbb_.GetBufferPointer(), capture_fbb_.GetBufferPointer() + capture_fbb_.GetSize());
      }
      capture_->submit(req_.header.request_id, std::move(bytes));
    } catch (std::exception const& e) {
      capture_->failed(std::string("capture not made: ") + e.what());
    }
  }

  /// The backend the operator asked for (--backend; a test's factory). A
  /// GPU shared by several workers gives each its part of the
  /// multiprocessors (kernels::make_backend's `sharing`).
  std::unique_ptr<kernels::backend> configured_backend() const {
    if (cfg_.make_backend) return cfg_.make_backend(id_);
    if (!cfg_.devices.empty()) {  // GPUs named on purpose: CUDA on worker i's, or fail
      auto const n = static_cast<int>(cfg_.devices.size());
      auto const device = cfg_.devices[static_cast<std::size_t>(id_ % n)];
      int sharing = 0;  // the workers k with devices[k % n] == device
      for (int k = 0; k < cfg_.workers; ++k) sharing += cfg_.devices[static_cast<std::size_t>(k % n)] == device ? 1 : 0;
      return kernels::make_backend(kernels::backend_kind::cuda, device, sharing);
    }
    return kernels::select_backend(cfg_.backend, [](std::string const& m) { log_warn(m); }, 0, cfg_.workers);
  }

  /// One small round (the 1k scenario) on a backend just made, so that the
  /// first client's round does not pay for loading the GPU's kernels and
  /// growing the device buffers. A device that fails here is a fault like
  /// any other: the worker starts on the CPU.
  void warm_up() {
    static round_input const round = traces::make_scenario(traces::scenario_preset("1k"));
    try {
      (void)solver_.solve(round);
    } catch (kernels::device_fault const& e) {
      fall_back(e.what());
    }
  }

  /// The device failed: the worker goes on on a CPU backend (logged once,
  /// counted, reported degraded until --device-retry-s brings it back).
  void fall_back(std::string const& why) {
    std::string const failed = backend();
    solver_ = solver(kernels::make_backend(kernels::backend_kind::cpu));
    degraded_ = true;
    degraded_since_ = std::chrono::steady_clock::now();
    stats_.device_faults.fetch_add(1);
    status_.set(backend(), failed + ": " + why);
    log_error("device fault: the worker goes on on the CPU",
              {{"worker", std::to_string(id_)},
               {"backend", failed},
               {"error", why},
               {"now", backend()},
               {"retry_s", cfg_.device_retry_s > 0 ? (std::ostringstream() << cfg_.device_retry_s).str() : "on SIGHUP"}});
  }

  /// Solves the round; when the device fails under it, the worker goes on
  /// on a CPU backend and solves the same round again there, so the client
  /// gets its answer (the reply's backend says which solved it). After
  /// --device-retry-s, or at the first round after the operator asks
  /// (device_retry_signal), the worker tries its configured backend again.
  round_result solve_anyway(round_input const& in, queue_memory* memory) {
    bool const asked = cfg_.device_retry_signal != nullptr && cfg_.device_retry_signal->load() != retries_seen_;
    if (cfg_.device_retry_signal != nullptr) retries_seen_ = cfg_.device_retry_signal->load();
    bool const due = cfg_.device_retry_s > 0 && std::chrono::steady_clock::now() - degraded_since_ >=
                                                    std::chrono::duration<double>(cfg_.device_retry_s);
    if (degraded_ && (asked || due)) {
      degraded_since_ = std::chrono::steady_clock::now();  // the next try after another back-off, either way
      try {
        auto b = configured_backend();
        if (b->kind() == kernels::backend_kind::cuda) {
          solver_ = solver(std::move(b));
          degraded_ = false;
          warm_up();  // falls back again if the device is still broken
          if (!degraded_) {
            status_.set(backend(), "");
            log_info("device back", {{"worker", std::to_string(id_)}, {"backend", backend()}});
          }
        }
      } catch (std::exception const& e) {
        log_warn("device still unusable", {{"worker", std::to_string(id_)}, {"error", e.what()}});
      }
    }
    try {
      return solver_.solve(in, memory);
    } catch (kernels::device_fault const& e) {
      fall_back(e.what());
      return solver_.solve(in, memory);
    }
  }

  service_config const& cfg_;
  shared_stats& stats_;
  service_metrics* metrics_;  ///< null without --http
  worker_status& status_;
  capture_writer* capture_;  ///< null without --capture
  bool degraded_ = false;  ///< on its CPU fallback since a device fault
  std::uint64_t retries_seen_ = 0;  ///< device_retry_signal when last read
  std::chrono::steady_clock::time_point degraded_since_;
  int id_;
  solver solver_;
  struct session {
    cluster state;                     ///< the last round's cluster (deltas apply to it)
    std::vector<job> pending;          ///< its pending jobs (job deltas apply to them)
    std::vector<running_job> running;  ///< its running jobs (job deltas apply to them)
    queue_memory memory;               ///< cross-round policy memory
    node_label_memo labels;            ///< its nodes' constraint-group keys (constraint_tables)
    std::uint64_t last_used = 0;       ///< the worker's tick of its last accepted round
    std::size_t bytes = 0;             ///< session_bytes() when it was stored
    std::size_t cluster_bytes = 0;     ///< of which the cluster's (moved on delta by delta)
    std::string peer;                  ///< who made it: whose share it counts in
  };
  /// A peer's share of the worker's sessions.
  struct peer_use {
    std::size_t count = 0, bytes = 0;
  };

  void hold(session& s, std::int64_t change) {
    held_bytes_ = static_cast<std::size_t>(static_cast<std::int64_t>(held_bytes_) + change);
    auto& use = peer_use_[s.peer];
    use.bytes = static_cast<std::size_t>(static_cast<std::int64_t>(use.bytes) + change);
    stats_.session_bytes.fetch_add(change);
  }
  /// The least recently used session of `peer`'s.
  std::map<std::string, session>::iterator lru_of(std::string const& peer) {
    auto lru = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.peer == peer && (lru == sessions_.end() || it->second.last_used < lru->second.last_used)) lru = it;
    }
    return lru;
  }
  void drop(std::map<std::string, session>::iterator it) {
    auto const peer = it->second.peer;
    hold(it->second, -static_cast<std::int64_t>(it->second.bytes));
    auto& use = peer_use_[peer];
    if (--use.count == 0) peer_use_.erase(peer);
    sessions_.erase(it);
    stats_.sessions.fetch_sub(1);
    stats_.sessions_evicted.fetch_add(1);
  }
  /// Sessions go in two steps, least recently used first within a peer:
  /// while `peer` (who just stored one) holds more than its share
  /// (max_sessions_per_peer, max_session_bytes_per_peer), its own; then,
  /// while the worker holds more than max_sessions or max_session_bytes,
  /// those of the peer holding the most (sessions or bytes, whichever is
  /// over). So one peer's flood evicts its own sessions, and another's only
  /// once every peer holds as few. The one just stored goes too when it
  /// alone is over the bytes (its client then sends full snapshots). An
  /// evicted client's next delta is answered StaleEpoch and it resyncs.
  void evict(std::string const& peer) {
    auto over_share = [&] {
      auto const it = peer_use_.find(peer);
      return it != peer_use_.end() && (it->second.count > cfg_.max_sessions_per_peer ||
                                       it->second.bytes > cfg_.max_session_bytes_per_peer);
    };
    while (over_share()) drop(lru_of(peer));
    while (!sessions_.empty() && (sessions_.size() > cfg_.max_sessions || held_bytes_ > cfg_.max_session_bytes)) {
      bool const by_count = sessions_.size() > cfg_.max_sessions;
      auto amount = [&](std::string const& p) {
        auto const& u = peer_use_[p];
        return by_count ? u.count : u.bytes;
      };
      std::size_t top = 0;
      for (auto const& [p, u] : peer_use_) top = std::max(top, by_count ? u.count : u.bytes);
      auto lru = sessions_.end();  // the least recently used of the peers holding the most
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        if (amount(it->second.peer) == top && (lru == sessions_.end() || it->second.last_used < lru->second.last_used)) {
          lru = it;
        }
      }
      drop(lru);
    }
  }
  std::map<std::string, session> sessions_;  ///< by session_key: the owner's, then the session id
  std::unordered_map<std::string, peer_use> peer_use_;  ///< by peer: what its sessions hold
  std::string key_;                           ///< the request's session key (reused)
  std::uint64_t tick_ = 0;                    ///< counts accepted session rounds (LRU order)
  std::size_t held_bytes_ = 0;                ///< the sessions' bytes, summed
  std::vector<std::string_view> names_;       ///< check_limits' scratch (reused)
  std::vector<std::string_view> delta_names_;  ///< a delta's added and renamed nodes' names (reused)
  decoded_request req_;                        ///< the request being served
  delta_undo undo_;                            ///< what its cluster delta replaced
  flatbuffers::FlatBufferBuilder fbb_{1 << 16};  ///< its reply
  flatbuffers::FlatBufferBuilder capture_fbb_;   ///< a delta round encoded in full (--capture)
};

/// Receives one multipart message (all frames) without blocking.
bool recv_all(zmq::socket_t& sock, std::vector<zmq::message_t>& frames) {
  frames.clear();
  do {
    zmq::message_t f;
    if (!sock.recv(f, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(f));
  } while (sock.get(zmq::sockopt::rcvmore));
  return !frames.empty();
}

void send_all(zmq::socket_t& sock, std::vector<zmq::message_t>& frames) {
  for (std::size_t k = 0; k < frames.size(); ++k) {
    sock.send(frames[k], k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

}  // namespace

/// What the I/O thread tells a worker with each round (its first frame).
struct dispatch_meta {
  double verify_us = -1;  ///< the verifier's time when the message passed; < 0: it did not (the worker answers)
  double queued_us = 0;   ///< how long the round waited for the worker
};

/// A round waiting for its worker: the message as received and where it
/// came from.
struct queued_round {
  std::vector<zmq::message_t> frames;  ///< [(empty), payload]: answered in the same shape
  std::string owner;                   ///< session_key's owner
  std::string peer;                    ///< who sent it: its queue budget, session quota and log name
  std::optional<double> verify_us;     ///< set when the verifier passed it
  request_header header;               ///< for an answer from the I/O thread
  std::uint64_t deadline_us = 0;       ///< the request's, 0 = none
  std::uint64_t conn = 0;              ///< the connection it came on (zmtp::incoming::conn)
  std::chrono::steady_clock::time_point arrived;
  zmtp::memory_charge charge;          ///< its bytes in the transport's account, until it goes to a worker
};

/// What the I/O thread knows of a worker.
struct worker_slot {
  bool busy = false;
  std::chrono::steady_clock::time_point since;  ///< when its current round started
  std::uint64_t rounds = 0;                     ///< rounds it has answered
  double mean_ms = 1;                           ///< recent round time (retry hints)
};

struct server::impl {
  explicit impl(service_config const& cfg) : queue(static_cast<std::size_t>(cfg.workers), cfg.queue) {
    slots.resize(static_cast<std::size_t>(cfg.workers));
  }
  zmq::context_t ctx{1};
  /// The network side: ZMTP over a STREAM socket, NULL or CURVE (zmtp.hpp).
  std::unique_ptr<zmtp::listener> net;
  /// The HTTP probes' way in: a ROUTER on an inproc endpoint (in-process
  /// peers only; health requests alone are answered).
  std::unique_ptr<zmq::socket_t> probe;
  std::vector<std::string> allowed;  ///< Z85 public keys, sorted
  /// Refused CURVE keys: when each was last logged, and refusals since.
  struct refusal {
    std::chrono::steady_clock::time_point logged;
    std::uint64_t suppressed = 0;
  };
  std::map<std::string, refusal> refusals;
  bool allow(std::string const& key, std::string const& address);
  shared_stats stats;
  std::unique_ptr<service_metrics> metrics;  ///< with --http
  std::unique_ptr<http_endpoint> http;       ///< with --http; before ctx goes
  std::unique_ptr<capture_writer> capture;   ///< with --capture; after the metrics it counts in, before the workers
  std::vector<std::unique_ptr<worker>> workers;
  std::vector<std::unique_ptr<worker_status>> status;  ///< one per worker
  std::string key;    ///< a request's session key, to pick its worker (reused)
  std::string owner;  ///< a request's owner: CURVE key or session secret (reused)
  // The I/O thread's own (run()).
  round_queue<queued_round> queue;
  std::vector<worker_slot> slots;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  flatbuffers::FlatBufferBuilder io_fbb{256};  ///< probes and the I/O thread's own errors
};

/// A CURVE client's key against the allowed ones; refusals are counted,
/// and logged once a key and minute (a refused client reconnects every
/// 100 ms or so), with the count of those not logged.
bool server::impl::allow(std::string const& key, std::string const& address) {
  if (std::binary_search(allowed.begin(), allowed.end(), key)) return true;
  stats.handshakes_denied.fetch_add(1);
  auto const now = std::chrono::steady_clock::now();
  if (refusals.size() > 4096) refusals.clear();  // bounded, whatever keys are tried
  auto& seen = refusals[key];
  if (seen.suppressed == 0 || now - seen.logged >= std::chrono::minutes(1)) {
    log_warn("CURVE handshake refused for key " + key + (address.empty() ? std::string() : " from " + printable(address, 64)) +
             (seen.suppressed > 1 ? " (" + std::to_string(seen.suppressed - 1) + " more since the last line)"
                                  : std::string()));
    seen.logged = now;
    seen.suppressed = 0;
  }
  ++seen.suppressed;
  return false;
}

namespace {

std::string mib(double bytes) {
  std::ostringstream o;
  o << std::setprecision(4) << bytes / (1 << 20) << " MiB";
  return o.str();
}

/// The transport's bounds, and the memory they imply, in one line at start.
/// Beside the budget each connection can hold a constant: what libzmq reads
/// ahead (receive_hwm chunks of 8 KiB), a receive buffer kept between
/// frames (8 KiB), a command being read (4 KiB) and its record (~1 KiB).
void log_transport_bounds(zmtp::listener_config const& n, int workers) {
  double const per_connection = n.receive_hwm * 8192.0 + 8192 + 4096 + 1024;
  double const most = static_cast<double>(n.memory_budget) + static_cast<double>(n.max_connections) * per_connection;
  log_info("transport bounds: what peers make the server hold (messages being read, rounds waiting, replies not yet "
           "read) at most " + mib(static_cast<double>(n.memory_budget)) + ", plus " +
               mib(per_connection * static_cast<double>(n.max_connections)) + " for " +
               std::to_string(n.max_connections) + " connections: " + mib(most) + " in all, and each worker's round",
           {{"memory_budget_mib", mib(static_cast<double>(n.memory_budget))},
            {"max_message_mib", mib(static_cast<double>(n.max_message_bytes))},
            {"max_connections", std::to_string(n.max_connections)},
            {"per_address", std::to_string(n.max_connections_per_address)},
            {"handshake_s", std::to_string(n.handshake_timeout.count() / 1000.0)},
            {"message_s", std::to_string(n.message_timeout.count() / 1000.0)},
            {"heartbeat_s", std::to_string(n.heartbeat_interval.count() / 1000.0)},
            {"idle_s", std::to_string(n.idle_timeout.count() / 1000.0)},
            {"workers", std::to_string(workers)}});
}

/// --backend auto with a usable GPU: whether the CPU backend is faster than
/// CUDA (GPU 0) on the trial scenario (backend_choice.hpp), both times
/// logged. A GPU that fails its trial leaves the CPU backend, saying why.
bool cpu_wins_the_trial(std::string const& scenario) {
  try {
    round_input const round = traces::make_scenario(traces::scenario_preset(scenario));
    std::vector<backend_maker> const makers = {
        [] { return kernels::make_backend(kernels::backend_kind::cuda, 0); },
        [] { return kernels::make_backend(kernels::backend_kind::cpu); }};
    std::vector<backend_trial> trials;
    bool const cpu = fastest_backend(makers, round, 5, trials) == 1;
    log_info(std::string("backend auto: ") + (cpu ? "cpu" : "cuda") + ", the faster on a " + scenario + " round",
             {{"cuda", trials[0].backend},
              {"cuda_ms", millis(trials[0].median_ms * 1000)},
              {"cpu", trials[1].backend},
              {"cpu_ms", millis(trials[1].median_ms * 1000)}});
    return cpu;
  } catch (std::exception const& e) {
    log_warn(std::string("backend auto: the GPU failed its trial round (") + e.what() + "); using the CPU backend");
    return true;
  }
}

}  // namespace

server::server(service_config cfg) : cfg_(std::move(cfg)) {
  PLACER_EXPECTS(cfg_.workers >= 1 && cfg_.workers <= 256, "workers must be in 1..256");
  PLACER_EXPECTS(cfg_.max_connections >= 1 && cfg_.max_connections_per_address >= 1,
                 "at least one connection must be allowed (--max-connections, --max-connections-per-address)");
  PLACER_EXPECTS(cfg_.handshake_ms > 0 && cfg_.message_ms > 0, "the handshake and message timeouts must be positive");
  PLACER_EXPECTS(cfg_.heartbeat_ms >= 0 && cfg_.idle_ms >= 0, "the heartbeat and idle times must not be negative");
  PLACER_EXPECTS(cfg_.heartbeat_ms == 0 || cfg_.idle_ms == 0 || cfg_.heartbeat_ms < cfg_.idle_ms,
                 "the heartbeat (--heartbeat-s) must be shorter than the idle timeout (--idle-timeout-s): a quiet "
                 "client is kept by its answers to the PINGs");
  PLACER_EXPECTS(cfg_.queue.peer_rounds >= 1, "a peer must be allowed at least one waiting round (--max-queued)");
  PLACER_EXPECTS(cfg_.stuck_after_ms > 0, "the stuck threshold must be positive (--stuck-ms)");
  if (!cfg_.devices.empty()) {
    PLACER_EXPECTS(cfg_.backend == "cuda" || cfg_.backend == "auto",
                   "--devices names GPUs: it needs --backend cuda or auto, not " + cfg_.backend);
    auto const why = kernels::cuda_unavailable_reason();
    if (!why.empty()) throw logic_error(error_code::unavailable, "--devices: no usable GPU here: " + why);
  }
  // The CPU when it won the trial; else auto stays auto (the GPU, or the
  // CPU with the reason logged should the GPU fail between the trial and
  // a worker's start).
  if (cfg_.backend == "auto") (void)traces::scenario_preset(cfg_.auto_trial);  // a bad name fails here
  if (cfg_.backend == "auto" && cfg_.devices.empty() && !cfg_.make_backend &&
      kernels::cuda_unavailable_reason().empty() && cpu_wins_the_trial(cfg_.auto_trial)) {
    cfg_.backend = "cpu";
  }
  impl_ = std::make_unique<impl>(cfg_);
  std::optional<zmtp::key32> curve_secret;
  if (!cfg_.curve_secret_file.empty()) {
    PLACER_EXPECTS(!cfg_.allow_keys_dir.empty(), "CURVE needs the allowed clients' public keys (--allow-keys DIR)");
    auto const own = read_certificate(cfg_.curve_secret_file);
    if (own.secret_key.empty()) {
      throw std::runtime_error("'" + cfg_.curve_secret_file + "' is a public certificate: give the *_secret file");
    }
    impl_->allowed = read_allowed_keys(cfg_.allow_keys_dir);
    curve_secret = zmtp::z85_key(own.secret_key);
    if (!curve_secret) throw std::runtime_error("'" + cfg_.curve_secret_file + "' holds no valid secret key");
  } else if (!cfg_.insecure && !loopback_endpoint(cfg_.endpoint)) {
    throw logic_error(error_code::failed_precondition,
                      "refusing to serve " + cfg_.endpoint +
                          " without authentication: any peer that reaches it could steer scheduling. Give "
                          "--curve-secret FILE and --allow-keys DIR (placer keygen makes the keys), bind a loopback "
                          "or ipc:// endpoint, or pass --insecure on a network you trust");
  }
  if (!cfg_.http.empty()) impl_->metrics = std::make_unique<service_metrics>();
  if (!cfg_.capture.dir.empty()) {
    impl_->capture = std::make_unique<capture_writer>(cfg_.capture, [m = impl_->metrics.get()](char const* outcome) {
      if (m != nullptr) m->capture(outcome);
    });
    std::ostringstream mib;
    mib << static_cast<double>(cfg_.capture.max_bytes) / (1 << 20);
    log_info("capturing rounds", {{"dir", cfg_.capture.dir},
                                  {"every", std::to_string(cfg_.capture.every)},
                                  {"slower_ms", millis(cfg_.capture.slower_ms * 1000)},
                                  {"max_mib", mib.str()}});
  }
  for (int k = 0; k < cfg_.workers; ++k) {
    impl_->status.push_back(std::make_unique<worker_status>());
    impl_->workers.push_back(std::make_unique<worker>(cfg_, impl_->stats, impl_->metrics.get(), *impl_->status.back(), k,
                                                        impl_->capture.get()));
  }
  // The transport reads a message past max_message_bytes to its end without
  // keeping it, and the I/O thread answers it with the limit. The I/O
  // thread drains the socket into its own bounded queue as fast as messages
  // come; a peer that outpaces it waits in TCP, and one that does not read
  // its replies is disconnected.
  zmtp::listener_config net;
  net.max_message_bytes = cfg_.max_message_bytes;
  net.handshake_timeout = std::chrono::milliseconds(cfg_.handshake_ms);
  net.message_timeout = std::chrono::milliseconds(cfg_.message_ms);
  net.heartbeat_interval = std::chrono::milliseconds(cfg_.heartbeat_ms);
  net.idle_timeout = std::chrono::milliseconds(cfg_.idle_ms);
  net.max_connections = cfg_.max_connections;
  net.max_connections_per_address = cfg_.max_connections_per_address;
  net.memory_budget = std::max(cfg_.queue.total_bytes, 2 * cfg_.max_message_bytes);
  net.curve_secret = curve_secret;
  net.allow = [this](std::string const& key, std::string const& address) { return impl_->allow(key, address); };
  log_transport_bounds(net, cfg_.workers);
  impl_->stats.memory_budget.store(net.memory_budget);
  impl_->net = std::make_unique<zmtp::listener>(impl_->ctx, std::move(net));
  impl_->net->bind(cfg_.endpoint);
  endpoint_ = impl_->net->last_endpoint();
  if (!cfg_.http.empty()) {
    // The HTTP probes ask the I/O thread over an inproc ROUTER of its own
    // (no network, no CURVE handshake).
    std::string const probe = "inproc://placer-probe-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    impl_->probe = std::make_unique<zmq::socket_t>(impl_->ctx, zmq::socket_type::router);
    impl_->probe->set(zmq::sockopt::linger, 0);
    impl_->probe->bind(probe);
    impl_->http = std::make_unique<http_endpoint>(cfg_.http, impl_->ctx, probe, *impl_->metrics, 1000);
  }
}

server::~server() = default;

std::string server::backend_description() const { return impl_->status.front()->get().first; }

std::string server::http_address() const { return impl_->http ? impl_->http->address() : std::string(); }

server_stats server::stats() const {
  auto const& st = impl_->stats;
  server_stats s;
  s.requests = st.requests.load();
  s.rounds_ok = st.rounds_ok.load();
  s.errors = st.errors.load();
  s.handshakes_denied = st.handshakes_denied.load();
  s.oversized = st.oversized.load();
  s.protocol_errors = st.protocol_errors.load();
  s.connections = st.connections.load();
  s.sessions_evicted = st.sessions_evicted.load();
  s.session_bytes = static_cast<std::uint64_t>(st.session_bytes.load());
  s.refused_busy = st.refused_busy.load();
  s.dropped_expired = st.dropped_expired.load();
  s.dropped_disconnected = st.dropped_disconnected.load();
  s.capture = impl_->capture ? impl_->capture->stats() : capture_stats{};
  s.held_bytes = st.held_bytes.load();
  s.memory_budget = st.memory_budget.load();
  s.heartbeats = st.heartbeats.load();
  s.connections_closed = st.closed_by_cause();
  s.requests_refused = st.refused_by_cause();
  return s;
}

namespace {
std::uint64_t count_of(std::vector<std::pair<std::string, std::uint64_t>> const& v, std::string_view cause) {
  for (auto const& [name, n] : v) {
    if (name == cause) return n;
  }
  return 0;
}
}  // namespace

std::uint64_t server_stats::closed(std::string_view cause) const { return count_of(connections_closed, cause); }
std::uint64_t server_stats::refused(std::string_view cause) const { return count_of(requests_refused, cause); }

void server::flush_captures() {
  if (impl_->capture) impl_->capture->flush();
}

std::vector<std::uint8_t> server::handle(void const* data, std::size_t size) {
  auto const reply = impl_->workers.front()->handle(data, size);
  return {reply.begin(), reply.end()};
}

health_status server::health() const {
  auto const now = std::chrono::steady_clock::now();
  auto const st = stats();
  auto ms = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(now - t).count();
  };
  health_status h;
  h.backend = backend_description();  // worker 0's now (a fault may have moved it to the CPU)
  h.workers = static_cast<std::uint32_t>(impl_->slots.size());
  h.uptime_s = std::chrono::duration<double>(now - impl_->started).count();
  h.requests = st.requests;
  h.rounds_ok = st.rounds_ok;
  h.errors = st.errors;
  h.ready = true;
  h.stuck_after_ms = cfg_.stuck_after_ms;
  for (std::size_t k = 0; k < impl_->slots.size(); ++k) {
    auto const& slot = impl_->slots[k];
    worker_health w;
    w.busy = slot.busy;
    w.busy_ms = slot.busy ? ms(slot.since) : 0;
    w.queued = static_cast<std::uint32_t>(impl_->queue.queued(k));
    if (auto const t = impl_->queue.oldest(k)) w.oldest_queued_ms = ms(*t);
    w.rounds = slot.rounds;
    std::tie(w.backend, w.degraded_reason) = impl_->status[k]->get();
    w.degraded = !w.degraded_reason.empty();
    h.degraded = h.degraded || w.degraded;
    if (h.ready && w.busy_ms > cfg_.stuck_after_ms) {
      h.ready = false;
      h.not_ready = "worker " + std::to_string(k) + " has been on one round for " + fmt_ms(w.busy_ms * 1000);
    } else if (h.ready && w.oldest_queued_ms > cfg_.stuck_after_ms) {
      h.ready = false;
      h.not_ready = "worker " + std::to_string(k) + "'s queue is not draining: a round has waited " +
                    fmt_ms(w.oldest_queued_ms * 1000);
    }
    h.worker_states.push_back(w);
  }
  h.queued_rounds = static_cast<std::uint32_t>(impl_->queue.rounds());
  h.queued_bytes = impl_->queue.bytes();
  h.refused_busy = st.refused_busy;
  h.dropped_expired = st.dropped_expired;
  h.dropped_disconnected = st.dropped_disconnected;
  h.handshakes_denied = st.handshakes_denied;
  h.sessions_evicted = st.sessions_evicted;
  h.session_bytes = st.session_bytes;
  h.sessions = static_cast<std::uint64_t>(impl_->stats.sessions.load());
  h.device_faults = impl_->stats.device_faults.load();
  h.connections = st.connections;
  h.held_bytes = st.held_bytes;
  h.memory_budget = st.memory_budget;
  h.heartbeats = st.heartbeats;
  h.connections_closed = st.connections_closed;
  h.requests_refused = st.requests_refused;
  return h;
}

void server::run(std::atomic<bool> const* external_stop) {
  auto& io = *impl_;
  auto& net = *io.net;
  auto const n = io.workers.size();
  auto stopping = [&] { return stop_.load() || (external_stop != nullptr && external_stop->load()); };
  log_info("serving on " + endpoint_ + " with " + std::to_string(n) + " worker(s), backend " + backend_description());

  // One PAIR link per worker; the workers' threads live as long as run().
  // The I/O thread never solves: it stays free to answer probes, queue and
  // refuse rounds, and see peers go while every worker is busy.
  std::vector<zmq::socket_t> links;
  std::vector<std::thread> threads;
  std::atomic<bool> workers_stop{false};
  std::string const tag = std::to_string(reinterpret_cast<std::uintptr_t>(this));
  for (std::size_t k = 0; k < n; ++k) {
    links.emplace_back(io.ctx, zmq::socket_type::pair);
    links.back().bind("inproc://placer-worker-" + tag + "-" + std::to_string(k));
  }
  for (std::size_t k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      zmq::socket_t link(io.ctx, zmq::socket_type::pair);
      link.connect("inproc://placer-worker-" + tag + "-" + std::to_string(k));
      std::vector<zmq::message_t> frames;
      while (!workers_stop.load()) {
        zmq::pollitem_t item{link.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(cfg_.poll_ms));
        if ((item.revents & ZMQ_POLLIN) == 0 || !recv_all(link, frames) || frames.size() < 5) continue;  // 6 with a delimiter
        // [meta, owner, peer, connection, (empty), payload] in; the same
        // envelope, without the meta, the owner and the peer, with the
        // reply out.
        dispatch_meta meta;
        if (frames.front().size() == sizeof meta) std::memcpy(&meta, frames.front().data(), sizeof meta);
        std::optional<double> verify_us;
        if (meta.verify_us >= 0) verify_us = meta.verify_us;
        std::string const owner = frames[1].to_string();
        std::string const peer = frames[2].to_string();
        frames.erase(frames.begin(), frames.begin() + 3);
        auto& payload = frames.back();
        auto const reply =
            io.workers[k]->handle(payload.data(), payload.size(), verify_us, owner, meta.queued_us, peer);
        frames.back() = zmq::message_t(reply.data(), reply.size());  // the one copy of the reply
        send_all(link, frames);
      }
    });
  }

  // A reply to its connection: frames [(empty), payload].
  auto reply_to = [&](std::uint64_t conn, std::vector<zmq::message_t>& frames) { (void)net.send(conn, frames); };

  // An answer from the I/O thread itself: a refusal, counted by its cause.
  auto answer_error = [&](queued_round& q, refusal cause, wire::ErrorCode code, std::string const& msg,
                          std::uint32_t retry_after_ms = 0) {
    io.stats.requests.fetch_add(1);
    io.stats.errors.fetch_add(1);
    io.stats.refuse(cause);
    if (io.metrics) io.metrics->round(code, 0);
    io.stats.rejections.rejected(q.header, q.peer, code, msg);
    auto& frames = q.frames;
    encode_error(io.io_fbb, q.header, code, msg, retry_after_ms);
    frames.back() = zmq::message_t(io.io_fbb.GetBufferPointer(), io.io_fbb.GetSize());
    reply_to(q.conn, frames);
  };

  // Who sent a message: the CURVE key when the connection is authenticated,
  // else the connection (the server's serial, which no peer chooses).
  auto peer_of = [](zmtp::incoming const& e) {
    return e.user_id.empty() ? "conn:" + std::to_string(e.conn) : "curve:" + e.user_id;
  };

  // A message too large to keep was read and dropped by the transport: its
  // sender hears the limit (a permanent error: retrying cannot help), and
  // nothing of it was queued or counted against the peer's queue budget.
  auto answer_oversized = [&](zmtp::incoming const& e) {
    io.stats.oversized.fetch_add(1);
    queued_round q;
    q.conn = e.conn;
    q.peer = peer_of(e);
    if (e.delimited) q.frames.emplace_back();  // answered in the shape it came in
    q.frames.emplace_back();
    std::ostringstream mib;
    mib << static_cast<double>(cfg_.max_message_bytes) / (1 << 20);
    answer_error(q, refusal::oversized, wire::ErrorCode::ResourceExhausted,
                 e.too_many_frames
                     ? "message of " + std::to_string(e.frame_count) + " frames refused: a request is one frame"
                     : "message of " + std::to_string(e.bytes) + " bytes or more exceeds the server's limit of " +
                           std::to_string(cfg_.max_message_bytes) + " bytes (--max-message-mib " + mib.str() +
                           "); it is never accepted: send the cluster as deltas, or ask the operator to raise it");
  };

  // A message the transport read and dropped because the memory its peers
  // hold had reached the budget: retry once replies are read and rounds
  // solved (a hint from the workers' recent round times).
  auto answer_memory = [&](zmtp::incoming const& e) {
    queued_round q;
    q.conn = e.conn;
    q.peer = peer_of(e);
    if (e.delimited) q.frames.emplace_back();
    q.frames.emplace_back();
    double mean_ms = 1;
    for (auto const& slot : io.slots) mean_ms = std::max(mean_ms, slot.mean_ms);
    auto const hint = std::clamp(mean_ms * static_cast<double>(io.queue.rounds() + 1), 10.0, 60000.0);
    answer_error(q, refusal::memory, wire::ErrorCode::ResourceExhausted,
                 "server busy: what its peers' messages and unread replies hold has reached its memory budget of " +
                     std::to_string(net.stats().memory_budget >> 20) + " MiB (--max-queue-mib); retry after about " +
                     std::to_string(static_cast<int>(hint)) + " ms",
                 static_cast<std::uint32_t>(hint));
  };

  // One message off the network: a probe is answered, a round queued (or
  // refused when its peer or the server has too much waiting).
  auto accept = [&](zmtp::incoming& e) {
    // [(empty delimiter from REQ and placer's DEALER peers), payload]
    auto& frames = e.frames;
    if (frames.empty()) return;
    bool const delimited = frames.front().size() == 0 && frames.size() >= 2;
    std::size_t const payload = delimited ? 1 : 0;
    if (frames.size() != payload + 1) {  // multi-frame payloads are malformed
      frames.resize(payload + 1);
      frames[payload] = zmq::message_t{};
    }
    queued_round q;
    q.conn = e.conn;
    q.peer = peer_of(e);
    // The verdict travels with the message, so the worker does not verify
    // it again: the verifier's time (the round's `verify` stage).
    auto const t_verify = std::chrono::steady_clock::now();
    auto const chk = check_envelope(frames[payload].data(), frames[payload].size(), cfg_.max_message_bytes);
    double const verify_us = micros_since(t_verify);
    q.frames = std::move(frames);
    if (chk.envelope == nullptr) {  // answered here: a bad message is never queued
      answer_error(q, chk.code == wire::ErrorCode::ResourceExhausted ? refusal::oversized : refusal::malformed,
                   chk.code, chk.message);
      return;
    }
    q.verify_us = verify_us;
    std::string secret;
    if (auto const* hdr = chk.envelope->header()) {
      q.header.request_id = hdr->request_id();
      if (hdr->session() != nullptr) q.header.session.assign(hdr->session()->string_view());
      if (hdr->session_secret() != nullptr) secret.assign(hdr->session_secret()->string_view());
    }
    if (chk.envelope->body_type() == wire::Body::HealthRequest) {  // probes never wait
      encode_health_reply(io.io_fbb, q.header, health());
      q.frames.back() = zmq::message_t(io.io_fbb.GetBufferPointer(), io.io_fbb.GetSize());
      reply_to(q.conn, q.frames);
      return;
    }
    if (auto const* req = chk.envelope->body_as_ScheduleRequest()) q.deadline_us = req->deadline_us();
    // Who owns the sessions the message names: the client's CURVE key when
    // the connection is authenticated (its sessions survive a reconnect),
    // else the session's secret: the one presented, or one issued now for
    // a session the request makes (the reply carries it).
    auto& owner = io.owner;
    if (!e.user_id.empty()) {
      owner.assign("curve:").append(e.user_id);
    } else if (q.header.session.empty()) {
      owner.clear();
    } else {
      if (secret.empty()) {
        std::uint8_t raw[16];
        randombytes_buf(raw, sizeof raw);
        char hex[2 * sizeof raw + 1];
        sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
        secret = hex;
      } else if (secret.size() > 64) {
        answer_error(q, refusal::malformed, wire::ErrorCode::InvalidArgument, "session_secret longer than 64 bytes");
        return;
      }
      owner.assign("secret:").append(secret);
    }
    // A session's rounds all go to its worker (hash of its key), so they
    // stay in order; a round without one to the least loaded worker.
    std::size_t target = 0;
    if (!q.header.session.empty()) {
      session_key(owner, q.header.session, io.key);
      target = std::hash<std::string>{}(io.key) % n;
    } else {
      auto load = [&](std::size_t k) { return io.queue.queued(k) + (io.slots[k].busy ? 1 : 0); };
      for (std::size_t k = 1; k < n; ++k) target = load(k) < load(target) ? k : target;
    }
    q.owner = owner;
    q.arrived = std::chrono::steady_clock::now();
    q.charge = std::move(e.charge);
    std::size_t const bytes = q.frames.back().size();
    std::string const peer = q.peer;
    auto const verdict = io.queue.push(target, peer, bytes, std::move(q), q.arrived);
    if (verdict == admission::queued) return;
    io.stats.refused_busy.fetch_add(1);
    auto const& slot = io.slots[target];
    auto const hint = std::clamp(slot.mean_ms * static_cast<double>(io.queue.queued(target) + 1), 1.0, 60000.0);
    std::string const why = verdict == admission::peer_rounds
                                ? "you have " + std::to_string(cfg_.queue.peer_rounds) + " rounds waiting already"
                            : verdict == admission::peer_bytes
                                ? "your waiting rounds would pass " + std::to_string(cfg_.queue.peer_bytes >> 20) + " MiB"
                                : "the server's waiting rounds would pass " +
                                      std::to_string(cfg_.queue.total_bytes >> 20) + " MiB";
    answer_error(q,
                 verdict == admission::peer_rounds  ? refusal::queue_rounds
                 : verdict == admission::peer_bytes ? refusal::queue_bytes
                                                    : refusal::queue_total,
                 wire::ErrorCode::ResourceExhausted, "queue full: " + why + "; retry after about " + std::to_string(static_cast<int>(hint)) + " ms",
                 static_cast<std::uint32_t>(hint));
  };

  // The probe endpoint (HTTP's /readyz): health requests only.
  auto answer_probe = [&](std::vector<zmq::message_t>& frames) {
    if (frames.size() < 2) return;
    auto const chk = check_envelope(frames.back().data(), frames.back().size(), cfg_.max_message_bytes);
    if (chk.envelope == nullptr || chk.envelope->body_type() != wire::Body::HealthRequest) return;
    request_header h;
    if (auto const* hdr = chk.envelope->header()) h.request_id = hdr->request_id();
    encode_health_reply(io.io_fbb, h, health());
    frames.back() = zmq::message_t(io.io_fbb.GetBufferPointer(), io.io_fbb.GetSize());
    send_all(*io.probe, frames);
  };

  // What the transport read: messages, oversized ones, connections gone
  // (their waiting rounds have nobody to answer: they go now).
  std::vector<zmtp::incoming> events;
  auto take_events = [&] {
    events.clear();
    net.read(events, 256);
    for (auto& e : events) {
      if (e.what == zmtp::incoming::kind::message) {
        accept(e);
      } else if (e.what == zmtp::incoming::kind::oversized) {
        answer_oversized(e);
      } else if (e.what == zmtp::incoming::kind::refused) {
        answer_memory(e);
      } else {
        auto const gone = io.queue.drop_if([&](queued_round const& q) { return q.conn == e.conn; });
        if (gone > 0) {
          io.stats.dropped_disconnected.fetch_add(gone);
          log_warn(std::to_string(gone) + " queued round(s) dropped: their peer disconnected");
        }
      }
    }
    auto const ns = net.stats();
    io.stats.protocol_errors.store(ns.protocol_errors);
    io.stats.connections.store(ns.connections);
    io.stats.held_bytes.store(ns.held_bytes);
    io.stats.heartbeats.store(ns.pings);
    for (std::size_t k = 0; k < ns.closed.size(); ++k) io.stats.closed[k].store(ns.closed[k]);
  };

  // An idle worker gets the next round in turn that still has someone to
  // answer and time left.
  auto dispatch = [&](std::size_t k) {
    while (auto q = io.queue.pop(k)) {
      double const waited_us = micros_since(q->arrived);
      if (q->deadline_us > 0 && waited_us >= static_cast<double>(q->deadline_us)) {
        io.stats.dropped_expired.fetch_add(1);
        answer_error(*q, refusal::deadline, wire::ErrorCode::DeadlineExceeded,
                     "waited " + fmt_ms(waited_us) + " for a worker, past the request's deadline of " +
                         fmt_ms(static_cast<double>(q->deadline_us)) + "; not solved");
        continue;
      }
      dispatch_meta const meta{q->verify_us.value_or(-1), waited_us};
      std::uint64_t const conn = q->conn;
      q->frames.insert(q->frames.begin(), zmq::message_t(&conn, sizeof conn));
      q->frames.insert(q->frames.begin(), zmq::message_t(q->peer.data(), q->peer.size()));
      q->frames.insert(q->frames.begin(), zmq::message_t(q->owner.data(), q->owner.size()));
      q->frames.insert(q->frames.begin(), zmq::message_t(&meta, sizeof meta));
      send_all(links[k], q->frames);
      io.slots[k].busy = true;
      io.slots[k].since = std::chrono::steady_clock::now();
      return;
    }
  };

  std::vector<zmq::pollitem_t> items(n + 2);
  std::vector<zmq::message_t> frames;
  auto last_flush = std::chrono::steady_clock::now();
  while (!stopping()) {
    items[0] = {net.handle(), 0, ZMQ_POLLIN, 0};
    for (std::size_t k = 0; k < n; ++k) items[k + 1] = {links[k].handle(), 0, ZMQ_POLLIN, 0};
    items[n + 1] = {io.probe ? io.probe->handle() : nullptr, 0, io.probe ? short{ZMQ_POLLIN} : short{0}, 0};
    try {
      zmq::poll(items.data(), io.probe ? items.size() : items.size() - 1, std::chrono::milliseconds(cfg_.poll_ms));
    } catch (zmq::error_t const& e) {
      if (e.num() == EINTR) continue;  // a signal: re-check the stop flags
      throw;
    }
    for (std::size_t k = 0; k < n; ++k) {  // replies back to their clients
      if ((items[k + 1].revents & ZMQ_POLLIN) == 0 || !recv_all(links[k], frames) || frames.empty()) continue;
      std::uint64_t conn = 0;
      if (frames.front().size() == sizeof conn) std::memcpy(&conn, frames.front().data(), sizeof conn);
      frames.erase(frames.begin());
      reply_to(conn, frames);
      auto& slot = io.slots[k];
      slot.busy = false;
      ++slot.rounds;
      slot.mean_ms = 0.8 * slot.mean_ms +
                     0.2 * std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - slot.since).count();
    }
    // Everything that has arrived, so the queue sees every peer's rounds
    // before the next is picked (bounded, so replies are not held back);
    // every pass, so that late handshakes are closed too.
    take_events();
    if (auto const now = std::chrono::steady_clock::now(); now - last_flush >= std::chrono::seconds(1)) {
      io.stats.rejections.flush();  // the summaries of the rejections not logged line by line
      last_flush = now;
    }
    if (io.probe) {
      for (int m = 0; m < 16 && recv_all(*io.probe, frames); ++m) answer_probe(frames);
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (!io.slots[k].busy) dispatch(k);
    }
  }
  workers_stop.store(true);
  for (auto& t : threads) t.join();
  io.stats.rejections.flush(true);
  auto const st = stats();
  log_info("shutting down: " + std::to_string(st.requests) + " requests, " + std::to_string(st.rounds_ok) +
           " rounds, " + std::to_string(st.errors) + " errors");
  if (io.capture) {
    log_info("captures", {{"written", std::to_string(st.capture.written)},
                          {"dropped", std::to_string(st.capture.dropped)},
                          {"failed", std::to_string(st.capture.failed)}});
  }
}

}  // namespace placer::service
