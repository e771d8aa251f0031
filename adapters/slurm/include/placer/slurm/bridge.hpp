#pragma once
// The Slurm bridge (docs/slurm.md): Placer as the placement engine of a
// live Slurm cluster, through Slurm's own command-line tools.
//
// The held-job convention. A job is the bridge's when it was submitted held
// with a comment that starts with the bridge's tag (`sbatch -H
// --comment=placer ...`). Each cycle reads those jobs and the nodes
// (`squeue --json`, `sinfo --json`), builds one Placer round, solves it
// through the service, and for each placed job runs `scontrol update
// JobId=N ReqNodeList=... AdminComment=...` and then `scontrol release N`;
// an unplaced job stays held with Placer's reason in its AdminComment. The
// bridge keeps no state of its own: a crash between update and release
// leaves the job held (the next cycle places it again), and jobs released
// but not yet started hold their requested nodes in the next round.
//
//   auto snap = placer::slurm::build_round(squeue_json, sinfo_json, opt);
//   auto r = solve(snap.round);                     // the service, over ZeroMQ
//   auto acts = placer::slurm::decide(snap, r);
//   auto slurm = placer::slurm::make_libslurm_changes();  // or scontrol_changes
//   placer::slurm::apply(acts, *slurm);

#include <placer/solver/model.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace placer::slurm {

/// Slurm's tools failed or said something the bridge cannot read.
class slurm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How Slurm ranks jobs (docs/slurm.md, "Priorities"). A job the bridge
/// holds has Slurm priority 0 and `sprio` leaves it out, so the bridge
/// computes Slurm's multifactor priority itself from what Slurm exposes:
/// the weights and flags (`scontrol show config`), each partition's
/// PriorityJobFactor, PriorityTier, MaxTime and TRES (`scontrol -a -o show
/// partition`), and with slurmdbd each QOS's priority (`scontrol -o show
/// assoc_mgr flags=qos`) and each user's fair-share factor (`sshare`). All
/// but the age: the round's aging adds it from the job's submit time.
struct slurm_priorities {
  bool multifactor = false;  ///< PriorityType=priority/multifactor; false: priority -nice
  /// AccountingStorageType=accounting_storage/slurmdbd: without it Slurm
  /// ignores PriorityWeightAge and PriorityWeightFairshare, and so does the bridge.
  bool slurmdbd = false;
  double weight_age = 0;
  double weight_fairshare = 0;
  double weight_job_size = 0;
  double weight_partition = 0;
  double weight_qos = 0;
  double weight_assoc = 0;  ///< not computed (docs/slurm.md): a note when not 0
  std::map<std::string, double> weight_tres;  ///< PriorityWeightTRES, by lower-case TRES name
  std::int64_t max_age_s = 7 * 24 * 3600;     ///< PriorityMaxAge
  std::int64_t calc_period_s = 300;           ///< PriorityCalcPeriod: how often Slurm recomputes priorities
  bool favor_small = false;                   ///< PriorityFavorSmall
  bool size_relative = false;                 ///< PriorityFlags SMALL_RELATIVE_TO_TIME
  bool no_normal_part = false;                ///< PriorityFlags NO_NORMAL_PART (or NO_NORMAL_ALL)
  bool no_normal_qos = false;
  bool no_normal_tres = false;
  struct partition {
    std::int64_t job_factor = 1;      ///< PriorityJobFactor
    std::int64_t tier = 1;            ///< PriorityTier: Slurm schedules a higher tier's jobs first
    std::int64_t max_time_min = -1;   ///< MaxTime in minutes; -1: UNLIMITED
    std::map<std::string, double> tres;  ///< TRES totals by lower-case name (memory in MiB)
  };
  std::map<std::string, partition> partitions;
  std::map<std::string, std::int64_t> qos;  ///< QOS name -> Priority
  /// sshare's FairShare factor: "account|user|partition" (partition empty
  /// for an association of every partition).
  std::map<std::string, double> fairshare;
  std::vector<std::string> notes;  ///< what was not read, and why
  bool unread = false;  ///< read_priorities: `scontrol show config` failed, nothing is known
};

/// slurm_priorities from the text of `scontrol show config`, `scontrol -a
/// -o show partition`, `scontrol -o show assoc_mgr flags=qos` and `sshare
/// -a -n -P -o Account,User,Partition,FairShare` (the last two may be
/// empty). Lines it cannot read are left out; never throws.
slurm_priorities parse_priorities(std::string const& config, std::string const& partitions,
                                  std::string const& qos = {}, std::string const& sshare = {});

struct bridge_options {
  std::string partition;        ///< only this partition's nodes and jobs; "" = every partition
  std::string tag = "placer";   ///< the comment prefix that makes a held job the bridge's
  /// Feature names that are racks (a feature with this prefix): the
  /// topology level gangs are kept within when capacity allows.
  std::string rack_prefix = "rack";
  /// The round's policy stacking (model.hpp policy::stacking): a Slurm
  /// cluster is many equal nodes, and without it one round's jobs of one
  /// shape land one per node (docs/slurm.md).
  bool stacking = true;
  /// The round's queue order (model.hpp policy::order).
  queue_order order = queue_order::fifo;
  /// Evictions (`placer slurm-bridge --preempt`): the bridge's running jobs
  /// go into the round as running work (preemptible when Slurm may requeue
  /// them), preemption is on, and an eviction becomes `scontrol
  /// requeuehold`: the job is pending and held again, the bridge's, and a
  /// later cycle places it. Off: running jobs are only the nodes' usage.
  bool preempt = false;
  /// Slurm's ranking (read_priorities). Not multifactor, the default:
  /// priority -nice, no aging.
  slurm_priorities priorities;
  /// Aging (policy::age) overrides, in Slurm's priority points and seconds:
  /// PriorityWeightAge (0: none) and PriorityMaxAge; -1: Slurm's own.
  std::int64_t age_weight = -1;
  std::int64_t age_max_s = -1;
};

/// Node labels from Slurm features: "slurm.feature/<feature>=true".
std::string feature_label(std::string const& feature);
/// Node labels from the partitions a node is in: "slurm.partition/<name>=true".
/// A job's partition is a selector on it (Slurm runs a job only there).
std::string partition_label(std::string const& partition);

/// Runs argv (no shell), returns its stdout; throws slurm_error with its
/// stderr when it cannot start, exits non-zero, or runs past timeout_ms.
std::string run_command(std::vector<std::string> const& argv, int timeout_ms = 30000);
using command_runner = std::function<std::string(std::vector<std::string> const&)>;

/// Slurm's ranking as parse_priorities reads it, from the commands run by
/// `run`: those with slurmdbd only when Slurm has it and weighs the factor.
/// A command that fails leaves its part out, saying so in notes; where the
/// configuration cannot be read, priority is -nice. Never throws.
slurm_priorities read_priorities(command_runner const& run);

/// A Slurm job as Slurm's commands name it: "N", or "A_T" for task T of
/// job array A. An array's pending tasks share one record in squeue until
/// Slurm splits a task off (to start it, or to change it alone); "A_T"
/// names the task either way, and "A" names every task of the array. A
/// plain job id converts to it.
struct job_ref {
  std::int64_t id = 0;     ///< the job's id; for an array task, its array's (array_job_id)
  std::int64_t task = -1;  ///< the array task (array_task_id); -1: the whole job
  job_ref() = default;
  job_ref(std::int64_t job, std::int64_t array_task = -1) : id(job), task(array_task) {}  // NOLINT: a plain id is one
  [[nodiscard]] std::string str() const {
    return task < 0 ? std::to_string(id) : std::to_string(id) + "_" + std::to_string(task);
  }
  auto operator<=>(job_ref const&) const = default;
  friend std::ostream& operator<<(std::ostream& os, job_ref const& r) { return os << r.str(); }
};
struct skipped_job {
  job_ref job;
  std::string why;
};

/// The nodes as one JSON list ({"nodes": [...]}): `sinfo --json` up to
/// Slurm 23.02; from 23.11 it groups nodes by partition and state
/// ({"sinfo": [...]}), and `scontrol show nodes --json` (which 22.05 does
/// not have) gives the per-node list instead. `grouped`, when given,
/// remembers across calls that sinfo groups them (the next call asks
/// scontrol only). Throws slurm_error.
std::string read_nodes(command_runner const& run, bool* grouped = nullptr);

/// One cycle's view of Slurm as a Placer round.
struct snapshot {
  round_input round;                  ///< the nodes, and the held jobs as pending
  std::vector<job_ref> job_ids;       ///< the Slurm job (or array task) of each pending job
  std::vector<std::int32_t> node_count;  ///< per pending job: Slurm's -N (distinct nodes)
  std::vector<skipped_job> skipped;   ///< held jobs of the bridge it cannot express
  std::int32_t reserved_jobs = 0;     ///< released jobs not started yet, holding their nodes
  std::map<job_ref, std::string> comments;  ///< the held jobs' AdminComment now
  std::map<std::string, job_ref> running_ids;  ///< --preempt: running job name ("slurm-N", "slurm-A_T") -> the job
  /// Array tasks in the round that are still in their array's held record
  /// (changing one alone splits it off into a record of its own).
  std::set<job_ref> unsplit;
  /// Pending jobs that take their nodes whole (--exclusive): they go only
  /// to nodes with nothing allocated, and share them with no other
  /// placement of the round (decide).
  std::set<job_ref> whole;
  std::vector<std::string> warnings;  ///< nodes left out, and jobs' fields it could not read
};

/// The round from `squeue --json` and read_nodes() output. Nodes: GPUs
/// (model and count from gres, in use from gres_used's indices), CPUs and
/// memory free, features and partitions as labels, down/drained nodes
/// unhealthy, racks as topology. Jobs: -N as replicas (a gang above one),
/// GPUs per node from tres_per_node, CPUs and memory per node, the
/// partition (or -p a,b: any of them) and --constraint (a&b, a,b or a|b of
/// plain features) as selectors, Slurm's ranking as priority (with
/// opt.priorities multifactor: the multifactor priority without its age,
/// in bands by partition PriorityTier, and the round's aging from
/// PriorityWeightAge and PriorityMaxAge; otherwise -nice). With
/// opt.preempt, the bridge's running jobs as running work: their nodes and
/// GPU indices (gres_detail), the same priority with the age they have
/// now, preemptible when Slurm may requeue them. A held job array's
/// pending record is its tasks, each a job of the round ("slurm-A_T"), in
/// task order: as many as its throttle (--array=...%N, less its tasks
/// running or released) lets start and the round's nodes could hold at
/// once and one more (which says why the rest wait), at most 4,097 a
/// cycle; the rest wait in the record for later cycles. A job Slurm would
/// not start now whatever its nodes (a dependency not met, --begin to
/// come) is skipped. Throws slurm_error when the output is not what Slurm
/// writes; a job it cannot express is skipped, saying why, and a node
/// whose GPUs it cannot read is left out (snapshot::warnings).
snapshot build_round(std::string const& squeue_json, std::string const& sinfo_json, bridge_options const& opt);

/// What the bridge does to one job.
struct action {
  job_ref job;
  std::vector<std::string> nodes;  ///< placed: ReqNodeList, then released; empty: stays held
  std::string comment;             ///< AdminComment: where it goes, or why it waits
  bool requeue = false;            ///< a running job evicted (--preempt): requeued and held
  /// Released to Slurm's own scheduler with no nodes chosen (--fallback-after:
  /// no Placer answered); `comment` says why.
  bool to_slurm = false;
};

/// Evictions (--preempt) first, as requeues; placements become node lists; a placement of a -N job on fewer distinct
/// nodes than N (Placer put two replicas on one node) stays held, saying
/// so; unplaced and skipped jobs stay held with Placer's reason (no action
/// when their AdminComment says it already).
std::vector<action> decide(snapshot const& snap, round_result const& r);

/// Placer refused snap's round for one pending job's sake, which its
/// message names ("pending job N ('slurm-ID'): ..."): that job leaves the
/// round, skipped with Placer's words (it stays held, saying why), so that
/// the round can go again without it and one job never holds up the rest.
/// False, nothing changed, when the message names no job of the round.
bool drop_refused(snapshot& snap, std::string const& message);

/// Placer refused snap's round whole for its constraints (more distinct
/// constraint sets x node groups than it evaluates in one round: many jobs
/// each excluding its own nodes, -x): the pending jobs past the first half
/// leave this cycle's round and wait, held, for a later one. False,
/// nothing changed, when one job or none is left.
bool halve(snapshot& snap);

/// Failing open (`placer slurm-bridge --fallback-after S`, docs/slurm.md):
/// every held job of the snapshot, those Placer could place and those it
/// skipped, released to Slurm's own scheduler, each with an AdminComment
/// "placer: released to Slurm's scheduler: <why>". A released job is
/// pending and no longer held, so later cycles leave it to Slurm.
std::vector<action> release_to_slurm(snapshot const& snap, std::string const& why);

/// The three changes apply() makes to Slurm's jobs. Two ways to make them:
/// Slurm's CLI (scontrol_changes: a process per command) or libslurm's RPCs
/// from this process (make_libslurm_changes: about 6x faster a job,
/// bench/results/2026-11-26-dev-2core-slurm-apply-latency.md).
class job_changes {
 public:
  virtual ~job_changes() = default;
  /// The job's AdminComment and, when `nodes` (a comma list) is not
  /// empty, its ReqNodeList; a held job stays held. Throws slurm_error.
  virtual void update(job_ref const& job, std::string const& nodes, std::string const& comment) = 0;
  /// A running job back to pending and held. Throws slurm_error.
  virtual void requeue_hold(job_ref const& job) = 0;
  /// Releases held jobs; returns the ones it could not, saying why.
  virtual std::vector<skipped_job> release(std::vector<job_ref> const& jobs) = 0;
  /// "scontrol" or "libslurm", for the cycle's summary.
  [[nodiscard]] virtual char const* name() const = 0;
};

/// Through the CLI: `scontrol update JobId=N [ReqNodeList=..] AdminComment=..`,
/// `scontrol requeuehold N`, and one `scontrol release N,M,..` for all
/// (one by one if that fails, to tell which).
class scontrol_changes final : public job_changes {
 public:
  explicit scontrol_changes(command_runner run) : run_(std::move(run)) {}
  void update(job_ref const& job, std::string const& nodes, std::string const& comment) override;
  void requeue_hold(job_ref const& job) override;
  std::vector<skipped_job> release(std::vector<job_ref> const& jobs) override;
  [[nodiscard]] char const* name() const override { return "scontrol"; }

 private:
  command_runner run_;
};

/// Through libslurm, loaded at run time (dlopen of the soname of the
/// libslurm-dev this was built against, so the placer binary itself does
/// not need Slurm): the same RPCs scontrol sends, one per update, requeue
/// and release. Talks to the slurmctld of SLURM_CONF (or Slurm's default
/// configuration). Throws slurm_error saying why when this build has no
/// libslurm headers or the library cannot be loaded.
std::unique_ptr<job_changes> make_libslurm_changes();
/// Whether libslurm loads here and the controller answers its ping (once
/// per process: a slurmctld more than two releases newer than the
/// libslurm built against cannot read its messages), and if not why.
/// `--slurm-api auto` uses scontrol then.
bool libslurm_usable(std::string* why = nullptr);

/// Runs the actions: per evicted job its AdminComment, then the requeue
/// and hold (before any release, so the nodes it frees are the ones the
/// placed jobs were given); per placed job its ReqNodeList and
/// AdminComment, all of them, and then one release for them all (a crash
/// before the release leaves every job held, and the next cycle places it
/// again); per held job the update of its AdminComment; per job released
/// to Slurm (to_slurm) its AdminComment, then the same release. A failing change
/// is reported in the returned list (job id and error) and the others go on.
std::vector<skipped_job> apply(std::vector<action> const& actions, job_changes& slurm);
/// The same through scontrol, run by `run`.
std::vector<skipped_job> apply(std::vector<action> const& actions, command_runner const& run);

}  // namespace placer::slurm
