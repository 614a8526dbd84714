/* Text corpora (cn_data_load_text, cn_text_draw_windows):
 *   - a small corpus written into a mkdtemp directory (two text files with "%" lines, one
 *     without a final newline; a hidden file, a ".dat" index, a symbolic link, a subdirectory and
 *     a FIFO, all skipped, the FIFO without being opened): the exact bytes, vocabulary, token
 *     ids, 90/10 split sizes, and the order of several paths;
 *   - windows from a longer file: x matches the corpus at the documented starts, y is x shifted
 *     by one, starts distinct within a batch, the same for the same (seed, step), different for
 *     another seed or step, the validation split read from its own tokens, the bounds on context
 *     and batch;
 *   - the notation's text_windows: the windows a script's tensors hold (saved as .npy) are the
 *     library's for the same arguments, at step 0 and after `shuffle x ~epoch:5`, and for the
 *     validation split; its refusals, positioned;
 *   - errors: a missing path, an empty directory, a corpus of "%" lines only, a FIFO (refused
 *     without blocking), an unreadable file (when not root), a file past CN_TEXT_MAX_BYTES
 *     (refused before reading), and every allocation of a load failing in turn (CN_ERR_NOMEM,
 *     nothing left held: ASan and valgrind see no leak);
 *   - Debian's fortunes and wamerican when installed (exit 77 with a message when either is
 *     absent): vocabulary size, token count and first bytes, pinned as measured. */
#define _XOPEN_SOURCE 700 /* mkdtemp, symlink, mkfifo */
#include "check.h"

#include "cannl.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void write_file(const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* The bytes of t's tokens [0, count) as text (NUL-terminated, malloc'd). */
static char *decode(const cn_text *t) {
  char *s = malloc((size_t)t->count + 1);
  for (int64_t i = 0; i < t->count; i++) s[i] = (char)t->bytes[t->tokens[i]];
  s[t->count] = 0;
  return s;
}

static void test_small_corpus(void) {
  char corp[128], path[256];
  snprintf(corp, sizeof corp, "%s/corp", dir);
  CHECK(mkdir(corp, 0700) == 0);
  write_file("corp/a_first", "hello\n%\nworld\n");
  /* no final newline; "%x" and "%%" are text, not separators */
  write_file("corp/b_second", "%\nxy\n%x\n%\nzz");
  write_file("corp/.hidden", "QQQ\n");
  write_file("corp/a_first.dat", "DDD\n");
  snprintf(path, sizeof path, "%s/corp/a_first.u8", dir);
  CHECK(symlink("a_first", path) == 0);
  snprintf(path, sizeof path, "%s/corp/sub", dir);
  CHECK(mkdir(path, 0700) == 0);
  write_file("corp/sub/inner", "III\n");
  /* a FIFO in the directory is skipped (lstat), never opened: a blocking open would hang here */
  snprintf(path, sizeof path, "%s/corp/pipe", dir);
  CHECK(mkfifo(path, 0600) == 0);

  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  const char *paths[] = {corp};
  CHECK_INT(cn_data_load_text(ctx, 1, paths, &t), CN_OK);
  const char *want = "hello\nworld\nxy\n%x\nzz\n";
  CHECK_INT(t.count, 21);
  CHECK_INT(t.files, 2);
  char *text = decode(&t);
  CHECK_STR(text, want);
  free(text);
  const char *vocab = "\n%dehlorwxyz";
  CHECK_INT(t.vocab, 12);
  for (int k = 0; k < 12; k++) CHECK_INT(t.bytes[k], (unsigned char)vocab[k]);
  int absent = 0;
  for (int c = 0; c < 256; c++) {
    const char *at = c ? strchr(vocab, c) : NULL;
    if (at)
      CHECK_INT(t.ids[c], at - vocab);
    else
      absent += t.ids[c] == -1;
  }
  CHECK_INT(absent, 256 - 12);
  /* token ids by hand: h e l l o \n w ... */
  const int ids[21] = {4, 3, 5, 5, 6, 0, 8, 6, 7, 5, 2, 0, 9, 10, 0, 1, 9, 0, 11, 11, 0};
  for (int i = 0; i < 21; i++) CHECK_INT(t.tokens[i], ids[i]);
  CHECK_INT(t.train, 18); /* floor(0.9 * 21) */
  cn_text_free(&t);
  CHECK(t.tokens == NULL && t.count == 0);

  /* several paths: read in the order given, a file path as itself */
  char second[256];
  snprintf(second, sizeof second, "%s/corp/b_second", dir);
  const char *two[] = {second, corp};
  CHECK_INT(cn_data_load_text(ctx, 2, two, &t), CN_OK);
  text = decode(&t);
  CHECK_STR(text, "xy\n%x\nzz\nhello\nworld\nxy\n%x\nzz\n");
  CHECK_INT(t.files, 3);
  CHECK_INT(t.train, 27); /* floor(0.9 * 30) */
  free(text);
  cn_text_free(&t);

  /* allocation failures: each allocation of the directory's load fails in turn */
  int failures = 0;
  for (long n = 1;; n++) {
    ctx->fail_alloc_countdown = n;
    cn_status s = cn_data_load_text(ctx, 2, two, &t);
    ctx->fail_alloc_countdown = 0;
    if (s == CN_OK) break;
    failures++;
    CHECK_INT(s, CN_ERR_NOMEM);
    CHECK(t.tokens == NULL && t.count == 0);
    if (n > 100) break;
  }
  CHECK_INT(t.count, 30);
  CHECK_MSG(failures >= 4, "%d allocations failed", failures); /* names, 2 paths, 2 buffers */
  cn_text_free(&t);
  cn_ctx_destroy(ctx);
}

#define LONG 2000

static bool same(const int32_t *a, const int32_t *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0;
}

static void test_windows(void) {
  /* 2000 letters of 16 kinds from an LCG, so that windows at different starts differ */
  char *text = malloc(LONG + 1);
  uint32_t r = 12345;
  for (int i = 0; i < LONG; i++) {
    r = r * 1103515245u + 12345u;
    text[i] = (char)('a' + ((r >> 16) & 15));
  }
  text[LONG] = 0;
  write_file("long", text);
  char path[128];
  snprintf(path, sizeof path, "%s/long", dir);
  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  const char *paths[] = {path};
  CHECK_INT(cn_data_load_text(ctx, 1, paths, &t), CN_OK);
  CHECK_INT(t.count, LONG + 1); /* the newline added at the end */
  CHECK_INT(t.vocab, 17);
  CHECK_INT(t.train, 1800);

  enum { B = 8, T = 16 };
  int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 1, 0, B, T, x, y), CN_OK);
  bool matches = true, shifted = true, distinct = true;
  int64_t starts[B];
  for (int b = 0; b < B; b++) {
    starts[b] = cn_dataset_permute(1, 0, 1800 - T, b);
    for (int c = 0; c < b; c++) distinct &= starts[c] != starts[b];
    for (int i = 0; i < T; i++) {
      /* the decoded text itself, independent of the token ids */
      matches &= t.bytes[x[b * T + i]] == (unsigned char)text[starts[b] + i];
      matches &= t.bytes[y[b * T + i]] == (unsigned char)text[starts[b] + i + 1];
      if (i + 1 < T) shifted &= y[b * T + i] == x[b * T + i + 1];
    }
  }
  CHECK(matches);
  CHECK(shifted);
  CHECK(distinct);
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 1, 0, B, T, x2, y2), CN_OK);
  CHECK(same(x, x2, B * T) && same(y, y2, B * T));
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 2, 0, B, T, x2, y2), CN_OK);
  CHECK(!same(x, x2, B * T));
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 1, 1, B, T, x2, y2), CN_OK);
  CHECK(!same(x, x2, B * T));

  /* validation: the 201 tokens [1800, 2001), the last being the added newline */
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 1, 0, B, T, x, y), CN_OK);
  matches = true;
  for (int b = 0; b < B; b++) {
    int64_t s = 1800 + cn_dataset_permute(1, 0, 201 - T, b);
    for (int i = 0; i < T; i++) {
      matches &= x[b * T + i] == t.tokens[s + i];
      matches &= y[b * T + i] == t.tokens[s + i + 1];
    }
  }
  CHECK(matches);
  /* the longest context: one window, the whole split */
  int32_t *wx = malloc(200 * sizeof *wx), *wy = malloc(200 * sizeof *wy);
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 5, 9, 1, 200, wx, wy), CN_OK);
  CHECK_INT(wx[0], t.tokens[1800]);
  CHECK_INT(wy[199], t.ids['\n']);
  CHECK_INT(wx[199], t.ids[(unsigned char)text[1999]]);
  free(wx);
  free(wy);

  /* bounds */
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 1, 0, 1, 201, x, y), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "context 201; the validation split holds 201 tokens");
  CHECK_HAS(cn_ctx_error(ctx), "[1, 200]");
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 1, 0, 1, 0, x, y), CN_ERR_INVALID);
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 1, 0, 3, 199, x, y), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "batch 3");
  CHECK_HAS(cn_ctx_error(ctx), "has 2 window starts");
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 1, 0, 0, 4, x, y), CN_ERR_INVALID);
  CHECK_INT(cn_text_draw_windows(ctx, &t, (cn_text_split)7, 1, 0, 1, 4, x, y), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "split 7");
  cn_text_free(&t);
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 1, 0, 1, 4, x, y), CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
  free(text);
}

/* Runs a script on the interpreter; its message, when it fails, in error. */
static cn_status run_script(const char *script, char *error, size_t cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *devnull = fopen("/dev/null", "w");
  cn_notation_options opts = {0};
  opts.backend = CN_BACKEND_INTERP;
  opts.out = devnull;
  cn_status st = cn_notation_run(g, "t.cnl", script, &opts);
  snprintf(error, cap, "%s", st == CN_OK ? "" : cn_ctx_error(ctx));
  if (devnull) fclose(devnull);
  cn_ctx_destroy(ctx);
  return st;
}

/* The int32 cells of DIR/name.npy (a [batch, context] array) equal want's n cells. */
static bool npy_equals(const char *name, const int32_t *want, int64_t batch, int64_t context) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  cn_ctx *ctx = cn_ctx_create();
  cn_array a;
  bool ok = cn_data_load_npy(ctx, path, &a) == CN_OK && a.prec == CN_PREC_INT32 && a.rank == 2 &&
            a.dims[0] == batch && a.dims[1] == context &&
            memcmp(a.cells, want, (size_t)(batch * context) * sizeof *want) == 0;
  if (!ok) fprintf(stderr, "%s: %s\n", path, cn_ctx_error(ctx));
  cn_array_free(&a);
  cn_ctx_destroy(ctx);
  return ok;
}

/* text_windows in a script: step 0's windows before anything runs, step 5's after shuffle, the
 * validation split with ~valid:true, each the library's windows for the same arguments; the
 * library's refusals positioned at the call. Uses the file "long" of test_windows. */
static void test_notation(void) {
  char path[128], script[2048], error[1024];
  snprintf(path, sizeof path, "%s/long", dir);
  snprintf(script, sizeof script,
           "let (x, y) = text_windows ~batch_size:4 ~context:8 ~seed:3 \"%s\"\n"
           "save_npy \"%s/x0.npy\" x\nsave_npy \"%s/y0.npy\" y\n"
           "shuffle x ~epoch:5\n"
           "save_npy \"%s/x5.npy\" x\nsave_npy \"%s/y5.npy\" y\n"
           "let (vx, vy) = text_windows ~batch_size:2 ~context:8 ~seed:3 ~valid:true \"%s\"\n"
           "save_npy \"%s/vy.npy\" vy\n",
           path, dir, dir, dir, dir, path, dir);
  CHECK_INT(run_script(script, error, sizeof error), CN_OK);
  CHECK_STR(error, "");
  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  const char *paths[] = {path};
  CHECK_INT(cn_data_load_text(ctx, 1, paths, &t), CN_OK);
  int32_t x[32], y[32];
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 3, 0, 4, 8, x, y), CN_OK);
  CHECK(npy_equals("x0", x, 4, 8));
  CHECK(npy_equals("y0", y, 4, 8));
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_TRAIN, 3, 5, 4, 8, x, y), CN_OK);
  CHECK(npy_equals("x5", x, 4, 8));
  CHECK(npy_equals("y5", y, 4, 8));
  CHECK_INT(cn_text_draw_windows(ctx, &t, CN_TEXT_VALID, 3, 0, 2, 8, x, y), CN_OK);
  CHECK(npy_equals("vy", y, 2, 8));
  cn_text_free(&t);
  cn_ctx_destroy(ctx);

  /* the validation split holds 201 tokens: a context of 201 is refused at the call */
  snprintf(script, sizeof script,
           "let (x, y) = text_windows ~batch_size:1 ~context:201 ~valid:true \"%s\"\n", path);
  CHECK_INT(run_script(script, error, sizeof error), CN_ERR_INVALID);
  CHECK_HAS(error, "t.cnl:1:14: text windows: context 201; the validation split holds 201 tokens");
  snprintf(script, sizeof script, "let (x, y) = text_windows ~batch_size:1 ~context:4 \"%s/no\"\n",
           dir);
  CHECK(run_script(script, error, sizeof error) != CN_OK);
  CHECK_HAS(error, "/no: cannot open: No such file or directory");
  CHECK(run_script("let (x, y) = text_windows ~batch_size:1 \"f\"\n", error, sizeof error) !=
        CN_OK);
  CHECK_HAS(error, "text_windows takes ~batch_size:N ~context:N");
  snprintf(script, sizeof script,
           "let (x, y) = text_windows ~batch_size:1 ~context:4 ~valid:1 \"%s\"\n", path);
  CHECK(run_script(script, error, sizeof error) != CN_OK);
  CHECK_HAS(error, "~valid expects a boolean");
}

static cn_status load_one(cn_ctx *ctx, const char *path, cn_text *t) {
  const char *paths[] = {path};
  return cn_data_load_text(ctx, 1, paths, t);
}

static void test_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  char path[256];
  snprintf(path, sizeof path, "%s/missing", dir);
  CHECK_INT(load_one(ctx, path, &t), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "missing: cannot open: No such file or directory");
  CHECK(t.tokens == NULL && t.count == 0);

  snprintf(path, sizeof path, "%s/empty_dir", dir);
  CHECK(mkdir(path, 0700) == 0);
  write_file("empty_dir/x.dat", "index\n");
  CHECK_INT(load_one(ctx, path, &t), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "empty_dir: no text file in the directory");

  write_file("separators", "%\n%\n%");
  snprintf(path, sizeof path, "%s/separators", dir);
  CHECK_INT(load_one(ctx, path, &t), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "no text in 1 file once the \"%\" separator lines are dropped");

  snprintf(path, sizeof path, "%s/fifo", dir);
  CHECK(mkfifo(path, 0600) == 0);
  CHECK_INT(load_one(ctx, path, &t), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "fifo: cannot read: not a regular file");

  /* a sparse file one byte past the limit: refused by its size, before any byte is read */
  snprintf(path, sizeof path, "%s/huge", dir);
  FILE *f = fopen(path, "wb");
  CHECK(f && ftruncate(fileno(f), (off_t)CN_TEXT_MAX_BYTES + 1) == 0);
  if (f) fclose(f);
  CHECK_INT(load_one(ctx, path, &t), CN_ERR_UNSUPPORTED);
  CHECK_HAS(cn_ctx_error(ctx), "huge: a text corpus holds at most 67108864 bytes");
  unlink(path);

  /* an unreadable file: root reads it anyway, so only another user sees the refusal */
  write_file("secret", "text\n");
  snprintf(path, sizeof path, "%s/secret", dir);
  CHECK(chmod(path, 0) == 0);
  if (geteuid() != 0) {
    CHECK_INT(load_one(ctx, path, &t), CN_ERR_IO);
    CHECK_HAS(cn_ctx_error(ctx), "secret: cannot open: Permission denied");
  } else {
    printf("note: running as root, the unreadable-file case is not checked\n");
  }

  CHECK_INT(cn_data_load_text(ctx, 0, NULL, &t), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "no file or directory");
  cn_ctx_destroy(ctx);
}

/* The Debian corpora, measured with this loader on Debian 12 (fortunes 1:1.99.1-7.3,
 * wamerican 2020.12.07-2) and cross-checked with a Python model of the documented rules. */
static int test_debian(void) {
  const char *fortunes = "/usr/share/games/fortunes", *words = "/usr/share/dict/words";
  if (access(fortunes, R_OK) != 0 || access(words, R_OK) != 0) {
    printf("SKIP: %s or %s is absent (make deps installs fortunes and wamerican)\n", fortunes,
           words);
    return 77;
  }
  cn_ctx *ctx = cn_ctx_create();
  cn_text t;
  CHECK_INT(load_one(ctx, fortunes, &t), CN_OK);
  printf("fortunes: %d files, %lld tokens, vocabulary %d, train %lld\n", t.files,
         (long long)t.count, t.vocab, (long long)t.train);
  CHECK_INT(t.files, 43);
  CHECK_INT(t.count, 2546242);
  CHECK_INT(t.vocab, 114);
  CHECK_INT(t.train, 2291617);
  char *text = decode(&t);
  /* the first file in name order is "art" */
  CHECK(strncmp(text, "7:30, Channel 5: The Bionic Dog", 31) == 0);
  CHECK(strstr(text, "\n%\n") == NULL);
  free(text);
  cn_text_free(&t);

  CHECK_INT(load_one(ctx, words, &t), CN_OK);
  printf("words: %lld tokens, vocabulary %d, train %lld\n", (long long)t.count, t.vocab,
         (long long)t.train);
  CHECK_INT(t.files, 1);
  CHECK_INT(t.count, 985084);
  CHECK_INT(t.vocab, 71);
  CHECK_INT(t.train, 886575);
  CHECK_INT(t.tokens[0], t.ids['A']);
  CHECK_INT(t.tokens[1], t.ids['\n']);
  cn_text_free(&t);
  cn_ctx_destroy(ctx);
  return 0;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl_text_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_small_corpus();
  test_windows();
  test_notation();
  test_errors();
  int debian = test_debian();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (debian == 77 && check_failed_ == 0) {
    printf("%d passed, 0 failed (the Debian corpora skipped)\n", check_passed_);
    return 77;
  }
  CHECK_DONE();
}
