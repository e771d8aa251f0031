// Workloads for the simulator: trace loaders adapted to simulated time.
#include <placer/sim/sim_workloads.hpp>
#include <placer/traces/loaders.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <stdexcept>

namespace placer::sim {

namespace {

// splitmix64: a small, portable, seeded generator (results do not depend on
// the standard library's distributions).
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  }
  double uniform() { return static_cast<double>(next() >> 11U) * 0x1.0p-53; }  // [0,1)
  double normal() {
    double u1 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double const u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }
  double exponential(double mean) { return -mean * std::log(1.0 - uniform()); }
};

bool starts_with(std::string const& s, std::string const& p) { return s.rfind(p, 0) == 0; }

std::string join(std::string const& dir, std::string const& rel) { return (std::filesystem::path(dir) / rel).string(); }

void sort_by_submit(workload& w) {
  std::vector<std::size_t> idx(w.jobs.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return w.jobs[a].submit_time < w.jobs[b].submit_time; });
  std::vector<job> jobs;
  std::vector<std::int64_t> dur;
  jobs.reserve(idx.size());
  dur.reserve(idx.size());
  for (auto i : idx) {
    jobs.push_back(std::move(w.jobs[i]));
    dur.push_back(w.durations[i]);
  }
  w.jobs = std::move(jobs);
  w.durations = std::move(dur);
}

std::int32_t nodes_for_gpus(std::int64_t gpus) {
  auto n = static_cast<std::int32_t>((gpus + traces::itp_gpus_per_node - 1) / traces::itp_gpus_per_node);
  return std::max(n, sim_nodes_per_leaf);
}

workload load_itp(workload_options const& opt, std::string const& spec) {
  std::string path = spec;
  std::string cname;
  if (starts_with(spec, "cluster") && spec.find('/') == std::string::npos && spec.find(".csv") == std::string::npos) {
    cname = spec;
    path = join(data_dir(opt), "microsoft-itp-elasticflow/raw-traces/" + spec + ".csv");
  }
  workload w;
  w.name = "itp:" + spec;
  w.jobs = traces::itp_to_jobs(traces::load_itp_jobs(path));
  for (auto& j : w.jobs) w.durations.push_back(std::max<std::int64_t>(j.estimated_duration, 1));
  sort_by_submit(w);
  finish_workload(w, opt);
  std::int64_t peak = cname.empty() ? 0 : itp_readme_peak(cname);
  if (peak == 0) peak = peak_gpu_demand(w.jobs, w.durations);
  std::int32_t const nodes = opt.nodes > 0 ? opt.nodes : nodes_for_gpus(peak);
  w.nodes = homogeneous_cluster(nodes, traces::itp_cpu_milli_per_gpu * traces::itp_gpus_per_node,
                                traces::itp_memory_mib_per_gpu * traces::itp_gpus_per_node, "ITP-GPU");
  w.description = std::to_string(w.nodes.nodes.size()) + " nodes x 8 GPUs (peak demand " + std::to_string(peak) +
                  " GPUs), " + std::to_string(w.jobs.size()) + " jobs from " + path;
  return w;
}

workload load_openb(workload_options const& opt, std::string const& spec) {
  std::string path = spec;
  if (spec.find('/') == std::string::npos && spec.find(".csv") == std::string::npos) {
    path = join(data_dir(opt), "alibaba-openb-v2023/openb_pod_list_" + spec + ".csv");
  }
  auto const inv = opt.inventory.empty() ? join(data_dir(opt), "alibaba-openb-v2023/openb_node_list_gpu_node.csv")
                                         : opt.inventory;
  workload w;
  w.name = "openb:" + spec;
  w.jobs = traces::load_openb_pods(path);
  // Pods without a known lifetime (still running or pending at trace end)
  // run until the end of the trace: the latest known deletion.
  std::int64_t trace_end = 0;
  for (auto const& j : w.jobs) trace_end = std::max(trace_end, j.submit_time + j.estimated_duration);
  for (auto& j : w.jobs) {
    if (j.estimated_duration <= 0) j.estimated_duration = std::max<std::int64_t>(trace_end - j.submit_time, 1);
    w.durations.push_back(std::max<std::int64_t>(j.estimated_duration, 1));
  }
  sort_by_submit(w);
  finish_workload(w, opt);
  w.nodes = traces::load_inventory(inv, {.nodes_per_leaf = 32, .leaves_per_spine = 8});
  std::int64_t gpus = 0;
  for (auto const& n : w.nodes.nodes) gpus += n.gpu_count();
  w.description = std::to_string(w.nodes.nodes.size()) + " nodes of " + inv + " (" + std::to_string(gpus) + " GPUs), " +
                  std::to_string(w.jobs.size()) + " pods from " + path;
  return w;
}

workload load_dlrm(workload_options const& opt, std::string const& spec) {
  std::string const path =
      spec.empty() ? join(data_dir(opt), "alibaba-dlrm-v2025/disaggregated_DLRM_trace.csv") : spec;
  auto const rows = traces::load_dlrm_instances(path);
  std::int64_t trace_end = 0;
  for (auto const& r : rows) trace_end = std::max({trace_end, r.creation_time, r.deletion_time});
  workload w;
  w.name = spec.empty() ? "dlrm" : "dlrm:" + spec;
  std::int64_t k = 0;
  for (auto const& r : rows) {
    ++k;
    if (r.gpus <= 0) continue;  // CN (CPU-node) instances are not simulated
    job j;
    j.name = r.app + "/" + std::to_string(k);
    j.kind = job_kind::inference;
    j.queue = r.app;
    j.per_replica.gpus = r.gpus;
    j.per_replica.cpu_milli = r.cpu_milli;
    j.per_replica.memory_mib = r.memory_mib;
    j.submit_time = std::max<std::int64_t>(r.creation_time, 0);
    std::int64_t const end = r.deletion_time < 0 ? trace_end : r.deletion_time;
    std::int64_t const dur = std::max<std::int64_t>(end - j.submit_time, 1);
    j.estimated_duration = dur;
    w.jobs.push_back(std::move(j));
    w.durations.push_back(dur);
  }
  sort_by_submit(w);
  finish_workload(w, opt);
  std::int64_t const peak = peak_gpu_demand(w.jobs, w.durations);
  std::int32_t const nodes = opt.nodes > 0 ? opt.nodes : nodes_for_gpus(peak);
  w.nodes = homogeneous_cluster(nodes, 128000, 1024 * 1024, "DLRM-GPU");
  w.description = std::to_string(w.nodes.nodes.size()) + " nodes x 8 GPUs, 128 vCPU, 1 TiB (peak demand " +
                  std::to_string(peak) + " GPUs), " + std::to_string(w.jobs.size()) + " HN instances from " + path;
  return w;
}

workload make_synthetic(workload_options const& opt) {
  rng r{opt.seed * 0x2545F4914F6CDD1DULL + 7};
  workload w;
  w.name = "synthetic";
  std::int32_t const nodes = opt.nodes > 0 ? opt.nodes : 32;
  w.nodes = homogeneous_cluster(nodes, 128000, 1024 * 1024, "H100");
  double t = 0;
  double const mean_gap = 60.0 / std::max(opt.arrival_rate, 1e-9);
  for (std::int32_t i = 0; i < opt.synthetic_jobs; ++i) {
    t += r.exponential(mean_gap);
    job j;
    j.name = "syn-" + std::to_string(i);
    j.submit_time = static_cast<std::int64_t>(t);
    double const u = r.uniform();
    if (u < 0.40) {  // 1 GPU
      j.per_replica.gpus = 1;
    } else if (u < 0.60) {  // fractional
      static constexpr std::int32_t shares[] = {250, 500, 750};
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = shares[r.next() % 3];
      j.kind = job_kind::inference;
    } else if (u < 0.85) {  // multi-GPU, one node
      static constexpr std::int32_t sizes[] = {2, 4, 8};
      j.per_replica.gpus = sizes[r.next() % 3];
    } else {  // gang of 2..4 x 8 GPUs, preferably under one leaf
      j.replicas = 2 + static_cast<std::int32_t>(r.next() % 3);
      j.per_replica.gpus = 8;
      j.gang = true;
      j.topology_level = 2;
      j.topo_mode = topology_mode::preferred;
      j.network_sensitivity = 0.8F;
    }
    j.per_replica.cpu_milli = 4000LL * j.per_replica.gpus;
    j.per_replica.memory_mib = 32768LL * j.per_replica.gpus;
    auto const dur = static_cast<std::int64_t>(std::max(60.0, r.exponential(3600.0)));
    j.estimated_duration = dur;
    w.jobs.push_back(std::move(j));
    w.durations.push_back(dur);
  }
  finish_workload(w, opt);
  w.description = std::to_string(w.nodes.nodes.size()) + " nodes x 8 GPUs, " + std::to_string(w.jobs.size()) +
                  " synthetic jobs (seed " + std::to_string(opt.seed) + ")";
  return w;
}

}  // namespace

std::string data_dir(workload_options const& opt) {
  if (!opt.data_dir.empty()) return opt.data_dir;
  if (char const* e = std::getenv("PLACER_DATA_DIR"); e != nullptr && *e != 0) return e;
  return "../shared/data";
}

std::int64_t peak_gpu_demand(std::vector<job> const& jobs, std::vector<std::int64_t> const& durations) {
  std::vector<std::pair<std::int64_t, std::int64_t>> ev;  // (time, +/- milli)
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto const m = jobs[i].per_replica.gpu_milli_total() * jobs[i].replicas;
    ev.emplace_back(jobs[i].submit_time, m);
    ev.emplace_back(jobs[i].submit_time + durations[i], -m);
  }
  std::sort(ev.begin(), ev.end());  // ends (negative) before starts at the same time
  std::int64_t cur = 0, peak = 0;
  for (auto const& e : ev) peak = std::max(peak, cur += e.second);
  return (peak + milli_per_gpu - 1) / milli_per_gpu;
}

std::int64_t itp_readme_peak(std::string const& name) {
  static std::map<std::string, std::int64_t> const peaks = {
      {"cluster01", 330}, {"cluster02", 346},  {"cluster03", 1379}, {"cluster04", 2025}, {"cluster05", 341},
      {"cluster07", 1903}, {"cluster08", 282}, {"cluster09", 118},  {"cluster10", 52}};
  auto it = peaks.find(name);
  return it == peaks.end() ? 0 : it->second;
}

cluster homogeneous_cluster(std::int32_t nodes, std::int64_t cpu_milli, std::int64_t memory_mib,
                            std::string const& model) {
  std::int32_t const leaves = std::max(1, (nodes + sim_nodes_per_leaf - 1) / sim_nodes_per_leaf);
  return make_cluster()
      .spines(1)
      .leaves_per_spine(leaves)
      .nodes_per_leaf(sim_nodes_per_leaf)
      .gpus(8)
      .gpu_model(model)
      .cpu_milli(cpu_milli)
      .memory_mib(memory_mib)
      .build();
}

void finish_workload(workload& w, workload_options const& opt) {
  if (opt.horizon > 0 && !w.jobs.empty()) {
    std::int64_t const last = w.jobs.front().submit_time + opt.horizon;
    std::size_t keep = 0;
    while (keep < w.jobs.size() && w.jobs[keep].submit_time <= last) ++keep;
    w.jobs.resize(keep);
    w.durations.resize(keep);
  }
  if (opt.limit > 0 && static_cast<std::size_t>(opt.limit) < w.jobs.size()) {
    w.jobs.resize(static_cast<std::size_t>(opt.limit));
    w.durations.resize(static_cast<std::size_t>(opt.limit));
  }
  if (opt.estimate_noise > 0) {
    rng r{opt.seed ^ 0xA5A5A5A55A5A5A5AULL};
    for (std::size_t i = 0; i < w.jobs.size(); ++i) {
      double const f = std::exp(opt.estimate_noise * r.normal());
      w.jobs[i].estimated_duration =
          std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(static_cast<double>(w.durations[i]) * f)));
    }
  }
  // Simulator convention: every multi-replica job is all-or-nothing.
  for (auto& j : w.jobs) {
    if (j.replicas > 1) j.gang = true;
  }
}

workload load_workload(workload_options const& opt) {
  std::string const& t = opt.trace;
  if (starts_with(t, "itp:")) return load_itp(opt, t.substr(4));
  if (starts_with(t, "openb:")) return load_openb(opt, t.substr(6));
  if (t == "dlrm") return load_dlrm(opt, "");
  if (starts_with(t, "dlrm:")) return load_dlrm(opt, t.substr(5));
  if (t == "synthetic") return make_synthetic(opt);
  throw std::runtime_error("unknown trace '" + t + "' (itp:clusterNN|itp:PATH, openb:NAME|openb:PATH, dlrm[:PATH], synthetic)");
}

}  // namespace placer::sim
