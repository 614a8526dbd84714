/* Tiered routines of scripts (issue 29, cn_routine_compile_tiered): with the C backend, a routine
 * of less work than the option interpret_below runs on the interpreter, and is compiled once its
 * interpreted runs have taken about what compiling costs; a statement outside loops (run once)
 * is interpreted up to 512 times that work. The interpreter computes the generated code's bits
 * (it evaluates single precision in float, rounding after each op as C does), so a dot product
 * in single precision prints the same 17 digits on both (it computed the product and sum in
 * double once: -675.3765869140625 instead of C's -675.37646484375 on 3000 cells). A script with a
 * 4000-cell update run 3000 times, a scalar counter run as often, a `%cd` scaling run once, and a
 * one-off print of a dot product of 3000 cells (6000 cell updates with its range): by default only
 * the update and the scaling (8000 cell updates each: the range is computed in them) are compiled,
 * in a fresh cache; with interpret_below 0 every routine is, on the interpreter backend none is,
 * and all three print the same text, digit for digit. A second default run finds the two objects in
 * the cache and takes them (no compile). The option's values are checked. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "check.h"

#include "cannl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const script =
    "let%op v = range 4000\n"
    "let%cd grow = {acc} =+ v\n"
    "let%cd count = {steps} =+ 1\n"
    "let%cd scale = {half} =: v *. 0.5 + 0.25\n"
    "for i = 0 to 2999 do\n"
    "  run grow\n"
    "  run count\n"
    "done\n"
    "run scale\n"
    "print (acc ++ \"...|... => 0\")\n"
    "print steps\n"
    "print (half ++ \"...|... => 0\")\n"
    "let%op u = range 3000\n"
    "print ((u *. 0.001 - 1.5) +* \"i; i => 0\" (0.7 - u *. 0.0003))\n";

static char cache_dir[64];

typedef struct {
  char text[4096];
  uint64_t compiler_runs, cache_hits;
} outcome;

/* Runs the script on a backend with interpret_below (NULL: the default); its output in text. */
static outcome run_script(cn_backend_kind backend, const char *below) {
  outcome o = {{0}, 0, 0};
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  CHECK(g != NULL);
  if (!g) return o;
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  if (below) CHECK_INT(cn_ctx_set_option(ctx, "interpret_below", below), CN_OK);
  FILE *out = tmpfile();
  CHECK(out != NULL);
  if (!out) return o;
  cn_notation_options opts = {.backend = backend, .json = true, .out = out};
  CHECK_MSG(cn_notation_run(g, "tiered.cnl", script, &opts) == CN_OK, "%s", cn_ctx_error(ctx));
  rewind(out);
  size_t n = fread(o.text, 1, sizeof o.text - 1, out);
  o.text[n] = '\0';
  fclose(out);
  o.compiler_runs = cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS);
  o.cache_hits = cn_ctx_stat(ctx, CN_STAT_CACHE_HITS);
  cn_ctx_destroy(ctx);
  return o;
}

static void empty_cache(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -f '%s'/*", cache_dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/cannl-test-tiered-XXXXXX");
  CHECK(mkdtemp(cache_dir) != NULL);

  outcome interp = run_script(CN_BACKEND_INTERP, NULL);
  CHECK_INT(interp.compiler_runs, 0);
  CHECK_HAS(interp.text, "\"values\": [3000]");
  /* the sum of i / 2 + 1/4 over i < 4000, by hand */
  CHECK_HAS(interp.text, "\"values\": [4000000]");
  /* the dot product rounded in float after every multiply and add, as generated C computes it */
  CHECK_HAS(interp.text, "\"values\": [-675.37646484375]");

  outcome compiled = run_script(CN_BACKEND_C, "0"); /* every routine compiled */
  CHECK(compiled.compiler_runs >= 4);
  CHECK_STR(compiled.text, interp.text);

  empty_cache();
  outcome tiered = run_script(CN_BACKEND_C, NULL);
  /* the update and the scaling; not the counter (its runs take far less than 30 ms), nor the
   * print (run once: interpreted up to 512 times interpret_below) */
  CHECK_INT(tiered.compiler_runs, 2);
  CHECK_STR(tiered.text, interp.text);
  /* the next run takes the update's object from the cache at once */
  outcome again = run_script(CN_BACKEND_C, NULL);
  CHECK_INT(again.compiler_runs, 0);
  CHECK_INT(again.cache_hits, 2);
  CHECK_STR(again.text, interp.text);

  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "interpret_below", "-1"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "option interpret_below: '-1' is not a count in [0, 2^62]");
  CHECK_STR(cn_ctx_option(ctx, "interpret_below"),
            getenv("CANNL_INTERPRET_BELOW") ? getenv("CANNL_INTERPRET_BELOW") : "4096");
  cn_ctx_destroy(ctx);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
