/* Tile contractions (seed 003): positioned messages, the reader and expression parser shared
 * with Tile functions, the contraction parser, and the compilation of one contraction to a
 * ranged, valid-only projections record; cn_tile, the C entry point for one statement.
 *
 * Semantics (seed 003 "Valid Indices"): a set of index values is visited iff every index of every
 * tensor, the output included, is within its bounds and every constraint holds; the record says
 * so with valid_only and the constraints, and zero_unreached gives Tile's initialization
 * (unreached output cells 0, reached ones start from the aggregation's identity). Each variable's
 * range [lo, hi) is derived by interval propagation over those conditions (to a fixpoint); the
 * lowering tightens it again and keeps what stays undecided as guards.
 *
 * Index polynomials are affine combinations of index variables (lower-case names not bound to
 * anything, or names declared as indices) with dims as constants, over a positive denominator:
 * division is exact (seed 003 "Skipping"), so a point is valid only if every index expression,
 * and every constraint's polynomial, is an integer there. Those divisibility conditions are
 * solved together (lattice.h) into a change of variables x = x0 + B*y over all integer y, and the
 * record's iterators are the y, over which every polynomial is an integer one: `O[i/2] += I[i]`
 * iterates i_2 with i = 2*i_2. Sizes and bounds must not mention index variables; between
 * integers (dims), division is floor division.
 *
 * Invariants: every failure is a cn_tile_fail_at with the position (or, for a cn_tile binding,
 * the statement); the first one is kept. Names in trees are (pointer, length) views. */
#include "tile/tile.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tile/lattice.h"

#define MAX_ROUNDS 64

/* ---- Positioned messages ---- */

/* The function-body form: FILE:LINE:COL: WHAT, the line of `at` and a caret under it. */
static void put_positioned(cn_sbuf *sb, const cn_tile_src *src, size_t at, const char *what) {
  const char *t = src->text;
  int line = src->line;
  size_t start = 0;
  for (size_t i = 0; i < at && t[i]; i++)
    if (t[i] == '\n') line++, start = i + 1;
  size_t col = at - start + (start == 0 ? (size_t)src->col : 1);
  cn_sbuf_printf(sb, "%s:%d:%zu: %s\n", src->file, line, col, what);
  /* the body's first line starts at src->col of its line: quote it there, under the caret */
  int indent = start == 0 && src->col > 1 ? src->col - 1 : 0;
  cn_sbuf_printf(sb, "%*s", indent, "");
  size_t end = start + strcspn(t + start, "\n");
  for (size_t i = start; i < end; i++) {
    unsigned char ch = (unsigned char)t[i];
    cn_sbuf_putc(sb, (ch < 0x20 && ch != '\t') || ch == 0x7f ? ' ' : (char)ch);
  }
  cn_sbuf_putc(sb, '\n');
  cn_sbuf_printf(sb, "%*s", indent, "");
  for (size_t i = start; i < at; i++) cn_sbuf_putc(sb, t[i] == '\t' ? '\t' : ' ');
  cn_sbuf_putc(sb, '^');
}

/* The statement form: tile "TEXT": WHAT at column C, the text on one line and a caret. */
static void put_statement(cn_sbuf *sb, const cn_tile_src *src, size_t at, const char *what) {
  const char *t = src->text;
  cn_sbuf_printf(sb, "tile \"%s\": %s at column %zu\n", t, what, at + 1);
  cn_sbuf_quote_caret(sb, t, at);
}

void cn_tile_fail_at(cn_tile_src *src, size_t at, const char *fmt, ...) {
  if (src->failed) return;
  src->failed = true;
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_sbuf sb = {0};
  if (src->file)
    put_positioned(&sb, src, at, what);
  else
    put_statement(&sb, src, at, what);
  /* Without memory for the builder the message still has the problem. */
  if (sb.failed)
    cn_fail(src->ctx, CN_ERR_INVALID, "tile: %s", what);
  else
    cn_fail(src->ctx, CN_ERR_INVALID, "%s", sb.data);
  cn_sbuf_free(&sb);
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
  *k = (cn_tile_tok){.kind = CN_TT_END, .at = r->pos};
  if (r->pos >= r->end) return true;
  char c = t[r->pos];
  size_t at = r->pos;
  if (isalpha((unsigned char)c) || c == '_') {
    while (r->pos < r->end && (isalnum((unsigned char)t[r->pos]) || t[r->pos] == '_')) r->pos++;
    k->kind = CN_TT_NAME;
  } else if (isdigit((unsigned char)c)) {
    while (r->pos < r->end && isdigit((unsigned char)t[r->pos])) {
      int d = t[r->pos++] - '0';
      if (__builtin_mul_overflow(k->ival, 10, &k->ival) ||
          __builtin_add_overflow(k->ival, d, &k->ival)) {
        cn_tile_fail_at(r->src, at, "integer too large");
        return false;
      }
    }
    k->kind = CN_TT_INT;
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
      k->kind = CN_TT_FLOAT;
      r->pos = p;
    }
    k->fval = k->kind == CN_TT_FLOAT ? strtod(t + at, NULL) : (double)k->ival;
  } else {
    k->kind = CN_TT_OP;
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
  return (k->kind == CN_TT_OP || k->kind == CN_TT_NAME) && k->len == strlen(s) &&
         strncmp(r->src->text + k->at, s, k->len) == 0;
}

bool cn_tile_accept(cn_tile_reader *r, const char *op) {
  return r->tok.kind == CN_TT_OP && cn_tile_is(r, op) && cn_tile_advance(r);
}

bool cn_tile_unexpected(cn_tile_reader *r, const char *wanted) {
  if (r->tok.kind == CN_TT_END)
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

static cn_tile_expr *new_expr(cn_tile_reader *r, cn_tx_kind kind, size_t at, int n_args) {
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

static cn_tile_expr *binary(cn_tile_reader *r, cn_tx_binop op, size_t at, cn_tile_expr *a,
                            cn_tile_expr *b) {
  cn_tile_expr *e = a && b ? new_expr(r, CN_TX_BINARY, at, 2) : NULL;
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
  cn_tile_expr *e = new_expr(r, CN_TX_CALL, name->at, n);
  if (!e) return NULL;
  e->name = r->src->text + name->at;
  e->len = name->len;
  /* a call without arguments has no args array (NULL), which memcpy may not be given */
  if (n) memcpy(e->args, args, sizeof *args * (size_t)n);
  return e;
}

static cn_tile_expr *parse_primary(cn_tile_reader *r) {
  cn_tile_tok k = r->tok;
  if (k.kind == CN_TT_INT || k.kind == CN_TT_FLOAT || k.kind == CN_TT_NAME) {
    if (!cn_tile_advance(r)) return NULL;
    if (k.kind == CN_TT_NAME && cn_tile_accept(r, "(")) return parse_call(r, &k);
    cn_tile_expr *e = new_expr(r,
                               k.kind == CN_TT_INT     ? CN_TX_INT
                               : k.kind == CN_TT_FLOAT ? CN_TX_FLOAT
                                                       : CN_TX_NAME,
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
  cn_tile_expr *a = parse_unary(r), *e = a ? new_expr(r, CN_TX_NEG, at, 1) : NULL;
  if (e) e->args[0] = a;
  return e;
}

static cn_tile_expr *parse_term(cn_tile_reader *r) {
  cn_tile_expr *e = parse_unary(r);
  while (e) {
    size_t at = r->tok.at;
    cn_tx_binop op = cn_tile_accept(r, "*")    ? CN_TB_MUL
                     : cn_tile_accept(r, "/")  ? CN_TB_DIV
                     : cn_tile_accept(r, "//") ? CN_TB_FLOORDIV
                                               : CN_TB_EQ;
    if (op == CN_TB_EQ) return r->src->failed ? NULL : e;
    e = binary(r, op, at, e, parse_unary(r));
  }
  return NULL;
}

static cn_tile_expr *parse_additive(cn_tile_reader *r) {
  cn_tile_expr *e = parse_term(r);
  while (e) {
    size_t at = r->tok.at;
    cn_tx_binop op = cn_tile_accept(r, "+") ? CN_TB_ADD : cn_tile_accept(r, "-") ? CN_TB_SUB : -1;
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
      return binary(r, (cn_tx_binop)(CN_TB_EQ + i), at, e, parse_additive(r));
  }
  return r->src->failed ? NULL : e;
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
  if (r->tok.kind != CN_TT_NAME) return cn_tile_unexpected(r, "a tensor name");
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
  if (r->tok.kind != CN_TT_NAME) return cn_tile_unexpected(r, "the output tensor's name");
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
  if (r->tok.kind != CN_TT_END)
    return cn_tile_unexpected(r, c->prim == CN_OP_ID ? "'*', '+', '==', ',' and a constraint"
                                                     : "',' and a constraint");
  return true;
}

/* ---- Scopes ---- */

const cn_tile_name *cn_tile_lookup(const cn_tile_scope *scope, const char *name, size_t len) {
  for (int i = scope->n - 1; i >= 0; i--) {
    const cn_tile_name *e = &scope->names[i];
    if (e->len == len && strncmp(e->name, name, len) == 0) return e;
  }
  return NULL;
}

bool cn_tile_tensor_name(cn_graph *g, cn_tensor *t, cn_tile_name *e) {
  e->kind = CN_TILE_TENSOR;
  e->tensor = t;
  e->rank = cn_shape_dims(g->shapes, t->shape, e->dims, CN_MAX_RANK);
  if (e->rank >= 0) return true;
  if (cn_ctx_status(g->ctx) == CN_ERR_NOMEM) return false;
  cn_ctx_clear_error(g->ctx); /* not an error until the tensor is used */
  return true;
}

bool cn_tile_check_known(cn_tile_src *src, size_t at, const cn_tile_name *e) {
  if (e->rank >= 0) return true;
  cn_tile_fail_at(src, at,
                  "the shape of '%.*s' is not known yet (%s): Tile needs the dims of its tensors "
                  "when a statement is built (give the tensor explicit dims, or build the "
                  "statement after the graph is materialized)",
                  (int)e->len, e->name, cn_tensor_shape(e->tensor));
  return false;
}

/* ---- Rational affine arithmetic with overflow checks ---- */

/* (c . x + off) / den over the statement's index variables x: den >= 1 and the fraction in lowest
 * terms (gcd(c, off, den) = 1), so den == 1 is an integer polynomial. Exact division makes den > 1;
 * only the value of a whole index expression has to be an integer, so `2 * (i / 2)` is `i`. */
typedef struct {
  int64_t c[CN_TILE_MAX_VARS];
  int64_t off;
  int64_t den;
} poly;

static bool has_vars(const poly *a) {
  for (int v = 0; v < CN_TILE_MAX_VARS; v++)
    if (a->c[v]) return true;
  return false;
}

/* Lowest terms: the gcd divides den, so it fits int64 and every division is exact. */
static void poly_reduce(poly *a) {
  uint64_t g = cn_u64_gcd((uint64_t)a->den, cn_i64_magnitude(a->off));
  for (int v = 0; v < CN_TILE_MAX_VARS && g > 1; v++) g = cn_u64_gcd(g, cn_i64_magnitude(a->c[v]));
  if (g <= 1) return;
  for (int v = 0; v < CN_TILE_MAX_VARS; v++) a->c[v] /= (int64_t)g;
  a->off /= (int64_t)g;
  a->den /= (int64_t)g;
}

/* a += sign * b (sign 1 or -1), over the common denominator lcm(a.den, b.den). */
static bool poly_add(poly *a, const poly *b, int64_t sign) {
  int64_t g = (int64_t)cn_u64_gcd((uint64_t)a->den, (uint64_t)b->den);
  int64_t ka = b->den / g, kb = a->den / g * sign, den;
  if (__builtin_mul_overflow(a->den, ka, &den)) return false;
  for (int v = 0; v <= CN_TILE_MAX_VARS; v++) {
    int64_t *x = v < CN_TILE_MAX_VARS ? &a->c[v] : &a->off;
    int64_t y = v < CN_TILE_MAX_VARS ? b->c[v] : b->off, s, t;
    if (__builtin_mul_overflow(*x, ka, &s) || __builtin_mul_overflow(y, kb, &t) ||
        __builtin_add_overflow(s, t, x))
      return false;
  }
  a->den = den;
  poly_reduce(a);
  return true;
}

/* a *= num / den, den >= 1. */
static bool poly_scale(poly *a, int64_t num, int64_t den) {
  for (int v = 0; v < CN_TILE_MAX_VARS; v++)
    if (__builtin_mul_overflow(a->c[v], num, &a->c[v])) return false;
  if (__builtin_mul_overflow(a->off, num, &a->off) || __builtin_mul_overflow(a->den, den, &a->den))
    return false;
  poly_reduce(a);
  return true;
}

/* ---- Evaluation of index polynomials, sizes and bounds ---- */

/* The index variables of one contraction, in order of first appearance. */
typedef struct {
  int n;
  const char *name[CN_TILE_MAX_VARS];
  size_t len[CN_TILE_MAX_VARS], first[CN_TILE_MAX_VARS];
  bool in_tensor[CN_TILE_MAX_VARS];
} var_table;

typedef struct {
  cn_tile_src *src;
  const cn_tile_scope *scope;
  var_table *vars; /* NULL: a pure integer expression (no index variables at all) */
  bool size;       /* a size or bound of a contraction: index variables refused */
} evaluator;

static int variable(evaluator *ev, const cn_tile_expr *e) {
  var_table *vt = ev->vars;
  for (int v = 0; v < vt->n; v++)
    if (vt->len[v] == e->len && strncmp(vt->name[v], e->name, e->len) == 0) return v;
  if (vt->n == CN_TILE_MAX_VARS) {
    cn_tile_fail_at(ev->src, e->at, "more than %d index variables", CN_TILE_MAX_VARS);
    return -1;
  }
  vt->name[vt->n] = e->name;
  vt->len[vt->n] = e->len;
  vt->first[vt->n] = e->at;
  return vt->n++;
}

static bool eval_name(evaluator *ev, const cn_tile_expr *e, poly *out) {
  const cn_tile_name *n = cn_tile_lookup(ev->scope, e->name, e->len);
  int len = (int)e->len;
  bool index =
      n ? n->kind == CN_TILE_INDEX : islower((unsigned char)e->name[0]) || e->name[0] == '_';
  if (n && n->kind == CN_TILE_DIM) {
    out->off = n->value;
    return true;
  }
  if (n && n->kind == CN_TILE_UNSET)
    cn_tile_fail_at(ev->src, e->at,
                    "dim '%.*s' has no value yet (bind it with bind_dims or assign it)", len,
                    e->name);
  else if (n && n->kind == CN_TILE_TENSOR)
    cn_tile_fail_at(ev->src, e->at, "'%.*s' is a tensor, not a dim", len, e->name);
  else if (!index)
    cn_tile_fail_at(ev->src, e->at, "unknown dim '%.*s'", len, e->name);
  else if (!ev->vars)
    cn_tile_fail_at(ev->src, e->at, "unknown name '%.*s' (only dims and integers here)", len,
                    e->name);
  else if (ev->size)
    cn_tile_fail_at(ev->src, e->at,
                    "index variable '%.*s' in a size or bound (only dims and integers)", len,
                    e->name);
  else {
    int v = variable(ev, e);
    if (v < 0) return false;
    out->c[v] = 1;
    return true;
  }
  return false;
}

/* Index polynomials are rational (see poly); a division is floor division when both sides are
 * integers without index variables (dim arithmetic, as in sizes), else exact. */
static bool eval_poly(evaluator *ev, const cn_tile_expr *e, poly *out) {
  memset(out, 0, sizeof *out);
  out->den = 1;
  switch (e->kind) {
  case CN_TX_INT: out->off = e->ival; return true;
  case CN_TX_NAME: return eval_name(ev, e, out);
  case CN_TX_FLOAT:
    cn_tile_fail_at(ev->src, e->at, "a number with a fraction in an integer expression");
    return false;
  case CN_TX_CALL:
    cn_tile_fail_at(ev->src, e->at, "a call in an integer expression (calls are elementwise)");
    return false;
  case CN_TX_NEG:
    if (!eval_poly(ev, e->args[0], out)) return false;
    if (poly_scale(out, -1, 1)) return true;
    cn_tile_fail_at(ev->src, e->at, "integer overflow");
    return false;
  case CN_TX_BINARY: break;
  }
  if (e->op >= CN_TB_EQ) {
    cn_tile_fail_at(ev->src, e->at, "a comparison in an integer expression");
    return false;
  }
  poly rhs;
  if (!eval_poly(ev, e->args[0], out) || !eval_poly(ev, e->args[1], &rhs)) return false;
  bool lv = has_vars(out), rv = has_vars(&rhs), ok = true;
  switch (e->op) {
  case CN_TB_ADD:
  case CN_TB_SUB: ok = poly_add(out, &rhs, e->op == CN_TB_ADD ? 1 : -1); break;
  case CN_TB_MUL: {
    if (lv && rv) {
      cn_tile_fail_at(ev->src, e->at, "a product of index variables is not affine");
      return false;
    }
    poly k = lv ? rhs : *out; /* the constant factor */
    if (!lv) *out = rhs;
    ok = poly_scale(out, k.off, k.den);
    break;
  }
  default: /* '/' and '//' */
    if (rv) {
      cn_tile_fail_at(ev->src, e->at,
                      "division by an index expression (an index expression divides only by "
                      "dims and integers)");
      return false;
    }
    if (rhs.off == 0) {
      cn_tile_fail_at(ev->src, e->at, "division by zero");
      return false;
    }
    if (!lv && out->den == 1 && rhs.den == 1) {
      ok = !(out->off == INT64_MIN && rhs.off == -1);
      if (ok) out->off = cn_floor_div_i64(out->off, rhs.off);
    } else { /* exact: (a / d) / (r / s) = a * s / (d * r) */
      ok = rhs.off != INT64_MIN;
      if (ok)
        ok = poly_scale(out, rhs.off < 0 ? -rhs.den : rhs.den, rhs.off < 0 ? -rhs.off : rhs.off);
    }
    break;
  }
  if (!ok) cn_tile_fail_at(ev->src, e->at, "integer overflow");
  return ok;
}

bool cn_tile_eval_int(cn_tile_src *src, const cn_tile_scope *scope, const cn_tile_expr *e,
                      int64_t *out) {
  evaluator ev = {src, scope, NULL, true};
  poly p;
  if (!eval_poly(&ev, e, &p)) return false;
  *out = p.off;
  return true;
}

size_t cn_tile_expr_start(const cn_tile_expr *e) {
  return e->kind == CN_TX_BINARY ? cn_tile_expr_start(e->args[0]) : e->at;
}

/* A size or bound of a contraction: no index variable; sizes are not negative. */
static bool eval_size(evaluator *ev, const cn_tile_expr *e, bool size, int64_t *out) {
  ev->size = true;
  poly p;
  bool ok = eval_poly(ev, e, &p);
  ev->size = false;
  CN_ASSERT(!ok || p.den == 1); /* a fraction needs an index variable */
  *out = p.off;
  /* an axis holds at least one cell: a size 0 would otherwise be refused unpositioned when the
   * output tensor is made */
  if (ok && size && p.off < 1) {
    cn_tile_fail_at(ev->src, cn_tile_expr_start(e), "size %lld must be at least 1",
                    (long long)p.off);
    return false;
  }
  return ok;
}

/* ---- Ranges ---- */

typedef struct {
  const poly *e;
  int64_t bound; /* 0 <= e < bound */
} condition;

/* Narrows [lo, hi] (inclusive, known[v] when bounded) by the conditions (integer polynomials), to
 * a fixpoint: for 0 <= c*v + rest < bound with every other variable of rest bounded, c*v lies in
 * [-max(rest), bound - 1 - min(rest)]. */
static void propagate(int nv, const condition *cs, int n, int64_t *lo, int64_t *hi, bool *known) {
  for (int round = 0; round < MAX_ROUNDS; round++) {
    bool changed = false;
    for (int k = 0; k < n; k++) {
      const poly *e = cs[k].e;
      for (int v = 0; v < nv; v++) {
        if (!e->c[v]) continue;
        int64_t rmin = e->off, rmax = e->off;
        bool ok = true;
        for (int w = 0; w < nv && ok; w++) {
          if (w == v || !e->c[w]) continue;
          int64_t a, b;
          ok = known[w] && !__builtin_mul_overflow(e->c[w], lo[w], &a) &&
               !__builtin_mul_overflow(e->c[w], hi[w], &b) &&
               !__builtin_add_overflow(rmin, a < b ? a : b, &rmin) &&
               !__builtin_add_overflow(rmax, a < b ? b : a, &rmax);
        }
        int64_t l, h;
        if (!ok || __builtin_sub_overflow(0, rmax, &l) ||
            __builtin_sub_overflow(cs[k].bound - 1, rmin, &h))
          continue;
        int64_t c = e->c[v];
        int64_t vl = c > 0 ? cn_ceil_div_i64(l, c) : cn_ceil_div_i64(h, c);
        int64_t vh = c > 0 ? cn_floor_div_i64(h, c) : cn_floor_div_i64(l, c);
        if (!known[v] || vl > lo[v] || vh < hi[v]) {
          if (!known[v] || vl > lo[v]) lo[v] = vl;
          if (!known[v] || vh < hi[v]) hi[v] = vh;
          known[v] = changed = true;
        }
      }
    }
    if (!changed) return;
  }
}

#define MAX_POLYS (4 * CN_MAX_RANK + CN_TILE_MAX_CONSTRAINTS)

/* The statement's index polynomials, each a condition 0 <= p < bound: the output's axes first
 * (bound -1 while an unsized axis is not derived), then each operand's axes, then the
 * constraints. */
typedef struct {
  int n, n_out;
  poly p[MAX_POLYS];
  int64_t bound[MAX_POLYS];
  size_t at[MAX_POLYS]; /* where its expression starts (a constraint: the constraint) */
} poly_set;

/* The largest value an integer polynomial reaches over the box, plus one (0 when it stays
 * negative); false when a variable is unbounded or on overflow. */
static bool reach(int nv, const poly *e, const int64_t *lo, const int64_t *hi, const bool *known,
                  int64_t *out) {
  int64_t top = e->off;
  for (int v = 0; v < nv; v++) {
    int64_t t;
    if (e->c[v] && (!known[v] || __builtin_mul_overflow(e->c[v], e->c[v] > 0 ? hi[v] : lo[v], &t) ||
                    __builtin_add_overflow(top, t, &top)))
      return false;
  }
  if (top == INT64_MAX) return false;
  *out = top < 0 ? 0 : top + 1;
  return true;
}

/* The range [lo, hi] of each of the nv variables under the conditions of s (integer polynomials),
 * every unsized output axis first sized from the operands and constraints (the largest value its
 * index reaches, plus one). Returns -1, or the first axis whose size cannot be derived. */
static int box(int nv, poly_set *s, int64_t *lo, int64_t *hi, bool *known) {
  condition cs[MAX_POLYS];
  int n = 0;
  for (int k = s->n_out; k < s->n; k++) cs[n++] = (condition){&s->p[k], s->bound[k]};
  memset(known, 0, sizeof *known * CN_TILE_MAX_VARS);
  propagate(nv, cs, n, lo, hi, known);
  for (int x = 0; x < s->n_out; x++)
    if (s->bound[x] < 0 && !reach(nv, &s->p[x], lo, hi, known, &s->bound[x])) return x;
  for (int x = 0; x < s->n_out; x++) cs[n++] = (condition){&s->p[x], s->bound[x]};
  memset(known, 0, sizeof *known * CN_TILE_MAX_VARS);
  propagate(nv, cs, n, lo, hi, known);
  return -1;
}

/* How many points the box holds, to rank boxes (HUGE_VAL when a variable is unbounded). */
static double volume(int nv, const int64_t *lo, const int64_t *hi, const bool *known) {
  double points = 1;
  for (int v = 0; v < nv; v++) {
    if (!known[v]) return HUGE_VAL;
    points *= hi[v] < lo[v] ? 0 : (double)hi[v] - (double)lo[v] + 1;
  }
  return points;
}

/* ---- Exact division: a change of variables ---- */

/* x = x0 + B y over all integer y: the points where every index polynomial is an integer (the
 * identity when none divides). Variable y_j stands for x_{src[j]}: lattice row j is that
 * variable's, so x_{src[j]} = x0 + B[src[j]][j] y_j + (terms of earlier y) with B[src[j]][j] >= 1,
 * and x_{src[j]} = y_j exactly when that diagonal entry is 1 (the canonical form then leaves no
 * other term). */
typedef struct {
  int n;
  int src[CN_TILE_MAX_VARS];
  int64_t x0[CN_TILE_MAX_VARS];
  int64_t b[CN_TILE_MAX_VARS][CN_TILE_MAX_VARS]; /* b[v][j]: x_v's coefficient of y_j */
} change;

static void identity_change(int nv, change *ch) {
  memset(ch, 0, sizeof *ch);
  ch->n = nv;
  for (int v = 0; v < nv; v++) ch->src[v] = v, ch->b[v][v] = 1;
}

/* p over y: an integer polynomial, since the lattice makes p's numerator a multiple of its den
 * for every y, hence each of its coefficients in y too. False on overflow. */
static bool substitute(const change *ch, const poly *p, poly *out) {
  memset(out, 0, sizeof *out);
  out->den = 1;
  int64_t off = p->off, t;
  for (int v = 0; v < ch->n; v++) {
    if (!p->c[v]) continue;
    if (__builtin_mul_overflow(p->c[v], ch->x0[v], &t) || __builtin_add_overflow(off, t, &off))
      return false;
    for (int j = 0; j < ch->n; j++)
      if (__builtin_mul_overflow(p->c[v], ch->b[v][j], &t) ||
          __builtin_add_overflow(out->c[j], t, &out->c[j]))
        return false;
  }
  CN_ASSERT(off % p->den == 0);
  out->off = off / p->den;
  for (int j = 0; j < ch->n; j++) {
    CN_ASSERT(out->c[j] % p->den == 0);
    out->c[j] /= p->den;
  }
  return true;
}

static bool substitute_all(const change *ch, const poly_set *xs, poly_set *ys) {
  ys->n = xs->n;
  ys->n_out = xs->n_out;
  memcpy(ys->bound, xs->bound, sizeof xs->bound);
  memcpy(ys->at, xs->at, sizeof xs->at);
  for (int k = 0; k < xs->n; k++)
    if (!substitute(ch, &xs->p[k], &ys->p[k])) return false;
  return true;
}

/* The lattice of the conditions with the variables in the order perm (lattice row q is variable
 * perm[q]): 1 and *ch, 0 when no integer point satisfies them, -1 on overflow. */
static int solve_order(int nv, const int *perm, int nc, const cn_lattice_cond *cs,
                       cn_lattice_cond *permuted, change *ch) {
  for (int k = 0; k < nc; k++) {
    permuted[k] = (cn_lattice_cond){.off = cs[k].off, .den = cs[k].den};
    for (int q = 0; q < nv; q++) permuted[k].c[q] = cs[k].c[perm[q]];
  }
  cn_lattice l;
  int st = cn_lattice_solve(nv, nc, permuted, &l);
  if (st != 1) return st;
  memset(ch, 0, sizeof *ch);
  ch->n = nv;
  for (int q = 0; q < nv; q++) {
    ch->src[q] = perm[q];
    ch->x0[perm[q]] = l.x0[q];
    for (int j = 0; j < nv; j++) ch->b[perm[q]][j] = l.basis[q][j];
  }
  return 1;
}

/* The next permutation of a[0..n-1] in lexicographic order; false after the last. */
static bool next_permutation(int *a, int n) {
  int i = n - 2;
  while (i >= 0 && a[i] >= a[i + 1]) i--;
  if (i < 0) return false;
  int j = n - 1;
  while (a[j] <= a[i]) j--;
  int t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (int l = i + 1, r = n - 1; l < r; l++, r--) t = a[l], a[l] = a[r], a[r] = t;
  return true;
}

/* Orders of up to this many variables that divisibility conditions involve are all tried. */
#define MAX_PERMUTED 5

/* Scratch of one contraction (malloc'd: it is dropped once the record is built). */
typedef struct {
  var_table vars;
  poly_set xs;       /* over the index variables: rational */
  poly_set ys, cand; /* over a change's variables: integer */
  cn_lattice_cond conds[MAX_POLYS], permuted[MAX_POLYS];
} work;

/* The change of variables for w->xs, where every polynomial with den > 1 asks its numerator to be
 * a multiple of den (all conditions solved together), then w->ys (the polynomials over it, unsized
 * output axes derived) and their box (*bad_axis: -1, or an axis whose size cannot be derived).
 * The canonical lattice depends on the order of the variables, which decides the loop variables
 * (the transposed convolution's x = k + S*n iterates k and n, the input's own index, where the
 * order (x, k) would iterate x and a band of k): of all orders of the variables the conditions
 * involve (at most MAX_PERMUTED of them, else the order of appearance alone), the one whose box
 * holds the fewest points wins, the first in lexicographic order on ties (the order of
 * appearance first). Returns 1; 0 when no integer point is valid (the identity, w->ys hold the
 * numerators and no box); -1 after an error. */
static int choose_change(evaluator *ev, work *w, change *ch, int64_t *lo, int64_t *hi, bool *known,
                         int *bad_axis) {
  const poly_set *xs = &w->xs;
  int nv = w->vars.n, nc = 0, m = 0;
  size_t at = 0;
  bool involved[CN_TILE_MAX_VARS] = {0};
  for (int k = 0; k < xs->n; k++) {
    const poly *p = &xs->p[k];
    if (p->den == 1) continue;
    if (!nc) at = xs->at[k];
    cn_lattice_cond *cd = &w->conds[nc++];
    *cd = (cn_lattice_cond){.off = p->off, .den = p->den};
    for (int v = 0; v < nv; v++) {
      cd->c[v] = p->c[v];
      if (p->c[v] % p->den) involved[v] = true;
    }
  }
  int perm[CN_TILE_MAX_VARS], slot[CN_TILE_MAX_VARS], order[CN_TILE_MAX_VARS];
  for (int v = 0; v < nv; v++) {
    perm[v] = v;
    if (involved[v]) slot[m++] = v;
  }
  if (m > MAX_PERMUTED) m = 0;
  for (int i = 0; i < m; i++) order[i] = i;
  double best = HUGE_VAL;
  bool found = false;
  do {
    for (int i = 0; i < m; i++) perm[slot[i]] = slot[order[i]];
    change cand;
    int st = 1;
    if (nc)
      st = solve_order(nv, perm, nc, w->conds, w->permuted, &cand);
    else
      identity_change(nv, &cand);
    if (st == 0) {
      identity_change(nv, ch);
      w->ys = *xs;
      for (int k = 0; k < xs->n; k++) w->ys.p[k].den = 1;
      return 0;
    }
    if (st < 0 || !substitute_all(&cand, xs, &w->cand)) continue;
    int64_t l[CN_TILE_MAX_VARS], h[CN_TILE_MAX_VARS];
    bool kn[CN_TILE_MAX_VARS];
    int axis = box(nv, &w->cand, l, h, kn);
    double points = axis < 0 ? volume(nv, l, h, kn) : HUGE_VAL;
    if (found && points >= best) continue;
    found = true;
    best = points;
    *ch = cand;
    *bad_axis = axis;
    w->ys = w->cand;
    memcpy(lo, l, sizeof l);
    memcpy(hi, h, sizeof h);
    memcpy(known, kn, sizeof kn);
  } while (next_permutation(order, m));
  if (found) return 1;
  cn_tile_fail_at(ev->src, at,
                  "the change of variables that keeps the integer points of the divisions "
                  "overflows 64-bit integers");
  return -1;
}

/* y_j's name: x_{src[j]}'s own when x_{src[j]} = y_j, else that name, '_' and the diagonal entry
 * (i = 2*i_2 + ...), with '_' appended while another variable has it. */
#define NAME_CAP 96
static void name_variable(const var_table *vt, const change *ch, int j, char (*names)[NAME_CAP]) {
  int v = ch->src[j];
  int len = vt->len[v] < 64 ? (int)vt->len[v] : 64;
  if (ch->b[v][j] == 1) {
    snprintf(names[j], NAME_CAP, "%.*s", len, vt->name[v]);
    return;
  }
  snprintf(names[j], NAME_CAP, "%.*s_%lld", len, vt->name[v], (long long)ch->b[v][j]);
  for (;;) {
    size_t n = strlen(names[j]);
    bool taken = false;
    for (int u = 0; u < vt->n && !taken; u++)
      taken = vt->len[u] == n && strncmp(vt->name[u], names[j], n) == 0;
    for (int k = 0; k < j && !taken; k++) taken = strcmp(names[k], names[j]) == 0;
    if (!taken || n + 1 >= NAME_CAP) return;
    names[j][n] = '_';
    names[j][n + 1] = '\0';
  }
}

/* ---- Compilation ---- */

/* An operand of the statement, resolved: its axes are the polynomials first, first + 1, ... */
typedef struct {
  const cn_tile_name *t;
  int first;
} operand;

/* Appends the polynomials of n index expressions to s (bounds -1: set by the caller). */
static bool eval_indices(evaluator *ev, poly_set *s, int n, cn_tile_expr *const *idx) {
  for (int x = 0; x < n; x++) {
    poly *p = &s->p[s->n];
    s->at[s->n] = cn_tile_expr_start(idx[x]);
    s->bound[s->n++] = -1;
    if (!eval_poly(ev, idx[x], p)) return false;
    for (int v = 0; v < CN_TILE_MAX_VARS; v++)
      if (p->c[v]) ev->vars->in_tensor[v] = true;
  }
  return true;
}

static bool resolve_operand(evaluator *ev, poly_set *s, const cn_tile_access *a, operand *op) {
  int len = (int)a->len;
  op->t = cn_tile_lookup(ev->scope, a->name, a->len);
  op->first = s->n;
  if (!op->t || op->t->kind != CN_TILE_TENSOR) {
    cn_tile_fail_at(ev->src, a->at,
                    op->t ? "'%.*s' is a dim, not a tensor" : "unknown tensor '%.*s'", len,
                    a->name);
    return false;
  }
  if (!cn_tile_check_known(ev->src, a->at, op->t) || !eval_indices(ev, s, a->n, a->idx))
    return false;
  if (a->n == op->t->rank) {
    for (int x = 0; x < a->n; x++) s->bound[op->first + x] = op->t->dims[x];
    return true;
  }
  cn_tile_fail_at(ev->src, a->at, "'%.*s' has %d axes (%s) but %d indices", len, a->name,
                  op->t->rank, cn_tensor_shape(op->t->tensor), a->n);
  return false;
}

static cn_index to_index(cn_tile_src *src, int nv, size_t at, const poly *e,
                         const cn_symbol *syms) {
  cn_symbol s[CN_MAX_AFFINE_TERMS];
  int64_t c[CN_MAX_AFFINE_TERMS];
  int n = 0;
  CN_ASSERT(e->den == 1);
  for (int v = 0; v < nv; v++) {
    if (!e->c[v]) continue;
    if (n == CN_MAX_AFFINE_TERMS) {
      cn_tile_fail_at(src, at, "an index expression may use at most %d index variables",
                      CN_MAX_AFFINE_TERMS);
      return cn_index_fixed(0);
    }
    s[n] = syms[v];
    c[n++] = e->c[v];
  }
  return n ? cn_index_affine(n, s, c, e->off) : cn_index_fixed(e->off);
}

static cn_tensor *contract(cn_graph *g, cn_tile_src *src, const cn_tile_scope *scope,
                           const cn_tile_contraction *c, int out_rank, const int64_t *out_dims,
                           int n_extra, const cn_tile_constraint *extra, work *w) {
  cn_ctx *ctx = g->ctx;
  const cn_tile_access *out = &c->out;
  int orank = out->n, olen = (int)out->len;
  if (cn_tile_lookup(scope, out->name, out->len)) {
    cn_tile_fail_at(src, out->at, "the output '%.*s' is already bound", olen, out->name);
    return NULL;
  }
  if (out_dims && orank != out_rank) {
    cn_tile_fail_at(src, out->at, "'%.*s' has %d dims (TensorOutput) but %d indices", olen,
                    out->name, out_rank, orank);
    return NULL;
  }
  var_table *vars = &w->vars;
  poly_set *xs = &w->xs;
  operand ops[3];
  evaluator ev = {src, scope, vars, false};

  /* Output, operands, constraints: index variables are numbered in this order. */
  if (!eval_indices(&ev, xs, orank, out->idx)) return NULL;
  xs->n_out = orank;
  for (int x = 0; x < orank; x++) {
    if (out_dims && c->sizes[x]) {
      cn_tile_fail_at(src, c->sizes[x]->at, "the sizes of '%.*s' come from its TensorOutput", olen,
                      out->name);
      return NULL;
    }
    xs->bound[x] = out_dims ? out_dims[x] : -1;
    if (c->sizes[x] && !eval_size(&ev, c->sizes[x], true, &xs->bound[x])) return NULL;
  }
  for (int a = 0; a < c->n_acc; a++)
    if (!resolve_operand(&ev, xs, &c->acc[a], &ops[a])) return NULL;
  int n_cons = c->n_cons + n_extra, cfirst = xs->n;
  if (n_cons > CN_TILE_MAX_CONSTRAINTS) {
    cn_tile_fail_at(src, extra[CN_TILE_MAX_CONSTRAINTS - c->n_cons].at, "more than %d constraints",
                    CN_TILE_MAX_CONSTRAINTS);
    return NULL;
  }
  for (int k = 0; k < n_cons; k++) {
    const cn_tile_constraint *ck = k < c->n_cons ? &c->cons[k] : &extra[k - c->n_cons];
    poly *p = &xs->p[xs->n];
    xs->at[xs->n] = ck->at;
    if (!eval_poly(&ev, ck->poly, p) || !eval_size(&ev, ck->bound, false, &xs->bound[xs->n]))
      return NULL;
    xs->n++;
    if (!has_vars(p)) {
      cn_tile_fail_at(src, ck->at, "a constraint must mention an index variable");
      return NULL;
    }
  }
  for (int v = 0; v < vars->n; v++)
    if (!vars->in_tensor[v]) {
      cn_tile_fail_at(src, vars->first[v],
                      "index '%.*s' appears only in constraints: every index must index a tensor",
                      (int)vars->len[v], vars->name[v]);
      return NULL;
    }

  /* Exact division and ranges: the loop variables are the change's y; every polynomial over them
   * is an integer one, each variable has a range [lo, hi] from the conditions. */
  change ch;
  int64_t lo[CN_TILE_MAX_VARS], hi[CN_TILE_MAX_VARS];
  bool known[CN_TILE_MAX_VARS];
  int bad_axis = -1;
  int st = choose_change(&ev, w, &ch, lo, hi, known, &bad_axis);
  if (st < 0) return NULL;
  poly_set *ys = &w->ys;
  int nv = ch.n;
  if (st == 0) { /* no valid point: nothing reached, every range empty */
    for (int x = 0; x < orank; x++)
      if (ys->bound[x] < 0) {
        cn_tile_fail_at(src, ys->at[x],
                        "cannot derive the size of output axis %d: no index set is valid (give "
                        "it as ': SIZE')",
                        x);
        return NULL;
      }
    for (int v = 0; v < nv; v++) lo[v] = 0, hi[v] = -1;
  } else {
    if (bad_axis >= 0) {
      cn_tile_fail_at(src, ys->at[bad_axis],
                      "cannot derive the size of output axis %d: give it as ': SIZE'", bad_axis);
      return NULL;
    }
    for (int v = 0; v < nv; v++) {
      if (!known[v]) {
        int x = ch.src[v];
        cn_tile_fail_at(src, vars->first[x],
                        "index '%.*s' is not bounded: no tensor axis or constraint limits it alone",
                        (int)vars->len[x], vars->name[x]);
        return NULL;
      }
      if (hi[v] < lo[v]) hi[v] = lo[v] - 1; /* no valid value: an empty range */
    }
  }

  /* The record */
  cn_symbol syms[CN_TILE_MAX_VARS];
  int64_t rlo[CN_TILE_MAX_VARS], rhi[CN_TILE_MAX_VARS], odims[CN_MAX_RANK];
  char names[CN_TILE_MAX_VARS][NAME_CAP];
  for (int v = 0; v < nv; v++) {
    name_variable(vars, &ch, v, names);
    if ((syms[v] = cn_symbol_create(ctx, names[v], 0)) < 0) return NULL;
    rlo[v] = lo[v];
    rhi[v] = hi[v] + 1;
  }
  cn_index *maps = cn_alloc(ctx, sizeof *maps * (size_t)(4 * CN_MAX_RANK));
  cn_proj_constraint *pc = cn_alloc(ctx, sizeof *pc * (size_t)(n_cons + 1));
  if (!maps || !pc) return NULL;
  for (int x = 0; x < orank; x++) {
    odims[x] = ys->bound[x];
    maps[x] = to_index(src, nv, out->at, &ys->p[x], syms);
  }
  cn_index *next = maps + orank;
  cn_proj_tensor rhs[3];
  cn_tensor *args[3];
  for (int a = 0; a < c->n_acc; a++) {
    const cn_tile_name *t = ops[a].t;
    for (int x = 0; x < t->rank; x++)
      next[x] = to_index(src, nv, c->acc[a].at, &ys->p[ops[a].first + x], syms);
    rhs[a] = (cn_proj_tensor){t->rank, t->dims, next};
    args[a] = t->tensor;
    next += t->rank;
  }
  for (int k = 0; k < n_cons; k++)
    pc[k] = (cn_proj_constraint){to_index(src, nv, ys->at[cfirst + k], &ys->p[cfirst + k], syms),
                                 ys->bound[cfirst + k]};
  if (src->failed) return NULL;
  cn_proj_space space = {nv, syms, rlo, rhi, n_cons, pc, true, true};
  cn_proj *proj =
      cn_proj_create_ranged(ctx, &space, (cn_proj_tensor){orank, odims, maps}, c->n_acc, rhs);
  if (!proj) return NULL;
  if (c->accum == CN_OP_ARG2 && !cn_proj_lhs_injective(proj)) {
    cn_tile_fail_at(src, c->agg_at,
                    "'=' (assign) needs every output cell written by at most one valid index set, "
                    "and '%.*s' may be written by several (use '+=', '>=' ... to aggregate)",
                    olen, out->name);
    return NULL;
  }

  /* The tensor: output axes Exact, no shape relation to the operands (the statement's dims
   * already checked them). */
  char label[128];
  snprintf(label, sizeof label, "%.*s", olen, out->name);
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  sargs.n_dims[CN_ROW_OUTPUT] = orank;
  sargs.dims[CN_ROW_OUTPUT] = odims;
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_TILE, g->prec, NULL, CN_SL_DATA, &sargs, 0, NULL);
  if (!t) return NULL;
  t->n_args = c->n_acc;
  for (int a = 0; a < c->n_acc; a++) t->args[a] = args[a];
  t->accum = c->accum;
  t->prim = c->prim;
  t->proj = proj;
  t->diff = cn_tensor_op_diff(t);
  return t;
}

cn_tensor *cn_tile_contract(cn_graph *g, cn_tile_src *src, const cn_tile_scope *scope,
                            const cn_tile_contraction *c, int out_rank, const int64_t *out_dims,
                            int n_extra, const cn_tile_constraint *extra) {
  work *w = cn_calloc(g->ctx, 1, sizeof *w);
  if (!w) return NULL;
  cn_tensor *t = contract(g, src, scope, c, out_rank, out_dims, n_extra, extra, w);
  free(w);
  return t;
}

/* ---- cn_tile: one statement from C ---- */

/* A binding error (not tied to a column). */
static bool binding_error(cn_tile_src *src, const char *fmt, ...) CN_PRINTF(2, 3);
static bool binding_error(cn_tile_src *src, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_fail(src->ctx, CN_ERR_INVALID, "tile \"%s\": %s", src->text, what);
  return false;
}

/* Adds the dims a binding names (its tensor's axes, I.bind_dims(M, N), or the binding itself
 * for a dim) to the scope; a name repeated must have one size. */
static bool bind_names(cn_tile_src *src, const cn_tile_binding *b, const cn_tile_name *t,
                       cn_tile_name *names, int *n) {
  const char *s = t ? b->dims : b->name;
  int rank = t ? t->rank : 1, axis = 0;
  const int64_t *dims = t ? t->dims : &b->dim;
  if (t && rank < 0)
    return binding_error(src,
                         "the shape of '%s' is not known yet (%s): Tile needs the dims of its "
                         "tensors when a statement is built",
                         b->name, cn_tensor_shape(b->tensor));
  for (;;) {
    while (*s == ',' || isspace((unsigned char)*s)) s++;
    if (!*s) break;
    size_t len = 0;
    while (s[len] && s[len] != ',' && !isspace((unsigned char)s[len])) len++;
    if (axis == rank)
      return binding_error(src, "'%s' binds more dims (\"%s\") than its %d axes", b->name, s, rank);
    if (!isupper((unsigned char)s[0]))
      return binding_error(src, "binding '%s': dims (\"%s\") must be upper-case names", b->name,
                           t ? b->dims : b->name);
    cn_tile_scope scope = {*n, names};
    const cn_tile_name *d = cn_tile_lookup(&scope, s, len);
    if (d && d->kind == CN_TILE_DIM && d->value != dims[axis])
      return binding_error(src, "dim %.*s is %lld but axis %d of '%s' has size %lld", (int)len, s,
                           (long long)d->value, axis, b->name, (long long)dims[axis]);
    names[(*n)++] = (cn_tile_name){.name = s, .len = len, .kind = CN_TILE_DIM, .value = dims[axis]};
    axis++;
    s += len;
  }
  if (axis != rank)
    return binding_error(src, "'%s' has %d axes (%s) but binds %d dims", b->name, rank,
                         cn_tensor_shape(b->tensor), axis);
  return true;
}

cn_tensor *cn_tile(cn_graph *g, const char *text, int n_bindings, const cn_tile_binding *bindings) {
  if (!g) return NULL;
  cn_ctx *ctx = g->ctx;
  if (!text || n_bindings < 0 || (n_bindings && !bindings)) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_tile: missing text or bindings");
    return NULL;
  }
  cn_tile_src src = {ctx, text, NULL, 1, 1, false, false};
  int cap = 0;
  for (int i = 0; i < n_bindings; i++) cap += 1 + (bindings[i].dims ? CN_MAX_RANK + 1 : 1);
  cn_tile_name *names = cn_alloc(ctx, sizeof *names * (size_t)(cap ? cap : 1));
  if (!names) return NULL;
  int n = 0;
  for (int i = 0; i < n_bindings; i++) {
    const cn_tile_binding *b = &bindings[i];
    if (!b->name || !b->name[0]) {
      binding_error(&src, "binding %d has no name", i + 1);
      return NULL;
    }
    if (b->tensor && b->tensor->g != g) {
      binding_error(&src, "tensor '%s' is from another graph", b->name);
      return NULL;
    }
    if (!b->tensor) {
      if (!bind_names(&src, b, NULL, names, &n)) return NULL;
      continue;
    }
    cn_tile_name *t = &names[n++];
    *t = (cn_tile_name){.name = b->name, .len = strlen(b->name)};
    if (!cn_tile_tensor_name(g, b->tensor, t)) return NULL;
    if (b->dims && !bind_names(&src, b, t, names, &n)) return NULL;
  }
  cn_tile_reader r;
  cn_tile_contraction *c = cn_alloc(ctx, sizeof *c);
  if (!c || !cn_tile_reader_init(&r, &src, 0, strlen(text)) || !cn_tile_parse_contraction(&r, c))
    return NULL;
  cn_tile_scope scope = {n, names};
  return cn_tile_contract(g, &src, &scope, c, -1, NULL, 0, NULL);
}
