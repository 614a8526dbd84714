/* Tensors and the graph that owns them (issue 5): differentiable tensors whose forward and
 * backward code are assignments built from the operation's inferred projections
 * (contraction-is-emergent "From what you write to the projections"), parameters with held-out init
 * code, and the code gathering behind the public cn_graph_* functions.
 *
 * Lifecycle: building a tensor adds its shape and its shape-logic operation to the graph's shape
 * environment (inference is online); the first request for code or nodes materializes every
 * tensor built so far: shapes are finalized, each operation's projections inferred, padding
 * margins frozen, and value (and gradient) nodes created with the final dims and margins.
 * Tensors built later are materialized by the next request.
 *
 * Invariants: everything lives in the context arena except node buffers; a tensor's operands
 * were built before it (the graph is acyclic in creation order); `diff` is fixed at creation
 * (a gradient node exists iff diff); after materialization `proj` is the operation's record
 * with slot 0 the tensor and slot i its operand i. */
#ifndef CN_TENSOR_H
#define CN_TENSOR_H

#include "proj/proj.h"

typedef enum {
  CN_TK_NUMBER, /* a constant filling its (inferred) shape: Fetch Constant */
  CN_TK_DATA,   /* host values copied into the node at materialization */
  CN_TK_FETCH,  /* a fetch op: range_over_offsets, embed_self_id, embed_symbol, embed_dim */
  CN_TK_ACCUM,  /* v =:accum prim(v1, ...) over the operation's projections */
  CN_TK_VEC,    /* v = vec_op(v1): a vectorized conversion (Set_vec_unop) */
  CN_TK_PARAM,  /* a parameter: v =: init (held out of forward code) */
  CN_TK_BUFFER, /* a node written only by standalone updates (zero-filled at creation) */
  CN_TK_VIEW,   /* args[0]'s gradient node as a value (n_args 0: read, never computed) */
  CN_TK_TILE    /* a Tile contraction (src/tile): v =:accum prim(v1, ...) over a record built
                   with the tensor (proj set at creation, not inferred); backprop as ACCUM */
} cn_tensor_kind;

typedef enum {
  CN_TF_RANGE_OVER_OFFSETS,
  CN_TF_EMBED_SELF_ID,
  CN_TF_EMBED_SYMBOL,
  CN_TF_EMBED_DIM
} cn_tensor_fetch;

/* What a guard of class labels (train.c) reports: the operation, its labels and the classes of its
 * logits (class_count's tensor); for a gather (gather.c, classes NULL), its ids and its table
 * (logits), whose first axis they index. */
typedef struct {
  const char *what;
  cn_tensor *labels, *logits, *classes;
} cn_label_check;

/* An operation's forward and gradient formulas, parsed and checked (deriv.c). */
typedef struct cn_op_formulas cn_op_formulas;

struct cn_tensor {
  cn_graph *g;
  int id; /* its shape's id: 1-based, increasing in creation order */
  const char *label;
  cn_prec prec;
  cn_tensor_kind kind;
  cn_shape *shape;
  cn_shape_op *sop; /* its shape-logic operation */
  int n_args;
  cn_tensor *args[3];
  cn_op accum, prim; /* ACCUM, VEC (prim) */
  /* ACCUM defined by its code (cn_tensor_operation): the forward and gradient formulas in place
   * of prim's (deriv.c); NULL for every other tensor */
  const cn_op_formulas *formulas;
  double number;    /* NUMBER */
  bool number_bits; /* NUMBER: the raw bits `bits` (Fetch Constant_bits) instead */
  uint64_t bits;
  double *values; /* DATA: row-major values (count = numel, or repeated when shorter) */
  size_t n_values;
  cn_tensor_fetch fetch; /* FETCH */
  cn_symbol sym;         /* FETCH embed_symbol; batch slice by a symbol */
  int embed_axis;        /* FETCH embed_dim: memory-order axis of args[0] */
  bool has_slice;        /* ACCUM batch slice: slice index below */
  cn_index slice;
  bool diff;           /* has a gradient */
  bool stops_gradient; /* stop_gradient: never differentiable through */
  bool is_param;       /* held out of forward code; init code gathered by cn_graph_init_params */
  bool seeded;         /* a parameter whose init code was already handed out */
  bool scripted;       /* created while the graph's fuse_unnamed was on (a script's evaluation) */
  bool named;          /* bound to a name (cn_tensor_set_named): never fusable */
  /* A bias or gain its builder spread over several axes (attention's q/k/v biases |->H,D): Adam's
   * decay_matrices_only leaves it alone whatever its rank, as nanoGPT's groups leave 1-D ones. */
  bool decay_exempt;
  int materialized;
  cn_node *value, *grad;
  /* a parameter's optimizer state, created by the first update that needs it (optim.c) and
   * reused by every later one: SGD's momentum, Adam's first and second moments and step count */
  cn_node *sgd_momentum, *adam_m, *adam_v, *adam_step;
  cn_proj *proj;
  unsigned visit; /* traversal mark (graph epoch) */
  /* Forward roots (syntax-extensions-cd-op "Embedded nodes"): the first tensor built with this
   * one as an operand, which embeds its forward code (NULL: none yet, a root; scan_consumers);
   * whether its forward code went into code gathered before (`computed`); and a mark of
   * cn_graph_forward_embedded (graph epoch). */
  cn_tensor *consumer;
  bool computed;
  unsigned needed;
  /* a validity test of class labels (train.c), armed on the value node when its code is
   * gathered: NULL for every other tensor */
  const cn_label_check *label_check;
  /* A gather (gather.c): its record, inferred as the one-hot contraction's, becomes an
   * index-valued projection at materialization (cn_tensor_gather_proj) and only args[0], the
   * table, is an operand of prim (ID); the other args (the ids, their guard) are computed first. */
  bool gather;
  /* one_hot(ids) (gather.c): the ids it is made of, so that a contraction reading it only through
   * its class axis becomes a gather of the other operand (NULL for every other tensor). */
  cn_tensor *one_hot_ids;
};

/* A standalone assignment (contraction-is-emergent's producer regime): it contributes its own
 * constraint to shape and projection inference through its logic, and its record is inferred with
 * the tensors' at materialization. */
struct cn_update {
  cn_tref lhs;
  bool init;
  cn_op accum, prim;
  int n_args;
  cn_tref args[3];
  cn_shape_op *sop;
  cn_proj *proj;
};

struct cn_graph {
  cn_ctx *ctx;
  cn_shape_env *shapes;
  cn_proj_env *projs;
  cn_prec prec;
  cn_tensor **tensors;
  int n_tensors, cap_tensors;
  int n_materialized;
  cn_update **updates;
  int n_updates, cap_updates, n_updates_materialized;
  unsigned epoch;
  cn_use_padding use_padding; /* how a kernel term without a padding marker reads */
  int n_consumers_scanned;    /* the tensors whose operands have their `consumer` set */
  uint32_t seed;
  bool seed_set;          /* by cn_graph_set_seed: the option "random_seed" is not read */
  cn_tensor *seed_tensor; /* the global seed as a uint4x32-typed tensor, built on first use */
  /* on while a script is evaluated (cn_notation_run): tensors created then are `scripted`, and
   * the value nodes of those computed and never named are fusable (cn_node.fusable) */
  bool fuse_unnamed;
  /* the text of the last cn_tensor_format, rewritten in place by the next one (malloc'd, freed
   * by a context cleanup), so that printing in a training loop does not grow the arena */
  cn_sbuf formatted;
  cn_cleanup *formatted_cleanup;
};

/* A script bound t to a name (a let, a function parameter, a loop or pattern variable, a value
 * handed back to C): it may be printed or read by code written later, so its node is never
 * fusable. */
void cn_tensor_set_named(cn_tensor *t);

/* Records a new tensor (label copied; shape from rows, NULL = all inferred) and its operation.
 * NULL with a message on a shape conflict or a bad argument. */
cn_tensor *cn_tensor_new(cn_graph *g, const char *label, cn_tensor_kind kind, cn_prec prec,
                         const cn_shape_row_spec *rows, cn_shape_kind logic,
                         const cn_shape_args *args, int n_args, cn_tensor *const *operands);
/* A tensor recorded with its projections record (kind CN_TK_TILE: a Tile contraction): output
 * axes of the rank dims only, forward code `v =:accum prim(operands)` over proj (slot 0 the
 * tensor, slot i operand i, operands of g), `diff` as cn_tensor_op_diff. Materialization keeps
 * proj instead of inferring one. NULL with a message on a bad dim or allocation failure. */
cn_tensor *cn_tensor_new_recorded(cn_graph *g, const char *label, int rank, const int64_t *dims,
                                  cn_op accum, cn_op prim, int n_args, cn_tensor *const *operands,
                                  cn_proj *proj);
/* The same with the given precision and rows (batch, input and output axes; the record's LHS
 * map is over their memory order: batch, output, input): concat and reshape (layout.c). */
cn_tensor *cn_tensor_new_recorded_rows(cn_graph *g, const char *label, cn_prec prec,
                                       const cn_dims *rows, cn_op accum, cn_op prim, int n_args,
                                       cn_tensor *const *operands, cn_proj *proj);
/* The shape rows of a cn_dims (NULL dims: NULL, all rows inferred); rows is the storage. */
const cn_shape_row_spec *cn_dims_rows(const cn_dims *dims, cn_shape_row_spec rows[CN_N_ROWS]);
/* A constant filling the given rows (NULL: inferred): Fetch Constant, not differentiable. */
cn_tensor *cn_tensor_constant(cn_graph *g, const char *label, double value,
                              const cn_shape_row_spec *rows);
/* A constant with no axes (unlike a number's unit axis): it fills whatever shape it meets and
 * never gives its results an axis. The library's own scalars and Tile's rank-0 values. */
cn_tensor *cn_tensor_scalar(cn_graph *g, double value);
/* Shared by the operation library (library.c, train.c): t with its label set (NULL passes
 * through, as does a failed copy of the label); whether none of the n operands is NULL (else a
 * message naming the operation `what`). */
cn_tensor *cn_tensor_labeled(cn_tensor *t, const char *label);
/* cn_tensor_apply of a unary / binary op that passes a NULL operand through (no new message), so
 * a composite operation keeps the message of the piece that failed. */
cn_tensor *cn_tensor_apply1(cn_graph *g, cn_op op, cn_tensor *a);
cn_tensor *cn_tensor_apply2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b);
bool cn_tensor_operands(cn_graph *g, const char *what, int n, cn_tensor *const *ts);
/* The tensor whose value (*grad false) or gradient (*grad true) is the node with this id, or
 * NULL (a node of an update buffer, a temporary). A scan over the tensors: for error reports. */
cn_tensor *cn_graph_tensor_of_node(const cn_graph *g, int node_id, bool *grad);
/* Materializes every tensor and update built so far (see the lifecycle above). */
cn_status cn_graph_materialize(cn_graph *g);
/* The node a reference designates (after materialization); NULL with a message if it is a
 * gradient the tensor does not have. */
cn_node *cn_tref_node(cn_tref ref);

/* ---- Code gathering (code.c), shared with the optimizers (optim.c) ---- */
/* A growing list of assignments (arena-allocated); add takes NULL as the failure of the
 * constructor that returned it (the context's status, else out of memory). */
typedef struct {
  cn_ctx *ctx;
  cn_asgn **v;
  int n, cap;
} cn_asgn_list;
cn_status cn_asgn_list_add(cn_asgn_list *l, cn_asgn *a);
/* The list as one tree (a no-op when empty); NULL when st is not CN_OK. */
cn_asgn *cn_asgn_list_finish(cn_asgn_list *l, cn_status st);
typedef struct {
  cn_tensor **v;
  int n, cap;
} cn_tensor_list;
/* The start of every code entry point: t not NULL, a fresh traversal epoch, materialization. */
cn_status cn_code_begin(cn_graph *g, cn_tensor *t);
/* Appends the forward code of t not yet gathered in the current epoch. */
cn_status cn_forward_into(cn_graph *g, cn_tensor *t, cn_asgn_list *out);
/* The forward code of t for a routine that reads what earlier code computed (a script's %cd and
 * print statements, syntax-extensions-cd-op "Embedded nodes": a tensor's forward code is embedded
 * in its first consumer, the translator includes the forward code of forward roots): t's own
 * code, and that of every operand of included code unless the operand is computed (code gathered
 * before holds its forward code) and embedded in another consumer, where its value is read. An
 * operand never computed yet is included whoever embeds it, so nothing is read before it was
 * written. NULL with a message on failure. */
cn_asgn *cn_graph_forward_embedded(cn_graph *g, cn_tensor *t);
/* The parameters t depends on (through_inits: also those their init expressions read), in
 * creation order. Marks tensors with the current epoch. */
cn_status cn_collect_params(cn_graph *g, cn_tensor *t, bool through_inits, cn_tensor_list *out);

/* Arms t's value node with t's label check (cn_node.guard_what): the message, which names the
 * labels, the logits and the class count, is written once shapes are solved (materialization). */
cn_status cn_label_check_arm(cn_tensor *t);
/* A constant of the given precision without axes, labeled by its value (train.c). */
cn_tensor *cn_tensor_typed_scalar(cn_graph *g, cn_prec prec, double v);
/* The size of axis `axis` (memory order) of t as a scalar of prec, read when lowered (library.c;
 * cn_tensor_embed_dim is the graph's precision). */
cn_tensor *cn_tensor_embed_dim_prec(cn_graph *g, cn_tensor *t, int axis, cn_prec prec);

/* ---- Gather (gather.c) ---- */
/* At materialization, once t's record is inferred and the nodes exist: turns the record of a
 * gather, or of a contraction with a one-hot that qualifies, into its index-valued projection
 * (ir.h cn_proj_gather), rewriting the contraction's operands and prim. CN_OK and nothing done for
 * any other tensor. */
cn_status cn_tensor_gather_proj(cn_tensor *t);
/* The operands prim reads: 1 for a gather (args[0], the table), else n_args. */
int cn_tensor_n_operands(const cn_tensor *t);

/* ---- Assignments from projections (deriv.c) ---- */
/* The formulas of code (its forward, its operands' gradients) parsed and checked; NULL with a
 * message naming the formula and the column of its first error. */
cn_op_formulas *cn_op_formulas_parse(cn_ctx *ctx, const cn_op_code *code);
/* *is: whether f is one primitive over the operands in order (`prim(a, b)`, or `a`: CN_OP_ID)
 * with the derivative table's gradient for each operand (none where the table has none); then
 * *prim is that primitive, and the operation is the primitive's own (cn_tensor_operation builds
 * that tensor, so a library operation written as code keeps the builtin's code and speed). */
cn_status cn_op_formulas_primitive(cn_ctx *ctx, const cn_op_formulas *f, int arity, cn_op *prim,
                                   bool *is);
/* Whether a gradient formula of operand `operand` was given. */
bool cn_op_formulas_differentiable(const cn_op_formulas *f, int operand);
/* The forward code of an ACCUM tensor: v =:accum prim(v1, ...). */
cn_asgn *cn_tensor_forward_asgn(cn_tensor *t);
/* Appends to *out the backprop of t into the gradients of its differentiable operands. */
cn_status cn_tensor_backprop_asgn(cn_tensor *t, cn_asgn ***out, int *n, int *cap);
/* Whether the derivative table gives op a gradient in operand (0-based). */
bool cn_op_differentiable(cn_op op, int operand);
/* Whether an operation tensor (CN_TK_ACCUM or CN_TK_TILE, with operands, accum and prim set) is
 * differentiable: some operand is and the table differentiates prim in it, and it does not stop
 * gradients. Its constructor sets `diff` from it once the operation is complete. An accumulation
 * without a gradient rule still counts (backprop then refuses it by name, rather than letting
 * the gradient silently vanish). */
bool cn_tensor_op_diff(const cn_tensor *t);
/* The pointwise record of `target` against refs (each right-aligned, size-1 or missing axes
 * broadcast): for updates written outside an operation (SGD). */
cn_proj *cn_pointwise_proj(cn_ctx *ctx, cn_node *target, int n_refs, cn_node *const *refs);

/* The reading of a kernel term without a padding marker in specs built now
 * (cn_shape_args.unmarked): the graph's use_padding. */
cn_es_conv cn_graph_unmarked_conv(const cn_graph *g);

/* ---- Parsed logics (the API's text forms parse with cn_shape_logic_parse, then call these) ----
 */
/* cn_graph_update with its logic parsed: NULL is the primitive's default projection. */
cn_update *cn_graph_update_logic(cn_graph *g, cn_tref lhs, bool init, cn_op accum, cn_op prim,
                                 int n_args, const cn_tref *args, const cn_shape_logic *logic);
/* cn_tensor_operation with its logic parsed (code->logic is not read): pointwise, compose (two
 * operands) or an einsum spec; transpose is refused. */
cn_tensor *cn_tensor_operation_logic(cn_graph *g, const cn_op_code *code,
                                     const cn_shape_logic *logic, cn_tensor *const *args);

#endif
