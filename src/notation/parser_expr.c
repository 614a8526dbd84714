/* The notation's recursive-descent parser, part 2 of 3 (see parser_internal.h): %op expressions
 * (with `if c then a else b`, which only starts an expression, so it never meets the `if`
 * statement, which starts a script item, or %cd's `if`, which starts a %cd item) and %cd
 * sequences.
 *
 * Infix operators follow OCaml's precedence by the operator's first characters (precedence
 * climbing); a %cd right-hand side is classified against the primitive-op table (ops.def) and the
 * assignment operators against syntax-extensions-cd-op's table (both tables in lexer.c).
 * Invariants: recursion goes through ntp_enter (MAX_DEPTH), every node is finished with
 * ntp_finish / ntp_finish_cd (CN_NT_MAX_HEIGHT), every loop consumes a token per iteration. */
#include "notation/parser_internal.h"
#include "numeric/numeric.h"

#include <stdio.h>
#include <string.h>

static const char *const assign_labels[] = {"logic", "projections", NULL};

/* ---- Operator tables ------------------------------------------------------------------------ */

static bool right_assoc(cn_nt_prec prec) {
  return prec == CN_NT_PREC_OR || prec == CN_NT_PREC_AND || prec == CN_NT_PREC_CONCAT ||
         prec == CN_NT_PREC_POW;
}

/* The operators that take an einsum spec (ocannl-notes §2.6; syntax-extensions-cd-op spells einsum
 * `*+`). */
static bool einsum_op(const char *op, cn_nt_einsum_kind *kind) {
  static const struct {
    const char *text;
    cn_nt_einsum_kind kind;
  } table[] = {{"+*", CN_NT_EINSUM_BINARY}, {"*+", CN_NT_EINSUM_BINARY},
               {"+++", CN_NT_EINSUM_OUTER}, {"@^+", CN_NT_EINSUM_TROPICAL},
               {"++", CN_NT_EINSUM_UNARY},  {"@^^", CN_NT_EINSUM_MAX_UNARY}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].text, op) == 0) {
      *kind = table[i].kind;
      return true;
    }
  return false;
}

/* ---- %op expressions ------------------------------------------------------------------------ */

static cn_nt_expr *parse_atom(parser *p);

static bool is_bang_prefix(const char *op) {
  return op[0] == '!' && strcmp(op, "!=") != 0;
}

/* Whether the current token can start an application argument. */
bool ntp_starts_arg(parser *p) {
  const cn_nt_token *t = ntp_peek(p, 0);
  switch (t->kind) {
  case NT_TK_IDENT:
  case NT_TK_INT:
  case NT_TK_FLOAT:
  case NT_TK_STRING:
  case NT_TK_CHAR:
  case NT_TK_TRUE:
  case NT_TK_FALSE:
  case NT_TK_LPAREN:
  case NT_TK_LBRACKET:
  case NT_TK_LBRACKET_BAR:
  case NT_TK_LBRACE: return true;
  case NT_TK_OP: return is_bang_prefix(t->text);
  default: return false;
  }
}

static bool stops_application(const parser *p, const char *label) {
  return cn_nt_stop_label(p->stop_labels, label);
}

static cn_nt_expr *number_node(parser *p, const cn_nt_token *t, cn_nt_pos pos) {
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_NUMBER, pos);
  if (!e) return NULL;
  e->u.number.is_int = t->kind == NT_TK_INT;
  e->u.number.ival = t->ival;
  e->u.number.value = t->fval;
  return e;
}

/* 'q' 2.0 and 'q' -2.0: a number with the dimension label of its output axis. */
static cn_nt_expr *labeled_number(parser *p) {
  cn_nt_token label = ntp_next(p);
  bool negative = false;
  if (ntp_at_op(p, "-") || ntp_at_op(p, "-.")) {
    ntp_next(p);
    negative = true;
  }
  const cn_nt_token *t = ntp_peek(p, 0);
  if (t->kind != NT_TK_INT && t->kind != NT_TK_FLOAT) {
    ntp_expected(p, "a number after the dimension label (as in 'q' 2.0)");
    return NULL;
  }
  cn_nt_expr *e = number_node(p, t, ntp_pos_of(p, &label));
  ntp_next(p);
  if (!e) return NULL;
  e->u.number.label = label.text;
  if (negative) {
    e->u.number.ival = -e->u.number.ival;
    e->u.number.value = -e->u.number.value;
  }
  return e;
}

/* ( ), ( expr ), ( expr : label ). */
static cn_nt_expr *parse_parens(parser *p) {
  cn_nt_token open = ntp_next(p);
  cn_nt_pos open_pos = ntp_pos_of(p, &open);
  if (ntp_at_kind(p, NT_TK_RPAREN)) {
    ntp_next(p);
    return ntp_new_expr(p, CN_NT_UNIT, open_pos);
  }
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  cn_nt_expr *e = ntp_parse_expr(p);
  p->stop_labels = saved;
  if (!e) return NULL;
  if (ntp_at_op(p, ":")) {
    ntp_next(p);
    const cn_nt_token *t = ntp_peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      ntp_expected(p, "a label name after ':' (as in ([2.0] : rgb))");
      return NULL;
    }
    cn_nt_expr *a = ntp_new_expr(p, CN_NT_ANNOT, open_pos);
    if (!a) return NULL;
    a->u.annot.expr = e;
    a->u.annot.label = ntp_next(p).text;
    e = ntp_finish(p, a, open_pos);
  }
  if (!ntp_expect_close(p, NT_TK_RPAREN, ")", open_pos, "(")) return NULL;
  return e;
}

/* [a; b], [|a; b|]: elements are full expressions, a trailing ';' is allowed. */
static cn_nt_expr *parse_items(parser *p, cn_nt_expr_kind kind, nt_tk_kind close,
                               const char *close_text, const char *open_text) {
  cn_nt_token open = ntp_next(p);
  cn_nt_pos open_pos = ntp_pos_of(p, &open);
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  vec items = {0};
  while (!p->failed && !ntp_at_kind(p, close)) {
    if (ntp_at_kind(p, NT_TK_EOF)) {
      ntp_expect_close(p, close, close_text, open_pos, open_text);
      break;
    }
    cn_nt_expr *e = ntp_parse_expr(p);
    if (!e || !ntp_push(p, &items, &e, sizeof e)) break;
    if (ntp_at_kind(p, NT_TK_SEMI)) {
      ntp_next(p);
    } else if (!ntp_at_kind(p, close)) {
      char what[120];
      snprintf(what, sizeof what, "';' or '%s' (closing the '%s' at line %d, column %d)",
               close_text, open_text, open_pos.line, open_pos.col);
      ntp_expected(p, what);
    }
  }
  p->stop_labels = saved;
  if (p->failed) return NULL;
  ntp_next(p);
  cn_nt_expr *e = ntp_new_expr(p, kind, open_pos);
  if (!e) return NULL;
  e->u.items.n = items.n;
  e->u.items.items = items.v;
  return ntp_finish(p, e, open_pos);
}

/* { name [= e]; field = e; ... }: an inline declaration, or a record when `record`. */
static cn_nt_expr *parse_braces(parser *p, bool record) {
  cn_nt_token open = ntp_next(p);
  cn_nt_pos open_pos = ntp_pos_of(p, &open);
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  vec fields = {0};
  while (!p->failed) {
    const cn_nt_token *t = ntp_peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      ntp_expected(p, record ? "a field name" : fields.n ? "a field name" : "the declared name");
      break;
    }
    cn_nt_field f = {t->text, ntp_pos_of(p, t), NULL};
    if (fields.n == MAX_NAMES) {
      ntp_error(p, f.pos, "too many fields (at most %d)", MAX_NAMES);
      break;
    }
    ntp_next(p);
    for (int i = 0; i < fields.n; i++)
      if (strcmp(((cn_nt_field *)fields.v)[i].name, f.name) == 0)
        ntp_error(p, f.pos, "field '%s' is given twice", f.name);
    if (ntp_at_op(p, "=")) {
      ntp_next(p);
      if (!(f.value = ntp_parse_expr(p))) break;
    } else if (ntp_at_kind(p, NT_TK_OP) && ntp_peek(p, 0)->text[0] == '=') {
      ntp_expect_equal(p, "");
    } else if (!record && fields.n > 0) {
      ntp_error(p, ntp_here(p),
                "expected '=' after '%s' (a declaration's further fields are name = value)",
                f.name);
    }
    if (p->failed || !ntp_push(p, &fields, &f, sizeof f)) break;
    if (ntp_at_kind(p, NT_TK_SEMI)) {
      ntp_next(p);
      if (ntp_at_kind(p, NT_TK_RBRACE)) break;
    } else if (!ntp_at_kind(p, NT_TK_RBRACE)) {
      char what[120];
      snprintf(what, sizeof what, "';' or '}' (closing the '{' at line %d, column %d)",
               open_pos.line, open_pos.col);
      ntp_expected(p, what);
    } else {
      break;
    }
  }
  p->stop_labels = saved;
  if (p->failed) return NULL;
  ntp_next(p);
  cn_nt_field *fs = fields.v;
  cn_nt_expr *e = ntp_new_expr(p, record ? CN_NT_RECORD : CN_NT_DECL, open_pos);
  if (!e) return NULL;
  if (record) {
    e->u.record.n_fields = fields.n;
    e->u.record.fields = fs;
  } else {
    e->u.decl.name = fs[0].name;
    e->u.decl.init = fs[0].value;
    e->u.decl.n_fields = fields.n - 1;
    e->u.decl.fields = fields.n > 1 ? fs + 1 : NULL;
  }
  return ntp_finish(p, e, open_pos);
}

static cn_nt_expr *atom_body(parser *p) {
  const cn_nt_token *t = ntp_peek(p, 0);
  cn_nt_pos pos = ntp_pos_of(p, t);
  cn_nt_expr *e = NULL;
  switch (t->kind) {
  case NT_TK_IDENT:
    if (strcmp(t->text, "_") == 0) {
      ntp_error(p, pos, "'_' is not a value (it names a wildcard binding: let _ = ...)");
      return NULL;
    }
    if ((e = ntp_new_expr(p, CN_NT_IDENT, pos))) e->u.ident.name = t->text;
    ntp_next(p);
    return ntp_finish(p, e, pos);
  case NT_TK_INT:
  case NT_TK_FLOAT:
    e = number_node(p, t, pos);
    ntp_next(p);
    return ntp_finish(p, e, pos);
  case NT_TK_CHAR: return ntp_finish(p, labeled_number(p), pos);
  case NT_TK_STRING:
    if ((e = ntp_new_expr(p, CN_NT_STRING, pos))) e->u.string.text = t->text;
    ntp_next(p);
    return ntp_finish(p, e, pos);
  case NT_TK_TRUE:
  case NT_TK_FALSE:
    if ((e = ntp_new_expr(p, CN_NT_BOOL, pos))) e->u.boolean = t->kind == NT_TK_TRUE;
    ntp_next(p);
    return ntp_finish(p, e, pos);
  case NT_TK_LPAREN: return parse_parens(p);
  case NT_TK_LBRACKET: return parse_items(p, CN_NT_LIST, NT_TK_RBRACKET, "]", "[");
  case NT_TK_LBRACKET_BAR: return parse_items(p, CN_NT_ARRAY, NT_TK_BAR_RBRACKET, "|]", "[|");
  case NT_TK_LBRACE: return parse_braces(p, false);
  case NT_TK_OP:
    if (is_bang_prefix(t->text)) {
      const char *op = t->text;
      ntp_next(p);
      cn_nt_expr *operand = parse_atom(p);
      if (!operand || !(e = ntp_new_expr(p, CN_NT_PREFIX, pos))) return NULL;
      e->u.prefix.op = op;
      e->u.prefix.operand = operand;
      return ntp_finish(p, e, pos);
    }
    if (strcmp(t->text, "~~") == 0) {
      ntp_error(p, pos, "a block comment ~~(...) is a %%cd statement, not an expression");
      return NULL;
    }
    break;
  default: break;
  }
  ntp_expected(p, "an expression");
  return NULL;
}

static cn_nt_expr *parse_atom(parser *p) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_expr *e = atom_body(p);
  p->depth--;
  return e;
}

/* atom ('.' name)*. */
cn_nt_expr *ntp_parse_arg(parser *p) {
  cn_nt_expr *e = parse_atom(p);
  while (e && ntp_at_kind(p, NT_TK_DOT)) {
    ntp_next(p);
    const cn_nt_token *t = ntp_peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      ntp_expected(p, "a field name after '.' (value, grad, merge or a record field)");
      return NULL;
    }
    cn_nt_expr *f = ntp_new_expr(p, CN_NT_FIELD, e->pos);
    if (!f) return NULL;
    f->u.field.subject = e;
    f->u.field.name = t->text;
    f->u.field.name_pos = ntp_pos_of(p, t);
    ntp_next(p);
    e = ntp_finish(p, f, f->u.field.name_pos);
  }
  return e;
}

static bool is_literal(const cn_nt_expr *e) {
  switch (e->kind) {
  case CN_NT_NUMBER:
  case CN_NT_BOOL:
  case CN_NT_UNIT:
  case CN_NT_LIST:
  case CN_NT_TUPLE:
  case CN_NT_ARRAY:
  case CN_NT_ANNOT:
  case CN_NT_DECL:
  case CN_NT_RECORD:
  case CN_NT_PREFIX: return true;
  default: return false;
  }
}

/* "w" ARG: the string form of an inline declaration (syntax-extensions-cd-op "Configuring inline
 * declarations"): a list or a float literal initializes (syntax-extensions-cd-op: "When the
 * declaration is followed by a literal float, the float provides the initial value"), anything else
 * gives the output dimension(s): an integer literal is a dimension, not a value. */
static cn_nt_expr *string_declaration(parser *p, cn_nt_expr *head, int n, cn_nt_arg *args) {
  if (n != 1 || args[0].label) {
    ntp_error(p, args[n > 1 && !args[0].label ? 1 : 0].pos,
              "an inline declaration \"name\" takes one argument: its initial values [...] or its "
              "output dimension(s)");
    return NULL;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_DECL, head->pos);
  if (!e) return NULL;
  e->u.decl.name = head->u.string.text;
  e->u.decl.string_form = true;
  const cn_nt_expr *a = args[0].value;
  if (a->kind == CN_NT_LIST || (a->kind == CN_NT_NUMBER && !a->u.number.is_int)) {
    e->u.decl.init = args[0].value;
  } else {
    cn_nt_field *f = ntp_alloc(p, sizeof *f);
    if (!f) return NULL;
    f->name = "o";
    f->pos = args[0].pos;
    f->value = args[0].value;
    e->u.decl.n_fields = 1;
    e->u.decl.fields = f;
  }
  return ntp_finish(p, e, head->pos);
}

/* arg (arg | ~label:arg | ~label)*. */
cn_nt_expr *ntp_parse_app(parser *p) {
  cn_nt_expr *head = ntp_parse_arg(p);
  if (!head) return NULL;
  vec args = {0};
  for (;;) {
    const cn_nt_token *t = ntp_peek(p, 0);
    cn_nt_arg a = {NULL, ntp_pos_of(p, t), NULL};
    if (t->kind == NT_TK_LABEL || t->kind == NT_TK_LABEL_COLON) {
      if (stops_application(p, t->text)) break;
      cn_nt_token label = ntp_next(p);
      a.label = label.text;
      if (label.kind == NT_TK_LABEL_COLON) {
        /* ~config:{...} is a config record, not a declaration (syntax-extensions-cd-op "Lifting").
         * */
        if (strcmp(label.text, "config") == 0 && ntp_at_kind(p, NT_TK_LBRACE))
          a.value = parse_braces(p, true);
        else
          a.value = ntp_parse_arg(p);
        if (!a.value) return NULL;
      }
    } else if (ntp_starts_arg(p)) {
      if (!(a.value = ntp_parse_arg(p))) return NULL;
    } else {
      break;
    }
    if (!ntp_push(p, &args, &a, sizeof a)) return NULL;
  }
  if (args.n == 0) return head;
  cn_nt_arg *as = args.v;
  if (head->kind == CN_NT_STRING) return string_declaration(p, head, args.n, as);
  if (is_literal(head)) {
    ntp_error(p, as[0].pos, "this value is not a function: it cannot be applied to arguments");
    return NULL;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_APPLY, head->pos);
  if (!e) return NULL;
  e->u.apply.fn = head;
  e->u.apply.n_args = args.n;
  e->u.apply.args = as;
  return ntp_finish(p, e, head->pos);
}

static cn_nt_expr *unary_body(parser *p) {
  if (!(ntp_at_op(p, "-") || ntp_at_op(p, "-."))) return ntp_parse_app(p);
  cn_nt_token op = ntp_next(p);
  cn_nt_pos pos = ntp_pos_of(p, &op);
  cn_nt_expr *operand = NULL;
  if (ntp_enter(p)) {
    operand = unary_body(p);
    p->depth--;
  }
  if (!operand) return NULL;
  if (operand->kind == CN_NT_NUMBER) { /* a negative literal, as OCaml reads -4 */
    operand->u.number.ival = -operand->u.number.ival;
    operand->u.number.value = -operand->u.number.value;
    if (!operand->u.number.label) operand->pos = pos;
    return operand;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_PREFIX, pos);
  if (!e) return NULL;
  e->u.prefix.op = op.text;
  e->u.prefix.operand = operand;
  return ntp_finish(p, e, pos);
}

/* After an einsum operator: the spec string, then (binary kinds) one argument. */
static cn_nt_expr *einsum_rest(parser *p, cn_nt_expr *lhs, const cn_nt_token *op,
                               cn_nt_einsum_kind kind, cn_nt_prec prec) {
  bool binary = kind != CN_NT_EINSUM_UNARY && kind != CN_NT_EINSUM_MAX_UNARY;
  const cn_nt_token *t = ntp_peek(p, 0);
  if (t->kind != NT_TK_STRING) {
    char what[100];
    snprintf(what, sizeof what, "an einsum spec string after '%s' (as in a %s \"%s\"%s)", op->text,
             op->text, binary ? "i;i=>i" : "ij=>ji", binary ? " b" : "");
    ntp_expected(p, what);
    return NULL;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_EINSUM, lhs->pos);
  if (!e) return NULL;
  e->u.einsum.kind = kind;
  e->u.einsum.op = op->text;
  e->u.einsum.op_pos = ntp_pos_of(p, op);
  e->u.einsum.spec = t->text;
  e->u.einsum.spec_pos = ntp_pos_of(p, t);
  e->u.einsum.lhs = lhs;
  ntp_next(p);
  if (binary) {
    if (!ntp_starts_arg(p)) {
      char what[80];
      snprintf(what, sizeof what, "the right operand of '%s' after its spec", op->text);
      ntp_expected(p, what);
      return NULL;
    }
    if (!(e->u.einsum.rhs = ntp_parse_arg(p))) return NULL;
  }
  if (ntp_starts_arg(p)) {
    if (binary)
      ntp_error(p, ntp_here(p),
                "the right operand of '%s' is one argument: parenthesize an application", op->text);
    else
      ntp_error(p, ntp_here(p), "'%s' takes an einsum spec and no right operand", op->text);
    return NULL;
  }
  /* OCaml would read `a +* "s" b * c` as `a +* ("s" b * c)`: refuse rather than guess. */
  const cn_nt_token *after = ntp_peek(p, 0);
  cn_nt_prec next_prec = after->kind == NT_TK_OP ? cn_nt_infix_prec(after->text) : CN_NT_PREC_NONE;
  if (next_prec > prec || (next_prec == prec && right_assoc(prec))) {
    ntp_error(p, ntp_pos_of(p, after),
              "'%s' binds tighter than '%s' here: parenthesize the einsum or its operand",
              after->text, op->text);
    return NULL;
  }
  return ntp_finish(p, e, e->u.einsum.op_pos);
}

static cn_nt_expr *binary_body(parser *p, int min_prec) {
  cn_nt_expr *lhs = NULL;
  if (ntp_enter(p)) {
    lhs = unary_body(p);
    p->depth--;
  }
  while (lhs) {
    const cn_nt_token *t = ntp_peek(p, 0);
    if (t->kind != NT_TK_OP) break;
    cn_nt_prec prec = cn_nt_infix_prec(t->text);
    if (prec == CN_NT_PREC_NONE || (int)prec < min_prec) break;
    cn_nt_token op = ntp_next(p);
    cn_nt_einsum_kind kind;
    if (einsum_op(op.text, &kind)) {
      lhs = einsum_rest(p, lhs, &op, kind, prec);
      continue;
    }
    cn_nt_expr *rhs = ntp_parse_binary(p, right_assoc(prec) ? (int)prec : (int)prec + 1);
    if (!rhs) return NULL;
    cn_nt_expr *e = ntp_new_expr(p, CN_NT_BINOP, lhs->pos);
    if (!e) return NULL;
    e->u.binop.op = op.text;
    e->u.binop.prec = prec;
    e->u.binop.op_pos = ntp_pos_of(p, &op);
    e->u.binop.lhs = lhs;
    e->u.binop.rhs = rhs;
    lhs = ntp_finish(p, e, e->u.binop.op_pos);
  }
  return lhs;
}

cn_nt_expr *ntp_parse_binary(parser *p, int min_prec) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_expr *e = binary_body(p, min_prec);
  p->depth--;
  return e;
}

/* let name = value in body. */
static cn_nt_expr *parse_let_in(parser *p) {
  cn_nt_token let = ntp_next(p);
  cn_nt_pos pos = ntp_pos_of(p, &let);
  if (ntp_at_op(p, "%")) {
    ntp_error(p, ntp_here(p), "let%%op, let%%cd and let%%tile are only allowed at the top level");
    return NULL;
  }
  const cn_nt_token *t = ntp_peek(p, 0);
  if (t->kind != NT_TK_IDENT) {
    ntp_expected(p, "a name after 'let'");
    return NULL;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_LET, pos);
  if (!e) return NULL;
  e->u.let.name = t->text;
  e->u.let.name_pos = ntp_pos_of(p, t);
  ntp_next(p);
  if (!ntp_at_kind(p, NT_TK_OP) || ntp_peek(p, 0)->text[0] != '=') {
    if (ntp_starts_arg(p) || ntp_at_kind(p, NT_TK_LABEL) || ntp_at_kind(p, NT_TK_OPTLABEL)) {
      ntp_error(p, ntp_here(p),
                "a local 'let' cannot define a function: use let%%op at the top level");
      return NULL;
    }
  }
  if (!ntp_expect_equal(p, "after the name") || !(e->u.let.value = ntp_parse_expr(p))) return NULL;
  if (!ntp_at_kind(p, NT_TK_IN)) {
    ntp_expected(p, "'in' after the value of a local 'let'");
    return NULL;
  }
  ntp_next(p);
  if (!(e->u.let.body = ntp_parse_expr(p))) return NULL;
  return ntp_finish(p, e, pos);
}

static cn_nt_expr *parse_if_expr(parser *p);

/* A branch of an if expression: another if, a local let, or an operator expression (a tuple
 * needs parentheses). */
static cn_nt_expr *parse_branch(parser *p) {
  if (ntp_at_kind(p, NT_TK_IF)) return parse_if_expr(p);
  if (ntp_at_kind(p, NT_TK_LET)) return parse_let_in(p);
  return ntp_parse_binary(p, 1);
}

/* if cond then a else b: an expression (the else is required; the statement form ends with
 * `end` and only starts a script item, %cd's form only starts a %cd item). */
static cn_nt_expr *if_expr_body(parser *p) {
  cn_nt_token kw = ntp_next(p);
  cn_nt_pos pos = ntp_pos_of(p, &kw);
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_IF, pos);
  if (!e || !(e->u.if_.cond = ntp_parse_binary(p, 1))) return NULL;
  if (!ntp_at_kind(p, NT_TK_THEN)) {
    ntp_expected(p, "'then' after the condition");
    return NULL;
  }
  ntp_next(p);
  if (!(e->u.if_.then_ = parse_branch(p))) return NULL;
  if (!ntp_at_kind(p, NT_TK_ELSE)) {
    ntp_expected(p, "'else' (an if expression has both branches: if c then a else b)");
    return NULL;
  }
  ntp_next(p);
  if (!(e->u.if_.else_ = parse_branch(p))) return NULL;
  return ntp_finish(p, e, pos);
}

static cn_nt_expr *parse_if_expr(parser *p) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_expr *e = if_expr_body(p);
  p->depth--;
  return e;
}

static cn_nt_expr *expr_body(parser *p) {
  if (ntp_at_kind(p, NT_TK_LET)) return parse_let_in(p);
  cn_nt_expr *first = ntp_at_kind(p, NT_TK_IF) ? parse_if_expr(p) : ntp_parse_binary(p, 1);
  if (!first || !ntp_at_kind(p, NT_TK_COMMA)) return first;
  vec items = {0};
  if (!ntp_push(p, &items, &first, sizeof first)) return NULL;
  while (ntp_at_kind(p, NT_TK_COMMA)) {
    ntp_next(p);
    cn_nt_expr *e = ntp_at_kind(p, NT_TK_LET) ? parse_let_in(p) : ntp_parse_binary(p, 1);
    if (!e || !ntp_push(p, &items, &e, sizeof e)) return NULL;
  }
  cn_nt_expr *e = ntp_new_expr(p, CN_NT_TUPLE, first->pos);
  if (!e) return NULL;
  e->u.items.n = items.n;
  e->u.items.items = items.v;
  return ntp_finish(p, e, first->pos);
}

cn_nt_expr *ntp_parse_expr(parser *p) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_expr *e = expr_body(p);
  p->depth--;
  return e;
}

/* ---- %cd ------------------------------------------------------------------------------------ */

static cn_nt_cd *parse_cd_item(parser *p);

/* syntax-extensions-cd-op "The syntax for %cd": the RHS is a primitive applied by its infix
 * operator, curried or uncurried by name; anything else is an expression copied with the identity.
 * */
static bool classify_rhs(parser *p, cn_nt_cd *c, cn_nt_expr *rhs) {
  cn_op op;
  if (rhs->kind == CN_NT_BINOP && cn_op_binary_from_infix(rhs->u.binop.op, &op)) {
    c->u.assign.form = CN_NT_RHS_INFIX;
    c->u.assign.op = op;
    c->u.assign.op_text = rhs->u.binop.op;
    c->u.assign.n_rhs = 2;
    c->u.assign.rhs[0] = rhs->u.binop.lhs;
    c->u.assign.rhs[1] = rhs->u.binop.rhs;
    return true;
  }
  if (rhs->kind == CN_NT_APPLY && rhs->u.apply.fn->kind == CN_NT_IDENT &&
      cn_op_from_name(rhs->u.apply.fn->u.ident.name, &op)) {
    const char *name = rhs->u.apply.fn->u.ident.name;
    int n = rhs->u.apply.n_args, arity = cn_op_arity(op);
    const cn_nt_arg *args = rhs->u.apply.args;
    for (int i = 0; i < n; i++)
      if (args[i].label) {
        ntp_error(p, args[i].pos, "primitive '%s' takes no labeled argument '~%s'", name,
                  args[i].label);
        return false;
      }
    c->u.assign.op = op;
    c->u.assign.op_text = name;
    c->u.assign.n_rhs = arity;
    if (n == arity) {
      c->u.assign.form = CN_NT_RHS_CURRIED;
      for (int i = 0; i < n; i++) c->u.assign.rhs[i] = args[i].value;
      return true;
    }
    const cn_nt_expr *tuple = args[0].value;
    if (n == 1 && arity >= 2 && tuple->kind == CN_NT_TUPLE && tuple->u.items.n == arity) {
      c->u.assign.form = CN_NT_RHS_UNCURRIED;
      for (int i = 0; i < arity; i++) c->u.assign.rhs[i] = tuple->u.items.items[i];
      return true;
    }
    if (n == 1 && tuple->kind == CN_NT_TUPLE)
      ntp_error(p, rhs->pos, "primitive '%s' takes %d operand%s, got a tuple of %d", name, arity,
                arity == 1 ? "" : "s", tuple->u.items.n);
    else
      ntp_error(p, rhs->pos, "primitive '%s' takes %d operand%s, got %d", name, arity,
                arity == 1 ? "" : "s", n);
    return false;
  }
  c->u.assign.form = CN_NT_RHS_PLAIN;
  c->u.assign.op = CN_OP_ID;
  c->u.assign.n_rhs = 1;
  c->u.assign.rhs[0] = rhs;
  return true;
}

/* LHS ASSIGN-OP RHS (~logic:e | ~projections[:e])*. */
static cn_nt_cd *parse_assignment(parser *p) {
  if (!ntp_starts_arg(p)) {
    ntp_expected(p, "an assignment (as in c =:+ a * b)");
    return NULL;
  }
  cn_nt_expr *lhs = ntp_parse_arg(p);
  if (!lhs) return NULL;
  const cn_nt_token *t = ntp_peek(p, 0);
  cn_op accum;
  bool clear;
  if (t->kind != NT_TK_OP || !cn_nt_assign_op(t->text, &accum, &clear)) {
    if (t->kind == NT_TK_OP && t->text[0] == '=')
      ntp_error(p, ntp_pos_of(p, t),
                "unknown assignment operator '%s' (the assignment operators are =: and =op, =:op "
                "for op one of + - * / ** ?/ ?^ || && @^ ^^)",
                t->text);
    else
      ntp_expected(p, "an assignment operator (=:, =+, =:+, ...) after the left-hand side");
    return NULL;
  }
  cn_nt_cd *c = ntp_new_cd(p, CN_NT_CD_ASSIGN, lhs->pos);
  if (!c) return NULL;
  c->u.assign.lhs = lhs;
  c->u.assign.asgn_op = t->text;
  c->u.assign.op_pos = ntp_pos_of(p, t);
  c->u.assign.accum = accum;
  c->u.assign.clear = clear;
  ntp_next(p);
  const char *const *saved = p->stop_labels;
  p->stop_labels = assign_labels;
  cn_nt_expr *rhs = ntp_parse_binary(p, 1);
  p->stop_labels = saved;
  if (!rhs || !classify_rhs(p, c, rhs)) return NULL;
  vec args = {0};
  while (ntp_at_kind(p, NT_TK_LABEL) || ntp_at_kind(p, NT_TK_LABEL_COLON)) {
    cn_nt_token label = ntp_next(p);
    cn_nt_arg a = {label.text, ntp_pos_of(p, &label), NULL};
    if (strcmp(a.label, "logic") != 0 && strcmp(a.label, "projections") != 0) {
      ntp_error(p, a.pos,
                "unknown assignment argument '~%s' (an assignment takes ~logic and "
                "~projections)",
                a.label);
      return NULL;
    }
    if (cn_nt_find_arg(args.n, args.v, a.label)) {
      ntp_error(p, a.pos, "'~%s' is given twice", a.label);
      return NULL;
    }
    if (label.kind == NT_TK_LABEL_COLON && !(a.value = ntp_parse_arg(p))) return NULL;
    if (!ntp_push(p, &args, &a, sizeof a)) return NULL;
  }
  c->u.assign.n_args = args.n;
  c->u.assign.args = args.v;
  return ntp_finish_cd(p, c);
}

/* ~~( part+ ; body ). */
static cn_nt_cd *parse_block_comment(parser *p) {
  cn_nt_token tilde = ntp_next(p);
  cn_nt_pos pos = ntp_pos_of(p, &tilde);
  if (!ntp_at_kind(p, NT_TK_LPAREN)) {
    ntp_expected(p, "'(' after '~~' (a block comment is ~~(\"text\" ...; assignments))");
    return NULL;
  }
  cn_nt_token open = ntp_next(p);
  vec parts = {0};
  while (ntp_starts_arg(p)) {
    cn_nt_expr *e = ntp_parse_arg(p);
    if (!e || !ntp_push(p, &parts, &e, sizeof e)) return NULL;
  }
  if (parts.n == 0) {
    ntp_expected(p, "the comment's text (strings and tensors) after '~~('");
    return NULL;
  }
  if (!ntp_at_kind(p, NT_TK_SEMI)) {
    ntp_expected(p, "';' after the comment's text, then the assignments it covers");
    return NULL;
  }
  ntp_next(p);
  cn_nt_cd *body = ntp_parse_cd_seq(p);
  if (!body || !ntp_expect_close(p, NT_TK_RPAREN, ")", ntp_pos_of(p, &open), "(")) return NULL;
  cn_nt_cd *c = ntp_new_cd(p, CN_NT_CD_COMMENT, pos);
  if (!c) return NULL;
  c->u.comment.n_parts = parts.n;
  c->u.comment.parts = parts.v;
  c->u.comment.body = body;
  return ntp_finish_cd(p, c);
}

static cn_nt_cd *cd_item_body(parser *p) {
  cn_nt_pos pos = ntp_here(p);
  if (ntp_at_kind(p, NT_TK_IF)) {
    ntp_next(p);
    cn_nt_cd *c = ntp_new_cd(p, CN_NT_CD_IF, pos);
    if (!c || !(c->u.if_.cond = ntp_parse_binary(p, 1))) return NULL;
    if (!ntp_at_kind(p, NT_TK_THEN)) {
      ntp_expected(p, "'then' after the condition");
      return NULL;
    }
    ntp_next(p);
    if (!(c->u.if_.then_branch = parse_cd_item(p))) return NULL;
    if (ntp_at_kind(p, NT_TK_ELSE)) {
      ntp_next(p);
      if (!(c->u.if_.else_branch = parse_cd_item(p))) return NULL;
    }
    return ntp_finish_cd(p, c);
  }
  if (ntp_at_kind(p, NT_TK_LPAREN)) {
    ntp_next(p);
    if (ntp_at_kind(p, NT_TK_RPAREN)) {
      ntp_next(p);
      return ntp_finish_cd(p, ntp_new_cd(p, CN_NT_CD_SEQ, pos));
    }
    cn_nt_cd *c = ntp_parse_cd_seq(p);
    if (!c || !ntp_expect_close(p, NT_TK_RPAREN, ")", pos, "(")) return NULL;
    return c;
  }
  if (ntp_at_op(p, "~~")) return parse_block_comment(p);
  return parse_assignment(p);
}

static cn_nt_cd *parse_cd_item(parser *p) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_cd *c = cd_item_body(p);
  p->depth--;
  return c;
}

/* Whether a trailing ';' ends the sequence here. */
static bool sequence_ends(parser *p) {
  switch (ntp_peek(p, 0)->kind) {
  case NT_TK_EOF:
  case NT_TK_SEMISEMI:
  case NT_TK_RPAREN:
  case NT_TK_LET:
  case NT_TK_IN:
  case NT_TK_THEN:
  case NT_TK_ELSE:
  case NT_TK_PRINT:
  case NT_TK_BACKPROP:
  case NT_TK_RUN:
  case NT_TK_SGD:
  case NT_TK_SET_SEED:
  case NT_TK_FOR:
  case NT_TK_TO:
  case NT_TK_DO:
  case NT_TK_DONE:
  case NT_TK_PRINTF:
  case NT_TK_ADAM:
  case NT_TK_PROGRESS:
  case NT_TK_END:
  case NT_TK_SHUFFLE:
  case NT_TK_CHECKPOINT:
  case NT_TK_SAVE_NPY:
  case NT_TK_PLOT: return true;
  default: return false;
  }
}

static cn_nt_cd *cd_seq_body(parser *p) {
  cn_nt_cd *first = parse_cd_item(p);
  if (!first || !ntp_at_kind(p, NT_TK_SEMI)) return first;
  vec items = {0};
  if (!ntp_push(p, &items, &first, sizeof first)) return NULL;
  while (ntp_at_kind(p, NT_TK_SEMI)) {
    ntp_next(p);
    if (sequence_ends(p)) break;
    cn_nt_cd *c = parse_cd_item(p);
    if (!c || !ntp_push(p, &items, &c, sizeof c)) return NULL;
  }
  if (items.n == 1) return first;
  cn_nt_cd *c = ntp_new_cd(p, CN_NT_CD_SEQ, first->pos);
  if (!c) return NULL;
  c->u.seq.n = items.n;
  c->u.seq.items = items.v;
  return ntp_finish_cd(p, c);
}

cn_nt_cd *ntp_parse_cd_seq(parser *p) {
  if (!ntp_enter(p)) return NULL;
  cn_nt_cd *c = cd_seq_body(p);
  p->depth--;
  return c;
}