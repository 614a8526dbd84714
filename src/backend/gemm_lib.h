/* The GEMM library (issue 29): the strided GEMMs of generated C run by code compiled with cannl
 * itself, once per instruction set, instead of a driver generated and compiled per GEMM (the
 * drivers were two thirds of a training step's compile time: 0.5-0.9 G instructions of gcc each).
 *
 * A GEMM-class nest (cn_ll_gemm) qualifies when it computes in single or double precision (as
 * stored): strided products, convolutions and attention's triangles alike (a group whose loops do
 * not walk an access as one range takes its offsets from tables per block, as the generated
 * driver does). Its generated C then describes the GEMM as integers (the enums below, in order:
 * sizes, plan, flags and its loops) and calls the library through the
 * object's pointer <routine>_gemm_lib, which the C backend sets to cn_gemm_lib_run when it loads
 * the object; the same text compiled with -DCN_STANDALONE (an exported model) holds the generated
 * driver instead.
 *
 * Invariants: the library computes what the generated driver computes, bit for bit: each cell of
 * c gets the nest's updates in the order of its reduction steps, each one fused multiply-add
 * (CN_GEMM_FMA) or a product and a sum rounded apart, starting from +0 instead of c's value with
 * CN_GEMM_FRESH (the plan's c_zero), only its own steps and cells under a triangle; tiles, blocks,
 * packing, threads and instruction set only move work across cells. The instruction set is chosen
 * once per process from the CPU (AVX-512, AVX2 with FMA, or the compilers' generic vectors); the
 * register tile is the plan's when the library has it, else the instruction set's default
 * (CN_GEMM_TILE_DEFAULT). */
#ifndef CN_GEMM_LIB_H
#define CN_GEMM_LIB_H

#include "backend/backend.h"

/* The integers describing one GEMM: CN_GEMM_ARGS of these, in this order, then CN_GEMM_ARG_LOOPS
 * records of CN_GEMM_LOOP integers, one per loop of the nest, outermost first. Batch, m, n, k: the
 * points of each group (the product of its loops' extents); tile_mr, tile_nv: the plan's register
 * tile (0: the default); mc, kc, nc: the plan's cache blocks; tri, tri_offset: the plan's
 * triangle (cn_gemm_tri, loops.h: the cells of row m are the columns n < m + offset, or its steps
 * k < m + offset, or k > m - offset). A group's points are its loops
 * flattened row-major in nest order; a loop's record: its group (cn_gemm_role: 0 rows, 1 columns,
 * 2 steps, 3 batch), extent and the cells one step of it moves in c, x and y. */
enum {
  CN_GEMM_ARG_BATCH,
  CN_GEMM_ARG_M,
  CN_GEMM_ARG_N,
  CN_GEMM_ARG_K,
  CN_GEMM_ARG_TILE_MR,
  CN_GEMM_ARG_TILE_NV,
  CN_GEMM_ARG_MC,
  CN_GEMM_ARG_KC,
  CN_GEMM_ARG_NC,
  CN_GEMM_ARG_FLAGS,
  CN_GEMM_ARG_TRI,
  CN_GEMM_ARG_TRI_OFFSET,
  CN_GEMM_ARG_LOOPS,
  CN_GEMM_ARGS
};
enum {
  CN_GEMM_LOOP_ROLE,
  CN_GEMM_LOOP_EXTENT,
  CN_GEMM_LOOP_C,
  CN_GEMM_LOOP_X,
  CN_GEMM_LOOP_Y,
  CN_GEMM_LOOP
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
