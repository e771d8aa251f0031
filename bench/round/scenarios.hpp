#pragma once
// The round benchmarks' scenarios (round_bench, gpu_model): the synthetic
// presets, the real openb inventory with its first 2,000 pods, and the demo
// round of `make run`. Each built once per process.
#include <placer/solver/model.hpp>
#include <placer/traces/loaders.hpp>
#include <placer/traces/synthetic.hpp>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace placer::bench {

/// The shared data: $PLACER_DATA_DIR (a GPU machine gets a copy beside the
/// bundle, scripts/gpu-bundle.sh) or ../shared/data next to the source tree.
inline std::string data_dir() {
  char const* env = std::getenv("PLACER_DATA_DIR");
  return env != nullptr && *env != '\0' ? env : PLACER_SHARED_DATA_DIR;
}

/// "10k,100k,openb" as its names.
inline std::vector<std::string> scenario_list(std::string const& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

inline round_input const& scenario(std::string const& name) {
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

}  // namespace placer::bench
