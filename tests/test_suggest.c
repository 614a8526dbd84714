/* Suggestions for misspelled names (issue 31): the edit-distance helper (cn_suggest_names, the
 * helper of every message below), then each kind of unknown name with its exact message: a
 * function, a name, a labeled argument of a let%op function, of a builtin and of a statement
 * (adam's ~learning_rat at its own column), a --set name, a context option and its values, an
 * environment variable's value, a schedule pass, a Tile dim and function, an unbound stride name
 * of an einsum spec; and the messages that name the axes as the user wrote them: pointwise
 * operands that cannot broadcast, by position and by label, and open shapes printed with ... and
 * ?; the warning at the end of a run that printed a NaN or an infinity (once, on its own
 * stream, the status unchanged); the note of a restore asked to resume without a checkpoint. The
 * command line's suggestions are tests/test_cli.c's. */
#define _POSIX_C_SOURCE 200809L /* setenv, open_memstream */
#include "check.h"

#include "cannl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *suggest(const char *word, int n, const char *const *known) {
  static char out[400];
  return cn_suggest_names(word, n, known, out, sizeof out);
}

static void test_helper(void) {
  const char *const fns[] = {"sigmoid", "softmax", "sin", "sign", "relu", "exp", "sqrt"};
  /* a transposition is one edit */
  CHECK_STR(suggest("sigmiod", 7, fns), ", did you mean 'sigmoid'?");
  /* nothing close: no suggestion; a word equal to a known name suggests nothing */
  CHECK_STR(suggest("frob", 7, fns), "");
  CHECK_STR(suggest("relu", 7, fns), "");
  /* a one-letter word is never "corrected" into another one */
  const char *const letters[] = {"x", "y", "z"};
  CHECK_STR(suggest("w", 3, letters), "");
  /* the closest first, ties in byte order, at most three, the same name once; "sing" is two
   * edits from "sigh", more than a third of four letters */
  const char *const many[] = {"sing", "sinh", "sin", "sig", "sign", "sinh"};
  CHECK_STR(suggest("sigh", 6, many), ", did you mean 'sig', 'sign' or 'sinh'?");
  CHECK_STR(suggest("sinhh", 6, many), ", did you mean 'sinh'?");
  const char *const two[] = {"beta2", "beta1"};
  CHECK_STR(suggest("beta", 2, two), ", did you mean 'beta1' or 'beta2'?");
  /* the bound: a third of the longer name (at least 1) */
  const char *const long_names[] = {"learning_rate", "weight_decay"};
  CHECK_STR(suggest("learnin_rat", 2, long_names), ", did you mean 'learning_rate'?");
  CHECK_STR(suggest("rate", 2, long_names), "");
  /* names past 127 bytes: compared by their first 127 and the difference of their lengths */
  char long_word[201], long_name[201];
  memset(long_word, 'a', 200);
  memset(long_name, 'a', 200);
  long_word[200] = long_name[200] = '\0';
  long_word[5] = 'b';
  const char *const long_known[] = {long_name};
  const char *hint = suggest(long_word, 1, long_known);
  CHECK(strncmp(hint, ", did you mean 'aaaaa", 21) == 0 && strlen(hint) == 15 + 102 + 1);
  /* the output is cut to its size, never overflowed */
  char small[8];
  CHECK_STR(cn_suggest_names("sigmiod", 7, fns, small, sizeof small), ", did y");
}

/* The first line of the message of a script that fails (its position and text), "" if it ran. */
static const char *script_error(const char *text, const char *const *sets, int n_sets) {
  static char line[1024];
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *devnull = fopen("/dev/null", "w");
  cn_notation_options opts = {
      .backend = CN_BACKEND_INTERP, .out = devnull, .err = devnull, .sets = sets, .n_sets = n_sets};
  line[0] = '\0';
  if (cn_notation_run(g, "t.cnl", text, &opts) != CN_OK)
    snprintf(line, sizeof line, "%.*s", (int)strcspn(cn_ctx_error(ctx), "\n"), cn_ctx_error(ctx));
  fclose(devnull);
  cn_ctx_destroy(ctx);
  return line;
}

static void test_script(void) {
  CHECK_STR(script_error("let x = sigmiod 3.0\n", NULL, 0),
            "t.cnl:1:9: unknown function 'sigmiod', did you mean 'sigmoid'?");
  /* a name the script binds is a candidate as well as the builtins */
  CHECK_STR(script_error("let%op double x = x + x\nprint (doubel 2.0)\n", NULL, 0),
            "t.cnl:2:8: unknown function 'doubel', did you mean 'double'?");
  CHECK_STR(script_error("let weights = 3.0\nprint weigths\n", NULL, 0),
            "t.cnl:2:7: unbound name 'weigths', did you mean 'weights'?");
  CHECK_STR(script_error("print nope\n", NULL, 0), "t.cnl:1:7: unbound name 'nope'");
  /* a labeled argument of a let%op function, at the label */
  CHECK_STR(script_error("let%op f x ~scale = x * scale\nprint (f 2.0 ~scael:3.0)\n", NULL, 0),
            "t.cnl:2:14: no parameter ~scael, did you mean '~scale'?");
  /* adam's misspelled option is named at its own column, not "adam needs ~learning_rate" */
  CHECK_STR(script_error("let%op loss = {w = 1.0} * {w}\nadam loss ~learning_rat:0.1\n", NULL, 0),
            "t.cnl:2:11: unknown adam argument '~learning_rat', did you mean '~learning_rate'? "
            "(adam takes ~learning_rate, ~beta1, ~beta2, ~eps, ~weight_decay, ~decoupled, ~clip "
            "and ~decay_matrices_only)");
  CHECK_STR(
      script_error("let%op loss = {w = 1.0} * {w}\nsgd loss ~learning_rate:0.1 ~momentun:0.9\n",
                   NULL, 0),
      "t.cnl:2:29: unknown sgd argument '~momentun', did you mean '~momentum'? (sgd takes "
      "~learning_rate, ~momentum, ~weight_decay, ~nesterov and ~clip)");
  /* a builtin's labeled argument */
  CHECK_STR(script_error("let d = dataset ~batch_sise:4 \"x.npy\"\n", NULL, 0),
            "t.cnl:1:17: dataset has no argument ~batch_sise, did you mean '~batch_size'? "
            "(~batch_size ~shuffle ~seed ~limit ~channels)");
  /* --set: a name close to a settable one */
  const char *const sets[] = {"rtae=2"};
  CHECK_STR(script_error("let rate = 1.0\nlet n = 3\nprint rate\n", sets, 1),
            "--set rtae=2: the script has no top-level let rtae = LITERAL (a number, boolean or "
            "string), did you mean 'rate'?; the names it can set: rate, n");
  /* Tile: a dim, a tensor and a function */
  CHECK_STR(script_error("let%tile f I = I.bind_dims(Size); O = TensorOutput(Szie); O[i] += "
                         "I[i]; return O\nprint f [1.0; 2.0]\n",
                         NULL, 0),
            "t.cnl:1:52: unknown dim 'Szie', did you mean 'Size'?");
  CHECK_STR(script_error("let%tile f Input = Input.bind_dims(N); O = TensorOutput(N); "
                         "O[i] += Inptu[i]; return O\nprint f [1.0; 2.0]\n",
                         NULL, 0),
            "t.cnl:1:69: unknown tensor 'Inptu', did you mean 'Input'?");
  CHECK_STR(script_error("let%tile f I = I.bind_dims(N); O = TensorOutput(N); O[i] += I[i]; "
                         "return sqtr(O)\nprint f [1.0; 2.0]\n",
                         NULL, 0),
            "t.cnl:1:74: unknown function 'sqtr', did you mean 'sqrt'? (sqrt, exp, log, sin, "
            "cos, tanh, sigmoid, pow, select)");
}

static void test_options(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "shedule", "all"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx),
            "unknown option 'shedule', did you mean 'schedule'? (known: cc, "
            "cflags, cache_dir, check, schedule, threads, parallel_work, exact, "
            "tune, interpret_below, random_seed, print_threshold, print_precision, backend, "
            "device_tile, reduce)");
  CHECK_INT(cn_ctx_set_option(ctx, "device_tiles", "auto"), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "unknown option 'device_tiles', did you mean 'device_tile'?");
  CHECK_INT(cn_ctx_set_option(ctx, "reduce", "lane"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx),
            "option reduce: unknown value 'lane', did you mean 'lanes'? (known: ordered, lanes)");
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "quik"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx),
            "option tune: unknown value 'quik', did you mean 'quick'? (known: off, cached, quick, "
            "full)");
  CHECK_INT(cn_ctx_set_option(ctx, "check", "nann"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx),
            "option check: unknown value 'nann', did you mean 'nan'? (known: nan, off)");
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "order,fuze"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "schedule 'order,fuze': unknown pass 'fuze', did you mean 'fuse'? "
                               "(known: all, none, fill, virtual, gemm, order, fuse, tile, marks, "
                               "jam)");
  cn_ctx_destroy(ctx);
}

/* A value outside an environment variable's fixed list is an error naming it, not ignored. */
static void test_environment(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *devnull = fopen("/dev/null", "w");
  cn_notation_options opts = {.backend = CN_BACKEND_C, .out = devnull};
  CHECK_INT(cn_ctx_set_option(ctx, "interpret_below", "0"), CN_OK); /* compiled as C */
  static const struct {
    const char *variable, *value, *script, *message;
  } cases[] = {
      {"CANNL_TUNE", "ful", "print ([1.0; 2.0] *. [3.0; 4.0])\n",
       "CANNL_TUNE: unknown value 'ful', did you mean 'full'? (known: off, cached, quick, full)"},
      {"CANNL_EXACT", "onn", "print ([1.0; 2.0] *. [5.0; 6.0])\n",
       "CANNL_EXACT: unknown value 'onn', did you mean 'on'? (known: on, off, 1, 0)"},
      {"CANNL_REDUCE", "orderd", "print ([1.0; 2.0] *. [7.0; 8.0])\n",
       "CANNL_REDUCE: unknown value 'orderd', did you mean 'ordered'? (known: ordered, lanes)"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    setenv(cases[k].variable, cases[k].value, 1);
    CHECK_INT(cn_notation_run(g, "t.cnl", cases[k].script, &opts), CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(ctx), cases[k].message);
    unsetenv(cases[k].variable);
  }
  fclose(devnull);
  cn_ctx_destroy(ctx);
}

/* Axes as the user wrote them: a position from the left in each operand (rows of different
 * lengths), a label when the axis has one; an open shape with ... and ?. */
static void test_axes(void) {
  CHECK_STR(script_error("let a = {x; o=[4; 3]}\nprint (a + [1.0; 2.0])\n", NULL, 0),
            "t.cnl:2:10: shape conflict in pointwise (operation #13 computing \"add\" (#13)): "
            "operands that cannot broadcast together: output axis 1 of \"a\" (#11) has size 3 and "
            "output axis 0 of \"literal\" (#12) size 2 (axes align from the right): output row of "
            "\"add\" (#13) vs output row of \"literal\" (#12)");
  CHECK_STR(
      script_error("let a = [1.0; 2.0; 3.0]\nlet b = ([1.0; 2.0] : rgb)\nprint (a + b)\n", NULL, 0),
      "t.cnl:3:10: shape conflict in pointwise (operation #3 computing \"add\" (#3)): "
      "operands that cannot broadcast together: output axis 0 of \"a\" (#1) has size 3 and "
      "output axis 'rgb' of \"b\" (#2) size 2 (axes align from the right): output row of "
      "\"add\" (#3) vs output row of \"b\" (#2)");
  CHECK_STR(script_error("let p = {v}\nprint p\n", NULL, 0),
            "t.cnl:1:9: shape inference: the number of input axes of parameter \"p\" (#11) is not "
            "determined: give its input dims (shape so far: |...->...; ... is any number of axes "
            "and ? a size, not decided yet) (found when line 2 needed the shapes)");
  CHECK_STR(script_error("let%op f x = x *. {v}\nlet y = f [1.0]\nprint y\n", NULL, 0),
            "t.cnl:1:19: shape inference: dimension 0 of the output row of parameter \"v\" (#11) "
            "is not determined: give it (shape so far: |...->?; ... is any number of axes and ? a "
            "size, not decided yet) (found when line 3 needed the shapes)");
}

/* The script's output and its warnings, each stream read back. */
static cn_status run_streams(const char *text, bool json, char **out, char **err) {
  size_t n_out, n_err;
  FILE *fo = open_memstream(out, &n_out), *fe = open_memstream(err, &n_err);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .json = json, .out = fo, .err = fe};
  cn_status st = cn_notation_run(g, "t.cnl", text, &opts);
  cn_ctx_destroy(ctx);
  fclose(fo);
  fclose(fe);
  return st;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

/* A NaN or an infinity printed, or a progress loss that is not finite, is said once at the end,
 * on the warnings' stream (not among the JSON lines), and the run still succeeds. */
static void test_warning(void) {
  char *out, *err;
  CHECK_INT(run_streams("let y = log [1.0; 0.0; -1.0]\nprint y\nprint y\n"
                        "printf \"%f\\n\" (sum (log [0.0]))\n",
                        false, &out, &err),
            CN_OK);
  CHECK_STR(err, "warning: the script printed a NaN or an infinity 3 times, first -inf in \"y\" "
                 "(#2) at t.cnl:2:7 (--check-nan, or the option check=nan, stops at the first "
                 "non-finite value a routine computes)\n");
  CHECK_INT(count(out, "warning"), 0);
  free(out);
  free(err);
  CHECK_INT(run_streams("let y = log [-1.0]\nprint y\n", true, &out, &err), CN_OK);
  CHECK_STR(err, "warning: the script printed a NaN or an infinity: nan in \"y\" (#2) at t.cnl:2:7 "
                 "(--check-nan, or the option check=nan, stops at the first non-finite value a "
                 "routine computes)\n");
  CHECK_INT(count(out, "warning"), 0);
  CHECK_INT(count(out, "\"label\": \"y\""), 1);
  free(out);
  free(err);
  /* a progress loss that became NaN: once, with the steps that showed it */
  CHECK_INT(run_streams("let%op loss = log ({w = 1.0} - 2.0)\n"
                        "for i = 0 to 3 progress ~loss:loss do\n  backprop loss\ndone\n",
                        true, &out, &err),
            CN_OK);
  CHECK_STR(err, "warning: the script showed a progress loss that is not finite 4 times, first nan "
                 "(step 1) at t.cnl:2:31 (--check-nan, or the option check=nan, stops at the first "
                 "non-finite value a routine computes)\n");
  CHECK_INT(count(out, "\"loss\": \"nan\""), 4);
  free(out);
  free(err);
  /* restore ~resume:true without a checkpoint yet: a note, and the run starts at epoch 0 */
  CHECK_INT(run_streams("let%op loss = {w = 1.0} * {w}\nlet start = restore "
                        "\"/nonexistent/c.safetensors\" loss ~optimizer:\"adam\" ~resume:true\n"
                        "printf \"%d\\n\" start\n",
                        false, &out, &err),
            CN_OK);
  CHECK_STR(out, "0\n");
  CHECK_STR(err, "t.cnl:2:21: note: restore: no checkpoint '/nonexistent/c.safetensors' to resume "
                 "from: the run starts at epoch 0\n");
  free(out);
  free(err);
  /* finite values: nothing */
  CHECK_INT(run_streams("print [1.0; 2.0]\n", false, &out, &err), CN_OK);
  CHECK_STR(err, "");
  free(out);
  free(err);
}

int main(void) {
  test_helper();
  test_script();
  test_options();
  test_environment();
  test_axes();
  test_warning();
  CHECK_DONE();
}
