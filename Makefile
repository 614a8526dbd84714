# cannl: the two set-up commands of a fresh Debian machine (`make demo`, `make test`) and the
# usual targets. CMake does the building; this file installs what is missing, picks the build
# directories and runs every check of the test suite in sequence, failing on the first failure.
#
#   make deps      install the missing Debian packages (apt-get; sudo only when not root)
#   make build     configure build/ (RelWithDebInfo) and build everything
#   make test      gcc build + ctest; ASan+UBSan build (build-asan/) + ctest; clang build
#                  (build-clang/) + ctest; clang-format check; valgrind runs of the routine and
#                  Tile tests
#   make demo      build and run the half-moons training demo (examples/moons.c; writes
#                  build/moons.svg)
#   make bench     install python3-torch when missing, build, run the benchmarks (bench/)
#   make install   install under PREFIX (default /usr/local)
#   make format    clang-format every C file in place
#   make clean     remove the build directories

SHELL := /bin/bash
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
DEB_PACKAGES := cmake make gcc clang libc6-dev valgrind clang-format
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
C_FILES = $(shell find include src tools tests examples bench -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort)

.PHONY: deps build test test-gcc test-asan test-clang format-check test-valgrind demo bench \
        install format clean

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build -j$(JOBS)

test: deps
	$(MAKE) --no-print-directory test-gcc
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-clang
	$(MAKE) --no-print-directory format-check
	$(MAKE) --no-print-directory test-valgrind
	@echo "make test: all checks passed"

test-gcc: build
	cd build && ctest --output-on-failure -j$(JOBS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCANNL_SANITIZE=ON
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS)

# Generated C is compiled by clang too (CC), so both compilers see it under -Werror builds.
test-clang: deps
	cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang
	cmake --build build-clang -j$(JOBS)
	cd build-clang && CC=clang ctest --output-on-failure -j$(JOBS)

format-check: deps
	clang-format --dry-run -Werror $(C_FILES)

# Generated code is built without -march=native here: valgrind cannot execute AVX-512.
VALGRIND_TESTS := test_routine test_tile test_tile_fn test_tile_grad test_notation_tile
test-valgrind: build
	for t in $(VALGRIND_TESTS); do \
	  echo "valgrind $$t"; \
	  CANNL_CACHE_DIR=$(CURDIR)/build/cache CANNL_CFLAGS="-O2 -shared -fPIC -std=c11" \
	    valgrind --quiet --error-exitcode=1 --leak-check=full build/$$t > /dev/null || exit 1; \
	done

demo: build
	build/example_moons build/moons.svg

# The PyTorch baseline of bench_moons comes from Debian's python3-torch (large, so only here,
# never a dependency of `make test`).
bench: deps
	@dpkg -s python3-torch 2>/dev/null | grep -q '^Status: install ok installed' || { \
	  echo "installing: python3-torch"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	    python3-torch; }
	$(MAKE) --no-print-directory build
	build/bench_bench_matmul
	build/bench_bench_moons
	build/bench_bench_scale

install: build
	cmake --install build --prefix $(PREFIX)

format:
	clang-format -i $(C_FILES)

clean:
	rm -rf build build-asan build-clang
