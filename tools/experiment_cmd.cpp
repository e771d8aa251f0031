// `placer experiment fgd`: the FGD (ATC'23) experiment on the openb traces
// beside the published medians (docs/fgd-experiment.md).
// `placer experiment policies`: the cross-round policies (backfill,
// preemption, loaning, elastic, delay scheduling) one at a time and all
// together against FIFO and kube-style baselines, on an ITP trace and on the
// mixed training + inference workload (docs/simulator.md).
#include "cli.hpp"
#include "commands.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/sim/fgd.hpp>
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/sim_workloads.hpp>
#include <placer/sim/simulator.hpp>
#include <placer/sim/svg_plot.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace placer::tools {

namespace {

namespace fs = std::filesystem;
namespace fgd = placer::sim::fgd;

char const* const usage =
    "usage: placer experiment fgd --workload NAME|PATH [--all] [--seeds 42-51] [--policies LIST]\n"
    "                             [--batch N] [--json] [--plot FILE.svg] [--data DIR] [--jobs N]\n"
    "  --workload  default, cpu050, ... (openb_pod_list_NAME.csv under DIR/alibaba-openb-v2023) or a pod CSV\n"
    "  --all       the 16 workloads with published results\n"
    "  --seeds     A-B or A,B,C (default 42-51)\n"
    "  --policies  comma list of Random,DotProd,GpuClustering,GpuPacking,BestFit,FGD,Placer,PlacerBatch\n"
    "              (default: the first seven; --batch adds PlacerBatch)\n"
    "  --batch     pods per solver round for PlacerBatch (default 64)\n"
    "  --idle      also what the GPUs left idle at the end are (the JSON always has it): free milli\n"
    "              where a pod shape of the workload fits now, where one fits but the node's CPU or\n"
    "              memory does not, where only another GPU model's shape fits, where no shape is so small\n"
    "  --data      shared data directory (default: ../shared/data next to the repository)\n"
    "  --jobs      worker threads (default: hardware threads)\n";



std::vector<std::uint64_t> parse_seeds(std::string const& s) {
  std::vector<std::uint64_t> out;
  auto seed = [&](std::string const& text) {
    std::map<std::string, std::string> const one{{"seeds", text}};
    return static_cast<std::uint64_t>(integer_option(one, "seeds", 0));
  };
  for (auto const& part : split(s, ',')) {
    auto const dash = part.find('-');
    if (dash != std::string::npos && dash > 0) {
      auto const a = seed(part.substr(0, dash));
      auto const b = seed(part.substr(dash + 1));
      if (b < a) throw usage_error("--seeds range " + part + " is empty");
      for (auto x = a; x <= b; ++x) out.push_back(x);
    } else {
      out.push_back(seed(part));
    }
  }
  if (out.empty()) throw usage_error("--seeds gives no seed");
  return out;
}


std::string json_num(double v, int decimals = 2) {
  if (std::isnan(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

}  // namespace

int cmd_experiment_policies(int argc, char** argv);

int cmd_experiment(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[2]) == "policies") return cmd_experiment_policies(argc, argv);
  if (argc >= 3 && std::string(argv[2]) == "tenants") return cmd_experiment_tenants(argc, argv);
  if (argc >= 3 && std::string(argv[2]) == "rounds") return cmd_experiment_rounds(argc, argv);
  try {
    if (argc < 3 || std::string(argv[2]) != "fgd")
      throw usage_error("expected 'placer experiment fgd|policies|tenants|rounds ...'");
    std::set<std::string> const valued{"workload", "seeds", "plot", "policies", "batch", "data", "jobs"};
    std::set<std::string> const boolean{"all", "json", "idle", "help"};
    auto const args = parse_cli(argc, argv, 3, valued, boolean, "experiment fgd");
    auto opts = args.opts;
    auto const& flags = args.flags;
    if (flags.count("help") != 0) {
      std::fputs(usage, stdout);
      return 0;
    }
    bool const json = flags.count("json") != 0;
    bool const idle = flags.count("idle") != 0;
    fs::path const data = shared_data_dir(argv[0], opts.count("data") != 0 ? opts["data"] : "");
    fs::path const openb = data / "alibaba-openb-v2023";
    fs::path const node_csv = openb / "openb_node_list_gpu_node.csv";
    fs::path const published_csv = data / "fgd-expected-results" / "analysis_allo_discrete.csv";

    // Workloads: (display name, pod CSV).
    std::vector<std::pair<std::string, fs::path>> workloads;
    if (flags.count("all") != 0) {
      for (auto const& w : fgd::published_workloads()) workloads.emplace_back(w, openb / ("openb_pod_list_" + w + ".csv"));
    } else {
      if (opts.count("workload") == 0) throw usage_error("--workload NAME|PATH or --all is required");
      std::string const w = opts["workload"];
      if (fs::is_regular_file(w)) {
        std::string name = fs::path(w).stem().string();
        if (name.rfind("openb_pod_list_", 0) == 0) name = name.substr(15);
        workloads.emplace_back(name, fs::path(w));
      } else {
        workloads.emplace_back(w, openb / ("openb_pod_list_" + w + ".csv"));
      }
    }
    std::vector<std::uint64_t> const seeds = parse_seeds(opts.count("seeds") != 0 ? opts["seeds"] : "42-51");
    std::vector<fgd::policy> pols;
    if (opts.count("policies") != 0) {
      for (auto const& s : split(opts["policies"], ',')) pols.push_back(fgd::parse_policy(s));
    } else {
      pols = fgd::default_policies();
    }
    std::int32_t batch = 64;
    if (opts.count("batch") != 0) {
      batch = static_cast<std::int32_t>(integer_option(opts, "batch", batch));
      if (batch < 1) throw usage_error("--batch must be >= 1");
      if (std::find(pols.begin(), pols.end(), fgd::policy::placer_batch) == pols.end()) {
        pols.push_back(fgd::policy::placer_batch);
      }
    }
    if (pols.empty()) throw usage_error("--policies gives no policy");
    unsigned jobs = std::max(1U, std::thread::hardware_concurrency());
    if (opts.count("jobs") != 0) jobs = static_cast<unsigned>(std::max<long long>(1, integer_option(opts, "jobs", 1)));

    std::map<std::pair<std::string, std::string>, std::vector<double>> published;
    if (fs::is_regular_file(published_csv)) {
      published = fgd::load_published(published_csv.string());
    } else {
      std::fprintf(stderr, "placer experiment: %s not found; published medians left out\n", published_csv.c_str());
    }

    auto const t_all = std::chrono::steady_clock::now();
    for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
      auto const& [wname, pod_csv] = workloads[wi];
      fgd::workload const w = fgd::load_workload(node_csv.string(), pod_csv.string(), wname);
      if (!json && wi == 0) {  // after the first workload loaded: a bad file gets its error alone
        std::printf("FGD experiment (ATC'23 protocol): GPU allocation ratio (%%) at 130%% arrived, median over %zu "
                    "seed(s)\n",
                    seeds.size());
        std::printf("%-12s %-13s %6s %9s %9s %7s %8s  %s\n", "workload", "policy", "seeds", "ours", "published",
                    "diff", "time_s", "vs our FGD, same seeds (mean +-s.e., seeds at or above)");
      }
      // All (policy, seed) runs of this workload, spread over worker threads.
      std::size_t const n_runs = pols.size() * seeds.size();
      std::vector<fgd::run_result> results(n_runs);
      auto options = [&](std::size_t k) {
        fgd::run_options o;
        o.pol = pols[k / seeds.size()];
        o.seed = seeds[k % seeds.size()];
        o.batch = batch;
        return o;
      };
      run_parallel(
          n_runs, jobs, [&](std::size_t k, unsigned) { results[k] = fgd::run(w, options(k)); },
          [&](std::size_t k, std::size_t d) {
            std::fprintf(stderr, "[fgd] %s %s seed %llu (%zu/%zu) alloc@130 %.2f in %.1f s\n", wname.c_str(),
                         fgd::policy_name(options(k).pol).c_str(), static_cast<unsigned long long>(options(k).seed), d,
                         n_runs, results[k].alloc_at_130, results[k].seconds);
          });

      sim::line_plot plot;
      plot.title = "GPU allocation, workload " + wname + " (mean over seeds)";
      plot.x_label = "arrived GPU demand (%)";
      plot.y_label = "GPU allocation ratio (%)";
      auto seed_values = [&](std::size_t pi) {
        std::vector<double> v;
        for (std::size_t si = 0; si < seeds.size(); ++si) v.push_back(results[pi * seeds.size() + si].alloc_at_130);
        return v;
      };
      // Every other policy against our FGD on the same seeds (when FGD ran).
      auto const fgd_at = std::find(pols.begin(), pols.end(), fgd::policy::fgd);
      std::vector<double> const fgd_seeds =
          fgd_at == pols.end() ? std::vector<double>{} : seed_values(static_cast<std::size_t>(fgd_at - pols.begin()));
      for (std::size_t pi = 0; pi < pols.size(); ++pi) {
        auto const pol = pols[pi];
        std::optional<fgd::paired_difference> vs_fgd;
        if (!fgd_seeds.empty() && pol != fgd::policy::fgd) vs_fgd = fgd::paired(seed_values(pi), fgd_seeds);
        std::vector<double> per_seed;
        double secs = 0;
        std::vector<double> mean(131, 0.0);
        std::vector<int> cnt(131, 0);
        for (std::size_t si = 0; si < seeds.size(); ++si) {
          auto const& r = results[pi * seeds.size() + si];
          per_seed.push_back(r.alloc_at_130);
          secs += r.seconds;
          for (std::size_t c = 0; c < r.columns.size() && c < 131; ++c) {
            if (!std::isnan(r.columns[c])) {
              mean[c] += r.columns[c];
              ++cnt[c];
            }
          }
        }
        double const ours = fgd::median(per_seed);
        std::array<double, fgd::idle_reasons> idle_pct{};
        for (std::size_t si = 0; si < seeds.size(); ++si) {
          auto const& r = results[pi * seeds.size() + si];
          for (int k = 0; k < fgd::idle_reasons; ++k) {
            idle_pct[static_cast<std::size_t>(k)] += 100.0 * static_cast<double>(r.idle[static_cast<std::size_t>(k)]) /
                                                     static_cast<double>(w.capacity_milli) / static_cast<double>(seeds.size());
          }
        }
        double pub = std::nan("");
        auto const it = published.find({wname, fgd::published_name(pol)});
        if (it != published.end()) pub = fgd::median(it->second);
        if (json) {
          std::string ps;
          for (std::size_t si = 0; si < seeds.size(); ++si) {
            ps += (si ? "," : "") + std::string("{\"seed\":") + std::to_string(seeds[si]) +
                  ",\"alloc_ratio_at_130\":" + json_num(per_seed[si]) + "}";
          }
          std::string sl;
          for (std::size_t si = 0; si < seeds.size(); ++si) sl += (si ? "," : "") + std::to_string(seeds[si]);
          std::string extra;
          if (pol == fgd::policy::placer_batch) extra += ",\"batch\":" + std::to_string(batch);
          if (vs_fgd) {
            extra += ",\"vs_fgd_same_seeds\":{\"mean\":" + json_num(vs_fgd->mean, 3) +
                     ",\"standard_error\":" + json_num(vs_fgd->standard_error, 3) +
                     ",\"at_or_above\":" + std::to_string(vs_fgd->at_or_above) + "}";
          }
          extra += ",\"idle_at_end_pct\":{";
          for (int k = 0; k < fgd::idle_reasons; ++k) {
            extra += (k ? "," : "") + sim::json_quote(fgd::idle_reason_names[k]) + ":" + json_num(idle_pct[k], 3);
          }
          extra += "}";
          std::printf("{\"workload\":\"%s\",\"policy\":\"%s\",\"alloc_ratio_at_130_median\":%s,\"published_median\":%s,"
                      "\"seeds\":[%s],\"per_seed\":[%s],\"seconds\":%.2f%s}\n",
                      wname.c_str(), fgd::policy_name(pol).c_str(), json_num(ours).c_str(), json_num(pub).c_str(),
                      sl.c_str(), ps.c_str(), secs, extra.c_str());
        } else {
          char diff[16] = "-";
          char pubs[16] = "-";
          if (!std::isnan(pub)) {
            std::snprintf(pubs, sizeof pubs, "%.2f", pub);
            std::snprintf(diff, sizeof diff, "%+.2f", ours - pub);
          }
          std::string const pname =
              pol == fgd::policy::placer_batch ? fgd::policy_name(pol) + "/" + std::to_string(batch) : fgd::policy_name(pol);
          char vs[48] = "-";
          if (vs_fgd) {
            std::snprintf(vs, sizeof vs, "%+.3f +-%.3f %zu/%zu", vs_fgd->mean, vs_fgd->standard_error,
                          vs_fgd->at_or_above, vs_fgd->n);
          }
          std::printf("%-12s %-13s %6zu %9.2f %9s %7s %8.1f  %s\n", wname.c_str(), pname.c_str(), seeds.size(), ours,
                      pubs, diff, secs, vs);
          if (idle) {
            std::printf("%-12s %-13s idle at the end, %% of GPUs (mean over seeds):", "", "");
            for (int k = 0; k < fgd::idle_reasons; ++k) std::printf(" %s %.2f;", fgd::idle_reason_names[k], idle_pct[k]);
            std::printf("\n");
          }
        }
        std::fflush(stdout);
        sim::plot_series s;
        s.label = fgd::policy_name(pol);
        for (int c = 0; c <= 130; ++c) {
          if (cnt[c] == 0) continue;
          s.x.push_back(c);
          s.y.push_back(mean[c] / cnt[c]);
        }
        plot.series.push_back(std::move(s));
      }
      if (wi == 0 && opts.count("plot") != 0) {
        sim::write_svg(plot, opts["plot"]);
        std::fprintf(stderr, "[fgd] wrote %s\n", opts["plot"].c_str());
      }
    }
    std::fprintf(stderr, "[fgd] total %.1f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count());
    return 0;
  } catch (...) {
    return verb_failed("experiment", usage);
  }
}

// ---------------------------------------------------------------- policies

namespace {

char const* const policies_usage =
    "usage: placer experiment policies [--trace T] [--mixed M] [--clusters LIST|all] [--loads LIST] [--limit N]\n"
    "                                  [--nodes N] [--inference-nodes N] [--out DIR] [--json] [--only LIST]\n"
    "                                  [--jobs N] [--data DIR] [--interval S] [--checkpoint-interval S]\n"
    "                                  [--preempt-max-lost S] [--seed S | --seeds A-B] [--backend B]\n"
    "  --trace     ITP training workload (default itp:cluster02; 'none' skips it)\n"
    "  --mixed     training + inference workload (default mixed:cluster02; 'none' skips it)\n"
    "  --clusters  ITP clusters instead (e.g. 01,02 or all: every shared cluster with 1,000 jobs or more),\n"
    "              each as itp:clusterNN and mixed:clusterNN (--trace none / --mixed none drop one kind)\n"
    "  --loads     cluster sizes as percentages of each trace's peak demand (e.g. 25,35,50; default 50),\n"
    "              (named NAME@peakL%), raised where the largest job would not fit; with several workloads an across-workload\n"
    "              summary (below). --load-basis offered: percentages of offered load instead (NAME@loadL%: the jobs'\n"
    "              GPU time over the cluster's, first to last submission; traces with one burst have a\n"
    "              peak far above their mean)\n"
    "  across:     each run's JWTD mean and p90 against placer's (no policy), median and worst\n"
    "  --limit     first N training jobs of each trace (default 6000: all 5,778 of cluster02; 0 = all)\n"
    "  --nodes     training nodes (default: half the trace's default size, 24 for cluster02, so\n"
    "              that jobs queue); --inference-nodes (default: half the training nodes, whole leaves)\n"
    "  --only      comma list of run labels (fifo,kube-least,placer,pack,pack+age,strict,+backfill,\n"
    "              +preemption,+loaning,+elastic,+delay,all). fifo is the first-fit baseline; placer and the\n"
    "              +policies keep submission order within a priority (queue order fifo), pack is placer\n"
    "              largest first, pack+age that with aging, strict that with each queue stopped at its\n"
    "              first job that cannot start; a table by job size compares them\n"
    "  --jobs      runs in parallel (default 1)\n"
    "  --seeds     A-B or A,B,C: each workload once per seed (the jobs' drawn priority, sensitivity and\n"
    "              elastic range; named NAME#sK); across: a workload's ratio is of its figures summed over seeds\n"
    "  --preempt-max-lost  preemption takes victims within S s of their last checkpoint (120; -1: any)\n"
    "  --out       summary.json, and per workload its summary.json, CSVs, jwtd_cdf.svg, jct_cdf.svg, gar.svg\n"
    "  --json      one JSON object per run on stdout instead of the tables\n"
    "A run that fails is reported (FAILED row, \"status\":\"failed\") and the others go on; exit 1 then.\n";

/// One configuration of the experiment.
struct variant {
  std::string label;
  algorithm algo = algorithm::placer;
  queue_policy queue;
  bool mixed_only = false;
  queue_order order = queue_order::fifo;
  aging age{};
};

std::vector<variant> policy_variants() {
  queue_policy none;
  none.loaning = false;  // "no cross-round policy": pools stay apart
  std::vector<variant> v;
  v.push_back({"fifo", algorithm::first_fit, none, false});
  v.push_back({"kube-least", algorithm::kube_least_allocated, none, false});
  v.push_back({"placer", algorithm::placer, none, false});
  // Queue order (docs/policies.md, "Queue order"): placer is in submission
  // order (fifo); pack is largest first; pack+age ages a point a minute.
  v.push_back({"pack", algorithm::placer, none, false, queue_order::pack});
  v.push_back({"pack+age", algorithm::placer, none, false, queue_order::pack, {.weight = 7 * 24 * 60}});
  v.push_back({"strict", algorithm::placer, none, false, queue_order::strict});
  variant x{"+backfill", algorithm::placer, none, false};
  x.queue.backfill = backfill_mode::easy;
  v.push_back(x);
  x = {"+preemption", algorithm::placer, none, false};
  x.queue.preemption = true;
  v.push_back(x);
  x = {"+loaning", algorithm::placer, none, true};
  x.queue.loaning = true;
  v.push_back(x);
  x = {"+elastic", algorithm::placer, none, false};
  x.queue.elastic = true;
  v.push_back(x);
  x = {"+delay", algorithm::placer, none, false};
  x.queue.delay_scheduling = true;
  x.queue.network_preemption = true;
  v.push_back(x);
  x = {"all", algorithm::placer, none, false};
  x.queue.backfill = backfill_mode::easy;
  x.queue.preemption = true;
  x.queue.loaning = true;
  x.queue.elastic = true;
  x.queue.delay_scheduling = true;
  x.queue.network_preemption = true;
  v.push_back(x);
  return v;
}

struct policy_run : timed_sim {
  std::size_t workload = 0;
  variant var;
};

std::string file_part(std::string s) {
  for (auto& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return s;
}

std::string run_json(policy_run const& r, std::string const& workload) {
  std::string o = "{\"workload\":" + sim::json_quote(workload) + ",\"run\":" + sim::json_quote(r.var.label) +
                  ",\"algorithm\":" + sim::json_quote(algorithm_name(r.var.algo)) +
                  ",\"policy\":" + sim::json_quote(sim::policy_label(r.var.queue)) +
                  ",\"order\":" + sim::json_quote(queue_order_name(r.var.order)) +
                  ",\"age_weight\":" + std::to_string(r.var.age.weight);
  if (!r.ok) return o + ",\"status\":\"failed\",\"error\":" + sim::json_quote(r.error) + "}";
  auto const& s = r.summary;
  char b[1536];
  std::snprintf(b, sizeof b,
                ",\"status\":\"ok\",\"jobs\":%lld,\"finished\":%lld,\"jwtd_mean\":%.1f,\"jwtd_p50\":%.0f,\"jwtd_p90\":%.0f,"
                "\"jwtd_p99\":%.0f,\"jwtd_gpu_weighted\":%.1f,\"jct_mean\":%.1f,\"jct_p50\":%.0f,\"makespan\":%lld,\"gar\":%.5f,\"sor\":%.5f,"
                "\"gfr\":%.5f,\"preemptions\":%lld,\"lost_gpu_hours\":%.2f,\"reclaimed_nodes\":%lld,"
                "\"scale_outs\":%lld,\"scale_ins\":%lld,\"reservations\":%lld,\"deferred_job_rounds\":%lld,"
                "\"slowdown_multi_node\":%.4f,\"jwtd_inference_p99\":%.0f,\"jwtd_training_p90\":%.0f,"
                "\"jwtd_training_p99\":%.0f,\"jct_training_mean\":%.1f,"
                "\"loaned_gpus_mean\":%.2f,\"rounds\":%lld,\"seconds\":%.2f}",
                static_cast<long long>(s.jobs), static_cast<long long>(s.finished), s.wait.mean, s.wait.p50, s.wait.p90, s.wait.p99,
                s.wait_gpu_weighted, s.jct.mean, s.jct.p50, static_cast<long long>(s.makespan), s.gar_time, s.sor, s.gfr_time,
                static_cast<long long>(s.preemptions), s.lost_gpu_hours, static_cast<long long>(s.reclaimed_nodes),
                static_cast<long long>(s.scale_outs), static_cast<long long>(s.scale_ins),
                static_cast<long long>(s.reservations), static_cast<long long>(s.deferred_job_rounds),
                s.slowdown_multi_node, s.wait_inference.p99, s.wait_training.p90, s.wait_training.p99,
                s.jct_training.mean, s.loaned_gpus_mean,
                static_cast<long long>(s.rounds), r.seconds);
  return o + b;
}

void print_table(std::string const& name, std::string const& description, std::vector<policy_run const*> const& runs,
                 bool mixed) {
  std::printf("\n%s: %s\n", name.c_str(), description.c_str());
  std::printf("%-12s %6s %6s %7s %7s %7s %8s %6s %6s %6s %6s %6s %6s %7s %6s", "run", "JWTDp50", "p90", "p99",
              "JCTmean", "JCTp50", "makespan", "GAR%", "SOR%", "GFR%", "preem", "lostGh", "reclm", "scale", "slowdn");
  if (mixed) std::printf(" %9s %9s %9s %9s %6s", "infJWTD99", "trJWTD90", "trJWTD99", "trJCTmean", "loanG");
  std::printf(" %6s\n", "wall_s");
  for (auto const* r : runs) {
    if (!r->ok) {
      std::printf("%-12s FAILED: %s\n", r->var.label.c_str(), r->error.c_str());
      continue;
    }
    auto const& s = r->summary;
    std::printf("%-12s %6.0f %6.0f %7.0f %7.0f %7.0f %8lld %6.2f %6.2f %6.2f %6lld %6.1f %6lld %3lld/%-3lld %6.3f",
                r->var.label.c_str(), s.wait.p50, s.wait.p90, s.wait.p99, s.jct.mean, s.jct.p50,
                static_cast<long long>(s.makespan), 100 * s.gar_time, 100 * s.sor, 100 * s.gfr_time,
                static_cast<long long>(s.preemptions), s.lost_gpu_hours, static_cast<long long>(s.reclaimed_nodes),
                static_cast<long long>(s.scale_outs), static_cast<long long>(s.scale_ins), s.slowdown_multi_node);
    if (mixed) {
      std::printf(" %9.0f %9.0f %9.0f %9.0f %6.1f", s.wait_inference.p99, s.wait_training.p90, s.wait_training.p99,
                  s.jct_training.mean, s.loaned_gpus_mean);
    }
    std::printf(" %6.1f\n", r->seconds);
  }
  std::fflush(stdout);
}

/// Queue order by job size: for the runs in submission order (placer,
/// strict) and largest first (pack, pack+age), each size class's mean and
/// p99 wait (a job that never started waits to the window's end), the GPU
/// allocation and the jobs started per round.
void print_order_table(std::vector<policy_run const*> const& runs) {
  static char const* const classes[] = {"1 GPU", "2-8 GPUs", "multi-node"};
  bool any = false;
  for (auto const* r : runs) any = any || (r->ok && (r->var.order != queue_order::fifo || r->var.label == "placer"));
  if (!any) return;
  std::printf("queue order by job size: wait mean / p99 in s (jobs, never started)\n");
  std::printf("%-10s %-28s %-28s %-28s %6s %9s\n", "run", classes[0], classes[1], classes[2], "GAR%", "starts/rd");
  for (auto const* r : runs) {
    if (!r->ok || (r->var.order == queue_order::fifo && r->var.label != "placer")) continue;
    std::vector<double> waits[3];
    std::int64_t never[3] = {0, 0, 0};
    for (auto const& j : r->result.jobs) {
      int const c = j.replicas > 1 ? 2 : j.gpu_milli <= 1000 ? 0 : 1;
      waits[c].push_back(static_cast<double>((j.start < 0 ? r->result.t_end : j.start) - j.submit));
      never[c] += j.start < 0 ? 1 : 0;
    }
    std::printf("%-10s", r->var.label.c_str());
    for (int c = 0; c < 3; ++c) {
      auto& w = waits[c];
      std::sort(w.begin(), w.end());
      double mean = 0;
      for (auto x : w) mean += x;
      mean = w.empty() ? 0 : mean / static_cast<double>(w.size());
      double const p99 = w.empty() ? 0 : w[std::min(w.size() - 1, static_cast<std::size_t>(0.99 * static_cast<double>(w.size())))];
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.0f / %.0f (%zu, %lld)", mean, p99, w.size(), static_cast<long long>(never[c]));
      std::printf(" %-28s", cell);
    }
    std::printf(" %6.2f %9.3f\n", 100 * r->summary.gar_time,
                r->result.rounds > 0 ? static_cast<double>(r->result.placements) / static_cast<double>(r->result.rounds) : 0.0);
  }
  std::fflush(stdout);
}

/// 8-GPU nodes the training jobs keep busy on average: their GPU time over
/// the time from the first submission to the last.
double offered_nodes(sim::workload const& w) {
  double work = 0;
  for (std::size_t i = 0; i < w.jobs.size(); ++i) {
    if (w.jobs[i].kind == job_kind::inference) continue;
    work += static_cast<double>(w.jobs[i].per_replica.gpus) * w.jobs[i].replicas * static_cast<double>(w.durations[i]);
  }
  double const span = w.jobs.empty() ? 0 : static_cast<double>(w.jobs.back().submit_time - w.jobs.front().submit_time);
  return span > 0 ? work / span / 8.0 : 0.0;
}

/// One run's JWTD mean and p90 against the no-policy run ("placer") of the
/// same workload, over a family of workloads (itp or mixed).
struct across_row {
  std::string family, run;
  std::vector<double> mean, p90, gpu;  ///< ratios (per-job mean, p90, GPU-weighted mean), one per workload
  std::vector<std::string> where;
};

double ratio(double v, double base) { return base > 0 ? v / base : (v > 0 ? 1e9 : 1.0); }

/// A workload's name without its seed ("itp:cluster02@load70%#s2" ->
/// "itp:cluster02@load70%"): the runs of every seed count as one workload.
std::string without_seed(std::string const& name) { return name.substr(0, name.find('#')); }

/// With several seeds (--seeds), a workload's ratio is that of the run's
/// figure summed over its seeds to the no-policy run's over the same seeds:
/// the expected wait under the policy against without it, where one seed's
/// run alone can swing either way (docs/policies.md, "One run is one draw").
std::vector<across_row> across_workloads(std::vector<policy_run> const& runs, std::vector<sim::workload> const& ws) {
  struct sums {
    double mean = 0, base_mean = 0, p90 = 0, base_p90 = 0, gpu = 0, base_gpu = 0;
  };
  std::vector<std::pair<across_row, std::vector<sums>>> rows;  // per (family, run); per workload stem
  for (auto const& r : runs) {
    if (!r.ok || r.var.label == "placer") continue;
    auto const base = std::find_if(runs.begin(), runs.end(), [&](policy_run const& b) {
      return b.ok && b.workload == r.workload && b.var.label == "placer";
    });
    if (base == runs.end()) continue;
    std::string const stem = without_seed(ws[r.workload].name);
    std::string const family = stem.substr(0, stem.find(':'));
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](auto const& a) { return a.first.family == family && a.first.run == r.var.label; });
    if (it == rows.end()) {
      rows.push_back({{family, r.var.label, {}, {}, {}, {}}, {}});
      it = rows.end() - 1;
    }
    auto& where = it->first.where;
    auto const k = static_cast<std::size_t>(std::find(where.begin(), where.end(), stem) - where.begin());
    if (k == where.size()) {
      where.push_back(stem);
      it->second.emplace_back();
    }
    auto& s = it->second[k];
    s.mean += r.summary.wait.mean;
    s.base_mean += base->summary.wait.mean;
    s.p90 += r.summary.wait.p90;
    s.base_p90 += base->summary.wait.p90;
    s.gpu += r.summary.wait_gpu_weighted;
    s.base_gpu += base->summary.wait_gpu_weighted;
  }
  std::vector<across_row> out;
  for (auto& [row, per] : rows) {
    for (auto const& s : per) {
      row.mean.push_back(ratio(s.mean, s.base_mean));
      row.p90.push_back(ratio(s.p90, s.base_p90));
      row.gpu.push_back(ratio(s.gpu, s.base_gpu));
    }
    out.push_back(std::move(row));
  }
  return out;
}

/// Median and worst (largest) of v, and where the worst is.
std::string median_worst(std::vector<double> const& v, std::vector<std::string> const& where, bool json) {
  auto const worst = static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
  double const med = sim::percentile(v, 50);
  char b[256];
  if (json) {
    std::snprintf(b, sizeof b, "{\"median\":%.3f,\"worst\":%.3f,\"worst_at\":%s}", med, v[worst],
                  sim::json_quote(where[worst]).c_str());
  } else {
    std::snprintf(b, sizeof b, "%6.2f %6.2f %-26s", med, v[worst], where[worst].c_str());
  }
  return b;
}

void print_across(std::vector<across_row> const& rows) {
  for (std::string const family : {"itp", "mixed"}) {
    bool header = false;
    for (auto const& a : rows) {
      if (a.family != family) continue;
      if (!header) {
        std::printf("\nacross %zu %s workloads: JWTD against placer (no policy), ratio (lower is better)\n",
                    a.mean.size(), family.c_str());
        std::printf("%-12s %6s %6s %-26s %6s %6s %-26s %6s %6s %-26s\n", "run", "mean", "worst",
                    "(mean: median, worst, where)", "p90", "worst", "(p90: median, worst, where)", "GPU-w", "worst",
                    "(GPU-weighted mean)");
        header = true;
      }
      std::printf("%-12s %s %s %s\n", a.run.c_str(), median_worst(a.mean, a.where, false).c_str(),
                  median_worst(a.p90, a.where, false).c_str(), median_worst(a.gpu, a.where, false).c_str());
    }
  }
  std::fflush(stdout);
}

std::string across_json(std::vector<across_row> const& rows) {
  std::string o = "[";
  for (std::size_t k = 0; k < rows.size(); ++k) {
    auto const& a = rows[k];
    o += (k ? ",\n" : "\n") + std::string("{\"family\":") + sim::json_quote(a.family) + ",\"run\":" +
         sim::json_quote(a.run) + ",\"workloads\":" + std::to_string(a.mean.size()) +
         ",\"jwtd_mean_ratio\":" + median_worst(a.mean, a.where, true) +
         ",\"jwtd_p90_ratio\":" + median_worst(a.p90, a.where, true) +
         ",\"jwtd_gpu_weighted_ratio\":" + median_worst(a.gpu, a.where, true) + "}";
  }
  return o + "\n]";
}

/// Per family: the distribution (CDF) over workloads of each run's JWTD
/// p90 ratio to no policy.
void write_across_plots(std::vector<across_row> const& rows, fs::path const& out) {
  for (std::string const family : {"itp", "mixed"}) {
    sim::line_plot p{"JWTD p90 against no policy, across " + family + " workloads", "ratio to placer (no policy)",
                     "fraction of workloads", {}};
    p.steps = true;
    p.log_x = true;
    for (auto const& a : rows) {
      if (a.family != family) continue;
      std::vector<double> v;
      for (auto x : a.p90) v.push_back(std::clamp(x, 1e-2, 1e2));
      p.series.push_back(sim::cdf(a.run, v));
    }
    if (!p.series.empty()) sim::write_svg(p, (out / ("across_" + family + "_p90.svg")).string());
  }
}

}  // namespace

int cmd_experiment_policies(int argc, char** argv) {
  try {
    std::set<std::string> const valued{"trace", "mixed", "limit", "nodes", "inference-nodes", "out", "only", "jobs",
                                       "data", "interval", "checkpoint-interval", "seed", "backend", "clusters",
                                       "loads", "load-basis", "preempt-max-lost", "seeds"};
    std::set<std::string> const boolean{"json", "help"};
    auto const args = parse_cli(argc, argv, 3, valued, boolean, "experiment policies");
    auto const& o = args.opts;
    if (args.flags.count("help") != 0) {
      std::fputs(policies_usage, stdout);
      return 0;
    }
    bool const json = args.flags.count("json") != 0;
    sim::workload_options base;
    base.data_dir = shared_data_dir(argv[0], args.get("data"));
    base.limit = static_cast<std::int32_t>(integer_option(o, "limit", 6000));
    base.nodes = static_cast<std::int32_t>(integer_option(o, "nodes", 0));
    base.inference_nodes = static_cast<std::int32_t>(integer_option(o, "inference-nodes", 0));
    base.seed = static_cast<std::uint64_t>(integer_option(o, "seed", 1));
    if (o.count("seeds") != 0 && o.count("seed") != 0) throw usage_error("--seed and --seeds exclude each other");
    std::vector<std::uint64_t> const seeds =
        o.count("seeds") != 0 ? parse_seeds(o.at("seeds")) : std::vector<std::uint64_t>{base.seed};
    sim::sim_config cfg0;
    cfg0.interval = integer_option(o, "interval", 60);
    if (cfg0.interval < 1) throw usage_error("--interval must be at least 1");
    cfg0.checkpoint_interval = integer_option(o, "checkpoint-interval", cfg0.checkpoint_interval);
    // Preemption's checkpoint window (-1: any victim, as before 2026-11-25).
    auto const max_lost = integer_option(o, "preempt-max-lost", queue_policy{}.preempt_max_lost_s);
    if (max_lost < -1) throw usage_error("--preempt-max-lost must be -1 (any victim) or at least 0");
    auto const jobs = static_cast<unsigned>(std::max<long long>(1, integer_option(o, "jobs", 1)));
    std::string const backend = args.get("backend", "auto");

    std::vector<std::string> names;
    if (o.count("clusters") != 0) {
      std::vector<std::string> clusters = split(o.at("clusters"));
      if (clusters == std::vector<std::string>{"all"}) clusters = {"01", "02", "03", "04", "05", "07", "08", "09"};
      bool const itp = args.get("trace", "") != "none", mixed = args.get("mixed", "") != "none";
      for (auto const& c : clusters) {
        std::string const name = "cluster" + std::string(c.size() == 1 ? "0" : "") + c;
        if (itp) names.push_back("itp:" + name);
        if (mixed) names.push_back("mixed:" + name);
      }
    } else {
      for (auto const& key : {"trace", "mixed"}) {
        std::string const t = args.get(key, key == std::string("trace") ? "itp:cluster02" : "mixed:cluster02");
        if (t != "none") names.push_back(t);
      }
    }
    if (names.empty()) throw usage_error("--trace none and --mixed none leave nothing to run");
    std::vector<long long> loads;
    for (auto const& l : split(args.get("loads", ""))) {
      char* end = nullptr;
      long long const v = std::strtoll(l.c_str(), &end, 10);
      if (end == l.c_str() || *end != '\0' || v < 1 || v > 400) throw usage_error("--loads: '" + l + "' is not a percentage in 1..400");
      loads.push_back(v);
    }
    if (!loads.empty() && base.nodes != 0) throw usage_error("--loads and --nodes exclude each other");
    if (loads.empty()) loads.push_back(0);  // 0: --nodes, or half the trace's size
    std::string const basis = args.get("load-basis", "peak");
    if (basis != "peak" && basis != "offered") throw usage_error("--load-basis: peak or offered, not '" + basis + "'");
    std::vector<variant> variants = policy_variants();
    if (o.count("only") != 0) {
      auto const want = split(o.at("only"), ',');
      std::vector<variant> keep;
      for (auto const& w : want) {
        auto it = std::find_if(variants.begin(), variants.end(), [&](variant const& v) { return v.label == w; });
        if (it == variants.end()) throw usage_error("--only: unknown run '" + w + "'");
        keep.push_back(*it);
      }
      variants = keep;
    }

    std::vector<sim::workload> workloads;
    std::vector<std::int32_t> training_nodes;
    for (auto const& n : names) {
      std::int32_t last_nodes = -1;
      for (auto const load : loads) {
        sim::workload_options wo = base;
        wo.trace = n;
        std::string raised;
        if (wo.nodes == 0) {
          // A share of the size the loader picks for the trace (its peak
          // demand; half by default): sized for the peak nothing queues and
          // no policy has work to do. Whole leaves, and room for the
          // largest job at its smallest.
          sim::workload const probe = sim::load_workload(wo);
          std::int32_t training = 0;
          for (auto const& nd : probe.nodes.nodes) training += nd.pool == pool_kind::inference ? 0 : 1;
          std::int64_t want = load == 0 ? (training + 1) / 2 : (training * load + 99) / 100;
          if (load != 0 && basis == "offered") want = static_cast<std::int64_t>(std::ceil(offered_nodes(probe) * 100.0 / load));
          std::int64_t largest = 0;
          for (auto const& j : probe.jobs) {
            std::int64_t const r = j.min_replicas > 0 ? std::min(j.min_replicas, j.replicas) : j.replicas;
            largest = std::max(largest, (static_cast<std::int64_t>(j.per_replica.gpus) * r + 7) / 8);
          }
          auto const leaf = static_cast<std::int64_t>(sim::sim_nodes_per_leaf);
          // Whole leaves at the default size; exactly the load asked for.
          std::int64_t nodes = load == 0 ? std::max(leaf, (want + leaf - 1) / leaf * leaf) : std::max<std::int64_t>(want, 1);
          if (nodes < largest) {
            nodes = largest;
            raised = " (raised from " + std::to_string(want) + " nodes for the largest job)";
          }
          wo.nodes = static_cast<std::int32_t>(nodes);
          if (wo.nodes == last_nodes) {  // the same cluster as the load before: counted once
            std::fprintf(stderr, "[policies] %s at %lld%%: %d nodes again, skipped\n", n.c_str(), load, wo.nodes);
            continue;
          }
          last_nodes = wo.nodes;
        }
        for (auto const seed : seeds) {
          wo.seed = seed;
          workloads.push_back(sim::load_workload(wo));
          auto& w = workloads.back();
          if (load != 0) w.name += "@" + std::string(basis == "peak" ? "peak" : "load") + std::to_string(load) + "%";
          if (seeds.size() > 1) w.name += "#s" + std::to_string(seed);
          char b[64];
          std::snprintf(b, sizeof b, "; offered load %.0f%%", 100 * offered_nodes(w) / wo.nodes);
          w.description += b + raised;
          training_nodes.push_back(wo.nodes);
          std::fprintf(stderr, "[policies] workload %s: %s\n", w.name.c_str(), w.description.c_str());
        }
      }
    }
    auto const is_mixed = [&](std::size_t wi) { return workloads[wi].name.rfind("mixed:", 0) == 0; };

    std::vector<policy_run> runs;
    for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
      for (auto const& v : variants) {
        if (v.mixed_only && !is_mixed(wi)) continue;
        policy_run r;
        r.workload = wi;
        r.var = v;
        runs.push_back(std::move(r));
      }
    }
    // Runs are independent (own solver, own queue memory); they share
    // only the read-only workloads.
    auto const t_all = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<solver>> solvers(jobs);
    run_parallel(
        runs.size(), jobs,
        [&](std::size_t k, unsigned wk) {
          auto& r = runs[k];
          sim::sim_config cfg = cfg0;
          cfg.algo = r.var.algo;
          cfg.queue = r.var.queue;
          cfg.queue.preempt_max_lost_s = max_lost;
          cfg.order = r.var.order;
          cfg.age = r.var.age;
          cfg.label = r.var.label;
          run_timed(r, workloads[r.workload], cfg, [&] {
            auto& sv = solvers[wk];
            if (!sv) sv = std::make_unique<solver>(kernels::select_backend(backend));
            return sim::in_process(*sv);
          });
        },
        [&](std::size_t k, std::size_t d) {
          auto const& r = runs[k];
          if (r.ok) {
            std::fprintf(stderr, "[policies] (%zu/%zu) %s %s: JWTD p90 %.0f s, JCT mean %.0f s, preemptions %lld in %.1f s\n",
                         d, runs.size(), workloads[r.workload].name.c_str(), r.var.label.c_str(), r.summary.wait.p90,
                         r.summary.jct.mean, static_cast<long long>(r.summary.preemptions), r.seconds);
          } else {
            std::fprintf(stderr, "[policies] (%zu/%zu) %s %s: FAILED after %.1f s: %s\n", d, runs.size(),
                         workloads[r.workload].name.c_str(), r.var.label.c_str(), r.seconds, r.error.c_str());
          }
        });

    for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
      std::vector<policy_run const*> rs;
      for (auto const& r : runs) {
        if (r.workload == wi) rs.push_back(&r);
      }
      if (json) {
        for (auto const* r : rs) std::printf("%s\n", run_json(*r, workloads[wi].name).c_str());
        std::fflush(stdout);
      } else {
        print_table(workloads[wi].name, workloads[wi].description, rs, is_mixed(wi));
        print_order_table(rs);
      }
    }
    auto const across = across_workloads(runs, workloads);
    if (workloads.size() > 1 && !json) print_across(across);

    std::size_t failed = 0;
    for (auto const& r : runs) failed += r.ok ? 0 : 1;
    if (o.count("out") != 0) {
      fs::path const out = o.at("out");
      std::error_code ec;
      fs::create_directories(out, ec);
      if (ec) throw std::runtime_error("cannot create " + out.string() + ": " + ec.message());
      std::string seed_list;
      for (auto const s : seeds) seed_list += (seed_list.empty() ? "" : ",") + std::to_string(s);
      std::string config = "{\"limit\": " + std::to_string(base.limit) + ", \"nodes\": " + std::to_string(base.nodes) +
                           ", \"inference_nodes\": " + std::to_string(base.inference_nodes) +
                           ", \"seeds\": [" + seed_list + "], \"interval_s\": " +
                           std::to_string(cfg0.interval) + ", \"checkpoint_interval_s\": " +
                           std::to_string(cfg0.checkpoint_interval) +
                           ", \"preempt_max_lost_s\": " + std::to_string(max_lost) + "}";
      std::string all = "{\n\"config\": " + config + ",\n\"runs\": [\n";
      for (std::size_t k = 0; k < runs.size(); ++k) {
        all += (k ? ",\n" : "") + run_json(runs[k], workloads[runs[k].workload].name);
      }
      all += "\n],\n\"workloads\": {";
      for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
        std::vector<sim::sim_result> res;
        std::vector<sim::sim_summary> sums;
        for (auto const& r : runs) {
          if (r.workload != wi || !r.ok) continue;
          res.push_back(r.result);
          sums.push_back(r.summary);
        }
        std::string const dir = (out / file_part(workloads[wi].name)).string();
        std::string const wcfg = "{\"workload\": " + sim::json_quote(workloads[wi].name) + ", \"description\": " +
                                 sim::json_quote(workloads[wi].description) + ", \"training_nodes\": " +
                                 std::to_string(training_nodes[wi]) + ", \"experiment\": " + config + "}";
        if (!res.empty()) sim::write_outputs(dir, res, sums, wcfg);
        all += (wi ? ",\n" : "\n") + sim::json_quote(workloads[wi].name) + ": " + sim::summary_json(sums, wcfg, false);
      }
      all += "},\n\"across\": " + across_json(across) + "\n}\n";
      if (workloads.size() > 1) write_across_plots(across, out);
      std::ofstream f(out / "summary.json");
      f << all;
      if (!f) throw std::runtime_error("cannot write " + (out / "summary.json").string());
      std::fprintf(stderr, "[policies] wrote %s/summary.json and per-workload plots\n", out.c_str());
    }
    std::fprintf(stderr, "[policies] %zu runs, %zu failed, total %.1f s\n", runs.size(), failed,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count());
    // Everything is reported and written; the status still says a run failed.
    return failed == 0 ? 0 : 1;
  } catch (...) {
    return verb_failed("experiment policies", policies_usage);
  }
}

}  // namespace placer::tools
