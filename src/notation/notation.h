/* The notation front end's internal API: parsing `.cnl` scripts, %op expressions (the text of
 * cn_op) and %cd assignments (the text of cn_cd) into the tree of ast.h, printing trees back as
 * canonical source, and positioned error messages.
 *
 * Grammar (OCaml-flavored, so that syntax-extensions-cd-op's examples read the same):
 *   program := (item [';;'])*
 *   item    := 'let' ['%op' | '%cd'] (NAME | '_') param* '=' (expr | cd)   (no 'in' at the top)
 *            | 'let' ('(' names ')' | names) '=' expr               (a tuple pattern)
 *            | 'set_seed' INT | stmt
 *   names   := NAME (',' NAME)+
 *   stmt    := 'print' expr | 'backprop' expr | 'run' app
 *            | 'printf' STRING arg*        (one argument per conversion of the format)
 *            | 'sgd' binary ('~learning_rate:' arg | '~momentum:' arg | '~weight_decay:' arg
 *                            | '~nesterov:' arg | '~clip:' arg)*
 *            | 'adam' binary ('~learning_rate:' arg | '~beta1:' arg | '~beta2:' arg | '~eps:' arg
 *                             | '~weight_decay:' arg | '~decoupled:' arg | '~clip:' arg
 *                             | '~decay_matrices_only:' arg)*
 *            | 'for' NAME '=' expr 'to' expr ['progress' ('~loss:' arg | '~batch_size:' arg)*]
 *              'do' (stmt [';;'])* 'done'  (loops nest at most CN_NT_MAX_LOOP_DEPTH deep)
 *            | 'if' binary 'then' (stmt [';;'])* ['else' (stmt [';;'])*] 'end'
 *                                          (ifs nest at most CN_NT_MAX_IF_DEPTH deep)
 *            | 'plot' arg ('~x:' arg | '~ascii:' arg | '~matrix:' arg | '(' expr ',' expr ')')*
 *                                          (~x and one series at least)
 *   param   := NAME | '~'NAME | '?'NAME | '?(' NAME '=' expr ')' | '()'
 *   expr    := 'let' NAME '=' expr 'in' expr | (ifexpr | binary) (',' binary)*     (a tuple)
 *   ifexpr  := 'if' binary 'then' branch 'else' branch  (an expression: the else is required)
 *   branch  := ifexpr | 'let' NAME '=' expr 'in' expr | binary
 *   binary  := unary (INFIX binary)*       OCaml precedence and associativity by the operator's
 *                                          first characters (cn_nt_infix_prec)
 *            | binary EINSUM-OP STRING arg | binary ('++' | '@^^') STRING
 *   unary   := ('-' | '-.') unary | app
 *   app     := arg (arg | '~'NAME':' arg | '~'NAME)*
 *   arg     := atom ('.' NAME)*
 *   atom    := NAME | INT | FLOAT | CHAR ['-' | '-.'] (INT | FLOAT) | STRING | 'true' | 'false'
 *            | '()' | '(' expr [':' NAME] ')' | '[' items ']' | '[|' items '|]' | '!…' atom
 *            | '{' NAME ['=' expr] (';' NAME '=' expr)* [';'] '}'
 *   cd      := cd_item (';' cd_item)* [';']
 *   cd_item := arg ASSIGN-OP binary ('~logic:' arg | '~projections' [':' arg])*
 *            | 'if' binary 'then' cd_item ['else' cd_item] | '(' [cd] ')'
 *            | '~~(' arg+ ';' cd ')'
 * Special forms: a string applied to one argument is an inline declaration ("w" [-4], "b" 8);
 * braces are a declaration, except as the value of ~config:, where they are a record; an einsum
 * followed by an operator that binds tighter than its own is an error asking for parentheses
 * (OCaml would read `a +* "s" b * c` as `a +* ("s" b * c)`); in a %cd right-hand side and after
 * sgd's (adam's, shuffle's, checkpoint's) expression, ~logic/~projections resp. the statement's
 * labels end the application
 * instead of becoming its arguments; `!@i` (embed a static index) is one of the '!…' prefix
 * operators; `mod` is an infix operator of the multiplicative class. A printf format is
 * '%' [flags -+ 0#] [width] ['.' precision] (d i f F e E g G s b) conversions and text ('%%' a
 * percent sign). Comments: (* nested *) and '#' to end of line. Reserved words: let in if then
 * else end true false print printf backprop run sgd adam set_seed for to do done progress mod
 * shuffle checkpoint save_npy plot.
 * A trailing ';' ends a %cd sequence before end of input, ';;', ')', or a reserved word.
 *
 * Errors: NULL and CN_ERR_INVALID with the message "FILE:LINE:COL: message\nLINE-TEXT\nCARET";
 * CN_ERR_NOMEM on allocation failure. No input crashes or loops the parser; nesting deeper than
 * CN_NT_MAX_HEIGHT is an error. */
#ifndef CN_NOTATION_H
#define CN_NOTATION_H

#include "notation/ast.h"

/* Parses a whole script. `file` names the source in messages. */
cn_nt_program *cn_nt_parse_program(cn_ctx *ctx, const char *file, const char *text);
/* Parses one %op expression (the whole text). */
cn_nt_expr *cn_nt_parse_expr(cn_ctx *ctx, const char *file, const char *text);
/* Parses a %cd sequence of assignments (the whole text). */
cn_nt_cd *cn_nt_parse_cd(cn_ctx *ctx, const char *file, const char *text);

/* Canonical source text: one item per line, operands of infix operators parenthesized whenever
 * they are themselves operator expressions, so that the text reads unambiguously; printing a
 * parsed tree and parsing the text again gives a tree that prints the same. */
void cn_nt_print_program(cn_sbuf *sb, const cn_nt_program *prog);
void cn_nt_print_expr(cn_sbuf *sb, const cn_nt_expr *e);
void cn_nt_print_cd(cn_sbuf *sb, const cn_nt_cd *cd);
/* One item as the program printer prints it (a block over several lines), without the final
 * newline. */
void cn_nt_print_item(cn_sbuf *sb, const cn_nt_item *it);

/* The precedence class of an infix operator token, CN_NT_PREC_NONE if the token is not one
 * (keyword-like tokens such as '->' ':=' '|' and the %cd assignment operators are not). */
cn_nt_prec cn_nt_infix_prec(const char *op);
/* The %cd assignment operator spelled `op` (syntax-extensions-cd-op's table): its accumulation op
 * and whether it clears first. False if `op` is not an assignment operator. */
bool cn_nt_assign_op(const char *op, cn_op *accum, bool *clear);
/* The spelling of an assignment operator (the inverse of cn_nt_assign_op), or NULL. */
const char *cn_nt_assign_spelling(cn_op accum, bool clear);
/* The labels of sgd's and adam's options (NULL-terminated): an application written as their
 * loss stops before them (the parser and the printer agree on it). */
extern const char *const cn_nt_sgd_labels[];
extern const char *const cn_nt_for_labels[];
extern const char *const cn_nt_adam_labels[];
/* The label of shuffle's and checkpoint's ~epoch (NULL-terminated), likewise. */
extern const char *const cn_nt_epoch_labels[];
/* The labels of print's options (NULL-terminated), likewise. */
extern const char *const cn_nt_print_labels[];
/* Whether an application stops before `label` where the statement's labels are `labels`
 * (NULL-terminated; NULL: none): one of them, or a misspelling close enough to one to be
 * suggested (so that `adam loss ~learning_rat:0.1` names the misspelled option instead of
 * passing it to the loss). The one rule of the parser and the printer. */
bool cn_nt_stop_label(const char *const *labels, const char *label);
/* The labeled argument named `label` among args, or NULL. */
const cn_nt_arg *cn_nt_find_arg(int n_args, const cn_nt_arg *args, const char *label);

/* Records CN_ERR_INVALID with "FILE:LINE:COL: message", the source line and a caret under the
 * column; for the evaluator's errors too. Returns CN_ERR_INVALID. */
cn_status cn_nt_fail_at(cn_ctx *ctx, cn_nt_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);

#endif
