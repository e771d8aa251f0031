// CUDA backend: the same portable stages as the CPU backend, compiled by
// nvcc and run through thrust::cuda::par on one stream. Inputs are staged
// into one persistent device arena that grows to the high-water mark, so a
// steady stream of rounds allocates nothing.
#include <placer/kernels/backend.hpp>
#include <placer/topology/error.hpp>

#include "../portable/auction.hpp"
#include "../portable/stages.hpp"

#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#define PLACER_CUDA_TRY(call)                                                                  \
  do {                                                                                         \
    cudaError_t const e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                                     \
      throw ::placer::logic_error(::placer::error_code::internal,                              \
                                  std::string("CUDA error ") + cudaGetErrorName(e_) + " (" +  \
                                      cudaGetErrorString(e_) + ") in " #call);                  \
  } while (0)

namespace placer::kernels {

std::string cuda_probe() {
  int count = 0;
  cudaError_t const e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return std::string("no usable GPU (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  }
  if (count == 0) return "no GPU present";
  return {};
}

namespace {

/// Bump allocator over one device allocation; reset() each round.
class device_arena {
 public:
  ~device_arena() {
    if (base_ != nullptr) cudaFree(base_);
  }
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    if (base_ != nullptr) PLACER_CUDA_TRY(cudaFree(base_));
    capacity_ = bytes + bytes / 2;
    PLACER_CUDA_TRY(cudaMalloc(&base_, capacity_));
  }
  void reset() { used_ = 0; }
  template <class T>
  T* take(std::size_t n) {
    std::size_t const bytes = (n * sizeof(T) + 255) / 256 * 256;
    T* p = reinterpret_cast<T*>(static_cast<char*>(base_) + used_);
    used_ += bytes;
    return p;
  }

 private:
  void* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
};

template <class T>
std::size_t padded(std::size_t n) { return (n * sizeof(T) + 255) / 256 * 256; }

class cuda_backend final : public backend {
 public:
  cuda_backend() {
    PLACER_CUDA_TRY(cudaSetDevice(0));
    cudaDeviceProp prop{};
    PLACER_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    PLACER_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    description_ = std::string("cuda (") + prop.name + ", sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ")";
  }
  ~cuda_backend() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  [[nodiscard]] backend_kind kind() const override { return backend_kind::cuda; }
  [[nodiscard]] std::string const& description() const override { return description_; }

  void score(node_view const& nodes, class_view const& classes, task_view const& tasks,
             score_params const& params, std::span<std::int32_t> out) override {
    std::size_t const cells = static_cast<std::size_t>(nodes.n_nodes) * classes.n_classes;
    arena_.reserve(node_bytes(nodes) + class_bytes(classes) + task_bytes(tasks) + padded<std::int32_t>(cells));
    arena_.reset();
    node_view const dn = upload(nodes);
    class_view const dc = upload(classes);
    task_view const dt = upload(tasks);
    std::int32_t* d_out = arena_.take<std::int32_t>(cells);
    score_matrix(thrust::cuda::par.on(stream_), dn, dc, dt, params, d_out);
    PLACER_CUDA_TRY(cudaPeekAtLastError());
    PLACER_CUDA_TRY(cudaMemcpyAsync(out.data(), d_out, cells * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream_));
    PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
  }

  cluster_stats stats(node_view const& nodes, task_view const& tasks) override {
    arena_.reserve(node_bytes(nodes) + task_bytes(tasks));
    arena_.reset();
    node_view const dn = upload(nodes);
    task_view const dt = upload(tasks);
    cluster_stats const s = reduce_cluster_stats(thrust::cuda::par.on(stream_), dn, dt);
    PLACER_CUDA_TRY(cudaPeekAtLastError());
    return s;
  }

  void domain_capacity(node_view const& nodes, class_view const& classes, std::int32_t c,
                       domain_index_view const& idx, std::span<std::int64_t> cap) override {
    std::size_t const e = static_cast<std::size_t>(idx.n_entries);
    std::size_t const d = static_cast<std::size_t>(idx.n_domains);
    arena_.reserve(node_bytes(nodes) + class_bytes(classes) + 2 * padded<std::int32_t>(e) +
                   padded<std::int32_t>(d) + padded<std::int64_t>(d));
    arena_.reset();
    node_view const dn = upload(nodes);
    class_view const dc = upload(classes);
    domain_index_view di = idx;
    di.node = copy(idx.node, e);
    di.domain = copy(idx.domain, e);
    std::int32_t* d_keys = arena_.take<std::int32_t>(d);
    std::int64_t* d_sums = arena_.take<std::int64_t>(d);
    std::int32_t const k = kernels::domain_capacity(thrust::cuda::par.on(stream_), dn, dc, c, di, d_keys, d_sums);
    PLACER_CUDA_TRY(cudaPeekAtLastError());
    std::vector<std::int32_t> h_keys(static_cast<std::size_t>(k));
    std::vector<std::int64_t> h_sums(static_cast<std::size_t>(k));
    down(h_keys.data(), d_keys, h_keys.size());
    down(h_sums.data(), d_sums, h_sums.size());
    PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
    std::fill(cap.begin(), cap.end(), 0);
    for (std::int32_t i = 0; i < k; ++i) cap[h_keys[i]] = h_sums[i];
  }

  auction_stats auction(auction_problem const& problem, auction_params const& params,
                        std::span<std::int32_t> object_of) override {
    std::size_t const n = static_cast<std::size_t>(problem.n_bidders);
    std::size_t const m = static_cast<std::size_t>(problem.n_objects);
    std::size_t const cells = static_cast<std::size_t>(problem.n_rows) * m;
    std::vector<std::int32_t> h_copy_begin(m + 1);
    std::int64_t const max_value = auction_prepare(problem, h_copy_begin.data());
    std::size_t const copies = static_cast<std::size_t>(h_copy_begin.back());
    arena_.reserve(padded<std::int32_t>(cells) + 3 * padded<std::int32_t>(n) + padded<std::int64_t>(n) +
                   padded<std::int32_t>(m) + padded<std::int32_t>(m + 1) + 2 * padded<std::int64_t>(copies) +
                   2 * padded<std::int32_t>(copies) + 8 * padded<std::int32_t>(n) + padded<std::int64_t>(n) +
                   2 * padded<std::int32_t>(cells));
    arena_.reset();
    auction_buffers b;
    b.problem = problem;
    b.problem.values = copy(problem.values, cells);
    b.problem.row_of = copy(problem.row_of, n);
    b.problem.offset = copy(problem.offset, problem.offset != nullptr ? n : 0);
    b.problem.capacity = copy(problem.capacity, m);
    b.copy_begin = copy(h_copy_begin.data(), m + 1);
    b.n_copies = static_cast<std::int64_t>(copies);
    b.price = arena_.take<std::int64_t>(copies);
    b.price_tmp = arena_.take<std::int64_t>(copies);
    b.holder = arena_.take<std::int32_t>(copies);
    b.holder_tmp = arena_.take<std::int32_t>(copies);
    b.assigned = arena_.take<std::int32_t>(n);
    b.active = arena_.take<std::int32_t>(n);
    b.bid_obj = arena_.take<std::int32_t>(n);
    b.bid_bidder = arena_.take<std::int32_t>(n);
    b.seg_begin = arena_.take<std::int32_t>(n);
    b.active_row = arena_.take<std::int32_t>(n);
    b.row_seg = arena_.take<std::int32_t>(n);
    b.bid_copy = arena_.take<std::int32_t>(n);
    b.heap_obj = arena_.take<std::int32_t>(cells);
    b.heap_taken = arena_.take<std::int32_t>(cells);
    b.bid_val = arena_.take<std::int64_t>(n);
    // The reverse step runs on the host: state down, step, state up.
    std::vector<std::int64_t> h_price(copies);
    std::vector<std::int32_t> h_holder(copies), h_assigned_phase(n);
    auto reverse = [&](std::int64_t scale, std::int64_t eps) {
      down(h_price.data(), b.price, copies);
      down(h_holder.data(), b.holder, copies);
      down(h_assigned_phase.data(), b.assigned, n);
      PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
      auction_reverse_step(problem, h_copy_begin.data(), h_price.data(), h_holder.data(), h_assigned_phase.data(),
                           scale, eps);
      up(b.price, h_price.data(), copies);
      up(b.holder, h_holder.data(), copies);
      up(b.assigned, h_assigned_phase.data(), n);
    };
    auction_stats const st = run_auction(thrust::cuda::par.on(stream_), b, max_value, params, reverse);
    PLACER_CUDA_TRY(cudaPeekAtLastError());
    if (st.rounds > params.max_rounds) {
      throw logic_error(error_code::internal,
                        "auction did not converge within " + std::to_string(params.max_rounds) + " rounds");
    }
    std::vector<std::int32_t> h_assigned(n);
    if (n > 0) {
      PLACER_CUDA_TRY(cudaMemcpyAsync(h_assigned.data(), b.assigned, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream_));
    }
    PLACER_CUDA_TRY(cudaStreamSynchronize(stream_));
    for (std::size_t i = 0; i < n; ++i) object_of[i] = h_assigned[i] >= 0 ? h_assigned[i] : -1;
    return st;
  }

 private:
  template <class T>
  void down(T* h, T const* d, std::size_t n) {
    if (n > 0) PLACER_CUDA_TRY(cudaMemcpyAsync(h, d, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
  }
  template <class T>
  void up(T* d, T const* h, std::size_t n) {
    if (n > 0) PLACER_CUDA_TRY(cudaMemcpyAsync(d, h, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
  }
  template <class T>
  T const* copy(T const* h, std::size_t n) {
    if (n == 0 || h == nullptr) return nullptr;
    T* d = arena_.take<T>(n);
    PLACER_CUDA_TRY(cudaMemcpyAsync(d, h, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
    return d;
  }
  static std::size_t node_bytes(node_view const& v) {
    std::size_t const n = v.n_nodes;
    return 3 * padded<std::int64_t>(n) + padded<std::int32_t>(n) + 2 * padded<std::uint8_t>(n) +
           padded<std::int32_t>(n + 1) + padded<std::int32_t>(v.n_gpus) + padded<std::int32_t>(n) +
           padded<std::uint8_t>(v.n_gpus) + padded<std::int32_t>(n);
  }
  static std::size_t class_bytes(class_view const& v) {
    std::size_t const n = v.n_classes;
    return 2 * padded<std::int32_t>(n) + 2 * padded<std::int64_t>(n) + padded<std::uint64_t>(n) +
           3 * padded<std::uint8_t>(n);
  }
  static std::size_t task_bytes(task_view const& v) {
    std::size_t const n = v.n_tasks;
    return 3 * padded<std::int32_t>(n) + padded<std::int64_t>(n) + padded<std::uint64_t>(n);
  }
  node_view upload(node_view v) {
    std::size_t const n = v.n_nodes;
    v.cpu_free = copy(v.cpu_free, n);
    v.cpu_capacity = copy(v.cpu_capacity, n);
    v.mem_free = copy(v.mem_free, n);
    v.model = copy(v.model, n);
    v.pool = copy(v.pool, n);
    v.flags = copy(v.flags, n);
    v.gpu_begin = copy(v.gpu_begin, n + 1);
    v.gpu_free = copy(v.gpu_free, static_cast<std::size_t>(v.n_gpus));
    v.gpu_capacity = copy(v.gpu_capacity, n);
    v.gpu_island = copy(v.gpu_island, static_cast<std::size_t>(v.n_gpus));
    v.scarcity = copy(v.scarcity, n);
    return v;
  }
  class_view upload(class_view v) {
    std::size_t const n = v.n_classes;
    v.gpus = copy(v.gpus, n);
    v.milli = copy(v.milli, n);
    v.cpu = copy(v.cpu, n);
    v.mem = copy(v.mem, n);
    v.model_mask = copy(v.model_mask, n);
    v.pool_mask = copy(v.pool_mask, n);
    v.loan_ok = copy(v.loan_ok, n);
    v.any_model = copy(v.any_model, n);
    return v;
  }
  task_view upload(task_view v) {
    std::size_t const n = v.n_tasks;
    v.gpus = copy(v.gpus, n);
    v.milli = copy(v.milli, n);
    v.cpu = copy(v.cpu, n);
    v.model_mask = copy(v.model_mask, n);
    v.freq_ppm = copy(v.freq_ppm, n);
    return v;
  }

  cudaStream_t stream_ = nullptr;
  device_arena arena_;
  std::string description_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend() { return std::make_unique<cuda_backend>(); }

}  // namespace placer::kernels
