// Node selectors, node affinity, taints and tolerations: each operator and
// effect by hand, the round honouring them on every algorithm and backend,
// and random rounds (with the cross-round policies) never placing a replica
// where a node's labels or taints forbid it.
#include <placer/kernels/ops.hpp>
#include <placer/solver/constraints.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>
#include <placer/traces/synthetic.hpp>

#include <gtest/gtest.h>

#include <random>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"

namespace placer {
namespace {

node labelled(std::vector<std::string> labels, std::vector<taint> taints = {}) {
  node n;
  n.name = "n";
  n.labels = std::move(labels);
  n.taints = std::move(taints);
  return n;
}

selector_term term(std::string key, selector_op op, std::vector<std::string> values = {}) {
  return {{{std::move(key), op, std::move(values)}}};
}

bool matches(node const& n, std::string key, selector_op op, std::vector<std::string> values = {}) {
  return term_matches(n, term(std::move(key), op, std::move(values)));
}

TEST(Constraints, OperatorsAsKubernetes) {
  node const n = labelled({"zone=a", "gen=3", "ssd", "gpu.product=H100-SXM"});
  EXPECT_TRUE(matches(n, "zone", selector_op::in, {"b", "a"}));
  EXPECT_FALSE(matches(n, "zone", selector_op::in, {"b"}));
  EXPECT_FALSE(matches(n, "rack", selector_op::in, {"a"}));      // absent key: In fails
  EXPECT_FALSE(matches(n, "zone", selector_op::not_in, {"a"}));
  EXPECT_TRUE(matches(n, "zone", selector_op::not_in, {"b"}));
  EXPECT_TRUE(matches(n, "rack", selector_op::not_in, {"a"}));   // absent key: NotIn holds
  EXPECT_TRUE(matches(n, "ssd", selector_op::exists));           // a label with an empty value
  EXPECT_FALSE(matches(n, "rack", selector_op::exists));
  EXPECT_TRUE(matches(n, "rack", selector_op::does_not_exist));
  EXPECT_FALSE(matches(n, "ssd", selector_op::does_not_exist));
  EXPECT_TRUE(matches(n, "gen", selector_op::gt, {"2"}));
  EXPECT_FALSE(matches(n, "gen", selector_op::gt, {"3"}));
  EXPECT_TRUE(matches(n, "gen", selector_op::lt, {"4"}));
  EXPECT_FALSE(matches(n, "gen", selector_op::lt, {"3"}));
  EXPECT_FALSE(matches(n, "zone", selector_op::gt, {"0"}));      // not an integer: no match
  EXPECT_FALSE(matches(n, "rack", selector_op::lt, {"9"}));      // absent: no match
  // Expressions of a term are ANDed; an empty term matches nothing.
  selector_term both = term("zone", selector_op::in, {"a"});
  both.match.push_back({"gen", selector_op::gt, {"5"}});
  EXPECT_FALSE(term_matches(n, both));
  EXPECT_FALSE(term_matches(n, selector_term{}));
}

TEST(Constraints, SelectorAffinityAndTaintsDecideAdmission) {
  node const n = labelled({"zone=a", "gen=3"}, {{"team", "infer", taint_effect::no_schedule}});
  node_constraints c;
  taint const* which = nullptr;
  EXPECT_EQ(exclusion(n, c, &which), constraint_miss::taint);  // no toleration
  ASSERT_NE(which, nullptr);
  EXPECT_EQ(which->key, "team");
  c.tolerations.push_back({"team", toleration_op::equal, "infer", -1});
  EXPECT_EQ(exclusion(n, c), constraint_miss::none);
  c.node_selector = {"zone=b"};
  EXPECT_EQ(exclusion(n, c), constraint_miss::selector);
  c.node_selector = {"zone=a"};
  // Required terms are ORed.
  c.required = {term("gen", selector_op::gt, {"4"})};
  EXPECT_EQ(exclusion(n, c), constraint_miss::affinity);
  c.required.push_back(term("zone", selector_op::in, {"a"}));
  EXPECT_EQ(exclusion(n, c), constraint_miss::none);
  EXPECT_TRUE(admits(n, c));
}

TEST(Constraints, TolerationsMatchKeyValueAndEffect) {
  taint const t{"team", "infer", taint_effect::no_execute};
  auto tol = [](toleration o) {
    node_constraints c;
    c.tolerations.push_back(std::move(o));
    return c;
  };
  EXPECT_TRUE(tolerates(tol({"team", toleration_op::equal, "infer", -1}), t));
  EXPECT_FALSE(tolerates(tol({"team", toleration_op::equal, "train", -1}), t));
  EXPECT_TRUE(tolerates(tol({"team", toleration_op::exists, "", -1}), t));
  EXPECT_TRUE(tolerates(tol({"", toleration_op::exists, "", -1}), t));  // empty key + Exists: everything
  EXPECT_FALSE(tolerates(tol({"zone", toleration_op::exists, "", -1}), t));
  EXPECT_TRUE(tolerates(tol({"team", toleration_op::equal, "infer", static_cast<std::int8_t>(taint_effect::no_execute)}), t));
  EXPECT_FALSE(tolerates(tol({"team", toleration_op::equal, "infer", static_cast<std::int8_t>(taint_effect::no_schedule)}), t));
  // PreferNoSchedule never excludes; it lowers the preference.
  node const soft = labelled({"zone=a"}, {{"spot", "", taint_effect::prefer_no_schedule}});
  EXPECT_TRUE(admits(soft, node_constraints{}));
  EXPECT_EQ(preference(soft, node_constraints{}), -1000);
  EXPECT_EQ(preference(soft, tol({"spot", toleration_op::exists, "", -1})), 0);
}

TEST(Constraints, PreferenceIsTheMatchingWeightShare) {
  node const n = labelled({"zone=a", "gen=3"});
  node_constraints c;
  c.preferred = {{30, term("zone", selector_op::in, {"a"})}, {70, term("gen", selector_op::gt, {"3"})}};
  EXPECT_EQ(preference(n, c), 300);
  c.preferred[1].term = term("gen", selector_op::gt, {"2"});
  EXPECT_EQ(preference(n, c), 1000);
}

TEST(Constraints, ProblemsAreNamed) {
  node_constraints c;
  EXPECT_EQ(constraints_problem(c), "");
  c.required = {term("zone", selector_op::in)};
  EXPECT_NE(constraints_problem(c).find("need at least one value"), std::string::npos);
  c.required = {term("gen", selector_op::gt, {"x"})};
  EXPECT_NE(constraints_problem(c).find("one integer"), std::string::npos);
  c.required = {term("ssd", selector_op::exists, {"1"})};
  EXPECT_NE(constraints_problem(c).find("take no values"), std::string::npos);
  c.required.clear();
  c.preferred = {{0, term("zone", selector_op::in, {"a"})}};
  EXPECT_NE(constraints_problem(c).find("outside 1..100"), std::string::npos);
  c.preferred.clear();
  c.tolerations = {{"", toleration_op::equal, "x", -1}};
  EXPECT_NE(constraints_problem(c).find("must use Exists"), std::string::npos);
  c.tolerations = {{"k", toleration_op::exists, "x", -1}};
  EXPECT_NE(constraints_problem(c).find("takes no value"), std::string::npos);
  c.tolerations.clear();
  c.node_selector = {"=a"};
  EXPECT_NE(constraints_problem(c).find("no key"), std::string::npos);

  // A round with such a job is refused, naming the job.
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1).gpus(8).build();
  job j;
  j.name = "bad";
  j.per_replica.gpus = 1;
  j.constraints.required = {term("gen", selector_op::lt, {})};
  in.pending.push_back(j);
  try {
    validate(in);
    FAIL() << "a Lt without a value was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
  }
}

/// Four nodes of 8 GPUs: 0 and 1 in zone a, 2 and 3 in zone b; node 3
/// tainted team=infer:NoSchedule.
round_input zones_round() {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  for (int i = 0; i < 4; ++i) in.state.nodes[i].labels = {std::string("zone=") + (i < 2 ? "a" : "b"), "gen=" + std::to_string(i)};
  in.state.nodes[3].taints = {{"team", "infer", taint_effect::no_schedule}};
  return in;
}

job one_gpu(std::string name, int replicas = 1) {
  job j;
  j.name = std::move(name);
  j.per_replica.gpus = 1;
  j.per_replica.cpu_milli = 1000;
  j.per_replica.memory_mib = 1024;
  j.replicas = replicas;
  return j;
}

std::vector<std::unique_ptr<solver>> every_backend() {
  std::vector<std::unique_ptr<solver>> v;
  v.push_back(std::make_unique<solver>(kernels::make_backend(kernels::backend_kind::cpu)));
  v.push_back(std::make_unique<solver>(kernels::make_parallel_cpu_backend()));
  if (kernels::cuda_unavailable_reason().empty()) v.push_back(std::make_unique<solver>(kernels::make_backend(kernels::backend_kind::cuda)));
  return v;
}

TEST(Constraints, RoundsPlaceOnlyWhereKubernetesWould) {
  for (auto& s : every_backend()) {
    for (auto algo : {algorithm::placer, algorithm::greedy, algorithm::kube_least_allocated,
                      algorithm::kube_most_allocated, algorithm::first_fit}) {
      SCOPED_TRACE(std::string(algorithm_name(algo)) + " on " + s->backend().description());
      round_input in = zones_round();
      in.pol.algo = algo;
      job sel = one_gpu("zone-b", 6);  // only node 2: node 3 is tainted
      sel.constraints.node_selector = {"zone=b"};
      in.pending.push_back(sel);
      job tol = one_gpu("tolerant", 4);  // zone b with the toleration: node 3 is open to it
      tol.constraints.required = {term("gen", selector_op::gt, {"1"})};
      tol.constraints.tolerations = {{"team", toleration_op::exists, "", -1}};
      in.pending.push_back(tol);
      job never = one_gpu("never");  // zone c does not exist
      never.constraints.node_selector = {"zone=c"};
      in.pending.push_back(never);
      auto const r = s->solve(in);
      expect_round_invariants(in, r);
      for (auto const& p : r.placements) {
        for (auto const& rp : p.replicas) {
          if (p.job == 0) {
            EXPECT_EQ(rp.node, 2);
          } else if (p.job == 1) {
            EXPECT_GE(rp.node, 2);
          }
        }
      }
      ASSERT_EQ(r.placements.size(), 2U);
      ASSERT_EQ(r.unplaced_jobs.size(), 1U);
      EXPECT_EQ(r.unplaced_jobs[0].job, 2);
      EXPECT_EQ(r.unplaced_jobs[0].reason, unplaced_reason::no_feasible_node);
    }
  }
}

TEST(Constraints, PreferencesSteerTheScore) {
  for (auto algo : {algorithm::placer, algorithm::kube_least_allocated}) {
    SCOPED_TRACE(algorithm_name(algo));
    solver s(kernels::make_backend(kernels::backend_kind::cpu));
    round_input in = zones_round();
    in.state.nodes[3].taints.clear();
    in.state.nodes[0].taints = {{"spot", "", taint_effect::prefer_no_schedule}};
    in.pol.algo = algo;
    job j = one_gpu("likes-gen-3");
    j.constraints.preferred = {{50, term("gen", selector_op::gt, {"2"})}};
    in.pending.push_back(j);
    auto r = s.solve(in);
    ASSERT_EQ(r.placements.size(), 1U);
    EXPECT_EQ(r.placements[0].replicas[0].node, 3);
    // Without a preference it avoids only the PreferNoSchedule node; with
    // node 1 emptied of everything else, the best fit would otherwise be 0.
    in.pending[0].constraints = {};
    for (int i = 1; i < 4; ++i) in.state.nodes[i].gpu_free_milli.assign(8, 1000);
    in.state.nodes[0].gpu_free_milli = {0, 0, 0, 0, 1000, 1000, 1000, 1000};  // best fit, but tainted soft
    r = s.solve(in);
    ASSERT_EQ(r.placements.size(), 1U);
    EXPECT_NE(r.placements[0].replicas[0].node, 0);
    // Tolerated, the soft taint no longer pushes it away.
    in.pending[0].constraints.tolerations = {{"spot", toleration_op::exists, "", -1}};
    r = s.solve(in);
    ASSERT_EQ(r.placements.size(), 1U);
    if (algo == algorithm::placer) {
      EXPECT_EQ(r.placements[0].replicas[0].node, 0);
    }
  }
}

// Thousands of random rounds with labels, taints and constraints, every
// algorithm: the invariant checker re-evaluates each replica's node.
TEST(Constraints, RandomRoundsNeverPlaceWhereForbidden) {
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  std::mt19937_64 rng(20261125);
  int placed = 0, unplaced = 0, constrained = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    round_input in = testing_support::random_round(rng);
    testing_support::add_random_constraints(rng, in);
    in.pol.algo = static_cast<algorithm>(iter % 5);
    auto const r = s.solve(in);
    expect_round_invariants(in, r);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failure at iteration " << iter;
      return;
    }
    for (auto const& p : r.placements) constrained += in.pending[p.job].constraints.empty() ? 0 : 1;
    placed += static_cast<int>(r.placements.size());
    unplaced += static_cast<int>(r.unplaced_jobs.size());
  }
  EXPECT_GT(constrained, 2000);
  EXPECT_GT(unplaced, 1000);
  EXPECT_GT(placed, 4000);
}

// The constraint tables agree with the host evaluator on every cell.
TEST(Constraints, TablesAgreeWithTheHostEvaluator) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    round_input in = testing_support::random_round(rng);
    testing_support::add_random_constraints(rng, in);
    round_matrices const m = build_matrices(in);
    auto const nv = m.nodes();
    auto const cv = m.classes();
    for (std::size_t j = 0; j < in.pending.size(); ++j) {
      auto const c = m.job_class[j];
      for (std::int32_t n = 0; n < m.n_nodes(); ++n) {
        auto const& nd = in.state.nodes[static_cast<std::size_t>(n)];
        bool const want = nd.healthy && admits(nd, in.pending[j].constraints);
        bool const have = nv.flags[n] & kernels::node_flag_healthy &&
                          (cv.admit == nullptr || cv.admit[kernels::constraint_cell(nv, cv, c, n)] != 0);
        ASSERT_EQ(have, want) << "iteration " << iter << " job " << j << " node " << n;
        if (cv.prefer != nullptr) {
          ASSERT_EQ(cv.prefer[kernels::constraint_cell(nv, cv, c, n)], preference(nd, in.pending[j].constraints));
        }
      }
    }
  }
}

// A label's key ends at its first '=' (or the label's end), however the
// keys asked about overlap: a key that is another's prefix, a key holding
// '=' (no label has one), a value holding '='. Node groups follow the same
// rule: labels on keys no job asks about split no group.
TEST(Constraints, LabelKeysEndAtTheFirstEquals) {
  node const n = labelled({"rack-row=7", "rack=r3", "a=b=c", "gpu", "zone=z1", "x=1"});
  std::string_view v;
  ASSERT_TRUE(label_value(n, "rack", v));
  EXPECT_EQ(v, "r3");
  ASSERT_TRUE(label_value(n, "rack-row", v));
  EXPECT_EQ(v, "7");
  EXPECT_FALSE(label_value(n, "rack-", v));
  ASSERT_TRUE(label_value(n, "a", v));
  EXPECT_EQ(v, "b=c");
  EXPECT_FALSE(label_value(n, "a=b", v));
  ASSERT_TRUE(label_value(n, "gpu", v));
  EXPECT_EQ(v, "");
  EXPECT_FALSE(label_value(n, "gp", v));
  EXPECT_FALSE(label_value(n, "gpu2", v));
  EXPECT_TRUE(matches(n, "a", selector_op::in, {"b=c"}));
  EXPECT_FALSE(matches(n, "a=b", selector_op::exists));

  // Groups: three nodes apart on the asked keys (rack, a=b never matching,
  // gpu), the same on the rest; four nodes, three groups.
  round_input in;
  for (auto const& labels : std::vector<std::vector<std::string>>{
           {"rack=r1", "gpu", "noise=1", "a=b=c"}, {"rack=r1", "gpu", "noise=2", "a=b=d"}, {"rack=r2", "gpu"}, {"rack=r1"}}) {
    node x = labelled(labels);
    x.name = "n" + std::to_string(in.state.nodes.size());
    in.state.nodes.push_back(x);
  }
  job j;
  j.name = "j";
  j.constraints.required = {{{{"rack", selector_op::in, {"r1"}}, {"gpu", selector_op::exists, {}}}}};
  j.constraints.preferred = {{10, {{{"a=b", selector_op::exists, {}}}}}};
  in.pending.push_back(j);
  kernels::round_arrays out;
  constraint_tables t;
  t.build(in, out);
  ASSERT_TRUE(t.active);
  EXPECT_EQ(out.n_constraint_groups, 3);
  EXPECT_EQ(out.node_group, (std::vector<std::int32_t>{0, 0, 1, 2}));
}

// A session's label memo (node_label_memo: each node's group key, kept
// across delta rounds) gives the groups and tables that reading every label
// gives, over random deltas (labels and taints changed, nodes removed and
// added) and jobs whose asked keys change, and spares the unchanged nodes.
TEST(Constraints, ASessionsLabelMemoGivesTheGroupsReadingEveryLabelGives) {
  std::mt19937_64 rng(20261127);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  round_input in = testing_support::random_round(rng, 24, 40);
  testing_support::add_random_constraints(rng, in);
  round_input const labels_source = in;  // nodes whose labels and taints the deltas take
  node_label_memo memo;
  delta_undo undo;
  std::int64_t reused = 0, nodes_seen = 0;
  int serial = 0;
  for (int step = 0; step < 300; ++step) {
    if (step > 0) {
      auto const n = static_cast<std::int32_t>(in.state.nodes.size());
      cluster_delta d{in.state.epoch, in.state.epoch + 1, {}, {}, {}};
      std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
      for (std::int32_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
      std::shuffle(idx.begin(), idx.end(), rng);
      int const n_changed = std::min<int>(n, pick(0, 3));
      int const n_removed = n > 16 ? pick(0, 2) : 0;
      for (int k = 0; k < n_changed; ++k) {
        node x = in.state.nodes[static_cast<std::size_t>(idx[static_cast<std::size_t>(k)])];
        auto const& src = labels_source.state.nodes[static_cast<std::size_t>(pick(0, 23))];
        x.labels = src.labels;
        x.taints = src.taints;
        d.changed.push_back({idx[static_cast<std::size_t>(k)], x});
      }
      for (int k = 0; k < n_removed; ++k) d.removed.push_back(idx[static_cast<std::size_t>(n_changed + k)]);
      for (int k = pick(0, n < 32 ? 2 : 0); k > 0; --k) {
        node x = labels_source.state.nodes[static_cast<std::size_t>(pick(0, 23))];
        x.name = "added-" + std::to_string(serial++);
        d.added.push_back(x);
      }
      apply_delta(in.state, d, undo);
      memo.follow(undo, in.state.nodes.size());
    }
    if (step % 25 == 7) {  // the jobs' constraints, and so the keys asked about, change
      round_input fresh = in;
      testing_support::add_random_constraints(rng, fresh);
      for (std::size_t j = 0; j < in.pending.size(); ++j) in.pending[j].constraints = fresh.pending[j].constraints;
    }
    for (auto const& k : memo.node_key) reused += k.empty() ? 0 : 1;
    nodes_seen += static_cast<std::int64_t>(in.state.nodes.size());
    round_input with = in;
    with.label_memo = &memo;
    kernels::round_arrays a, b;
    constraint_tables ta, tb;
    ta.build(with, a);
    tb.build(in, b);
    ASSERT_EQ(ta.active, tb.active) << "step " << step;
    ASSERT_EQ(a.node_group, b.node_group) << "step " << step;
    ASSERT_EQ(a.n_constraint_groups, b.n_constraint_groups) << "step " << step;
    ASSERT_EQ(a.constraint_admit, b.constraint_admit) << "step " << step;
    ASSERT_EQ(a.constraint_prefer, b.constraint_prefer) << "step " << step;
    ASSERT_EQ(ta.job_set, tb.job_set) << "step " << step;
  }
  // Most nodes, most rounds, came from the memo.
  EXPECT_GT(reused, nodes_seen * 3 / 4) << reused << " of " << nodes_seen;
}

// A round without constraints builds no tables and gives the same classes.
TEST(Constraints, ARoundWithoutThemPaysNothing) {
  std::mt19937_64 rng(5);
  round_input const in = testing_support::random_round(rng, 6, 30);
  round_matrices const m = build_matrices(in);
  EXPECT_FALSE(m.constraints.active);
  EXPECT_EQ(m.classes().admit, nullptr);
  EXPECT_EQ(m.nodes().group, nullptr);
  EXPECT_TRUE(m.class_constraint.empty());
}

// Constraints that admit and prefer alike on this round's nodes are one
// set: Kubernetes' default tolerations (of taints no node has) and a
// selector every node matches split no class, and alone build no tables.
TEST(Constraints, EquivalentSetsShareARow) {
  std::mt19937_64 rng(5);
  round_input in = testing_support::random_round(rng, 6, 30);
  round_matrices const plain = build_matrices(in);
  for (auto& n : in.state.nodes) n.labels = {"kubernetes.io/os=linux"};
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    auto& c = in.pending[j].constraints;
    c.tolerations = {{"node.kubernetes.io/not-ready", toleration_op::exists, "", 2},
                     {"node.kubernetes.io/unreachable", toleration_op::exists, "", 2}};
    if (j % 2 == 0) c.node_selector = {"kubernetes.io/os=linux"};
  }
  round_matrices const m = build_matrices(in);
  EXPECT_FALSE(m.constraints.active);
  EXPECT_EQ(m.n_classes(), plain.n_classes());
  EXPECT_EQ(m.job_class, plain.job_class);
  // With a taint somewhere, the tables are back, but still one set for all
  // of these jobs (none of them tolerates it) and no more classes.
  in.state.nodes[0].taints = {{"team", "x", taint_effect::no_schedule}};
  round_matrices const t = build_matrices(in);
  EXPECT_TRUE(t.constraints.active);
  EXPECT_EQ(t.constraints.n_sets, 1);
  EXPECT_EQ(t.n_classes(), plain.n_classes());
}

// A hostile round cannot buy unbounded evaluation: distinct constraint sets
// times node groups is capped.
TEST(Constraints, EvaluationWorkIsBounded) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(3000).gpus(1).build();
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) in.state.nodes[i].labels = {"host=" + std::to_string(i)};
  for (int k = 0; k < 3000; ++k) {
    job j = one_gpu("j" + std::to_string(k));
    j.constraints.node_selector = {"host=" + std::to_string(k)};
    in.pending.push_back(j);
  }
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  try {
    (void)s.solve(in);
    FAIL() << "9M evaluations were accepted";
  } catch (logic_error const& e) {
    EXPECT_EQ(e.code(), error_code::resource_exhausted);
    EXPECT_NE(std::string(e.what()).find("node groups"), std::string::npos) << e.what();
  }
}

// A label value no set names answers every In, NotIn, selector and
// Exists alike, so nodes that differ only in such values share a group: a
// job pinned to one host makes two groups, not one a node. A key that Gt
// or Lt reads keeps every value (the numbers compare).
TEST(Constraints, ValuesNoSetNamesShareAGroup) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(1).nodes_per_leaf(1000).gpus(1).build();
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    in.state.nodes[i].labels = {"kubernetes.io/hostname=h" + std::to_string(i), "rack=r" + std::to_string(i % 50),
                                "mem=" + std::to_string(i % 7)};
  }
  job pinned = one_gpu("pinned");
  pinned.constraints.node_selector = {"kubernetes.io/hostname=h17"};
  job off = one_gpu("off-two-racks");
  off.constraints.required = {{{{"rack", selector_op::not_in, {"r0", "r1"}}}}};
  in.pending = {pinned, off};
  round_matrices m = build_matrices(in);
  ASSERT_TRUE(m.constraints.active);
  // h17 (in rack r17), racks r0 and r1, and everything else.
  EXPECT_EQ(m.n_constraint_groups, 4);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 2U);
  EXPECT_EQ(r.placements[0].replicas[0].node, 17);
  auto const other = r.placements[1].replicas[0].node;
  EXPECT_NE(other % 50, 0);
  EXPECT_NE(other % 50, 1);
  // A Gt on "mem" reads its numbers: the 7 values split the groups.
  job roomy = one_gpu("roomy");
  roomy.constraints.required = {{{{"mem", selector_op::gt, {"4"}}}}};
  in.pending.push_back(roomy);
  m = build_matrices(in);
  EXPECT_EQ(m.n_constraint_groups, 1 + 3 * 7);  // h17 has one mem value; r0, r1 and the rest all seven
  r = s.solve(in);
  ASSERT_EQ(r.placements.size(), 3U);
  EXPECT_GT(r.placements[2].replicas[0].node % 7, 4);
}

// ------------------------------------------------------------ explanations

TEST(Explanations, CountNodesByTheFirstCheckTheyFail) {
  round_input in = zones_round();
  in.state.nodes[0].healthy = false;
  in.state.nodes[1].gpu_free_milli.assign(8, 0);  // full
  job big = one_gpu("zone-b-gang", 3);
  big.per_replica.gpus = 8;
  big.gang = true;
  big.constraints.node_selector = {"zone=b"};
  in.pending.push_back(big);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  auto const& e = r.unplaced_jobs[0].why;
  EXPECT_EQ(e.nodes, 4);
  // node 0 unhealthy, node 1 in zone a (the selector comes before
  // capacity), node 3 tainted; node 2 fits one replica and stays free.
  std::vector<exclusion_count> const want{{node_exclusion::unhealthy, 1, ""},
                                          {node_exclusion::affinity, 1, ""},
                                          {node_exclusion::taint, 1, "team=infer:NoSchedule"}};
  EXPECT_EQ(e.excluded, want);
  EXPECT_EQ(e.replicas_fit, 1);
  EXPECT_EQ(e.replicas_required, 3);
  EXPECT_FALSE(e.outbid);
  EXPECT_NE(r.unplaced_jobs[0].detail.find("1/4 nodes are available: 1 node(s) were unhealthy, 1 node(s) didn't match "
                                           "Pod's node affinity/selector, 1 node(s) had untolerated taint "
                                           "{team=infer:NoSchedule}. Resources were found for 1 replica(s) while 3 "
                                           "are required."),
            std::string::npos)
      << r.unplaced_jobs[0].detail;
}

TEST(Explanations, SayWhoTookTheRoom) {
  round_input in = zones_round();
  for (auto& n : in.state.nodes) n.taints.clear();
  job vip = one_gpu("vip", 4);
  vip.per_replica.gpus = 8;
  vip.priority = 9;
  in.pending.push_back(vip);
  job late = one_gpu("late");
  late.per_replica.gpus = 8;
  in.pending.push_back(late);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  EXPECT_EQ(r.unplaced_jobs[0].job, 1);
  auto const& e = r.unplaced_jobs[0].why;
  ASSERT_EQ(e.excluded.size(), 1U);
  EXPECT_EQ(e.excluded[0].reason, node_exclusion::taken);
  EXPECT_EQ(e.excluded[0].nodes, 4);
  EXPECT_TRUE(e.outbid);
  EXPECT_EQ(e.outbid_priority, 9);
}

TEST(Explanations, RequiredTopologyNamesTheBestDomain) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(2).nodes_per_leaf(2).gpus(8).build();
  in.state.nodes[0].gpu_free_milli.assign(8, 0);
  job gang = one_gpu("one-leaf", 3);
  gang.per_replica.gpus = 8;
  gang.gang = true;
  gang.topology_level = 2;  // leaf
  gang.topo_mode = topology_mode::required;
  in.pending.push_back(gang);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  ASSERT_EQ(r.unplaced_jobs.size(), 1U);
  auto const& e = r.unplaced_jobs[0].why;
  EXPECT_EQ(e.replicas_fit, 3);  // three free nodes in all, but no leaf holds three
  EXPECT_EQ(e.best_domain_fit, 2);
  EXPECT_FALSE(e.best_domain.empty());
  EXPECT_NE(r.unplaced_jobs[0].detail.find("holds 2"), std::string::npos) << r.unplaced_jobs[0].detail;
}

// A gang the cluster could not hold even empty says it can never run (as
// Slurm's PartitionNodeLimit does), with the most it could get; one that
// waits only for room does not.
TEST(Explanations, AGangTheClusterCouldNeverHoldSaysSo) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(2).nodes_per_leaf(4).gpus(8).build();  // 8 nodes
  in.state.nodes[0].gpu_free_milli.assign(8, 0);  // busy, not gone
  job wide = one_gpu("nine-nodes", 9);             // -N9 on eight nodes
  wide.gang = true;
  wide.distinct_nodes = true;
  job eight = one_gpu("eight-nodes", 8);  // fits the cluster, not this round
  eight.gang = true;
  eight.distinct_nodes = true;
  job big = one_gpu("65-gpus", 9);  // nine whole nodes' worth of GPUs
  big.per_replica.gpus = 8;
  big.gang = true;
  job leaf = one_gpu("five-on-a-leaf", 5);  // a leaf has four nodes
  leaf.per_replica.gpus = 8;
  leaf.gang = true;
  leaf.topology_level = 2;
  leaf.topo_mode = topology_mode::required;
  job spread = one_gpu("not-a-gang", 9);  // takes what fits: never "never"
  spread.distinct_nodes = true;
  job sixteen = one_gpu("16-gpus-a-replica", 1);  // more GPUs a node than any node has
  sixteen.per_replica.gpus = 16;
  job model = one_gpu("no-node-of-its-model", 1);  // no node admits it, as the cluster is
  model.allowed_gpu_models = {"B200"};
  for (auto const& j : {wide, eight, big, leaf, sixteen, model}) {
    round_input one = in;
    one.pending = {j};
    solver s(kernels::make_backend(kernels::backend_kind::cpu));
    auto const r = s.solve(one);
    ASSERT_EQ(r.unplaced_jobs.size(), 1U) << j.name;
    auto const& u = r.unplaced_jobs[0];
    bool const never = j.name != "eight-nodes";
    EXPECT_EQ(u.why.never, never) << j.name << ": " << u.detail;
    EXPECT_EQ(u.detail.find("It can never run on this cluster") != std::string::npos, never) << u.detail;
  }
  round_input one = in;
  one.pending = {wide};
  auto const r = solver(kernels::make_backend(kernels::backend_kind::cpu)).solve(one);
  EXPECT_EQ(r.unplaced_jobs[0].why.replicas_fit_empty, 8);
  EXPECT_NE(r.unplaced_jobs[0].detail.find("needs 9 replicas at once, and the nodes that admit it could hold at most 8"),
            std::string::npos)
      << r.unplaced_jobs[0].detail;
  one.pending = {leaf};
  auto const l = solver(kernels::make_backend(kernels::backend_kind::cpu)).solve(one);
  EXPECT_EQ(l.unplaced_jobs[0].why.best_domain_fit_empty, 4);
  one.pending = {spread};
  auto const p = solver(kernels::make_backend(kernels::backend_kind::cpu)).solve(one);
  for (auto const& u : p.unplaced_jobs) EXPECT_FALSE(u.why.never) << u.detail;
  one.pending = {sixteen};
  auto const g = solver(kernels::make_backend(kernels::backend_kind::cpu)).solve(one);
  EXPECT_NE(g.unplaced_jobs[0].detail.find("no node could hold one replica even empty"), std::string::npos)
      << g.unplaced_jobs[0].detail;
}

// On random rounds with constraints and the policies: the counts never
// exceed the nodes, unhealthy nodes are counted exactly, a job no node can
// ever take has every node excluded, and a placed round explains nothing.
TEST(Explanations, CountsAreConsistentOnRandomRounds) {
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  std::mt19937_64 rng(99);
  int explained = 0;
  for (int iter = 0; iter < 500; ++iter) {
    round_input in = testing_support::random_round(rng);
    testing_support::add_random_constraints(rng, in);
    in.pol.algo = static_cast<algorithm>(iter % 5);
    auto const r = s.solve(in);
    // The solver evaluates a shape's constraints once per constraint group
    // and its checks once a set of score twins; explained again node by
    // node, every explanation is the same, field for field.
    round_result again = r;
    for (auto& u : again.unplaced_jobs) u.why = {};
    explain_unplaced(in, again);
    ASSERT_EQ(again.unplaced_jobs.size(), r.unplaced_jobs.size());
    for (std::size_t k = 0; k < r.unplaced_jobs.size(); ++k) {
      EXPECT_TRUE(again.unplaced_jobs[k].why == r.unplaced_jobs[k].why)
          << "iteration " << iter << ": " << describe(again.unplaced_jobs[k].why) << " against "
          << describe(r.unplaced_jobs[k].why);
    }
    std::int32_t unhealthy = 0;
    for (auto const& n : in.state.nodes) unhealthy += n.healthy ? 0 : 1;
    for (auto const& u : r.unplaced_jobs) {
      if (u.why.nodes == 0) continue;
      ++explained;
      auto const& e = u.why;
      ASSERT_EQ(e.nodes, static_cast<std::int32_t>(in.state.nodes.size()));
      std::int32_t sum = 0, sick = 0, taken = 0;
      for (auto const& x : e.excluded) {
        EXPECT_GT(x.nodes, 0);
        sum += x.nodes;
        sick += x.reason == node_exclusion::unhealthy ? x.nodes : 0;
        taken += x.reason == node_exclusion::taken ? x.nodes : 0;
      }
      EXPECT_LE(sum, e.nodes);
      EXPECT_EQ(sick, unhealthy);
      EXPECT_EQ(e.outbid, taken > 0);
      if (u.reason == unplaced_reason::no_feasible_node) {
        EXPECT_EQ(sum, e.nodes) << "iteration " << iter << ": " << u.detail;
        EXPECT_EQ(taken, 0);
      }
    }
  }
  EXPECT_GT(explained, 1000);
}

// The "-split" scenarios are the control for what constraints cost beyond
// the classes they make (docs/results.md): the -k8s round's jobs, classes
// split as many ways by memory requests alone, with nothing to evaluate.
TEST(Constraints, SplitScenarioHasTheConstrainedRoundsClassesAndNoConstraints) {
  for (char const* size : {"10k", "100k"}) {
    SCOPED_TRACE(size);
    auto const plain = traces::make_scenario(traces::scenario_preset(size));
    auto const k8s = traces::make_scenario(traces::scenario_preset(std::string(size) + "-k8s"));
    auto const split = traces::make_scenario(traces::scenario_preset(std::string(size) + "-split"));
    ASSERT_EQ(split.pending.size(), k8s.pending.size());
    for (auto const& n : split.state.nodes) {
      EXPECT_TRUE(n.labels.empty());
      EXPECT_TRUE(n.taints.empty());
    }
    std::size_t apart = 0;  // jobs the constraints set apart: their own memory request instead
    for (std::size_t j = 0; j < split.pending.size(); ++j) {
      EXPECT_TRUE(split.pending[j].constraints.empty());
      EXPECT_EQ(split.pending[j].per_replica.gpus, k8s.pending[j].per_replica.gpus);
      bool const constrained = !k8s.pending[j].constraints.empty();
      EXPECT_EQ(split.pending[j].per_replica.memory_mib != plain.pending[j].per_replica.memory_mib, constrained) << j;
      apart += constrained ? 1 : 0;
    }
    EXPECT_GT(apart, split.pending.size() / 4);
    auto const classes_plain = build_matrices(plain).n_classes();
    auto const classes_k8s = build_matrices(k8s).n_classes();
    auto const classes_split = build_matrices(split).n_classes();
    EXPECT_GT(classes_k8s, 2 * classes_plain);
    EXPECT_EQ(classes_split, classes_k8s);
  }
}

// The constrained benchmark round (10k-k8s: zones, racks in maintenance,
// tainted inference nodes; 14 constraint groups): the solver evaluates a
// shape's constraints once a group; node by node, every explanation is the
// same, field for field.
TEST(Explanations, GroupSumsMatchNodeByNodeOnTheConstrainedScenario) {
  round_input const in = traces::make_scenario(traces::scenario_preset("10k-k8s"));
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  round_result again = r;
  for (auto& u : again.unplaced_jobs) u.why = {};
  explain_unplaced(in, again);
  std::size_t constrained = 0, tainted = 0;
  for (std::size_t k = 0; k < r.unplaced_jobs.size(); ++k) {
    auto const& a = again.unplaced_jobs[k].why;
    auto const& b = r.unplaced_jobs[k].why;
    EXPECT_EQ(describe(a), describe(b)) << k;
    EXPECT_EQ(a.replicas_fit, b.replicas_fit) << k;
    EXPECT_EQ(a.outbid_priority, b.outbid_priority) << k;
    ASSERT_EQ(a.excluded.size(), b.excluded.size()) << k;
    for (std::size_t i = 0; i < a.excluded.size(); ++i) {
      EXPECT_EQ(a.excluded[i].nodes, b.excluded[i].nodes) << k;
      tainted += b.excluded[i].reason == node_exclusion::taint ? 1 : 0;
    }
    constrained += in.pending[static_cast<std::size_t>(r.unplaced_jobs[k].job)].constraints.empty() ? 0 : 1;
  }
  EXPECT_GT(constrained, 20U);  // the case is the constrained shapes'
  EXPECT_GT(tainted, 0U);
}

// The solver explains a set of score twins (round_arrays::score_as) by its
// first node: its answers are the rest's, but for what a twin's memory
// capacity (no field of the state) says of the room it would have empty.
// On twins in every way the state allows them to differ (GPUs taken in
// another order, memory capacity; constraint groups apart),
// every explanation is the same as node by node, field for field.
TEST(Explanations, ScoreTwinsAnswerAsEachNodeWould) {
  round_input in;
  in.state = make_cluster().leaves_per_spine(4).nodes_per_leaf(8).gpus(8).build();  // 32 nodes
  for (std::size_t i = 0; i < in.state.nodes.size(); ++i) {
    auto& n = in.state.nodes[i];
    n.memory_mib_capacity = i % 2 == 0 ? 1'048'576 : 262'144;  // even nodes hold three 300 GiB replicas empty
    n.memory_mib_free = 204'800;                               // every node 200 GiB free now
    n.gpu_free_milli.assign(8, 1000);
    n.gpu_free_milli[i % 8] = 500;  // one GPU half taken, a different one a node: twins still
    if (i % 8 == 7) n.labels = {"zone=b"};
    if (i % 16 == 15) n.taints = {{"team", "infer", taint_effect::no_schedule}};
  }
  job mem = one_gpu("300-GiB-a-replica", 80);  // the even nodes' memory, were they empty: 48 replicas
  mem.per_replica.memory_mib = 307'200;
  mem.gang = true;
  job vip = one_gpu("vip", 8);  // placed: who took the room
  vip.priority = 3;
  job half = one_gpu("half-a-GPU", 600);  // more halves than the nodes have
  half.per_replica.gpu_milli = 500;
  half.gang = true;
  job zone = one_gpu("zone-b-leaf", 6);
  zone.per_replica.gpus = 8;
  zone.gang = true;
  zone.constraints.node_selector = {"zone=b"};
  zone.topology_level = 2;
  zone.topo_mode = topology_mode::required;
  in.pending = {vip, mem, half, zone};
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(in);
  ASSERT_EQ(r.unplaced_jobs.size(), 3U);
  auto const m = build_matrices(in);
  std::size_t twins = 0;
  for (std::int32_t n = 0; n < m.n_nodes(); ++n) twins += m.score_as[static_cast<std::size_t>(n)] != n ? 1 : 0;
  EXPECT_GT(twins, 20U);  // the case is the twins'
  round_result again = r;
  for (auto& u : again.unplaced_jobs) u.why = {};
  explain_unplaced(in, again);
  for (std::size_t k = 0; k < r.unplaced_jobs.size(); ++k) {
    EXPECT_TRUE(again.unplaced_jobs[k].why == r.unplaced_jobs[k].why)
        << in.pending[static_cast<std::size_t>(r.unplaced_jobs[k].job)].name << ": " << again.unplaced_jobs[k].detail
        << " against " << r.unplaced_jobs[k].detail;
  }
  EXPECT_EQ(r.unplaced_jobs[0].job, 1);
  EXPECT_EQ(r.unplaced_jobs[0].why.replicas_fit_empty, 48);
  EXPECT_TRUE(r.unplaced_jobs[0].why.never);
  EXPECT_TRUE(r.unplaced_jobs[1].why.outbid);
}

// A round's explanations are bounded (2^24 cells: a shape's nodes, and its
// domains for a required topology), whatever the peer sends: 300 unplaced
// jobs of as many shapes on 65,536 nodes would be 19.7 M cells. The first
// 256 shapes in job order are explained (exactly as on their own), the
// rest say they are not, and the jobs of an explained shape past the bound
// still are.
TEST(Explanations, AreBoundedInCellsAndSaySoPastTheBound) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(16).nodes_per_leaf(4096).gpus(1).build();
  ASSERT_EQ(in.state.nodes.size(), 65536U);
  round_result out;
  for (int k = 0; k < 300; ++k) {
    job j = one_gpu("j" + std::to_string(k));
    j.per_replica.cpu_milli = 1'000'000 + k;  // more than any node has, each its own shape
    in.pending.push_back(j);
    out.unplaced_jobs.push_back({k, unplaced_reason::no_feasible_node, "no node fits"});
  }
  job twin = in.pending[3];  // a job of the fourth shape, after the bound
  twin.name = "twin";
  in.pending.push_back(twin);
  out.unplaced_jobs.push_back({300, unplaced_reason::no_feasible_node, "no node fits"});
  explain_unplaced(in, out);
  for (int k = 0; k < 256; ++k) {
    auto const& u = out.unplaced_jobs[static_cast<std::size_t>(k)];
    ASSERT_EQ(u.why.nodes, 65536) << k;
    ASSERT_EQ(u.why.excluded.size(), 1U) << k;
    EXPECT_EQ(u.why.excluded[0].reason, node_exclusion::cpu) << k;
    EXPECT_EQ(u.why.excluded[0].nodes, 65536) << k;
  }
  for (int k = 256; k < 300; ++k) {
    auto const& u = out.unplaced_jobs[static_cast<std::size_t>(k)];
    EXPECT_EQ(u.why.nodes, 0) << k;
    EXPECT_NE(u.detail.find("no node fits. Not explained: this round's unplaced jobs come in more shapes than one round "
                            "explains"),
              std::string::npos)
        << u.detail;
  }
  EXPECT_EQ(out.unplaced_jobs[300].why, out.unplaced_jobs[3].why);
  // One shape explained on its own says the same as in the bounded round.
  round_result alone;
  alone.unplaced_jobs.push_back({3, unplaced_reason::no_feasible_node, "no node fits"});
  explain_unplaced(in, alone);
  EXPECT_EQ(alone.unplaced_jobs[0].why, out.unplaced_jobs[3].why);
  EXPECT_EQ(alone.unplaced_jobs[0].detail, out.unplaced_jobs[3].detail);
}

// The other way round: 100,000 unplaced jobs of as many shapes on 4 nodes
// are 0.4 M cells, all explained. Shapes are found by hash and shared room
// by sorting, not each against every other (that took 54 s; now 0.1 s).
TEST(Explanations, ExplainAHundredThousandShapes) {
  round_input in;
  in.state = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(4).gpus(8).build();
  round_result out;
  for (int k = 0; k < 100'000; ++k) {
    job j = one_gpu("j" + std::to_string(k));
    j.per_replica.cpu_milli = 1'000'000'000 + k;
    in.pending.push_back(std::move(j));
    out.unplaced_jobs.push_back({k, unplaced_reason::no_feasible_node, ""});
  }
  explain_unplaced(in, out);
  for (auto const& u : out.unplaced_jobs) {
    ASSERT_EQ(u.why.nodes, 4) << u.job;
    ASSERT_EQ(u.why.excluded.size(), 1U) << u.job;
    ASSERT_EQ(u.why.excluded[0].reason, node_exclusion::cpu) << u.job;
  }
}

}  // namespace
}  // namespace placer
