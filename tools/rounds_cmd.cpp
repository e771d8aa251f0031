// `placer experiment rounds`: a cluster's life, round after round, under
// each algorithm on the same ITP traces (docs/simulator.md, "placer
// experiment rounds"): mean wait, time-weighted GFR and FGD fragmentation
// ratio per run, each against greedy (the same scores, one job at a time),
// and a plot of GFR over time for one trace. With --split A,B, the first
// round where two runs part, and the first where they part on
// fragmentation, with both rounds' placements (docs/results.md, "Rounds
// that fragment more than greedy").
#include "cli.hpp"
#include "commands.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/sim/baseline_policies.hpp>
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/sim_workloads.hpp>
#include <placer/sim/simulator.hpp>
#include <placer/sim/svg_plot.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace placer::tools {

namespace fs = std::filesystem;

namespace {

char const* const rounds_usage =
    "usage: placer experiment rounds [--clusters LIST|all] [--nodes N] [--runs LIST] [--jobs N] [--out DIR]\n"
    "                                [--plot CLUSTER] [--json] [--limit N] [--no-repack] [--data DIR] [--backend B]\n"
    "       placer experiment rounds --split A,B --clusters NN [--nodes N] [--limit N] [--no-repack] ...\n"
    "  --clusters  ITP raw traces: 01,02,... or all (default: every raw trace in the data directory)\n"
    "  --nodes     nodes of 8 GPUs for every trace (default 24); --limit the first N jobs of each\n"
    "  --runs      algorithms (default placer,greedy,first-fit,fgd): the solver's (placer, greedy,\n"
    "              first-fit, kube-least, kube-most), an FGD-paper baseline (fgd, best-fit, ...), or\n"
    "              placer:no-repack (placer without its packing repair)\n"
    "  --jobs      runs at a time (default 1)\n"
    "  --out       summary.json, per trace its CSVs and plots (as placer simulate --out), and\n"
    "              gfr_CLUSTER.svg: GFR over time of every run on the --plot trace (default cluster02)\n"
    "  --json      one JSON object per trace and run on stdout instead of the table\n"
    "  --no-repack placer without its packing repair (what the repair does)\n"
    "  --split A,B the first round where runs A and B part, and the first where they part on\n"
    "              fragmentation (nodes partly used after the round), each run's placements there\n"
    "Every run has the default policies (60-s rounds, queue order fifo, loaning on, nothing else) and\n"
    "its own solver. The table: mean wait, time-weighted GPU node fragmentation ratio (GFR) and FGD\n"
    "fragmentation ratio of each run, and the first run's against greedy's ('!' above 1.02).\n";

struct run_row : timed_sim {
  std::size_t trace = 0;
  std::string algo;
};

/// The solve function of one run: a baseline's own, or an in-process solver.
sim::solve_fn solve_for(std::string const& run, sim::workload_options const& wo, std::unique_ptr<solver>& sv,
                        std::string const& backend) {
  if (sim::is_baseline_policy(run)) return sim::baseline_solver(run, wo.seed);
  if (!sv) sv = std::make_unique<solver>(kernels::select_backend(backend));
  return sim::in_process(*sv);
}

/// A run's name: an algorithm, or "placer:no-repack" (placer without its
/// packing repair, beside placer in one table).
constexpr char const* no_repack_suffix = ":no-repack";

std::string algorithm_of(std::string const& run) {
  auto const at = run.find(no_repack_suffix);
  return at != std::string::npos && at + std::string(no_repack_suffix).size() == run.size() ? run.substr(0, at) : run;
}

sim::sim_config config_for(std::string const& run, bool repack) {
  sim::sim_config cfg;
  std::string const algo = algorithm_of(run);
  cfg.algo = sim::is_baseline_policy(algo) ? algorithm::first_fit : parse_algorithm(algo);
  cfg.label = run;
  cfg.repack = repack && algo == run;
  return cfg;
}

/// A usage_error unless `run` names an algorithm or a baseline.
void check_run(std::string const& run) {
  std::string const algo = algorithm_of(run);
  if (sim::is_baseline_policy(algo) && algo == run) return;
  try {
    (void)parse_algorithm(algo);
  } catch (std::exception const& e) {
    throw usage_error(std::string("--runs: ") + e.what());
  }
}

std::string ratio_cell(double v, double base) {
  if (base <= 0) return v <= 0 ? "1.000" : "inf!";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f%s", v / base, v / base > 1.02 ? "!" : "");
  return b;
}

std::string row_json(run_row const& r, std::string const& trace, run_row const* greedy) {
  std::string o = "{\"trace\":" + sim::json_quote(trace) + ",\"run\":" + sim::json_quote(r.algo);
  if (!r.ok) return o + ",\"status\":\"failed\",\"error\":" + sim::json_quote(r.error) + "}";
  auto const& s = r.summary;
  char b[768];
  std::snprintf(b, sizeof b,
                ",\"status\":\"ok\",\"jobs\":%lld,\"finished\":%lld,\"jwtd_mean\":%.1f,\"jwtd_p90\":%.0f,"
                "\"jwtd_gpu_weighted\":%.1f,\"gfr\":%.6f,\"fgd_frag_ratio\":%.6f,\"gar\":%.6f,\"rounds\":%lld,"
                "\"seconds\":%.2f",
                static_cast<long long>(s.jobs), static_cast<long long>(s.finished), s.wait.mean, s.wait.p90,
                s.wait_gpu_weighted, s.gfr_time, s.frag_time, s.gar_time, static_cast<long long>(s.rounds), r.seconds);
  o += b;
  if (greedy != nullptr && greedy->ok && greedy != &r) {
    auto const& g = greedy->summary;
    auto const q = [](double v, double base) { return base > 0 ? v / base : (v > 0 ? 1e9 : 1.0); };
    std::snprintf(b, sizeof b, ",\"vs_greedy\":{\"jwtd_mean\":%.4f,\"gfr\":%.4f,\"fgd_frag_ratio\":%.4f}",
                  q(s.wait.mean, g.wait.mean), q(s.gfr_time, g.gfr_time), q(s.frag_time, g.frag_time));
    o += b;
  }
  return o + "}";
}

/// The table, a markdown table: one row per trace.
void print_table(std::vector<std::string> const& traces, std::vector<std::string> const& algos,
                 std::vector<run_row> const& rows, std::int32_t nodes) {
  auto at = [&](std::size_t t, std::size_t a) -> run_row const& { return rows[t * algos.size() + a]; };
  auto const g = static_cast<std::size_t>(std::find(algos.begin(), algos.end(), "greedy") - algos.begin());
  bool const vs = g < algos.size() && g != 0;
  std::string names;
  for (auto const& a : algos) names += (names.empty() ? "" : " / ") + a;
  std::printf("\nITP raw traces at %d nodes, default policies\n\n", nodes);
  std::printf("| trace | mean wait, s: %s | GFR, time-weighted: %s | FGD fragmentation ratio: %s |", names.c_str(),
              names.c_str(), names.c_str());
  if (vs) std::printf(" %s / greedy: wait, GFR, FGD |", algos.front().c_str());
  std::printf("\n|---|---|---|---|%s\n", vs ? "---|" : "");
  for (std::size_t t = 0; t < traces.size(); ++t) {
    std::string wait, gfr, frag;
    for (std::size_t a = 0; a < algos.size(); ++a) {
      auto const& r = at(t, a);
      char w[32], f1[32], f2[32];
      if (r.ok) {
        std::snprintf(w, sizeof w, r.summary.wait.mean < 1000 ? "%.1f" : "%.0f", r.summary.wait.mean);
        std::snprintf(f1, sizeof f1, "%.2f%%", 100 * r.summary.gfr_time);
        std::snprintf(f2, sizeof f2, "%.2f%%", 100 * r.summary.frag_time);
      } else {
        std::snprintf(w, sizeof w, "FAILED");
        f1[0] = f2[0] = '-';
        f1[1] = f2[1] = '\0';
      }
      wait += (a ? " / " : "") + std::string(w);
      gfr += (a ? " / " : "") + std::string(f1);
      frag += (a ? " / " : "") + std::string(f2);
    }
    std::printf("| %s | %s | %s | %s |", traces[t].c_str(), wait.c_str(), gfr.c_str(), frag.c_str());
    if (vs) {
      auto const& p = at(t, 0);
      auto const& q = at(t, g);
      if (p.ok && q.ok) {
        std::printf(" %s, %s, %s |", ratio_cell(p.summary.wait.mean, q.summary.wait.mean).c_str(),
                    ratio_cell(p.summary.gfr_time, q.summary.gfr_time).c_str(),
                    ratio_cell(p.summary.frag_time, q.summary.frag_time).c_str());
      } else {
        std::printf(" - |");
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

// ------------------------------------------------------------- the split

/// One round as the split compares it: its time, its placements in a
/// canonical text, and the nodes partly used after it.
struct round_record {
  std::int64_t time = 0;
  std::string placements;
  std::int32_t partly_after = 0;
};

/// Stops a run once the split has what it needs.
struct stop_run {};

/// GPU milli used per node of `c`, and with the placements of `r` charged.
std::vector<std::int64_t> used_after(cluster const& c, round_result const* r) {
  std::vector<std::int64_t> used(c.nodes.size(), 0);
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    for (std::size_t g = 0; g < c.nodes[n].gpu_free_milli.size(); ++g) {
      if (c.nodes[n].gpu_is_healthy(g)) used[n] += milli_per_gpu - c.nodes[n].gpu_free_milli[g];
    }
  }
  if (r != nullptr) {
    for (auto const& p : r->placements) {
      for (auto const& rp : p.replicas) used[static_cast<std::size_t>(rp.node)] += static_cast<std::int64_t>(rp.gpus.size()) * rp.gpu_milli;
    }
  }
  return used;
}

std::int32_t partly(cluster const& c, std::vector<std::int64_t> const& used) {
  std::int32_t k = 0;
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    auto const cap = static_cast<std::int64_t>(c.nodes[n].gpu_count()) * milli_per_gpu;
    k += used[n] > 0 && used[n] < cap ? 1 : 0;
  }
  return k;
}

std::string shape(job const& j) {
  std::string s = std::to_string(j.per_replica.gpus) + " GPU";
  if (j.replicas > 1) s = std::to_string(j.replicas) + " x " + s;
  return s;
}

round_record record_of(round_input const& in, round_result const& r) {
  round_record rec;
  rec.time = in.now;
  std::vector<std::string> parts;
  for (auto const& p : r.placements) {
    std::string s = in.pending[static_cast<std::size_t>(p.job)].name + "@";
    for (auto const& rp : p.replicas) {
      s += std::to_string(rp.node) + "[";
      for (auto g : rp.gpus) s += std::to_string(g) + ",";
      s += "]";
    }
    parts.push_back(std::move(s));
  }
  std::sort(parts.begin(), parts.end());
  for (auto const& s : parts) rec.placements += s + ";";
  rec.partly_after = partly(in.state, used_after(in.state, &r));
  return rec;
}

/// The round as the split prints it: what was pending, the nodes in use
/// before, and this run's placements and stages.
std::string describe_round(round_input const& in, round_result const& r, std::string const& run) {
  std::ostringstream o;
  std::map<std::string, int> shapes;
  for (auto const& j : in.pending) ++shapes[shape(j)];
  auto const before = used_after(in.state, nullptr);
  auto const after = used_after(in.state, &r);
  std::ostringstream head;
  head << "  pending: " << in.pending.size() << " jobs (";
  bool first = true;
  for (auto const& [s, n] : shapes) {
    head << (first ? "" : ", ") << n << " x " << s;
    first = false;
  }
  head << "); nodes in use before:";
  int shown = 0;
  for (std::size_t n = 0; n < before.size(); ++n) {
    if (before[n] == 0) continue;
    if (shown++ == 16) {
      head << " ...";
      break;
    }
    head << " " << n << " (" << before[n] / milli_per_gpu << " of " << in.state.nodes[n].gpu_count() << " GPUs)";
  }
  if (shown == 0) head << " none";
  o << head.str() << "\n  " << run << ":";
  for (auto const& p : r.placements) {
    auto const& j = in.pending[static_cast<std::size_t>(p.job)];
    o << " " << j.name.substr(0, 8) << " (" << shape(j) << ") -> node";
    for (auto const& rp : p.replicas) o << " " << rp.node;
    o << ";";
  }
  if (r.placements.empty()) o << " nothing placed;";
  o << " nodes partly used after: " << partly(in.state, after) << "; stages:";
  for (auto const& st : r.timing) {
    if (st.stage != "validate" && st.stage != "flatten" && st.stage != "total" && st.stage.rfind("metrics", 0) != 0) o << " " << st.stage;
  }
  return o.str();
}

int run_split(std::vector<std::string> const& pair, sim::workload const& w, sim::workload_options const& wo,
              bool repack, std::string const& backend) {
  // A: every round recorded. B: compared round by round with A's, until
  // they part on fragmentation. A again, to describe its side of those rounds.
  std::vector<round_record> a_rounds;
  auto run = [&](std::string const& algo, std::function<void(round_input const&, round_result const&)> const& see) {
    std::unique_ptr<solver> sv;
    sim::solve_fn const inner = solve_for(algo, wo, sv, backend);
    sim::solve_fn const solve = [&](round_input const& in) {
      round_result r = inner(in);
      see(in, r);
      return r;
    };
    try {
      sim::run_simulation(w, config_for(algo, repack), solve);
    } catch (stop_run const&) {
    }
  };
  std::fprintf(stderr, "[rounds] %s: recording every round\n", pair[0].c_str());
  run(pair[0], [&](round_input const& in, round_result const& r) { a_rounds.push_back(record_of(in, r)); });
  std::int64_t part = -1, frag_part = -1;
  std::string b_part, b_frag;
  std::int64_t k = 0;
  std::fprintf(stderr, "[rounds] %s: against %s's %zu rounds\n", pair[1].c_str(), pair[0].c_str(), a_rounds.size());
  run(pair[1], [&](round_input const& in, round_result const& r) {
    auto const rec = record_of(in, r);
    bool const beyond = static_cast<std::size_t>(k) >= a_rounds.size();
    auto const& a = beyond ? rec : a_rounds[static_cast<std::size_t>(k)];
    bool const differs = beyond || a.time != rec.time || a.placements != rec.placements;
    if (part < 0 && differs) {
      part = k;
      b_part = describe_round(in, r, pair[1]);
    }
    if (frag_part < 0 && (beyond || a.time != rec.time || a.partly_after != rec.partly_after)) {
      frag_part = k;
      b_frag = describe_round(in, r, pair[1]);
    }
    ++k;
    if (frag_part >= 0) throw stop_run{};
  });
  std::printf("%s at %zu nodes: %s against %s\n", w.name.c_str(), w.nodes.nodes.size(), pair[0].c_str(), pair[1].c_str());
  if (part < 0) {
    std::printf("the two runs never part: the same placements in all %zu rounds\n", a_rounds.size());
    return 0;
  }
  std::string a_part, a_frag;
  k = 0;
  run(pair[0], [&](round_input const& in, round_result const& r) {
    if (k == part) a_part = describe_round(in, r, pair[0]);
    if (k == frag_part) a_frag = describe_round(in, r, pair[0]);
    if (k >= std::max(part, frag_part)) throw stop_run{};
    ++k;
  });
  auto when = [&](std::int64_t i) {
    char b[128];
    std::snprintf(b, sizeof b, "round %lld at t = %lld s (%.1f h into the trace)", static_cast<long long>(i + 1),
                  static_cast<long long>(static_cast<std::size_t>(i) < a_rounds.size() ? a_rounds[static_cast<std::size_t>(i)].time : -1),
                  static_cast<std::size_t>(i) < a_rounds.size()
                      ? static_cast<double>(a_rounds[static_cast<std::size_t>(i)].time - w.jobs.front().submit_time) / 3600.0
                      : 0.0);
    return std::string(b);
  };
  std::printf("first round where they part: %s\n%s\n%s\n", when(part).c_str(), a_part.c_str(),
              b_part.substr(b_part.find('\n') + 1).c_str());
  if (frag_part == part) {
    std::printf("they part on fragmentation in the same round\n");
  } else if (frag_part >= 0) {
    std::printf("first round where they part on fragmentation (nodes partly used after it): %s\n%s\n%s\n",
                when(frag_part).c_str(), a_frag.c_str(), b_frag.substr(b_frag.find('\n') + 1).c_str());
  } else {
    std::printf("they never part on fragmentation: as many nodes partly used after each of the %zu rounds\n",
                a_rounds.size());
  }
  return 0;
}

/// clusterNN for "NN", "clusterNN" or "itp:clusterNN".
std::string cluster_name(std::string c) {
  if (c.rfind("itp:", 0) == 0) c = c.substr(4);
  if (c.rfind("cluster", 0) == 0) return c;
  return "cluster" + std::string(c.size() == 1 ? "0" : "") + c;
}

}  // namespace

int cmd_experiment_rounds(int argc, char** argv) {
  try {
    std::set<std::string> const valued{"clusters", "nodes", "runs", "jobs", "out", "plot", "limit", "data", "backend",
                                       "split"};
    std::set<std::string> const boolean{"json", "no-repack", "help"};
    auto const args = parse_cli(argc, argv, 3, valued, boolean, "experiment rounds");
    if (args.flags.count("help") != 0) {
      std::fputs(rounds_usage, stdout);
      return 0;
    }
    bool const json = args.flags.count("json") != 0;
    bool const repack = args.flags.count("no-repack") == 0;
    std::string const backend = args.get("backend", "auto");
    sim::workload_options base;
    base.data_dir = shared_data_dir(argv[0], args.get("data"));
    base.nodes = static_cast<std::int32_t>(args.integer("nodes", 24));
    if (base.nodes < 1) throw usage_error("--nodes must be at least 1");
    base.limit = static_cast<std::int32_t>(args.integer("limit", 0));
    auto const jobs = static_cast<unsigned>(std::max<long long>(1, args.integer("jobs", 1)));

    std::vector<std::string> clusters;
    std::string const which = args.get("clusters", "all");
    if (which == "all") {
      fs::path const dir = fs::path(base.data_dir) / "microsoft-itp-elasticflow" / "raw-traces";
      std::error_code ec;
      for (auto const& e : fs::directory_iterator(dir, ec)) {
        auto const f = e.path().filename().string();
        if (f.rfind("cluster", 0) == 0 && e.path().extension() == ".csv") clusters.push_back(e.path().stem().string());
      }
      if (ec || clusters.empty()) throw std::runtime_error("no ITP raw traces in " + dir.string() + " (--data DIR)");
      std::sort(clusters.begin(), clusters.end());
    } else {
      for (auto const& c : split(which)) clusters.push_back(cluster_name(c));
    }
    if (clusters.empty()) throw usage_error("--clusters names no trace");
    std::vector<std::string> algos = split(args.get("runs", "placer,greedy,first-fit,fgd"));
    for (auto const& a : algos) check_run(a);

    if (args.opts.count("split") != 0) {
      auto const pair = split(args.opts.at("split"));
      if (pair.size() != 2) throw usage_error("--split takes two runs, e.g. placer,greedy");
      for (auto const& a : pair) check_run(a);
      if (clusters.size() != 1) throw usage_error("--split compares two runs on one trace: --clusters NN");
      sim::workload_options wo = base;
      wo.trace = "itp:" + clusters.front();
      return run_split(pair, sim::load_workload(wo), wo, repack, backend);
    }

    std::vector<sim::workload> workloads;
    std::vector<sim::workload_options> options;
    for (auto const& c : clusters) {
      sim::workload_options wo = base;
      wo.trace = "itp:" + c;
      workloads.push_back(sim::load_workload(wo));
      options.push_back(wo);
      std::fprintf(stderr, "[rounds] %s: %s\n", workloads.back().name.c_str(), workloads.back().description.c_str());
    }
    std::vector<run_row> rows;
    for (std::size_t t = 0; t < workloads.size(); ++t) {
      for (auto const& a : algos) {
        run_row r;
        r.trace = t;
        r.algo = a;
        rows.push_back(std::move(r));
      }
    }
    // Runs are independent (own solver and queue memory); they share only
    // the read-only workloads. The longest traces first, so that --jobs
    // keeps every worker busy.
    std::vector<std::size_t> todo(rows.size());
    for (std::size_t k = 0; k < todo.size(); ++k) todo[k] = k;
    std::stable_sort(todo.begin(), todo.end(), [&](std::size_t a, std::size_t b) {
      return workloads[rows[a].trace].jobs.size() > workloads[rows[b].trace].jobs.size();
    });
    auto const t_all = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<solver>> solvers(jobs);
    run_parallel(
        todo.size(), jobs,
        [&](std::size_t k, unsigned w) {
          auto& r = rows[todo[k]];
          run_timed(r, workloads[r.trace], config_for(r.algo, repack),
                    [&] { return solve_for(r.algo, options[r.trace], solvers[w], backend); });
        },
        [&](std::size_t k, std::size_t d) {
          auto const& r = rows[todo[k]];
          if (r.ok) {
            std::fprintf(stderr, "[rounds] (%zu/%zu) %s %s: mean wait %.1f s, GFR %.2f%%, FGD %.2f%% in %.1f s\n", d,
                         rows.size(), clusters[r.trace].c_str(), r.algo.c_str(), r.summary.wait.mean,
                         100 * r.summary.gfr_time, 100 * r.summary.frag_time, r.seconds);
          } else {
            std::fprintf(stderr, "[rounds] (%zu/%zu) %s %s: FAILED after %.1f s: %s\n", d, rows.size(),
                         clusters[r.trace].c_str(), r.algo.c_str(), r.seconds, r.error.c_str());
          }
        });

    auto const g = static_cast<std::size_t>(std::find(algos.begin(), algos.end(), "greedy") - algos.begin());
    auto greedy_of = [&](std::size_t t) { return g < algos.size() ? &rows[t * algos.size() + g] : nullptr; };
    if (json) {
      for (auto const& r : rows) std::printf("%s\n", row_json(r, clusters[r.trace], greedy_of(r.trace)).c_str());
      std::fflush(stdout);
    } else {
      print_table(clusters, algos, rows, base.nodes);
    }
    std::size_t failed = 0;
    for (auto const& r : rows) failed += r.ok ? 0 : 1;

    if (args.opts.count("out") != 0) {
      fs::path const out = args.opts.at("out");
      std::error_code ec;
      fs::create_directories(out, ec);
      if (ec) throw std::runtime_error("cannot create " + out.string() + ": " + ec.message());
      std::string const config = "{\"nodes\": " + std::to_string(base.nodes) + ", \"limit\": " +
                                 std::to_string(base.limit) + ", \"repack\": " + (repack ? "true" : "false") +
                                 ", \"interval_s\": 60, \"order\": \"fifo\"}";
      std::string all = "{\n\"config\": " + config + ",\n\"runs\": [\n";
      for (std::size_t k = 0; k < rows.size(); ++k) {
        all += (k ? ",\n" : "") + row_json(rows[k], clusters[rows[k].trace], greedy_of(rows[k].trace));
      }
      all += "\n]\n}\n";
      std::ofstream f(out / "summary.json");
      f << all;
      if (!f) throw std::runtime_error("cannot write " + (out / "summary.json").string());
      std::string const plot = cluster_name(args.get("plot", "cluster02"));
      for (std::size_t t = 0; t < workloads.size(); ++t) {
        std::vector<sim::sim_result> res;
        std::vector<sim::sim_summary> sums;
        sim::line_plot p{"GPU node fragmentation ratio (GFR) over time, " + workloads[t].name + " at " +
                             std::to_string(base.nodes) + " nodes (time-weighted bucket means)",
                         "simulated time (h)", "nodes partly allocated (%)", {}};
        for (std::size_t a = 0; a < algos.size(); ++a) {
          auto const& r = rows[t * algos.size() + a];
          if (!r.ok) continue;
          res.push_back(r.result);
          sums.push_back(r.summary);
          p.series.push_back(sim::bucket_means(r.result, r.algo, &sim::sample::gfr));
        }
        std::string const wcfg = "{\"workload\": " + sim::json_quote(workloads[t].name) + ", \"description\": " +
                                 sim::json_quote(workloads[t].description) + ", \"experiment\": " + config + "}";
        if (!res.empty()) sim::write_outputs((out / clusters[t]).string(), res, sums, wcfg);
        if (clusters[t] == plot && !p.series.empty()) {
          sim::write_svg(p, (out / ("gfr_" + plot + ".svg")).string());
          std::fprintf(stderr, "[rounds] wrote %s\n", (out / ("gfr_" + plot + ".svg")).c_str());
        }
      }
      std::fprintf(stderr, "[rounds] wrote %s/summary.json and per-trace outputs\n", out.c_str());
    }
    std::fprintf(stderr, "[rounds] %zu runs, %zu failed, total %.1f s\n", rows.size(), failed,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count());
    return failed == 0 ? 0 : 1;
  } catch (...) {
    return verb_failed("experiment rounds", rounds_usage);
  }
}

}  // namespace placer::tools
