/* The training pieces of the operation library: log_softmax, sigmoid, softplus, clip, the
 * reductions sum, mean, max and min, the losses mse, binary_cross_entropy and cross_entropy, and
 * the metrics argmax, accuracy and confusion. Like library.c, each is composed from the core
 * constructors (pointwise application, einsum, stop_gradient, constants, an offsets fetch), so its
 * gradient is the one the core derives for those pieces.
 *
 * Layouts: classes lie along x's output axes, an example is one batch and input position (the
 * per-example reductions use softmax's spec, "... | ..i.. -> ..o.. => ... | ..i.. ->"); labels
 * have x's batch axes and no output axis or one of size 1, and select their class by comparing
 * with the class indices, which broadcast along the batch axes. A label that is not a class index
 * would match none, so cross_entropy, accuracy and confusion also compute a guard of the labels
 * (label_guard) that fails the run holding one.
 *
 * Invariants: numerically every exp reads a non-positive argument (x - max, or -|x|), so no
 * value or gradient overflows for finite inputs; whatever is not differentiated (the max of
 * log_softmax, the counts of mean, the class indices, the metrics) is either stopped or built
 * from ops without a derivative, so it never receives a gradient; a failed piece returns NULL
 * keeping the message of the constructor that failed, and a composite labels its result with
 * the operation's name. */
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>

/* Per example: reduce over the output axes, keep the batch and input axes. */
static const char per_example[] = "... | ..i.. -> ..o.. => ... | ..i.. ->";
/* Every cell of the first operand with a second operand without axes (a scalar). */
static const char all_to_scalar[] = "...|...->...; => ";

static cn_tensor *tri(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b, cn_tensor *c) {
  return a && b && c ? cn_tensor_apply(g, op, 3, (cn_tensor *[]){a, b, c}) : NULL;
}

/* Constants without axes (as in library.c): they fill whatever shape they meet and never give a
 * loss an axis. */
static cn_tensor *num(cn_graph *g, double v) {
  return cn_tensor_scalar(g, v);
}

/* ---- Pointwise ------------------------------------------------------------------------------- */

/* -|x| as where(x < 0, x, -x): its exp lies in (0, 1]. At 0 it takes the -x branch, the side of
 * the x >= 0 formulas below, so the gradient there is the one of the smooth function. */
static cn_tensor *minus_abs(cn_graph *g, cn_tensor *x, cn_tensor *negative) {
  return tri(g, CN_OP_WHERE, negative, x, cn_tensor_apply1(g, CN_OP_NEG, x));
}

/* With e = exp(-|x|): 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0. The naive
 * 1 / (1 + exp(-x)) has the right value but a NaN gradient once exp(-x) overflows. */
cn_tensor *cn_tensor_sigmoid(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "sigmoid", 1, &x)) return NULL;
  cn_tensor *negative = cn_tensor_apply2(g, CN_OP_LT, x, num(g, 0));
  cn_tensor *e = cn_tensor_apply1(g, CN_OP_EXP, minus_abs(g, x, negative));
  cn_tensor *numer = tri(g, CN_OP_WHERE, negative, e, num(g, 1));
  return cn_tensor_labeled(
      cn_tensor_apply2(g, CN_OP_DIV, numer, cn_tensor_apply2(g, CN_OP_ADD, num(g, 1), e)),
      "sigmoid");
}

/* max(x, 0) + log(1 + exp(-|x|)); max gives a tie at 0 to x, so softplus'(0) = 1 - 1/2. */
cn_tensor *cn_tensor_softplus(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "softplus", 1, &x)) return NULL;
  cn_tensor *negative = cn_tensor_apply2(g, CN_OP_LT, x, num(g, 0));
  cn_tensor *e = cn_tensor_apply1(g, CN_OP_EXP, minus_abs(g, x, negative));
  cn_tensor *log1p = cn_tensor_apply1(g, CN_OP_LOG, cn_tensor_apply2(g, CN_OP_ADD, num(g, 1), e));
  return cn_tensor_labeled(
      cn_tensor_apply2(g, CN_OP_ADD, cn_tensor_apply2(g, CN_OP_MAX, x, num(g, 0)), log1p),
      "softplus");
}

/* min(max(x, lo), hi): max passes the gradient where x >= lo, min where it is <= hi, so it flows
 * on the closed interval, as torch.clamp's; an infinite bound is no op at all. */
cn_tensor *cn_tensor_clip(cn_graph *g, cn_tensor *x, double lo, double hi) {
  if (!cn_tensor_operands(g, "clip", 1, &x)) return NULL;
  if (isnan(lo) || isnan(hi) || lo > hi || lo == INFINITY || hi == -INFINITY) {
    cn_fail(g->ctx, CN_ERR_INVALID, "clip: the bounds %g and %g are not an interval (min <= max)",
            lo, hi);
    return NULL;
  }
  cn_tensor *r = lo == -INFINITY ? x : cn_tensor_apply2(g, CN_OP_MAX, x, num(g, lo));
  if (hi != INFINITY) r = cn_tensor_apply2(g, CN_OP_MIN, r, num(g, hi));
  if (r == x) r = cn_tensor_apply1(g, CN_OP_ID, x); /* a tensor of its own, labeled clip */
  return cn_tensor_labeled(r, "clip");
}

/* ---- Reductions ------------------------------------------------------------------------------ */

cn_tensor *cn_tensor_sum(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "sum", 1, &x)) return NULL;
  return cn_tensor_labeled(cn_tensor_einsum1(g, "...|...->... => ", x), "sum");
}

/* einmax1 and its min: an einsum accumulating with max or min, which backprop gates to the cells
 * attaining the result. */
static cn_tensor *extremum(cn_graph *g, const char *what, cn_op accum, cn_tensor *x,
                           const char *spec) {
  if (!cn_tensor_operands(g, what, 1, &x)) return NULL;
  return cn_tensor_labeled(
      cn_tensor_einsum(g, spec ? spec : "...|...->... => ", accum, CN_OP_ID, 1, &x), what);
}

cn_tensor *cn_tensor_reduce_max(cn_graph *g, cn_tensor *x, const char *spec) {
  return extremum(g, "max", CN_OP_MAX, x, spec);
}

cn_tensor *cn_tensor_reduce_min(cn_graph *g, cn_tensor *x, const char *spec) {
  return extremum(g, "min", CN_OP_MIN, x, spec);
}

/* The number of cells of x, counted at run time (x's shape may be solved only at
 * materialization): the sum of 1 over x's cells, read through snd, which has no derivative in
 * x and does not read it. */
static cn_tensor *count(cn_graph *g, cn_tensor *x) {
  cn_tensor *one = num(g, 1);
  return one ? cn_tensor_einsum(g, all_to_scalar, CN_OP_ADD, CN_OP_ARG2, 2, (cn_tensor *[]){x, one})
             : NULL;
}

/* sum(x / count) as one einsum: its result is exactly a scalar, where a pointwise division of
 * two scalars could be widened by inference to the shape of a consumer. */
cn_tensor *cn_tensor_mean(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "mean", 1, &x)) return NULL;
  cn_tensor *n = count(g, x);
  return cn_tensor_labeled(
      n ? cn_tensor_einsum(g, all_to_scalar, CN_OP_ADD, CN_OP_DIV, 2, (cn_tensor *[]){x, n}) : NULL,
      "mean");
}

/* ---- Losses ---------------------------------------------------------------------------------- */

cn_tensor *cn_tensor_mse(cn_graph *g, cn_tensor *pred, cn_tensor *target) {
  if (!cn_tensor_operands(g, "mse", 2, (cn_tensor *[]){pred, target})) return NULL;
  cn_tensor *d = cn_tensor_apply2(g, CN_OP_SUB, pred, target);
  return cn_tensor_labeled(cn_tensor_mean(g, cn_tensor_apply2(g, CN_OP_MUL, d, d)), "mse");
}

/* softplus(z) - y z = -(y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))), without a log of 0. */
cn_tensor *cn_tensor_binary_cross_entropy(cn_graph *g, cn_tensor *logits, cn_tensor *target) {
  if (!cn_tensor_operands(g, "binary_cross_entropy", 2, (cn_tensor *[]){logits, target}))
    return NULL;
  cn_tensor *sp = cn_tensor_softplus(g, logits);
  cn_tensor *per_cell =
      cn_tensor_apply2(g, CN_OP_SUB, sp, cn_tensor_apply2(g, CN_OP_MUL, target, logits));
  return cn_tensor_labeled(cn_tensor_mean(g, per_cell), "binary_cross_entropy");
}

/* d = x - max and log(sum(exp(d))) per example. The max only keeps exp in range: the results do
 * not depend on it, so its gradient is stopped rather than computed to cancel (as softmax). */
static bool shifted(cn_graph *g, cn_tensor *x, cn_tensor **d, cn_tensor **log_sum) {
  cn_tensor *max = cn_tensor_einmax1(g, per_example, x);
  *d = cn_tensor_apply2(g, CN_OP_SUB, x, max ? cn_tensor_stop_gradient(g, max) : NULL);
  cn_tensor *e = cn_tensor_apply1(g, CN_OP_EXP, *d);
  *log_sum = cn_tensor_apply1(g, CN_OP_LOG, e ? cn_tensor_einsum1(g, per_example, e) : NULL);
  return *log_sum != NULL;
}

cn_tensor *cn_tensor_log_softmax(cn_graph *g, cn_tensor *x) {
  cn_tensor *d, *log_sum;
  if (!cn_tensor_operands(g, "log_softmax", 1, &x) || !shifted(g, x, &d, &log_sum)) return NULL;
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_SUB, d, log_sum), "log_softmax");
}

/* The index of each class cell in x's precision: a tensor of x's output row whose cells hold
 * their row-major offsets (0 .. C-1 along one class axis). The einsum ties the offsets' shape to
 * x's output row; snd reads only the offsets and max keeps one of the equal values, so x is
 * neither read nor differentiated. */
static cn_tensor *classes(cn_graph *g, cn_tensor *x) {
  cn_tensor *offsets =
      cn_tensor_new(g, "class_offsets", CN_TK_FETCH, x->prec, NULL, CN_SL_TERMINAL, NULL, 0, NULL);
  if (!offsets) return NULL;
  offsets->fetch = CN_TF_RANGE_OVER_OFFSETS;
  return cn_tensor_labeled(cn_tensor_einsum(g, "...|..i..->..o..; ..o.. => ..o..", CN_OP_MAX,
                                            CN_OP_ARG2, 2, (cn_tensor *[]){x, offsets}),
                           "classes");
}

/* 1 where the class index equals the label, else 0: labels broadcast along the class axes. */
static cn_tensor *one_hot(cn_graph *g, cn_tensor *classes, cn_tensor *labels) {
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_EQ, classes, labels), "one_hot");
}

/* A constant of the given precision without axes (num's are of the graph's precision), labeled
 * by its value as the core's constants are. */
cn_tensor *cn_tensor_typed_scalar(cn_graph *g, cn_prec prec, double v) {
  static const cn_shape_row_spec scalar[CN_N_ROWS] = {
      {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 0, NULL, NULL}};
  char label[32];
  snprintf(label, sizeof label, "%g", v);
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_NUMBER, prec, scalar, CN_SL_TERMINAL, NULL, 0, NULL);
  if (t) t->number = v;
  return t;
}

/* The number of classes C as a scalar of x's precision: the largest class index plus 1 (a max
 * einsum over cls, so it is counted at run time like mean's cells). */
static cn_tensor *class_count(cn_graph *g, cn_tensor *x, cn_tensor *cls) {
  cn_tensor *one = cls ? cn_tensor_typed_scalar(g, x->prec, 1) : NULL;
  return one ? cn_tensor_einsum(g, "..o..; => ", CN_OP_MAX, CN_OP_ADD, 2, (cn_tensor *[]){cls, one})
             : NULL;
}

/* The labels' guard (cn_node.guard_what): per label cell, 0 when the label is a class index of
 * x (an integer in [0, C)), the label itself otherwise — never 0 then, since 0 is always a class
 * index, and NaN for a NaN label (NaN != trunc(NaN)). An invalid label matches no class, so
 * without it a 1-based or corrupt label file would train on wrong targets with no word; the run
 * that computes the guard fails at its first nonzero cell instead (routine.c). The tests are
 * computed in the labels' precision, so a label of 1e-300 is not rounded to a valid 0. */
static cn_tensor *label_guard(cn_graph *g, const char *what, cn_tensor *x, cn_tensor *cls,
                              cn_tensor *labels) {
  cn_tensor *n = class_count(g, x, cls);
  cn_tensor *whole =
      cn_tensor_apply2(g, CN_OP_EQ, labels, cn_tensor_apply1(g, CN_OP_TRUNC, labels));
  cn_tensor *negative =
      cn_tensor_apply2(g, CN_OP_LT, labels, cn_tensor_typed_scalar(g, labels->prec, 0));
  cn_tensor *valid = tri(g, CN_OP_MUL3, whole, cn_tensor_apply1(g, CN_OP_NOT, negative),
                         cn_tensor_apply2(g, CN_OP_LT, labels, n));
  cn_tensor *guard = cn_tensor_labeled(
      tri(g, CN_OP_WHERE, valid, cn_tensor_typed_scalar(g, labels->prec, 0), labels),
      "label_check");
  cn_label_check *check = guard ? cn_alloc(g->ctx, sizeof *check) : NULL;
  if (!check) return NULL;
  *check = (cn_label_check){what, labels, x, cls};
  guard->label_check = check;
  return guard;
}

/* v, or NaN (of x's precision) where the guard flags its example's label: what the loss or
 * metric is if the run's failure is ignored. The where also puts the guard in v's forward code. */
static cn_tensor *guarded(cn_graph *g, cn_tensor *guard, cn_tensor *x, cn_tensor *v) {
  return guard ? tri(g, CN_OP_WHERE, guard, cn_tensor_typed_scalar(g, x->prec, NAN), v) : NULL;
}

cn_status cn_label_check_arm(cn_tensor *t) {
  cn_node *node = t->value;
  const cn_label_check *c = t->label_check;
  if (node->guard_what) return CN_OK;
  cn_sbuf what = {0}, rule = {0};
  bool rows = !c->classes; /* a gather's ids: rows of the table's first axis */
  int64_t n = rows ? cn_node_dim(c->logits->value, 0) : cn_node_numel(c->classes->value);
  cn_sbuf_printf(&what, "%s: %s", c->what, rows ? "index" : "label");
  cn_sbuf_printf(&rule,
                 "of \"%s\" (#%d) is not one of the %lld %s of \"%s\" (#%d): an integer from 0 "
                 "to %lld",
                 c->labels->label, c->labels->id, (long long)n, rows ? "rows" : "class indices",
                 c->logits->label, c->logits->id, (long long)n - 1);
  const char *w = cn_sbuf_finish(t->g->ctx, &what), *r = cn_sbuf_finish(t->g->ctx, &rule);
  if (!w || !r) return CN_ERR_NOMEM;
  node->guard_what = w;
  node->guard_rule = r;
  node->fusable = false;
  return CN_OK;
}

/* Per example log(sum(exp(d))) - sum(onehot * d) = -log_softmax(x)[label]; both terms stay
 * small whatever the logits' magnitude. */
cn_tensor *cn_tensor_cross_entropy(cn_graph *g, cn_tensor *logits, cn_tensor *labels) {
  cn_tensor *d, *log_sum;
  if (!cn_tensor_operands(g, "cross_entropy", 2, (cn_tensor *[]){logits, labels}) ||
      !shifted(g, logits, &d, &log_sum))
    return NULL;
  cn_tensor *cls = classes(g, logits);
  cn_tensor *guard = cls ? label_guard(g, "cross_entropy", logits, cls, labels) : NULL;
  cn_tensor *picked = cn_tensor_apply2(g, CN_OP_MUL, one_hot(g, cls, labels), d);
  picked = picked ? cn_tensor_einsum1(g, per_example, picked) : NULL;
  cn_tensor *per = guarded(g, guard, logits, cn_tensor_apply2(g, CN_OP_SUB, log_sum, picked));
  return cn_tensor_labeled(cn_tensor_mean(g, per), "cross_entropy");
}

/* ---- Metrics --------------------------------------------------------------------------------- */

/* The smallest class index among the cells equal to the example's max: the where gives the
 * others C (one past the last index), which never wins the min. Every constant is of x's
 * precision, so the result is too. */
static cn_tensor *argmax_of(cn_graph *g, cn_tensor *x, cn_tensor *cls) {
  cn_tensor *hit = cn_tensor_apply2(g, CN_OP_EQ, x, cn_tensor_einmax1(g, per_example, x));
  cn_tensor *index = tri(g, CN_OP_WHERE, hit, cls, cls ? class_count(g, x, cls) : NULL);
  cn_tensor *first =
      index ? cn_tensor_einsum(g, per_example, CN_OP_MIN, CN_OP_ID, 1, &index) : NULL;
  return cn_tensor_labeled(first, "argmax");
}

cn_tensor *cn_tensor_argmax(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "argmax", 1, &x)) return NULL;
  return argmax_of(g, x, classes(g, x));
}

cn_tensor *cn_tensor_accuracy(cn_graph *g, cn_tensor *logits, cn_tensor *labels) {
  if (!cn_tensor_operands(g, "accuracy", 2, (cn_tensor *[]){logits, labels})) return NULL;
  cn_tensor *cls = classes(g, logits);
  cn_tensor *guard = cls ? label_guard(g, "accuracy", logits, cls, labels) : NULL;
  cn_tensor *correct =
      cn_tensor_apply2(g, CN_OP_EQ, guard ? argmax_of(g, logits, cls) : NULL, labels);
  return cn_tensor_labeled(cn_tensor_mean(g, guarded(g, guard, logits, correct)), "accuracy");
}

/* counts[t, p] = sum over examples of onehot(label)[t] * onehot(argmax)[p]; the labels have no
 * input axes, so an example's label is shared by its input positions. */
cn_tensor *cn_tensor_confusion(cn_graph *g, cn_tensor *logits, cn_tensor *labels) {
  if (!cn_tensor_operands(g, "confusion", 2, (cn_tensor *[]){logits, labels})) return NULL;
  cn_tensor *cls = classes(g, logits);
  cn_tensor *guard = cls ? label_guard(g, "confusion", logits, cls, labels) : NULL;
  cn_tensor *truth = guard ? guarded(g, guard, logits, one_hot(g, cls, labels)) : NULL;
  cn_tensor *pred = truth ? one_hot(g, cls, argmax_of(g, logits, cls)) : NULL;
  return cn_tensor_labeled(
      pred ? cn_tensor_einsum2(g, "...|t; ...|..i..->p => tp", truth, pred) : NULL, "confusion");
}
