/* Routines compiled in pieces (issue 29, src/backend/cgen.c "Routines in pieces"): a routine of
 * 300 distinct kernels (x[(s+1) % 3][i] = ((x[s % 3][i] * a_s + b_s) * c_s + d_s), constants
 * distinct per statement, so no two statements share a kernel) has more kernel text than one
 * piece takes: its source defines CN_PIECES, compiles as one process per piece plus a link
 * (CN_STAT_COMPILER_RUNS), and computes what the interpreter computes, bit for bit. The pieces
 * compiled at the same time and one after the other give byte-identical shared objects, and the
 * file without CN_PIECE is still one translation unit that compiles with -Wall -Werror. A routine
 * of 40 such kernels (8 to 64 KB) is in two pieces, one of 4 in one. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "backend/backend.h"
#include "backend/cgen.h"
#include "check.h"
#include "ir/ir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATEMENTS 300
#define CELLS      64

static char cache_dir[64];

/* The shared object of the cache directory (the only *.so), read whole; NULL when none. */
static char *read_object(size_t *size) {
  char path[512] = "";
  DIR *dir = opendir(cache_dir);
  CHECK(dir != NULL);
  if (!dir) return NULL;
  for (struct dirent *e; (e = readdir(dir));) {
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".so") == 0)
      snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
  }
  closedir(dir);
  FILE *f = path[0] ? fopen(path, "rb") : NULL;
  CHECK(f != NULL);
  if (!f) return NULL;
  char *data = malloc(1 << 22);
  *size = data ? fread(data, 1, 1 << 22, f) : 0;
  fclose(f);
  return data;
}

/* Removes the cache directory's files (the next compile misses). */
static void empty_cache(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -f '%s'/*", cache_dir);
  CHECK(system(cmd) == 0);
}

static double constant(int s, int k) {
  return 1.0 + (double)(s * 4 + k) / 4096.0;
}

static cn_ll_proc *pieces_proc(cn_ctx *ctx, const cn_ll_param *params, int statements) {
  cn_symbol i = cn_symbol_create(ctx, "i", CELLS);
  cn_ll_stmt *items[STATEMENTS];
  for (int s = 0; s < statements; s++) {
    int dst = (s + 1) % 3, src = s % 3;
    cn_ll_expr *e = cn_lb_get(ctx, src, CN_PREC_DOUBLE, cn_lb_indices(ctx, 1, cn_index_iter(i)));
    for (int k = 0; k < 4; k++)
      e = cn_lb_op(ctx, k % 2 ? CN_OP_ADD : CN_OP_MUL, CN_PREC_DOUBLE, e,
                   cn_lb_num(ctx, CN_PREC_DOUBLE, constant(s, k)), NULL);
    items[s] = cn_lb_loop(ctx, i, 0, CELLS,
                          cn_lb_set(ctx, dst, cn_lb_indices(ctx, 1, cn_index_iter(i)), e));
  }
  return cn_lb_proc(ctx, "pieces", cn_lb_seq_array(ctx, statements, items), 3, params, 0, NULL);
}

/* Runs proc on a backend from the same start; x's cells into out. */
static void run_on(cn_ctx *ctx, const cn_backend *backend, const cn_ll_proc *proc, cn_node **x,
                   double out[3][CELLS]) {
  double start[CELLS], zeros[CELLS] = {0};
  for (int c = 0; c < CELLS; c++) start[c] = (double)(c % 7) / 8.0 - 0.25;
  CHECK_INT(cn_node_set_values(x[0], false, start, CELLS), CN_OK);
  for (int b = 1; b < 3; b++) CHECK_INT(cn_node_set_values(x[b], false, zeros, CELLS), CN_OK);
  void *compiled = NULL, *buffers[3];
  CHECK_MSG(backend->compile(ctx, proc, &compiled, NULL) == CN_OK, "%s", cn_ctx_error(ctx));
  for (int b = 0; b < 3; b++) buffers[b] = cn_node_buffer(x[b], false);
  if (compiled) CHECK_INT(backend->run(ctx, compiled, buffers, NULL), CN_OK);
  if (compiled) backend->release(compiled);
  for (int b = 0; b < 3; b++) CHECK_INT(cn_node_get_values(x[b], false, out[b], CELLS), CN_OK);
}

int main(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/cannl-test-pieces-XXXXXX");
  CHECK(mkdtemp(cache_dir) != NULL);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  /* -O1: the same layout as the default flags, in a fraction of the time */
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", "-O1 -shared -fPIC -std=c11"), CN_OK);
  const int64_t dims[1] = {CELLS};
  cn_node *x[3];
  cn_ll_param params[3];
  for (int b = 0; b < 3; b++) {
    char label[8];
    snprintf(label, sizeof label, "x%d", b);
    x[b] = cn_node_create(ctx, label, CN_PREC_DOUBLE, 1, dims);
    CHECK(x[b] != NULL);
    params[b] = (cn_ll_param){x[b], false};
  }
  cn_ll_proc *proc = pieces_proc(ctx, params, STATEMENTS);
  CHECK(proc != NULL);
  if (!proc) return 1;

  /* a routine of 8 to 64 KB of kernels (a few hundred ms of gcc) is in two pieces, so that alone
   * it does not keep one core busy while the others wait; a small one stays one unit */
  cn_sbuf mid = {0}, small = {0};
  CHECK_INT(cn_cgen_source(ctx, pieces_proc(ctx, params, 40), &mid), CN_OK);
  CHECK_INT(cn_cgen_source(ctx, pieces_proc(ctx, params, 4), &small), CN_OK);
  CHECK_MSG(mid.len > 8192 && mid.len < 65536, "%zu bytes", mid.len);
  CHECK_INT(cn_cgen_pieces(mid.data ? mid.data : ""), 2);
  CHECK_INT(cn_cgen_pieces(small.data ? small.data : ""), 1);
  cn_sbuf_free(&mid);
  cn_sbuf_free(&small);

  cn_sbuf text = {0};
  CHECK_INT(cn_cgen_source(ctx, proc, &text), CN_OK);
  int pieces = cn_cgen_pieces(text.data ? text.data : "");
  CHECK_MSG(pieces >= 2 && pieces <= CN_CGEN_MAX_PIECES, "%d pieces of %zu bytes", pieces,
            text.len);
  CHECK_HAS(text.data, "#if !defined(CN_PIECE) || CN_PIECE == 1\n");
  CHECK_HAS(text.data, "CN_KERNEL void cn_kernel_299(double *restrict ");

  /* the interpreter, then the pieces compiled at the same time */
  double want[3][CELLS], got[3][CELLS];
  run_on(ctx, &cn_backend_interp, proc, x, want);
  uint64_t runs = cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS);
  run_on(ctx, &cn_backend_c, proc, x, got);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS) - runs, (uint64_t)pieces + 1);
  CHECK(memcmp(got, want, sizeof got) == 0);
  size_t parallel_size = 0, serial_size = 0;
  char *parallel = read_object(&parallel_size);

  /* one after the other: the same object, byte for byte */
  empty_cache();
  cn_cc_set_serial_pieces(true);
  memset(got, 0, sizeof got);
  run_on(ctx, &cn_backend_c, proc, x, got);
  cn_cc_set_serial_pieces(false);
  CHECK(memcmp(got, want, sizeof got) == 0);
  char *serial = read_object(&serial_size);
  CHECK(parallel && serial && parallel_size > 0);
  CHECK_INT(serial_size, parallel_size);
  CHECK(parallel && serial && serial_size == parallel_size &&
        memcmp(parallel, serial, parallel_size) == 0);
  free(parallel);
  free(serial);

  /* the file is one translation unit as well */
  char path[128], cmd[512];
  snprintf(path, sizeof path, "%s/whole.c", cache_dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text.data ? text.data : "", f);
    fclose(f);
  }
  snprintf(cmd, sizeof cmd, "cc -std=c11 -O0 -Wall -Werror -fPIC -c -o '%s/whole.o' '%s'",
           cache_dir, path);
  CHECK(system(cmd) == 0);

  cn_sbuf_free(&text);
  cn_ctx_destroy(ctx);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
