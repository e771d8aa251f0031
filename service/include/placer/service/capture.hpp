#pragma once
// Capture and replay: `placer serve --capture DIR` keeps the rounds it
// solved as request files, `placer solve --request FILE` solves one again.
//
//   capture_writer w({.dir = "/var/lib/placer/captures"});
//   if (w.wants(solve_ms)) w.submit(request_id, bytes);   // a worker, after the solve
//   decoded_request r = read_request_file(path);          // the replay
//
// A capture file is one Envelope with a full ScheduleRequest, the bytes a
// client sends: a round that came in full as it was received, a delta round
// as the full round the worker solved (the session's cluster and jobs after
// the deltas, re-encoded with encode_request), so that every file replays on
// its own. Names sort by time and are unique within the process:
// <UTC time to the microsecond>-<sequence>-<request id>.placer. The writer
// is a thread of its own: a worker only queues the bytes (bounded: past the
// bound a capture is dropped and counted), and a disk that fails costs
// captures (counted, logged once a minute), never a round.

#include <placer/service/codec.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace placer::service {

struct capture_config {
  std::string dir;                  ///< where the files go; empty = no capture
  std::uint64_t every = 1;          ///< every Nth round of those below
  double slower_ms = 0;             ///< only rounds whose solve took longer (0 = all)
  std::size_t max_bytes = std::size_t{256} << 20;  ///< the directory's capture files; the oldest go first
};

struct capture_stats {
  std::uint64_t written = 0;  ///< files written
  std::uint64_t dropped = 0;  ///< not written: the writer was too far behind, or a file alone over max_bytes
  std::uint64_t failed = 0;   ///< not written: the disk said no (or a file could not be removed)
  std::uint64_t bytes = 0;    ///< what the directory's capture files hold, as far as the writer knows
};

/// The file suffix of a capture.
inline constexpr char const* capture_suffix = ".placer";

class capture_writer {
 public:
  /// Starts the writer thread; it creates the directory and counts the
  /// capture files already there (a previous run's) against max_bytes.
  /// `on_outcome` ("written", "dropped", "failed") feeds the metrics.
  explicit capture_writer(capture_config cfg, std::function<void(char const*)> on_outcome = {});
  /// Writes what is queued, then stops.
  ~capture_writer();
  capture_writer(capture_writer const&) = delete;
  capture_writer& operator=(capture_writer const&) = delete;

  /// Whether the round whose solve took `solve_ms` is captured: past
  /// slower_ms, then every Nth of those. Thread-safe.
  bool wants(double solve_ms);
  /// Queues one file's bytes and returns at once (never waits for the disk).
  void submit(std::uint64_t request_id, std::vector<std::uint8_t> bytes);
  /// A capture the caller could not make (counted and logged as failed).
  void failed(std::string const& what) { problem(failed_, "failed", what); }
  [[nodiscard]] capture_stats stats() const;
  /// Blocks until everything submitted so far is written or given up (tests).
  void flush();

 private:
  struct item {
    std::string name;
    std::vector<std::uint8_t> bytes;
  };
  void run();
  void write(item const& it);
  void scan();
  /// Deletes the oldest files until `incoming` more bytes fit.
  void make_room(std::size_t incoming);
  void problem(std::atomic<std::uint64_t>& counter, char const* outcome, std::string const& what);

  capture_config cfg_;
  std::function<void(char const*)> on_outcome_;
  std::atomic<std::uint64_t> seen_{0}, written_{0}, dropped_{0}, failed_{0}, bytes_{0};
  mutable std::mutex m_;  ///< the queue's: workers and the writer only, never the I/O thread
  std::condition_variable cv_, idle_;
  std::deque<item> queue_;
  std::size_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  std::uint64_t sequence_ = 0;
  std::mutex log_m_;  ///< the log's rate limit (workers drop, the writer fails)
  std::chrono::steady_clock::time_point logged_{};
  std::uint64_t unlogged_ = 0;
  // The writer thread's own.
  std::deque<std::pair<std::string, std::size_t>> files_;  ///< name, bytes; oldest first
  bool scanned_ = false;
  std::thread thread_;
};

/// Reads one request file (a capture, or any file holding one full
/// ScheduleRequest envelope) for a replay. Throws std::runtime_error naming
/// the file and what is wrong: unreadable, too large, not a Placer message
/// (check_envelope's verdict), not a ScheduleRequest, or a delta (it needs
/// its session's state, which the file does not carry).
decoded_request read_request_file(std::string const& path);

}  // namespace placer::service
