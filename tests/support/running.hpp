#pragma once
// A hand-placed running job for the cross-round policy tests.
#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace placer::testing_support {

/// A running job with one replica per (node, whole GPUs) entry, one core and
/// 1 GiB each, its resources taken from in.state; last checkpoint
/// secs_since_ckpt before in.now (lost work = GPUs x 1000 x secs_since_ckpt).
/// Work that is not inference on an inference node is marked loaned.
inline running_job& run_on(round_input& in, std::string name,
                           std::vector<std::pair<int, std::vector<int>>> const& reps, std::int64_t secs_since_ckpt,
                           job_kind kind = job_kind::training) {
  running_job r;
  r.name = std::move(name);
  r.kind = kind;
  r.per_replica.gpus = static_cast<int>(reps.front().second.size());
  r.per_replica.cpu_milli = 1000;
  r.per_replica.memory_mib = 1024;
  r.gang = reps.size() > 1;
  r.last_checkpoint = in.now - secs_since_ckpt;
  for (auto const& [n, gpus] : reps) {
    auto& nd = in.state.nodes[static_cast<std::size_t>(n)];
    for (auto g : gpus) nd.gpu_free_milli[static_cast<std::size_t>(g)] -= 1000;
    nd.cpu_milli_free -= 1000;
    nd.memory_mib_free -= 1024;
    r.replicas.push_back({n, gpus, 1000});
    r.loaned = r.loaned || (kind != job_kind::inference && nd.pool == pool_kind::inference);
  }
  in.running.push_back(std::move(r));
  return in.running.back();
}

}  // namespace placer::testing_support
