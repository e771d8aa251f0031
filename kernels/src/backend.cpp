// Backend factory and run-time selection ("auto" | "cpu" | "cuda").
#include <placer/kernels/backend.hpp>
#include <placer/kernels/probe.hpp>
#include <placer/kernels/team.hpp>
#include <placer/topology/error.hpp>

#include "omp_backend.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <omp.h>

namespace placer::kernels {

#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
// Defined in kernels/cuda/cuda_backend.cu.
std::unique_ptr<backend> make_cuda_backend(int device, int sharing);
std::string cuda_probe();
std::string cuda_probe_summary();
std::string cuda_built_for();
#endif

bool openmp_team_sleeps() {
  static bool const sleeps = [] {
    char const* v = std::getenv("OMP_WAIT_POLICY");
    if (v == nullptr) return false;
    std::string s(v);
    for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s == "PASSIVE";
  }();
  return sleeps;
}

std::int64_t team_from(std::int64_t spinning, std::int64_t sleeping_pair) {
  if (!openmp_team_sleeps()) return spinning;
  return std::max(spinning, sleeping_pair / std::max(1, omp_get_max_threads() - 1));
}

std::string cuda_unavailable_reason() {
#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
  return cuda_probe();
#else
  return "this binary was built without the CUDA backend (no nvcc at build time)";
#endif
}

std::string cuda_device_summary() {
#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
  auto const why = cuda_probe();
  return why.empty() ? cuda_probe_summary() : "none usable: " + why;
#else
  return "none: " + cuda_unavailable_reason();
#endif
}

std::string cuda_architectures() {
#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
  return cuda_built_for();
#else
  return {};
#endif
}

std::unique_ptr<backend> make_parallel_cpu_backend() { return std::make_unique<omp_backend>(true); }

std::unique_ptr<backend> make_backend(backend_kind kind, int device, int sharing) {
  if (kind == backend_kind::cpu) return std::make_unique<omp_backend>();
  auto const why = cuda_unavailable_reason();
  if (!why.empty()) throw logic_error(error_code::unavailable, "CUDA backend unavailable: " + why);
#if defined(PLACER_HAS_CUDA) && PLACER_HAS_CUDA
  return make_cuda_backend(device, sharing);
#else
  throw logic_error(error_code::unavailable, "CUDA backend unavailable");
#endif
}

std::unique_ptr<backend> select_backend(std::string_view choice, std::function<void(std::string const&)> const& log,
                                        int device, int sharing) {
  if (choice == "cpu") return make_backend(backend_kind::cpu);
  if (choice == "cuda") return make_backend(backend_kind::cuda, device, sharing);
  if (choice == "twin") return make_device_twin();
  PLACER_EXPECTS(choice == "auto" || choice.empty(),
                 "unknown backend '" + std::string(choice) + "' (expected auto, cpu, cuda or twin)");
  auto const why = cuda_unavailable_reason();
  if (why.empty()) {
    try {
      return make_backend(backend_kind::cuda, device, sharing);
    } catch (std::exception const& e) {
      if (log) log(std::string("backend auto: CUDA failed to start (") + e.what() + "), using the CPU backend");
      return make_backend(backend_kind::cpu);
    }
  }
  if (log) log("backend auto: " + why + "; using the CPU backend");
  return make_backend(backend_kind::cpu);
}

}  // namespace placer::kernels
