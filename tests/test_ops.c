/* Every primitive op in every precision it supports, on edge values (0, -0, negatives, NaN,
 * infinities, extremes), run pointwise on the interpreter and on generated C and compared cell by
 * cell; then conversions between precisions on load and store. The reference semantics of single
 * values are checked in test_numeric; here the two backends must agree with each other.
 *
 * Every cell must agree bit for bit (a NaN with any NaN): the interpreter evaluates the ops of
 * single, half, bfloat16 and fp8 in float as generated C does (until issue 29 it computed them
 * in double, and log, sin, pow... of a float differed by an ulp). */
#include "ops_cases.h"

/* Runs the routine on both backends and returns the cells of `outs` after each run (caller
 * frees cells[b][k]). */
static void run_both(cn_ctx *ctx, cn_asgn *asgn, int count, cn_node *const *outs,
                     unsigned char **cells[2]) {
  for (int b = 0; b < 2; b++) {
    cells[b] = calloc((size_t)count, sizeof(unsigned char *));
    cn_routine *r = cn_routine_compile(ctx, asgn, b ? CN_BACKEND_C : CN_BACKEND_INTERP, "ops");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
    for (int k = 0; k < count; k++) {
      size_t n = (size_t)cn_node_numel(outs[k]);
      cells[b][k] = malloc(n * cn_prec_bytes(cn_node_prec(outs[k])));
      CHECK(cn_node_get_cells(outs[k], false, cells[b][k], n) == CN_OK);
    }
    cn_routine_free(r);
  }
}

/* Every op supporting prec, all in one routine; returns how many ops were checked. */
static int check_ops_in(cn_prec prec) {
  cn_ctx *ctx = cn_ctx_create();
  op_case cases[CN_OP_COUNT];
  cn_node *outs[CN_OP_COUNT];
  int count;
  cn_asgn *all = build_all_ops(ctx, prec, cases, outs, &count);
  unsigned char **cells[2];
  run_both(ctx, all, count, outs, cells);
  for (int k = 0; k < count; k++) {
    int64_t n = cn_node_numel(outs[k]);
    size_t bytes = cn_prec_bytes(prec);
    for (int64_t c = 0; c < n; c++) {
      const void *ci = cells[0][k] + (size_t)c * bytes, *cc = cells[1][k] + (size_t)c * bytes;
      CHECK_MSG(same_cell(prec, ci, cc), "%s on %s: cell %lld: interp %.17g, C %.17g",
                cn_op_name(cases[k].op), cn_prec_name(prec), (long long)c,
                cn_prec_cell_to_double(prec, ci), cn_prec_cell_to_double(prec, cc));
    }
    free(cells[0][k]);
    free(cells[1][k]);
  }
  free(cells[0]);
  free(cells[1]);
  cn_ctx_destroy(ctx);
  return count;
}

/* Loads and stores across precisions: for every target, one routine with out_from =: id in_from
 * for every source precision. A conversion is one rounding of one value: both backends agree bit
 * for bit (NaN payloads aside). */
static void check_conversions_to(cn_prec to) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t n = NVALS;
  cn_node *outs[CN_PREC_COUNT];
  unsigned char **cells[2];
  run_both(ctx, build_conversions(ctx, to, outs), CN_PREC_COUNT, outs, cells);
  for (int from = 0; from < CN_PREC_COUNT; from++) {
    size_t bytes = cn_prec_bytes(to);
    for (int64_t c = 0; c < n; c++)
      CHECK_MSG(
          same_cell(to, cells[0][from] + (size_t)c * bytes, cells[1][from] + (size_t)c * bytes),
          "%s -> %s: cell %lld differs", cn_prec_name((cn_prec)from), cn_prec_name(to),
          (long long)c);
    free(cells[0][from]);
    free(cells[1][from]);
  }
  free(cells[0]);
  free(cells[1]);
  cn_ctx_destroy(ctx);
}

/* Multi-op expressions (issue 30): the gradient rules of tanh (g * (1 - v * v)), gelu,
 * sigmoid, softplus and pointpow, each a few ops, and the chains of pointwise nodes between them
 * that the schedule inlines, over 1000 single cells of x in [-4, 4]: forward and backward on
 * the interpreter and on generated C give the same bits in every cell of the loss and of x's
 * gradient. */
static void check_gradient_rules(void) {
  enum { N = 1000 };
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const int64_t n = N;
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, NULL}};
  double vals[N];
  uint64_t state = 12345;
  for (int i = 0; i < N; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    vals[i] = (double)(state >> 11) / 9007199254740992.0 * 8 - 4;
  }
  cn_tensor *x = cn_tensor_param(g, "x", &d, cn_tensor_data(g, "x0", &d, vals, N));
  cn_tensor *tanh_x = cn_tensor_apply(g, CN_OP_TANH, 1, &x);
  cn_tensor *gelu_x = cn_tensor_apply(g, CN_OP_GELU, 1, &x);
  cn_tensor *parts[4] = {cn_tensor_sigmoid(g, tanh_x), cn_tensor_softplus(g, gelu_x),
                         cn_tensor_pointpow(g, tanh_x, 3), gelu_x};
  cn_tensor *y = parts[0];
  for (int k = 1; k < 4; k++) {
    cn_tensor *pair[2] = {y, parts[k]};
    y = cn_tensor_apply(g, k % 2 ? CN_OP_MUL : CN_OP_ADD, 2, pair);
  }
  cn_tensor *loss = cn_tensor_sum(g, y);
  cn_asgn *code = loss ? cn_graph_grad_update(g, loss) : NULL;
  CHECK_MSG(code != NULL, "%s", cn_ctx_error(ctx));
  cn_node *outs[2] = {code ? cn_tensor_value(loss) : NULL, code ? cn_tensor_grad(x) : NULL};
  if (!code || !outs[0] || !outs[1]) {
    cn_ctx_destroy(ctx);
    return;
  }
  unsigned char **cells[2];
  run_both(ctx, code, 2, outs, cells);
  for (int k = 0; k < 2; k++) {
    int64_t cells_k = cn_node_numel(outs[k]);
    int differ = 0;
    for (int64_t i = 0; i < cells_k; i++)
      differ += memcmp(cells[0][k] + i * 4, cells[1][k] + i * 4, 4) != 0;
    CHECK_MSG(differ == 0, "%s: %d of %lld cells differ between the backends",
              k ? "x.grad" : "loss", differ, (long long)cells_k);
  }
  for (int b = 0; b < 2; b++) {
    for (int k = 0; k < 2; k++) free(cells[b][k]);
    free(cells[b]);
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  check_gradient_rules();
  int checked = 0;
  for (int prec = 0; prec < CN_PREC_COUNT; prec++) checked += check_ops_in((cn_prec)prec);
  /* The table has 43 ops; most support the 11 float and integer precisions: make sure the loop
   * did visit the table rather than nothing. */
  CHECK(checked > 150);
  for (int to = 0; to < CN_PREC_COUNT; to++) check_conversions_to((cn_prec)to);
  CHECK_DONE();
}
