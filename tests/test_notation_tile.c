/* Tile functions in scripts (issue 7, `let%tile NAME PARAMS = BODY`; tile-edsl): defined in a
 * .cnl script, applied to tensors and integer dims, their results used by the rest of the
 * notation, on both backends with values worked out by hand: the seed's round-up max pool, a pool
 * whose stride is an argument, an average with an elementwise division by dims, skipping (cells
 * never written are 0), a cumulative sum differentiated by backprop, indices bounded only by a
 * constraint or jointly (differentiated too), the Tile library as
 * builtins, examples/tile.cnl, the loop nest shown by --emit=loops, and positioned errors inside
 * the body. */
#include "notation_check.h"

static const char *const max_pool = "let%tile max_pool_1d I =\n"
                                    "  I.bind_dims(N)\n"
                                    "  O = TensorOutput((N + 1) / 2)\n"
                                    "  O[i] >= I[2 * i + j]\n"
                                    "  O.add_constraint(j < 2)\n"
                                    "  return O\n";

/* tile-edsl's max_pool_1d with round-up: [1 5 2 3 9] -> [max(1,5) max(2,3) max(9)]. */
static void test_max_pool(void) {
  char script[1024];
  snprintf(script, sizeof script,
           "%slet x = [1.0; 5.0; 2.0; 3.0; 9.0]\nprint max_pool_1d x\n"
           "print max_pool_1d (x + !.1.0)\n", /* an argument whose shape closes later */
           max_pool);
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, "max_pool_1d_x", "|->3", VALUES(5, 3, 9), 0);
    expect(&o, b, 1, NULL, "|->3", VALUES(6, 4, 10), 0);
  }
}

/* A stride given as an integer argument: sums of consecutive groups of S, the last one short. */
static void test_dim_argument(void) {
  const char *script = "let%tile group_sum I S =\n"
                       "  I.bind_dims(N)\n"
                       "  O = TensorOutput((N + S - 1) / S)\n"
                       "  O[i] += I[S * i + j]\n"
                       "  O.add_constraint(j < S)\n"
                       "  return O\n"
                       "let x = [1.0; 2.0; 3.0; 4.0; 5.0; 6.0; 7.0]\n"
                       "print group_sum x 3\n"
                       "print group_sum x 2\n";
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, NULL, "|->3", VALUES(6, 15, 7), 0);
    expect(&o, b, 1, NULL, "|->4", VALUES(3, 7, 11, 7), 0);
  }
}

/* An average: a contraction to a scalar, then an elementwise division by the product of the
 * dims; the result is an ordinary tensor (scaled and added to by %op). The matrix is output 2 x
 * input 3: its memory-order dims are (2, 3). */
static void test_average_in_expressions(void) {
  const char *script = "let%tile average I =\n"
                       "  I.bind_dims(X, Y)\n"
                       "  Sum = TensorOutput()\n"
                       "  Sum[] += I[x, y]\n"
                       "  return Sum / (X * Y)\n"
                       "let m = [(1.0, 2.0, 3.0); (4.0, 5.0, 6.0)]\n"
                       "let a = average m\n"
                       "print a\n"
                       "print (2.0 *. a + [1.0; 2.0])\n";
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, "a", "|->", VALUES(3.5), 0);
    expect(&o, b, 1, NULL, "|->2", VALUES(8, 9), 0);
  }
}

/* Skipping: only even cells of the output are written; the odd ones are 0. */
static void test_skipping(void) {
  const char *script = "let%tile spread I = I.bind_dims(N); O = TensorOutput(2 * N); "
                       "O[2 * i] += I[i]; return O\n"
                       "print spread [1.0; 2.0; 3.0]\n";
  outcome o;
  BOTH if (run(&o, b, script)) expect(&o, b, 0, NULL, "|->6", VALUES(1, 0, 2, 0, 3, 0), 0);
}

/* tile-edsl's cumulative sum, differentiated: loss = sum_i sum_{k <= i} w_k, so
 * d loss / d w_k = N - k. */
static void test_cumsum_backprop(void) {
  const char *script = "let%tile csum I =\n"
                       "  I.bind_dims(N)\n"
                       "  O = TensorOutput(N)\n"
                       "  O[i] += I[k]\n"
                       "  O.add_constraint(i - k < N)\n"
                       "  return O\n"
                       "let c = csum {w = [1.0; 2.0; 3.0; 4.0]}\n"
                       "let loss = c ++ \"i => \"\n"
                       "backprop loss\n"
                       "print c\n"
                       "print loss\n"
                       "print w.grad\n";
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, "c", "|->4", VALUES(1, 3, 6, 10), 0);
    expect(&o, b, 1, "loss", "|->", VALUES(20), 0);
    expect(&o, b, 2, NULL, "|->4", VALUES(4, 3, 2, 1), 0);
  }
}

/* Indices only the conditions bound (tile-edsl "Valid Indices": every valid set counts): k
 * appears only in a constraint, so each cell counts twice (k = 0, 1) and so does its gradient;
 * i and j are bounded only by i + j and i - j together, which reach the cells (a, b) with a + b
 * even, once each: 1 + 3 + 5 + 7 + 9, the gradient 1 on those cells and 0 elsewhere. */
static void test_joint_indices(void) {
  const char *script = "let%tile twice I =\n"
                       "  I.bind_dims(N)\n"
                       "  O = TensorOutput(N)\n"
                       "  O[i] += I[i]\n"
                       "  O.add_constraint(k < 2)\n"
                       "  return O\n"
                       "let%tile parity I = O = TensorOutput(); O[] += I[i + j, i - j]; return O\n"
                       "let r = twice {w = [1.0; 2.0; 3.0]}\n"
                       "backprop (r ++ \"i => \")\n"
                       "print r\n"
                       "print w.grad\n"
                       "let p = parity {m = [(1.0, 2.0, 3.0); (4.0, 5.0, 6.0); (7.0, 8.0, 9.0)]}\n"
                       "backprop p\n"
                       "print p\n"
                       "print m.grad\n";
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, "r", "|->3", VALUES(2, 4, 6), 0);
    expect(&o, b, 1, "w.grad", "|->3", VALUES(2, 2, 2), 0);
    expect(&o, b, 2, "p", "|->", VALUES(25), 0);
    expect(&o, b, 3, "m.grad", "|3->3", VALUES(1, 0, 1, 0, 1, 0, 1, 0, 1), 0);
  }
}

/* The Tile library as builtins (cn_tile_* without cn_), options as labeled arguments. The
 * matrix m has memory-order dims (2, 3); r is 0..11 over dims (1, 4, 3, 1); the kernel k adds
 * rows x and x + 2 (dilation 2 along X, 1 along Y). */
static void test_library_builtins(void) {
  const char *script = "let m = [(1.0, 2.0, 3.0); (4.0, 5.0, 6.0)]\n"
                       "print tile_sum_over_axis m\n"
                       "print tile_max_over_axis m\n"
                       "print tile_average m\n"
                       "print tile_global_min (range_of_shape ~output_dims:[2; 1; 2] + !.3.0)\n"
                       "print tile_max_pool_1d [1.0; 5.0; 2.0; 3.0; 9.0]\n"
                       "print tile_max_pool_1d ~round_up:true [1.0; 5.0; 2.0; 3.0; 9.0]\n"
                       "print tile_cumsum [1.0; 2.0; 3.0]\n"
                       "let r = range_of_shape ~output_dims:[1; 4; 3; 1]\n"
                       "print tile_conv_2d_dilated ~dilation:(2, 1) r [[[[1.0]]]; [[[1.0]]]]\n"
                       "print tile_conv_1d [[[1.0]; [2.0]; [3.0]; [4.0]]] [[[1.0]]; [[-1.0]]]\n";
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, NULL, "|->3", VALUES(5, 7, 9), 0);
    expect(&o, b, 1, NULL, "|->3", VALUES(4, 5, 6), 0);
    expect(&o, b, 2, NULL, "|->", VALUES(3.5), 0);
    expect(&o, b, 3, NULL, "|->", VALUES(3), 0);
    expect(&o, b, 4, NULL, "|->2", VALUES(5, 3), 0);
    expect(&o, b, 5, NULL, "|->3", VALUES(5, 3, 9), 0);
    expect(&o, b, 6, NULL, "|->3", VALUES(1, 3, 6), 0);
    expect(&o, b, 7, NULL, "|->1,2,3,1", VALUES(6, 8, 10, 12, 14, 16), 0);
    expect(&o, b, 8, NULL, "|->1,3,1", VALUES(-1, -1, -1), 0);
  }
  const char *msg = run_error("print tile_conv_2d_dilated ~dilation:(1, 2, 3) [1.0] [1.0]\n");
  CHECK_MSG(strncmp(msg, "seed.cnl:1:7: ~dilation takes one integer or a pair", 51) == 0, "%s",
            msg);
}

/* examples/tile.cnl on both backends: the round-up max pool and the cumulative sum of
 * [3 1 4 1 5], the transposed convolution of [1 2] by [1 10] with stride 3 (x = 3*i + k: cell 2
 * is reached by no point), PlaidML's argmax, and the gradient of sum(csum(w)) = [3 2 1]. */
static void test_example_script(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/tile.cnl", root ? root : ".");
  FILE *f = fopen(path, "rb");
  static char script[8192];
  size_t n = f ? fread(script, 1, sizeof script - 1, f) : 0;
  script[n] = '\0';
  if (f) fclose(f);
  CHECK_MSG(n > 0, "cannot read %s", path);
  outcome o;
  BOTH if (run(&o, b, script)) {
    expect(&o, b, 0, "max_pool_1d_x", "|->3", VALUES(3, 4, 5), 0);
    expect(&o, b, 1, "csum_x", "|->5", VALUES(3, 4, 8, 9, 14), 0);
    expect(&o, b, 2, NULL, "|->5", VALUES(1, 10, 0, 2, 20), 0);
    expect(&o, b, 3, NULL, "|->2", VALUES(1, 0), 0);
    expect(&o, b, 4, "w.grad", "|->3", VALUES(3, 2, 1), 0);
  }
}

/* --emit=loops shows the contraction's loop nest: i over the 3 outputs, j over the constraint,
 * ending early where the last pool crosses the input's bound (the guard 0 <= 2*i + j < 5 became
 * j's bound). */
static void test_emit_loops(void) {
  char script[1024];
  snprintf(script, sizeof script, "%sprint max_pool_1d [1.0; 5.0; 2.0; 3.0; 9.0]\n", max_pool);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .emit_loops = true, .out = out};
  cn_status st = cn_notation_run(g, "loops.cnl", script, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_MSG(
      buf && strstr(buf, "for i in 0..3:\n  for j in 0..min(2, -2*i + 5):\n    max_pool_1d[i] := "),
      "%s", buf ? buf : "");
  free(buf);
  cn_ctx_destroy(ctx);
}

/* Errors in a Tile body are positioned in the script (FILE:LINE:COL of the body's text), at
 * definition for syntax, at application for shapes. */
static void test_errors(void) {
  const char *msg = run_error("let x = 1\n"
                              "let%tile f I =\n"
                              "  O = TensorOutput(2)\n"
                              "  O[i] += I[i +]\n"
                              "  return O\n");
  CHECK_MSG(strncmp(msg, "seed.cnl:4:16: ", 15) == 0, "%s", msg);
  CHECK_MSG(strstr(msg, "\n  O[i] += I[i +]\n               ^") != NULL, "%s", msg);
  msg = run_error("let%tile f I =\n"
                  "  I.bind_dims(N, M)\n"
                  "  O[i] += I[i]\n"
                  "  return O\n"
                  "print f [1.0; 2.0]\n");
  CHECK_MSG(strncmp(msg, "seed.cnl:2:3: ", 14) == 0, "%s", msg);
  CHECK_MSG(strstr(msg, "bind_dims") != NULL, "%s", msg);
  /* an application needs every argument: a partial one is a function, not a tensor */
  msg = run_error("let%tile f I J = O[i] += I[i] * J[i]; return O\nprint f [1.0]\n");
  CHECK_MSG(strncmp(msg, "seed.cnl:2:7: ", 14) == 0, "%s", msg);
}

int main(void) {
  test_max_pool();
  test_dim_argument();
  test_average_in_expressions();
  test_skipping();
  test_cumsum_backprop();
  test_joint_indices();
  test_library_builtins();
  test_example_script();
  test_emit_loops();
  test_errors();
  CHECK_DONE();
}
