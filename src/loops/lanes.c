/* Reductions of one cell (loops.h cn_ll_reduction_store) and sums in lanes (CN_LL_LANES): which
 * loops the option "reduce" = "lanes" changes, and their marking.
 *
 * A sum over a long loop, as written, is one chain of dependent adds: a CPU runs it at one add
 * per add latency (4 cycles) and a GPU in one thread, whatever the vector width or the threads.
 * In lanes the adds of a lane depend only on that lane's, so the chain is CN_LL_LANES_COUNT times
 * shorter and vectorizes, at the price of other bits than the loop as written: the option asks
 * for it, the default keeps the order.
 *
 * Invariants: the marking depends on the procedure as lowered and simplified only (it runs before
 * the scheduling stage, whose passes then leave a marked nest's order alone), so a routine gets
 * the same bits whatever passes, threads or backend run it; one walk over the procedure. */
#include "loops/loops.h"

/* Whether e reads a cell of param. */
static bool reads_param(const cn_ll_expr *e, int param) {
  switch (e->kind) {
  case CN_LE_GET: return e->u.get.param == param;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (reads_param(e->u.op.args[a], param)) return true;
    return false;
  case CN_LE_CONST:
  case CN_LE_INDEX: return false;
  }
  return true;
}

const cn_ll_stmt *cn_ll_reduction_store(const cn_ll_proc *proc, const cn_ll_stmt *loop, cn_op op) {
  const cn_ll_stmt *set = loop->u.loop.body;
  if (set->kind != CN_LL_SET) return NULL;
  const int param = set->u.set.param;
  const cn_node *node = proc->params[param].node;
  const cn_ll_expr *v = set->u.set.value;
  if ((node->prec != CN_PREC_SINGLE && node->prec != CN_PREC_DOUBLE) || v->kind != CN_LE_OP ||
      v->u.op.op != op || v->prec != node->prec)
    return NULL;
  const cn_ll_expr *acc = v->u.op.args[0];
  if (acc->kind != CN_LE_GET || acc->u.get.param != param || reads_param(v->u.op.args[1], param))
    return NULL;
  for (int d = 0; d < node->rank; d++)
    if (!cn_index_equal(&acc->u.get.idx[d], &set->u.set.idx[d]) ||
        cn_index_mentions(&set->u.set.idx[d], loop->u.loop.sym))
      return NULL;
  return set;
}

const cn_ll_stmt *cn_ll_long_reduction_store(const cn_ll_proc *proc, const cn_ll_stmt *loop,
                                             cn_op op) {
  if (loop->kind != CN_LL_FOR || loop->u.loop.n_lower || loop->u.loop.n_upper ||
      loop->u.loop.to - loop->u.loop.from < CN_LL_LANES_MIN)
    return NULL;
  return cn_ll_reduction_store(proc, loop, op);
}

const cn_ll_stmt *cn_ll_lanes_store(const cn_ll_proc *proc, const cn_ll_stmt *loop) {
  return cn_ll_long_reduction_store(proc, loop, CN_OP_ADD);
}

static void mark(const cn_ll_proc *proc, cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) mark(proc, s->u.seq.items[i]);
    return;
  case CN_LL_FOR:
    if (cn_ll_lanes_store(proc, s))
      cn_lb_marks(s, s->u.loop.marks | CN_LL_LANES);
    else
      mark(proc, s->u.loop.body);
    return;
  case CN_LL_IF: mark(proc, s->u.guard.body); return;
  case CN_LL_LET: mark(proc, s->u.let.body); return;
  case CN_LL_GEMM: /* planned by the scheduling stage, which runs later */
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return;
  }
  CN_ASSERT(!"unknown statement kind");
}

void cn_ll_sum_lanes(cn_ll_proc *proc) {
  mark(proc, proc->body);
}
