/* The numeric prelude of generated C, pruned (cgen.c calls cn_cgen_prelude once per file).
 * A generated file carries only the prelude's helpers it uses, with what they use in turn: the
 * C compiler then parses a few dozen lines instead of all of builtins.h. The prelude is read as
 * items: a function (a line starting "static inline" through the next line "}"), a macro (a line
 * "#define cn_..." with its continuation lines), each named by the identifier it defines, and
 * top-level comments, dropped (builtins.h is where they are read), and every other line (includes,
 * pragmas, conditionals, the cn_u4x32 typedef), kept, runs of blank lines as one. builtins.h is
 * clang-formatted, which is what makes these line shapes reliable. An item is needed when its name
 * occurs in the routine's text or in a needed item; items keep their order, so the text stays a
 * deterministic function of the routine's. The math header is included only when a name of
 * <math.h> occurs: builtins.h's `#include <math.h>` line becomes `#include <tgmath.h>` when the
 * routine's text calls the type-generic functions (ops.def's log(a) on a float is logf), stays
 * when only needed items call math (builtins.h's calls are typed, so they need no <tgmath.h>),
 * and goes when nothing does (a GEMM, a copy: 12 ms of gcc's 60 to 300 per file). */
#include "backend/cgen.h"

#include <string.h>

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
/* A character of a C identifier. */
static bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
}
static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

typedef struct {
  size_t start, end;                 /* bytes of cn_builtins_source, end after the newline */
  bool named, needed, comment, math; /* math: the line "#include <math.h>" */
} prelude_item;

typedef struct {
  prelude_item *items;
  int n;
  cn_map names;      /* identifier -> item index + 1 */
  bool math, tgmath; /* a name of <math.h> in the routine's text or a needed item; in the text */
} prelude;

/* A name <math.h> or <tgmath.h> declares: cgen_emit.c's list of functions and macros, and the
 * macros and types that list leaves to name shapes (FP_NAN, HUGE_VALF, MATH_ERRNO, float_t). */
static bool is_math_word(const char *word) {
  if (!strchr(word, '_')) return cn_cgen_is_math_name(word);
  return starts_with(word, "FP_") || starts_with(word, "HUGE_VAL") ||
         starts_with(word, "MATH_ERR") || strcmp(word, "math_errhandling") == 0 ||
         strcmp(word, "float_t") == 0 || strcmp(word, "double_t") == 0;
}

static size_t line_end(size_t at) {
  while (at < cn_builtins_source_len && cn_builtins_source[at] != '\n') at++;
  return at < cn_builtins_source_len ? at + 1 : at;
}

/* The identifier a line defines: the one before the first '(' of a function, after "#define ". */
static char *defined_name(cn_ctx *ctx, size_t at, bool macro) {
  const char *line = cn_builtins_source + at;
  const char *end = macro ? line + 8 : strchr(line, '(');
  if (!macro) {
    while (end > line && is_word(end[-1])) end--;
  }
  size_t len = 0;
  while (is_word(end[len])) len++;
  char *name = cn_alloc(ctx, len + 1);
  if (!name) return NULL;
  memcpy(name, end, len);
  name[len] = 0;
  return name;
}

static cn_status prelude_read(cn_ctx *ctx, prelude *p) {
  int lines = 1;
  for (size_t i = 0; i < cn_builtins_source_len; i++) lines += cn_builtins_source[i] == '\n';
  p->items = cn_alloc(ctx, sizeof *p->items * (size_t)lines);
  p->names.strings = true;
  if (!p->items) return ctx->status;
  for (size_t at = 0; at < cn_builtins_source_len;) {
    const char *line = cn_builtins_source + at;
    bool fn = starts_with(line, "static inline "), macro = starts_with(line, "#define cn_");
    bool comment = starts_with(line, "/*");
    size_t end = line_end(at);
    if (comment) {
      const char *close = strstr(line, "*/");
      end = close ? line_end((size_t)(close - cn_builtins_source)) : cn_builtins_source_len;
    }
    if (fn)
      while (end < cn_builtins_source_len && !starts_with(cn_builtins_source + end, "}\n"))
        end = line_end(end);
    if (fn) end = line_end(end);
    while (macro && end >= 2 && cn_builtins_source[end - 2] == '\\') end = line_end(end);
    prelude_item *item = &p->items[p->n++];
    *item = (prelude_item){.start = at,
                           .end = end,
                           .named = fn || macro,
                           .comment = comment,
                           .math = starts_with(line, "#include <math.h>\n")};
    if (item->named) {
      char *name = defined_name(ctx, at, macro);
      if (!name || !cn_map_put(ctx, &p->names, name, (void *)(intptr_t)p->n)) return ctx->status;
    }
    at = end;
  }
  return CN_OK;
}

/* Marks the items named by the cn_ identifiers of text[0, len), and (recursively, through a
 * stack of items to scan) those their texts name; notes the names of <math.h> on the way. */
static cn_status prelude_mark(cn_ctx *ctx, prelude *p, const char *text, size_t len) {
  int *stack = cn_alloc(ctx, sizeof(int) * (size_t)(p->n + 1)), top = 0;
  if (!stack) return ctx->status;
  for (bool routine = true;; routine = false) {
    for (size_t i = 0; i < len;) {
      if (!is_word(text[i]) || is_digit(text[i]) || (i > 0 && is_word(text[i - 1]))) {
        i++;
        continue;
      }
      size_t n = 0;
      char word[128];
      while (i < len && is_word(text[i])) {
        if (n + 1 < sizeof word) word[n++] = text[i];
        i++;
      }
      word[n] = 0;
      if (!starts_with(word, "cn_") && (!p->tgmath || !p->math) && is_math_word(word)) {
        p->math = true;
        p->tgmath |= routine;
      }
      int found = starts_with(word, "cn_") ? (int)(intptr_t)cn_map_get(&p->names, word) : 0;
      if (found && !p->items[found - 1].needed) {
        p->items[found - 1].needed = true;
        stack[top++] = found - 1;
      }
    }
    if (top == 0) return CN_OK;
    const prelude_item *next = &p->items[stack[--top]];
    text = cn_builtins_source + next->start;
    len = next->end - next->start;
  }
}

cn_status cn_cgen_prelude(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body) {
  return cn_cgen_prelude_items(ctx, out, body, true);
}

cn_status cn_cgen_prelude_items(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body, bool includes) {
  prelude p = {0};
  cn_status status = prelude_read(ctx, &p);
  if (status == CN_OK) status = prelude_mark(ctx, &p, (body->data ? body->data : ""), body->len);
  if (status != CN_OK) return status;
  bool blank = false; /* the last line emitted was blank */
  for (int k = 0; k < p.n; k++) {
    const prelude_item *item = &p.items[k];
    bool is_blank = cn_builtins_source[item->start] == '\n';
    if (item->comment || (item->named && !item->needed) || (is_blank && blank) ||
        (item->math && !p.math) ||
        (!includes && starts_with(cn_builtins_source + item->start, "#include ")))
      continue;
    if (item->math && p.tgmath)
      cn_sbuf_puts(out, "#include <tgmath.h>\n");
    else
      cn_sbuf_printf(out, "%.*s", (int)(item->end - item->start), cn_builtins_source + item->start);
    blank = is_blank;
  }
  if (cn_builtins_source_len > 0 && cn_builtins_source[cn_builtins_source_len - 1] != '\n')
    cn_sbuf_putc(out, '\n');
  return CN_OK;
}
