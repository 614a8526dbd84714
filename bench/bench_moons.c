/* Benchmark: one half-moons training step (forward + backward + SGD update of a batch of 10 on
 * the MLP 2 -> 16 -> 16 -> 1 of demo/moons.c, the model of examples/moons.c) as cannl's compiled
 * routine on generated C, and the same model and step in PyTorch (bench_moons.py next to this file,
 * run by /usr/bin/python3 from this program, one thread). Each side runs the first epoch's 80 steps
 * as a warm-up and then times the 6400 steps of the full training run (80 epochs, the learning-rate
 * schedule included; compilation is not timed); the
 * benchmark prints both times per step and their ratio. Without python3-torch it says so and
 * prints cannl's time only (`make bench` installs it). cannl runs a second time with the NaN check
 * (option "check" = "nan") to measure its cost, which must not change the loss. It fails (exit 1)
 * only if cannl fails or the checked run differs. */
#include "../demo/moons.h"
#include "bench_common.h"

typedef struct {
  bool ran, missing;
  double step_us, final_loss;
  char version[64];
} torch_result;

/* Runs the PyTorch side; `ran` is false (with `missing` when torch is not installed) if it could
 * not produce a time. */
static torch_result run_torch(int steps) {
  torch_result r = {false, false, 0, 0, ""};
  const char *file = __FILE__, *slash = strrchr(file, '/');
  int dir = slash ? (int)(slash - file + 1) : 0;
  char cmd[4096];
  if (strchr(file, '\'') ||
      snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%.*sbench_moons.py' %d 2>&1", dir, file,
               steps) >= (int)sizeof cmd)
    return r;
  FILE *p = popen(cmd, "r");
  if (!p) return r;
  char line[512];
  bool have_time = false, have_loss = false;
  while (fgets(line, sizeof line, p)) {
    if (strncmp(line, "torch=missing", 13) == 0) r.missing = true;
    if (sscanf(line, "step_us=%lf", &r.step_us) == 1) have_time = true;
    if (sscanf(line, "final_epoch_loss=%lf", &r.final_loss) == 1) have_loss = true;
    if (sscanf(line, "version=%63s", r.version) == 1) continue;
    if (!have_time && !r.missing && strncmp(line, "threads=", 8) != 0)
      fprintf(stderr, "bench_moons: python: %s", line);
  }
  int status = pclose(p);
  r.ran = status == 0 && have_time && have_loss;
  return r;
}

enum { STEPS = MOONS_EPOCHS * MOONS_BATCHES };

/* One timed training run of cannl (after a warm-up epoch), with the NaN check (option "check")
 * on or off: the mean microseconds per step, the final epoch loss and the accuracy. */
static cn_status time_cannl(bool check_nan, double *step_us, double *final_loss, double *accuracy) {
  static moons m;
  const moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_C, 1, MOONS_BATCH};
  cn_status st = moons_build(&m, &cfg);
  if (st == CN_OK && check_nan) st = cn_ctx_set_option(m.ctx, "check", "nan");
  double loss, epoch_loss[MOONS_EPOCHS], elapsed = 0;
  /* warm-up: the first epoch's steps; then the whole run, as the demo trains */
  for (int s = 0; s < MOONS_BATCHES && st == CN_OK; s++) st = moons_train_step(&m, s, &loss);
  if (st == CN_OK) {
    double start = now_seconds();
    st = moons_train(&m, epoch_loss, NULL, NULL);
    elapsed = now_seconds() - start;
  }
  static double f[MOONS_POINTS];
  if (st == CN_OK) st = moons_eval(&m, MOONS_POINTS, m.xy, f);
  if (st != CN_OK) {
    fprintf(stderr, "bench_moons: %s\n", m.ctx ? cn_ctx_error(m.ctx) : "out of memory");
  } else {
    *step_us = elapsed * 1e6 / STEPS;
    *final_loss = epoch_loss[MOONS_EPOCHS - 1];
    *accuracy = moons_accuracy(&m, f);
  }
  moons_destroy(&m);
  return st;
}

int main(void) {
  bench_openblas_core();
  double cannl_us, loss, accuracy, checked_us, checked_loss, checked_accuracy;
  if (time_cannl(false, &cannl_us, &loss, &accuracy) != CN_OK ||
      time_cannl(true, &checked_us, &checked_loss, &checked_accuracy) != CN_OK)
    return 1;
  printf("half-moons training step (forward + backward + SGD update, batch %d, MLP 2-%d-%d-1), "
         "mean over %d steps after a warm-up epoch\n",
         MOONS_BATCH, MOONS_HIDDEN, MOONS_HIDDEN, STEPS);
  printf("  cannl, generated C  %10.3f us   (final epoch loss %.5f, accuracy %.2f%%)\n", cannl_us,
         loss, 100 * accuracy);
  printf("  with --check-nan    %10.3f us   (%.2f x the unchecked step; same loss: %s)\n",
         checked_us, checked_us / cannl_us, checked_loss == loss ? "yes" : "NO");
  printf("json {\"bench\":\"moons\",\"workload\":\"nan_check\",\"step_us\":%.4f,"
         "\"checked_step_us\":%.4f,\"ratio\":%.4f}\n",
         cannl_us, checked_us, checked_us / cannl_us);
  torch_result t = run_torch(STEPS);
  if (t.ran) {
    printf("  PyTorch %-11s %10.3f us   (final epoch loss %.5f; one thread)\n", t.version,
           t.step_us, t.final_loss);
    printf("  ratio               %10.1f x (PyTorch / cannl)\n",
           cannl_us > 0 ? t.step_us / cannl_us : INFINITY);
    printf("json {\"bench\":\"moons\",\"workload\":\"train_step\",\"cannl_us\":%.4f,"
           "\"torch_us\":%.4f,\"ratio\":%.4f}\n",
           cannl_us, t.step_us, t.step_us / cannl_us);
  } else if (t.missing) {
    printf("  PyTorch: python3-torch is not installed (`make bench` installs it); cannl's time "
           "only\n");
  } else {
    printf("  PyTorch: /usr/bin/python3 could not run bench_moons.py; cannl's time only\n");
  }
  return checked_loss == loss ? 0 : 1;
}
