/* Benchmark (issue 17, register-tiled GEMM micro-kernels): the contractions of cannl's generated C
 * in GFLOP/s, in its two micro-kernel modes (fma, the default, and exact, CANNL_EXACT=1), against
 * PyTorch (one and two threads) and numpy (one thread) in one run. Workloads (single precision):
 * matmul M = N = K at 64 / 256 / 512 / 1024 / 2048 (einsum `ij;jk=>ik`), the skinny product
 * c[4096x4096] = a[4096x64] b[64x4096], the attention-shaped batched einsum `bhqd;bhkd=>bhqk`
 * (b = h = 8, q = k = 128, d = 64), the MLP 784-128-10 SGD step (batch 128), conv 1->32->64 3x3
 * valid forward + backward (batch 32, 28x28) and conv 64->64 3x3 padded ("same") forward with
 * bias (batch 8, 56x56).
 *
 * Each workload runs in processes of its own: this program again (`--run NAME SIZE BUDGET`) with
 * CANNL_EXACT=0 (fma) and CANNL_EXACT=1 (exact), each with CANNL_THREADS=1 and then 2 (the rest
 * of the environment passed through), then bench_gemm.py (next to this file, by /usr/bin/python3)
 * for PyTorch and numpy. Every side warms up once and times repetitions (clock_gettime,
 * monotonic) for a budget of time, at least 3. The tables show medians (JSON has the best too):
 * milliseconds with the GFLOP/s of cannl fma 1t and the time ratios PyTorch / cannl fma and
 * numpy / cannl fma (how many times faster cannl is) and cannl fma 1t / 2t (the two-thread
 * speedup), then GFLOP/s for every side; the targets follow as PASS / MISS lines. FLOP
 * counts are those of the contractions (2 per multiply-add, pointwise work not counted; see
 * flops()). The JSON lines (stdout, prefixed "json ", and with `--json FILE` that file) have every
 * median and best. `--quick` runs small sizes only, cannl with CANNL_THREADS=1 only (both modes)
 * and the python side in one process, in a few seconds (targets not evaluated). Exit 1 when a
 * cannl side fails; a missing python3-torch or numpy only leaves its columns empty. */
#include "cannl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_REPS = 200 };
static const double PEAK_GFLOPS = 212; /* per core, fma, single precision (issue 17) */

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Timing ------------------------------------------------------------------------------ */

typedef struct {
  double median_ms, best_ms;
  int reps;
} timing;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A warm-up run and a run that sizes the repetitions, then as many runs as fit in `budget`
 * seconds (3 to MAX_REPS); the median and best in ms. */
static cn_status measure(cn_routine *r, double budget, timing *t) {
  cn_status st = cn_routine_run(r);
  double start = now_seconds();
  if (st == CN_OK) st = cn_routine_run(r);
  double first = now_seconds() - start, times[MAX_REPS];
  int n = first > 0 ? (int)fmin(MAX_REPS, fmax(3, budget / first)) : MAX_REPS;
  for (int i = 0; i < n && st == CN_OK; i++) {
    start = now_seconds();
    st = cn_routine_run(r);
    times[i] = (now_seconds() - start) * 1e3;
  }
  if (st != CN_OK) return st;
  qsort(times, (size_t)n, sizeof *times, cmp_double);
  t->median_ms = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  t->best_ms = times[0];
  t->reps = n;
  return CN_OK;
}

/* ---- The cannl models (child side) ----------------------------------------------------------- */

/* A data tensor of the given rows holding pseudo-random values in [-1, 1). */
static cn_tensor *random_data(cn_graph *g, const char *label, const cn_dims *dims, uint64_t seed) {
  size_t count = 1;
  const cn_axes *rows[3] = {&dims->batch, &dims->input, &dims->output};
  for (int r = 0; r < 3; r++)
    for (int a = 0; a < rows[r]->n; a++) count *= (size_t)rows[r]->dims[a];
  double *v = malloc(count * sizeof *v);
  if (!v) return NULL;
  for (size_t i = 0; i < count; i++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    v[i] = (double)(seed >> 40) / (double)(1u << 23) - 1;
  }
  cn_tensor *t = cn_tensor_data(g, label, dims, v, count);
  free(v);
  return t;
}

static cn_tensor *op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}

static cn_tensor *relu(cn_graph *g, cn_tensor *a) {
  return a ? cn_tensor_apply(g, CN_OP_RELU, 1, &a) : NULL;
}

/* sum(t * t) / n over every axis of t. */
static cn_tensor *sum_squares(cn_graph *g, cn_tensor *t, int64_t n) {
  cn_tensor *s = t ? cn_tensor_einsum(g, "...|...->... ; ...|...->... => 0", CN_OP_ADD, CN_OP_MUL,
                                      2, (cn_tensor *[]){t, t})
                   : NULL;
  return op2(g, CN_OP_DIV, s, cn_tensor_number(g, (double)n));
}

/* Runs the init code of t's parameters once. */
static cn_status init_params(cn_graph *g, cn_tensor *t) {
  cn_asgn *init = t ? cn_graph_init_params(g, t) : NULL;
  cn_routine *r =
      init ? cn_routine_compile(cn_graph_ctx(g), init, CN_BACKEND_C, "gemm_init") : NULL;
  cn_status st = r ? cn_routine_run(r) : CN_ERR_INVALID;
  cn_routine_free(r);
  return st;
}

/* c = a b by the einsum spec, a and b data of output rows a_dims and b_dims (n axes each). */
static const cn_asgn *product_code(cn_graph *g, const char *spec, int n, const int64_t *a_dims,
                                   const int64_t *b_dims) {
  const cn_dims ad = {CN_AXES_NONE, CN_AXES_NONE, {n, a_dims, NULL}};
  const cn_dims bd = {CN_AXES_NONE, CN_AXES_NONE, {n, b_dims, NULL}};
  cn_tensor *a = random_data(g, "a", &ad, 1), *b = random_data(g, "b", &bd, 2);
  cn_tensor *c = a && b ? cn_tensor_einsum2(g, spec, a, b) : NULL;
  return c ? cn_graph_forward(g, c) : NULL;
}

static const cn_asgn *matmul_code(cn_graph *g, int64_t n) {
  const int64_t dims[2] = {n, n};
  return product_code(g, "ij;jk=>ik", 2, dims, dims);
}

/* c[n x n] = a[n x 64] b[64 x n]. */
static const cn_asgn *skinny_code(cn_graph *g, int64_t n) {
  return product_code(g, "ij;jk=>ik", 2, (const int64_t[]){n, 64}, (const int64_t[]){64, n});
}

/* Attention scores q k^T for size s: b = h = s / 16, q = k = s, d = s / 2 (s = 128: 8, 8, 128,
 * 64). */
static const cn_asgn *attention_code(cn_graph *g, int64_t s) {
  const int64_t dims[4] = {s / 16, s / 16, s, s / 2};
  return product_code(g, "bhqd;bhkd=>bhqk", 4, dims, dims);
}

/* The MLP 784-128-10 with relu, loss sum((f - y)^2) / batch, one SGD step (lr 0.01). */
static const cn_asgn *mlp_code(cn_graph *g, int64_t batch) {
  const int64_t in = 784, hidden = 128, out = 10;
  const cn_dims xd = {{1, &batch, NULL}, CN_AXES_NONE, {1, &in, NULL}};
  const cn_dims yd = {{1, &batch, NULL}, CN_AXES_NONE, {1, &out, NULL}};
  cn_tensor *x = random_data(g, "x", &xd, 1), *y = random_data(g, "y", &yd, 2);
  const cn_dims w1d = {CN_AXES_NONE, {1, &in, NULL}, {1, &hidden, NULL}};
  const cn_dims w2d = {CN_AXES_NONE, {1, &hidden, NULL}, {1, &out, NULL}};
  const cn_dims b1d = {CN_AXES_NONE, CN_AXES_NONE, {1, &hidden, NULL}};
  const cn_dims b2d = {CN_AXES_NONE, CN_AXES_NONE, {1, &out, NULL}};
  cn_tensor *w1 = cn_tensor_param(g, "w1", &w1d, NULL), *b1 = cn_tensor_param(g, "b1", &b1d, NULL);
  cn_tensor *w2 = cn_tensor_param(g, "w2", &w2d, NULL), *b2 = cn_tensor_param(g, "b2", &b2d, NULL);
  cn_tensor *h = w1 && x ? relu(g, op2(g, CN_OP_ADD, cn_tensor_matmul(g, w1, x), b1)) : NULL;
  cn_tensor *f = w2 && h ? op2(g, CN_OP_ADD, cn_tensor_matmul(g, w2, h), b2) : NULL;
  cn_tensor *loss = sum_squares(g, op2(g, CN_OP_SUB, f, y), batch);
  if (init_params(g, loss) != CN_OK) return NULL;
  const cn_sgd sgd = {cn_tensor_number(g, 0.01), 0, 0, false};
  cn_asgn *parts[2] = {cn_graph_grad_update(g, loss), NULL};
  parts[1] = parts[0] && sgd.learning_rate ? cn_graph_sgd_update(g, loss, &sgd) : NULL;
  return parts[1] ? cn_asgn_seq(cn_graph_ctx(g), 2, parts) : NULL;
}

/* conv 1->32 3x3 valid + bias, relu, conv 32->64 3x3 valid + bias, loss sum(y^2) / batch; forward
 * and backward, no update. */
static const cn_asgn *conv_code(cn_graph *g, int64_t batch) {
  const int64_t image[3] = {28, 28, 1}, k1[3] = {3, 3, 1}, k2[3] = {3, 3, 32}, c1 = 32, c2 = 64;
  const cn_dims xd = {{1, &batch, NULL}, CN_AXES_NONE, {3, image, NULL}};
  const cn_dims k1d = {CN_AXES_NONE, {3, k1, NULL}, {1, &c1, NULL}};
  const cn_dims k2d = {CN_AXES_NONE, {3, k2, NULL}, {1, &c2, NULL}};
  const cn_dims b1d = {CN_AXES_NONE, CN_AXES_NONE, {1, &c1, NULL}};
  const cn_dims b2d = {CN_AXES_NONE, CN_AXES_NONE, {1, &c2, NULL}};
  cn_tensor *x = random_data(g, "x", &xd, 1);
  cn_tensor *w1 = cn_tensor_param(g, "k1", &k1d, NULL), *b1 = cn_tensor_param(g, "b1", &b1d, NULL);
  cn_tensor *w2 = cn_tensor_param(g, "k2", &k2d, NULL), *b2 = cn_tensor_param(g, "b2", &b2d, NULL);
  const cn_conv2d valid = {1, 1, true};
  cn_tensor *h = x && w1 && b1 ? relu(g, cn_tensor_conv2d(g, x, w1, b1, &valid)) : NULL;
  cn_tensor *y = h && w2 && b2 ? cn_tensor_conv2d(g, h, w2, b2, &valid) : NULL;
  cn_tensor *loss = sum_squares(g, y, batch);
  if (init_params(g, loss) != CN_OK) return NULL;
  return cn_graph_grad_update(g, loss);
}

/* conv 64->64 3x3 padded (the output as large as the input) + bias, forward only, batch 8 of
 * side x side images. */
static const cn_asgn *conv64_code(cn_graph *g, int64_t side) {
  const int64_t batch = 8, image[3] = {side, side, 64}, k[3] = {3, 3, 64}, c = 64;
  const cn_dims xd = {{1, &batch, NULL}, CN_AXES_NONE, {3, image, NULL}};
  const cn_dims kd = {CN_AXES_NONE, {3, k, NULL}, {1, &c, NULL}};
  const cn_dims bd = {CN_AXES_NONE, CN_AXES_NONE, {1, &c, NULL}};
  cn_tensor *x = random_data(g, "x", &xd, 1);
  cn_tensor *w = cn_tensor_param(g, "k", &kd, NULL), *b = cn_tensor_param(g, "b", &bd, NULL);
  cn_tensor *y = x && w && b ? cn_tensor_conv2d(g, x, w, b, NULL) : NULL;
  if (init_params(g, y) != CN_OK) return NULL;
  return cn_graph_forward(g, y);
}

/* The FLOPs of one run: 2 per multiply-add of the contractions; pointwise work (bias, relu, the
 * loss, SGD) is not counted. MLP, batch B: forward x w1 (B x 784 x 128) and h w2 (B x 128 x 10),
 * backward the gradients of w2 and h (B x 128 x 10 each) and of w1 (B x 784 x 128; x is data, no
 * gradient): 2 B (2 * 784 * 128 + 3 * 128 * 10). conv, batch B: conv1 (26 x 26 outputs x 32
 * channels x 9 taps per image) forward and its kernel's gradient, conv2 (24 x 24 x 64 x 9 * 32)
 * forward and the gradients of its kernel and of its input: 2 B (2 * 26^2 * 32 * 9 +
 * 3 * 24^2 * 64 * 288). conv64: 2 * 8 * side^2 * 64 * 64 * 9 (padded cells counted, as in
 * PyTorch's count). */
static double flops(const char *kind, int64_t size) {
  double n = (double)size;
  if (strcmp(kind, "matmul") == 0) return 2 * n * n * n;
  if (strcmp(kind, "skinny") == 0) return 2 * n * n * 64;
  if (strcmp(kind, "attention") == 0) return 2 * (n / 16) * (n / 16) * n * n * (n / 2);
  if (strcmp(kind, "mlp") == 0) return 2 * n * (2.0 * 784 * 128 + 3.0 * 128 * 10);
  if (strcmp(kind, "conv") == 0) return 2 * n * (2.0 * 26 * 26 * 32 * 9 + 3.0 * 24 * 24 * 64 * 288);
  if (strcmp(kind, "conv64") == 0) return 2 * 8 * n * n * 64 * 64 * 9;
  return NAN;
}

/* ---- A child: one workload of cannl, at the thread count and mode of the environment -------- */

typedef const cn_asgn *(*code_fn)(cn_graph *g, int64_t size);
static const struct {
  const char *kind;
  code_fn code;
} models[] = {{"matmul", matmul_code}, {"skinny", skinny_code}, {"attention", attention_code},
              {"mlp", mlp_code},       {"conv", conv_code},     {"conv64", conv64_code}};

static int child(const char *kind, int64_t size, double budget) {
  const char *threads = getenv("CANNL_THREADS"), *exact = getenv("CANNL_EXACT");
  printf("env CANNL_THREADS=%s CANNL_EXACT=%s\n", threads ? threads : "unset",
         exact ? exact : "unset");
  code_fn code = NULL;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(kind, models[i].kind) == 0) code = models[i].code;
  if (!code) {
    fprintf(stderr, "bench_gemm: unknown workload %s\n", kind);
    return 1;
  }
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const cn_asgn *asgn = g ? code(g, size) : NULL;
  cn_routine *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, kind) : NULL;
  timing t;
  int rc = !r || measure(r, budget, &t) != CN_OK;
  if (rc)
    fprintf(stderr, "bench_gemm: %s: %s\n", kind,
            ctx && *cn_ctx_error(ctx) ? cn_ctx_error(ctx) : "out of memory");
  else
    printf("cannl median_ms=%.6f best_ms=%.6f reps=%d\n", t.median_ms, t.best_ms, t.reps);
  cn_ctx_destroy(ctx);
  return rc;
}

/* ---- The parent: children, tables, JSON, targets --------------------------------------------- */

typedef struct {
  bool have;
  timing t;
} cell;

typedef struct {
  const char *name, *kind;
  int64_t full, quick; /* the size argument of the full and the --quick run */
  int64_t size;
  cell cannl[2][2], torch[2], numpy; /* cannl[exact][threads - 1], torch[threads - 1] */
  char env[2][2][64];                /* the children's CANNL_THREADS and CANNL_EXACT */
} row;

static row rows[] = {
    {.name = "matmul64", .kind = "matmul", .full = 64, .quick = 16},
    {.name = "matmul256", .kind = "matmul", .full = 256, .quick = 32},
    {.name = "matmul512", .kind = "matmul", .full = 512, .quick = 48},
    {.name = "matmul1024", .kind = "matmul", .full = 1024, .quick = 64},
    {.name = "matmul2048", .kind = "matmul", .full = 2048, .quick = 96},
    {.name = "skinny", .kind = "skinny", .full = 4096, .quick = 128},
    {.name = "attention", .kind = "attention", .full = 128, .quick = 32},
    {.name = "mlp", .kind = "mlp", .full = 128, .quick = 8},
    {.name = "conv", .kind = "conv", .full = 32, .quick = 1},
    {.name = "conv64", .kind = "conv64", .full = 56, .quick = 8},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };
static const char *const mode_names[2] = {"fma", "exact"};
static bool torch_missing, numpy_missing;
static char versions[128]; /* the python side's `versions ...` line */

static row *find_row(const char *name) {
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  return NULL;
}

/* Reads one line of a child (mode, threads index ti) or of the python side into r. */
static void parse_line(row *r, int mode, int ti, const char *line) {
  char name[32];
  timing t;
  if (strncmp(line, "env ", 4) == 0)
    snprintf(r->env[mode][ti], sizeof r->env[mode][ti], "%.*s", (int)strcspn(line + 4, "\n"),
             line + 4);
  if (sscanf(line, "%31s median_ms=%lf best_ms=%lf reps=%d", name, &t.median_ms, &t.best_ms,
             &t.reps) != 4)
    return;
  cell *c = strcmp(name, "cannl") == 0    ? &r->cannl[mode][ti]
            : strcmp(name, "torch1") == 0 ? &r->torch[0]
            : strcmp(name, "torch2") == 0 ? &r->torch[1]
            : strcmp(name, "numpy") == 0  ? &r->numpy
                                          : NULL;
  if (c) *c = (cell){true, t};
}

/* Runs a command and parses its output: into r (mode, threads index ti), or with r NULL (the
 * python side) into the row each line names first. False if the command fails. */
static bool run_command(const char *cmd, row *r, int mode, int ti) {
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[512], name[32];
  int skip;
  while (fgets(line, sizeof line, p)) {
    torch_missing |= strncmp(line, "torch=missing", 13) == 0;
    numpy_missing |= strncmp(line, "numpy=missing", 13) == 0;
    if (strncmp(line, "versions ", 9) == 0)
      snprintf(versions, sizeof versions, "%.*s", (int)strcspn(line + 9, "\n"), line + 9);
    if (r)
      parse_line(r, mode, ti, line);
    else if (sscanf(line, "%31s %n", name, &skip) == 1 && find_row(name))
      parse_line(find_row(name), 0, 0, line + skip);
  }
  return pclose(p) == 0;
}

/* The cannl children of one workload: fma then exact, each CANNL_THREADS=1 then 2 (1 only with
 * --quick). */
static bool run_cannl(row *r, const char *self, double budget, bool quick) {
  char cmd[PATH_MAX + 128];
  bool ok = true;
  for (int mode = 0; mode < 2; mode++)
    for (int ti = 0; ti < (quick ? 1 : 2); ti++) {
      snprintf(cmd, sizeof cmd, "CANNL_THREADS=%d CANNL_EXACT=%d '%s' --run %s %lld %g", ti + 1,
               mode, self, r->kind, (long long)r->size, budget);
      if (!run_command(cmd, r, mode, ti)) {
        fprintf(stderr, "bench_gemm: %s: the cannl side failed (%s, CANNL_THREADS=%d)\n", r->name,
                mode_names[mode], ti + 1);
        ok = false;
      }
    }
  return ok;
}

/* The python side of rows[first .. last), in one process. */
static void run_python(const char *script, int first, int last, double budget) {
  char cmd[PATH_MAX + 1024];
  int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %g", script, budget);
  for (int i = first; i < last; i++)
    len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s %s %lld", rows[i].name, rows[i].kind,
                    (long long)rows[i].size);
  if (!run_command(cmd, NULL, 0, 0))
    fprintf(stderr, "bench_gemm: the python side failed: %s\n", cmd);
}

/* a / b of the medians, NAN when either is missing. */
static double ratio(const cell *a, const cell *b) {
  return a->have && b->have && b->t.median_ms > 0 ? a->t.median_ms / b->t.median_ms : NAN;
}

/* GFLOP/s of a cell of row r, NAN when missing. */
static double gflops(const row *r, const cell *c) {
  return c->have && c->t.median_ms > 0 ? flops(r->kind, r->size) / c->t.median_ms * 1e-6 : NAN;
}

static const char *fmt(char *buf, size_t size, double v) {
  if (isnan(v))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%.4g", v);
  return buf;
}

/* The cells of a row in column order: fma 1t, fma 2t, exact 1t, exact 2t, torch 1t, torch 2t,
 * numpy. */
static void row_cells(const row *r, const cell *cells[7]) {
  const cell *c[7] = {&r->cannl[0][0], &r->cannl[0][1], &r->cannl[1][0], &r->cannl[1][1],
                      &r->torch[0],    &r->torch[1],    &r->numpy};
  memcpy(cells, c, sizeof c);
}

static void print_tables(void) {
  char b[12][24];
  printf("\n%-11s %9s %9s %9s %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", "workload", "fma 1t",
         "fma 2t", "exact 1t", "exact 2t", "torch 1t", "torch 2t", "numpy 1t", "GFLOP/s", "pt/c 1t",
         "pt/c 2t", "np/c", "2t/1t");
  for (int i = 0; i < N_ROWS; i++) {
    const row *r = &rows[i];
    const cell *c[7];
    row_cells(r, c);
    for (int k = 0; k < 7; k++) fmt(b[k], 24, c[k]->have ? c[k]->t.median_ms : NAN);
    printf("%-11s %9s %9s %9s %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", r->name, b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], fmt(b[7], 24, gflops(r, c[0])),
           fmt(b[8], 24, ratio(&r->torch[0], c[0])), fmt(b[9], 24, ratio(&r->torch[1], c[1])),
           fmt(b[10], 24, ratio(&r->numpy, c[0])), fmt(b[11], 24, ratio(c[0], c[1])));
  }
  printf("(ms, medians; cannl fma = CANNL_EXACT=0, exact = CANNL_EXACT=1; GFLOP/s of cannl fma 1t;"
         "\n pt/c = PyTorch / cannl fma, np/c = numpy 1t / cannl fma 1t: how many times faster "
         "cannl is;\n 2t/1t = cannl fma 1t / cannl fma 2t: the two-thread speedup)\n");
  printf("\n%-11s %12s %9s %9s %9s %9s %9s %9s %9s\n", "GFLOP/s", "GFLOP", "fma 1t", "fma 2t",
         "exact 1t", "exact 2t", "torch 1t", "torch 2t", "numpy 1t");
  for (int i = 0; i < N_ROWS; i++) {
    const row *r = &rows[i];
    const cell *c[7];
    row_cells(r, c);
    for (int k = 0; k < 7; k++) fmt(b[k], 24, gflops(r, c[k]));
    printf("%-11s %12.4g %9s %9s %9s %9s %9s %9s %9s\n", r->name, flops(r->kind, r->size) * 1e-9,
           b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
  }
}

/* Appends `,"key":value` (null when missing) to the JSON text. */
static void json_num(char *buf, size_t size, const char *key, double v) {
  size_t len = strlen(buf);
  if (isnan(v))
    snprintf(buf + len, size - len, ",\"%s\":null", key);
  else
    snprintf(buf + len, size - len, ",\"%s\":%.6g", key, v);
}

static void json_line(const row *r, FILE *file) {
  char buf[2048], env[4][72];
  for (int k = 0; k < 4; k++)
    if (r->env[k / 2][k % 2][0])
      snprintf(env[k], sizeof env[k], "\"%s\"", r->env[k / 2][k % 2]);
    else
      snprintf(env[k], sizeof env[k], "null");
  snprintf(buf, sizeof buf,
           "{\"bench\":\"gemm\",\"workload\":\"%s\",\"kind\":\"%s\",\"size\":%lld,\"flops\":%.0f,"
           "\"cannl_env\":[%s,%s,%s,%s]",
           r->name, r->kind, (long long)r->size, flops(r->kind, r->size), env[0], env[1], env[2],
           env[3]);
  const char *keys[7] = {"fma_1t",   "fma_2t",   "exact_1t", "exact_2t",
                         "torch_1t", "torch_2t", "numpy"};
  const cell *c[7];
  row_cells(r, c);
  for (int k = 0; k < 7; k++) {
    char key[32];
    snprintf(key, sizeof key, "%s_ms", keys[k]);
    json_num(buf, sizeof buf, key, c[k]->have ? c[k]->t.median_ms : NAN);
    snprintf(key, sizeof key, "%s_best_ms", keys[k]);
    json_num(buf, sizeof buf, key, c[k]->have ? c[k]->t.best_ms : NAN);
    snprintf(key, sizeof key, "%s_gflops", keys[k]);
    json_num(buf, sizeof buf, key, gflops(r, c[k]));
  }
  json_num(buf, sizeof buf, "torch_over_cannl_1t", ratio(&r->torch[0], c[0]));
  json_num(buf, sizeof buf, "torch_over_cannl_2t", ratio(&r->torch[1], c[1]));
  json_num(buf, sizeof buf, "numpy_over_cannl_1t", ratio(&r->numpy, c[0]));
  json_num(buf, sizeof buf, "cannl_speedup_2t", ratio(c[0], c[1]));
  size_t len = strlen(buf);
  snprintf(buf + len, sizeof buf - len, "}");
  printf("json %s\n", buf);
  if (file) fprintf(file, "%s\n", buf);
}

/* A PASS / MISS line: value >= goal. */
static void target(const char *what, double value, double goal) {
  if (isnan(value))
    printf("MISS  %-40s       n/a  target >= %g (a side is missing)\n", what, goal);
  else
    printf("%s  %-40s %9.3g  target >= %g\n", value >= goal ? "PASS" : "MISS", what, value, goal);
}

/* The targets of issue 17 (ratios of medians in this run, cannl in fma mode). */
static void print_targets(void) {
  char what[64];
  printf("\ntargets (issue 17; ratios of medians, cannl fma):\n");
  for (int n = 1024; n <= 2048; n *= 2) {
    snprintf(what, sizeof what, "matmul%d", n);
    row *r = find_row(what);
    snprintf(what, sizeof what, "matmul%d: numpy 1t / cannl 1t", n);
    target(what, ratio(&r->numpy, &r->cannl[0][0]), 1.0);
    snprintf(what, sizeof what, "matmul%d: PyTorch 1t / cannl 1t", n);
    target(what, ratio(&r->torch[0], &r->cannl[0][0]), 0.8);
    snprintf(what, sizeof what, "matmul%d: cannl 1t / cannl 2t", n);
    target(what, ratio(&r->cannl[0][0], &r->cannl[0][1]), 1.8);
  }
  row *mlp = find_row("mlp"), *conv = find_row("conv");
  target("mlp: PyTorch 1t / cannl 1t", ratio(&mlp->torch[0], &mlp->cannl[0][0]), 1.5);
  target("mlp: PyTorch 2t / cannl 2t", ratio(&mlp->torch[1], &mlp->cannl[0][1]), 1.5);
  target("conv: PyTorch 1t / cannl 1t", ratio(&conv->torch[0], &conv->cannl[0][0]), 1.0);
  target("conv: PyTorch 2t / cannl 2t", ratio(&conv->torch[1], &conv->cannl[0][1]), 1.0);
  printf("\nfraction of peak (%g GFLOP/s per core), cannl fma 1t:\n", PEAK_GFLOPS);
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].name, "matmul1024") == 0 || strcmp(rows[i].name, "matmul2048") == 0) {
      double g = gflops(&rows[i], &rows[i].cannl[0][0]);
      if (isnan(g))
        printf("peak  %-40s       n/a\n", rows[i].name);
      else
        printf("peak  %-40s %8.1f%%  (%.2f GFLOP/s)\n", rows[i].name, 100 * g / PEAK_GFLOPS, g);
    }
}

/* The path of bench_gemm.py, next to this source file. */
static bool script_path(char *buf, size_t size) {
  const char *file = __FILE__, *slash = strrchr(file, '/');
  int dir = slash ? (int)(slash - file + 1) : 0;
  return !strchr(file, '\'') && snprintf(buf, size, "%.*sbench_gemm.py", dir, file) < (int)size;
}

static int usage(void) {
  fputs("usage: bench_gemm [--quick] [--json FILE]\n", stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--run") == 0)
    return child(argv[2], strtoll(argv[3], NULL, 10), strtod(argv[4], NULL));
  bool quick = false;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json = argv[++i];
    else
      return usage();
  }
  char self[PATH_MAX], script[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0 || strchr(self, '\'') || !script_path(script, sizeof script)) {
    fputs("bench_gemm: cannot name this program or bench_gemm.py\n", stderr);
    return 1;
  }
  self[len] = '\0';
  FILE *file = json ? fopen(json, "w") : NULL;
  if (json && !file) {
    perror(json);
    return 1;
  }
  const char *env = getenv("CANNL_THREADS"), *exact = getenv("CANNL_EXACT");
  printf("bench_gemm%s: cannl on generated C in children with CANNL_EXACT=0 and 1, "
         "CANNL_THREADS=1%s (this environment's CANNL_THREADS: %s, CANNL_EXACT: %s, not used), "
         "PyTorch with 1 and 2 threads, numpy with 1\n",
         quick ? " --quick" : "", quick ? "" : " and 2", env ? env : "unset",
         exact ? exact : "unset");
  bool ok = true;
  double budget = quick ? 0.02 : 1.0;
  for (int i = 0; i < N_ROWS; i++) {
    rows[i].size = quick ? rows[i].quick : rows[i].full;
    printf("running %s (size %lld, %.4g GFLOP)\n", rows[i].name, (long long)rows[i].size,
           flops(rows[i].kind, rows[i].size) * 1e-9);
    ok = run_cannl(&rows[i], self, budget, quick) && ok;
    if (!quick) run_python(script, i, i + 1, budget);
  }
  if (quick) run_python(script, 0, N_ROWS, budget);
  if (torch_missing) printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  if (numpy_missing) printf("numpy: python3-numpy is not installed (`make bench` installs it)\n");
  printf("\npython side: %s\ncannl children:", versions[0] ? versions : "did not run");
  for (int k = 0; k < 4; k++)
    if (rows[0].env[k / 2][k % 2][0]) printf(" [%s]", rows[0].env[k / 2][k % 2]);
  printf("\n");
  print_tables();
  for (int i = 0; i < N_ROWS; i++) json_line(&rows[i], file);
  if (file && fclose(file) != 0) perror(json), ok = false;
  if (quick)
    printf("\ntargets: not evaluated with --quick (small sizes)\n");
  else
    print_targets();
  return ok ? 0 : 1;
}
