// The Slurm bridge's translation (bridge.hpp): Slurm's JSON to a Placer
// round, and Placer's answer to scontrol commands.
#include <placer/slurm/bridge.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <regex>
#include <set>

namespace placer::slurm {

namespace {

using json = nlohmann::json;

/// AdminComment: one line, bounded.
constexpr std::size_t max_comment = 240;

json parse(std::string const& text, char const* what) {
  try {
    return json::parse(text);
  } catch (json::exception const& e) {
    throw slurm_error(std::string(what) + ": not JSON: " + e.what());
  }
}

// Slurm 23.02 and later write some fields differently from 22.05: numbers
// as {"set": true, "infinite": false, "number": N}, states and some lists
// as arrays of strings. Both forms read the same.

/// A text field; an array of strings reads as its elements joined by ','.
std::string str(json const& o, char const* key) {
  auto it = o.find(key);
  if (it == o.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  std::string out;
  if (it->is_array()) {
    for (auto const& e : *it) {
      if (e.is_string()) out += (out.empty() ? "" : ",") + e.get<std::string>();
    }
  }
  return out;
}

/// A number field, or `def` where it is absent, not a number, or unset or
/// infinite in the newer form.
std::int64_t num(json const& o, char const* key, std::int64_t def = 0) {
  auto it = o.find(key);
  if (it == o.end()) return def;
  if (it->is_number()) return it->get<std::int64_t>();
  if (it->is_object() && it->value("set", false) && !it->value("infinite", false)) {
    auto const n = it->find("number");
    if (n != it->end() && n->is_number()) return n->get<std::int64_t>();
  }
  return def;
}

/// CPUs in milli-CPU, at least 0; past Placer's max_resource as just past
/// it, not as a product that wrapped.
std::int64_t milli(std::int64_t cpus) {
  return cpus > max_resource / 1000 ? max_resource + 1 : std::max<std::int64_t>(0, cpus) * 1000;
}

/// A job's state: "PENDING", or the first of ["PENDING", flags...].
std::string state_of(json const& j) {
  std::string const s = str(j, "job_state");
  return s.substr(0, s.find(','));
}

std::vector<std::string> split(std::string const& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool starts_with(std::string const& s, std::string const& p) { return s.compare(0, p.size(), p) == 0; }

/// A non-negative decimal number, or slurm_error naming the text.
std::int64_t number(std::string const& s) {
  if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    throw slurm_error("'" + s + "' is not a number");
  }
  return std::stoll(s);
}

/// A gres entry "gpu[:type]:count[(...)]" (in a job's tres_per_node after
/// "gres:", or "gres/" from Slurm 23.11; a TRES "gres/gpu[:type]=count" in
/// 24.11's tres_per_task): type and count; false if not a GPU.
bool gpu_gres(std::string entry, std::string& type, std::int64_t& count) {
  if (starts_with(entry, "gres/")) std::replace(entry.begin(), entry.end(), '=', ':');
  if (starts_with(entry, "gres:") || starts_with(entry, "gres/")) entry = entry.substr(5);
  if (!starts_with(entry, "gpu")) return false;
  auto const paren = entry.find('(');
  std::string const head = entry.substr(0, paren);
  auto parts = split(head, ':');
  if (parts.empty() || parts[0] != "gpu") return false;
  type.clear();
  count = 1;
  if (parts.size() == 2) {
    count = number(parts[1]);
  } else if (parts.size() >= 3) {
    type = parts[1];
    count = number(parts[2]);
  }
  return true;
}

/// "IDX:0-3,5" inside gres_used: the GPU indices in use.
std::vector<std::int32_t> used_indices(std::string const& gres_used) {
  std::vector<std::int32_t> idx;
  auto const at = gres_used.find("IDX:");
  if (at == std::string::npos) return idx;
  std::string list = gres_used.substr(at + 4);
  list = list.substr(0, list.find(')'));
  if (list == "N/A") return idx;
  for (auto const& part : split(list, ',')) {
    auto const dash = part.find('-');
    auto const a = static_cast<std::int32_t>(number(part.substr(0, dash)));
    auto const b = dash == std::string::npos ? a : static_cast<std::int32_t>(number(part.substr(dash + 1)));
    for (std::int32_t k = a; k <= b; ++k) idx.push_back(k);
  }
  return idx;
}

/// A node's name as a label key (a job's -x is a NotIn on it).
constexpr char const* name_key = "slurm.node/name";

/// The label of a node with nothing allocated: what a job that takes its
/// nodes whole (--exclusive) needs.
constexpr char const* idle_label = "slurm.node/idle=true";

/// Whether a job takes its nodes whole: --exclusive, or =user, =mcs,
/// =topo (taken as whole too: Placer does not know whose jobs they are),
/// as 22.05 writes it ("shared": "none") or later releases ("exclusive").
bool takes_nodes_whole(json const& j) {
  for (auto const& f : split(str(j, "shared"), ',')) {
    if (f == "none" || f == "user" || f == "mcs" || f == "topo") return true;
  }
  for (auto const& f : split(str(j, "exclusive"), ',')) {
    if (f == "true" || f == "user" || f == "mcs" || f == "topo") return true;
  }
  return false;
}

/// a / b rounded up, for a >= 0 and b > 0, with no sum that could wrap.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b > 0 ? 1 : 0); }

/// A figure per GPU (`field` "cpus_per_tres" or "memory_per_tres":
/// "gres:gpu:16"), at most 2^40; 0 where it has none, and `odd` set where
/// it has one it cannot read.
std::int64_t per_gpu(json const& j, char const* field, bool& odd) {
  std::int64_t most = 0;
  for (auto const& g : split(str(j, field), ',')) {
    std::string type;
    std::int64_t n = 0;
    try {
      if (gpu_gres(g, type, n)) most = std::max(most, std::min(n, max_resource));
    } catch (slurm_error const&) {
      odd = true;
    }
  }
  return most;
}

/// The most tasks of one job array a round takes (bridge.hpp, build_round).
constexpr std::int64_t max_array_tasks = 4096;

/// The job or array task a squeue record is: "A_T" for a task in a record
/// of its own (split off, or the last of its array's), else its job id
/// (for an array's record of several pending tasks, "A": the whole array).
job_ref ref_of(json const& j) {
  std::int64_t const array = num(j, "array_job_id", 0), task = num(j, "array_task_id", -1);
  if (array > 0 && task >= 0) return {array, task};
  return {num(j, "job_id", -1)};
}

/// An array record's task string ("0-15:4,17%2": ranges with steps, the
/// throttle after '%'): its first `limit` tasks in order, and how many it
/// holds in `count`. Throws slurm_error for a string it cannot read.
std::vector<std::int64_t> array_tasks(std::string const& s, std::int64_t limit, std::int64_t& count) {
  std::vector<std::int64_t> out;
  count = 0;
  for (auto const& part : split(s.substr(0, s.find('%')), ',')) {
    auto const colon = part.find(':');
    std::string const range = part.substr(0, colon);
    std::int64_t const step = colon == std::string::npos ? 1 : number(part.substr(colon + 1));
    auto const dash = range.find('-');
    std::int64_t const a = number(range.substr(0, dash));
    std::int64_t const b = dash == std::string::npos ? a : number(range.substr(dash + 1));
    if (step < 1 || b < a) throw slurm_error("array tasks '" + s + "': '" + part + "' is not a range");
    for (std::int64_t t = a; t <= b && static_cast<std::int64_t>(out.size()) < limit; t += step) out.push_back(t);
    count += (b - a) / step + 1;
  }
  if (count == 0) throw slurm_error("array tasks '" + s + "': none");
  return out;
}

/// How many copies of a job asking each of `nodes` nodes for `gpus` whole
/// GPUs, `cpu_milli` and `memory_mib` the healthy nodes could hold at once,
/// counting nothing else, at most `cap`: a bound on the tasks of one array
/// that a round can place.
std::int64_t fit_bound(std::vector<node> const& ns, std::int64_t nodes, std::int64_t gpus, std::int64_t cpu_milli,
                       std::int64_t memory_mib, std::int64_t cap) {
  std::int64_t slots = 0;
  for (auto const& n : ns) {
    if (!n.healthy) continue;
    std::int64_t fit = cap * nodes;
    if (gpus > 0) {
      auto const whole = std::count(n.gpu_free_milli.begin(), n.gpu_free_milli.end(), milli_per_gpu);
      fit = std::min<std::int64_t>(fit, whole / gpus);
    }
    if (cpu_milli > 0) fit = std::min(fit, n.cpu_milli_free / cpu_milli);
    if (memory_mib > 0) fit = std::min(fit, n.memory_mib_free / memory_mib);
    slots = std::min(slots + fit, cap * nodes);
  }
  return slots / nodes;
}

/// Nice counts as one point of priority each, as in Slurm, within +-1,000,000.
constexpr std::int64_t nice_limit = 1000000;

/// A job's nice. 22.05's squeue --json writes a negative nice as its 32-bit
/// two's complement (--nice=-50 as 4294967246, live), and no nice as null.
std::int64_t nice_of(json const& j) {
  std::int64_t n = num(j, "nice", 0);
  if (n > std::numeric_limits<std::int32_t>::max() && n <= std::numeric_limits<std::uint32_t>::max()) {
    n -= std::int64_t{1} << 32;
  }
  return std::clamp<std::int64_t>(n, -nice_limit, nice_limit);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(std::string const& s) {
  auto const a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

/// A decimal number (a sign and a fraction allowed), or false.
bool decimal(std::string const& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

/// A TRES amount, "4G" as 4096 (memory's unit is MiB; K, M, G, T, P are
/// powers of 1024 against it), or false.
bool tres_amount(std::string s, double& out) {
  double scale = 1;
  if (!s.empty() && std::isalpha(static_cast<unsigned char>(s.back())) != 0) {
    std::string const units = "KMGTP";
    auto const at = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(s.back()))));
    if (at == std::string::npos) return false;
    scale = std::pow(1024.0, static_cast<double>(at) - 1);
    s.pop_back();
  }
  if (!decimal(s, out)) return false;
  out *= scale;
  return true;
}

/// "cpu=1,mem=4G,gres/gpu=2": amounts by lower-case name; unreadable entries left out.
std::map<std::string, double> tres_list(std::string const& s) {
  std::map<std::string, double> out;
  for (auto const& e : split(s, ',')) {
    auto const eq = e.find('=');
    double v = 0;
    if (eq != std::string::npos && tres_amount(e.substr(eq + 1), v)) out[lower(e.substr(0, eq))] = v;
  }
  return out;
}

/// The memory in a TRES string ("cpu=2,mem=8G,node=1"), in MiB; 0 when it
/// has none it can read; past Placer's bound as just past it.
std::int64_t tres_memory_mib(std::string const& tres) {
  auto const all = tres_list(tres);
  auto const it = all.find("mem");
  if (it == all.end() || !(it->second > 0)) return 0;
  return it->second > static_cast<double>(max_resource) ? max_resource + 1 : static_cast<std::int64_t>(std::ceil(it->second));
}

/// Slurm's time in seconds, or -1 (UNLIMITED, INFINITE, anything else):
/// "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S" (its time_str2mins forms).
std::int64_t slurm_seconds(std::string const& s) {
  auto const dash = s.find('-');
  std::string const rest = dash == std::string::npos ? s : s.substr(dash + 1);
  std::vector<std::int64_t> v;
  for (auto const& p : split(rest, ':')) {
    if (p.size() > 9 || !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) return -1;
    v.push_back(std::stoll(p));
  }
  if (v.empty() || v.size() > 3 || rest.back() == ':' || rest.front() == ':') return -1;
  if (dash == std::string::npos) {
    if (v.size() == 1) return v[0] * 60;
    if (v.size() == 2) return v[0] * 60 + v[1];
    return v[0] * 3600 + v[1] * 60 + v[2];
  }
  std::string const d = s.substr(0, dash);
  if (d.empty() || d.size() > 6 || !std::all_of(d.begin(), d.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return -1;
  }
  v.resize(3, 0);
  return std::stoll(d) * 86400 + v[0] * 3600 + v[1] * 60 + v[2];
}

/// Slurm's ranking of a job as a Placer priority (docs/slurm.md,
/// "Priorities"). Multifactor: the sum Slurm's priority/multifactor makes
/// (set_priority_factors, _get_priority_internal) of every factor it reads
/// but the age, less nice, in Slurm's points; a band per partition
/// PriorityTier above it, each band wider than every priority and age of
/// the one below can reach, so aging that crosses priorities never crosses
/// a tier; divided down (`scale_`) only where the bands would not fit in
/// 32 bits. Otherwise: -nice.
class ranker {
 public:
  ranker(bridge_options const& opt, std::int64_t cluster_nodes, std::int64_t cluster_cpus)
      : p_(opt.priorities), nodes_(cluster_nodes), cpus_(cluster_cpus) {
    std::int64_t weight = opt.age_weight >= 0 ? opt.age_weight
                          : p_.multifactor && p_.slurmdbd ? static_cast<std::int64_t>(p_.weight_age)
                                                          : 0;
    weight = std::clamp<std::int64_t>(weight, 0, max_slurm);
    age_.max_age_s = opt.age_max_s > 0 ? opt.age_max_s : p_.max_age_s > 0 ? p_.max_age_s : age_.max_age_s;
    if (!p_.multifactor) {
      age_.weight = static_cast<std::int32_t>(std::min<std::int64_t>(weight, std::numeric_limits<std::int32_t>::max()));
      return;
    }
    for (auto const& [name, part] : p_.partitions) {
      max_part_ = std::max(max_part_, static_cast<double>(part.job_factor));
      tiers_.push_back(part.tier);
    }
    std::sort(tiers_.begin(), tiers_.end());
    tiers_.erase(std::unique(tiers_.begin(), tiers_.end()), tiers_.end());
    for (auto const& [name, q] : p_.qos) max_qos_ = std::max(max_qos_, static_cast<double>(q));
    // The most the non-age factors can add, in Slurm's points (its own cap 2^32 - 1).
    double hi = p_.weight_job_size + p_.weight_partition * (p_.no_normal_part ? max_part_ : 1.0) +
                p_.weight_qos * (p_.no_normal_qos ? max_qos_ : 1.0) + (p_.slurmdbd ? p_.weight_fairshare : 0.0);
    for (auto const& [name, w] : p_.weight_tres) hi += p_.no_normal_tres ? static_cast<double>(max_slurm) : w;
    hi_ = static_cast<std::int64_t>(std::min(std::max(hi, 0.0), static_cast<double>(max_slurm)));
    // One tier's values, nice and age included; the tiers side by side in
    // 2e9 of int32's range (below zero only -nice_limit).
    std::int64_t const span = hi_ + weight + 2 * nice_limit + 1;
    auto const tiers = static_cast<std::int64_t>(std::max<std::size_t>(1, tiers_.size()));
    scale_ = std::max<std::int64_t>(1, (tiers * span + room - 1) / room);
    band_ = (span + scale_ - 1) / scale_;
    age_.weight = static_cast<std::int32_t>(weight == 0 ? 0 : std::max<std::int64_t>(1, weight / scale_));
    age_.cross_priority = true;  // Slurm adds the age to the sum; the bands keep the tiers apart
  }

  /// The round's aging.
  [[nodiscard]] aging age() const { return age_; }

  /// A pending job's priority: the best of its partitions' (Slurm ranks a
  /// job in each of them).
  [[nodiscard]] std::int32_t priority(json const& j) const {
    if (!p_.multifactor) return static_cast<std::int32_t>(-nice_of(j));
    auto parts = split(str(j, "partition"), ',');
    if (parts.empty()) parts.emplace_back();
    std::int64_t best = std::numeric_limits<std::int64_t>::min();
    for (auto const& name : parts) {
      auto const it = p_.partitions.find(name);
      auto const* part = it == p_.partitions.end() ? nullptr : &it->second;
      auto const tier = part == nullptr ? 0
                                        : std::lower_bound(tiers_.begin(), tiers_.end(), part->tier) - tiers_.begin();
      auto const r = static_cast<std::int64_t>(std::floor(rank(j, name, part)));
      auto const within = std::clamp<std::int64_t>(r, -nice_limit, hi_ + nice_limit);
      // (Floor division: -nice below zero stays in order.)
      auto const scaled = within >= 0 ? within / scale_ : -((-within + scale_ - 1) / scale_);
      best = std::max<std::int64_t>(best, static_cast<std::int64_t>(tier) * band_ + scaled);
    }
    return static_cast<std::int32_t>(std::clamp<std::int64_t>(best, std::numeric_limits<std::int32_t>::min(),
                                                               std::numeric_limits<std::int32_t>::max()));
  }

  /// A running job's: its priority with the age it would have now (as
  /// the round's aging gives a pending job), so that a later job Slurm
  /// ranks the same never evicts it for having waited.
  [[nodiscard]] std::int32_t running_priority(json const& j, std::int64_t now) const {
    std::int64_t pr = priority(j);
    if (age_.weight > 0) pr += age_.points(now, num(j, "submit_time", now));
    return static_cast<std::int32_t>(std::min<std::int64_t>(pr, std::numeric_limits<std::int32_t>::max()));
  }

 private:
  static constexpr std::int64_t max_slurm = 4294967295;  ///< 2^32 - 1: Slurm's priorities are 32-bit unsigned
  static constexpr std::int64_t room = 2000000000;

  /// Slurm's multifactor priority of job j in partition `name`, without the age.
  [[nodiscard]] double rank(json const& j, std::string const& name, slurm_priorities::partition const* part) const {
    double r = 0;
    if (p_.weight_job_size > 0 && nodes_ > 0 && cpus_ > 0) {
      auto const n = static_cast<double>(nodes_), cpus = static_cast<double>(cpus_);
      double const min_nodes = static_cast<double>(std::max<std::int64_t>(1, num(j, "node_count", 1)));
      double const cpu = static_cast<double>(std::max<std::int64_t>(0, num(j, "cpus", 0)));
      double js = 0;
      if (p_.size_relative) {
        js = std::max(min_nodes * cpus / n, cpu);
        std::int64_t limit = num(j, "time_limit", 0);  // minutes
        if (limit <= 0) limit = part != nullptr && part->max_time_min > 0 ? part->max_time_min : max_slurm;
        js = js / static_cast<double>(limit) / cpus;
        if (p_.favor_small) js = 1.0 - js;
      } else if (p_.favor_small) {
        js = std::max(0.0, (n - min_nodes) / n);
        if (cpu > 0) js = (js + (cpus - cpu) / cpus) / 2;
      } else {
        js = min_nodes / n;
        if (cpu > 0) js = (js + cpu / cpus) / 2;
      }
      r += std::clamp(js, 0.0, 1.0) * p_.weight_job_size;
    }
    if (part != nullptr && part->job_factor > 0 && p_.weight_partition > 0) {
      auto const f = static_cast<double>(part->job_factor);
      r += (p_.no_normal_part ? f : f / max_part_) * p_.weight_partition;
    }
    if (p_.weight_qos > 0 && max_qos_ > 0) {
      auto const q = p_.qos.find(str(j, "qos"));
      if (q != p_.qos.end() && q->second > 0) {
        auto const f = static_cast<double>(q->second);
        r += (p_.no_normal_qos ? f : f / max_qos_) * p_.weight_qos;
      }
    }
    if (p_.slurmdbd && p_.weight_fairshare > 0) {
      std::string const who = str(j, "account") + "|" + str(j, "user_name") + "|";
      auto f = p_.fairshare.find(who + name);
      if (f == p_.fairshare.end()) f = p_.fairshare.find(who);
      if (f != p_.fairshare.end()) r += f->second * p_.weight_fairshare;
    }
    if (!p_.weight_tres.empty()) {
      std::string alloc = str(j, "tres_alloc_str");
      auto const tres = tres_list(alloc.empty() ? str(j, "tres_req_str") : alloc);
      for (auto const& [tname, w] : p_.weight_tres) {
        auto const v = tres.find(tname);
        if (v == tres.end() || v->second <= 0) continue;
        if (p_.no_normal_tres) {
          r += v->second * w;
        } else if (part != nullptr) {
          auto const total = part->tres.find(tname);
          if (total != part->tres.end() && total->second > 0) r += v->second / total->second * w;
        }
      }
    }
    return r - static_cast<double>(nice_of(j));
  }

  slurm_priorities const& p_;
  std::int64_t nodes_ = 0, cpus_ = 0;
  std::vector<std::int64_t> tiers_;
  double max_part_ = 1, max_qos_ = 0;
  std::int64_t hi_ = 0, scale_ = 1, band_ = 0;
  aging age_;
};

/// Node names in a Slurm host list of plain names ("n3,n4"); ranges
/// ("n[3-4]") expanded for the simple one-bracket form.
std::vector<std::string> host_list(std::string const& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  std::vector<std::string> parts;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  for (auto const& p : parts) {
    auto const open = p.find('[');
    if (open == std::string::npos) {
      out.push_back(p);
      continue;
    }
    std::string const prefix = p.substr(0, open);
    std::string const body = p.substr(open + 1, p.find(']') - open - 1);
    for (auto const& r : split(body, ',')) {
      auto const dash = r.find('-');
      auto const a = number(r.substr(0, dash));
      auto const b = dash == std::string::npos ? a : number(r.substr(dash + 1));
      if (b - a > 100000) throw slurm_error("host range '" + r + "' is too long");
      for (auto k = a; k <= b; ++k) out.push_back(prefix + std::to_string(k));
    }
  }
  return out;
}

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (s.size() > max_comment) s = s.substr(0, max_comment - 3) + "...";
  return s;
}

bool plain_feature(std::string const& f) {
  return !f.empty() && std::all_of(f.begin(), f.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

std::string feature_label(std::string const& feature) { return "slurm.feature/" + feature + "=true"; }

std::string partition_label(std::string const& partition) { return "slurm.partition/" + partition + "=true"; }

namespace {

/// "Key=Value" words of a line (scontrol's -o form), the value up to the next space.
std::map<std::string, std::string> words_of(std::string const& line) {
  std::map<std::string, std::string> out;
  for (auto const& w : split(line, ' ')) {
    auto const eq = w.find('=');
    if (eq != std::string::npos && eq > 0) out.emplace(w.substr(0, eq), w.substr(eq + 1));
  }
  return out;
}

/// A weight: a non-negative number, else 0 (noted).
double weight_of(std::map<std::string, std::string> const& conf, char const* key, std::vector<std::string>& notes) {
  auto const it = conf.find(key);
  if (it == conf.end()) return 0;
  double v = 0;
  if (!decimal(it->second, v) || v < 0) {
    notes.push_back(std::string(key) + " '" + it->second + "' is not a number: read as 0");
    return 0;
  }
  return v;
}

}  // namespace

slurm_priorities parse_priorities(std::string const& config, std::string const& partitions, std::string const& qos,
                                  std::string const& sshare) {
  slurm_priorities p;
  // `scontrol show config`: "Name = value" a line.
  std::map<std::string, std::string> conf;
  for (auto const& line : split(config, '\n')) {
    auto const eq = line.find(" = ");
    if (eq != std::string::npos) conf[trim(line.substr(0, eq))] = trim(line.substr(eq + 3));
  }
  auto const get = [&](char const* key) {
    auto const it = conf.find(key);
    return it == conf.end() ? std::string() : it->second;
  };
  std::string const type = get("PriorityType");
  p.multifactor = type == "priority/multifactor";
  if (!p.multifactor) {
    p.notes.push_back(type.empty() ? "no PriorityType in Slurm's configuration: priority -nice"
                                   : "PriorityType=" + type + ": priority -nice, in submission order");
    return p;
  }
  p.slurmdbd = get("AccountingStorageType") == "accounting_storage/slurmdbd";
  p.weight_age = weight_of(conf, "PriorityWeightAge", p.notes);
  p.weight_fairshare = weight_of(conf, "PriorityWeightFairShare", p.notes);
  p.weight_job_size = weight_of(conf, "PriorityWeightJobSize", p.notes);
  p.weight_partition = weight_of(conf, "PriorityWeightPartition", p.notes);
  p.weight_qos = weight_of(conf, "PriorityWeightQOS", p.notes);
  p.weight_assoc = weight_of(conf, "PriorityWeightAssoc", p.notes);
  if (std::string const tres = get("PriorityWeightTRES"); !tres.empty() && tres != "(null)") {
    for (auto const& [name, w] : tres_list(tres)) p.weight_tres[name] = w;
  }
  if (auto const age = slurm_seconds(get("PriorityMaxAge")); age > 0) p.max_age_s = age;
  if (auto const period = slurm_seconds(get("PriorityCalcPeriod")); period > 0) p.calc_period_s = period;
  p.favor_small = lower(get("PriorityFavorSmall")) == "yes";
  for (auto const& f : split(get("PriorityFlags"), ',')) {
    p.size_relative = p.size_relative || f == "SMALL_RELATIVE_TO_TIME";
    p.no_normal_part = p.no_normal_part || f == "NO_NORMAL_PART" || f == "NO_NORMAL_ALL";
    p.no_normal_qos = p.no_normal_qos || f == "NO_NORMAL_QOS" || f == "NO_NORMAL_ALL";
    p.no_normal_tres = p.no_normal_tres || f == "NO_NORMAL_TRES" || f == "NO_NORMAL_ALL";
  }
  if (!p.slurmdbd && (p.weight_age > 0 || p.weight_fairshare > 0)) {
    p.notes.push_back("no slurmdbd: PriorityWeightAge and PriorityWeightFairShare left out, as Slurm leaves them");
  }
  if (p.weight_assoc > 0) p.notes.push_back("PriorityWeightAssoc is not read: association priorities left out");
  if (std::string const site = get("PrioritySiteFactorPlugin"); !site.empty() && site != "(null)") {
    p.notes.push_back("PrioritySiteFactorPlugin " + site + " is not read: site factors left out");
  }
  // `scontrol -a -o show partition`: a partition a line.
  for (auto const& line : split(partitions, '\n')) {
    auto const w = words_of(line);
    auto const name = w.find("PartitionName");
    if (name == w.end() || name->second.empty()) continue;
    slurm_priorities::partition part;
    double v = 0;
    if (auto it = w.find("PriorityJobFactor"); it != w.end() && decimal(it->second, v) && v >= 0) {
      part.job_factor = static_cast<std::int64_t>(v);
    }
    if (auto it = w.find("PriorityTier"); it != w.end() && decimal(it->second, v) && v >= 0) {
      part.tier = static_cast<std::int64_t>(v);
    }
    if (auto it = w.find("MaxTime"); it != w.end()) {
      auto const secs = slurm_seconds(it->second);
      part.max_time_min = secs > 0 ? secs / 60 : -1;
    }
    if (auto it = w.find("TRES"); it != w.end()) part.tres = tres_list(it->second);
    p.partitions[name->second] = std::move(part);
  }
  // `scontrol show assoc_mgr flags=qos`: "QOS=name(id)", then its "Priority=N" (one line with -o).
  std::string current;
  for (auto const& line : split(qos, '\n')) {
    for (auto const& word : split(line, ' ')) {
      if (starts_with(word, "QOS=")) {
        current = word.substr(4, word.rfind('(') == std::string::npos ? std::string::npos : word.rfind('(') - 4);
      } else if (starts_with(word, "Priority=") && !current.empty()) {
        double v = 0;
        if (decimal(word.substr(9), v) && v >= 0) p.qos.emplace(current, static_cast<std::int64_t>(v));
        current.clear();
      }
    }
  }
  // `sshare -a -n -P -o Account,User,Partition,FairShare`: users' rows.
  for (auto const& line : split(sshare, '\n')) {
    std::vector<std::string> f;
    std::size_t at = 0;
    for (;;) {
      auto const bar = line.find('|', at);
      f.push_back(trim(line.substr(at, bar == std::string::npos ? std::string::npos : bar - at)));
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
    double v = 0;
    if (f.size() < 4 || f[1].empty() || !decimal(f[3], v)) continue;
    p.fairshare[f[0] + "|" + f[1] + "|" + f[2]] = std::clamp(v, 0.0, 1.0);
  }
  return p;
}

slurm_priorities read_priorities(command_runner const& run) {
  std::string config;
  try {
    config = run({"scontrol", "show", "config"});
  } catch (std::exception const& e) {
    slurm_priorities p;
    p.unread = true;
    p.notes.push_back(std::string("scontrol show config: ") + e.what() + ": priority -nice");
    return p;
  }
  auto p = parse_priorities(config, {});
  if (!p.multifactor) return p;
  std::vector<std::string> notes;
  auto const output = [&](std::vector<std::string> const& argv, char const* what) {
    try {
      return run(argv);
    } catch (std::exception const& e) {
      notes.push_back(std::string(what) + ": " + e.what());
      return std::string();
    }
  };
  std::string const parts =
      output({"scontrol", "-a", "-o", "show", "partition"}, "partitions not read (no partition factor, one tier)");
  std::string qos, shares;
  if (p.slurmdbd && p.weight_qos > 0) {
    qos = output({"scontrol", "-o", "show", "assoc_mgr", "flags=qos"}, "QOS priorities not read (QOS factor 0)");
  } else if (p.weight_qos > 0) {
    notes.emplace_back("no slurmdbd: no QOS priorities (QOS factor 0, as in Slurm)");
  }
  if (p.slurmdbd && p.weight_fairshare > 0) {
    shares = output({"sshare", "-a", "-n", "-P", "-o", "Account,User,Partition,FairShare"},
                    "fair share not read (factor 0)");
  }
  p = parse_priorities(config, parts, qos, shares);
  p.notes.insert(p.notes.end(), notes.begin(), notes.end());
  if (p.partitions.empty() && notes.empty()) p.notes.emplace_back("no partition read: no partition factor, one tier");
  return p;
}

snapshot build_round(std::string const& squeue_json, std::string const& sinfo_json, bridge_options const& opt) {
  json const info = parse(sinfo_json, "sinfo --json");
  json const queue = parse(squeue_json, "squeue --json");
  if (!info.contains("nodes") || !info["nodes"].is_array()) throw slurm_error("sinfo --json: no \"nodes\" list");
  if (!queue.contains("jobs") || !queue["jobs"].is_array()) throw slurm_error("squeue --json: no \"jobs\" list");
  snapshot snap;
  auto& c = snap.round.state;
  c.topo.level_names = {"cluster", "rack"};
  c.topo.domains.push_back({"cluster", 0, -1});
  std::map<std::string, std::int32_t> rack_domain;
  std::map<std::string, std::size_t> node_at;
  for (auto const& n : info["nodes"]) {
    if (!n.is_object()) throw slurm_error("sinfo --json: a node is not an object");
    std::string const name = str(n, "name");
    if (name.empty()) throw slurm_error("sinfo --json: a node has no name");
    auto const parts = n.value("partitions", json::array());
    if (!opt.partition.empty() && std::find(parts.begin(), parts.end(), opt.partition) == parts.end()) continue;
    // A node is listed once per partition; each of its partitions is a label.
    auto label_partitions = [&](node& nd) {
      for (auto const& part : parts) {
        if (!part.is_string()) continue;
        std::string const label = partition_label(part.get<std::string>());
        if (std::find(nd.labels.begin(), nd.labels.end(), label) == nd.labels.end()) nd.labels.push_back(label);
      }
    };
    if (auto const seen = node_at.find(name); seen != node_at.end()) {
      label_partitions(c.nodes[seen->second]);
      continue;
    }
    node nd;
    nd.name = name;
    std::int64_t gpus = 0;
    try {
      for (auto const& g : split(str(n, "gres"), ',')) {
        std::string type;
        std::int64_t count = 0;
        if (gpu_gres(g, type, count)) {
          gpus += count;
          if (nd.gpu_model.empty()) nd.gpu_model = type;
        }
      }
      if (gpus > 64) throw slurm_error(std::to_string(gpus) + " GPUs (at most 64)");
      nd.gpu_free_milli.assign(static_cast<std::size_t>(gpus), milli_per_gpu);
      for (auto k : used_indices(str(n, "gres_used"))) {
        if (k >= 0 && k < gpus) nd.gpu_free_milli[static_cast<std::size_t>(k)] = 0;
      }
    } catch (slurm_error const& e) {  // a node it cannot read is left out of the round
      snap.warnings.push_back("node " + name + ": " + e.what() + " (gres '" + str(n, "gres") + "', gres_used '" +
                              str(n, "gres_used") + "'): left out");
      continue;
    }
    // At most Placer's 2^40 mCPU and MiB (a round with more on a node is
    // refused whole), whatever a node says it has.
    nd.cpu_milli_capacity = std::min(milli(num(n, "cpus")), max_resource);
    nd.cpu_milli_free = std::max<std::int64_t>(0, nd.cpu_milli_capacity - milli(num(n, "alloc_cpus")));
    nd.memory_mib_capacity = std::min(num(n, "real_memory"), max_resource);
    nd.memory_mib_free = std::max<std::int64_t>(0, nd.memory_mib_capacity - num(n, "alloc_memory"));
    // "idle" with state_flags ["DRAIN"] (22.05), or ["IDLE", "DRAIN"] (newer).
    auto words = split(str(n, "state"), ',');
    for (auto const& f : split(str(n, "state_flags"), ',')) words.push_back(f);
    std::string state = words.empty() ? std::string() : words.front();
    std::transform(state.begin(), state.end(), state.begin(), [](unsigned char ch) { return std::tolower(ch); });
    bool healthy = state == "idle" || state == "mixed" || state == "allocated";
    for (std::size_t k = 1; k < words.size(); ++k) {
      auto const& f = words[k];
      if (f == "DRAIN" || f == "DRAINING" || f == "DRAINED" || f == "FAIL" || f == "NOT_RESPONDING" ||
          f == "MAINTENANCE" || f == "REBOOT_REQUESTED" || f == "RESERVED") {  // (a reservation's jobs only)
        healthy = false;
      }
    }
    nd.healthy = healthy;
    if (nd.cpu_milli_free == nd.cpu_milli_capacity && nd.memory_mib_free == nd.memory_mib_capacity &&
        std::all_of(nd.gpu_free_milli.begin(), nd.gpu_free_milli.end(), [](auto f) { return f == milli_per_gpu; })) {
      nd.labels.emplace_back(idle_label);
    }
    nd.labels.push_back(std::string(name_key) + "=" + name);
    std::string features = str(n, "active_features");
    if (features.empty()) features = str(n, "features");
    for (auto const& f : split(features, ',')) {
      nd.labels.push_back(feature_label(f));
      if (!opt.rack_prefix.empty() && starts_with(f, opt.rack_prefix) && nd.domain < 0) {
        auto [it, fresh] = rack_domain.emplace(f, static_cast<std::int32_t>(c.topo.domains.size()));
        if (fresh) c.topo.domains.push_back({f, 1, 0});
        nd.domain = it->second;
      }
    }
    label_partitions(nd);
    node_at[name] = c.nodes.size();
    c.nodes.push_back(std::move(nd));
  }
  if (rack_domain.empty()) c.topo = {};
  // Slurm's job-size factor is relative to the whole cluster, every partition's nodes.
  std::set<std::string> all_nodes;
  std::int64_t all_cpus = 0;
  for (auto const& n : info["nodes"]) {
    if (all_nodes.insert(str(n, "name")).second) all_cpus += std::max<std::int64_t>(0, num(n, "cpus"));
  }
  ranker const rank(opt, static_cast<std::int64_t>(all_nodes.size()), all_cpus);

  auto const now = static_cast<std::int64_t>(std::time(nullptr));
  snap.round.now = now;
  snap.round.pol.stacking = opt.stacking;
  snap.round.pol.order = opt.order;
  snap.round.pol.queue.preemption = opt.preempt;
  snap.round.pol.age = rank.age();
  // Slurm reports no checkpoints, and a requeue restarts a job from its
  // start, as Slurm's own PreemptMode=REQUEUE does: any victim, by its
  // lost work (run time x GPUs).
  snap.round.pol.queue.preempt_max_lost_s = -1;
  // --preempt: one of the bridge's running jobs as running work, its
  // replicas on the nodes and GPU indices Slurm gave it (gres_detail, one
  // entry per node of its host list). Its CPU and memory per node are at
  // most what the node has in use, as a round requires. A job it cannot
  // read stays out of the round: its usage is in the nodes all the same,
  // and it is never evicted.
  auto add_running = [&](json const& j, job_ref const& id) {
    auto const why_not = [&](std::string const& why) {
      snap.warnings.push_back("running job " + id.str() + ": " + why + ": not evictable this cycle");
    };
    std::vector<std::string> hosts;
    try {
      hosts = host_list(str(j, "nodes"));
    } catch (slurm_error const& e) {
      return why_not(e.what());
    }
    auto const detail = j.value("gres_detail", json::array());
    if (hosts.empty() || !detail.is_array() || detail.size() != hosts.size()) return why_not("no gres_detail per node");
    running_job rj;
    rj.name = "slurm-" + id.str();
    rj.priority = rank.running_priority(j, now);
    rj.preemptible = j.value("requeue", false);
    rj.gang = hosts.size() > 1;
    rj.start_time = num(j, "start_time", now);
    std::int64_t const cpus = milli(num(j, "cpus", 1)) / static_cast<std::int64_t>(hosts.size());
    std::int64_t memory = std::numeric_limits<std::int64_t>::max();
    auto const alloc = j.value("job_resources", json::object()).value("allocated_nodes", json::array());
    for (auto const& a : alloc) memory = std::min(memory, num(a, "memory_allocated", 0));
    if (alloc.empty()) memory = 0;
    rj.per_replica.cpu_milli = cpus;
    rj.per_replica.memory_mib = memory;
    for (std::size_t k = 0; k < hosts.size(); ++k) {
      auto const at = node_at.find(hosts[k]);
      if (at == node_at.end()) return why_not("node " + hosts[k] + " is not in the round");
      auto const& nd = c.nodes[at->second];
      if (!detail[k].is_string()) return why_not("gres_detail is not text");
      auto const idx = used_indices(detail[k].get<std::string>());
      if (k == 0) rj.per_replica.gpus = static_cast<std::int32_t>(idx.size());
      if (static_cast<std::int32_t>(idx.size()) != rj.per_replica.gpus) return why_not("unequal GPUs per node");
      replica_placement rp;
      rp.node = static_cast<std::int32_t>(at->second);
      for (auto g : idx) {
        if (g < 0 || static_cast<std::size_t>(g) >= nd.gpu_free_milli.size() || nd.gpu_free_milli[static_cast<std::size_t>(g)] != 0) {
          return why_not("GPU " + std::to_string(g) + " of " + hosts[k] + " is not in use");
        }
        rp.gpus.push_back(g);
      }
      rj.per_replica.cpu_milli = std::min(rj.per_replica.cpu_milli, nd.cpu_milli_capacity - nd.cpu_milli_free);
      rj.per_replica.memory_mib = std::min(rj.per_replica.memory_mib, nd.memory_mib_capacity - nd.memory_mib_free);
      rj.replicas.push_back(std::move(rp));
    }
    rj.per_replica.cpu_milli = std::max<std::int64_t>(0, rj.per_replica.cpu_milli);
    rj.per_replica.memory_mib = std::max<std::int64_t>(0, rj.per_replica.memory_mib);
    snap.running_ids[rj.name] = id;
    snap.round.running.push_back(std::move(rj));
  };
  // In job id order, Slurm's order of submission: jobs submitted within one
  // second (submit_time's grain) keep it (the round breaks equal submit
  // times by position; squeue lists by partition, state and priority). An
  // array's tasks go at its id, in task order, wherever Slurm split them off.
  // Its tasks running or released count against its throttle (%N).
  std::vector<std::pair<job_ref, json const*>> by_id;
  std::map<std::int64_t, std::int64_t> array_active;
  for (auto const& j : queue["jobs"]) {
    if (!j.is_object()) throw slurm_error("squeue --json: a job is not an object");
    job_ref r = ref_of(j);
    std::string const state = state_of(j), tasks = str(j, "array_task_string");
    std::int64_t count = 1;
    if (r.task < 0 && !tasks.empty()) {  // an array's record of several pending tasks: at its first
      try {
        r.task = array_tasks(tasks, 1, count).front();
      } catch (slurm_error const&) {  // read again, and skipped, below
      }
    }
    std::int64_t const array = num(j, "array_job_id", 0);
    if (array > 0 && (state == "RUNNING" || state == "CONFIGURING" || state == "COMPLETING" || state == "SUSPENDED" ||
                      (state == "PENDING" && str(j, "state_reason") != "JobHeldUser"))) {
      array_active[array] += count;
    }
    by_id.emplace_back(r, &j);
  }
  std::stable_sort(by_id.begin(), by_id.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
  for (auto const& [order, jp] : by_id) {
    auto const& j = *jp;
    if (!starts_with(str(j, "comment"), opt.tag)) continue;
    if (!opt.partition.empty() && str(j, "partition") != opt.partition) continue;
    job_ref const id = ref_of(j);
    if (num(j, "job_id", -1) < 0) throw slurm_error("squeue --json: a job has no job_id");
    if (opt.preempt && state_of(j) == "RUNNING") {
      add_running(j, id);
      continue;
    }
    if (state_of(j) != "PENDING") continue;
    auto skip = [&](std::string why) { snap.skipped.push_back({id, std::move(why)}); };
    std::int64_t const nodes = std::max<std::int64_t>(1, num(j, "node_count", 1));
    // GPUs a node: --gres or --gpus-per-node, and --gpus-per-task times the
    // tasks a node runs (--ntasks-per-node, else the tasks spread evenly,
    // rounded up). Each count is taken at most 65, past any node.
    std::int64_t gpus = 0;
    std::string model;
    bool odd = false;
    auto const read_gpus = [&](char const* field, std::int64_t times) {
      for (auto const& g : split(str(j, field), ',')) {
        std::string type;
        std::int64_t count = 0;
        try {
          if (gpu_gres(g, type, count)) {
            gpus += std::min<std::int64_t>(count, 65) * std::min<std::int64_t>(times, 65);
            model = type;
          } else if (g.find("gpu") != std::string::npos) {
            odd = true;  // a GPU request it cannot read is never read as none
          }
        } catch (slurm_error const&) {
          odd = true;
        }
      }
    };
    read_gpus("tres_per_node", 1);
    std::int64_t const ntasks = std::max<std::int64_t>(1, num(j, "tasks", 1));
    std::int64_t const node_tasks = num(j, "tasks_per_node", 0) > 0 ? num(j, "tasks_per_node", 0) : ceil_div(ntasks, nodes);
    read_gpus("tres_per_task", node_tasks);
    // --gpus=G (per job): G / N a node where that is whole (Slurm may
    // spread G otherwise, which one count a node cannot say).
    std::int64_t const before = gpus;
    read_gpus("tres_per_job", 1);
    std::int64_t const job_gpus = gpus - before;
    bool const uneven = job_gpus % nodes != 0;
    gpus = before + job_gpus / nodes;
    std::int64_t const total_cpus = num(j, "cpus", 1);  // a node's share rounded up, with no sum that could wrap
    // --cpus-per-gpu: Slurm gives each GPU that many CPUs (a pending job's
    // "cpus" does not count them).
    std::int64_t const cpus = std::max({num(j, "minimum_cpus_per_node", 1), ceil_div(total_cpus, nodes),
                                        per_gpu(j, "cpus_per_tres", odd) * gpus});
    std::int64_t memory = num(j, "memory_per_node");
    if (memory <= 0) {
      std::int64_t const per_cpu = std::max<std::int64_t>(0, num(j, "memory_per_cpu"));
      memory = cpus > 0 && per_cpu > max_resource / cpus ? max_resource + 1 : per_cpu * std::max<std::int64_t>(0, cpus);
    }
    // At least what Slurm counts for the job, a node's share (--mem=0, or
    // no default: the node's memory) and --mem-per-gpu's (MB) for its GPUs.
    memory = std::max({memory, ceil_div(tres_memory_mib(str(j, "tres_req_str")), nodes),
                       per_gpu(j, "memory_per_tres", odd) * gpus});
    bool const whole = takes_nodes_whole(j);
    bool const held = str(j, "state_reason") == "JobHeldUser";
    if (held) snap.comments[id] = str(j, "admin_comment");
    if (!held) {
      // Released by the bridge but not started: it holds its nodes.
      std::vector<std::string> req;
      try {
        req = host_list(str(j, "required_nodes"));
      } catch (slurm_error const& e) {
        snap.warnings.push_back("job " + id.str() + ": required_nodes: " + e.what());
        continue;
      }
      if (req.empty()) continue;
      ++snap.reserved_jobs;
      for (auto const& name : req) {
        auto it = node_at.find(name);
        if (it == node_at.end()) continue;
        auto& nd = c.nodes[it->second];
        std::erase(nd.labels, std::string(idle_label));
        std::int64_t left = whole ? std::numeric_limits<std::int64_t>::max() : gpus;
        for (auto& f : nd.gpu_free_milli) {
          if (left > 0 && f == milli_per_gpu) {
            f = 0;
            --left;
          }
        }
        nd.cpu_milli_free = whole ? 0 : std::max<std::int64_t>(0, nd.cpu_milli_free - milli(cpus));
        nd.memory_mib_free = whole ? 0 : std::max<std::int64_t>(0, nd.memory_mib_free - memory);
      }
      continue;
    }
    if (odd) {
      skip("GPUs (tres_per_node '" + str(j, "tres_per_node") + "', tres_per_task '" + str(j, "tres_per_task") +
           "', tres_per_job '" + str(j, "tres_per_job") + "') is not a GPU count");
      continue;
    }
    if (!str(j, "resv_name").empty()) {
      skip("--reservation is not supported: its nodes are left out of the bridge's rounds");
      continue;
    }
    if (num(j, "het_job_id", 0) > 0) {  // its components start together, on nodes of their own
      skip("a heterogeneous job (components " + str(j, "het_job_id_set") +
           ") is not supported: submit its components as jobs of their own");
      continue;
    }
    // Slurm would not start it now whatever its nodes: released, it would
    // hold them. It waits held, saying why (failing open, Slurm has it).
    if (std::string const dep = str(j, "dependency");
        dep.find("(unfulfilled)") != std::string::npos || dep.find("(failed)") != std::string::npos) {
      skip("its dependency is not met: " + dep);
      continue;
    }
    if (std::int64_t const begin = num(j, "eligible_time", 0); begin > now) {
      auto const t = static_cast<std::time_t>(begin);
      std::tm utc{};
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &utc));
      skip(std::string("it may not start before ") + when + " (--begin)");
      continue;
    }
    if (str(j, "tres_per_socket").find("gpu") != std::string::npos) {
      skip("--gpus-per-socket is not supported: ask for GPUs per node (--gres=gpu:N) or per task");
      continue;
    }
    if (uneven) {
      skip("--gpus=" + std::to_string(job_gpus) + " over -N " + std::to_string(nodes) +
           " is not a whole number a node: ask for GPUs per node (--gres=gpu:N)");
      continue;
    }
    if (nodes > 4096 || gpus > 64) {
      skip("-N " + std::to_string(nodes) + " with " + std::to_string(gpus) + " GPUs a node is out of range");
      continue;
    }
    if (milli(cpus) > max_resource || memory > max_resource) {
      skip(std::to_string(cpus) + " CPUs and " + std::to_string(memory) +
           " MB a node are past what any node has (Placer takes at most 2^40 mCPU and MiB)");
      continue;
    }
    job jb;
    jb.name = "slurm-" + id.str();
    jb.priority = rank.priority(j);
    jb.queue.clear();
    jb.replicas = static_cast<std::int32_t>(nodes);
    jb.gang = nodes > 1;
    jb.distinct_nodes = nodes > 1;  // -N: a node for each replica
    jb.per_replica.gpus = static_cast<std::int32_t>(gpus);
    jb.per_replica.cpu_milli = milli(cpus);
    jb.per_replica.memory_mib = memory;
    if (!model.empty()) jb.allowed_gpu_models = {model};
    jb.submit_time = num(j, "submit_time", now);
    if (jb.gang && !c.topo.empty()) {
      jb.topology_level = 1;
      jb.topo_mode = topology_mode::preferred;
    }
    // Slurm runs a job only on nodes of its partition: one partition is a
    // selector; a job submitted to several (-p a,b) may use any of them.
    auto const partitions = split(str(j, "partition"), ',');
    std::string const features = str(j, "features");
    if (partitions.size() > 1 && features.find('|') != std::string::npos) {
      skip("several partitions with --constraint a|b is not supported");
      continue;
    }
    if (partitions.size() == 1) {
      jb.constraints.node_selector.push_back(partition_label(partitions[0]));
    } else {
      for (auto const& part : partitions) {
        selector_term t;
        std::string const label = partition_label(part);
        t.match.push_back({label.substr(0, label.find('=')), selector_op::in, {"true"}});
        jb.constraints.required.push_back(std::move(t));
      }
    }
    if (!features.empty()) {
      bool const any = features.find('|') != std::string::npos;
      bool const all = features.find('&') != std::string::npos || features.find(',') != std::string::npos;
      auto const names = split(features, any ? '|' : (features.find('&') != std::string::npos ? '&' : ','));
      if ((any && all) || !std::all_of(names.begin(), names.end(), plain_feature)) {
        skip("--constraint '" + features + "': only a&b, a,b or a|b of plain features is supported");
        continue;
      }
      for (auto const& f : names) {
        if (!any) {
          jb.constraints.node_selector.push_back(feature_label(f));
        } else {
          selector_term t;
          std::string const label = feature_label(f);
          t.match.push_back({label.substr(0, label.find('=')), selector_op::in, {"true"}});
          jb.constraints.required.push_back(std::move(t));
        }
      }
    }
    // -x: none of these nodes, in every term.
    std::vector<std::string> excluded;
    try {
      excluded = host_list(str(j, "excluded_nodes"));
    } catch (slurm_error const& e) {
      skip(std::string("excluded_nodes: ") + e.what());
      continue;
    }
    if (!excluded.empty()) {
      selector_requirement const none_of{name_key, selector_op::not_in, excluded};
      if (jb.constraints.required.empty()) jb.constraints.required.emplace_back();
      for (auto& t : jb.constraints.required) t.match.push_back(none_of);
    }
    if (whole) {
      // A node with nothing on it, and all of the smallest such node of its
      // partitions: Placer then puts nothing beside it (decide() holds
      // what it would put beside it on a larger one).
      jb.constraints.node_selector.emplace_back(idle_label);
      auto const has = [](node const& nd, std::string const& label) {
        return std::find(nd.labels.begin(), nd.labels.end(), label) != nd.labels.end();
      };
      bool first = true;
      demand least;
      for (auto const& nd : c.nodes) {
        bool const in_partition = partitions.empty() || std::any_of(partitions.begin(), partitions.end(), [&](auto const& p) {
                                    return has(nd, partition_label(p));
                                  });
        if (!nd.healthy || !in_partition || !has(nd, idle_label)) continue;
        auto const g = static_cast<std::int32_t>(nd.gpu_free_milli.size());
        least.gpus = first ? g : std::min(least.gpus, g);
        least.cpu_milli = first ? nd.cpu_milli_capacity : std::min(least.cpu_milli, nd.cpu_milli_capacity);
        least.memory_mib = first ? nd.memory_mib_capacity : std::min(least.memory_mib, nd.memory_mib_capacity);
        first = false;
      }
      jb.per_replica.gpus = std::max(jb.per_replica.gpus, least.gpus);
      jb.per_replica.cpu_milli = std::max(jb.per_replica.cpu_milli, least.cpu_milli);
      jb.per_replica.memory_mib = std::max(jb.per_replica.memory_mib, least.memory_mib);
    }
    auto const add = [&](job_ref const& r, job&& jr) {
      if (whole) snap.whole.insert(r);
      snap.round.pending.push_back(std::move(jr));
      snap.job_ids.push_back(r);
      snap.node_count.push_back(static_cast<std::int32_t>(nodes));
    };
    std::int64_t const array = num(j, "array_job_id", 0), throttle = num(j, "array_max_tasks", 0);
    std::int64_t const room = throttle > 0 ? throttle - array_active[array] : max_array_tasks;
    std::string const task_string = str(j, "array_task_string");
    if (id.task >= 0 || task_string.empty()) {  // a job, or one task in a record of its own
      if (id.task >= 0 && room <= 0) continue;  // its array's throttle: its turn comes
      if (id.task >= 0) ++array_active[array];
      add(id, std::move(jb));
      continue;
    }
    // An array's record of several tasks: a job each, as many as may start.
    std::int64_t count = 0;
    std::vector<std::int64_t> tasks;
    try {
      std::int64_t const fit = fit_bound(c.nodes, nodes, gpus, milli(cpus), memory, max_array_tasks);
      tasks = array_tasks(task_string, std::min(room, fit + 1), count);  // (one past: it says why the rest wait)
    } catch (slurm_error const& e) {
      skip(e.what());
      continue;
    }
    array_active[array] += static_cast<std::int64_t>(tasks.size());
    for (auto const t : tasks) {
      job_ref const task{array, t};
      job jt = jb;
      jt.name = "slurm-" + task.str();
      snap.comments[task] = snap.comments[id];
      snap.unsplit.insert(task);
      add(task, std::move(jt));
    }
  }
  return snap;
}

std::vector<action> decide(snapshot const& snap, round_result const& r) {
  std::vector<action> out;
  auto const& nodes = snap.round.state.nodes;
  for (auto const& p : r.preemptions) {
    auto const it = snap.running_ids.find(p.job);
    if (it == snap.running_ids.end()) continue;  // not one the bridge sent
    std::string const for_job = p.for_job >= 0 && static_cast<std::size_t>(p.for_job) < snap.job_ids.size()
                                    ? " for job " + snap.job_ids[static_cast<std::size_t>(p.for_job)].str()
                                    : "";
    action a{it->second, {}, one_line("placer: evicted (" + p.reason + ")" + for_job + "; requeued, held"), true};
    out.push_back(std::move(a));
  }
  // Of an array's tasks, the first held is told why; one still in the
  // array's record is told only if it is the first (telling it splits it
  // off), and the others wait in the record as it does.
  std::set<std::int64_t> told;
  auto const held = [&](job_ref const& id, std::string comment) {
    if (id.task >= 0 && !told.insert(id.id).second && snap.unsplit.count(id) != 0) return;
    auto it = snap.comments.find(id);
    if (it == snap.comments.end() || it->second != comment) out.push_back({id, {}, std::move(comment)});
  };
  auto const nodes_of = [&](placement const& p) {
    std::set<std::string> on;
    for (auto const& rp : p.replicas) on.insert(nodes[static_cast<std::size_t>(rp.node)].name);
    return on;
  };
  // A job that takes its nodes whole (--exclusive) shares none with another
  // placement of the round: the first such placement on a node has it, and
  // every other placement there waits a cycle.
  std::map<std::string, job_ref> taken;
  std::set<std::int32_t> has_whole;
  for (auto const& p : r.placements) {
    auto const& id = snap.job_ids[static_cast<std::size_t>(p.job)];
    if (snap.whole.count(id) == 0) continue;
    auto const on = nodes_of(p);
    if (std::any_of(on.begin(), on.end(), [&](auto const& n) { return taken.count(n) != 0; })) continue;
    for (auto const& n : on) taken.emplace(n, id);
    has_whole.insert(p.job);
  }
  for (auto const& p : r.placements) {
    auto const j = static_cast<std::size_t>(p.job);
    std::set<std::string> const distinct = nodes_of(p);
    if (static_cast<std::int32_t>(distinct.size()) != snap.node_count[j] ||
        static_cast<std::int32_t>(p.replicas.size()) != snap.node_count[j]) {
      held(snap.job_ids[j], one_line("placer: waits: -N " + std::to_string(snap.node_count[j]) +
                                     " needs distinct nodes and this round's placement shared one"));
      continue;
    }
    if (has_whole.count(p.job) == 0) {
      auto const shared = std::find_if(distinct.begin(), distinct.end(), [&](auto const& n) { return taken.count(n) != 0; });
      if (shared != distinct.end()) {
        held(snap.job_ids[j], one_line("placer: waits: " + *shared + " goes whole to job " + taken.at(*shared).str() +
                                       " (--exclusive) this cycle"));
        continue;
      }
    }
    action a{snap.job_ids[j], {distinct.begin(), distinct.end()}, {}};
    std::string list;
    for (auto const& n : a.nodes) list += (list.empty() ? "" : ",") + n;
    a.comment = one_line("placer: placed on " + list);
    out.push_back(std::move(a));
  }
  for (auto const& u : r.unplaced_jobs) {
    auto const& id = snap.job_ids[static_cast<std::size_t>(u.job)];
    std::string detail = u.detail;
    if (snap.whole.count(id) != 0) {
      // Only the nodes with nothing allocated admit it, and only for now.
      static std::string const never = "It can never run on this cluster as it is:";
      if (auto const at = detail.find(never); at != std::string::npos) {
        detail.replace(at, never.size(), "Of the nodes with nothing allocated now:");
      }
      detail = "--exclusive: it waits for nodes with nothing allocated. " + detail;
    }
    held(id, one_line("placer: " + std::string(to_string(u.reason)) + ": " + detail));
  }
  for (auto const& s : snap.skipped) held(s.job, one_line("placer: skipped: " + s.why));
  return out;
}

bool drop_refused(snapshot& snap, std::string const& message) {
  static std::regex const named(R"(pending job (\d{1,9}) \('([^']*)'\))");
  std::smatch m;
  if (!std::regex_search(message, m, named)) return false;
  auto const k = static_cast<std::size_t>(std::stoll(m[1].str()));
  auto& pending = snap.round.pending;
  if (k >= pending.size() || pending[k].name != m[2].str()) return false;
  snap.skipped.push_back({snap.job_ids[k], "Placer refused it: " + message});
  pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
  snap.job_ids.erase(snap.job_ids.begin() + static_cast<std::ptrdiff_t>(k));
  snap.node_count.erase(snap.node_count.begin() + static_cast<std::ptrdiff_t>(k));
  return true;
}

bool halve(snapshot& snap) {
  auto const n = snap.round.pending.size();
  if (n <= 1) return false;
  snap.round.pending.resize(n / 2);
  snap.job_ids.resize(n / 2);
  snap.node_count.resize(n / 2);
  return true;
}

std::vector<action> release_to_slurm(snapshot const& snap, std::string const& why) {
  std::vector<action> out;
  std::string const comment = one_line("placer: released to Slurm's scheduler: " + why);
  std::set<job_ref> done;
  auto const release = [&](job_ref r) {
    if (snap.unsplit.count(r) != 0) r = {r.id};  // its array's record: the whole array, once
    if (done.insert(r).second) out.push_back({r, {}, comment, false, true});
  };
  for (auto const& id : snap.job_ids) release(id);
  for (auto const& s : snap.skipped) release(s.job);
  return out;
}

std::string read_nodes(command_runner const& run, bool* grouped) {
  std::vector<std::string> const per_node{"scontrol", "show", "nodes", "--json"};
  if (grouped != nullptr && *grouped) return run(per_node);
  std::string out = run({"sinfo", "--json"});
  auto const info = nlohmann::json::parse(out, nullptr, false);
  if (!info.is_discarded() && info.is_object() && !info.contains("nodes") && info.contains("sinfo")) {
    if (grouped != nullptr) *grouped = true;
    out = run(per_node);
  }
  return out;
}

void scontrol_changes::update(job_ref const& job, std::string const& nodes, std::string const& comment) {
  std::vector<std::string> argv{"scontrol", "update", "JobId=" + job.str()};
  if (!nodes.empty()) argv.push_back("ReqNodeList=" + nodes);
  argv.push_back("AdminComment=" + comment);
  run_(argv);
}

void scontrol_changes::requeue_hold(job_ref const& job) { run_({"scontrol", "requeuehold", job.str()}); }

std::vector<skipped_job> scontrol_changes::release(std::vector<job_ref> const& jobs) {
  std::vector<skipped_job> failed;
  if (jobs.empty()) return failed;
  std::string ids;
  for (auto const& j : jobs) ids += (ids.empty() ? "" : ",") + j.str();
  try {
    run_({"scontrol", "release", ids});
  } catch (std::exception const&) {
    for (auto const& j : jobs) {
      try {
        run_({"scontrol", "release", j.str()});
      } catch (std::exception const& e) {
        failed.push_back({j, e.what()});
      }
    }
  }
  return failed;
}

std::vector<skipped_job> apply(std::vector<action> const& actions, job_changes& slurm) {
  std::vector<skipped_job> failed;
  std::vector<job_ref> release;
  // Evictions first: their nodes are free before any job given them starts.
  for (auto const& a : actions) {
    if (!a.requeue) continue;
    try {
      slurm.update(a.job, {}, a.comment);
      slurm.requeue_hold(a.job);
    } catch (std::exception const& e) {
      failed.push_back({a.job, e.what()});
    }
  }
  for (auto const& a : actions) {
    if (a.requeue) continue;
    try {
      std::string list;
      for (auto const& n : a.nodes) list += (list.empty() ? "" : ",") + n;
      // First every job's nodes (held still: a crash here loses nothing)...
      slurm.update(a.job, list, a.comment);
      if (!a.nodes.empty() || a.to_slurm) release.push_back(a.job);
    } catch (std::exception const& e) {
      failed.push_back({a.job, e.what()});
    }
  }
  // ... then the release of them all.
  auto const unreleased = slurm.release(release);
  failed.insert(failed.end(), unreleased.begin(), unreleased.end());
  return failed;
}

std::vector<skipped_job> apply(std::vector<action> const& actions, command_runner const& run) {
  scontrol_changes changes(run);
  return placer::slurm::apply(actions, changes);  // (qualified: ADL also finds std::apply)
}

}  // namespace placer::slurm
