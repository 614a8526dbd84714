/* Benchmark (issue 16): cannl's generated C against the same models in PyTorch (one and two
 * threads) and numpy, in one run. Workloads (single precision): matmul 256 / 1024 / 2048 (einsum
 * `ij;jk=>ik`), the MLP 784-128-10 SGD step (batch 128), conv 1->32->64 3x3 valid forward +
 * backward (batch 32, 28x28), softmax over 1M values, the stream c = a + 3*b over 4M values (also
 * against a plain C loop of this binary, -O3), the half-moons training step (demo/moons.h) and
 * the cold and warm JIT of the moons model (compile + init; cold: a fresh empty CANNL_CACHE_DIR,
 * warm: the same cache again).
 *
 * Each workload runs in processes of its own: this program again (`--run NAME SIZE BUDGET`) with
 * CANNL_THREADS=1 and then 2 (the rest of the environment passed through), then bench_perf.py
 * (next to this file, by /usr/bin/python3) for PyTorch and numpy. Every side warms up once and
 * times repetitions (clock_gettime, monotonic) for a budget of time, at least 3; the table shows
 * medians (JSON has the best too), ratios are PyTorch time / cannl time at the same thread count,
 * and the targets are printed as PASS / MISS lines. The JSON lines (stdout, prefixed
 * "json ", and with `--json FILE` that file) have every median and best. `--quick` runs small
 * sizes only, cannl with CANNL_THREADS=1 only and the python side in one process, in a few
 * seconds (targets not evaluated). Exit 1 when a cannl side fails; a missing python3-torch or
 * numpy only leaves its columns empty. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "../demo/moons.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_REPS = 200 };

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Timing ------------------------------------------------------------------------------ */

typedef cn_status (*run_fn)(void *arg);
typedef struct {
  double median_ms, best_ms;
  int reps;
} timing;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median and best of n times (sorted in place). */
static void summarize(double *times, int n, timing *t) {
  qsort(times, (size_t)n, sizeof *times, cmp_double);
  t->median_ms = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  t->best_ms = times[0];
  t->reps = n;
}

/* A warm-up run and a run that sizes the repetitions, then as many runs as fit in `budget`
 * seconds (3 to MAX_REPS); times in ms divided by `per_run` (the steps one run does). */
static cn_status measure(run_fn fn, void *arg, double budget, int per_run, timing *t) {
  cn_status st = fn(arg);
  double start = now_seconds();
  if (st == CN_OK) st = fn(arg);
  double first = now_seconds() - start, times[MAX_REPS];
  int reps = first > 0 ? (int)fmin(MAX_REPS, fmax(3, budget / first)) : MAX_REPS;
  for (int r = 0; r < reps && st == CN_OK; r++) {
    start = now_seconds();
    st = fn(arg);
    times[r] = (now_seconds() - start) * 1e3 / per_run;
  }
  if (st == CN_OK) summarize(times, reps, t);
  return st;
}

static void print_timing(const char *name, const timing *t) {
  printf("%s median_ms=%.6f best_ms=%.6f reps=%d\n", name, t->median_ms, t->best_ms, t->reps);
}

/* ---- The cannl models (child side) ----------------------------------------------------------- */

static cn_status run_routine(void *routine) {
  return cn_routine_run(routine);
}

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

/* Runs the init code of loss's parameters once. */
static cn_status init_params(cn_graph *g, cn_tensor *loss) {
  cn_asgn *init = loss ? cn_graph_init_params(g, loss) : NULL;
  cn_routine *r =
      init ? cn_routine_compile(cn_graph_ctx(g), init, CN_BACKEND_C, "perf_init") : NULL;
  cn_status st = r ? cn_routine_run(r) : CN_ERR_INVALID;
  cn_routine_free(r);
  return st;
}

static const cn_asgn *matmul_code(cn_graph *g, int64_t n) {
  const int64_t dims[2] = {n, n};
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, dims, NULL}};
  cn_tensor *a = random_data(g, "a", &d, 1), *b = random_data(g, "b", &d, 2);
  cn_tensor *c = a && b ? cn_tensor_einsum2(g, "ij;jk=>ik", a, b) : NULL;
  return c ? cn_graph_forward(g, c) : NULL;
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

static const cn_asgn *softmax_code(cn_graph *g, int64_t n) {
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *x = random_data(g, "x", &d, 1);
  cn_tensor *s = x ? cn_tensor_softmax(g, x) : NULL;
  return s ? cn_graph_forward(g, s) : NULL;
}

static const cn_asgn *stream_code(cn_graph *g, int64_t n) {
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *a = random_data(g, "a", &d, 1), *b = random_data(g, "b", &d, 2);
  cn_tensor *c = op2(g, CN_OP_ADD, a, op2(g, CN_OP_MUL, cn_tensor_number(g, 3), b));
  return c ? cn_graph_forward(g, c) : NULL;
}

/* ---- The plain C stream loop ------------------------------------------------------------------
 */

typedef struct {
  float *a, *b, *c;
  int64_t n;
} stream_arrays;

/* The baseline: gcc compiles it with -O3 whatever the build type (clang, without the attribute,
 * at the build's level, -O2 in RelWithDebInfo, which vectorizes this loop too). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static void
stream_loop(float *restrict c, const float *restrict a, const float *restrict b, int64_t n) {
  for (int64_t i = 0; i < n; i++) c[i] = a[i] + 3.0f * b[i];
}

static cn_status run_stream_loop(void *arg) {
  stream_arrays *s = arg;
  stream_loop(s->c, s->a, s->b, s->n);
  return CN_OK;
}

static int time_plain_stream(int64_t n, double budget) {
  stream_arrays s = {malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float)),
                     malloc((size_t)n * sizeof(float)), n};
  int rc = 1;
  if (s.a && s.b && s.c) {
    for (int64_t i = 0; i < n; i++) s.a[i] = (float)(i % 7), s.b[i] = (float)(i % 5);
    timing t;
    measure(run_stream_loop, &s, budget, 1, &t);
    print_timing("plainc", &t);
    rc = 0;
  } else {
    fputs("bench_perf: out of memory\n", stderr);
  }
  free(s.a), free(s.b), free(s.c);
  return rc;
}

/* ---- The moons step and the JIT of its model ------------------------------------------------- */

typedef struct {
  moons m;
  int64_t step;
} moons_run;

/* One epoch: MOONS_BATCHES steps, each reading its loss as the demo does. */
static cn_status run_moons_epoch(void *arg) {
  moons_run *r = arg;
  cn_status st = CN_OK;
  double loss;
  for (int s = 0; s < MOONS_BATCHES && st == CN_OK; s++, r->step++)
    st = moons_train_step(&r->m, r->step % ((int64_t)MOONS_EPOCHS * MOONS_BATCHES), &loss);
  return st;
}

static int time_moons(double budget) {
  static moons_run r;
  const moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_C};
  timing t;
  cn_status st = moons_build(&r.m, &cfg);
  if (st == CN_OK) st = measure(run_moons_epoch, &r, budget, MOONS_BATCHES, &t);
  if (st != CN_OK)
    fprintf(stderr, "bench_perf: moons: %s\n", r.m.ctx ? cn_ctx_error(r.m.ctx) : "out of memory");
  else
    print_timing("cannl", &t);
  moons_destroy(&r.m);
  return st != CN_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* moons_build (compile of the init and step routines, init run) timed once; false on failure. */
static bool time_build(double *ms) {
  static moons m;
  const moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_C};
  double start = now_seconds();
  cn_status st = moons_build(&m, &cfg);
  *ms = (now_seconds() - start) * 1e3;
  if (st != CN_OK)
    fprintf(stderr, "bench_perf: jit: %s\n", m.ctx ? cn_ctx_error(m.ctx) : "out of memory");
  moons_destroy(&m);
  return st == CN_OK;
}

/* `reps` times: a cold build in a fresh empty cache directory, then a warm one on that cache.
 * Prints the cold times as "cannl" and the warm ones as "warm". */
static int time_jit(int reps) {
  double cold[MAX_REPS], warm[MAX_REPS];
  const char *tmp = getenv("TMPDIR");
  bool ok = reps > 0 && reps <= MAX_REPS;
  for (int r = 0; r < reps && ok; r++) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/cannl-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || setenv("CANNL_CACHE_DIR", dir, 1) != 0) {
      perror("bench_perf: jit: cache directory");
      return 1;
    }
    ok = time_build(&cold[r]) && time_build(&warm[r]);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  if (!ok) return 1;
  timing c, w;
  summarize(cold, reps, &c);
  summarize(warm, reps, &w);
  print_timing("cannl", &c);
  print_timing("warm", &w);
  return 0;
}

/* ---- A child: one workload of cannl, at the thread count of the environment ------------------ */

typedef const cn_asgn *(*code_fn)(cn_graph *g, int64_t size);
static const struct {
  const char *kind;
  code_fn code;
} models[] = {{"matmul", matmul_code},
              {"mlp", mlp_code},
              {"conv", conv_code},
              {"softmax", softmax_code},
              {"stream", stream_code}};

static int child(const char *kind, int64_t size, double budget) {
  printf("threads=%s\n", getenv("CANNL_THREADS") ? getenv("CANNL_THREADS") : "unset");
  if (strcmp(kind, "moons") == 0) return time_moons(budget);
  if (strcmp(kind, "jit") == 0) return time_jit((int)size);
  code_fn code = NULL;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(kind, models[i].kind) == 0) code = models[i].code;
  if (!code) {
    fprintf(stderr, "bench_perf: unknown workload %s\n", kind);
    return 1;
  }
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const cn_asgn *asgn = g ? code(g, size) : NULL;
  cn_routine *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, kind) : NULL;
  timing t;
  int rc = !r || measure(run_routine, r, budget, 1, &t) != CN_OK;
  if (rc)
    fprintf(stderr, "bench_perf: %s: %s\n", kind,
            ctx && *cn_ctx_error(ctx) ? cn_ctx_error(ctx) : "out of memory");
  else
    print_timing("cannl", &t);
  cn_ctx_destroy(ctx);
  if (!rc && strcmp(kind, "stream") == 0) rc = time_plain_stream(size, budget);
  return rc;
}

/* ---- The parent: children, table, JSON, targets ---------------------------------------------- */

typedef struct {
  bool have;
  timing t;
} cell;

typedef struct {
  const char *name, *kind;
  int64_t full, quick; /* the size argument of the full and the --quick run */
  int64_t size;
  cell cannl[2], warm[2], plainc[2], torch[2], numpy; /* [threads - 1] */
  char threads[2][32];
} row;

static row rows[] = {
    {.name = "matmul256", .kind = "matmul", .full = 256, .quick = 32},
    {.name = "matmul1024", .kind = "matmul", .full = 1024, .quick = 64},
    {.name = "matmul2048", .kind = "matmul", .full = 2048, .quick = 96},
    {.name = "mlp", .kind = "mlp", .full = 128, .quick = 8},
    {.name = "conv", .kind = "conv", .full = 32, .quick = 1},
    {.name = "softmax", .kind = "softmax", .full = 1 << 20, .quick = 1 << 12},
    {.name = "stream", .kind = "stream", .full = 4 << 20, .quick = 1 << 14},
    {.name = "moons", .kind = "moons", .full = MOONS_BATCHES, .quick = MOONS_BATCHES},
    {.name = "jit", .kind = "jit", .full = 3, .quick = 1},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };
static bool torch_missing, numpy_missing;
static char versions[128]; /* the python side's `versions ...` line */

static row *find_row(const char *name) {
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  return NULL;
}

/* Reads the `NAME median_ms=.. best_ms=.. reps=..` lines of a child into r (threads index ti). */
static void parse_line(row *r, int ti, const char *line) {
  char name[32];
  timing t;
  if (sscanf(line, "threads=%31s", name) == 1)
    snprintf(r->threads[ti], sizeof r->threads[ti], "%s", name);
  if (sscanf(line, "%31s median_ms=%lf best_ms=%lf reps=%d", name, &t.median_ms, &t.best_ms,
             &t.reps) != 4)
    return;
  cell *c = strcmp(name, "cannl") == 0    ? &r->cannl[ti]
            : strcmp(name, "warm") == 0   ? &r->warm[ti]
            : strcmp(name, "plainc") == 0 ? &r->plainc[ti]
            : strcmp(name, "torch1") == 0 ? &r->torch[0]
            : strcmp(name, "torch2") == 0 ? &r->torch[1]
            : strcmp(name, "numpy") == 0  ? &r->numpy
                                          : NULL;
  if (c) *c = (cell){true, t};
}

/* Runs a command and parses its output: into r (threads index ti), or with r NULL (the python
 * side) into the row each line names first. False if the command fails. */
static bool run_command(const char *cmd, row *r, int ti) {
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
      parse_line(r, ti, line);
    else if (sscanf(line, "%31s %n", name, &skip) == 1 && find_row(name))
      parse_line(find_row(name), 0, line + skip);
  }
  return pclose(p) == 0;
}

/* The cannl children of one workload: CANNL_THREADS=1, then 2 (1 only with --quick). */
static bool run_cannl(row *r, const char *self, double budget, bool quick) {
  char cmd[PATH_MAX + 128];
  bool ok = true;
  for (int ti = 0; ti < (quick ? 1 : 2); ti++) {
    snprintf(cmd, sizeof cmd, "CANNL_THREADS=%d '%s' --run %s %lld %g", ti + 1, self, r->kind,
             (long long)r->size, budget);
    if (!run_command(cmd, r, ti)) {
      fprintf(stderr, "bench_perf: %s: the cannl side failed (CANNL_THREADS=%d)\n", r->name,
              ti + 1);
      ok = false;
    }
  }
  return ok;
}

/* The python side of rows[first .. last) (every row but jit), in one process. */
static void run_python(const char *script, int first, int last, double budget) {
  char cmd[PATH_MAX + 1024];
  int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %g", script, budget), head = len;
  for (int i = first; i < last; i++)
    if (strcmp(rows[i].kind, "jit") != 0)
      len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s %s %lld", rows[i].name,
                      rows[i].kind, (long long)rows[i].size);
  if (len > head && !run_command(cmd, NULL, 0))
    fprintf(stderr, "bench_perf: the python side failed: %s\n", cmd);
}

/* a / b of the medians, NAN when either is missing. */
static double ratio(const cell *a, const cell *b) {
  return a->have && b->have && b->t.median_ms > 0 ? a->t.median_ms / b->t.median_ms : NAN;
}

static const char *fmt_ms(char *buf, size_t size, const cell *c) {
  if (c->have)
    snprintf(buf, size, "%.4g", c->t.median_ms);
  else
    snprintf(buf, size, "-");
  return buf;
}

/* The throughput note of a row: GFLOP/s of matmul, GB/s of stream and the plain C loop. */
static void note(const row *r, char *buf, size_t size) {
  double n = (double)r->size;
  buf[0] = '\0';
  if (strcmp(r->kind, "matmul") == 0)
    for (int ti = 0; ti < 2; ti++)
      if (r->cannl[ti].have) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%.2f GFLOP/s %dt", ti ? ", " : "",
                 2 * n * n * n / r->cannl[ti].t.median_ms * 1e-6, ti + 1);
      }
  if (strcmp(r->kind, "stream") == 0 && r->cannl[0].have && r->plainc[0].have)
    snprintf(buf, size, "%.2f GB/s; plain C %.4g ms, %.2f GB/s",
             12 * n / r->cannl[0].t.median_ms * 1e-6, r->plainc[0].t.median_ms,
             12 * n / r->plainc[0].t.median_ms * 1e-6);
  if (strcmp(r->kind, "moons") == 0) snprintf(buf, size, "per step");
}

static void print_line(const char *name, const cell *c, const cell *t, const cell *np,
                       const char *extra) {
  char b[7][24];
  snprintf(b[5], sizeof b[5], "%.3g", ratio(&t[0], &c[0]));
  snprintf(b[6], sizeof b[6], "%.3g", ratio(&t[1], &c[1]));
  printf("%-11s %10s %10s %10s %10s %10s %8s %8s  %s\n", name, fmt_ms(b[0], 24, &c[0]),
         fmt_ms(b[1], 24, &c[1]), fmt_ms(b[2], 24, &t[0]), fmt_ms(b[3], 24, &t[1]),
         fmt_ms(b[4], 24, np), isnan(ratio(&t[0], &c[0])) ? "-" : b[5],
         isnan(ratio(&t[1], &c[1])) ? "-" : b[6], extra);
}

static void print_table(void) {
  const cell none[2] = {{false, {0, 0, 0}}, {false, {0, 0, 0}}};
  printf("\n%-11s %10s %10s %10s %10s %10s %8s %8s  %s\n", "workload", "cannl 1t", "cannl 2t",
         "torch 1t", "torch 2t", "numpy", "ratio 1t", "ratio 2t",
         "(ms, medians; ratio = PyTorch / cannl)");
  for (int i = 0; i < N_ROWS; i++) {
    const row *r = &rows[i];
    char extra[128];
    note(r, extra, sizeof extra);
    if (strcmp(r->kind, "jit") == 0) {
      print_line("jit cold", r->cannl, none, &none[0], "moons model: compile + init, empty cache");
      print_line("jit warm", r->warm, none, &none[0], "the same cache again");
    } else {
      print_line(r->name, r->cannl, r->torch, &r->numpy, extra);
    }
  }
}

/* Appends `,"key":value` (null when missing) to the JSON text. */
static void json_cell(char *buf, size_t size, const char *key, const cell *c) {
  size_t len = strlen(buf);
  if (c->have)
    snprintf(buf + len, size - len, ",\"%s_ms\":%.6f,\"%s_best_ms\":%.6f", key, c->t.median_ms, key,
             c->t.best_ms);
  else
    snprintf(buf + len, size - len, ",\"%s_ms\":null", key);
}

static void json_line(const row *r, FILE *file) {
  char buf[1024];
  char threads[2][40];
  for (int ti = 0; ti < 2; ti++)
    snprintf(threads[ti], sizeof threads[ti], r->threads[ti][0] ? "\"%s\"" : "null",
             r->threads[ti]);
  snprintf(buf, sizeof buf,
           "{\"bench\":\"perf\",\"workload\":\"%s\",\"size\":%lld,\"cannl_threads\":[%s,%s]",
           r->name, (long long)r->size, threads[0], threads[1]);
  const char *keys[] = {"cannl_1t", "cannl_2t", "warm_1t",  "warm_2t",
                        "plain_c",  "torch_1t", "torch_2t", "numpy"};
  const cell *cells[] = {&r->cannl[0],  &r->cannl[1], &r->warm[0],  &r->warm[1],
                         &r->plainc[0], &r->torch[0], &r->torch[1], &r->numpy};
  for (int k = 0; k < 8; k++)
    if (strcmp(r->kind, "jit") == 0 ? k < 4 : (k < 2 || k > 3))
      json_cell(buf, sizeof buf, keys[k], cells[k]);
  size_t len = strlen(buf);
  double r1 = ratio(&r->torch[0], &r->cannl[0]), r2 = ratio(&r->torch[1], &r->cannl[1]);
  if (!isnan(r1) && !isnan(r2))
    snprintf(buf + len, sizeof buf - len, ",\"ratio_1t\":%.4f,\"ratio_2t\":%.4f}", r1, r2);
  else
    snprintf(buf + len, sizeof buf - len, "}");
  printf("json %s\n", buf);
  if (file) fprintf(file, "%s\n", buf);
}

/* A PASS / MISS line: value >= goal (value <= goal when at_most). */
static void target(const char *what, double value, double goal, bool at_most) {
  const char *sign = at_most ? "<=" : ">=";
  if (isnan(value))
    printf("MISS  %-36s       n/a  target %s %g (a side is missing)\n", what, sign, goal);
  else
    printf("%s  %-36s %9.3g  target %s %g\n",
           (at_most ? value <= goal : value >= goal) ? "PASS" : "MISS", what, value, sign, goal);
}

/* The targets of issue 16 (ratios of medians in this run). */
static void print_targets(void) {
  row *mlp = find_row("mlp"), *conv = find_row("conv"), *stream = find_row("stream");
  row *moons = find_row("moons"), *mm = find_row("matmul1024"), *jit = find_row("jit");
  printf("\ntargets (issue 16; ratios of medians):\n");
  target("mlp: PyTorch 1t / cannl 1t", ratio(&mlp->torch[0], &mlp->cannl[0]), 1.0, false);
  target("mlp: PyTorch 2t / cannl 2t", ratio(&mlp->torch[1], &mlp->cannl[1]), 1.0, false);
  target("conv: PyTorch 1t / cannl 1t", ratio(&conv->torch[0], &conv->cannl[0]), 1.0, false);
  target("conv: PyTorch 2t / cannl 2t", ratio(&conv->torch[1], &conv->cannl[1]), 1.0, false);
  target("stream: plain C -O3 / cannl 1t", ratio(&stream->plainc[0], &stream->cannl[0]), 0.8,
         false);
  target("moons: PyTorch 1t / cannl 1t", ratio(&moons->torch[0], &moons->cannl[0]), 100, false);
  target("mlp: cannl 1t / cannl 2t", ratio(&mlp->cannl[0], &mlp->cannl[1]), 1.7, false);
  target("conv: cannl 1t / cannl 2t", ratio(&conv->cannl[0], &conv->cannl[1]), 1.7, false);
  target("matmul1024: cannl 1t / cannl 2t", ratio(&mm->cannl[0], &mm->cannl[1]), 1.7, false);
  target("matmul1024: PyTorch 1t / cannl 1t", ratio(&mm->torch[0], &mm->cannl[0]), 0.3, false);
  target("jit cold: moons model, ms (1t)", jit->cannl[0].have ? jit->cannl[0].t.median_ms : NAN,
         1000, true);
}

/* The path of bench_perf.py, next to this source file. */
static bool script_path(char *buf, size_t size) {
  const char *file = __FILE__, *slash = strrchr(file, '/');
  int dir = slash ? (int)(slash - file + 1) : 0;
  return !strchr(file, '\'') && snprintf(buf, size, "%.*sbench_perf.py", dir, file) < (int)size;
}

static int usage(void) {
  fputs("usage: bench_perf [--quick] [--json FILE]\n", stderr);
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
    fputs("bench_perf: cannot name this program or bench_perf.py\n", stderr);
    return 1;
  }
  self[len] = '\0';
  FILE *file = json ? fopen(json, "w") : NULL;
  if (json && !file) {
    perror(json);
    return 1;
  }
  const char *env = getenv("CANNL_THREADS");
  printf("bench_perf%s: cannl on generated C in children with CANNL_THREADS=1%s (this "
         "environment's CANNL_THREADS: %s, not used), PyTorch with 1 and 2 threads, numpy\n",
         quick ? " --quick" : "", quick ? "" : " and 2", env ? env : "unset");
  bool ok = true;
  double budget = quick ? 0.02 : 1.0;
  for (int i = 0; i < N_ROWS; i++) {
    rows[i].size = quick ? rows[i].quick : rows[i].full;
    printf("running %s (size %lld)\n", rows[i].name, (long long)rows[i].size);
    ok = run_cannl(&rows[i], self, budget, quick) && ok;
    if (!quick) run_python(script, i, i + 1, budget);
  }
  if (quick) run_python(script, 0, N_ROWS, budget);
  if (torch_missing) printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  if (numpy_missing) printf("numpy: python3-numpy is not installed (`make bench` installs it)\n");
  printf("\npython side: %s; cannl children: CANNL_THREADS=%s / %s\n",
         versions[0] ? versions : "did not run", rows[0].threads[0],
         rows[0].threads[1][0] ? rows[0].threads[1] : "-");
  print_table();
  for (int i = 0; i < N_ROWS; i++) json_line(&rows[i], file);
  if (file && fclose(file) != 0) perror(json), ok = false;
  if (quick)
    printf("\ntargets: not evaluated with --quick (small sizes)\n");
  else
    print_targets();
  return ok ? 0 : 1;
}
