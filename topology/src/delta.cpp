// apply_delta: a session's cluster moved to a new epoch in place by a
// cluster_delta (changes, then removals, then additions), as documented in
// cluster.hpp.
#include <placer/topology/cluster.hpp>
#include <placer/topology/error.hpp>

#include <string>
#include <vector>

namespace placer {

namespace {

std::string index_ctx(char const* what, std::size_t k, std::int32_t index) {
  return std::string("delta: ") + what + "[" + std::to_string(k) + "] has node index " + std::to_string(index);
}

/// apply_delta's checks: the marks of the base's nodes (changed, removed),
/// or a logic_error with nothing written.
enum : std::uint8_t { mark_none = 0, mark_changed = 1, mark_removed = 2 };

std::vector<std::uint8_t> checked_marks(cluster const& c, cluster_delta const& d) {
  // Epochs first: a stale delta is the expected race (the client's view is
  // behind the server's), so it gets its own code and both epochs to resync.
  if (c.epoch != d.base_epoch) {
    throw logic_error(error_code::stale_epoch, "delta against epoch " + std::to_string(d.base_epoch) +
                                                   " but the session holds epoch " + std::to_string(c.epoch));
  }
  PLACER_EXPECTS(d.new_epoch > d.base_epoch, "delta: new_epoch " + std::to_string(d.new_epoch) +
                                                 " must be greater than base_epoch " + std::to_string(d.base_epoch));

  auto const n = c.nodes.size();
  // Per base node: untouched, changed or removed. Rejecting duplicates
  // keeps a delta's meaning independent of the order of its lists.
  std::vector<std::uint8_t> mark(n, mark_none);
  for (std::size_t k = 0; k < d.changed.size(); ++k) {
    auto const i = d.changed[k].index;
    PLACER_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < n,
                   index_ctx("changed", k, i) + " out of range (base has " + std::to_string(n) + " nodes)");
    PLACER_EXPECTS(mark[i] == mark_none, index_ctx("changed", k, i) + " which is changed more than once");
    mark[i] = mark_changed;
  }
  for (std::size_t k = 0; k < d.removed.size(); ++k) {
    auto const i = d.removed[k];
    PLACER_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < n,
                   index_ctx("removed", k, i) + " out of range (base has " + std::to_string(n) + " nodes)");
    PLACER_EXPECTS(mark[i] != mark_changed, index_ctx("removed", k, i) + " which is also changed");
    PLACER_EXPECTS(mark[i] != mark_removed, index_ctx("removed", k, i) + " which is removed more than once");
    mark[i] = mark_removed;
  }
  // The base is valid and the topology unchanged, so checking the nodes the
  // delta brings is checking the result.
  auto const n_domains = static_cast<std::int32_t>(c.topo.domains.size());
  auto check = [&](char const* what, std::size_t k, node const& x) {
    auto const problem = node_problem(x, n_domains);
    PLACER_EXPECTS(problem.empty(), std::string("delta: ") + what + "[" + std::to_string(k) + "] ('" + x.name +
                                        "'): " + problem);
  };
  for (std::size_t k = 0; k < d.changed.size(); ++k) check("changed", k, d.changed[k].value);
  for (std::size_t k = 0; k < d.added.size(); ++k) check("added", k, d.added[k]);
  return mark;
}

/// The removals (surviving nodes keep their order, moved down), then the
/// additions and the epoch; with `undo`, the removed nodes are moved there.
void remove_and_add(cluster& c, cluster_delta const& d, std::vector<std::uint8_t> const& mark, delta_undo* undo) {
  auto const n = c.nodes.size();
  if (!d.removed.empty()) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (mark[i] == mark_removed) {
        if (undo != nullptr) {
          undo->removed.push_back(static_cast<std::int32_t>(i));
          undo->removed_old.push_back(std::move(c.nodes[i]));
        }
        continue;
      }
      if (kept != i) c.nodes[kept] = std::move(c.nodes[i]);
      ++kept;
    }
    c.nodes.resize(kept);
  }
  c.nodes.insert(c.nodes.end(), d.added.begin(), d.added.end());
  c.epoch = d.new_epoch;
}

}  // namespace

void apply_delta(cluster& c, cluster_delta const& d) {
  auto const mark = checked_marks(c, d);
  // Nothing below throws (but for memory).
  for (auto const& u : d.changed) c.nodes[static_cast<std::size_t>(u.index)] = u.value;
  remove_and_add(c, d, mark, nullptr);
}

void apply_delta(cluster& c, cluster_delta const& d, delta_undo& undo) {
  undo.armed = undo.lost = false;
  auto const mark = checked_marks(c, d);
  undo.epoch = c.epoch;
  undo.size = c.nodes.size();
  undo.changed.clear();
  undo.removed.clear();
  undo.removed_old.clear();
  try {
    // The new values copied into the undo's buffers (reusing their storage)
    // and swapped in: the old ones stay there.
    if (undo.changed_old.size() < d.changed.size()) undo.changed_old.resize(d.changed.size());
    for (std::size_t k = 0; k < d.changed.size(); ++k) {
      auto const i = static_cast<std::size_t>(d.changed[k].index);
      undo.changed_old[k] = d.changed[k].value;
      std::swap(c.nodes[i], undo.changed_old[k]);
      undo.changed.push_back(d.changed[k].index);
    }
    remove_and_add(c, d, mark, &undo);
  } catch (...) {  // out of memory half-way: the base is gone, and the caller must know
    undo.lost = true;
    throw;
  }
  undo.armed = true;
}

void revert_delta(cluster& c, delta_undo& undo) noexcept {
  if (!undo.armed) return;
  undo.armed = false;
  // Additions off; the survivors moved back up, from the end, around the
  // removed nodes' places; the changed nodes' old values swapped back.
  std::size_t const survivors = undo.size - undo.removed.size();
  if (c.nodes.size() > survivors) c.nodes.resize(survivors);
  if (!undo.removed.empty()) {
    c.nodes.resize(undo.size);
    std::size_t from = survivors, r = undo.removed.size();
    for (std::size_t i = undo.size; i-- > 0;) {
      if (r > 0 && static_cast<std::size_t>(undo.removed[r - 1]) == i) {
        c.nodes[i] = std::move(undo.removed_old[--r]);
      } else if (--from != i) {  // no self-move: it would empty the node
        c.nodes[i] = std::move(c.nodes[from]);
      }
    }
  }
  for (std::size_t k = 0; k < undo.changed.size(); ++k) {
    std::swap(c.nodes[static_cast<std::size_t>(undo.changed[k])], undo.changed_old[k]);
  }
  c.epoch = undo.epoch;
}

}  // namespace placer
