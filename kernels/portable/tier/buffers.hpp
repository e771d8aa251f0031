#pragma once
// The tier program's shared state (tier_program.hpp): the loop control,
// rank 0's phase clock, the buffers and their layout in backend memory, a
// chain's offsets and results, the team of one (seq_team) and the prices.

#include <placer/kernels/hd.hpp>
#include <placer/kernels/ops.hpp>
#include <placer/kernels/steps.hpp>
#include <placer/kernels/tier.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// Loop control shared by the team (backend memory).
struct tier_control {
  /// Nodes in todo[0] / todo[1]. Round k of a pass bids from list k % 2
  /// (every worker knows k) and fills the other (fetch_add); a count is
  /// reset only after a barrier since it was last read.
  std::int32_t todo_count[2] = {0, 0};
  /// Losers counted, not listed, for the round that bids from list k
  /// (tier_lose: they would sit it out); cleared with todo_count[k].
  std::int32_t sitting[2] = {0, 0};
  std::int32_t placed = 0;       ///< placements so far (fetch_add)
  std::int32_t touched = 0;      ///< nodes won this iteration (fetch_add)
  std::int32_t placed_before = 0;  ///< copies at the iteration's start
  std::int32_t iterations = 0;
  std::int32_t round_cap_hit = 0;
  std::int32_t done = 0;         ///< 1: stop iterating
  std::int32_t again = 0;        ///< 1: a row ended unfilled above a zero floor; bid again
  std::int32_t jump_raised = 0;  ///< 1: the last tier_jump raised prices (read after its barrier)
  std::int32_t floor_passes = 0;  ///< tier_floors_radix: the most digit passes a row needs (fetch_max)
  /// tier_jump_team: rows joined G in a sweep (two, alternating), G has a
  /// row, G has a row with an unheld copy; the least slack of G's holders.
  std::int32_t jump_changed[2] = {0, 0};
  std::int32_t jump_any = 0;
  std::int32_t jump_stop = 0;
  std::int64_t jump_rise = 0;
  std::int32_t offer_passes = 0;  ///< tier_offer_team: the most digit passes a row needs (fetch_max)
  std::int32_t offer_moved[2] = {0, 0};  ///< tier_offer_team, offer_iterate: a row's M moved in a step (two, alternating)
  /// tier_offer_team: the rows listed in offer_rows (high 32 bits) and
  /// their items (low 32 bits), one fetch_add a row; 0 again at its end.
  std::int64_t offer_slots = 0;
  std::int32_t offer_most_held = 0;  ///< tier_offer_team: the most copies a listed row keeps (fetch_max)
  std::int32_t offer_most_items = 0;  ///< tier_offer_team: the most items a listed row has (fetch_max); 0 again at its end
  std::int64_t rounds = 0;
  /// tier_round: a row got more than tier_buffers::offer_groups bids in the
  /// round that bids from list k (read after its bids; the other list's
  /// cleared while it bids), so the whole team takes its offers.
  std::int32_t offer_big[2] = {0, 0};
  std::int32_t bucket_at = 0;  ///< tier_round: the bids' buckets claimed so far (fetch_add)
  std::int32_t passes = 0;  ///< passes so far (tier_first_bidders), the stamp of bid_pass
  std::int64_t local_ring[2][3] = {};  ///< tier_local_team::least's slots: the group's, the CTA's
  std::int32_t local_placed = 0;  ///< tier_local_team: rank 0's replicas held, read after a barrier of the CTA
  std::int32_t not_run = 0;  ///< 1: the chain's budget ran out before this tier (tier_chain_program)
  /// Rank 0's clock per tier_phase, and the tier's span in clock ticks and
  /// in nanoseconds (they scale the ticks: SM cycles on the GPU).
  std::int64_t phase[tier_phase_count] = {};
  std::int64_t ticks = 0;
  std::int64_t ns = 0;
};

#if !defined(__CUDA_ARCH__)
/// What follows rank 0's clock on the host besides the clock: the GPU
/// model (kernels/model/team_model.hpp) books the barriers and steps it
/// counted since the last lap to the lap's phase. One per thread, or none.
struct tier_clock_observer {
  virtual void start() = 0;
  /// `group`: the group offers' lap (tier_round), booked apart from the
  /// whole team's offers (gpu_counts::offer_group).
  virtual void lap(tier_phase p, bool group) = 0;

 protected:
  ~tier_clock_observer() = default;
};
inline tier_clock_observer*& tier_clock_observed() {
  static thread_local tier_clock_observer* observer = nullptr;
  return observer;
}
#endif

/// Rank 0's stopwatch over a tier's phases (tier_control::phase): lap(P)
/// adds the time since the last lap to phase P. Others' laps do nothing.
struct tier_clock {
  PLACER_HD static std::int64_t ticks() {
#if defined(__CUDA_ARCH__)
    return static_cast<std::int64_t>(clock64());
#else
    return tier_clock::ns();
#endif
  }
  PLACER_HD static std::int64_t ns() {
#if defined(__CUDA_ARCH__)
    std::uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return static_cast<std::int64_t>(t);
#else
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
#endif
  }
  PLACER_HD tier_clock(tier_control* c, bool on) : ctl(on ? c : nullptr) {
    if (ctl != nullptr) {
      start_ns = ns();
      start = last = ticks();
#if !defined(__CUDA_ARCH__)
      if (tier_clock_observer* o = tier_clock_observed()) o->start();
#endif
    }
  }
  PLACER_HD void lap(tier_phase p, bool group = false) {
    if (ctl == nullptr) return;
    std::int64_t const now = ticks();
    ctl->phase[p] += now - last;
    last = now;
#if !defined(__CUDA_ARCH__)
    if (tier_clock_observer* o = tier_clock_observed()) o->lap(p, group);
#endif
  }
  /// The tier's span, once at its end.
  PLACER_HD void stop() {
    if (ctl == nullptr) return;
    ctl->ticks += ticks() - start;
    ctl->ns += ns() - start_ns;
  }
  tier_control* ctl;
  std::int64_t start = 0, last = 0, start_ns = 0;
};

/// The GPU model's steps (Team::work, kernels/model): a step is one of a
/// worker's dependent accesses to backend memory (a cell read, a heap
/// level, a count); scoring a cell costs this many (the score functor's
/// reads of the node, the class and the fragmentation state), and so does
/// setting up a node's column.
inline constexpr std::int32_t tier_score_steps = 16;
/// Of those, the reads of the node and the class (feasibility, capacity,
/// the GPUs' free shares); the rest are the loops over the task set, which
/// a cell's score split over lanes divides among them (score_lanes). Both
/// assumed, not measured: the calibration kit's score_cell_warp against
/// score_cell_thread will say.
inline constexpr std::int32_t tier_score_fixed_steps = 4;
/// A cell's score on `lanes` workers (a power of two): the fixed reads and
/// a lane's share of the task loops (the lanes' sum is the team's to count:
/// Team::group_fold).
PLACER_HD constexpr std::int64_t tier_score_steps_on(std::int32_t lanes) {
  return tier_score_fixed_steps + (tier_score_steps - tier_score_fixed_steps + lanes - 1) / lanes;
}

/// The serial offers run every row at once, a heap step a bid on each row's
/// thread, while the team's cost some barriers a bidding round whatever
/// the rows' bids: the team takes a row from this many bids in a round.
/// On an H100, with M stepped (bench/results/2026-11-26-h100-offer-least-*):
/// taking every row with bids cost the 10k round's offers 5.8 -> 12.6 ms;
/// from 16 bids the offers of 10k, 100k and openb sum to 27.1 ms, from 64
/// to 29.9 and from 1 to 36.1. With M in one search (about a third of the
/// barriers) and digits of 4 bits, the GPU model puts the tier kernels of
/// 10k / 100k / openb at 5.27 / 11.88 / 6.14 ms from 1 bid, 5.59 / 12.10 /
/// 6.59 from 2 and 5.88 / 13.08 / 8.69 from 8: 1 (to be timed on the next
/// GPU; PLACER_CUDA_TEAM_OFFER_LEAST).
inline constexpr std::int32_t tier_offer_team_least = 1;

/// The team selections' radix digits (tier/radix.hpp): `bits` bits, 1 to 8
/// (a row has 256 counts). Every pass
/// costs two barriers and a pass over the values, and the worker of each
/// row walks and clears its 2^Bits counts alone: the floors, a pass over
/// every cell of the rows, take 8 bits; the offers, whose items are few and
/// whose rows' walks were most of a round's critical path, take 4 (the GPU
/// model, 10k / 100k / openb offers: 7.5 / 7.8 / 8.8 ms at 8 bits, 4.2 /
/// 5.6 / 6.2 at 4, 5.1 / 6.9 / 7.1 at 2; the floors' 0.8 / 4.8 / 0.5 ms
/// at 8 bits became 0.9 / 6.4 / 0.6 at 4).
inline constexpr std::int32_t tier_floor_bits = 8;
inline constexpr std::int32_t tier_offer_bits = 4;

/// The team offers find a row's (quota + 1)-th best key by ranking every
/// item against its row's others (one barrier), not by the radix search
/// (two barriers a digit), in the rounds whose listed rows have at most
/// this many items each; the group offers, a row of at most this many
/// (PLACER_CUDA_OFFER_PAIRS, to measure; 0: never). 64 until the group
/// offers: the H200 took the team offers' 10k round 2.12 ms with it, 2.53
/// never ranking. A group's barrier costs little, so ranking pays only on
/// short rows: GPU model, the group offers at 10k / 100k / openb, 0.93 /
/// 1.58 / 1.13 ms up to 32 items, 0.96 / 1.58 / 1.14 up to 16, 1.26 / 1.76
/// / 1.25 up to 64, 1.12 / 1.58 / 1.17 never.
inline constexpr std::int32_t tier_offer_pairs_upto = 32;
/// A team_wide team refreshes a tier's stale cells a worker per cell, not
/// per node, when the tier has at most this many candidate nodes: half the
/// CUDA backend's CTA when it had 256 threads (it has 512 now;
/// PLACER_CUDA_REFRESH_CELLS_BELOW sets tier_buffers::refresh_cells_below
/// there, to measure).
inline constexpr std::int32_t tier_refresh_cells_below = 128;

/// On a grid (tier_program.hpp, "The grid"), a tier's refresh spreads over
/// every CTA from this many stale cells (candidates x classes), and its
/// floors and first bidders from this many cells (rows x nodes); below,
/// the leading CTA does them alone, without the grid's barriers around
/// them. The GPU model, 132 CTAs, grid barriers of an assumed 2 us, tier
/// kernel of 10k / 100k / openb: from 0 cells 3.81 / 4.96 / 3.46 ms, from
/// 4,096 4.52 / 5.46 / 3.46, from 65,536 4.87 / 8.07 / 4.16 (with six grid
/// barriers an iteration; three now: from 0, 3.67 / 4.84 / 3.45); at 10k,
/// from 0 stays ahead while a grid's barrier costs less than about 6 us.
/// 0, to be timed (PLACER_CUDA_GRID_CELLS_FROM).
inline constexpr std::int64_t tier_grid_cells_from = 0;
/// On a grid, the CTA that takes a row's floor also lists the nodes that
/// reach its first price (tier_first_bidders_of_row) in tiers of up to
/// this many nodes, so that no barrier of the grid lies between the floors
/// and the first bids; in larger tiers a CTA's pass over a row's cells
/// costs more than that barrier, and the grid lists them after it. GPU
/// model, 33 CTAs, tier kernel at 10k / 100k / openb: 3.30 / 5.44 / 4.00
/// ms never, 3.21 / 5.57 / 4.00 always. 0: never, as the GPU rounds
/// recorded up to 2026-11-28 ran (PLACER_CUDA_LIST_WITH_FLOORS_UPTO).
inline constexpr std::int32_t tier_list_with_floors_upto = 4096;
/// Rows a node remembers from its last full scan of a pass (tier_bid):
/// most of its later bids are decided by these alone.
inline constexpr std::int32_t tier_bid_top = 4;
/// Bids remember rows only in tiers of more rows than this: a remembered
/// bid is a chain of dependent loads (the pass, the rows, their cells)
/// where a scan's loads are independent, so on 18 rows (the 100k round's
/// largest tier) remembering cost 2-5% of the bid phase on the CPU, on
/// 37 (10k-k8s) it was even, on 50 (100k-k8s) it saved 20% and on 248
/// (gpuspec25 in one round) a fifth of the round.
inline constexpr std::int32_t tier_remember_rows_above = 32;

/// The program's buffers, in the backend's memory. Sizes: N = nodes, R =
/// rows, D = sum of the rows' demands.
struct tier_buffers {
  tier_problem p;                    ///< pointers into backend memory
  std::int32_t const* heap_begin;    ///< R + 1: exclusive scan of demand (host)
  std::int32_t* remaining;           ///< R
  std::int32_t* quota;               ///< R: copies a row may place this iteration (remaining, or less under row_cap)
  std::int64_t* floor;               ///< R: the price of a row's unheld copies
  /// 2R: a row's price (tier_price; tier_closed when met), in two halves:
  /// round k reads half k % 2 (tier_prices) and writes the other, so an
  /// offer may re-price holders against the round's prices while other
  /// rows' workers move theirs.
  std::int64_t* price;
  std::int32_t* select;              ///< R x N: scratch for the floors, then the winners' groups
  std::int32_t* held;                ///< R: copies held this iteration
  std::int32_t* bid_count;           ///< R
  std::int32_t* bid_cursor;          ///< R
  std::int64_t* heap_bid;            ///< D: per row a min-heap of held bids
  std::int32_t* heap_node;           ///< D
  std::int32_t* bid_row;             ///< N: row a node bids for this round, -1 none
  std::int64_t* bid_value;           ///< N
  std::int32_t* bid_round;           ///< N: the round a held bid was made in (ctl->rounds)
  /// tier_bid_top x N, node-major: the rows of a node's best margins at
  /// its last full scan (tier_scan_margins), ascending, -1 past the last.
  std::int32_t* bid_top;
  std::int64_t* bid_bound;           ///< N: the next best margin at that scan (tier_no_margin: none)
  std::int32_t* bid_pass;            ///< N: the pass of that scan (ctl->passes), -1 none in this tier
  std::int32_t* todo[2];             ///< N each: nodes bidding this round / next
  std::int32_t* bucket;              ///< N: this round's bids grouped by row
  std::int32_t* first_mark;          ///< N: 1 once a grid's floor step listed the node (tier_first_bidders_of_row), else 0
  std::int32_t* won;                 ///< N: nodes that won a copy this iteration
  std::int32_t* won_row;             ///< N: the row a node won, -1 none
  std::int32_t* jump_rows;           ///< 2R: tier_jump's row marks and worklist
  std::int32_t* floor_hist;          ///< 256R: tier_floors_radix's digit counts per row
  std::int32_t* floor_row;           ///< tier_floor_fields x R: tier_floors_radix's state per row
  std::int64_t* offer_row;           ///< tier_offer_fields x R: tier_offer_team's state per row
  std::int32_t* offer_rows;          ///< R: the rows tier_offer_team takes in a round, in any order
  std::int32_t* offer_begin;         ///< R: where a listed row's items begin among all of them (ascending)
  tier_placement* out;               ///< D
  tier_control* ctl;
  /// A locality job's scratch (tier_locality; the chain's, outside
  /// tier_layout): its class's capacity per domain, and per node 1 where
  /// the job holds the node (distinct), 0 again when the job ends.
  std::int64_t* local_cap = nullptr;  ///< the chain's most domains
  std::int32_t* local_held = nullptr;  ///< N where the chain has a locality job
  /// A locality job's tier after another's (tier_chain_program): the
  /// leading CTA's alone, no grid barrier before it; with the same class
  /// (and so the same topology), its capacities are the ones that job
  /// left, current (tier_local).
  bool local_after_local = false;
  bool local_caps_kept = false;
  /// tier_offer_team takes the rows with at least this many bids in a
  /// round; the others keep the serial offers (the same results).
  std::int32_t offer_team_least = tier_offer_team_least;
  /// tier_offer_team's digit in bits (tier_offer_bits).
  std::int32_t offer_bits = tier_offer_bits;
  /// tier_offer_team's M: 0, one search (the closed form); 1, M = f(M)
  /// stepped a search a step, as the GPU rounds recorded before 2026-11-28
  /// ran (the GPU model replays them so; PLACER_CUDA_OFFER_ITERATE). The
  /// same placements either way.
  std::int32_t offer_iterate = 0;
  /// tier_offer_pairs_upto.
  std::int32_t offer_pairs_upto = tier_offer_pairs_upto;
  /// A team_wide team takes a round's offers a row a group (tier_offer_groups,
  /// one barrier of the team) where no row got more than this many bids in
  /// the round, else by the whole team (tier_offer_team, four barriers; the
  /// same placements either way; tier_offer_groups_upto). 0: never, as the
  /// GPU rounds recorded up to 2026-11-28 ran; tier_offer_groups_always:
  /// always, as those of 2026-12-04's first call ran (PLACER_CUDA_OFFER_GROUPS).
  std::int32_t offer_groups = tier_offer_groups_upto;
  /// A team_wide team refreshes a tier a worker per cell up to this many
  /// candidate nodes (tier_refresh_cells_below).
  std::int32_t refresh_cells_below = tier_refresh_cells_below;
  /// tier_grid_cells_from (PLACER_CUDA_GRID_CELLS_FROM, to measure).
  std::int64_t grid_cells_from = tier_grid_cells_from;
  /// tier_list_with_floors_upto.
  std::int32_t list_with_floors_upto = tier_list_with_floors_upto;
  /// 1: on a grid, a refresh of at most a cell a worker scores every stale
  /// cell in one pass, a twin's too, and meets at one barrier of the grid;
  /// 0: twins copy in a second pass, as the GPU rounds recorded up to
  /// 2026-11-28 ran (PLACER_CUDA_REFRESH_ONE_PASS). The same scores.
  std::int32_t refresh_one_pass = 1;
  /// 1: a refresh by cell gives each cell a run of lanes where the CTA's
  /// workers outnumber the cells (tier_refresh_lanes: its score's task loops
  /// split among them); 0: a worker a cell, as every GPU round recorded up
  /// to 2026-12-02 ran (PLACER_CUDA_REFRESH_LANES). The same scores.
  std::int32_t refresh_lanes = 1;
  /// Bids remember rows in tiers of more rows than this
  /// (tier_remember_rows_above; 0: always, in the tests).
  std::int32_t remember_rows_above = tier_remember_rows_above;
  /// 1: a loser that would sit the next round out is counted, not listed
  /// (tier_lose), and a round with no node listed is counted, not run
  /// (tier_bidding); 0: every loser listed and every round run, as up to
  /// ee6721f (the tests' reference; every recorded GPU round). The same
  /// placements.
  std::int32_t losers_sit_out = 1;
};

/// A chain of tiers run in one launch (tier_chain_program; the backend's
/// place_tiers): tier k + 1 starts from the node state, matrix and clock
/// tier k left, and its refresh candidates are the nodes tier k committed,
/// each once (tiers after the first do not read their `changed`). Per tier
/// k: its problem, its heap_begin at heap_at[k], its control ctl[k] and
/// its placements at out + out_at[k] (its copies reserved). `work` holds
/// the program's other buffers, laid out for the chain's largest tier
/// (tier_layout with the most nodes x rows and copies of any tier).
struct tier_chain {
  std::int32_t n_tiers = 0;
  tier_problem const* tiers = nullptr;
  std::int32_t const* heap_begin = nullptr;  ///< sum of (R_k + 1)
  std::int32_t const* heap_at = nullptr;     ///< n_tiers
  std::int32_t const* out_at = nullptr;      ///< n_tiers + 1
  tier_control* ctl = nullptr;               ///< n_tiers, zeroed
  tier_placement* out = nullptr;             ///< out_at[n_tiers]
  std::int32_t* listed = nullptr;            ///< N: the last tier that listed a node as a candidate
  std::int32_t* candidates = nullptr;        ///< the most copies of a tier: tier k - 1's committed nodes
  std::int32_t* n_candidates = nullptr;      ///< 1
  std::int64_t* local_cap = nullptr;         ///< tier_chain_locality's domains
  std::int32_t* local_held = nullptr;        ///< N where tier_chain_locality, else none
  tier_buffers work;
  /// The sizes `work` was laid out for (tier_layout's nodes, rows, copies):
  /// a launch may lay its scratch out again where it runs (a CTA's shared
  /// memory, tier_layout_at). Nothing in it outlives the launch or is read
  /// before the program writes it.
  std::int32_t work_nodes = 0, work_rows = 0, work_copies = 0;
};

/// Host: heap_begin[0..R] = exclusive scan of the demands; returns their sum
/// (the copies, and the most placements a tier can make).
inline std::int32_t tier_heap_begin(tier_problem const& p, std::int32_t* heap_begin) {
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < p.n_rows; ++r) {
    heap_begin[r] = static_cast<std::int32_t>(at);
    at += p.demand[r];
  }
  heap_begin[p.n_rows] = static_cast<std::int32_t>(at);
  return static_cast<std::int32_t>(at);
}

/// tier_floors_radix's state of a row (tier_buffers::floor_row): its
/// feasible cells and their largest value, then the rank wanted among the
/// cells that match the value's bits found so far (pre, the bits above
/// `at`); at <= 0 once the floor is known.
enum tier_floor_field : int { tier_floor_count, tier_floor_hi, tier_floor_want, tier_floor_pre, tier_floor_at, tier_floor_fields };

/// tier_offer_team's state of a row (tier_buffers::offer_row): the round
/// the team took its offers in (else older), its items' least and largest
/// value, the key shift, the threshold M, then the radix search for f(M)
/// as in tier_floor_field.
enum tier_offer_field : int {
  tier_offer_round,
  tier_offer_lo,
  tier_offer_hi,
  tier_offer_shift,
  tier_offer_pre_m,  ///< M, the threshold key (-1: every item kept)
  tier_offer_want,
  tier_offer_pre,
  tier_offer_at,
  tier_offer_searching,  ///< 1: the row's M is searched (more items than copies)
  tier_offer_holes,   ///< tier_offer_groups: lost holders' entries listed so far
  tier_offer_placed,  ///< tier_offer_groups: kept bids placed so far
  tier_offer_fields
};

/// Lays the program's work buffers out through take(T* tag, count), which
/// returns memory for `count` elements of T. `p`, heap_begin and ctl are
/// the caller's.
template <class Take>
PLACER_HD void tier_layout(tier_buffers& b, std::int32_t n_nodes, std::int32_t n_rows, std::int32_t copies,
                           Take&& take) {
  auto const n = static_cast<std::size_t>(n_nodes);
  auto const r = static_cast<std::size_t>(n_rows);
  auto const d = static_cast<std::size_t>(copies);
  b.remaining = take(b.remaining, r);
  b.quota = take(b.quota, r);
  b.floor = take(b.floor, r);
  b.price = take(b.price, 2 * r);
  b.select = take(b.select, r * n);
  b.held = take(b.held, r);
  b.bid_count = take(b.bid_count, r);
  b.bid_cursor = take(b.bid_cursor, r);
  b.heap_bid = take(b.heap_bid, d);
  b.heap_node = take(b.heap_node, d);
  b.bid_row = take(b.bid_row, n);
  b.bid_value = take(b.bid_value, n);
  b.bid_round = take(b.bid_round, n);
  b.bid_top = take(b.bid_top, tier_bid_top * n);
  b.bid_bound = take(b.bid_bound, n);
  b.bid_pass = take(b.bid_pass, n);
  b.todo[0] = take(b.todo[0], n);
  b.todo[1] = take(b.todo[1], n);
  b.bucket = take(b.bucket, n);
  b.first_mark = take(b.first_mark, n);
  b.won = take(b.won, n);
  b.won_row = take(b.won_row, n);
  b.jump_rows = take(b.jump_rows, 2 * r);
  b.floor_hist = take(b.floor_hist, 256 * r);
  b.floor_row = take(b.floor_row, tier_floor_fields * r);
  b.offer_row = take(b.offer_row, tier_offer_fields * r);
  b.offer_rows = take(b.offer_rows, r);
  b.offer_begin = take(b.offer_begin, r);
}

/// The most CTAs of a thread-block cluster a chain's scratch spreads over
/// (tier_layout_parts): 8, the portable cluster size.
inline constexpr std::int32_t tier_cluster_most = 8;

/// The work buffers spread over `parts` (1 to tier_cluster_most) pieces of
/// memory of `per_part` bytes each, every array whole in one piece: in
/// layout order, each into the first piece with room for it, 16-byte
/// aligned. A thread-block cluster's distributed shared memory, piece k
/// CTA k's, base(k) that memory as the calling CTA reaches it; base may
/// return nullptr (sizing only). Returns the bytes of the fullest piece (at
/// least 1), or 0 where an array fits in no piece (`b` is then unusable).
template <class Base>
PLACER_HD std::size_t tier_layout_parts(tier_buffers& b, std::int32_t n_nodes, std::int32_t n_rows,
                                        std::int32_t copies, std::int32_t parts, std::size_t per_part, Base&& base) {
  std::size_t used[tier_cluster_most] = {};
  bool fits = parts >= 1 && parts <= tier_cluster_most;
  tier_layout(b, n_nodes, n_rows, copies, [&](auto* tag, std::size_t count) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (std::int32_t k = 0; fits && k < parts; ++k) {
      std::size_t const at = (used[k] + 15) / 16 * 16;
      if (at + count * sizeof(T) > per_part) continue;
      used[k] = at + count * sizeof(T);
      unsigned char* const p = base(k);
      return p != nullptr ? reinterpret_cast<T*>(p + at) : static_cast<T*>(nullptr);
    }
    fits = false;
    return static_cast<T*>(nullptr);
  });
  std::size_t most = 1;
  for (std::int32_t k = 0; fits && k < parts; ++k) most = max_of(most, used[k]);
  return fits ? most : 0;
}

/// The work buffers laid out one after another from `base` (each 16-byte
/// aligned; a CTA's shared memory): tier_layout_parts' one piece. Returns
/// the bytes they take (at least 1).
PLACER_HD inline std::size_t tier_layout_at(tier_buffers& b, std::int32_t n_nodes, std::int32_t n_rows,
                                            std::int32_t copies, unsigned char* base) {
  return tier_layout_parts(b, n_nodes, n_rows, copies, 1, ~std::size_t{0}, [&](std::int32_t) { return base; });
}
/// The bytes tier_layout_at takes for these sizes.
PLACER_HD inline std::size_t tier_layout_bytes(std::int32_t n_nodes, std::int32_t n_rows, std::int32_t copies) {
  tier_buffers b{};
  return tier_layout_at(b, n_nodes, n_rows, copies, nullptr);
}

/// The fewest pieces of per_part bytes, at most tier_cluster_most, that
/// hold the work buffers (tier_layout_parts), or 0 where none do.
PLACER_HD inline std::int32_t tier_layout_parts_needed(std::int32_t n_nodes, std::int32_t n_rows, std::int32_t copies,
                                                       std::size_t per_part) {
  for (std::int32_t parts = 1; parts <= tier_cluster_most; ++parts) {
    tier_buffers b{};
    auto const none = [](std::int32_t) -> unsigned char* { return nullptr; };
    if (tier_layout_parts(b, n_nodes, n_rows, copies, parts, per_part, none) > 0) return parts;
  }
  return 0;
}

/// The smallest pieces (a multiple of 16 bytes) that hold the work buffers
/// in at most tier_cluster_most of them (tier_layout_parts), and in `parts`
/// how many: the device twin lays every chain out so, so that a program
/// that reached one array from another's address would place differently.
PLACER_HD inline std::size_t tier_layout_smallest_parts(std::int32_t n_nodes, std::int32_t n_rows, std::int32_t copies,
                                                        std::int32_t& parts) {
  std::size_t per = tier_layout_bytes(n_nodes, n_rows, copies) / tier_cluster_most + 16;
  while ((parts = tier_layout_parts_needed(n_nodes, n_rows, copies, per)) == 0) per += per / 4 + 16;
  return (per + 15) / 16 * 16;
}

/// Host: the chain's sizes and offsets from its problems: heap_begin
/// (concatenated) and heap_at, out_at (n_tiers + 1), and the largest tier's
/// rows and copies for tier_layout. Returns the chain's copies.
inline std::int32_t tier_chain_offsets(tier_problem const* tiers, std::int32_t n_tiers, std::int32_t* heap_begin,
                                       std::int32_t* heap_at, std::int32_t* out_at, std::int32_t& most_rows,
                                       std::int32_t& most_copies) {
  std::int32_t h = 0;
  most_rows = most_copies = 0;
  out_at[0] = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    heap_at[k] = h;
    std::int32_t const copies = tier_heap_begin(tiers[k], heap_begin + h);
    h += tiers[k].n_rows + 1;
    // A window's slots place into their draw's region (tier_out_begin).
    tier_window const& w = tiers[k].window;
    out_at[k + 1] = out_at[k] + (w.draw ? w.copies : w.live >= 0 ? 0 : copies);
    most_rows = most_rows > tiers[k].n_rows ? most_rows : tiers[k].n_rows;
    most_copies = most_copies > copies ? most_copies : copies;
  }
  return out_at[n_tiers];
}
/// Where tier k's placements start in the chain's: out_at[k], or a window
/// slot's where the slots before it that ran end (they share their draw's
/// region: tier_chain_offsets). Read after the tiers before k ran.
PLACER_HD inline std::int32_t tier_out_begin(tier_problem const* tiers, tier_control const* ctl,
                                             std::int32_t const* out_at, std::int32_t k) {
  if (tiers[k].window.live < 0) return out_at[k];
  std::int32_t i = k - 1;
  std::int32_t at = 0;
  while (!tiers[i].window.draw) at += ctl[i--].placed;
  return out_at[i] + at;
}
/// Host: a chain's results from its controls and placements (tier k's
/// from tier_out_begin, as tier_chain_offsets laid them out); returns the
/// placements in all. No tiers: empty results.
inline std::int32_t tier_chain_results(tier_problem const* tiers, tier_control const* ctl, tier_placement const* out,
                                       std::int32_t const* out_at, std::int32_t n_tiers, tier_results& r) {
  r.placed.clear();
  r.begin.assign(1, 0);
  r.stats.clear();
  r.cells_back = true;
  std::int32_t placed = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    tier_placement const* from = out + tier_out_begin(tiers, ctl, out_at, k);
    r.placed.insert(r.placed.end(), from, from + ctl[k].placed);
    r.begin.push_back(static_cast<std::int32_t>(r.placed.size()));
    tier_stats st{ctl[k].iterations, ctl[k].rounds, ctl[k].round_cap_hit != 0, ctl[k].not_run != 0};
    double const scale = ctl[k].ticks > 0 ? static_cast<double>(ctl[k].ns) / static_cast<double>(ctl[k].ticks) : 0.0;
    for (int ph = 0; ph < tier_phase_count; ++ph) {
      st.phase_ns[ph] = static_cast<std::int64_t>(static_cast<double>(ctl[k].phase[ph]) * scale);
    }
    tier_profile_add(st);
    r.stats.push_back(st);
    placed += ctl[k].placed;
  }
  return placed;
}
/// Host: whether the chain has a locality job (tier_problem::local), and
/// the most domains one of them reads (the chain's local_cap).
inline bool tier_chain_locality(tier_problem const* tiers, std::int32_t n_tiers, std::int32_t& most_domains) {
  bool any = false;
  most_domains = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    if (tiers[k].local.want <= 0) continue;
    any = true;
    most_domains = most_domains > tiers[k].topo.n_domains ? most_domains : tiers[k].topo.n_domains;
  }
  return any;
}
/// Entries of the chain's concatenated heap_begin.
inline std::size_t tier_chain_heap_entries(tier_problem const* tiers, std::int32_t n_tiers) {
  std::size_t e = 0;
  for (std::int32_t k = 0; k < n_tiers; ++k) e += static_cast<std::size_t>(tiers[k].n_rows) + 1;
  return e;
}

/// A chain of tiers is one launch of the program; the backend counts the
/// wait where the host reads the placements and what the tiers changed.
inline void count_tier(step_counts& st) { st.calls += 1; }

/// Node n's fragmentation-table row from the problem's memo, its entries
/// of the classes the refresh scores on n known (tier_problem::frag_row),
/// or null: always on a device. *same: a score twin of n whose column the
/// worker scored earlier in this refresh, or -1.
PLACER_HD inline std::int64_t const* tier_known_row(tier_problem const& p, std::int32_t n, std::int32_t* same) {
  *same = -1;
#if defined(__CUDA_ARCH__)
  (void)p;
  (void)n;
  return nullptr;
#else
  return p.frag_row != nullptr ? p.frag_row(p.frag_memo, p, n, same) : nullptr;
#endif
}

struct tier_twin_rows;  // twins.hpp

/// A team of one: the CPU backend's worker.
struct seq_team {
  [[nodiscard]] static constexpr std::int32_t rank() { return 0; }
  [[nodiscard]] static constexpr std::int32_t size() { return 1; }
  /// A bidding round with fewer bidders than this runs on rank 0 alone
  /// (one barrier instead of four); every Team says where its barriers
  /// cost more than the work they split.
  [[nodiscard]] static constexpr std::int32_t solo_below() { return 0; }
  PLACER_HD static void sync() {}
  /// The calling worker did `steps` dependent steps of work (the GPU
  /// model's count, kernels/model); nothing on a real team.
  PLACER_HD static constexpr void work(std::int64_t) {}
  /// The same for steps each of which waits on the one before (a heap's
  /// levels, a held bid's re-bid): a chain costs a memory latency a step.
  PLACER_HD static constexpr void chain(std::int64_t) {}
  template <class T>
  PLACER_HD static T fetch_add(T* p, std::type_identity_t<T> v) {
    T const old = *p;
    *p += v;
    return old;
  }
  template <class T>
  PLACER_HD static T fetch_max(T* p, T v) {
    T const old = *p;
    if (v > old) *p = v;
    return old;
  }
  template <class T>
  PLACER_HD static T fetch_min(T* p, T v) {
    T const old = *p;
    if (v < old) *p = v;
    return old;
  }
  /// A grid of CTAs (tier_program.hpp, "The grid"): one block here.
  [[nodiscard]] static constexpr std::int32_t blocks() { return 1; }
  [[nodiscard]] static constexpr std::int32_t block() { return 0; }
  template <class F>
  PLACER_HD static void each_block(F&& f) {
    f(0);
  }
  PLACER_HD static void grid_sync() {}
  /// Workers that take a row's offers together (tier_offer_groups): ranks
  /// [g * group_size(), (g + 1) * group_size()) are group g, and
  /// group_sync() is their barrier (a warp's on the GPU). Here one.
  [[nodiscard]] static constexpr std::int32_t group_size() { return 1; }
  PLACER_HD static void group_sync() {}
  /// v folded by op (fold_sum, fold_min, fold_max) over the `width`
  /// workers of this one's run of ranks [rank / s * s, + width), s =
  /// fold_span(width) (at most group_size(): an aligned run of a group's
  /// workers, or a whole group, the last one of a team too; every one of
  /// them calls it), to each of them: shuffles on a warp. Here width is 1.
  template <class Op>
  PLACER_HD static std::int64_t group_fold(std::int64_t v, std::int32_t, Op) {
    return v;
  }
  /// The sum of v over this worker and the workers after it in its run
  /// (group_fold's run of `width`): a suffix sum by shuffles on a warp.
  /// Here width is 1.
  PLACER_HD static std::int64_t group_sum_from(std::int64_t v, std::int32_t) { return v; }
  /// How many workers of this one's run (group_fold's) hold a v above
  /// this one's: every pair compared by shuffles on a warp. Here none.
  PLACER_HD static std::int32_t group_count_above(std::int64_t, std::int32_t) { return 0; }
  /// The CPU backend selects each row's floor on one worker (tier_floor),
  /// jumps on rank 0 (tier_jump) and offers a row's bids on its worker;
  /// the device twin runs the CUDA backend's way (team_wide).
  bool team_wide = false;
  /// Steps (items x each one's) from which a loop of items whose work is
  /// each one's alone runs on the calling thread's OpenMP team
  /// (tier_apart); 0: never.
  std::int64_t apart_from = 0;
  /// The floors' and first bidders' twin entries (tier/twins.hpp), laid
  /// out by the host for a chain whose tiers have twins; null: none.
  tier_twin_rows* twins = nullptr;
};

/// Whether n items of `each` steps whose work is each one's alone run on
/// the calling thread's OpenMP team: a seq_team's whose apart_from they
/// reach, on the host only (the core that waits while the one worker's
/// program runs on the other).
template <class Team>
PLACER_HD bool tier_forks([[maybe_unused]] Team const& t, [[maybe_unused]] std::int32_t n,
                          [[maybe_unused]] std::int64_t each) {
#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
  if constexpr (std::is_same_v<Team, seq_team>) return t.apart_from > 0 && n > 1 && n * each >= t.apart_from;
#endif
  return false;
}

/// f(i) for this worker's share of n items of `each` steps whose work is
/// each one's alone (i = rank, rank + size, ...), or where tier_forks says
/// so on the OpenMP team, `run` items a worker at a time: the CPU backend's
/// floors (a row each) and a refresh's re-scored columns.
template <class Team, class F>
PLACER_HD void tier_apart(Team& t, std::int32_t n, [[maybe_unused]] std::int64_t each, F&& f,
                          [[maybe_unused]] std::int32_t run = 1) {
#if !defined(__CUDA_ARCH__) && defined(_OPENMP)
  if (tier_forks(t, n, each)) {
#pragma omp parallel for schedule(dynamic, run)
    for (std::int32_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (std::int32_t i = t.rank(); i < n; i += t.size()) f(i);
}

/// (bid, node) order of held copies: a is worse than b (lower bid, or the
/// same bid from a higher node index). The heap keeps the worst on top.
PLACER_HD inline bool tier_worse(std::int64_t bid_a, std::int32_t node_a, std::int64_t bid_b, std::int32_t node_b) {
  return bid_a != bid_b ? bid_a < bid_b : node_a > node_b;
}

/// The price of a row with no copy left to place: above any margin.
inline constexpr std::int64_t tier_closed = std::int64_t{1} << 62;

/// The price a bidder sees for row r: the worst held bid when every copy
/// of the iteration is held, else the floor (an unheld copy); tier_closed
/// when the row places nothing more this iteration.
PLACER_HD inline std::int64_t tier_price(tier_buffers const& b, std::int32_t r) {
  if (b.quota[r] == 0) return tier_closed;
  return b.held[r] < b.quota[r] ? b.floor[r] : b.heap_bid[b.heap_begin[r]];
}

/// The prices round k reads (list = k % 2); the round writes the other half.
PLACER_HD inline std::int64_t* tier_prices(tier_buffers const& b, std::int32_t list) {
  return b.price + static_cast<std::int64_t>(list) * b.p.n_rows;
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
