/* Unroll-and-jam: one outer loop of a nest unrolled into its innermost loop, so that every
 * iteration of the innermost loop carries several independent updates.
 *
 * Contract: in a separable perfect nest (cn_sched_separable), or a one-store nest whose write mixes
 * loops in an axis as below, with innermost loop I, a loop L
 * outside I (read by no loop's bounds, without lower bounds and with at most one upper bound, of
 * divisor 1) whose box has at least JAM_FACTOR
 * iterations is rewritten, at L's place, as a loop L_jam over [0, n / U) whose body is the loops
 * between L and I and I itself, around U copies of the body, copy u with L := U*L_jam + from + u
 * (u ascending), followed by L over the n % U remaining values with the original body when the
 * range does not divide. An upper bound e (causal attention's `k < q + 1`: L runs a prefix of its
 * box) stops L_jam at the last whole group below e and adds a loop over the values of the group e
 * cuts (jam_prefix). L is chosen for two shapes:
 *  - I is a reduction loop (the written cell does not move with I): L is the deepest output loop.
 *    The U copies accumulate into U different cells, each invariant in I, so the compiler keeps
 *    them in registers across the whole reduction (loop-invariant store motion, the buffers being
 *    restrict) and U independent chains of additions hide the latency of each: the dot-product
 *    form c[i,k] += a[k,j] * b[i,j] with j innermost runs U times as many updates per cycle.
 *  - I is an output loop and L is the deepest reduction loop, with no reduction loop inside it:
 *    the U copies update one cell in a row, which is loaded and stored once per U updates (the
 *    matmul c[i,k] += a[i,j] * b[j,k] ordered i, j, k reads and writes c a quarter as often).
 *  - The write mixes loops in an axis (a convolution's input gradient din[oh + kh, ow + kw, ic]
 *    += dout[oh, ow, oc] * w[oc, kh, kw, ic], ordered oh, ow, oc, kh, kw, ic): L is the deepest
 *    loop the write does not mention (oc) when every loop inside it is fixed by the written cell
 *    and the loops outside L; the copies update one cell in a row as above (for one cell and
 *    fixed outer loops only L varies, so its values still run in ascending order).
 * Legality, which keeps every cell's sequence of stores: in a separable nest the points touching
 * one cell differ only in reduction loops and no point reads a cell another writes. Jamming an
 * output loop only reorders points of different cells. Jamming a reduction loop with no reduction
 * loop inside it runs, for each cell, its values of L in ascending order (copies in order, then the
 * remainder loop after the whole jammed loop), and the outer reductions as before. The copies are
 * built through the cn_lb_* constructors with L replaced in every index, bound, guard and embedded
 * index; the marks of the loops are kept (a parallel loop stays parallel: its iterations are still
 * independent; a vector loop stays vector: its accesses keep their strides). Small nests (less
 * than JAM_MIN_WORK stores, or less than JAM_MIN_INNER iterations of the loops inside L per
 * iteration of L) are left alone: the copies would cost compile time for nothing. */
#include "sched/sched.h"

#include <stdio.h>

/* Copies per jammed loop: dot-product chains need about latency x throughput of the FMA unit
 * (4 cycles x 2 per cycle on current x86) independent accumulations; a loaded and stored cell
 * needs fewer updates to amortize its two memory operations. */
#define JAM_FACTOR_REDUCTION 8
#define JAM_FACTOR_OUTPUT    4
#define JAM_MIN_WORK         4096
#define JAM_MIN_INNER        8

static int64_t extent(const cn_ll_stmt *loop) {
  return loop->u.loop.to > loop->u.loop.from ? loop->u.loop.to - loop->u.loop.from : 0;
}

/* ---- Choice of the loop ---- */

/* The product of the extents of the loops inside loop k: the updates one cell receives per
 * iteration of k when those loops are reductions (a convolution's 3x3 window inside its input
 * channels: 288 of them, although the innermost loop runs 3). */
static double inner_work(const cn_sched_nest *nest, int k) {
  double work = 1;
  for (int q = k + 1; q < nest->depth; q++) work *= (double)extent(nest->loops[q]);
  return work;
}

/* Whether axis d of the write mentions loop q of the nest and no other loop from `first` on. */
static bool axis_fixes(const cn_sched_nest *nest, int d, int q, int first) {
  const cn_index *axis = &nest->access[0].idx[d];
  if (!cn_index_mentions(axis, nest->loops[q]->u.loop.sym)) return false;
  for (int j = first; j < nest->depth; j++)
    if (j != q && cn_index_mentions(axis, nest->loops[j]->u.loop.sym)) return false;
  return true;
}

/* In a one-store nest whose write mixes loops in an axis (a convolution's input gradient
 * din[oh + kh, ic] += ...): the deepest loop L no axis of the write mentions, when every loop
 * inside L is fixed by the written cell and the loops outside L (an axis mentions it and no other
 * loop from L on); -1 when there is none. Then, for one cell and fixed outer loops, only L
 * varies among the points touching it, and the copies run its values in ascending order. */
static int mixed_choice(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  const cn_sched_access *w = &nest->access[0];
  int rank = proc->params[w->param].node->rank;
  for (int k = nest->depth - 2; k >= 0; k--) {
    if (!cn_sched_is_reduction(w, rank, nest->loops[k]->u.loop.sym)) continue;
    for (int q = k + 1; q < nest->depth; q++) {
      bool fixed = false;
      for (int d = 0; d < rank && !fixed; d++) fixed = axis_fixes(nest, d, q, k);
      if (!fixed) return -1;
    }
    return k;
  }
  return -1;
}

/* The loop to jam and its factor, or -1. */
static int jam_choice(const cn_ll_proc *proc, const cn_sched_nest *nest, int64_t *factor) {
  const cn_sched_access *w = &nest->access[0];
  int rank = proc->params[w->param].node->rank, inner = nest->depth - 1;
  if (nest->depth < 2 || !cn_sched_own_cell(proc, nest) || inner_work(nest, -1) < JAM_MIN_WORK)
    return -1;
  bool inner_reduction = cn_sched_is_reduction(w, rank, nest->loops[inner]->u.loop.sym);
  int chosen = -1;
  bool separable = cn_sched_separable(proc, nest);
  if (!separable) {
    chosen = mixed_choice(proc, nest);
    inner_reduction = false; /* the copies update one cell in a row */
  }
  for (int k = inner - 1; k >= 0 && chosen < 0 && separable; k--) {
    bool reduction = cn_sched_is_reduction(w, rank, nest->loops[k]->u.loop.sym);
    if (inner_reduction ? !reduction : reduction) chosen = k;
    /* an output innermost loop: only the deepest reduction loop may jam */
    if (!inner_reduction && reduction) break;
  }
  if (chosen < 0 || inner_work(nest, chosen) < JAM_MIN_INNER) return -1;
  *factor = inner_reduction ? JAM_FACTOR_REDUCTION : JAM_FACTOR_OUTPUT;
  const cn_ll_stmt *l = nest->loops[chosen];
  if (l->u.loop.n_lower || l->u.loop.n_upper > 1 || extent(l) < *factor ||
      (l->u.loop.n_upper && l->u.loop.upper[0].div != 1))
    return -1;
  for (int k = 0; k < nest->depth; k++)
    if (cn_sched_bounds_mention(nest->loops[k], l->u.loop.sym)) return -1;
  return chosen;
}

/* ---- The rewrite ---- */

/* ceil((e + shift) / div) as a loop bound. */
static cn_ll_bound bound_of(const cn_index *e, int64_t shift, int64_t div) {
  return (cn_ll_bound){cn_index_affine(e->n_terms, e->syms, e->coeffs, e->offset + shift), div};
}

/* The jammed loop and what remains of L's values when L has an upper bound e (a prefix of its
 * box, `k < q + 1`): L_jam runs the groups below e (U*L_jam + from + U - 1 < e, that is L_jam <
 * ceil((e - from - U + 1) / U)); the group e cuts, if any, runs after it as a loop over its first
 * values, L in [U*L_jam + from, e) for the one L_jam in [floor((e - from) / U), ceil((e - from) /
 * U)) below the box's `whole` groups; the box's rest (when e passes from + U*whole) stays the
 * remainder loop of a box. Every value of L below e runs once, in ascending order. Bounds replace
 * the box (loops.h), so each new loop lists its box's sides among them where e could pass them. */
static cn_ll_stmt *jam_prefix(cn_ctx *ctx, const cn_ll_stmt *l, cn_symbol jam, int64_t u_count,
                              int64_t whole, cn_ll_stmt *jammed) {
  const cn_index *e = &l->u.loop.upper[0].expr;
  const int64_t from = l->u.loop.from;
  const cn_ll_bound zero = {cn_index_fixed(0), 1}, groups = {cn_index_fixed(whole), 1};
  const cn_ll_bound full[2] = {bound_of(e, 1 - from - u_count, u_count), groups};
  const cn_ll_bound cut[2] = {bound_of(e, -from, u_count), groups};
  const cn_ll_bound low[2] = {full[0], zero};
  const cn_ll_bound start = {cn_index_affine(1, &jam, &u_count, from), 1}; /* >= from */
  cn_ll_stmt *first = cn_lb_loop(ctx, l->u.loop.sym, from, l->u.loop.to, l->u.loop.body);
  first = cn_lb_bounds(ctx, first, 1, &start, l->u.loop.n_upper, l->u.loop.upper);
  cn_ll_stmt *tail = cn_lb_loop(ctx, jam, 0, whole, cn_lb_marks(first, l->u.loop.marks));
  return cn_lb_seq(ctx, 2, cn_lb_bounds(ctx, jammed, 0, NULL, 2, full),
                   cn_lb_bounds(ctx, tail, 2, low, 2, cut));
}

static cn_status jam_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  (void)user;
  if (nest->lanes) return CN_OK; /* a sum in lanes keeps its body (loops.h) */
  int64_t u_count;
  int k = jam_choice(proc, nest, &u_count);
  if (k < 0) return CN_OK;
  const cn_ll_stmt *l = nest->loops[k];
  int64_t from = l->u.loop.from, to = l->u.loop.to, whole = extent(l) / u_count;
  char name[64];
  snprintf(name, sizeof name, "%s_jam", cn_symbol_name(ctx, l->u.loop.sym));
  cn_symbol jam = cn_symbol_create(ctx, name, 0);
  if (jam < 0) return CN_ERR_NOMEM;
  const cn_ll_stmt *inner = nest->loops[nest->depth - 1];
  cn_ll_stmt **copies = cn_alloc(ctx, sizeof *copies * (size_t)u_count);
  if (!copies) return CN_ERR_NOMEM;
  for (int64_t u = 0; u < u_count; u++) {
    const int64_t offset = from + u;
    cn_sched_subst s = {1, &l->u.loop.sym, &jam, &u_count, &offset};
    if (!(copies[u] = cn_sched_subst_body(ctx, proc, &s, inner->u.loop.body))) return CN_ERR_NOMEM;
  }
  cn_ll_stmt *body = cn_lb_seq_array(ctx, (int)u_count, copies);
  for (int q = nest->depth - 1; q > k; q--) body = cn_sched_loop_copy(ctx, nest->loops[q], body);
  cn_ll_stmt *jammed = cn_lb_marks(cn_lb_loop(ctx, jam, 0, whole, body), l->u.loop.marks);
  if (l->u.loop.n_upper && jammed) jammed = jam_prefix(ctx, l, jam, u_count, whole, jammed);
  if (from + whole * u_count < to) {
    cn_ll_stmt *rest = cn_lb_loop(ctx, l->u.loop.sym, from + whole * u_count, to, l->u.loop.body);
    rest = cn_lb_bounds(ctx, rest, 0, NULL, l->u.loop.n_upper, l->u.loop.upper);
    jammed = cn_lb_seq(ctx, 2, jammed, cn_lb_marks(rest, l->u.loop.marks));
  }
  if (!jammed) return CN_ERR_NOMEM;
  *nest->slots[k] = jammed;
  return CN_OK;
}

cn_status cn_sched_jam(cn_ctx *ctx, cn_ll_proc *proc) {
  return cn_sched_each_nest(ctx, proc, jam_nest, NULL);
}
