/* Tests of the generated-C backend (src/backend/cgen.c, src/backend/cc.c) on loop-IR procedures
 * built by hand, so they depend on loops.h only: the exact routine text of a matmul nest and of a
 * padded, strided read (golden strings); both compiled, run and compared with plain C loops; names
 * that would break C (keywords, math functions, clashing symbols and buffers) made safe, compiled
 * with -Wall -Wextra -Werror and run against the reference interpreter; the on-disk cache (a
 * second compile of the same procedure in a fresh context loads the cached object, other flags
 * compile again); a long routine emitted as shared kernels called by steps; compiler failures
 * (CN_ERR_COMPILE naming the generated file, no temporaries left) and an unusable cache directory
 * (CN_ERR_IO). Everything happens in a mkdtemp directory, removed at the end. */
#include "backend/backend.h"
#include "check.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

/* Flags that make any warning in generated code (or in the prelude) a failure. */
#define STRICT_CFLAGS "-O1 -shared -fPIC -std=c11 -Wall -Wextra -Werror"

static char cache_dir[] = "/tmp/cannl-test-cgen-XXXXXX";

/* ---- Builders of loop IR ---- */

static cn_index *idx_list(cn_ctx *ctx, int rank, ...) {
  cn_index *idx = cn_alloc(ctx, sizeof(cn_index) * (size_t)(rank > 0 ? rank : 1));
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++) idx[d] = va_arg(ap, cn_index);
  va_end(ap);
  return idx;
}

static cn_index affine1(cn_symbol s, int64_t c, int64_t offset) {
  return cn_index_affine(1, &s, &c, offset);
}

static cn_index affine2(cn_symbol s0, int64_t c0, cn_symbol s1, int64_t c1, int64_t offset) {
  cn_symbol syms[2] = {s0, s1};
  int64_t coeffs[2] = {c0, c1};
  return cn_index_affine(2, syms, coeffs, offset);
}

static cn_ll_expr *expr_new(cn_ctx *ctx, cn_le_kind kind, cn_prec prec) {
  cn_ll_expr *e = cn_alloc(ctx, sizeof *e);
  e->kind = kind;
  e->prec = prec;
  return e;
}

static cn_ll_expr *get(cn_ctx *ctx, int param, cn_prec prec, cn_index *idx) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_GET, prec);
  e->u.get.param = param;
  e->u.get.idx = idx;
  return e;
}

static cn_ll_expr *constant(cn_ctx *ctx, cn_prec prec, double x) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_CONST, prec);
  e->u.constant = cn_value_of_double(prec, x);
  return e;
}

static cn_ll_expr *index_expr(cn_ctx *ctx, cn_index idx) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_INDEX, CN_INDEX_PREC);
  e->u.index = idx;
  return e;
}

static cn_ll_expr *op(cn_ctx *ctx, cn_op o, cn_prec prec, cn_ll_expr *a, cn_ll_expr *b,
                      cn_ll_expr *c) {
  cn_ll_expr *e = expr_new(ctx, CN_LE_OP, prec);
  e->u.op.op = o;
  e->u.op.args[0] = a;
  e->u.op.args[1] = b;
  e->u.op.args[2] = c;
  return e;
}

static cn_ll_stmt *stmt_new(cn_ctx *ctx, cn_ll_kind kind) {
  cn_ll_stmt *s = cn_alloc(ctx, sizeof *s);
  s->kind = kind;
  return s;
}

static cn_ll_stmt *loop(cn_ctx *ctx, cn_symbol sym, int64_t from, int64_t to, cn_ll_stmt *body) {
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_FOR);
  s->u.loop.sym = sym;
  s->u.loop.from = from;
  s->u.loop.to = to;
  s->u.loop.body = body;
  return s;
}

static cn_ll_stmt *set(cn_ctx *ctx, int param, cn_index *idx, cn_ll_expr *value) {
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_SET);
  s->u.set.param = param;
  s->u.set.idx = idx;
  s->u.set.value = value;
  return s;
}

static cn_ll_stmt *set_vec(cn_ctx *ctx, int param, cn_index *idx, int length, cn_ll_expr *arg) {
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_SET_VEC);
  s->u.vec.op = CN_OP_UNIFORM;
  s->u.vec.param = param;
  s->u.vec.idx = idx;
  s->u.vec.length = length;
  s->u.vec.arg = arg;
  return s;
}

static cn_ll_stmt *comment(cn_ctx *ctx, const char *text) {
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_COMMENT);
  s->u.comment = text;
  return s;
}

static cn_ll_stmt *seq(cn_ctx *ctx, int count, ...) {
  cn_ll_stmt *s = stmt_new(ctx, CN_LL_SEQ);
  s->u.seq.count = count;
  s->u.seq.items = cn_alloc(ctx, sizeof(cn_ll_stmt *) * (size_t)count);
  va_list ap;
  va_start(ap, count);
  for (int i = 0; i < count; i++) s->u.seq.items[i] = va_arg(ap, cn_ll_stmt *);
  va_end(ap);
  return s;
}

static cn_ll_proc *proc_new(cn_ctx *ctx, const char *name, cn_ll_stmt *body, int n_params,
                            const cn_ll_param *params, int n_free, const cn_symbol *free_syms) {
  cn_ll_proc *proc = cn_alloc(ctx, sizeof *proc);
  proc->name = name;
  proc->body = body;
  proc->n_params = n_params;
  proc->params = cn_alloc(ctx, sizeof(cn_ll_param) * (size_t)n_params);
  for (int k = 0; k < n_params; k++) proc->params[k] = params[k];
  proc->n_free_syms = n_free;
  proc->free_syms = cn_alloc(ctx, sizeof(cn_symbol) * (size_t)(n_free > 0 ? n_free : 1));
  for (int i = 0; i < n_free; i++) proc->free_syms[i] = free_syms[i];
  return proc;
}

/* ---- Helpers ---- */

/* A context whose C backend uses the test's cache directory and strict flags. */
static cn_ctx *test_ctx(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", STRICT_CFLAGS), CN_OK);
  return ctx;
}

/* The generated source from the routine marker on (the prelude before it is numeric's). */
static const char *routine_text(cn_ctx *ctx, const cn_ll_proc *proc) {
  cn_sbuf sb = {0};
  CHECK_INT(cn_cgen_source(ctx, proc, &sb), CN_OK);
  const char *text = cn_sbuf_finish(ctx, &sb);
  CHECK(text != NULL);
  if (!text) return "";
  CHECK(strncmp(text, "/* Generated by cannl: routine ", 31) == 0);
  const char *marker = strstr(text, "/* ---- routine ");
  CHECK(marker != NULL);
  return marker ? marker : "";
}

#define MAX_TEST_PARAMS 8

/* Compiles with the C backend, runs once on the params' buffers, releases. */
static cn_status run_c(cn_ctx *ctx, const cn_ll_proc *proc, const int64_t *syms) {
  void *compiled = NULL;
  const char *source = NULL;
  cn_status status = cn_backend_c.compile(ctx, proc, &compiled, &source);
  CHECK_MSG(status == CN_OK, "%s", cn_ctx_error(ctx));
  if (status != CN_OK) return status;
  CHECK(source != NULL && strstr(source, "---- routine ") != NULL);
  void *buffers[MAX_TEST_PARAMS];
  CHECK(proc->n_params <= MAX_TEST_PARAMS);
  for (int k = 0; k < proc->n_params; k++)
    buffers[k] = cn_node_buffer(proc->params[k].node, proc->params[k].merge);
  status = cn_backend_c.run(ctx, compiled, buffers, syms);
  cn_backend_c.release(compiled);
  return status;
}

/* Counts the cache directory's entries whose name starts with prefix and ends with suffix. */
static int count_files(const char *prefix, const char *suffix) {
  DIR *d = opendir(cache_dir);
  CHECK(d != NULL);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name), k = strlen(suffix);
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && len >= k &&
         strcmp(e->d_name + len - k, suffix) == 0;
  }
  closedir(d);
  return n;
}

static void remove_cache_dir(void) {
  DIR *d = opendir(cache_dir);
  CHECK(d != NULL);
  if (!d) return;
  char path[512];
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
    CHECK(unlink(path) == 0);
  }
  closedir(d);
  CHECK(rmdir(cache_dir) == 0);
}

/* ---- The matmul nest ---- */

static const double matmul_a[12] = {1, 2, -1, 0.5, 3, -2, 0, 1, 0.25, 4, -3, 2};
static const double matmul_b[20] = {2,   0, 1,  -1, 3, 1, 1,  0, 2, -2,
                                    0.5, 4, -1, 1,  0, 3, -3, 2, 0, 1};

/* c[3,5] =: a[3,4] * b[4,5] over symbols i, k (output) and j (reduction). Node ids are 1, 2, 3
 * in every fresh context, so the text is the same in all of them. */
static cn_ll_proc *matmul_proc(cn_ctx *ctx) {
  int64_t a_dims[2] = {3, 4}, b_dims[2] = {4, 5}, c_dims[2] = {3, 5};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, a_dims);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, b_dims);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, c_dims);
  CHECK(a && b && c);
  CHECK_INT(cn_node_set_values(a, false, matmul_a, 12), CN_OK);
  CHECK_INT(cn_node_set_values(b, false, matmul_b, 20), CN_OK);
  double garbage[15];
  for (int x = 0; x < 15; x++) garbage[x] = 1000 + x; /* the prefill must clear it */
  CHECK_INT(cn_node_set_values(c, false, garbage, 15), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 3), k = cn_symbol_create(ctx, "k", 5),
            j = cn_symbol_create(ctx, "j", 4);
  cn_index *c_ik = idx_list(ctx, 2, cn_index_iter(i), cn_index_iter(k));
  cn_ll_stmt *prefill =
      loop(ctx, i, 0, 3, loop(ctx, k, 0, 5, set(ctx, 2, c_ik, constant(ctx, CN_PREC_SINGLE, 0))));
  cn_ll_expr *product =
      op(ctx, CN_OP_MUL, CN_PREC_SINGLE,
         get(ctx, 0, CN_PREC_SINGLE, idx_list(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
         get(ctx, 1, CN_PREC_SINGLE, idx_list(ctx, 2, cn_index_iter(j), cn_index_iter(k))), NULL);
  cn_ll_expr *sum =
      op(ctx, CN_OP_ADD, CN_PREC_SINGLE, get(ctx, 2, CN_PREC_SINGLE, c_ik), product, NULL);
  cn_ll_stmt *accumulate =
      loop(ctx, i, 0, 3, loop(ctx, k, 0, 5, loop(ctx, j, 0, 4, set(ctx, 2, c_ik, sum))));
  cn_ll_param params[3] = {{a, false}, {b, false}, {c, false}};
  return proc_new(ctx, "matmul", seq(ctx, 3, comment(ctx, "c =:+ a * b"), prefill, accumulate), 3,
                  params, 0, NULL);
}

static const char matmul_golden[] =
    "/* ---- routine matmul ---- */\n"
    "static void matmul(const float *restrict a_1, const float *restrict b_2, float *restrict c_3) "
    "{\n"
    "  /* c =:+ a * b */\n"
    "  for (int64_t i = 0; i < 3; ++i) {\n"
    "    for (int64_t k = 0; k < 5; ++k) {\n"
    "      c_3[5 * i + k] = 0.0f;\n"
    "    }\n"
    "  }\n"
    "  for (int64_t i = 0; i < 3; ++i) {\n"
    "    for (int64_t k = 0; k < 5; ++k) {\n"
    "      for (int64_t j = 0; j < 4; ++j) {\n"
    "        c_3[5 * i + k] = (c_3[5 * i + k] + (a_1[4 * i + j] * b_2[5 * j + k]));\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "void matmul_entry(void *const *buffers, const int64_t *syms);\n"
    "void matmul_entry(void *const *buffers, const int64_t *syms) {\n"
    "  (void)syms;\n"
    "  matmul((const float *)buffers[0], (const float *)buffers[1], (float *)buffers[2]);\n"
    "}\n";

/* Checks c against a plain triple loop (all values are exact in single precision). */
static void check_matmul_result(const cn_ll_proc *proc) {
  double c[15];
  CHECK_INT(cn_node_get_values(proc->params[2].node, false, c, 15), CN_OK);
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 5; k++) {
      double expected = 0;
      for (int j = 0; j < 4; j++) expected += matmul_a[4 * i + j] * matmul_b[5 * j + k];
      CHECK_NEAR(c[5 * i + k], expected, 0);
    }
}

static void test_matmul(void) {
  cn_ctx *ctx = test_ctx();
  cn_ll_proc *proc = matmul_proc(ctx);
  CHECK_STR(routine_text(ctx, proc), matmul_golden);
  CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 1);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 0);
  check_matmul_result(proc);
  CHECK_INT(count_files("matmul-", ".c"), 1);
  CHECK_INT(count_files("matmul-", ".so"), 1);
  CHECK_INT(count_files("matmul-", ".sum"), 1);
  CHECK_INT(count_files("", ""), 3 + 2); /* with "." and ".." */
  cn_ctx_destroy(ctx);
}

/* The identical procedure in a fresh context: the object comes from the cache. */
static void test_cache_hit(void) {
  cn_ctx *ctx = test_ctx();
  cn_ll_proc *proc = matmul_proc(ctx);
  CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 0);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 1);
  check_matmul_result(proc);
  cn_ctx_destroy(ctx);

  /* Other flags are another key: the compiler runs again, into a second object. */
  ctx = test_ctx();
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", STRICT_CFLAGS " -DCN_TEST_OTHER_KEY=1"), CN_OK);
  proc = matmul_proc(ctx);
  CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 1);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 0);
  check_matmul_result(proc);
  CHECK_INT(count_files("matmul-", ".so"), 2);
  cn_ctx_destroy(ctx);
}

/* ---- A padded, strided read ---- */

/* out[o] =: sum_k w[k] * x[b, 2o + k - 1] in double, x and w single; x's axis 1 has padding
 * (2 left, 1 right: 8 cells a row) and the reads reach both margins; b is a free symbol. */
static void test_padded_read(void) {
  cn_ctx *ctx = test_ctx();
  int64_t x_dims[2] = {2, 5}, w_dims[1] = {3}, out_dims[1] = {3};
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 2, x_dims);
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_SINGLE, 1, w_dims);
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_DOUBLE, 1, out_dims);
  CHECK(x && w && out);
  CHECK_INT(cn_node_set_padding(x, 1, 2, 1), CN_OK);
  cn_symbol b = cn_symbol_create(ctx, "b", 2), o = cn_symbol_create(ctx, "o", 3),
            k = cn_symbol_create(ctx, "k", 3);
  cn_index *out_o = idx_list(ctx, 1, cn_index_iter(o));
  cn_ll_stmt *prefill = loop(ctx, o, 0, 3, set(ctx, 2, out_o, constant(ctx, CN_PREC_DOUBLE, 0)));
  cn_ll_expr *product =
      op(ctx, CN_OP_MUL, CN_PREC_DOUBLE,
         get(ctx, 1, CN_PREC_SINGLE, idx_list(ctx, 1, cn_index_iter(k))),
         get(ctx, 0, CN_PREC_SINGLE, idx_list(ctx, 2, cn_index_iter(b), affine2(o, 2, k, 1, -1))),
         NULL);
  cn_ll_expr *sum =
      op(ctx, CN_OP_ADD, CN_PREC_DOUBLE, get(ctx, 2, CN_PREC_DOUBLE, out_o), product, NULL);
  cn_ll_stmt *accumulate = loop(ctx, o, 0, 3, loop(ctx, k, 0, 3, set(ctx, 2, out_o, sum)));
  cn_ll_param params[3] = {{x, false}, {w, false}, {out, false}};
  cn_ll_proc *proc = proc_new(ctx, "conv", seq(ctx, 2, prefill, accumulate), 3, params, 1, &b);

  static const char golden[] =
      "/* ---- routine conv ---- */\n"
      "static void conv(const float *restrict x_1, const float *restrict w_2, "
      "double *restrict out_3, int64_t b) {\n"
      "  for (int64_t o = 0; o < 3; ++o) {\n"
      "    out_3[o] = 0.0;\n"
      "  }\n"
      "  for (int64_t o = 0; o < 3; ++o) {\n"
      "    for (int64_t k = 0; k < 3; ++k) {\n"
      "      out_3[o] = (out_3[o] + (((double)w_2[k]) * ((double)x_1[8 * b + 2 * o + k + 1])));\n"
      "    }\n"
      "  }\n"
      "}\n"
      "void conv_entry(void *const *buffers, const int64_t *syms);\n"
      "void conv_entry(void *const *buffers, const int64_t *syms) {\n"
      "  conv((const float *)buffers[0], (const float *)buffers[1], (double *)buffers[2], "
      "syms[0]);\n"
      "}\n";
  CHECK_STR(routine_text(ctx, proc), golden);

  /* Every cell of the padded buffer, margins included, gets a distinct value: row r, logical
   * column col (from -2 to 5) holds 10 * r + col + 3. */
  float *xb = cn_node_buffer(x, false);
  CHECK(xb != NULL);
  for (int r = 0; xb && r < 2; r++)
    for (int col = -2; col < 6; col++) xb[8 * r + col + 2] = (float)(10 * r + col + 3);
  CHECK_INT(cn_node_set_values(w, false, (double[]){0.5, -1, 2}, 3), CN_OK);
  for (int64_t batch = 0; batch < 2; batch++) {
    CHECK_INT(run_c(ctx, proc, &batch), CN_OK);
    double got[3];
    CHECK_INT(cn_node_get_values(out, false, got, 3), CN_OK);
    static const double wv[3] = {0.5, -1, 2};
    for (int oo = 0; oo < 3; oo++) {
      double expected = 0;
      for (int kk = 0; kk < 3; kk++) expected += wv[kk] * (10 * batch + (2 * oo + kk - 1) + 3);
      CHECK_NEAR(got[oo], expected, 0);
    }
  }
  cn_ctx_destroy(ctx);
}

/* ---- Affine loop bounds ---- */

/* A loop with several affine bounds over an outer variable, two with a divisor (ceilings of
 * negative numerators included), built by hand: out[i] += w[k + 3] with w[c] = 10^c, so each
 * out[i] spells the k it visited. For i = 0..5, k runs from max(-3, ceil((i - 5) / 2), i - 4) to
 * min(4, ceil((i + 1) / 2)): i = 0: -2..1 (ceil(-5/2) = -2, ceil(1/2) = 1), i = 1: -2..1,
 * i = 2: -1..2 (ceil(-3/2) = -1), i = 3: -1..2, i = 4: 0..3 (ceil(-1/2) = 0, ceil(5/2) = 3),
 * i = 5: 1..3 (i - 4 = 1). */
static void test_affine_bounds(void) {
  cn_ctx *ctx = test_ctx();
  int64_t w_dims[1] = {7}, out_dims[1] = {6};
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_DOUBLE, 1, w_dims);
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_DOUBLE, 1, out_dims);
  CHECK(w && out);
  CHECK_INT(cn_node_set_values(w, false, (double[]){1, 10, 100, 1e3, 1e4, 1e5, 1e6}, 7), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_index *out_i = idx_list(ctx, 1, cn_index_iter(i));
  cn_ll_expr *sum = op(ctx, CN_OP_ADD, CN_PREC_DOUBLE, get(ctx, 1, CN_PREC_DOUBLE, out_i),
                       get(ctx, 0, CN_PREC_DOUBLE, idx_list(ctx, 1, affine1(k, 1, 3))), NULL);
  cn_ll_stmt *inner = loop(ctx, k, -3, 4, set(ctx, 1, out_i, sum));
  cn_ll_bound *lower = cn_alloc(ctx, 3 * sizeof *lower), *upper = cn_alloc(ctx, 2 * sizeof *upper);
  lower[0] = (cn_ll_bound){cn_index_fixed(-3), 1};
  lower[1] = (cn_ll_bound){affine1(i, 1, -5), 2};
  lower[2] = (cn_ll_bound){affine1(i, 1, -4), 1};
  upper[0] = (cn_ll_bound){cn_index_fixed(4), 1};
  upper[1] = (cn_ll_bound){affine1(i, 1, 1), 2};
  inner->u.loop.n_lower = 3;
  inner->u.loop.lower = lower;
  inner->u.loop.n_upper = 2;
  inner->u.loop.upper = upper;
  cn_ll_param params[2] = {{w, false}, {out, false}};
  cn_ll_proc *proc = proc_new(ctx, "bounded", loop(ctx, i, 0, 6, inner), 2, params, 0, NULL);

  CHECK_STR(cn_ll_to_string(ctx, proc),
            "routine bounded\n"
            "  params: w#1 double[7], out#2 double[6]\n"
            "for i in 0..6:\n"
            "  for k in max(-3, ceil((i - 5) / 2), i - 4)..min(4, ceil((i + 1) / 2)):\n"
            "    out[i] := out[i] + w[k + 3]\n");
  static const char golden[] =
      "/* ---- routine bounded ---- */\n"
      "static void bounded(const double *restrict w_1, double *restrict out_2) {\n"
      "  for (int64_t i = 0; i < 6; ++i) {\n"
      "    for (int64_t k = cn_max_i64(cn_max_i64(-3, cn_ceil_div_i64(i - 5, 2)), i - 4); "
      "k < cn_min_i64(4, cn_ceil_div_i64(i + 1, 2)); ++k) {\n"
      "      out_2[i] = (out_2[i] + w_1[k + 3]);\n"
      "    }\n"
      "  }\n"
      "}\n"
      "void bounded_entry(void *const *buffers, const int64_t *syms);\n"
      "void bounded_entry(void *const *buffers, const int64_t *syms) {\n"
      "  (void)syms;\n"
      "  bounded((const double *)buffers[0], (double *)buffers[1]);\n"
      "}\n";
  CHECK_STR(routine_text(ctx, proc), golden);

  static const double expected[6] = {1110, 1110, 11100, 11100, 111000, 110000};
  const double zeros[6] = {0};
  for (int b = 0; b < 2; b++) {
    CHECK_INT(cn_node_set_values(out, false, zeros, 6), CN_OK);
    if (b) {
      CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
    } else {
      void *compiled = NULL;
      CHECK_INT(cn_backend_interp.compile(ctx, proc, &compiled, NULL), CN_OK);
      void *buffers[2] = {cn_node_buffer(w, false), cn_node_buffer(out, false)};
      if (compiled) CHECK_INT(cn_backend_interp.run(ctx, compiled, buffers, NULL), CN_OK);
      cn_backend_interp.release(compiled);
    }
    double got[6];
    CHECK_INT(cn_node_get_values(out, false, got, 6), CN_OK);
    for (int c = 0; c < 6; c++)
      CHECK_MSG(got[c] == expected[c], "%s: out[%d] = %g, expected %g", b ? "C" : "interp", c,
                got[c], expected[c]);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Names, vector stores, embedded indices, conditions ---- */

/* Symbols named like a C keyword, a math function, a standard macro, a prelude helper, a buffer,
 * and two symbols sharing a name; labels that are no identifiers; a merge buffer; a vector store;
 * an embedded index; a where() with a condition of another precision; a comment holding the
 * comment terminator. The text must compile with -Werror and agree with the interpreter. */
static void test_names_and_features(void) {
  cn_ctx *ctx = test_ctx();
  int64_t dims[1] = {4}, grid_dims[2] = {2, 4};
  cn_node *src = cn_node_create(ctx, "3d src*", CN_PREC_INT64, 1, dims);
  cn_node *dst = cn_node_create(ctx, "", CN_PREC_SINGLE, 2, grid_dims);
  cn_node *rnd = cn_node_create(ctx, "cn_rnd", CN_PREC_SINGLE, 1, dims);
  cn_node *pos = cn_node_create(ctx, "int", CN_PREC_INT64, 1, dims);
  CHECK(src && dst && rnd && pos);
  CHECK_INT(cn_node_set_values(src, false, (double[]){0, 3, -2, 7}, 4), CN_OK);
  CHECK_INT(cn_node_set_values(src, true, (double[]){10, 20, 30, 40}, 4), CN_OK);
  cn_symbol kw = cn_symbol_create(ctx, "int", 2), fn = cn_symbol_create(ctx, "exp", 4),
            i1 = cn_symbol_create(ctx, "i", 0), i2 = cn_symbol_create(ctx, "i", 0),
            buf = cn_symbol_create(ctx, "n3d_src__1", 4), mac = cn_symbol_create(ctx, "I", 4),
            helper = cn_symbol_create(ctx, "cn_lane", 4);
  /* dst[kw, fn] = where(src[fn], src.merge[fn] + kw, 0.5) */
  cn_ll_expr *cond = get(ctx, 0, CN_PREC_INT64, idx_list(ctx, 1, cn_index_iter(fn)));
  cn_ll_expr *merged = op(ctx, CN_OP_ADD, CN_PREC_INT64,
                          get(ctx, 1, CN_PREC_INT64, idx_list(ctx, 1, cn_index_iter(fn))),
                          index_expr(ctx, cn_index_iter(kw)), NULL);
  cn_ll_expr *chosen =
      op(ctx, CN_OP_WHERE, CN_PREC_SINGLE, cond, merged, constant(ctx, CN_PREC_SINGLE, 0.5));
  cn_ll_stmt *grid =
      loop(ctx, kw, 0, 2,
           loop(ctx, fn, 0, 4,
                set(ctx, 2, idx_list(ctx, 2, cn_index_iter(kw), cn_index_iter(fn)), chosen)));
  /* rnd[0..3] = uniform(threefry-free word {i1 + 5, 7, 0, 0}) via a vector store at i2 = 0. */
  cn_ll_expr *word = op(ctx, CN_OP_ADD, CN_PREC_INT64, index_expr(ctx, cn_index_iter(i1)),
                        constant(ctx, CN_PREC_INT64, 5), NULL);
  cn_ll_stmt *vec = loop(ctx, i1, 0, 1,
                         loop(ctx, i2, 0, 1,
                              set_vec(ctx, 3, idx_list(ctx, 1, cn_index_iter(i2)),
                                      cn_vec_length(CN_PREC_SINGLE), word)));
  /* pos[buf] = 2 * buf - 1 + I - I + cn_lane - cn_lane, as embedded (uint32-wrapped) indices. */
  cn_symbol terms[3] = {buf, mac, helper};
  int64_t coeffs[3] = {2, 0, 0};
  cn_ll_stmt *index_loop =
      loop(ctx, buf, 0, 4,
           loop(ctx, mac, 0, 1,
                loop(ctx, helper, 0, 1,
                     set(ctx, 4, idx_list(ctx, 1, cn_index_iter(buf)),
                         index_expr(ctx, cn_index_affine(3, terms, coeffs, -1))))));
  cn_ll_param params[5] = {{src, false}, {src, true}, {dst, false}, {rnd, false}, {pos, false}};
  cn_ll_proc *proc = proc_new(
      ctx, "names",
      seq(ctx, 4, comment(ctx, "tricky */ comment /* here\nsecond line"), grid, vec, index_loop), 5,
      params, 0, NULL);

  const char *text = routine_text(ctx, proc);
  CHECK_HAS(text, "const int64_t *restrict n3d_src__1, const int64_t *restrict n3d_src__1_merge, "
                  "float *restrict n_2, float *restrict ncn_rnd_3, int64_t *restrict int_4)");
  CHECK_HAS(text, "/* tricky * / comment / * here second line */");
  CHECK_HAS(text, "for (int64_t int_0 = 0; int_0 < 2; ++int_0) {");
  CHECK_HAS(text, "for (int64_t exp_1 = 0; exp_1 < 4; ++exp_1) {");
  CHECK_HAS(text, "for (int64_t i_2 = 0; i_2 < 1; ++i_2) {");
  CHECK_HAS(text, "for (int64_t i_3 = 0; i_3 < 1; ++i_3) {");
  CHECK_HAS(text, "for (int64_t n3d_src__1_4 = 0; n3d_src__1_4 < 4; ++n3d_src__1_4) {");
  CHECK_HAS(text, "for (int64_t I_5 = 0; I_5 < 1; ++I_5) {");
  CHECK_HAS(text, "for (int64_t ncn_lane = 0; ncn_lane < 1; ++ncn_lane) {");
  CHECK_HAS(text, "n_2[4 * int_0 + exp_1]");
  CHECK_HAS(text, "(int64_t)(uint32_t)(2 * n3d_src__1_4 - 1)");
  CHECK_HAS(text, "cn_u4x32_to_single_uniform_vec(");

  /* The reference: the interpreter on the same procedure, then the C backend on fresh buffers. */
  void *compiled = NULL;
  CHECK_INT(cn_backend_interp.compile(ctx, proc, &compiled, NULL), CN_OK);
  void *buffers[5];
  for (int p = 0; p < 5; p++) buffers[p] = cn_node_buffer(params[p].node, params[p].merge);
  CHECK_INT(cn_backend_interp.run(ctx, compiled, buffers, NULL), CN_OK);
  cn_backend_interp.release(compiled);
  double ref_dst[8], ref_rnd[4], ref_pos[4], got[8];
  CHECK_INT(cn_node_get_values(dst, false, ref_dst, 8), CN_OK);
  CHECK_INT(cn_node_get_values(rnd, false, ref_rnd, 4), CN_OK);
  CHECK_INT(cn_node_get_values(pos, false, ref_pos, 4), CN_OK);
  /* Independent expectations of the deterministic parts. */
  static const double expected_dst[8] = {0.5, 20, 30, 40, 0.5, 21, 31, 41};
  for (int c = 0; c < 8; c++) CHECK_NEAR(ref_dst[c], expected_dst[c], 0);
  static const double expected_pos[4] = {4294967295.0, 1, 3, 5};
  for (int c = 0; c < 4; c++) CHECK_NEAR(ref_pos[c], expected_pos[c], 0);
  for (int c = 0; c < 4; c++) CHECK(ref_rnd[c] >= 0 && ref_rnd[c] < 1);

  double zeros[8] = {0};
  CHECK_INT(cn_node_set_values(dst, false, zeros, 8), CN_OK);
  CHECK_INT(cn_node_set_values(rnd, false, zeros, 4), CN_OK);
  CHECK_INT(cn_node_set_values(pos, false, zeros, 4), CN_OK);
  CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
  CHECK_INT(cn_node_get_values(dst, false, got, 8), CN_OK);
  for (int c = 0; c < 8; c++) CHECK_NEAR(got[c], ref_dst[c], 0);
  CHECK_INT(cn_node_get_values(rnd, false, got, 4), CN_OK);
  for (int c = 0; c < 4; c++) CHECK_NEAR(got[c], ref_rnd[c], 0);
  CHECK_INT(cn_node_get_values(pos, false, got, 4), CN_OK);
  for (int c = 0; c < 4; c++) CHECK_NEAR(got[c], ref_pos[c], 0);
  cn_ctx_destroy(ctx);
}

/* A procedure without buffers or symbols still makes a valid (warning-free) file. */
static void test_empty(void) {
  cn_ctx *ctx = test_ctx();
  cn_ll_proc *proc = proc_new(ctx, "empty", seq(ctx, 0), 0, NULL, 0, NULL);
  static const char golden[] = "/* ---- routine empty ---- */\n"
                               "static void empty(void) {\n"
                               "}\n"
                               "void empty_entry(void *const *buffers, const int64_t *syms);\n"
                               "void empty_entry(void *const *buffers, const int64_t *syms) {\n"
                               "  (void)buffers;\n"
                               "  (void)syms;\n"
                               "  empty();\n"
                               "}\n";
  CHECK_STR(routine_text(ctx, proc), golden);
  CHECK_INT(run_c(ctx, proc, NULL), CN_OK);
  cn_ctx_destroy(ctx);
}

/* ---- Long routines: kernels and steps ---- */

/* Occurrences of needle in text. */
static int count_occurrences(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* 38 statements, more than one function takes: 36 of them x[(s+1) % 5][i] = x[s % 5][i] +
 * x[s % 5][t] (t a static index) share one kernel, y[j] = x0[j + 1] and x4[i] = x4[i] + x4[i]
 * (one buffer read and written) get their own; steps of 32 statements call them. The text must
 * compile with -Werror and agree with plain C loops and with the interpreter. */
static void test_kernels(void) {
  cn_ctx *ctx = test_ctx();
  int64_t dims[1] = {4}, y_dims[1] = {3};
  cn_node *x[5];
  for (int b = 0; b < 5; b++) {
    char label[8];
    snprintf(label, sizeof label, "x%d", b);
    x[b] = cn_node_create(ctx, label, CN_PREC_DOUBLE, 1, dims);
    CHECK(x[b] != NULL);
  }
  cn_node *y = cn_node_create(ctx, "y", CN_PREC_DOUBLE, 1, y_dims);
  CHECK(y != NULL);
  cn_symbol t = cn_symbol_create(ctx, "t", 4), i = cn_symbol_create(ctx, "i", 4),
            j = cn_symbol_create(ctx, "j", 3);
  cn_ll_stmt *items[40];
  int n = 0;
  items[n++] = comment(ctx, "a chain over five buffers");
  for (int s = 0; s < 36; s++) {
    int dst = (s + 1) % 5, src = s % 5;
    cn_ll_expr *sum = op(ctx, CN_OP_ADD, CN_PREC_DOUBLE,
                         get(ctx, src, CN_PREC_DOUBLE, idx_list(ctx, 1, cn_index_iter(i))),
                         get(ctx, src, CN_PREC_DOUBLE, idx_list(ctx, 1, cn_index_iter(t))), NULL);
    items[n++] = loop(ctx, i, 0, 4, set(ctx, dst, idx_list(ctx, 1, cn_index_iter(i)), sum));
  }
  items[n++] = loop(ctx, j, 0, 3,
                    set(ctx, 5, idx_list(ctx, 1, cn_index_iter(j)),
                        get(ctx, 0, CN_PREC_DOUBLE, idx_list(ctx, 1, affine1(j, 1, 1)))));
  cn_index *x4_i = idx_list(ctx, 1, cn_index_iter(i));
  items[n++] = loop(ctx, i, 0, 4,
                    set(ctx, 4, x4_i,
                        op(ctx, CN_OP_ADD, CN_PREC_DOUBLE, get(ctx, 4, CN_PREC_DOUBLE, x4_i),
                           get(ctx, 4, CN_PREC_DOUBLE, x4_i), NULL)));
  cn_ll_stmt *body = stmt_new(ctx, CN_LL_SEQ);
  body->u.seq.count = n;
  body->u.seq.items = items;
  cn_ll_param params[6] = {{x[0], false}, {x[1], false}, {x[2], false},
                           {x[3], false}, {x[4], false}, {y, false}};
  cn_ll_proc *proc = proc_new(ctx, "chain", body, 6, params, 1, &t);

  const char *text = routine_text(ctx, proc);
  CHECK_INT(count_occurrences(text, "CN_NOINLINE static void cn_kernel_"), 3);
  CHECK_INT(count_occurrences(text, "CN_NOINLINE static void cn_step_"), 2);
  CHECK_INT(count_occurrences(text, "  cn_kernel_0("), 36);
  CHECK_HAS(text, "CN_NOINLINE static void cn_kernel_0(double *restrict x1_2, const double "
                  "*restrict x0_1, int64_t t) {\n"
                  "  for (int64_t i = 0; i < 4; ++i) {\n"
                  "    x1_2[i] = (x0_1[i] + x0_1[t]);\n"
                  "  }\n"
                  "}\n");
  CHECK_HAS(text, "CN_NOINLINE static void cn_kernel_1(double *restrict y_6, const double "
                  "*restrict x0_1) {\n");
  CHECK_HAS(text, "CN_NOINLINE static void cn_kernel_2(double *restrict x4_5) {\n");
  CHECK_HAS(text, "CN_NOINLINE static void cn_step_0(void *const *cn_buffers, const int64_t "
                  "*cn_syms) {\n"
                  "  double *x1_2 = cn_buffers[1];\n"
                  "  double *x0_1 = cn_buffers[0];\n");
  CHECK_HAS(text, "  const int64_t t = cn_syms[0];\n"
                  "  /* a chain over five buffers */\n"
                  "  cn_kernel_0(x1_2, x0_1, t);\n"
                  "  cn_kernel_0(x2_3, x1_2, t);\n");
  CHECK_HAS(text, "  cn_kernel_0(x0_1, x4_5, t);\n");
  CHECK_HAS(text, "  cn_kernel_1(y_6, x0_1);\n  cn_kernel_2(x4_5);\n}\n");
  CHECK_HAS(text, "void chain_entry(void *const *buffers, const int64_t *syms) {\n"
                  "  cn_step_0(buffers, syms);\n"
                  "  cn_step_1(buffers, syms);\n"
                  "}\n");

  /* Plain C loops, then the interpreter and the generated C from the same start. */
  static const double start[4] = {1, -2, 0.5, 3};
  const int64_t syms[1] = {2};
  double ref[5][4] = {{0}}, ref_y[3];
  memcpy(ref[0], start, sizeof start);
  for (int s = 0; s < 36; s++)
    for (int c = 0; c < 4; c++) ref[(s + 1) % 5][c] = ref[s % 5][c] + ref[s % 5][syms[0]];
  for (int c = 0; c < 3; c++) ref_y[c] = ref[0][c + 1];
  for (int c = 0; c < 4; c++) ref[4][c] += ref[4][c];
  double zeros[4] = {0};
  for (int backend = 0; backend < 2; backend++) {
    CHECK_INT(cn_node_set_values(x[0], false, start, 4), CN_OK);
    for (int b = 1; b < 5; b++) CHECK_INT(cn_node_set_values(x[b], false, zeros, 4), CN_OK);
    CHECK_INT(cn_node_set_values(y, false, zeros, 3), CN_OK);
    if (backend == 0) {
      void *compiled = NULL, *buffers[6];
      CHECK_INT(cn_backend_interp.compile(ctx, proc, &compiled, NULL), CN_OK);
      for (int p = 0; p < 6; p++) buffers[p] = cn_node_buffer(params[p].node, false);
      CHECK_INT(cn_backend_interp.run(ctx, compiled, buffers, syms), CN_OK);
      cn_backend_interp.release(compiled);
    } else {
      CHECK_INT(run_c(ctx, proc, syms), CN_OK);
    }
    double got[4];
    for (int b = 0; b < 5; b++) {
      CHECK_INT(cn_node_get_values(x[b], false, got, 4), CN_OK);
      for (int c = 0; c < 4; c++) CHECK_NEAR(got[c], ref[b][c], 0);
    }
    CHECK_INT(cn_node_get_values(y, false, got, 3), CN_OK);
    for (int c = 0; c < 3; c++) CHECK_NEAR(got[c], ref_y[c], 0);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Failures ---- */

static void test_compiler_failures(void) {
  /* The compiler rejects the file: its diagnostics and the generated file are in the message. */
  cn_ctx *ctx = test_ctx();
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", "-O0 -shared -fPIC -include cn_no_such_header.h"),
            CN_OK);
  cn_ll_proc *proc = matmul_proc(ctx);
  void *compiled = NULL;
  const char *source = NULL;
  CHECK_INT(cn_backend_c.compile(ctx, proc, &compiled, &source), CN_ERR_COMPILE);
  CHECK(compiled == NULL);
  const char *msg = cn_ctx_error(ctx);
  CHECK_HAS(msg, "C compiler failed on generated file ");
  CHECK_HAS(msg, cache_dir);
  CHECK_HAS(msg, "/matmul-");
  CHECK_HAS(msg, ".c (exit status ");
  CHECK_HAS(msg, "cn_no_such_header.h");
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 1);
  cn_ctx_destroy(ctx);

  /* A compiler command that fails silently. */
  ctx = test_ctx();
  CHECK_INT(cn_ctx_set_option(ctx, "cc", "false"), CN_OK);
  proc = matmul_proc(ctx);
  CHECK_INT(cn_backend_c.compile(ctx, proc, &compiled, &source), CN_ERR_COMPILE);
  CHECK_HAS(cn_ctx_error(ctx), "(exit status 1)");
  CHECK_HAS(cn_ctx_error(ctx), ".c");
  cn_ctx_destroy(ctx);

  /* Flags that cannot be split into words are refused before any file is written. */
  ctx = test_ctx();
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", "-O0 -shared -fPIC -DCN_BAD='( "), CN_OK);
  proc = matmul_proc(ctx);
  CHECK_INT(cn_backend_c.compile(ctx, proc, &compiled, &source), CN_ERR_INVALID);
  CHECK(compiled == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "unterminated single quote at character 28 of the compiler flags");
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 0);
  cn_ctx_destroy(ctx);

  /* No temporary and no object survives the failures; the generated files stay for inspection:
   * matmul has its 2 objects of test_cache_hit with their records and 2 + 2 sources; conv,
   * bounded, names, empty and chain 3 files each (source, object, record). */
  CHECK_INT(count_files("matmul-", ".so"), 2);
  CHECK_INT(count_files("matmul-", ".sum"), 2);
  CHECK_INT(count_files("matmul-", ".c"), 4);
  CHECK_INT(count_files("", ""), 2 + 8 + 5 * 3);
}

static void test_cache_dir_errors(void) {
  char plain[512], below[600];
  snprintf(plain, sizeof plain, "%s/plain-file", cache_dir);
  snprintf(below, sizeof below, "%s/sub/dir", plain);
  FILE *f = fopen(plain, "w");
  CHECK(f != NULL);
  if (f) fclose(f);

  cn_ctx *ctx = test_ctx();
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", below), CN_OK);
  cn_ll_proc *proc = matmul_proc(ctx);
  void *compiled = NULL;
  CHECK_INT(cn_backend_c.compile(ctx, proc, &compiled, NULL), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), below);
  CHECK_HAS(cn_ctx_error(ctx), "Not a directory");
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", plain), CN_OK);
  CHECK_INT(cn_backend_c.compile(ctx, proc, &compiled, NULL), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), plain);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 0);
  cn_ctx_destroy(ctx);
}

int main(void) {
  if (!mkdtemp(cache_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_matmul();
  test_cache_hit();
  test_padded_read();
  test_affine_bounds();
  test_names_and_features();
  test_empty();
  test_kernels();
  test_compiler_failures();
  test_cache_dir_errors();
  remove_cache_dir();
  CHECK_DONE();
}
