/* The tile-edsl examples as ready operations (issue 7 point 5), each written as the seed writes
 * it: a Tile function body (function.h) applied to the caller's tensors. A body's messages are
 * positioned in the body, named after the C function (e.g. "cn_tile_conv_1d:3:1: 'I' has 2
 * axes ... but bind_dims names 3").
 *
 * The seed's tutorial slips are corrected: its complex convolution reads `s0 * x1` for the first
 * spatial axis (x0 here), and its first average sizes Sum with TensorOutput() but indexes it
 * with y (average here is the merged global mean). */
#include "cannl.h"

static cn_tensor *run(cn_graph *g, const char *name, int n, const char *const *params,
                      const char *body, const cn_tile_arg *args) {
  if (!g) return NULL;
  cn_tile_fn *fn = cn_tile_fn_create(cn_graph_ctx(g), name, n, params, body, NULL, 1, 1);
  return fn ? cn_tile_fn_apply(g, fn, n, args) : NULL;
}

static const char *const one_tensor[1] = {"I"};

cn_tensor *cn_tile_sum_over_axis(cn_graph *g, cn_tensor *x) {
  return run(g, "cn_tile_sum_over_axis", 1, one_tensor,
             "M, N = TensorDims(2)\n"
             "m, n = TensorIndexes(2)\n"
             "I.bind_dims(M, N)\n"
             "O = TensorOutput(N)\n"
             "O[n] += I[m, n]\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}});
}

cn_tensor *cn_tile_max_over_axis(cn_graph *g, cn_tensor *x) {
  return run(g, "cn_tile_max_over_axis", 1, one_tensor,
             "M, N = TensorDims(2)\n"
             "m, n = TensorIndexes(2)\n"
             "I.bind_dims(M, N)\n"
             "O = TensorOutput(N)\n"
             "O[n] >= I[m, n]\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}});
}

cn_tensor *cn_tile_global_min(cn_graph *g, cn_tensor *x) {
  return run(g, "cn_tile_global_min", 1, one_tensor,
             "i, j, k = TensorIndexes(3)\n"
             "Neg = -I\n"
             "O_Neg = TensorOutput()\n"
             "O_Neg[()] >= Neg[i, j, k]\n"
             "O = -O_Neg\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}});
}

cn_tensor *cn_tile_average(cn_graph *g, cn_tensor *x) {
  return run(g, "cn_tile_average", 1, one_tensor,
             "X, Y = TensorDims(2)\n"
             "x, y = TensorIndexes(2)\n"
             "I.bind_dims(X, Y)\n"
             "Sum = TensorOutput()\n"
             "Sum[()] += I[x, y]\n"
             "return Sum / (X * Y)\n",
             (cn_tile_arg[]){{x, 0}});
}

cn_tensor *cn_tile_max_pool_1d(cn_graph *g, cn_tensor *x, bool round_up) {
  /* R = 1 rounds the output size up: the last pool then reads one cell (I[2i + 1] is out of
   * range and skipped) */
  return run(g, "cn_tile_max_pool_1d", 2, (const char *const[]){"I", "R"},
             "N = TensorDim()\n"
             "i, j = TensorIndexes(2)\n"
             "I.bind_dims(N)\n"
             "O = TensorOutput((N + R) // 2)\n"
             "O[i] >= I[2 * i + j]\n"
             "O.add_constraint(j < 2)\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}, {NULL, round_up}});
}

cn_tensor *cn_tile_cumsum(cn_graph *g, cn_tensor *x) {
  return run(g, "cn_tile_cumsum", 1, one_tensor,
             "N = TensorDim()\n"
             "i, k = TensorIndexes(2)\n"
             "I.bind_dims(N)\n"
             "O = TensorOutput(N)\n"
             "O[i] += I[k]\n"
             "O.add_constraint(i - k < N)\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}});
}

cn_tensor *cn_tile_conv_1d(cn_graph *g, cn_tensor *x, cn_tensor *kernel) {
  return run(g, "cn_tile_conv_1d", 2, (const char *const[]){"I", "K"},
             "N, X, KX, CI, CO = TensorDims(5)\n"
             "n, x, k, ci, co = TensorIndexes(5)\n"
             "I.bind_dims(N, X, CI)\n"
             "K.bind_dims(KX, CI, CO)\n"
             "O = TensorOutput(N, X - KX + 1, CO)\n"
             "O[n, x, co] += I[n, x + k, ci] * K[k, ci, co]\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}, {kernel, 0}});
}

cn_tensor *cn_tile_conv_2d_dilated(cn_graph *g, cn_tensor *x, cn_tensor *kernel, int64_t d0,
                                   int64_t d1) {
  return run(g, "cn_tile_conv_2d_dilated", 4, (const char *const[]){"I", "K", "d0", "d1"},
             "N, X, Y, KX, KY, CI, CO = TensorDims(7)\n"
             "n, x, y, kx, ky, ci, co = TensorIndexes(7)\n"
             "I.bind_dims(N, X, Y, CI)\n"
             "K.bind_dims(KX, KY, CI, CO)\n"
             "O = TensorOutput(N, X - d0 * (KX - 1), Y - d1 * (KY - 1), CO)\n"
             "O[n, x, y, co] += I[n, x + d0 * kx, y + d1 * ky, ci] * K[kx, ky, ci, co]\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}, {kernel, 0}, {NULL, d0}, {NULL, d1}});
}

cn_tensor *cn_tile_complex_conv_2d(cn_graph *g, cn_tensor *x, cn_tensor *kernel, int64_t s0,
                                   int64_t s1, int64_t d0, int64_t d1) {
  return run(g, "cn_tile_complex_conv_2d", 6,
             (const char *const[]){"I", "K", "s0", "s1", "d0", "d1"},
             "# \"same-lower\" autopadding\n"
             "N, G, GCI, GCO = TensorDims(4)\n"
             "X0, X1 = TensorDims(2)\n"
             "K0, K1 = TensorDims(2)\n"
             "n, g, gci, gco = TensorIndexes(4)\n"
             "x0, x1 = TensorIndexes(2)\n"
             "k0, k1 = TensorIndexes(2)\n"
             "I.bind_dims(N, X0, X1, G, GCI)\n"
             "K.bind_dims(K0, K1, G, GCI, GCO)\n"
             "# output spatial dims\n"
             "Y0 = (X0 + s0 - 1) // s0\n"
             "Y1 = (X1 + s1 - 1) // s1\n"
             "# effective kernel sizes after dilation\n"
             "EK0 = d0 * (K0 - 1) + 1\n"
             "EK1 = d1 * (K1 - 1) + 1\n"
             "# padding offsets\n"
             "P0 = ((Y0 - 1) * s0 + EK0 - X0) // 2\n"
             "P1 = ((Y1 - 1) * s1 + EK1 - X1) // 2\n"
             "O = TensorOutput(N, Y0, Y1, G, GCO)\n"
             "O[n, x0, x1, g, gco] += I[n, s0 * x0 + d0 * k0 - P0, s1 * x1 + d1 * k1 -\n"
             "                          P1, g, gci] * K[k0, k1, g, gci, gco]\n"
             "return O\n",
             (cn_tile_arg[]){{x, 0}, {kernel, 0}, {NULL, s0}, {NULL, s1}, {NULL, d0}, {NULL, d1}});
}
