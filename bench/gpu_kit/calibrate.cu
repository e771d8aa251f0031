// The GPU calibration kit's microbenchmarks (issue 53, item 5): the fixed
// costs the GPU model assumes (launch, wait, copy, grid barrier, CTA step;
// bench/gpu_model/fit.py --kit), measured on the GPU at hand, into one JSON
// record. Run by `.gpu/gpu-run.sh calibrate` (docs/gpu-session.md).
//
//   calibrate --out FILE [--commit SHA] [--quick]
//
// Each measurement: its name, unit, repetitions, median, p10 and p90, and
// what it is. Host times by steady_clock, GPU times by cudaEvents. Exits 0
// when the record is written, 77 (skipped) with no GPU, 1 on a CUDA error,
// 2 on bad arguments. Parts the device cannot run (clusters below sm_90,
// a grid larger than it holds at once) are listed under "skipped" with why.
#include <placer/kernels/ops.hpp>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace cg = cooperative_groups;
namespace k = placer::kernels;

namespace {

struct cuda_failure {
  std::string what;
};
void check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) throw cuda_failure{std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}
#define TRY(call) check((call), #call)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct measurement {
  std::string name, unit, what;
  std::vector<double> v;
};
struct record {
  std::vector<measurement> m;
  std::vector<std::pair<std::string, std::string>> skipped;
  std::vector<std::pair<std::string, std::string>> facts;  // name, JSON value
  void add(std::string name, std::string unit, std::string what, std::vector<double> v) {
    m.push_back({std::move(name), std::move(unit), std::move(what), std::move(v)});
  }
  void skip(std::string name, std::string why) { skipped.emplace_back(std::move(name), std::move(why)); }
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto const i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string quoted(std::string const& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c == '\n' ? ' ' : c;
  }
  return o + "\"";
}

// ------------------------------------------------------------------ kernels

__global__ void empty_kernel() {}

__global__ void grid_sync_kernel(int syncs) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < syncs; ++i) grid.sync();
}

/// A CTA's dependent steps: each thread follows a chain of indices in shared
/// memory (mode 1) or in global memory through L2 (mode 2, ld.cg), one load
/// a step, with a __syncthreads after each; mode 0: the barrier alone.
__global__ void cta_step_kernel(int mode, int steps, int const* chain, int mask, int* out) {
  __shared__ int sh[4096];
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) sh[i] = chain[i & mask] & 4095;
  __syncthreads();
  int x = threadIdx.x & mask;
  for (int s = 0; s < steps; ++s) {
    if (mode == 1) x = sh[x & 4095];
    if (mode == 2) x = __ldcg(chain + (x & mask));
    __syncthreads();
  }
  if (x == -1) out[0] = x;  // never: keeps the chain
}

/// A warp's least of its lanes' 64-bit values, each step's from the last
/// step's least (a row's offers, tier_offer_groups): every lane's atomicMin
/// on one word of the warp, a __syncwarp and a read of it, the word in
/// shared memory (mode 0: the spinning compare-and-swap of a 64-bit min
/// there) or in global memory (mode 1: an L2 atomic, then an L2 read); or
/// the warp's fold by five shuffles (mode 2, Team::group_fold). The word
/// reached through a generic pointer, as the program's scratch is.
__global__ void warp_min_kernel(int mode, int steps, long long* words, int* out) {
  __shared__ long long sh[32];
  unsigned const warp = threadIdx.x / 32, lane = threadIdx.x & 31u;
  long long* const w = mode == 0 ? sh + warp : words + 16 * warp;  // global words 128 bytes apart
  if (lane == 0) *w = LLONG_MAX;
  __syncthreads();
  long long x = LLONG_MAX - 1;
  for (int i = 0; i < steps; ++i) {
    long long const v = x - 1 - static_cast<long long>((lane * 37u) & 31u);  // every lane below the last least
    if (mode == 2) {
      long long m = v;
      for (int o = 16; o > 0; o /= 2) m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
      x = m;
    } else {
      atomicMin(w, v);
      __syncwarp();
      x = *reinterpret_cast<long long volatile*>(w);
    }
  }
  if (x == 0) out[0] = 1;  // never: keeps the chain
}

/// A thread-block cluster's barrier (mode 0), or a load from the next CTA's
/// shared memory (distributed shared memory) and the barrier (mode 1).
__global__ void cluster_kernel(int mode, int steps, int* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ int sh[1024];
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) sh[i] = (i * 7 + 1) & 1023;
  cluster.sync();
  int const* next = cluster.map_shared_rank(sh, (cluster.block_rank() + 1) % cluster.num_blocks());
  int x = threadIdx.x;
  for (int s = 0; s < steps; ++s) {
    if (mode == 1) x = next[x & 1023];
    cluster.sync();
  }
  if (x == -1) out[0] = x;
#endif
}

/// One cell's score (score_cell_op::score, the refresh's call) on a thread,
/// `reps` times over the nodes in turn; the first n_nodes into out.
__global__ void score_thread_kernel(k::score_cell_op op, int reps, int* out) {
  int acc = 0;
  for (int r = 0; r < reps; ++r) {
    int const s = op.score(0, r % op.nv.n_nodes);
    if (r < op.nv.n_nodes) out[r] = s;
    acc += s;
  }
  out[op.nv.n_nodes] = acc;
}

/// The same cell on a warp: its lanes over the task set (score_lanes, the
/// tier refresh's: F before and after the replica on a slice of the tasks
/// each, summed by shuffles), every lane with the score.
__global__ void score_warp_kernel(k::score_cell_op op, int reps, int* out) {
  int const lane = static_cast<int>(threadIdx.x);
  auto const sum = [](std::int64_t v) {
    auto s = static_cast<long long>(v);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return static_cast<std::int64_t>(s);
  };
  int acc = 0;
  for (int r = 0; r < reps; ++r) {
    int const n = r % op.nv.n_nodes;
    int const s = op.score_lanes(0, n, lane, 32, sum);
    if (lane == 0 && r < op.nv.n_nodes) out[r] = s;
    acc += s;
  }
  if (lane == 0) out[op.nv.n_nodes] = acc;
}

// ------------------------------------------------------------------ helpers

struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(std::size_t bytes) { TRY(cudaMalloc(&p, bytes)); }
  ~device_buffer() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};
struct host_buffer {
  void* p = nullptr;
  explicit host_buffer(std::size_t bytes) { TRY(cudaHostAlloc(&p, bytes, cudaHostAllocDefault)); }
  ~host_buffer() { cudaFreeHost(p); }
};

/// Host microseconds of f, `reps` times after `warm` untimed runs.
std::vector<double> host_times(int reps, int warm, std::function<void()> const& f) {
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    double const t0 = now_us();
    f();
    v.push_back(now_us() - t0);
  }
  return v;
}

/// GPU microseconds between two events around f on stream s, `reps` times.
std::vector<double> gpu_times(cudaStream_t s, int reps, std::function<void()> const& f) {
  cudaEvent_t a, b;
  TRY(cudaEventCreate(&a));
  TRY(cudaEventCreate(&b));
  f();  // warm
  TRY(cudaStreamSynchronize(s));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    TRY(cudaEventRecord(a, s));
    f();
    TRY(cudaEventRecord(b, s));
    TRY(cudaEventSynchronize(b));
    float ms = 0;
    TRY(cudaEventElapsedTime(&ms, a, b));
    v.push_back(static_cast<double>(ms) * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return v;
}

/// Per-step microseconds: (time of `steps` steps - the median time of none) / steps.
std::vector<double> per_step(std::vector<double> const& with, std::vector<double> const& without, int steps) {
  double const base = quantile(without, 0.5);
  std::vector<double> v;
  for (double t : with) v.push_back((t - base) / steps);
  return v;
}

// ------------------------------------------------------------------ parts

void launches(record& r, cudaStream_t s, int reps) {
  std::vector<double> launch, wait, both;
  for (int i = 0; i < reps + 20; ++i) {
    double const t0 = now_us();
    empty_kernel<<<1, 32, 0, s>>>();
    double const t1 = now_us();
    TRY(cudaStreamSynchronize(s));
    double const t2 = now_us();
    if (i < 20) continue;
    launch.push_back(t1 - t0);
    wait.push_back(t2 - t1);
    both.push_back(t2 - t0);
  }
  TRY(cudaGetLastError());
  r.add("launch", "us", "host time of an empty kernel's launch (<<<1, 32>>>, idle stream)", launch);
  r.add("wait", "us", "host time of the cudaStreamSynchronize right after it (the round trip)", wait);
  r.add("launch_sync", "us", "an empty launch plus its synchronize", both);
  r.add("sync_idle", "us", "cudaStreamSynchronize on an idle stream",
        host_times(reps, 10, [&] { TRY(cudaStreamSynchronize(s)); }));
}

void cooperative(record& r, cudaStream_t s, cudaDeviceProp const& p, int reps, bool quick) {
  int per_sm = 0;
  TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sync_kernel, 512, 0));
  int const most = per_sm * p.multiProcessorCount;
  int const syncs = quick ? 100 : 1000;
  for (int blocks : {8, 33, 132}) {
    std::string const b = std::to_string(blocks);
    if (!p.cooperativeLaunch || blocks > most) {
      r.skip("coop_launch_sync_" + b, "the device holds " + std::to_string(most) + " CTAs of 512 threads at once" +
                                          (p.cooperativeLaunch ? "" : ", and no cooperative launch"));
      r.skip("grid_sync_" + b, "as coop_launch_sync_" + b);
      continue;
    }
    auto coop = [&](int n) {
      void* args[] = {&n};
      TRY(cudaLaunchCooperativeKernel(reinterpret_cast<void const*>(&grid_sync_kernel), dim3(blocks), dim3(512), args, 0, s));
    };
    if (blocks != 8) {
      r.add("coop_launch_sync_" + b, "us", "host time of a cooperative launch of " + b + " CTAs x 512 threads (no grid.sync) plus its synchronize",
            host_times(reps, 10, [&] { coop(0); TRY(cudaStreamSynchronize(s)); }));
      r.add("launch_sync_" + b, "us", "the same grid as a plain launch, plus its synchronize",
            host_times(reps, 10, [&] { grid_sync_kernel<<<blocks, 512, 0, s>>>(0); TRY(cudaStreamSynchronize(s)); }));
    }
    int const gr = quick ? 5 : 20;
    auto const none = gpu_times(s, gr, [&] { coop(0); });
    auto const with = gpu_times(s, gr, [&] { coop(syncs); });
    r.add("grid_sync_" + b, "us", "one grid.sync() of " + b + " CTAs x 512 threads (" + std::to_string(syncs) +
                                      " in a kernel, less the kernel without, by events)",
          per_step(with, none, syncs));
  }
}

void graph_and_copies(record& r, cudaStream_t s, int reps) {
  std::size_t const most = 512 * 1024;
  device_buffer d(most);
  host_buffer h(most);
  std::size_t const small = 4096;
  auto three = [&] {
    TRY(cudaMemcpyAsync(d.p, h.p, small, cudaMemcpyHostToDevice, s));
    empty_kernel<<<1, 32, 0, s>>>();
    TRY(cudaMemcpyAsync(h.p, d.p, small, cudaMemcpyDeviceToHost, s));
  };
  r.add("direct_h2d_kernel_d2h", "us", "4 KB up, an empty kernel, 4 KB down, issued one by one, plus a synchronize",
        host_times(reps, 10, [&] { three(); TRY(cudaStreamSynchronize(s)); }));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  three();
  TRY(cudaStreamEndCapture(s, &g));
  TRY(cudaGraphInstantiate(&ge, g, 0));
  r.add("graph_h2d_kernel_d2h", "us", "the same three as one CUDA graph replayed (cudaGraphLaunch), plus a synchronize",
        host_times(reps, 10, [&] { TRY(cudaGraphLaunch(ge, s)); TRY(cudaStreamSynchronize(s)); }));
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  for (std::size_t kb : {4, 64, 512}) {
    std::size_t const bytes = kb * 1024;
    std::string const n = std::to_string(kb) + "k";
    for (bool down : {true, false}) {
      auto copy = [&] {
        TRY(down ? cudaMemcpyAsync(h.p, d.p, bytes, cudaMemcpyDeviceToHost, s)
                 : cudaMemcpyAsync(d.p, h.p, bytes, cudaMemcpyHostToDevice, s));
      };
      std::string const dir = down ? "d2h_" : "h2d_";
      std::string const what = std::to_string(kb) + " KB " + (down ? "down to" : "up from") + " pinned memory";
      r.add(dir + n, "us", what + ": host time of cudaMemcpyAsync plus a synchronize",
            host_times(reps, 10, [&] { copy(); TRY(cudaStreamSynchronize(s)); }));
      r.add(dir + n + "_gpu", "us", what + ": GPU time by events", gpu_times(s, reps, copy));
    }
  }
}

/// A kernel's three modes on one CTA of 512 threads, each mode's cost a
/// step: launch(mode, steps) with `steps` steps less with none, by events.
template <class Launch>
void mode_steps(record& r, cudaStream_t s, bool quick, char const* const (&names)[3], char const* const (&whats)[3],
                Launch launch) {
  int const steps = quick ? 1000 : 10000;
  int const reps = quick ? 5 : 20;
  for (int mode = 0; mode < 3; ++mode) {
    auto const none = gpu_times(s, reps, [&] { launch(mode, 0); });
    auto const with = gpu_times(s, reps, [&] { launch(mode, steps); });
    r.add(names[mode], "us", std::string(whats[mode]) + ", per step (" + std::to_string(steps) + " steps, less none, by events)",
          per_step(with, none, steps));
  }
}

void cta_steps(record& r, cudaStream_t s, bool quick) {
  int const mask = 16383;  // 64 KB of indices: L2, not L1 (ld.cg)
  std::vector<int> chain(static_cast<std::size_t>(mask) + 1);
  std::mt19937 rng(7);
  for (std::size_t i = 0; i < chain.size(); ++i) chain[i] = static_cast<int>(rng() & static_cast<unsigned>(mask));
  device_buffer d(chain.size() * sizeof(int));
  device_buffer out(sizeof(int));
  TRY(cudaMemcpy(d.p, chain.data(), chain.size() * sizeof(int), cudaMemcpyHostToDevice));
  mode_steps(r, s, quick, {"cta_barrier", "cta_step_shared", "cta_step_global"},
             {"a __syncthreads() of 512 threads", "a dependent shared-memory load and a __syncthreads() (512 threads)",
              "a dependent global load from L2 (ld.cg, 64 KB) and a __syncthreads() (512 threads)"},
             [&](int mode, int steps) { cta_step_kernel<<<1, 512, 0, s>>>(mode, steps, d.as<int>(), mask, out.as<int>()); });
}

void warp_mins(record& r, cudaStream_t s, bool quick) {
  device_buffer words(16 * 16 * sizeof(long long));
  device_buffer out(sizeof(int));
  mode_steps(r, s, quick, {"warp_min_shared", "warp_min_global", "warp_fold_min"},
             {"every lane's 64-bit atomicMin on one shared word of its warp, a __syncwarp and a read (16 warps at once)",
              "every lane's 64-bit atomicMin on one global word of its warp, a __syncwarp and a read (16 warps at once)",
              "a warp's 64-bit least by five __shfl_xor_sync (16 warps at once)"},
             [&](int mode, int steps) { warp_min_kernel<<<1, 512, 0, s>>>(mode, steps, words.as<long long>(), out.as<int>()); });
}

void clusters(record& r, cudaStream_t s, cudaDeviceProp const& p, bool quick) {
  if (p.major < 9) {
    for (int c : {2, 4, 8, 16}) {
      r.skip("cluster_sync_" + std::to_string(c), "thread-block clusters need sm_90; this device is sm_" +
                                                      std::to_string(p.major) + std::to_string(p.minor));
      r.skip("dsm_step_" + std::to_string(c), "as cluster_sync_" + std::to_string(c));
    }
    return;
  }
  TRY(cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  device_buffer out(sizeof(int));
  int const steps = quick ? 1000 : 10000;
  int const reps = quick ? 5 : 20;
  for (int size : {2, 4, 8, 16}) {
    std::string const c = std::to_string(size);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(size));
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(size);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    cudaError_t const e = cudaOccupancyMaxActiveClusters(&clusters, cluster_kernel, &cfg);
    if (e != cudaSuccess || clusters < 1) {
      cudaGetLastError();
      std::string const why = e != cudaSuccess ? std::string("cudaOccupancyMaxActiveClusters: ") + cudaGetErrorName(e)
                                               : "the device runs no cluster of " + c + " CTAs";
      r.skip("cluster_sync_" + c, why);
      r.skip("dsm_step_" + c, why);
      continue;
    }
    for (int mode = 0; mode < 2; ++mode) {
      auto launch = [&](int n) { TRY(cudaLaunchKernelEx(&cfg, cluster_kernel, mode, n, out.as<int>())); };
      auto const none = gpu_times(s, reps, [&] { launch(0); });
      auto const with = gpu_times(s, reps, [&] { launch(steps); });
      r.add((mode == 0 ? "cluster_sync_" : "dsm_step_") + c, "us",
            (mode == 0 ? "a cluster.sync() of " + c + " CTAs x 256 threads"
                       : "a dependent load from the next CTA's shared memory (map_shared_rank) and a cluster.sync(), " + c +
                             " CTAs x 256 threads") +
                ", per step (" + std::to_string(steps) + " steps, less none, by events)",
            per_step(with, none, steps));
    }
  }
}

/// A cell of the project's score (kernels/include/placer/kernels/ops.hpp):
/// 64 nodes of 8 GPUs in assorted states, one class (one GPU share), a task
/// set of max_tasks shapes, as build_matrices caps it.
void score_cell(record& r, cudaStream_t s, bool quick) {
  int const nodes = 64, gpus = 8, tasks = k::max_tasks;
  std::mt19937 rng(11);
  std::vector<std::int64_t> cpu_free(nodes), cpu_cap(nodes, 96000), mem_free(nodes, std::int64_t{1} << 40);
  std::vector<std::int32_t> model(nodes, 0), gpu_begin(nodes + 1), gpu_free(nodes * gpus), gpu_cap(nodes, gpus * 1000);
  std::vector<std::uint8_t> pool(nodes, k::pool_bit_training), flags(nodes, k::node_flag_healthy);
  int const shares[] = {0, 100, 250, 500, 1000};
  for (int n = 0; n < nodes; ++n) {
    gpu_begin[n] = n * gpus;
    cpu_free[n] = 8000 + static_cast<std::int64_t>(rng() % 88000);
    for (int g = 0; g < gpus; ++g) gpu_free[n * gpus + g] = shares[rng() % 5];
  }
  gpu_begin[nodes] = nodes * gpus;
  std::vector<std::int32_t> t_gpus(tasks), t_milli(tasks), t_freq(tasks);
  std::vector<std::int64_t> t_cpu(tasks);
  std::vector<std::uint64_t> t_model(tasks, ~std::uint64_t{0});
  int const milli[] = {100, 200, 250, 500, 1000};
  for (int m = 0; m < tasks; ++m) {
    t_milli[m] = milli[m % 5];
    t_gpus[m] = t_milli[m] == 1000 ? 1 + static_cast<int>(rng() % 8) : 1;
    t_cpu[m] = 1000 + static_cast<std::int64_t>(rng() % 16000);
    t_freq[m] = 1000000 / tasks;
  }
  std::int32_t c_gpus = 1, c_milli = 500;
  std::int64_t c_cpu = 4000, c_mem = 1 << 20;
  std::uint64_t c_model = ~std::uint64_t{0};
  std::uint8_t c_pool = k::pool_bit_training, c_loan = 0, c_any = 1;

  std::vector<device_buffer*> owned;
  auto up = [&](auto const* h, std::size_t n) {
    using T = std::remove_cv_t<std::remove_reference_t<decltype(*h)>>;
    auto* b = new device_buffer(n * sizeof(T));
    owned.push_back(b);
    TRY(cudaMemcpy(b->p, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return static_cast<T const*>(b->p);
  };
  k::score_cell_op op{};
  op.nv.n_nodes = nodes;
  op.nv.n_gpus = nodes * gpus;
  op.nv.cpu_free = up(cpu_free.data(), nodes);
  op.nv.cpu_capacity = up(cpu_cap.data(), nodes);
  op.nv.mem_free = up(mem_free.data(), nodes);
  op.nv.model = up(model.data(), nodes);
  op.nv.pool = up(pool.data(), nodes);
  op.nv.flags = up(flags.data(), nodes);
  op.nv.gpu_begin = up(gpu_begin.data(), nodes + 1);
  op.nv.gpu_free = up(gpu_free.data(), gpu_free.size());
  op.nv.gpu_capacity = up(gpu_cap.data(), nodes);
  op.cv.n_classes = 1;
  op.cv.gpus = up(&c_gpus, 1);
  op.cv.milli = up(&c_milli, 1);
  op.cv.cpu = up(&c_cpu, 1);
  op.cv.mem = up(&c_mem, 1);
  op.cv.model_mask = up(&c_model, 1);
  op.cv.pool_mask = up(&c_pool, 1);
  op.cv.loan_ok = up(&c_loan, 1);
  op.cv.any_model = up(&c_any, 1);
  op.tv.n_tasks = tasks;
  op.tv.gpus = up(t_gpus.data(), tasks);
  op.tv.milli = up(t_milli.data(), tasks);
  op.tv.cpu = up(t_cpu.data(), tasks);
  op.tv.model_mask = up(t_model.data(), tasks);
  op.tv.freq_ppm = up(t_freq.data(), tasks);
  // share_cpu as build_matrices sets it (mean_share_cpu over the host's arrays).
  k::task_view host_tv = op.tv;
  host_tv.gpus = t_gpus.data();
  host_tv.milli = t_milli.data();
  host_tv.cpu = t_cpu.data();
  host_tv.model_mask = t_model.data();
  host_tv.freq_ppm = t_freq.data();
  op.tv.share_cpu = k::mean_share_cpu(host_tv);

  device_buffer out(sizeof(int) * (nodes + 1) * 2);
  int const reps = quick ? 256 : 1024;
  int const runs = quick ? 5 : 20;
  auto const thread = gpu_times(s, runs, [&] { score_thread_kernel<<<1, 1, 0, s>>>(op, reps, out.as<int>()); });
  auto const warp = gpu_times(s, runs, [&] { score_warp_kernel<<<1, 32, 0, s>>>(op, reps, out.as<int>() + nodes + 1); });
  TRY(cudaGetLastError());
  std::vector<int> got(static_cast<std::size_t>(nodes + 1) * 2);
  TRY(cudaMemcpy(got.data(), out.p, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (auto* b : owned) delete b;
  bool const same = std::equal(got.begin(), got.begin() + nodes + 1, got.begin() + nodes + 1);
  int feasible = 0;
  for (int n = 0; n < nodes; ++n) feasible += got[static_cast<std::size_t>(n)] >= 0 ? 1 : 0;
  auto per = [&](std::vector<double> v) {
    for (double& x : v) x /= reps;
    return v;
  };
  std::string const shape = " (8 GPUs, one GPU share, " + std::to_string(tasks) + " tasks; " + std::to_string(reps) +
                            " cells a kernel over 64 nodes, " + std::to_string(feasible) + " feasible; by events)";
  r.add("score_cell_thread", "us", "one cell's score_cell_op::score on one thread" + shape, per(thread));
  r.add("score_cell_warp", "us", "the same cell on a warp, its lanes over the task set" + shape, per(warp));
  r.facts.emplace_back("score_cell_warp_matches_thread", same ? "true" : "false");
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

int usage(char const* why) {
  std::fprintf(stderr, "calibrate: %s\nusage: calibrate --out FILE [--commit SHA] [--quick]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, commit = "unknown";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if ((a == "--out" || a == "--commit") && i + 1 < argc) {
      (a == "--out" ? out_path : commit) = argv[++i];
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (out_path.empty()) return usage("--out is required");
  int driver = 0, runtime = 0, count = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaError_t const e = driver == 0 ? cudaErrorNoDevice : cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "calibrate: no GPU here (%s): skipped, nothing measured\n",
                 driver == 0 ? "no CUDA driver" : e != cudaSuccess ? cudaGetErrorName(e) : "no device");
    return 77;
  }
  record r;
  cudaDeviceProp p{};
  try {
    TRY(cudaSetDevice(0));
    TRY(cudaGetDeviceProperties(&p, 0));
    cudaStream_t s;
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int const reps = quick ? 50 : 500;
    double const t0 = now_us();
    launches(r, s, reps);
    cooperative(r, s, p, reps, quick);
    graph_and_copies(r, s, reps);
    cta_steps(r, s, quick);
    warp_mins(r, s, quick);
    clusters(r, s, p, quick);
    score_cell(r, s, quick);
    TRY(cudaStreamDestroy(s));
    r.facts.emplace_back("seconds", std::to_string((now_us() - t0) / 1e6));
  } catch (cuda_failure const& f) {
    std::fprintf(stderr, "calibrate: %s\n", f.what.c_str());
    return 1;
  }
  std::time_t const now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ostringstream j;
  j << "{\"kit\":\"placer-gpu-calibrate\",\"version\":1,\"date\":" << quoted(date) << ",\"commit\":" << quoted(commit)
    << ",\"device\":" << quoted(p.name) << ",\"sm\":\"" << p.major << "." << p.minor
    << "\",\"multiprocessors\":" << p.multiProcessorCount << ",\"driver\":\"" << version_text(driver)
    << "\",\"runtime\":\"" << version_text(runtime) << "\",\"quick\":" << (quick ? "true" : "false");
  for (auto const& [name, value] : r.facts) j << "," << quoted(name) << ":" << value;
  j << ",\n\"measurements\":[";
  for (std::size_t i = 0; i < r.m.size(); ++i) {
    measurement const& m = r.m[i];
    j << (i > 0 ? ",\n  " : "\n  ") << "{\"name\":" << quoted(m.name) << ",\"unit\":" << quoted(m.unit)
      << ",\"reps\":" << m.v.size() << ",\"median\":" << quantile(m.v, 0.5) << ",\"p10\":" << quantile(m.v, 0.1)
      << ",\"p90\":" << quantile(m.v, 0.9) << ",\"what\":" << quoted(m.what) << "}";
  }
  j << "],\n\"skipped\":[";
  for (std::size_t i = 0; i < r.skipped.size(); ++i) {
    j << (i > 0 ? ",\n  " : "\n  ") << "{\"name\":" << quoted(r.skipped[i].first) << ",\"why\":" << quoted(r.skipped[i].second) << "}";
  }
  j << "]}\n";
  std::ofstream f(out_path);
  f << j.str();
  if (!f) {
    std::fprintf(stderr, "calibrate: cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::printf("calibrate: %s, sm_%d%d, %zu measurements, %zu skipped, into %s\n", p.name, p.major, p.minor, r.m.size(),
              r.skipped.size(), out_path.c_str());
  for (measurement const& m : r.m) std::printf("  %-26s %10.3f %s  (p10 %.3f, p90 %.3f)\n", m.name.c_str(), quantile(m.v, 0.5), m.unit.c_str(), quantile(m.v, 0.1), quantile(m.v, 0.9));
  for (auto const& [name, why] : r.skipped) std::printf("  %-26s skipped: %s\n", name.c_str(), why.c_str());
  return 0;
}
