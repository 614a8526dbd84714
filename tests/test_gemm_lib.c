/* The GEMM library (issue 29, src/backend/gemm_lib.h) on its own: every instruction set this CPU
 * runs (the generic vectors always; AVX2 and AVX-512 where the CPU has them and FMA) against an
 * oracle of this file (each cell folded over its steps in order from c, or from +0 when the GEMM
 * is fresh, each update one fmaf/fma or a product and a sum in two statements; every offset the
 * sum over the group's loops of step times the loop's digit of the point), bit for bit, on the
 * whole buffer of c (cells between the rows or columns of a padded c stay as they were). Cases,
 * drawn by a fixed generator: single and double precision, exact and fused, fresh or not, a
 * batch loop or none, one or two loops per group (walking an access as one range or not: a padded
 * layout, or any steps, overlapping reads as a convolution's), c row- or column-major (the tile
 * of its own), x's steps adjacent or apart (read in place or packed), y's columns or steps
 * adjacent (the transposed fill), every register tile the library has plus the default and one it
 * has not, blocks small enough to cross every edge, on the caller's thread, on a pool of 2 and 3
 * threads, without scratch memory (cell by cell), and under triangles (loops.h: cells past the
 * diagonal never written, or each row its own steps; offsets -3 to 10). Also: the process's
 * instruction set is the widest the CPU runs, and cn_gemm_lib_run computes a 2 x 3 by 3 x 2 product
 * by hand and counts its runs, and a 64 x 3 one split across a pool, which it asks to choose
 * between sharing and running alone for this GEMM's site (its arguments). */
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

/* One GEMM: the description (its loops after the CN_GEMM_ARGS integers) and the extents of the
 * three buffers. */
typedef struct {
  int64_t a[CN_GEMM_ARGS + CN_GEMM_LOOP * 8];
  int64_t c_cells, x_cells, y_cells;
} gemm_case;

enum { ROWS, COLUMNS, STEPS, BATCH }; /* cn_gemm_role's order */

/* Steps of a dense layout of the loops (`order`: their indices, outermost first) with a gap after
 * some loops (a padded or strided row: the group's loops then do not walk it as one range). */
static int64_t dense(int64_t *loop, int n_order, const int *order, int access, bool gaps) {
  int64_t running = 1;
  for (int o = n_order - 1; o >= 0; o--) {
    int64_t *l = loop + CN_GEMM_LOOP * order[o];
    l[access] = running;
    running = running * l[CN_GEMM_LOOP_EXTENT] + (gaps && next() % 2 ? 3 : 0);
  }
  return running;
}

static gemm_case draw(void) {
  static const int64_t extents[] = {1, 2, 3, 5, 6, 13, 17, 40}, long_extents[] = {31, 64, 130};
  static const int64_t tiles[][2] = {{0, 0}, {6, 4}, {8, 3}, {12, 2}, {16, 1}, {14, 2},
                                     {4, 5}, {6, 2}, {4, 3}, {12, 1}, {5, 5}};
  gemm_case g = {{0}, 0, 0, 0};
  int64_t *a = g.a, *loop = a + CN_GEMM_ARGS;
  /* the loops: batch (none or one), rows, columns and steps (one or two each) */
  int n = 0, role[8];
  /* a triangle in one case of four: of cells (columns below rows), or of steps (steps below
   * rows, rows below steps); its two groups one loop each */
  int tri = next() % 4 == 0 ? 1 + (int)(next() % 3) : 0;
  int tri_group = tri == 1 ? COLUMNS : STEPS;
  if (next() % 2) role[n++] = BATCH;
  for (int r = ROWS; r <= STEPS; r++) {
    role[n++] = r;
    if (next() % 3 == 0 && !(tri && (r == ROWS || r == tri_group))) role[n++] = r;
  }
  int64_t total[4] = {1, 1, 1, 1};
  for (int l = 0; l < n; l++) {
    int64_t *rec = loop + CN_GEMM_LOOP * l;
    rec[CN_GEMM_LOOP_ROLE] = role[l];
    rec[CN_GEMM_LOOP_EXTENT] =
        role[l] == STEPS && next() % 2 ? pick(3, long_extents) : pick(8, extents);
    total[role[l]] *= rec[CN_GEMM_LOOP_EXTENT];
  }
  a[CN_GEMM_ARG_BATCH] = total[BATCH];
  a[CN_GEMM_ARG_M] = total[ROWS];
  a[CN_GEMM_ARG_N] = total[COLUMNS];
  a[CN_GEMM_ARG_K] = total[STEPS];
  a[CN_GEMM_ARG_LOOPS] = n;
  /* c: dense over batch, rows, columns (or columns, rows: column-major), gaps or not; x and y:
   * dense over their groups in either order, or any steps (a convolution's reads overlap) */
  int order[8], k = 0;
  bool rows_first = next() % 4 != 0;
  const int c_groups[3] = {BATCH, rows_first ? ROWS : COLUMNS, rows_first ? COLUMNS : ROWS};
  for (int gi = 0; gi < 3; gi++)
    for (int l = 0; l < n; l++)
      if (role[l] == c_groups[gi]) order[k++] = l;
  g.c_cells = dense(loop, k, order, CN_GEMM_LOOP_C, next() % 2);
  for (int access = CN_GEMM_LOOP_X; access <= CN_GEMM_LOOP_Y; access++) {
    int inner = access == CN_GEMM_LOOP_X ? ROWS : COLUMNS;
    if (next() % 3 == 0) { /* any steps: 0 to 6 cells */
      int64_t last = 0;
      for (int l = 0; l < n; l++) {
        int64_t *rec = loop + CN_GEMM_LOOP * l;
        rec[access] =
            role[l] == inner || role[l] == STEPS || role[l] == BATCH ? (int64_t)(next() % 7) : 0;
        last += rec[access] * (rec[CN_GEMM_LOOP_EXTENT] - 1);
      }
      *(access == CN_GEMM_LOOP_X ? &g.x_cells : &g.y_cells) = last + 1;
      continue;
    }
    bool steps_first = next() % 2;
    const int groups[3] = {BATCH, steps_first ? STEPS : inner, steps_first ? inner : STEPS};
    k = 0;
    for (int gi = 0; gi < 3; gi++)
      for (int l = 0; l < n; l++)
        if (role[l] == groups[gi] &&
            !(access == CN_GEMM_LOOP_Y && role[l] == BATCH && next() % 3 == 0))
          order[k++] = l;
    *(access == CN_GEMM_LOOP_X ? &g.x_cells : &g.y_cells) =
        dense(loop, k, order, access, next() % 2);
  }
  int t = (int)(next() % (sizeof tiles / sizeof tiles[0]));
  a[CN_GEMM_ARG_TILE_MR] = tiles[t][0];
  a[CN_GEMM_ARG_TILE_NV] = tiles[t][1];
  a[CN_GEMM_ARG_MC] = next() % 2 ? 16 : 512;
  a[CN_GEMM_ARG_KC] = next() % 2 ? 16 : 256;
  a[CN_GEMM_ARG_NC] = next() % 2 ? 32 : 4096;
  a[CN_GEMM_ARG_FLAGS] = (int64_t)(next() % 16) & (CN_GEMM_FMA | CN_GEMM_FRESH | CN_GEMM_PARALLEL);
  a[CN_GEMM_ARG_TRI] = tri;
  a[CN_GEMM_ARG_TRI_OFFSET] = (int64_t)(next() % 14) - 3;
  if (tri) a[CN_GEMM_ARG_FLAGS] &= ~(int64_t)CN_GEMM_FRESH; /* never with a triangle (loops.h) */
  return g;
}

/* The offset in `access` of point f of a group: its loops, outermost first, as the digits of f. */
static int64_t offset_of(const int64_t *a, int group, int access, int64_t f) {
  int64_t offset = 0;
  for (int64_t l = a[CN_GEMM_ARG_LOOPS] - 1; l >= 0; l--) {
    const int64_t *rec = a + CN_GEMM_ARGS + CN_GEMM_LOOP * l;
    if (rec[CN_GEMM_LOOP_ROLE] != group) continue;
    offset += rec[access] * (f % rec[CN_GEMM_LOOP_EXTENT]);
    f /= rec[CN_GEMM_LOOP_EXTENT];
  }
  return offset;
}

/* The offsets of every point of a group in one access (offset_of of each), malloc'd; NULL when
 * out of memory. */
static int64_t *offsets(const int64_t *a, int group, int access, int64_t points) {
  int64_t *table = malloc((size_t)(points > 0 ? points : 1) * sizeof *table);
  for (int64_t f = 0; table && f < points; f++) table[f] = offset_of(a, group, access, f);
  return table;
}

/* The oracle reads every offset from tables made once per GEMM (a division per loop for each
 * access of each step was 96% of the test's time). */
typedef struct {
  int64_t *c_b, *c_m, *c_n, *x_b, *x_m, *x_k, *y_b, *y_k, *y_n;
} oracle_tables;

static bool tables_make(const int64_t *a, oracle_tables *t) {
  int64_t b = a[CN_GEMM_ARG_BATCH], m = a[CN_GEMM_ARG_M], n = a[CN_GEMM_ARG_N],
          k = a[CN_GEMM_ARG_K];
  *t = (oracle_tables){offsets(a, BATCH, CN_GEMM_LOOP_C, b),   offsets(a, ROWS, CN_GEMM_LOOP_C, m),
                       offsets(a, COLUMNS, CN_GEMM_LOOP_C, n), offsets(a, BATCH, CN_GEMM_LOOP_X, b),
                       offsets(a, ROWS, CN_GEMM_LOOP_X, m),    offsets(a, STEPS, CN_GEMM_LOOP_X, k),
                       offsets(a, BATCH, CN_GEMM_LOOP_Y, b),   offsets(a, STEPS, CN_GEMM_LOOP_Y, k),
                       offsets(a, COLUMNS, CN_GEMM_LOOP_Y, n)};
  return t->c_b && t->c_m && t->c_n && t->x_b && t->x_m && t->x_k && t->y_b && t->y_k && t->y_n;
}

static void tables_free(oracle_tables *t) {
  int64_t *all[] = {t->c_b, t->c_m, t->c_n, t->x_b, t->x_m, t->x_k, t->y_b, t->y_k, t->y_n};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

#define ORACLE(T, FMA)                                                                             \
  oracle_tables t;                                                                                 \
  if (!tables_make(a, &t)) {                                                                       \
    tables_free(&t);                                                                               \
    return false;                                                                                  \
  }                                                                                                \
  for (int64_t p = 0; p < a[CN_GEMM_ARG_BATCH]; p++)                                               \
    for (int64_t i = 0; i < a[CN_GEMM_ARG_M]; i++)                                                 \
      for (int64_t j = 0; j < a[CN_GEMM_ARG_N]; j++) {                                             \
        if (tri == 1 && j >= i + tri_offset) continue; /* past the triangle: never written */      \
        T *cell = c + t.c_b[p] + t.c_m[i] + t.c_n[j];                                              \
        T acc = fresh ? 0 : *cell;                                                                 \
        for (int64_t r = 0; r < a[CN_GEMM_ARG_K]; r++) {                                           \
          if ((tri == 2 && r >= i + tri_offset) || (tri == 3 && i >= r + tri_offset)) continue;    \
          T xv = x[t.x_b[p] + t.x_m[i] + t.x_k[r]];                                                \
          T yv = y[t.y_b[p] + t.y_k[r] + t.y_n[j]];                                                \
          if (fused) {                                                                             \
            acc = FMA(xv, yv, acc);                                                                \
          } else {                                                                                 \
            T product = xv * yv;                                                                   \
            acc = acc + product;                                                                   \
          }                                                                                        \
        }                                                                                          \
        *cell = acc;                                                                               \
      }                                                                                            \
  tables_free(&t);                                                                                 \
  return true;

static bool oracle_f32(const int64_t *a, float *c, const float *x, const float *y) {
  bool fused = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FMA, fresh = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FRESH;
  int64_t tri = a[CN_GEMM_ARG_TRI], tri_offset = a[CN_GEMM_ARG_TRI_OFFSET];
  ORACLE(float, fmaf)
}

static bool oracle_f64(const int64_t *a, double *c, const double *x, const double *y) {
  bool fused = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FMA, fresh = a[CN_GEMM_ARG_FLAGS] & CN_GEMM_FRESH;
  int64_t tri = a[CN_GEMM_ARG_TRI], tri_offset = a[CN_GEMM_ARG_TRI_OFFSET];
  ORACLE(double, fma)
}

/* The case on one instruction set, one precision, with the pool given (NULL: none) and with or
 * without scratch memory; false on a difference (reported). */
static bool check_case(const cn_gemm_isa *isa, const gemm_case *g, bool dbl, const cn_parallel *par,
                       bool no_scratch, int number) {
  int64_t a[CN_GEMM_ARGS + CN_GEMM_LOOP * 8];
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
    bool oracle;
    if (dbl) {
      oracle = oracle_f64(a, (double *)want, (const double *)x, (const double *)y);
      isa->run_f64(a, (double *)c, (const double *)x, (const double *)y, par);
    } else {
      oracle = oracle_f32(a, (float *)want, (const float *)x, (const float *)y);
      isa->run_f32(a, (float *)c, (const float *)x, (const float *)y, par);
    }
    CHECK_MSG(oracle, "test_gemm_lib: out of memory for the oracle's tables");
    same = oracle && memcmp(c, want, (size_t)g->c_cells * cell) == 0;
  }
  char loops[512] = "";
  for (int64_t l = 0, at = 0; l < a[CN_GEMM_ARG_LOOPS]; l++) {
    const int64_t *r = a + CN_GEMM_ARGS + CN_GEMM_LOOP * l;
    at +=
        snprintf(loops + at, sizeof loops - (size_t)at, " (%c %lld: %lld %lld %lld)", "MNKB"[r[0]],
                 (long long)r[1], (long long)r[2], (long long)r[3], (long long)r[4]);
  }
  CHECK_MSG(same,
            "%s case %d (%s, %s): tile %lld x %lld, blocks %lld %lld %lld, flags %lld, triangle "
            "%lld%+lld, loops%s",
            isa->name, number, dbl ? "double" : "single",
            par          ? "pool"
            : no_scratch ? "no scratch"
                         : "one thread",
            (long long)a[CN_GEMM_ARG_TILE_MR], (long long)a[CN_GEMM_ARG_TILE_NV],
            (long long)a[CN_GEMM_ARG_MC], (long long)a[CN_GEMM_ARG_KC],
            (long long)a[CN_GEMM_ARG_NC], (long long)a[CN_GEMM_ARG_FLAGS],
            (long long)a[CN_GEMM_ARG_TRI], (long long)a[CN_GEMM_ARG_TRI_OFFSET], loops);
  free(c);
  free(want);
  free(x);
  free(y);
  return same;
}

/* Drawn GEMMs per instruction set, and the most multiply-adds of one (make test-valgrind runs
 * fewer, smaller ones: `test_gemm_lib CASES MAX_WORK`). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static int cases = 30; /* the sanitizers' Debug build took 587 s for 300 */
#else
static int cases = 300;
#endif
static int64_t max_work = INT64_MAX;

/* The context's pool is one per thread count (cn_pool_of replaces it): taken for each case. */
static void test_isa(cn_ctx *ctx, const cn_gemm_isa *isa) {
  int failures = 0;
  for (int number = 0; number < cases && failures < 5; number++) {
    gemm_case g = draw();
    if (g.a[CN_GEMM_ARG_BATCH] * g.a[CN_GEMM_ARG_M] * g.a[CN_GEMM_ARG_N] * g.a[CN_GEMM_ARG_K] >
        max_work)
      continue;
    bool dbl = number % 3 == 2;
    int threads = number % 4 == 1 ? 2 : number % 4 == 2 ? 3 : 1;
    cn_parallel pool = threads > 1 ? cn_pool_parallel(cn_pool_of(ctx, threads)) : (cn_parallel){0};
    bool no_scratch = number % 10 == 7;
    failures += !check_case(isa, &g, dbl, threads > 1 ? &pool : NULL, no_scratch, number);
  }
}

/* The site of the last GEMM split across the pool (cn_parallel.pool_for_site). */
static const void *site_seen;
static void record_site(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi),
                        void *env, const void *site) {
  site_seen = site;
  cn_pool_for_site(pool, n, fn, env, site);
}

int main(int argc, char **argv) {
  if (argc > 1) cases = atoi(argv[1]);
  if (argc > 2) max_work = atoll(argv[2]);
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
  /* rows (2: 2 cells apart in c, 3 in x), columns (2: adjacent in c and y), steps (3: adjacent in
   * x, 2 apart in y) */
  const int64_t a[CN_GEMM_ARGS + 3 * CN_GEMM_LOOP] = {1, 2, 2, 3,     0, 0, 16, 16, 16,      0,
                                                      0, 0, 3, ROWS,  2, 2, 3,  0,  COLUMNS, 2,
                                                      1, 0, 1, STEPS, 3, 0, 1,  2};
  cn_gemm_lib_run(a, c, x, y, NULL);
  /* [1 2 3; 4 5 6] [1 0.5; -1 2; 0.25 4] = [-0.25 16.5; 0.5 36] */
  CHECK(c[0] == 0.75f && c[1] == 17.5f && c[2] == 1.5f && c[3] == 37.0f);
  CHECK_INT(cn_gemm_lib_runs(), before + 1);
  /* split across a pool: 64 rows of ones by the same y, four tasks, chosen shared or alone per
   * GEMM (the pool's site is the GEMM's arguments) */
  float ones[64 * 3], rows[64 * 2] = {0};
  for (int k = 0; k < 64 * 3; k++) ones[k] = 1;
  const int64_t split[CN_GEMM_ARGS + 3 * CN_GEMM_LOOP] = {
      1, 64, 2, 3, 0,     0, 16, 16, 16, CN_GEMM_PARALLEL, 0, 0, 3, ROWS, 64, 2, 3, 0, COLUMNS,
      2, 1,  0, 1, STEPS, 3, 0,  1,  2};
  cn_parallel par = cn_pool_parallel(cn_pool_of(ctx, 2));
  par.pool_for_site = record_site;
  cn_gemm_lib_run(split, rows, ones, y, &par);
  CHECK(site_seen == split);
  for (int r = 0; r < 64; r++) CHECK(rows[2 * r] == 0.25f && rows[2 * r + 1] == 6.5f);
  cn_ctx_destroy(ctx);
  CHECK_DONE();
}
