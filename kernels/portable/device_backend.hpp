#pragma once
// The backend of a device with memory of its own, written once against a
// `Device`: cuda_device (kernels/cuda/cuda_backend.cu, nvcc) and its twin
// over host memory, host_device (kernels/src/device_twin.cpp, g++), which
// runs this same code in CI: the arenas, the staging, the residency of a
// bound round and its node records, the transfers and their counts.
//
// Memory: two arenas, each a device allocation with a pinned host mirror.
//   resident  the bound round (bind_round .. unbind_round): every array of
//             its node, class and task views, the score matrix, the clock
//             (stamp, state). Sent at bind_round, except the arrays that
//             are byte for byte what the device already holds (a session's
//             next round: the nodes' fixed arrays), and kept there.
//   work      one call's inputs, scratch and results, laid out per call.
// A call with the bound round's views reads the resident copies: the host
// sends only the nodes it declared changed (backend::host_wrote) as node
// records, and a tier program sends back only the nodes it changed
// (residency.hpp). A call with other views sends them whole, as before.
//
// A Device provides:
//   static constexpr backend_kind kind; static constexpr bool checks_pointers;
//   description(); guard(f) (runs f with the device current, failures as
//   device_fault); device_alloc / device_free; host_alloc / host_free
//   (pinned); up(d, h, bytes) / down(h, d, bytes) (asynchronous, in stream
//   order); sync(); check_launch(); run_stages(stage_call) (one launch:
//   the records, statistics, score and capacities a call asks for,
//   stage_program.hpp); run_tiers(chain, records in, count, records out,
//   stages after) (one launch: chain_launch_program); expect_device(p, bytes) (the twin: p lies in device memory);
//   mark() / mark_ns(slot) / marks_done() (the call timeline's GPU marks,
//   timeline.hpp: an event on the stream, and its time on the host's clock
//   once the stream is drained; the twin has none: -1).

#include "residency.hpp"
#include "stage_program.hpp"
#include "tier_program.hpp"

#include <placer/kernels/backend.hpp>
#include <placer/kernels/timeline.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace placer::kernels {
inline namespace PLACER_BACKEND_NS {

// ------------------------------------------------------------- view arrays

/// Calls f(field, count, changes) for every array of a view, in a fixed
/// order (null fields included, with any count): `field` is the pointer
/// member (f may replace it), `changes` marks the arrays a round changes
/// (the free CPU, memory and GPUs). The one list of a view's arrays, for
/// sending, sizing, comparing and checking them.
template <class F>
void each_array(node_view& v, F&& f) {
  auto const n = static_cast<std::size_t>(v.n_nodes);
  auto const g = static_cast<std::size_t>(v.n_gpus);
  f(v.cpu_free, n, true);
  f(v.cpu_capacity, n, false);
  f(v.mem_free, n, true);
  f(v.model, n, false);
  f(v.pool, n, false);
  f(v.flags, n, false);
  f(v.gpu_begin, n + 1, false);
  f(v.gpu_free, g, true);
  f(v.gpu_capacity, n, false);
  f(v.gpu_island, g, false);
  f(v.scarcity, n, false);
  f(v.same_as, n, false);
  f(v.score_as, n, false);
  f(v.frag_node, static_cast<std::size_t>(v.n_frag), false);
  f(v.frag_slot, n, false);
  f(v.group, n, false);
}

template <class F>
void each_array(class_view& v, F&& f) {
  auto const n = static_cast<std::size_t>(v.n_classes);
  auto const cells = v.admit != nullptr ? static_cast<std::size_t>(v.n_sets) * static_cast<std::size_t>(v.n_groups) : 0;
  f(v.gpus, n, false);
  f(v.milli, n, false);
  f(v.cpu, n, false);
  f(v.mem, n, false);
  f(v.model_mask, n, false);
  f(v.pool_mask, n, false);
  f(v.loan_ok, n, false);
  f(v.any_model, n, false);
  f(v.one_per_node, n, false);
  f(v.constraint, v.admit != nullptr ? n : 0, false);
  f(v.admit, cells, false);
  f(v.prefer, cells, false);
}

template <class F>
void each_array(task_view& v, F&& f) {
  auto const n = static_cast<std::size_t>(v.n_tasks);
  f(v.gpus, n, false);
  f(v.milli, n, false);
  f(v.cpu, n, false);
  f(v.model_mask, n, false);
  f(v.freq_ppm, n, false);
}

template <class F>
void each_array(domain_index_view& v, F&& f) {
  f(v.node, static_cast<std::size_t>(v.n_entries), false);
  f(v.begin, static_cast<std::size_t>(v.n_domains) + 1, false);
}

/// Whether two views are the same arrays (pointers and sizes) with the
/// same scalars.
template <class View>
bool same_arrays(View a, View b) {
  std::array<std::pair<void const*, std::size_t>, 16> pa{}, pb{};  // a view has at most 15 arrays
  std::size_t ka = 0, kb = 0;
  each_array(a, [&](auto const* p, std::size_t n, bool) { pa[ka++] = {p, p != nullptr ? n : 0}; });
  each_array(b, [&](auto const* p, std::size_t n, bool) { pb[kb++] = {p, p != nullptr ? n : 0}; });
  if constexpr (std::is_same_v<View, task_view>) {
    if (a.share_cpu != b.share_cpu) return false;
  }
  return ka == kb && std::equal(pa.begin(), pa.begin() + static_cast<std::ptrdiff_t>(ka), pb.begin());
}

template <class T>
std::size_t padded(std::size_t n) {
  return (n * sizeof(T) + 255) / 256 * 256;
}

// ------------------------------------------------------------------ arena

/// Device memory and its pinned host mirror, each a bump allocator laid
/// out per use by a plan: the plan runs once to measure, the memory grows
/// to fit (only between calls, with nothing in flight), and it runs again
/// for real. Staged buffers have a device part and a mirror part (their
/// inputs are written into the mirror and sent by flush(), coalesced into
/// as few copies as their layout allows); scratch is device only; landings
/// are mirror only, where results come down. Both grow to the high-water
/// mark, so a steady stream of rounds allocates nothing.
///
/// Calls the host does not wait for (their buffers still read by copies
/// and kernels in flight) are held: hold() keeps what the plans laid out
/// so far, the next plans lay out after it, and release() (after the
/// host's wait) frees it all. Memory never grows while held: the backend
/// waits first (fits()).
template <class Device>
class device_arena {
 public:
  explicit device_arena(Device& d) : dev_(d) {}
  device_arena(device_arena const&) = delete;
  device_arena& operator=(device_arena const&) = delete;
  ~device_arena() {
    if (d_base_ != nullptr) dev_.device_free(d_base_);
    if (h_base_ != nullptr) dev_.host_free(h_base_);
  }

  /// Lays buffers out with layout(*this); returns whether the memory was
  /// replaced (whatever it held is gone).
  /// `ahead`: bytes to grow by beyond the layout, if it grows (room for
  /// the calls a later plan's will follow).
  template <class Layout>
  bool plan(Layout&& layout, std::size_t ahead = 0) {
    if (!fits(layout) && floor_ > 0) {
      throw logic_error(error_code::internal, "device arena: grown while calls in flight hold it");
    }
    d_used_ += ahead;
    h_used_ += ahead;
    bool replaced = false;
    if (d_used_ > d_cap_) {
      if (d_base_ != nullptr) dev_.device_free(d_base_);
      d_base_ = nullptr;
      d_cap_ = 0;
      std::size_t const grown = d_used_ + d_used_ / 2;
      d_base_ = static_cast<char*>(dev_.device_alloc(grown));
      d_cap_ = grown;
      replaced = true;
    }
    if (h_used_ > h_cap_) {
      if (h_base_ != nullptr) dev_.host_free(h_base_);
      h_base_ = nullptr;
      h_cap_ = 0;
      std::size_t const grown = h_used_ + h_used_ / 2;
      h_base_ = static_cast<char*>(dev_.host_alloc(grown));
      h_cap_ = grown;
      replaced = true;
    }
    measuring_ = false;
    apart_ = false;
    d_used_ = h_used_ = floor_;
    sends_.clear();
    layout(*this);
    return replaced;
  }
  /// Whether layout(*this) fits the memory as it is (measured, nothing laid out).
  template <class Layout>
  bool fits(Layout&& layout) {
    measuring_ = true;
    apart_ = false;
    d_used_ = h_used_ = floor_;
    layout(*this);
    measuring_ = false;
    return d_used_ <= d_cap_ && h_used_ <= h_cap_;
  }
  /// Keeps everything laid out so far past the next plans (its two sides
  /// in step again after it).
  void hold() { floor_ = std::max(d_used_, h_used_); }
  void release() { floor_ = 0; }
  [[nodiscard]] bool held() const { return floor_ > 0; }
  [[nodiscard]] std::size_t floor() const { return floor_; }

  /// n elements on the device and their mirror: {device, mirror}.
  template <class T>
  std::pair<T*, T*> space(std::size_t n) {
    if (n == 0) return {nullptr, nullptr};
    std::size_t const bytes = padded<T>(n);
    std::size_t const d = d_used_, h = h_used_;
    d_used_ += bytes;
    h_used_ += bytes;
    if (measuring_) return {nullptr, nullptr};
    return {reinterpret_cast<T*>(d_base_ + d), reinterpret_cast<T*>(h_base_ + h)};
  }
  /// n elements of h staged: copied into the mirror now, sent by flush().
  /// Null for a null h; an empty array stays a non-null one (a list of
  /// none is not an absent list).
  template <class T>
  T* stage(T const* h, std::size_t n) {
    if (h == nullptr) return nullptr;
    if (n == 0) return take<T>(1);
    auto const [d, m] = space<T>(n);
    if (d != nullptr) {
      std::memcpy(m, h, n * sizeof(T));
      send(d, m, n * sizeof(T));
    }
    return d;
  }
  /// n elements on the device only.
  template <class T>
  T* take(std::size_t n) {
    return one_side<T>(d_used_, d_base_, n);
  }
  /// n elements of mirror only: where a result comes down.
  template <class T>
  T* landing(std::size_t n) {
    return one_side<T>(h_used_, h_base_, n);
  }
  /// The mirror of a device buffer, in an arena laid out by space() alone
  /// (its two sides in step).
  template <class T>
  T* mirror(T const* d) const {
    if (apart_) throw logic_error(error_code::internal, "device arena: mirror() of an arena with one-sided buffers");
    return reinterpret_cast<T*>(h_base_ + (reinterpret_cast<char const*>(d) - d_base_));
  }
  /// Queues `bytes` of mirror h (a buffer of space()) to be sent to d.
  void send(void const* d, void const* h, std::size_t bytes) {
    if (bytes == 0) return;
    auto const dat = static_cast<std::size_t>(static_cast<char const*>(d) - d_base_);
    auto const hat = static_cast<std::size_t>(static_cast<char const*>(h) - h_base_);
    // A neighbour on both sides merges (the padding between goes along):
    // one copy for a run of staged buffers.
    if (!sends_.empty()) {
      auto& last = sends_.back();
      if (dat >= last.d && hat >= last.h && dat - last.d == hat - last.h && dat <= last.d + last.bytes + 256) {
        last.bytes = std::max(last.bytes, dat + bytes - last.d);
        return;
      }
    }
    sends_.push_back({dat, hat, bytes});
  }
  /// Copies queued for the next flush.
  [[nodiscard]] std::int32_t copies_queued() const { return static_cast<std::int32_t>(sends_.size()); }
  /// Sends everything queued since the last flush; returns the bytes sent.
  std::int64_t flush() {
    std::int64_t sent = 0;
    for (auto const& q : sends_) {
      dev_.up(d_base_ + q.d, h_base_ + q.h, q.bytes);
      sent += static_cast<std::int64_t>(q.bytes);
    }
    sends_.clear();
    return sent;
  }

 private:
  /// n elements on one side (device or mirror): the sides' offsets part.
  template <class T>
  T* one_side(std::size_t& used, char* base, std::size_t n) {
    if (n == 0) return nullptr;
    std::size_t const at = used;
    used += padded<T>(n);
    apart_ = true;
    return measuring_ ? nullptr : reinterpret_cast<T*>(base + at);
  }

  Device& dev_;
  char* d_base_ = nullptr;
  char* h_base_ = nullptr;
  std::size_t d_cap_ = 0, h_cap_ = 0;
  std::size_t d_used_ = 0, h_used_ = 0;
  std::size_t floor_ = 0;  ///< held by calls in flight (hold)
  bool measuring_ = false;
  bool apart_ = false;  ///< device-only or mirror-only buffers laid out: offsets differ
  struct queued {
    std::size_t d, h, bytes;
  };
  std::vector<queued> sends_;
};

// ---------------------------------------------------------------- backend

/// The parts of a domain's sum on a device (stage_caps_add): 100k's root
/// domain's 12,800 nodes as 64 threads' 200 each.
inline constexpr std::int32_t domain_sum_parts = 64;
/// What the statistics' sums start from on the device (staged up: the
/// stage program adds into it).
inline constexpr cluster_stats zero_stats{};

/// What a chain's launch sent back is checked before the host reads by it
/// (check_chain_placements, check_chain_records): a count or an index that
/// would have the host read or write past its buffers throws logic_error
/// (internal). A device that computed wrong fails the round with a clear
/// error, not the process: the first GPU run of a chain's scratch in shared
/// memory (2026-12-04) ended its test with SIGSEGV on the host, which read
/// by the counts it got.
[[noreturn]] inline void chain_output_refused(std::string const& what) {
  throw logic_error(error_code::internal, "the device's tier chain sent back " + what);
}
/// Each tier's placement count within 0 to its copies, each placement's node
/// and row in range.
inline void check_chain_placements(tier_control const* ctl, tier_placement const* out, std::int32_t const* out_at,
                                   tier_problem const* tiers, std::int32_t n_tiers, std::int32_t n_nodes) {
  for (std::int32_t k = 0; k < n_tiers; ++k) {
    // A window's slot: its draw's region from where the slots before it end.
    std::int32_t const begin = tier_out_begin(tiers, ctl, out_at, k);
    std::int32_t const copies = out_at[k + 1] - begin;
    if (ctl[k].placed < 0 || ctl[k].placed > copies) {
      chain_output_refused(std::to_string(ctl[k].placed) + " placements for tier " + std::to_string(k) + " of " +
                           std::to_string(copies) + " copies");
    }
    for (std::int32_t i = 0; i < ctl[k].placed; ++i) {
      tier_placement const& tp = out[begin + i];
      if (tp.node < 0 || tp.node >= n_nodes || tp.row < 0 || tp.row >= tiers[k].n_rows) {
        chain_output_refused("a placement on node " + std::to_string(tp.node) + " of " + std::to_string(n_nodes) +
                             ", row " + std::to_string(tp.row) + " of " + std::to_string(tiers[k].n_rows) + " (tier " +
                             std::to_string(k) + ")");
      }
    }
  }
}
/// Each record's node in range.
inline void check_chain_records(std::int32_t const* record_nodes, std::int32_t records, std::int32_t n_nodes) {
  for (std::int32_t i = 0; i < records; ++i) {
    if (record_nodes[i] < 0 || record_nodes[i] >= n_nodes) {
      chain_output_refused("a record of node " + std::to_string(record_nodes[i]) + " of " + std::to_string(n_nodes));
    }
  }
}

template <class Device>
class device_backend final : public backend {
 public:
  /// `resident`: keep a bound round on the device (false: every call sends
  /// its views whole, as before residency; the twin measures both).
  /// `verify`: at every call of a bound round, read the device's copies
  /// back and compare them with the host's arrays (tests).
  template <class... A>
  explicit device_backend(bool resident, bool verify, A&&... device_args)
      : dev_(std::forward<A>(device_args)...), keep_(resident), verify_(verify) {}

  [[nodiscard]] backend_kind kind() const override { return Device::kind; }
  [[nodiscard]] std::string const& description() const override { return dev_.description(); }

  void bind_round(round_binding const& b) override {
    unbind_round();
    if (!keep_) return;
    dev_.guard([&] {
      settle();  // the last round's copies out of the mirror
      host_ = b;
      node_view dn = b.nodes;
      class_view dc = b.classes;
      task_view dt = b.tasks;
      auto const n = static_cast<std::size_t>(b.nodes.n_nodes);
      std::size_t const cells = n * static_cast<std::size_t>(b.classes.n_classes);
      std::size_t k = 0;
      auto place = [&](device_arena<Device>& a, auto& field, std::size_t count, bool changes) {
        using T = std::remove_const_t<std::remove_pointer_t<std::remove_reference_t<decltype(field)>>>;
        std::size_t const len = field != nullptr ? count : 0;
        auto const [d, m] = a.template space<T>(len);
        if (k >= next_.size()) next_.resize(k + 1);
        next_[k++] = {d, m, len * sizeof(T), changes, false};
      };
      bool const replaced = resident_.plan([&](device_arena<Device>& a) {
        k = 0;
        auto at = [&](auto& field, std::size_t count, bool changes) { place(a, field, count, changes); };
        each_array(dn, at);
        each_array(dc, at);
        each_array(dt, at);
        d_scores_ = a.template space<std::int32_t>(cells).first;
        d_stamp_ = a.template space<std::int32_t>(n).first;
        d_state_ = a.template space<std::int32_t>(n).first;
      });
      // Every array to its device copy, except one the device holds already
      // (the same place and size, its mirror an image of it, the same
      // bytes): a session's next round sends its nodes' fixed arrays once.
      k = 0;
      auto send = [&](auto& field, std::size_t, bool) {
        region& r = next_[k];
        region const was = k < regions_.size() ? regions_[k] : region{};
        ++k;
        if (r.bytes == 0) {
          field = nullptr;
          return;
        }
        bool const held = !replaced && !r.changes && was.image && was.d == r.d && was.bytes == r.bytes &&
                          std::memcmp(r.h, field, r.bytes) == 0;
        if (!held) {
          std::memcpy(r.h, field, r.bytes);
          resident_.send(r.d, r.h, r.bytes);
        }
        r.image = !r.changes;  // the changing arrays move on the device
        field = static_cast<std::remove_reference_t<decltype(field)>>(r.d);
      };
      each_array(dn, send);
      each_array(dc, send);
      each_array(dt, send);
      regions_.assign(next_.begin(), next_.begin() + static_cast<std::ptrdiff_t>(k));
      flush(resident_);
      in_flight_ = true;
      d_nodes_ = dn;
      d_classes_ = dc;
      d_tasks_ = dt;
      record_gpus_ = 0;
      for (std::size_t i = 0; i < n; ++i) {
        record_gpus_ = std::max(record_gpus_, b.nodes.gpu_begin[i + 1] - b.nodes.gpu_begin[i]);
      }
      scores_kept_ = false;
      chain_stats_ = false;
      clock_stamp_ = clock_state_ = nullptr;
      cells_away_.assign(n, 0);
      wrote_.start(b.nodes.n_nodes);
      bound_ = true;
    });
  }

  void unbind_round() override {
    stats_due_ = false;  // nothing will take them
    bound_ = false;
    wrote_.stop();
  }

  void score(node_view const& nodes, class_view const& classes, task_view const& tasks, score_params const& params,
             std::span<std::int32_t> out) override {
    score_then(nodes, classes, tasks, params, out, true);
  }

  /// The score stage; the bound round's matrix comes down only when the
  /// caller reads it (`read`), and the host waits only for what comes down.
  bool score_then(node_view const& nodes, class_view const& classes, task_view const& tasks,
                  score_params const& params, std::span<std::int32_t> out, bool read) override {
    return dev_.guard([&] {
      std::size_t const cells = static_cast<std::size_t>(nodes.n_nodes) * classes.n_classes;
      bool const kept = bound(nodes, classes, tasks) && out.data() == host_.scores;
      // The statistics stats_begin left due run in this call, before its
      // cells, where the device's state is still theirs (no host write since).
      bool const with_stats = stats_due_ && kept && nothing_written();
      if (!with_stats) launch_due_stats();
      stats_due_ = false;
      if (kept) {
        resend_all();
        verify(true);  // before the host's records land: the rest must be the host's already
      }
      // The fragmentation table's entries split over lanes (frag_part_op), a
      // cell a thread after it: the device's width.
      stage_call s;
      s.p = params;
      s.entries = static_cast<std::int64_t>(frag_table_cells(nodes, classes, tasks, params));
      s.lanes = frag_lanes(static_cast<std::size_t>(s.entries));
      std::size_t const table = static_cast<std::size_t>(s.entries) * static_cast<std::size_t>(s.lanes);
      s.nv = kept ? d_nodes_ : nodes;
      s.cv = kept ? d_classes_ : classes;
      s.tv = kept ? d_tasks_ : tasks;
      s.out = kept ? d_scores_ : nullptr;
      std::int32_t* h_out = nullptr;
      cluster_stats* d_stats = nullptr;
      cluster_stats* h_stats = nullptr;
      plan_work([&](device_arena<Device>& a) {
        if (kept) {
          records_in(a);
        } else {
          s.nv = stage_view(a, nodes);
          s.cv = stage_view(a, classes);
          s.tv = stage_view(a, tasks);
          s.out = a.template take<std::int32_t>(cells);
          h_out = a.template landing<std::int32_t>(cells);
        }
        s.table = a.template take<std::int64_t>(table);  // device only: never copied back
        if (with_stats) {
          d_stats = a.stage(&zero_stats, 1);  // the sums are added into it
          h_stats = a.template landing<cluster_stats>(1);
        }
      });
      if (kept) h_out = resident_.mirror(d_scores_);
      if (cells == 0) s.out = nullptr;
      if (with_stats) stats_into(s, d_stats);
      run_stages(s, kept, "score");
      if (with_stats) {
        down(h_stats, d_stats, 1);
        begun_at_ = h_stats;  // stats_end's, at the round's next wait
      }
      std::int32_t* const d_out = s.out;
      bool const away = kept && !read;  // the cells stay here; the host's are not them
      if (away) {
        // Nothing comes down: the host goes on while the device scores; the
        // call's buffers stay held until the round's next wait.
        work_.hold();
      } else {
        down(h_out, d_out, cells);
        sync();
        if (cells > 0) std::memcpy(out.data(), h_out, cells * sizeof(std::int32_t));
      }
      if (kept) {
        scores_kept_ = true;
        std::fill(cells_away_.begin(), cells_away_.end(), static_cast<std::uint8_t>(away ? 1 : 0));
        verify();
      }
      return !away;
    });
  }

  cluster_stats stats(node_view const& nodes, task_view const& tasks) override {
    return dev_.guard([&] {
      launch_due_stats();
      bool const kept = bound_ && same_arrays(nodes, host_.nodes) && same_arrays(tasks, host_.tasks);
      // The statistics the round's last chain left, if nothing was written since.
      if (kept && chain_stats_ && nothing_written()) return chain_stats_value_;
      cluster_stats* h = queue_stats(nodes, tasks, kept);
      sync();
      return *h;
    });
  }
  /// The statistics of the nodes as they are: on the bound round's views,
  /// with no host write to send, left due and run inside the next call that
  /// launches (the score call's, before its cells), or alone before any
  /// other; else queued now. Their sums come down with the round's next wait.
  void stats_begin(node_view const& nodes, task_view const& tasks) override {
    dev_.guard([&] {
      launch_due_stats();
      bool const kept = bound_ && same_arrays(nodes, host_.nodes) && same_arrays(tasks, host_.tasks);
      if (kept && nothing_written()) {
        stats_due_ = true;
        return;
      }
      begun_at_ = queue_stats(nodes, tasks, kept);
      work_.hold();  // down at the round's next wait (sync)
    });
  }
  [[nodiscard]] cluster_stats stats_end() override {
    return dev_.guard([&] {
      launch_due_stats();
      if (begun_at_ != nullptr) sync();  // none since stats_begin
      return begun_;
    });
  }
  void domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                       domain_index_view const& idx, std::span<std::int64_t> cap) override {
    dev_.guard([&] {
      launch_due_stats();
      bool const kept = bound_ && same_arrays(nodes, host_.nodes) && same_arrays(classes, host_.classes);
      if (kept) {
        resend_all();
        verify(true);
      }
      stage_call s;
      s.nv = kept ? d_nodes_ : nodes;
      s.cv = kept ? d_classes_ : classes;
      caps_call caps;
      plan_work([&](device_arena<Device>& a) {
        if (kept) {
          records_in(a);
        } else {
          s.nv = stage_view(a, nodes);
          s.cv = stage_view(a, classes);
        }
        caps = caps_in(a, of, idx);
      });
      caps_into(s, caps);
      run_stages(s, kept, "domain_capacity");
      down(caps.landing, caps.cap, caps.sums);
      sync();
      copy_out(cap.data(), caps.landing, caps.sums);
    });
  }

  void place_tiers(std::span<tier_problem const> tiers, tier_results& out) override {
    place_tiers_then(tiers, out, {});
  }

  /// The chain, then in the same call's stream and its one wait the
  /// statistics `then` asks for, on the state it leaves.
  void place_tiers_then(std::span<tier_problem const> tiers, tier_results& out, follow_up const& then) override {
    dev_.guard([&] {
      launch_due_stats();
      auto const k = static_cast<std::int32_t>(tiers.size());
      if (k == 0) {
        tier_chain_results(nullptr, nullptr, nullptr, nullptr, 0, out);
        return;
      }
      chain_stats_ = false;  // the state moves on
      tier_problem const& first = tiers[0];
      node_view const& nv = first.nodes;
      // Kept: the bound round's views, matrix and node arrays (every tier of a
      // chain shares them).
      bool const kept = bound(nv, first.classes, first.tasks) && scores_kept_ && first.scores == host_.scores &&
                        first.gpu_free == host_.gpu_free && first.cpu_free == host_.cpu_free &&
                        first.mem_free == host_.mem_free;
      auto const n = static_cast<std::size_t>(nv.n_nodes);
      auto const n_classes = static_cast<std::size_t>(first.classes.n_classes);
      std::size_t const cells = n * n_classes;
      heap_begin_.resize(tier_chain_heap_entries(tiers.data(), k));
      heap_at_.resize(static_cast<std::size_t>(k));
      out_at_.resize(static_cast<std::size_t>(k) + 1);
      std::int32_t most_rows = 0, most_copies = 0;
      std::int32_t const copies = tier_chain_offsets(tiers.data(), k, heap_begin_.data(), heap_at_.data(),
                                                     out_at_.data(), most_rows, most_copies);
      if (kept) {
        resend_all();
        bind_clock(first);
        verify(true);  // before the host's records land: the rest must be the host's already
      }
      // Kept: the nodes the chain may have changed come back as records, of
      // their state and their score cells; where the caller wants no cells
      // (they stay on the device, the host's stale from here:
      // tier_results::cells_back), nothing but the placements, from which
      // the host replays the chain's commits (replay_commits). Not kept:
      // the whole state, the matrix with it.
      bool const cells_away = kept && !first.cells_wanted;
      std::int32_t const back = kept && !cells_away ? chain_records_capacity(first, copies) : 0;
      auto const width = static_cast<std::int32_t>(n_classes);
      std::size_t const back_bytes = records_bytes(back, record_gpus_, width);
      ctl_zero_.assign(static_cast<std::size_t>(k), tier_control{});
      problems_.assign(tiers.begin(), tiers.end());
      tier_chain c;
      node_records in;
      std::byte* d_back = nullptr;
      std::byte* h_back = nullptr;
      tier_control* h_ctl = nullptr;
      tier_placement* h_out = nullptr;
      std::int32_t* h_fresh = nullptr;
      std::int32_t* h_gpu = nullptr;
      std::int64_t* h_cpu = nullptr;
      std::int64_t* h_mem = nullptr;
      std::int32_t* h_scores = nullptr;
      std::int32_t* h_stamp = nullptr;
      std::int32_t* h_state = nullptr;
      tier_problem shared;  // the arrays every tier of the chain shares, on the device
      tier_topology topo;   // the locality jobs' (tier_locality), on the device
      std::int32_t most_domains = 0;
      bool const local = tier_chain_locality(tiers.data(), k, most_domains);
      // What follows the chain: the statistics' sums.
      cluster_stats* d_stats = nullptr;
      cluster_stats* h_stats = nullptr;
      bool const with_stats = then.stats && kept && n > 0;
      plan_work([&](device_arena<Device>& a) {
        shared = first;
        topo = tier_topology{};
        if (kept) {
          in = records_in(a);
          shared.nodes = d_nodes_;
          shared.classes = d_classes_;
          shared.tasks = d_tasks_;
          shared.scores = d_scores_;
          shared.stamp = d_stamp_;
          shared.state = first.state != nullptr ? d_state_ : nullptr;
        } else {
          shared.nodes = stage_view(a, nv);
          shared.classes = stage_view(a, first.classes);
          shared.tasks = stage_view(a, first.tasks);
          shared.scores = a.stage(static_cast<std::int32_t const*>(first.scores), cells);
          shared.stamp = a.stage(static_cast<std::int32_t const*>(first.stamp), n);
          shared.state = a.stage(static_cast<std::int32_t const*>(first.state), n);
        }
        shared.fresh = a.stage(static_cast<std::int32_t const*>(first.fresh), n_classes);
        shared.gpu_free = const_cast<std::int32_t*>(shared.nodes.gpu_free);
        shared.cpu_free = const_cast<std::int64_t*>(shared.nodes.cpu_free);
        shared.mem_free = const_cast<std::int64_t*>(shared.nodes.mem_free);
        // Each tier's own arrays; its problem points to their device copies.
        codes_.clear();
        std::int32_t* draw_code = nullptr;  // the last draw's codes, its slots' too
        for (std::size_t t = 0; t < tiers.size(); ++t) {
          tier_problem const& h = tiers[t];
          tier_problem& d = problems_[t];
          auto const rows = static_cast<std::size_t>(h.n_rows);
          d = h;
          d.nodes = shared.nodes;
          d.classes = shared.classes;
          d.tasks = shared.tasks;
          d.gpu_free = shared.gpu_free;
          d.cpu_free = shared.cpu_free;
          d.mem_free = shared.mem_free;
          d.scores = shared.scores;
          d.stamp = shared.stamp;
          d.state = shared.state;
          d.fresh = shared.fresh;
          d.row_class = a.stage(h.row_class, rows);
          d.demand = a.stage(h.demand, rows);
          d.row_cap = a.stage(h.row_cap, rows);
          d.live_class = a.stage(h.live_class, n_classes);
          d.changed = t == 0 ? a.stage(h.changed, static_cast<std::size_t>(h.n_changed)) : nullptr;
          if (h.window.draw) {
            // A queue window's draw: its codes come down after the chain.
            auto const jobs = static_cast<std::size_t>(h.window.n_jobs);
            auto const n_codes = jobs + static_cast<std::size_t>(h.window.n_slots) + 1;
            d.window.job_demand = a.stage(h.window.job_demand, 2 * jobs);
            d.window.job_slot = a.stage(h.window.job_slot, 2 * jobs);
            d.window.free = a.template take<std::int64_t>(2);
            d.window.code = draw_code = a.template take<std::int32_t>(n_codes);
            codes_.push_back({h.window.code, a.template landing<std::int32_t>(n_codes), draw_code, n_codes});
          } else if (h.window.live >= 0) {
            d.window.code = draw_code;
            if (h.window.row_jobs != nullptr) {
              d.window.row_jobs =
                  a.stage(h.window.row_jobs, rows + 1 + 2 * static_cast<std::size_t>(h.window.row_jobs[h.n_rows]));
              d.window.per_node = a.stage(h.window.per_node, rows);
              d.window.masked = a.template take<std::int32_t>(2 * rows);
            }
          }
          if (h.local.want > 0 && h.topo.n_domains > 0) {
            // A locality job's topology, staged once for the chain.
            if (topo.n_domains == 0) topo = stage_topology(a, h.topo, nv.n_nodes);
            d.topo = topo;
          }
        }
        c.n_tiers = k;
        c.tiers = a.stage(static_cast<tier_problem const*>(problems_.data()), problems_.size());
        c.heap_begin = a.stage(static_cast<std::int32_t const*>(heap_begin_.data()), heap_begin_.size());
        c.heap_at = a.stage(static_cast<std::int32_t const*>(heap_at_.data()), heap_at_.size());
        c.out_at = a.stage(static_cast<std::int32_t const*>(out_at_.data()), out_at_.size());
        c.ctl = a.stage(ctl_zero_.data(), ctl_zero_.size());
        tier_layout(c.work, nv.n_nodes, most_rows, most_copies, [&](auto* tag, std::size_t count) {
          return a.template take<std::remove_pointer_t<decltype(tag)>>(count);
        });
        c.work_nodes = nv.n_nodes;
        c.work_rows = most_rows;
        c.work_copies = most_copies;
        c.out = a.template take<tier_placement>(static_cast<std::size_t>(copies));
        c.listed = a.template take<std::int32_t>(k > 1 ? n : 0);
        c.candidates = a.template take<std::int32_t>(static_cast<std::size_t>(most_copies));
        c.n_candidates = a.template take<std::int32_t>(1);
        c.local_cap = a.template take<std::int64_t>(static_cast<std::size_t>(most_domains));
        c.local_held = local ? a.template take<std::int32_t>(n) : nullptr;
        d_back = a.template take<std::byte>(back_bytes);
        h_back = a.template landing<std::byte>(back_bytes);
        h_ctl = a.template landing<tier_control>(static_cast<std::size_t>(k));
        h_out = a.template landing<tier_placement>(static_cast<std::size_t>(copies));
        h_fresh = a.template landing<std::int32_t>(n_classes);
        if (with_stats) {
          d_stats = a.stage(&zero_stats, 1);  // the sums are added into it
          h_stats = a.template landing<cluster_stats>(1);
        }
        if (!kept) {
          h_gpu = a.template landing<std::int32_t>(static_cast<std::size_t>(nv.n_gpus));
          h_cpu = a.template landing<std::int64_t>(n);
          h_mem = a.template landing<std::int64_t>(n);
          h_scores = a.template landing<std::int32_t>(cells);
          h_stamp = a.template landing<std::int32_t>(n);
          if (first.state != nullptr) h_state = a.template landing<std::int32_t>(n);
        }
      });
      std::int32_t const n_in = send_host_writes();
      flush(work_);
      check(shared.nodes);
      check(shared.classes);
      check(shared.tasks);
      // What follows the chain on the state it leaves, in its launch.
      stage_call after;
      after.nv = shared.nodes;
      after.cv = shared.classes;
      after.tv = shared.tasks;
      if (with_stats) stats_into(after, d_stats);
      auto const t = begin_call();
      dev_.run_tiers(c, in, n_in, records_at(d_back, back, record_gpus_, width), after);
      dev_.check_launch();
      count_tier(steps_);
      steps_.grid_syncs += chain_after_grid_syncs(after);
      end_call(t, "tier_kernel");
      // One wait: controls, placements, freshness, and the nodes the chain
      // may have changed (kept) or the whole state (not kept).
      down(h_ctl, c.ctl, static_cast<std::size_t>(k));
      down(h_out, c.out, static_cast<std::size_t>(copies));
      down(h_fresh, shared.fresh, n_classes);
      down(h_back, d_back, back_bytes);
      down(h_gpu, shared.gpu_free, h_gpu != nullptr ? static_cast<std::size_t>(nv.n_gpus) : 0);
      down(h_cpu, shared.cpu_free, h_cpu != nullptr ? n : 0);
      down(h_mem, shared.mem_free, h_mem != nullptr ? n : 0);
      down(h_scores, shared.scores, h_scores != nullptr ? cells : 0);
      down(h_stamp, shared.stamp, h_stamp != nullptr ? n : 0);
      down(h_state, shared.state, h_state != nullptr ? n : 0);
      down(h_stats, d_stats, with_stats ? 1 : 0);
      for (auto const& w : codes_) down(w.landing, w.device, w.n);
      sync();
      std::memcpy(first.fresh, h_fresh, n_classes * sizeof(std::int32_t));
      for (auto const& w : codes_) std::memcpy(w.host, w.landing, w.n * sizeof(std::int32_t));
      if (with_stats) {
        chain_stats_ = true;
        chain_stats_value_ = *h_stats;
      }
      check_chain_placements(h_ctl, h_out, out_at_.data(), problems_.data(), k, nv.n_nodes);
      std::int32_t const placed = tier_chain_results(tiers.data(), h_ctl, h_out, out_at_.data(), k, out);
      if (t.on) {
        std::int64_t phases = 0;
        for (tier_stats const& st : out.stats) {
          for (std::int64_t ns : st.phase_ns) phases += ns;
        }
        timeline_phase_sum(this, phases);
      }
      if (kept && cells_away) {
        replay_commits(tiers, out);
        // The cells of every node the chain may have changed stay here.
        auto away = [&](std::int32_t node) { cells_away_[static_cast<std::size_t>(node)] = 1; };
        if (chain_sends_all(first, copies)) {
          std::fill(cells_away_.begin(), cells_away_.end(), std::uint8_t{1});
        } else {
          for (std::int32_t i = 0; i < first.n_changed; ++i) away(first.changed[i]);
          for (tier_placement const& tp : out.placed) away(tp.node);
        }
        out.cells_back = false;
        verify();
      } else if (kept) {
        node_records const got = records_at(h_back, back, record_gpus_, width);
        std::int32_t const count = chain_records_count(first, copies, placed);
        check_chain_records(got.node, count, nv.n_nodes);
        node_state_view const s = host_state();
        for (std::int32_t i = 0; i < count; ++i) unpack_record(s, got, i);
        verify();
      } else {
        copy_out(first.gpu_free, h_gpu, static_cast<std::size_t>(nv.n_gpus));
        copy_out(first.cpu_free, h_cpu, n);
        copy_out(first.mem_free, h_mem, n);
        copy_out(first.scores, h_scores, cells);
        copy_out(first.stamp, h_stamp, n);
        copy_out(first.state, h_state, n);
      }
    });
  }

 private:
  /// One array of the resident arena: its device and mirror parts, its
  /// bytes, whether the round changes it, and whether the mirror is an
  /// image of what the device holds.
  struct region {
    void* d = nullptr;
    void* h = nullptr;
    std::size_t bytes = 0;
    bool changes = false;
    bool image = false;
  };

  /// Whether the host declared no write since the device's state was last
  /// brought up to date (no record to send, no restored state).
  [[nodiscard]] bool nothing_written() const { return wrote_.nodes.empty() && !wrote_.all; }

  /// Whether these are the bound round's views.
  [[nodiscard]] bool bound(node_view const& n, class_view const& c, task_view const& t) const {
    return bound_ && same_arrays(n, host_.nodes) && same_arrays(c, host_.classes) && same_arrays(t, host_.tasks);
  }

  /// Waits for everything in flight: copies out of the resident mirror
  /// before it is written again, calls not waited for.
  void settle() {
    if (in_flight_ || clock_in_flight_ || work_.held()) sync();
  }
  /// The host's wait: what came down is the host's; the work arena is free
  /// again. Counted unless it is verify mode's (a check, not the round's).
  void sync(bool counted = true) {
    auto const t = begin_call(false);
    dev_.sync();
    if (counted) steps_.waits += 1;
    in_flight_ = clock_in_flight_ = false;
    if (begun_at_ != nullptr) {
      begun_ = *begun_at_;
      begun_at_ = nullptr;
    }
    work_.release();
    end_call(t, "wait");
    if (!pending_.empty()) {
      // Every mark is behind the wait: their times are known.
      for (std::size_t i = 0; i < pending_.size(); ++i) {
        pending_[i].gpu_begin_ns = slots_[i].first >= 0 ? dev_.mark_ns(slots_[i].first) : -1;
        pending_[i].gpu_end_ns = slots_[i].second >= 0 ? dev_.mark_ns(slots_[i].second) : -1;
      }
      dev_.marks_done();
      slots_.clear();
      timeline_add(pending_);
    }
  }
  /// The call timeline (timeline.hpp): a call's start (the host's clock, a
  /// GPU mark before it unless `gpu` is false, the steps so far) and its
  /// end, pending until the next wait gives its GPU times.
  struct call_start {
    bool on = false;
    bool gpu = false;
    std::int64_t host_ns = 0;
    int mark = -1;
    step_counts steps;
  };
  call_start begin_call(bool gpu = true) {
    if (!timeline_on()) return {};
    call_start t{true, gpu, 0, gpu ? dev_.mark() : -1, steps_};
    t.host_ns = timeline_now_ns();
    return t;
  }
  void end_call(call_start const& t, char const* what, std::int32_t copies = 0) {
    if (!t.on) return;
    timeline_call c;
    c.what = what;
    c.owner = this;
    c.host_begin_ns = t.host_ns;
    c.host_end_ns = timeline_now_ns();
    c.steps = steps_ - t.steps;
    c.copies = copies;
    pending_.push_back(c);
    slots_.emplace_back(t.mark, t.gpu ? dev_.mark() : -1);
  }
  /// The chain's commits replayed into the host's arrays from its
  /// placements, as the program made them (tier_commit_all): each
  /// iteration's replicas taken (take_replica gives the GPUs the program
  /// took, checked against the placement's), then each winner's state
  /// label (tier_group, tier_follow): its row's least winner of its label
  /// before the iteration, kept where their states are equal now, else its
  /// own.
  void replay_commits(std::span<tier_problem const> tiers, tier_results const& out) {
    node_view nv = host_.nodes;
    nv.gpu_free = host_.gpu_free;
    nv.cpu_free = host_.cpu_free;
    nv.mem_free = host_.mem_free;
    std::int32_t* const label = clock_state_;
    for (std::size_t k = 0; k < tiers.size(); ++k) {
      auto const from = static_cast<std::size_t>(out.begin[k]), to = static_cast<std::size_t>(out.begin[k + 1]);
      for (std::size_t i = from; i < to;) {
        std::size_t j = i;
        while (j < to && out.placed[j].iteration == out.placed[i].iteration) ++j;
        if (j < to && out.placed[j].iteration < out.placed[i].iteration) {
          throw logic_error(error_code::internal, "resident round: a chain's placements out of iteration order");
        }
        for (std::size_t q = i; q < j; ++q) {
          tier_placement const& tp = out.placed[q];
          std::uint64_t taken = 0;
          if (!take_replica(nv, host_.classes, tiers[k].row_class[tp.row], tp.node, host_.gpu_free, host_.cpu_free,
                            host_.mem_free, taken) ||
              taken != tp.gpus) {
            throw logic_error(error_code::internal, "resident round: a chain's commit on node " +
                                                        std::to_string(tp.node) + " replays otherwise on the host");
          }
        }
        // A locality job's commits leave the labels (tier_local).
        if (label != nullptr && tiers[k].local.want == 0) {
          // (row, label before, node), sorted: each (row, label) run's first node leads.
          group_.clear();
          for (std::size_t q = i; q < j; ++q) {
            tier_placement const& tp = out.placed[q];
            group_.push_back({tp.row, label[tp.node], tp.node});
          }
          std::sort(group_.begin(), group_.end());
          for (std::size_t q = 0; q < group_.size();) {
            std::size_t e = q;
            std::int32_t const leader = group_[q][2];
            while (e < group_.size() && group_[e][0] == group_[q][0] && group_[e][1] == group_[q][1]) {
              std::int32_t const n = group_[e][2];
              label[n] = n == leader || !node_state_equal(nv, n, leader) ? n : leader;
              ++e;
            }
            q = e;
          }
        }
        i = j;
      }
    }
  }

  /// The domain capacities domain_capacity asks of its call: their inputs
  /// and sums (staged zero: the stage program adds into them) in its layout
  /// of the work arena.
  struct caps_call {
    std::int32_t k = 0;
    std::size_t sums = 0;  ///< k x domains
    std::int32_t const* of = nullptr;
    domain_index_view idx;
    std::int64_t* cap = nullptr;
    std::int64_t* landing = nullptr;
  };
  caps_call caps_in(device_arena<Device>& a, std::span<std::int32_t const> of, domain_index_view const& idx) {
    caps_call c;
    auto const d = static_cast<std::size_t>(idx.n_domains);
    if (of.empty() || d == 0) return c;
    std::size_t const k = of.size();
    c.k = static_cast<std::int32_t>(k);
    c.sums = k * d;
    c.of = a.stage(of.data(), k);
    c.idx = stage_view(a, idx);
    if (zeros_.size() < c.sums) zeros_.assign(c.sums, 0);
    c.cap = a.stage(static_cast<std::int64_t const*>(zeros_.data()), c.sums);
    c.landing = a.template landing<std::int64_t>(c.sums);
    return c;
  }
  /// Its sums asked of a stage call, and their copy down after it.
  static void caps_into(stage_call& s, caps_call const& c) {
    if (c.sums == 0) return;
    s.of = c.of;
    s.k = c.k;
    s.idx = c.idx;
    s.parts = domain_sum_parts;
    s.cap = c.cap;
  }

  /// A call's layout of the work arena, after the calls still in flight
  /// (the host waits first where it would have to grow).
  template <class Layout>
  void plan_work(Layout&& layout) {
    std::size_t ahead = 0;
    if (work_.held() && !work_.fits(layout)) {
      ahead = work_.floor();  // grown by it, the next round's fits after them
      sync();
    }
    work_.plan(layout, ahead);
  }
  /// The statistics' reduction queued, its sums coming down into the
  /// landing returned (the host's after the next wait).
  /// `send`: a kept call sends the host's writes first (and any restored
  /// state); not for statistics that were due before them.
  cluster_stats* queue_stats(node_view const& nodes, task_view const& tasks, bool kept, bool send = true) {
    if (kept && send) {
      resend_all();
      verify(true);
    }
    stage_call s;
    s.nv = kept ? d_nodes_ : nodes;
    s.tv = kept ? d_tasks_ : tasks;
    cluster_stats* d_out = nullptr;
    cluster_stats* h_out = nullptr;
    plan_work([&](device_arena<Device>& a) {
      if (kept) {
        if (send) records_in(a);
      } else {
        s.nv = stage_view(a, nodes);
        s.tv = stage_view(a, tasks);
      }
      d_out = a.stage(&zero_stats, 1);  // the sums are added into it
      h_out = a.template landing<cluster_stats>(1);
    });
    stats_into(s, d_out);
    run_stages(s, kept && send, "stats");
    down(h_out, d_out, 1);
    return h_out;
  }
  /// The statistics stats_begin left due, queued alone on the device's
  /// state as it was then: no host write has been sent since (none is sent
  /// with them, and any resend_all comes after).
  void launch_due_stats() {
    if (!stats_due_) return;
    stats_due_ = false;
    begun_at_ = queue_stats(host_.nodes, host_.tasks, true, false);
    work_.hold();  // down at the round's next wait (sync)
  }
  /// The statistics asked of a stage call, into d_out (zero), each node's
  /// F on lanes (the device's width).
  static void stats_into(stage_call& s, cluster_stats* d_out) {
    if (s.nv.n_nodes == 0) return;
    s.stats = d_out;
    s.stats_lanes = frag_lanes(static_cast<std::size_t>(s.nv.n_nodes));
  }
  /// One call of the stage program (stage_program.hpp): the host's writes
  /// (kept) sent and unpacked on the device first, then the stages `s`
  /// asks for; nothing waits for it. None when it asks for nothing.
  void run_stages(stage_call s, bool kept, char const* what) {
    s.n_in = kept ? send_host_writes() : 0;
    if (s.n_in > 0) {
      s.state = device_state();
      s.in = in_dev_;
    }
    flush(work_);
    if (!stage_asks(s)) return;
    check(s.nv);
    check(s.cv);
    check(s.tv);
    if (stage_caps(s)) check(s.idx);
    auto const t = begin_call();
    dev_.run_stages(s);
    dev_.check_launch();
    steps_.calls += 1;
    steps_.grid_syncs += stage_grid_syncs(s);
    end_call(t, what);
  }

  /// Sends what arena a queued (its bytes counted up).
  void flush(device_arena<Device>& a) {
    std::int32_t const copies = a.copies_queued();
    if (copies == 0) return;
    auto const t = begin_call();
    steps_.bytes_up += a.flush();
    end_call(t, "up", copies);
  }
  template <class T>
  void down(T* h, T const* d, std::size_t n) {
    if (n == 0) return;
    auto const t = begin_call();
    dev_.down(h, d, n * sizeof(T));
    steps_.bytes_down += static_cast<std::int64_t>(n * sizeof(T));
    end_call(t, "down", 1);
  }
  template <class T>
  static void copy_out(T* to, T const* from, std::size_t n) {
    if (to != nullptr && n > 0) std::memcpy(to, from, n * sizeof(T));
  }
  /// Sends host array h into the resident device array d whole.
  template <class T>
  void resend(T const* d, T const* h, std::size_t n) {
    if (d == nullptr || n == 0) return;
    T* m = resident_.mirror(d);
    std::memcpy(m, h, n * sizeof(T));
    resident_.send(d, m, n * sizeof(T));
  }

  /// A locality job's topology (tier_topology) on the device.
  static tier_topology stage_topology(device_arena<Device>& a, tier_topology t, std::int32_t n_nodes) {
    auto const d = static_cast<std::size_t>(t.n_domains);
    t.node = a.stage(t.node, static_cast<std::size_t>(t.begin[d]));
    t.begin = a.stage(t.begin, d + 1);
    t.level = a.stage(t.level, d);
    t.node_domain = a.stage(t.node_domain, static_cast<std::size_t>(n_nodes) * static_cast<std::size_t>(t.levels));
    return t;
  }
  template <class View>
  View stage_view(device_arena<Device>& a, View v) {
    each_array(v, [&](auto& field, std::size_t count, bool) { field = a.stage(field, count); });
    return v;
  }
  /// The twin: every array of a view the device reads lies in device memory.
  template <class View>
  void check(View v) const {
    if constexpr (Device::checks_pointers) {
      each_array(v, [&](auto const* p, std::size_t count, bool) {
        if (p != nullptr && count > 0) dev_.expect_device(p, count * sizeof(*p));
      });
    }
  }

  /// The bound round's changing arrays on the host and on the device.
  [[nodiscard]] node_state_view host_state() const {
    node_state_view s;
    s.n_nodes = host_.nodes.n_nodes;
    s.n_classes = host_.classes.n_classes;
    s.gpu_begin = host_.nodes.gpu_begin;
    s.gpu_free = host_.gpu_free;
    s.cpu_free = host_.cpu_free;
    s.mem_free = host_.mem_free;
    s.scores = scores_kept_ ? host_.scores : nullptr;
    s.stamp = clock_stamp_;
    s.state = clock_state_;
    return s;
  }
  [[nodiscard]] node_state_view device_state() const {
    node_state_view s = host_state();
    s.gpu_begin = d_nodes_.gpu_begin;
    s.gpu_free = const_cast<std::int32_t*>(d_nodes_.gpu_free);
    s.cpu_free = const_cast<std::int64_t*>(d_nodes_.cpu_free);
    s.mem_free = const_cast<std::int64_t*>(d_nodes_.mem_free);
    s.scores = scores_kept_ ? d_scores_ : nullptr;
    s.stamp = clock_stamp_ != nullptr ? d_stamp_ : nullptr;
    s.state = clock_state_ != nullptr ? d_state_ : nullptr;
    return s;
  }
  /// Score cells a record carries: the matrix's column once the device keeps it.
  [[nodiscard]] std::int32_t record_width() const { return scores_kept_ ? host_.classes.n_classes : 0; }

  /// After host_wrote_all (a saved state restored): every changing array
  /// whole, and the clock unbound (a new assignment binds its own).
  void resend_all() {
    if (!wrote_.all) return;
    settle();
    auto const n = static_cast<std::size_t>(host_.nodes.n_nodes);
    resend(d_nodes_.gpu_free, static_cast<std::int32_t const*>(host_.gpu_free), static_cast<std::size_t>(host_.nodes.n_gpus));
    resend(d_nodes_.cpu_free, static_cast<std::int64_t const*>(host_.cpu_free), n);
    resend(d_nodes_.mem_free, static_cast<std::int64_t const*>(host_.mem_free), n);
    if (scores_kept_) {
      resend(static_cast<std::int32_t const*>(d_scores_), static_cast<std::int32_t const*>(host_.scores),
             n * static_cast<std::size_t>(host_.classes.n_classes));
    }
    clock_stamp_ = clock_state_ = nullptr;
    flush(resident_);
    in_flight_ = true;
    chain_stats_ = false;
    wrote_.clear();
    std::fill(cells_away_.begin(), cells_away_.end(), std::uint8_t{0});
  }
  /// The assigner's clock (stamp, state labels) kept from its first tier.
  void bind_clock(tier_problem const& p) {
    if (clock_stamp_ == p.stamp && clock_state_ == p.state) return;
    // Its mirror is the clock's alone: only an earlier clock's copy could
    // still read it.
    if (clock_in_flight_) sync();
    auto const n = static_cast<std::size_t>(p.nodes.n_nodes);
    resend(static_cast<std::int32_t const*>(d_stamp_), static_cast<std::int32_t const*>(p.stamp), n);
    if (p.state != nullptr) resend(static_cast<std::int32_t const*>(d_state_), static_cast<std::int32_t const*>(p.state), n);
    flush(resident_);
    clock_in_flight_ = true;
    clock_stamp_ = p.stamp;
    clock_state_ = p.state;
  }

  /// Space for the records of the host's declared writes, in a call's
  /// layout; returns the device block.
  node_records records_in(device_arena<Device>& a) {
    auto const k = static_cast<std::int32_t>(wrote_.nodes.size());
    auto const [d, h] = a.template space<std::byte>(records_bytes(k, record_gpus_, record_width()));
    in_host_ = records_at(h, k, record_gpus_, record_width());
    in_dev_ = records_at(d, k, record_gpus_, record_width());
    return in_dev_;
  }
  /// Packs the host's declared writes into the records records_in laid
  /// out, queued with the call's inputs; returns how many.
  std::int32_t send_host_writes() {
    auto const k = static_cast<std::int32_t>(wrote_.nodes.size());
    if (!bound_ || k == 0) return 0;
    chain_stats_ = false;  // the state the statistics were of is gone
    node_state_view const s = host_state();
    for (std::int32_t i = 0; i < k; ++i) {
      std::int32_t const n = wrote_.nodes[static_cast<std::size_t>(i)];
      pack_record(s, in_host_, i, n);
      cells_away_[static_cast<std::size_t>(n)] = 0;  // the host's record, the device's again
    }
    work_.send(in_dev_.cpu, in_host_.cpu, records_bytes(k, record_gpus_, record_width()));
    wrote_.clear();
    return k;
  }
  /// Verify mode: every array of the bound round on the device equals the
  /// host's (a full read-back); with `pending`, the nodes whose records
  /// are still to land are left out of the changing arrays.
  void verify(bool pending = false) {
    if (!verify_ || !bound_) return;
    sync(false);
    auto const* skip = pending ? &wrote_.mark : nullptr;
    auto skipped = [&](std::size_t node) { return skip != nullptr && (*skip)[node] != 0; };
    // Nodes whose cells stayed on the device (a chain's, or every node's
    // after an unread score): the host's cells and stamps are its own until
    // its record of the node lands.
    auto away = [&](std::size_t node) { return skipped(node) || cells_away_[node] != 0; };
    auto fail = [&](std::string const& what) {
      throw logic_error(error_code::internal, "resident round: the device's " + what + " differs from the host's");
    };
    // The fixed arrays, byte for byte.
    std::array<std::pair<void const*, std::size_t>, 48> dv{}, hv{};
    std::size_t kd = 0, kh = 0;
    auto into = [](auto& v, std::size_t& k) {
      return [&v, &k](auto const* p, std::size_t count, bool changes) {
        v[k++] = {changes ? nullptr : p, p != nullptr && !changes ? count * sizeof(*p) : 0};
      };
    };
    node_view a = d_nodes_, b = host_.nodes;
    class_view c = d_classes_, e = host_.classes;
    task_view t = d_tasks_, u = host_.tasks;
    each_array(a, into(dv, kd));
    each_array(c, into(dv, kd));
    each_array(t, into(dv, kd));
    each_array(b, into(hv, kh));
    each_array(e, into(hv, kh));
    each_array(u, into(hv, kh));
    for (std::size_t i = 0; i < kd; ++i) {
      if (dv[i].second == 0) continue;
      read_back(dv[i].first, dv[i].second);
      if (std::memcmp(verify_buf_.data(), hv[i].first, dv[i].second) != 0) fail("fixed array #" + std::to_string(i));
    }
    // The changing arrays, node by node.
    auto const n = static_cast<std::size_t>(host_.nodes.n_nodes);
    auto same_per_node = [&](auto const* d, auto const* h, char const* what, auto const& left_out) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(h)>>;
      if (d == nullptr || h == nullptr || n == 0) return;
      read_back(d, n * sizeof(T));
      auto const* got = reinterpret_cast<T const*>(verify_buf_.data());
      for (std::size_t i = 0; i < n; ++i) {
        if (!left_out(i) && got[i] != h[i]) fail(std::string(what) + " of node " + std::to_string(i));
      }
    };
    same_per_node(d_nodes_.cpu_free, host_.cpu_free, "free CPU", skipped);
    same_per_node(d_nodes_.mem_free, host_.mem_free, "free memory", skipped);
    same_per_node(clock_stamp_ != nullptr ? d_stamp_ : nullptr, clock_stamp_, "stamp", away);
    same_per_node(clock_state_ != nullptr ? d_state_ : nullptr, clock_state_, "state label", skipped);
    if (host_.nodes.n_gpus > 0) {
      read_back(d_nodes_.gpu_free, static_cast<std::size_t>(host_.nodes.n_gpus) * sizeof(std::int32_t));
      auto const* got = reinterpret_cast<std::int32_t const*>(verify_buf_.data());
      for (std::size_t i = 0; i < n; ++i) {
        for (auto g = host_.nodes.gpu_begin[i]; g < host_.nodes.gpu_begin[i + 1]; ++g) {
          if (!skipped(i) && got[g] != host_.gpu_free[g]) fail("free GPU of node " + std::to_string(i));
        }
      }
    }
    if (scores_kept_) {
      std::size_t const cells = n * static_cast<std::size_t>(host_.classes.n_classes);
      read_back(d_scores_, cells * sizeof(std::int32_t));
      auto const* got = reinterpret_cast<std::int32_t const*>(verify_buf_.data());
      for (std::size_t i = 0; i < cells; ++i) {
        if (!away(i % n) && got[i] != host_.scores[i]) {
          fail("score of class " + std::to_string(i / n) + " on node " + std::to_string(i % n));
        }
      }
    }
  }
  /// Device bytes into verify_buf_, synchronously.
  void read_back(void const* d, std::size_t bytes) {
    verify_buf_.resize(bytes);
    if (bytes == 0) return;
    dev_.down(verify_buf_.data(), d, bytes);
    dev_.sync();
  }

  Device dev_;
  device_arena<Device> work_{dev_};
  device_arena<Device> resident_{dev_};
  bool keep_ = true;
  bool verify_ = false;
  bool in_flight_ = false;  ///< copies out of the resident mirror may still run
  bool clock_in_flight_ = false;  ///< the clock's copies (bind_clock) may still run
  // stats_begin's sums: their landing until the next wait (then null, the
  // sums in begun_).
  cluster_stats* begun_at_ = nullptr;
  // stats_begin's statistics, not launched yet (launch_due_stats).
  bool stats_due_ = false;
  // The statistics after the bound round's last chain (follow_up::stats),
  // while nothing has been written since.
  bool chain_stats_ = false;
  cluster_stats chain_stats_value_;
  // The bound round: the host's arrays and the device's copies.
  bool bound_ = false;
  round_binding host_;
  node_view d_nodes_;
  class_view d_classes_;
  task_view d_tasks_;
  std::int32_t* d_scores_ = nullptr;
  std::int32_t* d_stamp_ = nullptr;
  std::int32_t* d_state_ = nullptr;
  bool scores_kept_ = false;             ///< the device's matrix is the host's (score() ran)
  std::int32_t* clock_stamp_ = nullptr;  ///< the host clock the device keeps, or null
  std::int32_t* clock_state_ = nullptr;
  std::int32_t record_gpus_ = 0;         ///< GPU slots of a record: the largest node's GPUs
  std::vector<region> regions_, next_;   ///< the resident arrays, as bound and being bound
  node_records in_host_, in_dev_;        ///< this call's records of host writes
  /// Per node of the bound round: 1 = its score cells stayed on the device
  /// (a chain's node, or the whole matrix after an unread score); the host's
  /// cells and stamp are its own until its record of the node goes up
  /// (send_host_writes).
  std::vector<std::uint8_t> cells_away_;
  // A chain's host-side staging: its problems with device pointers, heap
  // offsets, placements' offsets, zeroed controls.
  std::vector<tier_problem> problems_;
  std::vector<std::int32_t> heap_begin_, heap_at_, out_at_;
  /// A chain's queue window draws (tier_window): where their codes land
  /// and go, on the host, and come from, on the device.
  struct window_codes {
    std::int32_t* host;
    std::int32_t* landing;
    std::int32_t const* device;
    std::size_t n;
  };
  std::vector<window_codes> codes_;
  std::vector<std::array<std::int32_t, 3>> group_;  ///< replay_commits' (row, label, node)
  std::vector<tier_control> ctl_zero_;
  std::vector<char> verify_buf_;
  std::vector<std::int64_t> zeros_;  ///< what the capacities' sums start from
  // The call timeline: calls since the last wait, and their GPU marks (before, after).
  std::vector<timeline_call> pending_;
  std::vector<std::pair<int, int>> slots_;
};

}  // inline namespace PLACER_BACKEND_NS
}  // namespace placer::kernels
