/* Projection inference, affine stratum (convolution-is-a-contraction): valid 1-D convolution (the
 * seed's loop nest), strided + dilated 2-D convolution, padded convolution reading left of the
 * array (margins reset to the accumulator's neutral: 0 for +, -inf for max), two readers with
 * kernels 3 and 5 (margin from the 5), the freeze of margins, interleave by two strided writes
 * tiling the result, even/odd extraction and their gradients as the inverse strided maps, and
 * gradients by slot permutation (matmul, padded convolution) checked against finite differences.
 * Records are checked whole; values come from plain loops written here. */
#include "proj_check.h"

/* ---- 1-D valid: out[o] = sum_k x[o + k] * w[k] ---- */
static void test_valid_1d(void) {
  pt_env e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_DIMS(6));
  cn_shape *w = pt_shape(&e, "w", PT_NONE, PT_NONE, PT_DIMS(3));
  cn_shape *out = pt_shape(&e, "out", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_einsum(&e, "o<+k; k => o", out, 2, x, w);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, out), "|->4");
  /* the input axis gets no loop: its index is the sum of the output and kernel loops */
  cn_proj *p = pt_infer(&e, op,
                        "product space: o=4 k=3\n"
                        "lhs  [4]: (o)\n"
                        "rhs1 [6]: (o + k)\n"
                        "rhs2 [3]: (k)\n");
  CHECK(p && cn_proj_lhs_surjective(p) && !cn_proj_lhs_injective(p));
  cn_node *nx = pt_node(&e, x, CN_PREC_DOUBLE), *nw = pt_node(&e, w, CN_PREC_DOUBLE),
          *no = pt_node(&e, out, CN_PREC_DOUBLE);
  double xs[6] = {1, -2, 3, 0.5, 4, -1}, ws[3] = {2, 1, -1}, want[4];
  pt_set(nx, xs);
  pt_set(nw, ws);
  for (int o = 0; o < 4; o++) {
    want[o] = 0;
    for (int k = 0; k < 3; k++) want[o] += xs[o + k] * ws[k];
  }
  pt_run(&e, "conv_valid_1d", pt_accum(&e, true, CN_OP_ADD, no, CN_OP_MUL, 2, nx, nw, p), no, 50,
         want, 1e-12);
  pt_close(&e);
}

/* ---- 2-D valid, stride 2, dilation 2: in = 2*(out-1) + 1 + (3-1)*2 ---- */
static void test_strided_dilated_2d(void) {
  pt_env e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_DIMS(11, 9));
  cn_shape *w = pt_shape(&e, "w", PT_NONE, PT_NONE, PT_DIMS(3, 3));
  cn_shape *out = pt_shape(&e, "out", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_einsum(&e, "2*oh<+2*kh, 2*ow<+2*kw; kh, kw => oh, ow", out, 2, x, w);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, out), "|->4,3");
  cn_proj *p = pt_infer(&e, op,
                        "product space: oh=4 ow=3 kh=3 kw=3\n"
                        "lhs  [4, 3]: (oh, ow)\n"
                        "rhs1 [11, 9]: (2*oh + 2*kh, 2*ow + 2*kw)\n"
                        "rhs2 [3, 3]: (kh, kw)\n");
  cn_node *nx = pt_node(&e, x, CN_PREC_DOUBLE), *nw = pt_node(&e, w, CN_PREC_DOUBLE),
          *no = pt_node(&e, out, CN_PREC_DOUBLE);
  double xs[99], ws[9], want[12];
  for (int i = 0; i < 99; i++) xs[i] = (i * 37 % 23) - 11;
  for (int i = 0; i < 9; i++) ws[i] = (i % 4) - 1.5;
  pt_set(nx, xs);
  pt_set(nw, ws);
  for (int oh = 0; oh < 4; oh++)
    for (int ow = 0; ow < 3; ow++) {
      double acc = 0;
      for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++)
          acc += xs[(2 * oh + 2 * kh) * 9 + 2 * ow + 2 * kw] * ws[kh * 3 + kw];
      want[oh * 3 + ow] = acc;
    }
  pt_run(&e, "conv_strided_dilated", pt_accum(&e, true, CN_OP_ADD, no, CN_OP_MUL, 2, nx, nw, p), no,
         -3, want, 1e-12);
  pt_close(&e);
}

/* ---- Padded (stride 1, kernel 3): reads x[-1] and x[5]; two readers with kernels 3 and 5 pad
 * the input for the 5; max accumulation sees -inf in the margins ---- */
static double at(const double *xs, int n, int i, double outside) {
  return i < 0 || i >= n ? outside : xs[i];
}

static void test_padded_two_readers(void) {
  pt_env e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_DIMS(5));
  cn_shape *w3 = pt_shape(&e, "w3", PT_NONE, PT_NONE, PT_DIMS(3));
  cn_shape *w5 = pt_shape(&e, "w5", PT_NONE, PT_NONE, PT_DIMS(5));
  cn_shape *o3 = pt_shape(&e, "o3", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *o5 = pt_shape(&e, "o5", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op3 = pt_einsum(&e, "o=+k; k => o", o3, 2, x, w3);
  cn_shape_op *op5 = pt_einsum(&e, "o=+k; k => o", o5, 2, x, w5);
  if (!op3 || !op5 || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, o3), "|->5");
  cn_proj *p3 = pt_infer(&e, op3,
                         "product space: o=5 k=3\n"
                         "lhs  [5]: (o)\n"
                         "rhs1 [5]: (o + k - 1)\n"
                         "rhs2 [3]: (k)\n");
  int64_t m[2];
  cn_proj_padding(e.projs, x, 0, m); /* convolution-is-a-contraction: k = 3 splits right = 2, left =
                                        1 */
  CHECK(m[0] == 1 && m[1] == 2);
  cn_proj *p5 = pt_infer(&e, op5,
                         "product space: o=5 k=5\n"
                         "lhs  [5]: (o)\n"
                         "rhs1 [5]: (o + k - 2)\n"
                         "rhs2 [5]: (k)\n");
  cn_proj_padding(e.projs, x, 0, m); /* k = 5: right = 3, left = 2 */
  CHECK(m[0] == 2 && m[1] == 3);
  cn_proj_padding(e.projs, w5, 0, m);
  CHECK(m[0] == 0 && m[1] == 0);
  CHECK(cn_proj_freeze_padding(e.projs, x) == CN_OK);
  CHECK(pt_infer(&e, op3, NULL) != NULL); /* within the frozen margins: fine */

  cn_node *nx = pt_node(&e, x, CN_PREC_DOUBLE), *n3 = pt_node(&e, w3, CN_PREC_DOUBLE),
          *n5 = pt_node(&e, w5, CN_PREC_DOUBLE), *no3 = pt_node(&e, o3, CN_PREC_DOUBLE),
          *no5 = pt_node(&e, o5, CN_PREC_DOUBLE);
  CHECK(nx && cn_node_padding(nx, 0, false) == 2 && cn_node_padding(nx, 0, true) == 3);
  double xs[5] = {3, -1, 4, 1, -5}, k3[3] = {1, 2, 3}, k5[5] = {1, -1, 2, -2, 3};
  pt_set(nx, xs);
  pt_set(n3, k3);
  pt_set(n5, k5);
  double want3[5], want5[5], wantmax[5];
  for (int o = 0; o < 5; o++) {
    want3[o] = want5[o] = 0;
    wantmax[o] = -INFINITY;
    for (int k = 0; k < 3; k++) {
      want3[o] += at(xs, 5, o + k - 1, 0) * k3[k];
      double v = at(xs, 5, o + k - 1, -INFINITY) + k3[k];
      if (v > wantmax[o]) wantmax[o] = v;
    }
    for (int k = 0; k < 5; k++) want5[o] += at(xs, 5, o + k - 2, 0) * k5[k];
  }
  pt_run(&e, "conv_padded3", pt_accum(&e, true, CN_OP_ADD, no3, CN_OP_MUL, 2, nx, n3, p3), no3, 8,
         want3, 1e-12);
  pt_run(&e, "conv_padded5", pt_accum(&e, true, CN_OP_ADD, no5, CN_OP_MUL, 2, nx, n5, p5), no5, 8,
         want5, 1e-12);
  /* tropical (max-plus): the margins must read -inf, never 0 */
  pt_run(&e, "conv_padded_max", pt_accum(&e, true, CN_OP_MAX, no3, CN_OP_ADD, 2, nx, n3, p3), no3,
         8, wantmax, 1e-12);
  pt_close(&e);

  /* after the freeze, a reader needing more than the committed margins is an error */
  e = pt_open();
  x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_DIMS(5));
  w3 = pt_shape(&e, "w3", PT_NONE, PT_NONE, PT_DIMS(3));
  o3 = pt_shape(&e, "o3", PT_ANY, PT_ANY, PT_ANY);
  op3 = pt_einsum(&e, "o=+k; k => o", o3, 2, x, w3);
  if (op3 && pt_finalize(&e)) {
    CHECK(cn_proj_freeze_padding(e.projs, x) == CN_OK);
    CHECK(cn_proj_infer(e.projs, op3, NULL) == NULL);
    CHECK_HAS(cn_ctx_error(e.ctx), "axis 0 of the output row of \"x\"");
    CHECK_HAS(cn_ctx_error(e.ctx), "needs padding margins 1/2 (left/right), but the tensor's "
                                   "buffer was allocated with margins 0/0");
  }
  pt_close(&e);
}

/* ---- Interleave: t =:+ t1 ("..., i => ..., 2*i"); t =+ t2 ("..., i => ..., 2*i + 1") ---- */
static void test_interleave_and_extraction(void) {
  pt_env e = pt_open();
  cn_shape *t1 = pt_shape(&e, "t1", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *t2 = pt_shape(&e, "t2", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *t = pt_shape(&e, "t", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *ev = pt_shape(&e, "ev", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *od = pt_shape(&e, "od", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *even_w = pt_einsum(&e, "..., i => ..., 2*i", t, 1, t1, NULL);
  cn_shape_op *odd_w = pt_einsum(&e, "..., i => ..., 2*i + 1", t, 1, t2, NULL);
  cn_shape_op *even_r = pt_einsum(&e, "..., 2*i => ..., i", ev, 1, t, NULL);
  cn_shape_op *odd_r = pt_einsum(&e, "..., 2*i + 1 => ..., i", od, 1, t, NULL);
  if (!even_w || !odd_w || !even_r || !odd_r || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, t), "|->2,6");
  CHECK_STR(cn_shape_str(e.shapes, od), "|->2,3");
  cn_proj *pe = pt_infer(&e, even_w,
                         "product space: i0=2 i=3\n"
                         "lhs  [2, 6]: (i0, 2*i)\n"
                         "rhs1 [2, 3]: (i0, i)\n");
  cn_proj *po = pt_infer(&e, odd_w,
                         "product space: i0=2 i=3\n"
                         "lhs  [2, 6]: (i0, 2*i + 1)\n"
                         "rhs1 [2, 3]: (i0, i)\n");
  CHECK(pe && !cn_proj_lhs_surjective(pe) && cn_proj_lhs_injective(pe));
  cn_proj *re = pt_infer(&e, even_r,
                         "product space: i0=2 i=3\n"
                         "lhs  [2, 3]: (i0, i)\n"
                         "rhs1 [2, 6]: (i0, 2*i)\n");
  cn_proj *ro = pt_infer(&e, odd_r,
                         "product space: i0=2 i=3\n"
                         "lhs  [2, 3]: (i0, i)\n"
                         "rhs1 [2, 6]: (i0, 2*i + 1)\n");
  /* the gradients of the extractions are the interleaving writes: the inverse strided maps */
  cn_proj *ge = re ? cn_proj_permute(e.ctx, re, 1, 1, (int[]){0}) : NULL;
  cn_proj *go = ro ? cn_proj_permute(e.ctx, ro, 1, 1, (int[]){0}) : NULL;
  CHECK_STR(ge ? cn_proj_to_string(e.ctx, ge) : NULL, "product space: i0=2 i=3\n"
                                                      "lhs  [2, 6]: (i0, 2*i)\n"
                                                      "rhs1 [2, 3]: (i0, i)\n");
  CHECK_STR(go ? cn_proj_to_string(e.ctx, go) : NULL, "product space: i0=2 i=3\n"
                                                      "lhs  [2, 6]: (i0, 2*i + 1)\n"
                                                      "rhs1 [2, 3]: (i0, i)\n");

  cn_node *n1 = pt_node(&e, t1, CN_PREC_DOUBLE), *n2 = pt_node(&e, t2, CN_PREC_DOUBLE),
          *nt = pt_node(&e, t, CN_PREC_DOUBLE), *ne = pt_node(&e, ev, CN_PREC_DOUBLE),
          *nod = pt_node(&e, od, CN_PREC_DOUBLE);
  pt_iota(n1, 1);
  pt_iota(n2, -1);
  /* the two copies miss each other and tile t exactly */
  cn_asgn *both[2] = {pt_accum(&e, true, CN_OP_ADD, nt, CN_OP_ID, 1, n1, NULL, pe),
                      pt_accum(&e, false, CN_OP_ADD, nt, CN_OP_ID, 1, n2, NULL, po)};
  cn_asgn *seq = both[0] && both[1] ? cn_asgn_seq(e.ctx, 2, both) : NULL;
  double want[12];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 3; i++) {
      want[r * 6 + 2 * i] = r * 3 + i + 1;
      want[r * 6 + 2 * i + 1] = -(r * 3 + i + 1);
    }
  pt_run(&e, "interleave", seq, nt, 77, want, 0);
  /* extraction reads back each half */
  pt_set(nt, want);
  double want_even[6] = {1, 2, 3, 4, 5, 6}, want_odd[6] = {-1, -2, -3, -4, -5, -6};
  pt_run(&e, "extract_even", pt_accum(&e, true, CN_OP_ADD, ne, CN_OP_ID, 1, nt, NULL, re), ne, 0,
         want_even, 0);
  pt_run(&e, "extract_odd", pt_accum(&e, true, CN_OP_ADD, nod, CN_OP_ID, 1, nt, NULL, ro), nod, 0,
         want_odd, 0);
  /* gradient of the odd extraction: scatters g back to the odd cells, zeros elsewhere */
  double g_odd[12];
  for (int i = 0; i < 12; i++) g_odd[i] = i % 2 ? -((i / 6) * 3 + (i % 6) / 2 + 1) : 0;
  pt_set(nod, want_odd);
  pt_run(&e, "extract_odd_grad", pt_accum(&e, true, CN_OP_ADD, nt, CN_OP_ID, 1, nod, NULL, go), nt,
         5, g_odd, 0);
  pt_close(&e);
}

/* ---- Gradients by slot permutation, against finite differences ----
 * Forward out = f(x, w) through the record p; loss L = sum_o c[o] * out[o]. The gradient
 * assignments gx =+ g * v2 and gw =+ v1 * g (g = c) must match (L(x + h e_i) - L(x)) / h. */
typedef struct {
  pt_env *e;
  cn_node *x, *w, *out;
  const cn_asgn *forward;
  const double *c;
} fd_setup;

static double loss(fd_setup *s) {
  cn_routine *r = cn_routine_compile(s->e->ctx, s->forward, CN_BACKEND_INTERP, "fd_forward");
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(s->e->ctx));
  if (!r) return NAN;
  CHECK(cn_routine_run(r) == CN_OK);
  size_t n = (size_t)cn_node_numel(s->out);
  double out[64], total = 0;
  CHECK(n <= 64 && cn_node_get_values(s->out, false, out, n) == CN_OK);
  for (size_t i = 0; i < n; i++) total += s->c[i] * out[i];
  cn_routine_free(r);
  return total;
}

/* d loss / d node (numel <= 64) by forward differences (the loss is bilinear: exact up to
 * rounding). */
static void finite_diff(fd_setup *s, cn_node *node, double *grad) {
  size_t n = (size_t)cn_node_numel(node);
  double v[64], base = loss(s), h = 0.5;
  CHECK(cn_node_get_values(node, false, v, n) == CN_OK);
  for (size_t i = 0; i < n; i++) {
    v[i] += h;
    CHECK(cn_node_set_values(node, false, v, n) == CN_OK);
    grad[i] = (loss(s) - base) / h;
    v[i] -= h;
    CHECK(cn_node_set_values(node, false, v, n) == CN_OK);
  }
}

static void check_gradients(pt_env *e, const char *name, cn_proj *p, cn_node *x, cn_node *w,
                            cn_node *out, cn_node *gx, cn_node *gw, const double *c) {
  cn_node *g = cn_node_create(e->ctx, "g", CN_PREC_DOUBLE, cn_node_rank(out),
                              (int64_t[]){cn_node_dim(out, 0), cn_node_dim(out, 1)});
  if (!g || !p) return;
  pt_set(g, c);
  fd_setup s = {e, x, w, out, pt_accum(e, true, CN_OP_ADD, out, CN_OP_MUL, 2, x, w, p), c};
  double fx[64], fw[64];
  finite_diff(&s, x, fx);
  finite_diff(&s, w, fw);
  cn_proj *px = cn_proj_permute(e->ctx, p, 1, 2, (int[]){0, 2});
  cn_proj *pw = cn_proj_permute(e->ctx, p, 2, 2, (int[]){1, 0});
  CHECK(px && pw);
  pt_run(e, name, pt_accum(e, true, CN_OP_ADD, gx, CN_OP_MUL, 2, g, w, px), gx, 13, fx, 1e-9);
  pt_run(e, name, pt_accum(e, true, CN_OP_ADD, gw, CN_OP_MUL, 2, x, g, pw), gw, 13, fw, 1e-9);
}

static void test_gradients(void) {
  /* matmul */
  pt_env e = pt_open();
  cn_shape *a = pt_shape(&e, "a", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *b = pt_shape(&e, "b", PT_NONE, PT_NONE, PT_DIMS(3, 2));
  cn_shape *c = pt_shape(&e, "c", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *ga = pt_shape(&e, "ga", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *gb = pt_shape(&e, "gb", PT_NONE, PT_NONE, PT_DIMS(3, 2));
  cn_shape_op *op = pt_einsum(&e, "ij;jk=>ik", c, 2, a, b);
  if (op && pt_finalize(&e)) {
    cn_proj *p = pt_infer(&e, op, NULL);
    cn_node *na = pt_node(&e, a, CN_PREC_DOUBLE), *nb = pt_node(&e, b, CN_PREC_DOUBLE),
            *nc = pt_node(&e, c, CN_PREC_DOUBLE);
    pt_set(na, (double[]){1, -2, 3, 0.5, 2, -1});
    pt_set(nb, (double[]){2, 1, -1, 3, 0.25, 4});
    check_gradients(&e, "grad_matmul", p, na, nb, nc, pt_node(&e, ga, CN_PREC_DOUBLE),
                    pt_node(&e, gb, CN_PREC_DOUBLE), (double[]){1, -3, 2, 0.5});
  }
  pt_close(&e);

  /* padded convolution, 2-D, stride 1, kernel 3x2: the input gradient writes into the margins
   * (its node carries the same padding), and only the interior is compared */
  e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_DIMS(3, 4));
  cn_shape *w = pt_shape(&e, "w", PT_NONE, PT_NONE, PT_DIMS(3, 2));
  cn_shape *out = pt_shape(&e, "out", PT_ANY, PT_ANY, PT_ANY);
  op = pt_einsum(&e, "oh=+kh, ow=+kw; kh, kw => oh, ow", out, 2, x, w);
  if (op && pt_finalize(&e)) {
    CHECK_STR(cn_shape_str(e.shapes, out), "|->3,4");
    cn_proj *p = pt_infer(&e, op,
                          "product space: oh=3 ow=4 kh=3 kw=2\n"
                          "lhs  [3, 4]: (oh, ow)\n"
                          "rhs1 [3, 4]: (oh + kh - 1, ow + kw - 1)\n"
                          "rhs2 [3, 2]: (kh, kw)\n");
    int64_t m[2];
    cn_proj_padding(e.projs, x, 1, m); /* convolution-is-a-contraction: k = 2 splits right = 1, left
                                          = 1 */
    CHECK(m[0] == 1 && m[1] == 1);
    cn_node *nx = pt_node(&e, x, CN_PREC_DOUBLE), *nw = pt_node(&e, w, CN_PREC_DOUBLE),
            *no = pt_node(&e, out, CN_PREC_DOUBLE), *gx = pt_node(&e, x, CN_PREC_DOUBLE),
            *gw = pt_node(&e, w, CN_PREC_DOUBLE);
    double xs[12], c[12];
    for (int i = 0; i < 12; i++) {
      xs[i] = (i * 5 % 7) - 3;
      c[i] = (i % 3) - 0.75;
    }
    pt_set(nx, xs);
    pt_set(nw, (double[]){1, 2, -1, 0.5, 3, -2});
    check_gradients(&e, "grad_conv", p, nx, nw, no, gx, gw, c);
  }
  pt_close(&e);
}

int main(void) {
  test_valid_1d();
  test_strided_dilated_2d();
  test_padded_two_readers();
  test_interleave_and_extraction();
  test_gradients();
  CHECK_DONE();
}
