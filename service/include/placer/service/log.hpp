#pragma once
// Minimal structured logging to stderr: "2026-11-21T20:59:01.123Z placer INFO msg",
// one line per event. Messages carry peers' text (job and node names, error
// details), so a line can neither be split nor forged: control bytes and
// backslashes print as \xNN, and a message is cut at max_log_message_bytes.
#include <cstddef>
#include <string>
#include <string_view>

namespace placer::service {

enum class log_level { debug, info, warn, error };

void log(log_level level, std::string const& message);
inline void log_info(std::string const& m) { log(log_level::info, m); }
inline void log_warn(std::string const& m) { log(log_level::warn, m); }
inline void log_error(std::string const& m) { log(log_level::error, m); }
inline constexpr std::size_t max_log_message_bytes = 4096;
/// `text` with control bytes, DEL and backslashes as \xNN, cut after
/// `max_bytes` output bytes with a note of how much was left out.
std::string printable(std::string_view text, std::size_t max_bytes);
/// Messages below this level are dropped (default info).
void set_log_level(log_level level);

}  // namespace placer::service
