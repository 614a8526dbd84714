/* What the benchmarks share (bench_perf.c and bench_gemm.c all of it; bench_fashion.c and
 * bench_startup.c the command line, the python side's lines and the report's helpers;
 * bench_moons.c the clock and the OpenBLAS core): the monotonic clock, the baselines' OpenBLAS
 * kernels (bench_openblas_core), the timing of repetitions (median and best),
 * the random data and the models both time (matmul, the MLP step, the conv step), the child that
 * compiles one model and times it, and the parent (bench_main): its command line, the children and
 * the python side run and read row by row, the JSON file, the ratio of two medians and the report's
 * helpers; each program brings its rows, its tables and targets as the hooks of a `bench`.
 *
 * Invariants: every timed side warms up once and then times as many repetitions as fit in the
 * budget (3 to MAX_REPS); a child prints `NAME median_ms=M best_ms=B reps=R` lines, the format the
 * parent (and the python side, bench_common.py) writes and reads; the report's helpers (numbers or
 * "-", JSON members, PASS / MISS lines) print a missing value (NAN) as such; everything here is
 * static inline, so a program that includes it and uses only a part stays free of unused warnings.
 * The python scripts are named next to this header (the same directory as the programs' sources).
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include "cannl.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_REPS = 200 };

static inline double now_seconds(void) {
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

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median and best of n times (sorted in place). */
static inline void summarize(double *times, int n, timing *t) {
  qsort(times, (size_t)n, sizeof *times, cmp_double);
  t->median_ms = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  t->best_ms = times[0];
  t->reps = n;
}

/* A warm-up run and a run that sizes the repetitions, then as many runs as fit in `budget`
 * seconds (3 to MAX_REPS); times in ms divided by `per_run` (the steps one run does). */
static inline cn_status measure(run_fn fn, void *arg, double budget, int per_run, timing *t) {
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

static inline void print_timing(const char *name, const timing *t) {
  printf("%s median_ms=%.6f best_ms=%.6f reps=%d\n", name, t->median_ms, t->best_ms, t->reps);
}

/* ---- The cannl models (child side) ----------------------------------------------------------- */

/* A data tensor of the given rows holding pseudo-random values in [-1, 1). */
static inline cn_tensor *random_data(cn_graph *g, const char *label, const cn_dims *dims,
                                     uint64_t seed) {
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

static inline cn_tensor *op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}

static inline cn_tensor *relu(cn_graph *g, cn_tensor *a) {
  return a ? cn_tensor_apply(g, CN_OP_RELU, 1, &a) : NULL;
}

/* sum(t * t) / n over every axis of t. */
static inline cn_tensor *sum_squares(cn_graph *g, cn_tensor *t, int64_t n) {
  cn_tensor *s = t ? cn_tensor_einsum(g, "...|...->... ; ...|...->... => 0", CN_OP_ADD, CN_OP_MUL,
                                      2, (cn_tensor *[]){t, t})
                   : NULL;
  return op2(g, CN_OP_DIV, s, cn_tensor_number(g, (double)n));
}

/* Runs the init code of t's parameters once. */
static inline cn_status init_params(cn_graph *g, cn_tensor *t) {
  cn_asgn *init = t ? cn_graph_init_params(g, t) : NULL;
  cn_routine *r =
      init ? cn_routine_compile(cn_graph_ctx(g), init, CN_BACKEND_C, "bench_init") : NULL;
  cn_status st = r ? cn_routine_run(r) : CN_ERR_INVALID;
  cn_routine_free(r);
  return st;
}

/* c = a b by the einsum spec, a and b data of output rows a_dims and b_dims (n axes each). */
static inline const cn_asgn *product_code(cn_graph *g, const char *spec, int n,
                                          const int64_t *a_dims, const int64_t *b_dims) {
  const cn_dims ad = {CN_AXES_NONE, CN_AXES_NONE, {n, a_dims, NULL}};
  const cn_dims bd = {CN_AXES_NONE, CN_AXES_NONE, {n, b_dims, NULL}};
  cn_tensor *a = random_data(g, "a", &ad, 1), *b = random_data(g, "b", &bd, 2);
  cn_tensor *c = a && b ? cn_tensor_einsum2(g, spec, a, b) : NULL;
  return c ? cn_graph_forward(g, c) : NULL;
}

static inline const cn_asgn *matmul_code(cn_graph *g, int64_t n) {
  const int64_t dims[2] = {n, n};
  return product_code(g, "ij;jk=>ik", 2, dims, dims);
}

/* The MLP 784-128-10 with relu, loss sum((f - y)^2) / batch, one SGD step (lr 0.01). */
static inline const cn_asgn *mlp_code(cn_graph *g, int64_t batch) {
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
static inline const cn_asgn *conv_code(cn_graph *g, int64_t batch) {
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

/* ---- A child: one model of cannl, at the thread count (and mode) of the environment --------- */

typedef const cn_asgn *(*code_fn)(cn_graph *g, int64_t size);
typedef struct {
  const char *kind;
  code_fn code;
} model;

/* One run, waited for (a device backend's run is queued: cn_routine_run returns before it ends). */
static inline cn_status run_routine(void *routine) {
  cn_status status = cn_routine_run(routine);
  return status != CN_OK ? status : cn_routine_synchronize(routine);
}

/* Builds the model `kind` of models[0 .. n) at `size` in a context of its own, compiles it on
 * generated C and times it: prints the "cannl" timing line, or an error prefixed by `prog`.
 * 0 on success, 1 on failure. */
static inline int time_model(const char *prog, const model *models, size_t n, const char *kind,
                             int64_t size, double budget) {
  code_fn code = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(kind, models[i].kind) == 0) code = models[i].code;
  if (!code) {
    fprintf(stderr, "%s: unknown workload %s\n", prog, kind);
    return 1;
  }
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const cn_asgn *asgn = g ? code(g, size) : NULL;
  cn_routine *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, kind) : NULL;
  timing t;
  int rc = !r || measure(run_routine, r, budget, 1, &t) != CN_OK;
  if (rc)
    fprintf(stderr, "%s: %s: %s\n", prog, kind,
            ctx && *cn_ctx_error(ctx) ? cn_ctx_error(ctx) : "out of memory");
  else
    print_timing("cannl", &t);
  cn_ctx_destroy(ctx);
  return rc;
}

/* ---- The parent: workloads, children, the python side, JSON --------------------------------- */

typedef struct {
  bool have;
  timing t;
} cell;

/* a / b of the medians, NAN when either is missing. */
static inline double ratio(const cell *a, const cell *b) {
  return a->have && b->have && b->t.median_ms > 0 ? a->t.median_ms / b->t.median_ms : NAN;
}

/* Reads a `NAME median_ms=.. best_ms=.. reps=..` line into *name and *t; false if it is not one. */
static inline bool parse_timing(const char *line, char name[32], timing *t) {
  return sscanf(line, "%31s median_ms=%lf best_ms=%lf reps=%d", name, &t->median_ms, &t->best_ms,
                &t->reps) == 4;
}

/* ---- Report helpers ------------------------------------------------------------------------- */

/* v by format into buf, "-" when missing (NAN); returns buf. */
static inline const char *fmt_number(char *buf, size_t size, const char *format, double v) {
  if (isnan(v))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, format, v);
  return buf;
}

/* Appends `,"key":value` (null when missing) to the JSON text. */
static inline void json_num(char *buf, size_t size, const char *key, double v) {
  size_t len = strlen(buf);
  if (isnan(v))
    snprintf(buf + len, size - len, ",\"%s\":null", key);
  else
    snprintf(buf + len, size - len, ",\"%s\":%.6g", key, v);
}

/* A PASS / MISS line of a target: value >= goal (value <= goal when at_most). */
static inline void print_target(const char *what, double value, double goal, bool at_most) {
  const char *sign = at_most ? "<=" : ">=";
  if (isnan(value))
    printf("MISS  %-40s       n/a  target %s %g (a side is missing)\n", what, sign, goal);
  else
    printf("%s  %-40s %9.3g  target %s %g\n",
           (at_most ? value <= goal : value >= goal) ? "PASS" : "MISS", what, value, sign, goal);
}

/* The cell of a python side's name (torch1, torch2, numpy) among torch[2] and numpy, else NULL. */
static inline cell *python_cell(const char *name, cell *torch, cell *numpy) {
  return strcmp(name, "torch1") == 0   ? &torch[0]
         : strcmp(name, "torch2") == 0 ? &torch[1]
         : strcmp(name, "numpy") == 0  ? numpy
                                       : NULL;
}

/* The first member of every row of a benchmark's table. */
typedef struct {
  const char *name, *kind;
  int64_t full, quick; /* the size argument of the full and the --quick run */
  int64_t size;        /* the one of this run */
} workload;

/* One benchmark's parent: what it is (set by the program) and what its runs said. The children run
 * in n_modes modes (mode_env[m] added to their environment, mode_names[m] in messages) with
 * CANNL_THREADS=1 and then 2 (1 only with --quick); a child's lines go to parse with slot
 * mode * 2 + threads - 1, the python side's to parse with slot 0 in the row each line names. */
typedef struct bench bench;
struct bench {
  const char *name; /* "bench_perf": messages, and the script bench_perf.py next to this header */
  void *rows;       /* n_rows rows of row_size bytes, each starting with its workload */
  size_t row_size;
  int n_rows, n_modes;
  const char *const *mode_env, *const *mode_names;
  const char *cannl_only; /* the kind of workload without a python side, or NULL */
  int (*child)(const char *kind, int64_t size, double budget); /* `--run KIND SIZE BUDGET` */
  void (*parse)(void *row, int slot, const char *line);
  void (*intro)(bool quick);          /* the first line */
  double (*gflop)(const workload *w); /* in the `running` lines, or NULL */
  void (*report)(const bench *b);     /* after the runs: the tables */
  void (*json_line)(const void *row, FILE *file);
  void (*targets)(void); /* after the JSON lines, without --quick */
  bool quick, torch_missing, numpy_missing;
  char versions[128]; /* the python side's `versions ...` line */
  char self[PATH_MAX], script[PATH_MAX];
  const char *json; /* the --json file's name, and the file */
  FILE *file;
};

static inline workload *bench_row(const bench *b, int i) {
  return (workload *)((char *)b->rows + (size_t)i * b->row_size);
}

/* The row of a workload's name, or NULL. */
static inline void *bench_find(const bench *b, const char *name) {
  for (int i = 0; i < b->n_rows; i++)
    if (strcmp(bench_row(b, i)->name, name) == 0) return bench_row(b, i);
  return NULL;
}

/* Runs a command and parses its output: into row (slot), or with row NULL (the python side) into
 * the row each line names first. False if the command fails. */
static inline bool run_command(bench *b, const char *cmd, void *row, int slot) {
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[512], name[32];
  int skip;
  while (fgets(line, sizeof line, p)) {
    b->torch_missing |= strncmp(line, "torch=missing", 13) == 0;
    b->numpy_missing |= strncmp(line, "numpy=missing", 13) == 0;
    if (strncmp(line, "versions ", 9) == 0)
      snprintf(b->versions, sizeof b->versions, "%.*s", (int)strcspn(line + 9, "\n"), line + 9);
    if (row)
      b->parse(row, slot, line);
    else if (sscanf(line, "%31s %n", name, &skip) == 1 && bench_find(b, name))
      b->parse(bench_find(b, name), 0, line + skip);
  }
  return pclose(p) == 0;
}

/* The cannl children of row i: every mode, CANNL_THREADS=1 then 2 (1 only with --quick). */
static inline bool run_cannl(bench *b, int i, double budget) {
  workload *w = bench_row(b, i);
  char cmd[PATH_MAX + 128];
  bool ok = true;
  for (int mode = 0; mode < b->n_modes; mode++)
    for (int ti = 0; ti < (b->quick ? 1 : 2); ti++) {
      snprintf(cmd, sizeof cmd, "CANNL_THREADS=%d%s '%s' --run %s %lld %g", ti + 1,
               b->mode_env[mode], b->self, w->kind, (long long)w->size, budget);
      if (!run_command(b, cmd, w, mode * 2 + ti)) {
        fprintf(stderr, "%s: %s: the cannl side failed (%s%sCANNL_THREADS=%d)\n", b->name, w->name,
                b->mode_names[mode], *b->mode_names[mode] ? ", " : "", ti + 1);
        ok = false;
      }
    }
  return ok;
}

/* The python side of rows[first .. last) (but the cannl_only ones), in one process. */
static inline void run_python(bench *b, int first, int last, double budget) {
  char cmd[PATH_MAX + 1024];
  int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %g", b->script, budget), head = len;
  for (int i = first; i < last; i++) {
    const workload *w = bench_row(b, i);
    if (!b->cannl_only || strcmp(w->kind, b->cannl_only) != 0)
      len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s %s %lld", w->name, w->kind,
                      (long long)w->size);
  }
  if (len > head && !run_command(b, cmd, NULL, 0))
    fprintf(stderr, "%s: the python side failed: %s\n", b->name, cmd);
}

/* Whether a /proc/cpuinfo flags line has the flag (a whole word). */
static inline bool cpu_has_flag(const char *line, const char *flag) {
  size_t n = strlen(flag);
  for (const char *at = strstr(line, flag); at; at = strstr(at + 1, flag))
    if (at > line && at[-1] == ' ' && (at[n] == ' ' || at[n] == '\n' || at[n] == '\0')) return true;
  return false;
}

/* The best OpenBLAS core of this CPU's flags (/proc/cpuinfo): SkylakeX kernels for AVX-512,
 * Haswell's for AVX2 with FMA, NULL otherwise. */
static inline const char *openblas_core_of_cpu(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return NULL;
  char line[8192];
  const char *core = NULL;
  while (!core && fgets(line, sizeof line, f))
    if (strncmp(line, "flags", 5) == 0) {
      bool avx512 = cpu_has_flag(line, "avx512f") && cpu_has_flag(line, "avx512vl") &&
                    cpu_has_flag(line, "avx512bw") && cpu_has_flag(line, "avx512dq");
      bool avx2 = cpu_has_flag(line, "avx2") && cpu_has_flag(line, "fma");
      core = avx512 ? "SkylakeX" : avx2 ? "Haswell" : "";
    }
  fclose(f);
  return core && *core ? core : NULL;
}

/* The baselines' OpenBLAS kernels, before any python side runs: Debian's OpenBLAS 0.3.21 falls
 * back to its SSE3 "Prescott" kernels on x86 CPUs it does not know (Intel family 6 model 207: a
 * 1024^2 single-precision matmul at 16 GFLOP/s instead of 112), silently, which would inflate
 * every ratio. The core it picks is read from a probe (OPENBLAS_VERBOSE=2 while numpy loads it);
 * on that fallback the best core of the CPU's flags goes into OPENBLAS_CORETYPE, which the python
 * sides inherit. An OPENBLAS_CORETYPE already set is kept. Prints the core in use. */
static inline void bench_openblas_core(void) {
  const char *set = getenv("OPENBLAS_CORETYPE");
  if (set && *set) {
    printf("OpenBLAS core: %s (OPENBLAS_CORETYPE of the environment)\n", set);
    return;
  }
  fflush(stdout);
  FILE *p = popen("OPENBLAS_VERBOSE=2 /usr/bin/python3 -c 'import numpy' 2>&1", "r");
  char line[256], core[64] = "";
  while (p && fgets(line, sizeof line, p))
    if (!*core) sscanf(line, "Core: %63s", core);
  if (p) pclose(p);
  const char *better = openblas_core_of_cpu();
  if (strcmp(core, "Prescott") == 0 && better && setenv("OPENBLAS_CORETYPE", better, 1) == 0)
    printf("OpenBLAS core: %s (OPENBLAS_CORETYPE set: this OpenBLAS fell back to its SSE3 "
           "Prescott kernels on this CPU)\n",
           better);
  else
    printf("OpenBLAS core: %s\n",
           *core ? core : "unknown (no numpy, or a BLAS other than OpenBLAS)");
}

/* The parent's command line, [--quick] [--json FILE], this program's path and the script's (next
 * to this header) and the JSON file opened, and the baselines' OpenBLAS core
 * (bench_openblas_core): -1 to go on, else the exit status. */
static inline int bench_start(bench *b, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      b->quick = true;
    else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      b->json = argv[++i];
    else
      return fprintf(stderr, "usage: %s [--quick] [--json FILE]\n", b->name), 2;
  }
  const char *file = __FILE__, *slash = strrchr(file, '/');
  int dir = slash ? (int)(slash - file + 1) : 0;
  ssize_t len = readlink("/proc/self/exe", b->self, sizeof b->self - 1);
  if (len > 0) b->self[len] = '\0';
  if (len <= 0 || strchr(b->self, '\'') || strchr(file, '\'') ||
      snprintf(b->script, sizeof b->script, "%.*s%s.py", dir, file, b->name) >=
          (int)sizeof b->script) {
    fprintf(stderr, "%s: cannot name this program or %s.py\n", b->name, b->name);
    return 1;
  }
  b->file = b->json ? fopen(b->json, "w") : NULL;
  if (b->json && !b->file) {
    perror(b->json);
    return 1;
  }
  bench_openblas_core();
  return -1;
}

/* The whole program: a child with `--run KIND SIZE BUDGET`, else the parent: every row's children
 * and python side (all rows' python side in one process with --quick), the report, the JSON lines
 * (stdout, prefixed "json ", and the --json file) and the targets. Exit 1 when a cannl side fails.
 */
static inline int bench_main(bench *b, int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--run") == 0)
    return b->child(argv[2], strtoll(argv[3], NULL, 10), strtod(argv[4], NULL));
  int status = bench_start(b, argc, argv);
  if (status >= 0) return status;
  b->intro(b->quick);
  bool ok = true;
  double budget = b->quick ? 0.02 : 1.0;
  for (int i = 0; i < b->n_rows; i++) {
    workload *w = bench_row(b, i);
    w->size = b->quick ? w->quick : w->full;
    printf("running %s (size %lld", w->name, (long long)w->size);
    if (b->gflop) printf(", %.4g GFLOP", b->gflop(w));
    printf(")\n");
    ok = run_cannl(b, i, budget) && ok;
    if (!b->quick) run_python(b, i, i + 1, budget);
  }
  if (b->quick) run_python(b, 0, b->n_rows, budget);
  if (b->torch_missing)
    printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  if (b->numpy_missing)
    printf("numpy: python3-numpy is not installed (`make bench` installs it)\n");
  b->report(b);
  for (int i = 0; i < b->n_rows; i++) b->json_line(bench_row(b, i), b->file);
  if (b->file && fclose(b->file) != 0) perror(b->json), ok = false;
  if (b->quick)
    printf("\ntargets: not evaluated with --quick (small sizes)\n");
  else
    b->targets();
  return ok ? 0 : 1;
}

#endif
