// libFuzzer harness over everything a peer's bytes reach before and during
// a round: the envelope checks (size, identifier, FlatBuffers verifier),
// decoding, the round's limits, validation, and, for rounds small enough
// to solve quickly, the solve itself on the CPU backend, whose result must
// not over-commit. Built by `make fuzz` (clang, -fsanitize=fuzzer,address,
// undefined, in build-fuzz/; `make test` runs it for 30 s). Seeds: the
// requests make_corpus.cpp encodes from data/examples and the openb sample,
// and tests/fuzz/regressions, past findings kept as inputs (the first: a
// node's CPU capacity of 6.7e16 overflowed a score's per-mille product;
// validation now caps capacities and demands at 2^40). A finding is a
// crash, a sanitizer report, an exception other than the documented
// logic_error, or an over-commit.
#include <placer/service/codec.hpp>
#include <placer/solver/limits.hpp>
#include <placer/solver/solver.hpp>
#include <placer/topology/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

using namespace placer;

/// Small rounds only, so that each input runs in milliseconds.
round_limits fuzz_limits() {
  round_limits l;
  l.nodes = 64;
  l.pending_jobs = 64;
  l.running_jobs = 64;
  l.replicas = 512;
  l.running_replicas = 512;
  l.topology_domains = 256;
  return l;
}

/// Every node's resources stay within capacity after the round's placements.
void check_no_over_commit(round_input const& in, round_result const& r) {
  std::vector<std::int64_t> cpu(in.state.nodes.size()), mem(in.state.nodes.size());
  std::vector<std::vector<std::int64_t>> gpu(in.state.nodes.size());
  for (std::size_t n = 0; n < in.state.nodes.size(); ++n) {
    cpu[n] = in.state.nodes[n].cpu_milli_free;
    mem[n] = in.state.nodes[n].memory_mib_free;
    gpu[n].assign(in.state.nodes[n].gpu_free_milli.begin(), in.state.nodes[n].gpu_free_milli.end());
  }
  for (auto const& p : r.placements) {
    auto const& d = in.pending[static_cast<std::size_t>(p.job)].per_replica;
    for (auto const& rp : p.replicas) {
      auto const n = static_cast<std::size_t>(rp.node);
      cpu[n] -= d.cpu_milli;
      mem[n] -= d.memory_mib;
      for (auto g : rp.gpus) gpu[n][static_cast<std::size_t>(g)] -= rp.gpu_milli;
    }
  }
  bool const preempted = !r.preemptions.empty() || !r.scale_ins.empty() || !r.reclaimed_nodes.empty();
  for (std::size_t n = 0; n < cpu.size() && !preempted; ++n) {
    bool ok = cpu[n] >= 0 && mem[n] >= 0;
    for (auto g : gpu[n]) ok = ok && g >= 0;
    if (!ok) {
      std::fprintf(stderr, "over-commit on node %zu\n", n);
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  static solver s(kernels::make_backend(kernels::backend_kind::cpu));
  static service::decoded_request req;
  static std::vector<std::string_view> scratch;
  auto const chk = service::check_envelope(data, size, std::size_t{1} << 20);
  if (chk.envelope == nullptr) return 0;
  try {
    service::decode_request(*chk.envelope, req);
    if (req.delta || req.jobs) return 0;  // deltas need a session: the service tests cover them
    check_limits(req.input, fuzz_limits(), scratch);
    req.input.deadline_us = 200'000;
    auto const r = s.solve(req.input);
    check_no_over_commit(req.input, r);
  } catch (logic_error const&) {
    // The documented refusal of bad input.
  }
  return 0;
}
