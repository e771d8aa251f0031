// Owns the trace readers declared in loaders.hpp: one small CSV reader
// (quoted fields, CRLF, blank lines, header lookup by column name) and one
// mapping per data set in ../shared/data onto the domain model. The data
// sets and their columns are described in ../shared/data/README.md.
#include <placer/traces/loaders.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace placer::traces {

namespace {

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
// node validation caps a node at 64 GPUs (placer::validate), so an inventory
// row above that is a data error we can name here with its line.
constexpr std::int64_t max_gpus_per_node = 64;

[[noreturn]] void fail(std::string const& path, std::int64_t line, std::string_view what) {
  throw parse_error(path + ":" + std::to_string(line) + ": " + std::string(what));
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string_view trim(std::string_view s) {
  auto const is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The whole file in one buffer: the largest trace is a few MB, and one
// buffer lets every field be a string_view (no per-field allocation).
std::string read_file(std::string const& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw parse_error(path + ": cannot open file");
  std::string buf;
  char chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f.get())) > 0) buf.append(chunk, n);
  // fopen succeeds on a directory on Linux; the read then fails (EISDIR).
  if (std::ferror(f.get()) != 0) throw parse_error(path + ": cannot read file");
  return buf;
}

using fields_t = std::vector<std::string_view>;

/// RFC 4180-style reader over a file buffer. Records are returned as views
/// into the buffer; quoted fields are unescaped in place (the unescaped text
/// is never longer than the raw text), so views stay valid for the file's
/// lifetime.
class csv_file {
 public:
  explicit csv_file(std::string path) : path_(std::move(path)), buf_(read_file(path_)) {
    if (std::string_view(buf_).starts_with("\xEF\xBB\xBF")) pos_ = 3;  // UTF-8 BOM
  }
  csv_file(csv_file const&) = delete;
  csv_file& operator=(csv_file const&) = delete;

  [[nodiscard]] std::string const& path() const { return path_; }
  /// The line the reader is on (the line after the last record at EOF).
  [[nodiscard]] std::int64_t line() const { return line_; }

  /// Next record that is not a blank line; false at end of file. `line` is
  /// the 1-based line the record starts on.
  bool next(fields_t& fields, std::int64_t& line) {
    skip_blank_lines();
    if (pos_ >= buf_.size()) return false;
    fields.clear();
    line = line_;
    auto const end = buf_.size();
    for (;;) {
      std::size_t p = pos_;
      std::size_t q = p;
      while (q < end && (buf_[q] == ' ' || buf_[q] == '\t')) ++q;
      if (q < end && buf_[q] == '"') {
        std::size_t r = q + 1;
        std::size_t w = r;
        std::size_t const start = w;
        for (;;) {
          if (r >= end) fail(path_, line, "unterminated quoted field");
          char const c = buf_[r];
          if (c == '"') {
            if (r + 1 < end && buf_[r + 1] == '"') {
              buf_[w++] = '"';
              r += 2;
              continue;
            }
            ++r;
            break;
          }
          if (c == '\n') ++line_;  // a quoted field may span lines
          buf_[w++] = c;
          ++r;
        }
        fields.emplace_back(buf_.data() + start, w - start);
        while (r < end && (buf_[r] == ' ' || buf_[r] == '\t' || buf_[r] == '\r')) ++r;
        if (r < end && buf_[r] != ',' && buf_[r] != '\n') fail(path_, line_, "unexpected character after a closing quote");
        p = r;
      } else {
        std::size_t e = p;
        while (e < end && buf_[e] != ',' && buf_[e] != '\n') ++e;
        fields.push_back(trim(std::string_view(buf_).substr(p, e - p)));
        p = e;
      }
      if (p < end && buf_[p] == ',') {
        pos_ = p + 1;
        continue;
      }
      if (p < end) {  // '\n'
        ++line_;
        pos_ = p + 1;
      } else {
        pos_ = end;
      }
      return true;
    }
  }

 private:
  void skip_blank_lines() {
    auto const end = buf_.size();
    while (pos_ < end) {
      std::size_t q = pos_;
      while (q < end && (buf_[q] == ' ' || buf_[q] == '\t' || buf_[q] == '\r')) ++q;
      if (q < end && buf_[q] != '\n') return;
      if (q < end) ++line_;
      pos_ = q < end ? q + 1 : end;
    }
  }

  std::string path_;
  std::string buf_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 1;
};

/// A CSV file and its first record (the header line, when it has one).
struct table {
  explicit table(std::string const& path) : file(path) {
    if (!file.next(first, first_line)) fail(path, file.line(), "empty file");
  }
  [[nodiscard]] std::string const& path() const { return file.path(); }
  [[nodiscard]] int find(std::string_view name) const {
    for (std::size_t i = 0; i < first.size(); ++i) {
      if (first[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
  [[nodiscard]] bool has(std::string_view name) const { return find(name) >= 0; }
  [[nodiscard]] int require(std::string_view name) const {
    int const i = find(name);
    if (i < 0) fail(path(), first_line, "missing required column " + quote(name));
    return i;
  }

  csv_file file;
  fields_t first;
  std::int64_t first_line = 1;
};

/// One data record with the column names, so every error names the file,
/// the line and the column.
class row {
 public:
  row(std::string const& path, std::vector<std::string> names) : path_(path), names_(std::move(names)) {}

  /// Reads the next record, checking its field count; false at EOF.
  bool next(csv_file& f) {
    if (!f.next(fields_, line_)) return false;
    check_count();
    return true;
  }
  /// Makes `fields` (already read, e.g. the first line of a headerless file)
  /// the current record.
  void set(fields_t const& fields, std::int64_t line) {
    fields_ = fields;
    line_ = line;
    check_count();
  }

  [[nodiscard]] std::int64_t line() const { return line_; }
  [[noreturn]] void fail_at(std::string_view what) const { fail(path_, line_, what); }
  [[noreturn]] void fail_col(int col, std::string_view what) const {
    fail(path_, line_, "column " + quote(names_[col]) + ": " + std::string(what));
  }

  [[nodiscard]] std::string_view text(int col) const { return fields_[col]; }
  [[nodiscard]] std::string_view required_text(int col) const {
    if (fields_[col].empty()) fail_col(col, "empty value");
    return fields_[col];
  }

  /// A whole number in [lo, hi]; empty is an error.
  [[nodiscard]] std::int64_t integer(int col, std::int64_t lo = 0, std::int64_t hi = int64_max) const {
    auto const v = optional_integer(col, lo, hi);
    if (!v) fail_col(col, "empty value, a number is required");
    return *v;
  }
  [[nodiscard]] std::optional<std::int64_t> optional_integer(int col, std::int64_t lo = 0,
                                                             std::int64_t hi = int64_max) const {
    auto const s = fields_[col];
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    auto const [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) fail_col(col, quote(s) + " is out of range");
    if (ec != std::errc{} || ptr != s.data() + s.size()) fail_col(col, quote(s) + " is not a whole number");
    check_range(col, v, lo, hi);
    return v;
  }

  /// A decimal number >= 0 multiplied by `scale` and rounded to the nearest
  /// integer (vCPU -> milli, GiB -> MiB, fractional seconds -> seconds).
  [[nodiscard]] std::int64_t scaled(int col, double scale, std::int64_t hi = int64_max) const {
    auto const v = optional_scaled(col, scale, hi);
    if (!v) fail_col(col, "empty value, a number is required");
    return *v;
  }
  [[nodiscard]] std::optional<std::int64_t> optional_scaled(int col, double scale,
                                                            std::int64_t hi = int64_max) const {
    auto const s = fields_[col];
    if (s.empty()) return std::nullopt;
    double d = 0;
    auto const [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec == std::errc::result_out_of_range) fail_col(col, quote(s) + " is out of range");
    if (ec != std::errc{} || ptr != s.data() + s.size() || !std::isfinite(d)) fail_col(col, quote(s) + " is not a number");
    if (d < 0) fail_col(col, "negative value " + std::string(s));
    double const x = std::round(d * scale);
    if (x >= 9.0e18) fail_col(col, quote(s) + " is out of range");
    auto const v = static_cast<std::int64_t>(x);
    check_range(col, v, 0, hi);
    return v;
  }

 private:
  void check_count() const {
    if (fields_.size() != names_.size()) {
      fail(path_, line_,
           "expected " + std::to_string(names_.size()) + " fields, found " + std::to_string(fields_.size()));
    }
  }
  void check_range(int col, std::int64_t v, std::int64_t lo, std::int64_t hi) const {
    if (v < lo) {
      if (lo == 0) fail_col(col, "negative value " + std::to_string(v));
      fail_col(col, std::to_string(v) + " is below the minimum " + std::to_string(lo));
    }
    if (v > hi) fail_col(col, std::to_string(v) + " is above the maximum " + std::to_string(hi));
  }

  std::string const& path_;
  std::vector<std::string> names_;
  fields_t fields_;
  std::int64_t line_ = 0;
};

std::vector<std::string> header_names(table const& t) { return {t.first.begin(), t.first.end()}; }

/// A fully free, healthy node in the shared pool; nodes without GPUs have
/// no model, whatever the file says.
node make_node(std::string_view name, std::string_view model, std::int32_t gpus, std::int64_t cpu_milli,
               std::int64_t memory_mib) {
  node n;
  n.name = std::string(name);
  if (gpus > 0) n.gpu_model = std::string(model);
  n.gpu_free_milli.assign(static_cast<std::size_t>(gpus), milli_per_gpu);
  n.cpu_milli_capacity = n.cpu_milli_free = cpu_milli;
  n.memory_mib_capacity = n.memory_mib_free = memory_mib;
  n.pool = pool_kind::shared;
  n.healthy = true;
  return n;
}

/// Rejects a second node with the same name: placements refer to nodes by
/// index, but operators and logs refer to them by name.
class unique_names {
 public:
  void add(row const& r, int col, std::string_view name) {
    auto const [it, inserted] = seen_.try_emplace(std::string(name), r.line());
    if (!inserted) r.fail_col(col, "duplicate node name " + quote(name) + " (first on line " + std::to_string(it->second) + ")");
  }

 private:
  std::unordered_map<std::string, std::int64_t> seen_;
};

cluster finish_inventory(cluster c, table const& t, inventory_options const& opt) {
  if (c.nodes.empty()) fail(t.path(), t.file.line(), "no nodes in the file");
  c.epoch = 1;
  assign_synthetic_topology(c, opt);
  return c;
}

cluster openb_nodes(table& t, inventory_options const& opt) {
  int const c_sn = t.require("sn");
  int const c_cpu = t.require("cpu_milli");
  int const c_mem = t.require("memory_mib");
  int const c_gpu = t.require("gpu");
  int const c_model = t.require("model");
  cluster c;
  unique_names names;
  row r(t.path(), header_names(t));
  while (r.next(t.file)) {
    auto const name = r.required_text(c_sn);
    names.add(r, c_sn, name);
    auto const cpu = r.integer(c_cpu);
    auto const mem = r.integer(c_mem);
    auto const gpus = static_cast<std::int32_t>(r.integer(c_gpu, 0, max_gpus_per_node));
    c.nodes.push_back(make_node(name, r.text(c_model), gpus, cpu, mem));
  }
  return finish_inventory(std::move(c), t, opt);
}

cluster spot_nodes(table& t, inventory_options const& opt) {
  int const c_model = t.require("gpu_model");
  int const c_gpu = t.require("gpu_capacity_num");
  int const c_cpu = t.require("cpu_num");
  int const c_name = t.require("node_name");
  cluster c;
  unique_names names;
  row r(t.path(), header_names(t));
  while (r.next(t.file)) {
    auto const name = r.required_text(c_name);
    names.add(r, c_name, name);
    auto const gpus = static_cast<std::int32_t>(r.integer(c_gpu, 0, max_gpus_per_node));
    // No memory column in this trace: 8 GiB per vCPU (spot_memory_mib_per_vcpu).
    auto const cpu = r.scaled(c_cpu, 1000.0);
    auto const mem = r.scaled(c_cpu, static_cast<double>(spot_memory_mib_per_vcpu));
    auto const model = gpus > 0 ? r.required_text(c_model) : r.text(c_model);
    c.nodes.push_back(make_node(name, model, gpus, cpu, mem));
  }
  return finish_inventory(std::move(c), t, opt);
}

constexpr char const* pai_columns[] = {"machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"};

bool looks_like_pai_header(table const& t) { return t.has("machine") && t.has("gpu_type"); }

cluster pai_machines(table& t, inventory_options const& opt) {
  // The published file has no header (it is in pai_machine_spec.header);
  // a copy with the header line prepended is read by name.
  bool const has_header = looks_like_pai_header(t);
  std::vector<std::string> names(std::begin(pai_columns), std::end(pai_columns));
  int c_machine = 0, c_type = 1, c_cpu = 2, c_mem = 3, c_gpu = 4;
  if (has_header) {
    c_machine = t.require("machine");
    c_type = t.require("gpu_type");
    c_cpu = t.require("cap_cpu");
    c_mem = t.require("cap_mem");
    c_gpu = t.require("cap_gpu");
    names = header_names(t);
  }
  cluster c;
  unique_names seen;
  row r(t.path(), names);
  auto const add = [&] {
    auto const name = r.required_text(c_machine);
    seen.add(r, c_machine, name);
    auto const type = r.required_text(c_type);
    auto const gpus = static_cast<std::int32_t>(r.integer(c_gpu, 0, max_gpus_per_node));
    if (type == "CPU" && gpus != 0) r.fail_col(c_gpu, "gpu_type CPU with " + std::to_string(gpus) + " GPUs");
    auto const cpu = r.scaled(c_cpu, 1000.0);  // vCPUs -> milli
    auto const mem = r.scaled(c_mem, 1024.0);  // GB (read as GiB) -> MiB
    c.nodes.push_back(make_node(name, type == "CPU" ? std::string_view{} : type, gpus, cpu, mem));
  };
  if (!has_header) {
    r.set(t.first, t.first_line);
    add();
  }
  while (r.next(t.file)) add();
  return finish_inventory(std::move(c), t, opt);
}

/// Splits a gpu_spec like "V100M16|V100M32" into models, dropping empty
/// pieces and repeats (the gpuspec files contain "V100M16|V100M32|V100M32").
std::vector<std::string> split_models(std::string_view spec) {
  std::vector<std::string> out;
  while (!spec.empty()) {
    auto const bar = spec.find('|');
    auto const piece = trim(spec.substr(0, bar));
    if (!piece.empty() && std::find(out.begin(), out.end(), piece) == out.end()) out.emplace_back(piece);
    if (bar == std::string_view::npos) break;
    spec.remove_prefix(bar + 1);
  }
  return out;
}

}  // namespace

void assign_synthetic_topology(cluster& c, inventory_options const& opt) {
  PLACER_EXPECTS(opt.nodes_per_leaf >= 1, "inventory_options.nodes_per_leaf must be >= 1");
  PLACER_EXPECTS(opt.leaves_per_spine >= 1, "inventory_options.leaves_per_spine must be >= 1");
  topology t;
  t.level_names = {"cluster", "spine", "leaf"};
  t.domains.push_back({"cluster", 0, -1});
  std::int32_t spine = -1;
  std::int32_t leaf = -1;
  auto const per_leaf = static_cast<std::size_t>(opt.nodes_per_leaf);
  auto const per_spine = static_cast<std::size_t>(opt.leaves_per_spine);
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    if (i % per_leaf == 0) {
      auto const leaf_index = i / per_leaf;
      if (leaf_index % per_spine == 0) {
        spine = static_cast<std::int32_t>(t.domains.size());
        t.domains.push_back({"spine-" + std::to_string(leaf_index / per_spine), 1, 0});
      }
      leaf = static_cast<std::int32_t>(t.domains.size());
      t.domains.push_back({"leaf-" + std::to_string(leaf_index), 2, spine});
    }
    c.nodes[i].domain = leaf;
  }
  c.topo = std::move(t);
}

cluster load_openb_nodes(std::string const& path, inventory_options const& opt) {
  table t(path);
  return openb_nodes(t, opt);
}

cluster load_pai_machines(std::string const& path, inventory_options const& opt) {
  table t(path);
  return pai_machines(t, opt);
}

cluster load_spot_nodes(std::string const& path, inventory_options const& opt) {
  table t(path);
  return spot_nodes(t, opt);
}

cluster load_inventory(std::string const& path, inventory_options const& opt) {
  table t(path);
  if (t.has("sn") && t.has("cpu_milli")) return openb_nodes(t, opt);
  if (t.has("gpu_model") && t.has("node_name")) return spot_nodes(t, opt);
  if (looks_like_pai_header(t) || t.first.size() == std::size(pai_columns)) return pai_machines(t, opt);
  fail(path, t.first_line,
       "unrecognised inventory: expected an openb node list (sn,cpu_milli,...), a spot node list "
       "(gpu_model,...,node_name) or PAI machine specs (5 columns, no header)");
}

std::vector<job> load_openb_pods(std::string const& path) {
  table t(path);
  int const c_name = t.require("name");
  int const c_cpu = t.require("cpu_milli");
  int const c_mem = t.require("memory_mib");
  int const c_gpus = t.require("num_gpu");
  int const c_milli = t.require("gpu_milli");
  // Optional: the multigpu* lists stop after gpu_milli.
  int const c_spec = t.find("gpu_spec");
  int const c_qos = t.find("qos");
  int const c_created = t.find("creation_time");
  int const c_scheduled = t.find("scheduled_time");
  int const c_deleted = t.find("deletion_time");

  std::vector<job> jobs;
  row r(path, header_names(t));
  while (r.next(t.file)) {
    job j;
    j.name = std::string(r.required_text(c_name));
    j.replicas = 1;
    auto& d = j.per_replica;
    d.cpu_milli = r.integer(c_cpu);
    d.memory_mib = r.integer(c_mem);
    d.gpus = static_cast<std::int32_t>(r.integer(c_gpus, 0, max_gpus_per_node));
    auto const milli = r.integer(c_milli);
    if (d.gpus >= 1) {
      if (milli < 1 || milli > milli_per_gpu) r.fail_col(c_milli, std::to_string(milli) + " is outside 1..1000 for a GPU pod");
      // The model only has fractional shares of one GPU (demand::fractional).
      if (d.gpus > 1 && milli != milli_per_gpu) {
        r.fail_col(c_milli, "a pod with " + std::to_string(d.gpus) + " GPUs must take whole GPUs (1000), found " +
                                std::to_string(milli));
      }
      d.gpu_milli = static_cast<std::int32_t>(milli);
    } else {
      d.gpu_milli = milli_per_gpu;  // the file has 0; 1000 is neutral for gpus == 0
    }
    if (c_spec >= 0) j.allowed_gpu_models = split_models(r.text(c_spec));
    bool const latency_sensitive = c_qos >= 0 && r.text(c_qos) == "LS";
    j.kind = latency_sensitive ? job_kind::inference : (d.gpus == 0 ? job_kind::batch : job_kind::training);
    if (c_created >= 0) j.submit_time = r.optional_integer(c_created).value_or(0);
    std::optional<std::int64_t> scheduled, deleted;
    if (c_scheduled >= 0) scheduled = r.optional_integer(c_scheduled);
    if (c_deleted >= 0) deleted = r.optional_integer(c_deleted);
    if (scheduled && deleted && *deleted >= *scheduled) j.estimated_duration = *deleted - *scheduled;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::vector<itp_job> load_itp_jobs(std::string const& path) {
  table t(path);
  int const c_id = t.require("job_id");
  int const c_submit = t.require("submission_time");
  int const c_duration = t.require("duration");
  int const c_gpus = t.require("num_gpu");
  std::vector<itp_job> rows;
  row r(path, header_names(t));
  while (r.next(t.file)) {
    itp_job j;
    j.id = std::string(r.required_text(c_id));
    j.submit_time = r.integer(c_submit);
    j.duration = r.integer(c_duration);
    j.num_gpu = static_cast<std::int32_t>(r.integer(c_gpus, 1, int32_max));
    rows.push_back(std::move(j));
  }
  return rows;
}

std::vector<job> itp_to_jobs(std::vector<itp_job> const& rows) {
  std::vector<job> jobs;
  jobs.reserve(rows.size());
  for (auto const& r : rows) {
    PLACER_EXPECTS(r.num_gpu >= 1, "itp job '" + r.id + "': num_gpu must be >= 1");
    job j;
    j.name = r.id;
    j.kind = job_kind::training;
    j.submit_time = r.submit_time;
    j.estimated_duration = r.duration;
    j.topology_level = -1;
    if (r.num_gpu <= itp_gpus_per_node) {
      j.replicas = 1;
      j.per_replica.gpus = r.num_gpu;
      j.gang = false;
    } else {
      // Jobs larger than one 8-GPU node run as a gang of whole nodes; a size
      // that is not a multiple of 8 rounds up to the next whole node.
      j.replicas = (r.num_gpu + itp_gpus_per_node - 1) / itp_gpus_per_node;
      j.per_replica.gpus = itp_gpus_per_node;
      j.gang = true;
    }
    j.per_replica.gpu_milli = milli_per_gpu;
    j.per_replica.cpu_milli = itp_cpu_milli_per_gpu * j.per_replica.gpus;
    j.per_replica.memory_mib = itp_memory_mib_per_gpu * j.per_replica.gpus;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::vector<dlrm_instance> load_dlrm_instances(std::string const& path) {
  table t(path);
  int const c_app = t.require("app_name");
  int const c_role = t.require("role");
  int const c_cpu = t.require("cpu_request");
  int const c_gpu = t.require("gpu_request");
  int const c_mem = t.require("memory_request");
  int const c_max = t.require("max_instance_per_node");
  int const c_created = t.require("creation_time");
  int const c_deleted = t.require("deletion_time");
  std::vector<dlrm_instance> rows;
  row r(path, header_names(t));
  while (r.next(t.file)) {
    dlrm_instance d;
    d.app = std::string(r.required_text(c_app));
    auto const role = r.required_text(c_role);
    if (role != "HN" && role != "CN") r.fail_col(c_role, quote(role) + " is neither HN nor CN");
    d.role = std::string(role);
    d.cpu_milli = r.scaled(c_cpu, 1000.0);   // vCPU -> milli
    d.gpus = static_cast<std::int32_t>(r.integer(c_gpu, 0, max_gpus_per_node));
    d.memory_mib = r.scaled(c_mem, 1024.0);  // GiB -> MiB
    d.max_instance_per_node = static_cast<std::int32_t>(r.integer(c_max, -1, int32_max));
    // Empty = outside the trace window; times carry float noise, so round.
    d.creation_time = r.optional_scaled(c_created, 1.0).value_or(-1);
    d.deletion_time = r.optional_scaled(c_deleted, 1.0).value_or(-1);
    rows.push_back(std::move(d));
  }
  return rows;
}

}  // namespace placer::traces
