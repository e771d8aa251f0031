// Wire codec: the envelope check (size, identifier, verifier, header) and the
// conversions between wire tables (schemas/placement.fbs) and the domain
// model (solver/model.hpp, topology/cluster.hpp). Semantic validation of a
// decoded round is placer::validate's job; this file only rejects what the
// domain model cannot represent (unknown enum values, numbers that do not fit).
#include <placer/service/codec.hpp>

#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace placer::service {

namespace {

// The domain enums mirror the wire enums value for value, so conversion is a
// cast once the wire value is known to be in range.
static_assert(static_cast<int>(pool_kind::shared) == static_cast<int>(wire::Pool::Shared));
static_assert(static_cast<int>(pool_kind::inference) == static_cast<int>(wire::Pool::Inference));
static_assert(static_cast<int>(job_kind::batch) == static_cast<int>(wire::JobKind::Batch));
static_assert(static_cast<int>(job_kind::inference) == static_cast<int>(wire::JobKind::Inference));
static_assert(static_cast<int>(topology_mode::required) == static_cast<int>(wire::TopologyMode::Required));
static_assert(static_cast<int>(algorithm::kube_most_allocated) == static_cast<int>(wire::Algorithm::KubeMostAllocated));
static_assert(static_cast<int>(algorithm::first_fit) == static_cast<int>(wire::Algorithm::FirstFit));
static_assert(static_cast<int>(unplaced_reason::deferred) == static_cast<int>(wire::UnplacedReason::Deferred));
static_assert(static_cast<int>(unplaced_reason::quota_exceeded) ==
              static_cast<int>(wire::UnplacedReason::QuotaExceeded));
static_assert(static_cast<int>(unplaced_reason::queue_blocked) == static_cast<int>(wire::UnplacedReason::QueueBlocked));
static_assert(static_cast<int>(queue_order::strict) == static_cast<int>(wire::QueueOrder::Strict));

using fbb_t = flatbuffers::FlatBufferBuilder;
template <class T>
using fb_vector = flatbuffers::Vector<T>;
using string_offsets = std::vector<flatbuffers::Offset<flatbuffers::String>>;

[[noreturn]] void invalid(std::string const& msg) { throw logic_error(error_code::invalid_argument, msg); }

std::string_view view(flatbuffers::String const* s) { return s ? s->string_view() : std::string_view{}; }

/// What an error is about: "metrics", "placement 3", "delta changed[2]",
/// "job 'a'", "pending job 3 ('a')". Formatted only for an error message:
/// the codec runs per node, job and replica every round, and formatting
/// each one's name up front was most of its time and allocations.
class who_t {
 public:
  who_t(char const* what) : what_(what) {}  // NOLINT: a plain name converts
  static who_t indexed(char const* what, std::size_t i) {
    return {what, static_cast<std::int64_t>(i), false, false, {}};
  }
  static who_t subscript(char const* what, std::size_t i) {
    return {what, static_cast<std::int64_t>(i), true, false, {}};
  }
  static who_t named(char const* what, std::string_view name) { return {what, -1, false, true, name}; }
  static who_t item(char const* what, std::size_t i, std::string_view name) {
    return {what, static_cast<std::int64_t>(i), false, true, name};
  }

  [[nodiscard]] std::string str() const {
    std::string s = what_;
    if (index_ >= 0) s += subscript_ ? "[" + std::to_string(index_) + "]" : " " + std::to_string(index_);
    if (named_) s += (index_ >= 0 ? " ('" : " '") + std::string(name_) + (index_ >= 0 ? "')" : "'");
    return s;
  }

 private:
  who_t(char const* what, std::int64_t index, bool subscript, bool named, std::string_view name)
      : what_(what), index_(index), subscript_(subscript), named_(named), name_(name) {}
  char const* what_;
  std::int64_t index_ = -1;  ///< -1: none
  bool subscript_ = false;   ///< the index as "[i]" rather than " i"
  bool named_ = false;
  std::string_view name_;
};

// ------------------------------------------------------------------ decode helpers
//
// Decoders write into existing domain objects and reuse their storage
// (strings, vectors), so a steady stream of similar rounds decoded into the
// same objects allocates nothing.

void str_in(flatbuffers::String const* s, std::string& out) {
  if (s == nullptr) {
    out.clear();
  } else {
    out.assign(s->c_str(), s->size());
  }
}

std::string str(flatbuffers::String const* s) { return s ? s->str() : std::string{}; }

/// Wire enum -> domain enum; an unknown value (a newer peer or a corrupt
/// but verifiable buffer) is rejected naming the field.
template <class Domain, class Wire>
Domain enum_in(Wire v, who_t const& who, char const* field) {
  using raw_t = std::underlying_type_t<Wire>;
  auto const raw = static_cast<raw_t>(v);
  if (raw > static_cast<raw_t>(Wire::MAX)) {
    invalid(who.str() + ": " + field + " has unknown value " + std::to_string(raw));
  }
  return static_cast<Domain>(raw);
}

/// Unsigned wire counts and indices -> int32 domain fields. A value that
/// does not fit cannot be copied faithfully, so it is rejected here rather
/// than wrapped into something the validator would misreport.
std::int32_t u32_in(std::uint32_t v, who_t const& who, char const* field) {
  if (v > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
    invalid(who.str() + ": " + field + " = " + std::to_string(v) + " is out of range");
  }
  return static_cast<std::int32_t>(v);
}

void strings_in(fb_vector<flatbuffers::Offset<flatbuffers::String>> const* v, std::vector<std::string>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t i = 0; i < out.size(); ++i) str_in(v->Get(static_cast<flatbuffers::uoffset_t>(i)), out[i]);
}

template <class To, class From>
void scalars_in(fb_vector<From> const* v, std::vector<To>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<To>(v->Get(static_cast<flatbuffers::uoffset_t>(i)));
}

// ------------------------------------------------------------------ encode helpers

/// Domain integer -> narrower wire integer; refuses to wrap (a negative count
/// would otherwise arrive as four billion).
template <class To, class From>
To narrow(From v, who_t const& who, char const* field) {
  if (!std::in_range<To>(v)) {
    invalid("cannot encode " + who.str() + ": " + field + " = " + std::to_string(v) + " does not fit the wire type");
  }
  return static_cast<To>(v);
}

/// Reply job indices: -1 ("no job") is legal in the domain, so they travel as
/// the two's complement bit pattern and come back unchanged.
std::uint32_t index_out(std::int32_t v) { return static_cast<std::uint32_t>(v); }
std::int32_t index_in(std::uint32_t v) { return static_cast<std::int32_t>(v); }

/// Hot per-GPU arrays are written straight into the builder (no temporary).
template <class To, class From>
flatbuffers::Offset<fb_vector<To>> scalars_out(fbb_t& fbb, std::vector<From> const& v, who_t const& who,
                                               char const* field) {
  To* dst = nullptr;
  auto const off = fbb.CreateUninitializedVector<To>(v.size(), &dst);
  for (std::size_t i = 0; i < v.size(); ++i) flatbuffers::WriteScalar(dst + i, narrow<To>(v[i], who, field));
  return off;
}

/// Empty optional vectors are left out: smaller buffers, and a missing vector
/// decodes as empty.
template <class To, class From>
flatbuffers::Offset<fb_vector<To>> opt_scalars_out(fbb_t& fbb, std::vector<From> const& v, who_t const& who,
                                                   char const* field) {
  return v.empty() ? flatbuffers::Offset<fb_vector<To>>() : scalars_out<To>(fbb, v, who, field);
}

/// `shared`: labels and model names repeat across thousands of nodes and
/// jobs, and go through the builder's pool of shared strings; job names are
/// unique and do not.
flatbuffers::Offset<fb_vector<flatbuffers::Offset<flatbuffers::String>>> strings_out(
    fbb_t& fbb, std::vector<std::string> const& v, bool shared = true) {
  if (v.empty()) return 0;
  string_offsets offs;
  offs.reserve(v.size());
  for (auto const& s : v) offs.push_back(shared ? fbb.CreateSharedString(s) : fbb.CreateString(s));
  return fbb.CreateVector(offs);
}

flatbuffers::Offset<flatbuffers::String> opt_string(fbb_t& fbb, std::string const& s) {
  return s.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(s);
}

flatbuffers::Offset<flatbuffers::String> opt_shared(fbb_t& fbb, std::string const& s) {
  return s.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateSharedString(s);
}

flatbuffers::Offset<wire::Header> header_out(fbb_t& fbb, request_header const& h) {
  // version is the schema default (1) and so is not stored explicitly.
  return wire::CreateHeader(fbb, 1, h.request_id, opt_string(fbb, h.session), h.sent_at_us,
                            opt_string(fbb, h.session_secret));
}

void header_in(wire::Envelope const& env, request_header& h) {
  auto const* w = env.header();
  h.request_id = w ? w->request_id() : 0;
  str_in(w ? w->session() : nullptr, h.session);
  h.sent_at_us = w ? w->sent_at_us() : 0;
  str_in(w ? w->session_secret() : nullptr, h.session_secret);
}

// ------------------------------------------------------------------ cluster

void node_in(wire::Node const& w, who_t const& who, node& n) {
  str_in(w.name(), n.name);
  str_in(w.gpu_model(), n.gpu_model);
  scalars_in(w.gpu_free_milli(), n.gpu_free_milli);
  scalars_in(w.gpu_healthy(), n.gpu_healthy);
  scalars_in(w.gpu_nvlink(), n.gpu_nvlink);
  n.cpu_milli_capacity = w.cpu_milli_capacity();
  n.cpu_milli_free = w.cpu_milli_free();
  n.memory_mib_capacity = w.memory_mib_capacity();
  n.memory_mib_free = w.memory_mib_free();
  n.pool = enum_in<pool_kind>(w.pool(), who, "pool");
  n.loanable = w.loanable();
  n.healthy = w.healthy();
  n.domain = w.domain();
  strings_in(w.labels(), n.labels);
  auto const* taints = w.taints();
  n.taints.resize(taints == nullptr ? 0 : taints->size());
  for (std::size_t k = 0; k < n.taints.size(); ++k) {
    auto const* t = taints->Get(static_cast<flatbuffers::uoffset_t>(k));
    str_in(t->key(), n.taints[k].key);
    str_in(t->value(), n.taints[k].value);
    n.taints[k].effect = enum_in<taint_effect>(t->effect(), who, "taint effect");
  }
}

void nodes_in(fb_vector<flatbuffers::Offset<wire::Node>> const* v, char const* what, std::vector<node>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto const* w = v->Get(static_cast<flatbuffers::uoffset_t>(i));
    node_in(*w, who_t::item(what, i, view(w->name())), out[i]);
  }
}

/// CreateSharedString with a hash map in front, and the last string before
/// that: nodes come in runs of one GPU model, and the builder's own pool is
/// a std::set whose every lookup compares strings in the buffer (with 40
/// labels a node on 12,800 nodes, 92% of encoding the request: 83 ms).
/// The first sight of a string still goes to the builder's pool, so the
/// bytes are the same. The keys point into the round being encoded.
class shared_strings {
 public:
  flatbuffers::Offset<flatbuffers::String> get(fbb_t& fbb, std::string const& s) {
    if (last_.o != 0 && s == last_text_) return last_;
    auto [it, fresh] = seen_.try_emplace(s);
    if (fresh) it->second = fbb.CreateSharedString(s);
    last_text_ = s;
    last_ = it->second;
    return last_;
  }

 private:
  std::unordered_map<std::string_view, flatbuffers::Offset<flatbuffers::String>> seen_;
  std::string_view last_text_;
  flatbuffers::Offset<flatbuffers::String> last_;
};

/// A node's shared strings: its model (`models`), its labels and taints
/// (`texts`); and the node before's labels, which a node mostly repeats in
/// the same places (Kubernetes' feature labels), tried first.
struct node_strings {
  shared_strings models, texts;
  std::vector<std::string_view> last_labels;
  string_offsets last_offsets;
};

flatbuffers::Offset<wire::Node> node_out(fbb_t& fbb, node const& n, who_t const& who, node_strings& pool) {
  auto const name = fbb.CreateString(n.name);
  auto const model = n.gpu_model.empty() ? flatbuffers::Offset<flatbuffers::String>() : pool.models.get(fbb, n.gpu_model);
  // Always written (even for CPU-only nodes) so "no GPUs" is explicit.
  auto const free = scalars_out<std::uint16_t>(fbb, n.gpu_free_milli, who, "gpu_free_milli");
  auto const healthy = opt_scalars_out<std::uint8_t>(fbb, n.gpu_healthy, who, "gpu_healthy");
  auto const nvlink = opt_scalars_out<std::uint8_t>(fbb, n.gpu_nvlink, who, "gpu_nvlink");
  flatbuffers::Offset<fb_vector<flatbuffers::Offset<flatbuffers::String>>> labels;
  if (!n.labels.empty()) {
    string_offsets offs;
    offs.reserve(n.labels.size());
    for (std::size_t k = 0; k < n.labels.size(); ++k) {
      bool const again = k < pool.last_labels.size() && pool.last_labels[k] == n.labels[k];
      offs.push_back(again ? pool.last_offsets[k] : pool.texts.get(fbb, n.labels[k]));
    }
    labels = fbb.CreateVector(offs);
    pool.last_labels.assign(n.labels.begin(), n.labels.end());
    pool.last_offsets.swap(offs);
  }
  flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::Taint>>> taints;
  if (!n.taints.empty()) {
    std::vector<flatbuffers::Offset<wire::Taint>> offs;
    for (auto const& t : n.taints) {
      auto const value = t.value.empty() ? flatbuffers::Offset<flatbuffers::String>() : pool.texts.get(fbb, t.value);
      offs.push_back(wire::CreateTaint(fbb, pool.texts.get(fbb, t.key), value, static_cast<wire::TaintEffect>(t.effect)));
    }
    taints = fbb.CreateVector(offs);
  }
  return wire::CreateNode(fbb, name, model, free, healthy, nvlink, n.cpu_milli_capacity, n.cpu_milli_free,
                          n.memory_mib_capacity, n.memory_mib_free, static_cast<wire::Pool>(n.pool), n.loanable,
                          n.healthy, n.domain, labels, taints);
}

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::Node>>> nodes_out(fbb_t& fbb, std::vector<node> const& v,
                                                                          char const* what) {
  std::vector<flatbuffers::Offset<wire::Node>> offs;
  offs.reserve(v.size());
  node_strings pool;
  for (std::size_t i = 0; i < v.size(); ++i) {
    offs.push_back(node_out(fbb, v[i], who_t::item(what, i, v[i].name), pool));
  }
  return fbb.CreateVector(offs);
}

flatbuffers::Offset<wire::Topology> topology_out(fbb_t& fbb, topology const& t) {
  if (t.level_names.empty() && t.domains.empty()) return 0;
  auto const levels = strings_out(fbb, t.level_names);
  std::vector<flatbuffers::Offset<wire::TopologyDomain>> doms;
  doms.reserve(t.domains.size());
  for (std::size_t d = 0; d < t.domains.size(); ++d) {
    auto const& dom = t.domains[d];
    doms.push_back(wire::CreateTopologyDomain(
        fbb, opt_string(fbb, dom.name), narrow<std::uint8_t>(dom.level, who_t::indexed("topology domain", d), "level"),
        dom.parent));
  }
  return wire::CreateTopology(fbb, levels, doms.empty() ? 0 : fbb.CreateVector(doms));
}

void topology_in(wire::Topology const* w, topology& t) {
  strings_in(w ? w->level_names() : nullptr, t.level_names);
  auto const* doms = w ? w->domains() : nullptr;
  t.domains.resize(doms == nullptr ? 0 : doms->size());
  for (std::size_t k = 0; k < t.domains.size(); ++k) {
    auto const* d = doms->Get(static_cast<flatbuffers::uoffset_t>(k));
    str_in(d->name(), t.domains[k].name);
    t.domains[k].level = d->level();
    t.domains[k].parent = d->parent();
  }
}

void cluster_in(wire::Cluster const& w, cluster& c) {
  c.epoch = w.epoch();
  nodes_in(w.nodes(), "node", c.nodes);
  topology_in(w.topology(), c.topo);
}

flatbuffers::Offset<wire::ClusterDelta> delta_out(fbb_t& fbb, cluster_delta const& d) {
  auto const added = d.added.empty() ? 0 : nodes_out(fbb, d.added, "delta added node");
  auto const removed = opt_scalars_out<std::uint32_t>(fbb, d.removed, "delta", "removed");
  std::vector<flatbuffers::Offset<wire::NodeUpdate>> changed;
  changed.reserve(d.changed.size());
  node_strings pool;
  for (std::size_t k = 0; k < d.changed.size(); ++k) {
    auto const who = who_t::subscript("delta changed", k);
    auto const n = node_out(fbb, d.changed[k].value, who, pool);
    changed.push_back(wire::CreateNodeUpdate(fbb, narrow<std::uint32_t>(d.changed[k].index, who, "index"), n));
  }
  return wire::CreateClusterDelta(fbb, d.base_epoch, d.new_epoch, added, removed,
                                  changed.empty() ? 0 : fbb.CreateVector(changed));
}

void delta_in(wire::ClusterDelta const& w, cluster_delta& d) {
  d.base_epoch = w.base_epoch();
  d.new_epoch = w.new_epoch();
  nodes_in(w.added(), "delta added node", d.added);
  auto const* r = w.removed();
  d.removed.resize(r == nullptr ? 0 : r->size());
  for (std::size_t k = 0; k < d.removed.size(); ++k) {
    d.removed[k] = u32_in(r->Get(static_cast<flatbuffers::uoffset_t>(k)), "delta", "removed[]");
  }
  auto const* c = w.changed();
  d.changed.resize(c == nullptr ? 0 : c->size());
  for (std::size_t k = 0; k < d.changed.size(); ++k) {
    auto const* u = c->Get(static_cast<flatbuffers::uoffset_t>(k));
    auto const who = who_t::subscript("delta changed", k);
    if (u->node() == nullptr) invalid(who.str() + " has no node");
    d.changed[k].index = u32_in(u->index(), who, "index");
    node_in(*u->node(), who, d.changed[k].value);
  }
}

// ------------------------------------------------------------------ jobs

demand demand_in(wire::Demand const* w, who_t const& who) {
  if (w == nullptr) invalid(who.str() + " has no demand");
  demand d;
  d.gpus = w->gpus();
  d.gpu_milli = w->gpu_milli();
  d.cpu_milli = w->cpu_milli();
  d.memory_mib = w->memory_mib();
  return d;
}

flatbuffers::Offset<wire::Demand> demand_out(fbb_t& fbb, demand const& d, who_t const& who) {
  return wire::CreateDemand(fbb, narrow<std::uint16_t>(d.gpus, who, "demand.gpus"),
                            narrow<std::uint16_t>(d.gpu_milli, who, "demand.gpu_milli"), d.cpu_milli, d.memory_mib);
}

// ------------------------------------------------------------------ constraints

void term_in(wire::SelectorTerm const* w, who_t const& who, selector_term& t) {
  auto const* v = w != nullptr ? w->match_expressions() : nullptr;
  t.match.resize(v == nullptr ? 0 : v->size());
  for (std::size_t k = 0; k < t.match.size(); ++k) {
    auto const* e = v->Get(static_cast<flatbuffers::uoffset_t>(k));
    str_in(e->key(), t.match[k].key);
    t.match[k].op = enum_in<selector_op>(e->operator_(), who, "selector operator");
    strings_in(e->values(), t.match[k].values);
  }
}

void constraints_in(wire::NodeConstraints const* w, who_t const& who, node_constraints& c) {
  if (w == nullptr) {
    c.node_selector.clear();
    c.required.clear();
    c.preferred.clear();
    c.tolerations.clear();
    return;
  }
  strings_in(w->node_selector(), c.node_selector);
  auto const* req = w->required();
  c.required.resize(req == nullptr ? 0 : req->size());
  for (std::size_t k = 0; k < c.required.size(); ++k) {
    term_in(req->Get(static_cast<flatbuffers::uoffset_t>(k)), who, c.required[k]);
  }
  auto const* pref = w->preferred();
  c.preferred.resize(pref == nullptr ? 0 : pref->size());
  for (std::size_t k = 0; k < c.preferred.size(); ++k) {
    auto const* p = pref->Get(static_cast<flatbuffers::uoffset_t>(k));
    c.preferred[k].weight = p->weight();
    term_in(p->preference(), who, c.preferred[k].term);
  }
  auto const* tol = w->tolerations();
  c.tolerations.resize(tol == nullptr ? 0 : tol->size());
  for (std::size_t k = 0; k < c.tolerations.size(); ++k) {
    auto const* t = tol->Get(static_cast<flatbuffers::uoffset_t>(k));
    auto& o = c.tolerations[k];
    str_in(t->key(), o.key);
    o.op = enum_in<toleration_op>(t->operator_(), who, "toleration operator");
    str_in(t->value(), o.value);
    auto const effect = enum_in<std::uint8_t>(t->effect(), who, "toleration effect");
    o.effect = static_cast<std::int8_t>(effect) - 1;  // All = 0 -> -1, NoSchedule = 1 -> 0, ...
  }
}

flatbuffers::Offset<wire::SelectorTerm> term_out(fbb_t& fbb, selector_term const& t) {
  std::vector<flatbuffers::Offset<wire::SelectorRequirement>> offs;
  offs.reserve(t.match.size());
  for (auto const& e : t.match) {
    offs.push_back(wire::CreateSelectorRequirement(fbb, fbb.CreateSharedString(e.key),
                                                   static_cast<wire::SelectorOperator>(e.op),
                                                   strings_out(fbb, e.values)));
  }
  return wire::CreateSelectorTerm(fbb, offs.empty() ? 0 : fbb.CreateVector(offs));
}

flatbuffers::Offset<wire::NodeConstraints> constraints_out(fbb_t& fbb, node_constraints const& c) {
  if (c.empty()) return 0;
  auto const selector = strings_out(fbb, c.node_selector);
  std::vector<flatbuffers::Offset<wire::SelectorTerm>> req;
  for (auto const& t : c.required) req.push_back(term_out(fbb, t));
  std::vector<flatbuffers::Offset<wire::PreferredTerm>> pref;
  for (auto const& p : c.preferred) pref.push_back(wire::CreatePreferredTerm(fbb, p.weight, term_out(fbb, p.term)));
  std::vector<flatbuffers::Offset<wire::Toleration>> tol;
  for (auto const& t : c.tolerations) {
    tol.push_back(wire::CreateToleration(fbb, opt_shared(fbb, t.key), static_cast<wire::TolerationOperator>(t.op),
                                         opt_shared(fbb, t.value), static_cast<wire::TolerationEffect>(t.effect + 1)));
  }
  return wire::CreateNodeConstraints(fbb, selector, req.empty() ? 0 : fbb.CreateVector(req),
                                     pref.empty() ? 0 : fbb.CreateVector(pref), tol.empty() ? 0 : fbb.CreateVector(tol));
}

void job_in(wire::Job const& w, who_t const& who, job& j) {
  str_in(w.name(), j.name);
  j.kind = enum_in<job_kind>(w.kind(), who, "kind");
  j.priority = w.priority();
  str_in(w.queue(), j.queue);
  j.replicas = u32_in(w.replicas(), who, "replicas");
  j.per_replica = demand_in(w.demand(), who);
  strings_in(w.allowed_gpu_models(), j.allowed_gpu_models);
  j.gang = w.gang();
  j.topology_level = w.topology_level();
  j.topo_mode = enum_in<topology_mode>(w.topology_mode(), who, "topology_mode");
  j.network_sensitivity = w.network_sensitivity();
  j.min_replicas = u32_in(w.min_replicas(), who, "min_replicas");
  j.max_replicas = u32_in(w.max_replicas(), who, "max_replicas");
  j.preemptible = w.preemptible();
  j.submit_time = w.submit_time();
  j.estimated_duration = w.estimated_duration();
  constraints_in(w.constraints(), who, j.constraints);
  j.distinct_nodes = w.distinct_nodes();
}

flatbuffers::Offset<wire::Job> job_out(fbb_t& fbb, job const& j, who_t const& who) {
  auto const name = fbb.CreateString(j.name);
  auto const queue = j.queue.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateSharedString(j.queue);
  auto const dem = demand_out(fbb, j.per_replica, who);
  auto const models = strings_out(fbb, j.allowed_gpu_models);
  auto const cons = constraints_out(fbb, j.constraints);
  return wire::CreateJob(fbb, name, static_cast<wire::JobKind>(j.kind), j.priority, queue,
                         narrow<std::uint32_t>(j.replicas, who, "replicas"), dem, models, j.gang,
                         narrow<std::int8_t>(j.topology_level, who, "topology_level"),
                         static_cast<wire::TopologyMode>(j.topo_mode), j.network_sensitivity,
                         narrow<std::uint32_t>(j.min_replicas, who, "min_replicas"),
                         narrow<std::uint32_t>(j.max_replicas, who, "max_replicas"), j.preemptible, j.submit_time,
                         j.estimated_duration, cons, j.distinct_nodes);
}

void replicas_in(fb_vector<flatbuffers::Offset<wire::ReplicaPlacement>> const* v, who_t const& who,
                 std::vector<replica_placement>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    auto const* w = v->Get(static_cast<flatbuffers::uoffset_t>(k));
    out[k].node = u32_in(w->node(), who, "replica node");
    scalars_in(w->gpus(), out[k].gpus);
    out[k].gpu_milli = w->gpu_milli();
  }
}

/// The replicas' table offsets before they become a vector: scratch that
/// one encoder call passes to every replicas_out it makes (a reply has a
/// replica list per placement; one vector each was most of its allocations).
using replica_offsets = std::vector<flatbuffers::Offset<wire::ReplicaPlacement>>;

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::ReplicaPlacement>>> replicas_out(
    fbb_t& fbb, std::vector<replica_placement> const& v, who_t const& who, replica_offsets& offs) {
  offs.clear();
  for (auto const& r : v) {
    auto const gpus = scalars_out<std::uint8_t>(fbb, r.gpus, who, "replica gpus");
    offs.push_back(wire::CreateReplicaPlacement(fbb, narrow<std::uint32_t>(r.node, who, "replica node"), gpus,
                                                narrow<std::uint16_t>(r.gpu_milli, who, "replica gpu_milli")));
  }
  return fbb.CreateVector(offs);
}

void running_in(wire::RunningJob const& w, who_t const& who, running_job& r) {
  str_in(w.name(), r.name);
  r.kind = enum_in<job_kind>(w.kind(), who, "kind");
  r.priority = w.priority();
  r.per_replica = demand_in(w.demand(), who);
  replicas_in(w.replicas(), who, r.replicas);
  r.gang = w.gang();
  r.preemptible = w.preemptible();
  r.loaned = w.loaned();
  r.min_replicas = u32_in(w.min_replicas(), who, "min_replicas");
  r.max_replicas = u32_in(w.max_replicas(), who, "max_replicas");
  r.network_sensitivity = w.network_sensitivity();
  r.start_time = w.start_time();
  r.estimated_end = w.estimated_end();
  r.last_checkpoint = w.last_checkpoint();
  constraints_in(w.constraints(), who, r.constraints);
  str_in(w.queue(), r.queue);
}

flatbuffers::Offset<wire::RunningJob> running_out(fbb_t& fbb, running_job const& r, who_t const& who,
                                                 replica_offsets& scratch) {
  auto const name = fbb.CreateString(r.name);
  auto const dem = demand_out(fbb, r.per_replica, who);
  auto const reps = replicas_out(fbb, r.replicas, who, scratch);
  auto const cons = constraints_out(fbb, r.constraints);
  auto const queue = r.queue.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateSharedString(r.queue);
  return wire::CreateRunningJob(fbb, name, static_cast<wire::JobKind>(r.kind), r.priority, dem, reps, r.gang,
                                r.preemptible, r.loaned, narrow<std::uint32_t>(r.min_replicas, who, "min_replicas"),
                                r.start_time, r.estimated_end, r.last_checkpoint,
                                narrow<std::uint32_t>(r.max_replicas, who, "max_replicas"), r.network_sensitivity, cons, queue);
}

flatbuffers::Offset<wire::Policy> policy_out(fbb_t& fbb, policy const& p) {
  auto const w = wire::CreateWeights(fbb, p.w.binpack, p.w.fragmentation, p.w.topology, p.w.pool_affinity, p.w.scarcity,
                                     p.w.affinity);
  auto const& q = p.queue;
  auto const qp = wire::CreateQueuePolicy(fbb, static_cast<wire::BackfillMode>(q.backfill), q.max_reservations,
                                          q.preemption, q.loaning, q.reclaim_nodes, q.elastic, q.delay_scheduling,
                                          q.sensitivity_threshold, q.delay_timer_max, q.network_preemption,
                                          q.auto_reclaim, q.preempt_max_lost_s);
  auto const age = p.age == aging{} ? flatbuffers::Offset<wire::Aging>()
                                    : wire::CreateAging(fbb, p.age.weight, p.age.max_age_s, p.age.cross_priority);
  return wire::CreatePolicy(fbb, static_cast<wire::Algorithm>(p.algo), w, 0, qp, p.stacking,
                            static_cast<wire::QueueOrder>(p.order), age);
}

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::ScaleChange>>> scale_out(
    fbb_t& fbb, std::vector<scale_change> const& v, char const* what) {
  if (v.empty()) return 0;
  std::vector<flatbuffers::Offset<wire::ScaleChange>> offs;
  offs.reserve(v.size());
  replica_offsets scratch;
  for (std::size_t k = 0; k < v.size(); ++k) {
    auto const job = fbb.CreateString(v[k].job);
    auto const reps = replicas_out(fbb, v[k].replicas, who_t::indexed(what, k), scratch);
    auto const reason = opt_string(fbb, v[k].reason);
    offs.push_back(wire::CreateScaleChange(fbb, job, reps, reason));
  }
  return fbb.CreateVector(offs);
}

void scale_in(fb_vector<flatbuffers::Offset<wire::ScaleChange>> const* v, char const* what,
              std::vector<scale_change>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    auto const* c = v->Get(static_cast<flatbuffers::uoffset_t>(k));
    str_in(c->job(), out[k].job);
    replicas_in(c->replicas(), who_t::indexed(what, k), out[k].replicas);
    str_in(c->reason(), out[k].reason);
  }
}

void job_list_in(fb_vector<flatbuffers::Offset<wire::Job>> const* v, char const* what, std::vector<job>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto const* w = v->Get(static_cast<flatbuffers::uoffset_t>(i));
    job_in(*w, who_t::item(what, i, view(w->name())), out[i]);
  }
}

void running_list_in(fb_vector<flatbuffers::Offset<wire::RunningJob>> const* v, char const* what,
                     std::vector<running_job>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto const* w = v->Get(static_cast<flatbuffers::uoffset_t>(i));
    running_in(*w, who_t::item(what, i, view(w->name())), out[i]);
  }
}

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::Job>>> job_list_out(fbb_t& fbb, std::vector<job> const& v,
                                                                            char const* what) {
  std::vector<flatbuffers::Offset<wire::Job>> offs;
  offs.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) offs.push_back(job_out(fbb, v[i], who_t::item(what, i, v[i].name)));
  return fbb.CreateVector(offs);
}

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::RunningJob>>> running_list_out(
    fbb_t& fbb, std::vector<running_job> const& v, char const* what) {
  std::vector<flatbuffers::Offset<wire::RunningJob>> offs;
  offs.reserve(v.size());
  replica_offsets scratch;
  for (std::size_t i = 0; i < v.size(); ++i) {
    offs.push_back(running_out(fbb, v[i], who_t::item(what, i, v[i].name), scratch));
  }
  return fbb.CreateVector(offs);
}

// ------------------------------------------------------------------ job deltas

/// `epochs`: the request's cluster delta, whose epochs the job delta shares.
flatbuffers::Offset<wire::JobDelta> job_delta_out(fbb_t& fbb, cluster_delta const& epochs, job_delta const& d) {
  auto const added = d.added.empty() ? 0 : job_list_out(fbb, d.added, "job delta added");
  auto const removed = strings_out(fbb, d.removed, false);
  auto const started = d.started.empty() ? 0 : running_list_out(fbb, d.started, "job delta started");
  auto const finished = strings_out(fbb, d.finished, false);
  return wire::CreateJobDelta(fbb, epochs.base_epoch, epochs.new_epoch, added, removed, started, finished);
}

void job_delta_in(wire::JobDelta const& w, job_delta& d) {
  job_list_in(w.added(), "job delta added", d.added);
  strings_in(w.removed(), d.removed);
  running_list_in(w.started(), "job delta started", d.started);
  strings_in(w.finished(), d.finished);
}

char const* body_name(wire::Body b) {
  char const* n = wire::EnumNameBody(b);
  return (n != nullptr && *n != '\0') ? n : "unknown";
}

}  // namespace

// ------------------------------------------------------------------ envelope

envelope_check check_envelope(void const* data, std::size_t size, std::size_t max_bytes) {
  envelope_check out;
  auto fail = [&](wire::ErrorCode code, std::string msg) {
    out.envelope = nullptr;
    out.code = code;
    out.message = std::move(msg);
    return out;
  };
  // Root offset (4 bytes) + file identifier (4 bytes) is the smallest
  // prefix the identifier check may read.
  if (data == nullptr || size < 8) {
    return fail(wire::ErrorCode::Malformed, "message of " + std::to_string(size) + " bytes is too short");
  }
  if (size > max_bytes) {
    return fail(wire::ErrorCode::ResourceExhausted,
                "message of " + std::to_string(size) + " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE) {  // the verifier asserts on this
    return fail(wire::ErrorCode::ResourceExhausted, "message of " + std::to_string(size) +
                                                        " bytes exceeds the FlatBuffers limit of " +
                                                        std::to_string(FLATBUFFERS_MAX_BUFFER_SIZE - 1));
  }
  if (!wire::EnvelopeBufferHasIdentifier(data)) {
    return fail(wire::ErrorCode::UnknownSchema, "not a Placer message (file identifier is not \"PLCR\")");
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 64;
  // A 100k-GPU round is ~12.5k nodes plus jobs and replicas: far below this,
  // yet a bound on the verifier's work for hostile input.
  opts.max_tables = 50'000'000;
  flatbuffers::Verifier verifier(static_cast<std::uint8_t const*>(data), size, opts);
  if (!wire::VerifyEnvelopeBuffer(verifier)) {
    return fail(wire::ErrorCode::Malformed, "message of " + std::to_string(size) +
                                                " bytes failed FlatBuffers verification");
  }
  auto const* env = wire::GetEnvelope(data);
  auto const* header = env->header();
  if (header == nullptr) return fail(wire::ErrorCode::UnknownSchema, "message has no header");
  if (header->version() != 1) {
    return fail(wire::ErrorCode::UnknownSchema,
                "unsupported protocol version " + std::to_string(header->version()) + " (this build speaks 1)");
  }
  auto const body = env->body_type();
  if (body == wire::Body::NONE) return fail(wire::ErrorCode::InvalidArgument, "message has no body");
  if (static_cast<std::uint8_t>(body) > static_cast<std::uint8_t>(wire::Body::MAX)) {
    // A union member this build does not know: a newer schema.
    return fail(wire::ErrorCode::UnknownSchema,
                "unknown body type " + std::to_string(static_cast<unsigned>(body)));
  }
  if (env->body() == nullptr) {
    return fail(wire::ErrorCode::InvalidArgument, std::string("message has body type ") + body_name(body) +
                                                      " but no body");
  }
  out.envelope = env;
  return out;
}

// ------------------------------------------------------------------ request

void decode_request(wire::Envelope const& env, decoded_request& out) {
  auto const* req = env.body_as_ScheduleRequest();
  if (req == nullptr) {
    invalid(std::string("message body is ") + body_name(env.body_type()) + ", expected ScheduleRequest");
  }
  header_in(env, out.header);
  auto const* c = req->cluster();
  auto const* d = req->delta();
  auto const* jd = req->job_delta();
  if (c != nullptr && d != nullptr) invalid("request has both cluster and delta (send exactly one)");
  if (c == nullptr && d == nullptr && jd == nullptr) invalid("request has neither cluster nor delta nor job_delta");
  if (jd != nullptr) {
    // Which jobs would the round have? Rather than guess, refuse.
    if (c != nullptr) invalid("request has both cluster and job_delta (a full cluster comes with full job lists)");
    if (req->pending() != nullptr || req->running() != nullptr) {
      invalid("request has both job_delta and pending/running lists (send one or the other)");
    }
    if (d != nullptr && (d->base_epoch() != jd->base_epoch() || d->new_epoch() != jd->new_epoch())) {
      invalid("job_delta moves epoch " + std::to_string(jd->base_epoch()) + " to " + std::to_string(jd->new_epoch()) +
              " but delta " + std::to_string(d->base_epoch()) + " to " + std::to_string(d->new_epoch()) +
              " (a request moves the whole session by one step)");
    }
  }
  if (c != nullptr) {
    out.delta.reset();
    cluster_in(*c, out.input.state);
  } else {
    if (!out.delta) out.delta.emplace();
    if (d != nullptr) {
      delta_in(*d, *out.delta);
    } else {  // only a job delta: the cluster moves to its epoch unchanged
      *out.delta = {jd->base_epoch(), jd->new_epoch(), {}, {}, {}};
    }
  }
  if (jd != nullptr) {
    if (!out.jobs) out.jobs.emplace();
    job_delta_in(*jd, *out.jobs);
  } else {
    out.jobs.reset();
    job_list_in(req->pending(), "pending job", out.input.pending);
    running_list_in(req->running(), "running job", out.input.running);
  }
  out.input.pol = decode_policy(req->policy());
  decode_queues(req->queues(), out.input.queues);
  out.input.now = req->now();
  out.input.deadline_us = req->deadline_us();
}

decoded_request decode_request(wire::Envelope const& env) {
  decoded_request out;
  decode_request(env, out);
  return out;
}

void encode_request(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, round_input const& in,
                    cluster_delta const* delta, job_delta const* jobs) {
  if (jobs != nullptr && delta == nullptr) invalid("cannot encode a job delta without a cluster delta (its epochs)");
  fbb.Clear();
  flatbuffers::Offset<wire::Cluster> c = 0;
  flatbuffers::Offset<wire::ClusterDelta> d = 0;
  if (delta == nullptr) {
    c = encode_cluster(fbb, in.state);
  } else if (jobs == nullptr || !delta->added.empty() || !delta->removed.empty() || !delta->changed.empty()) {
    d = delta_out(fbb, *delta);
  }
  flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::Job>>> pending = 0;
  flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::RunningJob>>> running = 0;
  flatbuffers::Offset<wire::JobDelta> jd = 0;
  if (jobs != nullptr) {
    jd = job_delta_out(fbb, *delta, *jobs);
  } else {
    pending = job_list_out(fbb, in.pending, "pending job");
    running = running_list_out(fbb, in.running, "running job");
  }
  auto const pol = policy_out(fbb, in.pol);
  auto const queues = encode_queues(fbb, in.queues);
  auto const req =
      wire::CreateScheduleRequest(fbb, c, d, pending, running, pol, in.now, in.deadline_us, jd, queues);
  auto const hdr = header_out(fbb, h);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::ScheduleRequest, req.Union()));
}

// ------------------------------------------------------------------ reply

void encode_reply(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, round_result const& r,
                  round_input const& in, char const* encode_stage) {
  auto const t0 = std::chrono::steady_clock::now();
  fbb.Clear();
  auto job_name = [&](std::int32_t j) -> flatbuffers::Offset<flatbuffers::String> {
    // Names are a convenience for readers of the reply; an index outside
    // the request (never produced by the solver) just goes without one.
    if (j < 0 || static_cast<std::size_t>(j) >= in.pending.size()) return 0;
    return fbb.CreateString(in.pending[j].name);
  };
  auto const status = wire::CreateStatus(fbb, wire::ErrorCode::Ok);

  std::vector<flatbuffers::Offset<wire::Placement>> placements;
  placements.reserve(r.placements.size());
  replica_offsets scratch;
  for (std::size_t k = 0; k < r.placements.size(); ++k) {
    auto const& p = r.placements[k];
    auto const name = job_name(p.job);
    auto const reps = replicas_out(fbb, p.replicas, who_t::indexed("placement", k), scratch);
    placements.push_back(wire::CreatePlacement(fbb, index_out(p.job), name, reps));
  }
  std::vector<flatbuffers::Offset<wire::Preemption>> preemptions;
  preemptions.reserve(r.preemptions.size());
  for (auto const& p : r.preemptions) {
    auto const job = fbb.CreateString(p.job);
    auto const reason = opt_string(fbb, p.reason);
    preemptions.push_back(wire::CreatePreemption(fbb, job, reason, index_out(p.for_job), p.lost_work));
  }
  std::vector<flatbuffers::Offset<wire::Reservation>> reservations;
  reservations.reserve(r.reservations.size());
  for (std::size_t k = 0; k < r.reservations.size(); ++k) {
    auto const& res = r.reservations[k];
    auto const nodes = scalars_out<std::uint32_t>(fbb, res.nodes, who_t::indexed("reservation", k), "nodes");
    reservations.push_back(wire::CreateReservation(fbb, index_out(res.job), nodes, res.start_time));
  }
  std::vector<flatbuffers::Offset<wire::Unplaced>> unplaced;
  unplaced.reserve(r.unplaced_jobs.size());
  std::vector<flatbuffers::Offset<wire::ExclusionCount>> exclusion_offs;
  for (auto const& u : r.unplaced_jobs) {
    auto const name = job_name(u.job);
    auto const detail = opt_string(fbb, u.detail);
    auto const& e = u.why;
    flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::ExclusionCount>>> excluded;
    if (!e.excluded.empty()) {
      auto& offs = exclusion_offs;  // one buffer for the whole reply
      offs.clear();
      for (auto const& x : e.excluded) {
        offs.push_back(wire::CreateExclusionCount(fbb, static_cast<wire::NodeExclusion>(x.reason),
                                                  narrow<std::uint32_t>(x.nodes, "unplaced", "excluded nodes"),
                                                  opt_shared(fbb, x.detail)));
      }
      excluded = fbb.CreateVector(offs);
    }
    unplaced.push_back(wire::CreateUnplaced(
        fbb, index_out(u.job), name, static_cast<wire::UnplacedReason>(u.reason), detail,
        narrow<std::uint32_t>(e.nodes, "unplaced", "nodes"), excluded,
        narrow<std::uint32_t>(e.replicas_fit, "unplaced", "replicas_fit"),
        narrow<std::uint32_t>(e.replicas_required, "unplaced", "replicas_required"), opt_shared(fbb, e.best_domain),
        narrow<std::uint32_t>(e.best_domain_fit, "unplaced", "best_domain_fit"), e.outbid, e.outbid_priority,
        narrow<std::uint32_t>(e.replicas_fit_empty, "unplaced", "replicas_fit_empty"),
        narrow<std::uint32_t>(e.best_domain_fit_empty, "unplaced", "best_domain_fit_empty"), e.never));
  }
  auto const& m = r.metrics;
  auto const metrics = wire::CreateRoundMetrics(
      fbb, m.gar_before, m.gar_after, m.gfr_before, m.gfr_after, m.frag_ratio_before, m.frag_ratio_after,
      narrow<std::uint32_t>(m.jobs_placed, "metrics", "jobs_placed"),
      narrow<std::uint32_t>(m.replicas_placed, "metrics", "replicas_placed"), m.gpu_milli_placed);
  auto const outs = scale_out(fbb, r.scale_outs, "scale-out");
  auto const ins = scale_out(fbb, r.scale_ins, "scale-in");
  auto const reclaimed =
      r.reclaimed_nodes.empty() ? 0 : scalars_out<std::uint32_t>(fbb, r.reclaimed_nodes, "reply", "reclaimed_nodes");
  std::vector<flatbuffers::Offset<wire::DelayTimer>> timers;
  timers.reserve(r.delay_timers.size());
  for (auto const& t : r.delay_timers) {
    timers.push_back(wire::CreateDelayTimer(fbb, fbb.CreateString(t.job_class), t.timer, t.observed_wait,
                                            narrow<std::uint32_t>(t.samples, "delay timer", "samples")));
  }
  auto const placements_v = placements.empty() ? 0 : fbb.CreateVector(placements);
  auto const preemptions_v = preemptions.empty() ? 0 : fbb.CreateVector(preemptions);
  auto const reservations_v = reservations.empty() ? 0 : fbb.CreateVector(reservations);
  auto const unplaced_v = unplaced.empty() ? 0 : fbb.CreateVector(unplaced);
  auto const timers_v = timers.empty() ? 0 : fbb.CreateVector(timers);
  auto const backend = opt_string(fbb, r.backend);
  // The timing list comes last so that the encode stage covers everything
  // but itself and the few bytes after it.
  std::vector<flatbuffers::Offset<wire::StageTiming>> timing;
  timing.reserve(r.timing.size() + 1);
  for (auto const& t : r.timing) {
    timing.push_back(wire::CreateStageTiming(fbb, fbb.CreateString(t.stage), t.micros, static_cast<std::uint64_t>(t.calls),
                                             static_cast<std::uint64_t>(t.waits), static_cast<std::uint64_t>(t.bytes_up),
                                             static_cast<std::uint64_t>(t.bytes_down)));
  }
  if (encode_stage != nullptr) {
    double const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    timing.push_back(wire::CreateStageTiming(fbb, fbb.CreateString(encode_stage), us));
  }
  auto const reply = wire::CreateScheduleReply(fbb, status, r.epoch, placements_v, preemptions_v, reservations_v,
                                               unplaced_v, metrics, timing.empty() ? 0 : fbb.CreateVector(timing),
                                               backend, outs, ins, reclaimed, timers_v);
  auto const hdr = header_out(fbb, h);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::ScheduleReply, reply.Union()));
}

void encode_error(flatbuffers::FlatBufferBuilder& fbb, request_header const& h, wire::ErrorCode code,
                  std::string const& message, std::uint32_t retry_after_ms) {
  fbb.Clear();
  auto const err = wire::CreateError(fbb, code, opt_string(fbb, message), retry_after_ms);
  auto const hdr = header_out(fbb, h);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::Error, err.Union()));
}

void encode_health_request(fbb_t& fbb, request_header const& h) {
  fbb.Clear();
  auto const body = wire::CreateHealthRequest(fbb);
  auto const hdr = header_out(fbb, h);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::HealthRequest, body.Union()));
}

void encode_health_reply(fbb_t& fbb, request_header const& h, health_status const& s) {
  fbb.Clear();
  std::vector<flatbuffers::Offset<wire::WorkerHealth>> ws;
  ws.reserve(s.worker_states.size());
  for (auto const& w : s.worker_states) {
    ws.push_back(wire::CreateWorkerHealth(fbb, w.busy, w.busy_ms, w.queued, w.oldest_queued_ms, w.rounds,
                                          opt_string(fbb, w.backend), w.degraded, opt_string(fbb, w.degraded_reason)));
  }
  auto const workers = fbb.CreateVector(ws);
  auto causes = [&](std::vector<std::pair<std::string, std::uint64_t>> const& v) {
    std::vector<flatbuffers::Offset<wire::CauseCount>> out;
    out.reserve(v.size());
    for (auto const& [cause, n] : v) out.push_back(wire::CreateCauseCount(fbb, fbb.CreateString(cause), n));
    return fbb.CreateVector(out);
  };
  auto const closed = causes(s.connections_closed);
  auto const refused = causes(s.requests_refused);
  auto const body = wire::CreateHealthReply(
      fbb, opt_string(fbb, s.backend), s.workers, s.uptime_s, s.requests, s.rounds_ok, s.errors, s.ready,
      opt_string(fbb, s.not_ready), s.stuck_after_ms, workers, s.queued_rounds, s.queued_bytes, s.refused_busy,
      s.dropped_expired, s.dropped_disconnected, s.handshakes_denied, s.sessions_evicted, s.session_bytes, s.sessions,
      s.degraded, s.device_faults, s.connections, s.held_bytes, s.memory_budget, s.heartbeats, closed, refused);
  auto const hdr = header_out(fbb, h);
  wire::FinishEnvelopeBuffer(fbb, wire::CreateEnvelope(fbb, hdr, wire::Body::HealthReply, body.Union()));
}

health_status decode_health_reply(wire::Envelope const& env) {
  if (auto const* e = env.body_as_Error()) {
    invalid(std::string("health probe answered with ") + error_code_name(e->code()) + ": " + str(e->message()));
  }
  auto const* r = env.body_as_HealthReply();
  if (r == nullptr) invalid(std::string("message body is ") + body_name(env.body_type()) + ", expected HealthReply");
  health_status s;
  s.backend = str(r->backend());
  s.workers = r->workers();
  s.uptime_s = r->uptime_s();
  s.requests = r->requests();
  s.rounds_ok = r->rounds_ok();
  s.errors = r->errors();
  s.ready = r->ready();
  s.not_ready = str(r->not_ready());
  s.stuck_after_ms = r->stuck_after_ms();
  if (auto const* ws = r->worker_states()) {
    for (auto const* w : *ws) {
      if (w != nullptr) {
        s.worker_states.push_back({w->busy(), w->busy_ms(), w->queued(), w->oldest_queued_ms(), w->rounds(),
                                   str(w->backend()), w->degraded(), str(w->degraded_reason())});
      }
    }
  }
  s.queued_rounds = r->queued_rounds();
  s.queued_bytes = r->queued_bytes();
  s.refused_busy = r->refused_busy();
  s.dropped_expired = r->dropped_expired();
  s.dropped_disconnected = r->dropped_disconnected();
  s.handshakes_denied = r->handshakes_denied();
  s.sessions_evicted = r->sessions_evicted();
  s.session_bytes = r->session_bytes();
  s.sessions = r->sessions();
  s.degraded = r->degraded();
  s.device_faults = r->device_faults();
  s.connections = r->connections();
  s.held_bytes = r->held_bytes();
  s.memory_budget = r->memory_budget();
  s.heartbeats = r->heartbeats();
  auto causes = [](auto const* v, std::vector<std::pair<std::string, std::uint64_t>>& out) {
    if (v == nullptr) return;
    for (auto const* c : *v) {
      if (c != nullptr) out.emplace_back(str(c->cause()), c->count());
    }
  };
  causes(r->connections_closed(), s.connections_closed);
  causes(r->requests_refused(), s.requests_refused);
  return s;
}

decoded_reply decode_reply(wire::Envelope const& env) {
  decoded_reply out;
  header_in(env, out.header);
  if (auto const* e = env.body_as_Error()) {
    out.code = e->code();
    out.message = str(e->message());
    out.retry_after_ms = e->retry_after_ms();
    // An Error body with code Ok would read as success with no result.
    if (out.code == wire::ErrorCode::Ok) out.code = wire::ErrorCode::Internal;
    return out;
  }
  auto const* rep = env.body_as_ScheduleReply();
  if (rep == nullptr) {
    invalid(std::string("message body is ") + body_name(env.body_type()) + ", expected ScheduleReply or Error");
  }
  if (auto const* s = rep->status()) {
    out.code = s->code();
    out.message = str(s->message());
  }
  auto& r = out.result;
  r.epoch = rep->epoch();
  if (auto const* v = rep->placements()) {
    r.placements.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      auto const* p = v->Get(k);
      r.placements[k].job = index_in(p->job());
      replicas_in(p->replicas(), who_t::indexed("placement", k), r.placements[k].replicas);
    }
  }
  if (auto const* v = rep->preemptions()) {
    r.preemptions.reserve(v->size());
    for (auto const* p : *v) {
      r.preemptions.push_back({str(p->job()), str(p->reason()), index_in(p->for_job()), p->lost_work()});
    }
  }
  if (auto const* v = rep->reservations()) {
    r.reservations.reserve(v->size());
    for (auto const* res : *v) {
      reservation x;
      x.job = index_in(res->job());
      if (auto const* n = res->nodes()) {
        x.nodes.reserve(n->size());
        for (flatbuffers::uoffset_t k = 0; k < n->size(); ++k) x.nodes.push_back(index_in(n->Get(k)));
      }
      x.start_time = res->start_time();
      r.reservations.push_back(std::move(x));
    }
  }
  if (auto const* v = rep->unplaced()) {
    r.unplaced_jobs.reserve(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      auto const* u = v->Get(k);
      auto const who = who_t::indexed("unplaced", k);
      r.unplaced_jobs.push_back({index_in(u->job()), enum_in<unplaced_reason>(u->reason(), who, "reason"),
                                 str(u->detail())});
      auto& e = r.unplaced_jobs.back().why;
      e.nodes = u32_in(u->nodes(), who, "nodes");
      if (auto const* x = u->excluded()) {
        for (flatbuffers::uoffset_t i = 0; i < x->size(); ++i) {
          auto const* c = x->Get(i);
          e.excluded.push_back({enum_in<node_exclusion>(c->reason(), who, "excluded reason"),
                                u32_in(c->nodes(), who, "excluded nodes"), str(c->detail())});
        }
      }
      e.replicas_fit = u32_in(u->replicas_fit(), who, "replicas_fit");
      e.replicas_required = u32_in(u->replicas_required(), who, "replicas_required");
      e.best_domain = str(u->best_domain());
      e.best_domain_fit = u32_in(u->best_domain_fit(), who, "best_domain_fit");
      e.outbid = u->outbid();
      e.outbid_priority = u->outbid_priority();
      e.replicas_fit_empty = u32_in(u->replicas_fit_empty(), who, "replicas_fit_empty");
      e.best_domain_fit_empty = u32_in(u->best_domain_fit_empty(), who, "best_domain_fit_empty");
      e.never = u->never();
    }
  }
  if (auto const* m = rep->metrics()) {
    auto& x = r.metrics;
    x.gar_before = m->gar_before();
    x.gar_after = m->gar_after();
    x.gfr_before = m->gfr_before();
    x.gfr_after = m->gfr_after();
    x.frag_ratio_before = m->frag_ratio_before();
    x.frag_ratio_after = m->frag_ratio_after();
    x.jobs_placed = u32_in(m->jobs_placed(), "metrics", "jobs_placed");
    x.replicas_placed = u32_in(m->replicas_placed(), "metrics", "replicas_placed");
    x.gpu_milli_placed = m->gpu_milli_placed();
  }
  if (auto const* v = rep->timing()) {
    r.timing.reserve(v->size());
    for (auto const* t : *v) {
      r.timing.push_back({str(t->stage()), t->micros(), static_cast<std::int64_t>(t->calls()),
                          static_cast<std::int64_t>(t->waits()), static_cast<std::int64_t>(t->bytes_up()),
                          static_cast<std::int64_t>(t->bytes_down())});
    }
  }
  r.backend = str(rep->backend());
  scale_in(rep->scale_outs(), "scale-out", r.scale_outs);
  scale_in(rep->scale_ins(), "scale-in", r.scale_ins);
  if (auto const* v = rep->reclaimed_nodes()) {
    r.reclaimed_nodes.reserve(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) r.reclaimed_nodes.push_back(index_in(v->Get(k)));
  }
  if (auto const* v = rep->delay_timers()) {
    r.delay_timers.reserve(v->size());
    for (auto const* t : *v) {
      r.delay_timers.push_back({str(t->job_class()), t->timer(), t->observed_wait(),
                                u32_in(t->samples(), "delay timer", "samples")});
    }
  }
  return out;
}

// ------------------------------------------------------------------ codes

wire::ErrorCode error_code_to_wire(error_code c) {
  switch (c) {
    case error_code::invalid_argument: return wire::ErrorCode::InvalidArgument;
    case error_code::failed_precondition: return wire::ErrorCode::FailedPrecondition;
    case error_code::stale_epoch: return wire::ErrorCode::StaleEpoch;
    case error_code::resource_exhausted: return wire::ErrorCode::ResourceExhausted;
    case error_code::deadline_exceeded: return wire::ErrorCode::DeadlineExceeded;
    case error_code::unavailable: return wire::ErrorCode::Unavailable;
    case error_code::internal: return wire::ErrorCode::Internal;
  }
  return wire::ErrorCode::Internal;
}

char const* error_code_name(wire::ErrorCode c) {
  char const* n = wire::EnumNameErrorCode(c);
  return (n != nullptr && *n != '\0') ? n : "Unknown";
}

// ------------------------------------------------------------------ parts

cluster decode_cluster(wire::Cluster const& c) {
  cluster out;
  cluster_in(c, out);
  return out;
}

flatbuffers::Offset<wire::Cluster> encode_cluster(flatbuffers::FlatBufferBuilder& fbb, cluster const& c) {
  auto const nodes = nodes_out(fbb, c.nodes, "node");
  auto const topo = topology_out(fbb, c.topo);
  return wire::CreateCluster(fbb, c.epoch, nodes, topo);
}

job decode_job(wire::Job const& j) {
  job out;
  job_in(j, who_t::named("job", view(j.name())), out);
  return out;
}

running_job decode_running(wire::RunningJob const& r) {
  running_job out;
  running_in(r, who_t::named("running job", view(r.name())), out);
  return out;
}

void decode_queues(fb_vector<flatbuffers::Offset<wire::Queue>> const* v, std::vector<queue_spec>& out) {
  out.resize(v == nullptr ? 0 : v->size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    auto const* q = v->Get(static_cast<flatbuffers::uoffset_t>(k));
    str_in(q->name(), out[k].name);
    str_in(q->parent(), out[k].parent);
    out[k].gpu_milli_limit = q->gpu_milli_limit();
    out[k].cpu_milli_limit = q->cpu_milli_limit();
    out[k].gpu_milli_guarantee = q->gpu_milli_guarantee();
    out[k].cpu_milli_guarantee = q->cpu_milli_guarantee();
    out[k].weight = q->weight();
  }
}

flatbuffers::Offset<fb_vector<flatbuffers::Offset<wire::Queue>>> encode_queues(flatbuffers::FlatBufferBuilder& fbb,
                                                                              std::vector<queue_spec> const& v) {
  if (v.empty()) return 0;
  std::vector<flatbuffers::Offset<wire::Queue>> offs;
  offs.reserve(v.size());
  for (auto const& q : v) {
    offs.push_back(wire::CreateQueue(fbb, fbb.CreateSharedString(q.name), opt_shared(fbb, q.parent), q.gpu_milli_limit,
                                     q.cpu_milli_limit, q.gpu_milli_guarantee, q.cpu_milli_guarantee, q.weight));
  }
  return fbb.CreateVector(offs);
}

policy decode_policy(wire::Policy const* p) {
  policy out;
  if (p == nullptr) return out;
  out.algo = enum_in<algorithm>(p->algorithm(), "policy", "algorithm");
  out.stacking = p->stacking();
  out.order = enum_in<queue_order>(p->order(), "policy", "order");
  if (auto const* a = p->aging()) {
    out.age.weight = a->weight();
    out.age.max_age_s = a->max_age_s();
    out.age.cross_priority = a->cross_priority();
    if (out.age.weight < 0) invalid("policy: aging.weight must not be negative");
    if (out.age.max_age_s < 1) invalid("policy: aging.max_age_s must be at least 1");
  }
  if (auto const* w = p->weights()) {
    out.w.binpack = w->binpack();
    out.w.fragmentation = w->fragmentation();
    out.w.topology = w->topology();
    out.w.pool_affinity = w->pool_affinity();
    out.w.scarcity = w->scarcity();
    out.w.affinity = w->affinity();
  }
  if (auto const* q = p->queue()) {
    auto& x = out.queue;
    x.backfill = enum_in<backfill_mode>(q->backfill(), "policy", "queue.backfill");
    x.max_reservations = q->max_reservations();
    x.preemption = q->preemption();
    x.loaning = q->loaning();
    x.reclaim_nodes = q->reclaim_nodes();
    x.elastic = q->elastic();
    x.delay_scheduling = q->delay_scheduling();
    x.sensitivity_threshold = q->sensitivity_threshold();
    x.delay_timer_max = q->delay_timer_max();
    x.network_preemption = q->network_preemption();
    x.auto_reclaim = q->auto_reclaim();
    x.preempt_max_lost_s = q->preempt_max_lost_s();
    if (x.max_reservations < 1) invalid("policy: queue.max_reservations must be at least 1");
    if (x.reclaim_nodes < 0) invalid("policy: queue.reclaim_nodes must not be negative");
    if (x.delay_timer_max < 0) invalid("policy: queue.delay_timer_max must not be negative");
    if (x.preempt_max_lost_s < -1) invalid("policy: queue.preempt_max_lost_s must be -1 (any victim) or at least 0");
    if (!(x.sensitivity_threshold >= 0.0F && x.sensitivity_threshold <= 1.0F)) {
      invalid("policy: queue.sensitivity_threshold must be in 0..1");
    }
  }
  return out;
}

// Encoders shared with the JSON I/O (declared in codec.hpp).
flatbuffers::Offset<wire::Job> encode_job(flatbuffers::FlatBufferBuilder& fbb, job const& j) {
  return job_out(fbb, j, who_t::named("job", j.name));
}

flatbuffers::Offset<wire::RunningJob> encode_running(flatbuffers::FlatBufferBuilder& fbb, running_job const& r) {
  replica_offsets scratch;
  return running_out(fbb, r, who_t::named("running job", r.name), scratch);
}

flatbuffers::Offset<wire::Policy> encode_policy(flatbuffers::FlatBufferBuilder& fbb, policy const& p) {
  return policy_out(fbb, p);
}

}  // namespace placer::service
