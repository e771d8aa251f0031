// Option parsing and the data-directory rule shared by the verbs (cli.hpp).
#include "cli.hpp"

#include <cstdio>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

namespace placer::tools {

namespace fs = std::filesystem;

cli_args parse_cli(int argc, char** argv, int first, std::set<std::string> const& valued,
                   std::set<std::string> const& boolean, std::string const& verb) {
  // CLI11 reads the line (--key value, --key=value, flags, unknown options
  // and missing values named); the verbs keep their own usage texts.
  CLI::App app("placer " + verb);
  app.set_help_flag();
  std::map<std::string, std::string> values;
  std::map<std::string, bool> set;
  for (auto const& k : valued) app.add_option("--" + k, values[k]);
  for (auto const& k : boolean) app.add_flag("--" + k, set[k]);
  std::vector<std::string> args;
  for (int i = argc - 1; i >= first; --i) args.emplace_back(argv[i]);  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (CLI::ParseError const& e) {
    throw usage_error(e.what());
  }
  cli_args a;
  for (auto const& k : valued) {
    if (app.count("--" + k) > 0) a.opts[k] = values[k];
  }
  for (auto const& k : boolean) {
    if (set[k]) a.flags.insert(k);
  }
  return a;
}

long long integer_option(std::map<std::string, std::string> const& opts, std::string const& key, long long def) {
  auto const it = opts.find(key);
  if (it == opts.end()) return def;
  try {
    std::size_t pos = 0;
    long long const v = std::stoll(it->second, &pos);
    if (pos == it->second.size() && v >= 0) return v;
  } catch (std::exception const&) {
  }
  throw usage_error("--" + key + " needs a non-negative integer, got '" + it->second + "'");
}

double number_option(std::map<std::string, std::string> const& opts, std::string const& key, double def) {
  auto const it = opts.find(key);
  if (it == opts.end()) return def;
  try {
    std::size_t pos = 0;
    double const v = std::stod(it->second, &pos);
    if (pos == it->second.size() && v >= 0 && std::isfinite(v)) return v;
  } catch (std::exception const&) {
  }
  throw usage_error("--" + key + " needs a non-negative number, got '" + it->second + "'");
}

client_options client_connection(cli_args const& a, int timeout_ms) {
  client_options opt;
  opt.endpoint = a.get("endpoint", "tcp://127.0.0.1:5555");
  opt.timeout_ms = static_cast<int>(a.integer("timeout-ms", timeout_ms));
  if (a.has("server-key") != a.has("client-cert")) {
    throw usage_error("--server-key and --client-cert go together (placer keygen makes both)");
  }
  if (a.has("server-key")) {
    opt.server_key = service::read_certificate(a.get("server-key")).public_key;
    opt.keys = service::read_certificate(a.get("client-cert"));
    if (opt.keys.secret_key.empty()) {
      throw usage_error("--client-cert needs this client's secret certificate (the *.key_secret file)");
    }
  }
  return opt;
}

std::string shared_data_dir(char const* argv0, std::string const& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (char const* e = std::getenv("PLACER_DATA_DIR"); e != nullptr && *e != 0) return e;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) exe = fs::absolute(argv0, ec);
  fs::path const beside_repo = exe.parent_path().parent_path().parent_path() / "shared" / "data";
  if (fs::is_directory(beside_repo, ec)) return beside_repo.string();
  return "../shared/data";
}

int verb_failed(char const* verb, char const* usage) {
  try {
    throw;
  } catch (usage_error const& e) {
    std::fprintf(stderr, "placer %s: %s\n%s", verb, e.what(), usage);
    return 2;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "placer %s: %s\n", verb, e.what());
    return 1;
  }
}

void run_parallel(std::size_t n, unsigned threads, std::function<void(std::size_t, unsigned)> const& work,
                  std::function<void(std::size_t, std::size_t)> const& report) {
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex io;
  auto worker = [&](unsigned w) {
    for (;;) {
      std::size_t const k = next++;
      if (k >= n) return;
      work(k, w);
      std::lock_guard<std::mutex> lock(io);
      report(k, ++done);
    }
  };
  std::vector<std::thread> pool;
  auto const m = static_cast<unsigned>(std::min<std::size_t>(std::max(threads, 1U), std::max<std::size_t>(n, 1)));
  for (unsigned t = 0; t < m; ++t) pool.emplace_back(worker, t);
  for (auto& t : pool) t.join();
}

void run_timed(timed_sim& r, sim::workload const& w, sim::sim_config const& cfg,
               std::function<sim::solve_fn()> const& solve) {
  auto const t0 = std::chrono::steady_clock::now();
  try {
    r.result = sim::run_simulation(w, cfg, solve());
    r.summary = sim::summarize(r.result);
    r.ok = true;
  } catch (std::exception const& e) {
    r.error = e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> split(std::string const& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace placer::tools
