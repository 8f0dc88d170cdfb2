# rtx: the two commands of the README, plus developer conveniences.
#   make test   set up, configure, build, run the test suite (ctest)
#   make run    set up, build, run the suite's main job
#   make fuzz   libFuzzer targets (clang, ASan + UBSan) in build-fuzz/, FUZZ_SECONDS each
#   make test-sanitize   the whole suite under ASan + UBSan, the threaded parts under TSan
#   make ci-sanitize     what CI runs after `make test`: every fuzz target 10 s, the TSan subset
BUILD    ?= build
TYPE     ?= Release
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=
RTX_DATA ?= $(abspath ../shared/data)
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
# The multi-threaded parts checked under ThreadSanitizer (ctest label `tsan`).
TSAN_TESTS = serve_engine_test serve_server_test serve_prefix_cache_test serve_http_guard_test serve_loadgen_test bench_app_test tune_measure_test
export RTX_DATA

# A build folder configured for another source tree (copied, or the checkout moved): CMake
# stops with a long cache error, so say what it means and what to do first.
define check_cache
	@if [ -f "$(1)/CMakeCache.txt" ]; then \
	  home=$$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$(1)/CMakeCache.txt" | tr -d '\r'); \
	  cache=$$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$(1)/CMakeCache.txt" | tr -d '\r'); \
	  if [ -n "$$home" ] && [ "$$(cd "$$home" 2>/dev/null && pwd -P)" != "$$(pwd -P)" ]; then \
	    echo "make: $(1)/ was configured for another source tree ($$home), not $$(pwd -P):" \
	      "remove it (rm -rf $(1)) or build in another folder (make BUILD=dir)" >&2; exit 2; \
	  fi; \
	  if [ -n "$$cache" ] && [ "$$(cd "$$cache" 2>/dev/null && pwd -P)" != "$$(cd "$(1)" && pwd -P)" ]; then \
	    echo "make: $(1)/ holds the CMake cache of another build folder ($$cache; copied?):" \
	      "remove it (rm -rf $(1)) or build in another folder (make BUILD=dir)" >&2; exit 2; \
	  fi; \
	fi
endef

.PHONY: all setup configure build test run debug sanitize test-sanitize test-asan test-tsan fuzz fuzz-build ci-sanitize clean

all: build

setup:
	@scripts/setup

configure: setup
	$(call check_cache,$(BUILD))
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(TYPE) -DRTX_DATA_DIR=$(RTX_DATA) $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	@$(BUILD)/bin/rtx-evolve run

debug:
	@$(MAKE) build BUILD=build-debug TYPE=Debug

# Sanitizers: the whole suite under AddressSanitizer + UBSan (build-asan/), and the
# multi-threaded parts under ThreadSanitizer (build-tsan/, -O1; only the TSAN_TESTS are built).
sanitize test-sanitize: test-asan test-tsan

test-asan: setup
	$(call check_cache,build-asan)
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -g1" -DCMAKE_C_FLAGS="-O1" \
	  -DRTX_SANITIZE=address,undefined -DRTX_CUDA=OFF -DRTX_DATA_DIR=$(RTX_DATA)
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS) --timeout 1800

test-tsan: setup
	$(call check_cache,$(TSAN_BUILD))
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -g1" -DCMAKE_C_FLAGS="-O1" \
	  -DRTX_SANITIZE=thread -DRTX_CUDA=OFF -DRTX_DATA_DIR=$(RTX_DATA)
	@cmake --build $(TSAN_BUILD) --target $(TSAN_TESTS) -j $(JOBS)
	@cd $(TSAN_BUILD) && ctest --output-on-failure -L tsan --timeout 900

# Fuzzing (tests/fuzz): clang build with -fsanitize=fuzzer,address,undefined (-O1, line tables:
# half the compile time of -O2 -g), then each target runs FUZZ_SECONDS over its seed corpus
# (tests/fuzz/run_fuzz.sh). The AVX-512 kernels are compiled with ISA flags in this build.
fuzz-build: setup
	$(call check_cache,$(FUZZ_BUILD))
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
	  -DCMAKE_C_FLAGS="-O1" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DRTX_FUZZ=ON -DRTX_CUDA=OFF \
	  -DRTX_BUILD_TESTS=OFF -DRTX_DATA_DIR=$(RTX_DATA)
	@cmake --build $(FUZZ_BUILD) --target rtx_fuzz_all -j $(JOBS)

fuzz: fuzz-build
	@tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# CI after `make test` (.ci/run): every fuzz target for 10 s, then the TSan subset.
ci-sanitize:
	@$(MAKE) fuzz FUZZ_SECONDS=10
	@$(MAKE) test-tsan

clean:
	rm -rf build build-debug build-asan build-tsan build-fuzz
