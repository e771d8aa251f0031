// The fibers of kernels/model/fibers.hpp: a switch of the six callee-saved
// registers and the stack pointer (x86-64 only; a round at 10k meets
// thousands of barriers of 512 workers, and ucontext's switch makes a
// system call each time). Elsewhere the constructor says it is unavailable.
#include "fibers.hpp"

#include <placer/topology/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace placer::kernels::model {

namespace {
thread_local fibers* running = nullptr;
}  // namespace

#if defined(__x86_64__)
extern "C" void placer_fiber_switch(void** save_sp, void* load_sp);
// Saves the callee-saved registers on the current stack and its pointer in
// *save_sp, loads load_sp and restores what a switch saved there.
asm(R"(
  .text
  .globl placer_fiber_switch
  .type placer_fiber_switch,@function
placer_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size placer_fiber_switch,.-placer_fiber_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace {
void switch_to(void** save, void* load) { placer_fiber_switch(save, load); }
/// A fresh stack whose first switch "returns" into entry with the stack
/// aligned as after a call.
void* prepare(unsigned char* top, void (*entry)()) {
  auto* sp = reinterpret_cast<void**>(reinterpret_cast<std::uintptr_t>(top) & ~std::uintptr_t{15});
  *--sp = nullptr;                             // entry's return address: it never returns
  *--sp = reinterpret_cast<void*>(entry);      // popped by the switch's ret
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  return sp;
}
}  // namespace
#else
namespace {
void switch_to(void**, void*) {}
void* prepare(unsigned char*, void (*)()) { return nullptr; }
}  // namespace
#endif

fibers::fibers(int workers, std::size_t stack_bytes)
    : workers_(workers),
      stack_bytes_(stack_bytes),
      sp_(static_cast<std::size_t>(workers)),
      steps_(static_cast<std::size_t>(workers)),
      chain_(static_cast<std::size_t>(workers)),
      done_(static_cast<std::size_t>(workers)),
      waits_(static_cast<std::size_t>(workers)),
      group_(static_cast<std::size_t>(workers)),
      lane_(static_cast<std::size_t>(workers)) {
  if (workers < 1) throw logic_error(error_code::invalid_argument, "a team needs a worker");
#if !defined(__x86_64__)
  throw logic_error(error_code::unavailable, "the GPU model's fibers switch stacks on x86-64 only");
#endif
  auto const page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes_ + page - 1) / page * page;
  mapped_ = (stack_bytes_ + page) * static_cast<std::size_t>(workers);
  void* m = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) throw logic_error(error_code::resource_exhausted, "fibers: no memory for the stacks");
  stacks_ = static_cast<unsigned char*>(m);
  // A guard page below each stack: an overflow faults instead of writing
  // into the next worker's.
  for (int i = 0; i < workers; ++i) {
    mprotect(stacks_ + static_cast<std::size_t>(i) * (stack_bytes_ + page), page, PROT_NONE);
  }
}

fibers::~fibers() {
  if (stacks_ != nullptr) munmap(stacks_, mapped_);
}

void fibers::entry() {
  fibers* f = running;
  (*f->body_)(f->current_);
  f->done_[static_cast<std::size_t>(f->current_)] = 1;
  void* dead = nullptr;
  switch_to(&dead, f->main_sp_);  // never resumed
}

void fibers::set_lanes(int lanes) {
  if (lanes < 1) throw logic_error(error_code::invalid_argument, "fibers: a lane at least");
  lanes_ = lanes;
}

void fibers::barrier(bool grid) {
  grid_ = grid;
  waits_[static_cast<std::size_t>(current_)] = 1;
  switch_to(&sp_[static_cast<std::size_t>(current_)], main_sp_);
}

void fibers::group_barrier(int width) {
  if (width < 1) throw logic_error(error_code::invalid_argument, "fibers: a group of one worker at least");
  auto const w = static_cast<std::size_t>(current_);
  waits_[w] = 2;
  group_[w] = width;
  switch_to(&sp_[w], main_sp_);
}

bool fibers::release_groups() {
  bool released = false;
  for (int first = 0; first < workers_;) {
    auto const w = static_cast<std::size_t>(first);
    if (waits_[w] != 2) {
      ++first;
      continue;
    }
    int const width = group_[w];
    int const base = first / width * width;
    int const end = std::min(base + width, workers_);
    std::int64_t most = 0;
    for (int i = base; i < end; ++i) {
      auto const m = static_cast<std::size_t>(i);
      if (done_[m] != 0 || waits_[m] != 2 || group_[m] != width) {
        throw logic_error(error_code::internal, "fibers: worker " + std::to_string(i) +
                                                    (done_[m] != 0 ? " returned" : " waits elsewhere") +
                                                    " while its group waits at a group barrier");
      }
      most = std::max(most, steps_[slot_of(m)]);
    }
    for (int i = base; i < end; ++i) {
      auto const m = static_cast<std::size_t>(i);
      std::size_t const s = slot_of(m);
      idle_[s] += most - steps_[s];
      steps_[s] = most + 1;
      waits_[m] = 0;
    }
    released = true;
    first = end;
  }
  return released;
}

void fibers::run(std::function<void(int)> const& body, interval_fn const& interval) {
  auto const page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < workers_; ++i) {
    unsigned char* top = stacks_ + static_cast<std::size_t>(i + 1) * (stack_bytes_ + page);
    sp_[static_cast<std::size_t>(i)] = prepare(top, &fibers::entry);
  }
  std::fill(done_.begin(), done_.end(), 0);
  std::fill(lane_.begin(), lane_.end(), 0);
  std::size_t const slots = static_cast<std::size_t>(workers_) * static_cast<std::size_t>(lanes_);
  steps_.assign(slots, 0);
  chain_.assign(slots, 0);
  idle_.assign(slots, 0);
  std::fill(waits_.begin(), waits_.end(), 0);
  std::vector<counts> lanes(static_cast<std::size_t>(lanes_));
  body_ = &body;
  fibers* const outer = running;
  running = this;
  while (true) {
    int finished = 0;
    for (int i = 0; i < workers_; ++i) {
      auto const w = static_cast<std::size_t>(i);
      if (done_[w] == 0 && waits_[w] == 0) {
        current_ = i;
        switch_to(&main_sp_, sp_[w]);
      }
      finished += done_[w];
    }
    bool released = false;
    try {
      released = release_groups();
    } catch (...) {
      running = outer;
      body_ = nullptr;
      throw;
    }
    if (released) continue;  // a group barrier closes no interval
    for (std::size_t l = 0; l < lanes.size(); ++l) {
      counts& c = lanes[l];
      c = {};
      for (std::size_t w = l * static_cast<std::size_t>(workers_); w < (l + 1) * static_cast<std::size_t>(workers_); ++w) {
        c.span = std::max(c.span, steps_[w]);
        c.chain = std::max(c.chain, chain_[w]);
        c.work += steps_[w] + chain_[w] - idle_[w];
        steps_[w] = chain_[w] = idle_[w] = 0;
      }
    }
    end const how{finished < workers_, grid_, lane_[static_cast<std::size_t>(workers_ - 1)]};
    if (finished == workers_) {
      interval(lanes, how);
      break;
    }
    if (finished > 0) {
      running = outer;
      body_ = nullptr;
      throw logic_error(error_code::internal, "fibers: " + std::to_string(finished) + " of " +
                                                  std::to_string(workers_) +
                                                  " workers returned while the others wait at a barrier");
    }
    interval(lanes, how);
    std::fill(waits_.begin(), waits_.end(), 0);
  }
  running = outer;
  body_ = nullptr;
}

}  // namespace placer::kernels::model
