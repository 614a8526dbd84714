/* Tests of the loop IR (src/loops): lowering of assignments built by hand through the public API,
 * simplification of hand-built procedures, and the printed text. Expected texts are written out by
 * hand from the lowering rules of contraction-is-emergent / ocannl-notes §2.3 (pre-fill exactly
 * when =: and not surjective-and-injective, plain write exactly when =: and injective, padding
 * margins reset to the accumulator's neutral element); the margin partition is also checked cell by
 * cell, by running the reset loops over a grid of the padded buffer. */
#include "loops_check.h"

#include <stdarg.h>
#include <stdlib.h>

/* ---- Helpers ---- */

/* Lowers and prints, or returns NULL (with a CHECK failure). */
static const char *lower_text(cn_ctx *ctx, const cn_asgn *asgn, const char *name,
                              cn_ll_proc **proc_out) {
  cn_ll_proc *proc = NULL;
  cn_status status = cn_ll_lower(ctx, asgn, name, &proc);
  CHECK_MSG(status == CN_OK, "lowering %s: %s", name, cn_ctx_error(ctx));
  if (proc_out) *proc_out = proc;
  return proc ? cn_ll_to_string(ctx, proc) : NULL;
}

/* ---- Lowering ---- */

static void test_matmul(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
  cn_node *b = node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)5);
  cn_node *c = node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)5);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_symbol iters[3] = {i, j, k};
  int64_t sizes[3] = {3, 4, 5};
  cn_index mc[2] = {cn_index_iter(i), cn_index_iter(k)};
  cn_index ma[2] = {cn_index_iter(i), cn_index_iter(j)};
  cn_index mb[2] = {cn_index_iter(j), cn_index_iter(k)};
  cn_proj_tensor rhs[2] = {tensor(a, ma), tensor(b, mb)};
  cn_proj *proj = cn_proj_create(ctx, 3, iters, sizes, tensor(c, mc), 2, rhs);
  cn_buffer ab[2] = {{a, false}, {b, false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, ab, proj);
  CHECK(asgn != NULL);
  cn_ll_proc *proc = NULL;
  const char *text = lower_text(ctx, asgn, "matmul", &proc);
  check_text(text,
             "routine matmul\n"
             "  params: a#%d single[3, 4], b#%d single[4, 5], c#%d single[3, 5]\n"
             "# clear 'c' (#%d) to the neutral of +\n"
             "for i0 in 0..3:\n"
             "  for i1 in 0..5:\n"
             "    c[i0, i1] := 0\n"
             "for i in 0..3:\n"
             "  for j in 0..4:\n"
             "    for k in 0..5:\n"
             "      c[i, k] := c[i, k] + a[i, j] * b[j, k]\n",
             a->id, b->id, c->id, c->id);
  if (proc) {
    CHECK_INT(proc->n_params, 3);
    CHECK(proc->params[0].node == a && proc->params[1].node == b && proc->params[2].node == c);
    CHECK_INT(proc->n_free_syms, 0);
    /* Simplification has nothing to change here. */
    CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
    CHECK_STR(cn_ll_to_string(ctx, proc), text);
  }
  cn_ctx_destroy(ctx);
}

/* Pointwise, `=:`: surjective and injective, so no pre-fill and a plain write; and `=+` of the
 * same shape keeps the read-back without clearing. */
static void test_pointwise(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = node(ctx, "a", CN_PREC_DOUBLE, 2, (int64_t)2, (int64_t)3);
  cn_node *b = node(ctx, "b", CN_PREC_DOUBLE, 2, (int64_t)2, (int64_t)3);
  cn_node *c = node(ctx, "c", CN_PREC_DOUBLE, 2, (int64_t)2, (int64_t)3);
  cn_symbol p = cn_symbol_create(ctx, "p", 0), q = cn_symbol_create(ctx, "q", 0);
  cn_symbol iters[2] = {p, q};
  int64_t sizes[2] = {2, 3};
  cn_index m[2] = {cn_index_iter(p), cn_index_iter(q)};
  cn_proj_tensor rhs[2] = {tensor(a, m), tensor(b, m)};
  cn_proj *proj = cn_proj_create(ctx, 2, iters, sizes, tensor(c, m), 2, rhs);
  cn_buffer ab[2] = {{a, false}, {b, false}};
  cn_asgn *plain = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ADD, ab, proj);
  check_text(lower_text(ctx, plain, "add", NULL),
             "routine add\n"
             "  params: a#%d double[2, 3], b#%d double[2, 3], c#%d double[2, 3]\n"
             "for p in 0..2:\n"
             "  for q in 0..3:\n"
             "    c[p, q] := a[p, q] + b[p, q]\n",
             a->id, b->id, c->id);

  /* c =+ a - b: accumulates into the prior contents, which are kept. The subtraction nests as
   * the right operand of +, so it is parenthesized. */
  cn_asgn *acc = cn_asgn_accum(ctx, false, CN_OP_ADD, c, CN_OP_SUB, ab, proj);
  check_text(lower_text(ctx, acc, "acc", NULL),
             "routine acc\n"
             "  params: a#%d double[2, 3], b#%d double[2, 3], c#%d double[2, 3]\n"
             "for p in 0..2:\n"
             "  for q in 0..3:\n"
             "    c[p, q] := c[p, q] + (a[p, q] - b[p, q])\n",
             a->id, b->id, c->id);

  /* c =+ a.merge (identity op): the body reads the merge buffer directly; the value and the
   * merge buffer of a are distinct params, value first. */
  cn_proj_tensor one[1] = {tensor(a, m)};
  cn_proj *proj1 = cn_proj_create(ctx, 2, iters, sizes, tensor(c, m), 1, one);
  cn_buffer am[1] = {{a, true}};
  cn_buffer av[1] = {{a, false}};
  cn_asgn *items[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, c, CN_OP_ID, am, proj1),
                       cn_asgn_accum(ctx, false, CN_OP_MAX, c, CN_OP_ID, av, proj1)};
  cn_ll_proc *proc = NULL;
  check_text(lower_text(ctx, cn_asgn_seq(ctx, 2, items), "merge", &proc),
             "routine merge\n"
             "  params: a#%d double[2, 3], a#%d.merge double[2, 3], c#%d double[2, 3]\n"
             "for p in 0..2:\n"
             "  for q in 0..3:\n"
             "    c[p, q] := c[p, q] + a.merge[p, q]\n"
             "for p in 0..2:\n"
             "  for q in 0..3:\n"
             "    c[p, q] := c[p, q] @^ a[p, q]\n",
             a->id, a->id, c->id);
  if (proc) {
    CHECK_INT(proc->n_params, 3);
    CHECK(!proc->params[0].merge && proc->params[1].merge && proc->params[1].node == a);
    CHECK_INT(proc->body->kind, CN_LL_SEQ);
    CHECK_INT(proc->body->u.seq.count, 2); /* the assignments' seq is flattened into the body */
  }
  cn_ctx_destroy(ctx);
}

/* Runs the top-level reset nests of `proc` (every statement before the last) over a grid of the
 * padded buffer of param 0, counting the writes of each cell. */
static void count_margin_writes(const cn_ll_proc *proc, const cn_node *x, int *writes) {
  int64_t strides[CN_MAX_RANK], stride = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= x->dims[d] + x->pad[d][0] + x->pad[d][1];
  }
  for (int s = 0; s + 1 < proc->body->u.seq.count; s++) {
    const cn_ll_stmt *st = proc->body->u.seq.items[s];
    if (st->kind == CN_LL_COMMENT) continue;
    int64_t from[CN_MAX_RANK], to[CN_MAX_RANK];
    cn_symbol syms[CN_MAX_RANK];
    int depth = 0;
    while (st->kind == CN_LL_FOR) {
      syms[depth] = st->u.loop.sym;
      from[depth] = st->u.loop.from;
      to[depth++] = st->u.loop.to;
      st = st->u.loop.body;
    }
    CHECK_INT(st->kind, CN_LL_SET);
    CHECK_INT(depth, x->rank);
    if (st->kind != CN_LL_SET || depth != x->rank) return;
    for (int d = 0; d < depth; d++)
      CHECK(st->u.set.idx[d].kind == CN_IDX_ITER && st->u.set.idx[d].syms[0] == syms[d]);
    int64_t pos[CN_MAX_RANK];
    for (int d = 0; d < depth; d++) pos[d] = from[d];
    for (;;) {
      int64_t cell = 0;
      for (int d = 0; d < depth; d++) cell += (pos[d] + x->pad[d][0]) * strides[d];
      writes[cell]++;
      int d = depth - 1;
      while (d >= 0 && ++pos[d] >= to[d]) pos[d] = from[d], d--;
      if (d < 0) break;
    }
  }
}

static void test_padded_convolution(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)5);
  cn_node *w = node(ctx, "w", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *y = node(ctx, "y", CN_PREC_SINGLE, 1, (int64_t)5);
  CHECK_INT(cn_node_set_padding(x, 0, 1, 1), CN_OK);
  cn_symbol o = cn_symbol_create(ctx, "o", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_symbol iters[2] = {o, k};
  int64_t sizes[2] = {5, 3};
  cn_index my[1] = {cn_index_iter(o)};
  cn_index mx[1] = {affine2(o, 1, k, 1, -1)};
  cn_index mw[1] = {cn_index_iter(k)};
  cn_proj_tensor rhs[2] = {tensor(x, mx), tensor(w, mw)};
  cn_proj *proj = cn_proj_create(ctx, 2, iters, sizes, tensor(y, my), 2, rhs);
  cn_buffer xw[2] = {{x, false}, {w, false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, y, CN_OP_MUL, xw, proj);
  check_text(lower_text(ctx, asgn, "conv", NULL),
             "routine conv\n"
             "  params: x#%d single[5 pad 1:1], w#%d single[3], y#%d single[5]\n"
             "# reset padding of 'x' (#%d) to the neutral of +\n"
             "for i0 in -1..0:\n"
             "  x[i0] := 0\n"
             "for i0 in 5..6:\n"
             "  x[i0] := 0\n"
             "# clear 'y' (#%d) to the neutral of +\n"
             "for i0 in 0..5:\n"
             "  y[i0] := 0\n"
             "for o in 0..5:\n"
             "  for k in 0..3:\n"
             "    y[o] := y[o] + x[o + k - 1] * w[k]\n",
             x->id, w->id, y->id, x->id, y->id);
  cn_ctx_destroy(ctx);
}

/* A 2-D buffer padded on both axes, read under `max`: the margins are reset to -inf by disjoint
 * boxes covering every margin cell exactly once and no interior cell. */
static void test_margin_partition(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
  cn_node *y = node(ctx, "y", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
  CHECK_INT(cn_node_set_padding(x, 0, 1, 0), CN_OK);
  CHECK_INT(cn_node_set_padding(x, 1, 1, 2), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol iters[2] = {i, j};
  int64_t sizes[2] = {2, 3};
  cn_index m[2] = {cn_index_iter(i), cn_index_iter(j)};
  cn_proj_tensor rhs[1] = {tensor(x, m)};
  cn_proj *proj = cn_proj_create(ctx, 2, iters, sizes, tensor(y, m), 1, rhs);
  cn_buffer xb[1] = {{x, false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_MAX, y, CN_OP_ID, xb, proj);
  cn_ll_proc *proc = NULL;
  check_text(lower_text(ctx, asgn, "pool", &proc),
             "routine pool\n"
             "  params: x#%d single[2 pad 1:0, 3 pad 1:2], y#%d single[2, 3]\n"
             "# reset padding of 'x' (#%d) to the neutral of @^\n"
             "for i0 in -1..0:\n"
             "  for i1 in -1..5:\n"
             "    x[i0, i1] := -inf\n"
             "for i0 in 0..2:\n"
             "  for i1 in -1..0:\n"
             "    x[i0, i1] := -inf\n"
             "for i0 in 0..2:\n"
             "  for i1 in 3..5:\n"
             "    x[i0, i1] := -inf\n"
             "for i in 0..2:\n"
             "  for j in 0..3:\n"
             "    y[i, j] := x[i, j]\n",
             x->id, y->id, x->id);
  if (proc) {
    int writes[3 * 6] = {0};
    count_margin_writes(proc, x, writes);
    for (int r = 0; r < 3; r++)
      for (int col = 0; col < 6; col++) {
        bool interior = r >= 1 && col >= 1 && col <= 3;
        CHECK_MSG(writes[r * 6 + col] == (interior ? 0 : 1), "cell (%d, %d) written %d times", r,
                  col, writes[r * 6 + col]);
      }
  }
  cn_ctx_destroy(ctx);
}

/* Interleave (convolution-is-a-contraction "Striding without a kernel"): r =: x at 2*i is injective
 * but not surjective, so it clears r and then writes plainly; the second half, r =+ z at 2*i + 1,
 * accumulates. */
static void test_interleave(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *z = node(ctx, "z", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *r = node(ctx, "r", CN_PREC_SINGLE, 1, (int64_t)6);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  int64_t size = 3;
  cn_index mr0[1] = {affine1(i, 2, 0)}, mr1[1] = {affine1(i, 2, 1)};
  cn_index mi[1] = {cn_index_iter(i)};
  cn_proj_tensor rx[1] = {tensor(x, mi)}, rz[1] = {tensor(z, mi)};
  cn_proj *even = cn_proj_create(ctx, 1, &i, &size, tensor(r, mr0), 1, rx);
  cn_proj *odd = cn_proj_create(ctx, 1, &i, &size, tensor(r, mr1), 1, rz);
  CHECK(cn_proj_lhs_injective(even) && !cn_proj_lhs_surjective(even));
  cn_buffer xb[1] = {{x, false}}, zb[1] = {{z, false}};
  cn_asgn *items[2] = {cn_asgn_accum(ctx, true, CN_OP_ADD, r, CN_OP_ID, xb, even),
                       cn_asgn_accum(ctx, false, CN_OP_ADD, r, CN_OP_ID, zb, odd)};
  check_text(lower_text(ctx, cn_asgn_seq(ctx, 2, items), "interleave", NULL),
             "routine interleave\n"
             "  params: x#%d single[3], z#%d single[3], r#%d single[6]\n"
             "# clear 'r' (#%d) to the neutral of +\n"
             "for i0 in 0..6:\n"
             "  r[i0] := 0\n"
             "for i in 0..3:\n"
             "  r[2*i] := x[i]\n"
             "for i in 0..3:\n"
             "  r[2*i + 1] := r[2*i + 1] + z[i]\n",
             x->id, z->id, r->id, r->id);
  cn_ctx_destroy(ctx);
}

static void test_fetch(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* Range_over_offsets: row-major offsets; the size-1 axis contributes nothing. */
  cn_node *r = node(ctx, "r", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)1, (int64_t)3);
  check_text(lower_text(ctx, cn_asgn_fetch_range_over_offsets(ctx, r), "offsets", NULL),
             "routine offsets\n"
             "  params: r#%d single[2, 1, 3]\n"
             "for i0 in 0..2:\n"
             "  for i1 in 0..1:\n"
             "    for i2 in 0..3:\n"
             "      r[i0, i1, i2] := 3*i0 + i2\n",
             r->id);
  /* Five iterated axes exceed one cn_index (4 terms): the offset is a sum of two pieces. */
  cn_node *r5 =
      node(ctx, "r5", CN_PREC_INT32, 5, (int64_t)2, (int64_t)2, (int64_t)2, (int64_t)2, (int64_t)2);
  cn_ll_proc *proc = NULL;
  const char *text = lower_text(ctx, cn_asgn_fetch_range_over_offsets(ctx, r5), "offsets5", &proc);
  CHECK_HAS(text, "      r5[i0, i1, i2, i3, i4] := 16*i0 + 8*i1 + 4*i2 + 2*i3 + i4\n");

  /* Slice: the batch index is a static symbol, listed in free_syms. */
  cn_node *src = node(ctx, "src", CN_PREC_DOUBLE, 2, (int64_t)4, (int64_t)3);
  cn_node *s = node(ctx, "s", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_symbol t = cn_symbol_create(ctx, "t", 4);
  proc = NULL;
  check_text(lower_text(ctx, cn_asgn_fetch_slice(ctx, s, t, src), "slice", &proc),
             "routine slice\n"
             "  params: src#%d double[4, 3], s#%d single[3]\n"
             "  static: t\n"
             "for i0 in 0..3:\n"
             "  s[i0] := src[t, i0]\n",
             src->id, s->id);
  if (proc) {
    CHECK_INT(proc->n_free_syms, 1);
    CHECK_INT(proc->free_syms[0], t);
  }

  /* Constant_fill: unrolled, cycling through the values in row-major order. */
  cn_node *f = node(ctx, "f", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
  double values[4] = {1, 2.5, -3, 0.1};
  check_text(lower_text(ctx, cn_asgn_fetch_constant_fill(ctx, f, values, 4), "fill", NULL),
             "routine fill\n"
             "  params: f#%d single[2, 3]\n"
             "f[0, 0] := 1\n"
             "f[0, 1] := 2.5\n"
             "f[0, 2] := -3\n"
             "f[1, 0] := 0.1\n"
             "f[1, 1] := 1\n"
             "f[1, 2] := 2.5\n",
             f->id);
  cn_node *big = node(ctx, "big", CN_PREC_SINGLE, 2, (int64_t)300, (int64_t)300);
  proc = NULL;
  CHECK_INT(cn_ll_lower(ctx, cn_asgn_fetch_constant_fill(ctx, big, values, 4), "big", &proc),
            CN_ERR_UNSUPPORTED);
  CHECK(proc == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "'big'");
  CHECK_HAS(cn_ctx_error(ctx), "65536");

  /* Constant, constant bits, embedded symbol, self id and dim, in one routine. */
  cn_node *c = node(ctx, "c", CN_PREC_HALF, 1, (int64_t)2);
  cn_node *bits = node(ctx, "bits", CN_PREC_UINT4X32, 0);
  cn_node *e = node(ctx, "e", CN_PREC_SINGLE, 0);
  cn_node *id = node(ctx, "", CN_PREC_UINT4X32, 0);
  cn_node *d = node(ctx, "d", CN_PREC_INT64, 0);
  int64_t dim = 7;
  cn_asgn *items[5] = {cn_asgn_fetch_constant(ctx, c, 0.5),
                       cn_asgn_fetch_constant_bits(ctx, bits, 0x100000002ull),
                       cn_asgn_fetch_embed_symbol(ctx, e, t), cn_asgn_fetch_embed_self_id(ctx, id),
                       cn_asgn_fetch_embed_dim(ctx, d, &dim)};
  cn_asgn *seq = cn_asgn_comment(ctx, "fetches", cn_asgn_seq(ctx, 5, items));
  dim = 9; /* read when lowered, not when the assignment was made */
  check_text(lower_text(ctx, seq, "fetches", NULL),
             "routine fetches\n"
             "  params: c#%d half[2], bits#%d uint4x32[], e#%d single[], n%d uint4x32[], d#%d "
             "int64[]\n"
             "  static: t\n"
             "# fetches\n"
             "for i0 in 0..2:\n"
             "  c[i0] := 0.5\n"
             "bits[] := {2, 1, 0, 0}\n"
             "e[] := t\n"
             "n%d[] := {%d, 0, 0, 0}\n"
             "d[] := 9\n",
             c->id, bits->id, e->id, id->id, d->id, id->id, id->id);
  cn_ctx_destroy(ctx);
}

static void test_vec(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *w = node(ctx, "w", CN_PREC_UINT4X32, 2, (int64_t)2, (int64_t)2);
  cn_node *u = node(ctx, "u", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)8);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol iters[2] = {i, j};
  int64_t sizes[2] = {2, 2};
  cn_index mu[2] = {cn_index_iter(i), affine1(j, 4, 0)};
  cn_index mw[2] = {cn_index_iter(i), cn_index_iter(j)};
  cn_proj_tensor rhs[1] = {tensor(w, mw)};
  cn_proj *proj = cn_proj_create(ctx, 2, iters, sizes, tensor(u, mu), 1, rhs);
  cn_buffer wb = {w, false};
  cn_ll_proc *proc = NULL;
  check_text(lower_text(ctx, cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, wb, proj), "uniform", &proc),
             "routine uniform\n"
             "  params: w#%d uint4x32[2, 2], u#%d single[2, 8]\n"
             "for i in 0..2:\n"
             "  for j in 0..2:\n"
             "    u[i, 4*j +4] := uint4x32_to_prec_uniform(w[i, j])\n",
             w->id, u->id);
  if (proc) {
    const cn_ll_stmt *s = proc->body->u.seq.items[0]->u.loop.body->u.loop.body;
    CHECK_INT(s->kind, CN_LL_SET_VEC);
    CHECK_INT(s->u.vec.length, 4);
    CHECK_INT(s->u.vec.param, 1);
    CHECK_INT(s->u.vec.arg->prec, CN_PREC_UINT4X32);
  }
  cn_ctx_destroy(ctx);
}

/* Names: two symbols named i and two nodes labelled x in one routine are told apart by id. */
static void test_name_clashes(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x1 = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_node *x2 = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_symbol i1 = cn_symbol_create(ctx, "i", 0), i2 = cn_symbol_create(ctx, "i", 0);
  int64_t size = 2;
  cn_index m1[1] = {cn_index_iter(i1)}, m2[1] = {cn_index_iter(i2)};
  cn_proj_tensor r1[1] = {tensor(x2, m1)}, r2[1] = {tensor(x1, m2)};
  cn_proj *p1 = cn_proj_create(ctx, 1, &i1, &size, tensor(x1, m1), 1, r1);
  cn_proj *p2 = cn_proj_create(ctx, 1, &i2, &size, tensor(x2, m2), 1, r2);
  cn_buffer b1[1] = {{x2, false}}, b2[1] = {{x1, false}};
  cn_asgn *items[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, x1, CN_OP_ID, b1, p1),
                       cn_asgn_accum(ctx, true, CN_OP_ADD, x2, CN_OP_NEG, b2, p2)};
  check_text(lower_text(ctx, cn_asgn_seq(ctx, 2, items), "clash", NULL),
             "routine clash\n"
             "  params: x#%d single[2], x#%d single[2]\n"
             "for i#%d in 0..2:\n"
             "  x#%d[i#%d] := x#%d[i#%d] + x#%d[i#%d]\n"
             "for i#%d in 0..2:\n"
             "  x#%d[i#%d] := neg(x#%d[i#%d])\n",
             x1->id, x2->id, i1, x1->id, i1, x1->id, i1, x2->id, i1, i2, x2->id, i2, x1->id, i2);
  cn_ll_proc *proc = NULL;
  CHECK_INT(cn_ll_lower(ctx, items[0], "not an identifier", &proc), CN_ERR_INVALID);
  CHECK(proc == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "'not an identifier' is not a C identifier");
  cn_ctx_destroy(ctx);
}

/* Labels: an unlabelled node prints as n<id>, so a node labelled the same is told apart from it
 * by id; the value and merge buffers of one node share its label without a clash. */
static void test_label_clashes(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = node(ctx, "", CN_PREC_SINGLE, 1, (int64_t)2);
  char same[16];
  snprintf(same, sizeof same, "n%d", a->id);
  cn_node *b = node(ctx, same, CN_PREC_SINGLE, 1, (int64_t)2);
  cn_node *c = node(ctx, "c", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  int64_t size = 2;
  cn_index m[1] = {cn_index_iter(i)};
  cn_proj_tensor r2[2] = {tensor(b, m), tensor(c, m)}, r1[1] = {tensor(a, m)};
  cn_proj *p2 = cn_proj_create(ctx, 1, &i, &size, tensor(a, m), 2, r2);
  cn_proj *p1 = cn_proj_create(ctx, 1, &i, &size, tensor(c, m), 1, r1);
  cn_buffer sum[2] = {{b, false}, {c, true}}, copy[1] = {{a, false}};
  cn_asgn *items[2] = {cn_asgn_accum(ctx, true, CN_OP_ADD, a, CN_OP_ADD, sum, p2),
                       cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_ID, copy, p1)};
  check_text(lower_text(ctx, cn_asgn_seq(ctx, 2, items), "labels", NULL),
             "routine labels\n"
             "  params: n%d single[2], n%d#%d single[2], c#%d single[2], c#%d.merge single[2]\n"
             "for i in 0..2:\n"
             "  n%d#%d[i] := n%d#%d[i] + c.merge[i]\n"
             "for i in 0..2:\n"
             "  c[i] := n%d#%d[i]\n",
             a->id, a->id, b->id, c->id, c->id, a->id, a->id, a->id, b->id, a->id, a->id);
  cn_ctx_destroy(ctx);
}

/* The symbol list of a procedure: the loop variables and the symbols it reads (a static index
 * included), ascending, each once; a symbol of the context the procedure does not name is absent.
 */
static void test_symbol_list(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
  cn_node *y = node(ctx, "y", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_symbol t = cn_symbol_create(ctx, "t", 3), unused = cn_symbol_create(ctx, "u", 0),
            i = cn_symbol_create(ctx, "i", 0);
  int64_t size = 2;
  cn_index my[1] = {cn_index_iter(i)}, mx[2] = {cn_index_iter(i), cn_index_iter(t)};
  cn_proj_tensor rx[1] = {tensor(x, mx)};
  cn_proj *p = cn_proj_create(ctx, 1, &i, &size, tensor(y, my), 1, rx);
  cn_buffer b[1] = {{x, false}};
  cn_ll_proc *proc = NULL;
  CHECK_INT(cn_ll_lower(ctx, cn_asgn_accum(ctx, true, CN_OP_ADD, y, CN_OP_ID, b, p), "sl", &proc),
            CN_OK);
  cn_ll_symbols symbols = {0};
  CHECK_INT(cn_ll_symbols_of(ctx, proc, &symbols), CN_OK);
  CHECK_INT(symbols.n, 2);
  CHECK_INT(symbols.syms[0], t);
  CHECK_INT(symbols.syms[1], i);
  CHECK_INT(cn_ll_symbol_slot(&symbols, t), 0);
  CHECK_INT(cn_ll_symbol_slot(&symbols, i), 1);
  CHECK_INT(cn_ll_symbol_slot(&symbols, unused), -1);
  CHECK_INT(proc->n_free_syms, 1);
  CHECK_INT(proc->free_syms[0], t);
  cn_ctx_destroy(ctx);
}

/* Every allocation of the lowering and the printing may fail: each failure is reported as
 * CN_ERR_NOMEM, and the first run that gets through prints the same text as an unhindered one. */
static void test_allocation_failures(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)4);
  cn_node *y = node(ctx, "y", CN_PREC_SINGLE, 1, (int64_t)4);
  CHECK_INT(cn_node_set_padding(x, 0, 1, 1), CN_OK);
  cn_symbol o = cn_symbol_create(ctx, "o", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_symbol iters[2] = {o, k};
  int64_t sizes[2] = {4, 3};
  cn_index my[1] = {cn_index_iter(o)}, mx[1] = {affine2(o, 1, k, 1, -1)};
  cn_proj_tensor rhs[1] = {tensor(x, mx)};
  cn_proj *proj = cn_proj_create(ctx, 2, iters, sizes, tensor(y, my), 1, rhs);
  cn_buffer xb[1] = {{x, false}};
  cn_asgn *items[2] = {cn_asgn_accum(ctx, true, CN_OP_ADD, y, CN_OP_ID, xb, proj),
                       cn_asgn_fetch_range_over_offsets(ctx, x)};
  cn_asgn *asgn = cn_asgn_comment(ctx, "sum", cn_asgn_seq(ctx, 2, items));
  const char *reference = lower_text(ctx, asgn, "sum", NULL);
  int failures = 0;
  for (long countdown = 1; countdown < 1000; countdown++) {
    ctx->fail_alloc_countdown = countdown;
    cn_ll_proc *proc = NULL;
    cn_status status = cn_ll_lower(ctx, asgn, "sum", &proc);
    const char *text = status == CN_OK ? cn_ll_to_string(ctx, proc) : NULL;
    if (status == CN_OK && text) {
      ctx->fail_alloc_countdown = 0;
      CHECK_STR(text, reference);
      break;
    }
    failures++;
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_NOMEM);
    if (status != CN_OK) CHECK(proc == NULL);
  }
  ctx->fail_alloc_countdown = 0;
  CHECK(failures > 5);
  cn_ctx_destroy(ctx);
}

/* ---- Simplification (procedures built by hand) ---- */

static void test_simplify(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *y = node(ctx, "y", CN_PREC_SINGLE, 1, (int64_t)3);
  cn_node *z = node(ctx, "z", CN_PREC_DOUBLE, 1, (int64_t)3);
  cn_node *n = node(ctx, "n", CN_PREC_INT32, 1, (int64_t)3);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index *ix = cn_lb_indices(ctx, 1, cn_index_iter(i));
  const int X = 0, Y = 1, Z = 2, N = 3;
  const cn_prec S = CN_PREC_SINGLE;
  cn_ll_param params[4] = {{x, false}, {y, false}, {z, false}, {n, false}};
  /* Shorthands of this listing: constants and ops in single, y[i], stores into x[i]. */
#define K(v)        cn_lb_num(ctx, S, v)
#define OP(o, a, b) cn_lb_op(ctx, CN_OP_##o, S, a, b, NULL)
#define Y_I         cn_lb_get(ctx, Y, S, ix)
#define TO_X(e)     cn_lb_set(ctx, X, ix, e)
  cn_ll_stmt *body = cn_lb_seq(
      ctx, 9,
      /* 2 * (3 + 4) folds to 14 */
      TO_X(OP(MUL, K(2), OP(ADD, K(3), K(4)))),
      /* y * 1 and 1 * y become y; 1 is compared in the op's precision, so a byte 1 counts */
      TO_X(OP(MUL, Y_I, K(1))), TO_X(OP(MUL, cn_lb_num(ctx, CN_PREC_BYTE, 1), Y_I)),
      /* y + 0, 0 + y, y - 0 become y; 0 - y stays */
      cn_lb_loop(ctx, i, 0, 3,
                 cn_lb_seq(ctx, 4, TO_X(OP(ADD, Y_I, K(0))), TO_X(OP(ADD, K(0), Y_I)),
                           TO_X(OP(SUB, Y_I, K(0))), TO_X(OP(SUB, K(0), Y_I)))),
      /* z is double under a single op: dropping the op would drop the conversion */
      TO_X(OP(MUL, cn_lb_get(ctx, Z, CN_PREC_DOUBLE, ix), K(1))),
      /* y * 0.5 is no identity; y / 1 and y ** 1 are */
      TO_X(OP(DIV, OP(POW, OP(MUL, Y_I, K(0.5)), K(1)), K(1))),
      /* where(0.0 as double, 1, 2) in int32: the condition is false */
      cn_lb_set(ctx, N, ix,
                cn_lb_op(ctx, CN_OP_WHERE, CN_PREC_INT32, cn_lb_num(ctx, CN_PREC_DOUBLE, 0.0),
                         cn_lb_num(ctx, CN_PREC_INT32, 1), cn_lb_num(ctx, CN_PREC_INT32, 2))),
      /* an embedded fixed index is a constant; 7 + 0.25 in single folds exactly */
      TO_X(OP(ADD, cn_lb_index(ctx, cn_index_fixed(7)), K(0.25))),
      /* empty loops and sequences disappear; nested sequences are spliced */
      cn_lb_seq(ctx, 3, cn_lb_loop(ctx, i, 2, 2, TO_X(K(1))), cn_lb_seq(ctx, 0),
                cn_lb_loop(ctx, i, 0, 3, cn_lb_seq(ctx, 1, cn_lb_seq(ctx, 0)))));
  cn_ll_proc *proc = cn_lb_proc(ctx, "simp", body, 4, params, 0, NULL);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  check_text(cn_ll_to_string(ctx, proc),
             "routine simp\n"
             "  params: x#%d single[3], y#%d single[3], z#%d double[3], n#%d int32[3]\n"
             "x[i] := 14\n"
             "x[i] := y[i]\n"
             "x[i] := y[i]\n"
             "for i in 0..3:\n"
             "  x[i] := y[i]\n"
             "  x[i] := y[i]\n"
             "  x[i] := y[i]\n"
             "  x[i] := 0 - y[i]\n"
             "x[i] := z[i] * 1\n"
             "x[i] := y[i] * 0.5\n"
             "n[i] := 2\n"
             "x[i] := 7.25\n",
             x->id, y->id, z->id, n->id);
  CHECK_INT(body->u.seq.count, 8);

  /* A procedure whose every statement does nothing keeps an empty body. */
  body = cn_lb_seq(ctx, 2, cn_lb_loop(ctx, i, 0, 0, TO_X(K(1))), cn_lb_seq(ctx, 0));
#undef K
#undef OP
#undef Y_I
#undef TO_X
  proc = cn_lb_proc(ctx, "simp", body, 4, params, 0, NULL);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  CHECK_INT(proc->body->kind, CN_LL_SEQ);
  CHECK_INT(proc->body->u.seq.count, 0);
  check_text(cn_ll_to_string(ctx, proc),
             "routine simp\n"
             "  params: x#%d single[3], y#%d single[3], z#%d double[3], n#%d int32[3]\n",
             x->id, y->id, z->id, n->id);
  cn_ctx_destroy(ctx);
}

/* Simplification after lowering: an assignment over an empty product space (a node without
 * cells) disappears, the constant fetch stays. */
static void test_simplify_lowered(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)0);
  cn_node *b = node(ctx, "b", CN_PREC_SINGLE, 1, (int64_t)2);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  int64_t zero = 0;
  cn_index m[1] = {cn_index_iter(i)};
  cn_index mb[1] = {cn_index_fixed(1)};
  cn_proj_tensor rhs[1] = {tensor(b, mb)};
  cn_proj *proj = cn_proj_create(ctx, 1, &i, &zero, tensor(a, m), 1, rhs);
  cn_buffer bb[1] = {{b, false}};
  /* a has no cells: the loop over it is empty and disappears */
  cn_asgn *items[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, a, CN_OP_ID, bb, proj),
                       cn_asgn_fetch_constant(ctx, b, 2)};
  cn_ll_proc *proc = NULL;
  CHECK_INT(cn_ll_lower(ctx, cn_asgn_seq(ctx, 2, items), "empty", &proc), CN_OK);
  if (proc) {
    CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
    check_text(cn_ll_to_string(ctx, proc),
               "routine empty\n"
               "  params: a#%d single[0], b#%d single[2]\n"
               "for i0 in 0..2:\n"
               "  b[i0] := 2\n",
               a->id, b->id);
  }
  cn_ctx_destroy(ctx);
}

/* cn_ceil_div_i64 (builtins.h), which both backends use for bounds with a divisor: exact for
 * either sign, total for the edge cases. */
static void test_ceil_div(void) {
  static const struct {
    int64_t a, b, expected;
  } cases[] = {
      {7, 2, 4},
      {6, 2, 3},
      {1, 2, 1},
      {0, 3, 0},
      {-1, 2, 0},
      {-5, 2, -2},
      {-6, 2, -3},
      {-7, 3, -2},
      {5, -2, -2},
      {-5, -2, 3},
      {-4, -2, 2},
      {9, 1, 9},
      {3, 0, 0},
      {INT64_MAX, 2, INT64_MAX / 2 + 1},
      {INT64_MIN, 2, INT64_MIN / 2},
      {INT64_MIN + 1, 4, INT64_MIN / 4 + 1},
      {INT64_MIN, -1, INT64_MIN},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    CHECK_MSG(cn_ceil_div_i64(cases[c].a, cases[c].b) == cases[c].expected,
              "ceil(%lld / %lld) = %lld, expected %lld", (long long)cases[c].a,
              (long long)cases[c].b, (long long)cn_ceil_div_i64(cases[c].a, cases[c].b),
              (long long)cases[c].expected);
}

/* Guard conditions that become loop bounds, and those that stay (the simplifier's rules, loops.h
 * and simplify.c); every expected range is derived in the comment. */
static void test_bounds_from_guards(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t)8);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0),
            t = cn_symbol_create(ctx, "t", 0);
  cn_index *xi = cn_lb_indices(ctx, 1, cn_index_iter(i)),
           *xk = cn_lb_indices(ctx, 1, cn_index_iter(k));
  cn_ll_param params[1] = {{x, false}};
  const cn_prec S = CN_PREC_SINGLE;
  cn_index tri = affine2(i, 1, k, -1, 0); /* i - k */

  /* 1. The triangle 0 <= i - k < 4 over 0..4 x 0..4: k in [i - 3, i + 1); i - 3 never passes 0
   * (dropped), i + 1 never passes 4 (it replaces the box's end). 0 <= t < 2 mentions no loop
   * variable: it stays a guard. */
  cn_ll_cond c1[2] = {{tri, 0, 4}, {cn_index_iter(t), 0, 2}};
  /* 2. The same condition next to a statement it does not guard: it stays. */
  cn_ll_cond c2[1] = {{tri, 0, 4}};
  /* 3. 0 <= 3 - 2*i < 10 in the same guard: i is its innermost variable although the guard sits
   * in k's loop, which is the whole body of i's loop; i in [ceil(-6 / 2), ceil(4 / 2)) =
   * [-3, 2), constants that shrink i's box to 0..2; the guard is left empty and goes. */
  cn_ll_cond c3[2] = {{tri, 0, 4}, {affine1(i, -2, 3), 0, 10}};
  /* 4. 0 <= 2*i - 2*k + 1 < 7: k in [ceil((2*i - 5) / 2), ceil((2*i + 2) / 2)), in lowest
   * terms [i - 2, i + 1); i - 2 passes 0 only for some i, so max(0, i - 2). */
  cn_ll_cond c4[1] = {{affine2(i, 2, k, -2, 1), 0, 7}};
  /* 5. 0 <= i - 2*k + 1 < 4 and 0 <= i + k - 2 < 10 over 0..6 x 0..5: lower bounds
   * ceil((i - 2) / 2) (in -1..2) and 2 - i (in -3..2), both below 0 for some i: max(0, ...);
   * upper bounds ceil((i + 2) / 2) (in 1..4, which becomes the box's end) and 12 - i (at least
   * 7, dropped). */
  cn_ll_cond c5[2] = {{affine2(i, 1, k, -2, 1), 0, 4}, {affine2(i, 1, k, 1, -2), 0, 10}};
  /* 6. 0 <= k - 2 < 10 and 0 <= 1 - k < 10: k >= 2 and k < 2, an empty box: the nest goes. */
  cn_ll_cond c6[2] = {{affine1(k, 1, -2), 0, 10}, {affine1(k, -1, 1), 0, 10}};
  cn_ll_stmt *one = cn_lb_set(ctx, 0, xk, cn_lb_num(ctx, S, 1));
  cn_ll_stmt *body = cn_lb_seq(
      ctx, 6, cn_lb_loop(ctx, i, 0, 4, cn_lb_loop(ctx, k, 0, 4, cn_lb_guard(ctx, 2, c1, one))),
      cn_lb_loop(ctx, i, 0, 4,
                 cn_lb_loop(ctx, k, 0, 4,
                            cn_lb_seq(ctx, 2, cn_lb_guard(ctx, 1, c2, one),
                                      cn_lb_set(ctx, 0, xi, cn_lb_num(ctx, S, 2))))),
      cn_lb_loop(ctx, i, 0, 4, cn_lb_loop(ctx, k, 0, 4, cn_lb_guard(ctx, 2, c3, one))),
      cn_lb_loop(ctx, i, 0, 4, cn_lb_loop(ctx, k, 0, 4, cn_lb_guard(ctx, 1, c4, one))),
      cn_lb_loop(ctx, i, 0, 6, cn_lb_loop(ctx, k, 0, 5, cn_lb_guard(ctx, 2, c5, one))),
      cn_lb_loop(ctx, i, 0, 3, cn_lb_loop(ctx, k, 0, 4, cn_lb_guard(ctx, 2, c6, one))));
  cn_ll_proc *proc = cn_lb_proc(ctx, "bounds", body, 1, params, 1, &t);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  check_text(cn_ll_to_string(ctx, proc),
             "routine bounds\n"
             "  params: x#%d single[8]\n"
             "  static: t\n"
             "for i in 0..4:\n"
             "  for k in 0..i + 1:\n"
             "    if 0 <= t < 2:\n"
             "      x[k] := 1\n"
             "for i in 0..4:\n"
             "  for k in 0..4:\n"
             "    if 0 <= i - k < 4:\n"
             "      x[k] := 1\n"
             "    x[i] := 2\n"
             "for i in 0..2:\n"
             "  for k in 0..i + 1:\n"
             "    x[k] := 1\n"
             "for i in 0..4:\n"
             "  for k in max(0, i - 2)..i + 1:\n"
             "    x[k] := 1\n"
             "for i in 0..6:\n"
             "  for k in max(0, ceil((i - 2) / 2), -i + 2)..ceil((i + 2) / 2):\n"
             "    x[k] := 1\n",
             x->id);
  /* The boxes shrink to what the bounds guarantee: nest 1's k to 0..4 (i + 1 <= 4), nest 5's k
   * to 0..4 (ceil((i + 2) / 2) <= 4). */
  const cn_ll_stmt *k1 = proc->body->u.seq.items[0]->u.loop.body;
  const cn_ll_stmt *k5 = proc->body->u.seq.items[4]->u.loop.body;
  CHECK(k1->kind == CN_LL_FOR && k1->u.loop.from == 0 && k1->u.loop.to == 4);
  CHECK(k5->kind == CN_LL_FOR && k5->u.loop.from == 0 && k5->u.loop.to == 4);
  CHECK_INT(k5->u.loop.n_lower, 3);
  CHECK_INT(k5->u.loop.n_upper, 1);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul();
  test_pointwise();
  test_padded_convolution();
  test_margin_partition();
  test_interleave();
  test_fetch();
  test_vec();
  test_name_clashes();
  test_label_clashes();
  test_symbol_list();
  test_allocation_failures();
  test_simplify();
  test_simplify_lowered();
  test_ceil_div();
  test_bounds_from_guards();
  CHECK_DONE();
}
