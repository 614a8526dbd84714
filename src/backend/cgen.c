/* C source generation for the generated-C backend: one loop-IR procedure becomes a C11 translation
 * unit with the numeric prelude (builtins.h), a static function doing the work and an exported
 * entry point taking the buffers and free-symbol values as arrays. A long procedure instead gets
 * one function per distinct top-level statement (kernels, shared by the statements that differ only
 * in the buffers and static indices they name) and steps calling them in order, so that the C
 * compiler's time stays linear in the routine (see "Routines as kernels").
 *
 * The text is deterministic (a function of the procedure, the node geometry and the symbol names
 * only) because it doubles as the compile-cache key and as the golden text of tests. Invariants
 * of the output: every identifier the procedure contributes (buffer parameters, loop variables,
 * free-symbol parameters) is distinct from the others, from C keywords, from the names the
 * generated expressions call (the ops' templates, the math library, the prelude's cn_ helpers and
 * the standard macros the prelude's headers define), so no user label or symbol name can break
 * compilation; the routine's name (a C name, cn_is_c_name) is only ever spelled with a suffix
 * (NAME_body, NAME_entry), so no name of the C library can clash with it; free text (a %cd
 * comment) reaches the file only through cn_sbuf_c_comment_text, inert inside a comment; cell
 * offsets are one folded linear expression in the padded row-major buffer; every conversion between
 * precisions goes through cn_conv_c, every load and store through cn_load_c / cn_store_c, so the
 * semantics stay those of src/numeric; loop bounds and guards are int64_t expressions over loop
 * variables and static indices, a bound with a divisor through the prelude's exact cn_ceil_div_i64,
 * several bounds combined by cn_max_i64 / cn_min_i64 (pure functions: the compiler hoists an upper
 * bound out of the loop test). */
#include "backend/cgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The generator's own block-local names: the "cn_" prefix is never given to user names. */
#define CGEN_LANES "cn_lanes"
#define CGEN_LANE  "cn_lane"

/* The position of a symbol of the procedure in its symbol list, where its tables keep it. */
static int sym_slot(const cgen *g, cn_symbol sym) {
  int slot = cn_ll_symbol_slot(&g->symbols, sym);
  CN_ASSERT(slot >= 0); /* the list holds every symbol the procedure names */
  return slot;
}

static const char *sym_name(const cgen *g, cn_symbol sym) {
  return g->sym_names[sym_slot(g, sym)];
}

const char *cn_cgen_sym_name(const cgen *g, cn_symbol sym) {
  return sym_name(g, sym);
}

/* ---- Identifiers ---- */

static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
static bool is_upper_word(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || is_digit(*s) || *s == '_')) return false;
  return true;
}

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Prefixes of the object-like macros <stdint.h> and <math.h> define (INT64_MAX, UINT32_C, FP_NAN,
 * HUGE_VALF, M_PI, ...): an all-capitals name starting with one of them could be a macro. */
static bool looks_like_std_macro(const char *s) {
  static const char *const prefixes[] = {"INT",   "UINT", "PTRDIFF_", "SIZE_", "WCHAR_",
                                         "WINT_", "SIG_", "FP_",      "M_",    "MATH_",
                                         "HUGE_", "FLT_", "DBL_",     "LDBL_", "CMPLX"};
  if (!is_upper_word(s)) return false;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (starts_with(s, prefixes[i])) return true;
  return false;
}

/* A C identifier made of `text`: ASCII letters and digits kept, anything else '_'; an "n" is
 * prefixed when the result is no name cn_is_c_name accepts (empty, starting with a digit or an
 * underscore, or of the prelude's cn_ / CN_ family: the one rule for names, shared with routine
 * and export names) or has the shape of a standard macro, so that appending a suffix always makes
 * a name free. Arena-owned; NULL on exhaustion. */
static char *shape_identifier(cn_ctx *ctx, const char *text, const char *suffix) {
  size_t n = strlen(text), k = strlen(suffix);
  char *s = cn_alloc(ctx, n + k + 2);
  if (!s) return NULL;
  char *p = s + 1;
  for (size_t i = 0; i < n; i++) p[i] = is_alpha(text[i]) || is_digit(text[i]) ? text[i] : '_';
  memcpy(p + n, suffix, k + 1);
  if (!cn_is_c_name(p) || looks_like_std_macro(p)) {
    s[0] = 'n';
    return s;
  }
  return p;
}

/* True if name is one of the space-separated words of list. */
static bool in_word_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    const char *end = p;
    while (*end && *end != ' ') end++;
    if ((size_t)(end - p) == n && memcmp(p, name, n) == 0) return true;
    p = end;
  }
  return false;
}

/* Names of <math.h>, <complex.h> and <tgmath.h>: functions, function-like and object-like macros
 * (the float and long double variants of the functions end in 'f' and 'l'). */
bool cn_cgen_is_math_name(const char *name) {
  static const char names[] =
      "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp "
      "ilogb ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc "
      "lgamma tgamma ceil floor nearbyint rint lrint llrint round lround llround trunc fmod "
      "remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma carg cimag conj cproj "
      "creal cabs cexp clog cpow csqrt csin ccos ctan casin cacos catan csinh ccosh ctanh casinh "
      "cacosh catanh isnan isinf isfinite isnormal signbit fpclassify isgreater isgreaterequal "
      "isless islessequal islessgreater isunordered math_errhandling complex imaginary I INFINITY "
      "NAN";
  if (in_word_list(names, name)) return true;
  size_t n = strlen(name);
  char base[32];
  if (n < 2 || n > sizeof base || (name[n - 1] != 'f' && name[n - 1] != 'l')) return false;
  memcpy(base, name, n - 1);
  base[n - 1] = '\0';
  return in_word_list(names, base);
}

/* C11 keywords, plus the C23 ones and the <stdbool.h> / <stdalign.h> / <stdnoreturn.h> macros,
 * so the text stays valid for any -std the user chooses. */
static bool is_keyword(const char *name) {
  static const char keywords[] =
      "auto break case char const continue default do double else enum extern float for goto if "
      "inline int long register restrict return short signed sizeof static struct switch typedef "
      "union unsigned void volatile while bool true false alignas alignof noreturn static_assert "
      "thread_local nullptr constexpr typeof typeof_unqual asm";
  return in_word_list(keywords, name);
}

/* True if `name` is called, as name(...), in one of the op templates of ops.def: generated
 * expressions spell those calls, so a variable of that name would shadow them. */
static bool called_by_op_template(const char *name) {
  size_t n = strlen(name);
  for (int op = 0; op < CN_OP_COUNT; op++) {
    const char *templates[3] = {cn_op_table[op].fexpr, cn_op_table[op].iexpr,
                                cn_op_table[op].bexpr};
    for (int t = 0; t < 3; t++) {
      const char *s = templates[t];
      while (*s) {
        if (!is_alpha(*s) && *s != '_') {
          s++;
          continue;
        }
        const char *start = s;
        while (is_alpha(*s) || is_digit(*s) || *s == '_') s++;
        const char *after = s;
        while (*after == ' ') after++;
        if ((size_t)(s - start) == n && memcmp(start, name, n) == 0 && *after == '(') return true;
      }
    }
  }
  return false;
}

/* A name that generated code may not use for a variable. Appending "_<digits>" or "_" makes any
 * reserved name free (shape_identifier already excluded the prefix-reserved families). */
static bool is_reserved(const char *name) {
  size_t n = strlen(name);
  return is_keyword(name) || cn_cgen_is_math_name(name) || called_by_op_template(name) ||
         (n >= 2 && name[n - 2] == '_' && name[n - 1] == 't'); /* int64_t, float_t, ... */
}

/* Buffer names: label + "_" + id (+ "_merge"). The trailing id makes them distinct from each
 * other, and from every name of is_reserved, which never ends in a digit or "_merge". */
static cn_status name_params(cgen *g) {
  const cn_ll_proc *proc = g->proc;
  for (int k = 0; k < proc->n_params; k++) {
    const cn_node *node = proc->params[k].node;
    char suffix[48];
    snprintf(suffix, sizeof suffix, "_%d%s", node->id, proc->params[k].merge ? "_merge" : "");
    g->param_names[k] = shape_identifier(g->ctx, node->label ? node->label : "", suffix);
    if (!g->param_names[k]) return g->ctx->status;
  }
  return CN_OK;
}

static void mark_access(cgen *g, int param) {
  CN_ASSERT(param >= 0 && param < g->proc->n_params);
  g->accessed[param] = true;
}

static void mark_expr(cgen *g, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: mark_access(g, e->u.get.param); return;
  case CN_LE_CONST:
  case CN_LE_INDEX: return;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++) mark_expr(g, e->u.op.args[a]);
    return;
  }
  CN_ASSERT(!"unknown expression kind");
}

/* Marks the params the statement reads or writes, and those it writes. */
static void mark_stmt(cgen *g, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) mark_stmt(g, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: mark_stmt(g, s->u.loop.body); return;
  case CN_LL_IF: mark_stmt(g, s->u.guard.body); return;
  case CN_LL_SET:
    mark_access(g, s->u.set.param);
    mark_expr(g, s->u.set.value);
    g->written[s->u.set.param] = true;
    return;
  case CN_LL_SET_VEC:
    mark_access(g, s->u.vec.param);
    mark_expr(g, s->u.vec.arg);
    g->written[s->u.vec.param] = true;
    return;
  case CN_LL_GEMM: mark_stmt(g, s->u.gemm.nest); return;
  case CN_LL_LET:
    mark_access(g, s->u.let.param);
    mark_stmt(g, s->u.let.body);
    return;
  }
  CN_ASSERT(!"unknown statement kind");
}

/* Symbol names: the symbol's own name when it is free; "_<id>" appended when two symbols of the
 * routine share it or it clashes with a buffer or a reserved name; then, in symbol order, "_"
 * appended while a (pathological) clash remains. Deterministic: depends on names and ids only.
 * The clashes are found through maps (how many symbols share a base name; which names buffers and
 * earlier symbols took), so naming stays linear in the symbols and buffers of the routine. */
static cn_status name_symbols(cgen *g) {
  static char buffer_tag, symbol_tag, shared_tag; /* their addresses tag map values */
  cn_ctx *ctx = g->ctx;
  int n = g->symbols.n; /* ascending: the loops below go in symbol order */
  const char **base = cn_alloc(ctx, sizeof(char *) * (size_t)(n > 0 ? n : 1));
  g->sym_names = cn_alloc(ctx, sizeof(char *) * (size_t)(n > 0 ? n : 1));
  if (!base || !g->sym_names) return ctx->status;
  cn_map bases = {.strings = true}; /* base name -> its symbol, or &shared_tag for several */
  for (int k = 0; k < n; k++) {
    if (!(base[k] = shape_identifier(ctx, cn_symbol_name(ctx, g->symbols.syms[k]), "")))
      return ctx->status;
    void *first = cn_map_get(&bases, base[k]);
    if (!cn_map_put(ctx, &bases, base[k], first ? (void *)&shared_tag : (void *)&base[k]))
      return ctx->status;
  }
  cn_map taken = {.strings = true}; /* a buffer's name -> &buffer_tag, a symbol's -> &symbol_tag */
  for (int k = 0; k < g->proc->n_params; k++)
    if (!cn_map_put(ctx, &taken, g->param_names[k], &buffer_tag)) return ctx->status;
  for (int k = 0; k < n; k++) {
    bool clash = is_reserved(base[k]) || cn_map_get(&taken, base[k]) == &buffer_tag ||
                 cn_map_get(&bases, base[k]) == &shared_tag;
    cn_sbuf name = {0};
    cn_sbuf_puts(&name, base[k]);
    if (clash) cn_sbuf_printf(&name, "_%d", g->symbols.syms[k]);
    while (!name.failed && (is_reserved(name.data) || cn_map_get(&taken, name.data)))
      cn_sbuf_putc(&name, '_');
    if (!(g->sym_names[k] = cn_sbuf_finish(ctx, &name)) ||
        !cn_map_put(ctx, &taken, g->sym_names[k], &symbol_tag))
      return ctx->status;
  }
  return CN_OK;
}

/* ---- Linear offset expressions ---- */

#define CGEN_MAX_TERMS (CN_MAX_RANK * CN_MAX_AFFINE_TERMS)

/* sum coeffs[t] * syms[t] + constant, one term per symbol, in order of first appearance. */
typedef struct {
  int n;
  cn_symbol syms[CGEN_MAX_TERMS];
  int64_t coeffs[CGEN_MAX_TERMS];
  int64_t constant;
} linear;

static void linear_add_term(linear *l, cn_symbol sym, int64_t coeff) {
  for (int t = 0; t < l->n; t++)
    if (l->syms[t] == sym) {
      l->coeffs[t] += coeff;
      return;
    }
  CN_ASSERT(l->n < CGEN_MAX_TERMS);
  l->syms[l->n] = sym;
  l->coeffs[l->n++] = coeff;
}

/* Adds scale * idx. */
static void linear_add_index(linear *l, const cn_index *idx, int64_t scale) {
  switch (idx->kind) {
  case CN_IDX_FIXED: break;
  case CN_IDX_ITER: linear_add_term(l, idx->syms[0], scale); break;
  case CN_IDX_AFFINE:
    CN_ASSERT(idx->n_terms >= 1 && idx->n_terms <= CN_MAX_AFFINE_TERMS);
    for (int t = 0; t < idx->n_terms; t++) linear_add_term(l, idx->syms[t], idx->coeffs[t] * scale);
    break;
  }
  l->constant += idx->offset * scale;
}

static void print_term(cn_sbuf *sb, bool first, int64_t coeff, const char *name) {
  if (!first)
    cn_sbuf_puts(sb, coeff < 0 ? " - " : " + ");
  else if (coeff < 0)
    cn_sbuf_putc(sb, '-');
  if (cn_i64_magnitude(coeff) != 1)
    cn_sbuf_printf(sb, "%llu * ", (unsigned long long)cn_i64_magnitude(coeff));
  cn_sbuf_puts(sb, name);
}

/* Prints the expression ("5 * i + k", "2 * o + k + 1", "0"); `extra` (may be NULL) is a further
 * unit term placed before the constant. */
static void print_linear(const cgen *g, cn_sbuf *sb, const linear *l, const char *extra) {
  bool first = true;
  for (int t = 0; t < l->n; t++) {
    if (l->coeffs[t] == 0 || (g->flat_outer && l->syms[t] == g->flat_outer->u.loop.sym)) continue;
    print_term(sb, first, l->coeffs[t], sym_name(g, l->syms[t]));
    first = false;
  }
  if (extra) {
    print_term(sb, first, 1, extra);
    first = false;
  }
  if (first)
    cn_sbuf_printf(sb, "%lld", (long long)l->constant);
  else if (l->constant != 0)
    cn_sbuf_printf(sb, " %c %llu", l->constant < 0 ? '-' : '+',
                   (unsigned long long)cn_i64_magnitude(l->constant));
}

/* "buf[offset]" of a cell: sum_d (idx_d + left_d) * stride_d, plus `extra`. */
static void print_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx,
                       const char *extra) {
  const cn_node *node = g->proc->params[param].node;
  linear l = {0};
  for (int d = 0; d < node->rank; d++) {
    linear_add_index(&l, &idx[d], g->strides[param][d]);
    l.constant += node->pad[d][0] * g->strides[param][d];
  }
  cn_sbuf_printf(sb, "%s[", g->param_names[param]);
  print_linear(g, sb, &l, extra);
  cn_sbuf_putc(sb, ']');
}

void cn_cgen_base_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx,
                       const cn_ll_stmt *const *loops, int n_loops) {
  const cn_node *node = g->proc->params[param].node;
  linear l = {0};
  for (int d = 0; d < node->rank; d++) {
    linear_add_index(&l, &idx[d], g->strides[param][d]);
    l.constant += node->pad[d][0] * g->strides[param][d];
  }
  for (int t = 0; t < l.n; t++)
    for (int k = 0; k < n_loops; k++)
      if (l.syms[t] == loops[k]->u.loop.sym) {
        l.constant += l.coeffs[t] * loops[k]->u.loop.from;
        l.coeffs[t] = 0; /* print_linear skips it */
      }
  cn_sbuf_printf(sb, "&%s[", g->param_names[param]);
  print_linear(g, sb, &l, NULL);
  cn_sbuf_putc(sb, ']');
}

void cn_cgen_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx) {
  print_cell(g, sb, param, idx, NULL);
}

/* ---- Expressions and statements ---- */

static const char *text_of(const cn_sbuf *sb) {
  return sb->data ? sb->data : "";
}

static void emit_expr(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e);

/* The expression converted from its precision to `to`. */
static void emit_converted(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e, cn_prec to) {
  if (e->prec == to) {
    emit_expr(g, sb, e);
    return;
  }
  cn_sbuf value = {0};
  emit_expr(g, &value, e);
  if (value.failed)
    sb->failed = true;
  else
    cn_conv_c(sb, e->prec, to, text_of(&value));
  cn_sbuf_free(&value);
}

static void emit_expr(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: {
    cn_sbuf cell = {0};
    print_cell(g, &cell, e->u.get.param, e->u.get.idx, NULL);
    if (cell.failed)
      sb->failed = true;
    else
      cn_load_c(sb, g->proc->params[e->u.get.param].node->prec, text_of(&cell));
    cn_sbuf_free(&cell);
    return;
  }
  case CN_LE_CONST: cn_const_c(sb, e->prec, e->u.constant); return;
  case CN_LE_INDEX: {
    /* A value of CN_INDEX_PREC: the index wrapped to 32 bits, in its int64 compute type. */
    linear l = {0};
    linear_add_index(&l, &e->u.index, 1);
    cn_sbuf_puts(sb, "(int64_t)(uint32_t)(");
    print_linear(g, sb, &l, NULL);
    cn_sbuf_putc(sb, ')');
    return;
  }
  case CN_LE_OP: {
    cn_op op = e->u.op.op;
    int arity = cn_op_arity(op);
    cn_sbuf args[3] = {{0}};
    const char *texts[3] = {"", "", ""};
    bool failed = false;
    for (int a = 0; a < arity; a++) {
      const cn_ll_expr *arg = e->u.op.args[a];
      emit_converted(g, &args[a], arg, cn_op_operand_prec(op, e->prec, a, arg->prec));
      failed = failed || args[a].failed;
      texts[a] = text_of(&args[a]);
    }
    if (failed)
      sb->failed = true;
    else
      cn_op_c(sb, op, e->prec, texts);
    for (int a = 0; a < arity; a++) cn_sbuf_free(&args[a]);
    return;
  }
  }
  CN_ASSERT(!"unknown expression kind");
}

/* A comment statement's text (a %cd comment: the user's strings and labels) on one line, made inert
 * by the core's one escaper: it can neither end the comment, nor nest one, nor splice lines. */
static void emit_comment(cn_sbuf *sb, const char *text) {
  cn_sbuf_puts(sb, "/* ");
  cn_sbuf_c_comment_text(sb, text, strlen(text));
  cn_sbuf_puts(sb, " */\n");
}

void cn_cgen_value(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e, cn_prec to) {
  emit_converted(g, sb, e, to);
}

static void emit_set(const cgen *g, int depth, const cn_ll_stmt *s) {
  if (s == g->max_keyed) {
    cn_cgen_max_update(g, depth, s);
    return;
  }
  cn_sbuf *sb = g->out;
  int param = s->u.set.param;
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf cell = {0}, value = {0};
  print_cell(g, &cell, param, s->u.set.idx, NULL);
  emit_converted(g, &value, s->u.set.value, prec);
  if (cell.failed || value.failed) {
    sb->failed = true;
  } else {
    cn_sbuf_indent(sb, depth);
    cn_store_c(sb, prec, text_of(&cell), text_of(&value));
    cn_sbuf_puts(sb, ";\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&value);
}

/* One uint4x32 word spread over `length` consecutive cells by the prelude's vectorized helper. */
static void emit_set_vec(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int param = s->u.vec.param;
  cn_prec prec = g->proc->params[param].node->prec;
  int length = s->u.vec.length;
  CN_ASSERT(cn_op_table[s->u.vec.op].flags & CN_OPF_VEC);
  CN_ASSERT(length == cn_vec_length(prec));
  cn_sbuf cell = {0}, word = {0}, store = {0};
  print_cell(g, &cell, param, s->u.vec.idx, CGEN_LANE);
  emit_converted(g, &word, s->u.vec.arg, CN_PREC_UINT4X32);
  if (!cell.failed) cn_store_c(&store, prec, text_of(&cell), CGEN_LANES "[" CGEN_LANE "]");
  if (cell.failed || word.failed || store.failed) {
    sb->failed = true;
  } else {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "{\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "%s " CGEN_LANES "[%d];\n", cn_prec_table[prec].compute_c, length);
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "cn_u4x32_to_%s_uniform_vec(%s, " CGEN_LANES ");\n",
                   cn_prec_table[prec].name, text_of(&word));
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "for (int " CGEN_LANE " = 0; " CGEN_LANE " < %d; ++" CGEN_LANE ") %s;\n",
                   length, text_of(&store));
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&word);
  cn_sbuf_free(&store);
}

static void emit_stmt(const cgen *g, int depth, const cn_ll_stmt *s);

/* `if (0 <= 2 * i + j && 2 * i + j < 5 && j == 1) {`: each condition's expression in int64_t
 * (loop variables and static indices are int64_t; lowering keeps guarded values in range). */
static void emit_guard(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "if (");
  for (int c = 0; c < s->u.guard.n_conds; c++) {
    const cn_ll_cond *cond = &s->u.guard.conds[c];
    linear l = {0};
    linear_add_index(&l, &cond->expr, 1);
    if (c) cn_sbuf_puts(sb, " && ");
    if (cond->lo != INT64_MAX && cond->lo + 1 == cond->hi) {
      print_linear(g, sb, &l, NULL);
      cn_sbuf_printf(sb, " == %lld", (long long)cond->lo);
      continue;
    }
    cn_sbuf_printf(sb, "%lld <= ", (long long)cond->lo);
    print_linear(g, sb, &l, NULL);
    cn_sbuf_puts(sb, " && ");
    print_linear(g, sb, &l, NULL);
    cn_sbuf_printf(sb, " < %lld", (long long)cond->hi);
  }
  if (s->u.guard.n_conds == 0) cn_sbuf_puts(sb, "1");
  cn_sbuf_puts(sb, ") {\n");
  emit_stmt(g, depth + 1, s->u.guard.body);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

/* One side of a loop's range: the box's edge without bounds, else the bound, or nested
 * cn_max_i64 / cn_min_i64 calls over several; a bound with a divisor goes through
 * cn_ceil_div_i64 (exact for negative numerators, unlike C's division). In int64_t, as guards. */
static void emit_range_side(const cgen *g, int64_t edge, int n, const cn_ll_bound *bounds,
                            const char *combine) {
  cn_sbuf *sb = g->out;
  if (n == 0) {
    cn_sbuf_printf(sb, "%lld", (long long)edge);
    return;
  }
  for (int k = 0; k + 1 < n; k++) cn_sbuf_printf(sb, "%s(", combine);
  for (int k = 0; k < n; k++) {
    linear l = {0};
    linear_add_index(&l, &bounds[k].expr, 1);
    if (k) cn_sbuf_puts(sb, ", ");
    if (bounds[k].div != 1) cn_sbuf_puts(sb, "cn_ceil_div_i64(");
    print_linear(g, sb, &l, NULL);
    if (bounds[k].div != 1) cn_sbuf_printf(sb, ", %lld)", (long long)bounds[k].div);
    if (k) cn_sbuf_putc(sb, ')');
  }
}

/* ---- Parallel loops ----
 * A CN_LL_PARALLEL loop (iterations independent, loops.h) becomes a static function
 * cn_body_<k>(env, lo, hi) running iterations [from + lo, from + hi) of it (through
 * cn_range_<k>, which has the body's text unchanged), and at its place a call through the
 * per-call cn_par_t (the runtime's pool, passed to the entry point and down to the function
 * holding the loop: never a global, since two contexts may load one object) over [0, to - from),
 * or a direct call over all of it without a pool. The loop is in the routine's function (a short
 * routine) or in a kernel (a routine of kernels, see "Routines as kernels"); the environment
 * struct cn_env_<k> carries that function's parameters — the routine's buffers and free symbols,
 * or the kernel's buffers and static indices — and the enclosing loop variables, which
 * cn_range_<k> takes as parameters under their names there (restrict buffers included), so the
 * body reads them as the function does. Outlined functions are numbered in the order of the
 * routine's text and emitted before the function using them. Each iteration runs whole on one
 * thread, in the scalar order: a cell gets the same sequence of stores for any thread count.
 * Parallel marks inside an outlined body run sequentially (one level of threads). */

/* Whether some loop of `s` carries `mark`. */
static bool has_mark(const cn_ll_stmt *s, unsigned mark) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (has_mark(s->u.seq.items[i], mark)) return true;
    return false;
  case CN_LL_FOR: return (s->u.loop.marks & mark) || has_mark(s->u.loop.body, mark);
  case CN_LL_IF: return has_mark(s->u.guard.body, mark);
  case CN_LL_LET: return has_mark(s->u.let.body, mark);
  case CN_LL_GEMM: /* its function goes to the outlined text and may run on the pool */
    return mark == CN_LL_PARALLEL;
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return false;
  }
  return false;
}

static void emit_loop_body(const cgen *g, int depth, const cn_ll_stmt *s) {
  if (g->par) g->par->scope[g->par->n_scope++] = s->u.loop.sym;
  emit_stmt(g, depth + 1, s->u.loop.body);
  if (g->par) g->par->n_scope--;
}

/* `{ const int64_t s = <cell as int64>; if (0 <= s && s < bound) { body } }`: the symbol is in
 * scope of the body as a loop variable is (an outlined parallel loop inside takes it along), and
 * an index outside the table skips the body (the guard node reports it, loops.h CN_LL_LET). */
static void emit_let(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int param = s->u.let.param;
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf cell = {0}, load = {0};
  print_cell(g, &cell, param, s->u.let.idx, NULL);
  if (!cell.failed) cn_load_c(&load, prec, text_of(&cell));
  if (cell.failed || load.failed) {
    sb->failed = true;
  } else {
    const char *var = sym_name(g, s->u.let.sym);
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "{\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "const int64_t %s = ", var);
    cn_conv_c(sb, prec, CN_PREC_INT64, text_of(&load));
    cn_sbuf_puts(sb, ";\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "if (0 <= %s && %s < %lld) {\n", var, var, (long long)s->u.let.bound);
    if (g->par) g->par->scope[g->par->n_scope++] = s->u.let.sym;
    emit_stmt(g, depth + 2, s->u.let.body);
    if (g->par) g->par->n_scope--;
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_puts(sb, "}\n");
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&load);
}

/* The environment's entry types are the enclosing function's parameter types, constness
 * included (a kernel may only read a buffer the routine writes elsewhere), so copying a
 * parameter into the struct and back never drops a qualifier. */
typedef void env_entry_fn(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name);

/* Calls fn(g, sb, param, written, name) for every entry of the environment: the buffers (param
 * their position in the procedure), then the static indices and the enclosing loop variables
 * (param -1: an int64_t). */
static void each_env_entry(const cgen *g, cn_sbuf *sb, env_entry_fn *fn) {
  const cgen_par *par = g->par;
  for (int k = 0; k < par->n_params; k++)
    fn(g, sb, par->params[k], par->writes[k], g->param_names[par->params[k]]);
  for (int i = 0; i < par->n_statics; i++) fn(g, sb, -1, false, sym_name(g, par->statics[i]));
  for (int i = 0; i < par->n_scope; i++) fn(g, sb, -1, false, sym_name(g, par->scope[i]));
}

static void print_buffer_type(const cgen *g, cn_sbuf *sb, int param, bool written);

/* A member of the struct cn_env_<k>. */
static void env_field(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  cn_sbuf_puts(sb, "  ");
  if (param >= 0)
    print_buffer_type(g, sb, param, written);
  else
    cn_sbuf_puts(sb, "int64_t ");
  cn_sbuf_printf(sb, "%s;\n", name);
}

/* A parameter of the range function: restrict buffers, as the enclosing function's are. */
static void env_param(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  if (param >= 0) {
    print_buffer_type(g, sb, param, written);
    cn_sbuf_puts(sb, "restrict ");
  } else {
    cn_sbuf_puts(sb, "int64_t ");
  }
  cn_sbuf_printf(sb, "%s, ", name);
}

/* The body may not read every entry (a short routine's environment is all of its parameters). */
static void env_unused(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, "  (void)%s;\n", name);
}

/* An argument of cn_body_<k>'s call of the range function: the entry saved in the struct. */
static void env_arg(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, "cn_env->%s, ", name);
}

/* A designated initializer of the struct at the loop's place: the entry's value there. */
static void env_init(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, ".%s = %s, ", name, name);
}

/* The outlined functions of loop s, appended to the outlined text: cn_range_<k> runs iterations
 * [cn_lo, cn_hi) over the environment passed as restrict parameters, and cn_body_<k>, the pool's
 * callback, unpacks the struct into a call of it. The parameters are what carry the no-alias
 * promise: gcc ignores restrict on locals loaded from a struct, and without it (a kernel's
 * restrict parameters copied into such locals) left a conv net's hottest loop unvectorized,
 * 3 times slower on one thread; inlined into cn_body_<k>, the parameters keep it. */
static void emit_outlined(const cgen *g, int k, const cn_ll_stmt *s) {
  cn_sbuf fn = {0};
  cgen h = *g;
  h.out = &fn;
  cn_sbuf_printf(&fn, "static void cn_range_%d(", k);
  each_env_entry(g, &fn, env_param);
  cn_sbuf_puts(&fn, "int64_t cn_lo, int64_t cn_hi) {\n");
  each_env_entry(g, &fn, env_unused);
  const char *var = sym_name(g, s->u.loop.sym);
  cn_sbuf_printf(&fn, "  for (int64_t %s = cn_lo; %s < cn_hi; ++%s) {\n", var, var, var);
  g->par->inside = true;
  emit_loop_body(&h, 1, s);
  g->par->inside = false;
  cn_sbuf_puts(&fn, "  }\n}\n");
  cn_sbuf_printf(&fn, "struct cn_env_%d {\n", k);
  each_env_entry(g, &fn, env_field);
  cn_sbuf_puts(&fn, "  int64_t cn_from;\n};\n");
  cn_sbuf_printf(&fn, "static void cn_body_%d(void *cn_envp, int64_t cn_lo, int64_t cn_hi) {\n", k);
  cn_sbuf_printf(&fn, "  const struct cn_env_%d *cn_env = cn_envp;\n  cn_range_%d(", k, k);
  each_env_entry(g, &fn, env_arg);
  cn_sbuf_puts(&fn, "cn_env->cn_from + cn_lo, cn_env->cn_from + cn_hi);\n}\n");
  cn_sbuf_puts(&g->par->outlined, text_of(&fn));
  if (fn.failed) g->par->outlined.failed = true;
  cn_sbuf_free(&fn);
}

static void emit_parallel(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int k = g->par->count++;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "{ /* parallel */\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "const int64_t cn_from = ");
  emit_range_side(g, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, "cn_max_i64");
  cn_sbuf_puts(sb, ", cn_to = ");
  emit_range_side(g, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, "cn_min_i64");
  cn_sbuf_puts(sb, ";\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "struct cn_env_%d cn_env = {", k);
  each_env_entry(g, sb, env_init);
  cn_sbuf_puts(sb, ".cn_from = cn_from};\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "if (cn_from < cn_to && cn_par)\n");
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "cn_par->pool_for(cn_par->pool, cn_to - cn_from, cn_body_%d, &cn_env);\n", k);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "else if (cn_from < cn_to)\n");
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "cn_body_%d(&cn_env, 0, cn_to - cn_from);\n", k);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  emit_outlined(g, k, s);
}

/* The loop a CN_LL_FLAT loop's body consists of (loops.h: its whole body, directly or alone in a
 * sequence). */
static const cn_ll_stmt *flat_inner(const cn_ll_stmt *outer) {
  const cn_ll_stmt *body = outer->u.loop.body;
  if (body->kind == CN_LL_SEQ && body->u.seq.count == 1) body = body->u.seq.items[0];
  CN_ASSERT(body->kind == CN_LL_FOR);
  return body;
}

/* A CN_LL_FLAT pair as one loop under the inner loop's name over the product of the extents:
 * every access of the pair advances by (inner extent) * (inner stride) with the outer variable,
 * so its offset with the outer term dropped and the inner variable running over the product is
 * the offset of the same point (the element-wise nest over [128, 10]: one loop of 1280). */
static void emit_flat(const cgen *g, int depth, const cn_ll_stmt *outer) {
  cn_sbuf *sb = g->out;
  const cn_ll_stmt *inner = flat_inner(outer);
  const char *var = sym_name(g, inner->u.loop.sym);
  if (inner->u.loop.marks & CN_LL_VECTOR) {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "#pragma omp simd\n");
  }
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "for (int64_t %s = 0; %s < %lld; ++%s) { /* %s and %s as one loop */\n", var,
                 var, (long long)(outer->u.loop.to * inner->u.loop.to), var,
                 sym_name(g, outer->u.loop.sym), var);
  cgen h = *g;
  h.flat_outer = outer;
  emit_loop_body(&h, depth, inner);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

static void emit_stmt(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) emit_stmt(g, depth, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT:
    cn_sbuf_indent(sb, depth);
    emit_comment(sb, s->u.comment ? s->u.comment : "");
    return;
  case CN_LL_FOR: {
    if ((s->u.loop.marks & CN_LL_PARALLEL) && g->par && !g->par->inside) {
      emit_parallel(g, depth, s);
      return;
    }
    if (s->u.loop.marks & CN_LL_FLAT) {
      emit_flat(g, depth, s);
      return;
    }
    if (cn_cgen_max_reduction(g, depth, s)) return;
    const char *var = sym_name(g, s->u.loop.sym);
    /* A vector-marked loop's iterations are independent and its accesses unit-stride (loops.h):
     * the pragma lets the compiler vectorize it without proving that itself; the body is emitted
     * unchanged (no reassociation: one lane computes one cell exactly as the scalar loop). */
    if (s->u.loop.marks & CN_LL_VECTOR) {
      cn_sbuf_indent(sb, depth);
      cn_sbuf_puts(sb, "#pragma omp simd\n");
    }
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "for (int64_t %s = ", var);
    emit_range_side(g, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, "cn_max_i64");
    cn_sbuf_printf(sb, "; %s < ", var);
    emit_range_side(g, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, "cn_min_i64");
    cn_sbuf_printf(sb, "; ++%s) {\n", var);
    emit_loop_body(g, depth, s);
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
    return;
  }
  case CN_LL_IF: emit_guard(g, depth, s); return;
  case CN_LL_SET: emit_set(g, depth, s); return;
  case CN_LL_SET_VEC: emit_set_vec(g, depth, s); return;
  case CN_LL_GEMM: cn_cgen_gemm(g, depth, s); return;
  case CN_LL_LET: emit_let(g, depth, s); return;
  }
  CN_ASSERT(!"unknown statement kind");
}

void cn_cgen_stmt(const cgen *g, int depth, const cn_ll_stmt *s) {
  emit_stmt(g, depth, s);
}

/* The C type of a buffer, without restrict: "const float *" unless `written`. */
static void print_buffer_type(const cgen *g, cn_sbuf *sb, int param, bool written) {
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf_printf(sb, "%s%s *", written ? "" : "const ", cn_prec_table[prec].store_c);
}

/* The type of a parameter of the routine's function, const when no statement stores into it. */
static void print_param_type(const cgen *g, cn_sbuf *sb, int param) {
  print_buffer_type(g, sb, param, g->written[param]);
}

/* The signature of the routine's function; a routine with outlined loops takes the pool too. */
static void emit_signature(const cgen *g) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf_printf(sb, "static void %s_body(", proc->name);
  for (int k = 0; k < proc->n_params; k++) {
    if (k > 0) cn_sbuf_puts(sb, ", ");
    print_param_type(g, sb, k);
    cn_sbuf_printf(sb, "restrict %s", g->param_names[k]);
  }
  for (int i = 0; i < proc->n_free_syms; i++)
    cn_sbuf_printf(sb, "%sint64_t %s", proc->n_params + i > 0 ? ", " : "",
                   sym_name(g, proc->free_syms[i]));
  if (g->par)
    cn_sbuf_printf(sb, "%sconst cn_par_t *cn_par", proc->n_params + proc->n_free_syms ? ", " : "");
  else if (proc->n_params + proc->n_free_syms == 0)
    cn_sbuf_puts(sb, "void");
  cn_sbuf_puts(sb, ") {\n");
}

/* An entry point `<name><suffix>(buffers, syms<extra>)` calling the routine's function, which
 * gets `par` last when the routine outlines loops. */
static void emit_entry(const cgen *g, const char *suffix, const char *extra, const char *par) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf_printf(sb, "void %s_entry%s(void *const *buffers, const int64_t *syms%s);\n", proc->name,
                 suffix, extra);
  cn_sbuf_printf(sb, "void %s_entry%s(void *const *buffers, const int64_t *syms%s) {\n", proc->name,
                 suffix, extra);
  if (proc->n_params == 0) cn_sbuf_puts(sb, "  (void)buffers;\n");
  if (proc->n_free_syms == 0) cn_sbuf_puts(sb, "  (void)syms;\n");
  cn_sbuf_printf(sb, "  %s_body(", proc->name);
  for (int k = 0; k < proc->n_params; k++) {
    if (k > 0) cn_sbuf_puts(sb, ", ");
    cn_sbuf_putc(sb, '(');
    print_param_type(g, sb, k);
    cn_sbuf_printf(sb, ")buffers[%d]", k);
  }
  for (int i = 0; i < proc->n_free_syms; i++)
    cn_sbuf_printf(sb, "%ssyms[%d]", proc->n_params + i > 0 ? ", " : "", i);
  if (g->par) cn_sbuf_printf(sb, "%s%s", proc->n_params + proc->n_free_syms ? ", " : "", par);
  cn_sbuf_puts(sb, ");\n}\n");
}

/* The pool's call table, as generated code sees it: a function with parallel loops takes one. */
static void emit_par_type(cn_sbuf *sb) {
  cn_sbuf_puts(sb, "/* the runtime's pool (cn_parallel of src/backend/backend.h) */\n"
                   "#include <stddef.h>\n"
                   "typedef struct {\n"
                   "  void (*pool_for)(void *pool, int64_t n,\n"
                   "                   void (*fn)(void *env, int64_t lo, int64_t hi), void *env);\n"
                   "  void *pool;\n"
                   "  void *(*scratch)(void *pool, size_t bytes);\n"
                   "} cn_par_t;\n");
}

static void emit_routine(const cgen *g) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf body = {0};
  cgen h = *g;
  if (g->par) {
    h.out = &body; /* the outlined functions come first */
  } else {
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    emit_signature(g);
  }
  for (int k = 0; k < proc->n_params; k++) /* e.g. a Tile contraction no valid point reaches */
    if (!g->accessed[k])
      cn_sbuf_printf(h.out, "  (void)%s; /* not accessed */\n", g->param_names[k]);
  emit_stmt(&h, 1, proc->body);
  if (g->par) {
    emit_par_type(sb);
    cn_sbuf_puts(sb, text_of(&g->par->outlined));
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    emit_signature(g);
    cn_sbuf_puts(sb, text_of(&body));
    if (body.failed) sb->failed = true;
    cn_sbuf_free(&body);
  }
  cn_sbuf_puts(sb, "}\n");
  emit_entry(g, "", "", "NULL");
  if (g->par) emit_entry(g, "_par", ", const cn_par_t *par", "par");
}

/* ---- Routines as kernels ----
 * A C compiler's time grows faster than linearly with the size of a function (gcc -O3 on the ~500
 * loop nests of a 25-layer MLP's training step: 27 s as one function, 6 s as one function per
 * nest), while a model's routine repeats a few nests over and over (every layer's matmul, bias,
 * activation, gradients, SGD steps: 21 distinct nests there, 0.3 s as kernels and steps). So a
 * routine of more than CGEN_STEP_STATEMENTS top-level statements becomes kernels — one static
 * function per distinct top-level statement, shared by every statement that differs from it only by
 * the buffers and static indices it names — called from steps of at most CGEN_STEP_STATEMENTS
 * statements each, which the entry point calls in order. Kernels and steps are noinline: the
 * compiler would otherwise inline them back into one function. Two statements share a kernel when
 * they print the same text with their buffers, static indices and loop variables renamed by order
 * of first appearance (the key, never compiled): strides, margins, constants, precisions and
 * loop marks are part of that text, so a shared kernel computes each statement exactly and
 * outlines the same loops for each. A kernel's text is its first statement's, under that
 * statement's names. A kernel whose statement has a parallel loop takes the pool as a last
 * parameter cn_par and outlines the loop (see "Parallel loops": the environment is the kernel's
 * buffers and static indices and the loop variables around the loop), its outlined functions
 * emitted just before it; the steps calling such kernels take cn_par too, and the routine exports
 * <name>_entry_par passing the caller's pool, <name>_entry passing NULL. Smaller routines stay
 * one function. */

#define CGEN_STEP_STATEMENTS 32

/* The buffers (with whether they are stored into), static indices and loop variables a statement
 * or a step names, in order of first appearance. A mark equal to `stamp` tells that the entity
 * was seen in the current statement or step; `at` is then its position in the list. */
typedef struct {
  int *params;
  bool *writes;
  int n_params, cap_params, cap_writes;
  cn_symbol *statics, *loops;
  int n_statics, cap_statics, n_loops, cap_loops;
  int *param_mark, *param_at; /* per param of the routine */
  int *sym_mark;              /* per position in the routine's symbol list */
  int stamp;
} uses;

static bool uses_init(const cgen *g, uses *u) {
  size_t n_params = (size_t)(g->proc->n_params > 0 ? g->proc->n_params : 1);
  size_t n_syms = (size_t)(g->symbols.n > 0 ? g->symbols.n : 1);
  u->param_mark = cn_alloc(g->ctx, sizeof(int) * n_params);
  u->param_at = cn_alloc(g->ctx, sizeof(int) * n_params);
  u->sym_mark = cn_alloc(g->ctx, sizeof(int) * n_syms);
  u->stamp = 1;
  return u->param_mark && u->param_at && u->sym_mark;
}

/* Starts a new statement or step: nothing seen yet. */
static void uses_clear(uses *u) {
  u->n_params = u->n_statics = u->n_loops = 0;
  u->stamp++;
}

static bool use_param(const cgen *g, uses *u, int param, bool write) {
  if (u->param_mark[param] != u->stamp) {
    if (!cn_arena_grow(g->ctx, (void **)&u->params, &u->cap_params, u->n_params + 1, sizeof(int)) ||
        !cn_arena_grow(g->ctx, (void **)&u->writes, &u->cap_writes, u->n_params + 1, sizeof(bool)))
      return false;
    u->param_mark[param] = u->stamp;
    u->param_at[param] = u->n_params;
    u->params[u->n_params] = param;
    u->writes[u->n_params++] = false;
  }
  u->writes[u->param_at[param]] |= write;
  return true;
}

static bool use_symbol(const cgen *g, uses *u, cn_symbol sym, bool loop) {
  int slot = sym_slot(g, sym);
  if (u->sym_mark[slot] == u->stamp) return true;
  cn_symbol **list = loop ? &u->loops : &u->statics;
  int *n = loop ? &u->n_loops : &u->n_statics, *cap = loop ? &u->cap_loops : &u->cap_statics;
  if (!cn_arena_grow(g->ctx, (void **)list, cap, *n + 1, sizeof(cn_symbol))) return false;
  u->sym_mark[slot] = u->stamp;
  (*list)[(*n)++] = sym;
  return true;
}

/* A symbol an index reads before any loop of the statement bound it is a static index. */
static bool use_index(const cgen *g, uses *u, const cn_index *idx) {
  if (idx->kind == CN_IDX_FIXED) return true;
  int terms = idx->kind == CN_IDX_ITER ? 1 : idx->n_terms;
  for (int t = 0; t < terms; t++)
    if (!use_symbol(g, u, idx->syms[t], false)) return false;
  return true;
}

static bool use_access(const cgen *g, uses *u, int param, const cn_index *idx, bool write) {
  if (!use_param(g, u, param, write)) return false;
  for (int d = 0; d < g->proc->params[param].node->rank; d++)
    if (!use_index(g, u, &idx[d])) return false;
  return true;
}

static bool use_expr(const cgen *g, uses *u, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: return use_access(g, u, e->u.get.param, e->u.get.idx, false);
  case CN_LE_CONST: return true;
  case CN_LE_INDEX: return use_index(g, u, &e->u.index);
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (cn_op_c_reads(e->u.op.op, e->prec, a) && !use_expr(g, u, e->u.op.args[a])) return false;
    return true;
  }
  CN_ASSERT(!"unknown expression kind");
  return false;
}

/* A loop's bounds read outer variables and static indices; its own variable is bound below. */
static bool use_stmt(const cgen *g, uses *u, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!use_stmt(g, u, s->u.seq.items[i])) return false;
    return true;
  case CN_LL_COMMENT: return true;
  case CN_LL_FOR:
    for (int k = 0; k < s->u.loop.n_lower; k++)
      if (!use_index(g, u, &s->u.loop.lower[k].expr)) return false;
    for (int k = 0; k < s->u.loop.n_upper; k++)
      if (!use_index(g, u, &s->u.loop.upper[k].expr)) return false;
    return use_symbol(g, u, s->u.loop.sym, true) && use_stmt(g, u, s->u.loop.body);
  case CN_LL_IF:
    for (int c = 0; c < s->u.guard.n_conds; c++)
      if (!use_index(g, u, &s->u.guard.conds[c].expr)) return false;
    return use_stmt(g, u, s->u.guard.body);
  case CN_LL_SET:
    return use_access(g, u, s->u.set.param, s->u.set.idx, true) && use_expr(g, u, s->u.set.value);
  case CN_LL_SET_VEC:
    return use_access(g, u, s->u.vec.param, s->u.vec.idx, true) && use_expr(g, u, s->u.vec.arg);
  case CN_LL_GEMM: return use_stmt(g, u, s->u.gemm.nest);
  case CN_LL_LET:
    return use_access(g, u, s->u.let.param, s->u.let.idx, false) &&
           use_symbol(g, u, s->u.let.sym, true) && use_stmt(g, u, s->u.let.body);
  }
  CN_ASSERT(!"unknown statement kind");
  return false;
}

/* A kernel's parameters under g's names: the statement's buffers, then its static indices, then
 * the pool when the statement has a parallel loop. */
static void print_kernel_params(const cgen *g, cn_sbuf *sb, const uses *u, bool parallel) {
  for (int k = 0; k < u->n_params; k++) {
    cn_prec prec = g->proc->params[u->params[k]].node->prec;
    cn_sbuf_printf(sb, "%s%s%s *restrict %s", k ? ", " : "", u->writes[k] ? "" : "const ",
                   cn_prec_table[prec].store_c, g->param_names[u->params[k]]);
  }
  for (int k = 0; k < u->n_statics; k++)
    cn_sbuf_printf(sb, "%sint64_t %s", u->n_params + k ? ", " : "", sym_name(g, u->statics[k]));
  if (parallel)
    cn_sbuf_printf(sb, "%sconst cn_par_t *cn_par", u->n_params + u->n_statics ? ", " : "");
  else if (u->n_params + u->n_statics == 0)
    cn_sbuf_puts(sb, "void");
}

/* The marks of the loops of s, in the order its text prints the loops: part of a kernel's key.
 * The key is printed without outlining, where a parallel loop's text is that of an unmarked loop:
 * its parameters tell whether a statement takes the pool, but not which of its loops is
 * outlined, so without the marks statements parallel on different loops would share a kernel
 * outlining the first one's loop. */
static void print_marks(cn_sbuf *sb, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) print_marks(sb, s->u.seq.items[i]);
    return;
  case CN_LL_FOR:
    cn_sbuf_printf(sb, " %u", s->u.loop.marks);
    print_marks(sb, s->u.loop.body);
    return;
  case CN_LL_IF: print_marks(sb, s->u.guard.body); return;
  case CN_LL_GEMM: print_marks(sb, s->u.gemm.nest); return;
  case CN_LL_LET: print_marks(sb, s->u.let.body); return;
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return;
  }
  CN_ASSERT(!"unknown statement kind");
}

typedef struct {
  cgen keyed;     /* the routine's cgen with positional names, printing into `key` */
  cn_sbuf key;    /* the current statement's key */
  cn_map kernels; /* key -> int * (the kernel's number) */
  int n_kernels, n_steps, in_step;
  const char **positional[3]; /* "@b<k>", "@s<k>", "@v<k>": never C, so never ambiguous */
  int cap_positional[3];
  cn_sbuf kernel_text, step_text, calls; /* kernels, finished steps, the current step's calls */
  cn_sbuf entry_calls;                   /* the entry point's calls of the finished steps */
  cn_sbuf decls;                         /* each kernel's declaration */
  cn_sbuf gemm_preamble;                 /* the GEMM preamble the kernels need (par) */
  size_t *kernel_end; /* per kernel: where its text (outlined functions, then it) ends */
  int cap_kernel_end;
  bool step_par; /* a call of the current step passes the pool */
  cgen_par par;  /* the outlining of the kernels' parallel loops */
  uses stmt, step;
} splitter;

/* Empties a builder for reuse, keeping its memory. */
static void sbuf_clear(cn_sbuf *sb) {
  sb->len = 0;
  if (sb->data) sb->data[0] = '\0';
}

/* The k-th positional name of a kind (0 buffers, 1 static indices, 2 loop variables). */
static const char *positional_name(cn_ctx *ctx, splitter *sp, int kind, int k) {
  if (k >= sp->cap_positional[kind]) {
    int old = sp->cap_positional[kind];
    if (!cn_arena_grow(ctx, (void **)&sp->positional[kind], &sp->cap_positional[kind], k + 1,
                       sizeof(char *)))
      return NULL;
    for (int i = old; i < sp->cap_positional[kind]; i++) sp->positional[kind][i] = NULL;
  }
  if (!sp->positional[kind][k]) {
    char name[24];
    snprintf(name, sizeof name, "@%c%d", "bsv"[kind], k);
    sp->positional[kind][k] = cn_strdup(ctx, name);
  }
  return sp->positional[kind][k];
}

/* The number of the kernel computing s (whose names are in sp->stmt), emitted when new, after
 * the outlined functions of its parallel loops when `parallel`. */
static cn_status kernel_of(const cgen *g, splitter *sp, const cn_ll_stmt *s, bool parallel,
                           int *number) {
  cn_ctx *ctx = g->ctx;
  const uses *u = &sp->stmt;
  for (int k = 0; k < u->n_params; k++)
    if (!(sp->keyed.param_names[u->params[k]] = positional_name(ctx, sp, 0, k))) return ctx->status;
  for (int k = 0; k < u->n_statics; k++)
    if (!(sp->keyed.sym_names[sym_slot(g, u->statics[k])] = positional_name(ctx, sp, 1, k)))
      return ctx->status;
  for (int k = 0; k < u->n_loops; k++)
    if (!(sp->keyed.sym_names[sym_slot(g, u->loops[k])] = positional_name(ctx, sp, 2, k)))
      return ctx->status;
  sbuf_clear(&sp->key);
  print_kernel_params(&sp->keyed, &sp->key, u, parallel);
  cn_sbuf_putc(&sp->key, '\n');
  emit_stmt(&sp->keyed, 1, s);
  cn_sbuf_puts(&sp->key, "marks:");
  print_marks(&sp->key, s);
  if (sp->key.failed)
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory generating C for routine '%s'", g->proc->name);
  const int *known = cn_map_get(&sp->kernels, sp->key.data);
  if (known) {
    *number = *known;
    return CN_OK;
  }
  const char *key = cn_strdup(ctx, sp->key.data);
  int *fresh = cn_alloc(ctx, sizeof *fresh);
  if (!key || !fresh) return ctx->status;
  *fresh = *number = sp->n_kernels++;
  if (!cn_map_put(ctx, &sp->kernels, key, fresh)) return ctx->status;
  cn_sbuf kernel = {0};
  cgen named = *g;
  named.out = &kernel;
  if (parallel) { /* the environment: the kernel's parameters */
    sp->par.params = u->params;
    sp->par.writes = u->writes;
    sp->par.n_params = u->n_params;
    sp->par.statics = u->statics;
    sp->par.n_statics = u->n_statics;
    named.par = &sp->par;
  }
  cn_sbuf_printf(&kernel, "CN_KERNEL void cn_kernel_%d(", *number);
  print_kernel_params(&named, &kernel, u, parallel);
  cn_sbuf_puts(&kernel, ")");
  cn_sbuf_puts(&sp->decls, text_of(&kernel));
  cn_sbuf_puts(&sp->decls, ";\n");
  cn_sbuf_puts(&kernel, " {\n");
  emit_stmt(&named, 1, s);
  cn_sbuf_puts(&kernel, "}\n");
  if (kernel.failed || sp->par.outlined.failed) sp->kernel_text.failed = true;
  cn_sbuf_puts(&sp->kernel_text, text_of(&sp->par.outlined));
  cn_sbuf_puts(&sp->kernel_text, text_of(&kernel));
  sbuf_clear(&sp->par.outlined);
  cn_sbuf_free(&kernel);
  if (!cn_arena_grow(ctx, (void **)&sp->kernel_end, &sp->cap_kernel_end, sp->n_kernels,
                     sizeof *sp->kernel_end))
    return ctx->status;
  sp->kernel_end[*number] = sp->kernel_text.len;
  return CN_OK;
}

/* Closes the current step: its function takes what its calls pass from the entry point's arrays
 * (under the reserved names cn_buffers and cn_syms, which no buffer or symbol can take), and the
 * pool when a call passes it on to a kernel with parallel loops. */
static void end_step(const cgen *g, splitter *sp) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = &sp->step_text;
  const uses *st = &sp->step;
  cn_sbuf_printf(&sp->entry_calls, "  cn_step_%d(buffers, syms%s);\n", sp->n_steps,
                 sp->step_par ? ", par" : "");
  cn_sbuf_printf(sb,
                 "CN_NOINLINE static void cn_step_%d(void *const *cn_buffers, "
                 "const int64_t *cn_syms%s) {\n",
                 sp->n_steps++, sp->step_par ? ", const cn_par_t *cn_par" : "");
  if (st->n_params == 0) cn_sbuf_puts(sb, "  (void)cn_buffers;\n");
  if (st->n_statics == 0) cn_sbuf_puts(sb, "  (void)cn_syms;\n");
  for (int k = 0; k < st->n_params; k++) {
    int param = st->params[k];
    cn_sbuf_printf(sb, "  %s%s *%s = cn_buffers[%d];\n", st->writes[k] ? "" : "const ",
                   cn_prec_table[proc->params[param].node->prec].store_c, g->param_names[param],
                   param);
  }
  for (int k = 0; k < st->n_statics; k++) {
    int slot = 0;
    while (slot < proc->n_free_syms && proc->free_syms[slot] != st->statics[k]) slot++;
    CN_ASSERT(slot < proc->n_free_syms); /* a symbol no loop binds is a static index */
    cn_sbuf_printf(sb, "  const int64_t %s = cn_syms[%d];\n", sym_name(g, st->statics[k]), slot);
  }
  if (sp->calls.failed) sb->failed = true;
  cn_sbuf_puts(sb, sp->calls.data ? sp->calls.data : "");
  cn_sbuf_puts(sb, "}\n");
  sbuf_clear(&sp->calls);
  uses_clear(&sp->step);
  sp->in_step = 0;
  sp->step_par = false;
}

/* Top-level statements in order (nested sequences flattened): a comment goes into the current
 * step, any other statement becomes a call of its kernel. */
static cn_status split_stmt(const cgen *g, splitter *sp, const cn_ll_stmt *s) {
  if (s->kind == CN_LL_SEQ) {
    for (int i = 0; i < s->u.seq.count; i++) {
      cn_status status = split_stmt(g, sp, s->u.seq.items[i]);
      if (status != CN_OK) return status;
    }
    return CN_OK;
  }
  if (s->kind == CN_LL_COMMENT) {
    cn_sbuf_indent(&sp->calls, 1);
    emit_comment(&sp->calls, s->u.comment ? s->u.comment : "");
    return CN_OK;
  }
  uses *u = &sp->stmt;
  uses_clear(u);
  int number = 0;
  bool parallel = has_mark(s, CN_LL_PARALLEL);
  if (!use_stmt(g, u, s)) return g->ctx->status;
  cn_status status = kernel_of(g, sp, s, parallel, &number);
  if (status != CN_OK) return status;
  cn_sbuf_printf(&sp->calls, "  cn_kernel_%d(", number);
  for (int k = 0; k < u->n_params; k++) {
    cn_sbuf_printf(&sp->calls, "%s%s", k ? ", " : "", g->param_names[u->params[k]]);
    if (!use_param(g, &sp->step, u->params[k], u->writes[k])) return g->ctx->status;
  }
  for (int k = 0; k < u->n_statics; k++) {
    cn_sbuf_printf(&sp->calls, "%s%s", u->n_params + k ? ", " : "", sym_name(g, u->statics[k]));
    if (!use_symbol(g, &sp->step, u->statics[k], false)) return g->ctx->status;
  }
  if (parallel) cn_sbuf_puts(&sp->calls, u->n_params + u->n_statics ? ", cn_par" : "cn_par");
  sp->step_par = sp->step_par || parallel;
  cn_sbuf_puts(&sp->calls, ");\n");
  if (++sp->in_step == CGEN_STEP_STATEMENTS) end_step(g, sp);
  return CN_OK;
}

static int count_statements(const cn_ll_stmt *s) {
  if (s->kind == CN_LL_COMMENT) return 0;
  if (s->kind != CN_LL_SEQ) return 1;
  int n = 0;
  for (int i = 0; i < s->u.seq.count; i++) n += count_statements(s->u.seq.items[i]);
  return n;
}

/* ---- Routines in pieces ----
 * gcc -O3's time stays linear in a routine of kernels, but one compiler process uses one core: a
 * convnet's training step (170 KB of kernels) took 3 s. So a routine of kernels with more than
 * 2 * CGEN_PIECE_BYTES of text is also laid out in CN_PIECES pieces of about equal text (at
 * most CN_CGEN_MAX_PIECES), which the backend compiles at the same time, one process each (the file
 * with -DCN_PIECE=k: the shared head, the kernels of piece k and, in piece 0, the steps and entry
 * points), then links; without CN_PIECE the file is one translation unit as any other. Kernels
 * are CN_KERNEL: static in one unit, extern with hidden visibility in pieces, declared in the
 * shared head; what a kernel outlines stays static beside it, and the GEMM preamble goes into
 * the shared head. The split depends on the text only (the count on its size; each kernel, the
 * largest first, to the piece with the least text, ties to the lowest; piece 0 starts with the
 * steps' text), never on the machine, so text and cache key are the same everywhere. */
#define CGEN_PIECE_BYTES 32768

int cn_cgen_pieces(const char *source) {
  const char *at = strstr(source, "\n#define CN_PIECES ");
  int n = at ? atoi(at + strlen("\n#define CN_PIECES ")) : 1;
  return n >= 2 && n <= CN_CGEN_MAX_PIECES ? n : 1;
}

/* piece[k]: the piece of kernel k (0 .. the count returned - 1; NULL when one piece). */
static int assign_pieces(cn_ctx *ctx, const splitter *sp, int **piece) {
  size_t total = sp->kernel_text.len + sp->step_text.len;
  int n = (int)(total / CGEN_PIECE_BYTES);
  *piece = NULL;
  if (n > CN_CGEN_MAX_PIECES) n = CN_CGEN_MAX_PIECES;
  if (n < 2 || sp->n_kernels < 2) return 1;
  if (n > sp->n_kernels) n = sp->n_kernels;
  int *at = cn_alloc(ctx, sizeof *at * (size_t)sp->n_kernels);
  bool *placed = cn_alloc(ctx, sizeof *placed * (size_t)sp->n_kernels);
  if (!at || !placed) return -1;
  memset(placed, 0, sizeof *placed * (size_t)sp->n_kernels);
  size_t load[CN_CGEN_MAX_PIECES] = {sp->step_text.len};
  for (int done = 0; done < sp->n_kernels; done++) {
    int largest = -1;
    size_t largest_size = 0;
    for (int k = 0; k < sp->n_kernels; k++) {
      size_t size = sp->kernel_end[k] - (k ? sp->kernel_end[k - 1] : 0);
      if (!placed[k] && (largest < 0 || size > largest_size)) largest = k, largest_size = size;
    }
    int least = 0;
    for (int p = 1; p < n; p++)
      if (load[p] < load[least]) least = p;
    at[largest] = least;
    load[least] += largest_size;
    placed[largest] = true;
  }
  *piece = at;
  return n;
}

/* The text of the kernels of one piece, in their order. */
static void emit_piece(cn_sbuf *sb, const splitter *sp, const int *piece, int p) {
  const char *text = text_of(&sp->kernel_text);
  for (int k = 0; k < sp->n_kernels; k++) {
    size_t from = k ? sp->kernel_end[k - 1] : 0;
    if (piece[k] == p) cn_sbuf_printf(sb, "%.*s", (int)(sp->kernel_end[k] - from), text + from);
  }
}

/* The routine as kernels, steps and an entry point. With a parallel mark the entry point is
 * <name>_entry_par, passing the pool down to the steps that need it, and <name>_entry calls it
 * with NULL (every loop on the caller's thread), as a short routine's entries do. */
static cn_status emit_kernels(const cgen *g) {
  cn_ctx *ctx = g->ctx;
  const cn_ll_proc *proc = g->proc;
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  size_t n_syms = (size_t)(g->symbols.n > 0 ? g->symbols.n : 1);
  splitter sp = {.keyed = *g, .kernels = {.strings = true}};
  sp.keyed.out = &sp.key;
  sp.par.gemm_preamble = &sp.gemm_preamble;
  sp.keyed.param_names = cn_alloc(ctx, sizeof(char *) * n_params);
  sp.keyed.sym_names = cn_alloc(ctx, sizeof(char *) * n_syms);
  sp.par.scope = cn_alloc(ctx, sizeof(cn_symbol) * n_syms);
  cn_status status = CN_OK;
  if (!sp.keyed.param_names || !sp.keyed.sym_names || !sp.par.scope || !uses_init(g, &sp.stmt) ||
      !uses_init(g, &sp.step))
    status = ctx->status;
  if (status == CN_OK) status = split_stmt(g, &sp, proc->body);
  if (status == CN_OK && (sp.in_step > 0 || sp.calls.len > 0)) end_step(g, &sp);
  int *piece = NULL, pieces = status == CN_OK ? assign_pieces(ctx, &sp, &piece) : 1;
  if (pieces < 0) status = ctx->status;
  cn_sbuf *sb = g->out;
  if (status == CN_OK) {
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    cn_sbuf_puts(sb, "#if defined(__GNUC__)\n#define CN_NOINLINE __attribute__((noinline))\n"
                     "#else\n#define CN_NOINLINE\n#endif\n");
    if (pieces > 1)
      cn_sbuf_printf(sb,
                     "/* compiled in pieces (-DCN_PIECE=0 .. CN_PIECES - 1, linked together) or "
                     "as one unit */\n#define CN_PIECES %d\n#ifdef CN_PIECE\n"
                     "#define CN_KERNEL CN_NOINLINE __attribute__((visibility(\"hidden\")))\n"
                     "#else\n#define CN_KERNEL CN_NOINLINE static\n#endif\n",
                     pieces);
    else
      cn_sbuf_puts(sb, "#define CN_KERNEL CN_NOINLINE static\n");
    bool parallel = sp.par.count > 0;
    if (parallel) emit_par_type(sb);
    if (sp.kernel_text.failed || sp.step_text.failed || sp.entry_calls.failed || sp.decls.failed ||
        sp.gemm_preamble.failed)
      sb->failed = true;
    cn_sbuf_puts(sb, text_of(&sp.gemm_preamble));
    if (pieces > 1) {
      cn_sbuf_puts(sb, text_of(&sp.decls));
      for (int p = 1; p < pieces; p++) {
        cn_sbuf_printf(sb, "#if !defined(CN_PIECE) || CN_PIECE == %d\n", p);
        emit_piece(sb, &sp, piece, p);
        cn_sbuf_puts(sb, "#endif\n");
      }
      cn_sbuf_puts(sb, "#if !defined(CN_PIECE) || CN_PIECE == 0\n");
      emit_piece(sb, &sp, piece, 0);
    } else {
      cn_sbuf_puts(sb, text_of(&sp.kernel_text));
    }
    cn_sbuf_puts(sb, text_of(&sp.step_text));
    const char *entry_params = "(void *const *buffers, const int64_t *syms)";
    const char *par_params = "(void *const *buffers, const int64_t *syms, const cn_par_t *par)";
    const char *params = parallel ? par_params : entry_params, *suffix = parallel ? "_par" : "";
    cn_sbuf_printf(sb, "void %s_entry%s%s;\n", proc->name, suffix, params);
    cn_sbuf_printf(sb, "void %s_entry%s%s {\n", proc->name, suffix, params);
    cn_sbuf_puts(sb, text_of(&sp.entry_calls));
    cn_sbuf_puts(sb, "}\n");
    if (parallel) {
      cn_sbuf_printf(sb, "void %s_entry%s;\n", proc->name, entry_params);
      cn_sbuf_printf(sb, "void %s_entry%s {\n", proc->name, entry_params);
      cn_sbuf_printf(sb, "  %s_entry_par(buffers, syms, NULL);\n}\n", proc->name);
    }
    if (pieces > 1) cn_sbuf_puts(sb, "#endif\n");
  }
  cn_sbuf_free(&sp.key);
  cn_sbuf_free(&sp.kernel_text);
  cn_sbuf_free(&sp.step_text);
  cn_sbuf_free(&sp.calls);
  cn_sbuf_free(&sp.entry_calls);
  cn_sbuf_free(&sp.decls);
  cn_sbuf_free(&sp.gemm_preamble);
  cn_sbuf_free(&sp.par.outlined);
  return status;
}

cn_status cn_cgen_source(cn_ctx *ctx, const cn_ll_proc *proc, cn_sbuf *out) {
  CN_ASSERT(proc && proc->name && proc->body && proc->n_params >= 0 && proc->n_free_syms >= 0);
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  cn_sbuf body = {0}; /* what follows the prelude, written first: it says what the prelude needs */
  cgen g = {.ctx = ctx, .proc = proc, .out = &body};
  g.param_names = cn_alloc(ctx, sizeof(char *) * n_params);
  g.strides = cn_alloc(ctx, sizeof(*g.strides) * n_params);
  g.written = cn_alloc(ctx, sizeof(bool) * n_params);
  g.accessed = cn_alloc(ctx, sizeof(bool) * n_params);
  if (!g.param_names || !g.strides || !g.written || !g.accessed) return ctx->status;
  for (int k = 0; k < proc->n_params; k++) {
    CN_ASSERT(proc->params[k].node != NULL);
    cn_node_strides(proc->params[k].node, g.strides[k]);
  }
  mark_stmt(&g, proc->body);
  cn_status status = cn_ll_symbols_of(ctx, proc, &g.symbols);
  if (status == CN_OK) status = name_params(&g);
  if (status == CN_OK) status = name_symbols(&g);
  if (status != CN_OK) return status;

  /* Flags without -fopenmp-simd make `#pragma omp simd` unknown: harmless, but -Wall -Werror in
   * the user's flags must not turn it into an error. Only procedures with vector marks say so. */
  if (has_mark(proc->body, CN_LL_VECTOR))
    cn_sbuf_puts(&body, "#pragma GCC diagnostic ignored \"-Wunknown-pragmas\"\n");
  if (count_statements(proc->body) > CGEN_STEP_STATEMENTS) {
    status = emit_kernels(&g);
  } else if (has_mark(proc->body, CN_LL_PARALLEL)) {
    /* the environment: the routine function's parameters, all buffers and free symbols */
    int *params = cn_alloc(ctx, sizeof(int) * n_params);
    cgen_par par = {.scope = cn_alloc(ctx, sizeof(cn_symbol) * (size_t)(g.symbols.n + 1)),
                    .params = params,
                    .writes = g.written,
                    .n_params = proc->n_params,
                    .statics = proc->free_syms,
                    .n_statics = proc->n_free_syms};
    for (int k = 0; params && k < proc->n_params; k++) params[k] = k;
    if (!par.scope || !params) status = ctx->status;
    g.par = &par;
    if (status == CN_OK) emit_routine(&g);
    if (par.outlined.failed) body.failed = true;
    cn_sbuf_free(&par.outlined);
  } else {
    emit_routine(&g);
  }

  cn_sbuf_printf(out, "/* Generated by cannl: routine %s. Do not edit. */\n", proc->name);
  cn_sbuf_puts(out, "#include <stdint.h>\n"); /* <tgmath.h> when used: cgen_prelude.c */
  /* The prelude's helpers may still outnumber what a routine calls (a whole family behind one
   * macro): they must not trip -Wall -Werror in the user's flags (clang warns about unused static
   * inline functions of a main file). */
  cn_sbuf_puts(out, "#pragma GCC diagnostic push\n"
                    "#pragma GCC diagnostic ignored \"-Wunused-function\"\n");
  if (status == CN_OK) status = cn_cgen_prelude(ctx, out, &body);
  cn_sbuf_puts(out, "#pragma GCC diagnostic pop\n");
  cn_sbuf_puts(out, text_of(&body));
  if (body.failed) out->failed = true;
  cn_sbuf_free(&body);
  if (status != CN_OK) return status;
  if (out->failed)
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory generating C for routine '%s'", proc->name);
  return CN_OK;
}
