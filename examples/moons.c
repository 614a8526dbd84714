/* The half-moons classifier, trained end to end (`make demo`): 800 points of two noisy
 * interleaved half circles, an MLP 2 -> 16 -> 16 -> 1 with relu, the hinge loss
 * relu(1 - y * f(x)) averaged over batches of 10, SGD with weight decay 1e-4 and a learning rate
 * decaying linearly from 0.2 to 0.1 over the 80 epochs. It prints a progress bar with the running
 * loss, the epoch loss curve, the final training accuracy and an ASCII map of the decision
 * boundary, and writes an SVG of the points with the boundary (argv[1], default moons.svg next to
 * the program). Options: --seed=N (the data generator's seed), --backend NAME (a registered
 * backend: c, interp, opencl, ...; default the option "backend": $CANNL_BACKEND, else generated
 * C), --interp (the same as --backend interp: the reference interpreter), --devices N (data
 * parallel on N CPU devices, each batch split among them: N divides the batch), --batch N (the
 * batch, default 10; the first (800 / N) * N points). Exits 1 if anything fails
 * or the run misses the goal (final epoch loss < 0.1, training accuracy >= 98%), 2 on a bad command
 * line.
 *
 * The model is written as OCANNL writes it: `w3 * relu(b2 + w2 * relu(b1 + w1 * x))` with only
 * the biases' output size given; the rest (w1's input from the data, the hidden sizes of w1 and
 * w2, w3's shape from the loss) is inferred. The data is one tensor with batch axes
 * [80 steps, 10], sliced per step by the static index symbol batch_n; the learning rate is a tensor
 * expression over a second symbol, step_n. Forward, backward and update are one routine, compiled
 * once and run 6400 times with the two symbols bound.
 *
 * The model and its training loop are demo/moons.c (shared with bench/bench_moons.c and the tests);
 * this program draws them. */
#include "../demo/backend.h"
#include "../demo/moons.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The demo: progress, plots, the SVG ---------------------------------------------------- */

#include <time.h>
#include <unistd.h>

/* The plotted region: both moons with their noise. */
#define MAP_X0 (-1.6)
#define MAP_X1 2.6
#define MAP_Y0 (-1.1)
#define MAP_Y1 1.6
enum {
  MAP_COLS = 72, /* the ASCII map */
  MAP_ROWS = 24,
  SVG_NX = 168, /* SVG grid cells; f is evaluated at their corners */
  SVG_NY = 108,
  SVG_W = 672,
  SVG_H = 432,
  PLOT_ROWS = 12,
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  int epochs, steps; /* steps per epoch */
  bool tty;
} progress_state;

/* A bar redrawn in place on a terminal; a line every 10 epochs otherwise. */
static void show_progress(void *user, int epoch, int step_in_epoch, double running_loss) {
  const progress_state *p = user;
  bool epoch_done = step_in_epoch == p->steps;
  if (!p->tty) {
    if (epoch_done && ((epoch + 1) % 10 == 0 || epoch + 1 == p->epochs))
      printf("epoch %3d/%d  loss %.5f\n", epoch + 1, p->epochs, running_loss);
    return;
  }
  if (step_in_epoch % 8 != 0) return;
  enum { WIDTH = 40 };
  double done = (epoch + (double)step_in_epoch / p->steps) / p->epochs;
  int filled = (int)(done * WIDTH + 0.5);
  char bar[WIDTH + 1];
  for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  printf("\r[%s] epoch %3d/%d  running loss %.5f", bar, epoch + 1, p->epochs, running_loss);
  if (epoch_done && epoch + 1 == p->epochs) putchar('\n');
  fflush(stdout);
}

/* The epoch losses on a log scale, one column per epoch (means of neighbours when there are more
 * epochs than columns). A loss of exactly 0 (every margin met) has no logarithm: it is a '0' on
 * the axis line. */
static void plot_losses(const double *loss, int epochs) {
  enum { MAX_COLS = 80 };
  int cols = epochs < MAX_COLS ? epochs : MAX_COLS;
  double col[MAX_COLS], lo = INFINITY, hi = -INFINITY;
  for (int c = 0; c < cols; c++) {
    int e0 = c * epochs / cols, e1 = (c + 1) * epochs / cols;
    double s = 0;
    for (int e = e0; e < e1; e++) s += loss[e];
    col[c] = s > 0 ? log10(s / (e1 - e0)) : -INFINITY;
    if (s > 0) {
      lo = fmin(lo, col[c]);
      hi = fmax(hi, col[c]);
    }
  }
  if (!(hi >= lo)) lo = hi = 0; /* every loss is 0 */
  if (hi - lo < 1e-9) hi = lo + 1;
  printf("\nepoch loss (log scale)\n");
  for (int r = 0; r < PLOT_ROWS; r++) {
    double top = hi - (hi - lo) * r / PLOT_ROWS, bottom = hi - (hi - lo) * (r + 1) / PLOT_ROWS;
    if (r == 0 || r == PLOT_ROWS - 1 || r == PLOT_ROWS / 2)
      printf("%9.2e |", pow(10, r == PLOT_ROWS - 1 ? lo : top));
    else
      printf("%9s |", "");
    for (int c = 0; c < cols; c++) {
      bool here = col[c] <= top && (col[c] > bottom || (r == PLOT_ROWS - 1 && col[c] >= lo));
      putchar(here ? '*' : ' ');
    }
    putchar('\n');
  }
  printf("%9s +", "");
  for (int c = 0; c < cols; c++) putchar(col[c] == -INFINITY ? '0' : '-');
  printf("\n%9s  1%*d (epoch; 0 on the axis: loss exactly 0)\n", "", cols - 1, epochs);
}

static double map_x(int col, int cols) {
  return MAP_X0 + (MAP_X1 - MAP_X0) * col / cols;
}
static double map_y(int row, int rows) {
  return MAP_Y1 - (MAP_Y1 - MAP_Y0) * row / rows;
}

/* '.' where the model says +1 (upper moon), ' ' where it says -1; points drawn over it as 'o'
 * (+1) and 'x' (-1), in capitals when misclassified. f holds the cell centers' values. */
static void draw_map(const moons *m, const double *f_cells, const double *f_points) {
  char grid[MAP_ROWS][MAP_COLS + 1];
  for (int r = 0; r < MAP_ROWS; r++) {
    for (int c = 0; c < MAP_COLS; c++) grid[r][c] = f_cells[r * MAP_COLS + c] > 0 ? '.' : ' ';
    grid[r][MAP_COLS] = '\0';
  }
  for (int i = 0; i < MOONS_POINTS; i++) {
    int c = (int)floor((m->xy[2 * i] - MAP_X0) / (MAP_X1 - MAP_X0) * MAP_COLS);
    int r = (int)floor((MAP_Y1 - m->xy[2 * i + 1]) / (MAP_Y1 - MAP_Y0) * MAP_ROWS);
    if (c < 0 || c >= MAP_COLS || r < 0 || r >= MAP_ROWS) continue;
    bool upper = m->labels[i] > 0, wrong = (f_points[i] > 0) != upper;
    grid[r][c] = upper ? (wrong ? 'O' : 'o') : (wrong ? 'X' : 'x');
  }
  printf("\ndecision boundary ('.' = class +1, blank = class -1; o/x points of +1/-1, capitals "
         "misclassified)\n+");
  for (int c = 0; c < MAP_COLS; c++) putchar('-');
  printf("+\n");
  for (int r = 0; r < MAP_ROWS; r++) printf("|%s|\n", grid[r]);
  putchar('+');
  for (int c = 0; c < MAP_COLS; c++) putchar('-');
  printf("+\n");
}

static double svg_px(double x) {
  return (x - MAP_X0) / (MAP_X1 - MAP_X0) * SVG_W;
}
static double svg_py(double y) {
  return (MAP_Y1 - y) / (MAP_Y1 - MAP_Y0) * SVG_H;
}

/* Where f changes sign along an edge from (x0, y0, f0) to (x1, y1, f1): linear interpolation. */
static void zero_on_edge(double x0, double y0, double f0, double x1, double y1, double f1,
                         double *x, double *y) {
  double t = f0 / (f0 - f1);
  *x = x0 + t * (x1 - x0);
  *y = y0 + t * (y1 - y0);
}

/* The SVG: cells shaded by the sign of f at their centre (runs merged per row), the boundary
 * f = 0 by marching squares over the corner values, then the points. */
static bool write_svg(const char *path, const moons *m, const double *f_corners,
                      const double *f_points, double accuracy, double final_loss) {
  FILE *out = fopen(path, "w");
  if (!out) return false;
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\">\n<rect width=\"%d\" height=\"%d\" fill=\"#fbe3e3\"/>\n",
          SVG_W, SVG_H + 24, SVG_W, SVG_H + 24, SVG_W, SVG_H);
  double cw = (double)SVG_W / SVG_NX, ch = (double)SVG_H / SVG_NY;
  for (int r = 0; r < SVG_NY; r++) {
    for (int c = 0; c < SVG_NX;) {
      const double *f = f_corners + r * (SVG_NX + 1) + c;
      if (f[0] + f[1] + f[SVG_NX + 1] + f[SVG_NX + 2] <= 0) {
        c++;
        continue;
      }
      int start = c;
      for (; c < SVG_NX; c++) {
        const double *g = f_corners + r * (SVG_NX + 1) + c;
        if (g[0] + g[1] + g[SVG_NX + 1] + g[SVG_NX + 2] <= 0) break;
      }
      fprintf(out,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#dde8f6\"/>\n",
              start * cw, r * ch, (c - start) * cw + 0.5, ch + 0.5);
    }
  }
  fprintf(out, "<path fill=\"none\" stroke=\"#222\" stroke-width=\"2\" d=\"");
  for (int r = 0; r < SVG_NY; r++)
    for (int c = 0; c < SVG_NX; c++) {
      /* corners in order around the cell: top-left, top-right, bottom-right, bottom-left */
      const int idx[4] = {r * (SVG_NX + 1) + c, r * (SVG_NX + 1) + c + 1,
                          (r + 1) * (SVG_NX + 1) + c + 1, (r + 1) * (SVG_NX + 1) + c};
      const double cx[4] = {c, c + 1, c + 1, c}, cy[4] = {r, r, r + 1, r + 1};
      double px[4], py[4];
      int n = 0;
      for (int k = 0; k < 4; k++) {
        int k2 = (k + 1) % 4;
        double f0 = f_corners[idx[k]], f1 = f_corners[idx[k2]];
        if ((f0 > 0) != (f1 > 0)) {
          zero_on_edge(cx[k], cy[k], f0, cx[k2], cy[k2], f1, &px[n], &py[n]);
          n++;
        }
      }
      for (int k = 0; k + 1 < n; k += 2)
        fprintf(out, "M%.1f %.1fL%.1f %.1f", px[k] * cw, py[k] * ch, px[k + 1] * cw,
                py[k + 1] * ch);
    }
  fprintf(out, "\"/>\n");
  for (int i = 0; i < MOONS_POINTS; i++) {
    bool upper = m->labels[i] > 0, wrong = (f_points[i] > 0) != upper;
    fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"%s/>\n", svg_px(m->xy[2 * i]),
            svg_py(m->xy[2 * i + 1]), upper ? "#1f5fb4" : "#c62828",
            wrong ? " stroke=\"#000\" stroke-width=\"1.5\"" : "");
  }
  fprintf(out,
          "<text x=\"8\" y=\"%d\" font-family=\"sans-serif\" font-size=\"14\">cannl half moons: "
          "MLP 2-16-16-1, final epoch loss %.4f, training accuracy %.2f%%</text>\n</svg>\n",
          SVG_H + 17, final_loss, 100 * accuracy);
  return fclose(out) == 0;
}

/* The default SVG path: moons.svg in the program's directory (the build directory). */
static char *default_svg_path(const char *argv0) {
  const char *slash = strrchr(argv0, '/');
  size_t dir = slash ? (size_t)(slash - argv0 + 1) : 0;
  char *path = malloc(dir + sizeof "moons.svg");
  if (path) {
    memcpy(path, argv0, dir);
    memcpy(path + dir, "moons.svg", sizeof "moons.svg");
  }
  return path;
}

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--seed=N] [--backend NAME] [--interp] [--devices N] [--batch N] [out.svg]\n",
          argv0);
  return 2;
}

/* --seed=N, --backend NAME, --interp, --devices N, --batch N and the SVG path; false on anything
 * else. */
static bool parse_args(int argc, char **argv, moons_config *cfg, const char **svg_arg) {
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strncmp(argv[i], "--seed=", 7) == 0) {
      cfg->seed = strtoull(argv[i] + 7, &end, 10);
      if (end == argv[i] + 7 || *end) return false;
    } else if (strcmp(argv[i], "--interp") == 0) {
      cfg->backend = CN_BACKEND_INTERP;
    } else if (strcmp(argv[i], "--backend") == 0) {
      if (i + 1 == argc || !demo_backend_parse(argv[++i], &cfg->backend)) return false;
    } else if (strcmp(argv[i], "--devices") == 0) {
      if (i + 1 == argc || !demo_devices_parse(argv[++i], &cfg->devices)) return false;
    } else if (strcmp(argv[i], "--batch") == 0) {
      if (i + 1 == argc) return false;
      long batch = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || batch < 1 || batch > MOONS_POINTS) return false;
      cfg->batch = (int)batch;
    } else if (argv[i][0] == '-' || *svg_arg) {
      return false;
    } else {
      *svg_arg = argv[i];
    }
  }
  return true;
}

/* The points where f is drawn: the ASCII map's cell centres and the SVG grid's corners. */
static void grid_points(double *cell, double *corner) {
  for (int r = 0; r < MAP_ROWS; r++)
    for (int c = 0; c < MAP_COLS; c++) {
      cell[2 * (r * MAP_COLS + c)] = (map_x(c, MAP_COLS) + map_x(c + 1, MAP_COLS)) / 2;
      cell[2 * (r * MAP_COLS + c) + 1] = (map_y(r, MAP_ROWS) + map_y(r + 1, MAP_ROWS)) / 2;
    }
  for (int r = 0; r <= SVG_NY; r++)
    for (int c = 0; c <= SVG_NX; c++) {
      corner[2 * (r * (SVG_NX + 1) + c)] = map_x(c, SVG_NX);
      corner[2 * (r * (SVG_NX + 1) + c) + 1] = map_y(r, SVG_NY);
    }
}

int main(int argc, char **argv) {
  moons_config cfg = {MOONS_EPOCHS, MOONS_SEED, CN_BACKEND_DEFAULT, 1, MOONS_BATCH};
  const char *svg_arg = NULL;
  if (!parse_args(argc, argv, &cfg, &svg_arg)) return usage(argv[0]);
  char *svg_path = svg_arg ? NULL : default_svg_path(argv[0]);
  /* the points, the ASCII map's cell centres and the SVG grid's corners, evaluated together */
  size_t n_cells = MAP_ROWS * MAP_COLS, n_corners = (SVG_NX + 1) * (SVG_NY + 1);
  size_t n_eval = MOONS_POINTS + n_cells + n_corners;
  double *eval_xy = malloc(2 * n_eval * sizeof *eval_xy), *f = malloc(n_eval * sizeof *f);
  double epoch_loss[MOONS_EPOCHS];
  moons *m = calloc(1, sizeof *m);
  if (!m || !eval_xy || !f || (!svg_arg && !svg_path)) {
    fputs("moons: out of memory\n", stderr);
    free(m);
    free(eval_xy);
    free(f);
    free(svg_path);
    return 1;
  }
  const char *backend = demo_backend_label(cfg.backend);
  char devices_note[64] = "";
  if (cfg.devices > 1)
    snprintf(devices_note, sizeof devices_note, ", data parallel on %d CPU devices", cfg.devices);
  printf("cannl half moons: %d points (noise %.1f, seed %llu), MLP 2-%d-%d-1 with relu, hinge "
         "loss, batch %d, SGD (weight decay %g, learning rate %.1f -> %.1f) for %d epochs on %s"
         "%s\n",
         MOONS_POINTS, MOONS_NOISE, (unsigned long long)cfg.seed, MOONS_HIDDEN, MOONS_HIDDEN,
         cfg.batch, MOONS_WEIGHT_DECAY, MOONS_LR_START, MOONS_LR_END, cfg.epochs, backend,
         devices_note);
  double t0 = now_seconds();
  cn_status st = moons_build(m, &cfg);
  double t1 = now_seconds();
  if (st == CN_OK) {
    printf("parameters: w1 %s, b1 %s, w2 %s, b2 %s, w3 %s (batch|input->output)\n",
           cn_tensor_shape(m->w1), cn_tensor_shape(m->b1), cn_tensor_shape(m->w2),
           cn_tensor_shape(m->b2), cn_tensor_shape(m->w3));
    printf("built and compiled in %.2f s; training %d steps\n", t1 - t0, cfg.epochs * m->batches);
    progress_state progress = {cfg.epochs, m->batches, isatty(STDOUT_FILENO) != 0};
    st = moons_train(m, epoch_loss, show_progress, &progress);
  }
  double t2 = now_seconds();
  if (st == CN_OK) {
    memcpy(eval_xy, m->xy, sizeof m->xy);
    grid_points(eval_xy + 2 * MOONS_POINTS, eval_xy + 2 * (MOONS_POINTS + n_cells));
    st = moons_eval(m, n_eval, eval_xy, f);
  }
  int rc = 1;
  if (st == CN_OK) {
    double accuracy = moons_accuracy(m, f), final_loss = epoch_loss[cfg.epochs - 1];
    printf("trained in %.2f s (%.1f us per step)\n", t2 - t1,
           (t2 - t1) * 1e6 / (cfg.epochs * m->batches));
    plot_losses(epoch_loss, cfg.epochs);
    printf("\nfinal epoch loss %.5f\ntraining accuracy %.2f%% (%d of %d points)\n", final_loss,
           100 * accuracy, (int)lround(accuracy * MOONS_POINTS), MOONS_POINTS);
    draw_map(m, f + MOONS_POINTS, f);
    const char *path = svg_arg ? svg_arg : svg_path;
    bool met = final_loss < 0.1 && accuracy >= 0.98;
    if (write_svg(path, m, f + MOONS_POINTS + n_cells, f, accuracy, final_loss)) {
      printf("wrote %s\n", path);
      rc = met ? 0 : 1;
    } else {
      fprintf(stderr, "moons: cannot write %s\n", path);
    }
    printf("goal (final epoch loss < 0.1, accuracy >= 98%%): %s\n", met ? "met" : "MISSED");
  } else {
    fprintf(stderr, "moons: %s\n", m->ctx ? cn_ctx_error(m->ctx) : "out of memory");
  }
  moons_destroy(m);
  free(m);
  free(eval_xy);
  free(f);
  free(svg_path);
  return rc;
}
