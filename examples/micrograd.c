/* Karpathy's micrograd README expression through the C tensor API: a and b are scalar
 * parameters, every intermediate a differentiable tensor, and one routine runs the forward code
 * and the backprop. Prints g = 24.7041, a.grad = 138.8338, b.grad = 645.5773 (micrograd's
 * numbers) and exits 1 if they differ. The same program in the notation is
 * examples/micrograd.cnl. */
#include "cannl.h"

#include <math.h>
#include <stdio.h>

static cn_graph *g;

static cn_tensor *op2(cn_op op, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b});
}
static cn_tensor *op1(cn_op op, cn_tensor *a) {
  return cn_tensor_apply(g, op, 1, &a);
}
static cn_tensor *num(double v) {
  return cn_tensor_number(g, v);
}

static const cn_dims scalar = {{0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}};

static cn_tensor *scalar_param(const char *label, double v) {
  return cn_tensor_param(g, label, &scalar, cn_tensor_data(g, "init", &scalar, &v, 1));
}

static double read(cn_node *n) {
  double v = NAN;
  if (n) cn_node_get_values(n, false, &v, 1);
  return v;
}

int main(void) {
  cn_ctx *ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  /* every call tolerates NULL operands (it fails with a message), so checking the end suffices */
  cn_tensor *a = scalar_param("a", -4), *b = scalar_param("b", 2);
  cn_tensor *c = op2(CN_OP_ADD, a, b);
  cn_tensor *d = op2(CN_OP_ADD, op2(CN_OP_MUL, a, b), op2(CN_OP_POW, b, num(3)));
  c = op2(CN_OP_ADD, c, op2(CN_OP_ADD, c, num(1)));
  c = op2(CN_OP_ADD, c, op2(CN_OP_ADD, op2(CN_OP_ADD, num(1), c), op1(CN_OP_NEG, a)));
  d = op2(CN_OP_ADD, d,
          op2(CN_OP_ADD, op2(CN_OP_MUL, d, num(2)), op1(CN_OP_RELU, op2(CN_OP_ADD, b, a))));
  d = op2(CN_OP_ADD, d,
          op2(CN_OP_ADD, op2(CN_OP_MUL, num(3), d), op1(CN_OP_RELU, op2(CN_OP_SUB, b, a))));
  cn_tensor *e = op2(CN_OP_SUB, c, d);
  cn_tensor *f = op2(CN_OP_POW, e, num(2));
  cn_tensor *out = op2(CN_OP_ADD, op2(CN_OP_DIV, f, num(2)), op2(CN_OP_DIV, num(10), f));
  cn_asgn *parts[2] = {out ? cn_graph_init_params(g, out) : NULL,
                       out ? cn_graph_grad_update(g, out) : NULL};
  cn_routine *r = parts[0] && parts[1] ? cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, parts),
                                                            CN_BACKEND_C, "micrograd")
                                       : NULL;
  if (!r || cn_routine_run(r) != CN_OK) {
    fprintf(stderr, "micrograd: %s\n", cn_ctx_error(ctx));
    cn_ctx_destroy(ctx);
    return 1;
  }
  double gv = read(cn_tensor_value(out)), ga = read(cn_tensor_grad(a)),
         gb = read(cn_tensor_grad(b));
  printf("g = %.4f\na.grad = %.4f\nb.grad = %.4f\n", gv, ga, gb);
  int ok = fabs(gv - 24.7041) < 5e-5 && fabs(ga - 138.8338) < 5e-5 && fabs(gb - 645.5773) < 5e-5;
  cn_ctx_destroy(ctx);
  return ok ? 0 : 1;
}
