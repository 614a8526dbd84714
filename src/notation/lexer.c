/* The notation's lexer, its positioned error messages and the operator tables of notation.h
 * (infix precedence, syntax-extensions-cd-op's assignment operators) (see lexer.h, notation.h).
 *
 * Tokens follow OCaml's lexical conventions where the notation borrows them: identifiers may
 * contain primes, numbers may contain underscores, strings take OCaml's escapes, an operator is
 * the longest run of operator characters (so `=:+`, `*.`, `!..`, `@^+` are single tokens), `~name`
 * and `~name:` are label tokens, `(* *)` comments nest and skip string literals inside them.
 * `#` starts a comment to the end of the line (the notation has no `#` operators).
 *
 * Invariants: columns count bytes from 1; every error goes through cn_nt_fail_at, so the message
 * always has the FILE:LINE:COL prefix, the source line and a caret; a decoded string never
 * contains NUL (the escapes that would produce one are rejected). */
#include "notation/lexer.h"
#include "numeric/numeric.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Positioned messages ------------------------------------------------------------------- */

cn_status cn_nt_fail_at(cn_ctx *ctx, cn_nt_pos pos, const char *fmt, ...) {
  cn_source src = {pos.src && pos.src->file ? pos.src->file : "<input>", NULL,
                   pos.src ? pos.src->text : NULL, 1, 1};
  va_list ap;
  va_start(ap, fmt);
  cn_status status = cn_fail_at_v(ctx, &src, pos.line, pos.col, fmt, ap);
  va_end(ap);
  return status;
}

/* ---- Operator tables ---------------------------------------------------------------------- */

/* syntax-extensions-cd-op's assignment operators are derived from the op table
 * (cn_op_assign_spelling): `=` then `:` when the LHS is cleared to the accumulator's neutral
 * element first, then the op. */
bool cn_nt_assign_op(const char *op, cn_op *accum, bool *clear) {
  char text[16];
  for (int i = 0; op && i < CN_OP_COUNT; i++)
    for (int c = 0; c < 2; c++)
      if (cn_op_assign_spelling((cn_op)i, c, text, sizeof text) && strcmp(text, op) == 0) {
        if (accum) *accum = (cn_op)i;
        if (clear) *clear = c;
        return true;
      }
  return false;
}

const char *cn_nt_assign_spelling(cn_op accum, bool clear) {
  static char spellings[CN_OP_COUNT][2][16];
  if ((int)accum < 0 || accum >= CN_OP_COUNT) return NULL;
  char *text = spellings[accum][clear];
  return cn_op_assign_spelling(accum, clear, text, sizeof spellings[0][0]) ? text : NULL;
}

cn_nt_prec cn_nt_infix_prec(const char *op) {
  if (!op || !op[0] || cn_nt_assign_op(op, NULL, NULL)) return CN_NT_PREC_NONE;
  if (strcmp(op, "||") == 0) return CN_NT_PREC_OR;
  if (strcmp(op, "&&") == 0 || strcmp(op, "&") == 0) return CN_NT_PREC_AND;
  if (strcmp(op, "!=") == 0) return CN_NT_PREC_CMP;
  if (strcmp(op, "mod") == 0) return CN_NT_PREC_MUL;
  /* OCaml keywords made of operator characters are not operators. */
  if (strcmp(op, "->") == 0 || strcmp(op, "<-") == 0 || strcmp(op, "|") == 0)
    return CN_NT_PREC_NONE;
  switch (op[0]) {
  case '*': return op[1] == '*' ? CN_NT_PREC_POW : CN_NT_PREC_MUL;
  case '/':
  case '%': return CN_NT_PREC_MUL;
  case '+':
  case '-': return CN_NT_PREC_ADD;
  case '@':
  case '^': return CN_NT_PREC_CONCAT;
  case '=':
  case '<':
  case '>':
  case '|':
  case '&':
  case '$': return CN_NT_PREC_CMP;
  default: return CN_NT_PREC_NONE; /* prefix (! ~ ?) and keyword-like (: .) operators */
  }
}

const char *const cn_nt_sgd_labels[] = {"learning_rate", "momentum", "weight_decay",
                                        "nesterov",      "clip",     NULL};
const char *const cn_nt_adam_labels[] = {
    "learning_rate",       "beta1", "beta2", "eps", "weight_decay", "decoupled", "clip",
    "decay_matrices_only", NULL};
const char *const cn_nt_epoch_labels[] = {"epoch", NULL};
const char *const cn_nt_for_labels[] = {"devices", NULL};
const char *const cn_nt_print_labels[] = {"full", "precision", NULL};

bool cn_nt_stop_label(const char *const *labels, const char *label) {
  cn_suggest s;
  cn_suggest_init(&s, label);
  for (const char *const *l = labels; l && *l; l++) {
    if (strcmp(*l, label) == 0) return true;
    cn_suggest_consider(&s, *l);
  }
  return s.n > 0;
}

const cn_nt_arg *cn_nt_find_arg(int n_args, const cn_nt_arg *args, const char *label) {
  for (int i = 0; i < n_args; i++)
    if (args[i].label && strcmp(args[i].label, label) == 0) return &args[i];
  return NULL;
}

/* ---- Character classes --------------------------------------------------------------------- */

static bool is_op_char(char c) {
  return c != '\0' && strchr("!$%&*+-./:<=>?@^|~", c) != NULL;
}
static bool is_ident_start(char c) {
  return isalpha((unsigned char)c) || c == '_';
}
static bool is_ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '\'';
}
static bool is_label_start(char c) { /* ~name, ?name: lowercase as in OCaml */
  return islower((unsigned char)c) || c == '_';
}

static const struct {
  const char *word;
  nt_tk_kind kind;
} reserved[] = {
#define NT_RESERVED(NAME, word) {word, NT_TK_##NAME},
#include "notation/reserved.def"
#undef NT_RESERVED
};

const char *cn_nt_reserved_word(nt_tk_kind kind) {
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (reserved[i].kind == kind) return reserved[i].word;
  return NULL;
}

/* ---- The lexer ----------------------------------------------------------------------------- */

void cn_nt_lexer_init(cn_nt_lexer *lx, cn_ctx *ctx, const cn_nt_source *src) {
  memset(lx, 0, sizeof *lx);
  lx->ctx = ctx;
  lx->src = src;
  lx->line = 1;
  lx->end_line = lx->end_col = 1;
}

static int column_of(const cn_nt_lexer *lx, size_t offset) {
  return (int)(offset - lx->line_start) + 1;
}

static bool error_here(cn_nt_lexer *lx, size_t offset, const char *fmt, ...) CN_PRINTF(3, 4);
/* An error at `offset`, which lies on the lexer's current line. */
static bool error_here(cn_nt_lexer *lx, size_t offset, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_nt_pos pos = {lx->src, lx->line, column_of(lx, offset)};
  cn_nt_fail_at(lx->ctx, pos, "%s", what);
  return false;
}

static char at(const cn_nt_lexer *lx, size_t offset) {
  return lx->src->text[offset];
}

/* Consumes the newline at lx->pos. */
static void newline(cn_nt_lexer *lx) {
  lx->pos++;
  lx->line++;
  lx->line_start = lx->pos;
}

/* Inside a comment, a string literal is skipped whole (OCaml's rule, so that "*)" in a string
 * does not end the comment). False if it is not terminated. */
static bool skip_string_in_comment(cn_nt_lexer *lx) {
  lx->pos++;
  for (;;) {
    char c = at(lx, lx->pos);
    if (c == '\0') return false;
    if (c == '"') {
      lx->pos++;
      return true;
    }
    if (c == '\n') {
      newline(lx);
      continue;
    }
    if (c == '\\' && at(lx, lx->pos + 1) == '\n') {
      lx->pos++;
      newline(lx);
      continue;
    }
    lx->pos += c == '\\' && at(lx, lx->pos + 1) != '\0' ? 2 : 1;
  }
}

/* At "(*": skips a nested comment. */
static bool skip_comment(cn_nt_lexer *lx) {
  int line = lx->line, col = column_of(lx, lx->pos);
  int depth = 0;
  for (;;) {
    char c = at(lx, lx->pos);
    if (c == '\0') {
      cn_nt_pos pos = {lx->src, line, col};
      cn_nt_fail_at(lx->ctx, pos, "unterminated comment");
      return false;
    }
    if (c == '(' && at(lx, lx->pos + 1) == '*') {
      depth++;
      lx->pos += 2;
    } else if (c == '*' && at(lx, lx->pos + 1) == ')') {
      lx->pos += 2;
      if (--depth == 0) return true;
    } else if (c == '\n') {
      newline(lx);
    } else if (c == '"') {
      if (!skip_string_in_comment(lx)) {
        cn_nt_pos pos = {lx->src, line, col};
        cn_nt_fail_at(lx->ctx, pos, "unterminated comment (a string inside it is not closed)");
        return false;
      }
    } else if (c == '\'' && at(lx, lx->pos + 1) != '\0' && at(lx, lx->pos + 2) == '\'') {
      lx->pos += 3; /* a character literal such as '"' */
    } else {
      lx->pos++;
    }
  }
}

static bool skip_blanks(cn_nt_lexer *lx) {
  for (;;) {
    char c = at(lx, lx->pos);
    if (c == '\n') {
      newline(lx);
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      lx->pos++;
    } else if (c == '#') {
      while (at(lx, lx->pos) != '\0' && at(lx, lx->pos) != '\n') lx->pos++;
    } else if (c == '(' && at(lx, lx->pos + 1) == '*') {
      if (!skip_comment(lx)) return false;
    } else {
      return true;
    }
  }
}

static char *copy_text(cn_nt_lexer *lx, size_t from, size_t len) {
  char *s = cn_alloc(lx->ctx, len + 1);
  if (s) memcpy(s, lx->src->text + from, len);
  return s;
}

/* Numbers: digits with underscores, an optional fraction and exponent; a letter right after is
 * an error (OCaml's literal suffixes are not supported). */
static bool lex_number(cn_nt_lexer *lx, cn_nt_token *out) {
  size_t start = lx->pos;
  bool is_float = false;
  while (isdigit((unsigned char)at(lx, lx->pos)) || at(lx, lx->pos) == '_') lx->pos++;
  if (at(lx, lx->pos) == '.') {
    is_float = true;
    lx->pos++;
    while (isdigit((unsigned char)at(lx, lx->pos)) || at(lx, lx->pos) == '_') lx->pos++;
  }
  if (at(lx, lx->pos) == 'e' || at(lx, lx->pos) == 'E') {
    is_float = true;
    lx->pos++;
    if (at(lx, lx->pos) == '+' || at(lx, lx->pos) == '-') lx->pos++;
    if (!isdigit((unsigned char)at(lx, lx->pos)))
      return error_here(lx, start, "invalid number literal: the exponent has no digits");
    while (isdigit((unsigned char)at(lx, lx->pos)) || at(lx, lx->pos) == '_') lx->pos++;
  }
  if (is_ident_char(at(lx, lx->pos))) {
    size_t end = lx->pos;
    while (is_ident_char(at(lx, end))) end++;
    return error_here(lx, start, "invalid number literal '%.*s'", (int)(end - start),
                      lx->src->text + start);
  }
  char digits[400];
  size_t n = 0;
  for (size_t i = start; i < lx->pos; i++) {
    if (at(lx, i) == '_') continue;
    if (n + 1 >= sizeof digits) return error_here(lx, start, "number literal too long");
    digits[n++] = at(lx, i);
  }
  digits[n] = '\0';
  if (is_float) {
    out->kind = NT_TK_FLOAT;
    out->fval = strtod(digits, NULL);
    if (!isfinite(out->fval)) return error_here(lx, start, "float literal out of range");
    return true;
  }
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    int d = digits[i] - '0';
    if (v > (INT64_MAX - d) / 10) return error_here(lx, start, "integer literal too large");
    v = v * 10 + d;
  }
  out->kind = NT_TK_INT;
  out->ival = v;
  out->fval = (double)v;
  return true;
}

static int hex_value(char c) {
  if (isdigit((unsigned char)c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One escape after the backslash at lx->pos; writes the byte to *byte, or sets *skip for a
 * backslash-newline (which, as in OCaml, also skips the next line's leading blanks). */
static bool lex_escape(cn_nt_lexer *lx, char *byte, bool *skip) {
  size_t bs = lx->pos;
  char c = at(lx, bs + 1);
  *skip = false;
  int value = -1;
  size_t width = 2;
  switch (c) {
  case '\\': value = '\\'; break;
  case '"': value = '"'; break;
  case '\'': value = '\''; break;
  case 'n': value = '\n'; break;
  case 't': value = '\t'; break;
  case 'b': value = '\b'; break;
  case 'r': value = '\r'; break;
  case ' ': value = ' '; break;
  case '\n':
    lx->pos++;
    newline(lx);
    while (at(lx, lx->pos) == ' ' || at(lx, lx->pos) == '\t') lx->pos++;
    *skip = true;
    return true;
  case 'x':
    if (hex_value(at(lx, bs + 2)) >= 0 && hex_value(at(lx, bs + 3)) >= 0) {
      value = hex_value(at(lx, bs + 2)) * 16 + hex_value(at(lx, bs + 3));
      width = 4;
    }
    break;
  default:
    if (isdigit((unsigned char)c) && isdigit((unsigned char)at(lx, bs + 2)) &&
        isdigit((unsigned char)at(lx, bs + 3))) {
      value = (c - '0') * 100 + (at(lx, bs + 2) - '0') * 10 + (at(lx, bs + 3) - '0');
      width = 4;
      if (value > 255)
        return error_here(lx, bs, "escape '\\%.3s' is above 255", lx->src->text + bs + 1);
    }
    break;
  }
  if (value < 0) {
    if (c == '\0' || c == '\r') return error_here(lx, bs, "invalid escape in string");
    if (!isprint((unsigned char)c))
      return error_here(lx, bs, "invalid escape '\\' followed by byte 0x%02x in string",
                        (unsigned)(unsigned char)c);
    return error_here(lx, bs, "invalid escape '\\%c' in string", c);
  }
  if (value == 0) return error_here(lx, bs, "a string cannot contain a NUL character");
  *byte = (char)value;
  lx->pos += width;
  return true;
}

static bool lex_string(cn_nt_lexer *lx, cn_nt_token *out) {
  size_t start = lx->pos;
  int line = lx->line, col = column_of(lx, start);
  /* The decoded text is never longer than the raw text up to the closing quote. */
  size_t end = start + 1;
  while (at(lx, end) != '"') {
    if (at(lx, end) == '\0') {
      cn_nt_pos pos = {lx->src, line, col};
      cn_nt_fail_at(lx->ctx, pos, "unterminated string literal");
      return false;
    }
    end += at(lx, end) == '\\' && at(lx, end + 1) != '\0' ? 2 : 1;
  }
  char *s = cn_alloc(lx->ctx, end - start);
  if (!s) return false;
  size_t n = 0;
  lx->pos = start + 1;
  while (at(lx, lx->pos) != '"') {
    char c = at(lx, lx->pos);
    if (c == '\\') {
      char byte = 0;
      bool skip;
      if (!lex_escape(lx, &byte, &skip)) return false;
      if (!skip) s[n++] = byte;
    } else if (c == '\n') {
      s[n++] = c;
      newline(lx);
    } else {
      s[n++] = c;
      lx->pos++;
    }
  }
  lx->pos++;
  out->kind = NT_TK_STRING;
  out->text = s;
  return true;
}

/* ~name, ~name:, ?name, ?name: at the '~' or '?'. */
static bool lex_label(cn_nt_lexer *lx, cn_nt_token *out, bool optional) {
  size_t name = lx->pos + 1, end = name;
  while (is_ident_char(at(lx, end))) end++;
  if (!(out->text = copy_text(lx, name, end - name))) return false;
  lx->pos = end;
  bool colon = at(lx, end) == ':' && at(lx, end + 1) != ':' && at(lx, end + 1) != '=';
  if (colon) lx->pos++;
  out->kind = optional ? (colon ? NT_TK_OPTLABEL_COLON : NT_TK_OPTLABEL)
                       : (colon ? NT_TK_LABEL_COLON : NT_TK_LABEL);
  return true;
}

static bool lex_token(cn_nt_lexer *lx, cn_nt_token *out) {
  size_t start = lx->pos;
  char c = at(lx, start), next = at(lx, start + 1);
  if (isdigit((unsigned char)c)) return lex_number(lx, out);
  if (c == '"') return lex_string(lx, out);
  if (is_ident_start(c)) {
    size_t end = start;
    while (is_ident_char(at(lx, end))) end++;
    lx->pos = end;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
      if (strlen(reserved[i].word) == end - start &&
          memcmp(reserved[i].word, lx->src->text + start, end - start) == 0) {
        out->kind = reserved[i].kind;
        return true;
      }
    /* `mod` is OCaml's infix keyword: an operator of the multiplicative class */
    bool mod = end - start == 3 && memcmp(lx->src->text + start, "mod", 3) == 0;
    out->kind = mod ? NT_TK_OP : NT_TK_IDENT;
    return (out->text = copy_text(lx, start, end - start)) != NULL;
  }
  if (c == '\'') {
    if ((isalnum((unsigned char)next) || next == '_') && at(lx, start + 2) == '\'') {
      lx->pos += 3;
      out->kind = NT_TK_CHAR;
      return (out->text = copy_text(lx, start + 1, 1)) != NULL;
    }
    return error_here(lx, start,
                      "invalid character literal: a dimension label is one letter, "
                      "digit or '_' in quotes, as in 'q'");
  }
  if ((c == '~' || c == '?') && is_label_start(next)) return lex_label(lx, out, c == '?');
  if (c == '?' && !is_op_char(next)) {
    lx->pos++;
    out->kind = NT_TK_QUESTION;
    return true;
  }
  static const struct {
    char c, next;
    nt_tk_kind kind;
  } punct[] = {
      {'[', '|', NT_TK_LBRACKET_BAR}, {'|', ']', NT_TK_BAR_RBRACKET}, {';', ';', NT_TK_SEMISEMI},
      {'(', 0, NT_TK_LPAREN},         {')', 0, NT_TK_RPAREN},         {'[', 0, NT_TK_LBRACKET},
      {']', 0, NT_TK_RBRACKET},       {'{', 0, NT_TK_LBRACE},         {'}', 0, NT_TK_RBRACE},
      {';', 0, NT_TK_SEMI},           {',', 0, NT_TK_COMMA}};
  for (size_t i = 0; i < sizeof punct / sizeof punct[0]; i++)
    if (punct[i].c == c && (!punct[i].next || punct[i].next == next)) {
      lx->pos += punct[i].next ? 2 : 1;
      out->kind = punct[i].kind;
      return true;
    }
  if (is_op_char(c)) {
    size_t end = start + 1;
    while (is_op_char(at(lx, end)) && !(at(lx, end) == '|' && at(lx, end + 1) == ']')) end++;
    lx->pos = end;
    if (end - start == 1 && c == '.') {
      out->kind = NT_TK_DOT;
      return true;
    }
    out->kind = NT_TK_OP;
    return (out->text = copy_text(lx, start, end - start)) != NULL;
  }
  if (isprint((unsigned char)c)) return error_here(lx, start, "unexpected character '%c'", c);
  return error_here(lx, start, "unexpected byte 0x%02x", (unsigned)(unsigned char)c);
}

bool cn_nt_lex(cn_nt_lexer *lx, cn_nt_token *out) {
  memset(out, 0, sizeof *out);
  if (!skip_blanks(lx)) return false;
  size_t start = lx->pos;
  if (at(lx, start) == '\0') {
    out->kind = NT_TK_EOF;
    out->line = lx->end_line;
    out->col = lx->end_col;
    out->offset = start;
    return true;
  }
  out->line = lx->line;
  out->col = column_of(lx, start);
  out->offset = start;
  if (!lex_token(lx, out)) return false;
  out->len = lx->pos - start;
  lx->end_line = lx->line;
  lx->end_col = column_of(lx, lx->pos);
  return true;
}

/* A line that starts with a non-blank character in its first column ends a block. */
static bool ends_block(const cn_nt_lexer *lx, size_t line_start) {
  char c = at(lx, line_start);
  return c != '\0' && c != ' ' && c != '\t' && c != '\r' && c != '\n';
}

bool cn_nt_lex_block(cn_nt_lexer *lx, const char **text, int *line, int *col) {
  for (;;) { /* blanks, and blank or indented lines, before the block */
    char c = at(lx, lx->pos);
    if (c == '\n' && !ends_block(lx, lx->pos + 1))
      newline(lx);
    else if (c == ' ' || c == '\t' || c == '\r')
      lx->pos++;
    else
      break;
  }
  size_t start = lx->pos;
  *line = lx->line;
  *col = column_of(lx, start);
  size_t end = start; /* just after the last non-blank character */
  for (;;) {
    char c = at(lx, lx->pos);
    if (c == '\0' || (c == '\n' && ends_block(lx, lx->pos + 1))) break;
    if (c == '\n')
      newline(lx);
    else
      lx->pos++;
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') end = lx->pos;
  }
  lx->end_line = lx->line;
  lx->end_col = column_of(lx, lx->pos);
  if (end == start) return error_here(lx, start, "expected the body of the Tile function");
  char *s = copy_text(lx, start, end - start);
  if (!s) return false;
  *text = s;
  return true;
}
