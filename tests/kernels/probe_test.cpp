// The CUDA probe's decisions that need no GPU: which driver can run the
// runtime linked in, and which devices can run the architectures built.
#include <placer/kernels/backend.hpp>
#include <placer/kernels/probe.hpp>

#include <gtest/gtest.h>

namespace placer::kernels {
namespace {

TEST(CudaProbe, TheDriverMustBeThereAndNotOlderThanTheRuntime) {
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(driver_mismatch(13000, 13000), "");
  EXPECT_EQ(driver_mismatch(13010, 13000), "");
  EXPECT_NE(driver_mismatch(0, 13000).find("no CUDA driver"), std::string::npos);
  auto const old = driver_mismatch(12040, 13000);
  EXPECT_NE(old.find("supports CUDA 12.4, older than the CUDA 13.0 runtime"), std::string::npos) << old;
}

TEST(CudaProbe, ArchitecturesRunOnTheirMajorOrThroughPtx) {
  // Plain numbers carry SASS and PTX: sm_90 code runs on 9.x and, JIT-compiled, on anything newer.
  EXPECT_TRUE(arch_runs(90, "90"));
  EXPECT_TRUE(arch_runs(100, "90"));
  EXPECT_FALSE(arch_runs(80, "90")) << "an A100 cannot run Hopper-only code";
  EXPECT_TRUE(arch_runs(80, "80;90"));
  EXPECT_TRUE(arch_runs(86, "80,90")) << "sm_80 SASS runs on 8.6";
  // -real is SASS alone: the same major only.
  EXPECT_TRUE(arch_runs(90, "90-real"));
  EXPECT_FALSE(arch_runs(100, "90-real"));
  EXPECT_FALSE(arch_runs(89, "90-real"));
  // -virtual is PTX alone: any capability at or above it.
  EXPECT_TRUE(arch_runs(120, "90-virtual"));
  EXPECT_FALSE(arch_runs(80, "90-virtual"));
  EXPECT_FALSE(arch_runs(90, "native;all;")) << "names it cannot check are not a yes";
  // What was built is named exactly when the backend is in (placer version prints it).
  EXPECT_EQ(cuda_architectures().empty(), !cuda_enabled) << cuda_architectures();
}

TEST(CudaProbe, WithoutAUsableGpuTheSummarySaysWhy) {
  // On a machine without a GPU (CI) the summary is the reason; with one, the device.
  auto const why = cuda_unavailable_reason();
  auto const summary = cuda_device_summary();
  if (why.empty()) {
    EXPECT_NE(summary.find("sm_"), std::string::npos) << summary;
  } else {
    EXPECT_NE(summary.find(why), std::string::npos) << summary;
    EXPECT_EQ(select_backend("auto")->kind(), backend_kind::cpu);
  }
}

}  // namespace
}  // namespace placer::kernels
