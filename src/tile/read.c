/* The Tile reader (tile-edsl): positioned messages, tokens, expression trees and contraction
 * statements, shared by cn_tile (one statement, compile.c) and Tile functions (fn_read.c).
 *
 * Invariants: every failure is a cn_tile_fail_at with the position, and only the first one of a
 * text is reported (src->failed); an allocation failure sets src->failed with the context's
 * message as the report. Trees live in the context arena and their names are (pointer, length)
 * views into the text, never copies. */
#include "tile/tile.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Positioned messages ---- */

void cn_tile_fail_at(cn_tile_src *src, size_t at, const char *fmt, ...) {
  if (src->failed) return;
  src->failed = true;
  /* A body in a script is quoted from its file position; a statement on its own line. */
  cn_source text = {src->file, src->file ? NULL : "tile", src->text, src->file ? src->line : 1,
                    src->file ? src->col : 1};
  int line = 1, col = (int)at + 1;
  if (src->file) cn_source_locate(&text, at, &line, &col);
  va_list ap;
  va_start(ap, fmt);
  cn_fail_at_v(src->ctx, &text, line, col, fmt, ap);
  va_end(ap);
}

/* ---- Tokens ---- */

static const char *const two_char_ops[] = {"//", "==", "!=", "<=", ">=", "+=", "*="};
static const char one_char_ops[] = "()[],:;.+-*/<>=";

/* False on an unterminated block comment (C++ flavor). */
static bool skip_blanks(cn_tile_reader *r) {
  const char *t = r->src->text;
  while (r->pos < r->end) {
    char c = t[r->pos];
    if (isspace((unsigned char)c))
      r->pos++;
    else if (c == '\\' && r->pos + 1 < r->end && (t[r->pos + 1] == '\n' || t[r->pos + 1] == '\r'))
      r->pos += 2;
    else if (c == '#' && !r->src->cpp)
      while (r->pos < r->end && t[r->pos] != '\n') r->pos++;
    else if (r->src->cpp && c == '/' && r->pos + 1 < r->end && t[r->pos + 1] == '/')
      while (r->pos < r->end && t[r->pos] != '\n') r->pos++;
    else if (r->src->cpp && c == '/' && r->pos + 1 < r->end && t[r->pos + 1] == '*') {
      const char *close = strstr(t + r->pos + 2, "*/");
      if (!close || (size_t)(close - t) + 2 > r->end) {
        cn_tile_fail_at(r->src, r->pos, "unterminated comment");
        return false;
      }
      r->pos = (size_t)(close - t) + 2;
    } else
      return true;
  }
  return true;
}

bool cn_tile_advance(cn_tile_reader *r) {
  if (r->src->failed || !skip_blanks(r)) return false;
  const char *t = r->src->text;
  cn_tile_tok *k = &r->tok;
  *k = (cn_tile_tok){.kind = CN_TILE_TOK_END, .at = r->pos};
  if (r->pos >= r->end) return true;
  char c = t[r->pos];
  size_t at = r->pos;
  if (isalpha((unsigned char)c) || c == '_') {
    while (r->pos < r->end && (isalnum((unsigned char)t[r->pos]) || t[r->pos] == '_')) r->pos++;
    k->kind = CN_TILE_TOK_NAME;
  } else if (isdigit((unsigned char)c)) {
    while (r->pos < r->end && isdigit((unsigned char)t[r->pos])) {
      int d = t[r->pos++] - '0';
      if (__builtin_mul_overflow(k->ival, 10, &k->ival) ||
          __builtin_add_overflow(k->ival, d, &k->ival)) {
        cn_tile_fail_at(r->src, at, "integer too large");
        return false;
      }
    }
    k->kind = CN_TILE_TOK_INT;
    size_t p = r->pos;
    bool frac = p < r->end && t[p] == '.' && !(p + 1 < r->end && isalpha((unsigned char)t[p + 1]));
    if (frac) p++;
    while (frac && p < r->end && isdigit((unsigned char)t[p])) p++;
    bool expo = p < r->end && (t[p] == 'e' || t[p] == 'E');
    if (expo) {
      size_t q = p + 1;
      if (q < r->end && (t[q] == '+' || t[q] == '-')) q++;
      expo = q < r->end && isdigit((unsigned char)t[q]);
      while (expo && q < r->end && isdigit((unsigned char)t[q])) q++;
      if (expo) p = q;
    }
    if (frac || expo) {
      k->kind = CN_TILE_TOK_FLOAT;
      r->pos = p;
    }
    k->fval = (double)k->ival;
    if (k->kind == CN_TILE_TOK_FLOAT) {
      /* the token is the decimal form strtod reads, so strtod stops where the token ends */
      char *end;
      k->fval = strtod(t + at, &end);
      CN_ASSERT(end == t + r->pos);
      if (isinf(k->fval)) {
        cn_tile_fail_at(r->src, at, "number too large (beyond the largest double)");
        return false;
      }
    }
  } else {
    k->kind = CN_TILE_TOK_OP;
    size_t n = 0;
    for (size_t i = 0; i < sizeof two_char_ops / sizeof *two_char_ops && !n; i++)
      if (r->pos + 1 < r->end && strncmp(t + r->pos, two_char_ops[i], 2) == 0) n = 2;
    if (!n && (strchr(one_char_ops, c) || (r->src->cpp && strchr("{}&", c)))) n = 1;
    if (!n) {
      if (isprint((unsigned char)c))
        cn_tile_fail_at(r->src, at, "unexpected character '%c'", c);
      else
        cn_tile_fail_at(r->src, at, "unexpected byte 0x%02x", (unsigned char)c);
      return false;
    }
    r->pos += n;
  }
  k->len = r->pos - at;
  return true;
}

bool cn_tile_reader_init(cn_tile_reader *r, cn_tile_src *src, size_t begin, size_t end) {
  *r = (cn_tile_reader){.src = src, .pos = begin, .end = end};
  return cn_tile_advance(r);
}

bool cn_tile_is(const cn_tile_reader *r, const char *s) {
  const cn_tile_tok *k = &r->tok;
  return (k->kind == CN_TILE_TOK_OP || k->kind == CN_TILE_TOK_NAME) && k->len == strlen(s) &&
         strncmp(r->src->text + k->at, s, k->len) == 0;
}

bool cn_tile_accept(cn_tile_reader *r, const char *op) {
  return r->tok.kind == CN_TILE_TOK_OP && cn_tile_is(r, op) && cn_tile_advance(r);
}

bool cn_tile_unexpected(cn_tile_reader *r, const char *wanted) {
  if (r->tok.kind == CN_TILE_TOK_END)
    cn_tile_fail_at(r->src, r->tok.at, "unexpected end of statement, expected %s", wanted);
  else
    cn_tile_fail_at(r->src, r->tok.at, "unexpected '%.*s', expected %s", (int)r->tok.len,
                    r->src->text + r->tok.at, wanted);
  return false;
}

bool cn_tile_expect(cn_tile_reader *r, const char *op, const char *wanted) {
  return cn_tile_accept(r, op) || (!r->src->failed && cn_tile_unexpected(r, wanted));
}

/* ---- Expressions ---- */

static cn_tile_expr *new_expr(cn_tile_reader *r, cn_tile_expr_kind kind, size_t at, int n_args) {
  cn_tile_expr *e = cn_alloc(r->src->ctx, sizeof *e);
  if (!e || (n_args && !(e->args = cn_alloc(r->src->ctx, sizeof *e->args * (size_t)n_args)))) {
    r->src->failed = true; /* the allocation failure is the message */
    return NULL;
  }
  e->kind = kind;
  e->at = at;
  e->n_args = n_args;
  return e;
}

static cn_tile_expr *binary(cn_tile_reader *r, cn_tile_binop op, size_t at, cn_tile_expr *a,
                            cn_tile_expr *b) {
  cn_tile_expr *e = a && b ? new_expr(r, CN_TILE_EXPR_BINARY, at, 2) : NULL;
  if (!e) return NULL;
  e->op = op;
  e->args[0] = a;
  e->args[1] = b;
  return e;
}

static cn_tile_expr *parse_unary(cn_tile_reader *r);

static cn_tile_expr *parse_call(cn_tile_reader *r, const cn_tile_tok *name) {
  cn_tile_expr *args[8];
  int n = 0;
  if (!cn_tile_accept(r, ")"))
    for (;;) {
      if (n == 8) {
        cn_tile_fail_at(r->src, r->tok.at, "more than 8 arguments");
        return NULL;
      }
      if (!(args[n++] = cn_tile_parse_expr(r, true))) return NULL;
      if (cn_tile_accept(r, ")")) break;
      if (!cn_tile_expect(r, ",", "',' or ')'")) return NULL;
    }
  cn_tile_expr *e = new_expr(r, CN_TILE_EXPR_CALL, name->at, n);
  if (!e) return NULL;
  e->name = r->src->text + name->at;
  e->len = name->len;
  /* a call without arguments has no args array (NULL), which memcpy may not be given */
  if (n) memcpy(e->args, args, sizeof *args * (size_t)n);
  return e;
}

static cn_tile_expr *parse_primary(cn_tile_reader *r) {
  cn_tile_tok k = r->tok;
  if (k.kind == CN_TILE_TOK_INT || k.kind == CN_TILE_TOK_FLOAT || k.kind == CN_TILE_TOK_NAME) {
    if (!cn_tile_advance(r)) return NULL;
    if (k.kind == CN_TILE_TOK_NAME && cn_tile_accept(r, "(")) return parse_call(r, &k);
    cn_tile_expr *e = new_expr(r,
                               k.kind == CN_TILE_TOK_INT     ? CN_TILE_EXPR_INT
                               : k.kind == CN_TILE_TOK_FLOAT ? CN_TILE_EXPR_FLOAT
                                                             : CN_TILE_EXPR_NAME,
                               k.at, 0);
    if (!e) return NULL;
    e->ival = k.ival;
    e->fval = k.fval;
    e->name = r->src->text + k.at;
    e->len = k.len;
    return e;
  }
  if (cn_tile_accept(r, "(")) {
    cn_tile_expr *e = cn_tile_parse_expr(r, true);
    return e && cn_tile_expect(r, ")", "')'") ? e : NULL;
  }
  if (!r->src->failed) cn_tile_unexpected(r, "an integer, a name or '('");
  return NULL;
}

static cn_tile_expr *parse_unary(cn_tile_reader *r) {
  size_t at = r->tok.at;
  if (!cn_tile_accept(r, "-")) return r->src->failed ? NULL : parse_primary(r);
  cn_tile_expr *a = parse_unary(r), *e = a ? new_expr(r, CN_TILE_EXPR_NEG, at, 1) : NULL;
  if (e) e->args[0] = a;
  return e;
}

static cn_tile_expr *parse_term(cn_tile_reader *r) {
  cn_tile_expr *e = parse_unary(r);
  while (e) {
    size_t at = r->tok.at;
    cn_tile_binop op = cn_tile_accept(r, "*")    ? CN_TILE_BIN_MUL
                       : cn_tile_accept(r, "/")  ? CN_TILE_BIN_DIV
                       : cn_tile_accept(r, "//") ? CN_TILE_BIN_FLOORDIV
                                                 : CN_TILE_BIN_EQ;
    if (op == CN_TILE_BIN_EQ) return r->src->failed ? NULL : e;
    e = binary(r, op, at, e, parse_unary(r));
  }
  return NULL;
}

static cn_tile_expr *parse_additive(cn_tile_reader *r) {
  cn_tile_expr *e = parse_term(r);
  while (e) {
    size_t at = r->tok.at;
    cn_tile_binop op = cn_tile_accept(r, "+")   ? CN_TILE_BIN_ADD
                       : cn_tile_accept(r, "-") ? CN_TILE_BIN_SUB
                                                : -1;
    if ((int)op < 0) return r->src->failed ? NULL : e;
    e = binary(r, op, at, e, parse_term(r));
  }
  return NULL;
}

cn_tile_expr *cn_tile_parse_expr(cn_tile_reader *r, bool comparisons) {
  static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">="};
  cn_tile_expr *e = parse_additive(r);
  if (!e || !comparisons) return e;
  for (int i = 0; i < 6; i++) {
    size_t at = r->tok.at;
    if (cn_tile_accept(r, cmp[i]))
      return binary(r, (cn_tile_binop)(CN_TILE_BIN_EQ + i), at, e, parse_additive(r));
  }
  return r->src->failed ? NULL : e;
}

size_t cn_tile_expr_start(const cn_tile_expr *e) {
  return e->kind == CN_TILE_EXPR_BINARY ? cn_tile_expr_start(e->args[0]) : e->at;
}

/* ---- Contraction statements ---- */

/* '[' or '(' opening a list of indices: the closing bracket, or NULL after an error. */
static const char *open_bracket(cn_tile_reader *r) {
  if (cn_tile_accept(r, "[")) return "]";
  if (cn_tile_accept(r, "(")) return ")";
  if (!r->src->failed) cn_tile_unexpected(r, "'[' or '('");
  return NULL;
}

/* `()` inside brackets: an empty index list (the seed's `O[()]`). */
static bool accept_unit(cn_tile_reader *r) {
  cn_tile_reader save = *r;
  if (cn_tile_accept(r, "(") && cn_tile_accept(r, ")")) return true;
  *r = save;
  return false;
}

static bool parse_access(cn_tile_reader *r, cn_tile_access *a) {
  if (r->tok.kind != CN_TILE_TOK_NAME) return cn_tile_unexpected(r, "a tensor name");
  a->at = r->tok.at;
  a->name = r->src->text + r->tok.at;
  a->len = r->tok.len;
  if (!cn_tile_advance(r)) return false;
  const char *close = open_bracket(r);
  if (!close) return false;
  if (!cn_tile_is(r, close) && !accept_unit(r))
    for (;;) {
      if (a->n == CN_MAX_RANK) {
        cn_tile_fail_at(r->src, r->tok.at, "too many indices");
        return false;
      }
      if (!(a->idx[a->n++] = cn_tile_parse_expr(r, false))) return false;
      if (!cn_tile_accept(r, ",")) break;
    }
  return cn_tile_expect(r, close, *close == ']' ? "',' or ']'" : "',' or ')'");
}

bool cn_tile_parse_constraint(cn_tile_reader *r, cn_tile_constraint *out) {
  out->at = r->tok.at;
  return (out->poly = cn_tile_parse_expr(r, false)) &&
         cn_tile_expect(r, "<", "'<' (a constraint is `poly < bound`)") &&
         (out->bound = cn_tile_parse_expr(r, false));
}

/* The output's axes: indices with per-axis sizes, or all the sizes after all the indices. */
static bool parse_output(cn_tile_reader *r, cn_tile_contraction *c) {
  cn_tile_access *o = &c->out;
  if (r->tok.kind != CN_TILE_TOK_NAME) return cn_tile_unexpected(r, "the output tensor's name");
  o->at = r->tok.at;
  o->name = r->src->text + r->tok.at;
  o->len = r->tok.len;
  if (!cn_tile_advance(r)) return false;
  const char *close = open_bracket(r);
  if (!close) return false;
  if (!cn_tile_is(r, close) && !accept_unit(r))
    for (;;) {
      if (o->n == CN_MAX_RANK) {
        cn_tile_fail_at(r->src, r->tok.at, "too many output axes");
        return false;
      }
      if (!(o->idx[o->n] = cn_tile_parse_expr(r, false))) return false;
      if (cn_tile_accept(r, ":")) {
        c->sized = true;
        if (o->n > 0 && !c->sizes[0]) { /* `C[i, j : M, N]` */
          for (int x = 0; x <= o->n; x++)
            if ((x > 0 && !cn_tile_expect(r, ",", "',' and the size of the next axis")) ||
                !(c->sizes[x] = cn_tile_parse_expr(r, false)))
              return false;
          o->n++;
          break;
        }
        if (!(c->sizes[o->n] = cn_tile_parse_expr(r, false))) return false;
      }
      o->n++;
      if (!cn_tile_accept(r, ",")) break;
    }
  return cn_tile_expect(r, close, *close == ']' ? "',' or ']'" : "',' or ')'");
}

bool cn_tile_parse_contraction(cn_tile_reader *r, cn_tile_contraction *c) {
  memset(c, 0, sizeof *c);
  if (!parse_output(r, c)) return false;
  static const char *const aggs[] = {"+=", "*=", ">=", "<=", "="};
  static const cn_op accums[] = {CN_OP_ADD, CN_OP_MUL, CN_OP_MAX, CN_OP_MIN, CN_OP_ARG2};
  c->agg_at = r->tok.at;
  int agg = 0;
  while (agg < 5 && !cn_tile_accept(r, aggs[agg])) agg++;
  if (agg == 5) return cn_tile_unexpected(r, "an aggregation '+=', '*=', '>=', '<=' or '='");
  c->accum = accums[agg];

  c->prim = CN_OP_ID;
  cn_tile_reader save = *r;
  if (cn_tile_is(r, "cond") && cn_tile_advance(r) && cn_tile_accept(r, "(")) {
    c->prim = CN_OP_COND;
    for (c->n_acc = 0; c->n_acc < 3; c->n_acc++)
      if ((c->n_acc > 0 && !cn_tile_expect(r, ",", "',' and the next operand of cond")) ||
          !parse_access(r, &c->acc[c->n_acc]))
        return false;
    if (!cn_tile_expect(r, ")", "')' (cond takes three operands)")) return false;
  } else {
    if (r->src->failed) return false;
    *r = save;
    if (!parse_access(r, &c->acc[0])) return false;
    c->n_acc = 1;
    c->prim = cn_tile_accept(r, "*")    ? CN_OP_MUL
              : cn_tile_accept(r, "+")  ? CN_OP_ADD
              : cn_tile_accept(r, "==") ? CN_OP_EQ
                                        : CN_OP_ID;
    if (c->prim != CN_OP_ID && !parse_access(r, &c->acc[c->n_acc++])) return false;
  }
  while (cn_tile_accept(r, ",")) {
    if (c->n_cons == CN_TILE_MAX_CONSTRAINTS) {
      cn_tile_fail_at(r->src, r->tok.at, "more than %d constraints", CN_TILE_MAX_CONSTRAINTS);
      return false;
    }
    if (!cn_tile_parse_constraint(r, &c->cons[c->n_cons++])) return false;
  }
  if (r->src->failed) return false;
  if (r->tok.kind != CN_TILE_TOK_END)
    return cn_tile_unexpected(r, c->prim == CN_OP_ID ? "'*', '+', '==', ',' and a constraint"
                                                     : "',' and a constraint");
  return true;
}
