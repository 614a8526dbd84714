/* Fill forwarding: a buffer cleared to a constant and then first updated cell by cell reads the
 * constant instead of the buffer, and the clear goes.
 *
 * The derivative code clears every gradient to the neutral of its accumulation and accumulates
 * into it (`g[i] := 0; ... g[i] := g[i] + e`). For the gradients of pointwise chains (GELU, layer
 * norm, the residuals) the first accumulation writes every cell once: the clear costs a pass over
 * memory and turns the first update's store into a read-modify-write. Replacing the read by the
 * constant (`g[i] := 0 + e`) computes the same bits, the add included (0 + -0 is +0 both ways),
 * and makes the clear dead.
 *
 * Contract: cn_sched_fill(ctx, proc) reads the procedure as its list of top-level statements
 * (sequences flattened). A fill F of param p is a nest of loops from 0 without affine bounds
 * whose body is exactly one store `p[v_0, .., v_r-1] := K`, K a constant and each v_a a distinct
 * loop variable running over exactly p's axis a (every cell written once). p must have no padding
 * and not be a merge buffer. The next top-level statement S that mentions p (read, write, let
 * index, GEMM operand) is taken when it is a nest of loops from 0 without affine bounds over a
 * body of plain stores (no guard, let, vector store or GEMM) whose first store touching p writes
 * p[w] with w the nest's loop variables, one per axis over exactly its dim and every loop in w
 * (so the store runs once per cell), with every read of p in that store's value at w, and every
 * later access of p in the body at w too. Then each point stores p[w] before any other access of
 * p touches that cell, and the reads of p[w] in the first store would read K as stored: they
 * become that constant (rounded as a store into p rounds it), and F is deleted. Taken pairs
 * never overlap (S mentions p; F is the last fill of p before S). One walk over the statements
 * and their accesses, so the pass is linear in the procedure. Fails only on allocation failure
 * (CN_ERR_NOMEM), the procedure then unchanged.
 *
 * cn_sched_fill_gemm(ctx, proc), run after the GEMM plans, takes the same pairs where S is a GEMM
 * plan whose c is p, filled with a constant stored as +0, its every cell one point of the plan's
 * batch, M and N loops (each axis of c a distinct loop from 0 over exactly its dim; not a
 * triangle, whose cells past the bound keep the fill): the plan gets c_zero (loops.h) and F goes.
 * The first reduction step then adds to +0 in a register instead of to the +0 read from c: the
 * same bits, without the pass over c the clear was. */
#include "sched/sched.h"

#include <stdlib.h>

/* ---- Which params a statement mentions ---- */

typedef struct {
  int *params; /* the params mentioned, each once */
  int n, cap;
  int *mark; /* per param: the stamp of the statement that last listed it */
  int stamp;
} mentions;

static bool note(mentions *m, int param) {
  if (m->mark[param] == m->stamp) return true;
  m->mark[param] = m->stamp;
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 16;
    int *grown = realloc(m->params, (size_t)cap * sizeof *grown);
    if (!grown) return false;
    m->params = grown;
    m->cap = cap;
  }
  m->params[m->n++] = param;
  return true;
}

static bool expr_params(mentions *m, const cn_ll_expr *e) {
  if (e->kind == CN_LE_GET) return note(m, e->u.get.param);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!expr_params(m, e->u.op.args[a])) return false;
  return true;
}

static bool stmt_params(mentions *m, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!stmt_params(m, s->u.seq.items[i])) return false;
    return true;
  case CN_LL_COMMENT: return true;
  case CN_LL_FOR: return stmt_params(m, s->u.loop.body);
  case CN_LL_IF: return stmt_params(m, s->u.guard.body);
  case CN_LL_SET: return note(m, s->u.set.param) && expr_params(m, s->u.set.value);
  case CN_LL_SET_VEC: return note(m, s->u.vec.param) && expr_params(m, s->u.vec.arg);
  case CN_LL_GEMM: return stmt_params(m, s->u.gemm.nest);
  case CN_LL_LET: return note(m, s->u.let.param) && stmt_params(m, s->u.let.body);
  }
  CN_ASSERT(!"unknown statement kind");
  return false;
}

/* ---- Fills and first updates ---- */

/* Whether idx writes every cell of node exactly once over the loops: one distinct loop per axis,
 * running over exactly the axis' dim, and no loop left over. */
static bool one_per_cell(const cn_node *node, const cn_index *idx, const cn_ll_stmt *const *loops,
                         int depth) {
  return depth == node->rank && cn_sched_covers(node, idx, loops, depth);
}

static bool plain_buffer(const cn_ll_proc *proc, int param) {
  const cn_node *node = proc->params[param].node;
  if (proc->params[param].merge) return false;
  for (int a = 0; a < node->rank; a++)
    if (node->pad[a][0] || node->pad[a][1]) return false;
  return true;
}

/* The param a statement fills with a constant (the store into *store), or -1. */
static int fill_of(const cn_ll_proc *proc, const cn_ll_stmt *s, const cn_ll_stmt **store) {
  const cn_ll_stmt *loops[CN_SCHED_MAX_DEPTH], *body;
  int depth = cn_sched_box_loops(s, loops, &body);
  if (depth < 0 || body->kind != CN_LL_SET || body->u.set.value->kind != CN_LE_CONST) return -1;
  int p = body->u.set.param;
  if (!plain_buffer(proc, p) || !one_per_cell(proc->params[p].node, body->u.set.idx, loops, depth))
    return -1;
  *store = body;
  return p;
}

/* Whether a body holds only stores and comments (sequences entered). */
static bool only_stores(const cn_ll_stmt *body) {
  if (body->kind == CN_LL_SEQ) {
    for (int i = 0; i < body->u.seq.count; i++)
      if (!only_stores(body->u.seq.items[i])) return false;
    return true;
  }
  return body->kind == CN_LL_COMMENT || body->kind == CN_LL_SET;
}

/* The stores of such a body in order (comments skipped); false on allocation failure. */
static bool body_stores(cn_ctx *ctx, cn_ll_stmt *body, cn_sched_stmts *stores) {
  if (body->kind == CN_LL_SEQ) {
    for (int i = 0; i < body->u.seq.count; i++)
      if (!body_stores(ctx, body->u.seq.items[i], stores)) return false;
    return true;
  }
  return body->kind == CN_LL_COMMENT || cn_sched_stmts_push(ctx, stores, body);
}

/* A copy of e whose reads of param become value. */
static cn_ll_expr *forward_reads(cn_ctx *ctx, const cn_ll_expr *e, int param,
                                 const cn_ll_expr *value) {
  switch (e->kind) {
  case CN_LE_GET:
    if (e->u.get.param == param) return cn_lb_const(ctx, value->prec, value->u.constant);
    return (cn_ll_expr *)e;
  case CN_LE_CONST:
  case CN_LE_INDEX: return (cn_ll_expr *)e;
  case CN_LE_OP: {
    cn_ll_expr *args[3] = {NULL, NULL, NULL};
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (!(args[a] = forward_reads(ctx, e->u.op.args[a], param, value))) return NULL;
    return cn_lb_op(ctx, e->u.op.op, e->prec, args[0], args[1], args[2]);
  }
  }
  CN_ASSERT(!"unknown expression kind");
  return NULL;
}

/* S rebuilt with the first update of param reading the fill's constant, into *out; *out NULL
 * (and CN_OK) when S is not such a nest. */
static cn_status first_update(cn_ctx *ctx, const cn_ll_proc *proc, cn_ll_stmt *s, int param,
                              const cn_ll_stmt *fill, cn_ll_stmt **out) {
  *out = NULL;
  const cn_ll_stmt *loops[CN_SCHED_MAX_DEPTH], *body;
  int depth = cn_sched_box_loops(s, loops, &body);
  if (depth <= 0 || !only_stores(body)) return CN_OK;
  cn_sched_stmts stores = {0};
  if (!body_stores(ctx, (cn_ll_stmt *)body, &stores)) return CN_ERR_NOMEM;
  const cn_node *node = proc->params[param].node;
  int first = -1;
  for (int i = 0; i < stores.n; i++) {
    const cn_ll_stmt *st = stores.items[i];
    bool writes = st->u.set.param == param, reads = cn_sched_expr_reads(st->u.set.value, param);
    if (first < 0) {
      if (!writes && !reads) continue;
      if (!writes || !one_per_cell(node, st->u.set.idx, loops, depth) ||
          !cn_sched_reads_only_at(st->u.set.value, param, st->u.set.idx, node->rank))
        return CN_OK;
      first = i;
      continue;
    }
    const cn_index *w = stores.items[first]->u.set.idx;
    if ((writes && !cn_sched_same_indices(st->u.set.idx, w, node->rank)) ||
        !cn_sched_reads_only_at(st->u.set.value, param, w, node->rank))
      return CN_OK;
  }
  if (first < 0) return CN_OK;
  const cn_ll_stmt *update = stores.items[first];
  cn_ll_expr *k = cn_sched_const_as_stored(ctx, node->prec, fill->u.set.value);
  cn_ll_expr *value = k ? forward_reads(ctx, update->u.set.value, param, k) : NULL;
  cn_index *idx = value ? cn_lb_index_array(ctx, node->rank, update->u.set.idx) : NULL;
  cn_ll_stmt *store = idx ? cn_lb_set(ctx, param, idx, value) : NULL;
  if (!store) return CN_ERR_NOMEM;
  stores.items[first] = store;
  cn_ll_stmt *rebuilt = cn_lb_seq_array(ctx, stores.n, stores.items);
  for (int d = depth - 1; d >= 0 && rebuilt; d--)
    rebuilt = cn_sched_loop_copy(ctx, loops[d], rebuilt);
  if (!rebuilt) return CN_ERR_NOMEM;
  *out = rebuilt;
  return CN_OK;
}

/* Whether every byte of a cell of param holding the fill's constant is 0 (+0 in a float). */
static bool stores_zero(const cn_ll_proc *proc, int param, const cn_ll_expr *k) {
  cn_prec prec = proc->params[param].node->prec;
  unsigned char cell[sizeof(cn_value)] = {0};
  cn_value_store(prec, cn_value_convert(k->prec, prec, k->u.constant), cell);
  for (size_t b = 0; b < sizeof cell; b++)
    if (cell[b]) return false;
  return true;
}

/* A GEMM plan's statement taking the fill of its c (+0) as c_zero, into *out; *out NULL (and
 * CN_OK) when s is not such a statement: c every cell one (batch, M, N) point, each axis of c
 * a distinct loop from 0 over exactly its dim, not a triangle. */
static cn_status gemm_from_zero(cn_ctx *ctx, const cn_ll_proc *proc, cn_ll_stmt *s, int param,
                                const cn_ll_stmt *fill, cn_ll_stmt **out) {
  *out = NULL;
  if (s->kind != CN_LL_GEMM) return CN_OK;
  const cn_ll_gemm *plan = s->u.gemm.plan;
  if (plan->c != param || plan->tri || plan->c_zero || !stores_zero(proc, param, fill->u.set.value))
    return CN_OK;
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  if (!cn_sched_covers(proc->params[param].node, parts.idx[0], parts.loops, plan->depth))
    return CN_OK;
  cn_ll_gemm from_zero = *plan;
  from_zero.c_zero = true;
  *out = cn_lb_gemm(ctx, s->u.gemm.nest, &from_zero);
  return *out ? CN_OK : CN_ERR_NOMEM;
}

/* The walk of both entry points: each fill paired with the next statement that mentions its
 * param, rewritten by first_update (before the GEMM plans) or gemm_from_zero (after). */
static cn_status forward_fills(cn_ctx *ctx, cn_ll_proc *proc, bool gemms) {
  cn_sched_stmts list = {0};
  if (!cn_sched_stmts_flatten(ctx, proc->body, &list)) return CN_ERR_NOMEM;
  mentions m = {.mark = malloc((size_t)(proc->n_params ? proc->n_params : 1) * sizeof(int))};
  /* per param: the statement index of its pending fill (-1: none) and that fill's store */
  int *pending = malloc((size_t)(proc->n_params ? proc->n_params : 1) * sizeof(int));
  const cn_ll_stmt **fills = malloc((size_t)(proc->n_params ? proc->n_params : 1) * sizeof *fills);
  cn_ll_stmt **items = malloc((size_t)(list.n ? list.n : 1) * sizeof *items);
  cn_status status = m.mark && pending && fills && items ? CN_OK : CN_ERR_NOMEM;
  for (int p = 0; p < proc->n_params && status == CN_OK; p++) m.mark[p] = -1, pending[p] = -1;
  int changed = 0;
  for (int i = 0; i < list.n && status == CN_OK; i++) {
    items[i] = list.items[i];
    m.n = 0;
    m.stamp = i;
    if (!stmt_params(&m, list.items[i])) {
      status = CN_ERR_NOMEM;
      break;
    }
    /* the statement ends the pending fill of every param it mentions: taken or not */
    for (int j = 0; j < m.n && status == CN_OK; j++) {
      int p = m.params[j], f = pending[p];
      if (f < 0) continue;
      pending[p] = -1;
      cn_ll_stmt *rebuilt;
      status = gemms ? gemm_from_zero(ctx, proc, items[i], p, fills[p], &rebuilt)
                     : first_update(ctx, proc, items[i], p, fills[p], &rebuilt);
      if (status != CN_OK || !rebuilt) continue;
      items[i] = rebuilt;
      items[f] = NULL;
      /* the lowering's comment heading the fill ("clear 'g' to the neutral of +") goes with it */
      if (f > 0 && list.items[f - 1]->kind == CN_LL_COMMENT) items[f - 1] = NULL;
      changed++;
    }
    const cn_ll_stmt *store;
    int filled = fill_of(proc, list.items[i], &store);
    if (filled >= 0) pending[filled] = i, fills[filled] = store;
  }
  free(m.params);
  free(m.mark);
  free(pending);
  free(fills);
  int n = 0;
  for (int i = 0; status == CN_OK && changed > 0 && i < list.n; i++)
    if (items[i]) items[n++] = items[i];
  cn_ll_stmt *body = status == CN_OK && changed > 0 ? cn_lb_seq_array(ctx, n, items) : NULL;
  free(items);
  if (status != CN_OK || changed == 0) return status;
  if (!body) return CN_ERR_NOMEM;
  proc->body = body;
  return CN_OK;
}

cn_status cn_sched_fill(cn_ctx *ctx, cn_ll_proc *proc) {
  return forward_fills(ctx, proc, false);
}

cn_status cn_sched_fill_gemm(cn_ctx *ctx, cn_ll_proc *proc) {
  return forward_fills(ctx, proc, true);
}
