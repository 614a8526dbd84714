/* Runs of GEMM plans (issue 17, src/sched/gemm.c and src/backend/cgen_gemm.c): nests built by
 * hand, planned with the smallest work threshold and small cache sizes (so that every size below
 * crosses row, column and reduction blocks), run by the generated C on 1, 2 and 3 threads and
 * compared bit for bit with an oracle: for matmuls a loop in this file (each cell folded over k in
 * order, c + a * b rounded twice in exact mode, fmaf in fused mode), for the other shapes the
 * unplanned nest's generated C in exact mode and, in fused mode, the interpreter running the
 * planned nest, whose store it computes as one fused multiply-add. Sizes hit every edge of the
 * register tile (1, MR - 1, MR + 1, NR +- 1 for the default 6 x 64 tile of AVX-512 single, primes
 * 61 and 127) and of the blocks; a fused result stays within the stated bound of the exact one.
 * Also: transposed operands, a c whose columns are not adjacent (the tile path), batched attention
 * and its causal triangles (k < q + 1, - 3, + 9: only the triangle's cells written), triangles
 * of steps (P V and the gradient of V: each row its own prefix or suffix of the reduction, across
 * two blocks of kc), a c cleared
 * to +0 before the product (the plan's c_zero: the clear taken, c never read; a fill of 1 kept),
 * a strided, dilated, padded convolution (implicit GEMM), a convolution's input gradient (its
 * window loops hoisted outside, descending, around a GEMM), double precision, half, bfloat16 and
 * fp8 (each update rounded to the precision), the cell-by-cell path of a failed allocation
 * (CN_GEMM_NO_MEMORY), and the generated code under -Wall -Wextra -Werror with and without
 * -march=native (generic vectors), which includes neither <immintrin.h> nor <tgmath.h>. */
#include "backend/gemm_lib.h"
#include "loops_check.h"
#include "numeric/numeric.h"
#include "runtime/pool.h"
#include "sched/sched.h"
#include "snapshot.h"

#include <math.h>

/* ---- Running ---- */

/* The number of CN_LL_GEMM statements in s. */
static int plans_in(const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ: {
    int n = 0;
    for (int i = 0; i < s->u.seq.count; i++) n += plans_in(s->u.seq.items[i]);
    return n;
  }
  case CN_LL_FOR: return plans_in(s->u.loop.body);
  case CN_LL_IF: return plans_in(s->u.guard.body);
  case CN_LL_GEMM: return 1;
  default: return 0;
  }
}

/* Plans proc in place for the mode (small blocks: kc 256, nc 128, mc 64 single / 32 double). */
static void plan(cn_ctx *ctx, cn_ll_proc *proc, bool exact) {
  cn_sched_options opts = {.passes = CN_SCHED_GEMM,
                           .exact = exact,
                           .gemm_work = 1,
                           .l1_bytes = 1024,
                           .llc_bytes = 256 * 4 * 2 * 128};
  CHECK_INT(cn_sched_gemm_plans(ctx, proc, &opts), CN_OK);
  CHECK_INT(plans_in(proc->body), 1);
}

/* The occurrences of `word` in `text`. */
static int occurrences(const char *text, const char *word) {
  int n = 0;
  for (const char *at = strstr(text, word); at; at = strstr(at + 1, word)) n++;
  return n;
}

/* Runs the planned proc on the generated C from `start` with 1, 2 and 3 threads; each time param
 * `out`'s buffer must equal `want` (bytes) bit for bit. Where the text has GEMMs of the GEMM
 * library (backend/gemm_lib.h), twice: as compiled in the process (the library runs them: its
 * count of runs grows) and with -DCN_STANDALONE added to the flags (the generated drivers, as an
 * exported model compiles them). */
static void run_threads(cn_ctx *ctx, const cn_ll_proc *proc, const snapshot *start, int out,
                        const void *want, size_t bytes, const char *what) {
  char flags[512];
  snprintf(flags, sizeof flags, "%s", cn_cc_option(ctx, "cflags"));
  for (int standalone = 0; standalone < 2; standalone++) {
    void *compiled = NULL;
    const char *source = NULL;
    cn_status st = cn_backend_c.compile(ctx, proc, &compiled, &source);
    CHECK_MSG(st == CN_OK, "%s: %s", what, cn_ctx_error(ctx));
    if (st != CN_OK) break;
    bool library = strstr(source, "_gemm_lib(cn_args") != NULL;
    /* no intrinsics or type-generic math header (issue 29: <immintrin.h> was half of a GEMM
     * file's compile time): the builtins behind them, and __builtin_fma in the cell-by-cell path
     */
    CHECK_MSG(!strstr(source, "immintrin") && !strstr(source, "tgmath"), "%s: headers", what);
    /* issue 29: each GEMM calls its micro-kernel at one place, direct and edge tiles alike (an
     * inlined copy per call was a sixth of a GEMM's compile time), and the edge tile's gather is
     * one function of the file, not a loop per GEMM */
    int kernels = occurrences(source, "static inline void cn_ukr_");
    CHECK_MSG(kernels > 0 && occurrences(source, "cn_ukr_") == 2 * kernels,
              "%s: %d micro-kernels, %d mentions", what, kernels, occurrences(source, "cn_ukr_"));
    CHECK_MSG(occurrences(source, "static void cn_gemm_gather_f32(") <= 1, "%s: gathers", what);
    void *bufs[SNAPSHOT_MAX_PARAMS];
    for (int k = 0; k < proc->n_params; k++)
      bufs[k] = cn_node_buffer(proc->params[k].node, proc->params[k].merge);
    for (int threads = 1; threads <= 3; threads++) {
      snapshot_restore(proc, start);
      cn_pool *pool = threads > 1 ? cn_pool_of(ctx, threads) : NULL;
      cn_parallel par = cn_pool_parallel(pool);
      int64_t library_runs = cn_gemm_lib_runs();
      st = pool ? cn_backend_c.run_parallel(ctx, compiled, bufs, NULL, &par)
                : cn_backend_c.run(ctx, compiled, bufs, NULL);
      CHECK_INT(st, CN_OK);
      CHECK_MSG((cn_gemm_lib_runs() > library_runs) == (library && !standalone),
                "%s: the GEMM library ran %lld GEMMs (%s)", what,
                (long long)(cn_gemm_lib_runs() - library_runs),
                standalone ? "standalone" : "in process");
      size_t at = 0;
      while (at < bytes &&
             ((const unsigned char *)bufs[out])[at] == ((const unsigned char *)want)[at])
        at++;
      CHECK_MSG(at == bytes, "%s%s: %d threads differ from the oracle from byte %zu on", what,
                standalone ? " (standalone)" : "", threads, at);
    }
    cn_backend_c.release(compiled);
    if (!library) break;
    char more[600];
    snprintf(more, sizeof more, "%s%s", flags, standalone ? "" : " -DCN_STANDALONE");
    CHECK_INT(cn_ctx_set_option(ctx, "cflags", more), CN_OK);
  }
  CHECK_INT(cn_ctx_set_option(ctx, "cflags", flags), CN_OK);
}

/* ---- Matmuls against a loop of this file ---- */

/* c[i, j] := c[i, j] + a[i, k] * b[k, j], loops i, j, k; params a, b, c. */
static cn_ll_proc *matmul(cn_ctx *ctx, cn_node *const *abc, int64_t m, int64_t n, int64_t k) {
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            r = cn_symbol_create(ctx, "r", 0);
  cn_prec prec = abc[2]->prec;
  cn_ll_expr *product = cn_lb_op(
      ctx, CN_OP_MUL, prec,
      cn_lb_get(ctx, 0, prec, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(r))),
      cn_lb_get(ctx, 1, prec, cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(j))), NULL);
  cn_ll_stmt *body = cn_lb_loop(
      ctx, i, 0, m,
      cn_lb_loop(ctx, j, 0, n,
                 cn_lb_loop(ctx, r, 0, k,
                            cn_lb_accum(ctx, 2, prec,
                                        cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)),
                                        CN_OP_ADD, product))));
  cn_ll_param params[3] = {{abc[0], false}, {abc[1], false}, {abc[2], false}};
  return cn_lb_proc(ctx, "mm", body, 3, params, 0, NULL);
}

/* The oracle: every cell folded over k in order. The product and the sum are separate
 * statements, so no compiler contracts them (clang's default -ffp-contract=on fuses within one
 * expression only). */
static void matmul_oracle(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                          bool fused) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = c[i * n + j];
      for (int64_t r = 0; r < k; r++) {
        if (fused) {
          acc = fmaf(a[i * k + r], b[r * n + j], acc);
        } else {
          float p = a[i * k + r] * b[r * n + j];
          acc = acc + p;
        }
      }
      c[i * n + j] = acc;
    }
}

static void check_matmul(int64_t m, int64_t n, int64_t k) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, m, k),
                     node(ctx, "b", CN_PREC_SINGLE, 2, k, n),
                     node(ctx, "c", CN_PREC_SINGLE, 2, m, n)};
  for (int t = 0; t < 3; t++)
    fill_spread(abc[t], (uint64_t)(t + 1) * 7919u + (uint64_t)(m * n * k));
  size_t bytes = (size_t)(m * n) * sizeof(float);
  float *exact = malloc(bytes), *fused = malloc(bytes);
  CHECK(exact && fused);
  char what[96];
  for (int mode = 0; exact && fused && mode < 2; mode++) {
    bool is_exact = mode == 0;
    float *want = is_exact ? exact : fused;
    memcpy(want, cn_node_buffer(abc[2], false), bytes);
    matmul_oracle(cn_node_buffer(abc[0], false), cn_node_buffer(abc[1], false), want, m, n, k,
                  !is_exact);
    cn_ll_proc *proc = matmul(ctx, abc, m, n, k);
    plan(ctx, proc, is_exact);
    snapshot start;
    snapshot_save(proc, &start);
    snprintf(what, sizeof what, "matmul %lldx%lldx%lld %s", (long long)m, (long long)n,
             (long long)k, is_exact ? "exact" : "fma");
    run_threads(ctx, proc, &start, 2, want, bytes, what);
    snapshot_restore(proc, &start);
    snapshot_release(proc, &start);
  }
  /* the fused result is within the error bound of both: |fma - exact| <= 2 k u (|c| + sum |ab|) */
  const float *a = cn_node_buffer(abc[0], false), *b = cn_node_buffer(abc[1], false);
  const float *c0 = cn_node_buffer(abc[2], false);
  int outside = 0;
  for (int64_t i = 0; exact && fused && i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double magnitude = fabs(c0[i * n + j]);
      for (int64_t r = 0; r < k; r++) magnitude += fabs((double)a[i * k + r] * b[r * n + j]);
      double bound = 2.0 * (double)(k + 1) * ldexp(1.0, -24) * magnitude;
      outside += fabs((double)fused[i * n + j] - exact[i * n + j]) > bound;
    }
  CHECK_MSG(outside == 0, "matmul %lldx%lldx%lld: %d fused cells outside the bound", (long long)m,
            (long long)n, (long long)k, outside);
  free(exact);
  free(fused);
  cn_ctx_destroy(ctx);
}

static void test_matmul_edges(void) {
  static const int64_t sizes[][3] = {{1, 1, 1},      {5, 63, 1},    {7, 65, 61},
                                     {61, 127, 7},   {127, 1, 127}, {6, 64, 256},
                                     {13, 129, 300}, {2, 200, 9},   {300, 200, 520}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    check_matmul(sizes[s][0], sizes[s][1], sizes[s][2]);
}

/* ---- Other shapes against the interpreter ---- */

typedef cn_ll_proc *builder(cn_ctx *ctx, cn_node *const *nodes);

/* Plans two copies of build's nest (exact, fused) and checks each against the interpreter, with
 * the flags given (NULL: the default) for the generated C. */
static void check_shape(const char *what, builder *build, cn_node *const *nodes, int n_nodes,
                        const char *cflags) {
  cn_ctx *ctx = nodes[0]->ctx;
  if (cflags) CHECK_INT(cn_ctx_set_option(ctx, "cflags", cflags), CN_OK);
  for (int t = 0; t < n_nodes; t++) fill_spread(nodes[t], (uint64_t)(t + 3) * 104729u);
  for (int mode = 0; mode < 2; mode++) {
    cn_ll_proc *plain = build(ctx, nodes), *planned = build(ctx, nodes);
    plan(ctx, planned, mode == 0);
    int out = n_nodes - 1; /* the output is the last param */
    snapshot start, want;
    snapshot_save(plain, &start);
    /* exact: the unplanned nest's generated C (a second backend besides the interpreter, which
     * computes the same bits); fused: the interpreter running the plan, its store one fmaf */
    snapshot_run(ctx, mode == 0 ? &cn_backend_c : &cn_backend_interp, plain,
                 mode == 0 ? plain : planned, &start, &want);
    char text[160];
    snprintf(text, sizeof text, "%s %s%s%s", what, mode == 0 ? "exact" : "fma", cflags ? " " : "",
             cflags ? cflags : "");
    run_threads(ctx, planned, &start, out, want.data[out], want.bytes[out], text);
    snapshot_restore(plain, &start);
    snapshot_release(plain, &start);
    snapshot_release(plain, &want);
  }
  if (cflags) CHECK_INT(cn_ctx_set_option(ctx, "cflags", NULL), CN_OK);
}

/* matmul over the nodes' dims (any precision). */
static cn_ll_proc *matmul_of_nodes(cn_ctx *ctx, cn_node *const *n) {
  return matmul(ctx, n, n[2]->dims[0], n[2]->dims[1], n[0]->dims[1]);
}

/* c[i, j] += at[k, i] * bt[j, k]: both operands transposed (strided packing). */
static cn_ll_proc *transposed(cn_ctx *ctx, cn_node *const *n) {
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_ll_expr *p = cn_lb_op(
      ctx, CN_OP_MUL, CN_PREC_SINGLE,
      cn_lb_get(ctx, 0, CN_PREC_SINGLE, cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(i))),
      cn_lb_get(ctx, 1, CN_PREC_SINGLE, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(k))),
      NULL);
  cn_ll_stmt *s =
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)),
                  CN_OP_ADD, p);
  cn_ll_stmt *body =
      cn_lb_loop(ctx, i, 0, n[2]->dims[0],
                 cn_lb_loop(ctx, j, 0, n[2]->dims[1], cn_lb_loop(ctx, k, 0, n[0]->dims[0], s)));
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "tr", body, 3, params, 0, NULL);
}

/* ct[j, i] += a[i, k] * b[k, j] in double precision: c's contiguous axis is i, which walks a
 * (a weight gradient's form); the plan exchanges the operands so that it is N. With a third node
 * of c [n, m, 2] written at [j, i, 1], no group is contiguous in c: every tile goes through a
 * buffer of its own (the tile path). */
static cn_ll_proc *columns_apart(cn_ctx *ctx, cn_node *const *n) {
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  const cn_prec d = CN_PREC_DOUBLE;
  cn_ll_expr *p = cn_lb_op(
      ctx, CN_OP_MUL, d,
      cn_lb_get(ctx, 0, d, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(k))),
      cn_lb_get(ctx, 1, d, cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(j))), NULL);
  cn_index *ji = n[2]->rank == 3
                     ? cn_lb_indices(ctx, 3, cn_index_iter(j), cn_index_iter(i), cn_index_fixed(1))
                     : cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(i));
  cn_ll_stmt *s = cn_lb_accum(ctx, 2, d, ji, CN_OP_ADD, p);
  cn_ll_stmt *body =
      cn_lb_loop(ctx, i, 0, n[0]->dims[0],
                 cn_lb_loop(ctx, j, 0, n[1]->dims[1], cn_lb_loop(ctx, k, 0, n[0]->dims[1], s)));
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "ca", body, 3, params, 0, NULL);
}

/* s[b, h, q, k] += qm[b, h, q, d] * km[b, h, k, d]: two batch loops; with a causal_offset, only
 * the triangle k < q + causal_offset (a plan's `tri`: the other cells keep their values). */
enum { NO_MASK = 1000000 };
static int64_t causal_offset = NO_MASK;
/* s stored [b, h, k, q]: c contiguous along M (q), which a plan without a triangle would turn
 * into N by exchanging the operands */
static bool scores_transposed = false;

static cn_ll_proc *attention(cn_ctx *ctx, cn_node *const *n) {
  const char *names[5] = {"b", "h", "q", "k", "d"};
  cn_symbol v[5];
  for (int a = 0; a < 5; a++) v[a] = cn_symbol_create(ctx, names[a], 0);
  int64_t ext[5] = {n[0]->dims[0], n[0]->dims[1], n[0]->dims[2], n[1]->dims[2], n[0]->dims[3]};
  cn_ll_expr *p = cn_lb_op(ctx, CN_OP_MUL, CN_PREC_SINGLE,
                           cn_lb_get(ctx, 0, CN_PREC_SINGLE,
                                     cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                                   cn_index_iter(v[2]), cn_index_iter(v[4]))),
                           cn_lb_get(ctx, 1, CN_PREC_SINGLE,
                                     cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                                   cn_index_iter(v[3]), cn_index_iter(v[4]))),
                           NULL);
  cn_ll_stmt *body = cn_lb_accum(
      ctx, 2, CN_PREC_SINGLE,
      scores_transposed ? cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                        cn_index_iter(v[3]), cn_index_iter(v[2]))
                        : cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                        cn_index_iter(v[2]), cn_index_iter(v[3])),
      CN_OP_ADD, p);
  for (int a = 4; a >= 0; a--) {
    body = cn_lb_loop(ctx, v[a], 0, ext[a], body);
    if (a == 3 && causal_offset != NO_MASK) { /* k < q + causal_offset */
      cn_ll_bound below = {affine1(v[2], 1, causal_offset), 1};
      body = cn_lb_bounds(ctx, body, 0, NULL, 1, &below);
    }
  }
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "att", body, 3, params, 0, NULL);
}

/* Triangles of steps, as causal attention's other products have them: P V (o[b, q, d] +=
 * p[b, q, k] * v[b, k, d] over k < q + steps_offset: each row its own prefix of the steps) when
 * steps_rows is false, the gradient of V (gv[b, k, d] += p[b, q, k] * g[b, q, d] over the rows
 * k < q + steps_offset: each row a suffix of the steps q) when true. */
static int64_t steps_offset = 1;
static bool steps_rows = false;

static cn_ll_proc *steps_triangle(cn_ctx *ctx, cn_node *const *n) {
  cn_symbol b = cn_symbol_create(ctx, "b", 0), q = cn_symbol_create(ctx, "q", 0),
            k = cn_symbol_create(ctx, "k", 0), d = cn_symbol_create(ctx, "d", 0);
  const cn_prec f = CN_PREC_SINGLE;
#define IDX(x, y, z) cn_lb_indices(ctx, 3, cn_index_iter(x), cn_index_iter(y), cn_index_iter(z))
  cn_ll_expr *p = cn_lb_op(ctx, CN_OP_MUL, f, cn_lb_get(ctx, 0, f, IDX(b, q, k)),
                           cn_lb_get(ctx, 1, f, steps_rows ? IDX(b, q, d) : IDX(b, k, d)), NULL);
  cn_ll_stmt *body = cn_lb_accum(ctx, 2, f, steps_rows ? IDX(b, k, d) : IDX(b, q, d), CN_OP_ADD, p);
#undef IDX
  cn_ll_bound below = {affine1(q, 1, steps_offset), 1};
  int64_t nq = n[0]->dims[1], nk = n[0]->dims[2], nd = n[1]->dims[2];
  if (steps_rows) /* b, q, k < q + offset, d */
    body = cn_lb_loop(
        ctx, b, 0, n[0]->dims[0],
        cn_lb_loop(ctx, q, 0, nq,
                   cn_lb_bounds(ctx, cn_lb_loop(ctx, k, 0, nk, cn_lb_loop(ctx, d, 0, nd, body)), 0,
                                NULL, 1, &below)));
  else /* b, q, d, k < q + offset */
    body = cn_lb_loop(ctx, b, 0, n[0]->dims[0],
                      cn_lb_loop(ctx, q, 0, nq,
                                 cn_lb_loop(ctx, d, 0, nd,
                                            cn_lb_bounds(ctx, cn_lb_loop(ctx, k, 0, nk, body), 0,
                                                         NULL, 1, &below))));
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "steps", body, 3, params, 0, NULL);
}

/* out[b, oh, ow, oc] += in[b, 2 oh + 3 kh - 1, 2 ow + 3 kw - 1, ic] * w[kh, kw, ic, oc]: stride 2,
 * dilation 3, one cell of padding on each side of in's spatial axes (its margins). */
static cn_ll_proc *conv(cn_ctx *ctx, cn_node *const *n) {
  const char *names[7] = {"b", "oh", "ow", "oc", "kh", "kw", "ic"};
  cn_symbol v[7];
  for (int a = 0; a < 7; a++) v[a] = cn_symbol_create(ctx, names[a], 0);
  int64_t ext[7] = {n[2]->dims[0], n[2]->dims[1], n[2]->dims[2], n[2]->dims[3],
                    n[1]->dims[0], n[1]->dims[1], n[1]->dims[2]};
  cn_ll_expr *p =
      cn_lb_op(ctx, CN_OP_MUL, CN_PREC_SINGLE,
               cn_lb_get(ctx, 0, CN_PREC_SINGLE,
                         cn_lb_indices(ctx, 4, cn_index_iter(v[0]), affine2(v[1], 2, v[4], 3, -1),
                                       affine2(v[2], 2, v[5], 3, -1), cn_index_iter(v[6]))),
               cn_lb_get(ctx, 1, CN_PREC_SINGLE,
                         cn_lb_indices(ctx, 4, cn_index_iter(v[4]), cn_index_iter(v[5]),
                                       cn_index_iter(v[6]), cn_index_iter(v[3]))),
               NULL);
  cn_ll_stmt *body = cn_lb_accum(ctx, 2, CN_PREC_SINGLE,
                                 cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                               cn_index_iter(v[2]), cn_index_iter(v[3])),
                                 CN_OP_ADD, p);
  for (int a = 6; a >= 0; a--) body = cn_lb_loop(ctx, v[a], 0, ext[a], body);
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "conv", body, 3, params, 0, NULL);
}

/* ---- A cleared c: the plan starts from +0 (sched/fill.c, c_zero) ---- */

/* c := fill, then c += a * b (matmul's nest); the fill a nest of its own over c's dims. */
static cn_ll_proc *cleared_matmul(cn_ctx *ctx, cn_node *const *n, double fill) {
  cn_ll_proc *mm = matmul(ctx, n, n[2]->dims[0], n[2]->dims[1], n[0]->dims[1]);
  cn_symbol i = cn_symbol_create(ctx, "i0", 0), j = cn_symbol_create(ctx, "j0", 0);
  cn_ll_stmt *clear = cn_lb_loop(
      ctx, i, 0, n[2]->dims[0],
      cn_lb_loop(ctx, j, 0, n[2]->dims[1],
                 cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)),
                           cn_lb_num(ctx, n[2]->prec, fill))));
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  return cn_lb_proc(ctx, "mz", cn_lb_seq(ctx, 2, clear, mm->body), 3, params, 0, NULL);
}

static void test_from_zero(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* 300 steps: two blocks of kc = 256, the second reading what the first stored */
  cn_node *mm[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)19, (int64_t)300),
                    node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)300, (int64_t)70),
                    node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)19, (int64_t)70)};
  for (int t = 0; t < 3; t++) fill_spread(mm[t], (uint64_t)(t + 11) * 7919u);
  for (int mode = 0; mode < 2; mode++) {
    cn_sched_options opts = {.passes = CN_SCHED_GEMM | CN_SCHED_FILL,
                             .exact = mode == 0,
                             .gemm_work = 1,
                             .l1_bytes = 1024,
                             .llc_bytes = 256 * 4 * 2 * 128};
    cn_ll_proc *plain = cleared_matmul(ctx, mm, 0), *planned = cleared_matmul(ctx, mm, 0);
    CHECK_INT(cn_sched_proc(ctx, planned, &opts), CN_OK);
    const char *text = cn_ll_to_string(ctx, planned);
    CHECK_HAS(text, " from zero tile ");
    CHECK(!strstr(text, ":= 0\n")); /* the clear is gone */
    /* c starts random: a plan that read it instead of +0 would differ everywhere */
    snapshot start, want;
    snapshot_save(plain, &start);
    snapshot_run(ctx, mode == 0 ? &cn_backend_c : &cn_backend_interp, plain,
                 mode == 0 ? plain : planned, &start, &want);
    run_threads(ctx, planned, &start, 2, want.data[2], want.bytes[2],
                mode == 0 ? "from zero, exact" : "from zero, fma");
    snapshot_restore(plain, &start);
    snapshot_release(plain, &start);
    snapshot_release(plain, &want);
  }
  /* left alone: a fill of 1 (not +0), and a triangle (its cells past the bound keep the fill) */
  cn_sched_options opts = {.passes = CN_SCHED_GEMM | CN_SCHED_FILL, .gemm_work = 1};
  cn_ll_proc *ones = cleared_matmul(ctx, mm, 1);
  CHECK_INT(cn_sched_proc(ctx, ones, &opts), CN_OK);
  CHECK(!strstr(cn_ll_to_string(ctx, ones), "from zero"));
  CHECK_HAS(cn_ll_to_string(ctx, ones), ":= 1\n");
  cn_ctx_destroy(ctx);
}

static void test_shapes(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *tr[3] = {node(ctx, "at", CN_PREC_SINGLE, 2, (int64_t)67, (int64_t)29),
                    node(ctx, "bt", CN_PREC_SINGLE, 2, (int64_t)131, (int64_t)67),
                    node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)29, (int64_t)131)};
  check_shape("transposed", transposed, tr, 3, NULL);
  /* 3 columns: a panel of one vector, 4 columns on generic vectors, narrower than the blocks of
   * 8 the transposed packing walks (it wrote 8 per step, over the next step's cells) */
  cn_node *tr3[3] = {node(ctx, "at", CN_PREC_SINGLE, 2, (int64_t)67, (int64_t)29),
                     node(ctx, "bt", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)67),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)29, (int64_t)3)};
  check_shape("transposed, 3 columns, generic vectors", transposed, tr3, 3,
              "-O2 -std=c11 -Wall -Wextra -Werror -shared -fPIC");
  cn_node *ca[3] = {node(ctx, "a", CN_PREC_DOUBLE, 2, (int64_t)23, (int64_t)41),
                    node(ctx, "b", CN_PREC_DOUBLE, 2, (int64_t)41, (int64_t)37),
                    node(ctx, "ct", CN_PREC_DOUBLE, 2, (int64_t)37, (int64_t)23)};
  check_shape("c contiguous along M, double", columns_apart, ca, 3, NULL);
  cn_ll_proc *swapped = columns_apart(ctx, ca);
  plan(ctx, swapped, true);
  CHECK_HAS(cn_ll_to_string(ctx, swapped), "gemm M=(j) N=(i) K=(k) ");
  CHECK_HAS(cn_ll_to_string(ctx, swapped), "ct[j, i] := ct[j, i] + b[k, j] * a[i, k]");
  cn_node *cs[3] = {ca[0], ca[1],
                    node(ctx, "cs", CN_PREC_DOUBLE, 3, (int64_t)37, (int64_t)23, (int64_t)2)};
  check_shape("columns apart, double", columns_apart, cs, 3, NULL);
  cn_ll_proc *apart = columns_apart(ctx, cs);
  plan(ctx, apart, true);
  CHECK_HAS(cn_ll_to_string(ctx, apart), "gemm M=(i) N=(j) K=(k) ");
  cn_node *att[3] = {
      node(ctx, "qm", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)17, (int64_t)11),
      node(ctx, "km", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)70, (int64_t)11),
      node(ctx, "s", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)17, (int64_t)70)};
  check_shape("attention", attention, att, 3, NULL);
  /* causal (k <= q: offset 1), a band below it (offset -3) and one above (offset 9); 17 queries
   * by 70 keys cross rows and columns of tiles and the columns no query reaches */
  const int64_t offsets[3] = {1, -3, 9};
  for (int o = 0; o < 3; o++) {
    causal_offset = offsets[o];
    char what[48];
    snprintf(what, sizeof what, "causal attention, k < q + %lld", (long long)causal_offset);
    check_shape(what, attention, att, 3, NULL);
    cn_ll_proc *tri = attention(ctx, att);
    plan(ctx, tri, true);
    char text[128];
    snprintf(text, sizeof text, "gemm M=(q) N=(k) K=(d) batch=(b, h) triangle N < M %c %lld ",
             causal_offset < 0 ? '-' : '+', (long long)llabs(causal_offset));
    CHECK_HAS(cn_ll_to_string(ctx, tri), text);
  }
  check_shape("causal attention, no scratch", attention, att, 3,
              "-O1 -std=c11 -DCN_GEMM_NO_MEMORY -shared -fPIC");
  /* the scores stored transposed: the triangle keeps its groups (no exchange of operands) */
  causal_offset = 1;
  scores_transposed = true;
  cn_node *att_t[3] = {
      att[0], att[1],
      node(ctx, "st", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)70, (int64_t)17)};
  check_shape("causal attention, scores transposed", attention, att_t, 3, NULL);
  scores_transposed = false;
  causal_offset = NO_MASK;
  /* triangles of steps: 270 rows by 280 steps (P V) and 280 rows by 270 steps (the gradient of
   * V): two blocks of kc = 256, rows whose steps end or start in either, tiles with no step in a
   * block; 11 columns */
  cn_node *pv[3] = {node(ctx, "p", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)270, (int64_t)280),
                    node(ctx, "v", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)280, (int64_t)11),
                    node(ctx, "o", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)270, (int64_t)11)};
  cn_node *gv[3] = {node(ctx, "p", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)270, (int64_t)280),
                    node(ctx, "g", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)270, (int64_t)11),
                    node(ctx, "gv", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)280, (int64_t)11)};
  const int64_t step_offsets[3] = {1, -3, 10}; /* the bound within the box: q + offset <= 280 */
  for (int rows = 0; rows < 2; rows++)
    for (int o = 0; o < 3; o++) {
      steps_rows = rows;
      steps_offset = step_offsets[o];
      char what[64];
      snprintf(what, sizeof what, "%s, offset %lld", rows ? "gradient of V" : "P V",
               (long long)steps_offset);
      check_shape(what, steps_triangle, rows ? gv : pv, 3, NULL);
      cn_ll_proc *tri = steps_triangle(ctx, rows ? gv : pv);
      plan(ctx, tri, true);
      char text[64];
      snprintf(text, sizeof text, "triangle %s %c %lld ", rows ? "M < K" : "K < M",
               steps_offset < 0 ? '-' : '+', (long long)llabs(steps_offset));
      CHECK_HAS(cn_ll_to_string(ctx, tri), text);
    }
  check_shape("gradient of V, no scratch", steps_triangle, gv, 3,
              "-O1 -std=c11 -DCN_GEMM_NO_MEMORY -shared -fPIC");
  steps_rows = false;
  check_shape("P V, no scratch", steps_triangle, pv, 3,
              "-O1 -std=c11 -DCN_GEMM_NO_MEMORY -shared -fPIC");
  /* narrow precisions: operands converted once when packed, every update rounded as the nest's
   * store rounds it (half through the instruction set's conversions, the others lane by lane) */
  const cn_prec narrow[3] = {CN_PREC_HALF, CN_PREC_BFLOAT16, CN_PREC_FP8};
  for (int p = 0; p < 3; p++) {
    cn_node *mm[3] = {node(ctx, "a", narrow[p], 2, (int64_t)19, (int64_t)67),
                      node(ctx, "b", narrow[p], 2, (int64_t)67, (int64_t)70),
                      node(ctx, "c", narrow[p], 2, (int64_t)19, (int64_t)70)};
    char what[64];
    snprintf(what, sizeof what, "%s matmul", cn_prec_name(narrow[p]));
    check_shape(what, matmul_of_nodes, mm, 3, NULL);
    if (p == 0) /* generic vectors: the lane-by-lane rounding of half */
      check_shape(what, matmul_of_nodes, mm, 3, "-O2 -std=c11 -Wall -Wextra -Werror -shared -fPIC");
  }
  /* in: 2 x 13 x 13 x 3 plus margins; out: 2 x 4 x 4 x 5; window 3 x 3 */
  cn_node *cv[3] = {
      node(ctx, "in", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)13, (int64_t)13, (int64_t)3),
      node(ctx, "w", CN_PREC_SINGLE, 4, (int64_t)3, (int64_t)3, (int64_t)3, (int64_t)5),
      node(ctx, "out", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)4, (int64_t)4, (int64_t)5)};
  CHECK_INT(cn_node_set_padding(cv[0], 1, 1, 1), CN_OK);
  CHECK_INT(cn_node_set_padding(cv[0], 2, 1, 1), CN_OK);
  check_shape("conv", conv, cv, 3, NULL);
  /* dout: 2 x 9 x 5 x 7; w: 7 x 3 x 3 x 20; din: 2 x 11 x 13 x 20 */
  cn_node *ig[3] = {
      node(ctx, "dout", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)9, (int64_t)5, (int64_t)7),
      node(ctx, "w", CN_PREC_SINGLE, 4, (int64_t)7, (int64_t)3, (int64_t)3, (int64_t)20),
      node(ctx, "din", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)11, (int64_t)13, (int64_t)20)};
  check_shape("input gradient", input_gradient_proc, ig, 3, NULL);
  cn_ll_proc *hoisted = input_gradient_proc(ctx, ig);
  plan(ctx, hoisted, true);
  CHECK_HAS(cn_ll_to_string(ctx, hoisted),
            "for kh_rev in 0..3:\n  for kw_rev in 0..3:\n    gemm M=(b, oh, ow) N=(ic) K=(oc) ");
  CHECK_HAS(cn_ll_to_string(ctx, hoisted),
            "din[b, oh - kh_rev + 2, 2*ow - 2*kw_rev + 4, ic] := din[b, oh - kh_rev + 2, 2*ow - "
            "2*kw_rev + 4, ic] + dout[b, oh, ow, oc] * w[oc, -kh_rev + 2, -kw_rev + 2, ic]");
  /* the generated code is clean under the user's strictest flags, on AVX-512 and on generic
   * vectors; without scratch memory every cell is computed one by one, in the same order */
  check_shape("transposed", transposed, tr, 3,
              "-O2 -march=native -std=c11 -Wall -Wextra -Werror -shared -fPIC");
  check_shape("conv", conv, cv, 3, "-O2 -std=c11 -Wall -Wextra -Werror -shared -fPIC");
  check_shape("attention", attention, att, 3, "-O1 -std=c11 -DCN_GEMM_NO_MEMORY -shared -fPIC");
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul_edges();
  test_shapes();
  test_from_zero();
  CHECK_DONE();
}
