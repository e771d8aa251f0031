// Validation, per-node domain paths and the synthetic cluster builder.
#include <placer/topology/cluster.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>

namespace placer {

namespace {
std::string node_ctx(cluster const& c, std::size_t i) {
  return "node " + std::to_string(i) + " ('" + c.nodes[i].name + "')";
}
}  // namespace

std::string node_problem(node const& n, std::int32_t n_domains) {
  if (n.name.empty()) return "has no name";
  // Bounded so that the scores' per-mille products stay far inside int64
  // (a fuzzer found 6.7e16 * 1000): 2^40 milli-CPU is a billion cores.
  if (n.cpu_milli_capacity > max_resource || n.memory_mib_capacity > max_resource) {
    return "cpu_milli_capacity and memory_mib_capacity must be at most 2^40";
  }
  if (n.cpu_milli_free < 0 || n.cpu_milli_free > n.cpu_milli_capacity) {
    return "cpu_milli_free must be in 0..cpu_milli_capacity";
  }
  if (n.memory_mib_free < 0 || n.memory_mib_free > n.memory_mib_capacity) {
    return "memory_mib_free must be in 0..memory_mib_capacity";
  }
  if (n.gpu_free_milli.size() > 64) return "has more than 64 GPUs";
  for (auto f : n.gpu_free_milli) {
    if (f < 0 || f > milli_per_gpu) return "gpu_free_milli must be in 0..1000";
  }
  if (!n.gpu_healthy.empty() && n.gpu_healthy.size() != n.gpu_free_milli.size()) {
    return "gpu_healthy must be empty or have one entry per GPU";
  }
  if (!n.gpu_nvlink.empty() && n.gpu_nvlink.size() != n.gpu_free_milli.size()) {
    return "gpu_nvlink must be empty or have one entry per GPU";
  }
  for (auto const& l : n.labels) {
    if (l.empty() || l.front() == '=') return "a label must be key=value with a key: '" + l + "'";
  }
  for (auto const& t : n.taints) {
    if (t.key.empty()) return "a taint has no key";
  }
  if (n.domain < -1 || n.domain >= n_domains) {
    return "domain " + std::to_string(n.domain) + " is not a topology domain index";
  }
  return {};
}

void validate(cluster const& c, bool nodes) {
  auto const& t = c.topo;
  auto const nd = static_cast<std::int32_t>(t.domains.size());
  for (std::int32_t d = 0; d < nd; ++d) {
    auto const& dom = t.domains[d];
    PLACER_EXPECTS(dom.level >= 0 && dom.level < t.levels(),
                   "topology domain " + std::to_string(d) + " has level " + std::to_string(dom.level) +
                       " outside 0.." + std::to_string(t.levels() - 1));
    PLACER_EXPECTS(dom.parent >= -1 && dom.parent < nd,
                   "topology domain " + std::to_string(d) + " has parent " + std::to_string(dom.parent) +
                       " out of range");
    if (dom.parent >= 0) {
      PLACER_EXPECTS(t.domains[dom.parent].level < dom.level,
                     "topology domain " + std::to_string(d) + " must sit below its parent's level (no cycles)");
    }
  }
  for (std::size_t i = 0; nodes && i < c.nodes.size(); ++i) {
    auto const problem = node_problem(c.nodes[i], nd);
    PLACER_EXPECTS(problem.empty(), node_ctx(c, i) + ": " + problem);
  }
}

std::vector<std::int32_t> node_domain_paths(cluster const& c) {
  std::vector<std::int32_t> paths;
  node_domain_paths(c, paths);
  return paths;
}

void node_domain_paths(cluster const& c, std::vector<std::int32_t>& paths) {
  auto const levels = static_cast<std::size_t>(std::max<std::int32_t>(c.topo.levels(), 1));
  auto const nodes = c.nodes.size();
  // Each domain's path first, past the nodes' (a walk up from it;
  // validate() guarantees levels strictly decrease, so at most `levels`
  // steps), then each node's copied from its lowest domain's: a walk a
  // node was three dependent loads of the domains' records a node (100k:
  // 0.25 ms of every assignment).
  auto const domains = c.topo.domains.size();
  paths.assign((nodes + domains) * levels, -1);
  auto* const domain_path = paths.data() + nodes * levels;
  for (std::size_t k = 0; k < domains; ++k) {
    for (auto d = static_cast<std::int32_t>(k); d >= 0; d = c.topo.domains[d].parent) {
      domain_path[k * levels + static_cast<std::size_t>(c.topo.domains[d].level)] = d;
    }
  }
  for (std::size_t i = 0; i < nodes; ++i) {
    auto const d = c.nodes[i].domain;
    if (d < 0) continue;
    std::copy_n(domain_path + static_cast<std::size_t>(d) * levels, levels, paths.data() + i * levels);
  }
  paths.resize(nodes * levels);  // its capacity kept for the next round
}

cluster cluster_builder::build() const {
  cluster c;
  c.epoch = 1;
  c.topo.level_names = {"cluster", "spine", "leaf"};
  c.topo.domains.push_back({"cluster", 0, -1});
  for (int s = 0; s < spines_; ++s) {
    auto const spine = static_cast<std::int32_t>(c.topo.domains.size());
    c.topo.domains.push_back({"spine-" + std::to_string(s), 1, 0});
    for (int l = 0; l < leaves_; ++l) {
      auto const leaf = static_cast<std::int32_t>(c.topo.domains.size());
      c.topo.domains.push_back({"leaf-" + std::to_string(s) + "-" + std::to_string(l), 2, spine});
      for (int k = 0; k < nodes_per_leaf_; ++k) {
        node n;
        n.name = "node-" + std::to_string(s) + "-" + std::to_string(l) + "-" + std::to_string(k);
        n.gpu_model = gpus_ > 0 ? model_ : std::string{};
        n.gpu_free_milli.assign(gpus_, milli_per_gpu);
        if (islands_ > 1) {
          for (int g = 0; g < gpus_; ++g) n.gpu_nvlink.push_back(static_cast<std::uint8_t>(g * islands_ / gpus_));
        }
        n.cpu_milli_capacity = n.cpu_milli_free = cpu_;
        n.memory_mib_capacity = n.memory_mib_free = mem_;
        n.pool = pool_;
        n.domain = leaf;
        c.nodes.push_back(std::move(n));
      }
    }
  }
  return c;
}

}  // namespace placer
