/* The GEMM library's kernels for one instruction set (backend/gemm_lib.h), compiled once per set
 * by CMakeLists.txt, with CN_GEMM_ISA 2 (AVX-512: -mavx512f -mfma), 1 (AVX2: -mavx2 -mfma) or 0
 * (the compiler's generic vectors of 16 bytes: SSE2 on x86-64, NEON on aarch64), always at -O3
 * and with -ffp-contract=off: in exact mode a product and a sum stay two roundings in every build
 * type and with either compiler (clang contracts within a statement by default). This file sets
 * the instruction set's vector width, register count and fused multiply-add, then instantiates
 * gemm_prec.h for single and double precision; gemm_lib.c picks one set per process.
 *
 * Invariants: the vectors are the compilers' vector extensions and the builtins behind the
 * intrinsics (as in generated C: cgen_gemm.c), so the same source builds with gcc and clang; no
 * state outside a call but what the caller's pool lends (cn_parallel.scratch). */
#include "backend/gemm_lib.h"

#include <stdlib.h>
#include <string.h>

#if CN_GEMM_ISA == 2
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "the AVX-512 kernels are compiled with -mavx512f -mfma"
#endif
#define VBYTES    64
#define VREGS     32
#define ISA_NAME  "avx512"
#define ISA_TABLE cn_gemm_isa_avx512
/* -1: every lane; 4: the current rounding */
#define VFMA_F32(a, b, c) __builtin_ia32_vfmaddps512_mask(a, b, c, -1, 4)
#define VFMA_F64(a, b, c) __builtin_ia32_vfmaddpd512_mask(a, b, c, -1, 4)
#elif CN_GEMM_ISA == 1
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the AVX2 kernels are compiled with -mavx2 -mfma"
#endif
#define VBYTES            32
#define VREGS             16
#define ISA_NAME          "avx2"
#define ISA_TABLE         cn_gemm_isa_avx2
#define VFMA_F32(a, b, c) __builtin_ia32_vfmaddps256(a, b, c)
#define VFMA_F64(a, b, c) __builtin_ia32_vfmaddpd256(a, b, c)
#else
#define VBYTES    16
#define ISA_NAME  "generic"
#define ISA_TABLE cn_gemm_isa_generic
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define VREGS 32
#define VFMA_F32(a, b, c)                                                                          \
  (cn_vec_f32) vfmaq_f32((float32x4_t)(c), (float32x4_t)(a), (float32x4_t)(b))
#define VFMA_F64(a, b, c)                                                                          \
  (cn_vec_f64) vfmaq_f64((float64x2_t)(c), (float64x2_t)(a), (float64x2_t)(b))
#else
#define VREGS 16 /* no vector fused multiply-add: lane by lane (gemm_prec.h) */
#endif
#endif

/* The instruction set's default register tile: rows by vectors of columns (accumulators, a row
 * of b's panel and a broadcast in the registers), as generated C's CN_GEMM_MR and CN_GEMM_NV. */
#define DEFAULT_MR 6
#define DEFAULT_NV (VREGS >= 32 ? 4 : 2)

/* The register tiles the library has: the defaults (narrowed to fewer vectors of columns for
 * narrow products: 16 x 1, 12 x 2, 8 x 3 on 32 registers, 12 x 1 on 16) and the tuner's
 * candidates (runtime/tune.c); a plan asking another tile runs on the default, the same bits. */
#define CN_GEMM_TILES(X) X(6, 4) X(8, 3) X(12, 2) X(16, 1) X(14, 2) X(4, 5) X(6, 2) X(4, 3) X(12, 1)
/* The largest tile, in vectors (the scratch tile of an edge). */
#define MAX_TILE_VECTORS 28
#define MAX_TILE_ROWS    16

#define T             float
#define SUF(name)     name##_f32
#define V             cn_vec_f32
#define VU            cn_vecu_f32
#define FMA_SCALAR    __builtin_fmaf
#define TRANSPOSE_8X8 (VBYTES >= 32) /* AVX: single precision's panels by 8 x 8 blocks */
#if defined(VFMA_F32)
#define VFMA VFMA_F32
#endif
#include "backend/isa/gemm_prec.h"
#undef T
#undef SUF
#undef V
#undef VU
#undef FMA_SCALAR
#undef TRANSPOSE_8X8
#undef VFMA

#define T             double
#define SUF(name)     name##_f64
#define V             cn_vec_f64
#define VU            cn_vecu_f64
#define FMA_SCALAR    __builtin_fma
#define TRANSPOSE_8X8 0
#if defined(VFMA_F64)
#define VFMA VFMA_F64
#endif
#include "backend/isa/gemm_prec.h"

const cn_gemm_isa ISA_TABLE = {ISA_NAME, run_f32, run_f64};
