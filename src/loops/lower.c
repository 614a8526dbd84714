/* Lowering of an assignments tree to a loop-IR procedure (ocannl-notes §2.3 "Lowering
 * semantics", contraction-is-emergent "What we compile to", convolution-is-a-contraction on
 * padding, Set_from_vec and fetches, and the Tile seed's valid index sets).
 *
 * An Accum_op becomes, in order: resets of the padding margins of the RHS buffers it reads (to the
 * accumulator's neutral element, so a padded read contributes nothing; not under valid_only,
 * which never reads a margin), a pre-fill of the LHS with that neutral element exactly when
 * init_neutral and the LHS map is not both surjective and injective (with zero_unreached: 0, then
 * the neutral element in the cells a visited point writes), and the loop nest over the product
 * space — tightened, with guards for what the ranges cannot express (plan_nest) — whose body is
 * `lhs := f(rhs...)` when init_neutral and the map is injective, `lhs := lhs ⊕ f(rhs...)`
 * otherwise. The LHS analyses look at the tightened box (plan_view).
 *
 * Invariants: the tree was validated by its constructors (arity, precisions, index ranges), so
 * violations are internal bugs (CN_ASSERT); every buffer touched appears once in params, ordered
 * by node id with the value before the merge buffer; the loops of an assignment bind the
 * projections record's own iterators, and the nests over a node's axes (margins, pre-fills,
 * fetches) bind one routine-private symbol per axis position — nests are never nested inside one
 * another, so a symbol is never rebound while bound; the lowering adds no precision conversions
 * (expressions carry their precision and the backends convert by cn_op_operand_prec); everything
 * the procedure holds lives in the context arena, built by the cn_lb_* constructors (build.c),
 * whose NULL propagation lets a whole nest be checked once, when it is pushed. */
#include "loops/loops.h"

#include <stdio.h>
#include <stdlib.h>

/* Propagates a failure (its message is already recorded in the context). */
#define TRY(expr)                                                                                  \
  do {                                                                                             \
    cn_status try_status_ = (expr);                                                                \
    if (try_status_ != CN_OK) return try_status_;                                                  \
  } while (0)

/* Constant_fill is unrolled into one statement per cell; beyond this it would bloat the IR. */
#define LOWER_MAX_FILL_CELLS 65536

typedef struct {
  cn_ctx *ctx;
  const cn_ll_param *params;
  int n_params;
  cn_symbol axis_syms[CN_MAX_RANK]; /* created on first use; -1 until then */
} lower_state;

/* The procedure's top-level statements, growing by doubling (malloc'd: cn_lb_seq_array copies
 * them into the arena once, at the end); a NULL statement (a failed constructor) is not pushed. */
typedef struct {
  cn_ll_stmt **items;
  int count, cap;
} stmt_list;

static cn_status list_push(cn_ctx *ctx, stmt_list *list, cn_ll_stmt *stmt) {
  if (!stmt) return CN_ERR_NOMEM;
  if (list->count == list->cap) {
    int cap = list->cap ? 2 * list->cap : 8;
    cn_ll_stmt **items = cn_realloc(ctx, list->items, (size_t)cap * sizeof *items);
    if (!items) return CN_ERR_NOMEM;
    list->items = items;
    list->cap = cap;
  }
  list->items[list->count++] = stmt;
  return CN_OK;
}

/* ---- Parameters ---- */

static int count_buffers(const cn_asgn *asgn) {
  if (!asgn) return 0;
  switch (asgn->kind) {
  case CN_ASGN_NOOP: return 0;
  case CN_ASGN_SEQ: {
    int n = 0;
    for (int i = 0; i < asgn->u.seq.count; i++) n += count_buffers(asgn->u.seq.items[i]);
    return n;
  }
  case CN_ASGN_COMMENT: return count_buffers(asgn->u.comment.body);
  case CN_ASGN_ACCUM: return 1 + cn_op_arity(asgn->u.accum.op) + asgn->u.accum.proj->n_gathered;
  case CN_ASGN_VEC_UNOP: return 2;
  case CN_ASGN_FETCH: return asgn->u.fetch.kind == CN_FETCH_SLICE ? 2 : 1;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown assignment kind");
}

static void collect_buffers(const cn_asgn *asgn, cn_ll_param *out, int *n) {
  if (!asgn) return;
  switch (asgn->kind) {
  case CN_ASGN_NOOP: return;
  case CN_ASGN_SEQ:
    for (int i = 0; i < asgn->u.seq.count; i++) collect_buffers(asgn->u.seq.items[i], out, n);
    return;
  case CN_ASGN_COMMENT: collect_buffers(asgn->u.comment.body, out, n); return;
  case CN_ASGN_ACCUM:
    out[(*n)++] = (cn_ll_param){asgn->u.accum.lhs, false};
    for (int i = 0; i < cn_op_arity(asgn->u.accum.op); i++)
      out[(*n)++] = (cn_ll_param){asgn->u.accum.rhs[i].node, asgn->u.accum.rhs[i].merge};
    for (int k = 0; k < asgn->u.accum.proj->n_gathered; k++)
      out[(*n)++] = (cn_ll_param){asgn->u.accum.proj->gathered[k].source, false};
    return;
  case CN_ASGN_VEC_UNOP:
    out[(*n)++] = (cn_ll_param){asgn->u.vec.lhs, false};
    out[(*n)++] = (cn_ll_param){asgn->u.vec.rhs.node, asgn->u.vec.rhs.merge};
    return;
  case CN_ASGN_FETCH:
    out[(*n)++] = (cn_ll_param){asgn->u.fetch.lhs, false};
    if (asgn->u.fetch.kind == CN_FETCH_SLICE)
      out[(*n)++] = (cn_ll_param){asgn->u.fetch.sliced, false};
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown assignment kind");
}

static int compare_params(const void *pa, const void *pb) {
  const cn_ll_param *a = pa, *b = pb;
  if (a->node->id != b->node->id) return a->node->id < b->node->id ? -1 : 1;
  return (int)a->merge - (int)b->merge;
}

/* The buffers of the tree, sorted and without repeats, in *out (malloc'd: cn_lb_proc copies). */
static cn_status collect_params(cn_ctx *ctx, const cn_asgn *asgn, cn_ll_param **out, int *n_out) {
  int total = count_buffers(asgn);
  cn_ll_param *params = cn_malloc(ctx, (size_t)(total ? total : 1) * sizeof *params);
  if (!params) return CN_ERR_NOMEM;
  int n = 0;
  collect_buffers(asgn, params, &n);
  CN_ASSERT(n == total);
  qsort(params, (size_t)n, sizeof *params, compare_params);
  int unique = 0;
  for (int i = 0; i < n; i++) {
    if (unique > 0 && compare_params(&params[unique - 1], &params[i]) == 0) continue;
    params[unique++] = params[i];
  }
  *out = params;
  *n_out = unique;
  return CN_OK;
}

static int param_index(const lower_state *st, const cn_node *node, bool merge) {
  int lo = 0, hi = st->n_params - 1;
  cn_ll_param key = {(cn_node *)node, merge};
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = compare_params(&st->params[mid], &key);
    if (c == 0) return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  cn_assert_fail(__FILE__, __LINE__, "buffer missing from the parameters");
}

/* ---- Building blocks ---- */

/* A read of a node's buffer (the cn_lb_* constructors name buffers by parameter). */
static cn_ll_expr *read_cell(lower_state *st, const cn_node *node, bool merge, cn_index *idx) {
  return cn_lb_get(st->ctx, param_index(st, node, merge), node->prec, idx);
}

/* Wraps body in loops, syms[0] outermost; a NULL `from` starts every loop at 0. */
static cn_ll_stmt *wrap_loops(cn_ctx *ctx, int n, const cn_symbol *syms, const int64_t *from,
                              const int64_t *to, cn_ll_stmt *body) {
  for (int d = n - 1; d >= 0; d--) body = cn_lb_loop(ctx, syms[d], from ? from[d] : 0, to[d], body);
  return body;
}

/* The routine-private loop symbols of the first `rank` axis positions. */
static cn_status axis_symbols(lower_state *st, int rank, cn_symbol *syms) {
  for (int d = 0; d < rank; d++) {
    if (st->axis_syms[d] < 0) {
      char name[16];
      snprintf(name, sizeof name, "i%d", d);
      st->axis_syms[d] = cn_symbol_create(st->ctx, name, 0);
      if (st->axis_syms[d] < 0) return cn_ctx_status(st->ctx);
    }
    syms[d] = st->axis_syms[d];
  }
  return CN_OK;
}

/* Iter(syms[d]) per axis; never NULL on success, even for rank 0. */
static cn_index *iter_indices(cn_ctx *ctx, int rank, const cn_symbol *syms) {
  cn_index idx[CN_MAX_RANK];
  for (int d = 0; d < rank; d++) idx[d] = cn_index_iter(syms[d]);
  return cn_lb_index_array(ctx, rank, idx);
}

static const char *op_spelling(cn_op op) {
  return cn_op_table[op].infix ? cn_op_table[op].infix : cn_op_table[op].name;
}

static cn_status push_comment(cn_ctx *ctx, stmt_list *out, const char *what, const cn_node *node,
                              cn_op accum) {
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s '%s' (#%d) to the neutral of %s", what, node->label ? node->label : "",
                 node->id, op_spelling(accum));
  return list_push(ctx, out, cn_lb_comment(ctx, cn_sbuf_finish(ctx, &sb)));
}

/* One loop nest over a box of a node's logical index space, setting every cell to `value`;
 * nothing for an empty box. */
static cn_status fill_box(lower_state *st, stmt_list *out, const cn_node *node, bool merge,
                          const int64_t *from, const int64_t *to, cn_value value) {
  for (int d = 0; d < node->rank; d++)
    if (from[d] >= to[d]) return CN_OK;
  cn_symbol syms[CN_MAX_RANK];
  TRY(axis_symbols(st, node->rank, syms));
  cn_ll_stmt *set =
      cn_lb_set(st->ctx, param_index(st, node, merge), iter_indices(st->ctx, node->rank, syms),
                cn_lb_const(st->ctx, node->prec, value));
  return list_push(st->ctx, out, wrap_loops(st->ctx, node->rank, syms, from, to, set));
}

/* Resets the padding margins of a buffer as disjoint boxes: the boxes of axis d hold the cells
 * whose first axis lying in a margin is d (earlier axes inside [0, dim), later ones anywhere). */
static cn_status reset_margins(lower_state *st, stmt_list *out, const cn_node *node, bool merge,
                               cn_value value) {
  int64_t from[CN_MAX_RANK], to[CN_MAX_RANK];
  for (int d = 0; d < node->rank; d++) {
    for (int e = 0; e < node->rank; e++) {
      from[e] = e < d ? 0 : -node->pad[e][0];
      to[e] = e < d ? node->dims[e] : node->dims[e] + node->pad[e][1];
    }
    from[d] = -node->pad[d][0];
    to[d] = 0;
    TRY(fill_box(st, out, node, merge, from, to, value));
    from[d] = node->dims[d];
    to[d] = node->dims[d] + node->pad[d][1];
    TRY(fill_box(st, out, node, merge, from, to, value));
  }
  return CN_OK;
}

static bool node_is_padded(const cn_node *node) {
  for (int d = 0; d < node->rank; d++)
    if (node->pad[d][0] || node->pad[d][1]) return true;
  return false;
}

/* ---- Valid index sets (tile-edsl): ranges, tightening, guards ---- */

/* The loops of a record and the guards inside them. A record's conditions are its constraints
 * (0 <= expr < bound) and, under valid_only, every slot index within its tensor's dims; the box
 * starts as the iterators' ranges and is tightened by interval propagation: for a condition
 * lo <= sum c_k x_k + rest < hi and one of its iterators x (coefficient c), every point of the
 * box has c*x in [lo - max(rest), hi - 1 - min(rest)], which bounds x by a floor and a ceiling
 * division. This removes only points violating the condition, and makes a condition on a single
 * iterator exact (it holds on the whole tightened range). After tightening, a condition the box
 * implies is dropped, one it contradicts empties the nest, and the others become guards placed
 * just inside the loop of their innermost iterator (outside every loop when they mention none),
 * so a failing guard skips the loops below it. The loops get the constant box; the simplifier
 * (cn_ll_simplify) then turns a guard that is a loop's whole body into affine bounds of that loop
 * (triangular and trapezoidal nests), so only the guards left there cost a test per point. */
typedef struct {
  int n;
  int64_t *from, *to; /* per iterator: the tightened range [from, to) */
  int n_guards;
  cn_ll_cond *guards;
  int *level; /* per guard: position of its innermost iterator, -1 when it mentions none */
  bool empty; /* the record visits no point */
} nest_plan;

/* Tightening rounds: each round only shrinks ranges and every round is sound on its own, so a
 * bound keeps the lowering linear in the record's size (the seed's forms settle in two). */
#define PLAN_MAX_ROUNDS 16

/* floor(a / b) and ceil(a / b) for b != 0; false on overflow (INT64_MIN / -1). */
static bool floor_div(int64_t a, int64_t b, int64_t *out) {
  if (b == -1 && a == INT64_MIN) return false;
  *out = cn_floor_div_i64(a, b);
  return true;
}
static bool ceil_div(int64_t a, int64_t b, int64_t *out) {
  if (b == -1 && a == INT64_MIN) return false;
  *out = cn_ceil_div_i64(a, b);
  return true;
}

static int iter_pos(const cn_proj *proj, cn_symbol sym) {
  for (int p = 0; p < proj->n_product; p++)
    if (proj->iters[p] == sym) return p;
  return -1;
}

/* The range [*lo, *hi] of idx over the box, leaving out term `skip` (-1: none); false when a free
 * symbol has no range or the arithmetic overflows. */
static bool interval_of(const cn_ctx *ctx, const cn_proj *proj, const nest_plan *plan,
                        const cn_index *idx, int skip, int64_t *lo, int64_t *hi) {
  int64_t low = idx->offset, high = idx->offset;
  for (int t = 0; t < idx->n_terms; t++) {
    if (t == skip) continue;
    int p = iter_pos(proj, idx->syms[t]);
    int64_t first, last;
    if (p >= 0) {
      first = plan->from[p];
      last = plan->to[p] - 1;
    } else {
      const cn_symbol_info *info = cn_ctx_symbol(ctx, idx->syms[t]);
      if (!info || info->range <= 0) return false;
      first = 0;
      last = info->range - 1;
    }
    int64_t a, b;
    if (__builtin_mul_overflow(idx->coeffs[t], first, &a) ||
        __builtin_mul_overflow(idx->coeffs[t], last, &b))
      return false;
    if (__builtin_add_overflow(low, a < b ? a : b, &low) ||
        __builtin_add_overflow(high, a < b ? b : a, &high))
      return false;
  }
  *lo = low;
  *hi = high;
  return true;
}

/* Shrinks the range of the iterator of term t of a condition; true if it changed. */
static bool tighten_term(const cn_ctx *ctx, const cn_proj *proj, nest_plan *plan,
                         const cn_ll_cond *cond, int t) {
  int p = iter_pos(proj, cond->expr.syms[t]);
  if (p < 0) return false;
  int64_t c = cond->expr.coeffs[t], rest_lo, rest_hi, a, b, x_lo, x_hi;
  if (!interval_of(ctx, proj, plan, &cond->expr, t, &rest_lo, &rest_hi)) return false;
  /* c*x in [a, b] */
  if (__builtin_sub_overflow(cond->lo, rest_hi, &a) || __builtin_sub_overflow(cond->hi, 1, &b) ||
      __builtin_sub_overflow(b, rest_lo, &b))
    return false;
  if (c > 0 ? !ceil_div(a, c, &x_lo) || !floor_div(b, c, &x_hi)
            : !ceil_div(b, c, &x_lo) || !floor_div(a, c, &x_hi))
    return false;
  bool changed = false;
  if (x_lo > plan->from[p]) {
    plan->from[p] = x_lo;
    changed = true;
  }
  if (x_hi < plan->to[p] - 1) {
    plan->to[p] = x_hi + 1;
    changed = true;
  }
  if (plan->from[p] >= plan->to[p]) {
    plan->to[p] = plan->from[p];
    plan->empty = true;
  }
  return changed;
}

/* Adds lo <= expr < hi, intersecting it with an earlier condition on the same expression. */
static void add_cond(cn_ll_cond *conds, int *n, cn_index expr, int64_t lo, int64_t hi) {
  for (int k = 0; k < *n; k++)
    if (cn_index_equal(&conds[k].expr, &expr)) {
      if (lo > conds[k].lo) conds[k].lo = lo;
      if (hi < conds[k].hi) conds[k].hi = hi;
      return;
    }
  conds[(*n)++] = (cn_ll_cond){expr, lo, hi};
}

static cn_status plan_nest(cn_ctx *ctx, const cn_proj *proj, nest_plan *plan) {
  int n = proj->n_product;
  size_t n_alloc = (size_t)(n ? n : 1);
  int max_conds = proj->n_constraints;
  for (int s = 0; proj->valid_only && s <= proj->n_rhs; s++) max_conds += proj->slot[s].rank;
  size_t c_alloc = (size_t)(max_conds ? max_conds : 1);
  *plan = (nest_plan){.n = n};
  plan->from = cn_alloc(ctx, n_alloc * sizeof *plan->from);
  plan->to = cn_alloc(ctx, n_alloc * sizeof *plan->to);
  plan->guards = cn_alloc(ctx, c_alloc * sizeof *plan->guards);
  plan->level = cn_alloc(ctx, c_alloc * sizeof *plan->level);
  if (!plan->from || !plan->to || !plan->guards || !plan->level) return CN_ERR_NOMEM;
  for (int p = 0; p < n; p++) {
    plan->from[p] = proj->lo[p];
    plan->to[p] = proj->lo[p] + proj->sizes[p];
    plan->empty = plan->empty || proj->sizes[p] == 0;
  }
  if (plan->empty) return CN_OK;
  cn_ll_cond *conds = plan->guards; /* filtered in place below */
  int n_conds = 0;
  for (int k = 0; k < proj->n_constraints; k++)
    add_cond(conds, &n_conds, proj->constraints[k].expr, 0, proj->constraints[k].bound);
  for (int s = 0; proj->valid_only && s <= proj->n_rhs; s++)
    for (int a = 0; a < proj->slot[s].rank; a++)
      add_cond(conds, &n_conds, proj->slot[s].map[a], 0, proj->slot[s].dims[a]);

  bool changed = true;
  for (int round = 0; changed && !plan->empty && round < PLAN_MAX_ROUNDS; round++) {
    changed = false;
    for (int k = 0; k < n_conds && !plan->empty; k++)
      for (int t = 0; t < conds[k].expr.n_terms && !plan->empty; t++)
        changed |= tighten_term(ctx, proj, plan, &conds[k], t);
  }
  if (plan->empty) return CN_OK;

  for (int k = 0; k < n_conds; k++) {
    int64_t lo, hi;
    if (interval_of(ctx, proj, plan, &conds[k].expr, -1, &lo, &hi)) {
      if (lo >= conds[k].lo && hi < conds[k].hi) continue; /* implied by the box */
      if (hi < conds[k].lo || lo >= conds[k].hi || conds[k].lo >= conds[k].hi) {
        plan->empty = true;
        return CN_OK;
      }
    }
    int level = -1;
    for (int t = 0; t < conds[k].expr.n_terms; t++) {
      int p = iter_pos(proj, conds[k].expr.syms[t]);
      if (p > level) level = p;
    }
    plan->guards[plan->n_guards] = conds[k];
    plan->level[plan->n_guards++] = level;
  }
  return CN_OK;
}

/* The guard of the plan's conditions at `level` around body (body itself when there are none). */
static cn_ll_stmt *wrap_guard(cn_ctx *ctx, const nest_plan *plan, int level, cn_ll_stmt *body) {
  int count = 0;
  for (int g = 0; g < plan->n_guards; g++) count += plan->level[g] == level;
  if (count == 0 || !body) return body;
  cn_ll_cond *conds = cn_malloc(ctx, (size_t)count * sizeof *conds);
  if (!conds) return NULL;
  count = 0;
  for (int g = 0; g < plan->n_guards; g++)
    if (plan->level[g] == level) conds[count++] = plan->guards[g];
  cn_ll_stmt *guard = cn_lb_guard(ctx, count, conds, body);
  free(conds);
  return guard;
}

/* The position of the innermost iterator a gathered symbol's map mentions, -1 for none. */
static int gathered_level(const cn_proj *proj, const cn_proj_gathered *gs) {
  int level = -1;
  for (int a = 0; a < gs->source->rank; a++)
    for (int t = 0; t < gs->map[a].n_terms; t++) {
      int p = iter_pos(proj, gs->map[a].syms[t]);
      if (p > level) level = p;
    }
  return level;
}

/* The CN_LL_LET of each gathered symbol read at `level` around body: it binds the symbol as soon
 * as the loops its cell depends on are open, so the loops inside (the table's row, d) run with
 * it fixed, and a point whose index is out of range skips them all. */
static cn_ll_stmt *wrap_lets(lower_state *st, const cn_proj *proj, int level, cn_ll_stmt *body) {
  for (int k = proj->n_gathered - 1; k >= 0 && body; k--) {
    const cn_proj_gathered *gs = &proj->gathered[k];
    if (gathered_level(proj, gs) != level) continue;
    body =
        cn_lb_let(st->ctx, gs->sym, param_index(st, gs->source, false), gs->map, gs->bound, body);
  }
  return body;
}

/* The nest of the plan around body: loops in product order (but those `omit` marks, which
 * neither body nor any guard mentions), each guard inside the loop of its innermost iterator,
 * each gathered symbol's binding inside its guards. */
static cn_ll_stmt *plan_loops(lower_state *st, const cn_proj *proj, const nest_plan *plan,
                              const bool *omit, cn_ll_stmt *body) {
  cn_ctx *ctx = st->ctx;
  for (int d = plan->n - 1; d >= 0 && body; d--) {
    body = wrap_guard(ctx, plan, d, wrap_lets(st, proj, d, body));
    if (!(omit && omit[d]))
      body = wrap_loops(ctx, 1, &proj->iters[d], &plan->from[d], &plan->to[d], body);
  }
  return wrap_guard(ctx, plan, -1, wrap_lets(st, proj, -1, body));
}

/* The record restricted to the plan's box, without conditions: what the LHS analyses see. Every
 * visited point is in the box, so injectivity on it holds for the visited points; when the plan
 * has no guards the visited points are the box, so surjectivity carries over too. */
static cn_status plan_view(cn_ctx *ctx, const cn_proj *proj, const nest_plan *plan, cn_proj *view) {
  *view = *proj;
  view->n_constraints = 0;
  view->valid_only = false;
  size_t n_alloc = (size_t)(plan->n ? plan->n : 1);
  view->lo = plan->from;
  view->sizes = cn_alloc(ctx, n_alloc * sizeof *view->sizes);
  if (!view->sizes) return CN_ERR_NOMEM;
  for (int p = 0; p < plan->n; p++) view->sizes[p] = plan->empty ? 0 : plan->to[p] - plan->from[p];
  return CN_OK;
}

/* ---- Assignments ---- */

/* The plan's nest around body, appended to out; nothing when a record with conditions visits no
 * point (a plain record keeps its empty loops, which the simplifier removes, as before). */
static cn_status push_nest(lower_state *st, stmt_list *out, const cn_proj *proj,
                           const nest_plan *plan, const bool *omit, cn_ll_stmt *body) {
  if (!body) return CN_ERR_NOMEM; /* a constructor failed */
  if (plan->empty && cn_proj_has_conditions(proj)) return CN_OK;
  return list_push(st->ctx, out, plan_loops(st, proj, plan, omit, body));
}

static cn_status push_text(cn_ctx *ctx, stmt_list *out, cn_sbuf *sb) {
  return list_push(ctx, out, cn_lb_comment(ctx, cn_sbuf_finish(ctx, sb)));
}

/* The LHS before the loop nest of `=:`. Plain: every cell (margins included) to the neutral
 * element. zero_unreached (tile-edsl: cells no valid point writes are 0, written cells start from
 * the aggregation's identity): every cell to 0, then — unless the map is injective (each written
 * cell is then assigned exactly once) or the neutral element is 0 — a marking pass, the same nest
 * as the assignment's without the loops of iterators that neither the LHS map nor a guard mentions,
 * storing the neutral element into each cell a visited point writes. The pass costs one traversal
 * of the visited points projected on those iterators (guards and constant stores, no reads) and no
 * memory; a reached-mask would need a scratch node per assignment, a pass to clear it and one to
 * apply it. */
static cn_status prefill_lhs(lower_state *st, stmt_list *out, const cn_asgn *asgn,
                             const nest_plan *plan, bool surjective, bool injective) {
  cn_ctx *ctx = st->ctx;
  const cn_proj *proj = asgn->u.accum.proj;
  cn_node *lhs = asgn->u.accum.lhs;
  cn_op accum = asgn->u.accum.accum;
  cn_value neutral = cn_value_of_double(lhs->prec, cn_op_table[accum].neutral);
  bool zero = proj->zero_unreached && !surjective;
  int64_t from[CN_MAX_RANK], to[CN_MAX_RANK];
  for (int d = 0; d < lhs->rank; d++) {
    from[d] = -lhs->pad[d][0];
    to[d] = lhs->dims[d] + lhs->pad[d][1];
  }
  if (!zero) {
    TRY(push_comment(ctx, out, "clear", lhs, accum));
    return fill_box(st, out, lhs, false, from, to, neutral);
  }
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "clear '%s' (#%d) to 0: cells no valid point writes stay 0",
                 lhs->label ? lhs->label : "", lhs->id);
  TRY(push_text(ctx, out, &sb));
  TRY(fill_box(st, out, lhs, false, from, to, cn_value_of_double(lhs->prec, 0.0)));
  if (injective || !cn_value_truth(lhs->prec, neutral) || plan->empty) return CN_OK;
  sb = (cn_sbuf){0};
  cn_sbuf_printf(&sb, "cells of '%s' (#%d) that a valid point writes start from the neutral of %s",
                 lhs->label ? lhs->label : "", lhs->id, op_spelling(accum));
  TRY(push_text(ctx, out, &sb));
  /* Which cells are reached depends only on the iterators the LHS map or a guard mentions: the
   * others (non-empty ranges, as the plan is not empty) need no loop. */
  cn_index *lhs_map = proj->slot[CN_SLOT_LHS].map;
  bool *omit = cn_alloc(ctx, (size_t)(plan->n ? plan->n : 1) * sizeof *omit);
  if (!omit) return CN_ERR_NOMEM;
  for (int p = 0; p < plan->n; p++) {
    bool used = false;
    for (int d = 0; d < lhs->rank && !used; d++)
      used = cn_index_mentions(&lhs_map[d], proj->iters[p]);
    for (int g = 0; g < plan->n_guards && !used; g++)
      used = cn_index_mentions(&plan->guards[g].expr, proj->iters[p]);
    for (int k = 0; k < proj->n_gathered && !used; k++) /* the cells it reads decide the LHS's */
      for (int a = 0; a < proj->gathered[k].source->rank && !used; a++)
        used = cn_index_mentions(&proj->gathered[k].map[a], proj->iters[p]);
    omit[p] = !used;
  }
  return push_nest(
      st, out, proj, plan, omit,
      cn_lb_set(ctx, param_index(st, lhs, false), lhs_map, cn_lb_const(ctx, lhs->prec, neutral)));
}

static cn_status lower_accum(lower_state *st, const cn_asgn *asgn, stmt_list *out) {
  cn_ctx *ctx = st->ctx;
  const cn_proj *proj = asgn->u.accum.proj;
  cn_node *lhs = asgn->u.accum.lhs;
  const cn_buffer *rhs = asgn->u.accum.rhs;
  cn_op accum = asgn->u.accum.accum, op = asgn->u.accum.op;
  bool init_neutral = asgn->u.accum.init_neutral;
  int arity = cn_op_arity(op);
  double neutral = cn_op_table[accum].neutral;

  /* Under valid_only every read is within the unpadded dims: margins are never read. */
  for (int i = 0; i < arity && !proj->valid_only; i++) {
    if (!node_is_padded(rhs[i].node)) continue;
    bool seen = false; /* one reset per buffer, even when an operand is read twice */
    for (int j = 0; j < i; j++) seen |= rhs[j].node == rhs[i].node && rhs[j].merge == rhs[i].merge;
    if (seen) continue;
    TRY(push_comment(ctx, out, "reset padding of", rhs[i].node, accum));
    TRY(reset_margins(st, out, rhs[i].node, rhs[i].merge,
                      cn_value_of_double(rhs[i].node->prec, neutral)));
  }

  nest_plan plan;
  cn_proj view;
  TRY(plan_nest(ctx, proj, &plan));
  TRY(plan_view(ctx, proj, &plan, &view));
  bool injective = cn_proj_lhs_injective(&view);
  bool surjective = plan.n_guards == 0 && cn_proj_lhs_surjective(&view);
  if (init_neutral && !(surjective && injective))
    TRY(prefill_lhs(st, out, asgn, &plan, surjective, injective));

  cn_ll_expr *args[3] = {NULL, NULL, NULL};
  for (int i = 0; i < arity; i++)
    args[i] = read_cell(st, rhs[i].node, rhs[i].merge, proj->slot[1 + i].map);
  cn_ll_expr *inner =
      op == CN_OP_ID ? args[0] : cn_lb_op(ctx, op, lhs->prec, args[0], args[1], args[2]);
  cn_index *lhs_map = proj->slot[CN_SLOT_LHS].map;
  int param = param_index(st, lhs, false);
  cn_ll_stmt *set = init_neutral && injective
                        ? cn_lb_set(ctx, param, lhs_map, inner)
                        : cn_lb_accum(ctx, param, lhs->prec, lhs_map, accum, inner);
  return push_nest(st, out, proj, &plan, NULL, set);
}

static cn_status lower_vec(lower_state *st, const cn_asgn *asgn, stmt_list *out) {
  cn_ctx *ctx = st->ctx;
  const cn_proj *proj = asgn->u.vec.proj;
  cn_node *lhs = asgn->u.vec.lhs;
  cn_ll_expr *arg = read_cell(st, asgn->u.vec.rhs.node, asgn->u.vec.rhs.merge, proj->slot[1].map);
  cn_ll_stmt *set = cn_lb_set_vec(ctx, asgn->u.vec.op, param_index(st, lhs, false),
                                  proj->slot[CN_SLOT_LHS].map, cn_vec_length(lhs->prec), arg);
  if (!set) return CN_ERR_NOMEM;
  nest_plan plan;
  TRY(plan_nest(ctx, proj, &plan));
  return push_nest(st, out, proj, &plan, NULL, set);
}

/* The row-major offset of the cell at `syms` in the node's logical dims (size-1 axes add
 * nothing), as an index-precision expression: a sum of affine pieces of at most
 * CN_MAX_AFFINE_TERMS terms each, since one cn_index holds no more. */
static cn_ll_expr *offset_expr(cn_ctx *ctx, const cn_node *node, const cn_symbol *syms) {
  int64_t strides[CN_MAX_RANK];
  int64_t stride = 1;
  for (int d = node->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= node->dims[d];
  }
  cn_symbol terms[CN_MAX_RANK];
  int64_t coeffs[CN_MAX_RANK];
  int n = 0;
  for (int d = 0; d < node->rank; d++) {
    if (node->dims[d] == 1) continue;
    terms[n] = syms[d];
    coeffs[n++] = strides[d];
  }
  if (n == 0) return cn_lb_index(ctx, cn_index_fixed(0));
  cn_ll_expr *sum = NULL;
  for (int start = 0; start < n; start += CN_MAX_AFFINE_TERMS) {
    int count = n - start < CN_MAX_AFFINE_TERMS ? n - start : CN_MAX_AFFINE_TERMS;
    cn_ll_expr *piece = cn_lb_index(ctx, cn_index_affine(count, terms + start, coeffs + start, 0));
    sum = sum ? cn_lb_op(ctx, CN_OP_ADD, CN_INDEX_PREC, sum, piece, NULL) : piece;
    if (!sum) return NULL;
  }
  return sum;
}

/* Constant_fill, unrolled: one Set with fixed indices per cell, in row-major order. */
static cn_status lower_constant_fill(lower_state *st, const cn_asgn *asgn, stmt_list *out) {
  cn_ctx *ctx = st->ctx;
  cn_node *lhs = asgn->u.fetch.lhs;
  /* The cell count, saturated just above the limit so that it cannot overflow. */
  int64_t cells = 1;
  for (int d = 0; d < lhs->rank; d++)
    if (lhs->dims[d] == 0) cells = 0;
  for (int d = 0; d < lhs->rank && cells > 0 && cells <= LOWER_MAX_FILL_CELLS; d++)
    cells = lhs->dims[d] > LOWER_MAX_FILL_CELLS / cells ? LOWER_MAX_FILL_CELLS + 1
                                                        : cells * lhs->dims[d];
  if (cells > LOWER_MAX_FILL_CELLS)
    return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                   "constant fill of '%s' (#%d): the node has more than %d cells, too many to "
                   "unroll",
                   lhs->label ? lhs->label : "", lhs->id, LOWER_MAX_FILL_CELLS);
  CN_ASSERT(cells == 0 || asgn->u.fetch.n_fill > 0);
  int64_t pos[CN_MAX_RANK] = {0};
  for (int64_t offset = 0; offset < cells; offset++) {
    cn_index idx[CN_MAX_RANK];
    for (int d = 0; d < lhs->rank; d++) idx[d] = cn_index_fixed(pos[d]);
    double x = asgn->u.fetch.fill[(size_t)offset % asgn->u.fetch.n_fill];
    TRY(list_push(ctx, out,
                  cn_lb_set(ctx, param_index(st, lhs, false),
                            cn_lb_index_array(ctx, lhs->rank, idx), cn_lb_num(ctx, lhs->prec, x))));
    for (int d = lhs->rank - 1; d >= 0; d--) {
      if (++pos[d] < lhs->dims[d]) break;
      pos[d] = 0;
    }
  }
  return CN_OK;
}

static cn_status lower_fetch(lower_state *st, const cn_asgn *asgn, stmt_list *out) {
  cn_ctx *ctx = st->ctx;
  cn_node *lhs = asgn->u.fetch.lhs;
  if (asgn->u.fetch.kind == CN_FETCH_CONSTANT_FILL) return lower_constant_fill(st, asgn, out);

  cn_symbol syms[CN_MAX_RANK];
  TRY(axis_symbols(st, lhs->rank, syms));
  cn_index *idx = iter_indices(ctx, lhs->rank, syms);
  if (!idx) return CN_ERR_NOMEM;
  cn_ll_expr *value = NULL;
  switch (asgn->u.fetch.kind) {
  case CN_FETCH_CONSTANT: value = cn_lb_num(ctx, lhs->prec, asgn->u.fetch.constant); break;
  case CN_FETCH_CONSTANT_BITS:
    value = cn_lb_const(ctx, lhs->prec, cn_value_of_bits(lhs->prec, asgn->u.fetch.bits));
    break;
  case CN_FETCH_RANGE_OVER_OFFSETS: value = offset_expr(ctx, lhs, syms); break;
  case CN_FETCH_SLICE: {
    const cn_node *sliced = asgn->u.fetch.sliced;
    CN_ASSERT(sliced->rank == lhs->rank + 1);
    cn_index src[CN_MAX_RANK];
    src[0] = cn_index_iter(asgn->u.fetch.sym);
    for (int d = 0; d < lhs->rank; d++) src[d + 1] = idx[d];
    value = read_cell(st, sliced, false, cn_lb_index_array(ctx, sliced->rank, src));
    break;
  }
  case CN_FETCH_EMBED_SYMBOL: value = cn_lb_index(ctx, cn_index_iter(asgn->u.fetch.sym)); break;
  case CN_FETCH_EMBED_SELF_ID:
    value = cn_lb_const(ctx, lhs->prec, cn_value_of_bits(lhs->prec, (uint64_t)lhs->id));
    break;
  case CN_FETCH_EMBED_DIM: value = cn_lb_num(ctx, lhs->prec, (double)*asgn->u.fetch.dim); break;
  case CN_FETCH_CONSTANT_FILL: cn_assert_fail(__FILE__, __LINE__, "constant fill lowered above");
  }
  cn_ll_stmt *set = cn_lb_set(ctx, param_index(st, lhs, false), idx, value);
  return list_push(ctx, out, wrap_loops(ctx, lhs->rank, syms, NULL, lhs->dims, set));
}

static cn_status lower_asgn(lower_state *st, const cn_asgn *asgn, stmt_list *out) {
  if (!asgn) return CN_OK;
  switch (asgn->kind) {
  case CN_ASGN_NOOP: return CN_OK;
  case CN_ASGN_SEQ:
    for (int i = 0; i < asgn->u.seq.count; i++) TRY(lower_asgn(st, asgn->u.seq.items[i], out));
    return CN_OK;
  case CN_ASGN_COMMENT: {
    /* The comment heads its body's statements, all spliced into the enclosing sequence. */
    const char *text = asgn->u.comment.text ? asgn->u.comment.text : "";
    TRY(list_push(st->ctx, out, cn_lb_comment(st->ctx, cn_strdup(st->ctx, text))));
    return lower_asgn(st, asgn->u.comment.body, out);
  }
  case CN_ASGN_ACCUM: return lower_accum(st, asgn, out);
  case CN_ASGN_VEC_UNOP: return lower_vec(st, asgn, out);
  case CN_ASGN_FETCH: return lower_fetch(st, asgn, out);
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown assignment kind");
}

/* ---- Free symbols ---- */

/* Per-symbol tables at the positions of the procedure's symbol list (cn_ll_symbols). */
typedef struct {
  cn_ll_symbols symbols;
  int *bound; /* enclosing loops binding the symbol */
  bool *used; /* read while unbound */
} free_scan;

static int slot_of(const free_scan *fs, cn_symbol sym) {
  int slot = cn_ll_symbol_slot(&fs->symbols, sym);
  CN_ASSERT(slot >= 0); /* the list holds every symbol the procedure names */
  return slot;
}

static void scan_index(free_scan *fs, const cn_index *idx) {
  if (idx->kind == CN_IDX_FIXED) return;
  CN_ASSERT(idx->n_terms >= 1);
  for (int t = 0; t < idx->n_terms; t++) {
    int slot = slot_of(fs, idx->syms[t]);
    if (!fs->bound[slot]) fs->used[slot] = true;
  }
}

static void scan_access(free_scan *fs, int rank, const cn_index *idx) {
  for (int d = 0; d < rank; d++) scan_index(fs, &idx[d]);
}

static void scan_expr(free_scan *fs, const cn_ll_proc *proc, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: scan_access(fs, proc->params[e->u.get.param].node->rank, e->u.get.idx); return;
  case CN_LE_CONST: return;
  case CN_LE_INDEX: scan_index(fs, &e->u.index); return;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++) scan_expr(fs, proc, e->u.op.args[a]);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

static void scan_stmt(free_scan *fs, const cn_ll_proc *proc, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) scan_stmt(fs, proc, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR:
    for (int k = 0; k < s->u.loop.n_lower; k++) scan_index(fs, &s->u.loop.lower[k].expr);
    for (int k = 0; k < s->u.loop.n_upper; k++) scan_index(fs, &s->u.loop.upper[k].expr);
    fs->bound[slot_of(fs, s->u.loop.sym)]++;
    scan_stmt(fs, proc, s->u.loop.body);
    fs->bound[slot_of(fs, s->u.loop.sym)]--;
    return;
  case CN_LL_IF:
    for (int c = 0; c < s->u.guard.n_conds; c++) scan_index(fs, &s->u.guard.conds[c].expr);
    scan_stmt(fs, proc, s->u.guard.body);
    return;
  case CN_LL_SET:
    scan_access(fs, proc->params[s->u.set.param].node->rank, s->u.set.idx);
    scan_expr(fs, proc, s->u.set.value);
    return;
  case CN_LL_SET_VEC:
    scan_access(fs, proc->params[s->u.vec.param].node->rank, s->u.vec.idx);
    scan_expr(fs, proc, s->u.vec.arg);
    return;
  case CN_LL_GEMM: scan_stmt(fs, proc, s->u.gemm.nest); return;
  case CN_LL_LET:
    scan_access(fs, proc->params[s->u.let.param].node->rank, s->u.let.idx);
    fs->bound[slot_of(fs, s->u.let.sym)]++;
    scan_stmt(fs, proc, s->u.let.body);
    fs->bound[slot_of(fs, s->u.let.sym)]--;
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

/* The free symbols, ascending (the order of the symbol list). */
static cn_status collect_free_syms(cn_ctx *ctx, cn_ll_proc *proc) {
  free_scan fs = {0};
  cn_status status = cn_ll_symbols_of(ctx, proc, &fs.symbols);
  if (status != CN_OK) return status;
  size_t n = (size_t)(fs.symbols.n ? fs.symbols.n : 1);
  fs.bound = cn_calloc(ctx, n, sizeof *fs.bound);
  fs.used = cn_calloc(ctx, n, sizeof *fs.used);
  if (!fs.bound || !fs.used) {
    status = CN_ERR_NOMEM;
    goto done;
  }
  scan_stmt(&fs, proc, proc->body);
  int count = 0;
  for (int s = 0; s < fs.symbols.n; s++) count += fs.used[s];
  proc->n_free_syms = count;
  proc->free_syms = cn_alloc(ctx, (size_t)(count ? count : 1) * sizeof *proc->free_syms);
  if (!proc->free_syms) {
    status = CN_ERR_NOMEM;
    goto done;
  }
  count = 0;
  for (int s = 0; s < fs.symbols.n; s++)
    if (fs.used[s]) proc->free_syms[count++] = fs.symbols.syms[s];
done:
  free(fs.bound);
  free(fs.used);
  return status;
}

/* ---- Entry point ---- */

cn_status cn_ll_lower(cn_ctx *ctx, const cn_asgn *asgn, const char *name, cn_ll_proc **out) {
  *out = NULL;
  if (!cn_is_c_name(name))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "routine name '%s' is not a C identifier cannl can use (" CN_C_NAME_RULE ")",
                   name ? name : "(null)");
  cn_ll_param *params;
  int n_params;
  TRY(collect_params(ctx, asgn, &params, &n_params));
  lower_state st = {.ctx = ctx, .params = params, .n_params = n_params};
  for (int d = 0; d < CN_MAX_RANK; d++) st.axis_syms[d] = -1;
  stmt_list body = {0};
  cn_status status = lower_asgn(&st, asgn, &body);
  cn_ll_proc *proc = NULL;
  if (status == CN_OK) {
    proc = cn_lb_proc(ctx, name, cn_lb_seq_array(ctx, body.count, body.items), n_params, params, 0,
                      NULL);
    /* The free symbols are what the built procedure reads outside its loops. */
    status = proc ? collect_free_syms(ctx, proc) : CN_ERR_NOMEM;
  }
  free(body.items);
  free(params);
  if (status == CN_OK) *out = proc;
  return status;
}
