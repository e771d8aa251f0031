#pragma once
// Random rounds for property tests: small clusters with a topology, random
// free state, unhealthy GPUs and nodes, several models and pools; jobs of
// every shape (CPU-only, fractional, multi-GPU, gangs, topology needs).
#include <placer/solver/model.hpp>

#include <random>

namespace placer::testing_support {

inline round_input random_round(std::mt19937_64& rng, int max_nodes_per_leaf = 6, int max_jobs = 30) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static char const* const models[] = {"A100", "H100", "T4"};
  round_input in;
  in.state = make_cluster()
                 .spines(pick(1, 2))
                 .leaves_per_spine(pick(1, 3))
                 .nodes_per_leaf(pick(1, max_nodes_per_leaf))
                 .gpus(pick(0, 1) == 0 ? 8 : pick(1, 4))
                 .cpu_milli(pick(8, 64) * 1000)
                 .memory_mib(pick(16, 256) * 1024)
                 .build();
  for (auto& n : in.state.nodes) {
    n.gpu_model = n.gpu_count() > 0 ? models[pick(0, 2)] : "";
    n.pool = static_cast<pool_kind>(pick(0, 2));
    n.loanable = pick(0, 1) == 1;
    n.healthy = pick(0, 19) != 0;
    for (auto& f : n.gpu_free_milli) {
      int const r = pick(0, 9);
      f = r < 5 ? 1000 : r < 7 ? 0 : pick(0, 10) * 100;
    }
    if (pick(0, 4) == 0 && n.gpu_count() > 0) {
      n.gpu_healthy.assign(n.gpu_free_milli.size(), 1);
      n.gpu_healthy[pick(0, n.gpu_count() - 1)] = 0;
    }
    n.cpu_milli_free = n.cpu_milli_capacity * pick(2, 10) / 10;
    n.memory_mib_free = n.memory_mib_capacity * pick(2, 10) / 10;
  }
  int const jobs = pick(0, max_jobs);
  for (int k = 0; k < jobs; ++k) {
    job j;
    j.name = "job-" + std::to_string(k);
    j.kind = static_cast<job_kind>(pick(0, 2));
    j.priority = pick(0, 3);
    int const shape = pick(0, 9);
    if (shape == 0) {
      j.per_replica.gpus = 0;
    } else if (shape < 4) {
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = pick(1, 10) * 100 - pick(0, 50);
    } else {
      j.per_replica.gpus = std::min(8, 1 << pick(0, 3));
    }
    j.per_replica.cpu_milli = pick(0, 16) * 1000;
    j.per_replica.memory_mib = pick(0, 64) * 1024;
    j.replicas = pick(0, 3) == 0 ? pick(2, 6) : 1;
    j.gang = j.replicas > 1 && pick(0, 1) == 1;
    if (pick(0, 3) == 0) j.allowed_gpu_models = {models[pick(0, 2)]};
    if (j.replicas > 1 && pick(0, 2) == 0) {
      j.topology_level = pick(1, 2);
      j.topo_mode = pick(0, 1) == 0 ? topology_mode::required : topology_mode::preferred;
    }
    j.network_sensitivity = static_cast<float>(pick(0, 10)) / 10.0F;
    j.submit_time = pick(0, 1000);
    // A quarter of the multi-replica jobs want distinct nodes; no draw of
    // its own, so the rest of the stream (and every seeded test) is as before.
    j.distinct_nodes = j.replicas > 1 && j.submit_time % 4 == 0;
    in.pending.push_back(std::move(j));
  }
  return in;
}

/// Gives a round Kubernetes-style constraints: node labels (zone, rack, a
/// numeric generation, sometimes none), taints on some nodes (every
/// effect), and on about half the jobs a node selector, required and
/// preferred node affinity (every operator) and tolerations.
inline void add_random_constraints(std::mt19937_64& rng, round_input& in) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static char const* const zones[] = {"a", "b", "c"};
  static char const* const teams[] = {"infer", "research"};
  for (auto& n : in.state.nodes) {
    n.labels.clear();
    n.taints.clear();
    if (pick(0, 9) == 0) continue;  // unlabelled
    n.labels.push_back(std::string("zone=") + zones[pick(0, 2)]);
    n.labels.push_back("rack=r" + std::to_string(pick(0, 3)));
    if (pick(0, 1) == 0) n.labels.push_back("gen=" + std::to_string(pick(1, 5)));
    if (pick(0, 3) == 0) n.labels.push_back("ssd");
    if (pick(0, 3) == 0) {
      n.taints.push_back({"team", teams[pick(0, 1)], static_cast<taint_effect>(pick(0, 2))});
    }
  }
  for (auto& j : in.pending) {
    auto& c = j.constraints;
    c = {};
    if (pick(0, 1) == 0) continue;
    if (pick(0, 2) == 0) c.node_selector.push_back(std::string("zone=") + zones[pick(0, 2)]);
    auto requirement = [&] {
      selector_requirement e;
      e.op = static_cast<selector_op>(pick(0, 5));
      switch (e.op) {
        case selector_op::in:
        case selector_op::not_in:
          e.key = "zone";
          for (int k = pick(1, 2); k > 0; --k) e.values.push_back(zones[pick(0, 2)]);
          break;
        case selector_op::exists:
        case selector_op::does_not_exist: e.key = pick(0, 1) == 0 ? "ssd" : "gen"; break;
        case selector_op::gt:
        case selector_op::lt:
          e.key = "gen";
          e.values.push_back(std::to_string(pick(0, 5)));
          break;
      }
      return e;
    };
    if (pick(0, 2) == 0) {
      for (int t = pick(1, 2); t > 0; --t) {
        selector_term term;
        for (int k = pick(1, 2); k > 0; --k) term.match.push_back(requirement());
        c.required.push_back(term);
      }
    }
    if (pick(0, 2) == 0) {
      for (int t = pick(1, 2); t > 0; --t) c.preferred.push_back({pick(1, 100), {{requirement()}}});
    }
    if (pick(0, 1) == 0) {
      toleration o;
      o.op = static_cast<toleration_op>(pick(0, 1));
      o.key = o.op == toleration_op::exists && pick(0, 2) == 0 ? "" : "team";
      if (o.op == toleration_op::equal) o.value = teams[pick(0, 1)];
      o.effect = static_cast<std::int8_t>(pick(-1, 2));
      c.tolerations.push_back(o);
    }
  }
}

/// The cluster `first` leaves once `placed` is applied, its placements as
/// running jobs (random priority, preemptibility, sensitivity, progress
/// since the last checkpoint and estimated end; elastic around their size
/// in elastic_pct of cases), at now = 10000; no pending jobs, no policy.
inline round_input with_running(std::mt19937_64& rng, round_input const& first, round_result const& placed,
                                int elastic_pct) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  round_input in;
  in.state = first.state;
  in.now = 10000;
  for (auto const& p : placed.placements) {
    auto const& j = first.pending[static_cast<std::size_t>(p.job)];
    auto const n = static_cast<std::int32_t>(p.replicas.size());
    running_job rj;
    rj.name = "run-" + j.name;
    rj.kind = j.kind;
    rj.priority = pick(0, 3);
    rj.per_replica = j.per_replica;
    rj.replicas = p.replicas;
    rj.gang = j.gang || n > 1;
    rj.preemptible = pick(0, 2) != 0;
    if (pick(0, 99) < elastic_pct) {
      rj.min_replicas = pick(1, n);
      rj.max_replicas = n + pick(0, 3);
    }
    rj.network_sensitivity = static_cast<float>(pick(0, 10)) / 10.0F;
    rj.start_time = in.now - pick(10, 5000);
    rj.last_checkpoint = rj.start_time + pick(0, static_cast<int>(in.now - rj.start_time));
    rj.estimated_end = in.now + pick(-100, 3000);
    for (auto const& rp : p.replicas) {
      auto& nd = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
      nd.cpu_milli_free -= j.per_replica.cpu_milli;
      nd.memory_mib_free -= j.per_replica.memory_mib;
      rj.loaned = rj.loaned || (j.kind != job_kind::inference && nd.pool == pool_kind::inference);
    }
    in.running.push_back(std::move(rj));
  }
  return in;
}

}  // namespace placer::testing_support
