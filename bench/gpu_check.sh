#!/bin/sh
# The CUDA check for a machine with an NVIDIA GPU (the lead runs it where one is lent; it takes a
# few minutes; the steps' limits add up to about 15 with the build): builds cannl in build-gpu/,
# lists the devices, runs test_cuda (every kernel to PTX, then the e2e cases, every op and the
# moons steps on the GPU against generated C) and test_device_gemm (the tiled GEMM kernels on the
# GPU against generated C, bit for bit), times matmul 1024/4096, the MLP step and the conv step
# on generated C and on cuda (bench_device: median ms and GFLOP/s), then matmul 4096 under five
# other tiles (CANNL_DEVICE_TILE), and a Fashion-MNIST MLP epoch on C and on CUDA. Each step has
# a time limit; the script goes on after a failed step and exits non-zero if any failed.
# Usage: bench/gpu_check.sh [BUILD_DIR]
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build-gpu}
case $build in /*) echo "gpu_check.sh: give the build directory relative to the repository" >&2; exit 2 ;; esac
jobs=$(nproc 2>/dev/null || echo 4)
failed=0
step() {
  limit=$1
  shift
  echo "== $* (limit ${limit}s)"
  timeout "$limit" "$@" || { echo "== FAILED ($?): $*"; failed=1; }
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
  echo "(no nvidia-smi)"
# The build needs what any build of cannl needs: cmake, a C compiler, zlib's and the OpenCL
# headers. A GPU machine may lack the last two (nothing can be installed there): the CUDA toolkit
# has the OpenCL headers, and zlib's (zlib.h, zconf.h) can be carried in build-gpu-deps/include
# (ignored by git as /build*/) beside the machine's own libz.so.1.
has_header() { echo "#include <$1>" | cc -E -x c - >/dev/null 2>&1; }
cflags=""
if ! has_header CL/cl.h && [ -f /usr/local/cuda/include/CL/cl.h ]; then
  cflags="-I/usr/local/cuda/include"
fi
set -- -DCMAKE_BUILD_TYPE=Release ${cflags:+"-DCMAKE_C_FLAGS=$cflags"}
if ! has_header zlib.h; then
  libz=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 /usr/lib64/libz.so.1 \
    2>/dev/null | head -n 1)
  if [ -f build-gpu-deps/include/zlib.h ] && [ -n "$libz" ]; then
    set -- "$@" "-DZLIB_INCLUDE_DIR=$PWD/build-gpu-deps/include" "-DZLIB_LIBRARY=$libz"
  else
    echo "== no zlib.h here: carry /usr/include/zlib.h and zconf.h in build-gpu-deps/include"
  fi
fi
step 60 cmake -S . -B "$build" "$@"
step 180 cmake --build "$build" -j"$jobs" --target cannl test_cuda test_device_gemm bench_bench_device \
  example_fashion_mnist
step 20 "$build/cannl" devices
CANNL_CACHE_DIR="$PWD/$build/cache"
export CANNL_CACHE_DIR
step 100 "$build/test_cuda"
step 60 "$build/test_device_gemm"
step 110 "$build/bench_bench_device" --budget 1 c cuda
# The tiled GEMM kernel's tile on this GPU (option device_tile; CUDA's own is 16x8x16): matmul
# 4096 with the tile before it (16x4x16) and its neighbours, to confirm or replace the default.
for tile in 16x4x16 16x8x8 16x8x32 8x8x16 32x4x16; do
  export CANNL_DEVICE_TILE=$tile
  step 30 "$build/bench_bench_device" --budget 1 --only "matmul 4096" cuda
done
unset CANNL_DEVICE_TILE
# Issue 32's other target: a Fashion-MNIST MLP epoch on CUDA faster than generated C on two
# cores. The epoch's "100% (600/600) ... samples/s" line counts from the first step. The data:
# $FASHION_DATA (default Debian's dataset-fashion-mnist path); a GPU machine without it needs a
# copy carried along (30 MB).
data=${FASHION_DATA:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  export CANNL_THREADS=2
  for backend in c cuda; do
    step 120 "$build/example_fashion_mnist" --epochs 1 --data "$data" --backend $backend \
      --out "$build/fashion-$backend"
  done
  unset CANNL_THREADS
else
  echo "== the Fashion-MNIST epoch skipped: no data in $data (set FASHION_DATA)"
fi
exit $failed
