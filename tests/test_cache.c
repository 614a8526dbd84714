/* The compile cache of the generated-C backend through the public API (cannl.h): a routine "fill"
 * writing three constants, compiled with CN_BACKEND_C into a fresh directory under the working
 * (build) directory. Damaged entries -- the object truncated to 0, 1000, 4096 and 12288 bytes or
 * altered in place, its record missing, another routine's object and record (same name, other
 * constants) copied into its slot, a record made to match an object that cannot be loaded --
 * are each discarded with one warning and recompiled, and the routine computes its own values;
 * FIFOs, links and directories planted at the slots of an entry or of a tune record (never
 * waited on: an alarm guards; removed, or the routine compiled privately with a warning); the
 * cache location order ($CANNL_CACHE_DIR, $XDG_CACHE_HOME, $HOME -- never created when missing --,
 * the per-user directory under $TMPDIR and its refusal), a missing TMPDIR falling back to /tmp,
 * directories this user cannot write (root drops to uid 65534 in a child for it),
 * CANNL_CACHE_DIR=off leaving no file, and the word grammar of
 * CANNL_CFLAGS and CC (quotes, escapes, no shell) with its exact error messages; several routines
 * compiled at once (cn_routine_compile_many: compilers side by side on a cold cache, all hits on a
 * warm one, nothing kept when one fails).
 *
 * Generated C is compiled with -O1 and without -march=native: fast, and valgrind-friendly. */
#include "backend/backend.h"
#include "cannl.h"
#include "runtime/routine.h"

#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CFLAGS "-O1 -shared -fPIC -std=c11"

static const double values_a[3] = {1.5, -2, 3.25};
static const double values_b[3] = {7, 8.5, -0.125};
static const double values_other[3] = {0.5, 0.25, 0.125};

static char root[PATH_MAX]; /* absolute; removed at the end */
static char warnings[16384];

/* ---- Helpers ---- */

static void collect_warnings(void *user, cn_log_level level, const char *message) {
  (void)user;
  if (level < CN_LOG_WARN) return;
  size_t n = strlen(warnings);
  snprintf(warnings + n, sizeof warnings - n, "%s\n", message);
}

static void path_in(char *out, size_t size, const char *dir, const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  CHECK(n > 0 && (size_t)n < size);
}

/* Compiles `name` writing values into a 3-vector, runs it and checks the values exactly, and the
 * compiler runs and cache hits it took (-1: any). The warnings of the compilation are left in
 * `warnings`. */
static void run_routine(const char *name, const double *values, int runs, int hits) {
  warnings[0] = '\0';
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return;
  cn_ctx_set_log(ctx, collect_warnings, NULL, CN_LOG_WARN);
  int64_t n = 3;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &n);
  cn_asgn *asgn = x ? cn_asgn_fetch_constant_fill(ctx, x, values, 3) : NULL;
  cn_routine *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, name) : NULL;
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (r) {
    CHECK_INT(cn_routine_run(r), CN_OK);
    double got[3] = {0, 0, 0};
    CHECK_INT(cn_node_get_values(x, false, got, 3), CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], values[i], 0);
  }
  if (runs >= 0) CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), runs);
  if (hits >= 0) CHECK_INT(cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), hits);
  cn_ctx_destroy(ctx);
}

/* Compiles "fill" with the given cc (NULL: the default) and flags options and expects status. */
static const char *compile_error(const char *cc, const char *flags, cn_status expected) {
  static char message[4096];
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return "";
  if (cc) CHECK_INT(cn_ctx_set_option(ctx, "cc", cc), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", flags), CN_OK);
  int64_t n = 3;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &n);
  cn_asgn *asgn = x ? cn_asgn_fetch_constant_fill(ctx, x, values_a, 3) : NULL;
  CHECK(cn_routine_compile(ctx, asgn, CN_BACKEND_C, "fill") == NULL);
  CHECK_INT(cn_ctx_status(ctx), expected);
  snprintf(message, sizeof message, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return message;
}

/* The number of entries of dir (without "." and "..") whose name ends with suffix. */
static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name), k = strlen(suffix);
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    n += len >= k && strcmp(e->d_name + len - k, suffix) == 0;
  }
  closedir(d);
  return n;
}

/* The path of the one "<prefix>-*.so" in dir other than `except` (may be ""): its stem, without
 * ".so", in out. */
static bool find_object(const char *dir, const char *prefix, const char *except, char *out,
                        size_t size) {
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (!d) return false;
  int found = 0;
  size_t plen = strlen(prefix);
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] != '-' || len < 3 ||
        strcmp(e->d_name + len - 3, ".so") != 0)
      continue;
    char stem[PATH_MAX];
    snprintf(stem, sizeof stem, "%s/%.*s", dir, (int)(len - 3), e->d_name);
    if (strcmp(stem, except) == 0) continue;
    snprintf(out, size, "%s", stem);
    found++;
  }
  closedir(d);
  CHECK_INT(found, 1);
  return found == 1;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static bool read_file(const char *path, char *buf, size_t size, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return false;
  *len = fread(buf, 1, size, f);
  fclose(f);
  CHECK(*len < size);
  return *len < size;
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, len, f) == len);
  CHECK(fclose(f) == 0);
}

static char file_buf[1 << 20];

static void copy_file(const char *from, const char *to) {
  size_t len;
  if (read_file(from, file_buf, sizeof file_buf, &len)) write_file(to, file_buf, len);
}

static void with_suffix(char *out, size_t size, const char *stem, const char *suffix) {
  int n = snprintf(out, size, "%s%s", stem, suffix);
  CHECK(n > 0 && (size_t)n < size);
}

static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    chmod(path, 0700);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    if (d) {
      for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[PATH_MAX];
        path_in(child, sizeof child, path, e->d_name);
        remove_tree(child);
      }
      closedir(d);
    }
    CHECK(rmdir(path) == 0);
  } else {
    CHECK(unlink(path) == 0);
  }
}

/* ---- Integrity ---- */

static void check_discarded(const char *so, const char *why) {
  char expected[PATH_MAX + 256];
  snprintf(expected, sizeof expected, "discarding cached object %s.so (%s", so, why);
  CHECK_HAS(warnings, expected);
  CHECK_HAS(warnings, "); recompiling\n");
  /* One warning, one line. */
  CHECK(strchr(warnings, '\n') == warnings + strlen(warnings) - 1);
}

static void test_integrity(void) {
  char dir[PATH_MAX];
  path_in(dir, sizeof dir, root, "cache");
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);

  run_routine("fill", values_a, 1, 0);
  CHECK_STR(warnings, "");
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");
  CHECK_INT(count_files(dir, ".c"), 1);
  CHECK_INT(count_files(dir, ".so"), 1);
  CHECK_INT(count_files(dir, ".sum"), 1);
  CHECK_INT(count_files(dir, ""), 3); /* no temporaries */
  char a[PATH_MAX], a_so[PATH_MAX], a_sum[PATH_MAX];
  if (!find_object(dir, "fill", "", a, sizeof a)) return;
  with_suffix(a_so, sizeof a_so, a, ".so");
  with_suffix(a_sum, sizeof a_sum, a, ".sum");
  long full = file_size(a_so);
  CHECK_MSG(full > 12288, "object of %ld bytes", full);

  /* Truncated objects: the checksum is verified on bytes read, before dlopen maps anything. */
  const long sizes[4] = {0, 1000, 4096, 12288};
  for (int k = 0; k < 4; k++) {
    CHECK(truncate(a_so, sizes[k]) == 0);
    run_routine("fill", values_a, 1, 0);
    check_discarded(a, "its size or checksum differs from its record (truncated or modified)");
    CHECK_INT(file_size(a_so), full);
    run_routine("fill", values_a, 0, 1);
    CHECK_STR(warnings, "");
  }

  /* One byte altered, same size. */
  size_t len;
  if (read_file(a_so, file_buf, sizeof file_buf, &len)) {
    file_buf[len / 2] ^= 0x40;
    write_file(a_so, file_buf, len);
  }
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "its size or checksum differs");

  /* No record. */
  CHECK(unlink(a_sum) == 0);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "it has no record");
  CHECK_INT(file_size(a_sum) > 0, 1);
  run_routine("fill", values_a, 0, 1);

  /* Another routine of the same name (other constants, so another key and slot). Its object
   * and record copied into A's slot, or its object alone, must not run as A. */
  run_routine("fill", values_b, 1, 0);
  char b[PATH_MAX], b_so[PATH_MAX], b_sum[PATH_MAX];
  if (!find_object(dir, "fill", a, b, sizeof b)) return;
  with_suffix(b_so, sizeof b_so, b, ".so");
  with_suffix(b_sum, sizeof b_sum, b, ".sum");
  copy_file(b_so, a_so);
  copy_file(b_sum, a_sum);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "its record is for another key (routine source, compiler or flags)");
  run_routine("fill", values_a, 0, 1);
  run_routine("fill", values_b, 0, 1);
  copy_file(b_so, a_so);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "its size or checksum differs");
  copy_file(a_sum, b_sum);
  run_routine("fill", values_b, 1, 0);
  check_discarded(b, "its record is for another key");

  /* A record made to match an object dlopen rejects, then one of another routine name (loads,
   * but has no fill_entry): a failed load discards the entry too. The record's last line is
   * "so <size> <fnv1a64>". */
  static char record[1 << 20];
  size_t record_len;
  if (!read_file(a_sum, record, sizeof record, &record_len)) return;
  record[record_len] = '\0';
  char *last = record + record_len - 1;
  while (last > record && last[-1] != '\n') last--;
  CHECK(strncmp(last, "so ", 3) == 0);
  run_routine("other", values_other, 1, 0);
  char other[PATH_MAX], other_so[PATH_MAX];
  if (!find_object(dir, "other", "", other, sizeof other)) return;
  with_suffix(other_so, sizeof other_so, other, ".so");
  for (int k = 0; k < 2; k++) {
    if (k == 0)
      write_file(a_so, "not an object\n", 14);
    else
      copy_file(other_so, a_so);
    if (!read_file(a_so, file_buf, sizeof file_buf, &len)) return;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)file_buf[i]) * 1099511628211ull;
    snprintf(last, sizeof record - (size_t)(last - record), "so %zu %016" PRIx64 "\n", len, h);
    write_file(a_sum, record, strlen(record));
    run_routine("fill", values_a, 1, 0);
    check_discarded(a, k == 0 ? "cannot load it: " : "cannot load it: no symbol 'fill_entry'");
    run_routine("fill", values_a, 0, 1);
  }
  CHECK_INT(count_files(dir, ""), 9); /* fill twice, other: .c, .so, .sum each */
}

/* ---- Other kinds of files in the cache ---- */

/* A FIFO, a directory or a link where the cache expects a regular file: read without blocking
 * (an alarm ends the test rather than letting a blocking open hang it), removed when it can be,
 * and the run succeeds either way -- compiling privately, with a warning, when a full directory
 * holds a slot. */
static void test_planted(void) {
  char dir[PATH_MAX], tmp[PATH_MAX];
  path_in(dir, sizeof dir, root, "planted");
  path_in(tmp, sizeof tmp, root, "planted-tmp");
  CHECK(mkdir(tmp, 0700) == 0);
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);
  CHECK(setenv("TMPDIR", tmp, 1) == 0);
  alarm(120);
  run_routine("fill", values_a, 1, 0);
  char a[PATH_MAX], a_so[PATH_MAX], a_sum[PATH_MAX], a_c[PATH_MAX], inside[PATH_MAX];
  if (!find_object(dir, "fill", "", a, sizeof a)) return;
  with_suffix(a_so, sizeof a_so, a, ".so");
  with_suffix(a_sum, sizeof a_sum, a, ".sum");
  with_suffix(a_c, sizeof a_c, a, ".c");
  struct stat st;

  /* A FIFO for the record: refused unopened, the entry discarded and rebuilt. */
  CHECK(unlink(a_sum) == 0 && mkfifo(a_sum, 0600) == 0);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "cannot read its record: a FIFO, not a regular file");
  CHECK(lstat(a_sum, &st) == 0 && S_ISREG(st.st_mode));
  run_routine("fill", values_a, 0, 1);
  /* A symbolic link for the object, even to the right bytes, is not followed. */
  char moved[PATH_MAX];
  path_in(moved, sizeof moved, root, "moved.so");
  CHECK(rename(a_so, moved) == 0 && symlink(moved, a_so) == 0);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "cannot read it: a symbolic link, not a regular file");
  CHECK(lstat(a_so, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(unlink(moved) == 0);

  /* An empty directory for the object: removed, and the object published again (the rename
   * over it once failed with "Is a directory" on every run). */
  CHECK(unlink(a_so) == 0 && mkdir(a_so, 0700) == 0);
  run_routine("fill", values_a, 1, 0);
  check_discarded(a, "cannot read it: a directory, not a regular file");
  CHECK(lstat(a_so, &st) == 0 && S_ISREG(st.st_mode));
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");

  /* A directory with a file in it is left alone: each run compiles privately, with a warning,
   * and leaves nothing in the cache or in TMPDIR. */
  CHECK(unlink(a_so) == 0 && mkdir(a_so, 0700) == 0);
  path_in(inside, sizeof inside, a_so, "keep");
  write_file(inside, "x", 1);
  char expected[3 * PATH_MAX];
  snprintf(expected, sizeof expected,
           "cache slot '%s' holds a directory that cannot be removed (Directory not empty): "
           "compiling without a disk cache\n",
           a_so);
  for (int k = 0; k < 2; k++) {
    run_routine("fill", values_a, 1, 0);
    CHECK_HAS(warnings, "cannot read it: a directory, not a regular file");
    CHECK_HAS(warnings, expected);
    CHECK_INT(count_files(dir, ""), 2); /* the source and the planted directory */
    CHECK_INT(count_files(tmp, ""), 0);
  }
  CHECK(file_size(inside) == 1);
  CHECK(unlink(inside) == 0 && rmdir(a_so) == 0);

  /* Empty directories for the record (no object: a miss) and for the source are removed with a
   * warning each. */
  CHECK(unlink(a_c) == 0 && mkdir(a_c, 0700) == 0 && mkdir(a_sum, 0700) == 0);
  run_routine("fill", values_a, 1, 0);
  snprintf(expected, sizeof expected,
           "removed a directory from cache slot '%s'\nremoved a directory from cache slot '%s'\n",
           a_c, a_sum);
  CHECK_STR(warnings, expected);
  CHECK(lstat(a_sum, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(lstat(a_c, &st) == 0 && S_ISREG(st.st_mode));
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");
  alarm(0);
  CHECK(setenv("TMPDIR", "/tmp", 1) == 0);
}

/* A FIFO in a tune record's slot (tune-<FNV-1a of the key>.txt): ignored without blocking and
 * removed with a warning; a record stored afterwards is found. */
static void test_tune_fifo(void) {
  char dir[PATH_MAX], name[64], path[PATH_MAX];
  path_in(dir, sizeof dir, root, "tune");
  CHECK(mkdir(dir, 0700) == 0);
  const char *key = "cannl test key";
  uint64_t h = 14695981039346656037ull;
  for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  snprintf(name, sizeof name, "tune-%016" PRIx64 ".txt", h);
  path_in(path, sizeof path, dir, name);
  CHECK(mkfifo(path, 0600) == 0);
  warnings[0] = '\0';
  cn_ctx *ctx = cn_ctx_create();
  cn_ctx_set_log(ctx, collect_warnings, NULL, CN_LOG_WARN);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  char value[64] = "";
  bool found = true;
  alarm(60);
  CHECK_INT(cn_cc_tune_load(ctx, key, value, sizeof value, &found), CN_OK);
  alarm(0);
  CHECK(!found);
  char expected[PATH_MAX + 128];
  snprintf(expected, sizeof expected,
           "ignoring tune record %s (cannot read it: a FIFO, not a regular file)\n", path);
  CHECK_STR(warnings, expected);
  CHECK(access(path, F_OK) != 0);
  CHECK_INT(cn_cc_tune_store(ctx, key, "mr=6 nv=4"), CN_OK);
  CHECK_INT(cn_cc_tune_load(ctx, key, value, sizeof value, &found), CN_OK);
  CHECK(found);
  CHECK_STR(value, "mr=6 nv=4");
  cn_ctx_destroy(ctx);
}

/* ---- Temporaries of killed compilations ---- */

/* The pid of a process that no longer exists: a child that exited and was reaped. */
static pid_t dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  return pid;
}

static void plant(const char *path) {
  FILE *f = fopen(path, "wb");
  CHECK_MSG(f != NULL, "%s", path);
  if (f) fclose(f);
}

/* A compilation killed midway leaves <name>-<key>.tmp.<host>.<pid>.<serial>.{c,so,sum}: the next
 * compilation of that entry (a miss) removes those of this host whose process is gone, and
 * leaves a live process's (this one's), another host's and names of any other form. The same
 * for a tune record's tune-<hash>.txt.tmp.<host>.<pid>.<serial> on the next store. */
static void test_stale_temporaries(void) {
  char dir[PATH_MAX], stem[PATH_MAX], host[64];
  path_in(dir, sizeof dir, root, "stale");
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  if (!find_object(dir, "fill", "", stem, sizeof stem)) return;
  cn_host_tag(host, sizeof host);
  long dead = (long)dead_pid(), live = (long)getpid();
  enum { STALE = 4, KEPT = 7 };
  char stale[STALE][PATH_MAX + 128], kept[KEPT][PATH_MAX + 128];
  snprintf(stale[0], sizeof stale[0], "%s.tmp.%s.%ld.3.c", stem, host, dead);
  snprintf(stale[1], sizeof stale[1], "%s.tmp.%s.%ld.3.so", stem, host, dead);
  snprintf(stale[2], sizeof stale[2], "%s.tmp.%s.%ld.4.sum", stem, host, dead);
  snprintf(stale[3], sizeof stale[3], "%s.tmp.%s.%ld.18446744073709551615.so", stem, host, dead);
  snprintf(kept[0], sizeof kept[0], "%s.tmp.%s.%ld.5.so", stem, host, live);
  snprintf(kept[1], sizeof kept[1], "%s.tmp.%s-other.%ld.6.so", stem, host, dead);
  snprintf(kept[2], sizeof kept[2], "%s.tmp.%s.%ld.7.so.bak", stem, host, dead);
  snprintf(kept[3], sizeof kept[3], "%s.tmp.%s.%ld.so", stem, host, dead);
  snprintf(kept[4], sizeof kept[4], "%s.tmp.%s.99999999999999999999.8.so", stem, host);
  snprintf(kept[5], sizeof kept[5], "%s.tmp.%s.%ld.9", stem, host, dead); /* no extension */
  snprintf(kept[6], sizeof kept[6], "%s.tmp.%s.+%ld.9.so", stem, host, dead);
  for (int k = 0; k < STALE; k++) plant(stale[k]);
  for (int k = 0; k < KEPT; k++) plant(kept[k]);
  /* A hit compiles nothing and leaves the directory as it is. */
  run_routine("fill", values_a, 0, 1);
  for (int k = 0; k < STALE; k++) CHECK_MSG(access(stale[k], F_OK) == 0, "%s", stale[k]);
  /* A miss of the entry (its object gone) cleans up. */
  char so[PATH_MAX + 8];
  snprintf(so, sizeof so, "%s.so", stem);
  CHECK(unlink(so) == 0);
  run_routine("fill", values_a, 1, 0);
  for (int k = 0; k < STALE; k++) CHECK_MSG(access(stale[k], F_OK) != 0, "%s", stale[k]);
  for (int k = 0; k < KEPT; k++) CHECK_MSG(access(kept[k], F_OK) == 0, "%s", kept[k]);
  for (int k = 0; k < KEPT; k++) CHECK(unlink(kept[k]) == 0);

  /* A tune record's */
  const char *key = "cannl stale test key";
  uint64_t h = 14695981039346656037ull;
  for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  char record[PATH_MAX + 64], stale_tune[PATH_MAX + 192], live_tune[PATH_MAX + 192];
  snprintf(record, sizeof record, "%s/tune-%016" PRIx64 ".txt", dir, h);
  snprintf(stale_tune, sizeof stale_tune, "%s.tmp.%s.%ld.1", record, host, dead);
  snprintf(live_tune, sizeof live_tune, "%s.tmp.%s.%ld.2", record, host, live);
  plant(stale_tune);
  plant(live_tune);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_cc_tune_store(ctx, key, "8 3 256"), CN_OK);
  cn_ctx_destroy(ctx);
  CHECK(access(record, F_OK) == 0);
  CHECK(access(stale_tune, F_OK) != 0);
  CHECK(access(live_tune, F_OK) == 0);
  CHECK(unlink(live_tune) == 0);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
}

/* ---- The loaded object is the verified one ---- */

static char swap_from[PATH_MAX + 8], swap_to[PATH_MAX + 8];
static int swaps;

/* The load hook: replaces the object about to be loaded (swap_to) by another (swap_from), by
 * rename, as a writer of the cache directory could between the check and the load. */
static void swap_object(const char *so_path) {
  if (strcmp(so_path, swap_to) != 0) return;
  char tmp[PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.swap", swap_to);
  copy_file(swap_from, tmp);
  CHECK(rename(tmp, swap_to) == 0);
  swaps++;
}

/* A cached object is loaded from the file whose bytes were checked (/proc/self/fd/N of the open,
 * verified file), so an object renamed into its slot after the check is not the one that runs:
 * the routine computes its own values; the swapped file fails the next check. Without /proc the
 * object is loaded by path, which this cannot protect. */
static void test_swapped_object(void) {
  if (access("/proc/self/fd", F_OK) != 0) {
    printf("test_swapped_object: skipped, /proc is not mounted\n");
    return;
  }
  char dir[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
  path_in(dir, sizeof dir, root, "swap");
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  if (!find_object(dir, "fill", "", a, sizeof a)) return;
  run_routine("fill", values_b, 1, 0);
  if (!find_object(dir, "fill", a, b, sizeof b)) return;
  snprintf(swap_to, sizeof swap_to, "%s.so", a);
  snprintf(swap_from, sizeof swap_from, "%s.so", b);
  swaps = 0;
  cn_cc_set_load_hook(swap_object);
  run_routine("fill", values_a, 0, 1); /* a hit: a's checked bytes run, not b's */
  cn_cc_set_load_hook(NULL);
  CHECK_INT(swaps, 1);
  CHECK_STR(warnings, "");
  /* The slot now holds b's object under a's record: discarded, recompiled. */
  run_routine("fill", values_a, 1, 0);
  CHECK_HAS(warnings, "its size or checksum differs from its record");
  run_routine("fill", values_b, 0, 1);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
}

/* A context with "fill" writing values compiled (in the cache of $CANNL_CACHE_DIR). */
static cn_ctx *fill_context(const double *values, cn_routine **r, cn_node **x) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t n = 3;
  *x = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &n);
  cn_asgn *asgn = *x ? cn_asgn_fetch_constant_fill(ctx, *x, values, 3) : NULL;
  *r = asgn ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, "fill") : NULL;
  CHECK_MSG(*r != NULL, "%s", cn_ctx_error(ctx));
  return ctx;
}

static void check_fill(cn_routine *r, cn_node *x, const double *values) {
  if (!r) return;
  CHECK_INT(cn_routine_run(r), CN_OK);
  double got[3] = {0, 0, 0};
  CHECK_INT(cn_node_get_values(x, false, got, 3), CN_OK);
  for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], values[i], 0);
}

/* The loader knows an object by the name it was loaded under, /proc/self/fd/N, and keeps it while
 * another handle holds it (a second load of the same file shares it) even after N was closed: a
 * different object opened later as N must not be taken for it (it is loaded by path instead). */
static void test_fd_names(void) {
  char dir[PATH_MAX];
  path_in(dir, sizeof dir, root, "fd-names");
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  run_routine("fill", values_b, 1, 0);
  cn_routine *r1, *r2, *r3;
  cn_node *x1, *x2, *x3;
  cn_ctx *c1 = fill_context(values_a, &r1, &x1);
  cn_ctx *c2 = fill_context(values_a, &r2, &x2); /* the same file: the same loaded object */
  cn_ctx_destroy(c1);                            /* its fd closed, the object still loaded */
  cn_ctx *c3 = fill_context(values_b, &r3, &x3); /* opened as the lowest free fd: c1's */
  check_fill(r2, x2, values_a);
  check_fill(r3, x3, values_b);
  CHECK_INT(cn_ctx_stat(c3, CN_STAT_CACHE_HITS), 1);
  cn_ctx_destroy(c2);
  cn_ctx_destroy(c3);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
}

/* ---- Unusable directories ---- */

/* As a user without write access to the cache directory (root drops to nobody in a child: root
 * would write anyway): an explicit directory still serves its hits, a miss compiles privately
 * with one warning and adds nothing to it; a default directory that is not writable gives way to
 * the per-user one. */
static void unwritable_as_user(const char *cache, const char *home, const char *tmp) {
  CHECK(setenv("CANNL_CACHE_DIR", cache, 1) == 0);
  CHECK(setenv("TMPDIR", tmp, 1) == 0);
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");
  run_routine("fill", values_b, 1, 0);
  char expected[2 * PATH_MAX];
  snprintf(expected, sizeof expected,
           "cache directory '%s' is not writable (Permission denied): compiling without a disk "
           "cache\n",
           cache);
  CHECK_STR(warnings, expected);
  CHECK_INT(count_files(cache, ""), 3);
  CHECK_INT(count_files(tmp, ""), 0);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
  CHECK(setenv("HOME", home, 1) == 0);
  run_routine("fill", values_b, 1, 0);
  char per_user[PATH_MAX];
  snprintf(per_user, sizeof per_user, "%s/cannl-cache-%ld", tmp, (long)geteuid());
  snprintf(expected, sizeof expected,
           "cache directory '%s/.cache/cannl' is not writable (Permission denied); using %s\n",
           home, per_user);
  CHECK_STR(warnings, expected);
  CHECK_INT(count_files(per_user, ".so"), 1);
}

static void test_unwritable(void) {
  char cache[PATH_MAX], home[PATH_MAX], home_cache[PATH_MAX], tmp[PATH_MAX];
  path_in(cache, sizeof cache, root, "read-only");
  path_in(home, sizeof home, root, "read-only-home");
  path_in(home_cache, sizeof home_cache, home, ".cache/cannl");
  path_in(tmp, sizeof tmp, root, "user-tmp");
  CHECK(setenv("CANNL_CACHE_DIR", cache, 1) == 0);
  run_routine("fill", values_a, 1, 0); /* the entry the user's hit reads */
  CHECK(setenv("CANNL_CACHE_DIR", home_cache, 1) == 0);
  run_routine("fill", values_a, 1, 0); /* creates the home's cache directory */
  CHECK(mkdir(tmp, 0777) == 0 && chmod(tmp, 0777) == 0);
  CHECK(unsetenv("XDG_CACHE_HOME") == 0);
  if (geteuid() != 0) {
    CHECK(chmod(cache, 0555) == 0 && chmod(home_cache, 0555) == 0);
    unwritable_as_user(cache, home, tmp);
    CHECK(chmod(cache, 0755) == 0 && chmod(home_cache, 0755) == 0);
    return;
  }
  CHECK(chmod(root, 0755) == 0); /* the user's way to the directories */
  fflush(NULL);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      fprintf(stderr, "test_cache: cannot become uid 65534 (%s): no unwritable-directory check\n",
              strerror(errno));
      _exit(0);
    }
    check_failed_ = 0;
    unwritable_as_user(cache, home, tmp);
    fflush(NULL);
    _exit(check_failed_ != 0);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the user's checks failed (%d)", status);
  CHECK(chmod(root, 0700) == 0);
}

/* Without a usable TMPDIR (missing) per-user and private directories go to /tmp, and the compiler
 * gets TMPDIR=/tmp: a run without a home, and one with the cache off, succeed. The per-user
 * run's files are removed. */
static void test_missing_tmpdir(void) {
  char missing[PATH_MAX], per_user[PATH_MAX], stem[PATH_MAX], file[PATH_MAX];
  path_in(missing, sizeof missing, root, "no-such-tmp");
  snprintf(per_user, sizeof per_user, "/tmp/cannl-cache-%ld", (long)geteuid());
  CHECK(setenv("TMPDIR", missing, 1) == 0);
  CHECK(unsetenv("HOME") == 0 && unsetenv("XDG_CACHE_HOME") == 0);
  CHECK(setenv("CANNL_CACHE_DIR", "off", 1) == 0);
  /* The compiler gets the fallback too (clang fails without a TMPDIR): a wrapper checks it. */
  const char *cc = getenv("CC");
  char saved_cc[256], wrapper[512];
  snprintf(saved_cc, sizeof saved_cc, "%s", cc && *cc ? cc : "");
  snprintf(wrapper, sizeof wrapper, "sh -c 'test -d \"$TMPDIR\" || exit 9; exec $0 \"$@\"' \"%s\"",
           saved_cc[0] ? saved_cc : "cc");
  CHECK(setenv("CC", wrapper, 1) == 0);
  run_routine("fill", values_other, 1, 0);
  CHECK_STR(warnings, "");
  CHECK(saved_cc[0] ? setenv("CC", saved_cc, 1) == 0 : unsetenv("CC") == 0);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_STR(cn_ctx_option(ctx, "cache_dir"), per_user);
  cn_ctx_destroy(ctx);
  /* A name of its own, so that its files in the shared /tmp are found and removed (with the
   * directory when this test made it). */
  bool made = access(per_user, F_OK) != 0;
  run_routine("cannl_test_tmpdir", values_other, -1, -1);
  CHECK(strstr(warnings, missing) == NULL);
  if (find_object(per_user, "cannl_test_tmpdir", "", stem, sizeof stem))
    for (int k = 0; k < 3; k++) {
      with_suffix(file, sizeof file, stem, (const char *[]){".c", ".so", ".sum"}[k]);
      CHECK(unlink(file) == 0);
    }
  if (made) rmdir(per_user);
  CHECK(setenv("TMPDIR", "/tmp", 1) == 0);
}

/* ---- Locations ---- */

static void test_locations(void) {
  char uid_dir[64], xdg[PATH_MAX], home[PATH_MAX], tmp[PATH_MAX], plain[PATH_MAX], where[PATH_MAX],
      per_user[PATH_MAX], moved[PATH_MAX];
  snprintf(uid_dir, sizeof uid_dir, "cannl-cache-%ld", (long)geteuid());
  path_in(xdg, sizeof xdg, root, "xdg");
  path_in(home, sizeof home, root, "home");
  path_in(tmp, sizeof tmp, root, "tmp");
  path_in(plain, sizeof plain, root, "plain-file");
  path_in(per_user, sizeof per_user, tmp, uid_dir);
  CHECK(mkdir(tmp, 0700) == 0);
  write_file(plain, "", 0);
  CHECK(unsetenv("CANNL_CACHE_DIR") == 0);
  CHECK(setenv("TMPDIR", tmp, 1) == 0);

  /* $XDG_CACHE_HOME/cannl, created. */
  CHECK(setenv("XDG_CACHE_HOME", xdg, 1) == 0);
  CHECK(setenv("HOME", home, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  path_in(where, sizeof where, xdg, "cannl");
  CHECK_INT(count_files(where, ".so"), 1);
  CHECK_INT(count_files(where, ".sum"), 1);
  run_routine("fill", values_a, 0, 1);

  /* A relative XDG_CACHE_HOME is ignored: $HOME/.cache/cannl, created below the existing home. */
  CHECK(mkdir(home, 0700) == 0);
  CHECK(setenv("XDG_CACHE_HOME", "relative/xdg", 1) == 0);
  run_routine("fill", values_a, 1, 0);
  CHECK_STR(warnings, "");
  path_in(where, sizeof where, home, ".cache/cannl");
  CHECK_INT(count_files(where, ".so"), 1);
  CHECK(unsetenv("XDG_CACHE_HOME") == 0);
  run_routine("fill", values_a, 0, 1);

  /* A HOME under which nothing can be created: the per-user directory under $TMPDIR, 0700. */
  CHECK(setenv("HOME", plain, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  char expected[4 * PATH_MAX];
  snprintf(expected, sizeof expected,
           "cannot create cache directory '%s/.cache/cannl' ('%s/.cache': Not a directory); "
           "using %s\n",
           plain, plain, per_user);
  CHECK_STR(warnings, expected);
  struct stat st;
  CHECK(lstat(per_user, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  CHECK_INT(count_files(per_user, ".so"), 1);
  CHECK_INT(count_files(per_user, ".sum"), 1);
  /* No HOME at all: the same directory, silently. */
  CHECK(unsetenv("HOME") == 0);
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");
  /* A HOME that does not exist is no home: the same directory, silently, and the home is never
   * created (as root, a HOME of /nonexistent once became /nonexistent/.cache/cannl). */
  char no_home[PATH_MAX];
  path_in(no_home, sizeof no_home, root, "no-such-home");
  CHECK(setenv("HOME", no_home, 1) == 0);
  run_routine("fill", values_a, 0, 1);
  CHECK_STR(warnings, "");
  CHECK(access(no_home, F_OK) != 0 && errno == ENOENT);
  CHECK(unsetenv("HOME") == 0);

  /* A per-user directory others can write is refused: no disk cache, nothing written there. */
  CHECK(chmod(per_user, 0777) == 0);
  run_routine("fill", values_b, 1, 0);
  snprintf(expected, sizeof expected,
           "refusing cache directory '%s' (writable by group or others): compiling without a "
           "disk cache\n",
           per_user);
  CHECK_STR(warnings, expected);
  CHECK_INT(count_files(per_user, ""), 3);
  CHECK_INT(count_files(tmp, ""), 1); /* the private directory was removed */
  /* So is a symbolic link, even to a good directory. */
  CHECK(chmod(per_user, 0700) == 0);
  path_in(moved, sizeof moved, tmp, "moved");
  CHECK(rename(per_user, moved) == 0);
  CHECK(symlink(moved, per_user) == 0);
  run_routine("fill", values_a, 1, 0);
  snprintf(expected, sizeof expected,
           "refusing cache directory '%s' (a symbolic link): compiling without a disk cache\n",
           per_user);
  CHECK_STR(warnings, expected);
  CHECK_INT(count_files(moved, ""), 3);
  CHECK_INT(count_files(tmp, ""), 2);
  CHECK(unlink(per_user) == 0);
  CHECK(rename(moved, per_user) == 0);
  run_routine("fill", values_a, 0, 1);

  /* CANNL_CACHE_DIR=off: compiled every time, no file left anywhere. */
  CHECK(setenv("HOME", home, 1) == 0);
  CHECK(setenv("CANNL_CACHE_DIR", "off", 1) == 0);
  path_in(where, sizeof where, root, "off-tmp");
  CHECK(mkdir(where, 0700) == 0);
  CHECK(setenv("TMPDIR", where, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  run_routine("fill", values_a, 1, 0);
  CHECK_STR(warnings, "");
  CHECK_INT(count_files(where, ""), 0);
  path_in(tmp, sizeof tmp, home, ".cache/cannl");
  CHECK_INT(count_files(tmp, ""), 3); /* only the files of the relative-XDG run above */
  CHECK(setenv("TMPDIR", "/tmp", 1) == 0);
}

/* ---- The compiler command ---- */

/* Flags that include header_dir/name and define macros whose bodies the header checks. */
static void check_flags(char *out, size_t size, const char *header_dir, const char *name) {
  int n = snprintf(out, size,
                   CFLAGS " -include \"%s/%s\"\t-DCN_N=\"1 + 2\"\n-DCN_M=4\\ \\*\\ 2 "
                          "'-DCN_S=sizeof \"ab\"' \"-DCN_Q=sizeof \\\"a b\\\"\" -DCN_D=sizeof\\ "
                          "'\"$HOME\"'",
                   header_dir, name);
  CHECK(n > 0 && (size_t)n < size);
}

static void test_command(void) {
  char dir[PATH_MAX], header_dir[PATH_MAX], header[PATH_MAX], flags[4 * PATH_MAX];
  path_in(dir, sizeof dir, root, "flags-cache");
  CHECK(setenv("CANNL_CACHE_DIR", dir, 1) == 0);
  path_in(header_dir, sizeof header_dir, root, "with space");
  CHECK(mkdir(header_dir, 0700) == 0);
  path_in(header, sizeof header, header_dir, "check 'flags'.h");
  /* Each define has a body the compiler only accepts if it arrived as one word, split as the
   * grammar says; CN_D shows that $HOME is not expanded. */
  const char *checks = "_Static_assert(CN_N == 3, \"cn-flag-check N\");\n"
                       "_Static_assert(CN_M == 8, \"cn-flag-check M\");\n"
                       "_Static_assert(CN_S == 3, \"cn-flag-check S\");\n"
                       "_Static_assert(CN_Q == 4, \"cn-flag-check Q\");\n"
                       "_Static_assert(CN_D == 6, \"cn-flag-check D\");\n";
  write_file(header, checks, strlen(checks));
  /* Inside double quotes a backslash makes the quote in the header's name literal. */
  check_flags(flags, sizeof flags, header_dir, "check \\'flags\\'.h");
  CHECK(setenv("CANNL_CFLAGS", flags, 1) == 0);
  run_routine("fill", values_a, 1, 0);
  CHECK_INT(count_files(dir, ".so"), 1);

  /* The header is really read: a failing assertion fails the compilation, with the compiler's
   * diagnostics in the message. */
  const char *wrong = "_Static_assert(CN_N == 4, \"cn-flag-check N\");\n";
  path_in(header, sizeof header, header_dir, "wrong.h");
  write_file(header, wrong, strlen(wrong));
  check_flags(flags, sizeof flags, header_dir, "wrong.h");
  CHECK_HAS(compile_error(NULL, flags, CN_ERR_COMPILE), "cn-flag-check N");
  CHECK_INT(count_files(dir, ""), 4); /* the failed compilation's source stays for inspection */

  /* Errors of the grammar, before any file is written. */
  CHECK_STR(compile_error(NULL, "-O1 -DX=\"a b", CN_ERR_INVALID),
            "unterminated double quote at character 9 of the compiler flags (option 'cflags', "
            "default $CANNL_CFLAGS):\n"
            "  -O1 -DX=\"a b\n"
            "          ^");
  CHECK_STR(compile_error(NULL, "-O1 'it''s", CN_ERR_INVALID),
            "unterminated single quote at character 9 of the compiler flags (option 'cflags', "
            "default $CANNL_CFLAGS):\n"
            "  -O1 'it''s\n"
            "          ^");
  CHECK_STR(compile_error(NULL, "-O1 -DX=\"a \\\" b", CN_ERR_INVALID),
            "unterminated double quote at character 9 of the compiler flags (option 'cflags', "
            "default $CANNL_CFLAGS):\n"
            "  -O1 -DX=\"a \\\" b\n"
            "          ^");
  CHECK_STR(compile_error(NULL, "-O1 -DX\\", CN_ERR_INVALID),
            "backslash escaping nothing at character 8 of the compiler flags (option 'cflags', "
            "default $CANNL_CFLAGS):\n"
            "  -O1 -DX\\\n"
            "         ^");
  CHECK_STR(compile_error("cc 'gcc", CFLAGS, CN_ERR_INVALID),
            "unterminated single quote at character 4 of the compiler command (option 'cc', "
            "default $CC):\n"
            "  cc 'gcc\n"
            "     ^");
  CHECK_STR(compile_error(" \t", CFLAGS, CN_ERR_INVALID),
            "the compiler command (option 'cc', default $CC) names no program: ' \t'");
  CHECK_INT(count_files(dir, ""), 4);

  /* No shell runs the command: a missing program is reported by the spawn itself. */
  const char *msg = compile_error("'cn no such compiler'", CFLAGS, CN_ERR_COMPILE);
  CHECK_HAS(msg, "cn no such compiler");
  /* Under valgrind the spawned child reports it by exiting with 127. */
  if (!strstr(msg, "exit status 127")) {
    CHECK_HAS(msg, "cannot run the C compiler ''cn no such compiler'' on '");
    CHECK_HAS(msg, "': No such file or directory");
  } else {
    CHECK_HAS(msg, "(no output: cannot run 'cn no such compiler')");
  }
  CHECK(unsetenv("CANNL_CFLAGS") == 0);
}

/* ---- Several routines at once ---- */

/* Compiles three fills (names fill_a, fill_b, fill_c) with cn_routine_compile_many into dir, each
 * run and checked exactly; the compiler runs and cache hits expected. */
static void compile_three(const char *dir, int runs, int hits) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return;
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  const double *values[3] = {values_a, values_b, values_other};
  const char *names[3] = {"fill_a", "fill_b", "fill_c"};
  cn_node *x[3];
  const cn_asgn *code[3];
  int64_t n = 3;
  for (int k = 0; k < 3; k++) {
    x[k] = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &n);
    code[k] = x[k] ? cn_asgn_fetch_constant_fill(ctx, x[k], values[k], 3) : NULL;
  }
  cn_routine *r[3];
  CHECK_INT(cn_routine_compile_many(ctx, 3, code, names, CN_BACKEND_C, r), CN_OK);
  for (int k = 0; k < 3 && cn_ctx_status(ctx) == CN_OK; k++) {
    CHECK_INT(cn_routine_run(r[k]), CN_OK);
    double got[3] = {0, 0, 0};
    CHECK_INT(cn_node_get_values(x[k], false, got, 3), CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], values[k][i], 0);
  }
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), runs);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), hits);
  /* With a flag the compiler refuses, none of three new sources compiles: no routine is kept, and
   * the message is the compiler's on the first routine's file, whichever compiler failed first. */
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", CFLAGS " -fno-such-flag-anywhere"), CN_OK);
  const double *changed[3] = {values_b, values_other, values_a};
  for (int k = 0; k < 3; k++) code[k] = cn_asgn_fetch_constant_fill(ctx, x[k], changed[k], 3);
  r[0] = r[1] = r[2] = (cn_routine *)code; /* overwritten with NULL on failure */
  CHECK_INT(cn_routine_compile_many(ctx, 3, code, names, CN_BACKEND_C, r), CN_ERR_COMPILE);
  CHECK(r[0] == NULL && r[1] == NULL && r[2] == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "C compiler failed on generated file");
  CHECK_HAS(cn_ctx_error(ctx), "fill_a-");
  CHECK_HAS(cn_ctx_error(ctx), "-fno-such-flag-anywhere");
  cn_ctx_destroy(ctx);
}

static void test_many(void) {
  char dir[PATH_MAX];
  path_in(dir, sizeof dir, root, "many");
  CHECK(mkdir(dir, 0700) == 0);
  compile_three(dir, 3, 0); /* cold: three compilers */
  compile_three(dir, 0, 3); /* warm: three hits */
  CHECK_INT(count_files(dir, ".so"), 3);
  CHECK_INT(count_files(dir, ".sum"), 3);
  /* The sources of the failed compilations stay, all three (a batch writes its sources before
   * its compilers start, one per processor at a time). */
  CHECK_INT(count_files(dir, ".c"), 6);
  /* No temporary (<name>-<key>.tmp.<host>.<pid>.<serial>.*) survives. */
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  for (struct dirent *e; d && (e = readdir(d));)
    CHECK_MSG(!strstr(e->d_name, ".tmp."), "%s", e->d_name);
  if (d) closedir(d);
}

/* No temporary (<name>-<key>.tmp.<host>.<pid>.<serial>.*) in dir, and no compiler process left. */
static void check_clean(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  for (struct dirent *e; d && (e = readdir(d));)
    CHECK_MSG(!strstr(e->d_name, ".tmp."), "%s", e->d_name);
  if (d) closedir(d);
  errno = 0;
  CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
}

/* Three fills compiling behind (cn_routine_compile_tiered_many, compile-ahead's call: runs far
 * above the interpreter's budget), into the context's cache dir. */
static void start_three(cn_ctx *ctx, cn_node **x, const double *const *values, cn_routine **r) {
  const char *names[3] = {"fill_a", "fill_b", "fill_c"};
  const cn_asgn *code[3];
  const int64_t runs[3] = {1000000, 1000000, 1000000};
  for (int k = 0; k < 3; k++) code[k] = cn_asgn_fetch_constant_fill(ctx, x[k], values[k], 3);
  CHECK_INT(cn_routine_compile_tiered_many(ctx, 3, code, names, CN_BACKEND_C, runs, r), CN_OK);
}

/* This process's children now (the compilers it runs): the processes of /proc whose parent it is.
 */
static int count_children(void) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char path[300], text[512];
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[got] = '\0';
    const char *after = strrchr(text, ')'); /* the name may hold spaces: pid (name) state ppid */
    long ppid;
    if (after && sscanf(after + 1, " %*c %ld", &ppid) == 1 && ppid == (long)getpid()) n++;
  }
  closedir(d);
  return n;
}

/* Compiling behind: the call returns with the sources known and the compilers running; a
 * routine's first run waits for its own object, in any order, and until then the compilers leave
 * one processor to the caller; one freed before its first run gives
 * its compilation up (no object published); a compile failure comes at each routine's first run
 * with the compiler's message on that routine's file (a later run says the compilation failed); a
 * context destroyed while its routines compile leaves neither process nor temporary. */
static void test_behind(void) {
  char dir[PATH_MAX];
  path_in(dir, sizeof dir, root, "behind");
  CHECK(mkdir(dir, 0700) == 0);
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return;
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", CFLAGS), CN_OK);
  cn_node *x[3];
  int64_t n = 3;
  for (int k = 0; k < 3; k++) x[k] = cn_node_create(ctx, "x", CN_PREC_DOUBLE, 1, &n);
  const double *values[3] = {values_a, values_b, values_other};
  cn_routine *r[3] = {NULL, NULL, NULL};
  start_three(ctx, x, values, r);
  /* behind the caller's work, one processor is left to it (cc_jobs.c behind_width) */
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  CHECK_MSG(count_children() <= (online > 1 ? online - 1 : 1), "%d compilers on %ld processors",
            count_children(), online);
  CHECK(r[2] && strstr(cn_routine_source(r[2]), "void fill_c_entry("));
  cn_routine_free(r[1]);
  for (int k = 2; k >= 0 && r[0] && r[2]; k -= 2) {
    CHECK_INT(cn_routine_run(r[k]), CN_OK);
    double got[3] = {0, 0, 0};
    CHECK_INT(cn_node_get_values(x[k], false, got, 3), CN_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(got[i], values[k][i], 0);
  }
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 3);
  CHECK_INT(count_files(dir, ".so"), 2); /* fill_b's compilation was given up */
  CHECK_INT(count_files(dir, ".sum"), 2);

  /* A flag the compiler refuses: each routine's first run fails on its own file. */
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", CFLAGS " -fno-such-flag-anywhere"), CN_OK);
  const double *changed[3] = {values_b, values_other, values_a};
  start_three(ctx, x, changed, r);
  for (int k = 1; k < 3 && r[0] && r[1] && r[2]; k++) {
    CHECK_INT(cn_routine_run(r[k]), CN_ERR_COMPILE);
    CHECK_HAS(cn_ctx_error(ctx), "C compiler failed on generated file");
    CHECK_HAS(cn_ctx_error(ctx), k == 1 ? "/fill_b-" : "/fill_c-");
    CHECK_HAS(cn_ctx_error(ctx), "-fno-such-flag-anywhere");
  }
  CHECK_INT(cn_routine_run(r[1]), CN_ERR_COMPILE);
  CHECK_HAS(cn_ctx_error(ctx), "routine 'fill_b': its compilation failed (at its first run)");
  for (int k = 0; k < 3; k++) cn_routine_free(r[k]);
  check_clean(dir);

  /* Destroyed while compiling: the compilers are waited for, their files go. */
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", CFLAGS), CN_OK);
  const double *again[3] = {values_other, values_a, values_b};
  start_three(ctx, x, again, r);
  cn_ctx_destroy(ctx);
  check_clean(dir);
  CHECK_INT(count_files(dir, ".so"), 2);
}

/* A relative cache directory whose name starts with '-' is the directory, never an option of the
 * compiler: the paths of its files on the compiler's command line start with "./". */
static void test_dash_dir(void) {
  char cwd[PATH_MAX];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(root) == 0);
  compile_three("-dash", 3, 0);
  compile_three("-dash", 0, 3);
  CHECK_INT(count_files("-dash", ".so"), 3);
  CHECK(chdir(cwd) == 0);
}

int main(void) {
  char cwd[PATH_MAX - 64];
  if (!getcwd(cwd, sizeof cwd)) return 1;
  snprintf(root, sizeof root, "%s/test_cache-XXXXXX", cwd);
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  CHECK(setenv("CANNL_CFLAGS", CFLAGS, 1) == 0);
  test_integrity();
  test_planted();
  test_tune_fifo();
  test_stale_temporaries();
  test_swapped_object();
  test_fd_names();
  test_locations();
  test_unwritable();
  test_missing_tmpdir();
  test_command();
  test_many();
  test_behind();
  test_dash_dir();
  remove_tree(root);
  CHECK_DONE();
}
