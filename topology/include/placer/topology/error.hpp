#pragma once
// Error types shared by every module. Expected outcomes (a job that does not
// fit) are data in round_result, never exceptions; these are for invalid
// input and broken preconditions.

#include <stdexcept>
#include <string>

namespace placer {

/// Error codes, named as google.rpc does; mirrored by wire::ErrorCode.
enum class error_code {
  invalid_argument,
  failed_precondition,
  stale_epoch,
  resource_exhausted,
  deadline_exceeded,
  unavailable,
  internal,
};

class logic_error : public std::runtime_error {
 public:
  logic_error(error_code code, std::string const& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] error_code code() const noexcept { return code_; }

 private:
  error_code code_;
};

}  // namespace placer

/// Precondition check: throws placer::logic_error(invalid_argument) with the message.
#define PLACER_EXPECTS(cond, msg)                                                  \
  do {                                                                             \
    if (!(cond)) throw ::placer::logic_error(::placer::error_code::invalid_argument, (msg)); \
  } while (0)
