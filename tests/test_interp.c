/* Tests of the reference interpreter backend (src/backend/interp.c) on loop-IR procedures built
 * by hand with the cn_lb_* constructors, so that they depend on loops.h only and not on the
 * lowering: a matmul nest against a plain C triple loop, padded buffers (margins written by
 * explicit loops, reads left of the array, the raw padded layout), embedded indices (row-major
 * offsets, 32-bit wrap), vector stores of threefry words, conversions on store and between
 * operands, conditions, free symbols, and the allocation failures of compile. Expected values are
 * computed independently: by C loops, by hand, or from the bit-level rules of ocannl-notes §7. */
#include "backend/backend.h"
#include "loops_check.h"

#include <stdlib.h>

#define MAX_TEST_PARAMS 8

/* Runs a compiled procedure once on the parameters' value buffers. */
static cn_status run_compiled(cn_ctx *ctx, const cn_ll_proc *proc, void *compiled,
                              const int64_t *syms) {
  void *buffers[MAX_TEST_PARAMS];
  CHECK(proc->n_params <= MAX_TEST_PARAMS);
  for (int k = 0; k < proc->n_params; k++) {
    buffers[k] = cn_node_buffer(proc->params[k].node, proc->params[k].merge);
    if (!buffers[k]) return cn_ctx_status(ctx);
  }
  return cn_backend_interp.run(ctx, compiled, buffers, syms);
}

/* compile, run once, release. */
static cn_status run_proc(cn_ctx *ctx, const cn_ll_proc *proc, const int64_t *syms) {
  void *compiled = NULL;
  const char *source = "unset";
  cn_status status = cn_backend_interp.compile(ctx, proc, &compiled, &source);
  if (status != CN_OK) return status;
  CHECK(source == NULL);
  status = run_compiled(ctx, proc, compiled, syms);
  cn_backend_interp.release(compiled);
  return status;
}

/* ---- Tests ---- */

/* C[i,j] = 0; C[i,j] = C[i,j] + A[i,k] * B[k,j]. Inputs are multiples of 1/4 in [-1.5, 1.5], so
 * every partial sum is exact in single precision and the C loop must agree exactly. */
static void test_matmul(int64_t m, int64_t kk, int64_t n) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t a_dims[2] = {m, kk}, b_dims[2] = {kk, n}, c_dims[2] = {m, n};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, a_dims);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, b_dims);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, c_dims);
  double *av = malloc(sizeof(double) * (size_t)(m * kk));
  double *bv = malloc(sizeof(double) * (size_t)(kk * n));
  double *cv = malloc(sizeof(double) * (size_t)(m * n));
  for (int64_t x = 0; x < m * kk; x++) av[x] = (double)((x * 7) % 13 - 6) / 4;
  for (int64_t x = 0; x < kk * n; x++) bv[x] = (double)((x * 5) % 11 - 5) / 4;
  for (int64_t x = 0; x < m * n; x++) cv[x] = 1e6; /* the prefill must clear it */
  CHECK_INT(cn_node_set_values(a, false, av, (size_t)(m * kk)), CN_OK);
  CHECK_INT(cn_node_set_values(b, false, bv, (size_t)(kk * n)), CN_OK);
  CHECK_INT(cn_node_set_values(c, false, cv, (size_t)(m * n)), CN_OK);

  cn_symbol i = cn_symbol_create(ctx, "i", m), j = cn_symbol_create(ctx, "j", n),
            k = cn_symbol_create(ctx, "k", kk);
  cn_ll_param params[3] = {{a, false}, {b, false}, {c, false}};
  cn_ll_proc *proc = cn_lb_proc(ctx, "test_proc", matmul_body(ctx, "c =: a * b", i, m, j, n, k, kk),
                                3, params, 0, NULL);
  CHECK_INT(run_proc(ctx, proc, NULL), CN_OK);

  float *got = malloc(sizeof(float) * (size_t)(m * n));
  CHECK_INT(cn_node_get_cells(c, false, got, (size_t)(m * n)), CN_OK);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < m; r++)
    for (int64_t col = 0; col < n; col++) {
      float expected = 0;
      for (int64_t x = 0; x < kk; x++) expected += (float)(av[r * kk + x] * bv[x * n + col]);
      if (got[r * n + col] != expected) mismatches++;
    }
  CHECK_INT(mismatches, 0);
  free(got);
  free(av);
  free(bv);
  free(cv);
  cn_ctx_destroy(ctx);
}

/* x (dims 5, padding 2 left, 1 right) gets its margins from explicit Set loops; y[i] = x[i-2] +
 * x[i+1] reads both margins. z (dims 2x3, one row above, two columns right) checks the raw padded
 * layout: padded dims 3x5, strides 5 and 1, logical origin at cell 5. */
static void test_padding(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t five = 5, z_dims[2] = {2, 3};
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &five);
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_DOUBLE, 1, &five);
  cn_node *z = cn_node_create(ctx, "z", CN_PREC_INT32, 2, z_dims);
  CHECK_INT(cn_node_set_padding(x, 0, 2, 1), CN_OK);
  CHECK_INT(cn_node_set_padding(z, 0, 1, 0), CN_OK);
  CHECK_INT(cn_node_set_padding(z, 1, 0, 2), CN_OK);
  double xv[5] = {10, 20, 30, 40, 50};
  CHECK_INT(cn_node_set_values(x, false, xv, 5), CN_OK);

  cn_symbol p = cn_symbol_create(ctx, "p", 2), i = cn_symbol_create(ctx, "i", 5),
            r = cn_symbol_create(ctx, "r", 2), c = cn_symbol_create(ctx, "c", 3);
  cn_ll_stmt *left_margin = cn_lb_loop(ctx, p, 0, 2,
                                       cn_lb_set(ctx, 0, cn_lb_indices(ctx, 1, affine1(p, 1, -2)),
                                                 cn_lb_num(ctx, CN_PREC_DOUBLE, -1)));
  cn_ll_stmt *right_margin = cn_lb_set(ctx, 0, cn_lb_indices(ctx, 1, cn_index_fixed(5)),
                                       cn_lb_num(ctx, CN_PREC_DOUBLE, 100));
  cn_ll_expr *shifted_sum =
      cn_lb_op(ctx, CN_OP_ADD, CN_PREC_DOUBLE,
               cn_lb_get(ctx, 0, CN_PREC_DOUBLE, cn_lb_indices(ctx, 1, affine1(i, 1, -2))),
               cn_lb_get(ctx, 0, CN_PREC_DOUBLE, cn_lb_indices(ctx, 1, affine1(i, 1, 1))), NULL);
  cn_ll_stmt *read = cn_lb_loop(
      ctx, i, 0, 5, cn_lb_set(ctx, 1, cn_lb_indices(ctx, 1, cn_index_iter(i)), shifted_sum));
  cn_ll_stmt *z_corner =
      cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_fixed(-1), cn_index_fixed(4)),
                cn_lb_num(ctx, CN_PREC_INT32, 7));
  cn_ll_stmt *z_fill = cn_lb_loop(
      ctx, r, 0, 2,
      cn_lb_loop(ctx, c, 0, 3,
                 cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(c)),
                           cn_lb_index(ctx, affine2(r, 10, c, 1, 1)))));
  cn_ll_param params[3] = {{x, false}, {y, false}, {z, false}};
  cn_ll_proc *proc = cn_lb_proc(
      ctx, "test_proc", cn_lb_seq(ctx, 5, left_margin, right_margin, read, z_corner, z_fill), 3,
      params, 0, NULL);
  CHECK_INT(run_proc(ctx, proc, NULL), CN_OK);

  double yv[5];
  CHECK_INT(cn_node_get_values(y, false, yv, 5), CN_OK);
  const double y_expected[5] = {-1 + 20, -1 + 30, 10 + 40, 20 + 50, 30 + 100};
  for (int q = 0; q < 5; q++) CHECK_NEAR(yv[q], y_expected[q], 0);
  const double *x_raw = cn_node_buffer(x, false);
  const double x_expected[8] = {-1, -1, 10, 20, 30, 40, 50, 100};
  for (int q = 0; q < 8; q++) CHECK_NEAR(x_raw[q], x_expected[q], 0);
  const int32_t *z_raw = cn_node_buffer(z, false);
  const int32_t z_expected[15] = {0, 0, 0, 0, 7, 1, 2, 3, 0, 0, 11, 12, 13, 0, 0};
  for (int q = 0; q < 15; q++) CHECK_INT(z_raw[q], z_expected[q]);
  cn_ctx_destroy(ctx);
}

/* Embedded indices: row-major offsets into uint32 and single nodes; the value wraps to 32 bits. */
static void test_index(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t dims[2] = {3, 4}, two = 2;
  cn_node *offsets = cn_node_create(ctx, "offsets", CN_PREC_UINT32, 2, dims);
  cn_node *as_float = cn_node_create(ctx, "as_float", CN_PREC_SINGLE, 2, dims);
  cn_node *wrapped = cn_node_create(ctx, "wrapped", CN_PREC_INT64, 1, &two);
  cn_symbol i = cn_symbol_create(ctx, "i", 3), j = cn_symbol_create(ctx, "j", 4);
  cn_index *ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
  cn_ll_expr *offset = cn_lb_index(ctx, affine2(i, 4, j, 1, 0));
  cn_ll_stmt *body =
      cn_lb_seq(ctx, 2, cn_lb_set(ctx, 0, ij, offset), cn_lb_set(ctx, 1, ij, offset));
  cn_ll_stmt *wrap = cn_lb_seq(ctx, 2,
                               cn_lb_set(ctx, 2, cn_lb_indices(ctx, 1, cn_index_fixed(0)),
                                         cn_lb_index(ctx, cn_index_fixed(-1))),
                               cn_lb_set(ctx, 2, cn_lb_indices(ctx, 1, cn_index_fixed(1)),
                                         cn_lb_index(ctx, cn_index_fixed(((int64_t)1 << 32) + 5))));
  cn_ll_param params[3] = {{offsets, false}, {as_float, false}, {wrapped, false}};
  cn_ll_proc *proc =
      cn_lb_proc(ctx, "test_proc",
                 cn_lb_seq(ctx, 2, cn_lb_loop(ctx, i, 0, 3, cn_lb_loop(ctx, j, 0, 4, body)), wrap),
                 3, params, 0, NULL);
  CHECK_INT(run_proc(ctx, proc, NULL), CN_OK);

  uint32_t cells[12];
  double values[12];
  CHECK_INT(cn_node_get_cells(offsets, false, cells, 12), CN_OK);
  CHECK_INT(cn_node_get_values(as_float, false, values, 12), CN_OK);
  for (uint32_t q = 0; q < 12; q++) {
    CHECK_INT(cells[q], q);
    CHECK_NEAR(values[q], q, 0);
  }
  int64_t w[2];
  CHECK_INT(cn_node_get_cells(wrapped, false, w, 2), CN_OK);
  CHECK_INT(w[0], 4294967295LL);
  CHECK_INT(w[1], 5);
  cn_ctx_destroy(ctx);
}

static uint32_t rotl32(uint32_t x, int r) {
  return (x << r) | (x >> (32 - r));
}

/* The uint32 -> uint4x32 bit spreading of ocannl-notes §7.2. */
static cn_u4x32 spread(uint32_t u) {
  return (cn_u4x32){{u, u ^ 0x9E3779B9u, u ^ 0x6C078965u, u ^ rotl32(u, 16)}};
}

/* Set_vec: half lanes of threefry words (key constant, counter the spread loop index) against the
 * builtins called directly and against the §7.3 rule for the low halves; single lanes of words
 * read from a uint4x32 node, and of uint32 indices converted (spread) to uint4x32 on the way,
 * against (v[j] >> 8) * 2^-24. */
static void test_set_vec(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t n_half = 32, n_single = 8, n_words = 2;
  cn_node *h = cn_node_create(ctx, "h", CN_PREC_HALF, 1, &n_half);
  cn_node *s = cn_node_create(ctx, "s", CN_PREC_SINGLE, 1, &n_single);
  cn_node *g = cn_node_create(ctx, "g", CN_PREC_UINT4X32, 1, &n_words);
  cn_node *spread_lanes = cn_node_create(ctx, "spread_lanes", CN_PREC_SINGLE, 1, &n_single);
  const cn_u4x32 g_words[2] = {{{0x00000000u, 0xFFFFFFFFu, 0x80000000u, 0x12345678u}},
                               {{0x00000100u, 0x7FFFFF00u, 0xC0000000u, 0x000000FFu}}};
  CHECK_INT(cn_node_set_cells(g, false, g_words, 2), CN_OK);
  const cn_u4x32 key = {{0x12345678u, 0x9ABCDEF0u, 7u, 0u}};
  cn_symbol i = cn_symbol_create(ctx, "i", 4), q = cn_symbol_create(ctx, "q", 2);
  cn_ll_expr *bits = cn_lb_op(ctx, CN_OP_THREEFRY_LIGHT, CN_PREC_UINT4X32,
                              cn_lb_const(ctx, CN_PREC_UINT4X32, (cn_value){.w = key}),
                              cn_lb_index(ctx, cn_index_iter(i)), NULL);
  cn_ll_stmt *halves = cn_lb_loop(
      ctx, i, 0, 4,
      cn_lb_set_vec(ctx, CN_OP_UNIFORM, 0, cn_lb_indices(ctx, 1, affine1(i, 8, 0)), 8, bits));
  cn_ll_stmt *singles = cn_lb_loop(
      ctx, q, 0, 2,
      cn_lb_set_vec(ctx, CN_OP_UNIFORM, 1, cn_lb_indices(ctx, 1, affine1(q, 4, 0)), 4,
                    cn_lb_get(ctx, 2, CN_PREC_UINT4X32, cn_lb_indices(ctx, 1, cn_index_iter(q)))));
  cn_ll_stmt *spread_singles =
      cn_lb_loop(ctx, q, 0, 2,
                 cn_lb_set_vec(ctx, CN_OP_UNIFORM, 3, cn_lb_indices(ctx, 1, affine1(q, 4, 0)), 4,
                               cn_lb_index(ctx, affine1(q, 1, 1))));
  cn_ll_param params[4] = {{h, false}, {s, false}, {g, false}, {spread_lanes, false}};
  CHECK_INT(
      run_proc(ctx,
               cn_lb_proc(ctx, "test_proc", cn_lb_seq(ctx, 3, halves, singles, spread_singles), 4,
                          params, 0, NULL),
               NULL),
      CN_OK);

  uint16_t got[32];
  CHECK_INT(cn_node_get_cells(h, false, got, 32), CN_OK);
  int distinct = 0;
  for (int c = 0; c < 4; c++) {
    cn_u4x32 word = cn_threefry4x32_light(key, spread((uint32_t)c));
    float lanes[8];
    cn_u4x32_to_half_uniform_vec(word, lanes);
    for (int lane = 0; lane < 8; lane++) CHECK_INT(got[c * 8 + lane], cn_store_half(lanes[lane]));
    for (int w = 0; w < 4; w++) {
      float low = (float)(word.v[w] & 0xFFFFu) / 65536.0f;
      CHECK_INT(got[c * 8 + 2 * w], cn_prec_single_to_half(low));
    }
    if (c > 0 && got[c * 8] != got[0]) distinct++;
  }
  CHECK(distinct > 0); /* the counter reaches the words */

  float singles_got[8];
  CHECK_INT(cn_node_get_cells(s, false, singles_got, 8), CN_OK);
  for (int w = 0; w < 2; w++)
    for (int lane = 0; lane < 4; lane++)
      CHECK_NEAR(singles_got[w * 4 + lane], ldexp((double)(g_words[w].v[lane] >> 8), -24), 0);
  CHECK_NEAR(singles_got[1], 0.99999994039535522, 0); /* (2^24 - 1) / 2^24 */
  CHECK_INT(cn_node_get_cells(spread_lanes, false, singles_got, 8), CN_OK);
  for (int w = 0; w < 2; w++) {
    cn_u4x32 word = spread((uint32_t)w + 1);
    for (int lane = 0; lane < 4; lane++)
      CHECK_NEAR(singles_got[w * 4 + lane], ldexp((double)(word.v[lane] >> 8), -24), 0);
  }
  cn_ctx_destroy(ctx);
}

/* Conversions: double results stored into half; single results stored into int32 (truncation,
 * saturation, NaN); an int32 operand of a single op; conditions of their own precision, which
 * reach the op as 1 or 0 of its precision (an int32 condition of a single op, a double condition
 * of single and int32 ops). */
static void test_conversions(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t two = 2, three = 3, four = 4, one = 1;
  cn_node *h = cn_node_create(ctx, "h", CN_PREC_HALF, 1, &two);
  cn_node *n32 = cn_node_create(ctx, "n32", CN_PREC_INT32, 1, &four);
  cn_node *mixed = cn_node_create(ctx, "mixed", CN_PREC_SINGLE, 1, &one);
  cn_node *cond_i = cn_node_create(ctx, "cond_i", CN_PREC_INT32, 1, &four);
  cn_node *cond_d = cn_node_create(ctx, "cond_d", CN_PREC_DOUBLE, 1, &three);
  cn_node *picked = cn_node_create(ctx, "picked", CN_PREC_SINGLE, 1, &four);
  cn_node *picked_d = cn_node_create(ctx, "picked_d", CN_PREC_SINGLE, 1, &three);
  cn_node *picked_i = cn_node_create(ctx, "picked_i", CN_PREC_INT32, 1, &three);
  const double ci[4] = {0, 3, -1, 0}, cd[3] = {NAN, 0, -0.0};
  CHECK_INT(cn_node_set_values(cond_i, false, ci, 4), CN_OK);
  CHECK_INT(cn_node_set_values(cond_d, false, cd, 3), CN_OK);

#define AT(pos)              cn_lb_indices(ctx, 1, cn_index_fixed(pos))
#define DBL(x)               cn_lb_num(ctx, CN_PREC_DOUBLE, x)
#define SGL(x)               cn_lb_num(ctx, CN_PREC_SINGLE, x)
#define INT(x)               cn_lb_num(ctx, CN_PREC_INT32, x)
#define OP(o, prec, a, b)    cn_lb_op(ctx, CN_OP_##o, CN_PREC_##prec, a, b, NULL)
#define WHERE(prec, c, a, b) cn_lb_op(ctx, CN_OP_WHERE, CN_PREC_##prec, c, a, b)
  cn_ll_stmt *halves = cn_lb_seq(ctx, 2, cn_lb_set(ctx, 0, AT(0), OP(DIV, DOUBLE, DBL(1), DBL(3))),
                                 cn_lb_set(ctx, 0, AT(1), OP(ADD, DOUBLE, DBL(2048), DBL(1))));
  cn_ll_stmt *ints = cn_lb_seq(ctx, 4, cn_lb_set(ctx, 1, AT(0), OP(MUL, SINGLE, SGL(1e10), SGL(3))),
                               cn_lb_set(ctx, 1, AT(1), OP(NEG, SINGLE, SGL(1e12), NULL)),
                               cn_lb_set(ctx, 1, AT(2), SGL(-2.75)),
                               cn_lb_set(ctx, 1, AT(3), OP(DIV, SINGLE, SGL(0), SGL(0))));
  cn_ll_stmt *mix =
      cn_lb_set(ctx, 2, AT(0), OP(ADD, SINGLE, SGL(0.5), cn_lb_get(ctx, 1, CN_PREC_INT32, AT(2))));
  cn_symbol i = cn_symbol_create(ctx, "i", 4);
  cn_index *at_i = cn_lb_indices(ctx, 1, cn_index_iter(i));
  cn_ll_stmt *where_i = cn_lb_loop(
      ctx, i, 0, 4,
      cn_lb_set(ctx, 5, at_i,
                WHERE(SINGLE, cn_lb_get(ctx, 3, CN_PREC_INT32, at_i), SGL(1.5), SGL(-2.5))));
  cn_ll_expr *cond_d_i = cn_lb_get(ctx, 4, CN_PREC_DOUBLE, at_i);
  cn_ll_stmt *where_d = cn_lb_loop(
      ctx, i, 0, 3,
      cn_lb_seq(ctx, 2, cn_lb_set(ctx, 6, at_i, WHERE(SINGLE, cond_d_i, SGL(1.5), SGL(-2.5))),
                cn_lb_set(ctx, 7, at_i, WHERE(INT32, cond_d_i, INT(7), INT(-7)))));
#undef AT
#undef DBL
#undef SGL
#undef INT
#undef OP
#undef WHERE
  cn_ll_param params[8] = {{h, false},      {n32, false},    {mixed, false},    {cond_i, false},
                           {cond_d, false}, {picked, false}, {picked_d, false}, {picked_i, false}};
  cn_ll_proc *proc = cn_lb_proc(
      ctx, "test_proc", cn_lb_seq(ctx, 5, halves, ints, mix, where_i, where_d), 8, params, 0, NULL);
  CHECK_INT(run_proc(ctx, proc, NULL), CN_OK);

  uint16_t h_bits[2];
  CHECK_INT(cn_node_get_cells(h, false, h_bits, 2), CN_OK);
  CHECK_INT(h_bits[0], 0x3555); /* 1/3 -> 0.333251953125 */
  CHECK_INT(h_bits[1], 0x6800); /* 2049 is a tie between 2048 and 2050: even gives 2048 */
  int32_t n[4];
  CHECK_INT(cn_node_get_cells(n32, false, n, 4), CN_OK);
  CHECK_INT(n[0], INT32_MAX);
  CHECK_INT(n[1], INT32_MIN);
  CHECK_INT(n[2], -2);
  CHECK_INT(n[3], 0);
  double v[4];
  CHECK_INT(cn_node_get_values(mixed, false, v, 1), CN_OK);
  CHECK_NEAR(v[0], -1.5, 0);
  CHECK_INT(cn_node_get_values(picked, false, v, 4), CN_OK);
  CHECK_NEAR(v[0], -2.5, 0);
  CHECK_NEAR(v[1], 1.5, 0);
  CHECK_NEAR(v[2], 1.5, 0);
  CHECK_NEAR(v[3], -2.5, 0);
  CHECK_INT(cn_node_get_values(picked_d, false, v, 3), CN_OK);
  CHECK_NEAR(v[0], 1.5, 0); /* NaN is true */
  CHECK_NEAR(v[1], -2.5, 0);
  CHECK_NEAR(v[2], -2.5, 0); /* -0.0 is false, though its bits are not zero */
  CHECK_INT(cn_node_get_cells(picked_i, false, n, 3), CN_OK);
  CHECK_INT(n[0], 7);
  CHECK_INT(n[1], -7);
  CHECK_INT(n[2], -7);
  cn_ctx_destroy(ctx);
}

/* A free symbol s read as an index (embed), as a row selector and inside an affine index; one
 * compiled state run with two bindings. */
static void test_free_symbol(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t x_dims[2] = {3, 4}, four = 4, one = 1;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 2, x_dims);
  cn_node *row = cn_node_create(ctx, "row", CN_PREC_DOUBLE, 1, &four);
  cn_node *reversed = cn_node_create(ctx, "reversed", CN_PREC_DOUBLE, 1, &four);
  cn_node *embedded = cn_node_create(ctx, "embedded", CN_PREC_INT64, 1, &one);
  double xv[12];
  for (int q = 0; q < 12; q++) xv[q] = 10 * (q / 4) + q % 4;
  CHECK_INT(cn_node_set_values(x, false, xv, 12), CN_OK);
  cn_symbol unused = cn_symbol_create(ctx, "unused", 1); /* env is indexed by symbol, not rank */
  cn_symbol j = cn_symbol_create(ctx, "j", 4), s = cn_symbol_create(ctx, "s", 3);
  CHECK(unused == 0 && s > j);
  cn_index *at_j = cn_lb_indices(ctx, 1, cn_index_iter(j));
  cn_ll_stmt *body = cn_lb_seq(
      ctx, 3,
      cn_lb_set(ctx, 3, cn_lb_indices(ctx, 1, cn_index_fixed(0)),
                cn_lb_index(ctx, cn_index_iter(s))),
      cn_lb_loop(ctx, j, 0, 4,
                 cn_lb_set(ctx, 1, at_j,
                           cn_lb_get(ctx, 0, CN_PREC_DOUBLE,
                                     cn_lb_indices(ctx, 2, cn_index_iter(s), cn_index_iter(j))))),
      cn_lb_loop(ctx, j, 0, 4,
                 cn_lb_set(ctx, 2, at_j,
                           cn_lb_get(ctx, 0, CN_PREC_DOUBLE,
                                     cn_lb_indices(ctx, 2, cn_index_iter(s), affine1(j, -1, 3))))));
  cn_ll_param params[4] = {{x, false}, {row, false}, {reversed, false}, {embedded, false}};
  cn_ll_proc *proc = cn_lb_proc(ctx, "test_proc", body, 4, params, 1, &s);
  void *compiled = NULL;
  const char *source = NULL;
  CHECK_INT(cn_backend_interp.compile(ctx, proc, &compiled, &source), CN_OK);
  for (int64_t bound = 2; bound >= 0; bound -= 2) {
    CHECK_INT(run_compiled(ctx, proc, compiled, &bound), CN_OK);
    double r[4], rev[4], e;
    CHECK_INT(cn_node_get_values(row, false, r, 4), CN_OK);
    CHECK_INT(cn_node_get_values(reversed, false, rev, 4), CN_OK);
    CHECK_INT(cn_node_get_values(embedded, false, &e, 1), CN_OK);
    CHECK_NEAR(e, bound, 0);
    for (int q = 0; q < 4; q++) {
      CHECK_NEAR(r[q], 10 * bound + q, 0);
      CHECK_NEAR(rev[q], 10 * bound + 3 - q, 0);
    }
  }
  cn_backend_interp.release(compiled);
  cn_ctx_destroy(ctx);
}

/* Each allocation of compile fails in turn with CN_ERR_NOMEM and leaks nothing; then it works. */
static void test_compile_nomem(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t three = 3;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 1, &three);
  cn_symbol i = cn_symbol_create(ctx, "i", 3);
  cn_ll_stmt *body = cn_lb_loop(
      ctx, i, 0, 3,
      cn_lb_set(ctx, 0, cn_lb_indices(ctx, 1, cn_index_iter(i)),
                cn_lb_op(ctx, CN_OP_MUL, CN_PREC_SINGLE, cn_lb_index(ctx, cn_index_iter(i)),
                         cn_lb_num(ctx, CN_PREC_SINGLE, 0.5), NULL)));
  cn_ll_proc *proc = cn_lb_proc(ctx, "test_proc", body, 1, &(cn_ll_param){x, false}, 0, NULL);
  int failures = 0;
  for (long countdown = 1; countdown <= 3; countdown++) {
    void *compiled = NULL;
    cn_ctx_clear_error(ctx);
    ctx->fail_alloc_countdown = countdown;
    cn_status status = cn_backend_interp.compile(ctx, proc, &compiled, NULL);
    ctx->fail_alloc_countdown = 0;
    if (status == CN_OK) {
      cn_backend_interp.release(compiled);
      continue;
    }
    failures++;
    CHECK_INT(status, CN_ERR_NOMEM);
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_NOMEM);
    CHECK(compiled == NULL);
  }
  CHECK_INT(failures, 3);
  CHECK_INT(run_proc(ctx, proc, NULL), CN_OK);
  double v[3];
  CHECK_INT(cn_node_get_values(x, false, v, 3), CN_OK);
  CHECK_NEAR(v[0], 0, 0);
  CHECK_NEAR(v[1], 0.5, 0);
  CHECK_NEAR(v[2], 1, 0);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul(3, 4, 2);
  test_matmul(40, 50, 30);
  test_padding();
  test_index();
  test_set_vec();
  test_conversions();
  test_free_symbol();
  test_compile_nomem();
  CHECK_DONE();
}
