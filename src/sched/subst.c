/* Substitution of loop variables in a body of stores: the copies that unroll-and-jam (jam.c) and
 * loop fusion (fuse.c) build.
 *
 * Contract: cn_sched_subst_body returns a new copy of a body of stores (stores, guards, sequences,
 * comments: what a perfect nest's body holds) in which every index — of an access, a guard
 * condition or an embedded index value — has each replaced variable v_k turned into
 * scale_k * to_k + offset_k; everything else is copied as it is, through the cn_lb_* constructors.
 * A replacement never adds terms to an index (v_k's term becomes to_k's), so the copy stays within
 * CN_MAX_AFFINE_TERMS; the caller keeps to_k out of the indices that mention v_k, or accepts their
 * terms summed. NULL on allocation failure. Every access gets an index array of its own (nothing
 * downstream relies on arrays shared between accesses). */
#include "sched/sched.h"

cn_index cn_sched_subst_index(const cn_sched_subst *s, const cn_index *ix) {
  if (ix->kind == CN_IDX_FIXED) return *ix;
  cn_symbol syms[CN_MAX_AFFINE_TERMS];
  int64_t coeffs[CN_MAX_AFFINE_TERMS], offset = ix->offset;
  bool changed = false;
  for (int t = 0; t < ix->n_terms; t++) {
    syms[t] = ix->syms[t];
    coeffs[t] = ix->coeffs[t];
    for (int k = 0; k < s->n; k++) {
      if (syms[t] != s->from[k]) continue;
      syms[t] = s->to[k];
      offset += coeffs[t] * s->offset[k];
      coeffs[t] *= s->scale[k];
      changed = true;
      break;
    }
  }
  return changed ? cn_index_affine(ix->n_terms, syms, coeffs, offset) : *ix;
}

/* A new index array for an access of `rank` axes, NULL on allocation failure. */
static cn_index *subst_indices(cn_ctx *ctx, const cn_sched_subst *s, int rank,
                               const cn_index *idx) {
  cn_index copy[CN_MAX_RANK];
  for (int d = 0; d < rank; d++) copy[d] = cn_sched_subst_index(s, &idx[d]);
  return cn_lb_index_array(ctx, rank, copy);
}

static cn_ll_expr *subst_expr(cn_ctx *ctx, const cn_ll_proc *proc, const cn_sched_subst *s,
                              const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET:
    return cn_lb_get(ctx, e->u.get.param, e->prec,
                     subst_indices(ctx, s, proc->params[e->u.get.param].node->rank, e->u.get.idx));
  case CN_LE_CONST: return cn_lb_const(ctx, e->prec, e->u.constant);
  case CN_LE_INDEX: return cn_lb_index(ctx, cn_sched_subst_index(s, &e->u.index));
  case CN_LE_OP: {
    cn_ll_expr *args[3] = {NULL, NULL, NULL};
    int arity = cn_op_arity(e->u.op.op);
    for (int a = 0; a < arity; a++)
      if (!(args[a] = subst_expr(ctx, proc, s, e->u.op.args[a]))) return NULL;
    return cn_lb_op(ctx, e->u.op.op, e->prec, args[0], args[1], args[2]);
  }
  }
  CN_ASSERT(!"unknown expression kind");
  return NULL;
}

cn_ll_stmt *cn_sched_subst_body(cn_ctx *ctx, const cn_ll_proc *proc, const cn_sched_subst *s,
                                const cn_ll_stmt *st) {
  switch (st->kind) {
  case CN_LL_SET: {
    int rank = proc->params[st->u.set.param].node->rank;
    return cn_lb_set(ctx, st->u.set.param, subst_indices(ctx, s, rank, st->u.set.idx),
                     subst_expr(ctx, proc, s, st->u.set.value));
  }
  case CN_LL_IF: {
    int n = st->u.guard.n_conds;
    cn_ll_cond *conds = cn_alloc(ctx, sizeof *conds * (size_t)n);
    if (!conds) return NULL;
    for (int c = 0; c < n; c++) {
      conds[c] = st->u.guard.conds[c];
      conds[c].expr = cn_sched_subst_index(s, &conds[c].expr);
    }
    return cn_lb_guard(ctx, n, conds, cn_sched_subst_body(ctx, proc, s, st->u.guard.body));
  }
  case CN_LL_SEQ: {
    int n = st->u.seq.count;
    cn_ll_stmt **items = cn_alloc(ctx, sizeof *items * (size_t)(n > 0 ? n : 1));
    if (!items) return NULL;
    for (int i = 0; i < n; i++)
      if (!(items[i] = cn_sched_subst_body(ctx, proc, s, st->u.seq.items[i]))) return NULL;
    return cn_lb_seq_array(ctx, n, items);
  }
  case CN_LL_COMMENT: return cn_lb_comment(ctx, st->u.comment);
  case CN_LL_FOR:
  case CN_LL_SET_VEC:
  case CN_LL_GEMM:
  case CN_LL_LET: break; /* not in a body of stores (cn_sched_nest) */
  }
  CN_ASSERT(!"not a body of stores");
  return NULL;
}
