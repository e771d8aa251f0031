# Finds every third-party dependency in one place. All of them come from
# Debian packages (scripts/install-deps.sh) or the CUDA toolkit.

# ccache for C++ and CUDA when available: CI and laptops rebuild a lot.
find_program(PLACER_CCACHE ccache)
if(PLACER_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${PLACER_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${PLACER_CCACHE})
endif()

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(cppzmq REQUIRED)          # brings libzmq
find_package(FlatBuffers REQUIRED)     # libflatbuffers (verifier, JSON parser)
find_program(PLACER_FLATC flatc REQUIRED)  # flatbuffers-compiler
find_package(prometheus-cpp REQUIRED)  # /metrics: registry and text format (core only)
find_package(spdlog REQUIRED)          # the service's log lines (text or JSON)
find_package(nlohmann_json 3 REQUIRED) # the Slurm bridge reads squeue/sinfo --json
find_package(PkgConfig REQUIRED)
pkg_check_modules(httplib REQUIRED IMPORTED_TARGET cpp-httplib)  # the tests' HTTP client (service_test)
pkg_check_modules(sodium REQUIRED IMPORTED_TARGET libsodium)     # CurveZMQ in the service's own ZMTP (zmtp.cpp)

# --- CUDA (optional) -------------------------------------------------------
set(PLACER_HAS_CUDA OFF)
set(PLACER_CUDA_PREFIX "$ENV{PLACER_CUDA_PREFIX}" CACHE PATH "Where scripts/install-deps.sh puts NVIDIA's CUDA wheels")
if(NOT PLACER_CUDA_PREFIX)
  set(PLACER_CUDA_PREFIX /opt/placer/cuda-13.0 CACHE PATH "" FORCE)
endif()
set(PLACER_CUDA_WHEEL_ROOT "${PLACER_CUDA_PREFIX}/nvidia/cu13")
if(PLACER_ENABLE_CUDA)
  include(CheckLanguage)
  # An installed toolkit first ($CUDA_HOME, /usr/local/cuda), then the one
  # scripts/install-deps.sh makes from NVIDIA's wheels (PLACER_CUDA_PREFIX).
  if(NOT CMAKE_CUDA_COMPILER)
    foreach(root IN ITEMS "$ENV{CUDA_HOME}" /usr/local/cuda "${PLACER_CUDA_WHEEL_ROOT}")
      if(root AND EXISTS "${root}/bin/nvcc")
        set(CMAKE_CUDA_COMPILER "${root}/bin/nvcc")
        if(NOT CUDAToolkit_ROOT)
          set(CUDAToolkit_ROOT "${root}")
        endif()
        break()
      endif()
    endforeach()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${PLACER_CUDA_ARCHITECTURES})
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates nvcc 13 and does not know its C++20 flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PLACER_HAS_CUDA ON)
    message(STATUS "placer: CUDA backend built by ${CMAKE_CUDA_COMPILER} (CUDA ${CUDAToolkit_VERSION})")
  else()
    message(STATUS "placer: nvcc not found, building the CPU backend only")
  endif()
endif()
if(PLACER_HAS_CUDA)
  set(PLACER_HAS_CUDA_STR "ON (archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  set(PLACER_HAS_CUDA_STR "OFF")
endif()

# --- CCCL (Thrust/CUB/libcu++) headers ---------------------------------------
# The CUDA toolkit ships CCCL; the CPU-only build (and the fuzz and TSan builds)
# use the same headers: the toolkit's, else the wheels', and Debian's older
# libthrust-dev only where neither is there (PLACER_NO_CUDA_WHEELS=1).
find_path(PLACER_CCCL_INCLUDE_DIR thrust/version.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS}/cccl "$ENV{CUDA_HOME}/include/cccl" /usr/local/cuda/include/cccl
        /usr/local/cuda/include "${PLACER_CUDA_WHEEL_ROOT}/include/cccl" /usr/include
  NO_DEFAULT_PATH)
if(NOT PLACER_CCCL_INCLUDE_DIR)
  message(FATAL_ERROR "Thrust headers not found: run scripts/install-deps.sh (CUDA's wheels) or 'apt-get install libthrust-dev libcub-dev'")
endif()

# --- GoogleTest / Google Benchmark ------------------------------------------
if(PLACER_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(PLACER_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "placer: Google Benchmark not found, bench/ skipped")
    set(PLACER_BUILD_BENCH OFF)
  endif()
endif()
