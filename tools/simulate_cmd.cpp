// `placer simulate`: the trace-driven discrete-event cluster simulator
// (docs/simulator.md). Argument handling and printing only; the engine,
// workloads and metrics are in sim/.
#include <placer/kernels/backend.hpp>
#include <placer/service/client.hpp>
#include <placer/sim/baseline_policies.hpp>
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/sim_workloads.hpp>
#include <placer/sim/simulator.hpp>
#include <placer/solver/solver.hpp>

#include "cli.hpp"
#include "commands.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace placer::tools {

namespace {

constexpr char const* usage_text = R"(usage: placer simulate [--trace T] [--algorithm A | --compare A,B,...] [options]

Workload (--trace, default synthetic):
  itp:clusterNN | itp:PATH    Microsoft ITP raw trace on homogeneous 8-GPU nodes
  openb:NAME | openb:PATH     openb pod list (e.g. openb:default) on the openb GPU inventory,
                              or on --cluster FILE (openb node list, PAI machine spec, spot nodes)
  dlrm[:PATH]                 DLRM GPU inference instances (long running)
  mixed:clusterNN | mixed:PATH  ITP training (training pool, --nodes) + diurnal DLRM-shaped
                              inference (loanable inference pool, --inference-nodes N)
  synthetic                   --jobs N (200) --arrival-rate R (jobs/min, 1) --seed S (1)
Options:
  --algorithm A         placer|greedy|kube-least|kube-most|first-fit (the solver, default placer)
                        or random|dot-prod|gpu-packing|gpu-clustering|best-fit|fgd (FGD-paper
                        baselines, one job at a time; cross-round policies do not apply)
  --compare A,B,...     run several algorithms on the same workload
Cross-round policies (solver algorithms; docs/simulator.md):
  --backfill off|easy|conservative   reservations for blocked jobs (default off)
  --preemption          blocked jobs may preempt lower-priority preemptible jobs
  --order fifo|pack|strict  a priority level's jobs in submission order (fifo, the default: a later job
                        never takes what an earlier one needed to start), largest first (pack), or
                        with each queue stopping at its first job that cannot start (strict)
  --age-weight N        priority points a job gains by waiting --age-max seconds (Slurm's
                        PriorityWeightAge; 0, the default: no aging)
  --age-max S           the wait at which aging stops (604800)
  --age-cross-priority  aging may lift a job past a higher priority
  --preempt-max-lost S  ... only victims within S s of their last checkpoint (120; -1 = any)
  --no-loaning          training may not borrow loanable inference nodes (default: may)
  --elastic             elastic jobs get min..max replicas, grow into spare GPUs
  --delay-scheduling    communication-heavy gangs wait (auto-tuned timers) for a consolidated placement
  --network-preemption  deferred sensitive gangs may preempt insensitive work (needs --delay-scheduling)
  --checkpoint-interval S   running jobs checkpoint every S s of their run (1800; 0 = never)
  --no-slowdown         do not stretch run times of spread, network-sensitive placements
  --no-repack           placer without its packing repair (to measure what the repair does)
  --interval S          seconds of simulated time between rounds (60)
  --on-event            also run a round right after arrivals/completions
  --nodes N             cluster size (default: from the trace's peak demand)
  --limit N             first N jobs by submit time
  --horizon S           stop S seconds after the first submission
  --estimate-noise X    log-normal sigma on duration estimates (0 = exact)
  --seed S              synthetic workload and estimate noise
  --data DIR            data directory (default $PLACER_DATA_DIR or ../shared/data)
  --backend auto|cpu|cuda   in-process solver backend (default auto)
  --endpoint E          solve every round through a running service instead
  --timeout-ms N        service timeout per round (5000)
  --server-key FILE --client-cert FILE   a CURVE service's public key, this client's secret certificate
  --out DIR             summary.json, timeseries.csv, jobs.csv, gar.svg, jwtd_cdf.svg, jct_cdf.svg
  --progress            progress bar on stderr (default: when stderr is a terminal)
  --quiet               no table on stdout
)";

using tools::usage_error;

std::set<std::string> with(std::set<std::string> a, std::set<std::string> const& b) {
  a.insert(b.begin(), b.end());
  return a;
}

std::set<std::string> const valued =
    with({"trace", "algorithm", "compare", "interval", "nodes", "limit", "horizon", "estimate-noise", "seed", "jobs",
          "arrival-rate", "data", "backend", "endpoint", "timeout-ms", "out", "cluster", "inference-nodes",
          "server-key", "client-cert"},
         sim::policy_valued_options());
std::set<std::string> const boolean = with({"on-event", "progress", "quiet", "help"}, sim::policy_flag_options());


}  // namespace

int cmd_simulate(int argc, char** argv) {
  try {
    auto const args = parse_cli(argc, argv, 2, valued, boolean, "simulate");
    auto o = args.opts;
    auto const& flags = args.flags;
    if (flags.count("help") != 0) {
      std::cout << usage_text;
      return 0;
    }

    sim::workload_options wo;
    wo.trace = o.count("trace") ? o["trace"] : "synthetic";
    wo.data_dir = shared_data_dir(argv[0], o.count("data") ? o["data"] : "");
    wo.nodes = static_cast<std::int32_t>(integer_option(o, "nodes", 0));
    wo.inventory = o.count("cluster") ? o["cluster"] : "";
    wo.limit = static_cast<std::int32_t>(integer_option(o, "limit", 0));
    wo.horizon = integer_option(o, "horizon", 0);
    wo.estimate_noise = number_option(o, "estimate-noise", 0);
    wo.seed = static_cast<std::uint64_t>(integer_option(o, "seed", 1));
    wo.synthetic_jobs = static_cast<std::int32_t>(integer_option(o, "jobs", 200));
    wo.arrival_rate = number_option(o, "arrival-rate", 1.0);
    wo.inference_nodes = static_cast<std::int32_t>(integer_option(o, "inference-nodes", 0));

    sim::sim_config cfg;
    cfg.interval = integer_option(o, "interval", 60);
    if (cfg.interval < 1) throw usage_error("--interval must be at least 1");
    cfg.on_event = flags.count("on-event") != 0;
    cfg.horizon = wo.horizon;
    cfg.progress = flags.count("progress") != 0 || isatty(STDERR_FILENO) != 0;
    {
      std::map<std::string, std::string> po;
      std::set<std::string> pf;
      for (auto const& k : sim::policy_valued_options()) {
        if (o.count(k) != 0) po[k] = o[k];
      }
      for (auto const& k : sim::policy_flag_options()) {
        if (flags.count(k) != 0) pf.insert(k);
      }
      try {
        sim::apply_policy_options(po, pf, cfg);
      } catch (std::invalid_argument const& e) {
        throw usage_error(e.what());
      }
    }

    std::vector<std::string> algos;
    if (o.count("compare")) {
      if (o.count("algorithm")) throw usage_error("--algorithm and --compare exclude each other");
      algos = split(o["compare"], ',');
      if (algos.empty()) throw usage_error("--compare needs a list of algorithms");
    } else {
      algos.push_back(o.count("algorithm") ? o["algorithm"] : "placer");
    }
    // Solver algorithms by their canonical names; FGD-paper baselines as given.
    std::vector<algorithm> parsed;
    std::vector<std::string> labels;
    for (auto const& a : algos) {
      if (sim::is_baseline_policy(a)) {
        parsed.push_back(algorithm::first_fit);  // unused: the baseline's solve_fn places the jobs
        labels.push_back(a);
        continue;
      }
      try {
        parsed.push_back(sim::parse_algorithm(a));
      } catch (std::exception const& e) {
        std::string names;
        for (auto const& n : sim::baseline_policy_names()) names += (names.empty() ? "" : ", ") + n;
        throw usage_error(std::string(e.what()) + "; or a baseline: " + names);
      }
      labels.emplace_back(sim::algorithm_name(parsed.back()));
    }

    sim::workload const w = sim::load_workload(wo);
    if (flags.count("quiet") == 0) std::cerr << "workload " << w.name << ": " << w.description << "\n";

    std::ostringstream cj;
    cj << "{\"trace\": " << sim::json_quote(wo.trace) << ", \"description\": " << sim::json_quote(w.description)
       << ", \"interval_s\": " << cfg.interval << ", \"on_event\": " << (cfg.on_event ? "true" : "false")
       << ", \"nodes\": " << w.nodes.nodes.size() << ", \"limit\": " << wo.limit << ", \"horizon_s\": " << wo.horizon
       << ", \"estimate_noise\": " << wo.estimate_noise << ", \"seed\": " << wo.seed
       << ", \"solver\": " << sim::json_quote(o.count("endpoint") ? "service " + o["endpoint"] : "in-process")
       << ", \"policies\": " << sim::json_quote(sim::policy_label(cfg.queue))
       << ", \"backfill\": " << sim::json_quote(sim::backfill_name(cfg.queue.backfill))
       << ", \"preemption\": " << (cfg.queue.preemption ? "true" : "false")
       << ", \"loaning\": " << (cfg.queue.loaning ? "true" : "false")
       << ", \"elastic\": " << (cfg.queue.elastic ? "true" : "false")
       << ", \"delay_scheduling\": " << (cfg.queue.delay_scheduling ? "true" : "false")
       << ", \"network_preemption\": " << (cfg.queue.network_preemption ? "true" : "false")
       << ", \"checkpoint_interval_s\": " << cfg.checkpoint_interval
       << ", \"network_slowdown\": " << (cfg.network_slowdown ? "true" : "false")
       << ", \"repack\": " << (cfg.repack ? "true" : "false") << ", \"algorithms\": [";
    for (std::size_t i = 0; i < algos.size(); ++i) cj << (i ? ", " : "") << sim::json_quote(labels[i]);
    cj << "]}";

    std::vector<sim::sim_result> results;
    std::vector<sim::sim_summary> sums;
    std::unique_ptr<solver> s;
    std::unique_ptr<client> cl;
    sim::solve_fn remote;
    if (o.count("endpoint")) {
      client_options co = tools::client_connection(args, 5000);
      cl = std::make_unique<client>(co);
      remote = [&cl](round_input const& in) {
        // The simulator moves the epoch every round: the client sends the
        // nodes and jobs that changed (cluster and job deltas).
        service::decoded_reply r = cl->solve_incremental(in);
        if (r.code != wire::ErrorCode::Ok) {
          throw std::runtime_error(std::string("service error ") + service::error_code_name(r.code) + ": " + r.message);
        }
        return std::move(r.result);
      };
    } else {
      s = std::make_unique<solver>(kernels::select_backend(o.count("backend") ? o["backend"] : "auto"));
    }
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      cfg.algo = parsed[i];
      cfg.label = labels[i];
      if (flags.count("quiet") == 0 && parsed.size() > 1) std::cerr << "running " << labels[i] << "...\n";
      // A fresh solve function per run: in_process owns the run's queue memory.
      sim::solve_fn const solve = sim::is_baseline_policy(labels[i]) ? sim::baseline_solver(labels[i], wo.seed)
                                  : remote ? remote
                                           : sim::in_process(*s);
      results.push_back(sim::run_simulation(w, cfg, solve));
      sums.push_back(sim::summarize(results.back()));
    }
    if (flags.count("quiet") == 0) std::cout << sim::summary_table(sums);
    if (o.count("out")) {
      sim::write_outputs(o["out"], results, sums, cj.str());
      if (flags.count("quiet") == 0) std::cerr << "wrote " << o["out"] << "/summary.json and plots\n";
    }
    return 0;
  } catch (usage_error const& e) {
    std::cerr << "placer simulate: " << e.what() << "\n\n" << usage_text;
    return 2;
  } catch (std::exception const& e) {
    std::cerr << "placer simulate: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace placer::tools
