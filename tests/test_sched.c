/* Tests of the scheduling stage (src/sched) on procedures built by hand with the cn_lb_*
 * constructors: the loop order and marks chosen for a matmul, a padded convolution strided on one
 * axis, a Tile-style nest with affine bounds (cumulative sums), a reduction to a scalar, a nest
 * whose two reduction loops must keep their order, and nests with cross-iteration dependences that
 * must not be marked (checked on the printed loops text), unroll-and-jam of a dense layer's
 * dot-product form with a remainder and an embedded index, flat pairs (an element-wise nest run as
 * one loop, checked on the generated C, and three nests that must not be flat), unroll-and-jam of
 * loops with an affine upper bound (causal attention's scores and mix with V), which scratch
 * buffers are written whole by their first statement (cn_sched_written_first), loop fusion of
 * element-wise chains, a 2x2 max pool and an interleave; every scheduled
 * procedure run on generated C and on the interpreter from the same random buffers as the
 * unscheduled one, with memcmp-identical results on each backend (the scheduled C also close to the
 * interpreter); the dependence helpers directly; the option parser and the driver's switches. */
#include "backend/backend.h"
#include "loops_check.h"
#include "snapshot.h"
#include "sched/sched.h"

#include <stdlib.h>

/* ---- Running and comparing ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static float random_float(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  /* values in [-2, 2) with 24 random bits: sums of them round, so their order shows */
  return (float)((double)(rng_state >> 40) / (double)(1u << 22) - 2.0);
}

/* Fills every buffer of proc (padding included) with random single-precision values. */
static void fill_random(const cn_ll_proc *proc) {
  for (int k = 0; k < proc->n_params; k++) {
    cn_node *n = proc->params[k].node;
    CHECK(n->prec == CN_PREC_SINGLE);
    float *cells = cn_node_buffer(n, proc->params[k].merge);
    CHECK(cells != NULL);
    if (!cells) return;
    for (size_t c = 0; c < cn_node_buffer_cells(n); c++) cells[c] = random_float();
  }
}

static bool same_bits(const cn_ll_proc *proc, const snapshot *a, const snapshot *b) {
  for (int k = 0; k < proc->n_params; k++)
    if (memcmp(a->data[k], b->data[k], a->bytes[k]) != 0) return false;
  return true;
}

/* Every cell of a within tol (relative to max(1, |cell|)) of b. */
static bool close_to(const cn_ll_proc *proc, const snapshot *a, const snapshot *b, double tol) {
  for (int k = 0; k < proc->n_params; k++) {
    const float *x = (const float *)a->data[k], *y = (const float *)b->data[k];
    for (size_t c = 0; c < a->bytes[k] / sizeof(float); c++) {
      double scale = fabs((double)y[c]) > 1 ? fabs((double)y[c]) : 1;
      if (fabs((double)x[c] - (double)y[c]) > tol * scale) return false;
    }
  }
  return true;
}

/* plain and scheduled, two procedures over the same nodes: run from the same random buffers,
 * each backend gives the same bits for both, and the C result is close to the interpreter's. */
static void check_same_results(cn_ctx *ctx, const cn_ll_proc *plain, const cn_ll_proc *scheduled) {
  fill_random(plain);
  snapshot start = {0}, c_plain = {0}, c_sched = {0}, i_plain = {0}, i_sched = {0};
  snapshot_save(plain, &start);
  snapshot_run(ctx, &cn_backend_c, plain, plain, &start, &c_plain);
  snapshot_run(ctx, &cn_backend_c, scheduled, scheduled, &start, &c_sched);
  snapshot_run(ctx, &cn_backend_interp, plain, plain, &start, &i_plain);
  snapshot_run(ctx, &cn_backend_interp, scheduled, scheduled, &start, &i_sched);
  CHECK(same_bits(plain, &c_plain, &c_sched));
  CHECK(same_bits(plain, &i_plain, &i_sched));
  CHECK(close_to(plain, &c_sched, &i_sched, 1e-4));
  CHECK(!same_bits(plain, &start, &c_plain)); /* the run wrote something */
  snapshot_release(plain, &start);
  snapshot_release(plain, &c_plain);
  snapshot_release(plain, &c_sched);
  snapshot_release(plain, &i_plain);
  snapshot_release(plain, &i_sched);
}

/* The loop passes: every pass but GEMM plans (test_gemm_run.c), which would take the matmuls
 * below out of the loop passes' hands. */
#define LOOP_PASSES (CN_SCHED_ALL & ~CN_SCHED_GEMM)

/* A procedure's text, scheduled with every loop pass for a 48 KiB L1 and a 1 MiB LLC (whatever
 * the machine's caches), none of the procedures being large enough to tile. */
static const char *scheduled_text(cn_ctx *ctx, cn_ll_proc *proc) {
  cn_sched_options opts = {.passes = LOOP_PASSES, .l1_bytes = 48 << 10, .llc_bytes = 1 << 20};
  CHECK_INT(cn_sched_proc(ctx, proc, &opts), CN_OK);
  const char *text = cn_ll_to_string(ctx, proc);
  CHECK(text != NULL);
  return text ? text : "";
}

static cn_ll_param param_of(cn_node *n) {
  return (cn_ll_param){n, false};
}

/* ---- Matmul: the reduction moves out of the innermost position ---- */

/* c[m, n] =: a[m, kk] * b[kk, n] looping i, k, j (the nodes' dims are the caller's). */
static cn_ll_proc *matmul_sized(cn_ctx *ctx, cn_node *const *abc, const cn_symbol *iks, int64_t m,
                                int64_t n, int64_t kk) {
  cn_ll_param params[3] = {param_of(abc[0]), param_of(abc[1]), param_of(abc[2])};
  return cn_lb_proc(ctx, "matmul",
                    matmul_body(ctx, "c =:+ a * b", iks[0], m, iks[1], n, iks[2], kk), 3, params, 0,
                    NULL);
}

static cn_ll_proc *matmul_proc(cn_ctx *ctx, cn_node *const *abc, const cn_symbol *iks) {
  return matmul_sized(ctx, abc, iks, 64, 40, 48);
}

static void test_matmul(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)48),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)48, (int64_t)40),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)40)};
  cn_symbol iks[3] = {cn_symbol_create(ctx, "i", 64), cn_symbol_create(ctx, "k", 40),
                      cn_symbol_create(ctx, "j", 48)};
  cn_ll_proc *plain = matmul_proc(ctx, abc, iks), *scheduled = matmul_proc(ctx, abc, iks);
  CHECK(plain && scheduled);
  check_text(scheduled_text(ctx, scheduled),
             "routine matmul\n"
             "  params: a#1 single[64, 48], b#2 single[48, 40], c#3 single[64, 40]\n"
             "# c =:+ a * b\n"
             "for i in 0..64 (flat):\n"
             "  for k in 0..40 (vector):\n"
             "    c[i, k] := 0\n"
             "for i in 0..64 (parallel):\n"
             "  for j_jam in 0..12:\n"
             "    for k in 0..40 (vector):\n"
             "      c[i, k] := c[i, k] + a[i, 4*j_jam] * b[4*j_jam, k]\n"
             "      c[i, k] := c[i, k] + a[i, 4*j_jam + 1] * b[4*j_jam + 1, k]\n"
             "      c[i, k] := c[i, k] + a[i, 4*j_jam + 2] * b[4*j_jam + 2, k]\n"
             "      c[i, k] := c[i, k] + a[i, 4*j_jam + 3] * b[4*j_jam + 3, k]\n");
  check_same_results(ctx, plain, scheduled);
  cn_ctx_destroy(ctx);
}

/* ---- Tiling: the matmul's k in tiles when b exceeds the (given) last-level cache ---- */

static void test_tile(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)16, (int64_t)64),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)100),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)16, (int64_t)100)};
  cn_symbol iks[3] = {cn_symbol_create(ctx, "i", 16), cn_symbol_create(ctx, "k", 100),
                      cn_symbol_create(ctx, "j", 64)};
  cn_ll_proc *plain = matmul_sized(ctx, abc, iks, 16, 100, 64);
  cn_ll_proc *scheduled = matmul_sized(ctx, abc, iks, 16, 100, 64);
  cn_ll_proc *untiled = matmul_sized(ctx, abc, iks, 16, 100, 64);
  CHECK(plain && scheduled && untiled);
  /* The cells below i: a's row (256 bytes) + 260 bytes per value of k (c's cell and b's column),
   * 26256 bytes for the whole of k: above an LLC of 20000 bytes, and a tile of 32 values of k
   * (8576 bytes) fills at most half of it; a 1 MiB LLC holds it all. */
  cn_sched_options opts = {.passes = LOOP_PASSES, .l1_bytes = 2048, .llc_bytes = 20000};
  CHECK_INT(cn_sched_proc(ctx, scheduled, &opts), CN_OK);
  check_text(cn_ll_to_string(ctx, scheduled),
             "routine matmul\n"
             "  params: a#1 single[16, 64], b#2 single[64, 100], c#3 single[16, 100]\n"
             "# c =:+ a * b\n"
             "for i in 0..16 (flat):\n"
             "  for k in 0..100 (vector):\n"
             "    c[i, k] := 0\n"
             "for k_tile in 0..4:\n"
             "  for i in 0..16 (parallel):\n"
             "    for j_jam in 0..16:\n"
             "      for k in 32*k_tile..min(100, 32*k_tile + 32) (vector):\n"
             "        c[i, k] := c[i, k] + a[i, 4*j_jam] * b[4*j_jam, k]\n"
             "        c[i, k] := c[i, k] + a[i, 4*j_jam + 1] * b[4*j_jam + 1, k]\n"
             "        c[i, k] := c[i, k] + a[i, 4*j_jam + 2] * b[4*j_jam + 2, k]\n"
             "        c[i, k] := c[i, k] + a[i, 4*j_jam + 3] * b[4*j_jam + 3, k]\n");
  check_same_results(ctx, plain, scheduled);
  opts.llc_bytes = 1 << 20;
  CHECK_INT(cn_sched_proc(ctx, untiled, &opts), CN_OK);
  CHECK(strstr(cn_ll_to_string(ctx, untiled), "tile") == NULL);
  int64_t l1 = 0, llc = 0;
  cn_sched_cache_sizes(&l1, &llc);
  CHECK(l1 > 0 && llc >= l1);
  cn_ctx_destroy(ctx);
}

/* ---- A padded convolution, strided on y: x (an output loop) goes inside the reductions ---- */

typedef struct {
  cn_node *in, *w, *out;
  cn_symbol o, y, x, c, ky, kx;
} conv_fixture;

/* out[o, y, x] += in[c, 2y + ky - 1, x + kx - 1] * w[o, c, ky, kx] in the lowering's order. */
static cn_ll_proc *conv_proc(cn_ctx *ctx, const conv_fixture *f) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *out_idx =
      cn_lb_indices(ctx, 3, cn_index_iter(f->o), cn_index_iter(f->y), cn_index_iter(f->x));
  cn_index *in_idx = cn_lb_indices(ctx, 3, cn_index_iter(f->c), affine2(f->y, 2, f->ky, 1, -1),
                                   affine2(f->x, 1, f->kx, 1, -1));
  cn_index *w_idx = cn_lb_indices(ctx, 4, cn_index_iter(f->o), cn_index_iter(f->c),
                                  cn_index_iter(f->ky), cn_index_iter(f->kx));
  cn_ll_expr *product = cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, 0, single, in_idx),
                                 cn_lb_get(ctx, 1, single, w_idx), NULL);
  cn_ll_stmt *s = cn_lb_accum(ctx, 2, single, out_idx, CN_OP_ADD, product);
  s = cn_lb_loop(ctx, f->kx, 0, 3, s);
  s = cn_lb_loop(ctx, f->ky, 0, 3, s);
  s = cn_lb_loop(ctx, f->c, 0, 3, s);
  s = cn_lb_loop(ctx, f->x, 0, 16, s);
  s = cn_lb_loop(ctx, f->y, 0, 8, s);
  s = cn_lb_loop(ctx, f->o, 0, 16, s);
  cn_ll_param params[3] = {param_of(f->in), param_of(f->w), param_of(f->out)};
  return cn_lb_proc(ctx, "conv", s, 3, params, 0, NULL);
}

static void test_conv(void) {
  cn_ctx *ctx = cn_ctx_create();
  conv_fixture f = {
      .in = node(ctx, "in", CN_PREC_SINGLE, 3, (int64_t)3, (int64_t)16, (int64_t)16),
      .w = node(ctx, "w", CN_PREC_SINGLE, 4, (int64_t)16, (int64_t)3, (int64_t)3, (int64_t)3),
      .out = node(ctx, "out", CN_PREC_SINGLE, 3, (int64_t)16, (int64_t)8, (int64_t)16),
      .o = cn_symbol_create(ctx, "o", 16),
      .y = cn_symbol_create(ctx, "y", 8),
      .x = cn_symbol_create(ctx, "x", 16),
      .c = cn_symbol_create(ctx, "c", 3),
      .ky = cn_symbol_create(ctx, "ky", 3),
      .kx = cn_symbol_create(ctx, "kx", 3)};
  CHECK_INT(cn_node_set_padding(f.in, 1, 1, 1), CN_OK);
  CHECK_INT(cn_node_set_padding(f.in, 2, 1, 1), CN_OK);
  cn_ll_proc *plain = conv_proc(ctx, &f), *scheduled = conv_proc(ctx, &f);
  CHECK(plain && scheduled);
  check_text(scheduled_text(ctx, scheduled),
             "routine conv\n"
             "  params: in#1 single[3, 16 pad 1:1, 16 pad 1:1], w#2 single[16, 3, 3, 3], "
             "out#3 single[16, 8, 16]\n"
             "for o in 0..16 (parallel):\n"
             "  for y in 0..8:\n"
             "    for c in 0..3:\n"
             "      for ky in 0..3:\n"
             "        for kx in 0..3:\n"
             "          for x in 0..16 (vector):\n"
             "            out[o, y, x] := out[o, y, x] + in[c, 2*y + ky - 1, x + kx - 1] * "
             "w[o, c, ky, kx]\n");
  check_same_results(ctx, plain, scheduled);
  cn_ctx_destroy(ctx);
}

/* A convolution's input gradient din[n, o + kk, ic] += dout[n, o, oc] * w[oc, kk, ic]: its write
 * mixes o and kk in one axis (not separable), yet ic alone indexes an axis, so it moves innermost
 * (vector: stride 1 in din and w) while n, o, oc, kk keep their order, and so does every cell's
 * sequence of updates. */
static cn_ll_proc *input_grad_proc(cn_ctx *ctx, cn_node *const *nodes, const cn_symbol *v) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *din =
      cn_lb_indices(ctx, 3, cn_index_iter(v[0]), affine2(v[1], 1, v[4], 1, 0), cn_index_iter(v[3]));
  cn_ll_expr *product = cn_lb_op(ctx, CN_OP_MUL, single,
                                 cn_lb_get(ctx, 0, single,
                                           cn_lb_indices(ctx, 3, cn_index_iter(v[0]),
                                                         cn_index_iter(v[1]), cn_index_iter(v[2]))),
                                 cn_lb_get(ctx, 1, single,
                                           cn_lb_indices(ctx, 3, cn_index_iter(v[2]),
                                                         cn_index_iter(v[4]), cn_index_iter(v[3]))),
                                 NULL);
  cn_ll_stmt *body = cn_lb_accum(ctx, 2, single, din, CN_OP_ADD, product);
  const int64_t ext[5] = {4, 6, 4, 16, 3}; /* n, o, oc, ic, kk */
  for (int k = 4; k >= 0; k--) body = cn_lb_loop(ctx, v[k], 0, ext[k], body);
  cn_ll_param params[3] = {{nodes[0], false}, {nodes[1], false}, {nodes[2], false}};
  return cn_lb_proc(ctx, "input_grad", body, 3, params, 0, NULL);
}

static void test_input_gradient(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *nodes[3] = {node(ctx, "dout", CN_PREC_SINGLE, 3, (int64_t)4, (int64_t)6, (int64_t)4),
                       node(ctx, "w", CN_PREC_SINGLE, 3, (int64_t)4, (int64_t)3, (int64_t)16),
                       node(ctx, "din", CN_PREC_SINGLE, 3, (int64_t)4, (int64_t)8, (int64_t)16)};
  const char *names[5] = {"n", "o", "oc", "ic", "kk"};
  cn_symbol v[5];
  for (int k = 0; k < 5; k++) v[k] = cn_symbol_create(ctx, names[k], 0);
  cn_ll_proc *plain = input_grad_proc(ctx, nodes, v), *scheduled = input_grad_proc(ctx, nodes, v);
  CHECK(plain && scheduled);
  cn_sched_options order = {.passes = CN_SCHED_ORDER};
  CHECK_INT(cn_sched_proc(ctx, scheduled, &order), CN_OK);
  check_text(
      cn_ll_to_string(ctx, scheduled),
      "routine input_grad\n"
      "  params: dout#1 single[4, 6, 4], w#2 single[4, 3, 16], din#3 single[4, 8, 16]\n"
      "for n in 0..4:\n"
      "  for o in 0..6:\n"
      "    for oc in 0..4:\n"
      "      for kk in 0..3:\n"
      "        for ic in 0..16:\n"
      "          din[n, o + kk, ic] := din[n, o + kk, ic] + dout[n, o, oc] * w[oc, kk, ic]\n");
  check_same_results(ctx, plain, scheduled);
  /* with every loop pass: ic a vector loop, oc jammed (4 updates of one cell in a row: for one
   * cell and fixed n, o, kk and ic are fixed), and still the same bits */
  cn_ll_proc *all = input_grad_proc(ctx, nodes, v);
  check_text(scheduled_text(ctx, all),
             "routine input_grad\n"
             "  params: dout#1 single[4, 6, 4], w#2 single[4, 3, 16], din#3 single[4, 8, 16]\n"
             "for n in 0..4:\n"
             "  for o in 0..6:\n"
             "    for oc_jam in 0..1:\n"
             "      for kk in 0..3 (flat):\n"
             "        for ic in 0..16 (vector):\n"
             "          din[n, o + kk, ic] := din[n, o + kk, ic] + dout[n, o, 4*oc_jam] * "
             "w[4*oc_jam, kk, ic]\n"
             "          din[n, o + kk, ic] := din[n, o + kk, ic] + dout[n, o, 4*oc_jam + 1] * "
             "w[4*oc_jam + 1, kk, ic]\n"
             "          din[n, o + kk, ic] := din[n, o + kk, ic] + dout[n, o, 4*oc_jam + 2] * "
             "w[4*oc_jam + 2, kk, ic]\n"
             "          din[n, o + kk, ic] := din[n, o + kk, ic] + dout[n, o, 4*oc_jam + 3] * "
             "w[4*oc_jam + 3, kk, ic]\n");
  check_same_results(ctx, plain, all);
  cn_ctx_destroy(ctx);
}

/* ---- Affine bounds (Tile's cumulative sums): a loop never moves inside one whose bounds read
 * its variable, a loop with bounds moves outward ---- */

typedef struct {
  cn_node *in2, *out2, *in1, *out1;
  cn_symbol i, j, k, p, q;
} cumsum_fixture;

/* `for v in 0..box` with the upper bound `outer + 1`. */
static cn_ll_stmt *triangle_loop(cn_ctx *ctx, cn_symbol v, int64_t box, cn_symbol outer,
                                 cn_ll_stmt *body) {
  cn_ll_bound upper = {affine1(outer, 1, 1), 1};
  return cn_lb_bounds(ctx, cn_lb_loop(ctx, v, 0, box, body), 0, NULL, 1, &upper);
}

/* out2[i, j] += in2[k, j] for k <= i, looping i, j, k; out1[p] += in1[q] for q <= p. */
static cn_ll_proc *cumsum_proc(cn_ctx *ctx, const cumsum_fixture *f) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_expr *read2 =
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 2, cn_index_iter(f->k), cn_index_iter(f->j)));
  cn_index *out2_idx = cn_lb_indices(ctx, 2, cn_index_iter(f->i), cn_index_iter(f->j));
  cn_ll_stmt *two = cn_lb_loop(
      ctx, f->i, 0, 64,
      cn_lb_loop(ctx, f->j, 0, 32,
                 triangle_loop(ctx, f->k, 64, f->i,
                               cn_lb_accum(ctx, 1, single, out2_idx, CN_OP_ADD, read2))));
  cn_ll_expr *read1 = cn_lb_get(ctx, 2, single, cn_lb_indices(ctx, 1, cn_index_iter(f->q)));
  cn_index *out1_idx = cn_lb_indices(ctx, 1, cn_index_iter(f->p));
  cn_ll_stmt *one = cn_lb_loop(
      ctx, f->p, 0, 256,
      triangle_loop(ctx, f->q, 256, f->p, cn_lb_accum(ctx, 3, single, out1_idx, CN_OP_ADD, read1)));
  cn_ll_param params[4] = {param_of(f->in2), param_of(f->out2), param_of(f->in1),
                           param_of(f->out1)};
  return cn_lb_proc(ctx, "cumsum", cn_lb_seq(ctx, 2, two, one), 4, params, 0, NULL);
}

static void test_affine_bounds(void) {
  cn_ctx *ctx = cn_ctx_create();
  cumsum_fixture f = {.in2 = node(ctx, "in2", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)32),
                      .out2 = node(ctx, "out2", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)32),
                      .in1 = node(ctx, "in1", CN_PREC_SINGLE, 1, (int64_t)256),
                      .out1 = node(ctx, "out1", CN_PREC_SINGLE, 1, (int64_t)256),
                      .i = cn_symbol_create(ctx, "i", 64),
                      .j = cn_symbol_create(ctx, "j", 32),
                      .k = cn_symbol_create(ctx, "k", 64),
                      .p = cn_symbol_create(ctx, "p", 256),
                      .q = cn_symbol_create(ctx, "q", 256)};
  cn_ll_proc *plain = cumsum_proc(ctx, &f), *scheduled = cumsum_proc(ctx, &f);
  CHECK(plain && scheduled);
  check_text(scheduled_text(ctx, scheduled),
             "routine cumsum\n"
             "  params: in2#1 single[64, 32], out2#2 single[64, 32], in1#3 single[256], "
             "out1#4 single[256]\n"
             "for i in 0..64 (parallel):\n"
             "  for k_jam in 0..min(ceil((i - 2) / 4), 16):\n"
             "    for j in 0..32 (vector):\n"
             "      out2[i, j] := out2[i, j] + in2[4*k_jam, j]\n"
             "      out2[i, j] := out2[i, j] + in2[4*k_jam + 1, j]\n"
             "      out2[i, j] := out2[i, j] + in2[4*k_jam + 2, j]\n"
             "      out2[i, j] := out2[i, j] + in2[4*k_jam + 3, j]\n"
             "  for k_jam in max(ceil((i - 2) / 4), 0)..min(ceil((i + 1) / 4), 16):\n"
             "    for k in 4*k_jam..i + 1:\n"
             "      for j in 0..32 (vector):\n"
             "        out2[i, j] := out2[i, j] + in2[k, j]\n"
             "for p in 0..256 (parallel):\n"
             "  for q in 0..p + 1:\n"
             "    out1[p] := out1[p] + in1[q]\n");
  check_same_results(ctx, plain, scheduled);
  cn_ctx_destroy(ctx);
}

/* ---- Reductions: to a scalar, and two reduction loops that must keep their order ---- */

/* b[j] += d[i, j] over i in 0..100, j in 0..128 (a bias's gradient over a batch). */
static cn_ll_proc *bias_grad_proc(cn_ctx *ctx, cn_node *const *db) {
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_ll_stmt *body = cn_lb_loop(
      ctx, i, 0, 100,
      cn_lb_loop(
          ctx, j, 0, 128,
          cn_lb_accum(ctx, 1, CN_PREC_SINGLE, cn_lb_indices(ctx, 1, cn_index_iter(j)), CN_OP_ADD,
                      cn_lb_get(ctx, 0, CN_PREC_SINGLE,
                                cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))))));
  cn_ll_param params[2] = {param_of(db[0]), param_of(db[1])};
  return cn_lb_proc(ctx, "bias_grad", body, 2, params, 0, NULL);
}

/* The text of proc scheduled as for a device backend (every loop pass, cn_sched_options.device:
 * no tiling, no jam, every loop of the parallel run marked) with a work threshold of 1. */
static const char *device_text(cn_ctx *ctx, cn_ll_proc *proc) {
  cn_sched_options opts = {.passes = LOOP_PASSES,
                           .l1_bytes = 1024,
                           .llc_bytes = 4096,
                           .parallel_work = 1,
                           .device = true};
  CHECK_INT(cn_sched_proc(ctx, proc, &opts), CN_OK);
  const char *text = cn_ll_to_string(ctx, proc);
  CHECK(text != NULL);
  return text ? text : "";
}

/* s[] += a[i, j] (params a, s), and t[i] += x[i, k, j] looping i, j, k (params x, t): j has the
 * unit stride but is a reduction with the reduction k inside it. */
static cn_ll_proc *reductions_proc(cn_ctx *ctx, cn_node *const *nodes, const cn_symbol *ijk) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = ijk[0], j = ijk[1], k = ijk[2];
  cn_ll_expr *a =
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)));
  cn_ll_stmt *scalar = cn_lb_loop(
      ctx, i, 0, 256,
      cn_lb_loop(ctx, j, 0, 256, cn_lb_accum(ctx, 1, single, cn_lb_indices(ctx, 0), CN_OP_ADD, a)));
  cn_ll_expr *x = cn_lb_get(
      ctx, 2, single, cn_lb_indices(ctx, 3, cn_index_iter(i), cn_index_iter(k), cn_index_iter(j)));
  cn_ll_stmt *ordered = cn_lb_loop(
      ctx, i, 0, 16,
      cn_lb_loop(ctx, j, 0, 64,
                 cn_lb_loop(ctx, k, 0, 64,
                            cn_lb_accum(ctx, 3, single, cn_lb_indices(ctx, 1, cn_index_iter(i)),
                                        CN_OP_ADD, x))));
  cn_ll_param params[4] = {param_of(nodes[0]), param_of(nodes[1]), param_of(nodes[2]),
                           param_of(nodes[3])};
  return cn_lb_proc(ctx, "reductions", cn_lb_seq(ctx, 2, scalar, ordered), 4, params, 0, NULL);
}

static void test_reductions(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *nodes[4] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)256, (int64_t)256),
                       node(ctx, "s", CN_PREC_SINGLE, 0),
                       node(ctx, "x", CN_PREC_SINGLE, 3, (int64_t)16, (int64_t)64, (int64_t)64),
                       node(ctx, "t", CN_PREC_SINGLE, 1, (int64_t)16)};
  cn_symbol ijk[3] = {cn_symbol_create(ctx, "i", 256), cn_symbol_create(ctx, "j", 256),
                      cn_symbol_create(ctx, "k", 64)};
  cn_ll_proc *plain = reductions_proc(ctx, nodes, ijk),
             *scheduled = reductions_proc(ctx, nodes, ijk),
             *grid = reductions_proc(ctx, nodes, ijk);
  CHECK(plain && scheduled && grid);
  if (!plain || !scheduled || !grid) return;
  check_text(scheduled_text(ctx, scheduled),
             "routine reductions\n"
             "  params: a#1 single[256, 256], s#2 single[], x#3 single[16, 64, 64], "
             "t#4 single[16]\n"
             "for i in 0..256:\n"
             "  for j in 0..256:\n"
             "    s[] := s[] + a[i, j]\n"
             "for i_jam in 0..2 (parallel):\n"
             "  for j in 0..64:\n"
             "    for k in 0..64:\n"
             "      t[8*i_jam] := t[8*i_jam] + x[8*i_jam, k, j]\n"
             "      t[8*i_jam + 1] := t[8*i_jam + 1] + x[8*i_jam + 1, k, j]\n"
             "      t[8*i_jam + 2] := t[8*i_jam + 2] + x[8*i_jam + 2, k, j]\n"
             "      t[8*i_jam + 3] := t[8*i_jam + 3] + x[8*i_jam + 3, k, j]\n"
             "      t[8*i_jam + 4] := t[8*i_jam + 4] + x[8*i_jam + 4, k, j]\n"
             "      t[8*i_jam + 5] := t[8*i_jam + 5] + x[8*i_jam + 5, k, j]\n"
             "      t[8*i_jam + 6] := t[8*i_jam + 6] + x[8*i_jam + 6, k, j]\n"
             "      t[8*i_jam + 7] := t[8*i_jam + 7] + x[8*i_jam + 7, k, j]\n");
  check_same_results(ctx, plain, scheduled);
  /* for a device: no jam, the output loop the grid */
  CHECK_HAS(device_text(ctx, grid), "for i in 0..256:\n  for j in 0..256:\n    s[] := s[] + "
                                    "a[i, j]\nfor i in 0..16 (parallel):\n  for j in 0..64:\n"
                                    "    for k in 0..64:\n      t[i] := t[i] + x[i, k, j]\n");
  check_same_results(ctx, plain, grid);
  cn_ctx_destroy(ctx);
}

/* ---- Cross-iteration dependences: nothing marked where an iteration reads another's cell ---- */

/* u[v] := u[v - 1] + a[v] for v in 1..40000 (params a, u), and y[i, j] := y[i, j - 1] + b[i, j]
 * (params b, y): rows are independent, columns are not. */
static cn_ll_proc *scans_proc(cn_ctx *ctx, cn_node *const *nodes, const cn_symbol *vij) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol v = vij[0], i = vij[1], j = vij[2];
  cn_ll_expr *sum1 = cn_lb_op(
      ctx, CN_OP_ADD, single, cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 1, affine1(v, 1, -1))),
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 1, cn_index_iter(v))), NULL);
  cn_ll_stmt *scan1 = cn_lb_loop(ctx, v, 1, 40000,
                                 cn_lb_set(ctx, 1, cn_lb_indices(ctx, 1, cn_index_iter(v)), sum1));
  cn_ll_expr *sum2 = cn_lb_op(
      ctx, CN_OP_ADD, single,
      cn_lb_get(ctx, 3, single, cn_lb_indices(ctx, 2, cn_index_iter(i), affine1(j, 1, -1))),
      cn_lb_get(ctx, 2, single, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))), NULL);
  cn_ll_stmt *scan2 = cn_lb_loop(
      ctx, i, 0, 256,
      cn_lb_loop(
          ctx, j, 1, 256,
          cn_lb_set(ctx, 3, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)), sum2)));
  cn_ll_param params[4] = {param_of(nodes[0]), param_of(nodes[1]), param_of(nodes[2]),
                           param_of(nodes[3])};
  return cn_lb_proc(ctx, "scans", cn_lb_seq(ctx, 2, scan1, scan2), 4, params, 0, NULL);
}

static void test_dependences(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *nodes[4] = {node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)40000),
                       node(ctx, "u", CN_PREC_SINGLE, 1, (int64_t)40000),
                       node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)256, (int64_t)256),
                       node(ctx, "y", CN_PREC_SINGLE, 2, (int64_t)256, (int64_t)256)};
  cn_symbol vij[3] = {cn_symbol_create(ctx, "v", 40000), cn_symbol_create(ctx, "i", 256),
                      cn_symbol_create(ctx, "j", 256)};
  cn_ll_proc *plain = scans_proc(ctx, nodes, vij), *scheduled = scans_proc(ctx, nodes, vij),
             *grid = scans_proc(ctx, nodes, vij);
  CHECK(plain && scheduled && grid);
  if (!plain || !scheduled || !grid) return;
  check_text(scheduled_text(ctx, scheduled),
             "routine scans\n"
             "  params: a#1 single[40000], u#2 single[40000], b#3 single[256, 256], "
             "y#4 single[256, 256]\n"
             "for v in 1..40000:\n"
             "  u[v] := u[v - 1] + a[v]\n"
             "for i in 0..256 (parallel):\n"
             "  for j in 1..256:\n"
             "    y[i, j] := y[i, j - 1] + b[i, j]\n");
  check_same_results(ctx, plain, scheduled);
  /* for a device too: j, which reads the cell before its own, stays in the work item */
  CHECK_HAS(device_text(ctx, grid), "for i in 0..256 (parallel):\n  for j in 1..256:\n");
  check_same_results(ctx, plain, grid);
  cn_ctx_destroy(ctx);
}

/* ---- A nest from the lowering: c =:+ a * b over the product space (i, k, j) ---- */

static cn_ll_proc *lowered_matmul(cn_ctx *ctx, cn_node *const *abc, const cn_symbol *ikj) {
  int64_t sizes[3] = {24, 20, 16};
  cn_index mc[2] = {cn_index_iter(ikj[0]), cn_index_iter(ikj[1])};
  cn_index ma[2] = {cn_index_iter(ikj[0]), cn_index_iter(ikj[2])};
  cn_index mb[2] = {cn_index_iter(ikj[2]), cn_index_iter(ikj[1])};
  cn_proj_tensor rhs[2] = {tensor(abc[0], ma), tensor(abc[1], mb)};
  cn_proj *proj = cn_proj_create(ctx, 3, ikj, sizes, tensor(abc[2], mc), 2, rhs);
  cn_buffer ab[2] = {{abc[0], false}, {abc[1], false}};
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, abc[2], CN_OP_MUL, ab, proj);
  cn_ll_proc *proc = NULL;
  CHECK(asgn != NULL);
  if (!asgn) return NULL;
  CHECK_INT(cn_ll_lower(ctx, asgn, "lowered", &proc), CN_OK);
  CHECK_INT(cn_ll_simplify(ctx, proc), CN_OK);
  return proc;
}

static void test_lowered(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)24, (int64_t)16),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)16, (int64_t)20),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)24, (int64_t)20)};
  cn_symbol ikj[3] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "k", 0),
                      cn_symbol_create(ctx, "j", 0)};
  cn_ll_proc *plain = lowered_matmul(ctx, abc, ikj), *scheduled = lowered_matmul(ctx, abc, ikj);
  CHECK(plain && scheduled);
  if (!plain || !scheduled) return;
  const char *plain_text = cn_ll_to_string(ctx, plain);
  CHECK_HAS(plain_text, "for i in 0..24:\n  for k in 0..20:\n    for j in 0..16:\n");
  CHECK_HAS(scheduled_text(ctx, scheduled),
            "for i in 0..24:\n  for j_jam in 0..4:\n    for k in 0..20 (vector):\n"
            "      c[i, k] := c[i, k] + a[i, 4*j_jam] * b[4*j_jam, k]\n");
  check_same_results(ctx, plain, scheduled);
  cn_ctx_destroy(ctx);
}

/* ---- Unroll-and-jam ---- */

/* c[i, k] =: w[k, j] * x[i, j] + k (a dense layer's forward form: the reduction j innermost is
 * the only unit-stride loop) over i < 5, k < 20, j < 50: k (an output loop) jams 8 copies into j,
 * the 4 values left run after in the original form, and the embedded index k is substituted. */
static cn_ll_proc *dense_proc(cn_ctx *ctx, cn_node *const *wxc, const cn_symbol *ikj) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = ikj[0], k = ikj[1], j = ikj[2];
  cn_ll_expr *product = cn_lb_op(
      ctx, CN_OP_MUL, single,
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(j))),
      cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))), NULL);
  cn_ll_expr *value =
      cn_lb_op(ctx, CN_OP_ADD, single, product, cn_lb_index(ctx, cn_index_iter(k)), NULL);
  cn_index *c_ik = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(k));
  cn_ll_stmt *body = cn_lb_loop(
      ctx, i, 0, 5,
      cn_lb_loop(ctx, k, 0, 20,
                 cn_lb_loop(ctx, j, 0, 50, cn_lb_accum(ctx, 2, single, c_ik, CN_OP_ADD, value))));
  cn_ll_param params[3] = {param_of(wxc[0]), param_of(wxc[1]), param_of(wxc[2])};
  return cn_lb_proc(ctx, "dense", body, 3, params, 0, NULL);
}

static void test_jam(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *wxc[3] = {node(ctx, "w", CN_PREC_SINGLE, 2, (int64_t)20, (int64_t)50),
                     node(ctx, "x", CN_PREC_SINGLE, 2, (int64_t)5, (int64_t)50),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)5, (int64_t)20)};
  cn_symbol ikj[3] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "k", 0),
                      cn_symbol_create(ctx, "j", 0)};
  cn_ll_proc *plain = dense_proc(ctx, wxc, ikj), *scheduled = dense_proc(ctx, wxc, ikj);
  CHECK(plain && scheduled);
  if (!plain || !scheduled) return;
  cn_sched_options jam_only = {.passes = CN_SCHED_JAM};
  CHECK_INT(cn_sched_proc(ctx, scheduled, &jam_only), CN_OK);
  const char *text = cn_ll_to_string(ctx, scheduled);
  CHECK_HAS(text, "for i in 0..5:\n"
                  "  for k_jam in 0..2:\n"
                  "    for j in 0..50:\n"
                  "      c[i, 8*k_jam] := c[i, 8*k_jam] + (w[8*k_jam, j] * x[i, j] + 8*k_jam)\n"
                  "      c[i, 8*k_jam + 1] := c[i, 8*k_jam + 1] + (w[8*k_jam + 1, j] * x[i, j] + "
                  "(8*k_jam + 1))\n");
  CHECK_HAS(text, "      c[i, 8*k_jam + 7] := c[i, 8*k_jam + 7] + (w[8*k_jam + 7, j] * x[i, j] + "
                  "(8*k_jam + 7))\n"
                  "  for k in 16..20:\n"
                  "    for j in 0..50:\n"
                  "      c[i, k] := c[i, k] + (w[k, j] * x[i, j] + k)\n");
  check_same_results(ctx, plain, scheduled);
  /* Too small to jam: the same nest with a reduction of 4 values (inner loop below 8). */
  cn_symbol r = cn_symbol_create(ctx, "r", 0), s = cn_symbol_create(ctx, "s", 0),
            t = cn_symbol_create(ctx, "t", 0);
  cn_node *small[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)4),
                       node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)4),
                       node(ctx, "d", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)4)};
  cn_ll_param params[3] = {param_of(small[0]), param_of(small[1]), param_of(small[2])};
  cn_ll_proc *tiny = cn_lb_proc(ctx, "tiny", matmul_body(ctx, "d =:+ a * b", r, 64, s, 4, t, 4), 3,
                                params, 0, NULL);
  CHECK(tiny != NULL);
  if (tiny) {
    CHECK_INT(cn_sched_proc(ctx, tiny, &jam_only), CN_OK);
    CHECK(strstr(cn_ll_to_string(ctx, tiny), "jam") == NULL);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Unroll-and-jam of a loop with an affine upper bound (causal attention's prefixes) ---- */

/* s[q, k] += a[q, d] * b[k, d] looping q < 45, k < q + extra (extra <= 1: the bound stays in the
 * box of 45, not a multiple of 8), d < 16 (the scores, a reduction innermost), then o[q, d] +=
 * p[q, k] * v[k, d] looping q, k (the same bound), d (the mix with V, an output innermost; its k
 * is named kk). extra 1 is the causal prefix k <= q; with -2 the first rows run nothing and the
 * jammed groups' bound is negative for them. Params a, b, s, p, v, o. */
static cn_ll_proc *prefix_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *qkd,
                               int64_t extra) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol q = qkd[0], d = qkd[2];
  cn_ll_bound upper = {affine1(q, 1, extra), 1};
  cn_ll_stmt *loops[2];
  for (int f = 0; f < 2; f++) {
    cn_symbol k = qkd[f ? 3 : 1]; /* two names, so that the printed jam loops have two */
    cn_ll_expr *x = cn_lb_get(ctx, f ? 3 : 0, single,
                              cn_lb_indices(ctx, 2, cn_index_iter(q), cn_index_iter(f ? k : d)));
    cn_ll_expr *y = cn_lb_get(ctx, f ? 4 : 1, single,
                              cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(d)));
    cn_index *w = cn_lb_indices(ctx, 2, cn_index_iter(q), cn_index_iter(f ? d : k));
    cn_ll_stmt *store = cn_lb_accum(ctx, f ? 5 : 2, single, w, CN_OP_ADD,
                                    cn_lb_op(ctx, CN_OP_MUL, single, x, y, NULL));
    cn_ll_stmt *kl = cn_lb_bounds(ctx, cn_lb_loop(ctx, k, 0, 45, cn_lb_loop(ctx, d, 0, 16, store)),
                                  0, NULL, 1, &upper);
    loops[f] = cn_lb_loop(ctx, q, 0, 45, kl);
  }
  cn_ll_param params[6];
  for (int i = 0; i < 6; i++) params[i] = param_of(n[i]);
  return cn_lb_proc(ctx, "prefix", cn_lb_seq(ctx, 2, loops[0], loops[1]), 6, params, 0, NULL);
}

static void test_jam_prefix(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[6] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)16),
                   node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)16),
                   node(ctx, "s", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)45),
                   node(ctx, "p", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)45),
                   node(ctx, "v", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)16),
                   node(ctx, "o", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)16)};
  cn_symbol qkd[4] = {cn_symbol_create(ctx, "q", 0), cn_symbol_create(ctx, "k", 0),
                      cn_symbol_create(ctx, "d", 0), cn_symbol_create(ctx, "kk", 0)};
  for (int64_t extra = 1; extra >= -2; extra -= 3) {
    cn_ll_proc *plain = prefix_proc(ctx, n, qkd, extra), *all = prefix_proc(ctx, n, qkd, extra);
    CHECK(plain && all);
    if (!plain || !all) continue;
    const char *text = scheduled_text(ctx, all);
    if (extra == 1) {
      /* the scores: eight cells of a row per pass over d, the group q + 1 cuts after them, no
       * remainder of the box (q + 1 <= 45) */
      CHECK_HAS(text, "  for k_jam in 0..min(ceil((q - 6) / 8), 5):\n"
                      "    for d in 0..16:\n"
                      "      s[q, 8*k_jam] := s[q, 8*k_jam] + a[q, d] * b[8*k_jam, d]\n");
      CHECK_HAS(text, "      s[q, 8*k_jam + 7] := s[q, 8*k_jam + 7] + a[q, d] * b[8*k_jam + 7, d]\n"
                      "  for k_jam in max(ceil((q - 6) / 8), 0)..min(ceil((q + 1) / 8), 5):\n"
                      "    for k in 8*k_jam..q + 1:\n"
                      "      for d in 0..16:\n"
                      "        s[q, k] := s[q, k] + a[q, d] * b[k, d]\n"
                      "  for k in 40..q + 1:\n");
      /* the mix with V: four updates of one row of o per load and store, kk ascending */
      CHECK_HAS(text, "  for kk_jam in 0..min(ceil((q - 2) / 4), 11):\n"
                      "    for d in 0..16 (vector):\n"
                      "      o[q, d] := o[q, d] + p[q, 4*kk_jam] * v[4*kk_jam, d]\n");
    } else {
      CHECK_HAS(text, "  for k_jam in 0..min(ceil((q - 9) / 8), 5):\n");
      CHECK_HAS(text, "  for k in 40..q - 2:\n");
    }
    check_same_results(ctx, plain, all);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Scratch written first (fresh.c): when a routine may skip zeroing a buffer ---- */

/* for i < 4, j < jn: body, over params a, t, o [4, 8]. */
static cn_ll_proc *fresh_proc(cn_ctx *ctx, cn_node *const *ato, cn_symbol i, cn_symbol j,
                              int64_t jn, cn_ll_stmt *body) {
  cn_ll_param params[3] = {param_of(ato[0]), param_of(ato[1]), param_of(ato[2])};
  return cn_lb_proc(ctx, "fresh", cn_lb_loop(ctx, i, 0, 4, cn_lb_loop(ctx, j, 0, jn, body)), 3,
                    params, 0, NULL);
}

static void test_written_first(void) {
  cn_ctx *ctx = cn_ctx_create();
  const cn_prec single = CN_PREC_SINGLE;
  cn_node *ato[3] = {node(ctx, "a", single, 2, (int64_t)4, (int64_t)8),
                     node(ctx, "t", single, 2, (int64_t)4, (int64_t)8),
                     node(ctx, "o", single, 2, (int64_t)4, (int64_t)8)};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
#define IJ     cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))
#define GET(p) cn_lb_get(ctx, p, single, IJ)
  /* t := 2a, then o := t + 1 at the same cell: t and o are written whole first, a is read */
  cn_ll_stmt *both = cn_lb_seq(
      ctx, 2, cn_lb_set(ctx, 1, IJ, cn_lb_op(ctx, CN_OP_MUL, single, GET(0), GET(0), NULL)),
      cn_lb_set(ctx, 2, IJ,
                cn_lb_op(ctx, CN_OP_ADD, single, GET(1), cn_lb_num(ctx, single, 1), NULL)));
  cn_ll_proc *p = fresh_proc(ctx, ato, i, j, 8, both);
  CHECK(p && cn_sched_written_first(p, 1) && cn_sched_written_first(p, 2));
  CHECK(p && !cn_sched_written_first(p, 0));
  /* an accumulation reads the zeros */
  p = fresh_proc(ctx, ato, i, j, 8, cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0)));
  CHECK(p && !cn_sched_written_first(p, 1));
  /* a box short of the dim leaves column 7 unwritten */
  p = fresh_proc(ctx, ato, i, j, 7, cn_lb_set(ctx, 1, IJ, GET(0)));
  CHECK(p && !cn_sched_written_first(p, 1));
  /* a read of t before its write in the body */
  p = fresh_proc(ctx, ato, i, j, 8,
                 cn_lb_seq(ctx, 2, cn_lb_set(ctx, 2, IJ, GET(1)), cn_lb_set(ctx, 1, IJ, GET(0))));
  CHECK(p && !cn_sched_written_first(p, 1) && cn_sched_written_first(p, 2));
  /* a read of another cell of t than the one written (the next row's, not yet written) */
  cn_ll_expr *next =
      cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 2, affine1(i, 1, 1), cn_index_iter(j)));
  p = fresh_proc(ctx, ato, i, j, 8,
                 cn_lb_seq(ctx, 2, cn_lb_set(ctx, 1, IJ, GET(0)), cn_lb_set(ctx, 2, IJ, next)));
  CHECK(p && !cn_sched_written_first(p, 1));
  /* one column only: t[i, 0] */
  p = fresh_proc(
      ctx, ato, i, j, 8,
      cn_lb_set(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0)), GET(0)));
  CHECK(p && !cn_sched_written_first(p, 1));
  /* a guarded write */
  cn_ll_cond half = {cn_index_iter(j), 0, 4};
  p = fresh_proc(ctx, ato, i, j, 8, cn_lb_guard(ctx, 1, &half, cn_lb_set(ctx, 1, IJ, GET(0))));
  CHECK(p && !cn_sched_written_first(p, 1));
#undef GET
#undef IJ
  cn_ctx_destroy(ctx);
}

/* ---- Fill forwarding: a clear's constant read by the first update ---- */

/* t[i, j] := 0 over i < 4, j < 8, then `update` in a nest of its own over the same box (fresh
 * loop variables i2, j2 of the caller), then o[i, j] := o[i, j] + t[i, j] (a later reader). */
static cn_ll_proc *fill_proc(cn_ctx *ctx, cn_node *const *ato, cn_symbol i, cn_symbol j,
                             cn_ll_stmt *update_nest) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
  cn_ll_stmt *clear = cn_lb_loop(
      ctx, i, 0, 4, cn_lb_loop(ctx, j, 0, 8, cn_lb_set(ctx, 1, ij, cn_lb_num(ctx, single, 0))));
  cn_ll_stmt *reader = cn_lb_loop(
      ctx, i, 0, 4,
      cn_lb_loop(ctx, j, 0, 8,
                 cn_lb_accum(ctx, 2, single, ij, CN_OP_ADD, cn_lb_get(ctx, 1, single, ij))));
  cn_ll_param params[3] = {param_of(ato[0]), param_of(ato[1]), param_of(ato[2])};
  return cn_lb_proc(ctx, "fill", cn_lb_seq(ctx, 3, clear, update_nest, reader), 3, params, 0, NULL);
}

static void test_fill(void) {
  cn_ctx *ctx = cn_ctx_create();
  const cn_prec single = CN_PREC_SINGLE;
  cn_node *ato[3] = {node(ctx, "a", single, 2, (int64_t)4, (int64_t)8),
                     node(ctx, "t", single, 2, (int64_t)4, (int64_t)8),
                     node(ctx, "o", single, 2, (int64_t)4, (int64_t)8)};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_symbol i2 = cn_symbol_create(ctx, "i2", 0), j2 = cn_symbol_create(ctx, "j2", 0);
  cn_symbol k = cn_symbol_create(ctx, "k", 0);
#define IJ         cn_lb_indices(ctx, 2, cn_index_iter(i2), cn_index_iter(j2))
#define GET(p)     cn_lb_get(ctx, p, single, IJ)
#define NEST(body) cn_lb_loop(ctx, i2, 0, 4, cn_lb_loop(ctx, j2, 0, 8, body))
  /* t += a * 0 (-0 where a < 0: the forwarded 0 + -0 must still give +0), then t += a: the
   * first update reads the constant, the clear goes, the second update is left as it is */
  cn_sched_options fill_only = {.passes = CN_SCHED_FILL};
#define UPDATES                                                                                    \
  NEST(cn_lb_seq(                                                                                  \
      ctx, 2,                                                                                      \
      cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD,                                                   \
                  cn_lb_op(ctx, CN_OP_MUL, single, GET(0), cn_lb_num(ctx, single, 0), NULL)),      \
      cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0))))
  cn_ll_proc *plain = fill_proc(ctx, ato, i, j, UPDATES),
             *filled = fill_proc(ctx, ato, i, j, UPDATES);
#undef UPDATES
  CHECK(plain && filled);
  if (!plain || !filled) return;
  CHECK_INT(cn_sched_proc(ctx, filled, &fill_only), CN_OK);
  const char *text = cn_ll_to_string(ctx, filled);
  CHECK_STR(text ? text : "", "routine fill\n"
                              "  params: a#1 single[4, 8], t#2 single[4, 8], o#3 single[4, 8]\n"
                              "for i2 in 0..4:\n"
                              "  for j2 in 0..8:\n"
                              "    t[i2, j2] := 0 + a[i2, j2] * 0\n"
                              "    t[i2, j2] := t[i2, j2] + a[i2, j2]\n"
                              "for i in 0..4:\n"
                              "  for j in 0..8:\n"
                              "    o[i, j] := o[i, j] + t[i, j]\n");
  check_same_results(ctx, plain, filled);
  /* Left alone: a reduction (k: each cell updated twice), a read of another cell, a reader
   * between the clear and the update, a guarded update, a padded buffer. */
  cn_ll_stmt *kept[5] = {
      cn_lb_loop(
          ctx, i2, 0, 4,
          cn_lb_loop(ctx, j2, 0, 8,
                     cn_lb_loop(ctx, k, 0, 2, cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0))))),
      NEST(cn_lb_accum(
          ctx, 1, single, IJ, CN_OP_ADD,
          cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 2, cn_index_iter(i2), cn_index_fixed(0))))),
      cn_lb_seq(ctx, 2, NEST(cn_lb_set(ctx, 2, IJ, GET(1))),
                NEST(cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0)))),
      NEST(cn_lb_guard(ctx, 1, &(cn_ll_cond){cn_index_iter(j2), 0, 4},
                       cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0)))),
      NEST(cn_lb_accum(ctx, 1, single, IJ, CN_OP_ADD, GET(0)))};
  for (int c = 0; c < 5; c++) {
    cn_node *padded = node(ctx, "t", single, 2, (int64_t)4, (int64_t)8);
    if (c == 4) CHECK_INT(cn_node_set_padding(padded, 1, 0, 1), CN_OK);
    cn_node *nodes[3] = {ato[0], c == 4 ? padded : ato[1], ato[2]};
    cn_ll_proc *p = fill_proc(ctx, nodes, i, j, kept[c]);
    CHECK(p != NULL);
    if (!p) continue;
    const char *before = cn_ll_to_string(ctx, p);
    CHECK_INT(cn_sched_proc(ctx, p, &fill_only), CN_OK);
    const char *after = cn_ll_to_string(ctx, p);
    CHECK(before && after && strcmp(before, after) == 0);
    if (before && after && strcmp(before, after) != 0) printf("case %d:\n%s", c, after);
  }
#undef NEST
#undef GET
#undef IJ
  cn_ctx_destroy(ctx);
}

/* ---- Flat pairs: an element-wise nest over contiguous buffers runs as one loop ---- */

/* out[i, j] := a[i, j] * b[i, j] + extra, extra a read of b at [0, j] (a broadcast over i) when
 * `broadcast`, or the embedded index j when `embed`; i < 12, j < 10. */
static cn_ll_proc *pointwise_proc(cn_ctx *ctx, cn_node *const *abo, cn_symbol i, cn_symbol j,
                                  bool broadcast, bool embed) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
  cn_ll_expr *extra =
      broadcast
          ? cn_lb_get(ctx, 1, single, cn_lb_indices(ctx, 2, cn_index_fixed(0), cn_index_iter(j)))
      : embed ? cn_lb_index(ctx, cn_index_iter(j))
              : cn_lb_num(ctx, single, 0.5);
  cn_ll_expr *value = cn_lb_op(ctx, CN_OP_ADD, single,
                               cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, 0, single, ij),
                                        cn_lb_get(ctx, 1, single, ij), NULL),
                               extra, NULL);
  cn_ll_stmt *body =
      cn_lb_loop(ctx, i, 0, 12, cn_lb_loop(ctx, j, 0, 10, cn_lb_set(ctx, 2, ij, value)));
  cn_ll_param params[3] = {param_of(abo[0]), param_of(abo[1]), param_of(abo[2])};
  return cn_lb_proc(ctx, "pointwise", body, 3, params, 0, NULL);
}

static void test_flat(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abo[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)12, (int64_t)10),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)12, (int64_t)10),
                     node(ctx, "o", CN_PREC_SINGLE, 2, (int64_t)12, (int64_t)10)};
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
  cn_ll_proc *plain = pointwise_proc(ctx, abo, i, j, false, false);
  cn_ll_proc *scheduled = pointwise_proc(ctx, abo, i, j, false, false);
  CHECK(plain && scheduled);
  if (!plain || !scheduled) return;
  CHECK_HAS(scheduled_text(ctx, scheduled), "for i in 0..12 (flat):\n  for j in 0..10 (vector):\n");
  /* for a device both loops are the grid, one work item a cell */
  cn_ll_proc *grid = pointwise_proc(ctx, abo, i, j, false, false);
  CHECK(grid != NULL);
  if (grid) {
    CHECK_HAS(device_text(ctx, grid),
              "for i in 0..12 (parallel):\n  for j in 0..10 (parallel, vector):\n");
    check_same_results(ctx, plain, grid);
  }
  cn_sbuf c = {0};
  CHECK_INT(cn_cgen_source(ctx, scheduled, &c), CN_OK);
  CHECK_HAS(c.data ? c.data : "",
            "  #pragma omp simd\n"
            "  for (int64_t j = 0; j < 120; ++j) { /* i and j as one loop */\n"
            "    o_3[j] = ((a_1[j] * b_2[j]) + 0.5f);\n");
  cn_sbuf_free(&c);
  check_same_results(ctx, plain, scheduled);
  /* Not flat: a broadcast read (b[0, j] does not advance with i), an embedded index, a padded
   * buffer (its rows are longer than 10 cells). */
  cn_ll_proc *broadcast = pointwise_proc(ctx, abo, i, j, true, false);
  cn_ll_proc *embed = pointwise_proc(ctx, abo, i, j, false, true);
  CHECK(broadcast && embed);
  if (broadcast) CHECK(!strstr(scheduled_text(ctx, broadcast), "flat"));
  if (embed) CHECK(!strstr(scheduled_text(ctx, embed), "flat"));
  cn_node *padded = node(ctx, "p", CN_PREC_SINGLE, 2, (int64_t)12, (int64_t)10);
  CHECK_INT(cn_node_set_padding(padded, 1, 0, 2), CN_OK);
  cn_node *with_pad[3] = {abo[0], padded, abo[2]};
  cn_ll_proc *pad = pointwise_proc(ctx, with_pad, i, j, false, false);
  CHECK(pad != NULL);
  if (pad) CHECK(!strstr(scheduled_text(ctx, pad), "flat"));
  cn_ctx_destroy(ctx);
}

/* ---- Scheduling for a device: grids of every independent loop ---- */

/* For a device, output loops go outside reductions (test_flat: an element-wise nest is a grid of
 * both its loops; test_reductions, test_dependences: reductions and a scan's dependent loop stay
 * inside the work item, and the caches that tile and jam for a CPU change nothing). */
static void test_device_order(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* A bias gradient b[j] += d[i, j]: a CPU keeps i outside (jammed by 4; j, the vector loop,
   * inside); a device
   * takes the output loop j outside, the grid, each work item summing its column in i's order */
  cn_node *bd[2] = {node(ctx, "d", CN_PREC_SINGLE, 2, (int64_t)100, (int64_t)128),
                    node(ctx, "b", CN_PREC_SINGLE, 1, (int64_t)128)};
  cn_ll_proc *host = bias_grad_proc(ctx, bd), *device = bias_grad_proc(ctx, bd),
             *plain = bias_grad_proc(ctx, bd);
  CHECK(host && device && plain);
  if (!host || !device || !plain) return;
  CHECK_HAS(scheduled_text(ctx, host), "for i_jam in 0..25:\n  for j in 0..128 (vector):\n");
  CHECK_HAS(device_text(ctx, device),
            "for j in 0..128 (parallel):\n  for i in 0..100:\n    b[j] := b[j] + d[i, j]\n");
  check_same_results(ctx, plain, device);
  cn_ctx_destroy(ctx);
}

/* ---- Fusion: a chain of element-wise nests becomes one nest ---- */

/* `count` nests over [0, 12) x [0, 10), nest k computing t[k+1][i, j] := t[k][i, j] * 0.5 + a[i,
 * j] (t[0] = a), each with loop variables of its own; `shift` reads t[k] at [i, j + 1] in the last
 * nest instead (j below 9 there), `writes_a` makes the last nest write a (which every nest reads).
 */
static cn_ll_proc *chain_proc(cn_ctx *ctx, cn_node *const *t, int count, bool shift,
                              bool writes_a) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_stmt *nests[12];
  for (int k = 0; k < count; k++) {
    cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
    bool last = k == count - 1;
    /* nodes of [12, 10, 1]: the size-1 axis written and read at 0, without a loop */
    cn_index *ij = t[0]->rank == 3 ? cn_lb_indices(ctx, 3, cn_index_iter(i), cn_index_iter(j),
                                                   cn_index_fixed(0))
                                   : cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
    cn_index *read = last && shift ? cn_lb_indices(ctx, 2, cn_index_iter(i), affine1(j, 1, 1)) : ij;
    cn_ll_expr *value = cn_lb_op(ctx, CN_OP_ADD, single,
                                 cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, k, single, read),
                                          cn_lb_num(ctx, single, 0.5), NULL),
                                 cn_lb_get(ctx, 0, single, ij), NULL);
    int target = last && writes_a ? 0 : k + 1;
    nests[k] = cn_lb_loop(
        ctx, i, 0, 12,
        cn_lb_loop(ctx, j, 0, last && shift ? 9 : 10, cn_lb_set(ctx, target, ij, value)));
  }
  cn_ll_param params[12];
  for (int k = 0; k <= count; k++) params[k] = param_of(t[k]);
  return cn_lb_proc(ctx, "chain", cn_lb_seq_array(ctx, count, nests), count + 1, params, 0, NULL);
}

/* t[1][i, j] := a[i, j - 1] * 0.5, then a[i, j] := t[1][i, j] + 1, both over [0, 12) x [1, 10)
 * (a is t[0]). */
static cn_ll_proc *behind_proc(cn_ctx *ctx, cn_node *const *t) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_stmt *nests[2];
  for (int k = 0; k < 2; k++) {
    cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0);
    cn_index *ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
    cn_ll_expr *value =
        k == 0 ? cn_lb_op(ctx, CN_OP_MUL, single,
                          cn_lb_get(ctx, 0, single,
                                    cn_lb_indices(ctx, 2, cn_index_iter(i), affine1(j, 1, -1))),
                          cn_lb_num(ctx, single, 0.5), NULL)
               : cn_lb_op(ctx, CN_OP_ADD, single, cn_lb_get(ctx, 1, single, ij),
                          cn_lb_num(ctx, single, 1), NULL);
    nests[k] =
        cn_lb_loop(ctx, i, 0, 12, cn_lb_loop(ctx, j, 1, 10, cn_lb_set(ctx, 1 - k, ij, value)));
  }
  cn_ll_param params[2] = {param_of(t[0]), param_of(t[1])};
  return cn_lb_proc(ctx, "behind", cn_lb_seq_array(ctx, 2, nests), 2, params, 0, NULL);
}

/* The number of top-level loops of a procedure. */
static int top_level_loops(const cn_ll_proc *proc) {
  const cn_ll_stmt *b = proc->body;
  if (b->kind == CN_LL_FOR) return 1;
  int n = 0;
  for (int k = 0; b->kind == CN_LL_SEQ && k < b->u.seq.count; k++)
    n += b->u.seq.items[k]->kind == CN_LL_FOR;
  return n;
}

static void test_fuse(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *t[12];
  for (int k = 0; k < 12; k++) t[k] = node(ctx, "t", CN_PREC_SINGLE, 2, (int64_t)12, (int64_t)10);
  cn_sched_options fuse_only = {.passes = CN_SCHED_FUSE};
  /* Three nests: one nest of three stores, the later ones renamed to the first's loops. */
  cn_ll_proc *plain = chain_proc(ctx, t, 3, false, false);
  cn_ll_proc *fused = chain_proc(ctx, t, 3, false, false);
  CHECK(plain && fused);
  if (!plain || !fused) return;
  CHECK_INT(cn_sched_proc(ctx, fused, &fuse_only), CN_OK);
  CHECK_INT(top_level_loops(fused), 1);
  CHECK_HAS(cn_ll_to_string(ctx, fused), "for i in 0..12:\n  for j in 0..10:\n"
                                         "    t#2[i, j] := t#1[i, j] * 0.5 + t#1[i, j]\n"
                                         "    t#3[i, j] := t#2[i, j] * 0.5 + t#1[i, j]\n"
                                         "    t#4[i, j] := t#3[i, j] * 0.5 + t#1[i, j]\n");
  check_same_results(ctx, plain, fused);
  /* The same over nodes of [12, 10, 1]: a size-1 axis at 0 is one cell per iteration too. */
  cn_node *u[4];
  for (int k = 0; k < 4; k++)
    u[k] = node(ctx, "u", CN_PREC_SINGLE, 3, (int64_t)12, (int64_t)10, (int64_t)1);
  cn_ll_proc *plain3 = chain_proc(ctx, u, 3, false, false);
  cn_ll_proc *fused3 = chain_proc(ctx, u, 3, false, false);
  CHECK(plain3 && fused3);
  if (!plain3 || !fused3) return;
  CHECK_INT(cn_sched_proc(ctx, fused3, &fuse_only), CN_OK);
  CHECK_INT(top_level_loops(fused3), 1);
  check_same_results(ctx, plain3, fused3);
  /* Eleven nests: at most FUSE_MAX_STORES (8) stores per nest, so two nests. */
  cn_ll_proc *long11 = chain_proc(ctx, t, 11, false, false);
  CHECK(long11 != NULL);
  if (long11) {
    CHECK_INT(cn_sched_proc(ctx, long11, &fuse_only), CN_OK);
    CHECK_INT(top_level_loops(long11), 2);
  }
  /* Not fused: a read one cell ahead of the producer (another box too), a consumer writing a
   * cell the producer reads at another iteration (t[i, j] := a[i, j - 1] / 2, then a[i, j] :=
   * t[i, j] + 1: fused, the producer's iteration j would read the consumer's a[i, j - 1]). Fused:
   * a consumer writing, in place, the cell each iteration of the producer reads (the update
   * m := 0.9 m, m := m + 0.1 g of Adam). */
  cn_ll_proc *shifted = chain_proc(ctx, t, 2, true, false);
  cn_ll_proc *behind = behind_proc(ctx, t), *behind_plain = behind_proc(ctx, t);
  cn_ll_proc *writes_a = chain_proc(ctx, t, 2, false, true);
  cn_ll_proc *writes_a_plain = chain_proc(ctx, t, 2, false, true);
  CHECK(shifted && behind && behind_plain && writes_a && writes_a_plain);
  if (shifted && behind && behind_plain && writes_a && writes_a_plain) {
    CHECK_INT(cn_sched_proc(ctx, shifted, &fuse_only), CN_OK);
    CHECK_INT(cn_sched_proc(ctx, behind, &fuse_only), CN_OK);
    CHECK_INT(cn_sched_proc(ctx, writes_a, &fuse_only), CN_OK);
    CHECK_INT(top_level_loops(shifted), 2);
    CHECK_INT(top_level_loops(behind), 2);
    CHECK_INT(top_level_loops(writes_a), 1);
    check_same_results(ctx, behind_plain, behind);
    check_same_results(ctx, writes_a_plain, writes_a);
  }
  cn_ctx_destroy(ctx);
}

/* ---- A max pool and an interleave: every pass, the same bits ---- */

/* out[i, j] =@^ x[2i + di, 2j + dj] over a 2x2 window (x [64, 64], out [32, 32]), after the
 * clear to -inf. */
static cn_ll_proc *max_pool_proc(cn_ctx *ctx, cn_node *x, cn_node *out) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            di = cn_symbol_create(ctx, "di", 0), dj = cn_symbol_create(ctx, "dj", 0);
  cn_index *out_ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
  cn_ll_stmt *clear = cn_lb_loop(
      ctx, i, 0, 32,
      cn_lb_loop(ctx, j, 0, 32, cn_lb_set(ctx, 1, out_ij, cn_lb_num(ctx, single, -INFINITY))));
  cn_ll_expr *window = cn_lb_get(
      ctx, 0, single, cn_lb_indices(ctx, 2, affine2(i, 2, di, 1, 0), affine2(j, 2, dj, 1, 0)));
  cn_ll_stmt *pool = cn_lb_loop(
      ctx, i, 0, 32,
      cn_lb_loop(ctx, j, 0, 32,
                 cn_lb_loop(ctx, di, 0, 2,
                            cn_lb_loop(ctx, dj, 0, 2,
                                       cn_lb_accum(ctx, 1, single, out_ij, CN_OP_MAX, window)))));
  cn_ll_param params[2] = {param_of(x), param_of(out)};
  return cn_lb_proc(ctx, "max_pool", cn_lb_seq(ctx, 2, clear, pool), 2, params, 0, NULL);
}

/* out[2i] := a[i]; out[2i + 1] := b[i] (a, b [4096], out [8192]): two stores per iteration. */
static cn_ll_proc *interleave_proc(cn_ctx *ctx, cn_node *const *abo) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index *at_i = cn_lb_indices(ctx, 1, cn_index_iter(i));
  cn_ll_stmt *body = cn_lb_loop(ctx, i, 0, 4096,
                                cn_lb_seq(ctx, 2,
                                          cn_lb_set(ctx, 2, cn_lb_indices(ctx, 1, affine1(i, 2, 0)),
                                                    cn_lb_get(ctx, 0, single, at_i)),
                                          cn_lb_set(ctx, 2, cn_lb_indices(ctx, 1, affine1(i, 2, 1)),
                                                    cn_lb_get(ctx, 1, single, at_i))));
  cn_ll_param params[3] = {param_of(abo[0]), param_of(abo[1]), param_of(abo[2])};
  return cn_lb_proc(ctx, "interleave", body, 3, params, 0, NULL);
}

static void test_pool_interleave(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)64);
  cn_node *out = node(ctx, "out", CN_PREC_SINGLE, 2, (int64_t)32, (int64_t)32);
  cn_ll_proc *plain = max_pool_proc(ctx, x, out), *scheduled = max_pool_proc(ctx, x, out);
  CHECK(plain && scheduled);
  if (plain && scheduled) {
    /* the clear runs as one loop; the window's reductions keep their order innermost */
    const char *text = scheduled_text(ctx, scheduled);
    CHECK_HAS(text, "for i in 0..32 (flat):\n  for j in 0..32 (vector):\n    out[i, j] := -inf\n");
    CHECK_HAS(text, "    for di in 0..2:\n      for dj in 0..2:\n");
    check_same_results(ctx, plain, scheduled);
  }
  cn_node *abo[3] = {node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)4096),
                     node(ctx, "b", CN_PREC_SINGLE, 1, (int64_t)4096),
                     node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t)8192)};
  cn_ll_proc *plain_il = interleave_proc(ctx, abo), *scheduled_il = interleave_proc(ctx, abo);
  CHECK(plain_il && scheduled_il);
  if (plain_il && scheduled_il) {
    /* out[2i] and out[2i + 1] are not proven apart (the analysis is conservative): unmarked */
    CHECK(!strstr(scheduled_text(ctx, scheduled_il), "(parallel"));
    check_same_results(ctx, plain_il, scheduled_il);
  }
  cn_ctx_destroy(ctx);
}

/* ---- The dependence helpers alone, on the matmul nest ---- */

static void test_deps(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)48),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)48, (int64_t)40),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)40)};
  cn_symbol iks[3] = {cn_symbol_create(ctx, "i", 64), cn_symbol_create(ctx, "k", 40),
                      cn_symbol_create(ctx, "j", 48)};
  cn_symbol i = iks[0], k = iks[1], j = iks[2];
  CHECK_INT(cn_node_set_padding(abc[1], 1, 2, 3), CN_OK); /* b's rows: 2 + 40 + 3 = 45 cells */
  cn_ll_proc *proc = matmul_proc(ctx, abc, iks);
  CHECK(proc != NULL);
  cn_ll_stmt **slot = &proc->body->u.seq.items[2]; /* the accumulation, after comment, prefill */
  cn_sched_nest nest;
  bool found = false;
  CHECK_INT(cn_sched_nest_read(ctx, slot, &nest, &found), CN_OK);
  CHECK(found);
  CHECK_INT(nest.depth, 3);
  CHECK_INT(nest.n_stores, 1);
  CHECK_INT(nest.n_access, 4); /* c written, then c, a, b read */
  CHECK(nest.access[0].write && nest.access[0].param == 2);
  CHECK(!nest.access[1].write && nest.access[1].param == 2);
  CHECK_INT(nest.access[3].param, 1);
  CHECK_NEAR(cn_sched_stride(proc, &nest.access[3], k), 1, 0);
  CHECK_NEAR(cn_sched_stride(proc, &nest.access[3], j), 45, 0);
  CHECK_NEAR(cn_sched_stride(proc, &nest.access[2], j), 1, 0);
  CHECK_NEAR(cn_sched_stride(proc, &nest.access[2], k), 0, 0);
  CHECK(cn_sched_is_reduction(&nest.access[0], 2, j));
  CHECK(!cn_sched_is_reduction(&nest.access[0], 2, i));
  CHECK(!cn_sched_is_reduction(&nest.access[0], 2, k));
  cn_symbol jk[2] = {j, k};
  CHECK(cn_sched_independent(proc, &nest, i, jk, 2));
  CHECK(cn_sched_independent(proc, &nest, k, NULL, 0));
  CHECK(!cn_sched_independent(proc, &nest, j, NULL, 0));
  CHECK(cn_sched_independent(proc, &nest, k, &i, 1)); /* columns of c stay apart, whatever i does */
  /* The prefill: a nest of one store that reads nothing. */
  CHECK_INT(cn_sched_nest_read(ctx, &proc->body->u.seq.items[1], &nest, &found), CN_OK);
  CHECK(found);
  CHECK_INT(nest.n_access, 1);
  cn_ctx_destroy(ctx);
}

/* ---- Options and the driver ---- */

/* A logging hook appending each message and a newline to the buffer (512 bytes) at user. */
static void collect_log(void *user, cn_log_level level, const char *message) {
  (void)level;
  char *log = user;
  size_t used = strlen(log);
  snprintf(log + used, 512 - used, "%s\n", message);
}

static void test_options(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_sched_options o = {0};
  CHECK_INT(cn_sched_parse(ctx, NULL, &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_ALL);
  CHECK_INT(cn_sched_parse(ctx, "none", &o), CN_OK);
  CHECK_INT(o.passes, 0);
  CHECK_INT(cn_sched_parse(ctx, "order", &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_ORDER);
  CHECK_INT(cn_sched_parse(ctx, " marks , order", &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_ORDER | CN_SCHED_MARKS);
  CHECK_INT(cn_sched_parse(ctx, "tile", &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_TILE);
  CHECK_INT(cn_sched_parse(ctx, "gemm", &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_GEMM);
  CHECK_INT(cn_sched_parse(ctx, "all", &o), CN_OK);
  CHECK_INT(o.passes, CN_SCHED_ALL);
  CHECK_INT(cn_sched_default().passes, CN_SCHED_ALL);
  o.passes = CN_SCHED_MARKS;
  CHECK_INT(cn_sched_parse(ctx, "order,bogus", &o), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "schedule 'order,bogus': unknown pass 'bogus' (known: all, none, "
                               "fill, virtual, gemm, order, fuse, tile, marks, jam)");
  CHECK_INT(o.passes, CN_SCHED_MARKS);
  CHECK_INT(cn_sched_parse(ctx, "order,,marks", &o), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "unknown pass ''");

  /* Each switch alone, on the matmul. */
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)48),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)48, (int64_t)40),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)40)};
  cn_symbol iks[3] = {cn_symbol_create(ctx, "i", 64), cn_symbol_create(ctx, "k", 40),
                      cn_symbol_create(ctx, "j", 48)};
  cn_ll_proc *plain = matmul_proc(ctx, abc, iks), *none = matmul_proc(ctx, abc, iks),
             *order = matmul_proc(ctx, abc, iks), *marks = matmul_proc(ctx, abc, iks);
  CHECK(plain && none && order && marks);
  const char *plain_text = cn_ll_to_string(ctx, plain);
  CHECK(plain_text && !strchr(plain_text, '('));
  o.passes = 0;
  CHECK_INT(cn_sched_proc(ctx, none, &o), CN_OK);
  CHECK_STR(cn_ll_to_string(ctx, none), plain_text);
  o.passes = CN_SCHED_ORDER;
  CHECK_INT(cn_sched_proc(ctx, order, &o), CN_OK);
  const char *order_text = cn_ll_to_string(ctx, order);
  CHECK_HAS(order_text, "for i in 0..64:\n  for j in 0..48:\n    for k in 0..40:\n      c[i, k]");
  CHECK(!strchr(order_text, '('));
  o.passes = CN_SCHED_MARKS;
  CHECK_INT(cn_sched_proc(ctx, marks, &o), CN_OK);
  CHECK_HAS(cn_ll_to_string(ctx, marks),
            "for i in 0..64 (parallel):\n  for k in 0..40:\n    for j in 0..48:\n      c[i, k]");
  check_same_results(ctx, plain, order);

  /* The driver logs each pass it runs, in passes.def's order, and no other. */
  char log[512] = "";
  cn_ctx_set_log(ctx, collect_log, log, CN_LOG_DEBUG);
  cn_ll_proc *logged = matmul_proc(ctx, abc, iks);
  CHECK(logged != NULL);
  o.passes = CN_SCHED_MARKS | CN_SCHED_ORDER | CN_SCHED_FILL;
  CHECK_INT(cn_sched_proc(ctx, logged, &o), CN_OK);
  const char *fill = strstr(log, "schedule matmul: fill "),
             *ord = strstr(log, "schedule matmul: order "),
             *mark = strstr(log, "schedule matmul: marks ");
  CHECK_MSG(fill && ord && mark && fill < ord && ord < mark, "log: %s", log);
  CHECK(!strstr(log, ": jam ") && !strstr(log, ": tile ") && !strstr(log, ": gemm "));
  CHECK_HAS(log, " ms\n");
  cn_ctx_destroy(ctx);
}

/* Every allocation of the stage failing in turn: CN_ERR_NOMEM, and the procedure left whole
 * (printable, with the same results), never a crash. */
static void test_allocation_failures(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)16, (int64_t)64),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)64, (int64_t)100),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)16, (int64_t)100)};
  cn_symbol iks[3] = {cn_symbol_create(ctx, "i", 16), cn_symbol_create(ctx, "k", 100),
                      cn_symbol_create(ctx, "j", 64)};
  cn_sched_options opts = {.passes = LOOP_PASSES, .l1_bytes = 2048, .llc_bytes = 20000};
  int failures = 0;
  for (long n = 1; n < 1000; n++) {
    cn_ll_proc *proc = matmul_sized(ctx, abc, iks, 16, 100, 64);
    CHECK(proc != NULL);
    if (!proc) break;
    ctx->fail_alloc_countdown = n;
    cn_status st = cn_sched_proc(ctx, proc, &opts);
    ctx->fail_alloc_countdown = 0;
    CHECK(cn_ll_to_string(ctx, proc) != NULL);
    if (st == CN_OK) break;
    CHECK_INT(st, CN_ERR_NOMEM);
    failures++;
  }
  CHECK(failures > 3);
  cn_ll_proc *plain = matmul_sized(ctx, abc, iks, 16, 100, 64);
  cn_ll_proc *partial = matmul_sized(ctx, abc, iks, 16, 100, 64);
  ctx->fail_alloc_countdown = 3;
  CHECK_INT(cn_sched_proc(ctx, partial, &opts), CN_ERR_NOMEM);
  ctx->fail_alloc_countdown = 0;
  check_same_results(ctx, plain, partial);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul();
  test_tile();
  test_conv();
  test_input_gradient();
  test_affine_bounds();
  test_reductions();
  test_dependences();
  test_lowered();
  test_jam();
  test_jam_prefix();
  test_written_first();
  test_fill();
  test_flat();
  test_device_order();
  test_fuse();
  test_pool_interleave();
  test_deps();
  test_options();
  test_allocation_failures();
  CHECK_DONE();
}
