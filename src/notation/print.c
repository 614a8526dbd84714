/* The notation printer: a tree of ast.h back to canonical source text.
 *
 * Canonical means: single spaces around infix and assignment operators; every operand of an
 * infix operator that is itself an infix expression, an einsum, a negation or a negative number
 * is parenthesized, so the text reads the same whatever the reader assumes about precedence
 * (`3 *. x **. 2` prints as `3 *. (x **. 2)`), except along a left-associative chain of one
 * precedence class (`a + b - c`, printed iteratively, so that a flat sum of any length prints
 * and reads back without nesting); tuples and annotations always carry their
 * parentheses; numbers print as integers or as the shortest decimal that reads back to the same
 * double (put_float); strings use OCaml escapes.
 *
 * Invariant: for a parsed tree, parsing the printed text gives a tree that prints to the same
 * text (tested on every example and on fuzzed inputs). The printer knows where the parser stops
 * an application (before ~logic in a %cd right-hand side, before sgd's options) and
 * parenthesizes an application that carries such a label there. */
#include "notation/notation.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a position requires of the expression printed there, weakest first: any expression; an
 * operand of the %cd assignment or a condition (no let); an infix operand (no infix expression,
 * no negation); an application argument (no application); a prefix operator's operand (an atom). */
typedef enum { LV_EXPR, LV_RHS, LV_OPERAND, LV_ARG, LV_PREFIX } level;

typedef struct {
  cn_sbuf *sb;
  const char *const *stop; /* labels that would end an application here (see parser.c) */
} printer;

static const char *const assign_labels[] = {"logic", "projections", NULL};

static void print_expr(printer *pr, const cn_nt_expr *e, level lv);

static void put_string(cn_sbuf *sb, const char *s) {
  cn_sbuf_putc(sb, '"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': cn_sbuf_puts(sb, "\\\""); break;
    case '\\': cn_sbuf_puts(sb, "\\\\"); break;
    case '\n': cn_sbuf_puts(sb, "\\n"); break;
    case '\t': cn_sbuf_puts(sb, "\\t"); break;
    case '\r': cn_sbuf_puts(sb, "\\r"); break;
    case '\b': cn_sbuf_puts(sb, "\\b"); break;
    default:
      if (*c < 0x20 || *c == 0x7f)
        cn_sbuf_printf(sb, "\\%03u", (unsigned)*c);
      else
        cn_sbuf_putc(sb, (char)*c);
    }
  }
  cn_sbuf_putc(sb, '"');
}

/* The shortest text that reads back to v: positional between 1e-4 and 1e16 (1500.0, 0.0001),
 * with an exponent outside (1e+20). */
static void put_float(cn_sbuf *sb, double v) {
  char buf[64];
  double a = fabs(v);
  bool positional = a == 0 || (a >= 1e-4 && a < 1e16);
  for (int digits = 1; digits <= 24; digits++) {
    snprintf(buf, sizeof buf, positional ? "%.*f" : "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  cn_sbuf_puts(sb, buf);
  if (!strpbrk(buf, ".eE")) cn_sbuf_puts(sb, ".0");
}

static bool negative_number(const cn_nt_expr *e) {
  if (e->kind != CN_NT_NUMBER || e->u.number.label) return false;
  return e->u.number.is_int ? e->u.number.ival < 0 : signbit(e->u.number.value) != 0;
}

static bool is_negation(const cn_nt_expr *e) {
  return e->kind == CN_NT_PREFIX &&
         (strcmp(e->u.prefix.op, "-") == 0 || strcmp(e->u.prefix.op, "-.") == 0);
}

static bool stopped(const printer *pr, const cn_nt_expr *e) {
  for (int i = 0; i < e->u.apply.n_args; i++)
    if (e->u.apply.args[i].label && cn_nt_stop_label(pr->stop, e->u.apply.args[i].label))
      return true;
  return false;
}

static bool needs_parens(const printer *pr, const cn_nt_expr *e, level lv) {
  switch (e->kind) {
  case CN_NT_LET:
  case CN_NT_IF: return lv >= LV_RHS;
  case CN_NT_BINOP:
  case CN_NT_EINSUM: return lv >= LV_OPERAND;
  case CN_NT_PREFIX: return lv >= (is_negation(e) ? LV_OPERAND : LV_PREFIX);
  case CN_NT_NUMBER: return lv >= LV_OPERAND && negative_number(e);
  case CN_NT_APPLY: return lv >= LV_ARG || stopped(pr, e);
  case CN_NT_DECL: return lv >= LV_ARG && e->u.decl.string_form;
  case CN_NT_FIELD: return lv >= LV_PREFIX;
  default: return false;
  }
}

/* Prints e inside delimiters that reset the application stop (brackets, parentheses). */
static void print_nested(printer *pr, const cn_nt_expr *e, level lv) {
  const char *const *saved = pr->stop;
  pr->stop = NULL;
  print_expr(pr, e, lv);
  pr->stop = saved;
}

static void print_items(printer *pr, const cn_nt_expr *e, const char *open, const char *sep,
                        const char *close, level lv) {
  cn_sbuf_puts(pr->sb, open);
  for (int i = 0; i < e->u.items.n; i++) {
    if (i) cn_sbuf_puts(pr->sb, sep);
    print_nested(pr, e->u.items.items[i], lv);
  }
  cn_sbuf_puts(pr->sb, close);
}

static void print_fields(printer *pr, int n, const cn_nt_field *fields, bool first) {
  for (int i = 0; i < n; i++) {
    if (!first || i) cn_sbuf_puts(pr->sb, "; ");
    cn_sbuf_puts(pr->sb, fields[i].name);
    if (fields[i].value) {
      cn_sbuf_puts(pr->sb, " = ");
      print_nested(pr, fields[i].value, LV_EXPR);
    }
  }
}

static void print_args(printer *pr, int n, const cn_nt_arg *args) {
  for (int i = 0; i < n; i++) {
    cn_sbuf_putc(pr->sb, ' ');
    if (args[i].label) cn_sbuf_printf(pr->sb, "~%s%s", args[i].label, args[i].value ? ":" : "");
    if (args[i].value) print_expr(pr, args[i].value, LV_ARG);
  }
}

static void print_number(cn_sbuf *sb, const cn_nt_expr *e) {
  if (e->u.number.label) cn_sbuf_printf(sb, "'%s' ", e->u.number.label);
  if (e->u.number.is_int)
    cn_sbuf_printf(sb, "%lld", (long long)e->u.number.ival);
  else
    put_float(sb, e->u.number.value);
}

/* Whether e's left operand continues e's chain: a BINOP of the same left-associative class. */
static bool chains(const cn_nt_expr *e) {
  const cn_nt_expr *l = e->u.binop.lhs;
  cn_nt_prec prec = e->u.binop.prec;
  bool left_assoc = prec == CN_NT_PREC_CMP || prec == CN_NT_PREC_ADD || prec == CN_NT_PREC_MUL;
  return left_assoc && l->kind == CN_NT_BINOP && l->u.binop.prec == prec;
}

/* `a + b - c`: the chain's innermost left operand, then each operator and right operand in
 * source order (the spine in a scratch array: no recursion per term). */
static void print_chain(printer *pr, const cn_nt_expr *e) {
  int n = 1;
  for (const cn_nt_expr *b = e; chains(b); b = b->u.binop.lhs) n++;
  const cn_nt_expr **spine = malloc(sizeof *spine * (size_t)n);
  if (!spine) {
    pr->sb->failed = true;
    return;
  }
  spine[0] = e;
  for (int k = 1; k < n; k++) spine[k] = spine[k - 1]->u.binop.lhs;
  print_expr(pr, spine[n - 1]->u.binop.lhs, LV_OPERAND);
  for (int k = n - 1; k >= 0; k--) {
    cn_sbuf_printf(pr->sb, " %s ", spine[k]->u.binop.op);
    print_expr(pr, spine[k]->u.binop.rhs, LV_OPERAND);
  }
  free(spine);
}

static void print_bare(printer *pr, const cn_nt_expr *e) {
  cn_sbuf *sb = pr->sb;
  switch (e->kind) {
  case CN_NT_NUMBER: print_number(sb, e); break;
  case CN_NT_STRING: put_string(sb, e->u.string.text); break;
  case CN_NT_BOOL: cn_sbuf_puts(sb, e->u.boolean ? "true" : "false"); break;
  case CN_NT_UNIT: cn_sbuf_puts(sb, "()"); break;
  case CN_NT_IDENT: cn_sbuf_puts(sb, e->u.ident.name); break;
  case CN_NT_FIELD: {
    /* `!.x.grad` reads as `(!.x).grad`: say so; `2.grad` would lex as a bad number. */
    const cn_nt_expr *s = e->u.field.subject;
    bool wrap = (s->kind == CN_NT_PREFIX && !is_negation(s)) || s->kind == CN_NT_NUMBER;
    if (wrap) cn_sbuf_putc(sb, '(');
    print_expr(pr, s, wrap ? LV_EXPR : LV_ARG);
    if (wrap) cn_sbuf_putc(sb, ')');
    cn_sbuf_printf(sb, ".%s", e->u.field.name);
    break;
  }
  case CN_NT_PREFIX: {
    /* After '-' an operator-led operand would lex into one token (-!.x): parenthesize it. */
    const cn_nt_expr *o = e->u.prefix.operand;
    cn_sbuf_puts(sb, e->u.prefix.op);
    if (is_negation(e) && o->kind == CN_NT_PREFIX) {
      cn_sbuf_putc(sb, '(');
      print_nested(pr, o, LV_EXPR);
      cn_sbuf_putc(sb, ')');
    } else {
      print_expr(pr, o, is_negation(e) ? LV_ARG : LV_PREFIX);
    }
    break;
  }
  case CN_NT_BINOP: print_chain(pr, e); break;
  case CN_NT_EINSUM:
    print_expr(pr, e->u.einsum.lhs, LV_OPERAND);
    cn_sbuf_printf(sb, " %s ", e->u.einsum.op);
    put_string(sb, e->u.einsum.spec);
    if (e->u.einsum.rhs) {
      cn_sbuf_putc(sb, ' ');
      print_expr(pr, e->u.einsum.rhs, LV_ARG);
    }
    break;
  case CN_NT_APPLY:
    print_expr(pr, e->u.apply.fn, LV_ARG);
    print_args(pr, e->u.apply.n_args, e->u.apply.args);
    break;
  case CN_NT_LET:
    cn_sbuf_printf(sb, "let %s = ", e->u.let.name);
    print_expr(pr, e->u.let.value, LV_EXPR);
    cn_sbuf_puts(sb, " in ");
    print_expr(pr, e->u.let.body, LV_EXPR);
    break;
  case CN_NT_IF:
    cn_sbuf_puts(sb, "if ");
    print_expr(pr, e->u.if_.cond, LV_RHS);
    cn_sbuf_puts(sb, " then ");
    print_expr(pr, e->u.if_.then_, LV_RHS);
    cn_sbuf_puts(sb, " else ");
    print_expr(pr, e->u.if_.else_, LV_RHS);
    break;
  case CN_NT_LIST: print_items(pr, e, "[", "; ", "]", LV_EXPR); break;
  case CN_NT_ARRAY: print_items(pr, e, "[|", "; ", "|]", LV_EXPR); break;
  case CN_NT_TUPLE: print_items(pr, e, "(", ", ", ")", LV_RHS); break;
  case CN_NT_ANNOT:
    cn_sbuf_putc(sb, '(');
    print_nested(pr, e->u.annot.expr, LV_EXPR);
    cn_sbuf_printf(sb, " : %s)", e->u.annot.label);
    break;
  case CN_NT_DECL:
    if (e->u.decl.string_form) {
      put_string(sb, e->u.decl.name);
      cn_sbuf_putc(sb, ' ');
      print_expr(pr, e->u.decl.init ? e->u.decl.init : e->u.decl.fields[0].value, LV_ARG);
      break;
    }
    cn_sbuf_printf(sb, "{%s", e->u.decl.name);
    if (e->u.decl.init) {
      cn_sbuf_puts(sb, " = ");
      print_nested(pr, e->u.decl.init, LV_EXPR);
    }
    print_fields(pr, e->u.decl.n_fields, e->u.decl.fields, false);
    cn_sbuf_putc(sb, '}');
    break;
  case CN_NT_RECORD:
    cn_sbuf_putc(sb, '{');
    print_fields(pr, e->u.record.n_fields, e->u.record.fields, true);
    cn_sbuf_putc(sb, '}');
    break;
  }
}

static void print_expr(printer *pr, const cn_nt_expr *e, level lv) {
  if (!needs_parens(pr, e, lv)) {
    print_bare(pr, e);
    return;
  }
  cn_sbuf_putc(pr->sb, '(');
  print_nested(pr, e, LV_EXPR);
  cn_sbuf_putc(pr->sb, ')');
}

void cn_nt_print_expr(cn_sbuf *sb, const cn_nt_expr *e) {
  printer pr = {sb, NULL};
  print_expr(&pr, e, LV_EXPR);
}

/* ---- %cd ------------------------------------------------------------------------------------ */

static void print_cd_item(printer *pr, const cn_nt_cd *c);

/* A sequence's items separated by "; " (or the single item); nested sequences in parentheses. */
static void print_cd_body(printer *pr, const cn_nt_cd *c) {
  if (c->kind != CN_NT_CD_SEQ || c->u.seq.n == 0) {
    print_cd_item(pr, c);
    return;
  }
  for (int i = 0; i < c->u.seq.n; i++) {
    if (i) cn_sbuf_puts(pr->sb, "; ");
    print_cd_item(pr, c->u.seq.items[i]);
  }
}

/* "(a; b)", and "()" for the empty sequence. */
static void print_cd_parens(printer *pr, const cn_nt_cd *c) {
  cn_sbuf_putc(pr->sb, '(');
  if (c->kind != CN_NT_CD_SEQ || c->u.seq.n > 0) print_cd_body(pr, c);
  cn_sbuf_putc(pr->sb, ')');
}

/* The fields of a %cd target whose chain starts at `!.x`, as written: `!.x.a.b` parsed as
 * ((!.x).a).b, and a target cannot start with '(' (print_expr would parenthesize `!.x`). */
static void print_field_chain(printer *pr, const cn_nt_expr *e) {
  if (e->kind != CN_NT_FIELD) {
    print_expr(pr, e, LV_OPERAND);
    return;
  }
  print_field_chain(pr, e->u.field.subject);
  cn_sbuf_printf(pr->sb, ".%s", e->u.field.name);
}

static void print_assign(printer *pr, const cn_nt_cd *c) {
  cn_sbuf *sb = pr->sb;
  const cn_nt_expr *lhs = c->u.assign.lhs, *base = lhs;
  while (base->kind == CN_NT_FIELD) base = base->u.field.subject;
  if (base != lhs && base->kind == CN_NT_PREFIX && !is_negation(base))
    print_field_chain(pr, lhs);
  else
    print_expr(pr, lhs, LV_ARG);
  cn_sbuf_printf(sb, " %s ", c->u.assign.asgn_op);
  pr->stop = assign_labels;
  switch (c->u.assign.form) {
  case CN_NT_RHS_PLAIN: print_expr(pr, c->u.assign.rhs[0], LV_RHS); break;
  case CN_NT_RHS_INFIX:
    print_expr(pr, c->u.assign.rhs[0], LV_OPERAND);
    cn_sbuf_printf(sb, " %s ", c->u.assign.op_text);
    print_expr(pr, c->u.assign.rhs[1], LV_OPERAND);
    break;
  case CN_NT_RHS_CURRIED:
    cn_sbuf_puts(sb, c->u.assign.op_text);
    for (int i = 0; i < c->u.assign.n_rhs; i++) {
      cn_sbuf_putc(sb, ' ');
      print_expr(pr, c->u.assign.rhs[i], LV_ARG);
    }
    break;
  case CN_NT_RHS_UNCURRIED:
    cn_sbuf_printf(sb, "%s (", c->u.assign.op_text);
    for (int i = 0; i < c->u.assign.n_rhs; i++) {
      if (i) cn_sbuf_puts(sb, ", ");
      print_nested(pr, c->u.assign.rhs[i], LV_RHS);
    }
    cn_sbuf_putc(sb, ')');
    break;
  }
  pr->stop = NULL;
  print_args(pr, c->u.assign.n_args, c->u.assign.args);
}

static void print_cd_item(printer *pr, const cn_nt_cd *c) {
  cn_sbuf *sb = pr->sb;
  switch (c->kind) {
  case CN_NT_CD_ASSIGN: print_assign(pr, c); break;
  case CN_NT_CD_SEQ: print_cd_parens(pr, c); break;
  case CN_NT_CD_IF: {
    const cn_nt_cd *t = c->u.if_.then_branch, *e = c->u.if_.else_branch;
    cn_sbuf_puts(sb, "if ");
    print_expr(pr, c->u.if_.cond, LV_RHS);
    cn_sbuf_puts(sb, " then ");
    /* A nested if in the then-branch is parenthesized, so no else can attach to it. */
    if (t->kind == CN_NT_CD_IF)
      print_cd_parens(pr, t);
    else
      print_cd_item(pr, t);
    if (e) {
      cn_sbuf_puts(sb, " else ");
      print_cd_item(pr, e);
    }
    break;
  }
  case CN_NT_CD_COMMENT:
    cn_sbuf_puts(sb, "~~(");
    for (int i = 0; i < c->u.comment.n_parts; i++) {
      if (i) cn_sbuf_putc(sb, ' ');
      print_expr(pr, c->u.comment.parts[i], LV_ARG);
    }
    cn_sbuf_puts(sb, "; ");
    print_cd_body(pr, c->u.comment.body);
    cn_sbuf_putc(sb, ')');
    break;
  }
}

void cn_nt_print_cd(cn_sbuf *sb, const cn_nt_cd *cd) {
  printer pr = {sb, NULL};
  print_cd_body(&pr, cd);
}

/* ---- Scripts -------------------------------------------------------------------------------- */

static void print_params(printer *pr, int n, const cn_nt_param *params) {
  for (int i = 0; i < n; i++) {
    const cn_nt_param *pa = &params[i];
    cn_sbuf_putc(pr->sb, ' ');
    switch (pa->kind) {
    case CN_NT_PARAM_PLAIN: cn_sbuf_puts(pr->sb, pa->name); break;
    case CN_NT_PARAM_LABELED: cn_sbuf_printf(pr->sb, "~%s", pa->name); break;
    case CN_NT_PARAM_OPTIONAL:
      if (!pa->default_value) {
        cn_sbuf_printf(pr->sb, "?%s", pa->name);
        break;
      }
      cn_sbuf_printf(pr->sb, "?(%s = ", pa->name);
      print_expr(pr, pa->default_value, LV_EXPR);
      cn_sbuf_putc(pr->sb, ')');
      break;
    case CN_NT_PARAM_UNIT: cn_sbuf_puts(pr->sb, "()"); break;
    }
  }
}

static void print_item(printer *pr, const cn_nt_item *it, int indent);

/* " ~name:value", nothing when value is NULL. */
static void print_option(printer *pr, const char *name, const cn_nt_expr *value) {
  if (!value) return;
  cn_sbuf_printf(pr->sb, " ~%s:", name);
  print_expr(pr, value, LV_ARG);
}

/* sgd / adam: the loss (an application there stops at the labels), then each given option. */
static void print_optimizer(printer *pr, const char *what, const char *const *labels,
                            const cn_nt_expr *loss, const cn_nt_expr *const *values) {
  cn_sbuf_printf(pr->sb, "%s ", what);
  pr->stop = labels;
  print_expr(pr, loss, LV_RHS);
  pr->stop = NULL;
  for (int i = 0; labels[i]; i++) print_option(pr, labels[i], values[i]);
}

/* shuffle, checkpoint, save_npy: the file as one argument, the tensor (an application there
 * stops at ~epoch), then ~epoch. */
static void print_data_statement(printer *pr, const cn_nt_item *it) {
  static const char *const what[] = {"shuffle", "checkpoint", "save_npy"};
  cn_sbuf_printf(pr->sb, "%s ", what[it->kind - CN_NT_ITEM_SHUFFLE]);
  if (it->u.data.file) {
    print_expr(pr, it->u.data.file, LV_ARG);
    cn_sbuf_putc(pr->sb, ' ');
  }
  if (!it->u.data.epoch) {
    print_expr(pr, it->u.data.expr, LV_EXPR);
    return;
  }
  pr->stop = cn_nt_epoch_labels;
  print_expr(pr, it->u.data.expr, LV_RHS);
  pr->stop = NULL;
  print_option(pr, "epoch", it->u.data.epoch);
}

/* plot "file" ~x:e ("name", e) ... [~ascii:e] [~matrix:e]. */
static void print_plot(printer *pr, const cn_nt_item *it) {
  cn_sbuf_puts(pr->sb, "plot ");
  print_expr(pr, it->u.plot.file, LV_ARG);
  print_option(pr, "x", it->u.plot.x);
  for (int i = 0; i < it->u.plot.n_series; i++) {
    cn_sbuf_puts(pr->sb, " (");
    print_nested(pr, it->u.plot.names[i], LV_RHS);
    cn_sbuf_puts(pr->sb, ", ");
    print_nested(pr, it->u.plot.values[i], LV_RHS);
    cn_sbuf_putc(pr->sb, ')');
  }
  print_option(pr, "ascii", it->u.plot.ascii);
  if (it->u.plot.matrix_title) {
    cn_sbuf_puts(pr->sb, " ~matrix:(");
    print_nested(pr, it->u.plot.matrix_title, LV_RHS);
    cn_sbuf_puts(pr->sb, ", ");
    print_nested(pr, it->u.plot.matrix, LV_RHS);
    cn_sbuf_putc(pr->sb, ')');
  } else {
    print_option(pr, "matrix", it->u.plot.matrix);
  }
}

/* A block's statements, one level deeper. */
static void print_body(printer *pr, int n, const cn_nt_item *items, int indent) {
  for (int i = 0; i < n; i++) print_item(pr, &items[i], indent + 1);
}

/* One item per line; a block's body indented by two spaces per level. */
static void print_item(printer *pr, const cn_nt_item *it, int indent) {
  cn_sbuf *sb = pr->sb;
  cn_sbuf_printf(sb, "%*s", 2 * indent, "");
  switch (it->kind) {
  case CN_NT_ITEM_LET: {
    static const char *const ext[] = {"", "%op", "%cd", "%tile"};
    if (it->u.let.n_names > 0) {
      cn_sbuf_puts(sb, "let (");
      for (int i = 0; i < it->u.let.n_names; i++)
        cn_sbuf_printf(sb, "%s%s", i ? ", " : "", it->u.let.names[i]);
      cn_sbuf_puts(sb, ") = ");
      print_expr(pr, it->u.let.expr, LV_EXPR);
      break;
    }
    cn_sbuf_printf(sb, "let%s %s", ext[it->u.let.ext], it->u.let.name);
    print_params(pr, it->u.let.n_params, it->u.let.params);
    if (it->u.let.tile) { /* the raw body, its first line where it was */
      if (it->u.let.tile_pos.line > it->pos.line)
        cn_sbuf_printf(sb, " =\n%*s%s", it->u.let.tile_pos.col - 1, "", it->u.let.tile);
      else
        cn_sbuf_printf(sb, " = %s", it->u.let.tile);
      break;
    }
    cn_sbuf_puts(sb, " = ");
    if (it->u.let.cd)
      print_cd_body(pr, it->u.let.cd);
    else
      print_expr(pr, it->u.let.expr, LV_EXPR);
    break;
  }
  case CN_NT_ITEM_PRINT:
    cn_sbuf_puts(sb, "print ");
    pr->stop = cn_nt_print_labels;
    print_expr(pr, it->u.print.expr, LV_EXPR);
    pr->stop = NULL;
    print_option(pr, "full", it->u.print.full);
    print_option(pr, "precision", it->u.print.precision);
    break;
  case CN_NT_ITEM_BACKPROP:
    cn_sbuf_puts(sb, "backprop ");
    print_expr(pr, it->u.expr, LV_EXPR);
    break;
  case CN_NT_ITEM_RUN:
    cn_sbuf_puts(sb, "run ");
    print_expr(pr, it->u.expr, LV_OPERAND);
    break;
  case CN_NT_ITEM_SGD: {
    const cn_nt_expr *values[] = {it->u.sgd.learning_rate, it->u.sgd.momentum,
                                  it->u.sgd.weight_decay, it->u.sgd.nesterov, it->u.sgd.clip};
    print_optimizer(pr, "sgd", cn_nt_sgd_labels, it->u.sgd.expr, values);
    break;
  }
  case CN_NT_ITEM_ADAM: {
    const cn_nt_expr *values[] = {it->u.adam.learning_rate, it->u.adam.beta1,
                                  it->u.adam.beta2,         it->u.adam.eps,
                                  it->u.adam.weight_decay,  it->u.adam.decoupled,
                                  it->u.adam.clip,          it->u.adam.decay_matrices_only};
    print_optimizer(pr, "adam", cn_nt_adam_labels, it->u.adam.expr, values);
    break;
  }
  case CN_NT_ITEM_PRINTF:
    cn_sbuf_puts(sb, "printf ");
    put_string(sb, it->u.printf_.format);
    for (int i = 0; i < it->u.printf_.n_args; i++) {
      cn_sbuf_putc(sb, ' ');
      print_expr(pr, it->u.printf_.args[i], LV_ARG);
    }
    break;
  case CN_NT_ITEM_IF:
    cn_sbuf_puts(sb, "if ");
    print_expr(pr, it->u.if_.cond, LV_RHS);
    cn_sbuf_puts(sb, " then\n");
    print_body(pr, it->u.if_.n_then, it->u.if_.then_items, indent);
    if (it->u.if_.has_else) {
      cn_sbuf_printf(sb, "%*selse\n", 2 * indent, "");
      print_body(pr, it->u.if_.n_else, it->u.if_.else_items, indent);
    }
    cn_sbuf_printf(sb, "%*send", 2 * indent, "");
    break;
  case CN_NT_ITEM_SHUFFLE:
  case CN_NT_ITEM_CHECKPOINT:
  case CN_NT_ITEM_SAVE_NPY: print_data_statement(pr, it); break;
  case CN_NT_ITEM_PLOT: print_plot(pr, it); break;
  case CN_NT_ITEM_SET_SEED: cn_sbuf_printf(sb, "set_seed %lld", (long long)it->u.seed); break;
  case CN_NT_ITEM_FOR:
    cn_sbuf_printf(sb, "for %s = ", it->u.for_.name);
    print_expr(pr, it->u.for_.from, LV_EXPR);
    cn_sbuf_puts(sb, " to ");
    pr->stop = cn_nt_for_labels;
    print_expr(pr, it->u.for_.to, LV_EXPR);
    pr->stop = NULL;
    print_option(pr, "devices", it->u.for_.devices);
    if (it->u.for_.progress) {
      cn_sbuf_puts(sb, " progress");
      print_option(pr, "loss", it->u.for_.loss);
      print_option(pr, "batch_size", it->u.for_.batch_size);
    }
    cn_sbuf_puts(sb, " do\n");
    print_body(pr, it->u.for_.n_items, it->u.for_.items, indent);
    cn_sbuf_printf(sb, "%*sdone", 2 * indent, "");
    break;
  }
  cn_sbuf_putc(sb, '\n');
}

void cn_nt_print_item(cn_sbuf *sb, const cn_nt_item *it) {
  printer pr = {sb, NULL};
  print_item(&pr, it, 0);
  if (sb->len > 0 && !sb->failed) sb->data[--sb->len] = '\0';
}

void cn_nt_print_program(cn_sbuf *sb, const cn_nt_program *prog) {
  printer pr = {sb, NULL};
  for (int i = 0; i < prog->n_items; i++) print_item(&pr, &prog->items[i], 0);
}
