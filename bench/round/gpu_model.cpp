// gpu_model: a round's GPU time predicted on this machine, beside its CPU
// time measured in the same run (kernels/include/placer/kernels/gpu_model.hpp,
// solver/include/placer/solver/gpu_prediction.hpp).
//
//   gpu_model [--scenario 10k,100k,openb] [--threads 512] [--offer-least N]
//             [--offer-bits N] [--offer-iterate 0|1] [--offer-groups N] [--refresh-below N] [--order fifo|pack] [--reps 7]
//             [--offer-pairs N] [--blocks 33] [--grid-cells-from N] [--list-upto N]
//             [--refresh-one-pass 0|1] [--refresh-lanes 0|1] [--losers-sit-out 0|1] [--json FILE]
//
// --offer-groups: a round's offers on warps where no row got more than N
// bids (tier_buffers::offer_groups): 0 never, 2147483647 always.
//
// For each scenario: the CPU backend's round (median of --reps after a
// warm-up) and its tier phases; then two rounds through the GPU model, the
// second counted: per phase the barriers, the span, its chained steps and
// the work (on a grid of --blocks CTAs, the busiest CTA's, and the
// grid's barriers as "grid"), and the predicted time. --json writes one object per scenario (bench/gpu_model/
// fit.py reads them).
#include "scenarios.hpp"

#include <placer/solver/gpu_prediction.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

/// A phase's counts; the offers' are the whole CTA's and the warps' together
/// (gpu_counts::offer_group, also written apart as "offer_group").
placer::kernels::gpu_phase_counts phase_counts(placer::kernels::gpu_counts const& c, int p) {
  placer::kernels::gpu_phase_counts k = c.phase[p];
  if (p == placer::kernels::tier_phase_offer) k += c.offer_group;
  return k;
}

using namespace placer;

int usage(char const* why) {
  std::cerr << "gpu_model: " << why
            << "\nusage: gpu_model [--scenario 10k,100k,openb] [--threads 256|512|1024] [--offer-least N]"
               " [--offer-bits N] [--offer-iterate 0|1] [--offer-groups N] [--refresh-below N] [--order fifo|pack] [--reps N]"
               " [--offer-pairs N] [--blocks N] [--grid-cells-from N] [--list-upto N] [--refresh-one-pass 0|1]"
               " [--refresh-lanes 0|1] [--losers-sit-out 0|1] [--json FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names{"10k", "100k", "openb"};
  kernels::gpu_model_config config;
  queue_order order = queue_order::fifo;
  int reps = 7;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 >= argc) return usage(("no value after " + a).c_str());
    std::string const v = argv[++i];
    try {
      if (a == "--scenario") {
        names = bench::scenario_list(v);
      } else if (a == "--threads") {
        config.threads = std::stoi(v);
      } else if (a == "--offer-least") {
        config.offer_least = std::stoi(v);
      } else if (a == "--offer-bits") {
        config.offer_bits = std::stoi(v);
      } else if (a == "--offer-iterate") {
        config.offer_iterate = std::stoi(v) != 0;
      } else if (a == "--offer-groups") {
        config.offer_groups = std::stoi(v);
      } else if (a == "--offer-pairs") {
        config.offer_pairs = std::stoi(v);
      } else if (a == "--blocks") {
        config.blocks = std::stoi(v);
      } else if (a == "--list-upto") {
        config.list_upto = std::stoi(v);
      } else if (a == "--refresh-one-pass") {
        config.refresh_one_pass = std::stoi(v) != 0;
      } else if (a == "--refresh-lanes") {
        config.refresh_lanes = std::stoi(v) != 0;
      } else if (a == "--losers-sit-out") {
        config.losers_sit_out = std::stoi(v) != 0;
      } else if (a == "--grid-cells-from") {
        config.grid_cells_from = std::stoll(v);
      } else if (a == "--refresh-below") {
        config.refresh_below = std::stoi(v);
      } else if (a == "--order") {
        if (v != "fifo" && v != "pack") return usage("--order is fifo or pack");
        order = v == "fifo" ? queue_order::fifo : queue_order::pack;
      } else if (a == "--reps") {
        reps = std::max(1, std::stoi(v));
      } else if (a == "--json") {
        json = v;
      } else {
        return usage(("unknown option " + a).c_str());
      }
    } catch (std::exception const&) {
      return usage(("not a number: " + v).c_str());
    }
  }
  if (config.threads < 1 || config.threads > 1024) return usage("--threads is 1 to 1024");
  if (config.offer_bits == 0 || config.offer_bits > 8) return usage("--offer-bits is 1 to 8");
  if (config.blocks < 1 || config.blocks > 1024) return usage("--blocks is 1 to 1024");
  std::ofstream out;
  if (!json.empty()) {
    out.open(json);
    if (!out) return usage(("cannot write " + json).c_str());
  }
  kernels::gpu_cost const& cost = kernels::fitted_gpu_cost();
  std::printf("fixed costs: a launch %.2f us, a wait %.2f us, copies at %.1f GB/s (%s); a stage call's grid barrier "
              "%.2f us (the fitted grid barrier at %.0f CTAs, assumed)\n",
              cost.launch_us, cost.wait_us, cost.copy_gbps, cost.fixed_source,
              cost.grid_sync_us + cost.grid_sync_per_cta_us * stage_grid_ctas, stage_grid_ctas);
  std::printf("%-8s %9s %9s | %9s %9s %9s %9s | %8s %10s %9s %11s %6s\n", "scenario", "cpu ms", "cpu tier", "gpu ms",
              "tier", "fixed", "host", "barriers", "span", "chain", "work", "grid");
  for (std::string const& name : names) {
    round_input in;
    try {
      in = bench::scenario(name);
    } catch (std::exception const& e) {
      std::cerr << "gpu_model: " << name << ": " << e.what() << "\n";
      return 1;
    }
    in.pol.order = order;
    cpu_round_time const c = time_cpu_round(in, reps);
    gpu_prediction const g = predict_gpu_round(in, config, c.host_us());
    kernels::gpu_phase_counts const t = g.counts.total();
    std::printf("%-8s %9.2f %9.2f | %9.2f %9.2f %9.2f %9.2f | %8lld %10lld %9lld %11lld %6lld\n", name.c_str(),
                c.round_us / 1e3, c.tier_us / 1e3, g.round_us() / 1e3, g.tier_us / 1e3, g.fixed_us / 1e3,
                g.host_us / 1e3, static_cast<long long>(t.barriers), static_cast<long long>(t.span),
                static_cast<long long>(t.chain), static_cast<long long>(t.work), static_cast<long long>(t.grid_syncs));
    for (int p = 0; p < kernels::tier_phase_count; ++p) {
      kernels::gpu_phase_counts const k = phase_counts(g.counts, p);
      if (k.barriers == 0 && k.span == 0) continue;
      std::printf("  %-8s %29s %9.3f %29lld %10lld %9lld %11lld %6lld\n", kernels::tier_phase_names[p], "",
                  g.phase_us[p] / 1e3, static_cast<long long>(k.barriers), static_cast<long long>(k.span),
                  static_cast<long long>(k.chain), static_cast<long long>(k.work), static_cast<long long>(k.grid_syncs));
    }
    // The launches' steps outside the phases (gpu_counts::outside).
    kernels::gpu_phase_counts const& o = g.counts.outside;
    std::printf("  %-8s %29s %9.3f %29lld %10lld %9lld %11lld %6lld\n", "outside", "", g.outside_us / 1e3,
                static_cast<long long>(o.barriers), static_cast<long long>(o.span), static_cast<long long>(o.chain),
                static_cast<long long>(o.work), static_cast<long long>(o.grid_syncs));
    if (out) {
      out << "{\"scenario\":\"" << name << "\",\"order\":\"" << (order == queue_order::fifo ? "fifo" : "pack")
          << "\",\"threads\":" << config.threads << ",\"offer_least\":" << config.offer_least
          << ",\"refresh_below\":" << config.refresh_below << ",\"blocks\":" << config.blocks
          << ",\"offer_groups\":" << (config.offer_groups >= 0 ? config.offer_groups : kernels::tier_offer_groups_upto)
          << ",\"cpu_round_us\":" << c.round_us << ",\"cpu_tier_us\":" << c.tier_us << ",\"launches\":"
          << g.counts.launches << ",\"calls\":" << g.calls << ",\"waits\":" << g.waits << ",\"bytes\":" << g.bytes
          << ",\"stage_grid_syncs\":" << g.grid_syncs
          << ",\"fixed_us\":" << g.fixed_us << ",\"predicted_round_us\":" << g.round_us()
          << ",\"predicted_tier_us\":" << g.tier_us << ",\"phases\":{";
      for (int p = 0; p < kernels::tier_phase_count; ++p) {
        kernels::gpu_phase_counts const k = phase_counts(g.counts, p);
        out << (p > 0 ? "," : "") << "\"" << kernels::tier_phase_names[p] << "\":{\"barriers\":" << k.barriers
            << ",\"span\":" << k.span << ",\"chain\":" << k.chain << ",\"work\":" << k.work
            << ",\"grid_syncs\":" << k.grid_syncs << ",\"predicted_us\":" << g.phase_us[p]
            << ",\"cpu_us\":" << c.phase_us[p] << "}";
      }
      kernels::gpu_phase_counts const& w = g.counts.offer_group;
      out << "},\"offer_group\":{\"barriers\":" << w.barriers << ",\"span\":" << w.span << ",\"chain\":" << w.chain
          << ",\"work\":" << w.work << ",\"grid_syncs\":" << w.grid_syncs;
      out << "},\"outside\":{\"barriers\":" << o.barriers << ",\"span\":" << o.span << ",\"chain\":" << o.chain
          << ",\"work\":" << o.work << ",\"grid_syncs\":" << o.grid_syncs << ",\"predicted_us\":" << g.outside_us << "}}\n";
    }
  }
  return 0;
}
