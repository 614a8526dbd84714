/* Tensors and autodiff end to end: Karpathy's micrograd README expression (g = 24.7041,
 * a.grad = 138.8338, b.grad = 645.5773), a tensor used twice, prohibited gradients, parameter init
 * gathered once, numbers as unit arrays (syntax-extensions-cd-op) broadcasting through compose,
 * fma's compose-accumulate update, and a two-layer MLP's forward values against a hand computation.
 * Every case runs on the interpreter and on generated C. */
#include "check.h"

#include "cannl.h"

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};

static cn_tensor *op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b});
}
static cn_tensor *op1(cn_graph *g, cn_op op, cn_tensor *a) {
  return cn_tensor_apply(g, op, 1, &a);
}
static cn_tensor *num(cn_graph *g, double v) {
  return cn_tensor_number(g, v);
}

static const cn_dims scalar = {{0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}};

static cn_tensor *scalar_param(cn_graph *g, const char *label, double v) {
  return cn_tensor_param(g, label, &scalar, cn_tensor_data(g, "init", &scalar, &v, 1));
}

static double value_of(cn_tensor *t, bool grad) {
  double v = NAN;
  cn_node *n = grad ? cn_tensor_grad(t) : cn_tensor_value(t);
  CHECK(n && cn_node_get_values(n, false, &v, 1) == CN_OK);
  return v;
}

static void run(cn_ctx *ctx, const cn_asgn *a, cn_backend_kind b, const char *name) {
  CHECK_MSG(a != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!a) return;
  cn_routine *r = cn_routine_compile(ctx, a, b, name);
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!r) return;
  CHECK_MSG(cn_routine_run(r) == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine_free(r);
}

static void test_micrograd(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *a = scalar_param(g, "a", -4), *b = scalar_param(g, "b", 2);
  cn_tensor *c = op2(g, CN_OP_ADD, a, b);
  cn_tensor *d = op2(g, CN_OP_ADD, op2(g, CN_OP_MUL, a, b), op2(g, CN_OP_POW, b, num(g, 3)));
  c = op2(g, CN_OP_ADD, c, op2(g, CN_OP_ADD, c, num(g, 1)));
  c = op2(g, CN_OP_ADD, c,
          op2(g, CN_OP_ADD, op2(g, CN_OP_ADD, num(g, 1), c), op1(g, CN_OP_NEG, a)));
  d = op2(g, CN_OP_ADD, d,
          op2(g, CN_OP_ADD, op2(g, CN_OP_MUL, d, num(g, 2)),
              op1(g, CN_OP_RELU, op2(g, CN_OP_ADD, b, a))));
  d = op2(g, CN_OP_ADD, d,
          op2(g, CN_OP_ADD, op2(g, CN_OP_MUL, num(g, 3), d),
              op1(g, CN_OP_RELU, op2(g, CN_OP_SUB, b, a))));
  cn_tensor *e = op2(g, CN_OP_SUB, c, d);
  cn_tensor *f = op2(g, CN_OP_POW, e, num(g, 2));
  cn_tensor *out = op2(g, CN_OP_DIV, f, num(g, 2));
  out = op2(g, CN_OP_ADD, out, op2(g, CN_OP_DIV, num(g, 10), f));
  CHECK_MSG(out != NULL, "%s", cn_ctx_error(ctx));
  if (out) {
    run(ctx, cn_graph_init_params(g, out), backend, "micrograd_init");
    run(ctx, cn_graph_grad_update(g, out), backend, "micrograd_update");
    CHECK_NEAR(value_of(out, false), 24.7041, 5e-5);
    CHECK_NEAR(value_of(a, true), 138.8338, 5e-5);
    CHECK_NEAR(value_of(b, true), 645.5773, 5e-5);
    CHECK_NEAR(value_of(a, false), -4, 0);
    /* the init code was handed out once: a second request has nothing for these parameters */
    cn_asgn *again = cn_graph_init_params(g, out);
    CHECK(again && strstr(cn_asgn_to_string(ctx, again), "=:") == NULL);
  }
  cn_ctx_destroy(ctx);
}

/* Formatting: JSON in memory order (batch, output, input) and the grid. */
static void test_format(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  double v[12];
  for (int i = 0; i < 12; i++) v[i] = i + 0.5;
  v[11] = 1.0 / 3;
  cn_dims dims = {{1, (int64_t[]){2}, NULL}, {1, (int64_t[]){3}, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_tensor *t = cn_tensor_data(g, "t\"q", &dims, v, 12);
  CHECK_STR(t ? cn_tensor_format(t, false, true) : NULL,
            "{\"label\": \"t\\\"q\", \"batch\": [2], \"input\": [3], \"output\": [2], "
            "\"values\": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, "
            "0.33333333333333331]}");
  /* blocks by the batch axis; 1/3 needs more than the 8 digits of the default precision, so
   * the fraction column is 9 wide (".33333333") and the integral one 2 ("10") */
  CHECK_STR(t ? cn_tensor_format(t, false, false) : NULL,
            "\"t\"q\" (#1) 2|3->2\n"
            "[0, :, :]\n"
            " 0.5          1.5          2.5\n"
            " 3.5          4.5          5.5\n"
            "[1, :, :]\n"
            " 6.5          7.5          8.5\n"
            " 9.5         10.5          0.33333333\n");
  CHECK(t && cn_tensor_format(t, true, true) == NULL); /* data has no gradient */
  CHECK_HAS(cn_ctx_error(ctx), "has no gradient");
  cn_ctx_destroy(ctx);
}

/* Standalone updates (contraction-is-emergent's producer regime), the SGD skeleton written out:
 *   {delta} =: p.grad + (wd *. p);  p =- lr * delta ~logic:"."
 * and an einsum-logic update writing a diagonal into a fresh buffer (its shape inferred). */
static void test_updates(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims vec3 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_tensor *p =
      cn_tensor_param(g, "p", &vec3, cn_tensor_data(g, "p0", &vec3, (double[]){1, 2, 3}, 3));
  cn_tensor *c = cn_tensor_data(g, "c", &vec3, (double[]){0.5, -1, 2}, 3);
  cn_tensor *loss = cn_tensor_einsum(g, "i;i=>", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){p, c});
  cn_tensor *decay = op2(g, CN_OP_MUL, num(g, 0.1), cn_tensor_stop_gradient(g, p));
  cn_tensor *delta = cn_tensor_buffer(g, "sgd_delta", NULL);
  cn_tensor *lr = num(g, 0.5);
  cn_tensor *diag = cn_tensor_buffer(g, "diag", NULL);
  cn_update *u1 = cn_graph_update(g, (cn_tref){delta, false}, true, CN_OP_ADD, CN_OP_ADD, 2,
                                  (cn_tref[]){{p, true}, {decay, false}}, ".");
  cn_update *u2 = cn_graph_update(g, (cn_tref){p, false}, false, CN_OP_SUB, CN_OP_MUL, 2,
                                  (cn_tref[]){{lr, false}, {delta, false}}, NULL);
  cn_update *u3 = cn_graph_update(g, (cn_tref){diag, false}, true, CN_OP_ADD, CN_OP_ID, 1,
                                  (cn_tref[]){{delta, false}}, "i=>ii");
  CHECK_MSG(loss && u1 && u2 && u3, "%s", cn_ctx_error(ctx));
  CHECK(cn_graph_update(g, (cn_tref){c, true}, true, CN_OP_ADD, CN_OP_ID, 1,
                        (cn_tref[]){{p, false}}, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "\"c\".grad does not exist");
  if (loss && u1 && u2 && u3) {
    run(ctx, cn_graph_init_params(g, loss), backend, "upd_init");
    run(ctx, cn_graph_grad_update(g, loss), backend, "upd_grad");
    cn_asgn *steps[5] = {cn_graph_forward(g, decay), cn_graph_forward(g, lr),
                         cn_graph_update_code(g, u1), cn_graph_update_code(g, u2),
                         cn_graph_update_code(g, u3)};
    bool ok = steps[0] && steps[1] && steps[2] && steps[3] && steps[4];
    CHECK_MSG(ok, "%s", cn_ctx_error(ctx));
    if (ok) run(ctx, cn_asgn_seq(ctx, 5, steps), backend, "upd_sgd");
    CHECK_STR(cn_tensor_shape(diag), "|->3,3");
    double got[9], want_p[3], pv[3] = {1, 2, 3}, cv[3] = {0.5, -1, 2};
    for (int i = 0; i < 3; i++) want_p[i] = pv[i] - 0.5 * (cv[i] + 0.1 * pv[i]);
    CHECK(cn_node_get_values(cn_tensor_value(p), false, got, 3) == CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], want_p[i], 1e-12);
    CHECK(cn_node_get_values(cn_tensor_value(diag), false, got, 9) == CN_OK);
    for (int i = 0; i < 9; i++)
      CHECK_NEAR(got[i], i % 4 == 0 ? cv[i / 4] + 0.1 * pv[i / 4] : 0, 1e-12);
  }
  cn_ctx_destroy(ctx);
}

/* Operands that can never broadcast together are rejected by the call that builds the
 * operation, naming both, and the graph stays usable. */
static void test_broadcast_conflict(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d6 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){6}, NULL}};
  cn_dims d8 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){8}, NULL}};
  double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  cn_tensor *a = cn_tensor_data(g, "a", &d6, v, 6), *b = cn_tensor_data(g, "b", &d8, v, 8);
  CHECK(op2(g, CN_OP_ADD, a, b) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "output axis 0 of \"a\" (#1) has size 6 and output axis 0 of "
                               "\"b\" (#2) size 8 (axes align from the right)");
  cn_tensor *n = op1(g, CN_OP_NEG, a);
  CHECK_MSG(n && cn_tensor_value(n) != NULL, "%s", cn_ctx_error(ctx));
  CHECK_STR(n ? cn_tensor_shape(n) : NULL, "|->6");
  cn_ctx_destroy(ctx);
}

/* Gradient specs: a frozen (prohibited) parameter gets no gradient and SGD leaves it; a required
 * gradient on data exists and receives its contribution; the spec is refused once used. */
static void test_grad_spec(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *frozen = scalar_param(g, "frozen", 3), *w = scalar_param(g, "w", 2);
  cn_tensor *x = cn_tensor_data(g, "x", &scalar, (double[]){5}, 1);
  CHECK(cn_tensor_set_grad_spec(frozen, CN_GRAD_PROHIBIT) == CN_OK);
  CHECK(cn_tensor_set_grad_spec(x, CN_GRAD_REQUIRE) == CN_OK);
  cn_tensor *y = op2(g, CN_OP_MUL, op2(g, CN_OP_MUL, frozen, w), x);
  CHECK(cn_tensor_set_grad_spec(w, CN_GRAD_PROHIBIT) != CN_OK);
  CHECK_HAS(cn_ctx_error(ctx), "must be set before the tensor is used");
  CHECK(!cn_tensor_is_diff(frozen) && cn_tensor_is_diff(x) && cn_tensor_is_diff(y));
  run(ctx, cn_graph_init_params(g, y), CN_BACKEND_INTERP, "spec_init");
  run(ctx, cn_graph_grad_update(g, y), CN_BACKEND_INTERP, "spec_grad");
  CHECK_NEAR(value_of(w, true), 15, 0);
  CHECK_NEAR(value_of(x, true), 6, 0);
  CHECK(cn_tensor_grad(frozen) == NULL);
  cn_sgd sgd = {num(g, 0.1), 0, 0, false};
  run(ctx, cn_graph_sgd_update(g, y, &sgd), CN_BACKEND_INTERP, "spec_sgd");
  CHECK_NEAR(value_of(frozen, false), 3, 0);
  CHECK_NEAR(value_of(w, false), 2 - 0.1 * 15, 1e-12);
  cn_ctx_destroy(ctx);
}

/* Numbers are arrays of one output axis of size 1 (syntax-extensions-cd-op), and compose relates
 * its operands by broadcasting (contraction-is-emergent):
 *   - hey = param initialized by the number 7, y = hey * [2; 3] + [4; 5; 6]: the number does
 *     not fix hey's shape, hey is |2->3 of 7s and y = 7 * (2 + 3) + [4; 5; 6] = [39; 40; 41];
 *   - r = m * 2 with m |2->3 = [(1, 2); (3, 4); (5, 6)]: the number's unit axis broadcasts into
 *     m's input axis (read at 0), r = 2 * row sums = [6; 14; 22], and m's gradient under the
 *     sum of r is 2 everywhere;
 *   - a number printed alone is |->1. */
static void test_numbers_are_unit_arrays(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims out2 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_dims out3 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_dims m23 = {{0, NULL, NULL}, {1, (int64_t[]){2}, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_tensor *hey = cn_tensor_param(g, "hey", NULL, num(g, 7));
  cn_tensor *v = cn_tensor_data(g, "v", &out2, (double[]){2, 3}, 2);
  cn_tensor *c = cn_tensor_data(g, "c", &out3, (double[]){4, 5, 6}, 3);
  cn_tensor *y = op2(g, CN_OP_ADD, cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, hey, v), c);
  cn_tensor *m =
      cn_tensor_param(g, "m", &m23, cn_tensor_data(g, "m0", &m23, (double[]){1, 2, 3, 4, 5, 6}, 6));
  cn_tensor *r = cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, m, num(g, 2));
  cn_tensor *loss = r ? cn_tensor_einsum(g, "i => 0", CN_OP_ADD, CN_OP_ID, 1, &r) : NULL;
  cn_tensor *two = num(g, 2);
  CHECK_MSG(y && loss && two, "%s", cn_ctx_error(ctx));
  if (y && loss && two) {
    run(ctx, cn_graph_init_params(g, y), backend, "unit_init_y");
    run(ctx, cn_graph_forward(g, y), backend, "unit_y");
    CHECK_STR(cn_tensor_shape(hey), "|2->3");
    CHECK_STR(cn_tensor_shape(y), "|->3");
    double got[6];
    CHECK(cn_node_get_values(cn_tensor_value(y), false, got, 3) == CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], 39 + i, 0);
    CHECK(cn_node_get_values(cn_tensor_value(hey), false, got, 6) == CN_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], 7, 0);
    run(ctx, cn_graph_init_params(g, loss), backend, "unit_init_loss");
    run(ctx, cn_graph_grad_update(g, loss), backend, "unit_loss");
    CHECK_STR(cn_tensor_shape(r), "|->3");
    CHECK(cn_node_get_values(cn_tensor_value(r), false, got, 3) == CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], 6 + 8 * i, 0);
    CHECK(cn_node_get_values(cn_tensor_grad(m), false, got, 6) == CN_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], 2, 0);
    run(ctx, cn_graph_forward(g, two), backend, "unit_two");
    CHECK_STR(cn_tensor_shape(two), "|->1");
  }
  cn_ctx_destroy(ctx);
}

/* fma as a standalone update (syntax-extensions-cd-op: compose-accumulate is its default
 * projection): c =:+ fma(a, b, c0) with a = [[1, 2]; [3, 4]] (|2->2), b = [5; 6], c0 = [10; 20]
 * sums a[i,k] b[k] + c0[i] over k: [37; 79], with logic "@" and with NULL alike. */
static void test_fma_update(cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims m22 = {{0, NULL, NULL}, {1, (int64_t[]){2}, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_dims out2 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_tensor *a = cn_tensor_data(g, "a", &m22, (double[]){1, 2, 3, 4}, 4);
  cn_tensor *b = cn_tensor_data(g, "b", &out2, (double[]){5, 6}, 2);
  cn_tensor *c0 = cn_tensor_data(g, "c0", &out2, (double[]){10, 20}, 2);
  cn_tensor *c[2] = {cn_tensor_buffer(g, "c", NULL), cn_tensor_buffer(g, "c_default", NULL)};
  cn_tref args[3] = {{a, false}, {b, false}, {c0, false}};
  cn_update *u[2] = {
      cn_graph_update(g, (cn_tref){c[0], false}, true, CN_OP_ADD, CN_OP_FMA, 3, args, "@"),
      cn_graph_update(g, (cn_tref){c[1], false}, true, CN_OP_ADD, CN_OP_FMA, 3, args, NULL)};
  CHECK_MSG(u[0] && u[1], "%s", cn_ctx_error(ctx));
  for (int i = 0; i < 2 && u[0] && u[1]; i++) {
    run(ctx, cn_graph_update_code(g, u[i]), backend, "fma_update");
    CHECK_STR(cn_tensor_shape(c[i]), "|->2");
    double got[2];
    CHECK(cn_node_get_values(cn_tensor_value(c[i]), false, got, 2) == CN_OK);
    CHECK_NEAR(got[0], 37, 0);
    CHECK_NEAR(got[1], 79, 0);
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  for (int b = 0; b < 2; b++) test_fma_update(backends[b]);
  for (int b = 0; b < 2; b++) test_numbers_are_unit_arrays(backends[b]);
  test_grad_spec();
  test_broadcast_conflict();
  test_format();
  for (int b = 0; b < 2; b++) test_updates(backends[b]);
  for (int b = 0; b < 2; b++) test_micrograd(backends[b]);
  CHECK_DONE();
}
