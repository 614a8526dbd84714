/* The notation's recursive-descent parser, part 3 of 3 (see parser_internal.h): the items of a
 * script (let, print, printf, backprop, run, sgd, adam, shuffle, checkpoint, save_npy, plot,
 * set_seed, for, if) and cn_nt_parse_program.
 *
 * Invariants: `for` loops nest at most CN_NT_MAX_LOOP_DEPTH deep and `if` statements at most
 * CN_NT_MAX_IF_DEPTH, so the evaluator's walks over bodies are bounded; a printf format is
 * checked here (conversions, one argument each), so the evaluator only formats. */
#include "notation/parser_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- Scripts -------------------------------------------------------------------------------- */

static bool parse_param(parser *p, vec *params) {
  const cn_nt_token *t = ntp_peek(p, 0);
  cn_nt_param param = {CN_NT_PARAM_PLAIN, NULL, ntp_pos_of(p, t), NULL};
  switch (t->kind) {
  case NT_TK_IDENT: param.name = ntp_next(p).text; break;
  case NT_TK_LABEL:
    param.kind = CN_NT_PARAM_LABELED;
    param.name = ntp_next(p).text;
    break;
  case NT_TK_OPTLABEL:
    param.kind = CN_NT_PARAM_OPTIONAL;
    param.name = ntp_next(p).text;
    break;
  case NT_TK_LABEL_COLON:
  case NT_TK_OPTLABEL_COLON:
    ntp_error(p, param.pos, "a labeled parameter is written ~%s or ?%s (no pattern after ':')",
              t->text, t->text);
    return false;
  case NT_TK_QUESTION: {
    cn_nt_token q = ntp_next(p);
    if (!ntp_at_kind(p, NT_TK_LPAREN)) {
      ntp_expected(p, "'(' after '?' (as in ?(momentum = 0.0))");
      return false;
    }
    cn_nt_token open = ntp_next(p);
    if (!ntp_at_kind(p, NT_TK_IDENT)) {
      ntp_expected(p, "a parameter name in ?(name = default)");
      return false;
    }
    param.kind = CN_NT_PARAM_OPTIONAL;
    param.name = ntp_next(p).text;
    param.pos = ntp_pos_of(p, &q);
    if (!ntp_expect_equal(p, "and a default value in ?(name = default)") ||
        !(param.default_value = ntp_parse_expr(p)) ||
        !ntp_expect_close(p, NT_TK_RPAREN, ")", ntp_pos_of(p, &open), "("))
      return false;
    break;
  }
  case NT_TK_LPAREN:
    if (ntp_peek(p, 1)->kind == NT_TK_RPAREN) {
      ntp_next(p);
      ntp_next(p);
      param.kind = CN_NT_PARAM_UNIT;
      break;
    }
    /* fall through */
  default: ntp_expected(p, "a parameter or '='"); return false;
  }
  if (params->n == MAX_NAMES) {
    ntp_error(p, param.pos, "too many parameters (at most %d)", MAX_NAMES);
    return false;
  }
  for (int i = 0; param.name && strcmp(param.name, "_") != 0 && i < params->n; i++) {
    const char *other = ((cn_nt_param *)params->v)[i].name;
    if (other && strcmp(other, param.name) == 0) {
      ntp_error(p, param.pos, "parameter '%s' is given twice", param.name);
      return false;
    }
  }
  return ntp_push(p, params, &param, sizeof param);
}

/* let (a, b, ...) = e, or without the parentheses: binds the items of a tuple. */
static bool parse_tuple_let(parser *p, cn_nt_item *it, bool parens) {
  cn_nt_pos open = ntp_here(p);
  if (parens) ntp_next(p);
  if (it->u.let.ext != CN_NT_LET_PLAIN) {
    ntp_error(p, open, "a tuple pattern binds with a plain let (not let%%op or let%%cd)");
    return false;
  }
  vec names = {0};
  do {
    if (names.n > 0) ntp_next(p); /* the ',' */
    const cn_nt_token *t = ntp_peek(p, 0);
    if (t->kind != NT_TK_IDENT) {
      ntp_expected(p, "a name in the tuple pattern");
      return false;
    }
    if (names.n == MAX_NAMES) {
      ntp_error(p, ntp_pos_of(p, t), "too many names in a pattern (at most %d)", MAX_NAMES);
      return false;
    }
    for (int i = 0; strcmp(t->text, "_") != 0 && i < names.n; i++)
      if (strcmp(((const char **)names.v)[i], t->text) == 0) {
        ntp_error(p, ntp_pos_of(p, t), "'%s' is bound twice in the pattern", t->text);
        return false;
      }
    if (names.n == 0) it->u.let.name_pos = ntp_pos_of(p, t);
    const char *name = ntp_next(p).text;
    if (!ntp_push(p, &names, &name, sizeof name)) return false;
  } while (ntp_at_kind(p, NT_TK_COMMA));
  if (names.n < 2) {
    ntp_expected(p, "',' and another name (a tuple pattern has at least two)");
    return false;
  }
  if (parens && !ntp_expect_close(p, NT_TK_RPAREN, ")", open, "(")) return false;
  it->u.let.n_names = names.n;
  it->u.let.names = names.v;
  return ntp_expect_equal(p, "after the pattern") && (it->u.let.expr = ntp_parse_expr(p)) != NULL;
}

/* After `let%tile NAME PARAMS =`: the body, read raw and parsed by src/tile (its own language),
 * so that a syntax error there is a parse error of the script. Nothing was lexed past the '=', so
 * the lexer stands right after it. */
static bool parse_tile_body(parser *p, cn_nt_item *it, cn_nt_token let) {
  if (it->u.let.n_params == 0) {
    ntp_error(p, ntp_pos_of(p, &let), "a Tile function takes parameters (its tensors and dims)");
    return false;
  }
  for (int i = 0; i < it->u.let.n_params; i++)
    if (it->u.let.params[i].kind != CN_NT_PARAM_PLAIN) {
      ntp_error(p, it->u.let.params[i].pos,
                "a Tile function's parameters are plain names (tensors or integer dims)");
      return false;
    }
  /* Script names may carry primes (x'); Tile names are C-like identifiers. */
  if (strchr(it->u.let.name, '\'')) {
    ntp_error(p, it->u.let.name_pos, "a Tile function's name '%s' cannot contain a prime (')",
              it->u.let.name);
    return false;
  }
  for (int i = 0; i < it->u.let.n_params; i++) {
    if (strchr(it->u.let.params[i].name, '\'')) {
      ntp_error(p, it->u.let.params[i].pos, "a Tile parameter name '%s' cannot contain a prime (')",
                it->u.let.params[i].name);
      return false;
    }
    /* Tile names its tensors by parameter: a repeated one (even `_`) would be ambiguous there */
    for (int j = 0; j < i; j++)
      if (strcmp(it->u.let.params[i].name, it->u.let.params[j].name) == 0) {
        ntp_error(p, it->u.let.params[i].pos, "the Tile parameter '%s' is repeated",
                  it->u.let.params[i].name);
        return false;
      }
  }
  CN_ASSERT(p->count == 0);
  int line, col;
  if (!cn_nt_lex_block(&p->lx, &it->u.let.tile, &line, &col)) {
    p->failed = true;
    return false;
  }
  it->u.let.tile_pos = (cn_nt_pos){p->src, line, col};
  const char **names = cn_alloc(p->ctx, sizeof *names * (size_t)it->u.let.n_params);
  if (names)
    for (int k = 0; k < it->u.let.n_params; k++) names[k] = it->u.let.params[k].name;
  if (!names ||
      !(it->u.let.tile_fn = cn_tile_fn_create(p->ctx, it->u.let.name, it->u.let.n_params, names,
                                              it->u.let.tile, p->src->file, line, col)))
    p->failed = true;
  return !p->failed;
}

static bool parse_let_item(parser *p, cn_nt_item *it) {
  cn_nt_token let = ntp_next(p);
  it->u.let.ext = CN_NT_LET_PLAIN;
  it->u.let.config_param = -1;
  if (ntp_at_op(p, "%")) {
    cn_nt_token pct = ntp_next(p);
    const cn_nt_token *t = ntp_peek(p, 0);
    bool adjacent = pct.offset == let.offset + 3 && t->offset == pct.offset + 1;
    if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "op") == 0)
      it->u.let.ext = CN_NT_LET_OP;
    else if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "cd") == 0)
      it->u.let.ext = CN_NT_LET_CD;
    else if (t->kind == NT_TK_IDENT && adjacent && strcmp(t->text, "tile") == 0)
      it->u.let.ext = CN_NT_LET_TILE;
    else {
      ntp_error(p, ntp_pos_of(p, &pct),
                "unknown extension: write let%%op, let%%cd or let%%tile, without spaces");
      return false;
    }
    ntp_next(p);
  }
  const cn_nt_token *t = ntp_peek(p, 0);
  bool parens = t->kind == NT_TK_LPAREN;
  if (parens || (t->kind == NT_TK_IDENT && ntp_peek(p, 1)->kind == NT_TK_COMMA))
    return parse_tuple_let(p, it, parens);
  if (t->kind != NT_TK_IDENT) {
    ntp_expected(p, "a name after 'let'");
    return false;
  }
  it->u.let.name = t->text;
  it->u.let.name_pos = ntp_pos_of(p, t);
  ntp_next(p);
  vec params = {0};
  while (!p->failed && !(ntp_at_kind(p, NT_TK_OP) && ntp_peek(p, 0)->text[0] == '='))
    if (!parse_param(p, &params)) return false;
  if (!ntp_expect_equal(p, "after the name and parameters")) return false;
  cn_nt_param *ps = params.v;
  if (params.n > 0 && it->u.let.ext == CN_NT_LET_PLAIN) {
    ntp_error(p, ps[0].pos, "a function needs let%%op (or let%%cd for a routine)");
    return false;
  }
  if (params.n > 0 && strcmp(it->u.let.name, "_") == 0) {
    ntp_error(p, ps[0].pos, "a wildcard binding 'let _' takes no parameters");
    return false;
  }
  it->u.let.n_params = params.n;
  it->u.let.params = ps;
  for (int i = 0; i < params.n; i++)
    if (ps[i].kind == CN_NT_PARAM_LABELED && strcmp(ps[i].name, "config") == 0)
      it->u.let.config_param = i;
  if (it->u.let.ext == CN_NT_LET_CD) return (it->u.let.cd = ntp_parse_cd_seq(p)) != NULL;
  if (it->u.let.ext == CN_NT_LET_TILE) return parse_tile_body(p, it, let);
  return (it->u.let.expr = ntp_parse_expr(p)) != NULL;
}

/* ---- Optimizers and options ----------------------------------------------------------------- */

/* A labeled option of a statement: its name and where its value goes. */
typedef struct {
  const char *name;
  cn_nt_expr **slot;
} option;

/* ~name:arg options of a statement (`what`: sgd, adam, progress), each at most once. */
static bool parse_options(parser *p, const char *what, int n, const option *opts) {
  while (ntp_at_kind(p, NT_TK_LABEL) || ntp_at_kind(p, NT_TK_LABEL_COLON)) {
    cn_nt_token label = ntp_next(p);
    cn_nt_pos pos = ntp_pos_of(p, &label);
    cn_nt_expr **slot = NULL;
    for (int i = 0; i < n; i++)
      if (strcmp(opts[i].name, label.text) == 0) slot = opts[i].slot;
    if (!slot) {
      char known[200] = "";
      cn_suggest s;
      cn_suggest_init(&s, label.text);
      s.prefix = "~";
      for (int i = 0; i < n; i++) {
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s~%s",
                 i == 0       ? ""
                 : i == n - 1 ? " and "
                              : ", ",
                 opts[i].name);
        cn_suggest_consider(&s, opts[i].name);
      }
      ntp_error(p, pos, "unknown %s argument '~%s'%s (%s takes %s)", what, label.text,
                cn_suggest_text(&s), what, known);
      return false;
    }
    if (*slot) {
      ntp_error(p, pos, "'~%s' is given twice", label.text);
      return false;
    }
    if (label.kind != NT_TK_LABEL_COLON) {
      ntp_error(p, pos, "'~%s' needs a value: ~%s:VALUE", label.text, label.text);
      return false;
    }
    if (!(*slot = ntp_parse_arg(p))) return false;
  }
  return true;
}

/* sgd / adam: the loss (an application stops at the statement's labels), then the options;
 * ~learning_rate is required. */
static bool parse_optimizer(parser *p, cn_nt_item *it, const char *what, const char *const *labels,
                            cn_nt_expr **expr, int n, const option *opts) {
  const char *const *saved = p->stop_labels;
  p->stop_labels = labels;
  *expr = ntp_parse_binary(p, 1);
  p->stop_labels = saved;
  if (!*expr || !parse_options(p, what, n, opts)) return false;
  if (!*opts[0].slot) {
    ntp_error(p, it->pos, "%s needs ~learning_rate:VALUE", what);
    return false;
  }
  return true;
}

static bool parse_sgd(parser *p, cn_nt_item *it) {
  const option opts[] = {{"learning_rate", &it->u.sgd.learning_rate},
                         {"momentum", &it->u.sgd.momentum},
                         {"weight_decay", &it->u.sgd.weight_decay},
                         {"nesterov", &it->u.sgd.nesterov},
                         {"clip", &it->u.sgd.clip}};
  return parse_optimizer(p, it, "sgd", cn_nt_sgd_labels, &it->u.sgd.expr, 5, opts);
}

static bool parse_adam(parser *p, cn_nt_item *it) {
  const option opts[] = {{"learning_rate", &it->u.adam.learning_rate},
                         {"beta1", &it->u.adam.beta1},
                         {"beta2", &it->u.adam.beta2},
                         {"eps", &it->u.adam.eps},
                         {"weight_decay", &it->u.adam.weight_decay},
                         {"decoupled", &it->u.adam.decoupled},
                         {"clip", &it->u.adam.clip},
                         {"decay_matrices_only", &it->u.adam.decay_matrices_only}};
  return parse_optimizer(p, it, "adam", cn_nt_adam_labels, &it->u.adam.expr, 8, opts);
}

/* shuffle t ~epoch:e, checkpoint "file" loss ~epoch:e, save_npy "file" t. The file is one
 * argument (a string applied to the next one would be an inline declaration); an application
 * written as the tensor stops at ~epoch, which is required. */
static bool parse_data_statement(parser *p, cn_nt_item *it, const char *what) {
  ntp_next(p);
  if (it->kind != CN_NT_ITEM_SHUFFLE && !(it->u.data.file = ntp_parse_arg(p))) return false;
  if (it->kind == CN_NT_ITEM_SAVE_NPY) return (it->u.data.expr = ntp_parse_expr(p)) != NULL;
  const char *const *saved = p->stop_labels;
  p->stop_labels = cn_nt_epoch_labels;
  it->u.data.expr = ntp_parse_binary(p, 1);
  p->stop_labels = saved;
  const option opts[] = {{"epoch", &it->u.data.epoch}};
  if (!it->u.data.expr || !parse_options(p, what, 1, opts)) return false;
  if (!it->u.data.epoch) {
    ntp_error(p, it->pos, "%s needs ~epoch:VALUE", what);
    return false;
  }
  return true;
}

/* print e [~full:b] [~precision:n]: an application written as e stops before these labels. */
static bool parse_print(parser *p, cn_nt_item *it) {
  ntp_next(p);
  const char *const *saved = p->stop_labels;
  p->stop_labels = cn_nt_print_labels;
  it->u.print.expr = ntp_parse_expr(p);
  p->stop_labels = saved;
  const option opts[] = {{"full", &it->u.print.full}, {"precision", &it->u.print.precision}};
  return it->u.print.expr && parse_options(p, "print", 2, opts);
}

/* plot "file" (~x:e | ~ascii:e | ~matrix:e | ("name", e))*: ~x and one series at least. */
static bool parse_plot(parser *p, cn_nt_item *it) {
  ntp_next(p);
  if (!(it->u.plot.file = ntp_parse_arg(p))) return false;
  const option opts[] = {
      {"x", &it->u.plot.x}, {"ascii", &it->u.plot.ascii}, {"matrix", &it->u.plot.matrix}};
  vec names = {0}, values = {0};
  for (;;) {
    if (!parse_options(p, "plot", 3, opts)) return false;
    if (!ntp_at_kind(p, NT_TK_LPAREN)) break;
    cn_nt_expr *series = ntp_parse_arg(p);
    if (!series) return false;
    if (series->kind != CN_NT_TUPLE || series->u.items.n != 2) {
      ntp_error(p, series->pos, "%s",
                "a series is (\"name\", value): a name and a number or a one-cell tensor");
      return false;
    }
    if (!ntp_push(p, &names, &series->u.items.items[0], sizeof(cn_nt_expr *)) ||
        !ntp_push(p, &values, &series->u.items.items[1], sizeof(cn_nt_expr *)))
      return false;
  }
  cn_nt_expr *m = it->u.plot.matrix;
  if (m && m->kind == CN_NT_TUPLE) {
    if (m->u.items.n != 2) {
      ntp_error(p, m->pos, "%s", "~matrix is a tensor or (\"title\", tensor)");
      return false;
    }
    it->u.plot.matrix_title = m->u.items.items[0];
    it->u.plot.matrix = m->u.items.items[1];
  }
  if (!it->u.plot.x) {
    ntp_error(p, it->pos, "%s", "plot needs ~x:VALUE (the points' x, a number)");
    return false;
  }
  if (names.n == 0) {
    ntp_expected(p, "a series (\"name\", value) after plot's file");
    return false;
  }
  it->u.plot.n_series = names.n;
  it->u.plot.names = names.v;
  it->u.plot.values = values.v;
  return true;
}

/* ---- printf formats ---------------------------------------------------------------------------
 */

/* Where the decoded bytes of a string token lie in the script: the raw text of one decoded byte
 * is one character or one escape; a backslash-newline (and the next line's leading blanks)
 * decodes to nothing. */
typedef struct {
  const char *raw;
  int line, col;
} fmt_cursor;

static void cursor_skip(fmt_cursor *c) {
  while (c->raw[0] == '\\' && c->raw[1] == '\n') {
    c->raw += 2;
    c->line++;
    c->col = 1;
    while (*c->raw == ' ' || *c->raw == '\t') {
      c->raw++;
      c->col++;
    }
  }
}

static void cursor_step(fmt_cursor *c) {
  cursor_skip(c);
  if (c->raw[0] == '\n') {
    c->raw++;
    c->line++;
    c->col = 1;
    return;
  }
  int width = 1;
  if (c->raw[0] == '\\') width = c->raw[1] == 'x' || (c->raw[1] >= '0' && c->raw[1] <= '9') ? 4 : 2;
  c->raw += width;
  c->col += width;
}

/* Up to two digits at s[*j] (a width or a precision); false past two. */
static bool format_digits(const char *s, size_t *j) {
  size_t start = *j;
  while (s[*j] >= '0' && s[*j] <= '9') ++*j;
  return *j - start <= 2;
}

/* The conversion at s[i] == '%' (not "%%"): its end in *end (after the conversion character);
 * false with a message at `at`. */
static bool format_conversion(parser *p, const char *s, size_t i, size_t *end, cn_nt_pos at) {
  size_t j = i + 1;
  while (s[j] && strchr("-+ 0#", s[j])) j++;
  size_t flags_end = j;
  bool short_numbers = format_digits(s, &j);
  if (s[j] == '.') {
    j++;
    short_numbers &= format_digits(s, &j);
  }
  char conv = s[j];
  if (!conv || !strchr("difFeEgGsb", conv)) {
    if (!conv)
      ntp_error(p, at, "the format ends inside the conversion '%.*s'", (int)(j - i), s + i);
    else
      ntp_error(p, at,
                "unknown printf conversion '%.*s' (the conversions are %%d %%i %%f %%F %%e %%E "
                "%%g %%G %%s %%b, with flags -+ 0#, a width and a .precision; %%%% is a "
                "percent sign)",
                (int)(j - i + 1), s + i);
    return false;
  }
  if (!short_numbers) {
    ntp_error(p, at, "the width and precision of '%.*s' have at most two digits", (int)(j - i + 1),
              s + i);
    return false;
  }
  /* C leaves these flags undefined for the conversion: refuse them */
  const char *allowed = strchr("di", conv) ? "-+ 0" : strchr("sb", conv) ? "-" : "-+ 0#";
  for (size_t k = i + 1; k < flags_end; k++)
    if (!strchr(allowed, s[k])) {
      ntp_error(p, at, "the flag '%c' does not apply to %%%c", s[k], conv);
      return false;
    }
  *end = j + 1;
  return true;
}

/* Ends the literal text gathered in *lit as a part. */
static bool flush_text(parser *p, cn_sbuf *lit, vec *parts, cn_nt_pos at) {
  if (lit->len == 0) return true;
  cn_nt_fmt part = {0, cn_sbuf_finish(p->ctx, lit), at};
  if (!part.text) p->failed = true;
  return part.text && ntp_push(p, parts, &part, sizeof part);
}

/* The format of printf (token t): literal pieces and conversions, each conversion positioned at
 * its '%' in the script. */
static bool parse_format(parser *p, const cn_nt_token *t, cn_nt_item *it) {
  const char *s = t->text;
  fmt_cursor c = {p->src->text + t->offset + 1, t->line, t->col + 1};
  cn_nt_pos text_at = ntp_pos_of(p, t);
  vec parts = {0};
  cn_sbuf lit = {0};
  for (size_t i = 0; s[i];) {
    if (s[i] != '%' || s[i + 1] == '%') {
      cn_sbuf_putc(&lit, s[i]);
      size_t width = s[i] == '%' ? 2 : 1;
      for (size_t k = 0; k < width; k++) cursor_step(&c);
      i += width;
      continue;
    }
    cursor_skip(&c);
    cn_nt_pos at = {p->src, c.line, c.col};
    size_t end;
    if (!format_conversion(p, s, i, &end, at) || !flush_text(p, &lit, &parts, text_at)) break;
    cn_sbuf conv = {0};
    cn_sbuf_printf(&conv, "%.*s", (int)(end - i), s + i);
    cn_nt_fmt part = {s[end - 1], cn_sbuf_finish(p->ctx, &conv), at};
    if (!part.text || !ntp_push(p, &parts, &part, sizeof part)) {
      p->failed = true;
      break;
    }
    for (; i < end; i++) cursor_step(&c);
  }
  if (p->failed || !flush_text(p, &lit, &parts, text_at)) {
    cn_sbuf_free(&lit);
    return false;
  }
  it->u.printf_.n_parts = parts.n;
  it->u.printf_.parts = parts.v;
  return true;
}

/* printf "format" arg*: one argument per conversion. */
static bool parse_printf(parser *p, cn_nt_item *it) {
  ntp_next(p);
  if (!ntp_at_kind(p, NT_TK_STRING)) {
    ntp_expected(p, "a format string after printf (as in printf \"step %d\\n\" i)");
    return false;
  }
  cn_nt_token format = ntp_next(p);
  it->u.printf_.format = format.text;
  it->u.printf_.format_pos = ntp_pos_of(p, &format);
  if (!parse_format(p, &format, it)) return false;
  vec args = {0};
  while (!p->failed && ntp_starts_arg(p)) {
    cn_nt_expr *e = ntp_parse_arg(p);
    if (!e || !ntp_push(p, &args, &e, sizeof e)) return false;
  }
  if (p->failed) return false;
  int n_conv = 0;
  const cn_nt_fmt *missing = NULL;
  for (int i = 0; i < it->u.printf_.n_parts; i++)
    if (it->u.printf_.parts[i].conv && n_conv++ == args.n && !missing)
      missing = &it->u.printf_.parts[i];
  cn_nt_expr **as = args.v;
  if (args.n > n_conv) {
    ntp_error(p, as[n_conv]->pos, "printf's format has %d conversion%s: this argument has none",
              n_conv, n_conv == 1 ? "" : "s");
    return false;
  }
  if (missing) {
    ntp_error(p, missing->pos,
              "the conversion '%s' has no argument (printf takes one argument per conversion, "
              "after the format)",
              missing->text);
    return false;
  }
  it->u.printf_.n_args = args.n;
  it->u.printf_.args = as;
  return true;
}

/* ---- Blocks: for, if ------------------------------------------------------------------------ */

static bool parse_item(parser *p, cn_nt_item *it);
static void check_item_end(parser *p, const cn_nt_item *it);

/* The statements of a block up to `close` or `also` (not consumed; `also` may be EOF: none),
 * for the block `it` opened by `opener` ("for", "if"). */
static bool parse_body(parser *p, const cn_nt_item *it, const char *opener, nt_tk_kind close,
                       nt_tk_kind also, const char *closing, int *n, cn_nt_item **items) {
  vec body = {0};
  while (!p->failed && !ntp_at_kind(p, close) && !(also != NT_TK_EOF && ntp_at_kind(p, also))) {
    if (ntp_at_kind(p, NT_TK_SEMISEMI)) {
      ntp_next(p);
      continue;
    }
    nt_tk_kind k = ntp_peek(p, 0)->kind;
    if (k == NT_TK_EOF || k == NT_TK_DONE || k == NT_TK_ELSE || k == NT_TK_END) {
      char what[120];
      snprintf(what, sizeof what, "%s to close the '%s' at line %d, column %d", closing, opener,
               it->pos.line, it->pos.col);
      ntp_expected(p, what);
      break;
    }
    cn_nt_item item;
    memset(&item, 0, sizeof item);
    if (!parse_item(p, &item)) break;
    check_item_end(p, &item);
    if (!p->failed) ntp_push(p, &body, &item, sizeof item);
  }
  *n = body.n;
  *items = body.v;
  return !p->failed;
}

/* for NAME = e to e [~devices:e] [progress ~loss:e ~batch_size:e] do item* done. */
static bool parse_for(parser *p, cn_nt_item *it) {
  if (p->loops == CN_NT_MAX_LOOP_DEPTH) {
    ntp_error(p, it->pos, "for loops nested too deeply (more than %d)", CN_NT_MAX_LOOP_DEPTH);
    return false;
  }
  ntp_next(p);
  const cn_nt_token *t = ntp_peek(p, 0);
  if (t->kind != NT_TK_IDENT || strcmp(t->text, "_") == 0) {
    ntp_expected(p, "the loop's index name after 'for'");
    return false;
  }
  it->u.for_.name = t->text;
  it->u.for_.name_pos = ntp_pos_of(p, t);
  ntp_next(p);
  if (!ntp_expect_equal(p, "after the loop's index name") || !(it->u.for_.from = ntp_parse_expr(p)))
    return false;
  if (!ntp_at_kind(p, NT_TK_TO)) {
    ntp_expected(p, "'to' after the loop's first value");
    return false;
  }
  ntp_next(p);
  const char *const *saved = p->stop_labels;
  p->stop_labels = cn_nt_for_labels; /* `to B ~devices:N`: B's application stops at the label */
  it->u.for_.to = ntp_parse_expr(p);
  p->stop_labels = saved;
  const option devices[] = {{"devices", &it->u.for_.devices}};
  if (!it->u.for_.to || !parse_options(p, "for", 1, devices)) return false;
  if (ntp_at_kind(p, NT_TK_PROGRESS)) {
    cn_nt_token progress = ntp_next(p);
    it->u.for_.progress = true;
    it->u.for_.progress_pos = ntp_pos_of(p, &progress);
    const option opts[] = {{"loss", &it->u.for_.loss}, {"batch_size", &it->u.for_.batch_size}};
    if (!parse_options(p, "progress", 2, opts)) return false;
  }
  if (!ntp_at_kind(p, NT_TK_DO)) {
    ntp_expected(p, it->u.for_.progress ? "'do' after progress and its options"
                                        : "'do' after the loop's last value");
    return false;
  }
  ntp_next(p);
  p->loops++;
  nt_tk_kind inner = p->inner;
  p->inner = NT_TK_FOR;
  bool ok = parse_body(p, it, "for", NT_TK_DONE, NT_TK_EOF, "'done'", &it->u.for_.n_items,
                       &it->u.for_.items);
  p->loops--;
  p->inner = inner;
  if (ok) ntp_next(p);
  return ok;
}

/* if cond then item* [else item*] end. */
static bool parse_if(parser *p, cn_nt_item *it) {
  if (p->ifs == CN_NT_MAX_IF_DEPTH) {
    ntp_error(p, it->pos, "if statements nested too deeply (more than %d)", CN_NT_MAX_IF_DEPTH);
    return false;
  }
  ntp_next(p);
  if (!(it->u.if_.cond = ntp_parse_binary(p, 1))) return false;
  if (!ntp_at_kind(p, NT_TK_THEN)) {
    ntp_expected(p, "'then' after the condition");
    return false;
  }
  ntp_next(p);
  p->ifs++;
  nt_tk_kind inner = p->inner;
  p->inner = NT_TK_IF;
  bool ok = parse_body(p, it, "if", NT_TK_END, NT_TK_ELSE, "'else' or 'end'", &it->u.if_.n_then,
                       &it->u.if_.then_items);
  if (ok && ntp_at_kind(p, NT_TK_ELSE)) {
    ntp_next(p);
    it->u.if_.has_else = true;
    ok = parse_body(p, it, "if", NT_TK_END, NT_TK_EOF, "'end'", &it->u.if_.n_else,
                    &it->u.if_.else_items);
  }
  p->ifs--;
  p->inner = inner;
  if (ok) ntp_next(p);
  return ok;
}

/* ---- Items ---------------------------------------------------------------------------------- */

static bool parse_item(parser *p, cn_nt_item *it) {
  const cn_nt_token *t = ntp_peek(p, 0);
  it->pos = ntp_pos_of(p, t);
  if (p->inner != NT_TK_EOF && (t->kind == NT_TK_LET || t->kind == NT_TK_SET_SEED)) {
    bool loop = p->inner == NT_TK_FOR;
    ntp_error(p, it->pos,
              "%s body holds print, printf, backprop, run, sgd, adam, shuffle, checkpoint, "
              "save_npy, plot, if and for statements: bind names and set the seed before the %s",
              loop ? "a loop" : "an if", loop ? "loop" : "if");
    return false;
  }
  switch (t->kind) {
  case NT_TK_FOR: it->kind = CN_NT_ITEM_FOR; return parse_for(p, it);
  case NT_TK_IF: it->kind = CN_NT_ITEM_IF; return parse_if(p, it);
  case NT_TK_LET: it->kind = CN_NT_ITEM_LET; return parse_let_item(p, it);
  case NT_TK_PRINT: it->kind = CN_NT_ITEM_PRINT; return parse_print(p, it);
  case NT_TK_BACKPROP:
    it->kind = CN_NT_ITEM_BACKPROP;
    ntp_next(p);
    return (it->u.expr = ntp_parse_expr(p)) != NULL;
  case NT_TK_PRINTF: it->kind = CN_NT_ITEM_PRINTF; return parse_printf(p, it);
  case NT_TK_RUN:
    it->kind = CN_NT_ITEM_RUN;
    ntp_next(p);
    return (it->u.expr = ntp_parse_app(p)) != NULL;
  case NT_TK_SGD:
  case NT_TK_ADAM:
    it->kind = t->kind == NT_TK_SGD ? CN_NT_ITEM_SGD : CN_NT_ITEM_ADAM;
    ntp_next(p);
    return it->kind == CN_NT_ITEM_SGD ? parse_sgd(p, it) : parse_adam(p, it);
  case NT_TK_SHUFFLE: it->kind = CN_NT_ITEM_SHUFFLE; return parse_data_statement(p, it, "shuffle");
  case NT_TK_CHECKPOINT:
    it->kind = CN_NT_ITEM_CHECKPOINT;
    return parse_data_statement(p, it, "checkpoint");
  case NT_TK_SAVE_NPY:
    it->kind = CN_NT_ITEM_SAVE_NPY;
    return parse_data_statement(p, it, "save_npy");
  case NT_TK_PLOT: it->kind = CN_NT_ITEM_PLOT; return parse_plot(p, it);
  case NT_TK_SET_SEED:
    it->kind = CN_NT_ITEM_SET_SEED;
    ntp_next(p);
    if (!ntp_at_kind(p, NT_TK_INT)) {
      ntp_expected(p, "a non-negative integer literal after set_seed");
      return false;
    }
    it->u.seed = ntp_next(p).ival;
    return true;
  default:
    ntp_expected(p, "a statement (let, print, printf, backprop, run, sgd, adam, shuffle, "
                    "checkpoint, save_npy, plot, set_seed, for or if)");
    return false;
  }
}

static bool starts_item(parser *p) {
  switch (ntp_peek(p, 0)->kind) {
  case NT_TK_EOF:
  case NT_TK_SEMISEMI:
  case NT_TK_LET:
  case NT_TK_PRINT:
  case NT_TK_PRINTF:
  case NT_TK_BACKPROP:
  case NT_TK_RUN:
  case NT_TK_SGD:
  case NT_TK_ADAM:
  case NT_TK_SHUFFLE:
  case NT_TK_CHECKPOINT:
  case NT_TK_SAVE_NPY:
  case NT_TK_PLOT:
  case NT_TK_SET_SEED:
  case NT_TK_FOR:
  case NT_TK_IF: return true;
  case NT_TK_DONE: return p->loops > 0;
  case NT_TK_ELSE:
  case NT_TK_END: return p->ifs > 0;
  default: return false;
  }
}

/* After a statement: the next one, ';;' or the end. */
static void check_item_end(parser *p, const cn_nt_item *it) {
  if (p->failed || starts_item(p)) return;
  const cn_nt_token *t = ntp_peek(p, 0);
  char buf[80];
  const char *hint = "";
  if (t->kind == NT_TK_IN)
    hint = " (a top-level let has no 'in': its binding holds for the rest of the script)";
  else if (t->kind == NT_TK_OP && cn_nt_assign_op(t->text, NULL, NULL))
    hint = it->kind == CN_NT_ITEM_LET && it->u.let.ext == CN_NT_LET_CD
               ? " (an assignment has one assignment operator; separate assignments with ';')"
               : " (assignments belong in let%cd)";
  ntp_error(p, ntp_pos_of(p, t), "unexpected %s after the end of the statement%s",
            ntp_describe(p, t, buf, sizeof buf), hint);
}

cn_nt_program *cn_nt_parse_program(cn_ctx *ctx, const char *file, const char *text) {
  parser p;
  if (!ntp_start(&p, ctx, file, text)) return NULL;
  vec items = {0};
  while (!p.failed) {
    while (ntp_at_kind(&p, NT_TK_SEMISEMI)) ntp_next(&p);
    if (ntp_at_kind(&p, NT_TK_EOF)) break;
    cn_nt_item it;
    memset(&it, 0, sizeof it);
    if (!parse_item(&p, &it)) break;
    check_item_end(&p, &it);
    if (!p.failed) ntp_push(&p, &items, &it, sizeof it);
  }
  if (p.failed) return NULL;
  cn_nt_program *prog = cn_alloc(ctx, sizeof *prog);
  if (!prog) return NULL;
  prog->src = p.src;
  prog->n_items = items.n;
  prog->items = items.v;
  return prog;
}
