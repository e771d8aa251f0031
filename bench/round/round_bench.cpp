// Whole-round benchmarks on every backend this machine can run: the solve
// time of one round, per stage, for the synthetic 10k and 100k scenarios,
// the real openb inventory and the demo round of `make run`. Run through bench/run.sh, which writes JSON
// with the device and commit under bench/results/.
//
// Counters: placed (jobs), cells (score-matrix cells), calls and waits (the
// backend's stage calls and device-to-host waits in one round) and one
// counter per pipeline stage in microseconds (mean over iterations, after
// one warm-up round).
#include "../gpu_kit/round_timeline.hpp"
#include "scenarios.hpp"

#include <placer/solver/gpu_prediction.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string_view>

namespace {

using namespace placer;
using bench::data_dir;
using bench::scenario;

void bm_round(benchmark::State& st, std::string const& backend, std::string const& name, algorithm algo,
              queue_order order) {
  if (name == "openb" && !std::filesystem::exists(data_dir())) {
    st.SkipWithError("shared data not found");
    return;
  }
  std::unique_ptr<kernels::backend> b;
  try {
    b = kernels::select_backend(backend);
  } catch (std::exception const& e) {
    st.SkipWithError(e.what());
    return;
  }
  st.SetLabel(b->description());
  solver s(std::move(b));
  round_input in = scenario(name);
  in.pol.algo = algo;
  in.pol.order = order;
  std::map<std::string, double> stage_us;
  double placed = 0, calls = 0, waits = 0, up = 0, down = 0;
  (void)s.solve(in);  // warm-up: workspace sized, pages touched (first-round costs kept out of the mean)
  std::int64_t tier_before[kernels::tier_phase_count];
  kernels::tier_profile(tier_before);
  for (auto _ : st) {
    round_result const r = s.solve(in);
    placed = static_cast<double>(r.placements.size());
    for (auto const& t : r.timing) {
      stage_us[t.stage] += t.micros;
      if (t.stage == "total") {
        calls = static_cast<double>(t.calls);
        waits = static_cast<double>(t.waits);
        up = static_cast<double>(t.bytes_up);
        down = static_cast<double>(t.bytes_down);
      }
    }
    benchmark::DoNotOptimize(r.placements.data());
  }
  for (auto const& [k, v] : stage_us) st.counters[k + "_us"] = v / static_cast<double>(st.iterations());
  // Where the tier programs' time went (kernels/include/placer/kernels/tier.hpp,
  // tier_phase), per round: the program's own clock, on the GPU inside the kernel.
  std::int64_t tier_after[kernels::tier_phase_count];
  kernels::tier_profile(tier_after);
  double tier_us = 0;
  for (int p = 0; p < kernels::tier_phase_count; ++p) {
    double const us = static_cast<double>(tier_after[p] - tier_before[p]) / 1e3 / static_cast<double>(st.iterations());
    st.counters[std::string("tier_") + kernels::tier_phase_names[p] + "_us"] = us;
    tier_us += us;
  }
  // The CPU round's GPU twin, predicted (the GPU model, one CTA of 512
  // threads; docs/architecture.md, "Predicting a GPU round"): this round's
  // stages other than the tier programs as measured here, plus the tier
  // kernel and the launches, waits and copies the model predicts.
  if (backend == "cpu") {
    double const host_us = std::max(0.0, stage_us["total"] / static_cast<double>(st.iterations()) - tier_us);
    gpu_prediction const g = predict_gpu_round(in, {}, host_us);
    st.counters["gpu_model_ms"] = g.round_us() / 1e3;
    st.counters["gpu_model_tier_ms"] = g.tier_us / 1e3;
  }
  // Backend steps of one round (the same on every backend): stage calls
  // and device-to-host waits; bytes copied to the device and back (a
  // backend with memory of its own: cuda, and twin, its code over host
  // memory, which counts what a GPU round moves on a machine without one).
  st.counters["calls"] = calls;
  st.counters["waits"] = waits;
  st.counters["bytes_up"] = up;
  st.counters["bytes_down"] = down;
  st.counters["placed"] = placed;
  round_matrices const m = build_matrices(in);
  st.counters["cells"] = static_cast<double>(m.n_classes()) * m.n_nodes();
  st.counters["pending"] = static_cast<double>(in.pending.size());
}

int register_all() {
  for (std::string const backend : {"cpu", "cuda", "twin"}) {
    for (std::string const name : {"demo", "10k", "100k", "openb", "10k-k8s", "100k-k8s", "100k-nfd", "10k-split", "100k-split"}) {
      benchmark::RegisterBenchmark(("round/" + backend + "/" + name).c_str(), bm_round, backend, name, algorithm::placer, queue_order::fifo)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  }
  // The largest-first order (policy::order pack) beside the default fifo.
  for (std::string const name : {"10k", "100k", "openb"}) {
    benchmark::RegisterBenchmark(("round/cpu-pack/" + name).c_str(), bm_round, std::string("cpu"), name,
                                 algorithm::placer, queue_order::pack)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5)
        ->UseRealTime();
  }
  for (std::string const name : {"10k", "openb"}) {
    benchmark::RegisterBenchmark(("round/kube-least/" + name).c_str(), bm_round, std::string("cpu"), name,
                                 algorithm::kube_least_allocated, queue_order::fifo)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5)
        ->UseRealTime();
  }
  return 0;
}
int const registered = register_all();

}  // namespace

// `round_bench timeline ...`: the call timeline of whole rounds (bench/gpu_kit/round_timeline.cpp).
int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "timeline") return placer::bench::round_timeline_main(argc - 1, argv + 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
