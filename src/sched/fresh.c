/* Scratch that needs no clearing: whether a routine's first use of a buffer overwrites all of it.
 *
 * Contract: cn_sched_written_first(proc, param) is true only when the first top-level statement
 * of proc that mentions param (a read, a write, a gathered index, a GEMM's operand) is a nest of
 * loops from 0 without affine bounds over a body of stores only (no guard, let or vector store)
 * whose first store touching param writes param[v_0, ..., v_r-1] with a distinct loop variable per
 * axis running exactly over that axis' dim, its value not reading param, and every other access
 * of param in the body is at those same indices; param's node has no padding. Then every cell is
 * written before any is read, in the same iteration that reads it, so the routine's zeroing of a
 * scratch buffer before a run (src/runtime/routine.c) is never observed: the run gives the same
 * bits without it. False whenever unsure. */
#include "sched/sched.h"

static bool expr_mentions(const cn_ll_expr *e, int param) {
  if (e->kind == CN_LE_GET) return e->u.get.param == param;
  if (e->kind != CN_LE_OP) return false;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (expr_mentions(e->u.op.args[a], param)) return true;
  return false;
}

static bool stmt_mentions(const cn_ll_stmt *s, int param) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (stmt_mentions(s->u.seq.items[i], param)) return true;
    return false;
  case CN_LL_COMMENT: return false;
  case CN_LL_FOR: return stmt_mentions(s->u.loop.body, param);
  case CN_LL_IF: return stmt_mentions(s->u.guard.body, param);
  case CN_LL_SET: return s->u.set.param == param || expr_mentions(s->u.set.value, param);
  case CN_LL_SET_VEC: return s->u.vec.param == param || expr_mentions(s->u.vec.arg, param);
  case CN_LL_GEMM: return stmt_mentions(s->u.gemm.nest, param);
  case CN_LL_LET: return s->u.let.param == param || stmt_mentions(s->u.let.body, param);
  }
  return true;
}

static bool same_indices(const cn_index *a, const cn_index *b, int rank) {
  for (int d = 0; d < rank; d++)
    if (!cn_index_equal(&a[d], &b[d])) return false;
  return true;
}

/* Whether every read of param in e is at idx. */
static bool reads_at(const cn_ll_expr *e, int param, const cn_index *idx, int rank) {
  if (e->kind == CN_LE_GET) return e->u.get.param != param || same_indices(e->u.get.idx, idx, rank);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!reads_at(e->u.op.args[a], param, idx, rank)) return false;
  return true;
}

/* Whether the write idx of a node of `rank` axes covers every cell: each axis a distinct loop of
 * loops[0..depth) running over exactly the axis' dim. */
static bool covers(const cn_node *node, const cn_index *idx, const cn_ll_stmt *const *loops,
                   int depth) {
  bool used[CN_SCHED_MAX_DEPTH] = {false};
  for (int a = 0; a < node->rank; a++) {
    if (idx[a].kind != CN_IDX_ITER) return false;
    int k = 0;
    while (k < depth && loops[k]->u.loop.sym != idx[a].syms[0]) k++;
    if (k == depth || used[k] || loops[k]->u.loop.to != node->dims[a]) return false;
    used[k] = true;
  }
  return true;
}

/* Walks a body of stores in order: *write the first store touching param once found (NULL
 * before); false when a statement breaks the contract. */
static bool body_ok(const cn_ll_stmt *s, int param, const cn_node *node,
                    const cn_ll_stmt *const *loops, int depth, const cn_ll_stmt **write) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!body_ok(s->u.seq.items[i], param, node, loops, depth, write)) return false;
    return true;
  case CN_LL_COMMENT: return true;
  case CN_LL_SET:
    if (!*write) {
      if (s->u.set.param != param) return !expr_mentions(s->u.set.value, param);
      if (expr_mentions(s->u.set.value, param) || !covers(node, s->u.set.idx, loops, depth))
        return false;
      *write = s;
      return true;
    }
    return (s->u.set.param != param ||
            same_indices(s->u.set.idx, (*write)->u.set.idx, node->rank)) &&
           reads_at(s->u.set.value, param, (*write)->u.set.idx, node->rank);
  case CN_LL_FOR:
  case CN_LL_IF:
  case CN_LL_SET_VEC:
  case CN_LL_GEMM:
  case CN_LL_LET: return false;
  }
  return false;
}

static bool writes_whole(const cn_ll_stmt *s, int param, const cn_node *node) {
  const cn_ll_stmt *loops[CN_SCHED_MAX_DEPTH];
  int depth = 0;
  while (s->kind == CN_LL_FOR || (s->kind == CN_LL_SEQ && s->u.seq.count == 1)) {
    if (s->kind == CN_LL_SEQ) {
      s = s->u.seq.items[0];
      continue;
    }
    if (depth == CN_SCHED_MAX_DEPTH || s->u.loop.from != 0 || s->u.loop.n_lower ||
        s->u.loop.n_upper)
      return false;
    loops[depth++] = s;
    s = s->u.loop.body;
  }
  const cn_ll_stmt *write = NULL;
  return body_ok(s, param, node, loops, depth, &write) && write;
}

/* The first statement of a flattened sequence that mentions param, or NULL. */
static const cn_ll_stmt *first_use(const cn_ll_stmt *s, int param) {
  if (s->kind != CN_LL_SEQ) return stmt_mentions(s, param) ? s : NULL;
  for (int i = 0; i < s->u.seq.count; i++) {
    const cn_ll_stmt *found = first_use(s->u.seq.items[i], param);
    if (found) return found;
  }
  return NULL;
}

bool cn_sched_written_first(const cn_ll_proc *proc, int param) {
  const cn_node *node = proc->params[param].node;
  for (int a = 0; a < node->rank; a++)
    if (node->pad[a][0] || node->pad[a][1]) return false;
  const cn_ll_stmt *first = first_use(proc->body, param);
  return first && writes_whole(first, param, node);
}
