/* Assignments of a tensor's operation: its forward code (v =:accum prim(v1, ...)) and its
 * backprop, built from the derivative table (derivs.def) over the operation's one inferred record,
 * re-addressed by slot (contraction-is-emergent: "one inference; many assignments, each a
 * slot-permuted view of it").
 *
 * A derivative formula is compiled into assignments over the operation's product space: a leaf
 * (an operand, the result v, the incoming gradient g) is read through its slot's map, a number
 * through a rank-0 constant node, and every compound sub-expression is written into an
 * intermediate node shaped like the product space (indexed by the identity map), so each
 * assignment stays one primitive op over buffers. The top level accumulates into the operand's
 * gradient through the operand's own map, which makes reductions (broadcast operands, contracted
 * axes, affine reads) sum their contributions.
 *
 * Every gradient assignment visits exactly the forward operation's points (cn_proj_over): the same
 * iterators and ranges (a Tile record's may start below 0), constraints and valid index sets, so a
 * Tile contraction's gradient is contraction-is-emergent's derivation unchanged — same index space,
 * same constraints, LHS and operand roles swapped (tile-edsl, issue 7).
 *
 * Invariants: a formula reads v only when the LHS map is injective, where a written cell holds
 * the op of its one point's operands whatever the accumulation; several points per cell need a +,
 * max or min accumulation, and under max/min a contribution is gated by prim(operands) == v (the
 * argmax rule: every point attaining the result gets it). */
#include "tensor/tensor.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { E_OPERAND, E_RESULT, E_GRAD, E_NUMBER, E_APPLY } expr_kind;

typedef struct expr expr;
struct expr {
  expr_kind kind;
  int operand; /* OPERAND: 0..2 */
  double number;
  cn_op op; /* APPLY */
  int n_args;
  expr *args[3];
};

/* ---- The formula language ---------------------------------------------------------------- */

typedef struct {
  cn_ctx *ctx;
  const char *s;
  size_t pos;
  bool uses_result;
  /* a user's formula (cn_tensor_operation): the first error, at column fail_at (1-based) of s;
   * the leaves it may name (a..c up to arity, v and g) */
  const char *fail;
  size_t fail_at;
  int arity;
  bool allow_vg;
} reader;

/* Records the first error of a formula at the reader's position; NULL for the caller to return. */
static expr *bad(reader *r, const char *why) {
  if (!r->fail) {
    r->fail = why;
    r->fail_at = r->pos + 1;
  }
  return NULL;
}

static bool at(reader *r, char c) {
  while (r->s[r->pos] == ' ') r->pos++;
  return r->s[r->pos] == c;
}

static expr *make(reader *r, expr_kind kind) {
  expr *e = cn_alloc(r->ctx, sizeof *e);
  if (e) e->kind = kind;
  return e;
}

static expr *apply(cn_ctx *ctx, cn_op op, int n, expr *a, expr *b, expr *c) {
  expr *e = cn_alloc(ctx, sizeof *e);
  if (!e || !a || (n > 1 && !b) || (n > 2 && !c)) return NULL;
  e->kind = E_APPLY;
  e->op = op;
  e->n_args = n;
  e->args[0] = a;
  e->args[1] = b;
  e->args[2] = c;
  return e;
}

static void skip(reader *r) {
  while (r->s[r->pos] == ' ') r->pos++;
}

static expr *sum(reader *r);

/* The derivative table's formulas are ours (a malformed one is a bug, caught by the tests); a
 * user's are checked, the first error kept in the reader. */
static expr *primary(reader *r) {
  skip(r);
  char c = r->s[r->pos];
  if (c == '(') {
    r->pos++;
    expr *e = sum(r);
    if (!at(r, ')')) return bad(r, "expected ')'");
    r->pos++;
    return e;
  }
  if (c == '-') {
    r->pos++;
    return apply(r->ctx, CN_OP_NEG, 1, primary(r), NULL, NULL);
  }
  if (isdigit((unsigned char)c) || c == '.') {
    char *end;
    expr *e = make(r, E_NUMBER);
    double v = strtod(r->s + r->pos, &end);
    if (end == r->s + r->pos) return bad(r, "expected a number");
    r->pos = (size_t)(end - r->s);
    if (e) e->number = v;
    return e;
  }
  size_t start = r->pos;
  while (isalnum((unsigned char)r->s[r->pos]) || r->s[r->pos] == '_') r->pos++;
  size_t n = r->pos - start;
  if (n == 0) return bad(r, "expected an operand (a, b, c, v, g), a number or an op");
  if (n == 1 && strchr("abcvg", c)) {
    if ((c == 'v' || c == 'g') && !r->allow_vg) {
      r->pos = start;
      return bad(r, "the forward code reads the operands only (v and g are the gradient's)");
    }
    if (c != 'v' && c != 'g' && c - 'a' >= r->arity) {
      r->pos = start;
      return bad(r, "no such operand");
    }
    expr *e = make(r, c == 'v' ? E_RESULT : c == 'g' ? E_GRAD : E_OPERAND);
    if (e) e->operand = c - 'a';
    r->uses_result |= c == 'v';
    return e;
  }
  char name[32];
  cn_op op;
  if (n >= sizeof name) {
    r->pos = start;
    return bad(r, "unknown op");
  }
  memcpy(name, r->s + start, n);
  name[n] = '\0';
  if (!cn_op_from_name(name, &op) || (cn_op_table[op].flags & CN_OPF_VEC) ||
      !cn_op_supports(op, CN_PREC_DOUBLE)) {
    r->pos = start;
    return bad(r, "unknown op (a primitive op of `cannl ops` on numbers)");
  }
  if (!at(r, '(')) return bad(r, "expected '(' after the op's name");
  r->pos++;
  expr *args[3] = {NULL, NULL, NULL};
  int arity = cn_op_arity(op);
  for (int i = 0; i < arity; i++) {
    if (i && !at(r, ',')) return bad(r, "expected ',': the op takes more operands");
    if (i) r->pos++;
    args[i] = sum(r);
  }
  if (!at(r, ')')) return bad(r, "expected ')' after the op's operands");
  r->pos++;
  return apply(r->ctx, op, arity, args[0], args[1], args[2]);
}

static expr *product(reader *r) {
  expr *e = primary(r);
  for (skip(r); r->s[r->pos] == '*' || r->s[r->pos] == '/'; skip(r)) {
    cn_op op = r->s[r->pos++] == '*' ? CN_OP_MUL : CN_OP_DIV;
    e = apply(r->ctx, op, 2, e, primary(r), NULL);
  }
  return e;
}

static expr *sum(reader *r) {
  expr *e = product(r);
  for (skip(r); r->s[r->pos] == '+' || r->s[r->pos] == '-'; skip(r)) {
    cn_op op = r->s[r->pos++] == '+' ? CN_OP_ADD : CN_OP_SUB;
    e = apply(r->ctx, op, 2, e, product(r), NULL);
  }
  return e;
}

static const struct {
  cn_op op;
  const char *d[3];
} derivs[] = {
#define CN_DERIV(ID, da, db, dc) {CN_OP_##ID, {da, db, dc}},
#include "tensor/derivs.def"
};
#define N_DERIVS (sizeof derivs / sizeof derivs[0])

/* The derivative of op in operand k: NULL with *none set when it contributes nothing. */
static expr *derivative(cn_ctx *ctx, cn_op op, int k, bool *none, bool *uses_result) {
  *none = true;
  for (size_t i = 0; i < N_DERIVS; i++) {
    if (derivs[i].op != op || derivs[i].d[k][0] == '\0') continue;
    *none = false;
    reader r = {ctx, derivs[i].d[k], 0, false, NULL, 0, 3, true};
    expr *e = sum(&r);
    skip(&r);
    CN_ASSERT(!r.fail && (!e || r.s[r.pos] == '\0'));
    *uses_result = r.uses_result;
    return e;
  }
  return NULL;
}

/* ---- Operations defined by their code (cn_tensor_operation) ------------------------------- */

struct cn_op_formulas {
  expr *forward;
  expr *grad[3]; /* NULL: nothing flows into that operand */
  bool grad_reads_result[3];
};

/* One formula of an operation's code, checked: NULL with a message naming the operation, the
 * formula and the column of the first error. */
static expr *formula(cn_ctx *ctx, const char *label, const char *what, const char *text, int arity,
                     bool grad, bool *reads_result) {
  reader r = {ctx, text, 0, false, NULL, 0, arity, grad};
  expr *e = sum(&r);
  skip(&r);
  if (!r.fail && r.s[r.pos] != '\0') bad(&r, "unexpected text (an operator missing?)");
  if (r.fail) {
    cn_fail(ctx, CN_ERR_INVALID, "operation \"%s\": %s \"%s\": column %zu: %s", label, what, text,
            r.fail_at, r.fail);
    return NULL;
  }
  if (!e && ctx->status == CN_OK) cn_fail(ctx, CN_ERR_NOMEM, "out of memory for a formula");
  *reads_result = r.uses_result;
  return e;
}

cn_op_formulas *cn_op_formulas_parse(cn_ctx *ctx, const cn_op_code *code) {
  cn_op_formulas *f = cn_alloc(ctx, sizeof *f);
  if (!f) return NULL;
  memset(f, 0, sizeof *f);
  bool unused;
  const char *label = code->label ? code->label : "operation";
  if (!code->forward || !code->forward[0]) {
    cn_fail(ctx, CN_ERR_INVALID, "operation \"%s\": no forward code", label);
    return NULL;
  }
  if (!(f->forward = formula(ctx, label, "forward", code->forward, code->arity, false, &unused)))
    return NULL;
  for (int k = 0; k < code->arity; k++) {
    const char *d = code->grad[k];
    if (!d || !d[0]) continue;
    char what[32];
    snprintf(what, sizeof what, "gradient of operand %c", 'a' + k);
    if (!(f->grad[k] = formula(ctx, label, what, d, code->arity, true, &f->grad_reads_result[k])))
      return NULL;
  }
  return f;
}

/* Whether two formulas are the same tree (numbers bit for bit). */
static bool same_expr(const expr *x, const expr *y) {
  if (!x || !y) return x == y;
  if (x->kind != y->kind) return false;
  switch (x->kind) {
  case E_OPERAND: return x->operand == y->operand;
  case E_RESULT:
  case E_GRAD: return true;
  case E_NUMBER: return memcmp(&x->number, &y->number, sizeof x->number) == 0;
  case E_APPLY:
    if (x->op != y->op || x->n_args != y->n_args) return false;
    for (int i = 0; i < x->n_args; i++)
      if (!same_expr(x->args[i], y->args[i])) return false;
    return true;
  }
  return false;
}

cn_status cn_op_formulas_primitive(cn_ctx *ctx, const cn_op_formulas *f, int arity, cn_op *prim,
                                   bool *is) {
  const expr *fw = f->forward;
  cn_op op = CN_OP_ID;
  *is = false;
  if (fw->kind == E_APPLY) {
    if (fw->n_args != arity) return CN_OK;
    for (int i = 0; i < arity; i++)
      if (fw->args[i]->kind != E_OPERAND || fw->args[i]->operand != i) return CN_OK;
    op = fw->op;
  } else if (arity != 1 || fw->kind != E_OPERAND || fw->operand != 0) {
    return CN_OK;
  }
  for (int k = 0; k < arity; k++) {
    bool none, uses_result;
    expr *rule = derivative(ctx, op, k, &none, &uses_result);
    if (!none && !rule) return CN_ERR_NOMEM;
    if (!same_expr(rule, f->grad[k])) return CN_OK;
  }
  *prim = op;
  *is = true;
  return CN_OK;
}

bool cn_op_formulas_differentiable(const cn_op_formulas *f, int operand) {
  return operand >= 0 && operand < 3 && f->grad[operand] != NULL;
}

bool cn_op_differentiable(cn_op op, int operand) {
  for (size_t i = 0; i < N_DERIVS; i++)
    if (derivs[i].op == op) return operand >= 0 && operand < 3 && derivs[i].d[operand][0] != '\0';
  return false;
}

/* ---- Compiling a formula into assignments ------------------------------------------------- */

/* A tensor of a gradient assignment: a slot of the forward record (slot >= 0), or an
 * intermediate or constant whose indices stay within its dims at every point (slot -1). */
typedef struct {
  cn_node *node;
  int rank;
  const int64_t *dims;
  const cn_index *map;
  int slot;
} ref;

typedef struct {
  cn_tensor *t;
  cn_ctx *ctx;
  const cn_proj *p;
  cn_asgn ***out;
  int *n, *cap;
} builder;

static cn_status push(builder *b, cn_asgn *a) {
  if (!a) return b->ctx->status ? b->ctx->status : CN_ERR_NOMEM;
  if (!cn_arena_grow(b->ctx, (void **)b->out, b->cap, *b->n + 1, sizeof(cn_asgn *)))
    return CN_ERR_NOMEM;
  (*b->out)[(*b->n)++] = a;
  return CN_OK;
}

static ref slot_ref(builder *b, cn_node *node, int slot) {
  const cn_proj_slot *s = &b->p->slot[slot];
  return (ref){node, s->rank, s->dims, s->map, slot};
}

/* A node shaped like the product space's box, read and written at each point's position in it
 * (iterator minus its first value, which may be negative in a Tile record). */
static bool product_ref(builder *b, ref *out) {
  const cn_proj *p = b->p;
  if (p->n_product > CN_MAX_RANK) {
    cn_fail(b->ctx, CN_ERR_UNSUPPORTED,
            "the code of \"%s\" (#%d) needs an intermediate over %d loops (at most %d)",
            b->t->label, b->t->id, p->n_product, CN_MAX_RANK);
    return false;
  }
  cn_index *map = cn_alloc(b->ctx, sizeof *map * (size_t)(p->n_product + 1));
  cn_node *node = cn_node_create(b->ctx, "grad_tmp", b->t->prec, p->n_product, p->sizes);
  if (!map || !node) return false;
  /* written and read only by this formula's assignments, all in the one tree cn_graph_backprop
   * returns, and no handle to it leaves this file: private to whichever routine runs that tree,
   * so the schedule may inline it (src/sched/virtual.c) */
  if (cn_node_set_memory(node, CN_MEM_VIRTUAL) != CN_OK) return false;
  for (int i = 0; i < p->n_product; i++)
    map[i] = cn_index_affine(1, &p->iters[i], (const int64_t[]){1}, -p->lo[i]);
  *out = (ref){node, p->n_product, p->sizes, map, -1};
  return true;
}

static cn_status assign(builder *b, const ref *lhs, bool init, cn_op accum, cn_op op, int n,
                        const ref *rhs) {
  cn_proj_tensor rt[3];
  cn_buffer buf[3];
  int from[4] = {lhs->slot, -1, -1, -1};
  for (int i = 0; i < n; i++) {
    rt[i] = (cn_proj_tensor){rhs[i].rank, rhs[i].dims, rhs[i].map};
    buf[i] = (cn_buffer){rhs[i].node, false};
    from[i + 1] = rhs[i].slot;
  }
  /* the forward record's whole space: ranges, constraints, valid sets (without its `=:`
   * initialization, which is not this assignment's) */
  cn_proj *rec = cn_proj_over(b->ctx, b->p, (cn_proj_tensor){lhs->rank, lhs->dims, lhs->map}, n, rt,
                              from, false);
  if (!rec) return b->ctx->status;
  return push(b, cn_asgn_accum(b->ctx, init, accum, lhs->node, op, buf, rec));
}

static cn_status emit(builder *b, const expr *e, const ref *target, bool init, cn_op accum);

/* The ref of a leaf, or of an intermediate holding a compound sub-expression. */
static cn_status operand_ref(builder *b, const expr *e, ref *out) {
  cn_tensor *t = b->t;
  switch (e->kind) {
  case E_OPERAND: *out = slot_ref(b, t->args[e->operand]->value, e->operand + 1); return CN_OK;
  case E_RESULT: *out = slot_ref(b, t->value, 0); return CN_OK;
  case E_GRAD: *out = slot_ref(b, t->grad, 0); return CN_OK;
  case E_NUMBER: {
    cn_node *c = cn_node_create(b->ctx, "grad_const", t->prec, 0, NULL);
    /* virtual for the reason grad_tmp is (product_ref) */
    if (!c || cn_node_set_memory(c, CN_MEM_VIRTUAL) != CN_OK) return b->ctx->status;
    *out = (ref){c, 0, NULL, NULL, -1};
    return push(b, cn_asgn_fetch_constant(b->ctx, c, e->number));
  }
  case E_APPLY:
    if (!product_ref(b, out)) return b->ctx->status;
    return emit(b, e, out, true, CN_OP_ADD);
  }
  return CN_OK;
}

static cn_status emit(builder *b, const expr *e, const ref *target, bool init, cn_op accum) {
  /* g_k =+ -x is g_k =- x */
  if (e->kind == E_APPLY && e->op == CN_OP_NEG && !init && accum == CN_OP_ADD)
    return emit(b, e->args[0], target, false, CN_OP_SUB);
  if (e->kind != E_APPLY) {
    ref leaf = {NULL, 0, NULL, NULL, -1};
    cn_status st = operand_ref(b, e, &leaf);
    return st != CN_OK ? st : assign(b, target, init, accum, CN_OP_ID, 1, &leaf);
  }
  ref args[3] = {{NULL, 0, NULL, NULL, -1}, {NULL, 0, NULL, NULL, -1}, {NULL, 0, NULL, NULL, -1}};
  for (int i = 0; i < e->n_args; i++) {
    cn_status st = operand_ref(b, e->args[i], &args[i]);
    if (st != CN_OK) return st;
  }
  return assign(b, target, init, accum, e->op, e->n_args, args);
}

/* ---- Forward and backprop ------------------------------------------------------------------- */

cn_asgn *cn_tensor_forward_asgn(cn_tensor *t) {
  cn_ctx *ctx = t->g->ctx;
  if (t->formulas) { /* its forward formula at every point, compound parts in intermediates */
    cn_asgn **items = NULL;
    int n = 0, cap = 0;
    builder b = {t, ctx, t->proj, &items, &n, &cap};
    ref target = slot_ref(&b, t->value, 0);
    if (emit(&b, t->formulas->forward, &target, true, t->accum) != CN_OK) return NULL;
    return n == 1 ? items[0] : cn_asgn_seq(ctx, n, items);
  }
  cn_buffer buf[3];
  for (int i = 0; i < cn_tensor_n_operands(t); i++) buf[i] = (cn_buffer){t->args[i]->value, false};
  return cn_asgn_accum(ctx, true, t->accum, t->value, t->prim, buf, t->proj);
}

static cn_status no_rule(cn_tensor *t, const char *why) {
  return cn_fail(t->g->ctx, CN_ERR_UNSUPPORTED, "no gradient for \"%s\" (#%d): %s", t->label, t->id,
                 why);
}

cn_status cn_tensor_backprop_asgn(cn_tensor *t, cn_asgn ***out, int *n, int *cap) {
  cn_ctx *ctx = t->g->ctx;
  builder b = {t, ctx, t->proj, out, n, cap};
  bool gated = t->accum == CN_OP_MAX || t->accum == CN_OP_MIN;
  /* At most one visited point per LHS cell: whatever the accumulation (Tile's `=` and `*=`
   * included), a written cell holds prim(operands) of its one point. */
  bool single = cn_proj_lhs_injective(t->proj);
  if (!gated && t->accum != CN_OP_ADD && !single) {
    char why[160];
    snprintf(why, sizeof why,
             "only +, max and min accumulations have a gradient rule where several points write "
             "one cell, and it accumulates with %s",
             cn_op_name(t->accum));
    return no_rule(t, why);
  }
  int n_operands = cn_tensor_n_operands(t);
  for (int k = 0; k < n_operands; k++) {
    cn_tensor *arg = t->args[k];
    if (!arg->diff) continue;
    bool none, uses_result = false;
    expr *d = NULL;
    if (t->formulas) {
      d = t->formulas->grad[k];
      none = !d;
      uses_result = t->formulas->grad_reads_result[k];
    } else {
      d = derivative(ctx, t->prim, k, &none, &uses_result);
    }
    if (none) continue;
    if (!d) return ctx->status;
    if (uses_result && !single)
      return no_rule(t, "its derivative reads the result, which a reduction does not hold");
    if (gated) { /* d counts only where prim(operands) attains the result v */
      expr *ops[3] = {NULL, NULL, NULL}, *v = cn_alloc(ctx, sizeof *v);
      expr *zero = cn_alloc(ctx, sizeof *zero);
      if (!v || !zero) return CN_ERR_NOMEM;
      v->kind = E_RESULT;
      zero->kind = E_NUMBER;
      for (int i = 0; i < n_operands; i++) {
        if (!(ops[i] = cn_alloc(ctx, sizeof *ops[i]))) return CN_ERR_NOMEM;
        ops[i]->kind = E_OPERAND;
        ops[i]->operand = i;
      }
      expr *f = t->formulas ? t->formulas->forward
                : t->prim == CN_OP_ID
                    ? ops[0]
                    : apply(ctx, t->prim, n_operands, ops[0], n_operands > 1 ? ops[1] : NULL,
                            n_operands > 2 ? ops[2] : NULL);
      d = apply(ctx, CN_OP_WHERE, 3, apply(ctx, CN_OP_EQ, 2, f, v, NULL), d, zero);
      if (!d) return CN_ERR_NOMEM;
    }
    ref target = slot_ref(&b, arg->grad, k + 1);
    cn_status st = emit(&b, d, &target, false, CN_OP_ADD);
    if (st != CN_OK) return st;
  }
  return CN_OK;
}

/* ---- Pointwise records for updates outside an operation -------------------------------------- */

cn_proj *cn_pointwise_proj(cn_ctx *ctx, cn_node *target, int n_refs, cn_node *const *refs) {
  int rank = cn_node_rank(target);
  cn_symbol iters[CN_MAX_RANK];
  int64_t sizes[CN_MAX_RANK], dims[4][CN_MAX_RANK];
  cn_index maps[4][CN_MAX_RANK];
  cn_index axis_index[CN_MAX_RANK];
  int n_product = 0;
  for (int a = 0; a < rank; a++) {
    dims[0][a] = cn_node_dim(target, a);
    if (dims[0][a] == 1) {
      axis_index[a] = cn_index_fixed(0);
    } else {
      char name[16];
      snprintf(name, sizeof name, "i%d", a);
      cn_symbol s = cn_symbol_create(ctx, name, dims[0][a]);
      if (s < 0) return NULL;
      iters[n_product] = s;
      sizes[n_product++] = dims[0][a];
      axis_index[a] = cn_index_iter(s);
    }
    maps[0][a] = axis_index[a];
  }
  cn_proj_tensor rt[3];
  for (int r = 0; r < n_refs; r++) {
    int rr = cn_node_rank(refs[r]);
    for (int j = 0; j < rr; j++) {
      int a = rank - rr + j; /* right-aligned; surplus leading axes of size 1 read cell 0 (a
                                number's unit axis updating a scalar) */
      dims[r + 1][j] = cn_node_dim(refs[r], j);
      if (a < 0 && dims[r + 1][j] != 1) {
        cn_fail(ctx, CN_ERR_INVALID, "%s has more axes than %s, which it updates",
                cn_node_describe(refs[r]), cn_node_describe(target));
        return NULL;
      }
      if (a >= 0 && dims[r + 1][j] == dims[0][a]) {
        maps[r + 1][j] = axis_index[a];
      } else if (dims[r + 1][j] == 1) {
        maps[r + 1][j] = cn_index_fixed(0);
      } else {
        cn_fail(ctx, CN_ERR_INVALID, "axis %d of %s (size %lld) does not broadcast to %s", j,
                cn_node_describe(refs[r]), (long long)dims[r + 1][j], cn_node_describe(target));
        return NULL;
      }
    }
    rt[r] = (cn_proj_tensor){rr, dims[r + 1], maps[r + 1]};
  }
  return cn_proj_create(ctx, n_product, iters, sizes, (cn_proj_tensor){rank, dims[0], maps[0]},
                        n_refs, rt);
}
