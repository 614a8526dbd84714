/* Tests of the high-level IR: canonical index forms, index ranges, the surjectivity and
 * injectivity of LHS maps on the cases of contraction-is-emergent and convolution-is-a-contraction
 * (expected answers worked out by hand in the comments), projections records and their dump, node
 * buffers with padding (checked in the raw padded buffer) and on 64-byte boundaries, every
 * validation error of the
 * constructors, and the %cd printer. */
#include "check.h"

#include "cannl.h"
#include "ir/ir.h"

#include <stdlib.h>

static cn_index I(cn_symbol s) {
  return cn_index_iter(s);
}
static cn_index F(int64_t c) {
  return cn_index_fixed(c);
}
static cn_index A1(cn_symbol s, int64_t c, int64_t off) {
  return cn_index_affine(1, &s, &c, off);
}
static cn_index A2(cn_symbol s1, int64_t c1, cn_symbol s2, int64_t c2, int64_t off) {
  cn_symbol syms[2] = {s1, s2};
  int64_t coeffs[2] = {c1, c2};
  return cn_index_affine(2, syms, coeffs, off);
}

/* The index as cn_index_print writes it (a static buffer, valid until the next call). */
static const char *index_text(const cn_ctx *ctx, cn_index idx) {
  static char text[256];
  cn_sbuf sb = {0};
  cn_index_print(&sb, ctx, &idx);
  snprintf(text, sizeof text, "%s", sb.data ? sb.data : "");
  cn_sbuf_free(&sb);
  return text;
}

/* ---- Canonical forms ---- */

static void test_canonical_forms(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0), o = cn_symbol_create(ctx, "o", 0),
            m = cn_symbol_create(ctx, "m", 0);

  cn_index fixed = cn_index_affine(0, NULL, NULL, 5);
  CHECK(fixed.kind == CN_IDX_FIXED && fixed.n_terms == 0 && fixed.offset == 5);
  cn_index iter = A1(i, 1, 0);
  CHECK(iter.kind == CN_IDX_ITER && iter.n_terms == 1 && iter.syms[0] == i && iter.coeffs[0] == 1 &&
        iter.offset == 0);
  CHECK(memcmp(&iter, &(cn_index){0}, sizeof iter) != 0);
  cn_index direct = I(i);
  CHECK(memcmp(&iter, &direct, sizeof iter) == 0);
  /* One unit term with an offset stays Affine. */
  cn_index shifted = A1(i, 1, 3);
  CHECK(shifted.kind == CN_IDX_AFFINE && shifted.n_terms == 1 && shifted.offset == 3);
  /* Terms are ordered by symbol id: j + 2i is stored 2i + j, equal to the other spelling. */
  cn_index ji = A2(j, 1, i, 2, 0), ij = A2(i, 2, j, 1, 0);
  CHECK(ji.kind == CN_IDX_AFFINE && ji.n_terms == 2 && ji.syms[0] == i && ji.coeffs[0] == 2 &&
        ji.syms[1] == j && ji.coeffs[1] == 1);
  CHECK(memcmp(&ji, &ij, sizeof ji) == 0);
  /* Duplicates are summed: i + j + i = 2i + j. */
  cn_index dup = cn_index_affine(3, (cn_symbol[]){i, j, i}, (int64_t[]){1, 1, 1}, 0);
  CHECK(memcmp(&dup, &ij, sizeof dup) == 0);
  /* Cancelling terms vanish: i - i + 7 is Fixed 7; i + 2j - 2j is Iter i. */
  cn_index cancel = cn_index_affine(2, (cn_symbol[]){i, i}, (int64_t[]){1, -1}, 7);
  CHECK(cancel.kind == CN_IDX_FIXED && cancel.n_terms == 0 && cancel.offset == 7);
  cn_index back = cn_index_affine(3, (cn_symbol[]){j, i, j}, (int64_t[]){2, 1, -2}, 0);
  CHECK(memcmp(&back, &direct, sizeof back) == 0);
  /* Zero coefficients drop out. */
  cn_index zero = cn_index_affine(2, (cn_symbol[]){i, j}, (int64_t[]){0, 3}, 0);
  CHECK(zero.kind == CN_IDX_AFFINE && zero.n_terms == 1 && zero.syms[0] == j &&
        zero.coeffs[0] == 3);
  /* Five distinct symbols are too many, unless one cancels. */
  cn_index five = cn_index_affine(5, (cn_symbol[]){i, j, k, o, m}, (int64_t[]){1, 1, 1, 1, 1}, 0);
  CHECK(five.kind == CN_IDX_AFFINE && five.n_terms == -1);
  cn_index four =
      cn_index_affine(6, (cn_symbol[]){m, i, j, k, o, m}, (int64_t[]){1, 1, 1, 1, 1, -1}, 0);
  CHECK(four.kind == CN_IDX_AFFINE && four.n_terms == 4 && four.syms[0] == i && four.syms[3] == o);
  /* Overflowing coefficients and a negative count are invalid. */
  cn_index big = cn_index_affine(2, (cn_symbol[]){i, i}, (int64_t[]){INT64_MAX, 1}, 0);
  CHECK(big.n_terms == -1);
  CHECK(cn_index_affine(-1, NULL, NULL, 0).n_terms == -1);

  CHECK(cn_index_mentions(&ij, j) && cn_index_mentions(&ij, i) && !cn_index_mentions(&ij, k));
  CHECK(!cn_index_mentions(&fixed, i));

  CHECK_STR(index_text(ctx, I(i)), "i");
  CHECK_STR(index_text(ctx, F(3)), "3");
  CHECK_STR(index_text(ctx, F(-3)), "-3");
  cn_symbol o2 = cn_symbol_create(ctx, "o", 0), k2 = cn_symbol_create(ctx, "k", 0);
  CHECK_STR(index_text(ctx, A2(k2, 1, o2, 2, -1)), "2*o + k - 1");
  CHECK_STR(index_text(ctx, A2(o, 2, k, 1, -1)), "k + 2*o - 1"); /* k was created first */
  CHECK_STR(index_text(ctx, A1(i, -1, 4)), "-i + 4");
  CHECK_STR(index_text(ctx, A2(i, -2, k, -1, -5)), "-2*i - k - 5");
  CHECK_STR(index_text(ctx, A2(j, 3, i, 1, 2)), "i + 3*j + 2");
  CHECK_STR(index_text(ctx, five), "<invalid index>");
  cn_ctx_destroy(ctx);
}

/* ---- Projections records ---- */

static cn_proj *lhs_only(cn_ctx *ctx, int n, const cn_symbol *iters, const int64_t *sizes, int rank,
                         const int64_t *dims, const cn_index *map) {
  cn_proj *p = cn_proj_create(ctx, n, iters, sizes, (cn_proj_tensor){rank, dims, map}, 0, NULL);
  CHECK_MSG(p != NULL, "%s", cn_ctx_error(ctx));
  return p;
}

static void expect_proj_error(cn_ctx *ctx, cn_proj *p, const char *needle) {
  CHECK(p == NULL);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), needle);
  cn_ctx_clear_error(ctx);
}

static void test_proj_create(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  int64_t d3[1] = {3};
  cn_index mi[1] = {I(i)};
  cn_proj_tensor t3 = {1, d3, mi};

  expect_proj_error(ctx, cn_proj_create(ctx, -1, NULL, NULL, t3, 0, NULL), "-1 product");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, d3, t3, 4, (cn_proj_tensor[]){t3, t3, t3, t3}),
                    "4 RHS tensors, expected 0..3");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, NULL, t3, 0, NULL), "sizes array is NULL");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, d3, t3, 1, NULL), "rhs array is NULL");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, (cn_symbol[]){77}, d3, t3, 0, NULL),
                    "symbol 77, which does not exist");
  expect_proj_error(ctx,
                    cn_proj_create(ctx, 2, (cn_symbol[]){i, i}, (int64_t[]){3, 3}, t3, 0, NULL),
                    "iterator 'i' appears twice in the product space (positions 0 and 1)");
  expect_proj_error(ctx,
                    cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){3, -2}, t3, 0, NULL),
                    "iterator 'j' has negative size -2");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, d3, (cn_proj_tensor){17, d3, mi}, 0, NULL),
                    "lhs has rank 17, outside 0..16");
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, d3, t3, 1, (cn_proj_tensor[]){{1, NULL, mi}}),
                    "rhs1 has rank 1 but its dims array is NULL");
  expect_proj_error(
      ctx, cn_proj_create(ctx, 1, &i, d3, t3, 2, (cn_proj_tensor[]){t3, {1, (int64_t[]){-4}, mi}}),
      "dim -4 of axis 0 of rhs2 is negative");
  cn_index invalid =
      cn_index_affine(5, (cn_symbol[]){0, 1, 2, 3, 4}, (int64_t[]){1, 1, 1, 1, 1}, 0);
  expect_proj_error(ctx, cn_proj_create(ctx, 1, &i, d3, (cn_proj_tensor){1, d3, &invalid}, 0, NULL),
                    "the index of axis 0 of lhs is invalid (more than 4 distinct symbols");
  cn_index bad_iter = {CN_IDX_ITER, 1, {i}, {2}, 0};
  expect_proj_error(ctx,
                    cn_proj_create(ctx, 1, &i, d3, (cn_proj_tensor){1, d3, &bad_iter}, 0, NULL),
                    "is Iter but not a single unit term");
  cn_index unknown = I(99);
  expect_proj_error(ctx,
                    cn_proj_create(ctx, 1, &i, d3, t3, 1, (cn_proj_tensor[]){{1, d3, &unknown}}),
                    "the index of axis 0 of rhs1 mentions symbol 99, which does not exist");

  /* Success: the record copies its arrays and canonicalizes an index given as a literal. */
  cn_symbol iters[2] = {i, j};
  int64_t sizes[2] = {3, 4}, dims[2] = {3, 4};
  cn_index map[2] = {{CN_IDX_AFFINE, 1, {i}, {1}, 0}, I(j)};
  cn_proj *p = cn_proj_create(ctx, 2, iters, sizes, (cn_proj_tensor){2, dims, map}, 0, NULL);
  CHECK_MSG(p != NULL, "%s", cn_ctx_error(ctx));
  iters[0] = j;
  sizes[0] = 9;
  dims[0] = 9;
  map[1] = F(0);
  CHECK(p->iters[0] == i && p->sizes[0] == 3 && p->slot[CN_SLOT_LHS].dims[0] == 3);
  CHECK(p->slot[CN_SLOT_LHS].map[0].kind == CN_IDX_ITER);
  CHECK(p->slot[CN_SLOT_LHS].map[1].kind == CN_IDX_ITER &&
        p->slot[CN_SLOT_LHS].map[1].syms[0] == j);
  CHECK_INT(cn_proj_iter_size(p, j), 4);
  CHECK_INT(cn_proj_iter_size(p, 55), 0);
  /* A scalar LHS over an empty product space. */
  CHECK(cn_proj_create(ctx, 0, NULL, NULL, (cn_proj_tensor){0, NULL, NULL}, 0, NULL) != NULL);
  cn_ctx_destroy(ctx);
}

static void test_bounds(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol o = cn_symbol_create(ctx, "o", 0), k = cn_symbol_create(ctx, "k", 0),
            b = cn_symbol_create(ctx, "b", 3), u = cn_symbol_create(ctx, "u", 0),
            z = cn_symbol_create(ctx, "z", 0);
  cn_proj *p = lhs_only(ctx, 2, (cn_symbol[]){o, k}, (int64_t[]){4, 3}, 0, NULL, NULL);
  int64_t lo = 99, hi = 99;
  cn_index idx = I(o);
  CHECK(cn_index_bounds(ctx, &idx, p, &lo, &hi) && lo == 0 && hi == 3);
  idx = A2(o, 2, k, 1, -1); /* 2*[0,3] + [0,2] - 1 */
  CHECK(cn_index_bounds(ctx, &idx, p, &lo, &hi) && lo == -1 && hi == 7);
  idx = A2(o, -3, k, 2, 10); /* -3*[0,3] + 2*[0,2] + 10 */
  CHECK(cn_index_bounds(ctx, &idx, p, &lo, &hi) && lo == 1 && hi == 14);
  idx = F(5);
  CHECK(cn_index_bounds(ctx, &idx, p, &lo, &hi) && lo == 5 && hi == 5);
  idx = A2(b, 1, o, 1, 1); /* b is free with range 3: [0,2] + [0,3] + 1 */
  CHECK(cn_index_bounds(ctx, &idx, p, &lo, &hi) && lo == 1 && hi == 6);
  idx = I(u); /* free without a range */
  CHECK(!cn_index_bounds(ctx, &idx, p, &lo, &hi));
  idx = cn_index_affine(5, (cn_symbol[]){o, k, b, u, z}, (int64_t[]){1, 1, 1, 1, 1}, 0);
  CHECK(!cn_index_bounds(ctx, &idx, p, &lo, &hi));
  idx = A1(o, INT64_MAX / 2, 0); /* (2^62)*3 overflows */
  CHECK(!cn_index_bounds(ctx, &idx, p, &lo, &hi));
  /* A size-0 iterator: the product space is empty, no index is ever evaluated. */
  cn_proj *empty = lhs_only(ctx, 2, (cn_symbol[]){o, k}, (int64_t[]){4, 0}, 0, NULL, NULL);
  idx = I(k);
  CHECK(cn_index_bounds(ctx, &idx, empty, &lo, &hi) && lo > hi);
  idx = I(o);
  CHECK(cn_index_bounds(ctx, &idx, empty, &lo, &hi) && lo > hi);
  cn_ctx_destroy(ctx);
}

/* ---- Surjectivity and injectivity ---- */

#define EXPECT_PROPS(p, surj, inj)                                                                 \
  do {                                                                                             \
    const cn_proj *p_ = (p);                                                                       \
    CHECK_MSG(p_ &&cn_proj_lhs_surjective(p_) == (surj), "%s: surjective should be %d", #p,        \
              (int)(surj));                                                                        \
    CHECK_MSG(p_ &&cn_proj_lhs_injective(p_) == (inj), "%s: injective should be %d", #p,           \
              (int)(inj));                                                                         \
  } while (0)

static void test_analyses(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0), b = cn_symbol_create(ctx, "b", 3);
  cn_symbol ijk[3] = {i, j, k};

  /* matmul c[i,k] over {i,j,k}: every (i,k) cell is written, by all 4 values of j. */
  cn_proj *matmul =
      lhs_only(ctx, 3, ijk, (int64_t[]){3, 4, 5}, 2, (int64_t[]){3, 5}, (cn_index[]){I(i), I(k)});
  EXPECT_PROPS(matmul, true, false);
  /* pointwise r[i,j] over {i,j}: a bijection. */
  cn_proj *pointwise =
      lhs_only(ctx, 2, ijk, (int64_t[]){3, 4}, 2, (int64_t[]){3, 4}, (cn_index[]){I(i), I(j)});
  EXPECT_PROPS(pointwise, true, true);
  /* A scalar LHS s[0] written from a 2x3 product: its one cell, six times. */
  cn_proj *scalar = lhs_only(ctx, 2, ijk, (int64_t[]){2, 3}, 1, (int64_t[]){1}, (cn_index[]){F(0)});
  EXPECT_PROPS(scalar, true, false);
  /* Fixed 1 on an axis of size 2 leaves cell 0 unwritten. */
  cn_proj *fixed1 = lhs_only(ctx, 1, &i, (int64_t[]){2}, 1, (int64_t[]){2}, (cn_index[]){F(1)});
  EXPECT_PROPS(fixed1, false, false);

  /* The convolution input map o + k written as an LHS, o < 4, k < 3: o + k covers 0..5, so a size
   * of O + K - 1 = 6 is covered and 7 is not; (o,k) = (1,0) and (0,1) collide. */
  cn_proj *conv6 = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){4, 3}, 1, (int64_t[]){6},
                            (cn_index[]){A2(i, 1, k, 1, 0)});
  EXPECT_PROPS(conv6, true, false);
  cn_proj *conv7 = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){4, 3}, 1, (int64_t[]){7},
                            (cn_index[]){A2(i, 1, k, 1, 0)});
  EXPECT_PROPS(conv7, false, false);

  /* Interleave into size 2n = 6, i < 3: 2i hits 0, 2, 4 and 2i + 1 hits 1, 3, 5, each once. */
  cn_proj *even =
      lhs_only(ctx, 1, &i, (int64_t[]){3}, 1, (int64_t[]){6}, (cn_index[]){A1(i, 2, 0)});
  EXPECT_PROPS(even, false, true);
  cn_proj *odd = lhs_only(ctx, 1, &i, (int64_t[]){3}, 1, (int64_t[]){6}, (cn_index[]){A1(i, 2, 1)});
  EXPECT_PROPS(odd, false, true);
  /* Strided with a second iterator filling the gaps: 2o + k, o < 3, k < 2 is 0..5 once each. */
  cn_proj *strided = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){3, 2}, 1, (int64_t[]){6},
                              (cn_index[]){A2(i, 2, k, 1, 0)});
  EXPECT_PROPS(strided, true, true);
  /* 2o + k - 1 over size 5: values -1..4 (the -1 lands in a margin), each once. */
  cn_proj *shifted = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){3, 2}, 1, (int64_t[]){5},
                              (cn_index[]){A2(i, 2, k, 1, -1)});
  EXPECT_PROPS(shifted, true, true);
  /* With offset +1 cell 0 is never written. */
  cn_proj *late = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){3, 2}, 1, (int64_t[]){6},
                           (cn_index[]){A2(i, 2, k, 1, 1)});
  EXPECT_PROPS(late, false, true);
  /* 2o + k with k < 3 overlaps (o=0,k=2 and o=1,k=0) but covers 0..6. */
  cn_proj *overlap = lhs_only(ctx, 2, (cn_symbol[]){i, k}, (int64_t[]){3, 3}, 1, (int64_t[]){7},
                              (cn_index[]){A2(i, 2, k, 1, 0)});
  EXPECT_PROPS(overlap, true, false);
  /* i + 3j with i < 2 leaves gaps (2, 5, ...). */
  cn_proj *gaps = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3}, 1, (int64_t[]){8},
                           (cn_index[]){A2(i, 1, j, 3, 0)});
  EXPECT_PROPS(gaps, false, true);
  /* Mixed radix 3i + j, j < 3: 0..11 once each, whichever order the terms are written in. */
  cn_proj *radix = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){4, 3}, 1, (int64_t[]){12},
                            (cn_index[]){A2(j, 1, i, 3, 0)});
  EXPECT_PROPS(radix, true, true);
  /* 3i + j with j < 4: covers 0..12 but 3*1 + 0 = 3*0 + 3. */
  cn_proj *radix4 = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){4, 4}, 1, (int64_t[]){13},
                             (cn_index[]){A2(i, 3, j, 1, 0)});
  EXPECT_PROPS(radix4, true, false);
  /* A negative coefficient: 2 - i, i < 3, is 2, 1, 0. */
  cn_proj *reversed =
      lhs_only(ctx, 1, &i, (int64_t[]){3}, 1, (int64_t[]){3}, (cn_index[]){A1(i, -1, 2)});
  EXPECT_PROPS(reversed, true, true);
  /* 3i - j + 2, i < 3, j < 3: 2,1,0 then 5,4,3 then 8,7,6 — 0..8 each once. */
  cn_proj *signed_radix = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){3, 3}, 1,
                                   (int64_t[]){9}, (cn_index[]){A2(i, 3, j, -1, 2)});
  EXPECT_PROPS(signed_radix, true, true);

  /* The diagonal written, e[i,i] =: v[i]: off-diagonal cells never written, no cell twice. */
  cn_proj *diag_write =
      lhs_only(ctx, 1, &i, (int64_t[]){3}, 2, (int64_t[]){3, 3}, (cn_index[]){I(i), I(i)});
  EXPECT_PROPS(diag_write, false, true);
  /* The diagonal read, d[i] =: m[i,i]: the LHS map is just i over {i}, a bijection. */
  cn_proj *diag_read = cn_proj_create(
      ctx, 1, &i, (int64_t[]){3}, (cn_proj_tensor){1, (int64_t[]){3}, (cn_index[]){I(i)}}, 1,
      (cn_proj_tensor[]){{2, (int64_t[]){3, 3}, (cn_index[]){I(i), I(i)}}});
  EXPECT_PROPS(diag_read, true, true);

  /* Injectivity needs the fixed point: axis 0 is i + j (ambiguous alone), axis 1 is j, which
   * determines j, after which axis 0 determines i. */
  cn_proj *chained = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){3, 3}, 2, (int64_t[]){5, 3},
                              (cn_index[]){A2(i, 1, j, 1, 0), I(j)});
  CHECK(chained && cn_proj_lhs_injective(chained));
  /* ... and surjectivity fails: j in two axes of size > 1 (cell (4, 0) is not reached). */
  CHECK(chained && !cn_proj_lhs_surjective(chained));

  /* Size-1 edge cases: an iterator of size 1 takes one value and needs no LHS axis. */
  cn_proj *unit = lhs_only(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){3, 1}, 1, (int64_t[]){3},
                           (cn_index[]){I(i)});
  EXPECT_PROPS(unit, true, true);
  cn_proj *unit_diag =
      lhs_only(ctx, 1, &i, (int64_t[]){1}, 2, (int64_t[]){1, 1}, (cn_index[]){I(i), I(i)});
  EXPECT_PROPS(unit_diag, true, true);
  /* i shared by two axes of size 1: i = 0 reaches (0, 0), but (i, i - 1) would need i = 0 and
   * i = 1 at once. */
  cn_proj *shared =
      lhs_only(ctx, 1, &i, (int64_t[]){2}, 2, (int64_t[]){1, 1}, (cn_index[]){I(i), I(i)});
  EXPECT_PROPS(shared, true, true);
  cn_proj *clash =
      lhs_only(ctx, 1, &i, (int64_t[]){2}, 2, (int64_t[]){1, 1}, (cn_index[]){I(i), A1(i, 1, -1)});
  EXPECT_PROPS(clash, false, true);

  /* Size-0 edge cases: an empty product space writes nothing (vacuously injective), which covers
   * only an LHS without cells. */
  cn_proj *empty = lhs_only(ctx, 1, &i, (int64_t[]){0}, 1, (int64_t[]){3}, (cn_index[]){I(i)});
  EXPECT_PROPS(empty, false, true);
  cn_proj *empty_lhs = lhs_only(ctx, 1, &i, (int64_t[]){0}, 1, (int64_t[]){0}, (cn_index[]){I(i)});
  EXPECT_PROPS(empty_lhs, true, true);
  cn_proj *zero_axis =
      lhs_only(ctx, 1, &i, (int64_t[]){3}, 2, (int64_t[]){0, 3}, (cn_index[]){F(0), I(i)});
  EXPECT_PROPS(zero_axis, true, true);

  /* Rank-0 LHS: a sum over everything, and a copy of a scalar with no loop at all. */
  cn_proj *sum = lhs_only(ctx, 2, ijk, (int64_t[]){2, 3}, 0, NULL, NULL);
  EXPECT_PROPS(sum, true, false);
  cn_proj *scalar_copy = lhs_only(ctx, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT_PROPS(scalar_copy, true, true);

  /* A free (static) symbol in the LHS map: its value is unknown, so coverage is not claimed;
   * it is constant during a run, so it does not break injectivity. */
  cn_proj *free_write =
      lhs_only(ctx, 1, &i, (int64_t[]){4}, 2, (int64_t[]){3, 4}, (cn_index[]){I(b), I(i)});
  EXPECT_PROPS(free_write, false, true);
  cn_ctx_destroy(ctx);
}

static void test_proj_dump(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_proj *p = cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){3, 4, 5},
                              (cn_proj_tensor){2, (int64_t[]){3, 5}, (cn_index[]){I(i), I(k)}}, 2,
                              (cn_proj_tensor[]){{2, (int64_t[]){3, 4}, (cn_index[]){I(i), I(j)}},
                                                 {2, (int64_t[]){4, 5}, (cn_index[]){I(j), I(k)}}});
  CHECK_STR(cn_proj_to_string(ctx, p), "product space: i=3 j=4 k=5\n"
                                       "lhs  [3, 5]: (i, k)\n"
                                       "rhs1 [3, 4]: (i, j)\n"
                                       "rhs2 [4, 5]: (j, k)\n");
  /* Two iterators named o: the dump appends their ids; a free symbol and a scalar LHS. */
  cn_symbol o1 = cn_symbol_create(ctx, "o", 0), o2 = cn_symbol_create(ctx, "o", 0),
            b = cn_symbol_create(ctx, "b", 2);
  cn_proj *q = cn_proj_create(
      ctx, 2, (cn_symbol[]){o1, o2}, (int64_t[]){2, 3}, (cn_proj_tensor){0, NULL, NULL}, 1,
      (cn_proj_tensor[]){{2, (int64_t[]){4, 3}, (cn_index[]){A2(o1, 2, b, 1, 0), I(o2)}}});
  char expected[256];
  snprintf(expected, sizeof expected,
           "product space: o#%d=2 o#%d=3\nlhs  []: ()\nrhs1 [4, 3]: (2*o#%d + b, o#%d)\n", o1, o2,
           o1, o2);
  CHECK_STR(cn_proj_to_string(ctx, q), expected);
  cn_proj *none = lhs_only(ctx, 0, NULL, NULL, 1, (int64_t[]){1}, (cn_index[]){F(0)});
  CHECK_STR(cn_proj_to_string(ctx, none), "product space: (none)\nlhs  [1]: (0)\n");
  cn_ctx_destroy(ctx);
}

/* ---- Nodes ---- */

/* Node buffers start on a 64-byte boundary and are zero-filled, whatever their size (a cache
 * line: a vector access of one never straddles two), small ones too and a padded half one. */
static void test_buffer_alignment(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t sizes[] = {1, 3, 17, 1000, 4 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    cn_node *n = cn_node_create(ctx, "a", k % 2 ? CN_PREC_HALF : CN_PREC_SINGLE, 1, &sizes[k]);
    if (k == 2) CHECK_INT(cn_node_set_padding(n, 0, 1, 2), CN_OK);
    const unsigned char *cells = n ? cn_node_buffer(n, false) : NULL;
    CHECK(cells != NULL);
    if (!cells) continue;
    CHECK_MSG((uintptr_t)cells % 64 == 0, "buffer of %lld cells at %p", (long long)sizes[k],
              (const void *)cells);
    size_t bytes = cn_node_buffer_cells(n) * cn_prec_bytes(n->prec), nonzero = 0;
    for (size_t b = 0; b < bytes; b++) nonzero += cells[b] != 0;
    CHECK_INT(nonzero, 0);
  }
  cn_ctx_destroy(ctx);
}

static void test_nodes(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_node_create(ctx, "bad", CN_PREC_SINGLE, 2, (int64_t[]){2, -3}) == NULL);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "node 'bad': dim -3 of axis 1 is negative");
  CHECK(cn_node_create(ctx, "big", CN_PREC_SINGLE, CN_MAX_RANK + 1, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "rank 17 is outside 0..16");
  CHECK(cn_node_create(ctx, "np", CN_PREC_SINGLE, 1, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "dims is NULL");
  CHECK(cn_node_create(ctx, "prec", (cn_prec)CN_PREC_COUNT, 0, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "is not a precision");
  CHECK(cn_node_create(ctx, "huge", CN_PREC_DOUBLE, 3,
                       (int64_t[]){INT64_MAX / 4, INT64_MAX / 4, 4}) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "too many cells");

  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 2, (int64_t[]){2, 3});
  cn_node *anon = cn_node_create(ctx, NULL, CN_PREC_INT32, 0, NULL);
  CHECK(x && anon);
  CHECK(cn_node_id(anon) == cn_node_id(x) + 1);
  CHECK_STR(cn_node_label(anon), "");
  char text[64];
  snprintf(text, sizeof text, "'x' (#%d)", cn_node_id(x));
  CHECK_STR(cn_node_describe(x), text);
  snprintf(text, sizeof text, "#%d", cn_node_id(anon));
  CHECK_STR(cn_node_describe(anon), text);
  CHECK(cn_node_prec(x) == CN_PREC_SINGLE && cn_node_rank(x) == 2 && cn_node_rank(anon) == 0);
  CHECK_INT(cn_node_dim(x, 1), 3);
  CHECK_INT(cn_node_dim(x, 2), -1);
  CHECK_INT(cn_node_numel(x), 6);
  CHECK_INT(cn_node_numel(anon), 1);
  CHECK(cn_node_memory(x) == CN_MEM_MATERIALIZED);

  /* Padding: axis 0 gets 1+0, axis 1 gets 1+2, so the buffer is 3 x 6. */
  CHECK_INT(cn_node_set_padding(x, 2, 1, 1), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "axis 2 is outside 0..1");
  CHECK_INT(cn_node_set_padding(x, 0, -1, 0), CN_ERR_INVALID);
  CHECK_INT(cn_node_set_padding(x, 0, 1, 0), CN_OK);
  CHECK_INT(cn_node_set_padding(x, 1, 1, 2), CN_OK);
  CHECK_INT(cn_node_padding(x, 1, false), 1);
  CHECK_INT(cn_node_padding(x, 1, true), 2);
  CHECK_INT(cn_node_padding(x, 5, true), -1);
  CHECK_INT(cn_node_padded_dim(x, 0), 3);
  CHECK_INT(cn_node_padded_dim(x, 1), 6);
  CHECK_INT(cn_node_buffer_cells(x), 18);
  int64_t strides[2];
  cn_node_strides(x, strides);
  CHECK(strides[0] == 6 && strides[1] == 1);
  CHECK(x->value == NULL);

  /* Values land in the unpadded cells of the padded buffer: (r, c) at (r + 1) * 6 + (c + 1). */
  CHECK_INT(cn_node_set_values(x, false, (double[]){1, 2, 3, 4, 5, 6}, 6), CN_OK);
  const float *raw = x->value;
  CHECK(raw != NULL);
  float expected[18] = {0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0};
  for (int c = 0; c < 18 && raw; c++)
    CHECK_MSG(raw[c] == expected[c], "raw cell %d = %g", c, raw[c]);
  double back[6];
  CHECK_INT(cn_node_get_values(x, false, back, 6), CN_OK);
  for (int c = 0; c < 6; c++) CHECK_NEAR(back[c], c + 1, 0);
  float cells[6];
  CHECK_INT(cn_node_get_cells(x, false, cells, 6), CN_OK);
  CHECK(cells[0] == 1 && cells[5] == 6);
  /* The merge buffer is separate, and raw cells land like values. */
  CHECK_INT(cn_node_set_cells(x, true, (float[]){-1, -2, -3, -4, -5, -6}, 6), CN_OK);
  const float *merge = x->merge;
  CHECK(merge && merge[7] == -1 && merge[15] == -6 && merge[0] == 0 && raw[7] == 1);
  /* Unpadded trailing axes move as one row with the axis before them: [2, 3, 2, 2] padded 1+1 on
   * axis 1 only moves rows of 4 cells; (a, b, c, d) lands at a * 20 + (b + 1) * 4 + 2c + d. */
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_SINGLE, 4, (int64_t[]){2, 3, 2, 2});
  CHECK_INT(cn_node_set_padding(y, 1, 1, 1), CN_OK);
  float ys[24], yback[24];
  for (int c = 0; c < 24; c++) ys[c] = (float)(c + 1);
  CHECK_INT(cn_node_set_cells(y, false, ys, 24), CN_OK);
  const float *yraw = y->value;
  for (int c = 0; c < 40 && yraw; c++) {
    int a = c / 20, b = c % 20 / 4 - 1, rest = c % 4;
    float want = b >= 0 && b < 3 ? (float)(a * 12 + b * 4 + rest + 1) : 0;
    CHECK_MSG(yraw[c] == want, "raw cell %d of y = %g, not %g", c, yraw[c], want);
  }
  CHECK_INT(cn_node_get_cells(y, false, yback, 24), CN_OK);
  for (int c = 0; c < 24; c++) CHECK_NEAR(yback[c], c + 1, 0);
  /* Padding is frozen once a buffer exists; restating the same margins is not a change. */
  CHECK_INT(cn_node_set_padding(x, 0, 2, 0), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "cannot change from 1+0 to 2+0");
  CHECK_INT(cn_node_set_padding(x, 0, 1, 0), CN_OK);

  /* Count mismatches name the node and both counts. */
  CHECK_INT(cn_node_set_values(x, false, back, 5), CN_ERR_INVALID);
  snprintf(text, sizeof text, "'x' (#%d) has 6 cells, but 5 were given", cn_node_id(x));
  CHECK_HAS(cn_ctx_error(ctx), text);
  CHECK_INT(cn_node_get_cells(x, false, cells, 7), CN_ERR_INVALID);
  CHECK_INT(cn_node_set_values(x, false, NULL, 6), CN_ERR_INVALID);

  /* Conversions on the way in: int32 truncates toward zero. */
  cn_node *n32 = cn_node_create(ctx, "n32", CN_PREC_INT32, 1, (int64_t[]){3});
  CHECK_INT(cn_node_set_values(n32, false, (double[]){2.7, -2.7, 40}, 3), CN_OK);
  const int32_t *ints = n32->value;
  CHECK(ints && ints[0] == 2 && ints[1] == -2 && ints[2] == 40);

  /* A scalar and a node without cells. */
  CHECK_INT(cn_node_set_values(anon, false, (double[]){-9}, 1), CN_OK);
  CHECK(*(const int32_t *)anon->value == -9);
  cn_node *none = cn_node_create(ctx, "none", CN_PREC_DOUBLE, 2, (int64_t[]){4, 0});
  CHECK_INT(cn_node_set_values(none, false, NULL, 0), CN_OK);
  CHECK_INT(cn_node_get_values(none, true, NULL, 0), CN_OK);

  /* A local node has no host buffer. */
  cn_node *local = cn_node_create(ctx, "scratch", CN_PREC_SINGLE, 1, (int64_t[]){2});
  CHECK_INT(cn_node_set_memory(local, CN_MEM_LOCAL), CN_OK);
  CHECK(cn_node_memory(local) == CN_MEM_LOCAL);
  CHECK_INT(cn_node_get_values(local, false, back, 2), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "'scratch'");
  CHECK_INT(cn_node_set_memory(local, (cn_memory_mode)7), CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
}

/* ---- Assignment validation ---- */

static void expect_fail(cn_ctx *ctx, const cn_asgn *a, cn_status status, const char *needle) {
  CHECK(a == NULL);
  CHECK_INT(cn_ctx_status(ctx), status);
  CHECK_HAS(cn_ctx_error(ctx), needle);
  cn_ctx_clear_error(ctx);
}

static void test_accum_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, (int64_t[]){3, 5});
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, (int64_t[]){4, 5});
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, (int64_t[]){3, 5});
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_INT32, 2, (int64_t[]){3, 5});
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_UINT4X32, 2, (int64_t[]){3, 5});
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  /* Records: pointwise over [3, 5] with one and two RHS; a matmul claiming a is [3, 4]. */
  cn_index ij[2] = {I(i), I(j)};
  int64_t d35[2] = {3, 5};
  cn_proj_tensor t35 = {2, d35, ij};
  cn_proj *unary = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, d35, t35, 1, &t35);
  cn_proj *binary =
      cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, d35, t35, 2, (cn_proj_tensor[]){t35, t35});
  cn_proj *matmul =
      cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){3, 4, 5},
                     (cn_proj_tensor){2, d35, (cn_index[]){I(i), I(k)}}, 2,
                     (cn_proj_tensor[]){{2, (int64_t[]){3, 4}, ij},
                                        {2, (int64_t[]){4, 5}, (cn_index[]){I(j), I(k)}}});
  CHECK(unary && binary && matmul);
  cn_buffer ab[2] = {{a, false}, {b, false}}, aa[2] = {{a, false}, {a, false}};

  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_LT, c, CN_OP_ID, aa, unary), CN_ERR_INVALID,
              "lt cannot be an accumulator (those are: snd, add, sub, mul");
  expect_fail(ctx, cn_asgn_accum(ctx, false, CN_OP_ARG2, c, CN_OP_ID, aa, unary), CN_ERR_INVALID,
              "snd accumulates only as `=:`");
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ARG2, c, CN_OP_UNIFORM, aa, unary),
              CN_ERR_INVALID, "use cn_asgn_vec_unop");
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, aa, unary), CN_ERR_INVALID,
              "mul takes 2 operands but the projections record has 1 RHS tensor");
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ID, aa, binary), CN_ERR_INVALID,
              "id takes 1 operand but the projections record has 2 RHS tensors");
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, NULL, CN_OP_ID, aa, unary), CN_ERR_INVALID,
              "accumulation: lhs is NULL");
  expect_fail(ctx,
              cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL,
                            (cn_buffer[]){{a, false}, {NULL, false}}, binary),
              CN_ERR_INVALID, "accumulation: rhs2 is NULL");
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ID, NULL, unary), CN_ERR_INVALID,
              "the rhs array is NULL");
  /* A NULL record from a failed cn_proj_create keeps that failure's message. */
  expect_fail(ctx,
              cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ID, aa,
                            cn_proj_create(ctx, -2, NULL, NULL, t35, 1, &t35)),
              CN_ERR_INVALID,
              "the projections record is NULL (after an earlier failure: projections: -2 product");

  /* Precisions: the op and the accumulator must be defined on the LHS precision. */
  char text[256];
  snprintf(text, sizeof text, "op exp is not defined for precision int32 (lhs 'x' (#%d))",
           cn_node_id(x));
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ARG2, x, CN_OP_EXP, aa, unary),
              CN_ERR_UNSUPPORTED, text);
  snprintf(text, sizeof text,
           "accumulator max is not defined for precision uint4x32 (lhs 'w' (#%d))", cn_node_id(w));
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_MAX, w, CN_OP_ID, aa, unary), CN_ERR_UNSUPPORTED,
              text);

  /* Dims: the record says rhs1 is [3, 4], a is [3, 5]. */
  snprintf(text, sizeof text, "projections give rhs1 dims [3, 4] but 'a' (#%d) has [3, 5]",
           cn_node_id(a));
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, ab, matmul), CN_ERR_INVALID,
              text);
  cn_node *c4 = cn_node_create(ctx, "c4", CN_PREC_SINGLE, 1, (int64_t[]){4});
  snprintf(text, sizeof text, "projections give lhs dims [3, 5] but 'c4' (#%d) has [4]",
           cn_node_id(c4));
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c4, CN_OP_ID, aa, unary), CN_ERR_INVALID,
              text);

  /* Index ranges: out[o] =:+ xs[2*o + k] * ws[k] with o < 4, k < 4 reads xs at 0..9. */
  cn_node *xs = cn_node_create(ctx, "xs", CN_PREC_SINGLE, 1, (int64_t[]){8});
  cn_node *ws = cn_node_create(ctx, "ws", CN_PREC_SINGLE, 1, (int64_t[]){4});
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_SINGLE, 1, (int64_t[]){4});
  cn_symbol o = cn_symbol_create(ctx, "o", 0), kk = cn_symbol_create(ctx, "k", 0);
  cn_proj *conv =
      cn_proj_create(ctx, 2, (cn_symbol[]){o, kk}, (int64_t[]){4, 4},
                     (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){I(o)}}, 2,
                     (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){A2(o, 2, kk, 1, 0)}},
                                        {1, (int64_t[]){4}, (cn_index[]){I(kk)}}});
  cn_buffer xw[2] = {{xs, false}, {ws, false}};
  snprintf(text, sizeof text,
           "index 2*o + k of axis 0 of rhs1 'xs' (#%d) ranges over [0, 9] but the axis has size 8 "
           "with padding 0+0",
           cn_node_id(xs));
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, xw, conv), CN_ERR_INVALID,
              text);
  /* A right margin of 1 is not enough, of 2 it is. */
  CHECK_INT(cn_node_set_padding(xs, 0, 0, 1), CN_OK);
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, xw, conv), CN_ERR_INVALID,
              "has size 8 with padding 0+1");
  CHECK_INT(cn_node_set_padding(xs, 0, 0, 2), CN_OK);
  cn_asgn *ok = cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, xw, conv);
  CHECK_MSG(ok != NULL, "%s", cn_ctx_error(ctx));
  /* Reading left of the array needs a left margin. */
  cn_proj *left = cn_proj_create(
      ctx, 1, &o, (int64_t[]){4}, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){I(o)}}, 1,
      (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){A1(o, 1, -1)}}});
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_ID, xw, left), CN_ERR_INVALID,
              "ranges over [-1, 2] but the axis has size 8 with padding 0+2");
  /* The LHS is checked too, before the RHS: out[o + 1] with o < 4 overruns out. */
  cn_proj *over = cn_proj_create(
      ctx, 1, &o, (int64_t[]){4}, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){A1(o, 1, 1)}}, 1,
      (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){A1(o, 1, -1)}}});
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_ID, xw, over), CN_ERR_INVALID,
              "index o + 1 of axis 0 of lhs 'out'");

  /* Free symbols: with a range they bound the index, without one they are an error. */
  cn_symbol step = cn_symbol_create(ctx, "step", 0), bat = cn_symbol_create(ctx, "bat", 4);
  cn_proj *unbounded = cn_proj_create(
      ctx, 1, &o, (int64_t[]){4}, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){I(o)}}, 1,
      (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){A2(o, 1, step, 1, 0)}}});
  expect_fail(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_ID, xw, unbounded),
              CN_ERR_INVALID, "uses 'step', which is not a product iterator and has no range");
  cn_proj *bounded = cn_proj_create(
      ctx, 1, &o, (int64_t[]){4}, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){I(o)}}, 1,
      (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){A2(o, 1, bat, 1, 0)}}});
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_ID, xw, bounded) != NULL);
  /* An empty product space evaluates no index: any index is accepted. */
  cn_proj *nothing = cn_proj_create(
      ctx, 1, &o, (int64_t[]){0}, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){A1(o, 1, 100)}},
      1, (cn_proj_tensor[]){{1, (int64_t[]){8}, (cn_index[]){F(-50)}}});
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_ID, xw, nothing) != NULL);

  /* A node of another context. */
  cn_ctx *other = cn_ctx_create();
  cn_node *alien = cn_node_create(other, "alien", CN_PREC_SINGLE, 2, d35);
  expect_fail(
      ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ID, (cn_buffer[]){{alien, false}}, unary),
      CN_ERR_INVALID, "rhs1 'alien' (#1) belongs to another context");
  cn_ctx_destroy(other);
  cn_ctx_destroy(ctx);
}

static void test_vec_and_fetch_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_UINT4X32, 1, (int64_t[]){5});
  cn_node *u = cn_node_create(ctx, "u", CN_PREC_HALF, 1, (int64_t[]){40});
  cn_node *short_u = cn_node_create(ctx, "su", CN_PREC_HALF, 1, (int64_t[]){36});
  cn_node *padded = cn_node_create(ctx, "pu", CN_PREC_HALF, 1, (int64_t[]){40});
  CHECK_INT(cn_node_set_padding(padded, 0, 0, 8), CN_OK);
  cn_symbol c = cn_symbol_create(ctx, "c", 0);
  /* u[8c .. 8c+7] =: uniform(w[c]), c < 5: the last group is 32..39, inside u's 40 cells. */
  cn_proj *pv = cn_proj_create(ctx, 1, &c, (int64_t[]){5},
                               (cn_proj_tensor){1, (int64_t[]){40}, (cn_index[]){A1(c, 8, 0)}}, 1,
                               (cn_proj_tensor[]){{1, (int64_t[]){5}, (cn_index[]){I(c)}}});
  cn_proj *ps = cn_proj_create(ctx, 1, &c, (int64_t[]){5},
                               (cn_proj_tensor){1, (int64_t[]){36}, (cn_index[]){A1(c, 8, 0)}}, 1,
                               (cn_proj_tensor[]){{1, (int64_t[]){5}, (cn_index[]){I(c)}}});
  cn_proj *two = cn_proj_create(ctx, 1, &c, (int64_t[]){5},
                                (cn_proj_tensor){1, (int64_t[]){40}, (cn_index[]){A1(c, 8, 0)}}, 2,
                                (cn_proj_tensor[]){{1, (int64_t[]){5}, (cn_index[]){I(c)}},
                                                   {1, (int64_t[]){5}, (cn_index[]){I(c)}}});
  cn_buffer wb = {w, false};
  cn_asgn *vec = cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, wb, pv);
  CHECK_MSG(vec != NULL, "%s", cn_ctx_error(ctx));
  expect_fail(ctx, cn_asgn_vec_unop(ctx, CN_OP_RELU, u, wb, pv), CN_ERR_INVALID,
              "relu is not a vectorized op");
  expect_fail(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, wb, two), CN_ERR_INVALID,
              "has 2 RHS tensors");
  expect_fail(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, padded, wb, pv), CN_ERR_INVALID,
              "is padded (0+8 on axis 0)");
  /* In su (36 cells) the first cells 0..32 are in range but the last group 32..39 is not. */
  char text[256];
  snprintf(
      text, sizeof text,
      "vectorized uint4x32_to_prec_uniform writes 8 cells from each addressed cell of lhs 'su' "
      "(#%d), but the last group starts at offset 32 and overruns its 36 cells",
      cn_node_id(short_u));
  expect_fail(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, short_u, wb, ps), CN_ERR_INVALID, text);
  expect_fail(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, (cn_buffer){NULL, false}, pv),
              CN_ERR_INVALID, "rhs1 is NULL");

  /* Fetches. */
  cn_node *r = cn_node_create(ctx, "r", CN_PREC_SINGLE, 2, (int64_t[]){2, 3});
  cn_node *src = cn_node_create(ctx, "src", CN_PREC_DOUBLE, 3, (int64_t[]){3, 2, 3});
  cn_node *flat = cn_node_create(ctx, "flat", CN_PREC_DOUBLE, 2, (int64_t[]){3, 6});
  cn_symbol b3 = cn_symbol_create(ctx, "b", 3), b4 = cn_symbol_create(ctx, "b4", 4),
            unb = cn_symbol_create(ctx, "unb", 0);
  expect_fail(ctx, cn_asgn_fetch_constant_fill(ctx, r, (double[]){1}, 0), CN_ERR_INVALID,
              "fill fetch: no values");
  expect_fail(ctx, cn_asgn_fetch_constant_fill(ctx, r, NULL, 2), CN_ERR_INVALID, "values is NULL");
  expect_fail(ctx, cn_asgn_fetch_constant(ctx, NULL, 1), CN_ERR_INVALID,
              "constant fetch: lhs is NULL");
  CHECK(cn_asgn_fetch_slice(ctx, r, b3, src) != NULL);
  snprintf(text, sizeof text,
           "slice: lhs 'r' (#%d) has dims [2, 3], but a slice of 'flat' (#%d) [3, 6]",
           cn_node_id(r), cn_node_id(flat));
  expect_fail(ctx, cn_asgn_fetch_slice(ctx, r, b3, flat), CN_ERR_INVALID, text);
  expect_fail(ctx, cn_asgn_fetch_slice(ctx, r, 1000, src), CN_ERR_INVALID,
              "batch index 1000 is not a symbol");
  expect_fail(ctx, cn_asgn_fetch_slice(ctx, r, unb, src), CN_ERR_INVALID,
              "batch index 'unb' has range 0 (unbounded), but it must be within 1..3");
  expect_fail(ctx, cn_asgn_fetch_slice(ctx, r, b4, src), CN_ERR_INVALID,
              "batch index 'b4' has range 4, but it must be within 1..3");
  expect_fail(ctx, cn_asgn_fetch_slice(ctx, r, b3, NULL), CN_ERR_INVALID, "slice: source is NULL");
  expect_fail(ctx, cn_asgn_fetch_embed_symbol(ctx, r, -1), CN_ERR_INVALID,
              "-1 is not a symbol of this context");
  expect_fail(ctx, cn_asgn_fetch_embed_dim(ctx, r, NULL), CN_ERR_INVALID, "dim pointer is NULL");

  /* Structure. */
  expect_fail(ctx, cn_asgn_seq(ctx, -1, NULL), CN_ERR_INVALID, "-1 items (negative)");
  expect_fail(ctx, cn_asgn_seq(ctx, 2, (cn_asgn *[]){vec, NULL}), CN_ERR_INVALID,
              "seq: item 1 is NULL");
  expect_fail(ctx, cn_asgn_comment(ctx, NULL, vec), CN_ERR_INVALID, "comment: the text is NULL");
  expect_fail(ctx, cn_asgn_comment(ctx, "c", NULL), CN_ERR_INVALID, "comment: the body is NULL");
  /* A NULL item from an out-of-memory failure keeps CN_ERR_NOMEM. */
  ctx->fail_alloc_countdown = 1;
  cn_asgn *lost = cn_asgn_noop(ctx);
  CHECK(lost == NULL && cn_ctx_status(ctx) == CN_ERR_NOMEM);
  expect_fail(ctx, cn_asgn_seq(ctx, 1, &lost), CN_ERR_NOMEM,
              "seq: item 0 is NULL (after an earlier failure: out of memory");
  CHECK(cn_asgn_to_string(ctx, NULL) == NULL);
  cn_ctx_destroy(ctx);
}

/* ---- The %cd printer ---- */

static void test_printer(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t d3[1] = {3};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 1, d3);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 1, d3);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 1, d3);
  cn_node *anon = cn_node_create(ctx, "", CN_PREC_SINGLE, 1, d3);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index mi[1] = {I(i)};
  cn_proj_tensor t = {1, d3, mi};
  cn_proj *p1 = cn_proj_create(ctx, 1, &i, d3, t, 1, &t);
  cn_proj *p2 = cn_proj_create(ctx, 1, &i, d3, t, 2, (cn_proj_tensor[]){t, t});
  cn_proj *p3 = cn_proj_create(ctx, 1, &i, d3, t, 3, (cn_proj_tensor[]){t, t, t});
  cn_buffer A = {a, false}, B = {b, false}, C = {c, false};

  cn_asgn *mm = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, (cn_buffer[]){A, B}, p2);
  CHECK_STR(cn_asgn_to_string(ctx, mm), "c =:+ a * b;\n");
  CHECK_STR(cn_asgn_to_string(
                ctx, cn_asgn_accum(ctx, false, CN_OP_SUB, c, CN_OP_MUL, (cn_buffer[]){A, B}, p2)),
            "c =- a * b;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_accum(ctx, false, CN_OP_ADD, c, CN_OP_RELU, &A, p1)),
            "c =+ relu a;\n");
  cn_asgn *copy = cn_asgn_accum(ctx, true, CN_OP_ARG2, c, CN_OP_ID, &A, p1);
  CHECK_STR(cn_asgn_to_string(ctx, copy), "c =: a;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_accum(ctx, true, CN_OP_ARG2, c, CN_OP_WHERE,
                                                 (cn_buffer[]){A, B, C}, p3)),
            "c =: where a b c;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_accum(ctx, false, CN_OP_MAX, c, CN_OP_FMA,
                                                 (cn_buffer[]){A, B, C}, p3)),
            "c =@^ fma a b c;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_accum(ctx, true, CN_OP_MIN, c, CN_OP_RELU_GATE,
                                                 (cn_buffer[]){A, {b, true}}, p2)),
            "c =:^^ a -?/ b.merge;\n");
  char text[256];
  snprintf(text, sizeof text, "n%d =+ n%d.merge;\n", cn_node_id(anon), cn_node_id(anon));
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_accum(ctx, false, CN_OP_ADD, anon, CN_OP_ID,
                                                 (cn_buffer[]){{anon, true}}, p1)),
            text);

  cn_node *w = cn_node_create(ctx, "w", CN_PREC_UINT4X32, 1, (int64_t[]){1});
  cn_node *u = cn_node_create(ctx, "u", CN_PREC_SINGLE, 1, (int64_t[]){4});
  cn_proj *pv =
      cn_proj_create(ctx, 0, NULL, NULL, (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){F(0)}}, 1,
                     (cn_proj_tensor[]){{1, (int64_t[]){1}, (cn_index[]){F(0)}}});
  CHECK_STR(
      cn_asgn_to_string(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, (cn_buffer){w, false}, pv)),
      "u =: uint4x32_to_prec_uniform w;\n");

  /* Fetches, with the shortest round-trip numbers. */
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, 0.5)), "a =: 0.5;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, 0.1)), "a =: 0.1;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, 1.0 / 3)),
            "a =: 0.3333333333333333;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, -0.0)), "a =: -0;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, 1e20)), "a =: 1e+20;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, -INFINITY)), "a =: -inf;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant(ctx, a, NAN)), "a =: nan;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_constant_bits(ctx, a, 42)), "a =: bits 0x2a;\n");
  double fill[3] = {1, 2.5, -3};
  cn_asgn *f = cn_asgn_fetch_constant_fill(ctx, a, fill, 3);
  fill[0] = 99; /* copied */
  CHECK_STR(cn_asgn_to_string(ctx, f), "a =: fill [1; 2.5; -3];\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_range_over_offsets(ctx, a)),
            "a =: range_over_offsets ();\n");
  cn_node *src = cn_node_create(ctx, "src", CN_PREC_SINGLE, 2, (int64_t[]){2, 3});
  cn_symbol bi = cn_symbol_create(ctx, "bi", 2);
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_slice(ctx, a, bi, src)), "a =: src @| bi;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_embed_symbol(ctx, a, bi)), "a =: !@bi;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_fetch_embed_self_id(ctx, a)),
            "a =: embed_self_id ();\n");
  int64_t dim = 5;
  cn_asgn *ed = cn_asgn_fetch_embed_dim(ctx, a, &dim);
  CHECK_STR(cn_asgn_to_string(ctx, ed), "a =: dim 5;\n");
  dim = 7; /* read when printed */
  CHECK_STR(cn_asgn_to_string(ctx, ed), "a =: dim 7;\n");

  /* Structure: nested comments indent their bodies, noop prints nothing. */
  cn_asgn *noop = cn_asgn_noop(ctx);
  CHECK_STR(cn_asgn_to_string(ctx, noop), "");
  cn_asgn *inner = cn_asgn_comment(ctx, "inner", cn_asgn_fetch_constant(ctx, b, 0.5));
  cn_asgn *body = cn_asgn_seq(ctx, 3, (cn_asgn *[]){mm, noop, inner});
  cn_asgn *outer = cn_asgn_comment(ctx, "forward \"pass\"\\", body);
  cn_asgn *items[2] = {outer, copy};
  cn_asgn *all = cn_asgn_seq(ctx, 2, items);
  items[0] = NULL; /* the items array was copied */
  CHECK_STR(cn_asgn_to_string(ctx, all), "~~(\"forward \\\"pass\\\"\\\\\";\n"
                                         "  c =:+ a * b;\n"
                                         "  ~~(\"inner\";\n"
                                         "    b =: 0.5;\n"
                                         "  );\n"
                                         ");\n"
                                         "c =: a;\n");
  CHECK_STR(cn_asgn_to_string(ctx, cn_asgn_comment(ctx, "line\none", noop)),
            "~~(\"line\\none\";\n);\n");
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_buffer_alignment();
  test_canonical_forms();
  test_proj_create();
  test_bounds();
  test_analyses();
  test_proj_dump();
  test_nodes();
  test_accum_errors();
  test_vec_and_fetch_errors();
  test_printer();
  CHECK_DONE();
}
