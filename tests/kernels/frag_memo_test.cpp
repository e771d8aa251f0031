// The CPU backend's fragmentation rows by state (kernels/src/frag_memo.hpp):
// each row is score_cell_op::frag_row's for the node as it is when asked,
// one row a state (free GPU values in any order, free CPU, model), and a
// change of the classes' shapes or the task set forgets them. frag_memos:
// a memo each for the workers of an OpenMP team, seeded alike.
#include "../../kernels/src/frag_memo.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace placer::kernels {
namespace {

struct cluster {
  std::vector<std::int64_t> cpu_free, cpu_capacity, mem_free;
  std::vector<std::int32_t> model, gpu_begin{0}, gpu_free, gpu_capacity;
  std::vector<std::uint8_t> pool, flags;
  // Classes: replica shapes.
  std::vector<std::int32_t> c_gpus, c_milli;
  std::vector<std::int64_t> c_cpu;
  // The task set.
  std::vector<std::int32_t> t_gpus, t_milli, t_freq;
  std::vector<std::int64_t> t_cpu;
  std::vector<std::uint64_t> t_mask;

  void add_node(std::vector<std::int32_t> const& free, std::int64_t cpu, std::int32_t m) {
    cpu_free.push_back(cpu);
    cpu_capacity.push_back(64000);
    mem_free.push_back(std::int64_t{1} << 36);
    gpu_capacity.push_back(1000 * static_cast<std::int32_t>(free.size()));
    pool.push_back(1);
    flags.push_back(node_flag_healthy);
    model.push_back(m);
    gpu_free.insert(gpu_free.end(), free.begin(), free.end());
    gpu_begin.push_back(static_cast<std::int32_t>(gpu_free.size()));
  }
  [[nodiscard]] score_cell_op op() const {
    node_view nv;
    nv.n_nodes = static_cast<std::int32_t>(cpu_free.size());
    nv.n_gpus = static_cast<std::int32_t>(gpu_free.size());
    nv.cpu_free = cpu_free.data();
    nv.cpu_capacity = cpu_capacity.data();
    nv.mem_free = mem_free.data();
    nv.gpu_capacity = gpu_capacity.data();
    nv.pool = pool.data();
    nv.flags = flags.data();
    nv.model = model.data();
    nv.gpu_begin = gpu_begin.data();
    nv.gpu_free = gpu_free.data();
    class_view cv;
    cv.n_classes = static_cast<std::int32_t>(c_gpus.size());
    cv.gpus = c_gpus.data();
    cv.milli = c_milli.data();
    cv.cpu = c_cpu.data();
    task_view tv{static_cast<std::int32_t>(t_gpus.size()), t_gpus.data(), t_milli.data(), t_cpu.data(),
                 t_mask.data(),                            t_freq.data()};
    tv.share_cpu = mean_share_cpu(tv);
    score_params p;
    p.w_fragmentation = 1;
    p.kube_mode = 0;
    return score_cell_op{nv, cv, tv, p};
  }
  /// frag_row of node n, summed.
  [[nodiscard]] std::vector<std::int64_t> direct(std::int32_t n) const {
    std::vector<std::int64_t> row(c_gpus.size() + 1);
    op().frag_row(n, row.data());
    return row;
  }
};

/// Nodes of few states, their GPUs' free values shuffled; whole and
/// fractional classes; a task set of both.
cluster random_cluster(std::mt19937& rng, std::int32_t nodes) {
  cluster c;
  std::int32_t const values[] = {0, 250, 500, 1000};
  std::int64_t const cpus[] = {0, 8000, 12000, 64000};
  for (std::int32_t n = 0; n < nodes; ++n) {
    std::int32_t const g = std::uniform_int_distribution<std::int32_t>(0, 2)(rng) * 4;
    std::vector<std::int32_t> free(static_cast<std::size_t>(g));
    for (auto& f : free) f = values[std::uniform_int_distribution<int>(0, 3)(rng)];
    c.add_node(free, cpus[std::uniform_int_distribution<int>(0, 3)(rng)],
               g == 0 ? -1 : std::uniform_int_distribution<std::int32_t>(0, 1)(rng));
  }
  for (auto [g, m, cpu] : {std::tuple{1, 1000, 8000}, {2, 1000, 16000}, {1, 500, 4000}, {1, 250, 2000}, {4, 1000, 0},
                           {0, 0, 4000}, {1, 500, 4000}}) {
    c.c_gpus.push_back(g);
    c.c_milli.push_back(m);
    c.c_cpu.push_back(cpu);
  }
  for (auto [g, m, cpu, ppm] : {std::tuple{1, 1000, 8000, 400000}, {1, 500, 4000, 300000}, {2, 1000, 16000, 200000},
                                {1, 250, 2000, 100000}}) {
    c.t_gpus.push_back(g);
    c.t_milli.push_back(m);
    c.t_cpu.push_back(cpu);
    c.t_freq.push_back(ppm);
    c.t_mask.push_back(~std::uint64_t{0});
  }
  return c;
}

using state = std::tuple<std::int32_t, std::int64_t, std::vector<std::int32_t>>;
state state_of(cluster const& c, std::int32_t n) {
  std::vector<std::int32_t> f(c.gpu_free.begin() + c.gpu_begin[static_cast<std::size_t>(n)],
                              c.gpu_free.begin() + c.gpu_begin[static_cast<std::size_t>(n) + 1]);
  std::sort(f.begin(), f.end());
  return {c.model[static_cast<std::size_t>(n)], c.cpu_free[static_cast<std::size_t>(n)], f};
}

std::vector<std::int64_t> values(std::int64_t const* row, std::size_t width) { return {row, row + width}; }

/// The score stage's table of the states of nodes [0, upto): a row per
/// fragmentation state, of its first node.
struct score_table {
  std::vector<std::int32_t> frag_node;
  std::vector<std::int64_t> table;
  score_table(cluster const& c, std::int32_t upto) {
    std::vector<state> seen;
    for (std::int32_t n = 0; n < upto; ++n) {
      if (std::find(seen.begin(), seen.end(), state_of(c, n)) == seen.end()) {
        seen.push_back(state_of(c, n));
        frag_node.push_back(n);
      }
    }
    for (std::int32_t n : frag_node) {
      auto const r = c.direct(n);
      table.insert(table.end(), r.begin(), r.end());
    }
  }
  /// c's op with this table's states.
  [[nodiscard]] score_cell_op op(cluster const& c) const {
    score_cell_op o = c.op();
    o.nv.n_frag = static_cast<std::int32_t>(frag_node.size());
    o.nv.frag_node = frag_node.data();
    return o;
  }
};

TEST(FragMemo, EachRowIsItsStatesRowWhateverTheGpusOrder) {
  std::mt19937 rng(7);
  cluster const c = random_cluster(rng, 600);
  frag_memo memo;
  ASSERT_TRUE(memo.bind(c.op()));
  std::set<state> states;
  auto const width = c.c_gpus.size() + 1;
  for (std::int32_t n = 0; n < 600; ++n) {
    std::int64_t const* row = memo.row(n);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(values(row, width), c.direct(n)) << "node " << n;
    states.insert(state_of(c, n));
  }
  // One row a state: nodes of one state, their GPUs in another order, share it.
  EXPECT_EQ(memo.states(), states.size());
  EXPECT_LT(states.size(), 400U);  // the cluster repeats its states (else this tests little)
  std::vector<state> of;
  for (std::int32_t n = 0; n < 600; ++n) of.push_back(state_of(c, n));
  for (std::int32_t a = 0; a < 600; ++a) {
    for (std::int32_t b = a + 1; b < 600; ++b) {
      if (of[static_cast<std::size_t>(a)] == of[static_cast<std::size_t>(b)]) {
        EXPECT_EQ(memo.held(a), memo.held(b));
      }
    }
  }
  EXPECT_EQ(memo.states(), states.size());
}

// frag_by_state (the CPU backend's statistics after a round): each node's
// F is node_fragmentation's on the node itself, whatever its GPUs' order,
// and each state is summed once until clear: on a cluster of few states,
// and on one of nearly a state a node (the table grows past its first
// slots), asked twice over.
TEST(FragByState, EachNodesFIsItsOwnAndEachStateSummedOnce) {
  std::mt19937 rng(11);
  cluster few = random_cluster(rng, 600);
  cluster many = few;
  for (auto& f : many.gpu_free) f = std::uniform_int_distribution<std::int32_t>(0, 100)(rng) * 10;
  frag_by_state memo;
  for (cluster const* c : {&few, &many}) {
    score_cell_op const op = c->op();
    for (int pass = 0; pass < 2; ++pass) {
      memo.clear();
      std::set<state> states;
      for (std::int32_t n = pass; n < 600; n += 1 + pass) {
        std::int32_t const b = c->gpu_begin[static_cast<std::size_t>(n)];
        std::int32_t const g = c->gpu_begin[static_cast<std::size_t>(n) + 1] - b;
        ASSERT_EQ(memo.of(op.nv, op.tv, n),
                  node_fragmentation(c->gpu_free.data() + b, g, c->cpu_free[static_cast<std::size_t>(n)],
                                     c->model[static_cast<std::size_t>(n)], op.tv))
            << "node " << n << " pass " << pass;
        states.insert(state_of(*c, n));
        ASSERT_EQ(memo.of(op.nv, op.tv, n), memo.of(op.nv, op.tv, n));  // asked again: held
      }
      EXPECT_EQ(memo.states(), states.size());
    }
  }
  memo.clear();
  EXPECT_EQ(memo.states(), 0U);
  // The few states repeat; the many do not (else this tests little).
  std::set<state> few_states, many_states;
  for (std::int32_t n = 0; n < 600; ++n) {
    few_states.insert(state_of(few, n));
    many_states.insert(state_of(many, n));
  }
  EXPECT_LT(few_states.size(), 400U);
  EXPECT_GT(many_states.size(), 300U);
}

TEST(FragMemo, SumsOnlyTheEntriesAskedForAndTheRestWhenAsked) {
  std::mt19937 rng(13);
  cluster const c = random_cluster(rng, 50);
  auto const classes = static_cast<std::int32_t>(c.c_gpus.size());
  frag_memo memo;
  ASSERT_TRUE(memo.bind(c.op()));
  for (std::int32_t n = 0; n < 50; ++n) {
    auto const want = [&](std::int32_t k) { return (k + n) % 3 == 0; };
    std::vector<std::int64_t> const direct = c.direct(n);
    std::int64_t const* row = memo.row(n, want);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row[classes], direct[static_cast<std::size_t>(classes)]);  // F before, always
    for (std::int32_t k = 0; k < classes; ++k) {
      // Asked for now or by an earlier node of this state: F after; else unknown.
      if (want(k)) {
        EXPECT_EQ(row[k], direct[static_cast<std::size_t>(k)]) << "node " << n << " class " << k;
      }
      if (row[k] >= 0) {
        EXPECT_EQ(row[k], direct[static_cast<std::size_t>(k)]) << "node " << n << " class " << k;
      }
    }
  }
  std::int32_t unknown = 0;
  for (std::int32_t n = 0; n < 50; ++n) {
    for (std::int32_t k = 0; k < classes; ++k) unknown += memo.held(n)[k] < 0 ? 1 : 0;
  }
  EXPECT_GT(unknown, 0);  // some entries were never asked for
  for (std::int32_t n = 0; n < 50; ++n) {
    std::int64_t const* row = memo.row(n);
    EXPECT_EQ(values(row, static_cast<std::size_t>(classes) + 1), c.direct(n)) << "node " << n;
  }
}

TEST(FragMemo, ANodeThatChangesReadsItsNewState) {
  std::mt19937 rng(11);
  cluster c = random_cluster(rng, 64);
  frag_memo memo;
  ASSERT_TRUE(memo.bind(c.op()));
  auto const width = c.c_gpus.size() + 1;
  for (std::int32_t n = 0; n < 64; ++n) ASSERT_NE(memo.row(n), nullptr);
  // Commits: GPUs and CPU taken where a node has them; the rows read then are the new states'.
  for (std::int32_t n = 0; n < 64; ++n) {
    auto const b = static_cast<std::size_t>(c.gpu_begin[static_cast<std::size_t>(n)]);
    if (b < static_cast<std::size_t>(c.gpu_begin[static_cast<std::size_t>(n) + 1])) c.gpu_free[b] /= 2;
    c.cpu_free[static_cast<std::size_t>(n)] = std::max<std::int64_t>(0, c.cpu_free[static_cast<std::size_t>(n)] - 4000);
  }
  for (std::int32_t n = 0; n < 64; ++n) {
    std::int64_t const* row = memo.row(n);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(values(row, width), c.direct(n)) << "node " << n;
  }
}

TEST(FragMemo, ARefreshNamesAScoreTwinItsWorkerScoredInIt) {
  cluster c;
  c.add_node({1000, 500, 0, 1000}, 8000, 0);  // 0
  c.add_node({0, 1000, 1000, 500}, 8000, 0);  // 1: node 0's twin, its GPUs in another order
  c.add_node({500, 1000, 1000, 0}, 8000, 0);  // 2: node 0's fragmentation state, less memory
  c.add_node({500, 1000, 1000, 0}, 4000, 0);  // 3: less CPU
  c.add_node({1000, 0, 500, 1000}, 8000, 0);  // 4: node 0's twin again
  c.mem_free[2] -= 1;
  std::mt19937 rng(3);
  cluster const shapes = random_cluster(rng, 1);
  c.c_gpus = shapes.c_gpus, c.c_milli = shapes.c_milli, c.c_cpu = shapes.c_cpu;
  c.t_gpus = shapes.t_gpus, c.t_milli = shapes.t_milli, c.t_cpu = shapes.t_cpu, c.t_freq = shapes.t_freq,
  c.t_mask = shapes.t_mask;
  frag_memo memo;
  ASSERT_TRUE(memo.bind(c.op()));
  auto const every = [](std::int32_t) { return true; };
  auto const twin_in = [&](std::int32_t n, std::uint64_t refresh) {
    std::int32_t same = -2;
    EXPECT_NE(memo.row(n, every, refresh, &same), nullptr);
    return same;
  };
  // Refresh 1: node 0 scores; 1 and 4 are its twins, 2 and 3 not.
  EXPECT_EQ(twin_in(0, 1), -1);
  EXPECT_EQ(twin_in(1, 1), 0);
  EXPECT_EQ(twin_in(4, 1), 0);
  EXPECT_EQ(twin_in(3, 1), -1);
  EXPECT_EQ(twin_in(2, 1), -1);
  // Node 2 scored its state's row last: node 0 is not its twin.
  EXPECT_EQ(twin_in(0, 1), -1);
  EXPECT_EQ(twin_in(1, 1), 0);
  // Refresh 2 knows nothing of the first's columns: node 4 scores first.
  EXPECT_EQ(twin_in(4, 2), -1);
  EXPECT_EQ(twin_in(1, 2), 4);
  // A row read outside a refresh names no twin and keeps none.
  EXPECT_NE(memo.row(1, every), nullptr);
  EXPECT_EQ(twin_in(0, 2), 4);
  // Each row as its nodes' state's, whichever scored it.
  for (std::int32_t n = 0; n < 5; ++n) EXPECT_EQ(values(memo.row(n), c.c_gpus.size() + 1), c.direct(n)) << n;
}

TEST(FragMemo, ReadsWithoutFillingSeedsFromATableAndHoldsNoMoreThanItsBound) {
  std::mt19937 rng(3);
  cluster const c = random_cluster(rng, 200);
  auto const width = c.c_gpus.size() + 1;
  {
    frag_memo memo;
    ASSERT_TRUE(memo.bind(c.op()));
    EXPECT_EQ(memo.held(0), nullptr);
    EXPECT_EQ(memo.states(), 0U);
  }
  {
    score_table const t(c, 200);
    score_cell_op const op = t.op(c);
    frag_memo memo;
    ASSERT_TRUE(memo.bind(op));
    memo.seed(t.table.data());
    EXPECT_EQ(memo.states(), t.frag_node.size());
    for (std::int32_t n = 0; n < 200; ++n) {
      std::int64_t const* row = memo.held(n);
      ASSERT_NE(row, nullptr) << "node " << n;
      EXPECT_EQ(values(row, width), c.direct(n));
    }
  }
  {
    std::size_t const bound = 4096;  // a few rows of 8 values and their keys
    frag_memo memo(bound);
    ASSERT_TRUE(memo.bind(c.op()));
    std::int32_t refused = 0;
    for (std::int32_t n = 0; n < 200; ++n) {
      std::int64_t const* row = memo.row(n);
      if (row == nullptr) {
        ++refused;
        EXPECT_EQ(memo.held(n), nullptr) << "node " << n;  // refused: its state is not held
        continue;
      }
      EXPECT_EQ(values(row, width), c.direct(n)) << "node " << n;
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(memo.states(), 10U);
    EXPECT_LE(memo.bytes(), bound);
  }
}

TEST(FragMemos, EachWorkerReadsAndFillsItsOwnSeededAlike) {
  std::mt19937 rng(17);
  cluster const c = random_cluster(rng, 300);
  auto const width = c.c_gpus.size() + 1;
  score_table const t(c, 100);  // the first 100 nodes' states
  auto const& frag_node = t.frag_node;
  score_cell_op const op = t.op(c);
  frag_memos memos(3);
  ASSERT_TRUE(memos.bind(op));
  memos.seed(t.table.data());
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(memos.at(k).states(), frag_node.size()) << "worker " << k;
  // Four workers, the fourth beyond the memos: it is given none.
  std::vector<int> wrong(4, 0), without(4, 0);
#pragma omp parallel num_threads(4)
  {
    int const me = omp_get_thread_num();
    for (std::int32_t n = me; n < 300; n += omp_get_num_threads()) {
      frag_memo* const m = memos.mine();
      if (m == nullptr) {
        ++without[static_cast<std::size_t>(me)];
        continue;
      }
      if (values(m->row(n), width) != c.direct(n)) ++wrong[static_cast<std::size_t>(me)];
    }
  }
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(wrong[k], 0) << "worker " << k;
    EXPECT_EQ(without[k] > 0, k == 3) << "worker " << k;
  }
  // The nodes past the seed's were filled by their worker's memo alone.
  std::size_t grown = 0;
  for (std::size_t k = 0; k < 3; ++k) grown += memos.at(k).states() - frag_node.size();
  EXPECT_GT(grown, 0U);
  std::size_t const before = memos.at(0).states();
  EXPECT_EQ(memos.bind(op), true);  // the same inputs: kept
  EXPECT_EQ(memos.at(0).states(), before);
  memos.clear();
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(memos.at(k).states(), 0U) << "worker " << k;
}

TEST(FragMemo, ForgetsItsRowsWhenTheShapesOrTheTaskSetChange) {
  std::mt19937 rng(5);
  cluster c = random_cluster(rng, 100);
  auto const width = c.c_gpus.size() + 1;
  frag_memo memo;
  ASSERT_TRUE(memo.bind(c.op()));
  for (std::int32_t n = 0; n < 100; ++n) memo.row(n);
  std::size_t const states = memo.states();
  ASSERT_GT(states, 1U);
  ASSERT_TRUE(memo.bind(c.op()));  // the same inputs: kept
  EXPECT_EQ(memo.states(), states);
  for (auto change : {0, 1, 2, 3}) {
    if (change == 0) c.c_milli[2] = 750;        // a class's share, in place
    if (change == 1) c.t_freq[0] -= 1000;       // a task's frequency
    if (change == 2) c.t_cpu[3] += 1000;        // a task's CPU
    if (change == 3) c.c_cpu.back() += 2000;    // a class's CPU
    ASSERT_TRUE(memo.bind(c.op()));
    EXPECT_EQ(memo.states(), 0U) << "change " << change;
    for (std::int32_t n = 0; n < 100; ++n) {
      std::int64_t const* row = memo.row(n);
      ASSERT_NE(row, nullptr);
      EXPECT_EQ(values(row, width), c.direct(n)) << "change " << change << " node " << n;
    }
  }
  // A score without the fragmentation table keeps nothing.
  score_cell_op op = c.op();
  op.p.w_fragmentation = 0;
  EXPECT_FALSE(memo.bind(op));
}

}  // namespace
}  // namespace placer::kernels
