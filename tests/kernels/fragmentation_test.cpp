// FGD's node fragmentation (the reported metric) and Placer's packable
// variant (the score), on nodes whose answers are computed by hand.
#include <placer/kernels/ops.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace placer::kernels {
namespace {

/// A typical task set with every model allowed; frequencies in ppm.
struct tasks {
  std::vector<std::int32_t> gpus, milli, freq;
  std::vector<std::int64_t> cpu;
  std::vector<std::uint64_t> mask;
  void add(std::int32_t g, std::int32_t m, std::int64_t c, std::int32_t ppm) {
    gpus.push_back(g);
    milli.push_back(m);
    cpu.push_back(c);
    freq.push_back(ppm);
    mask.push_back(~std::uint64_t{0});
  }
  /// share_cpu as build_matrices sets it.
  [[nodiscard]] task_view view() const {
    task_view v{static_cast<std::int32_t>(gpus.size()), gpus.data(), milli.data(), cpu.data(), mask.data(), freq.data()};
    v.share_cpu = mean_share_cpu(v);
    return v;
  }
};

/// Fragmentation in milli (the functions return milli x ppm).
double frag(std::vector<std::int32_t> f, std::int64_t cpu_free, tasks const& t, bool packable) {
  return static_cast<double>(node_fragmentation(f.data(), static_cast<std::int32_t>(f.size()), cpu_free, 0, t.view(),
                                                packable)) /
         1e6;
}

TEST(Fragmentation, SharesCappedByTheCopiesTheCpuCanFeed) {
  tasks t;
  t.add(1, 500, 8000, 1000000);  // a half-GPU share needing 8 cores
  // Three GPUs a share fits on; CPU for one copy only. FGD: nothing is
  // fragmented (every free GPU fits the share); packable: one GPU is usable,
  // the other 1,900 milli are not.
  EXPECT_DOUBLE_EQ(frag({1000, 1000, 900}, 8000, t, false), 0.0);
  EXPECT_DOUBLE_EQ(frag({1000, 1000, 900}, 8000, t, true), 1900.0);
  // Plenty of CPU: both count only the GPU below the share's size.
  EXPECT_DOUBLE_EQ(frag({1000, 300, 900}, 64000, t, false), 300.0);
  EXPECT_DOUBLE_EQ(frag({1000, 300, 900}, 64000, t, true), 300.0);
  // Too little CPU for one copy: everything is fragmented in both.
  EXPECT_DOUBLE_EQ(frag({1000, 300}, 4000, t, false), 1300.0);
  EXPECT_DOUBLE_EQ(frag({1000, 300}, 4000, t, true), 1300.0);
}

TEST(Fragmentation, ShareCopiesAreBudgetedBetweenTheirOwnCpuAndTheMixOfShares) {
  tasks t;
  t.add(1, 500, 12000, 500000);  // a CPU-heavy share
  t.add(1, 500, 3000, 500000);   // a CPU-light one; the shares' mean is 7,500
  // Three idle GPUs and 12 cores. A copy is budgeted (2 x own + mean) / 3:
  // the heavy share 10,500 (one copy: 2,000 fragmented), the light one
  // 4,500 (two copies: 1,000). Budgeted only its own CPU, the light share
  // would get four copies and count nothing as fragmented (total 1,000).
  std::vector<std::int32_t> const f{1000, 1000, 1000};
  EXPECT_DOUBLE_EQ(frag(f, 12000, t, true), 0.5 * 2000 + 0.5 * 1000);
  // FGD's measure counts every GPU either share fits on as usable.
  EXPECT_DOUBLE_EQ(frag(f, 12000, t, false), 0.0);
  // CPU for three heavy copies: nothing is fragmented for either share.
  EXPECT_DOUBLE_EQ(frag(f, 32000, t, true), 0.0);
}

TEST(Fragmentation, WholeGpuTasksAreCountedAsFgdCountsThem) {
  tasks t;
  t.add(2, 1000, 16000, 500000);  // 2-GPU task, half the tasks
  t.add(1, 1000, 8000, 500000);   // 1-GPU task
  // Three idle GPUs and a 400-milli remnant, CPU for one copy of either:
  // whole-GPU tasks are not capped by CPU copies, so only the remnant counts.
  std::vector<std::int32_t> const f{1000, 1000, 1000, 400};
  for (bool const packable : {false, true}) {
    EXPECT_DOUBLE_EQ(frag(f, 16000, t, packable), 0.5 * 400 + 0.5 * 400);
    // One idle GPU: the 2-GPU task cannot run, all 1,400 count for it.
    EXPECT_DOUBLE_EQ(frag({1000, 400}, 64000, t, packable), 0.5 * 1400 + 0.5 * 400);
    // Too little CPU for the 2-GPU task.
    EXPECT_DOUBLE_EQ(frag(f, 8000, t, packable), 0.5 * 3400 + 0.5 * 400);
    // A full node has no fragmentation.
    EXPECT_DOUBLE_EQ(frag({0, 0}, 64000, t, packable), 0.0);
  }
}

// A node's free GPU values sorted (a fragmentation state's key): up to 8
// by a sorting network, past it by insertion sort. Every pattern of two
// values on 0..8 GPUs (the network sorts every input if it sorts these),
// and random values of a few kinds, ties among them, on 0..16.
TEST(Fragmentation, FreeGpuValuesSortAsStdSortSortsThem) {
  auto check = [](std::vector<std::int32_t> const& f) {
    std::vector<std::int32_t> got(f.size() + 1, -7), want = f;
    std::sort(want.begin(), want.end());
    sort_free_gpus(f.data(), static_cast<std::int32_t>(f.size()), got.data());
    EXPECT_EQ(got.back(), -7) << "wrote past the node's GPUs";
    got.pop_back();
    EXPECT_EQ(got, want);
  };
  for (int g = 0; g <= 8; ++g) {
    for (int bits = 0; bits < (1 << g); ++bits) {
      std::vector<std::int32_t> f(static_cast<std::size_t>(g));
      for (int k = 0; k < g; ++k) f[static_cast<std::size_t>(k)] = (bits >> k) & 1 ? 1000 : 0;
      check(f);
    }
  }
  std::mt19937 rng(5);
  std::int32_t const kinds[] = {0, 125, 250, 500, 1000};
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::int32_t> f(rng() % 17);
    for (auto& v : f) v = iter % 2 == 0 ? kinds[rng() % 5] : static_cast<std::int32_t>(rng() % 1001);
    check(f);
  }
}

}  // namespace
}  // namespace placer::kernels
