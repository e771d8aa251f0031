#pragma once
// Kubernetes-style placement constraints: node labels and taints against a
// job's node selector, node affinity and tolerations, with Kubernetes'
// semantics (docs/architecture.md, "Constraints").
//
// Two ways in. The host functions (admits, preference, exclusion) read one
// node and one job's constraints directly; the policies, the simulator's
// baselines and the explanations use them. The solver's round goes through
// constraint_tables instead: nodes with the same labels (on the keys the
// round's jobs ask about) and the same taints form a group, the jobs'
// distinct constraint sets are rows, and one byte per (set, group) says
// admitted or not, so the kernels' per-cell check is one table read.

#include <placer/kernels/round_arrays.hpp>
#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace placer {

/// Why a node is not admitted by a job's constraints (the first reason).
enum class constraint_miss : std::uint8_t { none = 0, selector = 1, affinity = 2, taint = 3 };

/// The first problem of a job's constraints ("" when none): an operator
/// with the wrong number of values, a Gt/Lt value that is not an integer, a
/// weight outside 1..100, a toleration that is not well formed.
std::string constraints_problem(node_constraints const& c);

/// The value of label `key` on node n (labels are "key=value"; "key" alone
/// has an empty value); false when the node has no such label.
bool label_value(node const& n, std::string_view key, std::string_view& value);

/// Does the term match the node's labels (every expression)?
bool term_matches(node const& n, selector_term const& t);

/// Does the job tolerate the taint?
bool tolerates(node_constraints const& c, taint const& t);

/// Why node n refuses a job with constraints c (none: it admits it):
/// selector first, then required affinity, then NoSchedule and NoExecute
/// taints the job does not tolerate (*which, when given, gets that taint).
constraint_miss exclusion(node const& n, node_constraints const& c, taint const** which = nullptr);

inline bool admits(node const& n, node_constraints const& c) {
  if (c.empty() && n.taints.empty()) return true;
  return exclusion(n, c) == constraint_miss::none;
}

/// The node's preference for the job, -1000..1000: the matching preferred
/// terms' share of their total weight (per mille), less 1000 when the node
/// has a PreferNoSchedule taint the job does not tolerate.
std::int32_t preference(node const& n, node_constraints const& c);

/// The round's constraints as tables for the kernels: build() fills the
/// arrays' node_group, constraint_admit and constraint_prefer (one entry per
/// (set, group), set-major) and keeps here what the host needs besides.
/// Inactive, with those arrays empty, when no job has constraints and no
/// node has taints: a round without them pays one scan for that.
struct constraint_tables {
  bool active = false;
  std::int32_t n_sets = 0;               ///< set 0: no constraints
  std::vector<std::int32_t> job_set;     ///< per pending job
  std::vector<std::int32_t> group_node;  ///< per group: its first node
  /// Per set: the constraints, pointing into the round_input build() read
  /// (set 0 at an empty one); valid while that round is.
  std::vector<node_constraints const*> sets;
  std::vector<std::string> keys;  ///< scratch: label keys the sets refer to, sorted
  std::vector<std::size_t> key_lengths;  ///< scratch: their lengths, sorted, each once
  /// Scratch: the (key, value) pairs the sets name (selectors, In, NotIn),
  /// sorted; per key its first pair (named_at, keys.size() + 1 entries) and
  /// whether a Gt or Lt reads its number (key_numeric); and all of it as
  /// one string (names), which a session's label memo was made for.
  std::vector<std::pair<std::string_view, std::string_view>> named;
  std::vector<std::size_t> named_at;
  std::vector<std::uint8_t> key_numeric;
  std::string names;
  std::string key;                ///< scratch: one set's or node's key being built

  /// `any_taint`: whether some node of the round has a taint (flatten
  /// finds it in its pass over the nodes; the overload without it looks).
  void build(round_input const& in, kernels::round_arrays& out, bool any_taint);
  void build(round_input const& in, kernels::round_arrays& out);

 private:
  /// Node i's group key into `key`: its labels on the asked keys (a value
  /// no set names, of a key no Gt or Lt reads, as one "other" value), then
  /// its taints.
  void node_key(std::vector<node> const& nodes, std::size_t i);
  /// Sets with equal rows become one (job_set remapped, rows compacted);
  /// with one set left that admits all and prefers nothing, inactive.
  void merge_equal_sets(kernels::round_arrays& out);
};

}  // namespace placer
