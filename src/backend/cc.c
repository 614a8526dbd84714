/* The generated-C backend: generates a procedure's C source (cgen.c), compiles it with the system
 * C compiler into a shared object kept in an on-disk cache, loads it with dlopen and runs its
 * entry point on the routine's buffers.
 *
 * The options cc, cflags and cache_dir are this backend's: their defaults and environment
 * variables live here (cn_cc_option), the context only stores the values set on it. The compiler
 * is the option cc, else $CC, else "cc"; its flags the option cflags, else $CANNL_CFLAGS, else
 * "-O3 -march=native -fopenmp-simd -ffp-contract=off -shared -fPIC -std=c11". The cache directory
 * is the option cache_dir, else $CANNL_CACHE_DIR, else $XDG_CACHE_HOME/cannl, else
 * $HOME/.cache/cannl (created below an existing home only: a missing home is no home), else (no
 * usable home: none, or its cache cannot be created or written) the per-user
 * $TMPDIR/cannl-cache-<uid> (/tmp/... when TMPDIR is unset or not a writable directory), which
 * must be a directory owned by the user and writable by nobody else. The value "off" (option or
 * variable), or a refused per-user directory, compiles into a private temporary directory whose
 * files are removed once the object is loaded. An explicit directory that cannot be created is
 * an error (a mistyped path); one that exists but cannot be written still serves its hits, and a
 * miss compiles privately with a warning (a read-only shared cache).
 *
 * Invariants: the cache key is a hash of the key text <cc> "\n" <cflags> "\n" <source>, so a
 * file <name>-<key>.so is meant to be the compilation of <name>-<key>.c with those settings, and
 * it is never trusted on its name alone: its record <name>-<key>.sum holds
 *   "cannl cache record 1\nkey <n>\n" <the n bytes of key text> "\nso <size> <fnv1a64 hex>\n"
 * and an object is loaded only after its bytes (read, never mapped: a truncated mapping can raise
 * SIGBUS) match the size and checksum and the record's key text equals ours byte for byte; it
 * is loaded from the file descriptor those bytes were read from (/proc/self/fd/N, by path only
 * without /proc), so a file renamed into the slot after the check is never the one loaded. Any
 * mismatch, a missing record or a failed load deletes the entry, says so on the log (stderr
 * without a log hook) and recompiles. Every file appears only by rename() of a complete file
 * written under a per-process temporary name, the object before its record; a fresh object is
 * loaded from its temporary name before it is published, so a concurrent process that evicts the
 * entry in between cannot make the load fail. No temporary file survives a failure, and those a
 * killed process left (named with its host and pid) go with the next compilation of the same
 * entry (or the next store of the same tune record). Cache files
 * are read only through open_regular (never opening a FIFO, a device or a link), and a slot
 * holding anything but a regular file is cleared before a compilation publishes into it, or, when
 * it cannot be (a full directory), the compilation goes private with a warning: a planted file
 * never hangs or fails a run. The compiler
 * runs without a shell, from an argv split out of the cc and cflags options (split_words). The
 * compiled state owns the loaded object and the malloc'd source until release. The compiler
 * processes of a compilation, and of a batch of them, are scheduled by cc_jobs.c (the types and
 * functions the two files share: cc_internal.h). A procedure with
 * parallel loops also exports <name>_entry_par, which run_parallel calls with the caller's pool
 * (per call: one cached object may serve several contexts); without it run_parallel is run. A
 * procedure with GEMMs of the GEMM library (gemm_lib.h) exports its pointer <name>_gemm_lib, set
 * to cn_gemm_lib_run when the object is loaded, before any run. */
#include "backend/cc_internal.h"
#include "backend/gemm_lib.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

extern char **environ;

#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME  1099511628211ull

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
    h *= FNV_PRIME;
  }
  return h;
}

/* The cache key of source + "\n" + compiler + "\n" + flags, with the total length mixed in. It
 * only names the slot: the record's full key text is what a hit is checked against. */
static uint64_t cache_key(const char *source, size_t source_len, const char *cc,
                          const char *flags) {
  uint64_t h = FNV_OFFSET;
  h = fnv1a(h, source, source_len);
  h = fnv1a(h, "\n", 1);
  h = fnv1a(h, cc, strlen(cc));
  h = fnv1a(h, "\n", 1);
  h = fnv1a(h, flags, strlen(flags));
  uint64_t len = source_len + strlen(cc) + strlen(flags) + 2;
  for (int i = 0; i < 8; i++) {
    h ^= (len >> (8 * i)) & 0xffu;
    h *= FNV_PRIME;
  }
  return h;
}

/* Removes a cache file if present (failure paths and evictions: a file that is already gone is
 * fine). unlink removes any kind of file but a directory, and a link itself, never its target;
 * a directory planted at the name is removed when empty (a full one is left alone). 0, or the
 * errno of the failed removal. */
int cn_cc_discard(const char *path) {
  if (!path || unlink(path) == 0 || errno == ENOENT) return 0;
  if ((errno == EISDIR || errno == EPERM) && rmdir(path) == 0) return 0;
  return errno;
}

/* Opens a cache file for reading when it is a regular file, without blocking: lstat first, so
 * that a FIFO or a device planted in the cache is never opened, then O_NONBLOCK | O_NOFOLLOW and
 * fstat, against a file swapped in between. The fd, or -1 with errno: EINVAL for any other kind
 * of file (symbolic links included), whose st_mode is then in *st. Every read of the cache goes
 * through here. */
static int open_regular(const char *path, struct stat *st) {
  if (lstat(path, st) != 0) return -1;
  if (!S_ISREG(st->st_mode)) {
    errno = EINVAL;
    return -1;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) { /* a link swapped in after lstat */
      errno = EINVAL;
      st->st_mode = S_IFLNK;
    }
    return -1;
  }
  int err = fstat(fd, st) != 0 ? errno : S_ISREG(st->st_mode) ? 0 : EINVAL;
  if (!err) return fd;
  close(fd);
  errno = err;
  return -1;
}

/* Reads up to n bytes of fd into buf; the count read, or -1 with errno. */
static ssize_t read_up_to(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, buf + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) break;
    got += (size_t)k;
  }
  return (ssize_t)got;
}

/* A warning on the context's log, or one "cannl: " line on stderr when no log hook is set (a
 * damaged cache or a refused directory must not go unnoticed). With once, stderr gets the line
 * only the first time in the process (the log hook every time). */
void cn_cc_warn(cn_ctx *ctx, atomic_bool *once, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ctx->log_fn)
    cn_log(ctx, CN_LOG_WARN, "%s", msg);
  else if (!once || !atomic_exchange(once, true))
    fprintf(stderr, "cannl: %s\n", msg);
}

/* ---- Splitting the compiler command ---- */

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static cn_status split_error(cn_ctx *ctx, const char *what, const char *problem, const char *text,
                             size_t at) {
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s at character %zu of %s:\n", problem, at + 1, what);
  cn_sbuf_quote_caret(&sb, text, at);
  /* Without memory for the builder the message still names the problem and the position. */
  cn_status status =
      sb.failed ? cn_fail(ctx, CN_ERR_INVALID, "%s at character %zu of %s", problem, at + 1, what)
                : cn_fail(ctx, CN_ERR_INVALID, "%s", sb.data);
  cn_sbuf_free(&sb);
  return status;
}

/* Appends the words of text to cmd (README "Compile cache"): blanks separate words; '...' keeps
 * its characters literally; "..." groups, a backslash in it taking the next character literally;
 * outside quotes a backslash takes the next character literally; quoted and unquoted parts next
 * to each other form one word, and '' or "" alone is an empty word. Nothing else is special: no
 * variables, globbing, redirection or command separators. cmd->chars has room for the words
 * because a word never has more characters than the input it came from plus its separator. */
static cn_status split_words(cn_ctx *ctx, const char *what, const char *text, cc_command *cmd,
                             char **out) {
  const char *p = text;
  char *o = *out;
  for (;;) {
    while (is_blank(*p)) p++;
    if (!*p) break;
    cmd->argv[cmd->argc++] = o;
    while (*p && !is_blank(*p)) {
      if (*p == '\'' || *p == '"') {
        char quote = *p;
        const char *open = p++;
        while (*p && *p != quote) {
          if (quote == '"' && *p == '\\' && p[1]) p++;
          *o++ = *p++;
        }
        if (!*p)
          return split_error(
              ctx, what, quote == '"' ? "unterminated double quote" : "unterminated single quote",
              text, (size_t)(open - text));
        p++;
      } else if (*p == '\\') {
        if (!p[1])
          return split_error(ctx, what, "backslash escaping nothing", text, (size_t)(p - text));
        p++;
        *o++ = *p++;
      } else {
        *o++ = *p++;
      }
    }
    *o++ = '\0';
  }
  *out = o;
  return CN_OK;
}

static void cc_command_free(cc_command *cmd) {
  free(cmd->argv);
  free(cmd->chars);
  *cmd = (cc_command){0};
}

/* Splits cc and flags into cmd's words (a run's argv is made of them by run_argv). */
static cn_status cc_command_make(cn_ctx *ctx, const char *cc, const char *flags, cc_command *cmd) {
  size_t cc_len = strlen(cc), flags_len = strlen(flags);
  cmd->argv = cn_malloc(ctx, (cc_len + flags_len + 2) * sizeof *cmd->argv);
  cmd->chars = cmd->argv ? cn_malloc(ctx, cc_len + flags_len + 2) : NULL;
  if (!cmd->chars) return ctx->status;
  char *out = cmd->chars;
  cn_status status =
      split_words(ctx, "the compiler command (option 'cc', default $CC)", cc, cmd, &out);
  if (status == CN_OK && cmd->argc == 0)
    status = cn_fail(ctx, CN_ERR_INVALID,
                     "the compiler command (option 'cc', default $CC) names no program: '%s'", cc);
  if (status == CN_OK)
    status = split_words(ctx, "the compiler flags (option 'cflags', default $CANNL_CFLAGS)", flags,
                         cmd, &out);
  return status;
}

/* ---- Directories ---- */

/* The absolute value of an environment variable, or NULL (the XDG base directory specification
 * ignores relative paths, and a relative cache would move with the working directory). */
static const char *absolute_env(const char *name) {
  const char *value = getenv(name);
  return value && value[0] == '/' ? value : NULL;
}

/* $HOME when it is absolute and exists: a home that does not (the "/nonexistent" of system
 * users) is no home, and is never created. */
static const char *existing_home(void) {
  const char *home = absolute_env("HOME");
  struct stat st;
  return home && (stat(home, &st) == 0 || errno != ENOENT) ? home : NULL;
}

/* Where per-user and private directories go: $TMPDIR when it is an absolute path to a directory
 * we can write, else /tmp (a missing or unusable TMPDIR must not stop compilations). */
static const char *temp_base(void) {
  const char *tmp = absolute_env("TMPDIR");
  struct stat st;
  return tmp && stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) && access(tmp, W_OK | X_OK) == 0
             ? tmp
             : "/tmp";
}

static atomic_bool warned_home, warned_refused, warned_unwritable;

/* Whether this process may create files in dir (access(2), which also sees a read-only file
 * system); false with the reason in why. */
static bool writable_dir(const char *dir, char *why, size_t why_size) {
  if (access(dir, W_OK | X_OK) == 0) return true;
  snprintf(why, why_size, "cache directory '%s' is not writable (%s)", dir, strerror(errno));
  return false;
}

/* The per-user directory under temp_base(), created 0700, in *out; NULL after a warning
 * when it is not a directory owned by us that nobody else can write (lstat: a symbolic link is
 * refused, as anyone could have planted it), so that another user cannot feed us objects. */
static cn_status per_user_dir(cn_ctx *ctx, char **out) {
  char *dir = format_path(ctx, "%s/cannl-cache-%ld", temp_base(), (long)geteuid());
  *out = NULL;
  if (!dir) return ctx->status;
  struct stat st;
  const char *problem = NULL;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    problem = strerror(errno);
  else if (lstat(dir, &st) != 0)
    problem = strerror(errno);
  else if (S_ISLNK(st.st_mode))
    problem = "a symbolic link";
  else if (!S_ISDIR(st.st_mode))
    problem = "not a directory";
  else if (st.st_uid != geteuid())
    problem = "owned by another user";
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    problem = "writable by group or others";
  if (problem) {
    cn_cc_warn(ctx, &warned_refused,
               "refusing cache directory '%s' (%s): compiling without a disk cache", dir, problem);
    free(dir);
  } else {
    *out = dir;
  }
  return CN_OK;
}

/* A fresh private directory for a compilation without disk cache. */
static cn_status private_dir(cn_ctx *ctx, cc_place *place) {
  char *dir = format_path(ctx, "%s/cannl-XXXXXX", temp_base());
  if (!dir) return ctx->status;
  if (!mkdtemp(dir)) {
    cn_status status = cn_fail(ctx, CN_ERR_IO, "cannot create a temporary directory '%s': %s", dir,
                               strerror(errno));
    free(dir);
    return status;
  }
  *place = (cc_place){dir, true};
  return CN_OK;
}

/* The cache directory chosen explicitly: the option, else $CANNL_CACHE_DIR; NULL if neither. */
static const char *explicit_cache_dir(const cn_ctx *ctx) {
  const char *dir = cn_ctx_stored_option(ctx, "cache_dir");
  if (dir) return dir;
  const char *env = getenv("CANNL_CACHE_DIR");
  return env && *env ? env : NULL;
}

/* Resolves where this compilation's files go (order in the file comment). An explicit directory
 * that cannot be created is an error; a default one falls back as described there. */
static cn_status resolve_place(cn_ctx *ctx, cc_place *place) {
  char why[PATH_MAX + 256];
  const char *dir = explicit_cache_dir(ctx);
  if (dir && strcmp(dir, "off") == 0) return private_dir(ctx, place);
  if (dir) {
    if (!cn_make_directories(dir, 0, 0777, "cache directory", why, sizeof why))
      return cn_fail(ctx, CN_ERR_IO, "%s", why);
    /* the files' paths go on the compiler's command line: a relative directory named like an
     * option ("-x") is spelled "./-x" there, so it can only be read as a path */
    place->dir = format_path(ctx, dir[0] == '-' ? "./%s" : "%s", dir);
    return place->dir ? CN_OK : ctx->status;
  }
  const char *xdg = absolute_env("XDG_CACHE_HOME"), *home = xdg ? NULL : existing_home();
  char *base = xdg    ? format_path(ctx, "%s/cannl", xdg)
               : home ? format_path(ctx, "%s/.cache/cannl", home)
                      : NULL;
  if ((xdg || home) && !base) return ctx->status;
  if (base &&
      cn_make_directories(base, home ? strlen(home) : 0, 0700, "cache directory", why,
                          sizeof why) &&
      writable_dir(base, why, sizeof why)) {
    place->dir = base;
    return CN_OK;
  }
  bool had_base = base != NULL;
  free(base);
  char *fallback;
  cn_status status = per_user_dir(ctx, &fallback);
  if (status != CN_OK) return status;
  if (had_base)
    cn_cc_warn(ctx, &warned_home, "%s; using %s", why, fallback ? fallback : "no disk cache");
  if (!fallback) return private_dir(ctx, place);
  place->dir = fallback;
  return CN_OK;
}

/* The cache directory as cn_ctx_option reports it: the explicit one, else the first default of
 * resolve_place's order, before any check that it is usable. */
static const char *cache_dir_option(const cn_ctx *ctx) {
  const char *dir = explicit_cache_dir(ctx);
  if (dir) return dir;
  static _Thread_local char composed[PATH_MAX];
  const char *xdg = absolute_env("XDG_CACHE_HOME"), *home = xdg ? NULL : existing_home();
  if (xdg)
    snprintf(composed, sizeof composed, "%s/cannl", xdg);
  else if (home)
    snprintf(composed, sizeof composed, "%s/.cache/cannl", home);
  else
    snprintf(composed, sizeof composed, "%s/cannl-cache-%ld", temp_base(), (long)geteuid());
  return composed;
}

const char *cn_cc_option(const cn_ctx *ctx, const char *key) {
  if (strcmp(key, "cache_dir") == 0) return cache_dir_option(ctx);
  bool cc = strcmp(key, "cc") == 0;
  if (!cc && strcmp(key, "cflags") != 0) return NULL;
  const char *set = cn_ctx_stored_option(ctx, key);
  if (set) return set;
  const char *env = getenv(cc ? "CC" : "CANNL_CFLAGS");
  if (env && *env) return env;
  return cc ? "cc" : "-O3 -march=native -fopenmp-simd -ffp-contract=off -shared -fPIC -std=c11";
}

/* Empties and removes a private directory (its files are all named in paths). */
static void place_release(cc_place *place, const cc_paths *paths) {
  if (place->private_dir && paths) {
    cn_cc_discard(paths->c_path);
    cn_cc_discard(paths->tmp_c);
    cn_cc_discard(paths->tmp_so);
    rmdir(place->dir);
  }
  free(place->dir);
  *place = (cc_place){0};
}

/* ---- Files ---- */

/* Writes the concatenation of two texts to tmp and renames it to path, atomically replacing any
 * previous file. */
static cn_status write_file_atomically(cn_ctx *ctx, const char *tmp, const char *path,
                                       const char *text, size_t len, const char *tail,
                                       size_t tail_len) {
  unlink(tmp); /* a stale file of a dead process that had our pid */
  FILE *f = fopen(tmp, "wx");
  if (!f) return cn_fail(ctx, CN_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
  bool ok = fwrite(text, 1, len, f) == len && fwrite(tail, 1, tail_len, f) == tail_len;
  int saved = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    cn_cc_discard(tmp);
    return cn_fail(ctx, CN_ERR_IO, "cannot write '%s': %s", tmp, strerror(saved));
  }
  if (rename(tmp, path) != 0) {
    saved = errno;
    cn_cc_discard(tmp);
    return cn_fail(ctx, CN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(saved));
  }
  return CN_OK;
}

/* Size and FNV-1a checksum of the file open at fd, from its start, read with pread (mapping a
 * file that another process truncates can raise SIGBUS). 0 or an errno. */
static int fd_checksum(int fd, uint64_t *size, uint64_t *sum) {
  int err = 0;
  uint64_t h = FNV_OFFSET, n = 0;
  char chunk[16384];
  while (!err) {
    ssize_t got = pread(fd, chunk, sizeof chunk, (off_t)n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) err = errno;
    if (got <= 0) break;
    h = fnv1a(h, chunk, (size_t)got);
    n += (uint64_t)got;
  }
  *size = n;
  *sum = h;
  return err;
}

/* The record's last line for an object of this size and checksum. */
static void record_tail(char *out, size_t out_size, uint64_t size, uint64_t sum) {
  snprintf(out, out_size, "\nso %" PRIu64 " %016" PRIx64 "\n", size, sum);
}

/* ---- Running the compiler ---- */

/* The compiler's environment: ours, except that a TMPDIR temp_base() passed over (missing, not
 * a writable directory) becomes the /tmp it uses instead, for the compiler's own temporary files
 * (clang fails without them). *owned: the malloc'd array to free (NULL: environ itself); NULL
 * when out of memory. */
static char **compiler_environment(char ***owned) {
  static char fallback[] = "TMPDIR=/tmp";
  *owned = NULL;
  const char *tmp = getenv("TMPDIR");
  if (!tmp || strcmp(temp_base(), tmp) == 0) return environ;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = malloc((n + 1) * sizeof *env);
  if (!env) return NULL;
  for (size_t i = 0; i <= n; i++)
    env[i] = environ[i] && strncmp(environ[i], "TMPDIR=", 7) == 0 ? fallback : environ[i];
  return *owned = env;
}

/* Starts argv with stdin from /dev/null and stdout and stderr into a new pipe; 0 or an errno. */
int cn_cc_spawn(char **argv, pid_t *pid, int *read_fd) {
  char **owned, **env = compiler_environment(&owned);
  if (!env) return ENOMEM;
  int fds[2];
  if (pipe(fds) != 0) {
    int err = errno;
    free(owned);
    return err;
  }
  /* Close-on-exec, so that compilers started by other threads do not keep the pipe open. */
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t actions;
  int err = posix_spawn_file_actions_init(&actions);
  if (err) {
    close(fds[0]);
    close(fds[1]);
    free(owned);
    return err;
  }
  err = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (!err) err = posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  if (!err) err = posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  fflush(NULL); /* the child must not inherit unflushed stdio buffers */
  if (!err) err = posix_spawnp(pid, argv[0], &actions, NULL, argv, env);
  posix_spawn_file_actions_destroy(&actions);
  free(owned);
  close(fds[1]);
  if (err)
    close(fds[0]);
  else
    *read_fd = fds[0];
  return err;
}

/* The argv of one compiler run (malloc'd, pointing into cmd and extra): the words of cc and
 * cflags, without "-shared" for a piece's object (-c: clang warns of an unused flag, an error
 * with -Werror), then the NULL-terminated extra words; NULL when out of memory. */
char **cn_cc_run_argv(const cc_command *cmd, bool object_only, char *const *extra) {
  int n_extra = 0;
  while (extra[n_extra]) n_extra++;
  char **argv = malloc(sizeof *argv * (size_t)(cmd->argc + n_extra + 1));
  if (!argv) return NULL;
  int n = 0;
  for (int k = 0; k < cmd->argc; k++)
    if (!(object_only && k > 0 && strcmp(cmd->argv[k], "-shared") == 0)) argv[n++] = cmd->argv[k];
  for (int k = 0; k <= n_extra; k++) argv[n++] = extra[k];
  return argv;
}

/* ---- Loading ---- */

/* Unloads c's object (and closes the file it was loaded from). */
static void unload(cc_compiled *c) {
  if (c->handle) dlclose(c->handle);
  c->handle = NULL;
  if (c->fd_open) close(c->fd);
  c->fd_open = false;
}

static _Atomic(void (*)(const char *)) load_hook;

void cn_cc_set_load_hook(void (*fn)(const char *so_path)) {
  atomic_store(&load_hook, fn);
}

/* The name under which dlopen loads the file open at fd: "/proc/self/fd/N" when /proc shows that
 * fd there (the same device and inode), and no object loaded under that name is still mapped (a
 * dlclose'd object that the loader kept: dlopen would return it for the name alone); else false
 * and the caller loads by path. */
static bool fd_name(int fd, char *name, size_t size) {
  struct stat by_fd, by_name;
  snprintf(name, size, "/proc/self/fd/%d", fd);
  if (fstat(fd, &by_fd) != 0 || stat(name, &by_name) != 0 || by_fd.st_dev != by_name.st_dev ||
      by_fd.st_ino != by_name.st_ino)
    return false;
  void *old = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
  if (old) dlclose(old);
  return old == NULL;
}

/* Guards the GEMM library pointers of loaded objects (load_object). */
static pthread_mutex_t gemm_lib_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads the object and finds its entry; false with the reason in why. fd (or -1) is the object
 * opened and verified by the caller, and is taken over: the object is loaded through
 * /proc/self/fd/N (fd_name), so that what dlopen maps is the file whose bytes were checked, not
 * whatever a writer of the cache directory renamed to so_path since; the fd then stays open while
 * the object is loaded (cn_cc_release closes it), so that its number, and with it the loader's name
 * of the object, is not reused meanwhile. Without /proc (or fd -1) the object is loaded by path
 * and fd closed. */
static bool load_object(const char *so_path, int fd, const char *name, cc_compiled *c, char *why,
                        size_t why_size) {
  char fd_path[64];
  bool by_fd = fd >= 0 && fd_name(fd, fd_path, sizeof fd_path);
  void (*hook)(const char *) = atomic_load(&load_hook);
  if (hook) hook(so_path);
  c->handle = dlopen(by_fd ? fd_path : so_path, RTLD_NOW | RTLD_LOCAL);
  if (c->handle && by_fd) {
    c->fd_open = true;
    c->fd = fd;
  } else if (fd >= 0) {
    close(fd);
  }
  if (!c->handle) {
    const char *reason = dlerror();
    snprintf(why, why_size, "%s", reason ? reason : "dlopen failed");
    return false;
  }
  char symbol[512];
  snprintf(symbol, sizeof symbol, "%s_entry", name);
  dlerror();
  /* POSIX's sanctioned conversion of dlsym's object pointer to a function pointer. */
  *(void **)(&c->entry) = dlsym(c->handle, symbol);
  if (!c->entry) {
    const char *reason = dlerror();
    snprintf(why, why_size, "no symbol '%s': %s", symbol, reason ? reason : "null symbol");
    unload(c);
    return false;
  }
  snprintf(symbol, sizeof symbol, "%s_entry_par", name);
  *(void **)(&c->entry_par) = dlsym(c->handle, symbol); /* absent without parallel loops */
  /* the object's pointer to the GEMM library (absent without its GEMMs), set before any run; two
   * contexts may load one object, and the second finds it set (under the lock) and writes none */
  snprintf(symbol, sizeof symbol, "%s_gemm_lib", name);
  cn_gemm_lib_fn **gemm_lib = dlsym(c->handle, symbol);
  if (gemm_lib) {
    pthread_mutex_lock(&gemm_lib_lock);
    if (!*gemm_lib) *gemm_lib = cn_gemm_lib_run;
    pthread_mutex_unlock(&gemm_lib_lock);
  }
  return true;
}

/* "cannot read WHAT: " and why, in reason: errno err of open_regular, whose EINVAL names the
 * kind of file in st. */
static const char *read_failure(char *reason, size_t reason_size, const char *what, int err,
                                const struct stat *st) {
  if (err == EINVAL)
    snprintf(reason, reason_size, "cannot read %s: %s, not a regular file", what,
             cn_file_kind(st->st_mode));
  else
    snprintf(reason, reason_size, "cannot read %s: %s", what, strerror(err));
  return reason;
}

/* check_entry's comparison of the record with head and the object's size and checksum. */
static const char *check_record(cn_ctx *ctx, const cc_paths *paths, const cn_sbuf *head,
                                uint64_t size, uint64_t sum, char *reason, size_t reason_size,
                                cn_status *status) {
  int err;
  struct stat st;
  char tail[64];
  record_tail(tail, sizeof tail, size, sum);
  size_t tail_len = strlen(tail), want = head->len + tail_len;
  int fd = open_regular(paths->sum_path, &st);
  if (fd < 0) {
    err = errno;
    return err == ENOENT ? "it has no record"
                         : read_failure(reason, reason_size, "its record", err, &st);
  }
  /* One byte more than expected tells a longer record from the right one. */
  char *got = cn_malloc(ctx, want + 1);
  ssize_t n = got ? read_up_to(fd, got, want + 1) : 0;
  int read_err = errno;
  close(fd);
  if (!got) {
    *status = ctx->status;
    return "out of memory";
  }
  if (n < 0) {
    free(got);
    snprintf(reason, reason_size, "cannot read its record: %s", strerror(read_err));
    return reason;
  }
  const char *problem = NULL;
  if ((size_t)n < head->len || memcmp(got, head->data, head->len) != 0)
    problem = "its record is for another key (routine source, compiler or flags)";
  else if ((size_t)n != want || memcmp(got + head->len, tail, tail_len) != 0)
    problem = "its size or checksum differs from its record (truncated or modified)";
  free(got);
  return problem;
}

/* Why the cached object at so_path may not be loaded under this key, or NULL if it may (its
 * record's key text is ours and its bytes match the record's size and checksum): then *so_fd is
 * the object's file, open, whose bytes were checked (the caller loads that one). Fills reason for
 * errno-based problems. */
static const char *check_entry(cn_ctx *ctx, const cc_paths *paths, const cn_sbuf *head,
                               char *reason, size_t reason_size, cn_status *status, int *so_fd) {
  uint64_t size = 0, sum = 0;
  struct stat st;
  *so_fd = open_regular(paths->so_path, &st);
  int err = *so_fd < 0 ? errno : fd_checksum(*so_fd, &size, &sum);
  if (err) {
    if (*so_fd >= 0) close(*so_fd);
    *so_fd = -1;
    return read_failure(reason, reason_size, "it", err, &st);
  }
  const char *problem = check_record(ctx, paths, head, size, sum, reason, reason_size, status);
  if (problem || *status != CN_OK) {
    close(*so_fd);
    *so_fd = -1;
  }
  return problem;
}

/* A hit: the checked entry loaded into c. Otherwise the entry is deleted (with a warning when it
 * existed) and the caller compiles; status is set only for a failure of our own (memory). */
static bool try_cached(cn_ctx *ctx, const cc_paths *paths, const cn_sbuf *head, const char *name,
                       cc_compiled *c, cn_status *status) {
  struct stat st;
  if (lstat(paths->so_path, &st) != 0 && errno == ENOENT) return false;
  char reason[PATH_MAX + 256];
  int so_fd;
  const char *problem = check_entry(ctx, paths, head, reason, sizeof reason, status, &so_fd);
  if (*status != CN_OK) return false;
  if (!problem) {
    char why[1024];
    if (load_object(paths->so_path, so_fd, name, c, why, sizeof why)) return true;
    snprintf(reason, sizeof reason, "cannot load it: %s", why);
    problem = reason;
  }
  cn_cc_warn(ctx, NULL, "discarding cached object %s (%s); recompiling", paths->so_path, problem);
  cn_cc_discard(paths->sum_path);
  cn_cc_discard(paths->so_path);
  return false;
}

/* Whether a compilation that missed the shared cache can publish its files there: the directory
 * is writable (a read-only cache still serves its hits), and each slot (source, object, record)
 * is free or a regular file. Anything else planted at a slot (a directory, a FIFO, a link) is
 * removed with a warning when it can be (discard: an empty directory, any other kind). Otherwise
 * false after a warning, and the caller compiles privately: neither fails the run. */
static bool publish_ready(cn_ctx *ctx, const cc_place *place, const cc_paths *paths) {
  char why[PATH_MAX + 256];
  if (!writable_dir(place->dir, why, sizeof why)) {
    cn_cc_warn(ctx, &warned_unwritable, "%s: compiling without a disk cache", why);
    return false;
  }
  const char *slots[3] = {paths->c_path, paths->so_path, paths->sum_path};
  for (int k = 0; k < 3; k++) {
    struct stat st;
    if (lstat(slots[k], &st) != 0 || S_ISREG(st.st_mode)) continue;
    const char *kind = cn_file_kind(st.st_mode);
    int err = cn_cc_discard(slots[k]);
    if (err) {
      cn_cc_warn(ctx, NULL,
                 "cache slot '%s' holds %s that cannot be removed (%s): compiling without a disk "
                 "cache",
                 slots[k], kind, strerror(err));
      return false;
    }
    cn_cc_warn(ctx, NULL, "removed %s from cache slot '%s'", kind, slots[k]);
  }
  return true;
}

/* Temporaries are named STEM.tmp.HOST.PID.SERIAL[.EXT] (STEM: the cache file's path without
 * extension for an entry, the record's whole path for a tune record): unique per process and per
 * call, so concurrent compilations never share one, and with this host's name, so that the
 * temporaries a killed process left can be told from a live process's even in a cache directory
 * shared by several hosts (a home directory on NFS) and removed (remove_stale). */
static atomic_ulong tmp_serial;

/* "STEM.tmp.HOST.PID.SERIAL" for a fresh temporary of stem (malloc'd; NULL after a message). */
static char *tmp_stem(cn_ctx *ctx, const char *stem) {
  char host[64];
  cn_host_tag(host, sizeof host);
  return format_path(ctx, "%s.tmp.%s.%ld.%lu", stem, host, (long)getpid(),
                     atomic_fetch_add(&tmp_serial, 1));
}

/* Removes from dir the temporaries of the cache files of base (a stem's last component) that
 * processes of this host killed midway left: base.tmp.HOST.PID.SERIAL plus one of suffixes, PID
 * no longer running (cn_remove_stale_temporaries). */
static void remove_stale(const char *dir, const char *base, const char *const *suffixes) {
  char host[64], prefix[PATH_MAX];
  cn_host_tag(host, sizeof host);
  int n = snprintf(prefix, sizeof prefix, "%s.tmp.%s.", base, host);
  if (n > 0 && (size_t)n < sizeof prefix) cn_remove_stale_temporaries(dir, prefix, suffixes);
}

static cn_status cc_paths_make(cn_ctx *ctx, const char *dir, const char *name, uint64_t key,
                               cc_paths *p) {
  char *stem = format_path(ctx, "%s/%s-%016" PRIx64, dir, name, key);
  char *tmp = stem ? tmp_stem(ctx, stem) : NULL;
  if (tmp) {
    p->c_path = format_path(ctx, "%s.c", stem);
    p->so_path = format_path(ctx, "%s.so", stem);
    p->sum_path = format_path(ctx, "%s.sum", stem);
    p->tmp_c = format_path(ctx, "%s.c", tmp);
    p->tmp_so = format_path(ctx, "%s.so", tmp);
    p->tmp_sum = format_path(ctx, "%s.sum", tmp);
  }
  free(stem);
  free(tmp);
  return p->c_path && p->so_path && p->sum_path && p->tmp_c && p->tmp_so && p->tmp_sum
             ? CN_OK
             : ctx->status;
}

static void cc_paths_free(cc_paths *p) {
  free(p->c_path);
  free(p->so_path);
  free(p->sum_path);
  free(p->tmp_c);
  free(p->tmp_so);
  free(p->tmp_sum);
  *p = (cc_paths){0};
}

/* ---- The backend ---- */

void cn_cc_release(void *compiled) {
  cc_compiled *c = compiled;
  if (!c) return;
  unload(c);
  free(c->source);
  free(c);
}

/* ---- Starting and finishing a compilation (the jobs, scheduled by cc_jobs.c) ---- */

void cn_cc_job_init(cc_job *job, const char *name, cc_compiled *c) {
  *job = (cc_job){.name = name, .c = c, .pieces = 1};
}

void cn_cc_job_free(cc_job *job) {
  for (int k = 0; k < CN_CGEN_MAX_PIECES; k++) {
    if (job->object[k] && job->pieces > 1) cn_cc_discard(job->object[k]);
    free(job->object[k]);
  }
  place_release(&job->place, &job->paths);
  cn_sbuf_free(&job->head);
  cc_paths_free(&job->paths);
  cc_command_free(&job->cmd);
}

/* The job's pieces and the object each writes. */
static cn_status plan_pieces(cn_ctx *ctx, cc_job *job) {
  job->pieces = cn_cgen_pieces(job->c->source);
  for (int k = 0; k < job->pieces; k++) {
    job->object[k] = job->pieces > 1 ? format_path(ctx, "%s.p%d.o", job->paths.tmp_so, k)
                                     : format_path(ctx, "%s", job->paths.tmp_so);
    if (!job->object[k]) return ctx->status;
  }
  return CN_OK;
}

static cn_status cc_start_job(cn_ctx *ctx, const cn_ll_proc *proc, cc_compiled *c, cc_job *job,
                              bool only_cached) {
  cn_cc_job_init(job, proc->name, c);
  cn_sbuf sb = {0};
  cn_status status = cn_cgen_source(ctx, proc, &sb);
  if (status != CN_OK) {
    cn_sbuf_free(&sb);
    return status;
  }
  size_t source_len = sb.len;
  if (!(c->source = sbuf_release(ctx, &sb))) return ctx->status;
  job->cc = cn_cc_option(ctx, "cc");
  job->flags = cn_cc_option(ctx, "cflags");
  CN_ASSERT(job->cc && job->flags);
  /* A bad command is reported before any file is written. */
  uint64_t key = cache_key(c->source, source_len, job->cc, job->flags);
  status = cc_command_make(ctx, job->cc, job->flags, &job->cmd);
  if (status == CN_OK) status = resolve_place(ctx, &job->place);
  if (status == CN_OK) status = cc_paths_make(ctx, job->place.dir, proc->name, key, &job->paths);
  bool shared = !job->place.private_dir;
  if (status == CN_OK && shared) {
    cn_sbuf_printf(&job->head, "cannl cache record 1\nkey %zu\n%s\n%s\n",
                   strlen(job->cc) + strlen(job->flags) + 2 + source_len, job->cc, job->flags);
    cn_sbuf_puts(&job->head, c->source);
    if (job->head.failed) status = cn_fail(ctx, CN_ERR_NOMEM, "out of memory for a cache record");
  }
  if (status == CN_OK && shared) {
    job->hit = try_cached(ctx, &job->paths, &job->head, proc->name, c, &status);
    if (job->hit) {
      ctx->stats[CN_STAT_CACHE_HITS]++;
      cn_log(ctx, CN_LOG_DEBUG, "routine '%s': cached %s", proc->name, job->paths.so_path);
    }
  }
  if (only_cached && !job->hit) return status;
  if (status == CN_OK && shared && !job->hit && !publish_ready(ctx, &job->place, &job->paths)) {
    /* The same compilation in a private directory: no record to write. */
    place_release(&job->place, NULL);
    cc_paths_free(&job->paths);
    status = private_dir(ctx, &job->place);
    if (status == CN_OK) status = cc_paths_make(ctx, job->place.dir, proc->name, key, &job->paths);
  }
  if (status == CN_OK && !job->place.private_dir && !job->hit) {
    /* The temporaries that compilations of this entry killed midway left go now. */
    static const char *const exts[] = {".c",       ".so",      ".sum",     ".so.p0.o",
                                       ".so.p1.o", ".so.p2.o", ".so.p3.o", ".so.p4.o",
                                       ".so.p5.o", ".so.p6.o", ".so.p7.o", NULL};
    char base[PATH_MAX];
    int n = snprintf(base, sizeof base, "%s-%016" PRIx64, proc->name, key);
    if (n > 0 && (size_t)n < sizeof base) remove_stale(job->place.dir, base, exts);
  }
  if (status == CN_OK && !job->hit)
    status = write_file_atomically(ctx, job->paths.tmp_c, job->paths.c_path, c->source,
                                   strlen(c->source), "", 0);
  if (status == CN_OK && !job->hit) status = plan_pieces(ctx, job);
  return status;
}

cn_status cn_cc_start(cn_ctx *ctx, const cn_ll_proc *proc, cc_compiled *c, cc_job *job,
                      bool only_cached) {
  uint64_t start = cn_now_us();
  cn_status status = cc_start_job(ctx, proc, c, job, only_cached);
  ctx->stats[CN_STAT_US_CGEN] += cn_now_us() - start;
  return status;
}

/* Finishes a compiled job: loads the object from its temporary name and, in a shared cache,
 * publishes the object and its record (head + the object's size and checksum). */
static cn_status cc_finish_job(cn_ctx *ctx, cc_job *job) {
  if (job->hit) return CN_OK;
  const cc_paths *paths = &job->paths;
  cn_status status = CN_OK;
  cc_compiled *c = job->c;
  /* The record's checksum and the loaded object are of one file: the one opened here. */
  uint64_t size = 0, sum = 0;
  struct stat st;
  int fd = open_regular(paths->tmp_so, &st);
  int err = fd < 0 ? errno : job->place.private_dir ? 0 : fd_checksum(fd, &size, &sum);
  if (err) {
    if (fd >= 0) close(fd);
    cn_cc_discard(paths->tmp_so);
    return cn_fail(ctx, CN_ERR_IO, "cannot read compiled object '%s': %s", paths->tmp_so,
                   strerror(err == EINVAL ? ENOEXEC : err));
  }
  char why[1024];
  if (!load_object(paths->tmp_so, fd, job->name, c, why, sizeof why)) {
    cn_cc_discard(paths->tmp_so);
    return cn_fail(ctx, CN_ERR_COMPILE, "cannot load compiled routine '%s' from %s: %s", job->name,
                   paths->tmp_so, why);
  }
  if (job->place.private_dir) return CN_OK;
  if (rename(paths->tmp_so, paths->so_path) != 0) {
    status = cn_fail(ctx, CN_ERR_IO, "cannot rename '%s' to '%s': %s", paths->tmp_so,
                     paths->so_path, strerror(errno));
  } else {
    char tail[64];
    record_tail(tail, sizeof tail, size, sum);
    status = write_file_atomically(ctx, paths->tmp_sum, paths->sum_path, job->head.data,
                                   job->head.len, tail, strlen(tail));
    /* An object without its record would only be evicted by the next reader. */
    if (status != CN_OK) cn_cc_discard(paths->so_path);
  }
  if (status != CN_OK) {
    cn_cc_discard(paths->tmp_so);
    unload(c);
  }
  return status;
}

cn_status cn_cc_finish(cn_ctx *ctx, cc_job *job) {
  uint64_t start = cn_now_us();
  cn_status status = cc_finish_job(ctx, job);
  ctx->stats[CN_STAT_US_COMPILE] += cn_now_us() - start;
  return status;
}

/* ---- Records ----
 * Small files kept beside the compiled objects, each in the slot <kind>-<hash>.<ext> of the cache
 * directory, the hash (FNV-1a) of the key text naming the slot, holding
 *   "cannl <kind> record 1\nkey <n>\n" <the n bytes of key text> "\n" <body> "sum <hex>\n"
 * where <hex> is the FNV-1a checksum of every byte before the "sum" line. A record whose key
 * text differs (another key in the slot) is not ours; one that is malformed or fails its
 * checksum is deleted with a warning. Written like the objects: a temporary file, then rename().
 * Without a shared cache directory (cache_dir "off", or none usable) there are no records.
 * The GEMM autotuner's winners (src/runtime/tune.c) are records of kind "tune" (tune-<hash>.txt),
 * their body "value <value>\n"; the OpenCL backend's program binaries are records too
 * (backend.h cn_cc_record_load). */

#define RECORD_MAX     ((uint64_t)1 << 30)
#define RECORD_SUM_LEN 21 /* "sum " 16 digits "\n" */

/* The record's path for key in the shared cache directory; NULL (no records) without one. */
static char *record_path(cn_ctx *ctx, const char *kind, const char *ext, const char *key,
                         cn_status *status) {
  cc_place place = {0};
  *status = resolve_place(ctx, &place);
  if (*status != CN_OK) return NULL;
  char *path = NULL;
  if (!place.private_dir) {
    uint64_t h = fnv1a(FNV_OFFSET, key, strlen(key));
    path = format_path(ctx, "%s/%s-%016" PRIx64 ".%s", place.dir, kind, h, ext);
    if (!path) *status = ctx->status;
  } else {
    rmdir(place.dir);
  }
  free(place.dir);
  return path;
}

/* The record's last line for its text before it (len bytes): "sum <16 hex digits>\n". */
static void record_sum_line(char *out, size_t size, const char *text, size_t len) {
  snprintf(out, size, "sum %016" PRIx64 "\n", fnv1a(FNV_OFFSET, text, len));
}

/* Why the record text (len bytes) is not a valid record of kind for key (NULL: valid, *body and
 * *body_len its body, inside text; "" for a record of another key). The key length goes through
 * cn_parse_natural and the sum line is compared with the one our checksum gives, so no number of
 * the file is parsed by sscanf (whose %zu and %x are undefined on out-of-range input: the
 * checksum does not stop a crafted record). */
static const char *record_parse(const char *text, size_t len, const char *kind, const char *key,
                                const char **body, size_t *body_len) {
  char header[64];
  snprintf(header, sizeof header, "cannl %s record 1\nkey ", kind);
  size_t header_len = strlen(header);
  if (len < header_len + RECORD_SUM_LEN || memcmp(text, header, header_len) != 0)
    return "bad header";
  const char *sum_line = text + len - RECORD_SUM_LEN;
  char want[40];
  record_sum_line(want, sizeof want, text, (size_t)(sum_line - text));
  if (memcmp(sum_line, want, RECORD_SUM_LEN) != 0) return "checksum mismatch";
  const char *digits = text + header_len;
  const char *eol = memchr(digits, '\n', (size_t)(sum_line - digits));
  uint64_t n;
  if (!eol || !cn_parse_natural(digits, (size_t)(eol - digits), len, &n)) return "bad key line";
  const char *at = eol + 1;
  if (n >= (size_t)(sum_line - at) || at[n] != '\n') return "truncated key"; /* key and '\n' */
  if (strlen(key) != n || memcmp(at, key, n) != 0) return ""; /* another key's slot */
  *body = at + n + 1;
  *body_len = (size_t)(sum_line - *body);
  return NULL;
}

cn_status cn_cc_record_load(cn_ctx *ctx, const char *kind, const char *ext, const char *key,
                            char **body, size_t *len, bool *found) {
  *found = false;
  *body = NULL;
  *len = 0;
  cn_status status;
  char *path = record_path(ctx, kind, ext, key, &status);
  if (!path) return status;
  struct stat st;
  int fd = open_regular(path, &st);
  int err = fd < 0 ? errno : 0;
  if (fd < 0) {
    char reason[256];
    if (err != ENOENT) { /* no record yet; otherwise one we cannot use (a planted FIFO...) */
      cn_cc_warn(ctx, NULL, "ignoring %s record %s (%s)", kind, path,
                 read_failure(reason, sizeof reason, "it", err, &st));
      if (err == EINVAL) cn_cc_discard(path);
    }
    free(path);
    return CN_OK;
  }
  /* one byte more than the file's size tells a file that grew since */
  size_t cap = st.st_size >= 0 && (uint64_t)st.st_size < RECORD_MAX ? (size_t)st.st_size + 1 : 0;
  char *text = cap ? malloc(cap) : NULL;
  ssize_t got = text ? read_up_to(fd, text, cap) : -1;
  close(fd);
  if (cap && !text) {
    free(path);
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory reading %s record", kind);
  }
  const char *at = NULL;
  size_t at_len = 0;
  const char *problem = !cap      ? "too large"
                        : got < 0 ? "cannot read it"
                        : (size_t)got == cap
                            ? "changed while read"
                            : record_parse(text, (size_t)got, kind, key, &at, &at_len);
  if (problem && *problem) {
    cn_cc_warn(ctx, NULL, "ignoring corrupted %s record %s (%s)", kind, path, problem);
    cn_cc_discard(path);
  }
  if (!problem) {
    memmove(text, at, at_len);
    text[at_len] = '\0';
    *body = text;
    *len = at_len;
    *found = true;
  } else {
    free(text);
  }
  free(path);
  return CN_OK;
}

cn_status cn_cc_record_store(cn_ctx *ctx, const char *kind, const char *ext, const char *key,
                             const char *body, size_t len) {
  cn_status status;
  char *path = record_path(ctx, kind, ext, key, &status);
  if (!path) return status;
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "cannl %s record 1\nkey %zu\n%s\n", kind, strlen(key), key);
  for (size_t i = 0; i < len && !sb.failed; i++) cn_sbuf_putc(&sb, body[i]);
  char *tmp = tmp_stem(ctx, path);
  const char *slash = strrchr(path, '/');
  if (tmp && slash) { /* the killed stores' temporaries of this record go now */
    static const char *const no_ext[] = {"", NULL};
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    remove_stale(dir, slash + 1, no_ext);
  }
  char tail[40];
  if (!sb.failed) record_sum_line(tail, sizeof tail, sb.data, sb.len);
  status = sb.failed ? cn_fail(ctx, CN_ERR_NOMEM, "out of memory writing %s record", kind)
           : !tmp    ? ctx->status
                     : write_file_atomically(ctx, tmp, path, sb.data, sb.len, tail, strlen(tail));
  cn_sbuf_free(&sb);
  free(tmp);
  free(path);
  return status;
}

cn_status cn_cc_source_store(cn_ctx *ctx, const char *name, const char *ext, const char *text,
                             char **path) {
  *path = NULL;
  cc_place place = {0};
  cn_status status = resolve_place(ctx, &place);
  char why[PATH_MAX + 256];
  if (status == CN_OK && !place.private_dir && !writable_dir(place.dir, why, sizeof why)) {
    free(place.dir); /* a read-only cache: the file goes to a directory of its own */
    place = (cc_place){0};
    status = private_dir(ctx, &place);
  }
  if (status != CN_OK) return status;
  size_t len = strlen(text);
  char *stem = format_path(ctx, "%s/%s-%016" PRIx64, place.dir, name, fnv1a(FNV_OFFSET, text, len));
  char *tmp = stem ? tmp_stem(ctx, stem) : NULL;
  char *file = tmp ? format_path(ctx, "%s.%s", stem, ext) : NULL;
  char *tmp_file = file ? format_path(ctx, "%s.%s", tmp, ext) : NULL;
  status = tmp_file ? write_file_atomically(ctx, tmp_file, file, text, len, "", 0) : ctx->status;
  if (status == CN_OK) {
    *path = file;
    file = NULL;
  }
  free(stem);
  free(tmp);
  free(file);
  free(tmp_file);
  free(place.dir); /* a private directory stays: it holds the file the message names */
  return status;
}

cn_status cn_cc_tune_load(cn_ctx *ctx, const char *key, char *value, size_t size, bool *found) {
  char *body;
  size_t len;
  cn_status status = cn_cc_record_load(ctx, "tune", "txt", key, &body, &len, found);
  if (status != CN_OK || !*found) return status;
  /* the body is one line, "value <value>\n" */
  const char *eol = memchr(body, '\n', len);
  *found = len > 6 && memcmp(body, "value ", 6) == 0 && eol == body + len - 1 && len - 6 <= size;
  if (*found) {
    memcpy(value, body + 6, len - 7);
    value[len - 7] = '\0';
  } else {
    cn_cc_warn(ctx, NULL, "ignoring the tune record of key '%s' (bad value line)", key);
  }
  free(body);
  return CN_OK;
}

cn_status cn_cc_tune_store(cn_ctx *ctx, const char *key, const char *value) {
  cn_sbuf body = {0};
  cn_sbuf_printf(&body, "value %s\n", value);
  cn_status status = body.failed ? cn_fail(ctx, CN_ERR_NOMEM, "out of memory writing tune record")
                                 : cn_cc_record_store(ctx, "tune", "txt", key, body.data, body.len);
  cn_sbuf_free(&body);
  return status;
}

static cn_status cc_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  (void)ctx; /* generated code has no failure path: its accesses were validated upstream */
  cc_compiled *c = compiled;
  c->entry(buffers, syms);
  return CN_OK;
}

static cn_status cc_run_parallel(cn_ctx *ctx, void *compiled, void *const *buffers,
                                 const int64_t *syms, const cn_parallel *par) {
  (void)ctx;
  cc_compiled *c = compiled;
  if (c->entry_par)
    c->entry_par(buffers, syms, par);
  else
    c->entry(buffers, syms);
  return CN_OK;
}

const cn_backend cn_backend_c = {
    .name = "c",
    .caps = CN_BACKEND_TUNABLE | CN_BACKEND_PARALLEL | CN_BACKEND_COMPILED,
    .compile = cn_cc_compile,
    .compile_many = cn_cc_compile_many,
    .start_many = cn_cc_start_many,
    .take = cn_cc_take,
    .drop = cn_cc_drop,
    .compile_cached = cn_cc_compile_cached,
    .run = cc_run,
    .release = cn_cc_release,
    .run_parallel = cc_run_parallel,
};
