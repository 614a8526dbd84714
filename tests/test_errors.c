/* Bad input through the public API: every mistake returns a status and a message naming what is
 * wrong, nothing aborts, nothing leaks (the suite also runs under ASan and valgrind). Then an
 * allocation-failure sweep: the n-th allocation of a whole pipeline is made to fail, for every n,
 * and each run must end in CN_ERR_NOMEM or success, never in a crash. */
#include "check.h"

#include "cannl.h"
#include "core/core.h"

#include <stdlib.h>

static void test_projection_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, d22[2] = {2, 2};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, d23);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, d32);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, d22);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_index ik[2] = {cn_index_iter(i), cn_index_iter(k)},
           ij[2] = {cn_index_iter(i), cn_index_iter(j)},
           jk[2] = {cn_index_iter(j), cn_index_iter(k)};
  cn_buffer ab[2] = {{a, false}, {b, false}};

  /* Size mismatch: the record says b is [3, 3] but b is [3, 2]. */
  int64_t d33[2] = {3, 3};
  cn_proj *wrong_dims = cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){2, 3, 2},
                                       (cn_proj_tensor){2, d22, ik}, 2,
                                       (cn_proj_tensor[]){{2, d23, ij}, {2, d33, jk}});
  CHECK(wrong_dims != NULL);
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, ab, wrong_dims) == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "'b'");
  CHECK_HAS(cn_ctx_error(ctx), "[3, 2]");

  /* Index out of range: k iterates 0..2 but addresses an axis of size 2. */
  cn_proj *too_far = cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){2, 3, 3},
                                    (cn_proj_tensor){2, d22, ik}, 2,
                                    (cn_proj_tensor[]){{2, d23, ij}, {2, d32, jk}});
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, ab, too_far) == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "'c'");
  CHECK_HAS(cn_ctx_error(ctx), "size 2");

  /* Wrong arity: a binary op with a record of one RHS. */
  cn_proj *one_rhs =
      cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3}, (cn_proj_tensor){2, d23, ij},
                     1, (cn_proj_tensor[]){{2, d23, ij}});
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ADD, a, CN_OP_MUL, ab, one_rhs) == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_INVALID);

  /* A non-accumulating op as accumulator (lt), and `=` without `:` for Arg2. */
  cn_buffer aa[1] = {{a, false}};
  CHECK(cn_asgn_accum(ctx, true, CN_OP_LT, a, CN_OP_ID, aa, one_rhs) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "lt");
  CHECK(cn_asgn_accum(ctx, false, CN_OP_ARG2, a, CN_OP_ID, aa, one_rhs) == NULL);

  /* An op undefined for the precision: exp on int32. */
  cn_node *n32 = cn_node_create(ctx, "n32", CN_PREC_INT32, 2, d23);
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ARG2, n32, CN_OP_EXP, (cn_buffer[]){{n32, false}},
                      one_rhs) == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_UNSUPPORTED);
  CHECK_HAS(cn_ctx_error(ctx), "exp");
  CHECK_HAS(cn_ctx_error(ctx), "int32");

  /* where with a uint4x32 condition: a 128-bit word has no truth value. */
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_UINT4X32, 2, d23);
  cn_proj *three =
      cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3}, (cn_proj_tensor){2, d23, ij},
                     3, (cn_proj_tensor[]){{2, d23, ij}, {2, d23, ij}, {2, d23, ij}});
  CHECK(cn_asgn_accum(ctx, true, CN_OP_ARG2, a, CN_OP_WHERE,
                      (cn_buffer[]){{w, false}, {a, false}, {a, false}}, three) == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_UNSUPPORTED);
  CHECK_HAS(cn_ctx_error(ctx), "'w'");
  CHECK_HAS(cn_ctx_error(ctx), "uint4x32");

  /* Bad records: duplicate iterators, a negative size, more RHS than 3, an unknown symbol. */
  CHECK(cn_proj_create(ctx, 2, (cn_symbol[]){i, i}, (int64_t[]){2, 2}, (cn_proj_tensor){2, d22, ik},
                       0, NULL) == NULL);
  CHECK(cn_proj_create(ctx, 1, (cn_symbol[]){i}, (int64_t[]){-1}, (cn_proj_tensor){0, NULL, NULL},
                       0, NULL) == NULL);
  CHECK(cn_proj_create(ctx, 0, NULL, NULL, (cn_proj_tensor){0, NULL, NULL}, 4,
                       (cn_proj_tensor[]){
                           {0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}}) ==
        NULL);
  cn_index bogus = cn_index_iter(12345);
  CHECK(cn_proj_create(ctx, 0, NULL, NULL, (cn_proj_tensor){1, (int64_t[]){1}, &bogus}, 0, NULL) ==
        NULL);

  /* Nodes: negative dims, rank too large, padding after first use. */
  CHECK(cn_node_create(ctx, "bad", CN_PREC_SINGLE, 1, (int64_t[]){-3}) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "bad");
  CHECK(cn_node_create(ctx, "big", CN_PREC_SINGLE, CN_MAX_RANK + 1, NULL) == NULL);
  CHECK(cn_node_set_values(a, false, (double[]){1, 2}, 2) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "'a'");
  /* A rejected call allocates nothing; a successful one creates the buffer and freezes padding. */
  CHECK(cn_node_set_padding(a, 0, 1, 1) == CN_OK);
  CHECK(cn_node_set_values(a, false, (double[]){1, 2, 3, 4, 5, 6}, 6) == CN_OK);
  CHECK(cn_node_set_padding(a, 0, 2, 2) != CN_OK);
  CHECK_HAS(cn_ctx_error(ctx), "'a'");
  cn_ctx_destroy(ctx);
}

static void test_compile_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  char dir[] = "/tmp/cannl-errors-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  CHECK(cn_ctx_set_option(ctx, "cache_dir", dir) == CN_OK);
  CHECK(cn_ctx_set_option(ctx, "nonsense", "1") == CN_ERR_INVALID);
  int64_t n = 3;
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 1, &n);
  cn_asgn *a = cn_asgn_fetch_constant(ctx, x, 1.5);
  /* A compiler that rejects the file: the message names the generated file. */
  CHECK(cn_ctx_set_option(ctx, "cflags", "-O0 -shared -fPIC -include cn_no_such_header.h") ==
        CN_OK);
  CHECK(cn_routine_compile(ctx, a, CN_BACKEND_C, "broken") == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_COMPILE);
  CHECK_HAS(cn_ctx_error(ctx), dir);
  CHECK_HAS(cn_ctx_error(ctx), ".c");
  /* A routine name that is no C identifier. */
  CHECK(cn_ctx_set_option(ctx, "cflags", NULL) == CN_OK);
  CHECK(cn_routine_compile(ctx, a, CN_BACKEND_C, "not an identifier") == NULL);
  CHECK(cn_ctx_status(ctx) == CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

/* A whole pipeline: nodes, a record, a matmul assignment, compile, run, read back. */
static cn_status pipeline(cn_ctx *ctx, cn_backend_kind backend, double *out) {
  int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, d22[2] = {2, 2};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, d23);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, d32);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, d22);
  if (!a || !b || !c) return cn_ctx_status(ctx);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  if (i < 0 || j < 0 || k < 0) return cn_ctx_status(ctx);
  cn_index ik[2] = {cn_index_iter(i), cn_index_iter(k)},
           ij[2] = {cn_index_iter(i), cn_index_iter(j)},
           jk[2] = {cn_index_iter(j), cn_index_iter(k)};
  cn_proj *p = cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){2, 3, 2},
                              (cn_proj_tensor){2, d22, ik}, 2,
                              (cn_proj_tensor[]){{2, d23, ij}, {2, d32, jk}});
  if (!p) return cn_ctx_status(ctx);
  cn_status st = cn_node_set_values(a, false, (double[]){1, 2, 3, 4, 5, 6}, 6);
  if (st == CN_OK) st = cn_node_set_values(b, false, (double[]){7, 8, 9, 10, 11, 12}, 6);
  if (st != CN_OK) return st;
  cn_asgn *asgn =
      cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, (cn_buffer[]){{a, false}, {b, false}}, p);
  if (!asgn || !cn_asgn_to_string(ctx, asgn)) return cn_ctx_status(ctx);
  cn_routine *r = cn_routine_compile(ctx, asgn, backend, "sweep");
  if (!r) return cn_ctx_status(ctx);
  st = cn_routine_run(r);
  if (st == CN_OK) st = cn_node_get_values(c, false, out, 4);
  cn_routine_free(r);
  return st;
}

static void test_allocation_failures(cn_backend_kind backend) {
  int failures = 0, successes = 0;
  for (long n = 1; n < 400; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    double out[4] = {0};
    cn_status st = pipeline(ctx, backend, out);
    if (st == CN_OK) {
      successes++;
      CHECK_NEAR(out[3], 154, 0);
    } else {
      failures++;
      CHECK_MSG(st == CN_ERR_NOMEM, "allocation %ld: status %d: %s", n, (int)st, cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
  }
  /* Early allocations must fail the pipeline; past its last allocation it must succeed. */
  CHECK(failures > 10);
  CHECK(successes > 0);
}

int main(void) {
  test_projection_errors();
  test_compile_errors();
  test_allocation_failures(CN_BACKEND_INTERP);
  test_allocation_failures(CN_BACKEND_C);
  CHECK_DONE();
}
