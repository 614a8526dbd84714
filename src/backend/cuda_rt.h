/* The CUDA runtime pieces the CUDA backend (cuda.c) uses, opened with dlopen so that building
 * cannl needs no CUDA toolkit: NVRTC (CUDA C++ to PTX) and the driver API (libcuda.so.1: devices,
 * memory, modules, launches). The declarations are cannl's own: the few types and constants used,
 * spelled as the driver's ABI has them (CUresult and CUdevice are int, CUdeviceptr a 64-bit
 * unsigned integer, contexts, modules and functions opaque pointers).
 *
 * Search order: NVRTC is $CANNL_NVRTC when set (a path or a soname: the only one tried), else
 * libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so by the dynamic loader's default search, else the
 * same names in /usr/local/cuda/lib64; the driver is libcuda.so.1 (installed with the GPU driver).
 * Each library is opened once per process (pthread_once); a library that is missing or lacks a
 * function is remembered with the reason, which every later request reports ("no NVRTC: ...",
 * "no CUDA driver (libcuda.so.1): ..."): never a crash at first use. Internal to src/backend. */
#ifndef CN_BACKEND_CUDA_RT_H
#define CN_BACKEND_CUDA_RT_H

#include "core/core.h"

typedef unsigned long long cn_cu_ptr; /* CUdeviceptr */

typedef struct {
  char library[256]; /* the file or soname that was opened */
  int major, minor;  /* nvrtcVersion */
  int (*create)(void **prog, const char *src, const char *name, int n_headers,
                const char *const *headers, const char *const *include_names);
  int (*destroy)(void **prog);
  int (*compile)(void *prog, int n_options, const char *const *options);
  int (*log_size)(void *prog, size_t *size);
  int (*log)(void *prog, char *log);
  int (*ptx_size)(void *prog, size_t *size);
  int (*ptx)(void *prog, char *ptx);
  const char *(*error_string)(int result);
  /* The architectures this NVRTC compiles for (nvrtcGetSupportedArchs: 75 ... 121 for NVRTC 13)
   * and the newest; an NVRTC without that function has n_archs 0 and newest 90 (52 to 90 taken
   * as known). */
  int newest_arch;
  int n_archs;
  int archs[64];
} cn_nvrtc;

typedef struct {
  int driver_version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
  int device;         /* CUdevice */
  char name[256];
  int major, minor; /* compute capability */
  int multiprocessors;
  int clock_khz; /* the SMs' clock */
  size_t memory;
  int max_threads;  /* a block's */
  int shared_bytes; /* the static shared memory of a block */
  void *context;    /* the device's primary context, retained for the process's lifetime */
  int (*ctx_set_current)(void *ctx);
  int (*ctx_synchronize)(void);
  int (*mem_alloc)(cn_cu_ptr *ptr, size_t bytes);
  int (*mem_free)(cn_cu_ptr ptr);
  int (*htod)(cn_cu_ptr dst, const void *src, size_t bytes);
  int (*dtoh)(void *dst, cn_cu_ptr src, size_t bytes);
  /* cuMemsetD8Async on the default stream: ordered with the kernels, the host not waiting */
  int (*memset_async)(cn_cu_ptr dst, unsigned char value, size_t bytes, void *stream);
  int (*module_load_data)(void **module, const void *image);
  int (*module_unload)(void *module);
  int (*module_get_function)(void **function, void *module, const char *name);
  int (*launch)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                unsigned block_y, unsigned block_z, unsigned shared_bytes, void *stream,
                void **params, void **extra);
  int (*error_string)(int result, const char **text);
} cn_cuda_gpu;

/* NVRTC, loaded on first use; CN_ERR_UNSUPPORTED "no NVRTC: ..." when it cannot be. */
cn_status cn_nvrtc_get(cn_ctx *ctx, const cn_nvrtc **out);
/* The GPU: the driver loaded and initialized, device $CANNL_CUDA_DEVICE (an ordinal, default 0)
 * opened with its primary context, on first use; CN_ERR_UNSUPPORTED "no CUDA driver
 * (libcuda.so.1): ...", "no CUDA device: ..." otherwise (the same reason every time). */
cn_status cn_cuda_gpu_get(cn_ctx *ctx, const cn_cuda_gpu **out);
/* The GPU when cn_cuda_gpu_get would give it, else NULL (no message). */
const cn_cuda_gpu *cn_cuda_gpu_find(void);
/* The driver's text of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY: out of memory"), in buf. */
const char *cn_cuda_error(const cn_cuda_gpu *gpu, int result, char *buf, size_t size);

/* The virtual architecture ("compute_XY", as XY) PTX is compiled for: with a GPU, the newest
 * NVRTC knows that is at most the GPU's compute capability (PTX of an older architecture runs on
 * newer GPUs), 0 when NVRTC knows none (a GPU older than NVRTC supports); without one (gpu NULL),
 * 90 when NVRTC knows it, else the newest it knows below 90, else its newest. */
int cn_nvrtc_arch(const cn_nvrtc *nvrtc, const cn_cuda_gpu *gpu);
/* The options of a compilation for arch, as they go into the cache key: "--fmad=false
 * -default-device --gpu-architecture=compute_90" (no contraction into fma: + - * / give the C
 * backend's bits; functions without an execution space are device functions: builtins.h's). */
void cn_nvrtc_options(int arch, char *text, size_t size);

/* Compiles CUDA C++ `source` (named `name` in the log) to PTX for arch; on success *ptx
 * (malloc'd, NUL-terminated, *ptx_len bytes without the NUL) and *log (malloc'd, the compiler's
 * log, "" when it said nothing). When NVRTC rejects the source: CN_ERR_COMPILE with the message
 * NVRTC's error ("NVRTC_ERROR_COMPILATION") and *log its log (the caller composes the message);
 * *ptx and *log are NULL after any other failure. */
cn_status cn_nvrtc_compile(cn_ctx *ctx, const cn_nvrtc *nvrtc, int arch, const char *source,
                           const char *name, char **ptx, size_t *ptx_len, char **log);

#endif
