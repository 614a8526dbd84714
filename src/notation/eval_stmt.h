/* The evaluator's statement floor (see eval_base.h for the floors): a statement's tensors and
 * host arguments, elaborated once and computed at each execution (eval_elab.c), the statement
 * plot (eval_plot.c), the statements and the entry points (eval_stmt.c). Includes the core, the
 * services and the base. Inside the floor the files form a chain: eval_elab.c calls no file of
 * the floor, eval_plot.c calls eval_elab.c, eval_stmt.c calls both. */
#ifndef CN_NT_EVAL_STMT_H
#define CN_NT_EVAL_STMT_H

#include "notation/eval_core.h"

/* What a statement in a loop body keeps between executions. */
typedef struct nt_item_state {
  const cn_nt_item *item;
  cn_routine *routine; /* the statement's code (without parameter init), compiled once */
  cn_asgn *init;       /* backprop, sgd, adam, run compiled ahead (compile_ahead): the
                          parameter init still to run, before the first run, as init_name */
  const char *init_name;
  cn_tensor *tensor;           /* print, backprop, sgd, adam, shuffle, checkpoint, save_npy: the
                                  statement's tensor; for: progress's loss */
  bool grad;                   /* print: of the tensor's gradient */
  nt_value *index;             /* for: the loop's static index */
  bool looped;                 /* for: executed once (its first iteration's memory is kept) */
  nt_value *run;               /* run: the routine, elaborated once */
  const char *text;            /* print: the string printed (the statement printed a string) */
  bool no_code;                /* print, printf, save_npy: the tensor has no forward code */
  bool print_full;             /* print: ~full:true */
  int print_precision;         /* print: ~precision, -1 when not given */
  struct nt_item_state **args; /* printf: per argument, the state of a tensor argument (NULL
                                  for a host value, evaluated again at each execution) */
  struct nt_plot *plot;        /* plot: its series */
  int dp_devices;              /* for ~devices: the devices per process (evaluated once), or 0 */
  int dp_at;                   /* for ~devices: the body's backprop (its optimizer follows) */
  cn_dp *dp;                   /* for ~devices on more than one slot: the driver, made once */
} nt_item_state;

/* ---- eval_elab.c ---- */
/* x evaluated for a statement that keeps what it builds (tensors, options, its routine) for its
 * later executions: a value chosen by reading an enclosing loop's index is an error. */
nt_value *nt_elab_eval(nt_interp *I, nt_env *scope, const cn_nt_expr *x);
/* The tensor of v (x's value) becomes the statement's, with the graph materialized. */
bool nt_set_statement_tensor(nt_interp *I, nt_value *v, const cn_nt_expr *x, nt_item_state *st);
/* The tensor a statement works on (built once per statement state), with the graph
 * materialized. */
bool nt_statement_tensor(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state *st);
/* Runs a statement's parameter init code and its main code (false: a message at `at`). */
bool nt_run_statement(nt_interp *I, nt_item_state *st, cn_asgn *init, cn_asgn *main, cn_nt_pos at);
/* Runs the forward code of the statement's tensor (its parameters initialized first, once). */
bool nt_compute_tensor(nt_interp *I, nt_item_state *st, cn_nt_pos at);
/* x in host evaluation: a static index an enclosing loop binds reads as its value in host
 * arithmetic. A tensor built from such a value would hold it for good: an error. */
nt_value *nt_host_eval(nt_interp *I, nt_env *scope, const cn_nt_expr *x);
/* nt_host_eval of x, a value of `kind`: another kind is an error at x, "WHAT, found KIND". */
nt_value *nt_host_of(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_vkind kind,
                     const char *what);
/* A statement argument that is a host value (evaluated again at each execution) or a one-cell
 * tensor computed as print computes it (its state kept in *slot, built on the `first`
 * execution); a number for a tensor. `what` starts the message on a tensor of more cells
 * ("printf prints"). */
nt_value *nt_cell_value(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state **slot,
                        bool first, const char *what);
/* x's tensor (built once into st) computed as print computes it: its node, or NULL after a
 * message. */
cn_node *nt_computed_node(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state *st);

/* ---- eval_plot.c ---- */
/* plot "file" ~x:e ("name", e) ... [~ascii:b ~matrix:t]: one point appended to each series, the
 * SVG file rewritten, the ASCII charts written when ~ascii is true. */
bool nt_plot_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st);
/* Frees the points of every plot (at the end of a run). */
void nt_plots_free(nt_interp *I);

/* ---- eval_stmt.c ---- */
/* The text of src/notation/prelude.cnl (embedded at build time). */
extern const char cn_nt_prelude_source[];

#endif
