// Placeholder: being written (see policies.hpp for the contract).
#include "policies.hpp"

#include <placer/topology/error.hpp>

namespace placer::detail {
void elastic_scale_out(core_fn const&, work_state&, round_result&) { throw logic_error(error_code::internal, "elastic: not implemented yet"); }
std::vector<std::int32_t> solve_mck(std::vector<knapsack_group> const&, std::int64_t) { throw logic_error(error_code::internal, "knapsack: not implemented yet"); }
}  // namespace placer::detail
