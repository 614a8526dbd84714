/* Constructors of the loop IR (declared in loops.h): every expression, statement and procedure
 * that the lowering, the simplifier, later passes and the tests build comes from here, the way
 * QBE's emit or Lua's luaK_code* are the one place their IR is written.
 *
 * Invariants: everything is allocated in the context arena; a constructor returns NULL when an
 * allocation fails (the context then holds CN_ERR_NOMEM) or when a child it needs is NULL, so a
 * whole tree can be built and checked once at its root; arrays of children, conditions, bounds,
 * parameters and free symbols are copied, index arrays are shared (loops.h says why); an op gets
 * exactly cn_op_arity(op) arguments (CN_ASSERT: the callers are internal, never user input). */
#include "loops/loops.h"

#include <stdarg.h>
#include <string.h>

/* A copy of n elements of `size` bytes in the arena; a block even for n == 0, so that a
 * successful copy is never NULL. */
static void *arena_copy(cn_ctx *ctx, const void *src, int n, size_t size) {
  void *dst = cn_alloc(ctx, (size_t)(n > 0 ? n : 1) * size);
  if (dst && n > 0) memcpy(dst, src, (size_t)n * size);
  return dst;
}

cn_index *cn_lb_index_array(cn_ctx *ctx, int rank, const cn_index *idx) {
  return arena_copy(ctx, idx, rank, sizeof *idx);
}

cn_index *cn_lb_indices(cn_ctx *ctx, int rank, ...) {
  cn_index *idx = cn_alloc(ctx, (size_t)(rank > 0 ? rank : 1) * sizeof *idx);
  if (!idx) return NULL;
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++) idx[d] = va_arg(ap, cn_index);
  va_end(ap);
  return idx;
}

static cn_ll_expr *expr_new(cn_ctx *ctx, cn_le_kind kind, cn_prec prec) {
  cn_ll_expr *e = cn_alloc(ctx, sizeof *e);
  if (!e) return NULL;
  e->kind = kind;
  e->prec = prec;
  return e;
}

cn_ll_expr *cn_lb_get(cn_ctx *ctx, int param, cn_prec prec, cn_index *idx) {
  cn_ll_expr *e = idx ? expr_new(ctx, CN_LE_GET, prec) : NULL;
  if (!e) return NULL;
  e->u.get.param = param;
  e->u.get.idx = idx;
  return e;
}

cn_ll_expr *cn_lb_const(cn_ctx *ctx, cn_prec prec, cn_value value) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_CONST, prec);
  if (e) e->u.constant = value;
  return e;
}

cn_ll_expr *cn_lb_num(cn_ctx *ctx, cn_prec prec, double x) {
  return cn_lb_const(ctx, prec, cn_value_of_double(prec, x));
}

cn_ll_expr *cn_lb_index(cn_ctx *ctx, cn_index index) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_INDEX, CN_INDEX_PREC);
  if (e) e->u.index = index;
  return e;
}

cn_ll_expr *cn_lb_op(cn_ctx *ctx, cn_op op, cn_prec prec, cn_ll_expr *a, cn_ll_expr *b,
                     cn_ll_expr *c) {
  cn_ll_expr *args[3] = {a, b, c};
  int arity = cn_op_arity(op);
  for (int k = 0; k < 3; k++) {
    if (k >= arity) CN_ASSERT(args[k] == NULL);
    if (k < arity && !args[k]) return NULL;
  }
  cn_ll_expr *e = expr_new(ctx, CN_LE_OP, prec);
  if (!e) return NULL;
  e->u.op.op = op;
  memcpy(e->u.op.args, args, sizeof args);
  return e;
}

static cn_ll_stmt *stmt_new(cn_ctx *ctx, cn_ll_kind kind) {
  cn_ll_stmt *s = cn_alloc(ctx, sizeof *s);
  if (s) s->kind = kind;
  return s;
}

cn_ll_stmt *cn_lb_set(cn_ctx *ctx, int param, cn_index *idx, cn_ll_expr *value) {
  cn_ll_stmt *s = idx && value ? stmt_new(ctx, CN_LL_SET) : NULL;
  if (!s) return NULL;
  s->u.set.param = param;
  s->u.set.idx = idx;
  s->u.set.value = value;
  return s;
}

cn_ll_stmt *cn_lb_accum(cn_ctx *ctx, int param, cn_prec prec, cn_index *idx, cn_op accum,
                        cn_ll_expr *value) {
  cn_ll_expr *prior = value ? cn_lb_get(ctx, param, prec, idx) : NULL;
  return cn_lb_set(ctx, param, idx, cn_lb_op(ctx, accum, prec, prior, value, NULL));
}

cn_ll_stmt *cn_lb_set_vec(cn_ctx *ctx, cn_op op, int param, cn_index *idx, int length,
                          cn_ll_expr *arg) {
  cn_ll_stmt *s = idx && arg ? stmt_new(ctx, CN_LL_SET_VEC) : NULL;
  if (!s) return NULL;
  s->u.vec.op = op;
  s->u.vec.param = param;
  s->u.vec.idx = idx;
  s->u.vec.length = length;
  s->u.vec.arg = arg;
  return s;
}

cn_ll_stmt *cn_lb_gemm(cn_ctx *ctx, cn_ll_stmt *nest, const cn_ll_gemm *plan) {
  cn_ll_stmt *s = nest ? stmt_new(ctx, CN_LL_GEMM) : NULL;
  cn_ll_gemm *copy = s ? arena_copy(ctx, plan, 1, sizeof *plan) : NULL;
  if (!copy) return NULL;
  CN_ASSERT(nest->kind == CN_LL_FOR && plan->depth >= 1 && plan->depth <= CN_GEMM_MAX_LOOPS);
  s->u.gemm.nest = nest;
  s->u.gemm.plan = copy;
  return s;
}

void cn_ll_gemm_parts_of(const cn_ll_stmt *gemm, cn_ll_gemm_parts *out) {
  CN_ASSERT(gemm->kind == CN_LL_GEMM);
  const cn_ll_stmt *st = gemm->u.gemm.nest;
  for (int k = 0; k < gemm->u.gemm.plan->depth; k++) {
    CN_ASSERT(st->kind == CN_LL_FOR);
    out->loops[k] = st;
    st = st->u.loop.body;
    if (st->kind == CN_LL_SEQ && st->u.seq.count == 1) st = st->u.seq.items[0];
  }
  CN_ASSERT(st->kind == CN_LL_SET); /* the one store c := c + x * y */
  const cn_ll_expr *product = st->u.set.value->u.op.args[1];
  out->param[0] = st->u.set.param;
  out->idx[0] = st->u.set.idx;
  for (int a = 0; a < 2; a++) {
    out->param[1 + a] = product->u.op.args[a]->u.get.param;
    out->idx[1 + a] = product->u.op.args[a]->u.get.idx;
  }
}

cn_ll_stmt *cn_lb_comment(cn_ctx *ctx, const char *text) {
  cn_ll_stmt *s = text ? stmt_new(ctx, CN_LL_COMMENT) : NULL;
  if (s) s->u.comment = text;
  return s;
}

cn_ll_stmt *cn_lb_loop(cn_ctx *ctx, cn_symbol sym, int64_t from, int64_t to, cn_ll_stmt *body) {
  cn_ll_stmt *s = body ? stmt_new(ctx, CN_LL_FOR) : NULL;
  if (!s) return NULL;
  s->u.loop.sym = sym;
  s->u.loop.from = from;
  s->u.loop.to = to;
  s->u.loop.body = body;
  return s;
}

cn_ll_stmt *cn_lb_bounds(cn_ctx *ctx, cn_ll_stmt *loop, int n_lower, const cn_ll_bound *lower,
                         int n_upper, const cn_ll_bound *upper) {
  if (!loop) return NULL;
  CN_ASSERT(loop->kind == CN_LL_FOR);
  cn_ll_bound *low = arena_copy(ctx, lower, n_lower, sizeof *lower);
  cn_ll_bound *up = arena_copy(ctx, upper, n_upper, sizeof *upper);
  if (!low || !up) return NULL;
  loop->u.loop.n_lower = n_lower;
  loop->u.loop.lower = low;
  loop->u.loop.n_upper = n_upper;
  loop->u.loop.upper = up;
  return loop;
}

cn_ll_stmt *cn_lb_marks(cn_ll_stmt *loop, unsigned marks) {
  if (!loop) return NULL;
  CN_ASSERT(loop->kind == CN_LL_FOR);
  loop->u.loop.marks = marks;
  return loop;
}

cn_ll_stmt *cn_lb_guard(cn_ctx *ctx, int n_conds, const cn_ll_cond *conds, cn_ll_stmt *body) {
  cn_ll_stmt *s = body ? stmt_new(ctx, CN_LL_IF) : NULL;
  cn_ll_cond *copy = s ? arena_copy(ctx, conds, n_conds, sizeof *conds) : NULL;
  if (!copy) return NULL;
  s->u.guard.n_conds = n_conds;
  s->u.guard.conds = copy;
  s->u.guard.body = body;
  return s;
}

cn_ll_stmt *cn_lb_let(cn_ctx *ctx, cn_symbol sym, int param, cn_index *idx, int64_t bound,
                      cn_ll_stmt *body) {
  cn_ll_stmt *s = body && idx ? stmt_new(ctx, CN_LL_LET) : NULL;
  if (!s) return NULL;
  s->u.let.sym = sym;
  s->u.let.param = param;
  s->u.let.idx = idx;
  s->u.let.bound = bound;
  s->u.let.body = body;
  return s;
}

/* The sequence over an arena array of `count` statements, which it keeps. */
static cn_ll_stmt *seq_of(cn_ctx *ctx, int count, cn_ll_stmt **items) {
  if (!items) return NULL;
  for (int i = 0; i < count; i++)
    if (!items[i]) return NULL;
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_SEQ);
  if (!s) return NULL;
  s->u.seq.count = count;
  s->u.seq.items = items;
  return s;
}

cn_ll_stmt *cn_lb_seq_array(cn_ctx *ctx, int count, cn_ll_stmt *const *items) {
  return seq_of(ctx, count, arena_copy(ctx, items, count, sizeof *items));
}

cn_ll_stmt *cn_lb_seq(cn_ctx *ctx, int count, ...) {
  cn_ll_stmt **items = cn_alloc(ctx, (size_t)(count > 0 ? count : 1) * sizeof *items);
  if (!items) return NULL;
  va_list ap;
  va_start(ap, count);
  for (int i = 0; i < count; i++) items[i] = va_arg(ap, cn_ll_stmt *);
  va_end(ap);
  return seq_of(ctx, count, items);
}

cn_ll_proc *cn_lb_proc(cn_ctx *ctx, const char *name, cn_ll_stmt *body, int n_params,
                       const cn_ll_param *params, int n_free_syms, const cn_symbol *free_syms) {
  cn_ll_proc *proc = body ? cn_alloc(ctx, sizeof *proc) : NULL;
  if (!proc) return NULL;
  proc->name = cn_strdup(ctx, name);
  proc->body = body;
  proc->n_params = n_params;
  proc->params = arena_copy(ctx, params, n_params, sizeof *params);
  proc->n_free_syms = n_free_syms;
  proc->free_syms = arena_copy(ctx, free_syms, n_free_syms, sizeof *free_syms);
  return proc->name && proc->params && proc->free_syms ? proc : NULL;
}
