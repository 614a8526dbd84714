/* The notation's recursive-descent parser, part 1 of 3 (see parser_internal.h): the parser's
 * state, its token window, positioned errors, node construction with the height bound, and the
 * entry points for one %op expression and one %cd sequence.
 *
 * The parser pulls tokens from the lexer through a four-token window, so a lexical error is
 * reported only when the parser reaches it and the first error in text order wins. Every failure
 * goes through ntp_error (or the lexer's, or cn_alloc's CN_ERR_NOMEM) and sets `failed`, after
 * which no message is overwritten and every function returns NULL promptly, so nothing
 * half-built escapes. Invariant: a finished node's height never exceeds CN_NT_MAX_HEIGHT. */
#include "notation/parser_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- Parser state, tokens, errors ----------------------------------------------------------- */

void ntp_error(parser *p, cn_nt_pos pos, const char *fmt, ...) {
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
const cn_nt_token *ntp_peek(parser *p, int k) {
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

cn_nt_token ntp_next(parser *p) {
  cn_nt_token t = *ntp_peek(p, 0);
  if (p->count > 0) {
    p->head = (p->head + 1) % WINDOW;
    p->count--;
  }
  return t;
}

cn_nt_pos ntp_pos_of(const parser *p, const cn_nt_token *t) {
  cn_nt_pos pos = {p->src, t->line, t->col};
  return pos;
}

cn_nt_pos ntp_here(parser *p) {
  return ntp_pos_of(p, ntp_peek(p, 0));
}

bool ntp_at_kind(parser *p, nt_tk_kind kind) {
  return ntp_peek(p, 0)->kind == kind;
}

bool ntp_at_op(parser *p, const char *op) {
  const cn_nt_token *t = ntp_peek(p, 0);
  return t->kind == NT_TK_OP && strcmp(t->text, op) == 0;
}

/* The token as a message names it. */
const char *ntp_describe(parser *p, const cn_nt_token *t, char *buf, size_t size) {
  if (t->kind == NT_TK_EOF) return "end of input";
  if (t->kind == NT_TK_STRING) return "a string";
  const char *s = p->src->text + t->offset;
  int n = t->len > 30 ? 30 : (int)t->len;
  bool word = cn_nt_reserved_word(t->kind) || (t->kind == NT_TK_OP && strcmp(t->text, "mod") == 0);
  snprintf(buf, size, "'%.*s'%s%s", n, s, t->len > 30 ? "..." : "",
           word ? " (a reserved word)" : "");
  return buf;
}

/* "expected WHAT, found TOKEN" at the current token. */
void ntp_expected(parser *p, const char *what) {
  char buf[80];
  const cn_nt_token *t = ntp_peek(p, 0);
  ntp_error(p, ntp_pos_of(p, t), "expected %s, found %s", what,
            ntp_describe(p, t, buf, sizeof buf));
}

/* Consumes the closing bracket `kind` matching the opener at `open`. */
bool ntp_expect_close(parser *p, nt_tk_kind kind, const char *close, cn_nt_pos open,
                      const char *opener) {
  if (ntp_at_kind(p, kind)) {
    ntp_next(p);
    return true;
  }
  char what[120];
  snprintf(what, sizeof what, "'%s' to close the '%s' at line %d, column %d", close, opener,
           open.line, open.col);
  ntp_expected(p, what);
  return false;
}

/* Consumes a lone '='; a longer operator starting with '=' gets a hint, since `x =-1` reads as
 * the operator `=-`. */
bool ntp_expect_equal(parser *p, const char *after) {
  if (ntp_at_op(p, "=")) {
    ntp_next(p);
    return true;
  }
  const cn_nt_token *t = ntp_peek(p, 0);
  if (t->kind == NT_TK_OP && t->text[0] == '=') {
    ntp_error(p, ntp_pos_of(p, t), "'%s' is read as one operator: put a space after '='", t->text);
    return false;
  }
  char what[80];
  snprintf(what, sizeof what, "'=' %s", after);
  ntp_expected(p, what);
  return false;
}

bool ntp_enter(parser *p) {
  if (p->failed) return false;
  if (++p->depth > MAX_DEPTH) {
    ntp_error(p, ntp_here(p), "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return false;
  }
  return true;
}

void *ntp_alloc(parser *p, size_t bytes) {
  void *m = cn_alloc(p->ctx, bytes);
  if (!m) p->failed = true;
  return m;
}

bool ntp_push(parser *p, vec *v, const void *elem, size_t size) {
  if (!cn_arena_grow(p->ctx, &v->v, &v->cap, v->n + 1, size)) {
    p->failed = true;
    return false;
  }
  memcpy((char *)v->v + (size_t)v->n * size, elem, size);
  v->n++;
  return true;
}

/* ---- Node construction ---------------------------------------------------------------------- */

cn_nt_expr *ntp_new_expr(parser *p, cn_nt_expr_kind kind, cn_nt_pos pos) {
  cn_nt_expr *e = ntp_alloc(p, sizeof *e);
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
cn_nt_expr *ntp_finish(parser *p, cn_nt_expr *e, cn_nt_pos at) {
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
  case CN_NT_IF:
    h = max_int(height(e->u.if_.cond), max_int(height(e->u.if_.then_), height(e->u.if_.else_)));
    break;
  }
  e->height = h + 1;
  if (e->height > CN_NT_MAX_HEIGHT) {
    ntp_error(p, at, "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return NULL;
  }
  return e;
}

cn_nt_cd *ntp_new_cd(parser *p, cn_nt_cd_kind kind, cn_nt_pos pos) {
  cn_nt_cd *c = ntp_alloc(p, sizeof *c);
  if (c) {
    c->kind = kind;
    c->pos = pos;
  }
  return c;
}

static int cd_height(const cn_nt_cd *c) {
  return c ? c->height : 0;
}

cn_nt_cd *ntp_finish_cd(parser *p, cn_nt_cd *c) {
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
    ntp_error(p, c->pos, "too deeply nested (more than %d levels)", CN_NT_MAX_HEIGHT);
    return NULL;
  }
  return c;
}
bool ntp_start(parser *p, cn_ctx *ctx, const char *file, const char *text) {
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

bool ntp_at_end(parser *p, const char *what) {
  if (p->failed) return false;
  if (ntp_at_kind(p, NT_TK_EOF)) return true;
  char buf[80];
  const cn_nt_token *t = ntp_peek(p, 0);
  ntp_error(p, ntp_pos_of(p, t), "unexpected %s after the %s", ntp_describe(p, t, buf, sizeof buf),
            what);
  return false;
}

cn_nt_expr *cn_nt_parse_expr(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!ntp_start(&p, ctx, file, text)) return NULL;
  cn_nt_expr *e = ntp_parse_expr(&p);
  return e && ntp_at_end(&p, "expression") ? e : NULL;
}

cn_nt_cd *cn_nt_parse_cd(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!ntp_start(&p, ctx, file, text)) return NULL;
  cn_nt_cd *c = ntp_parse_cd_seq(&p);
  return c && ntp_at_end(&p, "assignments") ? c : NULL;
}