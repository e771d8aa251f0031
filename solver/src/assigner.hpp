#pragma once
// The assign stage: turns the score matrix into placements. Three modes:
//   - placer: per priority level (under queue order fifo and strict, per
//     window of the level's jobs in submission order: queue_window),
//     locality jobs (gangs, topology needs) go
//     first, largest first, under the lowest topology domain that holds them;
//     then the other replicas, by shape tier (largest first), through the
//     tier program on the backend (nodes bid for classes; kernels/include/
//     placer/kernels/tier.hpp), the tiers between two groups of host work
//     in one chain: one launch and one wait;
//   - greedy: every job in queue order takes its best cells one replica at a
//     time (the reference the tier assignment is measured against);
//   - kube: one job at a time, every node filtered and scored anew per
//     replica on the host (the kube-scheduler-style baseline).
// All modes commit through the same checks, so none can over-commit.

#include <placer/kernels/backend.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/solver/matrices.hpp>
#include <placer/solver/model.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace placer::detail {

enum class assign_mode { placer, greedy, kube };

/// A job's place in the queue order (job_order), compared field by field.
struct order_key {
  std::int64_t priority;     ///< minus the priority: the highest first
  std::int64_t size;         ///< minus the job's GPU milli (largest first), or 0
  std::int64_t models;       ///< GPU models allowed (1000: any), or 0
  std::int64_t submit_time;
  std::int32_t index;        ///< position in round_input::pending
  auto operator<=>(order_key const&) const = default;
};

/// group_order's working space, the caller's, reused across calls.
template <class Key>
struct group_scratch {
  std::vector<std::pair<Key, std::int32_t>> keys;  ///< the distinct keys and their groups, as first met, then sorted
  std::vector<std::int32_t> slots;                 ///< the keys' hash table: group, -1 empty
  std::vector<std::int32_t> group;                 ///< per item: its group
  std::vector<std::int32_t> starts;                ///< per group: where its items start in the order
};

/// Lays the items of `base` (the ids 0 .. base.size() - 1, each once) out
/// into `out` by key, stably: the keys ascending, one key's items in base's
/// order. key_of(item) has few distinct values (hash(key) hashes one):
/// found through a hash table and sorted, the items then counted into
/// place, O(items + keys log keys) where a sort of the items is O(items log
/// items) (the queue orders and the tiers of a round: 1,000 jobs in about
/// 100 groups at 10k).
template <class Key, class KeyOf, class Hash>
void group_order(std::vector<std::int32_t> const& base, KeyOf&& key_of, Hash&& hash, group_scratch<Key>& s,
                 std::vector<std::int32_t>& out) {
  auto const n = base.size();
  auto& keys = s.keys;
  auto& slots = s.slots;
  keys.clear();
  slots.clear();
  s.group.resize(n);
  // The slot of key's group, or the empty slot where it goes.
  auto const slot_of = [&](Key const& key) {
    std::size_t const mask = slots.size() - 1;
    auto slot = static_cast<std::size_t>(hash(key)) & mask;
    while (slots[slot] >= 0 && !(keys[static_cast<std::size_t>(slots[slot])].first == key)) slot = (slot + 1) & mask;
    return slot;
  };
  for (std::size_t item = 0; item < n; ++item) {
    if (2 * (keys.size() + 1) > slots.size()) {  // at most half full
      slots.assign(std::bit_ceil(std::max<std::size_t>(64, 4 * (keys.size() + 1))), -1);
      for (auto const& k : keys) slots[slot_of(k.first)] = k.second;
    }
    Key const key = key_of(static_cast<std::int32_t>(item));
    auto const slot = slot_of(key);
    if (slots[slot] < 0) {
      slots[slot] = static_cast<std::int32_t>(keys.size());
      keys.emplace_back(key, static_cast<std::int32_t>(keys.size()));
    }
    s.group[item] = slots[slot];
  }
  // Each group's start: the keys sorted, their items counted.
  std::sort(keys.begin(), keys.end());
  auto& starts = s.starts;
  starts.assign(keys.size(), 0);
  for (auto const g : s.group) ++starts[static_cast<std::size_t>(g)];
  std::int32_t at = 0;
  for (auto const& k : keys) {
    auto& start = starts[static_cast<std::size_t>(k.second)];
    std::int32_t const count = start;
    start = at;
    at += count;
  }
  out.resize(n);
  for (auto const item : base) {
    out[static_cast<std::size_t>(starts[static_cast<std::size_t>(s.group[static_cast<std::size_t>(item)])]++)] = item;
  }
}

/// job_order's working space, the caller's, reused across rounds.
struct order_scratch {
  std::vector<order_key> keys;   ///< per job
  std::vector<std::int32_t> base;  ///< the jobs by (submit time, index)
  group_scratch<order_key> groups;  ///< by (priority, size, models)
  /// Per place in the order: its job's priority, laid out by group. The
  /// walks of the order that compare neighbours' priorities read them here:
  /// read from the jobs' records, in the order's scattered job indices, each
  /// was a cache miss (detail::overtakes: 0.6% of the 100k round's samples).
  std::vector<std::int32_t> priority;
};

/// The assigner's working buffers, owned by the caller and reused across
/// rounds (the solver keeps one): a steady stream of same-shaped rounds
/// assigns without allocating, except for what goes into the result.
struct assigner_scratch {
  std::vector<std::int32_t> paths;                          ///< node x level -> domain (node_domain_paths)
  std::vector<std::int32_t> entry_node;                     ///< the nodes of (node, domain) pairs, by domain
  std::vector<std::int32_t> domain_begin;                   ///< n_domains + 1: CSR of the entries by domain
  std::vector<std::int32_t> domain_level;                   ///< n_domains: each domain's level
  std::vector<std::int32_t> domain_cursor;                  ///< counting-sort scratch
  std::vector<std::int32_t> order;                          ///< queue order
  order_scratch order_keys;                                 ///< job_order's scratch
  std::vector<std::pair<std::int64_t, std::int32_t>> tiers;  ///< (level x 1024 - tier, position in order)
  std::vector<std::pair<std::int64_t, std::int32_t>> tiers_sorted;  ///< their sort's scratch
  std::vector<std::int32_t> tier_base, tier_order;                  ///< its items, and their order
  group_scratch<std::int64_t> tier_groups;                          ///< its groups (tiers' keys)
  std::vector<std::int32_t> moved;                          ///< per job: its reorder key offset, or -1
  std::vector<std::int32_t> fifo;                           ///< queue order without largest-first (queue_window)
  order_scratch fifo_keys;                                  ///< its job_order scratch
  /// Per job: the group (a run of equal tier keys) it was placed in, in the
  /// order the groups ran; -1 = none (placer mode's last run).
  std::vector<std::int32_t> group_of;
  std::vector<std::int32_t> class_last_group;              ///< per class: the last group that uses it
  std::vector<std::uint8_t> live_class;                     ///< per class: 1 = this or a later group uses it
  /// The clock of current cells (kernels::tier_problem::stamp): class c's
  /// cell on node n is current when stamp[n] < fresh[c].
  std::vector<std::int32_t> stamp;  ///< per node: when it last changed
  std::vector<std::int32_t> fresh;  ///< per class: when its stale cells were last re-scored
  std::vector<std::int32_t> changes;   ///< nodes in the order they changed (each once between refreshes)
  std::vector<std::int32_t> fresh_at;  ///< per class: the length of `changes` when it was refreshed
  std::vector<std::uint64_t> node_bits;  ///< a bit a node, all clear between uses (node_bitset)
  std::vector<std::int32_t> refresh_nodes;  ///< a tier's refresh candidates (tier_problem::changed)
  std::vector<std::int32_t> tier_jobs;                      ///< one tier's non-locality jobs
  // Domain capacities of the classes with locality jobs (place_locality):
  // loaded from the backend a group's classes at a time, kept exact across
  // the host's commits, dropped when the tier program commits.
  std::vector<std::int32_t> locality_left;   ///< per class: locality jobs still to place
  std::vector<std::int32_t> cap_class;       ///< per slot: its class
  std::vector<std::int32_t> cap_slot;        ///< per class: its slot, -1 none
  std::vector<std::int32_t> cap_fresh;       ///< classes loaded by one call
  std::vector<std::int64_t> cap;             ///< slot x domain: replicas the domain holds
  std::vector<std::int32_t> fit_before;      ///< per slot: a node's fit count before a change
  std::vector<std::int32_t> fits;                           ///< domains that hold a job
  std::vector<std::int8_t> class_feasible;                  ///< per class: 1 fits some node, 0 none, -1 not known yet
  std::vector<std::int8_t> class_full;  ///< per class: 1 = no node takes a replica now (place_greedy), 0 not known
  std::vector<std::uint8_t> job_holds;  ///< per node: 1 = the distinct_nodes job being placed holds it (else all 0)
  std::vector<std::int32_t> linear_ok;    ///< linear_nodes: the nodes that can take a replica, in index order
  std::vector<std::int32_t> linear_pick;  ///< linear_nodes: the nodes chosen
  // Tier programs, chained: consecutive tiers with no host work between
  // them go to the backend as one chain (one launch, one wait; its first
  // tier's refresh candidates in refresh_nodes).
  struct chained_tier {
    std::vector<std::int32_t> jobs;  ///< the tier's jobs that can be placed somewhere
    std::vector<std::int32_t> row_class, demand, row_cap;
    std::vector<std::uint8_t> live_class;
    std::int32_t now = 0;
    kernels::tier_locality local;  ///< a locality job's tier (local.want > 0), else rows
    /// A queue window's draw or slot (kernels::tier_window): its block in
    /// `blocks` (-1: neither), and per job the index of its code.
    std::int32_t block = -1;
    kernels::tier_window window;
    std::vector<std::int32_t> job_code, row_jobs, per_node, masked;
  };
  std::vector<chained_tier> chain;  ///< the first chain_len are waiting
  std::size_t chain_len = 0;
  /// A queue window drawn by the program (chain_window): the waiting jobs
  /// at tiers[t0, t_end) of a level, in order, drawn against region w.
  struct window_block {
    std::size_t t0 = 0, t_end = 0;
    std::int64_t w = 0;
    std::size_t draw = 0;  ///< its chain entry
    std::size_t n_cut = 0;  ///< the jobs it draws, from t0 (the others wait: tier_window::beyond_gpu)
    std::vector<std::int64_t> demand;
    std::vector<std::int64_t> tier;  ///< per job: its tier (tier_of, job_tier_of)
    std::vector<std::int32_t> slot, code;
    std::int64_t free[2] = {0, 0};  ///< the draw's scratch
  };
  std::vector<window_block> blocks;  ///< the first n_blocks are the waiting chain's
  std::size_t n_blocks = 0;
  window_block here;  ///< a window drawn on the host (assigner::draw_here)
  std::vector<std::uint8_t> recorded;  ///< per job: 1 = an unplaced record was given before its tier ran
  std::vector<kernels::tier_problem> chain_problems;
  kernels::tier_results chain_out;
  std::vector<kernels::tier_placement> tier_out;  ///< one tier's placements, sorted
  std::vector<kernels::tier_placement> tier_sorted;  ///< the same, put in order
  std::vector<std::int32_t> node_at;                 ///< per node: its placement in tier_out
  std::vector<std::int32_t> class_row, cursor;
  std::vector<std::int32_t> live_job_class, live_job_want;  ///< per live job of a tier: its class and replicas
  std::vector<std::int32_t> state;  ///< per node: its state label (tier_problem::state), across the round's tiers
  std::vector<std::vector<replica_placement>> placed;  ///< per live job (moved into the result)
};

/// How the repair search and the queue order (solver.cpp) change a placer
/// round's order: the jobs in `first` go ahead of their priority level,
/// those in `last` after it, each in list order; with `whole_jobs` a
/// locality job ranks by its whole job's GPUs rather than one replica's (a
/// gang of six one-GPU replicas with the 6-GPU jobs). The jobs in `skip`
/// are left out (the caller reports them).
struct reorder {
  std::vector<std::int32_t> first, last, skip;
  bool whole_jobs = false;
};

class assigner {
 public:
  assigner(round_input const& in, round_matrices& m, std::vector<std::int32_t>& scores, kernels::score_params p,
           kernels::backend& backend, assign_mode mode, assigner_scratch& scratch);

  /// Places every pending job (or records why not). `out_of_time` is asked
  /// between jobs; once it says yes, the rest are reported DeadlineExceeded.
  /// Placer mode follows `r` (the repair search's changes of order). Greedy
  /// mode under policy::order strict stops each queue at its first job that
  /// cannot start: the later ones are QueueBlocked.
  void run(round_result& out, std::function<bool()> const& out_of_time, reorder const& r = {});

  /// Greedy mode: each job goes where Slurm's select/cons_tres would put it
  /// (its _eval_nodes): among the runs of consecutive nodes (by index) that
  /// can take a replica, the tightest run that holds the replicas (fewest
  /// CPUs free in all; the first of equals), and in it the nodes with the
  /// fewest CPUs free; no run holds them: the first nodes that can take
  /// one, by index (linear_nodes). A gang that asks for no topology level
  /// is placed so on the whole cluster (bench/slurm/offline_mix.py's model
  /// of Slurm without a topology plugin, which reproduced live
  /// placements); one that asks for a level, required or preferred, inside
  /// the deepest domain that holds it, best fit first, as Slurm's tree
  /// topology picks a leaf switch. The solver's other candidate under
  /// queue order (solver.cpp, "linear").
  void linear(bool on) { linear_ = on; }
  /// The run's last chain of tiers also brings the statistics of the state
  /// it leaves (backend::follow_up::stats): the round's statistics after,
  /// where nothing writes after it (the solver's main assignment).
  void stats_after(bool on) { stats_after_ = on; }
  /// The round's deadline (out_of_time's): each chain of tiers gets the
  /// time left as its budget (kernels::tier_problem::budget_ns), and the
  /// jobs of the tiers it did not start are DeadlineExceeded.
  void deadline(std::chrono::steady_clock::time_point at) { deadline_ = at; }

 private:
  // --- the three strategies
  void place_greedy(std::int32_t j, round_result& out);
  /// place_local, then one locality job of its class fewer to come.
  void place_locality(std::int32_t j, round_result& out);
  void place_local(std::int32_t j, round_result& out);
  /// Adds a tier of non-locality jobs to the chain waiting for the backend.
  void chain_tier(std::vector<std::int32_t> const& jobs, round_result& out);
  /// Adds a locality job to the chain, a tier the program places whole
  /// (kernels::tier_locality: place_local's choices, on the backend).
  void chain_local(std::int32_t j, round_result& out);
  /// The chain's next entry, and its end: the live classes, the first
  /// entry's refresh candidates and the clock.
  assigner_scratch::chained_tier& next_chained();
  void chain_add(assigner_scratch::chained_tier& t);
  /// A locality job that got no replica: why (place_local's words).
  void local_unplaced(std::int32_t j, round_result& out) const;
  /// Places the waiting chain (one backend call) and hands each tier's
  /// placements to its jobs; with `last`, the same call brings the
  /// statistics (stats_after).
  /// Returns where the chain stopped (a window with jobs past it: the
  /// tiers index of the first of them), else tiers' size.
  std::size_t run_chain(round_result& out, bool last = false);
  /// The groups from t0 on, chained; each level's jobs past its window
  /// drawn on the backend (chain_window).
  void chain_groups(std::size_t t0, round_result& out, std::function<bool()> const& out_of_time);
  /// Per job its group, per class its last group, from the tiers' keys.
  void number_groups();

  /// Queue order (policy::order fifo, strict): marks in `moved` the jobs
  /// past their level's window (the prefix the free capacity holds).
  void queue_window(std::vector<std::int32_t>& moved);
  /// GPU milli and CPU milli free on the nodes now, in all.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> free_capacity() const;
  /// Queue order: the groups from t0 on (jobs past a level's window, in
  /// order) get their next window, drawn by the program against the
  /// capacity free when it gets there: a draw and its slots added to the
  /// chain (kernels::tier_window). Returns past the level's waiting jobs,
  /// or t0 where the level has no window left to draw.
  std::size_t chain_window(std::size_t t0, round_result& out);
  /// The same window drawn here, where no tier is pending (the free
  /// capacity is the host's): the jobs keyed, their groups numbered.
  /// False where the level has no window left to draw.
  bool draw_here(std::size_t t0);
  /// The level's waiting jobs from t0 on: their demands and tiers into b;
  /// returns past the last of them.
  std::size_t window_jobs(std::size_t t0, assigner_scratch::window_block& b) const;
  /// After the chain: the block's jobs keyed by what its draw gave them,
  /// as queue_window keys the first (the window's groups largest
  /// first, the jobs past it waiting, in order, for the next).
  void window_keys(assigner_scratch::window_block const& b);

  // --- shared pieces
  /// Whether the job goes through place_locality in this mode.
  [[nodiscard]] bool goes_local(job const& j) const;
  /// Loads the domain capacities of the classes that have none (one call;
  /// slots laid out, every domain of each; s_.cap_fresh).
  void load_caps(std::vector<std::int32_t> const& classes);
  /// Class c's capacity per domain (loaded if it has none).
  std::int64_t const* caps_of(std::int32_t c);
  void drop_caps();
  /// Around a change of node n: the held capacities follow its fit counts.
  void caps_before(std::int32_t n);
  void caps_after(std::int32_t n);
  bool never_feasible(std::int32_t j, round_result& out);
  /// Whether job j's unplaced record is its first: a waiting job is a
  /// window's twice (chain_window), and chained again past a window that
  /// stopped (s_.recorded; always where the round keeps no windows).
  bool record_once(std::int32_t j);
  /// The jobs of the chain's tiers from `stop` on, which its budget left
  /// unrun: DeadlineExceeded (a window never drawn, every job of it).
  void expire_not_run(std::size_t stop, std::size_t k, round_result& out);
  void finish_job(std::int32_t j, std::vector<replica_placement>&& placed, round_result& out);
  [[nodiscard]] bool initially_feasible(std::int32_t c, std::int32_t n) const;
  /// The current score of class c on node n (with PLACER_VERIFY_SCORES
  /// set, checked against a fresh scoring: a stale read throws).
  [[nodiscard]] std::int32_t score(std::int32_t c, std::int32_t n) const;
  /// Whether no node takes a replica of class c now (every cell -1;
  /// PLACER_VERIFY_SCORES checks class_full by it).
  [[nodiscard]] bool takes_none(std::int32_t c) const;
  /// PLACER_VERIFY_SCORES: every live cell the clock calls current is the
  /// state's score, or logic_error.
  void verify_current() const;
  /// The topology weight in score units: the bonus of the first replica's node.
  [[nodiscard]] std::int64_t topo_unit() const { return static_cast<std::int64_t>(in_.pol.w.topology) * 1000; }
  [[nodiscard]] std::int64_t topo_bonus(job const& job, std::int32_t anchor, std::int32_t n) const;
  [[nodiscard]] std::int32_t domain_of(std::int32_t n, std::int32_t level) const {
    return s_.paths[static_cast<std::size_t>(n) * levels_ + level];
  }
  /// Best node for one replica of job (class c), inside a domain (-1: anywhere).
  [[nodiscard]] std::int32_t best_node(job const& job, std::int32_t c, std::int32_t domain,
                                       std::int32_t anchor, std::int32_t need = 1) const;
  /// best_node under linear(): `need` replicas still to place.
  [[nodiscard]] std::int32_t linear_node(job const& job, std::int32_t c, std::int32_t domain, std::int32_t need) const;
  /// Under linear(), a distinct_nodes job's `count` nodes chosen at once, as
  /// Slurm picks them (into s_.linear_pick; fewer when fewer can take one).
  void linear_nodes(std::int32_t c, std::int32_t domain, std::int32_t count);
  void place_replicas(job const& job, std::int32_t c, std::int32_t domain, std::int32_t count,
                      std::vector<replica_placement>& placed);
  replica_placement commit(std::int32_t n, std::int32_t c);
  /// The placement of class c on node n that took the GPUs in `taken` (bit i = GPU i).
  [[nodiscard]] replica_placement placement_of(std::int32_t n, std::int32_t c, std::uint64_t taken) const;
  void release_all(std::int32_t c, std::vector<replica_placement>& placed);
  /// Node n changed: every cell of it goes stale, and class c's (the job
  /// being placed reads it next) is re-scored.
  void changed(std::int32_t n, std::int32_t c);
  /// Re-scores class c's stale cells, before a job of it reads them.
  void refresh_class(std::int32_t c);
  [[nodiscard]] std::string level_name(std::int32_t l) const;

  round_input const& in_;
  round_matrices& m_;
  std::vector<std::int32_t>& scores_;
  kernels::score_cell_op op_;
  kernels::backend& backend_;
  assign_mode mode_;
  bool whole_jobs_ = false;  ///< the round's reorder::whole_jobs (job_tier_of)
  std::int32_t levels_ = 1;
  assigner_scratch& s_;
  std::int32_t now_ = 0;  ///< the clock of stamp and fresh
  bool verify_ = false;   ///< PLACER_VERIFY_SCORES: check the cells read (tests)
  bool linear_ = false;   ///< greedy mode: Slurm's node choice (linear())
  bool stats_after_ = false;  ///< the last chain brings the statistics (stats_after())
  std::optional<std::chrono::steady_clock::time_point> deadline_;  ///< deadline()
};

/// Stacking's last step (policy::stacking): this round's replicas of jobs
/// without a locality need leave the nodes they use least, for other nodes
/// already in use, when the fragmentation of the nodes involved (FGD, the
/// round's typical task set) drops; so the round's small jobs end on as few
/// nodes as their shapes and constraints allow, and whole nodes stay free
/// for whole-node jobs. Feasibility is the score stage's (a cell >= 0 on
/// the state as it is), so every rule of a placement holds. Moves commit
/// into `m` and `out` (and are declared to the backend); at most `budget`
/// cells are scored. Returns the replicas moved.
std::int32_t consolidate(round_input const& in, round_matrices& m, kernels::score_params const& p, round_result& out,
                         kernels::backend& backend, std::int64_t budget);

/// The packing repair (solver.cpp, the round's "repack" stage): the round's
/// replicas of jobs without a locality need are taken off their nodes and
/// placed again one at a time, the largest replica first (then queue order),
/// each on the node the round's score ranks best on the state as it is then
/// (the lowest index of equals): greedy's choice, on the same scores, for
/// the jobs the assignment chose to start. An iteration of the tier program
/// gives a node one copy at most, so a round's jobs of one shape land one a
/// node, where one at a time they would have filled one node after the
/// other. The repair is kept unless it leaves more nodes partly used, or
/// as many and a larger FGD fragmentation (the round's typical task set);
/// every job keeps its replicas either way. Under queue order (fifo,
/// strict) a job that waits for capacity while a later job of its level
/// started has the promise that it does not fit on what the jobs ahead of
/// it left: when the repaired round breaks it (checked as the tests check
/// it from outside), the jobs up to the last such job in queue order stay
/// where they are and only the later ones are placed again. Nothing moves
/// when nodes x replicas to place passes `budget` (the 10k and 100k
/// rounds), or when one replica would not find room again. Moves are
/// declared to the backend. Returns the replicas that moved (0: the round
/// as it was, also when the repair only swapped jobs between equal places).
/// `scratch` is the caller's, reused across rounds (no allocation once a
/// round of this size was seen).
struct repack_scratch {
  std::vector<std::int32_t> fifo;
  order_scratch keys;
  std::vector<std::uint8_t> state;      ///< per job: 1 started, 2 waits for capacity
  std::vector<std::int32_t> pos;        ///< per job: its place in queue order
  std::vector<std::uint8_t> promised;   ///< per queue position: 1 = a job promised it does not fit
  std::vector<std::int32_t> movable;    ///< placements placed again, in the order they go
  std::vector<std::int32_t> classes;    ///< their classes, each once
  std::vector<std::int32_t> slot;       ///< per class: its place in `classes`, -1 none
  std::vector<std::int32_t> cells;      ///< per (slot, node): the class's score on the node
  std::vector<std::int32_t> first_pos;  ///< per class: the queue position of its first job moved
  std::vector<std::int32_t> version;    ///< per node: bumped at each commit
  std::vector<std::uint8_t> pristine;   ///< per node: 1 = as the score stage saw it (before any commit)
  std::vector<std::int32_t> cell_version;  ///< per (slot, node): the node's version its cell was scored at
  std::vector<std::int64_t> frag_before;   ///< per node: its fragmentation, at frag_version
  std::vector<std::int32_t> frag_version;
  std::vector<std::int32_t> touched;    ///< nodes changed, in order
  std::vector<std::uint8_t> is_touched;
  std::vector<std::int32_t> gpu_before;  ///< the touched nodes' GPUs before, in their order
  std::vector<std::int64_t> before;      ///< per touched node: CPU, memory, partly used, fragmentation
  std::vector<std::pair<std::int32_t, std::uint64_t>> was;  ///< per replica moved: its node and GPUs before
  // The promise's check: the cluster the jobs ahead of a waiting one left.
  std::vector<std::int32_t> view_gpu;
  std::vector<std::int64_t> view_cpu, view_mem;
  std::vector<std::int32_t> placement_of;  ///< per job: its placement, -1 none
  std::vector<std::uint8_t> no_fit;        ///< per class: 1 = one replica did not fit
  std::vector<std::int64_t> domain_cap;    ///< per domain (+1: the cluster): replicas it holds
};
/// PLACER_VERIFY_SCORES is set: every score cell the host reads is checked
/// against a fresh scoring (tests), so the host holds every cell.
bool verify_scores();

/// The round as its score stage left it, when the caller kept it (the
/// solver does for the rounds the repair may run on): its node arrays and
/// score matrix. Null: every cell the repair reads is scored anew.
struct scored_round {
  round_matrices const* m = nullptr;
  std::vector<std::int32_t> const* scores = nullptr;
};
std::int32_t repack(round_input const& in, round_matrices& m, kernels::score_params const& p, round_result& out,
                    kernels::backend& backend, std::int64_t budget, repack_scratch& scratch,
                    scored_round const& scored = {});

/// Queue order into `order`: priority, then (largest_first, placer) the
/// largest total GPU demand and the fewest GPU models allowed first, then
/// submit time, then index. `scratch` is the caller's, reused.
void job_order(round_input const& in, bool largest_first, std::vector<std::int32_t>& order, order_scratch& scratch);

}  // namespace placer::detail
