#pragma once
// Shared command-line plumbing of the `placer` verbs: one option parser
// (CLI11: --key value, --key=value, --flag; `serve` builds its own CLI11
// app with types, environment variables and a config file), checked
// numbers, and one rule for finding the shared data directory.
#include <placer/service/client.hpp>
#include <placer/sim/sim_metrics.hpp>
#include <placer/sim/simulator.hpp>

#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace placer::tools {

/// A malformed command line: the verb prints it with its usage, exit 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A verb's exit status for the exception being handled (call it inside a
/// catch (...)): a usage_error prints "placer VERB: why" and the usage
/// (2), any other std::exception "placer VERB: why" (1); anything else is
/// rethrown.
int verb_failed(char const* verb, char const* usage);

/// An option's value as a non-negative integer, or number; `def` when the
/// option is absent; a usage_error naming the option and the value when it
/// is not one (no bare std::stoi message).
long long integer_option(std::map<std::string, std::string> const& opts, std::string const& key, long long def);
double number_option(std::map<std::string, std::string> const& opts, std::string const& key, double def);

struct cli_args {
  std::map<std::string, std::string> opts;
  std::set<std::string> flags;

  [[nodiscard]] std::string get(std::string const& k, std::string const& def = {}) const {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second;
  }
  [[nodiscard]] bool has(std::string const& k) const { return flags.count(k) != 0 || opts.count(k) != 0; }
  [[nodiscard]] long long integer(std::string const& k, long long def) const { return integer_option(opts, k, def); }
  [[nodiscard]] double number(std::string const& k, double def) const { return number_option(opts, k, def); }
};

/// Parses argv[first..argc). Options in `valued` take a value; those in
/// `boolean` do not; anything else is a usage_error naming `verb`.
cli_args parse_cli(int argc, char** argv, int first, std::set<std::string> const& valued,
                   std::set<std::string> const& boolean, std::string const& verb);

/// A client's connection from the command line: --endpoint (default
/// tcp://127.0.0.1:5555), --timeout-ms (default `timeout_ms`), and for a
/// CURVE server --server-key FILE (its public certificate) with
/// --client-cert FILE (this client's secret certificate), both or neither.
client_options client_connection(cli_args const& a, int timeout_ms);

/// Runs work(k, worker) once for every k in [0, n) on min(threads, n)
/// threads (at least one; `worker` in 0 .. threads - 1, for what a thread
/// keeps, such as its solver), then report(k, done) under one lock as each
/// finishes (`done`: how many have). Returns when all have run. The
/// experiments' --jobs.
void run_parallel(std::size_t n, unsigned threads, std::function<void(std::size_t, unsigned)> const& work,
                  std::function<void(std::size_t, std::size_t)> const& report);

/// One simulation of an experiment: its result and summary, or the error
/// it threw, and its wall time.
struct timed_sim {
  bool ok = false;
  std::string error;
  sim::sim_result result;
  sim::sim_summary summary;
  double seconds = 0;
};

/// Runs `w` under `cfg` with the solve function `solve` makes, summarizes
/// it into r, and times it; an exception (the solve function's too) ends
/// up in r.error with r.ok false.
void run_timed(timed_sim& r, sim::workload const& w, sim::sim_config const& cfg,
               std::function<sim::solve_fn()> const& solve);

/// The non-empty parts of a list such as "a,b, c" (spaces dropped).
std::vector<std::string> split(std::string const& s, char sep = ',');

/// The shared data directory: `explicit_dir` if given, else $PLACER_DATA_DIR,
/// else shared/data beside the repository the running binary was built in
/// (build/placer -> <repo>/../shared/data), else ../shared/data.
std::string shared_data_dir(char const* argv0, std::string const& explicit_dir = {});

}  // namespace placer::tools
