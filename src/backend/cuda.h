/* The CUDA backend (cuda.c) and its dialect (cgen_cuda.c): a procedure's kernel program
 * (kernels.h) in CUDA C++, compiled to PTX by NVRTC and, where a GPU is present, loaded and
 * launched through the driver API (cuda_rt.h: both opened with dlopen). Internal to src/backend
 * and its tests. */
#ifndef CN_BACKEND_CUDA_H
#define CN_BACKEND_CUDA_H

#include "backend/kernels.h"

/* The CUDA C++ dialect of the emitter (cgen_cuda.c). */
extern const cn_cgen_dialect cn_cgen_cuda;

/* Of a state cn_backend_cuda.compile made (tests): the kernel program, its PTX, and NVRTC's log of
 * the compilation ("" when it said nothing or when the PTX came from the cache). */
const cn_kernel_program *cn_cuda_program(const void *compiled);
const char *cn_cuda_ptx(const void *compiled);
const char *cn_cuda_log(const void *compiled);

#endif
