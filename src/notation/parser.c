/* The notation's recursive-descent parser: `.cnl` scripts, %op expressions and %cd sequences into
 * the tree of ast.h (grammar in notation.h).
 *
 * The parser pulls tokens from the lexer through a four-token window, so a lexical error is
 * reported only when the parser reaches it and the first error in text order wins. Every failure
 * goes through `error` (or the lexer's, or cn_alloc's CN_ERR_NOMEM) and sets `failed`, after which
 * no message is overwritten and every function returns NULL promptly, so nothing half-built
 * escapes. Three bounds make every input terminate without exhausting the stack: the recursion
 * depth of the parsing functions (MAX_DEPTH), the height of the built tree (CN_NT_MAX_HEIGHT,
 * checked as each node is finished) and the nesting of `for` loops (CN_NT_MAX_LOOP_DEPTH); each
 * loop consumes a token per iteration.
 *
 * Infix operators follow OCaml's precedence by the operator's first characters (precedence
 * climbing); a %cd right-hand side is classified against the primitive-op table (ops.def) and the
 * assignment operators against syntax-extensions-cd-op's table (both tables in lexer.c). */
#include "notation/lexer.h"
#include "numeric/numeric.h"

#include <stdio.h>
#include <string.h>

/* Recursion guard: four guarded calls per level of parentheses (expression, binary operand twice,
 * atom), so about CN_NT_MAX_HEIGHT levels of brackets, whatever the tree's height; it bounds the
 * stack. */
enum { MAX_DEPTH = 4 * CN_NT_MAX_HEIGHT, WINDOW = 4 };
/* Declarations, records and parameter lists are checked for duplicate names pairwise; the cap
 * keeps that cheap on any input. */
enum { MAX_NAMES = 256 };

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

/* ---- Parser state, tokens, errors ----------------------------------------------------------- */

typedef struct {
  cn_ctx *ctx;
  const cn_nt_source *src;
  cn_nt_lexer lx;
  cn_nt_token window[WINDOW];
  int head, count;
  cn_nt_token eof; /* returned after a failure */
  bool failed;
  int depth;
  int loops; /* the `for` bodies being parsed, innermost last (at most CN_NT_MAX_LOOP_DEPTH) */
  /* Labels that end an application instead of becoming its arguments (a %cd right-hand side's
   * ~logic, sgd's options); NULL-terminated; cleared inside brackets. */
  const char *const *stop_labels;
} parser;

static const char *const assign_labels[] = {"logic", "projections", NULL};
static const char *const sgd_labels[] = {"learning_rate", "momentum", "weight_decay", "nesterov",
                                         NULL};

static void error(parser *p, cn_nt_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);
static void error(parser *p, cn_nt_pos pos, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = true;
  char what[500];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_nt_fail_at(p->ctx, pos, "%s", what);
}

/* The k-th token ahead (k < WINDOW). */
static const cn_nt_token *peek(parser *p, int k) {
  while (p->count <= k) {
    if (p->failed) return &p->eof;
    cn_nt_token *t = &p->window[(p->head + p->count) % WINDOW];
    if (!cn_nt_lex(&p->lx, t)) {
      p->failed = true;
      return &p->eof;
    }
    p->count++;
  }
  return &p->window[(p->head + k) % WINDOW];
}

static cn_nt_token next(parser *p) {
  cn_nt_token t = *peek(p, 0);
  if (p->count > 0) {
    p->head = (p->head + 1) % WINDOW;
    p->count--;
  }
  return t;
}

static cn_nt_pos pos_of(const parser *p, const cn_nt_token *t) {
  cn_nt_pos pos = {p->src, t->line, t->col};
  return pos;
}

static cn_nt_pos here(parser *p) {
  return pos_of(p, peek(p, 0));
}

static bool at_kind(parser *p, nt_tk_kind kind) {
  return peek(p, 0)->kind == kind;
}

static bool at_op(parser *p, const char *op) {
  const cn_nt_token *t = peek(p, 0);
  return t->kind == NT_TK_OP && strcmp(t->text, op) == 0;
}

/* The token as a message names it. */
static const char *describe(parser *p, const cn_nt_token *t, char *buf, size_t size) {
  if (t->kind == NT_TK_EOF) return "end of input";
  if (t->kind == NT_TK_STRING) return "a string";
  const char *s = p->src->text + t->offset;
  int n = t->len > 30 ? 30 : (int)t->len;
  const char *word = cn_nt_reserved_word(t->kind);
  snprintf(buf, size, "'%.*s'%s%s", n, s, t->len > 30 ? "..." : "",
           word ? " (a reserved word)" : "");
  return buf;
}

/* "expected WHAT, found TOKEN" at the current token. */
static void expected(parser *p, const char *what) {
  char buf[80];
  const cn_nt_token *t = peek(p, 0);
  error(p, pos_of(p, t), "expected %s, found %s", what, describe(p, t, buf, sizeof buf));
}

/* Consumes the closing bracket `kind` matching the opener at `open`. */
static bool expect_close(parser *p, nt_tk_kind kind, const char *close, cn_nt_pos open,
                         const char *opener) {
  if (at_kind(p, kind)) {
    next(p);
    return true;
  }
  char what[120];
  snprintf(what, sizeof what, "'%s' to close the '%s' at line %d, column %d", close, opener,
           open.line, open.col);
  expected(p, what);
  return false;
}

/* Consumes a lone '='; a longer operator starting with '=' gets a hint, since `x =-1` reads as
 * the operator `=-`. */
static bool expect_equal(parser *p, const char *after) {
  if (at_op(p, "=")) {
    next(p);
    return true;
  }
  const cn_nt_token *t = peek(p, 0);
  if (t->kind == NT_TK_OP && t->text[0] == '=') {
    error(p, pos_of(p, t), "'%s' is read as one operator: put a space after '='", t->text);
    return false;
  }
  char what[80];
  snprintf(what, sizeof what, "'=' %s", after);
  expected(p, what);
  return false;
}

static bool enter(parser *p) {
  if (p->failed) return false;
  if (++p->depth > MAX_DEPTH) {
    error(p, here(p), "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return false;
  }
  return true;
}

static void *alloc(parser *p, size_t bytes) {
  void *m = cn_alloc(p->ctx, bytes);
  if (!m) p->failed = true;
  return m;
}

/* A growable arena array. */
typedef struct {
  void *v;
  int n, cap;
} vec;

static bool push(parser *p, vec *v, const void *elem, size_t size) {
  if (!cn_arena_grow(p->ctx, &v->v, &v->cap, v->n + 1, size)) {
    p->failed = true;
    return false;
  }
  memcpy((char *)v->v + (size_t)v->n * size, elem, size);
  v->n++;
  return true;
}

/* ---- Node construction ---------------------------------------------------------------------- */

static cn_nt_expr *new_expr(parser *p, cn_nt_expr_kind kind, cn_nt_pos pos) {
  cn_nt_expr *e = alloc(p, sizeof *e);
  if (e) {
    e->kind = kind;
    e->pos = pos;
  }
  return e;
}

static int height(const cn_nt_expr *e) {
  return e ? e->height : 0;
}

static int max_int(int a, int b) {
  return a > b ? a : b;
}

static int fields_height(int n, const cn_nt_field *fields) {
  int h = 0;
  for (int i = 0; i < n; i++) h = max_int(h, height(fields[i].value));
  return h;
}

/* Sets the height from the children; an error at `at` when the tree gets too high. */
static cn_nt_expr *finish(parser *p, cn_nt_expr *e, cn_nt_pos at) {
  if (!e) return NULL;
  int h = 0;
  switch (e->kind) {
  case CN_NT_NUMBER:
  case CN_NT_STRING:
  case CN_NT_BOOL:
  case CN_NT_UNIT:
  case CN_NT_IDENT: break;
  case CN_NT_FIELD: h = height(e->u.field.subject); break;
  case CN_NT_PREFIX: h = height(e->u.prefix.operand); break;
  case CN_NT_BINOP: { /* the left spine is walked iteratively: it adds no level */
    const cn_nt_expr *l = e->u.binop.lhs;
    h = max_int(l->kind == CN_NT_BINOP ? l->height - 1 : height(l), height(e->u.binop.rhs));
    break;
  }
  case CN_NT_EINSUM: h = max_int(height(e->u.einsum.lhs), height(e->u.einsum.rhs)); break;
  case CN_NT_APPLY:
    h = height(e->u.apply.fn);
    for (int i = 0; i < e->u.apply.n_args; i++) h = max_int(h, height(e->u.apply.args[i].value));
    break;
  case CN_NT_LET: h = max_int(height(e->u.let.value), height(e->u.let.body)); break;
  case CN_NT_LIST:
  case CN_NT_TUPLE:
  case CN_NT_ARRAY:
    for (int i = 0; i < e->u.items.n; i++) h = max_int(h, height(e->u.items.items[i]));
    break;
  case CN_NT_ANNOT: h = height(e->u.annot.expr); break;
  case CN_NT_DECL:
    h = max_int(height(e->u.decl.init), fields_height(e->u.decl.n_fields, e->u.decl.fields));
    break;
  case CN_NT_RECORD: h = fields_height(e->u.record.n_fields, e->u.record.fields); break;
  }
  e->height = h + 1;
  if (e->height > CN_NT_MAX_HEIGHT) {
    error(p, at, "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return NULL;
  }
  return e;
}

static cn_nt_cd *new_cd(parser *p, cn_nt_cd_kind kind, cn_nt_pos pos) {
  cn_nt_cd *c = alloc(p, sizeof *c);
  if (c) {
    c->kind = kind;
    c->pos = pos;
  }
  return c;
}

static int cd_height(const cn_nt_cd *c) {
  return c ? c->height : 0;
}

static cn_nt_cd *finish_cd(parser *p, cn_nt_cd *c) {
  if (!c) return NULL;
  int h = 0;
  switch (c->kind) {
  case CN_NT_CD_ASSIGN:
    h = height(c->u.assign.lhs);
    for (int i = 0; i < c->u.assign.n_rhs; i++) h = max_int(h, height(c->u.assign.rhs[i]));
    for (int i = 0; i < c->u.assign.n_args; i++) h = max_int(h, height(c->u.assign.args[i].value));
    break;
  case CN_NT_CD_SEQ:
    for (int i = 0; i < c->u.seq.n; i++) h = max_int(h, cd_height(c->u.seq.items[i]));
    break;
  case CN_NT_CD_IF:
    h = max_int(height(c->u.if_.cond),
                max_int(cd_height(c->u.if_.then_branch), cd_height(c->u.if_.else_branch)));
    break;
  case CN_NT_CD_COMMENT:
    h = cd_height(c->u.comment.body);
    for (int i = 0; i < c->u.comment.n_parts; i++) h = max_int(h, height(c->u.comment.parts[i]));
    break;
  }
  c->height = h + 1;
  if (c->height > CN_NT_MAX_HEIGHT) {
    error(p, c->pos, "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return NULL;
  }
  return c;
}

/* ---- %op expressions ------------------------------------------------------------------------ */

static cn_nt_expr *parse_expr(parser *p);
static cn_nt_expr *parse_binary(parser *p, int min_prec);
static cn_nt_expr *parse_atom(parser *p);

static bool is_bang_prefix(const char *op) {
  return op[0] == '!' && strcmp(op, "!=") != 0;
}

/* Whether the current token can start an application argument. */
static bool starts_arg(parser *p) {
  const cn_nt_token *t = peek(p, 0);
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
  for (const char *const *l = p->stop_labels; l && *l; l++)
    if (strcmp(*l, label) == 0) return true;
  return false;
}

static cn_nt_expr *number_node(parser *p, const cn_nt_token *t, cn_nt_pos pos) {
  cn_nt_expr *e = new_expr(p, CN_NT_NUMBER, pos);
  if (!e) return NULL;
  e->u.number.is_int = t->kind == NT_TK_INT;
  e->u.number.ival = t->ival;
  e->u.number.value = t->fval;
  return e;
}

/* 'q' 2.0 and 'q' -2.0: a number with the dimension label of its output axis. */
static cn_nt_expr *labeled_number(parser *p) {
  cn_nt_token label = next(p);
  bool negative = false;
  if (at_op(p, "-") || at_op(p, "-.")) {
    next(p);
    negative = true;
  }
  const cn_nt_token *t = peek(p, 0);
  if (t->kind != NT_TK_INT && t->kind != NT_TK_FLOAT) {
    expected(p, "a number after the dimension label (as in 'q' 2.0)");
    return NULL;
  }
  cn_nt_expr *e = number_node(p, t, pos_of(p, &label));
  next(p);
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
  cn_nt_token open = next(p);
  cn_nt_pos open_pos = pos_of(p, &open);
  if (at_kind(p, NT_TK_RPAREN)) {
    next(p);
    return new_expr(p, CN_NT_UNIT, open_pos);
  }
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  cn_nt_expr *e = parse_expr(p);
  p->stop_labels = saved;
  if (!e) return NULL;
  if (at_op(p, ":")) {
    next(p);
    const cn_nt_token *t = peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      expected(p, "a label name after ':' (as in ([2.0] : rgb))");
      return NULL;
    }
    cn_nt_expr *a = new_expr(p, CN_NT_ANNOT, open_pos);
    if (!a) return NULL;
    a->u.annot.expr = e;
    a->u.annot.label = next(p).text;
    e = finish(p, a, open_pos);
  }
  if (!expect_close(p, NT_TK_RPAREN, ")", open_pos, "(")) return NULL;
  return e;
}

/* [a; b], [|a; b|]: elements are full expressions, a trailing ';' is allowed. */
static cn_nt_expr *parse_items(parser *p, cn_nt_expr_kind kind, nt_tk_kind close,
                               const char *close_text, const char *open_text) {
  cn_nt_token open = next(p);
  cn_nt_pos open_pos = pos_of(p, &open);
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  vec items = {0};
  while (!p->failed && !at_kind(p, close)) {
    if (at_kind(p, NT_TK_EOF)) {
      expect_close(p, close, close_text, open_pos, open_text);
      break;
    }
    cn_nt_expr *e = parse_expr(p);
    if (!e || !push(p, &items, &e, sizeof e)) break;
    if (at_kind(p, NT_TK_SEMI)) {
      next(p);
    } else if (!at_kind(p, close)) {
      char what[120];
      snprintf(what, sizeof what, "';' or '%s' (closing the '%s' at line %d, column %d)",
               close_text, open_text, open_pos.line, open_pos.col);
      expected(p, what);
    }
  }
  p->stop_labels = saved;
  if (p->failed) return NULL;
  next(p);
  cn_nt_expr *e = new_expr(p, kind, open_pos);
  if (!e) return NULL;
  e->u.items.n = items.n;
  e->u.items.items = items.v;
  return finish(p, e, open_pos);
}

/* { name [= e]; field = e; ... }: an inline declaration, or a record when `record`. */
static cn_nt_expr *parse_braces(parser *p, bool record) {
  cn_nt_token open = next(p);
  cn_nt_pos open_pos = pos_of(p, &open);
  const char *const *saved = p->stop_labels;
  p->stop_labels = NULL;
  vec fields = {0};
  while (!p->failed) {
    const cn_nt_token *t = peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      expected(p, record ? "a field name" : fields.n ? "a field name" : "the declared name");
      break;
    }
    cn_nt_field f = {t->text, pos_of(p, t), NULL};
    if (fields.n == MAX_NAMES) {
      error(p, f.pos, "too many fields (at most %d)", MAX_NAMES);
      break;
    }
    next(p);
    for (int i = 0; i < fields.n; i++)
      if (strcmp(((cn_nt_field *)fields.v)[i].name, f.name) == 0)
        error(p, f.pos, "field '%s' is given twice", f.name);
    if (at_op(p, "=")) {
      next(p);
      if (!(f.value = parse_expr(p))) break;
    } else if (at_kind(p, NT_TK_OP) && peek(p, 0)->text[0] == '=') {
      expect_equal(p, "");
    } else if (!record && fields.n > 0) {
      error(p, here(p), "expected '=' after '%s' (a declaration's further fields are name = value)",
            f.name);
    }
    if (p->failed || !push(p, &fields, &f, sizeof f)) break;
    if (at_kind(p, NT_TK_SEMI)) {
      next(p);
      if (at_kind(p, NT_TK_RBRACE)) break;
    } else if (!at_kind(p, NT_TK_RBRACE)) {
      char what[120];
      snprintf(what, sizeof what, "';' or '}' (closing the '{' at line %d, column %d)",
               open_pos.line, open_pos.col);
      expected(p, what);
    } else {
      break;
    }
  }
  p->stop_labels = saved;
  if (p->failed) return NULL;
  next(p);
  cn_nt_field *fs = fields.v;
  cn_nt_expr *e = new_expr(p, record ? CN_NT_RECORD : CN_NT_DECL, open_pos);
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
  return finish(p, e, open_pos);
}

static cn_nt_expr *atom_body(parser *p) {
  const cn_nt_token *t = peek(p, 0);
  cn_nt_pos pos = pos_of(p, t);
  cn_nt_expr *e = NULL;
  switch (t->kind) {
  case NT_TK_IDENT:
    if (strcmp(t->text, "_") == 0) {
      error(p, pos, "'_' is not a value (it names a wildcard binding: let _ = ...)");
      return NULL;
    }
    if ((e = new_expr(p, CN_NT_IDENT, pos))) e->u.ident.name = t->text;
    next(p);
    return finish(p, e, pos);
  case NT_TK_INT:
  case NT_TK_FLOAT:
    e = number_node(p, t, pos);
    next(p);
    return finish(p, e, pos);
  case NT_TK_CHAR: return finish(p, labeled_number(p), pos);
  case NT_TK_STRING:
    if ((e = new_expr(p, CN_NT_STRING, pos))) e->u.string.text = t->text;
    next(p);
    return finish(p, e, pos);
  case NT_TK_TRUE:
  case NT_TK_FALSE:
    if ((e = new_expr(p, CN_NT_BOOL, pos))) e->u.boolean = t->kind == NT_TK_TRUE;
    next(p);
    return finish(p, e, pos);
  case NT_TK_LPAREN: return parse_parens(p);
  case NT_TK_LBRACKET: return parse_items(p, CN_NT_LIST, NT_TK_RBRACKET, "]", "[");
  case NT_TK_LBRACKET_BAR: return parse_items(p, CN_NT_ARRAY, NT_TK_BAR_RBRACKET, "|]", "[|");
  case NT_TK_LBRACE: return parse_braces(p, false);
  case NT_TK_OP:
    if (is_bang_prefix(t->text)) {
      const char *op = t->text;
      next(p);
      cn_nt_expr *operand = parse_atom(p);
      if (!operand || !(e = new_expr(p, CN_NT_PREFIX, pos))) return NULL;
      e->u.prefix.op = op;
      e->u.prefix.operand = operand;
      return finish(p, e, pos);
    }
    if (strcmp(t->text, "~~") == 0) {
      error(p, pos, "a block comment ~~(...) is a %%cd statement, not an expression");
      return NULL;
    }
    break;
  default: break;
  }
  expected(p, "an expression");
  return NULL;
}

static cn_nt_expr *parse_atom(parser *p) {
  if (!enter(p)) return NULL;
  cn_nt_expr *e = atom_body(p);
  p->depth--;
  return e;
}

/* atom ('.' name)*. */
static cn_nt_expr *parse_arg(parser *p) {
  cn_nt_expr *e = parse_atom(p);
  while (e && at_kind(p, NT_TK_DOT)) {
    next(p);
    const cn_nt_token *t = peek(p, 0);
    if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
      expected(p, "a field name after '.' (value, grad, merge or a record field)");
      return NULL;
    }
    cn_nt_expr *f = new_expr(p, CN_NT_FIELD, e->pos);
    if (!f) return NULL;
    f->u.field.subject = e;
    f->u.field.name = t->text;
    f->u.field.name_pos = pos_of(p, t);
    next(p);
    e = finish(p, f, f->u.field.name_pos);
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
    error(p, args[n > 1 && !args[0].label ? 1 : 0].pos,
          "an inline declaration \"name\" takes one argument: its initial values [...] or its "
          "output dimension(s)");
    return NULL;
  }
  cn_nt_expr *e = new_expr(p, CN_NT_DECL, head->pos);
  if (!e) return NULL;
  e->u.decl.name = head->u.string.text;
  e->u.decl.string_form = true;
  const cn_nt_expr *a = args[0].value;
  if (a->kind == CN_NT_LIST || (a->kind == CN_NT_NUMBER && !a->u.number.is_int)) {
    e->u.decl.init = args[0].value;
  } else {
    cn_nt_field *f = alloc(p, sizeof *f);
    if (!f) return NULL;
    f->name = "o";
    f->pos = args[0].pos;
    f->value = args[0].value;
    e->u.decl.n_fields = 1;
    e->u.decl.fields = f;
  }
  return finish(p, e, head->pos);
}

/* arg (arg | ~label:arg | ~label)*. */
static cn_nt_expr *parse_app(parser *p) {
  cn_nt_expr *head = parse_arg(p);
  if (!head) return NULL;
  vec args = {0};
  for (;;) {
    const cn_nt_token *t = peek(p, 0);
    cn_nt_arg a = {NULL, pos_of(p, t), NULL};
    if (t->kind == NT_TK_LABEL || t->kind == NT_TK_LABEL_COLON) {
      if (stops_application(p, t->text)) break;
      cn_nt_token label = next(p);
      a.label = label.text;
      if (label.kind == NT_TK_LABEL_COLON) {
        /* ~config:{...} is a config record, not a declaration (syntax-extensions-cd-op "Lifting").
         * */
        if (strcmp(label.text, "config") == 0 && at_kind(p, NT_TK_LBRACE))
          a.value = parse_braces(p, true);
        else
          a.value = parse_arg(p);
        if (!a.value) return NULL;
      }
    } else if (starts_arg(p)) {
      if (!(a.value = parse_arg(p))) return NULL;
    } else {
      break;
    }
    if (!push(p, &args, &a, sizeof a)) return NULL;
  }
  if (args.n == 0) return head;
  cn_nt_arg *as = args.v;
  if (head->kind == CN_NT_STRING) return string_declaration(p, head, args.n, as);
  if (is_literal(head)) {
    error(p, as[0].pos, "this value is not a function: it cannot be applied to arguments");
    return NULL;
  }
  cn_nt_expr *e = new_expr(p, CN_NT_APPLY, head->pos);
  if (!e) return NULL;
  e->u.apply.fn = head;
  e->u.apply.n_args = args.n;
  e->u.apply.args = as;
  return finish(p, e, head->pos);
}

static cn_nt_expr *unary_body(parser *p) {
  if (!(at_op(p, "-") || at_op(p, "-."))) return parse_app(p);
  cn_nt_token op = next(p);
  cn_nt_pos pos = pos_of(p, &op);
  cn_nt_expr *operand = NULL;
  if (enter(p)) {
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
  cn_nt_expr *e = new_expr(p, CN_NT_PREFIX, pos);
  if (!e) return NULL;
  e->u.prefix.op = op.text;
  e->u.prefix.operand = operand;
  return finish(p, e, pos);
}

/* After an einsum operator: the spec string, then (binary kinds) one argument. */
static cn_nt_expr *einsum_rest(parser *p, cn_nt_expr *lhs, const cn_nt_token *op,
                               cn_nt_einsum_kind kind, cn_nt_prec prec) {
  bool binary = kind != CN_NT_EINSUM_UNARY && kind != CN_NT_EINSUM_MAX_UNARY;
  const cn_nt_token *t = peek(p, 0);
  if (t->kind != NT_TK_STRING) {
    char what[100];
    snprintf(what, sizeof what, "an einsum spec string after '%s' (as in a %s \"%s\"%s)", op->text,
             op->text, binary ? "i;i=>i" : "ij=>ji", binary ? " b" : "");
    expected(p, what);
    return NULL;
  }
  cn_nt_expr *e = new_expr(p, CN_NT_EINSUM, lhs->pos);
  if (!e) return NULL;
  e->u.einsum.kind = kind;
  e->u.einsum.op = op->text;
  e->u.einsum.op_pos = pos_of(p, op);
  e->u.einsum.spec = t->text;
  e->u.einsum.spec_pos = pos_of(p, t);
  e->u.einsum.lhs = lhs;
  next(p);
  if (binary) {
    if (!starts_arg(p)) {
      char what[80];
      snprintf(what, sizeof what, "the right operand of '%s' after its spec", op->text);
      expected(p, what);
      return NULL;
    }
    if (!(e->u.einsum.rhs = parse_arg(p))) return NULL;
  }
  if (starts_arg(p)) {
    if (binary)
      error(p, here(p), "the right operand of '%s' is one argument: parenthesize an application",
            op->text);
    else
      error(p, here(p), "'%s' takes an einsum spec and no right operand", op->text);
    return NULL;
  }
  /* OCaml would read `a +* "s" b * c` as `a +* ("s" b * c)`: refuse rather than guess. */
  const cn_nt_token *after = peek(p, 0);
  cn_nt_prec next_prec = after->kind == NT_TK_OP ? cn_nt_infix_prec(after->text) : CN_NT_PREC_NONE;
  if (next_prec > prec || (next_prec == prec && right_assoc(prec))) {
    error(p, pos_of(p, after),
          "'%s' binds tighter than '%s' here: parenthesize the einsum or its operand", after->text,
          op->text);
    return NULL;
  }
  return finish(p, e, e->u.einsum.op_pos);
}

static cn_nt_expr *binary_body(parser *p, int min_prec) {
  cn_nt_expr *lhs = NULL;
  if (enter(p)) {
    lhs = unary_body(p);
    p->depth--;
  }
  while (lhs) {
    const cn_nt_token *t = peek(p, 0);
    if (t->kind != NT_TK_OP) break;
    cn_nt_prec prec = cn_nt_infix_prec(t->text);
    if (prec == CN_NT_PREC_NONE || (int)prec < min_prec) break;
    cn_nt_token op = next(p);
    cn_nt_einsum_kind kind;
    if (einsum_op(op.text, &kind)) {
      lhs = einsum_rest(p, lhs, &op, kind, prec);
      continue;
    }
    cn_nt_expr *rhs = parse_binary(p, right_assoc(prec) ? (int)prec : (int)prec + 1);
    if (!rhs) return NULL;
    cn_nt_expr *e = new_expr(p, CN_NT_BINOP, lhs->pos);
    if (!e) return NULL;
    e->u.binop.op = op.text;
    e->u.binop.prec = prec;
    e->u.binop.op_pos = pos_of(p, &op);
    e->u.binop.lhs = lhs;
    e->u.binop.rhs = rhs;
    lhs = finish(p, e, e->u.binop.op_pos);
  }
  return lhs;
}

static cn_nt_expr *parse_binary(parser *p, int min_prec) {
  if (!enter(p)) return NULL;
  cn_nt_expr *e = binary_body(p, min_prec);
  p->depth--;
  return e;
}

/* let name = value in body. */
static cn_nt_expr *parse_let_in(parser *p) {
  cn_nt_token let = next(p);
  cn_nt_pos pos = pos_of(p, &let);
  if (at_op(p, "%")) {
    error(p, here(p), "let%%op, let%%cd and let%%tile are only allowed at the top level");
    return NULL;
  }
  const cn_nt_token *t = peek(p, 0);
  if (t->kind != NT_TK_IDENT) {
    expected(p, "a name after 'let'");
    return NULL;
  }
  cn_nt_expr *e = new_expr(p, CN_NT_LET, pos);
  if (!e) return NULL;
  e->u.let.name = t->text;
  e->u.let.name_pos = pos_of(p, t);
  next(p);
  if (!at_kind(p, NT_TK_OP) || peek(p, 0)->text[0] != '=') {
    if (starts_arg(p) || at_kind(p, NT_TK_LABEL) || at_kind(p, NT_TK_OPTLABEL)) {
      error(p, here(p), "a local 'let' cannot define a function: use let%%op at the top level");
      return NULL;
    }
  }
  if (!expect_equal(p, "after the name") || !(e->u.let.value = parse_expr(p))) return NULL;
  if (!at_kind(p, NT_TK_IN)) {
    expected(p, "'in' after the value of a local 'let'");
    return NULL;
  }
  next(p);
  if (!(e->u.let.body = parse_expr(p))) return NULL;
  return finish(p, e, pos);
}

static cn_nt_expr *expr_body(parser *p) {
  if (at_kind(p, NT_TK_LET)) return parse_let_in(p);
  cn_nt_expr *first = parse_binary(p, 1);
  if (!first || !at_kind(p, NT_TK_COMMA)) return first;
  vec items = {0};
  if (!push(p, &items, &first, sizeof first)) return NULL;
  while (at_kind(p, NT_TK_COMMA)) {
    next(p);
    cn_nt_expr *e = at_kind(p, NT_TK_LET) ? parse_let_in(p) : parse_binary(p, 1);
    if (!e || !push(p, &items, &e, sizeof e)) return NULL;
  }
  cn_nt_expr *e = new_expr(p, CN_NT_TUPLE, first->pos);
  if (!e) return NULL;
  e->u.items.n = items.n;
  e->u.items.items = items.v;
  return finish(p, e, first->pos);
}

static cn_nt_expr *parse_expr(parser *p) {
  if (!enter(p)) return NULL;
  cn_nt_expr *e = expr_body(p);
  p->depth--;
  return e;
}

/* ---- %cd ------------------------------------------------------------------------------------ */

static cn_nt_cd *parse_cd_seq(parser *p);
static cn_nt_cd *parse_cd_item(parser *p);

/* The binary primitive whose infix operator is `op` (ops.def). */
static bool infix_primitive(const char *op, cn_op *out) {
  for (int i = 0; i < CN_OP_COUNT; i++) {
    const char *infix = cn_op_infix((cn_op)i);
    if (cn_op_arity((cn_op)i) == 2 && infix && strcmp(infix, op) == 0) {
      *out = (cn_op)i;
      return true;
    }
  }
  return false;
}

/* syntax-extensions-cd-op "The syntax for %cd": the RHS is a primitive applied by its infix
 * operator, curried or uncurried by name; anything else is an expression copied with the identity.
 * */
static bool classify_rhs(parser *p, cn_nt_cd *c, cn_nt_expr *rhs) {
  cn_op op;
  if (rhs->kind == CN_NT_BINOP && infix_primitive(rhs->u.binop.op, &op)) {
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
        error(p, args[i].pos, "primitive '%s' takes no labeled argument '~%s'", name,
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
      error(p, rhs->pos, "primitive '%s' takes %d operand%s, got a tuple of %d", name, arity,
            arity == 1 ? "" : "s", tuple->u.items.n);
    else
      error(p, rhs->pos, "primitive '%s' takes %d operand%s, got %d", name, arity,
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
  if (!starts_arg(p)) {
    expected(p, "an assignment (as in c =:+ a * b)");
    return NULL;
  }
  cn_nt_expr *lhs = parse_arg(p);
  if (!lhs) return NULL;
  const cn_nt_token *t = peek(p, 0);
  cn_op accum;
  bool clear;
  if (t->kind != NT_TK_OP || !cn_nt_assign_op(t->text, &accum, &clear)) {
    if (t->kind == NT_TK_OP && t->text[0] == '=')
      error(p, pos_of(p, t),
            "unknown assignment operator '%s' (the assignment operators are =: and =op, =:op "
            "for op one of + - * / ** ?/ ?^ || && @^ ^^)",
            t->text);
    else
      expected(p, "an assignment operator (=:, =+, =:+, ...) after the left-hand side");
    return NULL;
  }
  cn_nt_cd *c = new_cd(p, CN_NT_CD_ASSIGN, lhs->pos);
  if (!c) return NULL;
  c->u.assign.lhs = lhs;
  c->u.assign.asgn_op = t->text;
  c->u.assign.op_pos = pos_of(p, t);
  c->u.assign.accum = accum;
  c->u.assign.clear = clear;
  next(p);
  const char *const *saved = p->stop_labels;
  p->stop_labels = assign_labels;
  cn_nt_expr *rhs = parse_binary(p, 1);
  p->stop_labels = saved;
  if (!rhs || !classify_rhs(p, c, rhs)) return NULL;
  vec args = {0};
  while (at_kind(p, NT_TK_LABEL) || at_kind(p, NT_TK_LABEL_COLON)) {
    cn_nt_token label = next(p);
    cn_nt_arg a = {label.text, pos_of(p, &label), NULL};
    if (strcmp(a.label, "logic") != 0 && strcmp(a.label, "projections") != 0) {
      error(p, a.pos,
            "unknown assignment argument '~%s' (an assignment takes ~logic and "
            "~projections)",
            a.label);
      return NULL;
    }
    if (cn_nt_find_arg(args.n, args.v, a.label)) {
      error(p, a.pos, "'~%s' is given twice", a.label);
      return NULL;
    }
    if (label.kind == NT_TK_LABEL_COLON && !(a.value = parse_arg(p))) return NULL;
    if (!push(p, &args, &a, sizeof a)) return NULL;
  }
  c->u.assign.n_args = args.n;
  c->u.assign.args = args.v;
  return finish_cd(p, c);
}

/* ~~( part+ ; body ). */
static cn_nt_cd *parse_block_comment(parser *p) {
  cn_nt_token tilde = next(p);
  cn_nt_pos pos = pos_of(p, &tilde);
  if (!at_kind(p, NT_TK_LPAREN)) {
    expected(p, "'(' after '~~' (a block comment is ~~(\"text\" ...; assignments))");
    return NULL;
  }
  cn_nt_token open = next(p);
  vec parts = {0};
  while (starts_arg(p)) {
    cn_nt_expr *e = parse_arg(p);
    if (!e || !push(p, &parts, &e, sizeof e)) return NULL;
  }
  if (parts.n == 0) {
    expected(p, "the comment's text (strings and tensors) after '~~('");
    return NULL;
  }
  if (!at_kind(p, NT_TK_SEMI)) {
    expected(p, "';' after the comment's text, then the assignments it covers");
    return NULL;
  }
  next(p);
  cn_nt_cd *body = parse_cd_seq(p);
  if (!body || !expect_close(p, NT_TK_RPAREN, ")", pos_of(p, &open), "(")) return NULL;
  cn_nt_cd *c = new_cd(p, CN_NT_CD_COMMENT, pos);
  if (!c) return NULL;
  c->u.comment.n_parts = parts.n;
  c->u.comment.parts = parts.v;
  c->u.comment.body = body;
  return finish_cd(p, c);
}

static cn_nt_cd *cd_item_body(parser *p) {
  cn_nt_pos pos = here(p);
  if (at_kind(p, NT_TK_IF)) {
    next(p);
    cn_nt_cd *c = new_cd(p, CN_NT_CD_IF, pos);
    if (!c || !(c->u.if_.cond = parse_binary(p, 1))) return NULL;
    if (!at_kind(p, NT_TK_THEN)) {
      expected(p, "'then' after the condition");
      return NULL;
    }
    next(p);
    if (!(c->u.if_.then_branch = parse_cd_item(p))) return NULL;
    if (at_kind(p, NT_TK_ELSE)) {
      next(p);
      if (!(c->u.if_.else_branch = parse_cd_item(p))) return NULL;
    }
    return finish_cd(p, c);
  }
  if (at_kind(p, NT_TK_LPAREN)) {
    next(p);
    if (at_kind(p, NT_TK_RPAREN)) {
      next(p);
      return finish_cd(p, new_cd(p, CN_NT_CD_SEQ, pos));
    }
    cn_nt_cd *c = parse_cd_seq(p);
    if (!c || !expect_close(p, NT_TK_RPAREN, ")", pos, "(")) return NULL;
    return c;
  }
  if (at_op(p, "~~")) return parse_block_comment(p);
  return parse_assignment(p);
}

static cn_nt_cd *parse_cd_item(parser *p) {
  if (!enter(p)) return NULL;
  cn_nt_cd *c = cd_item_body(p);
  p->depth--;
  return c;
}

/* Whether a trailing ';' ends the sequence here. */
static bool sequence_ends(parser *p) {
  switch (peek(p, 0)->kind) {
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
  case NT_TK_DONE: return true;
  default: return false;
  }
}

static cn_nt_cd *cd_seq_body(parser *p) {
  cn_nt_cd *first = parse_cd_item(p);
  if (!first || !at_kind(p, NT_TK_SEMI)) return first;
  vec items = {0};
  if (!push(p, &items, &first, sizeof first)) return NULL;
  while (at_kind(p, NT_TK_SEMI)) {
    next(p);
    if (sequence_ends(p)) break;
    cn_nt_cd *c = parse_cd_item(p);
    if (!c || !push(p, &items, &c, sizeof c)) return NULL;
  }
  if (items.n == 1) return first;
  cn_nt_cd *c = new_cd(p, CN_NT_CD_SEQ, first->pos);
  if (!c) return NULL;
  c->u.seq.n = items.n;
  c->u.seq.items = items.v;
  return finish_cd(p, c);
}

static cn_nt_cd *parse_cd_seq(parser *p) {
  if (!enter(p)) return NULL;
  cn_nt_cd *c = cd_seq_body(p);
  p->depth--;
  return c;
}

/* ---- Scripts -------------------------------------------------------------------------------- */

static bool parse_param(parser *p, vec *params) {
  const cn_nt_token *t = peek(p, 0);
  cn_nt_param param = {CN_NT_PARAM_PLAIN, NULL, pos_of(p, t), NULL};
  switch (t->kind) {
  case NT_TK_IDENT: param.name = next(p).text; break;
  case NT_TK_LABEL:
    param.kind = CN_NT_PARAM_LABELED;
    param.name = next(p).text;
    break;
  case NT_TK_OPTLABEL:
    param.kind = CN_NT_PARAM_OPTIONAL;
    param.name = next(p).text;
    break;
  case NT_TK_LABEL_COLON:
  case NT_TK_OPTLABEL_COLON:
    error(p, param.pos, "a labeled parameter is written ~%s or ?%s (no pattern after ':')", t->text,
          t->text);
    return false;
  case NT_TK_QUESTION: {
    cn_nt_token q = next(p);
    if (!at_kind(p, NT_TK_LPAREN)) {
      expected(p, "'(' after '?' (as in ?(momentum = 0.0))");
      return false;
    }
    cn_nt_token open = next(p);
    if (!at_kind(p, NT_TK_IDENT)) {
      expected(p, "a parameter name in ?(name = default)");
      return false;
    }
    param.kind = CN_NT_PARAM_OPTIONAL;
    param.name = next(p).text;
    param.pos = pos_of(p, &q);
    if (!expect_equal(p, "and a default value in ?(name = default)") ||
        !(param.default_value = parse_expr(p)) ||
        !expect_close(p, NT_TK_RPAREN, ")", pos_of(p, &open), "("))
      return false;
    break;
  }
  case NT_TK_LPAREN:
    if (peek(p, 1)->kind == NT_TK_RPAREN) {
      next(p);
      next(p);
      param.kind = CN_NT_PARAM_UNIT;
      break;
    }
    /* fall through */
  default: expected(p, "a parameter or '='"); return false;
  }
  if (params->n == MAX_NAMES) {
    error(p, param.pos, "too many parameters (at most %d)", MAX_NAMES);
    return false;
  }
  for (int i = 0; param.name && strcmp(param.name, "_") != 0 && i < params->n; i++) {
    const char *other = ((cn_nt_param *)params->v)[i].name;
    if (other && strcmp(other, param.name) == 0) {
      error(p, param.pos, "parameter '%s' is given twice", param.name);
      return false;
    }
  }
  return push(p, params, &param, sizeof param);
}

/* let (a, b, ...) = e, or without the parentheses: binds the items of a tuple. */
static bool parse_tuple_let(parser *p, cn_nt_item *it, bool parens) {
  cn_nt_pos open = here(p);
  if (parens) next(p);
  if (it->u.let.ext != CN_NT_LET_PLAIN) {
    error(p, open, "a tuple pattern binds with a plain let (not let%%op or let%%cd)");
    return false;
  }
  vec names = {0};
  do {
    if (names.n > 0) next(p); /* the ',' */
    const cn_nt_token *t = peek(p, 0);
    if (t->kind != NT_TK_IDENT) {
      expected(p, "a name in the tuple pattern");
      return false;
    }
    if (names.n == MAX_NAMES) {
      error(p, pos_of(p, t), "too many names in a pattern (at most %d)", MAX_NAMES);
      return false;
    }
    for (int i = 0; strcmp(t->text, "_") != 0 && i < names.n; i++)
      if (strcmp(((const char **)names.v)[i], t->text) == 0) {
        error(p, pos_of(p, t), "'%s' is bound twice in the pattern", t->text);
        return false;
      }
    if (names.n == 0) it->u.let.name_pos = pos_of(p, t);
    const char *name = next(p).text;
    if (!push(p, &names, &name, sizeof name)) return false;
  } while (at_kind(p, NT_TK_COMMA));
  if (names.n < 2) {
    expected(p, "',' and another name (a tuple pattern has at least two)");
    return false;
  }
  if (parens && !expect_close(p, NT_TK_RPAREN, ")", open, "(")) return false;
  it->u.let.n_names = names.n;
  it->u.let.names = names.v;
  return expect_equal(p, "after the pattern") && (it->u.let.expr = parse_expr(p)) != NULL;
}

/* After `let%tile NAME PARAMS =`: the body, read raw and parsed by src/tile (its own language),
 * so that a syntax error there is a parse error of the script. Nothing was lexed past the '=', so
 * the lexer stands right after it. */
static bool parse_tile_body(parser *p, cn_nt_item *it, cn_nt_token let) {
  if (it->u.let.n_params == 0) {
    error(p, pos_of(p, &let), "a Tile function takes parameters (its tensors and dims)");
    return false;
  }
  for (int i = 0; i < it->u.let.n_params; i++)
    if (it->u.let.params[i].kind != CN_NT_PARAM_PLAIN) {
      error(p, it->u.let.params[i].pos,
            "a Tile function's parameters are plain names (tensors or integer dims)");
      return false;
    }
  /* Script names may carry primes (x'); Tile names are C-like identifiers. */
  if (strchr(it->u.let.name, '\'')) {
    error(p, it->u.let.name_pos, "a Tile function's name '%s' cannot contain a prime (')",
          it->u.let.name);
    return false;
  }
  for (int i = 0; i < it->u.let.n_params; i++) {
    if (strchr(it->u.let.params[i].name, '\'')) {
      error(p, it->u.let.params[i].pos, "a Tile parameter name '%s' cannot contain a prime (')",
            it->u.let.params[i].name);
      return false;
    }
    /* Tile names its tensors by parameter: a repeated one (even `_`) would be ambiguous there */
    for (int j = 0; j < i; j++)
      if (strcmp(it->u.let.params[i].name, it->u.let.params[j].name) == 0) {
        error(p, it->u.let.params[i].pos, "the Tile parameter '%s' is repeated",
              it->u.let.params[i].name);
        return false;
      }
  }
  CN_ASSERT(p->count == 0);
  int line, col;
  if (!cn_nt_lex_block(&p->lx, &it->u.let.tile, &line, &col)) {
    p->failed = true;
    return false;
  }
  it->u.let.tile_pos = (cn_nt_pos){p->src, line, col};
  const char **names = cn_alloc(p->ctx, sizeof *names * (size_t)it->u.let.n_params);
  if (names)
    for (int k = 0; k < it->u.let.n_params; k++) names[k] = it->u.let.params[k].name;
  if (!names ||
      !(it->u.let.tile_fn = cn_tile_fn_create(p->ctx, it->u.let.name, it->u.let.n_params, names,
                                              it->u.let.tile, p->src->file, line, col)))
    p->failed = true;
  return !p->failed;
}

static bool parse_let_item(parser *p, cn_nt_item *it) {
  cn_nt_token let = next(p);
  it->u.let.ext = CN_NT_LET_PLAIN;
  it->u.let.config_param = -1;
  if (at_op(p, "%")) {
    cn_nt_token pct = next(p);
    const cn_nt_token *t = peek(p, 0);
    bool adjacent = pct.offset == let.offset + 3 && t->offset == pct.offset + 1;
    if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "op") == 0)
      it->u.let.ext = CN_NT_LET_OP;
    else if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "cd") == 0)
      it->u.let.ext = CN_NT_LET_CD;
    else if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "tile") == 0)
      it->u.let.ext = CN_NT_LET_TILE;
    else {
      error(p, pos_of(p, &pct),
            "unknown extension: write let%%op, let%%cd or let%%tile, without spaces");
      return false;
    }
    next(p);
  }
  const cn_nt_token *t = peek(p, 0);
  bool parens = t->kind == NT_TK_LPAREN;
  if (parens || (t->kind == NT_TK_IDENT && peek(p, 1)->kind == NT_TK_COMMA))
    return parse_tuple_let(p, it, parens);
  if (t->kind != NT_TK_IDENT) {
    expected(p, "a name after 'let'");
    return false;
  }
  it->u.let.name = t->text;
  it->u.let.name_pos = pos_of(p, t);
  next(p);
  vec params = {0};
  while (!p->failed && !(at_kind(p, NT_TK_OP) && peek(p, 0)->text[0] == '='))
    if (!parse_param(p, &params)) return false;
  if (!expect_equal(p, "after the name and parameters")) return false;
  cn_nt_param *ps = params.v;
  if (params.n > 0 && it->u.let.ext == CN_NT_LET_PLAIN) {
    error(p, ps[0].pos, "a function needs let%%op (or let%%cd for a routine)");
    return false;
  }
  if (params.n > 0 && strcmp(it->u.let.name, "_") == 0) {
    error(p, ps[0].pos, "a wildcard binding 'let _' takes no parameters");
    return false;
  }
  it->u.let.n_params = params.n;
  it->u.let.params = ps;
  for (int i = 0; i < params.n; i++)
    if (ps[i].kind == CN_NT_PARAM_LABELED && strcmp(ps[i].name, "config") == 0)
      it->u.let.config_param = i;
  if (it->u.let.ext == CN_NT_LET_CD) return (it->u.let.cd = parse_cd_seq(p)) != NULL;
  if (it->u.let.ext == CN_NT_LET_TILE) return parse_tile_body(p, it, let);
  return (it->u.let.expr = parse_expr(p)) != NULL;
}

static bool parse_sgd(parser *p, cn_nt_item *it) {
  const char *const *saved = p->stop_labels;
  p->stop_labels = sgd_labels;
  it->u.sgd.expr = parse_binary(p, 1);
  p->stop_labels = saved;
  if (!it->u.sgd.expr) return false;
  while (at_kind(p, NT_TK_LABEL) || at_kind(p, NT_TK_LABEL_COLON)) {
    cn_nt_token label = next(p);
    cn_nt_pos pos = pos_of(p, &label);
    cn_nt_expr **slot = strcmp(label.text, "learning_rate") == 0  ? &it->u.sgd.learning_rate
                        : strcmp(label.text, "momentum") == 0     ? &it->u.sgd.momentum
                        : strcmp(label.text, "weight_decay") == 0 ? &it->u.sgd.weight_decay
                        : strcmp(label.text, "nesterov") == 0     ? &it->u.sgd.nesterov
                                                                  : NULL;
    if (!slot) {
      error(p, pos,
            "unknown sgd argument '~%s' (sgd takes ~learning_rate, ~momentum, "
            "~weight_decay and ~nesterov)",
            label.text);
      return false;
    }
    if (*slot) {
      error(p, pos, "'~%s' is given twice", label.text);
      return false;
    }
    if (label.kind != NT_TK_LABEL_COLON) {
      error(p, pos, "'~%s' needs a value: ~%s:VALUE", label.text, label.text);
      return false;
    }
    if (!(*slot = parse_arg(p))) return false;
  }
  if (!it->u.sgd.learning_rate) {
    error(p, it->pos, "sgd needs ~learning_rate:VALUE");
    return false;
  }
  return true;
}

static bool parse_item(parser *p, cn_nt_item *it);
static void check_item_end(parser *p, const cn_nt_item *it);

/* for NAME = e to e do item* done. */
static bool parse_for(parser *p, cn_nt_item *it) {
  if (p->loops == CN_NT_MAX_LOOP_DEPTH) {
    error(p, it->pos, "for loops nested too deeply (more than %d)", CN_NT_MAX_LOOP_DEPTH);
    return false;
  }
  next(p);
  const cn_nt_token *t = peek(p, 0);
  if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
    expected(p, "the loop's index name after 'for'");
    return false;
  }
  it->u.for_.name = t->text;
  it->u.for_.name_pos = pos_of(p, t);
  next(p);
  if (!expect_equal(p, "after the loop's index name") || !(it->u.for_.from = parse_expr(p)))
    return false;
  if (!at_kind(p, NT_TK_TO)) {
    expected(p, "'to' after the loop's first value");
    return false;
  }
  next(p);
  if (!(it->u.for_.to = parse_expr(p))) return false;
  if (!at_kind(p, NT_TK_DO)) {
    expected(p, "'do' after the loop's last value");
    return false;
  }
  next(p);
  p->loops++;
  vec items = {0};
  while (!p->failed && !at_kind(p, NT_TK_DONE)) {
    if (at_kind(p, NT_TK_SEMISEMI)) {
      next(p);
      continue;
    }
    if (at_kind(p, NT_TK_EOF)) {
      char what[100];
      snprintf(what, sizeof what, "'done' to close the 'for' at line %d, column %d", it->pos.line,
               it->pos.col);
      expected(p, what);
      break;
    }
    cn_nt_item body;
    memset(&body, 0, sizeof body);
    if (!parse_item(p, &body)) break;
    check_item_end(p, &body);
    if (!p->failed) push(p, &items, &body, sizeof body);
  }
  p->loops--;
  if (p->failed) return false;
  next(p);
  it->u.for_.n_items = items.n;
  it->u.for_.items = items.v;
  return true;
}

static bool parse_item(parser *p, cn_nt_item *it) {
  const cn_nt_token *t = peek(p, 0);
  it->pos = pos_of(p, t);
  if (p->loops > 0 && (t->kind == NT_TK_LET || t->kind == NT_TK_SET_SEED)) {
    error(p, it->pos,
          "a loop body holds print, backprop, run, sgd and for statements: bind names and set "
          "the seed before the loop");
    return false;
  }
  switch (t->kind) {
  case NT_TK_FOR: it->kind = CN_NT_ITEM_FOR; return parse_for(p, it);
  case NT_TK_LET: it->kind = CN_NT_ITEM_LET; return parse_let_item(p, it);
  case NT_TK_PRINT:
  case NT_TK_BACKPROP:
    it->kind = t->kind == NT_TK_PRINT ? CN_NT_ITEM_PRINT : CN_NT_ITEM_BACKPROP;
    next(p);
    return (it->u.expr = parse_expr(p)) != NULL;
  case NT_TK_RUN:
    it->kind = CN_NT_ITEM_RUN;
    next(p);
    return (it->u.expr = parse_app(p)) != NULL;
  case NT_TK_SGD:
    it->kind = CN_NT_ITEM_SGD;
    next(p);
    return parse_sgd(p, it);
  case NT_TK_SET_SEED:
    it->kind = CN_NT_ITEM_SET_SEED;
    next(p);
    if (!at_kind(p, NT_TK_INT)) {
      expected(p, "a non-negative integer literal after set_seed");
      return false;
    }
    it->u.seed = next(p).ival;
    return true;
  default:
    expected(p, "a statement (let, print, backprop, run, sgd, set_seed or for)");
    return false;
  }
}

static bool starts_item(parser *p) {
  switch (peek(p, 0)->kind) {
  case NT_TK_EOF:
  case NT_TK_SEMISEMI:
  case NT_TK_LET:
  case NT_TK_PRINT:
  case NT_TK_BACKPROP:
  case NT_TK_RUN:
  case NT_TK_SGD:
  case NT_TK_SET_SEED:
  case NT_TK_FOR: return true;
  case NT_TK_DONE: return p->loops > 0;
  default: return false;
  }
}

/* After a statement: the next one, ';;' or the end. */
static void check_item_end(parser *p, const cn_nt_item *it) {
  if (p->failed || starts_item(p)) return;
  const cn_nt_token *t = peek(p, 0);
  char buf[80];
  const char *hint = "";
  if (t->kind == NT_TK_IN)
    hint = " (a top-level let has no 'in': its binding holds for the rest of the script)";
  else if (t->kind == NT_TK_OP && cn_nt_assign_op(t->text, NULL, NULL))
    hint = it->kind == CN_NT_ITEM_LET && it->u.let.ext == CN_NT_LET_CD
               ? " (an assignment has one assignment operator; separate assignments with ';')"
               : " (assignments belong in let%cd)";
  error(p, pos_of(p, t), "unexpected %s after the end of the statement%s",
        describe(p, t, buf, sizeof buf), hint);
}

static bool start(parser *p, cn_ctx *ctx, const char *file, const char *text) {
  memset(p, 0, sizeof *p);
  p->ctx = ctx;
  if (!text) {
    cn_fail(ctx, CN_ERR_INVALID, "notation: no text to parse");
    return false;
  }
  cn_nt_source *src = cn_alloc(ctx, sizeof *src);
  if (!src || !(src->file = cn_strdup(ctx, file ? file : "<input>")) ||
      !(src->text = cn_strdup(ctx, text)))
    return false;
  p->src = src;
  p->eof.kind = NT_TK_EOF;
  cn_nt_lexer_init(&p->lx, ctx, src);
  return true;
}

static bool at_end(parser *p, const char *what) {
  if (p->failed) return false;
  if (at_kind(p, NT_TK_EOF)) return true;
  char buf[80];
  const cn_nt_token *t = peek(p, 0);
  error(p, pos_of(p, t), "unexpected %s after the %s", describe(p, t, buf, sizeof buf), what);
  return false;
}

cn_nt_program *cn_nt_parse_program(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!start(&p, ctx, file, text)) return NULL;
  vec items = {0};
  while (!p.failed) {
    while (at_kind(&p, NT_TK_SEMISEMI)) next(&p);
    if (at_kind(&p, NT_TK_EOF)) break;
    cn_nt_item it;
    memset(&it, 0, sizeof it);
    if (!parse_item(&p, &it)) break;
    check_item_end(&p, &it);
    if (!p.failed) push(&p, &items, &it, sizeof it);
  }
  if (p.failed) return NULL;
  cn_nt_program *prog = cn_alloc(ctx, sizeof *prog);
  if (!prog) return NULL;
  prog->src = p.src;
  prog->n_items = items.n;
  prog->items = items.v;
  return prog;
}

cn_nt_expr *cn_nt_parse_expr(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!start(&p, ctx, file, text)) return NULL;
  cn_nt_expr *e = parse_expr(&p);
  return e && at_end(&p, "expression") ? e : NULL;
}

cn_nt_cd *cn_nt_parse_cd(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!start(&p, ctx, file, text)) return NULL;
  cn_nt_cd *c = parse_cd_seq(&p);
  return c && at_end(&p, "assignments") ? c : NULL;
}
