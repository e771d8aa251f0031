#pragma once
// The FGD experiment (Weng et al., "Beware of Fragmentation", USENIX ATC'23)
// on the openb traces, following the protocol in ../shared/data/README.md
// section 2 ("fgd-expected-results"): name-sorted pods, seeded shuffle,
// tune-up (or down) to 130% of cluster GPU capacity, one pod at a time with
// no departures, integer 0..100 scores, ties by one random node permutation
// per seed, and the allocation ratio sampled after every pod event and
// averaged per arrived-% column. See docs/fgd-experiment.md.
//
//   auto w = placer::sim::fgd::load_workload(node_csv, pod_csv, "default");
//   auto r = placer::sim::fgd::run(w, {placer::sim::fgd::policy::fgd, 42});
//   r.alloc_at_130;   // % of cluster GPU milli allocated at 130% arrived
//
// Seeds drive std::mt19937_64, not Go's math/rand, so per-seed curves differ
// from the published ones; distributions (medians) over seeds are compared.

#include <placer/solver/model.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace placer::sim::fgd {

/// The six published policies plus Placer's own (one pod at a time) and
/// Placer's batched solver.
enum class policy : std::uint8_t { random, dot_prod, gpu_clustering, gpu_packing, best_fit, fgd, placer, placer_batch };

std::string policy_name(policy p);       ///< "Random", ..., "FGD", "Placer", "PlacerBatch"
std::string published_name(policy p);    ///< "01-Random" ... "06-FGD"; "" for Placer's
policy parse_policy(std::string const& s);  ///< case-insensitive name; throws std::invalid_argument
std::vector<policy> default_policies();  ///< the six published ones and Placer (one at a time)

/// One openb pod as the experiment sees it.
struct pod {
  std::int64_t cpu = 0;  ///< milli-CPU
  std::int64_t mem = 0;  ///< MiB (filter only)
  std::int32_t gpus = 0;   ///< 0 = CPU-only
  std::int32_t milli = 0;  ///< per-GPU milli (0 for CPU-only; 1..1000)
  std::uint64_t model_mask = ~std::uint64_t{0};  ///< allowed node models (bit = model id)
  std::string spec;        ///< gpu_spec as given (models joined by '|'), for M's key
  std::int32_t job = -1;   ///< index into workload::jobs

  [[nodiscard]] std::int64_t gpu_milli_total() const { return static_cast<std::int64_t>(gpus) * milli; }
  [[nodiscard]] bool fractional() const { return gpus == 1 && milli < 1000; }
};

/// GpuClustering's pod kinds: share, 1-, 2-, 4-, 8-GPU, other GPU counts.
inline constexpr int n_pod_kinds = 6;
int pod_kind(pod const& p);  ///< -1 for CPU-only pods

/// One node's free state.
struct node_state {
  std::int64_t cpu_cap = 0, cpu_free = 0, mem_free = 0;
  std::int32_t model = -1;  ///< model id, -1 = no GPUs
  std::vector<std::int32_t> gpu_free;  ///< per GPU idle milli
  std::int64_t gpu_free_total = 0;
  std::array<std::int32_t, n_pod_kinds> kinds{};  ///< GPU pods held, by pod_kind

  [[nodiscard]] std::int32_t n_gpus() const { return static_cast<std::int32_t>(gpu_free.size()); }
};

/// One typical task of M with its renormalised frequency (0..1).
struct typical_task {
  std::int64_t cpu = 0;
  std::int32_t milli = 0;  ///< per-GPU milli, 0 for CPU-only
  std::int32_t gpus = 0;
  std::uint64_t model_mask = ~std::uint64_t{0};
  double freq = 0;
};

/// M from the untuned trace: keys (CPU, per-GPU milli, #GPUs, gpu_spec) by
/// count descending (ties by key descending) until >= `coverage` of pods.
std::vector<typical_task> typical_tasks(std::vector<pod> const& trace, double coverage = 0.95);

/// M's key (CPU milli, per-GPU milli, #GPUs, gpu_spec) and, per key, the pods
/// counted and the model mask of the last one: the counting half of
/// typical_tasks, for callers that grow M pod by pod (baseline_policies.cpp).
using task_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::string>;
struct task_count {
  std::int64_t count = 0;
  std::uint64_t model_mask = ~std::uint64_t{0};
};
using task_counts = std::map<task_key, task_count>;
/// Adds `copies` pods shaped like p to the counts.
void count_task(task_counts& counts, pod const& p, std::int64_t copies = 1);
/// The ranking half: typical_tasks(trace) == typical_tasks(counts of trace).
std::vector<typical_task> typical_tasks(task_counts const& counts, double coverage = 0.95);

/// README filter: CPU, memory, model, GPUs (share: one GPU with idle >=
/// milli; whole: `gpus` fully idle GPUs).
bool fits(node_state const& n, pod const& p);

/// Node fragmentation F_n(M) in milli (README item 7).
double node_fragmentation(node_state const& n, std::vector<typical_task> const& m);

// Scores of a pod that fits, integers 0..100 (BestFit: before normalisation).
int dot_prod_score(node_state const& n, pod const& p);
int gpu_clustering_score(node_state const& n, pod const& p);
int gpu_packing_score(node_state const& n, pod const& p);
int best_fit_raw_score(node_state const& n, pod const& p);
/// Min-max over the feasible nodes' raw scores with integer division:
/// (s - min) * 100 / (max - min); all equal gives 0.
int best_fit_normalise(int raw, int min_raw, int max_raw);
/// 100 * sigmoid((F_before - F_after) / 1000), floored; fractional pods take
/// the best GPU (lowest index on ties), returned through `gpu` when given.
int fgd_score(node_state const& n, pod const& p, std::vector<typical_task> const& m, double f_before,
              std::int32_t* gpu = nullptr);

/// Tightest fitting GPU for a share (least idle >= milli, lowest index).
std::int32_t tightest_gpu(node_state const& n, std::int32_t milli);
/// Commits p onto n: fractional pods on `gpu`, whole GPUs on the
/// lowest-indexed fully idle ones. Returns the GPUs used.
std::vector<std::int32_t> commit(node_state& n, pod const& p, std::int32_t gpu = -1);

/// The pod order of one seed: shuffled name-sorted list, then tuned up with
/// copies sampled (with replacement) from `sorted` until the next sample's
/// per-GPU milli would pass tune x capacity, or tuned down by removing
/// random pods until the total is at most tune x capacity.
std::vector<pod> order_and_tune(std::vector<pod> const& sorted, double tune, std::int64_t capacity_milli,
                                std::mt19937_64& rng);

/// One sample after a pod event (placed, failed or CPU-only).
struct event_sample {
  std::int64_t arrived_milli = 0;    ///< cumulative requested GPU milli, failed included
  std::int64_t allocated_milli = 0;  ///< GPU milli held by placed pods
};
/// Arrived % rounded half to even.
std::int64_t arrived_percent(std::int64_t arrived_milli, std::int64_t capacity_milli);
/// Columns 0..max_col: mean allocated % (each rounded to 0.01) over events
/// whose arrived % is c, else over c-1..c+1; rounded to 0.01 (NaN if none).
std::vector<double> discrete_columns(std::vector<event_sample> const& ev, std::int64_t capacity_milli,
                                     int max_col = 130);

/// A loaded trace against the openb GPU cluster.
struct workload {
  std::string name;
  placer::cluster cluster;
  std::vector<placer::job> jobs;  ///< sorted by name
  std::vector<std::string> models;
  std::vector<node_state> nodes;  ///< fully free
  std::vector<pod> pods;          ///< sorted by name; pods[i].job == i
  std::vector<typical_task> tasks;
  std::int64_t capacity_milli = 0;
};
workload make_workload(std::string name, placer::cluster c, std::vector<placer::job> jobs);
workload load_workload(std::string const& node_csv, std::string const& pod_csv, std::string name);

struct run_options {
  policy pol = policy::fgd;
  std::uint64_t seed = 42;
  double tune = 1.3;
  std::int32_t batch = 64;  ///< pods per solver round (placer_batch)
};

/// What the GPU milli left idle at the end of a run is, each free GPU by
/// the first that holds (idle_reason_names): a pod shape of the workload
/// fits there now; one fits its share but not the node's CPU or memory; one
/// fits it but not the node's GPU model; none asks for so small a share or
/// so few whole GPUs.
enum idle_reason : int { idle_usable, idle_cpu_memory, idle_model, idle_too_small, idle_reasons };
inline constexpr char const* idle_reason_names[idle_reasons] = {"fits a pod shape", "CPU or memory",
                                                                "GPU model", "no shape that small"};
/// Per idle_reason, the free GPU milli of `nodes` (shapes: the workload's pods).
std::array<std::int64_t, idle_reasons> idle_gpus(std::vector<node_state> const& nodes, std::vector<pod> const& pods);

struct run_result {
  std::vector<double> columns;  ///< 0..130
  double alloc_at_130 = 0;      ///< columns[130]
  std::int64_t pods = 0, placed = 0, failed = 0;
  std::array<std::int64_t, idle_reasons> idle{};  ///< the end state's free GPU milli, by idle_reason
  double seconds = 0;
};
run_result run(workload const& w, run_options const& o);

/// analysis_allo_discrete.csv: (workload, policy) -> column-130 values over
/// seeds; workload without the "openb_pod_list_" prefix, policy as published.
std::map<std::pair<std::string, std::string>, std::vector<double>> load_published(std::string const& csv_path);
double median(std::vector<double> v);  ///< NaN for an empty vector

/// Per-seed differences a[i] - b[i] of two policies run on the same seeds:
/// their mean, its standard error (sample deviation / sqrt(n); 0 for one
/// seed) and the seeds where a >= b. Pairing removes the seed-to-seed
/// spread that a comparison of medians carries.
struct paired_difference {
  double mean = 0, standard_error = 0;
  std::size_t at_or_above = 0, n = 0;
};
paired_difference paired(std::vector<double> const& a, std::vector<double> const& b);

/// The 16 workloads with published results.
std::vector<std::string> published_workloads();

}  // namespace placer::sim::fgd
