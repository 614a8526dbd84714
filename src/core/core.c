/* The context: arena (with marks), error state, logging, option storage, counters, symbols,
 * cleanups and the progress hook's activity; plus the string builder and checked allocation used by
 * every module. Options are stored as key/value texts only: their keys, checks and defaults belong
 * to the layers that use them (src/runtime/routine.c, src/backend/cc.c), so the core depends on
 * nothing above it.
 *
 * Invariants: the arena and every malloc'd table of the context are released by cn_ctx_destroy
 * and nowhere else (arena blocks also by cn_arena_reset); higher layers' resources only through
 * the cleanups they register; a failing call leaves its message in ctx->error (truncated to fit,
 * never overflowing); the allocation test hook (fail_alloc_countdown) affects cn_alloc, cn_malloc,
 * cn_calloc and cn_realloc alike, so every caller's failure path can be exercised; the progress
 * hook receives NULL exactly once after each activity it was given a line of. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Noreturn void cn_assert_fail(const char *file, int line, const char *expr) {
  fprintf(stderr, "cannl internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  fflush(stderr);
  abort();
}

bool cn_mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return false;
  *out = a * b;
  return true;
}

/* ---- Arena ---- */

#define CN_ARENA_ALIGN 16
#define CN_ARENA_BLOCK 65536

struct cn_arena_block {
  cn_arena_block *next;
  size_t used, cap;
  _Alignas(CN_ARENA_ALIGN) unsigned char data[];
};

void cn_arena_init(cn_arena *arena) {
  arena->head = NULL;
  arena->total_bytes = 0;
}

/* An allocation of more than half a block gets a block of its own, linked behind the head, so
 * the head keeps serving small allocations (a growing array would otherwise abandon the rest of
 * the head block at every doubling). */
void *cn_arena_alloc(cn_arena *arena, size_t bytes) {
  size_t need = (bytes + CN_ARENA_ALIGN - 1) & ~(size_t)(CN_ARENA_ALIGN - 1);
  if (need < bytes) return NULL;
  cn_arena_block *b = arena->head;
  if (!b || b->cap - b->used < need) {
    bool own = need > CN_ARENA_BLOCK / 2;
    size_t cap = own ? need : CN_ARENA_BLOCK;
    if (cap > SIZE_MAX - sizeof(cn_arena_block)) return NULL;
    cn_arena_block *fresh = malloc(sizeof(cn_arena_block) + cap);
    if (!fresh) return NULL;
    fresh->used = 0;
    fresh->cap = cap;
    if (own && b) { /* behind the head */
      fresh->next = b->next;
      b->next = fresh;
    } else {
      fresh->next = b;
      arena->head = fresh;
    }
    arena->total_bytes += cap;
    b = fresh;
  }
  void *p = b->data + b->used;
  b->used += need;
  memset(p, 0, need);
  return p;
}

size_t cn_arena_bytes(const cn_arena *arena) {
  return arena->total_bytes;
}

cn_arena_marker cn_arena_mark(const cn_arena *arena) {
  cn_arena_block *b = arena->head;
  return (cn_arena_marker){b, b ? b->next : NULL, b ? b->used : 0};
}

/* Blocks only ever enter the list at its front or right behind the head, and the head at a mark
 * is mark.block or a newer block; so every block created after the mark lies before mark.block or
 * between it and mark.next, and the list from mark.next on is as it was. */
void cn_arena_reset(cn_arena *arena, cn_arena_marker mark) {
  cn_arena_block *b = arena->head;
  while (b != mark.block) { /* newer heads and the own blocks inserted behind them */
    cn_arena_block *next = b->next;
    arena->total_bytes -= b->cap;
    free(b);
    b = next;
  }
  arena->head = b;
  if (!b) return;
  for (cn_arena_block *o = b->next; o != mark.next;) { /* own blocks inserted behind it */
    cn_arena_block *next = o->next;
    arena->total_bytes -= o->cap;
    free(o);
    o = next;
  }
  b->next = mark.next;
  b->used = mark.used;
}

void cn_arena_release(cn_arena *arena) {
  cn_arena_block *b = arena->head;
  while (b) {
    cn_arena_block *next = b->next;
    free(b);
    b = next;
  }
  cn_arena_init(arena);
}

/* ---- String builder ---- */

static bool sbuf_reserve(cn_sbuf *sb, size_t extra) {
  if (sb->failed) return false;
  if (sb->len + extra + 1 <= sb->cap) return true;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < sb->len + extra + 1) {
    if (cap > SIZE_MAX / 2) {
      sb->failed = true;
      return false;
    }
    cap *= 2;
  }
  char *data = realloc(sb->data, cap);
  if (!data) {
    sb->failed = true;
    return false;
  }
  sb->data = data;
  sb->cap = cap;
  return true;
}

void cn_sbuf_puts(cn_sbuf *sb, const char *s) {
  size_t n = strlen(s);
  if (!sbuf_reserve(sb, n)) return;
  memcpy(sb->data + sb->len, s, n + 1);
  sb->len += n;
}

void cn_sbuf_putc(cn_sbuf *sb, char c) {
  if (!sbuf_reserve(sb, 1)) return;
  sb->data[sb->len++] = c;
  sb->data[sb->len] = '\0';
}

void cn_sbuf_vprintf(cn_sbuf *sb, const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) {
    sb->failed = true;
    return;
  }
  if (!sbuf_reserve(sb, (size_t)n)) return;
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void cn_sbuf_printf(cn_sbuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cn_sbuf_vprintf(sb, fmt, ap);
  va_end(ap);
}

void cn_sbuf_quote_caret(cn_sbuf *sb, const char *text, size_t at) {
  cn_sbuf_puts(sb, "  ");
  for (size_t i = 0; text[i]; i++)
    cn_sbuf_putc(sb, isspace((unsigned char)text[i]) && text[i] != '\t' ? ' ' : text[i]);
  cn_sbuf_puts(sb, "\n  ");
  for (size_t i = 0; i < at && text[i]; i++) cn_sbuf_putc(sb, text[i] == '\t' ? '\t' : ' ');
  cn_sbuf_putc(sb, '^');
}

void cn_sbuf_indent(cn_sbuf *sb, int levels) {
  for (int i = 0; i < levels; i++) cn_sbuf_puts(sb, "  ");
}

void cn_sbuf_json_string(cn_sbuf *sb, const char *s) {
  cn_sbuf_putc(sb, '"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      cn_sbuf_printf(sb, "\\%c", *c);
    else if (*c < 0x20)
      cn_sbuf_printf(sb, "\\u%04x", *c);
    else
      cn_sbuf_putc(sb, (char)*c);
  }
  cn_sbuf_putc(sb, '"');
}

/* Whether c, written after prev, makes a comment's end, a nested comment's start or a trigraph's
 * "??"; at the end of the text, whether it could with the caller's next byte. */
static bool pairs_with(char prev, char c, bool last) {
  if (c != '/' && c != '*' && c != '?') return false;
  return last || (c == '/' && prev == '*') || (c == '*' && prev == '/') ||
         (c == '?' && prev == '?');
}

void cn_sbuf_c_comment_text(cn_sbuf *sb, const char *text, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    char prev = sb->len > 0 && sb->data ? sb->data[sb->len - 1] : '\0';
    if (c < 0x20 || c > 0x7e || c == '\\' || pairs_with(prev, (char)c, i + 1 == len))
      cn_sbuf_printf(sb, "\\x%02x", c);
    else
      cn_sbuf_putc(sb, (char)c);
  }
}

/* ASCII only, whatever the locale (isalpha may accept more). */
static bool is_c_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool cn_is_c_name(const char *s) {
  if (!s || !is_c_letter(*s)) return false;
  for (const char *c = s + 1; *c; c++)
    if (!is_c_letter(*c) && !(*c >= '0' && *c <= '9') && *c != '_') return false;
  bool family = (s[0] == 'c' && s[1] == 'n') || (s[0] == 'C' && s[1] == 'N');
  return !(family && (s[2] == '\0' || s[2] == '_'));
}

const char *cn_sbuf_finish(cn_ctx *ctx, cn_sbuf *sb) {
  if (sb->failed) {
    cn_sbuf_free(sb);
    cn_fail(ctx, CN_ERR_NOMEM, "out of memory while building text");
    return NULL;
  }
  char *out = cn_alloc(ctx, sb->len + 1);
  if (out) {
    if (sb->len) memcpy(out, sb->data, sb->len);
    out[sb->len] = '\0';
  }
  cn_sbuf_free(sb);
  return out;
}

void cn_sbuf_free(cn_sbuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
  sb->failed = false;
}

/* ---- Context ---- */

cn_ctx *cn_ctx_create(void) {
  cn_ctx *ctx = calloc(1, sizeof(cn_ctx));
  if (!ctx) return NULL;
  cn_arena_init(&ctx->arena);
  ctx->status = CN_OK;
  ctx->log_min = CN_LOG_WARN;
  ctx->next_node_id = 1;
  return ctx;
}

void cn_ctx_destroy(cn_ctx *ctx) {
  if (!ctx) return;
  while (ctx->cleanups) {
    cn_cleanup *c = ctx->cleanups;
    ctx->cleanups = c->next;
    c->fn(c->arg);
    free(c);
  }
  free(ctx->symbols);
  for (int i = 0; i < ctx->n_options; i++) {
    free(ctx->options[i].key);
    free(ctx->options[i].value);
  }
  free(ctx->options);
  cn_arena_release(&ctx->arena);
  free(ctx);
}

const char *cn_ctx_error(const cn_ctx *ctx) {
  return ctx->error;
}
cn_status cn_ctx_status(const cn_ctx *ctx) {
  return ctx->status;
}

void cn_ctx_clear_error(cn_ctx *ctx) {
  ctx->status = CN_OK;
  ctx->error[0] = '\0';
}

void cn_ctx_set_log(cn_ctx *ctx, cn_log_fn fn, void *user, cn_log_level min_level) {
  ctx->log_fn = fn;
  ctx->log_user = user;
  ctx->log_min = min_level;
}

cn_status cn_fail(cn_ctx *ctx, cn_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
  va_end(ap);
  ctx->status = status;
  ctx->failed_node = 0;
  if (ctx->log_fn && ctx->log_min <= CN_LOG_DEBUG)
    ctx->log_fn(ctx->log_user, CN_LOG_DEBUG, ctx->error);
  return status;
}

void cn_log(cn_ctx *ctx, cn_log_level level, const char *fmt, ...) {
  if (!ctx->log_fn || level < ctx->log_min) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ctx->log_fn(ctx->log_user, level, msg);
}

uint64_t cn_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- Progress ---- */

#define CN_PROGRESS_GAP_US    500000u /* an activity starting sooner after one continues it */
#define CN_PROGRESS_REDRAW_US 200000u /* the least time between two lines of the same counts */
#define CN_PROGRESS_AFTER_MS  1000u   /* the default delay before the first line */

void cn_ctx_set_progress(cn_ctx *ctx, cn_progress_fn fn, void *user) {
  ctx->progress_fn = fn;
  ctx->progress_user = user;
  const char *env = getenv("CANNL_PROGRESS_AFTER_MS");
  uint64_t ms;
  if (!env || !cn_parse_natural(env, strlen(env), UINT64_MAX / 1000u, &ms))
    ms = CN_PROGRESS_AFTER_MS;
  ctx->progress.after_us = ms * 1000u;
  ctx->progress.start_us = cn_now_us(); /* counts taken without a hook have no clock */
}

static bool progress_busy(const cn_progress *p) {
  for (int k = 0; k < CN_PROGRESS_KINDS; k++)
    if (p->active[k] > 0) return true;
  return false;
}

/* "compiling 1 routine (6 done), tuning 1 GEMM nest (2 done) ... 4.2 s": the kinds in progress. */
static void progress_line(const cn_progress *p, uint64_t now, char *line, size_t cap) {
  static const char *const verbs[CN_PROGRESS_KINDS] = {"compiling", "tuning"};
  static const char *const things[CN_PROGRESS_KINDS] = {"routine", "GEMM nest"};
  size_t len = 0;
  line[0] = '\0';
  for (int k = 0; k < CN_PROGRESS_KINDS; k++) {
    if (p->active[k] == 0) continue;
    len += (size_t)snprintf(line + len, cap - len, "%s%s %d %s%s", len ? ", " : "", verbs[k],
                            p->active[k], things[k], p->active[k] > 1 ? "s" : "");
    if (len < cap && p->done[k] > 0)
      len += (size_t)snprintf(line + len, cap - len, " (%d done)", p->done[k]);
    if (len >= cap) return; /* truncated: cap is made to hold the longest line */
  }
  snprintf(line + len, cap - len, " ... %.1f s", (double)(now - p->start_us) * 1e-6);
}

static void progress_draw(cn_ctx *ctx, uint64_t now) {
  cn_progress *p = &ctx->progress;
  if (now - p->start_us < p->after_us) return;
  if (p->shown && !p->changed && now - p->drawn_us < CN_PROGRESS_REDRAW_US) return;
  char line[160];
  progress_line(p, now, line, sizeof line);
  p->shown = true;
  p->changed = false;
  p->drawn_us = now;
  ctx->progress_fn(ctx->progress_user, line);
}

void cn_progress_add(cn_ctx *ctx, cn_progress_kind kind, int delta) {
  cn_progress *p = &ctx->progress;
  CN_ASSERT((int)kind >= 0 && kind < CN_PROGRESS_KINDS && p->active[kind] + delta >= 0);
  if (delta == 0) return;
  if (!ctx->progress_fn) {
    p->active[kind] += delta;
    return;
  }
  uint64_t now = cn_now_us();
  if (delta > 0 && !progress_busy(p) && !(p->end_us && now - p->end_us < CN_PROGRESS_GAP_US)) {
    p->start_us = now;
    memset(p->done, 0, sizeof p->done);
  }
  p->active[kind] += delta;
  if (delta < 0) p->done[kind] -= delta;
  p->changed = true;
  if (progress_busy(p)) {
    progress_draw(ctx, now);
    return;
  }
  p->end_us = now;
  if (p->shown) {
    p->shown = false;
    ctx->progress_fn(ctx->progress_user, NULL);
  }
}

void cn_progress_tick(cn_ctx *ctx) {
  if (ctx->progress_fn && progress_busy(&ctx->progress)) progress_draw(ctx, cn_now_us());
}

uint64_t cn_ctx_stat(const cn_ctx *ctx, cn_stat which) {
  if ((int)which < 0 || which >= CN_STAT_COUNT) return 0;
  return ctx->stats[which];
}

/* ---- Allocation ---- */

static bool alloc_hook_fails(cn_ctx *ctx) {
  if (ctx->fail_alloc_countdown <= 0) return false;
  return --ctx->fail_alloc_countdown == 0;
}

static void *nomem(cn_ctx *ctx, size_t bytes) {
  cn_fail(ctx, CN_ERR_NOMEM, "out of memory (allocating %zu bytes)", bytes);
  return NULL;
}

void *cn_alloc(cn_ctx *ctx, size_t bytes) {
  void *p = alloc_hook_fails(ctx) ? NULL : cn_arena_alloc(&ctx->arena, bytes);
  return p ? p : nomem(ctx, bytes);
}

char *cn_strdup(cn_ctx *ctx, const char *s) {
  size_t n = strlen(s);
  char *p = cn_alloc(ctx, n + 1);
  if (p) memcpy(p, s, n + 1);
  return p;
}

void *cn_malloc(cn_ctx *ctx, size_t bytes) {
  void *p = alloc_hook_fails(ctx) ? NULL : malloc(bytes ? bytes : 1);
  return p ? p : nomem(ctx, bytes);
}

void *cn_calloc(cn_ctx *ctx, size_t count, size_t size) {
  size_t bytes;
  if (!cn_mul_size(count, size, &bytes)) return nomem(ctx, SIZE_MAX);
  void *p = alloc_hook_fails(ctx) ? NULL : calloc(count ? count : 1, size ? size : 1);
  return p ? p : nomem(ctx, bytes);
}

void *cn_calloc_cells(cn_ctx *ctx, size_t bytes) {
  if (bytes > SIZE_MAX - 63) return nomem(ctx, SIZE_MAX);
  size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
  void *p = alloc_hook_fails(ctx) ? NULL : aligned_alloc(64, rounded);
  if (p) memset(p, 0, rounded);
  return p ? p : nomem(ctx, bytes);
}

void *cn_realloc(cn_ctx *ctx, void *ptr, size_t bytes) {
  void *p = alloc_hook_fails(ctx) ? NULL : realloc(ptr, bytes ? bytes : 1);
  return p ? p : nomem(ctx, bytes);
}

/* The doubled capacity for `need` elements and its size in bytes; false (message set) when
 * either would overflow. */
static bool grown_capacity(cn_ctx *ctx, int cap, int need, size_t elem, int *new_cap,
                           size_t *bytes) {
  int n = cap ? cap : 4; /* small: most arrays of one operation stay tiny */
  while (n < need) {
    if (n > INT32_MAX / 2) return cn_fail(ctx, CN_ERR_NOMEM, "too many objects"), false;
    n *= 2;
  }
  if (!cn_mul_size((size_t)n, elem, bytes)) return nomem(ctx, SIZE_MAX), false;
  *new_cap = n;
  return true;
}

bool cn_arena_grow(cn_ctx *ctx, void **arr, int *cap, int need, size_t elem) {
  int new_cap;
  size_t bytes;
  if (need <= *cap) return true;
  if (!grown_capacity(ctx, *cap, need, elem, &new_cap, &bytes)) return false;
  void *fresh = cn_alloc(ctx, bytes);
  if (!fresh) return false;
  if (*arr && *cap) memcpy(fresh, *arr, (size_t)*cap * elem);
  *arr = fresh;
  *cap = new_cap;
  return true;
}

/* Grows a malloc'd array to hold at least `need` elements (doubling). */
static bool grow(cn_ctx *ctx, void **items, int *cap, int need, size_t elem) {
  int new_cap;
  size_t bytes;
  if (need <= *cap) return true;
  if (!grown_capacity(ctx, *cap, need, elem, &new_cap, &bytes)) return false;
  void *p = cn_realloc(ctx, *items, bytes);
  if (!p) return false;
  *items = p;
  *cap = new_cap;
  return true;
}

cn_cleanup *cn_ctx_add_cleanup(cn_ctx *ctx, void (*fn)(void *), void *arg) {
  cn_cleanup *c = cn_malloc(ctx, sizeof *c);
  if (!c) return NULL;
  c->fn = fn;
  c->arg = arg;
  c->prev = NULL;
  c->next = ctx->cleanups;
  if (ctx->cleanups) ctx->cleanups->prev = c;
  ctx->cleanups = c;
  return c;
}

void cn_ctx_remove_cleanup(cn_ctx *ctx, cn_cleanup *cleanup) {
  if (cleanup->prev)
    cleanup->prev->next = cleanup->next;
  else
    ctx->cleanups = cleanup->next;
  if (cleanup->next) cleanup->next->prev = cleanup->prev;
  free(cleanup);
}

/* ---- Symbols ---- */

cn_symbol cn_symbol_create(cn_ctx *ctx, const char *name, int64_t range) {
  if (range < 0) {
    cn_fail(ctx, CN_ERR_INVALID, "symbol '%s': range %lld is negative", name ? name : "",
            (long long)range);
    return -1;
  }
  const char *copy = cn_strdup(ctx, name ? name : "s");
  if (!copy) return -1;
  void *items = ctx->symbols;
  if (!grow(ctx, &items, &ctx->cap_symbols, ctx->n_symbols + 1, sizeof(cn_symbol_info))) return -1;
  ctx->symbols = items;
  ctx->symbols[ctx->n_symbols] = (cn_symbol_info){.name = copy, .range = range};
  return ctx->n_symbols++;
}

const cn_symbol_info *cn_ctx_symbol(const cn_ctx *ctx, cn_symbol sym) {
  if (sym < 0 || sym >= ctx->n_symbols) return NULL;
  return &ctx->symbols[sym];
}

const char *cn_symbol_name(const cn_ctx *ctx, cn_symbol sym) {
  const cn_symbol_info *info = cn_ctx_symbol(ctx, sym);
  return info ? info->name : "?";
}

/* ---- Options ---- */

static cn_option *find_option(const cn_ctx *ctx, const char *key) {
  for (int i = 0; i < ctx->n_options; i++)
    if (strcmp(ctx->options[i].key, key) == 0) return &ctx->options[i];
  return NULL;
}

/* A malloc'd copy of s (NULL stays NULL); false with a message when memory runs out. */
static bool copy_text(cn_ctx *ctx, const char *s, char **out) {
  *out = NULL;
  if (!s) return true;
  size_t n = strlen(s) + 1;
  if (!(*out = cn_malloc(ctx, n))) return false;
  memcpy(*out, s, n);
  return true;
}

cn_status cn_ctx_store_option(cn_ctx *ctx, const char *key, const char *value) {
  cn_option *option = find_option(ctx, key);
  if (!option && !value) return CN_OK;
  char *copy;
  if (!copy_text(ctx, value, &copy)) return ctx->status;
  if (!option) {
    char *key_copy;
    void *items = ctx->options;
    if (!copy_text(ctx, key, &key_copy) ||
        !grow(ctx, &items, &ctx->cap_options, ctx->n_options + 1, sizeof(cn_option))) {
      free(key_copy);
      free(copy);
      return ctx->status;
    }
    ctx->options = items;
    option = &ctx->options[ctx->n_options++];
    *option = (cn_option){key_copy, NULL};
  }
  free(option->value);
  option->value = copy;
  return CN_OK;
}

const char *cn_ctx_stored_option(const cn_ctx *ctx, const char *key) {
  const cn_option *option = find_option(ctx, key);
  return option ? option->value : NULL;
}
