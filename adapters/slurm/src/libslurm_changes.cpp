// The bridge's job changes through libslurm (bridge.hpp, job_changes):
// the RPCs scontrol sends, from this process. The library is loaded at run
// time by the soname of the libslurm-dev the build found
// (PLACER_LIBSLURM_SONAME), so the placer binary runs where Slurm is not
// installed and only `slurm-bridge` needs it; the headers give the layout of
// job_desc_msg_t, which is that Slurm release's ABI.
#include <placer/slurm/bridge.hpp>

#ifdef PLACER_LIBSLURM_SONAME
#include <dlfcn.h>
#include <unistd.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <cstdlib>
#include <limits>
#include <type_traits>
#endif

namespace placer::slurm {

#ifndef PLACER_LIBSLURM_SONAME

bool libslurm_usable(std::string* why) {
  if (why != nullptr) *why = "this placer was built without libslurm's headers (install libslurm-dev and rebuild)";
  return false;
}

std::unique_ptr<job_changes> make_libslurm_changes() {
  std::string why;
  (void)libslurm_usable(&why);
  throw slurm_error(why);
}

#else

namespace {

/// The entry points the bridge calls, resolved once for the process.
struct libslurm {
  void (*init)(char const*) = nullptr;
  void (*init_job_desc_msg)(job_desc_msg_t*) = nullptr;
  int (*update_job)(job_desc_msg_t*, job_array_resp_msg_t**) = nullptr;
  int (*requeue)(char*, std::uint32_t, job_array_resp_msg_t**) = nullptr;
  void (*free_array_resp)(job_array_resp_msg_t*) = nullptr;
  int (*ping)(int) = nullptr;
  int (*get_errno)() = nullptr;
  char* (*strerror)(int) = nullptr;
  std::string error;  ///< why it is not usable; empty when it is
  /// Why the controller did not answer a ping through it (checked once,
  /// by libslurm_usable): a slurmctld more than two releases newer than
  /// this libslurm answers nothing it can read. Empty when it answered.
  std::string ping_error() const {
    static std::string const e = [this] {
      int const rc = ping(0);
      if (rc == SLURM_SUCCESS) return std::string();
      return std::string("slurmctld did not answer " PLACER_LIBSLURM_SONAME "'s ping (") + strerror(rc) +
             "): either it is down, or it is more than two releases newer than this libslurm and cannot read it";
    }();
    return e;
  }

  static libslurm const& get() {
    static libslurm const lib = load();
    return lib;
  }

 private:
  static libslurm load() {
    libslurm l;
    // libslurm exits the process when it finds no configuration: look first.
    char const* env = std::getenv("SLURM_CONF");
    std::string const conf = env != nullptr && *env != '\0' ? env : "/etc/slurm/slurm.conf";
    if (access(conf.c_str(), R_OK) != 0) {
      l.error = "no Slurm configuration to read at " + conf + (env == nullptr ? " (set SLURM_CONF)" : "");
      return l;
    }
    // Global: the plugins libslurm loads in turn (select/cons_tres, ...)
    // resolve their calls into it against the global namespace.
    void* h = dlopen(PLACER_LIBSLURM_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      char const* e = dlerror();
      l.error = std::string("cannot load " PLACER_LIBSLURM_SONAME " (the libslurm this placer was built against): ") +
                (e != nullptr ? e : "unknown error");
      return l;
    }
    auto sym = [&](char const* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && l.error.empty()) l.error = std::string(PLACER_LIBSLURM_SONAME " has no ") + name;
    };
    sym("slurm_init", l.init);
    sym("slurm_init_job_desc_msg", l.init_job_desc_msg);
    sym("slurm_update_job2", l.update_job);
    sym("slurm_requeue2", l.requeue);
    sym("slurm_free_job_array_resp", l.free_array_resp);
    sym("slurm_ping", l.ping);
    sym("slurm_get_errno", l.get_errno);
    sym("slurm_strerror", l.strerror);
    if (l.error.empty()) l.init(nullptr);  // reads SLURM_CONF, or Slurm's default configuration
    return l;
  }
};

/// The job as Slurm's RPCs name it ("N" or "A_T", as scontrol sends it).
std::string slurm_id(job_ref const& job) {
  auto const max = static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());
  if (job.id <= 0 || job.id >= max || job.task >= max) {
    throw slurm_error("job " + job.str() + " is not a Slurm job id");
  }
  return job.str();
}

class libslurm_changes final : public job_changes {
 public:
  void update(job_ref const& job, std::string const& nodes, std::string const& comment) override {
    std::string id = slurm_id(job);
    job_desc_msg_t m = message(id);
    // Slurm's message only reads these strings (update only).
    m.req_nodes = nodes.empty() ? nullptr : const_cast<char*>(nodes.c_str());
    m.admin_comment = const_cast<char*>(comment.c_str());
    job_array_resp_msg_t* resp = nullptr;
    check(lib_.update_job(&m, &resp), resp, "update", job);
  }
  void requeue_hold(job_ref const& job) override {
    std::string id = slurm_id(job);
    job_array_resp_msg_t* resp = nullptr;
    check(lib_.requeue(id.data(), JOB_REQUEUE_HOLD, &resp), resp, "requeuehold", job);
  }
  std::vector<skipped_job> release(std::vector<job_ref> const& jobs) override {
    std::vector<skipped_job> failed;
    for (auto const& j : jobs) {
      try {
        std::string id = slurm_id(j);
        job_desc_msg_t m = message(id);
        m.priority = INFINITE;  // what `scontrol release` sends
        job_array_resp_msg_t* resp = nullptr;
        check(lib_.update_job(&m, &resp), resp, "release", j);
      } catch (std::exception const& e) {
        failed.push_back({j, e.what()});
      }
    }
    return failed;
  }
  [[nodiscard]] char const* name() const override { return "libslurm"; }

 private:
  /// An update of job `id` (kept alive by the caller) that changes nothing yet.
  job_desc_msg_t message(std::string& id) const {
    job_desc_msg_t m;
    lib_.init_job_desc_msg(&m);
    m.job_id_str = id.data();
    return m;
  }
  /// The call's result, and for an array's tasks each task's (Slurm answers
  /// those one by one, and the call itself succeeds).
  void check(int rc, job_array_resp_msg_t* resp, char const* what, job_ref const& job) const {
    int err = rc;
    if (rc != SLURM_SUCCESS && lib_.get_errno() != SLURM_SUCCESS) err = lib_.get_errno();
    if (resp != nullptr) {
      for (std::uint32_t k = 0; k < resp->job_array_count && err == SLURM_SUCCESS; ++k) {
        err = static_cast<int>(resp->error_code[k]);
      }
      lib_.free_array_resp(resp);
    }
    if (err == SLURM_SUCCESS) return;
    throw slurm_error(std::string("libslurm ") + what + " of job " + job.str() + ": " + lib_.strerror(err));
  }
  libslurm const& lib_ = libslurm::get();
};

}  // namespace

bool libslurm_usable(std::string* why) {
  auto const& lib = libslurm::get();
  std::string const e = lib.error.empty() ? lib.ping_error() : lib.error;
  if (why != nullptr) *why = e;
  return e.empty();
}

std::unique_ptr<job_changes> make_libslurm_changes() {
  auto const& lib = libslurm::get();
  if (!lib.error.empty()) throw slurm_error(lib.error);
  return std::make_unique<libslurm_changes>();
}

#endif

}  // namespace placer::slurm
