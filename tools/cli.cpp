// Option parsing and the data-directory rule shared by the verbs (cli.hpp).
#include "cli.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace placer::tools {

namespace fs = std::filesystem;

cli_args parse_cli(int argc, char** argv, int first, std::set<std::string> const& valued,
                   std::set<std::string> const& boolean, std::string const& verb) {
  cli_args a;
  for (int i = first; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw usage_error("unexpected argument '" + k + "'");
    k = k.substr(2);
    auto const eq = k.find('=');
    if (eq != std::string::npos) {
      a.opts[k.substr(0, eq)] = k.substr(eq + 1);
      k = k.substr(0, eq);
    } else if (valued.count(k) != 0) {
      if (i + 1 >= argc) throw usage_error("--" + k + " needs a value");
      a.opts[k] = argv[++i];
    } else {
      a.flags.insert(k);
    }
    if (valued.count(k) == 0 && boolean.count(k) == 0) throw usage_error("unknown option --" + k + " for '" + verb + "'");
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

}  // namespace placer::tools
