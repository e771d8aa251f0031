# Placer: the two commands of the README, plus a few conveniences.
#   make run    install deps, build, serve on tcp://127.0.0.1:5555 and play a demo round
#   make test   install deps, build (CPU + CUDA when nvcc is present), run every test,
#               then the three fuzzers for 45 s, at once (make fuzz: longer) and the OpenMP
#               parallel paths under ThreadSanitizer (make tsan)
BUILD      ?= build
ENDPOINT   ?= tcp://127.0.0.1:5555
BACKEND    ?= auto
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# The CUDA backend's code: sm_90 machine code and its PTX where a GPU is here
# to run it; elsewhere (CI, the development machines) the PTX alone, which a
# GPU's driver compiles when first loaded. That leaves out ptxas, 434 of
# nvcc's 934 s of one core in a cold build (2026-12-07). scripts/gpu-bundle.sh
# builds the sm_90 code for a lent GPU; the image builds its own.
CUDA_ARCHS ?= $(if $(shell nvidia-smi -L 2>/dev/null),90,90-virtual)
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 300
# make test's three fuzzers at once on 2 cores: 45 s each is about the 30 s of
# a core each had one after another.
TEST_FUZZ_SECONDS ?= 45

.PHONY: all deps configure build run test fuzz fuzz-build tsan tsan-build bench image-test images test-slurm-newer clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DPLACER_CUDA_ARCHITECTURES=$(CUDA_ARCHS) $(CMAKE_ARGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

run: deps configure
	cmake --build $(BUILD) -j $(JOBS) --target placer
	$(BUILD)/placer serve --endpoint $(ENDPOINT) --backend $(BACKEND) --demo data/openb-sample

# The fuzz and TSan builds run beside ctest, niced: its Kubernetes live tests
# are one chain, one at a time, and leave a quarter of 2 cores idle
# (2026-12-07), which the builds take without taking the tests' share.
test: build
	@$(BUILD)/placer version | head -1
	@echo "the fuzz and TSan builds beside ctest, niced: log in $(BUILD)/sanitizer-builds.log"
	@nice -n 19 $(MAKE) --no-print-directory fuzz-build tsan-build > $(BUILD)/sanitizer-builds.log 2>&1 & builds=$$!; \
	  (cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600); tests=$$?; \
	  wait $$builds || { tail -40 $(BUILD)/sanitizer-builds.log; echo "make test: the fuzz or TSan build failed"; exit 1; }; \
	  exit $$tests
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
	$(MAKE) --no-print-directory tsan

# The fuzzers (tests/fuzz: the request, the transport, the transport through
# CURVE boxes): their own clang build with libFuzzer and ASan/UBSan, the
# request fuzzer seeded from data/examples and the openb sample, FUZZ_SECONDS
# each, all three at once (tests/fuzz/run-all.sh); a finding lands in
# $(FUZZ_BUILD)/findings and fails the run.
fuzz-build: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPLACER_FUZZ=ON > /dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target request_fuzz make_corpus zmtp_fuzz zmtp_curve_fuzz

fuzz: fuzz-build
	$(FUZZ_BUILD)/tests/fuzz/make_corpus . $(FUZZ_BUILD)/corpus
	@bash tests/fuzz/run-all.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Under ThreadSanitizer (clang, LLVM OpenMP; its own build): every OpenMP
# stage's parallel path against the sequential one, bit for bit, and the
# whole service suite (I/O thread, workers, queue, HTTP, faults, CURVE,
# the transport's peers).
TSAN_RUN = TSAN_OPTIONS=ignore_noninstrumented_modules=1:halt_on_error=1:exitcode=66 OMP_WAIT_POLICY=PASSIVE
tsan-build: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPLACER_TSAN=ON > /dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target solver_test_omp service_test capture_test peers_test

tsan: tsan-build
	$(TSAN_RUN) $(TSAN_BUILD)/tests/solver_test_omp --gtest_filter='BackendParity.Parallel*:Flatten.NodeStatesOnTheTeam*:Backend.StatsAfter*' --gtest_brief=1
	$(TSAN_RUN) $(TSAN_BUILD)/tests/service_test --gtest_brief=1 > $(TSAN_BUILD)/service_test.log 2>&1 || \
	  { grep -A30 'WARNING: ThreadSanitizer' $(TSAN_BUILD)/service_test.log | head -60; tail -5 $(TSAN_BUILD)/service_test.log; exit 1; }
	@tail -2 $(TSAN_BUILD)/service_test.log
	$(TSAN_RUN) $(TSAN_BUILD)/tests/capture_test --gtest_brief=1 > $(TSAN_BUILD)/capture_test.log 2>&1 || \
	  { grep -A30 'WARNING: ThreadSanitizer' $(TSAN_BUILD)/capture_test.log | head -60; tail -5 $(TSAN_BUILD)/capture_test.log; exit 1; }
	@tail -2 $(TSAN_BUILD)/capture_test.log
	$(TSAN_RUN) $(TSAN_BUILD)/tests/peers_test --gtest_brief=1 > $(TSAN_BUILD)/peers_test.log 2>&1 || \
	  { grep -A30 'WARNING: ThreadSanitizer' $(TSAN_BUILD)/peers_test.log | head -60; tail -5 $(TSAN_BUILD)/peers_test.log; exit 1; }
	@tail -2 $(TSAN_BUILD)/peers_test.log

# The image in a real container runtime (podman + runc, root): a Debian 12
# base by debootstrap, this build's binary, the README's runs checked.
image-test: build
	docker/image-test.sh $(BUILD)

# The two images the chart and the manifests name, tagged with the
# project's version (CMakeLists.txt), never `latest`: placer (placer serve,
# docker/Dockerfile) and placer-k8s-scheduler (the scheduler alone).
# CONTAINER=podman builds them with podman; REGISTRY=host/path/ prefixes them.
VERSION   := $(shell awk '/^project.placer VERSION/ {print $$3}' CMakeLists.txt)
CONTAINER ?= docker
REGISTRY  ?=
images:
	$(CONTAINER) build -f docker/Dockerfile -t $(REGISTRY)placer:$(VERSION) .
	$(CONTAINER) build -f docker/scheduler.Dockerfile -t $(REGISTRY)placer-k8s-scheduler:$(VERSION) .

# The Slurm bridge's live tests against a newer Slurm (24.11, in a Debian
# 13 chroot by debootstrap: about 300 MB, once; root): the same tests that
# `make test` runs against Debian 12's 22.05 (docs/slurm.md, "Slurm versions").
test-slurm-newer: build
	@eval "$$(scripts/slurm-newer.sh up)" && cd $(BUILD) && ctest -R SlurmBridgeLive --output-on-failure; \
	  rc=$$?; $(CURDIR)/scripts/slurm-newer.sh down; exit $$rc

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
