/* CPU devices and per-device values (issue 33 items 1-2): several devices of host memory in one
 * context, a routine compiled once and run on each (cn_routine_run_on), replicated nodes whose
 * copies stay independent, reads and writes naming a device, device-to-device transfers (every
 * precision, into merge buffers, padded nodes, through the host for a device of its own memory),
 * `p.grad =+ p.grad.merge` from the notation run on the destination after a transfer, and the
 * all-reduce: sums equal to the test's own (exact values, and the tree's grouping in single
 * precision), the same bits on every device and run to run, on 2, 3 and 5 devices. */
#include "counting_backend.h"

#include "ir/ir.h"
#include "runtime/routine.h"

#include <stdlib.h>
#include <string.h>

/* The bytes of a node's padded buffer. */
static size_t padded_bytes(const cn_node *node) {
  return cn_node_buffer_cells(node) * cn_prec_bytes(node->prec);
}

/* Device k's copy of the node's value (or merge buffer), padding margins included. */
static const unsigned char *device_cells(cn_node *node, bool merge, int k) {
  const cn_device *dev = cn_cpu_device(node->ctx, k, "test");
  return dev ? cn_node_device_host(node, merge, dev, CN_HOST_READ) : NULL;
}

/* A transfer copies every byte of the padded buffer, for every precision: device 0's cells
 * (written through cn_node_set_device_cells, the padding margins by hand) reach device 1's value
 * and device 2's merge buffer, and nothing else changes. */
static void test_transfers_every_precision(void) {
  for (int p = 0; p < CN_PREC_COUNT; p++) {
    cn_ctx *ctx = cn_ctx_create();
    CHECK(cn_ctx_open_devices(ctx, 3) == CN_OK);
    cn_node *x = cn_node_create(ctx, "x", (cn_prec)p, 2, (int64_t[]){2, 3});
    CHECK(cn_node_set_padding(x, 1, 1, 2) == CN_OK && cn_node_set_padding(x, 0, 0, 1) == CN_OK);
    CHECK(cn_node_set_replicated(x, true) == CN_OK);
    size_t bytes = cn_prec_bytes((cn_prec)p), n = 6, all = padded_bytes(x);
    CHECK_INT(all, 3 * 6 * bytes);
    unsigned char cells[6 * 16], back[6 * 16];
    for (size_t i = 0; i < n * bytes; i++) cells[i] = (unsigned char)(17 * i + 3 + p);
    CHECK_MSG(cn_node_set_device_cells(x, false, 0, cells, n) == CN_OK, "%s", cn_ctx_error(ctx));
    unsigned char *zero = (unsigned char *)device_cells(x, false, 0);
    CHECK(zero != NULL);
    if (!zero) {
      cn_ctx_destroy(ctx);
      continue;
    }
    zero[0] = 0x5A;       /* a left margin cell of row 0 */
    zero[all - 1] = 0xC3; /* the padded row's last byte */
    uint64_t before = ctx->stats[CN_STAT_TRANSFERS];
    CHECK(cn_node_transfer(x, 0, 1, false) == CN_OK);
    CHECK(cn_node_transfer(x, 0, 2, true) == CN_OK);
    CHECK_INT(ctx->stats[CN_STAT_TRANSFERS] - before, 2);
    const unsigned char *one = device_cells(x, false, 1), *two_merge = device_cells(x, true, 2);
    CHECK_MSG(one && memcmp(one, zero, all) == 0, "precision %s: value", cn_prec_name((cn_prec)p));
    CHECK_MSG(two_merge && memcmp(two_merge, zero, all) == 0, "precision %s: merge",
              cn_prec_name((cn_prec)p));
    CHECK(cn_node_get_device_cells(x, false, 1, back, n) == CN_OK &&
          memcmp(back, cells, n * bytes) == 0);
    /* device 2's value is still the host's (zeros), device 1's merge buffer untouched */
    const unsigned char *two = device_cells(x, false, 2);
    bool zeros = two != NULL;
    for (size_t i = 0; two && i < all; i++) zeros &= two[i] == 0;
    CHECK_MSG(zeros, "precision %s: device 2's value changed", cn_prec_name((cn_prec)p));
    CHECK(cn_node_get_device_cells(x, true, 1, back, n) == CN_OK);
    zeros = true;
    for (size_t i = 0; i < n * bytes; i++) zeros &= back[i] == 0;
    CHECK(zeros);
    cn_ctx_destroy(ctx);
  }
}

/* A routine compiled once (generated C, and the interpreter) runs on every device, each on its
 * own copies: replicated copies stay independent, the unnamed host read is the last writer's,
 * and a node that is not replicated keeps one newest value across devices. */
static void test_replicated(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_open_devices(ctx, 2) == CN_OK && cn_ctx_open_devices(ctx, 3) == CN_OK);
  CHECK_INT(cn_ctx_device_count(ctx), 3);
  const int64_t dims[1] = {4};
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 1, dims);
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_SINGLE, 1, dims);
  CHECK(cn_node_set_replicated(x, true) == CN_OK && cn_node_set_replicated(y, true) == CN_OK);
  CHECK(cn_node_replicated(y) && !cn_node_replicated(NULL));
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor t = {1, dims, &map};
  cn_proj *proj = cn_proj_create(ctx, 1, &i, dims, t, 1, &t);
  cn_buffer rhs = {x, false};
  cn_asgn *acc = cn_asgn_accum(ctx, false, CN_OP_ADD, y, CN_OP_ID, &rhs, proj); /* y =+ x */
  cn_routine *r = cn_routine_compile(ctx, acc, backend, "accumulate");
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (!r) {
    cn_ctx_destroy(ctx);
    return;
  }
  CHECK(cn_node_set_values(y, false, (double[]){0.5, 0.5, 0.5, 0.5}, 4) == CN_OK);
  for (int d = 0; d < 3; d++) {
    double v[4];
    for (int k = 0; k < 4; k++) v[k] = (k + 1) * (d == 0 ? 1 : d == 1 ? 10 : 100);
    CHECK(cn_node_set_device_values(x, false, d, v, 4) == CN_OK);
    CHECK_MSG(cn_routine_run_on(r, d) == CN_OK, "%s", cn_ctx_error(ctx));
  }
  CHECK(cn_routine_run_on(r, 0) == CN_OK); /* device 0 again: 0.5 + 2 x0 */
  double v[4];
  static const double want[3][4] = {
      {2.5, 4.5, 6.5, 8.5}, {10.5, 20.5, 30.5, 40.5}, {100.5, 200.5, 300.5, 400.5}};
  for (int d = 0; d < 3; d++) {
    CHECK(cn_node_get_device_values(y, false, d, v, 4) == CN_OK);
    for (int k = 0; k < 4; k++) CHECK_NEAR(v[k], want[d][k], 0);
  }
  /* the host's value is its own until a device's is brought there */
  CHECK(cn_node_get_values(y, false, v, 4) == CN_OK);
  CHECK_NEAR(v[3], 0.5, 0);
  CHECK(cn_node_current(y, false) == (CN_CURRENT_HOST | CN_CURRENT_DEVICE));
  CHECK(cn_routine_run_on(r, 2) == CN_OK);
  CHECK(cn_node_transfer(y, 2, CN_DEVICE_HOST, false) == CN_OK);
  CHECK(cn_node_get_values(y, false, v, 4) == CN_OK);
  CHECK_NEAR(v[3], 800.5, 0);
  CHECK(cn_node_get_device_values(y, false, 1, v, 4) == CN_OK);
  CHECK_NEAR(v[3], 40.5, 0); /* still device 1's own */
  /* a host write sets every device's value */
  CHECK(cn_node_set_values(y, false, (double[]){1, 2, 3, 4}, 4) == CN_OK);
  for (int d = 0; d < 3; d++) {
    CHECK(cn_node_get_device_values(y, false, d, v, 4) == CN_OK);
    CHECK_NEAR(v[0], 1, 0);
    CHECK_NEAR(v[3], 4, 0);
  }
  /* the same routine on the host: the host's values, x's never set (zeros) */
  CHECK(cn_routine_run(r) == CN_OK);
  CHECK(cn_node_get_values(y, false, v, 4) == CN_OK);
  CHECK_NEAR(v[1], 2, 0);
  /* from the host into a device's merge buffer */
  CHECK(cn_node_transfer(y, CN_DEVICE_HOST, 1, true) == CN_OK);
  CHECK(cn_node_get_device_values(y, true, 1, v, 4) == CN_OK);
  CHECK_NEAR(v[2], 3, 0);
  /* not replicated: one newest value, whichever device wrote it */
  cn_node *z = cn_node_create(ctx, "z", CN_PREC_SINGLE, 1, dims);
  CHECK(cn_node_set_device_values(z, false, 1, (double[]){7, 8, 9, 10}, 4) == CN_OK);
  CHECK(cn_node_get_device_values(z, false, 2, v, 4) == CN_OK);
  CHECK_NEAR(v[2], 9, 0);
  CHECK(cn_node_get_values(z, false, v, 4) == CN_OK);
  CHECK_NEAR(v[0], 7, 0);
  /* refusals name what is wrong */
  CHECK(cn_node_set_replicated(z, true) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "already has copies on devices");
  CHECK(cn_routine_run_on(r, 3) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "cn_routine_run_on: no device 3 (the context has 3");
  CHECK(cn_node_get_device_values(y, false, -1, v, 4) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "cn_node_get_device_values: no device -1");
  CHECK(cn_node_transfer(y, 0, 7, false) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "cn_node_transfer: no device 7");
  CHECK(cn_ctx_open_devices(ctx, CN_MAX_DEVICES + 1) == CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
}

/* A routine's scratch (a CN_MEM_LOCAL node accumulated into without `=:`) is each device's own and
 * cleared before every run there; the "nan" check reads the copy of the device the routine ran
 * on, not the host's. */
static void test_scratch_and_checks(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_open_devices(ctx, 2) == CN_OK);
  const int64_t dims[1] = {3};
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, dims);
  cn_node *t = cn_node_create(ctx, "t", CN_PREC_DOUBLE, 1, dims);
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_DOUBLE, 1, dims);
  CHECK(cn_node_set_memory(t, CN_MEM_LOCAL) == CN_OK);
  CHECK(cn_node_set_replicated(x, true) == CN_OK && cn_node_set_replicated(y, true) == CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor pt = {1, dims, &map};
  cn_proj *proj = cn_proj_create(ctx, 1, &i, dims, pt, 1, &pt);
  cn_asgn *steps[2] = {
      cn_asgn_accum(ctx, false, CN_OP_ADD, t, CN_OP_ID, &(cn_buffer){x, false}, proj), /* t =+ x */
      cn_asgn_accum(ctx, false, CN_OP_ADD, y, CN_OP_ID, &(cn_buffer){t, false}, proj), /* y =+ t */
  };
  cn_routine *r = cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, steps), CN_BACKEND_C, "scratch");
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (!r) {
    cn_ctx_destroy(ctx);
    return;
  }
  CHECK(cn_node_set_device_values(x, false, 0, (double[]){1, 2, 3}, 3) == CN_OK);
  CHECK(cn_node_set_device_values(x, false, 1, (double[]){-1, -2, -3}, 3) == CN_OK);
  for (int run = 0; run < 2; run++)
    for (int d = 0; d < 2; d++) CHECK(cn_routine_run_on(r, d) == CN_OK);
  double v[3];
  CHECK(cn_node_get_device_values(y, false, 0, v, 3) == CN_OK);
  CHECK_NEAR(v[2], 6, 0); /* 2 x, not 3 x: t cleared before the second run */
  CHECK(cn_node_get_device_values(y, false, 1, v, 3) == CN_OK);
  CHECK_NEAR(v[2], -6, 0);
  CHECK(cn_ctx_set_option(ctx, "check", "nan") == CN_OK);
  CHECK(cn_node_set_device_values(x, false, 1, (double[]){0, NAN, 0}, 3) == CN_OK);
  CHECK(cn_routine_run_on(r, 0) == CN_OK);
  CHECK(cn_routine_run_on(r, 1) == CN_ERR_RUNTIME);
  CHECK_HAS(cn_ctx_error(ctx), "wrote NaN into 't'"); /* the scratch, read in place */
  CHECK_HAS(cn_ctx_error(ctx), "at [1]");
  CHECK(cn_routine_run(r) == CN_OK); /* the host's values hold no NaN */
  /* a materialized node written: the device's copy scanned, not the host's value */
  cn_routine *direct = cn_routine_compile(
      ctx, cn_asgn_accum(ctx, false, CN_OP_ADD, y, CN_OP_ID, &(cn_buffer){x, false}, proj),
      CN_BACKEND_INTERP, "direct");
  CHECK(direct && cn_routine_run_on(direct, 0) == CN_OK);
  CHECK(direct && cn_routine_run_on(direct, 1) == CN_ERR_RUNTIME);
  CHECK_HAS(cn_ctx_error(ctx), "wrote NaN into 'y'");
  cn_ctx_destroy(ctx);
}

/* The notation's merge: `p.grad =+ p.grad.merge` compiled from %cd text and run on device 0 after
 * device 1's gradient was transferred into device 0's merge buffer. */
static void test_notation_merge(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_open_devices(ctx, 2) == CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims d3 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_tensor *p = cn_tensor_param(g, "p", &d3, cn_tensor_data(g, "p0", &d3, (double[]){1, 2, 3}, 3));
  cn_asgn *merge =
      p ? cn_notation_cd(g, "p.grad =+ p.grad.merge", 1, (cn_notation_binding[]){{"p", p, 0}})
        : NULL;
  CHECK_MSG(merge != NULL, "%s", cn_ctx_error(ctx));
  cn_routine *r = merge ? cn_routine_compile(ctx, merge, CN_BACKEND_INTERP, "grad_merge") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (r) {
    cn_node *grad = cn_tensor_grad(p);
    CHECK(cn_node_set_replicated(grad, true) == CN_OK);
    CHECK(cn_node_set_device_values(grad, false, 0, (double[]){0.25, 0.5, 1}, 3) == CN_OK);
    CHECK(cn_node_set_device_values(grad, false, 1, (double[]){4, 8, 16}, 3) == CN_OK);
    CHECK(cn_node_transfer(grad, 1, 0, true) == CN_OK);
    CHECK(cn_routine_run_on(r, 0) == CN_OK);
    double v[3];
    CHECK(cn_node_get_device_values(grad, false, 0, v, 3) == CN_OK);
    CHECK_NEAR(v[0], 4.25, 0);
    CHECK_NEAR(v[2], 17, 0);
    CHECK(cn_node_get_device_values(grad, false, 1, v, 3) == CN_OK);
    CHECK_NEAR(v[0], 4, 0);
  }
  cn_ctx_destroy(ctx);
}

/* Device d's value of cell k of gradient g: exactly representable, so any order sums exactly. */
static double exact_value(int g, int d, int k) {
  return (double)((d + 1) * (k + 2) * (g + 1)) + 0.25 * d - 0.5 * k;
}

/* A value whose sums round in single precision: the grouping shows in the bits. */
static float rounding_value(int d, int k) {
  return 0.1f * (float)(d + 1) + 1.0f / (float)(3 + k + 7 * d);
}

/* What the tree sums in single precision: at stride s, device d += device d + s. */
static float tree_sum(int devices, int k) {
  float v[8];
  for (int d = 0; d < devices; d++) v[d] = rounding_value(d, k);
  for (int s = 1; s < devices; s *= 2)
    for (int d = 0; d + s < devices; d += 2 * s) v[d] = v[d] + v[d + s];
  return v[0];
}

static void test_allreduce(int devices, cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_open_devices(ctx, devices) == CN_OK);
  enum { CELLS = 5 };
  const int64_t dims[2] = {1, CELLS};
  cn_node *nodes[4] = {
      cn_node_create(ctx, "g_single", CN_PREC_SINGLE, 2, dims),
      cn_node_create(ctx, "g_double", CN_PREC_DOUBLE, 2, dims),
      cn_node_create(ctx, "g_int32", CN_PREC_INT32, 2, dims),
      cn_node_create(ctx, "g_round", CN_PREC_SINGLE, 2, dims),
  };
  CHECK(cn_node_set_padding(nodes[0], 1, 2, 1) == CN_OK); /* padded: margins copied, not summed */
  for (int n = 0; n < 4; n++) CHECK(cn_node_set_replicated(nodes[n], true) == CN_OK);
  cn_allreduce *ar = cn_allreduce_create(ctx, 4, nodes, backend);
  CHECK_MSG(ar != NULL, "%s", cn_ctx_error(ctx));
  if (!ar) {
    cn_ctx_destroy(ctx);
    return;
  }
  unsigned char *first[4] = {NULL};
  for (int run = 0; run < 2; run++) {
    for (int d = 0; d < devices; d++) {
      double v[CELLS];
      for (int n = 0; n < 3; n++) {
        for (int k = 0; k < CELLS; k++)
          v[k] = n == 2 ? (double)((d + 1) * (k - 2) * 1000) : exact_value(n, d, k);
        CHECK(cn_node_set_device_values(nodes[n], false, d, v, CELLS) == CN_OK);
      }
      float f[CELLS];
      for (int k = 0; k < CELLS; k++) f[k] = rounding_value(d, k);
      CHECK(cn_node_set_device_cells(nodes[3], false, d, f, CELLS) == CN_OK);
    }
    CHECK_MSG(cn_allreduce_run(ar) == CN_OK, "%s", cn_ctx_error(ctx));
    for (int d = 0; d < devices; d++) {
      double v[CELLS];
      for (int n = 0; n < 3; n++) {
        CHECK(cn_node_get_device_values(nodes[n], false, d, v, CELLS) == CN_OK);
        for (int k = 0; k < CELLS; k++) {
          double want = 0; /* summed in the other order: last device first */
          for (int e = devices - 1; e >= 0; e--)
            want += n == 2 ? (double)((e + 1) * (k - 2) * 1000) : exact_value(n, e, k);
          CHECK_MSG(v[k] == want, "%d devices, node %d, device %d, cell %d: %g, expected %g",
                    devices, n, d, k, v[k], want);
        }
      }
      float f[CELLS];
      CHECK(cn_node_get_device_cells(nodes[3], false, d, f, CELLS) == CN_OK);
      for (int k = 0; k < CELLS; k++) {
        float want = tree_sum(devices, k);
        CHECK_MSG(memcmp(&f[k], &want, sizeof want) == 0,
                  "%d devices, rounding, cell %d: %.9g, expected %.9g", devices, k, (double)f[k],
                  (double)want);
      }
      /* every device holds device 0's bits, margins included, and the same bits run to run */
      for (int n = 0; n < 4; n++) {
        size_t all = padded_bytes(nodes[n]);
        const unsigned char *mine = device_cells(nodes[n], false, d);
        const unsigned char *zero = device_cells(nodes[n], false, 0);
        CHECK(mine && zero && memcmp(mine, zero, all) == 0);
        if (d == 0 && run == 0 && zero && (first[n] = malloc(all))) memcpy(first[n], zero, all);
        if (d == 0 && run == 1) CHECK(first[n] && zero && memcmp(first[n], zero, all) == 0);
      }
    }
  }
  for (int n = 0; n < 4; n++) free(first[n]);
  /* 2 (devices - 1) transfers per node: devices - 1 merged, devices - 1 copied back */
  CHECK_INT(ctx->stats[CN_STAT_TRANSFERS], 2 * 4 * 2 * (devices - 1));
  cn_allreduce_free(ar);
  /* refusals */
  cn_node *lone = cn_node_create(ctx, "lone", CN_PREC_SINGLE, 2, dims);
  CHECK(cn_allreduce_create(ctx, 1, &lone, backend) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "node 0 ('lone'");
  CHECK_HAS(cn_ctx_error(ctx), "is not replicated");
  cn_node *twice[2] = {nodes[0], nodes[0]};
  CHECK(cn_allreduce_create(ctx, 2, twice, backend) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "is listed twice");
  /* one left for the context to free */
  CHECK(cn_allreduce_create(ctx, 1, nodes, backend) != NULL);
  cn_ctx_destroy(ctx);
}

/* Items 1 and 2 together, driven by hand: a model's gradient routine (forward and backprop,
 * generated C) run on each device on its shard of the batch, the gradients all-reduced, the SGD
 * update run on each device: the parameters are the same bits on every device, and equal (within
 * single-precision rounding) to one host run on the whole batch. loss = sum_b (w . x_b - y_b)^2,
 * a sum, so the whole batch's gradient is the sum of the shards'. */
enum { DP_IN = 3, DP_SHARD = 4, DP_STEPS = 3 };

typedef struct {
  cn_ctx *ctx;
  cn_tensor *w, *x, *y;
  cn_routine *grad, *update;
} dp_model;

static double dp_x(int b, int i) {
  return 0.25 * (double)((b * 7 + i * 3) % 11) - 1.0;
}
static double dp_y(int b) {
  return 0.5 * (double)(b % 5) - 0.75;
}

static bool dp_build(dp_model *m, int batch) {
  m->ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(m->ctx);
  cn_graph_set_prec(g, CN_PREC_SINGLE);
  const int64_t b = batch, in = DP_IN;
  const cn_dims x_dims = {{1, &b, NULL}, CN_AXES_NONE, {1, &in, NULL}};
  const cn_dims y_dims = {{1, &b, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  const cn_dims w_dims = {CN_AXES_NONE, {1, &in, NULL}, CN_AXES_NONE};
  double xs[4 * DP_SHARD * DP_IN], ys[4 * DP_SHARD];
  for (int k = 0; k < batch; k++) {
    ys[k] = dp_y(k);
    for (int i = 0; i < DP_IN; i++) xs[k * DP_IN + i] = dp_x(k, i);
  }
  m->x = cn_tensor_data(g, "x", &x_dims, xs, (size_t)batch * DP_IN);
  m->y = cn_tensor_data(g, "y", &y_dims, ys, (size_t)batch);
  m->w = cn_tensor_param(g, "w", &w_dims,
                         cn_tensor_data(g, "w0", &w_dims, (double[]){0.5, -0.25, 0.125}, DP_IN));
  cn_tensor *f = m->w && m->x ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, m->w, m->x) : NULL;
  cn_tensor *r = f && m->y ? cn_tensor_apply(g, CN_OP_SUB, 2, (cn_tensor *[]){f, m->y}) : NULL;
  cn_tensor *sq = r ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){r, r}) : NULL;
  cn_tensor *loss = sq ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &sq) : NULL;
  cn_routine *init =
      loss ? cn_routine_compile(m->ctx, cn_graph_init_params(g, loss), CN_BACKEND_INTERP, "init")
           : NULL;
  CHECK_MSG(init && cn_routine_run(init) == CN_OK, "%s", cn_ctx_error(m->ctx));
  const cn_sgd sgd = {cn_tensor_number(g, 0.01), 0, 0, false};
  m->grad =
      init ? cn_routine_compile(m->ctx, cn_graph_grad_update(g, loss), CN_BACKEND_C, "grad") : NULL;
  m->update = m->grad ? cn_routine_compile(m->ctx, cn_graph_sgd_update(g, loss, &sgd),
                                           CN_BACKEND_INTERP, "update")
                      : NULL;
  CHECK_MSG(m->update != NULL, "%s", cn_ctx_error(m->ctx));
  return m->update != NULL;
}

/* Every node a routine writes holds a value per device. */
static void dp_replicate(cn_routine *r) {
  const cn_ll_proc *proc = cn_routine_proc(r);
  for (int i = 0; i < proc->n_params; i++)
    if (cn_routine_writes(r, i) && proc->params[i].node->mode == CN_MEM_MATERIALIZED)
      CHECK(cn_node_set_replicated(proc->params[i].node, true) == CN_OK);
}

static void test_data_parallel(int devices) {
  dp_model whole, dp;
  if (!dp_build(&whole, devices * DP_SHARD) || !dp_build(&dp, DP_SHARD)) {
    cn_ctx_destroy(whole.ctx);
    cn_ctx_destroy(dp.ctx);
    return;
  }
  CHECK(cn_ctx_open_devices(dp.ctx, devices) == CN_OK);
  dp_replicate(dp.grad);
  dp_replicate(dp.update);
  cn_node *x = cn_tensor_value(dp.x), *y = cn_tensor_value(dp.y), *w = cn_tensor_value(dp.w);
  CHECK(cn_node_set_replicated(x, true) == CN_OK && cn_node_set_replicated(y, true) == CN_OK);
  for (int d = 0; d < devices; d++) {
    double xs[DP_SHARD * DP_IN], ys[DP_SHARD];
    for (int k = 0; k < DP_SHARD; k++) {
      ys[k] = dp_y(d * DP_SHARD + k);
      for (int i = 0; i < DP_IN; i++) xs[k * DP_IN + i] = dp_x(d * DP_SHARD + k, i);
    }
    CHECK(cn_node_set_device_values(x, false, d, xs, DP_SHARD * DP_IN) == CN_OK);
    CHECK(cn_node_set_device_values(y, false, d, ys, DP_SHARD) == CN_OK);
  }
  cn_node *grad = cn_tensor_grad(dp.w);
  cn_allreduce *ar = cn_allreduce_create(dp.ctx, 1, &grad, CN_BACKEND_C);
  CHECK_MSG(ar != NULL, "%s", cn_ctx_error(dp.ctx));
  for (int step = 0; ar && step < DP_STEPS; step++) {
    CHECK(cn_routine_run(whole.grad) == CN_OK && cn_routine_run(whole.update) == CN_OK);
    for (int d = 0; d < devices; d++)
      CHECK_MSG(cn_routine_run_on(dp.grad, d) == CN_OK, "%s", cn_ctx_error(dp.ctx));
    CHECK_MSG(cn_allreduce_run(ar) == CN_OK, "%s", cn_ctx_error(dp.ctx));
    for (int d = 0; d < devices; d++) CHECK(cn_routine_run_on(dp.update, d) == CN_OK);
  }
  float want[DP_IN], got[DP_IN], first[DP_IN];
  CHECK(cn_node_get_cells(cn_tensor_value(whole.w), false, want, DP_IN) == CN_OK);
  CHECK(cn_node_get_device_cells(w, false, 0, first, DP_IN) == CN_OK);
  for (int i = 0; i < DP_IN; i++) {
    CHECK_NEAR(first[i], want[i], 1e-5 * (1 + fabs(want[i])));
    CHECK_MSG(first[i] != (float)(i == 0 ? 0.5 : i == 1 ? -0.25 : 0.125), "w[%d] never moved", i);
  }
  for (int d = 1; d < devices; d++) {
    CHECK(cn_node_get_device_cells(w, false, d, got, DP_IN) == CN_OK);
    CHECK_MSG(memcmp(got, first, sizeof got) == 0, "%d devices: w on device %d differs", devices,
              d);
  }
  cn_ctx_destroy(whole.ctx);
  cn_ctx_destroy(dp.ctx);
}

/* A device of its own memory (counting_backend.h's, host_memory false): transfers with it go
 * through the host, a download and an upload, the node's host buffer untouched; its backend's
 * routines and all-reduces are refused on the CPU devices. */
static void test_through_host(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_open_devices(ctx, 1) == CN_OK);
  const cn_device *cpu = cn_cpu_device(ctx, 0, "test"), *far = &counting_device;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_HALF, 1, (int64_t[]){3});
  CHECK(cn_node_set_replicated(x, true) == CN_OK);
  CHECK(cn_node_set_values(x, false, (double[]){9, 9, 9}, 3) == CN_OK);
  CHECK(cn_node_set_device_values(x, false, 0, (double[]){1.5, -2, 0.25}, 3) == CN_OK);
  CHECK(cn_node_transfer_between(x, cpu, far, false) == CN_OK);
  CHECK_INT(count.uploads, 1); /* the transfer's own: no upload of the host's value first */
  CHECK_INT(count.downloads, 0);
  CHECK(cn_node_transfer_between(x, far, cpu, true) == CN_OK);
  CHECK_INT(count.downloads, 1);
  double v[3];
  CHECK(cn_node_get_device_values(x, true, 0, v, 3) == CN_OK);
  CHECK_NEAR(v[0], 1.5, 0);
  CHECK_NEAR(v[1], -2, 0);
  CHECK_NEAR(v[2], 0.25, 0);
  CHECK(cn_node_get_values(x, false, v, 3) == CN_OK); /* the host's own value */
  CHECK_NEAR(v[1], 9, 0);
  /* the far device to the host: a download straight into the host buffer */
  CHECK(cn_node_transfer_between(x, far, NULL, false) == CN_OK);
  CHECK_INT(count.downloads, 2);
  CHECK(cn_node_get_values(x, false, v, 3) == CN_OK);
  CHECK_NEAR(v[1], -2, 0);
  cn_backend_kind kind;
  CHECK_MSG(cn_backend_register(ctx, &counting, &kind) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_SINGLE, 1, (int64_t[]){3});
  CHECK(cn_node_set_replicated(y, true) == CN_OK);
  CHECK(cn_allreduce_create(ctx, 1, &y, kind) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "backend counting runs on its own device");
  cn_routine *r = cn_routine_compile(ctx, cn_asgn_fetch_constant(ctx, y, 2), kind, "fill");
  CHECK(r && cn_routine_run_on(r, 0) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "compiled for backend counting, which runs on its own device");
  /* the default backend, the option's */
  CHECK(cn_ctx_set_option(ctx, "backend", "interp") == CN_OK);
  cn_allreduce *ar = cn_allreduce_create(ctx, 1, &y, CN_BACKEND_DEFAULT);
  CHECK_MSG(ar && cn_allreduce_run(ar) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_transfers_every_precision();
  test_replicated(CN_BACKEND_INTERP);
  test_replicated(CN_BACKEND_C);
  test_scratch_and_checks();
  test_notation_merge();
  test_allreduce(2, CN_BACKEND_INTERP);
  test_allreduce(3, CN_BACKEND_C);
  test_allreduce(5, CN_BACKEND_INTERP);
  test_through_host();
  test_data_parallel(2);
  test_data_parallel(3);
  CHECK_DONE();
}
