/* Benchmark: Fashion-MNIST training end to end (demo/fashion.c, the model of
 * examples/fashion_mnist.c) in cannl's generated C against the same training in PyTorch
 * (bench_fashion.py next to this file, run by /usr/bin/python3 from this program), each on one
 * and on two threads, in the same run. Both sides train the MLP 784-128-10 for 5 epochs and the
 * convnet (two conv-relu-pool stages, two dense layers) for 1 epoch on the 60 000 training
 * images, mini-batches of 100 reshuffled every epoch, the mean cross-entropy, Adam with the
 * learning rate decaying linearly over all steps from 2e-3 to 1e-4, and evaluate the 10 000 test
 * images after every epoch. cannl's thread count is the option "threads", set after
 * fashion_build; PyTorch's is torch.set_num_threads (and OpenBLAS's, bench_common.py), with
 * OMP_WAIT_POLICY=PASSIVE (bench_fashion.py says why).
 *
 * Per side: the build (cannl only: loading the data, compiling and tuning the routines, or
 * loading them from the compile cache, and the init), the median training time of an epoch
 * (the epoch's shuffle and steps, the evaluation excluded: cannl's training ends at its last
 * step's progress call), the median evaluation time, the time to 88% test accuracy (the summed
 * training times of the epochs up to the first whose evaluation reaches 0.88, and that epoch; "-"
 * when none does) and the last epoch's accuracy. Ratios are PyTorch / cannl (above 1: cannl is
 * faster). The JSON lines (stdout, prefixed "json ", and with `--json FILE` that file) hold one
 * workload each: the MLP and the convnet at 1 and 2 threads. `--quick` trains one epoch of each
 * model on the first 6 000 training images and evaluates on the first 2 000 test images. Without
 * the data set it says so and exits 0; without python3-torch only cannl's columns are filled. Exit
 * 1 when cannl fails. */
#include "../demo/fashion.h"
#include "bench_common.h"

enum { SIDES = 4, MAX_EPOCHS = 8 }; /* sides: cannl 1t, cannl 2t, PyTorch 1t, PyTorch 2t */
static const char *const side_names[SIDES] = {"cannl 1t", "cannl 2t", "PyTorch 1t", "PyTorch 2t"};
static const double TARGET = 0.88;

/* One side's training run; epochs counts the epochs recorded. */
typedef struct {
  int epochs;
  double build_s; /* cannl only */
  double train_s[MAX_EPOCHS], eval_s[MAX_EPOCHS], accuracy[MAX_EPOCHS];
} run;

typedef struct {
  const char *name; /* as bench_fashion.py names the model */
  fashion_model model;
  int epochs, quick_epochs;
  run runs[SIDES];
} row;

static row rows[2] = {{"mlp", FASHION_MLP, 5, 1, {{0}}}, {"convnet", FASHION_CONVNET, 1, 1, {{0}}}};

/* What a run of this program trains: all examples, or --quick's. */
static int64_t train_examples, test_examples;

/* ---- Summaries ----------------------------------------------------------------------------- */

/* The median of v[0 .. n) (summarize's, whatever the unit), NAN when n is 0. */
static double median_of(const double *v, int n) {
  double copy[MAX_EPOCHS];
  timing t;
  if (n < 1) return NAN;
  memcpy(copy, v, (size_t)n * sizeof *v);
  summarize(copy, n, &t);
  return t.median_ms;
}

/* The first epoch (from 1) whose evaluation reaches TARGET, 0 when none does. */
static int epoch_to_target(const run *r) {
  for (int e = 0; e < r->epochs; e++)
    if (r->accuracy[e] >= TARGET) return e + 1;
  return 0;
}

/* The summed training time of the epochs up to epoch_to_target, NAN when none reaches TARGET. */
static double time_to_target(const run *r) {
  double sum = 0;
  for (int e = 0; e < epoch_to_target(r); e++) sum += r->train_s[e];
  return epoch_to_target(r) ? sum : NAN;
}

static double final_accuracy(const run *r) {
  return r->epochs ? r->accuracy[r->epochs - 1] : NAN;
}

/* a / b, NAN when either is missing. */
static double over(double a, double b) {
  return isnan(a) || isnan(b) || b <= 0 ? NAN : a / b;
}

/* ---- The cannl side ------------------------------------------------------------------------ */

/* The progress hook: the time of the epoch's last training step, before the evaluation. */
static void mark_trained(void *user, int epoch, int64_t step, int64_t steps, double loss) {
  (void)epoch, (void)loss;
  if (step == steps) *(double *)user = now_seconds();
}

/* Builds the row's model, sets the thread count and trains every epoch into *out. */
static bool train_cannl(const row *r, int epochs, int threads, run *out) {
  static fashion f; /* some 17 KB of curves and counts: not on the stack */
  const fashion_config cfg = {.model = r->model,
                              .epochs = epochs,
                              .batch_size = 100,
                              .train_examples = train_examples,
                              .test_examples = test_examples,
                              .learning_rate = 2e-3,
                              .final_learning_rate = 1e-4,
                              .seed = 1,
                              .backend = CN_BACKEND_C};
  char count[8];
  snprintf(count, sizeof count, "%d", threads);
  double start = now_seconds();
  cn_status st = fashion_build(&f, &cfg);
  out->build_s = now_seconds() - start;
  if (st == CN_OK) st = cn_ctx_set_option(f.ctx, "threads", count);
  for (int e = 0; e < epochs && st == CN_OK; e++) {
    double trained = NAN;
    start = now_seconds();
    st = fashion_train_epoch(&f, mark_trained, &trained);
    double end = now_seconds();
    if (st == CN_OK) {
      out->train_s[e] = trained - start;
      out->eval_s[e] = end - trained;
      out->accuracy[e] = f.test_accuracy[e];
      out->epochs = e + 1;
    }
  }
  if (st != CN_OK)
    fprintf(stderr, "bench_fashion: %s, cannl on %d thread(s): %s\n", r->name, threads,
            fashion_error(&f));
  fashion_destroy(&f);
  return st == CN_OK;
}

/* ---- The PyTorch side ---------------------------------------------------------------------- */

/* A `torchT epoch=E train_s=S eval_s=S accuracy=A ...` line of bench_fashion.py into the row. */
static void parse_line(void *row_, int slot, const char *line) {
  row *r = row_;
  int threads, epoch;
  double train, eval, accuracy;
  (void)slot;
  if (sscanf(line, "torch%d epoch=%d train_s=%lf eval_s=%lf accuracy=%lf", &threads, &epoch, &train,
             &eval, &accuracy) != 5 ||
      threads < 1 || threads > 2 || epoch < 1 || epoch > MAX_EPOCHS)
    return;
  run *out = &r->runs[1 + threads];
  out->train_s[epoch - 1] = train;
  out->eval_s[epoch - 1] = eval;
  out->accuracy[epoch - 1] = accuracy;
  out->epochs = epoch;
}

/* Runs bench_fashion.py for the row's model (1 and then 2 threads) and parses its lines. */
static void train_torch(bench *b, row *r, int epochs) {
  char cmd[PATH_MAX + 256];
  if (snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' %s %d %lld %lld", b->script,
               FASHION_DATA_DIR, r->name, epochs, (long long)train_examples,
               (long long)test_examples) >= (int)sizeof cmd ||
      !run_command(b, cmd, r, 0))
    fprintf(stderr, "bench_fashion: %s: the python side failed\n", r->name);
}

/* ---- Report -------------------------------------------------------------------------------- */

/* The table of every side, then the ratios (when PyTorch ran). */
static void report(const bench *b) {
  printf("\nFashion-MNIST training, mini-batch 100, Adam 2e-3 -> 1e-4; seconds (medians over the "
         "epochs)\n");
  printf("%-8s %-11s %6s %9s %8s %8s %14s %9s\n", "model", "side", "epochs", "build s", "epoch s",
         "eval s", "to 88% s (ep)", "accuracy");
  for (int i = 0; i < 2; i++)
    for (int s = 0; s < SIDES; s++) {
      const run *r = &rows[i].runs[s];
      char c[5][24];
      fmt_number(c[0], sizeof c[0], "%.2f", s < 2 && r->epochs ? r->build_s : NAN);
      fmt_number(c[1], sizeof c[1], "%.3f", median_of(r->train_s, r->epochs));
      fmt_number(c[2], sizeof c[2], "%.3f", median_of(r->eval_s, r->epochs));
      int reached = epoch_to_target(r);
      if (reached)
        snprintf(c[3], sizeof c[3], "%.2f (%d)", time_to_target(r), reached);
      else
        snprintf(c[3], sizeof c[3], "-");
      fmt_number(c[4], sizeof c[4], "%.2f%%", 100 * final_accuracy(r));
      printf("%-8s %-11s %6d %9s %8s %8s %14s %9s\n", rows[i].name, side_names[s], r->epochs, c[0],
             c[1], c[2], c[3], c[4]);
    }
  if (b->torch_missing || b->numpy_missing) return;
  printf("\nPyTorch / cannl (above 1: cannl faster)%s%s\n", *b->versions ? "; " : "", b->versions);
  printf("%-8s %8s %8s %10s %10s\n", "model", "epoch 1t", "epoch 2t", "to 88% 1t", "to 88% 2t");
  for (int i = 0; i < 2; i++) {
    const run *r = rows[i].runs;
    char c[4][24];
    for (int t = 0; t < 2; t++) {
      fmt_number(
          c[t], sizeof c[t], "%.2fx",
          over(median_of(r[2 + t].train_s, r[2 + t].epochs), median_of(r[t].train_s, r[t].epochs)));
      fmt_number(c[2 + t], sizeof c[2 + t], "%.2fx",
                 over(time_to_target(&r[2 + t]), time_to_target(&r[t])));
    }
    printf("%-8s %8s %8s %10s %10s\n", rows[i].name, c[0], c[1], c[2], c[3]);
  }
}

/* One workload: the row's model at `threads`, both sides. */
static void json_line(const row *r, int threads, FILE *file) {
  char buf[1024];
  const run *cannl = &r->runs[threads - 1], *torch = &r->runs[threads + 1];
  snprintf(buf, sizeof buf,
           "{\"bench\":\"fashion\",\"workload\":\"%s\",\"threads\":%d,\"epochs\":%d,"
           "\"train_examples\":%lld,\"test_examples\":%lld,\"batch\":100",
           r->name, threads, cannl->epochs, (long long)(train_examples ? train_examples : 60000),
           (long long)(test_examples ? test_examples : 10000));
  const run *sides[2] = {cannl, torch};
  const char *names[2] = {"cannl", "torch"};
  for (int s = 0; s < 2; s++) {
    char key[32];
    if (s == 0) json_num(buf, sizeof buf, "cannl_build_s", cannl->epochs ? cannl->build_s : NAN);
    snprintf(key, sizeof key, "%s_epoch_s", names[s]);
    json_num(buf, sizeof buf, key, median_of(sides[s]->train_s, sides[s]->epochs));
    snprintf(key, sizeof key, "%s_eval_s", names[s]);
    json_num(buf, sizeof buf, key, median_of(sides[s]->eval_s, sides[s]->epochs));
    snprintf(key, sizeof key, "%s_to88_s", names[s]);
    json_num(buf, sizeof buf, key, time_to_target(sides[s]));
    snprintf(key, sizeof key, "%s_to88_epoch", names[s]);
    json_num(buf, sizeof buf, key, epoch_to_target(sides[s]) ? epoch_to_target(sides[s]) : NAN);
    snprintf(key, sizeof key, "%s_accuracy", names[s]);
    json_num(buf, sizeof buf, key, final_accuracy(sides[s]));
  }
  json_num(
      buf, sizeof buf, "epoch_ratio",
      over(median_of(torch->train_s, torch->epochs), median_of(cannl->train_s, cannl->epochs)));
  json_num(buf, sizeof buf, "to88_ratio", over(time_to_target(torch), time_to_target(cannl)));
  size_t len = strlen(buf);
  snprintf(buf + len, sizeof buf - len, "}");
  printf("json %s\n", buf);
  if (file) fprintf(file, "%s\n", buf);
}

int main(int argc, char **argv) {
  static bench b = {.name = "bench_fashion", .parse = parse_line};
  int status = bench_start(&b, argc, argv);
  if (status >= 0) return status;
  if (!fashion_data_available(FASHION_DATA_DIR)) {
    printf("bench_fashion: skipped: the Fashion-MNIST files are not in %s (Debian's "
           "dataset-fashion-mnist)\n",
           FASHION_DATA_DIR);
    if (b.file) fclose(b.file);
    return 0;
  }
  if (b.quick) train_examples = 6000, test_examples = 2000;
  bool ok = true;
  for (int i = 0; i < 2; i++) {
    row *r = &rows[i];
    int epochs = b.quick ? r->quick_epochs : r->epochs;
    for (int t = 1; t <= 2; t++) {
      printf("running %s, cannl on %d thread(s), %d epoch(s)\n", r->name, t, epochs);
      ok = train_cannl(r, epochs, t, &r->runs[t - 1]) && ok;
    }
    printf("running %s, PyTorch on 1 and 2 threads, %d epoch(s)\n", r->name, epochs);
    train_torch(&b, r, epochs);
  }
  if (b.torch_missing)
    printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  if (b.numpy_missing) printf("numpy: python3-numpy is not installed (`make bench` installs it)\n");
  report(&b);
  for (int i = 0; i < 2; i++)
    for (int t = 1; t <= 2; t++) json_line(&rows[i], t, b.file);
  if (b.file && fclose(b.file) != 0) perror(b.json), ok = false;
  return ok ? 0 : 1;
}
