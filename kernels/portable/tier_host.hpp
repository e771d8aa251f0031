#pragma once
// The tier program on the host (tier_program.hpp): its buffers laid out in
// one reused arena of host memory, run by a team of one (seq_team) or by
// the threads of one OpenMP parallel region (omp_team). The CPU backend's
// place_tier, and the ThreadSanitizer test's (tests/kernels/
// tier_team_tsan.cpp, built by clang against LLVM's OpenMP runtime).
// Host only; the CUDA twin is cuda_team in cuda_backend.cu (one CTA).

#include "tier_program.hpp"

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The threads of one OpenMP parallel region as a Team. sync() is an
/// `omp barrier` (orphaned: called from inside the region), fetch_add an
/// atomic capture.
struct omp_team {
  /// Bidding rounds with fewer bidders run on rank 0 alone: below a few
  /// hundred, a round's work is less than its four barriers.
  std::int32_t solo = 256;
  [[nodiscard]] static std::int32_t rank() { return omp_get_thread_num(); }
  [[nodiscard]] static std::int32_t size() { return omp_get_num_threads(); }
  [[nodiscard]] std::int32_t solo_below() const { return solo; }
  static void sync() {
#pragma omp barrier
  }
  static std::int32_t fetch_add(std::int32_t* p, std::int32_t v) {
    std::int32_t old;
#pragma omp atomic capture
    {
      old = *p;
      *p += v;
    }
    return old;
  }
};

/// The reused host memory of tier programs.
struct tier_host_arena {
  std::vector<std::int32_t> heap_begin;
  std::vector<std::max_align_t> bytes;
};

/// Runs one tier program in host memory with `threads` workers (1: the
/// calling thread; more: an OpenMP team whose rounds with fewer than
/// `solo` bidders run on its rank 0). The results do not depend on either.
inline tier_stats run_tier_host(tier_problem const& problem, std::vector<tier_placement>& out, tier_host_arena& a,
                                int threads = 1, std::int32_t solo = omp_team{}.solo) {
  a.heap_begin.resize(static_cast<std::size_t>(problem.n_rows) + 1);
  std::int32_t const copies = tier_heap_begin(problem, a.heap_begin.data());
  auto const aligned = [](std::size_t n) {
    return (n + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
  };
  // One pass sizes the arena, the second lays the buffers out in it.
  std::size_t bytes = 0;
  auto measure = [&](auto* tag, std::size_t n) -> decltype(tag) {
    bytes += aligned(n * sizeof(*tag));
    return nullptr;
  };
  tier_buffers b{};
  tier_layout(b, problem.nodes.n_nodes, problem.n_rows, copies, measure);
  a.bytes.resize(bytes / sizeof(std::max_align_t) + 1);
  auto* at = reinterpret_cast<unsigned char*>(a.bytes.data());
  auto take = [&](auto* tag, std::size_t n) -> decltype(tag) {
    auto* p = reinterpret_cast<decltype(tag)>(at);
    at += aligned(n * sizeof(*tag));
    return p;
  };
  tier_layout(b, problem.nodes.n_nodes, problem.n_rows, copies, take);
  tier_control ctl{};
  b.p = problem;
  b.heap_begin = a.heap_begin.data();
  b.ctl = &ctl;
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      omp_team team{solo};
      tier_program(team, b);
    }
  } else {
    seq_team team;
    tier_program(team, b);
  }
  out.assign(b.out, b.out + ctl.placed);
  return {ctl.iterations, ctl.rounds, ctl.round_cap_hit != 0};
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
