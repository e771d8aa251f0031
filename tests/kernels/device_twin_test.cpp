// The device twin's device and the work arena, for the calls the host does
// not wait for (issue 53, item 1): on a GPU a copy from pinned memory reads
// it when the stream gets to it, so the host must not write a buffer a copy
// in flight still reads, nor one a copy in flight will land in, before its
// wait; and a call's buffers must outlive the calls laid out after it.
#include "../../kernels/src/host_device.hpp"

#include <placer/topology/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace placer {
namespace {

using kernels::device_arena;
using kernels::host_device;

TEST(DeviceTwin, AHostWriteIntoACopyInFlightFailsAtTheWait) {
  host_device dev;
  void* d = dev.device_alloc(256);
  auto* h = static_cast<char*>(dev.host_alloc(256));
  std::memset(h, 1, 256);
  dev.up(d, h, 256);
  EXPECT_NO_THROW(dev.sync());  // nothing written while it flew
  dev.up(d, h, 256);
  h[3] = 2;  // the copy may not have read it yet
  EXPECT_THROW(dev.sync(), logic_error);
  dev.down(h, d, 256);
  h[7] = 9;  // the copy may land over it
  EXPECT_THROW(dev.sync(), logic_error);
  // A copy down into what a copy up still reads follows it in stream
  // order: fine, if the host left the buffer alone before it.
  dev.up(d, h, 256);
  dev.down(h + 128, d, 128);
  EXPECT_NO_THROW(dev.sync());
  dev.up(d, h, 256);
  h[0] = 5;
  EXPECT_THROW(dev.down(h, d, 16), logic_error);
  dev.sync();
  // Pageable memory: CUDA copies it before the call returns.
  std::vector<char> pageable(256, 4);
  dev.up(d, pageable.data(), 256);
  pageable[0] = 0;
  EXPECT_NO_THROW(dev.sync());
  dev.host_free(h);
  dev.device_free(d);
}

// Calls held (not waited for) keep their buffers: the next plans lay out
// after them, and never grow the memory under them.
TEST(DeviceTwin, HeldCallsKeepTheirBuffersUntilReleased) {
  host_device dev;
  device_arena<host_device> arena(dev);
  std::vector<int> in(100, 7);
  int* first = nullptr;
  arena.plan([&](device_arena<host_device>& a) {
    first = a.stage(in.data(), in.size());
    (void)a.landing<int>(4);  // a mirror-only buffer: the two sides apart
  }, /*ahead=*/1024);  // room for what is laid out after it
  arena.flush();
  arena.hold();
  ASSERT_TRUE(arena.held());
  int* second = nullptr;
  auto small = [&](device_arena<host_device>& a) { second = a.stage(in.data(), 10); };
  ASSERT_TRUE(arena.fits(small));
  arena.plan(small);
  EXPECT_GE(reinterpret_cast<char*>(second), reinterpret_cast<char*>(first) + in.size() * sizeof(int));
  arena.flush();
  // Growth under held calls is refused: their copies may still run.
  std::vector<int> big(1 << 16, 1);
  auto large = [&](device_arena<host_device>& a) { (void)a.stage(big.data(), big.size()); };
  EXPECT_FALSE(arena.fits(large));
  EXPECT_THROW(arena.plan(large), logic_error);
  dev.sync();
  arena.release();
  int* again = nullptr;
  arena.plan([&](device_arena<host_device>& a) { again = a.stage(in.data(), in.size()); });
  EXPECT_EQ(again, first);  // released: laid out from the start again
  EXPECT_NO_THROW(dev.sync());
}

// What a chain's launch sends back is checked before the host reads by it:
// a count past a tier's copies, a node or a row out of range, fail the round
// with an internal error instead of the host reading past its buffers.
TEST(DeviceBackend, AChainsOutputIsCheckedBeforeTheHostReadsByIt) {
  using kernels::check_chain_placements;
  using kernels::check_chain_records;
  kernels::tier_problem tiers[2];
  tiers[0].n_rows = 3;
  tiers[1].n_rows = 2;
  std::int32_t const out_at[3] = {0, 4, 6};  // 4 copies, then 2
  std::vector<kernels::tier_placement> out(6);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = {static_cast<std::int32_t>(i), static_cast<std::int32_t>(i % 2), 0, 1};
  }
  kernels::tier_control ctl[2];
  ctl[0].placed = 4;
  ctl[1].placed = 1;
  EXPECT_NO_THROW(check_chain_placements(ctl, out.data(), out_at, tiers, 2, 10));
  auto refused = [&](char const* needle) {
    try {
      check_chain_placements(ctl, out.data(), out_at, tiers, 2, 10);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (logic_error const& e) {
      EXPECT_EQ(e.code(), error_code::internal);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ctl[1].placed = 3;
  refused("3 placements for tier 1 of 2 copies");
  ctl[1].placed = -1;
  refused("-1 placements for tier 1");
  ctl[1].placed = 2;
  out[5].node = 10;
  refused("a placement on node 10 of 10");
  out[5].node = 5;
  out[5].row = 2;
  refused("row 2 of 2 (tier 1)");
  out[5].row = 1;
  EXPECT_NO_THROW(check_chain_placements(ctl, out.data(), out_at, tiers, 2, 10));
  std::int32_t const nodes[3] = {0, 9, 4};
  EXPECT_NO_THROW(check_chain_records(nodes, 3, 10));
  EXPECT_THROW(check_chain_records(nodes, 3, 9), logic_error);
  std::int32_t const negative[1] = {-1};
  EXPECT_THROW(check_chain_records(negative, 1, 9), logic_error);
}

}  // namespace
}  // namespace placer
