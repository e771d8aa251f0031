// Synthetic scenarios (see synthetic.hpp). The job mix follows the shapes
// seen in the public traces: most jobs are one GPU or a share of one, a
// tail of multi-GPU jobs and a few large gangs hold most of the GPUs.
#include <placer/traces/synthetic.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <array>
#include <random>

namespace placer::traces {

scenario_options scenario_preset(std::string const& name) {
  for (std::string_view const suffix : {"-k8s", "-nfd", "-split"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      scenario_options o = scenario_preset(name.substr(0, name.size() - suffix.size()));
      o.constraints = suffix != "-split";
      o.split_classes = suffix == "-split";
      o.feature_labels = suffix == "-nfd" ? 40 : 0;
      return o;
    }
  }
  scenario_options o;
  o.name = name;
  if (name == "10k") return o;
  if (name == "100k") {
    o.nodes = 12800;
    o.pending = 5000;
    o.leaves_per_spine = 16;
    return o;
  }
  if (name == "1k") {
    o.nodes = 128;
    o.pending = 200;
    o.leaves_per_spine = 2;
    return o;
  }
  throw logic_error(error_code::invalid_argument, "unknown scenario '" + name + "' (1k, 10k, 100k, each also -k8s, -nfd and -split)");
}

namespace {

/// scenario_options::constraints, from a random stream of its own (the
/// nodes and jobs stay those of the round without); with split_classes,
/// the same draws split the jobs' classes instead.
void add_constraints(round_input& in, scenario_options const& o) {
  std::mt19937_64 rng(o.seed + 7);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto const nodes = static_cast<std::int32_t>(in.state.nodes.size());
  auto const leaves = (nodes + o.nodes_per_leaf - 1) / o.nodes_per_leaf;
  auto const zones = (leaves + o.leaves_per_spine - 1) / o.leaves_per_spine;
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (std::int32_t i = 0; i < nodes; ++i) {
    auto& n = in.state.nodes[static_cast<std::size_t>(i)];
    auto const leaf = i / o.nodes_per_leaf;
    n.labels = {"kubernetes.io/hostname=" + n.name, "topology.kubernetes.io/zone=z" + std::to_string(leaf / o.leaves_per_spine % 3),
                "rack=r" + std::to_string(leaf), "nvidia.com/gpu.product=" + n.gpu_model + "-SXM"};
    for (std::int32_t k = 0; k < o.feature_labels; ++k) {
      static constexpr std::array<std::pair<char const*, char const*>, 8> features{{
          {"feature.node.kubernetes.io/cpu-cpuid.AVX512F", "true"},
          {"feature.node.kubernetes.io/kernel-version.full", "6.1.0-18-amd64"},
          {"feature.node.kubernetes.io/pci-10de.present", "true"},
          {"nvidia.com/cuda.driver.major", "550"},
          {"nvidia.com/gpu.memory", "81559"},
          {"nvidia.com/gpu.count", "8"},
          {"nvidia.com/mig.capable", "true"},
          {"feature.node.kubernetes.io/system-os_release.ID", "ubuntu"},
      }};
      auto const& [key, value] = features[static_cast<std::size_t>(k) % features.size()];
      n.labels.push_back(std::string(key) + (k < 8 ? "" : std::to_string(k / 8)) + "=" + value);
    }
    if (chance(0.05)) {
      n.labels.emplace_back("node-role=inference");
      n.taints.push_back({"team", "inference", taint_effect::no_schedule});
    } else if (chance(0.10)) {
      n.taints.push_back({"spot", "", taint_effect::prefer_no_schedule});
    }
    if (o.split_classes) {  // the draws taken, nothing kept
      n.labels.clear();
      n.taints.clear();
    }
  }
  for (auto& j : in.pending) {
    if (o.split_classes) {  // the same draws as below, a memory request per constraint set
      auto& mib = j.per_replica.memory_mib;
      if (j.kind == job_kind::inference) {
        mib += 1;
      } else if (chance(0.25)) {
        mib += 2 + uni(0, std::min(zones, 3) - 1);
      } else if (chance(0.2)) {
        mib += 5;
      }
      continue;
    }
    auto& c = j.constraints;
    if (j.kind == job_kind::inference) {
      c.tolerations.push_back({"team", toleration_op::equal, "inference", -1});
      c.preferred.push_back({50, {{{"node-role", selector_op::in, {"inference"}}}}});
    } else if (chance(0.25)) {
      c.node_selector.push_back("topology.kubernetes.io/zone=z" + std::to_string(uni(0, std::min(zones, 3) - 1)));
    } else if (chance(0.2)) {
      c.required.push_back({{{"rack", selector_op::not_in, {"r0", "r1"}}}});  // racks in maintenance
    }
  }
}

}  // namespace

round_input make_scenario(scenario_options const& o) {
  PLACER_EXPECTS(o.nodes > 0 && o.gpus_per_node > 0 && o.nodes_per_leaf > 0 && o.leaves_per_spine > 0,
                 "scenario sizes must be positive");
  std::mt19937_64 rng(o.seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };

  int const leaves = (o.nodes + o.nodes_per_leaf - 1) / o.nodes_per_leaf;
  int const spines = (leaves + o.leaves_per_spine - 1) / o.leaves_per_spine;
  round_input in;
  in.state = make_cluster()
                 .spines(spines)
                 .leaves_per_spine(o.leaves_per_spine)
                 .nodes_per_leaf(o.nodes_per_leaf)
                 .gpus(o.gpus_per_node)
                 .nvlink_islands(o.gpus_per_node >= 8 ? 2 : 1)
                 .cpu_milli(o.gpus_per_node * 16000)
                 .memory_mib(static_cast<std::int64_t>(o.gpus_per_node) * 128 * 1024)
                 .build();
  in.state.nodes.resize(static_cast<std::size_t>(o.nodes));

  // Allocation: a third of the used capacity sits on whole nodes (large
  // jobs), the rest is scattered, with some GPUs shared fractionally.
  std::int64_t const total = static_cast<std::int64_t>(o.nodes) * o.gpus_per_node * milli_per_gpu;
  std::int64_t const target = static_cast<std::int64_t>(o.allocated * static_cast<double>(total));
  std::int64_t used = 0;
  std::vector<std::int32_t> order(static_cast<std::size_t>(o.nodes));
  for (std::int32_t i = 0; i < o.nodes; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t k = 0;
  while (used < target / 3 && k < order.size()) {
    auto& n = in.state.nodes[static_cast<std::size_t>(order[k++])];
    std::fill(n.gpu_free_milli.begin(), n.gpu_free_milli.end(), 0);
    n.cpu_milli_free = n.cpu_milli_capacity / 4;
    n.memory_mib_free = n.memory_mib_capacity / 4;
    used += static_cast<std::int64_t>(o.gpus_per_node) * milli_per_gpu;
  }
  std::int64_t guard = 0;
  int const rest = o.nodes - static_cast<int>(k);
  while (rest > 0 && used < target && guard++ < total) {
    auto& n = in.state.nodes[static_cast<std::size_t>(order[k + static_cast<std::size_t>(uni(0, rest - 1))])];
    auto& g = n.gpu_free_milli[static_cast<std::size_t>(uni(0, o.gpus_per_node - 1))];
    if (g == 0) continue;
    std::int32_t const take = chance(0.3) ? std::min<std::int32_t>(g, uni(1, 8) * 100) : g;
    g -= take;
    used += take;
    n.cpu_milli_free = std::max<std::int64_t>(0, n.cpu_milli_free - take * 12);
    n.memory_mib_free = std::max<std::int64_t>(0, n.memory_mib_free - take * 96);
  }

  // Pending jobs.
  in.pending.reserve(static_cast<std::size_t>(o.pending));
  for (std::int32_t i = 0; i < o.pending; ++i) {
    job j;
    j.name = o.name + "-job-" + std::to_string(i);
    j.priority = uni(0, 3);
    j.submit_time = i;
    j.estimated_duration = 600 * uni(1, 48);
    j.preemptible = chance(0.5);
    double const r = std::uniform_real_distribution<double>(0, 1)(rng);
    if (r < o.inference_share) {
      j.kind = job_kind::inference;
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = chance(0.5) ? uni(1, 9) * 100 : 1000;
      j.replicas = uni(1, 4);
    } else if (r < o.inference_share + 0.40) {
      j.per_replica.gpus = 1;  // single GPU
    } else if (r < o.inference_share + 0.55) {
      j.per_replica.gpus = 1;  // fractional
      j.per_replica.gpu_milli = uni(1, 9) * 100;
    } else if (r < o.inference_share + 0.75) {
      j.per_replica.gpus = 1 << uni(1, 3);  // 2, 4, 8 GPUs on one node
    } else if (r < 0.97) {
      j.per_replica.gpus = 0;  // CPU-only batch
      j.kind = job_kind::batch;
    } else {
      // Multi-node gang of 16..256 GPUs, communication-heavy.
      j.per_replica.gpus = o.gpus_per_node;
      j.replicas = std::max(2, (16 << uni(0, 4)) / o.gpus_per_node);
      j.gang = true;
      j.network_sensitivity = 0.8F;
      j.topology_level = 1;  // spine
      j.topo_mode = chance(0.5) ? topology_mode::required : topology_mode::preferred;
    }
    j.per_replica.cpu_milli = std::max(1, j.per_replica.gpus) * 8000 / (j.per_replica.gpu_milli < 1000 ? 2 : 1);
    j.per_replica.memory_mib = std::max(1, j.per_replica.gpus) * 32 * 1024;
    in.pending.push_back(std::move(j));
  }
  if (o.constraints || o.split_classes) add_constraints(in, o);
  return in;
}

}  // namespace placer::traces
