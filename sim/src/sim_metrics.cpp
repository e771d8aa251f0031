// Simulation metrics and output files (docs/metrics.md, "Simulation metrics").
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/svg_plot.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace placer::sim {

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}


std::string dist_json(distribution const& d) {
  return "{\"n\": " + std::to_string(d.n) + ", \"p50\": " + num(d.p50) + ", \"p90\": " + num(d.p90) +
         ", \"p99\": " + num(d.p99) + ", \"mean\": " + num(d.mean) + ", \"max\": " + num(d.max) + "}";
}

void write_file(std::string const& path, std::string const& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// A run label as part of a file name.
std::string file_safe(std::string s) {
  for (auto& c : s) {
    bool const ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '+' || c == '=' || c == '-';
    if (!ok) c = '_';
  }
  return s;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto const n = static_cast<double>(v.size());
  auto rank = static_cast<std::int64_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::int64_t>(rank, 1, static_cast<std::int64_t>(v.size()));
  return v[static_cast<std::size_t>(rank - 1)];
}

distribution describe(std::vector<double> const& v) {
  distribution d;
  d.n = static_cast<std::int64_t>(v.size());
  if (v.empty()) return d;
  d.p50 = percentile(v, 50);
  d.p90 = percentile(v, 90);
  d.p99 = percentile(v, 99);
  double s = 0;
  for (double x : v) s += x;
  d.mean = s / static_cast<double>(v.size());
  d.max = *std::max_element(v.begin(), v.end());
  return d;
}

sim_summary summarize(sim_result const& r) {
  sim_summary s;
  s.algorithm = r.config.label.empty() ? std::string(algorithm_name(r.config.algo)) : r.config.label;
  s.workload = r.workload;
  s.description = r.description;
  s.policy = policy_label(r.config.queue);
  s.checkpoint_interval = r.config.checkpoint_interval;
  s.jobs = static_cast<std::int64_t>(r.jobs.size());
  s.capacity_gpus = static_cast<double>(r.capacity_milli) / milli_per_gpu;
  s.t_begin = r.t_begin;
  s.t_end = r.t_end;
  std::vector<double> waits, jcts, ratios, waits_tr, waits_inf, jcts_tr, multi;
  bool all_done = true;
  std::int64_t last_end = r.t_begin;
  double slow_w = 0, slow_gs = 0, wait_g = 0, g_started = 0;
  for (auto const& j : r.jobs) {
    if (j.start < 0) {
      ++s.never_started;
      all_done = false;
      continue;
    }
    bool const inference = j.kind == job_kind::inference;
    // Wait: submit -> first start (a preempted job's later waits show in its JCT).
    double const wait = static_cast<double>(j.start - j.submit);
    waits.push_back(wait);
    (inference ? waits_inf : waits_tr).push_back(wait);
    wait_g += wait * static_cast<double>(j.gpu_milli);
    g_started += static_cast<double>(j.gpu_milli);
    ratios.push_back(static_cast<double>(j.estimated) / static_cast<double>(std::max<std::int64_t>(j.duration, 1)));
    s.gpu_time_jobs += static_cast<double>(j.gpu_milli_seconds) / milli_per_gpu;
    double const gs = static_cast<double>(j.gpu_milli_seconds);
    slow_w += j.slowdown * gs;
    slow_gs += gs;
    if (j.max_nodes > 1) multi.push_back(j.slowdown);
    if (j.slowdown_max > 1.0) ++s.slowed_jobs;
    if (j.preemptions > 0) ++s.jobs_preempted;
    if (j.end >= 0) {
      ++s.finished;
      jcts.push_back(static_cast<double>(j.end - j.submit));
      if (!inference) jcts_tr.push_back(static_cast<double>(j.end - j.submit));
      last_end = std::max(last_end, j.end);
    } else {
      ++s.running_at_end;
      all_done = false;
    }
  }
  s.wait = describe(waits);
  s.wait_gpu_weighted = g_started > 0 ? wait_g / g_started : 0.0;
  s.jct = describe(jcts);
  s.jtted = describe(ratios);
  s.wait_training = describe(waits_tr);
  s.wait_inference = describe(waits_inf);
  s.jct_training = describe(jcts_tr);
  s.makespan = (all_done ? last_end : r.t_end) - r.t_begin;
  s.slowdown_gpu_weighted = slow_gs > 0 ? slow_w / slow_gs : 1.0;
  s.multi_node_jobs = static_cast<std::int64_t>(multi.size());
  s.slowdown_multi_node = multi.empty() ? 1.0 : describe(multi).mean;
  s.preemptions = r.preemptions;
  s.preemptions_by_reason = r.preemptions_by_reason;
  s.lost_gpu_hours = static_cast<double>(r.lost_gpu_milli_seconds) / milli_per_gpu / 3600.0;
  s.reclaimed_nodes = r.reclaimed_nodes;
  s.scale_outs = r.scale_outs;
  s.scale_ins = r.scale_ins;
  s.reservations = r.reservations;
  if (auto it = r.unplaced.find(to_string(unplaced_reason::deferred)); it != r.unplaced.end()) s.deferred_job_rounds = it->second;
  if (auto it = r.unplaced.find(to_string(unplaced_reason::reserved)); it != r.unplaced.end()) s.reserved_job_rounds = it->second;

  double const cap = static_cast<double>(r.capacity_milli) / milli_per_gpu;
  double gar_i = 0, gfr_i = 0, frag_i = 0, q_i = 0, alloc_i = 0, dem_i = 0, mind_i = 0, gar_sum = 0, inf_i = 0,
         loan_i = 0;
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    auto const& x = r.series[i];
    auto const dt = static_cast<double>(std::max<std::int64_t>(r.sample_end(i) - x.time, 0));
    gar_i += x.gar * dt;
    gfr_i += x.gfr * dt;
    frag_i += x.frag * dt;
    q_i += x.queue * dt;
    double const a = static_cast<double>(x.allocated_milli) / milli_per_gpu;
    double const d = static_cast<double>(x.demand_milli) / milli_per_gpu;
    alloc_i += a * dt;
    dem_i += d * dt;
    mind_i += std::min(d, cap) * dt;
    inf_i += static_cast<double>(x.inference_milli) / milli_per_gpu * dt;
    loan_i += static_cast<double>(x.loaned_milli) / milli_per_gpu * dt;
    gar_sum += x.gar;
    s.queue_max = std::max(s.queue_max, x.queue);
  }
  auto const span = static_cast<double>(r.t_end - r.t_begin);
  if (span > 0) {
    s.gar_time = gar_i / span;
    s.gfr_time = gfr_i / span;
    s.frag_time = frag_i / span;
    s.queue_mean = q_i / span;
    s.inference_gpus_mean = inf_i / span;
    s.loaned_gpus_mean = loan_i / span;
  }
  if (!r.series.empty()) s.gar_event = gar_sum / static_cast<double>(r.series.size());
  s.gpu_time_allocated = alloc_i;
  s.gpu_time_demanded = dem_i;
  s.gpu_time_available = cap * span;
  double const denom = std::min(dem_i, s.gpu_time_available);
  s.sor = denom > 0 ? alloc_i / denom : 0;
  s.sor_pointwise = mind_i > 0 ? alloc_i / mind_i : 0;
  double fsum = 0;
  for (double f : r.frag_after) fsum += f;
  s.frag_round_mean = r.frag_after.empty() ? 0 : fsum / static_cast<double>(r.frag_after.size());
  s.rounds = r.rounds;
  s.placements = r.placements;
  s.rejected_partial = r.rejected_partial;
  s.unplaced = r.unplaced;
  s.wall_seconds = r.wall_seconds;
  s.wall_solver_seconds = r.wall_solver_seconds;
  s.placements_per_wall_second = r.wall_seconds > 0 ? static_cast<double>(r.placements) / r.wall_seconds : 0;
  return s;
}

std::string summary_json(std::vector<sim_summary> const& runs, std::string const& config_json, bool include_wall) {
  std::ostringstream o;
  o << "{\n  \"config\": " << (config_json.empty() ? "{}" : config_json) << ",\n  \"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto const& s = runs[i];
    o << (i ? ",\n" : "\n") << "    {\"algorithm\": " << json_quote(s.algorithm) << ", \"policy\": " << json_quote(s.policy)
      << ", \"checkpoint_interval_s\": " << s.checkpoint_interval << ", \"workload\": " << json_quote(s.workload)
      << ", \"description\": " << json_quote(s.description) << ",\n     \"jobs\": " << s.jobs
      << ", \"finished\": " << s.finished << ", \"running_at_end\": " << s.running_at_end
      << ", \"never_started\": " << s.never_started << ", \"capacity_gpus\": " << num(s.capacity_gpus)
      << ",\n     \"t_begin\": " << s.t_begin << ", \"t_end\": " << s.t_end << ", \"makespan_s\": " << s.makespan
      << ",\n     \"gar_time_weighted\": " << num(s.gar_time) << ", \"gar_per_event\": " << num(s.gar_event)
      << ", \"gfr_time_weighted\": " << num(s.gfr_time) << ", \"fgd_frag_ratio_time_weighted\": " << num(s.frag_time)
      << ", \"fgd_frag_ratio_round_mean\": " << num(s.frag_round_mean) << ",\n     \"sor\": " << num(s.sor)
      << ", \"sor_pointwise\": " << num(s.sor_pointwise)
      << ", \"gpu_seconds_allocated\": " << num(s.gpu_time_allocated)
      << ", \"gpu_seconds_demanded\": " << num(s.gpu_time_demanded)
      << ", \"gpu_seconds_available\": " << num(s.gpu_time_available)
      << ", \"gpu_seconds_jobs\": " << num(s.gpu_time_jobs) << ",\n     \"jwtd_s\": " << dist_json(s.wait)
      << ", \"jwtd_gpu_weighted_s\": " << num(s.wait_gpu_weighted)
      << ",\n     \"jct_s\": " << dist_json(s.jct) << ",\n     \"jtted_ratio\": " << dist_json(s.jtted)
      << ",\n     \"jwtd_training_s\": " << dist_json(s.wait_training)
      << ",\n     \"jwtd_inference_s\": " << dist_json(s.wait_inference)
      << ",\n     \"jct_training_s\": " << dist_json(s.jct_training)
      << ",\n     \"preemptions\": " << s.preemptions << ", \"preemptions_by_reason\": {";
    bool first_r = true;
    for (auto const& [k, v] : s.preemptions_by_reason) {
      o << (first_r ? "" : ", ") << json_quote(k) << ": " << v;
      first_r = false;
    }
    o << "}, \"jobs_preempted\": " << s.jobs_preempted << ", \"lost_gpu_hours\": " << num(s.lost_gpu_hours)
      << ", \"reclaimed_nodes\": " << s.reclaimed_nodes << ", \"scale_outs\": " << s.scale_outs
      << ", \"scale_ins\": " << s.scale_ins << ", \"reservations\": " << s.reservations
      << ", \"deferred_job_rounds\": " << s.deferred_job_rounds << ", \"reserved_job_rounds\": " << s.reserved_job_rounds
      << ",\n     \"slowdown_gpu_weighted\": " << num(s.slowdown_gpu_weighted)
      << ", \"slowdown_multi_node_mean\": " << num(s.slowdown_multi_node) << ", \"multi_node_jobs\": " << s.multi_node_jobs
      << ", \"slowed_jobs\": " << s.slowed_jobs << ", \"inference_gpus_mean\": " << num(s.inference_gpus_mean)
      << ", \"loaned_gpus_mean\": " << num(s.loaned_gpus_mean)
      << ",\n     \"queue_mean\": " << num(s.queue_mean) << ", \"queue_max\": " << s.queue_max
      << ", \"rounds\": " << s.rounds << ", \"placements\": " << s.placements
      << ", \"rejected_partial\": " << s.rejected_partial << ",\n     \"unplaced_job_rounds\": {";
    bool first = true;
    for (auto const& [k, v] : s.unplaced) {
      o << (first ? "" : ", ") << json_quote(k) << ": " << v;
      first = false;
    }
    o << "}";
    if (include_wall) {
      o << ",\n     \"wall\": {\"seconds\": " << num(s.wall_seconds) << ", \"solver_seconds\": "
        << num(s.wall_solver_seconds) << ", \"placements_per_second\": " << num(s.placements_per_wall_second) << "}";
    }
    o << "}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

std::string summary_table(std::vector<sim_summary> const& runs) {
  std::ostringstream o;
  char buf[256];
  auto row = [&](char const* name, auto fmt) {
    std::snprintf(buf, sizeof buf, "%-26s", name);
    o << buf;
    for (auto const& s : runs) {
      std::snprintf(buf, sizeof buf, " %14s", fmt(s).c_str());
      o << buf;
    }
    o << "\n";
  };
  auto f = [](double v, char const* spec) {
    char b[64];
    std::snprintf(b, sizeof b, spec, v);
    return std::string(b);
  };
  if (!runs.empty()) o << runs.front().workload << ": " << runs.front().description << "\n";
  // Policy labels are long: one line when all runs share them, else a row.
  bool same_policy = true;
  for (auto const& s : runs) same_policy = same_policy && s.policy == runs.front().policy;
  if (same_policy && !runs.empty()) {
    o << "cross-round policies: " << runs.front().policy << ", checkpoint every " << runs.front().checkpoint_interval
      << " s\n";
  }
  row("algorithm", [](sim_summary const& s) { return s.algorithm; });
  row("jobs finished/total", [](sim_summary const& s) {
    return std::to_string(s.finished) + "/" + std::to_string(s.jobs);
  });
  row("never started", [](sim_summary const& s) { return std::to_string(s.never_started); });
  row("JWTD p50 / s", [&](sim_summary const& s) { return f(s.wait.p50, "%.0f"); });
  row("JWTD p90 / s", [&](sim_summary const& s) { return f(s.wait.p90, "%.0f"); });
  row("JWTD p99 / s", [&](sim_summary const& s) { return f(s.wait.p99, "%.0f"); });
  row("JWTD mean / s", [&](sim_summary const& s) { return f(s.wait.mean, "%.1f"); });
  row("JWTD GPU-weighted / s", [&](sim_summary const& s) { return f(s.wait_gpu_weighted, "%.1f"); });
  row("JCT p50 / s", [&](sim_summary const& s) { return f(s.jct.p50, "%.0f"); });
  row("JCT mean / s", [&](sim_summary const& s) { return f(s.jct.mean, "%.0f"); });
  row("JCT p99 / s", [&](sim_summary const& s) { return f(s.jct.p99, "%.0f"); });
  row("JTTED p50/p99 (est/act)", [&](sim_summary const& s) { return f(s.jtted.p50, "%.2f") + "/" + f(s.jtted.p99, "%.2f"); });
  row("makespan / s", [](sim_summary const& s) { return std::to_string(s.makespan); });
  row("GAR time-weighted", [&](sim_summary const& s) { return f(100 * s.gar_time, "%.2f%%"); });
  row("GAR per event", [&](sim_summary const& s) { return f(100 * s.gar_event, "%.2f%%"); });
  row("SOR", [&](sim_summary const& s) { return f(100 * s.sor, "%.2f%%"); });
  row("SOR pointwise", [&](sim_summary const& s) { return f(100 * s.sor_pointwise, "%.2f%%"); });
  row("GFR time-weighted", [&](sim_summary const& s) { return f(100 * s.gfr_time, "%.2f%%"); });
  row("FGD frag ratio (time-w.)", [&](sim_summary const& s) { return f(100 * s.frag_time, "%.2f%%"); });
  if (!same_policy) row("policies", [](sim_summary const& s) { return s.policy; });
  row("preemptions (jobs)", [](sim_summary const& s) {
    return std::to_string(s.preemptions) + " (" + std::to_string(s.jobs_preempted) + ")";
  });
  row("lost GPU-hours", [&](sim_summary const& s) { return f(s.lost_gpu_hours, "%.1f"); });
  row("reclaimed nodes", [](sim_summary const& s) { return std::to_string(s.reclaimed_nodes); });
  row("scale-outs / scale-ins", [](sim_summary const& s) {
    return std::to_string(s.scale_outs) + "/" + std::to_string(s.scale_ins);
  });
  row("reservations (sum)", [](sim_summary const& s) { return std::to_string(s.reservations); });
  row("deferred job-rounds", [](sim_summary const& s) { return std::to_string(s.deferred_job_rounds); });
  row("slowdown multi-node mean", [&](sim_summary const& s) {
    return f(s.slowdown_multi_node, "%.3f") + " (" + std::to_string(s.multi_node_jobs) + ")";
  });
  row("slowdown GPU-weighted", [&](sim_summary const& s) { return f(s.slowdown_gpu_weighted, "%.4f"); });
  bool inference = false;
  for (auto const& s : runs) inference = inference || s.wait_inference.n > 0;
  if (inference) {
    row("JWTD inference p50/p99", [&](sim_summary const& s) {
      return f(s.wait_inference.p50, "%.0f") + "/" + f(s.wait_inference.p99, "%.0f");
    });
    row("JWTD training p50/p99", [&](sim_summary const& s) {
      return f(s.wait_training.p50, "%.0f") + "/" + f(s.wait_training.p99, "%.0f");
    });
    row("JCT training mean / s", [&](sim_summary const& s) { return f(s.jct_training.mean, "%.0f"); });
    row("GPUs inference / loaned", [&](sim_summary const& s) {
      return f(s.inference_gpus_mean, "%.1f") + "/" + f(s.loaned_gpus_mean, "%.1f");
    });
  }
  row("queue mean / max", [&](sim_summary const& s) { return f(s.queue_mean, "%.1f") + "/" + std::to_string(s.queue_max); });
  row("rounds (solver calls)", [](sim_summary const& s) { return std::to_string(s.rounds); });
  row("placements / wall s", [&](sim_summary const& s) { return f(s.placements_per_wall_second, "%.0f"); });
  row("wall s (solver s)", [&](sim_summary const& s) {
    return f(s.wall_seconds, "%.2f") + " (" + f(s.wall_solver_seconds, "%.2f") + ")";
  });
  std::map<std::string, int> reasons;
  for (auto const& s : runs) for (auto const& [k, v] : s.unplaced) reasons[k] = 1;
  for (auto const& [k, unused] : reasons) {
    std::string const name = "unplaced " + k;
    row(name.c_str(), [&](sim_summary const& s) {
      auto it = s.unplaced.find(k);
      return std::to_string(it == s.unplaced.end() ? 0 : it->second);
    });
  }
  return o.str();
}

std::string timeseries_csv(sim_result const& r) {
  std::ostringstream o;
  o << "time,gar,gfr,frag_ratio,queue,running,allocated_gpus,demand_gpus,inference_gpus,loaned_gpus\n";
  for (auto const& x : r.series) {
    o << x.time << ',' << num(x.gar) << ',' << num(x.gfr) << ',' << num(x.frag) << ',' << x.queue << ','
      << x.running << ',' << num(static_cast<double>(x.allocated_milli) / milli_per_gpu) << ','
      << num(static_cast<double>(x.demand_milli) / milli_per_gpu) << ','
      << num(static_cast<double>(x.inference_milli) / milli_per_gpu) << ','
      << num(static_cast<double>(x.loaned_milli) / milli_per_gpu) << '\n';
  }
  return o.str();
}

std::string jobs_csv(sim_result const& r) {
  std::ostringstream o;
  o << "id,submit,start,end,gpus,wait,jct,kind,priority,starts,preemptions,lost_gpu_s,run_s,slowdown,max_nodes\n";
  for (auto const& j : r.jobs) {
    o << j.name << ',' << j.submit << ',';
    if (j.start >= 0) o << j.start;
    o << ',';
    if (j.end >= 0) o << j.end;
    o << ',' << num(static_cast<double>(j.gpu_milli) / milli_per_gpu) << ',';
    if (j.start >= 0) o << (j.start - j.submit);
    o << ',';
    if (j.end >= 0) o << (j.end - j.submit);
    o << ',' << (j.kind == job_kind::inference ? "inference" : j.kind == job_kind::batch ? "batch" : "training") << ','
      << j.priority << ',' << j.starts << ',' << j.preemptions << ','
      << num(static_cast<double>(j.lost_gpu_milli_seconds) / milli_per_gpu) << ',' << j.run_seconds << ','
      << num(j.slowdown) << ',' << j.max_nodes << '\n';
  }
  return o.str();
}

plot_series bucket_means(sim_result const& r, std::string label, double sample::*field) {
  plot_series out{std::move(label), {}, {}};
  std::int64_t const span = std::max<std::int64_t>(r.t_end - r.t_begin, 1);
  std::int64_t const buckets = std::min<std::int64_t>(400, span);
  std::vector<double> sum(static_cast<std::size_t>(buckets), 0), time(sum);
  for (std::size_t k = 0; k < r.series.size(); ++k) {
    std::int64_t a = r.series[k].time;
    std::int64_t const b = r.sample_end(k);
    while (a < b) {  // split [a, b) at bucket edges
      auto const bi = std::min<std::int64_t>((a - r.t_begin) * buckets / span, buckets - 1);
      std::int64_t const edge = r.t_begin + ((bi + 1) * span + buckets - 1) / buckets;
      std::int64_t const stop = std::min(b, std::max(edge, a + 1));
      auto const dt = static_cast<double>(stop - a);
      sum[static_cast<std::size_t>(bi)] += r.series[k].*field * dt;
      time[static_cast<std::size_t>(bi)] += dt;
      a = stop;
    }
  }
  for (std::int64_t bi = 0; bi < buckets; ++bi) {
    auto const u = static_cast<std::size_t>(bi);
    if (time[u] <= 0) continue;
    out.x.push_back((static_cast<double>(bi) + 0.5) * static_cast<double>(span) / static_cast<double>(buckets) / 3600.0);
    out.y.push_back(100 * sum[u] / time[u]);
  }
  return out;
}

void write_outputs(std::string const& dir, std::vector<sim_result> const& results,
                   std::vector<sim_summary> const& sums, std::string const& config_json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  auto const path = [&](std::string const& f) { return (std::filesystem::path(dir) / f).string(); };
  write_file(path("summary.json"), summary_json(sums, config_json, true));
  bool const many = results.size() > 1;
  line_plot gar, jw, jc;
  gar.title = "GPU allocation and FGD fragmentation (time-weighted bucket means)";
  gar.x_label = "simulated time (h)";
  gar.y_label = "%";
  jw.title = "Job waiting time (JWTD)";
  jw.x_label = "wait (s, log scale; waits under 1 s shown at 1 s)";
  jw.y_label = "fraction of started jobs";
  jc.title = "Job completion time";
  jc.x_label = "JCT (s, log scale)";
  jc.y_label = "fraction of finished jobs";
  jw.steps = jc.steps = true;
  jw.log_x = jc.log_x = true;
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    std::string const alg = i < sums.size() ? sums[i].algorithm : std::string(algorithm_name(r.config.algo));
    std::string const sfx = many ? "_" + file_safe(alg) : "";
    write_file(path("timeseries" + sfx + ".csv"), timeseries_csv(r));
    write_file(path("jobs" + sfx + ".csv"), jobs_csv(r));
    gar.series.push_back(bucket_means(r, "GAR " + alg, &sample::gar));
    gar.series.push_back(bucket_means(r, "FGD frag ratio " + alg, &sample::frag));
    std::vector<double> w, c;
    for (auto const& j : r.jobs) {
      if (j.start >= 0) w.push_back(std::max<double>(static_cast<double>(j.start - j.submit), 1.0));
      if (j.end >= 0) c.push_back(std::max<double>(static_cast<double>(j.end - j.submit), 1.0));
    }
    jw.series.push_back(cdf(alg, std::move(w)));
    jc.series.push_back(cdf(alg, std::move(c)));
  }
  write_svg(gar, path("gar.svg"));
  write_svg(jw, path("jwtd_cdf.svg"));
  write_svg(jc, path("jct_cdf.svg"));
}

std::string json_quote(std::string const& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

}  // namespace placer::sim
