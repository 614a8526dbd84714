/* The operation library (src/tensor/library.c): values of every operation against hand
 * computations or plain C loops on the interpreter and on generated C, finite-difference gradient
 * checks in double precision (mean asymmetry |(gn - ga) / (gn + ga)| <= 1e-4 over the parameter
 * cells), initializer statistics, and argument errors. */
#include "check.h"

#include "cannl.h"

#include <stdlib.h>

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};

#define AXES(...)                                                                                  \
  ((cn_axes){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__},  \
             NULL})
#define NONE ((cn_axes){0, NULL, NULL})

/* A fixed stream of values in [-1, 1) (64-bit LCG, top bits). */
static uint64_t rng_state = 0x853c49e6748fea9bull;
static double rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static int64_t numel_of(const cn_dims *d) {
  int64_t n = 1;
  const cn_axes *rows[3] = {&d->batch, &d->input, &d->output};
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < rows[k]->n; a++) n *= rows[k]->dims[a];
  return n;
}

static cn_tensor *data(cn_graph *g, const char *label, cn_dims d, const double *v) {
  return cn_tensor_data(g, label, &d, v, (size_t)numel_of(&d));
}

/* Runs an assignments tree once; false (with a failed check) on any error. */
static bool run(cn_ctx *ctx, const cn_asgn *a, cn_backend_kind b, const char *name) {
  CHECK_MSG(a != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!a) return false;
  cn_routine *r = cn_routine_compile(ctx, a, b, name);
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!r) return false;
  cn_status st = cn_routine_run(r);
  CHECK_MSG(st == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine_free(r);
  return st == CN_OK;
}

/* Computes t (forward code) and reads its values: the count, or -1. */
static int64_t eval(cn_graph *g, cn_tensor *t, cn_backend_kind b, double *out, size_t cap) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(ctx));
  if (!t || !run(ctx, cn_graph_forward(g, t), b, "eval")) return -1;
  cn_node *n = cn_tensor_value(t);
  int64_t k = cn_node_numel(n);
  if ((size_t)k > cap) return -1;
  if (cn_node_get_values(n, false, out, (size_t)k) != CN_OK) return -1;
  return k;
}

/* Evaluates t and compares every cell with expect[] (n cells) within tol. */
static void expect_values(cn_graph *g, cn_tensor *t, cn_backend_kind b, const double *expect,
                          int64_t n, double tol) {
  double got[4096];
  int64_t k = eval(g, t, b, got, 4096);
  CHECK_MSG(k == n, "%s: %lld cells, expected %lld", t ? cn_tensor_label(t) : "?", (long long)k,
            (long long)n);
  if (k != n) return;
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - expect[i]) <= tol) && !(isnan(got[i]) && isnan(expect[i])) && bad++ < 4)
      fprintf(stderr, "  %s[%lld] = %.17g, expected %.17g\n", cn_tensor_label(t), (long long)i,
              got[i], expect[i]);
  CHECK_MSG(bad == 0, "%s (backend %d): %d cells differ", cn_tensor_label(t), (int)b, bad);
}

/* The memory-order dims of t's value node. */
static int dims_of(cn_tensor *t, int64_t *dims) {
  cn_node *n = cn_tensor_value(t);
  if (!n) return -1;
  for (int a = 0; a < cn_node_rank(n); a++) dims[a] = cn_node_dim(n, a);
  return cn_node_rank(n);
}

static void fill(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = rnd();
}

/* ---- Einsum forms, matmul, pointpow, batch slices -------------------------------------------- */

static void test_forms(cn_backend_kind b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  const double m23[] = {1, 2, 3, 4, 5, 6}, m32[] = {1, 2, 3, 4, 5, 6};
  cn_tensor *x = data(g, "x", (cn_dims){NONE, NONE, AXES(2, 3)}, m23);
  cn_tensor *y = data(g, "y", (cn_dims){NONE, NONE, AXES(3, 2)}, m32);
  /* [[1,2,3],[4,5,6]] . [[1,2],[3,4],[5,6]] */
  expect_values(g, cn_tensor_einsum2(g, "ij;jk=>ik", x, y), b, (double[]){22, 28, 49, 64}, 4, 0);
  expect_values(g, cn_tensor_einsum1(g, "ij=>ji", x), b, (double[]){1, 4, 2, 5, 3, 6}, 6, 0);
  expect_values(g, cn_tensor_einsum1(g, "ij=>i", x), b, (double[]){6, 15}, 2, 0);
  /* max-plus: (0,0) = max(1+1, 2+3, 3+5), (0,1) = max(1+2, 2+4, 3+6), ... */
  expect_values(g, cn_tensor_tropical(g, "ij;jk=>ik", x, y), b, (double[]){8, 9, 11, 12}, 4, 0);
  const double neg[] = {3, -1, 2, -5, -7, -6};
  cn_tensor *xn = data(g, "xn", (cn_dims){NONE, NONE, AXES(2, 3)}, neg);
  expect_values(g, cn_tensor_einmax1(g, "ij=>i", xn), b, (double[]){3, -5}, 2, 0);
  const double u[] = {1, 2, 3}, v[] = {4, 5, 6}, w[] = {7, 8, 9}, t2[] = {10, 20};
  cn_tensor *tu = data(g, "u", (cn_dims){NONE, NONE, AXES(3)}, u);
  cn_tensor *tv = data(g, "v", (cn_dims){NONE, NONE, AXES(3)}, v);
  cn_tensor *tw = data(g, "w", (cn_dims){NONE, NONE, AXES(3)}, w);
  cn_tensor *tt = data(g, "t", (cn_dims){NONE, NONE, AXES(2)}, t2);
  expect_values(g, cn_tensor_einsum3(g, "i;i;i=>", tu, tv, tw), b, (double[]){28 + 80 + 162}, 1, 0);
  expect_values(g, cn_tensor_outer_sum(g, "i;j=>ij", tu, tt), b, (double[]){11, 21, 12, 22, 13, 23},
                6, 0);
  /* matmul: a has input axis 3 and output axis 2 (memory [2][3]), times the vector u - w */
  cn_tensor *a = data(g, "a", (cn_dims){NONE, AXES(3), AXES(2)}, m23);
  const double vec[] = {1, 0, -1};
  cn_tensor *tvec = data(g, "vec", (cn_dims){NONE, NONE, AXES(3)}, vec);
  expect_values(g, cn_tensor_matmul(g, a, tvec), b, (double[]){-2, -2}, 2, 0);
  const double p[] = {2, -3, 0.5};
  cn_tensor *tp = data(g, "p", (cn_dims){NONE, NONE, AXES(3)}, p);
  expect_values(g, cn_tensor_pointpow(g, tp, 3), b, (double[]){8, -27, 0.125}, 3, 1e-15);
  expect_values(g, cn_tensor_pointpow(g, tp, 0.5), b, (double[]){sqrt(2), NAN, sqrt(0.5)}, 3,
                1e-15);
  /* batch axis 3 of rows [1,2], [3,4], [5,6] */
  cn_tensor *bt = data(g, "bt", (cn_dims){AXES(3), NONE, AXES(2)}, m23);
  expect_values(g, cn_tensor_batch_slice_at(g, bt, 2), b, (double[]){5, 6}, 2, 0);
  expect_values(g, cn_tensor_batch_slice_at(g, bt, 0), b, (double[]){1, 2}, 2, 0);
  cn_ctx_destroy(ctx);
}

/* ---- Index terminals ------------------------------------------------------------------------- */

static void test_index_terminals(cn_backend_kind b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_tensor *r = cn_tensor_range(g, 5);
  expect_values(g, r, b, (double[]){0, 1, 2, 3, 4}, 5, 0);
  CHECK_STR(cn_tensor_shape(r), "|->5");
  /* batch 2 | input 3 -> output 2: memory order [2][2][3], each cell its offset */
  cn_dims d = {AXES(2), AXES(3), AXES(2)};
  cn_tensor *rs = cn_tensor_range_of_shape(g, &d);
  double expect[12];
  for (int i = 0; i < 12; i++) expect[i] = i;
  expect_values(g, rs, b, expect, 12, 0);
  int64_t dims[CN_MAX_RANK];
  CHECK_INT(dims_of(rs, dims), 3);
  CHECK(dims[0] == 2 && dims[1] == 2 && dims[2] == 3);
  /* offsets take the shape of what they meet, at the graph's precision (single: 0.5 survives) */
  const double x[] = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  cn_tensor *tx = data(g, "x", (cn_dims){NONE, NONE, AXES(2, 3)}, x);
  cn_tensor *sum = cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){tx, cn_tensor_offsets(g)});
  expect_values(g, sum, b, (double[]){0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, 6, 0);
  /* embed_dim of a tensor whose shape comes from inference, built before it is materialized;
   * its forward code does not compute the transpose */
  cn_tensor *tr = cn_tensor_einsum1(g, "ij=>ji", tx);
  cn_tensor *e0 = cn_tensor_embed_dim(g, tr, 0), *e1 = cn_tensor_embed_dim(g, tr, 1);
  expect_values(g, e0, b, (double[]){3}, 1, 0);
  expect_values(g, e1, b, (double[]){2}, 1, 0);
  const char *code = cn_asgn_to_string(ctx, cn_graph_forward(g, e0));
  CHECK(code && strstr(code, "=:+") == NULL);
  CHECK(!cn_tensor_is_diff(r) && !cn_tensor_is_diff(e0));
  cn_ctx_destroy(ctx);
}

/* ---- Interleaving ---------------------------------------------------------------------------- */

static void test_interleave(cn_backend_kind b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const double va[] = {1, 2, 3, 4, 5, 6}, vb[] = {10, 20, 30, 40, 50, 60};
  cn_tensor *a = data(g, "a", (cn_dims){AXES(2), NONE, AXES(3)}, va);
  cn_tensor *bb = data(g, "b", (cn_dims){AXES(2), NONE, AXES(3)}, vb);
  cn_tensor *il = cn_tensor_interleave(g, a, bb);
  expect_values(g, il, b, (double[]){1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60}, 12, 0);
  CHECK_STR(cn_tensor_shape(il), "2|->6");
  expect_values(g, cn_tensor_deinterleave_even(g, il), b, va, 6, 0);
  expect_values(g, cn_tensor_deinterleave_odd(g, il), b, vb, 6, 0);
  /* an input axis is carried along; an odd last output axis has no even/odd split */
  const double v6[] = {0, 1, 2, 3, 4, 5};
  cn_tensor *t = data(g, "t", (cn_dims){NONE, AXES(3), AXES(2)}, v6); /* memory [2][3] */
  cn_tensor *ev = cn_tensor_deinterleave_even(g, t);
  expect_values(g, ev, b, (double[]){0, 1, 2}, 3, 0);
  CHECK_STR(cn_tensor_shape(ev), "|3->1");
  cn_tensor *t3 = data(g, "t3", (cn_dims){NONE, NONE, AXES(3)}, v6);
  CHECK(cn_tensor_deinterleave_odd(g, t3) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "t3");
  cn_ctx_destroy(ctx);
}

/* ---- Convolution ----------------------------------------------------------------------------- */

typedef struct {
  int64_t n, h, w, ic, kh, kw, oc, stride, dilation;
  bool valid;
} conv_case;

static int64_t conv_out(int64_t in, int64_t k, const conv_case *c) {
  int64_t e = c->dilation * (k - 1);
  return c->valid ? (in - 1 - e) / c->stride + 1 : in / c->stride;
}

/* The reference: y[n][oh][ow][oc] over x[n][h][w][ic], kernel[oc][kh][kw][ic] (memory order). */
static void conv_reference(const conv_case *c, const double *x, const double *k, const double *bias,
                           double *y) {
  int64_t oh_n = conv_out(c->h, c->kh, c), ow_n = conv_out(c->w, c->kw, c);
  /* padded: convolution-is-a-contraction's left margin k - (k + 1) / 2, scaled by the dilation */
  int64_t lh = c->valid ? 0 : c->dilation * (c->kh - (c->kh + 1) / 2);
  int64_t lw = c->valid ? 0 : c->dilation * (c->kw - (c->kw + 1) / 2);
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t oh = 0; oh < oh_n; oh++)
      for (int64_t ow = 0; ow < ow_n; ow++)
        for (int64_t o = 0; o < c->oc; o++) {
          double s = bias ? bias[o] : 0;
          for (int64_t i = 0; i < c->kh; i++)
            for (int64_t j = 0; j < c->kw; j++)
              for (int64_t ch = 0; ch < c->ic; ch++) {
                int64_t r = c->stride * oh + c->dilation * i - lh;
                int64_t q = c->stride * ow + c->dilation * j - lw;
                if (r < 0 || r >= c->h || q < 0 || q >= c->w) continue;
                s += x[((n * c->h + r) * c->w + q) * c->ic + ch] *
                     k[((o * c->kh + i) * c->kw + j) * c->ic + ch];
              }
          y[((n * oh_n + oh) * ow_n + ow) * c->oc + o] = s;
        }
}

static void test_conv2d(cn_backend_kind b) {
  const conv_case cases[] = {
      {2, 5, 5, 2, 3, 3, 3, 1, 1, false}, /* padded, same size */
      {2, 4, 6, 2, 3, 2, 2, 2, 1, false}, /* padded, strided, even kernel width */
      {1, 6, 7, 2, 2, 3, 2, 1, 2, true},  /* valid, dilated */
      {2, 7, 5, 1, 3, 1, 3, 2, 1, true},  /* valid, strided */
      {1, 6, 6, 2, 3, 3, 2, 2, 2, false}, /* padded, strided and dilated */
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const conv_case *c = &cases[ci];
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    cn_graph_set_prec(g, CN_PREC_DOUBLE);
    double x[512], k[256], bias[8], y[512];
    cn_dims dx = {AXES(c->n), NONE, AXES(c->h, c->w, c->ic)};
    cn_dims dk = {NONE, AXES(c->kh, c->kw, c->ic), AXES(c->oc)};
    cn_dims db = {NONE, NONE, AXES(c->oc)};
    fill(x, numel_of(&dx));
    fill(k, numel_of(&dk));
    fill(bias, c->oc);
    cn_tensor *tx = data(g, "x", dx, x), *tk = data(g, "k", dk, k);
    cn_tensor *tb = ci % 2 ? NULL : data(g, "bias", db, bias);
    cn_conv2d opts = {c->stride, c->dilation, c->valid};
    cn_tensor *out = cn_tensor_conv2d(g, tx, tk, tb, &opts);
    conv_reference(c, x, k, tb ? bias : NULL, y);
    int64_t n_out = c->n * conv_out(c->h, c->kh, c) * conv_out(c->w, c->kw, c) * c->oc;
    expect_values(g, out, b, y, n_out, 1e-12);
    CHECK_STR(cn_tensor_label(out), "conv2d");
    cn_ctx_destroy(ctx);
  }
}

/* ---- Pooling --------------------------------------------------------------------------------- */

static void pool_reference(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t s,
                           bool max, const double *x, double *y) {
  int64_t oh_n = (h - k) / s + 1, ow_n = (w - k) / s + 1;
  for (int64_t b = 0; b < n; b++)
    for (int64_t oh = 0; oh < oh_n; oh++)
      for (int64_t ow = 0; ow < ow_n; ow++)
        for (int64_t ch = 0; ch < c; ch++) {
          double acc = max ? -INFINITY : 0;
          for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++) {
              double v = x[((b * h + s * oh + i) * w + s * ow + j) * c + ch];
              acc = max ? fmax(acc, v) : acc + v / (double)(k * k);
            }
          y[((b * oh_n + oh) * ow_n + ow) * c + ch] = acc;
        }
}

static void test_pool(cn_backend_kind b) {
  const int64_t cases[][6] = {/* n, h, w, c, window, stride */
                              {2, 4, 6, 3, 2, 2},
                              {1, 4, 5, 2, 3, 1},
                              {2, 5, 5, 1, 3, 2}};
  for (size_t ci = 0; ci < 3; ci++) {
    const int64_t *c = cases[ci];
    for (int max = 0; max < 2; max++) {
      cn_ctx *ctx = cn_ctx_create();
      cn_graph *g = cn_graph_create(ctx);
      cn_graph_set_prec(g, CN_PREC_DOUBLE);
      double x[256], y[256];
      cn_dims dx = {AXES(c[0]), NONE, AXES(c[1], c[2], c[3])};
      fill(x, numel_of(&dx));
      cn_tensor *tx = data(g, "x", dx, x);
      /* stride 0 is "the window" */
      int64_t stride = c[5] == c[4] ? 0 : c[5];
      cn_tensor *out = max ? cn_tensor_max_pool2d(g, tx, c[4], stride)
                           : cn_tensor_avg_pool2d(g, tx, c[4], stride);
      pool_reference(c[0], c[1], c[2], c[3], c[4], c[5], max, x, y);
      int64_t n_out = c[0] * ((c[1] - c[4]) / c[5] + 1) * ((c[2] - c[4]) / c[5] + 1) * c[3];
      expect_values(g, out, b, y, n_out, 1e-12);
      cn_ctx_destroy(ctx);
    }
  }
  /* channels are optional: a plain [h, w] image */
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const double img[] = {1, 5, 2, 0, 3, 4, -1, 8, 0, 0, 6, 7, 9, 1, 2, 2};
  cn_tensor *ti = data(g, "img", (cn_dims){NONE, NONE, AXES(4, 4)}, img);
  expect_values(g, cn_tensor_max_pool2d(g, ti, 2, 0), b, (double[]){5, 8, 9, 7}, 4, 0);
  expect_values(g, cn_tensor_avg_pool2d(g, ti, 2, 0), b,
                (double[]){13 / 4.0, 9 / 4.0, 10 / 4.0, 17 / 4.0}, 4, 1e-6);
  cn_ctx_destroy(ctx);
}

/* ---- Softmax --------------------------------------------------------------------------------- */

static void test_softmax(cn_backend_kind b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  /* batch 2 | input 3 -> output 4: memory x[b][o][i]; softmax over o for each (b, i) */
  double x[24], y[24];
  fill(x, 24);
  for (int i = 0; i < 24; i++) x[i] *= 3;
  for (int bi = 0; bi < 2; bi++)
    for (int i = 0; i < 3; i++) {
      double s = 0;
      for (int o = 0; o < 4; o++) s += exp(x[(bi * 4 + o) * 3 + i]);
      for (int o = 0; o < 4; o++) y[(bi * 4 + o) * 3 + i] = exp(x[(bi * 4 + o) * 3 + i]) / s;
    }
  cn_tensor *tx = data(g, "x", (cn_dims){AXES(2), AXES(3), AXES(4)}, x);
  cn_tensor *sm = cn_tensor_softmax(g, tx);
  expect_values(g, sm, b, y, 24, 1e-15);
  CHECK_STR(cn_tensor_shape(sm), "2|3->4");
  cn_ctx_destroy(ctx);
  /* single precision, two output axes, values whose exp overflows without the max */
  ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  const double big[] = {1000, 1001, 1002, 1003};
  double e = 1 + exp(1) + exp(2) + exp(3);
  cn_tensor *tb = data(g, "big", (cn_dims){NONE, NONE, AXES(2, 2)}, big);
  expect_values(g, cn_tensor_softmax(g, tb), b,
                (double[]){1 / e, exp(1) / e, exp(2) / e, exp(3) / e}, 4, 1e-6);
  cn_ctx_destroy(ctx);
}

/* ---- Finite-difference gradient checks --------------------------------------------------------
 * Loss = sum(y * w) with w = sin(0.7 * offsets + 0.3) of y's shape (given by the case, which also
 * checks the result's shape), over parameters initialized from a fixed random stream. */

#define MAX_PARAMS 3
typedef struct {
  const char *name;
  int n_params;
  cn_dims params[MAX_PARAMS];
  cn_dims out;
  cn_tensor *(*build)(cn_graph *g, cn_tensor *const *p);
} grad_case;

static double loss_value(cn_tensor *loss) {
  double v = NAN;
  cn_node *n = cn_tensor_value(loss);
  if (n) cn_node_get_values(n, false, &v, 1);
  return v;
}

static void grad_check(const grad_case *gc, cn_backend_kind b) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *p[MAX_PARAMS];
  static double init[MAX_PARAMS][512];
  for (int i = 0; i < gc->n_params; i++) {
    int64_t n = numel_of(&gc->params[i]);
    fill(init[i], n);
    char label[16];
    snprintf(label, sizeof label, "p%d", i);
    p[i] = cn_tensor_param(g, label, &gc->params[i], data(g, "init", gc->params[i], init[i]));
  }
  cn_tensor *y = gc->build(g, p);
  cn_tensor *w = cn_tensor_range_of_shape(g, &gc->out);
  w = cn_tensor_apply(g, CN_OP_FMA, 3,
                      (cn_tensor *[]){cn_tensor_number(g, 0.7), w, cn_tensor_number(g, 0.3)});
  w = cn_tensor_apply(g, CN_OP_SIN, 1, &w);
  cn_tensor *loss = cn_tensor_einsum1(g, "...|...->... =>",
                                      cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){y, w}));
  CHECK_MSG(loss != NULL, "%s: %s", gc->name, cn_ctx_error(ctx));
  cn_asgn *fwd = loss ? cn_graph_forward(g, loss) : NULL;
  cn_routine *rf = fwd ? cn_routine_compile(ctx, fwd, b, "fd_forward") : NULL;
  CHECK_MSG(rf != NULL, "%s: %s", gc->name, cn_ctx_error(ctx));
  if (!rf || !run(ctx, cn_graph_init_params(g, loss), b, "fd_init") ||
      !run(ctx, cn_graph_grad_update(g, loss), b, "fd_grad")) {
    cn_routine_free(rf);
    cn_ctx_destroy(ctx);
    return;
  }
  const double eps = 1e-6;
  double sum_asym = 0, max_ga = 0;
  int cells = 0;
  for (int i = 0; i < gc->n_params; i++) {
    int64_t n = numel_of(&gc->params[i]);
    double ga[512], v[512];
    cn_node *value = cn_tensor_value(p[i]);
    CHECK(cn_node_get_values(cn_tensor_grad(p[i]), false, ga, (size_t)n) == CN_OK);
    CHECK(cn_node_get_values(value, false, v, (size_t)n) == CN_OK);
    for (int64_t c = 0; c < n; c++) {
      double lv[2], keep = v[c];
      for (int side = 0; side < 2; side++) {
        v[c] = keep + (side ? -eps : eps);
        cn_node_set_values(value, false, v, (size_t)n);
        lv[side] = cn_routine_run(rf) == CN_OK ? loss_value(loss) : NAN;
      }
      v[c] = keep;
      cn_node_set_values(value, false, v, (size_t)n);
      double gn = (lv[0] - lv[1]) / (2 * eps);
      /* both zero (a cell no output depends on, a non-maximal cell under max): agreement */
      double asym = fabs(gn) + fabs(ga[c]) < 1e-8 ? 0 : fabs((gn - ga[c]) / (gn + ga[c]));
      sum_asym += asym;
      if (fabs(ga[c]) > max_ga) max_ga = fabs(ga[c]);
      cells++;
    }
  }
  double mean = cells ? sum_asym / cells : 1;
  CHECK_MSG(mean <= 1e-4, "%s (backend %d): mean asymmetry %g over %d cells", gc->name, (int)b,
            mean, cells);
  CHECK_MSG(max_ga > 1e-3, "%s: the gradient vanishes (max %g)", gc->name, max_ga);
  cn_routine_free(rf);
  cn_ctx_destroy(ctx);
}

static cn_tensor *b_conv_same(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_conv2d(g, p[0], p[1], p[2], NULL);
}
static cn_tensor *b_conv_strided(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_conv2d(g, p[0], p[1], p[2], &(cn_conv2d){2, 1, false});
}
static cn_tensor *b_conv_valid(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_conv2d(g, p[0], p[1], NULL, &(cn_conv2d){2, 2, true});
}
static cn_tensor *b_max2(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_max_pool2d(g, p[0], 2, 0);
}
static cn_tensor *b_max3(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_max_pool2d(g, p[0], 3, 1);
}
static cn_tensor *b_avg(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_avg_pool2d(g, p[0], 2, 0);
}
static cn_tensor *b_softmax(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_softmax(g, p[0]);
}
static cn_tensor *b_interleave(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_interleave(g, p[0], p[1]);
}
static cn_tensor *b_even(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_deinterleave_even(g, p[0]);
}
static cn_tensor *b_odd(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_deinterleave_odd(g, p[0]);
}
static cn_tensor *b_tropical(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_tropical(g, "ij;jk=>ik", p[0], p[1]);
}
static cn_tensor *b_einmax1(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_einmax1(g, "b|ij=>b|i", p[0]);
}
static cn_tensor *b_matmul_pow(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_pointpow(g, cn_tensor_matmul(g, p[0], p[1]), 3);
}
static cn_tensor *b_einsum3(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_einsum3(g, "i;ij;j=>i", p[0], p[1], p[2]);
}
static cn_tensor *b_outer_slice(cn_graph *g, cn_tensor *const *p) {
  return cn_tensor_batch_slice_at(g, cn_tensor_outer_sum(g, "b|i;j=>b|ij", p[0], p[1]), 1);
}

static void test_gradients(cn_backend_kind b) {
  const grad_case cases[] = {
      {"conv2d padded",
       3,
       {{AXES(2), NONE, AXES(4, 5, 2)}, {NONE, AXES(3, 2, 2), AXES(3)}, {NONE, NONE, AXES(3)}},
       {AXES(2), NONE, AXES(4, 5, 3)},
       b_conv_same},
      {"conv2d padded strided",
       3,
       {{AXES(2), NONE, AXES(4, 6, 2)}, {NONE, AXES(3, 3, 2), AXES(2)}, {NONE, NONE, AXES(2)}},
       {AXES(2), NONE, AXES(2, 3, 2)},
       b_conv_strided},
      {"conv2d valid strided dilated",
       2,
       {{AXES(1), NONE, AXES(7, 7, 2)}, {NONE, AXES(2, 2, 2), AXES(2)}},
       {AXES(1), NONE, AXES(3, 3, 2)},
       b_conv_valid},
      {"max_pool2d 2/2",
       1,
       {{AXES(2), NONE, AXES(4, 4, 3)}},
       {AXES(2), NONE, AXES(2, 2, 3)},
       b_max2},
      {"max_pool2d 3/1",
       1,
       {{AXES(1), NONE, AXES(4, 5, 2)}},
       {AXES(1), NONE, AXES(2, 3, 2)},
       b_max3},
      {"avg_pool2d", 1, {{AXES(2), NONE, AXES(4, 6, 2)}}, {AXES(2), NONE, AXES(2, 3, 2)}, b_avg},
      {"softmax", 1, {{AXES(2), AXES(3), AXES(4)}}, {AXES(2), AXES(3), AXES(4)}, b_softmax},
      {"interleave",
       2,
       {{AXES(2), NONE, AXES(3)}, {AXES(2), NONE, AXES(3)}},
       {AXES(2), NONE, AXES(6)},
       b_interleave},
      {"deinterleave_even", 1, {{AXES(2), NONE, AXES(6)}}, {AXES(2), NONE, AXES(3)}, b_even},
      {"deinterleave_odd", 1, {{AXES(2), NONE, AXES(6)}}, {AXES(2), NONE, AXES(3)}, b_odd},
      {"tropical",
       2,
       {{NONE, NONE, AXES(3, 4)}, {NONE, NONE, AXES(4, 2)}},
       {NONE, NONE, AXES(3, 2)},
       b_tropical},
      {"einmax1", 1, {{AXES(2), NONE, AXES(3, 5)}}, {AXES(2), NONE, AXES(3)}, b_einmax1},
      {"matmul, pointpow",
       2,
       {{NONE, AXES(3), AXES(2)}, {NONE, NONE, AXES(3)}},
       {NONE, NONE, AXES(2)},
       b_matmul_pow},
      {"einsum3",
       3,
       {{NONE, NONE, AXES(3)}, {NONE, NONE, AXES(3, 4)}, {NONE, NONE, AXES(4)}},
       {NONE, NONE, AXES(3)},
       b_einsum3},
      {"outer_sum, batch_slice_at",
       2,
       {{AXES(3), NONE, AXES(2)}, {NONE, NONE, AXES(4)}},
       {NONE, NONE, AXES(2, 4)},
       b_outer_slice},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) grad_check(&cases[i], b);
}

/* ---- Initializers ---------------------------------------------------------------------------- */

enum { N_INIT = 100000 };

typedef struct {
  double mean, std, min, max, within1; /* within1: the fraction with |x - mean| < std */
} stats;

static stats stats_of(const double *v, int n) {
  stats s = {0, 0, INFINITY, -INFINITY, 0};
  for (int i = 0; i < n; i++) {
    s.mean += v[i] / n;
    s.min = fmin(s.min, v[i]);
    s.max = fmax(s.max, v[i]);
  }
  for (int i = 0; i < n; i++) s.std += (v[i] - s.mean) * (v[i] - s.mean) / (n - 1);
  s.std = sqrt(s.std);
  for (int i = 0; i < n; i++) s.within1 += fabs(v[i] - s.mean) < s.std ? 1.0 / n : 0;
  return s;
}

/* Initializes a parameter of N_INIT cells with init (built by make) and reads its values. */
static bool init_values(cn_backend_kind b, cn_tensor *(*make)(cn_graph *), double *v) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d = {NONE, NONE, AXES(N_INIT)};
  cn_tensor *init = make(g);
  cn_tensor *p = init ? cn_tensor_param(g, "p", &d, init) : NULL;
  CHECK_MSG(p != NULL, "%s", cn_ctx_error(ctx));
  bool ok = p && run(ctx, cn_graph_init_params(g, p), b, "init") &&
            cn_node_get_values(cn_tensor_value(p), false, v, N_INIT) == CN_OK;
  cn_ctx_destroy(ctx);
  return ok;
}

static cn_tensor *make_normal(cn_graph *g) {
  return cn_tensor_normal(g);
}
static cn_tensor *make_normal_at(cn_graph *g) {
  return cn_tensor_normal_at(g, cn_tensor_number(g, 7));
}
static cn_tensor *make_xavier(cn_graph *g) {
  return cn_tensor_xavier(g, 20, 30);
}
static cn_tensor *make_kaiming_uniform(cn_graph *g) {
  return cn_tensor_kaiming_uniform(g, 24);
}
static cn_tensor *make_kaiming_normal(cn_graph *g) {
  return cn_tensor_kaiming_normal(g, 8);
}

static void test_initializers(void) {
  static double v[2][N_INIT];
  /* the standard normal: mean 0, std 1 (standard errors 0.003 and 0.0022 at 1e5 cells), 68.3%
   * within one std; identical streams on both backends (up to single-precision rounding) */
  for (int bi = 0; bi < 2; bi++) CHECK(init_values(backends[bi], make_normal, v[bi]));
  stats s = stats_of(v[0], N_INIT);
  CHECK_NEAR(s.mean, 0, 0.015);
  CHECK_NEAR(s.std, 1, 0.012);
  CHECK_NEAR(s.within1, 0.6827, 0.008);
  CHECK(s.max > 3.5 && s.min < -3.5 && s.max < 6 && s.min > -6);
  double diff = 0;
  for (int i = 0; i < N_INIT; i++) diff = fmax(diff, fabs(v[0][i] - v[1][i]));
  CHECK_MSG(diff < 1e-5, "normal: the backends differ by %g", diff);
  /* normal_at: another stream of the same law */
  CHECK(init_values(CN_BACKEND_C, make_normal_at, v[1]));
  s = stats_of(v[1], N_INIT);
  CHECK_NEAR(s.mean, 0, 0.015);
  CHECK_NEAR(s.std, 1, 0.012);
  int same = 0;
  for (int i = 0; i < N_INIT; i++) same += v[0][i] == v[1][i];
  CHECK(same < 10);
  /* xavier(20, 30): uniform in [-b, b), b = sqrt(6/50), variance b^2/3 */
  double bx = sqrt(6.0 / 50);
  CHECK(init_values(CN_BACKEND_C, make_xavier, v[0]));
  s = stats_of(v[0], N_INIT);
  CHECK(s.min >= -bx - 1e-6 && s.max < bx + 1e-6);
  CHECK(s.min < -0.999 * bx && s.max > 0.999 * bx);
  CHECK_NEAR(s.mean, 0, 0.005 * bx);
  CHECK_NEAR(s.std, bx / sqrt(3), 0.01 * bx);
  /* kaiming_uniform(24): b = sqrt(6/24) = 0.5 */
  CHECK(init_values(CN_BACKEND_C, make_kaiming_uniform, v[0]));
  s = stats_of(v[0], N_INIT);
  CHECK(s.min >= -0.5 - 1e-6 && s.max < 0.5 + 1e-6 && s.max > 0.499);
  CHECK_NEAR(s.std, 0.5 / sqrt(3), 0.005);
  /* kaiming_normal(8): std sqrt(2/8) = 0.5 */
  CHECK(init_values(CN_BACKEND_C, make_kaiming_normal, v[0]));
  s = stats_of(v[0], N_INIT);
  CHECK_NEAR(s.mean, 0, 0.008);
  CHECK_NEAR(s.std, 0.5, 0.006);
}

/* ---- Argument and shape errors --------------------------------------------------------------- */

static void expect_error(cn_ctx *ctx, const void *result, const char *needle) {
  CHECK(result == NULL);
  CHECK_HAS(cn_ctx_error(ctx), needle);
  cn_ctx_clear_error(ctx);
}

static void test_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  double v[32];
  for (int i = 0; i < 32; i++) v[i] = i + 1;
  cn_tensor *bt = data(g, "bt", (cn_dims){AXES(3), NONE, AXES(2)}, v);
  expect_error(ctx, cn_tensor_batch_slice_at(g, bt, -1), "index -1 is negative");
  expect_error(ctx, cn_tensor_batch_slice_at(g, bt, 3),
               "fixed index 3 is out of range of an axis of size 3: batch row of \"bt\"");
  expect_error(ctx, cn_tensor_range(g, 0), "range: 0 values");
  cn_dims partial = {CN_AXES_INFER, NONE, AXES(2)};
  expect_error(ctx, cn_tensor_range_of_shape(g, &partial), "its batch row must be given");
  cn_dims zero = {NONE, NONE, AXES(2, 0)};
  expect_error(ctx, cn_tensor_range_of_shape(g, &zero), "output axis 1 has size 0");
  cn_tensor *img = data(g, "img", (cn_dims){NONE, NONE, AXES(5, 5, 1)}, v);
  cn_tensor *k = data(g, "k", (cn_dims){NONE, AXES(3, 3, 2), AXES(1)}, v);
  expect_error(ctx, cn_tensor_conv2d(g, img, k, NULL, &(cn_conv2d){-1, 1, false}),
               "conv2d: stride -1");
  expect_error(ctx, cn_tensor_conv2d(g, img, NULL, NULL, NULL), "conv2d: operand 2 is NULL");
  expect_error(
      ctx, cn_tensor_conv2d(g, img, k, NULL, NULL),
      "axis 2 (size 2) vs spec row variable '..ic..' (size 1, as in the output row of \"img\"");
  expect_error(ctx, cn_tensor_max_pool2d(g, img, 0, 0), "max_pool2d: window 0");
  expect_error(ctx, cn_tensor_avg_pool2d(g, img, 2, 0), "a valid convolution does not tile");
  expect_error(ctx, cn_tensor_xavier(g, 0, 3), "xavier: fan 0");
  expect_error(ctx, cn_tensor_kaiming_normal(g, NAN), "kaiming_normal: fan nan");
  expect_error(ctx, cn_tensor_embed_dim(g, NULL, 0), "embed_dim: the tensor is NULL");
  expect_error(ctx, cn_tensor_embed_dim(g, bt, -1), "axis -1");
  cn_tensor *a3 = data(g, "a3", (cn_dims){NONE, NONE, AXES(3)}, v);
  cn_tensor *a4 = data(g, "a4", (cn_dims){NONE, NONE, AXES(4)}, v);
  expect_error(ctx, cn_tensor_interleave(g, a3, NULL), "interleave: operand 2 is NULL");
  expect_error(ctx, cn_tensor_interleave(g, a3, a4), "sizes differ");
  expect_error(ctx, cn_tensor_softmax(g, NULL), "softmax: operand 1 is NULL");
  expect_error(ctx, cn_tensor_pointpow(g, NULL, 2), "pointpow: operand 1 is NULL");
  /* an axis that does not exist is found when the code is gathered */
  cn_tensor *e = cn_tensor_embed_dim(g, bt, 2);
  CHECK(e != NULL);
  expect_error(ctx, cn_graph_forward(g, e), "\"bt\" (#1) has no axis 2");
  /* the graph is still usable */
  double out[2];
  CHECK_INT(eval(g, cn_tensor_batch_slice_at(g, bt, 1), CN_BACKEND_INTERP, out, 2), 2);
  CHECK(out[0] == 3 && out[1] == 4);
  cn_ctx_destroy(ctx);
}

/* The library's conv2d, and the spec it had before (issue 27): its input row given as the row's
 * last axes, `h, w, ic`, which reads it as [..v.., h, w, ic]. */
static cn_tensor *library_conv(cn_graph *g, cn_tensor *x, cn_tensor *k) {
  return cn_tensor_conv2d(g, x, k, NULL, NULL);
}
static cn_tensor *trailing_conv(cn_graph *g, cn_tensor *x, cn_tensor *k) {
  return cn_tensor_einsum2(g, "... | oh=+kh, ow=+kw, ic; kh, kw, ic -> oc => ... | oh, ow, oc", x,
                           k);
}

/* Two conv-relu-pool stages (a LeNet's): each pooling halves the map and the second convolution
 * runs on the pooled one. The library's convolution leads its input row with the spatial axes, as
 * the pooling's does. With them given as the row's last axes, the pooled row [oh, ow, ..c..] met
 * [..v.., h, w, ic] through the relu, an equation with no most general unifier, and the solver
 * stacked the pooled axes in front of the unpooled ones (28x28 maps into the second stage); it now
 * waits for a rank, then pairs the flanks (issue 27), so both specs give the same shapes. */
static void test_conv_pool_stages(cn_tensor *(*conv)(cn_graph *, cn_tensor *, cn_tensor *)) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  int64_t batch = 2, image[3] = {28, 28, 1}, k1[3] = {3, 3, 1}, k2[3] = {3, 3, 16}, c1 = 16,
          c2 = 32;
  cn_dims xd = {{1, &batch, NULL}, CN_AXES_NONE, {3, image, NULL}};
  cn_dims k1d = {CN_AXES_NONE, {3, k1, NULL}, {1, &c1, NULL}};
  cn_dims k2d = {CN_AXES_NONE, {3, k2, NULL}, {1, &c2, NULL}};
  cn_tensor *x = cn_tensor_buffer(g, "x", &xd);
  cn_tensor *h = conv(g, x, cn_tensor_param(g, "k1", &k1d, NULL));
  h = cn_tensor_max_pool2d(g, cn_tensor_apply(g, CN_OP_RELU, 1, &h), 2, 0);
  cn_tensor *stage1 = h;
  h = conv(g, h, cn_tensor_param(g, "k2", &k2d, NULL));
  cn_tensor *conv2 = h;
  h = cn_tensor_max_pool2d(g, cn_tensor_apply(g, CN_OP_RELU, 1, &h), 2, 0);
  CHECK_MSG(h && cn_tensor_value(h), "%s", cn_ctx_error(ctx));
  if (h) {
    CHECK_STR(cn_tensor_shape(stage1), "2|->14,14,16");
    CHECK_STR(cn_tensor_shape(conv2), "2|->14,14,32");
    CHECK_STR(cn_tensor_shape(h), "2|->7,7,32");
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_conv_pool_stages(library_conv);
  test_conv_pool_stages(trailing_conv);
  for (int i = 0; i < 2; i++) {
    test_forms(backends[i]);
    test_index_terminals(backends[i]);
    test_interleave(backends[i]);
    test_conv2d(backends[i]);
    test_pool(backends[i]);
    test_softmax(backends[i]);
    test_gradients(backends[i]);
  }
  test_initializers();
  test_errors();
  CHECK_DONE();
}
