/* Benchmark of data-parallel training (issue 33, "Benchmark"): the Fashion-MNIST MLP and convnet
 * (demo/fashion.c, Adam, global batch 100, generated C) trained in samples per second in four
 * setups, in the same run:
 *   1 process x 1 thread    one routine per step (the reference of the ratios)
 *   1 process x 2 threads   one routine per step, its parallel loops on two threads
 *   2 devices x 1 thread    cn_dp on two CPU devices of one process (shards of 50)
 *   2 ranks x 1 thread      cn_dp across two MPI ranks (mpirun -np 2 of this program, launched
 *                           here; skipped with a message without MPI or without mpirun)
 * Each setup builds the model, trains one epoch (the warm-up: compiles, the epoch's shards), then
 * times STEPS further steps on the epoch's batches. For the data-parallel setups it also times the
 * all-reduce alone (the devices' cn_allreduce_run, the ranks' cn_dist_allreduce_run) on the same
 * gradients and loss, and reports it per step and as a fraction of the step, and the step's
 * check (cn_dp_check) alone: on two shared cores the point is correctness and overhead, not
 * speed-up. Prints a line per row, then its JSON line
 * (`JSON {"bench":"dp","model":...}`; with --json FILE also the bare lines there). Skipped (exit
 * 0, saying so) without the data set; exit 1 when a setup fails.
 * Usage: bench_bench_dp [--json FILE] [--steps-mlp N] [--steps-convnet N] (defaults 200, 30). */
#include "../demo/fashion.h"
#include "../tests/mpi_launch.h"
#include "bench_common.h"

#ifndef CANNL_MPIEXEC
#define CANNL_MPIEXEC ""
#endif

enum { BATCH = 100, TRAIN = 2000, TEST = 100 };

typedef struct {
  double samples_per_s, step_ms, allreduce_ms, check_ms; /* the last two NAN: not data parallel */
} result;

/* The setup's model trained one epoch and then timed; false with a message on failure. */
static bool run_setup(fashion_model model, int devices, int threads, int steps, result *out) {
  char threads_text[16];
  snprintf(threads_text, sizeof threads_text, "%d", threads);
  setenv("CANNL_THREADS", threads_text, 1); /* the routines' default, read when compiled */
  const fashion_config cfg = {model, 2, BATCH, TRAIN, TEST,         0,
                              0,     7, NULL,  NULL,  CN_BACKEND_C, devices};
  fashion f;
  cn_status st = fashion_build(&f, &cfg);
  if (st == CN_OK) st = fashion_train_epoch(&f, NULL, NULL);
  const int64_t batches = TRAIN / BATCH;
  double start = now_seconds();
  for (int s = 0; s < steps && st == CN_OK; s++) {
    int64_t b = s % batches, step = batches + s % batches; /* epoch 1's learning rate */
    if (f.dp) {
      if ((st = cn_dp_bind(f.dp, f.batch, b)) == CN_OK &&
          (st = cn_dp_bind(f.dp, f.step_n, step)) == CN_OK)
        st = cn_dp_step(f.dp);
    } else if ((st = cn_routine_bind(f.step, f.batch, b)) == CN_OK &&
               (st = cn_routine_bind(f.step, f.step_n, step)) == CN_OK) {
      st = cn_routine_run(f.step);
    }
  }
  double seconds = now_seconds() - start;
  out->step_ms = seconds * 1e3 / steps;
  out->samples_per_s = (double)BATCH * steps / seconds;
  out->allreduce_ms = out->check_ms = NAN;
  if (st == CN_OK && f.dp) {
    /* The all-reduce alone, over what the step reduces: every gradient and the loss (their values
     * are the last step's, summed again: the next step's gradient routine overwrites them). */
    cn_node *nodes[9];
    int n = 0;
    for (int p = 0; p < f.n_params; p++) nodes[n++] = cn_tensor_grad(f.params[p]);
    nodes[n++] = cn_tensor_value(f.loss);
    bool ranks = cn_dist_size() > 1;
    cn_allreduce *local = ranks ? NULL : cn_allreduce_create(f.ctx, n, nodes, CN_BACKEND_C);
    cn_dist_allreduce *across =
        ranks ? cn_dist_allreduce_create(f.ctx, n, nodes, CN_BACKEND_C) : NULL;
    st = local || across ? CN_OK : cn_ctx_status(f.ctx);
    int reps = 0;
    start = now_seconds();
    for (; st == CN_OK && reps < steps; reps++)
      st = local ? cn_allreduce_run(local) : cn_dist_allreduce_run(across);
    out->allreduce_ms = (now_seconds() - start) * 1e3 / (reps ? reps : 1);
    cn_allreduce_free(local);
    cn_dist_allreduce_free(across);
    /* The step's check alone (every parameter on every device, and across ranks); the gradients
     * summed again above leave the parameters as they were. */
    start = now_seconds();
    for (reps = 0; st == CN_OK && reps < steps; reps++) st = cn_dp_check(f.dp);
    out->check_ms = (now_seconds() - start) * 1e3 / (reps ? reps : 1);
  }
  if (st != CN_OK) fprintf(stderr, "bench_dp: %s\n", fashion_error(&f));
  fashion_destroy(&f);
  return st == CN_OK;
}

static const char *model_name(fashion_model model) {
  return model == FASHION_MLP ? "mlp" : "convnet";
}

/* The row's line and JSON line; `reference` is the first row's samples/s. */
static void report(fashion_model model, const char *setup, const result *r, double reference,
                   FILE *json_file) {
  char ratio[32], fraction[32], allreduce[32], check[32];
  printf("%-8s %-22s %9.1f samples/s  step %8.3f ms  %sx of 1 process x 1 thread  all-reduce "
         "%s ms a step (%s of the step)  check %s ms\n",
         model_name(model), setup, r->samples_per_s, r->step_ms,
         fmt_number(ratio, sizeof ratio, "%.3g", r->samples_per_s / reference),
         fmt_number(allreduce, sizeof allreduce, "%.3f", r->allreduce_ms),
         fmt_number(fraction, sizeof fraction, "%.3g", r->allreduce_ms / r->step_ms),
         fmt_number(check, sizeof check, "%.3f", r->check_ms));
  char json[512];
  snprintf(json, sizeof json, "{\"bench\":\"dp\",\"model\":\"%s\",\"setup\":\"%s\"",
           model_name(model), setup);
  json_num(json, sizeof json, "samples_per_s", r->samples_per_s);
  json_num(json, sizeof json, "step_ms", r->step_ms);
  json_num(json, sizeof json, "ratio", r->samples_per_s / reference);
  json_num(json, sizeof json, "allreduce_ms", r->allreduce_ms);
  json_num(json, sizeof json, "allreduce_fraction", r->allreduce_ms / r->step_ms);
  json_num(json, sizeof json, "check_ms", r->check_ms);
  printf("JSON %s}\n", json);
  if (json_file) fprintf(json_file, "%s}\n", json);
  fflush(stdout);
}

/* One MPI rank of the "2 ranks x 1 thread" row: rank 0 prints the result as a line
 * "RESULT samples_per_s step_ms allreduce_ms" for the parent. */
static int rank_main(fashion_model model, int steps) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx || cn_dist_init(ctx, 0) != CN_OK) {
    fprintf(stderr, "bench_dp: cn_dist_init: %s\n", ctx ? cn_ctx_error(ctx) : "no context");
    return 1;
  }
  result r;
  bool ok = run_setup(model, 1, 1, steps, &r);
  if (ok && cn_dist_rank() == 0)
    printf("RESULT %.17g %.17g %.17g %.17g\n", r.samples_per_s, r.step_ms, r.allreduce_ms,
           r.check_ms);
  fflush(stdout);
  if (!ok) cn_dist_abort(1);
  cn_dist_finalize(ctx);
  cn_ctx_destroy(ctx);
  return ok ? 0 : 1;
}

/* The ranks' row, run by mpirun; false after a message when it failed, *skipped when MPI is not
 * here. */
static bool ranks_row(const char *self, fashion_model model, int steps, result *r, bool *skipped) {
  *skipped = false;
  const char *mpiexec = getenv("CANNL_MPIEXEC");
  if (!cn_dist_available() || !mpiexec || !*mpiexec) {
    printf("%-8s %-22s skipped: %s\n", model_name(model), "2 ranks x 1 thread",
           cn_dist_available() ? "no mpirun found (CANNL_MPIEXEC)"
                               : "cannl was built without MPI (make deps)");
    *skipped = true;
    return true;
  }
  static char out[1 << 16];
  char scenario[64];
  double seconds;
  snprintf(scenario, sizeof scenario, "%s %d", model_name(model), steps);
  int rc = mpi_launch(self, 2, scenario, "", out, sizeof out, &seconds);
  const char *line = strstr(out, "RESULT ");
  if (rc != 0 || !line ||
      sscanf(line, "RESULT %lf %lf %lf %lf", &r->samples_per_s, &r->step_ms, &r->allreduce_ms,
             &r->check_ms) != 4) {
    fprintf(stderr, "bench_dp: 2 ranks, %s: exit %d:\n%s\n", model_name(model), rc, out);
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--rank") == 0)
    return rank_main(strcmp(argv[2], "mlp") == 0 ? FASHION_MLP : FASHION_CONVNET, atoi(argv[3]));
  const char *json_path = NULL;
  int steps[2] = {200, 30};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json_path = argv[++i];
    else if (strcmp(argv[i], "--steps-mlp") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
      steps[0] = atoi(argv[++i]);
    else if (strcmp(argv[i], "--steps-convnet") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
      steps[1] = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--json FILE] [--steps-mlp N] [--steps-convnet N]\n", argv[0]);
      return 2;
    }
  }
  if (!fashion_data_available(NULL)) {
    printf("bench_dp: skipped: Fashion-MNIST is not installed in %s\n", FASHION_DATA_DIR);
    return 0;
  }
  setenv("CANNL_MPIEXEC", CANNL_MPIEXEC, 0);
  FILE *json_file = json_path ? fopen(json_path, "w") : NULL;
  if (json_path && !json_file) {
    fprintf(stderr, "bench_dp: cannot write %s\n", json_path);
    return 1;
  }
  bool failed = false;
  const fashion_model models[2] = {FASHION_MLP, FASHION_CONVNET};
  for (int m = 0; m < 2; m++) {
    result r, reference;
    if (!run_setup(models[m], 1, 1, steps[m], &reference)) {
      failed = true;
      continue;
    }
    report(models[m], "1 process x 1 thread", &reference, reference.samples_per_s, json_file);
    if (run_setup(models[m], 1, 2, steps[m], &r))
      report(models[m], "1 process x 2 threads", &r, reference.samples_per_s, json_file);
    else
      failed = true;
    if (run_setup(models[m], 2, 1, steps[m], &r))
      report(models[m], "2 devices x 1 thread", &r, reference.samples_per_s, json_file);
    else
      failed = true;
    bool skipped;
    if (!ranks_row(argv[0], models[m], steps[m], &r, &skipped))
      failed = true;
    else if (!skipped)
      report(models[m], "2 ranks x 1 thread", &r, reference.samples_per_s, json_file);
  }
  if (json_file) fclose(json_file);
  return failed;
}
