// The service loop: ROUTER socket, verify -> decode -> solve -> encode, one
// try/catch per request mapping exceptions onto wire error codes.
#include <placer/service/log.hpp>
#include <placer/service/server.hpp>

#include <chrono>
#include <sstream>
#include <zmq.hpp>

namespace placer::service {

struct server::impl {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::unique_ptr<solver> solve;
};

namespace {

std::string fmt_ms(double us) {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << us / 1000.0 << " ms";
  return o.str();
}

std::vector<std::uint8_t> finish(flatbuffers::FlatBufferBuilder& fbb) {
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace

server::server(service_config cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<impl>()) {
  impl_->solve = std::make_unique<solver>(kernels::select_backend(cfg_.backend, [](std::string const& m) { log_warn(m); }));
  // Bound the largest frame at the transport too (a generous multiple of the
  // application limit, which answers with ResourceExhausted instead).
  impl_->sock.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(cfg_.max_message_bytes) * 2);
  impl_->sock.set(zmq::sockopt::linger, 0);
  impl_->sock.set(zmq::sockopt::router_mandatory, 0);
  impl_->sock.bind(cfg_.endpoint);
  endpoint_ = impl_->sock.get(zmq::sockopt::last_endpoint);
}

server::~server() = default;

std::string server::backend_description() const { return impl_->solve->backend().description(); }

std::vector<std::uint8_t> server::handle(void const* data, std::size_t size) {
  auto const t0 = std::chrono::steady_clock::now();
  ++stats_.requests;
  flatbuffers::FlatBufferBuilder fbb(1024);
  request_header h;
  auto fail = [&](wire::ErrorCode code, std::string const& msg) {
    ++stats_.errors;
    log_warn("request " + std::to_string(h.request_id) + " rejected: " + error_code_name(code) + ": " + msg);
    fbb.Clear();
    encode_error(fbb, h, code, msg);
    return finish(fbb);
  };

  envelope_check const chk = check_envelope(data, size, cfg_.max_message_bytes);
  if (chk.envelope == nullptr) return fail(chk.code, chk.message);
  if (auto const* hdr = chk.envelope->header()) {
    h.request_id = hdr->request_id();
    if (hdr->session() != nullptr) h.session = hdr->session()->str();
  }
  try {
    decoded_request req = decode_request(*chk.envelope);
    round_input& in = req.input;
    if (req.delta) {
      if (h.session.empty()) {
        return fail(wire::ErrorCode::FailedPrecondition, "a delta needs a session id in the header");
      }
      auto it = sessions_.find(h.session);
      if (it == sessions_.end()) {
        return fail(wire::ErrorCode::StaleEpoch,
                    "no cluster held for session '" + h.session + "': send a full snapshot");
      }
      in.state = apply_delta(it->second, *req.delta);  // throws stale_epoch
    }
    round_result const r = impl_->solve->solve(in);
    fbb.Clear();
    encode_reply(fbb, h, r, in);
    std::size_t const n_nodes = in.state.nodes.size();
    if (!h.session.empty()) {
      // The cluster as sent (the round's placements are the caller's to
      // apply: it reports them back as running jobs or in its next delta).
      if (sessions_.size() >= cfg_.max_sessions && sessions_.count(h.session) == 0) sessions_.erase(sessions_.begin());
      sessions_[h.session] = std::move(in.state);
    }
    double const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.rounds_ok;
    stats_.total_solve_us += us;
    if (cfg_.log_rounds) {
      log_info("round " + std::to_string(h.request_id) + ": " + std::to_string(n_nodes) + " nodes, " +
               std::to_string(in.pending.size()) + " pending, " + std::to_string(r.placements.size()) + " placed, " +
               std::to_string(r.unplaced_jobs.size()) + " unplaced in " + fmt_ms(us) + " (" + r.backend + ")");
    }
    return finish(fbb);
  } catch (logic_error const& e) {
    return fail(error_code_to_wire(e.code()), e.what());
  } catch (std::bad_alloc const&) {
    return fail(wire::ErrorCode::ResourceExhausted, "out of memory while solving the round");
  } catch (std::exception const& e) {
    return fail(wire::ErrorCode::Internal, e.what());
  }
}

void server::run(std::atomic<bool> const* external_stop) {
  auto& sock = impl_->sock;
  log_info("serving on " + endpoint_ + " with backend " + backend_description());
  std::vector<zmq::message_t> frames;
  while (!stop_.load() && (external_stop == nullptr || !external_stop->load())) {
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(cfg_.poll_ms));
    } catch (zmq::error_t const& e) {
      if (e.num() == EINTR) continue;  // a signal: re-check the stop flags
      throw;
    }
    if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
    // One message: [identity, (empty delimiter from REQ peers), payload...].
    frames.clear();
    do {
      zmq::message_t f;
      auto const got = sock.recv(f, zmq::recv_flags::dontwait);
      if (!got) break;
      frames.push_back(std::move(f));
    } while (sock.get(zmq::sockopt::rcvmore));
    if (frames.size() < 2) continue;  // nothing routable to answer
    std::size_t payload = 1;
    bool const req_peer = frames[1].size() == 0 && frames.size() >= 3;
    if (req_peer) payload = 2;
    std::vector<std::uint8_t> reply = frames.size() == payload + 1
                                          ? handle(frames[payload].data(), frames[payload].size())
                                          : handle(nullptr, 0);  // multi-frame payloads are malformed
    sock.send(frames[0], zmq::send_flags::sndmore);
    if (req_peer) sock.send(zmq::message_t{}, zmq::send_flags::sndmore);
    sock.send(zmq::buffer(reply), zmq::send_flags::none);
  }
  log_info("shutting down: " + std::to_string(stats_.requests) + " requests, " + std::to_string(stats_.rounds_ok) +
           " rounds, " + std::to_string(stats_.errors) + " errors");
}

}  // namespace placer::service
