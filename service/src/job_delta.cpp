// apply_job_delta: a session's pending and running jobs moved by a
// job_delta, as documented in job_delta.hpp. Both lists are checked whole
// before anything is written, as apply_delta does for the cluster.
#include <placer/service/job_delta.hpp>
#include <placer/topology/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace placer {

namespace {

/// One name a delta mentions for one list: where it leaves (its index in
/// removed or finished), where it arrives (in added or started), and the
/// position in the list of the job it names.
struct mention {
  std::string_view name;
  std::size_t hash = 0;
  std::int64_t leaves = -1;
  std::int64_t arrives = -1;
  std::int64_t held = -1;
  [[nodiscard]] bool used() const { return leaves >= 0 || arrives >= 0; }
};

/// One list's field names, for the errors.
struct list_fields {
  char const* list;    ///< "pending"
  char const* leave;   ///< "removed"
  char const* arrive;  ///< "added"
};

/// A delta names a few dozen jobs, a list holds thousands and each of them
/// is looked up once: the names go into an open-addressing table (a power
/// of two, at most a quarter full, so that most lookups of a name it does
/// not hold stop at the first slot) in one buffer, not a map built every
/// round.
std::size_t table_size(std::size_t names) { return names == 0 ? 0 : std::bit_ceil(4 * names); }

/// The entry of `name` in `table`, or the free slot where it goes; either
/// way with the name and its hash written (a slot is taken once marked as
/// leaving or arriving).
mention& slot(std::span<mention> table, std::string_view name) {
  auto const mask = table.size() - 1;
  auto const hash = std::hash<std::string_view>{}(name);
  auto i = hash & mask;
  while (table[i].used() && (table[i].hash != hash || table[i].name != name)) i = (i + 1) & mask;
  table[i].name = name;
  table[i].hash = hash;
  return table[i];
}

/// "job delta: removed[3] ('a') " + what.
std::string problem(list_fields const& f, bool leaving, std::int64_t k, std::string_view name,
                    std::string const& what) {
  return std::string("job delta: ") + (leaving ? f.leave : f.arrive) + "[" + std::to_string(k) + "] ('" +
         std::string(name) + "') " + what;
}

/// Checks one list's part of a delta against the list: fills `table` with
/// the names it mentions and, for each name that leaves, the position of
/// the job it names.
template <class Job>
void check(std::vector<Job> const& held, std::vector<std::string> const& leaving, std::vector<Job> const& arriving,
           list_fields const& f, std::span<mention> table) {
  if (table.empty()) return;
  for (std::size_t k = 0; k < leaving.size(); ++k) {
    mention& m = slot(table, leaving[k]);
    PLACER_EXPECTS(m.leaves < 0, problem(f, true, static_cast<std::int64_t>(k), leaving[k],
                                         std::string("is named twice in ") + f.leave));
    m.leaves = static_cast<std::int64_t>(k);
  }
  for (std::size_t k = 0; k < arriving.size(); ++k) {
    mention& m = slot(table, arriving[k].name);
    PLACER_EXPECTS(m.arrives < 0,
                   problem(f, false, static_cast<std::int64_t>(k), arriving[k].name,
                           std::string("is named twice in ") + f.arrive));
    m.arrives = static_cast<std::int64_t>(k);
  }
  for (std::size_t p = 0; p < held.size(); ++p) {
    mention& m = slot(table, held[p].name);
    if (!m.used()) continue;
    PLACER_EXPECTS(m.leaves >= 0, problem(f, false, m.arrives, m.name,
                                          std::string("is already a ") + f.list + " job (to replace it, name it in " +
                                              f.leave + " too)"));
    PLACER_EXPECTS(m.held < 0, problem(f, true, m.leaves, m.name,
                                       std::string("names more than one ") + f.list +
                                           " job (send the full lists instead)"));
    m.held = static_cast<std::int64_t>(p);
  }
  for (std::size_t k = 0; k < leaving.size(); ++k) {
    PLACER_EXPECTS(slot(table, leaving[k]).held >= 0,
                   problem(f, true, static_cast<std::int64_t>(k), leaving[k],
                           std::string("is not a ") + f.list + " job"));
  }
}

/// Writes a checked list moved by its part of the delta into `to`: the
/// jobs that stay, in order, then the arrivals. Copied over what `to` held,
/// reusing its strings and vectors.
template <class Job>
void write(std::vector<Job> const& held, std::vector<Job> const& arriving, std::span<mention> table,
           std::vector<Job>& to) {
  // The positions that leave, ascending: the table is sorted in place, its
  // lookups done.
  auto const leaving_end = std::partition(table.begin(), table.end(), [](mention const& m) { return m.held >= 0; });
  std::sort(table.begin(), leaving_end, [](mention const& a, mention const& b) { return a.held < b.held; });
  to.resize(held.size() - static_cast<std::size_t>(leaving_end - table.begin()) + arriving.size());
  auto out = to.begin();
  auto next = table.begin();
  for (std::size_t p = 0; p < held.size(); ++p) {
    if (next != leaving_end && next->held == static_cast<std::int64_t>(p)) {
      ++next;
    } else {
      *out++ = held[p];
    }
  }
  std::copy(arriving.begin(), arriving.end(), out);
}

}  // namespace

void apply_job_delta(std::vector<job> const& pending, std::vector<running_job> const& running, job_delta const& d,
                     std::vector<job>& to_pending, std::vector<running_job>& to_running) {
  auto const n_pending = table_size(d.removed.size() + d.added.size());
  std::vector<mention> table(n_pending + table_size(d.finished.size() + d.started.size()));
  auto const pending_table = std::span<mention>(table).first(n_pending);
  auto const running_table = std::span<mention>(table).subspan(n_pending);
  check(pending, d.removed, d.added, {"pending", "removed", "added"}, pending_table);
  check(running, d.finished, d.started, {"running", "finished", "started"}, running_table);
  // Nothing below throws (but for memory).
  write(pending, d.added, pending_table, to_pending);
  write(running, d.started, running_table, to_running);
}

}  // namespace placer
