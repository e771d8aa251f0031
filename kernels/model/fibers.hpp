#pragma once
// A team of cooperative workers on one thread (kernels/model): each worker
// is a fiber with a stack of its own, and a barrier switches to the next
// worker, so a team program written for a CTA of hundreds of threads runs
// exactly as their interleaving at barriers would, on one host thread, with
// every worker's steps between two barriers counted. Host only.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace placer::kernels::model {

class fibers {
 public:
  /// A barrier interval: the most steps any worker took in it (its span),
  /// the most chained steps (each waiting on the one before) and the
  /// steps of all workers (its work).
  struct counts {
    std::int64_t span = 0, chain = 0, work = 0;
  };
  /// How an interval ended: at a barrier or not (the workers finished), at
  /// a grid's barrier or a CTA's, and in which lane the workers were then.
  struct end {
    bool at_barrier = false;
    bool grid = false;
    int lane = 0;
  };
  /// Called at every barrier with the interval it closes, a counts per
  /// lane (set_lanes: the blocks of a grid that the workers, one CTA, act
  /// for in turn; a worker's steps go to its current lane), and once more
  /// when the workers have finished.
  using interval_fn = std::function<void(std::vector<counts> const& lanes, end const& how)>;

  explicit fibers(int workers, std::size_t stack_bytes = std::size_t{256} << 10);
  ~fibers();
  fibers(fibers const&) = delete;
  fibers& operator=(fibers const&) = delete;

  /// Runs body(rank) on every worker until all return; a worker that calls
  /// barrier() waits there until every worker has. logic_error when some
  /// return while others wait at a barrier (a program whose workers do not
  /// meet at the same barriers would deadlock on a GPU).
  void run(std::function<void(int)> const& body, interval_fn const& interval);

  /// Lanes the steps are counted in (1 by default); before run().
  void set_lanes(int lanes);
  [[nodiscard]] int lanes() const { return lanes_; }

  // From inside a worker:
  void barrier(bool grid = false);
  /// The barrier of this worker's group: workers [g * width, (g + 1) *
  /// width) (a warp). The group's workers run on in lockstep: each leaves
  /// with the steps of the group's busiest since their last group barrier
  /// (and one for the barrier), the wait counted in the span, not in the
  /// work. No interval closes. logic_error when a member of the group
  /// waits at the team's barrier or has returned instead (a GPU would
  /// hang).
  void group_barrier(int width);
  void work(std::int64_t steps) { steps_[slot()] += steps; }
  void chain(std::int64_t steps) { chain_[slot()] += steps; }
  /// The lane this worker's next steps count in.
  void lane(int l) { lane_[static_cast<std::size_t>(current_)] = l; }
  [[nodiscard]] int rank() const { return current_; }
  [[nodiscard]] int size() const { return workers_; }

 private:
  static void entry();
  [[nodiscard]] std::size_t slot() const { return slot_of(static_cast<std::size_t>(current_)); }
  [[nodiscard]] std::size_t slot_of(std::size_t w) const {
    return static_cast<std::size_t>(lane_[w]) * static_cast<std::size_t>(workers_) + w;
  }
  /// Lets every group whose workers all wait at its barrier run on;
  /// whether any did.
  bool release_groups();
  int workers_;
  int lanes_ = 1;
  bool grid_ = false;  ///< the last barrier was a grid's
  std::size_t stack_bytes_;
  unsigned char* stacks_ = nullptr;
  std::size_t mapped_ = 0;
  std::vector<void*> sp_;
  std::vector<std::int64_t> steps_, chain_;
  std::vector<unsigned char> done_;
  std::vector<std::int64_t> idle_;  ///< per slot: steps_ spent waiting at group barriers (not work)
  /// Where a worker waits: 0 nowhere (it runs), 1 at the team's barrier,
  /// 2 at its group's (group_ wide).
  std::vector<unsigned char> waits_;
  std::vector<int> group_;
  std::vector<int> lane_;  ///< a worker's lane
  void* main_sp_ = nullptr;
  int current_ = 0;
  std::function<void(int)> const* body_ = nullptr;
};

}  // namespace placer::kernels::model
