// Tests for placer::traces (traces/src/loaders.cpp): the real data sets in
// ../shared/data checked against the numbers in its README (skipped when the
// folder is absent), the committed openb sample in data/openb-sample, the CSV
// edge cases, and the error messages (file, 1-based line, what) on small
// files written to a per-test temporary directory.
#include <placer/traces/loaders.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace placer;
using namespace placer::traces;

namespace {

fs::path shared_dir() { return fs::path(PLACER_SHARED_DATA_DIR); }
std::string shared(std::string const& rel) { return (shared_dir() / rel).string(); }
std::string openb(std::string const& file) { return shared("alibaba-openb-v2023/" + file); }
std::string sample(std::string const& file) {
  return (fs::path(PLACER_SOURCE_DIR) / "data" / "openb-sample" / file).string();
}

// GTEST_SKIP returns from the calling test body, hence a macro.
#define REQUIRE_SHARED_DATA()                                                   \
  do {                                                                          \
    if (!fs::is_directory(shared_dir())) {                                      \
      GTEST_SKIP() << "shared data not found at " << shared_dir().string();     \
    }                                                                           \
  } while (0)

std::int64_t total_gpus(cluster const& c) {
  std::int64_t n = 0;
  for (auto const& nd : c.nodes) n += nd.gpu_count();
  return n;
}

/// Every inventory comes back free, healthy, shared, with a leaf and a
/// spine above every node.
void expect_fresh_inventory(cluster const& c, inventory_options const& opt = {}) {
  EXPECT_EQ(c.epoch, 1U);
  EXPECT_NO_THROW(validate(c));
  for (auto const& n : c.nodes) {
    ASSERT_EQ(n.cpu_milli_free, n.cpu_milli_capacity) << n.name;
    ASSERT_EQ(n.memory_mib_free, n.memory_mib_capacity) << n.name;
    ASSERT_GT(n.cpu_milli_capacity, 0) << n.name;
    ASSERT_GT(n.memory_mib_capacity, 0) << n.name;
    ASSERT_TRUE(std::all_of(n.gpu_free_milli.begin(), n.gpu_free_milli.end(),
                            [](std::int32_t m) { return m == milli_per_gpu; }))
        << n.name;
    ASSERT_EQ(n.gpu_count() == 0, n.gpu_model.empty()) << n.name;
    ASSERT_TRUE(n.healthy);
    ASSERT_EQ(n.pool, pool_kind::shared);
  }
  ASSERT_EQ(c.topo.level_names, (std::vector<std::string>{"cluster", "spine", "leaf"}));
  auto const paths = node_domain_paths(c);
  auto const levels = static_cast<std::size_t>(c.topo.levels());
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    ASSERT_EQ(paths[i * levels + 0], 0) << "node " << i;
    auto const spine = paths[i * levels + 1];
    auto const leaf = paths[i * levels + 2];
    ASSERT_GE(spine, 0) << "node " << i;
    ASSERT_GE(leaf, 0) << "node " << i;
    auto const leaf_index = i / static_cast<std::size_t>(opt.nodes_per_leaf);
    ASSERT_EQ(c.topo.domains[leaf].name, "leaf-" + std::to_string(leaf_index));
    ASSERT_EQ(c.topo.domains[spine].name,
              "spine-" + std::to_string(leaf_index / static_cast<std::size_t>(opt.leaves_per_spine)));
  }
}

using shape = std::tuple<std::string, std::int32_t, std::int64_t, std::int64_t>;  // model, gpus, cpu milli, mem MiB
std::map<shape, int> shapes(cluster const& c) {
  std::map<shape, int> out;
  for (auto const& n : c.nodes) ++out[{n.gpu_model, n.gpu_count(), n.cpu_milli_capacity, n.memory_mib_capacity}];
  return out;
}
shape gib(std::string model, std::int32_t gpus, std::int64_t vcpu, std::int64_t mem_gib) {
  return {std::move(model), gpus, vcpu * 1000, mem_gib * 1024};
}

struct pod_stats {
  int cpu_only = 0, one_gpu = 0, fractional = 0, two = 0, four = 0, eight = 0;
  int with_spec = 0;
  std::int64_t gpu_milli = 0;
};
pod_stats stats(std::vector<job> const& jobs) {
  pod_stats s;
  for (auto const& j : jobs) {
    auto const& d = j.per_replica;
    s.cpu_only += d.gpus == 0;
    s.one_gpu += d.gpus == 1;
    s.fractional += d.fractional();
    s.two += d.gpus == 2;
    s.four += d.gpus == 4;
    s.eight += d.gpus == 8;
    s.with_spec += !j.allowed_gpu_models.empty();
    s.gpu_milli += d.gpu_milli_total() * j.replicas;
  }
  return s;
}

/// A fresh directory per test under the GoogleTest temp dir.
class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    auto const* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("placer_traces_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(std::string const& name, std::string const& text) {
    auto const p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

/// Runs `f`, expects a parse_error whose message starts with "<path>:<line>:"
/// and contains `what`.
template <class F>
void expect_parse_error(F&& f, std::string const& path, int line, std::string const& what) {
  try {
    f();
    ADD_FAILURE() << "expected parse_error for " << path;
  } catch (parse_error const& e) {
    std::string const msg = e.what();
    std::string const prefix = path + ":" + std::to_string(line) + ": ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0U) << "message: " << msg << "\nexpected prefix: " << prefix;
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nexpected to contain: " << what;
    EXPECT_EQ(e.code(), error_code::invalid_argument);
  }
}

constexpr char const* pod_header =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

}  // namespace

// --- openb node lists -------------------------------------------------------

TEST(OpenbNodes, GpuNodeListMatchesReadme) {
  REQUIRE_SHARED_DATA();
  auto const c = load_openb_nodes(openb("openb_node_list_gpu_node.csv"));
  ASSERT_EQ(c.nodes.size(), 1213U);
  EXPECT_EQ(total_gpus(c), 6212);
  std::map<shape, int> const expected = {
      {gib("G2", 8, 96, 384), 549},     {gib("T4", 2, 104, 512), 387},     {gib("P100", 2, 16, 120), 107},
      {gib("G3", 8, 128, 768), 39},     {gib("V100M16", 4, 32, 128), 28},  {gib("P100", 2, 64, 256), 22},
      {gib("V100M32", 8, 96, 768), 21}, {gib("V100M16", 1, 8, 32), 19},    {gib("T4", 4, 96, 384), 17},
      {gib("V100M32", 4, 48, 368), 9},  {gib("V100M16", 8, 64, 256), 7},  {gib("P100", 1, 8, 60), 3},
      {gib("P100", 2, 8, 60), 2},       {gib("A10", 1, 128, 1024), 2},     {gib("V100M16", 8, 82, 336), 1},
  };
  EXPECT_EQ(shapes(c), expected);
  EXPECT_EQ(c.nodes.front().name, "openb-node-0000");
  expect_fresh_inventory(c);
}

TEST(OpenbNodes, AllNodeListHasCpuOnlyNodes) {
  REQUIRE_SHARED_DATA();
  auto const c = load_openb_nodes(openb("openb_node_list_all_node.csv"));
  ASSERT_EQ(c.nodes.size(), 1523U);
  EXPECT_EQ(total_gpus(c), 6212);
  auto const cpu_only = std::count_if(c.nodes.begin(), c.nodes.end(), [](node const& n) { return n.gpu_count() == 0; });
  EXPECT_EQ(cpu_only, 310);
  expect_fresh_inventory(c);
}

TEST(Topology, SyntheticLeavesAndSpinesFollowOptions) {
  REQUIRE_SHARED_DATA();
  auto const c = load_openb_nodes(openb("openb_node_list_gpu_node.csv"));
  // 1213 nodes / 32 per leaf = 38 leaves (the last one partial), 8 per spine = 5 spines.
  EXPECT_EQ(c.topo.domains.size(), 1U + 5U + 38U);
  EXPECT_EQ(c.topo.domains[0].name, "cluster");
  EXPECT_EQ(c.topo.domains[0].parent, -1);
  inventory_options opt;
  opt.nodes_per_leaf = 16;
  opt.leaves_per_spine = 4;
  auto const small = load_openb_nodes(openb("openb_node_list_gpu_node.csv"), opt);
  EXPECT_EQ(small.topo.domains.size(), 1U + 19U + 76U);  // ceil(1213/16) = 76 leaves, ceil(76/4) = 19 spines
  expect_fresh_inventory(small, opt);
}

TEST(Topology, RejectsNonPositiveOptions) {
  cluster c = make_cluster().spines(1).leaves_per_spine(1).nodes_per_leaf(3).build();
  inventory_options opt;
  opt.nodes_per_leaf = 0;
  EXPECT_THROW(assign_synthetic_topology(c, opt), placer::logic_error);
  opt.nodes_per_leaf = 2;
  opt.leaves_per_spine = -1;
  EXPECT_THROW(assign_synthetic_topology(c, opt), placer::logic_error);
  opt.leaves_per_spine = 1;
  assign_synthetic_topology(c, opt);
  ASSERT_EQ(c.topo.domains.size(), 5U);  // cluster, spine-0, leaf-0, spine-1, leaf-1
  EXPECT_EQ(c.topo.domains[c.nodes[2].domain].name, "leaf-1");
  EXPECT_EQ(c.topo.domains[c.topo.domains[c.nodes[2].domain].parent].name, "spine-1");
  EXPECT_NO_THROW(validate(c));
}

// --- other inventories -------------------------------------------------------

TEST(PaiMachines, MatchReadme) {
  REQUIRE_SHARED_DATA();
  auto const c = load_pai_machines(shared("alibaba-pai-v2020/pai_machine_spec.csv"));
  // The README says 1,896 machines, but the file has 1,897 data lines (no
  // header, 1,897 distinct ids) and the README's own shape counts add up to
  // 1,897; the GPU total matches.
  ASSERT_EQ(c.nodes.size(), 1897U);
  EXPECT_EQ(total_gpus(c), 6742);
  std::map<shape, int> const expected = {
      {gib("P100", 2, 64, 512), 798},    {gib("T4", 2, 96, 512), 497},    {gib("MISC", 8, 96, 512), 280},
      {gib("V100M32", 8, 96, 384), 135}, {gib("V100", 8, 96, 384), 45},   {gib("V100", 8, 96, 512), 59},
      {gib("", 0, 96, 512), 83},
  };
  EXPECT_EQ(shapes(c), expected);
  expect_fresh_inventory(c);
}

TEST(SpotNodes, MatchReadme) {
  REQUIRE_SHARED_DATA();
  auto const c = load_spot_nodes(shared("alibaba-spot-gpu-v2026/node_info_df.csv"));
  ASSERT_EQ(c.nodes.size(), 4278U);
  EXPECT_EQ(total_gpus(c), 10412);
  std::map<std::pair<std::string, int>, int> by_model;
  for (auto const& n : c.nodes) {
    ++by_model[{n.gpu_model, n.gpu_count()}];
    ASSERT_EQ(n.memory_mib_capacity * 1000, n.cpu_milli_capacity * spot_memory_mib_per_vcpu) << n.name;
  }
  std::map<std::pair<std::string, int>, int> const expected = {
      {{"A10", 1}, 2494},           {{"GPU-series-1", 1}, 902}, {{"A100-SXM4-80GB", 8}, 432},
      {{"H800", 8}, 219},           {{"GPU-series-2", 8}, 122}, {{"GPU-series-1", 8}, 77},
      {{"A800-SXM4-80GB", 8}, 22}, {{"GPU-series-1", 4}, 10},
  };
  EXPECT_EQ(by_model, expected);
  EXPECT_EQ(c.nodes.front().name, "0");
  EXPECT_EQ(c.nodes.front().cpu_milli_capacity, 192000);
  EXPECT_EQ(c.nodes.front().memory_mib_capacity, 192 * 8192);
  expect_fresh_inventory(c);
}

TEST(LoadInventory, SniffsAllThreeFormats) {
  REQUIRE_SHARED_DATA();
  EXPECT_EQ(load_inventory(openb("openb_node_list_gpu_node.csv")).nodes.size(), 1213U);
  EXPECT_EQ(load_inventory(openb("openb_node_list_all_node.csv")).nodes.size(), 1523U);
  EXPECT_EQ(load_inventory(shared("alibaba-spot-gpu-v2026/node_info_df.csv")).nodes.size(), 4278U);
  auto const pai = load_inventory(shared("alibaba-pai-v2020/pai_machine_spec.csv"));
  EXPECT_EQ(pai.nodes.size(), 1897U);
  EXPECT_EQ(total_gpus(pai), 6742);
}

// --- openb pod lists -----------------------------------------------------------

TEST(OpenbPods, DefaultMatchesReadme) {
  REQUIRE_SHARED_DATA();
  auto const jobs = load_openb_pods(openb("openb_pod_list_default.csv"));
  ASSERT_EQ(jobs.size(), 8152U);
  auto const s = stats(jobs);
  EXPECT_EQ(s.cpu_only, 1088);
  EXPECT_EQ(s.one_gpu, 6989);
  EXPECT_EQ(s.fractional, 3078);
  EXPECT_EQ(s.two, 16);
  EXPECT_EQ(s.four, 15);
  EXPECT_EQ(s.eight, 44);
  EXPECT_EQ(s.gpu_milli, 6086800);  // 6,086.8 GPUs
  EXPECT_EQ(s.with_spec, 0);

  std::map<std::int32_t, int> shares;
  int inference = 0, training = 0, batch = 0, with_duration = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto const& j = jobs[i];
    char buf[32];
    std::snprintf(buf, sizeof buf, "openb-pod-%04zu", i);
    ASSERT_EQ(j.name, buf);  // file order
    ASSERT_EQ(j.replicas, 1);
    ASSERT_FALSE(j.gang);
    ASSERT_EQ(j.topology_level, -1);
    if (j.per_replica.gpus == 0) {
      ASSERT_EQ(j.per_replica.gpu_milli, milli_per_gpu);
    }
    if (j.per_replica.fractional()) ++shares[j.per_replica.gpu_milli];
    inference += j.kind == job_kind::inference;
    training += j.kind == job_kind::training;
    batch += j.kind == job_kind::batch;
    if (j.kind == job_kind::batch) {
      ASSERT_EQ(j.per_replica.gpus, 0);
    }
    with_duration += j.estimated_duration > 0;
  }
  EXPECT_EQ(inference, 4647);  // qos LS
  EXPECT_EQ(training, 3053);
  EXPECT_EQ(batch, 452);
  EXPECT_EQ(with_duration, 8152 - 897);  // the 897 Pending pods have no scheduled_time
  // Most common fractional shares, per the README: 810, 470, 320, 650, 230.
  std::vector<std::pair<int, std::int32_t>> by_count;
  for (auto const& [milli, n] : shares) by_count.emplace_back(n, milli);
  std::sort(by_count.rbegin(), by_count.rend());
  ASSERT_GE(by_count.size(), 5U);
  EXPECT_EQ(by_count[0].second, 810);
  EXPECT_EQ(by_count[1].second, 470);
  EXPECT_EQ(by_count[2].second, 320);
  EXPECT_EQ(by_count[3].second, 650);
  EXPECT_EQ(by_count[4].second, 230);

  // openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
  auto const& p1 = jobs[1];
  EXPECT_EQ(p1.per_replica, (demand{1, 460, 6000, 12288}));
  EXPECT_EQ(p1.kind, job_kind::inference);
  EXPECT_EQ(p1.submit_time, 427061);
  EXPECT_EQ(p1.estimated_duration, 12902960 - 427061);
  // openb-pod-0061 is Pending: no scheduled_time, so no duration estimate.
  EXPECT_EQ(jobs[61].submit_time, 10001278);
  EXPECT_EQ(jobs[61].estimated_duration, 0);
  EXPECT_EQ(jobs[61].kind, job_kind::training);  // BE GPU pod
}

TEST(OpenbPods, Multigpu50HasOnlyFiveColumns) {
  REQUIRE_SHARED_DATA();
  auto const jobs = load_openb_pods(openb("openb_pod_list_multigpu50.csv"));
  ASSERT_EQ(jobs.size(), 9061U);
  auto const s = stats(jobs);
  EXPECT_EQ(s.cpu_only, 1088);
  EXPECT_EQ(s.fractional, 3078);
  EXPECT_EQ(s.two, 222);
  EXPECT_EQ(s.four, 206);
  EXPECT_EQ(s.eight, 556);
  for (auto const& j : jobs) {
    ASSERT_EQ(j.submit_time, 0);
    ASSERT_EQ(j.estimated_duration, 0);
    ASSERT_TRUE(j.allowed_gpu_models.empty());
    // No qos column: nothing is latency-sensitive.
    ASSERT_EQ(j.kind, j.per_replica.gpus == 0 ? job_kind::batch : job_kind::training);
  }
}

TEST(OpenbPods, GpuspecFilesProduceAllowedModels) {
  REQUIRE_SHARED_DATA();
  auto const nodes = load_openb_nodes(openb("openb_node_list_gpu_node.csv"));
  std::set<std::string> models;
  for (auto const& n : nodes.nodes) models.insert(n.gpu_model);
  std::map<std::string, int> const expected = {{"05", 369}, {"10", 732}, {"20", 1444}, {"25", 1759}};
  for (auto const& [suffix, count] : expected) {
    auto const jobs = load_openb_pods(openb("openb_pod_list_gpuspec" + suffix + ".csv"));
    ASSERT_EQ(jobs.size(), 8152U) << suffix;
    auto const s = stats(jobs);
    EXPECT_EQ(s.with_spec, count) << suffix;
    EXPECT_EQ(s.gpu_milli, 6086800) << suffix;
    for (auto const& j : jobs) {
      std::set<std::string> const unique(j.allowed_gpu_models.begin(), j.allowed_gpu_models.end());
      ASSERT_EQ(unique.size(), j.allowed_gpu_models.size()) << j.name;  // "V100M32|V100M32" is deduplicated
      for (auto const& m : j.allowed_gpu_models) ASSERT_TRUE(models.count(m)) << j.name << " allows " << m;
    }
  }
  auto const jobs = load_openb_pods(openb("openb_pod_list_gpuspec10.csv"));
  auto const it = std::find_if(jobs.begin(), jobs.end(), [](job const& j) { return j.allowed_gpu_models.size() == 2; });
  ASSERT_NE(it, jobs.end());
}

TEST(OpenbPods, EveryVariantLoadsWithReadmeRowCounts) {
  REQUIRE_SHARED_DATA();
  std::map<std::string, std::size_t> const rows = {
      {"cpu0", 7064},       {"cpu037", 7336},     {"cpu050", 7439},     {"cpu072", 7608},     {"cpu100", 7853},
      {"cpu200", 8832},     {"cpu235", 9240},     {"cpu250", 9420},     {"cpu300", 10094},    {"default", 8152},
      {"gpushare20", 8152}, {"gpushare40", 8152}, {"gpushare60", 8152}, {"gpushare80", 8152}, {"gpushare100", 8152},
      {"gpuspec05", 8152},  {"gpuspec10", 8152},  {"gpuspec20", 8152},  {"gpuspec25", 8152},  {"multigpu20", 8324},
      {"multigpu30", 8508}, {"multigpu40", 8746}, {"multigpu50", 9061},
  };
  std::map<std::string, int> const fractional = {
      {"gpushare20", 2324}, {"gpushare40", 4001}, {"gpushare60", 5233}, {"gpushare80", 6279}, {"gpushare100", 7064}};
  for (auto const& [name, n] : rows) {
    auto const jobs = load_openb_pods(openb("openb_pod_list_" + name + ".csv"));
    EXPECT_EQ(jobs.size(), n) << name;
    if (auto it = fractional.find(name); it != fractional.end()) {
      EXPECT_EQ(stats(jobs).fractional, it->second) << name;
    }
  }
}

TEST(OpenbPods, LargestFilesLoadWellUnderASecond) {
  REQUIRE_SHARED_DATA();
  auto const t0 = std::chrono::steady_clock::now();
  auto const pods = load_openb_pods(openb("openb_pod_list_cpu300.csv"));
  auto const t1 = std::chrono::steady_clock::now();
  auto const dlrm = load_dlrm_instances(shared("alibaba-dlrm-v2025/disaggregated_DLRM_trace.csv"));
  auto const t2 = std::chrono::steady_clock::now();
  auto const ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  RecordProperty("openb_cpu300_ms", std::to_string(ms(t1 - t0)));
  RecordProperty("dlrm_ms", std::to_string(ms(t2 - t1)));
  EXPECT_EQ(pods.size(), 10094U);
  EXPECT_EQ(dlrm.size(), 23871U);
  // Typically ~10-20 ms each; the bound is loose so sanitizer or debug builds pass.
  EXPECT_LT(ms(t1 - t0), 1000.0);
  EXPECT_LT(ms(t2 - t1), 1000.0);
}

// --- ITP --------------------------------------------------------------------------

TEST(Itp, Cluster02MatchesReadme) {
  REQUIRE_SHARED_DATA();
  auto const raw = load_itp_jobs(shared("microsoft-itp-elasticflow/raw-traces/cluster02.csv"));
  ASSERT_EQ(raw.size(), 5778U);
  std::map<int, int> hist;
  for (auto const& r : raw) ++hist[r.num_gpu];
  std::map<int, int> const expected = {{1, 4937}, {2, 102}, {4, 301}, {8, 352}, {16, 36}, {32, 36}, {64, 14}};
  EXPECT_EQ(hist, expected);
  EXPECT_EQ(raw.front().id, "f60b9881-76f3-6fc7-d009-6b2a00419afc");
  EXPECT_EQ(raw.front().submit_time, 5010);
  EXPECT_EQ(raw.front().duration, 1265);
  EXPECT_EQ(raw.front().num_gpu, 1);

  // The elasticflow version has the same jobs with columns in another order.
  auto const ef = load_itp_jobs(shared("microsoft-itp-elasticflow/elasticflow-traces/cluster02.csv"));
  ASSERT_EQ(ef.size(), raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    ASSERT_EQ(ef[i].id, raw[i].id);
    ASSERT_EQ(ef[i].submit_time, raw[i].submit_time);
    ASSERT_EQ(ef[i].duration, raw[i].duration);
    ASSERT_EQ(ef[i].num_gpu, raw[i].num_gpu);
  }
}

TEST(Itp, EveryClusterLoadsWithReadmeJobCounts) {
  REQUIRE_SHARED_DATA();
  std::map<std::string, std::size_t> const jobs = {
      {"cluster01", 1595}, {"cluster02", 5778},  {"cluster03", 3011},  {"cluster04", 15802}, {"cluster05", 3629},
      {"cluster07", 12699}, {"cluster08", 13047}, {"cluster09", 11134}, {"cluster10", 260},
  };
  for (auto const& [name, n] : jobs) {
    EXPECT_EQ(load_itp_jobs(shared("microsoft-itp-elasticflow/raw-traces/" + name + ".csv")).size(), n) << name;
    EXPECT_EQ(load_itp_jobs(shared("microsoft-itp-elasticflow/elasticflow-traces/" + name + ".csv")).size(), n) << name;
  }
  EXPECT_EQ(load_itp_jobs(shared("microsoft-itp-elasticflow/elasticflow-traces/195job.csv")).size(), 195U);
}

TEST(Itp, ToJobsSplitsLargeJobsIntoGangsOfWholeNodes) {
  std::vector<itp_job> const rows = {
      {"a", 10, 100, 1}, {"b", 20, 200, 8}, {"c", 30, 300, 12}, {"d", 40, 400, 64}, {"e", 50, 500, 4}};
  auto const jobs = itp_to_jobs(rows);
  ASSERT_EQ(jobs.size(), 5U);
  auto const check = [&](std::size_t i, int replicas, int gpus, bool gang) {
    auto const& j = jobs[i];
    EXPECT_EQ(j.name, rows[i].id);
    EXPECT_EQ(j.replicas, replicas) << j.name;
    EXPECT_EQ(j.per_replica.gpus, gpus) << j.name;
    EXPECT_EQ(j.per_replica.gpu_milli, milli_per_gpu) << j.name;
    EXPECT_EQ(j.per_replica.cpu_milli, itp_cpu_milli_per_gpu * gpus) << j.name;
    EXPECT_EQ(j.per_replica.memory_mib, itp_memory_mib_per_gpu * gpus) << j.name;
    EXPECT_EQ(j.gang, gang) << j.name;
    EXPECT_EQ(j.topology_level, -1) << j.name;
    EXPECT_EQ(j.kind, job_kind::training) << j.name;
    EXPECT_EQ(j.submit_time, rows[i].submit_time) << j.name;
    EXPECT_EQ(j.estimated_duration, rows[i].duration) << j.name;
  };
  check(0, 1, 1, false);
  check(1, 1, 8, false);
  check(2, 2, 8, true);  // 12 GPUs round up to two whole 8-GPU nodes
  check(3, 8, 8, true);
  check(4, 1, 4, false);
  EXPECT_THROW(itp_to_jobs({{"zero", 0, 0, 0}}), placer::logic_error);
}

TEST(Itp, Cluster02AsJobs) {
  REQUIRE_SHARED_DATA();
  auto const jobs = itp_to_jobs(load_itp_jobs(shared("microsoft-itp-elasticflow/raw-traces/cluster02.csv")));
  ASSERT_EQ(jobs.size(), 5778U);
  int gangs = 0;
  std::int64_t gpus = 0;
  for (auto const& j : jobs) {
    gangs += j.gang;
    gpus += static_cast<std::int64_t>(j.replicas) * j.per_replica.gpus;
  }
  EXPECT_EQ(gangs, 36 + 36 + 14);
  // 4937 + 2*102 + 4*301 + 8*352 + 16*36 + 32*36 + 64*14: every size is exact.
  EXPECT_EQ(gpus, 4937 + 204 + 1204 + 2816 + 576 + 1152 + 896);
}

// --- DLRM -------------------------------------------------------------------------

TEST(Dlrm, MatchesReadme) {
  REQUIRE_SHARED_DATA();
  auto const rows = load_dlrm_instances(shared("alibaba-dlrm-v2025/disaggregated_DLRM_trace.csv"));
  ASSERT_EQ(rows.size(), 23871U);
  int hn = 0, cn = 0, no_creation = 0, no_deletion = 0;
  std::set<std::string> apps;
  std::int64_t cpu = 0, mem = 0;
  for (auto const& r : rows) {
    if (r.role == "HN") {
      ++hn;
      ASSERT_EQ(r.gpus, 1);
    } else {
      ASSERT_EQ(r.role, "CN");
      ++cn;
      ASSERT_EQ(r.gpus, 0);
    }
    apps.insert(r.app);
    no_creation += r.creation_time == -1;
    no_deletion += r.deletion_time == -1;
    cpu += r.cpu_milli;
    mem += r.memory_mib;
    ASSERT_GE(r.max_instance_per_node, -1);
  }
  EXPECT_EQ(hn, 7386);
  EXPECT_EQ(cn, 16485);
  EXPECT_EQ(apps.size(), 156U);
  EXPECT_EQ(no_creation, 7280);
  EXPECT_EQ(no_deletion, 8878);
  EXPECT_EQ(cpu, 1252594000);   // sum of cpu_request x 1000
  EXPECT_EQ(mem, 6497698304);   // sum of memory_request x 1024 (937.5 GiB rows included)

  // instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
  auto const& r0 = rows[0];
  EXPECT_EQ(r0.app, "app_0");
  EXPECT_EQ(r0.role, "HN");
  EXPECT_EQ(r0.cpu_milli, 12000);
  EXPECT_EQ(r0.gpus, 1);
  EXPECT_EQ(r0.memory_mib, 120 * 1024);
  EXPECT_EQ(r0.max_instance_per_node, 8);
  EXPECT_EQ(r0.creation_time, -1);
  EXPECT_EQ(r0.deletion_time, -1);
  // instance_7280: creation_time 475.00000000000006 rounds to 475, max_instance_per_node -1.
  auto const& r7280 = rows[7280];
  EXPECT_EQ(r7280.app, "app_22");
  EXPECT_EQ(r7280.creation_time, 475);
  EXPECT_EQ(r7280.deletion_time, -1);
  EXPECT_EQ(r7280.max_instance_per_node, -1);
  EXPECT_EQ(rows.back().creation_time, 2676571);
}

// --- committed sample (always present) --------------------------------------------

TEST(OpenbSample, LoadsFromTheRepository) {
  auto const c = load_openb_nodes(sample("nodes.csv"));
  ASSERT_EQ(c.nodes.size(), 64U);
  EXPECT_EQ(total_gpus(c), 344);
  std::map<std::string, int> models;
  for (auto const& n : c.nodes) ++models[n.gpu_model];
  std::map<std::string, int> const expected_models = {{"G2", 29}, {"P100", 24}, {"G3", 4},
                                                      {"T4", 4},  {"V100M32", 2}, {"V100M16", 1}};
  EXPECT_EQ(models, expected_models);
  expect_fresh_inventory(c);
  EXPECT_EQ(c.topo.domains.size(), 1U + 1U + 2U);  // 64 nodes: 2 leaves under one spine

  auto const jobs = load_openb_pods(sample("pods.csv"));
  ASSERT_EQ(jobs.size(), 300U);
  auto const s = stats(jobs);
  EXPECT_EQ(s.cpu_only, 38);
  EXPECT_EQ(s.one_gpu, 255);
  EXPECT_EQ(s.fractional, 101);
  EXPECT_EQ(s.two, 1);
  EXPECT_EQ(s.four, 1);
  EXPECT_EQ(s.eight, 5);
  EXPECT_EQ(s.gpu_milli, 257800);
  EXPECT_EQ(jobs.front().name, "openb-pod-0000");
  EXPECT_EQ(jobs.back().name, "openb-pod-8073");
}

TEST(OpenbSample, IsTheDocumentedSelectionOfTheSharedData) {
  REQUIRE_SHARED_DATA();
  auto const all_nodes = load_openb_nodes(openb("openb_node_list_gpu_node.csv"));
  auto const nodes = load_openb_nodes(sample("nodes.csv"));
  for (std::size_t i = 0; i < nodes.nodes.size(); ++i) {
    ASSERT_EQ(nodes.nodes[i].name, all_nodes.nodes[i].name);
    ASSERT_EQ(nodes.nodes[i].gpu_model, all_nodes.nodes[i].gpu_model);
  }
  auto const all_pods = load_openb_pods(openb("openb_pod_list_default.csv"));
  auto const pods = load_openb_pods(sample("pods.csv"));
  for (std::size_t i = 0; i < pods.size(); ++i) {
    auto const& a = all_pods[i * 27];
    ASSERT_EQ(pods[i].name, a.name);
    ASSERT_EQ(pods[i].per_replica, a.per_replica);
    ASSERT_EQ(pods[i].submit_time, a.submit_time);
    ASSERT_EQ(pods[i].estimated_duration, a.estimated_duration);
  }
}

// --- CSV handling on small files -------------------------------------------------

TEST_F(TraceFiles, CsvQuotesCrlfBlankLinesAndColumnOrder) {
  // Columns reordered, an extra column, CRLF endings, a UTF-8 BOM, quoted
  // fields (with a comma, an escaped quote, and a line break), blank lines,
  // empty optional fields and no newline at the end.
  auto const p = write("pods.csv",
                       "\xEF\xBB\xBF"
                       "gpu_milli,num_gpu,name,extra,memory_mib,cpu_milli,gpu_spec,qos,creation_time,scheduled_time,"
                       "deletion_time\r\n"
                       "\r\n"
                       "500,1,\"pod,a\",\"say \"\"hi\"\"\",1024,2000,\"T4|V100M16\",LS,10,20,50\r\n"
                       "   \r\n"
                       "1000,8,pod-b,\"two\nlines\",2048,8000,,BE,,,\r\n"
                       "0,0,pod-c,,512,1000,A10|,,7,30,20");
  auto const jobs = load_openb_pods(p);
  ASSERT_EQ(jobs.size(), 3U);
  EXPECT_EQ(jobs[0].name, "pod,a");
  EXPECT_EQ(jobs[0].per_replica, (demand{1, 500, 2000, 1024}));
  EXPECT_EQ(jobs[0].allowed_gpu_models, (std::vector<std::string>{"T4", "V100M16"}));
  EXPECT_EQ(jobs[0].kind, job_kind::inference);
  EXPECT_EQ(jobs[0].submit_time, 10);
  EXPECT_EQ(jobs[0].estimated_duration, 30);
  EXPECT_EQ(jobs[1].name, "pod-b");
  EXPECT_EQ(jobs[1].per_replica, (demand{8, 1000, 8000, 2048}));
  EXPECT_TRUE(jobs[1].allowed_gpu_models.empty());
  EXPECT_EQ(jobs[1].kind, job_kind::training);
  EXPECT_EQ(jobs[1].submit_time, 0);
  EXPECT_EQ(jobs[1].estimated_duration, 0);
  EXPECT_EQ(jobs[2].per_replica, (demand{0, 1000, 1000, 512}));
  EXPECT_EQ(jobs[2].allowed_gpu_models, (std::vector<std::string>{"A10"}));
  EXPECT_EQ(jobs[2].kind, job_kind::batch);
  EXPECT_EQ(jobs[2].estimated_duration, 0);  // deleted before scheduled: unknown
}

TEST_F(TraceFiles, HeaderOnlyPodListIsEmpty) {
  EXPECT_TRUE(load_openb_pods(write("pods.csv", pod_header)).empty());
}

TEST_F(TraceFiles, LineNumbersCountQuotedLineBreaksAndBlankLines) {
  auto const p = write("pods.csv", std::string(pod_header) +
                                       "p0,1000,1024,1,1000,\"a\nb\",LS,Running,0,1,2\n"
                                       "\n"
                                       "p1,1000,1024,1,x,,LS,Running,0,1,2\n");
  expect_parse_error([&] { load_openb_pods(p); }, p, 5, "column 'gpu_milli': 'x' is not a whole number");
}

TEST_F(TraceFiles, InventoriesFromSmallFiles) {
  auto const spot = write("spot.csv", "node_name,cpu_num,gpu_model,gpu_capacity_num\nn0,4,H800,8\nn1,2.5,,0\n");
  auto const c = load_inventory(spot);
  ASSERT_EQ(c.nodes.size(), 2U);
  EXPECT_EQ(c.nodes[0].gpu_model, "H800");
  EXPECT_EQ(c.nodes[0].memory_mib_capacity, 4 * 8192);
  EXPECT_EQ(c.nodes[1].cpu_milli_capacity, 2500);
  EXPECT_EQ(c.nodes[1].memory_mib_capacity, 20480);
  EXPECT_TRUE(c.nodes[1].gpu_model.empty());

  auto const pai = write("pai.csv", "m0,CPU,96,512,0\nm1,T4,96,512,2\n");
  auto const a = load_inventory(pai);
  ASSERT_EQ(a.nodes.size(), 2U);
  EXPECT_EQ(a.nodes[0].gpu_model, "");
  EXPECT_EQ(a.nodes[0].gpu_count(), 0);
  EXPECT_EQ(a.nodes[1].gpu_model, "T4");
  EXPECT_EQ(a.nodes[1].cpu_milli_capacity, 96000);
  EXPECT_EQ(a.nodes[1].memory_mib_capacity, 512 * 1024);
  // With the header line from pai_machine_spec.header prepended.
  auto const pai_h = write("pai_h.csv", "machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm0,CPU,96,512,0\n");
  EXPECT_EQ(load_pai_machines(pai_h).nodes.size(), 1U);
  EXPECT_EQ(load_inventory(pai_h).nodes.size(), 1U);

  auto const openb_nodes = write("openb.csv", "sn,cpu_milli,memory_mib,gpu,model\nx0,32000,65536,0,\nx1,8000,1024,2,T4\n");
  auto const o = load_inventory(openb_nodes);
  ASSERT_EQ(o.nodes.size(), 2U);
  EXPECT_EQ(o.nodes[1].gpu_count(), 2);
  expect_fresh_inventory(o);

  auto const other = write("other.csv", "a,b\n1,2\n");
  expect_parse_error([&] { load_inventory(other); }, other, 1, "unrecognised inventory");
}

// --- errors -------------------------------------------------------------------------

TEST_F(TraceFiles, MissingFileNamesThePath) {
  auto const p = (dir_ / "nope.csv").string();
  for (auto const& f : std::vector<std::function<void()>>{
           [&] { load_openb_nodes(p); }, [&] { load_openb_pods(p); }, [&] { load_pai_machines(p); },
           [&] { load_spot_nodes(p); }, [&] { load_inventory(p); }, [&] { load_itp_jobs(p); },
           [&] { load_dlrm_instances(p); }}) {
    try {
      f();
      ADD_FAILURE() << "no error for a missing file";
    } catch (parse_error const& e) {
      EXPECT_EQ(std::string(e.what()), p + ": cannot open file");
    }
  }
}

TEST_F(TraceFiles, EmptyFile) {
  auto const p = write("empty.csv", "");
  expect_parse_error([&] { load_openb_pods(p); }, p, 1, "empty file");
  expect_parse_error([&] { load_pai_machines(p); }, p, 1, "empty file");
  auto const blank = write("blank.csv", "\n\r\n  \n");
  expect_parse_error([&] { load_openb_nodes(blank); }, blank, 4, "empty file");
  auto const header_only = write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n");
  expect_parse_error([&] { load_openb_nodes(header_only); }, header_only, 2, "no nodes");
}

TEST_F(TraceFiles, MissingColumnIsNamed) {
  auto const p = write("pods.csv", "name,cpu_milli,memory_mib,num_gpu\np0,1000,1024,1\n");
  expect_parse_error([&] { load_openb_pods(p); }, p, 1, "missing required column 'gpu_milli'");
  auto const n = write("nodes.csv", "\nsn,cpu_milli,gpu,model\nx,1,1,T4\n");
  expect_parse_error([&] { load_openb_nodes(n); }, n, 2, "missing required column 'memory_mib'");
  auto const itp = write("itp.csv", "job_id,submission_time,num_gpu\na,1,1\n");
  expect_parse_error([&] { load_itp_jobs(itp); }, itp, 1, "missing required column 'duration'");
  auto const d = write("dlrm.csv", "app_name,role,cpu_request,gpu_request\n");
  expect_parse_error([&] { load_dlrm_instances(d); }, d, 1, "missing required column 'memory_request'");
}

TEST_F(TraceFiles, NonNumericField) {
  auto const p = write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nx0,1000,1024,1,T4\nx1,lots,1024,1,T4\n");
  expect_parse_error([&] { load_openb_nodes(p); }, p, 3, "column 'cpu_milli': 'lots' is not a whole number");
  auto const q = write("pods.csv", std::string(pod_header) + "p0,1000,1024,1,1000,,LS,Running,0,1,2\n"
                                                              "p1,1000,1024,1.5,1000,,LS,Running,0,1,2\n");
  expect_parse_error([&] { load_openb_pods(q); }, q, 3, "column 'num_gpu': '1.5' is not a whole number");
  auto const pai = write("pai.csv", "m0,T4,96,512,2\nm1,T4,96,big,2\n");
  expect_parse_error([&] { load_pai_machines(pai); }, pai, 2, "column 'cap_mem': 'big' is not a number");
  auto const d = write("dlrm.csv",
                       "app_name,role,cpu_request,gpu_request,memory_request,max_instance_per_node,creation_time,"
                       "deletion_time\na,HN,12,1,120.0,8,,\na,HN,12,1,120.0,8,soon,\n");
  expect_parse_error([&] { load_dlrm_instances(d); }, d, 3, "column 'creation_time': 'soon' is not a number");
  auto const empty_req = write("nodes2.csv", "sn,cpu_milli,memory_mib,gpu,model\nx0,,1024,1,T4\n");
  expect_parse_error([&] { load_openb_nodes(empty_req); }, empty_req, 2, "column 'cpu_milli': empty value");
}

TEST_F(TraceFiles, NegativeNumber) {
  auto const p = write("pods.csv", std::string(pod_header) + "p0,1000,-1024,1,1000,,LS,Running,0,1,2\n");
  expect_parse_error([&] { load_openb_pods(p); }, p, 2, "column 'memory_mib': negative value -1024");
  auto const itp = write("itp.csv", "job_id,submission_time,duration,num_gpu\na,1,5,1\nb,-3,5,1\n");
  expect_parse_error([&] { load_itp_jobs(itp); }, itp, 3, "column 'submission_time': negative value -3");
  auto const spot = write("spot.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,-8,n0\n");
  expect_parse_error([&] { load_spot_nodes(spot); }, spot, 2, "column 'cpu_num': negative value -8");
  auto const d = write("dlrm.csv",
                       "app_name,role,cpu_request,gpu_request,memory_request,max_instance_per_node,creation_time,"
                       "deletion_time\na,HN,12,1,120.0,-2,,\n");
  expect_parse_error([&] { load_dlrm_instances(d); }, d, 2, "column 'max_instance_per_node': -2 is below the minimum -1");
}

TEST_F(TraceFiles, WrongFieldCount) {
  auto const p = write("pods.csv", std::string(pod_header) + "p0,1000,1024,1,1000,,LS,Running,0,1,2\n"
                                                              "p1,1000,1024,1,1000,,LS,Running,0,1\n");
  expect_parse_error([&] { load_openb_pods(p); }, p, 3, "expected 11 fields, found 10");
  auto const pai = write("pai.csv", "m0,T4,96,512,2\r\nm1,T4,96,512,2,extra\r\n");
  expect_parse_error([&] { load_pai_machines(pai); }, pai, 2, "expected 5 fields, found 6");
  auto const first = write("pai1.csv", "m0,T4,96,512\n");
  expect_parse_error([&] { load_pai_machines(first); }, first, 1, "expected 5 fields, found 4");
}

TEST_F(TraceFiles, GpuMilliOutOfRangeForGpuPods) {
  for (std::string const milli : {"0", "1001"}) {
    auto const p = write("pods.csv", std::string(pod_header) + "p0,1000,1024,1," + milli + ",,LS,Running,0,1,2\n");
    expect_parse_error([&] { load_openb_pods(p); }, p, 2, "column 'gpu_milli': " + milli + " is outside 1..1000");
  }
  auto const multi = write("multi.csv", std::string(pod_header) + "p0,1000,1024,2,500,,LS,Running,0,1,2\n");
  expect_parse_error([&] { load_openb_pods(multi); }, multi, 2, "must take whole GPUs");
  // CPU-only pods carry gpu_milli 0 in the real files; that is fine.
  auto const cpu = write("cpu.csv", std::string(pod_header) + "p0,1000,1024,0,0,,LS,Running,0,1,2\n");
  EXPECT_EQ(load_openb_pods(cpu).size(), 1U);
}

TEST_F(TraceFiles, OtherRowErrors) {
  auto const q = write("quote.csv", "sn,cpu_milli,memory_mib,gpu,model\n\"x0,1000,1024,1,T4\n");
  expect_parse_error([&] { load_openb_nodes(q); }, q, 2, "unterminated quoted field");
  auto const dup = write("dup.csv", "sn,cpu_milli,memory_mib,gpu,model\nx0,1000,1024,1,T4\nx0,1000,1024,1,T4\n");
  expect_parse_error([&] { load_openb_nodes(dup); }, dup, 3, "duplicate node name 'x0' (first on line 2)");
  auto const big = write("big.csv", "sn,cpu_milli,memory_mib,gpu,model\nx0,1000,1024,65,T4\n");
  expect_parse_error([&] { load_openb_nodes(big); }, big, 2, "column 'gpu': 65 is above the maximum 64");
  auto const pai = write("pai.csv", "m0,CPU,96,512,2\n");
  expect_parse_error([&] { load_pai_machines(pai); }, pai, 1, "gpu_type CPU with 2 GPUs");
  auto const role = write("dlrm.csv",
                          "app_name,role,cpu_request,gpu_request,memory_request,max_instance_per_node,creation_time,"
                          "deletion_time\na,XN,12,1,120.0,8,,\n");
  expect_parse_error([&] { load_dlrm_instances(role); }, role, 2, "'XN' is neither HN nor CN");
  auto const zero = write("itp.csv", "job_id,submission_time,duration,num_gpu\na,1,5,0\n");
  expect_parse_error([&] { load_itp_jobs(zero); }, zero, 2, "column 'num_gpu': 0 is below the minimum 1");
  auto const noname = write("pods.csv", std::string(pod_header) + ",1000,1024,1,1000,,LS,Running,0,1,2\n");
  expect_parse_error([&] { load_openb_pods(noname); }, noname, 2, "column 'name': empty value");
}
