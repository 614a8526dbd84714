/* Tests of Tile contractions from C (cn_tile; tile-edsl): the seed's examples on small inputs
 * worked out by hand (sum and max over an axis, global max and min, matmul, max pool 1-D rounding
 * down and up, the "wrong" max pool, skipping, cumulative sum, 1-D, dilated 2-D and strided
 * padded convolutions), exact division (fractional index expressions: points where one is not an
 * integer are skipped; upsampling, offsets, division by a dim, two variables, nested division, a
 * constraint, an empty lattice, a transposed convolution against the direct loop, the loop
 * variables of the change of variables), results used by other tensors, a negative but valid
 * index value, `=` (assign) with and without conflicts, and the parser's positioned errors
 * (division by an index, by zero, a lattice overflowing 64 bits). Indices bounded only jointly or
 * only by constraints (tile-edsl "Valid Indices": every valid set counts): joint boxes larger than
 * the valid set, an output size from a joint box, constraint-only indices under each aggregation
 * and `=`, joint bounds under a change of variables, and the refusals of what nothing bounds
 * (jointly, an index whose terms cancel, a system past the elimination's cap). Every contraction
 * runs on both backends with the output first filled with a sentinel (99), so cells that must end 0
 * are written by the routine. */
#include "tile_check.h"

static cn_graph *new_graph(cn_ctx **ctx) {
  *ctx = cn_ctx_create();
  CHECK(*ctx != NULL);
  CHECK_INT(cn_ctx_set_option(*ctx, "cflags", STRICT_CFLAGS), CN_OK);
  return cn_graph_create(*ctx);
}

/* Builds the statement and checks it on both backends (check_forward; shape: the output axes). */
static void run_tile(cn_graph *g, const char *text, int n, const cn_tile_binding *b,
                     const char *shape, const double *expected, int64_t count, const char *loops) {
  char want[64];
  snprintf(want, sizeof want, "|->%s", shape); /* output axes only */
  check_forward(g, text, cn_tile(g, text, n, b), want, expected, count, 0, loops);
}

/* The statement must fail with a message containing `what` and the caret under column `col`. */
static void check_error(cn_graph *g, const char *text, int n, const cn_tile_binding *b,
                        const char *what, int col) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(cn_tile(g, text, n, b) == NULL, "%s was accepted", text);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  char expected[512];
  snprintf(expected, sizeof expected, "tile \"%s\": %s at column %d\n  %s\n  %*s^", text, what, col,
           text, col - 1, "");
  CHECK_STR(cn_ctx_error(ctx), expected);
}

/* ---- Sum, max, min over axes (tile-edsl "Sum Over Axis", "Max Over Axis", "Global Min") ---- */

static void test_reductions(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* I = [[1, 5, 3], [4, 2, 6]] (M = 2, N = 3) */
  const double in[6] = {1, 5, 3, 4, 2, 6};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, in, 6);
  cn_tile_binding b[1] = {{"I", I, "M, N", 0}};

  /* O[n] = sum_m I[m, n] = 1+4, 5+2, 3+6 */
  const double sum[3] = {5, 7, 9};
  run_tile(g, "O[n : N] += I[m, n]", 1, b, "3", sum, 3,
           "for n in 0..3:\n  for m in 0..2:\n    O[n] := O[n] + I[m, n]\n");
  /* the same with the size derived from I (n reaches 2) and the other bracket style */
  run_tile(g, "O(n) += I(m, n)", 1, b, "3", sum, 3, NULL);
  /* a larger output is padded with 0 (seed: TensorOutput(N + 1)); a smaller one truncated */
  const double padded[4] = {5, 7, 9, 0}, truncated[2] = {5, 7};
  run_tile(g, "O[n : N + 1] += I[m, n]", 1, b, "4", padded, 4, NULL);
  run_tile(g, "O[n : N - 1] += I[m, n]", 1, b, "2", truncated, 2, NULL);
  /* max over axis 0: max(1, 4), max(5, 2), max(3, 6) */
  const double max[3] = {4, 5, 6};
  run_tile(g, "O[n : N] >= I[m, n]", 1, b, "3", max, 3, NULL);
  /* global max and min into a scalar (a 0-D output) */
  const double gmax[1] = {6}, gmin[1] = {1};
  run_tile(g, "O[] >= I[i, j]", 1, b, "", gmax, 1, NULL);
  run_tile(g, "O() <= I(i, j)", 1, b, "", gmin, 1, NULL);
  /* product over axis 1: 1*5*3, 4*2*6 */
  const double prod[2] = {15, 48};
  run_tile(g, "O[m : M] *= I[m, n]", 1, b, "2", prod, 2, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Matrix multiply (tile-edsl "Matrix Multiply") ---- */

static void test_matmul(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* A = [[1, 2], [3, 4], [5, 6]] (3x2), B = [[1, 0, 2], [0, 1, 3]] (2x3):
   * C[i, j] = A[i,0]*B[0,j] + A[i,1]*B[1,j]:
   *   row 0: 1, 2, 2+6 = 8; row 1: 3, 4, 6+12 = 18; row 2: 5, 6, 10+18 = 28 */
  const double a[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, 2, 0, 1, 3};
  cn_tensor *A = data(g, "A", 2, (int64_t[]){3, 2}, a, 6);
  cn_tensor *B = data(g, "B", 2, (int64_t[]){2, 3}, bv, 6);
  cn_tile_binding b[2] = {{"A", A, "M, K", 0}, {"B", B, "K, N", 0}};
  const double c[9] = {1, 2, 8, 3, 4, 18, 5, 6, 28};
  run_tile(g, "C[i, j : M, N] += A[i, k] * B[k, j]", 2, b, "3,3", c, 9, NULL);
  run_tile(g, "C[i : M, j : N] += A[i, k] * B[k, j]", 2, b, "3,3", c, 9, NULL);
  /* `+` combination with max aggregation (max-plus): C[i, j] = max_k A[i,k] + B[k,j]
   *   row 0: max(1+1, 2+0) = 2, max(1+0, 2+1) = 3, max(1+2, 2+3) = 5
   *   row 1: max(4, 4) = 4, max(3, 5) = 5, max(5, 7) = 7
   *   row 2: max(6, 6) = 6, max(5, 7) = 7, max(7, 9) = 9 */
  const double tropical[9] = {2, 3, 5, 4, 5, 7, 6, 7, 9};
  run_tile(g, "C[i, j] >= A[i, k] + B[k, j]", 2, b, "3,3", tropical, 9, NULL);
  /* bind_dims with a repeated name checks the sizes: K is 2 from A, but B's first axis is 2 too
   * and its second 3 (binding it as K fails) */
  cn_tile_binding bad[2] = {{"A", A, "M, K", 0}, {"B", B, "N, K", 0}};
  CHECK(cn_tile(g, "C[i, j] += A[i, k] * B[j, k]", 2, bad) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "tile \"C[i, j] += A[i, k] * B[j, k]\": dim K is 2 but axis 1 of "
                               "'B' has size 3");
  cn_ctx_destroy(ctx);
}

/* ---- Max pool 1-D (tile-edsl "Max Pool 1D") ---- */

static void test_max_pool(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const double in[5] = {3, 1, 4, 1, 5};
  cn_tensor *I = data(g, "I", 1, (int64_t[]){5}, in, 5);
  cn_tile_binding b[1] = {{"I", I, "N", 0}};
  /* N = 5 rounding down: O[0] = max(3, 1), O[1] = max(4, 1); I[4] is read by no valid set */
  const double down[2] = {3, 4};
  /* every condition is implied by the ranges: no guard */
  run_tile(g, "O[i : N / 2] >= I[2*i + j], j < 2", 1, b, "2", down, 2,
           "for i in 0..2:\n  for j in 0..2:\n    O[i] := O[i] @^ I[2*i + j]\n");
  /* rounding up: O[2] = max(I[4]) (i = 2, j = 1 reads I[5]: out of range, skipped) */
  const double up[3] = {3, 4, 5};
  run_tile(g, "O[i : (N + 1) / 2] >= I[2*i + j], j < 2", 1, b, "3", up, 3,
           "  for j in 0..min(2, -2*i + 5):\n");
  /* the "wrong" pool: without j < 2, i = 1 reaches j = -2..2 (negative j valid), i = 0 reaches
   * j = 0..4, so both outputs are the global max */
  const double wrong[2] = {5, 5};
  run_tile(g, "O[i : N / 2] >= I[2*i + j]", 1, b, "2", wrong, 2, "for j in -2*i..-2*i + 5:");
  cn_ctx_destroy(ctx);
}

/* ---- Skipping, cumulative sum, negative indices (tile-edsl "Skipping", "Cumulative Sum") ---- */

static void test_skipping_and_cumsum(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* I is 3x4 holding 1..12: O[2*i] += I[2*i, j] writes O[0] = 1+2+3+4 = 10 and O[2] = 9+10+11+12
   * = 42 (i = 0, 1); O[1] and O[3] would need i = 1/2, 3/2: never written, 0 */
  const double in[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){3, 4}, in, 12);
  cn_tile_binding b[1] = {{"I", I, "M, N", 0}};
  const double skip[4] = {10, 0, 42, 0};
  run_tile(g, "O[2*i : N] += I[2*i, j]", 1, b, "4", skip, 4, NULL);
  /* the same with max: the written cells start from -inf, the others stay 0 */
  const double skip_max[4] = {4, 0, 12, 0};
  run_tile(g, "O[2*i : N] >= I[2*i, j]", 1, b, "4", skip_max, 4, NULL);

  /* cumulative sum of 1, 2, 3, 4: O[i] = sum_{k <= i} I[k] */
  const double v[4] = {1, 2, 3, 4};
  cn_tensor *V = data(g, "V", 1, (int64_t[]){4}, v, 4);
  cn_tile_binding bv[1] = {{"V", V, "N", 0}};
  const double csum[4] = {1, 3, 6, 10};
  run_tile(g, "O[i : N] += V[k], i - k < N", 1, bv, "4", csum, 4, "  for k in 0..i + 1:\n");
  /* a negative index value that is valid: j in {-1, 0} by 0 <= j + 1 < 2, so
   * O[i] = V[i - 1] + V[i] where in range: 1, 1+2, 2+3, 3+4 */
  const double pairs[4] = {1, 3, 5, 7};
  run_tile(g, "O[i : N] += V[i + j], j + 1 < 2", 1, bv, "4", pairs, 4, "for j in max(-1, -i)..1:");
  /* reversal through a negative coefficient, with an explicit dim binding: O[i] = V[3 - i] */
  cn_tile_binding bl[2] = {{"V", V, NULL, 0}, {"L", NULL, NULL, 3}};
  const double rev[4] = {4, 3, 2, 1};
  run_tile(g, "O[i : L + 1] = V[L - i]", 2, bl, "4", rev, 4, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- 1-D convolution (tile-edsl "Convolution") ---- */

static void test_conv1d(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* I: N = 1, X = 4, CI = 2, I[0, x, ci] = (x + 1) * (ci ? 10 : 1):
   *   x: (1, 10), (2, 20), (3, 30), (4, 40)
   * K: KX = 2, CI = 2, CO = 2, K[k, ci, co] = k == 0 ? (ci == co) : (co == 0 ? 1 : 0)
   * O[0, x, co] = sum_{k, ci} I[x + k, ci] * K[k, ci, co]
   *   co = 0: I[x, 0] + I[x + 1, 0] + I[x + 1, 1] = (x+1) + (x+2) + 10(x+2)
   *     x = 0: 1 + 2 + 20 = 23; x = 1: 2 + 3 + 30 = 35; x = 2: 3 + 4 + 40 = 47
   *   co = 1: I[x, 1] = 10, 20, 30 */
  const double in[8] = {1, 10, 2, 20, 3, 30, 4, 40};
  const double k[8] = {/* k=0 */ 1, 0, 0, 1, /* k=1 */ 1, 0, 1, 0};
  cn_tensor *I = data(g, "I", 3, (int64_t[]){1, 4, 2}, in, 8);
  cn_tensor *K = data(g, "K", 3, (int64_t[]){2, 2, 2}, k, 8);
  cn_tile_binding b[2] = {{"I", I, "N, X, CI", 0}, {"K", K, "KX, CI, CO", 0}};
  const double out[6] = {23, 10, 35, 20, 47, 30};
  run_tile(g, "O[n, x, co : N, X - KX + 1, CO] += I[n, x + k, ci] * K[k, ci, co]", 2, b, "1,3,2",
           out, 6, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- 2-D convolutions (tile-edsl "Dilated 2D Convolution", "Complex Convolution") ---- */

static void test_conv2d(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* dilation (2, 3): I is 1x4x5x1 with I[x, y] = 10x + y, K is 2x2x1x1 = [[1, 2], [3, 4]];
   * output X - 2*(KX-1) = 2 by Y - 3*(KY-1) = 2:
   * O[x, y] = I[x, y] + 2 I[x, y+3] + 3 I[x+2, y] + 4 I[x+2, y+3]
   *         = 10 (10x + y) + 2*3 + 3*20 + 4*23 = 100x + 10y + 158 */
  double in[20];
  for (int x = 0; x < 4; x++)
    for (int y = 0; y < 5; y++) in[x * 5 + y] = 10 * x + y;
  const double k[4] = {1, 2, 3, 4};
  cn_tensor *I = data(g, "I", 4, (int64_t[]){1, 4, 5, 1}, in, 20);
  cn_tensor *K = data(g, "K", 4, (int64_t[]){2, 2, 1, 1}, k, 4);
  cn_tile_binding b[2] = {{"I", I, "N, X, Y, CI", 0}, {"K", K, "KX, KY, CI, CO", 0}};
  const double dilated[4] = {158, 168, 258, 268};
  run_tile(g,
           "O[n, x, y, co : N, X - 2 * (KX - 1), Y - 3 * (KY - 1), CO] += "
           "I[n, x + 2 * kx, y + 3 * ky, ci] * K[kx, ky, ci, co]",
           2, b, "1,2,2,1", dilated, 4, NULL);

  /* strided padded 1-D convolution ("same-lower", the complex convolution's size arithmetic):
   * X = 5, KX = 3, S = 2, D = 1: Y = (X + S - 1) / S = 3, P = ((Y - 1) S + D (KX - 1) + 1 - X) / 2
   * = (4 + 3 - 5) / 2 = 1. With I = 1..5 and K = (1, 10, 100), O[x] = sum_k I[2x + k - 1] K[k]:
   *   x = 0: I[-1] skipped, 10*1 + 100*2 = 210; x = 1: 2 + 10*3 + 100*4 = 432;
   *   x = 2: 4 + 10*5 (I[5] skipped) = 54 */
  const double v[5] = {1, 2, 3, 4, 5}, kv[3] = {1, 10, 100};
  cn_tensor *V = data(g, "V", 1, (int64_t[]){5}, v, 5);
  cn_tensor *W = data(g, "W", 1, (int64_t[]){3}, kv, 3);
  cn_tile_binding bs[4] = {
      {"V", V, "X", 0}, {"W", W, "KX", 0}, {"S", NULL, NULL, 2}, {"D", NULL, NULL, 1}};
  const double strided[3] = {210, 432, 54};
  run_tile(g,
           "O[x : (X + S - 1) / S] += "
           "V[S*x + D*k - (((X + S - 1) / S - 1) * S + D * (KX - 1) + 1 - X) / 2] * W[k]",
           4, bs, "3", strided, 3, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Exact division (tile-edsl "Valid Indices", "Skipping") ---- */

/* The routine of t's forward code must not mention `text` (a contraction no point reaches). */
static void check_loops_lack(cn_graph *g, cn_tensor *t, const char *text) {
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "tile") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (!r) return;
  CHECK_MSG(strstr(cn_routine_loops(r), text) == NULL, "the loops mention %s:\n%s", text,
            cn_routine_loops(r));
  cn_routine_free(r);
}

static void test_division(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const double v5[5] = {1, 2, 3, 4, 5};
  cn_tensor *I = data(g, "I", 1, (int64_t[]){5}, v5, 5);
  cn_tile_binding b[1] = {{"I", I, "N", 0}};
  /* O[i / 2] += I[i]: only even i give an integer index, so O[k] = I[2k] = 1, 3, 5; the loop runs
   * over i_2 = i / 2 (i = 2*i_2) without a step or a guard */
  const double evens[3] = {1, 3, 5};
  run_tile(g, "O[i / 2 : (N + 1) / 2] += I[i]", 1, b, "3", evens, 3,
           "for i_2 in 0..3:\n  O[i_2] := I[2*i_2]\n");
  /* the same through an unsized output: i / 2 reaches 2 */
  run_tile(g, "O[i / 2] += I[i]", 1, b, "3", evens, 3, NULL);
  /* fractional stride: upsampling by skipping, O[x] = I[x / 2] at even x, odd cells 0 */
  const double v3[3] = {1, 2, 3};
  cn_tensor *V = data(g, "V", 1, (int64_t[]){3}, v3, 3);
  cn_tile_binding bv[2] = {{"V", V, "N", 0}, {"S", NULL, NULL, 3}};
  const double up[6] = {1, 0, 2, 0, 3, 0};
  run_tile(g, "O[x : 2 * N] += V[x / 2]", 1, bv, "6", up, 6,
           "for x_2 in 0..3:\n  O[2*x_2] := V[x_2]\n");
  /* `=` is fine: one point per cell; dividing by -2 a negated index is the same division */
  run_tile(g, "O[x : 2 * N] = V[x / 2]", 1, bv, "6", up, 6, NULL);
  run_tile(g, "O[x : 2 * N] += V[-x / -2]", 1, bv, "6", up, 6, NULL);
  /* an offset: O[i] = V[(i + 1) / 2] at odd i (i = 2*i_2 + 1): O[1] = V[1], O[3] = V[2]; O[5]
   * would read V[3] */
  const double odd[6] = {0, 2, 0, 3, 0, 0};
  run_tile(g, "O[i : 2 * N] += V[(i + 1) / 2]", 1, bv, "6", odd, 6,
           "for i_2 in 0..2:\n  O[2*i_2 + 1] := V[i_2 + 1]\n");
  /* division by a dim (S = 3): O[i] = V[i / S] at multiples of 3 */
  const double by_dim[9] = {1, 0, 0, 2, 0, 0, 3, 0, 0};
  run_tile(g, "O[i : N * S] += V[i / S]", 2, bv, "9", by_dim, 9, "O[3*i_3] := V[i_3]");
  /* index expressions are rational: 2 * (i / 2) is i (no condition), i / 2 + i / 2 too */
  run_tile(g, "O[i : N] += V[2 * (i / 2)]", 1, bv, "3", v3, 3, "for i in 0..3:\n  O[i] := V[i]\n");
  run_tile(g, "O[i : N] += V[i / 2 + i / 2]", 1, bv, "3", v3, 3, NULL);
  /* a constraint's polynomial must be an integer too: i / 2 < 2 keeps i = 0, 2 */
  const double cons[5] = {1, 0, 3, 0, 0};
  run_tile(g, "O[i : N] += I[i], i / 2 < 2", 1, b, "5", cons, 5, NULL);
  /* max over pairs through division: O[i / 2] >= I[i + j], j < 2 at even i: max(1, 2), max(3,
   * 4), max(5) (I[5] out of range) */
  const double pool[3] = {2, 4, 5};
  run_tile(g, "O[i / 2 : 3] >= I[i + j], j < 2", 1, b, "3", pool, 3, NULL);

  /* two variables: O[(2*i + j) / 3] += M[i, j] over M 3x4 holding 1..12 (M[i, j] = 4i + j + 1):
   * 2i + j a multiple of 3 at (0, 0) -> O[0]; (0, 3) and (1, 1) -> O[1]; (2, 2) -> O[2] (j = 4 and
   * j = -1 are out of range): 1, 4 + 6, 11. The lattice is j = i + 3*j_3. */
  double m[12];
  for (int k = 0; k < 12; k++) m[k] = k + 1;
  cn_tensor *M = data(g, "M", 2, (int64_t[]){3, 4}, m, 12);
  cn_tile_binding bm[1] = {{"M", M, "R, C", 0}};
  const double two[3] = {1, 10, 11};
  run_tile(g, "O[(2*i + j) / 3 : 3] += M[i, j]", 1, bm, "3", two, 3, "M[i, i + 3*j_3]");
  /* nested division: (i + j / 2) / 3 = (2i + j) / 6 over M 3x5 holding 1..15 (M[i, j] = 5i + j +
   * 1): (0, 0) -> O[0] = 1; (1, 4) and (2, 2) -> O[1] = 10 + 13 */
  double m15[15];
  for (int k = 0; k < 15; k++) m15[k] = k + 1;
  cn_tensor *M15 = data(g, "M15", 2, (int64_t[]){3, 5}, m15, 15);
  cn_tile_binding b15[1] = {{"M15", M15, NULL, 0}};
  const double nested[2] = {1, 23};
  run_tile(g, "O[(i + j / 2) / 3 : 2] += M15[i, j]", 1, b15, "2", nested, 2, NULL);

  /* an empty lattice: 2i + 1 is never even, so no point is valid: the output is all 0 and no
   * loop reads V (generated C marks V's parameter as not accessed: the strict flags hold) */
  const double zeros[3] = {0, 0, 0};
  run_tile(g, "O[i : N] += V[(2*i + 1) / 2]", 1, bv, "3", zeros, 3, NULL);
  check_loops_lack(g, cn_tile(g, "O[i : N] += V[(2*i + 1) / 2]", 1, bv), "V[");
  /* the same with max (reached cells would start from -inf): still 0 */
  run_tile(g, "O[i : N] >= V[(2*i + 1) / 2]", 1, bv, "3", zeros, 3, NULL);
  cn_ctx_destroy(ctx);
}

/* A transposed 1-D convolution (fractional stride S): O[x] = sum_k I[(x - k) / S] W[k] over the
 * points where x - k is a multiple of S, O of size (N - 1) S + K; compared with the direct
 * scatter loop O[S n + k] += I[n] W[k]. With I = 1, 2, 3, 4 and W = 1, 10, 100:
 *   S = 2: 1, 10, 100 + 2, 20, 200 + 3, 30, 300 + 4, 40, 400 (windows overlap);
 *   S = 3, K = 2 (W = 1, 10): 1, 10, 0, 2, 20, 0, 3, 30, 0, 4, 40 (gaps: cells no k reaches). */
static void test_transposed_conv(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const double iv[4] = {1, 2, 3, 4}, wv[3] = {1, 10, 100};
  const double by_hand[9] = {1, 10, 102, 20, 203, 30, 304, 40, 400};
  const int64_t strides[2] = {2, 3}, kernels[2] = {3, 2};
  for (int c = 0; c < 2; c++) {
    int64_t s = strides[c], k = kernels[c], x = 3 * s + k;
    cn_tensor *I = data(g, "I", 1, (int64_t[]){4}, iv, 4);
    cn_tensor *W = data(g, "W", 1, &k, wv, (size_t)k);
    double want[16] = {0};
    for (int n = 0; n < 4; n++)
      for (int j = 0; j < k; j++) want[s * n + j] += iv[n] * wv[j];
    if (c == 0)
      for (int j = 0; j < 9; j++) CHECK_NEAR(want[j], by_hand[j], 0);
    char shape[8];
    snprintf(shape, sizeof shape, "%lld", (long long)x);
    cn_tile_binding b[3] = {{"I", I, "N", 0}, {"W", W, "K", 0}, {"S", NULL, NULL, s}};
    /* the order (k, x) makes the lattice x = k + S*x_S: k and the input's own index, with no
     * guard; the order (x, k) would iterate every x against a band of k. With S = 3 > K - 1 no two
     * points share a cell: a plain store. */
    run_tile(g, "O[x : (N - 1) * S + K] += I[(x - k) / S] * W[k]", 3, b, shape, want, x,
             c == 0 ? "for k in 0..3:\n"
                      "  for x_2 in 0..4:\n"
                      "    O[k + 2*x_2] := O[k + 2*x_2] + I[x_2] * W[k]\n"
                    : "for k in 0..2:\n"
                      "  for x_3 in 0..4:\n"
                      "    O[k + 3*x_3] := I[x_3] * W[k]\n");
  }
  cn_ctx_destroy(ctx);
}

/* ---- Combinations: ==, cond (PlaidML's argmax idiom) ---- */

static void test_combinations(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const double a[3] = {1, 2, 3}, bv[3] = {3, 2, 1}, c[3] = {10, 20, 30}, d[3] = {1, 0, 3};
  cn_tensor *A = data(g, "A", 1, (int64_t[]){3}, a, 3);
  cn_tensor *B = data(g, "B", 1, (int64_t[]){3}, bv, 3);
  cn_tensor *C = data(g, "C", 1, (int64_t[]){3}, c, 3);
  cn_tensor *D = data(g, "D", 1, (int64_t[]){3}, d, 3);
  cn_tile_binding b[4] = {
      {"A", A, NULL, 0}, {"B", B, NULL, 0}, {"C", C, NULL, 0}, {"D", D, NULL, 0}};
  /* == compares: only A[1] == B[1]; over all pairs, 1=1, 2=2, 3=3 match once each */
  const double eq[3] = {0, 1, 0}, pairs[1] = {3};
  run_tile(g, "O[i] += A[i] == B[i]", 4, b, "3", eq, 3, NULL);
  run_tile(g, "O[] += A[i] == B[j]", 4, b, "", pairs, 1, NULL);
  /* cond(a, b, c) = a == b ? c : 0: A and D agree at 0 and 2, so 10 + 30 */
  const double sel[1] = {40};
  run_tile(g, "O[] += cond(A[i], D[i], C[i])", 4, b, "", sel, 1, NULL);
  /* argmax over axis 1 of I = [[3, 7, 2], [1, 4, 5]]: M[i] >= I[i, j] gives 7, 5; then
   * O[i] >= cond(I[i, j], M[i], J[j]) with J = 0, 1, 2 picks the index reaching the max: 1, 2 */
  const double in[6] = {3, 7, 2, 1, 4, 5};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, in, 6);
  cn_tile_binding bi[1] = {{"I", I, "N, K", 0}};
  cn_tensor *M = cn_tile(g, "M[i : N] >= I[i, j]", 1, bi);
  CHECK_MSG(M != NULL, "%s", cn_ctx_error(ctx));
  cn_tile_binding bm[3] = {
      {"I", I, NULL, 0}, {"M", M, NULL, 0}, {"J", cn_tensor_range(g, 3), NULL, 0}};
  const double argmax[2] = {1, 2};
  run_tile(g, "O[i] >= cond(I[i, j], M[i], J[j])", 3, bm, "2", argmax, 2, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Results are ordinary tensors ---- */

static void test_composition(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  /* the seed's average: Sum[y] += I[x, y], then Sum / X pointwise; I = [[1, 2], [3, 6]]:
   * (1 + 3) / 2, (2 + 6) / 2 */
  const double in[4] = {1, 2, 3, 6};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 2}, in, 4);
  cn_tile_binding b[1] = {{"I", I, "X, Y", 0}};
  cn_tensor *sum = cn_tile(g, "Sum[y : Y] += I[x, y]", 1, b);
  CHECK_MSG(sum != NULL, "%s", cn_ctx_error(ctx));
  cn_tensor *avg = cn_tensor_apply(g, CN_OP_DIV, 2, (cn_tensor *[]){sum, cn_tensor_number(g, 2)});
  CHECK_MSG(avg != NULL, "%s", cn_ctx_error(ctx));
  /* a pointwise result's shape is inferred at materialization: until then Tile cannot read it */
  cn_tile_binding b2[1] = {{"A", avg, NULL, 0}};
  CHECK(cn_tile(g, "O[] >= A[y]", 1, b2) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "tile \"O[] >= A[y]\": the shape of 'A' is not known yet (");
  CHECK_HAS(cn_ctx_error(ctx), "at column 8\n  O[] >= A[y]\n         ^");
  /* computing it materializes the graph; then a second contraction reads it: the max of the
   * averages */
  cn_asgn *code = cn_graph_forward(g, avg);
  cn_routine *r = code ? cn_routine_compile(ctx, code, CN_BACKEND_INTERP, "avg") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  CHECK(r && cn_routine_run(r) == CN_OK);
  cn_routine_free(r);
  double got[2] = {0, 0};
  CHECK(cn_node_get_values(cn_tensor_value(avg), false, got, 2) == CN_OK);
  CHECK_NEAR(got[0], 2, 0);
  CHECK_NEAR(got[1], 4, 0);
  const double top[1] = {4};
  run_tile(g, "O[] >= A[y]", 1, b2, "", top, 1, NULL);
  cn_ctx_destroy(ctx);
}

/* ---- Assign and errors ---- */

static void test_assign_and_errors(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  const double in[6] = {1, 2, 3, 4, 5, 6};
  cn_tensor *I = data(g, "I", 2, (int64_t[]){2, 3}, in, 6);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){2}, in, 2);
  cn_tile_binding b[2] = {{"I", I, "M, N", 0}, {"V", V, NULL, 0}};
  /* `=` with one writer per cell: a transpose, and a strided scatter (odd cells unreached: 0) */
  const double tr[6] = {1, 4, 2, 5, 3, 6}, scatter[4] = {1, 0, 2, 0};
  run_tile(g, "O[j, i] = I[i, j]", 2, b, "3,2", tr, 6, NULL);
  run_tile(g, "O[2*i : 4] = V[i]", 2, b, "4", scatter, 4, NULL);
  /* `=` where j reduces: several valid sets write O[i] */
  check_error(g, "O[i] = I[i, j]", 2, b,
              "'=' (assign) needs every output cell written by at most one valid index set, and "
              "'O' may be written by several (use '+=', '>=' ... to aggregate)",
              6);
  check_error(g, "O[i] += I[i, j", 2, b, "unexpected end of statement, expected ',' or ']'", 15);
  check_error(g, "O[i] += J[i]", 2, b, "unknown tensor 'J'", 9);
  check_error(g, "O[i] += V[i / j]", 2, b,
              "division by an index expression (an index expression divides only by dims and "
              "integers)",
              13);
  check_error(g, "O[i] += V[i / (2 - 2)]", 2, b, "division by zero", 13);
  /* dens near 2^40 and 2^40 - 1: the joint lattice's entries do not fit 64 bits */
  cn_tile_binding big[3] = {{"V", V, NULL, 0},
                            {"P", NULL, NULL, (int64_t)1 << 40},
                            {"Q", NULL, NULL, ((int64_t)1 << 40) - 1}};
  check_error(g, "O[i / P : 1] += V[i / Q]", 3, big,
              "the change of variables that keeps the integer points of the divisions overflows "
              "64-bit integers",
              3);
  check_error(g, "O[i / 2] += V[(2*i + 1) / 2]", 2, b,
              "cannot derive the size of output axis 0: no index set is valid (give it as ': "
              "SIZE')",
              3);
  check_error(g, "O[i : n] += V[i]", 2, b,
              "index variable 'n' in a size or bound (only dims and integers)", 7);
  check_error(g, "O[i] += V[i], k - m < 2", 2, b,
              "index 'k' is not bounded: it appears only in constraints, and they do not bound it, "
              "alone or with the other indices (add a constraint such as 'k < N', or use it in a "
              "tensor's index)",
              15);
  check_error(g, "O[i] += I[i * j, j]", 2, b, "a product of index variables is not affine", 13);
  check_error(g, "O[i] += I[i]", 2, b, "'I' has 2 axes (|->2,3) but 1 indices", 9);
  check_error(g, "O[i] += V[i + Q]", 2, b, "unknown dim 'Q'", 15);
  check_error(g, "O[] += V[i + j]", 2, b,
              "index 'i' is not bounded: no tensor axis or constraint bounds it, alone or with the "
              "other indices (add a constraint such as 'i < N')",
              10);
  check_error(g, "O[i + j] += V[i]", 2, b,
              "cannot derive the size of output axis 0: give it as ': SIZE'", 3);
  check_error(g, "O[i] -= V[i]", 2, b,
              "unexpected '-', expected an aggregation '+=', '*=', '>=', '<=' or '='", 6);
  check_error(g, "O[i] += V[i] - V[i]", 2, b,
              "unexpected '-', expected '*', '+', '==', ',' and a constraint", 14);
  check_error(g, "O[i] += cond(V[i], V[i])", 2, b,
              "unexpected ')', expected ',' and the next operand of cond", 24);
  check_error(g, "O[i] += M[i]", 2, (cn_tile_binding[]){{"M", NULL, NULL, 2}, {"V", V, NULL, 0}},
              "'M' is a dim, not a tensor", 9);
  check_error(g, "O[i : 2 - 3] += V[i]", 2, b, "size -1 must be at least 1", 7);
  /* a size 0 was refused by the tensor's creation, without a position (found by the body fuzz
   * of test_tile_fn, issue 14) */
  check_error(g, "O[i : 2 - 2] += V[i]", 2, b, "size 0 must be at least 1", 7);
  check_error(g, "O[i] += V[i], 2 < 3", 2, b, "a constraint must mention an index variable", 15);
  check_error(g, "O[i] += V[i + 0.5]", 2, b, "a number with a fraction in an integer expression",
              15);
  check_error(g, "O[i] += V[f(i)]", 2, b, "a call in an integer expression (calls are elementwise)",
              11);
  check_error(g, "O[i] += V[i] $", 2, b, "unexpected character '$'", 14);
  check_error(g, "O[i] += V[I]", 2, b, "'I' is a tensor, not a dim", 11);
  /* `[()]` is an empty index list (the seed's `O_Neg[()]`) */
  const double total[1] = {21};
  run_tile(g, "O[()] += I[i, j]", 2, b, "", total, 1, NULL);
  check_error(g, "O[i] += V[i], i <= 2", 2, b,
              "unexpected '<=', expected '<' (a constraint is `poly < bound`)", 17);
  cn_ctx_destroy(ctx);
}

/* ---- Indices bounded jointly or only by constraints (tile-edsl "Valid Indices": every valid set
 * counts) ---- */

/* I = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], V = [1, 2, 3]. */
static const double grid[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

/* i and j are bounded only by i + j (an axis of I) and i - j (a constraint) together. */
static void test_joint_indices(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *I = data(g, "I", 2, (int64_t[]){3, 3}, grid, 9);
  cn_tile_binding b[1] = {{"I", I, NULL, 0}};
  /* column c = i + j in 0..2 with 0 <= i - j < 2: (0,0), (1,0), (1,1), one (i, j) per column, so
   * O[u] is row u's sum. The box is i, j in 0..1 (2i = (i+j) + (i-j) <= 3, 2j = (i+j) - (i-j) >=
   * -1), which holds the invalid (0, 1): the lowering makes j <= i a bound of j's loop. */
  const double rows[3] = {6, 15, 24};
  run_tile(g, "O[u] += I[u, i + j], i - j < 2", 1, b, "3", rows, 3,
           "for u in 0..3:\n  for i in 0..2:\n    for j in 0..i + 1:\n");
  /* every cell (a, b) with a + b even is i + j, i - j for one integer (i, j): 1 + 3 + 5 + 7 + 9.
   * The box is i in 0..2, j in -1..1 (its bounds 0..3 and -1, 2 in the loops), 9 points for 5
   * valid ones: the lowering narrows j's loop by the conditions at each i */
  const double parity[1] = {25};
  run_tile(g, "O[] += I[i + j, i - j]", 1, b, "", parity, 1,
           "for i in 0..3:\n  for j in max(-1, -i, i - 2)..min(2, -i + 3, i + 1):\n");
  /* the output's size derived from the joint box (i reaches 2): O[i] sums I[i + j, i - j] over
   * j: I[0, 0]; I[0, 2] + I[1, 1] + I[2, 0]; I[2, 2] */
  const double by_i[3] = {1, 15, 9};
  run_tile(g, "O[i] += I[i + j, i - j]", 1, b, "3", by_i, 3, NULL);
  cn_ctx_destroy(ctx);
}

/* An index that appears only in constraints multiplies the contributions: each valid set counts. */
static void test_constraint_only_indices(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){3}, grid, 3);
  cn_tensor *I = data(g, "I", 2, (int64_t[]){3, 3}, grid, 9);
  cn_tile_binding b[2] = {{"V", V, NULL, 0}, {"I", I, NULL, 0}};
  /* k = 0 and k = 1: each cell twice */
  const double twice[3] = {2, 4, 6};
  run_tile(g, "O[i] += V[i], k < 2", 2, b, "3", twice, 3, "for i in 0..3:\n  for k in 0..2:\n");
  /* k bounded through i: 0 <= i - k < 2 gives k in i-1..i, both valid (k = -1 for i = 0: an
   * index may be negative) unless k's own 0 <= k < 5 drops k = -1 */
  const double through[3] = {2, 4, 6}, nonnegative[3] = {1, 4, 6};
  run_tile(g, "O[i] += V[i], i - k < 2", 2, b, "3", through, 3, NULL);
  run_tile(g, "O[i] += V[i], i - k < 2, k < 5", 2, b, "3", nonnegative, 3, NULL);
  /* a joint box larger than the valid set, of constraints only: 0 <= k + m < 3 and 0 <= k - m < 3
   * give the box k in 0..2, m in -1..1 (9 points) and hold at (0,0), (1,-1), (1,0), (1,1), (2,0):
   * 5, the loop of m narrowed to them at each k */
  const double five[3] = {5, 10, 15};
  run_tile(g, "O[i] += V[i], k + m < 3, k - m < 3", 2, b, "3", five, 3,
           "for i in 0..3:\n  for k in 0..3:\n    for m in max(-1, -k, k - 2)..min(2, -k + 3, k + "
           "1):\n");
  /* max is not changed by repeats, the product is */
  const double top[1] = {3}, cubes[3] = {1, 8, 27};
  run_tile(g, "O[] >= V[i], k < 4", 2, b, "", top, 1, NULL);
  run_tile(g, "O[i] *= V[i], k < 3", 2, b, "3", cubes, 3, NULL);
  /* `=` with a constraint-only index: one value of it keeps one writer per cell, two do not */
  run_tile(g, "O[i] = V[i], k < 1", 2, b, "3", grid, 3, NULL);
  check_error(g, "O[i] = V[i], k < 2", 2, b,
              "'=' (assign) needs every output cell written by at most one valid index set, and "
              "'O' may be written by several (use '+=', '>=' ... to aggregate)",
              6);
  cn_ctx_destroy(ctx);
}

/* Joint bounds over the loop variables of a change of variables (exact division). The division
 * by 2 makes k = 2*k_2 (the loops run over i, j and k_2) while i and j stay bounded only jointly:
 * the parity sum 25 of I's cells times V's sum 1 + 2 + 3 (k = 0, 2, 4). The constraint
 * (i + 2*j) / 3 keeps, of the cells (a, b) = (i + j, i - j) with a + b even, those where
 * i + 2*j = (3a - b) / 2 is a multiple of 3: (0, 0) and (2, 0), 1 + 7. */
static void test_with_division(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){3}, grid, 3);
  cn_tensor *I = data(g, "I", 2, (int64_t[]){3, 3}, grid, 9);
  cn_tile_binding b[2] = {{"V", V, NULL, 0}, {"I", I, NULL, 0}};
  const double product[1] = {150}, thirds[1] = {8};
  run_tile(g, "O[] += I[i + j, i - j] * V[k / 2]", 2, b, "", product, 1, NULL);
  run_tile(g, "O[] += I[i + j, i - j], (i + 2*j) / 3 < 5", 2, b, "", thirds, 1, NULL);
  cn_ctx_destroy(ctx);
}

/* What nothing bounds is refused, at the index's first appearance (`O[] += V[i + j]`, where
 * i - j is free, and `k - m < 2` alone are in test_assign_and_errors). */
static void test_refusals(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){3}, grid, 3);
  cn_tile_binding b[1] = {{"V", V, NULL, 0}};
  /* both constraints bound k + m only, so k - m is free */
  check_error(g, "O[i] += V[i], k + m < 2, 2*k + 2*m < 3", 1, b,
              "index 'k' is not bounded: it appears only in constraints, and they do not bound it, "
              "alone or with the other indices (add a constraint such as 'k < N', or use it in a "
              "tensor's index)",
              15);
  /* j's terms cancel: nothing can bound it */
  check_error(g, "O[] += V[i + j - j]", 1, b,
              "index 'j' is not bounded: it cancels out of every index expression and constraint",
              14);
  /* 14 constraints of 4 of 8 indices each, of rank 8 (so they bound every index), none alone:
   * eliminating 7 indices grows past the cap; the statement's text is cut in the message */
  cn_ctx *c = cn_graph_ctx(g);
  CHECK(cn_tile(g,
                "O[] += V[i], a+b-c+d < 3, b+c-d+e < 3, c+d-e+f < 3, d+e-f+g < 3, e+f-g+h < 3, "
                "f+g-h+a < 3, g+h-a+b < 3, h+a-b+c < 3, a-b+e-f < 3, c-d+g-h < 3, a+c+e+g < 3, "
                "b+d+f+h < 3, a-c+f-h < 3, b-d+e-g < 3",
                1, b) == NULL);
  CHECK_INT(cn_ctx_status(c), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(c),
            "index 'a' is not bounded by any tensor axis or constraint alone, and bounding it "
            "with the other indices was given up: their elimination grows past 256 inequalities "
            "or 16384 combinations (add a constraint that bounds it alone, such as 'a < N') at "
            "column 14\n");
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_reductions();
  test_matmul();
  test_max_pool();
  test_skipping_and_cumsum();
  test_conv1d();
  test_conv2d();
  test_division();
  test_transposed_conv();
  test_combinations();
  test_composition();
  test_assign_and_errors();
  test_joint_indices();
  test_constraint_only_indices();
  test_with_division();
  test_refusals();
  CHECK_DONE();
}
