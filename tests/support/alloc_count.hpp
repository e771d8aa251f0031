#pragma once
// Heap allocations counted for the hot-path tests. alloc_count.cpp replaces
// the global operator new and delete with counting ones, so it is linked
// only into those tests' own executables.
//
// Not visible: allocations that bypass operator new (std::malloc in the
// OpenMP runtime, ZeroMQ's messages).
#include <cstdint>

namespace placer::testing_support {

struct alloc_count {
  std::int64_t count = 0;  ///< allocations made outside an aside_scope
  std::int64_t bytes = 0;
  std::int64_t aside_count = 0;  ///< made while an aside_scope was open
  std::int64_t aside_bytes = 0;
};

void start_counting();
alloc_count stop_counting();

/// The allocations made on any thread while `f` runs.
template <class F>
alloc_count count_allocs(F&& f) {
  start_counting();
  f();
  return stop_counting();
}

/// While one is open, allocations (on any thread) are counted apart, as
/// aside_count and aside_bytes: the solver's test puts its backend's calls
/// there.
class aside_scope {
 public:
  aside_scope();
  ~aside_scope();
  aside_scope(aside_scope const&) = delete;
  aside_scope& operator=(aside_scope const&) = delete;
};

}  // namespace placer::testing_support
