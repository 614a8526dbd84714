/* Benchmark: nanoGPT's CPU character model (demo/gpt.c, the model of examples/gpt.c) trained in
 * cannl's generated C against the same model in PyTorch (bench_gpt.py next to this file, run by
 * /usr/bin/python3 from this program), each on one and on two threads, in the same run. Both
 * sides train 4 layers, 4 heads, embedding 128, context 64, batch 12 on the same windows of
 * Debian's fortunes (cannl's cn_text_draw_windows, reproduced by the script) for the same steps
 * (2000; --steps N; --quick: 20; --data PATH: another corpus) with AdamW (lr 1e-3, warm-up min(100,
 * steps / 20), cosine to 1e-4, betas (0.9, 0.99), weight decay 0.1 on matrices, clipping at 1.0),
 * then compute the mean validation loss over 200 batches (--quick: 10) of the validation split's
 * windows of steps 0 .. 199 and time 100 steps of sampling one token (the forward over one window
 * [1; 64], compiled once, its last block and head for the last position only: gpt.c's sampling
 * model; PyTorch's head on the last position as nanoGPT's generate; the pick of the logits at
 * temperature 1, the window shifted). cannl's thread count is the option "threads", set after
 * gpt_build; PyTorch's is torch.set_num_threads (and OpenBLAS's, bench_common.py), with
 * OMP_WAIT_POLICY=PASSIVE and subnormals flushed (torch.set_flush_denormal: PyTorch's fastest
 * setting on this model; see bench_gpt.py).
 *
 * Per side: the build (cannl only: loading the corpus, compiling the routines or loading them
 * from the compile cache, the init), training tokens/s (steps * 12 * 64 over the training loop's
 * time; cannl's includes drawing each step's windows, PyTorch draws them before its clock
 * starts), GFLOP/s by nanoGPT's count (6 N + 12 L H Q T flops per token, N the parameters
 * without the position embedding; the causal attention's masked half is counted as nanoGPT
 * counts it), the last step's loss, the validation loss, the bigram's (cn_text_bigram_loss) and
 * the median sampling step. Ratios are PyTorch / cannl for times (above 1: cannl faster). The
 * JSON lines (stdout, prefixed "json ", and with `--json FILE` that file) hold one workload
 * each: training at 1 and 2 threads. Without the corpus it says so and exits 0; without
 * python3-torch only cannl's columns are filled. Exit 1 when cannl fails. */
#include "../demo/gpt.h"
#include "bench_common.h"

enum { SIDES = 4, SAMPLE_STEPS = 100 }; /* sides: cannl 1t, cannl 2t, PyTorch 1t, PyTorch 2t */
static const char *const side_names[SIDES] = {"cannl 1t", "cannl 2t", "PyTorch 1t", "PyTorch 2t"};

typedef struct {
  bool done;
  double build_s, train_s, tokens_per_s, gflops_per_s, train_loss, valid_loss, sample_ms;
} side;

static side sides[SIDES];
static double bigram = NAN;
static int64_t steps = 2000, eval_batches = 200;
static const char *data = GPT_DATA_DIR; /* --data PATH: another corpus (a file or directory) */

static int64_t warmup(void) {
  return steps / 20 < 100 ? steps / 20 : 100;
}

/* nanoGPT's flops per token of the configuration (estimate_mfu). */
static double flops_per_token(const gpt *m) {
  const gpt_config *c = &m->cfg;
  return 6.0 * (double)m->params +
         12.0 * c->n_layer * c->n_head * (double)(c->n_embd / c->n_head) * (double)c->context;
}

/* ---- The cannl side ------------------------------------------------------------------------ */

/* The median time of one sampling step (ms): the window's ids set, the forward run, the logits
 * read, the last position's token picked and shifted in. */
static cn_status time_sampling(gpt *m, double *median_ms) {
  cn_status st = gpt_sampler_sync(m);
  cn_asgn *fwd = st == CN_OK ? cn_graph_forward(m->sg, m->window_logits) : NULL;
  cn_routine *r = fwd ? cn_routine_compile(m->ctx, fwd, m->cfg.backend, "gpt_sample_step") : NULL;
  if (!r) return st == CN_OK ? (cn_ctx_status(m->ctx) ? cn_ctx_status(m->ctx) : CN_ERR_NOMEM) : st;
  /* the logits are the last position's (gpt.c's sampling model), [1, 1 | -> V] */
  int64_t t = m->cfg.context, v = m->text.vocab,
          n = cn_node_numel(cn_tensor_value(m->window_logits));
  double *window = malloc((size_t)t * sizeof *window), *logits = malloc((size_t)n * sizeof *logits);
  double times[SAMPLE_STEPS];
  st = window && logits ? CN_OK : CN_ERR_NOMEM;
  for (int64_t i = 0; i < t && st == CN_OK; i++) window[i] = m->text.ids['\n'];
  for (int i = 0; i < SAMPLE_STEPS && st == CN_OK; i++) {
    double start = now_seconds();
    st = cn_node_set_values(cn_tensor_value(m->window), false, window, (size_t)t);
    if (st == CN_OK) st = cn_routine_run(r);
    if (st == CN_OK)
      st = cn_node_get_values(cn_tensor_value(m->window_logits), false, logits, (size_t)n);
    int next = cn_text_sample_pick(logits + n - v, (int)v, 1.0,
                                   cn_text_sample_uniform(m->cfg.seed, (uint64_t)i));
    memmove(window, window + 1, (size_t)(t - 1) * sizeof *window);
    window[t - 1] = next;
    times[i] = (now_seconds() - start) * 1e3;
  }
  timing tm;
  if (st == CN_OK) summarize(times, SAMPLE_STEPS, &tm), *median_ms = tm.median_ms;
  free(window);
  free(logits);
  cn_routine_free(r);
  return st;
}

static bool train_cannl(int threads, side *out) {
  static gpt m; /* curves and messages: not on the stack */
  gpt_config cfg = gpt_defaults();
  cfg.steps = steps;
  cfg.warmup = warmup();
  cfg.data = data;
  char count[8];
  snprintf(count, sizeof count, "%d", threads);
  double start = now_seconds();
  cn_status st = gpt_build(&m, &cfg);
  out->build_s = now_seconds() - start;
  if (st == CN_OK) st = cn_ctx_set_option(m.ctx, "threads", count);
  if (st == CN_OK && isnan(bigram))
    st = cn_text_bigram_loss(m.ctx, &m.text, CN_TEXT_VALID, &bigram);
  start = now_seconds();
  while (st == CN_OK && m.steps_done < steps) st = gpt_train_step(&m);
  out->train_s = now_seconds() - start;
  if (st == CN_OK) st = gpt_evaluate(&m, CN_TEXT_VALID, (int)eval_batches, &out->valid_loss);
  if (st == CN_OK) st = time_sampling(&m, &out->sample_ms);
  if (st == CN_OK) {
    double tokens = (double)(steps * cfg.batch * cfg.context);
    out->tokens_per_s = tokens / out->train_s;
    out->gflops_per_s = flops_per_token(&m) * tokens / out->train_s / 1e9;
    out->train_loss = m.last_loss;
    out->done = true;
  } else
    fprintf(stderr, "bench_gpt: cannl on %d thread(s): %s\n", threads, gpt_error(&m));
  gpt_destroy(&m);
  return st == CN_OK;
}

/* ---- The PyTorch side ---------------------------------------------------------------------- */

/* The number after "\"key\": " in a JSON line, NAN when absent. */
static double json_field(const char *line, const char *key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\": ", key);
  const char *at = strstr(line, pattern);
  return at ? strtod(at + strlen(pattern), NULL) : NAN;
}

/* A `{"bench": "gpt", "side": "torchT", ...}` line of bench_gpt.py. */
static void parse_line(void *unused, int slot, const char *line) {
  (void)unused, (void)slot;
  if (strncmp(line, "{\"bench\": \"gpt\"", 15) != 0) return;
  double threads = json_field(line, "threads");
  if (threads != 1 && threads != 2) return;
  side *s = &sides[1 + (int)threads];
  s->train_s = json_field(line, "train_s");
  s->tokens_per_s = json_field(line, "train_tokens_per_s");
  s->gflops_per_s = json_field(line, "train_gflops_per_s");
  s->train_loss = json_field(line, "train_loss");
  s->valid_loss = json_field(line, "valid_loss");
  s->sample_ms = json_field(line, "sample_step_ms");
  s->done = !isnan(s->tokens_per_s);
}

static void train_torch(bench *b) {
  char cmd[PATH_MAX + 256];
  if (snprintf(cmd, sizeof cmd,
               "/usr/bin/python3 '%s' --steps %lld --warmup %lld --eval-batches %lld", b->script,
               (long long)steps, (long long)warmup(), (long long)eval_batches) >= (int)sizeof cmd ||
      !run_command(b, cmd, &sides, 0))
    fprintf(stderr, "bench_gpt: the python side failed\n");
}

/* ---- Report -------------------------------------------------------------------------------- */

static void fmt(char *buf, size_t size, const char *format, double v) {
  if (isnan(v))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, format, v);
}

static double over(double a, double b) {
  return isnan(a) || isnan(b) || b <= 0 ? NAN : a / b;
}

static void report(const bench *b) {
  printf("\nGPT training (4 layers, 4 heads, 128, context 64, batch 12), %lld steps; validation "
         "over %lld batches; bigram %.4f\n",
         (long long)steps, (long long)eval_batches, bigram);
  printf("%-11s %8s %9s %11s %8s %10s %10s %10s\n", "side", "build s", "train s", "tokens/s",
         "GFLOP/s", "last loss", "val loss", "sample ms");
  for (int s = 0; s < SIDES; s++) {
    const side *r = &sides[s];
    char c[7][24];
    fmt(c[0], sizeof c[0], "%.2f", s < 2 && r->done ? r->build_s : NAN);
    fmt(c[1], sizeof c[1], "%.2f", r->done ? r->train_s : NAN);
    fmt(c[2], sizeof c[2], "%.0f", r->done ? r->tokens_per_s : NAN);
    fmt(c[3], sizeof c[3], "%.2f", r->done ? r->gflops_per_s : NAN);
    fmt(c[4], sizeof c[4], "%.4f", r->done ? r->train_loss : NAN);
    fmt(c[5], sizeof c[5], "%.4f", r->done ? r->valid_loss : NAN);
    fmt(c[6], sizeof c[6], "%.3f", r->done ? r->sample_ms : NAN);
    printf("%-11s %8s %9s %11s %8s %10s %10s %10s\n", side_names[s], c[0], c[1], c[2], c[3], c[4],
           c[5], c[6]);
  }
  if (b->torch_missing) return;
  printf("\ncannl / PyTorch tokens/s (above 1: cannl faster)%s%s\n", *b->versions ? "; " : "",
         b->versions);
  for (int t = 0; t < 2; t++) {
    char c[3][24];
    fmt(c[0], sizeof c[0], "%.2fx", over(sides[t].tokens_per_s, sides[2 + t].tokens_per_s));
    fmt(c[1], sizeof c[1], "%.2fx", over(sides[2 + t].sample_ms, sides[t].sample_ms));
    fmt(c[2], sizeof c[2], "%+.4f", sides[t].valid_loss - sides[2 + t].valid_loss);
    printf("%d thread(s): training %s, sampling step %s, validation loss cannl - PyTorch %s\n",
           t + 1, c[0], c[1], c[2]);
  }
}

static void json_line(int threads, FILE *file) {
  char buf[1024];
  const side *c = &sides[threads - 1], *p = &sides[threads + 1];
  snprintf(buf, sizeof buf,
           "{\"bench\":\"gpt\",\"workload\":\"train\",\"threads\":%d,\"steps\":%lld,"
           "\"batch\":12,\"context\":64,\"eval_batches\":%lld",
           threads, (long long)steps, (long long)eval_batches);
  const side *both[2] = {c, p};
  const char *names[2] = {"cannl", "torch"};
  for (int s = 0; s < 2; s++) {
    const side *r = both[s];
    char key[40];
    if (s == 0) json_num(buf, sizeof buf, "cannl_build_s", r->done ? r->build_s : NAN);
    snprintf(key, sizeof key, "%s_tokens_per_s", names[s]);
    json_num(buf, sizeof buf, key, r->done ? r->tokens_per_s : NAN);
    snprintf(key, sizeof key, "%s_gflops_per_s", names[s]);
    json_num(buf, sizeof buf, key, r->done ? r->gflops_per_s : NAN);
    snprintf(key, sizeof key, "%s_train_loss", names[s]);
    json_num(buf, sizeof buf, key, r->done ? r->train_loss : NAN);
    snprintf(key, sizeof key, "%s_valid_loss", names[s]);
    json_num(buf, sizeof buf, key, r->done ? r->valid_loss : NAN);
    snprintf(key, sizeof key, "%s_sample_step_ms", names[s]);
    json_num(buf, sizeof buf, key, r->done ? r->sample_ms : NAN);
  }
  json_num(buf, sizeof buf, "bigram_valid_loss", bigram);
  json_num(buf, sizeof buf, "tokens_ratio",
           c->done && p->done ? over(c->tokens_per_s, p->tokens_per_s) : NAN);
  size_t len = strlen(buf);
  snprintf(buf + len, sizeof buf - len, "}");
  printf("json %s\n", buf);
  if (file) fprintf(file, "%s\n", buf);
}

int main(int argc, char **argv) {
  static bench b = {.name = "bench_gpt", .parse = parse_line};
  /* --steps N and --data PATH are this program's own; the rest is bench_start's command line */
  char *rest[8];
  int n_rest = 0;
  bool steps_given = false;
  for (int i = 0; i < argc; i++) {
    char *end;
    if (i > 0 && strcmp(argv[i], "--steps") == 0 && i + 1 < argc &&
        (steps = strtoll(argv[i + 1], &end, 10)) > 0 && !*end)
      i++, steps_given = true;
    else if (i > 0 && strcmp(argv[i], "--data") == 0 && i + 1 < argc)
      data = argv[++i];
    else if (n_rest < 8)
      rest[n_rest++] = argv[i];
    else
      return fprintf(stderr,
                     "usage: bench_gpt [--quick] [--steps N] [--data PATH] [--json FILE]\n"),
             2;
  }
  int status = bench_start(&b, n_rest, rest);
  if (status >= 0) return status;
  if (access(data, R_OK) != 0) {
    printf("bench_gpt: skipped: no corpus at %s (Debian's fortunes)\n", data);
    if (b.file) fclose(b.file);
    return 0;
  }
  if (b.quick) {
    if (!steps_given) steps = 20;
    eval_batches = 10;
  }
  bool ok = true;
  for (int t = 1; t <= 2; t++) {
    printf("running cannl on %d thread(s), %lld steps\n", t, (long long)steps);
    ok = train_cannl(t, &sides[t - 1]) && ok;
  }
  printf("running PyTorch on 1 and 2 threads, %lld steps\n", (long long)steps);
  train_torch(&b);
  if (b.torch_missing)
    printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  report(&b);
  for (int t = 1; t <= 2; t++) json_line(t, b.file);
  if (b.file && fclose(b.file) != 0) perror(b.json), ok = false;
  return ok ? 0 : 1;
}
