/* Virtual nodes (issue 16, OCANNL's virtualization): a CN_MEM_VIRTUAL parameter whose producer
 * can be recomputed exactly at each of its reads is not materialized: its store's expression is
 * copied into every read, the producer's nest is deleted and the parameter leaves the procedure.
 *
 * Contract. Which nodes are virtual is decided above this stage: CN_MEM_VIRTUAL promises that the
 * node is written and read inside one routine only (never by the host, another routine, or as a
 * merge buffer), as CN_MEM_LOCAL does. The user sets it (cn_node_set_memory), and the tensor layer
 * sets it on the fresh nodes no handle leads to: the intermediates and constants of a derivative
 * formula (src/tensor/deriv.c) and the constants and temporaries of an SGD update (code.c). This
 * pass only decides whether inlining is exact, and a virtual node it keeps runs as routine-local
 * scratch (routine.c), which is exact by that promise. A node marked fusable (ir.h: an unnamed
 * value of a script, which every routine reading it computes first and the host cannot name) is a
 * candidate too; when it cannot go it stays materialized, as it was.
 * The procedure's body is read as a list of top-level statements (nested sequences flattened). A
 * node v is inlined when (1) exactly one top-level statement P writes it, and P is a plain store
 * `v[s_0, .., s_r-1] := e` under r loops with no affine bounds, each s_a a distinct loop variable
 * running over exactly [0, dim_a) (so every cell is written once, with no accumulation: e does
 * not read v), v has no padding and no merge buffer; (2) no statement before P reads v; (3) no
 * statement after P, up to each statement reading v, writes a buffer e reads, and a statement
 * reading v writes none either, except an in-place update `w[j] := f(.., v[..], ..)` of one input
 * w, one cell per point, whose inlined reads of w are all w[j] (each point reads its cell before
 * writing it) — so e evaluated at a read gives the value P stored; (4) at every read v[i_0, ..,
 * i_r-1], replacing each s_a by i_a in e's indices keeps them affine in canonical form (no
 * overflow, at most CN_MAX_AFFINE_TERMS symbols); (5) the copy costs no more than the store it
 * replaces: a read runs at most as often as P (the product of the boxes of its loops is at most v's
 * cell count) unless e is a constant or a single read, and an expression read more than once is
 * small (CN_SCHED_VIRTUAL_MAX_COPIED nodes in all). The read becomes e substituted and rounded
 * exactly as the store would round it: a constant is stored into and loaded from a cell now;
 * otherwise e is converted to v's precision by an `id` op, through the widest precision of its kind
 * (double, int64, uint64) when e already has v's precision, since the interpreter computes single
 * and narrow integers wider than they are stored and a conversion is where both backends round or
 * wrap (cn_value_convert, cn_conv_c). half, bfloat16 and fp8 round only on store, so a non-constant
 * producer of those precisions is kept. Nodes are considered in parameter order until none more can
 * go (a chain inlines whole); a comment at the top of the body names the nodes inlined and, for
 * each kept virtual node, why, and the procedure is rebuilt with its remaining params renumbered
 * (still ordered by node id). Fails only on allocation failure (CN_ERR_NOMEM), the procedure then
 * unchanged. */
#include "sched/sched.h"

#include <stdio.h>
#include <string.h>

/* The top-level statements of a body (sequences flattened), in order; arena arrays. */
typedef struct {
  cn_ll_stmt **items;
  int n, cap;
} stmt_list;

static cn_status push_stmt(cn_ctx *ctx, stmt_list *list, cn_ll_stmt *s) {
  if (!cn_arena_grow(ctx, (void **)&list->items, &list->cap, list->n + 1, sizeof *list->items))
    return CN_ERR_NOMEM;
  list->items[list->n++] = s;
  return CN_OK;
}

static cn_status flatten(cn_ctx *ctx, cn_ll_stmt *s, stmt_list *out) {
  if (s->kind != CN_LL_SEQ) return push_stmt(ctx, out, s);
  for (int i = 0; i < s->u.seq.count; i++) {
    cn_status st = flatten(ctx, s->u.seq.items[i], out);
    if (st != CN_OK) return st;
  }
  return CN_OK;
}

/* ---- Reads and writes ---- */

static int64_t expr_size(const cn_ll_expr *e) {
  if (e->kind != CN_LE_OP) return 1;
  int64_t n = 1;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++) n += expr_size(e->u.op.args[a]);
  return n;
}

/* Marks in `reads` the params e reads. */
static void expr_inputs(const cn_ll_expr *e, bool *reads) {
  if (e->kind == CN_LE_GET) reads[e->u.get.param] = true;
  if (e->kind != CN_LE_OP) return;
  for (int a = 0; a < cn_op_arity(e->u.op.op); a++) expr_inputs(e->u.op.args[a], reads);
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
  }
}

/* Whether s writes a param marked in `which`. */
static bool stmt_writes(const cn_ll_stmt *s, const bool *which) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (stmt_writes(s->u.seq.items[i], which)) return true;
    return false;
  case CN_LL_COMMENT: return false;
  case CN_LL_FOR: return stmt_writes(s->u.loop.body, which);
  case CN_LL_IF: return stmt_writes(s->u.guard.body, which);
  case CN_LL_SET: return which[s->u.set.param];
  case CN_LL_SET_VEC: return which[s->u.vec.param];
  }
  return false;
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
  if (s->kind != CN_LL_SET || s->u.set.param != param || depth != node->rank) return false;
  bool used[CN_MAX_RANK] = {false};
  for (int a = 0; a < node->rank; a++) {
    const cn_index *ix = &s->u.set.idx[a];
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
  if (e->kind == CN_LE_CONST) {
    unsigned char cell[sizeof(cn_value)];
    cn_value_store(prec, cn_value_convert(e->prec, prec, e->u.constant), cell);
    return cn_lb_const(ctx, prec, cn_value_load(prec, cell));
  }
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
  }
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
  int w = q->u.set.param, rank = proc->params[w].node->rank;
  if (depth != rank) return false;
  bool used[CN_MAX_RANK] = {false};
  for (int a = 0; a < rank; a++) {
    const cn_index *ix = &q->u.set.idx[a];
    int k = 0;
    while (k < depth && (ix->kind != CN_IDX_ITER || vars[k] != ix->syms[0])) k++;
    if (k == depth || used[k]) return false;
    used[k] = true;
  }
  return victim_reads_only(proc, q->u.set.value, victim, p, w, q->u.set.idx);
}

/* ---- The pass ---- */

/* Why a virtual param cannot go (NULL: it can), per contract (1)-(5). */
static const char *refusal(const cn_ll_proc *proc, const stmt_list *list, int param, int *at,
                           producer *prod, bool *inputs) {
  const cn_node *node = proc->params[param].node;
  for (int k = 0; k < proc->n_params; k++)
    if (proc->params[k].node == node && proc->params[k].merge) return "it has a merge buffer";
  bool *victim = inputs; /* borrowed: marks the victim alone while looking for its writers */
  memset(victim, 0, sizeof *victim * (size_t)proc->n_params);
  victim[param] = true;
  *at = -1;
  for (int i = 0; i < list->n; i++) {
    if (!stmt_writes(list->items[i], victim)) continue;
    if (*at >= 0) return "more than one statement writes it";
    *at = i;
  }
  if (*at < 0) return "nothing writes it";
  if (!plain_store(proc, list->items[*at], param, prod))
    return "its producer is not one plain store per cell";
  if (!rounds_by_conversion(node->prec) && prod->value->kind != CN_LE_CONST)
    return "its precision rounds only on store";
  int64_t n = 0, most = 0;
  for (int i = 0; i < *at; i++) stmt_reads(list->items[i], param, 1, &n, &most);
  if (n) return "it is read before it is written";
  memset(inputs, 0, sizeof *inputs * (size_t)proc->n_params);
  expr_inputs(prod->value, inputs);
  bool changed = false;
  int64_t copies = 0;
  for (int i = *at + 1; i < list->n; i++) {
    int64_t reads = 0;
    stmt_reads(list->items[i], param, 1, &reads, &most);
    bool writes = stmt_writes(list->items[i], inputs);
    if (reads && (changed || (writes && !updates_in_place(proc, list->items[i], param, prod))))
      return "its inputs change before a read";
    changed = changed || writes;
    copies += reads;
  }
  int64_t size = expr_size(prod->value);
  /* a constant or a copy costs what the read it replaces costs, however often it runs */
  if (size > 1 && most > cn_node_numel(node)) return "a read runs more often than its producer";
  if (copies > 1 && mul_sat(size, copies) > CN_SCHED_VIRTUAL_MAX_COPIED)
    return "its expression is too large to copy into every read";
  return NULL;
}

/* Inlines the victim into every statement after its producer (list->items[at]), which goes. On
 * success *done tells whether every substitution stayed exact (else list is unchanged). */
static cn_status inline_victim(cn_ctx *ctx, const cn_ll_proc *proc, stmt_list *list, int victim,
                               int at, const producer *prod, bool *done) {
  inliner in = {ctx, proc, victim, prod, true};
  rewrite rw = {&in, NULL};
  stmt_list out = {NULL, 0, 0};
  for (int i = 0; i < list->n; i++) {
    if (i == at) continue;
    cn_ll_stmt *s = list->items[i];
    int64_t n = 0, most = 0;
    if (i > at) stmt_reads(s, victim, 1, &n, &most);
    if (n && !(s = rewrite_stmt(ctx, proc, &rw, s))) return ctx->status;
    cn_status st = push_stmt(ctx, &out, s);
    if (st != CN_OK) return st;
  }
  *done = in.exact;
  if (in.exact) *list = out;
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

cn_status cn_sched_virtual(cn_ctx *ctx, cn_ll_proc *proc, bool keep_fusable) {
  int n = proc->n_params;
  bool any = false;
  for (int k = 0; k < n; k++) any = any || candidate(proc->params[k].node, keep_fusable);
  if (!any) return CN_OK;
  stmt_list list = {NULL, 0, 0};
  bool *gone = cn_alloc(ctx, sizeof *gone * (size_t)n);
  bool *scratch = cn_alloc(ctx, sizeof *scratch * (size_t)n);
  const char **why = cn_alloc(ctx, sizeof *why * (size_t)n);
  int *renumber = cn_alloc(ctx, sizeof *renumber * (size_t)n);
  cn_ll_param *params = cn_alloc(ctx, sizeof *params * (size_t)n);
  cn_status st = gone && scratch && why && renumber && params ? CN_OK : ctx->status;
  if (st == CN_OK) {
    memset(gone, 0, sizeof *gone * (size_t)n);
    memset(why, 0, sizeof *why * (size_t)n);
  }
  if (st == CN_OK) st = flatten(ctx, proc->body, &list);
  /* one inlining can make another possible (a chain), so sweep until a sweep inlines nothing */
  for (bool progress = true; st == CN_OK && progress;) {
    progress = false;
    for (int k = 0; k < n && st == CN_OK; k++) {
      if (gone[k] || !candidate(proc->params[k].node, keep_fusable) || proc->params[k].merge)
        continue;
      int at;
      producer prod;
      why[k] = refusal(proc, &list, k, &at, &prod, scratch);
      if (why[k]) continue;
      bool done = false;
      st = inline_victim(ctx, proc, &list, k, at, &prod, &done);
      if (st == CN_OK && !done) why[k] = "a read's index cannot take the producer's place";
      gone[k] = done;
      progress = progress || done;
    }
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
