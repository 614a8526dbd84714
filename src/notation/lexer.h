/* The notation's lexer, shared by parser.c only: tokens of the OCaml-flavored surface, produced
 * one at a time so that the first error in text order is the one reported.
 *
 * Invariants: after an error (cn_nt_lex returns false) the message is in the context and the
 * lexer must not be called again; token texts are arena strings; an operator token is the
 * longest run of OCaml operator characters, except that "|]" always closes an array and a lone
 * "." is TK_DOT. */
#ifndef CN_NT_LEXER_H
#define CN_NT_LEXER_H

#include "notation/notation.h"

typedef enum {
  TK_EOF,
  TK_IDENT,          /* text: the name (including "_") */
  TK_INT,            /* ival, fval */
  TK_FLOAT,          /* fval */
  TK_STRING,         /* text: decoded */
  TK_CHAR,           /* text: the one-character label of 'q' */
  TK_OP,             /* text: the operator characters */
  TK_LABEL,          /* ~name (text: name) */
  TK_LABEL_COLON,    /* ~name: */
  TK_OPTLABEL,       /* ?name */
  TK_OPTLABEL_COLON, /* ?name: */
  TK_QUESTION,       /* ? before '(' */
  TK_DOT,            /* . */
  TK_LPAREN,         /* ( */
  TK_RPAREN,         /* ) */
  TK_LBRACKET,       /* [ */
  TK_RBRACKET,       /* ] */
  TK_LBRACKET_BAR,   /* [| */
  TK_BAR_RBRACKET,   /* |] */
  TK_LBRACE,         /* { */
  TK_RBRACE,         /* } */
  TK_SEMI,           /* ; */
  TK_SEMISEMI,       /* ;; */
  TK_COMMA,          /* , */
  /* reserved words */
  TK_LET,
  TK_IN,
  TK_IF,
  TK_THEN,
  TK_ELSE,
  TK_TRUE,
  TK_FALSE,
  TK_PRINT,
  TK_BACKPROP,
  TK_RUN,
  TK_SGD,
  TK_SET_SEED,
  TK_FOR,
  TK_TO,
  TK_DO,
  TK_DONE
} tk_kind;

typedef struct {
  tk_kind kind;
  const char *text; /* see tk_kind; NULL for punctuation and reserved words */
  int64_t ival;
  double fval;
  int line, col; /* of the first byte */
  size_t offset; /* byte offset of the first byte */
  size_t len;    /* bytes in the source */
} cn_nt_token;

typedef struct {
  cn_ctx *ctx;
  const cn_nt_source *src;
  size_t pos;            /* next byte */
  int line;              /* line of pos */
  size_t line_start;     /* offset of the first byte of that line */
  int end_line, end_col; /* just after the last token lexed: where TK_EOF is reported */
} cn_nt_lexer;

void cn_nt_lexer_init(cn_nt_lexer *lx, cn_ctx *ctx, const cn_nt_source *src);
/* The next token; false (message recorded) on a lexical error or allocation failure. */
bool cn_nt_lex(cn_nt_lexer *lx, cn_nt_token *out);
/* A block of another language (the body of let%tile), read raw: from the first non-blank
 * character after the current position to the end of the last line before the next line that
 * starts with a non-blank character in its first column (or the end of the text), trailing
 * blanks dropped. *text (arena) is that block, *line and *col the position of its first
 * character; lexing continues after it. False (message recorded) when the block is empty. */
bool cn_nt_lex_block(cn_nt_lexer *lx, const char **text, int *line, int *col);
/* The source text of a reserved word, for messages. */
const char *cn_nt_reserved_word(tk_kind kind);

#endif
