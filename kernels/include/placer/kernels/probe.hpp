#pragma once
// The CUDA probe's decisions that need no GPU, inline so that both the
// host library and the CUDA one use them (tests/kernels/probe_test.cpp):
//   driver_mismatch(driver, runtime): why a driver of CUDA version `driver`
//     cannot run the runtime linked in (version 1000 * major + 10 * minor),
//     "" when it can;
//   arch_runs(cc, built): whether a device of compute capability `cc`
//     (10 * major + minor) runs code built for CMake's CUDA_ARCHITECTURES
//     `built` ("80;90" or "80,90", "90-real", "90-virtual"): SASS for the
//     same major and a minor not above it, or PTX (plain numbers and
//     -virtual carry it) for any capability not below it;
//   cuda_version_text(13000) == "13.0".
#include <string>
#include <string_view>

namespace placer::kernels {

inline std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

inline std::string driver_mismatch(int driver, int runtime) {
  if (driver <= 0) return "no CUDA driver (libcuda.so.1 not found: is the NVIDIA driver installed and visible?)";
  if (driver < runtime) {
    return "the NVIDIA driver supports CUDA " + cuda_version_text(driver) + ", older than the CUDA " +
           cuda_version_text(runtime) + " runtime this binary links: update the driver";
  }
  return {};
}

inline bool arch_runs(int cc, std::string_view built) {
  while (!built.empty()) {
    auto const end = built.find_first_of(";,");
    std::string_view item = built.substr(0, end);
    built = end == std::string_view::npos ? std::string_view() : built.substr(end + 1);
    bool sass = true, ptx = true;
    if (auto const dash = item.find('-'); dash != std::string_view::npos) {
      sass = item.substr(dash + 1) == "real";
      ptx = item.substr(dash + 1) == "virtual";
      item = item.substr(0, dash);
    }
    int arch = 0;
    for (char c : item) {
      if (c < '0' || c > '9') {
        arch = -1;
        break;
      }
      arch = arch * 10 + (c - '0');
    }
    if (arch <= 0) continue;
    if (sass && arch / 10 == cc / 10 && arch % 10 <= cc % 10) return true;
    if (ptx && arch <= cc) return true;
  }
  return false;
}

}  // namespace placer::kernels
