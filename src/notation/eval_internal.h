/* The evaluator's internal interface, shared by its eight files:
 *   eval.c       values, positioned errors and provenance, literals, inline declarations, %op
 *                expressions (operators, einsum, fields);
 *   eval_apply.c arguments, let%op / let%cd / let%tile function application with its lifting
 *                points (syntax-extensions-cd-op "Lifting of the applications of config
 *                arguments", convolution-is-a-contraction "the unit boundary"), einsum specs;
 *   eval_builtin.c builtins: primitive ops by their ops.def name and the library of
 *                builtins.def (its single list of names);
 *   eval_cd.c    %cd assignments into standalone updates and code trees, label enrichment of
 *                %cd declarations, merge buffers, the code's assignments;
 *   eval_stmt.c  statements (let, print, printf, backprop, run, sgd, adam, shuffle, checkpoint,
 *                save_npy, set_seed, for, if) and the public entry points cn_notation_run /
 *                _check / _op / _cd, with run's --set and export of a model (cn_notation_options);
 *   eval_out.c   what statements write: printf's formatting, progress bars and lines, the
 *                message naming a static index read outside its loops, and the note for a
 *                parameter closed before any use and broadcast later;
 *   eval_plot.c  the statement plot: series of points drawn as an SVG file and ASCII charts;
 *   eval_data.c  data files: the builtins dataset, load and restore, the data sets a script
 *                made (written before routines run, reordered by shuffle), checkpoints.
 *
 * Invariants: every value, environment entry and code node lives in the context's arena; every
 * failure is a positioned message (cn_nt_fail_at), returned as NULL / false (but for a malformed or
 * unknown --set, a command-line error); recursion is bounded by the parser's height limit and
 * NT_MAX_CALL_DEPTH. */
#ifndef CN_NT_EVAL_INTERNAL_H
#define CN_NT_EVAL_INTERNAL_H

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

/* A loop's progress display during one of its executions (eval_out.c). */
typedef struct {
  const cn_nt_item *loop;
  int64_t total, batch_size;
  cn_tensor *loss; /* NULL: no loss shown */
  bool tty;        /* a bar redrawn in place; else plain lines */
  double start, last_draw;
  double first_end;  /* when the first step ended (the rate counts the steps after it) */
  int tenth;         /* plain lines: the next line ends this tenth of the steps (1 .. 10) */
  int64_t next_line; /* at this step count */
} nt_progress;

/* What a statement in a loop body keeps between executions. */
/* A data set the script made (the builtin dataset, or text_windows: then d is NULL and text
 * holds the corpus and its two tensors, eval_data.c) and whether its tensors' nodes hold an
 * epoch's order (a step's windows) yet. */
typedef struct nt_text_set nt_text_set;
typedef struct {
  cn_dataset *d;
  nt_text_set *text;
  int n; /* its tensors */
  bool begun;
} nt_dataset;

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
} nt_item_state;

/* Non-finite values the script showed without --check-nan, for the warning at the end of the run
 * (eval_out.c): how many times, and the first. */
typedef enum { NT_SHOWN_PRINTED, NT_SHOWN_LOSS, NT_SHOWN_KINDS } nt_shown_kind;
typedef struct {
  int64_t count;
  cn_nt_pos at;   /* the first: the statement that showed it */
  char what[200]; /* the first: the value and where it was ("nan in \"y\" (#2)", "inf (step 3)") */
} nt_nonfinite;

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_notation_options opts;
  nt_nonfinite shown[NT_SHOWN_KINDS];
  cn_map globals; /* name -> nt_value *: the top-level bindings (the latest of a name wins) */
  /* The prelude's bindings (src/notation/prelude.cnl, read by nt_load_prelude): the script's
   * names hide them; while a prelude function's body runs (in_prelude > 0) names resolve in the
   * prelude alone, its tensors take the position of the script's application (call_at), and so
   * do its messages. */
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
   * what it builds refuses a value chosen by such a read, eval_stmt.c's elab_eval). */
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

/* ---- eval.c ---- */
nt_value *nt_mk(nt_interp *I, nt_vkind kind);
nt_value *nt_num(nt_interp *I, double x, bool is_int);
nt_value *nt_tensor_value(nt_interp *I, cn_tensor *t);
const char *nt_kind_name(nt_vkind k);
/* Re-issues the context's last message at pos (an allocation failure stays CN_ERR_NOMEM). */
nt_value *nt_fail_here(nt_interp *I, cn_nt_pos pos);
nt_value *nt_fail(nt_interp *I, cn_nt_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);
/* Materializes the graph; a failure (a shape or projection conflict found when shapes are
 * closed) is reported at the expression that introduced the failing operation or tensor, with
 * `at` (the statement that needed the shapes) named in the message. */
bool nt_materialize(nt_interp *I, cn_nt_pos at);
/* Records that the tensors and updates built since the last call were introduced at pos. */
void nt_note(nt_interp *I, cn_nt_pos pos);
bool nt_bind(nt_interp *I, nt_env **e, const char *name, nt_value *v);
/* The text of src/notation/prelude.cnl (embedded at build time). */
extern const char cn_nt_prelude_source[];
/* Binds a top-level name (replacing an earlier binding of it); false on exhaustion. */
bool nt_bind_global(nt_interp *I, const char *name, nt_value *v);
/* The innermost binding of name in e, else its global binding; NULL when unbound. */
nt_value *nt_lookup(nt_interp *I, nt_env *e, const char *name);
/* Offers s every name e and the globals bind (for the suggestions of an unknown name). */
void nt_suggest_bound(nt_interp *I, const nt_env *e, cn_suggest *s);
/* "unbound name 'NAME'" at pos, with the closest names the script binds suggested; NULL. */
nt_value *nt_fail_unbound(nt_interp *I, const nt_env *e, cn_nt_pos pos, const char *name);
cn_tensor *nt_tensor_of(nt_interp *I, nt_value *v, cn_nt_pos pos);
bool nt_as_int(nt_interp *I, nt_value *v, cn_nt_pos pos, int64_t *out);
bool nt_index_symbol(nt_interp *I, nt_value *v, cn_nt_pos pos, cn_symbol *out);
nt_value *nt_eval(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* In host evaluation (nt_interp.host_eval), a static index an enclosing loop binds reads as its
 * value (index_read records that one did); one no loop binds is an error at pos. Other values are
 * returned as they are. */
nt_value *nt_host_index(nt_interp *I, nt_value *v, cn_nt_pos pos);
/* x in a tensor position of %op: a string there is an inline declaration {text}. */
nt_value *nt_eval_operand(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* Creates (once per lifting point) the tensor declared by `node`: a parameter, or with cd a
 * non-differentiable buffer (enriched by `enricher`'s label when given). */
cn_tensor *nt_declare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *node, bool cd,
                      cn_tensor *enricher);
/* Creates every declaration and config block below x for the lifting point ds. */
bool nt_predeclare(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x);
/* A label "a_b" (OCANNL's label list joined), in the arena. */
const char *nt_join_label(nt_interp *I, const char *a, const char *b);

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
/* The value of the labeled argument ~name, or NULL. */
nt_value *nt_labeled(const nt_args *a, const char *name);
/* nt_labeled, with *at set to where ~name was written. */
nt_value *nt_labeled_at(const nt_args *a, const char *name, cn_nt_pos *at);
/* False with a message at the first labeled argument of c not among known[0..n), naming c's
 * builtin and its known labels. */
bool nt_known_labels(nt_interp *I, const nt_call *c, int n, const char *const *known);

/* ---- eval_stmt.c ---- */
/* Compiles asgn (or reuses *cache when it holds a routine), writes the data sets not yet written,
 * binds the enclosing loops' indices the routine reads and runs it; without a cache the routine
 * is freed after the run. */
bool nt_run_asgn(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at);
/* Whether a tree holds no computation (an empty init). */
bool nt_asgn_empty(const cn_asgn *a);

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

/* ---- eval_data.c ---- */
nt_value *nt_builtin_dataset(nt_interp *I, const nt_call *c);
/* operation ~op_asn:F [~grad_asn:G ...] t1 [t2 [t3]]: an operation defined by its %cd code
 * (eval_operation.c). */
nt_value *nt_builtin_operation(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_text_windows(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_bigram_loss(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_vocab_size(nt_interp *I, const nt_call *c);
/* The corpus of a text set (eval_data.c: the set's struct is private there). */
const cn_text *nt_text_set_corpus(const nt_text_set *s);
nt_value *nt_builtin_sample(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_load(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_restore(nt_interp *I, const nt_call *c);
/* Writes epoch 0's order into every data set not written yet (before a routine runs). */
bool nt_begin_datasets(nt_interp *I, cn_nt_pos at);
/* shuffle: the data set whose tensor t is shows epoch `epoch`'s order. */
bool nt_shuffle(nt_interp *I, cn_tensor *t, int64_t epoch, cn_nt_pos at);
/* checkpoint: loss's training state saved to path with the metadata {"epoch": epoch}. */
bool nt_checkpoint(nt_interp *I, cn_tensor *loss, const char *path, int64_t epoch, cn_nt_pos at);
/* save_npy: the node's cells written to path. */
bool nt_save_npy(nt_interp *I, cn_node *node, const char *path, cn_nt_pos at);
/* The path of a file the script writes (writes: plot, checkpoint, save_npy) or may read back as
 * its own output (restore, load): a relative path under opts.out_dir when it is set, else path
 * itself; a read takes the path as given when the output directory has no such file (a file the
 * script did not write, or from before --out). A written file's directories under the output
 * directory are created (mkdir -p), and the file is noted for nt_report_written. NULL with a
 * message at `at` when a directory cannot be made. */
const char *nt_output_path(nt_interp *I, const char *path, bool writes, cn_nt_pos at);
/* The line at the end of a run naming the files the script wrote, on opts.err (NULL: stderr):
 * "wrote runs/a.svg, runs/a.safetensors"; nothing when it wrote none. */
void nt_report_written(nt_interp *I);

/* ---- eval_out.c ---- */
/* The output stream, a progress bar on the terminal line cleared first. */
FILE *nt_out(nt_interp *I);
/* Writes text (printf's, print's string): as is, or with --json as {"text": ...}. */
void nt_write_text(nt_interp *I, const char *text);
/* printf's text from its arguments' values (numbers, booleans, strings); false with a message at
 * the argument that does not fit its conversion. */
bool nt_format(nt_interp *I, const cn_nt_item *it, nt_value *const *values, cn_sbuf *sb);
/* Around a statement's materialization of the tensors from `first` on: before it, the parameters
 * among them that nothing uses and whose shapes are still open (the closing gives them the fewest
 * axes); after it, a note (a warning of the context's log, else a line on stderr) for each such
 * parameter of an earlier statement that a new pointwise operation broadcasts, once. */
void nt_guess_shapes(nt_interp *I, int first);
void nt_note_broadcasts(nt_interp *I, int first);
/* The progress display of one execution of the loop `it` over `total` steps; loss (a scalar
 * tensor computed by the body) or NULL; batch_size 0 counts steps. */
void nt_progress_start(nt_interp *I, nt_progress *pr, const cn_nt_item *it, int64_t total,
                       cn_tensor *loss, int64_t batch_size);
/* Records that the statement at `at` showed the NaN or infinity `value` (`where`: "in \"y\" (#2)",
 * "(step 3)"). */
void nt_note_nonfinite(nt_interp *I, nt_shown_kind kind, cn_nt_pos at, double value,
                       const char *where);
/* The warning at the end of a run: one line per kind of non-finite value the script showed, on
 * opts.err (NULL: stderr); nothing when it showed none. */
void nt_report_nonfinite(nt_interp *I);
/* After `done` steps (1 .. hi - lo + 1): redraws or writes a line when due. */
bool nt_progress_step(nt_interp *I, nt_progress *pr, int64_t done);
/* A run failed: when the routine reads a static index no enclosing loop binds, the message
 * says so at the statement (true: reported). */
bool nt_explain_unbound(nt_interp *I, const cn_routine *r);
/* Records a static index whose symbol now exists (for nt_explain_unbound). */
bool nt_note_index(nt_interp *I, nt_value *v);
/* Whether the static index v is bound by an enclosing loop, with its value. */
bool nt_index_value(const nt_interp *I, const nt_value *v, int64_t *value);

/* ---- eval_cd.c ---- */
nt_code *nt_eval_cd(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_cd *cd);
nt_code *nt_seq_code(nt_interp *I, int n, nt_code **items);
/* The assignments of a routine's code. With `init` NULL, the init code of the parameters an
 * embedded expression reads comes first in the tree; otherwise it is gathered into *init. */
cn_asgn *nt_code_asgn(nt_interp *I, const nt_code *c, cn_asgn **init);
/* Marks t's forward code as included in a routine: t is no longer a forward root. */
void nt_consume(nt_interp *I, const cn_tensor *t);

#endif
