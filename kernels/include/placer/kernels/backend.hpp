#pragma once
// The backend interface: what a round asks of the CPU (OpenMP) or CUDA
// backend. The solver builds host views, calls these, and never sees
// Thrust, CUDA types or device pointers.
//
//   auto b = placer::kernels::select_backend("auto", log);  // GPU if usable, else CPU
//   b->score(nodes, classes, tasks, params, scores);        // classes x nodes
//
// Public header: compiles with a host compiler, never includes CUDA headers.

#include <placer/kernels/steps.hpp>
#include <placer/kernels/tier.hpp>
#include <placer/kernels/views.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace placer::kernels {

/// True when this binary contains the CUDA backend.
#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
inline constexpr bool cuda_enabled = true;
#else
inline constexpr bool cuda_enabled = false;
#endif

enum class backend_kind { cpu, cuda };

/// A backend's device failed (a CUDA error, a device allocation that could
/// not be made): the backend must not be used again, since an error such
/// as an illegal address poisons its CUDA context. The service answers
/// the round on a CPU backend instead (service/src/server.cpp).
struct device_fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A round's arrays that a backend with memory of its own (the CUDA
/// backend) may keep there between its calls: the views, and the host's
/// writable arrays of what the round changes (the nodes' free GPUs, CPU
/// and memory, which are the views' own, and the score matrix).
struct round_binding {
  node_view nodes;
  class_view classes;
  task_view tasks;
  std::int32_t* scores = nullptr;    ///< n_classes x n_nodes
  std::int32_t* gpu_free = nullptr;  ///< nodes.gpu_free
  std::int64_t* cpu_free = nullptr;  ///< nodes.cpu_free
  std::int64_t* mem_free = nullptr;  ///< nodes.mem_free
};

class backend {
 public:
  virtual ~backend() = default;
  [[nodiscard]] virtual backend_kind kind() const = 0;
  /// e.g. "cpu (OpenMP, 2 threads)" or "cuda (NVIDIA H100 80GB HBM3, sm_90)".
  [[nodiscard]] virtual std::string const& description() const = 0;

  /// What a call also answers about the node state it leaves, within its
  /// one wait (score_then, place_tiers_then).
  struct follow_up {
    /// The statistics too (place_tiers_then): a backend with memory of its
    /// own keeps them, and the bound round's next stats() takes them
    /// without a call if nothing was written since (a round's last chain:
    /// its statistics after).
    bool stats = false;
  };

  /// @brief Feasibility and score matrix over classes x nodes (row-major).
  /// @param[in] nodes, classes, tasks  host views (the CUDA backend copies them)
  /// @param[out] out  n_classes * n_nodes cells; -1 = infeasible
  virtual void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
                     score_params const& params, std::span<std::int32_t> out) = 0;
  /// @brief score, where the caller may read none of the cells: without
  /// `read` a backend with memory of its own keeps the matrix of its bound
  /// round there, for the tier programs, leaves `out` as it was, and waits
  /// for nothing. Default: score.
  /// @return whether `out` holds every cell
  virtual bool score_then(node_view const& nodes, class_view const& classes, task_view const& tasks,
                          score_params const& params, std::span<std::int32_t> out, bool read) {
    (void)read;
    score(nodes, classes, tasks, params, out);
    return true;
  }

  /// @brief GAR / GFR / FGD fragmentation sums over the nodes.
  virtual cluster_stats stats(node_view const& nodes, task_view const& tasks) = 0;
  /// @brief stats of the nodes as they are now, taken later by stats_end
  /// (one at a time): the round's nodes as build_matrices left them, their
  /// fragmentation states (node_view::frag_slot, where set) current, which
  /// the CPU backend reads to compute F a state, not a node. A backend with
  /// memory of its own queues the reduction
  /// in stream order, and no wait: the next wait of the round brings the
  /// sums down (stats_end waits only if none came). Default: stats, now.
  virtual void stats_begin(node_view const& nodes, task_view const& tasks) { begun_ = stats(nodes, tasks); }
  [[nodiscard]] virtual cluster_stats stats_end() { return begun_; }
  /// @brief stats of the nodes stats_begin took, now: the same nodes, moved
  /// since only in their free GPU milli, CPU and memory (the round's
  /// assignment). The CPU backend computes F again only for the nodes whose
  /// free values moved; the same sums as stats. Default: stats.
  [[nodiscard]] virtual cluster_stats stats_after(node_view const& nodes, task_view const& tasks) {
    return stats(nodes, tasks);
  }

  /// @brief Per-domain capacity for a set of classes, in one call:
  /// cap[s * n_domains + d] = replicas of class `of[s]` that fit under
  /// domain d (the sum of its nodes' fit counts), for every domain.
  /// @param[out] cap  of.size() * idx.n_domains entries
  virtual void domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                               domain_index_view const& idx, std::span<std::int64_t> cap) = 0;

  /// @brief Places a chain of tiers (tier.hpp), one after another in one
  /// launch of the tier program and one wait: tier k + 1 starts from the
  /// node state, matrix and clock tier k left (all tiers share those
  /// arrays), and its refresh candidates are the nodes tier k committed
  /// (the `changed` of tiers after the first is not read). Commits into the
  /// problems' node arrays and score matrix (host memory; a device backend
  /// keeps its copies, residency below).
  /// @param[out] out  each tier's placements, in the program's order (the caller sorts)
  virtual void place_tiers(std::span<tier_problem const> tiers, tier_results& out) = 0;

  /// @brief place_tiers, then what `then` asks of the state it leaves: on
  /// a device in the chain's one wait. Default: place_tiers.
  virtual void place_tiers_then(std::span<tier_problem const> tiers, tier_results& out, follow_up const& then) {
    (void)then;
    place_tiers(tiers, out);
  }

  /// One tier: a chain of one.
  tier_stats place_tier(tier_problem const& problem, std::vector<tier_placement>& out) {
    tier_results r;
    place_tiers({&problem, 1}, r);
    out = std::move(r.placed);
    return r.stats.at(0);
  }

  /// Stage calls and device-to-host waits since the backend was made
  /// (steps.hpp); a caller takes differences around a stage. A device
  /// backend counts a wait where its host waits for the device; the CPU
  /// backend counts the waits a device backend makes for the same calls.
  [[nodiscard]] step_counts const& steps() const { return steps_; }

  // --- Residency (docs/architecture.md): one round's arrays kept on the
  // backend between calls. Until unbind_round, a call given the bound
  // views (and matrix) reads the backend's copies, and the host declares
  // every node whose free resources, clock (a tier problem's stamp and
  // state) or score cells it writes between calls; each call then moves
  // only the nodes either side changed. Calls given other views send them
  // whole. The CPU backend works in the host's arrays and ignores all of it.

  /// Binds a round (the solver, once its matrices are built).
  virtual void bind_round(round_binding const& b) { (void)b; }
  virtual void unbind_round() {}
  /// The host wrote node n's free GPUs, CPU, memory, stamp or score cells.
  void host_wrote(std::int32_t n) {
    if (!wrote_.on || wrote_.all) return;
    auto& m = wrote_.mark[static_cast<std::size_t>(n)];
    if (m == 0) {
      m = 1;
      wrote_.nodes.push_back(n);
    }
  }
  /// The host rewrote the changing arrays wholesale (a saved state restored
  /// into them) and starts a new clock.
  void host_wrote_all() {
    if (!wrote_.on) return;
    wrote_.clear();
    wrote_.all = true;
  }

 protected:
  step_counts steps_;
  cluster_stats begun_;  ///< the default stats_begin's
  /// The host's declared writes since the backend's last call.
  struct host_writes {
    bool on = false;   ///< a round is bound and its writes are kept
    bool all = false;  ///< host_wrote_all
    std::vector<std::int32_t> nodes;  ///< each once
    std::vector<std::uint8_t> mark;   ///< per node: 1 = in `nodes`
    void start(std::int32_t n_nodes) {
      clear();
      mark.assign(static_cast<std::size_t>(n_nodes), 0);
      on = true;
    }
    void stop() {
      clear();
      on = false;
    }
    void clear() {
      for (auto n : nodes) mark[static_cast<std::size_t>(n)] = 0;
      nodes.clear();
      all = false;
    }
  } wrote_;
};

/// Makes the backend of `kind` (CUDA: on GPU `device`, which every stage
/// call sets); throws placer::logic_error(unavailable) if the CUDA backend
/// was not built, no usable GPU is present or `device` is not one.
/// `sharing`: how many backends solve on that GPU at once (the server's
/// workers on it); the CUDA tier kernel's grid takes its share of the
/// multiprocessors (tier_grid_blocks), so concurrent rounds each stay on
/// their own.
std::unique_ptr<backend> make_backend(backend_kind kind, int device = 0, int sharing = 1);

/// The CUDA tier kernel's grid: a CTA per `sms_per_block` of the `sms`
/// multiprocessors a backend's share of the GPU has (`sms` / `sharing`),
/// at least one, at most `most` (the CTAs the device holds at once).
constexpr int tier_grid_blocks(int sms, int sharing, int sms_per_block, int most) {
  int const share = sms / (sharing < 1 ? 1 : sharing);
  int const blocks = share / sms_per_block;
  return blocks < 1 ? 1 : blocks > most ? (most < 1 ? 1 : most) : blocks;
}

/// The CPU backend with every stage on its OpenMP team whatever the size
/// (the sequential path is taken below thresholds otherwise) and the tier
/// program on at least two workers: for tests that check the parallel
/// paths give the sequential results, under ThreadSanitizer too.
std::unique_ptr<backend> make_parallel_cpu_backend();

/// The CUDA backend's code (kernels/portable/device_backend.hpp) over host
/// memory: its own "device" allocations, copies, residency and node
/// records, with every stage on the calling thread. For tests (its results
/// must be the CPU backend's; `verify` compares its copies of a bound round
/// with the host's at every call, and every view a stage reads must lie in
/// its device memory) and for counting what the GPU round moves
/// (round_bench). `resident` false: every call sends its views whole.
std::unique_ptr<backend> make_device_twin(bool resident = true, bool verify = false);
/// The twin with its tier launches on a grid of `blocks` CTAs of `threads`
/// workers (1 or even), a thread each, as the CUDA backend's cooperative
/// grid runs them: block() its CTA's index, its barriers its CTA's, the
/// grid's every thread's (kernels/portable/tier_grid_twin.hpp), every CTA
/// checked to meet the grid at the same barriers. PLACER_TWIN_BLOCKS and
/// PLACER_TWIN_THREADS set it for make_device_twin.
std::unique_ptr<backend> make_device_twin_grid(std::int32_t blocks, std::int32_t threads);

/// Parses "auto" | "cpu" | "cuda" | "twin" and makes the backend. "auto" takes CUDA
/// when a GPU answers and falls back to the CPU otherwise, reporting why
/// through `log`.
std::unique_ptr<backend> select_backend(std::string_view choice,
                                        std::function<void(std::string const&)> const& log = {}, int device = 0,
                                        int sharing = 1);

/// Why the CUDA backend cannot be used, or "" when it can. The probe checks
/// that a driver is present and not older than the CUDA runtime linked in,
/// that a GPU is present, that its compute capability can run what was
/// built (PLACER_CUDA_ARCHITECTURES), and launches one tiny kernel and
/// reads its result back.
std::string cuda_unavailable_reason();

/// The GPU the CUDA backend would use, as "NVIDIA H100 80GB HBM3, sm_90,
/// driver 13.0, runtime 13.0", or why there is none.
std::string cuda_device_summary();

/// What the CUDA backend was built for: CMake's CUDA architectures as
/// "90" (sm_90 code and its PTX) or "90-virtual" (PTX alone, compiled by
/// the driver when first loaded); "" without the backend.
std::string cuda_architectures();

}  // namespace placer::kernels
