// Capture and replay (capture.hpp): the capture writer's thread and the
// replay's reader.
#include <placer/service/capture.hpp>
#include <placer/service/log.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace placer::service {

namespace fs = std::filesystem;

namespace {

/// How much a slow disk may leave queued before captures are dropped.
constexpr std::size_t max_queued_bytes = std::size_t{64} << 20;

/// "20261125T101530.123456Z": sorts as it reads.
std::string utc_stamp(std::chrono::system_clock::time_point t) {
  auto const us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t const s = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[40];
  std::size_t const n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(us % 1000000));
  return buf;
}

bool is_capture(std::string const& name) {
  std::string_view const sfx = capture_suffix;
  return name.size() > sfx.size() && name.front() != '.' && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0;
}

}  // namespace

capture_writer::capture_writer(capture_config cfg, std::function<void(char const*)> on_outcome)
    : cfg_(std::move(cfg)), on_outcome_(std::move(on_outcome)) {
  cfg_.every = std::max<std::uint64_t>(cfg_.every, 1);
  thread_ = std::thread([this] { run(); });
}

capture_writer::~capture_writer() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool capture_writer::wants(double solve_ms) {
  if (cfg_.slower_ms > 0 && !(solve_ms > cfg_.slower_ms)) return false;
  return seen_.fetch_add(1) % cfg_.every == 0;
}

void capture_writer::submit(std::uint64_t request_id, std::vector<std::uint8_t> bytes) {
  std::size_t const size = bytes.size();
  std::size_t behind = 0;
  {
    std::lock_guard lock(m_);
    behind = queued_bytes_;
    // One capture is always taken when none waits, however large.
    if (queue_.empty() || queued_bytes_ + size <= max_queued_bytes) {
      // Named under the lock: names sort in the order the files are queued.
      char seq[24];
      std::snprintf(seq, sizeof seq, "-%010llu-", static_cast<unsigned long long>(sequence_++));
      queue_.push_back({utc_stamp(std::chrono::system_clock::now()) + seq + std::to_string(request_id) + capture_suffix,
                        std::move(bytes)});
      queued_bytes_ += size;
      cv_.notify_one();
      return;
    }
  }
  problem(dropped_, "dropped",
          "capture dropped: the writer is " + std::to_string(behind >> 20) + " MiB behind (a slow disk?)");
}

capture_stats capture_writer::stats() const {
  return {written_.load(), dropped_.load(), failed_.load(), bytes_.load()};
}

void capture_writer::flush() {
  std::unique_lock lock(m_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void capture_writer::run() {
  scan();  // a directory that cannot be made is said now, at start
  std::unique_lock lock(m_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and everything written
    item it = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= it.bytes.size();
    busy_ = true;
    lock.unlock();
    try {
      write(it);
    } catch (std::exception const& e) {
      problem(failed_, "failed", std::string("capture not written: ") + e.what());
    }
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

void capture_writer::scan() {
  std::error_code ec;
  fs::create_directories(cfg_.dir, ec);
  if (ec) {
    problem(failed_, "failed", "cannot make the capture directory " + cfg_.dir + ": " + ec.message());
    return;
  }
  std::vector<std::pair<std::string, std::size_t>> found;
  for (auto it = fs::directory_iterator(cfg_.dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string const name = it->path().filename().string();
    std::error_code e2;
    if (is_capture(name) && it->is_regular_file(e2)) {
      found.emplace_back(name, static_cast<std::size_t>(it->file_size(e2)));
    } else if (name.front() == '.' && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
               name.find(capture_suffix) != std::string::npos) {
      fs::remove(it->path(), e2);  // a write a crash cut short
    }
  }
  if (ec) {
    problem(failed_, "failed", "cannot list the capture directory " + cfg_.dir + ": " + ec.message());
    return;
  }
  std::sort(found.begin(), found.end());
  files_.assign(found.begin(), found.end());
  std::size_t total = 0;
  for (auto const& f : files_) total += f.second;
  bytes_.store(total);
  scanned_ = true;
  make_room(0);
}

void capture_writer::make_room(std::size_t incoming) {
  while (!files_.empty() && bytes_.load() + incoming > cfg_.max_bytes) {
    auto const [name, size] = files_.front();
    files_.pop_front();
    bytes_.fetch_sub(size);
    std::error_code ec;
    fs::remove(fs::path(cfg_.dir) / name, ec);
    if (ec) problem(failed_, "failed", "cannot remove the old capture " + name + ": " + ec.message());
  }
}

void capture_writer::write(item const& it) {
  std::size_t const size = it.bytes.size();
  if (size > cfg_.max_bytes) {
    problem(dropped_, "dropped",
            "capture dropped: its " + std::to_string(size) + " bytes are over the directory's bound (--capture-max-mib)");
    return;
  }
  if (!scanned_) scan();
  if (!scanned_) return;  // said and counted
  make_room(size);
  // Written aside and renamed, so that a reader never sees half a file.
  fs::path const dir(cfg_.dir);
  fs::path const tmp = dir / ("." + it.name + ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(it.bytes.data(), 1, size, f) == size;
  int err = errno;
  if (f != nullptr && std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, dir / it.name, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    problem(failed_, "failed",
            "cannot write the capture " + (dir / it.name).string() + ": " + (ok ? ec.message() : std::strerror(err)));
    if (!fs::is_directory(dir, ec)) scanned_ = false;  // gone: made and counted again next time
    return;
  }
  files_.emplace_back(it.name, size);
  bytes_.fetch_add(size);
  written_.fetch_add(1);
  if (on_outcome_) on_outcome_("written");
}

void capture_writer::problem(std::atomic<std::uint64_t>& counter, char const* outcome, std::string const& what) {
  counter.fetch_add(1);
  if (on_outcome_) on_outcome_(outcome);
  // A full disk fails every capture: one line a minute, with how many
  // were not logged since.
  std::lock_guard lock(log_m_);
  auto const now = std::chrono::steady_clock::now();
  if (logged_ != std::chrono::steady_clock::time_point{} && now - logged_ < std::chrono::minutes(1)) {
    ++unlogged_;
    return;
  }
  log_error(what, {{"dir", cfg_.dir},
                   {"written", std::to_string(written_.load())},
                   {"dropped", std::to_string(dropped_.load())},
                   {"failed", std::to_string(failed_.load())},
                   {"not_logged", std::to_string(unlogged_)}});
  logged_ = now;
  unlogged_ = 0;
}

decoded_request read_request_file(std::string const& path) {
  auto fail = [&](std::string const& what) { return std::runtime_error(path + ": " + what); };
  std::error_code ec;
  auto const size = fs::file_size(path, ec);
  if (ec) throw fail("cannot read: " + ec.message());
  if (size > default_max_message_bytes) {
    throw fail(std::to_string(size) + " bytes, more than a request may be (" +
               std::to_string(default_max_message_bytes >> 20) + " MiB)");
  }
  std::ifstream f(path, std::ios::binary);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (!f || !f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    throw fail("cannot read");
  }
  auto const chk = check_envelope(bytes.data(), bytes.size());
  if (chk.envelope == nullptr) {
    throw fail(std::string("not a readable Placer request: ") + error_code_name(chk.code) + ": " + chk.message);
  }
  decoded_request req;
  try {
    decode_request(*chk.envelope, req);
  } catch (logic_error const& e) {
    throw fail(e.what());
  }
  if (req.delta) {
    throw fail("a delta round (session '" + printable(req.header.session, 256) + "', epoch " +
               std::to_string(req.delta->base_epoch) +
               "): it needs its session's state, which the file does not hold (placer serve --capture writes delta "
               "rounds in full)");
  }
  return req;
}

}  // namespace placer::service
