// The Slurm bridge: its reading of Slurm's JSON (fields as squeue/sinfo
// --json of Slurm 22.05 write them) and its decisions, without Slurm.
#include <placer/service/client.hpp>
#include <placer/slurm/bridge.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "../support/invariants.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

std::string node(std::string const& name, std::string const& gres, std::string const& used, int alloc_cpus,
                 std::string const& features, std::string const& state = "idle", std::string const& flags = "",
                 std::string const& partition = "train") {
  return R"({"name":")" + name + R"(","gres":")" + gres + R"(","gres_used":")" + used +
         R"(","cpus":64,"alloc_cpus":)" + std::to_string(alloc_cpus) +
         R"(,"real_memory":512000,"alloc_memory":4096,"features":")" + features + R"(","state":")" + state +
         R"(","state_flags":[)" + flags + R"(],"partitions":[")" + partition + R"("]})";
}

std::string sinfo() {
  return R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:4(IDX:0-2,5)", 4, "a100,rack1") + "," +
         node("n2", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100,rack1") + "," +
         node("n3", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2") + "," +
         node("n4", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2", "idle", R"("DRAIN")") + "]}";
}

std::string job(int id, std::string const& extra, std::string const& reason = "JobHeldUser",
                std::string const& comment = "placer", std::string const& partition = "train") {
  return R"({"job_id":)" + std::to_string(id) + R"(,"job_state":"PENDING","state_reason":")" + reason +
         R"(","comment":")" + comment + R"(","partition":")" + partition + R"(","submit_time":)" +
         std::to_string(1000 + id) + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(SlurmBridge, NodesAndJobsBecomeARound) {
  std::string const squeue =
      R"({"jobs":[)" +
      job(1, R"("node_count":1,"cpus":4,"tres_per_node":"gres:gpu:2","memory_per_node":8192)") + "," +
      job(2, R"("node_count":2,"cpus":16,"tres_per_node":"gres:gpu:h100:8","features":"rack2&h100")") + "," +
      job(3, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:1","features":"a100|h100","memory_per_cpu":2048)") +
      "," + job(4, R"("node_count":1,"tres_per_node":"gres:gpu:1")", "JobHeldUser", "someone else") + "," +
      job(5, R"("node_count":1,"tres_per_node":"gres:gpu:1","features":"[rack1*2]")") + "," +
      job(6, R"("node_count":1,"cpus":8,"tres_per_node":"gres:gpu:3","required_nodes":"n[2-3]")", "None") + "]}";
  slurm::bridge_options opt;
  opt.partition = "train";
  auto const snap = slurm::build_round(squeue, sinfo(), opt);
  auto const& c = snap.round.state;
  ASSERT_EQ(c.nodes.size(), 4U);
  // n1: GPUs 0, 1, 2 and 5 in use; 4 CPUs of 64.
  EXPECT_EQ(c.nodes[0].gpu_free_milli, (std::vector<std::int32_t>{0, 0, 0, 1000, 1000, 0, 1000, 1000}));
  EXPECT_EQ(c.nodes[0].cpu_milli_free, 60000);
  EXPECT_EQ(c.nodes[0].gpu_model, "a100");
  EXPECT_EQ(c.nodes[0].labels, (std::vector<std::string>{"slurm.feature/a100=true", "slurm.feature/rack1=true",
                                                          "slurm.partition/train=true"}));
  EXPECT_FALSE(c.nodes[3].healthy);  // drained
  // Racks are the topology's second level.
  ASSERT_EQ(c.topo.domains.size(), 3U);
  EXPECT_EQ(c.nodes[0].domain, c.nodes[1].domain);
  EXPECT_NE(c.nodes[0].domain, c.nodes[2].domain);
  // Job 6, released and not started, holds 3 GPUs and 8 CPUs on n2 and n3.
  EXPECT_EQ(snap.reserved_jobs, 1);
  EXPECT_EQ(c.nodes[1].gpu_free_milli, (std::vector<std::int32_t>{0, 0, 0, 1000, 1000, 1000, 1000, 1000}));
  EXPECT_EQ(c.nodes[2].cpu_milli_free, 56000);
  // Jobs 1-3 are pending; 4 is someone else's; 5's constraint is skipped.
  ASSERT_EQ(snap.job_ids, (std::vector<std::int64_t>{1, 2, 3}));
  ASSERT_EQ(snap.skipped.size(), 1U);
  EXPECT_EQ(snap.skipped[0].job, 5);
  auto const& p = snap.round.pending;
  EXPECT_EQ(p[0].per_replica.gpus, 2);
  EXPECT_EQ(p[0].per_replica.cpu_milli, 4000);
  EXPECT_EQ(p[0].per_replica.memory_mib, 8192);
  EXPECT_FALSE(p[0].gang);
  EXPECT_EQ(p[1].replicas, 2);
  EXPECT_TRUE(p[1].gang);
  EXPECT_TRUE(p[1].distinct_nodes);
  EXPECT_FALSE(p[0].distinct_nodes);
  EXPECT_EQ(p[1].per_replica.cpu_milli, 8000);
  EXPECT_EQ(p[1].allowed_gpu_models, (std::vector<std::string>{"h100"}));
  EXPECT_EQ(p[1].constraints.node_selector,
            (std::vector<std::string>{"slurm.partition/train=true", "slurm.feature/rack2=true", "slurm.feature/h100=true"}));
  EXPECT_EQ(p[1].topo_mode, topology_mode::preferred);
  EXPECT_EQ(p[2].constraints.required.size(), 2U);  // a100 | h100
  EXPECT_EQ(p[2].per_replica.memory_mib, 2048);
}

// Slurm 23.02 and later write numbers as {"set", "infinite", "number"} and
// states and some lists as arrays of strings. The same cluster and jobs in
// that form read as the same round.
TEST(SlurmBridge, NewerSlurmJsonReadsTheSame) {
  std::string const squeue =
      R"({"jobs":[)" +
      job(1, R"("node_count":1,"cpus":4,"tres_per_node":"gres:gpu:2","memory_per_node":8192,"nice":5)") + "," +
      job(2, R"("node_count":2,"cpus":16,"tres_per_node":"gres:gpu:h100:8","features":"rack2&h100")") + "," +
      job(3, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:1","features":"a100|h100","memory_per_cpu":2048)") +
      "," + job(6, R"("node_count":1,"cpus":8,"tres_per_node":"gres:gpu:3","required_nodes":"n[2-3]")", "None") + "]}";
  auto wrap = [](nlohmann::json& o) {
    for (auto& [k, v] : o.items()) {
      if (v.is_number()) v = {{"set", true}, {"infinite", false}, {"number", v}};
    }
  };
  auto jobs = nlohmann::json::parse(squeue);
  for (auto& j : jobs["jobs"]) {
    wrap(j);
    j["job_state"] = nlohmann::json::array({j["job_state"]});
    std::string tres = j["tres_per_node"];  // "gres:gpu:2" is "gres/gpu:2" from 23.11 (24.11 live)
    j["tres_per_node"] = tres.replace(0, 5, "gres/");
  }
  jobs["jobs"].push_back({{"job_id", {{"set", false}, {"infinite", false}, {"number", 0}}},  // unset: no id, an error
                          {"comment", "placer"},
                          {"partition", "train"},
                          {"job_state", {"PENDING"}}});
  auto nodes = nlohmann::json::parse(sinfo());
  for (auto& n : nodes["nodes"]) {
    wrap(n);
    std::string state = n["state"];
    std::transform(state.begin(), state.end(), state.begin(), [](unsigned char c) { return std::toupper(c); });
    auto words = nlohmann::json::array({state});
    for (auto const& f : n["state_flags"]) words.push_back(f);
    n["state"] = words;
    n.erase("state_flags");
    auto features = nlohmann::json::array();
    std::string const f = n["features"];
    for (std::size_t at = 0; at <= f.size();) {
      auto const comma = std::min(f.find(',', at), f.size());
      features.push_back(f.substr(at, comma - at));
      at = comma + 1;
    }
    n["features"] = features;
  }
  slurm::bridge_options opt;
  opt.partition = "train";
  auto const old_form = slurm::build_round(squeue, sinfo(), opt);
  EXPECT_THROW(slurm::build_round(jobs.dump(), nodes.dump(), opt), slurm::slurm_error);
  jobs["jobs"].erase(jobs["jobs"].size() - 1);
  auto const new_form = slurm::build_round(jobs.dump(), nodes.dump(), opt);
  EXPECT_EQ(new_form.round.state.nodes, old_form.round.state.nodes);
  EXPECT_EQ(new_form.round.state.topo, old_form.round.state.topo);
  EXPECT_EQ(new_form.round.pending, old_form.round.pending);
  EXPECT_EQ(new_form.job_ids, old_form.job_ids);
  EXPECT_EQ(new_form.reserved_jobs, old_form.reserved_jobs);
  EXPECT_FALSE(new_form.round.state.nodes[3].healthy);  // ["IDLE", "DRAIN"]
  EXPECT_EQ(new_form.round.pending[0].priority, -5);
  EXPECT_EQ(new_form.round.pending[0].per_replica.memory_mib, 8192);
  EXPECT_EQ(new_form.round.pending[1].replicas, 2);
  // A GPU request in a form the bridge does not know skips the job (never
  // read as no GPUs, which would over-commit its nodes).
  jobs["jobs"][0]["tres_per_node"] = "gres=gpu:2";
  auto const odd = slurm::build_round(jobs.dump(), nodes.dump(), opt);
  ASSERT_EQ(odd.skipped.size(), 1U);
  EXPECT_EQ(odd.skipped[0].job, 1);
  EXPECT_EQ(odd.round.pending.size(), new_form.round.pending.size() - 1);
}

TEST(SlurmBridge, DecisionsFollowThePlacementsAndSayWhy) {
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")") + "," +
      job(2, R"("node_count":2,"cpus":2,"tres_per_node":"gres:gpu:4","features":"h100")") + "," +
      job(3, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:16")") + "," +
      job(4, R"("node_count":1,"tres_per_job":"gres:gpu:2")") + "]}";
  auto const snap = slurm::build_round(squeue, sinfo(), {});
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  auto const acts = slurm::decide(snap, r);
  std::map<std::int64_t, slurm::action> by;
  for (auto const& a : acts) by[a.job] = a;
  ASSERT_EQ(by.size(), 4U);
  // Job 1 takes a whole free node: n2 or n3 (n1 is partly used, n4 drained).
  ASSERT_EQ(by[1].nodes.size(), 1U);
  EXPECT_TRUE(by[1].nodes[0] == "n2" || by[1].nodes[0] == "n3") << by[1].nodes[0];
  // Job 2: -N 2 on h100; n4 is drained, so n3 is the only node left and
  // the job, which wants a node for each replica, waits and says why.
  EXPECT_TRUE(by[2].nodes.empty());
  EXPECT_NE(by[2].comment.find("placer:"), std::string::npos);
  // Job 3 fits nowhere, and says so in kube-scheduler's words.
  EXPECT_TRUE(by[3].nodes.empty());
  EXPECT_NE(by[3].comment.find("0/4 nodes are available"), std::string::npos) << by[3].comment;
  EXPECT_NE(by[4].comment.find("skipped: --gpus"), std::string::npos) << by[4].comment;
  for (auto const& a : acts) EXPECT_LE(a.comment.size(), 240U);
  // Held jobs whose AdminComment already says it get no update.
  auto again = snap;
  for (auto const& a : acts) {
    if (a.nodes.empty()) again.comments[a.job] = a.comment;
  }
  auto const quiet = slurm::decide(again, r);
  ASSERT_EQ(quiet.size(), 1U);
  EXPECT_EQ(quiet[0].job, 1);
  // apply(): the update before the release, and failures reported, not thrown.
  std::vector<std::string> ran;
  auto const failed = slurm::apply(acts, [&](std::vector<std::string> const& argv) -> std::string {
    std::string line;
    for (auto const& w : argv) line += (line.empty() ? "" : " ") + w;
    ran.push_back(line);
    if (line.find("JobId=3") != std::string::npos) throw slurm::slurm_error("scontrol: exit 1: no such job");
    return {};
  });
  ASSERT_EQ(failed.size(), 1U);
  EXPECT_EQ(failed[0].job, 3);
  auto const update = std::find_if(ran.begin(), ran.end(), [](auto const& l) { return l.find("JobId=1 ReqNodeList=") != std::string::npos; });
  ASSERT_NE(update, ran.end());
  EXPECT_EQ(ran.back(), "scontrol release 1");  // after every update, one release for the placed jobs
  // A release that fails is retried one job at a time, and only the job
  // that fails is reported.
  std::vector<slurm::action> two{{7, {"n2"}, "placer: placed on n2"}, {8, {"n3"}, "placer: placed on n3"}};
  ran.clear();
  auto const one_failed = slurm::apply(two, [&](std::vector<std::string> const& argv) -> std::string {
    std::string line;
    for (auto const& w : argv) line += (line.empty() ? "" : " ") + w;
    ran.push_back(line);
    if (line == "scontrol release 7,8" || line == "scontrol release 8") throw slurm::slurm_error("job 8 gone");
    return {};
  });
  ASSERT_EQ(one_failed.size(), 1U);
  EXPECT_EQ(one_failed[0].job, 8);
  EXPECT_EQ(ran.size(), 5U);  // two updates, the batch, then 7 and 8
}

// The nodes: sinfo --json's list up to 23.02; from 23.11 sinfo groups them
// and scontrol show nodes --json has the list (asked directly once known).
TEST(SlurmBridge, NodesAreReadFromWhicheverToolListsThem) {
  std::vector<std::string> asked;
  bool grouped_sinfo = false;
  auto const run = [&](std::vector<std::string> const& argv) -> std::string {
    asked.push_back(argv[0] + (argv.size() > 1 ? " " + argv[1] : ""));
    if (argv[0] == "sinfo") return grouped_sinfo ? R"({"sinfo":[{"nodes":{"nodes":["n1"]}}]})" : sinfo();
    return R"({"nodes":[{"name":"n1"}]})";
  };
  EXPECT_EQ(slurm::read_nodes(run), sinfo());
  EXPECT_EQ(asked, (std::vector<std::string>{"sinfo --json"}));
  grouped_sinfo = true;
  asked.clear();
  bool grouped = false;
  EXPECT_EQ(slurm::read_nodes(run, &grouped), R"({"nodes":[{"name":"n1"}]})");
  EXPECT_TRUE(grouped);
  EXPECT_EQ(slurm::read_nodes(run, &grouped), R"({"nodes":[{"name":"n1"}]})");
  EXPECT_EQ(asked, (std::vector<std::string>{"sinfo --json", "scontrol show", "scontrol show"}));
}

/// Records the changes apply() asks for, failing the ones it is told to.
class recorded_changes final : public slurm::job_changes {
 public:
  std::vector<std::string> log;
  std::set<std::int64_t> fail_update, fail_release;
  void update(std::int64_t job, std::string const& nodes, std::string const& comment) override {
    log.push_back("update " + std::to_string(job) + " [" + nodes + "] " + comment);
    if (fail_update.count(job) != 0) throw slurm::slurm_error("no such job");
  }
  void requeue_hold(std::int64_t job) override { log.push_back("requeuehold " + std::to_string(job)); }
  std::vector<slurm::skipped_job> release(std::vector<std::int64_t> const& jobs) override {
    std::string ids;
    std::vector<slurm::skipped_job> failed;
    for (auto j : jobs) {
      ids += " " + std::to_string(j);
      if (fail_release.count(j) != 0) failed.push_back({j, "gone"});
    }
    log.push_back("release" + ids);
    return failed;
  }
  [[nodiscard]] char const* name() const override { return "recorded"; }
};

// The same apply() drives scontrol and libslurm (job_changes): evictions
// first, then every placed job's nodes and every held job's comment, then
// one release of the placed jobs whose update went through; what fails is
// reported per job and the rest goes on.
TEST(SlurmBridge, ChangesGoInOneOrderWhicheverWayTheyAreMade) {
  std::vector<slurm::action> acts{{5, {}, "placer: waits: Insufficient nvidia.com/gpu"},
                                  {6, {"n1", "n2"}, "placer: placed on n1,n2"},
                                  {9, {}, "placer: evicted (priority); requeued, held", true},
                                  {7, {"n3"}, "placer: placed on n3"},
                                  {8, {"n4"}, "placer: placed on n4"}};
  recorded_changes rec;
  rec.fail_update = {7};
  rec.fail_release = {8};
  auto const failed = slurm::apply(acts, rec);
  EXPECT_EQ(rec.log, (std::vector<std::string>{"update 9 [] placer: evicted (priority); requeued, held",
                                               "requeuehold 9", "update 5 [] placer: waits: Insufficient nvidia.com/gpu",
                                               "update 6 [n1,n2] placer: placed on n1,n2", "update 7 [n3] placer: placed on n3",
                                               "update 8 [n4] placer: placed on n4", "release 6 8"}));
  ASSERT_EQ(failed.size(), 2U);
  EXPECT_EQ(failed[0].job, 7);
  EXPECT_EQ(failed[1].job, 8);
}

// libslurm exits the process when it finds no configuration; the bridge
// looks first and says why it cannot use it (`--slurm-api auto` then
// falls back to scontrol).
TEST(SlurmBridge, LibslurmWithoutAConfigurationIsAnErrorNotAnExit) {
  ::setenv("SLURM_CONF", "/nonexistent/placer-test/slurm.conf", 1);
  std::string why;
  EXPECT_FALSE(slurm::libslurm_usable(&why));
  EXPECT_FALSE(why.empty());
  EXPECT_THROW((void)slurm::make_libslurm_changes(), slurm::slurm_error);
  ::unsetenv("SLURM_CONF");
}

// -N 2 asks for two nodes: the solver gives each replica a node of its own
// (job::distinct_nodes). Two 2-GPU replicas would both fit in n1's four
// free GPUs, the best packing, which Slurm cannot run as -N 2; they go on n1
// and n2 and the job is released.
TEST(SlurmBridge, MultiNodeJobsGetDistinctNodes) {
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":2,"cpus":2,"tres_per_node":"gres:gpu:2","features":"a100")") + "]}";
  auto const snap = slurm::build_round(squeue, sinfo(), {});
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  auto const acts = slurm::decide(snap, r);
  ASSERT_EQ(acts.size(), 1U);
  EXPECT_EQ(acts[0].nodes, (std::vector<std::string>{"n1", "n2"})) << acts[0].comment;
  auto one_node = snap;
  one_node.round.pending[0].distinct_nodes = false;  // what the bridge sent before: both on n1, held
  auto const packed = s.solve(one_node.round);
  ASSERT_EQ(packed.placements.size(), 1U);
  EXPECT_EQ(packed.placements[0].replicas[0].node, packed.placements[0].replicas[1].node);
  auto const held = slurm::decide(one_node, packed);
  ASSERT_EQ(held.size(), 1U);
  EXPECT_TRUE(held[0].nodes.empty());
}

// --preempt: the bridge's running jobs are running work (priority -nice,
// preemptible when Slurm may requeue them, GPUs from gres_detail). An 8-GPU
// a100 job at nice 0 fits only where a nice-100 job runs: it is evicted
// (requeued and held, before anything is released) and the new job takes
// its node. Without the flag the new job waits and nothing is requeued.
TEST(SlurmBridge, EvictionsAreRequeuesUnderAFlag) {
  std::string const nodes = R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:4(IDX:0-2,5)", 4, "a100,rack1") + "," +
                            node("n2", "gpu:a100:8", "gpu:a100:8(IDX:0-7)", 4, "a100,rack1") + "," +
                            node("n3", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2") + "]}";
  std::string const running =
      R"({"job_id":10,"job_state":"RUNNING","state_reason":"None","comment":"placer","partition":"train",)"
      R"("nice":100,"requeue":true,"cpus":4,"node_count":1,"nodes":"n2","tres_per_node":"gres:gpu:8",)"
      R"x("gres_detail":["gpu:a100:8(IDX:0-7)"],"start_time":900,)x"
      R"("job_resources":{"allocated_nodes":[{"nodename":"n2","memory_allocated":4096}]}})";
  std::string const squeue = R"({"jobs":[)" + running + "," +
                             job(11, R"("node_count":1,"cpus":2,"tres_per_node":"gres:gpu:8","features":"a100")") + "]}";
  slurm::bridge_options opt;
  opt.preempt = true;
  auto const snap = slurm::build_round(squeue, nodes, opt);
  ASSERT_EQ(snap.round.running.size(), 1U) << (snap.warnings.empty() ? "" : snap.warnings[0]);
  auto const& rj = snap.round.running[0];
  EXPECT_EQ(rj.name, "slurm-10");
  EXPECT_EQ(rj.priority, -100);
  EXPECT_TRUE(rj.preemptible);
  ASSERT_EQ(rj.replicas.size(), 1U);
  EXPECT_EQ(rj.replicas[0].node, 1);
  EXPECT_EQ(rj.replicas[0].gpus, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(rj.per_replica.cpu_milli, 4000);
  EXPECT_EQ(rj.per_replica.memory_mib, 4096);
  EXPECT_TRUE(snap.round.pol.queue.preemption);
  EXPECT_EQ(snap.round.pol.queue.preempt_max_lost_s, -1);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  auto const acts = slurm::decide(snap, r);
  ASSERT_EQ(acts.size(), 2U);
  EXPECT_EQ(acts[0].job, 10);
  EXPECT_TRUE(acts[0].requeue);
  EXPECT_NE(acts[0].comment.find("for job 11"), std::string::npos) << acts[0].comment;
  EXPECT_EQ(acts[1].job, 11);
  EXPECT_EQ(acts[1].nodes, (std::vector<std::string>{"n2"}));
  std::vector<std::string> ran;
  auto const failed = slurm::apply(acts, [&](std::vector<std::string> const& argv) -> std::string {
    std::string line;
    for (auto const& w : argv) line += (line.empty() ? "" : " ") + w;
    ran.push_back(line);
    return {};
  });
  EXPECT_TRUE(failed.empty());
  ASSERT_EQ(ran.size(), 4U);
  EXPECT_EQ(ran[1], "scontrol requeuehold 10");
  EXPECT_EQ(ran[3], "scontrol release 11");
  // Without --preempt: the running job is only the nodes' usage.
  auto const plain = slurm::build_round(squeue, nodes, {});
  EXPECT_TRUE(plain.round.running.empty());
  auto const waits = slurm::decide(plain, s.solve(plain.round));
  ASSERT_EQ(waits.size(), 1U);
  EXPECT_FALSE(waits[0].requeue);
  EXPECT_TRUE(waits[0].nodes.empty());
  // A job Slurm may not requeue is never evicted.
  std::string no_requeue = running;
  no_requeue.replace(no_requeue.find(R"("requeue":true)"), 14, R"("requeue":false)");
  auto const kept = slurm::build_round(R"({"jobs":[)" + no_requeue + "," + squeue.substr(squeue.find(running) + running.size() + 1),
                                       nodes, opt);
  ASSERT_EQ(kept.round.running.size(), 1U);
  auto const stays = slurm::decide(kept, s.solve(kept.round));
  for (auto const& a : stays) EXPECT_FALSE(a.requeue);
}

// Slurm runs a job only on nodes of its partition: a node listed under two
// partitions carries both, and a job goes only where its partition is.
// The bridge sends its rounds after the first as deltas (the nodes that
// changed, the jobs that left and arrived; the client keeps the caller's
// job order, so the reply indexes the snapshot's jobs): every cycle decides
// what the same round solved in full on its own decides.
TEST(SlurmBridge, RoundsSentAsDeltasDecideAsFullRoundsDo) {
  testing_support::running_server srv;
  client_options opt;
  opt.endpoint = srv.endpoint();
  opt.timeout_ms = 5000;
  client svc(opt);
  std::uint64_t epoch = 0;
  auto by_job = [](std::vector<slurm::action> const& acts) {
    std::map<std::int64_t, std::pair<std::vector<std::string>, std::string>> m;
    for (auto const& a : acts) m[a.job] = {a.nodes, a.comment};
    return m;
  };
  std::string const busy_n2 = R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:4(IDX:0-2,5)", 4, "a100,rack1") +
                              "," + node("n2", "gpu:a100:8", "gpu:a100:8(IDX:0-7)", 8, "a100,rack1") + "," +
                              node("n3", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2") + "," +
                              node("n4", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2", "idle", R"("DRAIN")") +
                              "]}";
  std::string const gpus = R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:)";
  std::vector<std::pair<std::string, std::string>> const cycles = {
      {R"({"jobs":[)" + job(1, gpus + R"(8")") + "," + job(5, gpus + R"(1")") + "," +
           job(6, gpus + R"(2","features":"h100")") + "," + job(7, gpus + R"(16")") + "]}",
       sinfo()},
      // Job 1 started on n2; 8 arrived; 5 and 6 were placed but wait to start.
      {R"({"jobs":[)" + job(5, gpus + R"(1")") + "," + job(6, gpus + R"(2","features":"h100")") + "," +
           job(7, gpus + R"(16")") + "," + job(8, gpus + R"(4")") + "]}",
       busy_n2},
      // 5 left, 9 arrived, and 6 now asks for one GPU (a job whose fields
      // changed leaves and arrives again in the job delta).
      {R"({"jobs":[)" + job(6, gpus + R"(1","features":"h100")") + "," + job(7, gpus + R"(16")") + "," +
           job(8, gpus + R"(4")") + "," + job(9, gpus + R"(3")") + "]}",
       busy_n2},
  };
  int placed = 0;
  for (auto const& [squeue, nodes] : cycles) {
    auto snap = slurm::build_round(squeue, nodes, {});
    solver s(kernels::make_backend(kernels::backend_kind::cpu));
    auto const full = by_job(slurm::decide(snap, s.solve(snap.round)));
    snap.round.state.epoch = ++epoch;
    auto reply = svc.solve_incremental(snap.round);
    ASSERT_EQ(reply.code, wire::ErrorCode::Ok) << reply.message;
    bool const delta = std::any_of(reply.result.timing.begin(), reply.result.timing.end(),
                                   [](auto const& t) { return t.stage == "apply_delta"; });
    EXPECT_EQ(delta, epoch > 1) << "cycle " << epoch;  // the first in full, then deltas
    auto const inc = by_job(slurm::decide(snap, reply.result));
    EXPECT_EQ(inc, full) << "cycle " << epoch;
    for (auto const& [id, what] : inc) placed += what.first.empty() ? 0 : 1;
  }
  EXPECT_GE(placed, 5);             // the cycles do place jobs, not only hold them
  EXPECT_EQ(svc.resyncs(), 0U);
}

TEST(SlurmBridge, JobsStayInTheirPartitions) {
  std::string const info =
      R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100", "idle", "", "train") + "," +
      node("n2", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100", "idle", "", "infer") + "," +
      node("n3", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100", "idle", "", "train") + "," +
      node("n3", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100", "idle", "", "infer") + "]}";
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")", "JobHeldUser", "placer", "infer") +
      "," + job(2, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")", "JobHeldUser", "placer", "infer") + "," +
      job(3, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")", "JobHeldUser", "placer", "infer") + "," +
      job(4, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:1")", "JobHeldUser", "placer", "train,infer") + "," +
      job(5, R"("node_count":1,"tres_per_node":"gres:gpu:1","features":"a|b")", "JobHeldUser", "placer", "train,infer") +
      "]}";
  auto const snap = slurm::build_round(squeue, info, {});
  auto const& c = snap.round.state;
  ASSERT_EQ(c.nodes.size(), 3U);
  EXPECT_EQ(c.nodes[2].labels, (std::vector<std::string>{"slurm.feature/a100=true", "slurm.partition/train=true",
                                                          "slurm.partition/infer=true"}));
  ASSERT_EQ(snap.job_ids, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(snap.round.pending[3].constraints.required.size(), 2U);  // train or infer
  ASSERT_EQ(snap.skipped.size(), 1U);  // two partitions and a|b
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  std::map<std::int64_t, slurm::action> by;
  for (auto const& a : slurm::decide(snap, r)) by[a.job] = a;
  // Three whole-node infer jobs, two infer nodes: n2 and n3 run two, the
  // third waits although n1 (train) is free.
  std::set<std::string> infer_nodes;
  int waiting = 0;
  for (std::int64_t id : {1, 2, 3}) {
    if (by[id].nodes.empty()) {
      ++waiting;
      continue;
    }
    infer_nodes.insert(by[id].nodes.begin(), by[id].nodes.end());
  }
  EXPECT_EQ(waiting, 1);
  EXPECT_EQ(infer_nodes, (std::set<std::string>{"n2", "n3"}));
  ASSERT_EQ(by[4].nodes.size(), 1U);
  EXPECT_EQ(by[4].nodes[0], "n1");  // the only room left, in one of its partitions
}

TEST(SlurmBridge, BadOutputIsAClearError) {
  EXPECT_THROW(slurm::build_round("not json", sinfo(), {}), slurm::slurm_error);
  EXPECT_THROW(slurm::build_round(R"({"jobs":[]})", R"({"nodes":{}})", {}), slurm::slurm_error);
  EXPECT_THROW(slurm::build_round(R"({"jobs":[]})", R"({"nodes":[{"gres":"gpu:8"}]})", {}), slurm::slurm_error);
  // A node whose GPUs cannot be read is left out, saying so; the others stay.
  auto const snap = slurm::build_round(
      R"({"jobs":[]})",
      R"({"nodes":[)" + node("bad", "gpu:a100:x", "gpu:a100:0(IDX:N/A)", 0, "a100") + "," +
          node("good", "gpu:a100:8", "gpu:a100:2(IDX:0-z)", 0, "a100") + "," +
          node("fine", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100") + "]}",
      {});
  ASSERT_EQ(snap.round.state.nodes.size(), 1U);
  EXPECT_EQ(snap.round.state.nodes[0].name, "fine");
  ASSERT_EQ(snap.warnings.size(), 2U);
  EXPECT_NE(snap.warnings[0].find("'x' is not a number"), std::string::npos) << snap.warnings[0];
  // A command that fails, or is not there, says so.
  EXPECT_THROW(slurm::run_command({"false"}), slurm::slurm_error);
  EXPECT_THROW(slurm::run_command({"/no/such/command"}), slurm::slurm_error);
  EXPECT_EQ(slurm::run_command({"echo", "a b"}), "a b\n");
  EXPECT_THROW(slurm::run_command({"sleep", "5"}, 200), slurm::slurm_error);
}

}  // namespace
}  // namespace placer
