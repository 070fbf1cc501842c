# The two commands of the README: `make run` and `make test`. Each installs what is missing, configures
# and builds in Release, then runs the main job or the test suite.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
APT_PACKAGES := cmake ninja-build g++ pkg-config libspdlog-dev libfmt-dev doctest-dev libeigen3-dev \
                libcli11-dev nlohmann-json3-dev libxxhash-dev python3 gnuplot-nox
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FLASHRTC := $(BUILD_DIR)/host/flashrtc/flashrtc

.PHONY: run test build deps clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@test -f /usr/local/cuda/include/nvrtc.h || { echo "error: the CUDA toolkit (NVRTC) is expected at /usr/local/cuda"; exit 1; }

build: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
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
