// The events' text is built here (escaping, fields); spdlog writes the
// lines: its stderr sink (one write per line, so threads do not
// interleave), UTC timestamps, the level filter.
#include <placer/service/log.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <stdexcept>

namespace placer::service {

namespace {

constexpr char const* text_pattern = "%Y-%m-%dT%H:%M:%S.%eZ placer %l %v";
constexpr char const* json_pattern = R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"placer",%v})";

std::atomic<log_format> g_format{log_format::text};

spdlog::logger& logger() {
  static auto const l = [] {
    auto made = std::make_shared<spdlog::logger>("placer", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_pattern(text_pattern, spdlog::pattern_time_type::utc);
    made->set_level(spdlog::level::info);
    made->flush_on(spdlog::level::debug);
    return made;
  }();
  return *l;
}

spdlog::level::level_enum to_spdlog(log_level l) {
  switch (l) {
    case log_level::debug: return spdlog::level::debug;
    case log_level::info: return spdlog::level::info;
    case log_level::warn: return spdlog::level::warn;
    case log_level::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

/// Escapes byte by byte with `escape(c, out)` deciding, cut at max_bytes.
template <class Escape>
std::string escaped(std::string_view text, std::size_t max_bytes, Escape escape) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t k = 0;
  for (; k < text.size() && out.size() < max_bytes; ++k) escape(static_cast<unsigned char>(text[k]), out);
  if (k < text.size()) out += "... (" + std::to_string(text.size() - k) + " bytes more)";
  return out;
}

constexpr char hex[] = "0123456789abcdef";

/// A text field's value: printable, and quoted when a space or quote
/// would make it read as more than one value.
std::string text_value(std::string_view v) {
  std::string p = printable(v, max_log_field_bytes);
  if (!p.empty() && p.find_first_of(" \"=") == std::string::npos) return p;
  std::string q = "\"";
  for (char c : p) q += c == '"' ? std::string("\\x22") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  return escaped(text, max_bytes, [](unsigned char c, std::string& out) {
    if (c < 0x20 || c == 0x7f || c == '\\') {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  });
}

std::string json_escaped(std::string_view text, std::size_t max_bytes) {
  return escaped(text, max_bytes, [](unsigned char c, std::string& out) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  });
}

void set_log_level(log_level level) { logger().set_level(to_spdlog(level)); }

void set_log_format(log_format format) {
  g_format.store(format);
  logger().set_pattern(format == log_format::json ? json_pattern : text_pattern, spdlog::pattern_time_type::utc);
}

log_level parse_log_level(std::string_view name) {
  if (name == "debug") return log_level::debug;
  if (name == "info") return log_level::info;
  if (name == "warn") return log_level::warn;
  if (name == "error") return log_level::error;
  throw std::invalid_argument("log level '" + printable(name, 64) + "': expected debug, info, warn or error");
}

log_format parse_log_format(std::string_view name) {
  if (name == "text") return log_format::text;
  if (name == "json") return log_format::json;
  throw std::invalid_argument("log format '" + printable(name, 64) + "': expected text or json");
}

void log(log_level level, std::string const& message, std::initializer_list<log_field> fields) {
  auto& l = logger();
  auto const lvl = to_spdlog(level);
  if (!l.should_log(lvl)) return;
  std::string line;
  if (g_format.load() == log_format::json) {
    line = "\"msg\":\"" + json_escaped(message, max_log_message_bytes) + "\"";
    for (auto const& f : fields) {
      line += ",\"" + json_escaped(f.key, 64) + "\":\"" + json_escaped(f.value, max_log_field_bytes) + "\"";
    }
  } else {
    line = printable(message, max_log_message_bytes);
    for (auto const& f : fields) line += std::string(" ") + f.key + "=" + text_value(f.value);
  }
  l.log(lvl, spdlog::string_view_t(line.data(), line.size()));
}

}  // namespace placer::service
