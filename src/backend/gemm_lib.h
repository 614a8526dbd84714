/* The GEMM library (issue 29): the strided GEMMs of generated C run by code compiled with cannl
 * itself, once per instruction set, instead of a driver generated and compiled per GEMM (the
 * drivers were two thirds of a training step's compile time: 0.5-0.9 G instructions of gcc each).
 *
 * A GEMM-class nest (cn_ll_gemm) qualifies when it computes in single or double precision (as
 * stored), has no triangle, and each of its groups walks each access it indexes as one range (a
 * stride per group and access: group_linear of cgen_gemm.c). Its generated C then describes the
 * GEMM as CN_GEMM_ARGS integers (the enum below, in order) and calls the library through the
 * object's pointer <routine>_gemm_lib, which the C backend sets to cn_gemm_lib_run when it loads
 * the object; the same text compiled with -DCN_STANDALONE (an exported model) holds the generated
 * driver instead.
 *
 * Invariants: the library computes what the generated driver computes, bit for bit: each cell of
 * c gets the nest's updates in the order of its reduction steps, each one fused multiply-add
 * (CN_GEMM_FMA) or a product and a sum rounded apart, starting from +0 instead of c's value with
 * CN_GEMM_FRESH (the plan's c_zero); tiles, blocks, packing, threads and instruction set only
 * move work across cells. The instruction set is chosen once per process from the CPU (AVX-512,
 * AVX2 with FMA, or the compilers' generic vectors); the register tile is the plan's when the
 * library has it, else the instruction set's default (CN_GEMM_TILE_DEFAULT). */
#ifndef CN_GEMM_LIB_H
#define CN_GEMM_LIB_H

#include "backend/backend.h"

/* The integers describing one GEMM, in this order. Strides are in cells; a group without loops
 * has one point and stride 0. tile_mr, tile_nv: the plan's register tile (0: the default);
 * mc, kc, nc: the plan's cache blocks. */
enum {
  CN_GEMM_ARG_BATCH,
  CN_GEMM_ARG_M,
  CN_GEMM_ARG_N,
  CN_GEMM_ARG_K,
  CN_GEMM_ARG_C_BATCH,
  CN_GEMM_ARG_C_M,
  CN_GEMM_ARG_C_N,
  CN_GEMM_ARG_X_BATCH,
  CN_GEMM_ARG_X_M,
  CN_GEMM_ARG_X_K,
  CN_GEMM_ARG_Y_BATCH,
  CN_GEMM_ARG_Y_K,
  CN_GEMM_ARG_Y_N,
  CN_GEMM_ARG_TILE_MR,
  CN_GEMM_ARG_TILE_NV,
  CN_GEMM_ARG_MC,
  CN_GEMM_ARG_KC,
  CN_GEMM_ARG_NC,
  CN_GEMM_ARG_FLAGS,
  CN_GEMM_ARGS
};

/* CN_GEMM_ARG_FLAGS: double precision (else single), fused multiply-adds, c not read (the first
 * step starts from +0), blocks of cells split across the pool's threads, no scratch memory (a
 * test's -DCN_GEMM_NO_MEMORY: every cell one by one, as without memory). */
enum {
  CN_GEMM_DOUBLE = 1,
  CN_GEMM_FMA = 2,
  CN_GEMM_FRESH = 4,
  CN_GEMM_PARALLEL = 8,
  CN_GEMM_NO_SCRATCH = 16
};

/* Runs one GEMM (c, x, y: the cells at flat index 0 of every group) with the pool of par (NULL:
 * on the caller's thread). */
typedef void cn_gemm_lib_fn(const int64_t *args, void *c, const void *x, const void *y,
                            const cn_parallel *par);
cn_gemm_lib_fn cn_gemm_lib_run;

/* The instruction set the library runs on in this process ("avx512", "avx2", "generic"). */
const char *cn_gemm_lib_isa(void);

/* Test hook (process-wide): how many GEMMs the library has run in this process. */
int64_t cn_gemm_lib_runs(void);

/* One instruction set's kernels (src/backend/isa/gemm_isa.c, compiled once per set). */
typedef struct {
  const char *name;
  void (*run_f32)(const int64_t *args, float *c, const float *x, const float *y,
                  const cn_parallel *par);
  void (*run_f64)(const int64_t *args, double *c, const double *x, const double *y,
                  const cn_parallel *par);
} cn_gemm_isa;

extern const cn_gemm_isa cn_gemm_isa_generic;
#if defined(__x86_64__)
extern const cn_gemm_isa cn_gemm_isa_avx2, cn_gemm_isa_avx512;
#endif

#endif
