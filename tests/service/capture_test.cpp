// Capture and replay: a real server with --capture on, rounds (full and
// delta) through the real client, the files it wrote read back and solved
// in process to the reply the client got; the directory's byte bound,
// --capture-every, --capture-slower-ms, a disk that fails; and `placer
// solve --request` on a capture and on bad files.
#include <placer/service/capture.hpp>
#include <placer/service/client.hpp>
#include <placer/service/codec.hpp>
#include <placer/service/json_io.hpp>
#include <placer/service/server.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <thread>

#include <unistd.h>

#include "../support/invariants.hpp"
#include "../support/random_round.hpp"
#include "../support/run_placer.hpp"
#include "../support/running_server.hpp"

namespace placer {
namespace {

namespace fs = std::filesystem;
using service::decoded_reply;
using wire::ErrorCode;
using testing_support::run_placer;
using testing_support::difference;

/// A fresh directory under the system's temporary one, removed afterwards.
class temp_dir {
 public:
  explicit temp_dir(std::string const& name)
      : path_(fs::temp_directory_path() / ("placer_capture_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] fs::path const& path() const { return path_; }
  [[nodiscard]] std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

/// A server with capture on (running_server: loopback, CPU, quiet).
class capturing_server : public testing_support::running_server {
 public:
  explicit capturing_server(service::capture_config capture, service::service_config cfg = {})
      : running_server([&] {
          cfg.endpoint = "tcp://127.0.0.1:*";
          cfg.capture = std::move(capture);
          return cfg;
        }()) {}
  /// The counters once every capture queued so far is on disk.
  service::server_stats flushed() {
    get().flush_captures();
    return get().stats();
  }
};

/// The capture files in `dir`, oldest first (their names sort by time).
std::vector<fs::path> captures(fs::path const& dir) {
  std::vector<fs::path> out;
  for (auto const& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::uint64_t> request_ids(fs::path const& dir) {
  std::vector<std::uint64_t> out;
  for (auto const& f : captures(dir)) out.push_back(service::read_request_file(f.string()).header.request_id);
  return out;
}

round_input demo_round(std::uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  round_input in = testing_support::random_round(rng, 6, 30);
  while (in.pending.empty()) in = testing_support::random_round(rng, 6, 30);
  in.state.epoch = 1;
  return in;
}


round_result replay(fs::path const& file) {
  auto const req = service::read_request_file(file.string());
  solver local(kernels::make_backend(kernels::backend_kind::cpu));
  return local.solve(req.input);
}

TEST(Capture, FullAndDeltaRoundsReplayOnTheirOwnToTheReplyTheClientGot) {
  temp_dir dir("replay");
  capturing_server s({.dir = dir.str()});
  client c({s.endpoint(), 5000, "captured"});
  round_input const in = demo_round();
  decoded_reply const full = c.solve(in);
  ASSERT_EQ(full.code, ErrorCode::Ok) << full.message;
  // A delta round: node 0 loses its CPU, the first pending job leaves and
  // a copy of the last arrives under a new name.
  node busy = in.state.nodes[0];
  busy.cpu_milli_free = 0;
  job_delta jd;
  jd.removed.push_back(in.pending.front().name);
  jd.added.push_back(in.pending.back());
  jd.added.back().name = "arrived-later";
  decoded_reply const delta = c.solve_delta({1, 2, {}, {}, {{0, busy}}}, jd, in);
  ASSERT_EQ(delta.code, ErrorCode::Ok) << delta.message;
  ASSERT_EQ(c.resyncs(), 0U) << "the second round went as a delta";
  // A round the solver refuses (its validation) is one to look at too.
  round_input refused = in;
  refused.pending.front().estimated_duration = -1;
  ASSERT_EQ(c.solve(refused).code, ErrorCode::InvalidArgument);

  auto const st = s.flushed();
  EXPECT_EQ(st.capture.written, 3U);
  EXPECT_EQ(st.capture.failed, 0U);
  auto const files = captures(dir.path());
  ASSERT_EQ(files.size(), 3U);
  std::regex const name(R"(\d{8}T\d{6}\.\d{6}Z-\d{10}-\d+\.placer)");
  for (auto const& f : files) EXPECT_TRUE(std::regex_match(f.filename().string(), name)) << f;
  std::uint64_t bytes = 0;
  for (auto const& f : files) bytes += fs::file_size(f);
  EXPECT_EQ(st.capture.bytes, bytes);

  // Each file is a full request that replays alone to the client's reply.
  auto const first = service::read_request_file(files[0].string());
  EXPECT_EQ(first.header.request_id, full.header.request_id);
  EXPECT_EQ(first.header.session, "captured");
  EXPECT_FALSE(first.delta);
  EXPECT_EQ(difference(full.result, replay(files[0])), "");
  auto const second = service::read_request_file(files[1].string());
  EXPECT_EQ(second.header.request_id, delta.header.request_id);
  EXPECT_FALSE(second.delta) << "a delta round is captured as the full round the worker solved";
  EXPECT_FALSE(second.jobs);
  round_input const& solved = *c.last_round();  // the client's mirror: the session after the deltas
  ASSERT_EQ(second.input.state.nodes.size(), solved.state.nodes.size());
  EXPECT_EQ(second.input.state.epoch, 2U);
  EXPECT_EQ(second.input.state.nodes[0].cpu_milli_free, 0);
  ASSERT_EQ(second.input.pending.size(), solved.pending.size());
  for (std::size_t k = 0; k < solved.pending.size(); ++k) EXPECT_EQ(second.input.pending[k].name, solved.pending[k].name);
  EXPECT_EQ(second.input.pending.back().name, "arrived-later");
  EXPECT_EQ(difference(delta.result, replay(files[1])), "");
  EXPECT_THROW(replay(files[2]), logic_error) << "refused again, as the service did";
}

TEST(Capture, TheDirectoryKeepsItsByteBoundOldestFirst) {
  temp_dir dir("bound");
  round_input const in = demo_round();
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {1, "bound", 1}, in);
  std::size_t const one = fbb.GetSize();  // about one capture's bytes
  // A previous run's capture, older than any this run writes, and a write a
  // crash cut short.
  fs::path const old = dir.path() / "19700101T000000.000000Z-0000000000-9.placer";
  std::ofstream(old) << std::string(one / 2, 'x');
  fs::path const stale = dir.path() / ".20000101T000000.000000Z-0000000000-9.placer.tmp";
  std::ofstream(stale) << "half";
  {
    capturing_server s({.dir = dir.str(), .max_bytes = 3 * one + one / 2});  // three captures fit
    client c({s.endpoint(), 5000, "bound"});
    for (int k = 0; k < 6; ++k) ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
    auto const st = s.flushed();
    EXPECT_EQ(st.capture.written, 6U);
    EXPECT_LE(st.capture.bytes, 3 * one + one / 2);
  }
  EXPECT_FALSE(fs::exists(old)) << "the oldest go first, the previous run's included";
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(request_ids(dir.path()), (std::vector<std::uint64_t>{4, 5, 6})) << "the newest three are kept";
  std::uintmax_t held = 0;
  for (auto const& f : captures(dir.path())) held += fs::file_size(f);
  EXPECT_LE(held, 3 * one + one / 2);
}

/// The CPU backend, with a sleep in every round's first stage call while
/// `slow` is set: a round that is slow to solve, on demand.
class slow_backend final : public kernels::backend {
 public:
  explicit slow_backend(std::atomic<bool>& slow) : cpu_(kernels::make_backend(kernels::backend_kind::cpu)), slow_(slow) {}
  [[nodiscard]] kernels::backend_kind kind() const override { return kernels::backend_kind::cpu; }
  [[nodiscard]] std::string const& description() const override { return cpu_->description(); }
  void score(kernels::node_view const& n, kernels::class_view const& c, kernels::task_view const& t,
             kernels::score_params const& p, std::span<std::int32_t> out) override {
    cpu_->score(n, c, t, p, out);
  }
  kernels::cluster_stats stats(kernels::node_view const& n, kernels::task_view const& t) override {
    if (slow_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return cpu_->stats(n, t);
  }
  void domain_capacity(kernels::node_view const& n, kernels::class_view const& c, std::span<std::int32_t const> of,
                       kernels::domain_index_view const& idx, std::span<std::int64_t> cap) override {
    cpu_->domain_capacity(n, c, of, idx, cap);
  }
  void place_tiers(std::span<kernels::tier_problem const> tiers, kernels::tier_results& out) override {
    cpu_->place_tiers(tiers, out);
  }

 private:
  std::unique_ptr<kernels::backend> cpu_;
  std::atomic<bool>& slow_;
};

TEST(Capture, EveryNthRoundOrOnlyTheSlowOnes) {
  round_input const in = demo_round();
  {
    temp_dir dir("every");
    capturing_server s({.dir = dir.str(), .every = 3});
    client c({s.endpoint(), 5000, ""});
    for (int k = 0; k < 7; ++k) ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
    EXPECT_EQ(s.flushed().capture.written, 3U);
    EXPECT_EQ(request_ids(dir.path()), (std::vector<std::uint64_t>{1, 4, 7}));
  }
  {
    temp_dir dir("slower");
    std::atomic<bool> slow{false};
    service::service_config cfg;
    cfg.make_backend = [&](int) { return std::make_unique<slow_backend>(slow); };
    // Two stats calls (before and after) make a slow round 60 ms or more;
    // this small round takes well under 1 ms otherwise.
    capturing_server s({.dir = dir.str(), .slower_ms = 40}, cfg);
    client c({s.endpoint(), 5000, ""});
    for (bool const sleep : {false, true, false, true, false}) {
      slow = sleep;
      ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
    }
    EXPECT_EQ(s.flushed().capture.written, 2U);
    EXPECT_EQ(request_ids(dir.path()), (std::vector<std::uint64_t>{2, 4}));
  }
}

TEST(Capture, ADiskThatFailsCostsCapturesNeverRounds) {
  temp_dir dir("broken");
  fs::path const file = dir.path() / "not-a-directory";
  std::ofstream(file) << "x";
  capturing_server s({.dir = (file / "captures").string()});  // cannot be made
  client c({s.endpoint(), 5000, "broken"});
  round_input const in = demo_round();
  ASSERT_EQ(c.solve(in).code, ErrorCode::Ok);
  ASSERT_EQ(c.solve_delta({1, 2, {}, {}, {}}, {}, in).code, ErrorCode::Ok);
  auto const st = s.flushed();
  EXPECT_EQ(st.rounds_ok, 2U);
  EXPECT_EQ(st.errors, 0U);
  EXPECT_EQ(st.capture.written, 0U);
  EXPECT_GE(st.capture.failed, 2U) << "the directory at start, then each capture";
}

/// `path`'s text ("" when it cannot be read).
std::string slurp(fs::path const& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The text of `key`'s value in a reply's JSON, from the key to the next
/// key at the same indentation, or the end of its table (a list or a
/// table, as printed).
std::string json_field(std::string const& json, std::string const& key) {
  auto const at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  auto const line = json.rfind('\n', at);
  std::string const indent = json.substr(line + 1, at - line - 1);
  auto const next = std::min(json.find(",\n" + indent + "\"", at),
                             json.find("\n" + indent.substr(0, indent.size() >= 2 ? indent.size() - 2 : 0) + "}", at));
  return json.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(Replay, PlacerSolveRequestPrintsTheReplyTheServiceGave) {
  std::string out;
  if (run_placer("version", out) < 0) GTEST_SKIP() << "placer binary not built beside the test";
  temp_dir dir("cli");
  round_input const in = demo_round(11);
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {77, "cli", 0}, in);
  std::string service_json;
  {
    capturing_server s({.dir = (dir.path() / "captures").string()});
    client c({s.endpoint(), 5000, "cli"});
    auto const reply = c.roundtrip(fbb.GetBufferPointer(), fbb.GetSize(), 77);
    service_json = service::envelope_to_json(reply.data(), reply.size());
  }
  auto const files = captures(dir.path() / "captures");
  ASSERT_EQ(files.size(), 1U);
  fs::path const json = dir.path() / "replay.json";
  ASSERT_EQ(run_placer("solve --request " + files[0].string() + " --backend cpu --output " + json.string(), out), 0)
      << out;
  std::string const replay_json = slurp(json);
  for (char const* key : {"placements", "unplaced", "metrics", "request_id", "session"}) {
    EXPECT_FALSE(json_field(service_json, key).empty()) << key << " in\n" << service_json;
    EXPECT_EQ(json_field(replay_json, key), json_field(service_json, key)) << key;
  }
  ASSERT_EQ(run_placer("solve --request " + files[0].string() + " --backend cpu --summary", out), 0) << out;
  EXPECT_NE(out.find("Placements ("), std::string::npos) << out;

  // Bad files: the file named, what is wrong said, a non-zero exit.
  fs::path const junk = dir.path() / "junk.placer";
  std::ofstream(junk) << "not a flatbuffer at all";
  EXPECT_EQ(run_placer("solve --request " + junk.string(), out), 1) << out;
  EXPECT_NE(out.find(junk.string() + ": not a readable Placer request: UnknownSchema"), std::string::npos) << out;
  EXPECT_EQ(run_placer("solve --request " + (dir.path() / "missing.placer").string(), out), 1) << out;
  EXPECT_NE(out.find("missing.placer: cannot read"), std::string::npos) << out;
  EXPECT_EQ(run_placer("solve --request " + files[0].string() + " --cluster x.json", out), 2) << out;

  // The serve options: listed with their variables; the others need --capture.
  ASSERT_EQ(run_placer("serve --help", out), 0) << out;
  for (char const* v : {"PLACER_CAPTURE", "PLACER_CAPTURE_EVERY", "PLACER_CAPTURE_SLOWER_MS", "PLACER_CAPTURE_MAX_MIB"}) {
    EXPECT_NE(out.find(v), std::string::npos) << v;
  }
  EXPECT_EQ(run_placer("serve --capture-every 3", out), 2) << out;
  EXPECT_NE(out.find("--capture-every requires --capture"), std::string::npos) << out;
  EXPECT_EQ(run_placer("serve --capture " + dir.str() + " --capture-max-mib 0", out), 2) << out;
}

TEST(Replay, BadRequestFilesAreNamedWithWhatIsWrong) {
  temp_dir dir("bad");
  round_input const in = demo_round();
  auto write = [&](std::string const& name, void const* data, std::size_t size) {
    fs::path const p = dir.path() / name;
    std::ofstream(p, std::ios::binary).write(static_cast<char const*>(data), static_cast<std::streamsize>(size));
    return p.string();
  };
  auto error_of = [](std::string const& path) -> std::string {
    try {
      (void)service::read_request_file(path);
    } catch (std::runtime_error const& e) {
      return e.what();
    }
    return "no error";
  };
  auto expect_error = [&](std::string const& path, std::string const& what) {
    std::string const msg = error_of(path);
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0U) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  flatbuffers::FlatBufferBuilder fbb;
  service::encode_request(fbb, {1, "s", 0}, in);
  std::vector<std::uint8_t> const good(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  EXPECT_EQ(error_of(write("good.placer", good.data(), good.size())), "no error");
  expect_error(write("empty.placer", "", 0), "not a readable Placer request");
  expect_error(write("cut.placer", good.data(), good.size() / 2), "not a readable Placer request: Malformed");
  expect_error((dir.path() / "absent.placer").string(), "cannot read");
  expect_error(dir.str(), "cannot read");  // a directory
  // A reply is a Placer message, but not a request.
  service::encode_error(fbb, {1, "s", 0}, ErrorCode::Internal, "boom");
  expect_error(write("reply.placer", fbb.GetBufferPointer(), fbb.GetSize()), "expected ScheduleRequest");
  // A delta: it needs its session's state.
  cluster_delta const d{1, 2, {}, {}, {}};
  service::encode_request(fbb, {1, "s", 0}, in, &d);
  expect_error(write("delta.placer", fbb.GetBufferPointer(), fbb.GetSize()), "a delta round (session 's', epoch 1)");
}

}  // namespace
}  // namespace placer
