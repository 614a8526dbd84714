/* The CUDA backend (cuda.c) and its dialect (cgen_cuda.c): a procedure's kernel program
 * (kernels.h) in CUDA C++, compiled to PTX by NVRTC and, where a GPU is present, loaded and
 * launched through the driver API (cuda_rt.h: both opened with dlopen). Internal to src/backend
 * and its tests. */
#ifndef CN_BACKEND_CUDA_H
#define CN_BACKEND_CUDA_H

#include "backend/cuda_rt.h"
#include "backend/kernels.h"

/* The CUDA C++ dialect of the emitter (cgen_cuda.c). */
extern const cn_cgen_dialect cn_cgen_cuda;

/* The kernel limits and tile the CUDA backend compiles for: the GPU's threads and shared memory a
 * block (gpu NULL: what every GPU NVRTC compiles for offers, 1024 threads and 48 KiB), the tile of
 * the option "device_tile", else CUDA's own (16 x 16 threads of 8 x 8 cells, 16 steps a slice);
 * CN_ERR_INVALID for a bad $CANNL_DEVICE_TILE. */
cn_status cn_cuda_kernel_limits(cn_ctx *ctx, const cn_cuda_gpu *gpu, cn_kernel_limits *limits);

/* Of a state cn_backend_cuda.compile made (tests): the kernel program, its PTX, and NVRTC's log of
 * the compilation ("" when it said nothing or when the PTX came from the cache). */
const cn_kernel_program *cn_cuda_program(const void *compiled);
const char *cn_cuda_ptx(const void *compiled);
const char *cn_cuda_log(const void *compiled);

/* The PTX of CUDA C++ `source` (routine `name`) for a virtual architecture (90: compute_90), from
 * the cache or NVRTC; *ptx and *log (NVRTC's, "" from the cache) malloc'd. A source NVRTC rejects
 * gives CN_ERR_COMPILE "NVRTC failed on generated file <path of the source, written> (<error>):
 * <log>". */
cn_status cn_cuda_ptx_of(cn_ctx *ctx, const char *name, const char *source, int arch, char **ptx,
                         char **log);

#endif
