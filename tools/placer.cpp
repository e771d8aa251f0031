// The `placer` command: serve, solve (in process), client (through the
// service). Everything here is argument handling and printing; the work is
// in the solver and service libraries.
#include <placer/kernels/backend.hpp>
#include <placer/service/capture.hpp>
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/json_io.hpp>
#include <placer/service/log.hpp>
#include <placer/service/server.hpp>
#include <placer/solver/solver.hpp>
#include <placer/traces/synthetic.hpp>

#include "cli.hpp"
#include "commands.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

namespace {

using namespace placer;

constexpr char const* usage_text = R"(placer: GPU placement solver service

usage:
  placer serve  [--endpoint E] [--backend auto|cpu|cuda|twin] [--auto-trial 10k|100k|...] [--workers N]
                [--max-message-mib N]
                [--max-nodes N] [--max-jobs N] [--max-replicas N] [--max-round-ms N] [--max-session-mib N]
                [--max-queued N] [--max-queued-mib N] [--max-queue-mib N] [--stuck-ms N] [--http HOST:PORT]
                [--max-connections N] [--max-connections-per-address N]
                [--heartbeat-s S] [--idle-timeout-s S] [--message-timeout-s S]
                [--demo DIR] [--quiet] [--log-format text|json] [--log-level debug|info|warn|error]
                [--curve-secret FILE --allow-keys DIR | --insecure]
                [--capture DIR [--capture-every N] [--capture-slower-ms T] [--capture-max-mib M]]
                (per round: 100000 nodes, 100000 pending jobs, 1000000 pending replicas, 5000 ms by default;
                 sessions: 4096 MiB per worker, least recently used evicted first;
                 waiting rounds: 8 and 256 MiB per peer, peers served in turn;
                 what peers make the server hold (messages, rounds waiting, unread replies): 1024 MiB;
                 4096 connections, 1024 from one address, the idle longest closed first when full;
                 a quiet peer PINGed after 10 s, closed after 30 s of silence; a message within 30 s;
                 not ready once a round has run or waited 10000 ms;
                 --http: GET /metrics (Prometheus), /livez, /readyz; off unless given;
                 without CURVE keys only loopback and ipc:// endpoints, unless --insecure;
                 --capture: the rounds solved as request files in DIR, 256 MiB at most, oldest deleted first)
  placer keygen --out DIR --name NAME
                (a CURVE key pair: DIR/NAME.key, public, and DIR/NAME.key_secret, mode 0600)
  placer solve  --cluster FILE --jobs FILE [--backend auto|cpu|cuda|twin]
                [--algorithm placer|greedy|kube-least|kube-most|first-fit] [--order fifo|pack|strict]
                [--summary] [--output FILE]
                (--order: a priority level's jobs in submission order, the default, or largest first;
                 docs/policies.md, "Queue order")
  placer solve  --request FILE [--backend ...] [--algorithm ...] [--order ...] [--summary] [--output FILE]
                (replays a request file, e.g. one `placer serve --capture` wrote: prints the reply)
  placer client --cluster FILE --jobs FILE [--endpoint E] [--timeout-ms N]
                [--algorithm ...] [--order ...] [--summary] [--output FILE]
  placer client --raw FILE [--endpoint E]   (send a file's bytes as they are; prints the reply)
                (client, health, bench and simulate --endpoint take --server-key FILE --client-cert FILE)
  placer health [--endpoint E] [--timeout-ms N] [--ready | --live] [--quiet]
                (readiness, the default: exit 0 when every worker is served in time, 4 when one has been
                 on a round or its queue has waited past the server's --stuck-ms, 5 when ready but a
                 worker runs on its CPU fallback after a device fault; --live: 0 when the service
                 answers at all; 3 when it does not; prints each worker's state and backend)
  placer compare --cluster FILE --jobs FILE [--backend auto|cpu|cuda|twin] [--repeat N]
                (every algorithm on the same round, side by side)
  placer bench  [--scenario 1k|10k|100k|openb, also -k8s|-nfd|-split] [--rounds N] [--mode closed|open] [--rate R]
                [--configs cuda,cpu,twin,kube] [--endpoint E] [--json FILE] [--plot FILE.svg]
                [--clients N] [--workers N] [--duration S]
                (load generator over the real client; starts its own servers unless --endpoint;
                 N sessions at once with --clients N, solved N at a time with --workers N)
  placer simulate [--trace itp:clusterNN|mixed:clusterNN|openb:NAME|dlrm|synthetic] [--algorithm A | --compare A,B]
                [--backfill easy|conservative] [--preemption] [--elastic] [--delay-scheduling] ...
                (trace-driven discrete-event simulator; `placer simulate --help`)
  placer experiment fgd [--workload NAME|--all] [--seeds 42-51] [--json] [--plot FILE]
  placer experiment policies [--trace itp:clusterNN] [--out DIR] [--json]
  placer experiment tenants [--trace itp:clusterNN] [--out DIR] [--json]
  placer experiment rounds [--clusters LIST|all] [--nodes 24] [--runs LIST] [--out DIR] [--split A,B]
                (the FGD paper's table; each cross-round policy on and off on real traces; tenants;
                 every algorithm round after round on the ITP traces: waits and fragmentation)
  placer slurm-bridge [--endpoint E] [--partition P] [--interval S] [--once] [--dry-run] [--no-stacking] [--preempt] [--slurm-api A]
                [--fallback-after S]
  placer version

Files: a cluster is FlatBuffers JSON (root Cluster, schemas/placement.fbs) or an
inventory CSV (openb node list, PAI machine spec, spot node list); jobs are JSON
(root JobBatch) or an openb pod list CSV. Placements print as FlatBuffers JSON
of the reply (Envelope); --summary prints a table instead. The jobs file's
policy.queue switches on the cross-round policies (docs/policies.md).
Default endpoint: tcp://127.0.0.1:5555. Clients (client, bench, simulate, slurm-bridge) take several
replicas, --endpoint tcp://a:5555,tcp://b:5555: a round lost at one (no reply within --timeout-ms, or its
connection refused or dropped) goes to the next as a full snapshot (docs/deployment.md, "Two replicas").
)";

using tools::usage_error;

/// The verb and its options.
struct args : tools::cli_args {
  std::string verb;
};

args parse(int argc, char** argv, std::set<std::string> const& valued, std::set<std::string> const& boolean) {
  args a;
  a.verb = argc > 1 ? argv[1] : "";
  static_cast<tools::cli_args&>(a) = tools::parse_cli(argc, argv, 2, valued, boolean, a.verb);
  return a;
}


/// --algorithm and --order over the file's policy.
void override_policy(args const& a, policy& pol) {
  try {
    if (a.has("algorithm")) pol.algo = parse_algorithm(a.get("algorithm"));
    if (a.has("order")) pol.order = parse_queue_order(a.get("order"));
  } catch (logic_error const& e) {
    throw usage_error(e.what());
  }
}

round_input load_round(args const& a) {
  if (!a.has("cluster") || !a.has("jobs")) throw usage_error("--cluster FILE and --jobs FILE are required");
  round_input in;
  in.state = service::read_cluster_file(a.get("cluster"));
  service::job_batch b = service::read_jobs_file(a.get("jobs"));
  in.pending = std::move(b.pending);
  in.running = std::move(b.running);
  in.pol = b.pol;
  in.now = b.now;
  in.queues = std::move(b.queues);
  override_policy(a, in.pol);
  return in;
}

std::string fixed(double v, int prec) {
  std::ostringstream o;
  o.precision(prec);
  o << std::fixed << v;
  return o.str();
}

/// Human-readable table of a reply.
void print_summary(std::ostream& os, round_input const& in, round_result const& r, double latency_us) {
  auto const& nodes = in.state.nodes;
  os << "Placements (" << r.placements.size() << " of " << in.pending.size() << " jobs placed)\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-28s %-9s %8s %8s  %s\n", "job", "kind", "replicas", "GPUs", "nodes [GPU indices]");
  os << line;
  static char const* kinds[] = {"training", "inference", "batch"};
  std::size_t shown = 0;
  for (auto const& p : r.placements) {
    if (++shown > 40) {
      os << "  ... " << r.placements.size() - 40 << " more (use JSON output for all)\n";
      break;
    }
    auto const& j = in.pending[p.job];
    std::string where;
    for (std::size_t k = 0; k < p.replicas.size() && k < 3; ++k) {
      auto const& rp = p.replicas[k];
      if (!where.empty()) where += ", ";
      where += nodes[rp.node].name + " [";
      for (std::size_t g = 0; g < rp.gpus.size(); ++g) where += (g ? "," : "") + std::to_string(rp.gpus[g]);
      where += "]";
      if (rp.gpu_milli < milli_per_gpu && !rp.gpus.empty()) where += "@" + std::to_string(rp.gpu_milli) + "m";
    }
    if (p.replicas.size() > 3) where += ", +" + std::to_string(p.replicas.size() - 3) + " more";
    double const gpus = static_cast<double>(j.per_replica.gpu_milli_total()) * p.replicas.size() / 1000.0;
    std::snprintf(line, sizeof line, "  %-28s %-9s %8zu %8s  %s\n", j.name.substr(0, 28).c_str(),
                  kinds[static_cast<int>(j.kind)], p.replicas.size(), fixed(gpus, 2).c_str(), where.c_str());
    os << line;
  }
  if (!r.unplaced_jobs.empty()) {
    std::map<std::string, int> by_reason;
    for (auto const& u : r.unplaced_jobs) by_reason[to_string(u.reason)]++;
    os << "Unplaced: " << r.unplaced_jobs.size() << " (";
    bool first = true;
    for (auto const& [k, v] : by_reason) {
      os << (first ? "" : ", ") << k << " " << v;
      first = false;
    }
    os << ")\n";
    int listed = 0;
    for (auto const& u : r.unplaced_jobs) {
      if (++listed > 40) {
        os << "  ... " << r.unplaced_jobs.size() - 40 << " more (use JSON output for all)\n";
        break;
      }
      auto const name = u.job >= 0 && static_cast<std::size_t>(u.job) < in.pending.size() ? in.pending[u.job].name : "?";
      os << "  " << name << ": " << to_string(u.reason) << (u.detail.empty() ? "" : ": " + u.detail) << "\n";
    }
  }
  auto const& m = r.metrics;
  os << "Round: " << m.replicas_placed << " replicas, " << fixed(m.gpu_milli_placed / 1000.0, 2) << " GPUs placed; GAR "
     << fixed(100 * m.gar_before, 1) << "% -> " << fixed(100 * m.gar_after, 1) << "%, GFR " << fixed(100 * m.gfr_before, 1)
     << "% -> " << fixed(100 * m.gfr_after, 1) << "%, FGD frag ratio " << fixed(100 * m.frag_ratio_before, 1) << "% -> "
     << fixed(100 * m.frag_ratio_after, 1) << "%\n";
  os << "Timing:";
  for (auto const& t : r.timing) os << " " << t.stage << " " << fixed(t.micros / 1000.0, 3) << "ms";
  os << "\n";
  for (auto const& t : r.timing) {
    if (t.stage == "total") {
      os << "Backend steps: " << t.calls << " stage calls, " << t.waits << " device-to-host waits";
      if (t.bytes_up + t.bytes_down > 0) {
        os << ", " << fixed(static_cast<double>(t.bytes_up) / 1e6, 3) << " MB to the device and "
           << fixed(static_cast<double>(t.bytes_down) / 1e6, 3) << " MB back";
      }
      os << "\n";
    }
  }
  if (latency_us > 0) os << "Round-trip latency: " << fixed(latency_us / 1000.0, 3) << " ms (backend " << r.backend << ")\n";
  else os << "Backend: " << r.backend << "\n";
}

void write_output(args const& a, std::string const& text) {
  if (!a.has("output")) {
    std::cout << text;
    return;
  }
  std::ofstream f(a.get("output"));
  if (!f) throw std::runtime_error(a.get("output") + ": cannot open for writing");
  f << text;
}

void print_reply(args const& a, round_input const& in, service::decoded_reply const& rep,
                 std::vector<std::uint8_t> const& bytes, double latency_us) {
  if (rep.code != wire::ErrorCode::Ok) {
    throw std::runtime_error(std::string("service replied ") + service::error_code_name(rep.code) + ": " + rep.message);
  }
  if (a.has("summary")) {
    std::ostringstream o;
    print_summary(o, in, rep.result, latency_us);
    write_output(a, o.str());
  } else {
    write_output(a, service::envelope_to_json(bytes.data(), bytes.size()));
  }
}

/// `placer solve --request FILE`: a request file (a capture of `placer
/// serve --capture`) read for a replay; the reply then carries its header.
round_input load_request(args const& a, service::request_header& h) {
  if (a.has("cluster") || a.has("jobs")) throw usage_error("--request FILE holds the whole round: no --cluster or --jobs");
  service::decoded_request req = service::read_request_file(a.get("request"));
  if (req.input.pol.queue.delay_scheduling) {
    service::log_warn("the request has delay scheduling on: the replay starts from empty timers (the service's "
                      "session kept them across rounds), so deferrals can differ from the service's reply");
  }
  override_policy(a, req.input.pol);
  h = req.header;
  return std::move(req.input);
}

int cmd_solve(int argc, char** argv) {
  auto const a = parse(argc, argv, {"cluster", "jobs", "request", "backend", "algorithm", "order", "output"}, {"summary"});
  service::request_header h;
  round_input in = a.has("request") ? load_request(a, h) : load_round(a);
  solver s(kernels::select_backend(a.get("backend", "auto"), [](std::string const& m) { service::log_info(m); }));
  round_result const r = s.solve(in);
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_reply(fbb, h, r, in);
  std::vector<std::uint8_t> const bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  service::decoded_reply rep;
  rep.result = r;
  print_reply(a, in, rep, bytes, 0);
  return 0;
}

/// `placer client --raw FILE`: send a file's bytes unchanged (to see how the
/// service answers a malformed or hand-made message) and print the reply.
int send_raw(args const& a, client& c) {
  std::ifstream f(a.get("raw"), std::ios::binary);
  if (!f) throw std::runtime_error(a.get("raw") + ": cannot open file");
  std::vector<char> const bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The reply carries the request id the file's header holds (0 when the
  // file is not a readable envelope: the server's error reply then has 0).
  std::uint64_t id = 0;
  auto const sent = service::check_envelope(bytes.data(), bytes.size());
  if (sent.envelope != nullptr && sent.envelope->header() != nullptr) id = sent.envelope->header()->request_id();
  auto const reply = c.roundtrip(bytes.data(), bytes.size(), id);
  auto const chk = service::check_envelope(reply.data(), reply.size());
  if (chk.envelope == nullptr) throw std::runtime_error("unreadable reply: " + chk.message);
  write_output(a, service::envelope_to_json(reply.data(), reply.size()));
  auto const rep = service::decode_reply(*chk.envelope);
  return rep.code == wire::ErrorCode::Ok ? 0 : 4;
}

int cmd_client(int argc, char** argv) {
  auto const a =
      parse(argc, argv,
            {"cluster", "jobs", "endpoint", "timeout-ms", "algorithm", "order", "output", "raw", "server-key", "client-cert"},
            {"summary"});
  client c(tools::client_connection(a, 5000));
  if (a.has("raw")) return send_raw(a, c);
  round_input in = load_round(a);
  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  service::request_header h{1, c.session(), 0};
  service::encode_request(fbb, h, in);
  auto const t0 = std::chrono::steady_clock::now();
  auto const bytes = c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), h.request_id);
  double const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  auto const chk = service::check_envelope(bytes.data(), bytes.size());
  if (chk.envelope == nullptr) throw std::runtime_error("unreadable reply: " + chk.message);
  print_reply(a, in, service::decode_reply(*chk.envelope), bytes, us);
  return 0;
}

/// `placer keygen`: a CURVE key pair in ZeroMQ's certificate format.
int cmd_keygen(int argc, char** argv) {
  auto const a = parse(argc, argv, {"out", "name"}, {});
  if (!a.has("out") || !a.has("name")) throw tools::usage_error("keygen needs --out DIR and --name NAME");
  std::filesystem::create_directories(a.get("out"));
  auto const path = (std::filesystem::path(a.get("out")) / (a.get("name") + ".key")).string();
  auto const k = service::curve_generate();
  service::write_certificates(path, k);
  std::cout << "public key " << k.public_key << "\n  " << path << " (public: give it to the other side)\n  " << path
            << "_secret (secret, mode 0600: keep it here)\n";
  return 0;
}

/// `placer health`: a probe for a container's HEALTHCHECK, a readiness or a
/// liveness check. Exit codes: 0 ready (--live: the service answered), 3 no
/// answer, 4 answered but not ready (a worker stuck on one round, or rounds
/// waiting, past the server's --stuck-ms), 5 ready but degraded (a worker
/// on its CPU fallback after a device fault).
int cmd_health(int argc, char** argv) {
  auto const a = parse(argc, argv, {"endpoint", "timeout-ms", "server-key", "client-cert"}, {"ready", "live", "quiet"});
  if (a.has("ready") && a.has("live")) throw usage_error("--ready and --live are two probes: give one");
  client c(tools::client_connection(a, 2000));
  auto const h = c.health();
  if (!a.has("quiet")) {
    std::cout << (!h.ready ? "not ready: " + h.not_ready : h.degraded ? std::string("ready, degraded") : "ready")
              << "\n  " << h.backend << ", " << h.workers
              << " worker(s), up " << static_cast<std::int64_t>(h.uptime_s) << " s; " << h.requests << " requests, "
              << h.rounds_ok << " rounds, " << h.errors << " errors\n  queue: " << h.queued_rounds << " rounds ("
              << fixed(static_cast<double>(h.queued_bytes) / (1 << 20), 1) << " MiB); refused " << h.refused_busy
              << ", expired " << h.dropped_expired << ", peer gone " << h.dropped_disconnected
              << "; " << h.sessions << " sessions (" << fixed(static_cast<double>(h.session_bytes) / (1 << 20), 1)
              << " MiB), evicted "
              << h.sessions_evicted << "; CURVE handshakes refused " << h.handshakes_denied << "\n  transport: "
              << h.connections << " connections, holding " << fixed(static_cast<double>(h.held_bytes) / (1 << 20), 1)
              << " of " << fixed(static_cast<double>(h.memory_budget) / (1 << 20), 0) << " MiB; closed";
    for (auto const& [cause, n] : h.connections_closed) {
      if (n > 0) std::cout << " " << cause << " " << n;
    }
    std::cout << "; refused";
    for (auto const& [cause, n] : h.requests_refused) {
      if (n > 0) std::cout << " " << cause << " " << n;
    }
    std::cout << "\n";
    for (std::size_t k = 0; k < h.worker_states.size(); ++k) {
      auto const& w = h.worker_states[k];
      std::cout << "  worker " << k << ": "
                << (w.busy ? "busy " + fixed(w.busy_ms, 1) + " ms" : std::string("idle")) << ", " << w.queued
                << " queued" << (w.queued > 0 ? " (oldest " + fixed(w.oldest_queued_ms, 1) + " ms)" : std::string())
                << ", " << w.rounds << " rounds, " << w.backend
                << (w.degraded ? "\n    degraded (CPU fallback): " + w.degraded_reason : std::string()) << "\n";
    }
  }
  if (a.has("live")) return 0;
  if (!h.ready) return 4;
  return h.degraded ? 5 : 0;
}

/// `placer compare`: the same round through every algorithm, one table.
int cmd_compare(int argc, char** argv) {
  auto const a = parse(argc, argv, {"cluster", "jobs", "backend", "repeat"}, {});
  round_input in = load_round(a);
  int const repeat = std::max(1, static_cast<int>(a.integer("repeat", 3)));
  solver s(kernels::select_backend(a.get("backend", "auto"), [](std::string const& m) { service::log_info(m); }));
  std::int64_t demand = 0;
  for (auto const& j : in.pending) demand += j.per_replica.gpu_milli_total() * j.replicas;
  std::cout << in.state.nodes.size() << " nodes, " << in.pending.size() << " pending jobs asking "
            << fixed(demand / 1000.0, 1) << " GPUs; backend " << s.backend().description() << "; best of " << repeat
            << " runs\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %8s %10s %10s %8s %8s %10s %10s\n", "algorithm", "jobs", "replicas", "GPUs",
                "GAR", "GFR", "FGD frag", "solve ms");
  std::cout << line;
  struct algo_row {
    char const* name;
    algorithm algo;
  };
  for (auto const& [name, algo] : {algo_row{"placer (tiers)", algorithm::placer}, algo_row{"greedy", algorithm::greedy},
                                   algo_row{"kube LeastAllocated", algorithm::kube_least_allocated},
                                   algo_row{"kube MostAllocated", algorithm::kube_most_allocated},
                                   algo_row{"FIFO first-fit", algorithm::first_fit}}) {
    in.pol.algo = algo;
    round_result r;
    double best_ms = 1e300;
    for (int k = 0; k < repeat; ++k) {
      auto const t0 = std::chrono::steady_clock::now();
      r = s.solve(in);
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    auto const& m = r.metrics;
    std::snprintf(line, sizeof line, "%-22s %8d %10d %10s %7s%% %7s%% %9s%% %10s\n", name, m.jobs_placed, m.replicas_placed,
                  fixed(m.gpu_milli_placed / 1000.0, 1).c_str(), fixed(100 * m.gar_after, 1).c_str(),
                  fixed(100 * m.gfr_after, 1).c_str(), fixed(100 * m.frag_ratio_after, 1).c_str(), fixed(best_ms, 2).c_str());
    std::cout << line;
  }
  std::cout << "\nGAR: allocated / schedulable GPU after the round; GFR: share of GPU nodes partly allocated;\n"
               "FGD frag: fragmented free GPU / free GPU for the round's typical task set (docs/metrics.md).\n";
  return 0;
}

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }
/// SIGHUP: workers on their CPU fallback try the GPU again at their next round.
std::atomic<std::uint64_t> g_device_retry{0};
extern "C" void on_hangup(int) { g_device_retry.fetch_add(1); }

/// The demo round of `make run`: the committed openb sample sent through
/// the real client to the server this process is running.
void play_demo(std::string const& endpoint, std::string const& dir) {
  round_input in;
  in.state = service::read_cluster_file(dir + "/nodes.csv");
  in.pending = service::read_jobs_file(dir + "/pods.csv").pending;
  client_options opt;
  opt.endpoint = endpoint;
  opt.timeout_ms = 10000;
  opt.session = "demo";
  client c(opt);
  auto const rep = c.solve(in);
  if (rep.code != wire::ErrorCode::Ok) {
    service::log_error(std::string("demo round failed: ") + service::error_code_name(rep.code) + ": " + rep.message);
    return;
  }
  std::ostringstream o;
  o << "\n=== demo round: " << in.state.nodes.size() << " openb nodes, " << in.pending.size()
    << " openb pods, through placer::client -> " << endpoint << " ===\n";
  print_summary(o, in, rep.result, c.last_timing().total_us);
  // A second, warm round to show steady-state latency.
  c.solve(in);
  o << "Warm round-trip latency: " << fixed(c.last_timing().total_us / 1000.0, 3) << " ms\n";
  o << "The service keeps serving on " << endpoint << "; try in another shell:\n"
    << "  build/placer client --cluster " << dir << "/nodes.csv --jobs " << dir << "/pods.csv --summary\n"
    << "Ctrl-C stops it.\n\n";
  std::cout << o.str() << std::flush;
}

/// `placer serve`: every option also from a PLACER_* environment variable
/// (PLACER_MAX_NODES for --max-nodes) and from a config file (--config
/// Descriptors for `connections` and the rest: the soft limit raised to
/// the hard one where it is lower, and a warning where even that is short
/// (a connection past it would wait unaccepted in the kernel's backlog).
void raise_open_files(std::size_t connections) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  rlim_t const want = static_cast<rlim_t>(connections) + 256;
  if (r.rlim_cur < want && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = std::min(want, r.rlim_max);
    (void)::setrlimit(RLIMIT_NOFILE, &r);
    (void)::getrlimit(RLIMIT_NOFILE, &r);
  }
  if (r.rlim_cur < want) {
    service::log_warn("open files limited to " + std::to_string(r.rlim_cur) + ", below --max-connections " +
                      std::to_string(connections) + " and 256 more: raise `ulimit -n` (or the container's nofile)");
  }
}

/// FILE, `key = value` lines, TOML or INI); the command line wins, then
/// the file, then the environment. CLI11 names the option and the value in
/// every error.
int cmd_serve(int argc, char** argv) {
  service::service_config cfg;
  CLI::App app("placer serve: the placement service on a ZeroMQ socket", "placer serve");
  app.set_config("--config", "",
                 "read options from FILE (key = value lines, TOML or INI); the command line wins over the file, the "
                 "file over PLACER_* variables");
  app.get_formatter()->column_width(34);
  auto env = [](CLI::Option* o) {
    std::string name = o->get_name(false, true);  // --max-nodes
    name = name.substr(name.find_first_not_of('-'));
    std::string var = "PLACER_";
    for (char c : name) var += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return o->envname(var);
  };
  std::int64_t message_mib = static_cast<std::int64_t>(cfg.max_message_bytes >> 20);
  std::int64_t session_mib = static_cast<std::int64_t>(cfg.max_session_bytes >> 20);
  std::int64_t peer_session_mib = static_cast<std::int64_t>(cfg.max_session_bytes_per_peer >> 20);
  std::int64_t queued_mib = static_cast<std::int64_t>(cfg.queue.peer_bytes >> 20);
  std::int64_t queue_mib = static_cast<std::int64_t>(cfg.queue.total_bytes >> 20);
  std::int64_t max_jobs = cfg.limits.pending_jobs;
  std::int64_t capture_mib = static_cast<std::int64_t>(cfg.capture.max_bytes >> 20);
  std::string log_format = "text", log_level = "info", demo;
  bool quiet = false;
  env(app.add_option("--endpoint", cfg.endpoint, "ZeroMQ endpoint to bind")->capture_default_str());
  env(app.add_option("--backend", cfg.backend,
                     "solver backend: auto = the CPU, or with a usable GPU the faster of the two on a trial "
                     "round at start (--auto-trial); twin = the CUDA backend's code over host memory, for diagnosis")
          ->check(CLI::IsMember({"auto", "cpu", "cuda", "twin"}))
          ->capture_default_str());
  env(app.add_option("--auto-trial", cfg.auto_trial,
                     "--backend auto's trial round, the size of the rounds to come: 1k, 10k or 100k (also -k8s, -nfd, -split)")
          ->check([](std::string const& s) {
            try {
              (void)traces::scenario_preset(s);
              return std::string();
            } catch (std::exception const& e) {
              return std::string(e.what());
            }
          })
          ->capture_default_str());
  env(app.add_option("--workers", cfg.workers, "solver threads, each with its own backend")
          ->check(CLI::Range(1, 256))
          ->capture_default_str());
  env(app.add_option("--max-message-mib", message_mib, "largest request, MiB")
          ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}))
          ->capture_default_str());
  env(app.add_option("--max-nodes", cfg.limits.nodes, "nodes per round")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-jobs", max_jobs, "pending (and running) jobs per round")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-replicas", cfg.limits.replicas, "pending replicas per round (elastic at their largest)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-round-ms", cfg.max_round_ms, "time budget per round, ms (0 = none)")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str());
  env(app.add_option("--max-session-mib", session_mib, "sessions' memory per worker, MiB (LRU eviction)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-sessions", cfg.max_sessions, "sessions per worker (past it, the largest holder's go)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-sessions-per-peer", cfg.max_sessions_per_peer,
                     "one peer's sessions per worker (a peer: its CURVE key, else its connection)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-session-mib-per-peer", peer_session_mib, "one peer's sessions' memory per worker, MiB")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-queued", cfg.queue.peer_rounds, "rounds one peer may have waiting")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-queued-mib", queued_mib, "their bytes, MiB")->check(CLI::PositiveNumber)->capture_default_str());
  env(app.add_option("--max-queue-mib", queue_mib,
                     "the memory budget for what peers make the server hold: messages being read, rounds waiting, "
                     "replies not yet read, MiB (at least twice --max-message-mib)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-connections", cfg.max_connections,
                     "connections open at once; when full, the one idle the longest goes first")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--max-connections-per-address", cfg.max_connections_per_address,
                     "connections from one IP address")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  double heartbeat_s = cfg.heartbeat_ms / 1000.0, idle_s = cfg.idle_ms / 1000.0, message_s = cfg.message_ms / 1000.0;
  env(app.add_option("--heartbeat-s", heartbeat_s, "PING a quiet peer after this long, s (0 = never)")
          ->check(CLI::Range(0.0, 3600.0))
          ->capture_default_str());
  env(app.add_option("--idle-timeout-s", idle_s, "close a peer that sends nothing for this long, s (0 = never)")
          ->check(CLI::Range(0.0, 86400.0))
          ->capture_default_str());
  env(app.add_option("--message-timeout-s", message_s, "a message's first byte to its last, s")
          ->check(CLI::Range(0.001, 3600.0))
          ->capture_default_str());
  env(app.add_option("--stuck-ms", cfg.stuck_after_ms,
                     "not ready while a round has run or waited longer, ms")
          ->check(CLI::PositiveNumber)
          ->capture_default_str());
  env(app.add_option("--http", cfg.http, "HOST:PORT for GET /metrics, /livez, /readyz (off unless given)"));
  env(app.add_option("--log-format", log_format, "log lines as")
          ->check(CLI::IsMember({"text", "json"}))
          ->capture_default_str());
  env(app.add_option("--log-level", log_level, "least level logged")
          ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
          ->capture_default_str());
  env(app.add_flag("--quiet", quiet, "no log line per round"));
  env(app.add_option("--demo", demo, "play a demo round from DIR (nodes.csv, pods.csv) once serving")
          ->check(CLI::ExistingDirectory));
  env(app.add_option("--curve-secret", cfg.curve_secret_file, "CurveZMQ: the server's secret certificate")
          ->check(CLI::ExistingFile));
  env(app.add_option("--allow-keys", cfg.allow_keys_dir, "CurveZMQ: directory of the allowed clients' public keys")
          ->check(CLI::ExistingDirectory));
  env(app.add_flag("--insecure", cfg.insecure, "bind a non-loopback endpoint without CURVE (a trusted network)"));
  env(app.add_option("--devices", cfg.devices, "GPUs for the workers, e.g. 0,1: worker i on the i mod n-th")
          ->delimiter(',')
          ->check(CLI::Range(0, 255)));
  env(app.add_option("--device-retry-s", cfg.device_retry_s,
                     "after a device fault a worker runs on the CPU; it tries the GPU again after this long "
                     "(0 = never) or on SIGHUP")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str());
  auto* capture = env(app.add_option("--capture", cfg.capture.dir,
                                     "write the rounds solved to DIR as request files (placer solve --request)")
                                     ->type_name("DIR"));
  env(app.add_option("--capture-every", cfg.capture.every, "capture every Nth round (of those --capture-slower-ms takes)")
          ->check(CLI::PositiveNumber)
          ->needs(capture)
          ->capture_default_str());
  env(app.add_option("--capture-slower-ms", cfg.capture.slower_ms,
                     "capture only rounds whose solve took longer, ms (0 = every round)")
          ->check(CLI::NonNegativeNumber)
          ->needs(capture)
          ->capture_default_str());
  env(app.add_option("--capture-max-mib", capture_mib, "capture files' bytes in DIR, MiB: the oldest go first")
          ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
          ->needs(capture)
          ->capture_default_str());
  try {
    app.parse(argc - 1, argv + 1);
  } catch (CLI::ParseError const& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  cfg.max_message_bytes = static_cast<std::size_t>(message_mib) << 20;
  cfg.max_session_bytes = static_cast<std::size_t>(session_mib) << 20;
  cfg.max_session_bytes_per_peer = static_cast<std::size_t>(peer_session_mib) << 20;
  cfg.queue.peer_bytes = static_cast<std::size_t>(queued_mib) << 20;
  cfg.queue.total_bytes = static_cast<std::size_t>(queue_mib) << 20;
  cfg.heartbeat_ms = static_cast<int>(heartbeat_s * 1000);
  cfg.idle_ms = static_cast<int>(idle_s * 1000);
  cfg.message_ms = static_cast<int>(message_s * 1000);
  raise_open_files(cfg.max_connections);
  cfg.capture.max_bytes = static_cast<std::size_t>(capture_mib) << 20;
  cfg.limits.pending_jobs = max_jobs;
  if (app.count("--max-jobs") > 0) cfg.limits.running_jobs = max_jobs;
  cfg.log_rounds = !quiet;
  service::set_log_format(service::parse_log_format(log_format));
  service::set_log_level(service::parse_log_level(log_level));
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_hangup);
  cfg.device_retry_signal = &g_device_retry;
  service::server srv(cfg);
  std::thread demo_thread;
  if (!demo.empty()) {
    demo_thread = std::thread([&] {
      try {
        play_demo(srv.endpoint(), demo);
      } catch (std::exception const& e) {
        service::log_error(std::string("demo: ") + e.what());
      }
    });
  }
  srv.run(&g_stop);
  if (demo_thread.joinable()) demo_thread.join();
  return 0;
}

}  // namespace

/// The service's OpenMP threads should sleep, not spin, between parallel
/// stages: they share the cores with the I/O thread, the other workers and
/// often the control plane. On 2 vCPUs, `placer bench --scenario 10k
/// --configs cpu` p50 went 6.6-6.9 -> 5.8-6.0 ms and the demo round 2.0 ->
/// 1.3 ms with OMP_WAIT_POLICY=PASSIVE (round_bench alone, with nothing
/// else running, is 5-8% slower with it). libgomp reads the variable when
/// it loads, before main, so an unset one is set and the process started
/// again; a value the operator gives is kept.
void passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
}

int main(int argc, char** argv) {
  std::string const verb = argc > 1 ? argv[1] : "";
  if (verb == "serve" || verb == "bench") passive_openmp(argv);
  try {
    if (verb == "serve") return cmd_serve(argc, argv);
    if (verb == "solve") return cmd_solve(argc, argv);
    if (verb == "client") return cmd_client(argc, argv);
    if (verb == "keygen") return cmd_keygen(argc, argv);
    if (verb == "health") return cmd_health(argc, argv);
    if (verb == "compare") return cmd_compare(argc, argv);
    if (verb == "experiment") return tools::cmd_experiment(argc, argv);
    if (verb == "simulate") return tools::cmd_simulate(argc, argv);
    if (verb == "bench") return tools::cmd_bench(argc, argv);
    if (verb == "slurm-bridge") return tools::cmd_slurm_bridge(argc, argv);
    if (verb == "version" || verb == "--version") {
      std::cout << "placer " << PLACER_VERSION << " (CUDA backend "
                << (kernels::cuda_enabled ? "built for " + kernels::cuda_architectures() : std::string("not built"))
                << ")\nGPU: " << kernels::cuda_device_summary() << "\n";
      return 0;
    }
    if (verb == "help" || verb == "--help" || verb == "-h") {
      std::cout << usage_text;
      return 0;
    }
    std::cerr << (verb.empty() ? "placer: no command given\n\n" : "placer: unknown command '" + verb + "'\n\n")
              << usage_text;
    return 2;
  } catch (std::invalid_argument const& e) {
    std::cerr << "placer " << verb << ": " << e.what() << "\n";
    return 2;
  } catch (usage_error const& e) {
    std::cerr << "placer " << verb << ": " << e.what() << "\n\n" << usage_text;
    return 2;
  } catch (client_error const& e) {
    std::cerr << "placer " << verb << ": " << e.what() << "\n";
    return 3;
  } catch (std::exception const& e) {
    std::cerr << "placer " << verb << ": " << e.what() << "\n";
    return 1;
  }
}
