// Whole-round benchmarks on every backend this machine can run: the solve
// time of one round, per stage, for the synthetic 10k and 100k scenarios,
// the real openb inventory and the demo round of `make run`. Run through bench/run.sh, which writes JSON
// with the device and commit under bench/results/.
//
// Counters: placed (jobs), cells (score-matrix cells), calls and waits (the
// backend's stage calls and device-to-host waits in one round) and one
// counter per pipeline stage in microseconds (mean over iterations, after
// one warm-up round).
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/traces/loaders.hpp>
#include <placer/traces/synthetic.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>

namespace {

using namespace placer;

/// The shared data: $PLACER_DATA_DIR (a GPU machine gets a copy beside the
/// bundle, scripts/gpu-bundle.sh) or ../shared/data next to the source tree.
std::string data_dir() {
  char const* env = std::getenv("PLACER_DATA_DIR");
  return env != nullptr && *env != '\0' ? env : PLACER_SHARED_DATA_DIR;
}

round_input const& scenario(std::string const& name) {
  static std::map<std::string, round_input> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  round_input in;
  if (name == "demo") {  // the round of `make run`: the committed openb sample
    std::string const dir = std::string(PLACER_SOURCE_DIR) + "/data/openb-sample/";
    in.state = traces::load_openb_nodes(dir + "nodes.csv");
    in.pending = traces::load_openb_pods(dir + "pods.csv");
  } else if (name == "openb") {
    std::string const dir = data_dir() + "/alibaba-openb-v2023/";
    in.state = traces::load_openb_nodes(dir + "openb_node_list_gpu_node.csv");
    in.pending = traces::load_openb_pods(dir + "openb_pod_list_default.csv");
    in.pending.resize(std::min<std::size_t>(in.pending.size(), 2000));
  } else {
    in = traces::make_scenario(traces::scenario_preset(name));
  }
  return cache.emplace(name, std::move(in)).first->second;
}

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
  for (int p = 0; p < kernels::tier_phase_count; ++p) {
    st.counters[std::string("tier_") + kernels::tier_phase_names[p] + "_us"] =
        static_cast<double>(tier_after[p] - tier_before[p]) / 1e3 / static_cast<double>(st.iterations());
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

BENCHMARK_MAIN();
