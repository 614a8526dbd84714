/* The evaluator of the notation (issue 6), core floor (eval_core.h: it may include the core's,
 * the services' and the base's headers; the base holds the values, errors and literals): inline
 * declarations and %op expressions, the recursion's entry nt_eval.
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
 * position of %op, a string "w" is the declaration {w}. Every expression notes what it built
 * (nt_note, the base's provenance). An if expression evaluates its condition on the host, then only
 * the branch it chooses.
 *
 * Invariants: every failure is a positioned message (FILE:LINE:COL, the line, a caret) naming
 * the expression that introduced it, library messages included; nothing here aborts on user
 * input; recursion is bounded by the parser's height limit and a call-depth limit. */
#include "notation/eval_core.h"

#include "numeric/numeric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
      } else if (nt_is_literal(init)) {
        init_t = nt_literal_tensor(I, init, "init", any_dims ? NULL : &dims);
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
  if (logic) return nt_bool(I, op[0] == '&' ? truthy(a) && truthy(b) : truthy(a) || truthy(b));
  if (a->kind == NT_V_BOOL && b->kind == NT_V_BOOL) {
    if (strcmp(op, "=") == 0 || strcmp(op, "==") == 0) return nt_bool(I, a->b == b->b);
    if (strcmp(op, "<>") == 0 || strcmp(op, "!=") == 0) return nt_bool(I, a->b != b->b);
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
      return nt_bool(I, x < y ? cmp[i].lt : x > y ? cmp[i].gt : x == y ? cmp[i].eq : 0);
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

/* Strings compare (= == <> !=) and concatenate (^), on the host. */
static nt_value *string_binop(nt_interp *I, const cn_nt_expr *x, nt_value *a, nt_value *b) {
  const char *op = x->u.binop.op;
  if (a->kind != NT_V_STR || b->kind != NT_V_STR)
    return nt_fail(I, x->u.binop.op_pos, "operator %s is not defined on %s and %s", op,
                   nt_kind_name(a->kind), nt_kind_name(b->kind));
  if (strcmp(op, "=") == 0 || strcmp(op, "==") == 0) return nt_bool(I, strcmp(a->str, b->str) == 0);
  if (strcmp(op, "<>") == 0 || strcmp(op, "!=") == 0)
    return nt_bool(I, strcmp(a->str, b->str) != 0);
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
  case CN_NT_BOOL: return nt_bool(I, x->u.boolean);
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
    if (v && nt_is_literal(x)) v->literal = x;
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
