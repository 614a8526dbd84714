/* The GEMM library (issue 29, src/backend/gemm_lib.h) on its own: every instruction set this CPU
 * runs (the generic vectors always; AVX2 and AVX-512 where the CPU has them and FMA) against an
 * oracle of this file (each cell folded over its steps in order from c, or from +0 when the GEMM
 * is fresh, each update one fmaf/fma or a product and a sum in two statements), bit for bit, on
 * the whole buffer of c (cells between the rows or columns of a strided c stay as they were).
 * Cases, drawn by a fixed generator: single and double precision, exact and fused, fresh or not,
 * batches with their own strides, c row- or column-major (the tile of its own), x's steps
 * adjacent or apart (read in place or packed), y's columns or steps adjacent (the transposed
 * fill), every register tile the library has plus the default and one it has not, blocks small
 * enough to cross every edge, on the caller's thread, on a pool of 2 and 3 threads, and without
 * scratch memory (cell by cell). Also: the process's instruction set is the widest the CPU runs,
 * and cn_gemm_lib_run counts its runs. */
#include "check.h"

#include "backend/gemm_lib.h"
#include "runtime/pool.h"

#include <stdlib.h>

static uint64_t state = 0x9e3779b97f4a7c15u;

static uint64_t next(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

static int64_t pick(int n, const int64_t *from) {
  return from[next() % (uint64_t)n];
}

/* A value in (-2, 2) with every bit of the mantissa used. */
static double value(void) {
  return ((double)(next() >> 11) / 9007199254740992.0 - 0.5) * 4.0;
}

static void pool_for(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi),
                     void *env) {
  cn_pool_for(pool, n, fn, env);
}

static void *pool_scratch(void *pool, size_t bytes) {
  return cn_pool_scratch(pool, bytes);
}

/* One GEMM: the description and the extents of the three buffers. */
typedef struct {
  int64_t a[CN_GEMM_ARGS];
  int64_t c_cells, x_cells, y_cells;
} gemm_case;

static gemm_case draw(void) {
  static const int64_t ms[] = {1, 2, 5, 6, 13, 17, 40}, ns[] = {1, 3, 16, 17, 33, 64, 150};
  static const int64_t ks[] = {1, 2, 7, 31, 64, 130}, batches[] = {1, 1, 2, 3};
  static const int64_t tiles[][2] = {{0, 0}, {6, 4}, {8, 3}, {12, 2}, {16, 1}, {14, 2},
                                     {4, 5}, {6, 2}, {4, 3}, {12, 1}, {5, 5}};
  gemm_case g = {{0}, 0, 0, 0};
  int64_t *a = g.a;
  int64_t b = pick(4, batches), m = pick(7, ms), n = pick(7, ns), k = pick(6, ks);
  a[CN_GEMM_ARG_BATCH] = b;
  a[CN_GEMM_ARG_M] = m;
  a[CN_GEMM_ARG_N] = n;
  a[CN_GEMM_ARG_K] = k;
  /* c: rows of n (and a gap of 0 or 3), or columns of m; x and y likewise either way */
  int64_t gap = next() % 2 ? 3 : 0;
  bool c_rows = next() % 4 != 0, x_rows = next() % 2, y_rows = next() % 2;
  a[CN_GEMM_ARG_C_M] = c_rows ? n + gap : 1;
  a[CN_GEMM_ARG_C_N] = c_rows ? 1 : m + gap;
  a[CN_GEMM_ARG_C_BATCH] = m * n + (m + n) * gap + 5;
  a[CN_GEMM_ARG_X_M] = x_rows ? k : 1;
  a[CN_GEMM_ARG_X_K] = x_rows ? 1 : m;
  a[CN_GEMM_ARG_X_BATCH] = m * k;
  a[CN_GEMM_ARG_Y_K] = y_rows ? n : 1;
  a[CN_GEMM_ARG_Y_N] = y_rows ? 1 : k;
  a[CN_GEMM_ARG_Y_BATCH] = next() % 3 == 0 ? 0 : k * n; /* 0: one y for every batch point */
  int t = (int)(next() % (sizeof tiles / sizeof tiles[0]));
  a[CN_GEMM_ARG_TILE_MR] = tiles[t][0];
  a[CN_GEMM_ARG_TILE_NV] = tiles[t][1];
  a[CN_GEMM_ARG_MC] = next() % 2 ? 16 : 512;
  a[CN_GEMM_ARG_KC] = next() % 2 ? 16 : 256;
  a[CN_GEMM_ARG_NC] = next() % 2 ? 32 : 4096;
  a[CN_GEMM_ARG_FLAGS] = (int64_t)(next() % 16) & (CN_GEMM_FMA | CN_GEMM_FRESH | CN_GEMM_PARALLEL);
  g.c_cells = b * a[CN_GEMM_ARG_C_BATCH];
  g.x_cells = b * m * k;
  g.y_cells = (a[CN_GEMM_ARG_Y_BATCH] ? b : 1) * k * n;
  return g;
}

#define ORACLE(T, FMA)                                                                             \
  for (int64_t p = 0; p < a[CN_GEMM_ARG_BATCH]; p++)                                               \
    for (int64_t i = 0; i < a[CN_GEMM_ARG_M]; i++)                                                 \
      for (int64_t j = 0; j < a[CN_GEMM_ARG_N]; j++) {                                             \
        T *cell =                                                                                  \
            c + p * a[CN_GEMM_ARG_C_BATCH] + i * a[CN_GEMM_ARG_C_M] + j * a[CN_GEMM_ARG_C_N];      \
        T acc = fresh ? 0 : *cell;                                                                 \
        for (int64_t r = 0; r < a[CN_GEMM_ARG_K]; r++) {                                           \
          T xv = x[p * a[CN_GEMM_ARG_X_BATCH] + i * a[CN_GEMM_ARG_X_M] + r * a[CN_GEMM_ARG_X_K]];  \
          T yv = y[p * a[CN_GEMM_ARG_Y_BATCH] + r * a[CN_GEMM_ARG_Y_K] + j * a[CN_GEMM_ARG_Y_N]];  \
          if (fused) {                                                                             \
            acc = FMA(xv, yv, acc);                                                                \
          } else {                                                                                 \
            T product = xv * yv;                                                                   \
            acc = acc + product;                                                                   \
          }                                                                                        \
        }                                                                                          \
        *cell = acc;                                                                               \
      }

static void oracle_f32(const int64_t *a, float *c, const float *x, const float *y) {
  bool fused = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FMA, fresh = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FRESH;
  ORACLE(float, fmaf)
}

static void oracle_f64(const int64_t *a, double *c, const double *x, const double *y) {
  bool fused = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FMA, fresh = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FRESH;
  ORACLE(double, fma)
}

/* The case on one instruction set, one precision, with the pool given (NULL: none) and with or
 * without scratch memory; false on a difference (reported). */
static bool check_case(const cn_gemm_isa *isa, const gemm_case *g, bool dbl, const cn_parallel *par,
                       bool no_scratch, int number) {
  int64_t a[CN_GEMM_ARGS];
  memcpy(a, g->a, sizeof a);
  if (no_scratch) a[CN_GEMM_ARG_FLAGS] |= CN_GEMM_NO_SCRATCH;
  if (dbl) a[CN_GEMM_ARG_FLAGS] |= CN_GEMM_DOUBLE;
  size_t cell = dbl ? sizeof(double) : sizeof(float);
  unsigned char *c = malloc((size_t)g->c_cells * cell), *want = malloc((size_t)g->c_cells * cell);
  unsigned char *x = malloc((size_t)g->x_cells * cell), *y = malloc((size_t)g->y_cells * cell);
  bool same = false;
  if (c && want && x && y) {
    for (int64_t i = 0; i < g->c_cells; i++)
      dbl ? (void)(((double *)c)[i] = value()) : (void)(((float *)c)[i] = (float)value());
    for (int64_t i = 0; i < g->x_cells; i++)
      dbl ? (void)(((double *)x)[i] = value()) : (void)(((float *)x)[i] = (float)value());
    for (int64_t i = 0; i < g->y_cells; i++)
      dbl ? (void)(((double *)y)[i] = value()) : (void)(((float *)y)[i] = (float)value());
    memcpy(want, c, (size_t)g->c_cells * cell);
    if (dbl) {
      oracle_f64(a, (double *)want, (const double *)x, (const double *)y);
      isa->run_f64(a, (double *)c, (const double *)x, (const double *)y, par);
    } else {
      oracle_f32(a, (float *)want, (const float *)x, (const float *)y);
      isa->run_f32(a, (float *)c, (const float *)x, (const float *)y, par);
    }
    same = memcmp(c, want, (size_t)g->c_cells * cell) == 0;
  }
  CHECK_MSG(same,
            "%s case %d (%s, %s): batch %lld, %lld x %lld x %lld, c strides %lld %lld, x %lld "
            "%lld, y %lld %lld, tile %lld x %lld, blocks %lld %lld %lld, flags %lld",
            isa->name, number, dbl ? "double" : "single",
            par          ? "pool"
            : no_scratch ? "no scratch"
                         : "one thread",
            (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3],
            (long long)a[CN_GEMM_ARG_C_M], (long long)a[CN_GEMM_ARG_C_N],
            (long long)a[CN_GEMM_ARG_X_M], (long long)a[CN_GEMM_ARG_X_K],
            (long long)a[CN_GEMM_ARG_Y_K], (long long)a[CN_GEMM_ARG_Y_N],
            (long long)a[CN_GEMM_ARG_TILE_MR], (long long)a[CN_GEMM_ARG_TILE_NV],
            (long long)a[CN_GEMM_ARG_MC], (long long)a[CN_GEMM_ARG_KC],
            (long long)a[CN_GEMM_ARG_NC], (long long)a[CN_GEMM_ARG_FLAGS]);
  free(c);
  free(want);
  free(x);
  free(y);
  return same;
}

static void test_isa(cn_ctx *ctx, const cn_gemm_isa *isa) {
  cn_parallel pools[2] = {{pool_for, cn_pool_of(ctx, 2), pool_scratch},
                          {pool_for, cn_pool_of(ctx, 3), pool_scratch}};
  int failures = 0;
  for (int number = 0; number < 300 && failures < 5; number++) {
    gemm_case g = draw();
    bool dbl = number % 3 == 2;
    const cn_parallel *par = number % 4 == 1 ? &pools[0] : number % 4 == 2 ? &pools[1] : NULL;
    bool no_scratch = number % 10 == 7;
    failures += !check_case(isa, &g, dbl, par, no_scratch, number);
  }
}

int main(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *chosen = cn_gemm_lib_isa();
  test_isa(ctx, &cn_gemm_isa_generic);
  const char *widest = "generic";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2")) {
    test_isa(ctx, &cn_gemm_isa_avx2);
    widest = "avx2";
  } else {
    printf("test_gemm_lib: no AVX2 with FMA here: its kernels not run\n");
  }
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f")) {
    test_isa(ctx, &cn_gemm_isa_avx512);
    widest = "avx512";
  } else {
    printf("test_gemm_lib: no AVX-512 here: its kernels not run\n");
  }
#endif
  CHECK_STR(chosen, widest);
  /* the entry point: the process's set, counted */
  int64_t before = cn_gemm_lib_runs();
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 0.5f, -1, 2, 0.25f, 4}, c[4] = {1, 1, 1, 1};
  const int64_t a[CN_GEMM_ARGS] = {1, 2, 2, 3, 0, 2, 1, 0, 3, 1, 0, 2, 1, 0, 0, 16, 16, 16, 0};
  cn_gemm_lib_run(a, c, x, y, NULL);
  /* [1 2 3; 4 5 6] [1 0.5; -1 2; 0.25 4] = [-0.25 16.5; 0.5 36] */
  CHECK(c[0] == 0.75f && c[1] == 17.5f && c[2] == 1.5f && c[3] == 37.0f);
  CHECK_INT(cn_gemm_lib_runs(), before + 1);
  cn_ctx_destroy(ctx);
  CHECK_DONE();
}
