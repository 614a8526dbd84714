/* Sampling and the bigram baseline (src/data/sample.c) against values computed here by hand:
 *   - cn_text_bigram_loss of "aabaabaab|ab" (split 9/2): the validation pair ab has
 *     P = (3 + 1) / (6 + 2), so log 2; the training loss is (6 log 2 + 2 log(4/3)) / 8;
 *   - cn_text_sample_pick: temperature 0 takes the first largest logit, a NaN gives -1, and the
 *     draw u selects the token whose cumulative softmax interval holds it (-inf never drawn);
 *   - cn_text_sample_uniform: a pure function of (seed, i) in [0, 1), mean 0.5 over 10^5 draws;
 *   - cn_text_sample with a bigram table as the model (a window of 2 token ids, one-hot by eq,
 *     logits [2; 3]) on both backends: temperature 0 cycles a -> b -> '\n' -> a; temperature 1
 *     equals a simulation written here from the documented rule (softmax of the table's row of
 *     the window's last token, the draw of token i at (seed, i)); a prompt longer than one byte
 *     ends the window;
 *   - its refusals: a prompt byte outside the vocabulary, logits of the wrong last axis, a
 *     negative temperature, a computed input;
 *   - the notation: `sample` over a string's vocabulary equals cn_text_sample, printed as a JSON
 *     line with --json; bigram_loss and vocab_size of a string; positioned refusals (a ~text
 *     that is no corpus, a missing ~count, a prompt outside the vocabulary, a call in a loop
 *     body, whose text would not follow the training); an export with
 *     the sampler from a script without text_windows is refused. */
#include "check.h"

#include "cannl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_bigram(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  CHECK_INT(cn_text_from_bytes(ctx, "aabaabaabab", 11, &t), CN_OK);
  CHECK_INT(t.vocab, 2);
  CHECK_INT(t.train, 9);
  double loss = 0;
  CHECK_INT(cn_text_bigram_loss(ctx, &t, CN_TEXT_VALID, &loss), CN_OK);
  CHECK_NEAR(loss, log(2.0), 1e-12);
  CHECK_INT(cn_text_bigram_loss(ctx, &t, CN_TEXT_TRAIN, &loss), CN_OK);
  CHECK_NEAR(loss, (6 * log(2.0) + 2 * log(4.0 / 3.0)) / 8, 1e-12);
  cn_text_free(&t);
  /* a validation split of one token has no pair */
  CHECK_INT(cn_text_from_bytes(ctx, "abababa", 7, &t), CN_OK);
  CHECK_INT(cn_text_bigram_loss(ctx, &t, CN_TEXT_VALID, &loss), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "at least 2");
  cn_text_free(&t);
  CHECK_INT(cn_text_from_bytes(ctx, "", 0, &t), CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
}

static void test_pick(void) {
  const double l[4] = {1, 3, 3, -INFINITY};
  CHECK_INT(cn_text_sample_pick(l, 4, 0, 0.99), 1);
  /* p = {e^-2, 1, 1, 0}, sum 2 + e^-2: the intervals [0, e^-2), [e^-2, 1 + e^-2), ... */
  double e2 = exp(-2.0), sum = 2 + e2;
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 0), 0);
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 0.99 * e2 / sum), 0);
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 1.01 * e2 / sum), 1);
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 0.99 * (1 + e2) / sum), 1);
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 1.01 * (1 + e2) / sum), 2);
  CHECK_INT(cn_text_sample_pick(l, 4, 1, 0.9999999), 2);
  /* temperature 2: p = {e^-1, 1, 1, 0} */
  double e1 = exp(-1.0);
  CHECK_INT(cn_text_sample_pick(l, 4, 2, 1.01 * e1 / (2 + e1)), 1);
  CHECK_INT(cn_text_sample_pick(l, 4, 2, 0.99 * e1 / (2 + e1)), 0);
  const double nan_logits[2] = {0, NAN};
  CHECK_INT(cn_text_sample_pick(nan_logits, 2, 1, 0.5), -1);
  CHECK_INT(cn_text_sample_pick(nan_logits, 2, 0, 0.5), -1);
}

static void test_uniform(void) {
  double mean = 0;
  for (uint64_t i = 0; i < 100000; i++) {
    double u = cn_text_sample_uniform(7, i);
    CHECK(u >= 0 && u < 1);
    mean += u;
  }
  CHECK_NEAR(mean / 100000, 0.5, 0.005);
  CHECK(cn_text_sample_uniform(7, 3) == cn_text_sample_uniform(7, 3));
  CHECK(cn_text_sample_uniform(7, 3) != cn_text_sample_uniform(8, 3));
  CHECK(cn_text_sample_uniform(7, 3) != cn_text_sample_uniform(7, 4));
}

/* the bigram table of the model: row = the current token ('\n', 'a', 'b'), column = the next */
static const double table[9] = {0.0, 2.0, 0.5, /* '\n' */
                                0.3, 0.0, 2.5, /* 'a' */
                                2.0, 1.0, 0.0 /* 'b' */};

/* The text the documented rule gives: token i drawn from softmax(table[last] / temperature) by
 * u = cn_text_sample_uniform(seed, i), the first token whose cumulative probability exceeds u. */
static void simulate(int last, double temperature, uint64_t seed, int count, char *out) {
  static const char bytes[3] = {'\n', 'a', 'b'};
  for (int i = 0; i < count; i++) {
    const double *row = table + 3 * last;
    double m = fmax(row[0], fmax(row[1], row[2])), p[3], total = 0;
    for (int k = 0; k < 3; k++) total += p[k] = exp((row[k] - m) / temperature);
    double u = cn_text_sample_uniform(seed, (uint64_t)i) * total, cum = 0;
    int next = 2;
    for (int k = 0; k < 3; k++)
      if (u < (cum += p[k])) {
        next = k;
        break;
      }
    out[i] = bytes[next];
    last = next;
  }
  out[count] = '\0';
}

static void test_sample(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_text t;
  CHECK_INT(cn_text_from_bytes(ctx, "ab\nba\n", 6, &t), CN_OK);
  int64_t two = 2, three[2] = {3, 3};
  cn_dims wd = {CN_AXES_NONE, CN_AXES_NONE, {1, &two, NULL}};
  cn_dims td = {CN_AXES_NONE, CN_AXES_NONE, {2, three, NULL}};
  cn_tensor *window = cn_tensor_buffer(g, "window", &wd);
  cn_tensor *tab = cn_tensor_data(g, "table", &td, table, 9);
  cn_notation_binding b[2] = {{"x", window, 0}, {"table", tab, 0}};
  cn_tensor *logits = cn_notation_op(
      g, "einsum \"tv; vw => tw\" (eq (x +++ \"t; v => tv\" (0.0 *. range 3)) (range 3)) table", 2,
      b);
  CHECK(logits != NULL);
  char out[64], want[64];
  cn_sample_options o = {12, 0, 0, NULL, 0};
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, out), CN_OK);
  CHECK_STR(out, "ab\nab\nab\nab\n");
  o = (cn_sample_options){40, 1, 5, NULL, 0};
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, out), CN_OK);
  simulate(0, 1, 5, 40, want);
  CHECK_STR(out, want);
  /* the window ends with the prompt: "ba" puts 'a' last */
  o = (cn_sample_options){40, 0.5, 9, "ba", 2};
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, out), CN_OK);
  simulate(1, 0.5, 9, 40, want);
  CHECK_STR(out, want);
  o.seed = 10;
  char other[64];
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, other), CN_OK);
  CHECK(strcmp(out, other) != 0);

  o = (cn_sample_options){4, 1, 0, "c", 1};
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, out), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "byte 0 of the prompt (0x63) does not occur in the corpus");
  o = (cn_sample_options){4, -1, 0, NULL, 0};
  CHECK_INT(cn_text_sample(g, &t, window, logits, backend, &o, out), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "temperature -1");
  o = (cn_sample_options){4, 1, 0, NULL, 0};
  CHECK_INT(cn_text_sample(g, &t, logits, logits, backend, &o, out), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "is computed");
  cn_tensor *short_logits =
      cn_notation_op(g, "l ++ \"tw => t\"", 1, &(cn_notation_binding){"l", logits, 0});
  CHECK_INT(cn_text_sample(g, &t, window, short_logits, backend, &o, out), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "vocabulary has 3 tokens");
  cn_text_free(&t);
  cn_ctx_destroy(ctx);
}

/* The script's output (JSON lines with json) and status; the error in error. */
static cn_status run_script(const char *script, bool json, const char *export_name, char *out,
                            size_t cap, char *error, size_t error_cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *got = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&got, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .json = json, .out = f};
  if (export_name) {
    opts.export_input = "window";
    opts.export_output = "logits";
    opts.export_name = export_name;
    opts.export_dir = "/nonexistent-dir-of-test-sample";
    opts.export_sampler = true;
  }
  cn_status st = cn_notation_run(g, "s.cnl", script, &opts);
  fclose(f);
  snprintf(out, cap, "%s", got ? got : "");
  snprintf(error, error_cap, "%s", st == CN_OK ? "" : cn_ctx_error(ctx));
  free(got);
  cn_ctx_destroy(ctx);
  return st;
}

#define MODEL                                                                                      \
  "let window = placeholder ~output_dims:[2]\n"                                                    \
  "let table = [ [0.0; 2.0; 0.5]; [0.3; 0.0; 2.5]; [2.0; 1.0; 0.0] ]\n"                            \
  "let logits = einsum \"tv; vw => tw\" (eq (window +++ \"t; v => tv\" (0.0 *. range 3)) "         \
  "(range 3)) table\n"

static void test_notation(void) {
  char out[1024], error[1024];
  /* the corpus "ab\nba\nab\nab\nba\n": 15 bytes, training 13, validation "a\n" */
  CHECK_INT(run_script(MODEL "let corpus = \"ab\\nba\\nab\\nab\\nba\\n\"\n"
                             "printf \"%d %.6f\\n\" (vocab_size corpus) (bigram_loss corpus)\n"
                             "print (sample logits ~input:window ~text:corpus ~count:30 "
                             "~temperature:1 ~seed:5)\n",
                       true, NULL, out, sizeof out, error, sizeof error),
            CN_OK);
  CHECK_STR(error, "");
  /* training pairs of "ab\nba\nab\nab\n": n(a, \n) = 1, n(a) = 4, so P = 2 / 7 */
  char want[256], text[64];
  simulate(0, 1, 5, 30, text);
  char escaped[128];
  size_t k = 0;
  for (const char *c = text; *c; c++) {
    if (*c == '\n')
      escaped[k++] = '\\', escaped[k++] = 'n';
    else
      escaped[k++] = *c;
  }
  escaped[k] = '\0';
  snprintf(want, sizeof want, "{\"text\": \"3 %.6f\\n\"}\n{\"text\": \"%s\\n\"}\n", -log(2.0 / 7.0),
           escaped);
  CHECK_STR(out, want);

  CHECK_INT(run_script(MODEL "print (sample logits ~input:window ~text:window ~count:3)\n", false,
                       NULL, out, sizeof out, error, sizeof error),
            CN_ERR_INVALID);
  CHECK_HAS(error, "s.cnl:4:36:");
  CHECK_HAS(error, "is not a tensor of text_windows");
  CHECK_INT(run_script(MODEL "print (sample logits ~input:window ~text:\"ab\")\n", false, NULL, out,
                       sizeof out, error, sizeof error),
            CN_ERR_INVALID);
  CHECK_HAS(error, "sample takes the logits, ~input:PLACEHOLDER ~text:X");
  CHECK_INT(run_script(MODEL "print (sample logits ~input:window ~text:\"ab\\n\" ~count:3 "
                             "~prompt:\"c\")\n",
                       false, NULL, out, sizeof out, error, sizeof error),
            CN_ERR_INVALID);
  CHECK_HAS(error, "s.cnl:4:8: sample: byte 0 of the prompt (0x63) does not occur");
  CHECK_INT(run_script(MODEL
                       "for k = 0 to 1 do\n  print (sample logits ~input:window ~text:\"ab\\n\" "
                       "~count:3)\ndone\n",
                       false, NULL, out, sizeof out, error, sizeof error),
            CN_ERR_INVALID);
  CHECK_HAS(error, "s.cnl:5:10: sample draws its text once, where it is evaluated");
  CHECK_INT(run_script(MODEL, false, "m", out, sizeof out, error, sizeof error), CN_ERR_INVALID);
  CHECK_HAS(error, "export --sampler: the script reads no text corpus (text_windows)");
}

int main(void) {
  test_bigram();
  test_pick();
  test_uniform();
  test_sample(CN_BACKEND_INTERP);
  test_sample(CN_BACKEND_C);
  test_notation();
  CHECK_DONE();
}
