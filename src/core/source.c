/* Positioned messages: the one writer of the errors that point into a source text (a script, a
 * Tile body or statement, an einsum spec). The notation's lexer, parser and evaluator, the einsum
 * parser and the Tile reader all fail through cn_fail_at, so every such message has one of two
 * shapes:
 *   - in a file:   FILE:LINE:COL: WHAT, the source line, and a caret under the column;
 *   - a one-line text without a file: KIND "TEXT": WHAT at column N, the text, and a caret
 *     (a text longer than WINDOW bytes is named by its first WINDOW_BEFORE bytes and quoted as a
 *     window around the column, so the problem survives the context's 4096-byte message).
 *
 * Invariants: lines and columns count from 1, columns in bytes (as editors and compilers
 * print them); the caret line keeps tabs and counts a multi-byte UTF-8 character once, so the
 * caret stands under its column on a terminal; control characters print as spaces; a line
 * longer than WINDOW bytes is shown as a window around the column, so a message stays within a
 * terminal line. Without memory for the quote the message still has the position and the
 * problem. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

enum { WINDOW = 160, WINDOW_BEFORE = 80 };

static bool utf8_continuation(unsigned char c) {
  return c >= 0x80 && c < 0xc0;
}

void cn_source_locate(const cn_source *src, size_t offset, int *line, int *col) {
  const char *t = src->text;
  int l = src->line;
  size_t start = 0;
  for (size_t i = 0; i < offset && t[i]; i++)
    if (t[i] == '\n') l++, start = i + 1;
  *line = l;
  *col = (int)(offset - start) + (start == 0 ? src->col : 1);
}

/* The line `line` of the file (the text's first line starts at src->col: it is quoted indented
 * to that column) and a caret under byte column `col`. */
static void put_line_and_caret(cn_sbuf *sb, const cn_source *src, int line, int col) {
  const char *p = src->text;
  for (int l = src->line; l < line && *p; p++)
    if (*p == '\n') l++;
  bool first = p == src->text;
  int indent = first && src->col > 1 ? src->col - 1 : 0;
  size_t len = strcspn(p, "\n");
  while (len > 0 && p[len - 1] == '\r') len--;
  int base = first ? src->col : 1;
  size_t c = col > base ? (size_t)(col - base) : 0;
  if (c > len) c = len;
  size_t from = 0, to = len;
  if (len > WINDOW) {
    from = c > WINDOW_BEFORE ? c - WINDOW_BEFORE : 0;
    while (from < c && utf8_continuation((unsigned char)p[from])) from++;
    to = from + WINDOW < len ? from + WINDOW : len;
  }
  cn_sbuf_printf(sb, "%*s", indent, "");
  for (size_t i = from; i < to; i++) {
    unsigned char ch = (unsigned char)p[i];
    cn_sbuf_putc(sb, (ch < 0x20 && ch != '\t') || ch == 0x7f ? ' ' : (char)ch);
  }
  cn_sbuf_putc(sb, '\n');
  cn_sbuf_printf(sb, "%*s", indent, "");
  for (size_t i = from; i < c; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch == '\t')
      cn_sbuf_putc(sb, '\t');
    else if (!utf8_continuation(ch))
      cn_sbuf_putc(sb, ' ');
  }
  cn_sbuf_putc(sb, '^');
}

cn_status cn_fail_at(cn_ctx *ctx, const cn_source *src, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cn_status status = cn_fail_at_v(ctx, src, line, col, fmt, ap);
  va_end(ap);
  return status;
}

cn_status cn_fail_at_v(cn_ctx *ctx, const cn_source *src, int line, int col, const char *fmt,
                       va_list ap) {
  char what[600];
  vsnprintf(what, sizeof what, fmt, ap);
  cn_sbuf sb = {0};
  if (src->file) {
    cn_sbuf_printf(&sb, "%s:%d:%d: %s\n", src->file, line, col, what);
    if (src->text) put_line_and_caret(&sb, src, line, col);
  } else if (strlen(src->text) <= WINDOW) {
    cn_sbuf_printf(&sb, "%s \"%s\": %s at column %d\n", src->kind, src->text, what, col);
    cn_sbuf_quote_caret(&sb, src->text, col > 1 ? (size_t)col - 1 : 0);
  } else { /* its start names it; the caret line is a window around the column */
    int head = WINDOW_BEFORE;
    while (head > 0 && utf8_continuation((unsigned char)src->text[head])) head--;
    cn_sbuf_printf(&sb, "%s \"%.*s...\": %s at column %d\n", src->kind, head, src->text, what, col);
    const cn_source quoted = {NULL, src->kind, src->text, 1, 3}; /* indented by two */
    put_line_and_caret(&sb, &quoted, 1, col + 2);
  }
  if (!sb.failed)
    cn_fail(ctx, CN_ERR_INVALID, "%s", sb.data);
  else if (src->file)
    cn_fail(ctx, CN_ERR_INVALID, "%s:%d:%d: %s", src->file, line, col, what);
  else
    cn_fail(ctx, CN_ERR_INVALID, "%s: %s at column %d", src->kind, what, col);
  cn_sbuf_free(&sb);
  return CN_ERR_INVALID;
}
