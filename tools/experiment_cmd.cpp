// `placer experiment fgd`: the FGD (ATC'23) experiment on the openb traces
// beside the published medians (docs/fgd-experiment.md).
#include "cli.hpp"
#include "commands.hpp"

#include <placer/sim/fgd.hpp>
#include <placer/sim/svg_plot.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
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
    "  --data      shared data directory (default: ../shared/data next to the repository)\n"
    "  --jobs      worker threads (default: hardware threads)\n";


std::vector<std::string> split(std::string const& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<std::uint64_t> parse_seeds(std::string const& s) {
  std::vector<std::uint64_t> out;
  for (auto const& part : split(s, ',')) {
    auto const dash = part.find('-');
    if (dash != std::string::npos && dash > 0) {
      auto const a = std::stoull(part.substr(0, dash));
      auto const b = std::stoull(part.substr(dash + 1));
      if (b < a) throw usage_error("--seeds range " + part + " is empty");
      for (auto x = a; x <= b; ++x) out.push_back(x);
    } else {
      out.push_back(std::stoull(part));
    }
  }
  if (out.empty()) throw usage_error("--seeds gives no seed");
  return out;
}


std::string json_num(double v) {
  if (std::isnan(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

}  // namespace

int cmd_experiment(int argc, char** argv) {
  try {
    if (argc < 3 || std::string(argv[2]) != "fgd") throw usage_error("expected 'placer experiment fgd ...'");
    std::set<std::string> const valued{"workload", "seeds", "plot", "policies", "batch", "data", "jobs"};
    std::set<std::string> const boolean{"all", "json", "help"};
    auto const args = parse_cli(argc, argv, 3, valued, boolean, "experiment fgd");
    auto opts = args.opts;
    auto const& flags = args.flags;
    if (flags.count("help") != 0) {
      std::fputs(usage, stdout);
      return 0;
    }
    bool const json = flags.count("json") != 0;
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
      batch = std::stoi(opts["batch"]);
      if (batch < 1) throw usage_error("--batch must be >= 1");
      if (std::find(pols.begin(), pols.end(), fgd::policy::placer_batch) == pols.end()) {
        pols.push_back(fgd::policy::placer_batch);
      }
    }
    if (pols.empty()) throw usage_error("--policies gives no policy");
    unsigned jobs = std::max(1U, std::thread::hardware_concurrency());
    if (opts.count("jobs") != 0) jobs = static_cast<unsigned>(std::max(1, std::stoi(opts["jobs"])));

    std::map<std::pair<std::string, std::string>, std::vector<double>> published;
    if (fs::is_regular_file(published_csv)) {
      published = fgd::load_published(published_csv.string());
    } else {
      std::fprintf(stderr, "placer experiment: %s not found; published medians left out\n", published_csv.c_str());
    }

    if (!json) {
      std::printf("FGD experiment (ATC'23 protocol): GPU allocation ratio (%%) at 130%% arrived, median over %zu seed(s)\n",
                  seeds.size());
      std::printf("%-12s %-13s %6s %9s %9s %7s %8s\n", "workload", "policy", "seeds", "ours", "published", "diff",
                  "time_s");
    }
    auto const t_all = std::chrono::steady_clock::now();
    for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
      auto const& [wname, pod_csv] = workloads[wi];
      fgd::workload const w = fgd::load_workload(node_csv.string(), pod_csv.string(), wname);
      // All (policy, seed) runs of this workload, spread over worker threads.
      std::size_t const n_runs = pols.size() * seeds.size();
      std::vector<fgd::run_result> results(n_runs);
      std::atomic<std::size_t> next{0};
      std::atomic<std::size_t> done{0};
      std::mutex io;
      auto worker = [&] {
        for (;;) {
          std::size_t const k = next++;
          if (k >= n_runs) return;
          fgd::run_options o;
          o.pol = pols[k / seeds.size()];
          o.seed = seeds[k % seeds.size()];
          o.batch = batch;
          results[k] = fgd::run(w, o);
          std::size_t const d = ++done;
          std::lock_guard<std::mutex> lock(io);
          std::fprintf(stderr, "[fgd] %s %s seed %llu (%zu/%zu) alloc@130 %.2f in %.1f s\n", wname.c_str(),
                       fgd::policy_name(o.pol).c_str(), static_cast<unsigned long long>(o.seed), d, n_runs,
                       results[k].alloc_at_130, results[k].seconds);
        }
      };
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < std::min<std::size_t>(jobs, n_runs); ++t) threads.emplace_back(worker);
      for (auto& t : threads) t.join();

      sim::line_plot plot;
      plot.title = "GPU allocation, workload " + wname + " (mean over seeds)";
      plot.x_label = "arrived GPU demand (%)";
      plot.y_label = "GPU allocation ratio (%)";
      for (std::size_t pi = 0; pi < pols.size(); ++pi) {
        auto const pol = pols[pi];
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
          std::printf("{\"workload\":\"%s\",\"policy\":\"%s\",\"alloc_ratio_at_130_median\":%s,\"published_median\":%s,"
                      "\"seeds\":[%s],\"per_seed\":[%s],\"seconds\":%.2f%s}\n",
                      wname.c_str(), fgd::policy_name(pol).c_str(), json_num(ours).c_str(), json_num(pub).c_str(),
                      sl.c_str(), ps.c_str(), secs,
                      pol == fgd::policy::placer_batch ? (",\"batch\":" + std::to_string(batch)).c_str() : "");
        } else {
          char diff[16] = "-";
          char pubs[16] = "-";
          if (!std::isnan(pub)) {
            std::snprintf(pubs, sizeof pubs, "%.2f", pub);
            std::snprintf(diff, sizeof diff, "%+.2f", ours - pub);
          }
          std::string const pname =
              pol == fgd::policy::placer_batch ? fgd::policy_name(pol) + "/" + std::to_string(batch) : fgd::policy_name(pol);
          std::printf("%-12s %-13s %6zu %9.2f %9s %7s %8.1f\n", wname.c_str(), pname.c_str(), seeds.size(), ours, pubs,
                      diff, secs);
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
  } catch (usage_error const& e) {
    std::fprintf(stderr, "placer experiment: %s\n%s", e.what(), usage);
    return 2;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "placer experiment: %s\n", e.what());
    return 1;
  }
}

}  // namespace placer::tools
