/* The generalized einsum spec (syntax-extensions-cd-op "Syntax of the generalized einsum notation",
 * convolution-is-a-contraction "What the notation carries", ocannl-notes §2.6): its syntax tree,
 * parser and printer.
 *
 *   spec  := shape (';' shape){0,2} '=>' shape          RHS shapes first, then the LHS
 *   shape := row '|' row '->' row | row '|' row | row '->' row | row
 *            (batch | input -> output; an omitted row is empty and not written)
 *   row   := axes? ellipsis? axes?                      leading axes, row variable, trailing axes
 *   ellipsis := '...' (the row's own variable: ..batch.., ..input.. or ..output..)
 *             | '..' IDENT '..'                          (a named row variable)
 *   axis  := IDENT | INT (a fixed index) | '_' (placeholder) | affine
 *   affine := [s '*'] IDENT ['<' | '='] ['+' INT] ['+' [d '*'] IDENT]
 *            stride s * output label, '<' valid / '=' padded convolution (unspecified if neither),
 *            + stride offset, + dilation d * kernel label; s and d are integers or names bound
 *            by the caller.
 * Mode: multi-char when the spec contains any of , * + ^ & < or an '=' not followed by '>'
 * (axes are comma-separated identifiers, commas around a row variable optional, one trailing
 * comma per row allowed); otherwise single-char (each letter an axis, a run of digits one fixed
 * index). Whitespace separates tokens and is otherwise ignored. A lone '_' is the placeholder and
 * never a name; concatenation ('^') is rejected. Every integer of a spec (fixed index, stride,
 * stride offset, dilation) is below CN_EINSUM_INT_LIMIT, as is a stride or dilation bound by name
 * (checked by the shape logic). A shape has at most CN_MAX_RANK axes over its three rows (row
 * variables not counted), the most a tensor has: the parser stops at the first axis past it.
 *
 * Invariants: a parsed spec owns its strings (context arena); cn_einsum_print writes a canonical
 * text that parses back to an equal tree (cn_einsum_equal); a row without a row variable has all
 * its axes in `trailing`. */
#ifndef CN_EINSUM_H
#define CN_EINSUM_H

#include "core/core.h"

/* 2^40: no node holds more than 2^40 bytes (tensor/graph.c), so a fixed index, stride or
 * dilation this large addresses nothing cannl can allocate; below it, the shape logic's own
 * arithmetic on one number (a fixed index k needs k + 1 cells) cannot overflow int64. */
#define CN_EINSUM_INT_LIMIT ((int64_t)1 << 40)

typedef enum { CN_ES_LABEL, CN_ES_FIXED, CN_ES_PLACEHOLDER, CN_ES_AFFINE } cn_es_axis_kind;
typedef enum {
  CN_ES_CONV_NONE,        /* no kernel term: pure striding */
  CN_ES_CONV_UNSPECIFIED, /* a kernel term without '<' or '=': padding decided by the caller */
  CN_ES_CONV_VALID,       /* '<' */
  CN_ES_CONV_PADDED       /* '=' */
} cn_es_conv;

typedef struct {
  cn_es_axis_kind kind;
  int column;        /* 1-based column of the axis in the spec text, for messages */
  const char *label; /* LABEL: the axis label; AFFINE: the output label it strides over */
  int64_t fixed;     /* FIXED */
  /* AFFINE: stride * label [< or =] [+ stride_offset] [+ dilation * kernel] */
  int64_t stride;            /* 1 when not written */
  const char *stride_name;   /* non-NULL when the stride is a name bound by the caller */
  int64_t stride_offset;     /* 0 when not written */
  cn_es_conv conv;           /* CN_ES_CONV_NONE iff kernel is NULL */
  const char *kernel;        /* the kernel label, or NULL */
  int64_t dilation;          /* 1 when not written */
  const char *dilation_name; /* non-NULL when the dilation is a name */
} cn_es_axis;

typedef struct {
  int n_leading;
  cn_es_axis *leading; /* axes before the row variable (only with a row variable) */
  const char
      *row_var;  /* NULL: no row variable; "batch"/"input"/"output" for "...", else the name */
  bool ellipsis; /* the row variable was written "..." */
  int n_trailing;
  cn_es_axis *trailing;
} cn_es_row;

typedef struct {
  cn_es_row batch, input, output;
  bool has_batch, has_input; /* the '|' resp. '->' was written */
  int column;
} cn_es_shape;

typedef struct {
  const char *text; /* the spec as given */
  bool multichar;
  int n_rhs; /* 1, 2 or 3 */
  cn_es_shape rhs[3];
  cn_es_shape lhs;
} cn_einsum;

/* Parses a spec; NULL with a CN_ERR_INVALID message on a syntax error, e.g.
 *   einsum spec "ij;jk=>ik(": unexpected '(' at column 10
 *     ij;jk=>ik(
 *              ^                                                                           */
cn_einsum *cn_einsum_parse(cn_ctx *ctx, const char *spec);
/* The canonical text (multi-char mode when the tree needs it, single-char mode otherwise). */
void cn_einsum_print(cn_sbuf *sb, const cn_einsum *spec);
/* One axis as the spec would write it ("2*oh<+kh"). */
void cn_einsum_axis_print(cn_sbuf *sb, const cn_es_axis *ax);
/* Structural equality ignoring columns, the original text and the mode (`multichar`: the printer
 * may choose the other mode for the same tree). */
bool cn_einsum_equal(const cn_einsum *a, const cn_einsum *b);

#endif
