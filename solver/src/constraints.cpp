// Node labels and taints against jobs' selectors, affinity and tolerations
// (constraints.hpp).
#include <placer/solver/constraints.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <charconv>
#include <unordered_map>

namespace placer {

namespace {

/// "key=value" split at the first '=' ("key" alone: empty value).
std::pair<std::string_view, std::string_view> split_label(std::string_view l) {
  auto const eq = l.find('=');
  if (eq == std::string_view::npos) return {l, {}};
  return {l.substr(0, eq), l.substr(eq + 1)};
}

/// Whether label l's key (split_label(l).first) is `key`, without looking
/// for l's '=': l starts with key and goes on with '=' or ends there. A key
/// holding '=' is no label's key. (Real nodes carry tens of labels, NFD's
/// and GFD's, and a round reads them all: this is the per-label cost.)
bool has_key(std::string_view l, std::string_view key) {
  auto const n = key.size();
  return l.size() >= n && (l.size() == n || l[n] == '=') && l.compare(0, n, key) == 0 &&
         key.find('=') == std::string_view::npos;
}

bool parse_int(std::string_view s, std::int64_t& v) {
  if (s.empty()) return false;
  auto const* end = s.data() + s.size();
  auto const r = std::from_chars(s.data(), end, v);
  return r.ec == std::errc{} && r.ptr == end;
}

bool requirement_matches(node const& n, selector_requirement const& e) {
  std::string_view v;
  bool const has = label_value(n, e.key, v);
  auto const listed = [&] { return std::find(e.values.begin(), e.values.end(), v) != e.values.end(); };
  switch (e.op) {
    case selector_op::in: return has && listed();
    case selector_op::not_in: return !has || !listed();
    case selector_op::exists: return has;
    case selector_op::does_not_exist: return !has;
    case selector_op::gt:
    case selector_op::lt: {
      std::int64_t have = 0, bound = 0;
      if (!has || e.values.size() != 1 || !parse_int(v, have) || !parse_int(e.values[0], bound)) return false;
      return e.op == selector_op::gt ? have > bound : have < bound;
    }
  }
  return false;
}

bool hard(taint_effect e) { return e == taint_effect::no_schedule || e == taint_effect::no_execute; }

std::int64_t items(node_constraints const& c) {
  std::int64_t k = static_cast<std::int64_t>(c.node_selector.size() + c.tolerations.size());
  for (auto const& t : c.required) k += static_cast<std::int64_t>(t.match.size()) + 1;
  for (auto const& p : c.preferred) k += static_cast<std::int64_t>(p.term.match.size()) + 1;
  return k;
}

/// A byte string that two constraint sets share exactly when they are equal.
void set_key(node_constraints const& c, std::string& k) {
  k.clear();
  auto put = [&](std::string_view s) {
    k += std::to_string(s.size());
    k += ':';
    k += s;
  };
  auto term = [&](selector_term const& t) {
    k += 'T';
    for (auto const& e : t.match) {
      k += static_cast<char>('0' + static_cast<int>(e.op));
      put(e.key);
      for (auto const& v : e.values) put(v);
      k += ';';
    }
  };
  for (auto const& s : c.node_selector) put(s);
  k += '|';
  for (auto const& t : c.required) term(t);
  k += '|';
  for (auto const& p : c.preferred) {
    k += std::to_string(p.weight);
    term(p.term);
  }
  k += '|';
  for (auto const& t : c.tolerations) {
    k += static_cast<char>('0' + static_cast<int>(t.op));
    k += static_cast<char>('1' + t.effect);
    put(t.key);
    put(t.value);
  }
}

constexpr std::int64_t max_constraint_work = std::int64_t{1} << 22;

}  // namespace

bool label_value(node const& n, std::string_view key, std::string_view& value) {
  for (std::string_view const l : n.labels) {
    if (has_key(l, key)) {
      value = l.size() > key.size() ? l.substr(key.size() + 1) : std::string_view{};
      return true;
    }
  }
  return false;
}

bool term_matches(node const& n, selector_term const& t) {
  if (t.match.empty()) return false;
  for (auto const& e : t.match) {
    if (!requirement_matches(n, e)) return false;
  }
  return true;
}

bool tolerates(node_constraints const& c, taint const& t) {
  for (auto const& o : c.tolerations) {
    if (o.effect >= 0 && static_cast<taint_effect>(o.effect) != t.effect) continue;
    if (!o.key.empty() && o.key != t.key) continue;
    if (o.op == toleration_op::exists || o.value == t.value) return true;
  }
  return false;
}

constraint_miss exclusion(node const& n, node_constraints const& c, taint const** which) {
  for (auto const& s : c.node_selector) {
    auto const [k, want] = split_label(s);
    std::string_view v;
    if (!label_value(n, k, v) || v != want) return constraint_miss::selector;
  }
  if (!c.required.empty() &&
      std::none_of(c.required.begin(), c.required.end(), [&](auto const& t) { return term_matches(n, t); })) {
    return constraint_miss::affinity;
  }
  for (auto const& t : n.taints) {
    if (hard(t.effect) && !tolerates(c, t)) {
      if (which != nullptr) *which = &t;
      return constraint_miss::taint;
    }
  }
  return constraint_miss::none;
}

std::int32_t preference(node const& n, node_constraints const& c) {
  std::int64_t total = 0, matched = 0;
  for (auto const& p : c.preferred) {
    total += p.weight;
    if (term_matches(n, p.term)) matched += p.weight;
  }
  std::int32_t s = total > 0 ? static_cast<std::int32_t>(matched * 1000 / total) : 0;
  for (auto const& t : n.taints) {
    if (t.effect == taint_effect::prefer_no_schedule && !tolerates(c, t)) {
      s -= 1000;
      break;
    }
  }
  return s;
}

std::string constraints_problem(node_constraints const& c) {
  for (auto const& s : c.node_selector) {
    if (split_label(s).first.empty()) return "node_selector entry '" + s + "' has no key (key=value)";
  }
  auto term = [](selector_term const& t) -> std::string {
    for (auto const& e : t.match) {
      if (e.key.empty()) return "a match expression has no key";
      bool const listed = e.op == selector_op::in || e.op == selector_op::not_in;
      bool const bare = e.op == selector_op::exists || e.op == selector_op::does_not_exist;
      if (listed && e.values.empty()) return "'" + e.key + "': In and NotIn need at least one value";
      if (bare && !e.values.empty()) return "'" + e.key + "': Exists and DoesNotExist take no values";
      std::int64_t v = 0;
      if (!listed && !bare && (e.values.size() != 1 || !parse_int(e.values[0], v))) {
        return "'" + e.key + "': Gt and Lt take exactly one integer value";
      }
    }
    return {};
  };
  for (auto const& t : c.required) {
    if (auto p = term(t); !p.empty()) return "required affinity: " + p;
  }
  for (auto const& p : c.preferred) {
    if (p.weight < 1 || p.weight > 100) return "preferred affinity weight " + std::to_string(p.weight) + " outside 1..100";
    if (auto q = term(p.term); !q.empty()) return "preferred affinity: " + q;
  }
  for (auto const& t : c.tolerations) {
    if (t.effect < -1 || t.effect > 2) return "a toleration has an unknown effect";
    if (t.key.empty() && t.op != toleration_op::exists) return "a toleration with an empty key must use Exists";
    if (t.op == toleration_op::exists && !t.value.empty()) return "a toleration with Exists takes no value";
  }
  return {};
}

void constraint_tables::build(round_input const& in, kernels::round_arrays& out) {
  auto const& nodes = in.state.nodes;
  build(in, out, std::any_of(nodes.begin(), nodes.end(), [](node const& n) { return !n.taints.empty(); }));
}

void constraint_tables::build(round_input const& in, kernels::round_arrays& out, bool any_taint) {
  auto const& nodes = in.state.nodes;
  bool const any = any_taint || std::any_of(in.pending.begin(), in.pending.end(), [](job const& j) { return !j.constraints.empty(); });
  active = any;
  auto& node_group = out.node_group;
  auto& admit = out.constraint_admit;
  auto& prefer = out.constraint_prefer;
  if (!any) {
    n_sets = out.n_constraint_sets = out.n_constraint_groups = 0;
    for (auto* v : {&node_group, &job_set, &prefer, &group_node}) v->clear();
    admit.clear();
    sets.clear();
    return;
  }

  // Sets: the jobs' distinct constraints; set 0 is none.
  static node_constraints const none;
  std::unordered_map<std::string, std::int32_t> ids;
  sets.assign(1, &none);
  set_key(none, key);
  ids.emplace(key, 0);
  job_set.resize(in.pending.size());
  std::int64_t set_items = 0;
  for (std::size_t j = 0; j < in.pending.size(); ++j) {
    auto const& c = in.pending[j].constraints;
    if (c.empty()) {
      job_set[j] = 0;
      continue;
    }
    set_key(c, key);
    auto const [it, fresh] = ids.try_emplace(key, static_cast<std::int32_t>(sets.size()));
    if (fresh) {
      sets.push_back(&c);
      set_items += items(c);
    }
    job_set[j] = it->second;
  }
  n_sets = static_cast<std::int32_t>(sets.size());
  out.n_constraint_sets = n_sets;

  // The label keys the sets ask about.
  keys.clear();
  for (auto const* c : sets) {
    for (auto const& s : c->node_selector) keys.emplace_back(split_label(s).first);
    for (auto const& t : c->required) {
      for (auto const& e : t.match) keys.push_back(e.key);
    }
    for (auto const& p : c->preferred) {
      for (auto const& e : p.term.match) keys.push_back(e.key);
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // (A key holding '=' is no label's key: split_label cuts at the first.)
  keys.erase(std::remove_if(keys.begin(), keys.end(), [](std::string const& k) { return k.find('=') != std::string::npos; }),
             keys.end());
  key_lengths.clear();
  for (auto const& k : keys) key_lengths.push_back(k.size());
  std::sort(key_lengths.begin(), key_lengths.end());
  key_lengths.erase(std::unique(key_lengths.begin(), key_lengths.end()), key_lengths.end());
  // The values the sets name on each key, and the keys Gt or Lt read as
  // numbers. On every other expression (In, NotIn, a selector's equality,
  // Exists, DoesNotExist) two values no set names answer alike, so nodes
  // that differ only in such values are one group: a rack label that one
  // NotIn names two racks of made a group a rack (100k-k8s: 1,103 groups,
  // now 14), a job pinned to a host a group a node.
  named.clear();
  key_numeric.assign(keys.size(), 0);
  auto name_term = [&](selector_term const& t) {
    for (auto const& e : t.match) {
      if (e.op == selector_op::in || e.op == selector_op::not_in) {
        for (auto const& v : e.values) named.emplace_back(e.key, v);
      } else if (e.op == selector_op::gt || e.op == selector_op::lt) {
        auto const it = std::lower_bound(keys.begin(), keys.end(), e.key);
        if (it != keys.end() && *it == e.key) key_numeric[static_cast<std::size_t>(it - keys.begin())] = 1;
      }
    }
  };
  for (auto const* c : sets) {
    for (auto const& sel : c->node_selector) named.push_back(split_label(sel));
    for (auto const& t : c->required) name_term(t);
    for (auto const& p : c->preferred) name_term(p.term);
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  named_at.clear();
  for (std::size_t i = 0; i <= keys.size(); ++i) {
    auto const at = i < keys.size() ? std::lower_bound(named.begin(), named.end(),
                                                       std::pair<std::string_view, std::string_view>{keys[i], {}})
                                     : named.end();
    named_at.push_back(static_cast<std::size_t>(at - named.begin()));
  }

  // Groups: nodes with the same labels on those keys and the same taints.
  // With a session's memo for the same keys and named values, a node's key
  // is read from it unless the node changed since.
  node_label_memo* const memo = in.context == nullptr ? in.label_memo : nullptr;
  names.clear();
  for (std::size_t i = 0; memo != nullptr && i < keys.size(); ++i) {  // what the memo was made for
    names += static_cast<char>('0' + key_numeric[i]);
    for (std::size_t j = named_at[i]; j < named_at[i + 1] && named[j].first == keys[i]; ++j) {
      names += std::to_string(named[j].second.size());
      names += ':';
      names += named[j].second;
    }
    names += '|';
  }
  if (memo != nullptr && (memo->keys != keys || memo->names != names || memo->node_key.size() != nodes.size())) {
    memo->keys = keys;
    memo->names = names;
    memo->node_key.assign(nodes.size(), {});
  }
  ids.clear();
  node_group.resize(nodes.size());
  group_node.clear();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::string const* k = &key;
    if (memo != nullptr && !memo->node_key[i].empty()) {
      k = &memo->node_key[i];
    } else {
      node_key(nodes, i);
      if (memo != nullptr) memo->node_key[i] = key;
    }
    auto const [it, fresh] = ids.try_emplace(*k, static_cast<std::int32_t>(group_node.size()));
    if (fresh) group_node.push_back(static_cast<std::int32_t>(i));
    node_group[i] = it->second;
  }
  auto const n_groups = static_cast<std::int32_t>(group_node.size());
  out.n_constraint_groups = n_groups;

  std::int64_t const work = static_cast<std::int64_t>(n_groups) * (set_items + n_sets);
  if (work > max_constraint_work) {
    throw logic_error(error_code::resource_exhausted,
                      "round's constraints need " + std::to_string(n_sets) + " distinct constraint sets x " +
                          std::to_string(n_groups) + " node groups (" + std::to_string(work) +
                          " evaluations), above the limit of " + std::to_string(max_constraint_work));
  }
  admit.resize(static_cast<std::size_t>(n_sets) * static_cast<std::size_t>(n_groups));
  prefer.resize(admit.size());
  std::size_t k = 0;
  for (std::int32_t s = 0; s < n_sets; ++s) {
    for (std::int32_t g = 0; g < n_groups; ++g, ++k) {
      auto const& nd = nodes[static_cast<std::size_t>(group_node[static_cast<std::size_t>(g)])];
      admit[k] = admits(nd, *sets[static_cast<std::size_t>(s)]) ? 1 : 0;
      prefer[k] = preference(nd, *sets[static_cast<std::size_t>(s)]);
    }
  }
  merge_equal_sets(out);
}

void constraint_tables::node_key(std::vector<node> const& nodes, std::size_t i) {
  auto const& nd = nodes[i];
  key.clear();
  if (!keys.empty()) {
    // A label's bytes are a cache miss each, tens a node: ask for those
    // of the node after next (100k-nfd's groups 7.1 -> 4.8 ms).
    if (i + 2 < nodes.size()) {
      for (auto const& l : nodes[i + 2].labels) __builtin_prefetch(l.data());
    }
    for (std::string_view const l : nd.labels) {
      // Is l's key one of the sets'? Only where a key's length meets an '=' (or l's end).
      for (auto const n : key_lengths) {
        if (n > l.size()) break;
        if (n != l.size() && l[n] != '=') continue;
        auto const k = l.substr(0, n);
        auto const it = std::lower_bound(keys.begin(), keys.end(), k);
        if (it == keys.end() || *it != k) continue;
        auto const i = static_cast<std::size_t>(it - keys.begin());
        auto const value = n < l.size() ? l.substr(n + 1) : std::string_view{};
        auto const first = named.begin() + static_cast<std::ptrdiff_t>(named_at[i]);
        auto const last = named.begin() + static_cast<std::ptrdiff_t>(named_at[i + 1]);
        if (key_numeric[i] != 0 ||
            std::binary_search(first, last, std::pair<std::string_view, std::string_view>{k, value})) {
          key += l;
        } else {
          key += k;  // a value no set names: "other"
          key += '\3';
        }
        key += '\0';
        break;
      }
    }
  }
  key += '\1';
  for (auto const& t : nd.taints) {
    key += t.key;
    key += '\0';
    key += t.value;
    key += static_cast<char>('0' + static_cast<int>(t.effect));
  }
}

void node_label_memo::follow(delta_undo const& undo, std::size_t nodes) {
  if (node_key.size() != undo.size) {  // made for another cluster: start again
    clear();
    return;
  }
  for (auto const i : undo.changed) node_key[static_cast<std::size_t>(i)].clear();  // stale, its storage kept
  if (!undo.removed.empty()) {
    std::size_t kept = 0, r = 0;
    for (std::size_t i = 0; i < undo.size; ++i) {
      if (r < undo.removed.size() && static_cast<std::size_t>(undo.removed[r]) == i) {
        ++r;
        continue;
      }
      if (kept != i) node_key[kept] = std::move(node_key[i]);
      ++kept;
    }
    node_key.resize(kept);
  }
  node_key.resize(nodes);  // the added nodes' keys empty: stale
}

void constraint_tables::merge_equal_sets(kernels::round_arrays& out) {
  // Sets that admit and prefer alike on every group of this round are one
  // set: a toleration of a taint no node has, a selector every node
  // matches (Kubernetes gives every pod tolerations of its own) must not
  // split a class.
  auto& admit = out.constraint_admit;
  auto& prefer = out.constraint_prefer;
  auto const g = static_cast<std::size_t>(out.n_constraint_groups);
  auto row_equal = [&](std::size_t a, std::size_t b) {
    return std::equal(admit.begin() + static_cast<std::ptrdiff_t>(a * g), admit.begin() + static_cast<std::ptrdiff_t>((a + 1) * g),
                      admit.begin() + static_cast<std::ptrdiff_t>(b * g)) &&
           std::equal(prefer.begin() + static_cast<std::ptrdiff_t>(a * g), prefer.begin() + static_cast<std::ptrdiff_t>((a + 1) * g),
                      prefer.begin() + static_cast<std::ptrdiff_t>(b * g));
  };
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> kept_by_hash;  // row hash -> kept sets (new ids)
  std::vector<std::int32_t> to(static_cast<std::size_t>(n_sets));
  std::int32_t kept = 0;
  for (std::int32_t s = 0; s < n_sets; ++s) {
    auto const su = static_cast<std::size_t>(s);
    std::uint64_t h = 1469598103934665603ULL;
    for (std::size_t i = 0; i < g; ++i) {
      h = (h ^ admit[su * g + i]) * 1099511628211ULL;
      h = (h ^ static_cast<std::uint32_t>(prefer[su * g + i])) * 1099511628211ULL;
    }
    auto& same = kept_by_hash[h];
    auto it = std::find_if(same.begin(), same.end(), [&](std::int32_t k) { return row_equal(static_cast<std::size_t>(k), su); });
    if (it != same.end()) {
      to[su] = *it;
      continue;
    }
    auto const ku = static_cast<std::size_t>(kept);
    if (ku != su) {  // rows move down only: row su is read before anything lands on it
      std::copy_n(admit.begin() + static_cast<std::ptrdiff_t>(su * g), g, admit.begin() + static_cast<std::ptrdiff_t>(ku * g));
      std::copy_n(prefer.begin() + static_cast<std::ptrdiff_t>(su * g), g, prefer.begin() + static_cast<std::ptrdiff_t>(ku * g));
      sets[ku] = sets[su];
    }
    same.push_back(kept);
    to[su] = kept++;
  }
  n_sets = kept;
  out.n_constraint_sets = kept;
  sets.resize(static_cast<std::size_t>(kept));
  admit.resize(static_cast<std::size_t>(kept) * g);
  prefer.resize(admit.size());
  for (auto& s : job_set) s = to[static_cast<std::size_t>(s)];
  // One set left that admits every group with no preference: no tables.
  bool const trivial = kept == 1 && std::all_of(admit.begin(), admit.end(), [](std::uint8_t a) { return a == 1; }) &&
                       std::all_of(prefer.begin(), prefer.end(), [](std::int32_t p) { return p == 0; });
  if (trivial) {
    active = false;
    n_sets = out.n_constraint_sets = out.n_constraint_groups = 0;
    for (auto* v : {&out.node_group, &job_set, &prefer, &group_node}) v->clear();
    admit.clear();
    sets.clear();
  }
}

}  // namespace placer
