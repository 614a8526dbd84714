/* Autotuning of GEMM plans (issue 17, src/runtime/tune.c) through the public API, in a private
 * cache directory: a 256^3 matmul (2^24 points, the least that is tuned) compiled with tuning on
 * times its candidates once (CN_STAT_TUNE_RUNS) and writes a record; a second compile, in a new
 * context, takes the record (CN_STAT_TUNE_HITS) without timing anything; a corrupted record is
 * ignored with a warning on the log and the nest is tuned again; tuning off, and the default
 * "cached" before any tuning, keep the heuristic plan (tile 0x0), "cached" takes a record once
 * there is one; another model with two nests of the same class takes the record for both, and in
 * an empty cache tunes the first and reuses it for the second (issue 29: the same class tunes
 * once); and every plan gives the same bits (tuning never changes a result). The option's values
 * are checked. */
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
static char last_warning[1024];

static void count_warnings(void *user, cn_log_level level, const char *message) {
  (void)user;
  if (level == CN_LOG_WARN && strstr(message, "corrupted tune record")) {
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", message);
  }
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

/* FNV-1a (64 bits) of n bytes: the record's checksum, computed here from its definition. */
static uint64_t fnv1a64(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* Rewrites the record at path as a crafted one with a valid checksum: its key line's number
 * replaced by key_len (NULL: kept; "" for the length of the whole crafted file) and its value by
 * value (NULL: kept). The record is "cannl tune record 1\nkey N\n" KEY "\nvalue V\nsum H\n". */
static void craft_record(const char *path, const char *key_len, const char *value) {
  static char text[65536], out[65536];
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  const char *header = "cannl tune record 1\nkey ";
  CHECK(strncmp(text, header, strlen(header)) == 0);
  char *n_at = text + strlen(header), *key_at = strchr(n_at, '\n') + 1;
  size_t n = (size_t)strtoull(n_at, NULL, 10);
  char *value_at = key_at + n + strlen("\nvalue ");
  CHECK(strncmp(key_at + n, "\nvalue ", 7) == 0);
  size_t value_len = strcspn(value_at, "\n");
  char n_text[32], length[32];
  snprintf(n_text, sizeof n_text, "%zu", n);
  /* "": the N for which the file is N bytes long (N's digits count in the length) */
  for (int digits = 1; key_len && !key_len[0] && digits < 8; digits++) {
    size_t total = strlen(header) + (size_t)digits + 1 + n + strlen("\nvalue ") +
                   (value ? strlen(value) : value_len) + 1 + strlen("sum ") + 16 + 1;
    snprintf(length, sizeof length, "%zu", total);
    if (strlen(length) == (size_t)digits) break;
  }
  int body =
      snprintf(out, sizeof out, "%s%s\n%.*s\nvalue %.*s\n", header,
               !key_len     ? n_text
               : key_len[0] ? key_len
                            : length,
               (int)n, key_at, (int)(value ? strlen(value) : value_len), value ? value : value_at);
  CHECK(body > 0 && (size_t)body < sizeof out - 32);
  snprintf(out + body, sizeof out - (size_t)body, "sum %016llx\n",
           (unsigned long long)fnv1a64(out, (size_t)body));
  if (key_len && !key_len[0]) CHECK_INT(strlen(out), strtoull(length, NULL, 10));
  f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(out, 1, strlen(out), f) == strlen(out));
  fclose(f);
}

typedef struct {
  uint64_t tune_runs, tune_hits;
  char loops[4096];
} outcome;

/* Compiles and runs c = a b (values from a fixed sequence) with the tune mode; c's cells into out.
 * With `model` true the product is part of another model: c = a b + a b, two nests of the same
 * class computed apart and added. */
static outcome compile_model(const char *mode, bool model, float *out) {
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
  if (model && c) { /* c + (a b): one more nest of c's class, into its own tensor */
    cn_tensor *again = cn_tensor_einsum2(g, "ij;jk=>ik", a, b);
    cn_tensor *terms[2] = {c, again};
    c = again ? cn_tensor_apply(g, CN_OP_ADD, 2, terms) : NULL;
  }
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

static outcome compile_and_run(const char *mode, float *out) {
  return compile_model(mode, false, out);
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
  CHECK_HAS(o.loops, "gemm M=(i) N=(k) K=(j) from zero tile 0x0 blocks");
  char record[512];
  record_path(record, sizeof record);
  CHECK_STR(record, "");
  /* cached (the default), before any tuning: the heuristic plan too, nothing timed */
  o = compile_and_run("cached", got);
  CHECK_INT(o.tune_runs, 0);
  CHECK_INT(o.tune_hits, 0);
  CHECK_HAS(o.loops, "gemm M=(i) N=(k) K=(j) from zero tile 0x0 blocks");
  CHECK(memcmp(got, off, bytes) == 0);
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
  /* and so does the default mode, which times nothing itself */
  o = compile_and_run("cached", got);
  CHECK_INT(o.tune_runs, 0);
  CHECK_INT(o.tune_hits, 1);
  CHECK_HAS(o.loops, tuned_line);

  /* Another model with two products of the class: both take the record (keyed by the class, not
   * by the nest's text or model), nothing is timed; its result is computed independently here
   * from the heuristic plan's product (exact doubling). */
  float *twice = malloc(bytes);
  CHECK(twice != NULL);
  if (twice) {
    o = compile_model("quick", true, twice);
    CHECK_INT(o.tune_runs, 0);
    CHECK_INT(o.tune_hits, 2);
    bool doubled = true;
    for (int i = 0; i < N * N; i++) doubled = doubled && twice[i] == 2 * off[i];
    CHECK(doubled);
    /* In a fresh cache the first of the two tunes and the second takes its record. */
    char fresh_dir[64];
    snprintf(fresh_dir, sizeof fresh_dir, "%s", cache_dir);
    snprintf(cache_dir, sizeof cache_dir, "/tmp/cannl-test-tune2-XXXXXX");
    CHECK(mkdtemp(cache_dir) != NULL);
    o = compile_model("quick", true, twice);
    CHECK_INT(o.tune_runs, 1);
    CHECK_INT(o.tune_hits, 1);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    CHECK(system(cmd) == 0);
    snprintf(cache_dir, sizeof cache_dir, "%s", fresh_dir);
    free(twice);
  }

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

  /* Crafted records with a valid checksum (issue 27: the checksum is no protection, numbers are
   * parsed checked). A value out of range -- kc 10^20, which sscanf's SCNd64 saturated to
   * 2^63 - 1, or mr 2^32 + 8, which %d wrapped to 8 -- is no plan: tuned again, recorded again,
   * silently (a value that is not a plan always was). The record as written is taken. */
  const char *bad_values[] = {"8 3 99999999999999999999", "4294967304 3 256", "8 3 256 7",
                              "8 -3 256", "8 0 256"};
  for (size_t k = 0; k < sizeof bad_values / sizeof *bad_values; k++) {
    craft_record(record, NULL, bad_values[k]);
    warnings = 0;
    o = compile_and_run("quick", got);
    CHECK_MSG(o.tune_runs == 1 && o.tune_hits == 0, "value '%s': %d runs, %d hits", bad_values[k],
              (int)o.tune_runs, (int)o.tune_hits);
    CHECK_INT(warnings, 0);
    CHECK(memcmp(got, off, bytes) == 0);
  }
  craft_record(record, NULL, NULL); /* the valid record, rewritten here: still a hit */
  o = compile_and_run("quick", got);
  CHECK_INT(o.tune_hits, 1);
  CHECK_INT(o.tune_runs, 0);
  /* A key length out of range (sscanf's %zu saturated it: "truncated key"), and one equal to the
   * file's length (the old bound check wrapped there and read past the record): a corrupted
   * record, with a warning, tuned again. */
  const char *bad_lengths[] = {"99999999999999999999", "", "+12", " 12"};
  const char *problems[] = {"(bad key line)", "(truncated key)", "(bad key line)",
                            "(bad key line)"};
  for (size_t k = 0; k < sizeof bad_lengths / sizeof *bad_lengths; k++) {
    craft_record(record, bad_lengths[k], NULL);
    warnings = 0;
    last_warning[0] = '\0';
    o = compile_and_run("quick", got);
    CHECK_INT(warnings, 1);
    CHECK_MSG(strstr(last_warning, problems[k]) != NULL, "key length '%s': %s", bad_lengths[k],
              last_warning);
    CHECK_INT(o.tune_runs, 1);
    CHECK_INT(o.tune_hits, 0);
    CHECK(memcmp(got, off, bytes) == 0);
  }

  /* the option */
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "fast"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx),
            "option tune: unknown value 'fast' (known: off, cached, quick, full)");
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
