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

/* One group's offsets in one access (c, x or y): stride * f when its loops walk the access as one
 * range (each outer loop's step is the inner's extent times its step), else the sum over its
 * loops, innermost first, of step * (f % extent), f /= extent: the generated driver's flattening
 * (cgen_gemm.c print_offset), for a flat index f of the group. */
typedef struct {
  int n;
  bool linear;
  int64_t stride;
  int64_t extent[CN_GEMM_MAX_LOOPS], step[CN_GEMM_MAX_LOOPS];
} walk;

static void walk_of(const int64_t *a, int role, int access, walk *w) {
  const int64_t *loop = a + CN_GEMM_ARGS;
  int64_t extent[CN_GEMM_MAX_LOOPS], step[CN_GEMM_MAX_LOOPS];
  int n = 0;
  for (int64_t l = 0; l < a[CN_GEMM_ARG_LOOPS] && n < CN_GEMM_MAX_LOOPS; l++, loop += CN_GEMM_LOOP)
    if (loop[CN_GEMM_LOOP_ROLE] == role) {
      extent[n] = loop[CN_GEMM_LOOP_EXTENT];
      step[n++] = loop[access];
    }
  w->n = n;
  w->linear = true;
  for (int i = 1; i < n; i++) w->linear = w->linear && step[i - 1] == step[i] * extent[i];
  w->stride = n ? step[n - 1] : 0;
  for (int i = 0; i < n; i++) {
    w->extent[i] = extent[n - 1 - i];
    w->step[i] = step[n - 1 - i];
  }
}

static inline int64_t walk_at(const walk *w, int64_t f) {
  if (w->linear) return w->stride * f;
  int64_t offset = 0;
  for (int i = 0; i < w->n; i++) {
    offset += w->step[i] * (f % w->extent[i]);
    f /= w->extent[i];
  }
  return offset;
}

/* out[i] = the offset of point f0 + i, i < count: one division per loop for f0, then the loops'
 * indices counted up as digits (divisions per point made the offsets of a convolution's rows a
 * third of its packing time). */
static void walk_fill(const walk *w, int64_t f0, int64_t count, int64_t *out) {
  if (w->linear) {
    for (int64_t i = 0; i < count; i++) out[i] = w->stride * (f0 + i);
    return;
  }
  int64_t digit[CN_GEMM_MAX_LOOPS], offset = 0, f = f0;
  for (int i = 0; i < w->n; i++) {
    digit[i] = f % w->extent[i];
    offset += w->step[i] * digit[i];
    f /= w->extent[i];
  }
  for (int64_t i = 0; i < count; i++) {
    out[i] = offset;
    for (int d = 0; d < w->n; d++) { /* the next point: carry through the full digits */
      offset += w->step[d];
      if (++digit[d] < w->extent[d]) break;
      offset -= w->step[d] * w->extent[d];
      digit[d] = 0;
    }
  }
}

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
