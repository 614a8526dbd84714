# cannl: the two set-up commands of a fresh Debian machine (`make demo`, `make test`) and the
# usual targets. CMake does the building; this file installs what is missing, picks the build
# directories and runs every check of the test suite in sequence, failing on the first failure.
#
#   make deps      install the missing Debian packages (apt-get; sudo only when not root)
#   make build     configure build/ (RelWithDebInfo) and build everything
#   make test-quick  build/ and the tests labelled quick (ctest -L quick: all but the slowest)
#   make test      gcc build + ctest; the same suite unscheduled (CANNL_SCHEDULE=none); ASan+UBSan
#                  build (build-asan/) + ctest; clang build (build-clang/) + ctest (these three
#                  without the tests labelled device or mpi: test_opencl and test_mpi run once);
#                  ThreadSanitizer build (build-tsan/) of the thread-pool tests; clang-format
#                  check; valgrind runs of the routine, cache, parallel and Tile tests; make fuzz;
#                  a Release build (build-release/, -O3 warns more) of everything, compiled only
#   make fuzz      build the libFuzzer targets (fuzz/, build-fuzz/) and run each for
#                  FUZZ_SECONDS (default 60) from a copy of its seed corpus; fails on any report
#   make demo      build and run the half-moons training demo (examples/moons.c; writes
#                  build/moons.svg)
#   make fashion   build and train the Fashion-MNIST MLP for 5 epochs (examples/fashion_mnist.c;
#                  writes build/fashion_mlp.svg and the checkpoint build/fashion_mlp.safetensors)
#   make bench     install python3-torch, python3-numpy and libopenblas0-pthread when missing,
#                  build, run the benchmarks (bench/; bench_perf's JSON lines in build/bench_perf.json)
#   make install   install under PREFIX (default /usr/local)
#   make format    clang-format every C file in place
#   make clean     remove the build directories

SHELL := /bin/bash
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
# libFuzzer's runtime is a separate package of the installed clang's version, libclang-rt-N-dev
# (only recommended by clang); on a fresh machine clang is not installed yet when this file is
# read, so `deps` names the package again once clang is there.
CLANG_MAJOR := $(shell clang --version 2>/dev/null | sed -n 's/^.*clang version \([0-9][0-9]*\).*$$/\1/p' | head -n 1)
# zlib1g-dev: gzip IDX files and checkpoint checksums (src/data); python3-numpy: the tests' oracle
# of .npy and safetensors files; dataset-fashion-mnist: the data of examples/fashion_mnist;
# fortunes and wamerican: the text corpora of sequence models (/usr/share/games/fortunes, the
# word list /usr/share/dict/words) that test_text reads; ocl-icd-opencl-dev (the ICD loader
# libOpenCL.so.1, which the OpenCL backend opens at run time), opencl-headers (its build) and
# pocl-opencl-icd (PoCL, the CPU device test_opencl runs on); openmpi-bin and libopenmpi-dev: Open
# MPI (mpirun, mpi.h), the optional MPI layer (src/dist/mpi.c) and test_mpi.
DEB_PACKAGES := cmake make gcc clang libc6-dev valgrind clang-format zlib1g-dev python3 \
                python3-numpy dataset-fashion-mnist fortunes wamerican \
                ocl-icd-opencl-dev opencl-headers pocl-opencl-icd openmpi-bin libopenmpi-dev \
                $(if $(CLANG_MAJOR),libclang-rt-$(CLANG_MAJOR)-dev)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
C_FILES = $(shell find include src tools tests examples bench fuzz demo -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort)

.PHONY: deps build test test-quick test-release test-gcc test-unscheduled test-asan test-clang test-tsan format-check test-valgrind fuzz demo fashion bench \
        install format clean

# Two passes: DEB_PACKAGES, then (on a fresh machine, where clang came with the first pass)
# the libFuzzer runtime of the clang now installed.
deps:
	@install_missing() { \
	  missing=""; \
	  for p in "$$@"; do \
	    dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	  done; \
	  [ -z "$$missing" ] && return 0; \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	}; \
	install_missing $(DEB_PACKAGES) && \
	major=$$(clang --version | sed -n 's/^.*clang version \([0-9][0-9]*\).*$$/\1/p' | head -n 1) && \
	install_missing libclang-rt-$$major-dev

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build -j$(JOBS)

test: deps
	$(MAKE) --no-print-directory test-gcc
	$(MAKE) --no-print-directory test-unscheduled
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-clang
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory format-check
	$(MAKE) --no-print-directory test-valgrind
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory test-release
	@echo "make test: all checks passed"

test-quick: build
	cd build && ctest --output-on-failure -j$(JOBS) -L quick

# Every build type a user may pick compiles with -Werror; Release's -O3 finds warnings (format
# truncation, array bounds) the other types do not. Built, not run: the suite ran above.
test-release: deps
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release
	cmake --build build-release -j$(JOBS)

test-gcc: build
	cd build && ctest --output-on-failure -j$(JOBS)

# Every pass of the scheduling stage can be switched off; the whole suite must pass without them
# too (a scheduled routine computes the same bits, so a failure here or above bisects a pass).
test-unscheduled: build
	cd build && CANNL_SCHEDULE=none ctest --output-on-failure -j$(JOBS) -LE 'device|mpi'

# The thread pool (src/runtime/pool.c) and the parallel routines that use it, under
# ThreadSanitizer: 10 000 runs of a parallel routine on 3 threads among them (test_parallel).
TSAN_TESTS := test_parallel
test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCANNL_TSAN=ON
	cmake --build build-tsan -j$(JOBS) --target $(TSAN_TESTS)
	for t in $(TSAN_TESTS); do \
	  echo "tsan $$t"; \
	  CANNL_CACHE_DIR=$(CURDIR)/build-tsan/cache TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
	    build-tsan/$$t > /dev/null || exit 1; \
	done

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCANNL_SANITIZE=ON
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS) -LE 'device|mpi'

# Generated C is compiled by clang too (CC), so both compilers see it under -Werror builds.
test-clang: deps
	cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang
	cmake --build build-clang -j$(JOBS)
	cd build-clang && CC=clang ctest --output-on-failure -j$(JOBS) -LE 'device|mpi'

format-check: deps
	clang-format --dry-run -Werror $(C_FILES)

# Generated code is built without -march=native here: valgrind cannot execute AVX-512.
VALGRIND_TESTS := test_routine test_cache test_parallel test_tile test_tile_fn test_tile_grad \
                  test_notation_tile test_resident test_devices
test-valgrind: build
	for t in $(VALGRIND_TESTS); do \
	  echo "valgrind $$t"; \
	  CANNL_CACHE_DIR=$(CURDIR)/build/cache CANNL_CFLAGS="-O2 -shared -fPIC -std=c11" \
	    valgrind --quiet --error-exitcode=1 --leak-check=full build/$$t > /dev/null || exit 1; \
	done
	@echo "valgrind test_gemm_lib (60 of its GEMMs up to 200k multiply-adds: the GEMM library)"
	valgrind --quiet --error-exitcode=1 --leak-check=full build/test_gemm_lib 60 200000 > /dev/null

# libFuzzer (clang): each target runs FUZZ_SECONDS on a scratch copy of its seed corpus (what it
# adds stays in build-fuzz/), stopping at the first report (crash, sanitizer error, timeout, out
# of memory); the input that caused it is written to build-fuzz/artifacts/. Reproduce with
# build-fuzz/fuzz_NAME FILE.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := einsum script tile data_files safetensors export
fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCANNL_FUZZ=ON
	cmake --build build-fuzz -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	mkdir -p build-fuzz/artifacts
	for t in $(FUZZ_TARGETS); do \
	  rm -rf build-fuzz/corpus/$$t && mkdir -p build-fuzz/corpus/$$t && \
	  cp fuzz/corpus/$$t/* build-fuzz/corpus/$$t/ && \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s" && \
	  build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=30 -print_final_stats=1 \
	    -artifact_prefix=build-fuzz/artifacts/$$t- build-fuzz/corpus/$$t \
	    > build-fuzz/fuzz_$$t.log 2>&1 || { \
	      grep -A3 -E "^fuzz_$$t: |runtime error|^==[0-9]+==ERROR|^SUMMARY|Test unit written" \
	        build-fuzz/fuzz_$$t.log; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|new_units_added)' build-fuzz/fuzz_$$t.log; \
	done

demo: build
	build/example_moons build/moons.svg

fashion: build
	cd build && ./example_fashion_mnist --svg fashion_mlp.svg --checkpoint fashion_mlp.safetensors

# The PyTorch and numpy baselines of bench_moons and bench_perf come from Debian's python3-torch
# (large, so only here, never a dependency of `make test`) and python3-numpy, with OpenBLAS: both
# call libblas.so.3, which without libopenblas0 is the reference BLAS (about 30x slower at a
# 1024^2 matmul). bench_perf prints the table of issue 16 and writes its JSON lines to
# build/bench_perf.json.
BENCH_PY_PACKAGES := python3-torch python3-numpy libopenblas0-pthread
bench: deps
	@missing=""; \
	for p in $(BENCH_PY_PACKAGES); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	[ -z "$$missing" ] || { \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	    $$missing; }
	$(MAKE) --no-print-directory build
	build/bench_bench_matmul
	build/bench_bench_moons
	build/bench_bench_scale
	build/bench_bench_perf --json build/bench_perf.json
	build/bench_bench_gemm --json build/bench_gemm.json
	build/bench_bench_fashion --json build/bench_fashion.json
	build/bench_bench_gpt --json build/bench_gpt.json
	build/bench_bench_startup --json build/bench_startup.json
	build/bench_bench_dp --json build/bench_dp.json

install: build
	cmake --install build --prefix $(PREFIX)

format:
	clang-format -i $(C_FILES)

clean:
	rm -rf build build-asan build-clang build-tsan build-fuzz build-release
