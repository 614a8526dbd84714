/* Internal to the shape solver, shared by its passes (bottom to top: term.c terms, resolution,
 * printing and readers; worklist.c the occurrence index, the work queues and the trailed writes;
 * logic.c each operation's constraints; conflict.c conflict messages; unify.c unification of
 * pending constraints and propagation; finalize.c closing what propagation leaves open; ops.c
 * adding shapes and operations): the environment, pending constraints, message sites and the
 * writes the files make to the substitution. A file calls only the files below it.
 *
 * Invariants: every write to a binding, a minimum or a pending entry goes through a setter
 * (cn_sv_set_dim, cn_sv_set_row, cn_sv_set_min, cn_sv_set_pending), so that while an operation is
 * being added (env->trailing) the old value is on the undo trail and a failing cn_shape_add_op
 * restores the environment exactly. Pending entries keep their index for life (decided ones are
 * marked done, never moved; a rollback only drops the entries it added), so the index, the queues
 * and the trail can name them by index.
 *
 * Scale (issue 12): nothing sweeps the whole environment per binding. Every pending entry is
 * registered under each variable its resolved constraint mentions (the occurrence index); binding
 * a variable wakes only the entries registered under it; finalization takes its candidates from
 * queues that an entry's change refills with the variables it mentions. The index is a superset
 * (stale registrations are filtered by reading the entry), never a subset: an entry mentions a
 * variable only after a processing that registers it. `reference` turns all of this off (full
 * sweeps, every candidate in order, as the solver did before): the tests compare the two. */
#ifndef CN_SHAPE_SOLVER_H
#define CN_SHAPE_SOLVER_H

#include "shape/shape.h"

#include <limits.h>

#define CN_SV_NO_AXIS INT_MIN

/* Where the spec side of an einsum row equality points (a position in the cn_es_row): an axis
 * index into leading then trailing, or one of these. */
#define CN_SV_SPEC_IN_VAR (-1) /* inside the row's variable */
#define CN_SV_SPEC_WHOLE  (-2) /* the whole row (rank conflicts) */

/* What processing a constraint decided: nothing left, still pending, or failed (the status set). */
typedef enum { CN_SV_DONE, CN_SV_PEND, CN_SV_FAIL } cn_sv_result;

/* A constraint not decided yet (or decided: done), with what its messages need; unify.c narrows
 * its rows as it pairs axes. */
typedef struct {
  const cn_shape_op *op;
  cn_shape_constraint c;
  int axis_a, axis_b;        /* DIM_*: the axes of each side */
  int off[2][2];             /* ROW_*: axes already paired, [side a/b][0 left, 1 right] */
  const cn_es_row *spec_row; /* DIM_* from an einsum row equality: the spec side's row ... */
  int spec_pos;              /* ... and position (see CN_SV_SPEC_*), for messages */
  bool min_on_b;             /* MIN_DIM from a binding: d1 stands on side b */
  bool done;
  bool reused; /* DIM_*: a retry already re-deferred into this entry */
  bool flanks; /* ROW_EQ/EXACT: narrowed to `L va = vb T` (unify.c), listed in env->flank_entries */
} cn_sv_pending;

/* A min-heap of (key, id) with a membership flag per id (an id is queued at most once). */
typedef struct {
  int64_t key;
  int id;
} cn_sv_queue_item;
typedef struct {
  cn_sv_queue_item *items;
  int n, cap;
  bool *queued; /* by id */
  int cap_queued;
} cn_sv_queue;

/* One write on the undo trail: what was at a dim binding, a minimum, a row binding or an entry. */
typedef enum { CN_SV_UNDO_DIM, CN_SV_UNDO_MIN, CN_SV_UNDO_ROW, CN_SV_UNDO_PEND } cn_sv_undo_kind;
typedef struct {
  cn_sv_undo_kind kind;
  int index;
  cn_dim *dim;
  cn_row *row;
  int64_t min;
  cn_sv_pending pend;
} cn_sv_undo;

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
  cn_sv_pending *pend;
  int n_pend, cap_pend; /* every entry ever added (done ones included) */
  long events;          /* bindings and simplifications: the reference sweeps' fixpoint test */
  long stamp;           /* changes whenever a binding or a minimum does: resolution caches */
  bool reference;       /* full sweeps instead of the index and queues (tests) */
  /* the occurrence index: chains of (entry, next) registrations per row / dim variable */
  int *row_head, *dim_head; /* -1: none */
  int cap_row_head, cap_dim_head;
  int *row_param_head, *dim_param_head; /* the same for parameters' shapes (by shape index) */
  int cap_row_param_head, cap_dim_param_head;
  int *reg_entry, *reg_next;
  int n_reg, cap_reg, cap_reg_next;
  /* propagation: this sweep's and the next sweep's entries; `current` is the entry being
   * processed (-1 outside propagation) */
  cn_sv_queue sweep_now, sweep_next;
  int current;
  /* finalization candidates (see finalize.c): row variables for the row stages, DIM_INEQ
   * entries for the dim stage, (sweep, entry) for Total_elems, entries for the last guesses */
  cn_sv_queue cand_upward, cand_dim, cand_operands, cand_total, cand_through, cand_guess;
  int guess_cursor;        /* shapes before it are closed for good (or parameters) */
  int first_open;          /* entries before it are done for good (finalization's last check) */
  cn_sv_queue cand_params; /* parameters whose variables changed since their last check */
  int *open_params;        /* the parameters' shape indices that may still have a variable */
  int n_open_params, cap_open_params;
  int *gathered; /* scratch of cn_sv_gather */
  int cap_gathered;
  /* min_rank's memo (finalize.c): rank_seen[v] == rank_call when rank_need[v] is this call's */
  long *rank_seen;
  int *rank_need;
  int cap_rank_seen, cap_rank_need;
  long rank_call;
  /* the entries ever deferred as `L va = vb T` (indices, possibly stale: filtered by the entry's
   * own `flanks`), the candidates of finalization's close_flanks */
  int *flank_entries;
  int n_flank_entries, cap_flank_entries;
  /* the first affine term whose span passed int64 (term.c): it resolved to a size of INT64_MAX,
   * so that resolution never fails on the user's sizes; the operation being added, or the
   * finalization, fails with its message (cn_sv_span_status) */
  const cn_dim *span_overflow;
  int64_t span_over, span_kernel;
  bool trailing; /* inside cn_shape_add_op: record every write on the trail */
  cn_sv_undo *trail;
  int n_trail, cap_trail;
};

/* Whether pending entry `entry` still counts: added and not rolled back, and not decided. */
static inline bool cn_sv_live(const cn_shape_env *env, int entry) {
  return entry < env->n_pend && !env->pend[entry].done;
}

/* Where a constraint being processed comes from, for its messages. */
typedef struct {
  const cn_shape_op *op;
  const cn_shape_constraint *c;
  int axis_a, axis_b;
  /* retrying this dim entry: a deferral updates it instead of adding another */
  cn_sv_pending *self;
  /* an einsum row equality: side b is this spec row, `spec_len` axes long once resolved (-1 while
   * it has a row variable); spec_pos locates the current pair's side b in it (CN_SV_SPEC_*) */
  const cn_es_row *spec_row;
  int spec_len, spec_pos;
} cn_sv_site;

/* ---- term.c ---- */
/* Prints a dim as cn_row_print does (a variable as ?, an affine term with its operands). */
void cn_sv_dim_print(cn_sbuf *sb, cn_shape_env *env, cn_dim *d);
/* CN_OK, or the error of env->span_overflow (an affine axis reading more than int64 cells). */
cn_status cn_sv_span_status(cn_shape_env *env);

/* ---- worklist.c ---- */
bool cn_sv_queue_push(cn_ctx *ctx, cn_sv_queue *q, int id, int64_t key);
/* The smallest key's id, or -1 when empty. */
int cn_sv_queue_pop(cn_sv_queue *q);
/* Entry i is new or changed: registers it under the variables of its resolved constraint and
 * queues them (and it) as finalization candidates; a fresh entry is also queued for propagation
 * (a processed one is requeued only when a variable it mentions changes). */
bool cn_sv_note_entry(cn_shape_env *env, int i, bool fresh);
/* Registers the parameter shape sh, of index i, under the variables of its resolved rows (their
 * changes queue it in cand_params), and queues it when asked. */
bool cn_sv_note_param(cn_shape_env *env, const cn_shape *sh, int i, bool queue);
/* The live entries that may mention the variable (all live entries in reference mode), sorted by
 * index, in env->gathered; the count, or -1 on allocation failure. */
int cn_sv_gather_row(cn_shape_env *env, int var);
int cn_sv_gather_dim(cn_shape_env *env, int var);
/* The trailed writes. The variable setters also wake the entries and parameters registered under
 * the variable; an entry's own change is noted in the index by its caller (cn_sv_note_entry). */
bool cn_sv_set_dim(cn_shape_env *env, int var, cn_dim *to);
bool cn_sv_set_row(cn_shape_env *env, int var, cn_row *to);
bool cn_sv_set_min(cn_shape_env *env, int var, int64_t min);
bool cn_sv_set_pending(cn_shape_env *env, int i, const cn_sv_pending *p);
/* Undoes the trail, newest first, and drops the pending entries from n_pend on. */
void cn_sv_rollback(cn_shape_env *env, int n_pend);

/* ---- conflict.c ---- */
/* A conflict between the two sides of the site (d_a / d_b may be NULL: rank conflicts); sets and
 * returns the context's status. */
cn_status cn_sv_conflict(cn_shape_env *env, const cn_sv_site *s, cn_dim *d_a, cn_dim *d_b,
                         const char *what);
/* The same for two rows of different ranks, their axis counts appended to `what`. */
cn_status cn_sv_rank_conflict(cn_shape_env *env, const cn_sv_site *s, const cn_row *a,
                              const cn_row *b, const char *what);
/* The conflict a pending entry still describes after closing. */
cn_status cn_sv_pending_conflict(cn_shape_env *env, const cn_sv_pending *p, const char *what);
/* The spec row on side b of an einsum row equality, or NULL for any other constraint. */
const cn_es_row *cn_sv_spec_row_of(const cn_shape_op *op, const cn_shape_constraint *c);
/* Where a message axis of the resolved spec row (len axes when closed, else -1) falls in the
 * written row (see CN_SV_SPEC_*). */
int cn_sv_spec_pos(const cn_es_row *r, int len, int axis);

#endif
