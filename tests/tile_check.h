/* Test helper shared by the Tile tests from C (test_tile.c, test_tile_fn.c): literals with output
 * axes, and a check that runs a tensor's forward code on both backends (the interpreter and
 * generated C, compiled with -Wall -Wextra -Werror) with the output first filled with a sentinel,
 * so that cells which must end 0 are really written. Functions are static inline so that a test
 * uses only what it needs. */
#ifndef CN_TILE_CHECK_H
#define CN_TILE_CHECK_H

#include "cannl.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

#define SENTINEL      99.0
#define STRICT_CFLAGS "-O1 -shared -fPIC -std=c11 -Wall -Wextra -Werror"

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "C"};

/* A literal with the given output axes. */
static inline cn_tensor *data(cn_graph *g, const char *label, int rank, const int64_t *dims,
                              const double *values, size_t count) {
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}};
  cn_tensor *t = cn_tensor_data(g, label, &d, values, count);
  CHECK_MSG(t != NULL, "%s: %s", label, cn_ctx_error(cn_graph_ctx(g)));
  return t;
}

/* Runs t's forward code on both backends and compares every cell with expected (within tol);
 * shape: t's shape as printed (checked after materialization, when a pointwise result's shape
 * is known); the interpreter's loop IR must contain `loops` (unless NULL). */
static inline void check_forward(cn_graph *g, const char *what, cn_tensor *t, const char *shape,
                                 const double *expected, int64_t count, double tol,
                                 const char *loops) {
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_MSG(t != NULL, "%s: %s", what, cn_ctx_error(ctx));
  if (!t) return;
  cn_asgn *code = cn_graph_forward(g, t);
  CHECK_MSG(code != NULL, "%s: %s", what, cn_ctx_error(ctx));
  CHECK_STR(cn_tensor_shape(t), shape);
  cn_node *out = cn_tensor_value(t);
  if (!code || !out) return;
  CHECK_INT(cn_node_numel(out), count);
  if (cn_node_numel(out) != count) return;
  double *values = calloc((size_t)count + 1, sizeof *values);
  /* `loops` is the lowering's text; the schedule's is tested in test_sched */
  if (loops) CHECK_INT(cn_ctx_set_option(ctx, "schedule", "none"), CN_OK);
  for (int k = 0; k < 2; k++) {
    for (int64_t c = 0; c < count; c++) values[c] = SENTINEL;
    CHECK_INT(cn_node_set_values(out, false, values, (size_t)count), CN_OK);
    cn_routine *r = cn_routine_compile(ctx, code, backends[k], "tile");
    CHECK_MSG(r != NULL, "%s on %s: %s", what, backend_names[k], cn_ctx_error(ctx));
    if (!r) continue;
    CHECK_INT(cn_routine_run(r), CN_OK);
    CHECK_INT(cn_node_get_values(out, false, values, (size_t)count), CN_OK);
    for (int64_t c = 0; c < count; c++)
      CHECK_MSG(values[c] >= expected[c] - tol && values[c] <= expected[c] + tol,
                "%s on %s: cell %lld = %.17g, expected %.17g", what, backend_names[k], (long long)c,
                values[c], expected[c]);
    if (k == 0 && loops) CHECK_HAS(cn_routine_loops(r), loops);
    cn_routine_free(r);
  }
  if (loops) CHECK_INT(cn_ctx_set_option(ctx, "schedule", NULL), CN_OK);
  free(values);
}

#endif
