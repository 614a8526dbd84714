/* The neural-network blocks (src/tensor/nn.c), on the interpreter and on generated C:
 *   - gelu's values against the tanh form computed here in double (double and single graphs,
 *     inputs up to +-20), the primitive's error in ulp against its exact value (4096 values, both
 *     backends, single and double), its gradient against central finite
 * differences and the closed form 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 *   - layer_norm's values against the normalization computed here in double, over one output
 *     axis with batch and input axes (an example per batch and input position) and over two
 *     output axes, with scale and shift, without them, and with parameters initialized to 1 and
 *     0 (the identity affine map); gradients in x, scale and shift against finite differences,
 *     and the scale's and shift's against their closed forms;
 *   - dropout over 10^5 cells: the dropped fraction within 0.01 of the rate (0.3, 0.75), kept
 *     cells exactly x / (1 - rate), the mask the same for a seed and step (a second run, a second
 *     graph), independent for another step or seed (agreeing on 0.3^2 + 0.7^2 of the cells), rate
 *     0 the identity exactly with the same routine; its gradient by finite differences, 0 at the
 *     dropped cells and w / (1 - rate) at the kept ones;
 *   - the notation builtins gelu, dropout (~rate, ~step: cells 0 or 2x at rate 0.5, x at rate 0)
 *     and layer_norm (~scale, ~shift, ~eps, inline parameters {gamma = 1.0} and {beta = 0.0},
 *     which take the output row's shape) against the same references;
 *   - refusals: a negative or NaN eps, a NULL operand (dropout's rate and step too); in the
 *     notation an unknown label, a non-number eps, a negative eps, a second positional argument,
 *     dropout without ~step, each with its message. */
#include "check.h"
#include "graph_check.h"

#include "cannl.h"

#include <stdlib.h>

/* Initializes t's parameters, computes t by its forward code and compares its n cells. */
static void expect_values(cn_graph *g, cn_tensor *t, cn_backend_kind b, const double *want,
                          int64_t n, double tol) {
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(cn_graph_ctx(g)));
  double got[256];
  if (!t || n > 256 || !run(g, cn_graph_init_params(g, t), b, "init") ||
      !run(g, cn_graph_forward(g, t), b, "eval") || !read_node(cn_tensor_value(t), got, n))
    return;
  expect_near(cn_tensor_label(t), got, want, n, tol);
}

/* ---- References in double ------------------------------------------------------------------ */

static const double k_gelu = 0.79788456080286535588; /* sqrt(2 / pi) */

static double ref_gelu(double x) {
  return 0.5 * x * (1 + tanh(k_gelu * (x + 0.044715 * x * x * x)));
}

static double ref_dgelu(double x) {
  double t = tanh(k_gelu * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k_gelu * (1 + 3 * 0.044715 * x * x);
}

/* Layer norm of `rows` groups of c cells; cell k of group r at x[at(r, k)]. scale and shift
 * (c cells each, or NULL) are indexed by k. Also writes the normalized values to xhat. */
typedef int64_t (*cell_at)(int r, int k);

static void ref_layer_norm(const double *x, int rows, int c, cell_at at, const double *scale,
                           const double *shift, double eps, double *out, double *xhat) {
  for (int r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int k = 0; k < c; k++) mean += x[at(r, k)] / c;
    for (int k = 0; k < c; k++) var += (x[at(r, k)] - mean) * (x[at(r, k)] - mean) / c;
    for (int k = 0; k < c; k++) {
      int64_t i = at(r, k);
      xhat[i] = (x[i] - mean) / sqrt(var + eps);
      out[i] = xhat[i] * (scale ? scale[k] : 1) + (shift ? shift[k] : 0);
    }
  }
}

/* batch 2 | input 3 -> output 4, memory [b][o][i]: group r = (b, i), class k = o. */
static int64_t at_bio(int r, int k) {
  return ((r / 3) * 4 + k) * 3 + r % 3;
}
/* batch 3 | -> output 2, 3: group r = b, cell k of the 6 output cells. */
static int64_t at_b23(int r, int k) {
  return r * 6 + k;
}

static const cn_dims d_bio = {AXES(2), AXES(3), AXES(4)}, d_o4 = {NONE, NONE, AXES(4)},
                     d_b23 = {AXES(3), NONE, AXES(2, 3)}, d_o23 = {NONE, NONE, AXES(2, 3)};
static const double scale4[4] = {1.5, -0.5, 2, 0.25}, shift4[4] = {0.1, -1, 0, 3};

/* ---- Values --------------------------------------------------------------------------------- */

static const double gelu_in[] = {-20, -6, -3, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 3, 6, 20};
enum { N_GELU = sizeof gelu_in / sizeof gelu_in[0] };

static void test_gelu_values(cn_backend_kind b, cn_prec prec) {
  cn_graph *g = new_graph(prec);
  cn_tensor *x = data(g, "x", (cn_dims){NONE, NONE, AXES(N_GELU)}, gelu_in);
  double want[N_GELU];
  for (int i = 0; i < N_GELU; i++) want[i] = ref_gelu(gelu_in[i]);
  /* hand values: gelu(0) = 0, gelu(1) = 0.8411919906082768 (PyTorch's approximate="tanh") */
  CHECK(want[6] == 0 && fabs(want[9] - 0.8411919906082768) < 1e-15);
  cn_tensor *y = cn_tensor_gelu(g, x);
  expect_values(g, y, b, want, N_GELU, prec == CN_PREC_DOUBLE ? 1e-15 : 1e-6);
  CHECK_STR(cn_tensor_shape(y), "|->13");
  CHECK_STR(cn_tensor_label(y), "gelu");
  free_graph(g);
}

/* The primitive against its exact value (x / (1 + e^-2u), u = k (x + 0.044715 x^3), in long
 * double), over 4096 values spread from 1e-6 to 1e4 in magnitude, both signs, zeros and +inf:
 * within 16 units in the last place of the precision for |x| <= 3, 1000 beyond (where the
 * result is tiny or x itself), or within 1e-30 (1e-300 in double) of it, where the exponential
 * overflows and the quotient is 0. */
static double ulps_from(double got, long double want, cn_prec prec) {
  if ((long double)got == want) return 0;
  int exponent;
  frexpl(want, &exponent);
  int digits = prec == CN_PREC_DOUBLE ? 53 : 24, lowest = prec == CN_PREC_DOUBLE ? -1021 : -125;
  if (exponent < lowest) exponent = lowest; /* subnormal: the fixed spacing */
  return (double)(fabsl((long double)got - want) / ldexpl(1, exponent - digits));
}

static void test_gelu_accuracy(cn_backend_kind b, cn_prec prec) {
  enum { N = 4096 };
  static double in[N];
  for (int i = 0; i < N; i++)
    in[i] = (i % 2 ? -1 : 1) * pow(10, -6 + 10.0 * (i / 2) / (N / 2 - 1)) * (1 + (i % 7) / 7.0);
  in[0] = 0, in[1] = -0.0, in[2] = INFINITY;
  cn_graph *g = new_graph(prec);
  cn_tensor *x = data(g, "x", (cn_dims){NONE, NONE, AXES(N)}, in);
  cn_tensor *y = cn_tensor_gelu(g, x);
  static double got[N];
  CHECK(y != NULL);
  if (y && run(g, cn_graph_forward(g, y), b, "gelu") &&
      cn_node_get_values(cn_tensor_value(y), false, got, N) == CN_OK) {
    double worst_near = 0, worst_far = 0;
    for (int i = 0; i < N; i++) {
      /* the input as the graph holds it (rounded to prec) */
      long double v = prec == CN_PREC_DOUBLE ? (long double)in[i] : (long double)(float)in[i];
      long double u = 0.79788456080286535588L * (v + 0.044715L * v * v * v);
      long double want = isinf(in[i]) ? (long double)INFINITY : v / (1 + expl(-2 * u));
      double e = ulps_from(got[i], want, prec);
      if (fabsl((long double)got[i] - want) <= (prec == CN_PREC_DOUBLE ? 1e-300L : 1e-30L))
        e = 0; /* where e^-2u overflows, x / inf is 0 and the exact value below 1e-30 */
      if (fabs(in[i]) <= 3 && e > worst_near) worst_near = e;
      if (fabs(in[i]) > 3 && e > worst_far) worst_far = e;
    }
    CHECK_MSG(worst_near <= 16 && worst_far <= 1000, "gelu %s: %.1f ulp for |x| <= 3, %.1f beyond",
              cn_prec_name(prec), worst_near, worst_far);
  }
  free_graph(g);
}

static void test_layer_norm_values(cn_backend_kind b, cn_prec prec) {
  cn_graph *g = new_graph(prec);
  double tol = prec == CN_PREC_DOUBLE ? 1e-13 : 2e-5;
  double x[24], want[24], xhat[24];
  for (int i = 0; i < 24; i++) x[i] = 3 * sin(1.3 * i + 0.2) + (i % 5);
  cn_tensor *tx = data(g, "x", d_bio, x);
  ref_layer_norm(x, 6, 4, at_bio, scale4, shift4, 1e-5, want, xhat);
  cn_tensor *y = cn_tensor_layer_norm(g, tx, data(g, "scale", d_o4, scale4),
                                      data(g, "shift", d_o4, shift4), 1e-5);
  expect_values(g, y, b, want, 24, tol);
  CHECK_STR(cn_tensor_shape(y), "2|3->4");
  CHECK_STR(cn_tensor_label(y), "layer_norm");
  /* no scale or shift; a large eps is visible in the result */
  ref_layer_norm(x, 6, 4, at_bio, NULL, NULL, 0.5, want, xhat);
  expect_values(g, cn_tensor_layer_norm(g, tx, NULL, NULL, 0.5), b, want, 24, tol);
  /* parameters at their documented initial values 1 and 0 are the identity affine map */
  cn_tensor *gamma = cn_tensor_param(g, "gamma", &d_o4, cn_tensor_number(g, 1));
  cn_tensor *beta = cn_tensor_param(g, "beta", &d_o4, cn_tensor_number(g, 0));
  ref_layer_norm(x, 6, 4, at_bio, NULL, NULL, 1e-5, want, xhat);
  expect_values(g, cn_tensor_layer_norm(g, tx, gamma, beta, 1e-5), b, want, 24, tol);
  /* two output axes are normalized together, per batch position */
  double x6[18], s6[6], want6[18], xhat6[18];
  for (int i = 0; i < 18; i++) x6[i] = cos(0.7 * i) * (1 + i / 6);
  for (int k = 0; k < 6; k++) s6[k] = 0.5 + k;
  ref_layer_norm(x6, 3, 6, at_b23, s6, NULL, 1e-5, want6, xhat6);
  cn_tensor *y6 =
      cn_tensor_layer_norm(g, data(g, "x6", d_b23, x6), data(g, "s6", d_o23, s6), NULL, 1e-5);
  expect_values(g, y6, b, want6, 18, tol);
  CHECK_STR(cn_tensor_shape(y6), "3|->2,3");
  free_graph(g);
}

/* ---- Gradients -------------------------------------------------------------------------------
 * A scalar loss built from one parameter p; the backprop gradient is compared with central
 * differences of the forward routine (h = 1e-6, double). */

/* The weights of weighted_sum (graph_check.h), cell by cell. */
static double weight(int64_t i) {
  return sin(0.7 * (double)i + 0.3);
}

static double x_bio[24];

static cn_tensor *l_gelu(cn_graph *g, cn_tensor *p) {
  return weighted_sum(g, cn_tensor_gelu(g, p), (cn_dims){NONE, NONE, AXES(N_GELU)});
}
static cn_tensor *l_ln_x(cn_graph *g, cn_tensor *p) {
  return weighted_sum(g,
                      cn_tensor_layer_norm(g, p, data(g, "scale", d_o4, scale4),
                                           data(g, "shift", d_o4, shift4), 1e-5),
                      d_bio);
}
static cn_tensor *l_ln_scale(cn_graph *g, cn_tensor *p) {
  return weighted_sum(
      g,
      cn_tensor_layer_norm(g, data(g, "x", d_bio, x_bio), p, data(g, "shift", d_o4, shift4), 1e-5),
      d_bio);
}
static cn_tensor *l_ln_shift(cn_graph *g, cn_tensor *p) {
  return weighted_sum(
      g,
      cn_tensor_layer_norm(g, data(g, "x", d_bio, x_bio), data(g, "scale", d_o4, scale4), p, 1e-5),
      d_bio);
}

static void test_gradients(cn_backend_kind b) {
  double ga[64], want[64], out[24], xhat[24];
  grad_check("gelu", b, (cn_dims){NONE, NONE, AXES(N_GELU)}, gelu_in, l_gelu, true, ga);
  for (int i = 0; i < N_GELU; i++) want[i] = ref_dgelu(gelu_in[i]) * weight(i);
  expect_near("d gelu", ga, want, N_GELU, 1e-14);
  grad_check("layer_norm x", b, d_bio, x_bio, l_ln_x, true, ga);
  /* d/d scale[o] = sum over (b, i) of xhat * w; d/d shift[o] = sum over (b, i) of w */
  ref_layer_norm(x_bio, 6, 4, at_bio, scale4, shift4, 1e-5, out, xhat);
  grad_check("layer_norm scale", b, d_o4, scale4, l_ln_scale, true, ga);
  for (int k = 0; k < 4; k++) {
    want[k] = 0;
    for (int r = 0; r < 6; r++) want[k] += xhat[at_bio(r, k)] * weight(at_bio(r, k));
  }
  expect_near("d layer_norm / d scale", ga, want, 4, 1e-13);
  grad_check("layer_norm shift", b, d_o4, shift4, l_ln_shift, true, ga);
  for (int k = 0; k < 4; k++) {
    want[k] = 0;
    for (int r = 0; r < 6; r++) want[k] += weight(at_bio(r, k));
  }
  expect_near("d layer_norm / d shift", ga, want, 4, 1e-13);
}

/* ---- Dropout ---------------------------------------------------------------------------------
 * x: 10^5 cells of 1 + (i mod 7); rate and step are one-cell buffers the host sets. */

enum { N_DROP = 100000 };

typedef struct {
  cn_graph *g;
  cn_tensor *y, *rate, *step;
  cn_routine *fwd;
  double *x, *v;
} drop_model;

static bool drop_new(drop_model *m, cn_backend_kind b, uint32_t seed) {
  static const cn_dims one = {NONE, NONE, NONE};
  memset(m, 0, sizeof *m);
  m->g = new_graph(CN_PREC_DOUBLE);
  m->x = malloc(N_DROP * sizeof *m->x);
  m->v = malloc(N_DROP * sizeof *m->v);
  if (!m->x || !m->v) return false;
  for (int i = 0; i < N_DROP; i++) m->x[i] = 1 + i % 7;
  CHECK(cn_graph_set_seed(m->g, seed) == CN_OK);
  m->rate = cn_tensor_buffer(m->g, "rate", &one);
  m->step = cn_tensor_buffer(m->g, "step", &one);
  cn_tensor *x = data(m->g, "x", (cn_dims){NONE, NONE, AXES(N_DROP)}, m->x);
  m->y = cn_tensor_dropout(m->g, x, m->rate, m->step);
  CHECK_MSG(m->y != NULL, "dropout: %s", cn_ctx_error(cn_graph_ctx(m->g)));
  m->fwd = m->y ? compile(m->g, cn_graph_forward(m->g, m->y), b, "dropout") : NULL;
  return m->fwd != NULL;
}

/* Runs the forward code at (rate, step) into m->v. */
static bool drop_run(drop_model *m, double rate, double step) {
  bool ok = cn_node_set_values(cn_tensor_value(m->rate), false, &rate, 1) == CN_OK &&
            cn_node_set_values(cn_tensor_value(m->step), false, &step, 1) == CN_OK &&
            cn_routine_run(m->fwd) == CN_OK && read_node(cn_tensor_value(m->y), m->v, N_DROP);
  CHECK_MSG(ok, "dropout run: %s", cn_ctx_error(cn_graph_ctx(m->g)));
  return ok;
}

static void drop_free(drop_model *m) {
  cn_routine_free(m->fwd);
  free_graph(m->g);
  free(m->x);
  free(m->v);
}

/* Every cell is 0 or x / (1 - rate); returns the fraction of zeros, writes the mask (1: kept). */
static double dropped_fraction(const drop_model *m, double rate, unsigned char *kept) {
  int zeros = 0, bad = 0;
  for (int i = 0; i < N_DROP; i++) {
    kept[i] = m->v[i] != 0;
    zeros += !kept[i];
    bad += kept[i] && m->v[i] != m->x[i] / (1 - rate);
  }
  CHECK_MSG(bad == 0, "%d kept cells are not x / (1 - rate)", bad);
  return (double)zeros / N_DROP;
}

static int agreeing(const unsigned char *a, const unsigned char *b) {
  int n = 0;
  for (int i = 0; i < N_DROP; i++) n += a[i] == b[i];
  return n;
}

static void test_dropout(cn_backend_kind b) {
  static unsigned char k1[N_DROP], k1again[N_DROP], k2[N_DROP], kseed[N_DROP], kother[N_DROP];
  drop_model m, same, other;
  if (!drop_new(&m, b, 42) || !drop_new(&same, b, 42) || !drop_new(&other, b, 7)) return;
  /* the rate within 1% over 10^5 cells, kept cells scaled by 1 / (1 - rate) */
  if (drop_run(&m, 0.3, 1)) {
    double f = dropped_fraction(&m, 0.3, k1);
    CHECK_MSG(fabs(f - 0.3) < 0.01, "dropped fraction %g at rate 0.3", f);
  }
  /* deterministic: the same step again, and another graph with the same seed */
  if (drop_run(&m, 0.3, 1)) dropped_fraction(&m, 0.3, k1again);
  CHECK_INT(agreeing(k1, k1again), N_DROP);
  if (drop_run(&same, 0.3, 1)) dropped_fraction(&same, 0.3, kseed);
  CHECK_INT(agreeing(k1, kseed), N_DROP);
  /* another step or another seed: an independent mask, agreeing on about 0.3^2 + 0.7^2 = 58% */
  if (drop_run(&m, 0.3, 2)) dropped_fraction(&m, 0.3, k2);
  if (drop_run(&other, 0.3, 1)) dropped_fraction(&other, 0.3, kother);
  double a2 = (double)agreeing(k1, k2) / N_DROP, ao = (double)agreeing(k1, kother) / N_DROP;
  CHECK_MSG(fabs(a2 - 0.58) < 0.01, "masks of steps 1 and 2 agree on %g", a2);
  CHECK_MSG(fabs(ao - 0.58) < 0.01, "masks of seeds 42 and 7 agree on %g", ao);
  /* another rate */
  if (drop_run(&m, 0.75, 3)) {
    double f = dropped_fraction(&m, 0.75, k2);
    CHECK_MSG(fabs(f - 0.75) < 0.01, "dropped fraction %g at rate 0.75", f);
  }
  /* evaluation: rate 0 is the identity, exactly, with the same routine */
  if (drop_run(&m, 0, 4)) {
    int differ = 0;
    for (int i = 0; i < N_DROP; i++) differ += m.v[i] != m.x[i];
    CHECK_INT(differ, 0);
  }
  drop_free(&m);
  drop_free(&same);
  drop_free(&other);
}

/* The gradient of sum(w * dropout(p)) at rate 0.5: w / 0.5 at the kept cells, 0 at the dropped
 * ones (finite differences, then the closed form from the mask of the forward value). */
static cn_tensor *drop_y;

static cn_tensor *l_dropout(cn_graph *g, cn_tensor *p) {
  drop_y = cn_tensor_dropout(g, p, cn_tensor_number(g, 0.5), cn_tensor_number(g, 5));
  return weighted_sum(g, drop_y, (cn_dims){NONE, NONE, AXES(N_GELU)});
}

static void test_dropout_gradient(cn_backend_kind b) {
  double ga[64];
  double x[N_GELU];
  for (int i = 0; i < N_GELU; i++) x[i] = 1 + i;
  memset(ga, 0, sizeof ga);
  grad_check("dropout", b, (cn_dims){NONE, NONE, AXES(N_GELU)}, x, l_dropout, true, ga);
  int zeros = 0, bad = 0;
  for (int i = 0; i < N_GELU; i++) {
    zeros += ga[i] == 0;
    bad += ga[i] != 0 && fabs(ga[i] - 2 * weight(i)) > 1e-14;
  }
  CHECK_INT(bad, 0);
  CHECK_MSG(zeros > 0 && zeros < N_GELU, "%d of %d gradients are 0", zeros, N_GELU);
}

/* ---- Notation builtins ---------------------------------------------------------------------- */

static cn_tensor *op(cn_graph *g, const char *text, cn_tensor *x, cn_tensor *s, cn_tensor *b) {
  const cn_notation_binding bind[3] = {{"x", x, 0}, {"s", s, 0}, {"b", b, 0}};
  cn_tensor *t = cn_notation_op(g, text, 3, bind);
  CHECK_MSG(t != NULL, "%s: %s", text, cn_ctx_error(cn_graph_ctx(g)));
  return t;
}

static void test_notation(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[24], want[24], xhat[24];
  for (int i = 0; i < 24; i++) x[i] = 3 * sin(1.3 * i + 0.2) + (i % 5);
  cn_tensor *tx = data(g, "x", d_bio, x), *ts = data(g, "scale", d_o4, scale4),
            *tb = data(g, "shift", d_o4, shift4);
  for (int i = 0; i < 24; i++) want[i] = ref_gelu(x[i]);
  expect_values(g, op(g, "gelu x", tx, ts, tb), b, want, 24, 1e-15);
  ref_layer_norm(x, 6, 4, at_bio, scale4, shift4, 1e-5, want, xhat);
  expect_values(g, op(g, "layer_norm x ~scale:s ~shift:b", tx, ts, tb), b, want, 24, 1e-13);
  ref_layer_norm(x, 6, 4, at_bio, NULL, shift4, 0.5, want, xhat);
  expect_values(g, op(g, "layer_norm ~eps:0.5 x ~shift:b", tx, ts, tb), b, want, 24, 1e-13);
  /* learned scale and shift: inline parameters at 1 and 0 take the output row's shape */
  cn_tensor *y = op(g, "layer_norm x ~scale:{gamma = 1.0} ~shift:{beta = 0.0}", tx, ts, tb);
  ref_layer_norm(x, 6, 4, at_bio, NULL, NULL, 1e-5, want, xhat);
  expect_values(g, y, b, want, 24, 1e-13);
  cn_tensor *ps[3] = {NULL, NULL, NULL};
  CHECK_INT(y ? cn_graph_params(g, y, ps, 3) : 0, 2);
  if (ps[0] && ps[1]) {
    CHECK_STR(cn_tensor_label(ps[0]), "gamma");
    CHECK_STR(cn_tensor_shape(ps[0]), "|->4");
    CHECK_STR(cn_tensor_label(ps[1]), "beta");
    CHECK_STR(cn_tensor_shape(ps[1]), "|->4");
  }
  /* dropout: every cell 0 or x / (1 - rate), some of each; rate 0 is x */
  cn_tensor *d = op(g, "dropout x ~rate:0.5 ~step:3", tx, ts, tb);
  double got[24];
  if (d && run(g, cn_graph_forward(g, d), b, "dropout") && read_node(cn_tensor_value(d), got, 24)) {
    int zeros = 0, bad = 0;
    for (int i = 0; i < 24; i++) {
      zeros += got[i] == 0;
      bad += got[i] != 0 && got[i] != 2 * x[i];
    }
    CHECK_INT(bad, 0);
    CHECK_MSG(zeros > 0 && zeros < 24, "%d of 24 cells dropped", zeros);
  }
  expect_values(g, op(g, "dropout ~step:3 ~rate:0.0 x", tx, ts, tb), b, x, 24, 0);
  free_graph(g);
}

static void expect_op_error(const char *text, const char *want) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_tensor *x = data(g, "x", d_o4, scale4);
  const cn_notation_binding bind = {"x", x, 0};
  CHECK(cn_notation_op(g, text, 1, &bind) == NULL);
  const char *got = cn_ctx_error(cn_graph_ctx(g));
  CHECK_MSG(strncmp(got, want, strlen(want)) == 0, "%s: %s", text, got);
  free_graph(g);
}

/* ---- Refusals ------------------------------------------------------------------------------- */

static void test_refusals(void) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tensor *x = data(g, "x", d_o4, scale4);
  CHECK(cn_tensor_layer_norm(g, x, NULL, NULL, -1e-5) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "layer_norm: eps -1e-05 (must be finite and non-negative)");
  CHECK(cn_tensor_layer_norm(g, x, NULL, NULL, NAN) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "layer_norm: eps nan") != NULL);
  CHECK(cn_tensor_layer_norm(g, NULL, NULL, NULL, 1e-5) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "layer_norm: operand 1 is NULL");
  CHECK(cn_tensor_gelu(g, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "gelu: operand 1 is NULL");
  CHECK(cn_tensor_dropout(g, x, NULL, x) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "dropout: operand 2 is NULL");
  CHECK(cn_tensor_dropout(g, x, x, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "dropout: operand 3 is NULL");
  free_graph(g);
}

int main(void) {
  for (int i = 0; i < 24; i++) x_bio[i] = 2 * cos(0.9 * i + 0.4) + (i % 3);
  for (int k = 0; k < 2; k++) {
    test_gelu_values(backends[k], CN_PREC_DOUBLE);
    test_gelu_values(backends[k], CN_PREC_SINGLE);
    test_gelu_accuracy(backends[k], CN_PREC_DOUBLE);
    test_gelu_accuracy(backends[k], CN_PREC_SINGLE);
    test_layer_norm_values(backends[k], CN_PREC_DOUBLE);
    test_layer_norm_values(backends[k], CN_PREC_SINGLE);
    test_gradients(backends[k]);
    test_notation(backends[k]);
    test_dropout(backends[k]);
    test_dropout_gradient(backends[k]);
  }
  test_refusals();
  expect_op_error("layer_norm x ~epsilon:1.0",
                  "<cn_op>:1:14: layer_norm has no argument ~epsilon (~scale ~shift ~eps)");
  expect_op_error("layer_norm x ~eps:\"a\"", "<cn_op>:1:14: ~eps expects a number, found a string");
  expect_op_error("layer_norm x ~eps:(-1.0)",
                  "<cn_op>:1:1: layer_norm: eps -1 (must be finite and non-negative)");
  expect_op_error("layer_norm x x", "<cn_op>:1:1: unknown function 'layer_norm'");
  expect_op_error("dropout x ~rate:0.5",
                  "<cn_op>:1:1: dropout needs ~rate and ~step (tensors or numbers)");
  expect_op_error("dropout x ~rate:0.5 ~seed:1 ~step:2",
                  "<cn_op>:1:21: dropout has no argument ~seed (~rate ~step)");
  CHECK_DONE();
}
