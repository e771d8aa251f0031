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

class backend {
 public:
  virtual ~backend() = default;
  [[nodiscard]] virtual backend_kind kind() const = 0;
  /// e.g. "cpu (OpenMP, 2 threads)" or "cuda (NVIDIA H100 80GB HBM3, sm_90)".
  [[nodiscard]] virtual std::string const& description() const = 0;

  /// @brief Feasibility and score matrix over classes x nodes (row-major).
  /// @param[in] nodes, classes, tasks  host views (the CUDA backend copies them)
  /// @param[out] out  n_classes * n_nodes cells; -1 = infeasible
  virtual void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
                     score_params const& params, std::span<std::int32_t> out) = 0;

  /// @brief GAR / GFR / FGD fragmentation sums over the nodes.
  virtual cluster_stats stats(node_view const& nodes, task_view const& tasks) = 0;

  /// @brief Per-domain capacity for a set of classes, in one call:
  /// cap[s * n_domains + d] = replicas of class `of[s]` that fit under
  /// domain d (the sum of its nodes' fit counts), for every domain.
  /// @param[out] cap  of.size() * idx.n_domains entries
  virtual void domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                               domain_index_view const& idx, std::span<std::int64_t> cap) = 0;

  /// @brief Places one tier (tier.hpp): one launch of the tier program.
  /// Commits into the problem's node arrays and score matrix (host memory;
  /// the CUDA backend copies them there and back).
  /// @param[out] out  the placements, in the program's order (the caller sorts)
  virtual tier_stats place_tier(tier_problem const& problem, std::vector<tier_placement>& out) = 0;

  /// Stage calls and device-to-host waits since the backend was made
  /// (steps.hpp); a caller takes differences around a stage.
  [[nodiscard]] step_counts const& steps() const { return steps_; }

 protected:
  step_counts steps_;
};

/// Makes the backend of `kind` (CUDA: on GPU `device`, which every stage
/// call sets); throws placer::logic_error(unavailable) if the CUDA backend
/// was not built, no usable GPU is present or `device` is not one.
std::unique_ptr<backend> make_backend(backend_kind kind, int device = 0);

/// The CPU backend with every stage on its OpenMP team whatever the size
/// (the sequential path is taken below thresholds otherwise) and the tier
/// program on at least two workers: for tests that check the parallel
/// paths give the sequential results, under ThreadSanitizer too.
std::unique_ptr<backend> make_parallel_cpu_backend();

/// Parses "auto" | "cpu" | "cuda" and makes the backend. "auto" takes CUDA
/// when a GPU answers and falls back to the CPU otherwise, reporting why
/// through `log`.
std::unique_ptr<backend> select_backend(std::string_view choice,
                                        std::function<void(std::string const&)> const& log = {}, int device = 0);

/// Why the CUDA backend cannot be used, or "" when it can. The probe checks
/// that a driver is present and not older than the CUDA runtime linked in,
/// that a GPU is present, that its compute capability can run what was
/// built (PLACER_CUDA_ARCHITECTURES), and launches one tiny kernel and
/// reads its result back.
std::string cuda_unavailable_reason();

/// The GPU the CUDA backend would use, as "NVIDIA H100 80GB HBM3, sm_90,
/// driver 13.0, runtime 13.0", or why there is none.
std::string cuda_device_summary();

}  // namespace placer::kernels
