#pragma once
// Minimal structured logging to stderr: "2026-11-21T20:59:01.123Z placer INFO msg".
#include <string>

namespace placer::service {

enum class log_level { debug, info, warn, error };

void log(log_level level, std::string const& message);
inline void log_info(std::string const& m) { log(log_level::info, m); }
inline void log_warn(std::string const& m) { log(log_level::warn, m); }
inline void log_error(std::string const& m) { log(log_level::error, m); }
/// Messages below this level are dropped (default info).
void set_log_level(log_level level);

}  // namespace placer::service
