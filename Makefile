# rtx: the two commands of the README, plus developer conveniences.
#   make test   set up, configure, build, run the test suite (ctest)
#   make run    set up, build, run the suite's main job
BUILD    ?= build
TYPE     ?= Release
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=
RTX_DATA ?= $(abspath ../shared/data)
export RTX_DATA

.PHONY: all setup configure build test run debug sanitize test-sanitize clean

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
	@$(BUILD)/bin/rtx-doctor

debug:
	@$(MAKE) build BUILD=build-debug TYPE=Debug

# AddressSanitizer + UBSan build and tests (CPU only, Debug) in build-asan/.
sanitize test-sanitize:
	@$(MAKE) test BUILD=build-asan TYPE=Debug CMAKE_ARGS="-DRTX_SANITIZE=address,undefined -DRTX_CUDA=OFF"

clean:
	rm -rf build build-debug build-asan
