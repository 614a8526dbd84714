/* Benchmark of the backends on the models of bench_common.h, for devices: matmul 1024 and 4096
 * (single precision), the MLP step 784-128-10 (batch 256) and the conv step (batch 32), each
 * compiled on every backend named on the command line (default: c cuda) and timed
 * (bench_common.h's measure: a warm-up, then the median of the runs that fit the budget). Prints
 * per row and backend the median time and the GFLOP/s (2 n^3 for a matmul; for the steps three
 * times the forward pass's multiply-adds, two flops each: the usual estimate of forward +
 * backward). A device backend's timed runs move no data: the nodes' copies stay on the device
 * between runs (device-resident nodes), uploaded once by the warm-up; each run ends when the device
 * has finished (cn_routine_synchronize: runs are queued). A backend that cannot run here (no GPU)
 * is reported as such and the benchmark goes on; it fails (exit 1) only when a model cannot be
 * built or a run fails. Each row and backend also prints the ratio of the first backend's median to
 * its own and a JSON line (`JSON {"bench":"device","workload":...}`). Usage: bench_bench_device
 * [--budget SECONDS] [--only ROW]... [BACKEND...] (the build names it so; --only keeps the rows
 * whose name contains ROW, e.g. --only mlp --only "matmul 1024"). */
#include "bench_common.h"

typedef struct {
  const char *name;
  code_fn code;
  int64_t size;
  double flops;
} row;

static double mlp_flops(int64_t batch) {
  return 3.0 * 2.0 * (double)batch * (784.0 * 128 + 128.0 * 10);
}

static double conv_flops(int64_t batch) {
  return 3.0 * 2.0 * (double)batch * (26.0 * 26 * 32 * 9 + 24.0 * 24 * 64 * 32 * 9);
}

/* One row on one backend: its median in ms (NAN when it did not run), and *failed after a message
 * on failure; a backend whose device is not here (CN_ERR_UNSUPPORTED: no GPU, no driver) is
 * reported as such, which is no failure. `baseline` is the first backend's median on this row:
 * the ratio printed and written is baseline / median (above 1: faster than the first backend). */
static double time_row(const row *r, cn_backend_kind backend, double budget, double baseline,
                       bool *failed) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const cn_asgn *asgn = g ? r->code(g, r->size) : NULL;
  cn_routine *routine = asgn ? cn_routine_compile(ctx, asgn, backend, "bench") : NULL;
  timing t;
  double median = NAN;
  if (!routine || measure(run_routine, routine, budget, 1, &t) != CN_OK) {
    const char *why = ctx && *cn_ctx_error(ctx) ? cn_ctx_error(ctx) : "out of memory";
    bool absent = ctx && cn_ctx_status(ctx) == CN_ERR_UNSUPPORTED;
    printf("%-12s %-8s %s: %s\n", r->name, cn_backend_name(backend), absent ? "not here" : "FAILED",
           why);
    *failed |= !absent;
  } else {
    median = t.median_ms;
    char ratio[32];
    printf("%-12s %-8s median %10.3f ms  best %10.3f ms  %9.1f GFLOP/s  %sx of the first (%d "
           "runs)\n",
           r->name, cn_backend_name(backend), t.median_ms, t.best_ms,
           r->flops / (t.median_ms * 1e6),
           fmt_number(ratio, sizeof ratio, "%.3g", baseline / median), t.reps);
  }
  char json[512];
  snprintf(json, sizeof json, "{\"bench\":\"device\",\"workload\":\"%s\",\"backend\":\"%s\"",
           r->name, cn_backend_name(backend));
  json_num(json, sizeof json, "median_ms", median);
  json_num(json, sizeof json, "gflops", r->flops / (median * 1e6));
  json_num(json, sizeof json, "ratio_to_first", baseline / median);
  printf("JSON %s}\n", json);
  fflush(stdout);
  cn_routine_free(routine);
  cn_ctx_destroy(ctx);
  return median;
}

int main(int argc, char **argv) {
  double budget = 2.0;
  const char *names[8], *only[8];
  int n_names = 0, n_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc)
      budget = atof(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc && n_only < 8)
      only[n_only++] = argv[++i];
    else if (n_names < 8)
      names[n_names++] = argv[i];
  }
  if (n_names == 0) {
    names[n_names++] = "c";
    names[n_names++] = "cuda";
  }
  const row rows[] = {
      {"matmul 1024", matmul_code, 1024, 2.0 * 1024 * 1024 * 1024},
      {"matmul 4096", matmul_code, 4096, 2.0 * 4096.0 * 4096 * 4096},
      {"mlp step", mlp_code, 256, mlp_flops(256)},
      {"conv step", conv_code, 32, conv_flops(32)},
  };
  for (int b = 0; b < n_names; b++)
    if (cn_backend_find(names[b]) < 0) {
      fprintf(stderr, "bench_device: unknown backend '%s' (known: %s)\n", names[b],
              cn_backend_list());
      return 1;
    }
  cn_ctx *ctx = cn_ctx_create();
  for (int b = 0; ctx && b < n_names; b++) {
    char device[512];
    int kind = cn_backend_find(names[b]);
    if (cn_backend_device(ctx, (cn_backend_kind)kind, device, sizeof device) == CN_OK)
      printf("%-8s %s\n", names[b], device);
  }
  cn_ctx_destroy(ctx);
  bool failed = false;
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    bool chosen = n_only == 0;
    for (int k = 0; k < n_only; k++) chosen |= strstr(rows[r].name, only[k]) != NULL;
    if (!chosen) continue;
    double baseline = NAN;
    for (int b = 0; b < n_names; b++) {
      double median =
          time_row(&rows[r], (cn_backend_kind)cn_backend_find(names[b]), budget, baseline, &failed);
      if (b == 0) baseline = median;
    }
  }
  return failed;
}
