// The spread-placement slowdown model (network_model.hpp).
#include <placer/solver/network_model.hpp>

#include <algorithm>
#include <set>

namespace placer {

spread placement_spread(cluster const& c, std::vector<replica_placement> const& replicas) {
  spread s;
  std::set<std::int32_t> nodes;
  for (auto const& rp : replicas) nodes.insert(rp.node);
  s.nodes = static_cast<std::int32_t>(nodes.size());
  if (s.nodes <= 1 || c.topo.empty()) return s;
  // Distinct domains per level, following each node's path to the root.
  std::int32_t const levels = c.topo.levels();
  std::vector<std::set<std::int32_t>> at(static_cast<std::size_t>(levels));
  for (auto n : nodes) {
    if (n < 0 || static_cast<std::size_t>(n) >= c.nodes.size()) continue;
    for (std::int32_t d = c.nodes[static_cast<std::size_t>(n)].domain; d >= 0;
         d = c.topo.domains[static_cast<std::size_t>(d)].parent) {
      auto const lv = c.topo.domains[static_cast<std::size_t>(d)].level;
      if (lv >= 0 && lv < levels) at[static_cast<std::size_t>(lv)].insert(d);
    }
  }
  for (std::int32_t lv = 1; lv < levels; ++lv) {
    if (at[static_cast<std::size_t>(lv)].size() > 1) ++s.levels_crossed;
  }
  return s;
}

double slowdown_factor(float sensitivity, spread const& s) {
  if (s.nodes <= 1) return 1.0;
  double const sens = std::clamp(static_cast<double>(sensitivity), 0.0, 1.0);
  return 1.0 + per_level_penalty * sens * s.levels_crossed;
}

}  // namespace placer
