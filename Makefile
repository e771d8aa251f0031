# Placer: the two commands of the README, plus a few conveniences.
#   make run    install deps, build, serve on tcp://127.0.0.1:5555 and play a demo round
#   make test   install deps, build (CPU + CUDA when nvcc is present), run every test,
#               then the request fuzzer for 30 s (make fuzz: longer) and the OpenMP
#               parallel paths under ThreadSanitizer (make tsan)
BUILD      ?= build
ENDPOINT   ?= tcp://127.0.0.1:5555
BACKEND    ?= auto
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 300
TEST_FUZZ_SECONDS ?= 30

.PHONY: all deps configure build run test fuzz tsan bench image-test images test-slurm-newer clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

run: deps configure
	cmake --build $(BUILD) -j $(JOBS) --target placer
	$(BUILD)/placer serve --endpoint $(ENDPOINT) --backend $(BACKEND) --demo data/openb-sample

test: build
	@$(BUILD)/placer version | head -1
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
	$(MAKE) --no-print-directory tsan

# The request fuzzer (tests/fuzz): its own clang build with libFuzzer and
# ASan/UBSan, seeded from data/examples and the openb sample, for
# FUZZ_SECONDS; a finding lands in $(FUZZ_BUILD)/findings and fails the run.
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPLACER_FUZZ=ON > /dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target request_fuzz make_corpus zmtp_fuzz zmtp_curve_fuzz
	$(FUZZ_BUILD)/tests/fuzz/make_corpus . $(FUZZ_BUILD)/corpus
	mkdir -p $(FUZZ_BUILD)/findings $(FUZZ_BUILD)/zmtp-corpus $(FUZZ_BUILD)/zmtp-curve-corpus
	@echo "request fuzzer: $(FUZZ_SECONDS) s, log in $(FUZZ_BUILD)/fuzz.log"
	@$(FUZZ_BUILD)/tests/fuzz/request_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/findings/ $(FUZZ_BUILD)/corpus tests/fuzz/regressions > $(FUZZ_BUILD)/fuzz.log 2>&1 || \
	  { tail -40 $(FUZZ_BUILD)/fuzz.log; echo "make fuzz: a finding, saved in $(FUZZ_BUILD)/findings"; exit 1; }
	@grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done' $(FUZZ_BUILD)/fuzz.log
	@echo "transport fuzzer: $(FUZZ_SECONDS) s, log in $(FUZZ_BUILD)/zmtp-fuzz.log"
	@$(FUZZ_BUILD)/tests/fuzz/zmtp_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/findings/zmtp- $(FUZZ_BUILD)/zmtp-corpus tests/fuzz/zmtp_seeds > $(FUZZ_BUILD)/zmtp-fuzz.log 2>&1 || \
	  { tail -40 $(FUZZ_BUILD)/zmtp-fuzz.log; echo "make fuzz: a finding, saved in $(FUZZ_BUILD)/findings"; exit 1; }
	@grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done' $(FUZZ_BUILD)/zmtp-fuzz.log
	@echo "transport fuzzer, CURVE boxes: $(FUZZ_SECONDS) s, log in $(FUZZ_BUILD)/zmtp-curve-fuzz.log"
	@$(FUZZ_BUILD)/tests/fuzz/zmtp_curve_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/findings/zmtp-curve- $(FUZZ_BUILD)/zmtp-curve-corpus tests/fuzz/zmtp_curve_seeds \
	  > $(FUZZ_BUILD)/zmtp-curve-fuzz.log 2>&1 || \
	  { tail -40 $(FUZZ_BUILD)/zmtp-curve-fuzz.log; echo "make fuzz: a finding, saved in $(FUZZ_BUILD)/findings"; exit 1; }
	@grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done' $(FUZZ_BUILD)/zmtp-curve-fuzz.log

# Under ThreadSanitizer (clang, LLVM OpenMP; its own build): every OpenMP
# stage's parallel path against the sequential one, bit for bit, and the
# whole service suite (I/O thread, workers, queue, HTTP, faults, CURVE,
# the transport's peers).
TSAN_RUN = TSAN_OPTIONS=ignore_noninstrumented_modules=1:halt_on_error=1:exitcode=66 OMP_WAIT_POLICY=PASSIVE
tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPLACER_TSAN=ON > /dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target solver_test_omp service_test capture_test peers_test
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
