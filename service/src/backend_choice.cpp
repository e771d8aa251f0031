// placer serve --backend auto: the faster of the usable backends, measured
// on one round (backend_choice.hpp).
#include <placer/service/backend_choice.hpp>
#include <placer/solver/solver.hpp>

#include <algorithm>
#include <chrono>

namespace placer::service {

std::size_t fastest_backend(std::span<backend_maker const> candidates, round_input const& round, int reps,
                            std::vector<backend_trial>& trials) {
  trials.clear();
  std::size_t best = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    solver s(candidates[i]());
    (void)s.solve(round);  // warm-up
    std::vector<double> ms;
    for (int k = 0; k < std::max(reps, 1); ++k) {
      auto const t0 = std::chrono::steady_clock::now();
      (void)s.solve(round);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
    trials.push_back({s.backend().description(), ms[ms.size() / 2]});
    if (trials[i].median_ms < trials[best].median_ms) best = i;
  }
  return best;
}

}  // namespace placer::service
