/* Benchmark (issue 16): cannl's generated C against the same models in PyTorch (one and two
 * threads) and numpy, in one run. Workloads (single precision): matmul 256 / 1024 / 2048 (einsum
 * `ij;jk=>ik`), the MLP 784-128-10 SGD step (batch 128), conv 1->32->64 3x3 valid forward +
 * backward (batch 32, 28x28), softmax over 1M values (in order, cannl's default, and with its
 * sums in lanes: option reduce = lanes, the row softmax_lanes), the stream c = a + 3*b over 4M
 * values (also against a plain C loop of this binary, -O3), the half-moons training step
 * (demo/moons.h), nanoGPT's per-layer causal attention forward + backward (q, k, v [12, 64, 4, 32]:
 * batch, time, heads, head size; loss sum(y^2) / 12; issue 28), the embedding gather of a [65; 128]
 * table by [12; 64] ids forward + backward (loss sum(x^2) / 12) and the cold and warm JIT of the
 * moons model (compile + init; cold: a fresh empty CANNL_CACHE_DIR, warm: the same cache again).
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
#include "bench_common.h"

#include <ftw.h>

/* ---- The cannl models (child side), beside bench_common.h's ------------------------------- */

static const cn_asgn *softmax_code(cn_graph *g, int64_t n) {
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *x = random_data(g, "x", &d, 1);
  cn_tensor *s = x ? cn_tensor_softmax(g, x) : NULL;
  return s ? cn_graph_forward(g, s) : NULL;
}

/* The softmax with the context option reduce = lanes (read when the routine is compiled). */
static const cn_asgn *softmax_lanes_code(cn_graph *g, int64_t n) {
  if (cn_ctx_set_option(cn_graph_ctx(g), "reduce", "lanes") != CN_OK) return NULL;
  return softmax_code(g, n);
}

static const cn_asgn *stream_code(cn_graph *g, int64_t n) {
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *a = random_data(g, "a", &d, 1), *b = random_data(g, "b", &d, 2);
  cn_tensor *c = op2(g, CN_OP_ADD, a, op2(g, CN_OP_MUL, cn_tensor_number(g, 3), b));
  return c ? cn_graph_forward(g, c) : NULL;
}

/* Causal attention: y = causal_sdpa(q, k, v) with q, k, v parameters [batch, T, H, D] (output
 * axes), loss sum(y^2) / batch, the gradients of q, k and v. */
static const cn_asgn *attention_code(cn_graph *g, int64_t batch) {
  const int64_t dims[4] = {batch, 64, 4, 32};
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {4, dims, NULL}};
  cn_tensor *in[3];
  for (int i = 0; i < 3; i++) {
    const char *labels[3] = {"q", "k", "v"};
    cn_tensor *init = random_data(g, labels[i], &d, (uint64_t)i + 1);
    in[i] = init ? cn_tensor_param(g, labels[i], &d, init) : NULL;
  }
  cn_tensor *y =
      in[0] && in[1] && in[2] ? cn_tensor_causal_sdpa(g, in[0], in[1], in[2], NULL, NULL) : NULL;
  cn_tensor *loss = y ? sum_squares(g, y, batch) : NULL;
  if (!loss || init_params(g, loss) != CN_OK) return NULL;
  return cn_graph_grad_update(g, loss);
}

/* The embedding: x = gather(table, ids) with table a [65; 128] parameter and ids int32
 * [batch; 64] (batch, output axes) in [0, 65), loss sum(x^2) / batch, the table's gradient. */
static const cn_asgn *embedding_code(cn_graph *g, int64_t batch) {
  const int64_t t_size = 64, vocab = 65, width = 128, table_dims[2] = {vocab, width};
  const cn_dims td = {CN_AXES_NONE, CN_AXES_NONE, {2, table_dims, NULL}};
  const cn_dims id = {{1, &batch, NULL}, CN_AXES_NONE, {1, &t_size, NULL}};
  double *v = malloc((size_t)(batch * t_size) * sizeof *v);
  if (!v) return NULL;
  for (int64_t c = 0; c < batch * t_size; c++) v[c] = (double)((c * 37 + c / 5) % vocab);
  cn_graph_set_prec(g, CN_PREC_INT32);
  cn_tensor *ids = cn_tensor_data(g, "ids", &id, v, (size_t)(batch * t_size));
  cn_graph_set_prec(g, CN_PREC_SINGLE);
  free(v);
  cn_tensor *init = random_data(g, "table", &td, 1);
  cn_tensor *table = init ? cn_tensor_param(g, "table", &td, init) : NULL;
  cn_tensor *x = table && ids ? cn_tensor_gather(g, table, ids) : NULL;
  cn_tensor *loss = x ? sum_squares(g, x, batch) : NULL;
  if (!loss || init_params(g, loss) != CN_OK) return NULL;
  return cn_graph_grad_update(g, loss);
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
  const moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_C, 1, MOONS_BATCH};
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
  const moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_C, 1, MOONS_BATCH};
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

static const model models[] = {{"matmul", matmul_code},
                               {"mlp", mlp_code},
                               {"conv", conv_code},
                               {"softmax", softmax_code},
                               {"softmax_lanes", softmax_lanes_code},
                               {"stream", stream_code},
                               {"attention", attention_code},
                               {"embedding", embedding_code}};

static int child(const char *kind, int64_t size, double budget) {
  printf("threads=%s\n", getenv("CANNL_THREADS") ? getenv("CANNL_THREADS") : "unset");
  if (strcmp(kind, "moons") == 0) return time_moons(budget);
  if (strcmp(kind, "jit") == 0) return time_jit((int)size);
  int rc = time_model("bench_perf", models, sizeof models / sizeof models[0], kind, size, budget);
  if (!rc && strcmp(kind, "stream") == 0) rc = time_plain_stream(size, budget);
  return rc;
}

/* ---- The parent: children, table, JSON, targets ---------------------------------------------- */

typedef struct {
  workload w;
  cell cannl[2], warm[2], plainc[2], torch[2], numpy; /* [threads - 1] */
  char threads[2][32];
} row;

static row rows[] = {
    {.w = {.name = "matmul256", .kind = "matmul", .full = 256, .quick = 32}},
    {.w = {.name = "matmul1024", .kind = "matmul", .full = 1024, .quick = 64}},
    {.w = {.name = "matmul2048", .kind = "matmul", .full = 2048, .quick = 96}},
    {.w = {.name = "mlp", .kind = "mlp", .full = 128, .quick = 8}},
    {.w = {.name = "conv", .kind = "conv", .full = 32, .quick = 1}},
    {.w = {.name = "softmax", .kind = "softmax", .full = 1 << 20, .quick = 1 << 12}},
    {.w = {.name = "softmax_lanes", .kind = "softmax_lanes", .full = 1 << 20, .quick = 1 << 12}},
    {.w = {.name = "stream", .kind = "stream", .full = 4 << 20, .quick = 1 << 14}},
    {.w = {.name = "moons", .kind = "moons", .full = MOONS_BATCHES, .quick = MOONS_BATCHES}},
    {.w = {.name = "attention", .kind = "attention", .full = 12, .quick = 1}},
    {.w = {.name = "embedding", .kind = "embedding", .full = 12, .quick = 1}},
    {.w = {.name = "jit", .kind = "jit", .full = 3, .quick = 1}},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };
static bench perf;

/* Reads the `NAME median_ms=.. best_ms=.. reps=..` lines of a child (threads index ti) or of the
 * python side into r. */
static void parse_line(void *row_, int ti, const char *line) {
  row *r = row_;
  char name[32];
  timing t;
  if (sscanf(line, "threads=%31s", name) == 1)
    snprintf(r->threads[ti], sizeof r->threads[ti], "%s", name);
  if (!parse_timing(line, name, &t)) return;
  cell *c = strcmp(name, "cannl") == 0    ? &r->cannl[ti]
            : strcmp(name, "warm") == 0   ? &r->warm[ti]
            : strcmp(name, "plainc") == 0 ? &r->plainc[ti]
                                          : python_cell(name, r->torch, &r->numpy);
  if (c) *c = (cell){true, t};
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
  double n = (double)r->w.size;
  buf[0] = '\0';
  if (strcmp(r->w.kind, "matmul") == 0)
    for (int ti = 0; ti < 2; ti++)
      if (r->cannl[ti].have) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%.2f GFLOP/s %dt", ti ? ", " : "",
                 2 * n * n * n / r->cannl[ti].t.median_ms * 1e-6, ti + 1);
      }
  if (strcmp(r->w.kind, "stream") == 0 && r->cannl[0].have && r->plainc[0].have)
    snprintf(buf, size, "%.2f GB/s; plain C %.4g ms, %.2f GB/s",
             12 * n / r->cannl[0].t.median_ms * 1e-6, r->plainc[0].t.median_ms,
             12 * n / r->plainc[0].t.median_ms * 1e-6);
  if (strcmp(r->w.kind, "moons") == 0) snprintf(buf, size, "per step");
}

static void print_line(const char *name, const cell *c, const cell *t, const cell *np,
                       const char *extra) {
  char b[7][24];
  snprintf(b[5], sizeof b[5], "%.3g", ratio(&t[0], &c[0]));
  snprintf(b[6], sizeof b[6], "%.3g", ratio(&t[1], &c[1]));
  printf("%-13s %10s %10s %10s %10s %10s %8s %8s  %s\n", name, fmt_ms(b[0], 24, &c[0]),
         fmt_ms(b[1], 24, &c[1]), fmt_ms(b[2], 24, &t[0]), fmt_ms(b[3], 24, &t[1]),
         fmt_ms(b[4], 24, np), isnan(ratio(&t[0], &c[0])) ? "-" : b[5],
         isnan(ratio(&t[1], &c[1])) ? "-" : b[6], extra);
}

/* The python side's versions, the children's CANNL_THREADS and the table. */
static void report(const bench *b) {
  printf("\npython side: %s; cannl children: CANNL_THREADS=%s / %s\n",
         b->versions[0] ? b->versions : "did not run", rows[0].threads[0],
         rows[0].threads[1][0] ? rows[0].threads[1] : "-");
  const cell none[2] = {{false, {0, 0, 0}}, {false, {0, 0, 0}}};
  printf("\n%-13s %10s %10s %10s %10s %10s %8s %8s  %s\n", "workload", "cannl 1t", "cannl 2t",
         "torch 1t", "torch 2t", "numpy", "ratio 1t", "ratio 2t",
         "(ms, medians; ratio = PyTorch / cannl)");
  for (int i = 0; i < N_ROWS; i++) {
    const row *r = &rows[i];
    char extra[128];
    note(r, extra, sizeof extra);
    if (strcmp(r->w.kind, "jit") == 0) {
      print_line("jit cold", r->cannl, none, &none[0], "moons model: compile + init, empty cache");
      print_line("jit warm", r->warm, none, &none[0], "the same cache again");
    } else {
      print_line(r->w.name, r->cannl, r->torch, &r->numpy, extra);
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

static void json_line(const void *row_, FILE *file) {
  const row *r = row_;
  char buf[1024];
  char threads[2][40];
  for (int ti = 0; ti < 2; ti++)
    snprintf(threads[ti], sizeof threads[ti], r->threads[ti][0] ? "\"%s\"" : "null",
             r->threads[ti]);
  snprintf(buf, sizeof buf,
           "{\"bench\":\"perf\",\"workload\":\"%s\",\"size\":%lld,\"cannl_threads\":[%s,%s]",
           r->w.name, (long long)r->w.size, threads[0], threads[1]);
  const char *keys[] = {"cannl_1t", "cannl_2t", "warm_1t",  "warm_2t",
                        "plain_c",  "torch_1t", "torch_2t", "numpy"};
  const cell *cells[] = {&r->cannl[0],  &r->cannl[1], &r->warm[0],  &r->warm[1],
                         &r->plainc[0], &r->torch[0], &r->torch[1], &r->numpy};
  for (int k = 0; k < 8; k++)
    if (strcmp(r->w.kind, "jit") == 0 ? k < 4 : (k < 2 || k > 3))
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

/* The targets of issue 16 (ratios of medians in this run). */
static void print_targets(void) {
  row *mlp = bench_find(&perf, "mlp"), *conv = bench_find(&perf, "conv"),
      *stream = bench_find(&perf, "stream");
  row *moons = bench_find(&perf, "moons"), *mm = bench_find(&perf, "matmul1024"),
      *jit = bench_find(&perf, "jit");
  printf("\ntargets (issue 16; ratios of medians):\n");
  print_target("mlp: PyTorch 1t / cannl 1t", ratio(&mlp->torch[0], &mlp->cannl[0]), 1.0, false);
  print_target("mlp: PyTorch 2t / cannl 2t", ratio(&mlp->torch[1], &mlp->cannl[1]), 1.0, false);
  print_target("conv: PyTorch 1t / cannl 1t", ratio(&conv->torch[0], &conv->cannl[0]), 1.0, false);
  print_target("conv: PyTorch 2t / cannl 2t", ratio(&conv->torch[1], &conv->cannl[1]), 1.0, false);
  print_target("stream: plain C -O3 / cannl 1t", ratio(&stream->plainc[0], &stream->cannl[0]), 0.8,
               false);
  print_target("moons: PyTorch 1t / cannl 1t", ratio(&moons->torch[0], &moons->cannl[0]), 100,
               false);
  print_target("mlp: cannl 1t / cannl 2t", ratio(&mlp->cannl[0], &mlp->cannl[1]), 1.7, false);
  print_target("conv: cannl 1t / cannl 2t", ratio(&conv->cannl[0], &conv->cannl[1]), 1.7, false);
  print_target("matmul1024: cannl 1t / cannl 2t", ratio(&mm->cannl[0], &mm->cannl[1]), 1.7, false);
  print_target("matmul1024: PyTorch 1t / cannl 1t", ratio(&mm->torch[0], &mm->cannl[0]), 0.3,
               false);
  print_target("jit cold: moons model, ms (1t)",
               jit->cannl[0].have ? jit->cannl[0].t.median_ms : NAN, 1000, true);
}

static void intro(bool quick) {
  const char *env = getenv("CANNL_THREADS");
  printf("bench_perf%s: cannl on generated C in children with CANNL_THREADS=1%s (this "
         "environment's CANNL_THREADS: %s, not used), PyTorch with 1 and 2 threads, numpy\n",
         quick ? " --quick" : "", quick ? "" : " and 2", env ? env : "unset");
}

static bench perf = {.name = "bench_perf",
                     .rows = rows,
                     .row_size = sizeof rows[0],
                     .n_rows = N_ROWS,
                     .n_modes = 1,
                     .mode_env = (const char *const[]){""},
                     .mode_names = (const char *const[]){""},
                     .cannl_only = "jit",
                     .child = child,
                     .parse = parse_line,
                     .intro = intro,
                     .report = report,
                     .json_line = json_line,
                     .targets = print_targets};

int main(int argc, char **argv) {
  return bench_main(&perf, argc, argv);
}
