// placer::client over a DEALER socket (see client.hpp).
#include <placer/service/client.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <random>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <zmq.hpp>

namespace placer {

namespace {

/// A round that got no answer: no reply in time, or its connection refused
/// or dropped (the server died). The next attempt may go elsewhere.
class round_lost : public client_error {
 public:
  using client_error::client_error;
};

/// "a,b, c": the endpoints, each checked non-empty.
std::vector<std::string> split_endpoints(std::string const& list) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (true) {
    auto const comma = list.find(',', from);
    std::string e = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    e.erase(0, e.find_first_not_of(" \t"));
    e.erase(e.find_last_not_of(" \t") + 1);
    if (e.empty()) {
      throw client_error("endpoint list '" + list + "' has an empty entry: give one or more endpoints separated by "
                         "commas, e.g. tcp://10.0.0.1:5555,tcp://10.0.0.2:5555");
    }
    out.push_back(std::move(e));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

}  // namespace

struct client::impl {
  zmq::context_t ctx{1};
  std::unique_ptr<zmq::socket_t> sock;
  /// The socket's monitor (libzmq's events over inproc): a connection
  /// refused or dropped ends the wait for a reply at once, not at the timeout.
  std::unique_ptr<zmq::socket_t> monitor;
  bool up = false;       ///< the socket has a connection now (the monitor's last word)
  bool dropped = false;  ///< it had one, or tried to make one, and has none now
  std::string connect_error;  ///< why the socket could not connect to its endpoint ("" when it could)
  flatbuffers::FlatBufferBuilder fbb{1 << 16};  ///< requests, one at a time: reused
  std::vector<std::string> endpoints;
  std::size_t at = 0;  ///< the endpoint the socket is connected to
  unsigned serial = 0;  ///< names each socket's monitor
  std::mt19937_64 rng{std::random_device{}()};  ///< back-off jitter

  struct reply;
  /// `while_waiting`, if any, runs once the request is on its way, before
  /// the wait for the reply. Throws round_lost when no reply comes.
  reply exchange(client_options const& opt, void const* data, std::size_t size, std::uint64_t request_id,
                 std::function<void()> const& while_waiting = {});

  [[nodiscard]] std::string const& endpoint() const { return endpoints[at]; }

  ~impl() { stop_monitor(); }

  /// The monitor stopped before its reader goes (libzmq would block
  /// sending it events no one reads).
  void stop_monitor() {
    if (sock && monitor) (void)zmq_socket_monitor(sock->handle(), nullptr, 0);
    monitor.reset();
  }

  void connect(client_options const& opt) {
    stop_monitor();
    sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    sock->set(zmq::sockopt::linger, 0);
    sock->set(zmq::sockopt::sndtimeo, opt.timeout_ms);
    // Reconnects to a server that is down back off to 2 s, so an idle
    // client's monitor sees a few events a second at most.
    sock->set(zmq::sockopt::reconnect_ivl_max, 2000);
    up = dropped = false;
    try {
      if (!opt.server_key.empty()) {
        sock->set(zmq::sockopt::curve_serverkey, opt.server_key);
        sock->set(zmq::sockopt::curve_publickey, opt.keys.public_key);
        sock->set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
      }
      std::string const mon = "inproc://placer-client-monitor-" + std::to_string(serial++);
      if (zmq_socket_monitor(sock->handle(), mon.c_str(),
                             ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) != 0) {
        throw zmq::error_t();
      }
      monitor = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
      monitor->set(zmq::sockopt::linger, 0);
      monitor->connect(mon);
      connect_error.clear();
      sock->connect(endpoint());
    } catch (zmq::error_t const& e) {
      connect_error = "cannot connect to '" + endpoint() + "': " + e.what();
      throw client_error(connect_error);
    }
  }

  /// Reads the monitor's waiting events; true when one says a request on
  /// its way is lost: the connection dropped, or an attempt to make one
  /// failed while there is none.
  bool connection_lost() {
    bool lost = false;
    while (true) {
      zmq::message_t ev, addr;
      if (!monitor->recv(ev, zmq::recv_flags::dontwait)) return lost;
      if (monitor->get(zmq::sockopt::rcvmore)) (void)monitor->recv(addr, zmq::recv_flags::dontwait);
      if (ev.size() < 2) continue;
      std::uint16_t event = 0;
      std::memcpy(&event, ev.data(), sizeof event);
      if (event == ZMQ_EVENT_CONNECTED) {
        up = true;
        dropped = false;
      } else if (event == ZMQ_EVENT_DISCONNECTED) {
        up = false;
        dropped = lost = true;
      } else if (event == ZMQ_EVENT_CONNECT_RETRIED && !up) {
        dropped = lost = true;
      }
    }
  }

  /// The back-off's random factor: uniform in [lo, hi).
  double jitter(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

  /// One call's way over the endpoints (client::send, client::roundtrip).
  struct walk {
    std::vector<bool> failed;  ///< endpoints that lost a request of this call
    int lost = 0;              ///< requests lost so far
    int max_lost = 0;          ///< lost ones before the call gives up
    int passes = 0;            ///< back-offs so far
    std::chrono::steady_clock::time_point budget_end;
    bool budgeted = false;
  };
  walk start_walk(client_options const& opt) const {
    walk w;
    w.failed.assign(endpoints.size(), false);
    w.max_lost = std::max(opt.retries, static_cast<int>(endpoints.size()) - 1);
    w.budgeted = opt.retry_budget_ms > 0;
    w.budget_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt.retry_budget_ms);
    return w;
  }
  [[nodiscard]] bool past_budget(walk const& w, std::chrono::steady_clock::duration wait) const {
    return w.budgeted && std::chrono::steady_clock::now() + wait >= w.budget_end;
  }
  /// A request was lost at the current endpoint: false when the call's
  /// count or time is spent; else the socket is on the next endpoint, at
  /// once where it has not failed in this call, after a jittered back-off
  /// where it has.
  bool move_on(walk& w, client_options const& opt) {
    w.failed[at] = true;
    std::size_t const next = (at + 1) % endpoints.size();
    std::chrono::steady_clock::duration wait{};
    if (w.failed[next]) {
      double const ms = std::min<double>(opt.backoff_max_ms, opt.backoff_ms * std::pow(2.0, std::min(w.passes, 20)));
      wait = std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000 * jitter(0.5, 1.0)));
      ++w.passes;
    }
    if (w.lost >= w.max_lost || past_budget(w, wait)) return false;
    ++w.lost;
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
    if (next != at) {
      at = next;
      try {
        connect(opt);
      } catch (client_error const&) {  // (kept in connect_error: that attempt is lost at once)
      }
    }
    return true;
  }
  /// The error of a call that gave up.
  [[nodiscard]] std::string gave_up(walk const& w, std::string const& why) const {
    auto const n = endpoints.size();
    if (n == 1 && w.lost == 0) return why;
    return why + " (" + std::to_string(w.lost + 1) + " rounds lost over " + std::to_string(n) + " endpoint" +
           (n > 1 ? "s)" : ")");
  }
};

namespace {
std::uint64_t now_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}
}  // namespace

client::client(client_options opt) : opt_(std::move(opt)), impl_(std::make_unique<impl>()) {
  if (opt_.session.empty()) {
    std::random_device rd;
    opt_.session = "client-" + std::to_string((static_cast<std::uint64_t>(rd()) << 32) | rd());
  }
  if (opt_.timeout_ms <= 0) throw client_error("timeout_ms must be positive");
  if (opt_.retries < 0 || opt_.busy_retries < 0 || opt_.retry_budget_ms < 0 || opt_.backoff_ms < 0 ||
      opt_.backoff_max_ms < 0) {
    throw client_error("retries, busy_retries, retry_budget_ms and the back-off must not be negative");
  }
  impl_->endpoints = split_endpoints(opt_.endpoint);
  impl_->connect(opt_);
}

client::~client() = default;

void client::reconnect() { impl_->connect(opt_); }

std::vector<std::string> const& client::endpoints() const { return impl_->endpoints; }
std::string const& client::current_endpoint() const { return impl_->endpoint(); }

/// Sends one request and waits for its reply: the reply frame, the verdict
/// on it (checked once, here; `envelope` is not kept because a small zmq
/// message stores its bytes inline and moves with it) and when it arrived.
struct client::impl::reply {
  zmq::message_t payload;
  service::envelope_check check;
  std::chrono::steady_clock::time_point received;
};

client::impl::reply client::impl::exchange(client_options const& opt, void const* data, std::size_t size,
                                           std::uint64_t request_id, std::function<void()> const& while_waiting) {
  // REQ-compatible framing: an empty delimiter, then the payload. A send
  // waits at most the timeout for a connected peer (a DEALER with none,
  // e.g. while a CURVE server keeps refusing the handshake, would block).
  if (!connect_error.empty()) throw round_lost(connect_error);
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt.timeout_ms);
  // The connection dropped since the last request (the server died or
  // restarted between rounds) and has not come back: a fresh socket tries
  // at once, rather than at libzmq's next reconnection attempt (which backs
  // off to reconnect_ivl_max); refused, the wait below ends at once.
  (void)connection_lost();
  if (dropped) {
    try {
      connect(opt);
    } catch (client_error const&) {
    }
    if (!connect_error.empty()) throw round_lost(connect_error);
  }
  bool const sent = sock->send(zmq::message_t{}, zmq::send_flags::sndmore).has_value() &&
                    sock->send(zmq::buffer(data, size), zmq::send_flags::none).has_value();
  if (sent && while_waiting) while_waiting();
  auto lost = [&](std::string const& why) {
    // Rebuild the socket so the unanswered request is dropped and a
    // restarted server is reached fresh on the next call.
    std::string const was = endpoint();
    try {
      connect(opt);
    } catch (client_error const&) {  // (kept in connect_error: the next attempt here is lost at once)
    }
    return round_lost("no reply from " + was + why + ": is the Placer service running there? (start it with `placer serve`" +
                      (opt.server_key.empty() ? ")" : "; a CURVE server that does not list this client's key "
                                                      "never answers)"));
  };
  while (true) {
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    zmq::pollitem_t items[] = {{sock->handle(), 0, ZMQ_POLLIN, 0}, {monitor->handle(), 0, ZMQ_POLLIN, 0}};
    if (sent && left.count() > 0) zmq::poll(items, 2, left);
    if ((items[1].revents & ZMQ_POLLIN) != 0 && (items[0].revents & ZMQ_POLLIN) == 0 && connection_lost()) {
      throw lost(": its connection was refused or dropped with the request in flight");
    }
    if ((items[0].revents & ZMQ_POLLIN) == 0) {
      if (items[1].revents != 0 && left.count() > 0) continue;  // an event that loses nothing
      throw lost(" within " + std::to_string(opt.timeout_ms) + " ms");
    }
    std::vector<zmq::message_t> frames;
    do {
      zmq::message_t f;
      if (!sock->recv(f, zmq::recv_flags::dontwait)) break;
      frames.push_back(std::move(f));
    } while (sock->get(zmq::sockopt::rcvmore));
    if (frames.empty()) continue;
    reply r{std::move(frames.back()), {}, std::chrono::steady_clock::now()};
    // Match by request id; a stale reply to an earlier, timed-out request
    // is dropped. Error replies to unparseable requests carry id 0.
    r.check = service::check_envelope(r.payload.data(), r.payload.size());
    auto const* env = r.check.envelope;
    if (env != nullptr && env->header() != nullptr && env->header()->request_id() != request_id &&
        env->header()->request_id() != 0) {
      continue;
    }
    r.check.envelope = nullptr;  // points into the frame; re-derived by the caller
    return r;
  }
}

service::health_status client::health() {
  service::request_header h{next_id_++, opt_.session, now_us()};
  auto& fbb = impl_->fbb;
  service::encode_health_request(fbb, h);
  auto const r = impl_->exchange(opt_, fbb.GetBufferPointer(), fbb.GetSize(), h.request_id);
  if (r.check.code != wire::ErrorCode::Ok) {
    throw client_error(std::string("unreadable reply from the service: ") + r.check.message);
  }
  try {
    return service::decode_health_reply(*wire::GetEnvelope(r.payload.data()));
  } catch (logic_error const& e) {
    throw client_error(e.what());
  }
}

std::vector<std::uint8_t> client::roundtrip(void const* data, std::size_t size, std::uint64_t request_id) {
  // The same bytes to the next endpoint when lost (a full request: nothing
  // in it depends on where the session is).
  auto w = impl_->start_walk(opt_);
  while (true) {
    try {
      auto const r = impl_->exchange(opt_, data, size, request_id);
      auto const* p = static_cast<std::uint8_t const*>(r.payload.data());
      return {p, p + r.payload.size()};
    } catch (round_lost const& e) {
      if (!impl_->move_on(w, opt_)) throw client_error(impl_->gave_up(w, e.what()));
      ++retries_;
    }
  }
}

service::decoded_reply client::send(round_input const& in, cluster_delta const* delta, job_delta const* jobs,
                                    std::chrono::steady_clock::time_point t0,
                                    std::function<void()> const& while_waiting) {
  auto& fbb = impl_->fbb;
  auto w = impl_->start_walk(opt_);
  int busy = 0;  // ResourceExhausted retries at this endpoint
  std::chrono::steady_clock::time_point t_sent;
  impl::reply r;
  service::decoded_reply refused;  // the last ResourceExhausted, returned when nothing better comes
  bool have_refused = false;
  while (true) {
    // The session lives where its last round was accepted; anywhere else
    // the round goes in full (the same round: `in` is the whole of it).
    bool const elsewhere = holder_ >= 0 && static_cast<std::size_t>(holder_) != impl_->at;
    bool const full = delta == nullptr || elsewhere;
    // A fresh request id each time: a late reply to an earlier attempt is
    // dropped by exchange().
    service::request_header h{next_id_++, opt_.session, now_us(), secret_};
    service::encode_request(fbb, h, in, full ? nullptr : delta, full ? nullptr : jobs);
    t_sent = std::chrono::steady_clock::now();
    std::string lost_why;
    try {
      r = impl_->exchange(opt_, fbb.GetBufferPointer(), fbb.GetSize(), h.request_id, while_waiting);
    } catch (round_lost const& e) {
      lost_why = e.what();
    }
    if (lost_why.empty() && r.check.code == wire::ErrorCode::Ok) {
      auto const* env = wire::GetEnvelope(r.payload.data());
      auto const* err = env->body_as_Error();
      if (err != nullptr && err->code() == wire::ErrorCode::ResourceExhausted && err->retry_after_ms() > 0) {
        // A full queue: not before its hint, at the same endpoint, a few
        // times; then it counts as lost there.
        refused = service::decode_reply(*env);
        have_refused = true;
        auto const wait = std::chrono::milliseconds(static_cast<std::int64_t>(
            std::max<double>(err->retry_after_ms(), opt_.backoff_ms) * impl_->jitter(1.0, 1.5)));
        if (busy < opt_.busy_retries && !impl_->past_budget(w, wait)) {
          ++busy;
          ++busy_retries_;
          std::this_thread::sleep_for(wait);
          continue;
        }
        lost_why = "ResourceExhausted from " + impl_->endpoint() + " past " + std::to_string(busy) + " retries: " +
                   refused.message;
      }
    }
    if (lost_why.empty()) break;  // a reply: this round's, whatever it says
    busy = 0;
    if (!impl_->move_on(w, opt_)) {
      if (have_refused) return refused;  // the server's own word
      throw client_error(impl_->gave_up(w, lost_why));
    }
    ++retries_;
  }
  if (r.check.code != wire::ErrorCode::Ok) {
    throw client_error(std::string("unreadable reply from the service: ") + service::error_code_name(r.check.code) +
                       ": " + r.check.message);
  }
  auto const* env = wire::GetEnvelope(r.payload.data());  // verified in exchange
  // Without CURVE the server issues the session's secret with the round
  // that makes it; it goes with every later request, so the session stays
  // this client's across a rebuilt socket, and no one else's (a replica
  // that gets it with a snapshot keys the session by it too).
  if (auto const* hdr = env->header(); hdr != nullptr && hdr->session_secret() != nullptr &&
                                       hdr->session_secret()->size() > 0) {
    secret_.assign(hdr->session_secret()->string_view());
  }
  auto reply = service::decode_reply(*env);
  bool const elsewhere = holder_ >= 0 && static_cast<std::size_t>(holder_) != impl_->at;
  if (reply.code == wire::ErrorCode::Ok) {
    if (elsewhere) {
      ++failovers_;
      if (delta != nullptr) ++resyncs_;  // a delta round that went in full
    }
    holder_ = static_cast<int>(impl_->at);
  }
  auto const t_end = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  last_timing_ = {us(t_sent - t0), us(t_end - r.received), us(t_end - t0)};
  return reply;
}

service::decoded_reply client::keep(service::decoded_reply reply) {
  if (reply.code == wire::ErrorCode::Ok) {
    if (!mirror_) mirror_.emplace();
    std::swap(*mirror_, next_);
    moved_ = undo_.armed = false;
  } else {
    undo_cluster();
  }
  return reply;
}

void client::undo_cluster() noexcept {
  if (!moved_) return;
  moved_ = false;
  revert_delta(next_.state, undo_);
  std::swap(next_.state, mirror_->state);
}

service::decoded_reply client::solve(round_input const& in) {
  auto const t0 = std::chrono::steady_clock::now();
  // Encoded from the caller's round; the copy the mirror keeps (over the
  // last one, reusing its storage) is made while the service solves, not
  // before sending: at 100k GPUs of labelled nodes it is about 10 ms.
  bool copied = false;
  auto copy = [&] {
    if (!copied) next_ = in;
    copied = true;
  };
  auto reply = send(in, nullptr, nullptr, t0, copy);
  copy();
  return keep(std::move(reply));
}

void client::move_cluster(cluster_delta const& delta, round_input const& rest) {
  if (!mirror_) throw client_error("solve_delta needs a full snapshot first (call solve)");
  // The mirror's cluster itself, moved on in place: the mirror takes it back
  // unless the server takes the round (keep).
  std::swap(next_.state, mirror_->state);
  moved_ = true;
  try {
    apply_delta(next_.state, delta, undo_);  // throws on a bad or stale delta, before sending
  } catch (...) {
    undo_cluster();
    if (undo_.lost) mirror_.reset();  // out of memory half-way: the next round goes in full
    throw;
  }
  next_.pol = rest.pol;
  next_.now = rest.now;
  next_.deadline_us = rest.deadline_us;
}

service::decoded_reply client::send_delta(cluster_delta const& delta, job_delta const* jobs,
                                          std::chrono::steady_clock::time_point t0) {
  auto reply = send(next_, &delta, jobs, t0);
  if (reply.code == wire::ErrorCode::StaleEpoch) {
    // The server no longer holds our epoch: send the whole updated round.
    ++resyncs_;
    reply = send(next_, nullptr, nullptr, std::chrono::steady_clock::now());
  }
  return keep(std::move(reply));
}

service::decoded_reply client::solve_delta(cluster_delta const& delta, round_input const& jobs_only) {
  auto const t0 = std::chrono::steady_clock::now();
  move_cluster(delta, jobs_only);
  try {
    next_.pending = jobs_only.pending;
    next_.running = jobs_only.running;
    return send_delta(delta, nullptr, t0);
  } catch (...) {
    undo_cluster();
    throw;
  }
}

service::decoded_reply client::solve_delta(cluster_delta const& delta, job_delta const& jobs,
                                           round_input const& rest) {
  auto const t0 = std::chrono::steady_clock::now();
  move_cluster(delta, rest);
  try {
    // Throws on a bad job delta, before sending.
    apply_job_delta(mirror_->pending, mirror_->running, jobs, next_.pending, next_.running);
    return send_delta(delta, &jobs, t0);
  } catch (...) {
    undo_cluster();
    throw;
  }
}

namespace {

/// How `to` follows from `from` as a job delta: `from` without `left`, then
/// `arrived` appended. The jobs of `from` found, unchanged and in order, at
/// the head of `to` stay; every other job of `from` leaves (coming back in
/// the appended tail if `to` still holds its name). False when a name
/// repeats in either list, which a delta keyed by name cannot express.
template <class Job>
bool diff_jobs(std::vector<Job> const& from, std::vector<Job> const& to, std::vector<std::string>& left,
               std::vector<Job>& arrived) {
  std::unordered_map<std::string_view, std::size_t> at;  // name -> index in `to`
  at.reserve(to.size());
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (!at.emplace(to[i].name, i).second) return false;
  }
  std::unordered_set<std::string_view> seen;
  seen.reserve(from.size());
  std::size_t kept = 0;  // to[0..kept) are from's jobs that stay
  for (auto const& j : from) {
    if (!seen.insert(j.name).second) return false;
    auto const it = at.find(j.name);
    if (it != at.end() && it->second == kept && to[kept] == j) {
      ++kept;
    } else {
      left.push_back(j.name);
    }
  }
  arrived.assign(to.begin() + static_cast<std::ptrdiff_t>(kept), to.end());
  return true;
}

}  // namespace

service::decoded_reply client::solve_incremental(round_input const& in) {
  if (!mirror_ || in.state.epoch <= mirror_->state.epoch || in.state.nodes.size() != mirror_->state.nodes.size() ||
      !(in.state.topo == mirror_->state.topo)) {
    return solve(in);
  }
  cluster_delta d;
  d.base_epoch = mirror_->state.epoch;
  d.new_epoch = in.state.epoch;
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    if (!(in.state.nodes[i] == mirror_->state.nodes[i])) {
      d.changed.push_back({static_cast<std::int32_t>(i), in.state.nodes[i]});
    }
  }
  job_delta jd;
  if (!diff_jobs(mirror_->pending, in.pending, jd.removed, jd.added) ||
      !diff_jobs(mirror_->running, in.running, jd.finished, jd.started)) {
    return solve_delta(d, in);
  }
  return solve_delta(d, jd, in);
}

}  // namespace placer
