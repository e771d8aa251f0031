#pragma once
// The CPU backend (Thrust on OpenMP).
#include <placer/kernels/backend.hpp>

namespace placer::kernels {

class omp_backend final : public backend {
 public:
  omp_backend();
  [[nodiscard]] backend_kind kind() const override { return backend_kind::cpu; }
  [[nodiscard]] std::string const& description() const override { return description_; }
  void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
             score_params const& params, std::span<std::int32_t> out) override;
  cluster_stats stats(node_view const& nodes, task_view const& tasks) override;

 private:
  std::string description_;
};

}  // namespace placer::kernels
