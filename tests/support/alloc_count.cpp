// The counting global operator new and delete of alloc_count.hpp.
#include "alloc_count.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> counting{false};
std::atomic<bool> aside{false};           ///< an aside_scope is open
std::atomic<std::int64_t> n_allocs[2]{};  ///< [0] outside an aside_scope, [1] inside
std::atomic<std::int64_t> n_bytes[2]{};

void* counted(std::size_t n, std::size_t align) {
  if (counting.load(std::memory_order_relaxed)) {
    int const who = aside.load(std::memory_order_relaxed) ? 1 : 0;
    n_allocs[who].fetch_add(1, std::memory_order_relaxed);
    n_bytes[who].fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  }
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else {
    n = (n + align - 1) / align * align;
    p = std::aligned_alloc(align, n);
  }
  return p;
}

}  // namespace

namespace placer::testing_support {

void start_counting() {
  for (int k = 0; k < 2; ++k) n_allocs[k] = n_bytes[k] = 0;
  counting = true;
}

alloc_count stop_counting() {
  counting = false;
  return {n_allocs[0].load(), n_bytes[0].load(), n_allocs[1].load(), n_bytes[1].load()};
}

aside_scope::aside_scope() { aside = true; }
aside_scope::~aside_scope() { aside = false; }

}  // namespace placer::testing_support

void* operator new(std::size_t n) {
  if (void* p = counted(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = counted(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = counted(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::nothrow_t const&) noexcept { return counted(n, 0); }
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return counted(n, static_cast<std::size_t>(a));
}
// The replaced operator new above allocates with std::malloc, so std::free
// is the matching release.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
