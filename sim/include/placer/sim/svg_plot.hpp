#pragma once
// Dependency-free SVG line charts for the simulator, the experiments and
// the benchmarks (the machines have no plotting library; an SVG opens in any
// browser and renders to PNG with standard tools).
//
//   placer::sim::line_plot p{"GPU allocation", "arrived demand (%)", "allocated (%)"};
//   p.series.push_back({"FGD", xs, ys});
//   placer::sim::write_svg(p, "alloc.svg");   // throws std::runtime_error naming the path

#include <string>
#include <vector>

namespace placer::sim {

struct plot_series {
  std::string label;
  std::vector<double> x, y;
};

struct line_plot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<plot_series> series;
  bool log_x = false;  ///< logarithmic x axis (positive x only)
  bool steps = false;  ///< draw as a step function (CDFs)
};

/// The chart as an SVG document (800 x 500).
std::string to_svg(line_plot const& p);
void write_svg(line_plot const& p, std::string const& path);

/// Empirical CDF of samples: x = sorted values, y = fraction <= x.
plot_series cdf(std::string label, std::vector<double> samples);

}  // namespace placer::sim
