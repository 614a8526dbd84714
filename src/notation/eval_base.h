/* The evaluator's floors (docs/ARCHITECTURE.md, "The evaluator's floors"): each eval file
 * includes its floor's header, which includes the floor below, and no floor calls a higher one;
 * only the recursive core is a circle. tests/test_layers.c holds the table of floors and fails
 * on an include above a file's floor.
 *
 *   eval_base.h     values, positioned errors and provenance, materialization, environments,
 *                   literals, labeled arguments, static indices, the output stream, running a
 *                   routine (eval_base.c);
 *   eval_services.h what statements write (eval_out.c) and data files (eval_data.c);
 *   eval_core.h     the recursive evaluator: %op (eval.c), application (eval_apply.c), builtins
 *                   (eval_builtin.c, eval_operation.c), %cd (eval_cd.c);
 *   eval_stmt.h     statements: their tensors and host arguments (eval_elab.c), plot
 *                   (eval_plot.c), the statements and the entry points (eval_stmt.c).
 *
 * This header, the base: the interpreter's state and its values, and what every floor above
 * needs. It evaluates nothing and knows no service: a data set the script made is written before
 * a run by the writer its builtin registered (nt_dataset.write, eval_data.c).
 *
 * Invariants: every value, environment entry and code node lives in the context's arena; every
 * failure is a positioned message (cn_nt_fail_at), returned as NULL / false (but for a malformed or
 * unknown --set, a command-line error); recursion is bounded by the parser's height limit and
 * NT_MAX_CALL_DEPTH. */
#ifndef CN_NT_EVAL_BASE_H
#define CN_NT_EVAL_BASE_H

#include "notation/eval.h"
#include "tensor/tensor.h"

#include <stdio.h>

#define NT_MAX_CALL_DEPTH 64
#define NT_MAX_ARGS       8

typedef enum {
  NT_V_UNIT,
  NT_V_NUM,
  NT_V_BOOL,
  NT_V_STR,
  NT_V_TENSOR,
  NT_V_LIST,
  NT_V_RECORD,
  NT_V_FUNC,
  NT_V_ROUTINE,
  NT_V_INDEX
} nt_vkind;

typedef struct nt_value nt_value;
typedef struct nt_env nt_env;
typedef struct nt_decl_scope nt_decl_scope;
typedef struct nt_code nt_code;

struct nt_env {
  const char *name;
  nt_value *v;
  nt_env *next;
};

/* The declarations and config blocks of one lifting point. A declaration is keyed by the syntax
 * node that declared it; a config application (`f ~config:{...}`, syntax-extensions-cd-op's
 * config_block__i), evaluated once per lifting point, by its application node. Maps, so that a
 * script with many declarations does not search them all at each one. */
struct nt_decl_scope {
  cn_map decls;           /* const cn_nt_expr * -> cn_tensor * */
  cn_map blocks;          /* const cn_nt_expr * -> nt_value * (the partial application) */
  const char *more_label; /* ~config's label: appended to declared labels (name_label) */
};

struct nt_value {
  nt_vkind kind;
  double num;
  bool is_int;
  bool b;
  const char *str;
  cn_tensor *t;
  bool grad;  /* NT_V_TENSOR: the gradient of t */
  bool merge; /* NT_V_TENSOR: the merge buffer of the (value or gradient) node */
  int n;
  nt_value **items;
  const char **names;        /* NT_V_RECORD */
  const cn_nt_expr *literal; /* NT_V_LIST written as an array literal: its tensor on demand */
  bool tuple;                /* NT_V_LIST written or built as a tuple (let (a, b) = ... takes it) */
  struct {
    int64_t range;    /* values 0 .. range - 1 */
    const char *name; /* the let or loop that names it; the symbol takes the name */
    bool created;     /* sym exists: created on first use, so that it can take the name */
    cn_symbol sym;
    cn_nt_pos decl_at;      /* where the script declared it (static_index, its let, a loop) */
    const cn_nt_item *loop; /* the first loop that bound it, or NULL */
  } index;                  /* NT_V_INDEX */
  struct {
    const cn_nt_item *def; /* a let%op, let%cd or let%tile item with parameters */
    nt_decl_scope *decls;  /* the lifting point's declarations */
    int n_given;           /* unused slots are NULL */
    nt_value **given;      /* per parameter: the argument supplied so far */
  } fn;
  nt_code *routine; /* NT_V_ROUTINE */
};

/* A data set the script made (the builtin dataset, or text_windows: then d is NULL and text
 * holds the corpus and its two tensors, eval_data.c) and whether its tensors' nodes hold an
 * epoch's order (a step's windows) yet. write, set by the builtin that made it, writes epoch
 * (step) e's order into its nodes: so the base writes the sets before a run (nt_begin_datasets)
 * without knowing how. */
typedef struct nt_text_set nt_text_set;
typedef struct nt_dataset nt_dataset;
struct nt_interp;
struct nt_dataset {
  cn_dataset *d;
  nt_text_set *text;
  int n; /* its tensors */
  bool begun;
  cn_status (*write)(struct nt_interp *I, const nt_dataset *s, uint64_t e);
};

/* Non-finite values the script showed without --check-nan, for the warning at the end of the run
 * (eval_out.c): how many times, and the first. */
typedef enum { NT_SHOWN_PRINTED, NT_SHOWN_LOSS, NT_SHOWN_KINDS } nt_shown_kind;
typedef struct {
  int64_t count;
  cn_nt_pos at;   /* the first: the statement that showed it */
  char what[200]; /* the first: the value and where it was ("nan in \"y\" (#2)", "inf (step 3)") */
} nt_nonfinite;

typedef struct nt_interp {
  cn_ctx *ctx;
  cn_graph *g;
  cn_notation_options opts;
  nt_nonfinite shown[NT_SHOWN_KINDS];
  cn_map globals; /* name -> nt_value *: the top-level bindings (the latest of a name wins) */
  /* The prelude's bindings (src/notation/prelude.cnl, read by eval_stmt.c's load_prelude): the
   * script's names hide them; while a prelude function's body runs (in_prelude > 0) names resolve
   * in the prelude alone, its tensors take the position of the script's application (call_at), and
   * so do its messages. */
  cn_map prelude;
  const cn_nt_source *prelude_src;
  int in_prelude;
  cn_nt_pos call_at;
  nt_decl_scope top; /* declarations of top-level code */
  int depth;
  int n_routines;
  int n_bound; /* the enclosing loops' indices, outermost first (an inner binding wins) */
  struct {
    cn_symbol sym;
    int64_t value, trips; /* trips: the values the loop takes */
  } bound[CN_NT_MAX_LOOP_DEPTH];
  cn_map states; /* const cn_nt_item * -> nt_item_state *: the statements in loop bodies */
  int n_states;  /* states created so far: an iteration that creates none elaborated nothing,
                    so what it allocated is temporary (run_loop gives it back) */
  const cn_nt_item *item; /* the statement being executed (for messages) */
  /* In a printf argument or an if condition: a static index that an enclosing loop binds reads
   * as its value in host arithmetic (index_read records that one did: a statement that keeps
   * what it builds refuses a value chosen by such a read, eval_elab.c's nt_elab_eval). */
  bool host_eval, index_read;
  nt_value **indices; /* the static indices whose symbol exists, for messages */
  int n_indices, cap_indices;
  bool bar_shown;  /* a progress bar is drawn on the current terminal line */
  cn_map cd_decls; /* cn_tensor * -> nt_cd_decl *: the %cd declarations */
  /* Provenance: where each shape-logic operation and each tensor was introduced (indexed by
   * operation id and tensor id; a NULL src marks an unknown position), so that an error found
   * when shapes are closed points at the expression that introduced the constraint. */
  cn_nt_pos *op_at, *tensor_at;
  int cap_op_at, cap_tensor_at;
  int noted_tensors, noted_updates;
  cn_nt_pos *computed_at; /* by tensor id: the statement whose materialization allocated it */
  int cap_computed_at, n_computed;
  /* Parameters (by tensor id) that a statement's materialization closed to the fewest axes
   * before anything used them, until a later operation broadcasts one (eval_out.c) */
  unsigned char *guessed;
  int cap_guessed;
  /* Tensors whose forward code a statement or routine already included (by tensor id): they are
   * no longer forward roots. */
  unsigned char *consumed;
  int cap_consumed;
  /* Tensors some tensor computes from (by tensor id), for the first n_scanned tensors of the
   * graph: those built later are scanned on demand, each once. */
  unsigned char *operand;
  int cap_operand, n_scanned;
  nt_dataset *datasets; /* the data sets the script made, in order */
  int n_datasets, cap_datasets;
  struct nt_plot *plots; /* the plot statements executed, latest first (their points malloc'd) */
  /* The files the script wrote (plot, checkpoint, save_npy), each once, in the order first
   * written: the line at the end of the run (nt_report_written). Arena strings. */
  const char **written;
  int n_written, cap_written;
} nt_interp;

/* The positional and labeled arguments of an application, evaluated. */
typedef struct {
  int n_pos;
  nt_value *pos[NT_MAX_ARGS];
  cn_nt_pos pos_at[NT_MAX_ARGS];
  int n_lab;
  const char *lab[NT_MAX_ARGS];
  nt_value *lab_v[NT_MAX_ARGS];
  cn_nt_pos lab_at[NT_MAX_ARGS];
} nt_args;

#define NT_MAX_OPERANDS 4

/* One application of a builtin, its arguments evaluated. */
typedef struct {
  const char *name;
  const nt_args *a;
  cn_nt_pos at;
  const char *spec; /* the einsum spec (a builtin with specs), else NULL */
  int nt;           /* operands converted to tensors */
  cn_tensor *t[NT_MAX_OPERANDS];
  int64_t stride[2], dilation[2]; /* Tile builtins: ~stride, ~dilation (default 1) */
} nt_call;

/* ---- eval_base.c: values and errors ---- */
nt_value *nt_mk(nt_interp *I, nt_vkind kind);
nt_value *nt_num(nt_interp *I, double x, bool is_int);
nt_value *nt_bool(nt_interp *I, bool b);
nt_value *nt_tensor_value(nt_interp *I, cn_tensor *t);
const char *nt_kind_name(nt_vkind k);
/* Re-issues the context's last message at pos (an allocation failure stays CN_ERR_NOMEM). */
nt_value *nt_fail_here(nt_interp *I, cn_nt_pos pos);
nt_value *nt_fail(nt_interp *I, cn_nt_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);
/* A label "a_b" (OCANNL's label list joined), in the arena. */
const char *nt_join_label(nt_interp *I, const char *a, const char *b);

/* ---- eval_base.c: provenance and materialization ---- */
/* Materializes the graph; a failure (a shape or projection conflict found when shapes are
 * closed) is reported at the expression that introduced the failing operation or tensor, with
 * `at` (the statement that needed the shapes) named in the message. Around it, the note for a
 * parameter closed before any use and broadcast later (nt_guess_shapes, nt_note_broadcasts). */
bool nt_materialize(nt_interp *I, cn_nt_pos at);
/* Records that the tensors and updates built since the last call were introduced at pos. */
void nt_note(nt_interp *I, cn_nt_pos pos);
/* Around a statement's materialization of the tensors from `first` on: before it, the parameters
 * among them that nothing uses and whose shapes are still open (the closing gives them the fewest
 * axes); after it, a note (a warning of the context's log, else a line on stderr) for each such
 * parameter of an earlier statement that a new pointwise operation broadcasts, once. */
void nt_guess_shapes(nt_interp *I, int first);
void nt_note_broadcasts(nt_interp *I, int first);

/* ---- eval_base.c: environments ---- */
bool nt_bind(nt_interp *I, nt_env **e, const char *name, nt_value *v);
/* Binds a top-level name (replacing an earlier binding of it); false on exhaustion. */
bool nt_bind_global(nt_interp *I, const char *name, nt_value *v);
/* The innermost binding of name in e, else its global binding; NULL when unbound. */
nt_value *nt_lookup(nt_interp *I, nt_env *e, const char *name);
/* Offers s every name e and the globals bind (for the suggestions of an unknown name). */
void nt_suggest_bound(nt_interp *I, const nt_env *e, cn_suggest *s);
/* "unbound name 'NAME'" at pos, with the closest names the script binds suggested; NULL. */
nt_value *nt_fail_unbound(nt_interp *I, const nt_env *e, cn_nt_pos pos, const char *name);

/* ---- eval_base.c: conversions and literals ---- */
cn_tensor *nt_tensor_of(nt_interp *I, nt_value *v, cn_nt_pos pos);
bool nt_as_int(nt_interp *I, nt_value *v, cn_nt_pos pos, int64_t *out);
/* Whether e is an array literal: numbers (possibly negated) nested in lists, tuples and arrays,
 * with axis labels. */
bool nt_is_literal(const cn_nt_expr *e);
/* The data tensor of the array literal e (label NULL: "literal"); with rows_out, also the
 * literal's rows (arena copies), for a parameter that takes its shape from its initial value. */
cn_tensor *nt_literal_tensor(nt_interp *I, const cn_nt_expr *e, const char *label,
                             cn_dims *rows_out);

/* ---- eval_base.c: static indices ---- */
bool nt_index_symbol(nt_interp *I, nt_value *v, cn_nt_pos pos, cn_symbol *out);
/* In host evaluation (nt_interp.host_eval), a static index an enclosing loop binds reads as its
 * value (index_read records that one did); one no loop binds is an error at pos. Other values are
 * returned as they are. */
nt_value *nt_host_index(nt_interp *I, nt_value *v, cn_nt_pos pos);
/* A run failed: when the routine reads a static index no enclosing loop binds, the message
 * says so at the statement (true: reported). */
bool nt_explain_unbound(nt_interp *I, const cn_routine *r);
/* Records a static index whose symbol now exists (for nt_explain_unbound). */
bool nt_note_index(nt_interp *I, nt_value *v);
/* Whether the static index v is bound by an enclosing loop, with its value. */
bool nt_index_value(const nt_interp *I, const nt_value *v, int64_t *value);

/* ---- eval_base.c: labeled arguments ---- */
/* The value of the labeled argument ~name, or NULL. */
nt_value *nt_labeled(const nt_args *a, const char *name);
/* nt_labeled, with *at set to where ~name was written. */
nt_value *nt_labeled_at(const nt_args *a, const char *name, cn_nt_pos *at);
/* False with a message at the first labeled argument of c not among known[0..n), naming c's
 * builtin and its known labels. */
bool nt_known_labels(nt_interp *I, const nt_call *c, int n, const char *const *known);

/* ---- eval_base.c: output and runs ---- */
/* The output stream, a progress bar on the terminal line cleared first. */
FILE *nt_out(nt_interp *I);
/* The stream of notes and warnings (opts.err, NULL: stderr), the output flushed first. */
FILE *nt_err(nt_interp *I);
/* Compiles asgn (or reuses *cache when it holds a routine; a new one is named `reserved`, or
 * cnl_N when NULL), prints what --emit asks for, writes the data sets not yet written, binds
 * the enclosing loops' indices the routine reads and runs it; without a cache the routine is
 * freed after the run. */
bool nt_run_asgn_named(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at,
                       const char *reserved);
bool nt_run_asgn(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at);
/* Compiles asgn into a routine called `name` (--emit=c: with the backend's code kept; else
 * tiered, `once` for a routine run once) and prints what --emit asks for; NULL with a message at
 * `at`. */
cn_routine *nt_compile_emit(nt_interp *I, const cn_asgn *asgn, const char *name, bool once,
                            cn_nt_pos at);
/* Whether a tree holds no computation (an empty init). */
bool nt_asgn_empty(const cn_asgn *a);
/* Writes epoch (step) e's order into the data set s (false after a message at at). */
bool nt_begin_set(nt_interp *I, nt_dataset *s, uint64_t e, cn_nt_pos at);
/* Writes epoch 0's order into every data set not written yet (before a routine runs). */
bool nt_begin_datasets(nt_interp *I, cn_nt_pos at);

#endif
