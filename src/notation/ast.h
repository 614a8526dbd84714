/* The syntax tree of the cannl notation: `.cnl` scripts, %op expressions and %cd assignments
 * (issue 6; syntax-extensions-cd-op "The syntax for %op", "The syntax for %cd" and its further
 * features; convolution-is-a-contraction "Surface: literals, inline declarations, and the unit
 * boundary").
 *
 * The tree is purely syntactic: names are not resolved and nothing is checked against shapes or ops
 * beyond what the grammar fixes (a %cd right-hand side is classified by the primitive-op table, the
 * assignment operator by syntax-extensions-cd-op's table). The evaluator walks it; every node has a
 * kind and a tagged union, lists are arrays with counts, and every node carries its position (file,
 * 1-based line and byte column of its first token) so that later errors can point at it with
 * cn_nt_fail_at (notation.h).
 *
 * Invariants (guaranteed by the parser): all memory is in the context's arena and lives until
 * cn_ctx_destroy; strings are NUL-terminated and contain no NUL; a node's `height` (1 for a leaf)
 * never exceeds CN_NT_MAX_HEIGHT and `for` (`if`) items nest at most CN_NT_MAX_LOOP_DEPTH
 * (CN_NT_MAX_IF_DEPTH) deep, so recursive walks are bounded. A left-associative chain (`a + b - c +
 * ...`, the left spine of BINOP nodes, see cn_nt_binop_spine) counts as one level: walks iterate
 * along it, so a flat sum of any length parses and evaluates. Pointers documented as "never NULL"
 * are never NULL. */
#ifndef CN_NT_AST_H
#define CN_NT_AST_H

#include "core/core.h"

/* The largest height of a parsed tree (expressions and %cd statements together): deeper input
 * is rejected with "too deeply nested". */
#define CN_NT_MAX_HEIGHT 200

/* The deepest nesting of `for` loops in a script: deeper loops are rejected by the parser, so the
 * evaluator keeps the bound static indices in a fixed array. */
#define CN_NT_MAX_LOOP_DEPTH 32

/* The deepest nesting of `if` statements in a script (their bodies are walked recursively). */
#define CN_NT_MAX_IF_DEPTH 32

/* The text a tree was parsed from (a copy in the arena), for messages that quote the line. */
typedef struct {
  const char *file;
  const char *text;
} cn_nt_source;

typedef struct {
  const cn_nt_source *src; /* never NULL in a parsed tree */
  int line, col;           /* 1-based; col counts bytes */
} cn_nt_pos;

/* Precedence classes of infix operators, by OCaml's rules for an operator's first characters,
 * lowest first. Right-associative: OR, AND, CONCAT, POW; the others are left-associative. */
typedef enum {
  CN_NT_PREC_NONE = 0, /* not an infix operator */
  CN_NT_PREC_OR,       /* || */
  CN_NT_PREC_AND,      /* && & */
  CN_NT_PREC_CMP,      /* =… <… >… |… &… $… != (not the assignment operators) */
  CN_NT_PREC_CONCAT,   /* @… ^… */
  CN_NT_PREC_ADD,      /* +… -… */
  CN_NT_PREC_MUL,      /* *… /… %… */
  CN_NT_PREC_POW       /* **… */
} cn_nt_prec;

/* ---- %op expressions ------------------------------------------------------------------------ */

typedef enum {
  CN_NT_NUMBER, /* 2, 2.5, 'q' 2.0 (a number with a dimension label), -4 (a folded minus) */
  CN_NT_STRING, /* "text": an einsum spec, a ~logic argument, a comment part, or, in a tensor
                   position, an inline declaration like {text} (syntax-extensions-cd-op "Inline
                   declarations": the evaluator decides by position) */
  CN_NT_BOOL,   /* true, false */
  CN_NT_UNIT,   /* () */
  CN_NT_IDENT,  /* a name; never "_" */
  CN_NT_FIELD,  /* e.value, e.grad, e.merge, and record fields such as config.hid_dim */
  CN_NT_PREFIX, /* !.x (number constant), !..n (integer constant), any !… operator; -x, -.x */
  CN_NT_BINOP,  /* a OP b for any OCaml infix operator token, text kept */
  CN_NT_EINSUM, /* a +* "spec" b, a +++ "spec" b, a @^+ "spec" b, a ++ "spec", a @^^ "spec" */
  CN_NT_APPLY,  /* f a ~l:b ~p (): curried application with positional, labeled and punned
                   arguments */
  CN_NT_LET,    /* let x = v in body */
  CN_NT_LIST,   /* [a; b]: an output axis of a literal, or a plain list (dims, labels) */
  CN_NT_TUPLE,  /* (a, b): an input axis of a literal, or the operands of an uncurried call */
  CN_NT_ARRAY,  /* [|a; b|]: a batch axis of a literal */
  CN_NT_ANNOT,  /* (e : label): names the basis of a literal's outer axis (([2.0] : rgb)) */
  CN_NT_DECL,   /* inline declaration: {w}, {w = e}, {b; o = [16]}, "w" [-4], "b" hid_dim */
  CN_NT_RECORD, /* {label = ["L3"]; hid_dim = 8}: a config record (the value of ~config:) */
  CN_NT_IF      /* if c then a else b: one branch, chosen by a host condition */
} cn_nt_expr_kind;

typedef enum {
  CN_NT_EINSUM_BINARY,   /* +* (also syntax-extensions-cd-op's spelling *+): multiply, add-reduce */
  CN_NT_EINSUM_OUTER,    /* +++: add, add-reduce (outer_sum) */
  CN_NT_EINSUM_TROPICAL, /* @^+: add, max-reduce */
  CN_NT_EINSUM_UNARY,    /* ++: add-reduce (einsum1); no right operand */
  CN_NT_EINSUM_MAX_UNARY /* @^^: max-reduce (einmax1); no right operand */
} cn_nt_einsum_kind;

typedef struct cn_nt_expr cn_nt_expr;

/* An application argument or an assignment's labeled argument. */
typedef struct {
  const char *label; /* NULL: positional; else ~label */
  cn_nt_pos pos;     /* of the argument (its label when labeled) */
  cn_nt_expr *value; /* never NULL when positional; NULL for a punned ~label */
} cn_nt_arg;

/* A field of a declaration or a record. */
typedef struct {
  const char *name;
  cn_nt_pos pos;
  cn_nt_expr *value; /* NULL only for a punned record field ({...; hid_dim}) */
} cn_nt_field;

struct cn_nt_expr {
  cn_nt_expr_kind kind;
  cn_nt_pos pos; /* the first token of the expression */
  int height;    /* 1 + the largest height of the children (a BINOP's left operand that is a
                    BINOP counts one less: the spine is walked iteratively); at most
                    CN_NT_MAX_HEIGHT */
  union {
    struct {
      bool is_int;       /* written without '.' or exponent */
      int64_t ival;      /* the value when is_int */
      double value;      /* the value (also set when is_int) */
      const char *label; /* the dimension label of 'q' 2.0, or NULL */
    } number;
    struct {
      const char *text; /* decoded (escapes resolved) */
    } string;
    bool boolean;
    struct {
      const char *name;
    } ident;
    struct {
      cn_nt_expr *subject; /* never NULL */
      const char *name;    /* "value", "grad", "merge", or a record field name */
      cn_nt_pos name_pos;
    } field;
    struct {
      const char *op;      /* "!.", "!..", any other "!…"; "-" or "-." (negation) */
      cn_nt_expr *operand; /* never NULL; never a plain number under "-"/"-." (folded) */
    } prefix;
    struct {
      const char *op; /* the operator token as written: "+", "*.", "**.", "@|", "-?/", ... */
      cn_nt_prec prec;
      cn_nt_pos op_pos;
      cn_nt_expr *lhs, *rhs; /* never NULL */
    } binop;
    struct {
      cn_nt_einsum_kind kind;
      const char *op; /* as written: "+*", "*+", "+++", "@^+", "++", "@^^" */
      cn_nt_pos op_pos;
      const char *spec; /* the spec string, decoded; parse it with cn_einsum_parse */
      cn_nt_pos spec_pos;
      cn_nt_expr *lhs; /* never NULL */
      cn_nt_expr *rhs; /* NULL for the unary kinds */
    } einsum;
    struct {
      cn_nt_expr *fn; /* never NULL; never a literal */
      int n_args;     /* >= 1 */
      cn_nt_arg *args;
    } apply;
    struct {
      const char *name; /* "_" for a wildcard binding */
      cn_nt_pos name_pos;
      cn_nt_expr *value, *body; /* never NULL */
    } let;
    struct {
      int n; /* LIST and ARRAY: >= 0; TUPLE: >= 2 */
      cn_nt_expr **items;
    } items; /* LIST, TUPLE, ARRAY */
    struct {
      cn_nt_expr *expr; /* never NULL */
      const char *label;
    } annot;
    struct {
      const char *name; /* the declared tensor's name (bound for the rest of the scope) */
      cn_nt_expr *init; /* {w = init} or "w" [list]: the initial value; NULL: random init */
      int n_fields;     /* further fields: {b; o = [16]}; "b" d is one field "o" = d */
      cn_nt_field *fields;
      bool string_form; /* written "name" ARG: ARG is init when a list, else fields[0] ("o") */
    } decl;
    struct {
      int n_fields; /* >= 1 */
      cn_nt_field *fields;
    } record;
    struct {
      cn_nt_expr *cond, *then_, *else_; /* never NULL */
    } if_;
  } u;
};

/* ---- %cd statements ------------------------------------------------------------------------- */

typedef enum {
  CN_NT_CD_ASSIGN, /* LHS ASGN-OP RHS [~logic:e] [~projections] */
  CN_NT_CD_SEQ,    /* a; b; c (also "()" : the empty sequence) */
  CN_NT_CD_IF,     /* if cond then a [else b]: cond is a host value */
  CN_NT_CD_COMMENT /* ~~("text" t ...; body): a block comment over body */
} cn_nt_cd_kind;

/* How the right-hand side of an assignment was written. */
typedef enum {
  CN_NT_RHS_PLAIN,    /* any other expression e: the primitive is id (Accum_unop Identity on e) */
  CN_NT_RHS_INFIX,    /* a * b: a binary primitive by its infix operator (ops.def) */
  CN_NT_RHS_CURRIED,  /* relu x, add a b, where c a b: a primitive by name, one arg per operand */
  CN_NT_RHS_UNCURRIED /* add (a, b): a primitive of arity >= 2 applied to one tuple */
} cn_nt_rhs_form;

typedef struct cn_nt_cd cn_nt_cd;

struct cn_nt_cd {
  cn_nt_cd_kind kind;
  cn_nt_pos pos; /* the first token */
  int height;    /* counts the expressions below too; at most CN_NT_MAX_HEIGHT */
  union {
    struct {
      cn_nt_expr *lhs;     /* never NULL: a name, a field access, "name" or {name} (the
                              evaluator checks) */
      const char *asgn_op; /* as written: "=:+" */
      cn_nt_pos op_pos;
      cn_op accum; /* the accumulation: CN_OP_ARG2 for "=:", CN_OP_ADD for "=+"/"=:+" */
      bool clear;  /* the ':' form: initialize the LHS with the neutral element first */
      cn_nt_rhs_form form;
      cn_op op;            /* the primitive applied to the operands (CN_OP_ID for PLAIN) */
      const char *op_text; /* the primitive as written ("*", "relu"); NULL for PLAIN */
      int n_rhs;           /* the op's arity: 1..3 */
      cn_nt_expr *rhs[3];  /* the operands, never NULL below n_rhs */
      int n_args;          /* ~logic:e and ~projections (punned or with a value) */
      cn_nt_arg *args;
    } assign;
    struct {
      int n; /* 0 only for "()"; a parsed sequence otherwise has >= 2 items */
      cn_nt_cd **items;
    } seq;
    struct {
      cn_nt_expr *cond;      /* never NULL */
      cn_nt_cd *then_branch; /* never NULL */
      cn_nt_cd *else_branch; /* NULL when there is no else */
    } if_;
    struct {
      int n_parts; /* >= 1: strings and tensor expressions, in order */
      cn_nt_expr **parts;
      cn_nt_cd *body; /* never NULL */
    } comment;
  } u;
};

/* ---- Scripts -------------------------------------------------------------------------------- */

typedef enum {
  CN_NT_LET_PLAIN, /* let x = e: binds a tensor (or a host value) */
  CN_NT_LET_OP,    /* let%op f PARAMS = e: a function (or, without params, a named tensor) */
  CN_NT_LET_CD,    /* let%cd r PARAMS = cd: a routine */
  CN_NT_LET_TILE   /* let%tile f PARAMS = BODY: a Tile function (tile-edsl), BODY in its own
                      language (src/tile), kept as text */
} cn_nt_let_kind;

typedef enum {
  CN_NT_PARAM_PLAIN,    /* x */
  CN_NT_PARAM_LABELED,  /* ~x (~config is the seed's config parameter) */
  CN_NT_PARAM_OPTIONAL, /* ?x or ?(x = default) */
  CN_NT_PARAM_UNIT      /* (): the unit boundary of convolution-is-a-contraction */
} cn_nt_param_kind;

typedef struct {
  cn_nt_param_kind kind;
  const char *name; /* NULL for UNIT */
  cn_nt_pos pos;
  cn_nt_expr *default_value; /* ?(x = default) only, else NULL */
} cn_nt_param;

typedef enum {
  CN_NT_ITEM_LET,
  CN_NT_ITEM_PRINT,      /* print e [~full:b ~precision:n] */
  CN_NT_ITEM_BACKPROP,   /* backprop e */
  CN_NT_ITEM_RUN,        /* run r, or run r args for a routine with parameters */
  CN_NT_ITEM_SGD,        /* sgd e ~learning_rate:x [~momentum:x] [~weight_decay:x] [~nesterov:b]
                            [~clip:x] */
  CN_NT_ITEM_ADAM,       /* adam e ~learning_rate:x [~beta1:x ~beta2:x ~eps:x ~weight_decay:x
                            ~decoupled:b ~clip:x ~decay_matrices_only:b] */
  CN_NT_ITEM_SET_SEED,   /* set_seed n */
  CN_NT_ITEM_FOR,        /* for i = a to b [progress ...] do items done: items run with the static
                            index i bound */
  CN_NT_ITEM_PRINTF,     /* printf "format" args */
  CN_NT_ITEM_IF,         /* if cond then items [else items] end */
  CN_NT_ITEM_SHUFFLE,    /* shuffle t ~epoch:e: a data set's order for epoch e */
  CN_NT_ITEM_CHECKPOINT, /* checkpoint "file" loss ~epoch:e: the training state saved */
  CN_NT_ITEM_SAVE_NPY,   /* save_npy "file" t: t computed and written as a .npy file */
  CN_NT_ITEM_PLOT        /* plot "file" ~x:e ("name", e) ...: one point per series, drawn */
} cn_nt_item_kind;

/* A piece of a printf format: literal text, or one conversion
 * '%' [flags -+ 0#] [width] ['.' precision] (d i f F e E g G s b). */
typedef struct {
  char conv;        /* 0 for literal text (with "%%" already read as "%") */
  const char *text; /* the literal text, or the conversion as written ("%-8.4f") */
  cn_nt_pos pos;    /* of the conversion's '%' in the script (of the format for text) */
} cn_nt_fmt;

typedef struct cn_nt_item cn_nt_item;

struct cn_nt_item {
  cn_nt_item_kind kind;
  cn_nt_pos pos; /* the keyword */
  union {
    struct {
      cn_nt_let_kind ext;
      const char *name;   /* "_" for a wildcard binding (never with parameters); NULL for a tuple
                             pattern */
      int n_names;        /* a tuple pattern `let (a, b) = e` (PLAIN only): >= 2 names, "_"
                             allowed; 0 otherwise */
      const char **names; /* the pattern's names, distinct except "_" */
      cn_nt_pos name_pos; /* of the name, or of the pattern's first name */
      int n_params;       /* 0 for LET_PLAIN */
      cn_nt_param *params;
      int config_param;   /* index of the ~config parameter, or -1 */
      cn_nt_expr *expr;   /* PLAIN and OP: never NULL; CD and TILE: NULL */
      cn_nt_cd *cd;       /* CD: never NULL; otherwise NULL */
      const char *tile;   /* TILE: the body, never NULL nor empty (plain parameters only, >= 1);
                             otherwise NULL */
      cn_nt_pos tile_pos; /* TILE: of the body's first character */
      const cn_tile_fn *tile_fn; /* TILE: the body parsed by src/tile (never NULL) */
    } let;
    cn_nt_expr *expr; /* BACKPROP, RUN: never NULL */
    struct {
      cn_nt_expr *expr; /* never NULL */
      cn_nt_expr *full,
          *precision; /* ~full (a host boolean), ~precision (a host integer) or NULL */
    } print;
    struct {
      cn_nt_expr *expr, *learning_rate;                      /* never NULL */
      cn_nt_expr *momentum, *weight_decay, *nesterov, *clip; /* NULL when not given */
    } sgd;
    struct {
      cn_nt_expr *expr, *learning_rate; /* never NULL */
      cn_nt_expr *beta1, *beta2, *eps, *weight_decay, *decoupled, *clip,
          *decay_matrices_only; /* NULL when not given */
    } adam;
    int64_t seed; /* SET_SEED: >= 0 */
    struct {
      const char *name; /* the index symbol: a static index bound by a let, or a fresh one */
      cn_nt_pos name_pos;
      cn_nt_expr *from, *to; /* never NULL: host integers */
      bool progress;         /* `progress` was written before `do` */
      cn_nt_pos progress_pos;
      cn_nt_expr *loss, *batch_size; /* progress's ~loss and ~batch_size, NULL when not given */
      cn_nt_expr *devices;           /* ~devices:N (a data-parallel loop), NULL when not given */
      int n_items;                   /* the body: statements only (no let, no set_seed) */
      cn_nt_item *items;
    } for_;
    struct {
      const char *format; /* decoded */
      cn_nt_pos format_pos;
      int n_parts; /* the format's pieces, in order; as many conversions as n_args */
      cn_nt_fmt *parts;
      int n_args;
      cn_nt_expr **args; /* never NULL below n_args */
    } printf_;
    struct {
      cn_nt_expr *cond;   /* never NULL: a host value */
      int n_then, n_else; /* statements only (no let, no set_seed) */
      cn_nt_item *then_items, *else_items;
      bool has_else;
    } if_;
    struct {
      cn_nt_expr *file;  /* CHECKPOINT, SAVE_NPY: never NULL (a host string); SHUFFLE: NULL */
      cn_nt_expr *expr;  /* never NULL: the data set's tensor, the loss, the tensor saved */
      cn_nt_expr *epoch; /* SHUFFLE, CHECKPOINT: never NULL (a host integer); SAVE_NPY: NULL */
    } data;              /* SHUFFLE, CHECKPOINT, SAVE_NPY */
    struct {
      cn_nt_expr *file, *x;     /* never NULL: a host string, a host number */
      cn_nt_expr *ascii;        /* ~ascii: a host boolean, or NULL */
      cn_nt_expr *matrix;       /* ~matrix: a tensor, or NULL */
      cn_nt_expr *matrix_title; /* ~matrix:("title", t): a host string, or NULL */
      int n_series;             /* >= 1 */
      cn_nt_expr **names;       /* per series: a host string (never NULL) */
      cn_nt_expr **values;      /* per series: a host number or a one-cell tensor (never NULL) */
    } plot;
  } u;
};

typedef struct {
  const cn_nt_source *src;
  int n_items;
  cn_nt_item *items;
} cn_nt_program;

/* The left spine of a BINOP chain: its length n (>= 1 for a BINOP, 0 otherwise), with
 * spine[0] = e, spine[k + 1] = spine[k]->u.binop.lhs, when spine is non-NULL (n entries). Walks
 * go bottom-up over spine[n - 1] .. spine[0] so that a long chain costs no recursion. */
static inline int cn_nt_binop_spine(const cn_nt_expr *e, const cn_nt_expr **spine) {
  int n = 0;
  for (; e && e->kind == CN_NT_BINOP; e = e->u.binop.lhs) {
    if (spine) spine[n] = e;
    n++;
  }
  return n;
}

#endif
