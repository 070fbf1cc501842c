# The two commands of the README: `make run` and `make test`. Each installs what is missing, configures
# in Release, then builds what it needs (`run`: the library and the `flashrtc` command; `test`: everything)
# and runs the main job or the test suite. python3-venv: the wheel test (tests/packaging/test_wheel.sh).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
APT_PACKAGES := cmake ninja-build g++ pkg-config libspdlog-dev libfmt-dev doctest-dev libeigen3-dev \
                libcli11-dev nlohmann-json3-dev libxxhash-dev python3 python3-venv gnuplot-nox
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FLASHRTC := $(BUILD_DIR)/host/flashrtc/flashrtc

.PHONY: run test build configure deps clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@test -f /usr/local/cuda/include/nvrtc.h || { echo "error: the CUDA toolkit (NVRTC) is expected at /usr/local/cuda"; exit 1; }

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

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

clean:
	rm -rf $(BUILD_DIR)
