/* Shared helpers of the loop-IR tests (test_loops, test_interp, test_cgen, test_tile_ir): nodes,
 * projections slots and affine indices in one call, and CHECK_STR against a printf-formatted
 * expectation (node ids are not known in advance). The IR itself is built with the cn_lb_*
 * constructors of loops.h, so that a test reads as an IR listing; a test that builds IR by hand
 * depends on loops.h only, not on the lowering. */
#ifndef CN_LOOPS_CHECK_H
#define CN_LOOPS_CHECK_H

#include "check.h"
#include "loops/loops.h"
#include "numeric/numeric.h"

#include <math.h>
#include <stdarg.h>

/* A node of the given dims (rank int64_t arguments). */
static inline cn_node *node(cn_ctx *ctx, const char *label, cn_prec prec, int rank, ...) {
  int64_t dims[CN_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++) dims[d] = va_arg(ap, int64_t);
  va_end(ap);
  return cn_node_create(ctx, label, prec, rank, dims);
}

/* Fills a node's whole buffer (padding included) with values of spread exponents and signs and a
 * few zeros of both signs, from `seed`: rounding differs between a fused and a separate
 * multiply-add on almost every cell of a product of such values. */
static inline void fill_spread(cn_node *n, uint64_t seed) {
  size_t cells = cn_node_buffer_cells(n);
  void *buf = cn_node_buffer(n, false);
  for (size_t i = 0; i < cells; i++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    double v = ldexp((double)(seed >> 40) / (double)(1u << 24) - 0.5, (int)(seed >> 20 & 7) - 3);
    if ((seed >> 8 & 31) == 0) v = (seed >> 13 & 1) ? -0.0 : 0.0;
    cn_value_store(n->prec, cn_value_of_double(n->prec, v),
                   (char *)buf + i * cn_prec_bytes(n->prec));
  }
}

/* A projections slot: the node's rank and dims, indexed by map. */
static inline cn_proj_tensor tensor(const cn_node *n, const cn_index *map) {
  return (cn_proj_tensor){n->rank, n->dims, map};
}

/* coeff * sym + offset, in canonical form. */
static inline cn_index affine1(cn_symbol sym, int64_t coeff, int64_t offset) {
  return cn_index_affine(1, &sym, &coeff, offset);
}

/* c0 * s0 + c1 * s1 + offset, in canonical form. */
static inline cn_index affine2(cn_symbol s0, int64_t c0, cn_symbol s1, int64_t c1, int64_t offset) {
  cn_symbol syms[2] = {s0, s1};
  int64_t coeffs[2] = {c0, c1};
  return cn_index_affine(2, syms, coeffs, offset);
}

/* The body of a single-precision matmul c[m, n] =: a[m, kk] * b[kk, n], params 0, 1, 2 being a, b,
 * c: the comment, c[r, s] := 0 over rows r and columns s, then c[r, s] := c[r, s] + a[r, t] *
 * b[t, s] with the reduction t innermost. */
static inline cn_ll_stmt *matmul_body(cn_ctx *ctx, const char *comment, cn_symbol r, int64_t m,
                                      cn_symbol s, int64_t n, cn_symbol t, int64_t kk) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *c_rs = cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(s));
  cn_ll_stmt *prefill = cn_lb_loop(
      ctx, r, 0, m, cn_lb_loop(ctx, s, 0, n, cn_lb_set(ctx, 2, c_rs, cn_lb_num(ctx, single, 0))));
  cn_ll_expr *product = cn_lb_op(
      ctx, CN_OP_MUL, single,
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(t))),
      cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 2, cn_index_iter(t), cn_index_iter(s))), NULL);
  cn_ll_stmt *accumulate = cn_lb_loop(
      ctx, r, 0, m,
      cn_lb_loop(ctx, s, 0, n,
                 cn_lb_loop(ctx, t, 0, kk, cn_lb_accum(ctx, 2, single, c_rs, CN_OP_ADD, product))));
  return cn_lb_seq(ctx, 3, cn_lb_comment(ctx, comment), prefill, accumulate);
}

static inline void check_text(const char *actual, const char *fmt, ...) {
  char expected[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  CHECK_STR(actual, expected);
}

/* out[o] (double) =: sum_k w[k] * x[b, 2o + k - 1], params 0, 1, 2 being x (single [2, 5], its
 * axis 1 padded 2 left and 1 right: 8 cells a row, the reads reaching both margins), w (single
 * [3]) and out (double [3]), b a free symbol: a prefill nest and an accumulation nest, both o
 * loops carrying `marks`. The nodes go to *x, *w, *out. */
static inline cn_ll_proc *padded_conv_proc(cn_ctx *ctx, unsigned marks, cn_node **x, cn_node **w,
                                           cn_node **out) {
  int64_t x_dims[2] = {2, 5}, w_dims[1] = {3}, out_dims[1] = {3};
  *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 2, x_dims);
  *w = cn_node_create(ctx, "w", CN_PREC_SINGLE, 1, w_dims);
  *out = cn_node_create(ctx, "out", CN_PREC_DOUBLE, 1, out_dims);
  CHECK(*x && *w && *out);
  CHECK_INT(cn_node_set_padding(*x, 1, 2, 1), CN_OK);
  cn_symbol b = cn_symbol_create(ctx, "b", 2), o = cn_symbol_create(ctx, "o", 3),
            k = cn_symbol_create(ctx, "k", 3);
  cn_index *out_o = cn_lb_indices(ctx, 1, cn_index_iter(o));
  cn_ll_stmt *prefill = cn_lb_marks(
      cn_lb_loop(ctx, o, 0, 3, cn_lb_set(ctx, 2, out_o, cn_lb_num(ctx, CN_PREC_DOUBLE, 0))), marks);
  cn_ll_expr *product =
      cn_lb_op(ctx, CN_OP_MUL, CN_PREC_DOUBLE,
               cn_lb_get(ctx, 1, CN_PREC_SINGLE, cn_lb_indices(ctx, 1, cn_index_iter(k))),
               cn_lb_get(ctx, 0, CN_PREC_SINGLE,
                         cn_lb_indices(ctx, 2, cn_index_iter(b), affine2(o, 2, k, 1, -1))),
               NULL);
  cn_ll_stmt *accumulate = cn_lb_marks(
      cn_lb_loop(
          ctx, o, 0, 3,
          cn_lb_loop(ctx, k, 0, 3, cn_lb_accum(ctx, 2, CN_PREC_DOUBLE, out_o, CN_OP_ADD, product))),
      marks);
  cn_ll_param params[3] = {{*x, false}, {*w, false}, {*out, false}};
  return cn_lb_proc(ctx, "conv", cn_lb_seq(ctx, 2, prefill, accumulate), 3, params, 1, &b);
}

/* din[b, oh + kh, 2 ow + 2 kw, ic] += dout[b, oh, ow, oc] * w[oc, kh, kw, ic] over n = {dout, w,
 * din} (single), loops b, oh, ow, oc, ic, kh, kw as the lowering orders a convolution's input
 * gradient (stride 2 and dilation 2 on the second axis): not GEMM-class (written axes mix two
 * loops) until the GEMM pass runs kh and kw outside, descending, around a GEMM over (b, oh, ow) x
 * ic x oc. */
static inline cn_ll_proc *input_gradient_proc(cn_ctx *ctx, cn_node *const *n) {
  const char *names[7] = {"b", "oh", "ow", "oc", "ic", "kh", "kw"};
  cn_symbol v[7];
  for (int a = 0; a < 7; a++) v[a] = cn_symbol_create(ctx, names[a], 0);
  int64_t ext[7] = {n[0]->dims[0], n[0]->dims[1], n[0]->dims[2], n[0]->dims[3],
                    n[1]->dims[3], n[1]->dims[1], n[1]->dims[2]};
  cn_ll_expr *p = cn_lb_op(ctx, CN_OP_MUL, CN_PREC_SINGLE,
                           cn_lb_get(ctx, 0, CN_PREC_SINGLE,
                                     cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                                   cn_index_iter(v[2]), cn_index_iter(v[3]))),
                           cn_lb_get(ctx, 1, CN_PREC_SINGLE,
                                     cn_lb_indices(ctx, 4, cn_index_iter(v[3]), cn_index_iter(v[5]),
                                                   cn_index_iter(v[6]), cn_index_iter(v[4]))),
                           NULL);
  cn_ll_stmt *body =
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE,
                  cn_lb_indices(ctx, 4, cn_index_iter(v[0]), affine2(v[1], 1, v[5], 1, 0),
                                affine2(v[2], 2, v[6], 2, 0), cn_index_iter(v[4])),
                  CN_OP_ADD, p);
  for (int a = 6; a >= 0; a--) body = cn_lb_loop(ctx, v[a], 0, ext[a], body);
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "din", body, 3, params, 0, NULL);
}

#endif
