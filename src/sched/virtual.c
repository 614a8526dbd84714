/* Virtual nodes (issue 16, OCANNL's virtualization): a CN_MEM_VIRTUAL parameter whose producer
 * can be recomputed exactly at each of its reads is not materialized: its store's expression is
 * copied into every read, the producer's nest is deleted and the parameter leaves the procedure.
 *
 * Contract. Which nodes are virtual is decided above this stage: CN_MEM_VIRTUAL promises that the
 * node is written and read inside one routine only (never by the host, another routine, or as a
 * merge buffer), as CN_MEM_LOCAL does. The user sets it (cn_node_set_memory), and the tensor layer
 * sets it on the fresh nodes no handle leads to: the intermediates and constants of a derivative
 * formula (src/tensor/deriv.c) and the constants and temporaries of an optimizer update (optim.c).
 * This pass only decides whether inlining is exact, and a virtual node it keeps runs as
 * routine-local scratch (routine.c), which is exact by that promise. A node marked fusable (ir.h:
 * an unnamed value of a script, which every routine reading it computes first and the host cannot
 * name) is a candidate too; when it cannot go it stays materialized, as it was. The procedure's
 * body is read as a list of top-level statements (nested sequences flattened). A node v is inlined
 * when (1) exactly one top-level statement P writes it, and P is a plain store `v[s_0, .., s_r-1]
 * := e` under loops with no affine bounds, each s_a a distinct loop variable running over exactly
 * [0, dim_a), or 0 on an axis of size 1 (so every cell is written once, with no accumulation: e
 * does not read v), v has no padding and no merge buffer; (2) no statement before P reads v; (3) no
 * statement after P, up to each statement reading v, writes a buffer e reads, and a statement
 * reading v writes none either, except an in-place update `w[j] := f(.., v[..], ..)` of one input
 * w, one cell per point (j's axes distinct loop variables, or 0 on an axis of size 1), whose
 * inlined reads of w are all w[j] (each point reads its cell before writing it) — so e evaluated at
 * a read gives the value P stored; (4) at every read v[i_0, .., i_r-1], replacing each s_a by i_a
 * in e's indices keeps them affine in canonical form (no overflow, at most CN_MAX_AFFINE_TERMS
 * symbols); (5) the copy costs no more than the store it replaces: a read runs at most as often as
 * P (the product of the boxes of its loops is at most v's cell count) unless e is a constant or a
 * single read, and an expression read more than once is small (CN_SCHED_VIRTUAL_MAX_COPIED nodes in
 * all). The read becomes e substituted and rounded exactly as the store would round it: a constant
 * is stored into and loaded from a cell now; otherwise e is converted to v's precision by an `id`
 * op, through the widest precision of its kind (double, int64, uint64) when e already has v's
 * precision, since the interpreter computes narrow integers wider than they are stored (and
 * single, rounded after each op, in doubles) and a conversion is where both backends round or wrap
 * (cn_value_convert, cn_conv_c). half, bfloat16 and fp8 round only on store, so a non-constant
 * producer of those precisions is kept; (6) no statement that receives a copy ends up with an
 * expression deeper than CN_SCHED_VIRTUAL_MAX_DEPTH. Candidates are taken once each, the last
 * producer first, against an index of the statements that write and read each param (a copy moves
 * the reads of the producer's inputs into its readers, whose lists follow): a chain inlines whole
 * in one pass and each candidate costs the statements that touch it, so the pass stays near-linear
 * in the routine (a 1600-layer script: 1.1 s with it, 1.0 s without); a comment at the top of the
 * body names the nodes inlined and, for each kept virtual node, why, and the procedure is rebuilt
 * with its remaining params renumbered (still ordered by node id). Fails only on allocation failure
 * (CN_ERR_NOMEM), the procedure then unchanged. */
#include "sched/sched.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Reads and writes ---- */

static int64_t expr_size(const cn_ll_expr *e) {
  if (e->kind != CN_LE_OP) return 1;
  int64_t n = 1;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++) n += expr_size(e->u.op.args[a]);
  return n;
}

static int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* The reads of param in e: their count into *n, and *most the largest `trips` seen (how many
 * times, at most, the enclosing loops run the expression). */
static void expr_reads(const cn_ll_expr *e, int param, int64_t trips, int64_t *n, int64_t *most) {
  if (e->kind == CN_LE_GET && e->u.get.param == param) {
    (*n)++;
    if (trips > *most) *most = trips;
  }
  if (e->kind != CN_LE_OP) return;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    expr_reads(e->u.op.args[a], param, trips, n, most);
}

static void stmt_reads(const cn_ll_stmt *s, int param, int64_t trips, int64_t *n, int64_t *most) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) stmt_reads(s->u.seq.items[i], param, trips, n, most);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: {
    int64_t box = s->u.loop.to > s->u.loop.from ? s->u.loop.to - s->u.loop.from : 0;
    stmt_reads(s->u.loop.body, param, mul_sat(trips, box), n, most);
    return;
  }
  case CN_LL_IF: stmt_reads(s->u.guard.body, param, trips, n, most); return;
  case CN_LL_SET: expr_reads(s->u.set.value, param, trips, n, most); return;
  case CN_LL_SET_VEC: expr_reads(s->u.vec.arg, param, trips, n, most); return;
  case CN_LL_GEMM: stmt_reads(s->u.gemm.nest, param, trips, n, most); return;
  case CN_LL_LET: stmt_reads(s->u.let.body, param, trips, n, most); return;
  }
}

/* ---- The producer ---- */

typedef struct {
  const cn_ll_expr *value; /* e */
  int rank;
  cn_symbol vars[CN_MAX_RANK]; /* the loop variable writing each axis */
} producer;

/* Whether s is the plain store of contract (1) into param, filling *out. */
static bool plain_store(const cn_ll_proc *proc, const cn_ll_stmt *s, int param, producer *out) {
  const cn_node *node = proc->params[param].node;
  const cn_ll_stmt *loops[CN_MAX_RANK];
  int depth = 0;
  for (;;) {
    if (s->kind == CN_LL_SEQ && s->u.seq.count == 1) {
      s = s->u.seq.items[0];
      continue;
    }
    if (s->kind != CN_LL_FOR) break;
    if (depth == node->rank || s->u.loop.n_lower || s->u.loop.n_upper || s->u.loop.from != 0)
      return false;
    loops[depth++] = s;
    s = s->u.loop.body;
  }
  if (s->kind != CN_LL_SET || s->u.set.param != param) return false;
  int fixed = 0;
  for (int a = 0; a < node->rank; a++)
    fixed += cn_sched_single_cell_axis(node, a, &s->u.set.idx[a]);
  if (depth != node->rank - fixed) return false;
  bool used[CN_MAX_RANK] = {false};
  for (int a = 0; a < node->rank; a++) {
    const cn_index *ix = &s->u.set.idx[a];
    if (cn_sched_single_cell_axis(node, a, ix)) {
      out->vars[a] = -1; /* no loop: a read's index there can only be 0 */
      continue;
    }
    if (ix->kind != CN_IDX_ITER || node->pad[a][0] || node->pad[a][1]) return false;
    int k = 0;
    while (k < depth && loops[k]->u.loop.sym != ix->syms[0]) k++;
    if (k == depth || used[k] || loops[k]->u.loop.to != node->dims[a]) return false;
    used[k] = true;
    out->vars[a] = ix->syms[0];
  }
  int64_t n = 0, most = 0;
  expr_reads(s->u.set.value, param, 1, &n, &most);
  if (n) return false; /* an accumulation */
  out->value = s->u.set.value;
  out->rank = node->rank;
  return true;
}

/* ---- Substitution ---- */

/* ix with every producer variable vars[a] replaced by to[a], in canonical form; false when the
 * result overflows or names more than CN_MAX_AFFINE_TERMS symbols. */
static bool subst_index(const cn_index *ix, const producer *p, const cn_index *to, cn_index *out) {
  if (ix->kind == CN_IDX_FIXED) {
    *out = *ix;
    return true;
  }
  enum { MAX = CN_MAX_AFFINE_TERMS * CN_MAX_AFFINE_TERMS };
  cn_symbol syms[MAX];
  int64_t coeffs[MAX], offset = ix->offset;
  int n = 0;
  for (int t = 0; t < ix->n_terms; t++) {
    int a = 0;
    while (a < p->rank && p->vars[a] != ix->syms[t]) a++;
    if (a == p->rank) {
      syms[n] = ix->syms[t];
      coeffs[n++] = ix->coeffs[t];
      continue;
    }
    const cn_index *r = &to[a];
    int64_t part;
    if (__builtin_mul_overflow(ix->coeffs[t], r->offset, &part) ||
        __builtin_add_overflow(offset, part, &offset))
      return false;
    for (int u = 0; r->kind != CN_IDX_FIXED && u < r->n_terms; u++) {
      syms[n] = r->syms[u];
      if (__builtin_mul_overflow(ix->coeffs[t], r->coeffs[u], &coeffs[n++])) return false;
    }
  }
  *out = cn_index_affine(n, syms, coeffs, offset);
  return !(out->kind == CN_IDX_AFFINE && out->n_terms < 0);
}

typedef struct {
  cn_ctx *ctx;
  const cn_ll_proc *proc;
  int victim; /* the param whose reads are replaced */
  const producer *prod;
  bool exact; /* cleared when a substitution leaves the canonical form */
} inliner;

/* A copy of e (the producer's expression) with its variables replaced by `to`. */
static cn_ll_expr *subst_expr(inliner *in, const cn_ll_expr *e, const cn_index *to) {
  cn_ctx *ctx = in->ctx;
  switch (e->kind) {
  case CN_LE_GET: {
    int rank = in->proc->params[e->u.get.param].node->rank;
    cn_index idx[CN_MAX_RANK];
    for (int a = 0; a < rank; a++)
      if (!subst_index(&e->u.get.idx[a], in->prod, to, &idx[a])) in->exact = false;
    return cn_lb_get(ctx, e->u.get.param, e->prec, cn_lb_index_array(ctx, rank, idx));
  }
  case CN_LE_CONST: return cn_lb_const(ctx, e->prec, e->u.constant);
  case CN_LE_INDEX: {
    cn_index ix;
    if (!subst_index(&e->u.index, in->prod, to, &ix)) in->exact = false;
    return cn_lb_index(ctx, ix);
  }
  case CN_LE_OP: {
    cn_ll_expr *args[3] = {NULL, NULL, NULL};
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (!(args[a] = subst_expr(in, e->u.op.args[a], to))) return NULL;
    return cn_lb_op(ctx, e->u.op.op, e->prec, args[0], args[1], args[2]);
  }
  }
  return NULL;
}

/* The precision a value of prec's kind is computed in by the interpreter, to which conversion
 * from prec is exact. */
static cn_prec widest(cn_prec prec) {
  switch (cn_prec_kind_of(prec)) {
  case CN_PKIND_FLOAT: return CN_PREC_DOUBLE;
  case CN_PKIND_INT: return CN_PREC_INT64;
  case CN_PKIND_UINT: return CN_PREC_UINT64;
  case CN_PKIND_BITS: return prec;
  }
  return prec;
}

/* Whether a non-constant value can be rounded to prec as its store would: every precision but
 * the floats stored narrower than they compute (half, bfloat16, fp8). */
static bool rounds_by_conversion(cn_prec prec) {
  return cn_prec_kind_of(prec) != CN_PKIND_FLOAT || cn_prec_stores_as_computed(prec);
}

/* e as the value a read of a cell of prec would give after `cell := e`. */
static cn_ll_expr *as_stored(cn_ctx *ctx, cn_prec prec, cn_ll_expr *e) {
  if (!e) return NULL;
  if (e->kind == CN_LE_CONST) return cn_sched_const_as_stored(ctx, prec, e);
  if (e->prec != prec) return cn_lb_op(ctx, CN_OP_ID, prec, e, NULL, NULL);
  cn_prec wide = widest(prec);
  if (wide == prec) return e;
  return cn_lb_op(ctx, CN_OP_ID, prec, cn_lb_op(ctx, CN_OP_ID, wide, e, NULL, NULL), NULL, NULL);
}

/* A copy of e with every read of the victim replaced by the producer's value at the read. */
static cn_ll_expr *inline_expr(inliner *in, cn_ll_expr *e) {
  if (e->kind == CN_LE_GET && e->u.get.param == in->victim)
    return as_stored(in->ctx, in->proc->params[in->victim].node->prec,
                     subst_expr(in, in->prod->value, e->u.get.idx));
  if (e->kind != CN_LE_OP) return e;
  cn_ll_expr *args[3] = {NULL, NULL, NULL};
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!(args[a] = inline_expr(in, e->u.op.args[a]))) return NULL;
  return cn_lb_op(in->ctx, e->u.op.op, e->prec, args[0], args[1], args[2]);
}

/* A copy of e whose reads name their params by renumber[old] (constants and indices shared). */
static cn_ll_expr *renumber_expr(cn_ctx *ctx, const cn_ll_proc *proc, const int *renumber,
                                 const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: {
    int rank = proc->params[e->u.get.param].node->rank;
    return cn_lb_get(ctx, renumber[e->u.get.param], e->prec,
                     cn_lb_index_array(ctx, rank, e->u.get.idx));
  }
  case CN_LE_CONST:
  case CN_LE_INDEX: return (cn_ll_expr *)e;
  case CN_LE_OP: {
    cn_ll_expr *args[3] = {NULL, NULL, NULL};
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (!(args[a] = renumber_expr(ctx, proc, renumber, e->u.op.args[a]))) return NULL;
    return cn_lb_op(ctx, e->u.op.op, e->prec, args[0], args[1], args[2]);
  }
  }
  return NULL;
}

typedef struct {
  inliner *in;         /* inlining, or NULL */
  const int *renumber; /* renumbering, or NULL */
} rewrite;

static cn_ll_expr *rewrite_expr(cn_ctx *ctx, const cn_ll_proc *proc, const rewrite *rw,
                                cn_ll_expr *e) {
  return rw->in ? inline_expr(rw->in, e) : renumber_expr(ctx, proc, rw->renumber, e);
}

static int new_param(const rewrite *rw, int param) {
  return rw->renumber ? rw->renumber[param] : param;
}

/* A copy of s (comments shared) whose expressions go through inline_expr, or whose params are
 * renumbered. */
static cn_ll_stmt *rewrite_stmt(cn_ctx *ctx, const cn_ll_proc *proc, const rewrite *rw,
                                cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ: {
    cn_ll_stmt **items = cn_alloc(ctx, sizeof *items * (size_t)(s->u.seq.count + 1));
    if (!items) return NULL;
    for (int i = 0; i < s->u.seq.count; i++)
      if (!(items[i] = rewrite_stmt(ctx, proc, rw, s->u.seq.items[i]))) return NULL;
    return cn_lb_seq_array(ctx, s->u.seq.count, items);
  }
  case CN_LL_COMMENT: return s;
  case CN_LL_FOR: return cn_sched_loop_copy(ctx, s, rewrite_stmt(ctx, proc, rw, s->u.loop.body));
  case CN_LL_IF:
    return cn_lb_guard(ctx, s->u.guard.n_conds, s->u.guard.conds,
                       rewrite_stmt(ctx, proc, rw, s->u.guard.body));
  case CN_LL_SET: {
    int rank = proc->params[s->u.set.param].node->rank;
    return cn_lb_set(ctx, new_param(rw, s->u.set.param), cn_lb_index_array(ctx, rank, s->u.set.idx),
                     rewrite_expr(ctx, proc, rw, s->u.set.value));
  }
  case CN_LL_SET_VEC: {
    int rank = proc->params[s->u.vec.param].node->rank;
    return cn_lb_set_vec(ctx, s->u.vec.op, new_param(rw, s->u.vec.param),
                         cn_lb_index_array(ctx, rank, s->u.vec.idx), s->u.vec.length,
                         rewrite_expr(ctx, proc, rw, s->u.vec.arg));
  }
  case CN_LL_LET: {
    /* its own read is never inlined (refusal: a gathered index's cell stays stored) */
    int rank = proc->params[s->u.let.param].node->rank;
    return cn_lb_let(ctx, s->u.let.sym, new_param(rw, s->u.let.param),
                     cn_lb_index_array(ctx, rank, s->u.let.idx), s->u.let.bound,
                     rewrite_stmt(ctx, proc, rw, s->u.let.body));
  }
  case CN_LL_GEMM: break; /* made by a later pass (sched.c's order) */
  }
  CN_ASSERT(!"a GEMM plan before the virtual pass");
  return NULL;
}

/* ---- A read in the statement that updates an input ---- */

/* Whether every read of param w in e (the producer's expression), its variables replaced by `to`,
 * is the cell at `cell`. */
static bool reads_only(const cn_ll_proc *proc, const cn_ll_expr *e, int w, const producer *p,
                       const cn_index *to, const cn_index *cell) {
  if (e->kind == CN_LE_GET && e->u.get.param == w) {
    for (int a = 0; a < proc->params[w].node->rank; a++) {
      cn_index ix;
      if (!subst_index(&e->u.get.idx[a], p, to, &ix) || !cn_index_equal(&ix, &cell[a]))
        return false;
    }
  }
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!reads_only(proc, e->u.op.args[a], w, p, to, cell)) return false;
  return true;
}

/* Whether every read of the victim in e reads, through the producer, param w only at `cell`. */
static bool victim_reads_only(const cn_ll_proc *proc, const cn_ll_expr *e, int victim,
                              const producer *p, int w, const cn_index *cell) {
  if (e->kind == CN_LE_GET && e->u.get.param == victim)
    return reads_only(proc, p->value, w, p, e->u.get.idx, cell);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!victim_reads_only(proc, e->u.op.args[a], victim, p, w, cell)) return false;
  return true;
}

/* Whether q, which reads the victim and writes one of the producer's inputs, may still read it
 * inlined: q is one store `w[j_0, .., j_r-1] := f` under exactly r loops (perfect, no guard), each
 * j_a a distinct loop variable, so each point writes its own cell; and every inlined read of w
 * is that cell. A point then reads the cell before it writes it, and no other point writes it. */
static bool updates_in_place(const cn_ll_proc *proc, const cn_ll_stmt *q, int victim,
                             const producer *p) {
  cn_symbol vars[CN_MAX_RANK];
  int depth = 0;
  for (;;) {
    if (q->kind == CN_LL_SEQ && q->u.seq.count == 1) {
      q = q->u.seq.items[0];
      continue;
    }
    if (q->kind != CN_LL_FOR) break;
    if (depth == CN_MAX_RANK) return false;
    vars[depth++] = q->u.loop.sym;
    q = q->u.loop.body;
  }
  if (q->kind != CN_LL_SET) return false;
  int w = q->u.set.param, rank = proc->params[w].node->rank, fixed = 0;
  for (int a = 0; a < rank; a++)
    fixed += cn_sched_single_cell_axis(proc->params[w].node, a, &q->u.set.idx[a]);
  if (depth != rank - fixed) return false;
  bool used[CN_MAX_RANK] = {false};
  for (int a = 0; a < rank; a++) {
    const cn_index *ix = &q->u.set.idx[a];
    if (cn_sched_single_cell_axis(proc->params[w].node, a, ix)) continue;
    int k = 0;
    while (k < depth && (ix->kind != CN_IDX_ITER || vars[k] != ix->syms[0])) k++;
    if (k == depth || used[k]) return false;
    used[k] = true;
  }
  return victim_reads_only(proc, q->u.set.value, victim, p, w, q->u.set.idx);
}

/* ---- The pass ---- */

/* ---- The index: who writes and who reads each param ---- */

/* Positions of top-level statements in the list; writers ascending, readers in no order (inlining
 * appends the statements a copy moves reads into). */
typedef struct {
  int *at;
  int n, cap;
} positions;

typedef struct {
  cn_ctx *ctx;
  cn_sched_stmts *list;
  bool *dead;            /* per statement: a producer that was inlined (deleted at the end) */
  positions *writers;    /* per param */
  positions *readers;    /* per param */
  int *stamp, stamp_now; /* per param: dedupes the params of one statement or one expression */
  bool *let_read;        /* per param: a CN_LL_LET reads it (a gathered index, not an expression) */
} index_t;

static bool add_position(index_t *ix, positions *p, int at) {
  if (p->n && p->at[p->n - 1] == at) return true;
  if (!cn_arena_grow(ix->ctx, (void **)&p->at, &p->cap, p->n + 1, sizeof *p->at)) return false;
  p->at[p->n++] = at;
  return true;
}

static bool index_expr(index_t *ix, const cn_ll_expr *e, int at) {
  if (e->kind == CN_LE_GET) return add_position(ix, &ix->readers[e->u.get.param], at);
  if (e->kind != CN_LE_OP) return true;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    if (!index_expr(ix, e->u.op.args[a], at)) return false;
  return true;
}

static bool index_stmt(index_t *ix, const cn_ll_stmt *s, int at) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!index_stmt(ix, s->u.seq.items[i], at)) return false;
    return true;
  case CN_LL_COMMENT: return true;
  case CN_LL_FOR: return index_stmt(ix, s->u.loop.body, at);
  case CN_LL_IF: return index_stmt(ix, s->u.guard.body, at);
  case CN_LL_SET:
    return add_position(ix, &ix->writers[s->u.set.param], at) && index_expr(ix, s->u.set.value, at);
  case CN_LL_SET_VEC:
    return add_position(ix, &ix->writers[s->u.vec.param], at) && index_expr(ix, s->u.vec.arg, at);
  case CN_LL_GEMM: return index_stmt(ix, s->u.gemm.nest, at);
  case CN_LL_LET:
    ix->let_read[s->u.let.param] = true;
    return add_position(ix, &ix->readers[s->u.let.param], at) && index_stmt(ix, s->u.let.body, at);
  }
  return true;
}

/* The first live statement after `after` that writes param q, or INT32_MAX. */
static int first_writer_after(const index_t *ix, int q, int after) {
  const positions *w = &ix->writers[q];
  int lo = 0, hi = w->n; /* the first position > after: writers are ascending */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (w->at[mid] <= after)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (; lo < w->n; lo++)
    if (!ix->dead[w->at[lo]]) return w->at[lo];
  return INT32_MAX;
}

static void mark_inputs(index_t *ix, const cn_ll_expr *e, int *inputs, int *n_inputs) {
  if (e->kind == CN_LE_GET && ix->stamp[e->u.get.param] != ix->stamp_now) {
    ix->stamp[e->u.get.param] = ix->stamp_now;
    inputs[(*n_inputs)++] = e->u.get.param;
  }
  if (e->kind != CN_LE_OP) return;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
    mark_inputs(ix, e->u.op.args[a], inputs, n_inputs);
}

static int expr_depth(const cn_ll_expr *e) {
  if (e->kind != CN_LE_OP) return 1;
  int most = 0;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++) {
    int d = expr_depth(e->u.op.args[a]);
    if (d > most) most = d;
  }
  return most + 1;
}

static int stmt_depth(const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ: {
    int most = 0;
    for (int i = 0; i < s->u.seq.count; i++) {
      int d = stmt_depth(s->u.seq.items[i]);
      if (d > most) most = d;
    }
    return most;
  }
  case CN_LL_FOR: return stmt_depth(s->u.loop.body);
  case CN_LL_IF: return stmt_depth(s->u.guard.body);
  case CN_LL_SET: return expr_depth(s->u.set.value);
  case CN_LL_SET_VEC: return expr_depth(s->u.vec.arg);
  case CN_LL_GEMM: return stmt_depth(s->u.gemm.nest);
  case CN_LL_LET: return stmt_depth(s->u.let.body);
  case CN_LL_COMMENT: return 0;
  }
  return 0;
}

/* ---- One candidate ---- */

/* The live statements that read param, deduplicated, into out (arena); their count. */
static int live_readers(index_t *ix, int param, int *out) {
  ix->stamp_now++;
  int n = 0;
  const positions *r = &ix->readers[param];
  for (int k = 0; k < r->n; k++) {
    int at = r->at[k];
    if (ix->dead[at] || ix->stamp[at] == ix->stamp_now) continue;
    ix->stamp[at] = ix->stamp_now;
    out[n++] = at;
  }
  return n;
}

/* Why the candidate param cannot go (NULL: it can), per contract (1)-(5): its producer in *at and
 * *prod, its live readers in readers[0..*n_readers). */
static const char *refusal(const cn_ll_proc *proc, index_t *ix, int param, int *at, producer *prod,
                           int *readers, int *n_readers, int *inputs) {
  const cn_node *node = proc->params[param].node;
  /* params are ordered by node, a value before its merge buffer (loops.h) */
  if (param + 1 < proc->n_params && proc->params[param + 1].node == node &&
      proc->params[param + 1].merge)
    return "it has a merge buffer";
  if (ix->let_read[param]) return "a gathered index reads its cells";
  const positions *w = &ix->writers[param];
  *at = -1;
  for (int k = 0; k < w->n; k++) {
    if (ix->dead[w->at[k]]) continue;
    if (*at >= 0) return "more than one statement writes it";
    *at = w->at[k];
  }
  if (*at < 0) return "nothing writes it";
  if (!plain_store(proc, ix->list->items[*at], param, prod))
    return "its producer is not one plain store per cell";
  if (!rounds_by_conversion(node->prec) && prod->value->kind != CN_LE_CONST)
    return "its precision rounds only on store";
  *n_readers = live_readers(ix, param, readers);
  for (int k = 0; k < *n_readers; k++)
    if (readers[k] < *at) return "it is read before it is written";
  /* The inputs' first writer after the producer: a read after it would see another value. */
  int n_inputs = 0, first_write = INT32_MAX;
  ix->stamp_now++;
  mark_inputs(ix, prod->value, inputs, &n_inputs);
  for (int k = 0; k < n_inputs; k++) {
    int f = first_writer_after(ix, inputs[k], *at);
    if (f < first_write) first_write = f;
  }
  int64_t copies = 0, most = 0;
  for (int k = 0; k < *n_readers; k++) {
    const cn_ll_stmt *r = ix->list->items[readers[k]];
    if (readers[k] > first_write ||
        (readers[k] == first_write && !updates_in_place(proc, r, param, prod)))
      return "its inputs change before a read";
    stmt_reads(r, param, 1, &copies, &most);
  }
  int64_t size = expr_size(prod->value);
  /* a constant or a copy costs what the read it replaces costs, however often it runs */
  if (size > 1 && most > cn_node_numel(node)) return "a read runs more often than its producer";
  if (copies > 1 && mul_sat(size, copies) > CN_SCHED_VIRTUAL_MAX_COPIED)
    return "its expression is too large to copy into every read";
  return NULL;
}

/* Inlines the victim into its readers and kills its producer, moving the readers into the reader
 * lists of the producer's inputs. Leaves everything as it was (and *why set) when a substitution
 * leaves the canonical form or a copy would nest deeper than CN_SCHED_VIRTUAL_MAX_DEPTH. */
static cn_status inline_victim(const cn_ll_proc *proc, index_t *ix, int victim, int at,
                               const producer *prod, const int *readers, int n_readers, int *inputs,
                               const char **why) {
  cn_ctx *ctx = ix->ctx;
  inliner in = {ctx, proc, victim, prod, true};
  rewrite rw = {&in, NULL};
  cn_ll_stmt **copies = cn_alloc(ctx, sizeof *copies * (size_t)(n_readers + 1));
  if (!copies) return ctx->status;
  for (int k = 0; k < n_readers; k++) {
    if (!(copies[k] = rewrite_stmt(ctx, proc, &rw, ix->list->items[readers[k]])))
      return ctx->status;
    if (stmt_depth(copies[k]) > CN_SCHED_VIRTUAL_MAX_DEPTH) {
      *why = "its copies would nest too deeply";
      return CN_OK;
    }
  }
  if (!in.exact) {
    *why = "a read's index cannot take the producer's place";
    return CN_OK;
  }
  int n_inputs = 0;
  ix->stamp_now++;
  mark_inputs(ix, prod->value, inputs, &n_inputs);
  for (int k = 0; k < n_readers; k++) {
    ix->list->items[readers[k]] = copies[k];
    for (int q = 0; q < n_inputs; q++)
      if (!add_position(ix, &ix->readers[inputs[q]], readers[k])) return ctx->status;
  }
  ix->dead[at] = true;
  *why = NULL;
  return CN_OK;
}

/* Appends "name (#id)" to a comment under construction. */
static void describe_into(cn_sbuf *sb, const cn_node *node, bool *first) {
  cn_sbuf_puts(sb, *first ? " " : ", ");
  cn_sbuf_puts(sb, cn_node_describe(node));
  *first = false;
}

/* A node the pass may inline: CN_MEM_VIRTUAL (kept as scratch when it cannot go), or fusable (an
 * unnamed value of a script, ir.h: kept materialized when it cannot go, so its buffer holds what
 * it always held). */
static bool candidate(const cn_node *node, bool keep_fusable) {
  return node->mode == CN_MEM_VIRTUAL || (node->fusable && !keep_fusable);
}

/* A candidate with the position of its last writer statement. */
typedef struct {
  int producer, param;
} candidate_at;

/* The last producer first, then by param (a total order: the same result on every libc). */
static int by_last_producer(const void *a, const void *b) {
  const candidate_at *x = a, *y = b;
  if (x->producer != y->producer) return (y->producer > x->producer) - (y->producer < x->producer);
  return (x->param > y->param) - (x->param < y->param);
}

cn_status cn_sched_virtual(cn_ctx *ctx, cn_ll_proc *proc, bool keep_fusable) {
  int n = proc->n_params;
  bool any = false;
  for (int k = 0; k < n; k++) any = any || candidate(proc->params[k].node, keep_fusable);
  if (!any) return CN_OK;
  cn_sched_stmts list = {NULL, 0, 0};
  bool *gone = cn_alloc(ctx, sizeof *gone * (size_t)n);
  const char **why = cn_alloc(ctx, sizeof *why * (size_t)n);
  int *renumber = cn_alloc(ctx, sizeof *renumber * (size_t)n);
  cn_ll_param *params = cn_alloc(ctx, sizeof *params * (size_t)n);
  cn_status st = gone && why && renumber && params ? CN_OK : ctx->status;
  if (st == CN_OK) {
    memset(gone, 0, sizeof *gone * (size_t)n);
    memset(why, 0, sizeof *why * (size_t)n);
  }
  if (st == CN_OK && !cn_sched_stmts_flatten(ctx, proc->body, &list)) st = CN_ERR_NOMEM;
  index_t ix = {ctx, &list, NULL, NULL, NULL, NULL, 0, NULL};
  candidate_at *order = NULL;
  int *readers = NULL, *inputs = NULL, n_order = 0;
  if (st == CN_OK) {
    size_t stmts = (size_t)(list.n + 1), ps = (size_t)n;
    ix.dead = cn_alloc(ctx, sizeof *ix.dead * stmts);
    ix.writers = cn_alloc(ctx, sizeof *ix.writers * ps);
    ix.readers = cn_alloc(ctx, sizeof *ix.readers * ps);
    ix.stamp = cn_alloc(ctx, sizeof *ix.stamp * (ps > stmts ? ps : stmts));
    order = cn_alloc(ctx, sizeof *order * ps);
    readers = cn_alloc(ctx, sizeof *readers * stmts);
    inputs = cn_alloc(ctx, sizeof *inputs * ps);
    ix.let_read = cn_alloc(ctx, sizeof *ix.let_read * ps);
    st =
        ix.dead && ix.writers && ix.readers && ix.stamp && order && readers && inputs && ix.let_read
            ? CN_OK
            : ctx->status;
  }
  if (st == CN_OK) {
    memset(ix.dead, 0, sizeof *ix.dead * (size_t)(list.n + 1));
    memset(ix.writers, 0, sizeof *ix.writers * (size_t)n);
    memset(ix.readers, 0, sizeof *ix.readers * (size_t)n);
    memset(ix.let_read, 0, sizeof *ix.let_read * (size_t)n);
    memset(ix.stamp, 0, sizeof *ix.stamp * (size_t)(n > list.n + 1 ? n : list.n + 1));
    for (int i = 0; i < list.n && st == CN_OK; i++)
      if (!index_stmt(&ix, list.items[i], i)) st = ctx->status;
  }
  /* Candidates by producer, last first: a copy moves reads of earlier values into later
   * statements, which the readers lists follow, so a chain inlines whole in one pass, each
   * candidate costing the statements that write or read it. */
  for (int k = 0; st == CN_OK && k < n; k++) {
    const positions *w = &ix.writers[k];
    if (candidate(proc->params[k].node, keep_fusable) && !proc->params[k].merge)
      order[n_order++] = (candidate_at){w->n ? w->at[w->n - 1] : -1, k};
  }
  if (st == CN_OK) qsort(order, (size_t)n_order, sizeof *order, by_last_producer);
  for (int o = 0; o < n_order && st == CN_OK; o++) {
    int k = order[o].param, at, n_readers = 0;
    producer prod;
    why[k] = refusal(proc, &ix, k, &at, &prod, readers, &n_readers, inputs);
    if (why[k]) continue;
    st = inline_victim(proc, &ix, k, at, &prod, readers, n_readers, inputs, &why[k]);
    gone[k] = st == CN_OK && !why[k];
  }
  if (st == CN_OK) {
    int live = 0;
    for (int i = 0; i < list.n; i++)
      if (!ix.dead[i]) list.items[live++] = list.items[i];
    list.n = live;
  }
  cn_sbuf note = {0};
  bool first = true;
  for (int k = 0; st == CN_OK && k < n; k++) {
    if (!gone[k]) continue;
    if (first) cn_sbuf_puts(&note, "virtual, inlined:");
    describe_into(&note, proc->params[k].node, &first);
  }
  for (int k = 0; st == CN_OK && k < n; k++)
    if (!gone[k] && why[k] && proc->params[k].node->mode == CN_MEM_VIRTUAL)
      cn_sbuf_printf(&note, "%svirtual %s kept as local scratch: %s", note.len ? "\n" : "",
                     cn_node_describe(proc->params[k].node), why[k]);
  if (st != CN_OK || note.len == 0) {
    cn_sbuf_free(&note);
    return st;
  }
  const char *text = cn_sbuf_finish(ctx, &note);
  if (!text) return ctx->status;
  int kept = 0;
  for (int k = 0; k < n; k++) {
    renumber[k] = gone[k] ? -1 : kept;
    if (!gone[k]) params[kept++] = proc->params[k];
  }
  rewrite rw = {NULL, renumber};
  cn_ll_stmt **items = cn_alloc(ctx, sizeof *items * (size_t)(list.n + 1));
  if (!items) return ctx->status;
  items[0] = cn_lb_comment(ctx, text);
  for (int i = 0; i < list.n; i++)
    if (!(items[i + 1] = rewrite_stmt(ctx, proc, &rw, list.items[i]))) return ctx->status;
  cn_ll_stmt *body = cn_lb_seq_array(ctx, list.n + 1, items);
  cn_ll_proc *out =
      body ? cn_lb_proc(ctx, proc->name, body, kept, params, proc->n_free_syms, proc->free_syms)
           : NULL;
  if (!out) return ctx->status;
  *proc = *out;
  return CN_OK;
}
