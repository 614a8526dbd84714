/* The OpenCL backend (src/backend/opencl.c, kernels.c, cgen_opencl.c) against generated C, on the
 * first OpenCL device (PoCL's CPU device here; exit 77 with the reason when there is none):
 * - the end-to-end cases of tests/e2e_cases.h, with every independent nest a grid
 *   (CANNL_PARALLEL_WORK=1), bit for bit;
 * - every primitive op in every precision it supports (tests/ops_cases.h) and every conversion
 *   between precisions: bit for bit, except the transcendental ops (log, exp2, log2, sin, cos,
 *   pow of a non-integer exponent, tanh, and exp and gelu in double), which are the device's math
 *   library: within OPENCL_TRANSCENDENTAL_ULPS units in the last place of the stored precision;
 * - grids whose work items do not fill the last work-group (100 and 1000 cells, groups of 64),
 *   and the guard that keeps the idle ones from writing (through the backend's interface);
 * - Tile: a valid-index nest bounded jointly, a strided padded convolution, a max pool, and
 *   matmuls run as GEMM plans (cleared and fused; triangles of the reduction and of the output);
 * - a gradient (tanh, gelu, relu, products) forward and backward, within the tolerance above;
 * - a shortened moons training (60 steps) whose parameters match generated C's;
 * - runs queued, not waited for: a read after ten runs sees the tenth's sum;
 * - the binary cache: a second compile of a program in a fresh context builds nothing (the
 *   build counter, cn_opencl_builds), a corrupted binary is reported as a warning and rebuilt;
 * - compile_many: programs built at the same time, the same cache records (binaries byte for byte)
 *   and results as built one by one;
 * - symbols named as OpenCL C's keywords, types, built-ins and limit macros;
 * - a program that does not build: the source's path and the build log in the message;
 * - CANNL_OPENCL_DEVICE: a malformed value, and a platform or device that is not there, refused
 *   with the reason. */
#include "e2e_cases.h"
#include "ops_cases.h"

#include "../demo/moons.h"
#include "backend/backend.h"

#include <dirent.h>
#include <unistd.h>

/* How far the device's transcendental functions may be from glibc's, in units in the last place
 * of the stored precision (PoCL's are within 4 ulp of the exact value in float, OpenCL's bound for
 * most of them; a narrow precision rounds both to the same value or to neighbours). */
#define OPENCL_TRANSCENDENTAL_ULPS 8

static cn_backend_kind opencl;
static char cache_dir[] = "/tmp/cannl-test-opencl-XXXXXX";

/* The unit in the last place of the stored precision at x (float formats), 1 for integers. */
static double ulp_of(cn_prec prec, double x) {
  static const int mantissa[CN_PREC_COUNT] = {[CN_PREC_HALF] = 10,
                                              [CN_PREC_BFLOAT16] = 7,
                                              [CN_PREC_FP8] = 2,
                                              [CN_PREC_SINGLE] = 23,
                                              [CN_PREC_DOUBLE] = 52};
  if (cn_prec_kind_of(prec) != CN_PKIND_FLOAT) return 1;
  int e;
  frexp(fabs(x) > 1e-30 ? x : 1e-30, &e);
  return ldexp(1.0, e - 1 - mantissa[prec]);
}

static bool transcendental(cn_op op, cn_prec prec) {
  switch (op) {
  case CN_OP_LOG:
  case CN_OP_EXP2:
  case CN_OP_LOG2:
  case CN_OP_SIN:
  case CN_OP_COS:
  case CN_OP_POW:
  case CN_OP_TANH: return true;
  case CN_OP_EXP:
  case CN_OP_GELU: return prec == CN_PREC_DOUBLE; /* float: builtins.h's own polynomial */
  default: return false;
  }
}

static bool close_cells(cn_prec prec, const void *a, const void *b) {
  double x = cn_prec_cell_to_double(prec, a), y = cn_prec_cell_to_double(prec, b);
  if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) return same_cell(prec, a, b);
  return fabs(x - y) <= OPENCL_TRANSCENDENTAL_ULPS * ulp_of(prec, fmax(fabs(x), fabs(y)));
}

/* Runs asgn on C, then on OpenCL, and returns both backends' cells of outs (caller frees). */
static void run_c_opencl(cn_ctx *ctx, const cn_asgn *asgn, int count, cn_node *const *outs,
                         unsigned char **cells[2]) {
  for (int b = 0; b < 2; b++) {
    cells[b] = calloc((size_t)count, sizeof(unsigned char *));
    cn_routine *r = cn_routine_compile(ctx, asgn, b ? opencl : CN_BACKEND_C, "ops");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
    for (int k = 0; k < count; k++) {
      size_t n = (size_t)cn_node_numel(outs[k]);
      cells[b][k] = malloc(n * cn_prec_bytes(cn_node_prec(outs[k])) + 1);
      CHECK(cn_node_get_cells(outs[k], false, cells[b][k], n) == CN_OK);
    }
    cn_routine_free(r);
  }
}

static void free_cells(int count, unsigned char **cells[2]) {
  for (int b = 0; b < 2; b++) {
    for (int k = 0; k < count; k++) free(cells[b][k]);
    free(cells[b]);
  }
}

/* Every op supporting prec in one routine (one program); how many ops were checked. */
static int check_ops_in(cn_prec prec) {
  cn_ctx *ctx = cn_ctx_create();
  op_case cases[CN_OP_COUNT];
  cn_asgn *asgns[CN_OP_COUNT];
  cn_node *outs[CN_OP_COUNT];
  int count = 0;
  for (int op = 0; op < CN_OP_COUNT; op++) {
    if ((cn_op_table[op].flags & CN_OPF_VEC) || !cn_op_supports((cn_op)op, prec)) continue;
    cases[count] = build_op(ctx, (cn_op)op, prec);
    if (!cases[count].asgn) continue;
    asgns[count] = cases[count].asgn;
    outs[count] = cases[count].out;
    count++;
  }
  unsigned char **cells[2];
  run_c_opencl(ctx, cn_asgn_seq(ctx, count, asgns), count, outs, cells);
  size_t bytes = cn_prec_bytes(prec);
  for (int k = 0; k < count; k++) {
    bool loose = transcendental(cases[k].op, prec);
    for (int64_t c = 0; c < cn_node_numel(outs[k]); c++) {
      const void *cc = cells[0][k] + (size_t)c * bytes, *co = cells[1][k] + (size_t)c * bytes;
      CHECK_MSG(loose ? close_cells(prec, cc, co) : same_cell(prec, cc, co),
                "%s on %s: cell %lld: C %.17g, OpenCL %.17g", cn_op_name(cases[k].op),
                cn_prec_name(prec), (long long)c, cn_prec_cell_to_double(prec, cc),
                cn_prec_cell_to_double(prec, co));
    }
  }
  free_cells(count, cells);
  cn_ctx_destroy(ctx);
  return count;
}

/* Every precision into every precision, as stores of loads (one program of ops_cases.h's
 * sequences, one per target): bit for bit. */
static void check_conversions(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t n = NVALS;
  enum { PAIRS = CN_PREC_COUNT * CN_PREC_COUNT };
  cn_asgn *per_target[CN_PREC_COUNT];
  cn_node *outs[PAIRS];
  for (int to = 0; to < CN_PREC_COUNT; to++)
    per_target[to] = build_conversions(ctx, (cn_prec)to, outs + to * CN_PREC_COUNT);
  unsigned char **cells[2];
  run_c_opencl(ctx, cn_asgn_seq(ctx, CN_PREC_COUNT, per_target), PAIRS, outs, cells);
  for (int k = 0; k < PAIRS; k++) {
    cn_prec to = (cn_prec)(k / CN_PREC_COUNT);
    size_t bytes = cn_prec_bytes(to);
    for (int64_t c = 0; c < n; c++)
      CHECK_MSG(same_cell(to, cells[0][k] + (size_t)c * bytes, cells[1][k] + (size_t)c * bytes),
                "%s -> %s: cell %lld differs", cn_prec_name((cn_prec)(k % CN_PREC_COUNT)),
                cn_prec_name(to), (long long)c);
  }
  free_cells(PAIRS, cells);
  cn_ctx_destroy(ctx);
}

static cn_tensor *binary(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  cn_tensor *args[2] = {a, b};
  return cn_tensor_apply(g, op, 2, args);
}

/* out = sqrt(x) * 3 + x / 7 over n cells, a grid of n work items (parallel_work 1) in groups of
 * 64 whose last one is partly idle: every cell the C backend's bits, none written twice or
 * skipped. */
static void check_grid(int64_t n) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "parallel_work", "1"), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  double *vals = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; vals && i < n; i++) vals[i] = (double)i * 0.37 + 0.5;
  cn_tensor *x = cn_tensor_data(g, "x", &d, vals, (size_t)n);
  cn_tensor *root = cn_tensor_apply(g, CN_OP_SQRT, 1, &x);
  cn_tensor *scaled = binary(g, CN_OP_MUL, root, cn_tensor_number(g, 3));
  cn_tensor *part = binary(g, CN_OP_DIV, x, cn_tensor_number(g, 7));
  cn_tensor *out = binary(g, CN_OP_ADD, scaled, part);
  cn_asgn *code = out ? cn_graph_forward(g, out) : NULL;
  CHECK_MSG(code != NULL, "%s", cn_ctx_error(ctx));
  cn_node *node = code ? cn_tensor_value(out) : NULL;
  if (node) {
    unsigned char **cells[2];
    run_c_opencl(ctx, code, 1, &node, cells);
    CHECK_MSG(memcmp(cells[0][0], cells[1][0], (size_t)n * 4) == 0, "grid of %lld differs",
              (long long)n);
    free_cells(1, cells);
    cn_routine *r = cn_routine_compile(ctx, code, opencl, "grid");
    char guard[64];
    snprintf(guard, sizeof guard, "if (cn_id >= %lld) return;", (long long)n);
    CHECK_MSG(r && strstr(cn_routine_source(r), guard), "no grid of %lld work items:\n%s",
              (long long)n, r ? cn_routine_source(r) : cn_ctx_error(ctx));
    cn_routine_free(r);
  }
  free(vals);
  cn_ctx_destroy(ctx);
}

/* The guard: row 1 of out[3, 100] := 7 by a parallel loop of 100 iterations, launched as 128
 * work items (groups of 64). Work items 100..127 would write out[1, 100..127], which is row 2's
 * start: rows 0 and 2 must keep their 1s. Run through the backend's interface (backend.h). */
static void check_guard(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t dims[2] = {3, 100};
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_SINGLE, 2, dims);
  cn_symbol j = cn_symbol_create(ctx, "j", 0);
  cn_ll_stmt *loop = cn_lb_marks(
      cn_lb_loop(ctx, j, 0, 100,
                 cn_lb_set(ctx, 0, cn_lb_indices(ctx, 2, cn_index_fixed(1), cn_index_iter(j)),
                           cn_lb_num(ctx, CN_PREC_SINGLE, 7))),
      CN_LL_PARALLEL);
  cn_ll_param param = {out, false};
  cn_ll_proc *proc = cn_lb_proc(ctx, "guarded", loop, 1, &param, 0, NULL);
  const cn_backend *b = cn_backend_get(opencl);
  const cn_device *dev = NULL;
  void *compiled = NULL, *buffer = NULL;
  const char *source = NULL;
  float cells[300], got[300];
  for (int c = 0; c < 300; c++) cells[c] = 1;
  CHECK_INT(b->open_device(ctx, &dev), CN_OK);
  CHECK_MSG(b->compile(ctx, proc, &compiled, &source) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK(source && strstr(source, "if (cn_id >= 100) return;"));
  CHECK_INT(dev->allocate(ctx, dev, sizeof cells, &buffer), CN_OK);
  CHECK_INT(dev->upload(ctx, dev, buffer, cells, sizeof cells), CN_OK);
  CHECK_INT(b->run(ctx, compiled, &buffer, NULL), CN_OK);
  CHECK_INT(dev->download(ctx, dev, got, buffer, sizeof got), CN_OK);
  CHECK_INT(dev->synchronize(ctx, dev), CN_OK);
  for (int c = 0; c < 300; c++)
    CHECK_MSG(got[c] == (c / 100 == 1 ? 7 : 1), "out cell %d = %g", c, got[c]);
  dev->free(dev, buffer);
  b->release(compiled);
  cn_ctx_destroy(ctx);
}

/* Asynchronous runs: c =+ a queued 10 times, then one host read sees the tenth sum (every run
 * in order on the queue), and a host write of a between runs reaches the next one. */
static void check_async(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t n = 1000;
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 1, &n);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 1, &n);
  double values[1000], got[1000];
  for (int k = 0; k < n; k++) values[k] = k * 0.25;
  CHECK_INT(cn_node_set_values(a, false, values, (size_t)n), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  const cn_index map[1] = {cn_index_iter(i)};
  const cn_proj_tensor one = {1, &n, map};
  const cn_buffer a_buf = {a, false};
  cn_asgn *add = cn_asgn_accum(ctx, false, CN_OP_ADD, c, CN_OP_ID, &a_buf,
                               cn_proj_create(ctx, 1, &i, &n, one, 1, &one));
  cn_routine *r = add ? cn_routine_compile(ctx, add, opencl, "accumulate") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  for (int k = 0; r && k < 10; k++) CHECK_INT(cn_routine_run(r), CN_OK);
  CHECK_INT(cn_node_get_values(c, false, got, (size_t)n), CN_OK);
  for (int k = 0; k < n; k++) CHECK_MSG(got[k] == 10 * values[k], "c[%d] = %g", k, got[k]);
  for (int k = 0; k < n; k++) values[k] = 1;
  CHECK_INT(cn_node_set_values(a, false, values, (size_t)n), CN_OK);
  if (r) CHECK_INT(cn_routine_run(r), CN_OK);
  CHECK_INT(cn_routine_synchronize(r), CN_OK);
  CHECK_INT(cn_node_get_values(c, false, got, (size_t)n), CN_OK);
  for (int k = 0; k < n; k++) CHECK_MSG(got[k] == 2.5 * k + 1, "c[%d] = %g", k, got[k]);
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

/* Symbols named as OpenCL C's keywords, types, built-ins and limit macros: out[kernel, half] :=
 * 10 kernel + half + long over a grid of kernel, the loops LONG_MAX and get_global_id inside, the
 * free symbol long = 5. The names are made safe (the build would fail otherwise). */
static void check_names(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t dims[2] = {3, 4};
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_SINGLE, 2, dims);
  cn_symbol k = cn_symbol_create(ctx, "kernel", 0), h = cn_symbol_create(ctx, "half", 0),
            l = cn_symbol_create(ctx, "long", 0), m = cn_symbol_create(ctx, "LONG_MAX", 0),
            g = cn_symbol_create(ctx, "get_global_id", 0);
  cn_symbol terms[3] = {k, h, l};
  cn_ll_expr *value = cn_lb_index(ctx, cn_index_affine(3, terms, (const int64_t[]){10, 1, 1}, 0));
  cn_ll_stmt *set =
      cn_lb_set(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(h)), value);
  cn_ll_stmt *inner =
      cn_lb_loop(ctx, h, 0, 4, cn_lb_loop(ctx, m, 0, 1, cn_lb_loop(ctx, g, 0, 1, set)));
  cn_ll_stmt *loop = cn_lb_marks(cn_lb_loop(ctx, k, 0, 3, inner), CN_LL_PARALLEL);
  cn_ll_param param = {out, false};
  cn_ll_proc *proc = cn_lb_proc(ctx, "names", loop, 1, &param, 1, &l);
  const cn_backend *b = cn_backend_get(opencl);
  const cn_device *dev = NULL;
  void *compiled = NULL, *buffer = NULL;
  const char *source = NULL;
  float got[12];
  CHECK_INT(b->open_device(ctx, &dev), CN_OK);
  CHECK_MSG(b->compile(ctx, proc, &compiled, &source) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_INT(dev->allocate(ctx, dev, sizeof got, &buffer), CN_OK);
  const int64_t syms[1] = {5};
  if (compiled) CHECK_INT(b->run(ctx, compiled, &buffer, syms), CN_OK);
  CHECK_INT(dev->download(ctx, dev, got, buffer, sizeof got), CN_OK);
  CHECK_INT(dev->synchronize(ctx, dev), CN_OK);
  for (int c = 0; compiled && c < 12; c++)
    CHECK_MSG(got[c] == (float)(10 * (c / 4) + c % 4 + 5), "out cell %d = %g", c, got[c]);
  dev->free(dev, buffer);
  if (compiled) b->release(compiled);
  cn_ctx_destroy(ctx);
}

/* Tile statements on C and OpenCL (the output filled with a sentinel first): the expected values
 * (worked out in tests/test_tile.c) and the same bits. */
static void run_tile(cn_graph *g, const char *text, int n, const cn_tile_binding *b,
                     const double *expected, int64_t count) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tensor *t = cn_tile(g, text, n, b);
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  CHECK_MSG(code != NULL, "%s: %s", text, cn_ctx_error(ctx));
  if (!code) return;
  cn_node *out = cn_tensor_value(t);
  double got[16], first[16];
  CHECK(count <= 16 && cn_node_numel(out) == count);
  for (int k = 0; k < 2; k++) {
    for (int64_t c = 0; c < count; c++) got[c] = 99;
    CHECK_INT(cn_node_set_values(out, false, got, (size_t)count), CN_OK);
    cn_routine *r = cn_routine_compile(ctx, code, k ? opencl : CN_BACKEND_C, "tile");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s: %s", text, cn_ctx_error(ctx));
    CHECK_INT(cn_node_get_values(out, false, got, (size_t)count), CN_OK);
    for (int64_t c = 0; c < count; c++)
      CHECK_MSG(got[c] == expected[c], "%s on %s: cell %lld = %g, expected %g", text,
                k ? "opencl" : "c", (long long)c, got[c], expected[c]);
    if (k == 0) memcpy(first, got, sizeof(double) * (size_t)count);
    CHECK(memcmp(first, got, sizeof(double) * (size_t)count) == 0);
    cn_routine_free(r);
  }
}

static cn_tensor *data(cn_graph *g, const char *label, int rank, const int64_t *dims,
                       const double *values, size_t count) {
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}};
  cn_tensor *t = cn_tensor_data(g, label, &d, values, count);
  CHECK_MSG(t != NULL, "%s: %s", label, cn_ctx_error(cn_graph_ctx(g)));
  return t;
}

static void check_tile(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  static const double grid[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){3, 3}, grid, 9);
  cn_tile_binding b[1] = {{"I", I, NULL, 0}};
  /* i, j bounded only jointly (by i + j and the constraint i - j < 2): row sums */
  run_tile(g, "O[u] += I[u, i + j], i - j < 2", 1, b, (const double[]){6, 15, 24}, 3);
  run_tile(g, "O[i] += I[i + j, i - j]", 1, b, (const double[]){1, 15, 9}, 3);
  /* a strided padded convolution reading past both ends of V (those points skipped) */
  const double v[5] = {1, 2, 3, 4, 5}, kv[3] = {1, 10, 100};
  cn_tensor *V = data(g, "V", 1, (int64_t[]){5}, v, 5);
  cn_tensor *W = data(g, "W", 1, (int64_t[]){3}, kv, 3);
  cn_tile_binding bs[4] = {
      {"V", V, "X", 0}, {"W", W, "KX", 0}, {"S", NULL, NULL, 2}, {"D", NULL, NULL, 1}};
  run_tile(g,
           "O[x : (X + S - 1) / S] += "
           "V[S*x + D*k - (((X + S - 1) / S - 1) * S + D * (KX - 1) + 1 - X) / 2] * W[k]",
           4, bs, (const double[]){210, 432, 54}, 3);
  /* max pool rounding up: the last window reads past the end */
  cn_tensor *P = data(g, "P", 1, (int64_t[]){5}, (const double[]){3, 1, 4, 1, 5}, 5);
  cn_tile_binding bp[1] = {{"P", P, "N", 0}};
  run_tile(g, "O[i : (N + 1) / 2] >= P[2*i + j], j < 2", 1, bp, (const double[]){3, 4, 5}, 3);
  cn_ctx_destroy(ctx);
}

/* Matmuls large enough for GEMM plans over A (70 x 90) and B (90 x 50): `text` a Tile statement
 * of a rows x cols output whose plan's loop IR has `plan` (starting from zero, or a triangle).
 * The nests run as plain loops on the device (the rows and columns the grid), each step one fma,
 * a plan from zero cleared first (over garbage): generated C's packed, tiled code's bits (a
 * cell's value is one function of its operands, loops.h). */
static void check_gemm(const char *text, int rows, int cols, const char *plan) {
  enum { M = 70, K = 90, N = 50 };
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  static double a[M * K], b[K * N];
  uint64_t state = 7;
  for (int i = 0; i < M * K + K * N; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    (i < M * K ? a : b)[i < M * K ? i : i - M * K] = (double)(state >> 40) / (1 << 23) - 1;
  }
  cn_tensor *A = data(g, "A", 2, (int64_t[]){M, K}, a, M * K);
  cn_tensor *B = data(g, "B", 2, (int64_t[]){K, N}, b, K * N);
  cn_tile_binding binding[2] = {{"A", A, "M, K", 0}, {"B", B, "K, N", 0}};
  cn_tensor *t = cn_tile(g, text, 2, binding);
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  CHECK_MSG(code != NULL, "%s: %s", text, cn_ctx_error(ctx));
  cn_node *out = code ? cn_tensor_value(t) : NULL;
  static float cells[2][M * M];
  static double garbage[M * M];
  for (int i = 0; i < rows * cols; i++) garbage[i] = 99; /* a clear must take it */
  for (int b = 0; out && b < 2; b++) {
    CHECK_INT(cn_node_set_values(out, false, garbage, (size_t)(rows * cols)), CN_OK);
    cn_routine *r = cn_routine_compile(ctx, code, b ? opencl : CN_BACKEND_C, "gemm");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s: %s", text, cn_ctx_error(ctx));
    CHECK_HAS(r ? cn_routine_loops(r) : "", plan);
    CHECK_HAS(r ? cn_routine_loops(r) : "", " fma:\n");
    if (b) CHECK_HAS(r ? cn_routine_source(r) : "", " = fma(");
    CHECK_INT(cn_node_get_cells(out, false, cells[b], (size_t)(rows * cols)), CN_OK);
    cn_routine_free(r);
  }
  CHECK_MSG(memcmp(cells[0], cells[1], sizeof(float) * (size_t)(rows * cols)) == 0,
            "%s: the cells differ between C and OpenCL", text);
  cn_ctx_destroy(ctx);
}

/* The loss sum(tanh(x) * gelu(x) + relu(x) * x) and x's gradient over 1000 cells in [-4, 4]. */
static void check_gradient(void) {
  enum { N = 1000 };
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const int64_t n = N;
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  double vals[N];
  for (int i = 0; i < N; i++) vals[i] = -4 + 8.0 * i / N;
  cn_tensor *x = cn_tensor_param(g, "x", &d, cn_tensor_data(g, "x0", &d, vals, N));
  cn_tensor *t = cn_tensor_apply(g, CN_OP_TANH, 1, &x), *ge = cn_tensor_apply(g, CN_OP_GELU, 1, &x);
  cn_tensor *r = cn_tensor_apply(g, CN_OP_RELU, 1, &x);
  cn_tensor *y = binary(g, CN_OP_ADD, binary(g, CN_OP_MUL, t, ge), binary(g, CN_OP_MUL, r, x));
  cn_tensor *loss = cn_tensor_sum(g, y);
  cn_asgn *code = loss ? cn_graph_grad_update(g, loss) : NULL;
  CHECK_MSG(code != NULL, "%s", cn_ctx_error(ctx));
  cn_node *outs[2] = {code ? cn_tensor_value(loss) : NULL, code ? cn_tensor_grad(x) : NULL};
  if (outs[0] && outs[1]) {
    unsigned char **cells[2];
    run_c_opencl(ctx, code, 2, outs, cells);
    for (int k = 0; k < 2; k++)
      for (int64_t i = 0; i < cn_node_numel(outs[k]); i++)
        CHECK_MSG(close_cells(CN_PREC_SINGLE, cells[0][k] + 4 * i, cells[1][k] + 4 * i),
                  "%s cell %lld differs beyond %d ulp", k ? "x.grad" : "loss", (long long)i,
                  OPENCL_TRANSCENDENTAL_ULPS);
    free_cells(2, cells);
  }
  cn_ctx_destroy(ctx);
}

/* 60 steps of the moons training on C and on OpenCL: the same parameters (relu and products
 * only: the bits of C). */
static void check_moons(void) {
  moons m[2];
  double loss[2];
  for (int b = 0; b < 2; b++) {
    moons_config cfg = {.epochs = 1, .seed = MOONS_SEED, .backend = b ? opencl : CN_BACKEND_C};
    cn_status st = moons_build(&m[b], &cfg);
    CHECK_MSG(st == CN_OK, "moons on %s: %s", b ? "opencl" : "c", cn_ctx_error(m[b].ctx));
    for (int64_t step = 0; st == CN_OK && step < 60; step++)
      CHECK_INT(st = moons_train_step(&m[b], step, &loss[b]), CN_OK);
  }
  CHECK_MSG(loss[0] == loss[1], "last loss: C %.17g, OpenCL %.17g", loss[0], loss[1]);
  cn_tensor *params[2][5] = {{m[0].w1, m[0].b1, m[0].w2, m[0].b2, m[0].w3},
                             {m[1].w1, m[1].b1, m[1].w2, m[1].b2, m[1].w3}};
  for (int p = 0; p < 5; p++) {
    cn_node *a = cn_tensor_value(params[0][p]), *o = cn_tensor_value(params[1][p]);
    int64_t n = cn_node_numel(a);
    double *va = calloc((size_t)n, sizeof(double)), *vo = calloc((size_t)n, sizeof(double));
    CHECK(va && vo && cn_node_get_values(a, false, va, (size_t)n) == CN_OK &&
          cn_node_get_values(o, false, vo, (size_t)n) == CN_OK);
    for (int64_t i = 0; va && vo && i < n; i++)
      CHECK_MSG(va[i] == vo[i], "parameter %d cell %lld: C %.17g, OpenCL %.17g", p, (long long)i,
                va[i], vo[i]);
    free(va);
    free(vo);
  }
  moons_destroy(&m[0]);
  moons_destroy(&m[1]);
}

/* ---- The binary cache ---- */

static char warnings[4096];
static void capture(void *user, cn_log_level level, const char *message) {
  (void)user;
  if (level >= CN_LOG_WARN)
    snprintf(warnings + strlen(warnings), sizeof warnings - strlen(warnings), "%s\n", message);
}

/* Compiles and runs c = a * b + 1 (3 cells) on OpenCL in a fresh context using the test's cache
 * directory; the cells of c. */
static void cached_run(double *c_out) {
  cn_ctx *ctx = cn_ctx_create();
  cn_ctx_set_log(ctx, capture, NULL, CN_LOG_WARN);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  const int64_t n = 3;
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *a = cn_tensor_data(g, "a", &d, (const double[]){1, 2, 3}, 3);
  cn_tensor *b = cn_tensor_data(g, "b", &d, (const double[]){4, 5, 6}, 3);
  cn_tensor *c = binary(g, CN_OP_ADD, binary(g, CN_OP_MUL, a, b), cn_tensor_number(g, 1));
  cn_asgn *code = c ? cn_graph_forward(g, c) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, opencl, "cached") : NULL;
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  if (r) CHECK_INT(cn_node_get_values(cn_tensor_value(c), false, c_out, 3), CN_OK);
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

/* The cache directory's record of the program: its path into path. */
static bool find_record(char *path, size_t cap) {
  DIR *dir = opendir(cache_dir);
  bool found = false;
  for (struct dirent *e; dir && (e = readdir(dir));)
    if (strncmp(e->d_name, "opencl-", 7) == 0 && strstr(e->d_name, ".bin")) {
      snprintf(path, cap, "%s/%s", cache_dir, e->d_name);
      found = true;
    }
  if (dir) closedir(dir);
  return found;
}

static void check_cache(void) {
  CHECK(mkdtemp(cache_dir) != NULL);
  static const double expected[3] = {5, 11, 19};
  double c[3];
  int builds = cn_opencl_builds();
  cached_run(c);
  CHECK(memcmp(c, expected, sizeof c) == 0);
  CHECK_INT(cn_opencl_builds(), builds + 1);
  char path[4096];
  CHECK(find_record(path, sizeof path));
  /* a fresh context: the binary, no build */
  cached_run(c);
  CHECK(memcmp(c, expected, sizeof c) == 0);
  CHECK_INT(cn_opencl_builds(), builds + 1);
  CHECK_STR(warnings, "");
  /* a byte of the binary changed: found by the record's checksum, a warning, built again */
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, -40, SEEK_END);
    int byte = fgetc(f);
    fseek(f, -40, SEEK_END);
    fputc(byte ^ 0x5A, f);
    fclose(f);
  }
  cached_run(c);
  CHECK(memcmp(c, expected, sizeof c) == 0);
  CHECK_INT(cn_opencl_builds(), builds + 2);
  CHECK_HAS(warnings, "ignoring corrupted opencl record");
  CHECK_HAS(warnings, "checksum mismatch");
  /* rebuilt and stored again: the next context takes it */
  warnings[0] = '\0';
  cached_run(c);
  CHECK_INT(cn_opencl_builds(), builds + 2);
  CHECK_STR(warnings, "");
  CHECK(find_record(path, sizeof path) && unlink(path) == 0);
  CHECK(rmdir(cache_dir) == 0);
}

/* The records of a cache directory, as one text (file names and contents, in name order; *len
 * bytes: the binaries hold NULs), removed. */
static char *records_of(const char *dir_path, size_t *len) {
  struct dirent **names = NULL;
  int n = scandir(dir_path, &names, NULL, alphasort);
  cn_sbuf all = {0};
  for (int k = 0; k < n; k++) {
    if (names[k]->d_name[0] != '.') {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir_path, names[k]->d_name);
      FILE *f = fopen(path, "rb");
      cn_sbuf_printf(&all, "== %s\n", names[k]->d_name);
      for (int c; f && (c = fgetc(f)) != EOF;) cn_sbuf_putc(&all, (char)c);
      if (f) fclose(f);
      unlink(path);
    }
    free(names[k]);
  }
  free(names);
  *len = all.len;
  return all.data;
}

/* Three routines (x * k + k over 50, 60, 70 cells) compiled one by one, then with
 * cn_routine_compile_many (the programs built at the same time) in another cache directory: one
 * build each both ways, the same records (file names and bytes: the binaries are identical), the
 * same results; compile_many again in a fresh context builds nothing (every binary cached). A
 * first compile_many into a third directory, thrown away, fills the driver's own cache: PoCL's
 * binary of a program it builds anew names a temporary of its own (`_UNCACHED_75frKx`), the one
 * it takes from its kernel cache does not, so on a machine whose PoCL cache was empty the one by
 * one builds and the later ones differed in those bytes. */
static void check_compile_many(void) {
  CHECK(cn_backend_get(opencl)->compile_many != NULL);
  char dirs[3][64] = {"/tmp/cannl-test-many-XXXXXX", "/tmp/cannl-test-many-XXXXXX",
                      "/tmp/cannl-test-many-XXXXXX"};
  char *records[2] = {NULL, NULL};
  size_t lens[2] = {0, 0};
  for (int d = 0; d < 3; d++) CHECK(mkdtemp(dirs[d]) != NULL);
  for (int way = -1; way < 3; way++) { /* -1: the driver's cache filled */
    const char *dir = dirs[way < 0 ? 2 : way > 0];
    cn_ctx *ctx = cn_ctx_create();
    CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
    cn_graph *g = cn_graph_create(ctx);
    const cn_asgn *codes[3];
    const char *names[3] = {"many_a", "many_b", "many_c"};
    cn_tensor *outs[3];
    for (int k = 0; k < 3; k++) {
      const int64_t n = 50 + 10 * k;
      const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
      double vals[70];
      for (int i = 0; i < n; i++) vals[i] = i * 0.5 - 3;
      cn_tensor *x = cn_tensor_data(g, "x", &d, vals, (size_t)n);
      cn_tensor *kk = cn_tensor_number(g, k + 2);
      outs[k] = binary(g, CN_OP_ADD, binary(g, CN_OP_MUL, x, kk), kk);
      codes[k] = cn_graph_forward(g, outs[k]);
      CHECK(codes[k] != NULL);
    }
    cn_routine *rs[3] = {NULL, NULL, NULL};
    int builds = cn_opencl_builds();
    if (way == 0)
      for (int k = 0; k < 3; k++) rs[k] = cn_routine_compile(ctx, codes[k], opencl, names[k]);
    else
      CHECK_INT(cn_routine_compile_many(ctx, 3, codes, names, opencl, rs), CN_OK);
    CHECK_INT(cn_opencl_builds(), builds + (way < 2 ? 3 : 0));
    for (int k = 0; k < 3; k++) {
      CHECK_MSG(rs[k] && cn_routine_run(rs[k]) == CN_OK, "%s", cn_ctx_error(ctx));
      double got[70];
      CHECK_INT(cn_node_get_values(cn_tensor_value(outs[k]), false, got, (size_t)(50 + 10 * k)),
                CN_OK);
      for (int i = 0; i < 50 + 10 * k; i++) CHECK(got[i] == (i * 0.5 - 3) * (k + 2) + k + 2);
      cn_routine_free(rs[k]);
    }
    cn_ctx_destroy(ctx);
    if (way < 0) {
      size_t len;
      free(records_of(dir, &len));
      CHECK(rmdir(dir) == 0);
    } else if (way != 1) {
      records[way > 0] = records_of(dir, &lens[way > 0]);
      CHECK(rmdir(dir) == 0);
    }
  }
  CHECK(records[0] && strstr(records[0], "== opencl-"));
  CHECK_MSG(records[0] && records[1] && lens[0] == lens[1] &&
                memcmp(records[0], records[1], lens[0]) == 0,
            "compile_many's cache records differ from one-by-one's");
  free(records[0]);
  free(records[1]);
}

/* A program that does not build (CANNL_OPENCL_FLAGS hiding the prelude's helpers): CN_ERR_COMPILE
 * with the path of the source, which is there, and the compiler's log. */
static void check_build_failure(void) {
  setenv("CANNL_OPENCL_FLAGS", "-DCN_BUILTINS_H", 1);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", "off"), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  const int64_t n = 3;
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *a = cn_tensor_data(g, "a", &d, (const double[]){1, 2, 3}, 3);
  cn_tensor *c = binary(g, CN_OP_MAX, a, a);
  cn_asgn *code = c ? cn_graph_forward(g, c) : NULL;
  CHECK(code && cn_routine_compile(ctx, code, opencl, "broken") == NULL);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_COMPILE);
  const char *message = cn_ctx_error(ctx);
  CHECK_HAS(message, "opencl: routine 'broken' does not build on ");
  CHECK_HAS(message, "cn_max_f32"); /* the log: the helper the flag hid */
  const char *path = strstr(message, "CL_BUILD_PROGRAM_FAILURE): ");
  char file[4096] = "";
  if (path) sscanf(path + strlen("CL_BUILD_PROGRAM_FAILURE): "), "%4095s", file);
  CHECK_MSG(strstr(file, "broken-opencl-") && strstr(file, ".cl"), "no source path in: %s",
            message);
  FILE *f = fopen(file, "r");
  char text[256] = "";
  CHECK_MSG(f != NULL, "%s is not there", file);
  if (f) {
    CHECK(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    unlink(file);
  }
  CHECK_HAS(text, "/* Generated by cannl: routine broken as ");
  cn_ctx_destroy(ctx);
  unsetenv("CANNL_OPENCL_FLAGS");
}

/* CANNL_OPENCL_DEVICE chooses the device; one that is not there is refused with the reason. */
static void check_device_choice(void) {
  static const struct {
    const char *value, *message;
  } cases[] = {{"x", "CANNL_OPENCL_DEVICE='x' is not <platform>:<device> (e.g. 0:0)"},
               {"0:", "is not <platform>:<device>"},
               {"99:0", "CANNL_OPENCL_DEVICE='99:0': no platform 99 (there are "},
               {"0:99", "CANNL_OPENCL_DEVICE='0:99': platform 0 has no device 99 (it has "}};
  char device[1400];
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    setenv("CANNL_OPENCL_DEVICE", cases[k].value, 1);
    cn_ctx *ctx = cn_ctx_create();
    CHECK_INT(cn_backend_device(ctx, opencl, device, sizeof device), CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(ctx), cases[k].message);
    cn_ctx_destroy(ctx);
  }
  setenv("CANNL_OPENCL_DEVICE", "0:0", 1);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_backend_device(ctx, opencl, device, sizeof device), CN_OK);
  CHECK_HAS(device, "global memory");
  cn_ctx_destroy(ctx);
  unsetenv("CANNL_OPENCL_DEVICE");
}

int main(void) {
  opencl = (cn_backend_kind)cn_backend_find("opencl");
  CHECK_INT(opencl, 2);
  CHECK(cn_backend_caps(opencl) == (CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED));
  cn_ctx *probe = cn_ctx_create();
  char device[1400];
  if (cn_backend_device(probe, opencl, device, sizeof device) != CN_OK) {
    printf("skipped: no OpenCL device: %s\n", cn_ctx_error(probe));
    cn_ctx_destroy(probe);
    return 77;
  }
  printf("OpenCL device: %s\n", device);
  cn_ctx_destroy(probe);

  check_cache();
  check_compile_many();
  check_device_choice();
  check_build_failure();
  check_guard();
  check_async();
  check_names();
  check_grid(100);
  check_grid(1000);
  check_conversions();
  int checked = 0;
  for (int prec = 0; prec < CN_PREC_COUNT; prec++) checked += check_ops_in((cn_prec)prec);
  CHECK(checked > 150);
  check_tile();
  check_gemm("O[m, n : M, N] += A[m, k] * B[k, n]", 70, 50, " from zero ");
  check_gemm("O[m, n : M, N] += A[m, k] * B[k, n], m - k < 70", 70, 50, " triangle K < M ");
  check_gemm("S[m, j : M, M] += A[m, k] * A[j, k], m - j < 70", 70, 70, " triangle N < M ");
  check_gradient();
  check_moons();

  /* every independent nest a grid, however small */
  setenv("CANNL_PARALLEL_WORK", "1", 1);
  backends[0] = CN_BACKEND_C;
  backends[1] = opencl;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  CHECK_DONE();
}
