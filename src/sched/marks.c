/* Schedule marks: which loops of each perfect nest may run as SIMD lanes or across threads.
 *
 * Contract: the marks are set, never cleared, and only where they hold (loops.h gives their
 * meaning); the loops, bounds and bodies stay as they are. CN_LL_VECTOR goes on the innermost loop
 * of a nest when its iterations are independent (cn_sched_independent, nothing varying inside)
 * and every access of the body walks it with stride 0 or 1 (cn_sched_stride). CN_LL_PARALLEL goes
 * on the outermost loop of the nest whose iterations are independent while the loops inside it
 * vary, that runs at least 2 iterations, and whose work — its box's extent times the extents of
 * the loops inside it times the body's stores, the box over-approximating affine bounds — reaches
 * the work threshold (by default CN_SCHED_PARALLEL_WORK, 2^15 cell updates, some 20-50 us on one
 * core: below that, handing the iterations to a thread pool costs more than it saves, so tiny
 * routines stay on one thread; the option "parallel_work" sets it, tests set 1 to run small
 * models on several threads). A
 * loop may carry both marks (a one-loop nest). Nests of one loop inside another loop are marked as
 * nests of their own: their parallel loop then runs once per value of the loops outside. */
#include "sched/sched.h"

static int64_t extent(const cn_ll_stmt *loop) {
  return loop->u.loop.to > loop->u.loop.from ? loop->u.loop.to - loop->u.loop.from : 0;
}

static bool vectorizable(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  cn_symbol sym = nest->loops[nest->depth - 1]->u.loop.sym;
  if (!cn_sched_independent(proc, nest, sym, NULL, 0)) return false;
  for (int a = 0; a < nest->n_access; a++) {
    double s = cn_sched_stride(proc, &nest->access[a], sym);
    if (s != 0 && s != 1) return false;
  }
  return true;
}

/* The outermost loop worth running in parallel (at least min_work stores), or -1. */
static int parallel_loop(const cn_ll_proc *proc, const cn_sched_nest *nest, int64_t min_work) {
  cn_symbol syms[CN_SCHED_MAX_DEPTH];
  double work[CN_SCHED_MAX_DEPTH + 1]; /* work[k]: the stores run by one entry into loop k */
  work[nest->depth] = nest->n_stores;
  for (int k = nest->depth - 1; k >= 0; k--) {
    syms[k] = nest->loops[k]->u.loop.sym;
    work[k] = work[k + 1] * (double)extent(nest->loops[k]);
  }
  for (int k = 0; k < nest->depth; k++) {
    if (work[k] < (double)min_work) return -1;
    if (extent(nest->loops[k]) >= 2 &&
        cn_sched_independent(proc, nest, syms[k], syms + k + 1, nest->depth - k - 1))
      return k;
  }
  return -1;
}

static cn_status mark_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  (void)ctx;
  const int64_t *min_work = user;
  cn_ll_stmt *inner = nest->loops[nest->depth - 1];
  if (vectorizable(proc, nest)) cn_lb_marks(inner, inner->u.loop.marks | CN_LL_VECTOR);
  int k = parallel_loop(proc, nest, *min_work);
  if (k >= 0) cn_lb_marks(nest->loops[k], nest->loops[k]->u.loop.marks | CN_LL_PARALLEL);
  return CN_OK;
}

cn_status cn_sched_marks(cn_ctx *ctx, cn_ll_proc *proc, int64_t parallel_work) {
  CN_ASSERT(parallel_work >= 1);
  return cn_sched_each_nest(ctx, proc, mark_nest, &parallel_work);
}
