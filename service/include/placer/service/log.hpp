#pragma once
// Logging to stderr through spdlog, one line per event, in text
//   2026-11-21T20:59:01.123Z placer info round request_id=7 session=a ...
// or JSON (`--log-format json`), one object per line:
//   {"ts":"2026-11-21T20:59:01.123Z","level":"info","logger":"placer","msg":"round","request_id":"7",...}
// An event is a message and named fields (request id, session, peer, ...).
// Messages and fields carry peers' text (job and node names, session ids,
// error details), so a line can neither be split nor forged: in text,
// control bytes and backslashes print as \xNN and a value with a space or
// a quote is quoted; in JSON, strings are escaped as JSON wants. A message
// is cut at max_log_message_bytes, a field at max_log_field_bytes.
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace placer::service {

enum class log_level { debug, info, warn, error };
enum class log_format { text, json };

/// One named value of an event.
struct log_field {
  char const* key;
  std::string_view value;
};

void log(log_level level, std::string const& message, std::initializer_list<log_field> fields = {});
inline void log_info(std::string const& m, std::initializer_list<log_field> f = {}) { log(log_level::info, m, f); }
inline void log_warn(std::string const& m, std::initializer_list<log_field> f = {}) { log(log_level::warn, m, f); }
inline void log_error(std::string const& m, std::initializer_list<log_field> f = {}) { log(log_level::error, m, f); }
inline constexpr std::size_t max_log_message_bytes = 4096;
inline constexpr std::size_t max_log_field_bytes = 512;

/// `text` with control bytes, DEL and backslashes as \xNN, cut after
/// `max_bytes` output bytes with a note of how much was left out.
std::string printable(std::string_view text, std::size_t max_bytes);
/// `text` as the inside of a JSON string: quotes, backslashes, control
/// bytes and bytes past ASCII escaped (\uXXXX), so any bytes make valid
/// JSON; cut like printable().
std::string json_escaped(std::string_view text, std::size_t max_bytes);

/// Events below this level are dropped (default info).
void set_log_level(log_level level);
void set_log_format(log_format format);
/// "debug" | "info" | "warn" | "error"; "text" | "json". Throw
/// std::invalid_argument naming the accepted values.
log_level parse_log_level(std::string_view name);
log_format parse_log_format(std::string_view name);

}  // namespace placer::service
