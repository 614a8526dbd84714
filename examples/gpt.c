/* nanoGPT's CPU character run through the C API (demo/gpt.c): 4 layers, 4 heads, embedding 128,
 * context 64, batch 12, dropout 0, AdamW lr 1e-3 (warm-up 100, cosine to 1e-4 over the steps),
 * betas (0.9, 0.99), weight decay 0.1 on matrices, clipping at 1.0, on the text of Debian's
 * fortunes. A progress line (loss, tokens/s); the training and validation losses every
 * --eval-interval steps and after the last, beside the bigram baseline of the same split; the
 * curves as ASCII and SVG; a checkpoint after every evaluation and --resume, which goes on from
 * it bit for bit; at the end --count characters sampled from a window of newlines (the sampling
 * forward over one window compiled once, run once per character).
 *
 *   example_gpt [--steps N] [--threads N] [--eval-interval N] [--eval-batches N] [--seed N]
 *               [--count N] [--temperature X] [--sample-seed N] [--data PATH]
 *               [--checkpoint FILE] [--resume] [--svg FILE] [--out DIR] [--backend NAME]
 *               [--interp]
 *
 * Defaults: 2000 steps, eval every 250 steps over 20 batches of either split (nanoGPT's CPU
 * eval_iters), 500 characters at temperature 1, seed 0, checkpoint runs/gpt.safetensors, curves
 * in runs/gpt.svg (--out DIR moves runs/). The thread count is --threads, else CANNL_THREADS, else
 * every core. */
#include "../demo/backend.h"
#include "../demo/gpt.h"
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

/* The loss curves (training and validation at each evaluation) as rows of characters: 't' for
 * the training loss, 'v' for the validation one, '*' where they meet, and the bigram as '-'. */
static void ascii_plot(const gpt *m, double bigram) {
  double lo = bigram, hi = bigram;
  for (int i = 0; i < m->n_evals; i++) {
    double a = m->evals_train[i], b = m->evals_valid[i];
    lo = a < lo ? a : lo, lo = b < lo ? b : lo;
    hi = a > hi ? a : hi, hi = b > hi ? b : hi;
  }
  const int rows = 10;
  printf("loss (t: training, v: validation, -: bigram)\n");
  for (int r = rows - 1; r >= 0; r--) {
    printf("%8.3f |", lo + (hi - lo) * r / (rows - 1));
    int rb = hi > lo ? (int)((bigram - lo) / (hi - lo) * (rows - 1) + 0.5) : 0;
    for (int i = 0; i < m->n_evals; i++) {
      int rt = hi > lo ? (int)((m->evals_train[i] - lo) / (hi - lo) * (rows - 1) + 0.5) : 0;
      int rv = hi > lo ? (int)((m->evals_valid[i] - lo) / (hi - lo) * (rows - 1) + 0.5) : 0;
      char c = rt == r && rv == r ? '*' : rt == r ? 't' : rv == r ? 'v' : rb == r ? '-' : ' ';
      printf("  %c  ", c);
    }
    printf("\n");
  }
  printf("%8s +", "");
  for (int i = 0; i < m->n_evals; i++) printf("-----");
  printf("\n%8s  ", "step");
  for (int i = 0; i < m->n_evals; i++) printf("%4lld ", (long long)m->evals_step[i]);
  printf("\n");
}

static bool write_svg(const gpt *m, double bigram, const char *path) {
  FILE *out = fopen(path, "w");
  if (!out) return false;
  const double w = 500, h = 250, x0 = 60, y0 = 30;
  double lo = bigram, hi = bigram, last = (double)m->cfg.steps;
  for (int i = 0; i < m->n_evals; i++) {
    double a = m->evals_train[i], b = m->evals_valid[i];
    lo = a < lo ? a : lo, lo = b < lo ? b : lo;
    hi = a > hi ? a : hi, hi = b > hi ? b : hi;
  }
  if (hi == lo) hi = lo + 1e-9;
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"330\" "
          "font-family=\"sans-serif\" font-size=\"11\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"%g\" y=\"18\">mean cross-entropy (nats): training (red), validation "
          "(green), bigram (grey)</text>\n"
          "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#888\"/>\n"
          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.3f</text>\n"
          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.3f</text>\n"
          "<text x=\"%g\" y=\"%g\">step 0 .. %lld</text>\n",
          x0, x0, y0, w, h, x0 - 4, y0 + 4, hi, x0 - 4, y0 + h, lo, x0, y0 + h + 16,
          (long long)m->cfg.steps);
  double yb = y0 + h - h * (bigram - lo) / (hi - lo);
  fprintf(out,
          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#999\" "
          "stroke-dasharray=\"4 3\"/>\n",
          x0, yb, x0 + w, yb);
  for (int s = 0; s < 2; s++) {
    fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
            s ? "#2a7" : "#c33");
    for (int i = 0; i < m->n_evals; i++) {
      double v = s ? m->evals_valid[i] : m->evals_train[i];
      fprintf(out, "%.1f,%.1f ", x0 + w * (double)m->evals_step[i] / last,
              y0 + h - h * (v - lo) / (hi - lo));
    }
    fprintf(out, "\"/>\n");
  }
  fprintf(out, "</svg>\n");
  return fclose(out) == 0;
}

/* ---- Options ------------------------------------------------------------------------------- */

typedef struct {
  gpt_config cfg;
  int64_t eval_interval, eval_batches, count, sample_seed;
  double temperature;
  const char *threads, *svg, *out;
  bool resume;
  char checkpoint_default[512], svg_default[512];
} options;

static void usage(void) {
  fprintf(stderr,
          "usage: example_gpt [--steps N] [--threads N] [--eval-interval N] "
          "[--eval-batches N] [--seed N]\n"
          "         [--count N] [--temperature X] [--sample-seed N] [--data PATH]\n"
          "         [--checkpoint FILE] [--resume] [--svg FILE] [--out DIR] [--backend NAME]\n"
          "         [--interp]\n"
          "  --out DIR: where the checkpoint and the SVG go by default (runs, made when\n"
          "  missing)\n"
          "  --backend NAME: c, interp, opencl, ... (default the option backend:\n"
          "  $CANNL_BACKEND, else c); --interp: the same as --backend interp\n");
}

static bool parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool parse_options(int argc, char **argv, options *o) {
  *o = (options){gpt_defaults(), 250, 20, 500, 0, 1.0, NULL, NULL, DEMO_OUT_DEFAULT, false, "", ""};
  o->cfg.backend = CN_BACKEND_DEFAULT; /* the option "backend" ($CANNL_BACKEND), else c */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t n;
    if (strcmp(a, "--resume") == 0) {
      o->resume = true;
      continue;
    }
    if (strcmp(a, "--interp") == 0) {
      o->cfg.backend = CN_BACKEND_INTERP;
      continue;
    }
    if (!v) {
      fprintf(stderr, "%s: missing value\n", a);
      return false;
    }
    i++;
    char *end;
    if (strcmp(a, "--steps") == 0 && parse_int(v, 1, INT32_MAX, &n))
      o->cfg.steps = n;
    else if (strcmp(a, "--threads") == 0 && parse_int(v, 1, 1024, &n))
      o->threads = v;
    else if (strcmp(a, "--eval-interval") == 0 && parse_int(v, 1, INT32_MAX, &n))
      o->eval_interval = n;
    else if (strcmp(a, "--eval-batches") == 0 && parse_int(v, 1, 100000, &n))
      o->eval_batches = n;
    else if (strcmp(a, "--seed") == 0 && parse_int(v, 0, INT64_MAX, &n))
      o->cfg.seed = (uint64_t)n;
    else if (strcmp(a, "--count") == 0 && parse_int(v, 0, 1 << 20, &n))
      o->count = n;
    else if (strcmp(a, "--sample-seed") == 0 && parse_int(v, 0, INT64_MAX, &n))
      o->sample_seed = n;
    else if (strcmp(a, "--temperature") == 0 && (o->temperature = strtod(v, &end)) >= 0 &&
             end != v && !*end)
      continue;
    else if (strcmp(a, "--data") == 0)
      o->cfg.data = v;
    else if (strcmp(a, "--checkpoint") == 0)
      o->cfg.checkpoint = v;
    else if (strcmp(a, "--svg") == 0)
      o->svg = v;
    else if (strcmp(a, "--out") == 0)
      o->out = v;
    else if (strcmp(a, "--backend") == 0) {
      if (!demo_backend_parse(v, &o->cfg.backend)) return false;
    } else {
      fprintf(stderr, "bad option or value: %s %s\n", a, v);
      return false;
    }
  }
  if (!o->cfg.checkpoint && !demo_output_path(o->out, "gpt.safetensors", o->checkpoint_default,
                                              sizeof o->checkpoint_default))
    return false;
  if (!o->svg && !demo_output_path(o->out, "gpt.svg", o->svg_default, sizeof o->svg_default))
    return false;
  if (!o->cfg.checkpoint) o->cfg.checkpoint = o->checkpoint_default;
  if (!o->svg) o->svg = o->svg_default;
  if (o->cfg.steps < o->cfg.warmup) o->cfg.warmup = o->cfg.steps / 20; /* a short run */
  return true;
}

/* The progress line: step, loss, tokens/s of this process's steps, ETA (redrawn on a terminal,
 * else every tenth of the run). */
static void progress(const gpt *m, int64_t first, double start, bool terminal, double *last_draw) {
  int64_t done = m->steps_done - first, steps = m->cfg.steps;
  double t = now(), elapsed = t - start;
  double rate = elapsed > 0 ? (double)(done * m->cfg.batch * m->cfg.context) / elapsed : 0;
  double eta = done > 0 ? elapsed * (double)(steps - m->steps_done) / (double)done : 0;
  if (terminal) {
    if (m->steps_done < steps && t - *last_draw < 0.1) return;
    *last_draw = t;
    fprintf(stderr, "\r  step %lld/%lld loss %.4f %.0f tokens/s ETA %.0fs  ",
            (long long)m->steps_done, (long long)steps, m->last_loss, rate, eta);
    fflush(stderr);
  } else if (m->steps_done == steps ||
             (10 * m->steps_done / steps) != (10 * (m->steps_done - 1) / steps))
    fprintf(stderr, "  step %lld/%lld loss %.4f, %.0f tokens/s, ETA %.0fs\n",
            (long long)m->steps_done, (long long)steps, m->last_loss, rate, eta);
}

static cn_status evaluate(gpt *m, const options *o, double bigram, bool terminal) {
  cn_status st = gpt_record_eval(m, (int)o->eval_batches);
  if (st != CN_OK) return st;
  int i = m->n_evals - 1;
  printf("%sstep %lld: train loss %.4f, val loss %.4f (bigram %.4f)\n", terminal ? "\n" : "",
         (long long)m->steps_done, m->evals_train[i], m->evals_valid[i], bigram);
  fflush(stdout);
  return gpt_save(m);
}

int main(int argc, char **argv) {
  options o;
  if (!parse_options(argc, argv, &o)) {
    usage();
    return 2;
  }
  if (o.threads && setenv("CANNL_THREADS", o.threads, 1) != 0) return 1;
  gpt m;
  double t0 = now(), bigram = 0;
  cn_status st = gpt_build(&m, &o.cfg);
  if (st == CN_OK) st = cn_text_bigram_loss(m.ctx, &m.text, CN_TEXT_VALID, &bigram);
  /* --resume without a checkpoint yet is a first run, as the script's restore ~resume:true */
  if (st == CN_OK && o.resume && access(o.cfg.checkpoint, F_OK) != 0) {
    fprintf(stderr, "note: no checkpoint %s to resume from: training from the first step\n",
            o.cfg.checkpoint);
  } else if (st == CN_OK && o.resume) {
    st = gpt_resume(&m);
    if (st == CN_OK)
      printf("resumed from %s after step %lld\n", o.cfg.checkpoint, (long long)m.steps_done);
  }
  if (st != CN_OK) {
    fprintf(stderr, "error: %s\n", gpt_error(&m));
    gpt_destroy(&m);
    return 1;
  }
  printf("GPT on %s: %lld tokens (%d files), vocabulary %d, %lld training tokens; %d layers, %d "
         "heads, embedding %lld, context %lld, batch %lld, %lld parameters; %lld steps, AdamW lr "
         "%g to %g (built and compiled in %.1f s)\n",
         o.cfg.data ? o.cfg.data : GPT_DATA_DIR, (long long)m.text.count, m.text.files,
         m.text.vocab, (long long)m.text.train, o.cfg.n_layer, o.cfg.n_head,
         (long long)o.cfg.n_embd, (long long)o.cfg.context, (long long)o.cfg.batch,
         (long long)m.params, (long long)o.cfg.steps, o.cfg.lr, o.cfg.min_lr, now() - t0);
  bool terminal = isatty(2);
  if (m.steps_done == 0) st = evaluate(&m, &o, bigram, false);
  int64_t first = m.steps_done;
  double start = now(), last_draw = 0;
  while (st == CN_OK && m.steps_done < o.cfg.steps) {
    st = gpt_train_step(&m);
    if (st != CN_OK) break;
    progress(&m, first, start, terminal, &last_draw);
    if (m.steps_done % o.eval_interval == 0 || m.steps_done == o.cfg.steps) {
      double pause = now();
      st = evaluate(&m, &o, bigram, terminal);
      start += now() - pause; /* tokens/s counts the training steps only */
    }
  }
  if (st == CN_OK && m.steps_done > first)
    printf("trained %lld steps in %.1f s: %.0f tokens/s\n", (long long)(m.steps_done - first),
           now() - start,
           (double)((m.steps_done - first) * o.cfg.batch * o.cfg.context) / (now() - start));
  if (st == CN_OK && m.n_evals > 0) {
    ascii_plot(&m, bigram);
    if (!write_svg(&m, bigram, o.svg))
      fprintf(stderr, "cannot write %s\n", o.svg);
    else
      printf("curves: %s\n", o.svg);
  }
  char *text = st == CN_OK ? malloc((size_t)o.count + 1) : NULL;
  if (st == CN_OK && !text) st = CN_ERR_NOMEM;
  if (st == CN_OK) st = gpt_sampler_sync(&m);
  if (st == CN_OK) st = gpt_sample(&m, o.count, o.temperature, (uint64_t)o.sample_seed, text);
  if (st == CN_OK)
    printf("%lld characters sampled (temperature %g, seed %lld):\n%s\n", (long long)o.count,
           o.temperature, (long long)o.sample_seed, text);
  free(text);
  if (st != CN_OK) fprintf(stderr, "error: %s\n", gpt_error(&m));
  gpt_destroy(&m);
  return st == CN_OK ? 0 : 1;
}
