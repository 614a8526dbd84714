/* Autotuning of GEMM plans (issue 17, src/runtime/tune.c) through the public API, in a private
 * cache directory: a 256^3 matmul (2^24 points, the least that is tuned) compiled with tuning on
 * times its candidates once (CN_STAT_TUNE_RUNS) and writes a record; a second compile, in a new
 * context, takes the record (CN_STAT_TUNE_HITS) without timing anything; a corrupted record is
 * ignored with a warning on the log and the nest is tuned again; tuning off keeps the heuristic
 * plan (tile 0x0); and every plan gives the same bits (tuning never changes a result). The
 * option's values are checked. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "check.h"
#include "ir/ir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 256

static char cache_dir[64];
static int warnings;

static void count_warnings(void *user, cn_log_level level, const char *message) {
  (void)user;
  if (level == CN_LOG_WARN && strstr(message, "corrupted tune record")) warnings++;
}

/* The tune record's path in the cache directory (the only tune-*.txt), or "" when none. */
static void record_path(char *out, size_t size) {
  out[0] = '\0';
  DIR *dir = opendir(cache_dir);
  CHECK(dir != NULL);
  if (!dir) return;
  for (struct dirent *e; (e = readdir(dir));)
    if (strncmp(e->d_name, "tune-", 5) == 0 && strstr(e->d_name, ".txt"))
      snprintf(out, size, "%s/%s", cache_dir, e->d_name);
  closedir(dir);
}

typedef struct {
  uint64_t tune_runs, tune_hits;
  char loops[4096];
} outcome;

/* Compiles and runs c = a b (values from a fixed sequence) with the tune mode; c's cells into out.
 */
static outcome compile_and_run(const char *mode, float *out) {
  outcome o = {0};
  cn_ctx *ctx = cn_ctx_create();
  cn_ctx_set_log(ctx, count_warnings, NULL, CN_LOG_WARN);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "tune", mode), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "threads", "1"), CN_OK);
  /* the suite also runs with CANNL_SCHEDULE=none: plans are what is tuned */
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "all"), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  const int64_t dims[2] = {N, N};
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, dims, NULL}};
  double *values = malloc(sizeof(double) * N * N);
  CHECK(values != NULL);
  if (!values) return o;
  for (int i = 0; i < N * N; i++) values[i] = (double)(((int64_t)i * 7919) % 1000) / 997.0 - 0.5;
  cn_tensor *a = cn_tensor_data(g, "a", &d, values, N * N);
  for (int i = 0; i < N * N; i++) values[i] = (double)(((int64_t)i * 104729) % 1000) / 991.0 - 0.5;
  cn_tensor *b = cn_tensor_data(g, "b", &d, values, N * N);
  free(values);
  cn_tensor *c = cn_tensor_einsum2(g, "ij;jk=>ik", a, b);
  const cn_asgn *code = c ? cn_graph_forward(g, c) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_C, "tuned") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (r) {
    CHECK_INT(cn_routine_run(r), CN_OK);
    memcpy(out, cn_node_buffer(cn_tensor_value(c), false), sizeof(float) * N * N);
    snprintf(o.loops, sizeof o.loops, "%s", cn_routine_loops(r));
  }
  o.tune_runs = cn_ctx_stat(ctx, CN_STAT_TUNE_RUNS);
  o.tune_hits = cn_ctx_stat(ctx, CN_STAT_TUNE_HITS);
  cn_ctx_destroy(ctx);
  return o;
}

int main(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/cannl-test-tune-XXXXXX");
  CHECK(mkdtemp(cache_dir) != NULL);
  float *off = malloc(sizeof(float) * N * N), *got = malloc(sizeof(float) * N * N);
  CHECK(off && got);
  if (!off || !got) return 1;
  size_t bytes = sizeof(float) * N * N;

  /* off: the heuristic plan, nothing timed, no record */
  outcome o = compile_and_run("off", off);
  CHECK_INT(o.tune_runs, 0);
  CHECK_INT(o.tune_hits, 0);
  CHECK_HAS(o.loops, "gemm M=(i) N=(k) K=(j) tile 0x0 blocks");
  char record[512];
  record_path(record, sizeof record);
  CHECK_STR(record, "");

  /* quick: tuned once, recorded; the same bits as the heuristic plan */
  o = compile_and_run("quick", got);
  CHECK_INT(o.tune_runs, 1);
  CHECK_INT(o.tune_hits, 0);
  CHECK(memcmp(got, off, bytes) == 0);
  record_path(record, sizeof record);
  CHECK(record[0] != '\0');
  char tuned_line[256] = "";
  const char *gemm = strstr(o.loops, "gemm ");
  if (gemm) snprintf(tuned_line, sizeof tuned_line, "%.*s", (int)strcspn(gemm, "\n"), gemm);

  /* a second compile takes the record: no timing, the same plan and bits */
  memset(got, 0, bytes);
  o = compile_and_run("quick", got);
  CHECK_INT(o.tune_runs, 0);
  CHECK_INT(o.tune_hits, 1);
  CHECK(memcmp(got, off, bytes) == 0);
  CHECK_HAS(o.loops, tuned_line);

  /* a corrupted record: a warning, tuned again, recorded again */
  FILE *f = fopen(record, "r+b");
  CHECK(f != NULL);
  if (f) {
    CHECK(fseek(f, 40, SEEK_SET) == 0);
    CHECK(fputc('#', f) != EOF);
    fclose(f);
  }
  warnings = 0;
  o = compile_and_run("quick", got);
  CHECK_INT(warnings, 1);
  CHECK_INT(o.tune_runs, 1);
  CHECK_INT(o.tune_hits, 0);
  CHECK(memcmp(got, off, bytes) == 0);
  o = compile_and_run("quick", got);
  CHECK_INT(o.tune_hits, 1);

  /* the option */
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "fast"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "option tune: unknown value 'fast' (known: off, quick, full)");
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "full"), CN_OK);
  CHECK_STR(cn_ctx_option(ctx, "tune"), "full");
  cn_ctx_destroy(ctx);

  free(off);
  free(got);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
