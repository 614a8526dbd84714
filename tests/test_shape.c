/* Shape inference without einsum specs: unification, broadcasting inequalities, compose,
 * transpose, batch slice, terminals (Exact, Total_elems), finalization (closing upward and to the
 * operands' axes, guessing, parameters refusing to be guessed), rank cycles, label mismatches and
 * the wording of conflict messages. Expected shapes are derived by hand in each comment. */
#include "check.h"
#include "shape_check.h"

#include <stdlib.h>

static const char *str(cn_shape_env *env, cn_shape *sh) {
  return cn_shape_str(env, sh);
}

static cn_shape_op *op2(cn_shape_env *env, cn_shape_kind kind, cn_shape *lhs, cn_shape *a,
                        cn_shape *b) {
  cn_shape *rhs[2] = {a, b};
  return cn_shape_add_op(env, kind, NULL, lhs, rhs, b ? 2 : a ? 1 : 0);
}

static void test_matrix_chain(void) {
  /* h = w1 * x, y = w2 * h: x is 7|->3 data; w1 gives only its output 4, w2 only its output 2.
   * Compose relates w1's input to x's output (3) by the broadcasting inequality
   * (contraction-is-emergent), and w2's input to h's output, which is w1's output (4): online w1's
   * input row stays open (x's output could broadcast into more axes); finalization closes it upward
   * to x's 3, so the hidden size is resolved from use. Batches: h ⊑ 7 and ⊑ the parameters' empty
   * batch, so h and y are 7|->4 and 7|->2. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "7|->3");
  cn_shape *w1 = mk(env, "w1", true, "|?->4");
  cn_shape *w2 = mk(env, "w2", true, "|?->2");
  cn_shape *h = mk(env, "h", false, "?|?->?"), *y = mk(env, "y", false, "?|?->?");
  CHECK(op2(env, CN_SL_COMPOSE, h, w1, x) != NULL);
  CHECK(op2(env, CN_SL_COMPOSE, y, w2, h) != NULL);
  CHECK_STR(str(env, w1), "|...->4");
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, w1), "|3->4");
  CHECK_STR(str(env, w2), "|4->2");
  CHECK_STR(str(env, h), "7|->4");
  CHECK_STR(str(env, y), "7|->2");
  int64_t d[8];
  CHECK_INT(cn_shape_dims(env, y, d, 8), 2);
  CHECK_INT(d[0], 7);
  CHECK_INT(d[1], 2);
  CHECK_INT(cn_shape_env_n_ops(env), 2);
  const cn_shape_op *op = cn_shape_env_op(env, 0);
  CHECK_INT(op->n_constraints, 5);
  CHECK_INT(op->constraints[0].kind, CN_SC_ROW_INEQ);
  CHECK_INT(op->constraints[0].a.slot, 1);
  CHECK_INT(op->constraints[0].a.row, CN_ROW_INPUT);
  CHECK_INT(op->constraints[0].b.slot, 2);
  CHECK_INT(op->constraints[0].b.row, CN_ROW_OUTPUT);
  cn_ctx_destroy(ctx);
}

static void test_scalar_broadcast(void) {
  /* r = s + m with s a number (output 1) and m |3->2: the result takes m's axes, the scalar's
   * size-1 axis broadcasts: r is |3->2; memory order output then input: 2,3. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *s = mk(env, "s", false, "|->1");
  cn_shape *m = mk(env, "m", false, "|3->2");
  cn_shape *r = mk(env, "r", false, "?|?->?");
  CHECK(op2(env, CN_SL_POINTWISE, r, s, m) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, r), "|3->2");
  int64_t d[4];
  CHECK_INT(cn_shape_dims(env, r, d, 4), 2);
  CHECK_INT(d[0], 2);
  CHECK_INT(d[1], 3);
  cn_ctx_destroy(ctx);
}

static void test_ones_vector_and_bias(void) {
  /* r = m * ones: ones's output meets m's input (5) — the ones-vector is sized by use; its other
   * rows are unconstrained and close to no axes. b is a bias parameter with nothing given:
   * z = r + b makes b close upward to z's axes: |->3. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *m = mk(env, "m", false, "|5->3");
  cn_shape *ones = mk(env, "ones", false, "?|?->?");
  cn_shape *r = mk(env, "r", false, "?|?->?");
  cn_shape *b = mk(env, "b", true, "?|?->?");
  cn_shape *z = mk(env, "z", false, "?|?->?");
  CHECK(op2(env, CN_SL_COMPOSE, r, m, ones) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, z, r, b) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, ones), "|->5");
  CHECK_STR(str(env, r), "|->3");
  CHECK_STR(str(env, b), "|->3");
  CHECK_STR(str(env, z), "|->3");
  cn_ctx_destroy(ctx);
}

static void test_leaf_lub(void) {
  /* a leaf used as an operand twice: p + x with x |->4,3 and p + y with y |->2,3; p closes to
   * the least upper bound of its uses: both results are 2 axes, the 3s agree and 4 vs 2 only
   * both broadcast from 1: p is |->1,3 (below |->3 in the order: more axes, as specific). */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *p = mk(env, "p", false, "?|?->?");
  cn_shape *x = mk(env, "x", false, "|->4,3"), *y = mk(env, "y", false, "|->2,3");
  cn_shape *r1 = mk(env, "r1", false, "?|?->?"), *r2 = mk(env, "r2", false, "?|?->?");
  CHECK(op2(env, CN_SL_POINTWISE, r1, p, x) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, r2, p, y) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, r1), "|->4,3");
  CHECK_STR(str(env, r2), "|->2,3");
  CHECK_STR(str(env, p), "|->1,3");
  /* q's one axis feeds results of sizes 5 and 3: only 1 broadcasts to both */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  cn_shape *q = mk(env, "q", false, "|->0");
  r1 = mk(env, "r1", false, "|->5");
  r2 = mk(env, "r2", false, "|->3");
  CHECK(op2(env, CN_SL_POINTWISE, r1, q, NULL) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, r2, q, NULL) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx2));
  CHECK_STR(str(env, q), "|->1");
  /* a result of size 1 forces its operand to 1: it cannot broadcast down */
  cn_shape *q2 = mk(env, "q2", false, "|->0"), *r3 = mk(env, "r3", false, "|->1");
  CHECK(op2(env, CN_SL_POINTWISE, r3, q2, NULL) != NULL);
  CHECK_STR(str(env, q2), "|->1");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_transpose_and_slice(void) {
  /* t = transpose(a) with a 2|3->4: input and output swap: 2|4->3. s = slice(b) with b 5,6|7->8
   * drops the leftmost batch axis: 6|7->8 (online: equalities). */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *a = mk(env, "a", false, "2|3->4");
  cn_shape *t = mk(env, "t", false, "?|?->?");
  CHECK(op2(env, CN_SL_TRANSPOSE, t, a, NULL) != NULL);
  cn_shape *b = mk(env, "b", false, "5,6|7->8");
  cn_shape *s = mk(env, "s", false, "?|?->?");
  CHECK(op2(env, CN_SL_BATCH_SLICE, s, b, NULL) != NULL);
  CHECK_STR(str(env, s), "6|7->8");
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, t), "2|4->3");
  /* the other direction: a slice of a known result determines all but the sliced axis */
  cn_shape *c = mk(env, "c", false, "?|?->?");
  cn_shape *e = mk(env, "e", false, "9|->1");
  CHECK(op2(env, CN_SL_BATCH_SLICE, e, c, NULL) != NULL);
  CHECK_HAS(str(env, c), ",9|->1");
  cn_ctx_destroy(ctx);
}

static void test_undetermined_param(void) {
  /* y = w * x: w's input meets x's output (3), but w's single output axis (size left open) is
   * used by nothing that fixes it: the parameter refuses to be guessed. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *w = mk(env, "w", true, "|3->0");
  cn_shape *x = mk(env, "x", false, "|->3");
  cn_shape *y = mk(env, "y", false, "?|?->?");
  CHECK(op2(env, CN_SL_COMPOSE, y, w, x) != NULL);
  CHECK_INT(cn_shape_finalize(env), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "dimension 0 of the output row of parameter \"w\" (#1) is not "
                               "determined: give it");
  /* a parameter nothing uses: the number of its input axes is not determined either */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  w = mk(env, "w", true, "?|?->3");
  CHECK_INT(cn_shape_finalize(env), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx2), "the number of input axes of parameter \"w\" (#1) is not "
                                "determined");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_conflict_messages(void) {
  /* w is |4->2, x is |->3: compose relates w's input (4) to x's output (3) by broadcasting,
   * which only a size 1 could satisfy. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *w = mk(env, "w", false, "|4->2");
  cn_shape *x = mk(env, "x", false, "|->3");
  cn_shape *y = mk(env, "y", false, "?|?->?");
  CHECK(op2(env, CN_SL_COMPOSE, y, w, x) == NULL);
  const char *msg = cn_ctx_error(ctx);
  CHECK_STR(msg, "shape conflict in compose (operation #1 computing \"y\" (#3)): sizes differ "
                 "and the operand's is not 1: input row of \"w\" (#1) axis 0 (size 4) vs output "
                 "row of \"x\" (#2) axis 0 "
                 "(size 3)");
  /* pointwise: a 2,5 against 2,6 in the output row: the result takes 5 from a, then 6 fails */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  cn_shape *a = mk(env, "a", false, "|->2,5"), *b = mk(env, "b", false, "|->2,6");
  cn_shape *r = mk(env, "r", false, "|->0,0");
  CHECK(op2(env, CN_SL_POINTWISE, r, a, b) == NULL);
  msg = cn_ctx_error(ctx2);
  CHECK_STR(msg, "shape conflict in pointwise (operation #1 computing \"r\" (#3)): sizes differ "
                 "and the operand's is not 1: output row of \"r\" (#3) axis 1 (size 5) vs output "
                 "row of \"b\" (#2) axis 1 (size 6)");
  /* a result with fewer axes than an operand */
  cn_ctx *ctx3 = cn_ctx_create();
  env = cn_shape_env_new(ctx3);
  a = mk(env, "a", false, "|->2,5");
  r = mk(env, "r", false, "|->5");
  CHECK(op2(env, CN_SL_POINTWISE, r, a, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx3),
            "shape conflict in pointwise (operation #1 computing \"r\" (#2)): the result has "
            "fewer axes than the operand it broadcasts (1 axes vs 2 axes): output row of \"r\" "
            "(#2) vs output row of \"a\" (#1)");
  cn_ctx_destroy(ctx3);
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_labels(void) {
  /* x has output 3:rgb, y 3:xyz: identified by pointwise addition, the labels must agree. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "|->3:rgb"), *y = mk(env, "y", false, "|->3:xyz");
  cn_shape *z = mk(env, "z", false, "|->0");
  CHECK(op2(env, CN_SL_POINTWISE, z, x, y) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "axis labels differ ('rgb' vs 'xyz')");
  CHECK_HAS(cn_ctx_error(ctx), "\"y\" (#2)");
  /* the same label agrees, and the result carries it */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  x = mk(env, "x", false, "|->3:rgb");
  y = mk(env, "y", false, "|->3:rgb");
  z = mk(env, "z", false, "?|?->?");
  CHECK(op2(env, CN_SL_POINTWISE, z, x, y) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, z), "|->3:rgb");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_rank_cycles(void) {
  /* a = slice(a): a's batch row would be one axis longer than itself. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *a = mk(env, "a", false, "?|?->?");
  CHECK(op2(env, CN_SL_BATCH_SLICE, a, a, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "rank cycle");
  CHECK_HAS(cn_ctx_error(ctx), "batch slice");
  /* through an inequality: t = slice(s) then t = s + 1... as t ⊑ s while s.batch = [d] ++
   * t.batch... here s = slice(t) makes t.batch = [d] ++ s.batch, and s = t + s2 asks s ⊑ t. */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  cn_shape *s = mk(env, "s", false, "?|?->?"), *t = mk(env, "t", false, "?|?->?");
  CHECK(op2(env, CN_SL_BATCH_SLICE, s, t, NULL) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, s, t, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx2), "rank cycle");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_terminals(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  /* Exact: data with known dims pins an inferred shape */
  cn_shape *d = mk(env, "d", false, "?|?->?");
  cn_shape_args args = {0};
  int64_t batch[1] = {4}, out[2] = {2, 3};
  args.n_dims[CN_ROW_BATCH] = 1;
  args.dims[CN_ROW_BATCH] = batch;
  args.n_dims[CN_ROW_OUTPUT] = 2;
  args.dims[CN_ROW_OUTPUT] = out;
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &args, d, NULL, 0) != NULL);
  CHECK_STR(str(env, d), "4|->2,3");
  /* Exact against a conflicting given shape */
  cn_shape *e = mk(env, "e", false, "4|->2,5");
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &args, e, NULL, 0) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"e\" (#2) axis 1 (size 5)");
  /* Reshape: 24 elements with batch 2: the output row closes to one axis of 12 */
  cn_shape *r = mk(env, "r", false, "?|?->?");
  cn_shape_args rs = {0};
  int64_t b2[1] = {2};
  rs.n_dims[CN_ROW_BATCH] = 1;
  rs.dims[CN_ROW_BATCH] = b2;
  rs.total = 24;
  CHECK(cn_shape_add_op(env, CN_SL_RESHAPE, &rs, r, NULL, 0) != NULL);
  /* reshape into 3,? solves the open axis online: 24 / 2 / 3 = 4 */
  cn_shape *r2 = mk(env, "r2", false, "?|?->3,0");
  CHECK(cn_shape_add_op(env, CN_SL_RESHAPE, &rs, r2, NULL, 0) != NULL);
  CHECK_STR(str(env, r2), "2|->3,4");
  /* 24 elements cannot be 2 x 5 x ? */
  cn_shape *r3 = mk(env, "r3", false, "?|?->5,0");
  CHECK(cn_shape_add_op(env, CN_SL_RESHAPE, &rs, r3, NULL, 0) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "must hold 12 elements");
  cn_ctx_clear_error(ctx);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, r), "2|->12");
  cn_ctx_destroy(ctx);
}

static void test_total_elems_both_sides(void) {
  /* 10 uint4x32 cells converted at single precision: 4 values per cell -> 40 outputs. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape_args conv = {0};
  conv.coeff = 4;
  cn_shape *u = mk(env, "u", false, "|->10"), *f = mk(env, "f", false, "?|?->?");
  cn_shape *rhs[1] = {u};
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &conv, f, rhs, 1) != NULL);
  /* the other side: 40 outputs requested, the cells are inferred: 10 */
  cn_shape *u2 = mk(env, "u2", false, "|->?"), *f2 = mk(env, "f2", false, "|->40");
  rhs[0] = u2;
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &conv, f2, rhs, 1) != NULL);
  /* one open axis on the result side is solved online: 5,? holds 40 -> 8 */
  cn_shape *f3 = mk(env, "f3", false, "|->5,0");
  rhs[0] = u;
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &conv, f3, rhs, 1) != NULL);
  CHECK_STR(str(env, f3), "|->5,8");
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, f), "|->40");
  CHECK_STR(str(env, u2), "|->10");
  /* 42 outputs are not a multiple of 4 */
  cn_shape *u4 = mk(env, "u4", false, "|->?"), *f4 = mk(env, "f4", false, "|->42");
  rhs[0] = u4;
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &conv, f4, rhs, 1) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "42 elements are not a multiple of 4");
  cn_ctx_destroy(ctx);
}

static void test_rollback(void) {
  /* s = slice(b) with s's output given as 5 and b 5,6|7->8: the batch (6) and input (7) rows are
   * solved before the outputs conflict (5 vs 8); the failed operation is undone entirely. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *s = mk(env, "s", false, "?|?->5"), *b = mk(env, "b", false, "5,6|7->8");
  CHECK_STR(str(env, s), "...|...->5");
  CHECK(op2(env, CN_SL_BATCH_SLICE, s, b, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "shape conflict in batch slice (operation #1 computing \"s\" "
                               "(#1)): sizes differ: output row of \"s\" (#1) axis 0 (size 5) vs "
                               "output row of \"b\" (#2) axis 0 (size 8)");
  CHECK_STR(str(env, s), "...|...->5");
  CHECK_INT(cn_shape_env_n_ops(env), 0);
  cn_ctx_clear_error(ctx);
  /* a compatible slice: c is 9,6|7->5: s is 6|7->5, and the recorded operation is this one */
  cn_shape *c = mk(env, "c", false, "9,6|7->5");
  CHECK(op2(env, CN_SL_BATCH_SLICE, s, c, NULL) != NULL);
  CHECK_INT(cn_shape_env_n_ops(env), 1);
  CHECK(cn_shape_env_op(env, 0)->rhs[0] == c);
  CHECK_STR(str(env, s), "6|7->5");

  /* pending constraints of earlier operations survive a failure that retried them: r = p + x
   * leaves r ⊑ x and r ⊑ p open; data pinning r to 4,5 binds r, then retrying r ⊑ x (4,3) fails
   * in operation #1's constraint. Undone, the right data (4,3) closes p upward to |->4,3. */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  cn_shape *p = mk(env, "p", false, "?|?->?"), *x = mk(env, "x", false, "|->4,3");
  cn_shape *r = mk(env, "r", false, "?|?->?");
  CHECK(op2(env, CN_SL_POINTWISE, r, p, x) != NULL);
  cn_shape_args data = {0};
  int64_t bad[2] = {4, 5}, good[2] = {4, 3};
  data.n_dims[CN_ROW_OUTPUT] = 2;
  data.dims[CN_ROW_OUTPUT] = bad;
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &data, r, NULL, 0) == NULL);
  CHECK_STR(cn_ctx_error(ctx2), "shape conflict in pointwise (operation #1 computing \"r\" (#3)): "
                                "sizes differ and the operand's is not 1: output row of \"r\" (#3) "
                                "axis 1 (size 5) vs output row of \"x\" (#2) axis 1 (size 3)");
  CHECK_STR(str(env, r), "...|...->...");
  CHECK_INT(cn_shape_env_n_ops(env), 1);
  cn_ctx_clear_error(ctx2);
  data.dims[CN_ROW_OUTPUT] = good;
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &data, r, NULL, 0) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx2));
  CHECK_STR(str(env, r), "|->4,3");
  CHECK_STR(str(env, p), "|->4,3");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

/* Allocation failures: the n-th allocation fails; a failed operation is retried with allocation
 * working again, which succeeds only if the failure undid everything (rollback); finalization may
 * fail with CN_ERR_NOMEM. Whenever the sweep completes, the shapes are those derived by hand:
 * h = w1 * x is 7|->4 (w1 |3->4), z = h + b closes the parameter b upward to |->4, the
 * conversion of 10 cells at coefficient 4 is |->40 and the reshape of 24 with batch 2 is 2|->12. */
static cn_shape *retry_shape(cn_ctx *ctx, cn_shape_env *env, const char *label, bool param,
                             const char *text, int *retries) {
  cn_shape *sh = mk(env, label, param, text);
  if (sh || ctx->status != CN_ERR_NOMEM) return sh;
  (*retries)++;
  ctx->fail_alloc_countdown = 0;
  cn_ctx_clear_error(ctx);
  return mk(env, label, param, text);
}

static bool retry_op(cn_ctx *ctx, cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                     cn_shape *lhs, cn_shape *a, cn_shape *b, int *retries) {
  cn_shape *rhs[2] = {a, b};
  int n = b ? 2 : a ? 1 : 0;
  if (cn_shape_add_op(env, kind, args, lhs, rhs, n)) return true;
  CHECK_MSG(ctx->status == CN_ERR_NOMEM, "%s", cn_ctx_error(ctx));
  (*retries)++;
  ctx->fail_alloc_countdown = 0;
  cn_ctx_clear_error(ctx);
  return cn_shape_add_op(env, kind, args, lhs, rhs, n) != NULL;
}

static void test_alloc_failures(void) {
  int completed = 0, finalize_failures = 0, retries = 0;
  for (long n = 1; n < 600; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    cn_shape_env *env = cn_shape_env_new(ctx);
    if (!env) {
      CHECK_INT(ctx->status, CN_ERR_NOMEM);
      cn_ctx_destroy(ctx);
      continue;
    }
    cn_shape *x = retry_shape(ctx, env, "x", false, "7|->3", &retries);
    cn_shape *w1 = retry_shape(ctx, env, "w1", true, "|?->4", &retries);
    cn_shape *h = retry_shape(ctx, env, "h", false, "?|?->?", &retries);
    cn_shape *b = retry_shape(ctx, env, "b", true, "?|?->?", &retries);
    cn_shape *z = retry_shape(ctx, env, "z", false, "?|?->?", &retries);
    cn_shape *u = retry_shape(ctx, env, "u", false, "|->10", &retries);
    cn_shape *f = retry_shape(ctx, env, "f", false, "?|?->?", &retries);
    cn_shape *r = retry_shape(ctx, env, "r", false, "?|?->?", &retries);
    bool ok = x && w1 && h && b && z && u && f && r;
    CHECK(ok);
    cn_shape_args conv = {0}, rs = {0};
    conv.coeff = 4;
    int64_t b2[1] = {2};
    rs.n_dims[CN_ROW_BATCH] = 1;
    rs.dims[CN_ROW_BATCH] = b2;
    rs.total = 24;
    ok = ok && retry_op(ctx, env, CN_SL_COMPOSE, NULL, h, w1, x, &retries) &&
         retry_op(ctx, env, CN_SL_POINTWISE, NULL, z, h, b, &retries) &&
         retry_op(ctx, env, CN_SL_VEC_CONVERT, &conv, f, u, NULL, &retries) &&
         retry_op(ctx, env, CN_SL_RESHAPE, &rs, r, NULL, NULL, &retries);
    CHECK(ok);
    if (ok && cn_shape_finalize(env) != CN_OK) {
      CHECK_MSG(ctx->status == CN_ERR_NOMEM, "%s", cn_ctx_error(ctx));
      finalize_failures++;
    } else if (ok) {
      completed++;
      ctx->fail_alloc_countdown = 0;
      CHECK_STR(str(env, w1), "|3->4");
      CHECK_STR(str(env, h), "7|->4");
      CHECK_STR(str(env, b), "|->4");
      CHECK_STR(str(env, z), "7|->4");
      CHECK_STR(str(env, f), "|->40");
      CHECK_STR(str(env, r), "2|->12");
    }
    cn_ctx_destroy(ctx);
  }
  /* the sweep reached past the last allocation, and went through every stage */
  CHECK(completed > 0);
  CHECK(finalize_failures > 0);
  CHECK(retries > 10);
}

static void test_print_unsolved(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "?|2->0,3:rgb");
  CHECK_STR(str(env, x), "...|2->?,3:rgb");
  int64_t d[4];
  CHECK_INT(cn_shape_dims(env, x, d, 4), -1);
  CHECK_HAS(cn_ctx_error(ctx), "not solved");
  cn_ctx_destroy(ctx);
}

static void test_unit_row_through_open_operand(void) {
  /* a = f(x), b = g(a), r = b + 0 with x 1|->3 (its batch row is a unit, a number's broadcast
   * axis) and r's rows given as 1|->3 (read elsewhere with x's axes: a gather's guard), 0 a
   * rank-free constant. b sits between a, whose row is still open, and its use r: closing b upward
   * may drop r's unit axis only when nothing above b needs it, but a broadcasts x, so a and then b
   * and r need at least x's one batch axis (a result never has fewer axes than its operand).
   * Every result is 1|->3. Before the fix b closed to no batch axes, and propagation then failed
   * on a (0 axes vs 1 axes). */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "1|->3");
  cn_shape *zero = mk(env, "zero", false, "|->");
  cn_shape *a = mk(env, "a", false, "?|?->?"), *b = mk(env, "b", false, "?|?->?");
  cn_shape *r = mk(env, "r", false, "1|->3");
  CHECK(op2(env, CN_SL_POINTWISE, a, x, NULL) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, b, a, NULL) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, r, b, zero) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, a), "1|->3");
  CHECK_STR(str(env, b), "1|->3");
  CHECK_STR(str(env, r), "1|->3");
  cn_ctx_destroy(ctx);
}

static void test_unit_rows_through_open_operand(void) {
  /* n = f(x), r = n + y with x 1,1|->3 (two unit batch axes) and y 3|->3. r closes to its
   * operands' axes while n's row is still open (n waits for its uses, its only operand being
   * units): y alone asks one batch axis, but n broadcasts x and needs two, so r needs two too.
   * r is 1,3|->3 (y's 3 right-aligned, the unit broadcasting) and n takes r's axes upward. Before
   * the fix r closed to one batch axis and propagation failed on n (1 axes vs 2 axes). */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "1,1|->3");
  cn_shape *y = mk(env, "y", false, "3|->3");
  cn_shape *n = mk(env, "n", false, "?|?->?"), *r = mk(env, "r", false, "?|?->?");
  CHECK(op2(env, CN_SL_POINTWISE, n, x, NULL) != NULL);
  CHECK(op2(env, CN_SL_POINTWISE, r, n, y) != NULL);
  CHECK_MSG(cn_shape_finalize(env) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(str(env, n), "1,3|->3");
  CHECK_STR(str(env, r), "1,3|->3");
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matrix_chain();
  test_scalar_broadcast();
  test_ones_vector_and_bias();
  test_leaf_lub();
  test_transpose_and_slice();
  test_undetermined_param();
  test_conflict_messages();
  test_labels();
  test_rank_cycles();
  test_terminals();
  test_total_elems_both_sides();
  test_rollback();
  test_alloc_failures();
  test_print_unsolved();
  test_unit_row_through_open_operand();
  test_unit_rows_through_open_operand();
  CHECK_DONE();
}
