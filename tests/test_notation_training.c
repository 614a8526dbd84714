/* The notation's training forms (docs/notation.md "Training scripts"): the builtins of the
 * training pieces (values computed by hand, on both backends), labels that are not class indices
 * (a positioned runtime error), print of strings, printf, `if`,
 * `mod`, `for ... progress` in its plain and JSON forms (times cut off), the adam statement (with
 * ~decay_matrices_only) and sgd ~clip against hand formulas, the message naming a static index read
 * outside its loops, the syntax errors of the new forms with their positions, their canonical
 * printing, and constant memory in loops that branch and print. */
#include "notation_check.h"

#include "core/core.h"
#include "notation/notation.h"

/* What a script writes (text or, with json, JSON lines) on a backend, or its error message;
 * malloc'd. */
static char *output(const char *script, bool json, int b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {
      .backend = b ? CN_BACKEND_C : CN_BACKEND_INTERP, .json = json, .out = out};
  cn_status st = cn_notation_run(g, "train.cnl", script, &opts);
  fclose(out);
  if (st != CN_OK) {
    free(buf);
    buf = strdup(cn_ctx_error(ctx));
  }
  cn_ctx_destroy(ctx);
  return buf;
}

/* Each line cut at its first " | " (where the rate and the times start). */
static char *without_times(const char *text) {
  char *copy = strdup(text), *w = copy;
  for (const char *r = text; *r;) {
    const char *nl = strchr(r, '\n'), *end = nl ? nl : r + strlen(r);
    const char *bar = strstr(r, " | ");
    size_t n = (size_t)((bar && bar < end ? bar : end) - r);
    memmove(w, r, n);
    w += n;
    if (nl) *w++ = '\n';
    r = nl ? nl + 1 : end;
  }
  *w = '\0';
  return copy;
}

/* ---- Builtins ------------------------------------------------------------------------------- */

static void test_builtins(void) {
  const double e = exp(1.0);
  const double ce = ((log(e * e + e + 1) - 2) + (log(1 + e * e * e + e) - 1)) / 2;
  outcome o;
  BOTH {
    if (!run(&o, b,
             "let x = [1.0; -2.0; 3.0]\n"
             "print (sum x)\n"
             "print (mean x)\n"
             "let m = [| [1.0; 2.0]; [3.0; 5.0] |]\n"
             "print (sum ~spec:\"b|i => b\" m)\n"
             "print (mean ~spec:\"b|i => b\" m)\n"
             "print (mean ~spec:\"b|i => i\" m)\n"
             "print (sigmoid [0.0; 2.0])\n"
             "print (softplus [0.0; 1.0])\n"
             "print (log_softmax [0.0; 0.0])\n"
             "print (mse [1.0; 3.0] [0.0; 0.0])\n"
             "print (bce [0.0; 2.0] [1.0; 1.0])\n"
             "let logits = [| [2.0; 1.0; 0.0]; [0.0; 3.0; 1.0] |]\n"
             "let labels = [| 0; 2 |]\n"
             "print (cross_entropy logits labels)\n"
             "print (argmax logits)\n"
             "print (accuracy logits labels)\n"
             "print (confusion logits labels)\n"
             "print (softmax [0.0; 0.0])\n"))
      continue;
    CHECK_INT(o.n, 15);
    expect(&o, b, 0, "sum", "|->", VALUES(2), 1e-12);
    expect(&o, b, 1, "mean", "|->", VALUES(2.0 / 3), 1e-12);
    expect(&o, b, 2, "sum", "|->2", VALUES(3, 8), 1e-12);
    expect(&o, b, 3, "mean", "|->2", VALUES(1.5, 4), 1e-12);
    expect(&o, b, 4, "mean", "|->2", VALUES(2, 3.5), 1e-12);
    expect(&o, b, 5, "sigmoid", "|->2", VALUES(0.5, 1 / (1 + exp(-2.0))), 1e-12);
    expect(&o, b, 6, "softplus", "|->2", VALUES(log(2.0), log(1 + e)), 1e-12);
    expect(&o, b, 7, "log_softmax", "|->2", VALUES(-log(2.0), -log(2.0)), 1e-12);
    expect(&o, b, 8, "mse", "|->", VALUES(5), 1e-12);
    /* softplus(z) - y z: ln 2 and ln(1 + e^2) - 2, averaged */
    expect(&o, b, 9, NULL, "|->", VALUES((log(2.0) + log(1 + e * e) - 2) / 2), 1e-12);
    expect(&o, b, 10, "cross_entropy", "|->", VALUES(ce), 1e-12);
    expect(&o, b, 11, "argmax", "2|->", VALUES(0, 1), 0);
    expect(&o, b, 12, "accuracy", "|->", VALUES(0.5), 0);
    expect(&o, b, 13, "confusion", "|->3,3", VALUES(1, 0, 0, 0, 0, 0, 0, 1, 0), 0);
    expect(&o, b, 14, "softmax", "|->2", VALUES(0.5, 0.5), 1e-12);
  }
  /* gradients flow through the reductions: d mean / d p = 1/3, d sum(p^2) / d p = 2p */
  BOTH {
    if (!run(&o, b,
             "let p = {p = [1.0; -2.0; 3.0]}\n"
             "backprop (mean p)\n"
             "print p.grad\n"
             "backprop (sum (p *. p))\n"
             "print p.grad\n"))
      continue;
    expect(&o, b, 0, "p.grad", "|->3", VALUES(1.0 / 3, 1.0 / 3, 1.0 / 3), 1e-12);
    expect(&o, b, 1, "p.grad", "|->3", VALUES(2, -4, 6), 1e-12);
  }
  /* a script's own binding hides a builtin; ~spec must be a string */
  BOTH {
    if (!run(&o, b, "let sum = [7.0]\nprint sum\n")) continue;
    expect(&o, b, 0, "sum", "|->1", VALUES(7), 0);
  }
  CHECK_HAS(run_error("print (sum ~spec:3 [1.0])\n"),
            "seed.cnl:1:12: ~spec expects an einsum spec string, found a number");
}

/* Labels that are not class indices stop the run that computes the loss or the metric, at the
 * expression, naming the labels, the first bad cell and its value (a 1-based label file would
 * otherwise train on wrong targets); a script's labels are single precision, 0.7 reads as 0.7. */
static void test_bad_labels(void) {
  static const struct {
    const char *labels, *op, *value, *cell;
  } cases[] = {
      {"7; -3", "cross_entropy", "7", "0"},
      {"2; -3", "cross_entropy", "-3", "1"},
      {"2.5; 0.7", "cross_entropy", "2.5", "0"},
      {"0; 0.7", "cross_entropy", "0.7", "1"},
      {"1; 3", "accuracy", "3", "1"},
      {"-1; 0", "confusion", "-1", "0"},
  };
  char script[300], want[600];
  BOTH {
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      snprintf(script, sizeof script,
               "let logits = [| [2.0; 1.0; 0.0]; [0.0; 3.0; 1.0] |]\n"
               "let labels = [| %s |]\n"
               "print (%s logits labels)\n",
               cases[k].labels, cases[k].op);
      snprintf(want, sizeof want,
               "train.cnl:3:8: routine 'cnl_1': %s: label %s at [%s] of \"labels\" (#2) is not one "
               "of the 3 class indices of \"logits\" (#1): an integer from 0 to 2\n"
               "print (%s logits labels)\n"
               "       ^",
               cases[k].op, cases[k].value, cases[k].cell, cases[k].op);
      char *got = output(script, false, b);
      CHECK_STR(got, want);
      free(got);
    }
    /* valid labels: the values of test_builtins */
    char *got = output("let logits = [| [2.0; 1.0; 0.0]; [0.0; 3.0; 1.0] |]\n"
                       "printf \"%.6f %.1f\" (cross_entropy logits [| 0; 1 |]) "
                       "(accuracy logits [| 0; 1 |])\n",
                       false, b);
    char ok[64];
    snprintf(ok, sizeof ok, "%.6f 1.0",
             (log(1 + exp(-1.0) + exp(-2.0)) + log(1 + exp(-3.0) + exp(-2.0))) / 2);
    CHECK_STR(got, ok);
    free(got);
  }
}

/* ---- Optimizers ------------------------------------------------------------------------------ */

static void test_adam(void) {
  outcome o;
  /* g = 2p: the first bias-corrected step is lr * g / (|g| + eps); the second reads the moments
   * m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g^2, corrected by 1 - 0.9^2 and 1 - 0.999^2. With
   * ~beta1:0, taken as written: no momentum, m = g, and v bias-corrected (RMSprop-like). */
  double p[2] = {1, -2}, v[2] = {0, 0};
  struct {
    const char *options;
    double want[2][2];
  } cases[] = {{"", {{0.9000000005, -1.90000000025}, {0.8004122286917928, -1.8001664861157012}}},
               {" ~beta1:0", {{0}}}};
  for (int t = 1; t <= 2; t++)
    for (int i = 0; i < 2; i++) {
      double g = 2 * p[i];
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      p[i] -= 0.1 * g / (sqrt(v[i] / (1 - pow(0.999, t))) + 1e-8);
      cases[1].want[t - 1][i] = p[i];
    }
  char script[300];
  for (int k = 0; k < 2; k++) BOTH {
      snprintf(script, sizeof script,
               "let p = {p = [1.0; -2.0]}\n"
               "let loss = sum (p *. p)\n"
               "for step = 0 to 1 do\n"
               "  backprop loss\n"
               "  adam loss ~learning_rate:0.1%s\n"
               "  print p\n"
               "done\n",
               cases[k].options);
      if (!run(&o, b, script)) continue;
      for (int step = 0; step < 2; step++)
        expect(&o, b, step, "p", "|->2", VALUES(cases[k].want[step][0], cases[k].want[step][1]),
               1e-12);
    }
  /* AdamW: p -= lr * weight_decay * p first, then the same step */
  BOTH {
    if (!run(&o, b,
             "let q = {q = [1.0; -2.0]}\n"
             "backprop (sum (q *. q))\n"
             "adam (sum (q *. q)) ~learning_rate:0.1 ~weight_decay:0.5 ~decoupled:true\n"
             "print q\n"))
      continue;
    expect(&o, b, 0, "q", "|->2", VALUES(0.85, -1.8), 1e-8);
  }
  /* ~decay_matrices_only: the 1x2 matrix w decays (0.95 w, then the step of 0.1 against the
   * gradient's sign), the 1-axis b does not (0.5 - 0.1, where decay would give 0.375) */
  BOTH {
    if (!run(&o, b,
             "let w = {w = [(1.0, -2.0)]}\n"
             "let c = {c = [0.5]}\n"
             "let loss = sum (w *. w) + sum (c *. c)\n"
             "backprop loss\n"
             "adam loss ~learning_rate:0.1 ~weight_decay:0.5 ~decoupled:true "
             "~decay_matrices_only:true\n"
             "print w\nprint c\n"))
      continue;
    expect(&o, b, 0, "w", "|2->1", VALUES(0.85, -1.8), 1e-8);
    expect(&o, b, 1, "c", "|->1", VALUES(0.4), 1e-8);
  }
  CHECK_HAS(run_error("let p = {p = [1.0]}\nadam p ~learning_rate:0.1 ~beta1:1\n"),
            "seed.cnl:2:1: adam_update: beta1 1 and beta2 0.999 must lie in [0, 1)");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nadam p ~learning_rate:0.1 ~beta1:true\n"),
            "seed.cnl:2:34: expected a number, found a boolean");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nsgd p ~learning_rate:0.1 ~momentum:true\n"),
            "seed.cnl:2:36: expected a number, found a boolean");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nsgd p ~learning_rate:0.1 ~nesterov:1\n"),
            "seed.cnl:2:36: expected a boolean, found a number");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nsgd p ~learning_rate:0.1 ~clip:true\n"),
            "seed.cnl:2:32: expected a number, found a boolean");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nadam p ~learning_rate:0.1 ~clip:0\n"),
            "seed.cnl:2:1: clip_grad_norm: max norm 0 must be positive");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nadam p ~learning_rate:0.1 ~decay_matrices_only:1\n"),
            "expected a boolean, found a number");
}

/* sgd ~clip: gradients 2p = [2; -4] and 2w = [6] of global norm sqrt(56), scaled by
 * s = 1 / (sqrt(56) + 1e-6) at ~clip:1 (p's own norm alone would give 1 / (sqrt(20) + 1e-6)),
 * unscaled at ~clip:100. */
static void test_clip(void) {
  outcome o;
  double s = 1 / (sqrt(56) + 1e-6);
  const struct {
    const char *clip;
    double p[2], w;
  } cases[] = {{"1.0", {1 - 2 * s, -2 + 4 * s}, 3 - 6 * s}, {"100", {-1, 2}, -3}};
  char script[300];
  for (int k = 0; k < 2; k++) BOTH {
      snprintf(script, sizeof script,
               "let p = {p = [1.0; -2.0]}\n"
               "let w = {w = [3.0]}\n"
               "let loss = sum (p *. p) + sum (w *. w)\n"
               "backprop loss\n"
               "sgd loss ~learning_rate:1.0 ~clip:%s\n"
               "print p\nprint w\n",
               cases[k].clip);
      if (!run(&o, b, script)) continue;
      expect(&o, b, 0, "p", "|->2", VALUES(cases[k].p[0], cases[k].p[1]), 1e-12);
      expect(&o, b, 1, "w", "|->1", VALUES(cases[k].w), 1e-12);
    }
}

/* ---- print and printf ------------------------------------------------------------------------ */

static void test_printf(void) {
  char *t = output("print \"hello\"\n"
                   "let name = \"world\"\n"
                   "print name\n"
                   "printf \"%d|%5.2f|%-4s|%b|%%|%+.3e|%03d\\n\" 3 2.5 \"ab\" true 1234.5 7\n"
                   "printf \"%d %g\\n\" (-7 mod 3) (7.5 mod 2)\n"
                   "printf \"no newline\"\n"
                   "printf \"\\n%.3f %d\\n\" (sum [1.0; 2.0]) 2.6\n",
                   false, 0);
  CHECK_STR(t, "hello\nworld\n3| 2.50|ab  |true|%|+1.234e+03|007\n-1 1.5\nno newline\n3.000 3\n");
  free(t);
  /* loop indices, host arithmetic on them, and a tensor computed at each step */
  BOTH {
    t = output("let p = {p = 4.0}\n"
               "let loss = p *. p\n"
               "for step = 0 to 2 do\n"
               "  backprop loss\n"
               "  sgd loss ~learning_rate:0.25\n"
               "  printf \"step %d of %d: p %g loss %g\\n\" (step + 1) 3 p loss\n"
               "done\n",
               false, b);
    /* p: 4 -> 2 -> 1 -> 0.5; printf computes loss = p^2 after the update */
    CHECK_STR(t,
              "step 1 of 3: p 2 loss 4\nstep 2 of 3: p 1 loss 1\nstep 3 of 3: p 0.5 loss 0.25\n");
    free(t);
  }
  t = output("print \"a\\\"b\"\nprintf \"%d\\n\" 4\nprint 1.0\n", true, 0);
  CHECK_STR(t, "{\"text\": \"a\\\"b\\n\"}\n{\"text\": \"4\\n\"}\n"
               "{\"label\": \"1\", \"batch\": [], \"input\": [], \"output\": [1], "
               "\"values\": [1]}\n");
  free(t);
  static const struct {
    const char *script, *message;
  } errors[] = {
      {"printf \"%d\\n\" \"x\"\n",
       "seed.cnl:1:15: the conversion '%d' expects a number, found a string"},
      {"printf \"%s\\n\" 1\n",
       "seed.cnl:1:15: the conversion '%s' expects a string, found a number"},
      {"printf \"%b\\n\" 1\n",
       "seed.cnl:1:15: the conversion '%b' expects a boolean, found a number"},
      {"printf \"%f\\n\" [1.0; 2.0]\n",
       "seed.cnl:1:15: printf prints one value: \"literal\" (#1) has 2 cells"},
      {"let i = static_index 2\nprintf \"%d\\n\" i\n",
       "seed.cnl:2:15: the static index 'i' has a value only inside a loop over it"},
      {"let x = [| 1.0; 2.0 |]\nfor i = 0 to 1 do printf \"%f\\n\" (x @| (i + 0)) done\n",
       "seed.cnl:2:34: this tensor would keep the value the loop's index has now: read the index "
       "as a tensor with !@"},
  };
  for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
    CHECK_HAS(run_error(errors[i].script), errors[i].message);
}

/* ---- if and mod ------------------------------------------------------------------------------ */

static void test_if(void) {
  BOTH {
    char *t = output("for i = 0 to 6 do\n"
                     "  if i mod 3 = 0 then\n"
                     "    printf \"%d fizz\\n\" i\n"
                     "  else\n"
                     "    if i = 4 || i = 5 && not (i = 5) then printf \"%d four\\n\" i end\n"
                     "  end\n"
                     "  if i > 5 then print \"last\" end\n"
                     "done\n"
                     "if 2 < 1 then print \"no\" else print \"yes\" end\n"
                     "if true then end\n",
                     false, b);
    CHECK_STR(t, "0 fizz\n3 fizz\n4 four\n6 fizz\nlast\nyes\n");
    free(t);
  }
  /* a branch first taken late elaborates its statement then (a tensor printed from it) */
  outcome o;
  BOTH {
    if (!run(&o, b,
             "let x = [| [1.0]; [2.0]; [3.0] |]\n"
             "for i = 0 to 2 do\n"
             "  if i >= 1 then print ((x @| i) *. !@i) end\n"
             "done\n"
             "print ([5.0; -7.0] mod [3.0; 4.0])\n"))
      continue;
    CHECK_INT(o.n, 3);
    expect(&o, b, 0, NULL, "|->1", VALUES(2), 0);
    expect(&o, b, 1, NULL, "|->1", VALUES(6), 0);
    expect(&o, b, 2, NULL, "|->2", VALUES(2, 1), 0); /* floored: -7 mod 4 is 1 */
  }
  CHECK_HAS(run_error("let x = [1.0]\nif x then print x end\n"),
            "seed.cnl:2:4: the condition is a tensor: if tests a boolean computed on the host");
  CHECK_HAS(run_error("if 1 then print 1 end\n"), "seed.cnl:1:4: the condition is a number");
  CHECK_HAS(run_error("let i = static_index 3\nif i = 0 then print 1 end\n"),
            "seed.cnl:2:4: the static index 'i' has a value only inside a loop over it");
  CHECK_HAS(run_error("printf \"%d\" (1 mod 0)\n"), "seed.cnl:1:16: division by zero");
  /* a statement in a loop builds its tensors and options once: an if expression choosing them
   * by the loop's index would keep the first iteration's choice */
  CHECK_HAS(run_error("let a = [1.0]\nlet b = [2.0]\n"
                      "for i = 0 to 2 do print (if i = 0 then a else b) done\n"),
            "seed.cnl:3:26: this value would keep the value the loop's index has now");
  CHECK_HAS(run_error("let p = {p = [1.0]}\nlet loss = sum (p *. p)\nfor i = 0 to 2 do\n"
                      "  backprop loss\n  sgd loss ~learning_rate:(if i = 0 then 0.0 else 1.0)\n"
                      "done\n"),
            "seed.cnl:5:28: this value would keep the value the loop's index has now");
}

/* ---- progress -------------------------------------------------------------------------------- */

static void test_progress(void) {
  const char *script = "let p = {p = 4.0}\n"
                       "let loss = p *. p\n"
                       "for step = 0 to 19 progress ~loss:loss do\n"
                       "  backprop loss\n"
                       "  sgd loss ~learning_rate:0.25\n"
                       "done\n"
                       "for epoch = 0 to 2 progress ~batch_size:8 do\n"
                       "done\n";
  BOTH {
    char *text = output(script, false, b), *t = without_times(text);
    /* a line at the end of each tenth (2 steps); the loss as backprop last computed it: p
     * halves at each step, so after step k (k = 1..) the loss is 16 / 4^(k - 1) */
    CHECK_STR(t, "step 2/20 (10%) loss 4\n"
                 "step 4/20 (20%) loss 0.25\n"
                 "step 6/20 (30%) loss 0.015625\n"
                 "step 8/20 (40%) loss 0.00097656\n"
                 "step 10/20 (50%) loss 6.1035e-05\n"
                 "step 12/20 (60%) loss 3.8147e-06\n"
                 "step 14/20 (70%) loss 2.3842e-07\n"
                 "step 16/20 (80%) loss 1.4901e-08\n"
                 "step 18/20 (90%) loss 9.3132e-10\n"
                 "step 20/20 (100%) loss 5.8208e-11\n"
                 "epoch 1/3 (33%)\n"
                 "epoch 2/3 (66%)\n"
                 "epoch 3/3 (100%)\n");
    CHECK_HAS(text, " steps/s | ETA ");
    CHECK_HAS(text, "epoch 3/3 (100%) | ");
    CHECK_HAS(text, " samples/s | in ");
    /* at the first step the rate and the time left are not known yet: its time holds the
     * compilation of the body (the first Fashion batch showed "ETA 1441s") */
    CHECK_HAS(text, "epoch 1/3 (33%) | ? samples/s | ETA ?\n");
    CHECK_HAS(text, "epoch 2/3 (66%) | ");
    CHECK(!strstr(text, "epoch 2/3 (66%) | ?"));
    free(t);
    free(text);
  }
  char *first = output("for k = 0 to 1 progress do done\n", true, 0);
  CHECK_HAS(first, "{\"progress\": \"k\", \"step\": 1, \"total\": 2, \"rate\": null, "
                   "\"eta_s\": null}\n");
  CHECK_HAS(first, "\"step\": 2, \"total\": 2, \"rate\": ");
  free(first);
  char *json = output("for k = 0 to 0 progress do done\n", true, 0);
  CHECK_HAS(json, "{\"progress\": \"k\", \"step\": 1, \"total\": 1, \"rate\": ");
  CHECK_HAS(json, ", \"elapsed_s\": ");
  free(json);
  /* a body's print comes before the line of its step */
  char *t = output("for k = 0 to 1 progress do print \"x\" done\n", false, 0),
       *cut = without_times(t);
  CHECK_STR(cut, "x\nk 1/2 (50%)\nx\nk 2/2 (100%)\n");
  free(cut);
  free(t);
  CHECK_HAS(run_error("let p = {p = 1.0}\nfor k = 0 to 1 progress ~loss:(p *. 2) do done\n"),
            "seed.cnl:2:32: progress's ~loss \"mul\" (#4) is not computed by a statement");
  CHECK_HAS(run_error("let p = {p = [1.0; 2.0]}\nlet l = p *. p\n"
                      "for k = 0 to 1 progress ~loss:l do backprop l done\n"),
            "seed.cnl:3:31: progress's ~loss is a scalar: \"l\" (#3) has 2 cells");
  CHECK_HAS(run_error("for k = 0 to 1 progress ~batch_size:0 do done\n"),
            "seed.cnl:1:37: ~batch_size is at least 1");
}

/* ---- Static indices outside their loops --------------------------------------------------------
 */

static void test_unbound_index(void) {
  const char *script = "let (moons, classes) = half_moons ~n:20 ~batch_size:10\n"
                       "let batch_n = static_index 2\n"
                       "let x = moons @| batch_n\n"
                       "let loss = mean x\n"
                       "for batch_n = 0 to 1 do\n"
                       "  print loss\n"
                       "done\n"
                       "print loss\n";
  CHECK_STR(run_error(script),
            "seed.cnl:8:1: `print loss` reads the static index 'batch_n' (declared at line 2, "
            "column 15), which is bound only inside the loop `for batch_n = 0 to 1` at line 5, "
            "column 1\nprint loss\n^");
  CHECK_HAS(run_error("let i = static_index 2\nlet x = [| 1.0; 2.0 |]\nlet s = sum (x @| i)\n"
                      "print s\n"),
            "seed.cnl:4:1: `print s` reads the static index 'i' (declared at line 1, column 9), "
            "which no loop has bound: read it in the body of `for i = ... do ... done`");
}

/* ---- Syntax ---------------------------------------------------------------------------------- */

static void test_syntax_errors(void) {
  static const struct {
    const char *script, *message;
  } cases[] = {
      {"printf x\n",
       "seed.cnl:1:8: expected a format string after printf (as in printf \"step %d\\n\" "
       "i), found 'x'"},
      {"printf \"a %q\" 1\n",
       "seed.cnl:1:11: unknown printf conversion '%q' (the conversions are %d %i %f %F %e %E %g "
       "%G %s %b, with flags -+ 0#, a width and a .precision; %% is a percent sign)"},
      {"printf \"\\t%5\"\n", "seed.cnl:1:11: the format ends inside the conversion '%5'"},
      {"printf \"x\\\n    %d %d\\n\" 1\n",
       "seed.cnl:2:8: the conversion '%d' has no argument (printf takes one argument per "
       "conversion, after the format)"},
      {"printf \"%d\\n\" 1 2\n",
       "seed.cnl:1:17: printf's format has 1 conversion: this argument has none"},
      {"printf \"%#d\" 1\n", "seed.cnl:1:9: the flag '#' does not apply to %d"},
      {"printf \"%0s\" \"a\"\n", "seed.cnl:1:9: the flag '0' does not apply to %s"},
      {"printf \"%100d\" 1\n",
       "seed.cnl:1:9: the width and precision of '%100d' have at most two digits"},
      {"if x print x end\n", "seed.cnl:1:6: expected 'then' after the condition, found 'print'"},
      {"if x then\n  print x\n",
       "seed.cnl:2:10: expected 'else' or 'end' to close the 'if' at line "
       "1, column 1, found end of input"},
      {"if x then print x else print y else print z end\n",
       "seed.cnl:1:32: expected 'end' to close the 'if' at line 1, column 1, found 'else' (a "
       "reserved word)"},
      {"for i = 0 to 1 do if x then print x done\n",
       "seed.cnl:1:37: expected 'else' or 'end' to close the 'if' at line 1, column 19, found "
       "'done'"},
      {"if x then let y = 1 end\n",
       "seed.cnl:1:11: an if body holds print, printf, backprop, run, sgd, adam, shuffle, "
       "checkpoint, save_npy, plot, if and for statements: bind names and set the seed before the "
       "if"},
      {"print x end\n",
       "seed.cnl:1:9: unexpected 'end' (a reserved word) after the end of the statement"},
      {"for i = 0 to 1 progress ~los:l do done\n",
       "seed.cnl:1:25: unknown progress argument '~los', did you mean '~loss'? (progress takes "
       "~loss and ~batch_size)"},
      {"for i = 0 to 1 progress ~loss do done\n",
       "seed.cnl:1:25: '~loss' needs a value: ~loss:VALUE"},
      {"for i = 0 to 1 progress print x\n",
       "seed.cnl:1:25: expected 'do' after progress and its options, found 'print'"},
      {"adam l\n", "seed.cnl:1:1: adam needs ~learning_rate:VALUE"},
      {"adam l ~learning_rate:0.1 ~momentum:0.9\n",
       "seed.cnl:1:27: unknown adam argument '~momentum' (adam takes ~learning_rate, ~beta1, "
       "~beta2, ~eps, ~weight_decay, ~decoupled, ~clip and ~decay_matrices_only)"},
      {"sgd l ~learning_rate:0.1 ~beta1:0.9\n",
       "seed.cnl:1:26: unknown sgd argument '~beta1' (sgd takes ~learning_rate, ~momentum, "
       "~weight_decay, ~nesterov and ~clip)"},
      {"let mod = 1\n", "seed.cnl:1:5: expected a name after 'let', found 'mod' (a reserved word)"},
      {"let progress = 1\n",
       "seed.cnl:1:5: expected a name after 'let', found 'progress' (a reserved word)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *msg = run_error(cases[i].script);
    CHECK_MSG(strncmp(msg, cases[i].message, strlen(cases[i].message)) == 0,
              "case %zu: %s\nwant: %s", i, msg, cases[i].message);
  }
  /* the caret is under the position */
  CHECK_STR(run_error("printf \"ab%y\"\n"),
            "seed.cnl:1:11: unknown printf conversion '%y' (the conversions are %d %i %f %F %e "
            "%E %g %G %s %b, with flags -+ 0#, a width and a .precision; %% is a percent "
            "sign)\nprintf \"ab%y\"\n          ^");
}

/* The new forms print canonically, and the printed text parses back to the same text. */
static void test_printing(void) {
  static const struct {
    const char *text, *printed;
  } cases[] = {
      {"for i = 0 to 9 progress ~batch_size:(2 * 4) ~loss:l do if i mod 2 = 0 && i > 0 then "
       "printf \"%d\\t%.2f%%\\n\" (i + 1) l else if not b then print \"odd\" end end done",
       "for i = 0 to 9 progress ~loss:l ~batch_size:(2 * 4) do\n"
       "  if ((i mod 2) = 0) && (i > 0) then\n"
       "    printf \"%d\\t%.2f%%\\n\" (i + 1) l\n"
       "  else\n"
       "    if not b then\n"
       "      print \"odd\"\n"
       "    end\n"
       "  end\n"
       "done\n"},
      {"adam (f x) ~decoupled:true ~learning_rate:0.1 ~eps:1e-6;; if c then end",
       "adam f x ~learning_rate:0.1 ~eps:1e-06 ~decoupled:true\nif c then\nend\n"},
      {"sgd l ~clip:1.0 ~learning_rate:0.1;; adam l ~decay_matrices_only:true ~clip:2 "
       "~learning_rate:0.1",
       "sgd l ~learning_rate:0.1 ~clip:1.0\nadam l ~learning_rate:0.1 ~clip:2 "
       "~decay_matrices_only:true\n"},
  };
  cn_ctx *ctx = cn_ctx_create();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cn_nt_program *prog = cn_nt_parse_program(ctx, "p.cnl", cases[i].text);
    CHECK_MSG(prog != NULL, "%s", cn_ctx_error(ctx));
    if (!prog) continue;
    cn_sbuf sb = {0}, again = {0};
    cn_nt_print_program(&sb, prog);
    CHECK_STR(sb.data, cases[i].printed);
    cn_nt_program *reparsed = sb.data ? cn_nt_parse_program(ctx, "q.cnl", sb.data) : NULL;
    CHECK(reparsed != NULL);
    if (reparsed) cn_nt_print_program(&again, reparsed);
    CHECK_STR(again.data, sb.data);
    cn_sbuf_free(&sb);
    cn_sbuf_free(&again);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Memory ---------------------------------------------------------------------------------- */

/* The arena after a loop of `steps` iterations that branches, prints text and formats values
 * (a branch first taken near the end elaborates its statement there), with progress lines. */
static size_t arena_after(int steps) {
  char script[1024];
  snprintf(script, sizeof script,
           "let p = {p = 2.0}\n"
           "let loss = p *. p\n"
           "for i = 0 to %4d progress ~loss:loss do\n"
           "  backprop loss\n"
           "  if i mod 2 = 0 then printf \"%%d %%.3f\\n\" (i + 1) loss else print \"odd\" end\n"
           "  if i = %4d then printf \"%%g\\n\" (loss *. 2) end\n"
           "  for j = 0 to 1 do if j = 1 then printf \"%%d\" j end done\n"
           "done\n",
           steps - 1, steps - 2);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
  cn_status st = cn_notation_run(g, "arena.cnl", script, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%d steps: %s", steps, cn_ctx_error(ctx));
  size_t bytes = st == CN_OK ? cn_arena_bytes(&ctx->arena) + cn_arena_mark(&ctx->arena).used : 0;
  free(text);
  cn_ctx_destroy(ctx);
  return bytes;
}

static void test_memory(void) {
  size_t few = arena_after(10), many = arena_after(1000);
  CHECK(few > 0);
  CHECK_MSG(many == few, "the arena stands at %zu bytes after 1000 steps, %zu after 10", many, few);
}

int main(void) {
  test_builtins();
  test_bad_labels();
  test_adam();
  test_clip();
  test_printf();
  test_if();
  test_progress();
  test_unbound_index();
  test_syntax_errors();
  test_printing();
  test_memory();
  CHECK_DONE();
}
