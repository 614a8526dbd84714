/* Test utilities for projection inference: shapes with given or inferred rows, operations
 * (einsum specs parsed on the fly), finalization, inference, nodes sized from the final shapes
 * with the inferred padding, and running an assignment on both backends against expected values.
 * Every helper CHECKs its own success, so a test reads as the scenario it sets up. */
#ifndef CN_PROJ_CHECK_H
#define CN_PROJ_CHECK_H

#include "check.h"

#include "cannl.h"
#include "proj/proj.h"
#include "shape/einsum.h"

#include <stdarg.h>
#include <stdlib.h>

typedef struct {
  cn_ctx *ctx;
  cn_shape_env *shapes;
  cn_proj_env *projs;
} pt_env;

static pt_env pt_open(void) {
  pt_env e;
  e.ctx = cn_ctx_create();
  e.shapes = cn_shape_env_new(e.ctx);
  e.projs = cn_proj_env_new(e.shapes);
  CHECK(e.ctx && e.shapes && e.projs);
  return e;
}

static void pt_close(pt_env *e) {
  cn_ctx_destroy(e->ctx);
}

/* A row given by its sizes (n >= 0), or left to inference (n < 0). */
typedef struct {
  int n;
  int64_t d[8];
} pt_row;
#define PT_ANY  ((pt_row){-1, {0}})
#define PT_NONE ((pt_row){0, {0}})
#define PT_DIMS(...)                                                                               \
  ((pt_row){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}})

static cn_shape *pt_shape(pt_env *e, const char *label, pt_row batch, pt_row input, pt_row output) {
  pt_row rows[3] = {batch, input, output};
  cn_shape_row_spec spec[3];
  for (int k = 0; k < 3; k++)
    spec[k] = (cn_shape_row_spec){rows[k].n >= 0, rows[k].n > 0 ? rows[k].n : 0, rows[k].d, NULL};
  cn_shape *sh = cn_shape_new(e->shapes, label, false, spec);
  CHECK_MSG(sh != NULL, "%s", cn_ctx_error(e->ctx));
  return sh;
}

static cn_shape_op *pt_op(pt_env *e, cn_shape_kind kind, const cn_shape_args *args, cn_shape *lhs,
                          int n_rhs, ...) {
  cn_shape *rhs[3] = {NULL, NULL, NULL};
  va_list ap;
  va_start(ap, n_rhs);
  for (int i = 0; i < n_rhs; i++) rhs[i] = va_arg(ap, cn_shape *);
  va_end(ap);
  cn_shape_op *op = cn_shape_add_op(e->shapes, kind, args, lhs, rhs, n_rhs);
  CHECK_MSG(op != NULL, "%s", cn_ctx_error(e->ctx));
  return op;
}

static cn_shape_args pt_spec(pt_env *e, const char *spec) {
  cn_shape_args args;
  memset(&args, 0, sizeof args);
  args.spec = cn_einsum_parse(e->ctx, spec);
  CHECK_MSG(args.spec != NULL, "%s", cn_ctx_error(e->ctx));
  return args;
}

static cn_shape_op *pt_einsum(pt_env *e, const char *spec, cn_shape *lhs, int n_rhs, cn_shape *r1,
                              cn_shape *r2) {
  cn_shape_args args = pt_spec(e, spec);
  if (!args.spec) return NULL;
  return pt_op(e, CN_SL_EINSUM, &args, lhs, n_rhs, r1, r2);
}

static bool pt_finalize(pt_env *e) {
  cn_status st = cn_shape_finalize(e->shapes);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(e->ctx));
  return st == CN_OK;
}

/* Infers op's projections and checks the printed record. */
static cn_proj *pt_infer(pt_env *e, const cn_shape_op *op, const char *expected) {
  if (!op) return NULL;
  cn_proj *p = cn_proj_infer(e->projs, op, NULL);
  CHECK_MSG(p != NULL, "%s", cn_ctx_error(e->ctx));
  if (p && expected) CHECK_STR(cn_proj_to_string(e->ctx, p), expected);
  return p;
}

/* The node of a final shape (memory order), with the inferred padding margins. */
static cn_node *pt_node(pt_env *e, const cn_shape *sh, cn_prec prec) {
  int64_t dims[CN_MAX_RANK];
  int rank = cn_shape_dims(e->shapes, sh, dims, CN_MAX_RANK);
  CHECK_MSG(rank >= 0, "%s", cn_ctx_error(e->ctx));
  if (rank < 0) return NULL;
  cn_node *n = cn_node_create(e->ctx, sh->label, prec, rank, dims);
  CHECK_MSG(n != NULL, "%s", cn_ctx_error(e->ctx));
  for (int a = 0; n && a < rank; a++) {
    int64_t m[2];
    cn_proj_padding(e->projs, sh, a, m);
    if (m[0] || m[1]) CHECK(cn_node_set_padding(n, a, m[0], m[1]) == CN_OK);
  }
  return n;
}

static void pt_set(cn_node *n, const double *values) {
  CHECK(n && cn_node_set_values(n, false, values, (size_t)cn_node_numel(n)) == CN_OK);
}

/* Values 1, 2, 3, ... (times scale) in row-major order. */
static void pt_iota(cn_node *n, double scale) {
  size_t count = (size_t)cn_node_numel(n);
  double *v = malloc((count ? count : 1) * sizeof *v);
  for (size_t i = 0; i < count; i++) v[i] = (double)(i + 1) * scale;
  pt_set(n, v);
  free(v);
}

static const cn_backend_kind pt_backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};

/* Runs asgn on both backends; before each run `out` is filled with `stale` (to catch missing
 * initialization), afterwards compared with expected (count = numel(out)) within tol. */
static void pt_run(pt_env *e, const char *name, const cn_asgn *asgn, cn_node *out, double stale,
                   const double *expected, double tol) {
  CHECK_MSG(asgn != NULL, "%s: %s", name, cn_ctx_error(e->ctx));
  if (!asgn || !out) return;
  size_t count = (size_t)cn_node_numel(out);
  double *got = calloc(count ? count : 1, sizeof *got);
  for (int b = 0; b < 2; b++) {
    for (size_t i = 0; i < count; i++) got[i] = stale;
    CHECK(cn_node_set_values(out, false, got, count) == CN_OK);
    cn_routine *r = cn_routine_compile(e->ctx, asgn, pt_backends[b], name);
    CHECK_MSG(r != NULL, "%s (backend %d): %s", name, b, cn_ctx_error(e->ctx));
    if (!r) continue;
    CHECK_MSG(cn_routine_run(r) == CN_OK, "%s: %s", name, cn_ctx_error(e->ctx));
    CHECK(cn_node_get_values(out, false, got, count) == CN_OK);
    for (size_t i = 0; i < count; i++)
      CHECK_MSG(fabs(got[i] - expected[i]) <= tol,
                "%s (backend %d): cell %zu = %.17g, expected %.17g", name, b, i, got[i],
                expected[i]);
    cn_routine_free(r);
  }
  free(got);
}

/* lhs <accum>= op(rhs...) with the given record (init: `=:` instead of `=`). */
static cn_asgn *pt_accum(pt_env *e, bool init, cn_op accum, cn_node *lhs, cn_op op, int n_rhs,
                         cn_node *r1, cn_node *r2, const cn_proj *p) {
  if (!lhs || !p || (n_rhs > 0 && !r1) || (n_rhs > 1 && !r2)) return NULL;
  cn_buffer rhs[2] = {{r1, false}, {r2, false}};
  cn_asgn *a = cn_asgn_accum(e->ctx, init, accum, lhs, op, rhs, p);
  CHECK_MSG(a != NULL, "%s", cn_ctx_error(e->ctx));
  return a;
}

#endif
