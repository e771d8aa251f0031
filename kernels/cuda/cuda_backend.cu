// CUDA backend: device_backend (portable/device_backend.hpp: arenas,
// staging, the bound round kept on the device, node records both ways)
// over cuda_device below: one stream, cudaMemcpyAsync from pinned mirrors,
// a call's stages as one program on a cooperative grid (stage_program.hpp),
// the tier program on one CTA or a grid of them. Its host twin (src/device_twin.cpp) runs the same
// device_backend over host memory in CI.
#include <placer/kernels/backend.hpp>
#include <placer/kernels/probe.hpp>
#include <placer/topology/error.hpp>

#include "../portable/device_backend.hpp"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
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
std::string cuda_built_for() { return PLACER_CUDA_ARCHS; }

namespace {

/// This thread's run of `width` lanes for the group exchanges (group_fold
/// and its kin): the runs aligned to fold_span(width) within the warp,
/// lanes past the run (a partial last warp's) out of the mask.
struct warp_run {
  unsigned lane, span, base, mask;
  __device__ explicit warp_run(std::int32_t width)
      : lane(threadIdx.x & 31u),
        span(static_cast<unsigned>(fold_span(width))),
        base(lane & ~(span - 1u)),
        mask(width >= 32 ? 0xffffffffu : ((1u << width) - 1u) << base) {}
};

/// One CTA as the tier program's team (tier_program.hpp); Wide: its
/// team steps (team_wide), or a thread per row and rank 0's serial steps
/// as the first GPU run had them (PLACER_CUDA_TEAM_STEPS=0, to compare).
/// Grid: a CTA of a cooperative launch (tier_program.hpp, "The grid"):
/// the leading CTA runs the program, the others join its wide phases.
/// Cluster: the grid is one thread-block cluster, its barriers the
/// cluster's (tier_cluster_kernel).
template <bool Wide, bool Grid = false, bool Cluster = false>
struct cuda_team {
  static_assert(!Cluster || Grid, "a cluster is the whole grid");
  __host__ __device__ std::int32_t blocks() const {
#ifdef __CUDA_ARCH__
    return Grid ? static_cast<std::int32_t>(gridDim.x) : 1;
#else
    return 1;
#endif
  }
  __host__ __device__ std::int32_t block() const {
#ifdef __CUDA_ARCH__
    return Grid ? static_cast<std::int32_t>(blockIdx.x) : 0;
#else
    return 0;
#endif
  }
  template <class F>
  __host__ __device__ void each_block(F&& f) const {
    f(block());
  }
  __host__ __device__ void grid_sync() const {
#ifdef __CUDA_ARCH__
    if constexpr (Cluster) {
#if __CUDA_ARCH__ >= 900
      cooperative_groups::this_cluster().sync();
#else
      __trap();  // never launched below sm_90 (cuda_device::cluster_)
#endif
    } else if constexpr (Grid) {
      cooperative_groups::this_grid().sync();
    } else {
      __syncthreads();
    }
#endif
  }
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
  /// A row's offers on a warp (tier_offer_groups): __syncwarp over the
  /// warp's threads (a CTA's last warp may be partial).
  __host__ __device__ static constexpr std::int32_t group_size() { return 32; }
  __host__ __device__ void group_sync() const {
#ifdef __CUDA_ARCH__
    unsigned const live = min(32u, blockDim.x - (threadIdx.x & ~31u));
    __syncwarp(live == 32 ? 0xffffffffu : (1u << live) - 1);
#endif
  }
  /// v folded by op over the run of `width` lanes (tier_buffers'
  /// seq_team::group_fold) by shuffles within its aligned span of
  /// fold_span(width) lanes, a value from past the run (a partial last
  /// warp's) left out.
  template <class Op>
  __host__ __device__ std::int64_t group_fold(std::int64_t v, std::int32_t width, Op op) const {
#ifdef __CUDA_ARCH__
    warp_run const r(width);
    auto s = static_cast<long long>(v);
    for (unsigned o = r.span / 2; o > 0; o /= 2) {
      long long const other = __shfl_xor_sync(r.mask, s, static_cast<int>(o), static_cast<int>(r.span));
      if (((r.lane ^ o) - r.base) < static_cast<unsigned>(width)) s = op(s, other);
    }
    return static_cast<std::int64_t>(s);
#else
    return v;
#endif
  }
  /// The sum of v over this lane and the lanes after it in its run of
  /// `width` (aligned as group_fold's), by shuffles down: after the step
  /// of offset o a lane holds the sum of its 2o lanes from itself, those
  /// past the run left out.
  __host__ __device__ std::int64_t group_sum_from(std::int64_t v, std::int32_t width) const {
#ifdef __CUDA_ARCH__
    warp_run const r(width);
    auto s = static_cast<long long>(v);
    for (unsigned o = 1; o < r.span; o *= 2) {
      long long const other = __shfl_down_sync(r.mask, s, o, static_cast<int>(r.span));
      if (r.lane - r.base + o < static_cast<unsigned>(width)) s += other;
    }
    return static_cast<std::int64_t>(s);
#else
    return v;
#endif
  }
  /// How many lanes of this one's run of `width` hold a v above its own:
  /// each lane's v read by a shuffle from every lane of the run (no load
  /// waits on another).
  __host__ __device__ std::int32_t group_count_above(std::int64_t v, std::int32_t width) const {
#ifdef __CUDA_ARCH__
    warp_run const r(width);
    auto const mine = static_cast<long long>(v);
    std::int32_t above = 0;
    for (std::int32_t o = 0; o < width; ++o) {
      above += __shfl_sync(r.mask, mine, static_cast<int>(r.base) + o) > mine ? 1 : 0;
    }
    return above;
#else
    (void)v;
    (void)width;
    return 0;
#endif
  }
  /// __syncthreads costs less than any round's work: never solo.
  __host__ __device__ static constexpr std::int32_t solo_below() { return 0; }
  __host__ __device__ static constexpr void work(std::int64_t) {}
  __host__ __device__ static constexpr void chain(std::int64_t) {}
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
  __host__ __device__ std::int64_t fetch_add(std::int64_t* p, std::int64_t v) const {
#ifdef __CUDA_ARCH__
    if (cluster_shared(p)) return by_cas(p, [v](long long old) { return old + v; });
    return static_cast<std::int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v)));
#else
    std::int64_t const old = *p;
    *p += v;
    return old;
#endif
  }
  // atomicMax/atomicMin take int or long long: std::int64_t is long here.
  template <class T>
  __host__ __device__ T fetch_max(T* p, T v) const {
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(T) == 8) {
      if (cluster_shared(p)) return static_cast<T>(by_cas(p, [v](long long old) { return max(old, static_cast<long long>(v)); }));
    }
    return static_cast<T>(atomicMax(word(p), static_cast<word_t<T>>(v)));
#else
    T const old = *p;
    if (v > old) *p = v;
    return old;
#endif
  }
  template <class T>
  __host__ __device__ T fetch_min(T* p, T v) const {
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(T) == 8) {
      if (cluster_shared(p)) return static_cast<T>(by_cas(p, [v](long long old) { return min(old, static_cast<long long>(v)); }));
    }
    return static_cast<T>(atomicMin(word(p), static_cast<word_t<T>>(v)));
#else
    T const old = *p;
    if (v < old) *p = v;
    return old;
#endif
  }
  template <class T>
  using word_t = std::conditional_t<sizeof(T) == 8, long long, int>;
  template <class T>
  __host__ __device__ static word_t<T>* word(T* p) {
    return reinterpret_cast<word_t<T>*>(p);
  }
  /// A cluster's 64-bit add, max and min, by compare-and-swap. nvcc lowers
  /// those three on a generic address to an atomic that falls back, for
  /// shared memory, to a loop of LDS and ATOMS.CAST.SPIN on the address's
  /// low 32 bits: the CTA's own shared window. A chain's scratch on a
  /// cluster is reached through the cluster's window (map_shared_rank, the
  /// CTA's own pieces too), so that fallback read and wrote outside its
  /// CTA's shared memory: memcheck's invalid 8-byte __shared__ reads and
  /// writes on an H200 (2026-12-04), several lanes on one address, the
  /// fetch_min and fetch_max of a row's offers (offer_group.hpp). A 64-bit
  /// compare-and-swap is one generic atomic there (ATOM.E.CAS.64, as ptxas
  /// makes `atom.shared::cluster.cas.b64`), with no such fallback.
  /// NVIDIA/cccl#1427: an atomic on shared memory that fails only in a
  /// cluster launch. Global memory keeps the native atomic: a CAS loop
  /// there would make every thread of the CTA that adds into one word
  /// (tier_draw's sums) retry behind the others.
  template <class T, class Op>
  __device__ static long long by_cas(T* p, Op op) {
    auto* const u = reinterpret_cast<unsigned long long*>(p);
    auto old = *reinterpret_cast<unsigned long long volatile*>(u);
    while (true) {
      auto const seen = atomicCAS(u, old, static_cast<unsigned long long>(op(static_cast<long long>(old))));
      if (seen == old) return static_cast<long long>(old);
      old = seen;
    }
  }
  /// Whether a cluster's team reaches p through the cluster's shared
  /// window (by_cas); never on the other teams.
  __device__ static bool cluster_shared([[maybe_unused]] void const* p) {
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster) return __isClusterShared(p) != 0;
#endif
    return false;
  }
  /// A row's floor, a price jump, a row's winners or a row's offers
  /// on one thread are serial chains of global-memory steps: the whole CTA
  /// does them (team_wide in tier_program.hpp).
  static constexpr bool team_wide = Wide;
};

/// Threads of the tier program's CTA. Registers bound it, not the node count: the
/// score functor keeps a 64-entry GPU vector per thread, and one CTA a
/// multiprocessor (__launch_bounds__'s 1) gives a thread 65,536 / threads
/// registers: 242 used at 256 (no spills), 128 at 512 (1.4 KB spilled), 64
/// at 1024 (5 KB). 512 was the fastest on an H200 (2026-11-26, ms a round at
/// 256 / 512 / 1024: 10k 13.6 / 13.3 / 15.3, 100k 32.0 / 27.6 / 28.2, openb
/// 16.4 / 16.1 / 17.2; bench/results/2026-11-26-h200-tier-threads.md).
/// The 256- and 1024-thread kernels that measured it
/// (PLACER_CUDA_TIER_THREADS) were dropped on 2026-12-07: each was a whole
/// chain program more for ptxas, about 50 s of a cold build each (to
/// measure again, change this and build).
constexpr int tier_threads = 512;
/// Multiprocessors a tier grid's CTA: 33 CTAs on an H200's 132. The H200
/// (2026-11-28, bench/results/2026-11-28-h200.md; tier kernel ms at 10k /
/// 100k / openb, alternating in one call) measured one CTA 5.31 / 10.25 /
/// 6.77, 24 CTAs 4.67 / 6.00 / 4.83, 33 4.68 / 5.98 / 4.80, 44 4.72 / 5.96
/// / 4.73 and 132 5.28 / 6.46 / 4.72: the leading CTA's own phases, which
/// have no grid barrier, grow with the grid (the bids 0.30 ms on one CTA,
/// 0.46 on 33, 0.48 on 132 at 10k), and the wide phases gain little past 33.
constexpr int tier_sms_per_block = 4;

/// A chain of tiers: the host's node records unpacked, the tiers one after
/// another, the nodes they changed packed (residency.hpp); one CTA.
template <bool Wide>
__global__ void __launch_bounds__(tier_threads, 1)
    tier_kernel(tier_chain c, node_records in, std::int32_t n_in, node_records out, stage_call after) {
  cuda_team<Wide> team;
  chain_launch_program(team, c, in, n_in, out, after);
}

/// The same chain on one CTA with its scratch (tier_chain::work: prices,
/// floors, bid lists, heaps, buckets) laid out again in the CTA's shared
/// memory, where it fits (PLACER_CUDA_TIER_SHARED=1; issue 53, item 2):
/// every step on them a shared-memory access instead of an L2 one.
__global__ void __launch_bounds__(tier_threads, 1)
    tier_shared_kernel(tier_chain c, node_records in, std::int32_t n_in, node_records out, stage_call after) {
  extern __shared__ __align__(16) unsigned char tier_scratch[];
  tier_layout_at(c.work, c.work_nodes, c.work_rows, c.work_copies, tier_scratch);
  cuda_team<true> team;
  chain_launch_program(team, c, in, n_in, out, after);
}

/// A chain whose scratch fits no one CTA's shared memory, on a
/// thread-block cluster of 2 to tier_cluster_most CTAs, one a
/// multiprocessor (PLACER_CUDA_TIER_SHARED=1; issue 53, item 2): its arrays
/// spread over the CTAs' shared memory, each whole in one CTA's
/// (tier_layout_parts with `per_part` the host's size), every CTA reaching
/// the others' through distributed shared memory; the program as on a grid
/// of that many CTAs, its grid barriers the cluster's.
/// scratch (PLACER_CUDA_CLUSTER_SCRATCH, to find why 10k-k8s's chains fail
/// on clusters): 0, spread over the CTAs' shared memory; 1, the same, each
/// CTA's piece zeroed first; 2, left in global memory (the cluster's
/// barriers alone).
__global__ void __launch_bounds__(tier_threads, 1)
    tier_cluster_kernel(tier_chain c, node_records in, std::int32_t n_in, node_records out, stage_call after,
                        std::size_t per_part, int scratch) {
#if __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char tier_scratch[];
  auto cluster = cooperative_groups::this_cluster();
  if (scratch != 2) {
    tier_layout_parts(c.work, c.work_nodes, c.work_rows, c.work_copies,
                      static_cast<std::int32_t>(cluster.num_blocks()), per_part,
                      [&](std::int32_t k) { return cluster.map_shared_rank(tier_scratch, k); });
  }
  if (scratch == 1) {
    unsigned dynamic = 0;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic));
    for (unsigned i = threadIdx.x; i < dynamic; i += blockDim.x) tier_scratch[i] = 0;
  }
  cluster.sync();  // every CTA of the cluster running before any reaches another's memory
  cuda_team<true, true, true> team;
  chain_launch_program(team, c, in, n_in, out, after);
  cluster.sync();  // none exits while another may still reach its memory
#else
  __trap();  // never launched below sm_90 (cuda_device::cluster_)
#endif
}

/// The same chain on a cooperative grid of CTAs (PLACER_CUDA_TIER_BLOCKS).
__global__ void __launch_bounds__(tier_threads, 1)
    tier_grid_kernel(tier_chain c, node_records in, std::int32_t n_in, node_records out, stage_call after) {
  cuda_team<true, true> team;
  chain_launch_program(team, c, in, n_in, out, after);
}

/// Threads of the stage program's CTAs (stage_program.hpp): the score
/// functor's registers (its 64-entry GPU vector) fit 256 without spills
/// (tier_threads above: 124 registers, ptxas, sm_90); the grid is a CTA a
/// multiprocessor.
constexpr int stage_threads = 256;

/// A call's stages (stage_program.hpp) on a cooperative grid of CTAs, its
/// phases at the grid's barriers; or on one CTA (its barriers the CTA's)
/// where the device has no cooperative launch.
__global__ void __launch_bounds__(stage_threads) stage_grid_kernel(stage_call s) {
  cuda_team<true, true> team;
  stage_program(team, s);
}
__global__ void __launch_bounds__(stage_threads) stage_cta_kernel(stage_call s) {
  cuda_team<true> team;
  stage_program(team, s);
}

/// The GPU under device_backend (portable/device_backend.hpp): one stream,
/// device and pinned memory, copies in stream order, the stage and tier
/// kernels. Every entry point sets the
/// device first (the calling thread, a worker's, may have used another,
/// and the default is GPU 0).
class cuda_device {
 public:
  static constexpr backend_kind kind = backend_kind::cuda;
  static constexpr bool checks_pointers = false;  ///< no expect_device: the GPU faults instead

  explicit cuda_device(int device, int sharing = 1) : device_(device) {
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
    char const* steps = std::getenv("PLACER_CUDA_TEAM_STEPS");
    wide_ = steps == nullptr || std::string_view(steps) != "0";
    // The fewest bids for which the team takes a row's offers (to measure).
    if (char const* least = std::getenv("PLACER_CUDA_TEAM_OFFER_LEAST")) offer_least_ = std::atoi(least);
    // The most candidate nodes a tier's refresh goes a cell per thread for (to measure).
    if (char const* below = std::getenv("PLACER_CUDA_REFRESH_CELLS_BELOW")) refresh_below_ = std::atoi(below);
    // The team offers' radix digit in bits, 1 to 8 (to measure; 8 until the GPU model chose 4).
    if (char const* bits = std::getenv("PLACER_CUDA_OFFER_BITS")) {
      offer_bits_ = std::atoi(bits);
      if (offer_bits_ < 1 || offer_bits_ > 8) {
        throw logic_error(error_code::invalid_argument, "PLACER_CUDA_OFFER_BITS must be 1 to 8");
      }
    }
    // 1: the team offers' M stepped as in the rounds recorded before 2026-11-28 (to measure both).
    if (char const* iterate = std::getenv("PLACER_CUDA_OFFER_ITERATE")) offer_iterate_ = std::atoi(iterate) != 0 ? 1 : 0;
    // The most items a row for the team offers' ranking (0: the radix search always; to measure).
    if (char const* pairs = std::getenv("PLACER_CUDA_OFFER_PAIRS")) offer_pairs_ = std::atoi(pairs);
    // The rounds whose offers go a row a warp (tier_buffers::offer_groups, to measure): 0 none, as in
    // the rounds recorded up to 2026-11-28; 1 all, as in those of 2026-12-04; N > 1, those of at most
    // N bids in a row; unset, tier_offer_groups_upto.
    if (char const* groups = std::getenv("PLACER_CUDA_OFFER_GROUPS")) {
      int const n = std::atoi(groups);
      if (n < 0) throw logic_error(error_code::invalid_argument, "PLACER_CUDA_OFFER_GROUPS must be 0 or more");
      offer_groups_ = n == 1 ? tier_offer_groups_always : n;
    }
    // The tier kernel's grid (cooperative launch): a CTA per
    // tier_sms_per_block multiprocessors of this backend's share of the
    // GPU (`sharing` backends solve on it at once: the server's workers),
    // at most what the device holds at once, or PLACER_CUDA_TIER_BLOCKS of
    // them; 1 is one CTA, as the rounds recorded before 2026-11-28 ran.
    int per_sm = 0;
    PLACER_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tier_grid_kernel, tier_threads, 0));
    int const most = prop.cooperativeLaunch != 0 ? std::max(per_sm * prop.multiProcessorCount / std::max(sharing, 1), 1) : 1;
    blocks_ = tier_grid_blocks(prop.multiProcessorCount, sharing, tier_sms_per_block, most);
    if (char const* blocks = std::getenv("PLACER_CUDA_TIER_BLOCKS")) {
      blocks_ = std::atoi(blocks);
      if (blocks_ < 1) throw logic_error(error_code::invalid_argument, "PLACER_CUDA_TIER_BLOCKS must be 1 or more");
      blocks_ = std::min(blocks_, most);
    }
    if (!wide_) blocks_ = 1;
    // 1: a chain whose scratch fits the CTA's shared memory runs on one CTA
    // with it there (tier_shared_kernel), the others as before (to measure).
    if (char const* shared = std::getenv("PLACER_CUDA_TIER_SHARED"); shared != nullptr && std::atoi(shared) != 0 &&
        wide_) {
      shared_bytes_ = prop.sharedMemPerBlockOptin;
      PLACER_CUDA_TRY(cudaFuncSetAttribute(tier_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared_bytes_)));
      // The larger chains on a cluster, where the device launches them (sm_90 on).
      int cluster = 0;
      PLACER_CUDA_TRY(cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device_));
      // Only with PLACER_CUDA_TIER_CLUSTER=1 as well: on an H200 (2026-12-04) the clusters failed
      // 10k-k8s's chains (an illegal address; memcheck's invalid 8-byte __shared__ reads and
      // writes in tier_cluster_kernel), the only chains that took a cluster. The cause, found in
      // the SASS on 2026-12-06: the 64-bit atomics' shared-memory fallback (cuda_team::by_cas),
      // which the cluster's team now avoids; no GPU has run that yet (docs/results.md). Else the
      // chains that fit no one CTA keep the grid.
      char const* clusters = std::getenv("PLACER_CUDA_TIER_CLUSTER");
      cluster_ = cluster != 0 && clusters != nullptr && std::atoi(clusters) != 0;
      if (char const* scratch = std::getenv("PLACER_CUDA_CLUSTER_SCRATCH")) cluster_scratch_ = std::atoi(scratch);
      if (cluster_) {
        PLACER_CUDA_TRY(cudaFuncSetAttribute(tier_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(shared_bytes_)));
      }
    }
    // The stage program's grid: a CTA a multiprocessor of this backend's
    // share, where the device holds one (its 124 registers a thread would let
    // two of 256 share one; a grid barrier's cost grows with its CTAs, and
    // 132 x 256 threads are a 100k round's cells 36 a thread).
    PLACER_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stage_grid_kernel, stage_threads, 0));
    stage_blocks_ = prop.cooperativeLaunch != 0 && per_sm > 0
                        ? std::max(prop.multiProcessorCount / std::max(sharing, 1), 1)
                        : 1;
    if (char const* from = std::getenv("PLACER_CUDA_GRID_CELLS_FROM")) grid_cells_from_ = std::atoll(from);
    if (char const* upto = std::getenv("PLACER_CUDA_LIST_WITH_FLOORS_UPTO")) list_upto_ = std::atoi(upto);
    if (char const* one = std::getenv("PLACER_CUDA_REFRESH_ONE_PASS")) refresh_one_pass_ = std::atoi(one) != 0 ? 1 : 0;
    // 0: a worker a cell in the refresh, as in the rounds recorded up to 2026-12-02 (to measure both).
    if (char const* lanes = std::getenv("PLACER_CUDA_REFRESH_LANES")) refresh_lanes_ = std::atoi(lanes) != 0 ? 1 : 0;
    // 0: every loser listed and every round run, as in every recorded round (to measure both).
    if (char const* sit = std::getenv("PLACER_CUDA_LOSERS_SIT_OUT")) losers_sit_out_ = std::atoi(sit) != 0 ? 1 : 0;
    description_ = "cuda (GPU " + std::to_string(device_) + ": " + prop.name + ", sm_" + std::to_string(cc) +
                   ", tier grid of " + std::to_string(blocks_) + (blocks_ == 1 ? " CTA" : " CTAs") +
                   ", stage grid of " + std::to_string(stage_blocks_) + (stage_blocks_ == 1 ? " CTA" : " CTAs") +
                   (sharing > 1 ? " (1/" + std::to_string(sharing) + " of its " + std::to_string(prop.multiProcessorCount) +
                                      " multiprocessors)"
                                : "") +
                   ", driver " + cuda_version_text(driver) + ", runtime " + cuda_version_text(runtime) +
                   (offer_bits_ != tier_offer_bits ? ", offer digits of " + std::to_string(offer_bits_) + " bits" : "") +
                   (offer_iterate_ != 0 ? ", offers' M stepped" : "") +
                   (offer_groups_ == 0                          ? ", offers by the whole CTA"
                    : offer_groups_ == tier_offer_groups_always ? ", offers on warps always"
                    : offer_groups_ != tier_offer_groups_upto
                        ? ", offers on warps up to " + std::to_string(offer_groups_) + " bids a row"
                        : "") +
                   (list_upto_ != tier_list_with_floors_upto ? ", first bids listed with the floors up to " + std::to_string(list_upto_) + " nodes" : "") +
                   (refresh_one_pass_ == 0 ? ", refresh in two passes" : "") +
                   (refresh_lanes_ == 0 ? ", refresh a worker a cell" : "") +
                   (losers_sit_out_ == 0 ? ", every loser listed" : "") +
                   (shared_bytes_ > 0 ? ", a chain's scratch in shared memory up to " + std::to_string(shared_bytes_ / 1024) + " KB" +
                                            (cluster_ ? " a CTA, on clusters of up to " + std::to_string(tier_cluster_most) + " CTAs" : "")
                                      : "") +
                   (offer_pairs_ != tier_offer_pairs_upto ? ", offers ranked up to " + std::to_string(offer_pairs_) + " items" : "") +
                   (!wide_ ? ", serial tier steps)"
                    : offer_least_ != tier_offer_team_least ? ", team offers from " + std::to_string(offer_least_) + " bids)"
                                                           : ")");
  }
  cuda_device(cuda_device const&) = delete;
  cuda_device& operator=(cuda_device const&) = delete;
  ~cuda_device() {
    if (stream_ != nullptr) {
      cudaSetDevice(device_);
      for (cudaEvent_t e : marks_) cudaEventDestroy(e);
      if (ref_ != nullptr) cudaEventDestroy(ref_);
      cudaStreamDestroy(stream_);
    }
  }
  [[nodiscard]] std::string const& description() const { return description_; }

  /// Runs a stage; any failure of the device (a CUDA error, a device
  /// allocation that failed) leaves as device_fault
  /// naming the device, so the service falls back to the CPU. On any
  /// failure the stream is drained before the exception leaves, so no copy
  /// or kernel still in flight can touch the arenas or their pinned mirrors
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
    } catch (std::bad_alloc const& e) {
      settle();
      throw device_fault(description_ + ": device allocation failed (" + e.what() + ")");
    } catch (...) {
      settle();
      throw;
    }
  }

  // Memory. Growth happens between calls, with the stream drained: cudaFree
  // and cudaFreeHost wait for the device anyway.
  void* device_alloc(std::size_t bytes) {
    void* p = nullptr;
    PLACER_CUDA_TRY(cudaMalloc(&p, bytes));
    return p;
  }
  void device_free(void* p) noexcept { cudaFree(p); }
  void* host_alloc(std::size_t bytes) {
    void* p = nullptr;
    PLACER_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return p;
  }
  void host_free(void* p) noexcept { cudaFreeHost(p); }

  // Copies in stream order, asynchronous to the host (pinned memory).
  void up(void* d, void const* h, std::size_t bytes) {
    PLACER_CUDA_TRY(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void down(void* h, void const* d, std::size_t bytes) {
    PLACER_CUDA_TRY(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  void sync() { PLACER_CUDA_TRY(cudaStreamSynchronize(stream_)); }

  /// The call timeline's GPU marks (timeline.hpp): an event recorded on the
  /// stream. Their times go on the host's clock through a reference event
  /// the host waited for, taken again when no mark is out and it is older
  /// than 0.1 s (cudaEventElapsedTime is a float of milliseconds).
  int mark() {
    if (marks_used_ == 0 && (ref_host_ns_ < 0 || timeline_now_ns() - ref_host_ns_ > 100'000'000)) {
      if (ref_ == nullptr) PLACER_CUDA_TRY(cudaEventCreate(&ref_));
      PLACER_CUDA_TRY(cudaEventRecord(ref_, stream_));
      PLACER_CUDA_TRY(cudaEventSynchronize(ref_));
      ref_host_ns_ = timeline_now_ns();
    }
    if (marks_used_ == marks_.size()) {
      cudaEvent_t e = nullptr;
      PLACER_CUDA_TRY(cudaEventCreate(&e));
      marks_.push_back(e);
    }
    PLACER_CUDA_TRY(cudaEventRecord(marks_[marks_used_], stream_));
    return static_cast<int>(marks_used_++);
  }
  /// A mark's time on the host's clock (the stream drained since).
  std::int64_t mark_ns(int slot) {
    float ms = 0;
    PLACER_CUDA_TRY(cudaEventElapsedTime(&ms, ref_, marks_[static_cast<std::size_t>(slot)]));
    return ref_host_ns_ + static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
  }
  void marks_done() { marks_used_ = 0; }
  void check_launch() { PLACER_CUDA_TRY(cudaPeekAtLastError()); }

  /// One call's stages (stage_program.hpp), one launch.
  void run_stages(stage_call const& s) {
    if (stage_blocks_ > 1) {
      void* args[] = {const_cast<stage_call*>(&s)};
      PLACER_CUDA_TRY(cudaLaunchCooperativeKernel(reinterpret_cast<void const*>(&stage_grid_kernel),
                                                  dim3(stage_blocks_), dim3(stage_threads), args, 0, stream_));
    } else {
      stage_cta_kernel<<<1, stage_threads, 0, stream_>>>(s);
    }
  }

  void run_tiers(tier_chain const& c, node_records const& in, std::int32_t n_in, node_records const& out,
                 stage_call const& after) {
    if (wide_) {
      tier_chain k = c;
      k.work.offer_team_least = offer_least_;
      k.work.refresh_cells_below = refresh_below_;
      k.work.offer_bits = offer_bits_;
      k.work.offer_iterate = offer_iterate_;
      k.work.offer_pairs_upto = offer_pairs_;
      k.work.offer_groups = offer_groups_;
      k.work.grid_cells_from = grid_cells_from_;
      k.work.list_with_floors_upto = list_upto_;
      k.work.refresh_one_pass = refresh_one_pass_;
      k.work.refresh_lanes = refresh_lanes_;
      k.work.losers_sit_out = losers_sit_out_;
      std::size_t const bytes = shared_bytes_ > 0 ? tier_layout_bytes(k.work_nodes, k.work_rows, k.work_copies) : 0;
      std::int32_t const parts = shared_bytes_ > 0 && bytes > shared_bytes_ && cluster_
                                     ? tier_layout_parts_needed(k.work_nodes, k.work_rows, k.work_copies, shared_bytes_)
                                     : 0;
      if (shared_bytes_ > 0 && bytes <= shared_bytes_) {
        tier_shared_kernel<<<1, tier_threads, bytes, stream_>>>(k, in, n_in, out, after);
      } else if (parts >= 2) {
        launch_cluster(k, in, n_in, out, after, parts);
      } else if (blocks_ > 1) {
        void* args[] = {&k, const_cast<node_records*>(&in), &n_in, const_cast<node_records*>(&out),
                        const_cast<stage_call*>(&after)};
        PLACER_CUDA_TRY(cudaLaunchCooperativeKernel(reinterpret_cast<void const*>(&tier_grid_kernel), dim3(blocks_),
                                                    dim3(tier_threads), args, 0, stream_));
      } else {
        tier_kernel<true><<<1, tier_threads, 0, stream_>>>(k, in, n_in, out, after);
      }
    } else {
      tier_kernel<false><<<1, tier_threads, 0, stream_>>>(c, in, n_in, out, after);
    }
  }

 private:
  /// A chain on a cluster of `parts` CTAs (tier_cluster_kernel), each CTA's
  /// dynamic shared memory the fullest piece of the layout.
  void launch_cluster(tier_chain const& k, node_records const& in, std::int32_t n_in, node_records const& out,
                      stage_call const& after, std::int32_t parts) {
    tier_buffers sizing{};
    std::size_t const piece = tier_layout_parts(sizing, k.work_nodes, k.work_rows, k.work_copies, parts, shared_bytes_,
                                                [](std::int32_t) -> unsigned char* { return nullptr; });
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(parts);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(parts));
    config.blockDim = dim3(tier_threads);
    config.dynamicSmemBytes = piece;
    config.stream = stream_;
    config.attrs = attr;
    config.numAttrs = 1;
    PLACER_CUDA_TRY(
        cudaLaunchKernelEx(&config, tier_cluster_kernel, k, in, n_in, out, after, shared_bytes_, cluster_scratch_));
  }

  int device_ = 0;
  bool wide_ = true;  ///< the tier kernel's team steps (cuda_team<true>)
  std::int32_t offer_least_ = tier_offer_team_least;  ///< tier_buffers::offer_team_least
  std::int32_t refresh_below_ = tier_refresh_cells_below;  ///< tier_buffers::refresh_cells_below
  std::int32_t offer_bits_ = tier_offer_bits;              ///< tier_buffers::offer_bits
  std::int32_t offer_iterate_ = 0;                         ///< tier_buffers::offer_iterate
  std::int32_t offer_pairs_ = tier_offer_pairs_upto;        ///< tier_buffers::offer_pairs_upto
  std::int32_t offer_groups_ = tier_offer_groups_upto;     ///< tier_buffers::offer_groups
  int blocks_ = 1;                                          ///< the tier kernel's grid (CTAs)
  bool cluster_ = false;  ///< PLACER_CUDA_TIER_SHARED on a device that launches clusters (tier_cluster_kernel)
  int cluster_scratch_ = 0;  ///< PLACER_CUDA_CLUSTER_SCRATCH (tier_cluster_kernel)
  int stage_blocks_ = 1;                                    ///< the stage kernel's grid (CTAs)
  std::size_t shared_bytes_ = 0;  ///< PLACER_CUDA_TIER_SHARED: the most shared memory a chain's scratch may take
  std::int64_t grid_cells_from_ = tier_grid_cells_from;    ///< tier_buffers::grid_cells_from
  std::int32_t list_upto_ = tier_list_with_floors_upto;    ///< tier_buffers::list_with_floors_upto
  std::int32_t refresh_one_pass_ = 1;                      ///< tier_buffers::refresh_one_pass
  std::int32_t refresh_lanes_ = 1;                         ///< tier_buffers::refresh_lanes
  std::int32_t losers_sit_out_ = 1;                        ///< tier_buffers::losers_sit_out
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> marks_;  ///< the call timeline's events
  std::size_t marks_used_ = 0;
  cudaEvent_t ref_ = nullptr;       ///< their reference, and when the host saw it done
  std::int64_t ref_host_ns_ = -1;
  std::string description_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(int device, int sharing) {
  return std::make_unique<device_backend<cuda_device>>(/*resident=*/true, std::getenv("PLACER_VERIFY_RESIDENT") != nullptr,
                                                       device, sharing);
}

}  // namespace placer::kernels
