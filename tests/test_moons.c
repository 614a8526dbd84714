/* The half-moons run (demo/moons.c, as examples/moons.c trains it) on a shortened schedule: the
 * data generator's determinism and geometry, the parameter shapes inference gives the OCANNL-style
 * model, distinct default-init values per cell, convergence (a loss bound and an accuracy bound
 * after 20 epochs), the trained model's outputs against the same MLP evaluated in plain C from the
 * trained parameters, and the interpreter against generated C over the first epoch. */
#include "../demo/moons.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { SHORT_EPOCHS = 20 };

static void test_data(void) {
  static double xy[2 * MOONS_POINTS], labels[MOONS_POINTS], xy2[2 * MOONS_POINTS],
      labels2[MOONS_POINTS];
  moons_generate(MOONS_SEED, MOONS_NOISE, xy, labels);
  moons_generate(MOONS_SEED, MOONS_NOISE, xy2, labels2);
  CHECK(memcmp(xy, xy2, sizeof xy) == 0 && memcmp(labels, labels2, sizeof labels) == 0);
  moons_generate(MOONS_SEED + 1, MOONS_NOISE, xy2, labels2);
  CHECK(memcmp(xy, xy2, sizeof xy) != 0);
  /* upper moon (+1, even points): centre (0, 0), radius 1, mean of (cos t, sin t) over t uniform
   * in [0, pi) = (0, 2/pi); lower moon (-1): centre (1, 0.5), mean (1, 0.5 - 2/pi). The radial
   * deviation is the noise along the radius: standard deviation 0.1. */
  double mean[2][2] = {{0, 0}, {0, 0}}, dev2[2] = {0, 0};
  int count[2] = {0, 0}, alternating = 0;
  for (int i = 0; i < MOONS_POINTS; i++) {
    int k = i % 2;
    alternating += labels[i] == (k == 0 ? 1.0 : -1.0);
    double cx = k == 0 ? 0.0 : 1.0, cy = k == 0 ? 0.0 : 0.5;
    mean[k][0] += xy[2 * i];
    mean[k][1] += xy[2 * i + 1];
    double r = hypot(xy[2 * i] - cx, xy[2 * i + 1] - cy) - 1.0;
    dev2[k] += r * r;
    count[k]++;
  }
  CHECK_INT(alternating, MOONS_POINTS);
  CHECK_NEAR(mean[0][0] / count[0], 0.0, 0.1);
  CHECK_NEAR(mean[0][1] / count[0], 2 / MOONS_PI, 0.1);
  CHECK_NEAR(mean[1][0] / count[1], 1.0, 0.1);
  CHECK_NEAR(mean[1][1] / count[1], 0.5 - 2 / MOONS_PI, 0.1);
  CHECK_NEAR(sqrt(dev2[0] / count[0]), MOONS_NOISE, 0.02);
  CHECK_NEAR(sqrt(dev2[1] / count[1]), MOONS_NOISE, 0.02);
}

static bool values(const moons *m, cn_tensor *t, double *out, size_t n) {
  cn_node *node = cn_tensor_value(t);
  bool ok = node && cn_node_get_values(node, false, out, n) == CN_OK;
  CHECK_MSG(ok, "%s", cn_ctx_error(m->ctx));
  return ok;
}

/* f(x) from the parameters, in plain C. Memory order is batch, output, input: w1 is [16][2],
 * w2 [16][16], w3 [16]. */
typedef struct {
  double w1[MOONS_HIDDEN][2], b1[MOONS_HIDDEN], w2[MOONS_HIDDEN][MOONS_HIDDEN], b2[MOONS_HIDDEN],
      w3[MOONS_HIDDEN];
} plain_mlp;

static double plain_f(const plain_mlp *p, double x, double y) {
  double h1[MOONS_HIDDEN], f = 0;
  for (int o = 0; o < MOONS_HIDDEN; o++)
    h1[o] = fmax(0, p->b1[o] + p->w1[o][0] * x + p->w1[o][1] * y);
  for (int o = 0; o < MOONS_HIDDEN; o++) {
    double h2 = p->b2[o];
    for (int i = 0; i < MOONS_HIDDEN; i++) h2 += p->w2[o][i] * h1[i];
    f += p->w3[o] * fmax(0, h2);
  }
  return f;
}

static void test_training(void) {
  static moons m;
  const moons_config cfg = {SHORT_EPOCHS, MOONS_SEED, CN_BACKEND_C, 1, MOONS_BATCH};
  cn_status st = moons_build(&m, &cfg);
  CHECK_MSG(st == CN_OK, "%s", m.ctx ? cn_ctx_error(m.ctx) : "no context");
  if (st != CN_OK) {
    moons_destroy(&m);
    return;
  }
  /* the OCANNL-style model: only the biases' output size is given */
  CHECK_STR(cn_tensor_shape(m.w1), "|2->16");
  CHECK_STR(cn_tensor_shape(m.b1), "|->16");
  CHECK_STR(cn_tensor_shape(m.w2), "|16->16");
  CHECK_STR(cn_tensor_shape(m.w3), "|16->");
  CHECK_STR(cn_tensor_shape(m.loss), "|->1");

  /* default init 0.5 (uniform1 - 0.5): in [-0.25, 0.25), a different value in every cell */
  plain_mlp p;
  if (values(&m, m.w1, &p.w1[0][0], 2 * MOONS_HIDDEN)) {
    int in_range = 0, distinct = 0;
    const double *w = &p.w1[0][0];
    for (int i = 0; i < 2 * MOONS_HIDDEN; i++) {
      in_range += w[i] >= -0.25 && w[i] < 0.25;
      bool seen = false;
      for (int j = 0; j < i; j++) seen |= w[j] == w[i];
      distinct += !seen;
    }
    CHECK_INT(in_range, 2 * MOONS_HIDDEN);
    CHECK_INT(distinct, 2 * MOONS_HIDDEN);
  }

  double epoch_loss[SHORT_EPOCHS];
  st = moons_train(&m, epoch_loss, NULL, NULL);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(m.ctx));
  double f[MOONS_POINTS];
  if (st == CN_OK) {
    CHECK_MSG(epoch_loss[SHORT_EPOCHS - 1] < 0.1, "final epoch loss %g",
              epoch_loss[SHORT_EPOCHS - 1]);
    CHECK_MSG(epoch_loss[SHORT_EPOCHS - 1] < epoch_loss[0] / 5, "loss %g -> %g", epoch_loss[0],
              epoch_loss[SHORT_EPOCHS - 1]);
    st = moons_eval(&m, MOONS_POINTS, m.xy, f);
    CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(m.ctx));
  }
  if (st == CN_OK && values(&m, m.w1, &p.w1[0][0], 2 * MOONS_HIDDEN) &&
      values(&m, m.b1, p.b1, MOONS_HIDDEN) &&
      values(&m, m.w2, &p.w2[0][0], MOONS_HIDDEN * MOONS_HIDDEN) &&
      values(&m, m.b2, p.b2, MOONS_HIDDEN) && values(&m, m.w3, p.w3, MOONS_HIDDEN)) {
    int correct = 0, agree = 0;
    for (int i = 0; i < MOONS_POINTS; i++) {
      double expected = plain_f(&p, m.xy[2 * i], m.xy[2 * i + 1]);
      correct += (expected > 0) == (m.labels[i] > 0);
      agree += fabs(f[i] - expected) <= 1e-4 * fmax(1, fabs(expected));
    }
    CHECK_INT(agree, MOONS_POINTS);
    CHECK_MSG(correct >= 0.98 * MOONS_POINTS, "%d of %d correct", correct, MOONS_POINTS);
    CHECK_NEAR(moons_accuracy(&m, f), (double)correct / MOONS_POINTS, 1e-12);
  }
  moons_destroy(&m);
}

/* One epoch on each backend from the same init: the same losses and parameters (the interpreter
 * computes in double, generated C in float, so up to single-precision rounding). */
static void test_backends_agree(void) {
  static moons m[2];
  const cn_backend_kind kinds[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
  double loss[2][MOONS_BATCHES], w2[2][MOONS_HIDDEN * MOONS_HIDDEN];
  for (int k = 0; k < 2; k++) {
    const moons_config cfg = {SHORT_EPOCHS, MOONS_SEED, kinds[k], 1, MOONS_BATCH};
    cn_status st = moons_build(&m[k], &cfg);
    for (int s = 0; s < MOONS_BATCHES && st == CN_OK; s++)
      st = moons_train_step(&m[k], s, &loss[k][s]);
    CHECK_MSG(st == CN_OK, "%s", m[k].ctx ? cn_ctx_error(m[k].ctx) : "no context");
    if (st != CN_OK || !values(&m[k], m[k].w2, w2[k], MOONS_HIDDEN * MOONS_HIDDEN)) {
      moons_destroy(&m[0]);
      moons_destroy(&m[1]);
      return;
    }
  }
  int loss_agree = 0, w_agree = 0;
  for (int s = 0; s < MOONS_BATCHES; s++) loss_agree += fabs(loss[0][s] - loss[1][s]) <= 1e-4;
  for (int i = 0; i < MOONS_HIDDEN * MOONS_HIDDEN; i++)
    w_agree += fabs(w2[0][i] - w2[1][i]) <= 1e-4;
  CHECK_INT(loss_agree, MOONS_BATCHES);
  CHECK_INT(w_agree, MOONS_HIDDEN * MOONS_HIDDEN);
  /* the first batch on the initial parameters: the same value, and not trivially 0 or 1 */
  CHECK_NEAR(loss[0][0], loss[1][0], 1e-6);
  CHECK(loss[0][0] > 0.1 && loss[0][0] < 2);
  moons_destroy(&m[0]);
  moons_destroy(&m[1]);
}

int main(void) {
  test_data();
  test_training();
  test_backends_agree();
  CHECK_DONE();
}
