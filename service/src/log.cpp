// stderr logging with UTC timestamps; one write per line so threads don't interleave.
#include <placer/service/log.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace placer::service {

namespace {
std::atomic<int> g_level{static_cast<int>(log_level::info)};
char const* name(log_level l) {
  switch (l) {
    case log_level::debug: return "DEBUG";
    case log_level::info: return "INFO";
    case log_level::warn: return "WARN";
    case log_level::error: return "ERROR";
  }
  return "?";
}
}  // namespace

void set_log_level(log_level level) { g_level.store(static_cast<int>(level)); }

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t k = 0;
  for (; k < text.size() && out.size() < max_bytes; ++k) {
    auto const c = static_cast<unsigned char>(text[k]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (k < text.size()) out += "... (" + std::to_string(text.size() - k) + " bytes more)";
  return out;
}

void log(log_level level, std::string const& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  auto const now = std::chrono::system_clock::now();
  auto const t = std::chrono::system_clock::to_time_t(now);
  auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line = std::string(stamp) + "." + (ms < 100 ? (ms < 10 ? "00" : "0") : "") + std::to_string(ms) +
                     "Z placer " + name(level) + " " + printable(message, max_log_message_bytes) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace placer::service
