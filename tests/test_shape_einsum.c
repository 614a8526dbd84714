/* Shape inference through einsum specs (issue 3 "Tests"): every example of
 * syntax-extensions-cd-op's einsum section, matrix multiplication with a hidden size resolved from
 * use, convolution sizes through affine axes (valid with strides and dilations in every direction,
 * padded, non-tiling, named strides, interleaving), Total_elems and Exact meeting specs, rank
 * cycles, axis labels, and the full wording of conflict messages. Every expected shape is derived
 * by hand in the comments from the seed's reading of the spec: a spec row written without a row
 * variable on an operand reduces any further (leading) axes; the result's rows are exactly what the
 * spec writes. */
#include "check.h"
#include "shape_check.h"

#include <stdlib.h>

static cn_shape *open_shape(cn_shape_env *env, const char *label) {
  return mk(env, label, false, "?|?->?");
}

static const char *str(cn_shape_env *env, cn_shape *sh) {
  return cn_shape_str(env, sh);
}

/* lhs = einsum(spec)(a[, b]) with optional named bindings; NULL on a conflict (or a parse
 * error, which fails a check: every spec here is well-formed). */
static cn_shape_op *ein_b(cn_shape_env *env, const char *text, cn_shape *lhs, cn_shape *a,
                          cn_shape *b, const cn_shape_binding *bindings, int n_bindings) {
  cn_ctx *ctx = cn_shape_env_ctx(env);
  cn_einsum *spec = cn_einsum_parse(ctx, text);
  CHECK_MSG(spec != NULL, "parsing \"%s\": %s", text, cn_ctx_error(ctx));
  if (!spec) return NULL;
  cn_shape_args args = {0};
  args.spec = spec;
  args.bindings = bindings;
  args.n_bindings = n_bindings;
  cn_shape *rhs[2] = {a, b};
  return cn_shape_add_op(env, CN_SL_EINSUM, &args, lhs, rhs, b ? 2 : 1);
}

static cn_shape_op *ein(cn_shape_env *env, const char *text, cn_shape *lhs, cn_shape *a,
                        cn_shape *b) {
  return ein_b(env, text, lhs, a, b, NULL, 0);
}

static bool finalize(cn_shape_env *env) {
  cn_status st = cn_shape_finalize(env);
  CHECK_MSG(st == CN_OK, "finalize: %s", cn_ctx_error(cn_shape_env_ctx(env)));
  return st == CN_OK;
}

/* One unary spec applied to a fresh operand of shape `x_text`: the result's shape after
 * finalization. */
static const char *unary(cn_ctx *ctx, const char *spec, const char *x_text) {
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, x_text), *y = open_shape(env, "y");
  if (!ein(env, spec, y, x, NULL) || !finalize(env)) return cn_ctx_error(ctx);
  CHECK_STR(str(env, x), x_text); /* the operand is never changed by its use */
  return str(env, y);
}

static void test_reduce_to_number(void) {
  /* "...|...->... => 0", "...|... => 0" and "... => 0" reduce every axis: the result's only axis
   * is the fixed index 0 (at least 1 cell, nothing else): |->1, whatever the operand. */
  cn_ctx *ctx = cn_ctx_create();
  CHECK_STR(unary(ctx, "...|...->... => 0", "2,3|4->5,6"), "|->1");
  CHECK_STR(unary(ctx, "...|... => 0", "2,3|4->5,6"), "|->1");
  CHECK_STR(unary(ctx, "... => 0", "2,3|4->5,6"), "|->1");
  CHECK_STR(unary(ctx, "... => 0", "|->7"), "|->1");
  /* the largest fixed index a spec may write, 2^40 - 1, asks for 2^40 cells (issue 14: k + 1
   * no longer overflows, the parser refusing k >= 2^40, see test_einsum) */
  CHECK_STR(unary(ctx, "i => 1099511627775", "|->7"), "|->1099511627776");
  /* the reading as sizes: one cell */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "2|->3"), *y = open_shape(env, "y");
  CHECK(ein(env, "...|...->... => 0", y, x, NULL) != NULL);
  CHECK(finalize(env));
  int64_t d[4] = {0};
  CHECK_INT(cn_shape_dims(env, y, d, 4), 1);
  CHECK_INT(d[0], 1);
  cn_ctx_destroy(ctx);
}

static void test_pointwise_specs(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* unary: every row is the operand's own row variable: the result copies 2,3|4->5 */
  CHECK_STR(unary(ctx, "...|...->... => ...|...->...", "2,3|4->5"), "2,3|4->5");
  /* online: equalities are solved as the operation is added, before finalization */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "2|3->4"), *y = open_shape(env, "y");
  CHECK(ein(env, "...|...->... => ...|...->...", y, x, NULL) != NULL);
  CHECK_STR(str(env, y), "2|3->4");
  /* binary: both operands and the result share the three row variables; the second operand is
   * inferred from the first: 2|3->4 */
  cn_shape *b = open_shape(env, "b"), *z = open_shape(env, "z");
  CHECK(ein(env, "...|...->... ; ...|...->... => ...|...->...", z, x, b) != NULL);
  CHECK_STR(str(env, b), "2|3->4");
  CHECK_STR(str(env, z), "2|3->4");
  CHECK(finalize(env));
  /* no broadcasting in an einsum: a size-1 axis does not stretch to 4 */
  cn_shape *one = mk(env, "one", false, "2|3->1"), *w = open_shape(env, "w");
  CHECK(ein(env, "...|...->... ; ...|...->... => ...|...->...", w, x, one) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "sizes differ: output row of \"one\" (#5) axis 0 (size 1) vs spec "
                               "row variable '...' (size 4, as in the output row of \"x\" (#1))");
  cn_ctx_destroy(ctx);
}

static void test_batch_reduction(void) {
  /* "...|...->... => ...->..." and "...->... => ...->...": the result has no batch row, so the
   * operand's batch axes (5,6) are reduced: |3->4 */
  cn_ctx *ctx = cn_ctx_create();
  CHECK_STR(unary(ctx, "...|...->... => ...->...", "5,6|3->4"), "|3->4");
  CHECK_STR(unary(ctx, "...->... => ...->...", "5,6|3->4"), "|3->4");
  cn_ctx_destroy(ctx);
}

static void test_slicing(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* "2...|...->... => ...|...->...": the leftmost batch axis (5) is indexed at 2, the other
   * batch axes (6) stay: 6|3->4 */
  CHECK_STR(unary(ctx, "2...|...->... => ...|...->...", "5,6|3->4"), "6|3->4");
  /* "2..v..|... => ..v..": the same slice; the remaining batch axes (6,7) become the result's
   * output axes, the operand's input (8) and output (9) axes are reduced: |->6,7 */
  CHECK_STR(unary(ctx, "2..v..|... => ..v..", "5,6,7|8->9"), "|->6,7");
  /* index 2 needs at least 3 cells in that axis */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "2,6|3->4"), *y = open_shape(env, "y");
  CHECK(ein(env, "2...|...->... => ...|...->...", y, x, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "fixed index 2 is out of range of an axis of size 2");
  CHECK_HAS(cn_ctx_error(ctx), "batch row of \"x\" (#1) axis 0 (size 2)");
  CHECK_HAS(cn_ctx_error(ctx), "spec axis '2'");
  cn_ctx_destroy(ctx);
}

static void test_expansion(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* "...|... => ...|...2": the result's batch and output rows are the operand's, plus a
   * rightmost output axis holding the operand at index 2 (so at least 3 cells, and nothing asks
   * for more: 3); the operand's input axes (3) are reduced and the result has none: 5|->4,3 */
  CHECK_STR(unary(ctx, "...|... => ...|...2", "5|3->4"), "5|->4,3");
  /* a result that gives the new axis keeps it (7) */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "5|3->4"), *y = mk(env, "y", false, "5|->4,7");
  CHECK(ein(env, "...|... => ...|...2", y, x, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, y), "5|->4,7");
  /* ... and a new axis of 2 cells has no index 2 */
  cn_shape *y2 = mk(env, "y2", false, "5|->4,2");
  CHECK(ein(env, "...|... => ...|...2", y2, x, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "fixed index 2 is out of range of an axis of size 2");
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"y2\" (#3) axis 1 (size 2)");
  cn_ctx_destroy(ctx);
}

static void test_permutations(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* "ijk => kji": i,j,k are the three rightmost output axes (2,3,4), reversed; the batch (7),
   * input (6) and any further output axes (5) are reduced: |->4,3,2 */
  CHECK_STR(unary(ctx, "ijk => kji", "7|6->2,3,4"), "|->4,3,2");
  CHECK_STR(unary(ctx, "ijk => kji", "|->5,2,3,4"), "|->4,3,2");
  /* "ijk => ki": j (3) is reduced too: |->4,2 */
  CHECK_STR(unary(ctx, "ijk => ki", "7|6->2,3,4"), "|->4,2");
  /* "..v..|ijk => ..v..kji": the batch axes (5,6) become the leftmost output axes of the result,
   * followed by the reversed 2,3,4; the input axes (7) are reduced: |->5,6,4,3,2 */
  CHECK_STR(unary(ctx, "..v..|ijk => ..v..kji", "5,6|7->2,3,4"), "|->5,6,4,3,2");
  /* the other direction: a known result determines an inferred operand; the operand's unwritten
   * rows and its axes left of i are only bounded by use and close to nothing: |->2,3,4 */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = open_shape(env, "x"), *y = mk(env, "y", false, "|->4,3,2");
  CHECK(ein(env, "ijk => kji", y, x, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, x), "|->2,3,4");
  /* too few axes for three labels */
  cn_shape *x2 = mk(env, "x2", false, "|->2,3"), *y2 = open_shape(env, "y2");
  CHECK(ein(env, "ijk => kji", y2, x2, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"x2\" (#3)");
  CHECK_HAS(cn_ctx_error(ctx), "2 axes vs 3 or more axes");
  cn_ctx_destroy(ctx);
}

static void test_matmul_spec(void) {
  /* c = einsum "ij;jk=>ik"(w, x): w is a parameter 2 x ?, x is data 5 x 4: j is x's 5, so w is
   * 2 x 5 (online) and c is 2 x 4. A chain: h = w1 . x with w1 3 x ?, x 6 x 2 -> w1 3 x 6,
   * h 3 x 2; y = w2 . h with w2 4 x ? -> w2 4 x 3, y 4 x 2. */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *w = mk(env, "w", true, "|->2,0"), *x = mk(env, "x", false, "|->5,4");
  cn_shape *c = open_shape(env, "c");
  CHECK(ein(env, "ij;jk=>ik", c, w, x) != NULL);
  CHECK_STR(str(env, w), "|->2,5");
  CHECK_STR(str(env, c), "|->2,4");
  cn_shape *w1 = mk(env, "w1", true, "|->3,0"), *x1 = mk(env, "x1", false, "|->6,2");
  cn_shape *w2 = mk(env, "w2", true, "|->4,0");
  cn_shape *h = open_shape(env, "h"), *y = open_shape(env, "y");
  CHECK(ein(env, "ij;jk=>ik", h, w1, x1) != NULL);
  CHECK(ein(env, "ij;jk=>ik", y, w2, h) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, w1), "|->3,6");
  CHECK_STR(str(env, h), "|->3,2");
  CHECK_STR(str(env, w2), "|->4,3");
  CHECK_STR(str(env, y), "|->4,2");
  /* the hidden size resolved only from the other side: w3 is ? x 7 and the result is given */
  cn_shape *w3 = mk(env, "w3", true, "|->0,7"), *x3 = mk(env, "x3", false, "|->7,2");
  cn_shape *y3 = mk(env, "y3", false, "|->9,2");
  CHECK(ein(env, "ij;jk=>ik", y3, w3, x3) != NULL);
  CHECK_STR(str(env, w3), "|->9,7");
  cn_ctx_destroy(ctx);
}

/* ---- Convolutions ------------------------------------------------------------------------------
 * The input x (output row H,W), the kernel k (output row KH,KW) and the result y (output row
 * OH,OW); valid: H = stride*(OH-1) + 1 + (KH-1)*dilation. Returns "x k y" after finalization, or
 * NULL on a conflict (message in the context). */
static const char *conv(cn_ctx *ctx, const char *spec, const cn_shape_binding *bindings, int nb,
                        const char *x_text, const char *k_text, const char *y_text) {
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, x_text), *k = mk(env, "k", false, k_text);
  cn_shape *y = mk(env, "y", false, y_text);
  if (!ein_b(env, spec, y, x, k, bindings, nb) || cn_shape_finalize(env) != CN_OK) return NULL;
  static char all[200];
  snprintf(all, sizeof all, "%s %s %s", str(env, x), str(env, k), str(env, y));
  return all;
}

#define VALID(s, d) s "*oh<+" d "*kh, " s "*ow<+" d "*kw; kh, kw => oh, ow"

static void test_conv_valid(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *r;
  /* forward: output from input and kernel.
   * stride 1, dilation 1: 10 - 1 - 2 = 7 -> 8; stride 2 on 11: (11 - 1 - 2)/2 = 4 -> 5;
   * dilation 2 on 10: 10 - 1 - 4 = 5 -> 6; dilation 3 on 10: 10 - 1 - 6 = 3 -> 4;
   * stride 2 and dilation 3 on 11: (11 - 1 - 6)/2 = 2 -> 3. */
  r = conv(ctx, "oh<+kh, ow<+kw; kh, kw => oh, ow", NULL, 0, "|->10,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,10 |->3,3 |->8,8");
  r = conv(ctx, VALID("1", "1"), NULL, 0, "|->10,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,10 |->3,3 |->8,8");
  r = conv(ctx, VALID("2", "1"), NULL, 0, "|->11,11", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->11,11 |->3,3 |->5,5");
  r = conv(ctx, VALID("1", "2"), NULL, 0, "|->10,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,10 |->3,3 |->6,6");
  r = conv(ctx, VALID("1", "3"), NULL, 0, "|->10,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,10 |->3,3 |->4,4");
  r = conv(ctx, VALID("2", "3"), NULL, 0, "|->11,11", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->11,11 |->3,3 |->3,3");
  /* per axis: height stride 2 dilation 3 on 11 -> 3, width stride 1 dilation 2 on 10 -> 6;
   * a 5x5 kernel on 10 x 12 with stride 1: 6 x 8 */
  r = conv(ctx, "2*oh<+3*kh, ow<+2*kw; kh, kw => oh, ow", NULL, 0, "|->11,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->11,10 |->3,3 |->3,6");
  r = conv(ctx, VALID("1", "1"), NULL, 0, "|->10,12", "|->5,5", "?|?->?");
  CHECK_STR(r, "|->10,12 |->5,5 |->6,8");

  /* kernel from input and output: stride 1: 10 - 1 - 7 = 2 -> 3; dilation 2 with output 6:
   * (10 - 1 - 5)/2 = 2 -> 3; stride 2 on 11 with output 5: 11 - 1 - 8 = 2 -> 3; stride 2,
   * dilation 3 on 11 with output 3: (11 - 1 - 4)/3 = 2 -> 3 */
  r = conv(ctx, VALID("1", "1"), NULL, 0, "|->10,10", "?|?->?", "|->8,8");
  CHECK_STR(r, "|->10,10 |->3,3 |->8,8");
  r = conv(ctx, VALID("1", "2"), NULL, 0, "|->10,10", "|->0,0", "|->6,6");
  CHECK_STR(r, "|->10,10 |->3,3 |->6,6");
  r = conv(ctx, VALID("2", "1"), NULL, 0, "|->11,11", "?|?->?", "|->5,5");
  CHECK_STR(r, "|->11,11 |->3,3 |->5,5");
  r = conv(ctx, VALID("2", "3"), NULL, 0, "|->11,11", "?|?->?", "|->3,3");
  CHECK_STR(r, "|->11,11 |->3,3 |->3,3");

  /* input from output and kernel: stride 1, dilation 3: 8 - 1 + 1 + 6 = 14; stride 2,
   * dilation 2 with output 4: 2*3 + 1 + 4 = 11 */
  r = conv(ctx, VALID("1", "3"), NULL, 0, "?|?->?", "|->3,3", "|->8,8");
  CHECK_STR(r, "|->14,14 |->3,3 |->8,8");
  r = conv(ctx, VALID("2", "2"), NULL, 0, "|->0,0", "|->3,3", "|->4,4");
  CHECK_STR(r, "|->11,11 |->3,3 |->4,4");
  /* the input is solved online, as soon as both output and kernel are known */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = open_shape(env, "x"), *k = mk(env, "k", false, "|->3,3");
  cn_shape *y = mk(env, "y", false, "|->8,8");
  CHECK(ein(env, VALID("1", "1"), y, x, k) != NULL);
  CHECK_HAS(str(env, x), "10,10");
  cn_ctx_destroy(ctx);
}

static void test_conv_padded_and_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *r;
  /* padded, stride 2: input = 2 * output whatever the kernel: 10 x 12 -> 5 x 6, and back */
  const char *padded = "2*oh=+kh, 2*ow=+kw; kh, kw => oh, ow";
  r = conv(ctx, padded, NULL, 0, "|->10,12", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,12 |->3,3 |->5,6");
  r = conv(ctx, padded, NULL, 0, "?|?->?", "|->3,3", "|->5,6");
  CHECK_STR(r, "|->10,12 |->3,3 |->5,6");
  /* an odd input does not split into strides of 2 */
  r = conv(ctx, padded, NULL, 0, "|->11,12", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "input size 11 is not a multiple of the stride 2");
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"x\" (#1) axis 0 (size 11)");
  CHECK_HAS(cn_ctx_error(ctx), "spec axis '2*oh=+kh'");

  /* valid, stride 2, kernel 3 on 10: 10 - 1 - 2 = 7 is odd: the windows do not tile */
  r = conv(ctx, VALID("2", "1"), NULL, 0, "|->10,10", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  const char *msg = cn_ctx_error(ctx);
  CHECK_HAS(msg, "einsum \"" VALID("2", "1") "\"");
  CHECK_HAS(msg, "a valid convolution does not tile: input size 10, kernel 3, dilation 1, "
                 "stride 2");
  CHECK_HAS(msg, "output row of \"x\" (#1) axis 0 (size 10)");
  CHECK_HAS(msg, "spec axis '2*oh<+kh'");
  /* the kernel cannot be inferred when input and output leave no whole kernel: stride 2 on 10
   * with output 4: 10 - 1 - 6 = 3 cells for a dilation 2 kernel span */
  r = conv(ctx, VALID("2", "2"), NULL, 0, "|->10,10", "?|?->?", "|->4,4");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "a valid convolution does not tile: input size 10, output 4, "
                               "stride 2, dilation 2");
  /* an output larger than the input leaves a negative kernel span */
  r = conv(ctx, VALID("1", "1"), NULL, 0, "|->10,10", "?|?->?", "|->11,11");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "does not tile");

  /* named stride and dilation bound by the caller: s = 2, d = 3 on 11: 3 (as above) */
  const char *named = "s*oh<+d*kh, s*ow<+d*kw; kh, kw => oh, ow";
  cn_shape_binding both[2] = {{"s", 2}, {"d", 3}};
  r = conv(ctx, named, both, 2, "|->11,11", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->11,11 |->3,3 |->3,3");
  /* the same names bound to 1 and 1: 10 -> 8 */
  cn_shape_binding ones[2] = {{"d", 1}, {"s", 1}};
  r = conv(ctx, named, ones, 2, "|->10,10", "|->3,3", "?|?->?");
  CHECK_STR(r, "|->10,10 |->3,3 |->8,8");
  /* an unbound name is reported with its role and column (the first axis, column 1) */
  r = conv(ctx, named, both, 1, "|->11,11", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "the dilation 'd' at column 1 is not bound");
  cn_shape_binding zero[2] = {{"s", 0}, {"d", 1}};
  r = conv(ctx, named, zero, 2, "|->11,11", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "the stride at column 1 is 0; it must be >= 1");
  /* a bound stride or dilation is held to the literals' limit, 2^40 (issue 14) */
  cn_shape_binding huge[2] = {{"s", INT64_MAX}, {"d", 1}};
  r = conv(ctx, named, huge, 2, "|->11,11", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  CHECK_STR(cn_ctx_error(ctx), "einsum \"s*oh<+d*kh, s*ow<+d*kw; kh, kw => oh, ow\": the stride "
                               "at column 1 is 9223372036854775807; it must be below 2^40");
  cn_shape_binding big_d[2] = {{"s", 1}, {"d", (int64_t)1 << 40}};
  r = conv(ctx, named, big_d, 2, "|->11,11", "|->3,3", "?|?->?");
  CHECK(r == NULL);
  CHECK_STR(cn_ctx_error(ctx), "einsum \"s*oh<+d*kh, s*ow<+d*kw; kh, kw => oh, ow\": the "
                               "dilation at column 1 is 1099511627776; it must be below 2^40");
  cn_ctx_destroy(ctx);
}

/* Issue 27: the sizes an affine axis computes are checked for int64 overflow (they were signed
 * overflows, undefined behaviour, wrapping to a wrong size). A stride of 2^40 - 1 over an output
 * of 2^30 reads (2^40 - 1) * 2^30 > 2^63 cells: a shape error at the spec's axis, padded or
 * valid; a valid convolution whose kernel or output term alone passes int64 does not tile. */
static void test_affine_overflow(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *r =
      conv(ctx, "1099511627775*oh=+kh; kh => oh", NULL, 0, "?|?->?", "|->3", "|->1073741824");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx),
            "einsum \"1099511627775*oh=+kh; kh => oh\": the axis at column 1 (stride "
            "1099511627775, dilation 1) over an output of size 1073741824 would read an input of "
            "more than 2^63 - 1 cells");
  r = conv(ctx, "a, 1099511627775*oh<+kh; kh => oh", NULL, 0, "?|?->?", "|->3", "|->1073741824");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx),
            "einsum \"a, 1099511627775*oh<+kh; kh => oh\": the axis at column 4 (stride "
            "1099511627775, dilation 1) over an output of size 1073741824 and a kernel of size 3 "
            "would read an input of more than 2^63 - 1 cells");
  /* (2^30 - 1) * (2^40 - 1) kernel cells: no output fits in 10 */
  r = conv(ctx, "oh<+1099511627775*kh; kh => oh", NULL, 0, "|->10", "|->1073741824", "?|?->?");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "a valid convolution does not tile: input size 10, kernel "
                               "1073741824, dilation 1099511627775, stride 1: 10 - 1 - "
                               "(1073741824-1)*1099511627775 = below 0 is not a non-negative");
  /* (2^40 - 1) * (2^30 - 1) output cells: no kernel fits in 10 */
  r = conv(ctx, "1099511627775*oh<+kh; kh => oh", NULL, 0, "|->10", "?|?->?", "|->1073741824");
  CHECK(r == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "a valid convolution does not tile: input size 10, output "
                               "1073741824, stride 1099511627775, dilation 1 leave no whole "
                               "kernel size");
  cn_ctx_destroy(ctx);
}

/* Issue 27: `L va = vb T`, a row with a leading flank equal to one with a trailing flank, has no
 * most general unifier (the rows may stack, or pair the end of L with the start of T). The
 * solver no longer stacks them at once: the equation waits until a rank decides it, and if none
 * does, finalization pairs the flanks as far as they go (the fewest axes).
 * y = "i, j => i, j, ..c.." (x) is [4, 5, ..c..]; z = "a, b, e => e" (y) reads y's row as
 * [..v.., a, b, e]: L = [4, 5], T = [a, b, e]. (tests/test_library.c has the case that found it:
 * conv2d's input row written `h, w, ic` after a pooling.) */
static void test_flanks(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* nothing else knows y's rank: pairing, 4 = a, 5 = b, c = [e], and e (unconstrained) is
   * guessed 1; stacking gave y [4, 5, a, b, e] = [4, 5, 1, 1, 1] */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "|->4,5"), *y = open_shape(env, "y"), *z = open_shape(env, "z");
  CHECK(ein(env, "i, j => i, j, ..c..", y, x, NULL) != NULL);
  CHECK(ein(env, "a, b, e => e", z, y, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, y), "|->4,5,1");
  CHECK_STR(str(env, z), "|->1");

  /* y's rank given afterwards (y and u share the row variable r: y = [4, 5, 6, 7]): the equation
   * has one solution, v = [4], a = 5, b = 6, e = 7 */
  env = cn_shape_env_new(ctx);
  x = mk(env, "x", false, "|->4,5");
  y = open_shape(env, "y");
  z = open_shape(env, "z");
  cn_shape *u = mk(env, "u", false, "|->4,5,6,7"), *w = open_shape(env, "w");
  CHECK(ein(env, "i, j => i, j, ..c..", y, x, NULL) != NULL);
  CHECK(ein(env, "a, b, e => e", z, y, NULL) != NULL);
  CHECK_STR(str(env, y), "|->4,5,..."); /* still open: nothing decided */
  CHECK(ein(env, "..r..; ..r.. => ..r..", w, y, u) != NULL);
  CHECK_STR(str(env, y), "|->4,5,6,7");
  CHECK_STR(str(env, z), "|->7");
  CHECK(finalize(env));
  CHECK_STR(str(env, z), "|->7");

  /* the longer flank leading: y = [4, 5, 6, ..c..] read as [..v.., a, b]: c, beside the longer
   * flank, closes to nothing, and [4, 5, 6] = [..v.., a, b] gives v = [4], a = 5, b = 6 (stacking
   * gave y [4, 5, 6, a, b] = [4, 5, 6, 1, 1]) */
  env = cn_shape_env_new(ctx);
  x = mk(env, "x", false, "|->4,5,6");
  y = open_shape(env, "y");
  z = open_shape(env, "z");
  CHECK(ein(env, "i, j, k => i, j, k, ..c..", y, x, NULL) != NULL);
  CHECK(ein(env, "a, b => a", z, y, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, y), "|->4,5,6");
  CHECK_STR(str(env, z), "|->5");
  cn_ctx_destroy(ctx);
}

static void test_interleave(void) {
  /* "..., i => ..., 2*i" and "..., i => ..., 2*i + 1" write the operand's last axis at the even
   * resp. odd positions of a result axis twice as long: 3,5 -> 3,10. */
  cn_ctx *ctx = cn_ctx_create();
  const char *even = "..., i => ..., 2*i", *odd = "..., i => ..., 2*i + 1";
  cn_einsum *e = cn_einsum_parse(ctx, odd);
  CHECK_MSG(e != NULL, "%s", cn_ctx_error(ctx));
  if (e) {
    CHECK(e->multichar);
    CHECK_INT(e->lhs.output.n_trailing, 1);
    CHECK_INT(e->lhs.output.trailing[0].kind, CN_ES_AFFINE);
    CHECK_INT(e->lhs.output.trailing[0].stride, 2);
    CHECK_INT(e->lhs.output.trailing[0].stride_offset, 1);
    CHECK_INT(e->lhs.output.trailing[0].conv, CN_ES_CONV_NONE);
  }
  CHECK_STR(unary(ctx, even, "|->3,5"), "|->3,10");
  CHECK_STR(unary(ctx, odd, "|->3,5"), "|->3,10");
  /* both halves into one result, and the operands inferred from a known result */
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *a = mk(env, "a", false, "|->3,5"), *b = open_shape(env, "b");
  cn_shape *y = open_shape(env, "y");
  CHECK(ein(env, even, y, a, NULL) != NULL);
  CHECK(ein(env, odd, y, b, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, y), "|->3,10");
  CHECK_STR(str(env, b), "|->3,5");
  /* an odd-length result does not interleave two halves */
  cn_shape *c = open_shape(env, "c"), *y2 = mk(env, "y2", false, "|->11");
  CHECK(ein(env, odd, y2, c, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "input size 11 is not a multiple of the stride 2");
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"y2\" (#5) axis 0 (size 11)");
  cn_ctx_destroy(ctx);
}

static void test_total_and_exact(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  /* a reshape of 24 elements with batch 2 leaves 12 for the output row; transposed by "ij=>ji"
   * into a given 4 x 3 result, the operand's two labeled axes are 3 and 4, and the axes left of
   * them hold 12 / 12 = 1 element: none. */
  cn_shape *r = open_shape(env, "r"), *t = mk(env, "t", false, "|->4,3");
  cn_shape_args rs = {0};
  int64_t b2[1] = {2};
  rs.n_dims[CN_ROW_BATCH] = 1;
  rs.dims[CN_ROW_BATCH] = b2;
  rs.total = 24;
  CHECK(cn_shape_add_op(env, CN_SL_RESHAPE, &rs, r, NULL, 0) != NULL);
  CHECK(ein(env, "...|ij => ...|ji", t, r, NULL) == NULL); /* t has no batch axis for the 2 */
  CHECK_HAS(cn_ctx_error(ctx), "the rows have different numbers of axes (1 axes vs 0 axes): batch "
                               "row of \"r\" (#1) vs the spec's batch row '...'");
  cn_shape *t2 = mk(env, "t2", false, "2|->4,3");
  CHECK(ein(env, "...|ij => ...|ji", t2, r, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, r), "2|->3,4");
  /* 10 uint4x32 cells at single precision (4 values per cell) feed "i => i": 40 */
  cn_shape *u = mk(env, "u", false, "|->10"), *f = open_shape(env, "f"), *g = open_shape(env, "g");
  cn_shape_args vc = {0};
  vc.coeff = 4;
  cn_shape *rhs[1] = {u};
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &vc, f, rhs, 1) != NULL);
  CHECK(ein(env, "i => i", g, f, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, g), "|->40");
  /* and back: the converted values are used as 8 x 5, so the cells are 40 / 4 = 10 */
  cn_shape *u2 = open_shape(env, "u2"), *f2 = open_shape(env, "f2");
  cn_shape *g2 = mk(env, "g2", false, "|->8,5");
  rhs[0] = u2;
  CHECK(cn_shape_add_op(env, CN_SL_VEC_CONVERT, &vc, f2, rhs, 1) != NULL);
  CHECK(ein(env, "ij => ij", g2, f2, NULL) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, f2), "|->8,5");
  CHECK_STR(str(env, u2), "|->10");
  /* Exact pins: data 3 x 4 meets "ij => ji" with a result given as 4 x 5 */
  cn_shape *d = open_shape(env, "d"), *dt = mk(env, "dt", false, "|->4,5");
  cn_shape_args data = {0};
  int64_t dd[2] = {3, 4};
  data.n_dims[CN_ROW_OUTPUT] = 2;
  data.dims[CN_ROW_OUTPUT] = dd;
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &data, d, NULL, 0) != NULL);
  CHECK_STR(str(env, d), "|->3,4");
  CHECK(ein(env, "ij => ji", dt, d, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "sizes differ: output row of \"d\" (#10) axis 0 (size 3) vs spec "
                               "axis 'i' (size 5, as in the output row of \"dt\" (#11))");
  cn_ctx_destroy(ctx);
}

static void test_rank_cycles(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  /* y = einsum "..a..i => ..a.."(y): y's output row would be itself plus one axis */
  cn_shape *y = open_shape(env, "y");
  CHECK(ein(env, "..a..i => ..a..", y, y, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "rank cycle");
  CHECK_HAS(cn_ctx_error(ctx), "einsum \"..a..i => ..a..\"");
  /* the same through two operations: y drops x's last axis, then x is made a copy of y */
  cn_shape *x = open_shape(env, "x"), *z = open_shape(env, "z");
  CHECK(ein(env, "..a..i => ..a..", z, x, NULL) != NULL);
  CHECK(ein(env, "... => ...", x, z, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "rank cycle");
  CHECK_HAS(cn_ctx_error(ctx), "einsum \"... => ...\"");
  cn_ctx_destroy(ctx);
}

static void test_labels(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape_args data = {0};
  int64_t three[1] = {3};
  const char *rgb[1] = {"rgb"}, *xyz[1] = {"xyz"};
  data.n_dims[CN_ROW_OUTPUT] = 1;
  data.dims[CN_ROW_OUTPUT] = three;
  data.labels[CN_ROW_OUTPUT] = rgb;
  cn_shape *a = open_shape(env, "a"), *b = open_shape(env, "b"), *c = open_shape(env, "c");
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &data, a, NULL, 0) != NULL);
  data.labels[CN_ROW_OUTPUT] = xyz;
  CHECK(cn_shape_add_op(env, CN_SL_DATA, &data, b, NULL, 0) != NULL);
  CHECK_STR(str(env, a), "|->3:rgb");
  /* through a spec: i identifies the two axes */
  CHECK(ein(env, "i;i=>i", c, a, b) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "axis labels differ ('xyz' vs 'rgb'): output row of \"b\" (#2) "
                               "axis 'xyz' (size 3:xyz) vs spec axis 'i' (size 3:rgb, as in the "
                               "output "
                               "row of \"a\" (#1))");
  /* through pointwise broadcasting: decided when the result's axis closes at finalization */
  cn_shape *d = open_shape(env, "d");
  cn_shape *rhs[2] = {a, b};
  CHECK(cn_shape_add_op(env, CN_SL_POINTWISE, NULL, d, rhs, 2) != NULL);
  CHECK(cn_shape_finalize(env) != CN_OK);
  CHECK_HAS(cn_ctx_error(ctx), "axis labels differ ('rgb' vs 'xyz')");
  CHECK_HAS(cn_ctx_error(ctx), "pointwise");
  /* an unlabeled axis agrees with a labeled one, and the result carries the label */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  a = mk(env, "a", false, "|->3:rgb");
  b = mk(env, "b", false, "|->3");
  c = open_shape(env, "c");
  CHECK(ein(env, "i;i=>i", c, a, b) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, c), "|->3:rgb");
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

static void test_more_specs(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* a diagonal: "ii => i" reads the two axes as one: 3,3 -> 3 */
  CHECK_STR(unary(ctx, "ii => i", "|->3,3"), "|->3");
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *x = mk(env, "x", false, "|->3,4"), *y = open_shape(env, "y");
  CHECK(ein(env, "ii => i", y, x, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "output row of \"x\" (#1) axis 1 (size 4) vs spec axis 'i' (size 3");
  /* a placeholder aligns without naming: "_j => j" keeps the last of 5,6 */
  CHECK_STR(unary(ctx, "_j => j", "|->5,6"), "|->6");
  /* three operands: "i;i;i=>i" makes all four 4 */
  env = cn_shape_env_new(ctx);
  cn_shape *a = mk(env, "a", false, "|->4"), *b = open_shape(env, "b"), *c = open_shape(env, "c");
  cn_shape *r = open_shape(env, "r");
  cn_shape_args args = {0};
  args.spec = cn_einsum_parse(ctx, "i;i;i=>i");
  CHECK(args.spec != NULL);
  cn_shape *three[3] = {b, a, c};
  CHECK(args.spec && cn_shape_add_op(env, CN_SL_EINSUM, &args, r, three, 3) != NULL);
  CHECK(finalize(env));
  CHECK_STR(str(env, b), "|->4");
  CHECK_STR(str(env, c), "|->4");
  CHECK_STR(str(env, r), "|->4");
  /* a kernel term without '<' or '=' reads as the caller's use_padding says: valid, 10 and 3
   * give 8; padded (stride 1), the output is the input's 10; with none it is refused */
  for (int padded = 0; padded < 3; padded++) {
    env = cn_shape_env_new(ctx);
    x = mk(env, "x", false, "|->10");
    cn_shape *k = mk(env, "k", false, "|->3");
    y = open_shape(env, "y");
    args.spec = cn_einsum_parse(ctx, "o+k; k => o");
    CHECK(args.spec != NULL);
    args.unmarked = padded == 2 ? CN_ES_CONV_UNSPECIFIED
                    : padded    ? CN_ES_CONV_PADDED
                                : CN_ES_CONV_VALID;
    cn_shape *rhs[2] = {x, k};
    cn_shape_op *op = args.spec ? cn_shape_add_op(env, CN_SL_EINSUM, &args, y, rhs, 2) : NULL;
    if (padded == 2) {
      CHECK(op == NULL || !finalize(env));
      CHECK_HAS(cn_ctx_error(ctx), "einsum \"o+k; k => o\": the kernel term at column 1 has no "
                                   "padding marker: write o=+k");
      continue;
    }
    CHECK(op != NULL);
    CHECK(finalize(env));
    CHECK_STR(str(env, y), padded ? "|->10" : "|->8");
  }
  cn_ctx_destroy(ctx);
}

static void test_messages(void) {
  /* full messages: an einsum conflict names the spec, the operation and its result, the
   * tensor's row and axis with its size, and the spec's label with its size and where that size
   * came from */
  cn_ctx *ctx = cn_ctx_create();
  cn_shape_env *env = cn_shape_env_new(ctx);
  cn_shape *a = mk(env, "a", false, "|->2,3"), *b = mk(env, "b", false, "|->4,5");
  cn_shape *c = open_shape(env, "c");
  CHECK(ein(env, "ij;jk=>ik", c, a, b) == NULL);
  CHECK_STR(cn_ctx_error(ctx),
            "shape conflict in einsum \"ij;jk=>ik\" (operation #1 computing \"c\" (#3)): sizes "
            "differ: output row of \"b\" (#2) axis 0 (size 4) vs spec axis 'j' (size 3, as in "
            "the output row of \"a\" (#1))");
  /* an affine axis: k is 3 from the kernel, o is 5 from the result, so the input axis is
   * 1*(5-1) + 1 + (3-1)*1 = 7, not 10 */
  cn_ctx *ctx2 = cn_ctx_create();
  env = cn_shape_env_new(ctx2);
  cn_shape *x = mk(env, "x", false, "|->10"), *k = mk(env, "k", false, "|->3");
  cn_shape *y = mk(env, "y", false, "|->5");
  CHECK(ein(env, "k; o<+k => o", y, k, x) == NULL);
  CHECK_STR(cn_ctx_error(ctx2),
            "shape conflict in einsum \"k; o<+k => o\" (operation #1 computing \"y\" (#3)): "
            "sizes differ: output row of \"x\" (#1) axis 0 (size 10) vs spec axis 'o<+k' (size "
            "7)");
  /* a row variable */
  cn_ctx *ctx3 = cn_ctx_create();
  env = cn_shape_env_new(ctx3);
  a = mk(env, "a", false, "|->2,3");
  b = mk(env, "b", false, "|->2,4");
  c = open_shape(env, "c");
  CHECK(ein(env, "... ; ... => ...", c, a, b) == NULL);
  CHECK_STR(cn_ctx_error(ctx3),
            "shape conflict in einsum \"... ; ... => ...\" (operation #1 computing \"c\" (#3)): "
            "sizes differ: output row of \"b\" (#2) axis 1 (size 4) vs spec row variable '...' "
            "(size 3, as in the output row of \"a\" (#1))");
  cn_ctx_destroy(ctx3);
  cn_ctx_destroy(ctx2);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_reduce_to_number();
  test_pointwise_specs();
  test_batch_reduction();
  test_slicing();
  test_expansion();
  test_permutations();
  test_matmul_spec();
  test_conv_valid();
  test_conv_padded_and_errors();
  test_affine_overflow();
  test_flanks();
  test_interleave();
  test_total_and_exact();
  test_rank_cycles();
  test_labels();
  test_more_specs();
  test_messages();
  CHECK_DONE();
}
