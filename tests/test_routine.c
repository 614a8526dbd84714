/* Routines through the public API only (cannl.h): a matrix multiplication on both backends
 * against a hand computation, static-index binding and its errors (exact messages), routine
 * names, a CN_MEM_LOCAL intermediate inside one routine (its scratch starts from zero on every
 * run), a compiler failure, and the two ways a routine is released (cn_routine_free, or
 * cn_ctx_destroy for the ones left alive), which ASan and valgrind check for leaks.
 *
 * Generated C is compiled without -march=native here so that this test also runs under
 * valgrind, which does not decode the AVX-512 instructions -march=native may select. */
#include "cannl.h"

#include "check.h"

static const char *portable_cflags = "-O2 -shared -fPIC -std=c11";
static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "c"};

static cn_ctx *new_ctx(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (ctx) CHECK_INT(cn_ctx_set_option(ctx, "cflags", portable_cflags), CN_OK);
  return ctx;
}

static cn_node *vector(cn_ctx *ctx, const char *label, int64_t n) {
  cn_node *node = cn_node_create(ctx, label, CN_PREC_SINGLE, 1, &n);
  CHECK(node != NULL);
  return node;
}

/* c[i,j] =:+ a[i,k] * b[k,j] with a = [[1,2,3],[4,5,6]] and b = [[7,8],[9,10],[11,12]]. */
static const cn_asgn *build_matmul(cn_ctx *ctx, cn_node **c_out) {
  const int64_t a_dims[2] = {2, 3}, b_dims[2] = {3, 2}, c_dims[2] = {2, 2};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, a_dims);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, b_dims);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, c_dims);
  CHECK(a && b && c);
  const double a_values[6] = {1, 2, 3, 4, 5, 6}, b_values[6] = {7, 8, 9, 10, 11, 12};
  CHECK_INT(cn_node_set_values(a, false, a_values, 6), CN_OK);
  CHECK_INT(cn_node_set_values(b, false, b_values, 6), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  const cn_symbol iters[3] = {i, j, k};
  const int64_t sizes[3] = {2, 2, 3};
  const cn_index a_map[2] = {cn_index_iter(i), cn_index_iter(k)};
  const cn_index b_map[2] = {cn_index_iter(k), cn_index_iter(j)};
  const cn_index c_map[2] = {cn_index_iter(i), cn_index_iter(j)};
  const cn_proj_tensor rhs[2] = {{2, a_dims, a_map}, {2, b_dims, b_map}};
  const cn_proj *proj =
      cn_proj_create(ctx, 3, iters, sizes, (cn_proj_tensor){2, c_dims, c_map}, 2, rhs);
  CHECK(proj != NULL);
  const cn_buffer operands[2] = {{a, false}, {b, false}};
  const cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, operands, proj);
  CHECK(asgn != NULL);
  *c_out = c;
  return asgn;
}

static void test_matmul(void) {
  cn_ctx *ctx = new_ctx();
  cn_node *c;
  const cn_asgn *asgn = build_matmul(ctx, &c);
  /* By hand: [1 2 3; 4 5 6] . [7 8; 9 10; 11 12] = [58 64; 139 154]. */
  const double expected[4] = {58, 64, 139, 154};
  uint64_t runs = 0;
  for (int b = 0; b < 2; b++) {
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[b], "mm");
    CHECK_MSG(r != NULL, "%s: %s", backend_names[b], cn_ctx_error(ctx));
    if (!r) continue;
    CHECK(cn_routine_loops(r) != NULL && strlen(cn_routine_loops(r)) > 0);
    if (backends[b] == CN_BACKEND_INTERP) {
      CHECK(cn_routine_source(r) == NULL);
    } else {
      CHECK_HAS(cn_routine_source(r), "mm_entry");
    }
    /* Stale output contents must not leak into `=:+`: the second run starts from garbage. */
    for (int rep = 0; rep < 2; rep++) {
      const double garbage[4] = {-1, 100, 1e6, 7};
      CHECK_INT(cn_node_set_values(c, false, garbage, 4), CN_OK);
      CHECK_INT(cn_routine_run(r), CN_OK);
      runs++;
      double got[4];
      CHECK_INT(cn_node_get_values(c, false, got, 4), CN_OK);
      for (int p = 0; p < 4; p++) CHECK_NEAR(got[p], expected[p], 0);
    }
    CHECK_INT(cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS), runs);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* row[...] = rows[b, ...]: a routine reading the static index b (range 3). */
static void test_binding(void) {
  cn_ctx *ctx = new_ctx();
  const int64_t rows_dims[2] = {3, 2};
  cn_node *rows = cn_node_create(ctx, "rows", CN_PREC_SINGLE, 2, rows_dims);
  cn_node *row = vector(ctx, "row", 2);
  const double rows_values[6] = {1, 2, 3, 4, 5, 6};
  CHECK_INT(cn_node_set_values(rows, false, rows_values, 6), CN_OK);
  cn_symbol b = cn_symbol_create(ctx, "b", 3), q = cn_symbol_create(ctx, "q", 5);
  const cn_asgn *asgn = cn_asgn_fetch_slice(ctx, row, b, rows);
  CHECK(asgn != NULL);

  for (int k = 0; k < 2; k++) {
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[k], "slicer");
    CHECK_MSG(r != NULL, "%s: %s", backend_names[k], cn_ctx_error(ctx));
    if (!r) continue;
    CHECK_INT(cn_routine_bind(r, q, 0), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(ctx), "routine 'slicer' does not read symbol 'q'");
    CHECK_INT(cn_routine_bind(r, b, 3), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(ctx), "routine 'slicer': value 3 of symbol 'b' is outside its range "
                                 "[0, 3)");
    CHECK_INT(cn_routine_bind(r, b, -1), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(ctx), "routine 'slicer': value -1 of symbol 'b' is outside its range "
                                 "[0, 3)");
    /* The rejected bindings bound nothing. */
    CHECK_INT(cn_routine_run(r), CN_ERR_RUNTIME);
    CHECK_STR(cn_ctx_error(ctx), "routine 'slicer': symbol 'b' is not bound");
    CHECK_INT(cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS), 2 * k); /* failed runs do not count */

    double got[2];
    for (int64_t at = 2; at >= 1; at--) {
      CHECK_INT(cn_routine_bind(r, b, at), CN_OK);
      CHECK_INT(cn_routine_run(r), CN_OK);
      CHECK_INT(cn_node_get_values(row, false, got, 2), CN_OK);
      CHECK_NEAR(got[0], rows_values[at * 2], 0);
      CHECK_NEAR(got[1], rows_values[at * 2 + 1], 0);
    }
    cn_routine_free(r);
  }
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS), 4);

  /* A routine without a name is called "routine". */
  cn_routine *unnamed = cn_routine_compile(ctx, asgn, CN_BACKEND_INTERP, NULL);
  CHECK(unnamed != NULL);
  if (unnamed) {
    CHECK_INT(cn_routine_run(unnamed), CN_ERR_RUNTIME);
    CHECK_STR(cn_ctx_error(ctx), "routine 'routine': symbol 'b' is not bound");
    cn_routine_free(unnamed);
  }
  cn_ctx_destroy(ctx);
}

static void test_bad_compile(void) {
  cn_ctx *ctx = new_ctx();
  cn_node *c;
  const cn_asgn *asgn = build_matmul(ctx, &c);
  /* not C identifiers, the C implementation's leading underscore, the generator's cn_ family */
  const char *bad_names[6] = {"2mm", "mat-mul", "", "_mm", "cn_mm", "CN"};
  for (int n = 0; n < 6; n++) {
    CHECK(cn_routine_compile(ctx, asgn, CN_BACKEND_INTERP, bad_names[n]) == NULL);
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
    char message[256];
    snprintf(message, sizeof message,
             "routine name '%s' is not a C identifier cannl can use (a letter, then ASCII letters, "
             "digits and '_', not starting with cn_ or CN_)",
             bad_names[n]);
    CHECK_STR(cn_ctx_error(ctx), message);
  }
  CHECK(cn_routine_compile(ctx, asgn, (cn_backend_kind)7, "mm") == NULL);
  CHECK_STR(cn_ctx_error(ctx), "routine 'mm': unknown backend kind 7");
  CHECK(cn_routine_compile(ctx, NULL, CN_BACKEND_INTERP, "mm") == NULL);
  CHECK_STR(cn_ctx_error(ctx), "routine 'mm': no assignments to compile");

  /* A compiler that does not exist: the routine under construction is released (ASan/valgrind
   * check), the status says the compile failed. The name is unique so no cached object hides
   * the failure. */
  CHECK_INT(cn_ctx_set_option(ctx, "cc", "/nonexistent/cannl-test-cc"), CN_OK);
  CHECK(cn_routine_compile(ctx, asgn, CN_BACKEND_C, "never_compiled_by_test_routine") == NULL);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_COMPILE);
  cn_ctx_destroy(ctx);
}

/* t =+ a (t is CN_MEM_LOCAL); c =:+ t * a. With t's scratch zeroed before every run, every run
 * gives c = a * a; a scratch kept from the previous run would give 2 * a * a the second time. */
static const cn_asgn *build_local(cn_ctx *ctx, cn_node **c_out) {
  cn_node *a = vector(ctx, "a", 3), *t = vector(ctx, "t", 3), *c = vector(ctx, "c", 3);
  const double a_values[3] = {1, 2, 3};
  CHECK_INT(cn_node_set_values(a, false, a_values, 3), CN_OK);
  CHECK_INT(cn_node_set_memory(t, CN_MEM_LOCAL), CN_OK);
  CHECK_INT(cn_node_memory(t), CN_MEM_LOCAL);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  const int64_t size = 3;
  const cn_index map[1] = {cn_index_iter(i)};
  const cn_proj_tensor one = {1, &size, map};
  const cn_proj_tensor two[2] = {one, one};
  const cn_proj *unary = cn_proj_create(ctx, 1, &i, &size, one, 1, &one);
  const cn_proj *binary = cn_proj_create(ctx, 1, &i, &size, one, 2, two);
  CHECK(unary && binary);
  const cn_buffer a_buf = {a, false};
  const cn_buffer t_and_a[2] = {{t, false}, {a, false}};
  cn_asgn *steps[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, t, CN_OP_ID, &a_buf, unary),
                       cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, t_and_a, binary)};
  CHECK(steps[0] && steps[1]);
  const cn_asgn *seq = cn_asgn_seq(ctx, 2, steps);
  CHECK(seq != NULL);
  *c_out = c;
  return seq;
}

static void test_local_intermediate(void) {
  cn_ctx *ctx = new_ctx();
  cn_node *c;
  const cn_asgn *asgn = build_local(ctx, &c);
  for (int b = 0; b < 2; b++) {
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[b], "local_square");
    CHECK_MSG(r != NULL, "%s: %s", backend_names[b], cn_ctx_error(ctx));
    if (!r) continue;
    for (int rep = 0; rep < 2; rep++) {
      CHECK_INT(cn_routine_run(r), CN_OK);
      double got[3];
      CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
      CHECK_NEAR(got[0], 1, 0);
      CHECK_NEAR(got[1], 4, 0);
      CHECK_NEAR(got[2], 9, 0);
    }
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* One routine freed explicitly, others (one with local scratch, one of each backend) left for
 * cn_ctx_destroy; the leak checkers verify both paths release everything. */
/* Routine names the C library or the language already uses: generated C spells a routine's name
 * only with a suffix (NAME_body, NAME_entry), so each compiles and runs (each spelled bare, as
 * before, was a compile error: a keyword, a declared function, a macro, a type, main). */
static void test_library_names(void) {
  cn_ctx *ctx = new_ctx();
  cn_node *c;
  const cn_asgn *asgn = build_local(ctx, &c);
  const char *names[7] = {"int", "memcpy", "NULL", "sin", "int64_t", "main", "INT64_MAX"};
  for (int n = 0; n < 7; n++) {
    cn_routine *r = cn_routine_compile(ctx, asgn, CN_BACKEND_C, names[n]);
    CHECK_MSG(r != NULL, "%s: %s", names[n], cn_ctx_error(ctx));
    if (!r) continue;
    CHECK_INT(cn_routine_run(r), CN_OK);
    double got[3];
    CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
    CHECK_NEAR(got[2], 9, 0);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

static void test_lifetimes(void) {
  cn_ctx *ctx = new_ctx();
  cn_node *c, *c_local;
  const cn_asgn *matmul = build_matmul(ctx, &c);
  const cn_asgn *local = build_local(ctx, &c_local);
  cn_routine *freed = cn_routine_compile(ctx, matmul, CN_BACKEND_INTERP, "freed");
  cn_routine *kept_interp = cn_routine_compile(ctx, local, CN_BACKEND_INTERP, "kept");
  cn_routine *kept_c = cn_routine_compile(ctx, matmul, CN_BACKEND_C, "kept_c");
  CHECK(freed && kept_interp && kept_c);
  if (freed && kept_interp && kept_c) {
    CHECK_INT(cn_routine_run(freed), CN_OK);
    CHECK_INT(cn_routine_run(kept_interp), CN_OK);
    CHECK_INT(cn_routine_run(kept_c), CN_OK);
    CHECK_INT(cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS), 3);
  }
  cn_routine_free(freed);
  cn_routine_free(NULL);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul();
  test_binding();
  test_bad_compile();
  test_local_intermediate();
  test_library_names();
  test_lifetimes();
  CHECK_DONE();
}
