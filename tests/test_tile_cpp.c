/* Tests of the C++ flavor of Tile functions (issue 13; tile-edsl gives every example in C++ and
 * in Python): each C++ example of the seed, as the seed writes it, is built next to its Python
 * twin, both are applied to the same inputs, and their values must agree bit for bit; the C++
 * results are also checked on both backends against values worked out by hand or by plain
 * loops here. The seed's complex convolution is written without std::vector and for loops
 * (scalar parameters and dims instead), which the flavor does not take. Then the flavor's forms
 * (a body without header, parameters taken from the header, comments, `Tensor X = ...`), its
 * positioned errors (FILE:LINE:COL, the line, a caret), the Python bodies that must stay
 * Python, and every allocation failing in turn. */
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

/* t's values (count cells) through the interpreter; false with a failed check otherwise. */
static bool values_of(cn_graph *g, cn_tensor *t, double *out, int64_t count) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "twin") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (!r) return false;
  bool ok = cn_routine_run(r) == CN_OK && cn_node_numel(cn_tensor_value(t)) == count &&
            cn_node_get_values(cn_tensor_value(t), false, out, (size_t)count) == CN_OK;
  CHECK_MSG(ok, "values: %s", cn_ctx_error(ctx));
  cn_routine_free(r);
  return ok;
}

/* The C++ text and the Python body of one example, named `name`, applied to args: the C++
 * result has `shape` and the `expected` values on both backends, and the Python twin's values
 * are the same bits. */
static void twins(cn_graph *g, const char *name, int n, const char *const *params,
                  const cn_tile_arg *args, const char *cpp, const char *python, const char *shape,
                  const double *expected, int64_t count) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tile_fn *fc = cn_tile_fn_create(ctx, name, n, params, cpp, "seed.cpp", 1, 1);
  CHECK_MSG(fc != NULL, "%s (C++): %s", name, cn_ctx_error(ctx));
  cn_tile_fn *fp = cn_tile_fn_create(ctx, name, n, params, python, "seed.py", 1, 1);
  CHECK_MSG(fp != NULL, "%s (Python): %s", name, cn_ctx_error(ctx));
  if (!fc || !fp) return;
  cn_tensor *tc = cn_tile_fn_apply(g, fc, n, args), *tp = cn_tile_fn_apply(g, fp, n, args);
  CHECK_MSG(tc && tp, "%s: %s", name, cn_ctx_error(ctx));
  if (!tc || !tp) return;
  check_forward(g, name, tc, shape, expected, count, 0, NULL);
  CHECK_STR(cn_tensor_shape(tp), shape);
  double *vc = calloc((size_t)count, sizeof *vc), *vp = calloc((size_t)count, sizeof *vp);
  if (vc && vp && values_of(g, tc, vc, count) && values_of(g, tp, vp, count))
    CHECK_MSG(memcmp(vc, vp, sizeof *vc * (size_t)count) == 0, "%s: C++ and Python differ", name);
  free(vc);
  free(vp);
}

static const char *const one_tensor[1] = {"I"};

/* ---- The seed's examples, in both flavors ---- */

static void test_reductions(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* I = [[1, 5, 3], [4, 2, 6]]: column sums 5, 7, 9; column maxima 4, 5, 6 */
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, (double[]){1, 5, 3, 4, 2, 6}, 6);
  cn_tile_arg a[1] = {{I, 0}};
  twins(g, "sum_over_axis", 1, one_tensor, a,
        "Tensor sum_over_axis(const Tensor& I) {\n"
        "  TensorDim M, N;\n"
        "  TensorIndex m, n;\n"
        "  I.bind_dims(M, N);\n"
        "  auto O = TensorOutput(N);\n"
        "  O(n) += I(m, n); // contraction\n"
        "  return O;\n"
        "}\n",
        "  M, N = TensorDims(2)\n"
        "  m, n = TensorIndexes(2)\n"
        "  I.bind_dims(M, N)\n"
        "  O = TensorOutput(N)\n"
        "  # contraction\n"
        "  O[n] += I[m, n]\n"
        "  return O\n",
        "|->3", (double[]){5, 7, 9}, 3);
  /* the seed's TensorOutput(N + 1): a 0 after the sums */
  twins(g, "sum_over_axis", 1, one_tensor, a,
        "Tensor sum_over_axis(const Tensor& I) {\n"
        "  TensorDim M, N;\n"
        "  TensorIndex m, n;\n"
        "  I.bind_dims(M, N);\n"
        "  auto O = TensorOutput(N + 1);\n"
        "  O(n) += I(m, n);\n"
        "  return O;\n"
        "}\n",
        "M, N = TensorDims(2)\n"
        "m, n = TensorIndexes(2)\n"
        "I.bind_dims(M, N)\n"
        "O = TensorOutput(N + 1)\n"
        "O[n] += I[m, n]\n"
        "return O\n",
        "|->4", (double[]){5, 7, 9, 0}, 4);
  twins(g, "max_over_axis", 1, one_tensor, a,
        "Tensor max_over_axis(const Tensor& I) {\n"
        "  TensorDim M, N;\n"
        "  TensorIndex m, n;\n"
        "  I.bind_dims(M, N);\n"
        "  auto O = TensorOutput(N);\n"
        "  O(n) >= I(m, n);\n"
        "  return O;\n"
        "}\n",
        "  M, N = TensorDims(2)\n"
        "  m, n = TensorIndexes(2)\n"
        "  I.bind_dims(M, N)\n"
        "  O = TensorOutput(N)\n"
        "  O[n] >= I[m, n]\n"
        "  return O\n",
        "|->3", (double[]){4, 5, 6}, 3);
  /* A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [2, 3]]: [[7, 11], [16, 23]] */
  cn_tensor *A = data(g, "A", 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, 6);
  cn_tensor *B = data(g, "B", 2, (int64_t[]){3, 2}, (double[]){1, 0, 0, 1, 2, 3}, 6);
  twins(g, "matmul", 2, (const char *const[]){"A", "B"}, (cn_tile_arg[]){{A, 0}, {B, 0}},
        "Tensor matmul(const Tensor& A, const Tensor& B) {\n"
        "  TensorDim I, J, K;\n"
        "  TensorIndex i, j, k;\n"
        "  A.bind_dims(I, K);\n"
        "  B.bind_dims(K, J);\n"
        "  auto C = TensorOutput(I, J);\n"
        "  C(i, j) += A(i, k) * B(k, j);\n"
        "  return C;\n"
        "}\n",
        "  I, J, K = TensorDims(3)\n"
        "  i, j, k = TensorIndexes(3)\n"
        "  A.bind_dims(I, K)\n"
        "  B.bind_dims(K, J)\n"
        "  C = TensorOutput(I, J)\n"
        "  C[i, j] += A[i, k] * B[k, j]\n"
        "  return C\n",
        "|->2,2", (double[]){7, 11, 16, 23}, 4);
  /* the global min of a 2x2x2 tensor through -max(-I) */
  cn_tensor *C = data(g, "C", 3, (int64_t[]){2, 2, 2}, (double[]){3, -1, 4, 1, -5, 9, 2, 6}, 8);
  twins(g, "global_min", 1, one_tensor, (cn_tile_arg[]){{C, 0}},
        "Tensor global_min(const Tensor& I) {\n"
        "  TensorIndex i, j, k;\n"
        "  auto Neg = -I;\n"
        "  auto O_Neg = TensorOutput();\n"
        "  O_Neg() >= Neg(i, j, k);\n"
        "  auto O = -O_Neg;\n"
        "  return O;\n"
        "}\n",
        "  i, j, k = TensorIndexes(3)\n"
        "  Neg = -I\n"
        "  O_Neg = TensorOutput()\n"
        "  O_Neg[()] >= Neg[i, j, k]\n"
        "  O = -O_Neg\n"
        "  return O\n",
        "|->", (double[]){-5}, 1);
  cn_ctx_destroy(ctx);
}

static void test_averages(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* [[1, 2], [3, 6]]: the sum 12, over X = 2 then Y = 2 (or over X * Y) is 3 */
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 6}, 4);
  cn_tile_arg a[1] = {{I, 0}};
  twins(g, "avg", 1, one_tensor, a,
        "Tensor avg(const Tensor& I) {\n"
        "  TensorDim X, Y;\n"
        "  TensorIndex x, y;\n"
        "  I.bind_dims(X, Y);\n"
        "  auto Sum = TensorOutput();\n"
        "  Sum() += I(x, y);\n"
        "  PartialMean = Sum / X;\n"
        "  return PartialMean / Y;\n"
        "}\n",
        "  X, Y = TensorDims(2)\n"
        "  x, y = TensorIndexes(2)\n"
        "  I.bind_dims(X, Y)\n"
        "  Sum = TensorOutput()\n"
        "  Sum[()] += I[x, y]\n"
        "  PartialMean = Sum / X\n"
        "  return PartialMean / Y\n",
        "|->", (double[]){3}, 1);
  twins(g, "avg", 1, one_tensor, a,
        "Tensor avg(const Tensor& I) {\n"
        "  TensorDim X, Y;\n"
        "  TensorIndex x, y;\n"
        "  I.bind_dims(X, Y);\n"
        "  auto Sum = TensorOutput();\n"
        "  Sum() += I(x, y);\n"
        "  return Sum / (X * Y);\n"
        "}\n",
        "  X, Y = TensorDims(2)\n"
        "  x, y = TensorIndexes(2)\n"
        "  I.bind_dims(X, Y)\n"
        "  Sum = TensorOutput()\n"
        "  Sum[()] += I[x, y]\n"
        "  return Sum / (X * Y)\n",
        "|->", (double[]){3}, 1);
  /* the seed's first average sizes Sum with TensorOutput() but writes Sum(y): a slip of the
   * tutorial, refused by both flavors at the contraction, in the same words */
  const char *cpp = "Tensor avg(const Tensor& I) {\n"
                    "  TensorDim X, Y;\n"
                    "  TensorIndex x, y;\n"
                    "  I.bind_dims(X, Y);\n"
                    "  auto Sum = TensorOutput();\n"
                    "  Sum(y) += I(x, y);\n"
                    "  return Sum / X;\n"
                    "}\n";
  const char *python = "X, Y = TensorDims(2)\n"
                       "x, y = TensorIndexes(2)\n"
                       "I.bind_dims(X, Y)\n"
                       "Sum = TensorOutput()\n"
                       "Sum[y] += I[x, y]\n"
                       "return Sum / X\n";
  char messages[2][512];
  for (int k = 0; k < 2; k++) {
    cn_tile_fn *f = cn_tile_fn_create(ctx, "avg", 1, one_tensor, k ? python : cpp, "avg", 1, 1);
    CHECK(f != NULL);
    CHECK(f && cn_tile_fn_apply(g, f, 1, a) == NULL);
    snprintf(messages[k], sizeof messages[k], "%s", cn_ctx_error(ctx));
  }
  CHECK_STR(messages[0], "avg:6:3: 'Sum' has 0 dims (TensorOutput) but 1 indices\n"
                         "  Sum(y) += I(x, y);\n"
                         "  ^");
  CHECK_STR(messages[1], "avg:5:1: 'Sum' has 0 dims (TensorOutput) but 1 indices\n"
                         "Sum[y] += I[x, y]\n"
                         "^");
  cn_ctx_destroy(ctx);
}

static void test_pools_skip_cumsum(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *I = data(g, "I", 1, (int64_t[]){5}, (double[]){3, 1, 4, 1, 5}, 5);
  cn_tile_arg a[1] = {{I, 0}};
  /* without j < 2 every output reaches every cell: each is the global max, 5 */
  twins(g, "wrong_max_pool_1d", 1, one_tensor, a,
        "Tensor wrong_max_pool_1d(const Tensor& I) {\n"
        "  TensorDim N;\n"
        "  TensorIndex i, j;\n"
        "  I.bind_dims(N);\n"
        "  auto O = TensorOutput(N / 2);\n"
        "  O(i) >= I(2 * i + j);\n"
        "  return O;\n"
        "}\n",
        "   N = TensorDim()\n"
        "   i, j = TensorIndexes(2)\n"
        "   I.bind_dims(N)\n"
        "   O = TensorOutput(N // 2)\n"
        "   O[i] >= I[2 * i + j]\n"
        "   return O\n",
        "|->2", (double[]){5, 5}, 2);
  /* N = 5 rounded up: max(3, 1), max(4, 1), max(5) (I[5] is out of range) */
  twins(g, "max_pool_1d", 1, one_tensor, a,
        "Tensor max_pool_1d(const Tensor& I) {\n"
        "  TensorDim N;\n"
        "  TensorIndex i, j;\n"
        "  I.bind_dims(N);\n"
        "  auto O = TensorOutput((N + 1) / 2);\n"
        "  O(i) >= I(2 * i + j);\n"
        "  O.add_constraint(j < 2);\n"
        "  return O;\n"
        "}\n",
        "  N = TensorDim()\n"
        "  i, j = TensorIndexes(2)\n"
        "  I.bind_dims(N)\n"
        "  O = TensorOutput((N + 1) // 2)\n"
        "  O[i] >= I[2 * i + j]\n"
        "  O.add_constraint(j < 2)\n"
        "  return O\n",
        "|->3", (double[]){3, 4, 5}, 3);
  /* I = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]: O[0] = 1 + 2 + 3, O[2] = 7 + 8 + 9, O[1] unwritten */
  cn_tensor *S = data(g, "S", 2, (int64_t[]){3, 3}, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9);
  twins(g, "skip", 1, one_tensor, (cn_tile_arg[]){{S, 0}},
        "Tensor skip(const Tensor& I) {\n"
        "  TensorDim M, N;\n"
        "  TensorIndex i, j;\n"
        "  I.bind_dims(M, N);\n"
        "  auto O = TensorOutput(N);\n"
        "  O(2 * i) += I(2 * i, j);\n"
        "  return O;\n"
        "}\n",
        "  M, N = TensorDims(2)\n"
        "  i, j = TensorIndexes(2)\n"
        "  I.bind_dims(M, N)\n"
        "  O = TensorOutput(N)\n"
        "  O[2 * i] += I[2 * i, j]\n"
        "  return O\n",
        "|->3", (double[]){6, 0, 24}, 3);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  twins(g, "csum", 1, one_tensor, (cn_tile_arg[]){{V, 0}},
        "Tensor csum(const Tensor& I) {\n"
        "  TensorDim N;\n"
        "  TensorIndex i, k;\n"
        "  I.bind_dims(N);\n"
        "  auto O = TensorOutput(N);\n"
        "  O(i) += I(k);\n"
        "  O.add_constraint(i - k < N);\n"
        "  return O;\n"
        "}\n",
        "  N = TensorDim()\n"
        "  i, k = TensorIndexes(2)\n"
        "  I.bind_dims(N)\n"
        "  O = TensorOutput(N)\n"
        "  O[i] += I[k]\n"
        "  O.add_constraint(i - k < N)\n"
        "  return O\n",
        "|->4", (double[]){1, 3, 6, 10}, 4);
  cn_ctx_destroy(ctx);
}

/* Small integers, so that every sum is exact whatever its order. */
static void fill(double *v, int n, int seed) {
  for (int i = 0; i < n; i++) v[i] = (double)((i * 7 + seed) % 11 - 5);
}

static int64_t floor_div(int64_t a, int64_t b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static void test_convolutions(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const char *const two[2] = {"I", "K"};
  /* conv_1d: I [1, 5, 2], K [2, 2, 3] -> [1, 4, 3], O[0, x, co] = sum I[0, x + k, ci] K[k, ci, co]
   */
  double i1[10], k1[12], o1[12] = {0};
  fill(i1, 10, 1), fill(k1, 12, 4);
  for (int x = 0; x < 4; x++)
    for (int co = 0; co < 3; co++)
      for (int k = 0; k < 2; k++)
        for (int ci = 0; ci < 2; ci++)
          o1[x * 3 + co] += i1[(x + k) * 2 + ci] * k1[k * 6 + ci * 3 + co];
  cn_tensor *I1 = data(g, "I1", 3, (int64_t[]){1, 5, 2}, i1, 10);
  cn_tensor *K1 = data(g, "K1", 3, (int64_t[]){2, 2, 3}, k1, 12);
  twins(g, "conv_1d", 2, two, (cn_tile_arg[]){{I1, 0}, {K1, 0}},
        "Tensor conv_1d(const Tensor& I, const Tensor& K) {\n"
        "  TensorDim N, X, KX, CI, CO;\n"
        "  TensorIndex n, x, k, ci, co;\n"
        "  I.bind_dims(N, X, CI);\n"
        "  K.bind_dims(KX, CI, CO);\n"
        "  auto O = TensorOutput(N, X - KX + 1, CO);\n"
        "  O(n, x, co) += I(n, x + k, ci) * K(k, ci, co);\n"
        "  return O;\n"
        "}\n",
        "  N, X, KX, CI, CO = TensorDims(5)\n"
        "  n, x, k, ci, co = TensorIndexes(5)\n"
        "  I.bind_dims(N, X, CI)\n"
        "  K.bind_dims(KX, CI, CO)\n"
        "  O = TensorOutput(N, X - KX + 1, CO)\n"
        "  O[n, x, co] += I[n, x + k, ci] * K[k, ci, co]\n"
        "  return O\n",
        "|->1,4,3", o1, 12);
  /* conv_2d dilated (2, 3): I [1, 5, 7, 2], K [2, 2, 2, 2] -> [1, 3, 4, 2] */
  double i2[70], k2[16], o2[24] = {0};
  fill(i2, 70, 2), fill(k2, 16, 5);
  for (int x = 0; x < 3; x++)
    for (int y = 0; y < 4; y++)
      for (int co = 0; co < 2; co++)
        for (int kx = 0; kx < 2; kx++)
          for (int ky = 0; ky < 2; ky++)
            for (int ci = 0; ci < 2; ci++)
              o2[(x * 4 + y) * 2 + co] += i2[((x + 2 * kx) * 7 + y + 3 * ky) * 2 + ci] *
                                          k2[((kx * 2 + ky) * 2 + ci) * 2 + co];
  cn_tensor *I2 = data(g, "I2", 4, (int64_t[]){1, 5, 7, 2}, i2, 70);
  cn_tensor *K2 = data(g, "K2", 4, (int64_t[]){2, 2, 2, 2}, k2, 16);
  twins(g, "conv_2d", 2, two, (cn_tile_arg[]){{I2, 0}, {K2, 0}},
        "Tensor conv_2d(const Tensor& I, const Tensor& K) {\n"
        "  TensorDim N, X, Y, KX, KY, CI, CO;\n"
        "  TensorIndex n, x, y, kx, ky, ci, co;\n"
        "  I.bind_dims(N, X, Y, CI);\n"
        "  K.bind_dims(KX, KY, CI, CO);\n"
        "  auto O = TensorOutput(N, X - 2 * (KX - 1), Y - 3 * (KY - 1), CO);\n"
        "  O(n, x, y, co) += I(n, x + 2 * kx, y + 3 * ky, ci) * K(kx, ky, ci, co);\n"
        "  return O;\n"
        "}\n",
        "  N, X, Y, KX, KY, CI, CO = TensorDims(7)\n"
        "  n, x, y, kx, ky, ci, co = TensorIndexes(7)\n"
        "  I.bind_dims(N, X, Y, CI)\n"
        "  K.bind_dims(KX, KY, CI, CO)\n"
        "  O = TensorOutput(N, X - 2 * (KX - 1), Y - 3 * (KY - 1), CO)\n"
        "  O[n, x, y, co] += I[n, x + 2 * kx, y + 3 * ky, ci] * K[kx, ky, ci, co]\n"
        "  return O\n",
        "|->1,3,4,2", o2, 24);
  /* the complex convolution, strides (2, 1), dilations (1, 2): I [1, 5, 6, 2, 2] and
   * K [3, 2, 2, 2, 3]; Y = (3, 6), EK = (3, 3), P = (1, 1) -> [1, 3, 6, 2, 3]. The seed's C++
   * with its vectors spelled out (s0, s1, X0, X1, ...), and its Python with x0 for the slip
   * `s0 * x1` (as cn_tile_complex_conv_2d) */
  double i3[120], k3[72], o3[108] = {0};
  fill(i3, 120, 3), fill(k3, 72, 6);
  for (int y0 = 0; y0 < 3; y0++)
    for (int y1 = 0; y1 < 6; y1++)
      for (int gr = 0; gr < 2; gr++)
        for (int co = 0; co < 3; co++)
          for (int q0 = 0; q0 < 3; q0++)
            for (int q1 = 0; q1 < 2; q1++)
              for (int ci = 0; ci < 2; ci++) {
                int64_t a0 = 2 * y0 + q0 - floor_div((3 - 1) * 2 + 3 - 5, 2);
                int64_t a1 = y1 + 2 * q1 - floor_div((6 - 1) * 1 + 3 - 6, 2);
                if (a0 < 0 || a0 >= 5 || a1 < 0 || a1 >= 6) continue;
                o3[((y0 * 6 + y1) * 2 + gr) * 3 + co] +=
                    i3[((a0 * 6 + a1) * 2 + gr) * 2 + ci] *
                    k3[(((q0 * 2 + q1) * 2 + gr) * 2 + ci) * 3 + co];
              }
  cn_tensor *I3 = data(g, "I3", 5, (int64_t[]){1, 5, 6, 2, 2}, i3, 120);
  cn_tensor *K3 = data(g, "K3", 5, (int64_t[]){3, 2, 2, 2, 3}, k3, 72);
  twins(g, "complex_conv_2d", 6, (const char *const[]){"I", "K", "s0", "s1", "d0", "d1"},
        (cn_tile_arg[]){{I3, 0}, {K3, 0}, {NULL, 2}, {NULL, 1}, {NULL, 1}, {NULL, 2}},
        "Tensor complex_conv_2d(\n"
        "  const Tensor& I,\n"
        "  const Tensor& K,\n"
        "  int64_t s0, int64_t s1,  // stride coeffs\n"
        "  int64_t d0, int64_t d1   // dilation coeffs\n"
        ") {\n"
        "    // \"same-lower\" autopadding will be applied\n"
        "    TensorDim N, G, GCI, GCO;\n"
        "    TensorDim X0, X1;\n"
        "    TensorDim K0, K1;\n"
        "    TensorIndex n, g, gci, gco;\n"
        "    TensorIndex x0, x1;\n"
        "    TensorIndex k0, k1;\n"
        "    I.bind_dims(N, X0, X1, G, GCI);\n"
        "    K.bind_dims(K0, K1, G, GCI, GCO);\n"
        "    // Compute output spatial dimensions\n"
        "    auto Y0 = (X0 + s0 - 1) / s0;\n"
        "    auto Y1 = (X1 + s1 - 1) / s1;\n"
        "    // Compute the effective kernel size after dilation\n"
        "    auto EK0 = d0 * (K0 - 1) + 1;\n"
        "    auto EK1 = d1 * (K1 - 1) + 1;\n"
        "    // Compute the padding offset\n"
        "    auto P0 = ((Y0 - 1) * s0 + EK0 - X0) / 2;\n"
        "    auto P1 = ((Y1 - 1) * s1 + EK1 - X1) / 2;\n"
        "    // Specify the output size\n"
        "    auto O = TensorOutput(N, Y0, Y1, G, GCO);\n"
        "    // Compute the convolution\n"
        "    O(n, x0, x1, g, gco) +=\n"
        "      I(n, s0*x0 + d0*k0 - P0, s1*x1 + d1*k1 - P1, g, gci) *\n"
        "      K(k0, k1, g, gci, gco);\n"
        "    return O;\n"
        "}\n",
        "        # \"same-lower\" autopadding will be applied\n"
        "        N, G, GCI, GCO = TensorDims(4)\n"
        "        X0, X1 = TensorDims(2)\n"
        "        K0, K1 = TensorDims(2)\n"
        "        n, g, gci, gco = TensorIndexes(4)\n"
        "        x0, x1 = TensorIndexes(2)\n"
        "        k0, k1 = TensorIndexes(2)\n"
        "        I.bind_dims(N, X0, X1, G, GCI)\n"
        "        K.bind_dims(K0, K1, G, GCI, GCO)\n"
        "\n"
        "        # Compute output spatial dimensions\n"
        "        Y0 = (X0 + s0 - 1) // s0\n"
        "        Y1 = (X1 + s1 - 1) // s1\n"
        "\n"
        "        #Compute the effective kernel size after dilation\n"
        "        EK0 = d0 * (K0 - 1) + 1\n"
        "        EK1 = d1 * (K1 - 1) + 1\n"
        "\n"
        "        #Compute the padding offset\n"
        "        P0 = ((Y0 - 1) * s0 + EK0 - X0) // 2\n"
        "        P1 = ((Y1 - 1) * s1 + EK1 - X1) // 2\n"
        "\n"
        "        # Specify the output size\n"
        "        O = TensorOutput(N, Y0, Y1, G, GCO)\n"
        "\n"
        "        # Compute the convolution\n"
        "        O[n, x0, x1, g, gco] += I[n, s0 * x0 + d0 * k0 - P0, s1 * x1 + d1 * k1 -\n"
        "                                  P1, g, gci] * K[k0, k1, g, gci, gco]\n"
        "        return O\n",
        "|->1,3,6,2,3", o3, 108);
  /* a cell by hand: O[0, 0, 0, 0, 0] reads I at (2*0 + k0 - 1, 0 + 2*k1 - 1): only k0 = 1, 2 and
   * k1 = 1 are in range */
  double by_hand = 0;
  for (int q0 = 1; q0 < 3; q0++)
    for (int ci = 0; ci < 2; ci++)
      by_hand +=
          i3[(((q0 - 1) * 6 + 1) * 2 + 0) * 2 + ci] * k3[(((q0 * 2 + 1) * 2 + 0) * 2 + ci) * 3];
  CHECK_NEAR(o3[0], by_hand, 0);
  cn_ctx_destroy(ctx);
}

/* ---- The flavor's forms ---- */

static void test_forms(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, (double[]){1, 5, 3, 4, 2, 6}, 6);
  /* the one-line example, its parameters taken from the header (none given), index
   * variables undeclared (lower-case names bound to nothing are indices) */
  cn_tile_fn *f =
      cn_tile_fn_create(ctx, "f", 0, NULL,
                        "Tensor f(const Tensor& I) { TensorDim M, N; I.bind_dims(M, N); "
                        "auto O = TensorOutput(N); O(n) += I(m, n); return O; }",
                        "f.cpp", 1, 1);
  CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
  check_forward(g, "one line", f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{I, 0}}) : NULL,
                "|->3", (double[]){5, 7, 9}, 3, 0, NULL);
  /* a body without header: statements over lines, block comments, `Tensor X = ...`, an integer
   * parameter; O[i] = max(I[0, i], I[1, i]) * s with s = 2: 8, 10, 12 */
  f = cn_tile_fn_create(ctx, "g", 2, (const char *const[]){"I", "s"},
                        "/* max over the rows,\n"
                        "   then scaled */\n"
                        "I.bind_dims(M, N);\n"
                        "Tensor O = TensorOutput(\n"
                        "  N);\n"
                        "O(i) >= I(j,\n"
                        "          i);\n"
                        "Tensor R = O * s; return R;",
                        "g.cpp", 1, 1);
  CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
  check_forward(g, "no header",
                f ? cn_tile_fn_apply(g, f, 2, (cn_tile_arg[]){{I, 0}, {NULL, 2}}) : NULL, "|->3",
                (double[]){8, 10, 12}, 3, 0, NULL);
  /* `;`-terminated statements with no C++ construct are read as Python, the same way */
  f = cn_tile_fn_create(ctx, "h", 1, one_tensor,
                        "I.bind_dims(M, N);\nO = TensorOutput(N);\nO(n) += I(m, n);\nreturn O;",
                        "h", 1, 1);
  CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
  check_forward(g, "Python with ';'", f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{I, 0}}) : NULL,
                "|->3", (double[]){5, 7, 9}, 3, 0, NULL);
  /* a Python `//` is floor division, not a comment: O has 7 // 2 = 3 cells */
  f = cn_tile_fn_create(ctx, "h", 1, one_tensor, "O = TensorOutput(7 // 2)\nO[i] += I[0, i]\nO",
                        "h", 1, 1);
  CHECK_MSG(f != NULL, "%s", cn_ctx_error(ctx));
  check_forward(g, "Python //", f ? cn_tile_fn_apply(g, f, 1, (cn_tile_arg[]){{I, 0}}) : NULL,
                "|->3", (double[]){1, 5, 3}, 3, 0, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Errors ---- */

/* Creating (or, when create succeeds, applying to args) fails with exactly `message`. */
static void check_error(cn_graph *g, const char *name, int n, const char *const *params,
                        const cn_tile_arg *args, const char *body, const char *message) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tile_fn *f = cn_tile_fn_create(ctx, name, n, params, body, "f.cnl", 10, 5);
  cn_tensor *t = f ? cn_tile_fn_apply(g, f, n, args) : NULL;
  CHECK_MSG(t == NULL, "accepted: %s", body);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), message);
}

static void test_errors(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}, 4);
  cn_tile_arg av[1] = {{V, 0}};
  const char *const pv[1] = {"V"};
  /* the body starts at line 10, column 5 of f.cnl */
  check_error(g, "f", 1, pv, av,
              "Tensor f(const Tensor& V) {\n"
              "  V.bind_dims(N);\n"
              "  auto O = TensorOutput(N);\n"
              "  O(i) += V(i);\n"
              "  return O\n"
              "}",
              "f.cnl:14:11: missing ';' at the end of the statement\n  return O\n          ^");
  check_error(
      g, "f", 1, pv, av,
      "Tensor f(const Tensor& V) {\n"
      "  TensorDim N;\n"
      "  V.bind_dims(N)\n"
      "  return V;\n"
      "}",
      "f.cnl:13:3: unexpected 'return', expected the end of the statement\n  return V;\n  ^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V) {\n  return V;\n",
              "f.cnl:12:1: missing '}' at the end of the function\n\n^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V) { return V; } V",
              "f.cnl:10:45: unexpected 'V', expected nothing after the function's closing '}'\n"
              "    Tensor f(const Tensor& V) { return V; } V\n"
              "                                            ^");
  check_error(g, "f", 1, pv, av, "Tensor g(const Tensor& V) { return V; }",
              "f.cnl:10:12: the header names 'g' but the function is 'f'\n"
              "    Tensor g(const Tensor& V) { return V; }\n"
              "           ^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& W) { return W; }",
              "f.cnl:10:28: parameter 1 is 'W' here but 'V' in the function\n"
              "    Tensor f(const Tensor& W) { return W; }\n"
              "                           ^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V, int s) { return V; }",
              "f.cnl:10:12: the header has 2 parameters but the function 1\n"
              "    Tensor f(const Tensor& V, int s) { return V; }\n"
              "           ^");
  check_error(g, "f", 0, NULL, NULL, "Tensor f(const Tensor& V, const Tensor& V) { return V; }",
              "f.cnl:10:45: parameter 'V' is repeated\n"
              "    Tensor f(const Tensor& V, const Tensor& V) { return V; }\n"
              "                                            ^");
  check_error(g, "f", 0, NULL, NULL,
              "Tensor f(const Tensor& V,\n         const std::vector<size_t>& s) { return V; }",
              "f.cnl:11:16: std::vector parameters are not supported: pass each element as an "
              "integer parameter (int64_t s0, int64_t s1)\n"
              "         const std::vector<size_t>& s) { return V; }\n"
              "               ^");
  check_error(g, "f", 0, NULL, NULL, "Tensor f(float V) { return V; }",
              "f.cnl:10:14: unexpected 'float', expected a parameter type (const Tensor&, or int, "
              "int64_t, size_t, long or TensorDim for an integer)\n"
              "    Tensor f(float V) { return V; }\n"
              "             ^");
  check_error(g, "f", 1, pv, av, "TensorDim N;\nV.bind_dims(N);\nV / N;",
              "f.cnl:12:1: an expression statement does nothing: return the result with `return "
              "EXPR;`\nV / N;\n^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V) { TensorDim; return V; }",
              "f.cnl:10:42: unexpected end of statement, expected a name\n"
              "    Tensor f(const Tensor& V) { TensorDim; return V; }\n"
              "                                         ^");
  check_error(g, "f", 1, pv, av, "TensorDim N M;\nreturn V;",
              "f.cnl:10:17: unexpected 'M', expected ',' or ';'\n    TensorDim N M;\n"
              "                ^");
  check_error(g, "f", 1, pv, av, "auto O TensorOutput(N);\nreturn V;",
              "f.cnl:10:12: unexpected 'TensorOutput', expected '='\n"
              "    auto O TensorOutput(N);\n"
              "           ^");
  check_error(g, "f", 1, pv, av, "auto O = -V; # negated\nreturn O;",
              "f.cnl:10:18: unexpected character '#'\n    auto O = -V; # negated\n"
              "                 ^");
  check_error(g, "f", 1, pv, av, "auto O = -V; /* negated\nreturn O;",
              "f.cnl:10:18: unterminated comment\n    auto O = -V; /* negated\n"
              "                 ^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V /* the input",
              "f.cnl:10:30: unterminated comment\n"
              "    Tensor f(const Tensor& V /* the input\n"
              "                             ^");
  check_error(g, "f", 1, pv, av, "Tensor f(const Tensor& V) {\n  auto O = -V;\n}",
              "f.cnl:12:1: the body has no result: end it with `return NAME;`\n}\n^");
  /* errors found when applying are positioned the same way */
  check_error(g, "f", 1, pv, av,
              "Tensor f(const Tensor& V) {\n"
              "  TensorDim M, N;\n"
              "  V.bind_dims(M, N); // V has one axis\n"
              "  return V;\n"
              "}",
              "f.cnl:12:3: 'V' has 1 axes (|->4) but bind_dims names 2\n"
              "  V.bind_dims(M, N); // V has one axis\n"
              "  ^");
  /* a header's parameter types are checked against the arguments */
  check_error(g, "f", 2, (const char *const[]){"V", "s"}, (cn_tile_arg[]){{V, 0}, {V, 0}},
              "Tensor f(const Tensor& V, int64_t s) { return V * s; }",
              "tile function 'f': argument 2 ('s') must be an integer (its header)");
  check_error(g, "f", 1, pv, (cn_tile_arg[]){{NULL, 3}}, "Tensor f(const Tensor& V) { return V; }",
              "tile function 'f': argument 1 ('V') must be a tensor (its header)");
  /* Python keeps its messages: `auto` is no keyword there */
  check_error(g, "f", 1, pv, av, "auto = V\nreturn auto +",
              "f.cnl:11:14: unexpected end of statement, expected an integer, a name or '('\n"
              "return auto +\n"
              "             ^");
  cn_ctx_destroy(ctx);
}

/* ---- Allocation failures ---- */

/* A header whose parameters become the function's, comments and a contraction over lines; every
 * allocation is made to fail in turn: CN_ERR_NOMEM or the right values. */
static cn_status pipeline(cn_ctx *ctx, double *out) {
  cn_graph *g = cn_graph_create(ctx);
  if (!g) return cn_ctx_status(ctx);
  int64_t n = 5;
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  cn_tensor *I = cn_tensor_data(g, "I", &d, (double[]){3, 1, 4, 1, 5}, 5);
  cn_tile_fn *f = cn_tile_fn_create(ctx, "pool", 0, NULL,
                                    "Tensor pool(const Tensor& I, int64_t r) {\n"
                                    "  TensorDim N; /* rounded by r */\n"
                                    "  TensorIndex i, j;\n"
                                    "  I.bind_dims(N);\n"
                                    "  auto O = TensorOutput((N + r) / 2);\n"
                                    "  O(i) >=\n"
                                    "    I(2 * i + j); // pairs\n"
                                    "  O.add_constraint(j < 2);\n"
                                    "  return O;\n"
                                    "}",
                                    NULL, 1, 1);
  cn_tensor *t = I && f ? cn_tile_fn_apply(g, f, 2, (cn_tile_arg[]){{I, 0}, {NULL, 1}}) : NULL;
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "sweep") : NULL;
  if (!r) return cn_ctx_status(ctx);
  cn_status st = cn_routine_run(r);
  if (st == CN_OK) st = cn_node_get_values(cn_tensor_value(t), false, out, 3);
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
      /* max(3, 1), max(4, 1), max(5) */
      CHECK_NEAR(out[0], 3, 0);
      CHECK_NEAR(out[1], 4, 0);
      CHECK_NEAR(out[2], 5, 0);
    } else {
      failures++;
      CHECK_MSG(st == CN_ERR_NOMEM, "allocation %ld: status %d: %s", n, (int)st, cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
  }
  CHECK(failures > 20);
  CHECK(successes > 0);
}

int main(void) {
  test_reductions();
  test_averages();
  test_pools_skip_cumsum();
  test_convolutions();
  test_forms();
  test_errors();
  test_allocation_failures();
  CHECK_DONE();
}
