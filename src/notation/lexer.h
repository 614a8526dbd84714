/* The notation's lexer, shared by parser.c only: tokens of the OCaml-flavored surface, produced
 * one at a time so that the first error in text order is the one reported.
 *
 * Invariants: after an error (cn_nt_lex returns false) the message is in the context and the
 * lexer must not be called again; token texts are arena strings; an operator token is the
 * longest run of OCaml operator characters, except that "|]" always closes an array and a lone
 * "." is NT_TK_DOT; the word `mod` is an operator token too (OCaml's infix keyword). */
#ifndef CN_NT_LEXER_H
#define CN_NT_LEXER_H

#include "notation/notation.h"

typedef enum {
  NT_TK_EOF,
  NT_TK_IDENT,          /* text: the name (including "_") */
  NT_TK_INT,            /* ival, fval */
  NT_TK_FLOAT,          /* fval */
  NT_TK_STRING,         /* text: decoded */
  NT_TK_CHAR,           /* text: the one-character label of 'q' */
  NT_TK_OP,             /* text: the operator characters */
  NT_TK_LABEL,          /* ~name (text: name) */
  NT_TK_LABEL_COLON,    /* ~name: */
  NT_TK_OPTLABEL,       /* ?name */
  NT_TK_OPTLABEL_COLON, /* ?name: */
  NT_TK_QUESTION,       /* ? before '(' */
  NT_TK_DOT,            /* . */
  NT_TK_LPAREN,         /* ( */
  NT_TK_RPAREN,         /* ) */
  NT_TK_LBRACKET,       /* [ */
  NT_TK_RBRACKET,       /* ] */
  NT_TK_LBRACKET_BAR,   /* [| */
  NT_TK_BAR_RBRACKET,   /* |] */
  NT_TK_LBRACE,         /* { */
  NT_TK_RBRACE,         /* } */
  NT_TK_SEMI,           /* ; */
  NT_TK_SEMISEMI,       /* ;; */
  NT_TK_COMMA,          /* , */
/* reserved words (reserved.def) */
#define NT_RESERVED(NAME, word) NT_TK_##NAME,
#include "notation/reserved.def"
#undef NT_RESERVED
} nt_tk_kind;

typedef struct {
  nt_tk_kind kind;
  const char *text; /* see nt_tk_kind; NULL for punctuation and reserved words */
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
  int end_line, end_col; /* just after the last token lexed: where NT_TK_EOF is reported */
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
const char *cn_nt_reserved_word(nt_tk_kind kind);

#endif
