// Does a server's memory stay under its session budget? Starts `placer
// serve` as a child with --max-session-mib, sends it one full round per
// session (a scenario's cluster and jobs, 10k GPUs by default) under
// distinct session ids, and samples the child's resident memory
// (/proc/PID/status VmRSS, VmHWM) beside what the server says its sessions
// hold and how many it evicted.
//
//   build/bench/session_memory --placer build/placer --sessions 10000 --max-session-mib 1024
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/traces/synthetic.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

struct options {
  std::string placer = "build/placer";
  std::string scenario = "10k";
  long sessions = 10000;
  long max_session_mib = 1024;
  long workers = 1;
  long every = 500;
};

/// kB of a /proc/PID/status field (VmRSS, VmHWM), -1 when unreadable.
long status_kb(pid_t pid, std::string const& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

[[noreturn]] void usage(std::string const& why) {
  std::cerr << "session_memory: " << why
            << "\nusage: session_memory [--placer PATH] [--scenario 1k|10k|100k] [--sessions N]"
               " [--max-session-mib N] [--workers N] [--every N]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace placer;
  options o;
  for (int k = 1; k < argc; ++k) {
    std::string const a = argv[k];
    if (k + 1 >= argc) usage("missing value for " + a);
    std::string const v = argv[++k];
    try {
      if (a == "--placer") o.placer = v;
      else if (a == "--scenario") o.scenario = v;
      else if (a == "--sessions") o.sessions = std::stol(v);
      else if (a == "--max-session-mib") o.max_session_mib = std::stol(v);
      else if (a == "--workers") o.workers = std::stol(v);
      else if (a == "--every") o.every = std::stol(v);
      else usage("unknown option " + a);
    } catch (std::exception const&) {
      usage("bad value '" + v + "' for " + a);
    }
  }
  round_input const in = traces::make_scenario(traces::scenario_preset(o.scenario));
  std::int64_t gpus = 0;
  for (auto const& n : in.state.nodes) gpus += static_cast<std::int64_t>(n.gpu_free_milli.size());

  std::string const endpoint = "ipc:///tmp/placer-session-memory-" + std::to_string(getpid());
  std::vector<std::string> args{o.placer,       "serve",     "--endpoint",
                                endpoint,       "--backend", "cpu",
                                "--quiet",      "--workers", std::to_string(o.workers),
                                "--max-session-mib", std::to_string(o.max_session_mib)};
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, o.placer.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) {
    std::cerr << "session_memory: cannot start " << o.placer << "\n";
    return 1;
  }
  int rc = 0;
  try {
    client c({endpoint, 30000, ""});
    // Up when it answers a probe.
    for (int k = 0;; ++k) {
      try {
        c.health();
        break;
      } catch (client_error const&) {
        if (k == 50) throw;
      }
    }
    long const base_kb = status_kb(pid, "VmRSS");
    std::printf("%s: %zu nodes, %lld GPUs, %zu pending jobs per session; budget %ld MiB per worker, %ld worker(s)\n",
                o.scenario.c_str(), in.state.nodes.size(), static_cast<long long>(gpus), in.pending.size(),
                o.max_session_mib, o.workers);
    std::printf("idle server RSS %.1f MiB\n\n%10s %12s %14s %10s %10s\n", base_kb / 1024.0, "sessions", "RSS MiB",
                "sessions MiB", "evicted", "s");
    auto const t0 = std::chrono::steady_clock::now();
    flatbuffers::FlatBufferBuilder fbb;
    long failed = 0;
    for (long s = 1; s <= o.sessions; ++s) {
      service::encode_request(fbb, {static_cast<std::uint64_t>(s), "s" + std::to_string(s), 0}, in);
      auto const bytes = c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), static_cast<std::uint64_t>(s));
      auto const rep = service::decode_reply(*wire::GetEnvelope(bytes.data()));
      failed += rep.code != wire::ErrorCode::Ok ? 1 : 0;
      if (s % o.every == 0 || s == o.sessions) {
        auto const h = c.health();
        std::printf("%10ld %12.1f %14.1f %10llu %10.1f\n", s, status_kb(pid, "VmRSS") / 1024.0,
                    static_cast<double>(h.session_bytes) / (1 << 20), static_cast<unsigned long long>(h.sessions_evicted),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::fflush(stdout);
      }
    }
    long const peak_kb = status_kb(pid, "VmHWM");
    std::printf("\npeak RSS %.1f MiB (idle %.1f MiB, session budget %ld MiB x %ld worker(s)); %ld rounds failed\n",
                peak_kb / 1024.0, base_kb / 1024.0, o.max_session_mib, o.workers, failed);
    rc = failed == 0 ? 0 : 1;
  } catch (std::exception const& e) {
    std::cerr << "session_memory: " << e.what() << "\n";
    rc = 1;
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return rc;
}
