// The I/O thread's queue policy on its own: peers take turns per worker,
// each peer's rounds stay in order, the bounds refuse without queueing, and
// the bookkeeping of a peer goes with its last round.
#include <placer/service/round_queue.hpp>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace placer::service {
namespace {

std::vector<int> drain(round_queue<int>& q, std::size_t worker) {
  std::vector<int> out;
  while (auto v = q.pop(worker)) out.push_back(*v);
  return out;
}

TEST(RoundQueue, PeersTakeTurnsAndEachPeersRoundsStayInOrder) {
  round_queue<int> q(1, {});
  for (int k = 1; k <= 4; ++k) ASSERT_EQ(q.push(0, "x", 10, 100 + k), admission::queued);
  ASSERT_EQ(q.push(0, "y", 10, 201), admission::queued);
  ASSERT_EQ(q.push(0, "z", 10, 301), admission::queued);
  ASSERT_EQ(q.push(0, "y", 10, 202), admission::queued);
  EXPECT_EQ(q.rounds(), 7U);
  EXPECT_EQ(q.peers(), 3U);
  // x's four rounds came first, but y and z each wait one turn, not four.
  EXPECT_EQ(drain(q, 0), (std::vector<int>{101, 201, 301, 102, 202, 103, 104}));
  EXPECT_EQ(q.rounds(), 0U);
  EXPECT_EQ(q.bytes(), 0U);
  EXPECT_EQ(q.peers(), 0U) << "a peer's bookkeeping goes with its last round";
}

TEST(RoundQueue, WorkersKeepTheirOwnQueues) {
  round_queue<int> q(2, {});
  ASSERT_EQ(q.push(1, "x", 1, 1), admission::queued);
  ASSERT_EQ(q.push(0, "x", 1, 2), admission::queued);
  EXPECT_EQ(q.queued(0), 1U);
  EXPECT_EQ(q.queued(1), 1U);
  EXPECT_EQ(drain(q, 1), std::vector<int>{1});
  EXPECT_EQ(drain(q, 0), std::vector<int>{2});
  EXPECT_FALSE(q.pop(0).has_value());
}

TEST(RoundQueue, BoundsRefuseWithoutQueueing) {
  round_queue<int> q(2, {.peer_rounds = 2, .peer_bytes = 100, .total_bytes = 150});
  ASSERT_EQ(q.push(0, "x", 10, 1), admission::queued);
  ASSERT_EQ(q.push(1, "x", 10, 2), admission::queued);
  EXPECT_EQ(q.push(0, "x", 10, 3), admission::peer_rounds) << "the count is per peer over all workers";
  EXPECT_EQ(q.push(0, "y", 101, 4), admission::peer_bytes);
  ASSERT_EQ(q.push(0, "y", 100, 5), admission::queued);
  EXPECT_EQ(q.push(0, "z", 40, 6), admission::total_bytes) << "10 + 10 + 100 + 40 > 150";
  EXPECT_EQ(q.peers(), 2U) << "a refused peer leaves nothing behind";
  EXPECT_EQ(q.rounds(), 3U);
  EXPECT_EQ(q.bytes(), 120U);
  // A round out makes room for that peer again.
  EXPECT_EQ(q.pop(1), 2);
  EXPECT_EQ(q.push(0, "x", 10, 7), admission::queued);
}

TEST(RoundQueue, OldestIsTheLongestWaitingPerWorker) {
  using clock = round_queue<int>::clock;
  round_queue<int> q(1, {});
  auto const t0 = clock::now();
  EXPECT_FALSE(q.oldest(0).has_value());
  ASSERT_EQ(q.push(0, "x", 1, 1, t0 + std::chrono::milliseconds(5)), admission::queued);
  ASSERT_EQ(q.push(0, "y", 1, 2, t0), admission::queued);
  EXPECT_EQ(q.oldest(0), t0);
  EXPECT_EQ(q.pop(0), 1);
  EXPECT_EQ(q.oldest(0), t0);
  EXPECT_EQ(q.pop(0), 2);
  EXPECT_FALSE(q.oldest(0).has_value());
}

TEST(RoundQueue, DropIfRemovesAGonePeersRoundsAndItsTurn) {
  round_queue<int> q(2, {});
  for (int v : {1, 2, 3}) ASSERT_EQ(q.push(0, "gone", 5, int{v}), admission::queued);
  ASSERT_EQ(q.push(1, "gone", 5, 4), admission::queued);
  ASSERT_EQ(q.push(0, "stays", 5, 10), admission::queued);
  ASSERT_EQ(q.push(0, "stays", 5, 11), admission::queued);
  EXPECT_EQ(q.drop_if([](int v) { return v < 10; }), 4U);
  EXPECT_EQ(q.rounds(), 2U);
  EXPECT_EQ(q.bytes(), 10U);
  EXPECT_EQ(q.peers(), 1U);
  EXPECT_EQ(q.queued(1), 0U);
  EXPECT_EQ(drain(q, 0), (std::vector<int>{10, 11}));
  EXPECT_FALSE(q.pop(1).has_value());
}

TEST(RoundQueue, RandomOperationsKeepTheCountsAndOrderPerPeer) {
  // Against a plain model: every round popped is its peer's oldest left on
  // that worker, no bound is passed, and the counters match what is held.
  std::mt19937_64 rng(11);
  round_queue<int> q(3, {.peer_rounds = 6, .peer_bytes = 400, .total_bytes = 1500});
  std::vector<std::vector<std::vector<int>>> model(3, std::vector<std::vector<int>>(5));  // worker, peer
  std::vector<std::size_t> held_bytes(5, 0);
  std::vector<int> peer_of(100000), bytes_of(100000);
  int serial = 0;
  for (int step = 0; step < 20000; ++step) {
    std::size_t const w = rng() % 3;
    if (rng() % 2 == 0) {
      int const p = static_cast<int>(rng() % 5);
      int const b = static_cast<int>(rng() % 120);
      int const v = serial++;
      peer_of[v] = p;
      bytes_of[v] = b;
      if (q.push(w, "p" + std::to_string(p), static_cast<std::size_t>(b), int{v}) == admission::queued) {
        model[w][p].push_back(v);
        held_bytes[p] += b;
      }
    } else if (auto v = q.pop(w)) {
      auto& mine = model[w][peer_of[*v]];
      ASSERT_FALSE(mine.empty());
      ASSERT_EQ(mine.front(), *v) << "a peer's rounds leave in the order they came";
      mine.erase(mine.begin());
      held_bytes[peer_of[*v]] -= bytes_of[*v];
    }
    std::size_t rounds = 0, bytes = 0;
    for (int p = 0; p < 5; ++p) {
      std::size_t peer_rounds = 0;
      for (auto const& per_worker : model) peer_rounds += per_worker[p].size();
      ASSERT_LE(peer_rounds, 6U);
      ASSERT_LE(held_bytes[p], 400U);
      rounds += peer_rounds;
      bytes += held_bytes[p];
    }
    ASSERT_EQ(q.rounds(), rounds);
    ASSERT_EQ(q.bytes(), bytes);
    ASSERT_LE(bytes, 1500U);
  }
}

}  // namespace
}  // namespace placer::service
