/* The symbols of a procedure (loops.h, cn_ll_symbols): a walk collects every occurrence into a
 * growing array, which is sorted and stripped of repeats, so the cost is that of the routine (its
 * occurrences, times a logarithm), whatever the number of symbols of the context.
 *
 * Invariants: the list is ascending without repeats and holds exactly the symbols the body's loops
 * bind, its indices (cell accesses, embedded indices, loop bounds, guard conditions) read, and the
 * procedure's free symbols; it lives in the context's arena, the occurrence array is freed. */
#include "loops/loops.h"

#include <stdlib.h>

typedef struct {
  cn_ctx *ctx;
  cn_symbol *v;
  size_t n, cap;
  bool failed;
} occurrences;

static void add(occurrences *o, cn_symbol sym) {
  if (o->failed) return;
  if (o->n == o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 64;
    cn_symbol *v = cn_realloc(o->ctx, o->v, cap * sizeof *v);
    if (!v) {
      o->failed = true;
      return;
    }
    o->v = v;
    o->cap = cap;
  }
  o->v[o->n++] = sym;
}

static void add_index(occurrences *o, const cn_index *idx) {
  if (idx->kind == CN_IDX_FIXED) return;
  int terms = idx->kind == CN_IDX_ITER ? 1 : idx->n_terms;
  for (int t = 0; t < terms; t++) add(o, idx->syms[t]);
}

static void add_access(occurrences *o, const cn_ll_proc *proc, int param, const cn_index *idx) {
  for (int d = 0; d < proc->params[param].node->rank; d++) add_index(o, &idx[d]);
}

static void add_expr(occurrences *o, const cn_ll_proc *proc, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: add_access(o, proc, e->u.get.param, e->u.get.idx); return;
  case CN_LE_CONST: return;
  case CN_LE_INDEX: add_index(o, &e->u.index); return;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++) add_expr(o, proc, e->u.op.args[a]);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

static void add_stmt(occurrences *o, const cn_ll_proc *proc, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) add_stmt(o, proc, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR:
    add(o, s->u.loop.sym);
    for (int k = 0; k < s->u.loop.n_lower; k++) add_index(o, &s->u.loop.lower[k].expr);
    for (int k = 0; k < s->u.loop.n_upper; k++) add_index(o, &s->u.loop.upper[k].expr);
    add_stmt(o, proc, s->u.loop.body);
    return;
  case CN_LL_IF:
    for (int c = 0; c < s->u.guard.n_conds; c++) add_index(o, &s->u.guard.conds[c].expr);
    add_stmt(o, proc, s->u.guard.body);
    return;
  case CN_LL_SET:
    add_access(o, proc, s->u.set.param, s->u.set.idx);
    add_expr(o, proc, s->u.set.value);
    return;
  case CN_LL_SET_VEC:
    add_access(o, proc, s->u.vec.param, s->u.vec.idx);
    add_expr(o, proc, s->u.vec.arg);
    return;
  case CN_LL_GEMM: add_stmt(o, proc, s->u.gemm.nest); return;
  case CN_LL_LET:
    add(o, s->u.let.sym);
    add_access(o, proc, s->u.let.param, s->u.let.idx);
    add_stmt(o, proc, s->u.let.body);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

static int compare_symbols(const void *a, const void *b) {
  cn_symbol x = *(const cn_symbol *)a, y = *(const cn_symbol *)b;
  return (x > y) - (x < y);
}

cn_status cn_ll_symbols_of(cn_ctx *ctx, const cn_ll_proc *proc, cn_ll_symbols *out) {
  occurrences o = {.ctx = ctx};
  for (int i = 0; i < proc->n_free_syms; i++) add(&o, proc->free_syms[i]);
  add_stmt(&o, proc, proc->body);
  cn_status status = o.failed ? CN_ERR_NOMEM : CN_OK;
  size_t unique = 0;
  if (status == CN_OK) {
    if (o.n > 1) qsort(o.v, o.n, sizeof *o.v, compare_symbols);
    for (size_t i = 0; i < o.n; i++)
      if (unique == 0 || o.v[unique - 1] != o.v[i]) o.v[unique++] = o.v[i];
    out->syms = cn_alloc(ctx, (unique ? unique : 1) * sizeof *out->syms);
    if (!out->syms) status = CN_ERR_NOMEM;
  }
  if (status == CN_OK) {
    for (size_t i = 0; i < unique; i++) {
      CN_ASSERT(o.v[i] >= 0 && o.v[i] < ctx->n_symbols);
      out->syms[i] = o.v[i];
    }
    out->n = (int)unique;
  }
  free(o.v);
  return status;
}

int cn_ll_symbol_slot(const cn_ll_symbols *symbols, cn_symbol sym) {
  int lo = 0, hi = symbols->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (symbols->syms[mid] == sym) return mid;
    if (symbols->syms[mid] < sym)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}
