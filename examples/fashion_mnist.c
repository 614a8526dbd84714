/* Fashion-MNIST end to end (demo/fashion.c): an MLP 784-128-10 or a LeNet-style convnet trained
 * with Adam on Debian's dataset-fashion-mnist, a progress bar per epoch (samples/s, ETA), the
 * training loss and test accuracy of every epoch printed and plotted (ASCII, and an SVG file of
 * the curves and the confusion matrix), a checkpoint after every epoch and --resume, which goes
 * on from it bit for bit, and --export, which writes the trained model as dependency-free C.
 *
 *   example_fashion_mnist [--model mlp|convnet] [--epochs N] [--batch N] [--lr X] [--final-lr X]
 *                         [--train N]
 *                         [--test N] [--seed N] [--checkpoint FILE] [--resume] [--svg FILE]
 *                         [--export NAME] [--export-dir DIR] [--data DIR] [--out DIR]
 *                         [--backend NAME] [--interp] [--devices N]
 *
 * Defaults: mlp, 5 epochs, batch 100, learning rate 2e-3 decaying linearly to --lr / 20 (1e-4)
 * over all steps, all 60 000 / 10 000 examples,
 * checkpoint runs/fashion_<model>.safetensors, curves in runs/fashion_<model>.svg (--out DIR
 * moves runs/, the export's default directory too). The thread count is
 * CANNL_THREADS (else every core). */
#include "../demo/backend.h"
#include "../demo/fashion.h"
#include "../demo/output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Progress ------------------------------------------------------------------------------ */

typedef struct {
  bool terminal;
  double start, last_draw;
  int64_t batch_size;
  int last_tenth;
} progress_state;

static void progress(void *user, int epoch, int64_t step, int64_t steps, double running_loss) {
  progress_state *p = user;
  double t = now(), elapsed = t - p->start;
  double rate = elapsed > 0 ? (double)(step * p->batch_size) / elapsed : 0;
  double eta = step > 0 ? elapsed * (double)(steps - step) / (double)step : 0;
  if (p->terminal) {
    if (step < steps && t - p->last_draw < 0.1) return; /* at most 10 redraws a second */
    p->last_draw = t;
    int width = 30, filled = (int)(width * step / steps);
    fprintf(stderr, "\r  epoch %d [", epoch + 1);
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : i == filled ? '>' : '.', stderr);
    fprintf(stderr, "] %lld/%lld loss %.4f %.0f samples/s ETA %.0fs  ", (long long)step,
            (long long)steps, running_loss, rate, eta);
    if (step == steps) fputc('\n', stderr);
    fflush(stderr);
    return;
  }
  int tenth = (int)(10 * step / steps);
  if (tenth == p->last_tenth) return;
  p->last_tenth = tenth;
  fprintf(stderr, "  epoch %d: %3d%% (%lld/%lld) loss %.4f, %.0f samples/s, ETA %.0fs\n", epoch + 1,
          10 * tenth, (long long)step, (long long)steps, running_loss, rate, eta);
}

/* ---- Plots --------------------------------------------------------------------------------- */

/* One series as rows of '*' over the epochs, scaled between its min and max. */
static void ascii_plot(const char *title, const double *v, int n) {
  double lo = v[0], hi = v[0];
  for (int i = 1; i < n; i++) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  printf("%s\n", title);
  const int rows = 8;
  for (int r = rows - 1; r >= 0; r--) {
    double level = hi - (hi - lo) * (rows - 1 - r) / (rows - 1);
    printf("%10.4f |", level);
    for (int i = 0; i < n; i++) {
      int row = hi > lo ? (int)((v[i] - lo) / (hi - lo) * (rows - 1) + 0.5) : rows - 1;
      printf(" %c ", row == r ? '*' : ' ');
    }
    printf("\n");
  }
  printf("%10s +", "");
  for (int i = 0; i < n; i++) printf("---");
  printf("\n%10s  ", "epoch");
  for (int i = 0; i < n; i++) printf("%2d ", i + 1);
  printf("\n");
}

static void print_confusion(const fashion *f) {
  printf("confusion matrix (rows: true class, columns: predicted)\n%12s", "");
  for (int c = 0; c < FASHION_CLASSES; c++) printf(" %5d", c);
  printf("\n");
  for (int r = 0; r < FASHION_CLASSES; r++) {
    printf("%d %-10s", r, fashion_class_names[r]);
    for (int c = 0; c < FASHION_CLASSES; c++)
      printf(" %5lld", (long long)f->confusion_counts[r * FASHION_CLASSES + c]);
    printf("\n");
  }
}

/* The loss and accuracy curves side by side, and the confusion matrix as a heat map. */
static bool write_svg(const fashion *f, const char *path) {
  FILE *out = fopen(path, "w");
  if (!out) return false;
  int n = f->epochs_done;
  const double w = 300, h = 200, m = 40;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1060\" height=\"330\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  for (int plot = 0; plot < 2; plot++) {
    const double *v = plot ? f->test_accuracy : f->epoch_loss;
    double lo = v[0], hi = v[0], x0 = m + plot * (w + 2 * m);
    for (int i = 1; i < n; i++) {
      lo = v[i] < lo ? v[i] : lo;
      hi = v[i] > hi ? v[i] : hi;
    }
    if (hi == lo) hi = lo + 1e-9;
    fprintf(out, "<text x=\"%g\" y=\"20\">%s</text>\n", x0,
            plot ? "test accuracy (%)" : "training loss (mean cross-entropy)");
    fprintf(out,
            "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
            "stroke=\"#888\"/>\n",
            x0, m, w, h);
    fprintf(out, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>\n", x0 - 4, m + 4,
            plot ? 100 * hi : hi);
    fprintf(out, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>\n", x0 - 4, m + h,
            plot ? 100 * lo : lo);
    fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
            plot ? "#2a7" : "#c33");
    for (int i = 0; i < n; i++)
      fprintf(out, "%.1f,%.1f ", x0 + (n > 1 ? w * i / (n - 1) : w / 2),
              m + h - h * (v[i] - lo) / (hi - lo));
    fprintf(out, "\"/>\n<text x=\"%g\" y=\"%g\">epoch 1 .. %d</text>\n", x0, m + h + 16, n);
  }
  /* the confusion matrix: cell darkness by its share of the row */
  double x0 = 2 * (w + 2 * m) + m, cell = 24;
  fprintf(out, "<text x=\"%g\" y=\"20\">confusion (rows: true, columns: predicted)</text>\n", x0);
  for (int r = 0; r < FASHION_CLASSES; r++) {
    int64_t row = 0;
    for (int c = 0; c < FASHION_CLASSES; c++) row += f->confusion_counts[r * FASHION_CLASSES + c];
    for (int c = 0; c < FASHION_CLASSES; c++) {
      int64_t k = f->confusion_counts[r * FASHION_CLASSES + c];
      int shade = 255 - (int)(row ? 255 * k / row : 0);
      fprintf(out,
              "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"rgb(%d,%d,255)\">"
              "<title>%s as %s: %lld</title></rect>\n",
              x0 + c * cell, m + r * cell, cell, cell, shade, shade, fashion_class_names[r],
              fashion_class_names[c], (long long)k);
    }
  }
  fprintf(out, "</svg>\n");
  return fclose(out) == 0;
}

/* ---- Options ------------------------------------------------------------------------------- */

static const char usage_text[] =
    "usage: example_fashion_mnist [--model mlp|convnet] [--epochs N] [--batch N] [--lr X]\n"
    "         [--final-lr X] [--train N] [--test N] [--seed N] [--checkpoint FILE] "
    "[--resume] [--svg FILE]\n"
    "         [--export NAME] [--export-dir DIR] [--data DIR] [--out DIR] [--backend NAME]\n"
    "         [--interp] [--devices N] [--help]\n"
    "\n"
    "Trains an MLP 784-128-10 (--model mlp, the default) or a LeNet-style convnet on\n"
    "Fashion-MNIST with Adam, printing each epoch's training loss and test accuracy.\n"
    "  --model mlp|convnet  the model (default mlp)\n"
    "  --epochs N        epochs to train (default 5)\n"
    "  --batch N         examples per step (default 100)\n"
    "  --lr X            first learning rate (default 2e-3), decaying linearly to\n"
    "  --final-lr X      this one (default --lr / 20)\n"
    "  --train N, --test N  use the first N training / test examples (default all)\n"
    "  --seed N          the seed of the shuffling (default 1)\n"
    "  --out DIR         where the checkpoint, the SVG and the export go by default\n"
    "                    (default runs, made when missing)\n"
    "  --checkpoint FILE written after every epoch (default DIR/fashion_<model>.safetensors)\n"
    "  --resume          go on from the checkpoint, bit for bit; when there is none yet,\n"
    "                    say so and train from the first epoch\n"
    "  --svg FILE        the curves and the confusion matrix (default DIR/fashion_<model>.svg)\n"
    "  --export NAME     write the trained model as C: DIR/NAME.c and DIR/NAME.h\n"
    "  --export-dir DIR  where --export writes (default the --out DIR)\n"
    "  --data DIR        the data set's directory (default " FASHION_DATA_DIR ")\n"
    "  --backend NAME    the backend to run on: c, interp, opencl, ... (default the option\n"
    "                    backend: $CANNL_BACKEND, else c)\n"
    "  --interp          the same as --backend interp: the reference interpreter\n"
    "  --devices N       data parallel on N CPU devices of that backend, each batch\n"
    "                    split among them (N divides --batch; default 1)\n";

/* The options: first those that take a value, then the others (for messages and suggestions). */
static const char *const option_names[] = {
    "--model",   "--epochs",     "--batch",  "--lr",     "--final-lr",   "--train", "--test",
    "--seed",    "--checkpoint", "--svg",    "--export", "--export-dir", "--data",  "--out",
    "--backend", "--devices",    "--resume", "--interp", "--help"};
enum { N_VALUE_OPTIONS = 16, N_OPTIONS = 19 };

static bool parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

typedef struct {
  fashion_config cfg;
  bool resume;
  const char *svg, *export_name, *export_dir, *out;
  char checkpoint[512], svg_default[512];
} options;

/* 1: run with o, 0: --help was printed, -1: a usage error was printed. */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  /* zeros: the build's defaults (a learning rate of 2e-3, decaying to a twentieth of it) */
  o->cfg = (fashion_config){FASHION_MLP, 5, 100, 0, 0, 0, 0, 1, NULL, NULL, CN_BACKEND_DEFAULT, 1};
  o->out = DEMO_OUT_DEFAULT;
  const char *checkpoint = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t n;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (strcmp(a, "--resume") == 0) {
      o->resume = true;
      continue;
    }
    if (strcmp(a, "--interp") == 0) {
      o->cfg.backend = CN_BACKEND_INTERP;
      continue;
    }
    int k = 0;
    while (k < N_VALUE_OPTIONS && strcmp(a, option_names[k]) != 0) k++;
    if (k == N_VALUE_OPTIONS) {
      char hint[400];
      fprintf(stderr, "unknown option '%s'%s\n", a,
              cn_suggest_names(a, N_OPTIONS, option_names, hint, sizeof hint));
      return -1;
    }
    if (!v) {
      fprintf(stderr, "option '%s' needs a value\n", a);
      return -1;
    }
    i++;
    if (strcmp(a, "--model") == 0 && (!strcmp(v, "mlp") || !strcmp(v, "convnet")))
      o->cfg.model = strcmp(v, "mlp") == 0 ? FASHION_MLP : FASHION_CONVNET;
    else if (strcmp(a, "--epochs") == 0 && parse_int(v, 1, FASHION_MAX_EPOCHS, &n))
      o->cfg.epochs = (int)n;
    else if (strcmp(a, "--batch") == 0 && parse_int(v, 1, 60000, &n))
      o->cfg.batch_size = n;
    else if (strcmp(a, "--train") == 0 && parse_int(v, 1, 60000, &n))
      o->cfg.train_examples = n;
    else if (strcmp(a, "--test") == 0 && parse_int(v, 1, 10000, &n))
      o->cfg.test_examples = n;
    else if (strcmp(a, "--seed") == 0 && parse_int(v, 0, INT64_MAX, &n))
      o->cfg.seed = (uint64_t)n;
    else if (strcmp(a, "--lr") == 0 && (o->cfg.learning_rate = atof(v)) > 0)
      continue;
    else if (strcmp(a, "--final-lr") == 0 && (o->cfg.final_learning_rate = atof(v)) > 0)
      continue;
    else if (strcmp(a, "--checkpoint") == 0)
      checkpoint = v;
    else if (strcmp(a, "--svg") == 0)
      o->svg = v;
    else if (strcmp(a, "--export") == 0)
      o->export_name = v;
    else if (strcmp(a, "--export-dir") == 0)
      o->export_dir = v;
    else if (strcmp(a, "--data") == 0)
      o->cfg.data_dir = v;
    else if (strcmp(a, "--out") == 0)
      o->out = v;
    else if (strcmp(a, "--backend") == 0) {
      if (!demo_backend_parse(v, &o->cfg.backend)) return -1;
    } else if (strcmp(a, "--devices") == 0) {
      if (!demo_devices_parse(v, &o->cfg.devices)) return -1;
    } else {
      fprintf(stderr, "bad value for %s: '%s'\n", a, v);
      return -1;
    }
  }
  const char *model = o->cfg.model == FASHION_MLP ? "mlp" : "convnet";
  char name[64];
  snprintf(name, sizeof name, "fashion_%s.safetensors", model);
  if (!checkpoint && !demo_output_path(o->out, name, o->checkpoint, sizeof o->checkpoint))
    return -1;
  snprintf(name, sizeof name, "fashion_%s.svg", model);
  if (!o->svg && !demo_output_path(o->out, name, o->svg_default, sizeof o->svg_default)) return -1;
  o->cfg.checkpoint = checkpoint ? checkpoint : o->checkpoint;
  if (!o->svg) o->svg = o->svg_default;
  if (!o->export_dir) o->export_dir = o->out;
  return 1;
}

int main(int argc, char **argv) {
  options o;
  int parsed = parse_options(argc, argv, &o);
  if (parsed <= 0) {
    if (parsed < 0) fputs("(try example_fashion_mnist --help)\n", stderr);
    return parsed < 0 ? 2 : 0;
  }
  if (!fashion_data_available(o.cfg.data_dir)) {
    fprintf(stderr,
            "Fashion-MNIST is not installed in %s (Debian: apt-get install "
            "dataset-fashion-mnist, or `make deps`)\n",
            o.cfg.data_dir ? o.cfg.data_dir : FASHION_DATA_DIR);
    return 1;
  }
  fashion f;
  double t0 = now();
  cn_status st = fashion_build(&f, &o.cfg);
  /* --resume without a checkpoint yet is a first run, as a script's restore ~resume:true */
  if (st == CN_OK && o.resume && access(o.cfg.checkpoint, F_OK) != 0) {
    fprintf(stderr, "note: no checkpoint %s to resume from: training from the first epoch\n",
            o.cfg.checkpoint);
  } else if (st == CN_OK && o.resume) {
    st = fashion_resume(&f);
    if (st == CN_OK) printf("resumed from %s after epoch %d\n", o.cfg.checkpoint, f.epochs_done);
  }
  if (st != CN_OK) {
    fprintf(stderr, "error: %s\n", fashion_error(&f));
    fashion_destroy(&f);
    return 1;
  }
  printf("Fashion-MNIST, %s: %lld training and %lld test examples, batch %lld, Adam lr %g to "
         "%g (built and compiled in %.1f s)\n",
         o.cfg.model == FASHION_MLP ? "MLP 784-128-10" : "convnet (conv-relu-pool x2, 128, 10)",
         (long long)cn_dataset_examples(f.train), (long long)cn_dataset_examples(f.test),
         (long long)f.cfg.batch_size, f.cfg.learning_rate, f.cfg.final_learning_rate, now() - t0);
  bool terminal = isatty(2);
  int trained = 0; /* epochs this process trained: the last one left its confusion counts */
  while (st == CN_OK && f.epochs_done < o.cfg.epochs) {
    progress_state p = {terminal, now(), 0, f.cfg.batch_size, -1};
    st = fashion_train_epoch(&f, progress, &p);
    if (st != CN_OK) break;
    trained++;
    int e = f.epochs_done - 1;
    double seconds = now() - p.start;
    printf("epoch %d/%d: training loss %.4f, test accuracy %.2f%% (%.1f s, %.0f samples/s)\n",
           e + 1, o.cfg.epochs, f.epoch_loss[e], 100 * f.test_accuracy[e], seconds,
           (double)(cn_dataset_batches(f.train) * f.cfg.batch_size) / seconds);
    fflush(stdout);
  }
  if (st == CN_OK && f.epochs_done > 0) {
    double acc[FASHION_MAX_EPOCHS];
    for (int e = 0; e < f.epochs_done; e++) acc[e] = 100 * f.test_accuracy[e];
    ascii_plot("training loss", f.epoch_loss, f.epochs_done);
    ascii_plot("test accuracy (%)", acc, f.epochs_done);
    double accuracy;
    if (!trained) st = fashion_evaluate(&f, &accuracy); /* a resume with nothing left to train */
    if (st == CN_OK) print_confusion(&f);
    if (st == CN_OK) printf("checkpoint: %s\n", o.cfg.checkpoint);
    if (st == CN_OK && !write_svg(&f, o.svg))
      fprintf(stderr, "cannot write %s\n", o.svg);
    else if (st == CN_OK)
      printf("curves and confusion matrix: %s\n", o.svg);
  }
  if (st == CN_OK && o.export_name) {
    st = fashion_export(&f, o.export_name, o.export_dir);
    if (st == CN_OK)
      printf("exported %s/%s.c and %s.h: %s_forward(pixels / 255, logits)\n", o.export_dir,
             o.export_name, o.export_name, o.export_name);
  }
  if (st != CN_OK) fprintf(stderr, "error: %s\n", fashion_error(&f));
  fashion_destroy(&f);
  return st == CN_OK ? 0 : 1;
}
