/* The evaluator's internal interface, shared by its four files:
 *   eval.c       values, positioned errors and provenance, literals, inline declarations, %op
 *                expressions (operators, einsum, fields);
 *   eval_apply.c builtins (primitive ops, the operation library, host builtins), let%op / let%cd
 *                function application with its lifting points (seed 002 "Lifting of the
 *                applications of config arguments", seed 000 "the unit boundary");
 *   eval_cd.c    %cd assignments into standalone updates and code trees, label enrichment of
 *                %cd declarations, merge buffers, the code's assignments;
 *   eval_stmt.c  statements (let, print, backprop, run, sgd, set_seed, for) and the public entry
 *                points cn_notation_run / _check / _op / _cd.
 *
 * Invariants: every value, environment entry and code node lives in the context's arena; every
 * failure is a positioned message (cn_nt_fail_at), returned as NULL / false; recursion is bounded
 * by the parser's height limit and MAX_CALL_DEPTH. */
#ifndef CN_NT_EVAL_INTERNAL_H
#define CN_NT_EVAL_INTERNAL_H

#include "notation/eval.h"
#include "tensor/tensor.h"

#define MAX_CALL_DEPTH 64
#define MAX_ARGS       8

typedef enum {
  V_UNIT,
  V_NUM,
  V_BOOL,
  V_STR,
  V_TENSOR,
  V_LIST,
  V_RECORD,
  V_FUNC,
  V_ROUTINE,
  V_INDEX
} vkind;

typedef struct value value;
typedef struct env env;
typedef struct decl_scope decl_scope;
typedef struct code code;

struct env {
  const char *name;
  value *v;
  env *next;
};

/* The declarations and config blocks of one lifting point. A declaration is keyed by the syntax
 * node that declared it; a config application (`f ~config:{...}`, seed 002's config_block__i),
 * evaluated once per lifting point, by its application node. Maps, so that a script with many
 * declarations does not search them all at each one. */
struct decl_scope {
  cn_map decls;           /* const cn_nt_expr * -> cn_tensor * */
  cn_map blocks;          /* const cn_nt_expr * -> value * (the partial application) */
  const char *more_label; /* ~config's label: appended to declared labels (name_label) */
};

struct value {
  vkind kind;
  double num;
  bool is_int;
  bool b;
  const char *str;
  cn_tensor *t;
  bool grad;  /* V_TENSOR: the gradient of t */
  bool merge; /* V_TENSOR: the merge buffer of the (value or gradient) node */
  int n;
  value **items;
  const char **names;        /* V_RECORD */
  const cn_nt_expr *literal; /* V_LIST written as an array literal: its tensor on demand */
  bool tuple;                /* V_LIST written or built as a tuple (let (a, b) = ... takes it) */
  struct {
    int64_t range;    /* values 0 .. range - 1 */
    const char *name; /* the let or loop that names it; the symbol takes the name */
    bool created;     /* sym exists: created on first use, so that it can take the name */
    cn_symbol sym;
  } index; /* V_INDEX */
  struct {
    const cn_nt_item *def; /* a let%op, let%cd or let%tile item with parameters */
    decl_scope *decls;     /* the lifting point's declarations */
    int n_given;           /* unused slots are NULL */
    value **given;         /* per parameter: the argument supplied so far */
  } fn;
  code *routine; /* V_ROUTINE */
};

/* A %cd routine's code, produced after materialization. */
typedef enum { C_SEQ, C_UPDATE, C_FORWARD, C_COMMENT } code_kind;
struct code {
  code_kind kind;
  cn_update *update;
  bool merge[3];     /* C_UPDATE: operand i reads its node's merge buffer */
  cn_tensor *tensor; /* C_FORWARD: its forward code (and its parameters' init) */
  bool if_root;      /* C_FORWARD: a tensor named by an identifier, a forward root when the
                        assignment was built (seed 002 "Intricacies"): only if nothing computed
                        it before the routine's first run */
  const char *text;
  int n;
  code **items;
  cn_routine *compiled;
};

/* A %cd declaration and the tensor that enriches its label (seed 002 "Intricacies": a later
 * declaration reading this one takes the same enriching tensor). */
typedef struct cd_decl {
  cn_tensor *t, *enricher;
} cd_decl;

/* What a statement in a loop body keeps between executions. */
typedef struct item_state {
  const cn_nt_item *item;
  cn_routine *routine; /* the statement's code (without parameter init), compiled once */
  cn_tensor *tensor;   /* print, backprop, sgd: the statement's tensor */
  bool grad;           /* print: of the tensor's gradient */
  value *index;        /* for: the loop's static index */
  value *run;          /* run: the routine, elaborated once */
} item_state;

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_notation_options opts;
  cn_map globals; /* name -> value *: the top-level bindings (the latest of a name wins) */
  decl_scope top; /* declarations of top-level code */
  int depth;
  int n_routines;
  int n_bound; /* the enclosing loops' indices, outermost first (an inner binding wins) */
  struct {
    cn_symbol sym;
    int64_t value;
  } bound[CN_NT_MAX_LOOP_DEPTH];
  cn_map states;   /* const cn_nt_item * -> item_state *: the statements in loop bodies */
  cn_map cd_decls; /* cn_tensor * -> cd_decl *: the %cd declarations */
  /* Provenance: where each shape-logic operation and each tensor was introduced (indexed by
   * operation id and tensor id; a NULL src marks an unknown position), so that an error found
   * when shapes are closed points at the expression that introduced the constraint. */
  cn_nt_pos *op_at, *tensor_at;
  int cap_op_at, cap_tensor_at;
  int noted_tensors, noted_updates;
  cn_nt_pos *computed_at; /* by tensor id: the statement whose materialization allocated it */
  int cap_computed_at, n_computed;
  /* Tensors whose forward code a statement or routine already included (by tensor id): they are
   * no longer forward roots. */
  unsigned char *consumed;
  int cap_consumed;
  /* Tensors some tensor computes from (by tensor id), for the first n_scanned tensors of the
   * graph: those built later are scanned on demand, each once. */
  unsigned char *operand;
  int cap_operand, n_scanned;
} interp;

/* The positional and labeled arguments of an application, evaluated. */
typedef struct {
  int n_pos;
  value *pos[MAX_ARGS];
  cn_nt_pos pos_at[MAX_ARGS];
  int n_lab;
  const char *lab[MAX_ARGS];
  value *lab_v[MAX_ARGS];
  cn_nt_pos lab_at[MAX_ARGS];
} args;

/* ---- eval.c ---- */
value *nt_mk(interp *I, vkind kind);
value *nt_num(interp *I, double x, bool is_int);
value *nt_tensor_value(interp *I, cn_tensor *t);
const char *nt_kind_name(vkind k);
/* Re-issues the context's last message at pos (an allocation failure stays CN_ERR_NOMEM). */
value *nt_fail_here(interp *I, cn_nt_pos pos);
value *nt_fail(interp *I, cn_nt_pos pos, const char *fmt, const char *arg);
/* Materializes the graph; a failure (a shape or projection conflict found when shapes are
 * closed) is reported at the expression that introduced the failing operation or tensor, with
 * `at` (the statement that needed the shapes) named in the message. */
bool nt_materialize(interp *I, cn_nt_pos at);
/* Records that the tensors and updates built since the last call were introduced at pos. */
void nt_note(interp *I, cn_nt_pos pos);
bool nt_bind(interp *I, env **e, const char *name, value *v);
/* Binds a top-level name (replacing an earlier binding of it); false on exhaustion. */
bool nt_bind_global(interp *I, const char *name, value *v);
/* The innermost binding of name in e, else its global binding; NULL when unbound. */
value *nt_lookup(interp *I, env *e, const char *name);
cn_tensor *nt_tensor_of(interp *I, value *v, cn_nt_pos pos);
bool nt_as_int(interp *I, value *v, cn_nt_pos pos, int64_t *out);
bool nt_index_symbol(interp *I, value *v, cn_nt_pos pos, cn_symbol *out);
value *nt_eval(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x);
/* x in a tensor position of %op: a string there is an inline declaration {text}. */
value *nt_eval_operand(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x);
/* Creates (once per lifting point) the tensor declared by `node`: a parameter, or with cd a
 * non-differentiable buffer (enriched by `enricher`'s label when given). */
cn_tensor *nt_declare(interp *I, env *e, decl_scope *ds, const cn_nt_expr *node, bool cd,
                      cn_tensor *enricher);
/* Creates every declaration and config block below x for the lifting point ds. */
bool nt_predeclare(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x);
/* A label "a_b" (OCANNL's label list joined), in the arena. */
const char *nt_join_label(interp *I, const char *a, const char *b);
const char *nt_spec_text(interp *I, const char *spec);
const char *nt_spec_splice(interp *I, env *e, const char *spec, cn_nt_pos pos);

/* ---- eval_apply.c ---- */
value *nt_apply(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x);
/* Whether argument k of an application of `name` is an einsum spec, not a tensor. */
bool nt_spec_argument(const char *name, int k);
/* Whether a parameter makes its function a lifting point: ~config or (). */
bool nt_is_lifting(const cn_nt_param *p);
/* The application node's config block for lifting point ds (evaluated on first need). */
bool nt_config_block(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, value **out);

/* ---- eval_cd.c ---- */
code *nt_eval_cd(interp *I, env *e, decl_scope *ds, const cn_nt_cd *cd);
code *nt_seq_code(interp *I, int n, code **items);
/* The assignments of a routine's code. With `init` NULL, the init code of the parameters an
 * embedded expression reads comes first in the tree; otherwise it is gathered into *init. */
cn_asgn *nt_code_asgn(interp *I, const code *c, cn_asgn **init);
/* Marks t's forward code as included in a routine: t is no longer a forward root. */
void nt_consume(interp *I, const cn_tensor *t);

#endif
