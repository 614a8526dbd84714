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
 * models on several threads). CN_LL_FLAT goes on the loop around a vector-marked innermost loop
 * when the pair walks every buffer as one contiguous range (loops.h: both from 0 without affine
 * bounds, each access's stride in the outer loop the inner extent times its stride in the inner,
 * no guard or embedded index in the body) and the outer loop is not parallel: an element-wise nest
 * over [128, 10] then runs as one vector loop of 1280 instead of 128 loops of 10. A
 * loop may carry both marks (a one-loop nest). Nests of one loop inside another loop are marked as
 * nests of their own: their parallel loop then runs once per value of the loops outside. For a
 * device (`grid`, sched.h cn_sched_options.device) the loops directly inside the parallel one are
 * marked parallel too while each is independent with the loops outside it fixed: the run is the
 * kernel's grid (backend/kernels.h), and a point of it is one work item. */
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

/* Whether an expression embeds the value of one of two loop variables (an index expression). */
static bool expr_embeds(const cn_ll_expr *e, cn_symbol a, cn_symbol b) {
  switch (e->kind) {
  case CN_LE_INDEX: return cn_index_mentions(&e->u.index, a) || cn_index_mentions(&e->u.index, b);
  case CN_LE_OP:
    for (int k = 0; k < cn_op_arity(e->u.op.op); k++)
      if (expr_embeds(e->u.op.args[k], a, b)) return true;
    return false;
  case CN_LE_GET:
  case CN_LE_CONST: return false;
  }
  return true;
}

/* Whether a body of stores reads loop variables a or b other than through its accesses: a guard
 * (any: guards of a perfect nest's body test its variables) or an embedded index. */
static bool body_reads_vars(const cn_ll_stmt *s, cn_symbol a, cn_symbol b) {
  switch (s->kind) {
  case CN_LL_SET: return expr_embeds(s->u.set.value, a, b);
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (body_reads_vars(s->u.seq.items[i], a, b)) return true;
    return false;
  case CN_LL_COMMENT: return false;
  case CN_LL_IF:
  case CN_LL_FOR:
  case CN_LL_SET_VEC:
  case CN_LL_GEMM:
  case CN_LL_LET: return true;
  }
  return true;
}

static bool box_only_from_zero(const cn_ll_stmt *loop) {
  return loop->u.loop.from == 0 && !loop->u.loop.n_lower && !loop->u.loop.n_upper;
}

/* Whether the two innermost loops may run as one (CN_LL_FLAT on the outer, loops.h). */
static bool flattenable(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  if (nest->depth < 2) return false;
  const cn_ll_stmt *outer = nest->loops[nest->depth - 2], *inner = nest->loops[nest->depth - 1];
  if (!(inner->u.loop.marks & CN_LL_VECTOR) || (outer->u.loop.marks & CN_LL_PARALLEL) ||
      !box_only_from_zero(outer) || !box_only_from_zero(inner))
    return false;
  double n = (double)extent(inner);
  for (int a = 0; a < nest->n_access; a++) {
    const cn_sched_access *acc = &nest->access[a];
    if (cn_sched_stride(proc, acc, outer->u.loop.sym) !=
        n * cn_sched_stride(proc, acc, inner->u.loop.sym))
      return false;
  }
  return !body_reads_vars(inner->u.loop.body, outer->u.loop.sym, inner->u.loop.sym);
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

typedef struct {
  int64_t min_work;
  bool grid;
} marks_options;

static cn_status mark_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  (void)ctx;
  const marks_options *o = user;
  cn_ll_stmt *inner = nest->loops[nest->depth - 1];
  if (vectorizable(proc, nest)) cn_lb_marks(inner, inner->u.loop.marks | CN_LL_VECTOR);
  int k = parallel_loop(proc, nest, o->min_work);
  if (k >= 0) cn_lb_marks(nest->loops[k], nest->loops[k]->u.loop.marks | CN_LL_PARALLEL);
  /* a grid: the loops inside k while each is independent with the outer ones fixed (two points
   * that differ in an outer loop of the run are apart by that loop's independence) */
  for (int j = k + 1; o->grid && k >= 0 && j < nest->depth; j++) {
    cn_symbol syms[CN_SCHED_MAX_DEPTH];
    for (int q = j + 1; q < nest->depth; q++) syms[q] = nest->loops[q]->u.loop.sym;
    if (!cn_sched_independent(proc, nest, nest->loops[j]->u.loop.sym, syms + j + 1,
                              nest->depth - j - 1))
      break;
    cn_lb_marks(nest->loops[j], nest->loops[j]->u.loop.marks | CN_LL_PARALLEL);
  }
  if (flattenable(proc, nest)) {
    cn_ll_stmt *outer = nest->loops[nest->depth - 2];
    cn_lb_marks(outer, outer->u.loop.marks | CN_LL_FLAT);
  }
  return CN_OK;
}

cn_status cn_sched_marks(cn_ctx *ctx, cn_ll_proc *proc, int64_t parallel_work, bool grid) {
  CN_ASSERT(parallel_work >= 1);
  marks_options o = {parallel_work, grid};
  return cn_sched_each_nest(ctx, proc, mark_nest, &o);
}
