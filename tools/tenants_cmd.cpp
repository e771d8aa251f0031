// `placer experiment tenants`: one ITP trace shared by tenants (queues),
// replayed under five ways of sharing the cluster, each tenant's GPUs held
// over time against its guarantee (docs/policies.md, "Tenants").
//
// ITP traces name no users, so the tenants are the jobs' sizes: "one-gpu"
// (1 GPU), "one-node" (2..8 GPUs) and "multi-node" (more than 8: gangs).
// They differ in what they ask for, which is what makes sharing matter.
//
//   shared          no queues: one queue order (priority, then arrival)
//   shared+preempt  the same with preemption on (the control for reclaim:
//                   priorities only)
//   hard-quota      each tenant limited to its guarantee: static partitions
//   shares          guarantees, the rest shared by weight, idle share lent
//                   (solver::solve's two admission passes)
//   shares+reclaim  the same with preemption on: a tenant below its
//                   guarantee takes back what others borrowed
//   drf             no queues; every round the pending jobs are ordered by
//                   dominant-resource fairness (progressive filling: the
//                   tenant with the smallest dominant share next), the
//                   order sent as priorities
#include "cli.hpp"
#include "commands.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/sim_workloads.hpp>
#include <placer/sim/simulator.hpp>
#include <placer/sim/svg_plot.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace placer::tools {

namespace fs = std::filesystem;

namespace {

char const* const tenants_usage =
    "usage: placer experiment tenants [--trace itp:clusterNN] [--limit N] [--nodes N] [--only LIST]\n"
    "                                 [--out DIR] [--json] [--data DIR] [--interval S] [--checkpoint-interval S]\n"
    "  --trace   ITP workload (default itp:cluster02); tenants by job size: one-gpu, one-node, multi-node\n"
    "  --limit   first N jobs (default 0: all); --nodes training nodes (default: half the trace's size)\n"
    "  --only    comma list of runs: shared,shared+preempt,hard-quota,shares,shares+reclaim,drf\n"
    "  --out     summary.json, and per run share_RUN.svg: each tenant's GPUs over time and its guarantee\n"
    "  --json    one JSON object per run on stdout instead of the tables\n";

std::vector<std::string> const tenant_names = {"one-gpu", "one-node", "multi-node"};

std::int32_t tenant_of(job const& j) {
  std::int64_t const gpus = static_cast<std::int64_t>(j.per_replica.gpus) * j.replicas;
  return gpus <= 1 ? 0 : gpus <= 8 ? 1 : 2;
}

struct tenant_figures {
  double held_gpus = 0;     ///< time-weighted mean
  double demand_gpus = 0;   ///< time-weighted mean (held + pending)
  double short_gpu_hours = 0;  ///< integral of max(0, min(guarantee, demand) - held)
  double short_time = 0;    ///< fraction of the window with more than one GPU short
  sim::distribution wait;
  std::int64_t jobs = 0, never_started = 0;
};

struct tenant_run {
  std::string label;
  sim::sim_result result;
  sim::sim_summary summary;
  std::vector<tenant_figures> tenants;
  double short_gpu_hours = 0;  ///< over tenants
};

/// Every round's pending jobs as priorities in DRF order: progressive
/// filling over the tenants' dominant shares (GPU or CPU of the cluster,
/// whichever is larger), the running work counted, each tenant's jobs in
/// the round's order.
sim::solve_fn drf_order(solver& s, std::unordered_map<std::string, std::int32_t> const& tenant_by_name) {
  return [&s, &tenant_by_name](round_input const& in) {
    std::int64_t cap_gpu = 0, cap_cpu = 0;
    for (auto const& n : in.state.nodes) {
      cap_gpu += static_cast<std::int64_t>(n.gpu_count()) * milli_per_gpu;
      cap_cpu += n.cpu_milli_capacity;
    }
    auto const tenants = tenant_names.size();
    std::vector<double> gpu(tenants, 0), cpu(tenants, 0);
    auto const share = [&](std::size_t t) {
      return std::max(cap_gpu > 0 ? gpu[t] / static_cast<double>(cap_gpu) : 0.0,
                      cap_cpu > 0 ? cpu[t] / static_cast<double>(cap_cpu) : 0.0);
    };
    for (auto const& rj : in.running) {
      auto it = tenant_by_name.find(rj.name);
      if (it == tenant_by_name.end()) continue;
      auto const n = static_cast<double>(rj.replicas.size());
      gpu[static_cast<std::size_t>(it->second)] += static_cast<double>(rj.per_replica.gpu_milli_total()) * n;
      cpu[static_cast<std::size_t>(it->second)] += static_cast<double>(rj.per_replica.cpu_milli) * n;
    }
    std::vector<std::vector<std::size_t>> waiting(tenants);
    for (std::size_t j = 0; j < in.pending.size(); ++j) {
      waiting[static_cast<std::size_t>(tenant_of(in.pending[j]))].push_back(j);
    }
    round_input ordered = in;
    std::vector<std::size_t> next(tenants, 0);
    auto prio = static_cast<std::int32_t>(in.pending.size());
    for (std::size_t k = 0; k < in.pending.size(); ++k) {
      std::size_t best = tenants;
      for (std::size_t t = 0; t < tenants; ++t) {
        if (next[t] < waiting[t].size() && (best == tenants || share(t) < share(best))) best = t;
      }
      auto const j = waiting[best][next[best]++];
      auto& jb = ordered.pending[j];
      jb.priority = prio--;
      gpu[best] += static_cast<double>(jb.per_replica.gpu_milli_total()) * jb.replicas;
      cpu[best] += static_cast<double>(jb.per_replica.cpu_milli) * jb.replicas;
    }
    return s.solve(ordered);
  };
}

std::vector<tenant_figures> figures(sim::sim_result const& r, sim::workload const& w,
                                    std::vector<std::int64_t> const& guarantee_milli) {
  std::vector<tenant_figures> f(tenant_names.size());
  std::vector<std::vector<double>> waits(tenant_names.size());
  for (std::size_t i = 0; i < r.jobs.size(); ++i) {
    auto const t = static_cast<std::size_t>(tenant_of(w.jobs[i]));
    ++f[t].jobs;
    if (r.jobs[i].start < 0) {
      ++f[t].never_started;
    } else {
      waits[t].push_back(static_cast<double>(r.jobs[i].start - r.jobs[i].submit));
    }
  }
  for (std::size_t t = 0; t < f.size(); ++t) f[t].wait = sim::describe(waits[t]);
  double const span = static_cast<double>(std::max<std::int64_t>(r.t_end - r.t_begin, 1));
  for (std::size_t k = 0; k < r.series.size(); ++k) {
    auto const& s = r.series[k];
    if (s.queue_demand_milli.size() != f.size()) continue;  // the run had no queues
    double const dt = static_cast<double>(std::max<std::int64_t>(r.sample_end(k) - s.time, 0));
    for (std::size_t t = 0; t < f.size(); ++t) {
      double const held = static_cast<double>(s.queue_milli[t]) / milli_per_gpu;
      double const demand = static_cast<double>(s.queue_demand_milli[t]) / milli_per_gpu;
      double const owed = std::min(static_cast<double>(guarantee_milli[t]) / milli_per_gpu, demand);
      f[t].held_gpus += held * dt / span;
      f[t].demand_gpus += demand * dt / span;
      f[t].short_gpu_hours += std::max(0.0, owed - held) * dt / 3600.0;
      f[t].short_time += owed - held > 1.0 ? dt / span : 0.0;
    }
  }
  return f;
}

/// Each tenant's GPUs held over time (hours from the start, averaged over
/// bins) and the guarantee.
sim::line_plot share_plot(tenant_run const& run, std::string const& workload, double guarantee_gpus) {
  sim::line_plot p{"GPUs held per tenant: " + run.label + " (" + workload + ")", "time (hours)", "GPUs held", {}};
  auto const& r = run.result;
  constexpr std::size_t bins = 400;
  double const span = static_cast<double>(std::max<std::int64_t>(r.t_end - r.t_begin, 1));
  for (std::size_t t = 0; t < tenant_names.size(); ++t) {
    std::vector<double> sum(bins, 0), width(bins, 0);
    for (std::size_t k = 0; k < r.series.size(); ++k) {
      auto const& s = r.series[k];
      if (s.queue_milli.size() != tenant_names.size()) continue;
      auto const b = std::min(bins - 1, static_cast<std::size_t>(static_cast<double>(s.time - r.t_begin) / span * bins));
      double const dt = static_cast<double>(std::max<std::int64_t>(r.sample_end(k) - s.time, 0));
      sum[b] += static_cast<double>(s.queue_milli[t]) / milli_per_gpu * dt;
      width[b] += dt;
    }
    sim::plot_series ps{tenant_names[t], {}, {}};
    for (std::size_t b = 0; b < bins; ++b) {
      if (width[b] <= 0) continue;
      ps.x.push_back((static_cast<double>(b) + 0.5) * span / bins / 3600.0);
      ps.y.push_back(sum[b] / width[b]);
    }
    p.series.push_back(std::move(ps));
  }
  p.series.push_back({"guarantee (each)", {0.0, span / 3600.0}, {guarantee_gpus, guarantee_gpus}});
  return p;
}

std::string run_json(tenant_run const& r, std::string const& workload, std::vector<std::int64_t> const& guarantee) {
  auto const& s = r.summary;
  char b[512];
  std::snprintf(b, sizeof b,
                "{\"workload\":%s,\"run\":%s,\"jobs\":%lld,\"jwtd_p50\":%.0f,\"jwtd_p90\":%.0f,\"jct_mean\":%.1f,"
                "\"gar\":%.5f,\"preemptions\":%lld,\"lost_gpu_hours\":%.1f,\"short_gpu_hours\":%.1f,\"tenants\":[",
                sim::json_quote(workload).c_str(), sim::json_quote(r.label).c_str(), static_cast<long long>(s.jobs),
                s.wait.p50, s.wait.p90, s.jct.mean, s.gar_time, static_cast<long long>(s.preemptions),
                s.lost_gpu_hours, r.short_gpu_hours);
  std::string o = b;
  for (std::size_t t = 0; t < r.tenants.size(); ++t) {
    auto const& f = r.tenants[t];
    std::snprintf(b, sizeof b,
                  "%s{\"tenant\":%s,\"jobs\":%lld,\"never_started\":%lld,\"guarantee_gpus\":%.1f,\"held_gpus\":%.2f,"
                  "\"demand_gpus\":%.2f,\"short_gpu_hours\":%.1f,\"short_time\":%.4f,\"jwtd_p50\":%.0f,"
                  "\"jwtd_p90\":%.0f}",
                  t == 0 ? "" : ",", sim::json_quote(tenant_names[t]).c_str(), static_cast<long long>(f.jobs),
                  static_cast<long long>(f.never_started), static_cast<double>(guarantee[t]) / milli_per_gpu,
                  f.held_gpus, f.demand_gpus, f.short_gpu_hours, f.short_time, f.wait.p50, f.wait.p90);
    o += b;
  }
  return o + "]}";
}

void print_table(std::vector<tenant_run> const& runs, std::string const& workload, std::string const& description,
                 double guarantee_gpus) {
  std::printf("\n%s: %s\ntenants by job size, each guaranteed %.1f GPUs\n", workload.c_str(), description.c_str(),
              guarantee_gpus);
  std::printf("%-15s %7s %7s %8s %6s %6s %6s %8s |", "run", "JWTDp50", "p90", "JCTmean", "GAR%", "preem", "lostGh",
              "shortGh");
  for (auto const& t : tenant_names) std::printf(" %-31s|", (t + " held/demand short% JWTDp90").c_str());
  std::printf("\n");
  for (auto const& r : runs) {
    auto const& s = r.summary;
    std::printf("%-15s %7.0f %7.0f %8.0f %6.2f %6lld %6.1f %8.0f |", r.label.c_str(), s.wait.p50, s.wait.p90,
                s.jct.mean, 100 * s.gar_time, static_cast<long long>(s.preemptions), s.lost_gpu_hours,
                r.short_gpu_hours);
    for (auto const& f : r.tenants) {
      std::printf(" %5.1f/%6.1f %5.1f%% %9.0f |", f.held_gpus, f.demand_gpus, 100 * f.short_time, f.wait.p90);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace

int cmd_experiment_tenants(int argc, char** argv) {
  try {
    std::set<std::string> const valued{"trace", "limit", "nodes", "only", "out", "data", "interval",
                                       "checkpoint-interval", "backend"};
    std::set<std::string> const boolean{"json", "help"};
    auto const args = parse_cli(argc, argv, 3, valued, boolean, "experiment tenants");
    auto const& o = args.opts;
    if (args.flags.count("help") != 0) {
      std::fputs(tenants_usage, stdout);
      return 0;
    }
    sim::workload_options wo;
    wo.data_dir = shared_data_dir(argv[0], args.get("data"));
    wo.trace = args.get("trace", "itp:cluster02");
    if (wo.trace.rfind("itp:", 0) != 0) throw usage_error("--trace must be an ITP workload (itp:clusterNN)");
    wo.limit = static_cast<std::int32_t>(integer_option(o, "limit", 0));
    wo.nodes = static_cast<std::int32_t>(integer_option(o, "nodes", 0));
    if (wo.nodes == 0) {  // half the trace's peak size, whole leaves: sized for the peak nothing queues
      auto const probe = sim::load_workload(wo);
      auto const n = static_cast<std::int32_t>(probe.nodes.nodes.size());
      wo.nodes = std::max(sim::sim_nodes_per_leaf,
                          ((n + 1) / 2 + sim::sim_nodes_per_leaf - 1) / sim::sim_nodes_per_leaf * sim::sim_nodes_per_leaf);
    }
    sim::workload w = sim::load_workload(wo);
    std::unordered_map<std::string, std::int32_t> tenant_by_name;
    for (auto& j : w.jobs) {
      j.queue = tenant_names[static_cast<std::size_t>(tenant_of(j))];
      tenant_by_name.emplace(j.name, tenant_of(j));
    }
    std::int64_t capacity = 0;
    for (auto const& n : w.nodes.nodes) capacity += static_cast<std::int64_t>(n.gpu_count()) * milli_per_gpu;
    auto const n_tenants = static_cast<std::int64_t>(tenant_names.size());
    std::int64_t const each = capacity / n_tenants / milli_per_gpu * milli_per_gpu;  // whole GPUs
    std::vector<std::int64_t> const guarantee(tenant_names.size(), each);

    sim::sim_config cfg0;
    cfg0.interval = integer_option(o, "interval", 60);
    if (cfg0.interval < 1) throw usage_error("--interval must be at least 1");
    cfg0.checkpoint_interval = integer_option(o, "checkpoint-interval", cfg0.checkpoint_interval);
    cfg0.queue.loaning = false;
    // The tenants as queues, each guaranteed a third (hard-quota: limited to it too).
    auto queues = [&](bool limited) {
      std::vector<queue_spec> qs;
      for (auto const& t : tenant_names) {
        queue_spec q{t, "", limited ? each : -1, -1};
        q.gpu_milli_guarantee = each;
        qs.push_back(q);
      }
      return qs;
    };
    std::vector<std::string> labels = {"shared", "shared+preempt", "hard-quota", "shares", "shares+reclaim", "drf"};
    if (o.count("only") != 0) {
      std::vector<std::string> keep;
      for (auto const& x : split(o.at("only"))) {
        if (std::find(labels.begin(), labels.end(), x) == labels.end()) throw usage_error("--only: unknown run '" + x + "'");
        keep.push_back(x);
      }
      labels = keep;
    }
    std::fprintf(stderr, "[tenants] %s: %s; each tenant guaranteed %lld GPUs\n", w.name.c_str(), w.description.c_str(),
                 static_cast<long long>(each / milli_per_gpu));
    solver sv(kernels::select_backend(args.get("backend", "auto")));
    std::vector<tenant_run> runs;
    for (auto const& label : labels) {
      tenant_run r;
      r.label = label;
      sim::sim_config cfg = cfg0;
      cfg.label = label;
      cfg.queues = queues(label == "hard-quota");
      // Every run samples each tenant's usage; only these send the queues.
      cfg.queues_in_rounds = label == "hard-quota" || label == "shares" || label == "shares+reclaim";
      cfg.queue.preemption = label == "shares+reclaim" || label == "shared+preempt";
      r.result = sim::run_simulation(w, cfg, label == "drf" ? drf_order(sv, tenant_by_name) : sim::in_process(sv));
      r.summary = sim::summarize(r.result);
      r.tenants = figures(r.result, w, guarantee);
      for (auto const& f : r.tenants) r.short_gpu_hours += f.short_gpu_hours;
      std::fprintf(stderr, "[tenants] %s: JWTD p90 %.0f s, %.0f GPU-hours short of guarantees, %.1f s\n", label.c_str(),
                   r.summary.wait.p90, r.short_gpu_hours, r.result.wall_seconds);
      runs.push_back(std::move(r));
    }
    if (args.flags.count("json") != 0) {
      for (auto const& r : runs) std::printf("%s\n", run_json(r, w.name, guarantee).c_str());
      std::fflush(stdout);  // before stderr's last lines, which may share the pipe
    } else {
      print_table(runs, w.name, w.description, static_cast<double>(each) / milli_per_gpu);
    }
    if (o.count("out") != 0) {
      fs::path const out = o.at("out");
      std::error_code ec;
      fs::create_directories(out, ec);
      if (ec) throw std::runtime_error("cannot create " + out.string() + ": " + ec.message());
      std::string all = "{\"workload\": " + sim::json_quote(w.name) + ", \"description\": " +
                        sim::json_quote(w.description) + ", \"nodes\": " + std::to_string(wo.nodes) +
                        ", \"guarantee_gpus\": " + std::to_string(each / milli_per_gpu) + ", \"runs\": [\n";
      for (std::size_t k = 0; k < runs.size(); ++k) {
        all += (k ? ",\n" : "") + run_json(runs[k], w.name, guarantee);
        sim::write_svg(share_plot(runs[k], w.name, static_cast<double>(each) / milli_per_gpu),
                       (out / ("share_" + runs[k].label + ".svg")).string());
      }
      std::ofstream f(out / "summary.json");
      f << all << "\n]}\n";
      if (!f) throw std::runtime_error("cannot write " + (out / "summary.json").string());
      std::fprintf(stderr, "[tenants] wrote %s/summary.json and share_*.svg\n", out.c_str());
    }
    return 0;
  } catch (...) {
    return verb_failed("experiment tenants", tenants_usage);
  }
}

}  // namespace placer::tools
