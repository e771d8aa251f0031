#pragma once
// The job side of the domain model and one round's input and output.
// Mirrors schemas/placement.fbs; service/src/codec.cpp converts between them,
// and nothing in solver/ or kernels/ sees wire types.

#include <placer/topology/cluster.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace placer {

enum class job_kind : std::uint8_t { training = 0, inference = 1, batch = 2 };

/// Per-replica demand. `gpus == 1 && gpu_milli < 1000` is a fractional share
/// of one GPU; otherwise each of the `gpus` GPUs is taken whole.
struct demand {
  std::int32_t gpus = 0;
  std::int32_t gpu_milli = milli_per_gpu;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;

  [[nodiscard]] bool fractional() const { return gpus == 1 && gpu_milli < milli_per_gpu; }
  /// Total milli-GPU of one replica.
  [[nodiscard]] std::int64_t gpu_milli_total() const { return static_cast<std::int64_t>(gpus) * gpu_milli; }
  bool operator==(demand const& o) const {
    return gpus == o.gpus && gpu_milli == o.gpu_milli && cpu_milli == o.cpu_milli && memory_mib == o.memory_mib;
  }
};

enum class topology_mode : std::uint8_t { none = 0, preferred = 1, required = 2 };

/// Kubernetes node-affinity operators (NodeSelectorRequirement).
enum class selector_op : std::uint8_t { in = 0, not_in = 1, exists = 2, does_not_exist = 3, gt = 4, lt = 5 };

struct selector_requirement {
  std::string key;
  selector_op op = selector_op::in;
  std::vector<std::string> values;  ///< In/NotIn: one or more; Gt/Lt: one integer; Exists/DoesNotExist: none
  bool operator==(selector_requirement const&) const = default;
};

/// Expressions ANDed. A term with none matches no node (as in Kubernetes).
struct selector_term {
  std::vector<selector_requirement> match;
  bool operator==(selector_term const&) const = default;
};

struct preferred_term {
  std::int32_t weight = 1;  ///< 1..100
  selector_term term;
  bool operator==(preferred_term const&) const = default;
};

enum class toleration_op : std::uint8_t { equal = 0, exists = 1 };

struct toleration {
  std::string key;  ///< empty with `exists`: every taint
  toleration_op op = toleration_op::equal;
  std::string value;
  std::int8_t effect = -1;  ///< a taint_effect, or -1: every effect
  bool operator==(toleration const&) const = default;
};

/// Where a job's replicas may run, in Kubernetes' words (solver/constraints.hpp
/// evaluates them): labels the node must carry, required node-affinity terms
/// (ORed), preferred terms (a score), and the taints it tolerates.
struct node_constraints {
  std::vector<std::string> node_selector;  ///< "key=value", all required
  std::vector<selector_term> required;     ///< empty: any node
  std::vector<preferred_term> preferred;
  std::vector<toleration> tolerations;
  [[nodiscard]] bool empty() const {
    return node_selector.empty() && required.empty() && preferred.empty() && tolerations.empty();
  }
  bool operator==(node_constraints const&) const = default;
};

struct job {
  std::string name;
  job_kind kind = job_kind::training;
  std::int32_t priority = 0;
  std::string queue;
  std::int32_t replicas = 1;
  demand per_replica;
  std::vector<std::string> allowed_gpu_models;  ///< empty = any model
  bool gang = false;
  std::int32_t topology_level = -1;  ///< all replicas under one domain of this level
  topology_mode topo_mode = topology_mode::none;
  float network_sensitivity = 0.0F;  ///< 0..1
  /// Elastic range: with min_replicas > 0 and the elastic policy on, the job
  /// starts as a gang of start_replicas() (`replicas` clamped into the
  /// range), may grow to max(max_replicas, min_replicas) into spare GPUs,
  /// and be shrunk to min_replicas for blocked jobs; otherwise `replicas`.
  std::int32_t min_replicas = 0;
  std::int32_t max_replicas = 0;
  /// The size an elastic job starts at: the one it asks for, within its range.
  [[nodiscard]] std::int32_t start_replicas() const {
    return min_replicas > 0 ? std::clamp(replicas, min_replicas, std::max(max_replicas, min_replicas)) : replicas;
  }
  bool preemptible = false;
  std::int64_t submit_time = 0;
  std::int64_t estimated_duration = 0;
  node_constraints constraints;
  /// Each replica on a node of its own (Slurm's -N, a pod anti-affinity on
  /// the hostname): a multi-replica job is placed by the locality path,
  /// which skips the nodes the job already holds, and its domain capacity
  /// counts one replica a node (kernels fit_count, class_view::one_per_node).
  bool distinct_nodes = false;
  bool operator==(job const&) const = default;
};

/// Where one replica runs: a node and the GPUs it holds there, each at
/// `gpu_milli` (1000 for whole GPUs).
struct replica_placement {
  std::int32_t node = -1;
  std::vector<std::int32_t> gpus;
  std::int32_t gpu_milli = milli_per_gpu;
  bool operator==(replica_placement const& o) const {
    return node == o.node && gpus == o.gpus && gpu_milli == o.gpu_milli;
  }
};

struct running_job {
  std::string name;
  job_kind kind = job_kind::training;
  std::int32_t priority = 0;
  demand per_replica;
  std::vector<replica_placement> replicas;
  bool gang = false;
  bool preemptible = false;
  bool loaned = false;
  std::int32_t min_replicas = 0;  ///< elastic: may shrink to this; 0 = not elastic
  std::int32_t max_replicas = 0;  ///< elastic: may grow to this
  float network_sensitivity = 0.0F;
  std::int64_t start_time = 0;
  std::int64_t estimated_end = 0;
  std::int64_t last_checkpoint = 0;
  node_constraints constraints;  ///< where an elastic scale-out may add replicas
  std::string queue;             ///< counts toward this queue's usage (round_input::queues)
  bool operator==(running_job const&) const = default;
};

enum class algorithm : std::uint8_t {
  placer = 0,                ///< batched backend scoring + assignment
  greedy = 1,                ///< same scores, plain greedy
  kube_least_allocated = 2,  ///< one job at a time, kube-scheduler style
  kube_most_allocated = 3,
  first_fit = 4,             ///< FIFO, first feasible node in node order (baseline)
};

/// "placer", "greedy", "kube-least", "kube-most", "first-fit" (also the
/// enum spellings); throws logic_error(invalid_argument) listing them.
algorithm parse_algorithm(std::string const& name);
char const* algorithm_name(algorithm a);

/// Score weights (integers so both backends agree bit for bit).
struct weights {
  std::int32_t binpack = 5;
  std::int32_t fragmentation = 200;
  std::int32_t topology = 50;
  std::int32_t pool_affinity = 20;
  std::int32_t scarcity = 100;
  std::int32_t affinity = 100;  ///< preferred node affinity, untolerated PreferNoSchedule taints
};

enum class backfill_mode : std::uint8_t { off = 0, easy = 1, conservative = 2 };

/// The policies that act across rounds (docs/policies.md). All off except
/// loaning, which only takes effect on nodes the caller marks loanable.
struct queue_policy {
  /// EASY: the first blocked job in queue order gets a reservation; later
  /// jobs start now only if they do not delay it. Conservative: every
  /// blocked job (up to max_reservations) gets one.
  backfill_mode backfill = backfill_mode::off;
  std::int32_t max_reservations = 8;
  /// A job that cannot be placed may preempt preemptible jobs of strictly
  /// lower priority, the set with the least lost work (GPUs x time since
  /// the last checkpoint); gangs whole or not at all.
  bool preemption = false;
  /// Preemption for a higher priority takes only victims whose work since
  /// their last checkpoint (or start) is at most this many seconds: a
  /// blocked job waits for a victim's next checkpoint rather than destroy
  /// its work (a queue reclaiming its guarantee does not wait). -1: any.
  /// 120 s: across the ITP clusters and loads it took preemption's worst
  /// mean-wait ratio to no policy from 1.83 to 0.99 (docs/policies.md,
  /// "Preemption with minimum cost").
  std::int64_t preempt_max_lost_s = 120;
  /// Training may borrow loanable inference nodes; inference jobs that do
  /// not fit reclaim them (lowest server preemption cost first).
  bool loaning = true;
  /// The cluster manager asks for this many loaned nodes back now (on top of
  /// what unplaced inference jobs need); 0 = only what they need.
  std::int32_t reclaim_nodes = 0;
  /// With loaning on, inference jobs that do not fit take loaned nodes back
  /// by themselves (training placed there this round included). Off: only
  /// reclaim_nodes is honoured, the cluster manager decides when to reclaim.
  bool auto_reclaim = true;
  /// Elastic jobs (min..max replicas) get spare GPUs by a multiple-choice
  /// knapsack on estimated JCT reduction; reclaim shrinks them first.
  bool elastic = false;
  /// Communication-heavy gangs (network_sensitivity >= sensitivity_threshold,
  /// more than one node) wait up to an auto-tuned per-class timer for a
  /// consolidated placement.
  bool delay_scheduling = false;
  float sensitivity_threshold = 0.5F;
  std::int64_t delay_timer_max = 1800;  ///< seconds; cap on any timer
  /// A deferred or spread sensitive gang may preempt lower-priority,
  /// insensitive, preemptible work inside one domain to consolidate.
  bool network_preemption = false;

  /// True when any policy beyond one round's assignment is switched on
  /// (loaning alone is handled in the round unless something must be
  /// reclaimed: see solver::solve).
  [[nodiscard]] bool any_cross_round() const {
    return backfill != backfill_mode::off || preemption || elastic || delay_scheduling || network_preemption ||
           reclaim_nodes > 0;
  }
};

/// How a round orders the jobs of one priority level (docs/policies.md,
/// "Queue order").
///   - fifo: submission order decides who starts. Within a level a later job
///     never takes capacity that an earlier job needed to start in this
///     round (Slurm's backfill promise, Kueue's BestEffortFIFO); packing
///     (largest-first tiers, the assignment, FGD scoring) then works
///     inside what is left. The default.
///   - pack: largest first, then most constrained, then submission order:
///     the most GPUs placed, at the price of small jobs waiting behind later
///     large ones.
///   - strict: as fifo, but a job that cannot start blocks every later job
///     of its queue and level (Kueue's StrictFIFO).
enum class queue_order : std::uint8_t { fifo = 0, pack = 1, strict = 2 };

/// "fifo", "pack", "strict"; throws logic_error(invalid_argument) listing them.
queue_order parse_queue_order(std::string const& name);
char const* queue_order_name(queue_order o);

/// A job's effective priority grows with its wait (Slurm's PriorityWeightAge
/// and PriorityMaxAge): priority + weight x min(now - submit_time, max_age_s)
/// / max_age_s, rounded down. Unless `cross_priority`, the growth stops one
/// short of the next higher explicit priority among the round's jobs, so an
/// old job never jumps a higher class. weight 0: no aging.
struct aging {
  std::int32_t weight = 0;
  std::int64_t max_age_s = 7 * 24 * 3600;
  bool cross_priority = false;
  /// The points a job submitted at `submit_time` has gained by `now`
  /// (max_age_s >= 1; a wait below 0 counts 0).
  [[nodiscard]] std::int64_t points(std::int64_t now, std::int64_t submit_time) const {
    return weight * std::clamp<std::int64_t>(now - submit_time, 0, max_age_s) / max_age_s;
  }
  bool operator==(aging const&) const = default;
};

struct policy {
  algorithm algo = algorithm::placer;
  weights w;
  queue_policy queue;
  queue_order order = queue_order::fifo;
  aging age;
  /// Stacking (wire Policy.stacking): a tier row of whole GPUs places at
  /// most ceil(copies / replicas one node holds) per iteration, so equal
  /// nodes are filled one after the other rather than one copy each.
  bool stacking = false;
  /// The packing repair after the assignment (the round's "repack" stage,
  /// docs/architecture.md): the round's single-node jobs placed again one
  /// at a time on the same scores. Not on the wire: on for every request;
  /// off only to measure what it does (`placer simulate --no-repack`).
  bool repack = true;
};

/// A queue (a tenant) of a round's queue tree. Jobs name their queue in
/// job::queue; a queue's usage is its own running and placed work plus its
/// children's. -1 = no limit. Siblings share their parent's capacity by
/// deserved share: each its guarantee, then the rest by weight (quotas.hpp).
struct queue_spec {
  std::string name;
  std::string parent;  ///< "" = a root
  std::int64_t gpu_milli_limit = -1;
  std::int64_t cpu_milli_limit = -1;
  std::int64_t gpu_milli_guarantee = 0;
  std::int64_t cpu_milli_guarantee = 0;
  std::int32_t weight = 1;  ///< 1..1000
  bool operator==(queue_spec const&) const = default;
};

/// A session's memory of its nodes' constraint-group keys (the labels on
/// the keys the round's selectors ask about, and the taints), so that a
/// delta round reads the labels of the nodes the delta brought alone, not
/// every label of every node (constraint_tables::build). Held by the
/// service with a session, at most one key per node (each no longer than
/// the node's labels and taints). Never encoded.
struct node_label_memo {
  std::vector<std::string> keys;      ///< the asked keys the entries were made for
  std::string names;                  ///< and the values named (constraint_tables::names)
  /// Per node: its group key, or empty where the node changed since (a
  /// group key is never empty: it holds at least the taints' separator).
  std::vector<std::string> node_key;
  /// Follows apply_delta(c, d, undo) on the cluster (now `nodes` nodes):
  /// changed nodes stale, removed ones out, added ones stale.
  void follow(delta_undo const& undo, std::size_t nodes);
  void clear() {
    keys.clear();
    names.clear();
    node_key.clear();
  }
};

struct round_input {
  cluster state;
  /// Queues with limits (empty: job::queue is not read). A round never
  /// lets a queue (with its children) hold more than its limits: the jobs
  /// that would take it past them are not placed (QuotaExceeded).
  std::vector<queue_spec> queues;
  std::vector<job> pending;
  std::vector<running_job> running;
  policy pol;
  std::int64_t now = 0;
  std::uint64_t deadline_us = 0;  ///< 0 = none
  /// The round a sub-problem belongs to: set by the cross-round policies
  /// for the sub-problems they solve, never encoded. Its pending and
  /// running work define the score's context (FGD's typical task set, the
  /// GPU models' scarcity), so a sub-problem scores nodes as its round
  /// does: a policy with nothing to do leaves the round's placements as
  /// they are without it. Null: this round is its own context.
  round_input const* context = nullptr;
  /// Every node was validated before (validate(), check_node_limits): set
  /// by the service for a delta round, whose session's cluster passed both
  /// when it came and whose delta's nodes were checked as it was applied,
  /// so the per-node checks are not paid again for every node and label of
  /// the cluster each round. Never encoded; the topology, the jobs and the
  /// nodes' names are checked all the same.
  bool nodes_validated = false;
  /// The session's label memo for this round's cluster, or null (then every
  /// node's labels are read). Used by the round itself, not its sub-problems.
  node_label_memo* label_memo = nullptr;
};

enum class unplaced_reason : std::uint8_t {
  none = 0,
  no_feasible_node = 1,
  insufficient_capacity = 2,
  gang_incomplete = 3,
  topology_unsatisfiable = 4,
  invalid_job = 5,
  deadline_exceeded = 6,
  reserved = 7,
  deferred = 8,
  quota_exceeded = 9,
  queue_blocked = 10,  ///< strict order: an earlier job of its queue cannot start
};
char const* to_string(unplaced_reason r);

struct placement {
  std::int32_t job = -1;  ///< index into round_input::pending
  std::vector<replica_placement> replicas;
};

/// Why a node cannot take a replica of a job: the first check it fails,
/// in this order (docs/architecture.md, "Explanations").
enum class node_exclusion : std::uint8_t {
  unhealthy = 0,
  pool = 1,        ///< another pool (and not lent to this job's kind)
  gpu_model = 2,   ///< no GPU model the job allows, or no GPUs
  affinity = 3,    ///< node selector or required node affinity
  taint = 4,       ///< a NoSchedule or NoExecute taint the job does not tolerate
  cpu = 5,         ///< not enough free CPU
  memory = 6,
  gpus = 7,        ///< not enough fully free GPUs
  gpu_share = 8,   ///< no GPU with a large enough free share
  taken = 9,       ///< had room when the round began; this round's placements took it
};
char const* to_string(node_exclusion e);

struct exclusion_count {
  node_exclusion reason = node_exclusion::unhealthy;
  std::int32_t nodes = 0;
  std::string detail;  ///< the taint ("team=infer:NoSchedule"), else empty
  bool operator==(exclusion_count const&) const = default;
};

/// Why an unplaced job is unplaced, in numbers (filled by the solver for
/// every unplaced job whose reason is about room: NoFeasibleNode,
/// InsufficientCapacity, GangIncomplete, TopologyUnsatisfiable and
/// Reserved; a Deferred job waits by choice).
struct explanation {
  std::int32_t nodes = 0;  ///< nodes in the round (0: not explained)
  std::vector<exclusion_count> excluded;  ///< nodes by the first check failed, most first
  std::int32_t replicas_fit = 0;       ///< replicas the cluster could hold at the round's start
  std::int32_t replicas_required = 0;  ///< replicas the job needs at once (a gang: all)
  std::string best_domain;             ///< required topology: the domain that holds most
  std::int32_t best_domain_fit = 0;
  bool outbid = false;                 ///< nodes it fitted on were taken this round...
  std::int32_t outbid_priority = 0;    ///< ...by jobs of at most this priority
  /// The most it could ever get: replicas the nodes that admit it (healthy
  /// or not) could hold were they empty, and with a required topology, the
  /// most one domain of its level could hold so, counted until they reach
  /// what it needs (exact when `never`). `never`: a gang that needs more at
  /// once, so no round on this cluster as it is can start it (as Slurm's
  /// PartitionNodeLimit says of a job).
  std::int32_t replicas_fit_empty = 0;
  std::int32_t best_domain_fit_empty = 0;
  bool never = false;
  bool operator==(explanation const&) const = default;
};

struct unplaced {
  unplaced() = default;
  /// `why` is filled by explain_unplaced after the round, so the stages
  /// that find a job unplaced say only the reason and the detail.
  unplaced(std::int32_t j, unplaced_reason r, std::string d, explanation w = {})
      : job(j), reason(r), detail(std::move(d)), why(std::move(w)) {}
  std::int32_t job = -1;
  unplaced_reason reason = unplaced_reason::none;
  std::string detail;
  explanation why;
};

struct preemption {
  std::string job;         ///< running job name (a gang is preempted whole)
  std::string reason;      ///< "priority", "reclaim", "network", "quota" (a queue below its guarantee)
  std::int32_t for_job = -1;     ///< pending index it makes room for; -1 for a reclaim
  std::int64_t lost_work = 0;    ///< milli-GPU x seconds since the last checkpoint
};

/// Replicas added to (scale-out) or removed from (scale-in) a running
/// elastic job.
struct scale_change {
  std::string job;
  std::vector<replica_placement> replicas;
  std::string reason;  ///< "elastic", "reclaim"
};

struct reservation {
  std::int32_t job = -1;
  std::vector<std::int32_t> nodes;
  std::int64_t start_time = 0;
};

/// One job class's delay-scheduling timer (docs/policies.md).
struct delay_timer {
  std::string job_class;       ///< e.g. "gang-nodes:2-3/sens:high"
  std::int64_t timer = 0;      ///< seconds a gang of this class may wait
  std::int64_t observed_wait = 0;  ///< smoothed wait until a consolidated placement
  std::int32_t samples = 0;
};

/// What the across-round policies remember between rounds of one session
/// (the service keeps one per session, the simulator one per run).
struct queue_memory {
  std::map<std::string, delay_timer> timers;            ///< by job_class
  std::map<std::string, std::int64_t> deferred_since;   ///< job name -> first round it was deferred
};

/// Cluster-level metrics before and after the round (docs/metrics.md).
struct round_metrics {
  double gar_before = 0, gar_after = 0;
  double gfr_before = 0, gfr_after = 0;
  double frag_ratio_before = 0, frag_ratio_after = 0;
  std::int32_t jobs_placed = 0;
  std::int32_t replicas_placed = 0;
  std::int64_t gpu_milli_placed = 0;
};

struct stage_timing {
  std::string stage;
  double micros = 0;
  /// Backend steps of the stage (kernels/steps.hpp): stage calls (Thrust
  /// calls, kernel launches) and device-to-host waits. The same on every
  /// backend; `total` carries the round's sums.
  std::int64_t calls = 0;
  std::int64_t waits = 0;
  /// Bytes the stage copied to the device and back (a backend with memory
  /// of its own: the CUDA backend and its twin; 0 on the CPU backend).
  std::int64_t bytes_up = 0;
  std::int64_t bytes_down = 0;
  /// Grid-wide barriers inside the device's stage calls (steps.hpp): the
  /// GPU model prices them; in process only, not on the wire.
  std::int64_t grid_syncs = 0;
};

struct round_result {
  std::uint64_t epoch = 0;
  std::vector<placement> placements;  ///< by job
  std::vector<preemption> preemptions;
  std::vector<reservation> reservations;
  std::vector<unplaced> unplaced_jobs;  ///< by job
  std::vector<scale_change> scale_outs;   ///< running elastic jobs grown
  std::vector<scale_change> scale_ins;    ///< running elastic jobs shrunk
  std::vector<std::int32_t> reclaimed_nodes;  ///< loanable nodes taken back for inference
  std::vector<delay_timer> delay_timers;  ///< current timers (delay scheduling on)
  round_metrics metrics;
  std::vector<stage_timing> timing;
  std::string backend;
};

}  // namespace placer
