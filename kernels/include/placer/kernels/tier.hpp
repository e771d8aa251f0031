#pragma once
// The tier assignment: the auction stage of a round, as one device program.
//
// A tier is a set of rows (classes of identical replicas) with a demand
// each: rows are few (tens), nodes many (thousands). The program therefore
// turns the auction around: **nodes bid for rows**. Each row is an object
// with `remaining[r]` identical copies; a node takes at most one copy per
// iteration; values are the current score matrix. In one iteration the
// program solves that assignment with a forward auction (every unassigned
// node bids for its best row at price + (best margin - second margin) + 1;
// a row keeps its `remaining[r]` best bids, evicting the lowest), commits
// every winner in one parallel step (the winners are on different nodes),
// re-scores those nodes' cells of the rows still open, and iterates with
// the rest until nothing more fits. A bidding round costs O(R) per active node,
// not a scan of every node per row, and the number of rounds depends on
// the competition between rows, not on the number of replicas.
//
// The result is the same assignment problem the previous replica-bids-for-
// nodes auction solved per iteration (at most one replica per node, scores
// of the node's next replica), within one score unit per node of the
// optimum (epsilon = 1), with fixed tie rules: margins tie to the lower row,
// bids to the lower node. kernels/portable/tier_program.hpp has the program.
//
// Public header: host compiler only, no CUDA types.

#include <placer/kernels/views.hpp>

#include <atomic>
#include <cstdint>
#include <vector>

namespace placer::kernels {

/// A locality job the program places itself (tier_problem::local; issue
/// 53, item 1: the gangs on the device, not on the host between chains):
/// the replicas of the tier's one row, `want` of them (its demand), whole
/// inside one domain, as the host's assigner::place_local places them in
/// the placer mode. The deepest level first, from levels - 1 up to `top`;
/// at a level, the domains that hold the whole job by their capacity
/// (fit_count summed over their nodes) least first, ties to the lower
/// index; in a domain, each replica on its best node (score plus the
/// topology bonus of sharing deeper domains with the first replica,
/// ties to the lower node), a node of its own per replica where
/// `distinct`. A domain that cannot take all of them gives back what it
/// took (only a distinct job's can fail). Where no domain holds it, a job
/// that is not a gang takes what fits: in the roomiest domain of its
/// required level, or anywhere.
struct tier_locality {
  std::int32_t want = 0;  ///< replicas; 0: the tier is rows bid for, not a locality job
  std::int32_t top = 0;   ///< the least deep level tried (the required level, else 0)
  bool gang = false;
  bool required = false;  ///< a required topology level (`top`)
  bool distinct = false;  ///< a node of its own per replica
  std::int64_t topo_unit = 0;  ///< the policy's topology weight x 1000: the bonus of the first replica's node
};

/// The cluster's topology as a locality job reads it: each domain's nodes
/// (a CSR over entries, in node order), each domain's level, and each
/// node's domain at each level (-1: none). Null arrays: no domains.
struct tier_topology {
  std::int32_t n_domains = 0;
  std::int32_t levels = 1;
  std::int32_t const* begin = nullptr;        ///< n_domains + 1
  std::int32_t const* node = nullptr;         ///< begin[n_domains]
  std::int32_t const* level = nullptr;        ///< n_domains
  std::int32_t const* node_domain = nullptr;  ///< n_nodes x levels
};

/// A level's next queue window, drawn by the program (issue 53, item 1:
/// the windows on the device, not drawn on the host between chains). The
/// jobs that wait past their level's window, in submission order; the
/// next window is their longest prefix whose GPUs and CPUs what is free
/// now holds (each job fitting what the ones before it leave), and a job
/// larger than all that is free cannot start: it goes first, alone, and
/// does not close the window (draw_window, the rule the assigner's
/// queue_window also keeps for each level's first window). A draw is a
/// tier of its own (`draw`) that places nothing; its slots are the tiers
/// after it, each placing the jobs the draw gave it
/// (a row's demand the replicas of its jobs with the slot's code) and
/// skipped where it gave none. Where some job is past the window the chain
/// stops after the slots: the tiers after them wait for the next draw.
struct tier_window {
  // The draw's.
  bool draw = false;  ///< a draw (n_slots may be 0: no job it draws fits a node)
  std::int32_t n_jobs = 0;
  std::int64_t const* job_demand = nullptr;  ///< 2 x n_jobs: GPU milli, CPU milli
  /// 2 x n_jobs: the slot a job joins in the window, and the one it joins
  /// where it cannot start (-1: none, a job no node can host).
  std::int32_t const* job_slot = nullptr;
  std::int32_t n_slots = 0;      ///< the tiers right after the draw that are its slots
  /// The most replicas its slots place: they share one region of the
  /// chain's placements, the draw's (tier_out_begin), as a job is in one.
  std::int32_t copies = 0;
  std::int64_t* free = nullptr;  ///< 2, scratch: the free GPU and CPU milli
  /// The most GPU and CPU milli a waiting job after the n_jobs asks for
  /// (-1: none after them). The draw is left incomplete where the window
  /// is still open after the n_jobs or one of those cannot start: the
  /// chain stops before its slots (code 2 below), and the next is drawn
  /// on the host.
  std::int64_t beyond_gpu = -1, beyond_cpu = -1;
  /// n_jobs + n_slots + 1, written by the draw: per job 0 past the window,
  /// 1 in it, 2 cannot start; per slot 1 where it has a job; last, 1 where
  /// some job is past the window (the chain stops after the slots), 2
  /// where the draw is incomplete (it stops before them), else 0.
  std::int32_t* code = nullptr;
  // A slot's (code is its draw's).
  std::int32_t live = -1;  ///< code[live]: whether the slot has a job; -1: not a slot
  std::int32_t want = 0;   ///< the code of its jobs
  /// A rows slot: n_rows + 1 offsets into the pairs after them, then a
  /// (job, replicas) pair for each of its jobs, by row.
  std::int32_t const* row_jobs = nullptr;
  /// A rows slot with a row cap: per row, the most replicas of the row a
  /// node holds (the cap is the demand over it, rounded up), else null.
  std::int32_t const* per_node = nullptr;
  std::int32_t* masked = nullptr;  ///< a rows slot: 2 x n_rows, written: each row's demand, then its cap
};

/// One tier. `nodes` reads the arrays that gpu_free / cpu_free / mem_free
/// point to: the program commits into them, and keeps the cells of
/// `scores` it reads current (stamp and fresh below).
struct tier_problem {
  node_view nodes;
  class_view classes;
  task_view tasks;
  score_params params;
  std::int32_t* gpu_free = nullptr;  ///< nodes.gpu_free, writable
  std::int64_t* cpu_free = nullptr;  ///< nodes.cpu_free, writable
  std::int64_t* mem_free = nullptr;  ///< nodes.mem_free, writable
  std::int32_t* scores = nullptr;    ///< n_classes x n_nodes, row-major, -1 = infeasible
  std::int32_t n_rows = 0;
  std::int32_t const* row_class = nullptr;  ///< n_rows: the class of each row
  std::int32_t const* demand = nullptr;     ///< n_rows: replicas wanted
  /// n_rows, or null (no limit): the most copies a row places in one
  /// iteration. An iteration gives each node one copy at most, so equal
  /// nodes take one each (four 4-GPU jobs on four empty 8-GPU nodes); a
  /// limit leaves the rest to the next iteration, on the re-scored nodes,
  /// which packs them (two full nodes). The policy's stacking sets it.
  std::int32_t const* row_cap = nullptr;
  /// Which cells are current, by a clock the caller keeps: class c's cell
  /// on node n is current when stamp[n] < fresh[c]. Both writable, per
  /// node and per class, and required. The program first re-scores the
  /// stale cells of the live classes (one column per changed node, twins
  /// copied), sets their fresh to now + 1, and stamps every node it
  /// commits to now + 1; after a commit it re-scores only the cells of the
  /// rows that still have copies to place. A node's other cells wait for
  /// the next refresh (the next tier's, or a job's on the host): a node
  /// changed several times in one tier is re-scored once.
  std::int32_t* stamp = nullptr;
  std::int32_t* fresh = nullptr;
  std::int32_t now = 0;
  /// Per class: 1 = the refresh keeps it current (this tier or a later
  /// one uses it); 0 = nothing reads it again. Null = every class.
  std::uint8_t const* live_class = nullptr;
  /// The nodes the refresh looks at, each once: every node that may have
  /// changed since the least fresh live class was refreshed (the caller's
  /// log). Null: every node.
  std::int32_t const* changed = nullptr;
  std::int32_t n_changed = 0;
  /// Per node, writable, or null: a state label, a node index such that
  /// the nodes with one label were in one state when they got it (the
  /// first node of the state, node_view::same_as, to start with). Winners
  /// of one row with one label take the same replica: the first of them
  /// re-scores its column and the others copy it when their states compare
  /// equal (node_state_equal), and take its index as their label. Null:
  /// every winner re-scores.
  std::int32_t* state = nullptr;
  /// Per node, or null: a node whose cells of `scores` equal n's as long
  /// as neither has been stamped, the caller's stamps starting below 0
  /// (the nodes of one score state, node_view::score_as or same_as, as the
  /// score stage copied them: score_cell_op::twins). The one-worker program
  /// of the host then reads such a set's cells once for an iteration's
  /// floors and first bidders (tier/twins.hpp); the same values.
  std::int32_t const* twins = nullptr;
  /// Iterations at most (tests: 1 = one assignment, nothing re-scored after).
  std::int32_t max_iterations = 1 << 30;
  /// Bidding rounds per iteration at most; past it the iteration keeps what
  /// it holds (always a feasible assignment). A safety net, never reached
  /// in the benchmarks and tests.
  std::int32_t max_rounds = 1 << 16;
  /// Bid increment: the result is within eps per placed replica of the
  /// iteration's optimum.
  std::int64_t eps = 1;
  /// A chain's first tier: false = the caller reads none of the chain's
  /// score cells, so a backend with memory of its own may keep them there
  /// (tier_results::cells_back) and send back only the placements.
  bool cells_wanted = true;
  /// A chain's first tier: the round's time left when the chain is called,
  /// in nanoseconds, or 0 (none). Past it by the program's own clock since
  /// the chain began (tier_clock::ns: the host's steady clock, the
  /// device's global timer), no further tier starts: the first always
  /// runs, and the rest say so (tier_stats::not_run).
  std::int64_t budget_ns = 0;
  /// Node n's fragmentation-table row for its current state
  /// (score_cell_op::frag_row), from a memo by fragmentation state that a
  /// host worker keeps (the CPU backend's, kernels/src/frag_memo.hpp),
  /// called as frag_row(frag_memo, *this, n, &same): F before and after
  /// each class the refresh scores on n known, or null. The refresh then
  /// reads F instead of summing it over the task set. Where the memo's
  /// worker scored a score twin of n (node_view::score_as's sense, as
  /// the nodes are now) earlier in the same refresh, that node in same
  /// (else -1): the refresh copies its cells. Null (and never called on
  /// a device): F is summed.
  std::int64_t const* (*frag_row)(void* memo, tier_problem const& p, std::int32_t n, std::int32_t* same) = nullptr;
  void* frag_memo = nullptr;
  /// A locality job (local.want > 0: one row, its demand local.want) and
  /// the topology it reads; the program places it after the refresh
  /// instead of the auction (tier_locality).
  tier_locality local;
  tier_topology topo;
  /// A queue window's draw or one of its slots (tier_window), else empty.
  tier_window window;
};

/// One replica placed: node, row, the GPUs it took (bit i = GPU i of the
/// node), and the iteration it was placed in. The backend returns them in
/// the program's order; sorted by (iteration, node) they replay the commits.
struct tier_placement {
  std::int32_t node = -1;
  std::int32_t row = -1;
  std::int32_t iteration = 0;
  std::uint64_t gpus = 0;
};

/// The most bids a row may get in a round for the round's offers to go a
/// row a group (tier_buffers::offer_groups): a warp takes a row alone, with
/// one barrier of the CTA a round where the whole CTA's offers take four,
/// but its 32 workers are slow on a row of hundreds of items. Most rounds
/// have one or two rows with bids; in the CPU rounds at 10k the largest row
/// of a round of 129-512 bidders had 87 bids on average, at 100k and openb
/// those of more than 512 had 425 and 632, so the bidders do not tell their
/// rounds apart and a row's bids do. An H200 (2026-12-04, 704181c,
/// alternating; offers with the scan and bucket phases they need, ms at 10k
/// / 100k / openb): every round's by warps 1.81 / 2.82 / 2.89, by the whole
/// CTA 2.38 / 2.76 / 2.24, by warps where no row got over 64 / 128 / 256
/// bids 1.96 / 2.69 / 2.26, 1.85 / 2.69 / 2.40 and 1.81 / 2.59 / 2.46 (the
/// tier kernels' sum within 0.5% of each other): 128.
inline constexpr std::int32_t tier_offer_groups_upto = 128;
/// tier_buffers::offer_groups: every round's offers a row a group.
inline constexpr std::int32_t tier_offer_groups_always = 0x7fffffff;

/// Where a tier program's time goes, measured by the team's rank 0 from
/// barrier to barrier (so a phase's time is its slowest worker's): on the
/// GPU in SM cycles scaled by the launch's global timer, on the host in
/// steady_clock nanoseconds. The serial steps (scan, again, close, list)
/// run on rank 0 alone; a round with fewer bidders than the team's
/// solo_below() runs on rank 0 too, its time in bid/bucket/offer.
enum tier_phase : int {
  tier_phase_refresh,  ///< the live classes' stale cells re-scored
  tier_phase_floor,    ///< an iteration's quotas, floors and empty rows
  tier_phase_bid,      ///< nodes pick their best row
  tier_phase_scan,     ///< rank 0: the bids' buckets (scan over rows)
  tier_phase_bucket,   ///< bids into their rows' buckets
  tier_phase_offer,    ///< each row takes its best bids (heaps), prices
  tier_phase_jump,     ///< rank 0: price jumps (tier_jump)
  tier_phase_again,    ///< rank 0: rows left unfilled above a floor
  tier_phase_commit,   ///< winners committed, their groups formed
  tier_phase_rescore,  ///< winners' cells re-scored or copied
  tier_phase_close,    ///< rank 0: remaining copies, stop or go on
  tier_phase_list,     ///< rank 0: the next tier's refresh candidates
  tier_phase_local,    ///< a locality job's tier (tier_locality): its refresh, capacities and replicas
  tier_phase_count
};
inline constexpr char const* tier_phase_names[tier_phase_count] = {
    "refresh", "floor", "bid", "scan", "bucket", "offer", "jump", "again", "commit", "rescore", "close", "list",
    "local"};

struct tier_stats {
  std::int32_t iterations = 0;
  std::int64_t rounds = 0;  ///< bidding rounds over all iterations
  bool round_cap_hit = false;
  bool not_run = false;  ///< the chain's budget ran out before it (tier_problem::budget_ns)
  std::int64_t phase_ns[tier_phase_count] = {};  ///< tier_phase
};

/// Every tier program's phase times in this process so far, over all
/// backends (nanoseconds; round_bench reports them per round), and the
/// backends' way of adding a chain's. Inline: one counter set for the
/// CUDA and the host libraries alike.
inline std::atomic<std::int64_t> (&tier_phase_totals())[tier_phase_count] {
  static std::atomic<std::int64_t> totals[tier_phase_count];
  return totals;
}
inline void tier_profile_add(tier_stats const& s) {
  for (int p = 0; p < tier_phase_count; ++p) tier_phase_totals()[p].fetch_add(s.phase_ns[p], std::memory_order_relaxed);
}
inline void tier_profile(std::int64_t (&ns)[tier_phase_count]) {
  for (int p = 0; p < tier_phase_count; ++p) ns[p] = tier_phase_totals()[p].load(std::memory_order_relaxed);
}

/// What a chain of tiers placed (backend::place_tiers): tier k's
/// placements are placed[begin[k] .. begin[k + 1]), in the program's order.
struct tier_results {
  std::vector<tier_placement> placed;
  std::vector<std::int32_t> begin;  ///< n_tiers + 1
  std::vector<tier_stats> stats;    ///< n_tiers
  /// false: the chain's score cells stayed on the device (a resident
  /// round: the nodes' state replayed from the placements), so the caller's cells of
  /// every node the chain may have changed (its first tier's refresh
  /// candidates, every tier's winners) are not current.
  bool cells_back = true;
};

}  // namespace placer::kernels
