/* The generated-C backend: generates a procedure's C source (cgen.c), compiles it with the system
 * C compiler into a shared object kept in an on-disk cache, loads it with dlopen and runs its
 * entry point on the routine's buffers.
 *
 * Invariants: the cache key is a hash of everything that determines the object (source, compiler
 * command, flags), so a file <name>-<key>.so in the cache directory is always the compilation of
 * <name>-<key>.c with those settings; both files only ever appear by rename() of a complete file
 * written under a per-process temporary name, so processes sharing a cache never see a partial
 * file; no temporary file survives a failure. The compiled state owns the loaded object and the
 * malloc'd source until release. */
#include "backend/backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Compiler output kept in an error message: enough to see the first diagnostics. */
#define CC_MAX_OUTPUT_LINES 20
#define CC_MAX_OUTPUT_BYTES 2500

typedef void (*cc_entry_fn)(void *const *buffers, const int64_t *syms);

typedef struct {
  void *handle;
  cc_entry_fn entry;
  char *source; /* malloc'd generated C */
} cc_compiled;

/* Paths and commands of one compilation (malloc'd). */
typedef struct {
  char *c_path, *so_path, *tmp_c, *tmp_so;
} cc_paths;

/* ---- Small helpers ---- */

/* The builder's text handed over to the caller (malloc'd), or NULL with a CN_ERR_NOMEM message. */
static char *sbuf_release(cn_ctx *ctx, cn_sbuf *sb) {
  if (sb->failed || !sb->data) {
    cn_sbuf_free(sb);
    cn_fail(ctx, CN_ERR_NOMEM, "out of memory while building a path or command");
    return NULL;
  }
  char *text = sb->data;
  *sb = (cn_sbuf){0};
  return text;
}

static char *format_path(cn_ctx *ctx, const char *fmt, ...) CN_PRINTF(2, 3);
static char *format_path(cn_ctx *ctx, const char *fmt, ...) {
  cn_sbuf sb = {0};
  va_list ap;
  va_start(ap, fmt);
  cn_sbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  return sbuf_release(ctx, &sb);
}

/* FNV-1a over the bytes of s, continuing from h. */
static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* The cache key of source + "\n" + compiler + "\n" + flags, with the total length mixed in. */
static uint64_t cache_key(const char *source, size_t source_len, const char *cc,
                          const char *flags) {
  uint64_t h = 14695981039346656037ull;
  h = fnv1a(h, source, source_len);
  h = fnv1a(h, "\n", 1);
  h = fnv1a(h, cc, strlen(cc));
  h = fnv1a(h, "\n", 1);
  h = fnv1a(h, flags, strlen(flags));
  uint64_t len = source_len + strlen(cc) + strlen(flags) + 2;
  for (int i = 0; i < 8; i++) {
    h ^= (len >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

/* Appends path in single quotes for /bin/sh ('\'' for an embedded quote). */
static void shell_quote(cn_sbuf *sb, const char *path) {
  cn_sbuf_putc(sb, '\'');
  for (const char *p = path; *p; p++) {
    if (*p == '\'')
      cn_sbuf_puts(sb, "'\\''");
    else
      cn_sbuf_putc(sb, *p);
  }
  cn_sbuf_putc(sb, '\'');
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Removes a temporary file if present (used on failure paths: errors are already reported). */
static void discard(const char *path) {
  if (path) unlink(path);
}

/* mkdir -p: every missing component is created; an existing non-directory is an error. */
static cn_status make_directories(cn_ctx *ctx, const char *dir) {
  char *path = format_path(ctx, "%s", dir);
  if (!path) return ctx->status;
  cn_status status = CN_OK;
  size_t n = strlen(path);
  for (size_t i = 1; i <= n && status == CN_OK; i++) {
    if (path[i] != '/' && path[i] != '\0') continue;
    if (path[i - 1] == '/') continue; /* repeated or trailing slash */
    char saved = path[i];
    path[i] = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      status = cn_fail(ctx, CN_ERR_IO, "cannot create cache directory '%s' ('%s': %s)", dir, path,
                       strerror(errno));
    path[i] = saved;
  }
  struct stat st;
  if (status == CN_OK && stat(dir, &st) != 0)
    status = cn_fail(ctx, CN_ERR_IO, "cannot use cache directory '%s': %s", dir, strerror(errno));
  else if (status == CN_OK && !S_ISDIR(st.st_mode))
    status = cn_fail(ctx, CN_ERR_IO, "cache directory '%s' is not a directory", dir);
  free(path);
  return status;
}

/* Writes text to tmp and renames it to path, atomically replacing any previous file. */
static cn_status write_file_atomically(cn_ctx *ctx, const char *tmp, const char *path,
                                       const char *text, size_t len) {
  unlink(tmp); /* a stale file of a dead process that had our pid */
  FILE *f = fopen(tmp, "wx");
  if (!f) return cn_fail(ctx, CN_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
  bool ok = fwrite(text, 1, len, f) == len;
  int saved = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    discard(tmp);
    return cn_fail(ctx, CN_ERR_IO, "cannot write '%s': %s", tmp, strerror(saved));
  }
  if (rename(tmp, path) != 0) {
    saved = errno;
    discard(tmp);
    return cn_fail(ctx, CN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(saved));
  }
  return CN_OK;
}

/* Reads the whole pipe, keeping the first lines of it in out. */
static void read_compiler_output(FILE *pipe, cn_sbuf *out) {
  char chunk[4096];
  int lines = 0;
  bool truncated = false;
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, pipe)) > 0) {
    for (size_t i = 0; i < got; i++) {
      if (lines >= CC_MAX_OUTPUT_LINES || out->len >= CC_MAX_OUTPUT_BYTES) {
        truncated = truncated || !(chunk[i] == '\n' && lines < CC_MAX_OUTPUT_LINES);
        continue;
      }
      cn_sbuf_putc(out, chunk[i]);
      if (chunk[i] == '\n') lines++;
    }
  }
  while (out->len > 0 && out->data[out->len - 1] == '\n') out->data[--out->len] = '\0';
  if (truncated) cn_sbuf_puts(out, "\n...");
}

/* Runs `<cc> <flags> -o '<tmp_so>' '<c_path>'` through /bin/sh (cc and flags are shell words, so
 * "ccache gcc" works), then renames tmp_so to so_path. */
static cn_status run_compiler(cn_ctx *ctx, const char *cc, const char *flags,
                              const cc_paths *paths) {
  /* stderr joins the pipe on a line of its own first, so that even the shell's complaints about
   * unparsable flags (the shell parses and runs line by line) reach the message. */
  cn_sbuf cmd = {0};
  cn_sbuf_printf(&cmd, "exec 2>&1\n%s %s -o ", cc, flags);
  shell_quote(&cmd, paths->tmp_so);
  cn_sbuf_putc(&cmd, ' ');
  shell_quote(&cmd, paths->c_path);
  char *command = sbuf_release(ctx, &cmd);
  if (!command) return ctx->status;
  cn_log(ctx, CN_LOG_DEBUG, "compiling: %s", command);
  ctx->stats[CN_STAT_COMPILER_RUNS]++;
  fflush(NULL); /* the child must not inherit unflushed stdio buffers */
  FILE *pipe = popen(command, "r");
  free(command);
  if (!pipe)
    return cn_fail(ctx, CN_ERR_COMPILE, "cannot run the C compiler '%s' on '%s': %s", cc,
                   paths->c_path, strerror(errno));
  cn_sbuf output = {0};
  read_compiler_output(pipe, &output);
  int wait_status = pclose(pipe);
  cn_status status = CN_OK;
  if (wait_status == -1) {
    status = cn_fail(ctx, CN_ERR_COMPILE, "C compiler on generated file %s: cannot wait: %s",
                     paths->c_path, strerror(errno));
  } else if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    char how[64];
    if (WIFEXITED(wait_status))
      snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(wait_status));
    else if (WIFSIGNALED(wait_status))
      snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(wait_status));
    else
      snprintf(how, sizeof how, "wait status %d", wait_status);
    status =
        cn_fail(ctx, CN_ERR_COMPILE, "C compiler failed on generated file %s (%s):\n%s",
                paths->c_path, how, output.failed || output.len == 0 ? "(no output)" : output.data);
  } else if (!file_exists(paths->tmp_so)) {
    status = cn_fail(ctx, CN_ERR_COMPILE,
                     "C compiler '%s' succeeded on generated file %s but wrote no '%s'", cc,
                     paths->c_path, paths->tmp_so);
  } else if (rename(paths->tmp_so, paths->so_path) != 0) {
    status = cn_fail(ctx, CN_ERR_IO, "cannot rename '%s' to '%s': %s", paths->tmp_so,
                     paths->so_path, strerror(errno));
  }
  cn_sbuf_free(&output);
  if (status != CN_OK) discard(paths->tmp_so);
  return status;
}

static cn_status load_object(cn_ctx *ctx, const char *so_path, const char *name, cc_compiled *c) {
  c->handle = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!c->handle)
    return cn_fail(ctx, CN_ERR_COMPILE, "cannot load compiled routine '%s' from %s: %s", name,
                   so_path, dlerror());
  char symbol[512];
  snprintf(symbol, sizeof symbol, "%s_entry", name);
  dlerror();
  /* POSIX's sanctioned conversion of dlsym's object pointer to a function pointer. */
  *(void **)(&c->entry) = dlsym(c->handle, symbol);
  if (!c->entry) {
    const char *why = dlerror();
    cn_status status = cn_fail(ctx, CN_ERR_COMPILE, "compiled routine %s has no symbol '%s': %s",
                               so_path, symbol, why ? why : "null symbol");
    dlclose(c->handle);
    c->handle = NULL;
    return status;
  }
  return CN_OK;
}

static cn_status cc_paths_make(cn_ctx *ctx, const char *dir, const char *name, uint64_t key,
                               cc_paths *p) {
  /* Unique per process and per call, so concurrent compilations never share a temporary. */
  static atomic_ulong counter;
  unsigned long serial = atomic_fetch_add(&counter, 1);
  long pid = (long)getpid();
  p->c_path = format_path(ctx, "%s/%s-%016" PRIx64 ".c", dir, name, key);
  p->so_path = format_path(ctx, "%s/%s-%016" PRIx64 ".so", dir, name, key);
  p->tmp_c = format_path(ctx, "%s/%s-%016" PRIx64 ".tmp-%ld-%lu.c", dir, name, key, pid, serial);
  p->tmp_so = format_path(ctx, "%s/%s-%016" PRIx64 ".tmp-%ld-%lu.so", dir, name, key, pid, serial);
  return p->c_path && p->so_path && p->tmp_c && p->tmp_so ? CN_OK : ctx->status;
}

static void cc_paths_free(cc_paths *p) {
  free(p->c_path);
  free(p->so_path);
  free(p->tmp_c);
  free(p->tmp_so);
}

/* ---- The backend ---- */

static void cc_release(void *compiled) {
  cc_compiled *c = compiled;
  if (!c) return;
  if (c->handle) dlclose(c->handle);
  free(c->source);
  free(c);
}

static cn_status cc_build(cn_ctx *ctx, const cn_ll_proc *proc, cc_compiled *c) {
  cn_sbuf sb = {0};
  cn_status status = cn_cgen_source(ctx, proc, &sb);
  if (status != CN_OK) {
    cn_sbuf_free(&sb);
    return status;
  }
  size_t source_len = sb.len;
  if (!(c->source = sbuf_release(ctx, &sb))) return ctx->status;

  const char *cc = cn_ctx_option(ctx, "cc");
  const char *flags = cn_ctx_option(ctx, "cflags");
  const char *dir = cn_ctx_option(ctx, "cache_dir");
  CN_ASSERT(cc && flags && dir);
  if ((status = make_directories(ctx, dir)) != CN_OK) return status;

  cc_paths paths = {0};
  uint64_t key = cache_key(c->source, source_len, cc, flags);
  status = cc_paths_make(ctx, dir, proc->name, key, &paths);
  if (status == CN_OK) {
    if (file_exists(paths.so_path)) {
      ctx->stats[CN_STAT_CACHE_HITS]++;
      cn_log(ctx, CN_LOG_DEBUG, "routine '%s': cached %s", proc->name, paths.so_path);
    } else {
      status = write_file_atomically(ctx, paths.tmp_c, paths.c_path, c->source, source_len);
      if (status == CN_OK) status = run_compiler(ctx, cc, flags, &paths);
    }
  }
  if (status == CN_OK) status = load_object(ctx, paths.so_path, proc->name, c);
  cc_paths_free(&paths);
  return status;
}

static cn_status cc_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                            const char **source) {
  cc_compiled *c = cn_calloc(ctx, 1, sizeof *c);
  if (!c) return ctx->status;
  cn_status status = cc_build(ctx, proc, c);
  if (status != CN_OK) {
    cc_release(c);
    return status;
  }
  *compiled = c;
  if (source) *source = c->source;
  return CN_OK;
}

static cn_status cc_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  (void)ctx; /* generated code has no failure path: its accesses were validated upstream */
  cc_compiled *c = compiled;
  c->entry(buffers, syms);
  return CN_OK;
}

const cn_backend cn_backend_c = {
    .name = "c",
    .compile = cc_compile,
    .run = cc_run,
    .release = cc_release,
};
