// Placeholder: being written (see baseline_policies.hpp).
#include <placer/sim/baseline_policies.hpp>

#include <stdexcept>

namespace placer::sim {

std::vector<std::string> baseline_policy_names() {
  return {"random", "dot-prod", "gpu-packing", "gpu-clustering", "best-fit", "fgd"};
}
bool is_baseline_policy(std::string const& name) {
  for (auto const& n : baseline_policy_names()) {
    if (n == name) return true;
  }
  return false;
}
solve_fn baseline_solver(std::string const& name, std::uint64_t) {
  throw std::invalid_argument("baseline policy '" + name + "': not implemented yet");
}

}  // namespace placer::sim
