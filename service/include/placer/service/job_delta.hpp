#pragma once
// Job deltas: the pending and running jobs a session holds, moved by the
// jobs that arrived and left since its last round; the job side of
// cluster_delta (topology/cluster.hpp). A request's cluster delta carries
// the epochs for both: one request moves a session's cluster and jobs
// together.

#include <placer/solver/model.hpp>

#include <string>
#include <vector>

namespace placer {

/// A change to the pending and running jobs of a session's last round.
/// Jobs are keyed by name within each list.
struct job_delta {
  std::vector<job> added;             ///< pending jobs appended, in queue order
  std::vector<std::string> removed;   ///< pending job names (placed, cancelled...)
  std::vector<running_job> started;   ///< running jobs appended
  std::vector<std::string> finished;  ///< running job names
};

/// `to_pending` and `to_running` become `pending` and `running` moved by
/// `d` (copied over what they held, reusing its storage; they must not be
/// the same vectors): in each list the named jobs leave (the others keep
/// their order), then the new ones are appended, so a name that leaves and
/// arrives in one delta is replaced (and moves to the end). Everything is
/// checked before anything is written: logic_error(invalid_argument) naming
/// the job for a removed or finished name the list does not hold, or holds
/// more than once (a full list may repeat a name: send the full list
/// again), a name given twice in one field, an added or started name the
/// list holds and the delta does not remove. The jobs themselves are
/// validate()'s to check, with the round.
void apply_job_delta(std::vector<job> const& pending, std::vector<running_job> const& running, job_delta const& d,
                     std::vector<job>& to_pending, std::vector<running_job>& to_running);

}  // namespace placer
