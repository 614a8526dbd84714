/* Recognition of GEMM-class nests by their projections (issue 17, item 1): which perfect nests are
 * a sum of products of two operands, and how their loops split into the M, N, K and batch groups a
 * register-tiled, packed micro-kernel works on. An analysis only: it reads the IR and never
 * changes it.
 *
 * Contract: cn_sched_gemm_of accepts a perfect nest whose body is exactly one store
 * `c[w] := c[w] + x[p] * y[q]` (an accumulation by addition of a product of two reads, all three
 * of one precision, c distinct from x and y, no guard, no axis of w mixing two loops, so each
 * cell of c is one point of the output loops), and classifies every loop variable v of
 * the nest by the accesses that mention it: in c and x only: M (rows: the output walks it with x);
 * in c and y only: N (columns); in x and y only: K (the reduction); in all three: batch. A loop
 * that no access mentions, or only one access (a sum over one operand, a broadcast of the
 * output), makes the nest not GEMM-class, as does any other shape of body: a max accumulation, a
 * product of three operands, a product with a constant, an assignment without accumulation (an
 * interleave). Indices may be affine in any number of loops with any strides and offsets (a
 * transposed operand, a batched attention product, a gradient whose slots were permuted, a
 * convolution whose input reads stride*o + dilation*k: o is M with the output, k is K with the
 * kernel). The groups are what the order of the loops and the operands' strides are not: M is
 * the group that walks x, N the one that walks y, whatever the nest's loop order; a kernel picks
 * its MR x NR tile over them.
 *
 * The pass (cn_sched_gemm_plans) turns the GEMM-class nests a backend can tile into CN_LL_GEMM
 * statements with a plan (loops.h): the nest as the lowering ordered it, whose K loops in nest
 * order are each cell's order of accumulation, the mode, and cache blocks sized so that a packed
 * panel of the second operand (kc steps of a register tile's columns) stays in L1, a block of the
 * first (mc rows by kc) in L2 and a block of the second (kc by nc) in about half of the last
 * level. */
#include "sched/sched.h"

#include <stdio.h>

/* Whether the expression is a read of param at exactly idx. */
static bool is_read_of(const cn_ll_proc *proc, const cn_ll_expr *e, int param,
                       const cn_index *idx) {
  if (e->kind != CN_LE_GET || e->u.get.param != param) return false;
  for (int d = 0; d < proc->params[param].node->rank; d++)
    if (!cn_index_equal(&e->u.get.idx[d], &idx[d])) return false;
  return true;
}

/* Whether an access mentions sym in any of its axes. */
static bool mentions(const cn_ll_proc *proc, int param, const cn_index *idx, cn_symbol sym) {
  for (int d = 0; d < proc->params[param].node->rank; d++)
    if (cn_index_mentions(&idx[d], sym)) return true;
  return false;
}

/* The nest's one store when it is c[w] := c[w] + x[p] * y[q] (one precision, c distinct from x
 * and y, no guard), else NULL. */
static const cn_ll_stmt *product_store(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  const cn_ll_stmt *body = nest->loops[nest->depth - 1]->u.loop.body;
  while (body->kind == CN_LL_SEQ && body->u.seq.count == 1) body = body->u.seq.items[0];
  if (body->kind != CN_LL_SET) return NULL;
  int c = body->u.set.param;
  cn_prec prec = proc->params[c].node->prec;
  const cn_ll_expr *sum = body->u.set.value;
  if (sum->kind != CN_LE_OP || sum->u.op.op != CN_OP_ADD || sum->prec != prec ||
      !is_read_of(proc, sum->u.op.args[0], c, body->u.set.idx))
    return NULL;
  const cn_ll_expr *product = sum->u.op.args[1];
  if (product->kind != CN_LE_OP || product->u.op.op != CN_OP_MUL || product->prec != prec)
    return NULL;
  const cn_ll_expr *x = product->u.op.args[0], *y = product->u.op.args[1];
  if (x->kind != CN_LE_GET || y->kind != CN_LE_GET || x->prec != prec || y->prec != prec ||
      x->u.get.param == c || y->u.get.param == c ||
      proc->params[x->u.get.param].node->prec != prec ||
      proc->params[y->u.get.param].node->prec != prec)
    return NULL;
  return body;
}

bool cn_sched_gemm_of(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_sched_gemm *out) {
  const cn_ll_stmt *body = product_store(proc, nest);
  if (!body) return false;
  int c = body->u.set.param;
  const cn_index *w = body->u.set.idx;
  const cn_ll_expr *product = body->u.set.value->u.op.args[1];
  const cn_ll_expr *x = product->u.op.args[0], *y = product->u.op.args[1];
  /* each cell of c one (batch, M, N) point: no axis of w mixes two loops (a convolution's input
   * gradient writes in[oh + kh]: several points per cell, not a matrix product) */
  for (int d = 0; d < proc->params[c].node->rank; d++) {
    int loops = 0;
    for (int k = 0; k < nest->depth; k++)
      loops += cn_index_mentions(&w[d], nest->loops[k]->u.loop.sym);
    if (loops > 1) return false;
  }
  *out = (cn_sched_gemm){.c = c, .x = x->u.get.param, .y = y->u.get.param, .depth = nest->depth};
  for (int k = 0; k < nest->depth; k++) {
    cn_symbol v = nest->loops[k]->u.loop.sym;
    bool in_c = mentions(proc, c, w, v);
    bool in_x = mentions(proc, x->u.get.param, x->u.get.idx, v);
    bool in_y = mentions(proc, y->u.get.param, y->u.get.idx, v);
    cn_gemm_role role;
    if (in_c && in_x && in_y)
      role = CN_GEMM_BATCH;
    else if (in_c && in_x && !in_y)
      role = CN_GEMM_M;
    else if (in_c && in_y && !in_x)
      role = CN_GEMM_N;
    else if (in_x && in_y && !in_c)
      role = CN_GEMM_K;
    else
      return false;
    out->role[k] = role;
    out->count[role]++;
  }
  /* a product needs rows, columns and a reduction to be a matrix product at all */
  return out->count[CN_GEMM_M] > 0 && out->count[CN_GEMM_N] > 0 && out->count[CN_GEMM_K] > 0;
}

/* Cache blocks, in values: mc rows and nc columns sized for a block of `step` reduction steps (a
 * 64-value-wide panel of y over them in half of L1, but 256 to 512): mc x step of x in a quarter
 * of a 1 MiB L2, step x nc of y in half of the last level (at most 4096 columns); then kc = 512
 * reduction steps per block, twice the sizing step where L1 is 48 KiB or less. Issue 29 measured
 * it: full tuning on Zen 5 (1024^2, 2048^2) and an AVX-512 Intel Xeon (1024^2) picked exactly these
 * blocks with the default tile, 10-15% faster at 2048^2 than kc = 256 (fewer passes over the
 * tile of c); a longer block reads y's panel from L2, which the micro-kernel's two loads per
 * step over 24 accumulators leave room for. */
static void block_sizes(cn_prec prec, int64_t l1, int64_t llc, cn_ll_gemm *plan) {
  int64_t bytes = prec == CN_PREC_DOUBLE ? 8 : 4;
  int64_t step = l1 / 2 / (64 * 4); /* the panel's width in bytes is the same for both precisions */
  if (step < 256) step = 256;
  if (step > 512) step = 512;
  plan->mc = ((int64_t)1 << 18) / (step * bytes);
  plan->mc -= plan->mc % 16;
  plan->nc = llc / 2 / (step * bytes);
  if (plan->nc > 4096) plan->nc = 4096;
  plan->nc -= plan->nc % 64;
  if (plan->nc < 64) plan->nc = 64;
  plan->kc = 512;
}

/* The loop of the one-loop group role, or -1 when the group has another count of loops. */
static int only_loop(const cn_sched_gemm *g, cn_gemm_role role) {
  if (g->count[role] != 1) return -1;
  int k = 0;
  while (g->role[k] != role) k++;
  return k;
}

/* The triangle loop k's bounds make (loops.h, cn_ll_gemm.tri), with its offset, or
 * CN_GEMM_TRI_NONE when a plan cannot take them: k has the one upper bound `other + offset`
 * (div 1), other a loop of the nest, both from 0, and the pair is (N, M), (K, M) or (M, K) with
 * those groups one loop each. Causal attention's six products are such: the scores and their
 * gradient (N < M + 1), P V and the queries' gradient (K < M + 1), the values' and the keys'
 * gradients (M < K + 1). The plan keeps the nest, bound included: what a cell gets is unchanged. */
static cn_gemm_tri triangle(const cn_sched_nest *nest, const cn_sched_gemm *g, int k,
                            int64_t *offset) {
  const cn_ll_stmt *loop = nest->loops[k];
  if (loop->u.loop.n_lower || loop->u.loop.n_upper != 1 || loop->u.loop.from != 0 ||
      loop->u.loop.upper[0].div != 1)
    return CN_GEMM_TRI_NONE;
  const cn_index *bound = &loop->u.loop.upper[0].expr;
  bool unit = bound->kind == CN_IDX_ITER ||
              (bound->kind == CN_IDX_AFFINE && bound->n_terms == 1 && bound->coeffs[0] == 1);
  if (!unit) return CN_GEMM_TRI_NONE;
  int m = only_loop(g, CN_GEMM_M), kk = only_loop(g, CN_GEMM_K), n = only_loop(g, CN_GEMM_N);
  cn_gemm_tri tri = CN_GEMM_TRI_NONE;
  int other = -1;
  if (k == n && m >= 0) tri = CN_GEMM_TRI_N, other = m;
  if (k == kk && m >= 0) tri = CN_GEMM_TRI_K, other = m;
  if (k == m && kk >= 0) tri = CN_GEMM_TRI_M, other = kk;
  if (tri == CN_GEMM_TRI_NONE || nest->loops[other]->u.loop.from != 0 ||
      bound->syms[0] != nest->loops[other]->u.loop.sym)
    return CN_GEMM_TRI_NONE;
  *offset = bound->kind == CN_IDX_ITER ? 0 : bound->offset;
  return tri;
}

typedef struct {
  const cn_sched_options *opts;
  int64_t l1, llc;
} gemm_pass;

static cn_status plan_hoisted(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest,
                              const gemm_pass *pass);

/* The cells of c between consecutive values of the last loop (in nest order) of a group: how the
 * group's flat index walks c where it moves fastest (0 when the group is empty). The nest's one
 * store is c's write, its first access. */
static double c_step(const cn_ll_proc *proc, const cn_sched_nest *nest, const cn_sched_gemm *g,
                     cn_gemm_role role) {
  for (int k = nest->depth - 1; k >= 0; k--)
    if (g->role[k] == role)
      return cn_sched_stride(proc, &nest->access[0], nest->loops[k]->u.loop.sym);
  return 0;
}

/* The micro-kernel stores rows of c's tile as vectors along N. A product whose c is contiguous
 * along M instead (a weight gradient dW[o, i] = sum_t g[t, o] * x[t, i] written x * g, c walked
 * with i) would go through a scratch tile with scattered stores; written g * x its columns are
 * contiguous. So the nest is rebuilt with the product's operands exchanged, which is the same
 * value: IEEE multiplication (fused or not) is commutative, NaN payloads aside (of two NaN
 * operands, x86 returns the first's). The nest is re-read into *nest and *g reclassified. Not
 * for a triangle, whose kind (N < M, K < M, M < K) the exchange would turn into another. */
static cn_status orient_columns(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest,
                                cn_sched_gemm *g) {
  if (c_step(proc, nest, g, CN_GEMM_N) == 1 || c_step(proc, nest, g, CN_GEMM_M) != 1) return CN_OK;
  const cn_ll_stmt *store = product_store(proc, nest);
  const cn_index *w = store->u.set.idx;
  const cn_ll_expr *sum = store->u.set.value, *product = sum->u.op.args[1];
  cn_prec prec = sum->prec;
  cn_ll_expr *swapped =
      cn_lb_op(ctx, CN_OP_MUL, prec, product->u.op.args[1], product->u.op.args[0], NULL);
  cn_ll_expr *value =
      swapped ? cn_lb_op(ctx, CN_OP_ADD, prec, sum->u.op.args[0], swapped, NULL) : NULL;
  cn_index *idx = value ? cn_lb_index_array(ctx, proc->params[g->c].node->rank, w) : NULL;
  cn_ll_stmt *body = idx ? cn_lb_set(ctx, g->c, idx, value) : NULL;
  for (int k = nest->depth - 1; k >= 0 && body; k--)
    body = cn_sched_loop_copy(ctx, nest->loops[k], body);
  if (!body) return CN_ERR_NOMEM;
  cn_ll_stmt **slot = nest->slots[0];
  *slot = body;
  bool found = false;
  cn_status status = cn_sched_nest_read(ctx, slot, nest, &found);
  if (status != CN_OK) return status;
  CN_ASSERT(found && cn_sched_gemm_of(proc, nest, g));
  return CN_OK;
}

static cn_status plan_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  const gemm_pass *pass = user;
  cn_sched_gemm g;
  /* A nest under a gathered index's let is one point's row of a gather or scatter: no plan. */
  if (nest->under_let || nest->lanes) return CN_OK; /* a sum in lanes keeps its loop (loops.h) */
  if (!cn_sched_gemm_of(proc, nest, &g)) return plan_hoisted(ctx, proc, nest, pass);
  cn_prec prec = proc->params[g.c].node->prec;
  if (cn_prec_table[prec].kind != CN_PKIND_FLOAT) return CN_OK;
  int64_t work = 1, tri_offset = 0;
  cn_gemm_tri tri = CN_GEMM_TRI_NONE;
  for (int k = 0; k < nest->depth; k++) {
    const cn_ll_stmt *loop = nest->loops[k];
    if (loop->u.loop.from >= loop->u.loop.to) return CN_OK;
    if (loop->u.loop.n_lower || loop->u.loop.n_upper) {
      if (tri || !(tri = triangle(nest, &g, k, &tri_offset))) return CN_OK;
    }
    int64_t extent = loop->u.loop.to - loop->u.loop.from;
    work = work > INT64_MAX / extent ? INT64_MAX : work * extent;
  }
  if (work < (pass->opts->gemm_work > 0 ? pass->opts->gemm_work : CN_SCHED_GEMM_WORK)) return CN_OK;
  /* a triangle's kind names its loops' groups: exchanging M and N would misname it */
  cn_status status = tri ? CN_OK : orient_columns(ctx, proc, nest, &g);
  if (status != CN_OK) return status;
  /* a point of a tiled GEMM costs a small fraction of a loop nest's cell update (16 lanes, two
   * FMA pipes): 64 of them weigh one update against the pool's start-up (a 64^3 product on two
   * threads was 20 times slower than on one) */
  int64_t parallel_work =
      pass->opts->parallel_work > 0 ? pass->opts->parallel_work : CN_SCHED_PARALLEL_WORK;
  cn_ll_gemm plan = {.c = g.c,
                     .x = g.x,
                     .y = g.y,
                     .depth = g.depth,
                     .tri = tri,
                     .tri_offset = tri_offset,
                     .fma = !pass->opts->exact,
                     .parallel = work / 64 >= parallel_work};
  for (int k = 0; k < g.depth; k++) plan.role[k] = g.role[k];
  block_sizes(prec, pass->l1, pass->llc, &plan);
  cn_ll_stmt *stmt = cn_lb_gemm(ctx, nest->loops[0], &plan);
  if (!stmt) return ctx->status;
  *nest->slots[0] = stmt;
  return CN_OK;
}

/* ---- Hoisting: a convolution's input gradient ----
 * din[b, oh + kh, ow + kw, ic] += dout[b, oh, ow, oc] * w[oc, kh, kw, ic] is no GEMM: a written
 * axis mixes two loops. For fixed (kh, kw) it is one, writing a shifted view of din. So each
 * mixed axis gives up one of its two loops (the one with fewer values) to the outside, where it
 * runs as a plain loop around the rest, which is GEMM-class. Each cell's sequence of updates must
 * stay: for one cell, a mixed axis' two loops move together (one fixes the other), so the
 * sequence follows whichever of the two the nest runs first, ascending; when that is the kept
 * loop, the hoisted one runs in the direction that moves the kept one up (descending when their
 * coefficients have one sign: oh = i - kh). The hoisted loops go out in the order of those first
 * loops, and the rewrite is taken only when every such first loop runs before every loop the
 * write does not mention (oc): then the cell's sequence is (kh, kw) in that order and direction,
 * then the reduction, as in the nest. The hoisted loops are plain loops (never parallel: their
 * iterations touch the same cells); the inner nest gets a plan as any other, or the rewrite is
 * dropped. */

#define MAX_PAIRS CN_MAX_RANK

static cn_status plan_hoisted(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest,
                              const gemm_pass *pass) {
  const cn_ll_stmt *store = product_store(proc, nest);
  if (!store || nest->depth < 3) return CN_OK;
  const cn_index *w = store->u.set.idx;
  int rank = proc->params[store->u.set.param].node->rank;
  /* per mixed axis: the hoisted loop, the first of the two in the nest, the direction, and the
   * fresh variable of a descending one */
  struct {
    int hoisted, first;
    bool descending;
    cn_symbol reversed;
  } pairs[MAX_PAIRS];
  int n_pairs = 0;
  bool in_write[CN_SCHED_MAX_DEPTH] = {false};
  for (int d = 0; d < rank; d++) {
    int pos[3], n = 0;
    for (int k = 0; k < nest->depth && n < 3; k++)
      if (cn_index_mentions(&w[d], nest->loops[k]->u.loop.sym)) pos[n++] = k;
    for (int j = 0; j < n; j++) {
      if (in_write[pos[j]]) return CN_OK; /* a loop in two axes */
      in_write[pos[j]] = true;
    }
    if (n > 2) return CN_OK;
    if (n < 2) continue;
    const cn_ll_stmt *a = nest->loops[pos[0]], *b = nest->loops[pos[1]];
    /* hoist the loop with fewer values (the window), keep the other (the positions) */
    int h = (b->u.loop.to - b->u.loop.from) <= (a->u.loop.to - a->u.loop.from) ? 1 : 0;
    int hk = pos[h], keep = pos[1 - h];
    int64_t ch = cn_index_coeff(&w[d], nest->loops[hk]->u.loop.sym);
    int64_t ck = cn_index_coeff(&w[d], nest->loops[keep]->u.loop.sym);
    /* kept in the order of the first loops (insertion) */
    int at = n_pairs++;
    for (; at > 0 && pairs[at - 1].first > pos[0]; at--) pairs[at] = pairs[at - 1];
    pairs[at].hoisted = hk;
    pairs[at].first = pos[0];
    pairs[at].descending = keep < hk && (ch > 0) == (ck > 0);
  }
  if (n_pairs == 0) return CN_OK;
  /* every pair decided before any loop the write does not mention */
  for (int k = 0; k < nest->depth; k++)
    if (!in_write[k])
      for (int p = 0; p < n_pairs; p++)
        if (pairs[p].first > k) return CN_OK;
  for (int k = 0; k < nest->depth; k++)
    if (nest->loops[k]->u.loop.n_lower || nest->loops[k]->u.loop.n_upper) return CN_OK;
  /* a descending loop runs a fresh variable r over the box: v = from + to - 1 - r */
  cn_symbol from_syms[MAX_PAIRS], to_syms[MAX_PAIRS];
  int64_t scales[MAX_PAIRS], offsets[MAX_PAIRS];
  int n_reversed = 0;
  for (int p = 0; p < n_pairs; p++) {
    const cn_ll_stmt *loop = nest->loops[pairs[p].hoisted];
    if (!pairs[p].descending) continue;
    char name[64];
    snprintf(name, sizeof name, "%s_rev", cn_symbol_name(ctx, loop->u.loop.sym));
    if ((pairs[p].reversed = cn_symbol_create(ctx, name, 0)) < 0) return CN_ERR_NOMEM;
    from_syms[n_reversed] = loop->u.loop.sym;
    to_syms[n_reversed] = pairs[p].reversed;
    scales[n_reversed] = -1;
    offsets[n_reversed++] = loop->u.loop.from + loop->u.loop.to - 1;
  }
  cn_sched_subst s = {n_reversed, from_syms, to_syms, scales, offsets};
  cn_ll_stmt *body = cn_sched_subst_body(ctx, proc, &s, nest->loops[nest->depth - 1]->u.loop.body);
  for (int k = nest->depth - 1; k >= 0 && body; k--) {
    bool is_hoisted = false;
    for (int p = 0; p < n_pairs; p++) is_hoisted |= pairs[p].hoisted == k;
    if (!is_hoisted) body = cn_sched_loop_copy(ctx, nest->loops[k], body);
  }
  cn_ll_stmt *inner = body, *innermost_hoisted = NULL;
  for (int p = n_pairs - 1; p >= 0 && body; p--) {
    const cn_ll_stmt *loop = nest->loops[pairs[p].hoisted];
    body = pairs[p].descending
               ? cn_lb_loop(ctx, pairs[p].reversed, 0, loop->u.loop.to - loop->u.loop.from, body)
               : cn_lb_loop(ctx, loop->u.loop.sym, loop->u.loop.from, loop->u.loop.to, body);
    if (!innermost_hoisted) innermost_hoisted = body;
  }
  if (!body) return CN_ERR_NOMEM;
  /* plan the inner nest where it sits; keep the rewrite only when it got a plan */
  cn_ll_stmt **inner_slot = &innermost_hoisted->u.loop.body;
  CN_ASSERT(*inner_slot == inner);
  cn_sched_nest inner_nest;
  bool found = false;
  cn_status status = cn_sched_nest_read(ctx, inner_slot, &inner_nest, &found);
  if (status != CN_OK || !found) return status;
  status = plan_nest(ctx, proc, &inner_nest, (void *)pass);
  if (status == CN_OK && (*inner_slot)->kind == CN_LL_GEMM) *nest->slots[0] = body;
  return status;
}

cn_status cn_sched_gemm_plans(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *opts) {
  gemm_pass pass = {.opts = opts};
  cn_sched_cache_sizes(&pass.l1, &pass.llc);
  if (opts->l1_bytes > 0) pass.l1 = opts->l1_bytes;
  if (opts->llc_bytes > 0) pass.llc = opts->llc_bytes;
  return cn_sched_each_nest(ctx, proc, plan_nest, &pass);
}
