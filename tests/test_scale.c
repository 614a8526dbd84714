/* The compiler at scale (issue 12 "Tests"): a chain of 2 000 pointwise additions and an MLP of
 * 200 dense layers are built through the C API (shape inference, projections, forward and
 * backprop code, lowering, the interpreter), run, and checked against values computed here by
 * hand. Speed targets live in bench/bench_scale.c; what is asserted here only catches a return of
 * super-linear behaviour: the arena grows in proportion to the model (the metadata of the largest
 * size is at most 1.5 times its share of the smallest's, deterministic whatever the machine) and
 * each build stays under a generous wall-clock ceiling meant for ASan and valgrind builds. A
 * training loop in a script (backprop, sgd with a schedule over the loop index, run, print) takes
 * no new arena memory per step. */
#include "check.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { WALL_CEILING_S = 20 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool run_forward(cn_ctx *ctx, cn_graph *g, cn_tensor *t, const char *name) {
  cn_asgn *code = cn_graph_forward(g, t);
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, name) : NULL;
  bool ok = r && cn_routine_run(r) == CN_OK;
  CHECK_MSG(ok, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine_free(r);
  return ok;
}

/* y_1 = x + x, y_i = y_{i-1} + x: y_n = (n + 1) x. Returns the arena bytes it used. */
static size_t chain(int n) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const int64_t two = 2;
  const cn_dims dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &two, NULL}};
  const double values[2] = {1.0, 2.0};
  double start = now_s();
  cn_tensor *x = cn_tensor_data(g, "x", &dims, values, 2), *y = x;
  for (int i = 0; i < n && y; i++) y = cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){y, x});
  CHECK_MSG(y != NULL, "%s", cn_ctx_error(ctx));
  double out[2] = {0, 0};
  if (y && run_forward(ctx, g, y, "chain"))
    CHECK(cn_node_get_values(cn_tensor_value(y), false, out, 2) == CN_OK);
  CHECK_NEAR(out[0], (double)(n + 1), 0);
  CHECK_NEAR(out[1], 2.0 * (n + 1), 0);
  double seconds = now_s() - start;
  CHECK_MSG(seconds < WALL_CEILING_S, "a chain of %d additions took %.1f s", n, seconds);
  size_t bytes = ctx->arena.total_bytes;
  cn_ctx_destroy(ctx);
  return bytes;
}

/* An MLP of `layers` dense layers of width W over a batch of B examples with two features:
 * h_0 = x, h_i = relu(w_i * h_{i-1} + b_i), the last layer without relu; loss = sum of the
 * outputs. The weights are given (not random) so that the values stay away from 0: each layer
 * keeps the activations of the same order. Checked against the same forward and backward passes
 * written out in C: the loss, and the gradients of the first and the last biases (the last one is
 * the batch size). */
enum { W = 4, B = 3 };

static double weight(int layer, int o, int i) {
  return (o == i ? 0.8 : 0.05) + 0.01 * ((layer + o + 2 * i) % 5);
}

static double bias(int layer, int o) {
  return 0.01 * ((layer * 3 + o) % 7) - 0.02;
}

static size_t mlp(int layers) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  const int64_t batch = B, features = 2, width = W, one = 1;
  const double x_values[B * 2] = {0.5, -1.0, 1.5, 2.0, -0.25, 0.75};
  const cn_dims x_dims = {{1, &batch, NULL}, CN_AXES_NONE, {1, &features, NULL}};
  double start = now_s();
  cn_tensor *h = cn_tensor_data(g, "x", &x_dims, x_values, B * 2), *last_bias = NULL;
  cn_tensor *first_bias = NULL;
  double *w_all = malloc(sizeof(double) * (size_t)layers * W * W);
  double *b_all = malloc(sizeof(double) * (size_t)layers * W);
  CHECK(w_all && b_all);
  for (int l = 0; l < layers && h && w_all && b_all; l++) {
    int64_t in = l == 0 ? features : width, out = l == layers - 1 ? one : width;
    double *w = w_all + (size_t)l * W * W, *b = b_all + (size_t)l * W;
    for (int o = 0; o < out; o++) {
      b[o] = bias(l, o);
      for (int i = 0; i < in; i++) w[o * in + i] = weight(l, o, i);
    }
    const cn_dims w_dims = {CN_AXES_NONE, {1, &in, NULL}, {1, &out, NULL}};
    const cn_dims b_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &out, NULL}};
    char label[32];
    snprintf(label, sizeof label, "w%d", l);
    cn_tensor *wt = cn_tensor_param(g, label, &w_dims,
                                    cn_tensor_data(g, "w_init", &w_dims, w, (size_t)(in * out)));
    snprintf(label, sizeof label, "b%d", l);
    cn_tensor *bt =
        cn_tensor_param(g, label, &b_dims, cn_tensor_data(g, "b_init", &b_dims, b, (size_t)out));
    cn_tensor *z = wt && bt ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, wt, h) : NULL;
    z = z ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){z, bt}) : NULL;
    h = z && l < layers - 1 ? cn_tensor_apply(g, CN_OP_RELU, 1, &z) : z;
    last_bias = bt;
    if (l == 0) first_bias = bt;
  }
  cn_tensor *loss = h ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &h) : NULL;
  CHECK_MSG(loss != NULL, "%s", cn_ctx_error(ctx));
  cn_asgn *init = loss ? cn_graph_init_params(g, loss) : NULL;
  cn_asgn *step = loss ? cn_graph_grad_update(g, loss) : NULL;
  cn_routine *ri = init ? cn_routine_compile(ctx, init, CN_BACKEND_INTERP, "mlp_init") : NULL;
  cn_routine *rs = step ? cn_routine_compile(ctx, step, CN_BACKEND_INTERP, "mlp_backprop") : NULL;
  bool ran = ri && rs && cn_routine_run(ri) == CN_OK && cn_routine_run(rs) == CN_OK;
  CHECK_MSG(ran, "%s", cn_ctx_error(ctx));
  double got = 0, grad_last = 0, grad_first[W] = {0};
  if (ran) {
    CHECK(cn_node_get_values(cn_tensor_value(loss), false, &got, 1) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_grad(last_bias), false, &grad_last, 1) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_grad(first_bias), false, grad_first, W) == CN_OK);
  }
  /* the same network, by hand: forward keeping the pre-activations, then backward */
  double expected = 0, expected_first[W] = {0};
  double *pre = malloc(sizeof(double) * (size_t)layers * W);
  CHECK(pre != NULL);
  for (int e = 0; e < B && w_all && b_all && pre; e++) {
    double a[W] = {x_values[2 * e], x_values[2 * e + 1]}, next_a[W];
    for (int l = 0; l < layers; l++) {
      int in = l == 0 ? 2 : W, out = l == layers - 1 ? 1 : W;
      const double *w = w_all + (size_t)l * W * W, *b = b_all + (size_t)l * W;
      for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++) s += w[o * in + i] * a[i];
        pre[l * W + o] = s;
        next_a[o] = l < layers - 1 && s < 0 ? 0 : s;
      }
      for (int o = 0; o < out; o++) a[o] = next_a[o];
    }
    expected += a[0];
    double ga[W] = {1}, gs[W];
    for (int l = layers - 1; l >= 0; l--) {
      int in = l == 0 ? 2 : W, out = l == layers - 1 ? 1 : W;
      const double *w = w_all + (size_t)l * W * W;
      for (int o = 0; o < out; o++) gs[o] = l < layers - 1 && pre[l * W + o] <= 0 ? 0 : ga[o];
      if (l == 0)
        for (int o = 0; o < out; o++) expected_first[o] += gs[o];
      for (int i = 0; i < in; i++) {
        ga[i] = 0;
        for (int o = 0; o < out; o++) ga[i] += w[o * in + i] * gs[o];
      }
    }
  }
  free(pre);
  CHECK(expected > 1.0); /* the layers keep the signal */
  CHECK_NEAR(got, expected, 1e-9 * expected);
  CHECK_NEAR(grad_last, (double)B, 0);
  for (int o = 0; o < W; o++) {
    CHECK(expected_first[o] > 0.1);
    CHECK_NEAR(grad_first[o], expected_first[o], 1e-9 * expected_first[o]);
  }
  double seconds = now_s() - start;
  CHECK_MSG(seconds < WALL_CEILING_S, "an MLP of %d layers took %.1f s", layers, seconds);
  free(w_all);
  free(b_all);
  cn_routine_free(ri);
  cn_routine_free(rs);
  size_t bytes = ctx->arena.total_bytes;
  cn_ctx_destroy(ctx);
  return bytes;
}

/* The arena of the large model holds at most 1.5 times the small model's bytes per operation:
 * quadratic metadata would hold 8 times as much at 8 times the size. */
static void check_linear(const char *what, size_t small, int n_small, size_t large, int n_large) {
  double per_small = (double)small / n_small, per_large = (double)large / n_large;
  CHECK_MSG(per_large <= 1.5 * per_small,
            "%s: %.0f arena bytes per operation at %d, %.0f at %d: not linear", what, per_small,
            n_small, per_large, n_large);
}

/* The arena after a script's training loop of `steps` steps (the counter printed last must
 * read `steps`). */
static size_t loop_arena(int steps) {
  char script[1024];
  snprintf(script, sizeof script,
           "let x = [1.0; 2.0]\n"
           "let loss = ({w = 0.5} *. x) ++ \"...|... => 0\"\n"
           "let%%cd bump = {counter} =+ 1\n"
           "for i = 1 to %d do\n"
           "  backprop loss\n"
           "  sgd loss ~learning_rate:(0.01 /. (1 + !@i)) ~momentum:0.5\n"
           "  run bump\n"
           "  print counter\n"
           "  print w.grad\n"
           "done\n"
           "print counter\n",
           steps);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *text = NULL;
  size_t len = 0;
  FILE *sink = open_memstream(&text, &len);
  CHECK(sink != NULL);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .json = true, .out = sink};
  CHECK_MSG(sink && cn_notation_run(g, "loop.cnl", script, &opts) == CN_OK, "%s",
            cn_ctx_error(ctx));
  if (sink) fclose(sink);
  char last[64];
  snprintf(last, sizeof last, "\"values\": [%d]}\n", steps);
  CHECK_MSG(text && len >= strlen(last) && strcmp(text + len - strlen(last), last) == 0,
            "the last line does not end with %s", last);
  free(text);
  size_t bytes = ctx->arena.total_bytes;
  cn_ctx_destroy(ctx);
  return bytes;
}

int main(void) {
  size_t loop_short = loop_arena(20), loop_long = loop_arena(2000);
  CHECK_MSG(loop_long == loop_short, "arena after 20 steps: %zu bytes, after 2000: %zu", loop_short,
            loop_long);
  size_t chain_small = chain(250), chain_large = chain(2000);
  check_linear("chain", chain_small, 250, chain_large, 2000);
  size_t mlp_small = mlp(25), mlp_large = mlp(200);
  check_linear("mlp", mlp_small, 25, mlp_large, 200);
  CHECK_DONE();
}
