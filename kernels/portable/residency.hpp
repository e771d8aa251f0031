#pragma once
// Residency: what a backend with memory of its own (device_backend.hpp:
// the CUDA backend and its host twin) keeps between the calls of one round,
// and the node records that carry changes across (docs/architecture.md,
// "Residency").
//
// A round's node state (free GPU, CPU and memory), its score matrix and the
// clock of current cells (stamp, state label) change on both sides: the
// tier program commits on the device, the host places locality jobs and
// re-scores cells. Instead of sending every array both ways at every call,
// each side sends the nodes it changed, one fixed-width record a node:
//
//   record = node, free CPU, free memory, stamp, state label,
//            the node's GPUs (gpus slots), its score column (classes cells)
//
// The host packs the nodes it declared (backend::host_wrote) and the
// device unpacks them first; a chain of tier programs packs the nodes it
// may have changed (its first tier's refresh candidates, every tier's
// winners) and the host unpacks them after the call's one wait. The same
// functions run on both sides. A chain whose cells the host will not read
// (tier_problem::cells_wanted) sends no records: the cells stay on the
// device, the host takes its own as stale (tier_results::cells_back), and
// it replays the chain's commits from the placements
// (device_backend::replay_commits).

#include "tier_program.hpp"

#include <placer/kernels/hd.hpp>
#include <placer/kernels/tier.hpp>
#include <placer/kernels/views.hpp>

#include <cstddef>
#include <cstdint>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

/// The arrays of a round that change during it, on one side (host or
/// device). Null stamp / state: not kept (the clock is not bound yet);
/// null scores: no matrix yet.
struct node_state_view {
  std::int32_t n_nodes = 0;
  std::int32_t n_classes = 0;
  std::int32_t const* gpu_begin = nullptr;  ///< n_nodes + 1 (node_view::gpu_begin)
  std::int32_t* gpu_free = nullptr;
  std::int64_t* cpu_free = nullptr;
  std::int64_t* mem_free = nullptr;
  std::int32_t* scores = nullptr;  ///< n_classes x n_nodes
  std::int32_t* stamp = nullptr;
  std::int32_t* state = nullptr;
};

/// A block of node records, as arrays of `capacity` entries (the GPU and
/// score parts `gpus` and `classes` wide).
struct node_records {
  std::int32_t capacity = 0;
  std::int32_t gpus = 0;     ///< GPU slots a record: the round's largest node
  std::int32_t classes = 0;  ///< score cells a record (0: no matrix)
  std::int64_t* cpu = nullptr;
  std::int64_t* mem = nullptr;
  std::int32_t* node = nullptr;
  std::int32_t* stamp = nullptr;
  std::int32_t* state = nullptr;
  std::int32_t* gpu = nullptr;
  std::int32_t* col = nullptr;
};

/// Bytes of a block of `capacity` records.
inline std::size_t records_bytes(std::int32_t capacity, std::int32_t gpus, std::int32_t classes) {
  auto const k = static_cast<std::size_t>(capacity);
  return k * (2 * sizeof(std::int64_t) + (3 + static_cast<std::size_t>(gpus) + static_cast<std::size_t>(classes)) *
                                             sizeof(std::int32_t));
}

/// Lays a block of records out at `base` (8-byte aligned, records_bytes long).
inline node_records records_at(void* base, std::int32_t capacity, std::int32_t gpus, std::int32_t classes) {
  node_records r;
  r.capacity = capacity;
  r.gpus = gpus;
  r.classes = classes;
  if (base == nullptr) return r;
  auto const k = static_cast<std::size_t>(capacity);
  auto* w = static_cast<std::int64_t*>(base);
  r.cpu = w;
  r.mem = w + k;
  auto* i = reinterpret_cast<std::int32_t*>(w + 2 * k);
  r.node = i;
  r.stamp = i + k;
  r.state = i + 2 * k;
  r.gpu = i + 3 * k;
  r.col = r.gpu + k * static_cast<std::size_t>(gpus);
  return r;
}

/// Record i := node n of state s.
PLACER_HD inline void pack_record(node_state_view const& s, node_records const& r, std::int32_t i, std::int32_t n) {
  r.node[i] = n;
  r.cpu[i] = s.cpu_free[n];
  r.mem[i] = s.mem_free[n];
  r.stamp[i] = s.stamp != nullptr ? s.stamp[n] : 0;
  r.state[i] = s.state != nullptr ? s.state[n] : n;
  std::int32_t const g0 = s.gpu_begin[n];
  std::int32_t const g = s.gpu_begin[n + 1] - g0;
  std::int32_t* gpu = r.gpu + static_cast<std::int64_t>(i) * r.gpus;
  for (std::int32_t k = 0; k < g; ++k) gpu[k] = s.gpu_free[g0 + k];
  std::int32_t* col = r.col + static_cast<std::int64_t>(i) * r.classes;
  for (std::int32_t c = 0; c < r.classes; ++c) col[c] = s.scores[static_cast<std::int64_t>(c) * s.n_nodes + n];
}

/// State s := record i (for its node).
PLACER_HD inline void unpack_record(node_state_view const& s, node_records const& r, std::int32_t i) {
  std::int32_t const n = r.node[i];
  s.cpu_free[n] = r.cpu[i];
  s.mem_free[n] = r.mem[i];
  if (s.stamp != nullptr) s.stamp[n] = r.stamp[i];
  if (s.state != nullptr) s.state[n] = r.state[i];
  std::int32_t const g0 = s.gpu_begin[n];
  std::int32_t const g = s.gpu_begin[n + 1] - g0;
  std::int32_t const* gpu = r.gpu + static_cast<std::int64_t>(i) * r.gpus;
  for (std::int32_t k = 0; k < g; ++k) s.gpu_free[g0 + k] = gpu[k];
  if (s.scores == nullptr) return;
  std::int32_t const* col = r.col + static_cast<std::int64_t>(i) * r.classes;
  for (std::int32_t c = 0; c < r.classes; ++c) s.scores[static_cast<std::int64_t>(c) * s.n_nodes + n] = col[c];
}

/// The changing arrays a tier problem points to.
PLACER_HD inline node_state_view state_of(tier_problem const& p) {
  node_state_view s;
  s.n_nodes = p.nodes.n_nodes;
  s.n_classes = p.classes.n_classes;
  s.gpu_begin = p.nodes.gpu_begin;
  s.gpu_free = p.gpu_free;
  s.cpu_free = p.cpu_free;
  s.mem_free = p.mem_free;
  s.scores = p.scores;
  s.stamp = p.stamp;
  s.state = p.state;
  return s;
}

/// The nodes a chain of tiers may have changed are its first tier's
/// refresh candidates and every tier's winners (a later tier's candidates
/// are the winners before it); the chain sends every node instead when the
/// first tier has no candidates (it refreshed all) or when they and the
/// chain's copies reach the node count.
PLACER_HD inline bool chain_sends_all(tier_problem const& first, std::int32_t copies) {
  return first.changed == nullptr || static_cast<std::int64_t>(first.n_changed) + copies >= first.nodes.n_nodes;
}
/// Records the chain's block must hold.
PLACER_HD inline std::int32_t chain_records_capacity(tier_problem const& first, std::int32_t copies) {
  return chain_sends_all(first, copies) ? first.nodes.n_nodes : first.n_changed + copies;
}
/// Records a chain sent, once it placed `placed` replicas in all (a node
/// may be sent more than once, with the same contents).
PLACER_HD inline std::int32_t chain_records_count(tier_problem const& first, std::int32_t copies, std::int32_t placed) {
  return chain_sends_all(first, copies) ? first.nodes.n_nodes : first.n_changed + placed;
}

/// A chain of tiers on a resident round, one launch: the host's records
/// (n_in of them) unpacked first, then the tiers, then every node they may
/// have changed packed into `out` (none when out.capacity is 0).
template <class Team>
PLACER_HD void resident_chain_program(Team& t, tier_chain const& c, node_records const& in, std::int32_t n_in,
                                      node_records const& out) {
  tier_problem const& first = c.tiers[0];
  node_state_view const s = state_of(first);
  bool const grid = t.blocks() > 1;  // the records unpacked and packed by every CTA
  tier_shares(t, grid, n_in, [&](tier_share sh) {
    for (std::int32_t i = sh.first; i < sh.end; i += sh.stride) unpack_record(s, in, i);
  });
  if (!grid) t.sync();  // on a grid, the chain's barrier before its first tier
  tier_chain_program(t, c);  // ends at a barrier: placements, scores and labels are final
  if (out.capacity == 0) return;
  if (grid) t.grid_sync();  // the leading CTA's last tier, seen by all
  std::int32_t const copies = c.out_at[c.n_tiers];
  std::int32_t placed = 0;
  for (std::int32_t k = 0; k < c.n_tiers; ++k) placed += c.ctl[k].placed;
  bool const all = chain_sends_all(first, copies);
  std::int32_t const count = chain_records_count(first, copies, placed);
  tier_shares(t, grid, count, [&](tier_share sh) {
  for (std::int32_t i = sh.first; i < sh.end; i += sh.stride) {
    std::int32_t n = i;
    if (!all && i < first.n_changed) {
      n = first.changed[i];
    } else if (!all) {
      std::int32_t j = i - first.n_changed;  // the j-th winner, tier after tier
      std::int32_t k = 0;
      while (j >= c.ctl[k].placed) j -= c.ctl[k++].placed;
      n = c.out[tier_out_begin(c.tiers, c.ctl, c.out_at, k) + j].node;
    }
    pack_record(s, out, i, n);
  }
  });
}

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
