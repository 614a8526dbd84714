/* Projection inference, core (contraction-is-emergent): the three worked examples, locality of
 * identities, fixed indices, slicing, diagonals, expansion, batch slices by a static symbol, the
 * vector conversion's group map, slot permutation, and errors. Each test checks the whole inferred
 * record (product space and maps, worked out by hand from the seed's rules), then lowers it and
 * runs it on the interpreter and on generated C against values computed by plain loops here. */
#include "proj_check.h"

/* ---- contraction-is-emergent worked example 1: a;b=>c over a[i,j], b[j,k], c[i,k] ---- */
static void test_matmul(void) {
  pt_env e = pt_open();
  cn_shape *a = pt_shape(&e, "a", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *b = pt_shape(&e, "b", PT_NONE, PT_NONE, PT_DIMS(3, 4));
  cn_shape *c = pt_shape(&e, "c", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_einsum(&e, "ij;jk=>ik", c, 2, a, b);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, c), "|->2,4");
  /* classes I = {c_i, a_i}, K = {c_k, b_k}, J = {a_j, b_j}; the LHS map omits j: a reduction */
  cn_proj *p = pt_infer(&e, op,
                        "product space: i=2 k=4 j=3\n"
                        "lhs  [2, 4]: (i, k)\n"
                        "rhs1 [2, 3]: (i, j)\n"
                        "rhs2 [3, 4]: (j, k)\n");
  CHECK(p && cn_proj_lhs_surjective(p) && !cn_proj_lhs_injective(p));
  cn_node *na = pt_node(&e, a, CN_PREC_DOUBLE), *nb = pt_node(&e, b, CN_PREC_DOUBLE),
          *nc = pt_node(&e, c, CN_PREC_DOUBLE);
  pt_iota(na, 1);
  pt_iota(nb, 0.5);
  double want[8];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 4; k++) {
      want[i * 4 + k] = 0;
      for (int j = 0; j < 3; j++) want[i * 4 + k] += (i * 3 + j + 1) * ((j * 4 + k + 1) * 0.5);
    }
  pt_run(&e, "proj_matmul", pt_accum(&e, true, CN_OP_ADD, nc, CN_OP_MUL, 2, na, nb, p), nc, 99,
         want, 1e-12);

  /* Slot permutation: g1 =+ g * v2 reads the forward maps re-addressed, so it contracts k. */
  cn_proj *g1 = cn_proj_permute(e.ctx, p, 1, 2, (int[]){0, 2});
  CHECK_STR(g1 ? cn_proj_to_string(e.ctx, g1) : NULL, "product space: i=2 k=4 j=3\n"
                                                      "lhs  [2, 3]: (i, j)\n"
                                                      "rhs1 [2, 4]: (i, k)\n"
                                                      "rhs2 [3, 4]: (j, k)\n");
  cn_proj *g2 = cn_proj_permute(e.ctx, p, 2, 2, (int[]){1, 0});
  CHECK_STR(g2 ? cn_proj_to_string(e.ctx, g2) : NULL, "product space: i=2 k=4 j=3\n"
                                                      "lhs  [3, 4]: (j, k)\n"
                                                      "rhs1 [2, 3]: (i, j)\n"
                                                      "rhs2 [2, 4]: (i, k)\n");
  CHECK(cn_proj_permute(e.ctx, p, 3, 0, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(e.ctx), "slot 3");
  pt_close(&e);
}

/* ---- contraction-is-emergent worked example 2: a scalar s times a matrix m into r ---- */
static void test_scalar_times_matrix(void) {
  pt_env e = pt_open();
  cn_shape *s = pt_shape(&e, "s", PT_NONE, PT_NONE, PT_DIMS(1, 1));
  cn_shape *m = pt_shape(&e, "m", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *r = pt_shape(&e, "r", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_op(&e, CN_SL_POINTWISE, NULL, r, 2, s, m);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, r), "|->2,3");
  /* s's axes are severed from r's and read at 0; r and m co-iterate: a bijective plain write */
  cn_proj *p = pt_infer(&e, op,
                        "product space: i0=2 i1=3\n"
                        "lhs  [2, 3]: (i0, i1)\n"
                        "rhs1 [1, 1]: (0, 0)\n"
                        "rhs2 [2, 3]: (i0, i1)\n");
  CHECK(p && cn_proj_lhs_surjective(p) && cn_proj_lhs_injective(p));
  cn_node *ns = pt_node(&e, s, CN_PREC_SINGLE), *nm = pt_node(&e, m, CN_PREC_SINGLE),
          *nr = pt_node(&e, r, CN_PREC_SINGLE);
  pt_set(ns, (double[]){-2});
  pt_iota(nm, 1);
  pt_run(&e, "proj_scalar", pt_accum(&e, true, CN_OP_ARG2, nr, CN_OP_MUL, 2, ns, nm, p), nr, 5,
         (double[]){-2, -4, -6, -8, -10, -12}, 0);
  /* its gradient slot: the scalar's map is non-injective, so g1 =+ g * v2 sums over (i0, i1) */
  cn_proj *g = cn_proj_permute(e.ctx, p, 1, 2, (int[]){0, 2});
  CHECK(g && !cn_proj_lhs_injective(g) && cn_proj_lhs_surjective(g));
  pt_close(&e);
}

/* ---- contraction-is-emergent worked example 3: summing by a vector of ones whose length is
 * inferred ---- */
static void test_sum_by_ones(void) {
  pt_env e = pt_open();
  cn_shape *m = pt_shape(&e, "m", PT_NONE, PT_DIMS(3), PT_DIMS(2)); /* memory [2, 3] */
  cn_shape *ones = pt_shape(&e, "ones", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *r = pt_shape(&e, "r", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_op(&e, CN_SL_COMPOSE, NULL, r, 2, m, ones);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, ones), "|->3");
  CHECK_STR(cn_shape_str(e.shapes, r), "|->2");
  cn_proj *p = pt_infer(&e, op,
                        "product space: i0=2 i1=3\n"
                        "lhs  [2]: (i0)\n"
                        "rhs1 [2, 3]: (i0, i1)\n"
                        "rhs2 [3]: (i1)\n");
  CHECK(p && cn_proj_lhs_surjective(p) && !cn_proj_lhs_injective(p));
  cn_node *nm = pt_node(&e, m, CN_PREC_DOUBLE), *no = pt_node(&e, ones, CN_PREC_DOUBLE),
          *nr = pt_node(&e, r, CN_PREC_DOUBLE);
  pt_iota(nm, 1);
  pt_set(no, (double[]){1, 1, 1});
  pt_run(&e, "proj_ones", pt_accum(&e, true, CN_OP_ADD, nr, CN_OP_MUL, 2, nm, no, p), nr, 42,
         (double[]){1 + 2 + 3, 4 + 5 + 6}, 0);
  pt_close(&e);
}

/* ---- Locality: x and y are forced to one size by a product elsewhere; here, in an outer
 * product, they must stay two independent loops. ---- */
static void test_locality(void) {
  pt_env e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_ANY);
  cn_shape *y = pt_shape(&e, "y", PT_NONE, PT_NONE, PT_DIMS(3));
  cn_shape *z = pt_shape(&e, "z", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *w = pt_shape(&e, "w", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *pointwise = pt_einsum(&e, "i;i=>i", z, 2, x, y);
  cn_shape_op *outer = pt_einsum(&e, "i;j=>ij", w, 2, x, y);
  if (!pointwise || !outer || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, x), "|->3");
  CHECK_STR(cn_shape_str(e.shapes, w), "|->3,3");
  pt_infer(&e, pointwise,
           "product space: i=3\n"
           "lhs  [3]: (i)\n"
           "rhs1 [3]: (i)\n"
           "rhs2 [3]: (i)\n");
  cn_proj *p = pt_infer(&e, outer,
                        "product space: i=3 j=3\n"
                        "lhs  [3, 3]: (i, j)\n"
                        "rhs1 [3]: (i)\n"
                        "rhs2 [3]: (j)\n");
  cn_node *nx = pt_node(&e, x, CN_PREC_DOUBLE), *ny = pt_node(&e, y, CN_PREC_DOUBLE),
          *nw = pt_node(&e, w, CN_PREC_DOUBLE);
  pt_set(nx, (double[]){1, 2, 3});
  pt_set(ny, (double[]){10, 20, 30});
  pt_run(&e, "proj_outer", pt_accum(&e, true, CN_OP_ADD, nw, CN_OP_MUL, 2, nx, ny, p), nw, -1,
         (double[]){10, 20, 30, 20, 40, 60, 30, 60, 90}, 0);
  pt_close(&e);
}

/* ---- Fixed indices: select input index 1 (`...|1->... => ...|...`) ---- */
static void test_fixed_input_index(void) {
  pt_env e = pt_open();
  cn_shape *t = pt_shape(&e, "t", PT_DIMS(2), PT_DIMS(3), PT_DIMS(2)); /* memory [2, 2, 3] */
  cn_shape *r = pt_shape(&e, "r", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_einsum(&e, "...|1->... => ...|...", r, 1, t, NULL);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, r), "2|->2");
  cn_proj *p = pt_infer(&e, op,
                        "product space: i0=2 i1=2\n"
                        "lhs  [2, 2]: (i0, i1)\n"
                        "rhs1 [2, 2, 3]: (i0, i1, 1)\n");
  cn_node *nt = pt_node(&e, t, CN_PREC_DOUBLE), *nr = pt_node(&e, r, CN_PREC_DOUBLE);
  pt_iota(nt, 1);
  double want[4];
  for (int b = 0; b < 2; b++)
    for (int o = 0; o < 2; o++) want[b * 2 + o] = (b * 6 + o * 3 + 1) + 1;
  pt_run(&e, "proj_fixed", pt_accum(&e, true, CN_OP_ADD, nr, CN_OP_ID, 1, nt, NULL, p), nr, 9, want,
         0);
  pt_close(&e);
}

/* ---- Slicing at the leftmost batch index 2 (`2...|...->... => ...|...->...`) ---- */
static void test_slice_spec(void) {
  pt_env e = pt_open();
  cn_shape *t = pt_shape(&e, "t", PT_DIMS(4, 2), PT_NONE, PT_DIMS(3)); /* memory [4, 2, 3] */
  cn_shape *r = pt_shape(&e, "r", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_einsum(&e, "2...|...->... => ...|...->...", r, 1, t, NULL);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, r), "2|->3");
  cn_proj *p = pt_infer(&e, op,
                        "product space: i0=2 i1=3\n"
                        "lhs  [2, 3]: (i0, i1)\n"
                        "rhs1 [4, 2, 3]: (2, i0, i1)\n");
  cn_node *nt = pt_node(&e, t, CN_PREC_DOUBLE), *nr = pt_node(&e, r, CN_PREC_DOUBLE);
  pt_iota(nt, 1);
  pt_run(&e, "proj_slice_spec", pt_accum(&e, true, CN_OP_ADD, nr, CN_OP_ID, 1, nt, NULL, p), nr, 0,
         (double[]){13, 14, 15, 16, 17, 18}, 0);
  pt_close(&e);
}

/* ---- Diagonals: `ii=>i` reads one, `i=>ii` writes one (non-surjective: off-diagonal cells
 * keep the neutral element, of + here and of * in the expansion below) ---- */
static void test_diagonals_and_expansion(void) {
  pt_env e = pt_open();
  cn_shape *sq = pt_shape(&e, "sq", PT_NONE, PT_NONE, PT_DIMS(3, 3));
  cn_shape *d = pt_shape(&e, "d", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *v = pt_shape(&e, "v", PT_NONE, PT_NONE, PT_DIMS(3));
  cn_shape *dm = pt_shape(&e, "dm", PT_ANY, PT_ANY, PT_ANY);
  cn_shape *ex = pt_shape(&e, "ex", PT_NONE, PT_NONE, PT_DIMS(3, 2));
  cn_shape_op *read = pt_einsum(&e, "ii=>i", d, 1, sq, NULL);
  cn_shape_op *write = pt_einsum(&e, "i=>ii", dm, 1, v, NULL);
  cn_shape_op *expand = pt_einsum(&e, "i=>i0", ex, 1, v, NULL);
  if (!read || !write || !expand || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, d), "|->3");
  CHECK_STR(cn_shape_str(e.shapes, dm), "|->3,3");
  cn_proj *pr = pt_infer(&e, read,
                         "product space: i=3\n"
                         "lhs  [3]: (i)\n"
                         "rhs1 [3, 3]: (i, i)\n");
  cn_proj *pw = pt_infer(&e, write,
                         "product space: i=3\n"
                         "lhs  [3, 3]: (i, i)\n"
                         "rhs1 [3]: (i)\n");
  cn_proj *px = pt_infer(&e, expand,
                         "product space: i=3\n"
                         "lhs  [3, 2]: (i, 0)\n"
                         "rhs1 [3]: (i)\n");
  CHECK(pw && !cn_proj_lhs_surjective(pw) && cn_proj_lhs_injective(pw));
  CHECK(px && !cn_proj_lhs_surjective(px));
  cn_node *nsq = pt_node(&e, sq, CN_PREC_DOUBLE), *nd = pt_node(&e, d, CN_PREC_DOUBLE),
          *nv = pt_node(&e, v, CN_PREC_DOUBLE), *ndm = pt_node(&e, dm, CN_PREC_DOUBLE),
          *nex = pt_node(&e, ex, CN_PREC_DOUBLE);
  pt_iota(nsq, 1);
  pt_set(nv, (double[]){4, 5, 6});
  pt_run(&e, "proj_diag_read", pt_accum(&e, true, CN_OP_ADD, nd, CN_OP_ID, 1, nsq, NULL, pr), nd, 7,
         (double[]){1, 5, 9}, 0);
  pt_run(&e, "proj_diag_write", pt_accum(&e, true, CN_OP_ADD, ndm, CN_OP_ID, 1, nv, NULL, pw), ndm,
         7, (double[]){4, 0, 0, 0, 5, 0, 0, 0, 6}, 0);
  pt_run(&e, "proj_expand", pt_accum(&e, true, CN_OP_MUL, nex, CN_OP_ID, 1, nv, NULL, px), nex, 7,
         (double[]){4, 1, 5, 1, 6, 1}, 0);
  pt_close(&e);
}

/* ---- Batch slice (`@|`) by a static symbol bound when the routine runs ---- */
static void test_batch_slice_symbol(void) {
  pt_env e = pt_open();
  cn_shape *t = pt_shape(&e, "t", PT_DIMS(3), PT_NONE, PT_DIMS(2)); /* memory [3, 2] */
  cn_shape *r = pt_shape(&e, "r", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_op(&e, CN_SL_BATCH_SLICE, NULL, r, 1, t);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, r), "|->2");
  CHECK(cn_proj_infer(e.projs, op, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(e.ctx), "no slice index given");
  cn_symbol s = cn_symbol_create(e.ctx, "step", 3);
  cn_index at = cn_index_iter(s);
  cn_proj *p = cn_proj_infer(e.projs, op, &at);
  CHECK_STR(p ? cn_proj_to_string(e.ctx, p) : cn_ctx_error(e.ctx), "product space: i0=2\n"
                                                                   "lhs  [2]: (i0)\n"
                                                                   "rhs1 [3, 2]: (step, i0)\n");
  cn_node *nt = pt_node(&e, t, CN_PREC_DOUBLE), *nr = pt_node(&e, r, CN_PREC_DOUBLE);
  pt_iota(nt, 1);
  cn_asgn *a = pt_accum(&e, true, CN_OP_ARG2, nr, CN_OP_ID, 1, nt, NULL, p);
  for (int b = 0; a && b < 2; b++) {
    cn_routine *rt = cn_routine_compile(e.ctx, a, pt_backends[b], "proj_batch_slice");
    CHECK_MSG(rt != NULL, "%s", cn_ctx_error(e.ctx));
    if (!rt) continue;
    for (int64_t step = 0; step < 3; step++) {
      double got[2];
      CHECK(cn_routine_bind(rt, s, step) == CN_OK && cn_routine_run(rt) == CN_OK);
      CHECK(cn_node_get_values(nr, false, got, 2) == CN_OK);
      CHECK_INT(got[0], 2 * step + 1);
      CHECK_INT(got[1], 2 * step + 2);
    }
    cn_routine_free(rt);
  }
  pt_close(&e);
}

/* ---- Vector conversion: one uint4x32 cell feeds 4 single cells ---- */
static void test_vec_convert(void) {
  pt_env e = pt_open();
  cn_shape *bits = pt_shape(&e, "bits", PT_NONE, PT_NONE, PT_DIMS(3));
  cn_shape *u = pt_shape(&e, "u", PT_NONE, PT_NONE, PT_ANY);
  cn_shape_args args;
  memset(&args, 0, sizeof args);
  args.coeff = 4;
  cn_shape_op *op = pt_op(&e, CN_SL_VEC_CONVERT, &args, u, 1, bits);
  if (!op || !pt_finalize(&e)) return pt_close(&e);
  CHECK_STR(cn_shape_str(e.shapes, u), "|->12");
  cn_proj *p = pt_infer(&e, op,
                        "product space: i0=3\n"
                        "lhs  [12]: (4*i0)\n"
                        "rhs1 [3]: (i0)\n");
  cn_node *nb = pt_node(&e, bits, CN_PREC_UINT4X32), *nu = pt_node(&e, u, CN_PREC_SINGLE);
  cn_asgn *a =
      nb && nu && p ? cn_asgn_vec_unop(e.ctx, CN_OP_UNIFORM, nu, (cn_buffer){nb, false}, p) : NULL;
  CHECK_MSG(a != NULL, "%s", cn_ctx_error(e.ctx));
  /* expected lanes, as ocannl-notes §7.3 states them: lane j of a cell is (v[j] >> 8) * 2^-24 */
  uint32_t words[12];
  for (int i = 0; i < 12; i++) words[i] = 0x9E3779B9u * (uint32_t)(i + 1);
  CHECK(nb && cn_node_set_cells(nb, false, words, 3) == CN_OK);
  double want[12];
  for (int i = 0; i < 12; i++) want[i] = (double)(words[i] >> 8) / 16777216.0;
  pt_run(&e, "proj_vec", a, nu, -1, want, 0);
  pt_close(&e);
}

/* ---- Errors ---- */
static void test_errors(void) {
  pt_env e = pt_open();
  cn_shape *x = pt_shape(&e, "x", PT_NONE, PT_NONE, PT_ANY);
  cn_shape *y = pt_shape(&e, "y", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_op *op = pt_op(&e, CN_SL_POINTWISE, NULL, y, 1, x);
  /* shapes not final yet */
  CHECK(op && cn_proj_infer(e.projs, op, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(e.ctx), "is not solved");
  pt_close(&e);

  /* a valid convolution whose input and kernel do not tile never reaches the loops */
  e = pt_open();
  cn_shape *in = pt_shape(&e, "in", PT_NONE, PT_NONE, PT_DIMS(9));
  cn_shape *k = pt_shape(&e, "k", PT_NONE, PT_NONE, PT_DIMS(4));
  cn_shape *out = pt_shape(&e, "out", PT_ANY, PT_ANY, PT_ANY);
  cn_shape_args args = pt_spec(&e, "2*o<+k; k => o");
  CHECK(args.spec &&
        cn_shape_add_op(e.shapes, CN_SL_EINSUM, &args, out, (cn_shape *[]){in, k}, 2) == NULL);
  CHECK_HAS(cn_ctx_error(e.ctx), "does not tile");
  CHECK_HAS(cn_ctx_error(e.ctx), "output row of \"in\" (#1) axis 0 (size 9)");
  pt_close(&e);

  /* a vector conversion whose result rows do not split into groups */
  e = pt_open();
  cn_shape *bits = pt_shape(&e, "bits", PT_NONE, PT_NONE, PT_DIMS(2, 3));
  cn_shape *u = pt_shape(&e, "u", PT_NONE, PT_NONE, PT_DIMS(4, 6));
  memset(&args, 0, sizeof args);
  args.coeff = 4;
  op = pt_op(&e, CN_SL_VEC_CONVERT, &args, u, 1, bits);
  if (op && pt_finalize(&e)) {
    CHECK(cn_proj_infer(e.projs, op, NULL) == NULL);
    CHECK_HAS(cn_ctx_error(e.ctx), "does not split into groups of 4 cells");
  }
  pt_close(&e);
}

int main(void) {
  test_matmul();
  test_scalar_times_matrix();
  test_sum_by_ones();
  test_locality();
  test_fixed_input_index();
  test_slice_spec();
  test_diagonals_and_expansion();
  test_batch_slice_symbol();
  test_vec_convert();
  test_errors();
  CHECK_DONE();
}
