/* The evaluator of the notation (issue 6): walks the tree of ast.h and builds tensors (%op),
 * standalone updates (%cd) and routines through the tensor API, running the statements of a
 * script (print, backprop, run, sgd, set_seed, for loops).
 *
 * Values: host numbers, booleans, strings, lists, tuples and records (for dims, labels and
 * ~config), tensors (optionally a `.grad` reference), let%op functions (closures with curried,
 * labeled arguments), let%cd routines (a code tree compiled on first run) and static indices
 * (symbols bound by `for` loops, read with `!@i`, slicing with `x @| i`).
 * Loops: a statement in a loop body is elaborated once, on its first execution (its tensors
 * built, its parameters initialized by a routine of their own, its code compiled), and each later
 * execution only binds the enclosing loops' indices and runs the compiled routine again.
 * Inline declarations (seed 002 "Inline declarations", seed 000 "the unit boundary"): a
 * declaration is created once per *lifting point* and shared by every evaluation of the same
 * declaration node there: at its first evaluation for top-level code, when a let%op function is
 * defined, or, for a function with a `~config` or `()` parameter, each time that parameter is
 * supplied. The declared name stays bound for the rest of the script. In %op a declaration is a
 * parameter; in %cd it is a non-differentiable buffer.
 *
 * Invariants: every failure is a positioned message (FILE:LINE:COL, the line, a caret) naming
 * the expression that introduced it, library messages included; nothing here aborts on user
 * input; recursion is bounded by the parser's height limit and a call-depth limit. */
#include "notation/eval.h"

#include "numeric/numeric.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALL_DEPTH 64

typedef enum {
  V_UNIT,
  V_NUM,
  V_BOOL,
  V_STR,
  V_TENSOR,
  V_LIST,
  V_RECORD,
  V_FUNC,
  V_ROUTINE,
  V_INDEX
} vkind;

typedef struct value value;
typedef struct env env;
typedef struct decl_scope decl_scope;
typedef struct code code;

struct env {
  const char *name;
  value *v;
  env *next;
};

/* The declarations created at one lifting point, keyed by declaration node. */
typedef struct decl_entry {
  const cn_nt_expr *node;
  cn_tensor *t;
  struct decl_entry *next;
} decl_entry;
struct decl_scope {
  decl_entry *entries;
  const char *prefix; /* ~config's label, prefixed to declared labels */
};

struct value {
  vkind kind;
  double num;
  bool is_int;
  bool b;
  const char *str;
  cn_tensor *t;
  bool grad; /* V_TENSOR: the gradient of t */
  int n;
  value **items;
  const char **names;        /* V_RECORD */
  const cn_nt_expr *literal; /* V_LIST written as an array literal: its tensor on demand */
  bool tuple;                /* V_LIST written or built as a tuple (let (a, b) = ... takes it) */
  struct {
    int64_t range;    /* values 0 .. range - 1 */
    const char *name; /* the let or loop that names it; the symbol takes the name */
    bool created;     /* sym exists: created on first use, so that it can take the name */
    cn_symbol sym;
  } index; /* V_INDEX */
  struct {
    const cn_nt_item *def;
    env *closure;
    decl_scope *decls;
    int n_given; /* parameters supplied so far (in order; labeled ones by name) */
    value **given;
  } fn;
  code *routine;
};

/* A %cd routine's code, produced after materialization. */
typedef enum { C_SEQ, C_UPDATE, C_FORWARD, C_COMMENT } code_kind;
struct code {
  code_kind kind;
  cn_update *update;
  cn_tensor *tensor;
  const char *text;
  int n;
  code **items;
  cn_routine *compiled;
};

/* What a statement in a loop body keeps between executions. */
typedef struct item_state {
  const cn_nt_item *item;
  cn_routine *routine; /* the statement's code (without parameter init), compiled once */
  cn_tensor *tensor;   /* print, backprop, sgd: the statement's tensor */
  bool grad;           /* print: of the tensor's gradient */
  value *index;        /* for: the loop's static index */
  struct item_state *next;
} item_state;

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_notation_options opts;
  env *globals;
  decl_scope top; /* declarations of top-level code */
  int depth;
  int n_routines;
  int n_bound; /* the enclosing loops' indices, outermost first (an inner binding wins) */
  struct {
    cn_symbol sym;
    int64_t value;
  } bound[CN_NT_MAX_LOOP_DEPTH];
  item_state *states; /* of the statements in loop bodies */
} interp;

/* ---- Values and errors ------------------------------------------------------------------- */

static value *mk(interp *I, vkind kind) {
  value *v = cn_alloc(I->ctx, sizeof *v);
  if (v) v->kind = kind;
  return v;
}

static value *num(interp *I, double x, bool is_int) {
  value *v = mk(I, V_NUM);
  if (v) {
    v->num = x;
    v->is_int = is_int;
  }
  return v;
}

static value *tensor_value(interp *I, cn_tensor *t) {
  value *v = t ? mk(I, V_TENSOR) : NULL;
  if (v) v->t = t;
  return v;
}

/* Re-issues the context's last message at pos (library failures point at the expression), except
 * an allocation failure, which has no position worth adding. */
static value *fail_here(interp *I, cn_nt_pos pos) {
  if (cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return NULL; /* stays CN_ERR_NOMEM */
  const char *msg = cn_strdup(I->ctx, cn_ctx_error(I->ctx));
  cn_nt_fail_at(I->ctx, pos, "%s", msg ? msg : "out of memory");
  return NULL;
}

static value *fail(interp *I, cn_nt_pos pos, const char *fmt, const char *arg) {
  cn_nt_fail_at(I->ctx, pos, fmt, arg);
  return NULL;
}

static const char *kind_name(vkind k) {
  static const char *const names[] = {"()",        "a number",      "a boolean", "a string",
                                      "a tensor",  "a list",        "a record",  "a function",
                                      "a routine", "a static index"};
  return names[k];
}

static bool bind(interp *I, env **e, const char *name, value *v) {
  env *b = cn_alloc(I->ctx, sizeof *b);
  if (!b) return false;
  b->name = name;
  b->v = v;
  b->next = *e;
  *e = b;
  return true;
}

static value *lookup(interp *I, env *e, const char *name) {
  for (; e; e = e->next)
    if (strcmp(e->name, name) == 0) return e->v;
  for (e = I->globals; e; e = e->next)
    if (strcmp(e->name, name) == 0) return e->v;
  return NULL;
}

/* A tensor for v: numbers become number tensors. */
static cn_tensor *as_tensor(interp *I, value *v, cn_nt_pos pos) {
  if (!v) return NULL;
  if (v->kind == V_NUM) {
    cn_tensor *t = cn_tensor_number(I->g, v->num);
    if (!t) fail_here(I, pos);
    return t;
  }
  if (v->kind != V_TENSOR) {
    fail(I, pos, "expected a tensor, found %s",
         v->kind == V_INDEX ? "a static index (read its value with !@)" : kind_name(v->kind));
    return NULL;
  }
  if (!v->grad) return v->t;
  cn_tensor *t = cn_tensor_grad_of(I->g, v->t);
  if (!t) fail_here(I, pos);
  return t;
}

static bool as_int(interp *I, value *v, cn_nt_pos pos, int64_t *out) {
  if (!v) return false;
  if (v->kind != V_NUM || v->num != floor(v->num)) {
    fail(I, pos, "expected an integer, found %s", kind_name(v->kind));
    return false;
  }
  *out = (int64_t)v->num;
  return true;
}

/* The symbol of a static index, created on first use under the name its let or loop gave. */
static bool index_symbol(interp *I, value *v, cn_nt_pos pos, cn_symbol *out) {
  if (!v->index.created) {
    v->index.sym =
        cn_symbol_create(I->ctx, v->index.name ? v->index.name : "index", v->index.range);
    if (v->index.sym < 0) return fail_here(I, pos), false;
    v->index.created = true;
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

static bool is_literal(const cn_nt_expr *e) {
  switch (e->kind) {
  case CN_NT_NUMBER: return true;
  case CN_NT_LIST:
  case CN_NT_ARRAY:
  case CN_NT_TUPLE: return true;
  case CN_NT_ANNOT: return is_literal(e->u.annot.expr);
  case CN_NT_PREFIX: return strcmp(e->u.prefix.op, "-") == 0 && is_literal(e->u.prefix.operand);
  default: return false;
  }
}

/* Collects the axes (from the shape of the first element at each depth) and the values in
 * nesting order; every element of an axis must have the same shape. */
static bool literal_walk(interp *I, const cn_nt_expr *e, literal *L, int depth, double sign) {
  const char *label = NULL;
  if (e->kind == CN_NT_ANNOT) {
    label = e->u.annot.label;
    e = e->u.annot.expr;
  }
  if (e->kind == CN_NT_PREFIX) return literal_walk(I, e->u.prefix.operand, L, depth, -sign);
  if (e->kind == CN_NT_NUMBER) {
    if (depth != L->n_axes && L->n_values > 0) {
      fail(I, e->pos, "%s", "a literal's rows must all have the same shape");
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
    fail(I, e->pos, "%s", "a literal has too many axes");
    return false;
  }
  int n = e->u.items.n;
  if (L->n_values == 0) {
    L->kind[depth] = kind;
    L->dims[depth] = n;
    L->labels[depth] = label;
  } else if (depth >= L->n_axes || L->kind[depth] != kind || L->dims[depth] != n) {
    fail(I, e->pos, "%s", "a literal's rows must all have the same shape");
    return false;
  }
  if (n == 0) {
    fail(I, e->pos, "%s", "an empty literal axis");
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!literal_walk(I, e->u.items.items[i], L, depth + 1, sign)) return false;
  return true;
}

/* A data tensor: nesting order (lists = output axes, tuples = input, arrays = batch) is
 * permuted into memory order (batch, output, input). With rows_out, also the literal's rows
 * (arena copies), for a parameter that takes its shape from its initial value. */
static cn_tensor *literal_tensor_dims(interp *I, const cn_nt_expr *e, const char *label,
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
  if (!t) fail_here(I, e->pos);
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

static cn_tensor *literal_tensor(interp *I, const cn_nt_expr *e, const char *label) {
  return literal_tensor_dims(I, e, label, NULL);
}

/* ---- Declarations -------------------------------------------------------------------------- */

static value *eval(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x);

/* Dims from a declaration's fields: o (output), i (input), b (batch); a list or one integer. */
static bool decl_dims(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, cn_dims *d,
                      int64_t dims[3][CN_MAX_RANK]) {
  cn_axes *rows[3] = {&d->batch, &d->input, &d->output};
  static const char *const names[3] = {"b", "i", "o"};
  for (int k = 0; k < 3; k++) *rows[k] = CN_AXES_INFER;
  for (int f = 0; f < x->u.decl.n_fields; f++) {
    const cn_nt_field *field = &x->u.decl.fields[f];
    int k = 0;
    while (k < 3 && strcmp(field->name, names[k]) != 0) k++;
    if (k == 3 || !field->value) {
      fail(I, field->pos, "unknown declaration field '%s' (expected o, i or b)", field->name);
      return false;
    }
    value *v = eval(I, e, ds, field->value);
    if (!v) return false;
    int n = v->kind == V_LIST ? v->n : 1;
    if (n > CN_MAX_RANK) {
      fail(I, field->pos, "%s", "too many axes");
      return false;
    }
    for (int i = 0; i < n; i++)
      if (!as_int(I, v->kind == V_LIST ? v->items[i] : v, field->pos, &dims[k][i])) return false;
    *rows[k] = (cn_axes){n, dims[k], NULL};
  }
  return true;
}

static cn_tensor *declare(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, bool cd) {
  for (decl_entry *d = ds->entries; d; d = d->next)
    if (d->node == x) return d->t;
  char label[256];
  snprintf(label, sizeof label, "%s%s%s", ds->prefix ? ds->prefix : "", ds->prefix ? "." : "",
           x->u.decl.name);
  cn_dims dims;
  int64_t d[3][CN_MAX_RANK];
  if (!decl_dims(I, e, ds, x, &dims, d)) return NULL;
  bool any_dims = dims.batch.n >= 0 || dims.input.n >= 0 || dims.output.n >= 0;
  cn_tensor *t;
  if (cd) {
    t = cn_tensor_buffer(I->g, label, any_dims ? &dims : NULL);
  } else {
    cn_tensor *init = NULL;
    if (x->u.decl.init) {
      /* a literal initial value gives the parameter its rows (a number: a scalar) */
      if (is_literal(x->u.decl.init)) {
        init = literal_tensor_dims(I, x->u.decl.init, "init", any_dims ? NULL : &dims);
        any_dims = true;
      } else {
        value *v = eval(I, e, ds, x->u.decl.init);
        init = v ? as_tensor(I, v, x->u.decl.init->pos) : NULL;
      }
      if (!init) return NULL;
    }
    t = cn_tensor_param(I->g, label, any_dims ? &dims : NULL, init);
  }
  if (!t) return fail_here(I, x->pos), NULL;
  decl_entry *entry = cn_alloc(I->ctx, sizeof *entry);
  value *v = tensor_value(I, t);
  if (!entry || !v || !bind(I, &I->globals, x->u.decl.name, v)) return NULL;
  *entry = (decl_entry){x, t, ds->entries};
  ds->entries = entry;
  return t;
}

/* Creates every declaration below x (not inside nested functions' own lifting points). */
static bool predeclare(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  if (!x) return true;
  switch (x->kind) {
  case CN_NT_DECL: return declare(I, e, ds, x, false) != NULL;
  case CN_NT_FIELD: return predeclare(I, e, ds, x->u.field.subject);
  case CN_NT_PREFIX: return predeclare(I, e, ds, x->u.prefix.operand);
  case CN_NT_BINOP:
    return predeclare(I, e, ds, x->u.binop.lhs) && predeclare(I, e, ds, x->u.binop.rhs);
  case CN_NT_EINSUM:
    return predeclare(I, e, ds, x->u.einsum.lhs) && predeclare(I, e, ds, x->u.einsum.rhs);
  case CN_NT_APPLY:
    if (!predeclare(I, e, ds, x->u.apply.fn)) return false;
    for (int i = 0; i < x->u.apply.n_args; i++)
      if (!predeclare(I, e, ds, x->u.apply.args[i].value)) return false;
    return true;
  case CN_NT_LET:
    return predeclare(I, e, ds, x->u.let.value) && predeclare(I, e, ds, x->u.let.body);
  case CN_NT_ANNOT: return predeclare(I, e, ds, x->u.annot.expr);
  default: return true;
  }
}

/* ---- Operators and builtins --------------------------------------------------------------- */

static value *host_arith(interp *I, const char *op, value *a, value *b, cn_nt_pos pos) {
  double x = a->num, y = b->num, r;
  bool ints = a->is_int && b->is_int && strchr(op, '.') == NULL;
  switch (op[0]) {
  case '+': r = x + y; break;
  case '-': r = x - y; break;
  case '*': r = strcmp(op, "**") == 0 || strcmp(op, "**.") == 0 ? pow(x, y) : x * y; break;
  case '/':
    if (ints && y == 0) return fail(I, pos, "%s", "division by zero");
    r = ints ? trunc(x / y) : x / y;
    break;
  default: return fail(I, pos, "operator %s is not defined on numbers", op);
  }
  return num(I, r, ints);
}

/* A binary primitive by its infix spelling in the op table ("-?/" is relu_gate). */
static bool op_by_infix(const char *infix, cn_op *out) {
  for (int i = 0; i < CN_OP_COUNT; i++)
    if (cn_op_table[i].infix && cn_op_table[i].arity == 2 &&
        strcmp(cn_op_table[i].infix, infix) == 0) {
      *out = (cn_op)i;
      return true;
    }
  return false;
}

static cn_tensor *binary_tensor(interp *I, const char *op, cn_tensor *a, cn_tensor *b, value *bv) {
  cn_graph *g = I->g;
  cn_op prim;
  if (strcmp(op, "*") == 0) return cn_tensor_matmul(g, a, b);
  if (strcmp(op, "+") == 0)
    prim = CN_OP_ADD;
  else if (strcmp(op, "-") == 0)
    prim = CN_OP_SUB;
  else if (strcmp(op, "*.") == 0)
    prim = CN_OP_MUL;
  else if (strcmp(op, "/.") == 0 || strcmp(op, "/") == 0)
    prim = CN_OP_DIV;
  else if (strcmp(op, "**.") == 0 && bv && bv->kind == V_NUM)
    return cn_tensor_pointpow(g, a, bv->num);
  else if (strcmp(op, "<") == 0)
    prim = CN_OP_LT;
  else if (strcmp(op, "=") == 0)
    prim = CN_OP_EQ;
  else if (strcmp(op, "<>") == 0)
    prim = CN_OP_NE;
  else if (!op_by_infix(op, &prim)) {
    cn_fail(I->ctx, CN_ERR_INVALID, "unknown tensor operator %s", op);
    return NULL;
  }
  return cn_tensor_apply(g, prim, 2, (cn_tensor *[]){a, b});
}

static value *list_value(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  value *v = mk(I, V_LIST);
  if (!v) return NULL;
  v->n = x->kind == CN_NT_ANNOT ? 0 : x->u.items.n;
  if (x->kind == CN_NT_ANNOT) return v;
  v->items = cn_alloc(I->ctx, sizeof *v->items * (size_t)(v->n + 1));
  if (!v->items) return NULL;
  for (int i = 0; i < v->n; i++)
    if (!(v->items[i] = eval(I, e, ds, x->u.items.items[i]))) return NULL;
  return v;
}

static cn_tensor *tensor_of(interp *I, value *v, cn_nt_pos pos) {
  if (v && v->kind == V_LIST && v->literal) {
    if (!v->t) v->t = literal_tensor(I, v->literal, NULL);
    return v->t;
  }
  return as_tensor(I, v, pos);
}

/* ---- Application ------------------------------------------------------------------------- */

typedef struct {
  int n_pos;
  value *pos[8];
  cn_nt_pos pos_at[8];
  int n_lab;
  const char *lab[8];
  value *lab_v[8];
  cn_nt_pos lab_at[8];
} args;

static bool eval_args(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < x->u.apply.n_args; i++) {
    const cn_nt_arg *arg = &x->u.apply.args[i];
    value *v;
    if (arg->value) {
      if (!(v = eval(I, e, ds, arg->value))) return false;
    } else if (!(v = lookup(I, e, arg->label))) {
      fail(I, arg->pos, "unbound name '%s'", arg->label);
      return false;
    }
    if (arg->label) {
      if (a->n_lab == 8) return fail(I, arg->pos, "%s", "too many labeled arguments"), false;
      a->lab[a->n_lab] = arg->label;
      a->lab_at[a->n_lab] = arg->pos;
      a->lab_v[a->n_lab++] = v;
    } else {
      if (a->n_pos == 8) return fail(I, arg->pos, "%s", "too many arguments"), false;
      a->pos_at[a->n_pos] = arg->pos;
      a->pos[a->n_pos++] = v;
    }
  }
  return true;
}

static value *labeled(const args *a, const char *name) {
  for (int i = 0; i < a->n_lab; i++)
    if (strcmp(a->lab[i], name) == 0) return a->lab_v[i];
  return NULL;
}

static bool int_list(interp *I, value *v, cn_nt_pos pos, int64_t *out, int *n) {
  *n = 0;
  if (!v) return true;
  int count = v->kind == V_LIST ? v->n : 1;
  if (count > CN_MAX_RANK) return fail(I, pos, "%s", "too many axes"), false;
  for (int i = 0; i < count; i++)
    if (!as_int(I, v->kind == V_LIST ? v->items[i] : v, pos, &out[i])) return false;
  *n = count;
  return true;
}

static int64_t int_arg(const args *a, const char *name, int64_t dflt) {
  value *v = labeled(a, name);
  return v && v->kind == V_NUM ? (int64_t)v->num : dflt;
}

/* static_index N: a static index with values 0 .. N-1, bound by `for` loops. */
static value *static_index(interp *I, const args *a, cn_nt_pos at) {
  int64_t range;
  if (a->n_pos != 1 || a->n_lab != 0)
    return fail(I, at, "%s", "static_index takes one argument, the number of values");
  if (!as_int(I, a->pos[0], a->pos_at[0], &range)) return NULL;
  if (range < 1) return fail(I, a->pos_at[0], "%s", "a static index needs at least one value");
  value *v = mk(I, V_INDEX);
  if (v) v->index.range = range;
  return v;
}

/* half_moons ~n ~noise ~seed ~batch_size: the (points, labels) tuple of cn_dataset_half_moons;
 * batch axes [n / batch_size, batch_size] (or [n]), points with one output axis of 2. */
static value *half_moons(interp *I, const args *a, cn_nt_pos at) {
  static const char *const known[] = {"n", "noise", "seed", "batch_size"};
  for (int i = 0; i < a->n_lab; i++) {
    int k = 0;
    while (k < 4 && strcmp(a->lab[i], known[k]) != 0) k++;
    if (k == 4)
      return fail(I, a->lab_at[i], "half_moons has no argument ~%s (~n ~noise ~seed ~batch_size)",
                  a->lab[i]);
  }
  value *nv = labeled(a, "n"), *noise = labeled(a, "noise"), *seed = labeled(a, "seed");
  value *bv = labeled(a, "batch_size");
  int64_t n, batch = 0, seed_v = 0;
  if (a->n_pos > 0 || !nv)
    return fail(I, at, "%s",
                "half_moons takes labeled arguments: ~n (points), ~noise, ~seed, "
                "~batch_size");
  if (!as_int(I, nv, at, &n) || (seed && !as_int(I, seed, at, &seed_v)) ||
      (bv && !as_int(I, bv, at, &batch)))
    return NULL;
  if (noise && noise->kind != V_NUM) return fail(I, at, "%s", "~noise expects a number");
  if (n < 1 || n > (1 << 26) || seed_v < 0 || (bv && (batch < 1 || n % batch != 0)))
    return fail(I, at, "%s",
                "half_moons needs 1 <= ~n <= 2^26, ~seed >= 0 and a ~batch_size "
                "dividing ~n");
  double *xy = cn_malloc(I->ctx, sizeof *xy * 3 * (size_t)n);
  if (!xy) return NULL;
  cn_dataset_half_moons((uint64_t)seed_v, noise ? noise->num : 0.1, (size_t)n, xy, xy + 2 * n);
  const int64_t split[2] = {bv ? n / batch : n, batch}, coords = 2;
  const cn_axes batch_axes = {bv ? 2 : 1, split, NULL};
  const cn_dims pd = {batch_axes, CN_AXES_NONE, {1, &coords, NULL}};
  const cn_dims ld = {batch_axes, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *points = cn_tensor_data(I->g, "half_moons", &pd, xy, 2 * (size_t)n);
  cn_tensor *labels =
      points ? cn_tensor_data(I->g, "half_moons_labels", &ld, xy + 2 * n, (size_t)n) : NULL;
  free(xy);
  value *v = labels ? mk(I, V_LIST) : NULL;
  if (!labels) return fail_here(I, at);
  if (!v || !(v->items = cn_alloc(I->ctx, 2 * sizeof *v->items)) ||
      !(v->items[0] = tensor_value(I, points)) || !(v->items[1] = tensor_value(I, labels)))
    return NULL;
  v->n = 2;
  v->tuple = true;
  return v;
}

/* The builtins of the notation: primitive ops by their ops.def name, and the library. */
static value *builtin(interp *I, const char *name, const args *a, cn_nt_pos at) {
  /* host builtins first: their arguments are not tensors */
  if (strcmp(name, "static_index") == 0) return static_index(I, a, at);
  if (strcmp(name, "half_moons") == 0) return half_moons(I, a, at);
  cn_graph *g = I->g;
  cn_tensor *t[4] = {NULL, NULL, NULL, NULL};
  int n = a->n_pos;
  bool unit = n == 1 && a->pos[0]->kind == V_UNIT;
  const char *spec = n > 0 && a->pos[0]->kind == V_STR ? a->pos[0]->str : NULL;
  for (int i = spec ? 1 : 0; i < n && i < 4 && !unit; i++)
    if (!(t[i - (spec ? 1 : 0)] = tensor_of(I, a->pos[i], a->pos_at[i]))) return NULL;
  int nt = unit ? 0 : n - (spec ? 1 : 0);
  cn_tensor *r = NULL;
  cn_op op;
  if (cn_op_from_name(name, &op) && !spec) {
    if (nt != cn_op_arity(op)) return fail(I, at, "%s takes its operands as arguments", name);
    r = cn_tensor_apply(g, op, nt, t);
  } else if (strcmp(name, "einsum3") == 0 && spec && nt == 3) {
    r = cn_tensor_einsum3(g, spec, t[0], t[1], t[2]);
  } else if (strcmp(name, "einsum1") == 0 && spec && nt == 1) {
    r = cn_tensor_einsum1(g, spec, t[0]);
  } else if (strcmp(name, "einsum") == 0 && spec && nt == 2) {
    r = cn_tensor_einsum2(g, spec, t[0], t[1]);
  } else if (strcmp(name, "matmul") == 0 && nt == 2) {
    r = cn_tensor_matmul(g, t[0], t[1]);
  } else if (strcmp(name, "transpose") == 0 && nt == 1) {
    r = cn_tensor_transpose(g, t[0]);
  } else if (strcmp(name, "stop_gradient") == 0 && nt == 1) {
    r = cn_tensor_stop_gradient(g, t[0]);
  } else if (strcmp(name, "softmax") == 0 && nt == 1) {
    r = cn_tensor_softmax(g, t[0]);
  } else if (strcmp(name, "interleave") == 0 && nt == 2) {
    r = cn_tensor_interleave(g, t[0], t[1]);
  } else if (strcmp(name, "deinterleave_even") == 0 && nt == 1) {
    r = cn_tensor_deinterleave_even(g, t[0]);
  } else if (strcmp(name, "deinterleave_odd") == 0 && nt == 1) {
    r = cn_tensor_deinterleave_odd(g, t[0]);
  } else if (strcmp(name, "uniform1") == 0 && unit) {
    r = cn_tensor_uniform1(g);
  } else if (strcmp(name, "uniform") == 0 && unit) {
    r = cn_tensor_uniform(g);
  } else if (strcmp(name, "uniform_at") == 0 && nt == 1) {
    r = cn_tensor_uniform_at(g, t[0]);
  } else if (strcmp(name, "normal") == 0 && unit) {
    r = cn_tensor_normal(g);
  } else if (strcmp(name, "normal_at") == 0 && nt == 1) {
    r = cn_tensor_normal_at(g, t[0]);
  } else if (strcmp(name, "embed_self_id") == 0 && unit) {
    r = cn_tensor_embed_self_id(g);
  } else if (strcmp(name, "offsets") == 0 && unit) {
    r = cn_tensor_offsets(g);
  } else if (strcmp(name, "range") == 0 && n == 1 && a->pos[0]->kind == V_NUM) {
    r = cn_tensor_range(g, (int64_t)a->pos[0]->num);
  } else if (strcmp(name, "range_of_shape") == 0) {
    int64_t d[3][CN_MAX_RANK];
    int c[3];
    static const char *const labels[3] = {"batch_dims", "input_dims", "output_dims"};
    for (int k = 0; k < 3; k++)
      if (!int_list(I, labeled(a, labels[k]), at, d[k], &c[k])) return NULL;
    cn_dims dims = {{c[0], d[0], NULL}, {c[1], d[1], NULL}, {c[2], d[2], NULL}};
    r = cn_tensor_range_of_shape(g, &dims);
  } else if (strcmp(name, "conv2d") == 0 && nt == 2) {
    value *bias = labeled(a, "bias"), *valid = labeled(a, "valid");
    cn_tensor *b = bias ? tensor_of(I, bias, at) : NULL;
    if (bias && !b) return NULL;
    cn_conv2d opts = {int_arg(a, "stride", 1), int_arg(a, "dilation", 1),
                      valid && valid->kind == V_BOOL && valid->b};
    r = cn_tensor_conv2d(g, t[0], t[1], b, &opts);
  } else if ((strcmp(name, "max_pool2d") == 0 || strcmp(name, "avg_pool2d") == 0) && nt == 1) {
    int64_t window = int_arg(a, "window_size", int_arg(a, "window", 2));
    int64_t stride = int_arg(a, "stride", window);
    r = name[0] == 'm' ? cn_tensor_max_pool2d(g, t[0], window, stride)
                       : cn_tensor_avg_pool2d(g, t[0], window, stride);
  } else if (strcmp(name, "dim") == 0 && n == 2 && a->pos[1]->kind == V_NUM) {
    r = cn_tensor_embed_dim(g, t[0], (int)a->pos[1]->num);
  } else {
    return fail(I, at, "unknown function '%s' (or wrong arguments for it)", name);
  }
  if (!r) return fail_here(I, at);
  return tensor_value(I, r);
}

static value *eval_body(interp *I, value *fn);

static bool is_lifting(const cn_nt_param *p) {
  return p->kind == CN_NT_PARAM_UNIT || (p->name && strcmp(p->name, "config") == 0);
}

/* Curried application of a let%op function: arguments fill its parameters (positional ones in
 * order, labeled ones by name); once every required parameter is given, the body runs. */
static value *call(interp *I, value *fn, const args *a, cn_nt_pos at) {
  const cn_nt_item *def = fn->fn.def;
  int np = def->u.let.n_params;
  value *f = mk(I, V_FUNC);
  if (!f) return NULL;
  *f = *fn;
  f->fn.given = cn_alloc(I->ctx, sizeof(value *) * (size_t)(np + 1));
  if (!f->fn.given) return NULL;
  memcpy(f->fn.given, fn->fn.given, sizeof(value *) * (size_t)np);
  bool lifted = false;
  for (int i = 0; i < a->n_lab; i++) {
    int k = 0;
    while (k < np &&
           !(def->u.let.params[k].name && strcmp(def->u.let.params[k].name, a->lab[i]) == 0 &&
             def->u.let.params[k].kind != CN_NT_PARAM_PLAIN))
      k++;
    if (k == np) return fail(I, a->lab_at[i], "no parameter ~%s", a->lab[i]);
    f->fn.given[k] = a->lab_v[i];
    lifted |= is_lifting(&def->u.let.params[k]);
  }
  int next = 0;
  for (int i = 0; i < a->n_pos; i++) {
    while (next < np && (f->fn.given[next] || def->u.let.params[next].kind == CN_NT_PARAM_LABELED ||
                         def->u.let.params[next].kind == CN_NT_PARAM_OPTIONAL))
      next++;
    if (next == np) return fail(I, a->pos_at[i], "%s", "too many arguments");
    if (def->u.let.params[next].kind == CN_NT_PARAM_UNIT && a->pos[i]->kind != V_UNIT)
      return fail(I, a->pos_at[i], "%s", "expected ()");
    f->fn.given[next] = a->pos[i];
    lifted |= is_lifting(&def->u.let.params[next]);
  }
  if (lifted) { /* a lifting point: this application's own declarations */
    decl_scope *ds = cn_alloc(I->ctx, sizeof *ds);
    if (!ds) return NULL;
    for (int k = 0; k < np; k++) {
      value *cfg = f->fn.given[k];
      if (!cfg || cfg->kind != V_RECORD || !def->u.let.params[k].name ||
          strcmp(def->u.let.params[k].name, "config") != 0)
        continue;
      for (int j = 0; j < cfg->n; j++)
        if (strcmp(cfg->names[j], "label") == 0 && cfg->items[j]->kind == V_LIST &&
            cfg->items[j]->n > 0 && cfg->items[j]->items[0]->kind == V_STR)
          ds->prefix = cfg->items[j]->items[0]->str;
    }
    f->fn.decls = ds;
    env *scope = NULL;
    for (int k = 0; k < np; k++)
      if (f->fn.given[k] && def->u.let.params[k].name &&
          !bind(I, &scope, def->u.let.params[k].name, f->fn.given[k]))
        return NULL;
    if (!predeclare(I, scope, ds, def->u.let.expr)) return NULL;
  }
  for (int k = 0; k < np; k++)
    if (!f->fn.given[k] && def->u.let.params[k].kind != CN_NT_PARAM_OPTIONAL) return f;
  (void)at;
  return eval_body(I, f);
}

static value *eval_body(interp *I, value *f) {
  const cn_nt_item *def = f->fn.def;
  if (++I->depth > MAX_CALL_DEPTH) {
    I->depth--;
    return fail(I, def->pos, "%s", "function calls nested too deeply");
  }
  env *scope = NULL;
  value *result = NULL;
  bool ok = true;
  for (int k = 0; k < def->u.let.n_params && ok; k++) {
    const cn_nt_param *p = &def->u.let.params[k];
    value *v = f->fn.given[k];
    if (!v && p->default_value) v = eval(I, NULL, f->fn.decls, p->default_value);
    if (!v) v = mk(I, V_UNIT);
    if (p->name) ok = v && bind(I, &scope, p->name, v);
  }
  if (ok) result = eval(I, scope, f->fn.decls, def->u.let.expr);
  I->depth--;
  return result;
}

static value *apply(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  args a;
  if (!eval_args(I, e, ds, x, &a)) return NULL;
  const cn_nt_expr *fx = x->u.apply.fn;
  if (fx->kind == CN_NT_IDENT) {
    value *f = lookup(I, e, fx->u.ident.name);
    if (!f) return builtin(I, fx->u.ident.name, &a, fx->pos);
    if (f->kind == V_FUNC) return call(I, f, &a, x->pos);
    return fail(I, fx->pos, "'%s' is not a function", fx->u.ident.name);
  }
  value *f = eval(I, e, ds, fx);
  if (!f) return NULL;
  if (f->kind != V_FUNC) return fail(I, fx->pos, "%s is not a function", kind_name(f->kind));
  return call(I, f, &a, x->pos);
}

/* ---- Expressions ------------------------------------------------------------------------- */

static value *eval_einsum(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  value *av = eval(I, e, ds, x->u.einsum.lhs);
  cn_tensor *a = av ? tensor_of(I, av, x->u.einsum.lhs->pos) : NULL, *b = NULL, *r = NULL;
  if (!a) return NULL;
  if (x->u.einsum.rhs) {
    value *bv = eval(I, e, ds, x->u.einsum.rhs);
    if (!bv || !(b = tensor_of(I, bv, x->u.einsum.rhs->pos))) return NULL;
  }
  const char *spec = x->u.einsum.spec;
  switch (x->u.einsum.kind) {
  case CN_NT_EINSUM_BINARY: r = cn_tensor_einsum2(I->g, spec, a, b); break;
  case CN_NT_EINSUM_OUTER: r = cn_tensor_outer_sum(I->g, spec, a, b); break;
  case CN_NT_EINSUM_TROPICAL: r = cn_tensor_tropical(I->g, spec, a, b); break;
  case CN_NT_EINSUM_UNARY: r = cn_tensor_einsum1(I->g, spec, a); break;
  case CN_NT_EINSUM_MAX_UNARY: r = cn_tensor_einmax1(I->g, spec, a); break;
  }
  return r ? tensor_value(I, r) : fail_here(I, x->u.einsum.spec_pos);
}

static value *eval_binop(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  const char *op = x->u.binop.op;
  value *a = eval(I, e, ds, x->u.binop.lhs), *b = a ? eval(I, e, ds, x->u.binop.rhs) : NULL;
  if (!b) return NULL;
  if (a->kind == V_NUM && b->kind == V_NUM) return host_arith(I, op, a, b, x->u.binop.op_pos);
  if (strcmp(op, "@|") == 0) { /* at a static index, or at a constant position */
    cn_tensor *t = tensor_of(I, a, x->u.binop.lhs->pos), *r;
    int64_t index;
    cn_symbol sym;
    if (!t) return NULL;
    if (b->kind == V_INDEX) {
      if (!index_symbol(I, b, x->u.binop.rhs->pos, &sym)) return NULL;
      r = cn_tensor_batch_slice(I->g, t, sym);
    } else {
      if (!as_int(I, b, x->u.binop.rhs->pos, &index)) return NULL;
      r = cn_tensor_batch_slice_at(I->g, t, index);
    }
    return r ? tensor_value(I, r) : fail_here(I, x->u.binop.op_pos);
  }
  cn_tensor *ta = tensor_of(I, a, x->u.binop.lhs->pos);
  cn_tensor *tb =
      strcmp(op, "**.") == 0 && b->kind == V_NUM ? NULL : tensor_of(I, b, x->u.binop.rhs->pos);
  if (!ta || (!tb && !(strcmp(op, "**.") == 0 && b->kind == V_NUM))) return NULL;
  cn_tensor *r = binary_tensor(I, op, ta, tb, b);
  return r ? tensor_value(I, r) : fail_here(I, x->u.binop.op_pos);
}

static value *eval(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  switch (x->kind) {
  case CN_NT_NUMBER:
    if (x->u.number.label) { /* 'q' 2.0: one output axis of size 1, labeled */
      const char *labels[1] = {x->u.number.label};
      cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){1}, labels}};
      cn_tensor *t = cn_tensor_data(I->g, x->u.number.label, &d, &x->u.number.value, 1);
      return t ? tensor_value(I, t) : fail_here(I, x->pos);
    }
    return num(I, x->u.number.value, x->u.number.is_int);
  case CN_NT_STRING: {
    value *v = mk(I, V_STR);
    if (v) v->str = x->u.string.text;
    return v;
  }
  case CN_NT_BOOL: {
    value *v = mk(I, V_BOOL);
    if (v) v->b = x->u.boolean;
    return v;
  }
  case CN_NT_UNIT: return mk(I, V_UNIT);
  case CN_NT_IDENT: {
    value *v = lookup(I, e, x->u.ident.name);
    return v ? v : fail(I, x->pos, "unbound name '%s'", x->u.ident.name);
  }
  case CN_NT_FIELD: {
    value *s = eval(I, e, ds, x->u.field.subject);
    if (!s) return NULL;
    const char *name = x->u.field.name;
    if (s->kind == V_RECORD) {
      for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return s->items[i];
      return fail(I, x->u.field.name_pos, "the record has no field '%s'", name);
    }
    if (s->kind != V_TENSOR) return fail(I, x->pos, "%s has no fields", kind_name(s->kind));
    if (strcmp(name, "value") == 0) return tensor_value(I, s->t);
    if (strcmp(name, "grad") == 0) {
      if (!s->t->diff)
        return fail(I, x->u.field.name_pos, "\"%s\" has no gradient (not differentiable)",
                    s->t->label);
      value *v = tensor_value(I, s->t);
      if (v) v->grad = true;
      return v;
    }
    return fail(I, x->u.field.name_pos, "unsupported field '%s' (value or grad)", name);
  }
  case CN_NT_PREFIX: {
    value *v = eval(I, e, ds, x->u.prefix.operand);
    if (!v) return NULL;
    const char *op = x->u.prefix.op;
    if (strcmp(op, "!.") == 0 || strcmp(op, "!..") == 0) {
      if (v->kind != V_NUM) return fail(I, x->pos, "%s expects a number", op);
      cn_tensor *t = cn_tensor_number(I->g, op[2] ? trunc(v->num) : v->num);
      return t ? tensor_value(I, t) : fail_here(I, x->pos);
    }
    if (strcmp(op, "!@") == 0) { /* a static index's value, as a scalar tensor */
      cn_symbol sym;
      if (v->kind != V_INDEX)
        return fail(I, x->pos,
                    "!@ expects a static index (of static_index or a for loop), found %s",
                    kind_name(v->kind));
      if (!index_symbol(I, v, x->pos, &sym)) return NULL;
      cn_tensor *t = cn_tensor_embed_symbol(I->g, sym);
      return t ? tensor_value(I, t) : fail_here(I, x->pos);
    }
    if (strcmp(op, "-") == 0 || strcmp(op, "-.") == 0) {
      if (v->kind == V_NUM) return num(I, -v->num, v->is_int);
      cn_tensor *t = tensor_of(I, v, x->pos);
      cn_tensor *r = t ? cn_tensor_apply(I->g, CN_OP_NEG, 1, &t) : NULL;
      return r ? tensor_value(I, r) : t ? fail_here(I, x->pos) : NULL;
    }
    return fail(I, x->pos, "unsupported prefix operator %s", op);
  }
  case CN_NT_BINOP: return eval_binop(I, e, ds, x);
  case CN_NT_EINSUM: return eval_einsum(I, e, ds, x);
  case CN_NT_APPLY: return apply(I, e, ds, x);
  case CN_NT_LET: {
    value *v = eval(I, e, ds, x->u.let.value);
    env *inner = e;
    if (!v || (strcmp(x->u.let.name, "_") != 0 && !bind(I, &inner, x->u.let.name, v))) return NULL;
    return eval(I, inner, ds, x->u.let.body);
  }
  case CN_NT_LIST:
  case CN_NT_TUPLE:
  case CN_NT_ARRAY:
  case CN_NT_ANNOT: {
    value *v = list_value(I, e, ds, x);
    if (v && is_literal(x)) v->literal = x;
    if (v) v->tuple = x->kind == CN_NT_TUPLE;
    return v;
  }
  case CN_NT_DECL: {
    cn_tensor *t = declare(I, e, ds, x, false);
    return t ? tensor_value(I, t) : NULL;
  }
  case CN_NT_RECORD: {
    value *v = mk(I, V_RECORD);
    if (!v) return NULL;
    v->n = x->u.record.n_fields;
    v->items = cn_alloc(I->ctx, sizeof *v->items * (size_t)v->n);
    v->names = cn_alloc(I->ctx, sizeof *v->names * (size_t)v->n);
    if (!v->items || !v->names) return NULL;
    for (int i = 0; i < v->n; i++) {
      const cn_nt_field *f = &x->u.record.fields[i];
      v->names[i] = f->name;
      v->items[i] = f->value ? eval(I, e, ds, f->value) : lookup(I, e, f->name);
      if (!v->items[i]) return f->value ? NULL : fail(I, f->pos, "unbound name '%s'", f->name);
    }
    return v;
  }
  }
  return NULL;
}

/* ---- %cd ----------------------------------------------------------------------------------- */

static code *new_code(interp *I, code_kind kind) {
  code *c = cn_alloc(I->ctx, sizeof *c);
  if (c) c->kind = kind;
  return c;
}

static code *seq_code(interp *I, int n, code **items) {
  code *c = new_code(I, C_SEQ);
  if (!c) return NULL;
  c->n = n;
  c->items = cn_alloc(I->ctx, sizeof *items * (size_t)(n + 1));
  if (!c->items) return NULL;
  if (n) memcpy(c->items, items, sizeof *items * (size_t)n);
  return c;
}

/* A buffer declared by a %cd target written {name} or "name". */
static cn_tensor *cd_declare(interp *I, const cn_nt_expr *x) {
  if (x->kind == CN_NT_DECL) return declare(I, NULL, &I->top, x, true);
  for (decl_entry *d = I->top.entries; d; d = d->next)
    if (d->node == x) return d->t;
  cn_tensor *t = cn_tensor_buffer(I->g, x->u.string.text, NULL);
  decl_entry *entry = t ? cn_alloc(I->ctx, sizeof *entry) : NULL;
  value *v = entry ? tensor_value(I, t) : NULL;
  if (!t) return fail_here(I, x->pos), NULL;
  if (!v || !bind(I, &I->globals, x->u.string.text, v)) return NULL;
  *entry = (decl_entry){x, t, I->top.entries};
  I->top.entries = entry;
  return t;
}

/* An operand or target of an assignment: a tensor's value or gradient; an embedded expression
 * is built as a tensor whose forward code runs first (appended to *pre). */
static bool cd_ref(interp *I, env *e, const cn_nt_expr *x, cn_tref *out, code **pre, int *n_pre,
                   bool target) {
  if (x->kind == CN_NT_DECL || (x->kind == CN_NT_STRING && target)) {
    cn_tensor *t = cd_declare(I, x);
    *out = (cn_tref){t, false};
    return t != NULL;
  }
  value *v = eval(I, e, &I->top, x);
  if (!v) return false;
  if (v->kind == V_TENSOR) {
    *out = (cn_tref){v->t, v->grad};
    bool computed = v->t->kind == CN_TK_ACCUM || v->t->kind == CN_TK_NUMBER ||
                    v->t->kind == CN_TK_FETCH || v->t->kind == CN_TK_VEC;
    if (target || !computed ||
        (x->kind != CN_NT_BINOP && x->kind != CN_NT_APPLY && x->kind != CN_NT_EINSUM &&
         x->kind != CN_NT_PREFIX))
      return true;
  } else {
    if (target) return fail(I, x->pos, "cannot assign to %s", kind_name(v->kind)), false;
    cn_tensor *t = tensor_of(I, v, x->pos);
    if (!t) return false;
    *out = (cn_tref){t, false};
  }
  code *c = new_code(I, C_FORWARD);
  if (!c) return false;
  c->tensor = out->tensor;
  pre[(*n_pre)++] = c;
  return true;
}

static code *eval_cd(interp *I, env *e, const cn_nt_cd *cd) {
  switch (cd->kind) {
  case CN_NT_CD_ASSIGN: {
    code *items[5];
    int n = 0;
    cn_tref lhs, rhs[3];
    if (!cd_ref(I, e, cd->u.assign.lhs, &lhs, items, &n, true)) return NULL;
    for (int i = 0; i < cd->u.assign.n_rhs; i++)
      if (!cd_ref(I, e, cd->u.assign.rhs[i], &rhs[i], items, &n, false)) return NULL;
    const char *logic = NULL;
    const cn_nt_arg *la = cn_nt_find_arg(cd->u.assign.n_args, cd->u.assign.args, "logic");
    if (la && la->value) {
      value *lv = eval(I, e, &I->top, la->value);
      if (!lv) return NULL;
      if (lv->kind != V_STR) return fail(I, la->pos, "%s", "~logic expects a string"), NULL;
      logic = lv->str;
    } else if (cd->u.assign.form == CN_NT_RHS_INFIX && cd->u.assign.op_text &&
               strcmp(cd->u.assign.op_text, "*") == 0) {
      fail(I, cd->u.assign.op_pos, "%s",
           "'*' in an assignment needs ~logic (\".\" pointwise, \"@\" compose, or a spec)");
      return NULL;
    }
    cn_update *u = cn_graph_update(I->g, lhs, cd->u.assign.clear, cd->u.assign.accum,
                                   cd->u.assign.op, cd->u.assign.n_rhs, rhs, logic);
    if (!u) return fail_here(I, cd->u.assign.op_pos), NULL;
    code *c = new_code(I, C_UPDATE);
    if (!c) return NULL;
    c->update = u;
    items[n++] = c;
    return n == 1 ? c : seq_code(I, n, items);
  }
  case CN_NT_CD_SEQ: {
    code **items = cn_alloc(I->ctx, sizeof *items * (size_t)(cd->u.seq.n + 1));
    if (!items) return NULL;
    for (int i = 0; i < cd->u.seq.n; i++)
      if (!(items[i] = eval_cd(I, e, cd->u.seq.items[i]))) return NULL;
    return seq_code(I, cd->u.seq.n, items);
  }
  case CN_NT_CD_IF: {
    value *c = eval(I, e, &I->top, cd->u.if_.cond);
    if (!c) return NULL;
    if (c->kind != V_BOOL && c->kind != V_NUM)
      return fail(I, cd->u.if_.cond->pos, "%s", "an if condition must be a host value"), NULL;
    bool yes = c->kind == V_BOOL ? c->b : c->num != 0;
    if (yes) return eval_cd(I, e, cd->u.if_.then_branch);
    return cd->u.if_.else_branch ? eval_cd(I, e, cd->u.if_.else_branch) : seq_code(I, 0, NULL);
  }
  case CN_NT_CD_COMMENT: {
    cn_sbuf sb = {0};
    for (int i = 0; i < cd->u.comment.n_parts; i++) {
      value *v = eval(I, e, &I->top, cd->u.comment.parts[i]);
      if (!v) {
        cn_sbuf_free(&sb);
        return NULL;
      }
      if (i) cn_sbuf_putc(&sb, ' ');
      cn_sbuf_puts(&sb, v->kind == V_STR ? v->str : v->kind == V_TENSOR ? v->t->label : "?");
    }
    code *c = new_code(I, C_COMMENT);
    if (!c) return cn_sbuf_free(&sb), NULL;
    c->text = cn_sbuf_finish(I->ctx, &sb);
    c->n = 1;
    c->items = cn_alloc(I->ctx, sizeof *c->items);
    if (!c->text || !c->items || !(c->items[0] = eval_cd(I, e, cd->u.comment.body))) return NULL;
    return c;
  }
  }
  return NULL;
}

/* The assignments of a routine's code. With `init` NULL, the init code of the parameters an
 * embedded expression reads comes first in the tree (cn_notation_cd); otherwise it is gathered
 * into *init, to run once before a routine that may run many times. */
static cn_asgn *code_asgn(interp *I, const code *c, cn_asgn **init) {
  cn_ctx *ctx = I->ctx;
  switch (c->kind) {
  case C_UPDATE: return cn_graph_update_code(I->g, c->update);
  case C_FORWARD: {
    cn_asgn *params = cn_graph_init_params(I->g, c->tensor);
    cn_asgn *forward = params ? cn_graph_forward(I->g, c->tensor) : NULL;
    if (!forward) return NULL;
    if (!init) return cn_asgn_seq(ctx, 2, (cn_asgn *[]){params, forward});
    *init = *init ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){*init, params}) : params;
    return *init ? forward : NULL;
  }
  case C_COMMENT: {
    cn_asgn *body = code_asgn(I, c->items[0], init);
    return body ? cn_asgn_comment(ctx, c->text, body) : NULL;
  }
  case C_SEQ: {
    cn_asgn **items = cn_alloc(ctx, sizeof *items * (size_t)(c->n + 1));
    if (!items) return NULL;
    for (int i = 0; i < c->n; i++)
      if (!(items[i] = code_asgn(I, c->items[i], init))) return NULL;
    return c->n ? cn_asgn_seq(ctx, c->n, items) : cn_asgn_noop(ctx);
  }
  }
  return NULL;
}

/* ---- Statements ---------------------------------------------------------------------------- */

static FILE *out(interp *I) {
  return I->opts.out ? I->opts.out : stdout;
}

/* Compiles asgn (or reuses *cache when it holds a routine), binds the enclosing loops' indices the
 * routine reads and runs it, printing what --emit asks for. Without a cache the routine is freed
 * after the run. */
static bool run_asgn(interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at) {
  cn_routine *r = cache ? *cache : NULL;
  if (!r) {
    char name[32];
    snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
    if (!asgn || !(r = cn_routine_compile(I->ctx, asgn, I->opts.backend, name)))
      return fail_here(I, at), false;
    if (I->opts.emit_asgn)
      fprintf(out(I), "# %s: assignments\n%s", name, cn_asgn_to_string(I->ctx, asgn));
    if (I->opts.emit_loops) fprintf(out(I), "# %s: loops\n%s", name, cn_routine_loops(r));
    if (I->opts.emit_c && cn_routine_source(r))
      fprintf(out(I), "# %s: C\n%s", name, cn_routine_source(r));
    if (cache) *cache = r;
  }
  cn_status st = CN_OK;
  for (int i = 0; i < I->n_bound && st == CN_OK; i++)
    if (cn_routine_reads(r, I->bound[i].sym))
      st = cn_routine_bind(r, I->bound[i].sym, I->bound[i].value);
  if (st == CN_OK) st = cn_routine_run(r);
  if (!cache) cn_routine_free(r);
  if (st != CN_OK) return fail_here(I, at), false;
  return true;
}

static bool asgn_empty(const cn_asgn *a) {
  switch (a->kind) {
  case CN_ASGN_NOOP: return true;
  case CN_ASGN_COMMENT: return asgn_empty(a->u.comment.body);
  case CN_ASGN_SEQ:
    for (int i = 0; i < a->u.seq.count; i++)
      if (!asgn_empty(a->u.seq.items[i])) return false;
    return true;
  default: return false;
  }
}

/* Runs a statement's parameter init code and its main code. Outside loops as one routine, freed
 * after the run; in a loop body the init code (if any) runs on its own, once, and main is
 * compiled into st->routine, which later executions run again. */
static bool run_statement(interp *I, item_state *st, cn_asgn *init, cn_asgn *main, cn_nt_pos at) {
  if (!init || !main) return fail_here(I, at), false;
  if (I->n_bound == 0)
    return run_asgn(I, cn_asgn_seq(I->ctx, 2, (cn_asgn *[]){init, main}), NULL, at);
  if (!asgn_empty(init) && !run_asgn(I, init, NULL, at)) return false;
  return run_asgn(I, main, &st->routine, at);
}

/* The state of a statement in a loop body (created on its first execution); outside loops a
 * statement runs once and uses the caller's zeroed `local`. */
static item_state *state_of(interp *I, const cn_nt_item *it, item_state *local) {
  if (I->n_bound == 0) return local;
  for (item_state *s = I->states; s; s = s->next)
    if (s->item == it) return s;
  item_state *s = cn_alloc(I->ctx, sizeof *s);
  if (!s) return NULL;
  s->item = it;
  s->next = I->states;
  return I->states = s;
}

/* The tensor a statement works on (built once per statement state). */
static bool statement_tensor(interp *I, env *scope, const cn_nt_expr *x, item_state *st) {
  if (st->tensor) return true;
  value *v = eval(I, scope, &I->top, x);
  st->grad = v && v->kind == V_TENSOR && v->grad;
  st->tensor = v && v->kind == V_TENSOR ? v->t : v ? tensor_of(I, v, x->pos) : NULL;
  return st->tensor != NULL;
}

static bool item(interp *I, const cn_nt_item *it, env *scope);

/* A value bound by a let: a literal becomes its tensor; a tensor or static index this let
 * created takes the name. */
static value *let_value(interp *I, value *v, const char *name, int before, cn_nt_pos pos) {
  if (v->kind == V_LIST && v->literal) {
    if (!tensor_of(I, v, pos)) return NULL;
    v = tensor_value(I, v->t);
  }
  if (!v || strcmp(name, "_") == 0) return v;
  if (v->kind == V_TENSOR && v->t->id > before && cn_tensor_set_label(v->t, name) != CN_OK)
    return NULL;
  if (v->kind == V_INDEX && !v->index.name) v->index.name = name;
  return v;
}

/* let (a, b, ...) = e: e must be a tuple of as many items. */
static bool bind_pattern(interp *I, const cn_nt_item *it, value *v, int before) {
  int n = it->u.let.n_names;
  if (v->kind != V_LIST || !v->tuple || v->n != n) {
    cn_nt_fail_at(I->ctx, it->u.let.expr->pos, "the pattern binds %d names: expected a tuple of %d",
                  n, n);
    return false;
  }
  for (int i = 0; i < n; i++) {
    const char *name = it->u.let.names[i];
    value *item_v = let_value(I, v->items[i], name, before, it->u.let.expr->pos);
    if (!item_v || (strcmp(name, "_") != 0 && !bind(I, &I->globals, name, item_v))) return false;
  }
  return true;
}

static bool let_item(interp *I, const cn_nt_item *it) {
  const char *name = it->u.let.name;
  value *v;
  if (it->u.let.ext == CN_NT_LET_CD) {
    code *c = eval_cd(I, NULL, it->u.let.cd);
    if (!c || !(v = mk(I, V_ROUTINE))) return false;
    v->routine = c;
  } else if (it->u.let.n_params > 0) {
    if (!(v = mk(I, V_FUNC))) return false;
    v->fn.def = it;
    v->fn.given = cn_alloc(I->ctx, sizeof(value *) * (size_t)it->u.let.n_params);
    if (!v->fn.given) return false;
    bool lifting = false;
    for (int k = 0; k < it->u.let.n_params; k++) lifting |= is_lifting(&it->u.let.params[k]);
    if (!lifting) { /* declarations are created once, now, and shared by every application */
      if (!(v->fn.decls = cn_alloc(I->ctx, sizeof *v->fn.decls))) return false;
      if (!predeclare(I, NULL, v->fn.decls, it->u.let.expr)) return false;
    }
  } else {
    int before = I->g->n_tensors;
    if (!(v = eval(I, NULL, &I->top, it->u.let.expr))) return false;
    if (it->u.let.n_names > 0) return bind_pattern(I, it, v, before);
    if (!(v = let_value(I, v, name, before, it->u.let.expr->pos))) return false;
  }
  return strcmp(name, "_") == 0 || bind(I, &I->globals, name, v);
}

/* for i = a to b do ... done: binds i (an existing static index, or a new one with the values
 * 0 .. b) to a, a + 1, ..., b in turn and runs the body each time; nothing when b < a. */
static bool for_item(interp *I, const cn_nt_item *it, env *scope, item_state *st) {
  value *from = eval(I, scope, &I->top, it->u.for_.from);
  value *to = from ? eval(I, scope, &I->top, it->u.for_.to) : NULL;
  int64_t lo, hi;
  if (!to || !as_int(I, from, it->u.for_.from->pos, &lo) || !as_int(I, to, it->u.for_.to->pos, &hi))
    return false;
  if (lo < 0 && hi >= lo)
    return fail(I, it->u.for_.from->pos, "%s", "a static index starts at 0 or more");
  if (!st->index) {
    value *v = lookup(I, scope, it->u.for_.name);
    if (!v || v->kind != V_INDEX) {
      if (!(v = mk(I, V_INDEX))) return false;
      v->index.range = hi >= lo ? hi + 1 : 1;
      v->index.name = it->u.for_.name;
    }
    st->index = v;
  }
  if (hi >= lo && hi >= st->index->index.range) {
    char what[160];
    snprintf(what, sizeof what, "the loop reaches %lld, outside the values 0 .. %lld of '%s'",
             (long long)hi, (long long)st->index->index.range - 1, it->u.for_.name);
    return fail(I, it->u.for_.to->pos, "%s", what);
  }
  cn_symbol sym;
  env *body = scope;
  if (!index_symbol(I, st->index, it->u.for_.name_pos, &sym) ||
      !bind(I, &body, it->u.for_.name, st->index))
    return false;
  CN_ASSERT(I->n_bound < CN_NT_MAX_LOOP_DEPTH); /* the parser's nesting limit */
  int slot = I->n_bound++;
  I->bound[slot].sym = sym;
  bool ok = true;
  for (int64_t i = lo; ok && i <= hi; i++) {
    I->bound[slot].value = i;
    for (int k = 0; ok && k < it->u.for_.n_items; k++) ok = item(I, &it->u.for_.items[k], body);
  }
  I->n_bound--;
  return ok;
}

static bool sgd_item(interp *I, const cn_nt_item *it, env *scope, item_state *st) {
  if (st->routine) return run_asgn(I, NULL, &st->routine, it->pos);
  if (!statement_tensor(I, scope, it->u.sgd.expr, st)) return false;
  value *lr = eval(I, scope, &I->top, it->u.sgd.learning_rate);
  cn_tensor *lrt = lr ? tensor_of(I, lr, it->u.sgd.learning_rate->pos) : NULL;
  if (!lrt) return false;
  value *m = it->u.sgd.momentum ? eval(I, scope, &I->top, it->u.sgd.momentum) : NULL;
  value *w = it->u.sgd.weight_decay ? eval(I, scope, &I->top, it->u.sgd.weight_decay) : NULL;
  value *nv = it->u.sgd.nesterov ? eval(I, scope, &I->top, it->u.sgd.nesterov) : NULL;
  if ((it->u.sgd.momentum && (!m || m->kind != V_NUM)) ||
      (it->u.sgd.weight_decay && (!w || w->kind != V_NUM)) ||
      (it->u.sgd.nesterov && (!nv || nv->kind != V_BOOL)))
    return fail(I, it->pos, "%s",
                "sgd expects numbers for ~momentum and ~weight_decay, a boolean for ~nesterov"),
           false;
  cn_sgd sgd = {lrt, m ? m->num : 0, w ? w->num : 0, nv && nv->b};
  cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
  return run_statement(I, st, init, init ? cn_graph_sgd_update(I->g, st->tensor, &sgd) : NULL,
                       it->pos);
}

static bool item(interp *I, const cn_nt_item *it, env *scope) {
  if (it->kind == CN_NT_ITEM_LET) return let_item(I, it);
  item_state local = {0}, *st = state_of(I, it, &local);
  if (!st) return false;
  switch (it->kind) {
  case CN_NT_ITEM_LET: return false; /* handled above: a let keeps no state */
  case CN_NT_ITEM_PRINT: {
    cn_nt_pos at = it->u.expr->pos;
    if (!statement_tensor(I, scope, it->u.expr, st)) return false;
    if (!st->grad && st->routine && !run_asgn(I, NULL, &st->routine, at)) return false;
    if (!st->grad && !st->routine) {
      cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
      if (!run_statement(I, st, init, init ? cn_graph_forward(I->g, st->tensor) : NULL, at))
        return false;
    }
    const char *text = cn_tensor_format(st->tensor, st->grad, I->opts.json);
    if (!text) return fail_here(I, at), false;
    fprintf(out(I), "%s%s", text, I->opts.json ? "\n" : "");
    return true;
  }
  case CN_NT_ITEM_BACKPROP: {
    cn_nt_pos at = it->u.expr->pos;
    if (st->routine) return run_asgn(I, NULL, &st->routine, at);
    if (!statement_tensor(I, scope, it->u.expr, st)) return false;
    cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
    return run_statement(I, st, init, init ? cn_graph_grad_update(I->g, st->tensor) : NULL, at);
  }
  case CN_NT_ITEM_RUN: {
    value *v = eval(I, scope, &I->top, it->u.expr);
    if (!v) return false;
    if (v->kind != V_ROUTINE)
      return fail(I, it->u.expr->pos, "%s is not a routine", kind_name(v->kind)), false;
    code *c = v->routine;
    if (!c->compiled) { /* parameter init runs once, before the first run */
      cn_asgn *init = NULL, *main = code_asgn(I, c, &init);
      if (!main) return fail_here(I, it->u.expr->pos), false;
      if (init && !asgn_empty(init) && !run_asgn(I, init, NULL, it->u.expr->pos)) return false;
      return run_asgn(I, main, &c->compiled, it->u.expr->pos);
    }
    return run_asgn(I, NULL, &c->compiled, it->u.expr->pos);
  }
  case CN_NT_ITEM_SGD: return sgd_item(I, it, scope, st);
  case CN_NT_ITEM_SET_SEED:
    if (cn_graph_set_seed(I->g, (uint32_t)it->u.seed) != CN_OK) return fail_here(I, it->pos), false;
    return true;
  case CN_NT_ITEM_FOR: return for_item(I, it, scope, st);
  }
  return false;
}

/* ---- Entry points ---------------------------------------------------------------------------- */

static bool bind_all(interp *I, int n, const cn_notation_binding *b) {
  for (int i = 0; i < n; i++) {
    value *v = b[i].tensor ? tensor_value(I, b[i].tensor)
                           : num(I, b[i].number, b[i].number == floor(b[i].number));
    if (!b[i].name || !v || !bind(I, &I->globals, b[i].name, v)) {
      if (!b[i].name) cn_fail(I->ctx, CN_ERR_INVALID, "binding %d has no name", i);
      return false;
    }
  }
  return true;
}

static void open_interp(interp *I, cn_graph *g, const cn_notation_options *opts) {
  memset(I, 0, sizeof *I);
  I->ctx = cn_graph_ctx(g);
  I->g = g;
  if (opts) I->opts = *opts;
}

cn_status cn_notation_run(cn_graph *g, const char *file, const char *text,
                          const cn_notation_options *opts) {
  interp I;
  open_interp(&I, g, opts);
  cn_nt_program *prog = cn_nt_parse_program(I.ctx, file ? file : "<script>", text ? text : "");
  if (!prog) return cn_ctx_status(I.ctx);
  for (int i = 0; i < prog->n_items; i++)
    if (!item(&I, &prog->items[i], NULL))
      return cn_ctx_status(I.ctx) ? cn_ctx_status(I.ctx) : CN_ERR_INVALID;
  return CN_OK;
}

cn_status cn_notation_check(cn_ctx *ctx, const char *file, const char *text) {
  return cn_nt_parse_program(ctx, file ? file : "<script>", text ? text : "") ? CN_OK
                                                                              : cn_ctx_status(ctx);
}

cn_tensor *cn_notation_op(cn_graph *g, const char *text, int n_bindings,
                          const cn_notation_binding *bindings) {
  interp I;
  open_interp(&I, g, NULL);
  if (!bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_expr *x = cn_nt_parse_expr(I.ctx, "<cn_op>", text ? text : "");
  value *v = x ? eval(&I, NULL, &I.top, x) : NULL;
  return v ? tensor_of(&I, v, x->pos) : NULL;
}

cn_asgn *cn_notation_cd(cn_graph *g, const char *text, int n_bindings,
                        const cn_notation_binding *bindings) {
  interp I;
  open_interp(&I, g, NULL);
  if (!bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_cd *cd = cn_nt_parse_cd(I.ctx, "<cn_cd>", text ? text : "");
  code *c = cd ? eval_cd(&I, NULL, cd) : NULL;
  return c ? code_asgn(&I, c, NULL) : NULL;
}
