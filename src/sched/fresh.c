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

static bool stmt_mentions(const cn_ll_stmt *s, int param) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (stmt_mentions(s->u.seq.items[i], param)) return true;
    return false;
  case CN_LL_COMMENT: return false;
  case CN_LL_FOR: return stmt_mentions(s->u.loop.body, param);
  case CN_LL_IF: return stmt_mentions(s->u.guard.body, param);
  case CN_LL_SET: return s->u.set.param == param || cn_sched_expr_reads(s->u.set.value, param);
  case CN_LL_SET_VEC: return s->u.vec.param == param || cn_sched_expr_reads(s->u.vec.arg, param);
  case CN_LL_GEMM: return stmt_mentions(s->u.gemm.nest, param);
  case CN_LL_LET: return s->u.let.param == param || stmt_mentions(s->u.let.body, param);
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
      if (s->u.set.param != param) return !cn_sched_expr_reads(s->u.set.value, param);
      if (cn_sched_expr_reads(s->u.set.value, param) ||
          !cn_sched_covers(node, s->u.set.idx, loops, depth))
        return false;
      *write = s;
      return true;
    }
    return (s->u.set.param != param ||
            cn_sched_same_indices(s->u.set.idx, (*write)->u.set.idx, node->rank)) &&
           cn_sched_reads_only_at(s->u.set.value, param, (*write)->u.set.idx, node->rank);
  case CN_LL_FOR:
  case CN_LL_IF:
  case CN_LL_SET_VEC:
  case CN_LL_GEMM:
  case CN_LL_LET: return false;
  }
  return false;
}

static bool writes_whole(const cn_ll_stmt *s, int param, const cn_node *node) {
  const cn_ll_stmt *loops[CN_SCHED_MAX_DEPTH], *body;
  int depth = cn_sched_box_loops(s, loops, &body);
  const cn_ll_stmt *write = NULL;
  return depth >= 0 && body_ok(body, param, node, loops, depth, &write) && write;
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
