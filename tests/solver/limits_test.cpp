// check_limits' names (solver/src/limits.cpp): a name held twice is found
// wherever the two are, and the one named is the first held twice in the
// round's order, as a plain search of the names before each would say.
#include <placer/solver/limits.hpp>
#include <placer/topology/cluster.hpp>
#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace placer {
namespace {

/// The message check_limits refuses `in` with, or "" where it takes it.
std::string refusal(round_input const& in) {
  std::vector<std::string_view> scratch;
  try {
    check_limits(in, round_limits{}, scratch);
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument) << e.what();
    return e.what();
  }
  return {};
}

TEST(Limits, ANameHeldTwiceIsFoundWhereverTheTwoAre) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(50).nodes_per_leaf(100).gpus(8).build();  // 5,000 nodes
  auto& nodes = in.state.nodes;
  ASSERT_EQ(nodes.size(), 5000u);
  // Long names that differ only at their end.
  for (std::size_t i = 0; i < nodes.size(); ++i) nodes[i].name = std::string(200, 'n') + std::to_string(i);
  EXPECT_EQ(refusal(in), "");
  for (auto [a, b] : {std::pair<std::size_t, std::size_t>{0, 1}, {0, 4999}, {2500, 2501}, {4998, 4999}, {17, 3000}}) {
    SCOPED_TRACE(testing::Message() << a << ", " << b);
    std::string const kept = nodes[b].name;
    nodes[b].name = nodes[a].name;
    std::string const got = refusal(in);
    EXPECT_NE(got.find("two nodes are named '" + nodes[a].name.substr(0, 64) + "...'"), std::string::npos) << got;
    nodes[b].name = kept;
  }
  EXPECT_EQ(refusal(in), "");
}

TEST(Limits, TheNameRefusedIsTheFirstHeldTwiceInTheRoundsOrder) {
  std::mt19937 rng(20261204);
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build();
  in.state.nodes[0].name = "the-node";
  int refused = 0;
  for (int iter = 0; iter < 300; ++iter) {
    // Names from a few letters: some rounds repeat none, most repeat several.
    std::uniform_int_distribution<int> count(0, 60), letter(0, iter % 3 == 0 ? 25 : 3), length(1, 3);
    in.pending.clear();
    std::set<std::string> seen;
    std::string first;
    for (int k = count(rng); k > 0; --k) {
      job j;
      for (int c = length(rng); c > 0; --c) j.name += static_cast<char>('a' + letter(rng));
      if (first.empty() && !seen.insert(j.name).second) first = j.name;
      in.pending.push_back(j);
    }
    std::string const got = refusal(in);
    if (first.empty()) {
      EXPECT_EQ(got, "");
    } else {
      EXPECT_NE(got.find("two pending jobs are named '" + first + "'"), std::string::npos) << got;
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace placer
