// The tier program's OpenMP team (kernels/portable/tier_host.hpp) under
// ThreadSanitizer: on random tiers, a team of four (every bidding round
// split, or the small ones solo on rank 0) must place exactly what one
// worker places and leave the same matrix, node state and labels, with no
// race reported; a quarter of them with price wars (prefer_some_nodes), so
// the price jumps run between the team's rounds too; the one worker's
// floors and re-scored columns on the OpenMP team every other instance
// (apart_from), reading F from the CPU backend's memos (frag_memos, a
// worker's own; kernels/src/frag_memo.hpp). Built by clang with
// -fsanitize=thread against LLVM's OpenMP runtime, whose barriers TSan
// understands (tests/CMakeLists.txt); header only, so nothing built by g++
// or against libgomp is linked in.
#include "../../kernels/portable/tier_host.hpp"
#include "../../kernels/src/frag_memo.hpp"
#include "../support/tier_instance.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

using namespace placer::kernels;
using placer::testing_support::prefer_some_nodes;
using placer::testing_support::random_cluster;
using placer::testing_support::tier_instance;
using placer::testing_support::twin_cluster;

namespace {

int failures = 0;

void expect(bool ok, int instance, char const* what) {
  if (ok) return;
  std::fprintf(stderr, "instance %d: %s differ between one worker and the team\n", instance, what);
  ++failures;
}

}  // namespace

int main() {
  std::mt19937_64 rng(21);
  tier_host_arena one, four;
  long placed = 0;
  for (int iter = 0; iter < 40; ++iter) {
    tier_instance t = iter % 2 == 0 ? twin_cluster(rng, 40, 10, 6) : random_cluster(rng, 500, 8);
    t.score_all();
    for (std::int32_t c = 0; c < t.n_classes(); ++c) {
      t.row_class.push_back(c);
      t.demand.push_back(std::uniform_int_distribution<int>(1, 120)(rng));
    }
    // Price wars (tier_jump on rank 0 between rounds), on instances whose
    // rounds all run split (solo below 0, below): the team's offers reach
    // a row in another order than one worker's, and the re-bids in place
    // must not make the result depend on it.
    if (iter % 4 == 1) prefer_some_nodes(rng, t, 100000);
    tier_instance u = t;
    std::vector<std::int32_t> la(static_cast<std::size_t>(t.n_nodes()));
    std::iota(la.begin(), la.end(), 0);
    if (iter % 2 == 0) {
      for (std::int32_t n = 0; n < t.n_nodes(); ++n) la[static_cast<std::size_t>(n)] = n % 40;  // twins: node % 40
    }
    std::vector<std::int32_t> lb = la;
    auto pa = t.problem(1 << 30, 200);
    auto pb = u.problem(1 << 30, 200);
    pa.state = la.data();
    pb.state = lb.data();
    std::vector<tier_placement> a, b;
    auto const sa = run_tier_host(pa, a, one, 1);
    // Two thirds of them the CUDA backend's way (team_wide: the floors, the
    // jumps, the lists and the offers by the whole team:
    // fetch_add, fetch_max and fetch_min on shared counts, sweeps and heap
    // levels between barriers), the offers for every row with bids or for
    // the rows with 8 or more.
    auto const sb = run_tier_host(pb, b, four, 4, iter % 4 < 2 ? 0 : 64, iter % 3 != 0, iter % 2 == 0 ? 1 : 8);
    auto order = [](auto const& x, auto const& y) {
      return x.iteration != y.iteration ? x.iteration < y.iteration : x.node < y.node;
    };
    std::sort(a.begin(), a.end(), order);
    std::sort(b.begin(), b.end(), order);
    expect(sa.iterations == sb.iterations && sa.rounds == sb.rounds, iter, "iterations or rounds");
    expect(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto const& x, auto const& y) {
             return x.node == y.node && x.row == y.row && x.gpus == y.gpus && x.iteration == y.iteration;
           }), iter, "placements");
    expect(t.scores == u.scores, iter, "score matrices");
    expect(t.gpu_free == u.gpu_free && t.cpu_free == u.cpu_free && t.mem_free == u.mem_free, iter, "node states");
    expect(la == lb, iter, "state labels");
    placed += static_cast<long>(a.size());
  }
  // Chains of tiers (tier_chain_program): rank 0 lists each tier's refresh
  // candidates between the team's tiers; two of each chain's are locality
  // jobs.
  for (int iter = 0; iter < 20; ++iter) {
    tier_instance t = iter % 2 == 0 ? twin_cluster(rng, 40, 8, 8) : random_cluster(rng, 400, 8);
    t.score_all();
    auto const c = placer::testing_support::split_into_tiers(rng, t, 3);
    tier_instance u = t;
    std::vector<std::int32_t> la(static_cast<std::size_t>(t.n_nodes()));
    std::iota(la.begin(), la.end(), 0);
    std::vector<std::int32_t> lb = la, none_a, none_b;
    none_a.reserve(1);
    none_b.reserve(1);
    auto pa = placer::testing_support::chain_problems(t, c, none_a);
    auto pb = placer::testing_support::chain_problems(u, c, none_b);
    // Locality jobs (tier_locality) after the first tier and at the end,
    // on a topology of one to three levels: the capacities by the team,
    // the domains' and replicas' reductions on its rings.
    placer::testing_support::random_topology const topo(rng, t.n_nodes());
    std::int32_t const klass[2] = {std::uniform_int_distribution<std::int32_t>(0, t.n_classes() - 1)(rng),
                                   std::uniform_int_distribution<std::int32_t>(0, t.n_classes() - 1)(rng)};
    tier_locality const jobs[2] = {placer::testing_support::random_locality(rng, &topo),
                                   placer::testing_support::random_locality(rng, &topo)};
    for (auto* ps : {&pa, &pb}) {
      for (int l = 0; l < 2; ++l) {
        tier_problem p = (*ps)[0];
        p.n_rows = 1;
        p.row_class = &klass[l];
        p.demand = &jobs[l].want;
        p.row_cap = nullptr;
        p.live_class = nullptr;
        p.changed = nullptr;
        p.local = jobs[l];
        p.topo = topo.view();
        ps->insert(l == 0 ? ps->begin() + 1 : ps->end(), p);
      }
      for (std::size_t j = 0; j < ps->size(); ++j) (*ps)[j].now = static_cast<std::int32_t>(j);
    }
    for (auto& p : pa) p.state = la.data();
    for (auto& p : pb) p.state = lb.data();
    tier_results a, b;
    one.apart_from = iter % 2;  // 1: every iteration's floors and every refresh apart
    frag_memos memos(4);
    if (iter % 2 == 1 && !memos.attach(pa)) {
      std::fprintf(stderr, "instance %d: the memos were not attached\n", iter);
      ++failures;
    }
    run_chain_host(pa, a, one, 1);
    // Every fourth on a grid of two CTAs of four workers in groups of two,
    // a thread each (the CUDA backend's cooperative grid, tier_grid_twin.hpp):
    // the other CTA's wide phases, every row's offers on a group.
    if (iter % 4 == 3) {
      run_chain_host(pb, b, four, 4, 0, true, 1, tier_refresh_cells_below, tier_remember_rows_above, tier_offer_bits, 0,
                     tier_offer_pairs_upto, tier_offer_groups_always, 2);
    } else {
      run_chain_host(pb, b, four, 4, 0, iter % 2 == 0);
    }
    bool same = a.begin == b.begin && a.placed.size() == b.placed.size();
    for (std::size_t j = 0; same && j + 1 < a.begin.size(); ++j) {
      auto order = [](auto const& x, auto const& y) { return x.iteration != y.iteration ? x.iteration < y.iteration : x.node < y.node; };
      std::sort(a.placed.begin() + a.begin[j], a.placed.begin() + a.begin[j + 1], order);
      std::sort(b.placed.begin() + b.begin[j], b.placed.begin() + b.begin[j + 1], order);
    }
    same = same && std::equal(a.placed.begin(), a.placed.end(), b.placed.begin(), [](auto const& x, auto const& y) {
             return x.node == y.node && x.row == y.row && x.gpus == y.gpus && x.iteration == y.iteration;
           });
    expect(same, 100 + iter, "chained placements");
    expect(t.scores == u.scores && t.gpu_free == u.gpu_free && t.stamp == u.stamp && la == lb, 100 + iter,
           "chained states");
    placed += static_cast<long>(a.placed.size());
  }
  if (placed < 2000) {
    std::fprintf(stderr, "only %ld placements: the instances hardly exercise the team\n", placed);
    ++failures;
  }
  std::printf("%d instances, %ld placements: %s\n", 60, placed, failures == 0 ? "the team matches one worker" : "FAILED");
  return failures == 0 ? 0 : 1;
}
