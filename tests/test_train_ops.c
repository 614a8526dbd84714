/* The training pieces (src/tensor/train.c) and Adam/AdamW and the training state
 * (src/tensor/optim.c), on the interpreter and on generated C:
 *   - values of log_softmax, sigmoid, softplus, sum, mean, mse, binary_cross_entropy and
 *     cross_entropy against the same formulas in double precision here, including inputs of
 *     +-100 and +-1000 (finite everywhere, in single precision too), labels with and without a
 *     unit output axis, int32 labels;
 *   - labels that are not class indices (7, -3, 2.5, 0.7, NaN of 3 classes; byte and int32
 *     labels) fail the run of cross_entropy, accuracy and confusion with a message naming the
 *     labels, the cell and the value, the NaN check on or off;
 *   - gradients against central finite differences (double graphs) and against closed forms:
 *     sigmoid' = s (1 - s), softplus' = s, d cross_entropy / d logits = (softmax - onehot) / B;
 *   - argmax with ties (the first index), accuracy and confusion on hand examples, also with
 *     input axes (an example per batch and input position) and labels with a unit axis;
 *   - Adam, Adam with coupled weight decay, AdamW and Adam with beta1 = 0 (against RMSprop's
 *     formula too): three steps against the bias-corrected formula in double here, the state
 *     shared by two update trees, two updates of two parameters stepped 3 and 1 times (each its
 *     own count), cn_graph_state's names and order, a duplicate label, cn_adam_defaults and bad
 *     arguments;
 *   - global-norm gradient clipping before SGD, norms above and below max_norm, one parameter's
 *     large gradient scaling the other's (the clipped gradients and values against the formula),
 *     and AdamW decaying a 2-axis weight but not a 1-axis bias with decay_matrices_only. */
#include "check.h"
#include "graph_check.h"

#include "cannl.h"

#include <stdlib.h>

/* Computes t by its forward code and compares its n cells with want. */
static void expect_values(cn_graph *g, cn_tensor *t, cn_backend_kind b, const double *want,
                          int64_t n, double tol) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(ctx));
  double got[256];
  if (!t || n > 256 || !run(g, cn_graph_forward(g, t), b, "eval") ||
      !read_node(cn_tensor_value(t), got, n))
    return;
  for (int64_t i = 0; i < n; i++)
    CHECK_MSG(isfinite(got[i]), "%s[%lld] = %g", cn_tensor_label(t), (long long)i, got[i]);
  expect_near(cn_tensor_label(t), got, want, n, tol);
}

/* ---- Reference formulas in double --------------------------------------------------------- */

static double ref_softplus(double x) {
  return fmax(x, 0) + log1p(exp(-fabs(x)));
}

static double ref_sigmoid(double x) {
  return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

/* log_softmax over c classes of rows laid out [row][class]. */
static void ref_log_softmax(const double *x, int rows, int c, double *out) {
  for (int r = 0; r < rows; r++) {
    double m = -INFINITY, s = 0;
    for (int k = 0; k < c; k++) m = fmax(m, x[r * c + k]);
    for (int k = 0; k < c; k++) s += exp(x[r * c + k] - m);
    for (int k = 0; k < c; k++) out[r * c + k] = x[r * c + k] - m - log(s);
  }
}

/* ---- Values --------------------------------------------------------------------------------- */

static const double extremes[] = {-1000, -100, -20, -1, -0.5, 0, 0.5, 1, 20, 100, 1000};
enum { N_EXT = sizeof extremes / sizeof extremes[0] };

static void test_pointwise(cn_backend_kind b, cn_prec prec) {
  cn_graph *g = new_graph(prec);
  double tol = prec == CN_PREC_DOUBLE ? 1e-14 : 1e-6;
  cn_tensor *x = data(g, "x", (cn_dims){NONE, NONE, AXES(N_EXT)}, extremes);
  double sig[N_EXT], sp[N_EXT];
  for (int i = 0; i < N_EXT; i++)
    sig[i] = ref_sigmoid(extremes[i]), sp[i] = ref_softplus(extremes[i]);
  cn_tensor *s = cn_tensor_sigmoid(g, x);
  expect_values(g, s, b, sig, N_EXT, tol);
  expect_values(g, cn_tensor_softplus(g, x), b, sp, N_EXT, tol);
  CHECK_STR(cn_tensor_shape(s), "|->11");
  free_graph(g);
}

/* batch 2 | input 3 -> output 4 (memory [b][o][i]): log_softmax over o; sum and mean. */
static void test_log_softmax_sum_mean(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[24], rows[24], ls[24], want[24], total = 0;
  for (int i = 0; i < 24; i++) x[i] = 3 * sin(1.7 * i + 0.2), total += x[i];
  for (int r = 0; r < 6; r++) /* row r = (b, i): classes o at [b][o][i] */
    for (int o = 0; o < 4; o++) rows[r * 4 + o] = x[((r / 3) * 4 + o) * 3 + r % 3];
  ref_log_softmax(rows, 6, 4, ls);
  for (int r = 0; r < 6; r++)
    for (int o = 0; o < 4; o++) want[((r / 3) * 4 + o) * 3 + r % 3] = ls[r * 4 + o];
  cn_tensor *tx = data(g, "x", (cn_dims){AXES(2), AXES(3), AXES(4)}, x);
  cn_tensor *lsm = cn_tensor_log_softmax(g, tx);
  expect_values(g, lsm, b, want, 24, 1e-14);
  CHECK_STR(cn_tensor_shape(lsm), "2|3->4");
  cn_tensor *sum = cn_tensor_sum(g, tx), *mean = cn_tensor_mean(g, tx);
  expect_values(g, sum, b, &total, 1, 1e-14);
  expect_values(g, mean, b, (double[]){total / 24}, 1, 1e-14);
  CHECK_STR(cn_tensor_shape(mean), "|->");
  free_graph(g);
  /* single precision, logits whose exp overflows without the max */
  g = new_graph(CN_PREC_SINGLE);
  const double big[] = {1000, 1001, 1002, 1003, -1000, -1003, -1001, -1002};
  ref_log_softmax(big, 2, 4, want);
  expect_values(g, cn_tensor_log_softmax(g, data(g, "big", (cn_dims){AXES(2), NONE, AXES(4)}, big)),
                b, want, 8, 1e-6);
  free_graph(g);
}

static void test_mse_bce(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  const double p[] = {1, -2, 0.5, 3, 0, 4}, t[] = {0.5, -1, 0.5, 1, 2, 4};
  cn_dims d23 = {AXES(2), NONE, AXES(3)};
  /* squares 0.25, 1, 0, 4, 4, 0 */
  expect_values(g, cn_tensor_mse(g, data(g, "p", d23, p), data(g, "t", d23, t)), b,
                (double[]){9.25 / 6}, 1, 1e-15);
  const double z[] = {-2, 0.5, 3, 1000, -1000, 100, -100, 0}, y[] = {0, 1, 0.3, 1, 0, 0.25, 1, 0.5};
  double want = 0;
  for (int i = 0; i < 8; i++) want += (ref_softplus(z[i]) - y[i] * z[i]) / 8;
  cn_dims d8 = {NONE, NONE, AXES(8)};
  expect_values(g, cn_tensor_binary_cross_entropy(g, data(g, "z", d8, z), data(g, "y", d8, y)), b,
                &want, 1, 1e-13);
  free_graph(g);
  g = new_graph(CN_PREC_SINGLE);
  expect_values(g, cn_tensor_binary_cross_entropy(g, data(g, "z", d8, z), data(g, "y", d8, y)), b,
                &want, 1, 1e-5);
  free_graph(g);
}

/* Logits of 3 examples over 4 classes; labels 2, 0, 3. */
static const double ce_logits[12] = {0.5, -1, 2, 0.25, 3, 1, -2, 0, -0.5, 0.5, 1.5, 1};
static const double ce_labels[3] = {2, 0, 3};

static double ref_cross_entropy(const double *x, const double *labels, int rows, int c) {
  double ls[64], loss = 0;
  ref_log_softmax(x, rows, c, ls);
  for (int r = 0; r < rows; r++) loss -= ls[r * c + (int)labels[r]] / rows;
  return loss;
}

static void test_cross_entropy(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double want = ref_cross_entropy(ce_logits, ce_labels, 3, 4);
  cn_tensor *x = data(g, "x", (cn_dims){AXES(3), NONE, AXES(4)}, ce_logits);
  /* labels without an output axis, with a unit one, and as int32 */
  cn_tensor *l0 = data(g, "labels", (cn_dims){AXES(3), NONE, NONE}, ce_labels);
  cn_tensor *l1 = data(g, "labels1", (cn_dims){AXES(3), NONE, AXES(1)}, ce_labels);
  cn_graph_set_prec(g, CN_PREC_INT32);
  cn_tensor *li = data(g, "labels_i32", (cn_dims){AXES(3), NONE, NONE}, ce_labels);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *ce = cn_tensor_cross_entropy(g, x, l0);
  expect_values(g, ce, b, &want, 1, 1e-14);
  CHECK_STR(cn_tensor_shape(ce), "|->");
  expect_values(g, cn_tensor_cross_entropy(g, x, l1), b, &want, 1, 1e-14);
  expect_values(g, cn_tensor_cross_entropy(g, x, li), b, &want, 1, 1e-14);
  free_graph(g);
  /* huge logits in single precision stay finite */
  g = new_graph(CN_PREC_SINGLE);
  double big[12];
  for (int i = 0; i < 12; i++) big[i] = ce_logits[i] * 400;
  want = ref_cross_entropy(big, ce_labels, 3, 4);
  x = data(g, "x", (cn_dims){AXES(3), NONE, AXES(4)}, big);
  expect_values(
      g, cn_tensor_cross_entropy(g, x, data(g, "l", (cn_dims){AXES(3), NONE, NONE}, ce_labels)), b,
      &want, 1, 1e-6);
  free_graph(g);
}

/* Runs t's forward code, which must fail with exactly `want` (the routine is named "eval"); t's
 * value is then NaN: the loss of an ignored failure trains nothing. */
static void expect_label_error(cn_graph *g, cn_tensor *t, cn_backend_kind b, const char *want) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(ctx));
  cn_routine *r = t ? compile(g, cn_graph_forward(g, t), b, "eval") : NULL;
  if (!r) return;
  CHECK_INT(cn_routine_run(r), CN_ERR_RUNTIME);
  CHECK_STR(cn_ctx_error(ctx), want);
  double v = 0;
  CHECK(cn_node_get_values(cn_tensor_value(t), false, &v, 1) == CN_OK && isnan(v));
  cn_routine_free(r);
}

/* Labels that are not class indices (out of range, negative, not integers, NaN) fail the run that
 * computes cross_entropy, accuracy or confusion, naming the labels, the first bad cell and its
 * value, in every precision of labels and with the NaN check on or off; valid labels of every
 * layout keep the values of test_cross_entropy. */
static void test_bad_labels(cn_backend_kind b) {
  static const double logits[6] = {2, 1, 0, 0, 3, 1};
  static const struct {
    double labels[2];
    const char *cell, *value;
  } cases[] = {
      {{7, -3}, "[0]", "7"},    {{2, -3}, "[1]", "-3"},   {{2.5, 0.7}, "[0]", "2.5"},
      {{0, 0.7}, "[1]", "0.7"}, {{1, NAN}, "[1]", "nan"}, {{3, 0}, "[0]", "3"},
  };
  const char *rule = " of \"labels\" (#2) is not one of the 3 class indices of \"x\" (#1): an "
                     "integer from 0 to 2";
  char want[400];
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int prec = 0; prec < 2; prec++) {
      cn_graph *g = new_graph(prec ? CN_PREC_SINGLE : CN_PREC_DOUBLE);
      cn_tensor *x = data(g, "x", (cn_dims){AXES(2), NONE, AXES(3)}, logits);
      cn_tensor *l = data(g, "labels", (cn_dims){AXES(2), NONE, NONE}, cases[k].labels);
      snprintf(want, sizeof want, "routine 'eval': cross_entropy: label %s at %s%s", cases[k].value,
               cases[k].cell, rule);
      expect_label_error(g, cn_tensor_cross_entropy(g, x, l), b, want);
      free_graph(g);
    }
  /* labels of other precisions and layouts, the other users of labels, and the NaN check */
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_tensor *x = data(g, "x", (cn_dims){AXES(2), NONE, AXES(3)}, logits);
  cn_graph_set_prec(g, CN_PREC_BYTE);
  cn_tensor *lb = data(g, "labels", (cn_dims){AXES(2), NONE, NONE}, (double[]){1, 3});
  cn_graph_set_prec(g, CN_PREC_INT32);
  cn_tensor *li = data(g, "labels_i32", (cn_dims){AXES(2), NONE, AXES(1)}, (double[]){-1, 2});
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  expect_label_error(g, cn_tensor_cross_entropy(g, x, lb), b,
                     "routine 'eval': cross_entropy: label 3 at [1] of \"labels\" (#2) is not "
                     "one of the 3 class indices of \"x\" (#1): an integer from 0 to 2");
  expect_label_error(g, cn_tensor_cross_entropy(g, x, li), b,
                     "routine 'eval': cross_entropy: label -1 at [0, 0] of \"labels_i32\" (#3) "
                     "is not one of the 3 class indices of \"x\" (#1): an integer from 0 to 2");
  expect_label_error(g, cn_tensor_accuracy(g, x, lb), b,
                     "routine 'eval': accuracy: label 3 at [1] of \"labels\" (#2) is not one of "
                     "the 3 class indices of \"x\" (#1): an integer from 0 to 2");
  cn_tensor *conf = cn_tensor_confusion(g, x, li);
  cn_routine *r = compile(g, cn_graph_forward(g, conf), b, "eval");
  CHECK(cn_ctx_set_option(cn_graph_ctx(g), "check", "nan") == CN_OK);
  CHECK_INT(r ? cn_routine_run(r) : CN_OK, CN_ERR_RUNTIME);
  CHECK_STR(cn_ctx_error(cn_graph_ctx(g)),
            "routine 'eval': confusion: label -1 at [0, 0] of \"labels_i32\" (#3) is not one of "
            "the 3 class indices of \"x\" (#1): an integer from 0 to 2");
  CHECK(cn_ctx_set_option(cn_graph_ctx(g), "check", "off") == CN_OK);
  /* valid labels in those precisions: -log_softmax of classes 1 and 2, then 0 and 2 */
  double ls[6];
  ref_log_softmax(logits, 2, 3, ls);
  cn_graph_set_prec(g, CN_PREC_BYTE);
  cn_tensor *ok = data(g, "ok", (cn_dims){AXES(2), NONE, NONE}, (double[]){1, 2});
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  expect_values(g, cn_tensor_cross_entropy(g, x, ok), b, (double[]){-(ls[1] + ls[5]) / 2}, 1,
                1e-14);
  expect_values(g, cn_tensor_accuracy(g, x, ok), b, (double[]){0}, 1, 0);
  free_graph(g);
}

/* ---- Gradients -------------------------------------------------------------------------------
 * A scalar loss built from one parameter p (dims and initial values given); the backprop
 * gradient is compared with central differences of the forward routine (h = 1e-6, double). */

static const cn_dims d_bio = {AXES(2), AXES(3), AXES(4)}, d_ext = {NONE, NONE, AXES(N_EXT)},
                     d_ce = {AXES(3), NONE, AXES(4)};

static cn_tensor *l_log_softmax(cn_graph *g, cn_tensor *p) {
  return weighted_sum(g, cn_tensor_log_softmax(g, p), d_bio);
}
static cn_tensor *l_sigmoid(cn_graph *g, cn_tensor *p) {
  return weighted_sum(g, cn_tensor_sigmoid(g, p), d_ext);
}
static cn_tensor *l_softplus(cn_graph *g, cn_tensor *p) {
  return weighted_sum(g, cn_tensor_softplus(g, p), d_ext);
}
static cn_tensor *l_mean(cn_graph *g, cn_tensor *p) {
  return cn_tensor_mean(g, cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){p, p}));
}
static cn_tensor *l_mse(cn_graph *g, cn_tensor *p) {
  const double t[24] = {1, -1, 0.5, 2, 0, 0, 3, -2, 1, 1, 0.25, -0.75};
  return cn_tensor_mse(g, p, data(g, "t", d_bio, t));
}
static cn_tensor *l_bce(cn_graph *g, cn_tensor *p) {
  double y[N_EXT];
  for (int i = 0; i < N_EXT; i++) y[i] = (i % 4) / 3.0;
  return cn_tensor_binary_cross_entropy(g, p, data(g, "y", d_ext, y));
}
static cn_tensor *l_ce(cn_graph *g, cn_tensor *p) {
  return cn_tensor_cross_entropy(g, p,
                                 data(g, "labels", (cn_dims){AXES(3), NONE, NONE}, ce_labels));
}

static void test_gradients(cn_backend_kind b) {
  double x24[24], ga[64], want[64];
  for (int i = 0; i < 24; i++) x24[i] = 2 * cos(0.9 * i + 0.4);
  grad_check("log_softmax", b, d_bio, x24, l_log_softmax, true, ga);
  grad_check("mean", b, d_bio, x24, l_mean, true, ga);
  for (int i = 0; i < 24; i++) want[i] = 2 * x24[i] / 24;
  expect_near("d mean(p^2)", ga, want, 24, 1e-14);
  grad_check("mse", b, d_bio, x24, l_mse, true, ga);
  grad_check("bce", b, d_ext, extremes, l_bce, true, ga);
  for (int i = 0; i < N_EXT; i++) want[i] = (ref_sigmoid(extremes[i]) - (i % 4) / 3.0) / N_EXT;
  expect_near("d bce", ga, want, N_EXT, 1e-14);
  /* closed forms, at +-1000 too: sigmoid' = s (1 - s) and softplus' = s, times the weights */
  grad_check("sigmoid", b, d_ext, extremes, l_sigmoid, true, ga);
  for (int i = 0; i < N_EXT; i++) {
    double s = ref_sigmoid(extremes[i]);
    want[i] = s * (1 - s) * sin(0.7 * i + 0.3);
  }
  expect_near("d sigmoid", ga, want, N_EXT, 1e-14);
  grad_check("softplus", b, d_ext, extremes, l_softplus, true, ga);
  for (int i = 0; i < N_EXT; i++) want[i] = ref_sigmoid(extremes[i]) * sin(0.7 * i + 0.3);
  expect_near("d softplus", ga, want, N_EXT, 1e-14);
  /* cross entropy: (softmax - onehot) / B */
  grad_check("cross_entropy", b, d_ce, ce_logits, l_ce, true, ga);
  double ls[12];
  ref_log_softmax(ce_logits, 3, 4, ls);
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 4; k++) want[r * 4 + k] = (exp(ls[r * 4 + k]) - (k == ce_labels[r])) / 3;
  expect_near("d cross_entropy", ga, want, 12, 1e-14);
}

/* ---- Metrics -------------------------------------------------------------------------------- */

static void test_metrics(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_SINGLE);
  /* ties go to the first index: argmax 1, 0, 0, 1, 2 */
  const double x[] = {1, 3, 3, 5, 5, 5, -1, -2, -3, 0, 2, 1, -4, -4, 7};
  const double labels[] = {1, 2, 0, 1, 2};
  cn_tensor *tx = data(g, "x", (cn_dims){AXES(5), NONE, AXES(3)}, x);
  cn_tensor *tl = data(g, "labels", (cn_dims){AXES(5), NONE, NONE}, labels);
  cn_tensor *am = cn_tensor_argmax(g, tx);
  expect_values(g, am, b, (double[]){1, 0, 0, 1, 2}, 5, 0);
  CHECK_STR(cn_tensor_shape(am), "5|->");
  cn_tensor *acc = cn_tensor_accuracy(g, tx, tl);
  expect_values(g, acc, b, (double[]){0.8}, 1, 1e-7);
  CHECK_STR(cn_tensor_shape(acc), "|->");
  /* (true, predicted): (1, 1), (2, 0), (0, 0), (1, 1), (2, 2) */
  cn_tensor *conf = cn_tensor_confusion(g, tx, tl);
  expect_values(g, conf, b, (double[]){1, 0, 0, 0, 2, 0, 1, 0, 1}, 9, 0);
  CHECK_STR(cn_tensor_shape(conf), "|->3,3");
  /* labels with a unit output axis */
  cn_tensor *tl1 = data(g, "labels1", (cn_dims){AXES(5), NONE, AXES(1)}, labels);
  expect_values(g, cn_tensor_accuracy(g, tx, tl1), b, (double[]){0.8}, 1, 1e-7);
  expect_values(g, cn_tensor_confusion(g, tx, tl1), b, (double[]){1, 0, 0, 0, 2, 0, 1, 0, 1}, 9, 0);
  /* batch 2 | input 2 -> output 3 (memory [b][o][i]): an example per (b, i), sharing the
   * label of b; argmax 1, 0 (a tie), 2, 1 (a tie) */
  const double xi[] = {1, 3, 4, 3, 2, 0, 0, -1, 0, 2, 5, 2}, li[] = {1, 2};
  cn_tensor *txi = data(g, "xi", (cn_dims){AXES(2), AXES(2), AXES(3)}, xi);
  cn_tensor *tli = data(g, "li", (cn_dims){AXES(2), NONE, NONE}, li);
  expect_values(g, cn_tensor_argmax(g, txi), b, (double[]){1, 0, 2, 1}, 4, 0);
  expect_values(g, cn_tensor_accuracy(g, txi, tli), b, (double[]){0.5}, 1, 0);
  expect_values(g, cn_tensor_confusion(g, txi, tli), b, (double[]){0, 0, 0, 1, 1, 0, 0, 1, 1}, 9,
                0);
  double rows[12], ce = 0;
  for (int r = 0; r < 4; r++)
    for (int o = 0; o < 3; o++) rows[r * 3 + o] = xi[((r / 2) * 3 + o) * 2 + r % 2];
  for (int r = 0; r < 4; r++) ce += ref_cross_entropy(rows + 3 * r, &li[r / 2], 1, 3) / 4;
  expect_values(g, cn_tensor_cross_entropy(g, txi, tli), b, &ce, 1, 1e-6);
  /* none of them is differentiable */
  const double w0[] = {0, 0, 0};
  cn_tensor *w = cn_tensor_param(g, "w", &(cn_dims){NONE, NONE, AXES(3)},
                                 data(g, "w0", (cn_dims){NONE, NONE, AXES(3)}, w0));
  cn_tensor *logits = cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){tx, w});
  CHECK(!cn_tensor_is_diff(cn_tensor_argmax(g, logits)));
  CHECK(!cn_tensor_is_diff(cn_tensor_accuracy(g, logits, tl)));
  CHECK(!cn_tensor_is_diff(cn_tensor_confusion(g, logits, tl)));
  CHECK(cn_tensor_is_diff(cn_tensor_cross_entropy(g, logits, tl)));
  free_graph(g);
}

/* ---- Adam and AdamW --------------------------------------------------------------------------
 * loss = sum((w - target)^2) over w |->3, so grad = 2 (w - target). */

typedef struct {
  const char *name;
  cn_adam opts; /* learning_rate filled in by the test */
} adam_case;

static const double w_init[3] = {0.5, -1.5, 2}, target[3] = {0, 1, 2.5};

typedef struct {
  double w[3], m[3], v[3], t;
} adam_ref;

static void ref_adam_step(adam_ref *s, double lr, const cn_adam *o) {
  double b1 = o->beta1, b2 = o->beta2, eps = o->eps, wd = o->weight_decay;
  s->t += 1;
  for (int i = 0; i < 3; i++) {
    double g = 2 * (s->w[i] - target[i]);
    if (!o->decoupled)
      g += wd * s->w[i];
    else
      s->w[i] -= lr * wd * s->w[i];
    s->m[i] = b1 * s->m[i] + (1 - b1) * g;
    s->v[i] = b2 * s->v[i] + (1 - b2) * g * g;
    double m_hat = s->m[i] / (1 - pow(b1, s->t)), v_hat = s->v[i] / (1 - pow(b2, s->t));
    s->w[i] -= lr * m_hat / (sqrt(v_hat) + eps);
  }
}

typedef struct {
  cn_graph *g;
  cn_tensor *w, *loss;
} adam_model;

/* A parameter `label` of w_init's values and its loss, in m's graph. */
static bool adam_param(adam_model *m, const char *label) {
  cn_dims d = {NONE, NONE, AXES(3)};
  m->w = cn_tensor_param(m->g, label, &d, data(m->g, "w_init", d, w_init));
  cn_tensor *diff =
      cn_tensor_apply(m->g, CN_OP_SUB, 2, (cn_tensor *[]){m->w, data(m->g, "target", d, target)});
  m->loss = cn_tensor_sum(m->g, cn_tensor_apply(m->g, CN_OP_MUL, 2, (cn_tensor *[]){diff, diff}));
  CHECK_MSG(m->loss != NULL, "%s", cn_ctx_error(cn_graph_ctx(m->g)));
  return m->loss != NULL;
}

static bool adam_model_new(adam_model *m, cn_prec prec) {
  m->g = new_graph(prec);
  return adam_param(m, "w");
}

/* grad_update then adam_update, one routine. */
static cn_routine *adam_step_routine(adam_model *m, cn_backend_kind b, const cn_adam *o) {
  cn_ctx *ctx = cn_graph_ctx(m->g);
  cn_asgn *parts[2] = {cn_graph_grad_update(m->g, m->loss), NULL};
  parts[1] = parts[0] ? cn_graph_adam_update(m->g, m->loss, o) : NULL;
  return compile(m->g, parts[1] ? cn_asgn_seq(ctx, 2, parts) : NULL, b, "adam_step");
}

/* Compares w and the state nodes found by cn_graph_state with the reference. */
static void expect_adam_state(adam_model *m, const adam_ref *ref, const char *what, double tol) {
  cn_named_node state[8];
  int n = cn_graph_state(m->g, m->loss, state, 8);
  CHECK_INT(n, 4);
  if (n != 4) return;
  const char *label = cn_tensor_label(m->w);
  char names[4][64];
  snprintf(names[0], sizeof names[0], "%s", label);
  snprintf(names[1], sizeof names[1], "%s.adam_step", label);
  snprintf(names[2], sizeof names[2], "%s.adam_m", label);
  snprintf(names[3], sizeof names[3], "%s.adam_v", label);
  const double *want[4] = {ref->w, &ref->t, ref->m, ref->v};
  for (int k = 0; k < 4; k++) {
    CHECK_STR(state[k].name, names[k]);
    double got[3];
    int64_t cells = k == 1 ? 1 : 3;
    if (read_node(state[k].node, got, cells)) expect_near(what, got, want[k], cells, tol);
  }
}

static void test_adam(cn_backend_kind b, const adam_case *c) {
  adam_model m;
  if (!adam_model_new(&m, CN_PREC_DOUBLE)) {
    free_graph(m.g);
    return;
  }
  const double lr = 0.1;
  cn_adam o = c->opts;
  o.learning_rate = cn_tensor_number(m.g, lr);
  adam_ref ref = {{w_init[0], w_init[1], w_init[2]}, {0}, {0}, 0};
  /* beta1 = 0, by its own formula (RMSprop with a bias-corrected v): w -= lr g / (sqrt(v_hat) +
   * eps) */
  double rms_w[3] = {w_init[0], w_init[1], w_init[2]}, rms_v[3] = {0};
  if (run(m.g, cn_graph_init_params(m.g, m.loss), b, "adam_init")) {
    cn_routine *step = adam_step_routine(&m, b, &o);
    for (int s = 0; step && s < 3; s++) {
      CHECK_MSG(cn_routine_run(step) == CN_OK, "%s", cn_ctx_error(cn_graph_ctx(m.g)));
      ref_adam_step(&ref, lr, &o);
      expect_adam_state(&m, &ref, c->name, 1e-13);
      double w[3];
      if (o.beta1 == 0 && read_node(cn_tensor_value(m.w), w, 3)) {
        for (int i = 0; i < 3; i++) {
          double g = 2 * (rms_w[i] - target[i]);
          rms_v[i] = o.beta2 * rms_v[i] + (1 - o.beta2) * g * g;
          rms_w[i] -= lr * g / (sqrt(rms_v[i] / (1 - pow(o.beta2, s + 1))) + o.eps);
        }
        expect_near("rmsprop", w, rms_w, 3, 1e-13);
      }
      if (s == 0 && o.weight_decay == 0) {
        /* by hand: m_hat = g and v_hat = g^2, so w moves by lr * g / (|g| + eps) */
        double w[3];
        if (read_node(cn_tensor_value(m.w), w, 3))
          expect_near(
              "first step", w,
              (double[]){0.5 - 0.1 / (1 + 1e-8), -1.5 + 0.1 * 5 / (5 + 1e-8), 2 + 0.1 / (1 + 1e-8)},
              3, 1e-15);
      }
    }
    cn_routine_free(step);
    /* a second tree continues the same state: the moments and the counter */
    step = adam_step_routine(&m, b, &o);
    CHECK_MSG(step && cn_routine_run(step) == CN_OK, "%s", cn_ctx_error(cn_graph_ctx(m.g)));
    ref_adam_step(&ref, lr, &o);
    expect_adam_state(&m, &ref, "second tree", 1e-13);
    cn_routine_free(step);
  }
  free_graph(m.g);
}

/* Single precision: the update in float stays close to the double reference. */
static void test_adam_single(cn_backend_kind b) {
  adam_model m;
  if (adam_model_new(&m, CN_PREC_SINGLE) &&
      run(m.g, cn_graph_init_params(m.g, m.loss), b, "adam_init")) {
    cn_adam o = cn_adam_defaults(cn_tensor_number(m.g, 0.05));
    o.weight_decay = 0.01;
    o.decoupled = true;
    adam_ref ref = {{w_init[0], w_init[1], w_init[2]}, {0}, {0}, 0};
    cn_routine *step = adam_step_routine(&m, b, &o);
    for (int s = 0; step && s < 5; s++) {
      CHECK(cn_routine_run(step) == CN_OK);
      ref_adam_step(&ref, 0.05, &o);
    }
    expect_adam_state(&m, &ref, "single", 1e-5);
    cn_routine_free(step);
  }
  free_graph(m.g);
}

/* Two Adam updates in one graph, of two parameters with their own losses, run 3 and 1 times:
 * each parameter's bias correction follows its own step count (a counter shared by the graph
 * would give the second update t = 4 at its first step). */
static void test_adam_two_updates(cn_backend_kind b) {
  adam_model m1, m2;
  if (!adam_model_new(&m1, CN_PREC_DOUBLE)) {
    free_graph(m1.g);
    return;
  }
  m2.g = m1.g;
  if (adam_param(&m2, "w2") && run(m1.g, cn_graph_init_params(m1.g, m1.loss), b, "init1") &&
      run(m1.g, cn_graph_init_params(m1.g, m2.loss), b, "init2")) {
    cn_adam o1 = cn_adam_defaults(cn_tensor_number(m1.g, 0.1));
    cn_adam o2 = cn_adam_defaults(cn_tensor_number(m1.g, 0.2));
    o2.beta1 = 0.5;
    cn_routine *s1 = adam_step_routine(&m1, b, &o1), *s2 = adam_step_routine(&m2, b, &o2);
    adam_ref r1 = {{w_init[0], w_init[1], w_init[2]}, {0}, {0}, 0}, r2 = r1;
    for (int s = 0; s1 && s2 && s < 3; s++) {
      CHECK(cn_routine_run(s1) == CN_OK);
      ref_adam_step(&r1, 0.1, &o1);
    }
    CHECK(s2 && cn_routine_run(s2) == CN_OK);
    ref_adam_step(&r2, 0.2, &o2);
    expect_adam_state(&m1, &r1, "first update", 1e-13);
    expect_adam_state(&m2, &r2, "second update", 1e-13);
    /* by hand, w2's first step: m_hat = g, v_hat = g^2, a move of lr against g's sign */
    double w[3];
    if (read_node(cn_tensor_value(m2.w), w, 3))
      expect_near(
          "w2", w,
          (double[]){0.5 - 0.2 / (1 + 1e-8), -1.5 + 0.2 * 5 / (5 + 1e-8), 2 + 0.2 / (1 + 1e-8)}, 3,
          1e-15);
    cn_routine_free(s1);
    cn_routine_free(s2);
  }
  free_graph(m1.g);
}

/* ---- Gradient clipping and decay of matrices only ----------------------------------------
 * loss = sum(w * a) + sum(W * B) with w |->3 (a 1-axis bias) and W 2->2 (a 2-axis matrix), so
 * w.grad = a and W.grad = B exactly, whatever w and W hold. */

static const double a_grad[3] = {3, 0, 4}, w0[3] = {0.5, -1.5, 2};
static const double big_grad[4] = {0, 0, 0, 12}, small_grad[4] = {0, 0, 0, 0.5},
                    W0[4] = {1, -2, 0.25, 3};

typedef struct {
  cn_graph *g;
  cn_tensor *w, *W, *loss;
} two_params;

static bool two_params_new(two_params *m, cn_backend_kind b, const double *B) {
  m->g = new_graph(CN_PREC_DOUBLE);
  cn_dims dv = {NONE, NONE, AXES(3)}, dm = {NONE, AXES(2), AXES(2)};
  m->w = cn_tensor_param(m->g, "w", &dv, data(m->g, "w0", dv, w0));
  m->W = cn_tensor_param(m->g, "W", &dm, data(m->g, "W0", dm, W0));
  cn_tensor *lw =
      cn_tensor_sum(m->g, cn_tensor_apply(m->g, CN_OP_MUL, 2,
                                          (cn_tensor *[]){m->w, data(m->g, "a", dv, a_grad)}));
  cn_tensor *lW = cn_tensor_sum(
      m->g, cn_tensor_apply(m->g, CN_OP_MUL, 2, (cn_tensor *[]){m->W, data(m->g, "B", dm, B)}));
  m->loss = cn_tensor_apply(m->g, CN_OP_ADD, 2, (cn_tensor *[]){lw, lW});
  CHECK_MSG(m->loss != NULL, "%s", cn_ctx_error(cn_graph_ctx(m->g)));
  return m->loss && run(m->g, cn_graph_init_params(m->g, m->loss), b, "init");
}

/* grad_update, clip_grad_norm(max_norm), then SGD with lr 1 and no momentum: each parameter
 * moves by scale * grad, scale = min(1, max_norm / (|(a, B)| + 1e-6)) by hand. */
static void test_clip(cn_backend_kind b, const double *B, double max_norm) {
  two_params m;
  if (two_params_new(&m, b, B)) {
    cn_ctx *ctx = cn_graph_ctx(m.g);
    double total = 0;
    for (int i = 0; i < 3; i++) total += a_grad[i] * a_grad[i];
    for (int i = 0; i < 4; i++) total += B[i] * B[i];
    double scale = fmin(1, max_norm / (sqrt(total) + 1e-6));
    cn_asgn *parts[3] = {cn_graph_grad_update(m.g, m.loss),
                         cn_graph_clip_grad_norm(m.g, m.loss, max_norm), NULL};
    parts[2] = cn_graph_sgd_update(m.g, m.loss, &(cn_sgd){cn_tensor_number(m.g, 1), 0, 0, false});
    CHECK_MSG(parts[0] && parts[1] && parts[2], "%s", cn_ctx_error(ctx));
    if (parts[0] && parts[1] && parts[2] && run(m.g, cn_asgn_seq(ctx, 3, parts), b, "clip_step")) {
      double w[3], W[4], wg[3], Wg[4], want_w[3], want_W[4], want_wg[3], want_Wg[4];
      for (int i = 0; i < 3; i++) {
        want_wg[i] = scale * a_grad[i];
        want_w[i] = w0[i] - want_wg[i];
      }
      for (int i = 0; i < 4; i++) {
        want_Wg[i] = scale * B[i];
        want_W[i] = W0[i] - want_Wg[i];
      }
      if (read_node(cn_tensor_value(m.w), w, 3)) expect_near("clipped w", w, want_w, 3, 1e-15);
      if (read_node(cn_tensor_value(m.W), W, 4)) expect_near("clipped W", W, want_W, 4, 1e-15);
      if (read_node(cn_tensor_grad(m.w), wg, 3)) expect_near("w.grad", wg, want_wg, 3, 1e-15);
      if (read_node(cn_tensor_grad(m.W), Wg, 4)) expect_near("W.grad", Wg, want_Wg, 4, 1e-15);
    }
  }
  free_graph(m.g);
}

/* AdamW with decay_matrices_only, one step: W (2 axes) decays by lr * wd * W first, w (1 axis)
 * does not; the Adam move of the first step is lr * g / (|g| + eps). */
static void test_decay_matrices_only(cn_backend_kind b) {
  two_params m;
  if (two_params_new(&m, b, big_grad)) {
    cn_ctx *ctx = cn_graph_ctx(m.g);
    const double lr = 0.1, wd = 0.5, eps = 1e-8;
    cn_adam o = cn_adam_defaults(cn_tensor_number(m.g, lr));
    o.weight_decay = wd;
    o.decoupled = true;
    o.decay_matrices_only = true;
    cn_asgn *parts[2] = {cn_graph_grad_update(m.g, m.loss), NULL};
    parts[1] = parts[0] ? cn_graph_adam_update(m.g, m.loss, &o) : NULL;
    CHECK_MSG(parts[1] != NULL, "%s", cn_ctx_error(ctx));
    if (parts[1] && run(m.g, cn_asgn_seq(ctx, 2, parts), b, "adamw_step")) {
      double w[3], W[4], want_w[3], want_W[4];
      for (int i = 0; i < 3; i++) want_w[i] = w0[i] - lr * a_grad[i] / (fabs(a_grad[i]) + eps);
      for (int i = 0; i < 4; i++)
        want_W[i] = W0[i] - lr * wd * W0[i] - lr * big_grad[i] / (fabs(big_grad[i]) + eps);
      if (read_node(cn_tensor_value(m.w), w, 3)) expect_near("bias w", w, want_w, 3, 1e-15);
      if (read_node(cn_tensor_value(m.W), W, 4)) expect_near("matrix W", W, want_W, 4, 1e-15);
    }
  }
  free_graph(m.g);
}

/* ---- Training state and errors -------------------------------------------------------------- */

static void test_state(void) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_dims d = {NONE, NONE, AXES(2)};
  const double v[2] = {1, 2};
  cn_tensor *w = cn_tensor_param(g, "w", &d, data(g, "w0", d, v));
  cn_tensor *bias = cn_tensor_param(g, "b", &d, data(g, "b0", d, v));
  cn_tensor *loss = cn_tensor_sum(g, cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){w, bias}));
  cn_named_node out[16];
  CHECK_INT(cn_graph_state(g, loss, out, 16), 2);
  CHECK_STR(out[0].name, "w");
  CHECK_STR(out[1].name, "b");
  CHECK(out[0].node == cn_tensor_value(w));
  cn_tensor *lr = cn_tensor_number(g, 0.1);
  CHECK(cn_graph_sgd_update(g, loss, &(cn_sgd){lr, 0.9, 0, false}) != NULL);
  CHECK(cn_graph_adam_update(g, loss, &(cn_adam){lr, 0.9, 0.999, 1e-8, 0, false, false}) != NULL);
  CHECK(cn_graph_adam_update(g, loss, &(cn_adam){lr, 0.9, 0.999, 1e-8, 0, false, false}) != NULL);
  const char *names[] = {"w",        "b",        "w.sgd_momentum", "b.sgd_momentum", "w.adam_step",
                         "w.adam_m", "w.adam_v", "b.adam_step",    "b.adam_m",       "b.adam_v"};
  CHECK_INT(cn_graph_state(g, loss, out, 16), 10);
  for (int i = 0; i < 10; i++) CHECK_STR(out[i].name, names[i]);
  CHECK_STR(cn_node_label(out[5].node), "w.adam_m");
  CHECK_INT(cn_node_rank(out[4].node), 0);
  CHECK_INT(cn_node_prec(out[4].node), CN_PREC_DOUBLE);
  /* cap: the count, and only cap entries written */
  out[3].name = NULL;
  CHECK_INT(cn_graph_state(g, loss, out, 3), 10);
  CHECK(out[3].name == NULL);
  CHECK_INT(cn_graph_state(g, loss, NULL, 0), 10);
  /* a state of w alone: its own entries and its counter */
  CHECK_INT(cn_graph_state(g, w, out, 16), 5);
  CHECK_STR(out[2].name, "w.adam_step");
  /* two parameters of one label */
  cn_tensor *w2 = cn_tensor_param(g, "w", &d, data(g, "w0", d, v));
  cn_tensor *loss2 = cn_tensor_sum(g, cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){w, w2}));
  cn_ctx_clear_error(ctx);
  CHECK_INT(cn_graph_state(g, loss2, out, 16), -1);
  CHECK_HAS(cn_ctx_error(ctx), "\"w\"");
  CHECK_HAS(cn_ctx_error(ctx), "labeled");
  free_graph(g);
}

static void test_errors(void) {
  cn_graph *g = new_graph(CN_PREC_SINGLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_dims d = {NONE, NONE, AXES(2)};
  const double v[2] = {1, 2};
  cn_tensor *w = cn_tensor_param(g, "w", &d, data(g, "w0", d, v));
  cn_tensor *loss = cn_tensor_sum(g, w);
#define EXPECT_NULL(expr, msg)                                                                     \
  do {                                                                                             \
    cn_ctx_clear_error(ctx);                                                                       \
    CHECK_MSG((expr) == NULL, "%s succeeded", #expr);                                              \
    CHECK_HAS(cn_ctx_error(ctx), msg);                                                             \
  } while (0)
  EXPECT_NULL(cn_tensor_log_softmax(g, NULL), "log_softmax: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_sigmoid(g, NULL), "sigmoid: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_softplus(g, NULL), "softplus: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_sum(g, NULL), "sum: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_mean(g, NULL), "mean: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_mse(g, w, NULL), "mse: operand 2 is NULL");
  EXPECT_NULL(cn_tensor_binary_cross_entropy(g, NULL, w), "binary_cross_entropy: operand 1");
  EXPECT_NULL(cn_tensor_cross_entropy(g, w, NULL), "cross_entropy: operand 2 is NULL");
  EXPECT_NULL(cn_tensor_argmax(g, NULL), "argmax: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_accuracy(g, NULL, w), "accuracy: operand 1 is NULL");
  EXPECT_NULL(cn_tensor_confusion(g, w, NULL), "confusion: operand 2 is NULL");
  EXPECT_NULL(cn_graph_adam_update(g, loss, NULL), "adam_update needs a learning rate");
  cn_tensor *lr = cn_tensor_number(g, 0.1);
  cn_adam a = cn_adam_defaults(lr);
  CHECK(a.learning_rate == lr && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 &&
        a.weight_decay == 0 && !a.decoupled && !a.decay_matrices_only);
  a.beta1 = 1.5;
  EXPECT_NULL(cn_graph_adam_update(g, loss, &a), "beta1 1.5 and beta2 0.999 must lie in [0, 1)");
  a.beta1 = 1;
  EXPECT_NULL(cn_graph_adam_update(g, loss, &a), "beta1 1 and");
  a.beta1 = 0.9, a.beta2 = -0.1;
  EXPECT_NULL(cn_graph_adam_update(g, loss, &a), "beta2 -0.1 must lie in [0, 1)");
  a.beta2 = 0.999, a.eps = 0;
  EXPECT_NULL(cn_graph_adam_update(g, loss, &a), "eps 0 must be positive");
  a.eps = 1e-8, a.weight_decay = NAN;
  EXPECT_NULL(cn_graph_adam_update(g, loss, &a), "weight decay nan is not finite");
  EXPECT_NULL(cn_graph_clip_grad_norm(g, loss, 0), "clip_grad_norm: max norm 0 must be positive");
  EXPECT_NULL(cn_graph_clip_grad_norm(g, loss, INFINITY), "max norm inf must be positive");
  free_graph(g);
}

int main(void) {
  for (int i = 0; i < 2; i++) {
    cn_backend_kind b = backends[i];
    test_pointwise(b, CN_PREC_DOUBLE);
    test_pointwise(b, CN_PREC_SINGLE);
    test_log_softmax_sum_mean(b);
    test_mse_bce(b);
    test_cross_entropy(b);
    test_bad_labels(b);
    test_gradients(b);
    test_metrics(b);
    const adam_case cases[] = {
        {"adam", {NULL, 0.9, 0.999, 1e-8, 0, false, false}},
        {"adam, coupled weight decay", {NULL, 0.8, 0.99, 1e-6, 0.1, false, false}},
        {"adamw", {NULL, 0.9, 0.999, 1e-8, 0.1, true, false}},
        {"beta1 = 0", {NULL, 0, 0.99, 1e-8, 0, false, false}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) test_adam(b, &cases[k]);
    test_adam_single(b);
    test_adam_two_updates(b);
    /* global norm 13: w's gradient (norm 5 alone) scaled by 1 / 13.000001, not 1 / 5 */
    test_clip(b, big_grad, 1);
    test_clip(b, small_grad, 1); /* norm 5.02: W's small gradient shrinks w's update too */
    test_clip(b, big_grad, 20);  /* below max_norm: scale 1, the plain update */
    test_decay_matrices_only(b);
  }
  test_state();
  test_errors();
  CHECK_DONE();
}
