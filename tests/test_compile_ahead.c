/* Compile-ahead of loop bodies (issue 29, eval_stmt.c compile_ahead): the statements a loop body
 * starts with that compile a routine (backprop, sgd, adam, run), with those of the loops it starts
 * with, are elaborated at the loop's first iteration and compiled together, their compilers side
 * by side; a routine whose work over the loops' runs is below 512 times interpret_below is
 * interpreted. Two epochs of 10 steps of an MLP 2 -> 96 -> 96 -> 1 with a counter and a scaling of
 * 100 cells in the step loop and an evaluation of the accuracy after it, interpret_below 64
 * (backprop, sgd and the evaluation above the budget, the counter and the scaling below it), on a
 * fresh cache: the progress hook (delay 0) sees "compiling 3 routines" while the three compilers
 * run. With --emit (statement by statement, as before compile-ahead) it never sees three at once
 * and compiles the scaling too (unknown runs: above interpret_below), the routines have the same
 * names (the statements number them as before; the loop symbols' numbers in the code differ, as
 * the parameter inits are lowered after the mains), and both print what the interpreter backend
 * prints, digit for digit. A second script has the edges: a body starting with a routine run
 * before the loop, a loop without iterations (the prefix ends there), a routine run again later
 * in the body; its sums are checked by hand. The step loop written `~devices:1` (the plain loop,
 * as the example scripts write it) is taken the same way: its three routines compile together. */
#define _XOPEN_SOURCE 700 /* mkdtemp, setenv */
#include "check.h"

#include "cannl.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const script =
    "let (moons, moons_classes) = half_moons ~n:200 ~noise:0.1 ~seed:1 ~batch_size:10\n"
    "let batch_n = static_index 20\n"
    "let x = moons @| batch_n\n"
    "let y = moons_classes @| batch_n\n"
    "let%op mlp x =\n"
    "  let h1 = relu ({w1} * x + {b1; o = [96]}) in\n"
    "  let h2 = relu ({w2} * h1 + {b2; o = [96]}) in\n"
    "  {w3} * h2\n"
    "let loss = (relu (1 - y *. mlp x) ++ \"...|... => 0\") /. 10\n"
    "let%cd count = {steps} =+ 1\n"
    "let%op v = range 100\n"
    "let%cd scale = {half} =: v *. 0.5\n"
    "let correct = ((0 < mlp moons) = (0 < moons_classes)) ++ \"...|... => 0\"\n"
    "let%cd evaluate = {correct_sum} =+ correct\n"
    "for epoch = 0 to 1 do\n"
    "  for batch_n = 0 to 9 do\n"
    "    backprop loss\n"
    "    sgd loss ~learning_rate:0.1\n"
    "    run count\n"
    "    run scale\n"
    "  done\n"
    "  run evaluate\n"
    "done\n"
    "print correct_sum\n"
    "print steps\n"
    "print (half ++ \"...|... => 0\")\n";

typedef struct {
  char text[8192];  /* the JSON lines of the values printed */
  char files[1024]; /* the routines of the cache's .c files, sorted, one per line */
  uint64_t compiler_runs;
  bool three_at_once, lines; /* a progress line said "compiling 3 routines"; any line came */
} outcome;

static void record(void *user, const char *line) {
  outcome *o = user;
  if (!line) return;
  o->lines = true;
  if (strncmp(line, "compiling 3 routines", 20) == 0) o->three_at_once = true;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The routines of the .c files of dir (cnl_2 of cnl_2-<hash>.c), sorted, one per line. */
static void list_sources(const char *dir, char *out, size_t size) {
  char *names[64];
  int n = 0;
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len > 2 && strcmp(e->d_name + len - 2, ".c") == 0 && n < 64)
      names[n++] = strndup(e->d_name, strcspn(e->d_name, "-"));
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof names[0], by_name);
  out[0] = '\0';
  for (int k = 0; k < n; k++) {
    snprintf(out + strlen(out), size - strlen(out), "%s\n", names[k]);
    free(names[k]);
  }
}

/* A loop body that starts with a routine compiled (here interpreted) before the loop, then a loop
 * without iterations (compile-ahead stops there), a loop running a second routine and the first
 * routine again: run as written on both backends. */
static const char *const edges = "let%op v = range 300\n"
                                 "let%cd grow = {acc} =+ v\n"
                                 "let%cd add = {total} =+ acc\n"
                                 "run grow\n"
                                 "for i = 0 to 9 do\n"
                                 "  run grow\n"
                                 "  for j = 1 to 0 do\n"
                                 "    run add\n"
                                 "  done\n"
                                 "  for k = 0 to 2 do\n"
                                 "    run add\n"
                                 "  done\n"
                                 "  run grow\n"
                                 "done\n"
                                 "print (acc ++ \"...|... => 0\")\n"
                                 "print (total ++ \"...|... => 0\")\n";

static outcome run_script(const char *text, cn_backend_kind backend, bool emit) {
  outcome o = {.compiler_runs = 0};
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/cannl-test-ahead-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  CHECK(g != NULL);
  if (!g) return o;
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  /* the work counted is the scheduled routines' (the suite also runs with CANNL_SCHEDULE=none) */
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "all"), CN_OK);
  /* a budget of 64 * 512 cell updates over the 20 runs: the counter is interpreted */
  CHECK_INT(cn_ctx_set_option(ctx, "interpret_below", "64"), CN_OK);
  cn_ctx_set_progress(ctx, record, &o);
  FILE *out = tmpfile();
  CHECK(out != NULL);
  if (!out) return o;
  cn_notation_options opts = {.backend = backend, .json = true, .out = out, .emit_loops = emit};
  CHECK_MSG(cn_notation_run(g, "ahead.cnl", text, &opts) == CN_OK, "%s", cn_ctx_error(ctx));
  /* the values' lines only (--emit writes the loops between them) */
  rewind(out);
  char line[4096];
  o.text[0] = '\0';
  while (fgets(line, sizeof line, out))
    if (strncmp(line, "{\"label\"", 8) == 0)
      snprintf(o.text + strlen(o.text), sizeof o.text - strlen(o.text), "%s", line);
  fclose(out);
  o.compiler_runs = cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS);
  cn_ctx_destroy(ctx);
  list_sources(dir, o.files, sizeof o.files);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  return o;
}

int main(void) {
  setenv("CANNL_PROGRESS_AFTER_MS", "0", 1);
  outcome interp = run_script(script, CN_BACKEND_INTERP, false);
  CHECK_INT(interp.compiler_runs, 0);
  CHECK_HAS(interp.text, "\"values\": [20]");   /* the counter ran once per step */
  CHECK_HAS(interp.text, "\"values\": [2475]"); /* the sum of i / 2, i < 100 */

  outcome ahead = run_script(script, CN_BACKEND_C, false);
  /* backprop, sgd and the evaluation together; the counter, the scaling, the inits and the prints
   * interpreted */
  CHECK_INT(ahead.compiler_runs, 3);
  CHECK(ahead.lines);
  CHECK(ahead.three_at_once);
  CHECK_STR(ahead.text, interp.text);

  outcome one_by_one = run_script(script, CN_BACKEND_C, true);
  /* and the scaling: 200 cell updates (the range computed in it) are above interpret_below, but
   * its 20 runs (4000) below the budget compile-ahead counts. (Small, so that its interpreted
   * runs stay far below the 30 ms after which a tiered routine compiles, even under ASan on a
   * loaded machine: with 500 cells an ASan run compiled it there once.) */
  CHECK_INT(one_by_one.compiler_runs, 4);
  CHECK(one_by_one.lines);
  CHECK(!one_by_one.three_at_once);
  CHECK_STR(one_by_one.text, interp.text);
  /* cnl_1 the parameters' init, cnl_2 backprop, cnl_3 sgd, cnl_4 the counter, cnl_5 the scaling,
   * cnl_6 the evaluation, cnl_7 to cnl_9 the prints: the same numbers either way */
  CHECK_STR(ahead.files, "cnl_2\ncnl_3\ncnl_6\n");
  CHECK_STR(one_by_one.files, "cnl_2\ncnl_3\ncnl_5\ncnl_6\n");

  /* ~devices:1 is the plain loop: the same prefix, not a data-parallel loop ending it */
  char with_devices[2048];
  const char *loop = strstr(script, "to 9 do");
  CHECK(loop != NULL);
  snprintf(with_devices, sizeof with_devices, "%.*sto 9 ~devices:1 do%s", (int)(loop - script),
           script, loop + strlen("to 9 do"));
  outcome devices = run_script(with_devices, CN_BACKEND_C, false);
  CHECK_INT(devices.compiler_runs, 3);
  CHECK(devices.three_at_once);
  CHECK_STR(devices.files, ahead.files);
  CHECK_STR(devices.text, interp.text);

  outcome edges_interp = run_script(edges, CN_BACKEND_INTERP, false);
  outcome edges_c = run_script(edges, CN_BACKEND_C, false);
  /* grow ran 1 + 2 * 10 times: 21 * (0 + 1 + ... + 299) */
  CHECK_HAS(edges_interp.text, "\"values\": [941850]");
  /* add ran 3 times at step i, each adding acc after 2 * i + 2 runs of grow: 44850 * 3 * the sum
   * over i < 10 of (2 * i + 2) = 44850 * 3 * 110 */
  CHECK_HAS(edges_interp.text, "\"values\": [14800500]");
  CHECK_STR(edges_c.text, edges_interp.text);
  CHECK_DONE();
}
