#pragma once
// A round's assignment alone (detail::assigner on the CPU backend: no
// order reassignment, no Slurm candidate, no repair search, no packing
// repair), for tests of the solver's internals (targets that include
// solver/src).
#include "assigner.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/solver/matrices.hpp>

#include <vector>

namespace placer::testing_support {

/// The round's matrices as the assignment leaves them, and its result.
struct assigned {
  round_matrices m;
  round_result out;
  kernels::score_params params;  ///< the round's weights, as solve passes them
};

/// `linear`: greedy mode with Slurm's node choice (assigner::linear).
inline assigned assign_only(round_input const& in, detail::assign_mode mode, bool linear = false) {
  assigned a;
  a.m = build_matrices(in);
  auto& p = a.params;
  p.w_binpack = in.pol.w.binpack;
  p.w_fragmentation = in.pol.w.fragmentation;
  p.w_pool_affinity = in.pol.w.pool_affinity;
  p.w_scarcity = in.pol.w.scarcity;
  p.w_affinity = in.pol.w.affinity;
  std::vector<std::int32_t> scores(static_cast<std::size_t>(a.m.n_nodes()) * a.m.n_classes());
  auto b = kernels::make_backend(kernels::backend_kind::cpu);
  b->score(a.m.nodes(), a.m.classes(), a.m.tasks(), p, scores);
  detail::assigner_scratch scratch;
  detail::assigner as(in, a.m, scores, p, *b, mode, scratch);
  as.linear(linear);
  as.run(a.out, [] { return false; });
  return a;
}

}  // namespace placer::testing_support
