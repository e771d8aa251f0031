// Seeds for request_fuzz: real requests, encoded as the service receives
// them. usage: make_corpus REPO_ROOT OUT_DIR
//   - data/examples (cluster.json + jobs.json), with every algorithm and
//     with the cross-round policies on;
//   - the openb sample (data/openb-sample), cut to 16 nodes and 8..64 pods;
//   - synthetic rounds with topology, gangs, fractional shares and running jobs.
#include <placer/service/codec.hpp>
#include <placer/service/json_io.hpp>
#include <placer/traces/loaders.hpp>
#include <placer/traces/synthetic.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {

using namespace placer;

int written = 0;

void write(std::string const& dir, round_input const& in) {
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {static_cast<std::uint64_t>(written + 1), "fuzz", 0}, in);
  std::ofstream(dir + "/seed-" + std::to_string(written++) + ".bin", std::ios::binary)
      .write(reinterpret_cast<char const*>(fbb.GetBufferPointer()), static_cast<std::streamsize>(fbb.GetSize()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_corpus REPO_ROOT OUT_DIR\n";
    return 2;
  }
  std::string const root = argv[1], out = argv[2];
  std::filesystem::create_directories(out);
  round_input ex;
  ex.state = service::read_cluster_file(root + "/data/examples/cluster.json");
  auto batch = service::read_jobs_file(root + "/data/examples/jobs.json");
  ex.pending = batch.pending;
  ex.running = batch.running;
  ex.pol = batch.pol;
  for (auto algo : {algorithm::placer, algorithm::greedy, algorithm::kube_least_allocated, algorithm::first_fit}) {
    ex.pol.algo = algo;
    write(out, ex);
  }
  ex.pol.algo = algorithm::placer;
  ex.pol.queue.backfill = backfill_mode::easy;
  ex.pol.queue.preemption = true;
  ex.pol.queue.elastic = true;
  ex.pol.queue.delay_scheduling = true;
  write(out, ex);

  round_input ob;
  ob.state = traces::load_openb_nodes(root + "/data/openb-sample/nodes.csv");
  ob.state.nodes.resize(std::min<std::size_t>(ob.state.nodes.size(), 16));
  auto const pods = traces::load_openb_pods(root + "/data/openb-sample/pods.csv");
  for (std::size_t n : {8, 24, 64}) {
    ob.pending.assign(pods.begin(), pods.begin() + static_cast<std::ptrdiff_t>(std::min(n, pods.size())));
    write(out, ob);
  }
  auto opt = traces::scenario_preset("1k");
  opt.nodes = 24;
  opt.nodes_per_leaf = 4;
  opt.leaves_per_spine = 2;
  opt.pending = 32;
  write(out, traces::make_scenario(opt));
  opt.constraints = true;  // labels, taints, selectors, affinity, tolerations
  write(out, traces::make_scenario(opt));

  round_input k8s;
  k8s.state = service::read_cluster_file(root + "/data/examples/constraints-cluster.json");
  auto k8s_jobs = service::read_jobs_file(root + "/data/examples/constraints-jobs.json");
  k8s.pending = std::move(k8s_jobs.pending);
  k8s.queues = std::move(k8s_jobs.queues);
  write(out, k8s);
  std::cout << "make_corpus: " << written << " requests in " << out << "\n";
  return 0;
}
