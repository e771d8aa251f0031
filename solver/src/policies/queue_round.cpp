// One round with the cross-round policies on (policies.hpp has the order
// and the invariants; docs/policies.md the reasoning).
#include "policies.hpp"

#include <algorithm>

namespace placer::detail {

namespace {

void drop_unplaced(round_result& out, std::int32_t j) {
  out.unplaced_jobs.erase(std::remove_if(out.unplaced_jobs.begin(), out.unplaced_jobs.end(),
                                         [&](unplaced const& u) { return u.job == j; }),
                          out.unplaced_jobs.end());
}

bool is_placed(round_result const& out, std::int32_t j) {
  return std::any_of(out.placements.begin(), out.placements.end(), [&](placement const& p) { return p.job == j; });
}

/// Unplaced jobs (not deferred, not invalid) in queue order.
std::vector<std::int32_t> still_unplaced(work_state const& ws, round_result const& out,
                                         std::vector<char> const* deferred) {
  std::vector<std::int32_t> js;
  for (auto const& u : out.unplaced_jobs) {
    if (u.reason == unplaced_reason::invalid_job || u.reason == unplaced_reason::deadline_exceeded) continue;
    if (deferred != nullptr && (*deferred)[static_cast<std::size_t>(u.job)] != 0) continue;
    js.push_back(u.job);
  }
  return queue_order(ws.in, js);
}

/// The jobs marked in `mark` that `out` has not placed, in queue order.
std::vector<std::int32_t> unplaced_marked(work_state const& ws, round_result const& out, std::vector<char> const& mark) {
  std::vector<std::int32_t> js;
  for (std::size_t j = 0; j < ws.in.pending.size(); ++j) {
    if (mark[j] != 0 && !is_placed(out, static_cast<std::int32_t>(j))) js.push_back(static_cast<std::int32_t>(j));
  }
  return queue_order(ws.in, js);
}

/// Which deferred gangs still unplaced after the assignment could start
/// now spread (delay_plan::by_choice): the core places them in queue order
/// without delay scheduling's consolidated-or-nothing rewrite, and nothing
/// is applied. The others' reasons from that probe are kept for the reply.
/// Without this, network preemption acted for gangs that had no room at
/// all: priority preemption without its checkpoint window (ITP cluster01
/// on one leaf: 57-82 jobs preempted a run, docs/policies.md).
void find_by_choice(core_fn const& core, work_state const& ws, round_result const& out, delay_plan& plan) {
  plan.by_choice.assign(ws.in.pending.size(), 0);
  plan.spread_reasons.clear();
  std::vector<std::int32_t> const waiting = unplaced_marked(ws, out, plan.deferred_candidate);
  if (waiting.empty()) return;
  std::vector<job> consolidated;
  consolidated.reserve(waiting.size());
  for (auto j : waiting) {
    auto& o = plan.overrides[static_cast<std::size_t>(j)];
    consolidated.push_back(std::move(o));
    o = as_placed(ws.in.pending[static_cast<std::size_t>(j)], ws.in);
  }
  sub_round probe;
  probe.jobs = waiting;
  probe.overrides = &plan.overrides;
  round_result r = assign_jobs(core, ws, probe);
  for (std::size_t k = 0; k < waiting.size(); ++k) {
    plan.overrides[static_cast<std::size_t>(waiting[k])] = std::move(consolidated[k]);
  }
  for (auto const& p : r.placements) {
    if (!p.replicas.empty()) plan.by_choice[static_cast<std::size_t>(p.job)] = 1;
  }
  plan.spread_reasons = std::move(r.unplaced_jobs);
}

}  // namespace

round_result queue_round(core_fn const& core, round_input const& in, queue_memory* memory, cluster* final_state,
                         std::function<bool()> out_of_time) {
  queue_policy const& q = in.pol.queue;
  work_state ws(in);
  ws.late = std::move(out_of_time);
  queue_memory scratch;
  queue_memory& mem = memory != nullptr ? *memory : scratch;

  // 1. Delay scheduling rewrites communication-heavy gangs that may still
  //    wait into "consolidated or nothing".
  //    Elastic jobs are first placed at the size they ask for (clamped
  //    into their range), as a gang: the minimum is how far they may be
  //    shrunk for others, not where they start (docs/policies.md).
  delay_plan plan;
  std::vector<job> const* overrides = nullptr;
  if (q.delay_scheduling) {
    plan = plan_delays(ws, mem);
    overrides = &plan.overrides;
  }
  if (q.elastic) {
    if (overrides == nullptr) plan.overrides = in.pending;
    for (auto& j : plan.overrides) j = as_placed(std::move(j), in);
    overrides = &plan.overrides;
  }

  // 2. The one-round assignment of everything pending.
  sub_round all;
  all.jobs.resize(in.pending.size());
  for (std::size_t j = 0; j < in.pending.size(); ++j) all.jobs[j] = static_cast<std::int32_t>(j);
  all.overrides = overrides;
  round_result out = assign_jobs(core, ws, all);
  for (auto const& p : out.placements) ws.start(p.job, p.replicas);
  std::vector<char> by_core(in.pending.size(), 0);
  for (auto const& p : out.placements) by_core[static_cast<std::size_t>(p.job)] = 1;

  // Steps 3-7 improve on that assignment; past the budget they are skipped
  // (and the ones running stop between jobs).
  // 3. Reclaim: inference jobs that did not fit take loaned nodes back.
  if (q.loaning && (q.auto_reclaim || q.reclaim_nodes > 0) && !ws.out_of_time()) {
    std::vector<std::int32_t> inference;
    for (auto j : still_unplaced(ws, out, nullptr)) {
      if (q.auto_reclaim && in.pending[static_cast<std::size_t>(j)].kind == job_kind::inference) inference.push_back(j);
    }
    if (!inference.empty() || q.reclaim_nodes > 0) reclaim_loaned(core, ws, inference, overrides, out);
  }

  // 4. Priority preemption for what is still blocked (not the deferred
  //    gangs that could start spread: they wait by choice).
  if (q.delay_scheduling) find_by_choice(core, ws, out, plan);
  std::vector<char> const* deferred = q.delay_scheduling ? &plan.by_choice : nullptr;
  //    First, at no lost work: elastic jobs' extra workers yield to blocked
  //    jobs of equal or higher priority (scale-in).
  if (q.elastic && !ws.out_of_time()) {
    auto blocked = still_unplaced(ws, out, deferred);
    if (!blocked.empty()) elastic_scale_in_for(core, ws, blocked, overrides, out);
  }
  if (q.preemption && !ws.out_of_time()) {
    auto blocked = still_unplaced(ws, out, deferred);
    if (!blocked.empty()) preempt_for(core, ws, blocked, preempt_scope::priority, overrides, out);
  }

  // 5. Network-sensitive preemption: deferred gangs that could start spread
  //    try to consolidate by preempting insensitive, lower-priority work
  //    inside one domain.
  if (q.network_preemption && q.delay_scheduling && !ws.out_of_time()) {
    auto const waiting = unplaced_marked(ws, out, plan.by_choice);
    if (!waiting.empty()) preempt_for(core, ws, waiting, preempt_scope::network, overrides, out);
  }

  // 6. Backfill: reservations for the blocked head(s); undo backfills that
  //    would delay them.
  if (q.backfill != backfill_mode::off && !ws.out_of_time()) {
    // What the steps above placed on freed resources stays placed.
    std::vector<char> pinned(in.pending.size(), 0);
    for (auto const& p : out.placements) pinned[static_cast<std::size_t>(p.job)] = by_core[static_cast<std::size_t>(p.job)] == 0;
    backfill(core, ws, overrides, &pinned, out);
  }

  // 7. Elastic: spare GPUs to elastic jobs.
  if (q.elastic && !ws.out_of_time()) elastic_scale_out(core, ws, out);

  // 8. Delay scheduling bookkeeping: Deferred reasons, waits, timers.
  if (q.delay_scheduling) settle_delays(ws, plan, mem, out);

  // A job shrunk by a reclaim and then preempted whole is reported as
  // preempted only: the preemption already covers the replicas removed.
  out.scale_ins.erase(std::remove_if(out.scale_ins.begin(), out.scale_ins.end(),
                                     [&](scale_change const& sc) {
                                       return std::any_of(out.preemptions.begin(), out.preemptions.end(),
                                                          [&](preemption const& p) { return p.job == sc.job; });
                                     }),
                      out.scale_ins.end());
  // A job is no longer unplaced once all its replicas are (elastic jobs may
  // have more); a partly placed non-gang job keeps its reason.
  for (auto const& p : out.placements) {
    auto const& shape = overrides != nullptr ? (*overrides)[static_cast<std::size_t>(p.job)]
                                             : in.pending[static_cast<std::size_t>(p.job)];
    if (static_cast<std::int32_t>(p.replicas.size()) >= shape.replicas) drop_unplaced(out, p.job);
  }
  if (final_state != nullptr) *final_state = std::move(ws.state);
  return out;
}

}  // namespace placer::detail
