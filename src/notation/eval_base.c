/* The evaluator's base floor (eval_base.h; it includes no other floor's header and calls no
 * file of the floors above): values, positioned errors and provenance, materialization,
 * environments, array literals, labeled arguments, static indices, the output stream and
 * running a routine.
 *
 * Provenance: every tensor and standalone update records the expression that built it, so that a
 * conflict found only when shapes are closed (at the first print, run, ...) is reported at the
 * expression that introduced the constraint. Around a statement's materialization, the note for
 * a parameter that it closed to the fewest axes before any use and that a later operation
 * broadcasts (the library's way of warning, as cc.c's: the context's log when it has one, else
 * stderr). A routine that fails reading a static index no enclosing loop binds is explained at
 * the statement. A routine runs after the data sets the script made are written, each by the
 * writer its builtin registered (nt_dataset.write): the base knows no data file.
 *
 * Invariants: every failure is a positioned message (FILE:LINE:COL, the line, a caret) naming
 * the expression that introduced it, library messages included; nothing here aborts on user
 * input; a routine compiled without a cache is freed after its run. */
#include "notation/eval_base.h"

#include "runtime/routine.h"

#include <math.h>
#include <stdarg.h>
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

nt_value *nt_bool(nt_interp *I, bool b) {
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

/* A tensor for v: numbers become number tensors, array literals their data tensor. */
cn_tensor *nt_tensor_of(nt_interp *I, nt_value *v, cn_nt_pos pos) {
  if (!v) return NULL;
  if (v->kind == NT_V_LIST && v->literal) {
    if (!v->t) v->t = nt_literal_tensor(I, v->literal, NULL, NULL);
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
bool nt_is_literal(const cn_nt_expr *e) {
  switch (e->kind) {
  case CN_NT_NUMBER: return true;
  case CN_NT_LIST:
  case CN_NT_ARRAY:
  case CN_NT_TUPLE:
    for (int i = 0; i < e->u.items.n; i++)
      if (!nt_is_literal(e->u.items.items[i])) return false;
    return true;
  case CN_NT_ANNOT: return nt_is_literal(e->u.annot.expr);
  case CN_NT_PREFIX: return strcmp(e->u.prefix.op, "-") == 0 && nt_is_literal(e->u.prefix.operand);
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
cn_tensor *nt_literal_tensor(nt_interp *I, const cn_nt_expr *e, const char *label,
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

/* ---- Labeled arguments -------------------------------------------------------------------- */

nt_value *nt_labeled_at(const nt_args *a, const char *name, cn_nt_pos *at) {
  for (int i = 0; i < a->n_lab; i++)
    if (strcmp(a->lab[i], name) == 0) {
      *at = a->lab_at[i];
      return a->lab_v[i];
    }
  return NULL;
}

nt_value *nt_labeled(const nt_args *a, const char *name) {
  cn_nt_pos at;
  return nt_labeled_at(a, name, &at);
}

bool nt_known_labels(nt_interp *I, const nt_call *c, int n, const char *const *known) {
  for (int i = 0; i < c->a->n_lab; i++) {
    int k = 0;
    while (k < n && strcmp(c->a->lab[i], known[k]) != 0) k++;
    if (k < n) continue;
    char list[160] = "";
    cn_suggest s;
    cn_suggest_init(&s, c->a->lab[i]);
    s.prefix = "~";
    for (int j = 0; j < n; j++) {
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s~%s", j ? " " : "", known[j]);
      cn_suggest_consider(&s, known[j]);
    }
    return nt_fail(I, c->a->lab_at[i], "%s has no argument ~%s%s (%s)", c->name, c->a->lab[i],
                   cn_suggest_text(&s), list),
           false;
  }
  return true;
}

/* ---- Output and runs ------------------------------------------------------------------------ */

FILE *nt_out(nt_interp *I) {
  FILE *f = I->opts.out ? I->opts.out : stdout;
  if (I->bar_shown) {
    fputs("\r\033[K", f);
    I->bar_shown = false;
  }
  return f;
}

FILE *nt_err(nt_interp *I) {
  fflush(nt_out(I)); /* after what the script printed, where both streams go to one place */
  return I->opts.err ? I->opts.err : stderr;
}

/* Prints what --emit asks for when a routine is compiled; every routine runs after the data sets
 * are written (nt_begin_datasets). */
cn_routine *nt_compile_emit(nt_interp *I, const cn_asgn *asgn, const char *name, bool once,
                            cn_nt_pos at) {
  cn_routine *r = !asgn ? NULL
                  : I->opts.emit_c
                      ? cn_routine_compile(I->ctx, asgn, I->opts.backend, name)
                      : cn_routine_compile_tiered(I->ctx, asgn, I->opts.backend, name, once);
  if (!r) return nt_fail_here(I, at), NULL;
  if (I->opts.emit_asgn)
    fprintf(nt_out(I), "# %s: assignments\n%s", name, cn_asgn_to_string(I->ctx, asgn));
  if (I->opts.emit_loops) fprintf(nt_out(I), "# %s: loops\n%s", name, cn_routine_loops(r));
  if (I->opts.emit_c && cn_routine_source(r))
    fprintf(nt_out(I), "# %s: C\n%s", name, cn_routine_source(r));
  return r;
}

bool nt_run_asgn_named(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at,
                       const char *reserved) {
  cn_routine *r = cache ? *cache : NULL;
  if (!r) {
    char name[32];
    if (reserved)
      snprintf(name, sizeof name, "%s", reserved);
    else
      snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
    if (!(r = nt_compile_emit(I, asgn, name, !cache, at))) return false;
    if (cache) *cache = r;
  }
  if (!nt_begin_datasets(I, at)) {
    if (!cache) cn_routine_free(r);
    return false;
  }
  cn_status st = CN_OK;
  for (int i = 0; i < I->n_bound && st == CN_OK; i++)
    if (cn_routine_reads(r, I->bound[i].sym))
      st = cn_routine_bind(r, I->bound[i].sym, I->bound[i].value);
  if (st == CN_OK) st = cn_routine_run(r);
  bool explained = st != CN_OK && nt_explain_unbound(I, r);
  if (!cache) cn_routine_free(r);
  if (st != CN_OK) return explained ? false : (nt_fail_here(I, at), false);
  return true;
}

bool nt_run_asgn(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at) {
  return nt_run_asgn_named(I, asgn, cache, at, NULL);
}

bool nt_asgn_empty(const cn_asgn *a) {
  switch (a->kind) {
  case CN_ASGN_NOOP: return true;
  case CN_ASGN_COMMENT: return nt_asgn_empty(a->u.comment.body);
  case CN_ASGN_SEQ:
    for (int i = 0; i < a->u.seq.count; i++)
      if (!nt_asgn_empty(a->u.seq.items[i])) return false;
    return true;
  default: return false;
  }
}

bool nt_begin_set(nt_interp *I, nt_dataset *s, uint64_t e, cn_nt_pos at) {
  if (s->write(I, s, e) != CN_OK) return nt_fail_here(I, at), false;
  s->begun = true;
  return true;
}

bool nt_begin_datasets(nt_interp *I, cn_nt_pos at) {
  for (int i = 0; i < I->n_datasets; i++) {
    nt_dataset *s = &I->datasets[i];
    if (!s->begun && !nt_begin_set(I, s, 0, at)) return false;
  }
  return true;
}

/* ---- Static indices ------------------------------------------------------------------------- */

bool nt_note_index(nt_interp *I, nt_value *v) {
  if (!cn_arena_grow(I->ctx, (void **)&I->indices, &I->cap_indices, I->n_indices + 1,
                     sizeof *I->indices))
    return false;
  I->indices[I->n_indices++] = v;
  return true;
}

bool nt_index_value(const nt_interp *I, const nt_value *v, int64_t *value) {
  for (int i = I->n_bound - 1; v->index.created && i >= 0; i--)
    if (I->bound[i].sym == v->index.sym) {
      *value = I->bound[i].value;
      return true;
    }
  return false;
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

bool nt_explain_unbound(nt_interp *I, const cn_routine *r) {
  const nt_value *v = NULL;
  int64_t value;
  for (int i = 0; i < I->n_indices && !v; i++)
    if (cn_routine_reads(r, I->indices[i]->index.sym) && !nt_index_value(I, I->indices[i], &value))
      v = I->indices[i];
  if (!v || !I->item || cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return false;
  cn_sbuf stmt = {0}, loop = {0};
  cn_nt_print_item(&stmt, I->item);
  const char *nl = stmt.data ? strchr(stmt.data, '\n') : NULL;
  int len = stmt.data ? (int)(nl ? nl - stmt.data : (ptrdiff_t)stmt.len) : 0;
  const char *name = v->index.name ? v->index.name : "index";
  const cn_nt_item *l = v->index.loop;
  if (l) {
    cn_sbuf_printf(&loop, "which is bound only inside the loop `for %s = ", l->u.for_.name);
    cn_nt_print_expr(&loop, l->u.for_.from);
    cn_sbuf_puts(&loop, " to ");
    cn_nt_print_expr(&loop, l->u.for_.to);
    cn_sbuf_printf(&loop, "` at line %d, column %d", l->pos.line, l->pos.col);
  } else {
    cn_sbuf_printf(
        &loop, "which no loop has bound: read it in the body of `for %s = ... do ... done`", name);
  }
  const char *where = cn_sbuf_finish(I->ctx, &loop);
  if (where)
    nt_fail(I, I->item->pos,
            "`%.*s%s` reads the static index '%s' (declared at line %d, column %d), %s",
            len > 60 ? 57 : len, stmt.data ? stmt.data : "", len > 60 ? "..." : "", name,
            v->index.decl_at.line, v->index.decl_at.col, where);
  cn_sbuf_free(&stmt);
  return true;
}

/* ---- Shapes closed before any use ----------------------------------------------------------- */

static bool shape_open(cn_shape_env *env, const cn_shape *sh) {
  for (int k = 0; k < CN_N_ROWS; k++) {
    const cn_row *r = cn_row_resolve(env, sh->rows[k]);
    if (!r) return false; /* out of memory: no note rather than a wrong one */
    if (r->var >= 0) return true;
    for (int i = 0; i < r->n_trail; i++)
      if (r->trail[i]->kind != CN_DIM_SOLVED) return true;
  }
  return false;
}

void nt_guess_shapes(nt_interp *I, int first) {
  cn_graph *g = I->g;
  bool any = false;
  for (int i = first; i < g->n_tensors && !any; i++)
    any = g->tensors[i]->is_param && shape_open(g->shapes, g->tensors[i]->shape);
  if (!any) return; /* the usual case: no scan of the uses */
  int cap = g->tensors[g->n_tensors - 1]->id + 1;
  unsigned char *used = cn_malloc(I->ctx, (size_t)cap);
  if (!used) return; /* a lost note */
  memset(used, 0, (size_t)cap);
  for (int i = 0; i < g->n_tensors; i++)
    for (int k = 0; k < g->tensors[i]->n_args; k++) used[g->tensors[i]->args[k]->id] = 1;
  for (int i = first; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (!t->is_param || used[t->id] || !shape_open(g->shapes, t->shape)) continue;
    if (t->id >= I->cap_guessed) {
      int old = I->cap_guessed;
      if (!cn_arena_grow(I->ctx, (void **)&I->guessed, &I->cap_guessed, t->id + 1, 1)) break;
      memset(I->guessed + old, 0, (size_t)(I->cap_guessed - old));
    }
    I->guessed[t->id] = 1;
  }
  free(used);
}

static int64_t cells_of(cn_shape_env *env, const cn_shape *sh) {
  int64_t dims[CN_N_ROWS * CN_MAX_RANK], n = 1;
  int rank = cn_shape_dims(env, sh, dims, CN_N_ROWS * CN_MAX_RANK);
  for (int i = 0; i < rank; i++) n *= dims[i];
  return rank < 0 ? -1 : n;
}

void nt_note_broadcasts(nt_interp *I, int first) {
  cn_graph *g = I->g;
  for (int i = first; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (!t->sop || t->sop->kind != CN_SL_POINTWISE) continue;
    for (int k = 0; k < t->n_args; k++) {
      cn_tensor *a = t->args[k];
      if (a->id >= I->cap_guessed || !I->guessed[a->id] || a->id >= I->cap_computed_at ||
          !I->computed_at[a->id].src || t->id >= I->cap_tensor_at || !I->tensor_at[t->id].src)
        continue;
      int64_t own = cells_of(g->shapes, a->shape), to = cells_of(g->shapes, t->shape);
      if (own < 0 || to <= own) continue;
      I->guessed[a->id] = 0; /* once */
      cn_nt_pos at = I->tensor_at[t->id];
      char msg[1024];
      snprintf(msg, sizeof msg,
               "%s:%d:%d: note: parameter \"%s\" (#%d) of shape %s is broadcast to %s here: its "
               "shape was closed for line %d, before anything used it (a parameter gets the "
               "fewest axes its uses need); use it or give its dims before that line if it "
               "should have more cells",
               at.src->file, at.line, at.col, a->label, a->id, cn_shape_str(g->shapes, a->shape),
               cn_shape_str(g->shapes, t->shape), I->computed_at[a->id].line);
      if (I->ctx->log_fn)
        cn_log(I->ctx, CN_LOG_WARN, "%s", msg);
      else
        fprintf(stderr, "%s\n", msg);
    }
  }
}
