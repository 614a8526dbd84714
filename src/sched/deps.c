/* Dependence analysis of the scheduling stage: finding the perfect nests of a procedure, the
 * accesses of a nest's body, the stride of an access in a loop, reduction loops and the
 * independence of a loop's iterations.
 *
 * Contract: the analyses read the IR and never change it; they are conservative — a loop is
 * called independent only when no two of its iterations can touch a cell one of them writes, over
 * every value the nest's loops and the static indices may take (so no range reasoning is needed,
 * and guards and affine bounds, which only skip points, never weaken the answer). Two accesses of
 * one buffer are proven apart only when one axis holds in both the same c*v (c != 0) plus symbols
 * fixed during the loop of v (then different values of v reach different cells), or two different
 * constants; anything else counts as a dependence. Strides come from
 * the node's padded row-major layout (cn_node_strides), as the backends lay buffers out. */
#include "sched/sched.h"

/* ---- Nests ---- */

/* The one loop a loop's body consists of (directly, or as the one item of a sequence), as the
 * slot that holds it; NULL when the body is anything else. */
static cn_ll_stmt **inner_loop_slot(cn_ll_stmt *loop) {
  cn_ll_stmt **slot = &loop->u.loop.body;
  if ((*slot)->kind == CN_LL_SEQ && (*slot)->u.seq.count == 1) slot = &(*slot)->u.seq.items[0];
  return (*slot)->kind == CN_LL_FOR ? slot : NULL;
}

/* Whether s is a body of stores: stores, guards over bodies of stores, sequences and comments. */
static bool is_store_body(const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SET:
  case CN_LL_COMMENT: return true;
  case CN_LL_IF: return is_store_body(s->u.guard.body);
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!is_store_body(s->u.seq.items[i])) return false;
    return true;
  case CN_LL_FOR:
  case CN_LL_SET_VEC:
  case CN_LL_GEMM:
  case CN_LL_LET: return false;
  }
  return false;
}

typedef struct {
  cn_ctx *ctx;
  cn_sched_nest *nest;
  int cap;
} collector;

static bool add_access(collector *c, int param, const cn_index *idx, bool write) {
  cn_sched_nest *n = c->nest;
  if (!cn_arena_grow(c->ctx, (void **)&n->access, &c->cap, n->n_access + 1, sizeof *n->access))
    return false;
  n->access[n->n_access++] = (cn_sched_access){param, idx, write};
  return true;
}

static bool collect_reads(collector *c, const cn_ll_expr *e) {
  if (e->kind == CN_LE_GET) return add_access(c, e->u.get.param, e->u.get.idx, false);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!collect_reads(c, e->u.op.args[a])) return false;
  return true;
}

/* The accesses of a body of stores, in order: each store's write, then its reads. */
static bool collect(collector *c, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SET:
    c->nest->n_stores++;
    return add_access(c, s->u.set.param, s->u.set.idx, true) && collect_reads(c, s->u.set.value);
  case CN_LL_IF: return collect(c, s->u.guard.body);
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!collect(c, s->u.seq.items[i])) return false;
    return true;
  default: return true;
  }
}

cn_status cn_sched_nest_read(cn_ctx *ctx, cn_ll_stmt **slot, cn_sched_nest *nest, bool *found) {
  *nest = (cn_sched_nest){0};
  *found = false;
  for (cn_ll_stmt **at = slot; at; at = inner_loop_slot(*at)) {
    if (nest->depth == CN_SCHED_MAX_DEPTH) return CN_OK;
    nest->slots[nest->depth] = at;
    nest->loops[nest->depth++] = *at;
    if ((*at)->u.loop.marks & CN_LL_LANES) nest->lanes = true;
  }
  const cn_ll_stmt *body = nest->loops[nest->depth - 1]->u.loop.body;
  if (!is_store_body(body)) return CN_OK;
  collector c = {ctx, nest, 0};
  if (!collect(&c, body)) return CN_ERR_NOMEM;
  *found = nest->n_stores > 0;
  return CN_OK;
}

/* A nest inside a CN_LL_LET (under_let) is one iteration's work for the let's value: its loops
 * may be reordered, split or marked among themselves, never moved out of the let, since the
 * nests are handed over whole and the let around them stays where it is. */
static cn_status each_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_ll_stmt **slot,
                           cn_sched_nest_fn fn, void *user, bool under_let) {
  cn_ll_stmt *s = *slot;
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) {
      cn_status st = each_nest(ctx, proc, &s->u.seq.items[i], fn, user, under_let);
      if (st != CN_OK) return st;
    }
    return CN_OK;
  case CN_LL_IF: return each_nest(ctx, proc, &s->u.guard.body, fn, user, under_let);
  case CN_LL_LET: return each_nest(ctx, proc, &s->u.let.body, fn, user, true);
  case CN_LL_FOR: {
    cn_sched_nest nest;
    bool found;
    cn_status st = cn_sched_nest_read(ctx, slot, &nest, &found);
    if (st != CN_OK) return st;
    nest.under_let = under_let;
    return found ? fn(ctx, proc, &nest, user)
                 : each_nest(ctx, proc, &s->u.loop.body, fn, user, under_let);
  }
  default: return CN_OK;
  }
}

cn_status cn_sched_each_nest(cn_ctx *ctx, cn_ll_proc *proc, cn_sched_nest_fn fn, void *user) {
  return each_nest(ctx, proc, &proc->body, fn, user, false);
}

bool cn_sched_expr_reads(const cn_ll_expr *e, int param) {
  if (e->kind == CN_LE_GET) return e->u.get.param == param;
  if (e->kind != CN_LE_OP) return false;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (cn_sched_expr_reads(e->u.op.args[a], param)) return true;
  return false;
}

bool cn_sched_same_indices(const cn_index *a, const cn_index *b, int rank) {
  for (int d = 0; d < rank; d++)
    if (!cn_index_equal(&a[d], &b[d])) return false;
  return true;
}

bool cn_sched_reads_only_at(const cn_ll_expr *e, int param, const cn_index *idx, int rank) {
  if (e->kind == CN_LE_GET)
    return e->u.get.param != param || cn_sched_same_indices(e->u.get.idx, idx, rank);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!cn_sched_reads_only_at(e->u.op.args[a], param, idx, rank)) return false;
  return true;
}

int cn_sched_box_loops(const cn_ll_stmt *s, const cn_ll_stmt **loops, const cn_ll_stmt **body) {
  int depth = 0;
  while (s->kind == CN_LL_FOR || (s->kind == CN_LL_SEQ && s->u.seq.count == 1)) {
    if (s->kind == CN_LL_SEQ) {
      s = s->u.seq.items[0];
      continue;
    }
    if (depth == CN_SCHED_MAX_DEPTH || s->u.loop.from != 0 || s->u.loop.n_lower ||
        s->u.loop.n_upper)
      return -1;
    loops[depth++] = s;
    s = s->u.loop.body;
  }
  *body = s;
  return depth;
}

bool cn_sched_covers(const cn_node *node, const cn_index *idx, const cn_ll_stmt *const *loops,
                     int depth) {
  CN_ASSERT(depth <= CN_SCHED_MAX_DEPTH);
  bool used[CN_SCHED_MAX_DEPTH] = {false};
  for (int a = 0; a < node->rank; a++) {
    if (idx[a].kind != CN_IDX_ITER) return false;
    int k = 0;
    while (k < depth && loops[k]->u.loop.sym != idx[a].syms[0]) k++;
    if (k == depth || used[k] || loops[k]->u.loop.from != 0 || loops[k]->u.loop.to != node->dims[a])
      return false;
    used[k] = true;
  }
  return true;
}

cn_ll_expr *cn_sched_const_as_stored(cn_ctx *ctx, cn_prec prec, const cn_ll_expr *k) {
  unsigned char cell[sizeof(cn_value)];
  cn_value_store(prec, cn_value_convert(k->prec, prec, k->u.constant), cell);
  return cn_lb_const(ctx, prec, cn_value_load(prec, cell));
}

bool cn_sched_stmts_push(cn_ctx *ctx, cn_sched_stmts *list, cn_ll_stmt *s) {
  if (!cn_arena_grow(ctx, (void **)&list->items, &list->cap, list->n + 1, sizeof *list->items))
    return false;
  list->items[list->n++] = s;
  return true;
}

bool cn_sched_stmts_flatten(cn_ctx *ctx, cn_ll_stmt *body, cn_sched_stmts *list) {
  if (body->kind != CN_LL_SEQ) return cn_sched_stmts_push(ctx, list, body);
  for (int i = 0; i < body->u.seq.count; i++)
    if (!cn_sched_stmts_flatten(ctx, body->u.seq.items[i], list)) return false;
  return true;
}

cn_ll_stmt *cn_sched_loop_copy(cn_ctx *ctx, const cn_ll_stmt *old, cn_ll_stmt *body) {
  cn_ll_stmt *loop = cn_lb_loop(ctx, old->u.loop.sym, old->u.loop.from, old->u.loop.to, body);
  loop = cn_lb_bounds(ctx, loop, old->u.loop.n_lower, old->u.loop.lower, old->u.loop.n_upper,
                      old->u.loop.upper);
  return cn_lb_marks(loop, old->u.loop.marks);
}

/* ---- Strides, reductions, independence ---- */

bool cn_sched_single_cell_axis(const cn_node *node, int axis, const cn_index *ix) {
  return node->dims[axis] == 1 && ix->kind == CN_IDX_FIXED && ix->offset == 0 &&
         !node->pad[axis][0] && !node->pad[axis][1];
}

double cn_sched_stride(const cn_ll_proc *proc, const cn_sched_access *access, cn_symbol sym) {
  const cn_node *node = proc->params[access->param].node;
  int64_t strides[CN_MAX_RANK];
  cn_node_strides(node, strides);
  double stride = 0;
  for (int d = 0; d < node->rank; d++)
    stride += (double)cn_index_coeff(&access->idx[d], sym) * (double)strides[d];
  return stride;
}

bool cn_sched_is_reduction(const cn_sched_access *w, int rank, cn_symbol sym) {
  for (int d = 0; d < rank; d++)
    if (cn_index_coeff(&w->idx[d], sym) != 0) return false;
  return true;
}

static bool is_inner(cn_symbol s, const cn_symbol *inner, int n_inner) {
  for (int k = 0; k < n_inner; k++)
    if (inner[k] == s) return true;
  return false;
}

/* An axis whose value differs between any two values of sym while the inner symbols are not
 * part of it: c*sym plus fixed symbols and a constant. */
static bool separates(const cn_index *ix, cn_symbol sym, const cn_symbol *inner, int n_inner) {
  if (ix->kind == CN_IDX_FIXED || ix->n_terms < 1) return false;
  bool mentions = false;
  for (int t = 0; t < ix->n_terms; t++) {
    if (ix->syms[t] == sym)
      mentions = true;
    else if (is_inner(ix->syms[t], inner, n_inner))
      return false;
  }
  return mentions;
}

/* Whether two accesses of one buffer, from any two different values of sym, never meet: an axis
 * holds two different constants, or the same c*sym plus fixed symbols in both (its value then
 * differs with sym, whatever the other axes hold). */
static bool apart(int rank, const cn_index *a, const cn_index *b, cn_symbol sym,
                  const cn_symbol *inner, int n_inner) {
  for (int d = 0; d < rank; d++) {
    if (a[d].kind == CN_IDX_FIXED && b[d].kind == CN_IDX_FIXED && a[d].offset != b[d].offset)
      return true;
    if (cn_index_equal(&a[d], &b[d]) && separates(&a[d], sym, inner, n_inner)) return true;
  }
  return false;
}

bool cn_sched_independent(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_symbol sym,
                          const cn_symbol *inner, int n_inner) {
  for (int w = 0; w < nest->n_access; w++) {
    const cn_sched_access *wa = &nest->access[w];
    if (!wa->write) continue;
    int rank = proc->params[wa->param].node->rank;
    for (int a = 0; a < nest->n_access; a++) {
      const cn_sched_access *aa = &nest->access[a];
      if (aa->param != wa->param) continue;
      if (!apart(rank, wa->idx, aa->idx, sym, inner, n_inner)) return false;
    }
  }
  return true;
}

bool cn_sched_own_cell(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  if (nest->n_stores != 1) return false;
  const cn_sched_access *w = &nest->access[0];
  int rank = proc->params[w->param].node->rank;
  for (int a = 1; a < nest->n_access; a++) {
    const cn_sched_access *r = &nest->access[a];
    if (r->param != w->param) continue;
    for (int d = 0; d < rank; d++)
      if (!cn_index_equal(&r->idx[d], &w->idx[d])) return false;
  }
  return true;
}

/* How many of the nest's loops axis d of the write mentions. */
static int axis_loops(const cn_sched_nest *nest, int d) {
  int loops = 0;
  for (int k = 0; k < nest->depth; k++)
    loops += cn_index_mentions(&nest->access[0].idx[d], nest->loops[k]->u.loop.sym);
  return loops;
}

bool cn_sched_separable(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  if (!cn_sched_own_cell(proc, nest)) return false;
  int rank = proc->params[nest->access[0].param].node->rank;
  for (int d = 0; d < rank; d++)
    if (axis_loops(nest, d) > 1) return false;
  return true;
}

bool cn_sched_separates(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_symbol sym) {
  int rank = proc->params[nest->access[0].param].node->rank;
  for (int d = 0; d < rank; d++)
    if (cn_index_mentions(&nest->access[0].idx[d], sym) && axis_loops(nest, d) == 1) return true;
  return false;
}

bool cn_sched_bounds_mention(const cn_ll_stmt *loop, cn_symbol sym) {
  for (int b = 0; b < loop->u.loop.n_lower; b++)
    if (cn_index_mentions(&loop->u.loop.lower[b].expr, sym)) return true;
  for (int b = 0; b < loop->u.loop.n_upper; b++)
    if (cn_index_mentions(&loop->u.loop.upper[b].expr, sym)) return true;
  return false;
}
