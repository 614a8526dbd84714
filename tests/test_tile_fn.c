/* Tests of Tile functions (cn_tile_fn_*) and the Tile library (cn_tile_<name>; tile-edsl): every
 * example of the seed on small inputs worked out by hand, on both backends with the outputs first
 * filled with a sentinel (99) so cells that must end 0 are written by the routine: sum and max
 * over an axis, global min, average, max pool 1-D rounding down and up, the "wrong" max pool,
 * skipping, cumulative sum, a negative but valid index value, 1-D, dilated 2-D and complex
 * convolutions (values and output sizes), a transposed convolution by exact division, argmax
 * through cond; the body language (both bracket styles, ';' and newlines, comments, continuation
 * lines, declarations, dim arithmetic, elementwise statements with NumPy broadcasting and the
 * seed's functions); results used as ordinary tensors; a gradient through a function; positioned
 * errors (FILE:LINE:COL, line, caret); generated bodies with calls of every arity (a fuzz under
 * the sanitizers); and every allocation failing in turn. */
#include "tile_check.h"
#include "core/core.h"

static cn_graph *new_graph(cn_ctx **ctx) {
  *ctx = cn_ctx_create();
  CHECK(*ctx != NULL);
  CHECK_INT(cn_ctx_set_option(*ctx, "cflags", STRICT_CFLAGS), CN_OK);
  cn_graph *g = cn_graph_create(*ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  return g;
}

static cn_tile_fn *fn(cn_ctx *ctx, int n, const char *const *params, const char *body) {
  cn_tile_fn *f = cn_tile_fn_create(ctx, "f", n, params, body, "f.tile", 1, 1);
  CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
  return f;
}

static cn_tensor *apply1(cn_graph *g, const cn_tile_fn *f, cn_tensor *a) {
  return f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{a, 0}}) : NULL;
}

/* ---- The library: the seed's examples ---- */

static void test_reductions(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* I = [[1, 5, 3], [4, 2, 6]]: column sums 5, 7, 9; column maxima 4, 5, 6 */
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, (double[]){1, 5, 3, 4, 2, 6}, 6);
  check_forward(g, "sum_over_axis", cn_tile_sum_over_axis(g, I), "|->3", (double[]){5, 7, 9}, 3, 0,
                NULL);
  check_forward(g, "max_over_axis", cn_tile_max_over_axis(g, I), "|->3", (double[]){4, 5, 6}, 3, 0,
                NULL);
  /* global min of a 2x2x2 tensor through -max(-I) */
  cn_tensor *C = data(g, "C", 3, (int64_t[]){2, 2, 2}, (double[]){3, -1, 4, 1, -5, 9, 2, 6}, 8);
  check_forward(g, "global_min", cn_tile_global_min(g, C), "|->", (double[]){-5}, 1, 0, NULL);
  /* average of [[1, 2], [3, 6]]: 12 / 4 */
  cn_tensor *A = data(g, "A", 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 6}, 4);
  check_forward(g, "average", cn_tile_average(g, A), "|->", (double[]){3}, 1, 0, NULL);
  /* a function sees the axes in memory order, whatever their kind: batch [2] and output [3] are
   * M and N, so this sums over the batch axis */
  cn_dims bd = {{1, (int64_t[]){2}, NULL}, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  cn_tensor *B = cn_tensor_data(g, "B", &bd, (double[]){1, 5, 3, 4, 2, 6}, 6);
  check_forward(g, "sum over a batch axis", cn_tile_sum_over_axis(g, B), "|->3",
                (double[]){5, 7, 9}, 3, 0, NULL);
  cn_ctx_destroy(ctx);
}

static void test_max_pool_and_cumsum(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *I = data(g, "I", 1, (int64_t[]){5}, (double[]){3, 1, 4, 1, 5}, 5);
  /* N = 5 rounding down: max(3, 1), max(4, 1); rounding up adds max(I[4]) = 5 (the pair's
   * second cell, I[5], is out of range and skipped) */
  check_forward(g, "max_pool_1d down", cn_tile_max_pool_1d(g, I, false), "|->2", (double[]){3, 4},
                2, 0, NULL);
  check_forward(g, "max_pool_1d up", cn_tile_max_pool_1d(g, I, true), "|->3", (double[]){3, 4, 5},
                3, 0, NULL);
  /* the "wrong" max pool, without j < 2: every output reaches every cell (negative j is valid),
   * so each is the global max */
  cn_tile_fn *wrong = fn(ctx, 1, (const char *const[]){"I"},
                         "N = TensorDim()\n"
                         "i, j = TensorIndexes(2)\n"
                         "I.bind_dims(N)\n"
                         "O = TensorOutput(N // 2)\n"
                         "O[i] >= I[2 * i + j]\n"
                         "return O");
  check_forward(g, "wrong max pool", apply1(g, wrong, I), "|->2", (double[]){5, 5}, 2, 0, NULL);
  /* cumulative sum of 1, 2, 3, 4 through the constraint i - k < N */
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  check_forward(g, "cumsum", cn_tile_cumsum(g, V), "|->4", (double[]){1, 3, 6, 10}, 4, 0, NULL);
  /* a negative index value that is valid: j + 1 < 2 means j in {-1, 0}: V[i - 1] + V[i] */
  cn_tile_fn *pairs = fn(ctx, 1, (const char *const[]){"V"},
                         "V.bind_dims(N); O = TensorOutput(N); O(i) += V(i + j)\n"
                         "O.add_constraint(j + 1 < 2); return O");
  check_forward(g, "negative valid index", apply1(g, pairs, V), "|->4", (double[]){1, 3, 5, 7}, 4,
                0, NULL);
  /* skipping: O[2i] += I[2i, j] over I = 3x4 holding 1..12 writes O[0] = 10 and O[2] = 42; the
   * odd cells would need a fractional i: never written, 0 */
  double m[12];
  for (int k = 0; k < 12; k++) m[k] = k + 1;
  cn_tensor *M = data(g, "M", 2, (int64_t[]){3, 4}, m, 12);
  cn_tile_fn *skip = fn(ctx, 1, (const char *const[]){"I"},
                        "M, N = TensorDims(2)\n"
                        "i, j = TensorIndexes(2)\n"
                        "I.bind_dims(M, N)\n"
                        "O = TensorOutput(N)\n"
                        "O[2 * i] += I[2 * i, j]\n"
                        "return O\n");
  check_forward(g, "skip", apply1(g, skip, M), "|->4", (double[]){10, 0, 42, 0}, 4, 0, NULL);
  cn_ctx_destroy(ctx);
}

static void test_convolutions(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* 1-D: I[0, x, ci] = (x + 1) * (ci ? 10 : 1), K[k, ci, co] = k == 0 ? (ci == co)
   * : (co == 0); O[0, x, 0] = I[x, 0] + I[x + 1, 0] + I[x + 1, 1] = 23, 35, 47 and
   * O[0, x, 1] = I[x, 1] = 10, 20, 30 */
  cn_tensor *I = data(g, "I", 3, (int64_t[]){1, 4, 2}, (double[]){1, 10, 2, 20, 3, 30, 4, 40}, 8);
  cn_tensor *K = data(g, "K", 3, (int64_t[]){2, 2, 2}, (double[]){1, 0, 0, 1, 1, 0, 1, 0}, 8);
  check_forward(g, "conv_1d", cn_tile_conv_1d(g, I, K), "|->1,3,2",
                (double[]){23, 10, 35, 20, 47, 30}, 6, 0, NULL);

  /* dilated 2-D, dilation (2, 3): I[x, y] = 10x + y (4x5), K = [[1, 2], [3, 4]]; the output is
   * 2x2: O[x, y] = I[x, y] + 2 I[x, y+3] + 3 I[x+2, y] + 4 I[x+2, y+3] = 100x + 10y + 158 */
  double in[20];
  for (int x = 0; x < 4; x++)
    for (int y = 0; y < 5; y++) in[x * 5 + y] = 10 * x + y;
  cn_tensor *I2 = data(g, "I2", 4, (int64_t[]){1, 4, 5, 1}, in, 20);
  cn_tensor *K2 = data(g, "K2", 4, (int64_t[]){2, 2, 1, 1}, (double[]){1, 2, 3, 4}, 4);
  check_forward(g, "conv_2d_dilated", cn_tile_conv_2d_dilated(g, I2, K2, 2, 3), "|->1,2,2,1",
                (double[]){158, 168, 258, 268}, 4, 0, NULL);

  /* complex: N = 1, X0 = 5, X1 = 1, G = 2 groups of one channel, K0 = 3, K1 = 1, strides
   * (2, 1), dilations (1, 1): Y0 = (5 + 1) / 2 = 3, Y1 = 1, P0 = (2*2 + 3 - 5) / 2 = 1, P1 = 0;
   * O[x0, g] = sum_k I[2 x0 + k - 1, g] K[k, g] with I[., 0] = 1..5, I[., 1] = 10..50,
   * K[., 0] = (1, 10, 100), K[., 1] = (1, 0, -1):
   *   g = 0: x0 = 0: 10*1 + 100*2 = 210 (I[-1] skipped); 2 + 30 + 400 = 432; 4 + 50 = 54
   *   g = 1: -20 (I[-1] skipped); 20 - 40 = -20; 40 + 0 (I[5] skipped) = 40 */
  cn_tensor *I3 = data(g, "I3", 5, (int64_t[]){1, 5, 1, 2, 1},
                       (double[]){1, 10, 2, 20, 3, 30, 4, 40, 5, 50}, 10);
  cn_tensor *K3 = data(g, "K3", 5, (int64_t[]){3, 1, 2, 1, 1}, (double[]){1, 1, 10, 0, 100, -1}, 6);
  check_forward(g, "complex_conv_2d", cn_tile_complex_conv_2d(g, I3, K3, 2, 1, 1, 1),
                "|->1,3,1,2,1", (double[]){210, -20, 432, -20, 54, 40}, 6, 0, NULL);
  /* output sizes: X = (5, 4), strides (2, 1): Y = (3, 4); strides (3, 2): Y = (7/3, 5/2) = (2, 2)
   * (dilations change the padding, not the sizes) */
  cn_tensor *I4 = data(g, "I4", 5, (int64_t[]){1, 5, 4, 2, 1}, (double[]){1}, 1);
  cn_tensor *K4 = data(g, "K4", 5, (int64_t[]){3, 2, 2, 1, 1}, (double[]){1}, 1);
  cn_tensor *c1 = cn_tile_complex_conv_2d(g, I4, K4, 2, 1, 1, 2);
  cn_tensor *c2 = cn_tile_complex_conv_2d(g, I4, K4, 3, 2, 2, 1);
  CHECK_MSG(c1 && c2, "%s", cn_ctx_error(ctx));
  if (c1 && c2) {
    CHECK_STR(cn_tensor_shape(c1), "|->1,3,4,2,1");
    CHECK_STR(cn_tensor_shape(c2), "|->1,2,2,2,1");
  }

  /* exact division: a transposed 1-D convolution with the stride s as an argument, O[x] = sum_k
   * I[(x - k) / s] W[k] where x - k is a multiple of s (the scatter O[s n + k] += I[n] W[k]); with
   * I = 1..4, W = 1, 10, 100, s = 2: 1, 10, 100 + 2, 20, 200 + 3, 30, 300 + 4, 40, 400; a
   * constraint (x - k) / s < 2 keeps n = 0, 1: 1, 10, 102, 20, 200, 0, 0, 0, 0 */
  cn_tensor *T = data(g, "T", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  cn_tensor *W = data(g, "W", 1, (int64_t[]){3}, (double[]){1, 10, 100}, 3);
  const char *const tparams[3] = {"I", "W", "s"};
  cn_tile_arg targs[3] = {{T, 0}, {W, 0}, {NULL, 2}};
  cn_tile_fn *tconv = fn(ctx, 3, tparams,
                         "I.bind_dims(N); W.bind_dims(K)\n"
                         "O = TensorOutput((N - 1) * s + K)\n"
                         "O[x] += I[(x - k) / s] * W[k]\n"
                         "return O");
  check_forward(g, "transposed conv_1d", tconv ? cn_tile_fn_apply(g, tconv, 3, targs) : NULL,
                "|->9", (double[]){1, 10, 102, 20, 203, 30, 304, 40, 400}, 9, 0, NULL);
  cn_tile_fn *head = fn(ctx, 3, tparams,
                        "I.bind_dims(N); W.bind_dims(K)\n"
                        "O = TensorOutput((N - 1) * s + K)\n"
                        "O[x] += I[(x - k) / s] * W[k]\n"
                        "O.add_constraint((x - k) / s < 2)\n"
                        "return O");
  check_forward(g, "transposed conv_1d, constrained",
                head ? cn_tile_fn_apply(g, head, 3, targs) : NULL, "|->9",
                (double[]){1, 10, 102, 20, 200, 0, 0, 0, 0}, 9, 0, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- The body language ---- */

static void test_body_forms(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *I = data(g, "I", 1, (int64_t[]){5}, (double[]){3, 1, 4, 1, 5}, 5);
  /* the issue's example: ';', the C++ bracket style, a comment and a continued line */
  cn_tile_fn *pool = fn(ctx, 1, (const char *const[]){"I"},
                        "I.bind_dims(N); O = TensorOutput((N + 1) / 2)  # round up\n"
                        "O(i) >= I(2 * i\n"
                        "          + j)\n"
                        "O.add_constraint(j < 2)\n"
                        "O");
  check_forward(g, "pool (bare result)", apply1(g, pool, I), "|->3", (double[]){3, 4, 5}, 3, 0,
                NULL);
  /* dim arithmetic with a dim parameter s (lower-case but bound: a dim, not an index) and both
   * divisions: P = ((Y - 1) * s + EK - X) / 2 with Y = 3, s = 2, EK = 3, X = 5: 1; Q = 7 // 2 */
  cn_tile_fn *dims = fn(ctx, 2, (const char *const[]){"I", "s"},
                        "I.bind_dims(X)\n"
                        "Y = (X + s - 1) // s; EK = 3\n"
                        "P = ((Y - 1) * s + EK - X) / 2\n"
                        "Q = 7 // 2\n"
                        "O = TensorOutput(P + Q)\n"
                        "O[i] = I[s * i + P]\n"
                        "return O");
  /* O has 1 + 3 cells: O[i] = I[2i + 1] = 1, 1; O[2] would read I[5]: 0 */
  check_forward(g, "dims",
                dims ? cn_tile_fn_apply(g, dims, 2, (cn_tile_arg[]){{I, 0}, {NULL, 2}}) : NULL,
                "|->4", (double[]){1, 1, 0, 0}, 4, 0, NULL);
  /* argmax through cond: M[i] >= X[i, j], then O[i] >= cond(X[i, j], M[i], J[j]) with J the
   * indices; X = [[3, 7, 2], [1, 4, 5]]: 1, 2 */
  cn_tensor *X = data(g, "X", 2, (int64_t[]){2, 3}, (double[]){3, 7, 2, 1, 4, 5}, 6);
  cn_tile_fn *argmax = fn(ctx, 2, (const char *const[]){"X", "J"},
                          "X.bind_dims(R, C)\n"
                          "M = TensorOutput(R)\n"
                          "M[i] >= X[i, j]\n"
                          "O = TensorOutput(R)\n"
                          "O[i] >= cond(X[i, j], M[i], J[j])\n"
                          "return O");
  check_forward(
      g, "argmax",
      argmax ? cn_tile_fn_apply(g, argmax, 2, (cn_tile_arg[]){{X, 0}, {cn_tensor_range(g, 3), 0}})
             : NULL,
      "|->2", (double[]){1, 2}, 2, 0, NULL);
  /* a contraction without TensorOutput is sized as in cn_tile; its result feeds cannl ops */
  cn_tile_fn *total = fn(ctx, 1, (const char *const[]){"X"}, "T[] += X[i, j]; return T");
  cn_tensor *t = apply1(g, total, X);
  cn_tensor *twice = t ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){t, t}) : NULL;
  check_forward(g, "result as a tensor", twice, "|->", (double[]){44}, 1, 0, NULL);
  cn_ctx_destroy(ctx);
}

static void test_elementwise(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *A = data(g, "A", 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, 6);
  cn_tensor *B = data(g, "B", 1, (int64_t[]){3}, (double[]){3, 2, 1}, 3);
  cn_tensor *C = data(g, "C", 2, (int64_t[]){2, 1}, (double[]){10, 20}, 2);
  const char *const abc[3] = {"A", "B", "C"};
  cn_tile_arg args[3] = {{A, 0}, {B, 0}, {C, 0}};
  struct {
    const char *body, *shape;
    double want[6];
  } cases[] = {
      /* NumPy broadcasting: B stretches over A's rows, C over A's columns */
      {"return A - B", "|->2,3", {-2, 0, 2, 1, 3, 5}},
      {"return A * C + B", "|->2,3", {13, 22, 31, 83, 102, 121}},
      {"R = -A; return R / 2", "|->2,3", {-0.5, -1, -1.5, -2, -2.5, -3}},
      {"return A > B", "|->2,3", {0, 0, 1, 1, 1, 1}},
      {"return A <= B", "|->2,3", {1, 1, 0, 0, 0, 0}},
      {"return A >= B", "|->2,3", {0, 1, 1, 1, 1, 1}},
      {"return A < B", "|->2,3", {1, 0, 0, 0, 0, 0}},
      {"return A == B", "|->2,3", {0, 1, 0, 0, 0, 0}},
      {"return A != B", "|->2,3", {1, 0, 1, 1, 1, 1}},
      {"return select(A == B, C, A)", "|->2,3", {1, 10, 3, 4, 5, 6}},
      /* dims are integer constants: X * Y = 6 (and 7 // 2 stays an integer: 3) */
      {"A.bind_dims(X, Y); return A / (X * Y) + 7 // 2",
       "|->2,3",
       {3 + 1.0 / 6, 3 + 2.0 / 6, 3.5, 3 + 4.0 / 6, 3 + 5.0 / 6, 4}},
      {"return pow(B, 2) - 1.5", "|->3", {7.5, 2.5, -0.5}},
      {"return sqrt(B * B)", "|->3", {3, 2, 1}},
      {"Z = B - B; return exp(Z) + sin(Z) + tanh(Z) + sigmoid(Z) + log(B / B)",
       "|->3",
       {1.5, 1.5, 1.5}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    cn_tile_fn *f = fn(ctx, 3, abc, cases[k].body);
    cn_tensor *t = f ? cn_tile_fn_apply(g, f, 3, args) : NULL;
    int64_t n = strcmp(cases[k].shape, "|->3") == 0 ? 3 : 6;
    check_forward(g, cases[k].body, t, cases[k].shape, cases[k].want, n, 1e-12, NULL);
  }
  /* the seed's average over axis 0, elementwise by a dim: (1 + 4) / 2, (2 + 5) / 2, (3 + 6) / 2 */
  cn_tile_fn *avg = fn(ctx, 1, (const char *const[]){"I"},
                       "X, Y = TensorDims(2)\n"
                       "x, y = TensorIndexes(2)\n"
                       "I.bind_dims(X, Y)\n"
                       "Sum = TensorOutput(Y)\n"
                       "Sum[y] += I[x, y]\n"
                       "return Sum / X");
  check_forward(g, "avg over axis 0", apply1(g, avg, A), "|->3", (double[]){2.5, 3.5, 4.5}, 3, 0,
                NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Gradients flow through a function's contraction and elementwise statements ---- */

static void test_gradient(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* loss = sum_{x,y} P[x, y]^2 / (X * Y) over P = [[1, 2, 3], [4, 5, 6]]: dloss/dP = 2 P / 6 */
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, (int64_t[]){2, 3}, NULL}};
  const double p[6] = {1, 2, 3, 4, 5, 6};
  cn_tensor *P = cn_tensor_param(g, "P", &d, cn_tensor_data(g, "P0", &d, p, 6));
  cn_tile_fn *f = fn(ctx, 1, (const char *const[]){"I"},
                     "I.bind_dims(X, Y)\n"
                     "Sq = I * I\n"
                     "S = TensorOutput()\n"
                     "S[()] += Sq[x, y]\n"
                     "return S / (X * Y)");
  cn_tensor *loss = apply1(g, f, P);
  CHECK_MSG(loss && cn_tensor_is_diff(loss), "%s", cn_ctx_error(ctx));
  cn_asgn *init = loss ? cn_graph_init_params(g, loss) : NULL;
  cn_asgn *update = init ? cn_graph_grad_update(g, loss) : NULL;
  CHECK_MSG(update != NULL, "%s", cn_ctx_error(ctx));
  for (int k = 0; k < 2 && update; k++) {
    cn_routine *r = cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, (cn_asgn *[]){init, update}),
                                       backends[k], "grad");
    CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
    if (!r) continue;
    CHECK_INT(cn_routine_run(r), CN_OK);
    double v, grad[6];
    CHECK_INT(cn_node_get_values(cn_tensor_value(loss), false, &v, 1), CN_OK);
    CHECK_INT(cn_node_get_values(cn_tensor_grad(P), false, grad, 6), CN_OK);
    CHECK_NEAR(v, 91.0 / 6, 1e-12);
    for (int c = 0; c < 6; c++) CHECK_NEAR(grad[c], 2 * p[c] / 6, 1e-12);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Errors ---- */

/* Creating (or, when create succeeds, applying to args) fails with exactly `message`. */
static void check_fn_error(cn_graph *g, int n, const char *const *params, const cn_tile_arg *args,
                           const char *body, const char *message) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tile_fn *f = cn_tile_fn_create(ctx, "f", n, params, body, "f.cnl", 10, 5);
  cn_tensor *t = f ? cn_tile_fn_apply(g, f, n, args) : NULL;
  CHECK_MSG(t == NULL, "accepted: %s", body);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), message);
}

static void test_errors(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  cn_tensor *A = data(g, "A", 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, 6);
  const char *const pv[1] = {"V"};
  cn_tile_arg av[1] = {{V, 0}};
  /* the body starts at line 10, column 5 of f.cnl: its first line is quoted from column 5 */
  check_fn_error(g, 1, pv, av, "O = V +* 2\nreturn O",
                 "f.cnl:10:12: unexpected '*', expected an integer, a name or '('\n    O = V +* "
                 "2\n           ^");
  /* an index used only in a constraint (from add_constraint) that it does not bound */
  check_fn_error(g, 1, pv, av,
                 "V.bind_dims(N)\n"
                 "O = TensorOutput(N)\n"
                 "O[i] += V[i]\n"
                 "O.add_constraint(k - m < 2)\n"
                 "return O",
                 "f.cnl:13:18: index 'k' is not bounded: it appears only in constraints, and they "
                 "do not bound it, alone or with the other indices (add a constraint such as 'k < "
                 "N', or use it in a tensor's index)\n"
                 "O.add_constraint(k - m < 2)\n"
                 "                 ^");
  /* assign conflict: O[i] = A[i, j] may write O[i] once per j */
  check_fn_error(g, 1, (const char *const[]){"A"}, (cn_tile_arg[]){{A, 0}},
                 "A.bind_dims(M, N)\nO = TensorOutput(M)\nO[i] = A[i, j]\nreturn O",
                 "f.cnl:12:6: '=' (assign) needs every output cell written by at most one valid "
                 "index set, and 'O' may be written by several (use '+=', '>=' ... to "
                 "aggregate)\n"
                 "O[i] = A[i, j]\n"
                 "     ^");
  check_fn_error(
      g, 1, pv, av, "V.bind_dims(M, N)\nreturn V",
      "f.cnl:10:5: 'V' has 1 axes (|->4) but bind_dims names 2\n    V.bind_dims(M, N)\n    ^");
  check_fn_error(g, 1, pv, av,
                 "V.bind_dims(N)\nO = TensorOutput(N + 1)\nO[i : 3] += V[i]\nreturn O",
                 "f.cnl:12:7: the sizes of 'O' come from its TensorOutput\n"
                 "O[i : 3] += V[i]\n"
                 "      ^");
  check_fn_error(g, 1, pv, av, "V.bind_dims(N)\nO = TensorOutput(N, N)\nO[i] += V[i]\nreturn O",
                 "f.cnl:12:1: 'O' has 2 dims (TensorOutput) but 1 indices\n"
                 "O[i] += V[i]\n"
                 "^");
  check_fn_error(g, 1, pv, av, "O = TensorOutput(2)\nR = O + V\nO[i] += V[i]\nreturn R",
                 "f.cnl:11:5: 'O' is used before its contraction\n"
                 "R = O + V\n"
                 "    ^");
  check_fn_error(g, 1, pv, av, "O = TensorOutput(2)\nreturn V",
                 "f.cnl:10:5: no contraction after this TensorOutput writes 'O'\n    O = "
                 "TensorOutput(2)\n    ^");
  check_fn_error(g, 1, pv, av, "V.add_constraint(i < 2)\nreturn V",
                 "f.cnl:10:5: no contraction writes 'V' (a constraint applies to one)\n    "
                 "V.add_constraint(i < 2)\n    ^");
  check_fn_error(g, 1, pv, av, "V.bind_dim(N)\nreturn V",
                 "f.cnl:10:7: unknown method 'bind_dim' (bind_dims or add_constraint)\n    "
                 "V.bind_dim(N)\n      ^");
  check_fn_error(g, 1, pv, av, "return V\nW = V",
                 "f.cnl:11:1: a statement after return\n"
                 "W = V\n"
                 "^");
  check_fn_error(g, 1, pv, av, "W = V\n",
                 "f.cnl:11:1: the body has no result: end it with `return NAME`\n"
                 "\n"
                 "^");
  check_fn_error(g, 1, pv, av, "return V + A",
                 "f.cnl:10:16: unknown name 'A'\n    return V + A\n               ^");
  check_fn_error(
      g, 1, pv, av, "i, j = TensorIndexes(3)\nreturn V",
      "f.cnl:10:12: 3 names declared for 2 on the left\n    i, j = TensorIndexes(3)\n           ^");
  check_fn_error(g, 1, pv, av, "i = TensorIndex()\nreturn V + i",
                 "f.cnl:11:12: 'i' is an index: indices appear only in contractions\n"
                 "return V + i\n"
                 "           ^");
  check_fn_error(g, 1, pv, av, "M = TensorDim()\nO[i : M] += V[i]\nreturn O",
                 "f.cnl:11:7: dim 'M' has no value yet (bind it with bind_dims or assign it)\n"
                 "O[i : M] += V[i]\n"
                 "      ^");
  check_fn_error(g, 1, pv, av, "return frob(V)",
                 "f.cnl:10:12: unknown function 'frob' (sqrt, exp, log, sin, cos, tanh, sigmoid, "
                 "pow, select)\n    return frob(V)\n           ^");
  check_fn_error(g, 1, pv, av, "return pow(V)",
                 "f.cnl:10:12: 'pow' takes 2 arguments, got 1\n    return pow(V)\n           ^");
  /* issue 14: a call without arguments (its parse copied a NULL argument list) */
  check_fn_error(g, 1, pv, av, "return exp()",
                 "f.cnl:10:12: 'exp' takes 1 argument, got 0\n    return exp()\n           ^");
  check_fn_error(g, 1, pv, av, "O = frob()\nreturn V",
                 "f.cnl:10:9: unknown function 'frob' (sqrt, exp, log, sin, cos, tanh, sigmoid, "
                 "pow, select)\n    O = frob()\n        ^");
  /* a dim 0 (the tensor's creation refused it without a position; found by the body fuzz) */
  check_fn_error(g, 1, pv, av, "V.bind_dims(N)\nO = TensorOutput(N - 4)\nO[i] += V[i]\nreturn O",
                 "f.cnl:11:18: dim 0 must be at least 1\n"
                 "O = TensorOutput(N - 4)\n"
                 "                 ^");
  check_fn_error(g, 1, pv, av, "V.bind_dims(N)\nO = TensorOutput(N)\nO[i] += V[f()]\nreturn O",
                 "f.cnl:12:11: a call in an integer expression (calls are elementwise)\n"
                 "O[i] += V[f()]\n"
                 "          ^");
  check_fn_error(g, 2, (const char *const[]){"V", "A"}, (cn_tile_arg[]){{V, 0}, {A, 0}},
                 "return V * A",
                 "f.cnl:10:14: cannot broadcast: axis 1 of the result is 4 in one operand and 3 in "
                 "another\n    return V * A\n             ^");
  check_fn_error(g, 1, pv, av, "V.bind_dims(N)\nO = TensorOutput(N)\nO[i] += V[i / j]\nreturn O",
                 "f.cnl:12:13: division by an index expression (an index expression divides only "
                 "by dims and integers)\n"
                 "O[i] += V[i / j]\n"
                 "            ^");
  /* issue 27: a float literal beyond the largest double was read as infinity */
  check_fn_error(g, 1, pv, av, "return V * 1e999",
                 "f.cnl:10:16: number too large (beyond the largest double)\n    return V * "
                 "1e999\n               ^");
  check_fn_error(g, 1, pv, av, "N = 4 / (2 - 2)\nreturn V",
                 "f.cnl:10:11: division by zero\n    N = 4 / (2 - 2)\n          ^");
  /* an argument whose shape is not known yet, when the body needs its dims */
  cn_tensor *P = cn_tensor_apply(g, CN_OP_NEG, 1, &V);
  cn_tile_fn *bd = fn(ctx, 1, pv, "V.bind_dims(N)\nreturn V");
  CHECK(bd && cn_tile_fn_apply(g, bd, 1, (cn_tile_arg[]){{P, 0}}) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "f.tile:1:1: the shape of 'V' is not known yet (");
  CHECK_HAS(cn_ctx_error(ctx), "): Tile needs the dims of its tensors when a statement is built "
                               "(give the tensor explicit dims, or build the statement after the "
                               "graph is materialized)\nV.bind_dims(N)\n^");
  /* API misuse */
  cn_tile_fn *f = fn(ctx, 1, pv, "return V");
  CHECK(f && cn_tile_fn_apply(g, f, 0, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "tile function 'f': 1 parameter(s), 0 argument(s) given");
  CHECK(cn_tile_fn_create(ctx, "f", 2, (const char *const[]){"V", "V"}, "return V", NULL, 1, 1) ==
        NULL);
  CHECK_STR(cn_ctx_error(ctx), "tile function 'f': parameter 'V' is repeated");
  /* the library's messages are positioned in its bodies */
  CHECK(cn_tile_sum_over_axis(g, V) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "cn_tile_sum_over_axis:3:1: 'I' has 1 axes (|->4) but bind_dims "
                               "names 2\n"
                               "I.bind_dims(M, N)\n"
                               "^");
  cn_ctx_destroy(ctx);
}

/* Issue 27: the flavor check read past the body's NUL when a statement starts near its end (the
 * prefix skipped before it was compared: a body ending in a newline, or in "Tens", shorter than
 * "TensorIndex"). The body's copy ends exactly at the end of its own arena block here (more than
 * half a block, its size with the NUL a multiple of the arena's 16-byte alignment), so ASan sees
 * a read past it. */
static void test_body_end(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  static const char *const tails[2] = {"return V + 1\n", "return V + 1\nTens"};
  for (int k = 0; k < 2; k++) {
    enum { LEN = 40000 - 1 }; /* (LEN + 1) % 16 == 0, LEN > 32768 */
    static char body[LEN + 1];
    size_t tail = strlen(tails[k]);
    memset(body, ' ', LEN - tail);
    body[0] = '#'; /* a comment line of blanks */
    body[LEN - tail - 1] = '\n';
    memcpy(body + LEN - tail, tails[k], tail + 1);
    CHECK_INT((int)strlen(body), LEN);
    cn_tile_fn *f = cn_tile_fn_create(ctx, "f", 1, (const char *const[]){"V"}, body, "f.cnl", 1, 1);
    if (k == 0) {
      CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
      check_forward(g, "body ending in a newline", apply1(g, f, V), "|->4", (double[]){2, 3, 4, 5},
                    4, 0, NULL);
    } else {
      CHECK(f == NULL);
      CHECK_STR(cn_ctx_error(ctx), "f.cnl:3:1: a statement after return\nTens\n^");
    }
  }
  cn_ctx_destroy(ctx);
}

/* ---- Fuzz: generated bodies ---- */

/* Issue 14: an external fuzzer found that a call without arguments crashed the parser (a NULL
 * argument list given to memcpy). Bodies are generated from the statement forms with calls of
 * every arity (0 to 9, one more than the parser takes), known and unknown functions, in
 * elementwise statements, dim expressions, TensorOutput and contraction indices, integers up to
 * the int64 extremes, in the Python and the C++ flavor. Each body is created and applied to a
 * vector V [4] (and on success its forward code built): a tensor, or CN_ERR_INVALID with a
 * positioned message, never a crash (ASan and UBSan run this test). */
static uint64_t fuzz_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n) { /* xorshift64, uniform enough in [0, n) */
  fuzz_state ^= fuzz_state << 13;
  fuzz_state ^= fuzz_state >> 7;
  fuzz_state ^= fuzz_state << 17;
  return (uint32_t)((fuzz_state >> 11) % n);
}

#define FUZZ_MAX_ARITY 9

static void gen_expr(cn_sbuf *sb, int depth, int *arities) {
  static const char *const atoms[] = {"V", "N",   "2", "0.5", "i",
                                      "A", "1e3", "0", "R0",  "9223372036854775807"};
  static const char *const calls[] = {"exp", "sqrt",   "log", "tanh", "sigmoid",
                                      "pow", "select", "sin", "frob", "TensorDim"};
  static const char *const ops[] = {" + ", " - ", " * ", " / ", " // ", " < ", " == ", " >= "};
  switch (depth > 0 ? rnd(6) : 0) {
  case 0: cn_sbuf_puts(sb, atoms[rnd(sizeof atoms / sizeof *atoms)]); break;
  case 1:
  case 2: {
    int n = (int)rnd(FUZZ_MAX_ARITY + 1);
    arities[n]++;
    cn_sbuf_printf(sb, "%s(", calls[rnd(sizeof calls / sizeof *calls)]);
    for (int k = 0; k < n; k++) {
      if (k) cn_sbuf_puts(sb, ", ");
      gen_expr(sb, depth - 1, arities);
    }
    cn_sbuf_putc(sb, ')');
    break;
  }
  case 3:
    gen_expr(sb, depth - 1, arities);
    cn_sbuf_puts(sb, ops[rnd(sizeof ops / sizeof *ops)]);
    gen_expr(sb, depth - 1, arities);
    break;
  case 4:
    cn_sbuf_puts(sb, "-");
    gen_expr(sb, depth - 1, arities);
    break;
  default:
    cn_sbuf_putc(sb, '(');
    gen_expr(sb, depth - 1, arities);
    cn_sbuf_putc(sb, ')');
    break;
  }
}

/* One body: bind_dims, up to three statements, a return. */
static void gen_body(cn_sbuf *sb, bool cpp, int *arities) {
  const char *end = cpp ? ";\n" : (rnd(2) ? "\n" : "; ");
  cn_sbuf_printf(sb, "%sV.bind_dims(N)%s", cpp ? "TensorDim N;\n" : "", end);
  int n = (int)rnd(4);
  for (int k = 0; k < n; k++) {
    const char *decl = cpp ? "auto " : "";
    switch (rnd(3)) {
    case 0: /* elementwise or dim assignment */
      cn_sbuf_printf(sb, "%sR%d = ", decl, k);
      gen_expr(sb, 3, arities);
      break;
    case 1: /* TensorOutput, then its contraction reading V at an index that may hold a call */
      cn_sbuf_printf(sb, "%sR%d = TensorOutput(", decl, k);
      gen_expr(sb, 1, arities);
      cn_sbuf_printf(sb, ")%sR%d[i] += V[i + ", end, k);
      gen_expr(sb, 1, arities);
      cn_sbuf_puts(sb, "]");
      break;
    default: /* a sized contraction, the size an expression */
      cn_sbuf_printf(sb, "R%d[i : ", k);
      gen_expr(sb, 1, arities);
      cn_sbuf_puts(sb, rnd(2) ? "] >= V[i]" : "] += V[2 * i + j], j < 2");
      break;
    }
    cn_sbuf_puts(sb, end);
  }
  cn_sbuf_puts(sb, "return ");
  if (n && rnd(2))
    cn_sbuf_printf(sb, "R%d", (int)rnd((uint32_t)n));
  else
    gen_expr(sb, 2, arities);
  if (cpp) cn_sbuf_putc(sb, ';');
}

static void test_body_fuzz(void) {
  int arities[FUZZ_MAX_ARITY + 1] = {0};
  int created = 0, applied = 0, built = 0, refused = 0;
  const int rounds = 1500;
  for (int r = 0; r < rounds; r++) {
    cn_sbuf sb = {0};
    gen_body(&sb, rnd(4) == 0, arities);
    CHECK(!sb.failed);
    if (sb.failed) break;
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
    cn_tile_fn *f =
        cn_tile_fn_create(ctx, "f", 1, (const char *const[]){"V"}, sb.data, "f.cnl", 1, 1);
    cn_tensor *t = f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{V, 0}}) : NULL;
    created += f != NULL;
    applied += t != NULL;
    if (t && cn_graph_forward(g, t)) built++;
    if (cn_ctx_status(ctx) != CN_OK) {
      refused++;
      CHECK_MSG(cn_ctx_status(ctx) == CN_ERR_INVALID, "%s: %s", sb.data, cn_ctx_error(ctx));
      /* a body's errors are positioned in it; the shape errors of materialization are not */
      if (!t)
        CHECK_MSG(strncmp(cn_ctx_error(ctx), "f.cnl:", 6) == 0, "%s: %s", sb.data,
                  cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
    cn_sbuf_free(&sb);
  }
  printf("body fuzz: %d created, %d applied, %d built, %d refused; calls by arity:", created,
         applied, built, refused);
  for (int n = 0; n <= FUZZ_MAX_ARITY; n++) printf(" %d", arities[n]);
  printf("\n");
  for (int n = 0; n <= FUZZ_MAX_ARITY; n++) CHECK_MSG(arities[n] > 100, "arity %d", n);
  CHECK(created > rounds / 4);
  CHECK(applied > rounds / 20);
  CHECK(built > rounds / 20);
  CHECK(refused > rounds / 4);
}

/* ---- Allocation failures ---- */

/* A function with a contraction, a constraint and elementwise statements, then a library op;
 * every allocation is made to fail in turn: the result is CN_ERR_NOMEM or the right values. */
static cn_status pipeline(cn_ctx *ctx, double *out) {
  cn_graph *g = cn_graph_create(ctx);
  if (!g) return cn_ctx_status(ctx);
  int64_t n = 5;
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *I = cn_tensor_data(g, "I", &d, (double[]){3, 1, 4, 1, 5}, 5);
  cn_tile_fn *f = cn_tile_fn_create(ctx, "f", 1, (const char *const[]){"I"},
                                    "I.bind_dims(N)\n"
                                    "O = TensorOutput((N + 1) / 2)\n"
                                    "O[i] >= I[2 * i + j]\n"
                                    "O.add_constraint(j < 2)\n"
                                    "return sigmoid(O - O) * 2 + O",
                                    NULL, 1, 1);
  cn_tensor *t = I && f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{I, 0}}) : NULL;
  cn_tensor *c = t ? cn_tile_cumsum(g, t) : NULL;
  cn_asgn *code = c ? cn_graph_forward(g, c) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "sweep") : NULL;
  if (!r) return cn_ctx_status(ctx);
  cn_status st = cn_routine_run(r);
  if (st == CN_OK) st = cn_node_get_values(cn_tensor_value(c), false, out, 3);
  cn_routine_free(r);
  return st;
}

static void test_allocation_failures(void) {
  int failures = 0, successes = 0;
  for (long n = 1; n < 20000 && successes < 3; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    double out[3] = {0};
    cn_status st = pipeline(ctx, out);
    if (st == CN_OK) {
      successes++;
      /* pools 3, 4, 5, each plus sigmoid(0) * 2 = 1; cumulated: 4, 9, 15 */
      CHECK_NEAR(out[0], 4, 1e-6);
      CHECK_NEAR(out[1], 9, 1e-6);
      CHECK_NEAR(out[2], 15, 1e-6);
    } else {
      failures++;
      CHECK_MSG(st == CN_ERR_NOMEM, "allocation %ld: status %d: %s", n, (int)st, cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
  }
  CHECK(failures > 50);
  CHECK(successes > 0);
}

int main(void) {
  test_reductions();
  test_max_pool_and_cumsum();
  test_convolutions();
  test_body_forms();
  test_elementwise();
  test_gradient();
  test_errors();
  test_body_end();
  test_body_fuzz();
  test_allocation_failures();
  CHECK_DONE();
}
