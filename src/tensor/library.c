/* The structured operations of the operation library (issue 5 item 2, ocannl-notes §2.4): each
 * is composed from the core constructors (ops.c) — pointwise application, einsum, compose,
 * stop_gradient, numbers and fetch terminals — so its gradient is the one the core derives for
 * those pieces, and nothing here touches the derivative machinery. Primitive ops have no
 * wrappers: callers use cn_tensor_apply with the op (include/cannl/ops.def is their one table).
 *
 * Layouts (cannl's axis kinds, memory order batch, output, input):
 *   conv2d      x: any batch axes, output axes (h, w, ic); kernel: input axes (kh, kw, ic), output
 *               axis oc (memory [oc, kh, kw, ic]); result: x's batch axes, output (oh, ow, oc);
 *               bias: output axis oc. Spec "... | S*oh=+D*kh, S*ow=+D*kw, ..ic..; kh, kw, ..ic..
 *               -> oc => ... | oh, ow, oc" ('<' instead of '=' for valid mode): the spatial
 *               axes lead the row, as in pooling, the channels are whatever follows them.
 *   pooling     x: any batch axes, output axes (h, w, ..c..); windows read valid-mode, a window
 *               of k and stride s need h = s*(oh-1) + k.
 *   interleave  along the last output axis; batch and input axes are carried along.
 *   softmax     over the whole output row, for each batch and input position.
 *
 * Invariants: a failed argument check returns NULL with a message naming the operation; a
 * composite operation labels its result with the operation's name (the einsum forms keep their
 * spec); helpers return NULL as soon as a piece fails, keeping the message of the constructor
 * that failed. */
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The library's own constants have no axes (cn_tensor_scalar), unlike a user's number (a unit
 * axis, syntax-extensions-cd-op): an initializer such as kaiming_uniform must not give the
 * parameter it initializes an axis, nor a softmax its result. */
static cn_tensor *num(cn_graph *g, double v) {
  return cn_tensor_scalar(g, v);
}

cn_tensor *cn_tensor_apply2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}

cn_tensor *cn_tensor_apply1(cn_graph *g, cn_op op, cn_tensor *a) {
  return a ? cn_tensor_apply(g, op, 1, &a) : NULL;
}

cn_tensor *cn_tensor_labeled(cn_tensor *t, const char *label) {
  return t && cn_tensor_set_label(t, label) == CN_OK ? t : NULL;
}

bool cn_tensor_operands(cn_graph *g, const char *what, int n, cn_tensor *const *ts) {
  for (int i = 0; i < n; i++)
    if (!ts[i]) {
      cn_fail(g->ctx, CN_ERR_INVALID, "%s: operand %d is NULL", what, i + 1);
      return false;
    }
  return true;
}

/* ---- Convenience forms of compose and einsum ------------------------------------------------- */

cn_tensor *cn_tensor_matmul(cn_graph *g, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, a, b);
}

cn_tensor *cn_tensor_pointpow(cn_graph *g, cn_tensor *a, double p) {
  if (!cn_tensor_operands(g, "pointpow", 1, &a)) return NULL;
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_POW, a, num(g, p)), "pointpow");
}

cn_tensor *cn_tensor_einsum1(cn_graph *g, const char *spec, cn_tensor *a) {
  return cn_tensor_einsum(g, spec, CN_OP_ADD, CN_OP_ID, 1, &a);
}

cn_tensor *cn_tensor_einsum2(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_einsum(g, spec, CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, b});
}

cn_tensor *cn_tensor_einsum3(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b,
                             cn_tensor *c) {
  return cn_tensor_einsum(g, spec, CN_OP_ADD, CN_OP_MUL3, 3, (cn_tensor *[]){a, b, c});
}

cn_tensor *cn_tensor_outer_sum(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_einsum(g, spec, CN_OP_ADD, CN_OP_ADD, 2, (cn_tensor *[]){a, b});
}

cn_tensor *cn_tensor_einmax1(cn_graph *g, const char *spec, cn_tensor *a) {
  return cn_tensor_einsum(g, spec, CN_OP_MAX, CN_OP_ID, 1, &a);
}

cn_tensor *cn_tensor_tropical(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_einsum(g, spec, CN_OP_MAX, CN_OP_ADD, 2, (cn_tensor *[]){a, b});
}

/* The leftmost batch axis at a fixed index: an einsum whose operand spec pins that axis. */
cn_tensor *cn_tensor_batch_slice_at(cn_graph *g, cn_tensor *t, int64_t index) {
  if (index < 0) {
    cn_fail(g->ctx, CN_ERR_INVALID, "batch slice: index %lld is negative", (long long)index);
    return NULL;
  }
  char spec[64];
  snprintf(spec, sizeof spec, "%lld...|...->... => ...|...->...", (long long)index);
  return cn_tensor_labeled(cn_tensor_einsum1(g, spec, t), "batch_slice");
}

/* ---- Fetch terminals ------------------------------------------------------------------------- */

static cn_tensor *offsets_with(cn_graph *g, const char *label, const cn_shape_row_spec *rows) {
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_FETCH, g->prec, rows, CN_SL_TERMINAL, NULL, 0, NULL);
  if (t) t->fetch = CN_TF_RANGE_OVER_OFFSETS;
  return t;
}

cn_tensor *cn_tensor_offsets(cn_graph *g) {
  return offsets_with(g, "offsets", NULL);
}

cn_tensor *cn_tensor_range(cn_graph *g, int64_t n) {
  if (n < 1) {
    cn_fail(g->ctx, CN_ERR_INVALID, "range: %lld values (at least 1)", (long long)n);
    return NULL;
  }
  const cn_shape_row_spec rows[CN_N_ROWS] = {
      {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 1, &n, NULL}};
  return offsets_with(g, "range", rows);
}

cn_tensor *cn_tensor_range_of_shape(cn_graph *g, const cn_dims *dims) {
  if (!dims) {
    cn_fail(g->ctx, CN_ERR_INVALID, "range_of_shape: no dims");
    return NULL;
  }
  const cn_axes *axes[CN_N_ROWS] = {&dims->batch, &dims->input, &dims->output};
  cn_shape_row_spec rows[CN_N_ROWS];
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (axes[k]->n < 0 || (axes[k]->n > 0 && !axes[k]->dims)) {
      cn_fail(g->ctx, CN_ERR_INVALID, "range_of_shape: its %s row must be given",
              cn_row_kind_name((cn_row_kind)k));
      return NULL;
    }
    for (int a = 0; a < axes[k]->n; a++)
      if (axes[k]->dims[a] < 1) {
        cn_fail(g->ctx, CN_ERR_INVALID, "range_of_shape: %s axis %d has size %lld",
                cn_row_kind_name((cn_row_kind)k), a, (long long)axes[k]->dims[a]);
        return NULL;
      }
    rows[k] = (cn_shape_row_spec){true, axes[k]->n, axes[k]->dims, axes[k]->labels};
  }
  return offsets_with(g, "range_of_shape", rows);
}

/* t is referenced for its shape only: it is not an operand (n_args stays 0), so the forward code
 * of the embedding does not compute t. */
cn_tensor *cn_tensor_embed_dim(cn_graph *g, cn_tensor *t, int axis) {
  return cn_tensor_embed_dim_prec(g, t, axis, g->prec);
}

cn_tensor *cn_tensor_embed_dim_prec(cn_graph *g, cn_tensor *t, int axis, cn_prec prec) {
  if (!t || t->g != g) {
    cn_fail(g->ctx, CN_ERR_INVALID, "embed_dim: the tensor is %s",
            t ? "from another graph" : "NULL");
    return NULL;
  }
  if (axis < 0 || axis >= CN_MAX_RANK) {
    cn_fail(g->ctx, CN_ERR_INVALID, "embed_dim: axis %d of \"%s\" (#%d) does not exist", axis,
            t->label, t->id);
    return NULL;
  }
  const cn_shape_row_spec scalar[CN_N_ROWS] = {
      {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 0, NULL, NULL}};
  cn_tensor *r =
      cn_tensor_new(g, "embed_dim", CN_TK_FETCH, prec, scalar, CN_SL_TERMINAL, NULL, 0, NULL);
  if (!r) return NULL;
  r->fetch = CN_TF_EMBED_DIM;
  r->args[0] = t;
  r->embed_axis = axis;
  return r;
}

/* ---- Interleaving: strided writes and reads along the last output axis
 * (convolution-is-a-contraction) ------------ */

/* Each strided copy writes every other cell and leaves the rest at 0, so the sum of the two
 * copies is the interleaving; the gradient of each copy reads g back at its own cells. The sum is
 * an einsum (equalities: a and b must have the same shape, checked as soon as it is built). */
cn_tensor *cn_tensor_interleave(cn_graph *g, cn_tensor *a, cn_tensor *b) {
  if (!cn_tensor_operands(g, "interleave", 2, (cn_tensor *[]){a, b})) return NULL;
  cn_tensor *even = cn_tensor_einsum1(g, "...|...->..., i => ...|...->..., 2*i", a);
  cn_tensor *odd =
      even ? cn_tensor_einsum1(g, "...|...->..., i => ...|...->..., 2*i + 1", b) : NULL;
  cn_tensor *sum =
      odd ? cn_tensor_outer_sum(g, "...|...->...; ...|...->... => ...|...->...", even, odd) : NULL;
  return cn_tensor_labeled(sum, "interleave");
}

cn_tensor *cn_tensor_deinterleave_even(cn_graph *g, cn_tensor *t) {
  return cn_tensor_labeled(cn_tensor_einsum1(g, "...|...->..., 2*i => ...|...->..., i", t),
                           "deinterleave_even");
}

cn_tensor *cn_tensor_deinterleave_odd(cn_graph *g, cn_tensor *t) {
  return cn_tensor_labeled(cn_tensor_einsum1(g, "...|...->..., 2*i + 1 => ...|...->..., i", t),
                           "deinterleave_odd");
}

/* ---- Convolution and pooling ----------------------------------------------------------------- */

static bool positive(cn_graph *g, const char *what, const char *name, int64_t v) {
  if (v >= 1) return true;
  cn_fail(g->ctx, CN_ERR_INVALID, "%s: %s %lld (must be at least 1)", what, name, (long long)v);
  return false;
}

/* "S*over<+D*kernel" ('=' when padded), leaving out unit factors. */
static void affine_axis(char *buf, size_t cap, int64_t stride, const char *over, bool valid,
                        int64_t dilation, const char *kernel) {
  char s[32] = "", d[32] = "";
  if (stride != 1) snprintf(s, sizeof s, "%lld*", (long long)stride);
  if (dilation != 1) snprintf(d, sizeof d, "%lld*", (long long)dilation);
  snprintf(buf, cap, "%s%s%c+%s%s", s, over, valid ? '<' : '=', d, kernel);
}

cn_tensor *cn_tensor_conv2d(cn_graph *g, cn_tensor *x, cn_tensor *kernel, cn_tensor *bias,
                            const cn_conv2d *opts) {
  int64_t stride = opts && opts->stride ? opts->stride : 1;
  int64_t dilation = opts && opts->dilation ? opts->dilation : 1;
  bool valid = opts && opts->valid;
  if (!positive(g, "conv2d", "stride", stride) || !positive(g, "conv2d", "dilation", dilation) ||
      !cn_tensor_operands(g, "conv2d", 2, (cn_tensor *[]){x, kernel}))
    return NULL;
  char h[64], w[64], spec[256];
  affine_axis(h, sizeof h, stride, "oh", valid, dilation, "kh");
  affine_axis(w, sizeof w, stride, "ow", valid, dilation, "kw");
  /* the spatial axes lead x's output row and the channels follow as a row variable, as in the
   * pooling spec, so the two rows pair axis by axis as soon as they meet; a row given only by
   * its last axes (`h, w, ic`) met by a pooling's leading (oh, ow, ..c..) has no most general
   * unifier and waits for a rank, or for the solver's closing rule (shape/finalize.c,
   * close_flanks) */
  snprintf(spec, sizeof spec, "... | %s, %s, ..ic..; kh, kw, ..ic.. -> oc => ... | oh, ow, oc", h,
           w);
  cn_tensor *y = cn_tensor_einsum2(g, spec, x, kernel);
  if (y && bias) y = cn_tensor_apply2(g, CN_OP_ADD, y, bias);
  return cn_tensor_labeled(y, "conv2d");
}

/* The window as a constant [window, window] tensor filled with `fill`: it sizes the window
 * labels of the pooling spec (einsum shapes do not broadcast, so a plain number would not). */
static cn_tensor *window_of(cn_graph *g, int64_t window, double fill) {
  const int64_t dims[2] = {window, window};
  const cn_shape_row_spec rows[CN_N_ROWS] = {
      {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 2, dims, NULL}};
  char label[64];
  snprintf(label, sizeof label, "window_%g", fill);
  return cn_tensor_constant(g, label, fill, rows);
}

static cn_tensor *pool2d(cn_graph *g, const char *what, cn_tensor *x, int64_t window,
                         int64_t stride, bool max) {
  if (stride == 0) stride = window;
  if (!positive(g, what, "window", window) || !positive(g, what, "stride", stride) ||
      !cn_tensor_operands(g, what, 1, &x))
    return NULL;
  char h[64], w[64], spec[256];
  affine_axis(h, sizeof h, stride, "oh", true, 1, "wh");
  affine_axis(w, sizeof w, stride, "ow", true, 1, "ww");
  snprintf(spec, sizeof spec, "... | %s, %s, ..c..; wh, ww => ... | oh, ow, ..c..", h, w);
  /* max: max over the window of x + 0 (tropical); average: sum over the window of x / k^2 */
  cn_tensor *k = window_of(g, window, max ? 0 : 1.0 / (double)(window * window));
  if (!k) return NULL;
  return cn_tensor_labeled(
      max ? cn_tensor_tropical(g, spec, x, k) : cn_tensor_einsum2(g, spec, x, k), what);
}

cn_tensor *cn_tensor_max_pool2d(cn_graph *g, cn_tensor *x, int64_t window, int64_t stride) {
  return pool2d(g, "max_pool2d", x, window, stride, true);
}

cn_tensor *cn_tensor_avg_pool2d(cn_graph *g, cn_tensor *x, int64_t window, int64_t stride) {
  return pool2d(g, "avg_pool2d", x, window, stride, false);
}

/* exp(x - max) / sum exp(x - max) over the output row. The max only keeps exp in range: the
 * softmax does not depend on it, so its gradient is stopped rather than computed to cancel. The
 * broadcast max and x - max are handed to no caller and read by no gradient (exp's reads its
 * output), so, like a script's unnamed values (graph.c fusable), the schedule may inline them
 * into exp instead of storing two temporaries of x's size. */
cn_tensor *cn_tensor_softmax(cn_graph *g, cn_tensor *x) {
  static const char reduce[] = "... | ..i.. -> ..o.. => ... | ..i.. ->";
  if (!cn_tensor_operands(g, "softmax", 1, &x)) return NULL;
  cn_tensor *max = cn_tensor_einmax1(g, reduce, x);
  cn_tensor *m = max ? cn_tensor_stop_gradient(g, max) : NULL;
  cn_tensor *d = cn_tensor_apply2(g, CN_OP_SUB, x, m);
  if (d) m->scripted = d->scripted = true;
  cn_tensor *e = cn_tensor_apply1(g, CN_OP_EXP, d);
  cn_tensor *s = e ? cn_tensor_einsum1(g, reduce, e) : NULL;
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_DIV, e, s), "softmax");
}

/* ---- Initializers ---------------------------------------------------------------------------- */

/* Box-Muller: sqrt(-2 ln(1 - u1)) * cos(2 pi u2) with u1, u2 uniform in [0, 1); 1 - u1 is in
 * (0, 1], so the logarithm is finite. */
static cn_tensor *box_muller(cn_graph *g, cn_tensor *u1, cn_tensor *u2) {
  if (!u1 || !u2) return NULL;
  cn_tensor *log1 = cn_tensor_apply1(g, CN_OP_LOG, cn_tensor_apply2(g, CN_OP_SUB, num(g, 1), u1));
  cn_tensor *radius =
      cn_tensor_apply1(g, CN_OP_SQRT, cn_tensor_apply2(g, CN_OP_MUL, num(g, -2), log1));
  cn_tensor *angle = cn_tensor_apply1(
      g, CN_OP_COS, cn_tensor_apply2(g, CN_OP_MUL, num(g, 6.283185307179586477), u2));
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_MUL, radius, angle), "normal");
}

/* The two streams are built one after the other (tensor ids, hence random values, follow the
 * order of construction, which a single expression would leave unspecified). */
cn_tensor *cn_tensor_normal(cn_graph *g) {
  cn_tensor *u1 = cn_tensor_uniform1(g);
  cn_tensor *u2 = u1 ? cn_tensor_uniform1(g) : NULL;
  return box_muller(g, u1, u2);
}

cn_tensor *cn_tensor_normal_at(cn_graph *g, cn_tensor *counter) {
  cn_tensor *u1 = cn_tensor_uniform_at(g, counter);
  cn_tensor *u2 = u1 ? cn_tensor_uniform_at(g, counter) : NULL;
  return box_muller(g, u1, u2);
}

/* bound * (2 u - 1): uniform in [-bound, bound). */
static cn_tensor *symmetric_uniform(cn_graph *g, double bound, const char *label) {
  cn_tensor *u = cn_tensor_uniform1(g);
  cn_tensor *twice = cn_tensor_apply2(g, CN_OP_MUL, num(g, 2), u);
  cn_tensor *centered = cn_tensor_apply2(g, CN_OP_SUB, twice, num(g, 1));
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_MUL, num(g, bound), centered), label);
}

static bool fan_ok(cn_graph *g, const char *what, double fan) {
  if (fan > 0 && isfinite(fan)) return true;
  cn_fail(g->ctx, CN_ERR_INVALID, "%s: fan %g (must be positive)", what, fan);
  return false;
}

cn_tensor *cn_tensor_xavier(cn_graph *g, double fan_in, double fan_out) {
  if (!fan_ok(g, "xavier", fan_in) || !fan_ok(g, "xavier", fan_out)) return NULL;
  return symmetric_uniform(g, sqrt(6 / (fan_in + fan_out)), "xavier");
}

cn_tensor *cn_tensor_kaiming_uniform(cn_graph *g, double fan_in) {
  if (!fan_ok(g, "kaiming_uniform", fan_in)) return NULL;
  return symmetric_uniform(g, sqrt(6 / fan_in), "kaiming_uniform");
}

cn_tensor *cn_tensor_kaiming_normal(cn_graph *g, double fan_in) {
  if (!fan_ok(g, "kaiming_normal", fan_in)) return NULL;
  cn_tensor *n = cn_tensor_normal(g);
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_MUL, num(g, sqrt(2 / fan_in)), n),
                           "kaiming_normal");
}
