// CUDA backend: the same portable stages as the CPU backend, compiled by
// nvcc and run through thrust::cuda::par on one stream. Inputs are staged
// into one persistent device arena with a pinned host mirror (one
// host-to-device copy per call; results come back into the mirror), and
// Thrust's temporary storage comes from cached device blocks. All of it
// grows to the high-water mark, so a steady stream of rounds allocates
// nothing on the device or in pinned memory.
#include <placer/kernels/backend.hpp>
#include <placer/kernels/probe.hpp>
#include <placer/topology/error.hpp>

#include "../portable/stages.hpp"
#include "../portable/tier_program.hpp"

#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define PLACER_CUDA_TRY(call)                                                                  \
  do {                                                                                         \
    cudaError_t const e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                                     \
      throw ::placer::kernels::device_fault(std::string("CUDA error ") + cudaGetErrorName(e_) + \
                                            " (" + cudaGetErrorString(e_) + ") in " #call);     \
  } while (0)

namespace placer::kernels {

namespace {
__global__ void probe_kernel(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x) * 3 + 1; }

/// The probe's verdict, worked out once: the driver, the device and its
/// architecture against what was built, and a tiny kernel run for real.
struct probe_result {
  std::string reason;   ///< "" when the backend can run
  std::string summary;  ///< the device, when there is one
};

probe_result run_probe() {
  auto cuda_error = [](char const* what, cudaError_t e) {
    cudaGetLastError();  // clear a sticky error so later calls start clean
    return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  };
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 without a driver
  cudaRuntimeGetVersion(&runtime);
  if (auto why = driver_mismatch(driver, runtime); !why.empty()) return {why, {}};
  int count = 0;
  if (cudaError_t const e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return {"no usable GPU (" + cuda_error("cudaGetDeviceCount", e) + ")", {}};
  }
  if (count == 0) return {"no GPU present", {}};
  cudaDeviceProp p{};
  if (cudaError_t const e = cudaGetDeviceProperties(&p, 0); e != cudaSuccess) {
    return {cuda_error("cudaGetDeviceProperties", e), {}};
  }
  int const cc = p.major * 10 + p.minor;
  std::string const summary = std::string(p.name) + ", sm_" + std::to_string(cc) + ", driver " +
                              cuda_version_text(driver) + ", runtime " + cuda_version_text(runtime);
  if (!arch_runs(cc, PLACER_CUDA_ARCHS)) {
    return {"GPU 0 (" + summary + ") cannot run code built for " + std::string(PLACER_CUDA_ARCHS) +
                ": rebuild with -DPLACER_CUDA_ARCHITECTURES=" + std::to_string(cc),
            summary};
  }
  // One tiny kernel, launched and read back: what the first stage would do.
  int* d = nullptr;
  int h[32] = {};
  if (cudaError_t const e = cudaSetDevice(0); e != cudaSuccess) return {cuda_error("cudaSetDevice", e), summary};
  if (cudaError_t const e = cudaMalloc(&d, sizeof h); e != cudaSuccess) return {cuda_error("cudaMalloc", e), summary};
  probe_kernel<<<1, 32>>>(d);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return {cuda_error("a test kernel", e), summary};
  for (int i = 0; i < 32; ++i) {
    if (h[i] != 3 * i + 1) return {"a test kernel returned wrong values on GPU 0 (" + summary + ")", summary};
  }
  return {{}, summary};
}

probe_result const& probe() {
  static probe_result const r = run_probe();
  return r;
}
}  // namespace

std::string cuda_probe() { return probe().reason; }
std::string cuda_probe_summary() { return probe().summary; }

namespace {

/// One CTA as the tier program's team (tier_program.hpp).
struct cuda_team {
  __host__ __device__ std::int32_t rank() const {
#ifdef __CUDA_ARCH__
    return static_cast<std::int32_t>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ std::int32_t size() const {
#ifdef __CUDA_ARCH__
    return static_cast<std::int32_t>(blockDim.x);
#else
    return 1;
#endif
  }
  /// __syncthreads costs less than any round's work: never solo.
  __host__ __device__ static constexpr std::int32_t solo_below() { return 0; }
  __host__ __device__ void sync() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  __host__ __device__ std::int32_t fetch_add(std::int32_t* p, std::int32_t v) const {
#ifdef __CUDA_ARCH__
    return atomicAdd(p, v);
#else
    std::int32_t const old = *p;
    *p += v;
    return old;
#endif
  }
};

/// Threads of the tier program's CTA. The score functor keeps a 64-entry
/// GPU vector per thread, so registers, not the node count, bound it.
constexpr int tier_threads = 256;

__global__ void __launch_bounds__(tier_threads) tier_kernel(tier_buffers b) {
  cuda_team team;
  tier_program(team, b);
}

/// Page-locked host memory, grown to the high-water mark (never shrunk).
/// Copies from and to it are true DMA, asynchronous to the host, and do not
/// go through the driver's own staging as pageable memory does.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  pinned_buffer(pinned_buffer const&) = delete;
  pinned_buffer& operator=(pinned_buffer const&) = delete;
  ~pinned_buffer() {
    if (base_ != nullptr) cudaFreeHost(base_);
  }
  /// Grows to at least `bytes`. Only between calls: nothing may be in flight.
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    if (base_ != nullptr) PLACER_CUDA_TRY(cudaFreeHost(base_));
    base_ = nullptr;
    capacity_ = 0;
    PLACER_CUDA_TRY(cudaHostAlloc(&base_, bytes, cudaHostAllocDefault));
    capacity_ = bytes;
  }
  [[nodiscard]] char* data() const { return static_cast<char*>(base_); }

 private:
  void* base_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Bump allocator over one device allocation with a pinned host mirror of
/// the same size: the host side of every transfer lives at the same offset
/// as its device buffer. Inputs are staged (memcpy into the mirror) and sent
/// in one copy per call; results come back into the mirror. Both grow to
/// the high-water mark, so a steady stream of rounds allocates nothing.
/// reset() each call.
class device_arena {
 public:
  device_arena() = default;
  device_arena(device_arena const&) = delete;
  device_arena& operator=(device_arena const&) = delete;
  ~device_arena() {
    if (base_ != nullptr) cudaFree(base_);
  }
  /// Only at the start of a call, with nothing in flight (every call ends
  /// with its stream synchronised).
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    if (base_ != nullptr) PLACER_CUDA_TRY(cudaFree(base_));
    base_ = nullptr;
    capacity_ = 0;
    std::size_t const grown = bytes + bytes / 2;
    PLACER_CUDA_TRY(cudaMalloc(&base_, grown));
    mirror_.reserve(grown);
    capacity_ = grown;
  }
  void reset() { used_ = staged_begin_ = staged_end_ = 0; }
  template <class T>
  T* take(std::size_t n) {
    std::size_t const bytes = (n * sizeof(T) + 255) / 256 * 256;
    if (used_ + bytes > capacity_) {
      throw logic_error(error_code::internal, "device arena overflow (reserve() undercounted)");
    }
    T* p = reinterpret_cast<T*>(static_cast<char*>(base_) + used_);
    used_ += bytes;
    return p;
  }
  /// The pinned host mirror of a device buffer of this arena.
  template <class T>
  T* host(T const* d) const {
    return reinterpret_cast<T*>(mirror_.data() + (reinterpret_cast<char const*>(d) - static_cast<char const*>(base_)));
  }
  /// Takes n elements and stages h[0..n) into their mirror; flush() sends
  /// everything staged since the last flush in one copy. nullptr for none.
  template <class T>
  T* stage(T const* h, std::size_t n) {
    if (n == 0 || h == nullptr) return nullptr;
    std::size_t const at = used_;
    T* d = take<T>(n);
    std::memcpy(mirror_.data() + at, h, n * sizeof(T));
    if (staged_end_ == staged_begin_) staged_begin_ = at;
    staged_end_ = at + n * sizeof(T);
    return d;
  }
  void flush(cudaStream_t stream) {
    if (staged_end_ > staged_begin_) {
      PLACER_CUDA_TRY(cudaMemcpyAsync(static_cast<char*>(base_) + staged_begin_, mirror_.data() + staged_begin_,
                                      staged_end_ - staged_begin_, cudaMemcpyHostToDevice, stream));
    }
    staged_begin_ = staged_end_ = used_;
  }

 private:
  void* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::size_t staged_begin_ = 0, staged_end_ = 0;  ///< bytes staged since the last flush
  pinned_buffer mirror_;
};

/// Thrust's temporary storage (sort, copy_if, reduce) from cached device
/// blocks instead of a cudaMalloc / cudaFree per algorithm call (cudaFree
/// also synchronises the device). Blocks grow to the high-water mark. One
/// stream per backend, so a block handed back while its kernels still run
/// is only reused by work ordered after them.
class temp_allocator {
 public:
  using value_type = char;

  temp_allocator() { blocks_.reserve(8); }
  temp_allocator(temp_allocator const&) = delete;
  temp_allocator& operator=(temp_allocator const&) = delete;
  ~temp_allocator() {
    for (auto const& b : blocks_) {
      if (b.ptr != nullptr) cudaFree(b.ptr);
    }
  }

  char* allocate(std::size_t n) {
    std::size_t const want = n > 0 ? n : 1;
    block* best = nullptr;  // the smallest free block that fits
    for (auto& b : blocks_) {
      if (!b.used && b.size >= want && (best == nullptr || b.size < best->size)) best = &b;
    }
    if (best == nullptr) {
      // Grow the largest free block (cudaFree waits for the device, so
      // nothing still uses it), or add one if all are in use.
      for (auto& b : blocks_) {
        if (!b.used && (best == nullptr || b.size > best->size)) best = &b;
      }
      if (best == nullptr) best = &blocks_.emplace_back();
      if (best->ptr != nullptr) PLACER_CUDA_TRY(cudaFree(best->ptr));
      best->ptr = nullptr;
      best->size = 0;
      std::size_t const bytes = (want + want / 2 + 4095) / 4096 * 4096;
      PLACER_CUDA_TRY(cudaMalloc(&best->ptr, bytes));
      best->size = bytes;
    }
    best->used = true;
    return best->ptr;
  }
  void deallocate(char* p, std::size_t) noexcept {
    for (auto& b : blocks_) {
      if (b.ptr == p) {
        b.used = false;
        return;
      }
    }
  }

 private:
  struct block {
    char* ptr = nullptr;
    std::size_t size = 0;
    bool used = false;
  };
  std::vector<block> blocks_;
};

template <class T>
std::size_t padded(std::size_t n) { return (n * sizeof(T) + 255) / 256 * 256; }

class cuda_backend final : public backend {
  /// Runs a stage; any failure of the device (a CUDA error, Thrust's
  /// system_error, a device allocation that failed) leaves as device_fault
  /// naming the device, so the service falls back to the CPU.
  /// Every entry point sets its device first: the calling thread (the
  /// worker's) may have used another, and the default is GPU 0. On any
  /// failure the stream is drained before the exception leaves, so no copy
  /// or kernel still in flight can touch the arena or its pinned mirror
  /// once the backend that owns them is dropped (the service drops it after
  /// a device fault).
  template <class F>
  auto guard(F&& f) -> decltype(f()) {
    auto settle = [&] {
      if (stream_ != nullptr) cudaStreamSynchronize(stream_);
      cudaGetLastError();
    };
    try {
      PLACER_CUDA_TRY(cudaSetDevice(device_));
      return f();
    } catch (device_fault const& e) {
      settle();
      throw device_fault(description_ + ": " + e.what());
    } catch (thrust::system_error const& e) {
      settle();
      throw device_fault(description_ + ": " + e.what());
    } catch (std::bad_alloc const& e) {
      settle();
      throw device_fault(description_ + ": device allocation failed (" + e.what() + ")");
    } catch (...) {
      settle();
      throw;
    }
  }
  /// Thrust on this backend's stream, temporary storage from the cache.
  auto exec() { return thrust::cuda::par(temp_).on(stream_); }
  /// The same without the synchronisation after the call, where the backend
  /// synchronises itself before reading a result.
  auto exec_nosync() { return thrust::cuda::par_nosync(temp_).on(stream_); }

 public:
  explicit cuda_backend(int device) : device_(device) {
    int count = 0;
    PLACER_CUDA_TRY(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count) {
      throw logic_error(error_code::unavailable,
                        "GPU " + std::to_string(device) + " is not there (" + std::to_string(count) + " GPU(s))");
    }
    PLACER_CUDA_TRY(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    PLACER_CUDA_TRY(cudaGetDeviceProperties(&prop, device_));
    int const cc = prop.major * 10 + prop.minor;
    if (!arch_runs(cc, PLACER_CUDA_ARCHS)) {
      throw logic_error(error_code::unavailable, "GPU " + std::to_string(device) + " (" + prop.name + ", sm_" +
                                                     std::to_string(cc) + ") cannot run code built for " +
                                                     PLACER_CUDA_ARCHS);
    }
    PLACER_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    // The device, its architecture, the driver and the runtime.
    description_ = "cuda (GPU " + std::to_string(device_) + ": " + prop.name + ", sm_" + std::to_string(cc) +
                   ", driver " + cuda_version_text(driver) + ", runtime " + cuda_version_text(runtime) + ")";
  }
  ~cuda_backend() override {
    if (stream_ != nullptr) {
      cudaSetDevice(device_);
      cudaStreamDestroy(stream_);
    }
  }

  [[nodiscard]] backend_kind kind() const override { return backend_kind::cuda; }
  [[nodiscard]] std::string const& description() const override { return description_; }

  void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
             score_params const& params, std::span<std::int32_t> out) override {
    return guard([&] {
      std::size_t const cells = static_cast<std::size_t>(nodes.n_nodes) * classes.n_classes;
      std::size_t const table = frag_table_cells(nodes, classes, tasks, params);
      arena_.reserve(node_bytes(nodes) + class_bytes(classes) + task_bytes(tasks) + padded<std::int32_t>(cells) +
                     padded<std::int64_t>(table));
      arena_.reset();
      node_view const dn = upload(nodes);
      class_view const dc = upload(classes);
      task_view const dt = upload(tasks);
      arena_.flush(stream_);
      std::int32_t* d_out = arena_.take<std::int32_t>(cells);
      std::int64_t* d_table = arena_.take<std::int64_t>(table);  // device only: never copied back
      score_matrix(exec_nosync(), dn, dc, dt, params, d_out, d_table, steps_);
      PLACER_CUDA_TRY(cudaPeekAtLastError());
      std::int32_t const* h_out = down(d_out, cells);
      PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
      if (cells > 0) std::memcpy(out.data(), h_out, cells * sizeof(std::int32_t));
    });
  }

  cluster_stats stats(node_view const& nodes, task_view const& tasks) override {
    return guard([&] {
      arena_.reserve(node_bytes(nodes) + task_bytes(tasks));
      arena_.reset();
      node_view const dn = upload(nodes);
      task_view const dt = upload(tasks);
      arena_.flush(stream_);
      // The reduction hands its 48-byte result back itself (and waits for it).
      cluster_stats const s = reduce_cluster_stats(exec(), dn, dt, steps_);
      PLACER_CUDA_TRY(cudaPeekAtLastError());
      PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));  // the staged inputs are free again
      return s;
    });
  }

  void domain_capacity(node_view const& nodes, class_view const& classes, std::span<std::int32_t const> of,
                       domain_index_view const& idx, std::span<std::int64_t> cap) override {
    return guard([&] {
      std::size_t const e = static_cast<std::size_t>(idx.n_entries);
      std::size_t const d = static_cast<std::size_t>(idx.n_domains);
      std::size_t const n = static_cast<std::size_t>(nodes.n_nodes);
      std::size_t const k = of.size();
      arena_.reserve(node_bytes(nodes) + class_bytes(classes) + padded<std::int32_t>(k) + padded<std::int32_t>(e) +
                     padded<std::int32_t>(d + 1) + padded<std::int32_t>(k * n) + padded<std::int64_t>(k * d));
      arena_.reset();
      node_view const dn = upload(nodes);
      class_view const dc = upload(classes);
      std::int32_t const* d_of = arena_.stage(of.data(), k);
      domain_index_view di = idx;
      di.node = arena_.stage(idx.node, e);
      di.begin = arena_.stage(idx.begin, d + 1);
      arena_.flush(stream_);
      std::int32_t* d_fit = arena_.take<std::int32_t>(k * n);
      std::int64_t* d_cap = arena_.take<std::int64_t>(k * d);
      kernels::domain_capacity(exec_nosync(), dn, dc, d_of, static_cast<std::int32_t>(k), di, d_fit, d_cap, steps_);
      PLACER_CUDA_TRY(cudaPeekAtLastError());
      std::int64_t const* h_cap = down(d_cap, k * d);
      PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
      if (k * d > 0) std::memcpy(cap.data(), h_cap, k * d * sizeof(std::int64_t));
    });
  }

  tier_stats place_tier(tier_problem const& problem, std::vector<tier_placement>& out) override {
    return guard([&]() -> tier_stats {
      node_view const& nv = problem.nodes;
      std::size_t const cells = static_cast<std::size_t>(nv.n_nodes) * problem.classes.n_classes;
      std::size_t const rows = static_cast<std::size_t>(problem.n_rows);
      tier_heap_begin_.resize(rows + 1);
      std::int32_t const copies = tier_heap_begin(problem, tier_heap_begin_.data());
      std::size_t work = 0;
      auto measure = [&](auto* tag, std::size_t n) -> decltype(tag) {
        work += padded<std::remove_pointer_t<decltype(tag)>>(n);
        return nullptr;
      };
      tier_buffers b{};
      tier_layout(b, nv.n_nodes, problem.n_rows, copies, measure);
      arena_.reserve(node_bytes(nv) + class_bytes(problem.classes) + task_bytes(problem.tasks) +
                     padded<std::int32_t>(cells) + 3 * padded<std::int32_t>(rows) + padded<std::int32_t>(rows + 1) +
                     padded<std::int32_t>(static_cast<std::size_t>(nv.n_nodes)) +
                     padded<std::int32_t>(static_cast<std::size_t>(problem.classes.n_classes)) +
                     padded<std::uint8_t>(static_cast<std::size_t>(problem.classes.n_classes)) +
                     padded<std::int32_t>(problem.changed != nullptr ? static_cast<std::size_t>(problem.n_changed) : 0) +
                     padded<std::int32_t>(problem.state != nullptr ? static_cast<std::size_t>(nv.n_nodes) : 0) +
                     padded<tier_control>(1) + work);
      arena_.reset();
      // Inputs up in one copy: the nodes (their free arrays are the program's
      // to commit into), classes, tasks, the score matrix, the rows.
      b.p = problem;
      b.p.nodes = upload(nv);
      b.p.classes = upload(problem.classes);
      b.p.tasks = upload(problem.tasks);
      b.p.gpu_free = const_cast<std::int32_t*>(b.p.nodes.gpu_free);
      b.p.cpu_free = const_cast<std::int64_t*>(b.p.nodes.cpu_free);
      b.p.mem_free = const_cast<std::int64_t*>(b.p.nodes.mem_free);
      b.p.scores = arena_.stage(static_cast<std::int32_t const*>(problem.scores), cells);
      b.p.row_class = arena_.stage(problem.row_class, rows);
      b.p.demand = arena_.stage(problem.demand, rows);
      b.p.row_cap = arena_.stage(problem.row_cap, problem.row_cap != nullptr ? rows : 0);
      b.p.stamp = arena_.stage(static_cast<std::int32_t const*>(problem.stamp), static_cast<std::size_t>(nv.n_nodes));
      b.p.fresh = arena_.stage(static_cast<std::int32_t const*>(problem.fresh),
                               static_cast<std::size_t>(problem.classes.n_classes));
      b.p.changed = arena_.stage(problem.changed, problem.changed != nullptr ? static_cast<std::size_t>(problem.n_changed) : 0);
      b.p.live_class = arena_.stage(problem.live_class,
                                    problem.live_class != nullptr ? static_cast<std::size_t>(problem.classes.n_classes) : 0);
      b.p.state = arena_.stage(static_cast<std::int32_t const*>(problem.state),
                               problem.state != nullptr ? static_cast<std::size_t>(nv.n_nodes) : 0);
      b.heap_begin = arena_.stage(static_cast<std::int32_t const*>(tier_heap_begin_.data()), rows + 1);
      tier_control const zero{};
      b.ctl = arena_.stage(&zero, 1);
      arena_.flush(stream_);
      auto take = [&](auto* tag, std::size_t n) -> decltype(tag) {
        return arena_.take<std::remove_pointer_t<decltype(tag)>>(n);
      };
      tier_layout(b, nv.n_nodes, problem.n_rows, copies, take);
      tier_kernel<<<1, tier_threads, 0, stream_>>>(b);
      PLACER_CUDA_TRY(cudaPeekAtLastError());
      count_tier(steps_);
      // Results down in one wait: control, placements, node state, scores,
      // the clock's stamps.
      tier_control const* h_ctl = down(b.ctl, 1);
      tier_placement const* h_out = down(b.out, static_cast<std::size_t>(copies));
      std::int32_t const* h_gpu = down(b.p.gpu_free, static_cast<std::size_t>(nv.n_gpus));
      std::int64_t const* h_cpu = down(b.p.cpu_free, static_cast<std::size_t>(nv.n_nodes));
      std::int64_t const* h_mem = down(b.p.mem_free, static_cast<std::size_t>(nv.n_nodes));
      std::int32_t const* h_scores = down(b.p.scores, cells);
      std::int32_t const* h_state = problem.state != nullptr ? down(b.p.state, static_cast<std::size_t>(nv.n_nodes)) : nullptr;
      std::int32_t const* h_stamp = down(b.p.stamp, static_cast<std::size_t>(nv.n_nodes));
      std::int32_t const* h_fresh = down(b.p.fresh, static_cast<std::size_t>(problem.classes.n_classes));
      PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
      std::memcpy(problem.stamp, h_stamp, static_cast<std::size_t>(nv.n_nodes) * sizeof(std::int32_t));
      std::memcpy(problem.fresh, h_fresh, static_cast<std::size_t>(problem.classes.n_classes) * sizeof(std::int32_t));
      if (h_state != nullptr) std::memcpy(problem.state, h_state, static_cast<std::size_t>(nv.n_nodes) * sizeof(std::int32_t));
      std::memcpy(problem.gpu_free, h_gpu, static_cast<std::size_t>(nv.n_gpus) * sizeof(std::int32_t));
      std::memcpy(problem.cpu_free, h_cpu, static_cast<std::size_t>(nv.n_nodes) * sizeof(std::int64_t));
      std::memcpy(problem.mem_free, h_mem, static_cast<std::size_t>(nv.n_nodes) * sizeof(std::int64_t));
      if (cells > 0) std::memcpy(problem.scores, h_scores, cells * sizeof(std::int32_t));
      out.assign(h_out, h_out + h_ctl->placed);
      return {h_ctl->iterations, h_ctl->rounds, h_ctl->round_cap_hit != 0};
    });
  }

 private:
  /// Device buffer -> its pinned mirror (asynchronous; synchronise before
  /// reading). Returns the mirror.
  template <class T>
  T* down(T const* d, std::size_t n) {
    T* h = arena_.host(d);
    if (n > 0) PLACER_CUDA_TRY(cudaMemcpyAsync(h, d, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    return h;
  }
  /// Pinned mirror -> its device buffer (asynchronous).
  template <class T>
  void up(T* d, std::size_t n) {
    if (n > 0) PLACER_CUDA_TRY(cudaMemcpyAsync(d, arena_.host(d), n * sizeof(T), cudaMemcpyHostToDevice, stream_));
  }
  static std::size_t node_bytes(node_view const& v) {
    std::size_t const n = v.n_nodes;
    return 3 * padded<std::int64_t>(n) + padded<std::int32_t>(n) + 2 * padded<std::uint8_t>(n) +
           padded<std::int32_t>(n + 1) + padded<std::int32_t>(v.n_gpus) + padded<std::int32_t>(n) +
           padded<std::uint8_t>(v.n_gpus) + 3 * padded<std::int32_t>(n) +  // scarcity, same_as, group
           padded<std::int32_t>(v.frag_slot != nullptr ? n : 0) + padded<std::int32_t>(static_cast<std::size_t>(v.n_frag));
  }
  static std::size_t class_bytes(class_view const& v) {
    std::size_t const n = v.n_classes;
    return 2 * padded<std::int32_t>(n) + 2 * padded<std::int64_t>(n) + padded<std::uint64_t>(n) +
           3 * padded<std::uint8_t>(n) + padded<std::uint8_t>(v.one_per_node != nullptr ? n : 0) + constraint_bytes(v);
  }
  static std::size_t constraint_bytes(class_view const& v) {
    if (v.admit == nullptr) return 0;
    std::size_t const cells = static_cast<std::size_t>(v.n_sets) * static_cast<std::size_t>(v.n_groups);
    return padded<std::int32_t>(v.n_classes) + padded<std::uint8_t>(cells) + padded<std::int32_t>(cells);
  }
  static std::size_t task_bytes(task_view const& v) {
    std::size_t const n = v.n_tasks;
    return 3 * padded<std::int32_t>(n) + padded<std::int64_t>(n) + padded<std::uint64_t>(n);
  }
  // Views staged into the arena's mirror; flush() sends them in one copy.
  node_view upload(node_view v) {
    std::size_t const n = v.n_nodes;
    v.cpu_free = arena_.stage(v.cpu_free, n);
    v.cpu_capacity = arena_.stage(v.cpu_capacity, n);
    v.mem_free = arena_.stage(v.mem_free, n);
    v.model = arena_.stage(v.model, n);
    v.pool = arena_.stage(v.pool, n);
    v.flags = arena_.stage(v.flags, n);
    v.gpu_begin = arena_.stage(v.gpu_begin, n + 1);
    v.gpu_free = arena_.stage(v.gpu_free, static_cast<std::size_t>(v.n_gpus));
    v.gpu_capacity = arena_.stage(v.gpu_capacity, n);
    v.gpu_island = arena_.stage(v.gpu_island, static_cast<std::size_t>(v.n_gpus));
    v.scarcity = arena_.stage(v.scarcity, n);
    v.same_as = arena_.stage(v.same_as, v.same_as != nullptr ? n : 0);
    v.group = arena_.stage(v.group, v.group != nullptr ? n : 0);
    v.frag_slot = arena_.stage(v.frag_slot, v.frag_slot != nullptr ? n : 0);
    v.frag_node = arena_.stage(v.frag_node, v.frag_node != nullptr ? static_cast<std::size_t>(v.n_frag) : 0);
    return v;
  }
  class_view upload(class_view v) {
    std::size_t const n = v.n_classes;
    v.gpus = arena_.stage(v.gpus, n);
    v.milli = arena_.stage(v.milli, n);
    v.cpu = arena_.stage(v.cpu, n);
    v.mem = arena_.stage(v.mem, n);
    v.model_mask = arena_.stage(v.model_mask, n);
    v.pool_mask = arena_.stage(v.pool_mask, n);
    v.loan_ok = arena_.stage(v.loan_ok, n);
    v.any_model = arena_.stage(v.any_model, n);
    v.one_per_node = arena_.stage(v.one_per_node, v.one_per_node != nullptr ? n : 0);
    if (v.admit != nullptr) {
      std::size_t const cells = static_cast<std::size_t>(v.n_sets) * static_cast<std::size_t>(v.n_groups);
      v.constraint = arena_.stage(v.constraint, n);
      v.admit = arena_.stage(v.admit, cells);
      v.prefer = arena_.stage(v.prefer, cells);
    }
    return v;
  }
  task_view upload(task_view v) {
    std::size_t const n = v.n_tasks;
    v.gpus = arena_.stage(v.gpus, n);
    v.milli = arena_.stage(v.milli, n);
    v.cpu = arena_.stage(v.cpu, n);
    v.model_mask = arena_.stage(v.model_mask, n);
    v.freq_ppm = arena_.stage(v.freq_ppm, n);
    return v;
  }

  cudaStream_t stream_ = nullptr;
  device_arena arena_;
  temp_allocator temp_;
  std::vector<std::int32_t> tier_heap_begin_;
  int device_ = 0;
  std::string description_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(int device) { return std::make_unique<cuda_backend>(device); }

}  // namespace placer::kernels
