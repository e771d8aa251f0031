// `placer bench`: a load generator over the real client and ZeroMQ. Sends
// the same scenario round again and again, closed-loop (back to back) or
// open-loop (a fixed rate, latency counted from each round's scheduled
// start so a slow server cannot hide queueing), through every configuration
// asked for (CUDA backend, CPU backend, kube-style baseline), and prints
// latency percentiles, throughput, the server's per-stage times and where
// the wire path's time goes (client encode and decode, the service's own
// stages, transport) side by side. With --delta N each round after the first
// is sent as a delta rewriting N nodes, as a cluster manager would; with
// --job-churn K the jobs go as job deltas too, K of them leaving and K
// arriving each round. Starts its own servers unless given --endpoint
// (one, or several replicas: --endpoint A,B, and a lost round fails over).
// --clients N drives N clients at once, each its own session (with --workers
// N the bench's own server solves N sessions' rounds at once, a backend and
// so a CUDA stream each: rounds a second at 10k with 8 sessions is
// `--clients 8 --workers 8`); --duration S
// runs for S seconds instead of a number of rounds, counting a round that
// fails as an error (the client then resends its session in full) rather
// than stopping, and --report-s W prints rounds, errors, resyncs,
// failovers, p50 and p99 per window of W seconds (the soak of
// scripts/soak-failover.sh).
#include "cli.hpp"
#include "commands.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/service/client.hpp>
#include <placer/service/log.hpp>
#include <placer/service/server.hpp>
#include <placer/solver/gpu_prediction.hpp>
#include <placer/sim/svg_plot.hpp>
#include <placer/traces/loaders.hpp>
#include <placer/traces/synthetic.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace placer::tools {

namespace {

using clock_type = std::chrono::steady_clock;

struct bench_args {
  std::string scenario = "10k";
  std::string endpoint;
  std::string data_dir;
  int rounds = 0;  // 0 = scenario default
  int warmup = 3;
  int delta_nodes = 0;  // 0 = a full snapshot every round (unless job_churn)
  int job_churn = -1;   // -1 = the jobs in full every round
  std::string mode = "closed";
  double rate = 10;
  std::vector<std::string> configs;  // cuda, cpu, twin, kube
  std::string json_path, plot_path;
  int timeout_ms = 30000;  // per attempt
  int retries = 5;         // rounds resent after a loss (a server restarted mid-round; the next replica)
  int clients = 1;         // clients at once, each its own session
  int workers = 1;         // the bench's own server's solver workers
  double duration_s = 0;   // > 0: run this long, not a number of rounds
  double report_s = 0;     // > 0: per-window figures
  client_options connection;  // --endpoint's CURVE keys (--server-key, --client-cert)
};

[[noreturn]] void usage(std::string const& why) {
  throw std::invalid_argument(
      why +
      "\nusage: placer bench [--scenario 1k|10k|100k|openb, the first three also -k8s|-nfd|-split] [--rounds N] [--warmup N]\n"
      "                    [--delta NODES] [--job-churn JOBS] [--mode closed|open] [--rate ROUNDS_PER_S]\n"
      "                    [--configs cuda,cpu,twin,kube]\n"
      "                    [--endpoint E[,E2...] [--server-key FILE --client-cert FILE]] [--timeout-ms N] [--retries N]\n"
      "                    [--clients N] [--workers N] [--duration S] [--report-s W]\n"
      "                    [--data DIR] [--json FILE] [--plot FILE.svg]");
}

bench_args parse(int argc, char** argv) {
  cli_args opts;
  try {
    opts = parse_cli(argc, argv, 2,
                     {"scenario", "endpoint", "data", "rounds", "warmup", "delta", "job-churn", "mode", "rate", "json",
                      "plot", "configs", "timeout-ms", "retries", "server-key", "client-cert", "clients", "workers",
                      "duration", "report-s"},
                     {},
                     "bench");
  } catch (usage_error const& e) {
    usage(e.what());
  }
  bench_args a;
  a.scenario = opts.get("scenario", a.scenario);
  a.endpoint = opts.get("endpoint");
  a.data_dir = opts.get("data");
  a.mode = opts.get("mode", a.mode);
  try {
    a.rounds = static_cast<int>(opts.integer("rounds", a.rounds));
    a.warmup = static_cast<int>(opts.integer("warmup", a.warmup));
    a.delta_nodes = static_cast<int>(opts.integer("delta", a.delta_nodes));
    a.job_churn = static_cast<int>(opts.integer("job-churn", a.job_churn));
    a.rate = opts.number("rate", a.rate);
    a.timeout_ms = static_cast<int>(opts.integer("timeout-ms", a.timeout_ms));
    a.retries = static_cast<int>(opts.integer("retries", a.retries));
    a.clients = static_cast<int>(opts.integer("clients", a.clients));
    a.workers = static_cast<int>(opts.integer("workers", a.workers));
    a.duration_s = opts.number("duration", a.duration_s);
    a.report_s = opts.number("report-s", a.report_s);
    a.connection = client_connection(opts, a.timeout_ms);
  } catch (usage_error const& e) {
    usage(e.what());
  }
  a.json_path = opts.get("json");
  a.plot_path = opts.get("plot");
  std::stringstream ss(opts.get("configs"));
  for (std::string c; std::getline(ss, c, ',');) a.configs.push_back(c);
  if (a.mode != "closed" && a.mode != "open") usage("--mode must be closed or open");
  if (a.rate <= 0) usage("--rate must be positive");
  if (a.delta_nodes < 0) usage("--delta must not be negative");
  if (a.timeout_ms <= 0 || a.retries < 0) usage("--timeout-ms must be positive and --retries not negative");
  if (opts.has("job-churn") && a.job_churn < 0) usage("--job-churn must not be negative");
  if (a.clients < 1 || a.clients > 1024) usage("--clients must be 1 to 1024");
  if (a.workers < 1 || a.workers > 256) usage("--workers must be 1 to 256");
  if (opts.has("workers") && !a.endpoint.empty()) usage("--workers sizes the bench's own server: not with --endpoint");
  return a;
}

/// Rounds after the first are deltas: of nodes, of jobs, or both.
bool deltas(bench_args const& a) { return a.delta_nodes > 0 || a.job_churn >= 0; }

/// One round's job churn on `live` (the session's list as the server will
/// hold it): the k jobs at its head leave (placed, cancelled, finished) and
/// come back at its tail under a new name, so every round solves the same
/// jobs. Names are "<first name>~<round>".
template <class Job>
void churn(std::vector<Job>& live, std::size_t k, std::uint64_t round, std::vector<std::string>& gone,
           std::vector<Job>& arrived) {
  k = std::min(k, live.size());
  gone.clear();
  arrived.clear();
  for (std::size_t i = 0; i < k; ++i) {
    gone.push_back(live[i].name);
    arrived.push_back(live[i]);
    auto& name = arrived.back().name;
    name.resize(std::min(name.find('~'), name.size()));
    name += "~" + std::to_string(round);
  }
  live.erase(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(k));
  live.insert(live.end(), arrived.begin(), arrived.end());
}


round_input make_round(bench_args const& a, char const* argv0) {
  if (a.scenario != "openb") return traces::make_scenario(traces::scenario_preset(a.scenario));
  std::string const dir = shared_data_dir(argv0, a.data_dir) + "/alibaba-openb-v2023/";
  round_input in;
  in.state = traces::load_openb_nodes(dir + "openb_node_list_gpu_node.csv");
  in.pending = traces::load_openb_pods(dir + "openb_pod_list_default.csv");
  in.pending.resize(std::min<std::size_t>(in.pending.size(), 1000));  // a round's worth
  return in;
}

struct config_result {
  std::string name;
  std::string backend;
  std::vector<double> latency_ms;  // end to end, per measured round
  std::map<std::string, double> stage_ms;  // server-side means
  double client_encode_ms = 0, client_decode_ms = 0;  // means
  double wall_s = 0;
  double placed_per_round = 0;
  std::uint64_t retries = 0, resyncs = 0;  // rounds resent after a timeout; full snapshots resent
  std::uint64_t failovers = 0, errors = 0;  // rounds answered by another replica; rounds that failed
  struct sample {
    double t_s;        // when the round ended, from the run's start
    double ms;         // its latency (0 for an error)
    bool ok;
    bool resynced;     // it went in full (the server lost the session, or another replica took it)
    bool failed_over;  // another replica than the session's answered it
  };
  std::vector<sample> samples;  // every measured round, in no particular order
  double calls_per_round = 0, waits_per_round = 0;  // backend steps (means): stage calls, device-to-host waits
  double mb_per_round = 0;  // bytes copied to the device and back (means, MB; 0 on the CPU backend)
};

double mean(std::vector<double> const& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

/// The round trip outside the solver's total, per stage (means, ms): the
/// client's encode and decode, the service's stages, and what is left of
/// the end-to-end latency (transport, the I/O thread, queueing).
std::vector<std::pair<std::string, double>> wire_path(config_result const& r) {
  std::vector<std::pair<std::string, double>> out{{"client_encode", r.client_encode_ms}};
  double rest = mean(r.latency_ms) - r.client_encode_ms - r.client_decode_ms;
  auto const total = r.stage_ms.find("total");
  if (total != r.stage_ms.end()) rest -= total->second;
  for (char const* s : service::service_stages) {
    auto const it = r.stage_ms.find(s);
    if (it == r.stage_ms.end()) continue;
    out.emplace_back(s, it->second);
    rest -= it->second;
  }
  out.emplace_back("client_decode", r.client_decode_ms);
  out.emplace_back("transport", rest);
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto const idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

/// One client's closed or open loop (run_config's threads): its rounds,
/// counted into `res` (the caller merges the clients').
void drive(bench_args const& a, round_input in, std::string const& name, std::string const& endpoint, int rounds,
           int index, clock_type::time_point t_start, config_result& res) {
  in.pol.algo = name == "kube" ? algorithm::kube_least_allocated : algorithm::placer;
  // A round lost with a server that died is sent again (a restarted server
  // answers a delta with StaleEpoch and the client resyncs; another replica
  // takes it as a snapshot), so a restart costs the round its timeout, not the run.
  client_options opt = a.connection;  // its CURVE keys, if any
  opt.endpoint = endpoint;
  opt.timeout_ms = a.timeout_ms;
  opt.retries = a.retries;
  opt.session = "bench-" + std::to_string(getpid()) + "-" + std::to_string(index);
  client c(opt);
  // Delta rounds rewrite the next delta_nodes nodes (round robin) with their
  // own values: the server does a delta's work and solves the same round.
  // With job churn, jobs_only follows the session's jobs (churn()), built
  // outside the timed round as a cluster manager would have it ready.
  round_input jobs_only = in;
  jobs_only.state = {};
  std::uint64_t epoch = in.state.epoch;
  std::size_t next_node = (static_cast<std::size_t>(index) * 97) % in.state.nodes.size();
  job_delta jobs;
  auto next_delta = [&] {
    cluster_delta d{epoch, epoch + 1, {}, {}, {}};
    for (int k = 0; k < a.delta_nodes; ++k, next_node = (next_node + 1) % in.state.nodes.size()) {
      d.changed.push_back({static_cast<std::int32_t>(next_node), in.state.nodes[next_node]});
    }
    ++epoch;
    if (a.job_churn >= 0) {
      auto const k = static_cast<std::size_t>(a.job_churn);
      churn(jobs_only.pending, k, epoch, jobs.removed, jobs.added);
      churn(jobs_only.running, k, epoch, jobs.finished, jobs.started);
    }
    return d;
  };
  auto round = [&](cluster_delta const& d) {
    if (!deltas(a)) return c.solve(in);
    return a.job_churn >= 0 ? c.solve_delta(d, jobs, jobs_only) : c.solve_delta(d, jobs_only);
  };
  // After a round that failed (--duration): the session as the bench holds
  // it, in full, at the epoch the bench is at.
  auto snapshot = [&] {
    round_input full = in;
    full.state.epoch = epoch;
    full.pending = jobs_only.pending;
    full.running = jobs_only.running;
    return full;
  };
  if (deltas(a)) c.solve(in);  // the snapshot the deltas apply to
  for (int k = 0; k < a.warmup; ++k) round(next_delta());
  auto const period = std::chrono::duration<double>(1.0 / a.rate);
  auto const stop_at = t_start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(a.duration_s));
  bool lost_session = false;
  for (int k = 0; a.duration_s > 0 ? clock_type::now() < stop_at : k < rounds; ++k) {
    auto const d = deltas(a) ? next_delta() : cluster_delta{};
    auto const scheduled = t_start + std::chrono::duration_cast<clock_type::duration>(period * k);
    if (a.mode == "open") std::this_thread::sleep_until(scheduled);
    auto const t0 = a.mode == "open" ? scheduled : clock_type::now();
    auto const resyncs = c.resyncs(), failovers = c.failovers();
    service::decoded_reply rep;
    std::string failure;
    try {
      rep = lost_session ? c.solve(snapshot()) : round(d);
      if (rep.code != wire::ErrorCode::Ok) {
        failure = std::string("round failed: ") + service::error_code_name(rep.code) + ": " + rep.message;
      }
    } catch (std::exception const& e) {
      failure = e.what();
    }
    bool const resynced = lost_session || c.resyncs() != resyncs;
    double const end_s = std::chrono::duration<double>(clock_type::now() - t_start).count();
    if (!failure.empty()) {
      if (a.duration_s <= 0) throw std::runtime_error(failure);
      ++res.errors;
      lost_session = true;  // the next round sends the session in full
      res.samples.push_back({end_s, 0, false, false, false});
      std::fprintf(stderr, "client %d: %s\n", index, failure.c_str());
      continue;
    }
    lost_session = false;
    double const ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    res.latency_ms.push_back(ms);
    res.samples.push_back({end_s, ms, true, resynced, c.failovers() != failovers});
    for (auto const& t : rep.result.timing) {
      res.stage_ms[t.stage] += t.micros / 1000.0;
      if (t.stage == "total") {
        res.calls_per_round += static_cast<double>(t.calls);
        res.waits_per_round += static_cast<double>(t.waits);
        res.mb_per_round += static_cast<double>(t.bytes_up + t.bytes_down) / 1e6;
      }
    }
    res.client_encode_ms += c.last_timing().encode_us / 1000.0;
    res.client_decode_ms += c.last_timing().decode_us / 1000.0;
    res.backend = rep.result.backend;
    res.placed_per_round += rep.result.metrics.replicas_placed;
    if (index == 0 && a.duration_s <= 0 && isatty(2) && (k % 10 == 0 || k + 1 == rounds)) {
      std::fprintf(stderr, "\r%-6s round %d/%d", name.c_str(), k + 1, rounds);
    }
  }
  res.retries = c.retries();
  res.resyncs = c.resyncs();
  res.failovers = c.failovers();
}

config_result run_config(bench_args const& a, round_input const& in, std::string const& name,
                         std::string const& endpoint, int rounds) {
  std::vector<config_result> per(static_cast<std::size_t>(a.clients));
  std::vector<std::string> failures(per.size());
  std::vector<std::thread> threads;
  auto const t_start = clock_type::now();
  for (int k = 0; k < a.clients; ++k) {
    threads.emplace_back([&, k] {
      try {
        drive(a, in, name, endpoint, rounds, k, t_start, per[static_cast<std::size_t>(k)]);
      } catch (std::exception const& e) {
        failures[static_cast<std::size_t>(k)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (isatty(2) && a.duration_s <= 0) std::fprintf(stderr, "\n");
  for (auto const& f : failures) {
    if (!f.empty()) throw std::runtime_error(f);
  }
  config_result res;
  res.name = name;
  res.wall_s = std::chrono::duration<double>(clock_type::now() - t_start).count();
  for (auto& r : per) {
    res.latency_ms.insert(res.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
    res.samples.insert(res.samples.end(), r.samples.begin(), r.samples.end());
    for (auto const& [k, v] : r.stage_ms) res.stage_ms[k] += v;
    res.client_encode_ms += r.client_encode_ms;
    res.client_decode_ms += r.client_decode_ms;
    res.calls_per_round += r.calls_per_round;
    res.waits_per_round += r.waits_per_round;
    res.mb_per_round += r.mb_per_round;
    res.placed_per_round += r.placed_per_round;
    res.retries += r.retries;
    res.resyncs += r.resyncs;
    res.failovers += r.failovers;
    res.errors += r.errors;
    if (!r.backend.empty()) res.backend = r.backend;
  }
  // Sums over the rounds to means per round.
  double const n = static_cast<double>(std::max<std::size_t>(1, res.latency_ms.size()));
  for (auto& [k, v] : res.stage_ms) v /= n;
  for (double* v : {&res.client_encode_ms, &res.client_decode_ms, &res.calls_per_round, &res.waits_per_round,
                    &res.mb_per_round, &res.placed_per_round}) {
    *v /= n;
  }
  return res;
}

std::string fmt(double v, int p = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", p, v);
  return b;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  bench_args a = parse(argc, argv);
  round_input const in = make_round(a, argv[0]);
  int const rounds = a.rounds > 0 ? a.rounds : (a.scenario.starts_with("100k") ? 20 : 200);
  if (a.duration_s > 0 && a.report_s <= 0) a.report_s = a.duration_s;
  std::int64_t gpus = 0;
  for (auto const& n : in.state.nodes) gpus += n.gpu_count();
  if (static_cast<std::size_t>(a.delta_nodes) > in.state.nodes.size()) usage("--delta is larger than the cluster");
  std::cout << "scenario " << a.scenario << ": " << in.state.nodes.size() << " nodes, " << gpus << " GPUs, "
            << in.pending.size() << " pending jobs; "
            << (a.duration_s > 0 ? fmt(a.duration_s, 0) + " s" : std::to_string(rounds) + " rounds")
            << " per configuration, " << a.clients << (a.clients > 1 ? " clients, " : " client, ")
            << (a.endpoint.empty() ? std::to_string(a.workers) + (a.workers > 1 ? " workers, " : " worker, ") : "")
            << a.mode
            << "-loop" << (a.mode == "open" ? " at " + fmt(a.rate, 1) + " rounds/s" : "")
            << (deltas(a) ? ", deltas of " + std::to_string(a.delta_nodes) + " nodes" : ", full snapshots")
            << (a.job_churn >= 0 ? " and " + std::to_string(a.job_churn) + " jobs leaving and arriving" : "") << "\n";

  if (a.configs.empty()) {
    if (kernels::cuda_unavailable_reason().empty()) a.configs.push_back("cuda");
    a.configs.push_back("cpu");
    a.configs.push_back("kube");
  }
  std::vector<config_result> results;
  service::set_log_level(service::log_level::warn);
  for (auto const& cfg : a.configs) {
    if (cfg != "cuda" && cfg != "cpu" && cfg != "twin" && cfg != "kube") usage("unknown configuration '" + cfg + "'");
    if (!a.endpoint.empty()) {
      results.push_back(run_config(a, in, cfg, a.endpoint, rounds));
      continue;
    }
    service::service_config sc;
    sc.endpoint = "tcp://127.0.0.1:*";
    sc.backend = cfg == "cuda" || cfg == "twin" ? cfg : "cpu";
    sc.log_rounds = false;
    sc.poll_ms = 20;
    sc.workers = a.workers;
    service::server srv(sc);
    std::thread serving([&] { srv.run(); });
    try {
      results.push_back(run_config(a, in, cfg, srv.endpoint(), rounds));
    } catch (...) {
      srv.stop();
      serving.join();
      throw;
    }
    srv.stop();
    serving.join();
  }

  // Per window (--report-s): what the soak records.
  if (a.report_s > 0) {
    for (auto const& r : results) {
      std::printf("\n%s per %s s: window, rounds, errors, resyncs, failovers, p50 ms, p99 ms\n", r.name.c_str(),
                  fmt(a.report_s, 0).c_str());
      auto const windows = static_cast<std::size_t>(std::ceil(r.wall_s / a.report_s));
      for (std::size_t w = 0; w < std::max<std::size_t>(windows, 1); ++w) {
        std::vector<double> ms;
        std::uint64_t errors = 0, resyncs = 0, failovers = 0;
        for (auto const& x : r.samples) {
          if (static_cast<std::size_t>(x.t_s / a.report_s) != w) continue;
          if (!x.ok) {
            ++errors;
            continue;
          }
          ms.push_back(x.ms);
          resyncs += x.resynced ? 1 : 0;
          failovers += x.failed_over ? 1 : 0;
        }
        std::printf("window %zu %zu %llu %llu %llu %s %s\n", w + 1, ms.size(), static_cast<unsigned long long>(errors),
                    static_cast<unsigned long long>(resyncs), static_cast<unsigned long long>(failovers),
                    fmt(percentile(ms, 0.5)).c_str(), fmt(percentile(ms, 0.99)).c_str());
      }
      std::printf("%s total: %zu rounds, %llu errors, %llu resyncs, %llu failovers, %llu resent after a loss\n",
                  r.name.c_str(), r.latency_ms.size(), static_cast<unsigned long long>(r.errors),
                  static_cast<unsigned long long>(r.resyncs), static_cast<unsigned long long>(r.failovers),
                  static_cast<unsigned long long>(r.retries));
    }
  }

  // Human table.
  std::printf("\n%-6s %-34s %9s %9s %9s %9s %9s %10s %12s %7s %7s %7s\n", "config", "backend", "p50 ms", "p90 ms",
              "p99 ms", "p99.9 ms", "max ms", "rounds/s", "placements/s", "calls", "waits", "MB");
  for (auto const& r : results) {
    double const rps = static_cast<double>(r.latency_ms.size()) / r.wall_s;
    std::printf("%-6s %-34s %9s %9s %9s %9s %9s %10s %12s %7s %7s %7s\n", r.name.c_str(), r.backend.substr(0, 34).c_str(),
                fmt(percentile(r.latency_ms, 0.5)).c_str(), fmt(percentile(r.latency_ms, 0.9)).c_str(),
                fmt(percentile(r.latency_ms, 0.99)).c_str(), fmt(percentile(r.latency_ms, 0.999)).c_str(),
                fmt(percentile(r.latency_ms, 1.0)).c_str(), fmt(rps, 1).c_str(), fmt(rps * r.placed_per_round, 0).c_str(),
                fmt(r.calls_per_round, 0).c_str(), fmt(r.waits_per_round, 0).c_str(), fmt(r.mb_per_round, 2).c_str());
  }
  std::printf("(calls, waits, MB: the backend's stage calls, device-to-host waits and megabytes copied to and from "
              "the device per round)\n");
  std::printf("\nserver-side stage means (ms):\n");
  for (auto const& r : results) {
    std::printf("  %-6s", r.name.c_str());
    for (auto const& [k, v] : r.stage_ms) std::printf(" %s %s", k.c_str(), fmt(v, 3).c_str());
    std::printf("  | %s replicas placed per round", fmt(r.placed_per_round, 0).c_str());
    if (r.retries + r.resyncs + r.errors > 0) {
      std::printf(" | %llu resent after a loss, %llu resynced, %llu failed over, %llu errors",
                  static_cast<unsigned long long>(r.retries), static_cast<unsigned long long>(r.resyncs),
                  static_cast<unsigned long long>(r.failovers), static_cast<unsigned long long>(r.errors));
    }
    std::printf("\n");
  }
  std::printf("\nwire path means (ms), outside the solver's total:\n");
  for (auto const& r : results) {
    std::printf("  %-6s", r.name.c_str());
    double sum = 0;
    for (auto const& [k, v] : wire_path(r)) {
      std::printf(" %s %s", k.c_str(), fmt(v, 3).c_str());
      sum += v;
    }
    std::printf("  = %s of %s end to end\n", fmt(sum, 3).c_str(), fmt(mean(r.latency_ms), 3).c_str());
  }
  // The GPU model's prediction beside the CPU's time (docs/architecture.md,
  // "Predicting a GPU round"): the cpu config's p50 less its tier programs
  // (timed here, in process), plus the tier kernel and the launches, waits
  // and copies the model predicts (on the CUDA backend's default grid).
  auto const cpu = std::find_if(results.begin(), results.end(), [](auto const& r) { return r.name == "cpu"; });
  if (cpu != results.end() && !cpu->latency_ms.empty()) {
    round_input model_in = in;
    model_in.pol.algo = algorithm::placer;
    cpu_round_time const local = time_cpu_round(model_in, 3);
    kernels::gpu_model_config const config;
    gpu_prediction const g = predict_gpu_round(model_in, config, local.host_us());
    double const p50 = percentile(cpu->latency_ms, 0.5);
    double const gpu = std::max(0.0, p50 - local.tier_us / 1e3) + (g.tier_us + g.fixed_us) / 1e3;
    std::printf("gpu model: p50 %s ms predicted on a grid of %d CTAs of %d threads (cpu p50 %s, less its tier programs %s, "
                "plus the tier kernel %s and launches, waits and copies %s)\n",
                fmt(gpu, 2).c_str(), config.blocks, config.threads, fmt(p50, 2).c_str(), fmt(local.tier_us / 1e3, 2).c_str(),
                fmt(g.tier_us / 1e3, 2).c_str(), fmt(g.fixed_us / 1e3, 2).c_str());
  }
  // Ratios against the kube-style baseline: latency per placed replica.
  auto const kube = std::find_if(results.begin(), results.end(), [](auto const& r) { return r.name == "kube"; });
  if (kube != results.end() && kube->placed_per_round > 0) {
    double const kube_per = percentile(kube->latency_ms, 0.5) / kube->placed_per_round;
    for (auto const& r : results) {
      if (&r == &*kube || r.placed_per_round == 0) continue;
      double const per = percentile(r.latency_ms, 0.5) / r.placed_per_round;
      std::printf("%s vs kube: %sx lower p50 latency per placed replica\n", r.name.c_str(), fmt(kube_per / per, 2).c_str());
    }
  }

  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    if (!f) throw std::runtime_error(a.json_path + ": cannot open for writing");
    f << "{\"scenario\":\"" << a.scenario << "\",\"mode\":\"" << a.mode << "\",\"rounds\":" << rounds
      << ",\"delta_nodes\":" << a.delta_nodes << ",\"job_churn\":" << a.job_churn << ",\"configs\":[";
    for (std::size_t k = 0; k < results.size(); ++k) {
      auto const& r = results[k];
      f << (k ? "," : "") << "{\"config\":\"" << r.name << "\",\"backend\":\"" << r.backend << "\",\"p50_ms\":"
        << percentile(r.latency_ms, 0.5) << ",\"p90_ms\":" << percentile(r.latency_ms, 0.9)
        << ",\"p99_ms\":" << percentile(r.latency_ms, 0.99) << ",\"p999_ms\":" << percentile(r.latency_ms, 0.999)
        << ",\"max_ms\":" << percentile(r.latency_ms, 1.0) << ",\"mean_ms\":" << mean(r.latency_ms)
        << ",\"rounds_per_s\":" << static_cast<double>(r.latency_ms.size()) / r.wall_s
        << ",\"replicas_placed_per_round\":" << r.placed_per_round << ",\"retries\":" << r.retries
        << ",\"resyncs\":" << r.resyncs << ",\"failovers\":" << r.failovers << ",\"errors\":" << r.errors
        << ",\"clients\":" << a.clients << ",\"workers\":" << a.workers << ",\"stage_calls_per_round\":" << r.calls_per_round
        << ",\"waits_per_round\":" << r.waits_per_round << ",\"mb_copied_per_round\":" << r.mb_per_round
        << ",\"stages_ms\":{";
      bool first = true;
      for (auto const& [s, v] : r.stage_ms) {
        f << (first ? "" : ",") << "\"" << s << "\":" << v;
        first = false;
      }
      f << "},\"wire_path_ms\":{";
      first = true;
      for (auto const& [s, v] : wire_path(r)) {
        f << (first ? "" : ",") << "\"" << s << "\":" << v;
        first = false;
      }
      f << "}}";
    }
    f << "]}\n";
    std::cout << "wrote " << a.json_path << "\n";
  }
  if (!a.plot_path.empty()) {
    sim::line_plot p;
    p.title = "Round latency CDF, scenario " + a.scenario;
    p.x_label = "end-to-end latency (ms, log scale)";
    p.y_label = "fraction of rounds";
    p.log_x = true;
    p.steps = true;
    for (auto const& r : results) p.series.push_back(sim::cdf(r.name + " (" + r.backend + ")", r.latency_ms));
    sim::write_svg(p, a.plot_path);
    std::cout << "wrote " << a.plot_path << "\n";
  }
  return 0;
}

}  // namespace placer::tools
