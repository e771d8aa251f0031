# Common compile flags and the test helper.
add_library(placer_warnings INTERFACE)
target_compile_options(placer_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)

# placer_add_test(NAME SOURCES... [LABELS l1 l2]): one GoogleTest executable,
# registered with CTest through gtest_discover_tests.
include(GoogleTest)
# LOCK: a resource the suite's tests hold one at a time, against every other
# test naming it (ctest -j runs them side by side otherwise).
function(placer_add_test name)
  cmake_parse_arguments(T "" "LOCK" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main placer_warnings)
  target_compile_definitions(${name} PRIVATE
    PLACER_SHARED_DATA_DIR="${CMAKE_SOURCE_DIR}/../shared/data"
    PLACER_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  # A test's own sources with line tables only (a failure's backtrace keeps
  # its files and lines; the libraries and tools keep full -g): g++ compiled
  # constraints_test.cpp in 26.6 s with -g, 14.4 s with -g1 (2026-12-07),
  # and the test sources are about half of a cold build's C++ compiling.
  target_compile_options(${name} PRIVATE $<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX>>:-g1>)
  # Passive OpenMP waits: ctest runs suites side by side on few cores, where
  # spinning threads steal each other's time slices.
  set(_lock)
  if(T_LOCK)
    set(_lock RESOURCE_LOCK ${T_LOCK})
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" ${_lock}
                       DISCOVERY_TIMEOUT 60)
endfunction()
