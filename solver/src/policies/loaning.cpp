// Placeholder: being written (see policies.hpp for the contract).
#include "policies.hpp"

#include <placer/topology/error.hpp>

namespace placer::detail {
void reclaim_loaned(core_fn const&, work_state&, std::vector<std::int32_t> const&, round_result&) { throw logic_error(error_code::internal, "reclaim: not implemented yet"); }
}  // namespace placer::detail
