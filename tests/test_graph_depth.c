/* Deep graphs: a chain of 100 000 operations (p + 1 + 1 + ... with p a parameter) is built,
 * gathered into forward code, init code and backprop, and run, on a thread whose stack is 256 KiB.
 * Every traversal of the graph is iterative, so the depth of a graph costs no stack: a traversal
 * that recursed once per level (code.c's order_from did) overflows this stack long before the
 * chain's end, which makes the failure deterministic instead of depending on the default stack.
 * The values are checked: p = 0.5 gives 0.5 + 100000, and every gradient along the chain is 1. */
#include "check.h"

#include "cannl.h"

#include <pthread.h>

enum { DEPTH = 100000 };

static void *deep_chain(void *arg) {
  (void)arg;
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_tensor *p = cn_tensor_param(g, "p", NULL, cn_tensor_number(g, 0.5));
  cn_tensor *t = p;
  /* materialized every 1000 operations, so shape inference solves small batches */
  for (int i = 1; i <= DEPTH && t; i++) {
    t = cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){t, cn_tensor_number(g, 1)});
    if (t && i % 1000 == 0 && cn_graph_params(g, t, NULL, 0) != 1) t = NULL;
  }
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(ctx));
  if (!t) goto done;
  cn_asgn *fwd = cn_graph_forward(g, t);
  CHECK_MSG(fwd != NULL, "forward: %s", cn_ctx_error(ctx));
  cn_asgn *init = cn_graph_init_params(g, t);
  CHECK_MSG(init != NULL, "init: %s", cn_ctx_error(ctx));
  cn_tensor *params[2];
  CHECK_INT(cn_graph_params(g, t, params, 2), 1);
  cn_asgn *back = cn_graph_backprop(g, t);
  CHECK_MSG(back != NULL, "backprop: %s", cn_ctx_error(ctx));
  if (!fwd || !init || !back) goto done;
  cn_routine *r = cn_routine_compile(ctx, cn_asgn_seq(ctx, 3, (cn_asgn *[]){init, fwd, back}),
                                     CN_BACKEND_INTERP, "deep");
  CHECK_MSG(r != NULL, "compile: %s", cn_ctx_error(ctx));
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "run: %s", cn_ctx_error(ctx));
  double value = 0, grad = 0;
  CHECK(cn_node_get_values(cn_tensor_value(t), false, &value, 1) == CN_OK);
  CHECK(cn_node_get_values(cn_tensor_grad(p), false, &grad, 1) == CN_OK);
  CHECK_NEAR(value, 0.5 + DEPTH, 0);
  CHECK_NEAR(grad, 1, 0);
done:
  cn_ctx_destroy(ctx);
  return NULL;
}

int main(void) {
  pthread_attr_t attr;
  pthread_t thread;
  CHECK(pthread_attr_init(&attr) == 0);
  CHECK(pthread_attr_setstacksize(&attr, 256 * 1024) == 0);
  CHECK(pthread_create(&thread, &attr, deep_chain, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  pthread_attr_destroy(&attr);
  CHECK_DONE();
}
