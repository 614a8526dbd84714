/* Loop order: for each perfect nest of a procedure, the loop that should run innermost.
 *
 * Contract: in a perfect nest whose body is one store, the loop chosen by a cost model of strides
 * moves innermost and the others keep their relative order; nothing else changes (the loops keep
 * their boxes, bounds and marks, the body is the same statement). The cost model prefers, in
 * order: a loop whose iterations are independent and that every access walks with stride 0 or 1
 * (a vectorizable loop: for c[i,k] += a[i,j]*b[j,k] that is k, so the order becomes i, j, k), the
 * smallest sum of the accesses' strides (cn_sched_stride), an output loop over a reduction loop
 * (reductions hoist outward of output loops), and the loop already deeper. Legality, which keeps
 * every cell's sequence of stores: the written cell's indices mention at most one of the nest's
 * loops per axis (so two points write one cell only when every output loop agrees) and every other
 * access of the written buffer has the same indices (no point reads what another point writes,
 * except its own cell); then the points that touch one cell differ only in reduction loops and run
 * in the order of those loops, which the move keeps by moving a reduction loop only when it is
 * already the deepest reduction loop. When the written cell mixes loops in an axis (a
 * convolution's input gradient in[oh + kh] += ...), only a loop that alone indexes an axis of
 * the write (cn_sched_separates: it separates cells, every cell's points share its value) may
 * move, which keeps every cell's sequence too. A loop whose variable appears in another loop's
 * affine bounds never moves inside that loop. Nests of several stores, or that break a
 * condition, keep their order. For a device backend (sched.h cn_sched_options.device) the order
 * is the grid's instead (order_for_device): output loops outside, reductions inside. */
#include "sched/sched.h"

#include <math.h>

/* Whether loop k may run innermost: no other loop's bounds read its variable, and a reduction
 * loop only when no reduction loop is deeper. */
static bool may_go_innermost(const cn_ll_proc *proc, const cn_sched_nest *nest, int k) {
  const cn_sched_access *w = &nest->access[0];
  int rank = proc->params[w->param].node->rank;
  cn_symbol sym = nest->loops[k]->u.loop.sym;
  for (int j = 0; j < nest->depth; j++)
    if (j != k && cn_sched_bounds_mention(nest->loops[j], sym)) return false;
  if (!cn_sched_is_reduction(w, rank, sym)) return true;
  for (int j = k + 1; j < nest->depth; j++)
    if (cn_sched_is_reduction(w, rank, nest->loops[j]->u.loop.sym)) return false;
  return true;
}

typedef struct {
  bool vectorizable, reduction;
  double strides; /* the sum of the accesses' |stride| */
} loop_cost;

static loop_cost cost_of(const cn_ll_proc *proc, const cn_sched_nest *nest, int k) {
  const cn_sched_access *w = &nest->access[0];
  cn_symbol sym = nest->loops[k]->u.loop.sym;
  loop_cost c = {cn_sched_independent(proc, nest, sym, NULL, 0),
                 cn_sched_is_reduction(w, proc->params[w->param].node->rank, sym), 0};
  for (int a = 0; a < nest->n_access; a++) {
    double s = cn_sched_stride(proc, &nest->access[a], sym);
    if (s != 0 && s != 1) c.vectorizable = false;
    c.strides += fabs(s);
  }
  return c;
}

/* Whether a is a better innermost loop than b (b deeper on full ties, so ties keep b). */
static bool better(loop_cost a, loop_cost b) {
  if (a.vectorizable != b.vectorizable) return a.vectorizable;
  if (a.strides != b.strides) return a.strides < b.strides;
  return !a.reduction && b.reduction;
}

/* Rebuilds the chain in `order` (the nest's loops, permuted) into its slot. */
static cn_status rebuild(cn_ctx *ctx, cn_sched_nest *nest, cn_ll_stmt *const *order) {
  cn_ll_stmt *body = nest->loops[nest->depth - 1]->u.loop.body;
  for (int k = nest->depth - 1; k >= 0; k--)
    if (!(body = cn_sched_loop_copy(ctx, order[k], body))) return CN_ERR_NOMEM;
  *nest->slots[0] = body;
  return CN_OK;
}

/* Rebuilds the chain with loop `chosen` innermost, the others in their order, into its slot. */
static cn_status move_innermost(cn_ctx *ctx, cn_sched_nest *nest, int chosen) {
  cn_ll_stmt *order[CN_SCHED_MAX_DEPTH];
  int n = 0;
  for (int k = 0; k < nest->depth; k++)
    if (k != chosen) order[n++] = nest->loops[k];
  order[n++] = nest->loops[chosen];
  return rebuild(ctx, nest, order);
}

/* For a device: the output loops outermost, in their order but for the one the write walks with
 * the smallest stride, which goes last among them (the grid's fastest variable: neighbouring
 * work items write neighbouring cells); then the reduction loops in their order, so each cell's
 * points keep their sequence (a separable nest: cn_sched_separable). The output loops become the
 * kernel's grid, every work item a cell (a bias gradient b[j] += d[i, j], ordered i, j for a
 * CPU's vectors, was one work item summing all cells; it is a grid over j). Not when a loop's
 * bounds read another loop's variable. */
static cn_status order_for_device(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest) {
  for (int k = 0; k < nest->depth; k++)
    for (int j = 0; j < nest->depth; j++)
      if (j != k && cn_sched_bounds_mention(nest->loops[j], nest->loops[k]->u.loop.sym))
        return CN_OK;
  const cn_sched_access *w = &nest->access[0];
  int rank = proc->params[w->param].node->rank;
  cn_ll_stmt *order[CN_SCHED_MAX_DEPTH];
  int n = 0, fastest = -1;
  double fastest_stride = INFINITY;
  for (int k = 0; k < nest->depth; k++) {
    cn_symbol sym = nest->loops[k]->u.loop.sym;
    if (cn_sched_is_reduction(w, rank, sym)) continue;
    double stride = fabs(cn_sched_stride(proc, w, sym));
    if (stride <= fastest_stride) { /* ties: the deeper one */
      fastest = k;
      fastest_stride = stride;
    }
  }
  for (int k = 0; k < nest->depth; k++)
    if (k != fastest && !cn_sched_is_reduction(w, rank, nest->loops[k]->u.loop.sym))
      order[n++] = nest->loops[k];
  if (fastest >= 0) order[n++] = nest->loops[fastest];
  for (int k = 0; k < nest->depth; k++)
    if (cn_sched_is_reduction(w, rank, nest->loops[k]->u.loop.sym)) order[n++] = nest->loops[k];
  bool same = true;
  for (int k = 0; k < nest->depth; k++) same &= order[k] == nest->loops[k];
  return same ? CN_OK : rebuild(ctx, nest, order);
}

static cn_status order_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  const bool *device = user;
  /* a sum in lanes stays the innermost loop (loops.h) */
  if (nest->depth < 2 || nest->lanes || !cn_sched_own_cell(proc, nest)) return CN_OK;
  if (*device) return cn_sched_separable(proc, nest) ? order_for_device(ctx, proc, nest) : CN_OK;
  /* a nest whose write mixes loops in an axis moves only a loop that separates cells */
  bool separable = cn_sched_separable(proc, nest);
  int best = nest->depth - 1;
  loop_cost best_cost = cost_of(proc, nest, best);
  for (int k = nest->depth - 2; k >= 0; k--) {
    if (!may_go_innermost(proc, nest, k) ||
        (!separable && !cn_sched_separates(proc, nest, nest->loops[k]->u.loop.sym)))
      continue;
    loop_cost c = cost_of(proc, nest, k);
    if (better(c, best_cost)) {
      best = k;
      best_cost = c;
    }
  }
  return best == nest->depth - 1 ? CN_OK : move_innermost(ctx, nest, best);
}

cn_status cn_sched_order(cn_ctx *ctx, cn_ll_proc *proc, bool device) {
  return cn_sched_each_nest(ctx, proc, order_nest, &device);
}
