// Placeholder: being written (see policies.hpp for the contract).
#include "policies.hpp"

#include <placer/topology/error.hpp>

namespace placer::detail {
void backfill(core_fn const&, work_state&, std::vector<job> const*, round_result&) { throw logic_error(error_code::internal, "backfill: not implemented yet"); }
}  // namespace placer::detail
