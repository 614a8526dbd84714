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
#include "bench_common.h"

static const double PEAK_GFLOPS = 212; /* per core, fma, single precision (issue 17) */

/* ---- The cannl models (child side), beside bench_common.h's ------------------------------- */

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

static const model models[] = {{"matmul", matmul_code},       {"skinny", skinny_code},
                               {"attention", attention_code}, {"mlp", mlp_code},
                               {"conv", conv_code},           {"conv64", conv64_code}};

static int child(const char *kind, int64_t size, double budget) {
  const char *threads = getenv("CANNL_THREADS"), *exact = getenv("CANNL_EXACT");
  printf("env CANNL_THREADS=%s CANNL_EXACT=%s\n", threads ? threads : "unset",
         exact ? exact : "unset");
  return time_model("bench_gemm", models, sizeof models / sizeof models[0], kind, size, budget);
}

/* ---- The parent: children, tables, JSON, targets --------------------------------------------- */

typedef struct {
  workload w;
  cell cannl[2][2], torch[2], numpy; /* cannl[exact][threads - 1], torch[threads - 1] */
  char env[2][2][64];                /* the children's CANNL_THREADS and CANNL_EXACT */
} row;

static row rows[] = {
    {.w = {.name = "matmul64", .kind = "matmul", .full = 64, .quick = 16}},
    {.w = {.name = "matmul256", .kind = "matmul", .full = 256, .quick = 32}},
    {.w = {.name = "matmul512", .kind = "matmul", .full = 512, .quick = 48}},
    {.w = {.name = "matmul1024", .kind = "matmul", .full = 1024, .quick = 64}},
    {.w = {.name = "matmul2048", .kind = "matmul", .full = 2048, .quick = 96}},
    {.w = {.name = "skinny", .kind = "skinny", .full = 4096, .quick = 128}},
    {.w = {.name = "attention", .kind = "attention", .full = 128, .quick = 32}},
    {.w = {.name = "mlp", .kind = "mlp", .full = 128, .quick = 8}},
    {.w = {.name = "conv", .kind = "conv", .full = 32, .quick = 1}},
    {.w = {.name = "conv64", .kind = "conv64", .full = 56, .quick = 8}},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };
static bench gemm;

/* Reads one line of a child (slot: mode * 2 + threads index) or of the python side into r. */
static void parse_line(void *row_, int slot, const char *line) {
  row *r = row_;
  int mode = slot / 2, ti = slot % 2;
  char name[32];
  timing t;
  if (strncmp(line, "env ", 4) == 0)
    snprintf(r->env[mode][ti], sizeof r->env[mode][ti], "%.*s", (int)strcspn(line + 4, "\n"),
             line + 4);
  if (!parse_timing(line, name, &t)) return;
  cell *c =
      strcmp(name, "cannl") == 0 ? &r->cannl[mode][ti] : python_cell(name, r->torch, &r->numpy);
  if (c) *c = (cell){true, t};
}

/* GFLOP/s of a cell of row r, NAN when missing. */
static double gflops(const row *r, const cell *c) {
  return c->have && c->t.median_ms > 0 ? flops(r->w.kind, r->w.size) / c->t.median_ms * 1e-6 : NAN;
}

/* The cells of a row in column order: fma 1t, fma 2t, exact 1t, exact 2t, torch 1t, torch 2t,
 * numpy. */
static void row_cells(const row *r, const cell *cells[7]) {
  const cell *c[7] = {&r->cannl[0][0], &r->cannl[0][1], &r->cannl[1][0], &r->cannl[1][1],
                      &r->torch[0],    &r->torch[1],    &r->numpy};
  memcpy(cells, c, sizeof c);
}

/* The python side's versions, the children's environments and the tables. */
static void report(const bench *gb) {
  printf("\npython side: %s\ncannl children:", gb->versions[0] ? gb->versions : "did not run");
  for (int k = 0; k < 4; k++)
    if (rows[0].env[k / 2][k % 2][0]) printf(" [%s]", rows[0].env[k / 2][k % 2]);
  printf("\n");
  char b[12][24];
  printf("\n%-11s %9s %9s %9s %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", "workload", "fma 1t",
         "fma 2t", "exact 1t", "exact 2t", "torch 1t", "torch 2t", "numpy 1t", "GFLOP/s", "pt/c 1t",
         "pt/c 2t", "np/c", "2t/1t");
  for (int i = 0; i < N_ROWS; i++) {
    const row *r = &rows[i];
    const cell *c[7];
    row_cells(r, c);
    for (int k = 0; k < 7; k++) fmt_number(b[k], 24, "%.4g", c[k]->have ? c[k]->t.median_ms : NAN);
    printf("%-11s %9s %9s %9s %9s %9s %9s %9s %8s %7s %7s %7s %7s\n", r->w.name, b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], fmt_number(b[7], 24, "%.4g", gflops(r, c[0])),
           fmt_number(b[8], 24, "%.4g", ratio(&r->torch[0], c[0])),
           fmt_number(b[9], 24, "%.4g", ratio(&r->torch[1], c[1])),
           fmt_number(b[10], 24, "%.4g", ratio(&r->numpy, c[0])),
           fmt_number(b[11], 24, "%.4g", ratio(c[0], c[1])));
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
    for (int k = 0; k < 7; k++) fmt_number(b[k], 24, "%.4g", gflops(r, c[k]));
    printf("%-11s %12.4g %9s %9s %9s %9s %9s %9s %9s\n", r->w.name,
           flops(r->w.kind, r->w.size) * 1e-9, b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
  }
}

static void json_line(const void *row_, FILE *file) {
  const row *r = row_;
  char buf[2048], env[4][72];
  for (int k = 0; k < 4; k++)
    if (r->env[k / 2][k % 2][0])
      snprintf(env[k], sizeof env[k], "\"%s\"", r->env[k / 2][k % 2]);
    else
      snprintf(env[k], sizeof env[k], "null");
  snprintf(buf, sizeof buf,
           "{\"bench\":\"gemm\",\"workload\":\"%s\",\"kind\":\"%s\",\"size\":%lld,\"flops\":%.0f,"
           "\"cannl_env\":[%s,%s,%s,%s]",
           r->w.name, r->w.kind, (long long)r->w.size, flops(r->w.kind, r->w.size), env[0], env[1],
           env[2], env[3]);
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

/* The targets of issue 17 (ratios of medians in this run, cannl in fma mode). */
static void print_targets(void) {
  char what[64];
  printf("\ntargets (issue 17; ratios of medians, cannl fma):\n");
  for (int n = 1024; n <= 2048; n *= 2) {
    snprintf(what, sizeof what, "matmul%d", n);
    row *r = bench_find(&gemm, what);
    snprintf(what, sizeof what, "matmul%d: numpy 1t / cannl 1t", n);
    print_target(what, ratio(&r->numpy, &r->cannl[0][0]), 1.0, false);
    snprintf(what, sizeof what, "matmul%d: PyTorch 1t / cannl 1t", n);
    print_target(what, ratio(&r->torch[0], &r->cannl[0][0]), 0.8, false);
    snprintf(what, sizeof what, "matmul%d: cannl 1t / cannl 2t", n);
    print_target(what, ratio(&r->cannl[0][0], &r->cannl[0][1]), 1.8, false);
  }
  row *mlp = bench_find(&gemm, "mlp"), *conv = bench_find(&gemm, "conv");
  print_target("mlp: PyTorch 1t / cannl 1t", ratio(&mlp->torch[0], &mlp->cannl[0][0]), 1.5, false);
  print_target("mlp: PyTorch 2t / cannl 2t", ratio(&mlp->torch[1], &mlp->cannl[0][1]), 1.5, false);
  print_target("conv: PyTorch 1t / cannl 1t", ratio(&conv->torch[0], &conv->cannl[0][0]), 1.0,
               false);
  print_target("conv: PyTorch 2t / cannl 2t", ratio(&conv->torch[1], &conv->cannl[0][1]), 1.0,
               false);
  printf("\nfraction of peak (%g GFLOP/s per core), cannl fma 1t:\n", PEAK_GFLOPS);
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].w.name, "matmul1024") == 0 || strcmp(rows[i].w.name, "matmul2048") == 0) {
      double g = gflops(&rows[i], &rows[i].cannl[0][0]);
      if (isnan(g))
        printf("peak  %-40s       n/a\n", rows[i].w.name);
      else
        printf("peak  %-40s %8.1f%%  (%.2f GFLOP/s)\n", rows[i].w.name, 100 * g / PEAK_GFLOPS, g);
    }
}

static void intro(bool quick) {
  const char *env = getenv("CANNL_THREADS"), *exact = getenv("CANNL_EXACT");
  printf("bench_gemm%s: cannl on generated C in children with CANNL_EXACT=0 and 1, "
         "CANNL_THREADS=1%s (this environment's CANNL_THREADS: %s, CANNL_EXACT: %s, not used), "
         "PyTorch with 1 and 2 threads, numpy with 1\n",
         quick ? " --quick" : "", quick ? "" : " and 2", env ? env : "unset",
         exact ? exact : "unset");
}

static double gflop(const workload *w) {
  return flops(w->kind, w->size) * 1e-9;
}

static bench gemm = {.name = "bench_gemm",
                     .rows = rows,
                     .row_size = sizeof rows[0],
                     .n_rows = N_ROWS,
                     .n_modes = 2,
                     .mode_env = (const char *const[]){" CANNL_EXACT=0", " CANNL_EXACT=1"},
                     .mode_names = (const char *const[]){"fma", "exact"},
                     .child = child,
                     .parse = parse_line,
                     .intro = intro,
                     .gflop = gflop,
                     .report = report,
                     .json_line = json_line,
                     .targets = print_targets};

int main(int argc, char **argv) {
  return bench_main(&gemm, argc, argv);
}
