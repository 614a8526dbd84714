/* Internal to the shape solver (row.c: terms, unification, propagation, operations; finalize.c:
 * closing what propagation leaves open): the environment, pending constraints and the writes
 * both files make to the substitution.
 *
 * Invariants: every write to a binding, a minimum or a pending entry goes through a setter
 * (cn_sv_set_dim, cn_sv_set_row, and row.c's own for minimums and entries), so that while an
 * operation is being added (env->trailing) the old value is on the undo trail and a failing
 * cn_shape_add_op restores the environment exactly; pending entries are only compacted while not
 * trailing, so the indices on the trail stay valid. */
#ifndef CN_SHAPE_SOLVER_H
#define CN_SHAPE_SOLVER_H

#include "shape/shape.h"

#include <limits.h>

#define NO_AXIS INT_MIN

/* Where the spec side of an einsum row equality points (a position in the cn_es_row): an axis
 * index into leading then trailing, or one of these. */
#define SPEC_IN_VAR (-1) /* inside the row's variable */
#define SPEC_WHOLE  (-2) /* the whole row (rank conflicts) */

typedef enum { R_DONE, R_PEND, R_FAIL } result;

typedef struct {
  const cn_shape_op *op;
  cn_shape_constraint c;
  int axis_a, axis_b;        /* DIM_*: the axes of each side */
  int off[2][2];             /* ROW_*: axes already paired, [side a/b][0 left, 1 right] */
  const cn_es_row *spec_row; /* DIM_* from an einsum row equality: the spec side's row ... */
  int spec_pos;              /* ... and position (see SPEC_*), for messages */
  bool min_on_b;             /* MIN_DIM from a binding: d1 stands on side b */
  bool done;
  bool reused; /* DIM_*: a retry already re-deferred into this entry */
} pending;

typedef enum { U_DIM, U_MIN, U_ROW, U_PEND } undo_kind;
typedef struct {
  undo_kind kind;
  int index;
  cn_dim *dim;
  cn_row *row;
  int64_t min;
  pending pend;
} undo;

struct cn_shape_env {
  cn_ctx *ctx;
  cn_dim **dim_bind;
  int64_t *dim_min;
  int n_dims, cap_dims;
  cn_row **row_bind;
  int n_rows, cap_rows;
  cn_shape **shapes;
  int n_shapes, cap_shapes;
  cn_shape_op **ops;
  int n_ops, cap_ops;
  pending *pend;
  int n_pend, cap_pend;
  long events;
  bool trailing; /* inside cn_shape_add_op: record every write on the trail */
  undo *trail;
  int n_trail, cap_trail;
};

bool cn_sv_grow(cn_ctx *ctx, void **arr, int *cap, int need, size_t elem);
bool cn_sv_set_dim(cn_shape_env *env, int var, cn_dim *to);
bool cn_sv_set_row(cn_shape_env *env, int var, cn_row *to);
/* The conflict a pending entry still describes after closing. */
cn_status cn_sv_pending_conflict(cn_shape_env *env, const pending *p, const char *what);

#endif
