/* Gradients of Tile contractions (issue 7 point 4; tile-edsl, derived as contraction-is-emergent
 * derives einsum gradients: the forward record's index space, ranges, constraints and valid sets,
 * with the LHS and operand roles swapped).
 *
 * Every case runs in double precision on the interpreter and on generated C: the loss is the sum
 * of the contraction's output times fixed coefficients, the forward values are compared with
 * values worked out by hand or by plain C loops in this file, and every gradient cell of every
 * operand with central finite differences of the loss (step 1e-4; the contractions are linear or
 * piecewise linear in each operand, so the difference is exact up to rounding and the tolerance
 * is 1e-7); where the gradient is easy to state, also with values worked out by hand.
 *
 * Covered: 1-D convolution, a strided padded 2-D convolution with channels and negative offsets
 * (edge points invalid on both sides), a transposed convolution by exact division, max pool 1-D
 * with `j < 2` and round-up odd length, the "wrong" max pool (its box starts at j = -4), a min
 * contraction with a `+` combination, sums with a `+` combination (one where the operand a
 * gradient does not read limits the points), the cumulative sum (`i - k < N`), skipping
 * (`O[2*i]`), a negative but valid index, assign `=` (scatter and transpose) and an injective
 * `*=`; for four of them the backprop's loop IR shows the forward's ranges, guards or loop
 * variables. A `*=` reducing several points per cell is refused by name; an `==` combination is
 * not differentiable. Then a Tile convolution against the equivalent affine einsum spec (valid
 * 1-D, and padded strided 2-D with channels): identical values and gradients. */
#include "cannl.h"
#include "check.h"

#include <stdarg.h>
#include <stdlib.h>

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "C"};

#define FD_H      1e-4
#define FD_TOL    1e-7
#define MAX_CELLS 128
#define MAX_OPS   3

/* ---- The harness ---------------------------------------------------------------------------- */

typedef struct {
  char name[160];
  cn_backend_kind be;
  cn_ctx *ctx;
  cn_graph *g;
  int np;
  cn_tensor *p[MAX_OPS];
  const char *loops; /* if set, text the backprop's loop IR must contain */
} tcase;

/* What a run produced: the contraction's values and each parameter's gradient. */
typedef struct {
  int n_out;
  double out[MAX_CELLS];
  int n_grad[MAX_OPS];
  double grad[MAX_OPS][MAX_CELLS];
} results;

static void begin(tcase *c, int backend, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void begin(tcase *c, int backend, const char *fmt, ...) {
  memset(c, 0, sizeof *c);
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(c->name, sizeof c->name, fmt, ap);
  va_end(ap);
  if (len >= 0 && (size_t)len < sizeof c->name)
    snprintf(c->name + len, sizeof c->name - (size_t)len, " [%s]", backend_names[backend]);
  c->be = backends[backend];
  c->ctx = cn_ctx_create();
  CHECK(c->ctx != NULL);
  c->g = cn_graph_create(c->ctx);
  cn_graph_set_prec(c->g, CN_PREC_DOUBLE);
}

/* A parameter initialized with explicit values, with the given axes. */
static cn_tensor *param_dims(tcase *c, const char *label, cn_dims d, const double *v, size_t n) {
  cn_tensor *init = cn_tensor_data(c->g, label, &d, v, n);
  cn_tensor *p = init ? cn_tensor_param(c->g, label, &d, init) : NULL;
  CHECK_MSG(p != NULL, "%s: parameter %s: %s", c->name, label, cn_ctx_error(c->ctx));
  if (p && c->np < MAX_OPS) c->p[c->np++] = p;
  return p;
}

/* A parameter with output axes only (as a Tile function sees it: dims in memory order). */
static cn_tensor *param(tcase *c, const char *label, int rank, const int64_t *dims,
                        const double *v) {
  size_t n = 1;
  for (int a = 0; a < rank; a++) n *= (size_t)dims[a];
  return param_dims(c, label, (cn_dims){CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}}, v, n);
}

static cn_tensor *tile(tcase *c, const char *text, int n, const cn_tile_binding *b) {
  cn_tensor *t = cn_tile(c->g, text, n, b);
  CHECK_MSG(t != NULL, "%s: %s", c->name, cn_ctx_error(c->ctx));
  CHECK_MSG(!t || cn_tensor_is_diff(t), "%s: the contraction is not differentiable", c->name);
  return t;
}

static double loss_value(cn_node *loss) {
  double v = NAN;
  cn_node_get_values(loss, false, &v, 1);
  return v;
}

/* loss = sum_cells out * coef (coef NULL: 1, 2, 3, ... in row-major order). Runs init and
 * backprop, reads the values and gradients into *res, and with fd compares every gradient cell
 * with central differences of the loss. Destroys the case. */
static void finish(tcase *c, cn_tensor *out, const double *coef, bool fd, results *res) {
  memset(res, 0, sizeof *res);
  cn_routine *setup = NULL, *fwd = NULL;
  cn_node *out_node = out ? cn_tensor_value(out) : NULL;
  CHECK_MSG(out_node != NULL, "%s: %s", c->name, cn_ctx_error(c->ctx));
  if (!out_node) goto done;
  res->n_out = (int)cn_node_numel(out_node);
  CHECK(res->n_out <= MAX_CELLS);
  if (res->n_out > MAX_CELLS) goto done;
  double k[MAX_CELLS];
  for (int i = 0; i < res->n_out; i++) k[i] = coef ? coef[i] : i + 1;
  /* the coefficients take out's shape (built after out's materialization) */
  int64_t dims[8];
  int rank = cn_node_rank(out_node);
  for (int a = 0; a < rank; a++) dims[a] = cn_node_dim(out_node, a);
  cn_dims kd = {CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}};
  cn_tensor *kt = cn_tensor_data(c->g, "coef", &kd, k, (size_t)res->n_out);
  cn_tensor *loss = kt ? cn_tensor_einsum(c->g, "...|...->... ; ...|...->... => 0", CN_OP_ADD,
                                          CN_OP_MUL, 2, (cn_tensor *[]){out, kt})
                       : NULL;
  cn_asgn *init = loss ? cn_graph_init_params(c->g, loss) : NULL;
  cn_asgn *update = init ? cn_graph_grad_update(c->g, loss) : NULL;
  CHECK_MSG(update != NULL, "%s: %s", c->name, cn_ctx_error(c->ctx));
  if (!update) goto done;
  /* a case's loops golden is the lowering's text; the schedule's is tested in test_sched */
  if (c->loops) CHECK_INT(cn_ctx_set_option(c->ctx, "schedule", "none"), CN_OK);
  setup = cn_routine_compile(c->ctx, cn_asgn_seq(c->ctx, 2, (cn_asgn *[]){init, update}), c->be,
                             "tile_grad");
  cn_asgn *fcode = setup ? cn_graph_forward(c->g, loss) : NULL;
  fwd = fcode ? cn_routine_compile(c->ctx, fcode, c->be, "tile_fwd") : NULL;
  CHECK_MSG(fwd != NULL, "%s: %s", c->name, cn_ctx_error(c->ctx));
  if (!fwd || cn_routine_run(setup) != CN_OK) goto done;
  if (c->loops) CHECK_HAS(cn_routine_loops(setup), c->loops);
  CHECK(cn_node_get_values(out_node, false, res->out, (size_t)res->n_out) == CN_OK);
  cn_node *loss_node = cn_tensor_value(loss);
  for (int i = 0; i < c->np; i++) {
    cn_node *v = cn_tensor_value(c->p[i]), *gr = cn_tensor_grad(c->p[i]);
    CHECK_MSG(v && gr, "%s: %s", c->name, cn_ctx_error(c->ctx));
    if (!v || !gr) continue;
    size_t n = (size_t)cn_node_numel(v);
    CHECK(n <= MAX_CELLS);
    if (n > MAX_CELLS) continue;
    res->n_grad[i] = (int)n;
    CHECK(cn_node_get_values(gr, false, res->grad[i], n) == CN_OK);
    double x[MAX_CELLS];
    CHECK(cn_node_get_values(v, false, x, n) == CN_OK);
    for (size_t j = 0; fd && j < n; j++) {
      double saved = x[j], lp, lm;
      x[j] = saved + FD_H;
      cn_node_set_values(v, false, x, n);
      cn_status st = cn_routine_run(fwd);
      lp = loss_value(loss_node);
      x[j] = saved - FD_H;
      cn_node_set_values(v, false, x, n);
      if (st == CN_OK) st = cn_routine_run(fwd);
      lm = loss_value(loss_node);
      x[j] = saved;
      cn_node_set_values(v, false, x, n);
      CHECK_MSG(st == CN_OK, "%s: %s", c->name, cn_ctx_error(c->ctx));
      double gn = (lp - lm) / (2 * FD_H), ga = res->grad[i][j];
      CHECK_MSG(fabs(gn - ga) <= FD_TOL * (1 + fabs(gn)),
                "%s: %s.grad[%zu] = %.12g, finite difference %.12g", c->name,
                cn_tensor_label(c->p[i]), j, ga, gn);
    }
  }
done:
  if (setup) cn_routine_free(setup);
  if (fwd) cn_routine_free(fwd);
  cn_ctx_destroy(c->ctx);
}

static void check_values(const char *name, const char *what, const double *got, int n_got,
                         const double *want, int n) {
  CHECK_MSG(n_got == n, "%s: %s has %d cells, expected %d", name, what, n_got, n);
  for (int i = 0; i < n && i < n_got; i++)
    CHECK_MSG(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])),
              "%s: %s[%d] = %.17g, expected %.17g", name, what, i, got[i], want[i]);
}

/* Deterministic inputs without ties: distinct values spread over [-1, 1]. */
static void fill(double *v, int n, double phase) {
  for (int i = 0; i < n; i++) v[i] = sin(1.7 * i + phase) * 0.9 + 0.01 * i;
}

/* ---- Convolutions ---------------------------------------------------------------------------- */

static void test_conv1d(int be) {
  /* O[x] = sum_k I[x + k] W[k], X = 6, K = 3: O has 4 cells */
  tcase c;
  begin(&c, be, "conv1d");
  double iv[6], wv[3], want[4] = {0};
  fill(iv, 6, 0.3);
  fill(wv, 3, 1.1);
  for (int x = 0; x < 4; x++)
    for (int k = 0; k < 3; k++) want[x] += iv[x + k] * wv[k];
  cn_tensor *I = param(&c, "I", 1, (int64_t[]){6}, iv);
  cn_tensor *W = param(&c, "W", 1, (int64_t[]){3}, wv);
  cn_tile_binding b[2] = {{"I", I, "X", 0}, {"W", W, "K", 0}};
  cn_tensor *O = tile(&c, "O[x : X - K + 1] += I[x + k] * W[k]", 2, b);
  results r;
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, want, 4);
  /* by hand: W.grad[k] = sum_x (x + 1) I[x + k]; I.grad[p] = sum_{x + k = p} (x + 1) W[k] */
  double gw[3] = {0}, gi[6] = {0};
  for (int x = 0; x < 4; x++)
    for (int k = 0; k < 3; k++) gw[k] += (x + 1) * iv[x + k], gi[x + k] += (x + 1) * wv[k];
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gi, 6);
  check_values(c.name, "W.grad", r.grad[1], r.n_grad[1], gw, 3);
}

/* The "same-lower" strided convolution of tile-edsl's complex convolution, 2-D with channels:
 * X = 5, K = 3, S = 2: Y = 3, P = ((Y - 1) S + K - X) / 2 = 1, so I is read at 2x + k - 1, which
 * is -1 at x = k = 0 and 5 at x = k = 2: invalid points on both edges. */
static void conv2d_ref(const double *iv, const double *wv, double *o) {
  for (int x = 0; x < 3; x++)
    for (int y = 0; y < 3; y++)
      for (int co = 0; co < 2; co++) {
        double s = 0;
        for (int kx = 0; kx < 3; kx++)
          for (int ky = 0; ky < 3; ky++)
            for (int ci = 0; ci < 2; ci++) {
              int px = 2 * x + kx - 1, py = 2 * y + ky - 1;
              if (px < 0 || px >= 5 || py < 0 || py >= 5) continue;
              s += iv[(px * 5 + py) * 2 + ci] * wv[((kx * 3 + ky) * 2 + ci) * 2 + co];
            }
        o[(x * 3 + y) * 2 + co] = s;
      }
}

static void test_conv2d_strided_padded(int be) {
  tcase c;
  begin(&c, be, "strided padded conv2d");
  double iv[50], wv[36], want[18];
  fill(iv, 50, 0.2);
  fill(wv, 36, 0.7);
  conv2d_ref(iv, wv, want);
  cn_tensor *I = param(&c, "I", 3, (int64_t[]){5, 5, 2}, iv);
  cn_tensor *W = param(&c, "W", 4, (int64_t[]){3, 3, 2, 2}, wv);
  cn_tile_binding b[3] = {
      {"I", I, "X, X, CI", 0}, {"W", W, "K, K, CI, CO", 0}, {"S", NULL, NULL, 2}};
  cn_tensor *O = tile(&c,
                      "O[x, y, co : (X + S - 1) / S, (X + S - 1) / S, CO] += "
                      "I[S*x + kx - 1, S*y + ky - 1, ci] * W[kx, ky, ci, co]",
                      3, b);
  results r;
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, want, 18);
  /* I's corner cell (4, 4) is read only by x = y = 2 at kx = ky = 1 (2*2 + 1 - 1 = 4), so its
   * gradient is sum_co coef(2, 2, co) W[1, 1, ci, co] with coef(2, 2, co) = 17 + co */
  for (int ci = 0; ci < 2; ci++) {
    double want_corner =
        17 * wv[((1 * 3 + 1) * 2 + ci) * 2] + 18 * wv[((1 * 3 + 1) * 2 + ci) * 2 + 1];
    CHECK_NEAR(r.grad[0][(4 * 5 + 4) * 2 + ci], want_corner, 1e-12);
  }
}

/* A transposed convolution by exact division: O[x] = sum_k I[(x - k) / S] W[k] over the points
 * where x - k is a multiple of S = 2 (N = 4, K = 3: O has (N - 1) S + K = 9 cells), i.e. the
 * scatter O[S n + k] += I[n] W[k]. The record is built over the lattice's variables (k and x_2,
 * x = k + 2*x_2), so the gradients visit exactly the valid points: by hand,
 * I.grad[n] = sum_k coef[S n + k] W[k] and W.grad[k] = sum_n coef[S n + k] I[n]. */
static void test_transposed_conv(int be) {
  tcase c;
  begin(&c, be, "transposed conv1d");
  double iv[4], wv[3], want[9] = {0}, gi[4] = {0}, gw[3] = {0};
  fill(iv, 4, 0.5);
  fill(wv, 3, 1.3);
  for (int n = 0; n < 4; n++)
    for (int k = 0; k < 3; k++) {
      want[2 * n + k] += iv[n] * wv[k];
      gi[n] += (2 * n + k + 1) * wv[k];
      gw[k] += (2 * n + k + 1) * iv[n];
    }
  cn_tensor *I = param(&c, "I", 1, (int64_t[]){4}, iv);
  cn_tensor *W = param(&c, "W", 1, (int64_t[]){3}, wv);
  cn_tile_binding b[3] = {{"I", I, "N", 0}, {"W", W, "K", 0}, {"S", NULL, NULL, 2}};
  cn_tensor *O = tile(&c, "O[x : (N - 1) * S + K] += I[(x - k) / S] * W[k]", 3, b);
  c.loops = "for k in 0..3:\n"
            "  for x_2 in 0..4:\n"
            "    I.grad[x_2] := I.grad[x_2] + O.grad[k + 2*x_2] * W";
  results r;
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, want, 9);
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gi, 4);
  check_values(c.name, "W.grad", r.grad[1], r.n_grad[1], gw, 3);
}

/* ---- Max and min ------------------------------------------------------------------------------
 */

static void test_max_pool(int be) {
  /* N = 7 rounding up: windows {0, 1}, {2, 3}, {4, 5} and the short {6} (i = 3, j = 1 reads
   * I[7]: invalid). O = 2.5, 0.7, 1.9, -0.4; the gradient goes to each window's winner with its
   * coefficient 1, 2, 3, 4. */
  const double iv[7] = {0.3, 2.5, -1.0, 0.7, 1.9, 1.2, -0.4};
  const double want[4] = {2.5, 0.7, 1.9, -0.4}, gi[7] = {0, 1, 0, 2, 3, 0, 4};
  tcase c;
  begin(&c, be, "max pool round up");
  cn_tensor *I = param(&c, "I", 1, (int64_t[]){7}, iv);
  cn_tile_binding b[1] = {{"I", I, "N", 0}};
  cn_tensor *O = tile(&c, "O[i : (N + 1) / 2] >= I[2*i + j], j < 2", 1, b);
  /* the gradient visits the forward's points: j < 2 and I's bound as j's loop bounds, and the
   * winner's test (<> is eq) against O at the point's window */
  c.loops = "for i in 0..4:\n"
            "  for j in 0..min(2, -2*i + 7):\n"
            "    I.grad[2*i + j] := I.grad[2*i + j] + where(grad_tmp[i, j], O.grad[i], "
            "grad_const[])\n";
  results r;
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, want, 4);
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gi, 7);

  /* the "wrong" pool (no j < 2): every window is the whole input, so every O is the global max
   * 2.5 and I[1] collects all three coefficients; j runs over -4..5 */
  const double wrong[3] = {2.5, 2.5, 2.5}, gw[6] = {0, 6, 0, 0, 0, 0};
  begin(&c, be, "wrong max pool");
  I = param(&c, "I", 1, (int64_t[]){6}, iv);
  b[0] = (cn_tile_binding){"I", I, "N", 0};
  O = tile(&c, "O[i : N / 2] >= I[2*i + j]", 1, b);
  /* the winner test's intermediate is indexed from the box's first point (j = -4) */
  c.loops = "  for j in -2*i..-2*i + 6:\n"
            "    grad_tmp[i, j + 4] := ";
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, wrong, 3);
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gw, 6);
}

static void test_min_plus(int be) {
  /* C[i, j] = min_k A[i, k] + B[k, j] over distinct sums: each output's gradient goes to the
   * winning k in both operands. A = [[0, 3], [2, 1]], B = [[1, 0.5], [0.25, 4]]:
   *   C[0,0] = min(1, 3.25) = 1 (k=0), C[0,1] = min(0.5, 7) = 0.5 (k=0),
   *   C[1,0] = min(3, 1.25) = 1.25 (k=1), C[1,1] = min(2.5, 5) = 2.5 (k=0)
   * with coefficients 1, 2, 3, 4: A.grad = [[1+2, 0], [4, 3]], B.grad = [[1, 2+4], [3, 0]] */
  const double a[4] = {0, 3, 2, 1}, bv[4] = {1, 0.5, 0.25, 4};
  const double want[4] = {1, 0.5, 1.25, 2.5}, ga[4] = {3, 0, 4, 3}, gb[4] = {1, 6, 3, 0};
  tcase c;
  begin(&c, be, "min-plus");
  cn_tensor *A = param(&c, "A", 2, (int64_t[]){2, 2}, a);
  cn_tensor *B = param(&c, "B", 2, (int64_t[]){2, 2}, bv);
  cn_tile_binding b[2] = {{"A", A, NULL, 0}, {"B", B, NULL, 0}};
  cn_tensor *C = tile(&c, "C[i, j] <= A[i, k] + B[k, j]", 2, b);
  results r;
  finish(&c, C, NULL, true, &r);
  check_values(c.name, "C", r.out, r.n_out, want, 4);
  check_values(c.name, "A.grad", r.grad[0], r.n_grad[0], ga, 4);
  check_values(c.name, "B.grad", r.grad[1], r.n_grad[1], gb, 4);
}

/* ---- Sums with constraints, skipping, negative indices, a `+` combination ---------------------
 */

static void test_sums(int be) {
  results r;
  tcase c;
  /* cumulative sum of 1..5: O[i] = sum_{k <= i} I[k]; I.grad[k] = sum_{i >= k} (i + 1) */
  const double iv[5] = {1, 2, 3, 4, 5}, csum[5] = {1, 3, 6, 10, 15}, gc[5] = {15, 14, 12, 9, 5};
  begin(&c, be, "cumsum");
  cn_tensor *I = param(&c, "I", 1, (int64_t[]){5}, iv);
  cn_tile_binding b[2] = {{"I", I, "N", 0}};
  cn_tensor *O = tile(&c, "O[i : N] += I[k], i - k < N", 1, b);
  c.loops = "for i in 0..5:\n"
            "  for k in 0..i + 1:\n"
            "    I.grad[k] := I.grad[k] + O.grad[i]\n";
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, csum, 5);
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gc, 5);

  /* skipping: O[2*i] += I[2*i, j] with I 3x4 holding 1..12 writes O[0] = 10 and O[2] = 42; rows
   * 0 and 2 of I get the coefficients of O[0] and O[2] (1 and 3), row 1 nothing */
  const double m[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, skip[4] = {10, 0, 42, 0};
  const double gs[12] = {1, 1, 1, 1, 0, 0, 0, 0, 3, 3, 3, 3};
  begin(&c, be, "skipping");
  I = param(&c, "I", 2, (int64_t[]){3, 4}, m);
  b[0] = (cn_tile_binding){"I", I, "M, N", 0};
  O = tile(&c, "O[2*i : N] += I[2*i, j]", 1, b);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, skip, 4);
  check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gs, 12);

  /* a negative valid index: j in {-1, 0}, O[i] = V[i - 1] + V[i] where in range, so
   * V.grad[p] = coef[p] + coef[p + 1] (p + 1 < 4) = 1+2, 2+3, 3+4, 4 */
  const double pairs[4] = {1, 3, 5, 7}, gp[4] = {3, 5, 7, 4};
  begin(&c, be, "negative index");
  cn_tensor *V = param(&c, "V", 1, (int64_t[]){4}, iv);
  b[0] = (cn_tile_binding){"V", V, "N", 0};
  O = tile(&c, "O[i : N] += V[i + j], j + 1 < 2", 1, b);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, pairs, 4);
  check_values(c.name, "V.grad", r.grad[0], r.n_grad[0], gp, 4);

  /* a `+` combination: O[i] = sum_k A[i, k] + B[k] (A 2x3 = 1..6, B = 1, 2, 3):
   * O = 6 + 6, 15 + 6; A.grad[i, k] = coef[i]; B.grad[k] = coef[0] + coef[1] = 3 */
  const double s[2] = {12, 21}, gsa[6] = {1, 1, 1, 2, 2, 2}, gsb[3] = {3, 3, 3};
  begin(&c, be, "sum of a + combination");
  cn_tensor *A = param(&c, "A", 2, (int64_t[]){2, 3}, m);
  cn_tensor *B = param(&c, "B", 1, (int64_t[]){3}, iv);
  b[0] = (cn_tile_binding){"A", A, "M, K", 0};
  b[1] = (cn_tile_binding){"B", B, "K", 0};
  O = tile(&c, "O[i : M] += A[i, k] + B[k]", 2, b);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, s, 2);
  check_values(c.name, "A.grad", r.grad[0], r.n_grad[0], gsa, 6);
  check_values(c.name, "B.grad", r.grad[1], r.n_grad[1], gsb, 3);

  /* a `+` combination where B alone limits the points to the band 0 <= i - j < 2 (a guard, not a
   * loop range): A's gradient (g alone) does not read B, so B's bounds must stay as constraints.
   * A = 1..4, B = 10, 20: O[i] = sum over j in {i - 1, i} of A[j] + B[i - j] = 11, 33, 35, 37;
   * A.grad[j] = coef[j] + coef[j + 1] (j + 1 < 4) = 3, 5, 7, 4; B.grad[d] = sum_{i >= d} coef[i]
   * = 10, 9 */
  const double band[4] = {11, 33, 35, 37}, gba[4] = {3, 5, 7, 4}, gbb[2] = {10, 9};
  const double tens[2] = {10, 20};
  begin(&c, be, "banded + combination");
  A = param(&c, "A", 1, (int64_t[]){4}, iv);
  B = param(&c, "B", 1, (int64_t[]){2}, tens);
  b[0] = (cn_tile_binding){"A", A, "N", 0};
  b[1] = (cn_tile_binding){"B", B, NULL, 0};
  O = tile(&c, "O[i : N] += A[j] + B[i - j]", 2, b);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, band, 4);
  check_values(c.name, "A.grad", r.grad[0], r.n_grad[0], gba, 4);
  check_values(c.name, "B.grad", r.grad[1], r.n_grad[1], gbb, 2);
}

/* ---- Assign, product ------------------------------------------------------------------------ */

static void test_assign_and_product(int be) {
  results r;
  tcase c;
  /* a scatter: O = V0, 0, V1, 0, V2; V.grad[i] = coef[2i] = 1, 3, 5 */
  const double v[3] = {4, 5, 6}, scatter[5] = {4, 0, 5, 0, 6}, gv[3] = {1, 3, 5};
  begin(&c, be, "assign scatter");
  cn_tensor *V = param(&c, "V", 1, (int64_t[]){3}, v);
  cn_tile_binding b[1] = {{"V", V, NULL, 0}};
  cn_tensor *O = tile(&c, "O[2*i : 5] = V[i]", 1, b);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, scatter, 5);
  check_values(c.name, "V.grad", r.grad[0], r.n_grad[0], gv, 3);

  /* a transpose by `=` and by `*=` (one point per cell: the product of one value): O[j, i] =
   * I[i, j] with I 2x3; I.grad[i, j] = coef of O[j, i] = 2j + i + 1 */
  const double m[6] = {1, 2, 3, 4, 5, 6}, tr[6] = {1, 4, 2, 5, 3, 6}, gt[6] = {1, 3, 5, 2, 4, 6};
  for (int k = 0; k < 2; k++) {
    begin(&c, be, "transpose by %s", k ? "*=" : "=");
    cn_tensor *I = param(&c, "I", 2, (int64_t[]){2, 3}, m);
    b[0] = (cn_tile_binding){"I", I, NULL, 0};
    O = tile(&c, k ? "O[j, i] *= I[i, j]" : "O[j, i] = I[i, j]", 1, b);
    finish(&c, O, NULL, true, &r);
    check_values(c.name, "O", r.out, r.n_out, tr, 6);
    check_values(c.name, "I.grad", r.grad[0], r.n_grad[0], gt, 6);
  }

  /* a product over several points per cell has no gradient rule: refused by name, while its
   * forward code still builds */
  begin(&c, be, "product reduction");
  cn_tensor *I = param(&c, "I", 2, (int64_t[]){2, 3}, m);
  b[0] = (cn_tile_binding){"I", I, "M, N", 0};
  O = tile(&c, "O[m : M] *= I[m, n]", 1, b);
  cn_tensor *loss =
      O ? cn_tensor_einsum(c.g, "...|...->... => 0", CN_OP_ADD, CN_OP_ID, 1, &O) : NULL;
  CHECK_MSG(loss != NULL && cn_graph_forward(c.g, loss) != NULL, "%s: %s", c.name,
            cn_ctx_error(c.ctx));
  CHECK(loss && cn_graph_backprop(c.g, loss) == NULL);
  char want[256];
  snprintf(want, sizeof want,
           "no gradient for \"O\" (#%d): only +, max and min accumulations have a gradient rule "
           "where several points write one cell, and it accumulates with mul",
           O ? cn_tensor_id(O) : -1);
  CHECK_STR(cn_ctx_error(c.ctx), want);
  /* an `==` combination is piecewise constant (eq has no derivative row): not differentiable,
   * like a pointwise comparison */
  cn_tile_binding b2[2] = {{"I", I, "M, N", 0}, {"J", I, NULL, 0}};
  cn_tensor *E = cn_tile(c.g, "E[m : M] += I[m, n] == J[m, 0]", 2, b2);
  CHECK_MSG(E != NULL, "%s: %s", c.name, cn_ctx_error(c.ctx));
  CHECK(E && !cn_tensor_is_diff(E));
  cn_ctx_destroy(c.ctx);

  /* cond(a, b, c) = a == b ? c : 0 passes the gradient to c where a equals b (a and b are data
   * here: the result is piecewise constant in them). A = [[1, 2, 3], [4, 5, 6]], M = 2, 6 and B =
   * 1..6: O[0] = B[0, 1] = 2, O[1] = B[1, 2] = 6; B.grad = coef 1 at (0, 1), 2 at (1, 2) */
  const double a[6] = {1, 2, 3, 4, 5, 6}, mv[2] = {2, 6}, sel[2] = {2, 6};
  const double gb[6] = {0, 1, 0, 0, 0, 2};
  begin(&c, be, "cond");
  cn_dims d23 = {CN_AXES_NONE, CN_AXES_NONE, {2, (int64_t[]){2, 3}, NULL}};
  cn_dims d2 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
  cn_tensor *A = cn_tensor_data(c.g, "A", &d23, a, 6), *M = cn_tensor_data(c.g, "M", &d2, mv, 2);
  cn_tensor *B = param(&c, "B", 2, (int64_t[]){2, 3}, m);
  cn_tile_binding b3[3] = {{"A", A, "R, C", 0}, {"M", M, NULL, 0}, {"B", B, NULL, 0}};
  O = tile(&c, "O[i : R] += cond(A[i, j], M[i], B[i, j])", 3, b3);
  finish(&c, O, NULL, true, &r);
  check_values(c.name, "O", r.out, r.n_out, sel, 2);
  check_values(c.name, "B.grad", r.grad[0], r.n_grad[0], gb, 6);
}

/* ---- Tile against the equivalent affine einsum spec ------------------------------------------ */

/* Both graphs get the same parameter values; values and every gradient must agree to 1e-12. */
static void compare(const char *name, const results *tile_r, const results *ein_r, int np) {
  check_values(name, "Tile vs einsum values", tile_r->out, tile_r->n_out, ein_r->out, ein_r->n_out);
  for (int i = 0; i < np; i++)
    check_values(name, "Tile vs einsum gradient", tile_r->grad[i], tile_r->n_grad[i],
                 ein_r->grad[i], ein_r->n_grad[i]);
}

static void test_against_einsum(int be) {
  results rt, re;
  tcase c;
  double iv[72], wv[36], coef[18];
  fill(iv, 72, 0.4);
  fill(wv, 36, 0.9);
  fill(coef, 18, 2.0);

  /* valid 1-D: "o<+k; k => o" reads x at o + k for o < X - K + 1 */
  for (int k = 0; k < 2; k++) {
    begin(&c, be, "valid conv1d, %s", k ? "einsum" : "Tile");
    cn_tensor *I = param(&c, "I", 1, (int64_t[]){7}, iv);
    cn_tensor *W = param(&c, "W", 1, (int64_t[]){3}, wv);
    cn_tile_binding b[2] = {{"I", I, "X", 0}, {"W", W, "K", 0}};
    cn_tensor *O =
        k ? cn_tensor_einsum(c.g, "o<+k; k => o", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){I, W})
          : tile(&c, "O[o : X - K + 1] += I[o + k] * W[k]", 2, b);
    CHECK_MSG(O != NULL, "%s: %s", c.name, cn_ctx_error(c.ctx));
    finish(&c, O, coef, k == 0, k ? &re : &rt);
  }
  CHECK_INT(rt.n_out, 5);
  compare("valid conv1d", &rt, &re, 2);

  /* padded, stride 2, with channels: the einsum pads x by one cell on each side and reads it at
   * 2*oh + kh - 1 (its left margin); the Tile statement reads the same position and skips the
   * points outside I. Kernel axes in memory order: oc (output), kh, kw, ic (input). */
  for (int k = 0; k < 2; k++) {
    begin(&c, be, "padded strided conv2d, %s", k ? "einsum" : "Tile");
    cn_tensor *I = param(&c, "I", 3, (int64_t[]){6, 6, 2}, iv);
    cn_dims kd = {CN_AXES_NONE, {3, (int64_t[]){3, 3, 2}, NULL}, {1, (int64_t[]){2}, NULL}};
    cn_tensor *W = param_dims(&c, "W", kd, wv, 36);
    cn_tile_binding b[2] = {{"I", I, "X, Y, CI", 0}, {"W", W, "CO, KH, KW, CI", 0}};
    cn_tensor *O =
        k ? cn_tensor_einsum(c.g, "2*oh=+kh, 2*ow=+kw, ic; kh, kw, ic -> oc => oh, ow, oc",
                             CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){I, W})
          : tile(&c,
                 "O[oh, ow, oc : X / 2, Y / 2, CO] += "
                 "I[2*oh + kh - 1, 2*ow + kw - 1, ic] * W[oc, kh, kw, ic]",
                 2, b);
    CHECK_MSG(O != NULL, "%s: %s", c.name, cn_ctx_error(c.ctx));
    CHECK_STR(O ? cn_tensor_shape(O) : NULL, "|->3,3,2");
    finish(&c, O, coef, k == 0, k ? &re : &rt);
  }
  CHECK_INT(rt.n_out, 18);
  compare("padded strided conv2d", &rt, &re, 2);
}

int main(void) {
  for (int be = 0; be < 2; be++) {
    test_conv1d(be);
    test_conv2d_strided_padded(be);
    test_transposed_conv(be);
    test_max_pool(be);
    test_min_plus(be);
    test_sums(be);
    test_assign_and_product(be);
    test_against_einsum(be);
  }
  CHECK_DONE();
}
