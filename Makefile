# rtx: the two commands of the README, plus developer conveniences.
#   make test   set up, configure, build, run the test suite (ctest)
#   make run    set up, build, run the suite's main job
#   make fuzz   libFuzzer targets (clang, ASan + UBSan) in build-fuzz/, FUZZ_SECONDS each
BUILD    ?= build
TYPE     ?= Release
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=
RTX_DATA ?= $(abspath ../shared/data)
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
export RTX_DATA

.PHONY: all setup configure build test run debug sanitize test-sanitize fuzz clean

all: build

setup:
	@scripts/setup

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(TYPE) -DRTX_DATA_DIR=$(RTX_DATA) $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	@$(BUILD)/bin/rtx-evolve run

debug:
	@$(MAKE) build BUILD=build-debug TYPE=Debug

# AddressSanitizer + UBSan build and tests (CPU only, Debug) in build-asan/.
sanitize test-sanitize:
	@$(MAKE) test BUILD=build-asan TYPE=Debug CMAKE_ARGS="-DRTX_SANITIZE=address,undefined -DRTX_CUDA=OFF"

# Fuzzing (tests/fuzz): clang build with -fsanitize=fuzzer,address,undefined, then each target
# runs FUZZ_SECONDS over its seed corpus (tests/fuzz/run_fuzz.sh). Needs an AVX-512 host.
fuzz: setup
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DRTX_FUZZ=ON -DRTX_CUDA=OFF -DRTX_BUILD_TESTS=OFF -DRTX_DATA_DIR=$(RTX_DATA)
	@cmake --build $(FUZZ_BUILD) --target rtx_fuzz_all -j $(JOBS)
	@tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf build build-debug build-asan build-fuzz
