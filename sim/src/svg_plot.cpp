// SVG line charts (see svg_plot.hpp): axes with "nice" ticks, one polyline
// per series in a fixed colour cycle, a legend in the top-left corner.
#include <placer/sim/svg_plot.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace placer::sim {

namespace {

constexpr double width = 800, height = 500, left = 70, right = 20, top = 40, bottom = 60;
constexpr char const* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(std::string const& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

/// Tick step of 1, 2 or 5 x 10^k giving about `n` ticks over [lo, hi].
double nice_step(double lo, double hi, int n) {
  double const raw = (hi - lo) / std::max(n, 1);
  if (raw <= 0) return 1;
  double const mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= f * mag) return f * mag;
  }
  return 10 * mag;
}

std::string num(double v) {
  // Compact labels: 20000 -> 20k, 2500000 -> 2.5M; tiny values in scientific.
  std::ostringstream o;
  double const a = std::fabs(v);
  if (a < 1e-9) return "0";  // no "-0" from rounding
  if (a >= 1e9) {
    o << std::round(v / 1e8) / 10 << "G";
  } else if (a >= 1e6) {
    o << std::round(v / 1e5) / 10 << "M";
  } else if (a >= 1e4) {
    o << std::round(v / 1e2) / 10 << "k";
  } else if (a < 1e-3 && v != 0) {
    o.precision(1);
    o << std::scientific << v;
  } else {
    o << std::round(v * 1000) / 1000;
  }
  return o.str();
}

}  // namespace

std::string to_svg(line_plot const& p) {
  double xlo = 1e300, xhi = -1e300, ylo = 1e300, yhi = -1e300;
  auto tx = [&](double x) { return p.log_x ? std::log10(std::max(x, 1e-12)) : x; };
  for (auto const& s : p.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (p.log_x && s.x[i] <= 0)) continue;
      xlo = std::min(xlo, tx(s.x[i]));
      xhi = std::max(xhi, tx(s.x[i]));
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
    }
  }
  if (xlo > xhi) { xlo = 0; xhi = 1; }
  if (ylo > yhi) { ylo = 0; yhi = 1; }
  if (xhi == xlo) xhi = xlo + 1;
  if (yhi == ylo) yhi = ylo + 1;
  double const ypad = (yhi - ylo) * 0.05;
  ylo -= ypad;
  yhi += ypad;
  double const pw = width - left - right, ph = height - top - bottom;
  auto px = [&](double x) { return left + (tx(x) - xlo) / (xhi - xlo) * pw; };
  auto py = [&](double y) { return top + (1 - (y - ylo) / (yhi - ylo)) * ph; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << esc(p.title) << "</text>\n";
  // Grid and ticks.
  double const ys = nice_step(ylo, yhi, 6);
  for (double y = std::ceil(ylo / ys) * ys; y <= yhi; y += ys) {
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
      << "\" stroke=\"#e0e0e0\"/><text x=\"" << left - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << num(y)
      << "</text>\n";
  }
  // x ticks (in axis units: log10 for a log axis). A log axis gets 1-2-5
  // ticks per decade when they fit, else plain steps of log10.
  std::vector<double> xticks;
  if (p.log_x) {
    bool const wide = xhi - xlo > 3;  // many decades: one tick per decade
    for (double e = std::floor(xlo); e <= std::ceil(xhi); e += 1) {
      for (double f : {1.0, 2.0, 5.0}) {
        if (wide && f != 1.0) continue;
        double const t = e + std::log10(f);
        if (t >= xlo && t <= xhi) xticks.push_back(t);
      }
    }
  }
  if (xticks.size() < 2) {
    xticks.clear();
    double const xs = nice_step(xlo, xhi, 8);
    for (double x = std::ceil(xlo / xs) * xs; x <= xhi; x += xs) xticks.push_back(x);
  }
  for (double x : xticks) {
    double const sx = left + (x - xlo) / (xhi - xlo) * pw;
    o << "<line x1=\"" << sx << "\" x2=\"" << sx << "\" y1=\"" << top << "\" y2=\"" << top + ph
      << "\" stroke=\"#e0e0e0\"/><text x=\"" << sx << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
      << num(p.log_x ? std::pow(10.0, x) : x) << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\"/>\n"
    << "<text x=\"" << left + pw / 2 << "\" y=\"" << height - 18 << "\" text-anchor=\"middle\">" << esc(p.x_label)
    << "</text>\n<text transform=\"translate(18," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << esc(p.y_label) << "</text>\n";
  // Series.
  for (std::size_t k = 0; k < p.series.size(); ++k) {
    auto const& s = p.series[k];
    std::string const colour = colours[k % (sizeof colours / sizeof *colours)];
    o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.8\" points=\"";
    double prev_y = 0;
    bool first = true;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (p.log_x && s.x[i] <= 0)) continue;
      if (p.steps && !first) o << px(s.x[i]) << "," << py(prev_y) << " ";
      o << px(s.x[i]) << "," << py(s.y[i]) << " ";
      prev_y = s.y[i];
      first = false;
    }
    o << "\"/>\n";
    double const ly = top + 14 + 16 * static_cast<double>(k);
    o << "<line x1=\"" << left + 10 << "\" x2=\"" << left + 34 << "\" y1=\"" << ly << "\" y2=\"" << ly << "\" stroke=\""
      << colour << "\" stroke-width=\"3\"/><text x=\"" << left + 40 << "\" y=\"" << ly + 4 << "\">" << esc(s.label)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

void write_svg(line_plot const& p, std::string const& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  f << to_svg(p);
  if (!f) throw std::runtime_error(path + ": write failed");
}

plot_series cdf(std::string label, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  plot_series s;
  s.label = std::move(label);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    s.x.push_back(samples[i]);
    s.y.push_back(static_cast<double>(i + 1) / static_cast<double>(samples.size()));
  }
  return s;
}

}  // namespace placer::sim
