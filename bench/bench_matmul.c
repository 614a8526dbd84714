/* Benchmark: a 128x128x128 single-precision matrix multiplication (c =:+ a * b, the sum over k
 * emergent from the projections) as a routine on the reference interpreter and on generated C.
 * Prints the best of several runs of each (clock_gettime, monotonic) and their ratio. Compilation
 * is not timed. There are no speed thresholds: the benchmark fails (exit 1) only if a step fails
 * or the two backends disagree. */
#include "cannl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { N = 128, INTERP_RUNS = 3, C_RUNS = 10 };

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(cn_ctx *ctx) {
  fprintf(stderr, "bench_matmul: %s\n", cn_ctx_error(ctx));
  return 1;
}

/* The best wall time of `runs` runs, or a negative value if a run fails. */
static double best_time(cn_routine *routine, int runs) {
  double best = INFINITY;
  for (int r = 0; r < runs; r++) {
    double start = now_seconds();
    if (cn_routine_run(routine) != CN_OK) return -1;
    double elapsed = now_seconds() - start;
    if (elapsed < best) best = elapsed;
  }
  return best;
}

static int bench(cn_ctx *ctx, double *values, double *interp_result, double *c_result) {
  const int64_t dims[2] = {N, N};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, dims);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, dims);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, dims);
  if (!a || !b || !c) return fail(ctx);
  /* Small integers keep every partial sum exact in single precision. */
  for (int p = 0; p < N * N; p++) values[p] = (double)(p % 7) - 3;
  if (cn_node_set_values(a, false, values, N * N) != CN_OK) return fail(ctx);
  for (int p = 0; p < N * N; p++) values[p] = (double)(p % 5) - 2;
  if (cn_node_set_values(b, false, values, N * N) != CN_OK) return fail(ctx);

  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  const cn_symbol iters[3] = {i, j, k};
  const int64_t sizes[3] = {N, N, N};
  const cn_index a_map[2] = {cn_index_iter(i), cn_index_iter(k)};
  const cn_index b_map[2] = {cn_index_iter(k), cn_index_iter(j)};
  const cn_index c_map[2] = {cn_index_iter(i), cn_index_iter(j)};
  const cn_proj_tensor rhs[2] = {{2, dims, a_map}, {2, dims, b_map}};
  const cn_proj *proj =
      cn_proj_create(ctx, 3, iters, sizes, (cn_proj_tensor){2, dims, c_map}, 2, rhs);
  if (!proj) return fail(ctx);
  const cn_buffer operands[2] = {{a, false}, {b, false}};
  const cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, operands, proj);
  if (!asgn) return fail(ctx);

  cn_routine *interp = cn_routine_compile(ctx, asgn, CN_BACKEND_INTERP, "bench_matmul");
  if (!interp) return fail(ctx);
  double interp_time = best_time(interp, INTERP_RUNS);
  if (interp_time < 0 || cn_node_get_values(c, false, interp_result, N * N) != CN_OK)
    return fail(ctx);
  cn_routine *generated = cn_routine_compile(ctx, asgn, CN_BACKEND_C, "bench_matmul");
  if (!generated) return fail(ctx);
  double c_time = best_time(generated, C_RUNS);
  if (c_time < 0 || cn_node_get_values(c, false, c_result, N * N) != CN_OK) return fail(ctx);

  for (int p = 0; p < N * N; p++)
    if (interp_result[p] != c_result[p]) {
      fprintf(stderr, "bench_matmul: cell %d: interpreter %g, generated C %g\n", p,
              interp_result[p], c_result[p]);
      return 1;
    }
  printf("matmul %dx%dx%d, single precision, best of %d / %d runs\n", N, N, N, INTERP_RUNS, C_RUNS);
  printf("  interpreter  %10.3f ms\n", interp_time * 1e3);
  printf("  generated C  %10.3f ms\n", c_time * 1e3);
  printf("  ratio        %10.1f x (interpreter / generated C)\n",
         c_time > 0 ? interp_time / c_time : INFINITY);
  return 0;
}

int main(void) {
  cn_ctx *ctx = cn_ctx_create();
  double *values = malloc(3 * sizeof(double) * N * N);
  if (!ctx || !values) {
    fputs("bench_matmul: out of memory\n", stderr);
    free(values);
    cn_ctx_destroy(ctx);
    return 1;
  }
  int rc = bench(ctx, values, values + N * N, values + 2 * N * N);
  free(values);
  cn_ctx_destroy(ctx);
  return rc;
}
