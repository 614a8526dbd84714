/* Tile functions (issue 7, seed 003): the body of a seed function in its Python or its C++
 * flavor, parsed once by cn_tile_fn_create and evaluated against tensors by cn_tile_fn_apply.
 *
 * Python flavor. Statements are separated by newlines or ';' outside brackets (a statement may
 * continue over lines inside brackets or after a `\`); `#` starts a comment. The statements:
 *   M, N = TensorDims(2)   N = TensorDim()   i, j = TensorIndexes(2)   i = TensorIndex()
 *                          declarations: dims without a value yet, index variables
 *   I.bind_dims(M, N)      I's axes in memory order (batch, output, input) as dims; a dim bound
 *                          twice must have one size
 *   O = TensorOutput(N, (M + 1) / 2)   the output of a later contraction, with its dims
 *   O[i] >= I[2 * i + j]   a contraction (tile.c; either bracket style); without TensorOutput
 *                          its sizes are written or derived as in cn_tile
 *   O.add_constraint(j < 2)   added to the contraction of O, wherever it stands in the body
 *   P = ((Y - 1) * s + EK - X) / 2   a dim: integer arithmetic of dims (+ - *, floor division
 *                          `/` and `//`)
 *   R = Sum / (X * Y)      an elementwise tensor (any expression mentioning a tensor)
 *   return R               the result (or a bare expression as the last statement)
 * A name bound to a dim (a parameter, bind_dims, an assignment) is a dim whatever its case;
 * lower-case names bound to nothing are index variables.
 *
 * C++ flavor (issue 13), e.g.
 *   Tensor f(const Tensor& I) { TensorDim M, N; I.bind_dims(M, N); auto O = TensorOutput(N);
 *                               O(n) += I(m, n); return O; }
 * Statements end with ';' (newlines are blanks, so a statement may span lines); comments are
 * `//` and block comments. The header `Tensor NAME(PARAMS) { ... }` is optional; a parameter is
 * `const Tensor& A` (a tensor) or an integer `int64_t s` (also int, size_t, long, TensorDim): a
 * dim. Besides the Python statements (either bracket style): `TensorDim M, N;` and
 * `TensorIndex i, j;` declarations, `auto X = ...;` or `Tensor X = ...;` assignments; the result
 * is returned (`return EXPR;`), an expression statement is an error. A text is C++ when one of
 * its statements, split the Python way, starts with a construct no Python statement starts with
 * (cpp_start): a header or declaration, `auto`, a `//` or block comment, a brace. Otherwise it
 * is Python, which reads `;`-terminated statements on their own lines the same way. The seed's
 * std::vector parameters and for loops are not part of the flavor: their elements are scalar
 * parameters and dims (`int64_t s0, int64_t s1`, `auto Y0 = ...;`).
 *
 * Elementwise expressions follow seed 003's list: + - * / (unary -), == != < > <= >=, sqrt,
 * exp, log, sin, cos, tanh, sigmoid, pow, select. Sub-expressions of dims and numbers are
 * constants (integer arithmetic while every part is an integer, as Tile's dims); a constant
 * meeting a tensor becomes a scalar. Operands broadcast NumPy-style over their memory-order dims
 * (right-aligned; a dim of 1 stretches). Each operation is a cannl einsum applying the op
 * (cn_tensor_einsum with a spec naming every axis), so its result has output axes only and
 * a shape known at once (a plain pointwise result's shape is inferred at materialization, and
 * cannl's per-row broadcasting differs from NumPy's), and it differentiates like any einsum.
 *
 * Invariants: a function and its text live in the context arena and are read-only after
 * creation; every failure is positioned (FILE:LINE:COL, the line, a caret) at the statement
 * part at fault, except the argument checks of cn_tile_fn_apply (count, graph, context, a header's
 * types). */
#include "tile/tile.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *name;
  size_t len, at;
} name_ref;

typedef enum {
  ST_DECLARE_DIMS,
  ST_DECLARE_INDEXES,
  ST_BIND_DIMS,
  ST_OUTPUT,
  ST_ASSIGN,
  ST_CONTRACTION,
  ST_CONSTRAINT,
  ST_RETURN
} st_kind;

typedef struct {
  st_kind kind;
  size_t at;
  name_ref target;         /* the tensor (BIND_DIMS, CONSTRAINT), the name (OUTPUT, ASSIGN) */
  int n_names;             /* DECLARE_*, BIND_DIMS */
  name_ref *names;         /* DECLARE_*, BIND_DIMS */
  int n_exprs;             /* OUTPUT: its dims; ASSIGN, RETURN: one */
  cn_tile_expr **exprs;    /* OUTPUT, ASSIGN, RETURN */
  cn_tile_contraction *c;  /* CONTRACTION */
  cn_tile_constraint cons; /* CONSTRAINT */
  bool bare;               /* RETURN: a bare expression (no `return`) */
} stmt;

/* What a parameter receives: declared by a C++ header, or either (the Python flavor). */
typedef enum { PARAM_ANY, PARAM_TENSOR, PARAM_DIM } param_kind;

struct cn_tile_fn {
  const char *name;
  int n_params;
  name_ref *params;
  param_kind *kinds; /* one per parameter */
  cn_tile_src src;   /* the body (copied); `failed` is never set in it */
  int n_stmts, cap_stmts;
  stmt *stmts;
  int max_names; /* names an application can bind: parameters and statements' targets */
};

static bool same(const name_ref *a, const char *name, size_t len) {
  return a->len == len && strncmp(a->name, name, len) == 0;
}

/* ---- Parsing ---- */

static bool name_ref_at(cn_tile_reader *r, name_ref *out, const char *wanted) {
  if (r->tok.kind != CN_TT_NAME) return cn_tile_unexpected(r, wanted);
  *out = (name_ref){r->src->text + r->tok.at, r->tok.len, r->tok.at};
  return cn_tile_advance(r);
}

static bool at_end(cn_tile_reader *r, const char *wanted) {
  return !r->src->failed && (r->tok.kind == CN_TT_END || cn_tile_unexpected(r, wanted));
}

/* Whether the list of name_list ends here: at `close` (consumed), or at the statement's end
 * (close NULL: a C++ declaration). */
static bool list_ends(cn_tile_reader *r, const char *close) {
  return close ? cn_tile_accept(r, close) : r->tok.kind == CN_TT_END;
}

/* NAME {',' NAME} up to `close`; the names in arena storage. */
static bool name_list(cn_tile_reader *r, const char *close, int *n, name_ref **out) {
  name_ref names[CN_MAX_RANK + 1];
  *n = 0;
  if (!list_ends(r, close))
    for (;;) {
      if (*n == CN_MAX_RANK + 1) {
        cn_tile_fail_at(r->src, r->tok.at, "too many names");
        return false;
      }
      if (!name_ref_at(r, &names[(*n)++], "a name")) return false;
      if (list_ends(r, close)) break;
      if (!cn_tile_expect(r, ",",
                          !close          ? "',' or ';'"
                          : *close == ')' ? "',' or ')'"
                                          : "',' or '='"))
        return false;
    }
  if (r->src->failed || !(*out = cn_alloc(r->src->ctx, sizeof **out * (size_t)(*n ? *n : 1))))
    return false;
  memcpy(*out, names, sizeof *names * (size_t)*n);
  return true;
}

/* TensorDims(k) / TensorIndexes(k) / TensorDim() / TensorIndex() declaring n names. */
static bool declaration(cn_tile_reader *r, stmt *s) {
  bool plural = cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorIndexes");
  s->kind = cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorDim") ? ST_DECLARE_DIMS
                                                                      : ST_DECLARE_INDEXES;
  size_t at = r->tok.at;
  if (!cn_tile_advance(r) || !cn_tile_expect(r, "(", "'('")) return false;
  int64_t count = 1;
  if (plural) {
    if (r->tok.kind != CN_TT_INT) return cn_tile_unexpected(r, "the number of names");
    count = r->tok.ival;
    if (!cn_tile_advance(r)) return false;
  }
  if (!cn_tile_expect(r, ")", "')'") || !at_end(r, "the end of the statement")) return false;
  if (count != s->n_names) {
    cn_tile_fail_at(r->src, at, "%lld names declared for %d on the left", (long long)count,
                    s->n_names);
    return false;
  }
  return true;
}

/* A method statement: NAME '.' (bind_dims | add_constraint) '(' ... ')'. */
static bool method(cn_tile_reader *r, stmt *s) {
  size_t at = r->tok.at;
  if (cn_tile_is(r, "bind_dims")) {
    s->kind = ST_BIND_DIMS;
    return cn_tile_advance(r) && cn_tile_expect(r, "(", "'('") &&
           name_list(r, ")", &s->n_names, &s->names) && at_end(r, "the end of the statement");
  }
  if (cn_tile_is(r, "add_constraint")) {
    s->kind = ST_CONSTRAINT;
    return cn_tile_advance(r) && cn_tile_expect(r, "(", "'('") &&
           cn_tile_parse_constraint(r, &s->cons) && cn_tile_expect(r, ")", "')'") &&
           at_end(r, "the end of the statement");
  }
  if (r->tok.kind == CN_TT_NAME)
    cn_tile_fail_at(r->src, at, "unknown method '%.*s' (bind_dims or add_constraint)",
                    (int)r->tok.len, r->src->text + at);
  else
    cn_tile_unexpected(r, "bind_dims or add_constraint");
  return false;
}

/* Whether the statement at r (a NAME) is a contraction: its bracket closes before an
 * aggregation. r is a copy. */
static bool is_contraction(cn_tile_reader r) {
  if (!cn_tile_advance(&r) || !(cn_tile_is(&r, "[") || cn_tile_is(&r, "("))) return false;
  int depth = 0;
  do {
    if (cn_tile_is(&r, "[") || cn_tile_is(&r, "(")) depth++;
    if (cn_tile_is(&r, "]") || cn_tile_is(&r, ")")) depth--;
    if (!cn_tile_advance(&r)) return false;
  } while (depth > 0 && r.tok.kind != CN_TT_END);
  return cn_tile_is(&r, "+=") || cn_tile_is(&r, "*=") || cn_tile_is(&r, ">=") ||
         cn_tile_is(&r, "<=") || cn_tile_is(&r, "=");
}

static bool one_expr(cn_tile_reader *r, stmt *s) {
  s->n_exprs = 1;
  return (s->exprs = cn_alloc(r->src->ctx, sizeof *s->exprs)) &&
         (s->exprs[0] = cn_tile_parse_expr(r, true)) && at_end(r, "the end of the statement");
}

static bool parse_stmt(cn_tile_reader *r, stmt *s) {
  cn_ctx *ctx = r->src->ctx;
  s->at = r->tok.at;
  if (cn_tile_is(r, "return")) {
    s->kind = ST_RETURN;
    return cn_tile_advance(r) && one_expr(r, s);
  }
  cn_tile_reader start = *r;
  if (r->tok.kind == CN_TT_NAME && is_contraction(*r)) {
    s->kind = ST_CONTRACTION;
    return (s->c = cn_alloc(ctx, sizeof *s->c)) && cn_tile_parse_contraction(r, s->c);
  }
  if (r->tok.kind == CN_TT_NAME) {
    name_ref first;
    if (!name_ref_at(r, &first, "a name")) return false;
    if (cn_tile_accept(r, ".")) {
      s->target = first;
      return method(r, s);
    }
    if (cn_tile_is(r, ",")) { /* M, N = TensorDims(2) */
      *r = start;
      if (!name_list(r, "=", &s->n_names, &s->names)) return false;
      if (cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorIndexes")) return declaration(r, s);
      return cn_tile_unexpected(r, "TensorDims(N) or TensorIndexes(N) after several names");
    }
    if (cn_tile_accept(r, "=")) {
      s->target = first;
      if (cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorIndexes") ||
          cn_tile_is(r, "TensorDim") || cn_tile_is(r, "TensorIndex")) {
        s->n_names = 1;
        if (!(s->names = cn_alloc(ctx, sizeof *s->names))) return false;
        s->names[0] = first;
        return declaration(r, s);
      }
      if (cn_tile_is(r, "TensorOutput")) {
        s->kind = ST_OUTPUT;
        cn_tile_expr *dims[CN_MAX_RANK];
        if (!cn_tile_advance(r) || !cn_tile_expect(r, "(", "'('")) return false;
        if (!cn_tile_accept(r, ")"))
          for (;;) {
            if (s->n_exprs == CN_MAX_RANK) {
              cn_tile_fail_at(r->src, r->tok.at, "more than %d dims", CN_MAX_RANK);
              return false;
            }
            if (!(dims[s->n_exprs++] = cn_tile_parse_expr(r, false))) return false;
            if (cn_tile_accept(r, ")")) break;
            if (!cn_tile_expect(r, ",", "',' or ')'")) return false;
          }
        if (!at_end(r, "the end of the statement") ||
            !(s->exprs = cn_alloc(ctx, sizeof *dims * (size_t)(s->n_exprs + 1))))
          return false;
        memcpy(s->exprs, dims, sizeof *dims * (size_t)s->n_exprs);
        return true;
      }
      s->kind = ST_ASSIGN;
      return one_expr(r, s);
    }
    if (r->src->failed) return false;
  }
  *r = start; /* a bare expression: the result when it is the last statement */
  s->kind = ST_RETURN;
  s->bare = true;
  return one_expr(r, s);
}

/* A C++ statement: the declarations `TensorDim M, N` and `TensorIndex i, j`, an assignment
 * with a type (`auto O = ...`, `Tensor O = ...`), or a statement of the Python flavor; an
 * expression statement does nothing in C++, so it is refused rather than taken as the result. */
static bool parse_cpp_stmt(cn_tile_reader *r, stmt *s) {
  s->at = r->tok.at;
  if (cn_tile_is(r, "TensorDim") || cn_tile_is(r, "TensorIndex")) {
    s->kind = cn_tile_is(r, "TensorDim") ? ST_DECLARE_DIMS : ST_DECLARE_INDEXES;
    if (!cn_tile_advance(r) || !name_list(r, NULL, &s->n_names, &s->names)) return false;
    return s->n_names > 0 || cn_tile_unexpected(r, "a name");
  }
  if (cn_tile_is(r, "auto") || cn_tile_is(r, "Tensor")) {
    if (!cn_tile_advance(r)) return false;
    cn_tile_reader named = *r;
    name_ref t;
    if (!name_ref_at(r, &t, "a name") || !(cn_tile_is(r, "=") || cn_tile_unexpected(r, "'='")))
      return false;
    *r = named;
  }
  if (!parse_stmt(r, s)) return false;
  if (s->bare) {
    cn_tile_fail_at(r->src, s->at,
                    "an expression statement does nothing: return the result with `return EXPR;`");
    return false;
  }
  return true;
}

static bool add_stmt(cn_tile_fn *fn, cn_tile_src *src, size_t begin, size_t end) {
  cn_tile_reader r;
  if (!cn_tile_reader_init(&r, src, begin, end)) return false;
  if (r.tok.kind == CN_TT_END) return true; /* blank or comment */
  if (!cn_arena_grow(src->ctx, (void **)&fn->stmts, &fn->cap_stmts, fn->n_stmts + 1,
                     sizeof *fn->stmts)) {
    src->failed = true;
    return false;
  }
  stmt *s = &fn->stmts[fn->n_stmts++];
  memset(s, 0, sizeof *s);
  return src->cpp ? parse_cpp_stmt(&r, s) : parse_stmt(&r, s);
}

/* Splits the body at newlines and ';' outside brackets. */
static bool split(cn_tile_fn *fn, cn_tile_src *src) {
  const char *t = src->text;
  size_t begin = 0;
  int depth = 0;
  for (size_t i = 0;; i++) {
    char c = t[i];
    if (c == '#')
      while (t[i + 1] && t[i + 1] != '\n') i++;
    else if (c == '\\' && t[i + 1] == '\r' && t[i + 2] == '\n')
      i += 2;
    else if (c == '\\' && (t[i + 1] == '\n' || t[i + 1] == '\r'))
      i++;
    else if (c == '(' || c == '[')
      depth++;
    else if ((c == ')' || c == ']') && depth > 0)
      depth--;
    if (c == '\0' || ((c == '\n' || c == ';') && depth == 0)) {
      if (!add_stmt(fn, src, begin, i)) return false;
      if (c == '\0') return true;
      begin = i + 1;
    }
  }
}

/* Whether the statement at s (blanks skipped) is C++ only: a `//` or block comment, a brace, or
 * a declaration or header (`TensorDim M`, `TensorIndex i`, `auto O`, `Tensor O`, `Tensor f(`).
 * No Python statement starts so, so no Python body changes meaning. */
static bool cpp_start(const char *s) {
  static const char *const words[] = {"TensorDim", "TensorIndex", "auto", "Tensor"};
  s += strspn(s, " \t\r\n");
  if (strncmp(s, "//", 2) == 0 || strncmp(s, "/*", 2) == 0 || *s == '{' || *s == '}') return true;
  for (size_t k = 0; k < sizeof words / sizeof *words; k++) {
    size_t n = strlen(words[k]), blank = strspn(s + n, " \t\r\n");
    if (strncmp(s, words[k], n) == 0 && blank > 0 &&
        (isalpha((unsigned char)s[n + blank]) || s[n + blank] == '_'))
      return true;
  }
  return false;
}

/* Whether a body is C++: one of its statements, split as split() does, starts as cpp_start. */
static bool looks_cpp(const char *t) {
  int depth = 0;
  bool start = true;
  for (size_t i = 0;; i++) {
    if (start && cpp_start(t + i)) return true;
    start = false;
    char c = t[i];
    if (c == '\0') return false;
    if (c == '#')
      while (t[i + 1] && t[i + 1] != '\n') i++;
    else if (c == '(' || c == '[')
      depth++;
    else if ((c == ')' || c == ']') && depth > 0)
      depth--;
    else if ((c == '\n' || c == ';') && depth == 0)
      start = true;
  }
}

/* The C++ statement in text[begin, end) that has no ';': parsed first (so a mistake inside is
 * the message), then refused at its last token's end. */
static bool unterminated(cn_tile_fn *fn, cn_tile_src *src, size_t begin, size_t end) {
  cn_tile_reader r;
  if (!cn_tile_reader_init(&r, src, begin, end)) return false;
  if (r.tok.kind == CN_TT_END) return true;
  if (!add_stmt(fn, src, begin, end)) return false;
  size_t last = r.tok.at + r.tok.len;
  while (r.tok.kind != CN_TT_END) {
    last = r.tok.at + r.tok.len;
    if (!cn_tile_advance(&r)) return false;
  }
  cn_tile_fail_at(src, last, "missing ';' at the end of the statement");
  return false;
}

/* Splits C++ statements from `begin` at ';' outside brackets and comments, up to the text's end
 * or, when `braced`, the function's closing '}' (its position in *close). */
static bool split_cpp(cn_tile_fn *fn, cn_tile_src *src, size_t begin, bool braced, size_t *close) {
  const char *t = src->text;
  size_t start = begin;
  int depth = 0;
  for (size_t i = begin;; i++) {
    char c = t[i];
    if (c == '/' && t[i + 1] == '/')
      while (t[i + 1] && t[i + 1] != '\n') i++;
    else if (c == '/' && t[i + 1] == '*') {
      const char *end = strstr(t + i + 2, "*/");
      if (!end) {
        cn_tile_fail_at(src, i, "unterminated comment");
        return false;
      }
      i = (size_t)(end - t) + 1;
    } else if (c == '(' || c == '[')
      depth++;
    else if ((c == ')' || c == ']') && depth > 0)
      depth--;
    else if (c == ';' && depth == 0) {
      if (!add_stmt(fn, src, start, i)) return false;
      start = i + 1;
    } else if (c == '\0' || (braced && c == '}' && depth == 0)) {
      if (!unterminated(fn, src, start, i)) return false;
      if (braced && c == '\0') {
        cn_tile_fail_at(src, i, "missing '}' at the end of the function");
        return false;
      }
      *close = i;
      return true;
    }
  }
}

/* One header parameter: ['const'] TYPE ['&'] NAME, TYPE being Tensor or an integer type. */
static bool header_param(cn_tile_reader *r, name_ref *p, param_kind *kind) {
  static const char *const ints[] = {"int", "int64_t", "size_t", "long", "TensorDim"};
  if (r->src->failed || (cn_tile_is(r, "const") && !cn_tile_advance(r))) return false;
  if (cn_tile_is(r, "std")) {
    cn_tile_fail_at(r->src, r->tok.at,
                    "std::vector parameters are not supported: pass each element as an integer "
                    "parameter (int64_t s0, int64_t s1)");
    return false;
  }
  *kind = cn_tile_is(r, "Tensor") ? PARAM_TENSOR : PARAM_ANY;
  for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
    if (cn_tile_is(r, ints[k])) *kind = PARAM_DIM;
  if (*kind == PARAM_ANY || r->tok.kind != CN_TT_NAME)
    return cn_tile_unexpected(r, "a parameter type (const Tensor&, or int, int64_t, size_t, long "
                                 "or TensorDim for an integer)");
  if (!cn_tile_advance(r) || (cn_tile_is(r, "&") && !cn_tile_advance(r))) return false;
  return name_ref_at(r, p, "the parameter's name");
}

/* The C++ header `Tensor NAME(PARAMS) {`, r at `Tensor`: its name must be the function's; its
 * parameters must be the given ones, or become them when none were given. *body: just after
 * the '{'. */
static bool header(cn_tile_reader *r, cn_tile_fn *fn, size_t *body) {
  cn_ctx *ctx = r->src->ctx;
  name_ref fname = {0}, *names = NULL;
  param_kind *kinds = NULL;
  int n = 0, cap_names = 0, cap_kinds = 0;
  if (!cn_tile_advance(r) || !name_ref_at(r, &fname, "the function's name")) return false;
  if (!same(&fname, fn->name, strlen(fn->name))) {
    cn_tile_fail_at(r->src, fname.at, "the header names '%.*s' but the function is '%s'",
                    (int)fname.len, fname.name, fn->name);
    return false;
  }
  if (!cn_tile_expect(r, "(", "'('")) return false;
  if (!cn_tile_accept(r, ")"))
    for (;;) {
      name_ref p;
      param_kind k;
      if (!header_param(r, &p, &k)) return false;
      if (!cn_arena_grow(ctx, (void **)&names, &cap_names, n + 1, sizeof *names) ||
          !cn_arena_grow(ctx, (void **)&kinds, &cap_kinds, n + 1, sizeof *kinds)) {
        r->src->failed = true;
        return false;
      }
      names[n] = p, kinds[n++] = k;
      if (cn_tile_accept(r, ")")) break;
      if (!cn_tile_expect(r, ",", "',' or ')'")) return false;
    }
  size_t brace = r->tok.at;
  if (!cn_tile_expect(r, "{", "'{'")) return false;
  *body = brace + 1;
  if (fn->n_params == 0 && n > 0) { /* the header's parameters are the function's */
    if (!(fn->params = cn_alloc(ctx, sizeof *fn->params * (size_t)n))) return false;
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < i; j++)
        if (same(&names[j], names[i].name, names[i].len)) {
          cn_tile_fail_at(r->src, names[i].at, "parameter '%.*s' is repeated", (int)names[i].len,
                          names[i].name);
          return false;
        }
      char *copy = cn_alloc(ctx, names[i].len + 1); /* messages print it as a string */
      if (!copy) return false;
      memcpy(copy, names[i].name, names[i].len);
      fn->params[i] = (name_ref){copy, names[i].len, 0};
    }
    fn->n_params = fn->max_names = n;
  } else if (n != fn->n_params) {
    cn_tile_fail_at(r->src, fname.at, "the header has %d parameter%s but the function %d", n,
                    n == 1 ? "" : "s", fn->n_params);
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!same(&names[i], fn->params[i].name, fn->params[i].len)) {
      cn_tile_fail_at(r->src, names[i].at, "parameter %d is '%.*s' here but '%s' in the function",
                      i + 1, (int)names[i].len, names[i].name, fn->params[i].name);
      return false;
    }
  fn->kinds = kinds ? kinds : fn->kinds;
  return true;
}

/* A C++ body: an optional header around the statements, nothing after its closing '}'. *end:
 * where the statements end (the '}' or the text's end). */
static bool read_cpp(cn_tile_fn *fn, cn_tile_src *src, size_t *end) {
  cn_tile_reader r;
  size_t len = strlen(src->text), begin = 0;
  if (!cn_tile_reader_init(&r, src, 0, len)) return false;
  cn_tile_reader ahead = r;
  bool braced = cn_tile_is(&r, "Tensor") && cn_tile_advance(&ahead) &&
                ahead.tok.kind == CN_TT_NAME && cn_tile_advance(&ahead) && cn_tile_is(&ahead, "(");
  if (src->failed || (braced && !header(&r, fn, &begin)) || !split_cpp(fn, src, begin, braced, end))
    return false;
  if (!braced) return true;
  if (!cn_tile_reader_init(&r, src, *end + 1, len)) return false;
  return r.tok.kind == CN_TT_END ||
         cn_tile_unexpected(&r, "nothing after the function's closing '}'");
}

static const stmt *contraction_of(const cn_tile_fn *fn, int from, const name_ref *name) {
  for (int k = from; k < fn->n_stmts; k++) {
    const stmt *s = &fn->stmts[k];
    if (s->kind == ST_CONTRACTION && same(name, s->c->out.name, s->c->out.len)) return s;
  }
  return NULL;
}

/* What the body must hold regardless of the arguments; `end`: where its statements end. */
static bool check_body(cn_tile_fn *fn, cn_tile_src *src, size_t end) {
  int n = fn->n_stmts;
  for (int k = 0; k < n; k++) {
    const stmt *s = &fn->stmts[k];
    const name_ref *t = &s->target;
    if (s->kind == ST_RETURN && k != n - 1) {
      cn_tile_fail_at(src, fn->stmts[k + 1].at,
                      s->bare ? "a statement after an expression (only the last statement may be a "
                                "bare expression: the result)"
                              : "a statement after return");
      return false;
    }
    if (s->kind == ST_OUTPUT && !contraction_of(fn, k + 1, t)) {
      cn_tile_fail_at(src, t->at, "no contraction after this TensorOutput writes '%.*s'",
                      (int)t->len, t->name);
      return false;
    }
    if (s->kind == ST_CONSTRAINT && !contraction_of(fn, 0, t)) {
      cn_tile_fail_at(src, t->at, "no contraction writes '%.*s' (a constraint applies to one)",
                      (int)t->len, t->name);
      return false;
    }
    fn->max_names +=
        s->kind == ST_DECLARE_DIMS || s->kind == ST_DECLARE_INDEXES || s->kind == ST_BIND_DIMS
            ? s->n_names
            : 1;
  }
  if (n == 0 || fn->stmts[n - 1].kind != ST_RETURN) {
    cn_tile_fail_at(src, end,
                    src->cpp ? "the body has no result: end it with `return NAME;`"
                             : "the body has no result: end it with `return NAME`");
    return false;
  }
  return true;
}

static bool is_name(const char *s) {
  if (!s || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return false;
  return true;
}

cn_tile_fn *cn_tile_fn_create(cn_ctx *ctx, const char *name, int n_params,
                              const char *const *params, const char *body, const char *file,
                              int line, int col) {
  if (!ctx) return NULL;
  if (!is_name(name) || !body || n_params < 0 || (n_params && !params)) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_tile_fn_create: %s",
            !is_name(name) ? "the name must be an identifier" : "missing body or parameters");
    return NULL;
  }
  cn_tile_fn *fn = cn_alloc(ctx, sizeof *fn);
  if (!fn || !(fn->name = cn_strdup(ctx, name)) ||
      !(fn->params = cn_alloc(ctx, sizeof *fn->params * (size_t)(n_params + 1))) ||
      !(fn->kinds = cn_alloc(ctx, sizeof *fn->kinds * (size_t)(n_params + 1))))
    return NULL;
  fn->n_params = fn->max_names = n_params;
  for (int i = 0; i < n_params; i++) {
    if (!is_name(params[i])) {
      cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': parameter %d (\"%s\") is not a name", name,
              i + 1, params[i] ? params[i] : "NULL");
      return NULL;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(params[i], params[j]) == 0) {
        cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': parameter '%s' is repeated", name,
                params[i]);
        return NULL;
      }
    if (!(fn->params[i].name = cn_strdup(ctx, params[i]))) return NULL;
    fn->params[i].len = strlen(params[i]);
  }
  cn_tile_src src = {ctx,
                     cn_strdup(ctx, body),
                     cn_strdup(ctx, file ? file : name),
                     line > 0 ? line : 1,
                     col > 0 ? col : 1,
                     false,
                     false};
  if (!src.text || !src.file) return NULL;
  src.cpp = looks_cpp(src.text);
  size_t end = strlen(src.text);
  if (!(src.cpp ? read_cpp(fn, &src, &end) : split(fn, &src)) || !check_body(fn, &src, end))
    return NULL;
  fn->src = src;
  return fn;
}

/* ---- Application ---- */

/* A TensorOutput waiting for its contraction. */
typedef struct {
  name_ref name;
  int rank;
  int64_t dims[CN_MAX_RANK];
  bool done;
} pending_output;

typedef struct {
  cn_graph *g;
  const cn_tile_fn *fn;
  cn_tile_src src;
  cn_tile_name *names;
  int n_names;
  pending_output *outputs;
  int n_outputs;
} env;

static cn_tile_scope scope_of(const env *ev) {
  return (cn_tile_scope){ev->n_names, ev->names};
}

static const cn_tile_name *lookup(const env *ev, const char *name, size_t len) {
  cn_tile_scope sc = scope_of(ev);
  return cn_tile_lookup(&sc, name, len);
}

static pending_output *pending(env *ev, const char *name, size_t len) {
  for (int i = 0; i < ev->n_outputs; i++)
    if (!ev->outputs[i].done && same(&ev->outputs[i].name, name, len)) return &ev->outputs[i];
  return NULL;
}

static cn_tile_name *bind(env *ev, const char *name, size_t len, cn_tile_name_kind kind) {
  CN_ASSERT(ev->n_names < ev->fn->max_names);
  cn_tile_name *e = &ev->names[ev->n_names++];
  *e = (cn_tile_name){.name = name, .len = len, .kind = kind};
  return e;
}

static const char *kind_name(cn_tile_name_kind kind) {
  return kind == CN_TILE_TENSOR ? "a tensor" : kind == CN_TILE_INDEX ? "an index" : "a dim";
}

/* A name taking a new meaning must not be an output waiting for its contraction. */
static bool free_name(env *ev, const name_ref *n) {
  if (!pending(ev, n->name, n->len)) return true;
  cn_tile_fail_at(&ev->src, n->at, "'%.*s' is declared by TensorOutput: its contraction defines it",
                  (int)n->len, n->name);
  return false;
}

static bool bind_dims(env *ev, const stmt *s) {
  const name_ref *t = &s->target;
  const cn_tile_name *e = lookup(ev, t->name, t->len);
  if (!e || e->kind != CN_TILE_TENSOR) {
    cn_tile_fail_at(&ev->src, t->at, e ? "'%.*s' is %s, not a tensor" : "unknown tensor '%.*s'%s",
                    (int)t->len, t->name, e ? kind_name(e->kind) : "");
    return false;
  }
  if (!cn_tile_check_known(&ev->src, t->at, e)) return false;
  if (s->n_names != e->rank) {
    cn_tile_fail_at(&ev->src, t->at, "'%.*s' has %d axes (%s) but bind_dims names %d", (int)t->len,
                    t->name, e->rank, cn_tensor_shape(e->tensor), s->n_names);
    return false;
  }
  const int64_t *dims = e->dims; /* names never move: their array is allocated whole */
  for (int a = 0; a < s->n_names; a++) {
    const name_ref *n = &s->names[a];
    const cn_tile_name *d = lookup(ev, n->name, n->len);
    if (d && d->kind == CN_TILE_DIM && d->value != dims[a]) {
      cn_tile_fail_at(&ev->src, n->at, "dim %.*s is %lld but axis %d of '%.*s' has size %lld",
                      (int)n->len, n->name, (long long)d->value, a, (int)t->len, t->name,
                      (long long)dims[a]);
      return false;
    }
    if (d && (d->kind == CN_TILE_TENSOR || d->kind == CN_TILE_INDEX)) {
      cn_tile_fail_at(&ev->src, n->at, "'%.*s' is %s, not a dim", (int)n->len, n->name,
                      kind_name(d->kind));
      return false;
    }
    if (!free_name(ev, n)) return false;
    if (!d || d->kind == CN_TILE_UNSET) bind(ev, n->name, n->len, CN_TILE_DIM)->value = dims[a];
  }
  return true;
}

static bool output(env *ev, const stmt *s) {
  const name_ref *t = &s->target;
  if (lookup(ev, t->name, t->len) || pending(ev, t->name, t->len)) {
    cn_tile_fail_at(&ev->src, t->at, "'%.*s' is already bound", (int)t->len, t->name);
    return false;
  }
  pending_output *o = &ev->outputs[ev->n_outputs++];
  *o = (pending_output){.name = *t, .rank = s->n_exprs};
  cn_tile_scope sc = scope_of(ev);
  for (int x = 0; x < s->n_exprs; x++) {
    if (!cn_tile_eval_int(&ev->src, &sc, s->exprs[x], &o->dims[x])) return false;
    if (o->dims[x] < 1) { /* as a contraction's size (tile.c eval_size) */
      cn_tile_fail_at(&ev->src, cn_tile_expr_start(s->exprs[x]), "dim %lld must be at least 1",
                      (long long)o->dims[x]);
      return false;
    }
  }
  return true;
}

static bool contraction(env *ev, const stmt *s) {
  const cn_tile_access *o = &s->c->out;
  cn_tile_constraint extra[CN_TILE_MAX_CONSTRAINTS];
  int n_extra = 0;
  const cn_tile_fn *fn = ev->fn;
  for (int k = 0; k < fn->n_stmts; k++) {
    const stmt *ck = &fn->stmts[k];
    if (ck->kind != ST_CONSTRAINT || !same(&ck->target, o->name, o->len)) continue;
    if (n_extra == CN_TILE_MAX_CONSTRAINTS) {
      cn_tile_fail_at(&ev->src, ck->at, "more than %d constraints", CN_TILE_MAX_CONSTRAINTS);
      return false;
    }
    extra[n_extra++] = ck->cons;
  }
  pending_output *p = pending(ev, o->name, o->len);
  cn_tile_scope sc = scope_of(ev);
  cn_tensor *t = cn_tile_contract(ev->g, &ev->src, &sc, s->c, p ? p->rank : -1, p ? p->dims : NULL,
                                  n_extra, extra);
  if (!t) return false;
  if (p) p->done = true;
  return cn_tile_tensor_name(ev->g, t, bind(ev, o->name, o->len, CN_TILE_TENSOR));
}

/* ---- Elementwise expressions ---- */

/* A constant (integer or float) or a tensor with its memory-order dims. */
typedef struct {
  cn_tensor *t; /* NULL: a constant */
  bool is_int;
  int64_t i;
  double f;
  int rank;
  int64_t dims[CN_MAX_RANK];
  bool fresh; /* built by this expression (so it may take the statement's name) */
} value;

static bool eval(env *ev, const cn_tile_expr *e, value *out);

static double as_double(const value *v) {
  return v->is_int ? (double)v->i : v->f;
}

static cn_tensor *to_tensor(env *ev, const value *v) {
  if (v->t) return v->t;
  cn_tensor *t = cn_tensor_scalar(ev->g, as_double(v)); /* Tile's scalars have rank 0 */
  if (!t) ev->src.failed = true;
  return t;
}

/* The memory-order row lengths of t (batch, output, input): solved, since its dims are known;
 * false only when memory runs out. */
static bool rows_of(env *ev, cn_tensor *t, int n[3]) {
  static const cn_row_kind order[3] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};
  for (int k = 0; k < 3; k++)
    if ((n[k] = cn_shape_row_dims(ev->g->shapes, t->shape, order[k], NULL, 0)) < 0) {
      ev->src.failed = true;
      return false;
    }
  return true;
}

/* op applied to the operands with NumPy broadcasting: one einsum whose result has output axes
 * a, b, c, ... and whose operands name their axes by the result's (a stretched axis reads its
 * only cell: the fixed index 0). */
static bool pointwise(env *ev, size_t at, cn_op op, int n, const value *args, const char *label,
                      value *out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; k < n; k++) out->rank = args[k].rank > out->rank ? args[k].rank : out->rank;
  int r = out->rank;
  for (int x = 0; x < r; x++) {
    out->dims[x] = 1;
    for (int k = 0; k < n; k++) {
      int m = x - (r - args[k].rank);
      if (m < 0 || args[k].dims[m] == 1 || args[k].dims[m] == out->dims[x]) continue;
      if (out->dims[x] != 1) {
        cn_tile_fail_at(&ev->src, at,
                        "cannot broadcast: axis %d of the result is %lld in one operand and %lld "
                        "in another",
                        x, (long long)out->dims[x], (long long)args[k].dims[m]);
        return false;
      }
      out->dims[x] = args[k].dims[m];
    }
  }
  cn_tensor *ts[3];
  cn_sbuf sb = {0};
  for (int k = 0; k < n; k++) {
    int rows[3], from[3];
    if (!(ts[k] = to_tensor(ev, &args[k])) || !rows_of(ev, ts[k], rows)) {
      cn_sbuf_free(&sb);
      return false;
    }
    CN_ASSERT(rows[0] + rows[1] + rows[2] == args[k].rank);
    from[0] = 0, from[1] = rows[0], from[2] = rows[0] + rows[1];
    static const int spec_order[3] = {0, 2, 1}; /* batch | input -> output */
    static const char *const seps[3] = {"|", "->", ""};
    if (k) cn_sbuf_putc(&sb, ';');
    for (int w = 0; w < 3; w++) {
      int row = spec_order[w];
      for (int a = 0; a < rows[row]; a++) {
        int m = from[row] + a, x = m + (r - args[k].rank);
        cn_sbuf_printf(&sb, " %c", args[k].dims[m] == out->dims[x] ? 'a' + x : '0');
      }
      cn_sbuf_puts(&sb, seps[w]);
    }
  }
  cn_sbuf_puts(&sb, "=>|->"); /* rows written out: an empty spec would leave them inferred */
  for (int x = 0; x < r; x++) cn_sbuf_printf(&sb, " %c", 'a' + x);
  const char *spec = cn_sbuf_finish(ev->src.ctx, &sb);
  out->t = spec ? cn_tensor_einsum(ev->g, spec, CN_OP_ADD, op, n, ts) : NULL;
  if (!out->t || cn_tensor_set_label(out->t, label) != CN_OK) {
    ev->src.failed = true; /* the tensor layer's message stands */
    return false;
  }
  out->fresh = true;
  return true;
}

static bool apply1(env *ev, size_t at, cn_op op, const value *a, value *out) {
  return pointwise(ev, at, op, 1, a, cn_op_name(op), out);
}

static bool apply2(env *ev, size_t at, cn_op op, const value *a, const value *b, value *out) {
  value args[2] = {*a, *b};
  return pointwise(ev, at, op, 2, args, cn_op_name(op), out);
}

/* Integer arithmetic of dims, as in sizes: floor division, overflow and division by zero are
 * errors. */
static bool int_op(env *ev, const cn_tile_expr *e, int64_t a, int64_t b, int64_t *out) {
  bool ok = true;
  switch (e->op) {
  case CN_TB_ADD: ok = !__builtin_add_overflow(a, b, out); break;
  case CN_TB_SUB: ok = !__builtin_sub_overflow(a, b, out); break;
  case CN_TB_MUL: ok = !__builtin_mul_overflow(a, b, out); break;
  default:
    if (b == 0) {
      cn_tile_fail_at(&ev->src, e->at, "division by zero");
      return false;
    }
    ok = !(a == INT64_MIN && b == -1);
    *out = a / b - (a % b != 0 && (a < 0) != (b < 0));
    break;
  }
  if (!ok) cn_tile_fail_at(&ev->src, e->at, "integer overflow");
  return ok;
}

/* Two constants: integers stay integers (dims), a float makes the result a float. */
static bool fold(env *ev, const cn_tile_expr *e, const value *a, const value *b, value *out) {
  memset(out, 0, sizeof *out);
  double x = as_double(a), y = as_double(b);
  bool ints = a->is_int && b->is_int;
  out->is_int = ints || e->op >= CN_TB_EQ;
  switch (e->op) {
  case CN_TB_EQ: out->i = ints ? a->i == b->i : x == y; return true;
  case CN_TB_NE: out->i = ints ? a->i != b->i : x != y; return true;
  case CN_TB_LT: out->i = ints ? a->i < b->i : x < y; return true;
  case CN_TB_GT: out->i = ints ? a->i > b->i : x > y; return true;
  case CN_TB_LE: out->i = ints ? a->i <= b->i : x <= y; return true;
  case CN_TB_GE: out->i = ints ? a->i >= b->i : x >= y; return true;
  default: break;
  }
  if (ints) return int_op(ev, e, a->i, b->i, &out->i);
  out->f = e->op == CN_TB_ADD   ? x + y
           : e->op == CN_TB_SUB ? x - y
           : e->op == CN_TB_MUL ? x * y
           : e->op == CN_TB_DIV ? x / y
                                : floor(x / y);
  return true;
}

static bool binary_op(env *ev, const cn_tile_expr *e, value *out) {
  value a, b;
  if (!eval(ev, e->args[0], &a) || !eval(ev, e->args[1], &b)) return false;
  if (!a.t && !b.t) return fold(ev, e, &a, &b, out);
  static const cn_op direct[] = {
      [CN_TB_ADD] = CN_OP_ADD, [CN_TB_SUB] = CN_OP_SUB, [CN_TB_MUL] = CN_OP_MUL,
      [CN_TB_DIV] = CN_OP_DIV, [CN_TB_EQ] = CN_OP_EQ,   [CN_TB_NE] = CN_OP_NE,
      [CN_TB_LT] = CN_OP_LT};
  switch (e->op) {
  case CN_TB_FLOORDIV:
    cn_tile_fail_at(&ev->src, e->at, "'//' divides dims; divide tensors with '/'");
    return false;
  case CN_TB_GT: return apply2(ev, e->at, CN_OP_LT, &b, &a, out);
  case CN_TB_LE:
  case CN_TB_GE: { /* a <= b is a < b or a == b (false with a NaN, as a comparison should be) */
    value lt, eq;
    const value *lo = e->op == CN_TB_LE ? &a : &b, *hi = e->op == CN_TB_LE ? &b : &a;
    return apply2(ev, e->at, CN_OP_LT, lo, hi, &lt) && apply2(ev, e->at, CN_OP_EQ, &a, &b, &eq) &&
           apply2(ev, e->at, CN_OP_OR, &lt, &eq, out);
  }
  default: return apply2(ev, e->at, direct[e->op], &a, &b, out);
  }
}

static const struct {
  const char *name;
  int arity;
  cn_op op; /* sigmoid is composed: recip(1 + exp(-x)), recip last */
} calls[] = {{"sqrt", 1, CN_OP_SQRT}, {"exp", 1, CN_OP_EXP},      {"log", 1, CN_OP_LOG},
             {"sin", 1, CN_OP_SIN},   {"cos", 1, CN_OP_COS},      {"tanh", 1, CN_OP_TANH},
             {"pow", 2, CN_OP_POW},   {"select", 3, CN_OP_WHERE}, {"sigmoid", 1, CN_OP_RECIP}};

static bool call(env *ev, const cn_tile_expr *e, value *out) {
  int f = 0, n_calls = (int)(sizeof calls / sizeof *calls);
  while (f < n_calls &&
         !(strlen(calls[f].name) == e->len && !strncmp(calls[f].name, e->name, e->len)))
    f++;
  if (f == n_calls) {
    cn_tile_fail_at(
        &ev->src, e->at,
        "unknown function '%.*s' (sqrt, exp, log, sin, cos, tanh, sigmoid, pow, select)",
        (int)e->len, e->name);
    return false;
  }
  if (e->n_args != calls[f].arity) {
    cn_tile_fail_at(&ev->src, e->at, "'%s' takes %d argument%s, got %d", calls[f].name,
                    calls[f].arity, calls[f].arity > 1 ? "s" : "", e->n_args);
    return false;
  }
  value args[3];
  for (int k = 0; k < e->n_args; k++)
    if (!eval(ev, e->args[k], &args[k])) return false;
  if (strcmp(calls[f].name, "sigmoid") == 0) { /* 1 / (1 + exp(-x)) */
    value neg, ex, den, one = {.is_int = true, .i = 1};
    return apply1(ev, e->at, CN_OP_NEG, &args[0], &neg) &&
           apply1(ev, e->at, CN_OP_EXP, &neg, &ex) &&
           apply2(ev, e->at, CN_OP_ADD, &one, &ex, &den) &&
           apply1(ev, e->at, CN_OP_RECIP, &den, out);
  }
  return pointwise(ev, e->at, calls[f].op, e->n_args, args, calls[f].name, out);
}

static bool eval(env *ev, const cn_tile_expr *e, value *out) {
  memset(out, 0, sizeof *out);
  int len = (int)e->len;
  switch (e->kind) {
  case CN_TX_INT: out->is_int = true, out->i = e->ival; return true;
  case CN_TX_FLOAT: out->f = e->fval; return true;
  case CN_TX_CALL: return call(ev, e, out);
  case CN_TX_BINARY: return binary_op(ev, e, out);
  case CN_TX_NEG: {
    value a;
    if (!eval(ev, e->args[0], &a)) return false;
    if (a.t) return apply1(ev, e->at, CN_OP_NEG, &a, out);
    *out = a;
    if (!a.is_int) out->f = -a.f;
    if (a.is_int && __builtin_sub_overflow(0, a.i, &out->i)) {
      cn_tile_fail_at(&ev->src, e->at, "integer overflow");
      return false;
    }
    return true;
  }
  case CN_TX_NAME: break;
  }
  const cn_tile_name *n = lookup(ev, e->name, e->len);
  if (n && n->kind == CN_TILE_DIM) {
    out->is_int = true;
    out->i = n->value;
    return true;
  }
  if (n && n->kind == CN_TILE_TENSOR) {
    if (!cn_tile_check_known(&ev->src, e->at, n)) return false;
    out->t = n->tensor;
    out->rank = n->rank;
    memcpy(out->dims, n->dims, sizeof out->dims);
    return true;
  }
  if (n && n->kind == CN_TILE_UNSET)
    cn_tile_fail_at(&ev->src, e->at,
                    "dim '%.*s' has no value yet (bind it with bind_dims or assign it)", len,
                    e->name);
  else if (n)
    cn_tile_fail_at(&ev->src, e->at, "'%.*s' is an index: indices appear only in contractions", len,
                    e->name);
  else if (pending(ev, e->name, e->len))
    cn_tile_fail_at(&ev->src, e->at, "'%.*s' is used before its contraction", len, e->name);
  else
    cn_tile_fail_at(&ev->src, e->at, "unknown name '%.*s'", len, e->name);
  return false;
}

static bool assign(env *ev, const stmt *s) {
  const name_ref *t = &s->target;
  value v;
  if (!free_name(ev, t) || !eval(ev, s->exprs[0], &v)) return false;
  if (!v.t && v.is_int) {
    bind(ev, t->name, t->len, CN_TILE_DIM)->value = v.i;
    return true;
  }
  cn_tensor *tensor = to_tensor(ev, &v);
  char label[128];
  snprintf(label, sizeof label, "%.*s", (int)t->len, t->name);
  if (!tensor || ((v.fresh || !v.t) && cn_tensor_set_label(tensor, label) != CN_OK)) {
    ev->src.failed = true;
    return false;
  }
  return cn_tile_tensor_name(ev->g, tensor, bind(ev, t->name, t->len, CN_TILE_TENSOR));
}

static bool run_stmt(env *ev, const stmt *s, cn_tensor **result) {
  switch (s->kind) {
  case ST_DECLARE_DIMS:
  case ST_DECLARE_INDEXES:
    for (int k = 0; k < s->n_names; k++) {
      if (!free_name(ev, &s->names[k])) return false;
      bind(ev, s->names[k].name, s->names[k].len,
           s->kind == ST_DECLARE_DIMS ? CN_TILE_UNSET : CN_TILE_INDEX);
    }
    return true;
  case ST_BIND_DIMS: return bind_dims(ev, s);
  case ST_OUTPUT: return output(ev, s);
  case ST_ASSIGN: return assign(ev, s);
  case ST_CONTRACTION: return contraction(ev, s);
  case ST_CONSTRAINT: return true; /* applied by the contraction of its tensor */
  case ST_RETURN: {
    value v;
    if (!eval(ev, s->exprs[0], &v) || !(*result = to_tensor(ev, &v))) return false;
    if (v.fresh && cn_tensor_set_label(*result, ev->fn->name) != CN_OK) return false;
    return true;
  }
  }
  return false;
}

cn_tensor *cn_tile_fn_apply(cn_graph *g, const cn_tile_fn *fn, int n_args,
                            const cn_tile_arg *args) {
  if (!g) return NULL;
  cn_ctx *ctx = g->ctx;
  if (!fn || n_args != fn->n_params || (n_args && !args)) {
    cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': %d parameter(s), %d argument(s) given",
            fn ? fn->name : "NULL", fn ? fn->n_params : 0, n_args);
    return NULL;
  }
  if (fn->src.ctx != ctx) {
    cn_fail(ctx, CN_ERR_INVALID, "tile function '%s' belongs to another context", fn->name);
    return NULL;
  }
  env ev = {g, fn, fn->src, NULL, 0, NULL, 0};
  ev.names = cn_alloc(ctx, sizeof *ev.names * (size_t)(fn->max_names + 1));
  ev.outputs = cn_alloc(ctx, sizeof *ev.outputs * (size_t)(fn->n_stmts + 1));
  if (!ev.names || !ev.outputs) return NULL;
  for (int i = 0; i < n_args; i++) {
    const name_ref *p = &fn->params[i];
    if (fn->kinds[i] != PARAM_ANY && (fn->kinds[i] == PARAM_TENSOR) != (args[i].tensor != NULL)) {
      cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': argument %d ('%s') must be %s (its header)",
              fn->name, i + 1, p->name, fn->kinds[i] == PARAM_TENSOR ? "a tensor" : "an integer");
      return NULL;
    }
    if (args[i].tensor && args[i].tensor->g != g) {
      cn_fail(ctx, CN_ERR_INVALID, "tile function '%s': argument %d ('%s') is from another graph",
              fn->name, i + 1, p->name);
      return NULL;
    }
    if (args[i].tensor) {
      if (!cn_tile_tensor_name(g, args[i].tensor, bind(&ev, p->name, p->len, CN_TILE_TENSOR)))
        return NULL;
    } else
      bind(&ev, p->name, p->len, CN_TILE_DIM)->value = args[i].dim;
  }
  cn_tensor *result = NULL;
  for (int k = 0; k < fn->n_stmts; k++)
    if (!run_stmt(&ev, &fn->stmts[k], &result)) return NULL;
  return result;
}
