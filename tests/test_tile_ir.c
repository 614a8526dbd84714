/* Tests of the IR foundation for Tile contractions (tile-edsl "Valid Indices", "Skipping",
 * "Reference"): projections records with ranged iterators, constraints and valid_only
 * (cn_proj_create_ranged), their lowering (tightened loop ranges, guards, the zero_unreached
 * initialization), the guard statement in the simplifier and its conversion into affine loop
 * bounds (triangles counted point by point, non-unit and negative coefficients, empty ranges,
 * static indices), the printer, the interpreter and the generated C. Records are built by hand as
 * the Tile compiler will build them, usually with deliberately wide iterator ranges so that the
 * tightening has work to do; every expected value is worked out by hand from the seed's definition
 * of a valid index set (in the comments), and every routine runs on both backends from an LHS
 * filled with a sentinel (99), so cells that must end 0 or at the neutral element are written by
 * the routine, not left over. */
#include "backend/backend.h"
#include "loops_check.h"

#include <stdarg.h>
#include <stdlib.h>

#define SENTINEL      99.0
#define STRICT_CFLAGS "-O1 -shared -fPIC -std=c11 -Wall -Wextra -Werror"

/* ---- Helpers ---- */

static cn_ctx *test_ctx(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", STRICT_CFLAGS), CN_OK);
  return ctx;
}

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "C"};

/* Compiles asgn on both backends and runs it from an LHS of sentinels; the LHS must then hold
 * `expected`. Returns the loop IR of the interpreter's routine (arena copy) for text checks, and
 * the generated C in *source (arena copy) when source is not NULL. */
static const char *run_both_source(cn_ctx *ctx, const cn_asgn *asgn, const char *name, cn_node *lhs,
                                   const double *expected, const char **source) {
  CHECK_MSG(asgn != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (source) *source = NULL;
  if (!asgn) return NULL;
  int64_t n = cn_node_numel(lhs);
  const char *loops = NULL;
  for (int b = 0; b < 2; b++) {
    double *values = calloc((size_t)n + 1, sizeof *values);
    for (int64_t k = 0; k < n; k++) values[k] = SENTINEL;
    CHECK_INT(cn_node_set_values(lhs, false, values, (size_t)n), CN_OK);
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[b], name);
    CHECK_MSG(r != NULL, "%s on %s: %s", name, backend_names[b], cn_ctx_error(ctx));
    if (r) {
      CHECK_INT(cn_routine_run(r), CN_OK);
      CHECK_INT(cn_node_get_values(lhs, false, values, (size_t)n), CN_OK);
      for (int64_t k = 0; k < n; k++)
        CHECK_MSG(values[k] == expected[k] || (isnan(values[k]) && isnan(expected[k])),
                  "%s on %s: cell %lld = %g, expected %g", name, backend_names[b], (long long)k,
                  values[k], expected[k]);
      if (b == 0) loops = cn_strdup(ctx, cn_routine_loops(r));
      if (b == 1 && source) *source = cn_strdup(ctx, cn_routine_source(r));
      cn_routine_free(r);
    }
    free(values);
  }
  return loops;
}

static const char *run_both(cn_ctx *ctx, const cn_asgn *asgn, const char *name, cn_node *lhs,
                            const double *expected) {
  return run_both_source(ctx, asgn, name, lhs, expected, NULL);
}

/* ---- Max pool 1-D (tile-edsl "Max Pool 1D") ---- */

/* O[i] >= I[2*i + j] with j < 2 (or without the constraint: the "wrong" pool), O of size out,
 * I of size n, both iterators given the range [-10, 10) as a Tile compiler that knows nothing
 * yet would. Returns the loop IR. */
static const char *max_pool(cn_ctx *ctx, int64_t n, int64_t out, const double *in, bool constrained,
                            const double *expected, const char *name, int *ids) {
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, n), *O = node(ctx, "O", CN_PREC_SINGLE, 1, out);
  ids[0] = I->id;
  ids[1] = O->id;
  CHECK_INT(cn_node_set_values(I, false, in, (size_t)n), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol iters[2] = {i, j};
  int64_t lo[2] = {-10, -10}, hi[2] = {10, 10};
  cn_proj_constraint j_lt_2 = {cn_index_iter(j), 2};
  cn_index mo[1] = {cn_index_iter(i)}, mi[1] = {affine2(i, 2, j, 1, 0)};
  cn_proj_space space = {2, iters, lo, hi, constrained ? 1 : 0, &j_lt_2, true, true};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  CHECK_MSG(proj != NULL, "%s", cn_ctx_error(ctx));
  cn_buffer arg[1] = {{I, false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_MAX, O, CN_OP_ID, arg, proj);
  return run_both(ctx, asgn, name, O, expected);
}

static void test_max_pool(void) {
  cn_ctx *ctx = test_ctx();
  const double odd[5] = {3, 1, 4, 1, 5}, even[6] = {3, 1, 4, 1, 5, 9};
  int ids[2];

  /* N = 5, round down (O of N / 2 = 2): O[0] = max(I0, I1) = 3, O[1] = max(I2, I3) = 4; I4 is
   * read by no valid set. The ranges tighten to i in 0..2 (O's bound), j in 0..2 (the
   * constraint), and then 2*i + j lies in [0, 3], within I: no guard is left, and the map i
   * covers O, so `=:` clears O to the neutral element (max is not injective: j reduces). */
  const double down_odd[2] = {3, 4};
  const char *text = max_pool(ctx, 5, 2, odd, true, down_odd, "pool_down_odd", ids);
  check_text(text,
             "routine pool_down_odd\n"
             "  params: I#%d single[5], O#%d single[2]\n"
             "# clear 'O' (#%d) to the neutral of @^\n"
             "for i0 in 0..2:\n"
             "  O[i0] := -inf\n"
             "for i in 0..2:\n"
             "  for j in 0..2:\n"
             "    O[i] := O[i] @^ I[2*i + j]\n",
             ids[0], ids[1], ids[1]);

  /* N = 5, round up (O of (N + 1) / 2 = 3): O[2] = max(I4) = 5, the set i = 2, j = 1 reads I5,
   * out of range, and is skipped (seed: "exactly the intended behavior"). 2*i + j now spans
   * [0, 5]: the lowering puts a guard 0 <= 2*i + j < 5 inside the j loop, which the simplifier
   * turns into j's bounds: j >= -2*i never passes 0 and is dropped, j < -2*i + 5 is below the
   * box's 2 only at i = 2, so the end is min(2, -2*i + 5). O may have unreached cells as far as
   * the lowering knows, so it is cleared to 0 and the reached cells are set to -inf by a marking
   * pass. */
  const double up_odd[3] = {3, 4, 5};
  text = max_pool(ctx, 5, 3, odd, true, up_odd, "pool_up_odd", ids);
  check_text(text,
             "routine pool_up_odd\n"
             "  params: I#%d single[5], O#%d single[3]\n"
             "# clear 'O' (#%d) to 0: cells no valid point writes stay 0\n"
             "for i0 in 0..3:\n"
             "  O[i0] := 0\n"
             "# cells of 'O' (#%d) that a valid point writes start from the neutral of @^\n"
             "for i in 0..3:\n"
             "  for j in 0..min(2, -2*i + 5):\n"
             "    O[i] := -inf\n"
             "for i in 0..3:\n"
             "  for j in 0..min(2, -2*i + 5):\n"
             "    O[i] := O[i] @^ I[2*i + j]\n",
             ids[0], ids[1], ids[1], ids[1]);

  /* N = 6: rounding down and up both give 3 outputs: max(3,1), max(4,1), max(5,9). */
  const double pooled_even[3] = {3, 4, 9};
  max_pool(ctx, 6, 6 / 2, even, true, pooled_even, "pool_down_even", ids);
  max_pool(ctx, 6, (6 + 1) / 2, even, true, pooled_even, "pool_up_even", ids);

  /* The "wrong" pool without the constraint: for i = 0 the valid j are 0..4, for i = 1 they
   * are -2..2 (negative values that are valid: i = 1, j = -1 reads I1), so both outputs see the
   * whole input and equal its max, 5. */
  const double wrong[2] = {5, 5};
  text = max_pool(ctx, 5, 2, odd, false, wrong, "pool_wrong", ids);
  /* j's box is tightened to -2..5 (2*i + j >= 0 with i <= 1, 2*i + j <= 4 with i >= 0), and the
   * guard 0 <= 2*i + j < 5 becomes the bounds -2*i..-2*i + 5, both inside the box: each i
   * visits its 5 valid j and nothing else (10 points, not the box's 14). */
  CHECK_HAS(text, "  for j in -2*i..-2*i + 5:\n    O[i] := O[i] @^ I[2*i + j]\n");
  cn_ctx_destroy(ctx);
}

/* ---- Skipping (tile-edsl "Skipping") ---- */

/* O[2*i] <accum> I[2*i, j] with I of dims (M, N) = (3, 4) and O of size N = 4: the valid i are
 * 0 and 1 (2*i < 3), so only O0 and O2 are written; O1 and O3 must end 0 under zero_unreached. */
static cn_asgn *skip(cn_ctx *ctx, cn_node *I, cn_node *O, cn_op accum, bool zero_unreached,
                     bool reduce_j) {
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol iters[2] = {i, j};
  int64_t lo[2] = {-5, -5}, hi[2] = {5, 5};
  cn_index mo[1] = {affine1(i, 2, 0)};
  /* Without the reduction, I's second index is fixed at 1 and j is left out of the space. */
  cn_index mi[2] = {affine1(i, 2, 0), reduce_j ? cn_index_iter(j) : cn_index_fixed(1)};
  cn_proj_space space = {reduce_j ? 2 : 1, iters, lo, hi, 0, NULL, true, zero_unreached};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  CHECK_MSG(proj != NULL, "%s", cn_ctx_error(ctx));
  cn_buffer arg[1] = {{I, false}};
  return cn_asgn_accum(ctx, true, accum, O, CN_OP_ID, arg, proj);
}

static void test_skipping(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)4),
          *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)4);
  const double in[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK_INT(cn_node_set_values(I, false, in, 12), CN_OK);

  /* Sum (the seed's +=): O0 = 1+2+3+4 = 10, O2 = 9+10+11+12 = 42. The neutral element is 0: the
   * clear to 0 is all the initialization needed. i tightens from -5..5 to 0..2 (2*i in [0, 3)
   * for I and [0, 4) for O, merged into one condition), j to 0..4: no guard. */
  const double sum[4] = {10, 0, 42, 0};
  const char *text = run_both(ctx, skip(ctx, I, O, CN_OP_ADD, true, true), "skip_sum", O, sum);
  check_text(text,
             "routine skip_sum\n"
             "  params: I#%d single[3, 4], O#%d single[4]\n"
             "# clear 'O' (#%d) to 0: cells no valid point writes stay 0\n"
             "for i0 in 0..4:\n"
             "  O[i0] := 0\n"
             "for i in 0..2:\n"
             "  for j in 0..4:\n"
             "    O[2*i] := O[2*i] + I[2*i, j]\n",
             I->id, O->id, O->id);

  /* Max: written cells start from -inf (the marking pass, which needs no j loop since neither
   * the LHS map nor a guard mentions j): O0 = 4, O2 = 12; unwritten cells are 0, not -inf. */
  const double max[4] = {4, 0, 12, 0};
  text = run_both(ctx, skip(ctx, I, O, CN_OP_MAX, true, true), "skip_max", O, max);
  check_text(text,
             "routine skip_max\n"
             "  params: I#%d single[3, 4], O#%d single[4]\n"
             "# clear 'O' (#%d) to 0: cells no valid point writes stay 0\n"
             "for i0 in 0..4:\n"
             "  O[i0] := 0\n"
             "# cells of 'O' (#%d) that a valid point writes start from the neutral of @^\n"
             "for i in 0..2:\n"
             "  O[2*i] := -inf\n"
             "for i in 0..2:\n"
             "  for j in 0..4:\n"
             "    O[2*i] := O[2*i] @^ I[2*i, j]\n",
             I->id, O->id, O->id, O->id);

  /* Product: O0 = 1*2*3*4 = 24, O2 = 9*10*11*12 = 11880 (from 1, not from the cleared 0). */
  const double prod[4] = {24, 0, 11880, 0};
  run_both(ctx, skip(ctx, I, O, CN_OP_MUL, true, true), "skip_prod", O, prod);

  /* Without zero_unreached, `=:` keeps its usual meaning: every cell starts at the neutral
   * element, so the unwritten cells of a max end at -inf. */
  const double max_plain[4] = {4, -INFINITY, 12, -INFINITY};
  run_both(ctx, skip(ctx, I, O, CN_OP_MAX, false, true), "skip_max_plain", O, max_plain);

  /* An injective map (no reduction: O[2*i] = I[2*i, 1]): each written cell is assigned once, so
   * the clear to 0 is followed by plain writes, no marking pass. O0 = I[0,1] = 2, O2 = 10. */
  const double copy[4] = {2, 0, 10, 0};
  text = run_both(ctx, skip(ctx, I, O, CN_OP_MAX, true, false), "skip_copy", O, copy);
  CHECK_HAS(text, "for i in 0..2:\n  O[2*i] := I[2*i, 1]\n");
  CHECK(text && !strstr(text, "start from"));
  cn_ctx_destroy(ctx);
}

/* ---- Cumulative sum (tile-edsl "Cumulative Sum") ---- */

static void test_cumsum(void) {
  cn_ctx *ctx = test_ctx();
  const int64_t n = 4;
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, n), *O = node(ctx, "O", CN_PREC_SINGLE, 1, n);
  const double in[4] = {1, 2, 3, 4};
  CHECK_INT(cn_node_set_values(I, false, in, 4), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_symbol iters[2] = {i, k};
  int64_t lo[2] = {-8, -8}, hi[2] = {8, 8};
  cn_index mo[1] = {cn_index_iter(i)}, mi[1] = {cn_index_iter(k)};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_buffer arg[1] = {{I, false}};

  /* O[i] += I[k], i - k < N: O[i] = sum_{k <= i} I[k] = 1, 3, 6, 10. The bounds tighten i and k
   * to 0..4; the guard 0 <= i - k < 4 inside the k loop becomes k's bounds (a triangle): k >= i - 3
   * never passes 0 and is dropped, k < i + 1 stays within the box's 4 and replaces it. */
  cn_proj_constraint c = {affine2(i, 1, k, -1, 0), n};
  cn_proj_space space = {2, iters, lo, hi, 1, &c, true, true};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  const double cumsum[4] = {1, 3, 6, 10};
  const char *text =
      run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, proj), "csum", O, cumsum);
  check_text(text,
             "routine csum\n"
             "  params: I#%d single[4], O#%d single[4]\n"
             "# clear 'O' (#%d) to 0: cells no valid point writes stay 0\n"
             "for i0 in 0..4:\n"
             "  O[i0] := 0\n"
             "for i in 0..4:\n"
             "  for k in 0..i + 1:\n"
             "    O[i] := O[i] + I[k]\n",
             I->id, O->id, O->id);

  /* The equivalent form with the constraint on k - i + N - 1 (k <= i iff k - i + 3 < 4, and
   * k - i + 3 >= 0 always holds on the box), here without valid_only: the ranges are given exactly
   * (0..4, so today's validation passes) and only the constraint filters: k >= i - 3 is dropped,
   * k < i + 1 bounds the same triangle. */
  int64_t lo0[2] = {0, 0}, hi0[2] = {4, 4};
  cn_proj_constraint c2 = {affine2(k, 1, i, -1, n - 1), n};
  cn_proj_space space2 = {2, iters, lo0, hi0, 1, &c2, false, false};
  cn_proj *proj2 = cn_proj_create_ranged(ctx, &space2, tensor(O, mo), 1, rhs);
  text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, proj2), "csum2", O,
                  cumsum);
  CHECK_HAS(text, "  for k in 0..i + 1:\n    O[i] := O[i] + I[k]\n");
  cn_ctx_destroy(ctx);
}

/* ---- Loop bounds from guards: exactly the valid points ---- */

/* Counts the points of the cumulative sum's triangle 0 <= i - k < 5 over i, k in -8..8 with
 * += 1 contractions (ONE holds 1 everywhere): per row, O[i] += ONE[k], and in total,
 * C[0] += ONE[k]. The valid points are k = 0..i for i = 0..4, so O = 1, 2, 3, 4, 5 and
 * C = 5*6/2 = 15. No guard is left (the nest is k in 0..i + 1 under i in 0..5), so each visited
 * point adds one: the nest visits exactly the N(N+1)/2 valid points, not the box's 25. */
static void test_triangle_count(void) {
  cn_ctx *ctx = test_ctx();
  const int64_t n = 5;
  cn_node *one = node(ctx, "ONE", CN_PREC_SINGLE, 1, n), *O = node(ctx, "O", CN_PREC_SINGLE, 1, n);
  cn_node *C = node(ctx, "C", CN_PREC_SINGLE, 1, (int64_t)1);
  const double ones[5] = {1, 1, 1, 1, 1};
  CHECK_INT(cn_node_set_values(one, false, ones, 5), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_symbol iters[2] = {i, k};
  int64_t lo[2] = {-8, -8}, hi[2] = {8, 8};
  cn_index mo[1] = {cn_index_iter(i)}, mc[1] = {cn_index_fixed(0)}, mk[1] = {cn_index_iter(k)};
  cn_proj_constraint tri = {affine2(i, 1, k, -1, 0), n};
  cn_proj_space space = {2, iters, lo, hi, 1, &tri, true, true};
  cn_proj_tensor rhs[1] = {tensor(one, mk)};
  cn_buffer arg[1] = {{one, false}};

  cn_proj *rows = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  const double per_row[5] = {1, 2, 3, 4, 5};
  const char *source = NULL;
  const char *text =
      run_both_source(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, rows), "tri_rows",
                      O, per_row, &source);
  CHECK_HAS(text, "for i in 0..5:\n  for k in 0..i + 1:\n    O[i] := O[i] + ONE[k]\n");
  CHECK(text && !strstr(text, "if "));
  CHECK_HAS(source, "  for (int64_t i = 0; i < 5; ++i) {\n"
                    "    for (int64_t k = 0; k < i + 1; ++k) {\n");

  /* C's fixed index does not bound i: its range is given as 0..5. */
  int64_t lo_c[2] = {0, -8}, hi_c[2] = {5, 8};
  cn_proj_space space_c = {2, iters, lo_c, hi_c, 1, &tri, true, true};
  cn_proj *total = cn_proj_create_ranged(ctx, &space_c, tensor(C, mc), 1, rhs);
  const double count[1] = {15};
  text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, C, CN_OP_ID, arg, total), "tri_total", C,
                  count);
  CHECK_HAS(text, "for i in 0..5:\n  for k in 0..i + 1:\n    C[0] := C[0] + ONE[k]\n");
  CHECK(text && !strstr(text, "if "));
  cn_ctx_destroy(ctx);
}

/* Non-unit coefficients on the inner variable, where the bounds are ceiling divisions of
 * possibly negative numbers. I = 1, 10, 100, 1000, 10000 (so a sum tells which cells were read),
 * valid_only alone bounding the points by I's size 5. */
static void test_bounds_non_unit(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, (int64_t)5);
  cn_node *O3 = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)3),
          *O5 = node(ctx, "P", CN_PREC_SINGLE, 1, (int64_t)5);
  const double in[5] = {1, 10, 100, 1000, 10000};
  CHECK_INT(cn_node_set_values(I, false, in, 5), CN_OK);
  cn_symbol j = cn_symbol_create(ctx, "j", 0), i = cn_symbol_create(ctx, "i", 0);
  cn_symbol iters[2] = {j, i}; /* j outer, i inner */
  cn_buffer arg[1] = {{I, false}};
  cn_index mo[1] = {cn_index_iter(j)};

  /* O[j] += I[2*i + j], j in 0..3, i in -5..5: 0 <= 2*i + j < 5 gives
   * i in [ceil(-j / 2), ceil((5 - j) / 2)): j = 0: i = 0, 1, 2 (I0 + I2 + I4 = 10101);
   * j = 1: i = 0, 1 (ceil(-1/2) = 0, ceil(4/2) = 2; I1 + I3 = 1010); j = 2: i = -1, 0, 1
   * (ceil(-2/2) = -1, ceil(3/2) = 2; I0 + I2 + I4 = 10101). i's box tightens to -1..3 (2*i in
   * [-2, 4]); both bounds stay within it, so they replace it. */
  int64_t lo[2] = {0, -5}, hi[2] = {3, 5};
  cn_index mi[1] = {affine2(i, 2, j, 1, 0)};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_proj_space space = {2, iters, lo, hi, 0, NULL, true, true};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O3, mo), 1, rhs);
  const double twice[3] = {10101, 1010, 10101};
  const char *source = NULL;
  const char *text =
      run_both_source(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O3, CN_OP_ID, arg, proj),
                      "stride_two", O3, twice, &source);
  CHECK_HAS(text, "for j in 0..3:\n"
                  "  for i in ceil(-j / 2)..ceil((-j + 5) / 2):\n"
                  "    O[j] := O[j] + I[j + 2*i]\n");
  CHECK_HAS(source, "    for (int64_t i = cn_ceil_div_i64(-j, 2); i < cn_ceil_div_i64(-j + 5, 2); "
                    "++i) {\n");

  /* A negative coefficient: P[j] += I[j - 2*i], j in 0..5, i in -5..5: 0 <= j - 2*i < 5 gives
   * i in [ceil((j - 4) / 2), ceil((j + 1) / 2)): j = 0: i = -2, -1, 0 (I4 + I2 + I0); j = 1:
   * i = -1, 0 (ceil(-3/2) = -1, ceil(2/2) = 1; I3 + I1); j = 2: -1, 0, 1 (I4 + I2 + I0); j = 3:
   * 0, 1 (ceil(-1/2) = 0; I3 + I1); j = 4: 0, 1, 2 (ceil(5/2) = 3; I4 + I2 + I0). */
  int64_t lo5[2] = {0, -5}, hi5[2] = {5, 5};
  cn_index mn[1] = {affine2(i, -2, j, 1, 0)};
  cn_proj_tensor rhs_n[1] = {tensor(I, mn)};
  cn_proj_space space_n = {2, iters, lo5, hi5, 0, NULL, true, true};
  cn_proj *proj_n = cn_proj_create_ranged(ctx, &space_n, tensor(O5, mo), 1, rhs_n);
  const double back[5] = {10101, 1010, 10101, 1010, 10101};
  text = run_both_source(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O5, CN_OP_ID, arg, proj_n),
                         "stride_back", O5, back, &source);
  CHECK_HAS(text, "for j in 0..5:\n"
                  "  for i in ceil((j - 4) / 2)..ceil((j + 1) / 2):\n"
                  "    P[j] := P[j] + I[j - 2*i]\n");
  CHECK_HAS(source,
            "    for (int64_t i = cn_ceil_div_i64(j - 4, 2); i < cn_ceil_div_i64(j + 1, 2); "
            "++i) {\n");
  cn_ctx_destroy(ctx);
}

/* ---- Convolution padded by valid indices (tile-edsl "Valid Indices") ---- */

static void test_conv_padding(void) {
  cn_ctx *ctx = test_ctx();
  /* I has padding margins 1:1 for the plain record below; the valid_only records must never
   * read them, so they are first set to 1000 by hand. */
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, (int64_t)4),
          *K = node(ctx, "K", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)4),
          *P = node(ctx, "P", CN_PREC_SINGLE, 1, (int64_t)4);
  cn_node *Op = node(ctx, "Op", CN_PREC_SINGLE, 1, (int64_t)4);
  CHECK_INT(cn_node_set_padding(I, 0, 1, 1), CN_OK);
  const double in[4] = {1, 2, 3, 4}, ker[3] = {1, 10, 100};
  CHECK_INT(cn_node_set_values(I, false, in, 4), CN_OK);
  CHECK_INT(cn_node_set_values(K, false, ker, 3), CN_OK);
  float *cells = cn_node_buffer(I, false);
  CHECK(cells != NULL);
  if (cells) cells[0] = cells[5] = 1000.0f;
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol iters[2] = {i, j};
  cn_index mo[1] = {cn_index_iter(i)}, mi[1] = {affine2(i, 1, j, 1, -1)},
           mk[1] = {cn_index_iter(j)};
  cn_proj_tensor rhs[2] = {tensor(I, mi), tensor(K, mk)};
  cn_buffer args[2] = {{I, false}, {K, false}};

  /* O[i] += I[i + j - 1] * K[j], O the size of I ('same'): sets reading I[-1] or I[4] are not
   * valid and contribute nothing, so O0 = I0*10 + I1*100 = 210, O1 = 1 + 20 + 300 = 321,
   * O2 = 2 + 30 + 400 = 432, O3 = 3 + 40 = 43. The guard 0 <= i + j - 1 < 4 becomes j's bounds
   * 1 - i and 5 - i, each of which passes the box 0..3 for some i: max(0, -i + 1) and
   * min(3, -i + 5). */
  int64_t lo[2] = {-3, -3}, hi[2] = {7, 7};
  cn_proj_space space = {2, iters, lo, hi, 0, NULL, true, true};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 2, rhs);
  const double conv[4] = {210, 321, 432, 43};
  const char *text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_MUL, args, proj),
                              "conv_valid", O, conv);
  CHECK_HAS(text, "for i in 0..4:\n  for j in max(0, -i + 1)..min(3, -i + 5):\n    O[i] := ");
  CHECK(text && !strstr(text, "padding")); /* a valid point never reads a margin */

  /* With `=+` (no clear) the sums add to what P holds (the sentinel 99 run_both puts there). */
  const double accumulated[4] = {99 + 210, 99 + 321, 99 + 432, 99 + 43};
  cn_proj *proj_p = cn_proj_create_ranged(ctx, &space, tensor(P, mo), 2, rhs);
  run_both(ctx, cn_asgn_accum(ctx, false, CN_OP_ADD, P, CN_OP_MUL, args, proj_p), "conv_acc", P,
           accumulated);

  /* The same convolution as a plain record reading the zero-padded I: the margins are reset to
   * 0 (the neutral of +) and read, and the results agree cell for cell. */
  int64_t sizes[2] = {4, 3};
  cn_proj *plain = cn_proj_create(ctx, 2, iters, sizes, tensor(Op, mo), 2, rhs);
  text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, Op, CN_OP_MUL, args, plain),
                  "conv_padded", Op, conv);
  CHECK_HAS(text, "reset padding of 'I'");
  cn_ctx_destroy(ctx);
}

/* ---- Negative iterator ranges ---- */

static void test_negative_ranges(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, (int64_t)3),
          *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)3);
  const double in[3] = {1, 2, 3};
  CHECK_INT(cn_node_set_values(I, false, in, 3), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index mo[1] = {affine1(i, 1, 3)}, mi[1] = {affine1(i, -1, -1)};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_buffer arg[1] = {{I, false}};

  /* O[i + 3] =: I[-i - 1] over i in -3..0, a plain ranged record (no conditions): i = -3 writes
   * O0 = I2 = 3, i = -2 writes O1 = I1 = 2, i = -1 writes O2 = I0 = 1. The map covers O once
   * (start value -3 + 3 = 0, three values): no clear, a plain write. */
  int64_t lo[1] = {-3}, hi[1] = {0};
  cn_proj_space space = {1, &i, lo, hi, 0, NULL, false, false};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  CHECK(proj && cn_proj_lhs_surjective(proj) && cn_proj_lhs_injective(proj));
  const double reversed[3] = {3, 2, 1};
  const char *text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, proj),
                              "reverse", O, reversed);
  check_text(text,
             "routine reverse\n"
             "  params: I#%d single[3], O#%d single[3]\n"
             "for i in -3..0:\n"
             "  O[i + 3] := I[-i - 1]\n",
             I->id, O->id);

  /* A range one too wide on the left: without valid_only it is rejected (i = -4 addresses O[-1]
   * and I[3]); with valid_only that point is skipped and i tightens back to -3..0. */
  int64_t lo4[1] = {-4};
  cn_proj_space wide = {1, &i, lo4, hi, 0, NULL, false, false};
  cn_proj *bad = cn_proj_create_ranged(ctx, &wide, tensor(O, mo), 1, rhs);
  CHECK(bad != NULL);
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, bad) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "ranges over [-1, 2]");
  wide.valid_only = true;
  cn_proj *ok = cn_proj_create_ranged(ctx, &wide, tensor(O, mo), 1, rhs);
  text = run_both(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, ok), "reverse_valid",
                  O, reversed);
  /* Tightened to the exact range, no guard, surjective and injective again: no clear at all. */
  check_text(text,
             "routine reverse_valid\n"
             "  params: I#%d single[3], O#%d single[3]\n"
             "for i in -3..0:\n"
             "  O[i + 3] := I[-i - 1]\n",
             I->id, O->id);
  cn_ctx_destroy(ctx);
}

/* ---- A static index under valid_only ---- */

/* O[i] =:+ I[t, i] with t a static index of range 5 while I has 3 rows: the bound on t becomes a
 * guard outside every loop (it mentions no iterator), so binding t = 3 or 4 reads nothing and
 * leaves O at 0; t = 1 copies row 1 (4, 5). The map i is injective: a clear to 0, then plain
 * writes. */
static void test_static_index(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)2),
          *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)2);
  const double in[6] = {1, 2, 4, 5, 7, 8};
  CHECK_INT(cn_node_set_values(I, false, in, 6), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), t = cn_symbol_create(ctx, "t", 5);
  int64_t lo[1] = {0}, hi[1] = {2};
  cn_index mo[1] = {cn_index_iter(i)}, mi[2] = {cn_index_iter(t), cn_index_iter(i)};
  cn_proj_space space = {1, &i, lo, hi, 0, NULL, true, true};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  cn_buffer arg[1] = {{I, false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, O, CN_OP_ID, arg, proj);
  CHECK_MSG(asgn != NULL, "%s", cn_ctx_error(ctx));
  const int64_t bound[3] = {1, 3, 4};
  const double expected[3][2] = {{4, 5}, {0, 0}, {0, 0}};
  for (int b = 0; b < 2 && asgn; b++) {
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[b], "row");
    CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
    if (!r) continue;
    if (b == 0)
      check_text(cn_routine_loops(r),
                 "routine row\n"
                 "  params: I#%d single[3, 2], O#%d single[2]\n"
                 "  static: t\n"
                 "# clear 'O' (#%d) to 0: cells no valid point writes stay 0\n"
                 "for i0 in 0..2:\n"
                 "  O[i0] := 0\n"
                 "if 0 <= t < 3:\n"
                 "  for i in 0..2:\n"
                 "    O[i] := I[t, i]\n",
                 I->id, O->id, O->id);
    else
      CHECK_HAS(cn_routine_source(r), "  if (0 <= t && t < 3) {\n    for (int64_t i = 0;");
    for (int k = 0; k < 3; k++) {
      double got[2], sentinel[2] = {SENTINEL, SENTINEL};
      CHECK_INT(cn_node_set_values(O, false, sentinel, 2), CN_OK);
      CHECK_INT(cn_routine_bind(r, t, bound[k]), CN_OK);
      CHECK_INT(cn_routine_run(r), CN_OK);
      CHECK_INT(cn_node_get_values(O, false, got, 2), CN_OK);
      CHECK_MSG(got[0] == expected[k][0] && got[1] == expected[k][1], "%s, t = %lld: O = (%g, %g)",
                backend_names[b], (long long)bound[k], got[0], got[1]);
    }
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Records: validation, dump, analyses, permutation ---- */

static void test_records(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, (int64_t)5),
          *K = node(ctx, "K", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_node *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol free_sym = cn_symbol_create(ctx, "t", 0);
  cn_symbol iters[2] = {i, j};
  int64_t lo[2] = {0, -1}, hi[2] = {3, 2};
  cn_index mo[1] = {cn_index_iter(i)}, mi[1] = {affine2(i, 2, j, 1, 0)}, mk[1] = {cn_index_iter(j)};
  cn_proj_tensor rhs[2] = {tensor(I, mi), tensor(K, mk)};
  cn_proj_constraint c = {cn_index_iter(j), 2};
  cn_proj_space space = {2, iters, lo, hi, 1, &c, true, true};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 2, rhs);
  CHECK_MSG(proj != NULL, "%s", cn_ctx_error(ctx));
  CHECK_STR(cn_proj_to_string(ctx, proj), "product space: i=3 j=-1..2\n"
                                          "constraints: 0 <= j < 2\n"
                                          "flags: valid_only zero_unreached\n"
                                          "lhs  [3]: (i)\n"
                                          "rhs1 [5]: (2*i + j)\n"
                                          "rhs2 [2]: (j)\n");
  /* Conditions hide which points are visited: not surjective; injectivity is about the box
   * (j varies with i fixed: not injective). */
  CHECK(!cn_proj_lhs_surjective(proj));
  CHECK(!cn_proj_lhs_injective(proj));

  /* The gradient of K (slot 2) from O (slot 0) alone drops I: I's bound becomes a constraint so
   * the permuted record visits the same points. */
  cn_proj *perm = cn_proj_permute(ctx, proj, 2, 1, (int[]){0});
  CHECK_STR(cn_proj_to_string(ctx, perm), "product space: i=3 j=-1..2\n"
                                          "constraints: 0 <= j < 2, 0 <= 2*i + j < 5\n"
                                          "flags: valid_only zero_unreached\n"
                                          "lhs  [2]: (j)\n"
                                          "rhs1 [3]: (i)\n");

  /* Errors: a range ending before it starts, a constraint on a symbol without a value, a
   * malformed constraint. */
  int64_t bad_hi[2] = {3, -2};
  cn_proj_space bad = space;
  bad.hi = bad_hi;
  CHECK(cn_proj_create_ranged(ctx, &bad, tensor(O, mo), 2, rhs) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "projections: iterator 'j' has range [-1, -2), which ends before it "
                               "starts");
  cn_proj_constraint on_free = {cn_index_iter(free_sym), 2};
  bad = space;
  bad.constraints = &on_free;
  CHECK(cn_proj_create_ranged(ctx, &bad, tensor(O, mo), 2, rhs) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "projections: constraint 0 uses 't', which is not a product "
                               "iterator and has no range");
  cn_proj_constraint malformed = {{CN_IDX_ITER, 2, {i, j}, {1, 1}, 0}, 2};
  bad = space;
  bad.constraints = &malformed;
  CHECK(cn_proj_create_ranged(ctx, &bad, tensor(O, mo), 2, rhs) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "projections: constraint 0 is Iter but not a single unit term "
                               "without offset");
  CHECK(cn_proj_create_ranged(ctx, NULL, tensor(O, mo), 2, rhs) == NULL);
  /* A static index with a range may appear in a constraint. */
  cn_symbol ranged = cn_symbol_create(ctx, "s", 4);
  cn_proj_constraint on_ranged = {affine2(i, 1, ranged, 1, 0), 3};
  bad = space;
  bad.constraints = &on_ranged;
  CHECK(cn_proj_create_ranged(ctx, &bad, tensor(O, mo), 2, rhs) != NULL);

  /* A vectorized write takes no valid_only record. */
  cn_node *words = cn_node_create(ctx, "w", CN_PREC_UINT4X32, 1, (int64_t[]){3});
  cn_node *bytes = cn_node_create(ctx, "b", CN_PREC_BYTE, 1, (int64_t[]){48});
  cn_index mb[1] = {affine1(i, 16, 0)}, mw[1] = {cn_index_iter(i)};
  cn_proj_tensor wrhs[1] = {tensor(words, mw)};
  int64_t vlo[1] = {0}, vhi[1] = {3};
  cn_proj_space vspace = {1, &i, vlo, vhi, 0, NULL, true, false};
  cn_proj *vproj = cn_proj_create_ranged(ctx, &vspace, tensor(bytes, mb), 1, wrhs);
  CHECK(vproj != NULL);
  CHECK(cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, bytes, (cn_buffer){words, false}, vproj) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "vectorized assignment: uint4x32_to_prec_uniform cannot use a "
                               "valid_only projections record");
  cn_ctx_destroy(ctx);
}

/* ---- The guard statement on hand-built procedures ---- */

/* out[i] := i (the loop variable as a value) */
static cn_ll_stmt *store_index(cn_ctx *ctx, cn_symbol i, int64_t offset) {
  return cn_lb_set(ctx, 0, cn_lb_indices(ctx, 1, affine1(i, 1, offset)),
                   cn_lb_index(ctx, cn_index_iter(i)));
}

static void test_guard_statement(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *out = node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t)8);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), t = cn_symbol_create(ctx, "t", 4);
  /* for i in 0..8:
   *   if 0 <= i < 8 and 0 <= i - t < 3:   (the first always holds: dropped)
   *     out[i] := i
   *   if 10 <= i + t < 20:                (i + t <= 10 only at i = 7, t = 3: kept)
   *     ...
   *   if 0 <= 2*i < 20 and i == 9:        (never: removed with its body) */
  cn_ll_cond keep[2] = {{cn_index_iter(i), 0, 8}, {affine2(i, 1, t, -1, 0), 0, 3}};
  cn_ll_cond late[1] = {{affine2(i, 1, t, 1, 0), 10, 20}};
  cn_ll_cond never[2] = {{affine1(i, 2, 0), 0, 20}, {cn_index_iter(i), 9, 10}};
  cn_ll_stmt *body = cn_lb_seq(ctx, 3, cn_lb_guard(ctx, 2, keep, store_index(ctx, i, 0)),
                               cn_lb_guard(ctx, 1, late, store_index(ctx, i, -7)),
                               cn_lb_guard(ctx, 2, never, store_index(ctx, i, 0)));
  const cn_ll_param params[1] = {{out, false}};
  cn_ll_proc *proc = cn_lb_proc(
      ctx, "guards", cn_lb_seq(ctx, 2, cn_lb_loop(ctx, i, 0, 8, body), cn_lb_seq(ctx, 0)), 1,
      params, 1, &t);
  check_text(cn_ll_to_string(ctx, proc),
             "routine guards\n"
             "  params: out#%d single[8]\n"
             "  static: t\n"
             "for i in 0..8:\n"
             "  if 0 <= i < 8 and 0 <= i - t < 3:\n"
             "    out[i] := i\n"
             "  if 10 <= i + t < 20:\n"
             "    out[i - 7] := i\n"
             "  if 0 <= 2*i < 20 and i == 9:\n"
             "    out[i] := i\n",
             out->id);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  check_text(cn_ll_to_string(ctx, proc),
             "routine guards\n"
             "  params: out#%d single[8]\n"
             "  static: t\n"
             "for i in 0..8:\n"
             "  if 0 <= i - t < 3:\n"
             "    out[i] := i\n"
             "  if 10 <= i + t < 20:\n"
             "    out[i - 7] := i\n",
             out->id);

  /* Both backends, t = 3: the first guard holds for i in 3..5 (out3..5 = 3, 4, 5), the second
   * only at i = 7 (out0 = 7); the rest keeps the sentinel. */
  const double expected[8] = {7, SENTINEL, SENTINEL, 3, 4, 5, SENTINEL, SENTINEL};
  double init[8], got[8];
  for (int k = 0; k < 8; k++) init[k] = SENTINEL;
  for (int b = 0; b < 2; b++) {
    const cn_backend *backend = b ? &cn_backend_c : &cn_backend_interp;
    CHECK_INT(cn_node_set_values(out, false, init, 8), CN_OK);
    void *compiled = NULL;
    const char *source = NULL;
    CHECK_MSG(backend->compile(ctx, proc, &compiled, &source) == CN_OK, "%s", cn_ctx_error(ctx));
    if (!compiled) continue;
    if (b) CHECK_HAS(source, "    if (0 <= i - t && i - t < 3) {\n      out_");
    if (b) CHECK_HAS(source, "    if (10 <= i + t && i + t < 20) {\n");
    void *buffers[1] = {cn_node_buffer(out, false)};
    int64_t syms[1] = {3};
    CHECK_INT(backend->run(ctx, compiled, buffers, syms), CN_OK);
    backend->release(compiled);
    CHECK_INT(cn_node_get_values(out, false, got, 8), CN_OK);
    for (int k = 0; k < 8; k++)
      CHECK_MSG(got[k] == expected[k], "%s: out[%d] = %g, expected %g", backend_names[b], k, got[k],
                expected[k]);
  }

  /* A guard whose conditions all hold becomes its body; one with an empty body disappears. */
  cn_ll_cond always[1] = {{cn_index_iter(i), 0, 8}}, middle[1] = {{cn_index_iter(i), 2, 5}};
  cn_ll_proc *proc2 = cn_lb_proc(
      ctx, "always",
      cn_lb_seq(ctx, 2,
                cn_lb_loop(ctx, i, 0, 8, cn_lb_guard(ctx, 1, always, store_index(ctx, i, 0))),
                cn_lb_loop(ctx, i, 0, 8, cn_lb_guard(ctx, 1, middle, cn_lb_seq(ctx, 0)))),
      1, params, 0, NULL);
  CHECK_INT(cn_ll_simplify(ctx, proc2), CN_OK);
  check_text(cn_ll_to_string(ctx, proc2),
             "routine always\n"
             "  params: out#%d single[8]\n"
             "for i in 0..8:\n"
             "  out[i] := i\n",
             out->id);
  cn_ctx_destroy(ctx);
}

/* out[i] := out[i] + amount */
static cn_ll_stmt *add_at(cn_ctx *ctx, cn_symbol i, double amount) {
  return cn_lb_accum(ctx, 0, CN_PREC_SINGLE, cn_lb_indices(ctx, 1, cn_index_iter(i)), CN_OP_ADD,
                     cn_lb_num(ctx, CN_PREC_SINGLE, amount));
}

/* Runs proc on both backends from `init` in out; out must then hold `expected`. Returns the C
 * source (arena copy). */
static const char *run_proc_both(cn_ctx *ctx, const cn_ll_proc *proc, cn_node *out,
                                 const int64_t *syms, const double *init, const double *expected) {
  int64_t n = cn_node_numel(out);
  const char *c_source = NULL;
  for (int b = 0; b < 2; b++) {
    const cn_backend *backend = b ? &cn_backend_c : &cn_backend_interp;
    CHECK_INT(cn_node_set_values(out, false, init, (size_t)n), CN_OK);
    void *compiled = NULL;
    const char *source = NULL;
    CHECK_MSG(backend->compile(ctx, proc, &compiled, &source) == CN_OK, "%s: %s", proc->name,
              cn_ctx_error(ctx));
    if (!compiled) continue;
    if (b) c_source = cn_strdup(ctx, source);
    void *buffers[1] = {cn_node_buffer(out, false)};
    CHECK_INT(backend->run(ctx, compiled, buffers, syms), CN_OK);
    backend->release(compiled);
    double got[16];
    CHECK(n <= 16);
    CHECK_INT(cn_node_get_values(out, false, got, (size_t)n), CN_OK);
    for (int64_t k = 0; k < n; k++)
      CHECK_MSG(got[k] == expected[k], "%s on %s: out[%lld] = %g, expected %g", proc->name,
                backend_names[b], (long long)k, got[k], expected[k]);
  }
  return c_source;
}

/* Guards that the simplifier turns into loop bounds, on hand-built procedures. */
static void test_guards_to_bounds(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *count = node(ctx, "count", CN_PREC_SINGLE, 1, (int64_t)5),
          *out = node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t)8);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0);

  /* Empty effective ranges. First nest: 0 <= i - k - 2 < 5 holds for k in [i - 6, i - 1); the
   * lower bound never passes the box's 0 (dropped), the upper one is at most 3 (it replaces the
   * box's end, and the box shrinks to 0..3): for i = 0 and 1 the range is empty, and the counts
   * are 0, 0, 1, 2, 3. Second nest: k >= i (from 0 <= k - i) and k < i (from i - k - 1 >= 0)
   * contradict for every i, which neither condition shows alone: k runs over i..i, nothing. */
  cn_ll_cond tri[1] = {{affine2(i, 1, k, -1, -2), 0, 5}};
  cn_ll_cond none[2] = {{affine2(k, 1, i, -1, 0), 0, 10}, {affine2(i, 1, k, -1, -1), 0, 10}};
  cn_ll_stmt *body =
      cn_lb_seq(ctx, 2,
                cn_lb_loop(ctx, i, 0, 5,
                           cn_lb_loop(ctx, k, 0, 5, cn_lb_guard(ctx, 1, tri, add_at(ctx, i, 1)))),
                cn_lb_loop(ctx, i, 0, 3,
                           cn_lb_loop(ctx, k, 0, 4, cn_lb_guard(ctx, 2, none, add_at(ctx, i, 7)))));
  cn_ll_proc *proc =
      cn_lb_proc(ctx, "empty_ranges", body, 1, &(cn_ll_param){count, false}, 0, NULL);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  check_text(cn_ll_to_string(ctx, proc),
             "routine empty_ranges\n"
             "  params: count#%d single[5]\n"
             "for i in 0..5:\n"
             "  for k in 0..i - 1:\n"
             "    count[i] := count[i] + 1\n"
             "for i in 0..3:\n"
             "  for k in i..i:\n"
             "    count[i] := count[i] + 7\n",
             count->id);
  const double zeros[5] = {0}, counts[5] = {0, 0, 1, 2, 3};
  const char *source = run_proc_both(ctx, proc, count, NULL, zeros, counts);
  CHECK_HAS(source, "    for (int64_t k = 0; k < i - 1; ++k) {\n");
  CHECK_HAS(source, "    for (int64_t k = i; k < i; ++k) {\n");

  /* Bounds over static indices: t has the range 4, so t..t + 3 provably stays in 0..8 and the
   * box's edges drop out; u has no range, so they stay: max(0, u)..min(8, u + 2). With t = 3 the
   * first nest writes out3..5 = 3, 4, 5; with u = 7 the second writes out7 = 7 only (u + 2 = 9
   * is clamped to 8). */
  cn_symbol t = cn_symbol_create(ctx, "t", 4), u = cn_symbol_create(ctx, "u", 0);
  cn_ll_cond near_t[1] = {{affine2(i, 1, t, -1, 0), 0, 3}};
  cn_ll_cond near_u[1] = {{affine2(i, 1, u, -1, 0), 0, 2}};
  body = cn_lb_seq(ctx, 2,
                   cn_lb_loop(ctx, i, 0, 8, cn_lb_guard(ctx, 1, near_t, store_index(ctx, i, 0))),
                   cn_lb_loop(ctx, i, 0, 8, cn_lb_guard(ctx, 1, near_u, store_index(ctx, i, 0))));
  cn_symbol statics[2] = {t, u};
  proc = cn_lb_proc(ctx, "static_bounds", body, 1, &(cn_ll_param){out, false}, 2, statics);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  check_text(cn_ll_to_string(ctx, proc),
             "routine static_bounds\n"
             "  params: out#%d single[8]\n"
             "  static: t, u\n"
             "for i in t..t + 3:\n"
             "  out[i] := i\n"
             "for i in max(0, u)..min(8, u + 2):\n"
             "  out[i] := i\n",
             out->id);
  double init[8];
  for (int c = 0; c < 8; c++) init[c] = SENTINEL;
  const double written[8] = {SENTINEL, SENTINEL, SENTINEL, 3, 4, 5, SENTINEL, 7};
  const int64_t values[2] = {3, 7};
  source = run_proc_both(ctx, proc, out, values, init, written);
  CHECK_HAS(source, "  for (int64_t i = t; i < t + 3; ++i) {\n");
  CHECK_HAS(source, "  for (int64_t i = cn_max_i64(0, u); i < cn_min_i64(8, u + 2); ++i) {\n");
  cn_ctx_destroy(ctx);
}

/* ---- Allocation failures ---- */

/* The round-up max pool (guards, a marking pass, tightening) from scratch in a fresh context;
 * the status of the first failing step. */
static cn_status pool_pipeline(cn_ctx *ctx, double *out) {
  const double in[5] = {3, 1, 4, 1, 5};
  cn_node *I = node(ctx, "I", CN_PREC_SINGLE, 1, (int64_t)5),
          *O = node(ctx, "O", CN_PREC_SINGLE, 1, (int64_t)3);
  if (!I || !O || cn_node_set_values(I, false, in, 5) != CN_OK) return cn_ctx_status(ctx);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  if (i < 0 || j < 0) return cn_ctx_status(ctx);
  cn_symbol iters[2] = {i, j};
  int64_t lo[2] = {-10, -10}, hi[2] = {10, 10};
  cn_proj_constraint j_lt_2 = {cn_index_iter(j), 2};
  cn_index mo[1] = {cn_index_iter(i)}, mi[1] = {affine2(i, 2, j, 1, 0)};
  cn_proj_space space = {2, iters, lo, hi, 1, &j_lt_2, true, true};
  cn_proj_tensor rhs[1] = {tensor(I, mi)};
  cn_proj *proj = cn_proj_create_ranged(ctx, &space, tensor(O, mo), 1, rhs);
  cn_buffer arg[1] = {{I, false}};
  cn_asgn *asgn = proj ? cn_asgn_accum(ctx, true, CN_OP_MAX, O, CN_OP_ID, arg, proj) : NULL;
  cn_routine *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_INTERP, "pool") : NULL;
  if (!r) return cn_ctx_status(ctx);
  cn_status st = cn_routine_run(r);
  if (st == CN_OK) st = cn_node_get_values(O, false, out, 3);
  cn_routine_free(r);
  return st;
}

static void test_allocation_failures(void) {
  int failures = 0, successes = 0;
  for (long n = 1; n < 200; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    double out[3] = {0};
    cn_status st = pool_pipeline(ctx, out);
    if (st == CN_OK) {
      successes++;
      CHECK(out[0] == 3 && out[1] == 4 && out[2] == 5);
    } else {
      failures++;
      CHECK_MSG(st == CN_ERR_NOMEM, "allocation %ld: status %d: %s", n, (int)st, cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
  }
  CHECK(failures > 10);
  CHECK(successes > 0);
}

int main(void) {
  /* The goldens here are the lowering's loop IR and C (the schedule's are tested in test_sched):
   * routines are compiled unscheduled. */
  setenv("CANNL_SCHEDULE", "none", 1);
  test_max_pool();
  test_skipping();
  test_cumsum();
  test_triangle_count();
  test_bounds_non_unit();
  test_conv_padding();
  test_negative_ranges();
  test_static_index();
  test_records();
  test_guard_statement();
  test_guards_to_bounds();
  test_allocation_failures();
  CHECK_DONE();
}
