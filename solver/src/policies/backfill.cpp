// Backfill with reservations (policies.hpp has the contract): EASY, as in
// Slurm (the first blocked job gets a reservation), or conservative (up to
// max_reservations blocked jobs get one). Owns the reservation search on a
// "future" cluster and the re-solve of this round's placements so that none
// of them can delay a reservation.
//
// Time model. A running job gives its resources back at its estimated_end; a
// job already past its estimate is assumed to end at now + 1, so an overrun
// moves a reservation later instead of into the past. A job started now ends
// at now + estimated_duration; one without an estimate (0) is assumed never
// to end, so it may only run where no reservation needs the node.
//
// Reservation guarantee. Reservation i (start T_i, nodes R_i) is computed on
// the cluster as it stands with every placement behind the reserved job in
// queue order undone. Those jobs then start only where they cannot touch
// R_i at T_i: they end by T_i, or they are kept off R_i entirely (whole
// nodes hidden from the core). So at T_i the resources of R_i are at least
// what the search saw.
#include "policies.hpp"

#include <placer/topology/error.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace placer::detail {

namespace {

constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

/// When running job rj gives its resources back, as the search assumes.
std::int64_t release_time(running_job const& rj, std::int64_t now) {
  return rj.estimated_end > now ? rj.estimated_end : now + 1;
}

/// When job j would end if started now; `never` without an estimate.
std::int64_t end_if_started(job const& j, std::int64_t now) {
  return j.estimated_duration > 0 ? now + j.estimated_duration : never;
}

struct held {
  std::int64_t start = 0;
  std::vector<char> nodes;  ///< per node: 1 = in the reservation's node set
};

class backfill_round {
 public:
  backfill_round(core_fn const& core, work_state& ws, std::vector<job> const* overrides,
                 std::vector<char> const* pinned, round_result& out)
      : core_(core), ws_(ws), overrides_(overrides), given_pinned_(pinned), out_(out), now_(ws.in.now),
        n_jobs_(ws.in.pending.size()), n_nodes_(ws.state.nodes.size()) {}

  void run();

 private:
  [[nodiscard]] job const& shape(std::int32_t j) const {
    return overrides_ != nullptr ? (*overrides_)[static_cast<std::size_t>(j)]
                                 : ws_.in.pending[static_cast<std::size_t>(j)];
  }
  [[nodiscard]] bool may_head(std::int32_t j) const;
  [[nodiscard]] std::int64_t end_of(std::int32_t j) const { return end_if_started(shape(j), now_); }
  /// Nodes job j may not use now: the reservations that start before it
  /// would end. Empty when there are none.
  [[nodiscard]] std::vector<char> mask_for(std::int64_t end) const;
  /// Nodes held by every reservation so far.
  [[nodiscard]] std::vector<char> all_held() const;

  void start(std::int32_t j, std::vector<replica_placement> const& reps);
  /// Starts what r placed of `jobs` and takes over its unplaced reasons.
  void apply(round_result const& r, std::vector<std::int32_t> const& jobs);
  /// Undoes this round's placements of jobs behind queue position `pos`.
  std::vector<std::int32_t> undo_behind(std::size_t pos);
  /// Places `jobs` (queue order) so that no reservation is delayed.
  void resolve(std::vector<std::int32_t> const& jobs);
  /// Earliest start and node set where h fits on the future cluster, with
  /// earlier reservations' nodes held from now on.
  bool reserve(std::int32_t h);

  core_fn const& core_;
  work_state& ws_;
  std::vector<job> const* overrides_;
  std::vector<char> const* given_pinned_;
  round_result& out_;
  std::int64_t now_;
  std::size_t n_jobs_, n_nodes_;

  std::vector<std::int32_t> order_;
  std::vector<std::size_t> pos_;
  std::vector<char> placed_, pinned_, reserved_, hopeless_;
  std::vector<unplaced> entry_;  ///< per job; reason none = not reported unplaced
  std::vector<placement> saved_;  ///< undone placements, per job (for restoring)
  std::vector<held> res_;
  std::optional<work_state> scratch_;  ///< probes on the future cluster
};

bool backfill_round::may_head(std::int32_t j) const {
  auto const k = static_cast<std::size_t>(j);
  if (placed_[k] != 0 || reserved_[k] != 0 || hopeless_[k] != 0) return false;
  auto const r = entry_[k].reason;
  // Invalid jobs and deadline cut-offs are not blocked by capacity; deferred
  // jobs wait by choice.
  return r != unplaced_reason::none && r != unplaced_reason::invalid_job && r != unplaced_reason::deadline_exceeded &&
         r != unplaced_reason::deferred;
}

std::vector<char> backfill_round::mask_for(std::int64_t end) const {
  std::vector<char> m;
  for (auto const& h : res_) {
    if (end <= h.start) continue;  // ends by the reservation's start: no conflict
    if (m.empty()) m.assign(n_nodes_, 0);
    for (std::size_t n = 0; n < n_nodes_; ++n) m[n] = static_cast<char>(m[n] | h.nodes[n]);
  }
  return m;
}

std::vector<char> backfill_round::all_held() const { return mask_for(never); }

void backfill_round::start(std::int32_t j, std::vector<replica_placement> const& reps) {
  ws_.start(j, reps);
  out_.placements.push_back({j, reps});
  placed_[static_cast<std::size_t>(j)] = 1;
}

void backfill_round::apply(round_result const& r, std::vector<std::int32_t> const& jobs) {
  for (auto j : jobs) entry_[static_cast<std::size_t>(j)] = unplaced{};
  for (auto const& p : r.placements) {
    if (!p.replicas.empty()) start(p.job, p.replicas);
  }
  for (auto const& u : r.unplaced_jobs) entry_[static_cast<std::size_t>(u.job)] = u;
}

std::vector<std::int32_t> backfill_round::undo_behind(std::size_t pos) {
  // Running index of each job started this round, built once per call:
  // work_state::running_of is a linear scan per job.
  std::vector<std::int64_t> run_of(n_jobs_, -1);
  for (std::size_t r = ws_.in.running.size(); r < ws_.running.size(); ++r) {
    if (ws_.alive[r] == 0 || ws_.started_from[r] < 0) continue;
    run_of[static_cast<std::size_t>(ws_.started_from[r])] = static_cast<std::int64_t>(r);
  }
  std::vector<char> drop(n_jobs_, 0);
  std::vector<std::int32_t> undone;
  for (std::size_t k = pos + 1; k < order_.size(); ++k) {
    auto const j = order_[k];
    auto const jj = static_cast<std::size_t>(j);
    // A job placed by preemption keeps its place: undoing it would waste the
    // work already preempted for it. It stays part of the state the
    // reservation is computed on, so it cannot delay it either.
    if (placed_[jj] == 0 || pinned_[jj] != 0 || run_of[jj] < 0) continue;
    ws_.stop(static_cast<std::size_t>(run_of[jj]));
    placed_[jj] = 0;
    drop[jj] = 1;
    undone.push_back(j);
  }
  if (undone.empty()) return undone;
  for (auto const& p : out_.placements) {
    if (drop[static_cast<std::size_t>(p.job)] != 0) saved_[static_cast<std::size_t>(p.job)] = p;
  }
  out_.placements.erase(std::remove_if(out_.placements.begin(), out_.placements.end(),
                                       [&](placement const& p) { return drop[static_cast<std::size_t>(p.job)] != 0; }),
                        out_.placements.end());
  return undone;
}

void backfill_round::resolve(std::vector<std::int32_t> const& jobs) {
  if (jobs.empty()) return;
  // Jobs that may not use the same set of reserved nodes go to the core
  // together; the number of reservations starting before a job ends names
  // its set (ends only grow along the sorted starts). The most constrained
  // go first: they have the fewest places, the others can still take the
  // reserved nodes they leave.
  std::vector<std::int64_t> starts;
  for (auto const& h : res_) starts.push_back(h.start);
  std::sort(starts.begin(), starts.end());
  std::vector<std::size_t> count(jobs.size());
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    auto const e = end_of(jobs[k]);
    count[k] = static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), e) - starts.begin());
  }
  for (std::size_t c = starts.size() + 1; c-- > 0;) {
    sub_round sub;
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      if (count[k] == c) sub.jobs.push_back(jobs[k]);
    }
    if (sub.jobs.empty()) continue;
    std::vector<char> const mask = mask_for(end_of(sub.jobs.front()));
    sub.overrides = overrides_;
    sub.hidden = mask.empty() ? nullptr : &mask;
    apply(assign_jobs(core_, ws_, sub), sub.jobs);
  }
}

bool backfill_round::reserve(std::int32_t h) {
  std::vector<std::pair<std::int64_t, std::size_t>> rel;
  for (std::size_t r = 0; r < ws_.running.size(); ++r) {
    if (ws_.alive[r] != 0) rel.emplace_back(release_time(ws_.running[r], now_), r);
  }
  std::sort(rel.begin(), rel.end());
  std::vector<std::int64_t> times;
  for (auto const& [t, r] : rel) {
    if (times.empty() || times.back() != t) times.push_back(t);
  }
  if (times.empty()) return false;

  // Earlier reservations' whole nodes are held from now on: simple and safe
  // (their jobs may run past their estimates; a finer time-line of node
  // resources would need those ends, which nobody knows yet).
  std::vector<char> const held_nodes = all_held();
  if (!scratch_) scratch_.emplace(ws_.in);
  int const wanted = shape(h).replicas;
  auto probe = [&](std::size_t k) -> std::optional<placement> {
    scratch_->state = ws_.state;
    for (auto const& [t, r] : rel) {
      if (t > times[k]) break;
      release_job(scratch_->state, ws_.running[r]);
    }
    sub_round sub;
    sub.jobs = {h};
    sub.overrides = overrides_;
    sub.hidden = held_nodes.empty() ? nullptr : &held_nodes;
    round_result const r = assign_jobs(core_, *scratch_, sub);
    for (auto const& p : r.placements) {
      if (p.job == h && static_cast<int>(p.replicas.size()) == wanted) return p;
    }
    return std::nullopt;
  };

  // Fit is monotone in T (resources only come back), so binary-search the
  // release times; `found` holds the placement at `hi`.
  std::size_t hi = times.size() - 1;
  std::optional<placement> found = probe(hi);
  if (!found) return false;
  std::size_t lo = 0;
  while (lo < hi) {
    std::size_t const mid = lo + (hi - lo) / 2;
    if (auto p = probe(mid)) {
      hi = mid;
      found = std::move(p);
    } else {
      lo = mid + 1;
    }
  }

  held hd;
  hd.start = times[hi];
  hd.nodes.assign(n_nodes_, 0);
  reservation rv;
  rv.job = h;
  rv.start_time = hd.start;
  for (auto const& rp : found->replicas) {
    auto const n = static_cast<std::size_t>(rp.node);
    if (hd.nodes[n] == 0) rv.nodes.push_back(rp.node);
    hd.nodes[n] = 1;
  }
  std::sort(rv.nodes.begin(), rv.nodes.end());
  auto& e = entry_[static_cast<std::size_t>(h)];
  e.job = h;
  e.reason = unplaced_reason::reserved;
  e.detail = "reserved from t=" + std::to_string(rv.start_time) + " on " + std::to_string(rv.nodes.size()) +
             (rv.nodes.size() == 1 ? " node" : " nodes");
  out_.reservations.push_back(std::move(rv));
  res_.push_back(std::move(hd));
  reserved_[static_cast<std::size_t>(h)] = 1;
  return true;
}

void backfill_round::run() {
  auto const& q = ws_.in.pol.queue;
  std::size_t const max_res =
      q.backfill == backfill_mode::easy ? 1U : static_cast<std::size_t>(std::max(0, q.max_reservations));
  if (max_res == 0 || n_jobs_ == 0) return;

  placed_.assign(n_jobs_, 0);
  for (auto const& p : out_.placements) placed_[static_cast<std::size_t>(p.job)] = 1;
  entry_.assign(n_jobs_, unplaced{});
  for (auto const& u : out_.unplaced_jobs) {
    auto& e = entry_[static_cast<std::size_t>(u.job)];
    if (e.reason == unplaced_reason::none) e = u;
  }
  pinned_.assign(n_jobs_, 0);
  reserved_.assign(n_jobs_, 0);
  hopeless_.assign(n_jobs_, 0);
  bool blocked = false;
  for (std::size_t j = 0; j < n_jobs_ && !blocked; ++j) blocked = may_head(static_cast<std::int32_t>(j));
  if (!blocked) return;  // the common case costs one pass

  if (given_pinned_ != nullptr) {
    for (std::size_t j = 0; j < n_jobs_ && j < given_pinned_->size(); ++j) pinned_[j] = (*given_pinned_)[j];
  }
  std::vector<std::int32_t> all(n_jobs_);
  for (std::size_t j = 0; j < n_jobs_; ++j) all[j] = static_cast<std::int32_t>(j);
  order_ = queue_order(ws_.in, all);
  pos_.assign(n_jobs_, 0);
  for (std::size_t k = 0; k < order_.size(); ++k) pos_[static_cast<std::size_t>(order_[k])] = k;
  saved_.assign(n_jobs_, placement{});

  // Each head costs one core call now, a binary search if blocked and one
  // re-solve; heads that start (or never fit) do not use up a reservation,
  // so the budget bounds the round when many do.
  std::size_t budget = max_res + 4;
  std::size_t from = 0;
  while (budget-- > 0 && res_.size() < max_res && !ws_.out_of_time()) {
    std::int32_t h = -1;
    for (; from < order_.size(); ++from) {
      if (may_head(order_[from])) {
        h = order_[from];
        break;
      }
    }
    if (h < 0) break;
    ++from;

    std::vector<std::int32_t> const undone = undo_behind(pos_[static_cast<std::size_t>(h)]);
    std::vector<unplaced> const undone_entries = [&] {
      std::vector<unplaced> v;
      for (auto j : undone) v.push_back(entry_[static_cast<std::size_t>(j)]);
      return v;
    }();

    // The head alone, with the room of everything behind it, respecting the
    // reservations it would overlap.
    std::vector<char> const mask = mask_for(end_of(h));
    sub_round alone;
    alone.jobs = {h};
    alone.overrides = overrides_;
    alone.hidden = mask.empty() ? nullptr : &mask;
    round_result const r = assign_jobs(core_, ws_, alone);
    bool const started = std::any_of(r.placements.begin(), r.placements.end(),
                                     [&](placement const& p) { return p.job == h && !p.replicas.empty(); });
    bool changed = started;
    if (started) {
      apply(r, {h});
    } else if (reserve(h)) {
      changed = true;
    } else {
      hopeless_[static_cast<std::size_t>(h)] = 1;  // keeps its reason from the core
    }

    if (changed) {
      resolve(undone);
    } else {
      // Nothing moved: the undone placements fit exactly as before and
      // already respected every reservation.
      for (std::size_t k = 0; k < undone.size(); ++k) {
        auto const jj = static_cast<std::size_t>(undone[k]);
        start(undone[k], saved_[jj].replicas);
        entry_[jj] = undone_entries[k];
      }
    }
  }

  out_.unplaced_jobs.clear();
  for (auto const& e : entry_) {
    if (e.reason != unplaced_reason::none) out_.unplaced_jobs.push_back(e);
  }
}

}  // namespace

void backfill(core_fn const& core, work_state& ws, std::vector<job> const* overrides,
              std::vector<char> const* pinned, round_result& out) {
  if (ws.in.pol.queue.backfill == backfill_mode::off) return;
  backfill_round(core, ws, overrides, pinned, out).run();
}

}  // namespace placer::detail
