/* The notation's script parameters and the pieces of examples/fashion_mnist.cnl
 * (docs/notation.md): --set (cn_notation_options.sets) replacing top-level literals, with its
 * errors; if expressions on numbers, functions and strings (string = and ^), with their errors;
 * restore ~resume:false ignoring an existing checkpoint; the plot statement (the SVG file parsed
 * for its points, the ASCII charts and the matrix table compared as text, its errors); both
 * printed as source that parses back; and the
 * example itself on tiny IDX files written here: the convnet trains two epochs and plots, and a
 * run of one epoch resumed with resume=true prints what one run of two epochs prints. Files go to
 * a fresh directory, removed at the end. */
#include "check.h"

#include "cannl.h"
#include "notation/notation.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
/* The backend scripts run on: the interpreter, except for the example (the C backend, whose
 * routines CANNL_CACHE_DIR keeps between runs, is much faster on its convolutions). */
static cn_backend_kind backend = CN_BACKEND_INTERP;

/* Runs a script on `backend` (n_sets "NAME=VALUE" texts), its plain output (malloc'd) in
 * *out, the message on failure in error. */
static cn_status run_script(const char *script, int n_sets, const char *const *sets, char **out,
                            char *error, size_t cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  size_t len = 0;
  FILE *f = open_memstream(out, &len);
  cn_notation_options opts = {0};
  opts.backend = backend;
  opts.out = f;
  opts.n_sets = n_sets;
  opts.sets = sets;
  cn_status st = cn_notation_run(g, "t.cnl", script, &opts);
  fclose(f);
  snprintf(error, cap, "%s", st == CN_OK ? "" : cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return st;
}

/* A script expected to run: its output (malloc'd; "" after a failure, reported). */
static char *run_ok(const char *script, int n_sets, const char *const *sets) {
  char *out = NULL, error[4096];
  cn_status st = run_script(script, n_sets, sets, &out, error, sizeof error);
  CHECK_MSG(st == CN_OK, "script\n%s\nfailed: %s", script, error);
  return out;
}

/* A script expected to fail with a message holding `needle`. */
static void run_fails(const char *script, int n_sets, const char *const *sets, const char *needle) {
  char *out = NULL, error[4096];
  cn_status st = run_script(script, n_sets, sets, &out, error, sizeof error);
  CHECK_MSG(st != CN_OK, "script\n%s\nran", script);
  CHECK_HAS(error, needle);
  free(out);
}

static void test_set(void) {
  const char *script = "let n = 3\nlet rate = 0.5\nlet name = \"mlp\"\nlet on = false\n"
                       "printf \"%d %g %s %b\\n\" n rate name on\n";
  char *out = run_ok(script, 0, NULL);
  CHECK_STR(out, "3 0.5 mlp false\n");
  free(out);
  out = run_ok(script, 4, (const char *[]){"n=7", "rate=2", "name=convnet", "on=true"});
  CHECK_STR(out, "7 2 convnet true\n");
  free(out);
  /* the latest --set of a name wins; the value of a string may hold '=' */
  out = run_ok(script, 3, (const char *[]){"n=1", "n=-4", "name=a=b"});
  CHECK_STR(out, "-4 0.5 a=b false\n");
  free(out);
  run_fails(script, 1, (const char *[]){"size=3"},
            "--set size=3: the script has no top-level let size = LITERAL (a number, "
            "boolean or string); the names it can set: n, rate, name, on");
  run_fails(script, 1, (const char *[]){"n=2.5"},
            "t.cnl:1:9: --set n=2.5: 'n' is an integer here, and '2.5' is not");
  run_fails(script, 1, (const char *[]){"rate=fast"},
            "t.cnl:2:12: --set rate=fast: 'rate' is a number here, and 'fast' is not");
  run_fails(script, 1, (const char *[]){"on=yes"},
            "t.cnl:4:10: --set on=yes: 'on' is a boolean (true or false) here, and 'yes' is not");
  run_fails(script, 1, (const char *[]){"n"}, "--set 'n': expected NAME=VALUE");
  /* a let of something else than a literal cannot be set */
  run_fails("let x = 1 + 2\nprint x\n", 1, (const char *[]){"x=3"}, "the names it can set: none");
}

static void test_if_expression(void) {
  char *out = run_ok("let n = 3\nlet k = if n > 2 then 10 else 20\n"
                     "let j = if n = 1 then 1 else if n = 2 then 2 else 3\n"
                     "let arch = \"convnet\"\n"
                     "let file = \"model_\" ^ arch ^ \".bin\"\n"
                     "let same = arch = \"convnet\" && arch <> \"mlp\"\n"
                     "let%op double x = x *. 2.0\nlet%op inc x = x + 1.0\n"
                     "let f = if arch = \"convnet\" then double else inc\n"
                     "let (a, b) = if k = 10 then (1, 2) else (3, 4)\n"
                     "printf \"%d %d %s %b %d %d\\n\" k j file same a b\n"
                     "printf \"%g\\n\" (sum (f [1.0; 2.0]))\n",
                     0, NULL);
  CHECK_STR(out, "10 3 model_convnet.bin true 1 2\n6\n");
  free(out);
  run_fails("let x = [1.0; 2.0]\nlet y = if x then 1 else 2\n", 0, NULL,
            "t.cnl:2:12: the condition is a tensor: an if expression chooses on the host");
  run_fails("let y = if 1 then 1 else 2\n", 0, NULL, "t.cnl:1:12: the condition is a number");
  run_fails("let y = if true then 1\nprint y\n", 0, NULL,
            "t.cnl:2:1: expected 'else' (an if expression has both branches");
  run_fails("let s = \"a\" ^ 1\n", 0, NULL,
            "t.cnl:1:13: operator ^ is not defined on a string and a number");
  run_fails("let s = \"a\"\nlet t = s < \"b\"\n", 0, NULL,
            "t.cnl:2:11: operator < is not defined on strings");
}

static void test_resume(void) {
  char script[1024];
  snprintf(script, sizeof script,
           "let resume = true\nlet p = {p = [1.0; -2.0]}\nlet loss = sum (p *. p)\n"
           "let start = restore \"%s/r.safetensors\" loss ~optimizer:\"adam\" ~resume:resume\n"
           "printf \"from epoch %%d\\n\" start\n"
           "for epoch = start to 1 do\n  backprop loss\n  adam loss ~learning_rate:0.1\n"
           "  checkpoint \"%s/r.safetensors\" loss ~epoch:(epoch + 1)\ndone\n",
           dir, dir);
  char *out = run_ok(script, 0, NULL);
  CHECK_STR(out, "from epoch 0\n");
  free(out);
  out = run_ok(script, 0, NULL);
  CHECK_STR(out, "from epoch 2\n");
  free(out);
  /* ~resume:false starts over although the file exists */
  out = run_ok(script, 1, (const char *[]){"resume=false"});
  CHECK_STR(out, "from epoch 0\n");
  free(out);
  run_fails("let p = {p = [1.0]}\nlet loss = sum p\n"
            "let s = restore \"x.safetensors\" loss ~optimizer:\"adam\" ~resume:1\n",
            0, NULL, "t.cnl:3:56: restore: ~resume expects a boolean, found a number");
}

/* The whole of a file (malloc'd), or NULL. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = malloc(1 << 20);
  size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
  if (text) text[n] = '\0';
  fclose(f);
  return text;
}

/* The files of dir named NAME.tmp... (a temporary of a save of NAME). */
static int temporaries_of(const char *name) {
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s.tmp", name);
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

static void test_plot(void) {
  char script[2048], path[256];
  snprintf(path, sizeof path, "%s/curves.svg", dir);
  snprintf(script, sizeof script,
           "let m = [[1.0; 2.0]; [3.0; 4.0]]\n"
           "let v = [| 0.5; 0.25; 0.125 |]\n"
           "let i = static_index 3\n"
           "for i = 0 to 2 do\n"
           "  plot \"%s\" ~x:(i + 1) (\"loss\", v @| i) (\"step\", 2 * i) ~matrix:(\"m\", m)\n"
           "    ~ascii:(i = 2)\n"
           "done\n",
           path);
  char *out = run_ok(script, 0, NULL);
  CHECK_STR(out, "loss\n"
                 "    0.5000 | *       \n"
                 "    0.4464 |         \n"
                 "    0.3929 |         \n"
                 "    0.3393 |         \n"
                 "    0.2857 |         \n"
                 "    0.2321 |    *    \n"
                 "    0.1786 |         \n"
                 "    0.1250 |       * \n"
                 "           +---------\n"
                 "         x   1  2  3 \n"
                 "step\n"
                 "    4.0000 |       * \n"
                 "    3.4286 |         \n"
                 "    2.8571 |         \n"
                 "    2.2857 |    *    \n"
                 "    1.7143 |         \n"
                 "    1.1429 |         \n"
                 "    0.5714 |         \n"
                 "    0.0000 | *       \n"
                 "           +---------\n"
                 "         x   1  2  3 \n"
                 "m\n"
                 "          0      1\n"
                 "   0      1      2\n"
                 "   1      3      4\n");
  free(out);
  char *svg = slurp(path);
  CHECK(svg != NULL);
  if (svg) {
    /* the points in order, series after series, each circle titled "x, y" */
    const char *expected[] = {"1, 0.5", "2, 0.25", "3, 0.125", "1, 0", "2, 2", "3, 4"};
    const char *at = svg;
    for (int k = 0; k < 6; k++) {
      at = strstr(at, "<circle ");
      at = at ? strstr(at, "<title>") : NULL;
      char want[64];
      snprintf(want, sizeof want, "<title>%s</title>", expected[k]);
      CHECK_MSG(at && strncmp(at, want, strlen(want)) == 0, "point %d: %.40s", k, at ? at : "");
      if (!at) break;
      at++;
    }
    CHECK(strstr(at ? at : svg, "<circle ") == NULL);
    CHECK_HAS(svg, ">loss</text>");
    CHECK_HAS(svg, ">step</text>");
    CHECK_HAS(svg, "<title>1, 0: 3</title>");
    CHECK_HAS(svg, "</svg>\n");
    free(svg);
  }
  CHECK_INT(temporaries_of("curves.svg"), 0);

  run_fails("plot \"a.svg\" (\"a\", 1)\n", 0, NULL, "t.cnl:1:1: plot needs ~x:VALUE");
  run_fails("plot \"a.svg\" ~x:1\n", 0, NULL,
            "t.cnl:1:18: expected a series (\"name\", value) after plot's file, found end");
  run_fails("plot \"a.svg\" ~x:1 (1, 2, 3)\n", 0, NULL,
            "t.cnl:1:20: a series is (\"name\", value)");
  run_fails("plot \"a.svg\" ~x:1 (2, 3)\n", 0, NULL,
            "t.cnl:1:20: a series' name is a string, found a number");
  run_fails("plot \"a.svg\" ~x:1 (\"a\", [1.0; 2.0])\n", 0, NULL,
            "t.cnl:1:25: a series takes one value: \"literal\" (#1) has 2 cells");
  run_fails("plot \"a.svg\" ~x:1 (\"a\", 1) ~ascii:1\n", 0, NULL,
            "t.cnl:1:35: plot's ~ascii is a boolean, found a number");
  run_fails("plot \"a.svg\" ~x:1 (\"a\", 1) ~matrix:[1.0; 2.0]\n", 0, NULL,
            "t.cnl:1:36: plot's ~matrix draws a tensor of 2 axes");
  /* A file that cannot be written, even by root: its directory is a regular file. */
  char plain[128], bad[512];
  snprintf(plain, sizeof plain, "%s/plain-file", dir);
  FILE *f = fopen(plain, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  snprintf(script, sizeof script, "plot \"%s/a.svg\" ~x:1 (\"a\", 1)\n", plain);
  snprintf(bad, sizeof bad, "t.cnl:1:6: %s/a.svg: cannot create: Not a directory", plain);
  run_fails(script, 0, NULL, bad);
  CHECK(unlink(plain) == 0);

  /* plot writes through the atomic writer (issue 27): through a symbolic link to the file it
   * names (the link stays), and never into a FIFO -- refused at once, not waited on (an alarm
   * guards: a hang fails the test) -- or over one. */
  char target[128], link_path[128], fifo[128];
  snprintf(target, sizeof target, "%s/target.svg", dir);
  snprintf(link_path, sizeof link_path, "%s/link.svg", dir);
  snprintf(fifo, sizeof fifo, "%s/fifo.svg", dir);
  f = fopen(target, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  CHECK(symlink("target.svg", link_path) == 0);
  snprintf(script, sizeof script, "plot \"%s\" ~x:1 (\"through\", 1)\n", link_path);
  free(run_ok(script, 0, NULL));
  struct stat st;
  CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
  svg = slurp(target);
  CHECK(svg != NULL && strstr(svg, ">through</text>") != NULL);
  free(svg);
  CHECK_INT(temporaries_of("link.svg"), 0);
  CHECK_INT(temporaries_of("target.svg"), 0);
  CHECK(mkfifo(fifo, 0600) == 0);
  snprintf(script, sizeof script, "plot \"%s\" ~x:1 (\"a\", 1)\n", fifo);
  snprintf(bad, sizeof bad,
           "t.cnl:1:6: %s: is a FIFO, not a regular file: a save never replaces it", fifo);
  alarm(60);
  run_fails(script, 0, NULL, bad);
  alarm(0);
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK_INT(temporaries_of("fifo.svg"), 0);
  /* A FIFO planted at the old temporary name FILE.tmp is not opened (the writer's temporaries
   * are fresh names, created exclusively): the plot is written. */
  char planted[128];
  snprintf(planted, sizeof planted, "%s/planted.svg.tmp", dir);
  CHECK(mkfifo(planted, 0600) == 0);
  snprintf(script, sizeof script, "plot \"%s/planted.svg\" ~x:1 (\"a\", 1)\n", dir);
  alarm(60);
  free(run_ok(script, 0, NULL));
  alarm(0);
  CHECK(lstat(planted, &st) == 0 && S_ISFIFO(st.st_mode));
  snprintf(path, sizeof path, "%s/planted.svg", dir);
  svg = slurp(path);
  CHECK(svg != NULL && strstr(svg, "</svg>\n") != NULL);
  free(svg);
  CHECK(unlink(fifo) == 0 && unlink(link_path) == 0 && unlink(target) == 0);
  CHECK(unlink(planted) == 0 && unlink(path) == 0);
}

/* if expressions and plot print as source that parses back to the same text. */
static void test_print_round_trip(void) {
  const char *script =
      "let f = if a = \"x\" then (if b then 1 else 2) else g (if c then 3 else 4)\n"
      "let t = (if c then (1, 2) else (3, 4), 5)\n"
      "plot (\"a\" ^ s) ~x:(i + 1) (\"loss\", loss) (name, v @| i) ~ascii:(i = 2) "
      "~matrix:(\"m\", m)\n"
      "plot \"b.svg\" ~x:1 (\"a\", 1) ~matrix:m\n";
  const char *expected =
      "let f = if a = \"x\" then (if b then 1 else 2) else g (if c then 3 else 4)\n"
      "let t = ((if c then (1, 2) else (3, 4)), 5)\n"
      "plot (\"a\" ^ s) ~x:(i + 1) (\"loss\", loss) (name, v @| i) ~ascii:(i = 2) "
      "~matrix:(\"m\", m)\n"
      "plot \"b.svg\" ~x:1 (\"a\", 1) ~matrix:m\n";
  cn_ctx *ctx = cn_ctx_create();
  cn_nt_program *prog = cn_nt_parse_program(ctx, "t.cnl", script);
  CHECK_MSG(prog != NULL, "%s", cn_ctx_error(ctx));
  cn_sbuf first = {0}, second = {0};
  if (prog) cn_nt_print_program(&first, prog);
  cn_nt_program *again = cn_nt_parse_program(ctx, "t.cnl", first.data ? first.data : "");
  CHECK_MSG(again != NULL, "%s", cn_ctx_error(ctx));
  if (again) cn_nt_print_program(&second, again);
  CHECK_STR(first.data ? first.data : "", expected);
  CHECK_STR(second.data ? second.data : "", expected);
  cn_sbuf_free(&first);
  cn_sbuf_free(&second);
  cn_ctx_destroy(ctx);
}

/* An IDX file of bytes of the given dims, cells from a small linear congruential sequence (or
 * i % 10 for labels). */
static void write_idx(const char *name, int rank, const uint32_t *dims, bool labels) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t cells = 1;
  for (int k = 0; k < rank; k++) cells *= dims[k];
  unsigned char *buf = malloc(4 + 4 * (size_t)rank + cells);
  CHECK(buf != NULL);
  if (!buf) return;
  size_t n = 0;
  buf[n++] = 0;
  buf[n++] = 0;
  buf[n++] = 8;
  buf[n++] = (unsigned char)rank;
  for (int k = 0; k < rank; k++)
    for (int b = 3; b >= 0; b--) buf[n++] = (unsigned char)(dims[k] >> (8 * b));
  uint32_t state = 12345;
  for (size_t i = 0; i < cells; i++) {
    state = state * 1103515245u + 12345u;
    buf[n++] = labels ? (unsigned char)(i % 10) : (unsigned char)(state >> 24);
  }
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(buf, 1, n, f) == n);
  if (f) fclose(f);
  free(buf);
}

/* text with every `from` replaced by `to` (malloc'd; text freed). */
static char *replace(char *text, const char *from, const char *to) {
  size_t n = 0, lf = strlen(from), lt = strlen(to);
  for (const char *p = text; (p = strstr(p, from)); p += lf) n++;
  char *out = malloc(strlen(text) + n * lt + 1), *o = out;
  if (!out) return free(text), NULL;
  for (const char *p = text, *q;; p = q + lf) {
    q = strstr(p, from);
    size_t k = q ? (size_t)(q - p) : strlen(p);
    memcpy(o, p, k);
    o += k;
    if (!q) break;
    memcpy(o, to, lt);
    o += lt;
  }
  *o = '\0';
  free(text);
  return out;
}

/* The lines of out that start with "epoch " (malloc'd). */
static char *epoch_lines(const char *out) {
  char *lines = calloc(1, strlen(out) + 1), *at = lines;
  for (const char *p = out; lines && p && *p;) {
    const char *end = strchr(p, '\n');
    size_t n = end ? (size_t)(end - p + 1) : strlen(p);
    if (strncmp(p, "epoch ", 6) == 0) {
      memcpy(at, p, n);
      at += n;
    }
    p = end ? end + 1 : NULL;
  }
  return lines;
}

/* examples/fashion_mnist.cnl on 40 training and 50 test images written here: the batch counts
 * of the real data set (600 and 20) become 2 and 1, the batch sizes (100 and 500) 20 and 50. */
static void test_example(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[512];
  snprintf(path, sizeof path, "%s/examples/fashion_mnist.cnl", root ? root : ".");
  char *script = slurp(path);
  CHECK_MSG(script != NULL, "cannot read %s", path);
  if (!script) return;
  write_idx("train-images-idx3-ubyte.gz", 3, (const uint32_t[]){40, 28, 28}, false);
  write_idx("train-labels-idx1-ubyte.gz", 1, (const uint32_t[]){40}, true);
  write_idx("t10k-images-idx3-ubyte.gz", 3, (const uint32_t[]){50, 28, 28}, false);
  write_idx("t10k-labels-idx1-ubyte.gz", 1, (const uint32_t[]){50}, true);
  script = replace(script, "/usr/share/datasets/fashion-mnist", dir);
  script = script ? replace(script, "599", "1") : NULL;
  script = script ? replace(script, "~batch_size:100", "~batch_size:20") : NULL;
  script = script ? replace(script, "~batch_size:500", "~batch_size:50") : NULL;
  script = script ? replace(script, "600", "2") : NULL;
  script = script ? replace(script, "static_index 20", "static_index 1") : NULL;
  script = script ? replace(script, "to 19 do", "to 0 do") : NULL;
  script = script ? replace(script, "/. 20)", "/. 1)") : NULL;
  CHECK(script != NULL);
  char cwd[1024];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(dir) == 0); /* the checkpoint and the SVG file are written here */
  backend = CN_BACKEND_C;
  char *conv = script ? run_ok(script, 2, (const char *[]){"arch=convnet", "epochs=2"}) : NULL;
  CHECK_HAS(conv, "epoch 2: loss ");
  CHECK_HAS(conv, "training loss\n");
  CHECK_HAS(conv, "confusion matrix (rows: true class, columns: predicted)\n"
                  "          0      1      2      3      4      5      6      7      8      9\n");
  char *svg = slurp("fashion_convnet_cnl.svg");
  CHECK_HAS(svg, ">test accuracy (%)</text>");
  CHECK(access("fashion_convnet_cnl.safetensors", F_OK) == 0);
  free(svg);
  free(conv);
  /* the MLP: two epochs at once, or one epoch then a resumed run */
  char *whole = script ? run_ok(script, 1, (const char *[]){"epochs=2"}) : NULL;
  /* a run interrupted after its first epoch: the same script, stopping there unless resumed */
  char *first = script ? run_ok(script, 2, (const char *[]){"epochs=2", "resume=true"}) : NULL;
  CHECK(first && strstr(first, "epoch ") == NULL); /* 2 epochs saved: nothing left to do */
  free(first);
  script = script ? replace(script, "let epochs = 5", "let epochs = 2") : NULL;
  script = script ? replace(script, "for epoch = start to epochs - 1 do",
                            "for epoch = start to (if resume then epochs - 1 else 0) do")
                  : NULL;
  char *one = script ? run_ok(script, 0, NULL) : NULL;
  char *rest = script ? run_ok(script, 1, (const char *[]){"resume=true"}) : NULL;
  char *a = whole ? epoch_lines(whole) : NULL, *b = NULL;
  if (one && rest) {
    b = malloc(strlen(one) + strlen(rest) + 1);
    char *b1 = epoch_lines(one), *b2 = epoch_lines(rest);
    if (b && b1 && b2) snprintf(b, strlen(one) + strlen(rest) + 1, "%s%s", b1, b2);
    free(b1);
    free(b2);
  }
  CHECK_HAS(a, "epoch 2: loss ");
  CHECK_STR(b, a);
  free(a);
  free(b);
  free(whole);
  free(one);
  free(rest);
  free(script);
  CHECK(chdir(cwd) == 0);
  backend = CN_BACKEND_INTERP;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl_options_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  test_set();
  test_if_expression();
  test_resume();
  test_plot();
  test_print_round_trip();
  test_example();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
