/* Simplification of a loop-IR procedure, in place (ocannl-notes §2.8 "Simplify"): constant
 * folding, the algebraic identities x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 and x ** 1, guard
 * conditions decided by the symbols' ranges (loop variables over their loops' boxes, static
 * indices over their declared ranges: a condition that always holds is dropped, a guard with one
 * that never holds is removed with its body, a guard left without conditions becomes its body),
 * guard conditions turned into loop bounds (below), and the removal of statements that do
 * nothing (empty loops, empty guards, empty sequences).
 *
 * Loop bounds from guards (triangular and trapezoidal nests, Tile's valid index sets): a
 * condition lo <= a*v + r < hi whose innermost variable is v (the deepest loop among the symbols
 * it mentions; r is affine over outer loops and static indices) holds exactly for v in
 * [ceil((lo - r) / a), ceil((hi - r) / a)) when a > 0, and in
 * [ceil((r - hi + 1) / -a), ceil((r - lo + 1) / -a)) when a < 0. When the guard holding it is in
 * the *chain* of v's loop — the statements that are each the whole body of the loop or of the
 * previous one (loops and guards) — everything the loop runs is under the guard, so restricting v
 * to that interval skips only iterations that do nothing: the condition becomes a lower and an
 * upper bound of the loop and leaves the guard (a guard left without conditions becomes its
 * body). A condition mentioning no loop variable stays a guard. Each side of a bounded loop is
 * then settled against its box: a bound that never passes the box's edge is dropped, the box
 * shrinks to what the bounds guarantee, and the box's edge joins the bounds unless one of them
 * provably stays inside it, which keeps loops.h's invariant (the box contains what runs). This
 * runs here rather than in the lowering because it needs the nest's final shape (which
 * conditions the range decisions left, which guards are a loop's whole body) and the same ranges
 * those decisions use, and because it then serves every producer of guards; the lowering keeps
 * stating the valid set as a box plus guards, which its LHS analyses read as an
 * over-approximation either way. Loops are settled innermost first, so an outer loop sees the
 * inner ones already bounded, and conditions are decided over the boxes, which contain what runs.
 *
 * Invariants: a rewrite never changes a result. Folding evaluates with the backends' own rules
 * (each argument converted by cn_op_operand_prec, cn_eval_op), so a folded constant is the value
 * the backends would compute; an identity drops the op only when the kept operand already has the
 * op's precision, because otherwise the op is where that operand gets converted; a constant is
 * compared to 0 or 1 after conversion to the precision the op reads it in. Sequences come out
 * flat and non-empty (but the procedure's body, which stays an empty sequence when nothing is
 * left). What is new (folded constants, spliced sequences, loop bounds) comes from the cn_lb_*
 * constructors, in the arena; statements are otherwise rewritten in place, since their parents
 * point to them. */
#include "loops/loops.h"

#include <stdlib.h>
#include <string.h>

static bool is_const(const cn_ll_expr *e) {
  return e->kind == CN_LE_CONST;
}

/* True if `e` is a constant equal to `target` once converted to the precision `op` reads its
 * argument `arg` in. */
static bool const_equals(const cn_ll_expr *op_expr, int arg, double target) {
  const cn_ll_expr *e = op_expr->u.op.args[arg];
  if (!is_const(e)) return false;
  cn_prec prec = cn_op_operand_prec(op_expr->u.op.op, op_expr->prec, arg, e->prec);
  if (cn_prec_kind_of(prec) == CN_PKIND_BITS) return false;
  cn_value v = e->prec == prec ? e->u.constant : cn_value_convert(e->prec, prec, e->u.constant);
  return cn_value_to_double(prec, v) == target;
}

/* The operand kept by an identity, or NULL if none applies. */
static cn_ll_expr *identity_operand(const cn_ll_expr *e) {
  cn_ll_expr *a = e->u.op.args[0], *b = e->u.op.args[1];
  cn_ll_expr *kept = NULL;
  switch (e->u.op.op) {
  case CN_OP_ADD:
    if (const_equals(e, 1, 0.0))
      kept = a;
    else if (const_equals(e, 0, 0.0))
      kept = b;
    break;
  case CN_OP_MUL:
    if (const_equals(e, 1, 1.0))
      kept = a;
    else if (const_equals(e, 0, 1.0))
      kept = b;
    break;
  case CN_OP_SUB: kept = const_equals(e, 1, 0.0) ? a : NULL; break;
  case CN_OP_DIV:
  case CN_OP_POW: kept = const_equals(e, 1, 1.0) ? a : NULL; break;
  default: break;
  }
  return kept && kept->prec == e->prec ? kept : NULL;
}

/* An op over constants as its value (a new constant), e itself when it is not one. */
static cn_ll_expr *fold_op(cn_ctx *ctx, cn_ll_expr *e) {
  cn_op op = e->u.op.op;
  const cn_op_info *info = &cn_op_table[op];
  if ((info->flags & CN_OPF_VEC) || !cn_op_supports(op, e->prec)) return e;
  cn_value args[3] = {{0}};
  for (int a = 0; a < info->arity; a++) {
    const cn_ll_expr *arg = e->u.op.args[a];
    if (!is_const(arg)) return e;
    cn_prec prec = cn_op_operand_prec(op, e->prec, a, arg->prec);
    cn_value v =
        arg->prec == prec ? arg->u.constant : cn_value_convert(arg->prec, prec, arg->u.constant);
    /* The condition of a CN_OPF_COND op reaches cn_eval_op as 1 or 0 of the op's precision. */
    if ((info->flags & CN_OPF_COND) && a == 0)
      v = cn_value_of_double(e->prec, cn_value_truth(prec, v) ? 1.0 : 0.0);
    args[a] = v;
  }
  return cn_lb_const(ctx, e->prec, cn_eval_op(op, e->prec, args));
}

/* Simplifies bottom-up and returns the expression to use in place of e; NULL when an allocation
 * fails. */
static cn_ll_expr *simplify_expr(cn_ctx *ctx, cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET:
  case CN_LE_CONST: return e;
  case CN_LE_INDEX: {
    if (e->u.index.kind != CN_IDX_FIXED) return e;
    /* An index value is its 32-bit wrap (the meaning of CN_INDEX_PREC). */
    cn_value wrapped = {.i = (int64_t)(uint32_t)e->u.index.offset};
    return cn_lb_const(ctx, e->prec, wrapped);
  }
  case CN_LE_OP: {
    int arity = cn_op_arity(e->u.op.op);
    for (int a = 0; a < arity; a++)
      if (!(e->u.op.args[a] = simplify_expr(ctx, e->u.op.args[a]))) return NULL;
    e = fold_op(ctx, e);
    if (!e || e->kind != CN_LE_OP || arity != 2) return e;
    cn_ll_expr *kept = identity_operand(e);
    return kept ? kept : e;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

/* The ranges symbols take where a statement runs: loop variables over their loop, free symbols
 * (static indices) over their declared range; a symbol without either is unknown. The tables are
 * at the positions of the procedure's symbol list (cn_ll_symbols), so their size is the
 * routine's. */
typedef struct {
  cn_ctx *ctx;
  cn_ll_symbols symbols;
  int64_t *lo, *hi; /* inclusive */
  bool *known;
  bool *inner; /* the variable of a loop in the chain being converted */
} simplifier;

static int slot_of(const simplifier *sim, cn_symbol sym) {
  int slot = cn_ll_symbol_slot(&sim->symbols, sym);
  CN_ASSERT(slot >= 0); /* the list holds every symbol the procedure names */
  return slot;
}

/* The range of an index where every symbol is known; false otherwise or on overflow. */
static bool index_range(const simplifier *sim, const cn_index *idx, int64_t *lo, int64_t *hi) {
  int64_t low = idx->offset, high = idx->offset;
  for (int t = 0; t < idx->n_terms; t++) {
    int sym = slot_of(sim, idx->syms[t]);
    if (!sim->known[sym]) return false;
    int64_t a, b;
    if (__builtin_mul_overflow(idx->coeffs[t], sim->lo[sym], &a) ||
        __builtin_mul_overflow(idx->coeffs[t], sim->hi[sym], &b) ||
        __builtin_add_overflow(low, a < b ? a : b, &low) ||
        __builtin_add_overflow(high, a < b ? b : a, &high))
      return false;
  }
  *lo = low;
  *hi = high;
  return true;
}

/* Drops the conditions of a guard that always hold; *never tells that one never holds. */
static void simplify_conds(const simplifier *sim, cn_ll_stmt *s, bool *never) {
  *never = false;
  int kept = 0;
  for (int c = 0; c < s->u.guard.n_conds; c++) {
    cn_ll_cond cond = s->u.guard.conds[c];
    int64_t lo, hi;
    if (cond.lo >= cond.hi) {
      *never = true;
      return;
    }
    if (index_range(sim, &cond.expr, &lo, &hi)) {
      if (lo >= cond.lo && hi < cond.hi) continue;
      if (hi < cond.lo || lo >= cond.hi) {
        *never = true;
        return;
      }
    }
    s->u.guard.conds[kept++] = cond;
  }
  s->u.guard.n_conds = kept;
}

/* ---- Guard conditions as loop bounds ---- */

/* ceil(expr / div) in lowest terms: with g the gcd of div and the coefficients,
 * ceil((g*q + o) / (g*d)) = ceil((q + ceil(o / g)) / d); a constant folds to div 1. */
static cn_ll_bound bound_reduced(cn_index expr, int64_t div) {
  uint64_t g = (uint64_t)div;
  for (int t = 0; t < expr.n_terms && g > 1; t++)
    g = cn_u64_gcd(g, cn_i64_magnitude(expr.coeffs[t]));
  if (g == 1) return (cn_ll_bound){expr, div};
  int64_t coeffs[CN_MAX_AFFINE_TERMS];
  for (int t = 0; t < expr.n_terms; t++) coeffs[t] = expr.coeffs[t] / (int64_t)g;
  int64_t offset = cn_ceil_div_i64(expr.offset, (int64_t)g);
  return (cn_ll_bound){cn_index_affine(expr.n_terms, expr.syms, coeffs, offset), div / (int64_t)g};
}

/* The bounds on v of lo <= a*v + r < hi (see the file comment); false on overflow. */
static bool cond_bounds(const cn_ll_cond *cond, cn_symbol v, cn_ll_bound *lower,
                        cn_ll_bound *upper) {
  const cn_index *e = &cond->expr;
  cn_symbol syms[CN_MAX_AFFINE_TERMS];
  int64_t coeffs[CN_MAX_AFFINE_TERMS], a = 0;
  int n = 0;
  for (int t = 0; t < e->n_terms; t++) {
    if (e->syms[t] == v) {
      a = e->coeffs[t];
      continue;
    }
    syms[n] = e->syms[t];
    coeffs[n++] = e->coeffs[t];
  }
  if (a == 0 || a == INT64_MIN) return false;
  int64_t lo_off, hi_off;
  if (a > 0) {
    /* [lo - r, hi - r) over a */
    for (int k = 0; k < n; k++) {
      if (coeffs[k] == INT64_MIN) return false;
      coeffs[k] = -coeffs[k];
    }
    if (__builtin_sub_overflow(cond->lo, e->offset, &lo_off) ||
        __builtin_sub_overflow(cond->hi, e->offset, &hi_off))
      return false;
  } else {
    /* [r - hi + 1, r - lo + 1) over -a */
    if (__builtin_sub_overflow(e->offset, cond->hi, &lo_off) ||
        __builtin_add_overflow(lo_off, 1, &lo_off) ||
        __builtin_sub_overflow(e->offset, cond->lo, &hi_off) ||
        __builtin_add_overflow(hi_off, 1, &hi_off))
      return false;
  }
  int64_t div = a > 0 ? a : -a;
  *lower = bound_reduced(cn_index_affine(n, syms, coeffs, lo_off), div);
  *upper = bound_reduced(cn_index_affine(n, syms, coeffs, hi_off), div);
  return lower->expr.n_terms >= 0 && upper->expr.n_terms >= 0;
}

/* True if v is the innermost variable of the condition: it mentions v and no loop of the chain
 * below v's loop. */
static bool innermost_is(const simplifier *sim, const cn_ll_cond *cond, cn_symbol v) {
  bool mentions = false;
  for (int t = 0; t < cond->expr.n_terms; t++) {
    if (sim->inner[slot_of(sim, cond->expr.syms[t])]) return false;
    mentions |= cond->expr.syms[t] == v;
  }
  return mentions;
}

/* Marks (or unmarks) the variables of the loops in the chain below `loop`. */
static void mark_chain(simplifier *sim, const cn_ll_stmt *loop, bool value) {
  for (const cn_ll_stmt *s = loop->u.loop.body; s->kind == CN_LL_FOR || s->kind == CN_LL_IF;) {
    if (s->kind == CN_LL_IF) {
      s = s->u.guard.body;
      continue;
    }
    sim->inner[slot_of(sim, s->u.loop.sym)] = value;
    s = s->u.loop.body;
  }
}

/* Conditions of the chain's guards whose innermost variable is the loop's. */
static int count_candidates(const simplifier *sim, const cn_ll_stmt *loop) {
  int count = 0;
  for (const cn_ll_stmt *s = loop->u.loop.body; s->kind == CN_LL_FOR || s->kind == CN_LL_IF;) {
    if (s->kind == CN_LL_FOR) {
      s = s->u.loop.body;
      continue;
    }
    for (int c = 0; c < s->u.guard.n_conds; c++)
      count += innermost_is(sim, &s->u.guard.conds[c], loop->u.loop.sym);
    s = s->u.guard.body;
  }
  return count;
}

/* Moves the candidates into lower[*n_lower...] and upper[*n_upper...], each a pair. */
static void convert_chain(const simplifier *sim, cn_ll_stmt *loop, cn_ll_bound *lower, int *n_lower,
                          cn_ll_bound *upper, int *n_upper) {
  cn_symbol v = loop->u.loop.sym;
  for (cn_ll_stmt *s = loop->u.loop.body; s->kind == CN_LL_FOR || s->kind == CN_LL_IF;) {
    if (s->kind == CN_LL_FOR) {
      s = s->u.loop.body;
      continue;
    }
    int kept = 0;
    for (int c = 0; c < s->u.guard.n_conds; c++) {
      cn_ll_cond cond = s->u.guard.conds[c];
      if (innermost_is(sim, &cond, v) &&
          cond_bounds(&cond, v, &lower[*n_lower], &upper[*n_upper])) {
        (*n_lower)++;
        (*n_upper)++;
        continue;
      }
      s->u.guard.conds[kept++] = cond;
    }
    s->u.guard.n_conds = kept;
    if (kept == 0)
      *s = *s->u.guard.body; /* the guard is its body now: look at it again */
    else
      s = s->u.guard.body;
  }
}

/* The range of ceil(expr / div) over the outer loops and static indices; false if unknown. */
static bool bound_range(const simplifier *sim, const cn_ll_bound *b, int64_t *lo, int64_t *hi) {
  if (!index_range(sim, &b->expr, lo, hi)) return false;
  *lo = cn_ceil_div_i64(*lo, b->div);
  *hi = cn_ceil_div_i64(*hi, b->div);
  return true;
}

/* Settles one side of a loop's bounds against its box edge *edge (from for the lower side, to for
 * the upper): the edge moves to what every bound guarantees (the largest least value of a lower
 * bound, the smallest greatest value of an upper one); constant bounds are absorbed into it and
 * bounds that never pass it are dropped; the edge joins the bounds unless one of them always
 * stays inside it (first, for reading). Returns the new count; `b` has room for one more bound
 * than `n`. */
static int settle_side(const simplifier *sim, cn_ll_bound *b, int n, int64_t *edge, bool lower) {
  int64_t e = *edge, lo, hi;
  for (int k = 0; k < n; k++)
    if (bound_range(sim, &b[k], &lo, &hi)) {
      if (lower && lo > e) e = lo;
      if (!lower && hi < e) e = hi;
    }
  int kept = 0;
  bool inside = false;
  for (int k = 0; k < n; k++) {
    bool known = bound_range(sim, &b[k], &lo, &hi);
    if (b[k].expr.kind == CN_IDX_FIXED || (known && (lower ? hi <= e : lo >= e))) continue;
    inside |= known && (lower ? lo >= e : hi <= e);
    b[kept++] = b[k];
  }
  if (kept > 0 && !inside) { /* the edge first: max(0, i - 3) */
    memmove(b + 1, b, (size_t)kept * sizeof *b);
    b[0] = (cn_ll_bound){cn_index_fixed(e), 1};
    kept++;
  }
  *edge = e;
  return kept;
}

/* Turns the conditions of the loop's chain whose innermost variable is the loop's into bounds;
 * *empty tells that the loop then runs nothing for any value of the outer variables. */
static cn_status bound_loop(simplifier *sim, cn_ll_stmt *loop, bool *empty) {
  mark_chain(sim, loop, true);
  int count = count_candidates(sim, loop);
  cn_status status = CN_OK;
  if (count > 0) {
    /* Worked out in scratch arrays; the loop gets copies of exactly the bounds kept. */
    int n_lower = loop->u.loop.n_lower, n_upper = loop->u.loop.n_upper;
    cn_ll_bound *lower = cn_malloc(sim->ctx, (size_t)(n_lower + count + 1) * sizeof *lower);
    cn_ll_bound *upper = cn_malloc(sim->ctx, (size_t)(n_upper + count + 1) * sizeof *upper);
    if (!lower || !upper) {
      status = CN_ERR_NOMEM;
    } else {
      if (n_lower) memcpy(lower, loop->u.loop.lower, (size_t)n_lower * sizeof *lower);
      if (n_upper) memcpy(upper, loop->u.loop.upper, (size_t)n_upper * sizeof *upper);
      convert_chain(sim, loop, lower, &n_lower, upper, &n_upper);
      n_lower = settle_side(sim, lower, n_lower, &loop->u.loop.from, true);
      n_upper = settle_side(sim, upper, n_upper, &loop->u.loop.to, false);
      if (!cn_lb_bounds(sim->ctx, loop, n_lower, lower, n_upper, upper)) status = CN_ERR_NOMEM;
      *empty = loop->u.loop.from >= loop->u.loop.to;
    }
    free(lower);
    free(upper);
  }
  mark_chain(sim, loop, false);
  return status;
}

static cn_status simplify_stmt(simplifier *sim, cn_ll_stmt *s, bool *empty);

/* Makes the sequence s the first `kept` of its items with the nested sequences among them (flat
 * and non-empty) spliced in, `total` statements, as a new sequence whose contents s takes: s
 * keeps its identity, since its parent points to it. */
static cn_status splice_nested(cn_ctx *ctx, cn_ll_stmt *s, int kept, int total) {
  cn_ll_stmt **items = cn_malloc(ctx, (size_t)total * sizeof *items);
  if (!items) return CN_ERR_NOMEM;
  int n = 0;
  for (int i = 0; i < kept; i++) {
    cn_ll_stmt *item = s->u.seq.items[i];
    if (item->kind != CN_LL_SEQ) {
      items[n++] = item;
      continue;
    }
    memcpy(items + n, item->u.seq.items, (size_t)item->u.seq.count * sizeof *items);
    n += item->u.seq.count;
  }
  cn_ll_stmt *flat = cn_lb_seq_array(ctx, total, items);
  free(items);
  if (!flat) return CN_ERR_NOMEM;
  *s = *flat;
  return CN_OK;
}

/* Drops the items that do nothing, in place, then splices the nested sequences. */
static cn_status simplify_seq(simplifier *sim, cn_ll_stmt *s, bool *empty) {
  int kept = 0, total = 0;
  bool nested = false;
  for (int i = 0; i < s->u.seq.count; i++) {
    cn_ll_stmt *item = s->u.seq.items[i];
    bool item_empty;
    cn_status status = simplify_stmt(sim, item, &item_empty);
    if (status != CN_OK) return status;
    if (item_empty) continue;
    s->u.seq.items[kept++] = item;
    nested |= item->kind == CN_LL_SEQ;
    total += item->kind == CN_LL_SEQ ? item->u.seq.count : 1;
  }
  *empty = total == 0;
  if (nested) return splice_nested(sim->ctx, s, kept, total);
  s->u.seq.count = total;
  return CN_OK;
}

/* Simplifies body with sym in [lo, hi] (a loop's variable, a let's symbol), its outer range
 * restored after. */
static cn_status simplify_bound(simplifier *sim, cn_symbol sym, int64_t lo, int64_t hi,
                                cn_ll_stmt *body, bool *empty) {
  int slot = slot_of(sim, sym);
  int64_t outer_lo = sim->lo[slot], outer_hi = sim->hi[slot];
  bool known = sim->known[slot];
  sim->lo[slot] = lo;
  sim->hi[slot] = hi;
  sim->known[slot] = true;
  cn_status status = simplify_stmt(sim, body, empty);
  sim->lo[slot] = outer_lo;
  sim->hi[slot] = outer_hi;
  sim->known[slot] = known;
  return status;
}

/* Simplifies a statement in place; *empty tells that it does nothing and can be dropped. */
static cn_status simplify_stmt(simplifier *sim, cn_ll_stmt *s, bool *empty) {
  cn_ctx *ctx = sim->ctx;
  *empty = false;
  switch (s->kind) {
  case CN_LL_SEQ: return simplify_seq(sim, s, empty);
  case CN_LL_COMMENT: return CN_OK;
  case CN_LL_FOR: {
    if (s->u.loop.from >= s->u.loop.to) {
      *empty = true;
      return CN_OK;
    }
    bool body_empty;
    cn_status status = simplify_bound(sim, s->u.loop.sym, s->u.loop.from, s->u.loop.to - 1,
                                      s->u.loop.body, &body_empty);
    if (status != CN_OK) return status;
    *empty = body_empty; /* a loop whose body does nothing does nothing */
    return body_empty ? CN_OK : bound_loop(sim, s, empty);
  }
  case CN_LL_IF: {
    bool never, body_empty;
    simplify_conds(sim, s, &never);
    if (never) {
      *empty = true;
      return CN_OK;
    }
    cn_status status = simplify_stmt(sim, s->u.guard.body, &body_empty);
    if (status != CN_OK) return status;
    *empty = body_empty;
    /* A guard left without conditions is its body (a sequence stays flat: the enclosing
     * sequence splices it). */
    if (!body_empty && s->u.guard.n_conds == 0) *s = *s->u.guard.body;
    return CN_OK;
  }
  case CN_LL_SET:
    s->u.set.value = simplify_expr(ctx, s->u.set.value);
    return s->u.set.value ? CN_OK : CN_ERR_NOMEM;
  case CN_LL_SET_VEC:
    s->u.vec.arg = simplify_expr(ctx, s->u.vec.arg);
    return s->u.vec.arg ? CN_OK : CN_ERR_NOMEM;
  case CN_LL_GEMM: return CN_OK; /* made by the scheduling stage, after simplification */
  case CN_LL_LET: {
    /* The body runs only with the symbol in [0, bound): a range like a loop variable's. */
    bool body_empty;
    cn_status status =
        simplify_bound(sim, s->u.let.sym, 0, s->u.let.bound - 1, s->u.let.body, &body_empty);
    *empty = body_empty || s->u.let.bound <= 0;
    return status;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

cn_status cn_ll_simplify(cn_ctx *ctx, cn_ll_proc *proc) {
  simplifier sim = {.ctx = ctx};
  cn_status status = cn_ll_symbols_of(ctx, proc, &sim.symbols);
  if (status != CN_OK) return status;
  size_t n = (size_t)(sim.symbols.n ? sim.symbols.n : 1);
  sim.lo = cn_calloc(ctx, n, sizeof(int64_t));
  sim.hi = cn_calloc(ctx, n, sizeof(int64_t));
  sim.known = cn_calloc(ctx, n, sizeof(bool));
  sim.inner = cn_calloc(ctx, n, sizeof(bool));
  if (!sim.lo || !sim.hi || !sim.known || !sim.inner) {
    status = CN_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < proc->n_free_syms; i++) {
    const cn_symbol_info *info = cn_ctx_symbol(ctx, proc->free_syms[i]);
    if (!info || info->range <= 0) continue;
    int slot = slot_of(&sim, proc->free_syms[i]);
    sim.lo[slot] = 0;
    sim.hi[slot] = info->range - 1;
    sim.known[slot] = true;
  }
  bool empty;
  status = simplify_stmt(&sim, proc->body, &empty);
done:
  free(sim.lo);
  free(sim.hi);
  free(sim.known);
  free(sim.inner);
  if (status != CN_OK) return status;
  if (empty) {
    /* The body stays a statement: an empty sequence. */
    proc->body = cn_lb_seq_array(ctx, 0, NULL);
    if (!proc->body) return CN_ERR_NOMEM;
  }
  return CN_OK;
}
