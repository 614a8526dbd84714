/* Shape inference (issue 3; contraction-is-emergent "The same constraints, read again",
 * convolution-is-a-contraction Part 2, syntax-extensions-cd-op einsum, ocannl-notes §2.5): shapes
 * as three rows, dimensions (variables, solved sizes, affine convolution/stride terms), the
 * constraint language as data, the solver, and the shape logic of each operation kind.
 *
 * Model.
 *   A shape is three rows, batch | input -> output; memory order is batch, output, input.
 *   A row is `lead` dims, an optional row variable, `trail` dims. A closed row (var < 0) keeps
 *   all its dims in `trail`.
 *   A dim is a variable, a solved size (with an optional label and a projection-id slot that
 *   projection inference fills), or an affine term (convolution-is-a-contraction) whose size
 *   reading is
 *     no kernel:          input = stride * over
 *     padded convolution: input = stride * over
 *     valid convolution:  input = stride * (over - 1) + 1 + (kernel - 1) * dilation
 *   and stride_offset (0 <= offset < stride) matters for projections only.
 *   Broadcasting is an order: sub ⊑ super holds when the dims are equal or the super dim is an
 *   unlabeled size 1 (a labeled size-1 axis, as of 'p' 1.0, claims its basis and does not
 *   stretch: ocannl-notes §2.5); a super row with fewer axes broadcasts: its row variable (or, for
 * a closed row, an implicit one at its left) absorbs the surplus axes of the sub row. The result of
 * an operation is the sub, its operands the supers.
 *
 * Constraints are data (cn_shape_constraint), grouped per operation in a cn_shape_op record that
 * the environment keeps (cn_shape_env.ops), so projection inference can call cn_shape_derive
 * again on fresh copies of the operation's shapes and re-solve the same constraints locally.
 *
 * Solving: equalities unify at once (a substitution environment: every variable is bound at most
 * once, resolution follows bindings); inequalities, Total_elems, minimum dims and affine
 * equalities that cannot be decided yet stay pending and are retried whenever a variable is
 * bound (online propagation, cn_shape_add_op). cn_shape_finalize closes the rest: supers
 * (leaves) close upward to the least upper bound of their uses, subs close to the fewest axes
 * their operands need, Total_elems closes its row variable (to one axis holding the rest of a
 * known count; with an unknown count, a row that has axes to none, a bare one to one axis sized
 * by the count), then the remaining row variables become "no more axes" and dim variables size
 * 1 (or their minimum) — except in a parameter, which is an error asking the user to give the
 * dimension.
 *
 * Invariants: everything lives in the context arena; solved and affine dims are immutable; a
 * variable's binding never mentions the variable itself (rank and size cycles are reported as
 * errors); every failure leaves a cn_fail message naming the operation (an einsum by its spec),
 * the tensors, row, axis and both sizes — an einsum's side by the spec axis or row variable as
 * written ("spec axis 'j' (size 3, as in the output row of "a" (#1))"); a failed operation is
 * undone (cn_shape_add_op). */
#ifndef CN_SHAPE_H
#define CN_SHAPE_H

#include "core/core.h"
#include "shape/einsum.h"

typedef enum { CN_ROW_BATCH, CN_ROW_INPUT, CN_ROW_OUTPUT } cn_row_kind;
#define CN_N_ROWS 3
const char *cn_row_kind_name(cn_row_kind kind); /* "batch", "input", "output" */

typedef enum { CN_DIM_VAR, CN_DIM_SOLVED, CN_DIM_AFFINE } cn_dim_kind;

typedef struct cn_dim cn_dim;
struct cn_dim {
  cn_dim_kind kind;
  int var;           /* VAR: the variable's index in the environment */
  int64_t size;      /* SOLVED */
  const char *label; /* SOLVED: the axis label (basis), NULL when unlabeled; VAR: the einsum
                        label it stands for (a name only, never compared) */
  int proj_id;       /* SOLVED: projection identity for projection inference; 0 = none yet */
  struct {
    int64_t stride;
    cn_dim *over;     /* the output axis it strides over */
    bool conv;        /* a kernel term is present */
    int64_t dilation; /* conv only */
    cn_dim *kernel;   /* conv only */
    bool use_padding; /* conv only: padded (input = stride*over) vs valid */
    int64_t stride_offset;
    const char *spec; /* the einsum spec and the 1-based column of the axis, for messages */
    int column;
  } affine; /* AFFINE */
  /* solver-internal: the resolution of this term in env `res_env` while its stamp is unchanged */
  const struct cn_shape_env *res_env;
  long res_stamp;
  cn_dim *res;
};

typedef struct cn_row {
  int n_lead;
  cn_dim **lead;
  int var; /* row variable index, -1 for a closed row */
  int n_trail;
  cn_dim **trail;
  /* solver-internal: the resolution of this row in env `res_env` while its stamp is unchanged */
  const struct cn_shape_env *res_env;
  long res_stamp;
  struct cn_row *res;
} cn_row;

typedef struct cn_shape {
  int id;            /* 1-based, in creation order */
  const char *label; /* arena */
  bool is_param;     /* never guessed: undetermined dims are errors ... */
  bool guessable;    /* ... unless its initializer is a number (set by the tensor layer) */
  cn_row *rows[CN_N_ROWS];
} cn_shape;

/* ---- Constraints (the data projection inference re-reads) ---------------------------------- */
typedef enum {
  CN_SC_DIM_EQ,   /* d1 = d2 */
  CN_SC_ROW_EQ,   /* r1 = r2 */
  CN_SC_ROW_INEQ, /* r1 ⊑ r2 (r1 the sub, e.g. the result; r2 the super, e.g. an operand) */
  CN_SC_DIM_INEQ, /* d1 ⊑ d2 */
  CN_SC_EXACT,    /* r1 is exactly the closed row r2 */
  CN_SC_TOTAL,    /* product of r1's dims = count, or = coeff * d1 / denom */
  CN_SC_MIN_DIM   /* d1 >= min (a fixed index min-1 reads the axis) */
} cn_sc_kind;

/* Which tensor of the operation a side of a constraint belongs to, for messages and for
 * projection inference: 0 the LHS, 1..3 the RHS operands, -1 the spec (einsum axes). */
typedef struct {
  int slot;
  cn_row_kind row;
} cn_sc_side;

typedef struct {
  cn_sc_kind kind;
  cn_sc_side a, b;
  cn_dim *d1, *d2;
  cn_row *r1, *r2;
  int64_t count;        /* TOTAL with d1 == NULL */
  int64_t coeff, denom; /* TOTAL with d1 != NULL */
  int64_t min;          /* MIN_DIM */
} cn_shape_constraint;

/* ---- Operations ----------------------------------------------------------------------------- */
typedef enum {
  CN_SL_POINTWISE,   /* 1..3 operands: lhs ⊑ each rhs, row by row */
  CN_SL_COMPOSE,     /* 2 operands: rhs1.input ⊑ rhs2.output (contraction-is-emergent: the
                        right operand's output broadcasts into the left one's input);
                        lhs.output ⊑ rhs1.output,
                        lhs.input ⊑ rhs2.input, lhs.batch ⊑ both batches. A third operand
                        (compose-accumulate, fma) is pointwise with lhs: lhs ⊑ rhs3 per row */
  CN_SL_TRANSPOSE,   /* 1 operand: input and output rows swapped (inequalities) */
  CN_SL_EINSUM,      /* 1..3 operands, args.spec: equalities only */
  CN_SL_BATCH_SLICE, /* 1 operand: rhs.batch = [d] ++ lhs.batch, other rows equal */
  CN_SL_DATA,        /* terminal with known dims: Exact per row (args.dims) */
  CN_SL_RESHAPE,     /* terminal: batch and input rows Exact (args.dims), the output row holds
                        args.total / (their product) cells (Total_elems) */
  CN_SL_VEC_CONVERT, /* 1 operand (uint4x32 cells): batch and input rows equal, the output row
                        of lhs holds args.coeff cells per cell of the rhs output row */
  CN_SL_TERMINAL     /* constants, fetch ops, parameters: asserts nothing */
} cn_shape_kind;
const char *cn_shape_kind_name(cn_shape_kind kind);

/* An operation's logic as a user writes it (a %cd assignment's or an operation's ~logic,
 * cn_graph_update's logic, cn_op_code.logic): "." pointwise, "@" compose, "T" transpose, any
 * other text an einsum spec. Parsed once where the text enters (the notation, a public function
 * of the API) and carried down as this record: the layers below neither compare nor re-parse
 * the text. */
typedef struct {
  cn_shape_kind kind;    /* CN_SL_POINTWISE, CN_SL_COMPOSE, CN_SL_TRANSPOSE or CN_SL_EINSUM */
  const cn_einsum *spec; /* EINSUM: the parsed spec (context arena); NULL otherwise */
} cn_shape_logic;
/* The kind text names, without parsing a spec: EINSUM for anything but the three symbols (so a
 * caller that rewrites spec text, the notation's splicing of strides, does so only for specs). */
cn_shape_kind cn_shape_logic_kind(const char *text);
/* Parses text into *out: CN_OK, or CN_ERR_INVALID (NULL text, a malformed spec) with
 * cn_einsum_parse's message, which quotes the text and points at the column of its error. */
cn_status cn_shape_logic_parse(cn_ctx *ctx, const char *text, cn_shape_logic *out);

/* A name bound by the caller, for named strides and dilations of affine einsum axes. */
typedef struct {
  const char *name;
  int64_t value;
} cn_shape_binding;

typedef struct {
  const cn_einsum *spec; /* EINSUM */
  const cn_shape_binding *bindings;
  int n_bindings;
  /* EINSUM: how a kernel term without '<' or '=' reads (the caller's use_padding):
   * CN_ES_CONV_PADDED or CN_ES_CONV_VALID; anything else (none in scope) refuses it */
  cn_es_conv unmarked;
  /* DATA: the dims of each row (labels optional, may be NULL) */
  int n_dims[CN_N_ROWS];
  const int64_t *dims[CN_N_ROWS];
  const char *const *labels[CN_N_ROWS];
  int64_t total; /* RESHAPE */
  int64_t coeff; /* VEC_CONVERT: result cells per operand cell (e.g. 4 for uint4x32 -> single) */
} cn_shape_args;

typedef struct {
  int id; /* 1-based, in order of addition */
  cn_shape_kind kind;
  cn_shape_args args; /* a copy (bindings and dims copied into the arena) */
  cn_shape *lhs;
  int n_rhs;
  cn_shape *rhs[3];
  int n_constraints;
  cn_shape_constraint *constraints;
} cn_shape_op;

typedef struct cn_shape_env cn_shape_env;

/* Given dims of a row for cn_shape_new: `given` false leaves the row to inference (a fresh row
 * variable); a size 0 gives the axis but leaves its size to inference; labels may be NULL. A
 * parameter's batch row defaults to empty when not given. */
typedef struct {
  bool given;
  int n;
  const int64_t *dims;
  const char *const *labels;
} cn_shape_row_spec;

cn_shape_env *cn_shape_env_new(cn_ctx *ctx);
/* An environment for one operation's constraints (projection inference's local re-solve): it
 * keeps no occurrence index and solves by full sweeps, which at that size cost less time and
 * memory than the index (same results: the index only skips work). */
cn_shape_env *cn_shape_env_new_local(cn_ctx *ctx);
cn_ctx *cn_shape_env_ctx(const cn_shape_env *env);
/* rows may be NULL (all rows inferred); otherwise indexed by cn_row_kind. */
cn_shape *cn_shape_new(cn_shape_env *env, const char *label, bool is_param,
                       const cn_shape_row_spec *rows);

/* Records the operation's constraints and propagates them. NULL on a conflict or an allocation
 * failure (message set); the environment is then exactly as before the call — every binding,
 * minimum and pending constraint the operation made is undone and the operation is not recorded —
 * so inference can go on without it. (cn_shape_solve / cn_shape_propagate called directly, and
 * cn_shape_finalize, undo nothing: after their failure the environment is partially solved.) */
cn_shape_op *cn_shape_add_op(cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                             cn_shape *lhs, cn_shape *const *rhs, int n_rhs);
/* The shape logic alone: generates the operation's constraints over the given shapes (fresh
 * variables for spec labels), without solving. Projection inference calls it again on freshened
 * shapes. */
cn_status cn_shape_derive(cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                          cn_shape *lhs, cn_shape *const *rhs, int n_rhs, cn_shape_constraint **out,
                          int *n_out);
/* Solves one constraint within the context of op (for messages; may be NULL). */
cn_status cn_shape_solve(cn_shape_env *env, const cn_shape_op *op, const cn_shape_constraint *c);
/* Retries pending constraints until nothing changes. */
cn_status cn_shape_propagate(cn_shape_env *env);
cn_status cn_shape_finalize(cn_shape_env *env);

/* ---- Fresh terms (used by the logic and by projection inference) ---- */
cn_dim *cn_dim_var(cn_shape_env *env);
cn_dim *cn_dim_solved(cn_shape_env *env, int64_t size, const char *label);
/* A broadcasting unit: a solved, unlabeled size 1 (it stretches to any size). */
static inline bool cn_dim_is_unit(const cn_dim *d) {
  return d->kind == CN_DIM_SOLVED && d->size == 1 && !d->label;
}
/* over/kernel as given; pure unit striding (stride 1, no kernel) is simplified to `over`. */
cn_dim *cn_dim_affine(cn_shape_env *env, int64_t stride, cn_dim *over, bool conv, int64_t dilation,
                      cn_dim *kernel, bool use_padding, int64_t stride_offset);
int cn_row_var_new(cn_shape_env *env);
cn_row *cn_row_make(cn_shape_env *env, int n_lead, cn_dim *const *lead, int var, int n_trail,
                    cn_dim *const *trail);

/* ---- Readers ---- */
/* The direct binding of a dim variable / row variable, NULL when unbound (or d not a variable).
 * Projection inference walks these one step at a time: the identity of every dim it meets on
 * the way is what it reads, which resolution would erase. */
cn_dim *cn_dim_var_binding(const cn_shape_env *env, const cn_dim *d);
cn_row *cn_row_var_binding(const cn_shape_env *env, int var);
/* Follows bindings and simplifies (NULL only on allocation failure). */
cn_dim *cn_dim_resolve(cn_shape_env *env, cn_dim *d);
cn_row *cn_row_resolve(cn_shape_env *env, const cn_row *r);
/* The solved sizes of a row: the count, or -1 if the row is not fully solved (message set).
 * Writes at most cap sizes. */
int cn_shape_row_dims(cn_shape_env *env, const cn_shape *sh, cn_row_kind kind, int64_t *out,
                      int cap);
/* All dims in memory order (batch, output, input); -1 if not solved. */
int cn_shape_dims(cn_shape_env *env, const cn_shape *sh, int64_t *out, int cap);
/* "2,3|4->5" (batch|input->output), in the user's terms: a size not decided yet prints as ?, axes
 * whose number is not decided yet (a row variable) as ... (as a spec writes them: "|...->?" is
 * any number of input axes and one output axis of unknown size); a labeled dim as 5:rgb; an
 * affine dim as 2*?+? (valid) or 2*?=+? (padded). */
void cn_shape_print(cn_sbuf *sb, cn_shape_env *env, const cn_shape *sh);
void cn_row_print(cn_sbuf *sb, cn_shape_env *env, const cn_row *r);
/* Arena copy of the printed shape ("" on failure). */
const char *cn_shape_str(cn_shape_env *env, const cn_shape *sh);

int cn_shape_env_n_ops(const cn_shape_env *env);
const cn_shape_op *cn_shape_env_op(const cn_shape_env *env, int index);

#endif
