/* The end-to-end cases of the foundation, shared by tests/test_e2e.c (interpreter and generated
 * C) and tests/test_backend_registry.c (a backend registered by the test): hand-built projections
 * records (the form projection inference will produce) lowered and run on each backend of
 * `backends`, each result compared with values worked out by hand or by a plain C loop written
 * independently here, and with the first backend's bits.
 *
 * Covered: matrix multiply (reduction from the missing iterator), matrix-vector, sum to scalar,
 * max accumulation, broadcast of a scalar, 1-D valid convolution, strided + dilated 2-D
 * convolution, padded convolution reading left of the array (margins reset to the neutral of
 * + and of max), interleave, diagonal read and write, non-surjective writes keeping neutrals,
 * fetch ops, a vectorized uniform, and a merge buffer. With e2e_threads, every case also runs on
 * generated C with every independent loop nest split across threads (option parallel_work 1) on
 * 1, 2 and 3 threads, with the same bits on each. */
#ifndef CN_TEST_E2E_CASES_H
#define CN_TEST_E2E_CASES_H

#include "check.h"

#include "cannl.h"
#include "ir/ir.h"

#include <stdlib.h>

/* The backends every case runs on, in order; the first one's bits are the others' reference. A
 * test sets them before e2e_run_all (a registered backend: tests/test_backend_registry.c). */
#define E2E_MAX_BACKENDS 4
static cn_backend_kind backends[E2E_MAX_BACKENDS] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static int n_backends = 2;
/* Whether run_both also runs each case on generated C split across threads (check_threads). */
static bool e2e_threads = true;

static cn_node *node(cn_ctx *ctx, const char *label, cn_prec prec, int rank, const int64_t *dims) {
  cn_node *n = cn_node_create(ctx, label, prec, rank, dims);
  CHECK_MSG(n != NULL, "%s", cn_ctx_error(ctx));
  return n;
}

static void set(cn_node *n, const double *values) {
  cn_status st = cn_node_set_values(n, false, values, (size_t)cn_node_numel(n));
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(n->ctx));
}

typedef void (*init_fn)(void *user);

/* The routines of check_threads that had a loop split across threads. */
static int parallel_routines;

/* `asgn` on generated C scheduled (every pass) with parallel_work 1 (every independent nest marked
 * parallel, however small), run from `init` on 1, 2 and 3 threads: `out` holds the same bits each
 * time. */
static void check_threads(cn_ctx *ctx, const char *name, const cn_asgn *asgn, init_fn init,
                          void *user, cn_node *out) {
  size_t count = (size_t)cn_node_numel(out);
  double *first = calloc(count ? count : 1, sizeof(double));
  double *got = calloc(count ? count : 1, sizeof(double));
  CHECK(first && got);
  /* Scheduled whatever $CANNL_SCHEDULE says (make test also runs the suite with it "none"). */
  CHECK(cn_ctx_set_option(ctx, "parallel_work", "1") == CN_OK);
  CHECK(cn_ctx_set_option(ctx, "schedule", "all") == CN_OK);
  cn_routine *r = first && got ? cn_routine_compile(ctx, asgn, CN_BACKEND_C, name) : NULL;
  CHECK_MSG(r != NULL, "%s threaded: %s", name, cn_ctx_error(ctx));
  CHECK(cn_ctx_set_option(ctx, "parallel_work", NULL) == CN_OK);
  CHECK(cn_ctx_set_option(ctx, "schedule", NULL) == CN_OK);
  for (int threads = 1; r && threads <= 3; threads++) {
    const char *count_text[] = {"", "1", "2", "3"};
    CHECK(cn_ctx_set_option(ctx, "threads", count_text[threads]) == CN_OK);
    if (init) init(user);
    CHECK_MSG(cn_routine_run(r) == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
    CHECK(cn_node_get_values(out, false, threads == 1 ? first : got, count) == CN_OK);
    if (threads > 1)
      CHECK_MSG(memcmp(first, got, count * sizeof(double)) == 0, "%s: %d threads differ", name,
                threads);
  }
  CHECK(cn_ctx_set_option(ctx, "threads", NULL) == CN_OK);
  if (r && strstr(cn_routine_loops(r), "(parallel)")) parallel_routines++;
  cn_routine_free(r);
  free(first);
  free(got);
}

/* Runs `asgn` on every backend, resetting inputs from `init` before each run, and compares the
 * node `out` with `expected` (count cells) within tol and with the first backend's bits; then
 * check_threads. */
static void run_both(cn_ctx *ctx, const char *name, const cn_asgn *asgn, init_fn init, void *user,
                     cn_node *out, const double *expected, double tol) {
  CHECK_MSG(asgn != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!asgn) return;
  size_t count = (size_t)cn_node_numel(out);
  double *got = calloc(count ? count : 1, sizeof(double));
  double *first = calloc(count ? count : 1, sizeof(double));
  CHECK(got && first);
  for (int b = 0; b < n_backends && got && first; b++) {
    const char *backend = cn_backend_name(backends[b]);
    if (init) init(user);
    cn_routine *r = cn_routine_compile(ctx, asgn, backends[b], name);
    CHECK_MSG(r != NULL, "%s on %s: %s", name, backend, cn_ctx_error(ctx));
    if (!r) continue;
    CHECK_MSG(cn_routine_run(r) == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
    CHECK(cn_node_get_values(out, false, got, count) == CN_OK);
    for (size_t i = 0; i < count; i++)
      CHECK_MSG((isnan(got[i]) && isnan(expected[i])) || got[i] == expected[i] ||
                    fabs(got[i] - expected[i]) <= tol,
                "%s on %s: cell %zu = %.17g, expected %.17g", name, backend, i, got[i],
                expected[i]);
    if (b == 0) memcpy(first, got, count * sizeof(double));
    CHECK_MSG(memcmp(first, got, count * sizeof(double)) == 0, "%s on %s: not the bits of %s", name,
              backend, cn_backend_name(backends[0]));
    cn_routine_free(r);
  }
  free(got);
  free(first);
  if (e2e_threads) check_threads(ctx, name, asgn, init, user, out);
}

static cn_index I(cn_symbol s) {
  return cn_index_iter(s);
}
static cn_index F(int64_t c) {
  return cn_index_fixed(c);
}
static cn_index A2(cn_symbol s1, int64_t c1, cn_symbol s2, int64_t c2, int64_t off) {
  cn_symbol syms[2] = {s1, s2};
  int64_t coeffs[2] = {c1, c2};
  return cn_index_affine(2, syms, coeffs, off);
}
static cn_index A1(cn_symbol s, int64_t c, int64_t off) {
  return cn_index_affine(1, &s, &c, off);
}

/* ---- matmul: c[i,k] =:+ a[i,j] * b[j,k]; j is reduced because the LHS map omits it ---- */
typedef struct {
  cn_node *a, *b, *c;
} mm_nodes;
static void mm_init(void *user) {
  mm_nodes *m = user;
  set(m->a, (double[]){1, 2, 3, 4, 5, 6});
  set(m->b, (double[]){7, 8, 9, 10, 11, 12});
  set(m->c, (double[]){100, 100, 100, 100}); /* stale contents the =: must clear */
}
static void test_matmul(cn_prec prec) {
  cn_ctx *ctx = cn_ctx_create();
  mm_nodes m = {node(ctx, "a", prec, 2, (int64_t[]){2, 3}),
                node(ctx, "b", prec, 2, (int64_t[]){3, 2}),
                node(ctx, "c", prec, 2, (int64_t[]){2, 2})};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_proj *p = cn_proj_create(ctx, 3, (cn_symbol[]){i, j, k}, (int64_t[]){2, 3, 2},
                              (cn_proj_tensor){2, (int64_t[]){2, 2}, (cn_index[]){I(i), I(k)}}, 2,
                              (cn_proj_tensor[]){{2, (int64_t[]){2, 3}, (cn_index[]){I(i), I(j)}},
                                                 {2, (int64_t[]){3, 2}, (cn_index[]){I(j), I(k)}}});
  CHECK(p && cn_proj_lhs_surjective(p) && !cn_proj_lhs_injective(p));
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, m.c, CN_OP_MUL,
                                (cn_buffer[]){{m.a, false}, {m.b, false}}, p);
  run_both(ctx, "matmul", asgn, mm_init, &m, m.c, (double[]){58, 64, 139, 154}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- matrix-vector and sum to a scalar ---- */
typedef struct {
  cn_node *a, *v, *out;
} mv_nodes;
static void mv_init(void *user) {
  mv_nodes *m = user;
  set(m->a, (double[]){1, 2, 3, 4, 5, 6});
  if (m->v) set(m->v, (double[]){1, 0, -1});
  set(m->out, (double[]){-50, -50});
}
static void test_matvec_and_sum(void) {
  cn_ctx *ctx = cn_ctx_create();
  mv_nodes m = {node(ctx, "a", CN_PREC_DOUBLE, 2, (int64_t[]){2, 3}),
                node(ctx, "v", CN_PREC_DOUBLE, 1, (int64_t[]){3}),
                node(ctx, "out", CN_PREC_DOUBLE, 1, (int64_t[]){2})};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_proj *p = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3},
                              (cn_proj_tensor){1, (int64_t[]){2}, (cn_index[]){I(i)}}, 2,
                              (cn_proj_tensor[]){{2, (int64_t[]){2, 3}, (cn_index[]){I(i), I(j)}},
                                                 {1, (int64_t[]){3}, (cn_index[]){I(j)}}});
  cn_asgn *mv = cn_asgn_accum(ctx, true, CN_OP_ADD, m.out, CN_OP_MUL,
                              (cn_buffer[]){{m.a, false}, {m.v, false}}, p);
  run_both(ctx, "matvec", mv, mv_init, &m, m.out, (double[]){-2, -2}, 0);

  /* s =:+ a, summing everything into a rank-0 node. */
  cn_node *s = node(ctx, "s", CN_PREC_DOUBLE, 0, NULL);
  cn_proj *ps = cn_proj_create(
      ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3}, (cn_proj_tensor){0, NULL, NULL}, 1,
      (cn_proj_tensor[]){{2, (int64_t[]){2, 3}, (cn_index[]){I(i), I(j)}}});
  CHECK(ps && cn_proj_lhs_surjective(ps) && !cn_proj_lhs_injective(ps));
  mv_nodes ms = {m.a, NULL, m.out};
  cn_asgn *sum = cn_asgn_accum(ctx, true, CN_OP_ADD, s, CN_OP_ID, (cn_buffer[]){{m.a, false}}, ps);
  run_both(ctx, "sum", sum, mv_init, &ms, s, (double[]){21}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- max accumulation `m =:@^ x` over the second axis, in a float and an integer precision,
 * where the pre-fill is -inf resp. the smallest int32 ---- */
static void test_max_accum(cn_prec prec) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", prec, 2, (int64_t[]){3, 2});
  cn_node *m = node(ctx, "m", prec, 1, (int64_t[]){3});
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_proj *p = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){3, 2},
                              (cn_proj_tensor){1, (int64_t[]){3}, (cn_index[]){I(i)}}, 1,
                              (cn_proj_tensor[]){{2, (int64_t[]){3, 2}, (cn_index[]){I(i), I(j)}}});
  set(x, (double[]){1, 5, -2, -7, -3, -3});
  cn_asgn *a = cn_asgn_accum(ctx, true, CN_OP_MAX, m, CN_OP_ID, (cn_buffer[]){{x, false}}, p);
  run_both(ctx, "max_accum", a, NULL, NULL, m, (double[]){5, -2, -3}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- broadcast of a scalar: r[i,j] =: s[0] * m[i,j] — bijective LHS map: plain write ---- */
typedef struct {
  cn_node *s, *m, *r;
} bc_nodes;
static void bc_init(void *user) {
  bc_nodes *b = user;
  set(b->s, (double[]){-2});
  set(b->m, (double[]){1, 2, 3, 4, 5, 6});
  set(b->r, (double[]){9, 9, 9, 9, 9, 9});
}
static void test_broadcast_scalar(void) {
  cn_ctx *ctx = cn_ctx_create();
  bc_nodes b = {node(ctx, "s", CN_PREC_SINGLE, 1, (int64_t[]){1}),
                node(ctx, "m", CN_PREC_SINGLE, 2, (int64_t[]){2, 3}),
                node(ctx, "r", CN_PREC_SINGLE, 2, (int64_t[]){2, 3})};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_proj *p = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, (int64_t[]){2, 3},
                              (cn_proj_tensor){2, (int64_t[]){2, 3}, (cn_index[]){I(i), I(j)}}, 2,
                              (cn_proj_tensor[]){{1, (int64_t[]){1}, (cn_index[]){F(0)}},
                                                 {2, (int64_t[]){2, 3}, (cn_index[]){I(i), I(j)}}});
  CHECK(p && cn_proj_lhs_surjective(p) && cn_proj_lhs_injective(p));
  cn_asgn *a = cn_asgn_accum(ctx, true, CN_OP_ADD, b.r, CN_OP_MUL,
                             (cn_buffer[]){{b.s, false}, {b.m, false}}, p);
  run_both(ctx, "broadcast", a, bc_init, &b, b.r, (double[]){-2, -4, -6, -8, -10, -12}, 0);
  /* The plain write reads no LHS: the loop IR has no `r[i, j] +`. */
  cn_routine *r = cn_routine_compile(ctx, a, CN_BACKEND_INTERP, "broadcast");
  CHECK(r && !strstr(cn_routine_loops(r), "r[i, j] +"));
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

/* ---- 1-D valid convolution: out[o] =:+ x[o + k] * w[k] ---- */
static void test_conv1d_valid(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t[]){6});
  cn_node *w = node(ctx, "w", CN_PREC_SINGLE, 1, (int64_t[]){3});
  cn_node *out = node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t[]){4});
  cn_symbol o = cn_symbol_create(ctx, "o", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_proj *p =
      cn_proj_create(ctx, 2, (cn_symbol[]){o, k}, (int64_t[]){4, 3},
                     (cn_proj_tensor){1, (int64_t[]){4}, (cn_index[]){I(o)}}, 2,
                     (cn_proj_tensor[]){{1, (int64_t[]){6}, (cn_index[]){A2(o, 1, k, 1, 0)}},
                                        {1, (int64_t[]){3}, (cn_index[]){I(k)}}});
  set(x, (double[]){1, 2, 3, 4, 5, 6});
  set(w, (double[]){1, 2, 3});
  cn_asgn *a =
      cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, (cn_buffer[]){{x, false}, {w, false}}, p);
  /* out[o] = x[o] + 2 x[o+1] + 3 x[o+2] */
  run_both(ctx, "conv1d", a, NULL, NULL, out, (double[]){14, 20, 26, 32}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- 2-D convolution, stride 2 and dilation 2, valid: 7 = 2*(3-1) + 1 + (2-1)*2 ---- */
static void test_conv2d_strided_dilated(void) {
  cn_ctx *ctx = cn_ctx_create();
  enum { IN = 7, K = 2, OUT = 3, S = 2, D = 2 };
  cn_node *x = node(ctx, "x", CN_PREC_DOUBLE, 2, (int64_t[]){IN, IN});
  cn_node *w = node(ctx, "w", CN_PREC_DOUBLE, 2, (int64_t[]){K, K});
  cn_node *out = node(ctx, "out", CN_PREC_DOUBLE, 2, (int64_t[]){OUT, OUT});
  cn_symbol oh = cn_symbol_create(ctx, "oh", 0), ow = cn_symbol_create(ctx, "ow", 0),
            kh = cn_symbol_create(ctx, "kh", 0), kw = cn_symbol_create(ctx, "kw", 0);
  cn_proj *p =
      cn_proj_create(ctx, 4, (cn_symbol[]){oh, ow, kh, kw}, (int64_t[]){OUT, OUT, K, K},
                     (cn_proj_tensor){2, (int64_t[]){OUT, OUT}, (cn_index[]){I(oh), I(ow)}}, 2,
                     (cn_proj_tensor[]){{2, (int64_t[]){IN, IN},
                                         (cn_index[]){A2(oh, S, kh, D, 0), A2(ow, S, kw, D, 0)}},
                                        {2, (int64_t[]){K, K}, (cn_index[]){I(kh), I(kw)}}});
  double xv[IN * IN], wv[K * K] = {1, -1, 2, 0.5}, expected[OUT * OUT];
  for (int c = 0; c < IN * IN; c++) xv[c] = (c * 7) % 11 - 5;
  set(x, xv);
  set(w, wv);
  for (int r = 0; r < OUT; r++)
    for (int c = 0; c < OUT; c++) {
      double acc = 0;
      for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++) acc += xv[(S * r + D * a) * IN + S * c + D * b] * wv[a * K + b];
      expected[r * OUT + c] = acc;
    }
  cn_asgn *a =
      cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, (cn_buffer[]){{x, false}, {w, false}}, p);
  run_both(ctx, "conv2d", a, NULL, NULL, out, expected, 1e-12);
  cn_ctx_destroy(ctx);
}

/* ---- padded convolution reading left of the array: out[o] =:+ x[o + k - 1] * w[k] with x
 * padded by 1 on each side; the margins hold garbage that the routine must reset to 0. Then a
 * padded max pool, whose margins must become -inf (the neutral of max), not 0. ---- */
typedef struct {
  cn_node *x;
} pad_nodes;
static void pad_init(void *user) {
  pad_nodes *pn = user;
  set(pn->x, (double[]){-1, -2, -3, -4, -5});
  float *buf = cn_node_buffer(pn->x, false);
  buf[0] = 99; /* left margin */
  buf[6] = 99; /* right margin */
}
static void test_padded(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, (int64_t[]){5});
  CHECK(cn_node_set_padding(x, 0, 1, 1) == CN_OK);
  cn_node *w = node(ctx, "w", CN_PREC_SINGLE, 1, (int64_t[]){3});
  cn_node *out = node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t[]){5});
  cn_symbol o = cn_symbol_create(ctx, "o", 0), k = cn_symbol_create(ctx, "k", 0);
  cn_proj *p =
      cn_proj_create(ctx, 2, (cn_symbol[]){o, k}, (int64_t[]){5, 3},
                     (cn_proj_tensor){1, (int64_t[]){5}, (cn_index[]){I(o)}}, 2,
                     (cn_proj_tensor[]){{1, (int64_t[]){5}, (cn_index[]){A2(o, 1, k, 1, -1)}},
                                        {1, (int64_t[]){3}, (cn_index[]){I(k)}}});
  set(w, (double[]){1, 10, 100});
  pad_nodes pn = {x};
  cn_asgn *conv =
      cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, (cn_buffer[]){{x, false}, {w, false}}, p);
  /* out[o] = x[o-1] + 10 x[o] + 100 x[o+1], with x = 0 outside [0, 5). */
  run_both(ctx, "padded_conv", conv, pad_init, &pn, out, (double[]){-210, -321, -432, -543, -54},
           0);

  /* Max pool with window 3, padded: out[o] =:@^ x[o + k - 1] + z[k], z = 0. All x are negative,
   * so a margin read as 0 (not -inf) would be visible at both ends. */
  cn_node *z = node(ctx, "z", CN_PREC_SINGLE, 1, (int64_t[]){3});
  cn_asgn *pool =
      cn_asgn_accum(ctx, true, CN_OP_MAX, out, CN_OP_ADD, (cn_buffer[]){{x, false}, {z, false}}, p);
  run_both(ctx, "padded_pool", pool, pad_init, &pn, out, (double[]){-1, -1, -2, -3, -4}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- interleave: t[2i] =: a[i]; t[2i+1] =+ b[i] (convolution-is-a-contraction "Striding without a
 * kernel") ---- */
static void test_interleave(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *a = node(ctx, "a", CN_PREC_INT32, 1, (int64_t[]){3});
  cn_node *b = node(ctx, "b", CN_PREC_INT32, 1, (int64_t[]){3});
  cn_node *t = node(ctx, "t", CN_PREC_INT32, 1, (int64_t[]){6});
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_proj *even = cn_proj_create(ctx, 1, &i, (int64_t[]){3},
                                 (cn_proj_tensor){1, (int64_t[]){6}, (cn_index[]){A1(i, 2, 0)}}, 1,
                                 (cn_proj_tensor[]){{1, (int64_t[]){3}, (cn_index[]){I(i)}}});
  cn_proj *odd = cn_proj_create(ctx, 1, &i, (int64_t[]){3},
                                (cn_proj_tensor){1, (int64_t[]){6}, (cn_index[]){A1(i, 2, 1)}}, 1,
                                (cn_proj_tensor[]){{1, (int64_t[]){3}, (cn_index[]){I(i)}}});
  CHECK(even && !cn_proj_lhs_surjective(even) && cn_proj_lhs_injective(even));
  set(a, (double[]){1, 3, 5});
  set(b, (double[]){2, 4, 6});
  set(t, (double[]){-7, -7, -7, -7, -7, -7});
  cn_asgn *items[2] = {
      cn_asgn_accum(ctx, true, CN_OP_ADD, t, CN_OP_ID, (cn_buffer[]){{a, false}}, even),
      cn_asgn_accum(ctx, false, CN_OP_ADD, t, CN_OP_ID, (cn_buffer[]){{b, false}}, odd)};
  cn_asgn *seq = cn_asgn_seq(ctx, 2, items);
  run_both(ctx, "interleave", seq, NULL, NULL, t, (double[]){1, 2, 3, 4, 5, 6}, 0);
  /* Only the even half: the odd cells keep the neutral element 0 of the pre-fill. */
  run_both(ctx, "even_only", items[0], NULL, NULL, t, (double[]){1, 0, 3, 0, 5, 0}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- diagonals: d[i] =:+ m[i,i] (read) and e[i,i] =:* v[i] (non-surjective write: the
 * off-diagonal cells keep the neutral element of *, 1) ---- */
static void test_diagonal(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *m = node(ctx, "m", CN_PREC_SINGLE, 2, (int64_t[]){3, 3});
  cn_node *d = node(ctx, "d", CN_PREC_SINGLE, 1, (int64_t[]){3});
  cn_node *e = node(ctx, "e", CN_PREC_SINGLE, 2, (int64_t[]){3, 3});
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_proj *read = cn_proj_create(
      ctx, 1, &i, (int64_t[]){3}, (cn_proj_tensor){1, (int64_t[]){3}, (cn_index[]){I(i)}}, 1,
      (cn_proj_tensor[]){{2, (int64_t[]){3, 3}, (cn_index[]){I(i), I(i)}}});
  cn_proj *write = cn_proj_create(ctx, 1, &i, (int64_t[]){3},
                                  (cn_proj_tensor){2, (int64_t[]){3, 3}, (cn_index[]){I(i), I(i)}},
                                  1, (cn_proj_tensor[]){{1, (int64_t[]){3}, (cn_index[]){I(i)}}});
  CHECK(write && !cn_proj_lhs_surjective(write) && cn_proj_lhs_injective(write));
  set(m, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
  run_both(ctx, "diag_read",
           cn_asgn_accum(ctx, true, CN_OP_ADD, d, CN_OP_ID, (cn_buffer[]){{m, false}}, read), NULL,
           NULL, d, (double[]){1, 5, 9}, 0);
  run_both(ctx, "diag_write",
           cn_asgn_accum(ctx, true, CN_OP_MUL, e, CN_OP_ID, (cn_buffer[]){{d, false}}, write), NULL,
           NULL, e, (double[]){1, 1, 1, 1, 5, 1, 1, 1, 9}, 0);
  cn_ctx_destroy(ctx);
}

/* ---- fetch ops ---- */
static void test_fetches(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *r = node(ctx, "r", CN_PREC_SINGLE, 2, (int64_t[]){2, 3});
  run_both(ctx, "range", cn_asgn_fetch_range_over_offsets(ctx, r), NULL, NULL, r,
           (double[]){0, 1, 2, 3, 4, 5}, 0);
  run_both(ctx, "fill", cn_asgn_fetch_constant_fill(ctx, r, (double[]){7, 8, 9, 10}, 4), NULL, NULL,
           r, (double[]){7, 8, 9, 10, 7, 8}, 0);
  run_both(ctx, "constant", cn_asgn_fetch_constant(ctx, r, -0.5), NULL, NULL, r,
           (double[]){-0.5, -0.5, -0.5, -0.5, -0.5, -0.5}, 0);
  int64_t dim = 42;
  run_both(ctx, "embed_dim", cn_asgn_fetch_embed_dim(ctx, r, &dim), NULL, NULL, r,
           (double[]){42, 42, 42, 42, 42, 42}, 0);
  run_both(ctx, "self_id", cn_asgn_fetch_embed_self_id(ctx, r), NULL, NULL, r,
           (double[]){cn_node_id(r), cn_node_id(r), cn_node_id(r), cn_node_id(r), cn_node_id(r),
                      cn_node_id(r)},
           0);

  /* Slice at a static batch index bound at run time, and an embedded symbol. */
  cn_node *src = node(ctx, "src", CN_PREC_DOUBLE, 3, (int64_t[]){3, 2, 3});
  double sv[18];
  for (int c = 0; c < 18; c++) sv[c] = c;
  set(src, sv);
  cn_symbol bi = cn_symbol_create(ctx, "b", 3);
  cn_asgn *slice = cn_asgn_fetch_slice(ctx, r, bi, src);
  CHECK_MSG(slice != NULL, "%s", cn_ctx_error(ctx));
  cn_asgn *embed = cn_asgn_fetch_embed_symbol(ctx, node(ctx, "step", CN_PREC_INT64, 0, NULL), bi);
  CHECK_MSG(embed != NULL, "%s", cn_ctx_error(ctx));
  for (int b = 0; b < n_backends && slice; b++) {
    cn_routine *rt = cn_routine_compile(ctx, slice, backends[b], "slice");
    CHECK_MSG(rt != NULL, "%s", cn_ctx_error(ctx));
    if (!rt) continue;
    CHECK(cn_routine_run(rt) == CN_ERR_RUNTIME); /* the batch index is not bound yet */
    CHECK_HAS(cn_ctx_error(ctx), "'b'");
    CHECK(cn_routine_bind(rt, bi, 2) == CN_OK);
    CHECK(cn_routine_run(rt) == CN_OK);
    double got[6];
    CHECK(cn_node_get_values(r, false, got, 6) == CN_OK);
    for (int c = 0; c < 6; c++) CHECK_NEAR(got[c], 12 + c, 0);
    CHECK(cn_routine_bind(rt, bi, 3) == CN_ERR_INVALID); /* out of the range 3 */
    cn_routine_free(rt);
  }
  cn_ctx_destroy(ctx);
}

/* ---- the random stream: light threefry of the key {42,0,0,0} with spread counters, then the
 * vectorized conversion to half; the values of counter 0 are ocannl-notes §7 / issue 2's. ---- */
static void test_uniform_stream(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *key = node(ctx, "key", CN_PREC_UINT4X32, 1, (int64_t[]){1});
  cn_node *ctr = node(ctx, "ctr", CN_PREC_UINT4X32, 1, (int64_t[]){5});
  cn_node *bits = node(ctx, "bits", CN_PREC_UINT4X32, 1, (int64_t[]){5});
  cn_node *u = node(ctx, "u", CN_PREC_HALF, 1, (int64_t[]){40});
  cn_symbol c = cn_symbol_create(ctx, "c", 0);
  cn_proj *p = cn_proj_create(ctx, 1, &c, (int64_t[]){5},
                              (cn_proj_tensor){1, (int64_t[]){5}, (cn_index[]){I(c)}}, 2,
                              (cn_proj_tensor[]){{1, (int64_t[]){1}, (cn_index[]){F(0)}},
                                                 {1, (int64_t[]){5}, (cn_index[]){I(c)}}});
  cn_proj *pv = cn_proj_create(ctx, 1, &c, (int64_t[]){5},
                               (cn_proj_tensor){1, (int64_t[]){40}, (cn_index[]){A1(c, 8, 0)}}, 1,
                               (cn_proj_tensor[]){{1, (int64_t[]){5}, (cn_index[]){I(c)}}});
  cn_asgn *items[4] = {
      cn_asgn_fetch_constant_bits(ctx, key, 42),
      cn_asgn_fetch_range_over_offsets(ctx, ctr), /* uint32 offsets, spread into uint4x32 */
      cn_asgn_accum(ctx, true, CN_OP_ARG2, bits, CN_OP_THREEFRY_LIGHT,
                    (cn_buffer[]){{key, false}, {ctr, false}}, p),
      cn_asgn_vec_unop(ctx, CN_OP_UNIFORM, u, (cn_buffer){bits, false}, pv)};
  for (int k = 0; k < 4; k++) CHECK_MSG(items[k] != NULL, "%s", cn_ctx_error(ctx));
  cn_asgn *seq = cn_asgn_seq(ctx, 4, items);
  double first[8] = {0.443, 0.464, 0.673, 0.732, 0.333, 0.561, 0.852, 0.507};
  for (int b = 0; b < n_backends && seq; b++) {
    cn_routine *r = cn_routine_compile(ctx, seq, backends[b], "uniform");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
    cn_u4x32 w[5];
    CHECK(cn_node_get_cells(bits, false, w, 5) == CN_OK);
    CHECK_INT(w[0].v[0], 0x76bb7178u);
    CHECK_INT(w[0].v[1], 0xbb82ac4fu);
    CHECK_INT(w[0].v[2], 0x8f90552bu);
    CHECK_INT(w[0].v[3], 0x81b2da10u);
    double v[40];
    CHECK(cn_node_get_values(u, false, v, 40) == CN_OK);
    for (int k = 0; k < 8; k++) CHECK_NEAR(v[k], first[k], 0.0015);
    for (int k = 0; k < 40; k++) CHECK(v[k] >= 0 && v[k] < 1);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* ---- merge buffer: p.grad =+ p.grad.merge, as in data-parallel merging ---- */
static void test_merge_buffer(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *g = node(ctx, "g", CN_PREC_SINGLE, 1, (int64_t[]){3});
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_proj *p = cn_proj_create(ctx, 1, &i, (int64_t[]){3},
                              (cn_proj_tensor){1, (int64_t[]){3}, (cn_index[]){I(i)}}, 1,
                              (cn_proj_tensor[]){{1, (int64_t[]){3}, (cn_index[]){I(i)}}});
  cn_asgn *a = cn_asgn_accum(ctx, false, CN_OP_ADD, g, CN_OP_ID, (cn_buffer[]){{g, true}}, p);
  CHECK_STR(cn_asgn_to_string(ctx, a), "g =+ g.merge;\n");
  for (int b = 0; b < n_backends; b++) {
    CHECK(cn_node_set_values(g, false, (double[]){1, 2, 3}, 3) == CN_OK);
    CHECK(cn_node_set_values(g, true, (double[]){10, 20, 30}, 3) == CN_OK);
    cn_routine *r = cn_routine_compile(ctx, a, backends[b], "merge");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
    double v[3];
    CHECK(cn_node_get_values(g, false, v, 3) == CN_OK);
    CHECK_NEAR(v[0], 11, 0);
    CHECK_NEAR(v[1], 22, 0);
    CHECK_NEAR(v[2], 33, 0);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
}

/* ---- sums in lanes (option reduce = lanes, loops.h CN_LL_LANES): s[i] =:+ x[i, j], t =:+
 * x[i, j] and u =:+ x[1, j] over rows of 1500 (five full rows of lanes and a partial one; u's
 * loop alone at the top: a device's work-group of lanes), checked against the definition
 * computed here, which differs from the sum in order for these values ---- */
enum { LANES_ROWS = 3, LANES_COLS = 1500, LANES_COUNT = 256 };
typedef struct {
  cn_node *x, *s, *t, *u;
  double *values;
} lanes_nodes;
static void lanes_init(void *user) {
  lanes_nodes *l = user;
  set(l->x, l->values);
  set(l->s, (double[]){7, 7, 7}); /* stale contents the =: must clear */
  set(l->t, (double[]){7});
  set(l->u, (double[]){7});
}
/* c + the lanes of v[0 .. n) folded, every add rounded to prec (single or double). */
static double lanes_sum(cn_prec prec, double c, const double *v, int n) {
  double lane[LANES_COUNT];
  float lane32[LANES_COUNT];
  for (int l = 0; l < LANES_COUNT; l++) lane[l] = -0.0, lane32[l] = -0.0f;
  for (int i = 0; i < n; i++) {
    lane[i % LANES_COUNT] += v[i];
    lane32[i % LANES_COUNT] += (float)v[i];
  }
  for (int w = LANES_COUNT / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w], lane32[l] += lane32[l + w];
  return prec == CN_PREC_SINGLE ? (double)((float)c + lane32[0]) : c + lane[0];
}
static double ordered_sum(cn_prec prec, double c, const double *v, int n) {
  float c32 = (float)c;
  for (int i = 0; i < n; i++) c += v[i], c32 += (float)v[i];
  return prec == CN_PREC_SINGLE ? (double)c32 : c;
}
static void test_sum_lanes(cn_prec prec, bool lanes) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(cn_ctx_set_option(ctx, "reduce", lanes ? "lanes" : "ordered") == CN_OK);
  const int64_t dims[2] = {LANES_ROWS, LANES_COLS};
  lanes_nodes l = {node(ctx, "x", prec, 2, dims), node(ctx, "s", prec, 1, dims),
                   node(ctx, "t", prec, 0, NULL), node(ctx, "u", prec, 0, NULL),
                   malloc(sizeof(double) * LANES_ROWS * LANES_COLS)};
  CHECK(l.values != NULL);
  if (!l.values) return;
  /* magnitudes from 2^-4 to 2^20 (2^66 in double), both signs: their sums round, differently
   * in each order */
  uint32_t state = 2463534242u;
  for (int k = 0; k < LANES_ROWS * LANES_COLS; k++) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    double v = ldexp((double)(state % 2001) - 1000,
                     (int)(state >> 26) % (prec == CN_PREC_SINGLE ? 25 : 71) - 14);
    l.values[k] = prec == CN_PREC_SINGLE ? (double)(float)v : v;
  }
  double rows[LANES_ROWS], total = 0, in_order = 0;
  for (int r = 0; r < LANES_ROWS; r++) {
    const double *row = l.values + r * LANES_COLS;
    rows[r] = lanes ? lanes_sum(prec, 0, row, LANES_COLS) : ordered_sum(prec, 0, row, LANES_COLS);
    total =
        lanes ? lanes_sum(prec, total, row, LANES_COLS) : ordered_sum(prec, total, row, LANES_COLS);
    in_order = ordered_sum(prec, in_order, row, LANES_COLS);
  }
  if (lanes) CHECK_MSG(total != in_order, "the values sum to the same in lanes and in order");
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  const cn_proj_tensor rhs = {2, (int64_t *)dims, (cn_index[]){I(i), I(j)}};
  cn_proj *ps = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, dims,
                               (cn_proj_tensor){1, (int64_t *)dims, (cn_index[]){I(i)}}, 1, &rhs);
  cn_proj *pt =
      cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, dims, (cn_proj_tensor){0, NULL, NULL}, 1, &rhs);
  cn_asgn *sum_rows =
      cn_asgn_accum(ctx, true, CN_OP_ADD, l.s, CN_OP_ID, (cn_buffer[]){{l.x, false}}, ps);
  cn_asgn *sum_all =
      cn_asgn_accum(ctx, true, CN_OP_ADD, l.t, CN_OP_ID, (cn_buffer[]){{l.x, false}}, pt);
  run_both(ctx, lanes ? "sum_rows_lanes" : "sum_rows_ordered", sum_rows, lanes_init, &l, l.s, rows,
           0);
  run_both(ctx, lanes ? "sum_all_lanes" : "sum_all_ordered", sum_all, lanes_init, &l, l.t, &total,
           0);
  cn_proj *pu = cn_proj_create(ctx, 1, &j, dims + 1, (cn_proj_tensor){0, NULL, NULL}, 1,
                               (cn_proj_tensor[]){{2, (int64_t *)dims, (cn_index[]){F(1), I(j)}}});
  cn_asgn *sum_row =
      cn_asgn_accum(ctx, true, CN_OP_ADD, l.u, CN_OP_ID, (cn_buffer[]){{l.x, false}}, pu);
  run_both(ctx, lanes ? "sum_row_lanes" : "sum_row_ordered", sum_row, lanes_init, &l, l.u, &rows[1],
           0);
  /* a kernel dialect's program runs the row as a work-group of lanes, and the rows (a grid of
   * them on a device) as a work-group each */
  for (int b = 0; b < 2 * n_backends && sum_row && sum_rows; b++) {
    cn_routine *k = cn_routine_compile(ctx, b % 2 ? sum_rows : sum_row, backends[b / 2], "row");
    const char *source = k ? cn_routine_source(k) : NULL;
    if (source && (strstr(source, "__kernel ") || strstr(source, "__global__ ")))
      CHECK_MSG((strstr(source, "cn_lanes[256]") != NULL) == lanes, "%s:\n%s",
                cn_backend_name(backends[b / 2]), source);
    cn_routine_free(k);
  }
  cn_routine *r = sum_rows ? cn_routine_compile(ctx, sum_rows, CN_BACKEND_INTERP, "loops") : NULL;
  CHECK(r && (strstr(cn_routine_loops(r), "(lanes)") != NULL) == lanes);
  cn_routine_free(r);
  free(l.values);
  cn_ctx_destroy(ctx);
}

/* ---- a long max without order, m[i] =:@^ x[i, j] and u =:@^ x[1, j] over rows of 1500 (a
 * device's work-groups of lanes, in any mode): signed zeros, a row with two NaNs (the first in
 * row order wins), against the max of cn_max's semantics computed here ---- */
static double max_of(double c, double v) {
  if (isnan(c)) return c;
  if (isnan(v)) return v;
  if (c == v) return signbit(c) ? v : c;
  return c > v ? c : v;
}
static void test_max_long(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t dims[2] = {LANES_ROWS, LANES_COLS};
  lanes_nodes l = {node(ctx, "x", CN_PREC_SINGLE, 2, dims), node(ctx, "s", CN_PREC_SINGLE, 1, dims),
                   NULL, node(ctx, "u", CN_PREC_SINGLE, 0, NULL),
                   malloc(sizeof(double) * LANES_ROWS * LANES_COLS)};
  l.t = l.u;
  CHECK(l.values != NULL);
  if (!l.values) return;
  uint32_t state = 88172645u;
  for (int k = 0; k < LANES_ROWS * LANES_COLS; k++) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    int r = k / LANES_COLS, c = k % LANES_COLS;
    l.values[k] = r == 0      ? (double)(float)(((double)(state % 20001) - 10000) / 7)
                  : r == 2    ? (c % 2 ? -0.0 : -(double)(state % 1000 + 1))
                  : c == 700  ? NAN
                  : c == 1200 ? -NAN
                              : (double)(state % 100);
  }
  double rows[LANES_ROWS];
  for (int r = 0; r < LANES_ROWS; r++) {
    rows[r] = -INFINITY;
    for (int c = 0; c < LANES_COLS; c++) rows[r] = max_of(rows[r], l.values[r * LANES_COLS + c]);
  }
  CHECK(isnan(rows[1]) && rows[2] == 0 && signbit(rows[2]));
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_proj *pm = cn_proj_create(ctx, 2, (cn_symbol[]){i, j}, dims,
                               (cn_proj_tensor){1, (int64_t *)dims, (cn_index[]){I(i)}}, 1,
                               (cn_proj_tensor[]){{2, (int64_t *)dims, (cn_index[]){I(i), I(j)}}});
  cn_proj *pu = cn_proj_create(ctx, 1, &j, dims + 1, (cn_proj_tensor){0, NULL, NULL}, 1,
                               (cn_proj_tensor[]){{2, (int64_t *)dims, (cn_index[]){F(1), I(j)}}});
  cn_asgn *max_rows =
      cn_asgn_accum(ctx, true, CN_OP_MAX, l.s, CN_OP_ID, (cn_buffer[]){{l.x, false}}, pm);
  cn_asgn *max_row =
      cn_asgn_accum(ctx, true, CN_OP_MAX, l.u, CN_OP_ID, (cn_buffer[]){{l.x, false}}, pu);
  run_both(ctx, "max_rows_long", max_rows, lanes_init, &l, l.s, rows, 0);
  run_both(ctx, "max_row_long", max_row, lanes_init, &l, l.u, &rows[1], 0);
  /* a kernel dialect's program runs the row, and each row of the grid, as a work-group */
  for (int b = 0; b < 2 * n_backends && max_row && max_rows; b++) {
    cn_routine *k = cn_routine_compile(ctx, b % 2 ? max_rows : max_row, backends[b / 2], "max");
    const char *source = k ? cn_routine_source(k) : NULL;
    if (source && (strstr(source, "__kernel ") || strstr(source, "__global__ ")))
      CHECK_MSG(strstr(source, "cn_keys[256]") != NULL, "%s:\n%s", cn_backend_name(backends[b / 2]),
                source);
    cn_routine_free(k);
  }
  free(l.values);
  cn_ctx_destroy(ctx);
}

/* Every case, on every backend of `backends`. */
static void e2e_run_all(void) {
  test_matmul(CN_PREC_SINGLE);
  test_matmul(CN_PREC_DOUBLE);
  test_matmul(CN_PREC_INT64);
  test_matmul(CN_PREC_HALF);
  test_matvec_and_sum();
  test_max_accum(CN_PREC_SINGLE);
  test_max_accum(CN_PREC_INT32);
  test_broadcast_scalar();
  test_conv1d_valid();
  test_conv2d_strided_dilated();
  test_padded();
  test_interleave();
  test_diagonal();
  test_fetches();
  test_uniform_stream();
  test_merge_buffer();
  test_sum_lanes(CN_PREC_SINGLE, true);
  test_sum_lanes(CN_PREC_DOUBLE, true);
  test_sum_lanes(CN_PREC_SINGLE, false);
  test_max_long();
}

#endif
