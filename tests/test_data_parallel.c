/* Data-parallel training (cn_dp_create, src/tensor/data_parallel.c) of the half-moons model
 * (demo/moons.c with cfg.devices > 1) on 2 and 3 CPU devices against one device with the same
 * global batch: the parameters are the same bits on every device after every step (the driver's
 * check, and memcmp here), within single-precision tolerance of the one-device run (the sums of
 * the batch group differently: per shard, then across shards), and the same bits run to run; a
 * batch that does not divide among the devices is refused with a message, and a parameter that
 * differs between devices is named by cn_dp_check. The Fashion-MNIST MLP (2 and 3 devices) and
 * convnet (2 devices), demo/fashion.c with Adam, one epoch of 4 steps against 1 device and the
 * same bits run to run (skipped with a message without the data set). */
#include "../demo/fashion.h"
#include "../demo/moons.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { PARAMS = 5, MAX_CELLS = MOONS_HIDDEN * MOONS_HIDDEN };

typedef struct {
  float v[PARAMS][MAX_CELLS];
  int64_t n[PARAMS];
  double last_loss;
} trained;

static cn_tensor *param(moons *m, int p) {
  cn_tensor *all[PARAMS] = {m->w1, m->b1, m->w2, m->b2, m->w3};
  return all[p];
}

/* One epoch on `devices` devices (0: the one-routine host step) in batches of `batch`; the
 * parameters as the host holds them after it (device 0's, copied by cn_dp_step). */
static bool train(int devices, int batch, trained *out, moons *keep) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, devices, batch};
  moons m = {0};
  cn_status st = moons_build(&m, &cfg);
  CHECK_MSG(st == CN_OK, "%d devices: %s", devices, cn_ctx_error(m.ctx));
  for (int64_t s = 0; st == CN_OK && s < m.batches; s++) {
    st = moons_train_step(&m, s, &out->last_loss);
    CHECK_MSG(st == CN_OK, "%d devices, step %lld: %s", devices, (long long)s, cn_ctx_error(m.ctx));
  }
  for (int p = 0; p < PARAMS && st == CN_OK; p++) {
    cn_node *node = cn_tensor_value(param(&m, p));
    out->n[p] = cn_node_numel(node);
    CHECK(out->n[p] <= MAX_CELLS && cn_prec_bytes(cn_node_prec(node)) == sizeof(float));
    CHECK(cn_node_get_cells(node, false, out->v[p], (size_t)out->n[p]) == CN_OK);
    /* every device holds the host's bits */
    for (int d = 0; d < devices; d++) {
      float dev[MAX_CELLS];
      CHECK(cn_node_get_device_cells(node, false, d, dev, (size_t)out->n[p]) == CN_OK);
      CHECK_MSG(memcmp(dev, out->v[p], sizeof(float) * (size_t)out->n[p]) == 0,
                "%d devices: parameter %d on device %d differs from the host's", devices, p, d);
    }
  }
  if (keep && st == CN_OK)
    *keep = m;
  else
    moons_destroy(&m);
  return st == CN_OK;
}

static void test_against_one_device(int devices, int batch) {
  trained one, dp, again;
  moons m;
  if (!train(0, batch, &one, NULL) || !train(devices, batch, &dp, &m)) return;
  double worst = 0;
  bool exact = true;
  for (int p = 0; p < PARAMS; p++)
    for (int64_t i = 0; i < one.n[p]; i++) {
      double d = fabs((double)dp.v[p][i] - one.v[p][i]) / (1 + fabs(one.v[p][i]));
      worst = d > worst ? d : worst;
      exact = exact && dp.v[p][i] == one.v[p][i];
    }
  printf("%d devices, batch %d: largest relative difference to one device %.3g (%s), loss %g\n",
         devices, batch, worst, exact ? "exact" : "rounding", dp.last_loss);
  CHECK_MSG(worst <= 1e-4, "%d devices: %.3g from one device", devices, worst);
  CHECK_NEAR(dp.last_loss, one.last_loss, 1e-4);
  /* the run again: the same bits */
  if (train(devices, batch, &again, NULL))
    for (int p = 0; p < PARAMS; p++)
      CHECK_MSG(memcmp(again.v[p], dp.v[p], sizeof(float) * (size_t)dp.n[p]) == 0,
                "%d devices: parameter %d differs run to run", devices, p);
  /* a static index neither routine reads */
  cn_symbol unused = cn_symbol_create(m.ctx, "unused", 4);
  CHECK(cn_dp_bind(m.dp, unused, 1) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(m.ctx), "neither 'moons_grad' nor 'moons_update' reads symbol 'unused'");
  /* a device whose copy of w2 drifts: the check names it */
  CHECK(cn_dp_check(m.dp) == CN_OK);
  cn_node *w2 = cn_tensor_value(m.w2);
  float cells[MAX_CELLS];
  const size_t n = (size_t)cn_node_numel(w2);
  CHECK(cn_node_get_device_cells(w2, false, devices - 1, cells, n) == CN_OK);
  cells[n - 1] = nextafterf(cells[n - 1], 1e9f); /* one bit of one cell */
  CHECK(cn_node_set_device_cells(w2, false, devices - 1, cells, n) == CN_OK);
  CHECK(cn_dp_check(m.dp) == CN_ERR_RUNTIME);
  char want[96];
  snprintf(want, sizeof want, "parameter 'w2' differs between device 0 and device %d", devices - 1);
  CHECK_HAS(cn_ctx_error(m.ctx), want);
  CHECK(moons_train_step(&m, 0, &dp.last_loss) == CN_ERR_RUNTIME);
  moons_destroy(&m);
}

/* 10 examples do not split among 3 devices. */
static void test_refusal(void) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_INTERP, 3, MOONS_BATCH};
  moons m = {0};
  CHECK(moons_build(&m, &cfg) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(m.ctx), "a global batch of 10 does not divide among 3 devices");
  moons_destroy(&m);
}

enum { LARGEST = 7 * 7 * 32 * 128 }; /* cells of the largest parameter (the convnet's w3) */

/* The parameters after one epoch of 4 batches of `batch` on `devices` devices (1: one routine). */
static bool fashion_run(fashion_model model, int64_t batch, int devices, float *out, size_t cap,
                        size_t *n) {
  const fashion_config cfg = {model, 1, batch, 4 * batch, 100,          0,
                              0,     7, NULL,  NULL,      CN_BACKEND_C, devices};
  fashion f;
  bool ok = fashion_build(&f, &cfg) == CN_OK && fashion_train_epoch(&f, NULL, NULL) == CN_OK;
  CHECK_MSG(ok, "%d devices: %s", devices, fashion_error(&f));
  *n = 0;
  for (int p = 0; ok && p < f.n_params; p++) {
    cn_node *node = cn_tensor_value(f.params[p]);
    size_t cells = (size_t)cn_node_numel(node);
    CHECK(*n + cells <= cap && cn_prec_bytes(cn_node_prec(node)) == sizeof(float));
    if (*n + cells > cap) break;
    CHECK(cn_node_get_cells(node, false, out + *n, cells) == CN_OK);
    for (int d = 0; d < devices && devices > 1; d++) {
      static float dev[LARGEST];
      CHECK(cells <= LARGEST && cn_node_get_device_cells(node, false, d, dev, cells) == CN_OK);
      CHECK_MSG(memcmp(dev, out + *n, sizeof(float) * cells) == 0,
                "fashion: parameter %d on device %d differs from the host's", p, d);
    }
    *n += cells;
  }
  fashion_destroy(&f);
  return ok;
}

/* One epoch on `devices` devices against 1: the parameters within `tol` (relative) of each
 * other; and a second run on `devices` devices gives the same bits. */
static void fashion_compare(fashion_model model, int64_t batch, int devices, size_t params,
                            double tol) {
  enum { CAP = 3 * 3 * 16 + 16 + 3 * 3 * 16 * 32 + 32 + LARGEST + 128 + 128 * 10 + 10 };
  static float one[CAP], many[CAP], again[CAP];
  const char *name = model == FASHION_MLP ? "MLP" : "convnet";
  size_t n1 = 0, n2 = 0, n3 = 0;
  if (!fashion_run(model, batch, 1, one, CAP, &n1) ||
      !fashion_run(model, batch, devices, many, CAP, &n2) ||
      !fashion_run(model, batch, devices, again, CAP, &n3))
    return;
  CHECK_INT((long long)n1, (long long)params);
  CHECK_INT((long long)n2, (long long)n1);
  CHECK_INT((long long)n3, (long long)n1);
  double worst = 0;
  for (size_t i = 0; i < n1 && n1 == n2; i++) {
    double d = fabs((double)many[i] - one[i]) / (1 + fabs(one[i]));
    worst = d > worst ? d : worst;
  }
  printf("fashion %s, %d devices: largest relative difference to one device %.3g\n", name, devices,
         worst);
  CHECK_MSG(worst <= tol, "fashion %s, %d devices: %.3g from one device", name, devices, worst);
  CHECK_MSG(n3 == n2 && memcmp(many, again, n2 * sizeof *many) == 0,
            "fashion %s, %d devices: the parameters differ run to run", name, devices);
}

static void test_fashion(void) {
  if (!fashion_data_available(NULL)) {
    printf("SKIP (fashion part): Fashion-MNIST is not installed in %s\n", FASHION_DATA_DIR);
    return;
  }
  fashion_compare(FASHION_MLP, 120, 2, 784 * 128 + 128 + 128 * 10 + 10, 1e-5);
  fashion_compare(FASHION_MLP, 120, 3, 784 * 128 + 128 + 128 * 10 + 10, 1e-5);
  /* two convolutions (16 and 32 channels), pooling, two dense layers; 60 images a batch */
  fashion_compare(FASHION_CONVNET, 60, 2,
                  3 * 3 * 16 + 16 + 3 * 3 * 16 * 32 + 32 + LARGEST + 128 + 128 * 10 + 10, 1e-5);
}

int main(void) {
  test_against_one_device(2, MOONS_BATCH);
  test_against_one_device(3, 12);
  test_refusal();
  test_fashion();
  CHECK_DONE();
}
