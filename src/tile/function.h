/* Tile functions (issue 7, tile-edsl), internal to src/tile: a body parsed once into statements
 * (fn_read.c, cn_tile_fn_create) and evaluated against tensors and dims (fn_apply.c,
 * cn_tile_fn_apply).
 *
 * Invariants: a function, its text and its statements live in the context arena and are
 * read-only after creation; names are (pointer, length) views into the body, except the
 * parameters' (NUL-terminated copies, which messages print as strings). A created function's
 * body holds what no argument can change: a result as its last statement and nothing after it,
 * a contraction after every TensorOutput, a contraction of every constrained tensor. */
#ifndef CN_TILE_FUNCTION_H
#define CN_TILE_FUNCTION_H

#include "tile/tile.h"

/* A name in the body: a view of len bytes, at its offset in the text. */
typedef struct {
  const char *name;
  size_t len, at;
} cn_tile_name_ref;

/* The statements of a body, as fn_read.c's header comment lists them. */
typedef enum {
  CN_TILE_ST_DECLARE_DIMS,
  CN_TILE_ST_DECLARE_INDEXES,
  CN_TILE_ST_BIND_DIMS,
  CN_TILE_ST_OUTPUT,
  CN_TILE_ST_ASSIGN,
  CN_TILE_ST_CONTRACTION,
  CN_TILE_ST_CONSTRAINT,
  CN_TILE_ST_RETURN
} cn_tile_stmt_kind;

typedef struct {
  cn_tile_stmt_kind kind;
  size_t at;
  cn_tile_name_ref target; /* the tensor (BIND_DIMS, CONSTRAINT), the name (OUTPUT, ASSIGN) */
  int n_names;             /* DECLARE_*, BIND_DIMS */
  cn_tile_name_ref *names; /* DECLARE_*, BIND_DIMS */
  int n_exprs;             /* OUTPUT: its dims; ASSIGN, RETURN: one */
  cn_tile_expr **exprs;    /* OUTPUT, ASSIGN, RETURN */
  cn_tile_contraction *c;  /* CONTRACTION */
  cn_tile_constraint cons; /* CONSTRAINT */
  bool bare;               /* RETURN: a bare expression (no `return`) */
} cn_tile_stmt;

/* What a parameter receives: declared by a C++ header, or either (the Python flavor). */
typedef enum { CN_TILE_PARAM_ANY, CN_TILE_PARAM_TENSOR, CN_TILE_PARAM_DIM } cn_tile_param_kind;

struct cn_tile_fn {
  const char *name;
  int n_params;
  cn_tile_name_ref *params;
  cn_tile_param_kind *kinds; /* one per parameter */
  cn_tile_src src;           /* the body (copied); `failed` is never set in it */
  int n_stmts, cap_stmts;
  cn_tile_stmt *stmts;
  int max_names; /* names an application can bind: parameters and statements' targets */
};

/* Whether a names the len bytes at name. */
bool cn_tile_same_name(const cn_tile_name_ref *a, const char *name, size_t len);

#endif
