/* The evaluator's core floor (see eval_base.h for the floors): the recursive evaluator, whose
 * files call each other (the one circle of the floors): %op expressions, inline declarations
 * (eval.c), arguments and function application with its lifting points, einsum specs
 * (eval_apply.c), builtins (eval_builtin.c; operation, eval_operation.c) and %cd (eval_cd.c).
 * Includes the services and the base. */
#ifndef CN_NT_EVAL_CORE_H
#define CN_NT_EVAL_CORE_H

#include "notation/eval_services.h"

/* A %cd routine's code, produced after materialization. */
typedef enum { NT_C_SEQ, NT_C_UPDATE, NT_C_FORWARD, NT_C_COMMENT } nt_code_kind;
struct nt_code {
  nt_code_kind kind;
  cn_update *update;
  bool merge[3];     /* NT_C_UPDATE: operand i reads its node's merge buffer */
  cn_tensor *tensor; /* NT_C_FORWARD: its forward code (and its parameters' init) */
  bool if_root;      /* NT_C_FORWARD: a tensor named by an identifier, a forward root when the
                        assignment was built (syntax-extensions-cd-op "Intricacies"): only if
                        nothing computed it before the routine's first run */
  const char *text;
  int n;
  nt_code **items;
  cn_routine *compiled;
};

/* A %cd declaration and the tensor that enriches its label (syntax-extensions-cd-op "Intricacies":
 * a later declaration reading this one takes the same enriching tensor). */
typedef struct nt_cd_decl {
  cn_tensor *t, *enricher;
} nt_cd_decl;

/* ---- eval.c ---- */
nt_value *nt_eval(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* x in a tensor position of %op: a string there is an inline declaration {text}. */
nt_value *nt_eval_operand(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* Creates (once per lifting point) the tensor declared by `node`: a parameter, or with cd a
 * non-differentiable buffer (enriched by `enricher`'s label when given). */
cn_tensor *nt_declare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *node, bool cd,
                      cn_tensor *enricher);
/* Creates every declaration and config block below x for the lifting point ds. */
bool nt_predeclare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);

/* ---- eval_apply.c ---- */
/* An einsum spec with "…" spelled "..." (the same length: positions stay those of the text). */
const char *nt_spec_text(nt_interp *I, const char *spec);
/* nt_spec_text, with the strides and dilations (`stride*o`) the script binds to integers
 * replaced by their values, and the graph's use_padding set from e (nt_use_padding); NULL after a
 * message at pos. */
const char *nt_spec_splice(nt_interp *I, nt_env *e, const char *spec, cn_nt_pos pos);
/* The graph's use_padding from the script's binding of use_padding in e (a boolean; unbound:
 * unset, a kernel term without a padding marker is refused); false after a message at pos. */
bool nt_use_padding(nt_interp *I, nt_env *e, cn_nt_pos pos);
nt_value *nt_apply(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* Tile builds a statement from its tensors' dims: settles the shapes of the graph when one of
 * t[0..n) is still open (false: a positioned message). */
bool nt_settle_shapes(nt_interp *I, cn_tensor *const *t, int n, cn_nt_pos at);
/* Whether a parameter makes its function a lifting point: ~config or (). */
bool nt_is_lifting(const cn_nt_param *p);
/* The application node's config block for lifting point ds (evaluated on first need). */
bool nt_config_block(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x,
                     nt_value **out);

/* ---- eval_builtin.c ---- */
/* The builtin `name` (not bound by the script in e) applied to a: a primitive op or an entry of
 * builtins.def; an unknown name is a positioned error at `at` suggesting the closest builtins
 * and names e binds. */
nt_value *nt_builtin(nt_interp *I, const nt_env *e, const char *name, const nt_args *a,
                     cn_nt_pos at);
/* Whether positional argument k of an application of `name` is an einsum spec, not a tensor. */
bool nt_spec_argument(const char *name, int k);

/* ---- eval_operation.c ---- */
/* operation ~op_asn:F [~grad_asn:G ...] t1 [t2 [t3]]: an operation defined by its %cd code. */
nt_value *nt_builtin_operation(nt_interp *I, const nt_call *c);

/* ---- eval_cd.c ---- */
nt_code *nt_eval_cd(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_cd *cd);
nt_code *nt_seq_code(nt_interp *I, int n, nt_code **items);
/* The assignments of a routine's code. With `init` NULL, the init code of the parameters an
 * embedded expression reads comes first in the tree; otherwise it is gathered into *init. */
cn_asgn *nt_code_asgn(nt_interp *I, const nt_code *c, cn_asgn **init);
/* Marks t's forward code as included in a routine: t is no longer a forward root. */
void nt_consume(nt_interp *I, const cn_tensor *t);

#endif
