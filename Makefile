# Placer: the two commands of the README, plus a few conveniences.
#   make run    install deps, build, serve on tcp://127.0.0.1:5555 and play a demo round
#   make test   install deps, build (CPU + CUDA when nvcc is present), run every test
BUILD      ?= build
ENDPOINT   ?= tcp://127.0.0.1:5555
BACKEND    ?= auto
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

.PHONY: all deps configure build run test bench clean

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
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

clean:
	rm -rf $(BUILD)
