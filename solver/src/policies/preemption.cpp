// Placeholder: being written (see policies.hpp for the contract).
#include "policies.hpp"

#include <placer/topology/error.hpp>

namespace placer::detail {
void preempt_for(core_fn const&, work_state&, std::vector<std::int32_t> const&, preempt_scope, std::vector<job> const*, round_result&) { throw logic_error(error_code::internal, "preemption: not implemented yet"); }
}  // namespace placer::detail
