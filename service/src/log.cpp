// stderr logging with UTC timestamps; one write per line so threads don't interleave.
#include <placer/service/log.hpp>

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
                     "Z placer " + name(level) + " " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace placer::service
