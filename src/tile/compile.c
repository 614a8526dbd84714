/* Tile compilation (tile-edsl): one parsed contraction, compiled against a scope, becomes a ranged,
 * valid-only projections record and a tensor of kind CN_TK_TILE; cn_tile, the C entry point for
 * one statement with its bindings.
 *
 * Semantics (tile-edsl "Valid Indices"): a set of index values is visited iff every index of every
 * tensor, the output included, is within its bounds and every constraint holds; the record says so
 * with valid_only and the constraints, and zero_unreached gives Tile's initialization (unreached
 * output cells 0, reached ones start from the aggregation's identity). Each variable's range [lo,
 * hi) is derived by interval propagation over those conditions, or by eliminating the other
 * variables from them when only they together bound it (space.c); the lowering tightens it again
 * and keeps what stays undecided as guards. An index may appear only in constraints (`O[i] +=
 * I[i], k < 2` counts each I[i] twice); one that nothing bounds is refused.
 *
 * Index polynomials are affine combinations of index variables (lower-case names not bound to
 * anything, or names declared as indices) with dims as constants, over a positive denominator:
 * division is exact (tile-edsl "Skipping"), so a point is valid only if every index expression, and
 * every constraint's polynomial, is an integer there. Those divisibility conditions are solved
 * together (space.c, lattice.h) into a change of variables x = x0 + B*y over all integer y, and the
 * record's iterators are the y, over which every polynomial is an integer one: `O[i/2] += I[i]`
 * iterates i_2 with i = 2*i_2. Sizes and bounds must not mention index variables; between integers
 * (dims), division is floor division.
 *
 * Invariants: every failure is a cn_tile_fail_at with the position (or, for a cn_tile binding,
 * the statement); the first one is kept. Everything is decided when the tensor is built: the
 * operands' dims must be known then. */
#include "tile/space.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Scopes ---- */

const cn_tile_name *cn_tile_lookup(const cn_tile_scope *scope, const char *name, size_t len) {
  for (int i = scope->n - 1; i >= 0; i--) {
    const cn_tile_name *e = &scope->names[i];
    if (e->len == len && strncmp(e->name, name, len) == 0) return e;
  }
  return NULL;
}

/* ", did you mean ...?" for the unknown name[0 .. len) among the scope's tensors (`tensors`) or
 * dims (set or not), built in s (word holds the name's copy); "" when none is close. */
static const char *suggest_in_scope(const cn_tile_scope *scope, const char *name, size_t len,
                                    bool tensors, cn_suggest *s, char word[64]) {
  snprintf(word, 64, "%.*s", (int)len, name);
  cn_suggest_init(s, word);
  for (int i = 0; i < scope->n; i++)
    if ((scope->names[i].kind == CN_TILE_TENSOR) == tensors &&
        scope->names[i].kind != CN_TILE_INDEX)
      cn_suggest_consider_n(s, scope->names[i].name, scope->names[i].len);
  return cn_suggest_text(s);
}

bool cn_tile_tensor_name(cn_graph *g, cn_tensor *t, cn_tile_name *e) {
  e->kind = CN_TILE_TENSOR;
  e->tensor = t;
  e->rank = cn_shape_dims(g->shapes, t->shape, e->dims, CN_MAX_RANK);
  if (e->rank >= 0) return true;
  if (cn_ctx_status(g->ctx) == CN_ERR_NOMEM) return false;
  cn_ctx_clear_error(g->ctx); /* not an error until the tensor is used */
  return true;
}

bool cn_tile_check_known(cn_tile_src *src, size_t at, const cn_tile_name *e) {
  if (e->rank >= 0) return true;
  cn_tile_fail_at(src, at,
                  "the shape of '%.*s' is not known yet (%s): Tile needs the dims of its tensors "
                  "when a statement is built (give the tensor explicit dims, or build the "
                  "statement after the graph is materialized)",
                  (int)e->len, e->name, cn_tensor_shape(e->tensor));
  return false;
}

/* ---- Rational affine arithmetic with overflow checks ---- */

static bool has_vars(const cn_tile_poly *a) {
  for (int v = 0; v < CN_TILE_MAX_VARS; v++)
    if (a->c[v]) return true;
  return false;
}

/* Lowest terms: the gcd divides den, so it fits int64 and every division is exact. */
static void poly_reduce(cn_tile_poly *a) {
  uint64_t g = cn_u64_gcd((uint64_t)a->den, cn_i64_magnitude(a->off));
  for (int v = 0; v < CN_TILE_MAX_VARS && g > 1; v++) g = cn_u64_gcd(g, cn_i64_magnitude(a->c[v]));
  if (g <= 1) return;
  for (int v = 0; v < CN_TILE_MAX_VARS; v++) a->c[v] /= (int64_t)g;
  a->off /= (int64_t)g;
  a->den /= (int64_t)g;
}

/* a += sign * b (sign 1 or -1), over the common denominator lcm(a.den, b.den). */
static bool poly_add(cn_tile_poly *a, const cn_tile_poly *b, int64_t sign) {
  int64_t g = (int64_t)cn_u64_gcd((uint64_t)a->den, (uint64_t)b->den);
  int64_t ka = b->den / g, kb = a->den / g * sign, den;
  if (__builtin_mul_overflow(a->den, ka, &den)) return false;
  for (int v = 0; v <= CN_TILE_MAX_VARS; v++) {
    int64_t *x = v < CN_TILE_MAX_VARS ? &a->c[v] : &a->off;
    int64_t y = v < CN_TILE_MAX_VARS ? b->c[v] : b->off, s, t;
    if (__builtin_mul_overflow(*x, ka, &s) || __builtin_mul_overflow(y, kb, &t) ||
        __builtin_add_overflow(s, t, x))
      return false;
  }
  a->den = den;
  poly_reduce(a);
  return true;
}

/* a *= num / den, den >= 1. */
static bool poly_scale(cn_tile_poly *a, int64_t num, int64_t den) {
  for (int v = 0; v < CN_TILE_MAX_VARS; v++)
    if (__builtin_mul_overflow(a->c[v], num, &a->c[v])) return false;
  if (__builtin_mul_overflow(a->off, num, &a->off) || __builtin_mul_overflow(a->den, den, &a->den))
    return false;
  poly_reduce(a);
  return true;
}

/* ---- Evaluation of index polynomials, sizes and bounds ---- */

/* What an expression is evaluated against: the names it may use and the statement's variables. */
typedef struct {
  cn_tile_src *src;
  const cn_tile_scope *scope;
  cn_tile_vars *vars; /* NULL: a pure integer expression (no index variables at all) */
  bool size;          /* a size or bound of a contraction: index variables refused */
} evaluator;

static int variable(evaluator *ev, const cn_tile_expr *e) {
  cn_tile_vars *vt = ev->vars;
  for (int v = 0; v < vt->n; v++)
    if (vt->len[v] == e->len && strncmp(vt->name[v], e->name, e->len) == 0) return v;
  if (vt->n == CN_TILE_MAX_VARS) {
    cn_tile_fail_at(ev->src, e->at, "more than %d index variables", CN_TILE_MAX_VARS);
    return -1;
  }
  vt->name[vt->n] = e->name;
  vt->len[vt->n] = e->len;
  vt->first[vt->n] = e->at;
  return vt->n++;
}

static bool eval_name(evaluator *ev, const cn_tile_expr *e, cn_tile_poly *out) {
  const cn_tile_name *n = cn_tile_lookup(ev->scope, e->name, e->len);
  int len = (int)e->len;
  bool index =
      n ? n->kind == CN_TILE_INDEX : islower((unsigned char)e->name[0]) || e->name[0] == '_';
  if (n && n->kind == CN_TILE_DIM) {
    out->off = n->value;
    return true;
  }
  if (n && n->kind == CN_TILE_UNSET)
    cn_tile_fail_at(ev->src, e->at,
                    "dim '%.*s' has no value yet (bind it with bind_dims or assign it)", len,
                    e->name);
  else if (n && n->kind == CN_TILE_TENSOR)
    cn_tile_fail_at(ev->src, e->at, "'%.*s' is a tensor, not a dim", len, e->name);
  else if (!index) {
    cn_suggest s;
    char word[64];
    cn_tile_fail_at(ev->src, e->at, "unknown dim '%.*s'%s", len, e->name,
                    suggest_in_scope(ev->scope, e->name, e->len, false, &s, word));
  } else if (!ev->vars)
    cn_tile_fail_at(ev->src, e->at, "unknown name '%.*s' (only dims and integers here)", len,
                    e->name);
  else if (ev->size)
    cn_tile_fail_at(ev->src, e->at,
                    "index variable '%.*s' in a size or bound (only dims and integers)", len,
                    e->name);
  else {
    int v = variable(ev, e);
    if (v < 0) return false;
    out->c[v] = 1;
    return true;
  }
  return false;
}

/* Index polynomials are rational (see cn_tile_poly); a division is floor division when both sides
 * are integers without index variables (dim arithmetic, as in sizes), else exact. */
static bool eval_poly(evaluator *ev, const cn_tile_expr *e, cn_tile_poly *out) {
  memset(out, 0, sizeof *out);
  out->den = 1;
  switch (e->kind) {
  case CN_TILE_EXPR_INT: out->off = e->ival; return true;
  case CN_TILE_EXPR_NAME: return eval_name(ev, e, out);
  case CN_TILE_EXPR_FLOAT:
    cn_tile_fail_at(ev->src, e->at, "a number with a fraction in an integer expression");
    return false;
  case CN_TILE_EXPR_CALL:
    cn_tile_fail_at(ev->src, e->at, "a call in an integer expression (calls are elementwise)");
    return false;
  case CN_TILE_EXPR_NEG:
    if (!eval_poly(ev, e->args[0], out)) return false;
    if (poly_scale(out, -1, 1)) return true;
    cn_tile_fail_at(ev->src, e->at, "integer overflow");
    return false;
  case CN_TILE_EXPR_BINARY: break;
  }
  if (e->op >= CN_TILE_BIN_EQ) {
    cn_tile_fail_at(ev->src, e->at, "a comparison in an integer expression");
    return false;
  }
  cn_tile_poly rhs;
  if (!eval_poly(ev, e->args[0], out) || !eval_poly(ev, e->args[1], &rhs)) return false;
  bool lv = has_vars(out), rv = has_vars(&rhs), ok = true;
  switch (e->op) {
  case CN_TILE_BIN_ADD:
  case CN_TILE_BIN_SUB: ok = poly_add(out, &rhs, e->op == CN_TILE_BIN_ADD ? 1 : -1); break;
  case CN_TILE_BIN_MUL: {
    if (lv && rv) {
      cn_tile_fail_at(ev->src, e->at, "a product of index variables is not affine");
      return false;
    }
    cn_tile_poly k = lv ? rhs : *out; /* the constant factor */
    if (!lv) *out = rhs;
    ok = poly_scale(out, k.off, k.den);
    break;
  }
  default: /* '/' and '//' */
    if (rv) {
      cn_tile_fail_at(ev->src, e->at,
                      "division by an index expression (an index expression divides only by "
                      "dims and integers)");
      return false;
    }
    if (rhs.off == 0) {
      cn_tile_fail_at(ev->src, e->at, "division by zero");
      return false;
    }
    if (!lv && out->den == 1 && rhs.den == 1) {
      ok = !(out->off == INT64_MIN && rhs.off == -1);
      if (ok) out->off = cn_floor_div_i64(out->off, rhs.off);
    } else { /* exact: (a / d) / (r / s) = a * s / (d * r) */
      ok = rhs.off != INT64_MIN;
      if (ok)
        ok = poly_scale(out, rhs.off < 0 ? -rhs.den : rhs.den, rhs.off < 0 ? -rhs.off : rhs.off);
    }
    break;
  }
  if (!ok) cn_tile_fail_at(ev->src, e->at, "integer overflow");
  return ok;
}

bool cn_tile_eval_int(cn_tile_src *src, const cn_tile_scope *scope, const cn_tile_expr *e,
                      int64_t *out) {
  evaluator ev = {src, scope, NULL, true};
  cn_tile_poly p;
  if (!eval_poly(&ev, e, &p)) return false;
  *out = p.off;
  return true;
}

/* A size or bound of a contraction: no index variable; sizes are not negative. */
static bool eval_size(evaluator *ev, const cn_tile_expr *e, bool size, int64_t *out) {
  ev->size = true;
  cn_tile_poly p;
  bool ok = eval_poly(ev, e, &p);
  ev->size = false;
  CN_ASSERT(!ok || p.den == 1); /* a fraction needs an index variable */
  *out = p.off;
  /* an axis holds at least one cell: a size 0 would otherwise be refused unpositioned when the
   * output tensor is made */
  if (ok && size && p.off < 1) {
    cn_tile_fail_at(ev->src, cn_tile_expr_start(e), "size %lld must be at least 1",
                    (long long)p.off);
    return false;
  }
  return ok;
}

/* ---- Compilation ---- */

/* An operand of the statement, resolved: its axes are the polynomials first, first + 1, ... */
typedef struct {
  const cn_tile_name *t;
  int first;
} operand;

/* Appends the polynomials of n index expressions to s (bounds -1: set by the caller). */
static bool eval_indices(evaluator *ev, cn_tile_poly_set *s, int n, cn_tile_expr *const *idx) {
  for (int x = 0; x < n; x++) {
    cn_tile_poly *p = &s->p[s->n];
    s->at[s->n] = cn_tile_expr_start(idx[x]);
    s->bound[s->n++] = -1;
    if (!eval_poly(ev, idx[x], p)) return false;
    for (int v = 0; v < CN_TILE_MAX_VARS; v++)
      if (p->c[v]) ev->vars->in_tensor[v] = true;
  }
  return true;
}

static bool resolve_operand(evaluator *ev, cn_tile_poly_set *s, const cn_tile_access *a,
                            operand *op) {
  int len = (int)a->len;
  op->t = cn_tile_lookup(ev->scope, a->name, a->len);
  op->first = s->n;
  if (!op->t || op->t->kind != CN_TILE_TENSOR) {
    cn_suggest s;
    char word[64];
    if (op->t)
      cn_tile_fail_at(ev->src, a->at, "'%.*s' is a dim, not a tensor", len, a->name);
    else
      cn_tile_fail_at(ev->src, a->at, "unknown tensor '%.*s'%s", len, a->name,
                      suggest_in_scope(ev->scope, a->name, a->len, true, &s, word));
    return false;
  }
  if (!cn_tile_check_known(ev->src, a->at, op->t) || !eval_indices(ev, s, a->n, a->idx))
    return false;
  if (a->n == op->t->rank) {
    for (int x = 0; x < a->n; x++) s->bound[op->first + x] = op->t->dims[x];
    return true;
  }
  cn_tile_fail_at(ev->src, a->at, "'%.*s' has %d axes (%s) but %d indices", len, a->name,
                  op->t->rank, cn_tensor_shape(op->t->tensor), a->n);
  return false;
}

static cn_index to_index(cn_tile_src *src, int nv, size_t at, const cn_tile_poly *e,
                         const cn_symbol *syms) {
  cn_symbol s[CN_MAX_AFFINE_TERMS];
  int64_t c[CN_MAX_AFFINE_TERMS];
  int n = 0;
  CN_ASSERT(e->den == 1);
  for (int v = 0; v < nv; v++) {
    if (!e->c[v]) continue;
    if (n == CN_MAX_AFFINE_TERMS) {
      cn_tile_fail_at(src, at, "an index expression may use at most %d index variables",
                      CN_MAX_AFFINE_TERMS);
      return cn_index_fixed(0);
    }
    s[n] = syms[v];
    c[n++] = e->c[v];
  }
  return n ? cn_index_affine(n, s, c, e->off) : cn_index_fixed(e->off);
}

/* One contraction being compiled: what each phase establishes for the next. */
typedef struct {
  cn_graph *g;
  cn_tile_src *src;
  const cn_tile_contraction *c;
  cn_tile_work *w;   /* vars and xs (phase 1), ys (phase 2) */
  evaluator ev;      /* over w->vars */
  operand ops[3];    /* phase 1 */
  int n_cons;        /* phase 1: the statement's constraints and the added ones */
  int cfirst;        /* phase 1: the first constraint's polynomial */
  cn_tile_change ch; /* phase 2 */
  int64_t lo[CN_TILE_MAX_VARS], hi[CN_TILE_MAX_VARS]; /* phase 2: inclusive ranges of the y */
} compilation;

/* Phase 1, the statement's polynomials: w->xs holds the output's indices (bounded by their sizes,
 * the TensorOutput's dims, or -1 when unsized), each operand's (bounded by its dims) and the
 * constraints; index variables are numbered in this order (in_tensor: it indexes a tensor). */
static bool eval_statement(compilation *k, int out_rank, const int64_t *out_dims, int n_extra,
                           const cn_tile_constraint *extra) {
  const cn_tile_contraction *c = k->c;
  const cn_tile_access *out = &c->out;
  int orank = out->n, olen = (int)out->len;
  cn_tile_poly_set *xs = &k->w->xs;
  if (cn_tile_lookup(k->ev.scope, out->name, out->len)) {
    cn_tile_fail_at(k->src, out->at, "the output '%.*s' is already bound", olen, out->name);
    return false;
  }
  if (out_dims && orank != out_rank) {
    cn_tile_fail_at(k->src, out->at, "'%.*s' has %d dims (TensorOutput) but %d indices", olen,
                    out->name, out_rank, orank);
    return false;
  }
  if (!eval_indices(&k->ev, xs, orank, out->idx)) return false;
  xs->n_out = orank;
  for (int x = 0; x < orank; x++) {
    if (out_dims && c->sizes[x]) {
      cn_tile_fail_at(k->src, c->sizes[x]->at, "the sizes of '%.*s' come from its TensorOutput",
                      olen, out->name);
      return false;
    }
    xs->bound[x] = out_dims ? out_dims[x] : -1;
    if (c->sizes[x] && !eval_size(&k->ev, c->sizes[x], true, &xs->bound[x])) return false;
  }
  for (int a = 0; a < c->n_acc; a++)
    if (!resolve_operand(&k->ev, xs, &c->acc[a], &k->ops[a])) return false;
  k->n_cons = c->n_cons + n_extra, k->cfirst = xs->n;
  if (k->n_cons > CN_TILE_MAX_CONSTRAINTS) {
    cn_tile_fail_at(k->src, extra[CN_TILE_MAX_CONSTRAINTS - c->n_cons].at,
                    "more than %d constraints", CN_TILE_MAX_CONSTRAINTS);
    return false;
  }
  for (int i = 0; i < k->n_cons; i++) {
    const cn_tile_constraint *ci = i < c->n_cons ? &c->cons[i] : &extra[i - c->n_cons];
    cn_tile_poly *p = &xs->p[xs->n];
    xs->at[xs->n] = ci->at;
    if (!eval_poly(&k->ev, ci->poly, p) || !eval_size(&k->ev, ci->bound, false, &xs->bound[xs->n]))
      return false;
    xs->n++;
    if (!has_vars(p)) {
      cn_tile_fail_at(k->src, ci->at, "a constraint must mention an index variable");
      return false;
    }
  }
  return true;
}

/* Whether a polynomial of s has a term in variable v (`i + j - j` has none in j). */
static bool mentioned(const cn_tile_poly_set *s, int v) {
  for (int k = 0; k < s->n; k++)
    if (s->p[k].c[v]) return true;
  return false;
}

/* Phase 2, exact division and ranges: the loop variables are the change's y (k->ch); every
 * polynomial over them (w->ys) is an integer one, every output axis is sized and each y has a
 * range [lo, hi], empty (hi < lo) when no value of it is valid. */
static bool range_variables(compilation *k) {
  const cn_tile_vars *vars = &k->w->vars;
  const cn_tile_poly_set *ys = &k->w->ys;
  bool known[CN_TILE_MAX_VARS];
  int bad_axis = -1;
  int st = cn_tile_choose_change(k->src, k->w, &k->ch, k->lo, k->hi, known, &bad_axis);
  if (st < 0) return false;
  int nv = k->ch.n;
  if (st == 0) { /* no valid point: nothing reached, every range empty */
    for (int x = 0; x < k->c->out.n; x++)
      if (ys->bound[x] < 0) {
        cn_tile_fail_at(k->src, ys->at[x],
                        "cannot derive the size of output axis %d: no index set is valid (give "
                        "it as ': SIZE')",
                        x);
        return false;
      }
    for (int v = 0; v < nv; v++) k->lo[v] = 0, k->hi[v] = -1;
    return true;
  }
  if (bad_axis >= 0) {
    cn_tile_fail_at(k->src, ys->at[bad_axis],
                    "cannot derive the size of output axis %d: give it as ': SIZE'", bad_axis);
    return false;
  }
  for (int v = 0; v < nv; v++) {
    if (!known[v]) {
      int x = k->ch.src[v], len = (int)vars->len[x];
      const char *name = vars->name[x];
      if (k->w->capped[v])
        cn_tile_fail_at(k->src, vars->first[x],
                        "index '%.*s' is not bounded by any tensor axis or constraint alone, and "
                        "bounding it with the other indices was given up: their elimination "
                        "grows past %d inequalities or %d combinations (add a constraint that "
                        "bounds it alone, such as '%.*s < N')",
                        len, name, CN_TILE_MAX_ROWS, CN_TILE_MAX_COMBINED, len, name);
      else if (!mentioned(&k->w->xs, x))
        cn_tile_fail_at(k->src, vars->first[x],
                        "index '%.*s' is not bounded: it cancels out of every index expression and "
                        "constraint",
                        len, name);
      else
        cn_tile_fail_at(k->src, vars->first[x],
                        "index '%.*s' is not bounded: %s, alone or with the other indices (add a "
                        "constraint such as '%.*s < N'%s)",
                        len, name,
                        vars->in_tensor[x] ? "no tensor axis or constraint bounds it"
                                           : "it appears only in constraints, and they do not "
                                             "bound it",
                        len, name, vars->in_tensor[x] ? "" : ", or use it in a tensor's index");
      return false;
    }
    if (k->hi[v] < k->lo[v]) k->hi[v] = k->lo[v] - 1; /* no valid value: an empty range */
  }
  return true;
}

/* Phase 3, the record: the y as named symbols over their ranges, every index and constraint as
 * a cn_index over them, valid_only and zero_unreached; `=` only when the output map is
 * injective. Its operands' tensors in args; odims: the output's dims. NULL after an error. */
static cn_proj *build_record(compilation *k, cn_tensor **args, int64_t *odims) {
  cn_ctx *ctx = k->g->ctx;
  const cn_tile_contraction *c = k->c;
  const cn_tile_poly_set *ys = &k->w->ys;
  int nv = k->ch.n, orank = c->out.n, n_cons = k->n_cons, cfirst = k->cfirst;
  cn_symbol syms[CN_TILE_MAX_VARS];
  int64_t rhi[CN_TILE_MAX_VARS];
  char names[CN_TILE_MAX_VARS][CN_TILE_NAME_CAP];
  for (int v = 0; v < nv; v++) {
    cn_tile_name_variable(&k->w->vars, &k->ch, v, names);
    if ((syms[v] = cn_symbol_create(ctx, names[v], 0)) < 0) return NULL;
    rhi[v] = k->hi[v] + 1;
  }
  cn_index *maps = cn_alloc(ctx, sizeof *maps * (size_t)(4 * CN_MAX_RANK));
  cn_proj_constraint *pc = cn_alloc(ctx, sizeof *pc * (size_t)(n_cons + 1));
  if (!maps || !pc) return NULL;
  for (int x = 0; x < orank; x++) {
    odims[x] = ys->bound[x];
    maps[x] = to_index(k->src, nv, c->out.at, &ys->p[x], syms);
  }
  cn_index *next = maps + orank;
  cn_proj_tensor rhs[3];
  for (int a = 0; a < c->n_acc; a++) {
    const cn_tile_name *t = k->ops[a].t;
    for (int x = 0; x < t->rank; x++)
      next[x] = to_index(k->src, nv, c->acc[a].at, &ys->p[k->ops[a].first + x], syms);
    rhs[a] = (cn_proj_tensor){t->rank, t->dims, next};
    args[a] = t->tensor;
    next += t->rank;
  }
  for (int i = 0; i < n_cons; i++)
    pc[i] = (cn_proj_constraint){to_index(k->src, nv, ys->at[cfirst + i], &ys->p[cfirst + i], syms),
                                 ys->bound[cfirst + i]};
  if (k->src->failed) return NULL;
  cn_proj_space space = {nv, syms, k->lo, rhi, n_cons, pc, true, true};
  cn_proj *proj =
      cn_proj_create_ranged(ctx, &space, (cn_proj_tensor){orank, odims, maps}, c->n_acc, rhs);
  if (!proj) return NULL;
  if (c->accum == CN_OP_ARG2 && !cn_proj_lhs_injective(proj)) {
    cn_tile_fail_at(k->src, c->agg_at,
                    "'=' (assign) needs every output cell written by at most one valid index set, "
                    "and '%.*s' may be written by several (use '+=', '>=' ... to aggregate)",
                    (int)c->out.len, c->out.name);
    return NULL;
  }
  return proj;
}

/* Phase 4, the tensor: output axes Exact, no shape relation to the operands (the statement's dims
 * already checked them), labeled with the output's name, carrying the record. */
static cn_tensor *make_tensor(compilation *k, cn_proj *proj, cn_tensor *const *args,
                              const int64_t *odims) {
  const cn_tile_contraction *c = k->c;
  char label[128];
  snprintf(label, sizeof label, "%.*s", (int)c->out.len, c->out.name);
  return cn_tensor_new_recorded(k->g, label, c->out.n, odims, c->accum, c->prim, c->n_acc, args,
                                proj);
}

cn_tensor *cn_tile_contract(cn_graph *g, cn_tile_src *src, const cn_tile_scope *scope,
                            const cn_tile_contraction *c, int out_rank, const int64_t *out_dims,
                            int n_extra, const cn_tile_constraint *extra) {
  compilation k = {.g = g, .src = src, .c = c};
  if (!(k.w = cn_calloc(g->ctx, 1, sizeof *k.w))) return NULL;
  k.ev = (evaluator){src, scope, &k.w->vars, false};
  cn_tensor *args[3], *t = NULL;
  int64_t odims[CN_MAX_RANK];
  cn_proj *proj = NULL;
  if (eval_statement(&k, out_rank, out_dims, n_extra, extra) && range_variables(&k) &&
      (proj = build_record(&k, args, odims)))
    t = make_tensor(&k, proj, args, odims);
  free(k.w);
  return t;
}

/* ---- cn_tile: one statement from C ---- */

/* A binding error (not tied to a column). */
static bool binding_error(cn_tile_src *src, const char *fmt, ...) CN_PRINTF(2, 3);
static bool binding_error(cn_tile_src *src, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_fail(src->ctx, CN_ERR_INVALID, "tile \"%s\": %s", src->text, what);
  return false;
}

/* Adds the dims a binding names (its tensor's axes, I.bind_dims(M, N), or the binding itself
 * for a dim) to the scope; a name repeated must have one size. */
static bool bind_names(cn_tile_src *src, const cn_tile_binding *b, const cn_tile_name *t,
                       cn_tile_name *names, int *n) {
  const char *s = t ? b->dims : b->name;
  int rank = t ? t->rank : 1, axis = 0;
  const int64_t *dims = t ? t->dims : &b->dim;
  if (t && rank < 0)
    return binding_error(src,
                         "the shape of '%s' is not known yet (%s): Tile needs the dims of its "
                         "tensors when a statement is built",
                         b->name, cn_tensor_shape(b->tensor));
  for (;;) {
    while (*s == ',' || isspace((unsigned char)*s)) s++;
    if (!*s) break;
    size_t len = 0;
    while (s[len] && s[len] != ',' && !isspace((unsigned char)s[len])) len++;
    if (axis == rank)
      return binding_error(src, "'%s' binds more dims (\"%s\") than its %d axes", b->name, s, rank);
    if (!isupper((unsigned char)s[0]))
      return binding_error(src, "binding '%s': dims (\"%s\") must be upper-case names", b->name,
                           t ? b->dims : b->name);
    cn_tile_scope scope = {*n, names};
    const cn_tile_name *d = cn_tile_lookup(&scope, s, len);
    if (d && d->kind == CN_TILE_DIM && d->value != dims[axis])
      return binding_error(src, "dim %.*s is %lld but axis %d of '%s' has size %lld", (int)len, s,
                           (long long)d->value, axis, b->name, (long long)dims[axis]);
    names[(*n)++] = (cn_tile_name){.name = s, .len = len, .kind = CN_TILE_DIM, .value = dims[axis]};
    axis++;
    s += len;
  }
  if (axis != rank)
    return binding_error(src, "'%s' has %d axes (%s) but binds %d dims", b->name, rank,
                         cn_tensor_shape(b->tensor), axis);
  return true;
}

cn_tensor *cn_tile(cn_graph *g, const char *text, int n_bindings, const cn_tile_binding *bindings) {
  if (!g) return NULL;
  cn_ctx *ctx = g->ctx;
  if (!text || n_bindings < 0 || (n_bindings && !bindings)) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_tile: missing text or bindings");
    return NULL;
  }
  cn_tile_src src = {ctx, text, NULL, 1, 1, false, false};
  int cap = 0;
  for (int i = 0; i < n_bindings; i++) cap += 1 + (bindings[i].dims ? CN_MAX_RANK + 1 : 1);
  cn_tile_name *names = cn_alloc(ctx, sizeof *names * (size_t)(cap ? cap : 1));
  if (!names) return NULL;
  int n = 0;
  for (int i = 0; i < n_bindings; i++) {
    const cn_tile_binding *b = &bindings[i];
    if (!b->name || !b->name[0]) {
      binding_error(&src, "binding %d has no name", i + 1);
      return NULL;
    }
    if (b->tensor && b->tensor->g != g) {
      binding_error(&src, "tensor '%s' is from another graph", b->name);
      return NULL;
    }
    if (!b->tensor) {
      if (!bind_names(&src, b, NULL, names, &n)) return NULL;
      continue;
    }
    cn_tile_name *t = &names[n++];
    *t = (cn_tile_name){.name = b->name, .len = strlen(b->name)};
    if (!cn_tile_tensor_name(g, b->tensor, t)) return NULL;
    if (b->dims && !bind_names(&src, b, t, names, &n)) return NULL;
  }
  cn_tile_reader r;
  cn_tile_contraction *c = cn_alloc(ctx, sizeof *c);
  if (!c || !cn_tile_reader_init(&r, &src, 0, strlen(text)) || !cn_tile_parse_contraction(&r, c))
    return NULL;
  cn_tile_scope scope = {n, names};
  return cn_tile_contract(g, &src, &scope, c, -1, NULL, 0, NULL);
}
