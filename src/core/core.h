/* Internal core of cannl: the context structure, arenas, error reporting, logging, the internal
 * assert and a growable string builder. Every module includes this header.
 *
 * Invariants: every failing function records its message with cn_fail() before returning the
 * status; arena memory lives until cn_ctx_destroy (or a cn_arena_reset to a mark taken before it
 * was allocated); CN_ASSERT guards internal invariants only (never user input) and aborts with
 * file:line. The core is the bottom layer: it includes only the public header and the C library,
 * and knows nothing of nodes, loops, backends or their options. */
#ifndef CN_CORE_H
#define CN_CORE_H

#include "cannl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CN_ASSERT(cond)                                                                            \
  do {                                                                                             \
    if (!(cond)) cn_assert_fail(__FILE__, __LINE__, #cond);                                        \
  } while (0)
_Noreturn void cn_assert_fail(const char *file, int line, const char *expr);

#if defined(__GNUC__)
#define CN_PRINTF(fmt_idx, args_idx) __attribute__((format(printf, fmt_idx, args_idx)))
#else
#define CN_PRINTF(fmt_idx, args_idx)
#endif

/* ---- Arena: bump allocation in linked blocks, released in one call ---- */
typedef struct cn_arena_block cn_arena_block;
typedef struct {
  cn_arena_block *head;
  size_t total_bytes; /* the capacity of every block it holds; read with cn_arena_bytes */
} cn_arena;
void cn_arena_init(cn_arena *arena);
/* Zero-filled, aligned to 16 bytes; NULL on exhaustion (no message: use cn_alloc for that). */
void *cn_arena_alloc(cn_arena *arena, size_t bytes);
void cn_arena_release(cn_arena *arena);
/* The bytes the arena holds from malloc: the capacity of its blocks, used or not (headers
 * excepted). For tests and for measuring growth. */
size_t cn_arena_bytes(const cn_arena *arena);

/* A position in an arena, for releasing a phase's temporaries in one call. */
typedef struct {
  cn_arena_block *block; /* the current block when marked (NULL: the arena was empty) */
  cn_arena_block *next;  /* its successor then: every older block lies from here on */
  size_t used;           /* its offset then */
} cn_arena_marker;
/* The arena's current position. */
cn_arena_marker cn_arena_mark(const cn_arena *arena);
/* Frees everything allocated after `mark`: the blocks created since are freed and the marked
 * block's offset is restored, so the next allocations reuse its memory (zero-filled again).
 * Safe only when nothing allocated after the mark is referenced afterwards: no pointer into that
 * memory may survive in an object allocated before the mark, in the context (messages built by
 * cn_sbuf_finish, symbol names, grown cn_arena_grow arrays and cn_map tables, node descriptions)
 * or in the caller. Marks nest: resetting to a mark invalidates every mark taken after it, and a
 * mark must be used on the arena it was taken from. */
void cn_arena_reset(cn_arena *arena, cn_arena_marker mark);

/* ---- Growable string builder (malloc-backed; a failed allocation makes it sticky-failed) ---- */
typedef struct {
  char *data;
  size_t len, cap;
  bool failed;
} cn_sbuf;
void cn_sbuf_puts(cn_sbuf *sb, const char *s);
void cn_sbuf_putc(cn_sbuf *sb, char c);
void cn_sbuf_printf(cn_sbuf *sb, const char *fmt, ...) CN_PRINTF(2, 3);
void cn_sbuf_vprintf(cn_sbuf *sb, const char *fmt, va_list ap);
void cn_sbuf_indent(cn_sbuf *sb, int levels); /* two spaces per level */
/* A one-line text quoted under a message: "  TEXT\n  " then a caret under byte `at`. Line
 * breaks and other blanks print as spaces and tabs stay in the caret line, so that the caret
 * stands under its column in a terminal. */
void cn_sbuf_quote_caret(cn_sbuf *sb, const char *text, size_t at);
/* s as a JSON string literal: quoted, with '"' and '\\' escaped and control bytes as \u00XX
 * (other bytes, UTF-8 included, as they are). */
void cn_sbuf_json_string(cn_sbuf *sb, const char *s);
/* The len bytes of text, NULs included, as inert text of a C block comment: the one way free text
 * from outside (a label, an axis name, a %cd comment) enters generated or exported C (names pass
 * cn_is_c_name instead; options and paths never enter the text). A byte is written as itself, or
 * as \xNN (two lowercase hex digits) when it is a backslash, outside printable ASCII (line breaks,
 * NUL, control and non-ASCII bytes), or a '/', '*' or '?' that would pair with the byte written
 * before it (the builder's last byte, so across the call's start too) or that ends the text. The
 * output thus never holds a line break, a backslash-newline splice, "*" "/", "/" "*" or "??" (no
 * trigraph), and cannot pair with what the caller writes next. */
void cn_sbuf_c_comment_text(cn_sbuf *sb, const char *text, size_t len);
/* True if s may name a routine or an export in generated C, the one check of such names: a C
 * identifier that starts with a letter (leading underscores are the C implementation's), then
 * ASCII letters, digits and '_', outside the generator's family (s followed by '_' starts with
 * neither "cn_" nor "CN_"). Generated C spells it only with a suffix (NAME_entry, NAME_forward),
 * so no C keyword or library name can clash with it. */
bool cn_is_c_name(const char *s);
#define CN_C_NAME_RULE "a letter, then ASCII letters, digits and '_', not starting with cn_ or CN_"
/* ---- Suggestions for a misspelled name (src/core/suggest.c) ----
 * Offer every known name with cn_suggest_consider*, then append cn_suggest_text to the message:
 * ", did you mean 'a'?", ", did you mean 'a' or 'b'?", ", did you mean 'a', 'b' or 'c'?", or ""
 * when none is close (the rules are suggest.c's). Candidates are not copied: they must outlive
 * the cn_suggest_text call. */
#define CN_SUGGEST_MAX 3
typedef struct {
  const char *word;   /* what the user wrote */
  const char *prefix; /* written before each suggested name ("~" for labels); NULL: none */
  const char *name[CN_SUGGEST_MAX];
  size_t len[CN_SUGGEST_MAX];
  int dist[CN_SUGGEST_MAX];
  int n;
  char text[400];
} cn_suggest;
void cn_suggest_init(cn_suggest *s, const char *word);
void cn_suggest_consider(cn_suggest *s, const char *name); /* NULL: ignored */
void cn_suggest_consider_n(cn_suggest *s, const char *name, size_t len);
/* Each name of a list written for a message, separated by commas, blanks or '|' ("off, cached"). */
void cn_suggest_consider_list(cn_suggest *s, const char *list);
const char *cn_suggest_text(cn_suggest *s);

/* ---- Positioned messages (src/core/source.c) ----
 * A source text a message can point into: a file's text (file set; line and col say where the text
 * starts in it, 1 and 1 for a whole file, elsewhere for a Tile body inside a script), or a one-line
 * text without a file (file NULL; kind names it in the message: "einsum spec"). */
typedef struct {
  const char *file;
  const char *kind;
  const char *text;
  int line, col;
} cn_source;
/* The file line and column of byte `offset` of src->text. */
void cn_source_locate(const cn_source *src, size_t offset, int *line, int *col);
/* Fails with CN_ERR_INVALID and the message WHAT positioned at (line, col) of the file (for a
 * text without a file, line is 1 and col the byte column in the text): "FILE:LINE:COL: WHAT", the
 * source line and a caret; or KIND "TEXT": WHAT at column COL, the text and a caret. */
cn_status cn_fail_at(cn_ctx *ctx, const cn_source *src, int line, int col, const char *fmt, ...)
    CN_PRINTF(5, 6);
cn_status cn_fail_at_v(cn_ctx *ctx, const cn_source *src, int line, int col, const char *fmt,
                       va_list ap);

/* Moves the text into the context's arena and frees the builder; NULL (with a CN_ERR_NOMEM
 * message) if the builder failed or the copy cannot be made. */
const char *cn_sbuf_finish(cn_ctx *ctx, cn_sbuf *sb);
void cn_sbuf_free(cn_sbuf *sb);

/* ---- Hash map (arena, src/core/map.c) ----
 * Keys are NUL-terminated strings compared by content (`strings`) or pointers compared by
 * address; neither keys nor values are copied, and a key is never NULL. Lookups and insertions
 * take expected constant time, so tables keyed by names or objects (symbol names of a routine,
 * a script's globals) stay linear in what they hold. A zero-filled map is empty and ready (set
 * `strings` before the first insertion); the table lives in the context's arena, like the arrays
 * of cn_arena_grow, so a map needs no release. */
typedef struct {
  const void *key; /* NULL: a free slot */
  void *value;
} cn_map_slot;
typedef struct {
  cn_map_slot *slots;
  int cap, count; /* cap is 0 or a power of two, count < 3/4 of it */
  bool strings;
} cn_map;
/* The value stored under key; NULL when there is none. */
void *cn_map_get(const cn_map *map, const void *key);
/* Stores value under key, replacing an earlier value; false (with a CN_ERR_NOMEM message) when
 * the table cannot grow. */
bool cn_map_put(cn_ctx *ctx, cn_map *map, const void *key, void *value);

/* ---- The context ---- */
typedef struct {
  const char *name;
  int64_t range; /* 0: unbounded */
} cn_symbol_info;

/* Cleanups run (newest first) by cn_ctx_destroy: how objects of higher layers that own resources
 * (routines, node buffers) are released with the context without the core knowing them. */
typedef struct cn_cleanup {
  void (*fn)(void *arg);
  void *arg;
  struct cn_cleanup *prev, *next;
} cn_cleanup;

/* ---- Progress of long work (the hook of cn_ctx_set_progress) ----
 * What the context is busy with: the routines being compiled (from lowering to the loaded object,
 * tuning included) and the GEMM nests being tuned, counted by the layers that do the work. An
 * activity runs while any count is positive; one that starts less than CN_PROGRESS_GAP_US after
 * the previous one ended continues it (its clock and its done counts), since a script compiles its
 * statements one at a time and runs each in between. */
typedef enum { CN_PROGRESS_COMPILE, CN_PROGRESS_TUNE, CN_PROGRESS_KINDS } cn_progress_kind;
typedef struct {
  int active[CN_PROGRESS_KINDS]; /* being compiled, being tuned */
  int done[CN_PROGRESS_KINDS];   /* finished (or failed) since the activity began */
  uint64_t start_us;             /* when the activity began */
  uint64_t end_us;               /* when the last activity ended; 0: none yet */
  uint64_t drawn_us;             /* when the hook last received a line */
  uint64_t after_us;             /* the activity's age before its first line */
  bool shown;                    /* the hook holds a line that NULL has not erased */
  bool changed;                  /* a count changed since the hook's last line */
} cn_progress;

/* An option's value as set on the context (both texts malloc'd; value NULL: back to default). */
typedef struct {
  char *key, *value;
} cn_option;

struct cn_ctx {
  cn_arena arena;
  cn_status status;
  char error[4096];
  cn_log_fn log_fn;
  void *log_user;
  cn_log_level log_min;
  cn_option *options; /* the values set with cn_ctx_set_option; malloc'd, as their texts */
  int n_options, cap_options;
  /* The id of the node the last failure is about, set right after cn_fail by the layer that
   * knows it (a NaN check, a buffer that cannot be allocated) so that higher layers can name the
   * tensor and its script position; cn_fail clears it. */
  int failed_node;
  uint64_t stats[CN_STAT_COUNT];
  int next_node_id;
  cn_symbol_info *symbols; /* malloc'd, grown by doubling */
  int n_symbols, cap_symbols;
  cn_cleanup *cleanups; /* newest first */
  /* The cleanup that owns the runtime's worker pool (src/runtime/pool.c, cn_pool_of), NULL before
   * the first parallel run: every run finds it at once, where the list of cleanups holds one
   * entry per node buffer. The core neither creates nor reads the pool. */
  cn_cleanup *worker_pool;
  /* The context's CPU devices (src/ir/devices.c, cn_ctx_open_devices), NULL before the first: the
   * table every device number is looked up in, in the arena (released after every cleanup, so
   * the copies and scratch freed by cleanups find their device). The core neither creates nor
   * reads it. */
  void *cpu_devices;
  /* The generated-C backend's batches compiling behind their routines (src/backend/cc.c, its
   * start_many), NULL when none: a routine run lets them start their next compilers
   * (cn_cc_drive). The core neither creates nor reads them. */
  void *compiling;
  cn_progress_fn progress_fn; /* NULL: nobody is told, and the counts cost no clock reads */
  void *progress_user;
  cn_progress progress;
  /* Test hook: when > 0, counts down on every allocation through cn_alloc / cn_malloc and the
   * allocation that reaches 0 fails, so error paths can be exercised. */
  long fail_alloc_countdown;
};

/* Microseconds of a monotonic clock, for the CN_STAT_US_* counters. */
uint64_t cn_now_us(void);

/* Counts delta (positive: begun, negative: finished or failed) things of a kind, keeping
 * the activity's clock; when a hook is set, gives it the line if the activity is old enough and the
 * last line is old enough (as cn_progress_tick), or NULL when the activity ends after a line was
 * given. Every +n must be matched by a -n on every path, failures included. */
void cn_progress_add(cn_ctx *ctx, cn_progress_kind kind, int delta);
/* Gives the hook the activity's line if one is due (the activity older than its delay, and a
 * count changed since the last line or that line older than a fifth of a second): for long waits
 * inside an activity (the C compiler, timing runs), so the line's clock moves. Cheap: nothing but a
 * clock read when a hook is set and the context is busy, nothing at all otherwise; calling it every
 * few milliseconds is fine. */
void cn_progress_tick(cn_ctx *ctx);

/* Records a failure: status plus printf-style message. Returns status for `return cn_fail(...)`. */
cn_status cn_fail(cn_ctx *ctx, cn_status status, const char *fmt, ...) CN_PRINTF(3, 4);
void cn_log(cn_ctx *ctx, cn_log_level level, const char *fmt, ...) CN_PRINTF(3, 4);

/* Arena allocation with a CN_ERR_NOMEM message on failure. */
void *cn_alloc(cn_ctx *ctx, size_t bytes);
char *cn_strdup(cn_ctx *ctx, const char *s);
/* Grows an arena array *arr of *cap elements so that it holds at least `need` (doubling; the old
 * block stays in the arena). False with a CN_ERR_NOMEM message on failure. */
bool cn_arena_grow(cn_ctx *ctx, void **arr, int *cap, int need, size_t elem);
/* malloc/calloc/realloc for data with its own lifetime (buffers), with the same failure
 * handling (and the same test hook). Free with free(). */
void *cn_malloc(cn_ctx *ctx, size_t bytes);
void *cn_calloc(cn_ctx *ctx, size_t count, size_t size);
/* Zero-filled memory for a tensor's cells, `bytes` of them (rounded up to 64), starting on a
 * 64-byte boundary (free() releases it): a vector load or store of a cache line never straddles
 * two lines (calloc's large blocks start 16 bytes into a page, which made every AVX-512 access of
 * a stream cross lines: c = a + 3 b ran at two thirds of its speed). */
void *cn_calloc_cells(cn_ctx *ctx, size_t bytes);
void *cn_realloc(cn_ctx *ctx, void *ptr, size_t bytes);
/* Registers fn(arg) to run at destroy; NULL (with an error) on allocation failure. */
cn_cleanup *cn_ctx_add_cleanup(cn_ctx *ctx, void (*fn)(void *), void *arg);
/* Unregisters without running it. */
void cn_ctx_remove_cleanup(cn_ctx *ctx, cn_cleanup *cleanup);
const cn_symbol_info *cn_ctx_symbol(const cn_ctx *ctx, cn_symbol sym); /* NULL if invalid */

/* Option storage. The core keeps the value set for each key and knows neither the keys nor their
 * defaults: the public cn_ctx_set_option and cn_ctx_option (src/runtime/routine.c) check keys and
 * values and compute defaults, with the generated-C backend's own options in src/backend/cc.c. */
/* Stores a copy of value (NULL: none, the default applies) under key; CN_ERR_NOMEM with a message
 * on failure, the previous value kept. */
cn_status cn_ctx_store_option(cn_ctx *ctx, const char *key, const char *value);
/* The value stored under key, or NULL when none is set. */
const char *cn_ctx_stored_option(const cn_ctx *ctx, const char *key);

/* Overflow-checked size arithmetic: false on overflow. */
bool cn_mul_size(size_t a, size_t b, size_t *out);

/* ---- Files (src/core/files.c) ---- */
/* The decimal digits s[0 .. len) as an integer of at most max in *out: false when the text is
 * empty, holds anything but the digits 0-9 (no sign, blank or suffix) or exceeds max. The one
 * parse of a number read from a file (a .npy shape, a checkpoint's epoch, a tune or cache
 * record, a sysfs cache size, a temporary's pid), so that none saturates, wraps, stops at
 * trailing garbage or, as sscanf does on out-of-range input, is undefined. */
bool cn_parse_natural(const char *s, size_t len, uint64_t max, uint64_t *out);
/* This host's name as temporary file names carry it: letters, digits and '-' kept, anything
 * else '_' (a '.' would break the name's fields), "host" when there is none. */
void cn_host_tag(char *out, size_t size);
/* Removes from dir what writers killed midway left behind: the files named
 * PREFIX PID "." SERIAL SUFFIX (decimal PID and SERIAL, SUFFIX one of the NULL-terminated
 * suffixes, "" for none) whose process no longer exists (kill(pid, 0) fails with ESRCH). prefix
 * must name this host (cn_host_tag), since a pid means nothing on another one. A live writer's
 * file (this process's included) and any name of another form are left alone. Best effort: a
 * failure only leaves the file. */
void cn_remove_stale_temporaries(const char *dir, const char *prefix, const char *const *suffixes);

/* What a file of this st_mode is, for messages: "a regular file", "a directory", "a symbolic
 * link", "a FIFO", "a socket", "a character device", "a block device" or "a special file". */
const char *cn_file_kind(unsigned mode);
/* mkdir -p: every missing component after the first `existing` characters of dir is created with
 * mode (those before are never created: a home directory that is missing stays missing); an
 * existing non-directory is an error. On failure why holds the reason (naming dir as `what`, e.g.
 * "cache directory") and the result is false. */
bool cn_make_directories(const char *dir, size_t existing, unsigned mode, const char *what,
                         char *why, size_t why_size);
/* The CPU's model name from /proc/cpuinfo ("unknown" when unreadable), read once per process. */
const char *cn_cpu_model(void);

/* |v| without overflow (INT64_MIN included), and the greatest common divisor (gcd(0, 0) = 0):
 * for the affine arithmetic of index expressions and loop bounds. */
static inline uint64_t cn_i64_magnitude(int64_t v) {
  return v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
}
static inline uint64_t cn_u64_gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

#endif
