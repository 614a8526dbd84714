/* Tile functions, the reader (issue 7, tile-edsl): the body of a seed function in its Python or
 * its C++ flavor, split into statements and parsed once by cn_tile_fn_create (function.h);
 * fn_apply.c evaluates them.
 *
 * Python flavor. Statements are separated by newlines or ';' outside brackets (a statement may
 * continue over lines inside brackets or after a `\`); `#` starts a comment. The statements:
 *   M, N = TensorDims(2)   N = TensorDim()   i, j = TensorIndexes(2)   i = TensorIndex()
 *                          declarations: dims without a value yet, index variables
 *   I.bind_dims(M, N)      I's axes in memory order (batch, output, input) as dims; a dim bound
 *                          twice must have one size
 *   O = TensorOutput(N, (M + 1) / 2)   the output of a later contraction, with its dims
 *   O[i] >= I[2 * i + j]   a contraction (compile.c; either bracket style); without TensorOutput
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
 * Invariants: every failure is positioned (FILE:LINE:COL, the line, a caret) at the statement
 * part at fault, except the checks of cn_tile_fn_create's own arguments (name, parameters). */
#include "tile/function.h"

#include <ctype.h>
#include <string.h>

bool cn_tile_same_name(const cn_tile_name_ref *a, const char *name, size_t len) {
  return a->len == len && strncmp(a->name, name, len) == 0;
}

/* ---- Parsing ---- */

static bool name_ref_at(cn_tile_reader *r, cn_tile_name_ref *out, const char *wanted) {
  if (r->tok.kind != CN_TILE_TOK_NAME) return cn_tile_unexpected(r, wanted);
  *out = (cn_tile_name_ref){r->src->text + r->tok.at, r->tok.len, r->tok.at};
  return cn_tile_advance(r);
}

static bool at_end(cn_tile_reader *r, const char *wanted) {
  return !r->src->failed && (r->tok.kind == CN_TILE_TOK_END || cn_tile_unexpected(r, wanted));
}

/* Whether the list of name_list ends here: at `close` (consumed), or at the statement's end
 * (close NULL: a C++ declaration). */
static bool list_ends(cn_tile_reader *r, const char *close) {
  return close ? cn_tile_accept(r, close) : r->tok.kind == CN_TILE_TOK_END;
}

/* NAME {',' NAME} up to `close`; the names in arena storage. */
static bool name_list(cn_tile_reader *r, const char *close, int *n, cn_tile_name_ref **out) {
  cn_tile_name_ref names[CN_MAX_RANK + 1];
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
static bool declaration(cn_tile_reader *r, cn_tile_stmt *s) {
  bool plural = cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorIndexes");
  s->kind = cn_tile_is(r, "TensorDims") || cn_tile_is(r, "TensorDim") ? CN_TILE_ST_DECLARE_DIMS
                                                                      : CN_TILE_ST_DECLARE_INDEXES;
  size_t at = r->tok.at;
  if (!cn_tile_advance(r) || !cn_tile_expect(r, "(", "'('")) return false;
  int64_t count = 1;
  if (plural) {
    if (r->tok.kind != CN_TILE_TOK_INT) return cn_tile_unexpected(r, "the number of names");
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
static bool method(cn_tile_reader *r, cn_tile_stmt *s) {
  size_t at = r->tok.at;
  if (cn_tile_is(r, "bind_dims")) {
    s->kind = CN_TILE_ST_BIND_DIMS;
    return cn_tile_advance(r) && cn_tile_expect(r, "(", "'('") &&
           name_list(r, ")", &s->n_names, &s->names) && at_end(r, "the end of the statement");
  }
  if (cn_tile_is(r, "add_constraint")) {
    s->kind = CN_TILE_ST_CONSTRAINT;
    return cn_tile_advance(r) && cn_tile_expect(r, "(", "'('") &&
           cn_tile_parse_constraint(r, &s->cons) && cn_tile_expect(r, ")", "')'") &&
           at_end(r, "the end of the statement");
  }
  if (r->tok.kind == CN_TILE_TOK_NAME)
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
  } while (depth > 0 && r.tok.kind != CN_TILE_TOK_END);
  return cn_tile_is(&r, "+=") || cn_tile_is(&r, "*=") || cn_tile_is(&r, ">=") ||
         cn_tile_is(&r, "<=") || cn_tile_is(&r, "=");
}

static bool one_expr(cn_tile_reader *r, cn_tile_stmt *s) {
  s->n_exprs = 1;
  return (s->exprs = cn_alloc(r->src->ctx, sizeof *s->exprs)) &&
         (s->exprs[0] = cn_tile_parse_expr(r, true)) && at_end(r, "the end of the statement");
}

static bool parse_stmt(cn_tile_reader *r, cn_tile_stmt *s) {
  cn_ctx *ctx = r->src->ctx;
  s->at = r->tok.at;
  if (cn_tile_is(r, "return")) {
    s->kind = CN_TILE_ST_RETURN;
    return cn_tile_advance(r) && one_expr(r, s);
  }
  cn_tile_reader start = *r;
  if (r->tok.kind == CN_TILE_TOK_NAME && is_contraction(*r)) {
    s->kind = CN_TILE_ST_CONTRACTION;
    return (s->c = cn_alloc(ctx, sizeof *s->c)) && cn_tile_parse_contraction(r, s->c);
  }
  if (r->tok.kind == CN_TILE_TOK_NAME) {
    cn_tile_name_ref first;
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
        s->kind = CN_TILE_ST_OUTPUT;
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
      s->kind = CN_TILE_ST_ASSIGN;
      return one_expr(r, s);
    }
    if (r->src->failed) return false;
  }
  *r = start; /* a bare expression: the result when it is the last statement */
  s->kind = CN_TILE_ST_RETURN;
  s->bare = true;
  return one_expr(r, s);
}

/* A C++ statement: the declarations `TensorDim M, N` and `TensorIndex i, j`, an assignment
 * with a type (`auto O = ...`, `Tensor O = ...`), or a statement of the Python flavor; an
 * expression statement does nothing in C++, so it is refused rather than taken as the result. */
static bool parse_cpp_stmt(cn_tile_reader *r, cn_tile_stmt *s) {
  s->at = r->tok.at;
  if (cn_tile_is(r, "TensorDim") || cn_tile_is(r, "TensorIndex")) {
    s->kind = cn_tile_is(r, "TensorDim") ? CN_TILE_ST_DECLARE_DIMS : CN_TILE_ST_DECLARE_INDEXES;
    if (!cn_tile_advance(r) || !name_list(r, NULL, &s->n_names, &s->names)) return false;
    return s->n_names > 0 || cn_tile_unexpected(r, "a name");
  }
  if (cn_tile_is(r, "auto") || cn_tile_is(r, "Tensor")) {
    if (!cn_tile_advance(r)) return false;
    cn_tile_reader named = *r;
    cn_tile_name_ref t;
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
  if (r.tok.kind == CN_TILE_TOK_END) return true; /* blank or comment */
  if (!cn_arena_grow(src->ctx, (void **)&fn->stmts, &fn->cap_stmts, fn->n_stmts + 1,
                     sizeof *fn->stmts)) {
    src->failed = true;
    return false;
  }
  cn_tile_stmt *s = &fn->stmts[fn->n_stmts++];
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
 * No Python statement starts so, so no Python body changes meaning. A word is compared before
 * anything past it is read: strncmp stops at the text's NUL, so s + n lies within the text only
 * once the word matched (issue 27: a body ending in "Tens" was read past its end). */
static bool cpp_start(const char *s) {
  static const char *const words[] = {"TensorDim", "TensorIndex", "auto", "Tensor"};
  s += strspn(s, " \t\r\n");
  if (strncmp(s, "//", 2) == 0 || strncmp(s, "/*", 2) == 0 || *s == '{' || *s == '}') return true;
  for (size_t k = 0; k < sizeof words / sizeof *words; k++) {
    size_t n = strlen(words[k]);
    if (strncmp(s, words[k], n) != 0) continue;
    size_t blank = strspn(s + n, " \t\r\n");
    if (blank > 0 && (isalpha((unsigned char)s[n + blank]) || s[n + blank] == '_')) return true;
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
  if (r.tok.kind == CN_TILE_TOK_END) return true;
  if (!add_stmt(fn, src, begin, end)) return false;
  size_t last = r.tok.at + r.tok.len;
  while (r.tok.kind != CN_TILE_TOK_END) {
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
static bool header_param(cn_tile_reader *r, cn_tile_name_ref *p, cn_tile_param_kind *kind) {
  static const char *const ints[] = {"int", "int64_t", "size_t", "long", "TensorDim"};
  if (r->src->failed || (cn_tile_is(r, "const") && !cn_tile_advance(r))) return false;
  if (cn_tile_is(r, "std")) {
    cn_tile_fail_at(r->src, r->tok.at,
                    "std::vector parameters are not supported: pass each element as an integer "
                    "parameter (int64_t s0, int64_t s1)");
    return false;
  }
  *kind = cn_tile_is(r, "Tensor") ? CN_TILE_PARAM_TENSOR : CN_TILE_PARAM_ANY;
  for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
    if (cn_tile_is(r, ints[k])) *kind = CN_TILE_PARAM_DIM;
  if (*kind == CN_TILE_PARAM_ANY || r->tok.kind != CN_TILE_TOK_NAME)
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
  cn_tile_name_ref fname = {0}, *names = NULL;
  cn_tile_param_kind *kinds = NULL;
  int n = 0, cap_names = 0, cap_kinds = 0;
  if (!cn_tile_advance(r) || !name_ref_at(r, &fname, "the function's name")) return false;
  if (!cn_tile_same_name(&fname, fn->name, strlen(fn->name))) {
    cn_tile_fail_at(r->src, fname.at, "the header names '%.*s' but the function is '%s'",
                    (int)fname.len, fname.name, fn->name);
    return false;
  }
  if (!cn_tile_expect(r, "(", "'('")) return false;
  if (!cn_tile_accept(r, ")"))
    for (;;) {
      cn_tile_name_ref p;
      cn_tile_param_kind k;
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
        if (cn_tile_same_name(&names[j], names[i].name, names[i].len)) {
          cn_tile_fail_at(r->src, names[i].at, "parameter '%.*s' is repeated", (int)names[i].len,
                          names[i].name);
          return false;
        }
      char *copy = cn_alloc(ctx, names[i].len + 1); /* messages print it as a string */
      if (!copy) return false;
      memcpy(copy, names[i].name, names[i].len);
      fn->params[i] = (cn_tile_name_ref){copy, names[i].len, 0};
    }
    fn->n_params = fn->max_names = n;
  } else if (n != fn->n_params) {
    cn_tile_fail_at(r->src, fname.at, "the header has %d parameter%s but the function %d", n,
                    n == 1 ? "" : "s", fn->n_params);
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!cn_tile_same_name(&names[i], fn->params[i].name, fn->params[i].len)) {
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
                ahead.tok.kind == CN_TILE_TOK_NAME && cn_tile_advance(&ahead) &&
                cn_tile_is(&ahead, "(");
  if (src->failed || (braced && !header(&r, fn, &begin)) || !split_cpp(fn, src, begin, braced, end))
    return false;
  if (!braced) return true;
  if (!cn_tile_reader_init(&r, src, *end + 1, len)) return false;
  return r.tok.kind == CN_TILE_TOK_END ||
         cn_tile_unexpected(&r, "nothing after the function's closing '}'");
}

static const cn_tile_stmt *contraction_of(const cn_tile_fn *fn, int from,
                                          const cn_tile_name_ref *name) {
  for (int k = from; k < fn->n_stmts; k++) {
    const cn_tile_stmt *s = &fn->stmts[k];
    if (s->kind == CN_TILE_ST_CONTRACTION && cn_tile_same_name(name, s->c->out.name, s->c->out.len))
      return s;
  }
  return NULL;
}

/* What the body must hold regardless of the arguments; `end`: where its statements end. */
static bool check_body(cn_tile_fn *fn, cn_tile_src *src, size_t end) {
  int n = fn->n_stmts;
  for (int k = 0; k < n; k++) {
    const cn_tile_stmt *s = &fn->stmts[k];
    const cn_tile_name_ref *t = &s->target;
    if (s->kind == CN_TILE_ST_RETURN && k != n - 1) {
      cn_tile_fail_at(src, fn->stmts[k + 1].at,
                      s->bare ? "a statement after an expression (only the last statement may be a "
                                "bare expression: the result)"
                              : "a statement after return");
      return false;
    }
    if (s->kind == CN_TILE_ST_OUTPUT && !contraction_of(fn, k + 1, t)) {
      cn_tile_fail_at(src, t->at, "no contraction after this TensorOutput writes '%.*s'",
                      (int)t->len, t->name);
      return false;
    }
    if (s->kind == CN_TILE_ST_CONSTRAINT && !contraction_of(fn, 0, t)) {
      cn_tile_fail_at(src, t->at, "no contraction writes '%.*s' (a constraint applies to one)",
                      (int)t->len, t->name);
      return false;
    }
    fn->max_names += s->kind == CN_TILE_ST_DECLARE_DIMS || s->kind == CN_TILE_ST_DECLARE_INDEXES ||
                             s->kind == CN_TILE_ST_BIND_DIMS
                         ? s->n_names
                         : 1;
  }
  if (n == 0 || fn->stmts[n - 1].kind != CN_TILE_ST_RETURN) {
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
