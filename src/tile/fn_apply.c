/* Tile functions, the evaluator (issue 7, tile-edsl): cn_tile_fn_apply runs the statements
 * fn_read.c parsed, in order, against tensor and dim arguments: declarations and bind_dims bind
 * names, a TensorOutput waits for its contraction (which takes its dims and every add_constraint
 * of its tensor), contractions compile through cn_tile_contract, and elementwise expressions
 * build tensors.
 *
 * Elementwise expressions follow tile-edsl's list: + - * / (unary -), == != < > <= >=, sqrt, exp,
 * log, sin, cos, tanh, sigmoid, pow, select. Sub-expressions of dims and numbers are constants
 * (integer arithmetic while every part is an integer, as Tile's dims); a constant meeting a tensor
 * becomes a scalar. Operands broadcast NumPy-style over their memory-order dims (right-aligned; a
 * dim of 1 stretches). Each operation is a cannl einsum applying the op (cn_tensor_einsum with a
 * spec naming every axis), so its result has output axes only and a shape known at once (a plain
 * pointwise result's shape is inferred at materialization, and cannl's per-row broadcasting differs
 * from NumPy's), and it differentiates like any einsum.
 *
 * Invariants: the names an application binds never move (their array holds the function's
 * max_names at once), so a scope may point into it; every failure is positioned in the body,
 * except the argument checks of cn_tile_fn_apply (count, graph, context, a header's types). */
#include "tile/function.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- Application ---- */

/* A TensorOutput waiting for its contraction. */
typedef struct {
  cn_tile_name_ref name;
  int rank;
  int64_t dims[CN_MAX_RANK];
  bool done;
} pending_output;

typedef struct {
  cn_graph *g;
  const cn_tile_fn *fn;
  cn_tile_src src;
  cn_tile_name *names;
  int n_names;
  pending_output *outputs;
  int n_outputs;
  cn_tile_note_fn *note; /* NULL: nobody asked (cn_tile_fn_apply) */
  void *user;
} env;

/* Tells the caller that the tensors built since the last note come from the body at `at`. */
static void note_at(env *ev, size_t at) {
  if (!ev->note) return;
  cn_source text = {ev->src.file, NULL, ev->src.text, ev->src.line, ev->src.col};
  int line = 1, col = (int)at + 1;
  if (ev->src.file) cn_source_locate(&text, at, &line, &col);
  ev->note(ev->user, line, col);
}

static cn_tile_scope scope_of(const env *ev) {
  return (cn_tile_scope){ev->n_names, ev->names};
}

static const cn_tile_name *lookup(const env *ev, const char *name, size_t len) {
  cn_tile_scope sc = scope_of(ev);
  return cn_tile_lookup(&sc, name, len);
}

static pending_output *pending(env *ev, const char *name, size_t len) {
  for (int i = 0; i < ev->n_outputs; i++)
    if (!ev->outputs[i].done && cn_tile_same_name(&ev->outputs[i].name, name, len))
      return &ev->outputs[i];
  return NULL;
}

static cn_tile_name *bind(env *ev, const char *name, size_t len, cn_tile_name_kind kind) {
  CN_ASSERT(ev->n_names < ev->fn->max_names);
  cn_tile_name *e = &ev->names[ev->n_names++];
  *e = (cn_tile_name){.name = name, .len = len, .kind = kind};
  return e;
}

static const char *kind_name(cn_tile_name_kind kind) {
  return kind == CN_TILE_TENSOR ? "a tensor" : kind == CN_TILE_INDEX ? "an index" : "a dim";
}

/* A name taking a new meaning must not be an output waiting for its contraction. */
static bool free_name(env *ev, const cn_tile_name_ref *n) {
  if (!pending(ev, n->name, n->len)) return true;
  cn_tile_fail_at(&ev->src, n->at, "'%.*s' is declared by TensorOutput: its contraction defines it",
                  (int)n->len, n->name);
  return false;
}

static bool bind_dims(env *ev, const cn_tile_stmt *s) {
  const cn_tile_name_ref *t = &s->target;
  const cn_tile_name *e = lookup(ev, t->name, t->len);
  if (!e || e->kind != CN_TILE_TENSOR) {
    cn_tile_fail_at(&ev->src, t->at, e ? "'%.*s' is %s, not a tensor" : "unknown tensor '%.*s'%s",
                    (int)t->len, t->name, e ? kind_name(e->kind) : "");
    return false;
  }
  if (!cn_tile_check_known(&ev->src, t->at, e)) return false;
  if (s->n_names != e->rank) {
    cn_tile_fail_at(&ev->src, t->at, "'%.*s' has %d axes (%s) but bind_dims names %d", (int)t->len,
                    t->name, e->rank, cn_tensor_shape(e->tensor), s->n_names);
    return false;
  }
  const int64_t *dims = e->dims; /* names never move: their array is allocated whole */
  for (int a = 0; a < s->n_names; a++) {
    const cn_tile_name_ref *n = &s->names[a];
    const cn_tile_name *d = lookup(ev, n->name, n->len);
    if (d && d->kind == CN_TILE_DIM && d->value != dims[a]) {
      cn_tile_fail_at(&ev->src, n->at, "dim %.*s is %lld but axis %d of '%.*s' has size %lld",
                      (int)n->len, n->name, (long long)d->value, a, (int)t->len, t->name,
                      (long long)dims[a]);
      return false;
    }
    if (d && (d->kind == CN_TILE_TENSOR || d->kind == CN_TILE_INDEX)) {
      cn_tile_fail_at(&ev->src, n->at, "'%.*s' is %s, not a dim", (int)n->len, n->name,
                      kind_name(d->kind));
      return false;
    }
    if (!free_name(ev, n)) return false;
    if (!d || d->kind == CN_TILE_UNSET) bind(ev, n->name, n->len, CN_TILE_DIM)->value = dims[a];
  }
  return true;
}

static bool output(env *ev, const cn_tile_stmt *s) {
  const cn_tile_name_ref *t = &s->target;
  if (lookup(ev, t->name, t->len) || pending(ev, t->name, t->len)) {
    cn_tile_fail_at(&ev->src, t->at, "'%.*s' is already bound", (int)t->len, t->name);
    return false;
  }
  pending_output *o = &ev->outputs[ev->n_outputs++];
  *o = (pending_output){.name = *t, .rank = s->n_exprs};
  cn_tile_scope sc = scope_of(ev);
  for (int x = 0; x < s->n_exprs; x++) {
    if (!cn_tile_eval_int(&ev->src, &sc, s->exprs[x], &o->dims[x])) return false;
    if (o->dims[x] < 1) { /* as a contraction's size (compile.c eval_size) */
      cn_tile_fail_at(&ev->src, cn_tile_expr_start(s->exprs[x]), "dim %lld must be at least 1",
                      (long long)o->dims[x]);
      return false;
    }
  }
  return true;
}

static bool contraction(env *ev, const cn_tile_stmt *s) {
  const cn_tile_access *o = &s->c->out;
  cn_tile_constraint extra[CN_TILE_MAX_CONSTRAINTS];
  int n_extra = 0;
  const cn_tile_fn *fn = ev->fn;
  for (int k = 0; k < fn->n_stmts; k++) {
    const cn_tile_stmt *ck = &fn->stmts[k];
    if (ck->kind != CN_TILE_ST_CONSTRAINT || !cn_tile_same_name(&ck->target, o->name, o->len))
      continue;
    if (n_extra == CN_TILE_MAX_CONSTRAINTS) {
      cn_tile_fail_at(&ev->src, ck->at, "more than %d constraints", CN_TILE_MAX_CONSTRAINTS);
      return false;
    }
    extra[n_extra++] = ck->cons;
  }
  pending_output *p = pending(ev, o->name, o->len);
  cn_tile_scope sc = scope_of(ev);
  cn_tensor *t = cn_tile_contract(ev->g, &ev->src, &sc, s->c, p ? p->rank : -1, p ? p->dims : NULL,
                                  n_extra, extra);
  if (!t) return false;
  note_at(ev, s->at);
  if (p) p->done = true;
  return cn_tile_tensor_name(ev->g, t, bind(ev, o->name, o->len, CN_TILE_TENSOR));
}

/* ---- Elementwise expressions ---- */

/* A constant (integer or float) or a tensor with its memory-order dims. */
typedef struct {
  cn_tensor *t; /* NULL: a constant */
  bool is_int;
  int64_t i;
  double f;
  int rank;
  int64_t dims[CN_MAX_RANK];
  bool fresh; /* built by this expression (so it may take the statement's name) */
} value;

static bool eval(env *ev, const cn_tile_expr *e, value *out);

static double as_double(const value *v) {
  return v->is_int ? (double)v->i : v->f;
}

static cn_tensor *to_tensor(env *ev, const value *v) {
  if (v->t) return v->t;
  cn_tensor *t = cn_tensor_scalar(ev->g, as_double(v)); /* Tile's scalars have rank 0 */
  if (!t) ev->src.failed = true;
  return t;
}

/* The memory-order row lengths of t (batch, output, input): solved, since its dims are known;
 * false only when memory runs out. */
static bool rows_of(env *ev, cn_tensor *t, int n[3]) {
  static const cn_row_kind order[3] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};
  for (int k = 0; k < 3; k++)
    if ((n[k] = cn_shape_row_dims(ev->g->shapes, t->shape, order[k], NULL, 0)) < 0) {
      ev->src.failed = true;
      return false;
    }
  return true;
}

/* op applied to the operands with NumPy broadcasting: one einsum whose result has output axes
 * a, b, c, ... and whose operands name their axes by the result's (a stretched axis reads its
 * only cell: the fixed index 0). */
static bool pointwise(env *ev, size_t at, cn_op op, int n, const value *args, const char *label,
                      value *out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; k < n; k++) out->rank = args[k].rank > out->rank ? args[k].rank : out->rank;
  int r = out->rank;
  for (int x = 0; x < r; x++) {
    out->dims[x] = 1;
    for (int k = 0; k < n; k++) {
      int m = x - (r - args[k].rank);
      if (m < 0 || args[k].dims[m] == 1 || args[k].dims[m] == out->dims[x]) continue;
      if (out->dims[x] != 1) {
        cn_tile_fail_at(&ev->src, at,
                        "cannot broadcast: axis %d of the result is %lld in one operand and %lld "
                        "in another",
                        x, (long long)out->dims[x], (long long)args[k].dims[m]);
        return false;
      }
      out->dims[x] = args[k].dims[m];
    }
  }
  cn_tensor *ts[3];
  cn_sbuf sb = {0};
  for (int k = 0; k < n; k++) {
    int rows[3], from[3];
    if (!(ts[k] = to_tensor(ev, &args[k])) || !rows_of(ev, ts[k], rows)) {
      cn_sbuf_free(&sb);
      return false;
    }
    CN_ASSERT(rows[0] + rows[1] + rows[2] == args[k].rank);
    from[0] = 0, from[1] = rows[0], from[2] = rows[0] + rows[1];
    static const int spec_order[3] = {0, 2, 1}; /* batch | input -> output */
    static const char *const seps[3] = {"|", "->", ""};
    if (k) cn_sbuf_putc(&sb, ';');
    for (int w = 0; w < 3; w++) {
      int row = spec_order[w];
      for (int a = 0; a < rows[row]; a++) {
        int m = from[row] + a, x = m + (r - args[k].rank);
        cn_sbuf_printf(&sb, " %c", args[k].dims[m] == out->dims[x] ? 'a' + x : '0');
      }
      cn_sbuf_puts(&sb, seps[w]);
    }
  }
  cn_sbuf_puts(&sb, "=>|->"); /* rows written out: an empty spec would leave them inferred */
  for (int x = 0; x < r; x++) cn_sbuf_printf(&sb, " %c", 'a' + x);
  const char *spec = cn_sbuf_finish(ev->src.ctx, &sb);
  out->t = spec ? cn_tensor_einsum(ev->g, spec, CN_OP_ADD, op, n, ts) : NULL;
  if (!out->t || cn_tensor_set_label(out->t, label) != CN_OK) {
    ev->src.failed = true; /* the tensor layer's message stands */
    return false;
  }
  out->fresh = true;
  note_at(ev, at);
  return true;
}

static bool apply1(env *ev, size_t at, cn_op op, const value *a, value *out) {
  return pointwise(ev, at, op, 1, a, cn_op_name(op), out);
}

static bool apply2(env *ev, size_t at, cn_op op, const value *a, const value *b, value *out) {
  value args[2] = {*a, *b};
  return pointwise(ev, at, op, 2, args, cn_op_name(op), out);
}

/* Integer arithmetic of dims, as in sizes: floor division, overflow and division by zero are
 * errors. */
static bool int_op(env *ev, const cn_tile_expr *e, int64_t a, int64_t b, int64_t *out) {
  bool ok = true;
  switch (e->op) {
  case CN_TILE_BIN_ADD: ok = !__builtin_add_overflow(a, b, out); break;
  case CN_TILE_BIN_SUB: ok = !__builtin_sub_overflow(a, b, out); break;
  case CN_TILE_BIN_MUL: ok = !__builtin_mul_overflow(a, b, out); break;
  default:
    if (b == 0) {
      cn_tile_fail_at(&ev->src, e->at, "division by zero");
      return false;
    }
    ok = !(a == INT64_MIN && b == -1);
    *out = a / b - (a % b != 0 && (a < 0) != (b < 0));
    break;
  }
  if (!ok) cn_tile_fail_at(&ev->src, e->at, "integer overflow");
  return ok;
}

/* Two constants: integers stay integers (dims), a float makes the result a float. */
static bool fold(env *ev, const cn_tile_expr *e, const value *a, const value *b, value *out) {
  memset(out, 0, sizeof *out);
  double x = as_double(a), y = as_double(b);
  bool ints = a->is_int && b->is_int;
  out->is_int = ints || e->op >= CN_TILE_BIN_EQ;
  switch (e->op) {
  case CN_TILE_BIN_EQ: out->i = ints ? a->i == b->i : x == y; return true;
  case CN_TILE_BIN_NE: out->i = ints ? a->i != b->i : x != y; return true;
  case CN_TILE_BIN_LT: out->i = ints ? a->i < b->i : x < y; return true;
  case CN_TILE_BIN_GT: out->i = ints ? a->i > b->i : x > y; return true;
  case CN_TILE_BIN_LE: out->i = ints ? a->i <= b->i : x <= y; return true;
  case CN_TILE_BIN_GE: out->i = ints ? a->i >= b->i : x >= y; return true;
  default: break;
  }
  if (ints) return int_op(ev, e, a->i, b->i, &out->i);
  out->f = e->op == CN_TILE_BIN_ADD   ? x + y
           : e->op == CN_TILE_BIN_SUB ? x - y
           : e->op == CN_TILE_BIN_MUL ? x * y
           : e->op == CN_TILE_BIN_DIV ? x / y
                                      : floor(x / y);
  return true;
}

static bool binary_op(env *ev, const cn_tile_expr *e, value *out) {
  value a, b;
  if (!eval(ev, e->args[0], &a) || !eval(ev, e->args[1], &b)) return false;
  if (!a.t && !b.t) return fold(ev, e, &a, &b, out);
  static const cn_op direct[] = {
      [CN_TILE_BIN_ADD] = CN_OP_ADD, [CN_TILE_BIN_SUB] = CN_OP_SUB, [CN_TILE_BIN_MUL] = CN_OP_MUL,
      [CN_TILE_BIN_DIV] = CN_OP_DIV, [CN_TILE_BIN_EQ] = CN_OP_EQ,   [CN_TILE_BIN_NE] = CN_OP_NE,
      [CN_TILE_BIN_LT] = CN_OP_LT};
  switch (e->op) {
  case CN_TILE_BIN_FLOORDIV:
    cn_tile_fail_at(&ev->src, e->at, "'//' divides dims; divide tensors with '/'");
    return false;
  case CN_TILE_BIN_GT: return apply2(ev, e->at, CN_OP_LT, &b, &a, out);
  case CN_TILE_BIN_LE:
  case CN_TILE_BIN_GE: { /* a <= b is a < b or a == b (false with a NaN, as a comparison should be)
                          */
    value lt, eq;
    const value *lo = e->op == CN_TILE_BIN_LE ? &a : &b, *hi = e->op == CN_TILE_BIN_LE ? &b : &a;
    return apply2(ev, e->at, CN_OP_LT, lo, hi, &lt) && apply2(ev, e->at, CN_OP_EQ, &a, &b, &eq) &&
           apply2(ev, e->at, CN_OP_OR, &lt, &eq, out);
  }
  default: return apply2(ev, e->at, direct[e->op], &a, &b, out);
  }
}

static const struct {
  const char *name;
  int arity;
  cn_op op; /* sigmoid is composed: recip(1 + exp(-x)), recip last */
} calls[] = {{"sqrt", 1, CN_OP_SQRT}, {"exp", 1, CN_OP_EXP},      {"log", 1, CN_OP_LOG},
             {"sin", 1, CN_OP_SIN},   {"cos", 1, CN_OP_COS},      {"tanh", 1, CN_OP_TANH},
             {"pow", 2, CN_OP_POW},   {"select", 3, CN_OP_WHERE}, {"sigmoid", 1, CN_OP_RECIP}};

static bool call(env *ev, const cn_tile_expr *e, value *out) {
  int f = 0, n_calls = (int)(sizeof calls / sizeof *calls);
  while (f < n_calls &&
         !(strlen(calls[f].name) == e->len && !strncmp(calls[f].name, e->name, e->len)))
    f++;
  if (f == n_calls) {
    char word[64];
    snprintf(word, sizeof word, "%.*s", (int)e->len, e->name);
    cn_suggest s;
    cn_suggest_init(&s, word);
    for (f = 0; f < n_calls; f++) cn_suggest_consider(&s, calls[f].name);
    cn_tile_fail_at(
        &ev->src, e->at,
        "unknown function '%.*s'%s (sqrt, exp, log, sin, cos, tanh, sigmoid, pow, select)",
        (int)e->len, e->name, cn_suggest_text(&s));
    return false;
  }
  if (e->n_args != calls[f].arity) {
    cn_tile_fail_at(&ev->src, e->at, "'%s' takes %d argument%s, got %d", calls[f].name,
                    calls[f].arity, calls[f].arity > 1 ? "s" : "", e->n_args);
    return false;
  }
  value args[3];
  for (int k = 0; k < e->n_args; k++)
    if (!eval(ev, e->args[k], &args[k])) return false;
  if (strcmp(calls[f].name, "sigmoid") == 0) { /* 1 / (1 + exp(-x)) */
    value neg, ex, den, one = {.is_int = true, .i = 1};
    return apply1(ev, e->at, CN_OP_NEG, &args[0], &neg) &&
           apply1(ev, e->at, CN_OP_EXP, &neg, &ex) &&
           apply2(ev, e->at, CN_OP_ADD, &one, &ex, &den) &&
           apply1(ev, e->at, CN_OP_RECIP, &den, out);
  }
  return pointwise(ev, e->at, calls[f].op, e->n_args, args, calls[f].name, out);
}

static bool eval(env *ev, const cn_tile_expr *e, value *out) {
  memset(out, 0, sizeof *out);
  int len = (int)e->len;
  switch (e->kind) {
  case CN_TILE_EXPR_INT: out->is_int = true, out->i = e->ival; return true;
  case CN_TILE_EXPR_FLOAT: out->f = e->fval; return true;
  case CN_TILE_EXPR_CALL: return call(ev, e, out);
  case CN_TILE_EXPR_BINARY: return binary_op(ev, e, out);
  case CN_TILE_EXPR_NEG: {
    value a;
    if (!eval(ev, e->args[0], &a)) return false;
    if (a.t) return apply1(ev, e->at, CN_OP_NEG, &a, out);
    *out = a;
    if (!a.is_int) out->f = -a.f;
    if (a.is_int && __builtin_sub_overflow(0, a.i, &out->i)) {
      cn_tile_fail_at(&ev->src, e->at, "integer overflow");
      return false;
    }
    return true;
  }
  case CN_TILE_EXPR_NAME: break;
  }
  const cn_tile_name *n = lookup(ev, e->name, e->len);
  if (n && n->kind == CN_TILE_DIM) {
    out->is_int = true;
    out->i = n->value;
    return true;
  }
  if (n && n->kind == CN_TILE_TENSOR) {
    if (!cn_tile_check_known(&ev->src, e->at, n)) return false;
    out->t = n->tensor;
    out->rank = n->rank;
    memcpy(out->dims, n->dims, sizeof out->dims);
    return true;
  }
  if (n && n->kind == CN_TILE_UNSET)
    cn_tile_fail_at(&ev->src, e->at,
                    "dim '%.*s' has no value yet (bind it with bind_dims or assign it)", len,
                    e->name);
  else if (n)
    cn_tile_fail_at(&ev->src, e->at, "'%.*s' is an index: indices appear only in contractions", len,
                    e->name);
  else if (pending(ev, e->name, e->len))
    cn_tile_fail_at(&ev->src, e->at, "'%.*s' is used before its contraction", len, e->name);
  else
    cn_tile_fail_at(&ev->src, e->at, "unknown name '%.*s'", len, e->name);
  return false;
}

static bool assign(env *ev, const cn_tile_stmt *s) {
  const cn_tile_name_ref *t = &s->target;
  value v;
  if (!free_name(ev, t) || !eval(ev, s->exprs[0], &v)) return false;
  if (!v.t && v.is_int) {
    bind(ev, t->name, t->len, CN_TILE_DIM)->value = v.i;
    return true;
  }
  cn_tensor *tensor = to_tensor(ev, &v);
  char label[128];
  snprintf(label, sizeof label, "%.*s", (int)t->len, t->name);
  if (!tensor || ((v.fresh || !v.t) && cn_tensor_set_label(tensor, label) != CN_OK)) {
    ev->src.failed = true;
    return false;
  }
  return cn_tile_tensor_name(ev->g, tensor, bind(ev, t->name, t->len, CN_TILE_TENSOR));
}

static bool run_stmt(env *ev, const cn_tile_stmt *s, cn_tensor **result) {
  switch (s->kind) {
  case CN_TILE_ST_DECLARE_DIMS:
  case CN_TILE_ST_DECLARE_INDEXES:
    for (int k = 0; k < s->n_names; k++) {
      if (!free_name(ev, &s->names[k])) return false;
      bind(ev, s->names[k].name, s->names[k].len,
           s->kind == CN_TILE_ST_DECLARE_DIMS ? CN_TILE_UNSET : CN_TILE_INDEX);
    }
    return true;
  case CN_TILE_ST_BIND_DIMS: return bind_dims(ev, s);
  case CN_TILE_ST_OUTPUT: return output(ev, s);
  case CN_TILE_ST_ASSIGN: return assign(ev, s);
  case CN_TILE_ST_CONTRACTION: return contraction(ev, s);
  case CN_TILE_ST_CONSTRAINT: return true; /* applied by the contraction of its tensor */
  case CN_TILE_ST_RETURN: {
    value v;
    if (!eval(ev, s->exprs[0], &v) || !(*result = to_tensor(ev, &v))) return false;
    if (v.fresh && cn_tensor_set_label(*result, ev->fn->name) != CN_OK) return false;
    return true;
  }
  }
  return false;
}

cn_tensor *cn_tile_fn_apply(cn_graph *g, const cn_tile_fn *fn, int n_args,
                            const cn_tile_arg *args) {
  return cn_tile_fn_apply_noted(g, fn, n_args, args, NULL, NULL);
}

cn_tensor *cn_tile_fn_apply_noted(cn_graph *g, const cn_tile_fn *fn, int n_args,
                                  const cn_tile_arg *args, cn_tile_note_fn *note, void *user) {
  if (!g) return NULL;
  cn_ctx *ctx = g->ctx;
  if (!fn || n_args != fn->n_params || (n_args && !args)) {
    cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': %d parameter(s), %d argument(s) given",
            fn ? fn->name : "NULL", fn ? fn->n_params : 0, n_args);
    return NULL;
  }
  if (fn->src.ctx != ctx) {
    cn_fail(ctx, CN_ERR_INVALID, "tile function '%s' belongs to another context", fn->name);
    return NULL;
  }
  env ev = {g, fn, fn->src, NULL, 0, NULL, 0, note, user};
  ev.names = cn_alloc(ctx, sizeof *ev.names * (size_t)(fn->max_names + 1));
  ev.outputs = cn_alloc(ctx, sizeof *ev.outputs * (size_t)(fn->n_stmts + 1));
  if (!ev.names || !ev.outputs) return NULL;
  for (int i = 0; i < n_args; i++) {
    const cn_tile_name_ref *p = &fn->params[i];
    if (fn->kinds[i] != CN_TILE_PARAM_ANY &&
        (fn->kinds[i] == CN_TILE_PARAM_TENSOR) != (args[i].tensor != NULL)) {
      cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': argument %d ('%s') must be %s (its header)",
              fn->name, i + 1, p->name,
              fn->kinds[i] == CN_TILE_PARAM_TENSOR ? "a tensor" : "an integer");
      return NULL;
    }
    if (args[i].tensor && args[i].tensor->g != g) {
      cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': argument %d ('%s') is from another graph",
              fn->name, i + 1, p->name);
      return NULL;
    }
    if (args[i].tensor) {
      if (!cn_tile_tensor_name(g, args[i].tensor, bind(&ev, p->name, p->len, CN_TILE_TENSOR)))
        return NULL;
    } else
      bind(&ev, p->name, p->len, CN_TILE_DIM)->value = args[i].dim;
  }
  cn_tensor *result = NULL;
  for (int k = 0; k < fn->n_stmts; k++)
    if (!run_stmt(&ev, &fn->stmts[k], &result)) return NULL;
  return result;
}
