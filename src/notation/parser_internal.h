/* The parser's internal interface, shared by its three files:
 *   parser.c       state, token window, positioned errors, node construction, the entry points
 *                  for one %op expression and one %cd sequence;
 *   parser_expr.c  %op expressions and %cd sequences;
 *   parser_stmt.c  script items (statements, let, loops, conditionals) and cn_nt_parse_program.
 * The grammar is in notation.h.
 *
 * Invariants: after a failure (`failed` set, message recorded) every function returns NULL /
 * false promptly and no message is overwritten; three bounds make every input terminate without
 * exhausting the stack: the recursion depth of the parsing functions (MAX_DEPTH), the height of
 * the built tree (CN_NT_MAX_HEIGHT, checked as each node is finished) and the nesting of `for`
 * and `if` statements (CN_NT_MAX_LOOP_DEPTH, CN_NT_MAX_IF_DEPTH); each loop consumes a token per
 * iteration. */
#ifndef CN_NT_PARSER_INTERNAL_H
#define CN_NT_PARSER_INTERNAL_H

#include "notation/lexer.h"

/* Recursion guard: four guarded calls per level of parentheses (expression, binary operand twice,
 * atom), so about CN_NT_MAX_HEIGHT levels of brackets, whatever the tree's height; it bounds the
 * stack. */
enum { MAX_DEPTH = 4 * CN_NT_MAX_HEIGHT, WINDOW = 4 };
/* Declarations, records and parameter lists are checked for duplicate names pairwise; the cap
 * keeps that cheap on any input. */
enum { MAX_NAMES = 256 };

typedef struct {
  cn_ctx *ctx;
  const cn_nt_source *src;
  cn_nt_lexer lx;
  cn_nt_token window[WINDOW];
  int head, count;
  cn_nt_token eof; /* returned after a failure */
  bool failed;
  int depth;
  int loops; /* the `for` bodies being parsed, innermost last (at most CN_NT_MAX_LOOP_DEPTH) */
  int ifs;   /* the `if` bodies being parsed (at most CN_NT_MAX_IF_DEPTH) */
  nt_tk_kind inner; /* the innermost block being parsed: NT_TK_FOR, NT_TK_IF, or NT_TK_EOF */
  /* Labels that end an application instead of becoming its arguments (a %cd right-hand side's
   * ~logic, an optimizer's options, progress's options); NULL-terminated; cleared inside
   * brackets. */
  const char *const *stop_labels;
} parser;

/* A growable arena array. */
typedef struct {
  void *v;
  int n, cap;
} vec;

/* ---- parser.c ---- */
void ntp_error(parser *p, cn_nt_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);
/* The k-th token ahead (k < WINDOW). */
const cn_nt_token *ntp_peek(parser *p, int k);
cn_nt_token ntp_next(parser *p);
cn_nt_pos ntp_pos_of(const parser *p, const cn_nt_token *t);
cn_nt_pos ntp_here(parser *p);
bool ntp_at_kind(parser *p, nt_tk_kind kind);
bool ntp_at_op(parser *p, const char *op);
/* The token as a message names it. */
const char *ntp_describe(parser *p, const cn_nt_token *t, char *buf, size_t size);
/* "expected WHAT, found TOKEN" at the current token. */
void ntp_expected(parser *p, const char *what);
/* Consumes the closing bracket `kind` matching the opener at `open`. */
bool ntp_expect_close(parser *p, nt_tk_kind kind, const char *close, cn_nt_pos open,
                      const char *opener);
/* Consumes a lone '='; a longer operator starting with '=' gets a hint. */
bool ntp_expect_equal(parser *p, const char *after);
/* One more level of recursion (false past MAX_DEPTH, with a message); the caller decrements
 * p->depth when it returns. */
bool ntp_enter(parser *p);
void *ntp_alloc(parser *p, size_t bytes);
bool ntp_push(parser *p, vec *v, const void *elem, size_t size);
cn_nt_expr *ntp_new_expr(parser *p, cn_nt_expr_kind kind, cn_nt_pos pos);
/* Sets the height from the children; an error at `at` when the tree gets too high. */
cn_nt_expr *ntp_finish(parser *p, cn_nt_expr *e, cn_nt_pos at);
cn_nt_cd *ntp_new_cd(parser *p, cn_nt_cd_kind kind, cn_nt_pos pos);
cn_nt_cd *ntp_finish_cd(parser *p, cn_nt_cd *c);
bool ntp_start(parser *p, cn_ctx *ctx, const char *file, const char *text);
/* At the end of the input (else an error naming `what` was parsed). */
bool ntp_at_end(parser *p, const char *what);

/* ---- parser_expr.c ---- */
cn_nt_expr *ntp_parse_expr(parser *p);
cn_nt_expr *ntp_parse_binary(parser *p, int min_prec);
/* atom ('.' name)*: an application argument. */
cn_nt_expr *ntp_parse_arg(parser *p);
/* arg (arg | ~label:arg | ~label)*. */
cn_nt_expr *ntp_parse_app(parser *p);
cn_nt_cd *ntp_parse_cd_seq(parser *p);
/* Whether the current token can start an application argument. */
bool ntp_starts_arg(parser *p);

#endif
