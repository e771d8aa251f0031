// The auction against exact optima: brute force on tiny instances, the
// Hungarian algorithm on larger ones (capacities expanded into copies,
// pending as zero-value dummies). Also the CPU/CUDA parity (GPU only).
#include <placer/kernels/backend.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <vector>

namespace placer::kernels {
namespace {

struct instance {
  std::int32_t bidders = 0, objects = 0;
  std::vector<std::int32_t> values;  // one row per bidder
  std::vector<std::int32_t> row_of;
  std::vector<std::int64_t> offset;
  std::vector<std::int32_t> capacity;

  [[nodiscard]] auction_problem view() const {
    auction_problem p;
    p.n_bidders = bidders;
    p.n_objects = objects;
    p.n_rows = bidders;
    p.values = values.data();
    p.row_of = row_of.data();
    p.offset = offset.empty() ? nullptr : offset.data();
    p.capacity = capacity.data();
    return p;
  }
  [[nodiscard]] std::int64_t value(std::int32_t i, std::int32_t j) const {
    std::int32_t const v = values[static_cast<std::size_t>(i) * objects + j];
    return v < 0 ? -1 : v + (offset.empty() ? 0 : offset[i]);
  }
};

instance random_instance(std::mt19937_64& rng, int max_bidders, int max_objects, int max_cap, int max_value,
                         bool ties) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  instance in;
  in.bidders = pick(0, max_bidders);
  in.objects = pick(1, max_objects);
  for (int j = 0; j < in.objects; ++j) in.capacity.push_back(pick(0, max_cap));
  for (int i = 0; i < in.bidders; ++i) {
    in.row_of.push_back(i);
    for (int j = 0; j < in.objects; ++j) {
      in.values.push_back(pick(0, 5) == 0 ? -1 : ties ? pick(0, 3) * 10 : pick(0, max_value));
    }
  }
  if (pick(0, 1) == 1) {
    for (int i = 0; i < in.bidders; ++i) in.offset.push_back(pick(0, 3) * 7);
  }
  return in;
}

std::int64_t brute_force(instance const& in, std::int32_t i, std::vector<std::int32_t>& left) {
  if (i == in.bidders) return 0;
  std::int64_t best = brute_force(in, i + 1, left);  // pending
  for (std::int32_t j = 0; j < in.objects; ++j) {
    if (left[j] == 0 || in.value(i, j) < 0) continue;
    --left[j];
    best = std::max(best, in.value(i, j) + brute_force(in, i + 1, left));
    ++left[j];
  }
  return best;
}

/// Maximum-weight assignment by the Hungarian algorithm on the square
/// matrix (bidders + slots) where each bidder also has its own pending
/// column of value 0 and forbidden cells are very negative.
std::int64_t hungarian_optimum(instance const& in) {
  std::vector<std::int32_t> slot_object;
  for (std::int32_t j = 0; j < in.objects; ++j) {
    for (int c = 0; c < in.capacity[j]; ++c) slot_object.push_back(j);
  }
  int const rows = in.bidders;
  int const cols = static_cast<int>(slot_object.size()) + rows;  // + one pending column per bidder
  int const n = std::max(rows, cols);
  std::int64_t const forbid = static_cast<std::int64_t>(1) << 40;
  // cost = -value (minimisation), 1-indexed (e-maxx formulation).
  auto cost = [&](int r, int c) -> std::int64_t {
    if (r >= rows) return 0;
    if (c < static_cast<int>(slot_object.size())) {
      std::int64_t const v = in.value(r, slot_object[c]);
      return v < 0 ? forbid : -v;
    }
    if (c < cols) return c - static_cast<int>(slot_object.size()) == r ? 0 : forbid;
    return 0;
  };
  std::vector<std::int64_t> u(n + 1), v(n + 1);
  std::vector<int> p(n + 1), way(n + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::vector<std::int64_t> minv(n + 1, LLONG_MAX);
    std::vector<char> used(n + 1, 0);
    do {
      used[j0] = 1;
      int const i0 = p[j0];
      std::int64_t delta = LLONG_MAX;
      int j1 = 0;
      for (int j = 1; j <= n; ++j) {
        if (used[j]) continue;
        std::int64_t const cur = cost(i0 - 1, j - 1) - u[i0] - v[j];
        if (cur < minv[j]) { minv[j] = cur; way[j] = j0; }
        if (minv[j] < delta) { delta = minv[j]; j1 = j; }
      }
      for (int j = 0; j <= n; ++j) {
        if (used[j]) { u[p[j]] += delta; v[j] -= delta; } else { minv[j] -= delta; }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      int const j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::int64_t total = 0;
  for (int j = 1; j <= n; ++j) {
    if (p[j] >= 1 && p[j] <= rows && j - 1 < static_cast<int>(slot_object.size())) {
      total += in.value(p[j] - 1, slot_object[j - 1]);
    }
  }
  return total;
}

void expect_feasible(instance const& in, std::vector<std::int32_t> const& object_of) {
  std::vector<std::int32_t> used(static_cast<std::size_t>(in.objects), 0);
  for (std::int32_t i = 0; i < in.bidders; ++i) {
    std::int32_t const j = object_of[i];
    if (j < 0) continue;
    ASSERT_LT(j, in.objects);
    EXPECT_GE(in.value(i, j), 0) << "bidder " << i << " got a forbidden object " << j;
    ++used[j];
  }
  for (std::int32_t j = 0; j < in.objects; ++j) EXPECT_LE(used[j], in.capacity[j]) << "object " << j;
}

std::vector<std::int32_t> solve(backend& b, instance const& in, auction_stats* st = nullptr) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(in.bidders), -7);
  auto const s = b.auction(in.view(), {}, out);
  if (st != nullptr) *st = s;
  return out;
}

TEST(Auction, OptimalAgainstBruteForceOnTinyInstances) {
  auto b = make_backend(backend_kind::cpu);
  std::mt19937_64 rng(1);
  for (int iter = 0; iter < 3000; ++iter) {
    instance const in = random_instance(rng, 7, 4, 3, 1000, iter % 3 == 0);
    auto const got = solve(*b, in);
    expect_feasible(in, got);
    std::vector<std::int32_t> left = in.capacity;
    ASSERT_EQ(auction_value(in.view(), got.data()), brute_force(in, 0, left)) << "iteration " << iter;
  }
}

TEST(Auction, OptimalAgainstHungarianOnLargerInstances) {
  auto b = make_backend(backend_kind::cpu);
  std::mt19937_64 rng(2);
  for (int iter = 0; iter < 200; ++iter) {
    instance const in = random_instance(rng, iter < 100 ? 60 : 150, iter < 100 ? 25 : 60, 4, 100000, iter % 4 == 0);
    auction_stats st;
    auto const got = solve(*b, in, &st);
    expect_feasible(in, got);
    ASSERT_EQ(auction_value(in.view(), got.data()), hungarian_optimum(in)) << "iteration " << iter;
    if (in.bidders > 0) {
      EXPECT_GE(st.phases, 1);
    }
  }
}

TEST(Auction, EdgeCases) {
  auto b = make_backend(backend_kind::cpu);
  instance none;
  none.objects = 3;
  none.capacity = {1, 1, 1};
  EXPECT_TRUE(solve(*b, none).empty());

  instance closed;  // capacity 0 everywhere: everyone stays pending
  closed.bidders = 3;
  closed.objects = 2;
  closed.capacity = {0, 0};
  closed.row_of = {0, 1, 2};
  closed.values = {5, 5, 5, 5, 5, 5};
  EXPECT_EQ(solve(*b, closed), (std::vector<std::int32_t>{-1, -1, -1}));

  instance forbidden = closed;  // open, but nothing allowed
  forbidden.capacity = {2, 2};
  forbidden.values.assign(6, -1);
  EXPECT_EQ(solve(*b, forbidden), (std::vector<std::int32_t>{-1, -1, -1}));

  instance contested;  // three want object 0 (one slot); the one who loses least elsewhere yields
  contested.bidders = 3;
  contested.objects = 2;
  contested.capacity = {1, 1};
  contested.row_of = {0, 1, 2};
  contested.values = {10, 9, 10, 1, 10, 0};
  auto const got = solve(*b, contested);
  EXPECT_EQ(auction_value(contested.view(), got.data()), 19);
  EXPECT_EQ(got[0], 1);
}

TEST(Auction, SharedRowsForIdenticalBidders) {
  // 50 identical bidders (one row) and three objects with slots: the best
  // objects fill first and the surplus stays pending.
  auto b = make_backend(backend_kind::cpu);
  std::vector<std::int32_t> values = {30, 20, 10};
  std::vector<std::int32_t> row_of(50, 0);
  std::vector<std::int32_t> cap = {10, 5, 20};
  auction_problem p;
  p.n_bidders = 50;
  p.n_objects = 3;
  p.n_rows = 1;
  p.values = values.data();
  p.row_of = row_of.data();
  p.capacity = cap.data();
  std::vector<std::int32_t> out(50);
  b->auction(p, {}, out);
  std::vector<int> count(3, 0);
  int pending = 0;
  for (auto j : out) (j < 0 ? pending : count[j]) += 1;
  EXPECT_EQ(count, (std::vector<int>{10, 5, 20}));
  EXPECT_EQ(pending, 15);
}

TEST(AuctionParity, CudaMatchesCpu) {
  auto const why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  auto cpu = make_backend(backend_kind::cpu);
  auto gpu = make_backend(backend_kind::cuda);
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 500; ++iter) {
    instance const in = random_instance(rng, iter < 250 ? 7 : 300, iter < 250 ? 4 : 120, 6, 100000, iter % 3 == 0);
    ASSERT_EQ(solve(*cpu, in), solve(*gpu, in)) << "iteration " << iter;
  }
}

}  // namespace
}  // namespace placer::kernels
