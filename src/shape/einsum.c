/* The einsum spec parser, printer and structural equality (see einsum.h for the grammar).
 *
 * The parser is a hand-written recursive descent over the text with one character of lookahead;
 * every syntax failure goes through `syntax_error`, which records the 1-based column and a caret
 * line (an allocation failure leaves cn_alloc's CN_ERR_NOMEM), so no input can leave a half-built
 * tree behind (the caller gets NULL and the message).
 * Normalizations, so that printing and parsing round-trip: an affine axis with stride 1, no
 * stride name, no offset and no kernel is a plain label; "..." records the row variable of its
 * row kind ("batch", "input", "output") with `ellipsis` set.
 * The printer uses single-char mode whenever every label is one letter, no axis is affine and no
 * two fixed indices touch; otherwise multi-char mode with ", " between axes and spaced
 * separators ("a, b | c -> d; e => f"), adding a trailing comma to the first non-empty row when
 * nothing else would select multi-char mode. It expects the parser's normal forms (an AFFINE
 * axis has a stride, offset or kernel; stride 1 and dilation 1 beside a name; dilation 1 and no
 * name without a kernel). */
#include "shape/einsum.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  cn_ctx *ctx;
  const char *text;
  size_t pos;
  bool multichar;
  bool failed;
  int shape_axes; /* the axes of the shape being parsed, over its three rows */
} parser;

static bool is_ident_start(char c) {
  return isalpha((unsigned char)c) || c == '_';
}
static bool is_ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_';
}

static void syntax_error(parser *p, size_t at, const char *fmt, ...) CN_PRINTF(3, 4);
static void syntax_error(parser *p, size_t at, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = true;
  cn_source src = {NULL, "einsum spec", p->text, 1, 1};
  va_list ap;
  va_start(ap, fmt);
  cn_fail_at_v(p->ctx, &src, 1, (int)at + 1, fmt, ap);
  va_end(ap);
}

static void unexpected(parser *p) {
  char c = p->text[p->pos];
  if (c == '\0')
    syntax_error(p, p->pos, "unexpected end of spec");
  else if (c == '^')
    syntax_error(p, p->pos, "concatenation '^' is not supported");
  else if (isprint((unsigned char)c))
    syntax_error(p, p->pos, "unexpected '%c'", c);
  else
    syntax_error(p, p->pos, "unexpected byte 0x%02x", (unsigned)(unsigned char)c);
}

static void skip_space(parser *p) {
  while (isspace((unsigned char)p->text[p->pos])) p->pos++;
}

static char peek(parser *p) {
  skip_space(p);
  return p->text[p->pos];
}

static bool at_arrow(parser *p) { /* "=>" */
  return peek(p) == '=' && p->text[p->pos + 1] == '>';
}

static bool at_row_end(parser *p) {
  char c = peek(p);
  return c == '\0' || c == ';' || c == '|' || at_arrow(p) ||
         (c == '-' && p->text[p->pos + 1] == '>');
}

/* An identifier naming a label, a kernel, a stride, a dilation or a row variable, at an
 * identifier start; a lone '_' is the placeholder and names nothing. */
static const char *ident(parser *p) {
  skip_space(p);
  size_t start = p->pos;
  while (is_ident_char(p->text[p->pos])) p->pos++;
  size_t n = p->pos - start;
  if (n == 1 && p->text[start] == '_') {
    syntax_error(p, start, "'_' is a placeholder, not a name");
    return NULL;
  }
  char *s = cn_alloc(p->ctx, n + 1);
  if (!s) {
    p->failed = true;
    return NULL;
  }
  memcpy(s, p->text + start, n);
  return s;
}

/* A run of digits below CN_EINSUM_INT_LIMIT; the value is accumulated only while it is below
 * the limit, so no text can overflow it. */
static bool integer(parser *p, int64_t *out) {
  skip_space(p);
  size_t start = p->pos;
  int64_t v = 0;
  bool too_large = false;
  while (isdigit((unsigned char)p->text[p->pos])) {
    if (!too_large) v = v * 10 + (p->text[p->pos] - '0');
    too_large = too_large || v >= CN_EINSUM_INT_LIMIT;
    p->pos++;
  }
  if (too_large) {
    /* the digits as written (a long run cut, so the reason stays in the message) */
    int n = (int)(p->pos - start);
    syntax_error(p, start, "integer %.*s%s must be below 2^40", n > 24 ? 24 : n, p->text + start,
                 n > 24 ? "..." : "");
    return false;
  }
  *out = v;
  return true;
}

/* After the output label of an affine axis: [< | =] [+ INT] [+ [d *] IDENT]. */
static bool affine_rest(parser *p, cn_es_axis *ax) {
  char c = peek(p);
  size_t marker_at = p->pos;
  cn_es_conv conv = CN_ES_CONV_UNSPECIFIED;
  if (c == '<' || (c == '=' && p->text[p->pos + 1] != '>')) {
    conv = c == '<' ? CN_ES_CONV_VALID : CN_ES_CONV_PADDED;
    p->pos++;
  }
  bool seen_offset = false;
  while (!ax->kernel && peek(p) == '+') {
    p->pos++;
    char n = peek(p);
    size_t at = p->pos;
    if (isdigit((unsigned char)n)) {
      int64_t v;
      if (!integer(p, &v)) return false;
      if (peek(p) != '*') {
        if (seen_offset) {
          syntax_error(p, at, "the stride offset is given twice");
          return false;
        }
        ax->stride_offset = v;
        seen_offset = true;
        continue;
      }
      if (v < 1) {
        syntax_error(p, at, "dilation %lld must be at least 1", (long long)v);
        return false;
      }
      ax->dilation = v;
      p->pos++; /* '*' */
    } else if (is_ident_start(n)) {
      const char *name = ident(p);
      if (!name) return false;
      if (peek(p) != '*') {
        ax->kernel = name;
        break;
      }
      ax->dilation_name = name;
      p->pos++; /* '*' */
    } else {
      unexpected(p);
      return false;
    }
    if (!is_ident_start(peek(p))) {
      unexpected(p);
      return false;
    }
    if (!(ax->kernel = ident(p))) return false;
  }
  if (ax->kernel) {
    ax->conv = conv;
  } else if (conv != CN_ES_CONV_UNSPECIFIED) {
    syntax_error(p, marker_at, "'%c' marks a convolution but no kernel term follows",
                 p->text[marker_at]);
    return false;
  } else {
    ax->conv = CN_ES_CONV_NONE;
  }
  return true;
}

/* One axis in multi-char mode. */
static bool multichar_axis(parser *p, cn_es_axis *ax) {
  char c = peek(p);
  size_t at = p->pos;
  memset(ax, 0, sizeof *ax);
  ax->column = (int)at + 1;
  ax->stride = ax->dilation = 1;
  if (c == '_' && !is_ident_char(p->text[p->pos + 1])) {
    p->pos++;
    ax->kind = CN_ES_PLACEHOLDER;
    return true;
  }
  if (isdigit((unsigned char)c)) {
    int64_t v;
    if (!integer(p, &v)) return false;
    if (peek(p) != '*') {
      ax->kind = CN_ES_FIXED;
      ax->fixed = v;
      return true;
    }
    if (v < 1) {
      syntax_error(p, at, "stride %lld must be at least 1", (long long)v);
      return false;
    }
    ax->stride = v;
    p->pos++;
    if (!is_ident_start(peek(p))) {
      unexpected(p);
      return false;
    }
    if (!(ax->label = ident(p))) return false;
  } else if (is_ident_start(c)) {
    const char *name = ident(p);
    if (!name) return false;
    if (peek(p) == '*') {
      ax->stride_name = name;
      p->pos++;
      if (!is_ident_start(peek(p))) {
        unexpected(p);
        return false;
      }
      if (!(ax->label = ident(p))) return false;
    } else {
      ax->label = name;
    }
  } else {
    unexpected(p);
    return false;
  }
  ax->kind = CN_ES_AFFINE;
  if (!affine_rest(p, ax)) return false;
  if (ax->stride == 1 && !ax->stride_name && !ax->stride_offset && !ax->kernel)
    ax->kind = CN_ES_LABEL;
  return true;
}

typedef struct {
  cn_es_axis *v;
  int n, cap;
} axis_list;

static bool push_axis(parser *p, axis_list *l, const cn_es_axis *ax) {
  if (!cn_arena_grow(p->ctx, (void **)&l->v, &l->cap, l->n + 1, sizeof *ax)) {
    p->failed = true;
    return false;
  }
  l->v[l->n++] = *ax;
  return true;
}

/* "..." or "..name..": at the first '.'. */
static bool row_variable(parser *p, cn_es_row *row) {
  if (strncmp(p->text + p->pos, "...", 3) == 0) {
    p->pos += 3;
    row->ellipsis = true;
    row->row_var = "";
    return true;
  }
  if (strncmp(p->text + p->pos, "..", 2) != 0) {
    unexpected(p);
    return false;
  }
  p->pos += 2;
  if (!is_ident_start(p->text[p->pos])) {
    unexpected(p);
    return false;
  }
  const char *name = ident(p);
  if (!name) return false;
  if (strncmp(p->text + p->pos, "..", 2) != 0) {
    syntax_error(p, p->pos, "row variable '..%s' is not closed by '..'", name);
    return false;
  }
  p->pos += 2;
  row->row_var = name;
  return true;
}

static bool parse_row(parser *p, cn_es_row *row) {
  memset(row, 0, sizeof *row);
  axis_list lead = {0}, trail = {0};
  while (!at_row_end(p)) {
    char c = peek(p);
    size_t at = p->pos;
    if (c == '.') {
      if (row->row_var) {
        syntax_error(p, at, "a row can have only one row variable");
        return false;
      }
      if (!row_variable(p, row)) return false;
      if (p->multichar && peek(p) == ',') p->pos++;
      continue;
    }
    /* no tensor has more than CN_MAX_RANK axes, so neither can a shape of the spec: refused at
     * the first axis past it, which also bounds the work of everything after the parser (the
     * spec's labels are looked up by name, the solver pairs rows axis by axis) */
    if (++p->shape_axes > CN_MAX_RANK) {
      syntax_error(p, at, "more than %d axes in one shape (a tensor has at most %d)", CN_MAX_RANK,
                   CN_MAX_RANK);
      return false;
    }
    cn_es_axis ax;
    if (p->multichar) {
      if (c == ',') {
        syntax_error(p, at, "empty axis");
        return false;
      }
      if (!multichar_axis(p, &ax)) return false;
    } else {
      memset(&ax, 0, sizeof ax);
      ax.column = (int)at + 1;
      ax.stride = ax.dilation = 1;
      if (isalpha((unsigned char)c)) {
        char *s = cn_alloc(p->ctx, 2);
        if (!s) return p->failed = true, false;
        s[0] = c;
        ax.kind = CN_ES_LABEL;
        ax.label = s;
        p->pos++;
      } else if (isdigit((unsigned char)c)) {
        ax.kind = CN_ES_FIXED;
        if (!integer(p, &ax.fixed)) return false;
      } else if (c == '_') {
        ax.kind = CN_ES_PLACEHOLDER;
        p->pos++;
      } else {
        unexpected(p);
        return false;
      }
    }
    if (!push_axis(p, row->row_var ? &trail : &lead, &ax)) return false;
    if (p->multichar) {
      if (peek(p) == ',')
        p->pos++; /* a trailing comma is allowed: it selects multi-char mode */
      else if (!at_row_end(p) && peek(p) != '.') {
        unexpected(p);
        return false;
      }
    }
  }
  if (row->row_var) {
    row->n_leading = lead.n;
    row->leading = lead.v;
    row->n_trailing = trail.n;
    row->trailing = trail.v;
  } else {
    row->n_trailing = lead.n;
    row->trailing = lead.v;
  }
  return true;
}

static void name_ellipsis(cn_es_row *row, const char *kind) {
  if (row->ellipsis) row->row_var = kind;
}

static bool parse_shape(parser *p, cn_es_shape *sh) {
  memset(sh, 0, sizeof *sh);
  skip_space(p);
  sh->column = (int)p->pos + 1;
  p->shape_axes = 0;
  cn_es_row first, second;
  if (!parse_row(p, &first)) return false;
  if (peek(p) == '|') {
    p->pos++;
    sh->has_batch = true;
    sh->batch = first;
    if (!parse_row(p, &second)) return false;
    if (peek(p) == '-' && p->text[p->pos + 1] == '>') {
      p->pos += 2;
      sh->has_input = true;
      sh->input = second;
      if (!parse_row(p, &sh->output)) return false;
    } else {
      sh->output = second;
    }
  } else if (peek(p) == '-' && p->text[p->pos + 1] == '>') {
    p->pos += 2;
    sh->has_input = true;
    sh->input = first;
    if (!parse_row(p, &sh->output)) return false;
  } else {
    sh->output = first;
  }
  if (peek(p) == '|' || (peek(p) == '-' && p->text[p->pos + 1] == '>')) {
    unexpected(p);
    return false;
  }
  name_ellipsis(&sh->batch, "batch");
  name_ellipsis(&sh->input, "input");
  name_ellipsis(&sh->output, "output");
  return true;
}

static bool detect_multichar(const char *s) {
  for (size_t i = 0; s[i]; i++) {
    if (strchr(",*+^&<", s[i])) return true;
    if (s[i] == '=' && s[i + 1] != '>') return true;
  }
  return false;
}

cn_einsum *cn_einsum_parse(cn_ctx *ctx, const char *spec) {
  if (!spec) {
    cn_fail(ctx, CN_ERR_INVALID, "einsum spec: NULL");
    return NULL;
  }
  parser p = {ctx, spec, 0, detect_multichar(spec), false, 0};
  cn_einsum *e = cn_alloc(ctx, sizeof *e);
  if (!e || !(e->text = cn_strdup(ctx, spec))) return NULL;
  p.text = e->text;
  e->multichar = p.multichar;
  if (peek(&p) == '\0') {
    syntax_error(&p, p.pos, "empty spec");
    return NULL;
  }
  while (true) {
    if (!parse_shape(&p, &e->rhs[e->n_rhs])) return NULL;
    e->n_rhs++;
    if (peek(&p) == ';') {
      if (e->n_rhs == 3) {
        syntax_error(&p, p.pos, "at most 3 operands");
        return NULL;
      }
      p.pos++;
      continue;
    }
    if (at_arrow(&p)) {
      p.pos += 2;
      break;
    }
    /* A shape stops only at ';', '=>' or the end of the text. */
    CN_ASSERT(peek(&p) == '\0');
    syntax_error(&p, p.pos, "missing '=>'");
    return NULL;
  }
  if (!parse_shape(&p, &e->lhs)) return NULL;
  if (peek(&p) != '\0') {
    unexpected(&p);
    return NULL;
  }
  return e;
}

/* ---- Printing ----------------------------------------------------------------------------- */

static void print_coefficient(cn_sbuf *sb, int64_t value, const char *name) {
  if (name)
    cn_sbuf_printf(sb, "%s*", name);
  else if (value != 1)
    cn_sbuf_printf(sb, "%lld*", (long long)value);
}

void cn_einsum_axis_print(cn_sbuf *sb, const cn_es_axis *ax) {
  switch (ax->kind) {
  case CN_ES_LABEL: cn_sbuf_puts(sb, ax->label); break;
  case CN_ES_FIXED: cn_sbuf_printf(sb, "%lld", (long long)ax->fixed); break;
  case CN_ES_PLACEHOLDER: cn_sbuf_putc(sb, '_'); break;
  case CN_ES_AFFINE:
    print_coefficient(sb, ax->stride, ax->stride_name);
    cn_sbuf_puts(sb, ax->label);
    if (ax->conv == CN_ES_CONV_VALID) cn_sbuf_putc(sb, '<');
    if (ax->conv == CN_ES_CONV_PADDED) cn_sbuf_putc(sb, '=');
    if (ax->stride_offset) cn_sbuf_printf(sb, "+%lld", (long long)ax->stride_offset);
    if (ax->kernel) {
      cn_sbuf_putc(sb, '+');
      print_coefficient(sb, ax->dilation, ax->dilation_name);
      cn_sbuf_puts(sb, ax->kernel);
    }
    break;
  }
}

/* Multi-char text puts ", " between axes and one space on each side of '|', '->' and '=>' and
 * after ';', except at the ends of the text: a separator leaves a space pending that the next
 * item writes. */
typedef struct {
  cn_sbuf *sb;
  size_t start; /* where the spec's text begins in sb */
  bool multichar;
  bool force_comma;   /* multi-char without any comma or operator: one trailing comma */
  bool pending_space; /* a separator was written; the next item is preceded by a space */
} printer;

static void put_item(printer *pr) {
  if (pr->pending_space) cn_sbuf_putc(pr->sb, ' ');
  pr->pending_space = false;
}

static void put_separator(printer *pr, const char *sep, bool space_before) {
  if (pr->multichar) {
    if (pr->sb->len > pr->start && (space_before || pr->pending_space)) cn_sbuf_putc(pr->sb, ' ');
    pr->pending_space = true;
  }
  cn_sbuf_puts(pr->sb, sep);
}

static void print_row(printer *pr, const cn_es_row *row) {
  int n = row->n_leading + row->n_trailing + (row->row_var ? 1 : 0);
  int item = 0;
  for (int part = 0; part < 3; part++) {
    if (part == 1 && !row->row_var) continue;
    int count = part == 0 ? row->n_leading : part == 2 ? row->n_trailing : 1;
    for (int i = 0; i < count; i++, item++) {
      put_item(pr);
      if (item && pr->multichar) cn_sbuf_puts(pr->sb, ", ");
      if (part == 1) {
        if (row->ellipsis)
          cn_sbuf_puts(pr->sb, "...");
        else
          cn_sbuf_printf(pr->sb, "..%s..", row->row_var);
      } else {
        cn_einsum_axis_print(pr->sb, part == 0 ? &row->leading[i] : &row->trailing[i]);
      }
    }
  }
  if (pr->force_comma && n > 0) {
    cn_sbuf_putc(pr->sb, ',');
    pr->force_comma = false;
  }
}

static void print_shape(printer *pr, const cn_es_shape *sh) {
  if (sh->has_batch) {
    print_row(pr, &sh->batch);
    put_separator(pr, "|", true);
  }
  if (sh->has_input) {
    print_row(pr, &sh->input);
    put_separator(pr, "->", true);
  }
  print_row(pr, &sh->output);
}

/* Visits every row of the spec. */
#define FOR_EACH_ROW(spec, row, body)                                                              \
  for (int s_ = 0; s_ <= (spec)->n_rhs; s_++) {                                                    \
    const cn_es_shape *sh_ = s_ < (spec)->n_rhs ? &(spec)->rhs[s_] : &(spec)->lhs;                 \
    const cn_es_row *rows_[3] = {&sh_->batch, &sh_->input, &sh_->output};                          \
    for (int k_ = 0; k_ < 3; k_++) {                                                               \
      const cn_es_row *row = rows_[k_];                                                            \
      body                                                                                         \
    }                                                                                              \
  }

static bool row_needs_multichar(const cn_es_row *row, bool *has_comma, bool *has_operator) {
  int n = row->n_leading + row->n_trailing + (row->row_var ? 1 : 0);
  if (n > 1) *has_comma = true;
  bool needs = false;
  for (int part = 0; part < 2; part++) {
    const cn_es_axis *axes = part ? row->trailing : row->leading;
    int count = part ? row->n_trailing : row->n_leading;
    for (int i = 0; i < count; i++) {
      const cn_es_axis *ax = &axes[i];
      if (ax->kind == CN_ES_AFFINE) *has_operator = needs = true;
      if (ax->kind == CN_ES_LABEL &&
          (strlen(ax->label) != 1 || !isalpha((unsigned char)ax->label[0])))
        needs = true;
      if (ax->kind == CN_ES_FIXED && i > 0 && axes[i - 1].kind == CN_ES_FIXED) needs = true;
    }
  }
  return needs;
}

void cn_einsum_print(cn_sbuf *sb, const cn_einsum *spec) {
  bool needs = false, has_comma = false, has_operator = false;
  FOR_EACH_ROW(spec, row, { needs |= row_needs_multichar(row, &has_comma, &has_operator); })
  printer pr = {sb, sb->len, needs, needs && !has_comma && !has_operator, false};
  for (int i = 0; i < spec->n_rhs; i++) {
    if (i) put_separator(&pr, ";", false);
    print_shape(&pr, &spec->rhs[i]);
  }
  put_separator(&pr, "=>", true);
  print_shape(&pr, &spec->lhs);
}

/* ---- Equality ----------------------------------------------------------------------------- */

static bool same_str(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_axis(const cn_es_axis *a, const cn_es_axis *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
  case CN_ES_LABEL: return same_str(a->label, b->label);
  case CN_ES_FIXED: return a->fixed == b->fixed;
  case CN_ES_PLACEHOLDER: return true;
  case CN_ES_AFFINE:
    return same_str(a->label, b->label) && a->stride == b->stride &&
           same_str(a->stride_name, b->stride_name) && a->stride_offset == b->stride_offset &&
           a->conv == b->conv && same_str(a->kernel, b->kernel) && a->dilation == b->dilation &&
           same_str(a->dilation_name, b->dilation_name);
  }
  return false;
}

static bool same_axes(int n, const cn_es_axis *a, int m, const cn_es_axis *b) {
  if (n != m) return false;
  for (int i = 0; i < n; i++)
    if (!same_axis(&a[i], &b[i])) return false;
  return true;
}

static bool same_row(const cn_es_row *a, const cn_es_row *b) {
  return same_str(a->row_var, b->row_var) && a->ellipsis == b->ellipsis &&
         same_axes(a->n_leading, a->leading, b->n_leading, b->leading) &&
         same_axes(a->n_trailing, a->trailing, b->n_trailing, b->trailing);
}

static bool same_shape(const cn_es_shape *a, const cn_es_shape *b) {
  return a->has_batch == b->has_batch && a->has_input == b->has_input &&
         same_row(&a->batch, &b->batch) && same_row(&a->input, &b->input) &&
         same_row(&a->output, &b->output);
}

bool cn_einsum_equal(const cn_einsum *a, const cn_einsum *b) {
  if (a->n_rhs != b->n_rhs || !same_shape(&a->lhs, &b->lhs)) return false;
  for (int i = 0; i < a->n_rhs; i++)
    if (!same_shape(&a->rhs[i], &b->rhs[i])) return false;
  return true;
}
