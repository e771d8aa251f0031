#pragma once
// Shared command-line plumbing of the `placer` verbs: one option parser
// (--key value, --key=value, --flag) and one rule for finding the shared
// data directory.
#include <placer/service/client.hpp>

#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace placer::tools {

/// A malformed command line: the verb prints it with its usage, exit 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct cli_args {
  std::map<std::string, std::string> opts;
  std::set<std::string> flags;

  [[nodiscard]] std::string get(std::string const& k, std::string const& def = {}) const {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second;
  }
  [[nodiscard]] bool has(std::string const& k) const { return flags.count(k) != 0 || opts.count(k) != 0; }
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

/// The shared data directory: `explicit_dir` if given, else $PLACER_DATA_DIR,
/// else shared/data beside the repository the running binary was built in
/// (build/placer -> <repo>/../shared/data), else ../shared/data.
std::string shared_data_dir(char const* argv0, std::string const& explicit_dir = {});

}  // namespace placer::tools
