// Placeholder: being written (see policies.hpp for the contract).
#include "policies.hpp"

#include <placer/topology/error.hpp>

namespace placer::detail {
delay_plan plan_delays(work_state const&, queue_memory&) { throw logic_error(error_code::internal, "delay: not implemented yet"); }
void settle_delays(work_state const&, delay_plan const&, queue_memory&, round_result&) { throw logic_error(error_code::internal, "delay: not implemented yet"); }
std::string delay_class(job const&, round_input const&) { throw logic_error(error_code::internal, "delay: not implemented yet"); }
}  // namespace placer::detail
