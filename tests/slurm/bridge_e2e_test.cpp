// The Slurm bridge against a live local Slurm (scripts/slurm-cluster.sh):
// 16 nodes of 8 GPUs, two GPU models, two racks; a job mix with single-GPU
// jobs, whole-node jobs, gangs, constraints and one job that fits nowhere.
// Every job runs on exactly the nodes Placer chose, Slurm never shows a
// node over its GPUs, the unplaceable job stays held with its reason, and
// neither a dead service nor a crash between update and release loses or
// doubles a job. Skipped, saying so, where Slurm is not installed or the
// test is not root (slurmd runs jobs as their users).
#include <placer/slurm/bridge.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/child_process.hpp"
#include "../support/local_slurm.hpp"
#include "../support/run_placer.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

using namespace testing_support;  // local_slurm.hpp: the cluster and what is read of it
using slurm::run_command;

TEST(SlurmBridgeLive, JobsRunWherePlacerPutsThem) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(16);
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();

  std::vector<std::int64_t> jobs;
  for (int k = 0; k < 6; ++k) jobs.push_back(cluster.submit("-N1 --gres=gpu:1"));
  for (int k = 0; k < 3; ++k) jobs.push_back(cluster.submit("-N1 --gres=gpu:8"));
  jobs.push_back(cluster.submit("-N2 --gres=gpu:8"));                          // a gang, one rack if it can
  jobs.push_back(cluster.submit("-N2 --gres=gpu:8 --constraint=h100"));
  jobs.push_back(cluster.submit("-N1 --gres=gpu:2 --constraint=rack2&a100"));  // no such node: waits
  jobs.push_back(cluster.submit("-N1 --gres=gpu:4 --constraint=rack1"));
  jobs.push_back(cluster.submit("-p infer -N1 --gres=gpu:1"));                // n15 and n16 are the infer partition
  std::int64_t const pair = cluster.submit("-N2 --gres=gpu:2");  // two nodes, though one could hold both
  std::int64_t const never = cluster.submit("-N1 --gres=gpu:16");

  // The default changes jobs through libslurm where it loads (with
  // libslurm-dev at build time); the crash below goes through scontrol.
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  std::string why;
  bool const libslurm = slurm::libslurm_usable(&why);
  EXPECT_NE(out.find(libslurm ? ", libslurm " : ", scontrol "), std::string::npos) << why << "\n" << out;
  auto const placed = placed_lines(out);
  EXPECT_GE(placed.size(), 13U) << out;
  ASSERT_EQ(placed.count(pair), 1U) << out;
  EXPECT_EQ(std::set<std::string>(placed.at(pair).begin(), placed.at(pair).end()).size(), 2U) << out;
  EXPECT_EQ(placed.count(never), 0U) << out;
  drain(60);
  for (auto const& [id, nodes] : placed) EXPECT_EQ(cluster.ran_on(id), nodes) << "job " << id;
  // The gangs ran within one rack (n1-n8 rack1, n9-n16 rack2).
  for (auto id : {jobs[9], jobs[10]}) {
    auto const& nodes = placed.at(id);
    std::set<bool> racks;
    for (auto const& n : nodes) racks.insert(std::stoi(n.substr(1)) <= 8);
    EXPECT_EQ(racks.size(), 1U) << "job " << id;
  }
  // h100 nodes are n9-n16; the rack1 job ran on n1-n8.
  for (auto const& n : placed.at(jobs[10])) EXPECT_GE(std::stoi(n.substr(1)), 9) << n;
  for (auto const& n : placed.at(jobs[12])) EXPECT_LE(std::stoi(n.substr(1)), 8) << n;
  // Every job stayed in its partition: infer is n15-n16, train the rest.
  for (auto const& [id, nodes] : placed) {
    for (auto const& n : nodes) EXPECT_EQ(std::stoi(n.substr(1)) >= 15, id == jobs[13]) << "job " << id << " on " << n;
  }
  // The job that fits nowhere is held, saying why.
  auto const held = job_of(never);
  EXPECT_EQ(held.value("state_reason", ""), "JobHeldUser");
  EXPECT_NE(held.value("admin_comment", "").find("Insufficient nvidia.com/gpu"), std::string::npos) << held.dump();
  // 16 GPUs on nodes of 8: not now, not ever (as Slurm's PartitionNodeLimit says of -N65).
  EXPECT_NE(held.value("admin_comment", "").find("It can never run on this cluster"), std::string::npos) << held.dump();
  EXPECT_NE(job_of(jobs[11]).value("admin_comment", "").find("placer:"), std::string::npos);

  // The service down: the cycle fails, and nothing changes.
  std::int64_t const late = cluster.submit("-N1 --gres=gpu:1", 1);
  EXPECT_EQ(testing_support::run_placer("slurm-bridge --once --timeout-ms 300 --endpoint tcp://127.0.0.1:1", out), 1) << out;
  EXPECT_EQ(job_of(late).value("state_reason", ""), "JobHeldUser");
  EXPECT_EQ(job_of(late).value("admin_comment", ""), "");
  // A crash between update and release: the job has its nodes but is
  // still held; the next cycle places it once.
  run_command({"scontrol", "update", "JobId=" + std::to_string(late), "ReqNodeList=n14"});
  ASSERT_EQ(testing_support::run_placer(bridge + " --slurm-api scontrol", out), 0) << out;
  EXPECT_NE(out.find(", scontrol "), std::string::npos) << out;
  auto const again = placed_lines(out);
  ASSERT_EQ(again.count(late), 1U) << out;
  drain(30);
  EXPECT_EQ(cluster.ran_on(late), again.at(late));
  EXPECT_EQ(job_state(job_of(late)), "COMPLETED");
}

// --preempt: two nice-100 jobs fill the train partition's two nodes; an
// 8-GPU job at nice 0 waits without the flag, and with it one of them is
// requeued and held (the bridge's again, saying why) and the new job runs
// on the node it freed.
TEST(SlurmBridgeLive, EvictionsAreRequeuesUnderAFlag) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(4);  // n1, n2 train (a100); n3, n4 infer
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  std::int64_t const low1 = cluster.submit("-N1 --gres=gpu:8 --nice=100", 120);
  std::int64_t const low2 = cluster.submit("-N1 --gres=gpu:8 --nice=100", 120);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  ASSERT_EQ(placed_lines(out).size(), 2U) << out;
  ASSERT_TRUE(wait_for(low1, "RUNNING", 30) && wait_for(low2, "RUNNING", 30));
  std::int64_t const high = cluster.submit("-N1 --gres=gpu:8", 2);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  EXPECT_EQ(placed_lines(out).count(high), 0U) << out;
  EXPECT_EQ(out.find(": requeued"), std::string::npos) << out;
  ASSERT_EQ(testing_support::run_placer(bridge + " --preempt", out), 0) << out;
  auto const placed = placed_lines(out);
  ASSERT_EQ(placed.count(high), 1U) << out;
  std::int64_t const evicted =
      out.find("job " + std::to_string(low1) + ": requeued") != std::string::npos ? low1 : low2;
  EXPECT_NE(out.find("job " + std::to_string(evicted) + ": requeued"), std::string::npos) << out;
  ASSERT_TRUE(wait_for(high, "COMPLETED", 60)) << job_of(high).dump();
  EXPECT_EQ(cluster.ran_on(high), placed.at(high));
  EXPECT_EQ(cluster.ran_on(evicted).count(*placed.at(high).begin()), 1U) << "it ran where the new job went";
  auto const again = job_of(evicted);
  EXPECT_EQ(job_state(again), "PENDING");
  EXPECT_EQ(again.value("state_reason", ""), "JobHeldUser");
  EXPECT_NE(again.value("admin_comment", "").find("evicted"), std::string::npos) << again.dump();
  EXPECT_EQ(job_state(job_of(low1 == evicted ? low2 : low1)), "RUNNING");
}

// A job array's tasks are jobs of their own: three whole-node tasks run at
// once, a node each, where Placer put them (before, the array went as one
// job: every task pinned to the first task's node, run one after another
// with the other nodes idle), and an array throttled to one task at a time
// (%1) never has two started. The later cycles change jobs through
// scontrol, the first through the default (libslurm where it loads).
TEST(SlurmBridgeLive, AnArraysTasksRunAtOnceEachWherePlacerPutsIt) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(6);  // n1-n4 train; n5, n6 infer
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  std::int64_t const wide = cluster.submit("--array=0-2 -N1 --gres=gpu:8", 12);
  std::int64_t const one_at_a_time = cluster.submit("--array=0-2%1 -N1 --gres=gpu:1", 2);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  auto placed = placed_lines(out);
  std::set<std::string> nodes;
  for (std::int64_t t = 0; t < 3; ++t) {
    ASSERT_EQ(placed.count({wide, t}), 1U) << out;
    nodes.insert(placed.at({wide, t}).begin(), placed.at({wide, t}).end());
  }
  EXPECT_EQ(nodes.size(), 3U) << out;
  EXPECT_EQ(placed.count({one_at_a_time, 0}), 1U) << out;
  EXPECT_EQ(placed.size(), 4U) << out;
  // Polls until `done` holds of squeue's records (or `timeout_s`).
  auto until = [](auto const& done, int timeout_s) {
    auto const end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!done(squeue()) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return done(squeue());
  };
  // All three run at once.
  EXPECT_TRUE(until(
      [&](nlohmann::json const& q) {
        int n = 0;
        for (auto const& j : q["jobs"]) n += number_of(j, "array_job_id") == wide && job_state(j) == "RUNNING" ? 1 : 0;
        return n == 3;
      },
      15))
      << squeue().dump();
  // The throttled array: a task a cycle, each once the one before it ended.
  for (std::int64_t t = 1; t < 3; ++t) {
    ASSERT_TRUE(until(
        [&](nlohmann::json const& q) {
          for (auto const& j : q["jobs"]) {
            if (number_of(j, "array_job_id") == one_at_a_time && number_of(j, "array_task_id") == t - 1) {
              return job_state(j) == "COMPLETED";
            }
          }
          return false;
        },
        30))
        << squeue().dump();
    ASSERT_EQ(testing_support::run_placer(bridge + " --slurm-api scontrol", out), 0) << out;
    auto const next = placed_lines(out);
    EXPECT_EQ(next.size(), 1U) << out;
    ASSERT_EQ(next.count({one_at_a_time, t}), 1U) << out;
    placed.insert(next.begin(), next.end());
  }
  drain(60);
  for (auto const& [id, on] : placed) EXPECT_EQ(cluster.ran_on(id), on) << "task " << id;
}

// Jobs whose GPUs or memory Slurm counts other than per node, and a job
// that takes its node whole, run where they are released: a job outside
// the bridge holds 4 of n1's GPUs; 4 GPUs a task for 2 tasks and
// --exclusive each get an idle node and start, and --mem=0 (all of a
// node's memory, which no node has free now) waits, held, saying why.
// Before, the bridge read no GPUs, no memory and a shared node, released
// all three onto n1, and none of them started.
TEST(SlurmBridgeLive, JobsStartWhereTheyAreReleasedWhateverWayTheyAskForANode) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(5);  // n1-n3 train; n4, n5 infer
  std::string out;
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  run_command({"sbatch", "-w", "n1", "--gres=gpu:4", "--wrap=sleep 15", "-o", "/dev/null"});
  auto const outside = [] {
    auto const q = squeue();
    for (auto const& j : q["jobs"]) {
      if (job_state(j) == "RUNNING") return true;
    }
    return false;
  };
  for (int k = 0; k < 60 && !outside(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ASSERT_TRUE(outside());
  std::int64_t const per_task = cluster.submit("-N1 --ntasks=2 --gpus-per-task=4", 12);
  std::int64_t const exclusive = cluster.submit("-N1 --exclusive --gres=gpu:1", 12);
  std::int64_t const all_memory = cluster.submit("-N1 --mem=0 --gres=gpu:1", 2);
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  auto const placed = placed_lines(out);
  ASSERT_EQ(placed.count(per_task), 1U) << out;
  ASSERT_EQ(placed.count(exclusive), 1U) << out;
  EXPECT_EQ(placed.count(all_memory), 0U) << out;
  EXPECT_NE(placed.at(per_task), placed.at(exclusive)) << out;
  for (auto id : {per_task, exclusive}) {
    EXPECT_EQ(placed.at(id).count("n1"), 0U) << out;
    EXPECT_TRUE(wait_for(id, "RUNNING", 15)) << job_of(id).dump();
  }
  auto const held = job_of(all_memory);
  EXPECT_EQ(held.value("state_reason", ""), "JobHeldUser");
  EXPECT_NE(held.value("admin_comment", "").find("Insufficient memory"), std::string::npos) << held.dump();
  drain(60);
  for (auto id : {per_task, exclusive}) EXPECT_EQ(cluster.ran_on(id), placed.at(id));
}

// The bridge ranks its held jobs as Slurm would (docs/slurm.md,
// "Priorities"): on a cluster with priority/multifactor, each held job's
// priority in the bridge's round is the one Slurm gives the same job
// submitted with --begin in an hour (not held: Slurm computes it, with no
// age yet). And it decides: of two 8-GPU jobs for the train partition's
// one node, the later one, larger in CPUs (Slurm's job-size factor), goes
// first; ranked by nice alone (--priority nice) the earlier one would.
TEST(SlurmBridgeLive, RoundsCarrySlurmsRanking) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  // n1 train; n2, n3 infer.
  local_slurm cluster(3, {"PriorityType=priority/multifactor", "PriorityWeightJobSize=500",
                          "PriorityWeightPartition=2000", "PriorityWeightAge=1000", "PriorityMaxAge=1-0"});
  run_command({"scontrol", "update", "PartitionName=infer", "PriorityJobFactor=10"});
  auto const slurm_cli = [](std::vector<std::string> const& argv) { return run_command(argv); };
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;  // held, twin
  for (std::string const spec : {"-N1 --gres=gpu:1", "-p infer -N2 --gres=gpu:2 -c 4", "-p infer --gres=gpu:1 --nice=30",
                                 "-p infer,train --gres=gpu:1 --nice=7", "--gres=gpu:1 --nice=-50 -c 16"}) {
    pairs.emplace_back(cluster.submit(spec), cluster.submit(spec, 3, false));
  }
  slurm::bridge_options opt;
  opt.priorities = slurm::read_priorities(slurm_cli);
  std::string notes;
  for (auto const& n : opt.priorities.notes) notes += n + "; ";
  ASSERT_TRUE(opt.priorities.multifactor) << notes;
  EXPECT_EQ(opt.priorities.partitions.at("infer").job_factor, 10) << notes;
  auto const snap = slurm::build_round(run_command({"squeue", "--json"}), slurm::read_nodes(slurm_cli), opt);
  std::map<slurm::job_ref, std::int32_t> ours;
  for (std::size_t k = 0; k < snap.job_ids.size(); ++k) ours[snap.job_ids[k]] = snap.round.pending[k].priority;
  std::set<std::int64_t> ranks;
  for (auto const& [held, twin] : pairs) {
    auto const slurms = number_of(job_of(twin), "priority");
    ASSERT_EQ(ours.count(held), 1U) << held;
    EXPECT_EQ(ours.at(held), slurms) << "job " << held << " (twin " << twin << ")";
    EXPECT_EQ(number_of(job_of(held), "priority"), 0) << "a held job's Slurm priority";
    ranks.insert(slurms);
  }
  EXPECT_EQ(ranks.size(), pairs.size()) << "the jobs rank apart";
  // Without slurmdbd Slurm leaves out the age, and so does the round.
  EXPECT_EQ(snap.round.pol.age.weight, 0) << notes;
  std::vector<std::string> cancel{"scancel"};
  for (auto const& [held, twin] : pairs) {
    cancel.push_back(std::to_string(held));
    cancel.push_back(std::to_string(twin));
  }
  run_command(cancel);

  std::int64_t const first = cluster.submit("-N1 --gres=gpu:8 -c 1");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a later submit time (seconds), not a tie
  std::int64_t const larger = cluster.submit("-N1 --gres=gpu:8 -c 32");
  testing_support::running_server srv;
  std::string const bridge = "slurm-bridge --once --endpoint " + srv.endpoint();
  std::string out;
  ASSERT_EQ(testing_support::run_placer(bridge + " --dry-run --priority nice", out), 0) << out;
  EXPECT_EQ(placed_lines(out).count(first), 1U) << out;
  ASSERT_EQ(testing_support::run_placer(bridge, out), 0) << out;
  auto const placed = placed_lines(out);
  EXPECT_EQ(placed.count(larger), 1U) << out;
  EXPECT_EQ(placed.count(first), 0U) << out;
  EXPECT_NE(out.find("priorities: Slurm's multifactor"), std::string::npos) << out;
  ASSERT_TRUE(wait_for(larger, "COMPLETED", 60)) << job_of(larger).dump();
  EXPECT_EQ(cluster.ran_on(larger), (std::set<std::string>{"n1"}));
}

// Failing open (--fallback-after S, issue 39). With no Placer answering,
// the default keeps the bridge's jobs held however long it lasts; with
// --fallback-after 3 the held job is released to Slurm's own scheduler
// once 3 s of rounds went unanswered (not before), its AdminComment saying
// why, and Slurm runs it. A Placer that comes up on the endpoint places
// the next held job again.
TEST(SlurmBridgeLive, FailsOpenOnlyWhenAskedAndResumesWhenAPlacerAnswers) {
  if (std::string why; live_slurm_missing(why)) GTEST_SKIP() << why;
  local_slurm cluster(4);  // n1, n2 train; n3, n4 infer
  std::string const endpoint = "tcp://127.0.0.1:" + std::to_string(free_port_block(1, 7));  // nothing there yet
  std::string const placer = placer_binary().string();
  std::int64_t const first = cluster.submit("-N1 --gres=gpu:1", 1);
  {
    // Closed, the default: 4 s of unanswered cycles change nothing.
    child_process bridge({placer, "slurm-bridge", "--endpoint", endpoint, "--interval", "1", "--timeout-ms", "300"},
                         (cluster.dir() / "bridge-closed.log").string());
    std::this_thread::sleep_for(std::chrono::seconds(4));
    bridge.signal(SIGTERM);
    EXPECT_EQ(bridge.wait(), 0) << bridge.output();
    EXPECT_NE(bridge.output().find("nothing changed; next cycle"), std::string::npos) << bridge.output();
    auto const j = job_of(first);
    EXPECT_EQ(j.value("state_reason", ""), "JobHeldUser") << j.dump();
    EXPECT_EQ(j.value("admin_comment", ""), "");
  }
  child_process bridge({placer, "slurm-bridge", "--endpoint", endpoint, "--interval", "1", "--timeout-ms", "300",
                        "--fallback-after", "3"},
                       (cluster.dir() / "bridge-open.log").string());
  auto const t0 = std::chrono::steady_clock::now();
  while (job_of(first).value("state_reason", "") == "JobHeldUser" &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  double const released_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(released_s, 3.0) << "not before --fallback-after";
  EXPECT_LT(released_s, 12.0) << bridge.output();
  std::string const comment = job_of(first).value("admin_comment", "");
  EXPECT_NE(comment.find("placer: released to Slurm's scheduler: no Placer answered for"), std::string::npos) << comment;
  EXPECT_NE(bridge.output().find("job " + std::to_string(first) + ": to Slurm: "), std::string::npos) << bridge.output();
  ASSERT_TRUE(wait_for(first, "COMPLETED", 60)) << job_of(first).dump();
  EXPECT_EQ(cluster.ran_on(first).size(), 1U) << "Slurm ran it itself";

  // A Placer answers again: the next held job is placed by it.
  auto const replica = start_replica(endpoint, (cluster.dir() / "replica.log").string());
  std::int64_t const next = cluster.submit("-N1 --gres=gpu:2", 1);
  auto const t1 = std::chrono::steady_clock::now();
  while (placed_lines(bridge.output()).count(next) == 0 && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto const placed = placed_lines(bridge.output());
  ASSERT_EQ(placed.count(next), 1U) << bridge.output();
  EXPECT_NE(bridge.output().find("answers again: placing the jobs still held"), std::string::npos) << bridge.output();
  ASSERT_TRUE(wait_for(next, "COMPLETED", 60)) << job_of(next).dump();
  EXPECT_EQ(cluster.ran_on(next), placed.at(next));
  EXPECT_EQ(placed.count(first), 0U) << "the job released to Slurm is never placed again";
  bridge.signal(SIGTERM);
  EXPECT_EQ(bridge.wait(), 0);
}

}  // namespace
}  // namespace placer
