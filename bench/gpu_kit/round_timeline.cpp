// round_bench timeline: every backend call of whole rounds, timed (issue 53,
// item 5; the call timeline, kernels/include/placer/kernels/timeline.hpp). In
// round_bench's binary, so the GPU bundle carries no other copy of the solver.
//
//   round_bench timeline --out FILE [--backend cuda|twin] [--scenario 10k,openb,100k] [--rounds 20] [--commit SHA]
//
// For each scenario: one warm-up round, then --rounds rounds with the
// timeline on. Per round: its wall time, the solver's stages, every call
// (host begin and duration; on the GPU, begin and duration by events; the
// steps it counted; a tier kernel's phase sum), and what the round counted
// that no call recorded (zero unless a counting place goes unrecorded). Per
// scenario, the medians: the round, the host's API time in calls and in
// waits, the host outside any call, the GPU busy and idle between its first
// and last work, the launch latency (a call's GPU begin less its host
// begin), and the tier kernel's event time against its phases' sum.
// The twin (no GPU) records the same calls with host times only.
#include "round_timeline.hpp"
#include "../round/scenarios.hpp"

#include <placer/kernels/timeline.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace placer;
namespace k = placer::kernels;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// One round's figures, in microseconds.
struct round_figures {
  double round = 0, api = 0, wait = 0, outside = 0, gpu_busy = 0, gpu_idle = 0, tier_gpu = 0, tier_phases = 0;
  std::vector<double> latency;  ///< per call with GPU work: GPU begin less host begin
  bool gpu = false;
};

round_figures figures(std::vector<k::timeline_call> const& calls, double round_us) {
  round_figures f;
  f.round = round_us;
  std::int64_t first = -1, last = -1;
  double host_in_calls = 0;
  for (auto const& c : calls) {
    double const host = static_cast<double>(c.host_end_ns - c.host_begin_ns) / 1e3;
    host_in_calls += host;
    (std::string_view(c.what) == "wait" ? f.wait : f.api) += host;
    if (c.gpu_begin_ns >= 0) {
      f.gpu = true;
      double const gpu = static_cast<double>(c.gpu_end_ns - c.gpu_begin_ns) / 1e3;
      f.gpu_busy += gpu;
      f.latency.push_back(static_cast<double>(c.gpu_begin_ns - c.host_begin_ns) / 1e3);
      first = first < 0 ? c.gpu_begin_ns : std::min(first, c.gpu_begin_ns);
      last = std::max(last, c.gpu_end_ns);
      if (std::string_view(c.what) == "tier_kernel") f.tier_gpu += gpu;
    }
    if (c.phase_sum_ns >= 0) f.tier_phases += static_cast<double>(c.phase_sum_ns) / 1e3;
  }
  f.outside = round_us - host_in_calls;
  if (first >= 0) f.gpu_idle = static_cast<double>(last - first) / 1e3 - f.gpu_busy;
  return f;
}

int usage(std::string const& why) {
  std::cerr << "round_bench timeline: " << why
            << "\nusage: round_bench timeline --out FILE [--backend cuda|twin] [--scenario 10k,openb,100k] [--rounds 20]"
               " [--commit SHA]\n";
  return 2;
}

}  // namespace

namespace placer::bench {

int round_timeline_main(int argc, char** argv) {
  std::string backend = "cuda", out_path, commit = "unknown";
  std::vector<std::string> names{"10k", "openb", "100k"};
  int rounds = 20;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 >= argc) return usage("no value after " + a);
    std::string const v = argv[++i];
    if (a == "--out") {
      out_path = v;
    } else if (a == "--backend") {
      backend = v;
    } else if (a == "--scenario") {
      names = bench::scenario_list(v);
    } else if (a == "--commit") {
      commit = v;
    } else if (a == "--rounds") {
      rounds = std::atoi(v.c_str());
      if (rounds < 1 || rounds > 1000) return usage("--rounds is 1 to 1000");
    } else {
      return usage("unknown option " + a);
    }
  }
  if (out_path.empty()) return usage("--out is required");
  if (backend != "cuda" && backend != "twin") return usage("--backend is cuda or twin");
  std::ostringstream j;
  std::time_t const now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string description;
  std::ostringstream scenarios;
  int status = 0;
  for (std::size_t si = 0; si < names.size(); ++si) {
    std::string const& name = names[si];
    std::unique_ptr<k::backend> b;
    round_input in;
    try {
      b = k::select_backend(backend);
      in = bench::scenario(name);
    } catch (std::exception const& e) {
      std::cerr << "round_bench timeline: " << name << ": " << e.what() << "\n";
      return 1;
    }
    description = b->description();
    solver s(std::move(b));
    (void)s.solve(in);  // warm-up: the workspace sized, the first round's costs kept out
    k::timeline_record(true);
    (void)k::timeline_take();
    std::vector<round_figures> all;
    std::ostringstream rj;
    for (int r = 0; r < rounds; ++r) {
      std::int64_t const t0 = k::timeline_now_ns();
      round_result const res = s.solve(in);
      std::int64_t const t1 = k::timeline_now_ns();
      std::vector<k::timeline_call> const calls = k::timeline_take();
      k::step_counts recorded, counted;
      for (auto const& c : calls) recorded += c.steps;
      rj << (r > 0 ? ",\n" : "\n") << "{\"round_us\":" << static_cast<double>(t1 - t0) / 1e3 << ",\"stages\":{";
      bool first = true;
      for (stage_timing const& t : res.timing) {
        rj << (first ? "" : ",") << "\"" << t.stage << "\":" << t.micros;
        first = false;
        if (t.stage == "total") {
          counted.calls = t.calls;
          counted.waits = t.waits;
          counted.bytes_up = t.bytes_up;
          counted.bytes_down = t.bytes_down;
        }
      }
      k::step_counts const missing = counted - recorded;
      if (missing.calls != 0 || missing.waits != 0 || missing.bytes_up != 0 || missing.bytes_down != 0) status = 3;
      rj << "},\"unrecorded\":{\"calls\":" << missing.calls << ",\"waits\":" << missing.waits
         << ",\"bytes_up\":" << missing.bytes_up << ",\"bytes_down\":" << missing.bytes_down << "},\"calls\":";
      k::timeline_json(rj, calls, t0);
      rj << "}";
      all.push_back(figures(calls, static_cast<double>(t1 - t0) / 1e3));
    }
    k::timeline_record(false);
    auto med = [&](double round_figures::*m) {
      std::vector<double> v;
      for (auto const& f : all) v.push_back(f.*m);
      return median(v);
    };
    std::vector<double> latency, ratio;
    for (auto const& f : all) {
      latency.insert(latency.end(), f.latency.begin(), f.latency.end());
      if (f.tier_phases > 0 && f.tier_gpu > 0) ratio.push_back(f.tier_gpu / f.tier_phases);
    }
    bool const gpu = !all.empty() && all.front().gpu;
    auto gpu_value = [&](double v) { return gpu ? std::to_string(v) : std::string("null"); };
    scenarios << (si > 0 ? ",\n" : "\n") << "\"" << name << "\":{\"rounds\":" << rounds << ",\"median\":{\"round_us\":"
              << med(&round_figures::round) << ",\"api_us\":" << med(&round_figures::api)
              << ",\"wait_us\":" << med(&round_figures::wait) << ",\"host_outside_calls_us\":"
              << med(&round_figures::outside) << ",\"gpu_busy_us\":" << gpu_value(med(&round_figures::gpu_busy))
              << ",\"gpu_idle_us\":" << gpu_value(med(&round_figures::gpu_idle))
              << ",\"launch_latency_us\":" << gpu_value(median(latency))
              << ",\"tier_kernel_gpu_us\":" << gpu_value(med(&round_figures::tier_gpu))
              << ",\"tier_phase_sum_us\":" << med(&round_figures::tier_phases)
              << ",\"tier_kernel_over_phases\":" << gpu_value(median(ratio)) << "},\n\"round\":[" << rj.str() << "]}";
    std::printf("%-6s round %8.1f us | api %8.1f wait %8.1f outside %8.1f | gpu busy %8.1f idle %8.1f | tier %8.1f phases %8.1f\n",
                name.c_str(), med(&round_figures::round), med(&round_figures::api), med(&round_figures::wait),
                med(&round_figures::outside), med(&round_figures::gpu_busy), med(&round_figures::gpu_idle),
                med(&round_figures::tier_gpu), med(&round_figures::tier_phases));
  }
  j << "{\"kit\":\"placer-round-timeline\",\"version\":1,\"date\":\"" << date << "\",\"commit\":\"" << commit
    << "\",\"backend\":\"" << description << "\",\"scenarios\":{" << scenarios.str() << "}}\n";
  std::ofstream f(out_path);
  f << j.str();
  if (!f) {
    std::cerr << "round_timeline: cannot write " << out_path << "\n";
    return 1;
  }
  if (status != 0) std::cerr << "round_timeline: a round counted steps no call recorded (\"unrecorded\")\n";
  return status;
}

}  // namespace placer::bench
