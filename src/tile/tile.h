/* Tile (issue 7, tile-edsl): the shared reader, expression trees and contraction statements, and
 * the compilation of one contraction such as "O[i : N] >= I[2*i + j], j < 2" to a single ranged,
 * valid-only projections record (cn_proj_create_ranged) and a tensor of kind CN_TK_TILE whose
 * forward code is `O =:accum prim(operands)` over that record.
 *
 * The reader is read.c, the compilation compile.c (over the iteration space of space.h). Two
 * front ends use them: cn_tile (one statement from C, compile.c) and Tile functions
 * (cn_tile_fn_*, function.h), whose bodies hold several statements. Text is parsed once into
 * trees (names are views into the text, never copied); a tree is compiled against a scope
 * (the names a statement sees: tensors with their dims, dims with their values) when a tensor is
 * built. Everything is decided then: the operands' shapes must be known, so the record (and the
 * `=` conflict check) needs nothing from materialization.
 *
 * Division inside an index polynomial is exact (tile-edsl "Skipping"): space.c solves the
 * divisibility conditions with lattice.h and compile.c compiles the statement over the resulting
 * change of variables.
 *
 * Layering: src/tile includes src/tensor (tensor creation) and, through it, src/proj and src/ir;
 * nothing below includes src/tile. */
#ifndef CN_TILE_H
#define CN_TILE_H

#include "tensor/tensor.h"

/* Index variables of one contraction and its constraints (the statement's own and those a
 * function adds) are bounded by these; more is a positioned error. */
#define CN_TILE_MAX_VARS        16
#define CN_TILE_MAX_CONSTRAINTS 16

/* ---- Source text and positioned messages ---- */

/* The text messages point into. A cn_tile statement (file NULL) reports
 *   tile "TEXT": WHAT at column C
 *     TEXT
 *     ^
 * a function body (file set) reports FILE:LINE:COL: WHAT, the line and a caret, with text[0]
 * at line:col of the file. */
typedef struct {
  cn_ctx *ctx;
  const char *text; /* NUL-terminated */
  const char *file;
  int line, col;
  bool failed; /* the first failure is the one reported */
  bool cpp;    /* tile-edsl's C++ flavor: `//` and block comments, no `#` comments, `{ } &`
                  tokens */
} cn_tile_src;

void cn_tile_fail_at(cn_tile_src *src, size_t at, const char *fmt, ...) CN_PRINTF(3, 4);

/* ---- Tokens ---- */

typedef enum {
  CN_TILE_TOK_END,
  CN_TILE_TOK_NAME,
  CN_TILE_TOK_INT,
  CN_TILE_TOK_FLOAT,
  CN_TILE_TOK_OP
} cn_tile_tok_kind;
typedef struct {
  cn_tile_tok_kind kind;
  size_t at, len; /* offset in the text and length (END: at = the span's end) */
  int64_t ival;   /* INT */
  double fval;    /* INT, FLOAT */
} cn_tile_tok;

/* Reads the tokens of text[begin, end): blanks, newlines and `\` line continuations separate
 * tokens; `#` starts a comment to the end of the line. Operators: ( ) [ ] , : ; . + - * / // ==
 * != < > <= >= += *= =. In the C++ flavor (src->cpp) comments are `//` to the end of the line
 * and block comments instead (so `//` is no operator), and `{`, `}` and `&` are operators too
 * (a function header's). `tok` is the current token (one token of lookahead); a reader is a
 * value, so copying it saves a position to come back to. */
typedef struct {
  cn_tile_src *src;
  size_t pos, end;
  cn_tile_tok tok;
} cn_tile_reader;

/* False after a lexical error (message recorded). */
bool cn_tile_reader_init(cn_tile_reader *r, cn_tile_src *src, size_t begin, size_t end);
bool cn_tile_advance(cn_tile_reader *r);
/* Whether the current token is the operator / the name `s`. */
bool cn_tile_is(const cn_tile_reader *r, const char *s);
/* Consumes the operator `op` if current. */
bool cn_tile_accept(cn_tile_reader *r, const char *op);
/* Consumes the operator `op`, or fails with "unexpected X, expected WANTED". */
bool cn_tile_expect(cn_tile_reader *r, const char *op, const char *wanted);
/* Fails with "unexpected X, expected WANTED" at the current token; returns false. */
bool cn_tile_unexpected(cn_tile_reader *r, const char *wanted);

/* ---- Expression trees ---- */

typedef enum {
  CN_TILE_EXPR_INT,
  CN_TILE_EXPR_FLOAT,
  CN_TILE_EXPR_NAME,
  CN_TILE_EXPR_NEG,
  CN_TILE_EXPR_BINARY,
  CN_TILE_EXPR_CALL
} cn_tile_expr_kind;
typedef enum {
  CN_TILE_BIN_ADD,
  CN_TILE_BIN_SUB,
  CN_TILE_BIN_MUL,
  CN_TILE_BIN_DIV,      /* '/' */
  CN_TILE_BIN_FLOORDIV, /* '//' */
  CN_TILE_BIN_EQ,
  CN_TILE_BIN_NE,
  CN_TILE_BIN_LT,
  CN_TILE_BIN_GT,
  CN_TILE_BIN_LE,
  CN_TILE_BIN_GE
} cn_tile_binop;

typedef struct cn_tile_expr cn_tile_expr;
struct cn_tile_expr {
  cn_tile_expr_kind kind;
  size_t at; /* INT, FLOAT, NAME, CALL: the token; NEG, BINARY: the operator */
  int64_t ival;
  double fval;
  const char *name; /* NAME, CALL: a view into the text */
  size_t len;
  cn_tile_binop op;
  int n_args; /* NEG 1, BINARY 2, CALL its arguments */
  cn_tile_expr **args;
};

/*   expr     := additive [('==' | '!=' | '<' | '>' | '<=' | '>=') additive]  (comparisons)
 *   additive := term {('+' | '-') term};  term := unary {('*' | '/' | '//') unary}
 *   unary    := '-' unary | primary
 *   primary  := INT | FLOAT | NAME ['(' [expr {',' expr}] ')'] | '(' expr ')'
 * NULL after an error. */
cn_tile_expr *cn_tile_parse_expr(cn_tile_reader *r, bool comparisons);
/* Where an expression's text starts (a binary node's `at` is its operator's). */
size_t cn_tile_expr_start(const cn_tile_expr *e);

/* ---- Contraction statements ---- */

typedef struct {
  size_t at; /* the tensor's name */
  const char *name;
  size_t len;
  int n;
  cn_tile_expr *idx[CN_MAX_RANK];
} cn_tile_access;

typedef struct {
  size_t at;
  cn_tile_expr *poly, *bound; /* 0 <= poly < bound */
} cn_tile_constraint;

/*   stmt       := NAME '[' outaxes ']' agg comb {',' constraint}
 *   outaxes    := [outaxis {',' outaxis}]    per-axis sizes: `O[i : N, j : M]`
 *               | poly {',' poly} ':' size {',' size}
 *                                            all sizes after all the indices: `C[i, j : M, N]`
 *                                            (chosen when the first ':' follows the second
 *                                            index or a later one)
 *   outaxis    := poly [':' size]
 *   agg        := '+=' | '*=' | '>=' | '<=' | '='
 *   comb       := access [('*' | '+' | '==') access] | 'cond' '(' access ',' access ',' access ')'
 *   access     := NAME '[' [poly {',' poly}] ']'   (`[()]` is also an empty list)
 *   constraint := poly '<' size
 * `[]` and `()` brackets are interchangeable; poly and size are additive expressions. */
typedef struct {
  cn_tile_access out;
  cn_tile_expr *sizes[CN_MAX_RANK]; /* NULL: not given */
  bool sized;                       /* some size is given */
  size_t agg_at;
  cn_op accum; /* ADD, MUL, MAX, MIN, or ARG2 for `=` */
  cn_op prim;  /* ID, MUL, ADD, EQ or COND */
  int n_acc;
  cn_tile_access acc[3];
  int n_cons;
  cn_tile_constraint cons[CN_TILE_MAX_CONSTRAINTS];
} cn_tile_contraction;

/* Parses a whole statement up to the reader's end. */
bool cn_tile_parse_contraction(cn_tile_reader *r, cn_tile_contraction *out);
/* poly '<' size, as in `O.add_constraint(j < 2)`. */
bool cn_tile_parse_constraint(cn_tile_reader *r, cn_tile_constraint *out);

/* ---- Scopes and compilation ---- */

typedef enum {
  CN_TILE_DIM,    /* an integer: value */
  CN_TILE_UNSET,  /* a declared dim without a value yet */
  CN_TILE_TENSOR, /* tensor, with rank and dims (rank -1: its shape is not known yet) */
  CN_TILE_INDEX   /* a declared index variable */
} cn_tile_name_kind;

typedef struct {
  const char *name; /* a view: len bytes */
  size_t len;
  cn_tile_name_kind kind;
  int64_t value;
  cn_tensor *tensor;
  int rank;
  int64_t dims[CN_MAX_RANK];
} cn_tile_name;

/* Lookup goes from the last name to the first, so a later name shadows an earlier one. */
typedef struct {
  int n;
  const cn_tile_name *names;
} cn_tile_scope;

const cn_tile_name *cn_tile_lookup(const cn_tile_scope *scope, const char *name, size_t len);
/* The memory-order dims of t into e (kind TENSOR; rank -1 when its shape is not known yet).
 * False only when memory runs out (message set). */
bool cn_tile_tensor_name(cn_graph *g, cn_tensor *t, cn_tile_name *e);
/* Fails at `at` when e's shape is not known yet; true when it is. */
bool cn_tile_check_known(cn_tile_src *src, size_t at, const cn_tile_name *e);
/* An integer expression of dims and integers (+ - * and floor division `/`, `//`): sizes,
 * bounds, dim assignments. */
bool cn_tile_eval_int(cn_tile_src *src, const cn_tile_scope *scope, const cn_tile_expr *e,
                      int64_t *out);

/* Builds the contraction's tensor (labeled with the output's name). out_dims: the output's
 * out_rank dims when a function's TensorOutput gave them (the statement must then not size its
 * axes), NULL to take them from the statement. extra: constraints added to the statement's (a
 * function's add_constraint). NULL after an error. */
cn_tensor *cn_tile_contract(cn_graph *g, cn_tile_src *src, const cn_tile_scope *scope,
                            const cn_tile_contraction *c, int out_rank, const int64_t *out_dims,
                            int n_extra, const cn_tile_constraint *extra);

/* cn_tile_fn_apply that calls note(user, line, col) each time a contraction or an elementwise
 * operation of the body has built its tensor, with the position in the script of that statement
 * or operation (what the function's body text starts at: its file, line and column), so a caller
 * can say where the body computes each tensor it built (the notation's NaN check report). */
typedef void cn_tile_note_fn(void *user, int line, int col);
cn_tensor *cn_tile_fn_apply_noted(cn_graph *g, const cn_tile_fn *fn, int n_args,
                                  const cn_tile_arg *args, cn_tile_note_fn *note, void *user);

#endif
