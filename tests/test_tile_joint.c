/* Tile contractions whose indices only the conditions together bound (tile-edsl "Valid Indices":
 * a set of index values is valid iff every index expression is in range and every constraint
 * holds, and the contraction aggregates over all valid sets): an index bounded jointly with
 * another (i + j and i - j in range), an index that appears only in constraints, a joint box
 * strictly larger than the valid set (the per-point guards keep the invalid points out), joint
 * bounds under a change of variables (exact division), `=` with an index only in constraints,
 * and the refusals of what nothing bounds (alone, jointly, or past the elimination's cap). Values
 * worked out by hand; every contraction runs on the interpreter and on generated C with the output
 * first filled with a sentinel (tile_check.h). */
#include "tile_check.h"

static cn_graph *new_graph(cn_ctx **ctx) {
  *ctx = cn_ctx_create();
  CHECK(*ctx != NULL);
  CHECK_INT(cn_ctx_set_option(*ctx, "cflags", STRICT_CFLAGS), CN_OK);
  return cn_graph_create(*ctx);
}

static void run_tile(cn_graph *g, const char *text, int n, const cn_tile_binding *b,
                     const char *shape, const double *expected, int64_t count, const char *loops) {
  char want[64];
  snprintf(want, sizeof want, "|->%s", shape);
  check_forward(g, text, cn_tile(g, text, n, b), want, expected, count, 0, loops);
}

/* The statement must fail with exactly this message, the caret under column `col`. */
static void check_error(cn_graph *g, const char *text, int n, const cn_tile_binding *b,
                        const char *what, int col) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(cn_tile(g, text, n, b) == NULL, "%s was accepted", text);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  char expected[1024];
  snprintf(expected, sizeof expected, "tile \"%s\": %s at column %d\n  %s\n  %*s^", text, what, col,
           text, col - 1, "");
  CHECK_STR(cn_ctx_error(ctx), expected);
}

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

/* What nothing bounds is refused, at the index's first appearance. */
static void test_refusals(void) {
  cn_ctx *ctx;
  cn_graph *g = new_graph(&ctx);
  cn_tensor *V = data(g, "V", 1, (int64_t[]){3}, grid, 3);
  cn_tile_binding b[1] = {{"V", V, NULL, 0}};
  /* i + j in range leaves i - j free */
  check_error(g, "O[] += V[i + j]", 1, b,
              "index 'i' is not bounded: no tensor axis or constraint bounds it, alone or with the "
              "other indices (add a constraint such as 'i < N')",
              10);
  /* k + m bounded, k - m not (the second constraint is the first one's double) */
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
  test_joint_indices();
  test_constraint_only_indices();
  test_with_division();
  test_refusals();
  CHECK_DONE();
}
