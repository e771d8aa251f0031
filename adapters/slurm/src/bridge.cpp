// The Slurm bridge's translation (bridge.hpp): Slurm's JSON to a Placer
// round, and Placer's answer to scontrol commands.
#include <placer/slurm/bridge.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <limits>
#include <map>
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
/// "gres:", or "gres/" from Slurm 23.11): type and count; false if not a GPU.
bool gpu_gres(std::string entry, std::string& type, std::int64_t& count) {
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

/// A job's priority for Placer: Slurm's nice, negated (a held job's Slurm
/// priority is 0, so nice is what a user sets), within +-1,000,000.
std::int32_t priority_of(json const& j) {
  return static_cast<std::int32_t>(-std::clamp<std::int64_t>(num(j, "nice", 0), -1000000, 1000000));
}

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
    nd.cpu_milli_capacity = num(n, "cpus") * 1000;
    nd.cpu_milli_free = std::max<std::int64_t>(0, nd.cpu_milli_capacity - num(n, "alloc_cpus") * 1000);
    nd.memory_mib_capacity = num(n, "real_memory");
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
          f == "MAINTENANCE" || f == "REBOOT_REQUESTED") {
        healthy = false;
      }
    }
    nd.healthy = healthy;
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

  auto const now = static_cast<std::int64_t>(std::time(nullptr));
  snap.round.now = now;
  snap.round.pol.stacking = opt.stacking;
  snap.round.pol.queue.preemption = opt.preempt;
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
  auto add_running = [&](json const& j, std::int64_t id) {
    auto const why_not = [&](std::string const& why) {
      snap.warnings.push_back("running job " + std::to_string(id) + ": " + why + ": not evictable this cycle");
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
    rj.name = "slurm-" + std::to_string(id);
    rj.priority = priority_of(j);
    rj.preemptible = j.value("requeue", false);
    rj.gang = hosts.size() > 1;
    rj.start_time = num(j, "start_time", now);
    std::int64_t const cpus = num(j, "cpus", 1) * 1000 / static_cast<std::int64_t>(hosts.size());
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
  for (auto const& j : queue["jobs"]) {
    if (!j.is_object()) throw slurm_error("squeue --json: a job is not an object");
    if (!starts_with(str(j, "comment"), opt.tag)) continue;
    if (!opt.partition.empty() && str(j, "partition") != opt.partition) continue;
    std::int64_t const id = num(j, "job_id", -1);
    if (id < 0) throw slurm_error("squeue --json: a job has no job_id");
    if (opt.preempt && state_of(j) == "RUNNING") {
      add_running(j, id);
      continue;
    }
    if (state_of(j) != "PENDING") continue;
    auto skip = [&](std::string why) { snap.skipped.push_back({id, std::move(why)}); };
    std::int64_t const nodes = std::max<std::int64_t>(1, num(j, "node_count", 1));
    std::int64_t gpus = 0;
    std::string model;
    bool odd = false;
    for (auto const& g : split(str(j, "tres_per_node"), ',')) {
      std::string type;
      std::int64_t count = 0;
      try {
        if (gpu_gres(g, type, count)) {
          gpus += count;
          model = type;
        } else if (g.find("gpu") != std::string::npos) {
          odd = true;  // a GPU request it cannot read is never read as none
        }
      } catch (slurm_error const&) {
        odd = true;
      }
    }
    std::int64_t const cpus = std::max(num(j, "minimum_cpus_per_node", 1), (num(j, "cpus", 1) + nodes - 1) / nodes);
    std::int64_t memory = num(j, "memory_per_node");
    if (memory <= 0) memory = num(j, "memory_per_cpu") * cpus;
    bool const held = str(j, "state_reason") == "JobHeldUser";
    if (held) snap.comments[id] = str(j, "admin_comment");
    if (!held) {
      // Released by the bridge but not started: it holds its nodes.
      std::vector<std::string> req;
      try {
        req = host_list(str(j, "required_nodes"));
      } catch (slurm_error const& e) {
        snap.warnings.push_back("job " + std::to_string(id) + ": required_nodes: " + e.what());
        continue;
      }
      if (req.empty()) continue;
      ++snap.reserved_jobs;
      for (auto const& name : req) {
        auto it = node_at.find(name);
        if (it == node_at.end()) continue;
        auto& nd = c.nodes[it->second];
        std::int64_t left = gpus;
        for (auto& f : nd.gpu_free_milli) {
          if (left > 0 && f == milli_per_gpu) {
            f = 0;
            --left;
          }
        }
        nd.cpu_milli_free = std::max<std::int64_t>(0, nd.cpu_milli_free - cpus * 1000);
        nd.memory_mib_free = std::max<std::int64_t>(0, nd.memory_mib_free - memory);
      }
      continue;
    }
    if (odd) {
      skip("tres_per_node '" + str(j, "tres_per_node") + "' is not a GPU count");
      continue;
    }
    if (!str(j, "tres_per_job").empty()) {
      skip("--gpus (per job) is not supported: ask for GPUs per node (--gres=gpu:N)");
      continue;
    }
    if (nodes > 4096 || gpus > 64) {
      skip("-N " + std::to_string(nodes) + " with " + std::to_string(gpus) + " GPUs a node is out of range");
      continue;
    }
    job jb;
    jb.name = "slurm-" + std::to_string(id);
    jb.priority = priority_of(j);
    jb.queue.clear();
    jb.replicas = static_cast<std::int32_t>(nodes);
    jb.gang = nodes > 1;
    jb.distinct_nodes = nodes > 1;  // -N: a node for each replica
    jb.per_replica.gpus = static_cast<std::int32_t>(gpus);
    jb.per_replica.cpu_milli = cpus * 1000;
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
    snap.round.pending.push_back(std::move(jb));
    snap.job_ids.push_back(id);
    snap.node_count.push_back(static_cast<std::int32_t>(nodes));
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
                                    ? " for job " + std::to_string(snap.job_ids[static_cast<std::size_t>(p.for_job)])
                                    : "";
    action a{it->second, {}, one_line("placer: evicted (" + p.reason + ")" + for_job + "; requeued, held"), true};
    out.push_back(std::move(a));
  }
  auto const held = [&](std::int64_t id, std::string comment) {
    auto it = snap.comments.find(id);
    if (it == snap.comments.end() || it->second != comment) out.push_back({id, {}, std::move(comment)});
  };
  for (auto const& p : r.placements) {
    auto const j = static_cast<std::size_t>(p.job);
    std::set<std::string> distinct;
    for (auto const& rp : p.replicas) distinct.insert(nodes[static_cast<std::size_t>(rp.node)].name);
    if (static_cast<std::int32_t>(distinct.size()) != snap.node_count[j] ||
        static_cast<std::int32_t>(p.replicas.size()) != snap.node_count[j]) {
      held(snap.job_ids[j], one_line("placer: waits: -N " + std::to_string(snap.node_count[j]) +
                                     " needs distinct nodes and this round's placement shared one"));
      continue;
    }
    action a{snap.job_ids[j], {distinct.begin(), distinct.end()}, {}};
    std::string list;
    for (auto const& n : a.nodes) list += (list.empty() ? "" : ",") + n;
    a.comment = one_line("placer: placed on " + list);
    out.push_back(std::move(a));
  }
  for (auto const& u : r.unplaced_jobs) {
    auto const j = static_cast<std::size_t>(u.job);
    held(snap.job_ids[j], one_line("placer: " + std::string(to_string(u.reason)) + ": " + u.detail));
  }
  for (auto const& s : snap.skipped) held(s.job, one_line("placer: skipped: " + s.why));
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

void scontrol_changes::update(std::int64_t job, std::string const& nodes, std::string const& comment) {
  std::vector<std::string> argv{"scontrol", "update", "JobId=" + std::to_string(job)};
  if (!nodes.empty()) argv.push_back("ReqNodeList=" + nodes);
  argv.push_back("AdminComment=" + comment);
  run_(argv);
}

void scontrol_changes::requeue_hold(std::int64_t job) { run_({"scontrol", "requeuehold", std::to_string(job)}); }

std::vector<skipped_job> scontrol_changes::release(std::vector<std::int64_t> const& jobs) {
  std::vector<skipped_job> failed;
  if (jobs.empty()) return failed;
  std::string ids;
  for (auto j : jobs) ids += (ids.empty() ? "" : ",") + std::to_string(j);
  try {
    run_({"scontrol", "release", ids});
  } catch (std::exception const&) {
    for (auto j : jobs) {
      try {
        run_({"scontrol", "release", std::to_string(j)});
      } catch (std::exception const& e) {
        failed.push_back({j, e.what()});
      }
    }
  }
  return failed;
}

std::vector<skipped_job> apply(std::vector<action> const& actions, job_changes& slurm) {
  std::vector<skipped_job> failed;
  std::vector<std::int64_t> release;
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
      if (!a.nodes.empty()) release.push_back(a.job);
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
