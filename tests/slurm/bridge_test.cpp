// The Slurm bridge: its reading of Slurm's JSON (fields as squeue/sinfo
// --json of Slurm 22.05 write them) and its decisions, without Slurm.
#include <placer/service/client.hpp>
#include <placer/slurm/bridge.hpp>
#include <placer/solver/solver.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <limits>
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
  EXPECT_EQ(c.nodes[0].labels, (std::vector<std::string>{"slurm.node/name=n1", "slurm.feature/a100=true",
                                                          "slurm.feature/rack1=true", "slurm.partition/train=true"}));
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
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 2, 3}));
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
      job(4, R"("node_count":2,"tres_per_job":"gres:gpu:3")") + "]}";
  auto const snap = slurm::build_round(squeue, sinfo(), {});
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  auto const acts = slurm::decide(snap, r);
  std::map<slurm::job_ref, slurm::action> by;
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
  std::set<slurm::job_ref> fail_update, fail_release;
  void update(slurm::job_ref const& job, std::string const& nodes, std::string const& comment) override {
    log.push_back("update " + job.str() + " [" + nodes + "] " + comment);
    if (fail_update.count(job) != 0) throw slurm::slurm_error("no such job");
  }
  void requeue_hold(slurm::job_ref const& job) override { log.push_back("requeuehold " + job.str()); }
  std::vector<slurm::skipped_job> release(std::vector<slurm::job_ref> const& jobs) override {
    std::string ids;
    std::vector<slurm::skipped_job> failed;
    for (auto const& j : jobs) {
      ids += " " + j.str();
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

// Failing open (--fallback-after): every held job of the snapshot, those
// Placer could place and those it skipped, goes to Slurm's own scheduler:
// no nodes, a comment saying why, one release for them all.
TEST(SlurmBridge, FailingOpenReleasesEveryHeldJobWithoutNodesSayingWhy) {
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")") + "," +
      job(3, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:16")") + "," +
      job(4, R"("node_count":2,"tres_per_job":"gres:gpu:3")") + "]}";
  auto const snap = slurm::build_round(squeue, sinfo(), {});
  ASSERT_EQ(snap.job_ids.size(), 2U);
  ASSERT_EQ(snap.skipped.size(), 1U);
  auto const acts = slurm::release_to_slurm(snap, "no Placer answered for 12 s (--fallback-after 10)");
  ASSERT_EQ(acts.size(), 3U);
  for (auto const& a : acts) {
    EXPECT_TRUE(a.to_slurm);
    EXPECT_TRUE(a.nodes.empty());
    EXPECT_FALSE(a.requeue);
    EXPECT_EQ(a.comment, "placer: released to Slurm's scheduler: no Placer answered for 12 s (--fallback-after 10)");
  }
  recorded_changes rec;
  rec.fail_update = {3};
  auto const failed = slurm::apply(acts, rec);
  std::string const c = "placer: released to Slurm's scheduler: no Placer answered for 12 s (--fallback-after 10)";
  EXPECT_EQ(rec.log, (std::vector<std::string>{"update 1 [] " + c, "update 3 [] " + c, "update 4 [] " + c, "release 1 4"}));
  ASSERT_EQ(failed.size(), 1U);
  EXPECT_EQ(failed[0].job, 3) << "a job whose comment could not be set stays held";
  EXPECT_TRUE(slurm::release_to_slurm(slurm::snapshot{}, "x").empty());
}

// A job array's tasks share one pending record in squeue until Slurm splits
// one off. Each task is a job of the round, named "A_T" in every change
// (a change to "A" would reach every task, running ones too): as many as
// the array's throttle lets start and the nodes could hold, and one more
// that says why the rest wait; of the tasks still in the record only the
// first unplaced one is told (telling it splits it off); failing open
// releases the record whole.
TEST(SlurmBridge, AnArraysTasksAreJobsAsManyAsItsThrottleAndTheNodesAllow) {
  std::string const eight = R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:8")";
  std::string const one = R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:1")";
  auto task = [](int id, int array, int t, std::string const& state, std::string const& reason, std::string const& more) {
    return R"({"job_id":)" + std::to_string(id) + R"(,"array_job_id":)" + std::to_string(array) +
           R"(,"array_task_id":)" + std::to_string(t) + R"(,"array_max_tasks":3,"job_state":")" + state +
           R"(","state_reason":")" + reason + R"(","comment":"placer","partition":"train","submit_time":1020,)" + more +
           "}";
  };
  std::string const squeue =
      R"({"jobs":[)" +
      // Array 10, 100 whole-node tasks: n2 and n3 have 8 GPUs free (n1 4, n4 drained).
      job(10, R"("array_job_id":10,"array_task_id":null,"array_task_string":"0-99",)" + eight, "JobHeldUser",
          "placer") + "," +
      job(15, one) + "," +
      // Array 20, at most 3 at once: task 0 runs, 1 is released, 2 is held on its own; 3-5 in the record.
      job(20, R"("array_job_id":20,"array_task_id":null,"array_task_string":"3-5%3","array_max_tasks":3,)" + one) + "," +
      task(21, 20, 0, "RUNNING", "None", one) + "," + task(22, 20, 1, "PENDING", "None", one + R"(,"required_nodes":"n1")") + "," +
      task(23, 20, 2, "PENDING", "JobHeldUser", one) + "," +
      // Array 30, no GPUs: every task of its string fits; array 40's string is not one.
      job(30, R"("array_job_id":30,"array_task_string":"0-15:4,17",)" + std::string(R"("node_count":1,"cpus":1)")) +
      "," + job(40, R"("array_job_id":40,"array_task_string":"5-2",)" + one) + "]}";
  auto const snap = slurm::build_round(squeue, sinfo(), {});
  using ref = slurm::job_ref;
  ref const t0{10, 0}, t1{10, 1}, t2{10, 2}, own{20, 2};
  ASSERT_EQ(snap.job_ids, (std::vector<ref>{{10, 0}, {10, 1}, {10, 2}, 15, {20, 2}, {30, 0}, {30, 4}, {30, 8}, {30, 12},
                                            {30, 17}}));
  EXPECT_EQ(snap.round.pending[0].name, "slurm-10_0");
  EXPECT_EQ(snap.round.pending[4].name, "slurm-20_2");
  EXPECT_EQ(snap.round.pending[0].per_replica.gpus, 8);
  EXPECT_EQ(snap.unsplit.count(t1), 1U);
  EXPECT_EQ(snap.unsplit.count(own), 0U) << "a task in a record of its own";
  EXPECT_EQ(snap.reserved_jobs, 1);
  ASSERT_EQ(snap.skipped.size(), 1U);
  EXPECT_EQ(snap.skipped[0].job, 40);
  EXPECT_NE(snap.skipped[0].why.find("'5-2' is not a range"), std::string::npos) << snap.skipped[0].why;

  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  auto const acts = slurm::decide(snap, r);
  std::map<ref, slurm::action> by;
  for (auto const& a : acts) by[a.job] = a;
  ASSERT_EQ(by.count(t0) + by.count(t1), 2U);
  std::set<std::string> const whole{by[t0].nodes.at(0), by[t1].nodes.at(0)};
  EXPECT_EQ(whole, (std::set<std::string>{"n2", "n3"})) << "two tasks at once, a node each";
  ASSERT_EQ(by.count(t2), 1U);
  EXPECT_TRUE(by[t2].nodes.empty());
  EXPECT_NE(by[t2].comment.find("Insufficient nvidia.com/gpu"), std::string::npos) << by[t2].comment;
  EXPECT_FALSE(by[own].nodes.empty());
  EXPECT_EQ(by.count(10), 0U) << "nothing changes the whole array";

  // Through scontrol: every change names the task.
  std::vector<std::string> ran;
  auto const failed = slurm::apply(acts, [&](std::vector<std::string> const& argv) {
    std::string line;
    for (auto const& w : argv) line += (line.empty() ? "" : " ") + w;
    ran.push_back(line);
    return std::string();
  });
  EXPECT_TRUE(failed.empty());
  ASSERT_FALSE(ran.empty());
  std::string const n = by[t0].nodes.at(0);
  EXPECT_NE(std::find(ran.begin(), ran.end(), "scontrol update JobId=10_0 ReqNodeList=" + n + " AdminComment=placer: placed on " + n),
            ran.end());
  EXPECT_EQ(ran.back().rfind("scontrol release ", 0), 0U);
  EXPECT_NE(ran.back().find("10_0,"), std::string::npos) << ran.back();
  EXPECT_NE(ran.back().find("20_2"), std::string::npos) << ran.back();

  // Unplaced, the record's tasks: only the first is told why.
  round_result none;
  for (std::int32_t k = 0; k < 3; ++k) none.unplaced_jobs.emplace_back(k, unplaced_reason::insufficient_capacity, "full");
  std::vector<ref> told;
  for (auto const& a : slurm::decide(snap, none)) told.push_back(a.job);
  EXPECT_EQ(told, (std::vector<ref>{t0, 40}));

  // Failing open: the record goes whole, once; the task of its own alone.
  std::vector<ref> released;
  for (auto const& a : slurm::release_to_slurm(snap, "no Placer")) released.push_back(a.job);
  EXPECT_EQ(released, (std::vector<ref>{10, 15, own, 30, 40}));

  // The newer JSON (numbers as {"set", "number"}, no task as unset) reads the same.
  auto jobs = nlohmann::json::parse(squeue);
  for (auto& j : jobs["jobs"]) {
    for (auto& [k, v] : j.items()) {
      if (v.is_number()) v = {{"set", true}, {"infinite", false}, {"number", v}};
      if (v.is_null()) v = {{"set", false}, {"infinite", false}, {"number", 0}};
    }
  }
  EXPECT_EQ(slurm::build_round(jobs.dump(), sinfo(), {}).job_ids, snap.job_ids);

  // The throttle reached: no task of array 20 goes in.
  std::string full = squeue;
  std::string const held = task(23, 20, 2, "PENDING", "JobHeldUser", one);
  full.replace(full.find(held), held.size(), task(23, 20, 2, "PENDING", "None", one));
  auto const throttled = slurm::build_round(full, sinfo(), {});
  for (auto const& id : throttled.job_ids) EXPECT_NE(id.id, 20) << id;
}

// What a job asks of a node is what Slurm will give it, so that no job is
// released onto a node where Slurm cannot start it: GPUs per task times the
// tasks a node runs, and --gpus (per job) an equal share a node; with no
// memory per node or per CPU (--mem=0, or no
// default), the memory Slurm counts for it, and --mem-per-gpu's for its
// GPUs; --exclusive, a node with
// nothing allocated, all of it, and no other placement of the round beside
// it. Before, these read as no GPUs, no memory and a shared node: all
// three were released onto a busy node and waited there while others
// stood idle (a live 22.05 cluster, 2026-12-07).
TEST(SlurmBridge, WhatAJobAsksOfANodeIsWhatSlurmWillGiveIt) {
  auto idle = [](std::string n) {
    n.replace(n.find(R"("alloc_memory":4096)"), 19, R"("alloc_memory":0)");
    return n;
  };
  std::string const nodes = R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:4(IDX:0-3)", 4, "a100") + "," +
                            idle(node("n2", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100")) + "," +
                            idle(node("n3", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100")) + "," +
                            idle(node("n4", "gpu:a100:4", "gpu:a100:0(IDX:N/A)", 0, "a100", "idle", "", "infer")) + "]}";
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":2,"tasks":2,"tres_per_task":"gres:gpu:4")") + "," +
      job(2, R"("node_count":2,"cpus":4,"tasks":4,"tasks_per_node":2,"tres_per_task":"gres/gpu=1")") + "," +
      job(3, R"("node_count":1,"cpus":1,"memory_per_node":null,"tres_req_str":"cpu=1,mem=500G,node=1,billing=1")") + "," +
      job(8, R"("node_count":1,"cpus":1,"memory_per_cpu":4096,"memory_per_tres":"gres:gpu:102400","tres_per_node":"gres:gpu:2")") + "," +
      job(4, R"("node_count":1,"cpus":1,"shared":"none","tres_per_node":"gres:gpu:1")") + "," +
      job(5, R"("node_count":1,"cpus":1,"exclusive":["true"],"tres_per_node":"gres:gpu:1")") + "," +
      job(6, R"("node_count":1,"cpus":1,"tres_per_socket":"gres:gpu:1")") + "," +
      // Released onto n3 and not started yet, --exclusive: n3 is its own.
      job(7, R"("node_count":1,"cpus":1,"shared":"none","required_nodes":"n3")", "None") + "," +
      job(9, R"("node_count":1,"cpus":1,"tres_per_job":"gres:gpu:2")") + "," +
      job(10, R"("node_count":2,"cpus":1,"tres_per_job":"gres/gpu=8")") + "]}";
  auto const snap = slurm::build_round(squeue, nodes, {});
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 2, 3, 4, 5, 8, 9, 10}));
  auto const& p = snap.round.pending;
  EXPECT_EQ(p[5].per_replica.memory_mib, 204800) << "--mem-per-gpu=100G for 2 GPUs, not the default per CPU";
  EXPECT_EQ(p[6].per_replica.gpus, 2) << "--gpus=2 on one node";
  EXPECT_EQ(p[7].per_replica.gpus, 4) << "--gpus=8 over -N 2";
  EXPECT_EQ(p[0].per_replica.gpus, 8) << "4 GPUs a task, 2 tasks";
  EXPECT_EQ(p[1].per_replica.gpus, 2) << "1 GPU a task, 2 tasks a node";
  EXPECT_EQ(p[2].per_replica.memory_mib, 512000) << "--mem=0: what Slurm counts";
  for (int k : {3, 4}) {
    EXPECT_EQ(snap.whole.count(k + 1), 1U);
    EXPECT_EQ(p[k].per_replica.gpus, 8) << "all of the smallest idle node of its partition (not n4, infer)";
    EXPECT_EQ(p[k].per_replica.cpu_milli, 64000);
    EXPECT_EQ(p[k].per_replica.memory_mib, 512000);
    EXPECT_NE(std::find(p[k].constraints.node_selector.begin(), p[k].constraints.node_selector.end(), "slurm.node/idle=true"),
              p[k].constraints.node_selector.end());
  }
  ASSERT_EQ(snap.skipped.size(), 1U);
  EXPECT_EQ(snap.skipped[0].job, 6);
  std::vector<std::string> idle_nodes;
  for (auto const& n : snap.round.state.nodes) {
    if (std::find(n.labels.begin(), n.labels.end(), "slurm.node/idle=true") != n.labels.end()) idle_nodes.push_back(n.name);
  }
  EXPECT_EQ(idle_nodes, (std::vector<std::string>{"n2", "n4"})) << "n1 is in use, n3 is job 7's";
  auto const& n3 = snap.round.state.nodes[2];
  EXPECT_EQ(n3.cpu_milli_free, 0);
  EXPECT_EQ(n3.memory_mib_free, 0);
  EXPECT_EQ(std::count(n3.gpu_free_milli.begin(), n3.gpu_free_milli.end(), 0), 8);

  // Solved: job 1 takes n2, the one node with 8 GPUs free; the --exclusive
  // jobs wait for an empty node, and say so without Placer's "never".
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  std::map<slurm::job_ref, slurm::action> by;
  for (auto const& a : slurm::decide(snap, r)) by[a.job] = a;
  EXPECT_EQ(by[1].nodes, (std::vector<std::string>{"n2"}));
  for (int k : {4, 5}) {
    EXPECT_TRUE(by[k].nodes.empty());
    EXPECT_NE(by[k].comment.find("--exclusive: it waits for nodes with nothing allocated"), std::string::npos)
        << by[k].comment;
    EXPECT_EQ(by[k].comment.find("never"), std::string::npos) << by[k].comment;
  }

  // A placement beside an --exclusive one on its node waits a cycle, and so
  // does a second --exclusive one there; elsewhere all goes on.
  round_result beside;
  auto on = [&](std::int32_t job, std::int32_t node) { beside.placements.push_back({job, {{node, {}}}}); };
  on(3, 1);  // job 4 on n2
  on(2, 1);  // job 3 on n2
  on(4, 1);  // job 5 on n2
  on(0, 0);  // job 1 on n1
  by.clear();
  for (auto const& a : slurm::decide(snap, beside)) by[a.job] = a;
  EXPECT_EQ(by[4].nodes, (std::vector<std::string>{"n2"}));
  EXPECT_EQ(by[1].nodes, (std::vector<std::string>{"n1"}));
  for (int k : {3, 5}) {
    EXPECT_TRUE(by[k].nodes.empty());
    EXPECT_EQ(by[k].comment, "placer: waits: n2 goes whole to job 4 (--exclusive) this cycle");
  }
}

// Where and when Slurm would start a job, the bridge keeps to: never on a
// node of its -x, with the CPUs --cpus-per-gpu gives its GPUs, and not
// before its dependency is met or its --begin has come (released, it would
// hold its nodes while Slurm kept it pending); a heterogeneous job, or one
// of a reservation, is not placed at all, and a reservation's nodes take
// none of the bridge's jobs. Before, none of these was read (a live 22.05
// cluster, 2026-12-07).
TEST(SlurmBridge, JobsKeepOffExcludedNodesAndWaitForTheirDependencyAndBegin) {
  auto const later = std::to_string(std::time(nullptr) + 3600);
  std::string const squeue =
      R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":1,"excluded_nodes":"n[1-2]","tres_per_node":"gres:gpu:1")") +
      "," +
      job(2, R"("node_count":1,"cpus":1,"excluded_nodes":"n3","tres_per_node":"gres:gpu:1")", "JobHeldUser", "placer",
          "train,infer") +
      "," + job(3, R"("node_count":1,"cpus":1,"cpus_per_tres":"gres:gpu:16","tres_per_node":"gres:gpu:2")") + "," +
      job(4, R"x("node_count":1,"cpus":1,"dependency":"afterok:40(unfulfilled)")x") + "," +
      job(5, R"x("node_count":1,"cpus":1,"dependency":"afterok:41(failed)")x") + "," +
      job(6, R"("node_count":1,"cpus":1,"eligible_time":)" + later) + "," +
      job(7, R"("node_count":1,"cpus":1,"dependency":"","eligible_time":1000)") + "," +
      job(8, R"("node_count":1,"cpus":1,"excluded_nodes":"n[1-")") + "," +
      job(9, R"("node_count":1,"cpus":1,"het_job_id":9,"het_job_id_set":"9-10","het_job_offset":0)") + "," +
      job(10, R"("node_count":1,"cpus":1,"het_job_id":9,"het_job_id_set":"9-10","het_job_offset":1)") + "," +
      job(11, R"("node_count":1,"cpus":1,"resv_name":"team")") + "]}";
  std::string nodes = sinfo();  // n2 in a reservation: only its jobs may start there
  nodes.replace(nodes.find(R"("state_flags":[])", nodes.find(R"("name":"n2")")), 16, R"("state_flags":["RESERVED"])");
  auto const snap = slurm::build_round(squeue, nodes, {});
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 2, 3, 7}));
  EXPECT_FALSE(snap.round.state.nodes[1].healthy);
  auto const& p = snap.round.pending;
  selector_requirement const not_n1_n2{"slurm.node/name", selector_op::not_in, {"n1", "n2"}};
  ASSERT_EQ(p[0].constraints.required.size(), 1U);
  EXPECT_EQ(p[0].constraints.required[0].match, (std::vector<selector_requirement>{not_n1_n2}));
  ASSERT_EQ(p[1].constraints.required.size(), 2U) << "train or infer, and in each not n3";
  for (auto const& t : p[1].constraints.required) {
    ASSERT_EQ(t.match.size(), 2U);
    EXPECT_EQ(t.match[1], (selector_requirement{"slurm.node/name", selector_op::not_in, {"n3"}}));
  }
  EXPECT_EQ(p[2].per_replica.cpu_milli, 32000) << "16 CPUs for each of 2 GPUs";
  std::map<slurm::job_ref, std::string> skipped;
  for (auto const& sk : snap.skipped) skipped[sk.job] = sk.why;
  EXPECT_EQ(skipped[4], "its dependency is not met: afterok:40(unfulfilled)");
  EXPECT_EQ(skipped[5], "its dependency is not met: afterok:41(failed)");
  EXPECT_EQ(skipped[6].rfind("it may not start before 20", 0), 0U) << skipped[6];
  EXPECT_NE(skipped[8].find("excluded_nodes"), std::string::npos) << skipped[8];
  // A heterogeneous job's components must start together, each on nodes of
  // its own: released one by one onto a node they shared, they never did.
  for (int k : {9, 10}) EXPECT_EQ(skipped[k].rfind("a heterogeneous job (components 9-10) is not supported", 0), 0U) << skipped[k];
  EXPECT_EQ(skipped[11].rfind("--reservation is not supported", 0), 0U) << skipped[11];
  // Solved: job 1 on n3 (n1 and n2 excluded, n4 drained), job 2 off n3 (and n2).
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  std::map<slurm::job_ref, slurm::action> by;
  for (auto const& a : slurm::decide(snap, r)) by[a.job] = a;
  EXPECT_EQ(by[1].nodes, (std::vector<std::string>{"n3"}));
  EXPECT_EQ(by[2].nodes, (std::vector<std::string>{"n1"}));
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
/// A client of srv that waits up to 5 s for an answer.
client_options options_for(testing_support::running_server const& srv) {
  client_options opt;
  opt.endpoint = srv.endpoint();
  opt.timeout_ms = 5000;
  return opt;
}

TEST(SlurmBridge, RoundsSentAsDeltasDecideAsFullRoundsDo) {
  testing_support::running_server srv;
  client svc(options_for(srv));
  std::uint64_t epoch = 0;
  auto by_job = [](std::vector<slurm::action> const& acts) {
    std::map<slurm::job_ref, std::pair<std::vector<std::string>, std::string>> m;
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

// Numbers no node has: a job's CPUs or memory past Placer's 2^40 is
// skipped (it stays held, saying why) instead of having Placer refuse the
// round for everyone, int64's largest CPUs over two nodes too (no sum that
// wraps); a node that says it has more has 2^40.
TEST(SlurmBridge, RequestsPastEveryNodeAreSkippedAndNodesHoldAtMostPlacersBound) {
  std::string const squeue = R"({"jobs":[)" + job(1, R"("node_count":1,"cpus":2000000000)") + "," +
                             job(2, R"("node_count":1,"cpus":4,"memory_per_cpu":1000000000000)") + "," +
                             job(3, R"("node_count":1,"cpus":4,"memory_per_cpu":9000000000000000000)") + "," +
                             job(4, R"("node_count":1,"cpus":4,"tres_per_node":"gres:gpu:1")") + "," +
                             job(5, R"("node_count":2,"cpus":9223372036854775807)") + "]}";
  std::string nodes = sinfo();
  nodes.replace(nodes.find(R"("cpus":64)"), 9, R"("cpus":9000000000000000)");
  nodes.replace(nodes.find(R"("real_memory":512000)"), 20, R"("real_memory":9000000000000000)");
  auto const snap = slurm::build_round(squeue, nodes, {});
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{4}));
  ASSERT_EQ(snap.skipped.size(), 4U);
  for (auto const& sk : snap.skipped) EXPECT_NE(sk.why.find("past what any node has"), std::string::npos) << sk.why;
  auto const& n1 = snap.round.state.nodes[0];
  EXPECT_EQ(n1.cpu_milli_capacity, max_resource);
  EXPECT_EQ(n1.memory_mib_capacity, max_resource);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);  // a round Placer takes: it throws on one it would refuse
  EXPECT_EQ(r.placements.size(), 1U);
}

// A round Placer refuses for one job's sake: the real service's message
// names the job, drop_refused takes it out (skipped, held, saying why), and
// the round goes again with the rest.
TEST(SlurmBridge, AJobPlacerRefusesLeavesTheRoundAndTheRestIsPlaced) {
  testing_support::running_server srv;
  client svc(options_for(srv));
  std::string const gpus = R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:)";
  auto snap = slurm::build_round(
      R"({"jobs":[)" + job(1, gpus + R"(1")") + "," + job(2, gpus + R"(2")") + "," + job(3, gpus + R"(1")") + "]}",
      sinfo(), {});
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 2, 3}));
  snap.round.pending[1].per_replica.cpu_milli = -5;  // what no reading of Slurm makes: Placer refuses it
  snap.round.state.epoch = 1;
  auto reply = svc.solve_incremental(snap.round);
  ASSERT_EQ(reply.code, wire::ErrorCode::InvalidArgument);
  EXPECT_FALSE(slurm::drop_refused(snap, "node 0 ('n1'): has no name"));
  std::string renamed = reply.message;
  renamed.replace(renamed.find("slurm-2"), 7, "slurm-9");
  EXPECT_FALSE(slurm::drop_refused(snap, renamed)) << "the message's job must be the round's";
  ASSERT_TRUE(slurm::drop_refused(snap, reply.message)) << reply.message;
  EXPECT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 3}));
  EXPECT_EQ(snap.round.pending.size(), 2U);
  EXPECT_EQ(snap.node_count.size(), 2U);
  ASSERT_EQ(snap.skipped.size(), 1U);
  EXPECT_EQ(snap.skipped[0].job, 2);
  EXPECT_NE(snap.skipped[0].why.find("Placer refused it: pending job 1 ('slurm-2'): demand.cpu_milli"), std::string::npos)
      << snap.skipped[0].why;
  snap.round.state.epoch = 2;
  reply = svc.solve_incremental(snap.round);
  ASSERT_EQ(reply.code, wire::ErrorCode::Ok) << reply.message;
  auto const acts = slurm::decide(snap, reply.result);
  std::map<slurm::job_ref, slurm::action> by;
  for (auto const& a : acts) by[a.job] = a;
  EXPECT_FALSE(by[1].nodes.empty());
  EXPECT_FALSE(by[3].nodes.empty());
  EXPECT_TRUE(by[2].nodes.empty());
  EXPECT_NE(by[2].comment.find("Placer refused it"), std::string::npos) << by[2].comment;
}

// Jobs that each exclude their own node (-x) make as many constraint sets
// as node groups, past what Placer evaluates in one round: the real
// service refuses the round whole ("... distinct constraint sets x ... node
// groups ..."), and the bridge sends it again with its first half of jobs
// (the rest wait held for a later cycle) until it fits.
TEST(SlurmBridge, ARoundPastPlacersConstraintBoundGoesInHalves) {
  testing_support::running_server srv;
  client svc(options_for(srv));
  int const n = 1500;
  std::string nodes = R"({"nodes":[)", jobs = R"({"jobs":[)";
  for (int k = 1; k <= n; ++k) {
    nodes += (k > 1 ? "," : "") + node("n" + std::to_string(k), "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100");
    jobs += (k > 1 ? "," : "") + job(k, R"("node_count":1,"cpus":1,"tres_per_node":"gres:gpu:1","excluded_nodes":"n)" +
                                            std::to_string(k) + R"(")");
  }
  auto snap = slurm::build_round(jobs + "]}", nodes + "]}", {});
  ASSERT_EQ(snap.round.pending.size(), static_cast<std::size_t>(n));
  std::uint64_t epoch = 0;
  snap.round.state.epoch = ++epoch;
  auto reply = svc.solve_incremental(snap.round);
  ASSERT_EQ(reply.code, wire::ErrorCode::ResourceExhausted) << reply.message;
  int halves = 0;
  while (reply.code == wire::ErrorCode::ResourceExhausted &&
         reply.message.find("distinct constraint sets") != std::string::npos && slurm::halve(snap)) {
    ++halves;
    snap.round.state.epoch = ++epoch;
    reply = svc.solve_incremental(snap.round);
  }
  ASSERT_EQ(reply.code, wire::ErrorCode::Ok) << reply.message;
  EXPECT_GE(halves, 1);
  EXPECT_EQ(snap.job_ids.size(), snap.round.pending.size());
  EXPECT_EQ(snap.node_count.size(), snap.round.pending.size());
  auto const acts = slurm::decide(snap, reply.result);
  ASSERT_EQ(acts.size(), snap.job_ids.size()) << "the first jobs, each placed";
  for (auto const& a : acts) {
    ASSERT_EQ(a.nodes.size(), 1U);
    EXPECT_NE(a.nodes[0], "n" + std::to_string(a.job.id)) << "never on the node it excludes";
    EXPECT_LE(a.job.id, static_cast<std::int64_t>(snap.job_ids.size()));
  }
  slurm::snapshot one;
  one.round.pending.resize(1);
  EXPECT_FALSE(slurm::halve(one));
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
  EXPECT_EQ(c.nodes[2].labels, (std::vector<std::string>{"slurm.node/name=n3", "slurm.feature/a100=true",
                                                          "slurm.partition/train=true", "slurm.partition/infer=true"}));
  ASSERT_EQ(snap.job_ids, (std::vector<slurm::job_ref>{1, 2, 3, 4}));
  EXPECT_EQ(snap.round.pending[3].constraints.required.size(), 2U);  // train or infer
  ASSERT_EQ(snap.skipped.size(), 1U);  // two partitions and a|b
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto const r = s.solve(snap.round);
  expect_round_invariants(snap.round, r);
  std::map<slurm::job_ref, slurm::action> by;
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

// --- Priorities (docs/slurm.md, "Priorities") ---------------------------
//
// The fixtures are Slurm 22.05's own output on the local cluster
// (scripts/slurm-cluster.sh, 3 nodes of 64 CPUs: n1, n2 train, n3 infer
// with PriorityJobFactor=10) with slurmdbd, QOS normal 0 / high 100 / mid
// 40 and accounts physics and bio; each expected priority is the one
// Slurm gave the same job submitted with --begin in an hour (not held, so
// Slurm computes it, and with no age yet), read from squeue.

std::string prio_config(std::string const& accounting = "accounting_storage/slurmdbd", std::string const& extra = "") {
  return "Configuration data as of 2026-11-28T08:21:30\n"
         "AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages\n"
         "AccountingStorageType   = " + accounting + "\n"
         "PriorityParameters      = (null)\n"
         "PrioritySiteFactorParameters = (null)\n"
         "PrioritySiteFactorPlugin = (null)\n"
         "PriorityDecayHalfLife   = 7-00:00:00\n"
         "PriorityCalcPeriod      = 00:05:00\n"
         "PriorityFavorSmall      = No\n"
         "PriorityFlags           = \n"
         "PriorityMaxAge          = 1-00:00:00\n"
         "PriorityUsageResetPeriod = NONE\n"
         "PriorityType            = priority/multifactor\n"
         "PriorityWeightAge       = 1000\n"
         "PriorityWeightAssoc     = 0\n"
         "PriorityWeightFairShare = 10000\n"
         "PriorityWeightJobSize   = 500\n"
         "PriorityWeightPartition = 2000\n"
         "PriorityWeightQOS       = 3000\n"
         "PriorityWeightTRES      = (null)\n" + extra;
}

std::string prio_partitions(std::string const& infer_tier = "1") {
  return "PartitionName=train AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
         "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
         "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=n[1-2] PriorityJobFactor=1 "
         "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP "
         "TotalCPUs=128 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
         "MaxMemPerNode=UNLIMITED TRES=cpu=128,mem=1000G,node=2,billing=128\n"
         "PartitionName=infer AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
         "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
         "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=n3 PriorityJobFactor=10 "
         "PriorityTier=" + infer_tier + " RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF "
         "State=UP TotalCPUs=64 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
         "MaxMemPerNode=UNLIMITED TRES=cpu=64,mem=500G,node=1,billing=64\n";
}

// `scontrol -o show assoc_mgr flags=qos` (its limits cut short here).
std::string const prio_qos =
    "Current Association Manager state\n"
    "QOS Records\n"
    "QOS=normal(1) UsageRaw=0.000000 GrpJobs=N(0) GrpJobsAccrue=N(0) MaxWallPJ= MinPrioThresh=  MinTRESPJ= "
    "PreemptMode=OFF Priority=0 Account Limits=No Accounts User Limits=No Users\n"
    "QOS=high(2) UsageRaw=0.000000 GrpJobs=N(0) MinPrioThresh=  PreemptMode=OFF Priority=100 Account Limits=No Accounts\n"
    "QOS=mid(3) UsageRaw=0.000000 GrpJobs=N(0) MinPrioThresh=  PreemptMode=OFF Priority=40 Account Limits=No Accounts\n";

// `sshare -a -n -P -o Account,User,Partition,FairShare`.
std::string const prio_sshare =
    "root|||\n root|root||0.333333\n bio|||\n  bio|root||1.000000\n physics|||\n  physics|root||1.000000\n";

std::string prio_sinfo() {
  return R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100,rack1") + "," +
         node("n2", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100,rack1") + "," +
         node("n3", "gpu:h100:8", "gpu:h100:0(IDX:N/A)", 0, "h100,rack2", "idle", "", "infer") + "]}";
}

/// A held job of the fixtures: squeue 22.05's fields (no nice is null; a
/// negative one its 32-bit two's complement).
std::string prio_job(int id, std::string const& account, std::string const& qos, std::string const& partition,
                     std::string const& extra, int gpus = 1) {
  return job(id, R"("account":")" + account + R"(","qos":")" + qos + R"(","user_name":"root","priority":0,)" +
                     R"("tres_per_node":"gres:gpu:)" + std::to_string(gpus) + R"(",)" + extra,
             "JobHeldUser", "placer", partition);
}

std::map<slurm::job_ref, std::int32_t> priorities(slurm::snapshot const& snap) {
  std::map<slurm::job_ref, std::int32_t> m;
  for (std::size_t k = 0; k < snap.job_ids.size(); ++k) m[snap.job_ids[k]] = snap.round.pending[k].priority;
  return m;
}

TEST(SlurmBridge, PrioritiesAreSlurmsMultifactorWithoutTheAge) {
  std::string const squeue =
      R"({"jobs":[)" +
      prio_job(14, "physics", "high", "train",
               R"("nice":null,"node_count":1,"cpus":1,"tres_req_str":"cpu=1,mem=4G,node=1,billing=1")") + "," +
      prio_job(16, "bio", "mid", "train", R"("node_count":2,"cpus":8,"tres_req_str":"cpu=8,mem=32G,node=2,billing=8")") +
      "," + prio_job(18, "physics", "normal", "infer,train", R"("nice":7,"node_count":1,"cpus":1)") + "," +
      prio_job(20, "bio", "normal", "infer", R"("node_count":1,"cpus":1)") + "," +
      prio_job(22, "physics", "mid", "train", R"("nice":4294967246,"node_count":1,"cpus":1,"time_limit":60)") + "]}";
  slurm::bridge_options opt;
  opt.priorities = slurm::parse_priorities(prio_config(), prio_partitions(), prio_qos, prio_sshare);
  auto const& p = opt.priorities;
  EXPECT_TRUE(p.multifactor);
  EXPECT_TRUE(p.slurmdbd);
  EXPECT_EQ(p.partitions.at("infer").job_factor, 10);
  EXPECT_EQ(p.partitions.at("train").tres.at("mem"), 1000.0 * 1024);
  EXPECT_EQ(p.qos, (std::map<std::string, std::int64_t>{{"normal", 0}, {"high", 100}, {"mid", 40}}));
  EXPECT_EQ(p.fairshare.at("root|root|"), 0.333333);
  EXPECT_EQ(p.fairshare.at("bio|root|"), 1.0);
  EXPECT_EQ(p.calc_period_s, 300);
  EXPECT_TRUE(p.notes.empty()) << p.notes[0];
  auto const snap = slurm::build_round(squeue, prio_sinfo(), opt);
  // Fair share 10000, QOS 3000 x 100/100, partition 2000 x 1/10 (train) or
  // x 10/10 (infer; -p infer,train: the better), job size 500 x (nodes/3 +
  // CPUs/192)/2, less nice (-50: plus 50).
  EXPECT_EQ(priorities(snap),
            (std::map<slurm::job_ref, std::int32_t>{{14, 13284}, {16, 11577}, {18, 12077}, {20, 12084}, {22, 11534}}));
  // The age is the round's: Slurm's weight and PriorityMaxAge, from the
  // submit time, across priorities (Slurm adds it to the sum).
  EXPECT_EQ(snap.round.pol.age, (aging{.weight = 1000, .max_age_s = 86400, .cross_priority = true}));
  EXPECT_EQ(snap.round.pending[0].submit_time, 1014);

  // Slurm 23.02 and later write the numbers as {"set", "infinite", "number"}
  // and a negative nice as itself: the same priorities.
  auto jobs = nlohmann::json::parse(squeue);
  for (auto& j : jobs["jobs"]) {
    for (auto& [k, v] : j.items()) {
      if (v.is_number()) v = {{"set", true}, {"infinite", false}, {"number", v}};
    }
    j["job_state"] = nlohmann::json::array({"PENDING"});
  }
  jobs["jobs"][4]["nice"] = -50;
  EXPECT_EQ(priorities(slurm::build_round(jobs.dump(), prio_sinfo(), opt)), priorities(snap));

  // Without slurmdbd Slurm leaves out the age and the fair share (and has no QOS).
  opt.priorities = slurm::parse_priorities(prio_config("accounting_storage/none"), prio_partitions());
  ASSERT_EQ(opt.priorities.notes.size(), 1U);
  EXPECT_NE(opt.priorities.notes[0].find("no slurmdbd"), std::string::npos);
  auto const plain = slurm::build_round(squeue, prio_sinfo(), opt);
  EXPECT_EQ(priorities(plain),
            (std::map<slurm::job_ref, std::int32_t>{{14, 284}, {16, 377}, {18, 2077}, {20, 2084}, {22, 334}}));
  EXPECT_EQ(plain.round.pol.age.weight, 0);
  // Aging from the command line instead (--age-weight, --age-max).
  opt.age_weight = 5000;
  opt.age_max_s = 3600;
  EXPECT_EQ(slurm::build_round(squeue, prio_sinfo(), opt).round.pol.age,
            (aging{.weight = 5000, .max_age_s = 3600, .cross_priority = true}));
}

// TRES weights and PriorityFlags: Slurm's numbers for the same jobs with
// PriorityWeightTRES=CPU=1000,Mem=500, then also SMALL_RELATIVE_TO_TIME
// and PriorityFavorSmall=YES.
TEST(SlurmBridge, PrioritiesFollowSlurmsTresWeightsAndFlags) {
  std::string const squeue =
      R"({"jobs":[)" +
      prio_job(24, "physics", "high", "train",
               R"("node_count":1,"cpus":3,"tres_req_str":"cpu=3,mem=10G,node=1,billing=3")") + "," +
      prio_job(26, "bio", "mid", "train", R"("node_count":2,"cpus":8,"tres_req_str":"cpu=8,mem=32G,node=2,billing=8")") +
      "," +
      prio_job(28, "physics", "normal", "infer,train",
               R"("nice":7,"node_count":1,"cpus":1,"time_limit":30,"tres_req_str":"cpu=1,mem=4G,node=1,billing=1")") +
      "," +
      prio_job(30, "physics", "mid", "train",
               R"("nice":4294967246,"node_count":1,"cpus":64,"time_limit":60,)"
               R"("tres_req_str":"cpu=64,mem=256G,node=1,billing=64")") +
      "]}";
  slurm::bridge_options opt;
  std::string const tres = "PriorityWeightTRES      = CPU=1000,Mem=500\n";
  opt.priorities = slurm::parse_priorities(prio_config("accounting_storage/slurmdbd", tres), prio_partitions(), prio_qos,
                                           prio_sshare);
  EXPECT_EQ(opt.priorities.weight_tres, (std::map<std::string, double>{{"cpu", 1000}, {"mem", 500}}));
  auto const by_tres = priorities(slurm::build_round(squeue, prio_sinfo(), opt));
  EXPECT_EQ(by_tres.at(24), 13315);  // 13284 + CPUs 3/128 x 1000 + memory 10G/1000G x 500
  EXPECT_EQ(by_tres.at(26), 11655);
  std::string config = prio_config("accounting_storage/slurmdbd", tres);
  config.replace(config.find("PriorityFavorSmall      = No"), 28, "PriorityFavorSmall      = Yes");
  config.replace(config.find("PriorityFlags           = "), 26, "PriorityFlags           = SMALL_RELATIVE_TO_TIME");
  opt.priorities = slurm::parse_priorities(config, prio_partitions(), prio_qos, prio_sshare);
  EXPECT_TRUE(opt.priorities.size_relative);
  EXPECT_TRUE(opt.priorities.favor_small);
  EXPECT_EQ(priorities(slurm::build_round(squeue, prio_sinfo(), opt)),
            (std::map<slurm::job_ref, std::int32_t>{{24, 13728}, {26, 11978}, {28, 12507}, {30, 12575}}));
}

// A partition's PriorityTier comes before any priority in Slurm's
// scheduling: each tier is a band above the one below, wide enough that
// no priority and no age (aging crosses priorities, not tiers) reaches the
// next. Weights too large for 32 bits are divided down, keeping the order.
TEST(SlurmBridge, PriorityTiersAreBandsThatAgingNeverCrosses) {
  std::string const squeue =
      R"({"jobs":[)" +
      prio_job(1, "physics", "high", "train", R"("nice":4294966296,"node_count":2,"cpus":128)") + "," +  // nice -1000
      prio_job(2, "bio", "normal", "infer", R"("nice":1000,"node_count":1,"cpus":1)") + "," +
      prio_job(3, "bio", "normal", "infer", R"("node_count":1,"cpus":1)") + "," +
      prio_job(4, "bio", "normal", "nowhere", R"("node_count":1,"cpus":1)") + "]}";
  for (std::string const& weight : {std::string("1000"), std::string("400000000")}) {
    std::string config = prio_config();
    for (char const* w : {"PriorityWeightAge       = 1000", "PriorityWeightFairShare = 10000",
                          "PriorityWeightJobSize   = 500", "PriorityWeightPartition = 2000",
                          "PriorityWeightQOS       = 3000"}) {
      std::string const key(w, 26);
      config.replace(config.find(w), std::string(w).size(), key + weight);
    }
    slurm::bridge_options opt;
    opt.priorities = slurm::parse_priorities(config, prio_partitions("5"), prio_qos, prio_sshare);
    auto const snap = slurm::build_round(squeue, prio_sinfo(), opt);
    auto const pr = priorities(snap);
    auto const age = snap.round.pol.age;
    ASSERT_GT(age.weight, 0) << weight;
    EXPECT_TRUE(age.cross_priority);
    // The train job's most (every factor, nice -1000, the whole age) is below the
    // infer jobs' least (nice +1000, no age).
    EXPECT_LT(static_cast<std::int64_t>(pr.at(1)) + age.weight, pr.at(2)) << weight;
    EXPECT_LT(pr.at(2), pr.at(3)) << weight;
    EXPECT_LT(pr.at(4), pr.at(1)) << weight;  // a partition it does not know: the lowest tier, no partition factor
    // Nothing near int32's ends, age included.
    for (auto const& [id, v] : pr) {
      EXPECT_GT(v, -2000000) << weight;
      EXPECT_LT(static_cast<std::int64_t>(v) + age.weight, std::numeric_limits<std::int32_t>::max()) << weight;
    }
    // The solver's aging keeps them so: the oldest train job stays below a new infer one.
    auto aged = snap.round;
    aged.pending[0].submit_time = aged.now - 10 * age.max_age_s;
    solver s(kernels::make_backend(kernels::backend_kind::cpu));
    auto const r = s.solve(aged);
    expect_round_invariants(aged, r);
  }
}

// Where Slurm's ranking cannot be read, the priority is -nice, as before,
// and nothing throws: the bridge never stops for it.
TEST(SlurmBridge, PrioritiesFallBackToNice) {
  std::string const squeue = R"({"jobs":[)" + prio_job(1, "physics", "high", "train", R"("nice":5)") + "," +
                             prio_job(2, "bio", "mid", "train", R"("nice":4294967246)") + "," +
                             job(3, R"("nice":"odd","tres_per_node":"gres:gpu:1","cpus":{"set":false})") + "]}";
  auto const nice_only = std::map<slurm::job_ref, std::int32_t>{{1, -5}, {2, 50}, {3, 0}};
  EXPECT_EQ(priorities(slurm::build_round(squeue, prio_sinfo(), {})), nice_only);
  slurm::bridge_options opt;
  for (std::string const& config : {std::string(), std::string("garbage\n= = =\n"),
                                   std::string("PriorityType            = priority/basic\n")}) {
    opt.priorities = slurm::parse_priorities(config, "PartitionName=x PriorityTier=oops", "QOS=", "|||x");
    EXPECT_FALSE(opt.priorities.multifactor);
    EXPECT_EQ(opt.priorities.notes.size(), 1U);
    EXPECT_EQ(priorities(slurm::build_round(squeue, prio_sinfo(), opt)), nice_only);
  }
  // No Slurm to ask.
  opt.priorities = slurm::read_priorities([](auto const&) -> std::string { throw slurm::slurm_error("no slurmctld"); });
  EXPECT_FALSE(opt.priorities.multifactor);
  EXPECT_TRUE(opt.priorities.unread);
  ASSERT_EQ(opt.priorities.notes.size(), 1U);
  EXPECT_NE(opt.priorities.notes[0].find("no slurmctld"), std::string::npos);
  EXPECT_EQ(priorities(slurm::build_round(squeue, prio_sinfo(), opt)), nice_only);
  // Multifactor with odd values: weights read as 0 (saying so), odd job fields as absent.
  std::string config = prio_config();
  config.replace(config.find("= 500"), 5, "= lots");
  opt.priorities = slurm::parse_priorities(config, "PartitionName=train PriorityJobFactor=x MaxTime=1-2:3:4:5\n", "", "");
  EXPECT_TRUE(opt.priorities.multifactor);
  EXPECT_EQ(opt.priorities.weight_job_size, 0);
  EXPECT_EQ(opt.priorities.partitions.at("train").job_factor, 1);
  EXPECT_EQ(opt.priorities.partitions.at("train").max_time_min, -1);
  ASSERT_FALSE(opt.priorities.notes.empty());
  EXPECT_NE(opt.priorities.notes[0].find("PriorityWeightJobSize 'lots'"), std::string::npos) << opt.priorities.notes[0];
  auto const odd = slurm::build_round(squeue, prio_sinfo(), opt);
  ASSERT_EQ(odd.round.pending.size(), 3U);
  // No QOS nor fair share read: train's 2000 x 1/1, less nice.
  EXPECT_EQ(priorities(odd), (std::map<slurm::job_ref, std::int32_t>{{1, 1995}, {2, 2050}, {3, 2000}}));
}

// read_priorities asks for what Slurm weighs and no more: QOS priorities
// and fair share only with slurmdbd and a weight for them. A command that
// fails leaves its factor out, saying so.
TEST(SlurmBridge, ReadPrioritiesAsksOnlyWhatSlurmWeighs) {
  auto with = [](std::string const& config, std::vector<std::string>& asked, bool fail_extras = false) {
    return slurm::read_priorities([&, config, fail_extras](std::vector<std::string> const& argv) -> std::string {
      std::string line;
      for (auto const& w : argv) line += (line.empty() ? "" : " ") + w;
      asked.push_back(line);
      if (argv[1] == "show") return config;
      if (fail_extras) throw slurm::slurm_error("refused");
      if (argv[0] == "sshare") return prio_sshare;
      if (argv[3] == "assoc_mgr") return prio_qos;
      return prio_partitions();
    });
  };
  std::vector<std::string> asked;
  auto p = with(prio_config(), asked);
  EXPECT_EQ(asked, (std::vector<std::string>{"scontrol show config", "scontrol -a -o show partition",
                                             "scontrol -o show assoc_mgr flags=qos",
                                             "sshare -a -n -P -o Account,User,Partition,FairShare"}));
  EXPECT_EQ(p.qos.size(), 3U);
  EXPECT_EQ(p.fairshare.size(), 3U);
  EXPECT_EQ(p.partitions.size(), 2U);
  asked.clear();
  p = with(prio_config("accounting_storage/none"), asked);
  EXPECT_EQ(asked, (std::vector<std::string>{"scontrol show config", "scontrol -a -o show partition"}));
  EXPECT_TRUE(p.qos.empty());
  asked.clear();
  p = with(prio_config(), asked, true);
  EXPECT_TRUE(p.multifactor);
  EXPECT_TRUE(p.partitions.empty());
  EXPECT_EQ(p.notes.size(), 3U);  // partitions, QOS, fair share
  asked.clear();
  p = with("PriorityType            = priority/basic\n", asked);
  EXPECT_EQ(asked, (std::vector<std::string>{"scontrol show config"}));
  EXPECT_FALSE(p.multifactor);
}

// Slurm's ranking decides who gets the last node: an 8-GPU job of QOS
// high submitted after one of QOS normal goes first, as Slurm would start
// it. With nice alone (the bridge before) the earlier job went.
TEST(SlurmBridge, SlurmsRankingDecidesWhoGetsTheLastNode) {
  std::string const nodes = R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", 0, "a100,rack1") + "," +
                            node("n2", "gpu:a100:8", "gpu:a100:8(IDX:0-7)", 64, "a100,rack1") + "," +
                            node("n3", "gpu:h100:8", "gpu:h100:8(IDX:0-7)", 64, "h100,rack2", "idle", "", "infer") + "]}";
  std::string const squeue =
      R"({"jobs":[)" + prio_job(1, "bio", "normal", "train", R"("node_count":1,"cpus":1)", 8) + "," +
      prio_job(2, "bio", "high", "train", R"("node_count":1,"cpus":1)", 8) + "]}";
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto placed = [&](slurm::bridge_options const& opt) {
    auto const snap = slurm::build_round(squeue, nodes, opt);
    auto const r = s.solve(snap.round);
    expect_round_invariants(snap.round, r);
    std::vector<slurm::job_ref> ids;
    for (auto const& a : slurm::decide(snap, r)) {
      if (!a.nodes.empty()) ids.push_back(a.job);
    }
    return ids;
  };
  EXPECT_EQ(placed({}), (std::vector<slurm::job_ref>{1}));
  slurm::bridge_options opt;
  opt.priorities = slurm::parse_priorities(prio_config(), prio_partitions(), prio_qos, prio_sshare);
  EXPECT_EQ(placed(opt), (std::vector<slurm::job_ref>{2}));
}

// --preempt: a running job is ranked as a pending one, with the age it
// has now: a pending job evicts only one Slurm would rank below it now.
TEST(SlurmBridge, RunningJobsRankWithTheAgeTheyHave) {
  std::string const nodes = R"({"nodes":[)" + node("n1", "gpu:a100:8", "gpu:a100:8(IDX:0-7)", 4, "a100,rack1") + "," +
                            node("n2", "gpu:a100:8", "gpu:a100:8(IDX:0-7)", 4, "a100,rack1") + "]}";
  auto running = [](int id, std::string const& node, std::int64_t submit) {
    return R"({"job_id":)" + std::to_string(id) + R"(,"job_state":"RUNNING","state_reason":"None","comment":"placer",)" +
           R"("partition":"train","account":"bio","user_name":"root","qos":"normal","submit_time":)" +
           std::to_string(submit) + R"(,"requeue":true,"cpus":4,"node_count":1,"nodes":")" + node +
           R"x(","tres_per_node":"gres:gpu:8","gres_detail":["gpu:a100:8(IDX:0-7)"],"start_time":900,)x" +
           R"("job_resources":{"allocated_nodes":[{"nodename":")" + node + R"(","memory_allocated":4096}]}})";
  };
  auto const now = static_cast<std::int64_t>(std::time(nullptr));
  // Job 10 was submitted two days ago (the whole age, PriorityMaxAge 1 day); job 11 now.
  auto round = [&](std::string const& qos) {
    slurm::bridge_options opt;
    opt.preempt = true;
    opt.priorities = slurm::parse_priorities(prio_config(), prio_partitions(), prio_qos, prio_sshare);
    return slurm::build_round(R"({"jobs":[)" + running(10, "n1", now - 2 * 86400) + "," + running(11, "n2", now) + "," +
                                  prio_job(12, "bio", qos, "train", R"("node_count":1,"cpus":4)", 8) + "]}",
                              nodes, opt);
  };
  auto snap = round("normal");
  ASSERT_EQ(snap.round.running.size(), 2U);
  auto const pending = snap.round.pending[0].priority;
  EXPECT_EQ(snap.round.running[0].priority, pending + 1000);
  EXPECT_GE(snap.round.running[1].priority, pending);
  EXPECT_LE(snap.round.running[1].priority, pending + 1);
  solver s(kernels::make_backend(kernels::backend_kind::cpu));
  auto evicted = [&](slurm::snapshot const& sn) {
    std::vector<slurm::job_ref> ids;
    for (auto const& a : slurm::decide(sn, s.solve(sn.round))) {
      if (a.requeue) ids.push_back(a.job);
    }
    return ids;
  };
  // New and ranked as both: it evicts neither.
  snap.round.pending[0].submit_time = now;
  EXPECT_TRUE(evicted(snap).empty());
  // Submitted as long ago as job 10: it ranks above job 11 (Slurm would
  // have started it first), not above job 10.
  snap.round.pending[0].submit_time = now - 2 * 86400;
  EXPECT_EQ(evicted(snap), (std::vector<slurm::job_ref>{11}));
  // QOS high: above both; one is enough.
  EXPECT_EQ(evicted(round("high")).size(), 1U);
}

}  // namespace
}  // namespace placer
