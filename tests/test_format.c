/* The tensor printer's goldens (src/tensor/format.c), each derived by hand from the layout rules
 * of docs/notation.md "Output": vectors on one line (wrapped at 80 columns), matrices as grids,
 * batches and further axes as blocks, labeled axes as headers, elision past the threshold in
 * both directions (exactly at it nothing is elided), the precision (option, per call, per
 * statement), `print ~full:true`, decimal points aligned with negative numbers, NaN and
 * infinities, scientific notation, single precision's shortest digits, the options refused out
 * of range; a print of a tensor without forward code runs no routine; and a parameter whose
 * shape a print closed before any use gets a note when a later operation broadcasts it. */
#include "check.h"

#include "cannl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A data tensor of the given rows (NULL labels: none) in a double-precision graph. */
static cn_tensor *data(cn_graph *g, const char *label, cn_axes batch, cn_axes input, cn_axes output,
                       const double *v, int n) {
  cn_dims dims = {batch, input, output};
  return cn_tensor_data(g, label, &dims, v, n);
}

#define AXES(...)                                                                                  \
  (cn_axes) {                                                                                      \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, NULL      \
  }
#define NONE ((cn_axes){0, NULL, NULL})

static double *iota(int n) {
  double *v = malloc(sizeof *v * (size_t)n);
  for (int i = 0; i < n; i++) v[i] = i;
  return v;
}

/* The grid of t with the context's options, and with threshold / precision given. */
static const char *grid(cn_tensor *t) {
  return t ? cn_tensor_format(t, false, false) : NULL;
}
static const char *grid_with(cn_tensor *t, int64_t threshold, int precision) {
  cn_print_options o = {.threshold = threshold, .precision = precision};
  return t ? cn_tensor_format_with(t, false, &o) : NULL;
}

static void test_vectors_and_matrices(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  /* integral parts 2 wide ("-2"), fractions 2 (".5"): 1 and 3 are padded where the point goes */
  cn_tensor *v = data(g, "v", NONE, NONE, AXES(3), (double[]){1, -2.5, 3}, 3);
  CHECK_STR(grid(v), "\"v\" (#1) |->3\n 1    -2.5   3\n");
  /* a matrix 2x3 (rows the output axis): NaN and infinities right-aligned to the cell width 5
   * (" 0.25": integral 2 for "10", fraction 3) */
  double nan = NAN, inf = INFINITY;
  cn_tensor *m = data(g, "m", NONE, AXES(3), AXES(2), (double[]){1, nan, -inf, 0.25, 10, inf}, 6);
  CHECK_STR(grid(m), "\"m\" (#2) |3->2\n"
                     " 1       nan   -inf\n"
                     " 0.25  10       inf\n");
  /* a scalar */
  CHECK_STR(grid(data(g, "s", NONE, NONE, NONE, (double[]){2.5}, 1)), "\"s\" (#3) |->\n2.5\n");
  /* 30 cells of width 2: 20 fit in 80 columns (2 + 19 * 4 = 78), the rest wrap */
  double *v30 = iota(30);
  CHECK_STR(grid(data(g, "w", NONE, NONE, AXES(30), v30, 30)),
            "\"w\" (#4) |->30\n"
            " 0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15  16  17  18  19\n"
            "20  21  22  23  24  25  26  27  28  29\n");
  free(v30);
  /* scientific: the smallest magnitude is below 1e-4; one mantissa digit count for both */
  CHECK_STR(grid(data(g, "e", NONE, NONE, AXES(2), (double[]){1e-5, 2.5e-5}, 2)),
            "\"e\" (#5) |->2\n1.0e-05  2.5e-05\n");
  /* more than 1e3 apart, not integral: scientific too; integral values stay integers */
  CHECK_STR(grid(data(g, "r", NONE, NONE, AXES(2), (double[]){0.5, 5000}, 2)),
            "\"r\" (#6) |->2\n5e-01  5e+03\n");
  CHECK_STR(grid(data(g, "i", NONE, NONE, AXES(2), (double[]){1, 5000}, 2)),
            "\"i\" (#7) |->2\n   1  5000\n");
  cn_ctx_destroy(ctx);
}

static void test_blocks(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  double *v = iota(24);
  /* numpy's np.arange(24.).reshape(2, 3, 4): a block per batch cell, cells 2 wide */
  CHECK_STR(grid(data(g, "a", AXES(2), NONE, AXES(3, 4), v, 24)), "\"a\" (#1) 2|->3,4\n"
                                                                  "[0, :, :]\n"
                                                                  " 0   1   2   3\n"
                                                                  " 4   5   6   7\n"
                                                                  " 8   9  10  11\n"
                                                                  "[1, :, :]\n"
                                                                  "12  13  14  15\n"
                                                                  "16  17  18  19\n"
                                                                  "20  21  22  23\n");
  /* 4-D, memory order (batch 2, output 2, output 3, input 2): the last output axis against the
   * input axis, blocks over the batch and the first output axis */
  CHECK_STR(grid(data(g, "b", AXES(2), AXES(2), AXES(2, 3), v, 24)), "\"b\" (#2) 2|2->2,3\n"
                                                                     "[0, 0, :, :]\n"
                                                                     " 0   1\n 2   3\n 4   5\n"
                                                                     "[0, 1, :, :]\n"
                                                                     " 6   7\n 8   9\n10  11\n"
                                                                     "[1, 0, :, :]\n"
                                                                     "12  13\n14  15\n16  17\n"
                                                                     "[1, 1, :, :]\n"
                                                                     "18  19\n20  21\n22  23\n");
  /* a batch of vectors: each block on one line after its header */
  CHECK_STR(grid(data(g, "c", AXES(3), NONE, AXES(2), v, 6)),
            "\"c\" (#3) 3|->2\n[0, :]  0  1\n[1, :]  2  3\n[2, :]  4  5\n");
  /* batch axes only: they make the grid */
  CHECK_STR(grid(data(g, "d", AXES(2, 2), NONE, NONE, v, 4)), "\"d\" (#4) 2,2|->\n0  1\n2  3\n");
  free(v);
  cn_ctx_destroy(ctx);
}

static void test_labels(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_axes in = {1, (int64_t[]){3}, (const char *const[]){"in"}};
  cn_axes out = {1, (int64_t[]){2}, (const char *const[]){"out"}};
  /* the corner "out\in" is 6 wide; the row indices right-aligned under it */
  CHECK_STR(grid(data(g, "m", NONE, in, out, (double[]){1, 2, 3, 4, 5, 6}, 6)),
            "\"m\" (#1) |3:in->2:out\n"
            "out\\in  0  1  2\n"
            "     0  1  2  3\n"
            "     1  4  5  6\n");
  /* a labeled vector: its indices on a line above the values, after the label */
  cn_axes rgb = {1, (int64_t[]){3}, (const char *const[]){"rgb"}};
  CHECK_STR(grid(data(g, "c", NONE, NONE, rgb, (double[]){1, 2, 3}, 3)),
            "\"c\" (#2) |->3:rgb\nrgb  0  1  2\n     1  2  3\n");
  /* a labeled block axis is named in its block's header */
  cn_axes pair = {1, (int64_t[]){2}, (const char *const[]){"p"}};
  CHECK_STR(grid(data(g, "b", pair, NONE, AXES(2), (double[]){1, 2, 3, 4}, 4)),
            "\"b\" (#3) 2:p|->2\n[p=0, :]  1  2\n[p=1, :]  3  4\n");
  cn_ctx_destroy(ctx);
}

static void test_elision(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  double *v = iota(64);
  cn_tensor *line = data(g, "v", NONE, NONE, AXES(8), v, 8);
  /* exactly at the threshold nothing is elided; one over, the first and last 3 */
  CHECK_STR(grid_with(line, 8, 8), "\"v\" (#1) |->8\n0  1  2  3  4  5  6  7\n");
  CHECK_STR(grid_with(line, 7, 8), "\"v\" (#1) |->8\n0  1  2  ...  5  6  7\n");
  /* an axis of 6 is never elided */
  CHECK_STR(grid_with(data(g, "six", NONE, NONE, AXES(6), v, 6), 0, 8),
            "\"six\" (#2) |->6\n0  1  2  3  4  5\n");
  /* rows and columns: the widths are the shown cells' (63 is shown, so 2) */
  cn_tensor *m = data(g, "m", NONE, AXES(8), AXES(8), v, 64);
  CHECK_STR(grid_with(m, 63, 8), "\"m\" (#3) |8->8\n"
                                 " 0   1   2  ...   5   6   7\n"
                                 " 8   9  10  ...  13  14  15\n"
                                 "16  17  18  ...  21  22  23\n"
                                 "...\n"
                                 "40  41  42  ...  45  46  47\n"
                                 "48  49  50  ...  53  54  55\n"
                                 "56  57  58  ...  61  62  63\n");
  const char *whole = grid_with(m, 64, 8);
  CHECK(whole && !strstr(whole, "...") && strstr(whole, "\n24  25  26  27  28  29  30  31\n"));
  /* blocks */
  CHECK_STR(grid_with(data(g, "b", AXES(8), NONE, AXES(1), v, 8), 7, 8),
            "\"b\" (#4) 8|->1\n"
            "[0, :]  0\n[1, :]  1\n[2, :]  2\n...\n[5, :]  5\n[6, :]  6\n[7, :]  7\n");
  /* a labeled axis keeps its true indices around the gap */
  cn_axes in = {1, (int64_t[]){8}, (const char *const[]){"k"}};
  CHECK_STR(grid_with(data(g, "l", NONE, in, AXES(1), v, 8), 7, 8), "\"l\" (#5) |8:k->1\n"
                                                                    "\\k  0  1  2  ...  5  6  7\n"
                                                                    " 0  0  1  2  ...  5  6  7\n");
  /* the context's option; a negative threshold (~full:true) never elides */
  CHECK(cn_ctx_set_option(ctx, "print_threshold", "7") == CN_OK);
  CHECK_STR(grid(line), "\"v\" (#1) |->8\n0  1  2  ...  5  6  7\n");
  CHECK_STR(grid_with(line, -1, 8), "\"v\" (#1) |->8\n0  1  2  3  4  5  6  7\n");
  CHECK_STR(cn_ctx_option(ctx, "print_threshold"), "7");
  free(v);
  cn_ctx_destroy(ctx);
}

static void test_precision(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *t = data(g, "t", NONE, NONE, AXES(3), (double[]){0, 1.0 / 3, 2.0 / 3}, 3);
  /* default 8 digits; 3; 0 (rounded to integers) */
  CHECK_STR(grid(t), "\"t\" (#1) |->3\n0           0.33333333  0.66666667\n");
  CHECK_STR(grid_with(t, 1000, 3), "\"t\" (#1) |->3\n0      0.333  0.667\n");
  CHECK_STR(grid_with(t, 1000, 0), "\"t\" (#1) |->3\n0  0  1\n");
  CHECK(cn_ctx_set_option(ctx, "print_precision", "2") == CN_OK);
  CHECK_STR(grid(t), "\"t\" (#1) |->3\n0     0.33  0.67\n");
  /* refused: out of range, not a count */
  CHECK(cn_ctx_set_option(ctx, "print_precision", "18") == CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "option print_precision: '18' is not an integer in [0, 17]");
  CHECK(cn_ctx_set_option(ctx, "print_threshold", "-1") == CN_ERR_INVALID);
  CHECK(grid_with(t, 1000, 18) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "print precision 18 is not in [0, 17]");
  /* JSON ignores the precision, and the options: a bad variable stops only the grid */
  CHECK_HAS(cn_tensor_format(t, false, true), "0.33333333333333331");
  setenv("CANNL_PRINT_THRESHOLD", "many", 1);
  CHECK(grid(t) == NULL);
  CHECK_STR(cn_ctx_error(ctx),
            "CANNL_PRINT_THRESHOLD: 'many' is not an integer in [0, 9223372036854775807]");
  CHECK_HAS(cn_tensor_format(t, false, true), "0.33333333333333331");
  setenv("CANNL_PRINT_THRESHOLD", "2", 1);
  CHECK_STR(grid(t), "\"t\" (#1) |->3\n0     0.33  0.67\n"); /* an axis of 3 is not elided */
  CHECK_STR(cn_ctx_option(ctx, "print_threshold"), "2");
  unsetenv("CANNL_PRINT_THRESHOLD");
  cn_ctx_destroy(ctx);
  /* single precision: the fewest digits that give the float back, 0.1 and not 0.10000000149 */
  ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_SINGLE);
  CHECK_STR(grid(data(g, "f", NONE, NONE, AXES(3), (double[]){0.1, 1.0 / 3, -2}, 3)),
            "\"f\" (#1) |->3\n 0.1          0.33333334  -2\n");
  cn_ctx_destroy(ctx);
}

/* The warnings of the context's log, one per line. */
static char warnings[4096];
static void on_log(void *user, cn_log_level level, const char *message) {
  (void)user;
  if (level >= CN_LOG_WARN && strlen(warnings) + strlen(message) + 2 < sizeof warnings)
    strcat(strcat(warnings, message), "\n");
}

/* A script's printout and the routines it ran; its warnings in `warnings`. */
static const char *script(const char *text, uint64_t *runs) {
  static char printed[4096];
  cn_ctx *ctx = cn_ctx_create();
  warnings[0] = '\0';
  cn_ctx_set_log(ctx, on_log, NULL, CN_LOG_WARN);
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
  cn_status st = cn_notation_run(g, "p.cnl", text, &opts);
  fclose(out);
  snprintf(printed, sizeof printed, "%s", st == CN_OK ? buf : cn_ctx_error(ctx));
  if (runs) *runs = cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS);
  free(buf);
  cn_ctx_destroy(ctx);
  return printed;
}

static void test_statement(void) {
  CHECK_STR(script("print (range 8) ~full:true\nprint (range 2000) ~precision:1\n", NULL),
            "\"range\" (#2) |->8\n0  1  2  3  4  5  6  7\n"
            "\"range\" (#4) |->2000\n   0     1     2  ...  1997  1998  1999\n");
  CHECK_STR(script("print [0.25; 0.5] ~precision:1\n", NULL), "\"literal\" (#1) |->2\n0.2  0.5\n");
  CHECK_STR(script("print \"x\" ~full:true\n", NULL),
            "p.cnl:1:17: print's ~full and ~precision apply to a tensor\n"
            "print \"x\" ~full:true\n"
            "                ^");
  CHECK_HAS(script("print [1.0] ~precision:20\n", NULL),
            "p.cnl:1:24: print's ~precision is a count of digits in [0, 17], not 20");
  CHECK_HAS(script("print [1.0] ~precision:1 ~precision:2\n", NULL),
            "p.cnl:1:26: '~precision' is given twice");
  /* nothing to compute: no routine, in a loop neither; a parameter's init runs once */
  uint64_t runs = 99;
  CHECK_STR(script("let c = [1.0; 2.0]\nprint c\nfor i = 1 to 3 do print c done\n", &runs),
            "\"c\" (#1) |->2\n1  2\n\"c\" (#1) |->2\n1  2\n\"c\" (#1) |->2\n1  2\n"
            "\"c\" (#1) |->2\n1  2\n");
  CHECK_INT(runs, 0);
  CHECK_HAS(script("let y = {w = 1.0} + [1.0; 2.0]\nfor i = 1 to 3 do print w done\n", &runs),
            "\"w\" (#2) |->2\n1  1\n"); /* #1 its initializer */
  CHECK_INT(runs, 1);
  /* a tensor with forward code still computes it */
  CHECK_STR(script("let c = [1.0; 2.0]\nprint (c + c)\n", &runs), "\"add\" (#2) |->2\n2  4\n");
  CHECK_INT(runs, 1);
}

/* The docs' rule: a parameter must be used (or given its dims) before the first statement that
 * needs values. Broken, the parameter is closed to the fewest axes (here none) and a later
 * pointwise operation broadcasts it: one note, at that operation, naming the closing line. */
static void test_broadcast_note(void) {
  CHECK_STR(script("let y0 = {w = 1.0}\nprint w\nlet y = w + [1.0; 2.0; 3.0]\n"
                   "let z = w *. [1.0; 2.0]\nprint y\n",
                   NULL),
            "\"y0\" (#2) |->\n1\n\"y\" (#4) |->3\n2  3  4\n");
  CHECK_STR(warnings,
            "p.cnl:3:11: note: parameter \"y0\" (#2) of shape |-> is broadcast to |->3 here: its "
            "shape was closed for line 2, before anything used it (a parameter gets the fewest "
            "axes its uses need); use it or give its dims before that line if it should have "
            "more cells\n");
  /* used before the print: its use decides its shape, no note */
  CHECK_STR(script("let y0 = {w = 1.0}\nlet y = w + [1.0; 2.0; 3.0]\nprint w\n"
                   "let z = w + [1.0; 2.0; 3.0]\nprint z\n",
                   NULL),
            "\"y0\" (#2) |->3\n1  1  1\n\"z\" (#6) |->3\n2  3  4\n");
  CHECK_STR(warnings, "");
  /* a bias added over a batch after a print is broadcast as written: its use came first */
  CHECK_STR(script("let%op f x = x + {b = 0.5; o = [2]}\nlet h = f [1.0; 2.0]\nprint h\n"
                   "let k = f [| [1.0; 2.0]; [3.0; 4.0] |]\nprint k\n",
                   NULL),
            "\"h\" (#4) |->2\n1.5  2.5\n\"k\" (#6) 2|->2\n[0, :]  1.5  2.5\n[1, :]  3.5  4.5\n");
  CHECK_STR(warnings, "");
}

int main(void) {
  test_vectors_and_matrices();
  test_blocks();
  test_labels();
  test_elision();
  test_precision();
  test_statement();
  test_broadcast_note();
  CHECK_DONE();
}
