/* The evaluator of the notation (issue 6), part 1 of 8 (see eval_internal.h): values, positioned
 * errors and provenance, array literals, inline declarations and %op expressions.
 *
 * Values: host numbers, booleans, strings (compared with = and <>, joined with ^), lists, tuples
 * and records (for dims, labels and ~config), tensors (optionally a `.grad` reference, or in a %cd
 * operand a `.merge` buffer), let%op / let%cd functions (closures with curried, labeled arguments),
 * %cd routines (a code tree compiled on first run) and static indices (symbols bound by `for`
 * loops, read with `!@i`, slicing with `x
 * @| i`). Inline declarations (syntax-extensions-cd-op "Inline declarations",
 * convolution-is-a-contraction "the unit boundary"): a declaration is created once per *lifting
 * point* and shared by every evaluation of the same declaration node there: at its first evaluation
 * for top-level code, when a let%op function is defined, or, for a function with a `~config` or
 * `()` parameter, each time that parameter is supplied; for a let%cd function, at each full
 * application. The declared name stays bound for the rest of the script. In %op a declaration is a
 * parameter (its label the declared name, then config.label); in %cd a non-differentiable buffer
 * (its label the declared name, then the label of the tensor chosen to enrich it). In a tensor
 * position of %op, a string "w" is the declaration {w}. Provenance: every tensor and standalone
 * update records the expression that built it, so that a conflict found only when shapes are closed
 * (at the first print, run, ...) is reported at the expression that introduced the constraint.
 * An if expression evaluates its condition on the host, then only the branch it chooses.
 *
 * Invariants: every failure is a positioned message (FILE:LINE:COL, the line, a caret) naming
 * the expression that introduced it, library messages included; nothing here aborts on user
 * input; recursion is bounded by the parser's height limit and a call-depth limit. */
#include "notation/eval_internal.h"

#include "numeric/numeric.h"

#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Values and errors ------------------------------------------------------------------- */

nt_value *nt_mk(nt_interp *I, nt_vkind kind) {
  nt_value *v = cn_alloc(I->ctx, sizeof *v);
  if (v) v->kind = kind;
  return v;
}

nt_value *nt_num(nt_interp *I, double x, bool is_int) {
  nt_value *v = nt_mk(I, NT_V_NUM);
  if (v) {
    v->num = x;
    v->is_int = is_int;
  }
  return v;
}

static nt_value *boolean(nt_interp *I, bool b) {
  nt_value *v = nt_mk(I, NT_V_BOOL);
  if (v) v->b = b;
  return v;
}

nt_value *nt_tensor_value(nt_interp *I, cn_tensor *t) {
  nt_value *v = t ? nt_mk(I, NT_V_TENSOR) : NULL;
  if (v) v->t = t;
  return v;
}

/* The last %cd assignment built that writes the node (an update of the graph whose LHS it is), or
 * NULL; *count: how many do. The NaN check sees a routine's writes only after the whole run, so
 * when several assignments write the node the report names the last built. */
static const cn_update *last_writer(nt_interp *I, int node_id, int *count) {
  const cn_update *last = NULL;
  *count = 0;
  for (int i = 0; i < I->g->n_updates; i++) {
    const cn_update *u = I->g->updates[i];
    const cn_tensor *lhs = u->lhs.tensor;
    const cn_node *node = lhs ? (u->lhs.grad ? lhs->grad : lhs->value) : NULL;
    if (node && node->id == node_id) last = u, ++*count;
  }
  return last;
}

/* A failure about a node (ctx->failed_node: a run stopped by the NaN check, a buffer that cannot
 * be allocated) is reported at the position where the script built the node's tensor, with the
 * operation that computes it (or the %cd assignment that wrote it) and the statement at `at`,
 * keeping its status (a runtime failure, memory). False when the node is not one of the script's
 * tensors. */
static bool explain_node_failure(nt_interp *I, cn_nt_pos at) {
  cn_ctx *ctx = I->ctx;
  bool grad = false;
  cn_tensor *t = cn_graph_tensor_of_node(I->g, ctx->failed_node, &grad);
  cn_status status = cn_ctx_status(ctx);
  const char *msg = t ? cn_strdup(ctx, cn_ctx_error(ctx)) : NULL;
  if (!msg) return false;
  /* the runtime names the node ('y' (#9)); the script knows the tensor ("y" (#2)), as print shows
   * it */
  const char *node = cn_node_describe(grad ? t->grad : t->value), *hit = strstr(msg, node);
  if (hit) {
    cn_sbuf sb = {0};
    cn_sbuf_printf(&sb, "%.*s\"%s%s\" (#%d)%s", (int)(hit - msg), msg, t->label,
                   grad ? ".grad" : "", t->id, hit + strlen(node));
    if (!(msg = cn_sbuf_finish(ctx, &sb))) return true; /* out of memory, said so */
  }
  const cn_nt_pos *where =
      t->id < I->cap_tensor_at && I->tensor_at[t->id].src ? &I->tensor_at[t->id] : NULL;
  char op[160] = "";
  int writers;
  const cn_update *u = last_writer(I, ctx->failed_node, &writers);
  if (u) { /* a %cd assignment wrote it: its operation, at the assignment */
    char spelled[16] = "=:";
    cn_op_assign_spelling(u->accum, u->init, spelled, sizeof spelled);
    snprintf(op, sizeof op, "; written by %s %s%s", spelled, cn_op_name(u->prim),
             writers > 1 ? ", the last of the %cd assignments writing it" : "");
    if (u->sop && u->sop->id < I->cap_op_at && I->op_at[u->sop->id].src)
      where = &I->op_at[u->sop->id];
  } else if (t->kind == CN_TK_ACCUM || t->kind == CN_TK_TILE) {
    /* an einsum that reduces nothing (a Tile elementwise operation) accumulates nothing */
    bool pointwise =
        (t->sop && t->sop->kind == CN_SL_POINTWISE) || (t->proj && cn_proj_lhs_injective(t->proj));
    snprintf(op, sizeof op, "; %s%s%s%s%s", grad ? "the gradient of " : "", "computed by ",
             t->formulas ? "its operation's code" : cn_op_name(t->prim),
             pointwise ? "" : ", accumulated by ", pointwise ? "" : cn_op_name(t->accum));
  } else if (grad) {
    snprintf(op, sizeof op, "; the gradient of a %s", t->is_param ? "parameter" : "leaf");
  }
  cn_nt_fail_at(ctx, where ? *where : at, "%s%s (%s line %d)", msg, op,
                status == CN_ERR_RUNTIME ? "the routine ran for" : "needed by", at.line);
  ctx->status = status; /* positioned like a script error, but a runtime or memory failure */
  return true;
}

/* Re-issues the context's last message at pos (library failures point at the expression), except
 * an allocation failure, which has no position worth adding. */
nt_value *nt_fail_here(nt_interp *I, cn_nt_pos pos) {
  if (I->in_prelude) pos = I->call_at;
  if (I->ctx->failed_node && explain_node_failure(I, pos)) return NULL;
  if (cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return NULL; /* stays CN_ERR_NOMEM */
  const char *msg = cn_strdup(I->ctx, cn_ctx_error(I->ctx));
  cn_nt_fail_at(I->ctx, pos, "%s", msg ? msg : "out of memory");
  return NULL;
}

nt_value *nt_fail(nt_interp *I, cn_nt_pos pos, const char *fmt, ...) {
  char what[600]; /* cn_nt_fail_at's own limit */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_nt_fail_at(I->ctx, I->in_prelude ? I->call_at : pos, "%s", what);
  return NULL;
}

const char *nt_kind_name(nt_vkind k) {
  static const char *const names[] = {"()",        "a number",      "a boolean", "a string",
                                      "a tensor",  "a list",        "a record",  "a function",
                                      "a routine", "a static index"};
  return names[k];
}

const char *nt_join_label(nt_interp *I, const char *a, const char *b) {
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s_%s", a, b);
  return cn_sbuf_finish(I->ctx, &sb);
}

/* ---- Provenance ---------------------------------------------------------------------------- */

static bool record_at(nt_interp *I, cn_nt_pos **table, int *cap, int id, cn_nt_pos pos) {
  if (id < 0) return true;
  if (id >= *cap) {
    int old = *cap;
    if (!cn_arena_grow(I->ctx, (void **)table, cap, id + 1, sizeof **table)) return false;
    memset(*table + old, 0, sizeof **table * (size_t)(*cap - old));
  }
  (*table)[id] = pos;
  return true;
}

void nt_note(nt_interp *I, cn_nt_pos pos) {
  if (I->in_prelude) return; /* noted at the script's application when it returns */
  cn_graph *g = I->g;
  for (; I->noted_tensors < g->n_tensors; I->noted_tensors++) {
    cn_tensor *t = g->tensors[I->noted_tensors];
    /* a failed allocation only loses a position for a later message */
    if (t->sop) record_at(I, &I->op_at, &I->cap_op_at, t->sop->id, pos);
    record_at(I, &I->tensor_at, &I->cap_tensor_at, t->id, pos);
  }
  for (; I->noted_updates < g->n_updates; I->noted_updates++) {
    cn_update *u = g->updates[I->noted_updates];
    if (u->sop) record_at(I, &I->op_at, &I->cap_op_at, u->sop->id, pos);
  }
}

/* The number after `key` in msg, or -1. */
static int number_after(const char *msg, const char *key) {
  const char *p = strstr(msg, key);
  if (!p) return -1;
  p += strlen(key);
  int n = 0;
  if (*p < '0' || *p > '9') return -1;
  while (*p >= '0' && *p <= '9' && n < 100000000) n = n * 10 + (*p++ - '0');
  return n;
}

/* A padded reader refused because its input's buffer already exists: the message names the line
 * of the statement that computed that input. msg unchanged when it is another error or the line
 * is unknown; NULL on an allocation failure. */
static const char *with_computing_line(nt_interp *I, const char *msg) {
  const char *needs = strstr(msg, " needs padding margins");
  if (!needs || !strstr(needs, "buffer was allocated")) return msg;
  const char *open = NULL;
  for (const char *p = msg; (p = strstr(p, "(#")) != NULL && p < needs; p++) open = p;
  int id = open ? number_after(open, "(#") : -1;
  if (id < 0 || id >= I->cap_computed_at || !I->computed_at[id].src) return msg;
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s (the tensor was computed for line %d)", msg, I->computed_at[id].line);
  return cn_sbuf_finish(I->ctx, &sb);
}

bool nt_materialize(nt_interp *I, cn_nt_pos at) {
  int first = I->n_computed;
  nt_guess_shapes(I, first);
  if (cn_graph_materialize(I->g) == CN_OK) {
    nt_note_broadcasts(I, first);
    for (; I->n_computed < I->g->n_tensors; I->n_computed++) /* a failure only loses a line */
      record_at(I, &I->computed_at, &I->cap_computed_at, I->g->tensors[I->n_computed]->id, at);
    return true;
  }
  /* a literal's buffer that cannot be allocated (its data is copied in now) is positioned like
   * any node failure; other allocation failures have no position worth adding */
  if (cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return nt_fail_here(I, at), false;
  const char *msg = cn_strdup(I->ctx, cn_ctx_error(I->ctx));
  if (!msg || !(msg = with_computing_line(I, msg))) return false;
  /* Library messages name the failing operation as "operation #K" (shape and projection
   * conflicts), else the tensor concerned as "(#N)". */
  int op = number_after(msg, "operation #"), t = op < 0 ? number_after(msg, "(#") : -1;
  const cn_nt_pos *where = op >= 0 && op < I->cap_op_at && I->op_at[op].src ? &I->op_at[op]
                           : t >= 0 && t < I->cap_tensor_at && I->tensor_at[t].src
                               ? &I->tensor_at[t]
                               : NULL;
  if (!where) return nt_fail_here(I, at), false;
  return nt_fail(I, *where, "%s (found when line %d needed the shapes)", msg, at.line), false;
}

/* ---- Environments ---------------------------------------------------------------------------- */

/* Marks the tensors a bound value holds as named (cn_tensor_set_named): the script may print
 * them or hand them to code written later, so the schedule must keep their nodes. */
static void mark_named(nt_value *v) {
  if (!v) return;
  if (v->kind == NT_V_TENSOR && v->t) cn_tensor_set_named(v->t);
  if (v->kind == NT_V_LIST || v->kind == NT_V_RECORD)
    for (int i = 0; i < v->n; i++) mark_named(v->items[i]);
  if (v->kind == NT_V_FUNC)
    for (int i = 0; i < v->fn.n_given; i++) mark_named(v->fn.given[i]);
}

bool nt_bind(nt_interp *I, nt_env **e, const char *name, nt_value *v) {
  if (!I->in_prelude) mark_named(v);
  nt_env *b = cn_alloc(I->ctx, sizeof *b);
  if (!b) return false;
  b->name = name;
  b->v = v;
  b->next = *e;
  *e = b;
  return true;
}

bool nt_bind_global(nt_interp *I, const char *name, nt_value *v) {
  mark_named(v);
  return cn_map_put(I->ctx, &I->globals, name, v);
}

/* Local environments are short (function parameters, `let ... in`, loop indices); the globals,
 * as long as the script, are a map. */
nt_value *nt_lookup(nt_interp *I, nt_env *e, const char *name) {
  for (; e; e = e->next)
    if (strcmp(e->name, name) == 0) return e->v;
  nt_value *v = I->in_prelude ? NULL : cn_map_get(&I->globals, name);
  return v ? v : cn_map_get(&I->prelude, name);
}

void nt_suggest_bound(nt_interp *I, const nt_env *e, cn_suggest *s) {
  for (; e; e = e->next) cn_suggest_consider(s, e->name);
  for (int i = 0; i < I->globals.cap; i++) cn_suggest_consider(s, I->globals.slots[i].key);
}

nt_value *nt_fail_unbound(nt_interp *I, const nt_env *e, cn_nt_pos pos, const char *name) {
  cn_suggest s;
  cn_suggest_init(&s, name);
  nt_suggest_bound(I, e, &s);
  return nt_fail(I, pos, "unbound name '%s'%s", name, cn_suggest_text(&s));
}

/* ---- Conversions ----------------------------------------------------------------------------- */

static cn_tensor *literal_tensor(nt_interp *I, const cn_nt_expr *e, const char *label,
                                 cn_dims *rows_out);

/* A tensor for v: numbers become number tensors, array literals their data tensor. */
cn_tensor *nt_tensor_of(nt_interp *I, nt_value *v, cn_nt_pos pos) {
  if (!v) return NULL;
  if (v->kind == NT_V_LIST && v->literal) {
    if (!v->t) v->t = literal_tensor(I, v->literal, NULL, NULL);
    return v->t;
  }
  if (v->kind == NT_V_NUM) {
    cn_tensor *t = cn_tensor_number(I->g, v->num);
    if (!t) nt_fail_here(I, pos);
    return t;
  }
  if (v->kind != NT_V_TENSOR) {
    nt_fail(I, pos, "expected a tensor, found %s",
            v->kind == NT_V_INDEX ? "a static index (read its value with !@)"
                                  : nt_kind_name(v->kind));
    return NULL;
  }
  if (v->merge) {
    nt_fail(I, pos, "%s",
            "a merge buffer (.merge) is read only as an operand of a %cd assignment, as in "
            "p.grad =+ p.grad.merge");
    return NULL;
  }
  if (!v->grad) return v->t;
  cn_tensor *t = cn_tensor_grad_of(I->g, v->t);
  if (!t) nt_fail_here(I, pos);
  return t;
}

/* The shortest %g text that reads back to v (for messages). */
static void shortest(char *buf, size_t cap, double v) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, cap, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) return;
  }
}

bool nt_as_int(nt_interp *I, nt_value *v, cn_nt_pos pos, int64_t *out) {
  if (!v) return false;
  char what[96];
  if (v->kind != NT_V_NUM || v->num != floor(v->num)) {
    if (v->kind == NT_V_NUM) shortest(what, sizeof what, v->num);
    nt_fail(I, pos, "expected an integer, found %s",
            v->kind == NT_V_NUM ? what : nt_kind_name(v->kind));
    return false;
  }
  if (fabs(v->num) > 9e15) {
    shortest(what, sizeof what, v->num);
    nt_fail(I, pos, "the integer %s is out of range (at most 9e15 in magnitude)", what);
    return false;
  }
  *out = (int64_t)v->num;
  return true;
}

/* The symbol of a static index, created on first use under the name its let or loop gave. */
bool nt_index_symbol(nt_interp *I, nt_value *v, cn_nt_pos pos, cn_symbol *out) {
  if (!v->index.created) {
    v->index.sym =
        cn_symbol_create(I->ctx, v->index.name ? v->index.name : "index", v->index.range);
    if (v->index.sym < 0) return nt_fail_here(I, pos), false;
    v->index.created = true;
    if (!nt_note_index(I, v)) return false;
  }
  *out = v->index.sym;
  return true;
}

/* ---- Literals ------------------------------------------------------------------------------ */

typedef struct {
  int n_axes;
  int kind[CN_MAX_RANK]; /* 0 batch (array), 1 input (tuple), 2 output (list) */
  int64_t dims[CN_MAX_RANK];
  const char *labels[CN_MAX_RANK];
  double *values;
  size_t n_values, cap_values;
} literal;

/* An array literal: numbers (possibly negated) nested in lists, tuples and arrays, with axis
 * labels; recursion is bounded by the parser's height limit. */
static bool is_literal(const cn_nt_expr *e) {
  switch (e->kind) {
  case CN_NT_NUMBER: return true;
  case CN_NT_LIST:
  case CN_NT_ARRAY:
  case CN_NT_TUPLE:
    for (int i = 0; i < e->u.items.n; i++)
      if (!is_literal(e->u.items.items[i])) return false;
    return true;
  case CN_NT_ANNOT: return is_literal(e->u.annot.expr);
  case CN_NT_PREFIX: return strcmp(e->u.prefix.op, "-") == 0 && is_literal(e->u.prefix.operand);
  default: return false;
  }
}

/* Collects the axes (from the shape of the first element at each depth) and the values in
 * nesting order; every element of an axis must have the same shape. */
static bool literal_walk(nt_interp *I, const cn_nt_expr *e, literal *L, int depth, double sign) {
  const char *label = NULL;
  if (e->kind == CN_NT_ANNOT) {
    label = e->u.annot.label;
    e = e->u.annot.expr;
  }
  if (e->kind == CN_NT_PREFIX) return literal_walk(I, e->u.prefix.operand, L, depth, -sign);
  if (e->kind == CN_NT_NUMBER) {
    if (depth != L->n_axes && L->n_values > 0) {
      nt_fail(I, e->pos, "%s", "a literal's rows must all have the same shape");
      return false;
    }
    if (L->n_values == L->cap_values) {
      size_t cap = L->cap_values ? 2 * L->cap_values : 16;
      double *v = cn_alloc(I->ctx, cap * sizeof *v);
      if (!v) return false;
      if (L->n_values) memcpy(v, L->values, L->n_values * sizeof *v);
      L->values = v;
      L->cap_values = cap;
    }
    if (L->n_values == 0) L->n_axes = depth;
    L->values[L->n_values++] = sign * e->u.number.value;
    return true;
  }
  int kind = e->kind == CN_NT_ARRAY ? 0 : e->kind == CN_NT_TUPLE ? 1 : 2;
  if (depth >= CN_MAX_RANK) {
    nt_fail(I, e->pos, "%s", "a literal has too many axes");
    return false;
  }
  int n = e->u.items.n;
  if (L->n_values == 0) {
    L->kind[depth] = kind;
    L->dims[depth] = n;
    L->labels[depth] = label;
  } else if (depth >= L->n_axes || L->kind[depth] != kind || L->dims[depth] != n) {
    nt_fail(I, e->pos, "%s", "a literal's rows must all have the same shape");
    return false;
  }
  if (n == 0) {
    nt_fail(I, e->pos, "%s", "an empty literal axis");
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!literal_walk(I, e->u.items.items[i], L, depth + 1, sign)) return false;
  return true;
}

/* A data tensor: nesting order (lists = output axes, tuples = input, arrays = batch) is
 * permuted into memory order (batch, output, input). With rows_out, also the literal's rows
 * (arena copies), for a parameter that takes its shape from its initial value. */
static cn_tensor *literal_tensor(nt_interp *I, const cn_nt_expr *e, const char *label,
                                 cn_dims *rows_out) {
  literal L;
  memset(&L, 0, sizeof L);
  if (!literal_walk(I, e, &L, 0, 1)) return NULL;
  static const int memory_kind[3] = {0, 2, 1}; /* batch, output, input */
  int order[CN_MAX_RANK], n = 0;
  for (int m = 0; m < 3; m++)
    for (int a = 0; a < L.n_axes; a++)
      if (L.kind[a] == memory_kind[m]) order[n++] = a;
  int64_t nest_stride[CN_MAX_RANK];
  for (int a = L.n_axes - 1, s = 1; a >= 0; a--) {
    nest_stride[a] = s;
    s *= (int)L.dims[a];
  }
  double *v = cn_alloc(I->ctx, L.n_values * sizeof *v);
  if (!v) return NULL;
  for (size_t cell = 0; cell < L.n_values; cell++) { /* cell in memory order */
    size_t rest = cell, src = 0;
    for (int k = n - 1; k >= 0; k--) {
      int a = order[k];
      src += (rest % (size_t)L.dims[a]) * (size_t)nest_stride[a];
      rest /= (size_t)L.dims[a];
    }
    v[cell] = L.values[src];
  }
  int64_t dims[3][CN_MAX_RANK];
  const char *labels[3][CN_MAX_RANK];
  int counts[3] = {0, 0, 0};
  bool any_label[3] = {false, false, false};
  for (int k = 0; k < n; k++) {
    int a = order[k], row = L.kind[a];
    labels[row][counts[row]] = L.labels[a];
    any_label[row] |= L.labels[a] != NULL;
    dims[row][counts[row]++] = L.dims[a];
  }
  cn_dims d = {{counts[0], dims[0], any_label[0] ? labels[0] : NULL},
               {counts[1], dims[1], any_label[1] ? labels[1] : NULL},
               {counts[2], dims[2], any_label[2] ? labels[2] : NULL}};
  cn_tensor *t = cn_tensor_data(I->g, label ? label : "literal", &d, v, L.n_values);
  if (!t) nt_fail_here(I, e->pos);
  if (t && rows_out) {
    cn_axes *rows[3] = {&rows_out->batch, &rows_out->input, &rows_out->output};
    for (int k = 0; k < 3; k++) {
      int64_t *copy = cn_alloc(I->ctx, sizeof *copy * (size_t)(counts[k] + 1));
      if (!copy) return NULL;
      memcpy(copy, dims[k], sizeof *copy * (size_t)counts[k]);
      *rows[k] = (cn_axes){counts[k], copy, NULL};
    }
  }
  return t;
}

/* ---- Declarations -------------------------------------------------------------------------- */

/* Dims from a declaration's fields: o (output), i (input), b (batch); a list or one integer. */
static bool decl_dims(nt_interp *I, nt_env *e, nt_decl_scope *ds, int n_fields,
                      const cn_nt_field *fields, cn_dims *d, int64_t dims[3][CN_MAX_RANK]) {
  cn_axes *rows[3] = {&d->batch, &d->input, &d->output};
  static const char *const names[3] = {"b", "i", "o"};
  for (int k = 0; k < 3; k++) *rows[k] = CN_AXES_INFER;
  for (int f = 0; f < n_fields; f++) {
    const cn_nt_field *field = &fields[f];
    int k = 0;
    while (k < 3 && strcmp(field->name, names[k]) != 0) k++;
    if (k == 3 || !field->value) {
      nt_fail(I, field->pos, "unknown declaration field '%s' (expected o, i or b)", field->name);
      return false;
    }
    nt_value *v = nt_eval(I, e, ds, field->value);
    if (!v) return false;
    int n = v->kind == NT_V_LIST ? v->n : 1;
    if (n > CN_MAX_RANK) {
      nt_fail(I, field->pos, "%s", "too many axes");
      return false;
    }
    for (int i = 0; i < n; i++)
      if (!nt_as_int(I, v->kind == NT_V_LIST ? v->items[i] : v, field->pos, &dims[k][i]))
        return false;
    *rows[k] = (cn_axes){n, dims[k], NULL};
  }
  return true;
}

cn_tensor *nt_declare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *node, bool cd,
                      cn_tensor *enricher) {
  cn_tensor *declared = cn_map_get(&ds->decls, node);
  if (declared) return declared;
  bool string = node->kind == CN_NT_STRING;
  const char *name = string ? node->u.string.text : node->u.decl.name;
  const cn_nt_expr *init = string ? NULL : node->u.decl.init;
  const char *more = cd ? (enricher ? enricher->label : NULL) : ds->more_label;
  const char *label = more ? nt_join_label(I, name, more) : name;
  cn_dims dims;
  int64_t d[3][CN_MAX_RANK];
  if (!label || !decl_dims(I, e, ds, string ? 0 : node->u.decl.n_fields,
                           string ? NULL : node->u.decl.fields, &dims, d))
    return NULL;
  bool any_dims = dims.batch.n >= 0 || dims.input.n >= 0 || dims.output.n >= 0;
  cn_tensor *t;
  if (cd) {
    t = cn_tensor_buffer(I->g, label, any_dims ? &dims : NULL);
  } else {
    cn_tensor *init_t = NULL;
    if (init) {
      /* an array literal gives the parameter its rows; a number fills a parameter whose shape
       * is inferred ({hey = 7.0}, "w" 0.25: syntax-extensions-cd-op) as a scalar with no axes */
      if (init->kind == CN_NT_NUMBER && !init->u.number.label) {
        init_t = cn_tensor_scalar(I->g, init->u.number.value);
        if (!init_t) nt_fail_here(I, init->pos);
      } else if (is_literal(init)) {
        init_t = literal_tensor(I, init, "init", any_dims ? NULL : &dims);
        any_dims = true;
      } else {
        nt_value *v = nt_eval(I, e, ds, init);
        init_t = v ? nt_tensor_of(I, v, init->pos) : NULL;
      }
      if (!init_t) return NULL;
    }
    t = cn_tensor_param(I->g, label, any_dims ? &dims : NULL, init_t);
  }
  if (!t) return nt_fail_here(I, node->pos), NULL;
  nt_note(I, node->pos);
  nt_value *v = nt_tensor_value(I, t);
  if (!v || !nt_bind_global(I, name, v) || !cn_map_put(I->ctx, &ds->decls, node, t)) return NULL;
  if (cd) {
    nt_cd_decl *c = cn_alloc(I->ctx, sizeof *c);
    if (!c) return NULL;
    *c = (nt_cd_decl){t, enricher};
    if (!cn_map_put(I->ctx, &I->cd_decls, t, c)) return NULL;
  }
  return t;
}

nt_value *nt_eval_operand(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  if (x->kind != CN_NT_STRING) return nt_eval(I, e, ds, x);
  return nt_tensor_value(I, nt_declare(I, e, ds, x, false, NULL));
}

static bool predeclare_operand(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  if (x && x->kind == CN_NT_STRING) return nt_declare(I, e, ds, x, false, NULL) != NULL;
  return nt_predeclare(I, e, ds, x);
}

bool nt_predeclare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  if (!x) return true;
  switch (x->kind) {
  case CN_NT_DECL: return nt_declare(I, e, ds, x, false, NULL) != NULL;
  case CN_NT_FIELD: return nt_predeclare(I, e, ds, x->u.field.subject);
  case CN_NT_PREFIX:
    return x->u.prefix.op[0] == '-' ? predeclare_operand(I, e, ds, x->u.prefix.operand)
                                    : nt_predeclare(I, e, ds, x->u.prefix.operand);
  case CN_NT_BINOP: { /* along the left spine, in source order (see eval_binop) */
    int n = cn_nt_binop_spine(x, NULL);
    const cn_nt_expr **spine = cn_alloc(I->ctx, sizeof *spine * (size_t)n);
    if (!spine) return false;
    cn_nt_binop_spine(x, spine);
    if (!predeclare_operand(I, e, ds, spine[n - 1]->u.binop.lhs)) return false;
    for (int k = n - 1; k >= 0; k--)
      if (!predeclare_operand(I, e, ds, spine[k]->u.binop.rhs)) return false;
    return true;
  }
  case CN_NT_EINSUM:
    return predeclare_operand(I, e, ds, x->u.einsum.lhs) &&
           predeclare_operand(I, e, ds, x->u.einsum.rhs);
  case CN_NT_APPLY: {
    nt_value *block;
    if (!nt_config_block(I, e, ds, x, &block) || !nt_predeclare(I, e, ds, x->u.apply.fn))
      return false;
    const cn_nt_expr *fn = x->u.apply.fn;
    const char *name = fn->kind == CN_NT_IDENT ? fn->u.ident.name : "";
    for (int i = 0, k = 0; i < x->u.apply.n_args; i++) {
      const cn_nt_arg *a = &x->u.apply.args[i];
      bool ok = a->label ? a->value == NULL || strcmp(a->label, "config") == 0 ||
                               nt_predeclare(I, e, ds, a->value)
                : nt_spec_argument(name, k++) ? true
                                              : predeclare_operand(I, e, ds, a->value);
      if (!ok) return false;
    }
    return true;
  }
  case CN_NT_LET:
    return nt_predeclare(I, e, ds, x->u.let.value) && nt_predeclare(I, e, ds, x->u.let.body);
  case CN_NT_ANNOT: return nt_predeclare(I, e, ds, x->u.annot.expr);
  case CN_NT_TUPLE:
    for (int i = 0; i < x->u.items.n; i++)
      if (!nt_predeclare(I, e, ds, x->u.items.items[i])) return false;
    return true;
  default: return true;
  }
}

/* ---- Operators ----------------------------------------------------------------------------- */

static bool truthy(const nt_value *v) {
  return v->kind == NT_V_BOOL ? v->b : v->num != 0;
}

/* Host arithmetic, comparisons and logic (an `if` condition in %cd is a host value). */
static nt_value *host_binop(nt_interp *I, const char *op, nt_value *a, nt_value *b, cn_nt_pos pos) {
  bool logic = strcmp(op, "&&") == 0 || strcmp(op, "||") == 0;
  if (logic) return boolean(I, op[0] == '&' ? truthy(a) && truthy(b) : truthy(a) || truthy(b));
  if (a->kind == NT_V_BOOL && b->kind == NT_V_BOOL) {
    if (strcmp(op, "=") == 0 || strcmp(op, "==") == 0) return boolean(I, a->b == b->b);
    if (strcmp(op, "<>") == 0 || strcmp(op, "!=") == 0) return boolean(I, a->b != b->b);
    return nt_fail(I, pos, "operator %s is not defined on booleans", op);
  }
  if (a->kind != NT_V_NUM || b->kind != NT_V_NUM)
    return nt_fail(I, pos, "operator %s is not defined on a number and a boolean", op);
  double x = a->num, y = b->num, r;
  static const struct {
    const char *op;
    int lt, eq, gt; /* the result for x < y, x == y, x > y */
  } cmp[] = {{"<", 1, 0, 0}, {">", 0, 0, 1},  {"<=", 1, 1, 0}, {">=", 0, 1, 1},
             {"=", 0, 1, 0}, {"==", 0, 1, 0}, {"<>", 1, 0, 1}, {"!=", 1, 0, 1}};
  for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
    if (strcmp(op, cmp[i].op) == 0)
      return boolean(I, x < y ? cmp[i].lt : x > y ? cmp[i].gt : x == y ? cmp[i].eq : 0);
  bool ints = a->is_int && b->is_int && strchr(op, '.') == NULL;
  switch (op[0]) {
  case '+': r = x + y; break;
  case '-': r = x - y; break;
  case '*': r = strcmp(op, "**") == 0 || strcmp(op, "**.") == 0 ? pow(x, y) : x * y; break;
  case '/':
    if (ints && y == 0) return nt_fail(I, pos, "%s", "division by zero");
    r = ints ? trunc(x / y) : x / y;
    break;
  case '%':
  case 'm': /* `mod` and `%`: the remainder, with the dividend's sign (OCaml's mod) */
    if (strcmp(op, "%") != 0 && strcmp(op, "mod") != 0)
      return nt_fail(I, pos, "operator %s is not defined on numbers", op);
    if (y == 0) return nt_fail(I, pos, "%s", "division by zero");
    r = fmod(x, y);
    break;
  default: return nt_fail(I, pos, "operator %s is not defined on numbers", op);
  }
  return nt_num(I, r, ints);
}

/* A binary primitive by its infix spelling in the op table (syntax-extensions-cd-op: "-?/" is
 * relu_gate, "<>" eq; cannl's "!=" ne). */
static bool op_by_infix(const char *infix, cn_op *out) {
  for (int i = 0; i < CN_OP_COUNT; i++)
    if (cn_op_table[i].infix && cn_op_table[i].arity == 2 &&
        strcmp(cn_op_table[i].infix, infix) == 0) {
      *out = (cn_op)i;
      return true;
    }
  return false;
}

/* The %op meaning of an infix operator on tensors: `*` composes (matrix multiplication), `+ -`
 * and the dotted `*. /.` are pointwise, `/` divides pointwise, `=` compares like `<>` (eq), and
 * every other primitive's infix operator applies it pointwise. */
static cn_tensor *binary_tensor(nt_interp *I, const char *op, cn_tensor *a, cn_tensor *b) {
  cn_graph *g = I->g;
  cn_op prim;
  if (strcmp(op, "*") == 0) return cn_tensor_matmul(g, a, b);
  if (strcmp(op, "*.") == 0)
    prim = CN_OP_MUL;
  else if (strcmp(op, "/.") == 0)
    prim = CN_OP_DIV;
  else if (strcmp(op, "=") == 0)
    prim = CN_OP_EQ;
  else if (strcmp(op, "mod") == 0)
    prim = CN_OP_MOD;
  else if (!op_by_infix(op, &prim)) {
    cn_fail(I->ctx, CN_ERR_INVALID, "unknown tensor operator %s", op);
    return NULL;
  }
  return cn_tensor_apply(g, prim, 2, (cn_tensor *[]){a, b});
}

static nt_value *list_value(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  nt_value *v = nt_mk(I, NT_V_LIST);
  if (!v) return NULL;
  v->n = x->kind == CN_NT_ANNOT ? 0 : x->u.items.n;
  if (x->kind == CN_NT_ANNOT) return v;
  v->items = cn_alloc(I->ctx, sizeof *v->items * (size_t)(v->n + 1));
  if (!v->items) return NULL;
  for (int i = 0; i < v->n; i++)
    if (!(v->items[i] = nt_eval(I, e, ds, x->u.items.items[i]))) return NULL;
  return v;
}

/* ---- Expressions ------------------------------------------------------------------------- */

static nt_value *eval_einsum(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  nt_value *av = nt_eval_operand(I, e, ds, x->u.einsum.lhs);
  cn_tensor *a = av ? nt_tensor_of(I, av, x->u.einsum.lhs->pos) : NULL, *b = NULL, *r = NULL;
  if (!a) return NULL;
  if (x->u.einsum.rhs) {
    nt_value *bv = nt_eval_operand(I, e, ds, x->u.einsum.rhs);
    if (!bv || !(b = nt_tensor_of(I, bv, x->u.einsum.rhs->pos))) return NULL;
  }
  const char *spec = nt_spec_splice(I, e, x->u.einsum.spec, x->u.einsum.spec_pos);
  if (!spec) return NULL;
  switch (x->u.einsum.kind) {
  case CN_NT_EINSUM_BINARY: r = cn_tensor_einsum2(I->g, spec, a, b); break;
  case CN_NT_EINSUM_OUTER: r = cn_tensor_outer_sum(I->g, spec, a, b); break;
  case CN_NT_EINSUM_TROPICAL: r = cn_tensor_tropical(I->g, spec, a, b); break;
  case CN_NT_EINSUM_UNARY: r = cn_tensor_einsum1(I->g, spec, a); break;
  case CN_NT_EINSUM_MAX_UNARY: r = cn_tensor_einmax1(I->g, spec, a); break;
  }
  return r ? nt_tensor_value(I, r) : nt_fail_here(I, x->u.einsum.spec_pos);
}

static bool host_value(const nt_value *v) {
  return v->kind == NT_V_NUM || v->kind == NT_V_BOOL;
}

nt_value *nt_host_index(nt_interp *I, nt_value *v, cn_nt_pos pos) {
  int64_t value;
  if (!I->host_eval || v->kind != NT_V_INDEX) return v;
  if (!nt_index_value(I, v, &value))
    return nt_fail(I, pos, "the static index '%s' has a value only inside a loop over it",
                   v->index.name ? v->index.name : "index");
  I->index_read = true;
  return nt_num(I, (double)value, true);
}

/* Strings compare (= == <> !=) and concatenate (^), on the host. */
static nt_value *string_binop(nt_interp *I, const cn_nt_expr *x, nt_value *a, nt_value *b) {
  const char *op = x->u.binop.op;
  if (a->kind != NT_V_STR || b->kind != NT_V_STR)
    return nt_fail(I, x->u.binop.op_pos, "operator %s is not defined on %s and %s", op,
                   nt_kind_name(a->kind), nt_kind_name(b->kind));
  if (strcmp(op, "=") == 0 || strcmp(op, "==") == 0) return boolean(I, strcmp(a->str, b->str) == 0);
  if (strcmp(op, "<>") == 0 || strcmp(op, "!=") == 0)
    return boolean(I, strcmp(a->str, b->str) != 0);
  if (strcmp(op, "^") != 0)
    return nt_fail(I, x->u.binop.op_pos,
                   "operator %s is not defined on strings (= and <> compare them, ^ joins them)",
                   op);
  nt_value *v = nt_mk(I, NT_V_STR);
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s%s", a->str, b->str);
  if (v && !(v->str = cn_sbuf_finish(I->ctx, &sb))) return NULL;
  return v;
}

/* x's operator applied to a (x's left operand's value) and b (its right operand's). */
static nt_value *apply_binop(nt_interp *I, const cn_nt_expr *x, nt_value *a, nt_value *b) {
  const char *op = x->u.binop.op;
  if (a->kind == NT_V_STR || b->kind == NT_V_STR) return string_binop(I, x, a, b);
  bool host_a = host_value(a) || (I->host_eval && a->kind == NT_V_INDEX);
  bool host_b = host_value(b) || (I->host_eval && b->kind == NT_V_INDEX);
  if (host_a && host_b && ((host_value(a) && host_value(b)) || strcmp(op, "@|") != 0)) {
    if (!(a = nt_host_index(I, a, x->u.binop.lhs->pos)) ||
        !(b = nt_host_index(I, b, x->u.binop.rhs->pos)))
      return NULL;
    return host_binop(I, op, a, b, x->u.binop.op_pos);
  }
  if (strcmp(op, "@|") == 0) { /* at a static index, or at a constant position */
    cn_tensor *t = nt_tensor_of(I, a, x->u.binop.lhs->pos), *r;
    int64_t index;
    cn_symbol sym;
    if (!t) return NULL;
    if (b->kind == NT_V_INDEX) {
      if (!nt_index_symbol(I, b, x->u.binop.rhs->pos, &sym)) return NULL;
      r = cn_tensor_batch_slice(I->g, t, sym);
    } else {
      if (!nt_as_int(I, b, x->u.binop.rhs->pos, &index)) return NULL;
      r = cn_tensor_batch_slice_at(I->g, t, index);
    }
    return r ? nt_tensor_value(I, r) : nt_fail_here(I, x->u.binop.op_pos);
  }
  cn_tensor *ta = nt_tensor_of(I, a, x->u.binop.lhs->pos), *r;
  if (!ta) return NULL;
  /* syntax-extensions-cd-op: the exponent is a number, not a tensor */
  if (strcmp(op, "**.") == 0) {
    if (b->kind != NT_V_NUM)
      return nt_fail(I, x->u.binop.rhs->pos, "**. takes a number as its exponent, found %s",
                     nt_kind_name(b->kind));
    r = cn_tensor_pointpow(I->g, ta, b->num);
  } else {
    cn_tensor *tb = nt_tensor_of(I, b, x->u.binop.rhs->pos);
    if (!tb) return NULL;
    r = binary_tensor(I, op, ta, tb);
  }
  return r ? nt_tensor_value(I, r) : nt_fail_here(I, x->u.binop.op_pos);
}

/* An operand of op: a string literal is a string in host evaluation (a condition), as an operand
 * of ^, or when the other operand is a string; otherwise an inline declaration. */
static nt_value *binop_operand(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x,
                               const char *op, const nt_value *other) {
  if (x->kind == CN_NT_STRING &&
      (I->host_eval || strcmp(op, "^") == 0 || (other && other->kind == NT_V_STR)))
    return nt_eval(I, e, ds, x);
  return nt_eval_operand(I, e, ds, x);
}

/* A chain `a + b - c ...` bottom-up along its left spine (no recursion per term): the
 * innermost left operand, then each right operand in source order. */
static nt_value *eval_binop(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  int n = cn_nt_binop_spine(x, NULL);
  const cn_nt_expr **spine = cn_alloc(I->ctx, sizeof *spine * (size_t)n);
  if (!spine) return NULL;
  cn_nt_binop_spine(x, spine);
  nt_value *a = binop_operand(I, e, ds, spine[n - 1]->u.binop.lhs, spine[n - 1]->u.binop.op, NULL);
  for (int k = n - 1; k >= 0 && a; k--) {
    nt_value *b = binop_operand(I, e, ds, spine[k]->u.binop.rhs, spine[k]->u.binop.op, a);
    a = b ? apply_binop(I, spine[k], a, b) : NULL;
  }
  return a;
}

static nt_value *eval_field(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  nt_value *s = nt_eval(I, e, ds, x->u.field.subject);
  if (!s) return NULL;
  const char *name = x->u.field.name;
  if (s->kind == NT_V_RECORD) {
    for (int i = 0; i < s->n; i++)
      if (strcmp(s->names[i], name) == 0) return s->items[i];
    return nt_fail(I, x->u.field.name_pos, "the record has no field '%s'", name);
  }
  if (s->kind != NT_V_TENSOR) return nt_fail(I, x->pos, "%s has no fields", nt_kind_name(s->kind));
  if (s->merge) return nt_fail(I, x->u.field.name_pos, "%s", "a merge buffer has no fields");
  nt_value *v = nt_mk(I, NT_V_TENSOR);
  if (!v) return NULL;
  *v = *s;
  if (strcmp(name, "value") == 0) {
    if (s->grad) return nt_fail(I, x->u.field.name_pos, "%s", "a gradient has no .value");
    return v;
  }
  if (strcmp(name, "merge") == 0) { /* <tensor>.merge is <tensor>.value.merge */
    v->merge = true;
    return v;
  }
  if (strcmp(name, "grad") == 0) {
    if (s->grad) return nt_fail(I, x->u.field.name_pos, "%s", "a gradient has no .grad");
    if (!s->t->diff)
      return nt_fail(I, x->u.field.name_pos, "\"%s\" has no gradient (not differentiable)",
                     s->t->label);
    v->grad = true;
    return v;
  }
  return nt_fail(I, x->u.field.name_pos, "unsupported field '%s' (value, grad or merge)", name);
}

static nt_value *eval_prefix(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  const char *op = x->u.prefix.op;
  bool minus = strcmp(op, "-") == 0 || strcmp(op, "-.") == 0;
  nt_value *v = minus ? nt_eval_operand(I, e, ds, x->u.prefix.operand)
                      : nt_eval(I, e, ds, x->u.prefix.operand);
  if (!v) return NULL;
  if (strcmp(op, "!.") == 0 || strcmp(op, "!..") == 0) {
    if (v->kind != NT_V_NUM) return nt_fail(I, x->pos, "%s expects a number", op);
    cn_tensor *t = cn_tensor_number(I->g, op[2] ? trunc(v->num) : v->num);
    return t ? nt_tensor_value(I, t) : nt_fail_here(I, x->pos);
  }
  if (strcmp(op, "!@") == 0) { /* a static index's value, as a scalar tensor */
    cn_symbol sym;
    if (v->kind != NT_V_INDEX)
      return nt_fail(I, x->pos,
                     "!@ expects a static index (of static_index or a for loop), found %s",
                     nt_kind_name(v->kind));
    if (!nt_index_symbol(I, v, x->pos, &sym)) return NULL;
    cn_tensor *t = cn_tensor_embed_symbol(I->g, sym);
    return t ? nt_tensor_value(I, t) : nt_fail_here(I, x->pos);
  }
  if (minus) {
    if (v->kind == NT_V_INDEX && I->host_eval &&
        !(v = nt_host_index(I, v, x->u.prefix.operand->pos)))
      return NULL;
    if (v->kind == NT_V_NUM) return nt_num(I, -v->num, v->is_int);
    cn_tensor *t = nt_tensor_of(I, v, x->pos);
    cn_tensor *r = t ? cn_tensor_apply(I->g, CN_OP_NEG, 1, &t) : NULL;
    return r ? nt_tensor_value(I, r) : t ? nt_fail_here(I, x->pos) : NULL;
  }
  return nt_fail(I, x->pos, "unsupported prefix operator %s", op);
}

/* Scripts compute with doubles: an integer literal beyond 2^53 would silently change value. */
#define EXACT_INT_LIMIT 9007199254740992LL /* 2^53 */

static nt_value *eval_number(nt_interp *I, const cn_nt_expr *x) {
  int64_t n = x->u.number.ival;
  if (x->u.number.is_int && (n > EXACT_INT_LIMIT || n < -EXACT_INT_LIMIT)) {
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)n);
    return nt_fail(I, x->pos,
                   "the integer %s has no exact value in a script, which computes with doubles "
                   "(at most 2^53 = 9007199254740992 in magnitude)",
                   digits);
  }
  if (!x->u.number.label) return nt_num(I, x->u.number.value, x->u.number.is_int);
  /* 'q' 2.0: one output axis of size 1, labeled */
  const char *labels[1] = {x->u.number.label};
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){1}, labels}};
  cn_tensor *t = cn_tensor_data(I->g, x->u.number.label, &d, &x->u.number.value, 1);
  return t ? nt_tensor_value(I, t) : nt_fail_here(I, x->pos);
}

static nt_value *eval_record(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  nt_value *v = nt_mk(I, NT_V_RECORD);
  if (!v) return NULL;
  v->n = x->u.record.n_fields;
  v->items = cn_alloc(I->ctx, sizeof *v->items * (size_t)v->n);
  v->names = cn_alloc(I->ctx, sizeof *v->names * (size_t)v->n);
  if (!v->items || !v->names) return NULL;
  for (int i = 0; i < v->n; i++) {
    const cn_nt_field *f = &x->u.record.fields[i];
    v->names[i] = f->name;
    v->items[i] = f->value ? nt_eval(I, e, ds, f->value) : nt_lookup(I, e, f->name);
    if (!v->items[i]) return f->value ? NULL : nt_fail_unbound(I, e, f->pos, f->name);
  }
  return v;
}

/* if c then a else b: c is a host boolean (static indices an enclosing loop binds read as their
 * values); only the chosen branch is evaluated. */
static nt_value *eval_if(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  const cn_nt_expr *cx = x->u.if_.cond;
  bool was = I->host_eval;
  I->host_eval = true;
  nt_value *c = nt_eval(I, e, ds, cx);
  if (c) c = nt_host_index(I, c, cx->pos);
  I->host_eval = was;
  if (!c) return NULL;
  if (c->kind == NT_V_TENSOR || (c->kind == NT_V_LIST && c->literal))
    return nt_fail(I, cx->pos, "%s",
                   "the condition is a tensor: an if expression chooses on the host, from "
                   "numbers, strings and booleans (as in if arch = \"convnet\" then a else b)");
  if (c->kind != NT_V_BOOL)
    return nt_fail(I, cx->pos, "the condition is %s, not a boolean", nt_kind_name(c->kind));
  return nt_eval(I, e, ds, c->b ? x->u.if_.then_ : x->u.if_.else_);
}

static nt_value *eval_node(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  switch (x->kind) {
  case CN_NT_NUMBER: return eval_number(I, x);
  case CN_NT_STRING: {
    nt_value *v = nt_mk(I, NT_V_STR);
    if (v) v->str = x->u.string.text;
    return v;
  }
  case CN_NT_BOOL: return boolean(I, x->u.boolean);
  case CN_NT_UNIT: return nt_mk(I, NT_V_UNIT);
  case CN_NT_IDENT: {
    nt_value *v = nt_lookup(I, e, x->u.ident.name);
    /* the seed's initializer skeleton names this fetch-op bare, as a value: a new leaf each time
     * (convolution-is-a-contraction "Random initialization"), as `range_over_offsets ()` */
    if (!v && strcmp(x->u.ident.name, "range_over_offsets") == 0)
      return nt_tensor_value(I, cn_tensor_range_over_offsets(I->g));
    return v ? v : nt_fail_unbound(I, e, x->pos, x->u.ident.name);
  }
  case CN_NT_FIELD: return eval_field(I, e, ds, x);
  case CN_NT_PREFIX: return eval_prefix(I, e, ds, x);
  case CN_NT_BINOP: return eval_binop(I, e, ds, x);
  case CN_NT_EINSUM: return eval_einsum(I, e, ds, x);
  case CN_NT_APPLY: return nt_apply(I, e, ds, x);
  case CN_NT_LET: {
    nt_value *v = nt_eval(I, e, ds, x->u.let.value);
    nt_env *inner = e;
    if (!v || (strcmp(x->u.let.name, "_") != 0 && !nt_bind(I, &inner, x->u.let.name, v)))
      return NULL;
    return nt_eval(I, inner, ds, x->u.let.body);
  }
  case CN_NT_LIST:
  case CN_NT_TUPLE:
  case CN_NT_ARRAY:
  case CN_NT_ANNOT: {
    nt_value *v = list_value(I, e, ds, x);
    if (v && is_literal(x)) v->literal = x;
    if (v) v->tuple = x->kind == CN_NT_TUPLE;
    return v;
  }
  case CN_NT_DECL: return nt_tensor_value(I, nt_declare(I, e, ds, x, false, NULL));
  case CN_NT_RECORD: return eval_record(I, e, ds, x);
  case CN_NT_IF: return eval_if(I, e, ds, x);
  }
  return NULL;
}

/* Evaluates x and records it as the origin of the tensors built meanwhile (the operator's
 * position for an operator expression). */
nt_value *nt_eval(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  nt_value *v = eval_node(I, e, ds, x);
  nt_note(I, x->kind == CN_NT_BINOP    ? x->u.binop.op_pos
             : x->kind == CN_NT_EINSUM ? x->u.einsum.op_pos
                                       : x->pos);
  return v;
}
