/* The context: arena, error state, logging, options, counters, symbols and cleanups; plus the
 * string builder and checked allocation used by every module.
 *
 * Invariants: the arena and every malloc'd table of the context are released by cn_ctx_destroy
 * and nowhere else; a failing call leaves its message in ctx->error (truncated to fit, never
 * overflowing); the allocation test hook (fail_alloc_countdown) affects cn_alloc, cn_malloc,
 * cn_calloc and cn_realloc alike, so every caller's failure path can be exercised. */
#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  for (int i = 0; i < ctx->n_nodes; i++) cn_node_free_buffers(ctx->nodes[i]);
  free(ctx->nodes);
  free(ctx->symbols);
  free(ctx->opt_cc);
  free(ctx->opt_cflags);
  free(ctx->opt_cache_dir);
  free(ctx->opt_check);
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

uint64_t cn_ctx_stat(const cn_ctx *ctx, cn_stat which) {
  if ((int)which < 0 || which > CN_STAT_ROUTINE_RUNS) return 0;
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

cn_status cn_ctx_register_node(cn_ctx *ctx, cn_node *node) {
  void *items = ctx->nodes;
  if (!grow(ctx, &items, &ctx->cap_nodes, ctx->n_nodes + 1, sizeof(cn_node *))) return ctx->status;
  ctx->nodes = items;
  ctx->nodes[ctx->n_nodes++] = node;
  return CN_OK;
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

static char **option_slot(cn_ctx *ctx, const char *key) {
  if (strcmp(key, "cc") == 0) return &ctx->opt_cc;
  if (strcmp(key, "cflags") == 0) return &ctx->opt_cflags;
  if (strcmp(key, "cache_dir") == 0) return &ctx->opt_cache_dir;
  if (strcmp(key, "check") == 0) return &ctx->opt_check;
  return NULL;
}

cn_status cn_ctx_set_option(cn_ctx *ctx, const char *key, const char *value) {
  char **slot = key ? option_slot(ctx, key) : NULL;
  if (!slot)
    return cn_fail(ctx, CN_ERR_INVALID, "unknown option '%s' (known: cc, cflags, cache_dir, check)",
                   key ? key : "(null)");
  if (strcmp(key, "check") == 0 && value && strcmp(value, "nan") != 0 && strcmp(value, "off") != 0)
    return cn_fail(ctx, CN_ERR_INVALID, "option check: unknown value '%s' (known: nan, off)",
                   value);
  char *copy = NULL;
  if (value) {
    copy = cn_malloc(ctx, strlen(value) + 1);
    if (!copy) return ctx->status;
    strcpy(copy, value);
  }
  free(*slot);
  *slot = copy;
  return CN_OK;
}

/* The defaults are computed on each call (environment lookups), so they follow the environment
 * of the moment; a value set with cn_ctx_set_option wins. */
const char *cn_ctx_option(const cn_ctx *ctx, const char *key) {
  if (!key) return NULL;
  if (strcmp(key, "cc") == 0) {
    if (ctx->opt_cc) return ctx->opt_cc;
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
  }
  if (strcmp(key, "check") == 0) {
    if (ctx->opt_check) return ctx->opt_check;
    const char *check = getenv("CANNL_CHECK");
    return check && *check ? check : "off";
  }
  if (strcmp(key, "cflags") == 0) {
    if (ctx->opt_cflags) return ctx->opt_cflags;
    const char *flags = getenv("CANNL_CFLAGS");
    return flags && *flags ? flags : "-O3 -march=native -shared -fPIC -std=c11";
  }
  if (strcmp(key, "cache_dir") == 0) {
    if (ctx->opt_cache_dir) return ctx->opt_cache_dir;
    const char *dir = getenv("CANNL_CACHE_DIR");
    if (dir && *dir) return dir;
    /* The same order as the C backend's (src/backend/cc.c, which also checks that the chosen
     * directory is usable and falls back to the per-user one when a home cannot be created):
     * absolute XDG_CACHE_HOME, absolute HOME, then $TMPDIR/cannl-cache-<uid>. The composed path
     * lives in one thread-local buffer. */
    static _Thread_local char composed[4096];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME"), *tmp = getenv("TMPDIR");
    if (xdg && xdg[0] == '/')
      snprintf(composed, sizeof composed, "%s/cannl", xdg);
    else if (home && home[0] == '/')
      snprintf(composed, sizeof composed, "%s/.cache/cannl", home);
    else
      snprintf(composed, sizeof composed, "%s/cannl-cache-%u", tmp && tmp[0] == '/' ? tmp : "/tmp",
               (unsigned)geteuid());
    return composed;
  }
  return NULL;
}
