# The two commands of the README: `make run` and `make test`. Each installs what is missing, configures
# in Release, then builds what it needs (`run`: the library and the `flashrtc` command; `test`: everything)
# and runs the main job or the test suite. python3-venv: the wheel test (tests/packaging/test_wheel.sh).
# python3-pip: cuobjdump and nvdisasm for `flashrtc cache sass`, NVIDIA's PyPI wheels listed with their hashes in
# tools/cuda-binutils.txt (4.7 MB), installed into TOOLS_DIR, which the build searches (FLASHRTC_TOOLS_DIR); the
# list's copy there says what is installed.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
APT_PACKAGES := cmake ninja-build g++ pkg-config libspdlog-dev libfmt-dev doctest-dev libeigen3-dev \
                libcli11-dev nlohmann-json3-dev libxxhash-dev python3 python3-venv python3-pip gnuplot-nox
APT_PACKAGES += clang libclang-rt-14-dev  # libFuzzer, for `make fuzz`
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FLASHRTC := $(BUILD_DIR)/host/flashrtc/flashrtc
TOOLS_DIR ?= $(CURDIR)/.deps/tools
TOOLS_LIST := tools/cuda-binutils.txt

.PHONY: run test build configure deps clean test-sanitizers fuzz

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@test -f /usr/local/cuda/include/nvrtc.h || { echo "error: the CUDA toolkit (NVRTC) is expected at /usr/local/cuda"; exit 1; }
	@cmp -s $(TOOLS_LIST) $(TOOLS_DIR)/$(notdir $(TOOLS_LIST)) || { \
	  echo "installing cuobjdump and nvdisasm from PyPI into $(TOOLS_DIR)"; \
	  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps \
	    --only-binary :all: --require-hashes --upgrade --target $(TOOLS_DIR) -r $(TOOLS_LIST) && \
	  cp $(TOOLS_LIST) $(TOOLS_DIR)/; }

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHRTC_TOOLS_DIR=$(TOOLS_DIR)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target flashrtc_cli
	@$(FLASHRTC) info
	@if $(FLASHRTC) info --has-gpu >/dev/null 2>&1; then \
	  $(FLASHRTC) run --batch 2 --heads 16 --seqlen 4096 --head-dim 128 --dtype bf16 --mask causal --check; \
	else \
	  $(FLASHRTC) compile --all --arch sm_90a && \
	  echo "No GPU here: the default kernels above were compiled for sm_90a (H100/H200) and cached; launching them needs a GPU."; \
	fi

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The cpu suites built with AddressSanitizer and UndefinedBehaviorSanitizer (a separate build dir): any report
# fails its test. Not run there: the Python binding (a sanitized library in an uninstrumented python), the
# install and build-tree tests (outside projects built without sanitizers), and the two suites that compile
# every family's default kernels (default_margin, backward_compile): their time is NVRTC's, uninstrumented,
# and the host code they drive runs sanitized in runtime_compile and the cache suites. Skipped suites are not built.
SANITIZE_DIR ?= build-asan
SANITIZE_SKIP ?= python_binding|python_kvcache|python_varlen|install_example|build_tree_example|test_default_margin|test_backward_compile
# Leak detection needs no suppressions: NVRTC's and the driver's allocations are not reported.
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1 \
                 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

test-sanitizers: deps
	cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" \
	  -DFLASHRTC_SANITIZE=address,undefined -DFLASHRTC_TOOLS_DIR=$(TOOLS_DIR)
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target flashrtc_cli \
	  $$(ninja -C $(SANITIZE_DIR) -t targets all | sed -n 's/^\(cpu_test_[a-z0-9_]*\): phony$$/\1/p' | \
	     grep -vE '$(SANITIZE_SKIP)')
	cd $(SANITIZE_DIR) && $(SANITIZER_ENV) ctest -L cpu -E '$(SANITIZE_SKIP)' --output-on-failure -j $(JOBS)

# Each libFuzzer target under tests/fuzz for FUZZ_SECONDS, from its seed corpus (what it finds is kept in
# FUZZ_DIR/corpus); a crash, hang, leak or sanitizer report fails, its input saved as FUZZ_DIR/<target>-*.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZERS := fuzz_meta_json fuzz_tuning_db fuzz_tile_override

fuzz: deps
	CXX=clang++ cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHRTC_BUILD_HOST=OFF \
	  -DFLASHRTC_BUILD_FUZZERS=ON -DFLASHRTC_SANITIZE=fuzzer-no-link,address,undefined
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target $(FUZZERS)
	@for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$f && echo "fuzzing $$f for $(FUZZ_SECONDS) s" && \
	  $(SANITIZER_ENV) $(FUZZ_DIR)/tests/fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/$$f- $(FUZZ_DIR)/corpus/$$f tests/fuzz/corpus/$$f \
	    || exit 1; \
	done

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) $(FUZZ_DIR)
