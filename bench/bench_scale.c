/* Benchmark: how the compiler scales with the size of the model (issue 12). For chains and MLPs
 * of 10, 100, 1 000 and 10 000 operations it measures the wall time of building and compiling
 * (clock_gettime, monotonic) and the peak resident memory, fits the growth exponent (the
 * least-squares slope of log time against log operations) and prints the targets next to
 * the measured values. Workloads:
 *   chain_notation  the script `let x = [1.0; 2.0]`, `let y1 = x + x`, `let yi = y(i-1) + x`,
 *                   ..., `print yn` (cn_notation_run on the interpreter: no C compiler runs);
 *                   checks yn = (n + 1) x;
 *   chain_api       the same chain built with cn_tensor_apply, its forward routine compiled for
 *                   the interpreter, in phases: tensor construction (online shape inference),
 *                   materialization (shapes closed, projections, nodes), code, lowering;
 *   mlp_notation    an MLP of width 8 with relu on one batch of 10 half-moons points, the hinge
 *                   loss, a backprop and an SGD step, as a script; checks the loss is finite;
 *   mlp_api         the same MLP through the C API (the batch sliced by a static index): init and
 *                   forward + backprop + SGD routines for the interpreter, one step run;
 *   chain_cc        the chain's forward routine compiled as generated C into a fresh cache, so
 *                   the C compiler runs: the time of that compilation alone, the size of the C;
 *   train           an MLP of --train-layers layers (default 50) built and trained one epoch
 *                   (80 steps of 10 points) on the interpreter; the loss must stay finite.
 * An MLP of L layers has 3L + 5 operations (two batch slices, matmul + bias + relu per hidden
 * layer, the output matmul, five for the loss), so L = (n - 5) / 3 for a size n.
 *
 * Every measurement runs in a forked child, in a process group of its own, so its peak RSS
 * (getrusage's ru_maxrss in the child: its own high-water mark, from the small driver's) is its
 * own. The child's address space is capped (RLIMIT_AS, --mem-mb) so an allocation fails cleanly
 * instead of swapping; after --timeout seconds its group is killed (RLIMIT_CPU is a backstop
 * should the driver die). The result comes back over a pipe as one fixed-size record. A size that
 * does not finish skips the larger sizes of its workload. Steps under 50 ms are repeated up to 5
 * times and the best time kept.
 *
 * Output: the table, per workload the fitted exponents (time; memory above the baseline of an
 * idle child), the targets with PASS/MISS, and one JSON object per measurement and per workload
 * (`json ` lines on stdout, or the bare lines in --json FILE). Targets are reported, never
 * asserted: the exit status is 1 only if a step fails (an error other than exhausting the memory
 * cap, a crash) or a computed value is wrong, 2 on a bad command line. */
#include "cannl.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
  N_SIZES = 4,
  N_PHASES = 4,
  MAX_REPS = 5,
  MLP_WIDTH = 8,
  TRAIN_WIDTH = 16, /* narrower deep relu nets collapse to a constant output */
  MOONS_POINTS = 800,
  MOONS_BATCH = 10,
  MOONS_STEPS = MOONS_POINTS / MOONS_BATCH,
  LOSS_WINDOW = 10, /* steps averaged at each end of the training epoch */
};
static const int64_t sizes[N_SIZES] = {10, 100, 1000, 10000};
static const char *const phase_names[N_PHASES] = {"build", "shapes+proj", "code", "lower"};
#define REPEAT_BELOW_S 0.05 /* a step faster than this is repeated */
#define MLP_LR         0.01
#define TRAIN_LR       0.02

/* The targets. */
#define TARGET_1000_S      0.5
#define TARGET_1000_MB     200.0
#define TARGET_10000_S     10.0
#define TARGET_EXPONENT    1.2
#define TARGET_CC_1000_S   10.0 /* "compiling in seconds" */
#define TARGET_TRAIN_DEPTH 50

typedef enum { ST_OK, ST_TIMEOUT, ST_OOM, ST_SKIPPED, ST_ERROR, ST_WRONG, ST_CRASH } run_status;
static const char *const status_names[] = {"ok",    "timeout", "oom",  "skipped",
                                           "error", "wrong",   "crash"};

/* One measurement, as the child sends it back: plain data of a fixed size (below PIPE_BUF, so
 * one write delivers it whole). Fields a workload does not use stay 0. */
typedef struct {
  int status; /* run_status */
  int64_t ops, layers;
  double seconds;          /* the measured part, best of the repetitions */
  double phase[N_PHASES];  /* of the best repetition (chain_api, mlp_api, train) */
  double peak_mb;          /* the child's peak RSS */
  double lower_s, c_bytes; /* chain_cc: the same code lowered for the interpreter; size of C */
  double loss_first, loss_last, train_s; /* train: mean loss of the first and last steps */
  char message[320];
} result;

typedef struct {
  int64_t max_ops;
  double timeout_s, mem_mb;
  int64_t train_layers;
  const char *only;    /* a workload name, or NULL for all */
  const char *scratch; /* the generated-C cache of chain_cc, removed at exit */
  FILE *json;          /* NULL: `json ` lines on stdout */
} config;

/* A measurement of a model of `ops` operations (`layers` weight layers for an MLP). */
typedef void (*measure_fn)(const config *cfg, int64_t ops, int64_t layers, result *r);

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Failures inside a measurement ---------------------------------------------------------- */

static void fail_msg(result *r, run_status status, const char *what, const char *detail) {
  r->status = status;
  snprintf(r->message, sizeof r->message, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

/* A failing library call: out of memory under the cap is a scaling result, anything else an
 * error of the step. */
static void fail_ctx(result *r, const cn_ctx *ctx, const char *what) {
  if (!ctx)
    fail_msg(r, ST_OOM, what, "cannot create a context");
  else
    fail_msg(r, cn_ctx_status(ctx) == CN_ERR_NOMEM ? ST_OOM : ST_ERROR, what, cn_ctx_error(ctx));
}

/* ---- Scripts and their output --------------------------------------------------------------- */

/* The numbers of the "values" array of the one JSON line a script printed; returns how many were
 * read (a non-finite value is a string there and stops the count). */
static int json_values(const char *text, double *values, int cap) {
  const char *p = text ? strstr(text, "\"values\": [") : NULL;
  if (!p) return 0;
  p += strlen("\"values\": [");
  int count = 0;
  while (count < cap) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || !isfinite(v)) break;
    values[count++] = v;
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  return count;
}

/* Runs a script on the interpreter with JSON output captured; the time covers context creation,
 * parsing, building, compiling and running. The captured text is malloc'd (NULL on failure, with
 * r filled in). */
static char *run_script(const char *text, result *r) {
  char *out = NULL;
  size_t out_len = 0;
  FILE *capture = open_memstream(&out, &out_len);
  if (!capture) {
    fail_msg(r, ST_OOM, "open_memstream", strerror(errno));
    return NULL;
  }
  double start = now_seconds();
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .json = true, .out = capture};
  cn_status st = g ? cn_notation_run(g, "scale.cnl", text, &opts) : CN_ERR_NOMEM;
  r->seconds = now_seconds() - start;
  fclose(capture);
  if (st != CN_OK) {
    fail_ctx(r, ctx, "cn_notation_run");
    free(out);
    out = NULL;
  }
  cn_ctx_destroy(ctx);
  return out;
}

/* The script text written by `write` (malloc'd), or NULL with r filled in. */
static char *make_script(void (*write)(FILE *f, int64_t n), int64_t n, result *r) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) {
    fail_msg(r, ST_OOM, "open_memstream", strerror(errno));
    return NULL;
  }
  write(f, n);
  if (fclose(f) != 0) {
    fail_msg(r, ST_OOM, "writing the script", strerror(errno));
    free(text);
    return NULL;
  }
  return text;
}

/* ---- Chains --------------------------------------------------------------------------------- */

static void write_chain_script(FILE *f, int64_t n) {
  fputs("let x = [1.0; 2.0]\nlet y1 = x + x\n", f);
  for (int64_t i = 2; i <= n; i++)
    fprintf(f, "let y%lld = y%lld + x\n", (long long)i, (long long)i - 1);
  fprintf(f, "print y%lld\n", (long long)n);
}

/* y_n of the chain holds (n + 1) x, exactly in single precision at these sizes. */
static void check_chain(result *r, int64_t n, const double *values, int count) {
  double k = (double)(n + 1);
  if (count != 2 || values[0] != k || values[1] != 2 * k) {
    char got[96];
    snprintf(got, sizeof got, "y%lld = [%g; %g] (%d values), expected [%g; %g]", (long long)n,
             count > 0 ? values[0] : NAN, count > 1 ? values[1] : NAN, count, k, 2 * k);
    fail_msg(r, ST_WRONG, "chain value", got);
  }
}

static void measure_chain_notation(const config *cfg, int64_t n, int64_t layers, result *r) {
  (void)cfg;
  (void)layers;
  char *text = make_script(write_chain_script, n, r);
  char *out = text ? run_script(text, r) : NULL;
  if (out) {
    double values[3];
    check_chain(r, n, values, json_values(out, values, 3));
  }
  free(out);
  free(text);
}

/* x = [1; 2], y1 = x + x, yi = y(i-1) + x: n additions. */
static cn_tensor *build_chain(cn_graph *g, int64_t n) {
  const int64_t two = 2;
  const cn_dims dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &two, NULL}};
  cn_tensor *x = cn_tensor_data(g, "x", &dims, (const double[]){1, 2}, 2);
  cn_tensor *y = x;
  for (int64_t i = 0; i < n && y; i++)
    y = cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *const[]){i == 0 ? x : y, x});
  return y;
}

/* Builds the chain and its forward code in ctx (NULL: out of memory), timing the phases; NULL
 * with r filled in. */
static cn_asgn *chain_forward(cn_ctx *ctx, int64_t n, result *r, cn_tensor **y_out) {
  double t0 = now_seconds();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  cn_tensor *y = g ? build_chain(g, n) : NULL;
  double t1 = now_seconds();
  cn_node *value = y ? cn_tensor_value(y) : NULL;
  double t2 = now_seconds();
  cn_asgn *code = value ? cn_graph_forward(g, y) : NULL;
  double t3 = now_seconds();
  r->phase[0] = t1 - t0;
  r->phase[1] = t2 - t1;
  r->phase[2] = t3 - t2;
  if (!code) fail_ctx(r, ctx, "building the chain");
  *y_out = y;
  return code;
}

/* Runs the chain's routine and checks y. */
static void run_chain(cn_ctx *ctx, cn_routine *routine, cn_tensor *y, int64_t n, result *r) {
  double values[2];
  cn_node *value = cn_tensor_value(y);
  if (cn_routine_run(routine) != CN_OK || !value ||
      cn_node_get_values(value, false, values, 2) != CN_OK)
    fail_ctx(r, ctx, "running the chain");
  else
    check_chain(r, n, values, 2);
}

static void measure_chain_api(const config *cfg, int64_t n, int64_t layers, result *r) {
  (void)cfg;
  (void)layers;
  double start = now_seconds();
  cn_ctx *ctx = cn_ctx_create();
  cn_tensor *y = NULL;
  cn_asgn *code = chain_forward(ctx, n, r, &y);
  double t3 = now_seconds();
  cn_routine *routine = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "chain") : NULL;
  double end = now_seconds();
  r->phase[3] = end - t3;
  r->seconds = end - start;
  if (code && !routine) fail_ctx(r, ctx, "cn_routine_compile");
  if (routine) run_chain(ctx, routine, y, n, r);
  cn_ctx_destroy(ctx);
}

static void measure_chain_cc(const config *cfg, int64_t n, int64_t layers, result *r) {
  (void)layers;
  cn_ctx *ctx = cn_ctx_create();
  cn_tensor *y = NULL;
  cn_asgn *code = chain_forward(ctx, n, r, &y);
  double t0 = now_seconds();
  cn_routine *interp = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "chain") : NULL;
  r->lower_s = now_seconds() - t0;
  cn_routine *routine = NULL;
  if (interp && cn_ctx_set_option(ctx, "cache_dir", cfg->scratch) == CN_OK) {
    uint64_t runs = cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS);
    double t1 = now_seconds();
    routine = cn_routine_compile(ctx, code, CN_BACKEND_C, "scale_chain");
    r->seconds = now_seconds() - t1;
    if (routine && cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS) != runs + 1) {
      fail_msg(r, ST_ERROR, "chain_cc", "the C compiler did not run (a cache hit?)");
      routine = NULL;
    }
  }
  if (routine) {
    const char *source = cn_routine_source(routine);
    r->c_bytes = source ? (double)strlen(source) : 0;
    run_chain(ctx, routine, y, n, r);
  } else if (r->status == ST_OK) {
    fail_ctx(r, ctx, "compiling the chain");
  }
  cn_ctx_destroy(ctx);
}

/* ---- MLPs on the half moons ----------------------------------------------------------------- */

static void write_mlp_script(FILE *f, int64_t layers) {
  fprintf(f,
          "let (moons, moons_classes) = half_moons ~n:%d ~noise:0.1 ~seed:1 ~batch_size:%d\n"
          "let x = moons @| 0\nlet y = moons_classes @| 0\nlet h0 = x\n",
          MOONS_POINTS, MOONS_BATCH);
  for (int64_t l = 1; l < layers; l++)
    fprintf(f, "let h%lld = relu ({w%lld} * h%lld + {b%lld; o = [%d]})\n", (long long)l,
            (long long)l, (long long)l - 1, (long long)l, MLP_WIDTH);
  fprintf(f,
          "let f = {w%lld} * h%lld\nlet loss = (relu (1 - y *. f) ++ \"...|... => 0\") /. %d\n"
          "backprop loss\nsgd loss ~learning_rate:%g\nprint loss\n",
          (long long)layers, (long long)layers - 1, MOONS_BATCH, MLP_LR);
}

static void check_loss(result *r, double loss, bool ok) {
  if (!ok || !isfinite(loss)) {
    char got[64];
    snprintf(got, sizeof got, "%g", ok ? loss : NAN);
    fail_msg(r, ST_WRONG, "the loss is not finite", got);
  }
}

static void measure_mlp_notation(const config *cfg, int64_t ops, int64_t layers, result *r) {
  (void)cfg;
  (void)ops;
  char *text = make_script(write_mlp_script, layers, r);
  char *out = text ? run_script(text, r) : NULL;
  if (out) {
    double loss = NAN;
    bool read = json_values(out, &loss, 1) == 1;
    check_loss(r, loss, read);
  }
  free(out);
  free(text);
}

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_symbol batch_n;
  cn_tensor *loss;
  cn_routine *init, *step;
} mlp;

/* Constructors that propagate a NULL, so the first failure's message stays in the context. */
static cn_tensor *mlp_op(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *const[]){a, b}) : NULL;
}
static cn_tensor *mlp_relu(cn_graph *g, cn_tensor *a) {
  return a ? cn_tensor_apply(g, CN_OP_RELU, 1, &a) : NULL;
}
static cn_tensor *mlp_matmul(cn_graph *g, cn_tensor *w, cn_tensor *x) {
  return w && x ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, w, x) : NULL;
}
/* kaiming: weights Kaiming-uniform (fan_in > 0) and biases (fan_in 0) zero, as He et al.
 * initialize deep relu networks; otherwise the library's default init. */
static cn_tensor *mlp_param(cn_graph *g, bool kaiming, double fan_in, const cn_dims *dims) {
  cn_tensor *init = !kaiming     ? NULL
                    : fan_in > 0 ? cn_tensor_kaiming_uniform(g, fan_in)
                                 : cn_tensor_number(g, 0);
  return kaiming && !init ? NULL : cn_tensor_param(g, "p", dims, init);
}

/* The model of examples/moons.c with `layers` weight layers of width MLP_WIDTH: relu(b + w h)
 * for the hidden ones, w h for the output; the hinge loss over a batch sliced by batch_n.
 * Phases: constructors, materialization, code (init, forward + backprop + SGD), lowering of the
 * two routines. */
static bool mlp_build(mlp *m, int64_t layers, int64_t width, bool kaiming, double learning_rate,
                      double *phase) {
  double t0 = now_seconds();
  if (!(m->ctx = cn_ctx_create())) return false;
  cn_graph *g = m->g = cn_graph_create(m->ctx);
  m->batch_n = cn_symbol_create(m->ctx, "batch_n", MOONS_STEPS);
  if (!g || m->batch_n < 0) return false;
  static double xy[2 * MOONS_POINTS], labels[MOONS_POINTS];
  cn_dataset_half_moons(1, 0.1, MOONS_POINTS, xy, labels);
  const int64_t batch_dims[2] = {MOONS_STEPS, MOONS_BATCH}, coords = 2;
  const cn_dims points_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, {1, &coords, NULL}};
  const cn_dims labels_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  const cn_dims bias_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &width, NULL}};
  cn_tensor *points = cn_tensor_data(g, "moons", &points_dims, xy, 2 * MOONS_POINTS);
  cn_tensor *classes = cn_tensor_data(g, "classes", &labels_dims, labels, MOONS_POINTS);
  cn_tensor *x = points ? cn_tensor_batch_slice(g, points, m->batch_n) : NULL;
  cn_tensor *y = classes ? cn_tensor_batch_slice(g, classes, m->batch_n) : NULL;
  cn_tensor *h = x;
  for (int64_t l = 1; l < layers && h; l++) {
    cn_tensor *w = mlp_param(g, kaiming, l == 1 ? 2 : (double)width, NULL);
    cn_tensor *b = w ? mlp_param(g, kaiming, 0, &bias_dims) : NULL;
    h = mlp_relu(g, mlp_op(g, CN_OP_ADD, b, mlp_matmul(g, w, h)));
  }
  cn_tensor *w_out = h ? mlp_param(g, kaiming, layers == 1 ? 2 : (double)width, NULL) : NULL;
  cn_tensor *f = mlp_matmul(g, w_out, h);
  cn_tensor *margin =
      mlp_relu(g, mlp_op(g, CN_OP_SUB, cn_tensor_number(g, 1), mlp_op(g, CN_OP_MUL, y, f)));
  cn_tensor *sum =
      margin ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &margin) : NULL;
  m->loss = mlp_op(g, CN_OP_DIV, sum, cn_tensor_number(g, MOONS_BATCH));
  const cn_sgd sgd = {cn_tensor_number(g, learning_rate), 0.0, 0.0, false};
  double t1 = now_seconds();
  if (!m->loss || !sgd.learning_rate || !cn_tensor_value(m->loss)) return false;
  double t2 = now_seconds();
  cn_asgn *init = cn_graph_init_params(g, m->loss);
  cn_asgn *parts[2] = {init ? cn_graph_grad_update(g, m->loss) : NULL, NULL};
  parts[1] = parts[0] ? cn_graph_sgd_update(g, m->loss, &sgd) : NULL;
  cn_asgn *step = parts[1] ? cn_asgn_seq(m->ctx, 2, parts) : NULL;
  double t3 = now_seconds();
  if (!step) return false;
  m->init = cn_routine_compile(m->ctx, init, CN_BACKEND_INTERP, "mlp_init");
  m->step = m->init ? cn_routine_compile(m->ctx, step, CN_BACKEND_INTERP, "mlp_step") : NULL;
  double t4 = now_seconds();
  const double spans[N_PHASES] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
  memcpy(phase, spans, sizeof spans);
  return m->step != NULL;
}

/* One step on batch `batch`; *loss is the batch's loss before the update. */
static cn_status mlp_step(mlp *m, int64_t batch, double *loss) {
  cn_node *value = cn_tensor_value(m->loss);
  if (!value || cn_routine_bind(m->step, m->batch_n, batch) != CN_OK ||
      cn_routine_run(m->step) != CN_OK)
    return CN_ERR_RUNTIME;
  return cn_node_get_values(value, false, loss, 1);
}

static void measure_mlp_api(const config *cfg, int64_t ops, int64_t layers, result *r) {
  (void)cfg;
  (void)ops;
  mlp m = {0};
  double start = now_seconds();
  bool built = mlp_build(&m, layers, MLP_WIDTH, false, MLP_LR, r->phase);
  r->seconds = now_seconds() - start;
  double loss = NAN;
  if (built && cn_routine_run(m.init) == CN_OK && mlp_step(&m, 0, &loss) == CN_OK)
    check_loss(r, loss, true);
  else
    fail_ctx(r, m.ctx, "the MLP");
  cn_ctx_destroy(m.ctx);
}

/* Builds the --train-layers MLP of width TRAIN_WIDTH with Kaiming-uniform weights and zero biases
 * (under the default init the output of 50 layers no longer depends on the input) and trains it
 * one epoch; every loss must be finite. */
static void measure_train(const config *cfg, int64_t ops, int64_t layers, result *r) {
  (void)cfg;
  (void)ops;
  mlp m = {0};
  double start = now_seconds();
  bool built = mlp_build(&m, layers, TRAIN_WIDTH, true, TRAIN_LR, r->phase);
  r->seconds = now_seconds() - start;
  if (!built || cn_routine_run(m.init) != CN_OK) {
    fail_ctx(r, m.ctx, "building the MLP");
  } else {
    double first = 0, last = 0, t0 = now_seconds();
    for (int s = 0; s < MOONS_STEPS && r->status == ST_OK; s++) {
      double loss;
      if (mlp_step(&m, s, &loss) != CN_OK) {
        fail_ctx(r, m.ctx, "training step");
      } else {
        check_loss(r, loss, true);
        if (s < LOSS_WINDOW) first += loss / LOSS_WINDOW;
        if (s >= MOONS_STEPS - LOSS_WINDOW) last += loss / LOSS_WINDOW;
      }
    }
    r->train_s = now_seconds() - t0;
    r->loss_first = first;
    r->loss_last = last;
  }
  cn_ctx_destroy(m.ctx);
}

static void measure_nothing(const config *cfg, int64_t ops, int64_t layers, result *r) {
  (void)cfg;
  (void)ops;
  (void)layers;
  (void)r;
  cn_ctx_destroy(cn_ctx_create());
}

/* ---- Workloads and their children ----------------------------------------------------------- */

enum { W_CHAIN_NOTATION, W_CHAIN_API, W_MLP_NOTATION, W_MLP_API, W_CHAIN_CC, W_TRAIN, N_WORKLOADS };
enum { S_1000 = 2, S_10000 = 3 }; /* indices in sizes[] */

typedef struct {
  const char *name;
  measure_fn measure;
  bool repeat; /* quick steps may be repeated (chain_cc would hit its own cache) */
  bool mlp;    /* sized by layers: L = (n - 5) / 3 */
  int needs;   /* a workload whose same size must have finished first, or -1 */
} workload;

static const workload workloads[N_WORKLOADS] = {
    [W_CHAIN_NOTATION] = {"chain_notation", measure_chain_notation, true, false, -1},
    [W_CHAIN_API] = {"chain_api", measure_chain_api, true, false, -1},
    [W_MLP_NOTATION] = {"mlp_notation", measure_mlp_notation, true, true, -1},
    [W_MLP_API] = {"mlp_api", measure_mlp_api, true, true, -1},
    [W_CHAIN_CC] = {"chain_cc", measure_chain_cc, false, false, W_CHAIN_API},
    [W_TRAIN] = {"train", measure_train, false, true, -1},
};

/* The process group of the running child (0: none), killed whole on a timeout and when the
 * driver is interrupted, so a C compiler the child started does not run on; `interrupted` is the
 * signal that stops the driver, which then removes its scratch directory and dies of it. */
static volatile sig_atomic_t child_group, interrupted;

static void on_signal(int sig) {
  interrupted = sig;
  if (child_group > 0) kill(-(pid_t)child_group, SIGKILL);
}

static double peak_rss_mb(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : NAN; /* kB */
}

/* The child: caps, measures (repeating quick steps), reports, exits without flushing the
 * driver's stdio buffers a second time. */
static void child(const config *cfg, const workload *w, int64_t ops, int64_t layers, int fd) {
  const rlim_t bytes = (rlim_t)(cfg->mem_mb * 1024 * 1024);
  const rlim_t cpu = (rlim_t)ceil(cfg->timeout_s) + 5;
  setrlimit(RLIMIT_AS, &(struct rlimit){bytes, bytes});
  setrlimit(RLIMIT_CPU, &(struct rlimit){cpu, cpu + 5});
  result best, cur;
  for (int rep = 0; rep < MAX_REPS; rep++) {
    memset(&cur, 0, sizeof cur);
    w->measure(cfg, ops, layers, &cur);
    if (rep == 0 || (cur.status == ST_OK && cur.seconds < best.seconds)) best = cur;
    if (cur.status != ST_OK || !w->repeat || cur.seconds >= REPEAT_BELOW_S) break;
  }
  best.peak_mb = peak_rss_mb();
  const char *p = (const char *)&best;
  for (size_t left = sizeof best; left > 0;) {
    ssize_t k = write(fd, p, left);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) _exit(3);
    p += k;
    left -= (size_t)k;
  }
  _exit(0);
}

/* Runs one measurement in a child within the time cap; out->ops and out->layers are the model's
 * size. */
static void measure_in_child(const config *cfg, const workload *w, int64_t ops, int64_t layers,
                             result *out) {
  memset(out, 0, sizeof *out);
  int fds[2];
  if (pipe(fds) != 0) {
    fail_msg(out, ST_ERROR, "pipe", strerror(errno));
  } else {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      setpgid(0, 0);
      child(cfg, w, ops, layers, fds[1]);
    }
    close(fds[1]);
    if (pid > 0) {
      setpgid(pid, pid); /* also here, so the group exists whichever process runs first */
      child_group = pid;
    }
    if (pid < 0) {
      fail_msg(out, ST_ERROR, "fork", strerror(errno));
    } else {
      double deadline = now_seconds() + cfg->timeout_s;
      size_t got = 0;
      bool timed_out = false;
      while (got < sizeof *out) {
        double left = deadline - now_seconds();
        if (left <= 0) {
          timed_out = true;
          break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int ready = poll(&p, 1, (int)ceil(left * 1000));
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        ssize_t k = read(fds[0], (char *)out + got, sizeof *out - got);
        if (k > 0)
          got += (size_t)k;
        else if (k == 0 || errno != EINTR)
          break; /* the child ended without a whole record */
      }
      if (timed_out) kill(-pid, SIGKILL);
      int wstatus = 0;
      while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) continue;
      kill(-pid, SIGKILL); /* whatever the child left running */
      child_group = 0;
      if (timed_out) {
        memset(out, 0, sizeof *out);
        out->status = ST_TIMEOUT;
        snprintf(out->message, sizeof out->message, "killed after %g s", cfg->timeout_s);
      } else if (got < sizeof *out) {
        memset(out, 0, sizeof *out);
        char how[96];
        if (WIFSIGNALED(wstatus))
          snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(wstatus),
                   strsignal(WTERMSIG(wstatus)));
        else
          snprintf(how, sizeof how, "exit status %d without a result", WEXITSTATUS(wstatus));
        fail_msg(out, ST_CRASH, "the measuring child", how);
      }
    }
    close(fds[0]);
  }
  out->ops = ops;
  out->layers = layers;
}

/* ---- Reporting ------------------------------------------------------------------------------ */

static bool finished(const result *r) {
  return r->status == ST_OK;
}

/* A fatal status: the benchmark fails (timeouts, the memory cap and skips are scaling results). */
static bool fatal(const result *r) {
  return r->status == ST_ERROR || r->status == ST_WRONG || r->status == ST_CRASH;
}

/* Least-squares slope of log y against log x; NAN with fewer than 2 points. */
static double loglog_slope(const double *x, const double *y, int k) {
  if (k < 2) return NAN;
  double mx = 0, my = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < k; i++) {
    mx += log(x[i]) / k;
    my += log(y[i]) / k;
  }
  for (int i = 0; i < k; i++) {
    sxx += (log(x[i]) - mx) * (log(x[i]) - mx);
    sxy += (log(x[i]) - mx) * (log(y[i]) - my);
  }
  return sxx > 0 ? sxy / sxx : NAN;
}

typedef struct {
  double time, memory, time_last; /* NAN where fewer than 2 points */
  int time_points, memory_points;
} exponents;

/* Over the sizes that finished. Memory above the idle child's is fitted only where it is at least
 * 1 MB: below that it is noise. time_last is the slope between the two largest sizes. */
static exponents fit(const result *rs, const bool *ran, double baseline_mb) {
  double ops[N_SIZES], secs[N_SIZES], mops[N_SIZES], mb[N_SIZES];
  exponents e = {NAN, NAN, NAN, 0, 0};
  for (int s = 0; s < N_SIZES; s++) {
    if (!ran[s] || !finished(&rs[s])) continue;
    ops[e.time_points] = (double)rs[s].ops;
    secs[e.time_points++] = fmax(rs[s].seconds, 1e-6);
    if (rs[s].peak_mb - baseline_mb >= 1.0) {
      mops[e.memory_points] = (double)rs[s].ops;
      mb[e.memory_points++] = rs[s].peak_mb - baseline_mb;
    }
  }
  e.time = loglog_slope(ops, secs, e.time_points);
  e.memory = loglog_slope(mops, mb, e.memory_points);
  if (e.time_points >= 2)
    e.time_last = loglog_slope(ops + e.time_points - 2, secs + e.time_points - 2, 2);
  return e;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, const char *key, double v) {
  if (isfinite(v))
    fprintf(f, ",\"%s\":%.6g", key, v);
  else
    fprintf(f, ",\"%s\":null", key);
}

static FILE *json_begin(const config *cfg, int w) {
  FILE *f = cfg->json ? cfg->json : stdout;
  if (!cfg->json) fputs("json ", f);
  fputs("{\"bench\":\"scale\",\"workload\":", f);
  json_string(f, workloads[w].name);
  return f;
}

static bool has_phases(int w) {
  return w == W_CHAIN_API || w == W_MLP_API || w == W_TRAIN;
}

static void json_result(const config *cfg, int w, const result *r) {
  FILE *f = json_begin(cfg, w);
  fprintf(f, ",\"ops\":%lld", (long long)r->ops);
  if (workloads[w].mlp) fprintf(f, ",\"layers\":%lld", (long long)r->layers);
  json_number(f, "seconds", finished(r) ? r->seconds : NAN);
  json_number(f, "peak_mb", r->peak_mb > 0 ? r->peak_mb : NAN);
  fputs(",\"status\":", f);
  json_string(f, status_names[r->status]);
  if (finished(r) && has_phases(w)) {
    fputs(",\"phases\":{", f);
    for (int p = 0; p < N_PHASES; p++)
      fprintf(f, "%s\"%s\":%.6g", p ? "," : "", phase_names[p], r->phase[p]);
    fputc('}', f);
  }
  if (finished(r) && w == W_CHAIN_CC) {
    json_number(f, "lower_seconds", r->lower_s);
    json_number(f, "c_bytes", r->c_bytes);
  }
  if (finished(r) && w == W_TRAIN) {
    fprintf(f, ",\"train_steps\":%d", MOONS_STEPS);
    json_number(f, "train_seconds", r->train_s);
    json_number(f, "loss_first", r->loss_first);
    json_number(f, "loss_last", r->loss_last);
  }
  if (r->message[0]) {
    fputs(",\"message\":", f);
    json_string(f, r->message);
  }
  fputs("}\n", f);
}

static void json_exponents(const config *cfg, int w, const exponents *e) {
  FILE *f = json_begin(cfg, w);
  json_number(f, "time_exponent", e->time);
  json_number(f, "time_exponent_last_step", e->time_last);
  json_number(f, "memory_exponent", e->memory);
  fprintf(f, ",\"points\":%d,\"target_exponent\":%g}\n", e->time_points, TARGET_EXPONENT);
}

static void print_row(int w, const result *r) {
  char secs[32] = "-", mb[32] = "-", layers[32] = "-";
  if (finished(r)) snprintf(secs, sizeof secs, "%.4f", r->seconds);
  if (r->peak_mb > 0) snprintf(mb, sizeof mb, "%.1f", r->peak_mb);
  if (workloads[w].mlp) snprintf(layers, sizeof layers, "%lld", (long long)r->layers);
  printf("%-15s %6lld %6s %10s %9s  %-8s ", workloads[w].name, (long long)r->ops, layers, secs, mb,
         status_names[r->status]);
  if (!finished(r)) {
    printf("%s", r->message);
  } else if (w == W_CHAIN_CC) {
    printf("C compiler + C generation; lowering alone %.4f s; %.0f KB of C", r->lower_s,
           r->c_bytes / 1024);
  } else if (w == W_TRAIN) {
    printf("%d steps in %.2f s, mean loss of the first %d %.4f, of the last %d %.4f", MOONS_STEPS,
           r->train_s, LOSS_WINDOW, r->loss_first, LOSS_WINDOW, r->loss_last);
  } else if (has_phases(w)) {
    for (int p = 0; p < N_PHASES; p++)
      printf("%s%s %.4f", p ? ", " : "", phase_names[p], r->phase[p]);
  }
  putchar('\n');
  fflush(stdout);
}

static void print_exponents(int w, const exponents *e) {
  printf("%-15s time exponent ", workloads[w].name);
  if (isnan(e->time))
    printf("n/a (%d size%s finished)", e->time_points, e->time_points == 1 ? "" : "s");
  else
    printf("%.2f over %d sizes (last step %.2f)", e->time, e->time_points, e->time_last);
  if (!isnan(e->memory)) printf("; memory above baseline exponent %.2f", e->memory);
  putchar('\n');
}

enum { V_NOT_RUN, V_MISS, V_PASS };

/* One target line: what, the measured text and the verdict. */
static void target(const char *what, const char *measured, int verdict) {
  static const char *const verdicts[] = {"not run", "MISS", "PASS"};
  printf("  %-46s %-26s %s\n", what, measured, verdicts[verdict]);
}

/* A size target: the time or the peak memory of one size against a limit. */
static void size_target(int w, const result *r, bool ran, int64_t size, bool memory, double limit) {
  char what[96], measured[48];
  snprintf(what, sizeof what, "%s: %lld ops in <= %g %s", workloads[w].name, (long long)size, limit,
           memory ? "MB" : "s");
  double v = memory ? r->peak_mb : r->seconds;
  snprintf(measured, sizeof measured, memory ? "%.1f MB" : "%.3f s", v);
  if (!ran)
    target(what, "-", V_NOT_RUN);
  else if (!finished(r))
    target(what, status_names[r->status], V_MISS);
  else
    target(what, measured, v <= limit ? V_PASS : V_MISS);
}

/* ran: at least two sizes were measured (a fit needs two). */
static void exponent_target(int w, const exponents *e, bool ran) {
  char what[96], measured[48];
  snprintf(what, sizeof what, "%s: time exponent <= %g", workloads[w].name, TARGET_EXPONENT);
  snprintf(measured, sizeof measured, "%.2f", e->time);
  if (!ran)
    target(what, "-", V_NOT_RUN);
  else if (isnan(e->time))
    target(what, "too few sizes finished", V_MISS);
  else
    target(what, measured, e->time <= TARGET_EXPONENT ? V_PASS : V_MISS);
}

static void print_targets(const config *cfg, result rs[][N_SIZES], bool ran[][N_SIZES],
                          const exponents *ex) {
  printf("\ntargets (issue 12; reported, not asserted)\n");
  for (int w = 0; w < N_WORKLOADS; w++) {
    if (w == W_CHAIN_NOTATION || w == W_CHAIN_API) {
      size_target(w, &rs[w][S_1000], ran[w][S_1000], sizes[S_1000], false, TARGET_1000_S);
      size_target(w, &rs[w][S_1000], ran[w][S_1000], sizes[S_1000], true, TARGET_1000_MB);
      size_target(w, &rs[w][S_10000], ran[w][S_10000], sizes[S_10000], false, TARGET_10000_S);
    }
    if (w != W_CHAIN_CC && w != W_TRAIN) exponent_target(w, &ex[w], ran[w][1]);
  }
  size_target(W_CHAIN_CC, &rs[W_CHAIN_CC][S_1000], ran[W_CHAIN_CC][S_1000], sizes[S_1000], false,
              TARGET_CC_1000_S);
  char what[96], measured[48];
  const result *t = &rs[W_TRAIN][0];
  snprintf(what, sizeof what, "train: a %d-layer MLP trains on half moons", TARGET_TRAIN_DEPTH);
  if (!ran[W_TRAIN][0] || cfg->train_layers != TARGET_TRAIN_DEPTH) {
    target(what, "-", V_NOT_RUN);
  } else if (!finished(t)) {
    target(what, status_names[t->status], V_MISS);
  } else {
    snprintf(measured, sizeof measured, "loss %.3f -> %.3f", t->loss_first, t->loss_last);
    target(what, measured, t->loss_last < t->loss_first ? V_PASS : V_MISS);
  }
}

/* ---- Driver --------------------------------------------------------------------------------- */

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--max N] [--timeout S] [--mem-mb M] [--train-layers L] [--only WORKLOAD]\n"
          "          [--json FILE]\n"
          "  --max N          largest size in operations (default 10000; sizes 10 100 1000 10000)\n"
          "  --timeout S      seconds before a measurement is killed (default 60)\n"
          "  --mem-mb M       address-space cap of a measurement in MB (default 4096)\n"
          "  --train-layers L depth of the trained MLP (default 50)\n"
          "  --only WORKLOAD  chain_notation, chain_api, mlp_notation, mlp_api, chain_cc or train\n"
          "  --json FILE      the JSON lines go to FILE instead of `json ` lines on stdout\n",
          argv0);
  return 2;
}

/* The value of `--name V` or `--name=V` at argv[*i] (advancing *i), or NULL. */
static const char *option(int argc, char **argv, int *i, const char *name) {
  size_t len = strlen(name);
  if (strncmp(argv[*i], name, len) != 0) return NULL;
  if (argv[*i][len] == '=') return argv[*i] + len + 1;
  if (argv[*i][len] != '\0' || *i + 1 >= argc) return NULL;
  return argv[++*i];
}

static bool parse_number(const char *text, double min, double max, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !(v >= min && v <= max)) return false;
  *out = v;
  return true;
}

static bool parse_args(int argc, char **argv, config *cfg, const char **json_path) {
  double max = (double)sizes[N_SIZES - 1], layers = TARGET_TRAIN_DEPTH;
  for (int i = 1; i < argc; i++) {
    const char *v;
    bool ok = true;
    if ((v = option(argc, argv, &i, "--max")))
      ok = parse_number(v, (double)sizes[0], 1e9, &max);
    else if ((v = option(argc, argv, &i, "--timeout")))
      ok = parse_number(v, 0.1, 1e6, &cfg->timeout_s);
    else if ((v = option(argc, argv, &i, "--mem-mb")))
      ok = parse_number(v, 64, 1e9, &cfg->mem_mb);
    else if ((v = option(argc, argv, &i, "--train-layers")))
      ok = parse_number(v, 1, 100000, &layers);
    else if ((v = option(argc, argv, &i, "--only")))
      cfg->only = v;
    else if ((v = option(argc, argv, &i, "--json")))
      *json_path = v;
    else
      return false;
    if (!ok) return false;
  }
  cfg->max_ops = (int64_t)max;
  cfg->train_layers = (int64_t)layers;
  if (!cfg->only) return true;
  for (int w = 0; w < N_WORKLOADS; w++)
    if (strcmp(cfg->only, workloads[w].name) == 0) return true;
  return false;
}

/* The scratch cache of chain_cc: flat, so removing its files and itself is enough. */
static void remove_scratch(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4096];
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv) {
  config cfg = {sizes[N_SIZES - 1], 60, 4096, TARGET_TRAIN_DEPTH, NULL, NULL, NULL};
  const char *json_path = NULL;
  if (!parse_args(argc, argv, &cfg, &json_path)) return usage(argv[0]);
  if (json_path && !(cfg.json = fopen(json_path, "w"))) {
    fprintf(stderr, "bench_scale: cannot write %s: %s\n", json_path, strerror(errno));
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  char scratch[4096];
  snprintf(scratch, sizeof scratch, "%s/cannl-bench-scale-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(scratch)) {
    fprintf(stderr, "bench_scale: cannot create %s: %s\n", scratch, strerror(errno));
    return 1;
  }
  cfg.scratch = scratch;
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  static const workload idle = {"idle", measure_nothing, false, false, -1};
  result baseline;
  measure_in_child(&cfg, &idle, 0, 0, &baseline);
  bool failed = fatal(&baseline);
  printf("cannl compiler scaling: build-and-compile time and peak RSS, each measurement in its own "
         "process\n(time cap %g s, address-space cap %g MB; an idle measuring child peaks at "
         "%.1f MB)\n\n",
         cfg.timeout_s, cfg.mem_mb, baseline.peak_mb);
  printf("%-15s %6s %6s %10s %9s  %-8s %s\n", "workload", "ops", "layers", "seconds", "peak MB",
         "status", "detail");

  static result rs[N_WORKLOADS][N_SIZES];
  static bool ran[N_WORKLOADS][N_SIZES];
  for (int w = 0; w < N_WORKLOADS; w++) {
    const workload *wl = &workloads[w];
    if (cfg.only && strcmp(cfg.only, wl->name) != 0) continue;
    bool stop = false;
    for (int s = 0; s < (w == W_TRAIN ? 1 : N_SIZES) && (w == W_TRAIN || sizes[s] <= cfg.max_ops);
         s++) {
      if (interrupted) break;
      int64_t layers = w == W_TRAIN ? cfg.train_layers : wl->mlp ? (sizes[s] - 5) / 3 : 0;
      int64_t ops = wl->mlp ? 3 * layers + 5 : sizes[s];
      result *r = &rs[w][s];
      ran[w][s] = true;
      int needs = wl->needs;
      if (stop || (needs >= 0 && ran[needs][s] && !finished(&rs[needs][s]))) {
        *r = (result){.status = ST_SKIPPED, .ops = ops, .layers = layers};
        snprintf(r->message, sizeof r->message, "%s did not finish",
                 stop ? "a smaller size" : workloads[needs].name);
      } else {
        measure_in_child(&cfg, wl, ops, layers, r);
        if (interrupted) break;
      }
      stop = stop || !finished(r);
      failed = failed || fatal(r);
      print_row(w, r);
    }
  }

  if (interrupted) {
    remove_scratch(scratch);
    signal(interrupted, SIG_DFL);
    raise(interrupted);
  }

  printf("\ngrowth (least-squares slopes of log seconds and of log MB above the baseline against "
         "log ops)\n");
  exponents ex[N_WORKLOADS];
  for (int w = 0; w < N_WORKLOADS; w++) {
    ex[w] = fit(rs[w], ran[w], baseline.peak_mb);
    if (w != W_TRAIN && ran[w][0]) print_exponents(w, &ex[w]);
  }
  print_targets(&cfg, rs, ran, ex);

  if (!cfg.json) putchar('\n');
  for (int w = 0; w < N_WORKLOADS; w++) {
    for (int s = 0; s < N_SIZES; s++)
      if (ran[w][s]) json_result(&cfg, w, &rs[w][s]);
    if (w != W_TRAIN && ran[w][0]) json_exponents(&cfg, w, &ex[w]);
  }
  remove_scratch(scratch);
  if (cfg.json && fclose(cfg.json) != 0) {
    fprintf(stderr, "bench_scale: cannot write %s\n", json_path);
    failed = true;
  }
  if (failed) fprintf(stderr, "bench_scale: a step failed or computed a wrong value\n");
  return failed ? 1 : 0;
}
