// The FGD paper's policies as simulate algorithms (sim/include/placer/sim/
// baseline_policies.hpp): each policy's choice on hand-computed clusters,
// gangs and failure reasons, a random-round property test of the feasibility
// rules (pools, loaning, models, health, capacity), cache consistency across
// rounds, and agreement with the FGD experiment's own engine on
// one-pod-per-round sequences (synthetic openb-like and, when
// ../shared/data is present, the real openb `default` trace).
#include <placer/sim/baseline_policies.hpp>
#include <placer/sim/fgd.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <numeric>
#include <random>
#include <set>

namespace fgd = placer::sim::fgd;
namespace fs = std::filesystem;
using placer::sim::baseline_options;
using placer::sim::baseline_solver;

namespace {

placer::node gpu_node(std::string name, std::vector<std::int32_t> gpu_free, std::int64_t cpu_free = 64000,
                      std::string model = "H100") {
  placer::node n;
  n.name = std::move(name);
  n.gpu_model = gpu_free.empty() ? "" : std::move(model);
  n.gpu_free_milli = std::move(gpu_free);
  n.cpu_milli_capacity = 128000;
  n.cpu_milli_free = cpu_free;
  n.memory_mib_capacity = 1 << 20;
  n.memory_mib_free = 1 << 20;
  return n;
}

placer::job make_job(std::string name, std::int32_t gpus, std::int32_t milli = 1000, std::int64_t cpu = 0,
                     std::int32_t replicas = 1) {
  placer::job j;
  j.name = std::move(name);
  j.per_replica.gpus = gpus;
  j.per_replica.gpu_milli = gpus > 0 ? milli : 1000;
  j.per_replica.cpu_milli = cpu;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  j.gang = replicas > 1;
  return j;
}

placer::round_input round_of(std::vector<placer::node> nodes, std::vector<placer::job> pending) {
  placer::round_input in;
  in.state.nodes = std::move(nodes);
  in.pending = std::move(pending);
  for (std::size_t i = 0; i < in.pending.size(); ++i) in.pending[i].submit_time = static_cast<std::int64_t>(i);
  return in;
}

fgd::typical_task task(std::int32_t gpus, std::int32_t milli, double freq, std::int64_t cpu = 0) {
  fgd::typical_task t;
  t.gpus = gpus;
  t.milli = milli;
  t.cpu = cpu;
  t.freq = freq;
  return t;
}

placer::placement const* placed(placer::round_result const& r, std::int32_t job) {
  for (auto const& p : r.placements) {
    if (p.job == job) return &p;
  }
  return nullptr;
}

placer::unplaced_reason reason_of(placer::round_result const& r, std::int32_t job) {
  for (auto const& u : r.unplaced_jobs) {
    if (u.job == job) return u.reason;
  }
  return placer::unplaced_reason::none;
}

// ------------------------------------------------------ independent checker

std::uint8_t pool_bit(placer::pool_kind p) {
  return p == placer::pool_kind::training ? 1 : p == placer::pool_kind::inference ? 2 : 4;
}

/// ops.hpp node_admits written out again: health, pool rule (own or shared
/// pool; training/batch may borrow loanable inference nodes when loaning is
/// on) and, for GPU jobs, the model.
bool admits(placer::node const& n, placer::job const& j, bool loaning) {
  if (!n.healthy) return false;
  bool const inference = j.kind == placer::job_kind::inference;
  std::uint8_t const mask = inference ? (2 | 4) : (1 | 4);
  bool const pool_ok = (mask & pool_bit(n.pool)) != 0 ||
                       (n.pool == placer::pool_kind::inference && !inference && loaning && n.loanable);
  if (!pool_ok) return false;
  if (j.per_replica.gpus == 0) return true;
  if (n.gpu_count() == 0) return false;
  auto const& a = j.allowed_gpu_models;
  return a.empty() || std::find(a.begin(), a.end(), n.gpu_model) != a.end();
}

/// Re-applies every placement of `r` to a copy of the cluster, asserting the
/// placement rules, and returns the cluster after the round.
placer::cluster check_round(placer::round_input const& in, placer::round_result const& r) {
  placer::cluster c = in.state;
  std::vector<int> seen(in.pending.size(), 0);
  std::int64_t replicas = 0, milli = 0;
  for (auto const& p : r.placements) {
    EXPECT_GE(p.job, 0);
    EXPECT_LT(p.job, static_cast<std::int32_t>(in.pending.size()));
    if (p.job < 0 || p.job >= static_cast<std::int32_t>(in.pending.size())) continue;
    ++seen[static_cast<std::size_t>(p.job)];
    auto const& j = in.pending[static_cast<std::size_t>(p.job)];
    EXPECT_EQ(static_cast<std::int32_t>(p.replicas.size()), j.replicas) << j.name << ": all or nothing";
    replicas += static_cast<std::int64_t>(p.replicas.size());
    milli += j.per_replica.gpu_milli_total() * static_cast<std::int64_t>(p.replicas.size());
    for (auto const& rp : p.replicas) {
      EXPECT_GE(rp.node, 0);
      EXPECT_LT(rp.node, static_cast<std::int32_t>(c.nodes.size()));
      if (rp.node < 0 || rp.node >= static_cast<std::int32_t>(c.nodes.size())) continue;
      auto& n = c.nodes[static_cast<std::size_t>(rp.node)];
      EXPECT_TRUE(admits(n, j, in.pol.queue.loaning)) << j.name << " on " << n.name;
      EXPECT_EQ(static_cast<std::int32_t>(rp.gpus.size()), j.per_replica.gpus) << j.name;
      EXPECT_EQ(rp.gpu_milli, j.per_replica.gpus > 0 ? j.per_replica.gpu_milli : 1000);
      std::set<std::int32_t> distinct(rp.gpus.begin(), rp.gpus.end());
      EXPECT_EQ(distinct.size(), rp.gpus.size()) << j.name << ": a GPU twice";
      for (auto g : rp.gpus) {
        EXPECT_TRUE(g >= 0 && g < n.gpu_count()) << j.name << ": GPU index " << g;
        if (g < 0 || g >= n.gpu_count()) continue;
        EXPECT_TRUE(n.gpu_is_healthy(static_cast<std::size_t>(g))) << j.name << " on an unhealthy GPU";
        if (!j.per_replica.fractional()) {
          EXPECT_EQ(n.gpu_free_milli[static_cast<std::size_t>(g)], 1000) << j.name << ": whole GPU not idle";
        }
        n.gpu_free_milli[static_cast<std::size_t>(g)] -= rp.gpu_milli;
        EXPECT_GE(n.gpu_free_milli[static_cast<std::size_t>(g)], 0) << "GPU over-committed on " << n.name;
      }
      n.cpu_milli_free -= j.per_replica.cpu_milli;
      n.memory_mib_free -= j.per_replica.memory_mib;
      EXPECT_GE(n.cpu_milli_free, 0) << "CPU over-committed on " << n.name;
      EXPECT_GE(n.memory_mib_free, 0) << "memory over-committed on " << n.name;
    }
  }
  for (auto const& u : r.unplaced_jobs) {
    EXPECT_TRUE(u.job >= 0 && u.job < static_cast<std::int32_t>(in.pending.size())) << "unplaced index " << u.job;
    if (u.job < 0 || u.job >= static_cast<std::int32_t>(in.pending.size())) continue;
    ++seen[static_cast<std::size_t>(u.job)];
    auto const& j = in.pending[static_cast<std::size_t>(u.job)];
    if (u.reason == placer::unplaced_reason::no_feasible_node) {
      // Nothing admits the job even on an empty node of the cluster.
      for (auto const& n : in.state.nodes) {
        bool const could = admits(n, j, in.pol.queue.loaning) && j.per_replica.cpu_milli <= n.cpu_milli_capacity &&
                           j.per_replica.memory_mib <= n.memory_mib_capacity &&
                           [&] {
                             std::int32_t h = 0;
                             for (std::int32_t g = 0; g < n.gpu_count(); ++g) h += n.gpu_is_healthy(static_cast<std::size_t>(g)) ? 1 : 0;
                             return h >= j.per_replica.gpus;
                           }();
        EXPECT_FALSE(could) << j.name << " reported NoFeasibleNode but fits " << n.name;
      }
    }
  }
  for (std::size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], 1) << "job " << k << " answered " << seen[k] << " times";
  EXPECT_EQ(r.metrics.jobs_placed, static_cast<std::int32_t>(r.placements.size()));
  EXPECT_EQ(r.metrics.replicas_placed, replicas);
  EXPECT_EQ(r.metrics.gpu_milli_placed, milli);
  return c;
}

void add_running(placer::round_input& in, placer::round_result const& r) {
  for (auto const& p : r.placements) {
    auto const& j = in.pending[static_cast<std::size_t>(p.job)];
    placer::running_job rj;
    rj.name = j.name;
    rj.kind = j.kind;
    rj.per_replica = j.per_replica;
    rj.replicas = p.replicas;
    in.running.push_back(std::move(rj));
  }
}

/// Applies a checked round: the cluster after it, and its jobs as running.
void apply_round(placer::round_input& in, placer::round_result const& r) {
  in.state = check_round(in, r);
  add_running(in, r);
}

/// The same without copying the cluster (long one-pod-per-round replays):
/// applies in place and checks the touched nodes only.
void apply_in_place(placer::round_input& in, placer::round_result const& r) {
  for (auto const& p : r.placements) {
    auto const& d = in.pending[static_cast<std::size_t>(p.job)].per_replica;
    for (auto const& rp : p.replicas) {
      auto& n = in.state.nodes[static_cast<std::size_t>(rp.node)];
      for (auto g : rp.gpus) {
        auto& f = n.gpu_free_milli[static_cast<std::size_t>(g)];
        EXPECT_TRUE(d.fractional() || f == 1000);
        f -= rp.gpu_milli;
        EXPECT_GE(f, 0);
      }
      n.cpu_milli_free -= d.cpu_milli;
      n.memory_mib_free -= d.memory_mib;
      EXPECT_GE(n.cpu_milli_free, 0);
      EXPECT_GE(n.memory_mib_free, 0);
    }
  }
  add_running(in, r);
}

void release(placer::round_input& in, std::size_t k) {
  auto const& rj = in.running[k];
  for (auto const& rp : rj.replicas) {
    auto& n = in.state.nodes[static_cast<std::size_t>(rp.node)];
    for (auto g : rp.gpus) n.gpu_free_milli[static_cast<std::size_t>(g)] += rp.gpu_milli;
    n.cpu_milli_free += rj.per_replica.cpu_milli;
    n.memory_mib_free += rj.per_replica.memory_mib;
  }
  in.running.erase(in.running.begin() + static_cast<std::ptrdiff_t>(k));
}

fs::path data_dir() {
  if (char const* env = std::getenv("PLACER_SHARED_DATA")) return env;
  return fs::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / "shared" / "data";
}

}  // namespace

// ------------------------------------------------------------- per policy

TEST(BaselinePolicies, NamesAndErrors) {
  auto const names = placer::sim::baseline_policy_names();
  EXPECT_EQ(names.size(), 6U);
  for (auto const& n : names) {
    EXPECT_TRUE(placer::sim::is_baseline_policy(n));
    EXPECT_NO_THROW((void)baseline_solver(n, 1));
  }
  EXPECT_FALSE(placer::sim::is_baseline_policy("placer"));
  EXPECT_THROW((void)baseline_solver("bestfit", 1), std::invalid_argument);
}

TEST(BaselinePolicies, BestFitPicksTheTightestNode) {
  // A: one GPU with 700 idle; B: two idle GPUs; C: 3,700 idle milli on 4
  // GPUs but only 8 CPUs free. Raw scores for a 300 share (CPU 0):
  // A = 100(1 - .5*64/128 - .5*400/8000) = 72.5 -> 72, B = 100(1 - .25 -
  // .5*1700/8000) = 64, C = 100(1 - .5*8/128 - .5*3400/8000) = 75.6 -> 75:
  // C, the tightest in CPU and GPU together (normalised 100); without C, A.
  auto in = round_of({gpu_node("A", {700}), gpu_node("B", {1000, 1000}),
                      gpu_node("C", std::vector<std::int32_t>(4, 1000), 8000)},
                     {make_job("share", 1, 300)});
  in.state.nodes[2].gpu_free_milli[0] = 700;  // C: 3700 idle milli
  auto r = baseline_solver("best-fit", 7)(in);
  ASSERT_NE(placed(r, 0), nullptr);
  EXPECT_EQ(placed(r, 0)->replicas[0].node, 2);
  EXPECT_EQ(placed(r, 0)->replicas[0].gpus, std::vector<std::int32_t>{0});  // tightest GPU: the 700 one
  EXPECT_EQ(r.backend, "baseline:best-fit");

  in.state.nodes.pop_back();
  for (std::uint64_t seed = 0; seed < 8; ++seed) {  // no tie: the seed does not matter
    r = baseline_solver("best-fit", seed)(in);
    ASSERT_NE(placed(r, 0), nullptr);
    EXPECT_EQ(placed(r, 0)->replicas[0].node, 0);
  }
}

TEST(BaselinePolicies, FgdPicksTheNodeWhoseFragmentationGrowsLeast) {
  // M = {a 500 share}. Same cluster as BestFit's: A = [700], B = [1000, 1000];
  // pod = 300 share. On A: F 0 -> 400 (400 idle left, below 500): score
  // 100 * sigmoid(-0.4) = 40. On B: 700 and 1000 idle both still take a 500
  // share: F 0 -> 0, score 50. FGD takes B where BestFit takes A.
  std::vector<fgd::typical_task> const m{task(1, 500, 1.0)};
  baseline_options o;
  o.tasks = m;
  auto const in = round_of({gpu_node("A", {700}), gpu_node("B", {1000, 1000})}, {make_job("share", 1, 300)});
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    o.seed = seed;
    auto const r = baseline_solver("fgd", o)(in);
    ASSERT_NE(placed(r, 0), nullptr);
    EXPECT_EQ(placed(r, 0)->replicas[0].node, 1);
    EXPECT_EQ(placed(r, 0)->replicas[0].gpus, std::vector<std::int32_t>{0});  // equal idle: lowest index
    EXPECT_EQ(placed(r, 0)->replicas[0].gpu_milli, 300);
  }
  // The hand numbers, through the experiment's functions.
  fgd::node_state a;
  a.cpu_cap = 128000;
  a.cpu_free = 64000;
  a.mem_free = 1 << 20;
  a.model = 0;
  a.gpu_free = {700};
  a.gpu_free_total = 700;
  fgd::pod p;
  p.gpus = 1;
  p.milli = 300;
  EXPECT_EQ(fgd::fgd_score(a, p, m, fgd::node_fragmentation(a, m)), 40);

  // The share goes on the GPU FGD chooses, not the tightest: on [600, 1000]
  // the tight GPU would keep 300 (< 500, F = 300, score 42); the idle one
  // keeps 700 and 600 (F = 0, score 50).
  auto const one = round_of({gpu_node("A", {600, 1000})}, {make_job("share", 1, 300)});
  auto const r = baseline_solver("fgd", o)(one);
  ASSERT_NE(placed(r, 0), nullptr);
  EXPECT_EQ(placed(r, 0)->replicas[0].gpus, std::vector<std::int32_t>{1});
  auto const rb = baseline_solver("best-fit", 1)(one);
  ASSERT_NE(placed(rb, 0), nullptr);
  EXPECT_EQ(placed(rb, 0)->replicas[0].gpus, std::vector<std::int32_t>{0});  // the others: tightest
}

TEST(BaselinePolicies, FgdRunningMComesFromThePodsSeen) {
  // Pending: a 300 share (high priority, placed first) and three 500 shares,
  // so M = {500: 0.75, 300: 0.25}. 300 on A = [700] leaves 400, too small
  // for the 500 task: F = 0.75 * 400 = 300, score 100 * sigmoid(-0.3) = 42;
  // on B = [1000, 1000] nothing fragments: 50. With an empty M every node
  // scores 50 and the seed's permutation decides.
  std::vector<placer::job> jobs{make_job("small", 1, 300), make_job("big-0", 1, 500), make_job("big-1", 1, 500),
                                make_job("big-2", 1, 500)};
  jobs[0].priority = 1;
  auto const in = round_of({gpu_node("A", {700}), gpu_node("B", {1000, 1000})}, jobs);
  int on_a_without_m = 0;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    auto const r = baseline_solver("fgd", seed)(in);
    ASSERT_NE(placed(r, 0), nullptr);
    EXPECT_EQ(placed(r, 0)->replicas[0].node, 1) << "seed " << seed;
    baseline_options o;
    o.seed = seed;
    o.tasks = std::vector<fgd::typical_task>{};
    auto const r0 = baseline_solver("fgd", o)(in);
    ASSERT_NE(placed(r0, 0), nullptr);
    on_a_without_m += placed(r0, 0)->replicas[0].node == 0 ? 1 : 0;
  }
  EXPECT_GT(on_a_without_m, 0);  // so M, not the tie order, sent it to B
}

TEST(BaselinePolicies, GpuPackingPrefersAPartlyUsedGpuForAShare) {
  // Idle node: max(33 - 8, 8) = 25. Node with GPU 3 at 500 idle: the share
  // takes that GPU, 100 - floor(50 / 10) = 95.
  std::vector<std::int32_t> used(8, 1000);
  used[3] = 500;
  auto const in = round_of({gpu_node("idle", std::vector<std::int32_t>(8, 1000)), gpu_node("used", used)},
                           {make_job("share", 1, 300)});
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    auto const r = baseline_solver("gpu-packing", seed)(in);
    ASSERT_NE(placed(r, 0), nullptr);
    EXPECT_EQ(placed(r, 0)->replicas[0].node, 1);
    EXPECT_EQ(placed(r, 0)->replicas[0].gpus, std::vector<std::int32_t>{3});
  }
}

TEST(BaselinePolicies, GpuClusteringKeepsKindsTogether) {
  // A holds a 1-GPU pod, B a share, C nothing (kinds from running jobs).
  // 1-GPU pod: A 75 + 25 * 1000/8000 = 78, B 0 + 1 = 1, C 25 -> A.
  // Then the share: A 0 + 25 * 2000/8000 = 6, B 75 + 1 = 76, C 25 -> B.
  std::vector<std::int32_t> a(8, 1000), b(8, 1000);
  a[0] = 0;
  b[0] = 500;
  auto in = round_of({gpu_node("A", a), gpu_node("B", b), gpu_node("C", std::vector<std::int32_t>(8, 1000))},
                     {make_job("whole", 1), make_job("share", 1, 300)});
  placer::running_job r1;
  r1.name = "r1";
  r1.per_replica = make_job("r1", 1).per_replica;
  r1.replicas = {placer::replica_placement{0, {0}, 1000}};
  placer::running_job r2;
  r2.name = "r2";
  r2.per_replica = make_job("r2", 1, 500).per_replica;
  r2.replicas = {placer::replica_placement{1, {0}, 500}};
  in.running = {r1, r2};
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    auto const r = baseline_solver("gpu-clustering", seed)(in);
    ASSERT_NE(placed(r, 0), nullptr);
    ASSERT_NE(placed(r, 1), nullptr);
    EXPECT_EQ(placed(r, 0)->replicas[0].node, 0);
    EXPECT_EQ(placed(r, 1)->replicas[0].node, 1);
    EXPECT_EQ(placed(r, 1)->replicas[0].gpus, std::vector<std::int32_t>{0});  // tightest GPU (500 idle)
  }
}

TEST(BaselinePolicies, DotProdTakesTheSmallestDotProduct) {
  // 1 GPU + 32 CPUs. A: 64 CPUs, 8 idle GPUs: dot = (.5 * .25 + 1 * .125) / 2
  // -> 100 * (1 - .125) = 87. B: 128 CPUs, 4 idle GPUs: (1 * .25 + .5 * .125) / 2
  // -> 84. The larger score (smaller dot product) wins: A.
  std::vector<std::int32_t> half(8, 0);
  std::fill(half.begin(), half.begin() + 4, 1000);
  auto const in = round_of({gpu_node("A", std::vector<std::int32_t>(8, 1000), 64000), gpu_node("B", half, 128000)},
                           {make_job("one", 1, 1000, 32000)});
  fgd::pod p;
  p.gpus = 1;
  p.milli = 1000;
  p.cpu = 32000;
  fgd::node_state a, b;
  a.cpu_free = 64000;
  a.gpu_free_total = 8000;
  b.cpu_free = 128000;
  b.gpu_free_total = 4000;
  EXPECT_EQ(fgd::dot_prod_score(a, p), 87);
  EXPECT_EQ(fgd::dot_prod_score(b, p), 84);
  auto const r = baseline_solver("dot-prod", 3)(in);
  ASSERT_NE(placed(r, 0), nullptr);
  EXPECT_EQ(placed(r, 0)->replicas[0].node, 0);
  EXPECT_EQ(placed(r, 0)->replicas[0].gpus, std::vector<std::int32_t>{0});  // lowest idle GPU
}

TEST(BaselinePolicies, RandomIsSeededAndOnlyPicksFeasibleNodes) {
  // 40 nodes; only those with an even index admit the jobs (the others have
  // the wrong model, too little CPU or are unhealthy).
  std::vector<placer::node> nodes;
  for (int i = 0; i < 40; ++i) {
    auto n = gpu_node("n" + std::to_string(i), std::vector<std::int32_t>(8, 1000));
    if (i % 2 == 1) {
      if (i % 3 == 0) n.gpu_model = "V100";
      else if (i % 3 == 1) n.cpu_milli_free = 1000;
      else n.healthy = false;
    }
    nodes.push_back(std::move(n));
  }
  std::vector<placer::job> jobs;
  for (int k = 0; k < 30; ++k) {
    auto j = make_job("j" + std::to_string(k), 1, k % 2 == 0 ? 1000 : 250, 4000);
    j.allowed_gpu_models = {"H100"};
    jobs.push_back(std::move(j));
  }
  auto const in = round_of(nodes, jobs);
  auto choices = [&](std::uint64_t seed) {
    auto const r = baseline_solver("random", seed)(in);
    check_round(in, r);
    std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> out;
    for (auto const& p : r.placements) out.emplace_back(p.replicas[0].node, p.replicas[0].gpus);
    return out;
  };
  auto const a = choices(11);
  ASSERT_EQ(a.size(), jobs.size());
  EXPECT_EQ(a, choices(11));
  EXPECT_NE(a, choices(12));
  std::set<std::int32_t> used;
  for (auto const& [n, g] : a) {
    EXPECT_EQ(n % 2, 0) << "infeasible node " << n;
    used.insert(n);
  }
  EXPECT_GT(used.size(), 5U);  // spread out, not a fixed order
}

TEST(BaselinePolicies, GangsAreAllOrNothingWithTheSolversReasons) {
  for (auto const& name : placer::sim::baseline_policy_names()) {
    // Two idle 8-GPU nodes. j0 (3 x 8 GPUs) places two replicas, then fails:
    // rolled back, so j1 (2 x 8 GPUs) still gets both nodes.
    auto in = round_of({gpu_node("A", std::vector<std::int32_t>(8, 1000), 128000),
                        gpu_node("B", std::vector<std::int32_t>(8, 1000), 128000)},
                       {make_job("three", 8, 1000, 0, 3), make_job("two", 8, 1000, 0, 2), make_job("one", 1),
                        make_job("model", 1), make_job("huge", 16), make_job("cpu-only", 0, 1000, 1000)});
    in.pending[3].allowed_gpu_models = {"A100"};
    auto const r = baseline_solver(name, 5)(in);
    check_round(in, r);
    EXPECT_EQ(reason_of(r, 0), placer::unplaced_reason::gang_incomplete) << name;
    ASSERT_NE(placed(r, 1), nullptr) << name;
    std::set<std::int32_t> nodes{placed(r, 1)->replicas[0].node, placed(r, 1)->replicas[1].node};
    EXPECT_EQ(nodes, (std::set<std::int32_t>{0, 1})) << name;
    EXPECT_EQ(reason_of(r, 2), placer::unplaced_reason::insufficient_capacity) << name;
    EXPECT_EQ(reason_of(r, 3), placer::unplaced_reason::no_feasible_node) << name;
    EXPECT_EQ(reason_of(r, 4), placer::unplaced_reason::no_feasible_node) << name;
    EXPECT_NE(placed(r, 5), nullptr) << name;  // CPU-only: CPU left on both nodes
    EXPECT_EQ(r.metrics.jobs_placed, 2);
    EXPECT_EQ(r.metrics.replicas_placed, 3);
    EXPECT_EQ(r.metrics.gpu_milli_placed, 16000);
    EXPECT_DOUBLE_EQ(r.metrics.gar_before, 0.0);
    EXPECT_DOUBLE_EQ(r.metrics.gar_after, 1.0);
  }
}

TEST(BaselinePolicies, QueueOrderIsPriorityThenSubmitTime) {
  // One idle GPU, three 1-GPU jobs: the high-priority one wins, then the
  // earlier submission; index only breaks exact ties.
  auto in = round_of({gpu_node("A", {1000})}, {make_job("late", 1), make_job("early", 1), make_job("urgent", 1)});
  in.pending[0].submit_time = 10;
  in.pending[1].submit_time = 5;
  in.pending[2].submit_time = 20;
  in.pending[2].priority = 3;
  auto const r = baseline_solver("best-fit", 1)(in);
  EXPECT_NE(placed(r, 2), nullptr);
  in.pending[2].priority = 0;
  auto const r2 = baseline_solver("best-fit", 1)(in);
  EXPECT_NE(placed(r2, 1), nullptr);
}

// --------------------------------------------------------- property test

namespace {

placer::round_input random_round(std::mt19937_64& rng) {
  auto pick = [&](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  static std::vector<std::string> const models{"H100", "A100", "V100"};
  placer::round_input in;
  int const n_nodes = 5 + pick(30);
  for (int i = 0; i < n_nodes; ++i) {
    placer::node n;
    n.name = "n" + std::to_string(i);
    static int const gpu_counts[] = {0, 2, 4, 8, 8};
    int const g = gpu_counts[pick(5)];
    if (g > 0) n.gpu_model = models[static_cast<std::size_t>(pick(3))];
    static int const frees[] = {0, 1000, 1000, 1000, 500, 250, 750, 100};
    for (int k = 0; k < g; ++k) n.gpu_free_milli.push_back(frees[pick(8)]);
    if (g > 0 && pick(4) == 0) {
      n.gpu_healthy.assign(static_cast<std::size_t>(g), 1);
      n.gpu_healthy[static_cast<std::size_t>(pick(g))] = 0;
    }
    n.cpu_milli_capacity = pick(2) == 0 ? 64000 : 128000;
    n.cpu_milli_free = std::uniform_int_distribution<std::int64_t>(0, n.cpu_milli_capacity)(rng);
    n.memory_mib_capacity = 256 * 1024;
    n.memory_mib_free = std::uniform_int_distribution<std::int64_t>(0, n.memory_mib_capacity)(rng);
    n.pool = static_cast<placer::pool_kind>(pick(3));
    n.loanable = pick(2) == 0;
    n.healthy = pick(10) != 0;
    in.state.nodes.push_back(std::move(n));
  }
  in.pol.queue.loaning = pick(3) != 0;
  int const n_jobs = 1 + pick(25);
  for (int k = 0; k < n_jobs; ++k) {
    placer::job j;
    j.name = "j" + std::to_string(rng());
    j.kind = static_cast<placer::job_kind>(pick(3));
    static int const gpus[] = {0, 1, 1, 1, 2, 4, 8};
    j.per_replica.gpus = gpus[pick(7)];
    static int const shares[] = {100, 250, 500, 700, 1000, 1000};
    j.per_replica.gpu_milli = j.per_replica.gpus == 1 ? shares[pick(6)] : 1000;
    j.per_replica.cpu_milli = 1000 * pick(40);
    j.per_replica.memory_mib = 1024 * pick(64);
    if (pick(2) == 0) j.allowed_gpu_models = {models[static_cast<std::size_t>(pick(3))]};
    if (pick(5) == 0) j.allowed_gpu_models.push_back("B200");  // not in the cluster
    j.replicas = pick(3) == 0 ? 1 + pick(3) : 1;
    j.gang = j.replicas > 1 || pick(8) == 0;
    j.priority = pick(3);
    j.submit_time = pick(100);
    in.pending.push_back(std::move(j));
  }
  return in;
}

/// Next round of a sequence: this round's placements run, a few running
/// jobs end, placed jobs leave the queue and new ones arrive.
void advance(placer::round_input& in, placer::round_result const& r, std::mt19937_64& rng) {
  apply_round(in, r);
  std::vector<char> gone(in.pending.size(), 0);
  for (auto const& p : r.placements) gone[static_cast<std::size_t>(p.job)] = 1;
  std::vector<placer::job> keep;
  for (std::size_t k = 0; k < in.pending.size(); ++k) {
    if (gone[k] == 0) keep.push_back(in.pending[k]);
  }
  in.pending = std::move(keep);
  for (std::size_t k = in.running.size(); k-- > 0;) {
    if (rng() % 3 == 0) release(in, k);
  }
  auto more = random_round(rng);
  for (std::size_t k = 0; k < std::min<std::size_t>(more.pending.size(), 6); ++k) in.pending.push_back(more.pending[k]);
  ++in.state.epoch;
}

}  // namespace

TEST(BaselineProperty, RandomRoundsNeverOverCommitAndRespectPoolsModelsHealth) {
  // 6 policies x 40 sequences x 6 rounds = 1,440 rounds on random clusters
  // (pools, loanable nodes, models, unhealthy nodes and GPUs, partly used
  // GPUs), every placement re-applied and checked.
  std::int64_t rounds = 0, placements = 0, no_node = 0, gang = 0;
  for (auto const& name : placer::sim::baseline_policy_names()) {
    for (std::uint64_t s = 0; s < 40; ++s) {
      std::mt19937_64 rng(1000 + s);
      auto in = random_round(rng);
      auto solve = baseline_solver(name, s);
      for (int k = 0; k < 6; ++k) {
        auto const r = solve(in);
        check_round(in, r);
        if (::testing::Test::HasFailure()) FAIL() << name << " seed " << s << " round " << k;
        ++rounds;
        placements += static_cast<std::int64_t>(r.placements.size());
        for (auto const& u : r.unplaced_jobs) {
          no_node += u.reason == placer::unplaced_reason::no_feasible_node ? 1 : 0;
          gang += u.reason == placer::unplaced_reason::gang_incomplete ? 1 : 0;
        }
        advance(in, r, rng);
      }
    }
  }
  EXPECT_EQ(rounds, 1440);
  EXPECT_GT(placements, 1000);  // the checks saw real work
  EXPECT_GT(no_node, 0);
  EXPECT_GT(gang, 0);
}

TEST(BaselineProperty, StateKeptAcrossRoundsGivesTheSameAnswersAsAFreshSolver) {
  // A long-lived solve_fn keeps its node view and FGD score caches between
  // rounds; a fresh one with the same seed (same tie permutation) and the
  // same fixed M must choose exactly the same. Random is left out: its
  // stream advances with every pick.
  std::vector<fgd::typical_task> const m{task(1, 1000, 0.5), task(1, 500, 0.3), task(2, 1000, 0.1, 8000),
                                         task(0, 0, 0.1, 4000)};
  for (auto const& name : placer::sim::baseline_policy_names()) {
    if (name == "random") continue;
    for (std::uint64_t s = 0; s < 15; ++s) {
      std::mt19937_64 rng(77 + s);
      auto in = random_round(rng);
      baseline_options o;
      o.seed = s;
      o.tasks = m;
      auto kept = baseline_solver(name, o);
      for (int k = 0; k < 6; ++k) {
        auto const a = kept(in);
        auto const b = baseline_solver(name, o)(in);
        ASSERT_EQ(a.placements.size(), b.placements.size()) << name << " seed " << s << " round " << k;
        for (std::size_t i = 0; i < a.placements.size(); ++i) {
          EXPECT_EQ(a.placements[i].job, b.placements[i].job);
          EXPECT_EQ(a.placements[i].replicas, b.placements[i].replicas) << name << " seed " << s << " round " << k;
        }
        EXPECT_DOUBLE_EQ(a.metrics.frag_ratio_after, b.metrics.frag_ratio_after);
        advance(in, a, rng);
      }
    }
  }
}

// ----------------------------------------------- against the experiment

namespace {

struct replay_result {
  std::vector<double> columns;
  std::int64_t placed = 0, failed = 0;
  std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> choices;  ///< per pod: node (-1 failed), GPUs
};

/// The FGD experiment's pod order for a seed, then one pod per round
/// through the solve_fn, which continues the experiment's random stream
/// (tie permutation, then Random's picks) and uses the experiment's M.
replay_result replay(fgd::workload const& w, std::string const& name, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto const order = fgd::order_and_tune(w.pods, 1.3, w.capacity_milli, rng);
  baseline_options o;
  o.rng = rng;
  o.tasks = w.tasks;
  auto solve = baseline_solver(name, o);
  replay_result out;
  placer::round_input in;
  in.state = w.cluster;
  std::vector<fgd::event_sample> ev;
  std::int64_t arrived = 0, allocated = 0;
  for (auto const& p : order) {
    in.pending.assign(1, w.jobs[static_cast<std::size_t>(p.job)]);
    auto const r = solve(in);
    arrived += p.gpu_milli_total();
    if (!r.placements.empty()) {
      out.choices.emplace_back(r.placements[0].replicas[0].node, r.placements[0].replicas[0].gpus);
      apply_in_place(in, r);
      allocated += p.gpu_milli_total();
      ++out.placed;
    } else {
      out.choices.emplace_back(-1, std::vector<std::int32_t>{});
      ++out.failed;
    }
    ev.push_back({arrived, allocated});
  }
  out.columns = fgd::discrete_columns(ev, w.capacity_milli, 130);
  return out;
}

/// The experiment's one-pod-at-a-time loop (fgd_experiment.cpp's chooser,
/// without its caches) written out again, for pod-by-pod comparison.
std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> reference(fgd::workload const& w, fgd::policy pol,
                                                                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto const order = fgd::order_and_tune(w.pods, 1.3, w.capacity_milli, rng);
  auto uniform = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  std::vector<std::int32_t> perm(w.nodes.size()), rank(w.nodes.size());
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[uniform(i)]);
  for (std::size_t i = 0; i < perm.size(); ++i) rank[static_cast<std::size_t>(perm[i])] = static_cast<std::int32_t>(i);
  auto nodes = w.nodes;
  std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> out;
  for (auto const& p : order) {
    std::vector<std::int32_t> feasible;
    std::vector<int> raw;
    for (std::int32_t n = 0; n < static_cast<std::int32_t>(nodes.size()); ++n) {
      if (fgd::fits(nodes[static_cast<std::size_t>(n)], p)) feasible.push_back(n);
    }
    std::int32_t node = -1, gpu = -1;
    if (pol == fgd::policy::random) {
      if (!feasible.empty()) {
        node = feasible[uniform(feasible.size())];
        if (p.fractional()) {
          std::vector<std::int32_t> ok;
          auto const& ns = nodes[static_cast<std::size_t>(node)];
          for (std::int32_t g = 0; g < ns.n_gpus(); ++g) {
            if (ns.gpu_free[static_cast<std::size_t>(g)] >= p.milli) ok.push_back(g);
          }
          gpu = ok[uniform(ok.size())];
        }
      }
    } else {
      int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
      for (auto n : feasible) {
        auto const& ns = nodes[static_cast<std::size_t>(n)];
        int s = 0;
        std::int32_t g = -1;
        switch (pol) {
          case fgd::policy::dot_prod: s = fgd::dot_prod_score(ns, p); break;
          case fgd::policy::gpu_clustering: s = fgd::gpu_clustering_score(ns, p); break;
          case fgd::policy::gpu_packing: s = fgd::gpu_packing_score(ns, p); break;
          case fgd::policy::best_fit: s = fgd::best_fit_raw_score(ns, p); break;
          case fgd::policy::fgd: s = fgd::fgd_score(ns, p, w.tasks, fgd::node_fragmentation(ns, w.tasks), &g); break;
          default: break;
        }
        raw.push_back(s * 64 + (g + 1));  // the GPU rides along (g + 1 <= 64)
        lo = std::min(lo, s);
        hi = std::max(hi, s);
      }
      int best = -1;
      for (std::size_t k = 0; k < feasible.size(); ++k) {
        int s = raw[k] / 64;
        if (pol == fgd::policy::best_fit) s = fgd::best_fit_normalise(s, lo, hi);
        auto const n = feasible[k];
        if (node < 0 || s > best || (s == best && rank[static_cast<std::size_t>(n)] < rank[static_cast<std::size_t>(node)])) {
          best = s;
          node = n;
          gpu = raw[k] % 64 - 1;
        }
      }
    }
    if (node < 0) {
      out.emplace_back(-1, std::vector<std::int32_t>{});
      continue;
    }
    auto& ns = nodes[static_cast<std::size_t>(node)];
    if (p.fractional() && gpu < 0) gpu = fgd::tightest_gpu(ns, p.milli);
    out.emplace_back(node, fgd::commit(ns, p, gpu));
  }
  return out;
}

/// An openb-like workload: a mixed-model cluster and pods of openb's shapes
/// (shares at a few common sizes, 1/2/4/8 GPUs, CPU-only, some pinned to a
/// model), enough to fill it past 130% with the tune-up.
fgd::workload openb_like(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  placer::cluster c;
  static std::vector<std::string> const models{"V100M32", "T4", "P100", "A10"};
  for (int i = 0; i < 48; ++i) {
    placer::node n;
    n.name = "node-" + std::to_string(i);
    int const g = std::vector<int>{2, 4, 8, 8}[static_cast<std::size_t>(pick(4))];
    n.gpu_model = models[static_cast<std::size_t>(pick(4))];
    n.gpu_free_milli.assign(static_cast<std::size_t>(g), 1000);
    n.cpu_milli_capacity = n.cpu_milli_free = pick(2) == 0 ? 64000 : 96000;
    n.memory_mib_capacity = n.memory_mib_free = 512 * 1024;
    c.nodes.push_back(std::move(n));
  }
  std::vector<placer::job> jobs;
  for (int k = 0; k < 260; ++k) {
    placer::job j;
    j.name = "openb-pod-" + std::to_string(1000 + k);
    int const kind = pick(10);
    if (kind < 5) {
      j.per_replica.gpus = 1;
      j.per_replica.gpu_milli = std::vector<int>{250, 460, 500, 300, 1000}[static_cast<std::size_t>(pick(5))];
    } else if (kind < 8) {
      j.per_replica.gpus = std::vector<int>{1, 2, 4, 8}[static_cast<std::size_t>(pick(4))];
    } else {
      j.per_replica.gpus = 0;
    }
    j.per_replica.cpu_milli = std::vector<int>{4000, 6000, 8000, 12000, 32000}[static_cast<std::size_t>(pick(5))];
    j.per_replica.memory_mib = 1024 * (4 + pick(60));
    if (j.per_replica.gpus > 0 && pick(6) == 0) j.allowed_gpu_models = {models[static_cast<std::size_t>(pick(4))]};
    if (j.per_replica.gpus > 0 && pick(12) == 0) j.allowed_gpu_models = {models[0], models[3]};
    jobs.push_back(std::move(j));
  }
  return fgd::make_workload("openb-like", std::move(c), std::move(jobs));
}

fgd::policy policy_of(std::string const& name) {
  if (name == "random") return fgd::policy::random;
  if (name == "dot-prod") return fgd::policy::dot_prod;
  if (name == "gpu-packing") return fgd::policy::gpu_packing;
  if (name == "gpu-clustering") return fgd::policy::gpu_clustering;
  if (name == "best-fit") return fgd::policy::best_fit;
  return fgd::policy::fgd;
}

void expect_same_columns(std::vector<double> const& a, std::vector<double> const& b, std::string const& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t c = 0; c < a.size(); ++c) {
    if (std::isnan(a[c]) && std::isnan(b[c])) continue;
    EXPECT_EQ(a[c], b[c]) << what << " column " << c;
  }
}

}  // namespace

TEST(BaselineVsExperiment, OneOpenbLikePodPerRoundMakesTheExperimentsChoices) {
  // Same pod order, same tie permutation (the stream continued after the
  // tune-up), same M: every choice equals the experiment's, pod by pod
  // (reference loop) and in the experiment's own allocation curve (fgd::run).
  for (std::uint64_t wseed : {1ULL, 2ULL}) {
    auto const w = openb_like(wseed);
    for (auto const& name : placer::sim::baseline_policy_names()) {
      for (std::uint64_t seed : {42ULL, 43ULL}) {
        std::string const what = name + " workload " + std::to_string(wseed) + " seed " + std::to_string(seed);
        auto const got = replay(w, name, seed);
        auto const want = reference(w, policy_of(name), seed);
        ASSERT_EQ(got.choices.size(), want.size()) << what;
        std::size_t differ = 0;
        for (std::size_t k = 0; k < want.size(); ++k) differ += got.choices[k] != want[k] ? 1 : 0;
        EXPECT_EQ(differ, 0U) << what;
        auto const exp = fgd::run(w, {policy_of(name), seed});
        EXPECT_EQ(got.placed, exp.placed) << what;
        EXPECT_EQ(got.failed, exp.failed) << what;
        expect_same_columns(got.columns, exp.columns, what);
        EXPECT_GT(got.failed, 0) << what;  // the cluster did fill up
      }
    }
  }
}

namespace {

/// The openb `default` pod list on the openb GPU inventory, or nothing when
/// the shared data is not next to the repository.
std::optional<fgd::workload> openb_default() {
  auto const openb = data_dir() / "alibaba-openb-v2023";
  auto const nodes = openb / "openb_node_list_gpu_node.csv";
  auto const pods = openb / "openb_pod_list_default.csv";
  if (!fs::is_regular_file(nodes) || !fs::is_regular_file(pods)) return std::nullopt;
  return fgd::load_workload(nodes.string(), pods.string(), "default");
}

}  // namespace

TEST(BaselineVsExperiment, RealOpenbDefaultTraceMatchesTheExperimentCurve) {
  auto const loaded = openb_default();
  if (!loaded) GTEST_SKIP() << "shared data not found under " << data_dir().string();
  auto const& w = *loaded;
  for (auto const& name : placer::sim::baseline_policy_names()) {
    auto const t0 = std::chrono::steady_clock::now();
    auto const got = replay(w, name, 42);
    double const secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto const exp = fgd::run(w, {policy_of(name), 42});
    EXPECT_EQ(got.placed, exp.placed) << name;
    expect_same_columns(got.columns, exp.columns, name);
    std::cout << "  openb default, " << name << ": " << got.choices.size() << " one-pod rounds in " << secs
              << " s, alloc@130 " << got.columns.back() << " (experiment " << exp.alloc_at_130 << ")\n";
  }
}

TEST(BaselineTiming, OneRoundOnTheOpenbInventoryWith500PendingPods) {
  auto const loaded = openb_default();
  if (!loaded) GTEST_SKIP() << "shared data not found under " << data_dir().string();
  auto const& w = *loaded;
  std::mt19937_64 rng(5);
  auto const order = fgd::order_and_tune(w.pods, 1.5, w.capacity_milli, rng);  // shuffled, 150% of capacity
  auto batch = [&](std::size_t from) {
    std::vector<placer::job> out;
    for (std::size_t k = from; k < from + 500 && k < order.size(); ++k) {
      auto j = w.jobs[static_cast<std::size_t>(order[k].job)];
      j.name += "#" + std::to_string(k);
      out.push_back(std::move(j));
    }
    return out;
  };
  for (auto const& name : placer::sim::baseline_policy_names()) {
    auto solve = baseline_solver(name, 42);
    // Round 1: 500 pods on the idle cluster. Then fill it by rounds of 500
    // to about 90% and time a round of 500 on the busy cluster.
    placer::round_input in;
    in.state = w.cluster;
    in.pending = batch(0);
    auto t0 = std::chrono::steady_clock::now();
    auto r = solve(in);
    double const idle_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.placements.size(), 500U) << name;
    apply_round(in, r);
    std::size_t next = 500;
    while (r.metrics.gar_after < 0.9 && next + 500 < order.size()) {
      in.pending = batch(next);
      next += 500;
      r = solve(in);
      apply_round(in, r);
    }
    in.pending = batch(next);
    t0 = std::chrono::steady_clock::now();
    r = solve(in);
    double const busy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    check_round(in, r);
    std::cout << "  " << name << ": 500 pods, idle 1213-node cluster " << idle_ms << " ms; at GAR "
              << r.metrics.gar_before << ": " << busy_ms << " ms (" << r.placements.size() << " placed)\n";
    EXPECT_LT(idle_ms, 2000.0) << name;  // generous: the machine is shared
  }
}

TEST(BaselineSimulate, EveryPolicyRunsTheSyntheticSimulation) {
  // The simulator's contract end to end: jobs arrive and complete, every
  // round's placements are applied by run_simulation (which throws on an
  // over-commit or a partial gang), and the running M follows the arrivals.
  placer::sim::workload_options wo;
  wo.trace = "synthetic";
  wo.synthetic_jobs = 150;
  wo.seed = 3;
  auto const w = placer::sim::load_workload(wo);
  placer::sim::sim_config cfg;
  cfg.interval = 60;
  for (auto const& name : placer::sim::baseline_policy_names()) {
    auto const res = placer::sim::run_simulation(w, cfg, baseline_solver(name, 9));
    EXPECT_EQ(res.rejected_partial, 0) << name;
    std::int64_t started = 0;
    for (auto const& j : res.jobs) {
      started += j.start >= 0 ? 1 : 0;
      EXPECT_LE(j.completions, 1) << name;
    }
    EXPECT_EQ(started, res.placements) << name;
    EXPECT_GT(started, 100) << name;
    for (double f : res.frag_after) {
      EXPECT_GE(f, 0.0) << name;
      EXPECT_LE(f, 1.0 + 1e-9) << name;
    }
  }
}
