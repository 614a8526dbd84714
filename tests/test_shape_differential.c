/* Randomized differential test of the shape solver (issue 12): random graphs of 5-50 operations
 * (pointwise, compose, transpose, einsum with row variables, fixed indices and convolutions,
 * batch slices, data, reshape, vector conversion, terminals; shapes open, given, partly given,
 * labeled, parameters) are built twice, once on an environment in reference mode (full sweeps
 * of every pending constraint, every candidate of every closing stage scanned in order: the
 * solver as it was before the occurrence index) and once on the indexed worklist solver. After
 * every operation and at every finalization (some mid-way, as a script's `print` does) the two
 * must agree exactly: success or failure, the whole error message, and every shape's printed
 * form (unsolved variables included, so even the order of fresh variables must match). */
#include "check.h"
#include "shape/solver.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t s;
} rng;

static uint32_t next(rng *r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return (uint32_t)(r->s >> 11);
}

static int below(rng *r, int n) {
  return (int)(next(r) % (uint32_t)n);
}

/* The two solvers side by side. */
typedef struct {
  cn_ctx *ctx[2];
  cn_shape_env *env[2];
  cn_shape *shapes[2][128];
  int n_shapes;
  int disagreements;
} twin;

static void twin_init(twin *t) {
  memset(t, 0, sizeof *t);
  for (int k = 0; k < 2; k++) {
    t->ctx[k] = cn_ctx_create();
    t->env[k] = cn_shape_env_new(t->ctx[k]);
  }
  t->env[0]->reference = true;
}

static void twin_free(twin *t) {
  for (int k = 0; k < 2; k++) cn_ctx_destroy(t->ctx[k]);
}

static void compare_shapes(twin *t, const char *when) {
  for (int i = 0; i < t->n_shapes; i++) {
    const char *a = cn_shape_str(t->env[0], t->shapes[0][i]);
    const char *b = cn_shape_str(t->env[1], t->shapes[1][i]);
    if (strcmp(a, b) != 0) {
      t->disagreements++;
      CHECK_MSG(false, "%s: shape %d: reference %s, indexed %s", when, i, a, b);
    }
  }
}

static bool compare_status(twin *t, bool ok0, bool ok1, const char *when) {
  const char *e0 = cn_ctx_error(t->ctx[0]), *e1 = cn_ctx_error(t->ctx[1]);
  bool same = ok0 == ok1 && (ok0 || strcmp(e0, e1) == 0);
  if (!same) {
    t->disagreements++;
    CHECK_MSG(false, "%s: reference %s (%s), indexed %s (%s)", when, ok0 ? "ok" : "failed", e0,
              ok1 ? "ok" : "failed", e1);
  }
  cn_ctx_clear_error(t->ctx[0]);
  cn_ctx_clear_error(t->ctx[1]);
  return same;
}

/* A row spec: left to inference, or 0-3 axes of size 1-4 (0: the size is inferred), sometimes
 * labeled. */
typedef struct {
  int64_t dims[3][4];
  const char *labels[3][4];
  cn_shape_row_spec rows[3];
} shape_spec;

static void random_spec(rng *r, shape_spec *s, bool open) {
  static const char *const names[] = {"rgb", "t"};
  memset(s, 0, sizeof *s);
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (open || below(r, 3) == 0) continue;
    s->rows[k].given = true;
    s->rows[k].n = below(r, 4);
    s->rows[k].dims = s->dims[k];
    s->rows[k].labels = s->labels[k];
    for (int i = 0; i < s->rows[k].n; i++) {
      int roll = below(r, 10);
      s->dims[k][i] = roll == 0 ? 0 : 1 + below(r, 4);
      s->labels[k][i] = roll == 1 ? names[below(r, 2)] : NULL;
    }
  }
}

static int new_shape(twin *t, rng *r, bool open) {
  if (t->n_shapes == 128) return -1;
  shape_spec s;
  random_spec(r, &s, open);
  bool param = !open && below(r, 5) == 0;
  char label[16];
  snprintf(label, sizeof label, "t%d", t->n_shapes);
  for (int k = 0; k < 2; k++)
    t->shapes[k][t->n_shapes] = cn_shape_new(t->env[k], label, param, s.rows);
  CHECK(t->shapes[0][t->n_shapes] && t->shapes[1][t->n_shapes]);
  return t->n_shapes++;
}

static const char *const unary_specs[] = {
    "... => ...",
    "...|...->... => 0",
    "ij => ji",
    "...|ij => ...|ji",
    "ijk => kji",
    "i => i",
    "ii => i",
    "...|... => ...|...2",
    "2...|...->... => ...|...->...",
    "..a..i => ..a..",
    "...|...->... => ...|...->...",
};
static const char *const binary_specs[] = {
    "ij;jk=>ik",
    "i;i=>i",
    "... ; ... => ...",
    "...|...->... ; ...|...->... => ...|...->...",
    "k; o<+k => o",
    "oh<+kh, ow<+kw; kh, kw => oh, ow",
    "2*oh=+kh, 2*ow=+kw; kh, kw => oh, ow",
    "...|i->j; ...|j->k => ...|i->k",
};

/* One random operation, added to both environments with identical arguments. */
static void random_op(twin *t, rng *r, int step) {
  int n_existing = t->n_shapes;
  if (n_existing == 0) return;
  int lhs = new_shape(t, r, below(r, 4) != 0);
  if (lhs < 0) return;
  int rhs[3] = {below(r, n_existing), below(r, n_existing), below(r, n_existing)};
  cn_shape_kind kind;
  int n_rhs = 0;
  const char *spec_text = NULL;
  cn_shape_args args[2] = {{0}};
  int64_t dims[2] = {1 + below(r, 4), 1 + below(r, 4)};
  switch (below(r, 10)) {
  case 0:
  case 1:
  case 2:
    kind = CN_SL_POINTWISE;
    n_rhs = 1 + below(r, 3);
    break;
  case 3:
    kind = CN_SL_COMPOSE;
    n_rhs = 2;
    break;
  case 4:
    kind = CN_SL_TRANSPOSE;
    n_rhs = 1;
    break;
  case 5:
    kind = CN_SL_EINSUM;
    n_rhs = 1;
    spec_text = unary_specs[below(r, (int)(sizeof unary_specs / sizeof *unary_specs))];
    break;
  case 6:
    kind = CN_SL_EINSUM;
    n_rhs = 2;
    spec_text = binary_specs[below(r, (int)(sizeof binary_specs / sizeof *binary_specs))];
    break;
  case 7:
    kind = CN_SL_BATCH_SLICE;
    n_rhs = 1;
    break;
  case 8:
    kind = below(r, 2) ? CN_SL_DATA : CN_SL_RESHAPE;
    int batch = below(r, 2);
    for (int k = 0; k < 2; k++) {
      args[k].n_dims[CN_ROW_BATCH] = batch;
      args[k].dims[CN_ROW_BATCH] = dims;
      args[k].n_dims[CN_ROW_OUTPUT] = kind == CN_SL_DATA ? 2 : 0;
      args[k].dims[CN_ROW_OUTPUT] = dims;
      args[k].total = dims[0] * dims[1] * 2;
    }
    break;
  default:
    kind = below(r, 2) ? CN_SL_VEC_CONVERT : CN_SL_TERMINAL;
    n_rhs = kind == CN_SL_VEC_CONVERT;
    args[0].coeff = args[1].coeff = 4;
    break;
  }
  bool ok[2];
  for (int k = 0; k < 2; k++) {
    if (spec_text) args[k].spec = cn_einsum_parse(t->ctx[k], spec_text);
    CHECK(!spec_text || args[k].spec);
    cn_shape *operands[3];
    for (int i = 0; i < n_rhs; i++) operands[i] = t->shapes[k][rhs[i]];
    ok[k] = cn_shape_add_op(t->env[k], kind, &args[k], t->shapes[k][lhs], operands, n_rhs) != NULL;
  }
  char when[96];
  snprintf(when, sizeof when, "operation %d (%s%s%s)", step, cn_shape_kind_name(kind),
           spec_text ? " " : "", spec_text ? spec_text : "");
  compare_status(t, ok[0], ok[1], when);
  compare_shapes(t, when);
}

/* One graph; returns whether its last finalization succeeded. */
static bool random_graph(rng *r, int *n_ops_done) {
  twin t;
  twin_init(&t);
  int n_leaves = 1 + below(r, 4), n_ops = 5 + below(r, 46);
  for (int i = 0; i < n_leaves; i++) new_shape(&t, r, false);
  bool final_ok = true;
  for (int step = 0; step < n_ops; step++) {
    random_op(&t, r, step);
    bool last = step == n_ops - 1;
    if (last || below(r, 12) == 0) {
      bool ok[2] = {cn_shape_finalize(t.env[0]) == CN_OK, cn_shape_finalize(t.env[1]) == CN_OK};
      char when[64];
      snprintf(when, sizeof when, "finalization after operation %d", step);
      compare_status(&t, ok[0], ok[1], when);
      compare_shapes(&t, when);
      final_ok = ok[1];
      if (!ok[0] || !ok[1] || t.disagreements) break; /* a failed finalization leaves it partial */
    }
  }
  *n_ops_done += n_ops;
  twin_free(&t);
  return final_ok;
}

int main(void) {
  rng r = {0x9E3779B97F4A7C15ull};
  int graphs = 3000, succeeded = 0, n_ops = 0;
  for (int g = 0; g < graphs; g++) succeeded += random_graph(&r, &n_ops);
  printf("%d random graphs (%d operations): %d finalized, %d failed alike\n", graphs, n_ops,
         succeeded, graphs - succeeded);
  /* the generator must reach both outcomes often, or the comparison says little */
  CHECK(succeeded > graphs / 10);
  CHECK(graphs - succeeded > graphs / 10);
  CHECK_DONE();
}
