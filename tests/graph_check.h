/* The shared harness of the tests that build graphs through the C API and run them on both
 * backends (test_train_ops.c, test_nn.c): dims written inline (AXES, NONE), data tensors from
 * double arrays, a graph per precision with its own context, compile and run with the context's
 * message on failure, node values read back, comparison within a relative tolerance, and
 * gradients checked against finite differences. Include
 * after check.h. */
#ifndef CANNL_GRAPH_CHECK_H
#define CANNL_GRAPH_CHECK_H

#include "cannl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* the backends every test runs on */
static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};

#define AXES(...)                                                                                  \
  ((cn_axes){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__},  \
             NULL})
#define NONE ((cn_axes){0, NULL, NULL})

static inline int64_t numel_of(const cn_dims *d) {
  int64_t n = 1;
  const cn_axes *rows[3] = {&d->batch, &d->input, &d->output};
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < rows[k]->n; a++) n *= rows[k]->dims[a];
  return n;
}

static inline cn_tensor *data(cn_graph *g, const char *label, cn_dims d, const double *v) {
  return cn_tensor_data(g, label, &d, v, (size_t)numel_of(&d));
}

static inline cn_graph *new_graph(cn_prec prec) {
  cn_graph *g = cn_graph_create(cn_ctx_create());
  cn_graph_set_prec(g, prec);
  return g;
}

static inline void free_graph(cn_graph *g) {
  cn_ctx_destroy(cn_graph_ctx(g));
}

static inline cn_routine *compile(cn_graph *g, const cn_asgn *a, cn_backend_kind b,
                                  const char *name) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_routine *r = a ? cn_routine_compile(ctx, a, b, name) : NULL;
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  return r;
}

static inline bool run(cn_graph *g, const cn_asgn *a, cn_backend_kind b, const char *name) {
  cn_routine *r = compile(g, a, b, name);
  if (!r) return false;
  cn_status st = cn_routine_run(r);
  CHECK_MSG(st == CN_OK, "%s: %s", name, cn_ctx_error(cn_graph_ctx(g)));
  cn_routine_free(r);
  return st == CN_OK;
}

/* Reads the n values of a node into out; false (with a failed check) on a count mismatch. */
static inline bool read_node(cn_node *node, double *out, int64_t n) {
  CHECK(node != NULL);
  if (!node) return false;
  CHECK_INT(cn_node_numel(node), n);
  return cn_node_numel(node) == n && cn_node_get_values(node, false, out, (size_t)n) == CN_OK;
}

static inline void expect_near(const char *what, const double *got, const double *want, int64_t n,
                               double tol) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * fmax(1, fabs(want[i]))) && bad++ < 4)
      fprintf(stderr, "  %s[%lld] = %.17g, expected %.17g\n", what, (long long)i, got[i], want[i]);
  CHECK_MSG(bad == 0, "%s: %d cells differ", what, bad);
}

/* sum(y * w) with w = sin(0.7 * offset + 0.3): every output cell matters, differently. */
static inline cn_tensor *weighted_sum(cn_graph *g, cn_tensor *y, cn_dims d) {
  cn_tensor *w = cn_tensor_range_of_shape(g, &d);
  w = cn_tensor_apply(g, CN_OP_FMA, 3,
                      (cn_tensor *[]){cn_tensor_number(g, 0.7), w, cn_tensor_number(g, 0.3)});
  w = cn_tensor_apply(g, CN_OP_SIN, 1, &w);
  return cn_tensor_sum(g, cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){y, w}));
}

/* A scalar loss built from one parameter p (dims d, initial values init, at most 64 cells, in a
 * double graph): its backprop gradient, returned in ga, must be finite and, with
 * finite_differences, agree with central differences of the forward routine (h = 1e-6) within
 * 1e-7 relative. */
typedef cn_tensor *(*loss_fn)(cn_graph *g, cn_tensor *p);
static inline void grad_check(const char *name, cn_backend_kind b, cn_dims d, const double *init,
                              loss_fn build, bool finite_differences, double *ga) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  int64_t n = numel_of(&d);
  cn_tensor *p = cn_tensor_param(g, "p", &d, data(g, "p_init", d, init));
  cn_tensor *loss = p ? build(g, p) : NULL;
  CHECK_MSG(loss != NULL, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine *fwd = loss ? compile(g, cn_graph_forward(g, loss), b, "fd_forward") : NULL;
  if (!fwd || !run(g, cn_graph_init_params(g, loss), b, "fd_init") ||
      !run(g, cn_graph_grad_update(g, loss), b, "fd_grad") ||
      !read_node(cn_tensor_grad(p), ga, n)) {
    cn_routine_free(fwd);
    free_graph(g);
    return;
  }
  double v[64], lv[2];
  cn_node *value = cn_tensor_value(p);
  for (int64_t c = 0; c < n; c++)
    CHECK_MSG(isfinite(ga[c]), "%s: grad[%lld] = %g", name, (long long)c, ga[c]);
  for (int64_t c = 0; c < n && finite_differences; c++) {
    memcpy(v, init, (size_t)n * sizeof *v);
    for (int side = 0; side < 2; side++) {
      v[c] = init[c] + (side ? -1e-6 : 1e-6);
      cn_node_set_values(value, false, v, (size_t)n);
      lv[side] = NAN;
      if (cn_routine_run(fwd) == CN_OK)
        cn_node_get_values(cn_tensor_value(loss), false, &lv[side], 1);
    }
    double gn = (lv[0] - lv[1]) / 2e-6;
    CHECK_MSG(fabs(gn - ga[c]) <= 1e-7 * fmax(1, fabs(ga[c])),
              "%s: d/dp[%lld] = %.12g, differences %.12g", name, (long long)c, ga[c], gn);
  }
  cn_routine_free(fwd);
  free_graph(g);
}

#endif
