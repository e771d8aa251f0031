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

/// FNV-1a of a job name: per-job generators independent of the job's position.
std::uint64_t name_hash(std::string const& s) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

std::string itp_path(workload_options const& opt, std::string const& spec, std::string& cname) {
  if (starts_with(spec, "cluster") && spec.find('/') == std::string::npos && spec.find(".csv") == std::string::npos) {
    cname = spec;
    return join(data_dir(opt), "microsoft-itp-elasticflow/raw-traces/" + spec + ".csv");
  }
  return spec;
}

/// ITP jobs, annotated, sorted, with limit/horizon/noise applied.
void itp_training_jobs(workload& w, workload_options const& opt, std::string const& path) {
  w.jobs = traces::itp_to_jobs(traces::load_itp_jobs(path));
  for (auto& j : w.jobs) {
    annotate_training_job(j, opt.seed);
    w.durations.push_back(std::max<std::int64_t>(j.estimated_duration, 1));
  }
  sort_by_submit(w);
  finish_workload(w, opt);
}

/// The default size: enough 8-GPU nodes for the peak demand, in whole
/// leaves (the size every recorded result used). A --nodes the caller
/// gives is taken exactly.
std::int32_t nodes_for_gpus(std::int64_t gpus) {
  auto n = static_cast<std::int32_t>((gpus + traces::itp_gpus_per_node - 1) / traces::itp_gpus_per_node);
  n = (n + sim_nodes_per_leaf - 1) / sim_nodes_per_leaf * sim_nodes_per_leaf;
  return std::max(n, sim_nodes_per_leaf);
}

/// The README's peak demand for a named cluster, else the trace's own.
std::int64_t itp_peak(std::string const& cname, workload const& w) {
  std::int64_t const readme = cname.empty() ? 0 : itp_readme_peak(cname);
  return readme != 0 ? readme : peak_gpu_demand(w.jobs, w.durations);
}

workload load_itp(workload_options const& opt, std::string const& spec) {
  std::string cname;
  std::string const path = itp_path(opt, spec, cname);
  workload w;
  w.name = "itp:" + spec;
  itp_training_jobs(w, opt, path);
  std::int64_t const peak = itp_peak(cname, w);
  std::int32_t const nodes = opt.nodes > 0 ? opt.nodes : nodes_for_gpus(peak);
  w.nodes = homogeneous_cluster(nodes, traces::itp_cpu_milli_per_gpu * traces::itp_gpus_per_node,
                                traces::itp_memory_mib_per_gpu * traces::itp_gpus_per_node, "ITP-GPU");
  w.description = std::to_string(w.nodes.nodes.size()) + " nodes x 8 GPUs (peak demand " + std::to_string(peak) +
                  " GPUs), " + std::to_string(w.jobs.size()) + " jobs from " + path;
  return w;
}

/// ITP training plus diurnal inference (docs/simulator.md, "Mixed workload").
workload load_mixed(workload_options const& opt, std::string const& spec) {
  std::string cname;
  std::string const path = itp_path(opt, spec, cname);
  workload w;
  w.name = "mixed:" + spec;
  itp_training_jobs(w, opt, path);
  if (w.jobs.empty()) throw std::runtime_error("mixed:" + spec + ": no training jobs");
  std::int64_t const peak = itp_peak(cname, w);
  std::int32_t const training_nodes = opt.nodes > 0 ? opt.nodes : nodes_for_gpus(peak);
  std::int32_t inference_nodes = opt.inference_nodes;
  if (inference_nodes <= 0) {
    inference_nodes = (training_nodes + 1) / 2;
    inference_nodes = (inference_nodes + sim_nodes_per_leaf - 1) / sim_nodes_per_leaf * sim_nodes_per_leaf;
  }
  w.nodes = pooled_cluster(training_nodes, inference_nodes);
  std::int32_t inf_count = 0;
  for (auto const& n : w.nodes.nodes) inf_count += n.pool == pool_kind::inference ? 1 : 0;

  // Instance shapes (1 GPU, vCPU, memory, service) from the DLRM HN rows.
  auto const dlrm = traces::load_dlrm_instances(join(data_dir(opt), "alibaba-dlrm-v2025/disaggregated_DLRM_trace.csv"));
  std::vector<traces::dlrm_instance> shapes;
  for (auto const& r : dlrm) {
    if (r.gpus == 1) shapes.push_back(r);
  }
  if (shapes.empty()) throw std::runtime_error("mixed: the DLRM trace has no 1-GPU (HN) instances");

  std::int64_t const gpus = static_cast<std::int64_t>(inf_count) * 8;
  auto const base = static_cast<std::int32_t>(std::llround(inference_base_share * static_cast<double>(gpus)));
  auto const amp =
      static_cast<std::int32_t>(std::llround(inference_peak_share * static_cast<double>(gpus))) - base;
  std::int64_t const t0 = w.jobs.front().submit_time;
  std::int64_t const t_last = w.jobs.back().submit_time;
  constexpr std::int64_t day = 86400;
  std::int64_t const day0 = t0 / day * day;
  std::int64_t const window_end = (t_last / day + 1) * day + inference_trough_s;
  rng r{opt.seed * 0x9E3779B97F4A7C15ULL + 0xD1B54A32D192ED03ULL};
  std::int64_t n_inf = 0;
  auto add_instance = [&](std::string name, std::int64_t a, std::int64_t e) {
    auto const& sh = shapes[static_cast<std::size_t>(r.next() % shapes.size())];
    job j;
    j.name = std::move(name);
    j.kind = job_kind::inference;
    j.priority = inference_priority;
    j.queue = sh.app;
    j.per_replica.gpus = 1;
    j.per_replica.cpu_milli = sh.cpu_milli;
    j.per_replica.memory_mib = sh.memory_mib;
    j.submit_time = a;
    j.estimated_duration = e - a;
    w.jobs.push_back(std::move(j));
    w.durations.push_back(e - a);
    ++n_inf;
  };
  // Base load: served all through the window.
  for (std::int32_t k = 0; k < base; ++k) add_instance("inf-base-" + std::to_string(k), t0, window_end);
  // Instance k of a day lives while the day's demand curve is above
  // base + k - 0.5: it arrives in the morning and leaves at night.
  for (std::int64_t d0 = day0; d0 <= t_last; d0 += day) {
    for (std::int32_t k = 1; k <= amp; ++k) {
      double const q = (k - 0.5) / amp;
      double const frac = std::acos(1.0 - 2.0 * q) / (2.0 * 3.14159265358979323846);  // 0..0.5 of the day
      auto jitter = [&] {
        return static_cast<std::int64_t>(r.next() % static_cast<std::uint64_t>(2 * inference_jitter_s + 1)) -
               inference_jitter_s;
      };
      std::int64_t a = d0 + inference_trough_s + static_cast<std::int64_t>(frac * day) + jitter();
      std::int64_t const e = d0 + inference_trough_s + static_cast<std::int64_t>((1.0 - frac) * day) + jitter();
      a = std::max(a, t0);
      if (e - a < 60) continue;  // the part of the day before the window (or a sliver of it)
      add_instance("inf-d" + std::to_string((d0 - day0) / day) + "-" + std::to_string(k), a, e);
    }
  }
  sort_by_submit(w);
  for (auto& j : w.jobs) {
    if (j.replicas > 1) j.gang = true;
  }
  w.description = std::to_string(training_nodes) + " training + " + std::to_string(inf_count) +
                  " loanable inference nodes x 8 GPUs; " + std::to_string(w.jobs.size() - static_cast<std::size_t>(n_inf)) +
                  " training jobs from " + path + ", " + std::to_string(n_inf) + " inference instances (base " +
                  std::to_string(base) + ", peak " + std::to_string(base + amp) + " GPUs, DLRM shapes)";
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

void annotate_training_job(job& j, std::uint64_t seed) {
  rng r{name_hash(j.name) ^ (seed * 0xD6E8FEB86659FD93ULL)};
  // Draw every number, used or not, so each attribute keeps its draw.
  double const u_prio = r.uniform();
  double const u_class = r.uniform();
  double const u_sens = r.uniform();
  double const u_elastic = r.uniform();
  bool const high = u_prio < training_high_share;
  j.priority = high ? training_high_priority : training_low_priority;
  j.preemptible = !high;
  std::int32_t const gpus = j.per_replica.gpus * j.replicas;
  if (gpus <= 1) {
    j.network_sensitivity = 0.0F;
  } else if (j.replicas > 1 && u_class < gang_sensitive_share) {
    j.network_sensitivity = static_cast<float>(0.6 + 0.4 * u_sens);
  } else {
    j.network_sensitivity = static_cast<float>(0.1 + 0.3 * u_sens);
  }
  if (j.replicas > 1 && u_elastic < gang_elastic_share) {
    j.min_replicas = (j.replicas + 1) / 2;
    j.max_replicas = j.replicas + (j.replicas + 1) / 2;
  }
}

cluster pooled_cluster(std::int32_t training, std::int32_t inference) {
  constexpr std::int32_t leaves_per_spine = 4;
  cluster c;
  c.epoch = 1;
  c.topo.level_names = {"cluster", "spine", "leaf"};
  c.topo.domains.push_back({"cluster", 0, -1});
  auto add_pool = [&](std::int32_t nodes, pool_kind pool, std::string const& prefix, std::int64_t cpu, std::int64_t mem) {
    std::int32_t const leaves = (nodes + sim_nodes_per_leaf - 1) / sim_nodes_per_leaf;
    std::int32_t spine = -1;
    for (std::int32_t l = 0; l < leaves; ++l) {
      if (l % leaves_per_spine == 0) {
        spine = static_cast<std::int32_t>(c.topo.domains.size());
        c.topo.domains.push_back({prefix + "-spine-" + std::to_string(l / leaves_per_spine), 1, 0});
      }
      auto const leaf = static_cast<std::int32_t>(c.topo.domains.size());
      c.topo.domains.push_back({prefix + "-leaf-" + std::to_string(l), 2, spine});
      for (std::int32_t k = 0; k < sim_nodes_per_leaf && l * sim_nodes_per_leaf + k < nodes; ++k) {
        node n;
        n.name = prefix + "-" + std::to_string(l) + "-" + std::to_string(k);
        n.gpu_model = "GPU";
        n.gpu_free_milli.assign(8, milli_per_gpu);
        n.cpu_milli_capacity = n.cpu_milli_free = cpu;
        n.memory_mib_capacity = n.memory_mib_free = mem;
        n.pool = pool;
        n.loanable = pool == pool_kind::inference;
        n.domain = leaf;
        c.nodes.push_back(std::move(n));
      }
    }
  };
  add_pool(training, pool_kind::training, "train", traces::itp_cpu_milli_per_gpu * traces::itp_gpus_per_node,
           traces::itp_memory_mib_per_gpu * traces::itp_gpus_per_node);
  add_pool(inference, pool_kind::inference, "infer", 128000, 1024 * 1024);
  return c;
}

cluster homogeneous_cluster(std::int32_t nodes, std::int64_t cpu_milli, std::int64_t memory_mib,
                            std::string const& model) {
  std::int32_t const leaves = std::max(1, (nodes + sim_nodes_per_leaf - 1) / sim_nodes_per_leaf);
  cluster c = make_cluster()
                  .spines(1)
                  .leaves_per_spine(leaves)
                  .nodes_per_leaf(sim_nodes_per_leaf)
                  .gpus(8)
                  .gpu_model(model)
                  .cpu_milli(cpu_milli)
                  .memory_mib(memory_mib)
                  .build();
  // Exactly the nodes asked for: the last leaf may be partly filled.
  if (nodes > 0 && static_cast<std::size_t>(nodes) < c.nodes.size()) c.nodes.resize(static_cast<std::size_t>(nodes));
  return c;
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

namespace {

/// A cluster sized by the caller (--nodes) must hold every job at its
/// smallest: a job that could never start would wait for ever and weigh on
/// every wait figure without saying why.
void check_every_job_fits(workload const& w, workload_options const& opt) {
  if (opt.nodes <= 0) return;
  std::int64_t gpus = 0;
  for (auto const& n : w.nodes.nodes) gpus += static_cast<std::int64_t>(n.gpu_free_milli.size());
  for (auto const& j : w.jobs) {
    std::int64_t const replicas = j.min_replicas > 0 ? std::min(j.min_replicas, j.replicas) : j.replicas;
    std::int64_t const need = static_cast<std::int64_t>(j.per_replica.gpus) * replicas;
    if (need > gpus) {
      throw std::runtime_error("--nodes " + std::to_string(opt.nodes) + " gives the cluster " + std::to_string(gpus) +
                               " GPUs, but job '" + j.name + "' needs " + std::to_string(need) +
                               " at its smallest and could never start (8 GPUs a node)");
    }
  }
}

workload load_any(workload_options const& opt) {
  std::string const& t = opt.trace;
  if (starts_with(t, "itp:")) return load_itp(opt, t.substr(4));
  if (starts_with(t, "mixed:")) return load_mixed(opt, t.substr(6));
  if (starts_with(t, "openb:")) return load_openb(opt, t.substr(6));
  if (t == "dlrm") return load_dlrm(opt, "");
  if (starts_with(t, "dlrm:")) return load_dlrm(opt, t.substr(5));
  if (t == "synthetic") return make_synthetic(opt);
  throw std::runtime_error("unknown trace '" + t + "' (itp:clusterNN|itp:PATH, openb:NAME|openb:PATH, dlrm[:PATH], mixed:clusterNN|mixed:PATH, synthetic)");
}

}  // namespace

workload load_workload(workload_options const& opt) {
  workload w = load_any(opt);
  check_every_job_fits(w, opt);
  return w;
}

}  // namespace placer::sim
