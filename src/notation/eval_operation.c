/* The evaluator's core floor (eval_core.h: it may include the core's, the services' and the
 * base's headers), a library builtin: operations defined by their
 * code, the seed's `Tensor.binop ~op_asn ~grad_asn` (syntax-extensions-cd-op "The hard-coded
 * to-the-power-of operator"; contraction-is-emergent's consumer regime):
 *
 *   operation ~op_asn:F [~grad_asn:G] [~logic:L] [~label:S] [~no_grad:true] t1 [t2 [t3]]
 *
 * F and G are let%cd functions; their parameters (the seed's ~v ~t1 ~t2 ~g ~projections) only
 * name what the body may use. F's body is one assignment to v (`=:` one point per result cell,
 * `=:+` a sum, `=:@^` a maximum, `=:^^` a minimum); G's are `g1 =+ ...`, `g2 =+ ...`, `g3 =+
 * ...`, at most one per operand (an operand without one gets no gradient). In both, v1 v2 v3 (or
 * t1 t2 t3) are the operands' values at a point of the operation's one record, v is the result
 * and g its incoming gradient (G only), numbers and names the script binds to numbers are
 * constants, and a right-hand side is an expression of primitive ops: infix + - * / ** (and
 * their `.` forms), the other infix primitives of `cannl ops`, prefix -, `!.` of a number, and
 * ops applied by name. L (default ".") relates the operands' axes: "." pointwise, "@" compose, or
 * an einsum spec. Every assignment is read through the record's slots (the `~projections` the
 * seed passes, which may be written or left out), so the code is translated into the formulas of
 * cn_tensor_operation; an error names the position in F or G.
 *
 * Invariant: nothing is evaluated in F and G but constants: their code runs as the operation's
 * forward and backprop, at the record's points. */
#include "notation/eval_core.h"

#include <stdio.h>
#include <string.h>

/* The formula letter of a slot name: a b c for the operands, v, g; 0 for another name. */
static char slot_letter(const char *name, bool grad) {
  if ((name[0] == 'v' || name[0] == 't') && name[1] >= '1' && name[1] <= '3' && !name[2])
    return (char)('a' + (name[1] - '1'));
  if (grad && (strcmp(name, "v") == 0 || strcmp(name, "g") == 0)) return name[0];
  return 0;
}

/* The formula of x into out; false after a message at x. */
static bool formula_of(nt_interp *I, const cn_nt_expr *x, bool grad, cn_sbuf *out) {
  switch (x->kind) {
  case CN_NT_NUMBER: cn_sbuf_printf(out, "%.17g", x->u.number.value); return true;
  case CN_NT_IDENT: {
    char slot = slot_letter(x->u.ident.name, grad);
    if (slot) {
      cn_sbuf_putc(out, slot);
      return true;
    }
    nt_value *v = nt_lookup(I, NULL, x->u.ident.name);
    if (v && v->kind == NT_V_NUM) {
      cn_sbuf_printf(out, "%.17g", v->num);
      return true;
    }
    return nt_fail(I, x->pos,
                   "'%s' in an operation's code: the slot names are v1 v2 v3 (t1 t2 t3)%s, and "
                   "other names must be bound to numbers",
                   x->u.ident.name, grad ? ", v and g" : ""),
           false;
  }
  case CN_NT_PREFIX:
    if (strcmp(x->u.prefix.op, "-") == 0 || strcmp(x->u.prefix.op, "-.") == 0 ||
        strcmp(x->u.prefix.op, "!.") == 0) {
      cn_sbuf_puts(out, x->u.prefix.op[0] == '-' ? "-(" : "(");
      if (!formula_of(I, x->u.prefix.operand, grad, out)) return false;
      cn_sbuf_putc(out, ')');
      return true;
    }
    break;
  case CN_NT_BINOP: {
    const char *op = x->u.binop.op;
    size_t n = strlen(op);
    char base[8] = "";
    if (n < sizeof base) memcpy(base, op, n + 1);
    if (n > 1 && base[n - 1] == '.') base[n - 1] = '\0'; /* *. /. **. +. ... */
    bool arith = strlen(base) == 1 && strchr("+-*/", base[0]);
    cn_op prim;
    bool named = !arith && strcmp(base, "**") != 0 && cn_op_binary_from_infix(op, &prim);
    if (!arith && !named && strcmp(base, "**") != 0) break;
    cn_sbuf_printf(out, "%s(", arith ? "" : named ? cn_op_name(prim) : "pow");
    if (!formula_of(I, x->u.binop.lhs, grad, out)) return false;
    cn_sbuf_puts(out, arith ? (const char[]){' ', base[0], ' ', '\0'} : ", ");
    if (!formula_of(I, x->u.binop.rhs, grad, out)) return false;
    cn_sbuf_putc(out, ')');
    return true;
  }
  case CN_NT_APPLY: {
    const cn_nt_expr *fn = x->u.apply.fn;
    cn_op prim;
    if (fn->kind != CN_NT_IDENT || !cn_op_from_name(fn->u.ident.name, &prim)) break;
    if (x->u.apply.n_args != cn_op_arity(prim))
      return nt_fail(I, x->pos, "%s takes %d operands", cn_op_name(prim), cn_op_arity(prim)), false;
    cn_sbuf_printf(out, "%s(", cn_op_name(prim));
    for (int i = 0; i < x->u.apply.n_args; i++) {
      if (x->u.apply.args[i].label)
        return nt_fail(I, x->u.apply.args[i].pos, "%s takes no labeled argument here",
                       cn_op_name(prim)),
               false;
      if (i) cn_sbuf_puts(out, ", ");
      if (!formula_of(I, x->u.apply.args[i].value, grad, out)) return false;
    }
    cn_sbuf_putc(out, ')');
    return true;
  }
  default: break;
  }
  return nt_fail(I, x->pos, "%s",
                 "an operation's code reads slot names, numbers and primitive ops only (infix, "
                 "prefix -, or by name)"),
         false;
}

/* The formula of an assignment's right-hand side: its primitive over its operands. */
static bool rhs_formula(nt_interp *I, const cn_nt_cd *cd, bool grad, cn_sbuf *out) {
  if (cn_nt_find_arg(cd->u.assign.n_args, cd->u.assign.args, "logic"))
    return nt_fail(I, cd->pos, "%s",
                   "an operation's code takes the operation's projections: no ~logic"),
           false;
  bool plain = cd->u.assign.form == CN_NT_RHS_PLAIN;
  if (!plain) cn_sbuf_printf(out, "%s(", cn_op_name(cd->u.assign.op));
  for (int i = 0; i < cd->u.assign.n_rhs; i++) {
    if (i) cn_sbuf_puts(out, ", ");
    if (!formula_of(I, cd->u.assign.rhs[i], grad, out)) return false;
  }
  if (!plain) cn_sbuf_putc(out, ')');
  return true;
}

/* The name an assignment writes, or NULL after a message. */
static const char *target_of(nt_interp *I, const cn_nt_cd *cd) {
  if (cd->kind != CN_NT_CD_ASSIGN)
    return nt_fail(I, cd->pos, "%s", "an operation's code is assignments only (no if, no comment)"),
           NULL;
  const cn_nt_expr *lhs = cd->u.assign.lhs;
  if (lhs->kind != CN_NT_IDENT)
    return nt_fail(I, lhs->pos, "%s",
                   "an operation's code assigns v (op_asn) or g1, g2, g3 (grad_asn)"),
           NULL;
  return lhs->u.ident.name;
}

/* F's code into code->forward and code->accum. */
static bool forward_code(nt_interp *I, const cn_nt_cd *cd, cn_sbuf *text, cn_op_code *code) {
  const char *target = target_of(I, cd);
  if (!target) return false;
  if (strcmp(target, "v") != 0 || !cd->u.assign.clear)
    return nt_fail(I, cd->pos, "%s",
                   "~op_asn's code is one assignment to v with =:, =:+, =:@^ or =:^^ (the value "
                   "is computed anew at each run)"),
           false;
  code->accum = cd->u.assign.accum;
  return rhs_formula(I, cd, false, text);
}

/* G's code into code->grad[]; false after a message. */
static bool grad_code(nt_interp *I, const cn_nt_cd *cd, cn_sbuf *texts, cn_op_code *code) {
  if (cd->kind == CN_NT_CD_SEQ) {
    for (int i = 0; i < cd->u.seq.n; i++)
      if (!grad_code(I, cd->u.seq.items[i], texts, code)) return false;
    return true;
  }
  const char *target = target_of(I, cd);
  if (!target) return false;
  int k =
      target[0] == 'g' && target[1] >= '1' && target[1] <= '3' && !target[2] ? target[1] - '1' : -1;
  if (k < 0 || cd->u.assign.clear || cd->u.assign.accum != CN_OP_ADD)
    return nt_fail(I, cd->pos, "%s",
                   "~grad_asn's code is assignments g1 =+ ..., g2 =+ ..., g3 =+ ..."),
           false;
  if (k >= code->arity)
    return nt_fail(I, cd->pos, "%s: the operation has %d operand%s", target, code->arity,
                   code->arity == 1 ? "" : "s"),
           false;
  if (texts[k].len)
    return nt_fail(I, cd->pos, "%s is assigned twice: write its gradient as one sum", target),
           false;
  return rhs_formula(I, cd, true, &texts[k]);
}

/* The body of the let%cd function given as ~name into *out (NULL when not given and not needed);
 * false after a message. */
static bool cd_function(nt_interp *I, const nt_call *c, const char *name, bool needed,
                        const cn_nt_cd **out) {
  cn_nt_pos at;
  nt_value *v = nt_labeled_at(c->a, name, &at);
  *out = NULL;
  if (!v) {
    if (needed) nt_fail(I, c->at, "operation needs ~%s, a let%%cd function", name);
    return !needed;
  }
  if (v->kind != NT_V_FUNC || v->fn.def->u.let.ext != CN_NT_LET_CD)
    return nt_fail(I, at, "~%s expects a let%%cd function, found %s", name, nt_kind_name(v->kind)),
           false;
  *out = v->fn.def->u.let.cd;
  return true;
}

static bool string_option(nt_interp *I, const nt_call *c, const char *name, const char **out) {
  cn_nt_pos at;
  nt_value *v = nt_labeled_at(c->a, name, &at);
  if (!v) return true;
  if (v->kind != NT_V_STR)
    return nt_fail(I, at, "~%s expects a string, found %s", name, nt_kind_name(v->kind)), false;
  *out = v->str;
  return true;
}

nt_value *nt_builtin_operation(nt_interp *I, const nt_call *c) {
  static const char *const known[5] = {"op_asn", "grad_asn", "logic", "label", "no_grad"};
  if (!nt_known_labels(I, c, 5, known)) return NULL;
  cn_op_code code = {.label = "operation", .arity = c->nt, .logic = "."};
  if (!string_option(I, c, "label", &code.label) || !string_option(I, c, "logic", &code.logic))
    return NULL;
  cn_nt_pos at;
  if (cn_shape_logic_kind(code.logic) == CN_SL_EINSUM) {
    nt_labeled_at(c->a, "logic", &at);
    if (!(code.logic = nt_spec_splice(I, NULL, code.logic, at))) return NULL;
  }
  nt_value *no_grad = nt_labeled_at(c->a, "no_grad", &at);
  if (no_grad && no_grad->kind != NT_V_BOOL)
    return nt_fail(I, at, "~no_grad expects true or false, found %s", nt_kind_name(no_grad->kind));
  code.no_grad = no_grad && no_grad->b;
  const cn_nt_cd *fwd, *grad;
  if (!cd_function(I, c, "op_asn", true, &fwd) || !cd_function(I, c, "grad_asn", false, &grad))
    return NULL;
  cn_sbuf texts[4] = {{0}};
  bool ok = forward_code(I, fwd, &texts[3], &code) && (!grad || grad_code(I, grad, texts, &code));
  for (int k = 0; k < 4 && ok; k++) ok = !texts[k].failed;
  cn_tensor *r = NULL;
  if (ok) {
    code.forward = texts[3].data;
    for (int k = 0; k < 3; k++) code.grad[k] = texts[k].data;
    cn_shape_logic logic; /* parsed once, here: the tensor layer takes the record */
    if (cn_shape_logic_parse(I->ctx, code.logic, &logic) != CN_OK ||
        !(r = cn_tensor_operation_logic(I->g, &code, &logic, c->t)))
      nt_fail_here(I, c->at);
  } else if (I->ctx->status == CN_OK) {
    nt_fail(I, c->at, "%s", "out of memory for an operation's formulas");
  }
  for (int k = 0; k < 4; k++) cn_sbuf_free(&texts[k]);
  return r ? nt_tensor_value(I, r) : NULL;
}
